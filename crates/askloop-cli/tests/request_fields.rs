//! Fields of a stream request, with real processes on one SQLite file:
//! `requireToolApproval` holds when `askloop approve` and `askloop resume`
//! continue the run in processes of their own, and `request_overrides` in
//! `askloop.toml` lets requests replace one agent's instructions only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::{Value, json};

mod common;

use common::{Env, SUSPENDED, Serve, Serving, chunks, code, stderr};

/// Two questions, one per model turn, then the answers.
const ASK_TWICE: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?"}}]},
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which region?"}}]},
  {"text": "Model saw: {{toolResults}}"}
]}"#;

fn serve(env: &Env, config: &Path) -> Serving {
    Serve::in_dir(env.dir.path()).config(config).start()
}

fn pending_kind(env: &Env, run_id: &str) -> Value {
    let shown = env.show(run_id);
    assert_eq!(shown["status"], "suspended", "{shown}");
    shown["pending"][0]["kind"].clone()
}

#[tokio::test]
async fn require_tool_approval_holds_when_other_processes_continue_the_run() {
    let env = Env::new();
    env.script("deploy.json", ASK_TWICE);
    let config = env.dir.path().join("askloop.toml");
    std::fs::write(&config, "[agents.deployer]\nscript = \"deploy.json\"\n").unwrap();
    let server = serve(&env, &config);
    let body = reqwest::Client::new()
        .post(server.url("/api/agents/deployer/stream"))
        .json(&json!({"messages": "Deploy the app.", "requireToolApproval": true}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    drop(server);
    let last = chunks(&body).pop().unwrap();
    assert_eq!(last["type"], "tool-call-approval", "{body}");
    let run_id = last["runId"].as_str().unwrap().to_owned();

    // Approved in a process of its own: ask_user runs and asks.
    let config = config.to_str().unwrap();
    let out = env.run(&["--config", config, "approve", &run_id]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    assert_eq!(pending_kind(&env, &run_id), "suspended");

    // Answered in another: the next call waits for approval again.
    let out = env.run(&["--config", config, "resume", &run_id, "--answer", "staging"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    assert_eq!(pending_kind(&env, &run_id), "approval");
}

#[tokio::test]
async fn request_overrides_in_askloop_toml_let_requests_replace_only_that_agents_instructions() {
    let env = Env::new();
    env.script("deploy.json", ASK_TWICE);
    let config = env.dir.path().join("askloop.toml");
    std::fs::write(
        &config,
        "[agents.open]\nscript = \"deploy.json\"\nrequest_overrides = [\"instructions\"]\n\
         [agents.closed]\nscript = \"deploy.json\"\n",
    )
    .unwrap();
    let server = serve(&env, &config);
    let client = reqwest::Client::new();
    let stream = |agent: &str| {
        client
            .post(server.url(&format!("/api/agents/{agent}/stream")))
            .json(&json!({"messages": "Deploy the app.", "instructions": "Be brief."}))
            .send()
    };
    assert_eq!(stream("open").await.unwrap().status(), 200);
    let refused = stream("closed").await.unwrap();
    assert_eq!(refused.status(), 400);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["error"]["fields"], json!(["instructions"]), "{error}");
}

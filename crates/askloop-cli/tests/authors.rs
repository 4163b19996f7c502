//! Who answered, end to end with real processes on one SQLite file: answers
//! through the CLI, over HTTP with two named tokens and through the page
//! behind a proxy each show their author and interface, in
//! `GET /api/runs/{runId}` and in `askloop runs show --json`; and
//! `askloop runs expire`, with no server running, resolves an expired
//! question of a server's run and records who did.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

mod common;

use common::{Env, SUSPENDED, Serving, code, stderr};

const SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?"}}]},
  {"text": "Model saw: {{toolResults}}"}
]}"#;

const ALICE: &str = "secret-of-alice";
const BOB: &str = "secret-of-bob";

fn serve(env: &Env, config: &Path) -> Serving {
    let mut cmd = env.cmd();
    cmd.env_remove("ASKLOOP_API_TOKEN")
        .env("ALICE_TOKEN", ALICE)
        .env("BOB_TOKEN", BOB)
        .args(["serve", "--addr", "127.0.0.1:0", "--config"])
        .arg(config);
    Serving::start(cmd)
}

/// Starts a run of `deployer` over HTTP and returns its id.
async fn start_run(client: &reqwest::Client, server: &Serving, token: Option<&str>) -> String {
    server.ask(client, "deployer", token).await.run_id
}

async fn api_run(client: &reqwest::Client, server: &Serving, token: Option<&str>, run_id: &str) -> Value {
    let mut request = client.get(server.url(&format!("/api/runs/{run_id}")));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

fn only_resolution(run: &Value) -> Value {
    let resolutions = run["resolutions"].as_array().unwrap();
    assert_eq!(resolutions.len(), 1, "{run}");
    resolutions[0].clone()
}

#[tokio::test]
async fn answers_through_the_cli_two_named_tokens_and_the_page_show_their_author_in_the_api_and_runs_show() {
    let env = Env::new();
    let script = env.script("deploy.json", SCRIPT);
    let config = env.dir.path().join("askloop.toml");
    std::fs::write(
        &config,
        r#"author_header = "X-Forwarded-User"

[agents.deployer]
script = "deploy.json"

[[tokens]]
name = "alice"
token_env = "ALICE_TOKEN"

[[tokens]]
name = "bob"
token_env = "BOB_TOKEN"
"#,
    )
    .unwrap();

    // Through the CLI, as the login user.
    let out = env
        .cmd()
        .env("USER", "dave")
        .args(["run", "--script", script.to_str().unwrap(), "Deploy the app."])
        .output()
        .unwrap();
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    let by_cli = env.only_run_id();
    let out = env
        .cmd()
        .env("USER", "dave")
        .args(["resume", &by_cli, "--answer", "staging"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // Over HTTP with alice's token, and on the page with bob's token behind
    // a proxy that names carol.
    let server = serve(&env, &config);
    let client = reqwest::Client::new();
    let by_alice = start_run(&client, &server, Some(ALICE)).await;
    let by_carol = start_run(&client, &server, Some(BOB)).await;
    let answered = client
        .post(server.url("/api/agents/deployer/resume-stream"))
        .bearer_auth(ALICE)
        .json(&json!({"runId": by_alice, "resumeData": "production"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    assert!(answered.text().await.unwrap().contains("finish"));
    let answered = client
        .post(server.url("/api/agents/deployer/resume-stream"))
        .bearer_auth(BOB)
        .header("X-Forwarded-User", "carol")
        .header("X-Askloop-Interface", "page")
        .json(&json!({"runId": by_carol, "resumeData": "qa"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    assert!(answered.text().await.unwrap().contains("finish"));

    for (run_id, via, by) in [
        (&by_cli, "cli", "dave"),
        (&by_alice, "http", "alice"),
        (&by_carol, "page", "carol"),
    ] {
        let from_api = only_resolution(&api_run(&client, &server, Some(BOB), run_id).await);
        let from_cli = only_resolution(&env.show(run_id));
        for resolution in [&from_api, &from_cli] {
            assert_eq!(resolution["kind"], "answered", "{run_id}: {resolution}");
            assert_eq!(resolution["via"], via, "{run_id}: {resolution}");
            assert_eq!(resolution["by"], by, "{run_id}: {resolution}");
        }
        assert_eq!(from_api, from_cli, "the API and the CLI show the same record");
    }
}

#[tokio::test]
async fn askloop_runs_expire_without_a_server_resolves_an_expired_question_and_records_who_did() {
    let env = Env::new();
    env.script("deploy.json", SCRIPT);
    let config = env.dir.path().join("askloop.toml");
    std::fs::write(
        &config,
        "[agents.deployer]\nscript = \"deploy.json\"\n[agents.deployer.time_limits]\nask_user = \"1s\"\n",
    )
    .unwrap();
    let client = reqwest::Client::new();
    let mut server = serve(&env, &config);
    let run_id = start_run(&client, &server, None).await;
    let run = api_run(&client, &server, None, &run_id).await;
    let expires_at = run["pendingToolCalls"][0]["expiresAt"].as_str().unwrap().to_owned();
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);

    // No process runs while the limit passes (the wait is for the stored
    // instant, not a guess).
    let at = chrono::DateTime::parse_from_rfc3339(&expires_at).unwrap().to_utc();
    let left = (at - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(50)).await;
    assert_eq!(env.show(&run_id)["status"], "suspended", "nothing expired it yet");

    let out = env
        .cmd()
        .env("USER", "erin")
        .args(["runs", "expire", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains(&run_id), "{}", stderr(&out));

    let shown = env.show(&run_id);
    assert_eq!(shown["status"], "completed", "{shown}");
    let resolution = only_resolution(&shown);
    assert_eq!(resolution["kind"], "expired");
    assert_eq!(resolution["via"], "cli");
    assert_eq!(resolution["by"], "erin");
    let last = shown["messages"].as_array().unwrap().last().unwrap().to_string();
    assert!(
        last.contains("Model saw: No answer came within the time limit"),
        "{last}"
    );
    let again = env.run(&["runs", "expire", "--config", config.to_str().unwrap()]);
    assert!(stderr(&again).contains("No expired questions"), "{}", stderr(&again));
}

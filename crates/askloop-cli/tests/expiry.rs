//! Time limits end to end, with real `askloop serve` processes and a real
//! SQLite file: a question expires while no process runs, the next server
//! resolves it (the model's next turn sees that no answer came), the run
//! records who resolved it, and a late answer gets 409 saying when it
//! expired.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

mod common;

use common::{BIN, Serve, Serving};

const SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?"}}]},
  {"text": "Model saw: {{toolResults}}"}
]}"#;

fn start(dir: &Path) -> Serving {
    Serve::in_dir(dir).config(dir.join("askloop.toml")).start()
}

async fn run_of(client: &reqwest::Client, server: &Serving, run_id: &str) -> Value {
    client
        .get(server.url(&format!("/api/runs/{run_id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_question_expires_while_no_server_runs_and_the_next_one_resolves_it_and_refuses_late_answers() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("deploy.json"), SCRIPT).unwrap();
    std::fs::write(
        dir.path().join("askloop.toml"),
        "[agents.deployer]\nscript = \"deploy.json\"\n[agents.deployer.time_limits]\nask_user = \"1s\"\n",
    )
    .unwrap();
    let client = reqwest::Client::new();

    let mut first = start(dir.path());
    let run_id = first.ask(&client, "deployer", None).await.run_id;
    let run = run_of(&client, &first, &run_id).await;
    let call = &run["pendingToolCalls"][0];
    let call_id = call["toolCallId"].as_str().unwrap().to_owned();
    let expires_at = call["expiresAt"].as_str().unwrap().to_owned();
    assert_eq!(call["suspendPayload"]["metadata"]["expiresAt"], expires_at);
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    // No process runs while the limit passes (the wait is for the stored
    // instant, not a guess).
    let at = chrono::DateTime::parse_from_rfc3339(&expires_at).unwrap().to_utc();
    let left = (at - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(50)).await;

    // The next server resolves it at start; wait for the stored result.
    let second = start(dir.path());
    let mut run = run_of(&client, &second, &run_id).await;
    for _ in 0..600 {
        if run["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        run = run_of(&client, &second, &run_id).await;
    }
    assert_eq!(run["status"], "completed", "{run}");
    let resolution = &run["resolutions"][0];
    assert_eq!(resolution["kind"], "expired");
    assert_eq!(resolution["via"], "server");
    assert_eq!(resolution["toolCallId"], call_id.as_str());
    let last = run["messages"].as_array().unwrap().last().unwrap().to_string();
    assert!(
        last.contains("Model saw: No answer came within the time limit"),
        "{last}"
    );

    let late = client
        .post(second.url("/api/agents/deployer/resume-stream"))
        .json(&json!({"runId": run_id, "toolCallId": call_id, "resumeData": "staging"}))
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), 409);
    let refusal: Value = late.json().await.unwrap();
    assert_eq!(refusal["error"]["code"], "expired", "{refusal}");
    assert!(refusal.to_string().contains("expired at"), "{refusal}");

    // Naming no call, over HTTP and from the command line, the answer is
    // as late: refused saying when the question showed it would expire.
    let late = client
        .post(second.url("/api/agents/deployer/resume-stream"))
        .json(&json!({"runId": run_id, "resumeData": "staging"}))
        .send()
        .await
        .unwrap();
    let refusal: Value = late.json().await.unwrap();
    assert_eq!(refusal["error"]["code"], "expired", "{refusal}");
    let expired = format!("tool call {call_id} of run {run_id} expired at {expires_at}");
    assert!(refusal.to_string().contains(&expired), "{refusal}");
    for args in [
        vec!["resume", run_id.as_str(), "--answer", "staging"],
        vec!["decline", run_id.as_str()],
        vec!["approve", run_id.as_str()],
    ] {
        let out = Command::new(BIN)
            .env("ASKLOOP_DB", dir.path().join("runs.db"))
            .current_dir(dir.path())
            .args(&args)
            .args(["--config", "askloop.toml"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(&expired), "{args:?}: {stderr}");
    }
}

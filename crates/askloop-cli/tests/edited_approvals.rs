//! Arguments a person edits before approving meet the agent's rules as the
//! model's arguments do, on every route that takes an edit: a real
//! `askloop serve` with `write_file` and a `deny` rule from `askloop.toml`,
//! the model proposing an allowed path, and edits that move it into the
//! denied folder (as written, and spelled through `..`). Each is refused
//! with the rule's name and reason (422 `denied_by_rule`), nothing is
//! written, and the call still waits; an edit the rules let through runs.
//! The model's call id holds `::`, as some models' ids do, so the chat
//! route's approval id (`<runId>::<toolCallId>`) is read by the part's own
//! call id.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

mod common;

use common::{Env, Serve, Serving};

/// One `write_file` call of an allowed path, with an id holding `::`; then
/// says what the call returned.
const SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "write_file", "id": "fc::write::1", "args": {"path": "notes/plan.md", "content": "plan"}}]},
  {"text": "Done: {{toolResults}}"}
]}"#;

const CALL: &str = "fc::write::1";

fn config(env: &Env) -> std::path::PathBuf {
    env.script("writer.json", SCRIPT);
    let config = env.dir.path().join("askloop.toml");
    std::fs::write(
        &config,
        r#"
[agents.writer]
script = "writer.json"
tools = ["write_file"]
write_dir = "files"

[[agents.writer.rules]]
name = "no-secrets"
tool = "write_file"
arg = "/path"
glob = "secret/**"
decision = "deny"
reason = "nothing goes into secret/"
"#,
    )
    .unwrap();
    config
}

fn serve(env: &Env, config: &std::path::Path) -> Serving {
    Serve::in_dir(env.dir.path()).config(config).start()
}

/// Starts the writer's run and returns its id; it waits on `CALL`.
async fn start(client: &reqwest::Client, server: &Serving) -> String {
    let body = client
        .post(server.url("/api/agents/writer/stream"))
        .json(&json!({"messages": "Write the plan."}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let approval = body
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .find(|chunk| chunk["type"] == "tool-call-approval")
        .unwrap_or_else(|| panic!("no approval asked: {body}"));
    assert_eq!(approval["payload"]["toolCallId"], CALL);
    approval["runId"].as_str().unwrap().to_owned()
}

/// Every route that approves with edited arguments, as (path, body) for
/// run `run` and arguments `args`.
fn edits(run: &str, args: &Value) -> Vec<(String, Value)> {
    let ui = json!([
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Write the plan."}]},
        {"id": "a1", "role": "assistant", "parts": [{"type": "step-start"},
            {"type": "tool-write_file", "toolCallId": CALL, "state": "approval-responded",
             "input": {"path": "notes/plan.md", "content": "plan"},
             "approval": {"id": format!("{run}::{CALL}"), "approved": true}}]}
    ]);
    vec![
        (
            "/api/agents/writer/approve-tool-call".to_owned(),
            json!({"runId": run, "toolCallId": CALL, "args": args}),
        ),
        (
            "/api/agents/writer/approve-tool-call-generate".to_owned(),
            json!({"runId": run, "toolCallId": CALL, "args": args}),
        ),
        (
            format!("/api/runs/{run}/decisions"),
            json!({"decisions": [{"toolCallId": CALL, "approved": true, "args": args}]}),
        ),
        (
            "/chat/writer".to_owned(),
            json!({"messages": ui, "approvalArgs": {format!("{run}::{CALL}"): args}}),
        ),
    ]
}

async fn run_of(client: &reqwest::Client, server: &Serving, run: &str) -> Value {
    let response = client
        .get(server.url(&format!("/api/runs/{run}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test]
async fn edited_arguments_a_deny_rule_covers_are_refused_on_every_route_and_nothing_is_written() {
    let env = Env::new();
    let config = config(&env);
    let server = serve(&env, &config);
    let client = reqwest::Client::new();
    let run = start(&client, &server).await;
    let files = env.dir.path().join("files");

    for path in ["secret/keys.txt", "notes/../secret/keys.txt", "./secret/keys.txt"] {
        let args = json!({"path": path, "content": "stolen"});
        for (route, body) in edits(&run, &args) {
            let response = client.post(server.url(&route)).json(&body).send().await.unwrap();
            let status = response.status().as_u16();
            let refused: Value = response.json().await.unwrap();
            assert_eq!(
                (status, refused["error"]["code"].as_str()),
                (422, Some("denied_by_rule")),
                "{route} with {path}: {refused}"
            );
            let message = refused["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("no-secrets") && message.contains("nothing goes into secret/"),
                "{route}: {message}"
            );
        }
    }
    assert!(!files.join("secret").exists(), "no denied edit wrote anything");
    let waiting = run_of(&client, &server, &run).await;
    assert_eq!(waiting["status"], "suspended", "{waiting}");
    assert_eq!(waiting["pendingToolCalls"][0]["toolCallId"], CALL, "{waiting}");
    assert_eq!(waiting["resolutions"], json!([]), "nothing was decided: {waiting}");

    // An edit the rules let through runs with the edited arguments, through
    // the chat route and its `::`-holding approval id.
    let allowed = json!({"path": "notes/final.md", "content": "final"});
    let (route, body) = edits(&run, &allowed).pop().unwrap();
    let response = client.post(server.url(&route)).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let stream = response.text().await.unwrap();
    assert!(stream.contains("\"type\":\"finish\""), "{stream}");
    assert_eq!(std::fs::read_to_string(files.join("notes/final.md")).unwrap(), "final");
    let done = run_of(&client, &server, &run).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["resolutions"][0]["edit"]["edited"], allowed, "{done}");
}

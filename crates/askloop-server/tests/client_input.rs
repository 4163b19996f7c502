//! What a client sends that a store keeps or looks up (run ids, thread ids,
//! answers, reasons, tool call ids, filters, cursors) gets the same answer
//! on every store: kept and read back exactly, or refused with a 4xx that
//! says why. Never a 5xx, and never the whole of a huge input echoed back.
//!
//! Runs on SQLite always, and on PostgreSQL too with
//! `ASKLOOP_TEST_DATABASE_URL` (PostgreSQL refuses NUL in text and the
//! escape `\u0000` in jsonb, and limits index keys and NOTIFY payloads to a
//! few kilobytes).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use askloop::{Agent, AskUser, RunQuery, RunStore, url_path_segment};
use askloop_store::conformance::{drop_schema, postgres_test_url, unique_schema_name};
use askloop_store::{PostgresOptions, PostgresStore, SqliteStore};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::*;
use serde_json::{Value, json};

/// A free-text question, then the answer echoed.
const FREE_TEXT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Anything to add?"}}]},
  {"text": "Noted: {{toolResults}}"}
]}"#;

/// A server with the `assistant`, `approver` and `notes` (free text) agents
/// on one store.
struct OnStore {
    name: &'static str,
    server: TestServer,
    store: Arc<dyn RunStore>,
    postgres: Option<(PostgresStore, String, String)>,
    _dir: Option<tempfile::TempDir>,
}

impl OnStore {
    async fn finish(self) {
        drop(self.server);
        if let Some((store, url, schema)) = self.postgres {
            store.close().await;
            drop_schema(&url, &schema).await;
        }
    }

    async fn runs(&self) -> usize {
        self.store.list(&RunQuery::default()).await.unwrap().len()
    }
}

/// One server per store this machine has: SQLite, and PostgreSQL when
/// `ASKLOOP_TEST_DATABASE_URL` is set.
async fn on_every_store(test: &str) -> Vec<OnStore> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn RunStore> = Arc::new(SqliteStore::open(dir.path().join("runs.db")).await.unwrap());
    let mut servers = vec![OnStore {
        name: "sqlite",
        server: serve(&sqlite).await,
        store: sqlite,
        postgres: None,
        _dir: Some(dir),
    }];
    if let Some(url) = postgres_test_url(test) {
        let schema = unique_schema_name();
        let postgres = PostgresStore::connect_with(&url, PostgresOptions::default().schema(&schema).max_connections(4))
            .await
            .unwrap();
        let store: Arc<dyn RunStore> = Arc::new(postgres.clone());
        servers.push(OnStore {
            name: "postgres",
            server: serve(&store).await,
            store,
            postgres: Some((postgres, url, schema)),
            _dir: None,
        });
    }
    servers
}

async fn serve(store: &Arc<dyn RunStore>) -> TestServer {
    let notes = Agent::builder("notes")
        .model(scripted(FREE_TEXT))
        .tool(AskUser::new())
        .store(Arc::clone(store))
        .build()
        .unwrap();
    TestServer::start(vec![assistant(store), approver(store), notes], Arc::clone(store)).await
}

/// Run ids each store would have taken differently, or not at all.
fn bad_run_ids() -> Vec<(&'static str, String)> {
    vec![
        ("a NUL", "run\u{0}1".to_owned()),
        ("a DEL", "run\u{7f}".to_owned()),
        ("257 bytes", "r".repeat(257)),
        ("9 KB", "r".repeat(9 * 1024)),
        ("60 KB", "r".repeat(60 * 1024)),
        ("a leading space", " run".to_owned()),
        ("a trailing space", "run ".to_owned()),
    ]
}

/// A refusal of a run id: 400 `bad_request` naming the rule, with a short
/// body whatever the id's length.
async fn assert_refused_id(response: reqwest::Response, what: &str) {
    let (status, error) = error_of(response).await;
    assert_eq!(
        (status, error["code"].as_str().unwrap()),
        (400, "bad_request"),
        "{what}: {error}"
    );
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("is refused"), "{what}: {message}");
    assert!(
        message.contains("a run id is 1 to 256 bytes of UTF-8"),
        "{what}: {message}"
    );
    assert!(message.len() < 600, "{what}: the message is {} bytes", message.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_ids_outside_the_rule_are_a_400_naming_it_on_every_route_and_every_store() {
    for on in on_every_store("run ids outside the rule").await {
        let server = &on.server;
        for (what, id) in bad_run_ids() {
            let what = format!("{} {what}", on.name);
            for (route, body) in [
                ("assistant/stream", json!({"messages": "hi", "runId": id})),
                ("assistant/generate", json!({"messages": "hi", "runId": id})),
                ("assistant/resume-stream", json!({"runId": id, "resumeData": "staging"})),
                ("approver/approve-tool-call", json!({"runId": id})),
                ("approver/decline-tool-call", json!({"runId": id, "reason": "no"})),
            ] {
                let response = server.post(&format!("/api/agents/{route}"), body).await;
                assert_refused_id(response, &format!("{what} {route}")).await;
            }
            let path = format!("/api/runs/{}", url_path_segment(&id));
            assert_refused_id(server.get(&path).await, &format!("{what} GET")).await;
            for action in ["cancel", "retry"] {
                let response = server.post(&format!("{path}/{action}"), json!({})).await;
                assert_refused_id(response, &format!("{what} {action}")).await;
            }
        }
        assert_eq!(on.runs().await, 0, "{}: no run was started", on.name);
        on.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_id_with_spaces_slashes_and_marks_is_kept_and_reached_through_its_encoded_path() {
    for on in on_every_store("run ids with spaces and slashes").await {
        let server = &on.server;
        let id = "a b/c?d#e<x> 運行";
        let started = server
            .post_sse("/api/agents/assistant/stream", json!({"messages": PROMPT, "runId": id}))
            .await;
        assert_eq!(started.first("tool-call-suspended")["runId"], id, "{}", on.name);
        let path = format!("/api/runs/{}", url_path_segment(id));
        let run: Value = server.get(&path).await.json().await.unwrap();
        assert_eq!(
            (run["runId"].as_str(), run["status"].as_str()),
            (Some(id), Some("suspended"))
        );
        let cancelled = server.post(&format!("{path}/cancel"), json!({})).await;
        assert_eq!(cancelled.status(), 200, "{}", on.name);
        on.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nul_characters_in_answers_reasons_and_messages_are_kept_exactly_on_every_store() {
    for on in on_every_store("NUL in client text").await {
        let server = &on.server;
        let text = "before\u{0}after \\u0000";
        let started = server
            .post_sse("/api/agents/notes/stream", json!({"messages": text}))
            .await;
        let suspended = started.first("tool-call-suspended");
        let run_id = suspended["runId"].as_str().unwrap().to_owned();
        let call = suspended["payload"]["toolCallId"].as_str().unwrap().to_owned();

        // A tool call id no call has: refused as not pending, not a store failure.
        let body = json!({"runId": run_id, "toolCallId": "call\u{0}1", "resumeData": text});
        let (status, error) = error_of(server.post("/api/agents/notes/resume-stream", body).await).await;
        assert_eq!(
            (status, error["code"].as_str().unwrap()),
            (409, "tool_call_not_pending"),
            "{}",
            on.name
        );

        let body = json!({"runId": run_id, "toolCallId": call, "resumeData": text});
        let answered = server.post_sse("/api/agents/notes/resume-stream", body).await;
        assert_eq!(answered.status, 200, "{}: {}", on.name, answered.body);
        assert_eq!(answered.text(), format!("Noted: User answered: {text}"), "{}", on.name);
        let run = stored_run(server, &run_id).await;
        assert_eq!(run["messages"][0]["content"], text, "{}", on.name);

        // A decline's reason, told to the model and stored.
        let (run_id, _) = approval_run(server).await;
        let body = json!({"runId": run_id, "reason": text});
        let declined = server.post_sse("/api/agents/approver/decline-tool-call", body).await;
        assert_eq!(declined.status, 200, "{}: {}", on.name, declined.body);
        let run = stored_run(server, &run_id).await;
        assert!(
            run["messages"].to_string().contains("before\\u0000after"),
            "{}: {run}",
            on.name
        );
        on.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thread_ids_filters_and_cursors_no_run_can_have_are_answered_alike_on_every_store() {
    for on in on_every_store("thread ids, filters and cursors").await {
        let server = &on.server;
        let body = json!({"messages": "hi", "threadId": "thread\u{0}1"});
        let (status, error) = error_of(server.post("/api/agents/assistant/stream", body).await).await;
        assert_eq!(status, 400, "{}: {error}", on.name);
        assert!(error["message"].as_str().unwrap().starts_with("thread id "), "{error}");

        // An agent id no run can have lists nothing.
        let listed = server.get("/api/runs?agentId=assistant%00x").await;
        assert_eq!(listed.status(), 200, "{}", on.name);
        let listed: Value = listed.json().await.unwrap();
        assert_eq!(listed["runs"], json!([]), "{}", on.name);

        // A cursor naming a run id no run can have was never given out.
        let cursor = URL_SAFE_NO_PAD.encode(json!({"t": "2026-12-04T10:00:00Z", "r": "run\u{0}1"}).to_string());
        let (status, error) = error_of(server.get(&format!("/api/runs?cursor={cursor}")).await).await;
        assert_eq!(
            (status, error["code"].as_str().unwrap()),
            (400, "bad_request"),
            "{}: {error}",
            on.name
        );
        assert_eq!(on.runs().await, 0, "{}", on.name);
        on.finish().await;
    }
}

#[tokio::test]
async fn a_cursor_that_is_not_one_the_server_gave_out_is_echoed_only_in_part() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let cursor = "c".repeat(5000);
    let (status, error) = error_of(server.get(&format!("/api/runs?cursor={cursor}")).await).await;
    assert_eq!(status, 400);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("pass the nextCursor of the previous page"),
        "{message}"
    );
    assert!(message.len() < 400, "the message is {} bytes", message.len());
}

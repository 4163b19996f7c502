//! Every time the server sends is written one way: RFC 3339 in UTC with
//! milliseconds (`2026-12-04T10:00:01.623Z`), as Mastra sends them. The
//! agents' clock stands at a time with microseconds, so a route that wrote
//! a time any other way (chrono's own form, microseconds, seconds) fails
//! here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use askloop::{Agent, AskUser, Clock, EventType, ManualClock, MemoryStore, RunStore, Subscription};
use askloop_server::links::{AnswerLinks, LinkKey, LinkSettings};
use askloop_server::{Server, ServerOptions};
use chrono::{DateTime, Utc};
use common::{APPROVE_SCRIPT, DEPLOY_SCRIPT, Sse, TestServer, scripted};
use serde_json::{Value, json};

const PUBLIC: &str = "https://askloop.example";
const HOOK: &str = "http://127.0.0.1:9/hook";

/// Every string in `value` that reads as an RFC 3339 time, with where it is.
fn times(value: &Value, at: &str, found: &mut Vec<(String, String)>) {
    match value {
        Value::String(text) if DateTime::parse_from_rfc3339(text).is_ok() => {
            found.push((at.to_owned(), text.clone()));
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                times(item, &format!("{at}[{i}]"), found);
            }
        }
        Value::Object(fields) => {
            for (name, field) in fields {
                times(field, &format!("{at}.{name}"), found);
            }
        }
        _ => {}
    }
}

/// Whether `text` is `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn in_millis(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 24
        && bytes[19] == b'.'
        && bytes[20..23].iter().all(u8::is_ascii_digit)
        && bytes[23] == b'Z'
        && DateTime::parse_from_rfc3339(text).is_ok()
}

struct World {
    server: TestServer,
    clock: Arc<ManualClock>,
}

async fn world() -> World {
    let start: DateTime<Utc> = "2026-12-04T10:00:01.623456Z".parse().unwrap();
    let clock = Arc::new(ManualClock::starting_at(start));
    let shared: Arc<dyn Clock> = clock.clone();
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::with_clock(Arc::clone(&shared)));
    let assistant = Agent::builder("assistant")
        .model(scripted(DEPLOY_SCRIPT))
        .tool(AskUser::new())
        .time_limit(Duration::from_secs(3600))
        .notify(Subscription::new(
            HOOK,
            [EventType::QuestionRaised, EventType::QuestionAnswered],
        ))
        .notify(Subscription::later(
            HOOK,
            Duration::from_secs(600),
            askloop::Notice::Reminder,
        ))
        .store(Arc::clone(&store))
        .clock(Arc::clone(&shared))
        .build()
        .unwrap();
    let tool = askloop::FunctionTool::builder("ask_approval")
        .description("Deploy.")
        .input_schema(json!({"type": "object"}))
        .requires_approval(true)
        .execute(|_input: Value, _ctx| async move { Ok(askloop::ToolOutput::text("done").into()) });
    let approver = Agent::builder("approver")
        .model(scripted(APPROVE_SCRIPT))
        .tool(tool)
        .store(Arc::clone(&store))
        .clock(Arc::clone(&shared))
        .build()
        .unwrap();
    let key = LinkKey::new("k1", b"k1-secret-of-at-least-thirty-two-chars".to_vec());
    let links = AnswerLinks::new(LinkSettings::new(key, []), PUBLIC);
    let server = Server::new(vec![assistant, approver], store)
        .unwrap()
        .options(ServerOptions::default().public_url(Some(PUBLIC.to_owned())))
        .links(links);
    World {
        server: TestServer::serve(server).await,
        clock,
    }
}

impl World {
    async fn get(&self, path: &str) -> Value {
        let response = self.server.get(path).await;
        assert_eq!(response.status(), 200, "GET {path}");
        response.json().await.unwrap()
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let response = self.server.post(path, body).await;
        assert_eq!(response.status(), 200, "POST {path}");
        response.json().await.unwrap()
    }

    /// A streamed answer, framed as Mastra frames it.
    async fn stream(&self, path: &str, body: Value) -> Sse {
        let sse = self.server.post_sse(path, body).await;
        assert_eq!(sse.status, 200, "POST {path}: {}", sse.body);
        sse
    }
}

#[tokio::test]
async fn every_route_sends_its_times_in_rfc3339_with_milliseconds() {
    let w = world().await;
    let mut read: Vec<(String, Value)> = Vec::new();

    // A question on a thread, waiting with a time limit, noticed by a
    // webhook now and a reminder later.
    let memory = json!({"thread": "t1", "resource": "ana"});
    let started = w
        .stream(
            "/api/agents/assistant/stream",
            json!({"messages": common::PROMPT, "memory": memory}),
        )
        .await;
    let run_id = started.first("tool-call-suspended")["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    read.push(("the started stream".into(), Value::Array(started.chunks)));
    read.push(("GET /api/runs".into(), w.get("/api/runs").await));
    read.push((
        "GET /api/agents/assistant/suspended-runs".into(),
        w.get("/api/agents/assistant/suspended-runs").await,
    ));

    // A link for it, read and revoked; a second one answers the question.
    let link = w.post(&format!("/api/runs/{run_id}/links"), json!({"to": "Ana"})).await;
    read.push(("POST /api/runs/{runId}/links".into(), link.clone()));
    let token_path = link["url"].as_str().unwrap().strip_prefix(PUBLIC).unwrap().to_owned();
    read.push((
        "GET /links/{token}/question".into(),
        w.get(&format!("{token_path}/question")).await,
    ));
    let link_id = link["linkId"].as_str().unwrap();
    read.push((
        "POST /api/links/{linkId}/revoke".into(),
        w.post(&format!("/api/links/{link_id}/revoke"), json!({})).await,
    ));
    read.push((
        "GET /api/runs/{runId}/links".into(),
        w.get(&format!("/api/runs/{run_id}/links")).await,
    ));

    w.clock.advance(Duration::from_micros(1_234_567));
    let resumed = w
        .stream(
            "/api/agents/assistant/resume-stream",
            json!({"runId": run_id, "resumeData": "staging"}),
        )
        .await;
    read.push(("the resumed stream".into(), Value::Array(resumed.chunks)));
    read.push((
        format!("GET /api/runs/{run_id}"),
        w.get(&format!("/api/runs/{run_id}")).await,
    ));
    read.push((
        "GET /api/runs/{runId}/deliveries".into(),
        w.get(&format!("/api/runs/{run_id}/deliveries")).await,
    ));
    read.push((
        "GET /api/memory/threads".into(),
        w.get("/api/memory/threads?resourceId=ana").await,
    ));
    read.push((
        "GET /api/memory/threads/{threadId}".into(),
        w.get("/api/memory/threads/t1?resourceId=ana").await,
    ));
    read.push((
        "GET /api/memory/threads/{threadId}/messages".into(),
        w.get("/api/memory/threads/t1/messages?resourceId=ana").await,
    ));

    // An approval that sticks, listed and revoked.
    let approval = w
        .stream(
            "/api/agents/approver/stream",
            json!({"messages": "Deploy", "memory": {"thread": "t2", "resource": "ana"}}),
        )
        .await;
    let approval_run = approval.first("tool-call-approval")["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    w.clock.advance(Duration::from_micros(2_345_678));
    w.stream(
        "/api/agents/approver/approve-tool-call",
        json!({"runId": approval_run, "always": "thread", "alwaysFor": "8h"}),
    )
    .await;
    let grants = w.get("/api/grants?resourceId=ana").await;
    let grant_id = grants["grants"][0]["id"].as_str().expect("the grant").to_owned();
    read.push(("GET /api/grants".into(), grants));
    read.push((
        "POST /api/grants/{grantId}/revoke".into(),
        w.post(&format!("/api/grants/{grant_id}/revoke"), json!({})).await,
    ));
    read.push((
        format!("GET /api/runs/{approval_run}"),
        w.get(&format!("/api/runs/{approval_run}")).await,
    ));

    let mut wrong = Vec::new();
    for (route, body) in &read {
        let mut found = Vec::new();
        times(body, "", &mut found);
        assert!(!found.is_empty(), "{route} sends a time: {body}");
        wrong.extend(
            found
                .into_iter()
                .filter(|(_, text)| !in_millis(text))
                .map(|(at, text)| format!("{route} {at}: {text}")),
        );
    }
    assert!(
        wrong.is_empty(),
        "times not in RFC 3339 with milliseconds:\n{}",
        wrong.join("\n")
    );

    // What the notifications' bodies carry: the event's time, a reminder's
    // due time, the call's time limit and the answer's resolution.
    let deliveries = w.get(&format!("/api/runs/{run_id}/deliveries")).await;
    let mut found = Vec::new();
    times(&deliveries, "", &mut found);
    for field in [
        "payload.timestamp",
        "payload.dueAt",
        "payload.data.expiresAt",
        "payload.data.resolution.at",
    ] {
        assert!(
            found.iter().any(|(at, _)| at.ends_with(field)),
            "the deliveries carry {field}: {found:?}"
        );
    }
}

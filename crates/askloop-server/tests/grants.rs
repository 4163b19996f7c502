//! Approvals that stick over HTTP: `always` on `approve-tool-call`, the
//! grants listed and revoked (`/api/grants`), each behind the caller's
//! walls.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use askloop::{Agent, FunctionTool, Interface, RunStore, ToolOutput};
use askloop_server::{ApiToken, ServerOptions};
use common::*;
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-0123456789abcdef";
const BOB: &str = "bob-secret-0123456789abcdef01";

/// A run on a new thread sends to a@example.com; the next run on the same
/// thread (two assistant messages of context) to b@example.com, the one
/// after to c@example.com.
fn mailer(store: &Arc<dyn RunStore>) -> (Agent, Arc<AtomicUsize>) {
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&sent);
    let send = FunctionTool::builder("send")
        .input_schema(json!({"type": "object", "properties": {"to": {"type": "string"}}}))
        .requires_approval(true)
        .execute(move |args: Value, _ctx| {
            let counter = Arc::clone(&counter);
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(ToolOutput::text(format!("sent to {}", args["to"])).into())
            }
        });
    let script = json!({"turns": [
        {"toolCalls": [{"id": "c1", "name": "send", "args": {"to": "a@example.com"}}]},
        {"text": "Sent: {{toolResults}}"},
        {"toolCalls": [{"id": "c2", "name": "send", "args": {"to": "b@example.com"}}]},
        {"text": "Sent again: {{toolResults}}"},
        {"toolCalls": [{"id": "c3", "name": "send", "args": {"to": "c@example.com"}}]},
        {"text": "Sent a third time: {{toolResults}}"}
    ]});
    let agent = Agent::builder("mailer")
        .model(scripted(&script.to_string()))
        .tool(send)
        .store(Arc::clone(store))
        .build()
        .unwrap();
    (agent, sent)
}

struct World {
    server: TestServer,
    sent: Arc<AtomicUsize>,
}

async fn world() -> World {
    let store = memory_store();
    let (agent, sent) = mailer(&store);
    let options = ServerOptions::default().tokens(vec![
        ApiToken::new("alice", ALICE).only_resources(vec!["alice".into()]),
        ApiToken::new("bob", BOB).only_resources(vec!["bob".into()]),
    ]);
    let server = TestServer::start_with(vec![agent], store, options).await;
    World { server, sent }
}

impl World {
    async fn send(&self, token: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .server
            .client
            .request(method, self.server.url(path))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text));
        (status, body)
    }

    /// Starts a run on alice's thread `thread`; the SSE body as text.
    async fn start(&self, thread: &str) -> String {
        let body = json!({"messages": "Send it", "memory": {"thread": thread, "resource": "alice"}});
        let (status, text) = self.send(ALICE, "POST", "/api/agents/mailer/stream", Some(body)).await;
        assert_eq!(status, 200, "{text}");
        text.as_str().unwrap().to_owned()
    }
}

fn run_id_of(sse: &str) -> String {
    let at = sse.find("\"runId\":\"").unwrap() + 9;
    sse[at..].split('"').next().unwrap().to_owned()
}

#[tokio::test]
async fn always_on_an_approval_lets_the_threads_later_calls_run_and_a_revoke_stops_it() {
    let w = world().await;
    let first = run_id_of(&w.start("t1").await);
    let approve = "/api/agents/mailer/approve-tool-call";

    // Mistakes are refused, naming what is accepted, and nothing runs.
    for (body, says) in [
        (json!({"runId": first, "always": "forever"}), "\"thread\""),
        (
            json!({"runId": first, "always": "thread", "alwaysFor": "soon"}),
            "alwaysFor",
        ),
        (json!({"runId": first, "alwaysSameArguments": true}), "go with `always`"),
        (
            json!({"runId": first, "always": "thread", "args": {"to": "x"}}),
            "cannot also stick",
        ),
        // A lifetime past a year (which once overflowed into one that never
        // ends) or none at all (one already over) names the range.
        (
            json!({"runId": first, "always": "thread", "alwaysFor": "99999999d"}),
            "from 1s to 366d",
        ),
        (
            json!({"runId": first, "always": "thread", "alwaysFor": "367d"}),
            "from 1s to 366d",
        ),
        (
            json!({"runId": first, "always": "thread", "alwaysFor": "0s"}),
            "from 1s to 366d",
        ),
        (
            json!({"runId": first, "always": "thread", "alwaysFor": "500ms"}),
            "from 1s to 366d",
        ),
    ] {
        let (status, error) = w.send(ALICE, "POST", approve, Some(body.clone())).await;
        assert_eq!(status, 400, "{body}: {error}");
        assert!(
            error["error"]["message"].as_str().unwrap().contains(says),
            "{body}: {error}"
        );
    }
    assert_eq!(w.sent.load(Ordering::SeqCst), 0);
    let (_, grants) = w.send(ALICE, "GET", "/api/grants?all=true", None).await;
    assert_eq!(grants["grants"], json!([]), "no refused approval made a grant");

    let body = json!({"runId": first, "always": "thread", "alwaysFor": "8h"});
    let (status, approved) = w.send(ALICE, "POST", approve, Some(body)).await;
    assert_eq!(status, 200, "{approved}");
    assert_eq!(w.sent.load(Ordering::SeqCst), 1);

    let (status, listed) = w.send(ALICE, "GET", "/api/grants", None).await;
    assert_eq!(status, 200, "{listed}");
    let grant = listed["grants"][0].clone();
    let id = format!("{first}:c1");
    assert_eq!(grant["id"], json!(id));
    assert_eq!(
        (&grant["tool"], &grant["scope"], &grant["threadId"], &grant["grantedBy"]),
        (
            &json!("send"),
            &json!("thread"),
            &json!("t1"),
            &json!({"via": "http", "by": "alice"})
        )
    );
    assert!(grant["expiresAt"].is_string(), "{grant}");

    // The next call on the thread runs without waiting.
    let later = w.start("t1").await;
    assert!(later.contains("Sent again: sent to"), "{later}");
    assert_eq!(w.sent.load(Ordering::SeqCst), 2);
    let (_, run) = w
        .send(ALICE, "GET", &format!("/api/runs/{}", run_id_of(&later)), None)
        .await;
    let resolution = &run["resolutions"][0];
    assert_eq!(
        (&resolution["via"], &resolution["by"], &resolution["grant"]["id"]),
        (&json!(Interface::Grant.as_str()), &json!("alice"), &json!(id)),
        "{run}"
    );

    // Bob sees none of alice's grants and cannot revoke them.
    let (status, _) = w.send(BOB, "GET", "/api/grants?resourceId=alice", None).await;
    assert_eq!(status, 403);
    let (status, bobs) = w.send(BOB, "GET", "/api/grants", None).await;
    assert_eq!((status, bobs["grants"].as_array().unwrap().len()), (200, 0), "{bobs}");
    let revoke = format!("/api/grants/{id}/revoke");
    let (status, error) = w.send(BOB, "POST", &revoke, None).await;
    assert_eq!(
        (status, error["error"]["code"].as_str()),
        (404, Some("unknown_grant")),
        "{error}"
    );

    let (status, revoked) = w.send(ALICE, "POST", &revoke, None).await;
    assert_eq!(status, 200, "{revoked}");
    assert_eq!(revoked["revokedBy"], json!({"via": "http", "by": "alice"}));
    let third = w.start("t1").await;
    assert!(
        third.contains("tool-call-approval"),
        "revoked: the call waits again: {third}"
    );
    assert_eq!(w.sent.load(Ordering::SeqCst), 2);
    let (_, live) = w.send(ALICE, "GET", "/api/grants", None).await;
    assert_eq!(live["grants"], json!([]), "revoked grants are not live");
    let (_, all) = w.send(ALICE, "GET", "/api/grants?all=true", None).await;
    assert_eq!(all["grants"][0]["id"], json!(id));
    let (status, _) = w.send(ALICE, "GET", "/api/grants?colour=red", None).await;
    assert_eq!(status, 400, "unknown parameters are refused");
}

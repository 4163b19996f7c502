//! Every request body `askloop serve` reads, sent to its router in process
//! (the same `Router` `askloop serve` serves; no socket, so a case stays
//! cheap).

use std::sync::Arc;

use askloop::{Agent, AskUser, FunctionTool, MemoryStore, RunStore, ScriptedModel, ToolOutput};
use askloop_server::Server;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

/// The routes that take a body; `{run}` is replaced by a run waiting on a
/// question (`assistant`) or on an approval (`approver`).
pub const ROUTES: [&str; 11] = [
    "/api/agents/assistant/stream",
    "/api/agents/assistant/generate",
    "/api/agents/assistant/resume-stream",
    "/api/agents/approver/resume-stream",
    "/api/agents/approver/approve-tool-call",
    "/api/agents/approver/decline-tool-call",
    "/api/agents/assistant/approve-tool-call",
    "/api/agents/approver/stream",
    "/api/agents/approver/generate",
    "/api/runs/{run}/cancel",
    "/api/agents/nobody/stream",
];

/// The first byte picks the route, the rest is the body. In the body,
/// `$RUN` stands for the id of a run that waits.
pub fn server_body(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    server_body_case(usize::from(pick) % ROUTES.len(), body);
}

/// A body to `ROUTES[route]` gets a 2xx (a stream read to its end) or a
/// 4xx whose JSON body says what was wrong; never a 5xx, never a panic.
pub fn server_body_case(route: usize, body: &[u8]) {
    let (router, assistant, approver) = fixture();
    crate::block_on(async move {
        let path = ROUTES[route % ROUTES.len()];
        let waiting = if path.contains("approver") {
            &approver
        } else {
            &assistant
        };
        let run_id = waiting
            .generate("Deploy the app.")
            .await
            .expect("the fixture run waits")
            .run_id;
        let body = replace(body, b"$RUN", run_id.as_bytes());
        let path = path.replace("{run}", &run_id);
        let request = Request::post(&path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.clone()))
            .expect("a request");
        let response = router.oneshot(request).await.expect("the router answers");
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("the body is read")
            .to_bytes();
        assert!(
            !status.is_server_error(),
            "{status} for {path} with body {:?}: {}",
            String::from_utf8_lossy(&body),
            String::from_utf8_lossy(&bytes)
        );
        if status.is_client_error() {
            let error: Value = serde_json::from_slice(&bytes).expect("an error body is JSON");
            let message = error["error"]["message"].as_str().unwrap_or_default();
            assert!(message.len() > 10, "a {status} that says nothing: {error}");
        }
    });
}

fn replace(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

const DEPLOY_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment should I deploy to?",
     "options": [{"label": "staging"}, {"label": "production"}], "selectionMode": "single_select"}}]},
  {"text": "Deploying to {{toolResults}}."}
]}"#;

const APPROVE_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "deploy", "args": {"environment": "staging"}}]},
  {"text": "Deployed: {{toolResults}}."}
]}"#;

/// One router and its two agents per thread, on one memory store.
fn fixture() -> (Router, Agent, Agent) {
    thread_local! {
        static FIXTURE: (Router, Agent, Agent) = {
            let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
            let assistant = Agent::builder("assistant")
                .model(Arc::new(ScriptedModel::from_json("deploy", DEPLOY_SCRIPT).expect("the script loads")))
                .tool(AskUser::new())
                .store(Arc::clone(&store))
                .build()
                .expect("the agent builds");
            let deploy = FunctionTool::builder("deploy")
                .description("Deploys (after approval).")
                .input_schema(json!({"type": "object", "properties": {"environment": {"type": "string"}}}))
                .requires_approval(true)
                .execute(|_input: Value, _ctx| async move { Ok(ToolOutput::text("done").into()) });
            let approver = Agent::builder("approver")
                .model(Arc::new(ScriptedModel::from_json("approve", APPROVE_SCRIPT).expect("the script loads")))
                .tool(deploy)
                .store(Arc::clone(&store))
                .build()
                .expect("the agent builds");
            let router = Server::new(vec![assistant.clone(), approver.clone()], store)
                .expect("the server is made")
                .router()
                .expect("the router is made");
            (router, assistant, approver)
        };
    }
    FIXTURE.with(|f| f.clone())
}

//! Helpers for the HTTP tests: a real server on a free loopback port, a
//! client, SSE reading, the recorded Mastra traces, and the agents of the
//! recorded scenario.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;

use askloop::store::{Layered, Next, StoreLayer, StoreRequest, StoreResponse};
use askloop::{Agent, AskUser, FunctionTool, MemoryStore, RunStore, ScriptedModel, StoreError, ToolOutput};
use askloop_server::{Server, ServerOptions};
/// Reads an SSE body after asserting it is framed byte for byte as Mastra
/// frames a stream.
pub use askloop_testkit::mastra::framed_chunks;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

mod calls;
#[allow(unused_imports)] // not every test file uses them
pub use calls::*;

/// The recorded scenario's model: one `ask_user` call with two options,
/// then `Deploying to <answer>.`
pub const DEPLOY_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment should I deploy to?",
     "options": [{"label": "staging"}, {"label": "production"}], "selectionMode": "single_select"}}]},
  {"text": "Deploying to {{toolResults}}."}
]}"#;

/// The recorded `approver` scenario: one call of a tool that needs approval.
pub const APPROVE_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_approval", "args": {"question": "Which environment should I deploy to?",
     "options": [{"label": "staging"}, {"label": "production"}], "selectionMode": "single_select"}}]},
  {"text": "Deploying to {{toolResults}}."}
]}"#;

pub fn scripted(script: &str) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::from_json("test-script", script).unwrap())
}

/// The `assistant` agent of the recorded traces (ask_user), on `store`.
pub fn assistant(store: &Arc<dyn RunStore>) -> Agent {
    Agent::builder("assistant")
        .name("Assistant")
        .instructions("You are a deployment assistant. Before deploying, always ask the user which environment to use with the ask_user tool.")
        .model(scripted(DEPLOY_SCRIPT))
        .tool(AskUser::new())
        .store(Arc::clone(store))
        .build()
        .unwrap()
}

/// The `approver` agent of the recorded traces (a tool that needs approval).
pub fn approver(store: &Arc<dyn RunStore>) -> Agent {
    let tool = FunctionTool::builder("ask_approval")
        .description("Deploy to the chosen environment (needs the user to approve first).")
        .input_schema(
            json!({"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}),
        )
        .requires_approval(true)
        .execute(|_input: Value, _ctx| async move { Ok(ToolOutput::text("staging-approved").into()) });
    Agent::builder("approver")
        .name("Approver")
        .instructions("You are a deployment assistant. Use the ask_approval tool to deploy.")
        .model(scripted(APPROVE_SCRIPT))
        .tool(tool)
        .store(Arc::clone(store))
        .build()
        .unwrap()
}

/// An agent `id` with `ask_user` whose model is the fake OpenAI server,
/// with no retries of its own, so one failing request fails the run.
pub fn agent_on(id: &str, server: &askloop_testkit::FakeServer, store: &Arc<dyn RunStore>) -> Agent {
    let base = server.openai_base_url();
    let env = move |name: &str| match name {
        "OPENAI_API_KEY" => Some("sk-test".to_owned()),
        "OPENAI_BASE_URL" => Some(base.clone()),
        _ => None,
    };
    let http = askloop_providers::HttpConfig {
        retry: askloop_providers::RetryPolicy {
            max_retries: 0,
            ..askloop_providers::RetryPolicy::default()
        },
        ..askloop_providers::HttpConfig::default()
    };
    let model = askloop_providers::from_spec_with("openai/gpt-4o-mini", env, http).unwrap();
    Agent::builder(id)
        .model(model)
        .tool(AskUser::new())
        .store(Arc::clone(store))
        .build()
        .unwrap()
}

pub fn memory_store() -> Arc<dyn RunStore> {
    Arc::new(MemoryStore::new())
}

/// A server running on a free loopback port until dropped (or stopped).
pub struct TestServer {
    pub addr: SocketAddr,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), askloop_server::ServerError>>>,
}

impl TestServer {
    pub async fn start(agents: Vec<Agent>, store: Arc<dyn RunStore>) -> TestServer {
        Self::start_with(agents, store, ServerOptions::default()).await
    }

    pub async fn start_with(agents: Vec<Agent>, store: Arc<dyn RunStore>, options: ServerOptions) -> TestServer {
        Self::serve(Server::new(agents, store).unwrap().options(options)).await
    }

    /// Serves `server`, set up as the test needs.
    pub async fn serve(server: Server) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(listener, async move {
            let _ = stopped.await;
        }));
        TestServer {
            addr,
            client: reqwest::Client::new(),
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).send().await.unwrap()
    }

    pub async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.client.post(self.url(path)).json(&body).send().await.unwrap()
    }

    /// POSTs and reads the whole SSE body.
    pub async fn post_sse(&self, path: &str, body: Value) -> Sse {
        let response = self.post(path, body).await;
        Sse::read(response).await
    }

    /// Sends the shutdown signal and waits for `serve` to return.
    pub async fn stop(mut self) -> Result<(), askloop_server::ServerError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.take().unwrap().await.unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A whole SSE response: status, headers, raw body and its chunks.
#[derive(Debug)]
pub struct Sse {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
    pub chunks: Vec<Value>,
}

impl Sse {
    pub async fn read(response: reqwest::Response) -> Sse {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.text().await.unwrap();
        let chunks = if status == 200 {
            framed_chunks(&body)
        } else {
            Vec::new()
        };
        Sse {
            status,
            headers,
            body,
            chunks,
        }
    }

    pub fn types(&self) -> Vec<String> {
        self.chunks
            .iter()
            .map(|c| c["type"].as_str().unwrap().to_owned())
            .collect()
    }

    pub fn first(&self, kind: &str) -> &Value {
        self.chunks
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} chunk in {:?}", self.types()))
    }

    pub fn text(&self) -> String {
        self.chunks
            .iter()
            .filter(|c| c["type"] == "text-delta")
            .map(|c| c["payload"]["text"].as_str().unwrap())
            .collect()
    }
}

/// One recorded exchange of the real Mastra server.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub method: String,
    pub path: String,
    pub request_body: Option<Value>,
    pub status: u16,
    pub response_headers: Value,
    pub response_body: String,
}

impl Exchange {
    /// The chunks of an SSE response.
    pub fn chunks(&self) -> Vec<Value> {
        framed_chunks(&self.response_body)
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.response_body).unwrap()
    }
}

/// The exchanges of one recorded scenario (`tests/fixtures/<name>.trace.jsonl`).
pub fn trace(name: &str) -> Vec<Exchange> {
    let path = format!("{}/tests/fixtures/{name}.trace.jsonl", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            let url = v["url"].as_str().unwrap();
            let path = url.splitn(4, '/').nth(3).map(|p| format!("/{p}")).unwrap();
            Exchange {
                method: v["method"].as_str().unwrap().to_owned(),
                path,
                request_body: v.get("request_body").cloned(),
                status: v["status"].as_u64().unwrap() as u16,
                response_headers: v["response_headers"].clone(),
                response_body: v["response_body"].as_str().unwrap().to_owned(),
            }
        })
        .collect()
}

/// The keys of a JSON object, in order.
pub fn keys(value: &Value) -> Vec<String> {
    value
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// A layer that counts the outbox's claims. A sender claims once at the
/// start of each pass over the outbox, then sends what it took, then waits
/// for the next pass: so once a claim that began after a moment has
/// completed and the one after it has too, a whole pass ran after that
/// moment. A test that holds the clock waits for passes, not for time,
/// before it asserts that nothing more was sent.
#[derive(Debug)]
pub struct Passes {
    claims: tokio::sync::watch::Sender<u64>,
}

/// `store` with its outbox claims counted ([`Passes`]).
pub fn counting_passes(store: Arc<dyn RunStore>) -> Arc<Layered<Passes>> {
    let passes = Passes {
        claims: tokio::sync::watch::channel(0).0,
    };
    Arc::new(Layered::new(store, passes))
}

#[async_trait::async_trait]
impl StoreLayer for Passes {
    async fn call(&self, request: StoreRequest<'_>, next: Next<'_>) -> Result<StoreResponse, StoreError> {
        let answer = next.run(request).await;
        if let StoreRequest::ClaimDeliveries { .. } = request {
            self.claims.send_modify(|claims| *claims += 1);
        }
        answer
    }
}

impl Passes {
    /// Waits (up to 10 s) until `passes` whole passes of the senders have
    /// run from now on.
    pub async fn run(&self, passes: u64) {
        let target = *self.claims.borrow() + passes + 1;
        let mut claims = self.claims.subscribe();
        tokio::time::timeout(std::time::Duration::from_secs(10), claims.wait_for(|n| *n >= target))
            .await
            .expect("the senders passed over the outbox")
            .unwrap();
    }
}

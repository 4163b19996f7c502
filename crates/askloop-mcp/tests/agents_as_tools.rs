//! askloop's agents as MCP tools, driven by rmcp's client over the
//! streamable-HTTP transport: listing, a call whose question comes back as
//! an elicitation, and a client that cannot be asked getting the run id.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use askloop::store::RunStatus;
use askloop::{Agent, AskUser, Author, Interface, ResolutionKind, RunStore, ScriptedModel};
use askloop_mcp::{AgentTools, BoundSessions, WaitingLinks, streamable_http_service};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

fn deployer(store: Arc<dyn RunStore>) -> Agent {
    let script = json!({"turns": [
        {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?", "options": [{"label": "staging"}, {"label": "production"}]}}]},
        {"text": "Deploying. {{toolResults}}"}
    ]});
    Agent::builder("deployer")
        .instructions("Ask which environment, then deploy.")
        .model(Arc::new(
            ScriptedModel::from_json("deployer", &script.to_string()).unwrap(),
        ))
        .tool(AskUser::new())
        .store(store)
        .build()
        .unwrap()
}

async fn serve(store: Arc<dyn RunStore>) -> String {
    let tools = AgentTools::new(
        vec![deployer(store)],
        WaitingLinks {
            page: Some("http://askloop.test".into()),
        },
    );
    let router = axum::Router::new().nest_service(
        "/mcp",
        streamable_http_service(tools, true, 4 * 1024 * 1024, BoundSessions::default()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{addr}/mcp")
}

/// A client that declares form elicitation and answers with `content`,
/// remembering what it was asked.
#[derive(Clone)]
struct Person {
    content: Value,
    asked: Arc<Mutex<Vec<(String, Value)>>>,
}

impl ClientHandler for Person {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        if let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        {
            self.asked
                .lock()
                .unwrap()
                .push((message, serde_json::to_value(requested_schema).unwrap()));
        }
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(self.content.clone()))
    }

    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities = serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
        let mut info = ClientConfig::default();
        info.capabilities = capabilities;
        info.protocol_version = rmcp::model::ProtocolVersion::V_2025_11_25;
        info.client_info = rmcp::model::Implementation::new("person-client", "1.0");
        info
    }
}

fn call(message: &str) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new("ask_deployer");
    params.arguments = json!({"message": message}).as_object().cloned();
    params
}

#[tokio::test]
async fn each_agent_is_listed_as_an_ask_tool_with_a_message_input() {
    let url = serve(Arc::new(askloop::MemoryStore::new())).await;
    let client = ().serve(StreamableHttpClientTransport::from_uri(url)).await.unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "ask_deployer");
    assert_eq!(tools[0].input_schema["required"], json!(["message"]));
    let _ = client.cancel().await;
}

#[tokio::test]
async fn the_agents_question_reaches_a_client_as_an_elicitation_and_its_answer_finishes_the_run() {
    let store: Arc<dyn RunStore> = Arc::new(askloop::MemoryStore::new());
    let url = serve(Arc::clone(&store)).await;
    let person = Person {
        content: json!({"answer": "staging"}),
        asked: Arc::default(),
    };
    let client = person
        .clone()
        .serve(StreamableHttpClientTransport::from_uri(url))
        .await
        .unwrap();
    let result = client.peer().call_tool(call("Deploy the app")).await.unwrap();
    let asked = person.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].0, "Which environment?");
    assert_eq!(
        asked[0].1["properties"]["answer"]["enum"],
        json!(["staging", "production"])
    );
    let structured = result.structured_content.clone().unwrap();
    assert_eq!(structured["status"], "completed", "{result:?}");
    assert!(structured["text"].as_str().unwrap().contains("staging"), "{structured}");
    let run_id = structured["runId"].as_str().unwrap();
    let run = store.get(run_id).await.unwrap().unwrap();
    assert_eq!(run.status(), RunStatus::Completed);
    let [answered] = &run.resolutions[..] else {
        panic!("{:?}", run.resolutions)
    };
    assert_eq!(answered.kind, ResolutionKind::Answered);
    assert_eq!(
        answered.author,
        Author::via(Interface::Mcp).with_declared("person-client"),
        "an answer through MCP without a caller is recorded via mcp, the client's name only as declared"
    );
    assert_eq!(answered.author.by, None, "a name nothing checked is never `by`");
    let _ = client.cancel().await;
}

#[tokio::test]
async fn a_client_without_elicitation_gets_the_waiting_run_id_and_where_to_answer() {
    let store: Arc<dyn RunStore> = Arc::new(askloop::MemoryStore::new());
    let url = serve(Arc::clone(&store)).await;
    let client = ().serve(StreamableHttpClientTransport::from_uri(url)).await.unwrap();
    let result = client.peer().call_tool(call("Deploy the app")).await.unwrap();
    assert_ne!(result.is_error, Some(true));
    let structured = result.structured_content.clone().unwrap();
    assert_eq!(structured["status"], "suspended");
    let run_id = structured["runId"].as_str().unwrap().to_owned();
    assert_eq!(structured["answerUrl"], format!("http://askloop.test/runs/{run_id}"));
    assert_eq!(structured["pending"][0]["question"], "Which environment?");
    let text = result.content[0].as_text().unwrap().text.clone();
    assert!(text.contains(&run_id) && text.contains("Which environment?"), "{text}");
    // Nothing is lost: the run waits in the store, answerable elsewhere.
    assert_eq!(
        store.get(&run_id).await.unwrap().unwrap().status(),
        RunStatus::Suspended
    );
    let _ = client.cancel().await;
}

#[tokio::test]
async fn a_call_without_a_message_is_refused_with_what_is_needed() {
    let url = serve(Arc::new(askloop::MemoryStore::new())).await;
    let client = ().serve(StreamableHttpClientTransport::from_uri(url)).await.unwrap();
    let err = client
        .peer()
        .call_tool(CallToolRequestParams::new("ask_deployer"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("message"), "{err}");
    let _ = client.cancel().await;
}

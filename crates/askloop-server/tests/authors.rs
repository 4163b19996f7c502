//! Who answered: named API tokens, the agents each may act for, the author
//! header of a trusted proxy, and the author and interface recorded on
//! every resolution made over HTTP and through the page.
#![allow(clippy::unwrap_used)]

mod common;

use askloop_server::{ApiToken, ServerOptions};
use common::*;
use serde_json::{Value, json};

const ALICE: &str = "secret-of-alice";
const BOB: &str = "secret-of-bob";
const SUPPORT: &str = "secret-of-the-support-bot";
const DEFAULT: &str = "secret-of-the-env-token";

fn options() -> ServerOptions {
    ServerOptions::default().token(Some(DEFAULT.to_owned())).tokens(vec![
        ApiToken::new("alice", ALICE),
        ApiToken::new("bob", BOB),
        ApiToken::new("support-bot", SUPPORT).only_agents(vec!["assistant".into()]),
    ])
}

async fn start() -> TestServer {
    let store = memory_store();
    TestServer::start_with(vec![assistant(&store), approver(&store)], store, options()).await
}

/// The same server behind a proxy that names people in `X-Forwarded-User`.
async fn start_proxied() -> TestServer {
    let store = memory_store();
    let options = options().author_header(Some("X-Forwarded-User".to_owned()));
    TestServer::start_with(vec![assistant(&store), approver(&store)], store, options).await
}

fn post(server: &TestServer, token: &str, path: &str, body: Value) -> reqwest::RequestBuilder {
    server.client.post(server.url(path)).bearer_auth(token).json(&body)
}

async fn get(server: &TestServer, token: &str, path: &str) -> reqwest::Response {
    server
        .client
        .get(server.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

/// Starts a run of `agent` with `token` and returns its run id and the id of
/// the call it waits on.
async fn suspended(server: &TestServer, token: &str, agent: &str) -> (String, String) {
    let response = post(
        server,
        token,
        &format!("/api/agents/{agent}/stream"),
        json!({"messages": PROMPT}),
    )
    .send()
    .await
    .unwrap();
    let sse = Sse::read(response).await;
    let kind = if agent == "approver" {
        "tool-call-approval"
    } else {
        "tool-call-suspended"
    };
    let chunk = sse.first(kind);
    (
        chunk["runId"].as_str().unwrap().to_owned(),
        chunk["payload"]["toolCallId"].as_str().unwrap().to_owned(),
    )
}

async fn run_of(server: &TestServer, run_id: &str) -> Value {
    let response = get(server, ALICE, &format!("/api/runs/{run_id}")).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

async fn answer(request: reqwest::RequestBuilder) {
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let sse = Sse::read(response).await;
    assert!(sse.types().contains(&"finish".to_owned()), "{:?}", sse.types());
}

fn only_resolution(run: &Value) -> &Value {
    let resolutions = run["resolutions"].as_array().unwrap();
    assert_eq!(resolutions.len(), 1, "{run}");
    &resolutions[0]
}

#[tokio::test]
async fn answers_with_two_named_tokens_are_recorded_under_each_tokens_name() {
    let server = start().await;
    let (run_a, call_a) = suspended(&server, ALICE, "assistant").await;
    let (run_b, call_b) = suspended(&server, BOB, "assistant").await;
    let (run_c, _) = suspended(&server, ALICE, "assistant").await;

    let resume = |run: &str, call: &str| json!({"runId": run, "toolCallId": call, "resumeData": "staging"});
    answer(post(
        &server,
        ALICE,
        "/api/agents/assistant/resume-stream",
        resume(&run_a, &call_a),
    ))
    .await;
    answer(post(
        &server,
        BOB,
        "/api/agents/assistant/resume-stream",
        resume(&run_b, &call_b),
    ))
    .await;
    let cancelled = post(&server, DEFAULT, &format!("/api/runs/{run_c}/cancel"), json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 200);

    for (run, call, kind, by) in [
        (&run_a, Some(&call_a), "answered", "alice"),
        (&run_b, Some(&call_b), "answered", "bob"),
        (&run_c, None, "cancelled", "api-token"),
    ] {
        let stored = run_of(&server, run).await;
        let resolution = only_resolution(&stored);
        assert_eq!(resolution["kind"], kind, "{stored}");
        assert_eq!(resolution["via"], "http", "{stored}");
        assert_eq!(resolution["by"], by, "{stored}");
        assert_eq!(resolution["toolCallId"].as_str(), call.map(String::as_str), "{stored}");
    }
}

#[tokio::test]
async fn on_the_page_behind_a_proxy_the_header_names_the_author_and_the_interface_is_page() {
    let server = start_proxied().await;
    let started = post(&server, BOB, "/api/agents/approver/stream", json!({"messages": PROMPT}))
        .header("X-Forwarded-User", "carol")
        .send()
        .await
        .unwrap();
    let chunk = Sse::read(started).await.first("tool-call-approval").clone();
    let run_id = chunk["runId"].as_str().unwrap().to_owned();
    let call_id = chunk["payload"]["toolCallId"].as_str().unwrap().to_owned();
    let approve = post(
        &server,
        SUPPORT,
        "/api/agents/approver/approve-tool-call",
        json!({"runId": run_id, "toolCallId": call_id}),
    );
    // The support bot's token may not act for the approver: the header
    // names the person, the token still sets the rights.
    let (status, _) = error_of(
        approve
            .header("X-Forwarded-User", "carol")
            .header("X-Askloop-Interface", "page")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403);

    let approve = post(
        &server,
        BOB,
        "/api/agents/approver/approve-tool-call",
        json!({"runId": run_id, "toolCallId": call_id}),
    )
    .header("X-Forwarded-User", "carol")
    .header("X-Askloop-Interface", "page");
    answer(approve).await;

    let stored: Value = server
        .client
        .get(server.url(&format!("/api/runs/{run_id}")))
        .bearer_auth(BOB)
        .header("X-Forwarded-User", "carol")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let resolution = only_resolution(&stored);
    assert_eq!(resolution["kind"], "approved");
    assert_eq!(resolution["via"], "page");
    assert_eq!(
        resolution["by"], "carol",
        "the proxy's header wins over the token's name"
    );
}

#[tokio::test]
async fn a_token_limited_to_one_agent_gets_403_on_every_agent_route_of_another_404_on_its_runs_and_nothing_is_written()
{
    let server = start().await;
    let (run_id, call_id) = suspended(&server, ALICE, "approver").await;
    let before = run_of(&server, &run_id).await;
    let runs_before = get(&server, ALICE, "/api/runs").await.json::<Value>().await.unwrap()["runs"]
        .as_array()
        .unwrap()
        .len();

    let refused = [
        ("/api/agents/approver/stream", json!({"messages": PROMPT})),
        ("/api/agents/approver/generate", json!({"messages": PROMPT})),
        (
            "/api/agents/approver/resume-stream",
            json!({"runId": run_id, "toolCallId": call_id, "resumeData": {"approved": true}}),
        ),
        (
            "/api/agents/approver/approve-tool-call",
            json!({"runId": run_id, "toolCallId": call_id}),
        ),
        (
            "/api/agents/approver/decline-tool-call",
            json!({"runId": run_id, "toolCallId": call_id}),
        ),
    ];
    for (path, body) in refused {
        let (status, error) = error_of(post(&server, SUPPORT, path, body).send().await.unwrap()).await;
        assert_eq!(status, 403, "{path}: {error}");
        assert_eq!(error["code"], "forbidden", "{path}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("support-bot") && message.contains("approver"),
            "{path}: {message}"
        );
    }
    // A run of another agent is answered as a run that does not exist:
    // the answer says nothing of runs the token may not see.
    let unknown = "0199aaaa-0000-7000-8000-000000000000";
    for (method, path) in [("GET", ""), ("POST", "/cancel"), ("POST", "/retry")] {
        let ask = |id: &str| {
            let url = server.url(&format!("/api/runs/{id}{path}"));
            let request = if method == "GET" {
                server.client.get(url)
            } else {
                server.client.post(url)
            };
            request.bearer_auth(SUPPORT).send()
        };
        let (status, error) = error_of(ask(&run_id).await.unwrap()).await;
        let (unknown_status, unknown_error) = error_of(ask(unknown).await.unwrap()).await;
        assert_eq!((status, unknown_status), (404, 404), "{method} {path}: {error}");
        assert_eq!(error["code"], unknown_error["code"], "{method} {path}");
        assert_eq!(
            error["message"].as_str().unwrap().replace(&run_id, "ID"),
            unknown_error["message"].as_str().unwrap().replace(unknown, "ID"),
            "{method} {path}"
        );
    }
    for path in [
        "/api/agents/approver".to_owned(),
        "/api/agents/approver/suspended-runs".to_owned(),
        "/api/runs?agentId=approver".to_owned(),
    ] {
        let (status, error) = error_of(get(&server, SUPPORT, &path).await).await;
        assert_eq!((status, error["code"].as_str()), (403, Some("forbidden")), "{path}");
    }

    let after = run_of(&server, &run_id).await;
    assert_eq!(after["status"], "suspended");
    assert_eq!(
        after["version"], before["version"],
        "the refused requests wrote nothing"
    );
    assert_eq!(after["resolutions"], json!([]));
    let runs_after = get(&server, ALICE, "/api/runs").await.json::<Value>().await.unwrap()["runs"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(runs_after, runs_before, "no run was started");
}

#[tokio::test]
async fn a_limited_token_lists_only_its_agents_and_their_runs() {
    let server = start().await;
    suspended(&server, ALICE, "approver").await;
    let (mine, call) = suspended(&server, SUPPORT, "assistant").await;

    let agents: Value = get(&server, SUPPORT, "/api/agents").await.json().await.unwrap();
    assert_eq!(keys(&agents), ["assistant"]);
    let runs: Value = get(&server, SUPPORT, "/api/runs").await.json().await.unwrap();
    let listed: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [mine.as_str()]);
    let all: Value = get(&server, ALICE, "/api/runs").await.json().await.unwrap();
    assert_eq!(all["runs"].as_array().unwrap().len(), 2, "an unlimited token sees both");

    // And it answers for its own agent, under its name.
    let resume = json!({"runId": mine, "toolCallId": call, "resumeData": "production"});
    answer(post(&server, SUPPORT, "/api/agents/assistant/resume-stream", resume)).await;
    let stored = run_of(&server, &mine).await;
    assert_eq!(only_resolution(&stored)["by"], "support-bot");
}

#[tokio::test]
async fn an_unknown_token_is_401_and_the_author_header_alone_opens_nothing() {
    let server = start_proxied().await;
    let response = server
        .client
        .get(server.url("/api/runs"))
        .header("X-Forwarded-User", "alice")
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(response).await.0, 401);
    assert_eq!(error_of(get(&server, "not-a-token", "/api/runs").await).await.0, 401);
}

#[tokio::test]
async fn tokens_sharing_a_name_or_naming_an_agent_not_served_are_refused_at_start() {
    let store = memory_store();
    let server = askloop_server::Server::new(vec![assistant(&store)], store.clone()).unwrap();
    let twice = server
        .options(ServerOptions::default().tokens(vec![ApiToken::new("alice", "one"), ApiToken::new("alice", "two")]));
    let err = twice.router().unwrap_err().to_string();
    assert!(err.contains("alice") && err.contains("name"), "{err}");

    let server = askloop_server::Server::new(vec![assistant(&store)], store).unwrap();
    let elsewhere = server
        .options(ServerOptions::default().tokens(vec![ApiToken::new("bot", "one").only_agents(vec!["nobody".into()])]));
    let err = elsewhere.router().unwrap_err().to_string();
    assert!(err.contains("bot") && err.contains("nobody"), "{err}");
}

/// An MCP client that answers every question with `staging`.
#[derive(Clone)]
struct McpPerson;

impl rmcp::ClientHandler for McpPerson {
    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        Ok(rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
            .with_content(json!({"answer": "staging"})))
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        let mut info = rmcp::model::ClientConfig::default();
        info.capabilities = serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
        info.protocol_version = rmcp::model::ProtocolVersion::V_2025_11_25;
        info.client_info = rmcp::model::Implementation::new("some-mcp-client", "1.0");
        info
    }
}

#[tokio::test]
async fn over_mcp_the_tokens_name_is_the_author_and_its_agent_rights_apply() {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let server = start().await;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(server.url("/mcp")).auth_header(SUPPORT),
    );
    let client = McpPerson.serve(transport).await.unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["ask_assistant"], "a limited token sees its agents' tools only");

    let mut call = rmcp::model::CallToolRequestParams::new("ask_approver");
    call.arguments = json!({"message": PROMPT}).as_object().cloned();
    let refused = client.peer().call_tool(call).await.unwrap_err().to_string();
    assert!(
        refused.contains("support-bot") && refused.contains("approver"),
        "{refused}"
    );

    let mut call = rmcp::model::CallToolRequestParams::new("ask_assistant");
    call.arguments = json!({"message": PROMPT}).as_object().cloned();
    let result = client.peer().call_tool(call).await.unwrap();
    let structured = result.structured_content.clone().unwrap();
    assert_eq!(structured["status"], "completed", "{result:?}");
    let stored = run_of(&server, structured["runId"].as_str().unwrap()).await;
    let resolution = only_resolution(&stored);
    assert_eq!(resolution["kind"], "answered");
    assert_eq!(resolution["via"], "mcp");
    assert_eq!(
        resolution["by"], "support-bot",
        "the token's name wins over the client's"
    );
    let _ = client.cancel().await;

    let runs: Value = get(&server, ALICE, "/api/runs?agentId=approver")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(runs["runs"], json!([]), "the refused call started no run");
}

//! `/mcp` over real HTTP: bad input is answered as the rest of the server
//! answers it, in JSON (a JSON-RPC error body, the endpoint speaking
//! JSON-RPC) with a 4xx status, and the body limit is the server's; a
//! thread named in a call is of the caller's resource and continues there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use askloop::{Agent, RunStore, ThreadKey};
use askloop_server::{ApiToken, ServerOptions};
use common::{TestServer, assistant, error_of, memory_store};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use serde_json::{Value, json};

const ACCEPTS: &str = "application/json, text/event-stream";

fn initialize(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "http-test", "version": "1"}}})
}

/// POSTs `body` to `/mcp` as a client that accepts what MCP asks it to.
async fn post(server: &TestServer, content_type: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
    server
        .client
        .post(server.url("/mcp"))
        .header(ACCEPT, ACCEPTS)
        .header(CONTENT_TYPE, content_type)
        .body(body)
        .send()
        .await
        .unwrap()
}

/// The status and the JSON-RPC error body of a refused request, checking
/// that it is JSON.
async fn refused(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let content_type = response.headers()[CONTENT_TYPE].to_str().unwrap().to_owned();
    let body = response.text().await.unwrap();
    assert!(
        content_type.starts_with("application/json"),
        "{status} {content_type}: {body}"
    );
    let body: Value = serde_json::from_str(&body).unwrap_or_else(|err| panic!("{err}: {body}"));
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert!(body.get("id").is_some(), "a JSON-RPC error has an id member: {body}");
    assert!(
        body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    (status, body)
}

#[tokio::test]
async fn bad_messages_are_400_with_a_json_rpc_error_and_a_good_one_still_starts_a_session() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;

    let cases: Vec<(&str, Vec<u8>, i64, Value)> = vec![
        (
            "malformed JSON",
            br#"{"jsonrpc":"2.0","id":1,"method":"#.to_vec(),
            -32700,
            Value::Null,
        ),
        ("not UTF-8", b"{\"id\":\"\xff\"}".to_vec(), -32700, Value::Null),
        ("an empty body", Vec::new(), -32700, Value::Null),
        (
            "a wrong jsonrpc version",
            json!({"jsonrpc": "1.0", "id": "abc", "method": "initialize"})
                .to_string()
                .into_bytes(),
            -32600,
            json!("abc"),
        ),
        (
            "a batch",
            json!([initialize(json!(1))]).to_string().into_bytes(),
            -32600,
            Value::Null,
        ),
        (
            "params that do not fit",
            json!({"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": "x"})
                .to_string()
                .into_bytes(),
            -32602,
            json!(4),
        ),
        (
            "a tools/call without a name",
            json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"arguments": {}}})
                .to_string()
                .into_bytes(),
            -32602,
            json!(8),
        ),
        (
            "a tools/call whose name is a number",
            json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": 5}})
                .to_string()
                .into_bytes(),
            -32602,
            json!(9),
        ),
    ];
    for (what, body, code, id) in cases {
        let (status, error) = refused(post(&server, "application/json", body).await).await;
        assert_eq!(status, 400, "{what}: {error}");
        assert_eq!(error["error"]["code"], code, "{what}: {error}");
        assert_eq!(error["id"], id, "{what}: {error}");
    }

    // A body that is not JSON is refused before `/mcp` by the rule of every
    // route (no HTML form can post to the server), in the API's shape.
    let (status, error) = error_of(post(&server, "text/plain", initialize(json!(5)).to_string()).await).await;
    assert_eq!((status, error["code"].as_str()), (415, Some("unsupported_media_type")));
    // What rmcp refuses itself comes back as a JSON-RPC error.
    let response = server
        .client
        .post(server.url("/mcp"))
        .json(&initialize(json!(6)))
        .send()
        .await
        .unwrap();
    let (status, error) = refused(response).await;
    assert_eq!(status, 406, "without Accept: text/event-stream: {error}");

    let started = post(&server, "application/json", initialize(json!(7)).to_string()).await;
    assert_eq!(started.status(), 200);
    assert!(started.headers().contains_key("mcp-session-id"));
}

#[tokio::test]
async fn the_body_limit_of_mcp_is_the_servers_in_both_directions() {
    let store = memory_store();
    let options = ServerOptions::default().body_limit(1024);
    let server = TestServer::start_with(vec![assistant(&store)], store, options).await;
    let mut padded = initialize(json!(1));
    padded["params"]["clientInfo"]["name"] = json!("x".repeat(2048));
    // A declared length over the limit is refused before any route reads
    // the body, by the rule of every route, in the API's shape.
    let (status, error) = error_of(post(&server, "application/json", padded.to_string()).await).await;
    assert_eq!((status, error["code"].as_str()), (413, Some("body_too_large")));
    assert!(error["message"].as_str().unwrap().contains("1024 bytes"), "{error}");
    // A body sent in chunks, with no declared length, is read by `/mcp`
    // up to the limit and refused as a JSON-RPC error.
    let chunks = futures::stream::iter(
        padded
            .to_string()
            .into_bytes()
            .chunks(512)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>(),
    );
    let chunked = post(&server, "application/json", reqwest::Body::wrap_stream(chunks)).await;
    let (status, error) = refused(chunked).await;
    assert_eq!(status, 413, "{error}");
    assert!(
        error["error"]["message"].as_str().unwrap().contains("1024 bytes"),
        "{error}"
    );

    // A limit above rmcp's own 4 MiB holds too.
    let store = memory_store();
    let options = ServerOptions::default().body_limit(8 * 1024 * 1024);
    let server = TestServer::start_with(vec![assistant(&store)], store, options).await;
    padded["params"]["clientInfo"]["name"] = json!("x".repeat(5 * 1024 * 1024));
    let started = post(&server, "application/json", padded.to_string()).await;
    assert_eq!(started.status(), 200, "a 5 MiB message under an 8 MiB limit is served");
}

/// A model that says back the first user message it is given: the call's
/// own message on a new thread, the thread's first message after that (its
/// turn is picked by the assistant messages it receives).
const CHAT_SCRIPT: &str = r#"{"turns": [
  {"text": "You said: {{input}}"},
  {"text": "Earlier you said: {{input}}"},
  {"text": "Earlier you said: {{input}}"}
]}"#;

/// An agent `chatter` without questions, on `store`.
fn chatter(store: &Arc<dyn RunStore>) -> Agent {
    Agent::builder("chatter")
        .model(common::scripted(CHAT_SCRIPT))
        .store(Arc::clone(store))
        .build()
        .unwrap()
}

/// An MCP client of `/mcp` sending `secret` as its token, if any.
async fn mcp_client(server: &TestServer, secret: Option<&str>) -> RunningService<RoleClient, ()> {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut config = StreamableHttpClientTransportConfig::with_uri(server.url("/mcp"));
    if let Some(secret) = secret {
        config = config.auth_header(secret);
    }
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap()
}

/// Calls `ask_chatter` with these arguments.
async fn ask_chatter(client: &RunningService<RoleClient, ()>, arguments: Value) -> CallToolResult {
    let mut call = CallToolRequestParams::new("ask_chatter");
    call.arguments = arguments.as_object().cloned();
    client.peer().call_tool(call).await.unwrap()
}

fn text_of(result: &CallToolResult) -> String {
    assert_ne!(result.is_error, Some(true), "{result:?}");
    result.structured_content.as_ref().unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn thread_exists(store: &Arc<dyn RunStore>, resource: &str, thread: &str) -> bool {
    let key = ThreadKey::new(resource, thread);
    store.thread_store().unwrap().thread(&key).await.unwrap().is_some()
}

#[tokio::test]
async fn a_thread_named_over_mcp_is_the_tokens_own_and_its_next_call_continues_it() {
    const ANA: &str = "secret-of-ana-0123";
    const BO: &str = "secret-of-bo-456789";
    let store = memory_store();
    let options = ServerOptions::default().tokens(vec![
        ApiToken::new("ana", ANA).only_resources(vec!["ana".into(), "team".into()]),
        ApiToken::new("bo", BO).only_resources(vec!["bo".into()]),
    ]);
    let server = TestServer::start_with(vec![chatter(&store)], Arc::clone(&store), options).await;
    let ana = mcp_client(&server, Some(ANA)).await;
    let tools = ana.peer().list_all_tools().await.unwrap();
    let thread_arg = &tools[0].input_schema["properties"]["thread"];
    assert_eq!(thread_arg["type"], "string", "{thread_arg}");
    assert!(
        thread_arg["description"].as_str().unwrap().contains("resource"),
        "{thread_arg}"
    );

    let first = ask_chatter(&ana, json!({"message": "my name is Ana", "thread": "t1"})).await;
    assert_eq!(text_of(&first), "You said: my name is Ana");
    let second = ask_chatter(&ana, json!({"message": "what is my name?", "thread": "t1"})).await;
    assert_eq!(
        text_of(&second),
        "Earlier you said: my name is Ana",
        "the second call's model request holds the first exchange"
    );

    // Another token's thread of the same id is another thread: its own
    // resource's, which starts empty.
    let bo = mcp_client(&server, Some(BO)).await;
    let other = ask_chatter(&bo, json!({"message": "I am Bo", "thread": "t1"})).await;
    assert_eq!(text_of(&other), "You said: I am Bo");
    assert!(thread_exists(&store, "ana", "t1").await, "the first of ana's resources");
    assert!(thread_exists(&store, "bo", "t1").await);
    assert!(!thread_exists(&store, "team", "t1").await);

    // Without a thread, a call is on none, and its run is still ana's: bo
    // does not see it, over HTTP or in a listing.
    let alone = ask_chatter(&ana, json!({"message": "hello"})).await;
    assert_eq!(text_of(&alone), "You said: hello");
    let run_id = alone.structured_content.as_ref().unwrap()["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let stored = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!(
        (stored.memory.is_none(), stored.resource_id.as_deref()),
        (true, Some("ana"))
    );
    for (secret, status) in [(ANA, 200), (BO, 404)] {
        let read = server
            .client
            .get(server.url(&format!("/api/runs/{run_id}")))
            .bearer_auth(secret)
            .send()
            .await
            .unwrap();
        assert_eq!(read.status(), status);
    }

    // A bad thread id is the tool's error, naming the rule; nothing ran.
    for (bad, rule) in [("..", "thread id"), (" t1", "thread id")] {
        let refused = ask_chatter(&ana, json!({"message": "hi", "thread": bad})).await;
        assert_eq!(refused.is_error, Some(true), "{bad:?}: {refused:?}");
        let text = serde_json::to_value(&refused.content).unwrap().to_string();
        assert!(text.contains(rule) && text.contains("refused"), "{bad:?}: {text}");
    }
    let refused = ask_chatter(&ana, json!({"message": "hi", "thread": 7})).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let _ = ana.cancel().await;
    let _ = bo.cancel().await;
}

#[tokio::test]
async fn without_named_tokens_a_thread_named_over_mcp_is_of_the_default_resource() {
    let store = memory_store();
    let server = TestServer::start(vec![chatter(&store)], Arc::clone(&store)).await;
    let client = mcp_client(&server, None).await;
    ask_chatter(&client, json!({"message": "first", "thread": "t1"})).await;
    let second = ask_chatter(&client, json!({"message": "second", "thread": "t1"})).await;
    assert_eq!(text_of(&second), "Earlier you said: first");
    assert!(thread_exists(&store, askloop_mcp::DEFAULT_RESOURCE, "t1").await);
    let _ = client.cancel().await;
}

const ANA: &str = "secret-of-ana-0123";
const EVE: &str = "secret-of-eve-456789";

/// A caller of `/mcp`: the token's secret, and the person a trusted proxy
/// names in `X-Forwarded-User`, if any.
#[derive(Clone, Copy)]
struct Who<'a>(&'a str, Option<&'a str>);

/// One request to `/mcp` as the streamable-HTTP transport makes it, by
/// `who`, with `session` as `Mcp-Session-Id`, written out by hand so that
/// any caller can name any session.
async fn on_session(
    server: &TestServer,
    who: Who<'_>,
    session: Option<&str>,
    method: reqwest::Method,
    body: Option<Value>,
) -> reqwest::Response {
    let mut request = server
        .client
        .request(method, server.url("/mcp"))
        .bearer_auth(who.0)
        .header(ACCEPT, ACCEPTS)
        .header("mcp-protocol-version", "2025-11-25");
    if let Some(person) = who.1 {
        request = request.header("x-forwarded-user", person);
    }
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.unwrap()
}

/// The status of a response and, for a refusal, its body; a stream that
/// was served is not read (it would not end).
async fn outcome(response: reqwest::Response) -> (u16, Option<Value>) {
    let status = response.status().as_u16();
    if status < 400 {
        return (status, None);
    }
    (status, Some(refused(response).await.1))
}

/// The next JSON-RPC message of an MCP event stream.
async fn next_message(stream: &mut reqwest::Response, decoder: &mut askloop::sse::SseDecoder) -> Value {
    loop {
        while let Some(event) = decoder.next_event().unwrap() {
            // rmcp primes a stream with an event without data.
            if let Ok(message) = serde_json::from_str::<Value>(event.data) {
                return message;
            }
        }
        let chunk = stream
            .chunk()
            .await
            .unwrap()
            .expect("the stream ended before its next message");
        decoder.push(&chunk);
    }
}

/// The one run of `agent` in `store`.
async fn only_run_of(store: &Arc<dyn RunStore>, agent: &str) -> askloop::RunRecord {
    let runs = store.list(&askloop::RunQuery::default()).await.unwrap();
    let mut of_agent: Vec<_> = runs.into_iter().filter(|r| r.agent_id == agent).collect();
    assert_eq!(of_agent.len(), 1, "{of_agent:?}");
    of_agent.remove(0)
}

/// A call of `ask_assistant` waiting on the person's answer.
struct Asking {
    session: String,
    /// The call's event stream, and its decoder.
    stream: reqwest::Response,
    decoder: askloop::sse::SseDecoder,
    /// The `elicitation/create` request it carries.
    asked: Value,
}

/// Opens a session by `who` as a client named `client` that can be asked,
/// and calls `ask_assistant`, whose question comes back as an
/// elicitation.
async fn ask_assistant(server: &TestServer, who: Who<'_>, client: &str) -> Asking {
    use reqwest::Method;
    let mut init = initialize(json!(1));
    init["params"]["capabilities"] = json!({"elicitation": {"form": {}}});
    init["params"]["clientInfo"]["name"] = json!(client);
    let opened = on_session(server, who, None, Method::POST, Some(init)).await;
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    opened.text().await.unwrap();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let sent = on_session(server, who, Some(&session), Method::POST, Some(initialized)).await;
    assert_eq!(sent.status(), 202);
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "ask_assistant", "arguments": {"message": "Deploy the app"}}});
    let mut stream = on_session(server, who, Some(&session), Method::POST, Some(call)).await;
    assert_eq!(stream.status(), 200);
    let mut decoder = askloop::sse::SseDecoder::new();
    let asked = next_message(&mut stream, &mut decoder).await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert!(
        asked["params"]["message"]
            .as_str()
            .unwrap()
            .contains("Which environment"),
        "{asked}"
    );
    Asking {
        session,
        stream,
        decoder,
        asked,
    }
}

/// The answer `choice` to the question `asked`.
fn accept(asked: &Value, choice: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"answer": choice}}})
}

#[tokio::test]
async fn an_mcp_session_serves_only_the_token_that_opened_it_and_its_answer_is_recorded_as_that_tokens() {
    use reqwest::Method;
    let store = memory_store();
    let options = ServerOptions::default().tokens(vec![
        ApiToken::new("ana", ANA),
        ApiToken::new("eve", EVE).only_agents(vec!["chatter".into()]),
    ]);
    let agents = vec![assistant(&store), chatter(&store)];
    let server = TestServer::start_with(agents, Arc::clone(&store), options).await;

    // Ana opens a session as a client that can be asked, and asks the
    // assistant, which asks her which environment to deploy to.
    let Asking {
        session,
        mut stream,
        mut decoder,
        asked,
    } = ask_assistant(&server, Who(ANA, None), "ana-client").await;
    let answer = |choice: &str| accept(&asked, choice);
    let tools_list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});

    // Eve knows the session id. Her answer, her requests, her event stream
    // and her DELETE on it are each answered as on a session that does not
    // exist, word for word.
    let attempts = [
        (
            "the answer to the elicitation",
            Method::POST,
            Some(answer("production")),
        ),
        ("a request", Method::POST, Some(tools_list.clone())),
        ("the event stream", Method::GET, None),
        ("ending the session", Method::DELETE, None),
    ];
    for (what, method, body) in attempts {
        let theirs =
            outcome(on_session(&server, Who(EVE, None), Some(&session), method.clone(), body.clone()).await).await;
        let unknown = outcome(on_session(&server, Who(ANA, None), Some("no-such-session"), method, body).await).await;
        assert_eq!(theirs.0, 404, "{what} from another token: {theirs:?}");
        assert_eq!(
            theirs, unknown,
            "{what} from another token is answered as an unknown session"
        );
    }
    let waiting = only_run_of(&store, "assistant").await;
    assert_eq!(waiting.status(), askloop::RunStatus::Suspended);
    assert!(waiting.resolutions.is_empty(), "{:?}", waiting.resolutions);

    // Ana's answer is taken, and the run records her as its author.
    let sent = on_session(
        &server,
        Who(ANA, None),
        Some(&session),
        Method::POST,
        Some(answer("staging")),
    )
    .await;
    assert_eq!(sent.status(), 202);
    let result = next_message(&mut stream, &mut decoder).await;
    assert_eq!(result["id"], 2, "{result}");
    let text = result["result"]["structuredContent"]["text"].as_str().unwrap();
    assert!(text.contains("staging") && !text.contains("production"), "{result}");
    let done = only_run_of(&store, "assistant").await;
    assert_eq!(done.status(), askloop::RunStatus::Completed);
    assert_eq!(done.resolutions.len(), 1, "{:?}", done.resolutions);
    assert_eq!(
        done.resolutions[0].author,
        askloop::Author::named(askloop::Interface::Mcp, "ana")
    );

    // Her own event stream is served, and her DELETE ends the session.
    let (status, _) = outcome(on_session(&server, Who(ANA, None), Some(&session), Method::GET, None).await).await;
    assert_eq!(status, 200);
    let (status, _) = outcome(on_session(&server, Who(ANA, None), Some(&session), Method::DELETE, None).await).await;
    assert!(status == 200 || status == 202, "{status}");
    let (status, _) =
        outcome(on_session(&server, Who(ANA, None), Some(&session), Method::POST, Some(tools_list)).await).await;
    assert_eq!(status, 404, "a session ended is unknown");
}

/// Opens a session by `who` (a client that declares nothing) and returns
/// its id.
async fn open_session(server: &TestServer, who: Who<'_>) -> String {
    let opened = on_session(server, who, None, reqwest::Method::POST, Some(initialize(json!(1)))).await;
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    opened.text().await.unwrap();
    session
}

#[tokio::test]
async fn behind_a_proxy_an_mcp_session_serves_only_the_person_who_opened_it() {
    use reqwest::Method;
    let store = memory_store();
    let options = ServerOptions::default()
        .tokens(vec![ApiToken::new("proxy", ANA)])
        .author_header(Some("x-forwarded-user".into()));
    let server = TestServer::start_with(vec![chatter(&store)], Arc::clone(&store), options).await;
    let session = open_session(&server, Who(ANA, Some("ana"))).await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    // Bob comes through the same proxy, with the same token.
    let bob = on_session(
        &server,
        Who(ANA, Some("bob")),
        Some(&session),
        Method::POST,
        Some(list.clone()),
    )
    .await;
    let (status, _) = outcome(bob).await;
    assert_eq!(status, 404, "another person behind the same token");
    let ana = on_session(&server, Who(ANA, Some("ana")), Some(&session), Method::POST, Some(list)).await;
    assert_eq!(ana.status(), 200);
}

#[tokio::test]
async fn a_name_an_mcp_client_gives_itself_is_recorded_as_declared_and_a_tokens_name_as_who_answered() {
    // Without a token, nothing vouches for the client's name: it is kept
    // as declared by the client, and no one is named as who answered.
    // (The secret sent is ignored by a server without tokens.)
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], Arc::clone(&store)).await;
    let resolution = answered_as_ceo(&server, ANA).await;
    assert_eq!(resolution["via"], "mcp", "{resolution}");
    assert_eq!(resolution["declared"], "ceo@corp", "{resolution}");
    assert!(
        resolution.get("by").is_none(),
        "a declared name is never `by`: {resolution}"
    );

    // With a token, its name is who answered, as before.
    let store = memory_store();
    let options = ServerOptions::default().tokens(vec![ApiToken::new("ana", ANA)]);
    let server = TestServer::start_with(vec![assistant(&store)], Arc::clone(&store), options).await;
    let resolution = answered_as_ceo(&server, ANA).await;
    assert_eq!(
        (&resolution["via"], &resolution["by"]),
        (&json!("mcp"), &json!("ana")),
        "{resolution}"
    );
    assert!(resolution.get("declared").is_none(), "{resolution}");
}

/// The one resolution, as `GET /api/runs/{runId}` shows it, of the run of
/// `ask_assistant` that a client calling itself `ceo@corp`, sending
/// `secret`, answered.
async fn answered_as_ceo(server: &TestServer, secret: &str) -> Value {
    let who = Who(secret, None);
    let mut asking = ask_assistant(server, who, "ceo@corp").await;
    let answer = accept(&asking.asked, "staging");
    let sent = on_session(server, who, Some(&asking.session), reqwest::Method::POST, Some(answer)).await;
    assert_eq!(sent.status(), 202);
    let result = next_message(&mut asking.stream, &mut asking.decoder).await;
    let run_id = result["result"]["structuredContent"]["runId"].as_str().unwrap();
    let run: Value = server
        .client
        .get(server.url(&format!("/api/runs/{run_id}")))
        .bearer_auth(secret)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let resolutions = run["resolutions"].as_array().unwrap();
    assert_eq!(resolutions.len(), 1, "{run}");
    resolutions[0].clone()
}

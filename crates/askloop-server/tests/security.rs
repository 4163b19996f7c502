//! Who may do what: every route of the server asked by callers it must turn
//! away (no token, a wrong token, a token of another agent, a page of
//! another site, a request naming a foreign host), with the status each
//! gets and, after all of them, the runs read back unchanged. Then the
//! attacks a browser can mount on a token-less server on loopback, what a
//! retry records, and the walls between resources: a run on another
//! resource's thread is an unknown run to every run route and listing.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use askloop::RunStore;
use askloop::sse::SseDecoder;
use askloop_server::{ApiToken, ServerOptions};
use common::*;
use serde_json::{Value, json};

const ALICE: &str = "secret-of-alice-0123456789";
const BOT: &str = "secret-of-the-assistant-bot";

/// A server with `assistant` (the limited token's agent), `approver` and
/// `flaky` (whose model fails once), a run of `approver` waiting for
/// approval and a failed run of `flaky`.
struct World {
    server: TestServer,
    store: Arc<dyn RunStore>,
    _model: askloop_testkit::FakeServer,
    /// The `approver` run and the call it waits on.
    waiting: (String, String),
    /// The failed `flaky` run.
    failed: String,
    /// An MCP session alice opened on `/mcp`.
    mcp_session: String,
}

async fn world(options: ServerOptions) -> World {
    let model = askloop_testkit::FakeServer::builder()
        .fail_request(1, askloop_testkit::FakeError::new(503, "overloaded"))
        .responder(askloop_testkit::workload::deploy_responder())
        .start()
        .await
        .unwrap();
    let store = memory_store();
    let agents = vec![assistant(&store), approver(&store), agent_on("flaky", &model, &store)];
    // The runs are made through the library, so that every server
    // configuration (even one refusing every request) starts from them.
    let approver_agent = agents[1].clone();
    // On a thread of alice's, so the memory routes have one to refuse.
    let on_thread = askloop::StreamOptions::default().on_thread(askloop::ThreadOptions::new("alice", "wt"));
    let waiting = approver_agent
        .stream_with(PROMPT, on_thread)
        .await
        .unwrap()
        .output()
        .await;
    let waiting = (waiting.run_id, waiting.pending[0].tool_call_id.clone());
    // Alice's, so that she may retry it.
    let failed = agents[2]
        .stream_with(PROMPT, askloop::StreamOptions::default().for_resource("alice"))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(failed.status, askloop::RunStatus::Failed);
    let server = TestServer::start_with(agents, Arc::clone(&store), options).await;
    let mcp_session = mcp_session_of(&server, ALICE).await;
    World {
        server,
        store,
        _model: model,
        waiting,
        failed: failed.run_id,
        mcp_session,
    }
}

/// Opens an MCP session on `/mcp` with `secret` (sent, and ignored by a
/// server without tokens) and returns its id.
async fn mcp_session_of(server: &TestServer, secret: &str) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let opened = server
        .client
        .post(server.url("/mcp"))
        .bearer_auth(secret)
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    opened.text().await.unwrap();
    session
}

fn with_tokens() -> ServerOptions {
    ServerOptions::default().tokens(vec![
        ApiToken::new("alice", ALICE).only_resources(vec!["alice".into()]),
        ApiToken::new("assistant-bot", BOT)
            .only_agents(vec!["assistant".into()])
            .only_resources(vec!["assistant-bot".into()]),
    ])
}

/// What the runs and threads of the store look like, to compare before
/// and after.
async fn snapshot(store: &Arc<dyn RunStore>) -> Vec<Value> {
    let runs = store.list(&askloop::RunQuery::default()).await.unwrap();
    let threads = store.thread_store().unwrap();
    let listed = threads.threads(&askloop::ThreadQuery::default()).await.unwrap();
    runs.into_iter()
        .map(|run| {
            json!({
                "runId": run.run_id, "status": run.status(), "version": run.version,
                "resolutions": run.resolutions.len(), "messages": run.message_count,
            })
        })
        .chain(listed.into_iter().map(|thread| serde_json::to_value(thread).unwrap()))
        .collect()
}

/// One request of the matrix.
struct Call {
    method: &'static str,
    path: String,
    body: Option<Value>,
    /// Where it lands: the API (needs a token), or a route that holds no
    /// data (the page's files, the health check).
    kind: Kind,
    /// The MCP session it names (`Mcp-Session-Id`), for [`Kind::McpSession`].
    session: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    /// An `/api` route or `/mcp` about the agent `approver` or `flaky`, or
    /// one of their runs.
    OtherAgent,
    /// An `/api` route that lists (the limited token sees only its own).
    Listing,
    /// An `/api` route that does not exist.
    Unknown,
    /// The MCP endpoint.
    Mcp,
    /// `/mcp` on the session alice opened.
    McpSession,
    /// The page's files and `/healthz`.
    Open,
    /// A memory route about a thread of another resource (alice's).
    OtherResource,
}

fn calls(world: &World) -> Vec<Call> {
    let (run, call) = &world.waiting;
    let failed = &world.failed;
    let api = |method, path: String, body: Option<Value>, kind| Call {
        method,
        path,
        body,
        kind,
        session: None,
    };
    let on_session = |method, body: Option<Value>| Call {
        session: Some(world.mcp_session.clone()),
        ..api(method, "/mcp".into(), body, Kind::McpSession)
    };
    let mcp_initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    vec![
        api("GET", "/api/agents".into(), None, Kind::Listing),
        api("GET", "/api/agents/approver".into(), None, Kind::OtherAgent),
        api(
            "POST",
            "/api/agents/approver/stream".into(),
            Some(json!({"messages": PROMPT})),
            Kind::OtherAgent,
        ),
        api(
            "POST",
            "/api/agents/approver/generate".into(),
            Some(json!({"messages": PROMPT})),
            Kind::OtherAgent,
        ),
        api(
            "POST",
            "/api/agents/approver/resume-stream".into(),
            Some(json!({"runId": run, "toolCallId": call, "resumeData": {"approved": true}})),
            Kind::OtherAgent,
        ),
        api(
            "POST",
            "/api/agents/approver/approve-tool-call".into(),
            Some(json!({"runId": run, "toolCallId": call})),
            Kind::OtherAgent,
        ),
        api(
            "POST",
            "/api/agents/approver/approve-tool-call".into(),
            Some(json!({"runId": run, "toolCallId": call, "args": {"question": "edited"}})),
            Kind::OtherAgent,
        ),
        api(
            "POST",
            "/api/agents/approver/decline-tool-call".into(),
            Some(json!({"runId": run, "toolCallId": call, "reason": "no"})),
            Kind::OtherAgent,
        ),
        api(
            "POST",
            "/api/agents/approver/approve-tool-call-generate".into(),
            Some(json!({"runId": run, "toolCallId": call})),
            Kind::OtherAgent,
        ),
        api(
            "POST",
            "/api/agents/approver/decline-tool-call-generate".into(),
            Some(json!({"runId": run, "toolCallId": call, "reason": "no"})),
            Kind::OtherAgent,
        ),
        api(
            "POST",
            "/chat/approver".into(),
            Some(
                json!({"runId": run, "toolCallId": call, "resumeData": {"approved": true},
                        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": PROMPT}]}]}),
            ),
            Kind::OtherAgent,
        ),
        api("GET", "/chat/approver/chat-1/stream".into(), None, Kind::OtherAgent),
        api(
            "GET",
            "/api/agents/approver/suspended-runs".into(),
            None,
            Kind::OtherAgent,
        ),
        api("GET", "/api/runs".into(), None, Kind::Listing),
        api("GET", format!("/api/runs/{run}"), None, Kind::OtherAgent),
        api("POST", format!("/api/runs/{run}/cancel"), None, Kind::OtherAgent),
        api("POST", format!("/api/runs/{failed}/retry"), None, Kind::OtherAgent),
        api(
            "POST",
            format!("/api/runs/{run}/decisions"),
            Some(json!({"all": "approve"})),
            Kind::OtherAgent,
        ),
        api("GET", "/api/events".into(), None, Kind::Listing),
        api("GET", "/api/me".into(), None, Kind::Listing),
        api("GET", "/api/runs?threadId=wt".into(), None, Kind::OtherResource),
        api("GET", "/api/runs?resourceId=alice".into(), None, Kind::OtherResource),
        api(
            "GET",
            "/api/memory/threads?resourceId=alice".into(),
            None,
            Kind::OtherResource,
        ),
        api(
            "POST",
            "/api/memory/threads".into(),
            Some(json!({"threadId": "new", "resourceId": "alice", "agentId": "assistant"})),
            Kind::OtherResource,
        ),
        api("GET", "/api/memory/threads/wt".into(), None, Kind::OtherResource),
        api(
            "PATCH",
            "/api/memory/threads/wt".into(),
            Some(json!({"title": "taken"})),
            Kind::OtherResource,
        ),
        api("DELETE", "/api/memory/threads/wt".into(), None, Kind::OtherResource),
        api(
            "GET",
            "/api/memory/threads/wt/messages".into(),
            None,
            Kind::OtherResource,
        ),
        api("GET", "/api/no-such-route".into(), None, Kind::Unknown),
        api("POST", "/mcp".into(), Some(mcp_initialize), Kind::Mcp),
        on_session("POST", Some(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))),
        on_session("GET", None),
        on_session("DELETE", None),
        api("GET", "/".into(), None, Kind::Open),
        api("GET", "/inbox".into(), None, Kind::Open),
        api("GET", format!("/runs/{run}"), None, Kind::Open),
        api("GET", "/threads/wt".into(), None, Kind::Open),
        api("GET", "/assets/app.js".into(), None, Kind::Open),
        api("GET", "/healthz".into(), None, Kind::Open),
    ]
}

/// Sends `call` with these headers; the status and, for an error, its code.
async fn send(server: &TestServer, call: &Call, headers: &[(&str, &str)]) -> (u16, String) {
    let headers: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
    send_bytes(server, call, &headers).await
}

/// [`send`], with header values as raw bytes (UTF-8 beyond ASCII, or none).
async fn send_bytes(server: &TestServer, call: &Call, headers: &[(&str, &[u8])]) -> (u16, String) {
    let url = server.url(&call.path);
    let method = reqwest::Method::from_bytes(call.method.as_bytes()).unwrap();
    let mut request = server.client.request(method, url);
    if let Some(body) = &call.body {
        request = request.json(body);
    }
    if matches!(call.kind, Kind::Mcp | Kind::McpSession) {
        request = request.header("accept", "application/json, text/event-stream");
    }
    if let Some(session) = &call.session {
        request = request.header("mcp-session-id", session);
    }
    for (name, value) in headers {
        request = request.header(*name, reqwest::header::HeaderValue::from_bytes(value).unwrap());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    // Streams (runs, events) are not read to their end: the status says it.
    let is_json = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let code = if status >= 400 && is_json {
        let body: Value = response.json().await.unwrap();
        body["error"]["code"].as_str().unwrap_or_default().to_owned()
    } else {
        String::new()
    };
    (status, code)
}

#[tokio::test]
async fn every_route_turns_away_callers_without_the_right_token_and_nothing_changes() {
    let world = world(with_tokens()).await;
    let before = snapshot(&world.store).await;
    let wrong = "Bearer not-one-of-the-tokens-at-all";
    let bot = format!("Bearer {BOT}");
    for call in calls(&world) {
        let what = format!("{} {}", call.method, call.path);
        for (caller, headers) in [("no token", vec![]), ("a wrong token", vec![("authorization", wrong)])] {
            let (status, code) = send(&world.server, &call, &headers).await;
            let expected = if call.kind == Kind::Open {
                (200, "")
            } else {
                (401, "unauthorized")
            };
            assert_eq!((status, code.as_str()), expected, "{what} with {caller}");
        }
        let (status, code) = send(&world.server, &call, &[("authorization", &bot)]).await;
        let expected = match call.kind {
            Kind::OtherAgent if call.path.starts_with("/api/runs/") => (404, "unknown_run"),
            Kind::OtherAgent => (403, "forbidden"),
            // Naming another's resource is refused; another's thread is
            // as unknown as a missing one.
            Kind::OtherResource if call.path.contains("resourceId") || call.method == "POST" => {
                (403, "forbidden_resource")
            }
            Kind::OtherResource => (404, "unknown_thread"),
            Kind::Unknown => (404, "unknown_route"),
            // Another token's MCP session is as unknown as one never
            // opened (a JSON-RPC error, whose code is a number).
            Kind::McpSession => (404, ""),
            Kind::Listing | Kind::Mcp | Kind::Open => (200, ""),
        };
        assert_eq!(
            (status, code.as_str()),
            expected,
            "{what} with the token of another agent"
        );
    }
    assert_eq!(snapshot(&world.store).await, before, "no refused request changed a run");
}

#[tokio::test]
async fn behind_a_proxy_every_route_refuses_a_request_naming_no_readable_person_and_nothing_changes() {
    // Alice's token is a program's (it opens the world's MCP session
    // without a person); the bot's is the proxy's, which always needs one.
    let mut tokens = with_tokens().tokens;
    tokens[0] = tokens[0].clone().acts_without_person();
    let options = ServerOptions::default()
        .tokens(tokens)
        .author_header(Some("X-Forwarded-User".into()));
    let world = world(options).await;
    let before = snapshot(&world.store).await;
    let bot = format!("Bearer {BOT}");
    let alice = format!("Bearer {ALICE}");
    let unnamed: [(&str, Option<&[u8]>); 5] = [
        ("no header", None),
        ("an empty name", Some(b"  ")),
        ("a name that is not UTF-8", Some(b"Jos\xe9")),
        ("a stray percent", Some(b"50%")),
        ("a control character", Some(b"a%0Ab")),
    ];
    for call in calls(&world) {
        let what = format!("{} {}", call.method, call.path);
        for (case, name) in &unnamed {
            let mut headers: Vec<(&str, &[u8])> = vec![("authorization", bot.as_bytes())];
            headers.extend(name.map(|n| ("x-forwarded-user", n)));
            let (status, code) = send_bytes(&world.server, &call, &headers).await;
            let expected = if call.kind == Kind::Open {
                (200, "")
            } else {
                (401, "no_person")
            };
            assert_eq!((status, code.as_str()), expected, "{what} with {case}");
        }
    }
    assert_eq!(snapshot(&world.store).await, before, "no refused request changed a run");

    // A name beyond ASCII, as sent or percent-encoded, is that person,
    // walled to their own resource: alice's thread's run is not theirs.
    let theirs = Call {
        method: "GET",
        path: format!("/api/runs/{}", world.waiting.0),
        body: None,
        kind: Kind::OtherResource,
        session: None,
    };
    for sent in ["José".as_bytes(), b"Jos%C3%A9"] {
        let url = world.server.url("/api/me");
        let response = world
            .server
            .client
            .get(url)
            .header("authorization", &alice)
            .header(
                "x-forwarded-user",
                reqwest::header::HeaderValue::from_bytes(sent).unwrap(),
            )
            .send()
            .await
            .unwrap();
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            (body["name"].as_str(), body["resource"].as_str()),
            (Some("José"), Some("José"))
        );
        let (status, code) = send_bytes(
            &world.server,
            &theirs,
            &[("authorization", alice.as_bytes()), ("x-forwarded-user", sent)],
        )
        .await;
        assert_eq!((status, code.as_str()), (404, "unknown_run"), "{sent:?}");
    }
}

#[tokio::test]
async fn every_route_turns_away_pages_of_other_sites_and_foreign_hosts_even_with_a_good_token() {
    let options = with_tokens().allowed_hosts(vec!["askloop.example.com".into()]);
    let world = world(options).await;
    let before = snapshot(&world.store).await;
    let alice = format!("Bearer {ALICE}");
    for call in calls(&world) {
        let what = format!("{} {}", call.method, call.path);
        let cross_site = [
            ("authorization", alice.as_str()),
            ("origin", "http://evil.example"),
            ("sec-fetch-site", "cross-site"),
        ];
        let (status, code) = send(&world.server, &call, &cross_site).await;
        if call.method != "GET" {
            assert_eq!((status, code.as_str()), (403, "cross_site"), "{what} from another site");
        } else {
            assert!(
                // 204: the chat re-attach route has no stream of that chat.
                status == 200 || status == 204 || code == "unknown_route",
                "{what}: a read from another site is left to CORS ({status} {code})"
            );
        }
        let foreign = [("authorization", alice.as_str()), ("host", "attacker.example")];
        let (status, code) = send(&world.server, &call, &foreign).await;
        assert_eq!(
            (status, code.as_str()),
            (403, "host_not_allowed"),
            "{what} naming a foreign host"
        );
    }
    assert_eq!(snapshot(&world.store).await, before, "no refused request changed a run");
    // The host the operator allowed, and addresses, are answered.
    for host in ["askloop.example.com", "127.0.0.1"] {
        let call = &calls(&world)[0];
        let (status, _) = send(&world.server, call, &[("authorization", &alice), ("host", host)]).await;
        assert_eq!(status, 200, "{host}");
    }
}

#[tokio::test]
async fn a_foreign_host_is_told_how_to_allow_it_from_the_command_the_file_and_rust() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let response = server
        .client
        .get(server.url("/api/runs"))
        .header("host", "askloop.internal")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    for setting in [
        "--allow-host",
        "allowed_hosts in askloop.toml",
        "ServerOptions::allowed_hosts",
    ] {
        assert!(message.contains(setting), "names {setting}: {message}");
    }
}

#[tokio::test]
async fn a_token_less_server_cannot_be_driven_by_a_page_of_another_site() {
    let world = world(ServerOptions::default()).await;
    let before = snapshot(&world.store).await;
    let (run, _) = world.waiting.clone();
    let cancel = world.server.url(&format!("/api/runs/{run}/cancel"));
    let client = &world.server.client;
    // The form a page of another site submits: text/plain, its Origin, and
    // in a browser of today, Sec-Fetch-Site.
    let form = client
        .post(&cancel)
        .header("content-type", "text/plain")
        .header("origin", "http://evil.example")
        .header("sec-fetch-site", "cross-site")
        .body("x=1");
    assert_eq!(error_of(form.send().await.unwrap()).await.1["code"], "cross_site");
    // A browser too old to send Origin: the form's type is refused.
    let old = client.post(&cancel).header("content-type", "text/plain").body("x=1");
    let (status, error) = error_of(old.send().await.unwrap()).await;
    assert_eq!((status, error["code"].as_str()), (415, Some("unsupported_media_type")));
    // A page whose name was pointed at 127.0.0.1 (DNS rebinding): same
    // origin for the browser, but it names its own host.
    for path in ["/api/runs", "/", "/healthz"] {
        let rebound = client
            .get(world.server.url(path))
            .header("host", format!("attacker.example:{}", world.server.addr.port()));
        let (status, error) = error_of(rebound.send().await.unwrap()).await;
        assert_eq!(
            (status, error["code"].as_str()),
            (403, Some("host_not_allowed")),
            "{path}"
        );
    }
    let rebound_stream = client
        .post(world.server.url("/api/agents/assistant/stream"))
        .header("host", "attacker.example")
        .json(&json!({"messages": PROMPT}));
    assert_eq!(error_of(rebound_stream.send().await.unwrap()).await.0, 403);
    assert_eq!(snapshot(&world.store).await, before, "no run changed, none started");

    // The server's own page, and a program like curl, still work.
    let own_page = client
        .post(&cancel)
        .header("origin", format!("http://localhost:{}", world.server.addr.port()))
        .header("host", format!("localhost:{}", world.server.addr.port()))
        .header("sec-fetch-site", "same-origin");
    assert_eq!(own_page.send().await.unwrap().status(), 200);
    let curl = client.post(world.server.url(&format!("/api/runs/{}/cancel", world.failed)));
    assert_eq!(
        curl.send().await.unwrap().status(),
        409,
        "a failed run cannot be cancelled"
    );
}

#[tokio::test]
async fn any_origin_by_cors_is_refused_without_a_token() {
    let store = memory_store();
    let server = askloop_server::Server::new(vec![assistant(&store)], store)
        .unwrap()
        .options(ServerOptions::default().cors_origins(vec!["*".into()]));
    let err = server.check_exposure("127.0.0.1:4111".parse().unwrap()).unwrap_err();
    assert!(
        matches!(err, askloop_server::ServerError::AnyOriginWithoutToken),
        "{err}"
    );
    assert!(server.router().is_err());
}

#[tokio::test]
async fn a_retry_checks_the_callers_agents_first_and_records_who_retried_through_what() {
    let world = world(with_tokens()).await;
    let failed = world.failed.clone();
    // Another agent's token learns nothing, not even the run's status.
    let suspended = &world.waiting.0;
    for run in [&failed, suspended] {
        let refused = world
            .server
            .client
            .post(world.server.url(&format!("/api/runs/{run}/retry")))
            .bearer_auth(BOT)
            .send()
            .await
            .unwrap();
        let (status, error) = error_of(refused).await;
        assert_eq!((status, error["code"].as_str()), (404, Some("unknown_run")), "{run}");
        assert!(!error["message"].as_str().unwrap().contains("failed"), "{error}");
    }
    assert_eq!(
        world.store.get(&failed).await.unwrap().unwrap().status(),
        askloop::RunStatus::Failed
    );

    let retried = world
        .server
        .client
        .post(world.server.url(&format!("/api/runs/{failed}/retry")))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    let retried = Sse::read(retried).await;
    assert_eq!(retried.status, 200, "{}", retried.body);
    let run = world.store.get(&failed).await.unwrap().unwrap();
    let resolution = serde_json::to_value(run.resolutions.last().unwrap()).unwrap();
    assert_eq!(resolution["kind"], "recovered");
    assert_eq!(resolution["via"], "http");
    assert_eq!(resolution["by"], "alice");
}

#[tokio::test]
async fn the_event_feed_tells_a_limited_token_only_of_its_agents_runs() {
    let world = world(with_tokens()).await;
    let mut bot = events(&world.server, BOT).await;
    let mut alice = events(&world.server, ALICE).await;
    // A run of `approver` changes, then one of `assistant` starts.
    cancel_waiting(&world).await;
    let bots = start_run(&world, BOT, json!({})).await;
    // Alice hears of the first; the bot's first event is its own run's.
    assert_eq!(next_run(&mut alice).await, world.waiting.0);
    assert_eq!(next_run(&mut bot).await, bots);
}

#[tokio::test]
async fn the_event_feed_tells_a_walled_token_nothing_of_another_resources_thread() {
    const CAROL: &str = "secret-of-carol-0123456789";
    let mut tokens = with_tokens().tokens;
    tokens.push(ApiToken::new("carol", CAROL).only_resources(vec!["carol".into()]));
    let world = world(ServerOptions::default().tokens(tokens)).await;
    let mut carol = events(&world.server, CAROL).await;
    // A run on alice's thread changes, then carol starts one on hers.
    cancel_waiting(&world).await;
    let memory = json!({"thread": "c1", "resource": "carol"});
    let hers = start_run(&world, CAROL, json!({"memory": memory})).await;
    assert_eq!(next_run(&mut carol).await, hers, "alice's thread's run was not told");
}

/// Alice cancels the waiting `approver` run (on her thread `wt`).
async fn cancel_waiting(world: &World) {
    let url = world.server.url(&format!("/api/runs/{}/cancel", world.waiting.0));
    let cancelled = world.server.client.post(url).bearer_auth(ALICE).send().await.unwrap();
    assert_eq!(cancelled.status(), 200);
}

/// Starts a run of `assistant` with `token` and the other fields of `body`,
/// reads its stream and returns its id.
async fn start_run(world: &World, token: &str, mut body: Value) -> String {
    body["messages"] = json!(PROMPT);
    let url = world.server.url("/api/agents/assistant/stream");
    let started = world
        .server
        .client
        .post(url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let started = Sse::read(started).await;
    assert_eq!(started.status, 200, "{}", started.body);
    started.first("start")["runId"].as_str().unwrap().to_owned()
}

/// An open `/api/events` stream, read past its `ready` event.
async fn events(server: &TestServer, token: &str) -> reqwest::Response {
    let mut response = server
        .client
        .get(server.url("/api/events"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("event: ready"), "{first:?}");
    response
}

/// The run id of the next `run` event of a stream.
async fn next_run(stream: &mut reqwest::Response) -> String {
    let mut decoder = SseDecoder::new();
    loop {
        while let Some(event) = decoder.next_event().unwrap() {
            if event.event == "run" {
                let change: Value = serde_json::from_str(event.data).unwrap();
                return change["runId"].as_str().unwrap().to_owned();
            }
        }
        decoder.push(&stream.chunk().await.unwrap().unwrap());
    }
}

const BOB: &str = "secret-of-bob-0123456789ab";
const OPS: &str = "secret-of-ops-0123456789ab";

/// Runs of `approver` and `flaky` on alice's threads and on none, served
/// to alice and bob (walled each to their own resource, both may act for
/// every agent) and to `ops` (a token without a wall).
struct Walls {
    server: TestServer,
    store: Arc<dyn RunStore>,
    _model: askloop_testkit::FakeServer,
    /// The `approver` run waiting on alice's thread, and its call.
    hers: (String, String),
    /// The failed `flaky` run on alice's thread.
    her_failed: String,
    /// The `approver` run waiting on no thread, of no resource (started
    /// through the library, as the CLI does).
    plain: String,
    /// The `approver` run bob started over HTTP on no thread, and its call.
    bobs: (String, String),
    /// A failed `flaky` run of bob's on no thread.
    bobs_failed: String,
}

async fn walls() -> Walls {
    let model = askloop_testkit::FakeServer::builder()
        .fail_request(1, askloop_testkit::FakeError::new(503, "overloaded"))
        .fail_request(2, askloop_testkit::FakeError::new(503, "overloaded"))
        .responder(askloop_testkit::workload::deploy_responder())
        .start()
        .await
        .unwrap();
    let store = memory_store();
    let agents = vec![approver(&store), agent_on("flaky", &model, &store)];
    let on = |thread: &str| askloop::StreamOptions::default().on_thread(askloop::ThreadOptions::new("alice", thread));
    let hers = agents[0].stream_with(PROMPT, on("wt")).await.unwrap().output().await;
    let her_failed = agents[1].stream_with(PROMPT, on("wf")).await.unwrap().output().await;
    assert_eq!(her_failed.status, askloop::RunStatus::Failed);
    let bobs_failed = agents[1]
        .stream_with(PROMPT, askloop::StreamOptions::default().for_resource("bob"))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(bobs_failed.status, askloop::RunStatus::Failed);
    let plain = agents[0].stream(PROMPT).await.unwrap().output().await;
    let options = ServerOptions::default().tokens(vec![
        ApiToken::new("alice", ALICE).only_resources(vec!["alice".into()]),
        ApiToken::new("bob", BOB).only_resources(vec!["bob".into()]),
        ApiToken::new("ops", OPS),
    ]);
    let server = TestServer::start_with(agents, Arc::clone(&store), options).await;
    // Bob's chat on no thread, started as the README's useChat set-up does.
    let started = server
        .client
        .post(server.url("/api/agents/approver/stream"))
        .bearer_auth(BOB)
        .json(&json!({"messages": PROMPT}))
        .send()
        .await
        .unwrap();
    let approval = Sse::read(started).await.first("tool-call-approval").clone();
    let bobs = (
        approval["runId"].as_str().unwrap().to_owned(),
        approval["payload"]["toolCallId"].as_str().unwrap().to_owned(),
    );
    Walls {
        server,
        store,
        _model: model,
        hers: (hers.run_id, hers.pending[0].tool_call_id.clone()),
        her_failed: her_failed.run_id,
        plain: plain.run_id,
        bobs,
        bobs_failed: bobs_failed.run_id,
    }
}

/// Sends a request with `token`; its status and body as text.
async fn send_as(server: &TestServer, token: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = server.client.request(method, server.url(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The run ids a listing answered with, and its `total`.
async fn listed(server: &TestServer, token: &str, path: &str) -> (Vec<String>, u64) {
    let (status, body) = send_as(server, token, "GET", path, None).await;
    assert_eq!(status, 200, "{path}: {body}");
    let page: Value = serde_json::from_str(&body).unwrap();
    let mut ids: Vec<String> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    (ids, page["total"].as_u64().unwrap())
}

/// Every route that reads or changes a run by its id, about `run` (waiting
/// on `call` for approval of `approver`) and the failed `failed`.
fn run_routes(run: &str, call: &str, failed: &str) -> Vec<(&'static str, String, Option<Value>)> {
    let chat_approval = |approved: bool| {
        json!({"messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": PROMPT}]},
            {"id": "a1", "role": "assistant", "parts": [{"type": "step-start"},
                {"type": "tool-ask_approval", "toolCallId": call, "state": "approval-responded", "input": {},
                 "approval": {"id": format!("{run}::{call}"), "approved": approved}}]}]})
    };
    let decision = json!({"runId": run, "toolCallId": call});
    let declined = json!({"runId": run, "toolCallId": call, "reason": "no"});
    let answered = json!({"runId": run, "toolCallId": call, "resumeData": {"approved": true}});
    let mut chat_answer = answered.clone();
    chat_answer["messages"] = json!([chat_approval(true)["messages"][0]]);
    vec![
        ("GET", format!("/api/runs/{run}"), None),
        ("POST", format!("/api/runs/{run}/cancel"), None),
        ("POST", format!("/api/runs/{failed}/retry"), None),
        (
            "POST",
            format!("/api/runs/{run}/decisions"),
            Some(json!({"decisions": [{"toolCallId": call, "approved": true}]})),
        ),
        (
            "POST",
            "/api/agents/approver/resume-stream".into(),
            Some(answered.clone()),
        ),
        (
            "POST",
            "/api/agents/approver/approve-tool-call".into(),
            Some(decision.clone()),
        ),
        (
            "POST",
            "/api/agents/approver/approve-tool-call".into(),
            Some(json!({"runId": run, "toolCallId": call, "args": {"message": "edited"}})),
        ),
        (
            "POST",
            "/api/agents/approver/decline-tool-call".into(),
            Some(declined.clone()),
        ),
        (
            "POST",
            "/api/agents/approver/approve-tool-call-generate".into(),
            Some(decision),
        ),
        (
            "POST",
            "/api/agents/approver/decline-tool-call-generate".into(),
            Some(declined),
        ),
        ("POST", "/chat/approver".into(), Some(chat_answer)),
        ("POST", "/chat/approver".into(), Some(chat_approval(true))),
        ("POST", "/chat/approver".into(), Some(chat_approval(false))),
    ]
}

/// Asks every run route about `run` and `failed` with `token`, and checks
/// each answers exactly as for a run that does not exist, naming nothing of
/// `owner`'s.
async fn walled_off(walls: &Walls, token: &str, (run, call): (&str, &str), failed: &str, owner: &str) {
    for (method, path, body) in run_routes(run, call, failed) {
        let what = format!("{method} {path} {body:?}");
        let (status, refused) = send_as(&walls.server, token, method, &path, body.as_ref()).await;
        // The same request about a run that does not exist.
        let missing = "no-such-run";
        let unknown = |text: &str| text.replace(run, missing).replace(failed, missing);
        let body_of_missing = body
            .as_ref()
            .map(|b| serde_json::from_str(&unknown(&b.to_string())).unwrap());
        let (missing_status, of_missing) =
            send_as(&walls.server, token, method, &unknown(&path), body_of_missing.as_ref()).await;
        assert_eq!((missing_status, status), (404, 404), "{what}: {refused}");
        assert_eq!(unknown(&refused), of_missing, "{what}: as a run that does not exist");
        assert!(
            !refused.contains(owner) && refused.contains("unknown_run"),
            "{what}: {refused}"
        );
    }
}

#[tokio::test]
async fn a_run_on_another_resources_thread_answers_every_run_route_as_an_unknown_run_and_changes_nothing() {
    let walls = walls().await;
    let (run, call) = walls.hers.clone();
    let before = snapshot(&walls.store).await;
    walled_off(&walls, BOB, (&run, &call), &walls.her_failed, "alice").await;
    assert_eq!(snapshot(&walls.store).await, before, "bob changed nothing");

    // Alice reads and answers her run.
    let (status, body) = send_as(&walls.server, ALICE, "GET", &format!("/api/runs/{run}"), None).await;
    assert_eq!(status, 200, "{body}");
    let approve = json!({"runId": run, "toolCallId": call});
    let approved = walls
        .server
        .client
        .post(walls.server.url("/api/agents/approver/approve-tool-call"))
        .bearer_auth(ALICE)
        .json(&approve)
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), 200);
    Sse::read(approved).await;
    let done = walls.store.get(&run).await.unwrap().unwrap();
    assert_eq!(done.status(), askloop::RunStatus::Completed);
}

#[tokio::test]
async fn a_run_another_person_started_on_no_thread_answers_every_run_route_as_an_unknown_run_and_changes_nothing() {
    let walls = walls().await;
    let (run, call) = walls.bobs.clone();
    let before = snapshot(&walls.store).await;
    walled_off(&walls, ALICE, (&run, &call), &walls.bobs_failed, "bob").await;
    // A run of no resource (the CLI's, a program's on the library) is no
    // walled caller's either.
    let (plain, plain_call) = {
        let run = walls.store.get(&walls.plain).await.unwrap().unwrap();
        (
            run.run_id.clone(),
            run.waiting_calls(chrono::DateTime::<chrono::Utc>::MIN_UTC)
                .next()
                .unwrap()
                .call
                .tool_call_id
                .clone(),
        )
    };
    for (token, failed, owner) in [(ALICE, &walls.bobs_failed, "bob"), (BOB, &walls.her_failed, "alice")] {
        walled_off(&walls, token, (&plain, &plain_call), failed, owner).await;
    }
    assert_eq!(snapshot(&walls.store).await, before, "alice changed nothing");

    // Bob reads and approves his own; the unwalled ops token reads both.
    for (token, run) in [(BOB, &run), (OPS, &run), (OPS, &plain)] {
        let (status, body) = send_as(&walls.server, token, "GET", &format!("/api/runs/{run}"), None).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = send_as(
        &walls.server,
        BOB,
        "POST",
        "/api/agents/approver/approve-tool-call",
        Some(&json!({"runId": run, "toolCallId": call})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let done = walls.store.get(&run).await.unwrap().unwrap();
    assert_eq!(done.status(), askloop::RunStatus::Completed);
    assert_eq!(done.resource_id.as_deref(), Some("bob"), "stored with the run");
}

#[tokio::test]
async fn a_walled_token_lists_counts_and_reads_only_its_own_resources_runs_on_a_thread_or_not() {
    let walls = walls().await;
    let server = &walls.server;
    let (hers, _) = &walls.hers;
    let (bobs, _) = &walls.bobs;
    let sorted = |mut ids: Vec<String>| {
        ids.sort();
        ids
    };
    let his = sorted(vec![bobs.clone(), walls.bobs_failed.clone()]);
    assert_eq!(listed(server, BOB, "/api/runs?total=true").await, (his.clone(), 2));
    assert_eq!(
        listed(server, BOB, "/api/runs?total=true&limit=1").await.1,
        2,
        "a short page counts within the wall too"
    );
    assert_eq!(
        listed(server, BOB, "/api/agents/approver/suspended-runs").await,
        (vec![bobs.clone()], 1)
    );
    let hers_all = sorted(vec![hers.clone(), walls.her_failed.clone()]);
    assert_eq!(listed(server, ALICE, "/api/runs?total=true").await, (hers_all, 2));
    assert_eq!(
        listed(server, ALICE, "/api/agents/approver/suspended-runs").await,
        (vec![hers.clone()], 1)
    );
    let everything = sorted(vec![
        hers.clone(),
        walls.her_failed.clone(),
        walls.plain.clone(),
        bobs.clone(),
        walls.bobs_failed.clone(),
    ]);
    assert_eq!(listed(server, OPS, "/api/runs?total=true").await, (everything, 5));
    // A caller without a wall reads a run on anyone's thread.
    let (status, body) = send_as(server, OPS, "GET", &format!("/api/runs/{hers}"), None).await;
    assert_eq!(status, 200, "{body}");
    let run: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (run["threadId"].as_str(), run["resourceId"].as_str()),
        (Some("wt"), Some("alice"))
    );
}

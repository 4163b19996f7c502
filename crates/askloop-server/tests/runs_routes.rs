//! askloop's own routes: `/api/runs` (paged), `/api/runs/{runId}`,
//! `/api/runs/{runId}/cancel`, `/healthz`; and the bearer token and CORS.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use askloop::RunStore;
use askloop_server::ServerOptions;
use askloop_store::SqliteStore;
use common::*;
use serde_json::{Value, json};

async fn start_runs(server: &TestServer, agent: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let started = server
            .post_sse(&format!("/api/agents/{agent}/stream"), json!({"messages": PROMPT}))
            .await;
        ids.push(started.chunks[0]["runId"].as_str().unwrap().to_owned());
    }
    ids
}

async fn json_of(response: reqwest::Response) -> Value {
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test]
async fn runs_are_listed_newest_first_in_pages_that_follow_next_cursor_to_the_end() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let mut ids = start_runs(&server, "assistant", 7).await;
    ids.reverse();

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/runs?limit=3&cursor={c}"),
            None => "/api/runs?limit=3".to_owned(),
        };
        let page = json_of(server.get(&path).await).await;
        let runs = page["runs"].as_array().unwrap();
        assert!(runs.len() <= 3);
        seen.extend(runs.iter().map(|r| r["runId"].as_str().unwrap().to_owned()));
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ids);
}

/// Every run id a listing gives, following `nextCursor` to the end.
async fn listed_ids(server: &TestServer, first: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let mut path = first.to_owned();
    loop {
        let page = json_of(server.get(&path).await).await;
        let runs = page["runs"].as_array().unwrap();
        seen.extend(runs.iter().map(|r| r["runId"].as_str().unwrap().to_owned()));
        match page["nextCursor"].as_str() {
            Some(next) => path = format!("{first}&cursor={next}"),
            None => return seen,
        }
    }
}

#[tokio::test]
async fn a_damaged_row_is_left_out_and_the_runs_after_it_are_still_listed() {
    use askloop_store::conformance::RawRows;
    let dir = tempfile::tempdir().unwrap();
    let sqlite = std::sync::Arc::new(
        askloop_store::SqliteStore::open(dir.path().join("runs.db"))
            .await
            .unwrap(),
    );
    let store: std::sync::Arc<dyn askloop::RunStore> = sqlite.clone();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let mut ids = start_runs(&server, "assistant", 7).await;
    ids.reverse();
    // The newest but one, then the one just before the last page.
    for damaged in [&ids[1], &ids[4]] {
        sqlite.corrupt_run(damaged).await;
    }
    let readable: Vec<String> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| ![1, 4].contains(i))
        .map(|(_, id)| id.clone())
        .collect();
    for limit in [1, 2, 3, 50] {
        let first = format!("/api/runs?limit={limit}");
        assert_eq!(listed_ids(&server, &first).await, readable, "pages of {limit}");
        let suspended = format!("/api/runs?status=suspended&limit={limit}");
        assert_eq!(
            listed_ids(&server, &suspended).await,
            readable,
            "suspended, pages of {limit}"
        );
    }
}

#[tokio::test]
async fn a_page_after_new_runs_were_created_neither_repeats_nor_skips_runs() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let mut older = start_runs(&server, "assistant", 4).await;
    older.reverse();
    let first = json_of(server.get("/api/runs?limit=2").await).await;
    let cursor = first["nextCursor"].as_str().unwrap().to_owned();
    start_runs(&server, "assistant", 3).await;
    let second = json_of(server.get(&format!("/api/runs?limit=2&cursor={cursor}")).await).await;
    let ids: Vec<&str> = second["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [older[2].as_str(), older[3].as_str()]);
    assert_eq!(second["nextCursor"], Value::Null);
}

#[tokio::test]
async fn a_status_filtered_page_does_not_skip_runs_that_left_the_filter_since() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let mut ids = start_runs(&server, "assistant", 5).await;
    ids.reverse();
    let first = json_of(server.get("/api/runs?status=suspended&limit=2").await).await;
    let cursor = first["nextCursor"].as_str().unwrap().to_owned();
    // The newest run is answered and leaves the suspended listing.
    let body = json!({"runId": ids[0], "resumeData": "staging"});
    server.post_sse("/api/agents/assistant/resume-stream", body).await;
    let second = json_of(
        server
            .get(&format!("/api/runs?status=suspended&limit=2&cursor={cursor}"))
            .await,
    )
    .await;
    let got: Vec<&str> = second["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].as_str().unwrap())
        .collect();
    assert_eq!(got, [ids[2].as_str(), ids[3].as_str()]);
}

/// An agent like `assistant` under another id, on `store`.
fn assistant_named(agent_id: &str, store: &std::sync::Arc<dyn askloop::RunStore>) -> askloop::Agent {
    askloop::Agent::builder(agent_id)
        .model(scripted(DEPLOY_SCRIPT))
        .tool(askloop::AskUser::new())
        .store(std::sync::Arc::clone(store))
        .build()
        .unwrap()
}

#[tokio::test]
async fn with_total_every_page_says_how_many_runs_the_whole_listing_holds() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store), approver(&store)], store).await;
    let asked = start_runs(&server, "assistant", 5).await;
    start_runs(&server, "approver", 2).await;
    server
        .post_sse(
            "/api/agents/assistant/resume-stream",
            json!({"runId": asked[0], "resumeData": "staging"}),
        )
        .await;

    // 4 questions and 2 approvals wait, on every page of 4.
    let first = json_of(server.get("/api/runs?status=suspended&limit=4&total=true").await).await;
    assert_eq!(first["total"], 6);
    assert_eq!(first["runs"].as_array().unwrap().len(), 4);
    let cursor = first["nextCursor"].as_str().unwrap();
    let last = json_of(
        server
            .get(&format!(
                "/api/runs?status=suspended&limit=4&total=true&cursor={cursor}"
            ))
            .await,
    )
    .await;
    assert_eq!(last["total"], 6, "the whole listing, not what is left of it");
    assert_eq!(last["runs"].as_array().unwrap().len(), 2);

    let of_agent = json_of(server.get("/api/runs?agentId=assistant&total=true&limit=1").await).await;
    assert_eq!(of_agent["total"], 5);
    let completed = json_of(server.get("/api/runs?status=completed&total=true").await).await;
    assert_eq!(completed["total"], 1);

    // Counting is asked for, not done on every listing.
    let plain = json_of(server.get("/api/runs?status=suspended").await).await;
    assert!(plain.get("total").is_none(), "{plain}");
    let refused = server.get("/api/runs?total=yes").await;
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("total"), "{body}");
}

#[tokio::test]
async fn a_token_limited_to_some_agents_counts_only_their_runs() {
    use askloop_server::ApiToken;
    let store = memory_store();
    let options = ServerOptions::default().tokens(vec![
        ApiToken::new("everyone", "secret-of-everyone"),
        ApiToken::new("support", "secret-of-support").only_agents(vec!["assistant".into()]),
        ApiToken::new("pair", "secret-of-the-pair").only_agents(vec!["assistant".into(), "approver".into()]),
    ]);
    let agents = vec![assistant(&store), approver(&store), assistant_named("ops", &store)];
    let server = TestServer::start_with(agents, store, options).await;
    for (agent, n) in [("assistant", 3), ("approver", 2), ("ops", 4)] {
        for _ in 0..n {
            let response = server
                .client
                .post(server.url(&format!("/api/agents/{agent}/stream")))
                .bearer_auth("secret-of-everyone")
                .json(&json!({"messages": PROMPT}))
                .send()
                .await
                .unwrap();
            Sse::read(response).await;
        }
    }
    let total = |secret: &'static str, query: &'static str| {
        let request = server
            .client
            .get(server.url(&format!("/api/runs?status=suspended&total=true&limit=1{query}")))
            .bearer_auth(secret);
        async move {
            let page = json_of(request.send().await.unwrap()).await;
            page["total"].clone()
        }
    };
    assert_eq!(total("secret-of-everyone", "").await, 9);
    assert_eq!(total("secret-of-support", "").await, 3);
    assert_eq!(
        total("secret-of-the-pair", "").await,
        5,
        "assistant's and approver's, not ops'"
    );
    assert_eq!(total("secret-of-the-pair", "&agentId=approver").await, 2);
    let refused = server
        .client
        .get(server.url("/api/runs?status=suspended&total=true&agentId=ops"))
        .bearer_auth("secret-of-the-pair")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
}

#[tokio::test]
async fn runs_filter_by_status_and_agent_and_show_their_pending_questions() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store), approver(&store)], store).await;
    let asked = start_runs(&server, "assistant", 2).await;
    let approvals = start_runs(&server, "approver", 1).await;
    server
        .post_sse(
            "/api/agents/assistant/resume-stream",
            json!({"runId": asked[0], "resumeData": "staging"}),
        )
        .await;

    let suspended = json_of(server.get("/api/runs?status=suspended").await).await;
    let ids: HashSet<&str> = suspended["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, HashSet::from([asked[1].as_str(), approvals[0].as_str()]));

    let mine = json_of(server.get("/api/runs?agentId=approver").await).await;
    let run = &mine["runs"][0];
    assert_eq!(mine["runs"].as_array().unwrap().len(), 1);
    assert_eq!(run["agentId"], "approver");
    let pending = &run["pendingToolCalls"][0];
    assert_eq!(pending["kind"], "approval");
    assert_eq!(pending["requiresApproval"], true);
    assert_eq!(pending["toolName"], "ask_approval");

    let completed = json_of(server.get("/api/runs?status=completed&agentId=assistant").await).await;
    assert_eq!(completed["runs"][0]["runId"], asked[0].as_str());
    assert_eq!(completed["runs"][0]["pendingToolCalls"], json!([]));
}

#[tokio::test]
async fn one_run_shows_status_pending_calls_with_schema_and_the_conversation() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let ids = start_runs(&server, "assistant", 1).await;
    let run = json_of(server.get(&format!("/api/runs/{}", ids[0])).await).await;
    assert_eq!(run["runId"], ids[0].as_str());
    assert_eq!(run["agentId"], "assistant");
    assert_eq!(run["status"], "suspended");
    assert!(run["version"].is_number() && run["createdAt"].is_string() && run["updatedAt"].is_string());
    let pending = &run["pendingToolCalls"][0];
    assert_eq!(pending["kind"], "suspended");
    assert_eq!(
        pending["suspendPayload"]["question"],
        "Which environment should I deploy to?"
    );
    assert_eq!(pending["resumeSchema"]["enum"], json!(["staging", "production"]));
    let messages = run["messages"].as_array().unwrap();
    assert_eq!(messages[0], json!({"role": "user", "content": PROMPT}));
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["toolCalls"][0]["name"], "ask_user");
}

#[tokio::test]
async fn cancel_stops_a_suspended_run_and_refuses_a_finished_one() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let ids = start_runs(&server, "assistant", 1).await;
    let cancelled = json_of(server.post(&format!("/api/runs/{}/cancel", ids[0]), json!({})).await).await;
    assert_eq!(cancelled, json!({"runId": ids[0], "status": "cancelled"}));
    let run = json_of(server.get(&format!("/api/runs/{}", ids[0])).await).await;
    assert_eq!(run["status"], "cancelled");

    let again = server.post(&format!("/api/runs/{}/cancel", ids[0]), json!({})).await;
    let (status, error) = error_of(again).await;
    assert_eq!((status, error["code"].as_str().unwrap()), (409, "run_finished"));
    assert!(
        error["message"].as_str().unwrap().contains("is already cancelled"),
        "{error}"
    );
    let resumed = server
        .post(
            "/api/agents/assistant/resume-stream",
            json!({"runId": ids[0], "resumeData": "staging"}),
        )
        .await;
    assert_eq!(resumed.status(), 409);
}

#[tokio::test]
async fn healthz_answers_ok_without_a_token() {
    let store = memory_store();
    let options = ServerOptions::default().token(Some("s3cret".into()));
    let server = TestServer::start_with(vec![assistant(&store)], store, options).await;
    let health = server.get("/healthz").await;
    assert_eq!(health.status(), 200);
    assert_eq!(health.json::<Value>().await.unwrap(), json!({"status": "ok"}));
}

#[tokio::test]
async fn healthz_is_a_503_store_unavailable_once_the_store_stops_answering() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Arc::new(SqliteStore::open(dir.path().join("runs.db")).await.unwrap());
    let store: Arc<dyn RunStore> = sqlite.clone();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    assert_eq!(server.get("/healthz").await.status(), 200);
    sqlite.close().await;
    let health = server.get("/healthz").await;
    assert_eq!(health.status(), 503);
    let body: Value = health.json().await.unwrap();
    assert_eq!(body["status"], "unavailable", "{body}");
    assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert_eq!(message, askloop::StoreError::Closed.to_string(), "{body}");
}

#[tokio::test]
async fn with_a_token_every_api_route_needs_the_bearer_token() {
    let store = memory_store();
    let options = ServerOptions::default().token(Some("s3cret".into()));
    let server = TestServer::start_with(vec![assistant(&store)], store, options).await;
    let routes: Vec<(&str, &str)> = vec![
        ("GET", "/api/agents"),
        ("GET", "/api/agents/assistant"),
        ("POST", "/api/agents/assistant/stream"),
        ("POST", "/api/agents/assistant/generate"),
        ("POST", "/api/agents/assistant/resume-stream"),
        ("POST", "/api/agents/assistant/approve-tool-call"),
        ("POST", "/api/agents/assistant/decline-tool-call"),
        ("GET", "/api/agents/assistant/suspended-runs"),
        ("GET", "/api/runs"),
        ("GET", "/api/runs/x"),
        ("POST", "/api/runs/x/cancel"),
    ];
    for (method, path) in &routes {
        for auth in [
            None,
            Some("Bearer wrong"),
            Some("Bearer s3cre"),
            Some("s3cret"),
            Some("Basic s3cret"),
        ] {
            let mut request = server
                .client
                .request(method.parse().unwrap(), server.url(path))
                .json(&json!({"messages": PROMPT}));
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 401, "{method} {path} with {auth:?}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["code"], "unauthorized");
        }
    }
    let listed = server
        .client
        .get(server.url("/api/agents"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    let runs: Value = server
        .client
        .get(server.url("/api/runs"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(runs["runs"], json!([]), "no refused request started a run");
}

#[tokio::test]
async fn cors_is_off_by_default_and_allows_only_the_configured_origins() {
    let store = memory_store();
    let off = TestServer::start(vec![assistant(&store)], store.clone()).await;
    let response = off
        .client
        .get(off.url("/api/agents"))
        .header("origin", "https://inbox.example")
        .send()
        .await
        .unwrap();
    assert!(response.headers().get("access-control-allow-origin").is_none());

    let options = ServerOptions::default().cors_origins(vec!["https://inbox.example".into()]);
    let on = TestServer::start_with(vec![assistant(&store)], store, options).await;
    let preflight = on
        .client
        .request(reqwest::Method::OPTIONS, on.url("/api/agents/assistant/stream"))
        .header("origin", "https://inbox.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization, content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(
        preflight.headers()["access-control-allow-origin"],
        "https://inbox.example"
    );
    let other = on
        .client
        .get(on.url("/api/agents"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn without_a_token_the_server_refuses_to_listen_beyond_loopback_unless_allowed() {
    let store = memory_store();
    let server = askloop_server::Server::new(vec![assistant(&store)], store.clone()).unwrap();
    let public: std::net::SocketAddr = "0.0.0.0:4111".parse().unwrap();
    let err = server.check_exposure(public).unwrap_err();
    assert!(matches!(err, askloop_server::ServerError::Unprotected { .. }));
    assert!(err.to_string().contains("ASKLOOP_API_TOKEN"));
    assert!(server.check_exposure("127.0.0.1:4111".parse().unwrap()).is_ok());
    assert!(server.check_exposure("[::1]:4111".parse().unwrap()).is_ok());

    let allowed = askloop_server::Server::new(vec![assistant(&store)], store.clone())
        .unwrap()
        .options(ServerOptions::default().allow_unauthenticated(true));
    assert!(allowed.check_exposure(public).is_ok());
    let with_token = askloop_server::Server::new(vec![assistant(&store)], store.clone())
        .unwrap()
        .options(ServerOptions::default().token(Some("0123456789abcdef".into())));
    assert!(with_token.check_exposure(public).unwrap().is_empty());

    // A secret a guess could find is refused beyond loopback, and only
    // warned of on loopback.
    let short = askloop_server::Server::new(vec![assistant(&store)], store.clone())
        .unwrap()
        .options(ServerOptions::default().token(Some("t".into())));
    let err = short.check_exposure(public).unwrap_err().to_string();
    assert!(
        err.contains("ASKLOOP_API_TOKEN") && err.contains("at least 16"),
        "{err}"
    );
    let warnings = short.check_exposure("127.0.0.1:4111".parse().unwrap()).unwrap();
    assert_eq!(warnings.len(), 1);
    // A secret with white space at an end could never match: refused
    // everywhere.
    let spaced = askloop_server::Server::new(vec![assistant(&store)], store)
        .unwrap()
        .options(ServerOptions::default().tokens(vec![askloop_server::ApiToken::new("ci", " 0123456789abcdef ")]));
    let err = spaced
        .check_exposure("127.0.0.1:4111".parse().unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("ci") && err.contains("white space"), "{err}");
}

#[tokio::test]
async fn retry_continues_a_run_failed_by_a_provider_error_and_refuses_one_that_did_not_fail() {
    let fake = askloop_testkit::FakeServer::builder()
        .fail_request(
            1,
            askloop_testkit::FakeError::new(503, "The engine is currently overloaded"),
        )
        .responder(askloop_testkit::workload::deploy_responder())
        .start()
        .await
        .unwrap();
    let store = memory_store();
    let server = TestServer::start(vec![agent_on("assistant", &fake, &store)], store).await;
    let failed = server
        .post_sse(
            "/api/agents/assistant/stream",
            json!({"messages": PROMPT, "runId": "r1"}),
        )
        .await;
    assert!(failed.types().contains(&"error".to_owned()), "{:?}", failed.types());
    assert_eq!(stored_run(&server, "r1").await["status"], "failed");

    let retried = server.post_sse("/api/runs/r1/retry", json!({})).await;
    assert_eq!(retried.status, 200, "{}", retried.body);
    let question = retried.first("tool-call-suspended");
    assert_eq!(question["runId"], "r1");
    assert_eq!(stored_run(&server, "r1").await["status"], "suspended");

    // Suspended, not failed: nothing to retry.
    let (status, error) = error_of(server.post("/api/runs/r1/retry", json!({})).await).await;
    assert_eq!(status, 409);
    assert_eq!(error["code"], "not_retryable");
    assert!(error["message"].as_str().unwrap().contains("suspended"), "{error}");
    let (status, _) = error_of(server.post("/api/runs/nope/retry", json!({})).await).await;
    assert_eq!(status, 404);
}

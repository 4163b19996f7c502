//! askloop's own routes: `/api/runs` (paged), `/api/runs/{runId}`,
//! `/api/runs/{runId}/cancel`, `/healthz`; and the bearer token and CORS.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;

use askloop_server::ServerOptions;
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
    assert_eq!(again.status(), 409);
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
    let with_token = askloop_server::Server::new(vec![assistant(&store)], store)
        .unwrap()
        .options(ServerOptions::default().token(Some("t".into())));
    assert!(with_token.check_exposure(public).is_ok());
}

/// An `assistant` whose model is the fake OpenAI server, with no retries
/// of its own, so one failing request fails the run.
fn assistant_on(server: &askloop_testkit::FakeServer, store: &std::sync::Arc<dyn askloop::RunStore>) -> askloop::Agent {
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
    askloop::Agent::builder("assistant")
        .model(model)
        .tool(askloop::AskUser::new())
        .store(std::sync::Arc::clone(store))
        .build()
        .unwrap()
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
    let server = TestServer::start(vec![assistant_on(&fake, &store)], store).await;
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

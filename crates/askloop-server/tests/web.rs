//! The web page's files and `GET /api/events`, over real HTTP. (The page
//! itself runs in a browser in `crates/askloop-cli/tests/web_page.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use askloop::sse::SseDecoder;
use askloop_server::ServerOptions;
use common::{TestServer, assistant, memory_store};
use reqwest::StatusCode;
use reqwest::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use serde_json::{Value, json};

/// A bound on a hang, not a measure of speed.
const PATIENCE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn the_page_is_served_at_each_of_its_paths_with_a_strict_csp() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    for path in [
        "/",
        "/inbox",
        "/runs/01a2-some-run",
        "/threads/0193c4a2-some-thread",
        "/threads/a%20b%2Fc",
    ] {
        let response = server.get(path).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let headers = response.headers();
        assert_eq!(headers[CONTENT_TYPE], "text/html; charset=utf-8", "{path}");
        let csp = headers[CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(
            csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
            "{csp}"
        );
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        let body = response.text().await.unwrap();
        assert!(body.contains(r#"<script type="module" src="/assets/app.js"></script>"#));
    }
}

#[tokio::test]
async fn a_page_file_is_revalidated_by_its_etag() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let first = server.get("/assets/app.js").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()[CONTENT_TYPE], "text/javascript; charset=utf-8");
    assert_eq!(first.headers()[CACHE_CONTROL], "no-cache");
    let etag = first.headers()[ETAG].clone();
    let again = server
        .client
        .get(server.url("/assets/app.js"))
        .header(IF_NONE_MATCH, etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert!(again.bytes().await.unwrap().is_empty());

    let missing = server.get("/assets/nope.js").await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unknown_route");
}

#[tokio::test]
async fn with_a_token_the_page_files_are_open_and_the_event_stream_is_not() {
    let store = memory_store();
    let options = ServerOptions::default().token(Some("secret".to_owned()));
    let server = TestServer::start_with(vec![assistant(&store)], store, options).await;
    assert_eq!(server.get("/").await.status(), StatusCode::OK);
    assert_eq!(server.get("/assets/style.css").await.status(), StatusCode::OK);
    assert_eq!(server.get("/api/events").await.status(), StatusCode::UNAUTHORIZED);
}

/// Reads the event stream until a frame of `event` arrives; returns its data.
async fn next_event(response: &mut reqwest::Response, decoder: &mut SseDecoder, event: &str) -> String {
    let mut skipped = Vec::new();
    loop {
        while let Some(next) = decoder.next_event().unwrap() {
            if next.event == event {
                return next.data.to_owned();
            }
            skipped.push(next.to_owned_event());
        }
        let chunk = tokio::time::timeout(PATIENCE, response.chunk())
            .await
            .unwrap_or_else(|_| panic!("no `{event}` event within {PATIENCE:?}; got {skipped:?}"))
            .unwrap()
            .expect("the event stream ended");
        decoder.push(&chunk);
    }
}

#[tokio::test]
async fn the_event_stream_says_ready_then_names_a_run_that_raised_a_question() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let mut events = server.get("/api/events").await;
    assert_eq!(events.status(), StatusCode::OK);
    assert_eq!(events.headers()[CONTENT_TYPE], "text/event-stream");
    let mut decoder = SseDecoder::new();
    next_event(&mut events, &mut decoder, "ready").await;

    let asked = server
        .post_sse(
            "/api/agents/assistant/stream",
            json!({"messages": "Deploy the app", "runId": "run-events"}),
        )
        .await;
    assert!(asked.types().contains(&"tool-call-suspended".to_owned()));
    let change: Value = serde_json::from_str(&next_event(&mut events, &mut decoder, "run").await).unwrap();
    assert_eq!(change, json!({"runId": "run-events"}));
}

/// Opens `GET /api/events` with the bearer `secret`; a stream that opened
/// is read until it says `ready`.
async fn open_events(server: &TestServer, secret: &str) -> (reqwest::Response, SseDecoder) {
    let mut events = server
        .client
        .get(server.url("/api/events"))
        .bearer_auth(secret)
        .send()
        .await
        .unwrap();
    let mut decoder = SseDecoder::new();
    if events.status() == StatusCode::OK {
        next_event(&mut events, &mut decoder, "ready").await;
    }
    (events, decoder)
}

#[tokio::test]
async fn a_caller_holds_at_most_its_cap_of_event_streams_another_is_not_affected_and_a_closed_one_frees_a_slot() {
    let store = memory_store();
    let options = ServerOptions::default()
        .tokens(vec![
            askloop_server::ApiToken::new("alice", "alice-secret-0123456789"),
            askloop_server::ApiToken::new("bob", "bob-secret-0123456789"),
        ])
        .event_streams_per_caller(3);
    let server = TestServer::start_with(vec![assistant(&store)], store, options).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let (events, decoder) = open_events(&server, "alice-secret-0123456789").await;
        assert_eq!(events.status(), StatusCode::OK);
        held.push((events, decoder));
    }

    let (refused, _) = open_events(&server, "alice-secret-0123456789").await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_streams", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("holds 3 live event streams") && message.contains("--max-event-streams"),
        "the refusal names the cap and how to raise it: {message}"
    );

    let (bobs, _) = open_events(&server, "bob-secret-0123456789").await;
    assert_eq!(bobs.status(), StatusCode::OK, "another token has slots of its own");

    // The client of one stream goes away: its slot comes back once the
    // server sees it gone.
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let (reopened, _) = loop {
        let (attempt, decoder) = open_events(&server, "alice-secret-0123456789").await;
        if attempt.status() == StatusCode::OK {
            break (attempt, decoder);
        }
        assert_eq!(attempt.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the closed stream's slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(reopened.status(), StatusCode::OK);
    let (full_again, _) = open_events(&server, "alice-secret-0123456789").await;
    assert_eq!(
        full_again.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "one slot came back, not more"
    );
}

//! `GET /metrics`, scraped over real HTTP: the figures move as runs
//! suspend, are answered and declined; the route needs the token of a
//! server with tokens and answers no foreign host on one without; no run id
//! is ever a label; and two servers on one PostgreSQL database report the
//! same store-wide figures while each counts only what it wrote.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use askloop::RunStore;
use askloop_server::{Metrics, Server, ServerOptions};
use askloop_store::SqliteStore;
use common::*;
use serde_json::json;

const TOKEN: &str = "secret-of-the-metrics-test";

/// The sum of the samples named `name` whose labels include every one of
/// `labels` (`key="value"`), in a scrape in the Prometheus text format;
/// `None` when no sample matches.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (series_name, series_labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let own: Vec<&str> = series_labels.split(',').collect();
        if series_name == name && labels.iter().all(|l| own.contains(l)) {
            *found.get_or_insert(0.0) += value.parse::<f64>().unwrap();
        }
    }
    found
}

async fn scrape(server: &TestServer, token: Option<&str>) -> reqwest::Response {
    let request = server.client.get(server.url("/metrics"));
    let request = match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    };
    request.send().await.unwrap()
}

async fn scrape_text(server: &TestServer) -> String {
    let response = scrape(server, Some(TOKEN)).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "{:?}",
        response.headers()
    );
    response.text().await.unwrap()
}

/// Scrapes until `holds` holds for the text (the store-wide figures are
/// read in the background), and returns that text.
async fn scrape_until(server: &TestServer, what: &str, holds: impl Fn(&str) -> bool) -> String {
    for _ in 0..500 {
        let text = scrape_text(server).await;
        if holds(&text) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the scrape never showed {what}:\n{}", scrape_text(server).await);
}

fn options() -> ServerOptions {
    ServerOptions::default()
        .token(Some(TOKEN.to_owned()))
        .metrics_every(Duration::from_millis(10))
}

/// A server whose agents are built on `store` as observed by its metrics.
async fn observed_server(store: Arc<dyn RunStore>, options: ServerOptions) -> TestServer {
    let metrics = Metrics::new();
    let store = metrics.observe_store(store);
    let server = Server::new(vec![assistant(&store), approver(&store)], store)
        .unwrap()
        .options(options)
        .metrics(metrics);
    TestServer::serve(server).await
}

fn post(server: &TestServer, path: &str, body: serde_json::Value) -> reqwest::RequestBuilder {
    server.client.post(server.url(path)).bearer_auth(TOKEN).json(&body)
}

/// POSTs `body` to `path` with the token and reads the whole stream.
async fn post_sse(server: &TestServer, path: &str, body: serde_json::Value) -> Sse {
    Sse::read(post(server, path, body).send().await.unwrap()).await
}

#[tokio::test]
async fn the_figures_move_as_a_run_suspends_is_answered_and_another_is_declined() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn RunStore> = Arc::new(SqliteStore::open(dir.path().join("runs.db")).await.unwrap());
    let server = observed_server(store, options()).await;

    let before = scrape_until(&server, "the store's figures", |t| {
        sample(t, "askloop_store_calls_waiting", &["agent=\"assistant\""]).is_some()
    })
    .await;
    assert_eq!(sample(&before, "askloop_runs_started_total", &[]), Some(0.0));
    for agent in ["agent=\"assistant\"", "agent=\"approver\""] {
        assert_eq!(
            sample(&before, "askloop_store_calls_waiting", &[agent]),
            Some(0.0),
            "{before}"
        );
    }
    assert_eq!(sample(&before, "askloop_resolutions_total", &[]), None);

    // A question is raised: the store-wide figures show it waiting.
    let started = post_sse(&server, "/api/agents/assistant/stream", json!({"messages": PROMPT})).await;
    let suspended = started.first("tool-call-suspended");
    let run_id = suspended["runId"].as_str().unwrap().to_owned();
    let waiting = scrape_until(&server, "one question waiting", |t| {
        sample(t, "askloop_store_calls_waiting", &["agent=\"assistant\""]) == Some(1.0)
    })
    .await;
    assert_eq!(
        sample(&waiting, "askloop_store_runs_waiting", &["agent=\"assistant\""]),
        Some(1.0)
    );
    assert_eq!(sample(&waiting, "askloop_runs_started_total", &[]), Some(1.0));

    // Answered over HTTP: one resolution, one measured wait, the run done.
    let resumed = post_sse(
        &server,
        "/api/agents/assistant/resume-stream",
        json!({"runId": run_id, "toolCallId": suspended["payload"]["toolCallId"], "resumeData": "staging"}),
    )
    .await;
    assert_eq!(resumed.text(), "Deploying to User answered: staging.");

    // An approval, declined.
    let started = post_sse(&server, "/api/agents/approver/stream", json!({"messages": PROMPT})).await;
    let approval = started.first("tool-call-approval");
    let declined = post(
        &server,
        "/api/agents/approver/decline-tool-call",
        json!({"runId": approval["runId"], "toolCallId": approval["payload"]["toolCallId"]}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(declined.status(), 200);
    let _ = declined.bytes().await.unwrap();

    // The store's figures are read in the background: the last read may
    // predate the runs' last writes for a moment.
    let after = scrape_until(&server, "nothing waiting or running any more", |t| {
        sample(t, "askloop_store_calls_waiting", &["agent=\"approver\""]) == Some(0.0)
            && sample(t, "askloop_store_calls_waiting", &["agent=\"assistant\""]) == Some(0.0)
            && sample(t, "askloop_store_runs_running", &[]) == Some(0.0)
    })
    .await;
    assert_eq!(sample(&after, "askloop_runs_started_total", &[]), Some(2.0));
    assert_eq!(
        sample(&after, "askloop_runs_finished_total", &["status=\"completed\""]),
        Some(2.0)
    );
    let answered = ["kind=\"answered\"", "via=\"http\"", "edited=\"false\""];
    assert_eq!(sample(&after, "askloop_resolutions_total", &answered), Some(1.0));
    assert_eq!(
        sample(
            &after,
            "askloop_resolutions_total",
            &["kind=\"denied\"", "via=\"http\""]
        ),
        Some(1.0)
    );
    assert_eq!(sample(&after, "askloop_resolutions_total", &[]), Some(2.0));
    assert_eq!(
        sample(&after, "askloop_wait_seconds_count", &["kind=\"answered\""]),
        Some(1.0)
    );
    assert_eq!(
        sample(&after, "askloop_wait_seconds_count", &["kind=\"denied\""]),
        Some(1.0)
    );
    assert_eq!(sample(&after, "askloop_store_errors_total", &[]), None, "{after}");
    assert!(!after.contains(&run_id), "a run id in the figures:\n{after}");
}

#[tokio::test]
async fn the_figures_need_the_token_of_a_server_with_tokens() {
    let server = observed_server(memory_store(), options()).await;
    assert_eq!(scrape(&server, None).await.status(), 401);
    assert_eq!(scrape(&server, Some("not-the-token-at-all")).await.status(), 401);
    assert_eq!(scrape(&server, Some(TOKEN)).await.status(), 200);
}

#[tokio::test]
async fn a_server_without_tokens_shows_its_figures_to_no_foreign_host() {
    let server = observed_server(memory_store(), ServerOptions::default()).await;
    let foreign = server
        .client
        .get(server.url("/metrics"))
        .header("host", "attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    assert!(!foreign.text().await.unwrap().contains("askloop_"));
    assert_eq!(scrape(&server, None).await.status(), 200);
}

#[tokio::test]
async fn two_servers_on_one_database_report_one_store_and_count_each_write_once() {
    use askloop_store::conformance::{drop_schema, postgres_test_url, unique_schema_name};
    use askloop_store::{PostgresOptions, PostgresStore};

    let Some(url) = postgres_test_url("two_servers_on_one_database_report_one_store_and_count_each_write_once") else {
        return;
    };
    let schema = unique_schema_name();
    let connect = || PostgresStore::connect_with(&url, PostgresOptions::default().schema(&schema).max_connections(4));
    let (first, second) = (connect().await.unwrap(), connect().await.unwrap());
    let a = observed_server(Arc::new(first.clone()), options()).await;
    let b = observed_server(Arc::new(second.clone()), options()).await;

    // Raised through one server...
    let started = post_sse(&a, "/api/agents/assistant/stream", json!({"messages": PROMPT})).await;
    let suspended = started.first("tool-call-suspended");
    // ...shown waiting by both, as one store's figure.
    for server in [&a, &b] {
        scrape_until(server, "the question waiting", |t| {
            sample(t, "askloop_store_calls_waiting", &["agent=\"assistant\""]) == Some(1.0)
        })
        .await;
    }
    // Answered through the other: each write counted by the server that
    // made it, once in all.
    let resumed = post_sse(
        &b,
        "/api/agents/assistant/resume-stream",
        json!({"runId": suspended["runId"], "toolCallId": suspended["payload"]["toolCallId"], "resumeData": "staging"}),
    )
    .await;
    assert_eq!(resumed.text(), "Deploying to User answered: staging.");
    let mut started_total = 0.0;
    let mut answered_total = 0.0;
    for server in [&a, &b] {
        let text = scrape_until(server, "nothing waiting", |t| {
            sample(t, "askloop_store_calls_waiting", &["agent=\"assistant\""]) == Some(0.0)
        })
        .await;
        started_total += sample(&text, "askloop_runs_started_total", &[]).unwrap();
        answered_total += sample(&text, "askloop_resolutions_total", &["kind=\"answered\""]).unwrap_or(0.0);
    }
    assert_eq!(started_total, 1.0);
    assert_eq!(answered_total, 1.0);

    drop(a);
    drop(b);
    first.close().await;
    second.close().await;
    drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn model_calls_are_timed_and_counted_by_provider_and_how_they_ended() {
    use askloop::{Agent, Model};
    use askloop_providers::{OpenAiConfig, OpenAiModel};
    use askloop_testkit::{FakeResponse, FakeServer, FakeTurn};

    // The first call is refused (400: not retried), the second streams a reply.
    let provider = FakeServer::builder()
        .respond(FakeResponse::status(400, "the request was malformed"))
        .respond(FakeTurn::text_in("All done.", 3))
        .start()
        .await
        .unwrap();
    let metrics = Metrics::new();
    let store = metrics.observe_store(memory_store());
    let config = OpenAiConfig::new("gpt-4o-mini", provider.openai_base_url()).api_key("sk-test");
    let model: Arc<dyn Model> = Arc::new(OpenAiModel::new("openai/gpt-4o-mini", config).unwrap());
    let agent = Agent::builder("writer")
        .model(metrics.observe_model(model))
        .store(Arc::clone(&store))
        .build()
        .unwrap();
    let server = Server::new(vec![agent], store)
        .unwrap()
        .options(options())
        .metrics(metrics);
    let server = TestServer::serve(server).await;

    for _ in 0..2 {
        post(&server, "/api/agents/writer/generate", json!({"messages": "Write it"}))
            .send()
            .await
            .unwrap();
    }
    let text = scrape_text(&server).await;
    let calls = |outcome: &str| {
        sample(
            &text,
            "askloop_model_calls_total",
            &["provider=\"openai\"", &format!("outcome=\"{outcome}\"")],
        )
    };
    assert_eq!((calls("api"), calls("ok")), (Some(1.0), Some(1.0)), "{text}");
    assert_eq!(
        sample(&text, "askloop_model_call_seconds_count", &["provider=\"openai\""]),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "askloop_model_first_event_seconds_count",
            &["provider=\"openai\""]
        ),
        Some(1.0),
        "only the call that streamed had a first event: {text}"
    );
}

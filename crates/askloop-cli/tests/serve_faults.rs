//! Provider faults under load through a real `askloop serve` process: many
//! runs at once over HTTP/SSE, half on an OpenAI agent and half on an
//! Anthropic one, whose fake providers fail every third request in turn
//! with a 429 (`Retry-After: 1`), a 500, an overload (529 / 503), a stream
//! cut mid-way and a stall with no bytes (ended by
//! `ASKLOOP_MODEL_IDLE_TIMEOUT=1`). Each run asks a question over the
//! stream, is answered with `resume-stream`, and replies with the answer.
//! A run that failed is retried with `POST /api/runs/{runId}/retry`, and
//! answered if it then asks.
//!
//! At the end, read from the SQLite file: every run `completed` (or
//! `failed` with a stored typed reason), none left `running`; every tool
//! call has exactly one result; every answer given is in its run's
//! conversation. `ASKLOOP_FAULT_RUNS` sets the number of runs (default 200).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use askloop::{Message, RunFailure, RunQuery, RunStatus, RunStore};
use askloop_testkit::{FakeResponse, FakeServer, FakeToolCall, FakeTurn, Fault, FaultSchedule, workload};
use serde_json::{Value, json};

mod common;

use common::Serve;

/// Retries of one run before the test gives up on it.
const MAX_RETRIES_PER_RUN: usize = 10;
/// A bound on a hang, never a timing assertion.
const PATIENCE: Duration = Duration::from_secs(300);

fn runs() -> usize {
    std::env::var("ASKLOOP_FAULT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

fn task_number(body: &Value) -> u64 {
    let first = &body["messages"][0]["content"];
    let text = match first {
        Value::String(text) => text.clone(),
        other => other[0]["text"].as_str().unwrap_or_default().to_owned(),
    };
    text.strip_prefix("Task ")
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Ask, then reply with the answer.
fn ask_then_reply(body: &Value) -> FakeResponse {
    let n = task_number(body);
    match workload::last_tool_result(body) {
        None => FakeTurn::default()
            .call(
                FakeToolCall::new(
                    "ask_user",
                    &json!({"question": format!("Which colour for task {n}?")}),
                    3,
                )
                .id(format!("call_ask_{n}")),
            )
            .into(),
        Some(answer) => FakeTurn::text_in(&format!("Task {n} done with {answer}."), 4).into(),
    }
}

async fn fault_server() -> FakeServer {
    FakeServer::builder()
        .faults(FaultSchedule::every(3, &Fault::ALL))
        .responder(ask_then_reply)
        .record_requests(false)
        .start()
        .await
        .unwrap()
}

const CONFIG: &str = r#"
[agents.openai]
model = "openai/gpt-4o-mini"

[agents.anthropic]
model = "anthropic/claude-sonnet-4-5"
"#;

/// What one stream showed: the call it suspended on, if any.
fn suspended_call(body: &str) -> Option<String> {
    askloop::sse::events(body.as_bytes())
        .unwrap_or_else(|err| panic!("{err}: {body}"))
        .iter()
        .filter_map(|event| serde_json::from_str::<Value>(&event.data).ok())
        .find(|chunk| chunk["type"] == "tool-call-suspended")
        .and_then(|chunk| chunk["payload"]["toolCallId"].as_str().map(str::to_owned))
}

async fn read_stream(client: &reqwest::Client, url: String, body: Value) -> String {
    let response = client.post(url).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200, "{body}");
    // A body cut by the server would be an error here: the stream must end
    // cleanly even when the model fails.
    response.text().await.unwrap()
}

struct Driven {
    run_id: String,
    answer: Option<String>,
    failures: usize,
    retries: usize,
}

async fn drive(
    client: reqwest::Client,
    api: String,
    agent: &'static str,
    n: usize,
    store: Arc<dyn RunStore>,
) -> Driven {
    let run_id = format!("served-{n}");
    let mut driven = Driven {
        run_id: run_id.clone(),
        answer: None,
        failures: 0,
        retries: 0,
    };
    let mut body = read_stream(
        &client,
        format!("{api}/agents/{agent}/stream"),
        json!({"messages": format!("Task {n}: ask me the colour."), "runId": run_id}),
    )
    .await;
    loop {
        let run = store.get(&run_id).await.unwrap().unwrap();
        match run.status() {
            RunStatus::Suspended => {
                let call = suspended_call(&body).unwrap_or_else(|| {
                    run.waiting_calls(chrono::DateTime::<chrono::Utc>::MIN_UTC)
                        .next()
                        .unwrap()
                        .call
                        .tool_call_id
                        .clone()
                });
                let answer = format!("colour-{n}");
                driven.answer = Some(answer.clone());
                body = read_stream(
                    &client,
                    format!("{api}/agents/{agent}/resume-stream"),
                    json!({"runId": run_id, "toolCallId": call, "resumeData": answer}),
                )
                .await;
            }
            RunStatus::Failed => {
                let failure = run
                    .failure
                    .clone()
                    .unwrap_or_else(|| panic!("{run_id} failed without a typed reason: {:?}", run.error()));
                driven.failures += 1;
                if !failure.is_transient() || driven.retries == MAX_RETRIES_PER_RUN {
                    return driven;
                }
                driven.retries += 1;
                body = read_stream(&client, format!("{api}/runs/{run_id}/retry"), json!({})).await;
            }
            RunStatus::Running => panic!("{run_id} is running after its stream ended"),
            _ => return driven,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_runs_under_provider_faults_end_completed_and_retried_ones_complete() {
    let runs = runs();
    let dir = tempfile::tempdir().unwrap();
    let openai = fault_server().await;
    let anthropic = fault_server().await;
    let config = dir.path().join("askloop.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let serving = Serve::in_dir(dir.path())
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", openai.openai_base_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("ANTHROPIC_BASE_URL", anthropic.anthropic_base_url())
        .env("ASKLOOP_MODEL_IDLE_TIMEOUT", "1")
        .args(["--recover-every", "0"])
        .config(&config)
        .start();
    let api = serving.url("/api");
    let store: Arc<dyn RunStore> = askloop_store::open(dir.path().join("runs.db").to_str().unwrap())
        .await
        .unwrap();

    let client = reqwest::Client::new();
    let tasks: Vec<_> = (0..runs)
        .map(|n| {
            let agent = if n % 2 == 0 { "openai" } else { "anthropic" };
            tokio::spawn(drive(client.clone(), api.clone(), agent, n, Arc::clone(&store)))
        })
        .collect();
    let driven = tokio::time::timeout(PATIENCE, futures::future::join_all(tasks))
        .await
        .expect("the runs did not all end");

    let mut completed = 0;
    let mut retried = 0;
    let mut failures = 0;
    let mut left_failed = Vec::new();
    let mut reasons: HashMap<String, usize> = HashMap::new();
    for joined in driven {
        let driven = joined.unwrap();
        let run_id = &driven.run_id;
        let run = store.get(run_id).await.unwrap().unwrap();
        failures += driven.failures;
        retried += usize::from(driven.retries > 0);
        match run.status() {
            RunStatus::Completed => completed += 1,
            RunStatus::Failed => {
                let failure = run.failure.clone().expect("a typed reason");
                *reasons.entry(failure_kind(&failure)).or_default() += 1;
                left_failed.push(format!("{run_id}: {failure:?}"));
            }
            other => panic!("{run_id} ended {other}"),
        }
        let messages = store.messages(run_id).await.unwrap();
        let mut results: HashMap<&str, usize> = HashMap::new();
        for message in &messages {
            if let Message::Tool(result) = message {
                *results.entry(result.tool_call_id.as_str()).or_default() += 1;
            }
        }
        assert!(
            results.values().all(|n| *n == 1),
            "{run_id}: a call with more than one result: {messages:?}"
        );
        if let Some(answer) = &driven.answer {
            let stored = messages.iter().any(
                |m| matches!(m, Message::Tool(result) if result.content.to_model_text().contains(answer.as_str())),
            );
            assert!(stored, "{run_id}: the answer {answer} was lost: {messages:?}");
        }
    }
    let running = store
        .list(&RunQuery {
            status: Some(RunStatus::Running),
            ..RunQuery::default()
        })
        .await
        .unwrap();
    let injected = |server: &FakeServer| {
        server
            .faults_injected()
            .iter()
            .map(|(fault, n)| format!("{} {n}", fault.name()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "served fault test: runs {runs}, completed {completed}, failed at the end {}, running {}, \
         failures seen {failures}, runs retried with POST /api/runs/{{runId}}/retry {retried}",
        left_failed.len(),
        running.len()
    );
    println!(
        "served fault test: requests openai {} [{}], anthropic {} [{}]",
        openai.request_count(),
        injected(&openai),
        anthropic.request_count(),
        injected(&anthropic)
    );
    assert!(running.is_empty(), "runs left running: {running:?}");
    assert!(
        left_failed.is_empty(),
        "still failed after retries: {left_failed:?} {reasons:?}"
    );
    assert_eq!(completed, runs);
    assert!(retried > 0, "no run failed: the faults did not reach the runs");
    for server in [&openai, &anthropic] {
        for (fault, n) in server.faults_injected() {
            assert!(n > 0, "no {} was injected", fault.name());
        }
    }
    drop(serving);
}

fn failure_kind(failure: &RunFailure) -> String {
    match failure {
        RunFailure::Model { transient, .. } => format!("model (transient {transient})"),
        other => format!("{other}"),
    }
}

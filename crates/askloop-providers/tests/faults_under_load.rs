//! Provider faults under load, through the library: many runs at once
//! against fake OpenAI and Anthropic servers that fail every third request
//! in turn with a 429 (with `Retry-After`), a 500, an overload (529 /
//! 503), a stream cut mid-way and a stall with no bytes. Each run charges
//! once (a tool that must not run twice, which counts its executions per
//! call id), asks a question, is answered, and replies with the answer.
//!
//! At the end, on a real SQLite file (and PostgreSQL with
//! `ASKLOOP_TEST_DATABASE_URL`): every run is `completed` or `failed` with
//! a stored typed reason, none is left `running`; no charge ran twice; every
//! answer given is in its run's stored conversation. Runs that failed for a
//! transient reason are retried with `Agent::retry_run` and complete.
//!
//! `ASKLOOP_FAULT_RUNS` sets the number of runs (default 200).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use askloop::{
    Agent, AskUser, FunctionTool, Message, Model, ResumeOptions, RunFailure, RunQuery, RunStatus, RunStore,
    StreamOptions, ToolOutput,
};
use askloop_providers::{HttpConfig, RetryPolicy};
use askloop_store::conformance::{drop_schema, postgres_test_url, unique_schema_name};
use askloop_store::{PostgresOptions, PostgresStore, SqliteStore};
use askloop_testkit::{
    FakeResponse, FakeServer, FakeToolCall, FakeTurn, Fault, FaultSchedule, workload::last_tool_result,
};
use common::{anthropic_model, openai_model};
use serde_json::{Value, json};

/// How often a failed run is retried before the test gives up on it (a
/// run that still fails then is reported, and fails the test).
const MAX_RETRIES_PER_RUN: usize = 10;
/// A bound on a hang, never a timing assertion.
const PATIENCE: Duration = Duration::from_secs(240);

fn runs() -> usize {
    std::env::var("ASKLOOP_FAULT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// Short waits, so that a stall ends within a second and a retry comes
/// quickly; the provider's own retries (3) are left on.
fn faulty_http() -> HttpConfig {
    HttpConfig {
        connect_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(1),
        total_timeout: Duration::from_secs(30),
        retry: RetryPolicy {
            max_retries: 3,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(100),
            max_retry_after: Duration::from_secs(5),
        },
    }
}

/// The task number in the run's first user message (`Task 17: ...`).
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

/// The model of every run: charge, then ask, then reply with the answer.
fn charge_ask_reply(body: &Value) -> FakeResponse {
    let n = task_number(body);
    match last_tool_result(body) {
        None => FakeTurn::default()
            .call(FakeToolCall::new("charge", &json!({"task": n}), 2).id(format!("call_charge_{n}")))
            .into(),
        Some(result) if result.contains("charged") => FakeTurn::default()
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
        .responder(charge_ask_reply)
        .record_requests(false)
        .start()
        .await
        .unwrap()
}

/// Executions of `charge`, per (run, call id).
type Charges = Arc<Mutex<HashMap<(String, String), usize>>>;

fn agent(id: &str, model: Arc<dyn Model>, store: Arc<dyn RunStore>, charges: &Charges) -> Agent {
    let charges = Arc::clone(charges);
    let charge = FunctionTool::builder("charge")
        .description("Charges the card. Must not run twice.")
        .input_schema(json!({"type": "object"}))
        .execute(move |_input: Value, ctx| {
            let charges = Arc::clone(&charges);
            async move {
                let key = (
                    ctx.run_id().unwrap_or("?").to_owned(),
                    ctx.tool_call_id().unwrap_or("?").to_owned(),
                );
                *charges.lock().unwrap().entry(key).or_default() += 1;
                Ok(ToolOutput::text("charged").into())
            }
        });
    Agent::builder(id)
        .model(model)
        .tool(charge)
        .tool(AskUser::new())
        .store(store)
        .build()
        .unwrap()
}

/// What happened to one run.
#[derive(Debug, Default)]
struct Journey {
    /// Typed failures seen on the way (each followed by a retry, if
    /// transient).
    failures: Vec<RunFailure>,
    /// The answer given.
    answer: Option<String>,
    final_status: Option<RunStatus>,
}

/// Drives one run: start, answer its question, retry it when it failed
/// for a transient reason.
async fn drive(agent: Agent, n: usize) -> (String, Journey) {
    let run_id = format!("fault-{n}");
    let mut journey = Journey::default();
    let mut output = agent
        .stream_with(
            format!("Task {n}: charge the card, then ask me the colour."),
            StreamOptions::with_run_id(&run_id),
        )
        .await
        .unwrap()
        .output()
        .await;
    let mut retries = 0;
    loop {
        match output.status {
            RunStatus::Suspended => {
                let call = output.pending[0].tool_call_id.clone();
                let answer = format!("colour-{n}");
                journey.answer = Some(answer.clone());
                output = agent
                    .resume_stream(json!(answer), ResumeOptions::call(&run_id, call))
                    .await
                    .unwrap()
                    .output()
                    .await;
            }
            RunStatus::Failed => {
                let stored = agent.get_run(&run_id).await.unwrap();
                let failure = stored
                    .failure
                    .clone()
                    .unwrap_or_else(|| panic!("{run_id} failed without a stored typed reason: {:?}", stored.error()));
                let transient = failure.is_transient();
                journey.failures.push(failure);
                if !transient || retries == MAX_RETRIES_PER_RUN {
                    break;
                }
                retries += 1;
                output = agent
                    .retry_run(&run_id, askloop::Author::default())
                    .await
                    .unwrap()
                    .output()
                    .await;
            }
            _ => break,
        }
    }
    journey.final_status = Some(output.status);
    (run_id, journey)
}

async fn faults_under_load(store: Arc<dyn RunStore>, label: &str) {
    let runs = runs();
    let openai = fault_server().await;
    let anthropic = fault_server().await;
    let charges: Charges = Arc::default();
    let agents = [
        agent(
            "openai",
            openai_model(&openai, faulty_http()),
            Arc::clone(&store),
            &charges,
        ),
        agent(
            "anthropic",
            anthropic_model(&anthropic, faulty_http()),
            Arc::clone(&store),
            &charges,
        ),
    ];
    let tasks: Vec<_> = (0..runs)
        .map(|n| tokio::spawn(drive(agents[n % 2].clone(), n)))
        .collect();
    let journeys = tokio::time::timeout(PATIENCE, futures::future::join_all(tasks))
        .await
        .expect("the runs did not all end");

    let mut failed_once = 0;
    let mut by_reason: HashMap<&'static str, usize> = HashMap::new();
    let mut completed = 0;
    let mut left_failed = Vec::new();
    for joined in journeys {
        let (run_id, journey) = joined.unwrap();
        let stored = store.get(&run_id).await.unwrap().unwrap();
        assert_eq!(Some(stored.status()), journey.final_status, "{run_id}");
        if !journey.failures.is_empty() {
            failed_once += 1;
        }
        for failure in &journey.failures {
            let reason = match failure {
                RunFailure::Model { transient: true, .. } => "model (transient)",
                RunFailure::Model { .. } => "model (not transient)",
                RunFailure::Store { .. } => "store",
                _ => "other",
            };
            *by_reason.entry(reason).or_default() += 1;
        }
        match stored.status() {
            RunStatus::Completed => completed += 1,
            RunStatus::Failed => {
                assert!(stored.failure.is_some(), "{run_id}: failed without a typed reason");
                left_failed.push(format!("{run_id}: {:?}", stored.failure));
            }
            other => panic!("{run_id} ended {other}: {:?}", stored.error()),
        }
        // No answer lost: the answer given is the question's tool result
        // and the reply the model made of it.
        let messages = store.messages(&run_id).await.unwrap();
        if let Some(answer) = &journey.answer {
            let answered = messages.iter().any(|m| {
                matches!(m, Message::Tool(result) if result.tool_call_id.starts_with("call_ask_")
                    && result.content.to_model_text().contains(answer.as_str()))
            });
            assert!(answered, "{run_id}: the answer {answer} is not stored: {messages:?}");
        }
        if stored.status() == RunStatus::Completed {
            let Some(Message::Assistant { content, .. }) = messages.last() else {
                panic!("{run_id}: ends with the reply: {messages:?}")
            };
            assert!(
                content.contains(&format!("colour-{}", &run_id["fault-".len()..])),
                "{run_id}: {content}"
            );
        }
    }
    let still_running = store
        .list(&RunQuery {
            status: Some(RunStatus::Running),
            ..RunQuery::default()
        })
        .await
        .unwrap();
    assert!(still_running.is_empty(), "runs left running: {still_running:?}");

    let charges = charges.lock().unwrap();
    let twice: Vec<_> = charges.iter().filter(|(_, n)| **n > 1).collect();
    let charged_runs = charges
        .keys()
        .map(|(run, _)| run)
        .collect::<std::collections::HashSet<_>>()
        .len();
    let injected = |server: &FakeServer| {
        server
            .faults_injected()
            .iter()
            .map(|(fault, n)| format!("{} {n}", fault.name()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut reasons: Vec<_> = by_reason.into_iter().collect();
    reasons.sort();
    println!(
        "fault test ({label}): runs {runs}, completed {completed}, failed at the end {}, \
         runs that failed and were retried {failed_once}, failures by reason {reasons:?}, \
         charges {} in {charged_runs} runs, charged twice {}",
        left_failed.len(),
        charges.values().sum::<usize>(),
        twice.len()
    );
    println!(
        "fault test ({label}): requests openai {} [{}], anthropic {} [{}]",
        openai.request_count(),
        injected(&openai),
        anthropic.request_count(),
        injected(&anthropic)
    );
    assert!(twice.is_empty(), "charged more than once: {twice:?}");
    assert!(
        left_failed.is_empty(),
        "runs still failed after retries: {left_failed:?}"
    );
    assert_eq!(completed, runs);
    assert_eq!(charged_runs, runs, "every completed run charged once");
    // The faults did happen, of every kind, on both providers.
    for server in [&openai, &anthropic] {
        for (fault, n) in server.faults_injected() {
            assert!(n > 0, "no {} was injected", fault.name());
        }
    }
    assert!(failed_once > 0, "no run failed: the faults did not reach the runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_runs_under_provider_faults_end_completed_or_failed_and_retried_ones_complete() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let store: Arc<dyn RunStore> = Arc::new(SqliteStore::open(path.to_str().unwrap()).await.unwrap());
    faults_under_load(store, "SQLite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_runs_under_provider_faults_end_completed_or_failed_and_retried_ones_complete() {
    let Some(url) = postgres_test_url("postgres fault test") else {
        return;
    };
    let schema = unique_schema_name();
    let store = PostgresStore::connect_with(&url, PostgresOptions::default().schema(&schema))
        .await
        .unwrap();
    faults_under_load(Arc::new(store.clone()), "PostgreSQL").await;
    store.close().await;
    drop_schema(&url, &schema).await;
}

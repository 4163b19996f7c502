//! Drives a scripted agent against a store in its own process, for the
//! cross-process tests of `askloop-store` (`tests/processes.rs`). Not a tool
//! for people: its output is one line per event, for the test to read.
//!
//! ```text
//! askloop-store-harness start  LOCATION RUN_ID            run until suspended, print `suspended RUN_ID`, then wait to be killed
//! askloop-store-harness resume LOCATION RUN_ID ANSWER     answer the run's question; print `completed TEXT`, `conflict`, ...
//! askloop-store-harness start-many LOCATION RUN_ID...    run each until suspended, print `suspended-all`, exit
//! askloop-store-harness resume-many LOCATION ANSWER RUN_ID...   print `ready`, wait for a line on stdin, resume all at once
//! ```
//!
//! `LOCATION` is anything `askloop_store::open` takes. Environment:
//! `ASKLOOP_HARNESS_SCHEMA` puts a PostgreSQL store in that schema;
//! `ASKLOOP_HARNESS_LOG` names a file that gets a line `model RUN_ID` per
//! model call and `tool RUN_ID` per execution of a tool with an answer;
//! `ASKLOOP_HARNESS_GATE_CLAIM=1` makes `resume` print `at-claim` when it is
//! about to claim the run and wait for a line on stdin, so a test can release
//! two processes into the compare-and-set at the same moment.

use std::error::Error;
use std::io::{BufRead, Write};
use std::sync::Arc;

use askloop::store::{Layered, Next, StoreLayer, StoreRequest, StoreResponse};
use askloop::{
    Agent, AskUser, ChunkKind, Model, ModelError, ModelRequest, ModelStream, ResumeOptions, RunError, RunQuery,
    RunStatus, RunStore, ScriptedModel, StoreError, StreamOptions, Tool, ToolContext, ToolError, ToolOutcome,
};
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::Value;

type Failure = Box<dyn Error + Send + Sync>;

/// Exit codes the tests read.
const EXIT_CONFLICT: i32 = 3;
const EXIT_NOT_SUSPENDED: i32 = 4;

const SCRIPT: &str = r#"{"turns": [
    {"text": "Let me ask.", "toolCalls": [{"name": "ask_user", "args": {"question": "Which city?"}}]},
    {"text": "Booked: {{toolResults}}"}
]}"#;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match run(&args).await {
        Ok(code) => code,
        Err(err) => {
            println!("error {err}");
            1
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

async fn run(args: &[String]) -> Result<i32, Failure> {
    let usage = "usage: askloop-store-harness start LOCATION RUN_ID | start-many LOCATION RUN_ID... | \
                 resume LOCATION RUN_ID ANSWER | resume-many LOCATION ANSWER RUN_ID...";
    let (command, location) = match args {
        [command, location, ..] => (command.as_str(), location.as_str()),
        _ => return Err(usage.into()),
    };
    let mut store = open(location).await?;
    if std::env::var("ASKLOOP_HARNESS_GATE_CLAIM").is_ok_and(|v| v == "1") {
        store = Arc::new(Layered::new(store, GateAtClaim));
    }
    let agent = agent(store)?;
    match (command, &args[2..]) {
        ("start", [run_id]) => start(&agent, run_id).await,
        ("start-many", run_ids) if !run_ids.is_empty() => start_many(&agent, run_ids).await,
        ("resume", [run_id, answer]) => resume(&agent, run_id, answer).await,
        ("resume-many", [answer, run_ids @ ..]) if !run_ids.is_empty() => resume_many(&agent, answer, run_ids).await,
        _ => Err(usage.into()),
    }
}

async fn open(location: &str) -> Result<Arc<dyn RunStore>, Failure> {
    match std::env::var("ASKLOOP_HARNESS_SCHEMA") {
        Ok(schema) if !schema.is_empty() => {
            let options = askloop_store::PostgresOptions::default().schema(schema);
            Ok(Arc::new(
                askloop_store::PostgresStore::connect_with(location, options).await?,
            ))
        }
        _ => Ok(askloop_store::open(location).await?),
    }
}

fn agent(store: Arc<dyn RunStore>) -> Result<Agent, Failure> {
    let model = ScriptedModel::from_json("harness", SCRIPT)?;
    Ok(Agent::builder("trip-planner")
        .model(Arc::new(CountingModel { inner: model }))
        .tool(CountingTool { inner: AskUser::new() })
        .store(store)
        .build()?)
}

/// Runs until the question is asked (and stored), says so, then waits to be
/// killed: the run must survive the process.
async fn start(agent: &Agent, run_id: &str) -> Result<i32, Failure> {
    let mut stream = agent
        .stream_with("Book me a trip", StreamOptions::with_run_id(run_id))
        .await?;
    while let Some(chunk) = stream.next().await {
        if matches!(chunk.kind, ChunkKind::ToolCallSuspended(_)) {
            println!("suspended {run_id}");
            std::io::stdout().flush()?;
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            }
        }
    }
    Err(format!("run {run_id} ended without asking its question").into())
}

async fn start_many(agent: &Agent, run_ids: &[String]) -> Result<i32, Failure> {
    for run_id in run_ids {
        let output = agent
            .stream_with("Book me a trip", StreamOptions::with_run_id(run_id))
            .await?
            .output()
            .await;
        if output.status != RunStatus::Suspended {
            return Err(format!("run {run_id} ended {} instead of asking its question", output.status).into());
        }
    }
    println!("suspended-all");
    Ok(0)
}

async fn resume(agent: &Agent, run_id: &str, answer: &str) -> Result<i32, Failure> {
    // The process that comes back lists what waits, the way a CLI would.
    let waiting = agent
        .store()
        .list(&RunQuery {
            status: Some(RunStatus::Suspended),
            ..Default::default()
        })
        .await?;
    if !waiting.iter().any(|r| r.run_id == run_id) {
        println!("not-listed {run_id}");
    }
    match agent.resume_stream(answer, ResumeOptions::run(run_id)).await {
        Ok(stream) => {
            let output = stream.output().await;
            if output.status == RunStatus::Completed {
                println!("completed {}", output.text);
                Ok(0)
            } else {
                println!("ended {} {:?}", output.status, output.error());
                Ok(1)
            }
        }
        Err(RunError::Conflict { .. }) => {
            println!("conflict {run_id}");
            Ok(EXIT_CONFLICT)
        }
        Err(RunError::NotSuspended { status, .. }) => {
            println!("not-suspended {run_id} {status}");
            Ok(EXIT_NOT_SUSPENDED)
        }
        Err(err) => Err(err.into()),
    }
}

async fn resume_many(agent: &Agent, answer: &str, run_ids: &[String]) -> Result<i32, Failure> {
    println!("ready");
    std::io::stdout().flush()?;
    wait_for_line().await?;
    let tasks: Vec<_> = run_ids
        .iter()
        .map(|run_id| {
            let agent = agent.clone();
            let run_id = run_id.clone();
            let answer = answer.to_owned();
            tokio::spawn(async move {
                let result = match agent.resume_stream(answer, ResumeOptions::run(&run_id)).await {
                    Ok(stream) => {
                        let output = stream.output().await;
                        match output.status {
                            RunStatus::Completed => Ok(()),
                            status => Err(format!("{status}: {}", output.error().unwrap_or_default())),
                        }
                    }
                    Err(err) => Err(err.to_string()),
                };
                (run_id, result)
            })
        })
        .collect();
    let mut failed = 0;
    for task in tasks {
        match task.await? {
            (run_id, Ok(())) => println!("completed {run_id}"),
            (run_id, Err(err)) => {
                failed += 1;
                println!("failed {run_id} {err}");
            }
        }
    }
    Ok(if failed == 0 { 0 } else { 1 })
}

async fn wait_for_line() -> Result<(), Failure> {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(|_| ())
    })
    .await??;
    Ok(())
}

fn log_event(event: &str, run_id: &str) {
    let Ok(path) = std::env::var("ASKLOOP_HARNESS_LOG") else {
        return;
    };
    // One short write to a file opened for appending: lines from several
    // processes do not interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(format!("{event} {run_id}\n").as_bytes()));
    if let Err(err) = written {
        println!("error cannot write the log {path}: {err}");
    }
}

/// The scripted model, counting its calls in the log.
#[derive(Debug)]
struct CountingModel {
    inner: ScriptedModel,
}

#[async_trait]
impl Model for CountingModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        log_event("model", request.run_id);
        self.inner.stream(request).await
    }
}

/// `ask_user`, counting the executions that carry an answer in the log.
struct CountingTool {
    inner: AskUser,
}

#[async_trait]
impl Tool for CountingTool {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn description(&self) -> &str {
        self.inner.description()
    }

    fn input_schema(&self) -> &Value {
        self.inner.input_schema()
    }

    fn suspend_schema(&self) -> Option<&Value> {
        self.inner.suspend_schema()
    }

    fn resume_schema(&self) -> Option<&Value> {
        self.inner.resume_schema()
    }

    fn resume_schema_for(&self, payload: &Value) -> Option<Value> {
        self.inner.resume_schema_for(payload)
    }

    fn check_resume_data(&self, data: &Value, payload: &Value) -> Result<(), askloop::InvalidResume> {
        self.inner.check_resume_data(data, payload)
    }

    /// As `ask_user`: running it again with the same answer is harmless,
    /// so a resume claims the run with a plain claim (the one the gate
    /// stops at), not with a started mark.
    fn idempotent(&self) -> bool {
        self.inner.idempotent()
    }

    fn max_calls_per_step(&self) -> Option<usize> {
        self.inner.max_calls_per_step()
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutcome, ToolError> {
        if ctx.resume_data().is_some() {
            log_event("tool", ctx.run_id().unwrap_or("-"));
        }
        self.inner.execute(input, ctx).await
    }
}

/// A store layer that stops before each claim until the test says go.
#[derive(Debug)]
struct GateAtClaim;

#[async_trait]
impl StoreLayer for GateAtClaim {
    async fn call(&self, request: StoreRequest<'_>, next: Next<'_>) -> Result<StoreResponse, StoreError> {
        if let StoreRequest::Claim { run_id, .. } = request {
            println!("at-claim {run_id}");
            let _ = std::io::stdout().flush();
            wait_for_line().await.map_err(StoreError::Backend)?;
        }
        next.run(request).await
    }
}

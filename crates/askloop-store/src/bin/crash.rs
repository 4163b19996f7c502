//! Drives many runs through the library against a store, for the crash test
//! (`tests/crash.rs`), which SIGKILLs this process at random moments and
//! starts it again. Not a tool for people.
//!
//! ```text
//! askloop-store-crash LOCATION RUNS LOG
//! ```
//!
//! Each start: takes over the runs whose lease ran out (a killed
//! predecessor's), starts the runs `crash-0` .. `crash-{RUNS-1}` that do not
//! exist yet, answers every pending question, and repeats until every run is
//! completed; then prints `done` and exits 0. Every run: the model calls
//! `charge` (a tool that is not idempotent), then asks two questions at once
//! and calls `pay` (not idempotent either, and waiting for approval, which
//! this process gives) in the same step, then replies with the answers. The
//! model is slow enough (a few tens of milliseconds per call) to be killed
//! mid-call. `LOG` gets a line `charge RUN_ID` (or `pay RUN_ID`) each time
//! the charge (or the payment) runs, written before it returns.
//! Prints `model` as each model call starts (the test kills it after a
//! random number of them, plus a random moment) and `recovered N` for each
//! look that took runs over.
//!
//! `ASKLOOP_CRASH_SCHEMA` puts a PostgreSQL store in that schema;
//! `ASKLOOP_CRASH_HOLD=1` answers only the first question of each run, so
//! no run can complete (the test kills such drivers without the risk of
//! them finishing first).

use std::collections::HashSet;
use std::error::Error;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use askloop::{
    Agent, AgentStream, AskUser, FunctionTool, Model, ModelError, ModelRequest, ModelStream, PendingKind,
    ResumeOptions, RunQuery, RunStatus, RunStore, ScriptedModel, StreamOptions, ToolOutput,
};
use async_trait::async_trait;
use serde_json::json;

type Failure = Box<dyn Error + Send + Sync>;

const SCRIPT: &str = r#"{"turns": [
    {"text": "Charging first.", "toolCalls": [{"name": "charge", "args": {}}]},
    {"toolCalls": [
        {"name": "ask_user", "args": {"question": "Which city?"}},
        {"name": "ask_user", "args": {"question": "Which day?"}},
        {"name": "pay", "args": {}}
    ]},
    {"text": "Booked: {{toolResults}}"}
]}"#;

/// A lease short enough that a killed driver's runs are taken over soon.
const LEASE: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct SlowModel {
    inner: ScriptedModel,
}

#[async_trait]
impl Model for SlowModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        say("model");
        tokio::time::sleep(Duration::from_millis(30)).await;
        self.inner.stream(request).await
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match run(&args).await {
        Ok(()) => 0,
        Err(err) => {
            println!("error {err}");
            1
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

fn say(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

async fn run(args: &[String]) -> Result<(), Failure> {
    let [location, runs, log] = args else {
        return Err("usage: askloop-store-crash LOCATION RUNS LOG".into());
    };
    let runs: usize = runs.parse()?;
    let store: Arc<dyn RunStore> = match std::env::var("ASKLOOP_CRASH_SCHEMA") {
        Ok(schema) if !schema.is_empty() => Arc::new(
            askloop_store::PostgresStore::connect_with(
                location,
                askloop_store::PostgresOptions::default().schema(schema),
            )
            .await?,
        ),
        _ => askloop_store::open(location).await?,
    };
    let log = Arc::new(Mutex::new(
        std::fs::OpenOptions::new().create(true).append(true).open(log)?,
    ));
    let agent = Agent::builder("crash")
        .model(Arc::new(SlowModel {
            inner: ScriptedModel::from_json("crash", SCRIPT)?,
        }))
        .tool(AskUser::new())
        .tool(logged_tool("charge", false, &log))
        .tool(logged_tool("pay", true, &log))
        .store(Arc::clone(&store))
        .lease_duration(LEASE)
        .build()?;

    let hold = std::env::var("ASKLOOP_CRASH_HOLD").is_ok_and(|v| v == "1");
    let mut driving = tokio::task::JoinSet::new();
    // The questions this process is answering now (until the answer's
    // stream ends), so a look does not answer them again meanwhile.
    let answering: Arc<Mutex<HashSet<String>>> = Arc::default();
    loop {
        let recovered = agent.recover_runs(askloop::Author::default()).await?;
        if !recovered.is_empty() {
            say(&format!("recovered {}", recovered.len()));
        }
        for stream in recovered {
            driving.spawn(drive(stream));
        }
        for n in 0..runs {
            let run_id = format!("crash-{n}");
            if store.get(&run_id).await?.is_none() {
                let stream = agent
                    .stream_with("Book me a trip", StreamOptions::with_run_id(&run_id))
                    .await?;
                driving.spawn(drive(stream));
            }
        }
        let suspended = RunQuery {
            status: Some(RunStatus::Suspended),
            ..Default::default()
        };
        for run in store.list(&suspended).await? {
            for pending in run.stored_calls() {
                let approval = pending.kind == PendingKind::Approval;
                if hold && !approval && pending.args["question"] != "Which city?" {
                    continue;
                }
                let key = format!("{} {}", run.run_id, pending.tool_call_id);
                if !answering.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone()) {
                    continue;
                }
                let agent = agent.clone();
                let answering = Arc::clone(&answering);
                let options = ResumeOptions::call(&run.run_id, &pending.tool_call_id);
                // Each answer names its own question, so an answer applied
                // to another question shows in the final text.
                let answer = format!("answer-to-{}", pending.tool_call_id);
                driving.spawn(async move {
                    // A lost race (another answer, a take-over) is fine: the
                    // question stays listed while it is still pending.
                    let decided = if approval {
                        agent.approve_tool_call(options).await
                    } else {
                        agent.resume_stream(answer, options).await
                    };
                    if let Ok(stream) = decided {
                        drive(stream).await;
                    }
                    answering.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                });
            }
        }
        let completed = RunQuery {
            status: Some(RunStatus::Completed),
            ..Default::default()
        };
        if store.list(&completed).await?.len() == runs {
            say("done");
            return Ok(());
        }
        tokio::select! {
            Some(_) = driving.join_next() => {}
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// A tool that is not idempotent and logs each run as `NAME RUN_ID`, then
/// takes a moment (to be killed in); `approval`: it waits for approval.
fn logged_tool(name: &'static str, approval: bool, log: &Arc<Mutex<std::fs::File>>) -> FunctionTool {
    let log = Arc::clone(log);
    FunctionTool::builder(name)
        .description("Moves money.")
        .input_schema(json!({"type": "object"}))
        .requires_approval(approval)
        .execute(move |_input: serde_json::Value, ctx| {
            let log = Arc::clone(&log);
            async move {
                let run_id = ctx.run_id().unwrap_or("?").to_owned();
                {
                    let mut file = log.lock().unwrap_or_else(|p| p.into_inner());
                    // In the file system's hands once written: a SIGKILL
                    // cannot lose it (only a power cut could).
                    writeln!(file, "{name} {run_id}").map_err(|e| askloop::ToolError::new(e.to_string()))?;
                }
                tokio::time::sleep(Duration::from_millis(60)).await;
                Ok(ToolOutput::text(format!("{name} done")).into())
            }
        })
}

async fn drive(stream: AgentStream) {
    let _ = stream.output().await;
}

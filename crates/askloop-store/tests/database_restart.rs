//! A PostgreSQL server that restarts, or goes away, in the middle of a
//! step. Each test starts a PostgreSQL server of its own (initdb into a
//! temporary folder, as the `postgres` user when the test runs as root), so
//! that restarting it disturbs no other test, and drives a real agent on it
//! whose model call is held open while the database is restarted or stopped.
//!
//! What must hold: the person's answer, stored before the restart, is never
//! lost or asked for again; the run ends `completed` with the answer in its
//! reply, either by itself (the pool reconnects), after a retry of a run
//! that failed for a transient reason, or after recovery takes over a run
//! whose failure could not even be recorded; the stored conversation is one
//! a provider accepts (each tool call with exactly one result).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use askloop::{
    Agent, AskUser, ManualClock, Message, Model, ModelError, ModelRequest, ModelStream, ResumeOptions, RunStatus,
    RunStore, ScriptedModel,
};
use askloop_store::{PostgresOptions, PostgresStore};
use async_trait::async_trait;
use tokio::sync::{Notify, Semaphore};

const SCRIPT: &str = r#"{"turns": [
    {"toolCalls": [{"name": "ask_user", "args": {"question": "Which city?"}}]},
    {"text": "Booked: {{toolResults}}"}
]}"#;

/// A PostgreSQL server of the test's own, stopped when dropped.
struct OwnPostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

impl OwnPostgres {
    /// Starts one, or says why it cannot (no PostgreSQL programs; not root
    /// and not allowed to run them).
    fn start() -> Result<OwnPostgres, String> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .map_err(|err| format!("no /usr/lib/postgresql: {err}"))?
            .filter_map(Result::ok)
            .map(|entry| entry.path().join("bin"))
            .find(|bin| bin.join("initdb").exists())
            .ok_or("no initdb under /usr/lib/postgresql")?;
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let pg = OwnPostgres { dir, bin, port };
        if running_as_root() {
            // initdb refuses root: the data folder belongs to `postgres`.
            let chown = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(pg.dir.path())
                .status()
                .unwrap();
            assert!(chown.success(), "chown of the data folder");
        }
        pg.run(
            "initdb",
            &["-A", "trust", "-U", "postgres", "--no-sync", "-D", &pg.data()],
        )?;
        pg.ctl(&["start", "-w"])?;
        Ok(pg)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").to_str().unwrap().to_owned()
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl` with the test's data folder, port and socket folder.
    fn ctl(&self, args: &[&str]) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let data = self.data();
        let log = self.dir.path().join("log").to_str().unwrap().to_owned();
        let mut all = vec!["-D", data.as_str(), "-l", log.as_str(), "-o", options.as_str()];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all)
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let path = self.bin.join(program);
        let mut command = if running_as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let out = command
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .map_err(|err| format!("cannot run {}: {err}", path.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{program} {args:?} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = self.ctl(&["stop", "-m", "immediate"]);
    }
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(1) == Some("0"))
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The server, or `None` when this machine cannot start one (then the test
/// says why and stops; under CI, which runs as root on a machine with
/// PostgreSQL, it fails instead).
fn own_postgres(test: &str) -> Option<OwnPostgres> {
    match OwnPostgres::start() {
        Ok(pg) => Some(pg),
        Err(why) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{test} cannot start its PostgreSQL server under CI: {why}")
        }
        Err(why) => {
            eprintln!("{test}: skipped: {why}");
            None
        }
    }
}

/// The scripted model whose second turn (the reply after the answer) waits
/// until the test lets it go, telling the test when it started waiting.
#[derive(Debug)]
struct HeldReply {
    inner: ScriptedModel,
    reached: Notify,
    release: Semaphore,
    replies: AtomicUsize,
}

#[async_trait]
impl Model for HeldReply {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        if request.messages.iter().any(|m| matches!(m, Message::Tool(_))) {
            self.replies.fetch_add(1, Ordering::SeqCst);
            self.reached.notify_one();
            self.release.acquire().await.unwrap().forget();
        }
        self.inner.stream(request).await
    }
}

fn held_reply() -> Arc<HeldReply> {
    Arc::new(HeldReply {
        inner: ScriptedModel::from_json("restart-script", SCRIPT).unwrap(),
        reached: Notify::new(),
        release: Semaphore::new(0),
        replies: AtomicUsize::new(0),
    })
}

/// The store on `pg`, giving up on a connection after 5 s (not the default
/// 30 s) so that the test of a database gone ends sooner.
/// How long a driver's lease lasts.
const LEASE: Duration = Duration::from_secs(2);

/// The store, stamping its writes with `clock`.
async fn open(pg: &OwnPostgres, clock: &ManualClock) -> Arc<dyn RunStore> {
    let options = PostgresOptions::default()
        .acquire_timeout(Duration::from_secs(5))
        .clock(Arc::new(clock.clone()));
    Arc::new(PostgresStore::connect_with(&pg.url(), options).await.unwrap())
}

/// The agent, reading `clock` (the store's): a lease runs out when the
/// test moves the clock past it.
fn agent(model: Arc<HeldReply>, store: Arc<dyn RunStore>, clock: &ManualClock) -> Agent {
    Agent::builder("booker")
        .model(model)
        .tool(AskUser::new())
        .store(store)
        .clock(Arc::new(clock.clone()))
        .lease_duration(LEASE)
        .build()
        .unwrap()
}

/// Asks the question and answers it; returns the run id and the stream of
/// the answer, whose model call is then held.
async fn answered_and_held(
    agent: &Agent,
    model: &HeldReply,
) -> (String, tokio::task::JoinHandle<askloop::StreamOutput>) {
    let asked = agent.stream("Book me a trip.").await.unwrap().output().await;
    assert_eq!(asked.status, RunStatus::Suspended);
    let run_id = asked.run_id.clone();
    let resumed = agent.resume_stream("Paris", ResumeOptions::run(&run_id)).await.unwrap();
    let driving = tokio::spawn(resumed.output());
    model.reached.notified().await;
    (run_id, driving)
}

/// Every tool call of the conversation has exactly one result, and the
/// answer is in it once.
async fn assert_conversation_whole(store: &dyn RunStore, run_id: &str) {
    let messages = store.messages(run_id).await.unwrap();
    let calls: Vec<String> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { tool_calls, .. } => Some(tool_calls.iter().map(|c| c.id.clone())),
            _ => None,
        })
        .flatten()
        .collect();
    let results: Vec<String> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(result) => Some(result.tool_call_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1, "{messages:#?}");
    assert_eq!(results, calls, "each call with exactly one result: {messages:#?}");
}

/// The text of the run's last message.
async fn reply(store: &dyn RunStore, run_id: &str) -> String {
    match store.messages(run_id).await.unwrap().pop() {
        Some(Message::Assistant { content, .. }) => content,
        other => panic!("the run ends with {other:?}, not the model's reply"),
    }
}

async fn completed(store: &dyn RunStore, run_id: &str) -> askloop::RunRecord {
    let run = store.get(run_id).await.unwrap().expect("the run");
    assert_eq!(run.status(), RunStatus::Completed, "{run:#?}");
    run
}

#[tokio::test]
async fn a_restart_during_the_model_call_loses_no_answer_and_the_run_completes() {
    let Some(pg) = own_postgres("a_restart_during_the_model_call_loses_no_answer_and_the_run_completes") else {
        return;
    };
    let clock = ManualClock::starting_now();
    let store = open(&pg, &clock).await;
    let model = held_reply();
    let agent = agent(Arc::clone(&model), Arc::clone(&store), &clock);
    let (run_id, driving) = answered_and_held(&agent, &model).await;

    // The answer is stored with the claim; now the server goes down hard
    // (as a crash would take it) and comes back, every pooled connection
    // dead, while the model is still answering.
    pg.ctl(&["restart", "-m", "immediate", "-w"]).unwrap();
    model.release.add_permits(10);
    let output = driving.await.unwrap();

    eprintln!("after the restart the run was {}", output.status);
    let run = if output.status == RunStatus::Completed {
        completed(store.as_ref(), &run_id).await
    } else {
        // The step's write met a dead connection: the run failed for a
        // reason trying again fixes, keeping what it stored.
        let failed = store.get(&run_id).await.unwrap().expect("the run");
        assert_eq!(failed.status(), RunStatus::Failed, "{failed:#?}");
        let failure = failed.failure.clone().expect("a typed reason");
        assert!(failure.is_transient(), "{failure:?}");
        let retried = agent
            .retry_run(&run_id, askloop::Author::default())
            .await
            .unwrap()
            .output()
            .await;
        assert_eq!(retried.status, RunStatus::Completed, "{retried:?}");
        completed(store.as_ref(), &run_id).await
    };
    let text = reply(store.as_ref(), &run_id).await;
    assert!(text.contains("Paris"), "the reply carries the answer: {text}");
    assert!(run.stored_calls().is_empty());
    assert_conversation_whole(store.as_ref(), &run_id).await;
    assert!(
        model.replies.load(Ordering::SeqCst) <= 2,
        "the reply was asked for at most twice"
    );
}

#[tokio::test]
async fn a_database_gone_when_the_step_is_written_leaves_the_run_to_recovery_which_completes_it() {
    let test = "a_database_gone_when_the_step_is_written_leaves_the_run_to_recovery_which_completes_it";
    let Some(pg) = own_postgres(test) else {
        return;
    };
    let clock = ManualClock::starting_now();
    let store = open(&pg, &clock).await;
    let model = held_reply();
    let agent = agent(Arc::clone(&model), Arc::clone(&store), &clock);
    let (run_id, driving) = answered_and_held(&agent, &model).await;

    // The database is gone when the reply is to be written: neither the
    // step nor the run's failure can be stored.
    pg.ctl(&["stop", "-m", "immediate", "-w"]).unwrap();
    model.release.add_permits(10);
    let output = tokio::time::timeout(Duration::from_secs(120), driving)
        .await
        .expect("the stream ends while the database is gone")
        .unwrap();
    assert_ne!(
        output.status,
        RunStatus::Completed,
        "nothing could be stored: {output:?}"
    );

    // Back up. The run says what was last stored: running (its lease no
    // longer renewed) or failed; either way, taken over or retried, it
    // completes from its last stored step, the answer not asked again.
    pg.ctl(&["start", "-w"]).unwrap();
    let stored = store.get(&run_id).await.unwrap().expect("the run");
    eprintln!("with the database back the run was {}", stored.status());
    let finished = match stored.status() {
        RunStatus::Running => {
            assert!(
                agent.recover_runs(askloop::Author::default()).await.unwrap().is_empty(),
                "a run is not taken over while its lease holds"
            );
            clock.advance(LEASE + Duration::from_millis(1));
            let mut recovered = agent.recover_runs(askloop::Author::default()).await.unwrap();
            assert_eq!(recovered.len(), 1, "recovery takes the run over once its lease ran out");
            recovered.pop().unwrap().output().await
        }
        RunStatus::Failed => {
            agent
                .retry_run(&run_id, askloop::Author::default())
                .await
                .unwrap()
                .output()
                .await
        }
        other => panic!("the run is {other} after a step it could not write: {stored:#?}"),
    };
    assert_eq!(finished.status, RunStatus::Completed, "{finished:?}");
    completed(store.as_ref(), &run_id).await;
    let text = reply(store.as_ref(), &run_id).await;
    assert!(text.contains("Paris"), "the reply carries the answer: {text}");
    assert_conversation_whole(store.as_ref(), &run_id).await;
}

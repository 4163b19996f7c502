//! The crash test: a child process drives many runs through the library
//! (`askloop-store-crash`), and is SIGKILLed at random moments, at least 20
//! times, and started again each time; it takes over the runs its
//! predecessor was driving, and answers questions as they appear. At the
//! end every run must be completed and, per run: each question answered
//! exactly once, with its own answer; the tools that are not idempotent
//! (one runs at once, one once a person approved it) run at most once; each
//! approval stored at most once; the final text made of the answers. On a real SQLite file
//! and, with `ASKLOOP_TEST_DATABASE_URL`, a real PostgreSQL server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use askloop::{Message, ResolutionKind, RunStatus, RunStore, ToolCall};
use askloop_store::conformance::{drop_schema, postgres_test_url, unique_schema_name};
use askloop_store::{PostgresOptions, PostgresStore, SqliteStore};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const DRIVER: &str = env!("CARGO_BIN_EXE_askloop-store-crash");
/// How many runs (each takes 3 model calls, 2 answers, a charge and an
/// approved payment).
const RUNS: usize = 200;
/// Kills of drivers that answer only each run's first question (so none can
/// finish before its kill), then of drivers that answer everything (which
/// may finish before their kill: then the test goes on to its checks).
const HOLDING_KILLS: usize = 20;
const KILLS: usize = 25;
/// A bound on a hang of the last (unkilled) driver, never a timing assertion.
const PATIENCE: Duration = Duration::from_secs(180);

/// A small deterministic generator, seeded from the clock (the seed is
/// printed, so a failing schedule can be read back).
struct Moments(u64);

impl Moments {
    fn next_millis(&mut self, low: u64, high: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        low + self.0 % (high - low)
    }
}

struct Counts {
    kills: usize,
    recoveries: usize,
}

/// Starts the driver, kills it at random moments `KILLS` times, then lets
/// the last one finish.
async fn drive_with_kills(location: &str, schema: Option<&str>, log: &str) -> Counts {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("crash test: seed {seed}");
    let mut moments = Moments(seed);
    let mut counts = Counts {
        kills: 0,
        recoveries: 0,
    };
    loop {
        let mut command = Command::new(DRIVER);
        command
            .args([location, &RUNS.to_string(), log])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if let Some(schema) = schema {
            command.env("ASKLOOP_CRASH_SCHEMA", schema);
        }
        let holding = counts.kills < HOLDING_KILLS;
        if holding {
            command.env("ASKLOOP_CRASH_HOLD", "1");
        }
        let mut child = command.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        if counts.kills == KILLS {
            let read = async {
                let mut done = false;
                while let Some(line) = lines.next_line().await.unwrap() {
                    match line.as_str() {
                        "done" => done = true,
                        "model" => {}
                        _ => counts.recoveries += recovered(&line),
                    }
                }
                done
            };
            let done = tokio::time::timeout(PATIENCE, read)
                .await
                .expect("the last driver did not finish");
            let status = child.wait().await.unwrap();
            assert!(done && status.success(), "the last driver ended with {status:?}");
            return counts;
        }
        // The kill comes after a random number of model calls and a random
        // moment more (mid model call, mid charge, mid write).
        let calls = moments.next_millis(1, 60);
        let extra = Duration::from_millis(moments.next_millis(0, 120));
        let mut seen = 0;
        let until_calls = async {
            while let Some(line) = lines.next_line().await.unwrap() {
                match line.as_str() {
                    "model" => {
                        seen += 1;
                        if seen == calls {
                            return false;
                        }
                    }
                    "done" => return true,
                    _ => counts.recoveries += recovered(&line),
                }
            }
            panic!("the driver stopped on its own before its kill");
        };
        // Or at a random moment, whichever comes first: once every run
        // waits on its held-back question, no model call comes.
        let moment = Duration::from_millis(moments.next_millis(50, 800));
        let done = tokio::time::timeout(moment, until_calls).await.unwrap_or(false);
        if !done {
            tokio::time::sleep(extra).await;
            child.start_kill().unwrap();
        }
        let status = child.wait().await.unwrap();
        if status.signal() == Some(9) {
            counts.kills += 1;
            continue;
        }
        // It finished every run before its kill came.
        assert!(!holding, "a driver that holds answers back cannot finish: {status:?}");
        assert!(status.success(), "the driver failed: {status:?}");
        return counts;
    }
}

/// The runs a `recovered N` line reports; any other line is the driver's
/// complaint.
fn recovered(line: &str) -> usize {
    match line.strip_prefix("recovered ") {
        Some(n) => n.parse().unwrap(),
        None => panic!("the driver said: {line}"),
    }
}

/// Checks every run as stored and the charge log; returns the number of
/// duplicates found (each also reported).
async fn check(store: &Arc<dyn RunStore>, log: &str) -> usize {
    let mut duplicates = 0;
    // (tool, run) -> how many times it ran.
    let mut ran: HashMap<(String, String), usize> = HashMap::new();
    for line in std::fs::read_to_string(log).unwrap().lines() {
        let (tool, run_id) = line.split_once(' ').unwrap();
        *ran.entry((tool.to_owned(), run_id.to_owned())).or_default() += 1;
    }
    for n in 0..RUNS {
        let run_id = format!("crash-{n}");
        let run = store.get(&run_id).await.unwrap().unwrap();
        assert_eq!(run.status(), RunStatus::Completed, "{run_id}: {:?}", run.error());
        let messages = store.messages(&run_id).await.unwrap();
        let mut results: HashMap<String, Vec<String>> = HashMap::new();
        let mut asked = Vec::new();
        for message in &messages {
            match message {
                Message::Assistant { tool_calls, .. } => {
                    asked.extend(tool_calls.iter().filter(|c| c.name == "ask_user").map(|c| c.id.clone()));
                }
                Message::Tool(result) => results
                    .entry(result.tool_call_id.clone())
                    .or_default()
                    .push(result.content.to_model_text()),
                _ => {}
            }
        }
        assert_eq!(asked.len(), 2, "{run_id}: two questions asked, once each: {messages:?}");
        for id in &asked {
            let answers = &results[id];
            if answers.len() != 1 {
                println!("{run_id}: question {id} answered {} times", answers.len());
                duplicates += 1;
            }
            assert!(
                answers[0].contains(&format!("answer-to-{id}")),
                "{run_id}: question {id} got another question's answer: {answers:?}"
            );
        }
        let Some(Message::Assistant { content, .. }) = messages.last() else {
            panic!("{run_id}: the conversation ends with the reply: {messages:?}")
        };
        for id in &asked {
            assert!(content.contains(&format!("answer-to-{id}")), "{run_id}: {content}");
        }
        for tool in ["charge", "pay"] {
            let runs = ran.get(&(tool.to_owned(), run_id.clone())).copied().unwrap_or(0);
            if runs > 1 {
                println!("{run_id}: {tool} ran {runs} times");
                duplicates += 1;
            }
        }
        let paid: Vec<&ToolCall> = messages
            .iter()
            .flat_map(|m| match m {
                Message::Assistant { tool_calls, .. } => tool_calls.iter().filter(|c| c.name == "pay").collect(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(paid.len(), 1, "{run_id}: one payment asked for: {messages:?}");
        let pay_results = results.get(&paid[0].id).map_or(0, Vec::len);
        assert_eq!(pay_results, 1, "{run_id}: the payment has one result: {messages:?}");
        let approvals = run
            .resolutions
            .iter()
            .filter(|r| r.kind == ResolutionKind::Approved)
            .count();
        if approvals > 1 {
            println!("{run_id}: the payment was approved {approvals} times");
            duplicates += 1;
        }
    }
    duplicates
}

async fn crash_test(location: &str, schema: Option<&str>, store: Arc<dyn RunStore>, log: &str) {
    let counts = drive_with_kills(location, schema, log).await;
    let duplicates = check(&store, log).await;
    let logged = std::fs::read_to_string(log).unwrap();
    let charges = logged.lines().filter(|l| l.starts_with("charge ")).count();
    let payments = logged.lines().filter(|l| l.starts_with("pay ")).count();
    println!(
        "crash test: runs {RUNS}, kills {}, recoveries {}, charges {charges}, payments {payments}, duplicates {duplicates}",
        counts.kills, counts.recoveries
    );
    assert_eq!(duplicates, 0);
    assert!(
        counts.kills >= HOLDING_KILLS,
        "the driver was killed only {} times",
        counts.kills
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_runs_survive_random_sigkills_and_complete_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db").to_str().unwrap().to_owned();
    let log = dir.path().join("charges.log").to_str().unwrap().to_owned();
    // Created here, so the test can read it whatever the driver managed.
    let store: Arc<dyn RunStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
    crash_test(&path, None, store, &log).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_runs_survive_random_sigkills_and_complete_exactly_once() {
    let Some(url) = postgres_test_url("postgres crash test") else {
        return;
    };
    let schema = unique_schema_name();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("charges.log").to_str().unwrap().to_owned();
    let store = PostgresStore::connect_with(&url, PostgresOptions::default().schema(&schema))
        .await
        .unwrap();
    crash_test(&url, Some(&schema), Arc::new(store.clone()), &log).await;
    store.close().await;
    drop_schema(&url, &schema).await;
}

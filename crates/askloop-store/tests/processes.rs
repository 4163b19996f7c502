//! Runs that outlive and are shared between processes: a scripted agent with
//! `ask_user` in child processes (`askloop-store-harness`), against a real
//! SQLite file and a real PostgreSQL server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use askloop::{Message, RunStatus, RunStore, RunUpdate};
use askloop_store::conformance::{drop_schema, new_run, postgres_test_url, unique_schema_name};
use askloop_store::{PostgresOptions, PostgresStore, SqliteStore};
use chrono::Utc;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

const HARNESS: &str = env!("CARGO_BIN_EXE_askloop-store-harness");
/// Generous: a bound on a hang, never a timing assertion.
const PATIENCE: Duration = Duration::from_secs(120);
const EXIT_CONFLICT: i32 = 3;

/// Where the children's store is.
enum Target {
    Sqlite { _dir: tempfile::TempDir, path: String },
    Postgres { url: String, schema: String },
}

impl Target {
    fn sqlite() -> Target {
        let dir = tempfile::tempdir().unwrap();
        // A directory that does not exist yet: opening creates it.
        let path = dir.path().join("state/runs.db").to_str().unwrap().to_owned();
        Target::Sqlite { _dir: dir, path }
    }

    fn postgres(test: &str) -> Option<Target> {
        let url = postgres_test_url(test)?;
        Some(Target::Postgres {
            url,
            schema: unique_schema_name(),
        })
    }

    fn location(&self) -> &str {
        match self {
            Target::Sqlite { path, .. } => path,
            Target::Postgres { url, .. } => url,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(HARNESS);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if let Target::Postgres { schema, .. } = self {
            command.env("ASKLOOP_HARNESS_SCHEMA", schema);
        }
        command
    }

    /// The store, opened in this (the test) process.
    async fn open(&self) -> Arc<dyn RunStore> {
        match self {
            Target::Sqlite { path, .. } => Arc::new(SqliteStore::open(path).await.unwrap()),
            Target::Postgres { url, schema } => Arc::new(
                PostgresStore::connect_with(url, PostgresOptions::default().schema(schema))
                    .await
                    .unwrap(),
            ),
        }
    }

    async fn cleanup(self) {
        if let Target::Postgres { url, schema } = &self {
            drop_schema(url, schema).await;
        }
    }
}

fn lines(child: &mut Child) -> Lines<BufReader<ChildStdout>> {
    BufReader::new(child.stdout.take().unwrap()).lines()
}

/// Reads the child's lines until one starts with `prefix`.
async fn wait_for(lines: &mut Lines<BufReader<ChildStdout>>, prefix: &str) -> String {
    let read = async {
        let mut seen = Vec::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with(prefix) {
                return line;
            }
            seen.push(line);
        }
        panic!("the harness ended without printing {prefix:?}; it printed {seen:?}");
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .unwrap_or_else(|_| panic!("no {prefix:?} from the harness in {PATIENCE:?}"))
}

/// Runs a child to its end; returns its exit code and what it printed.
async fn finish(mut child: Child, lines: Option<Lines<BufReader<ChildStdout>>>) -> (i32, Vec<String>) {
    let mut lines = match lines {
        Some(lines) => lines,
        None => self::lines(&mut child),
    };
    let mut printed = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            printed.push(line);
        }
        child.wait().await.unwrap()
    };
    let status = tokio::time::timeout(PATIENCE, read)
        .await
        .expect("the harness did not finish");
    (status.code().unwrap_or(-1), printed)
}

/// A child runs the agent until it asks its question and is then killed
/// with SIGKILL; the run is stored suspended.
async fn start_and_kill(target: &Target, run_id: &str, log: Option<&str>) {
    let mut command = target.command(&["start", target.location(), run_id]);
    if let Some(log) = log {
        command.env("ASKLOOP_HARNESS_LOG", log);
    }
    let mut child = command.spawn().unwrap();
    let mut out = lines(&mut child);
    wait_for(&mut out, &format!("suspended {run_id}")).await;
    child.start_kill().unwrap();
    let status = child.wait().await.unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "the child must die by SIGKILL, not exit: {status:?}"
    );
}

fn count(text: &str, line: &str) -> usize {
    text.lines().filter(|l| *l == line).count()
}

// ---------------------------------------------------------------------------
// Restart

async fn a_run_survives_sigkill_and_is_completed_by_a_new_process(target: Target) {
    let run_id = "run-restart";
    start_and_kill(&target, run_id, None).await;

    let store = target.open().await;
    let run = store
        .get(run_id)
        .await
        .unwrap()
        .expect("the run was stored before the kill");
    assert_eq!(run.status(), RunStatus::Suspended);
    assert_eq!(run.stored_calls().len(), 1);
    assert_eq!(run.stored_calls()[0].tool_name, "ask_user");
    assert_eq!(
        run.stored_calls()[0].suspend_payload.as_ref().unwrap()["question"],
        "Which city?"
    );

    let child = target
        .command(&["resume", target.location(), run_id, "Paris"])
        .spawn()
        .unwrap();
    let (code, printed) = finish(child, None).await;
    assert_eq!(code, 0, "the resume must complete the run: {printed:?}");
    assert!(
        !printed.iter().any(|l| l.starts_with("not-listed")),
        "the new process must list the suspended run: {printed:?}"
    );
    assert!(
        printed.iter().any(|l| l == "completed Booked: User answered: Paris"),
        "{printed:?}"
    );

    let run = store.get(run_id).await.unwrap().unwrap();
    assert_eq!(run.status(), RunStatus::Completed);
    assert!(run.stored_calls().is_empty());
    let messages = store.messages(run_id).await.unwrap();
    assert_eq!(messages.len(), 4, "user, question, answer, reply: {messages:?}");
    assert_eq!(messages[3], Message::assistant("Booked: User answered: Paris", vec![]));
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_run_survives_sigkill_and_is_completed_by_a_new_process() {
    a_run_survives_sigkill_and_is_completed_by_a_new_process(Target::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_run_survives_sigkill_and_is_completed_by_a_new_process() {
    let Some(target) = Target::postgres("postgres_run_survives_sigkill_and_is_completed_by_a_new_process") else {
        return;
    };
    a_run_survives_sigkill_and_is_completed_by_a_new_process(target).await;
}

// ---------------------------------------------------------------------------
// Two processes resume the same run

async fn of_two_processes_resuming_one_run_exactly_one_wins(target: Target) {
    let run_id = "run-race";
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("events.log").to_str().unwrap().to_owned();
    start_and_kill(&target, run_id, Some(&log)).await;

    // Both children load the run, check the answer, and stop just before
    // the claim; then both are released at once into the compare-and-set.
    let mut children = Vec::new();
    for answer in ["Paris", "Rome"] {
        let mut command = target.command(&["resume", target.location(), run_id, answer]);
        command
            .env("ASKLOOP_HARNESS_GATE_CLAIM", "1")
            .env("ASKLOOP_HARNESS_LOG", &log)
            .stdin(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let mut out = lines(&mut child);
        wait_for(&mut out, &format!("at-claim {run_id}")).await;
        children.push((child, out));
    }
    let mut stdins: Vec<_> = children.iter_mut().map(|(c, _)| c.stdin.take().unwrap()).collect();
    for stdin in &mut stdins {
        stdin.write_all(b"go\n").await.unwrap();
    }
    for stdin in &mut stdins {
        stdin.flush().await.unwrap();
    }
    let mut outcomes = Vec::new();
    for (child, out) in children {
        outcomes.push(finish(child, Some(out)).await);
    }

    let winners: Vec<_> = outcomes.iter().filter(|(code, _)| *code == 0).collect();
    let losers: Vec<_> = outcomes.iter().filter(|(code, _)| *code == EXIT_CONFLICT).collect();
    assert_eq!(
        (winners.len(), losers.len()),
        (1, 1),
        "one winner, one conflict: {outcomes:?}"
    );
    assert!(
        losers[0].1.iter().any(|l| l == &format!("conflict {run_id}")),
        "{outcomes:?}"
    );
    let winning_answer = if winners[0].1.iter().any(|l| l.contains("Paris")) {
        "Paris"
    } else {
        "Rome"
    };

    let events = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        count(&events, &format!("tool {run_id}")),
        1,
        "the tool runs once: {events}"
    );
    assert_eq!(
        count(&events, &format!("model {run_id}")),
        2,
        "the model is called once to ask and once more after the one answer: {events}"
    );

    let store = target.open().await;
    let run = store.get(run_id).await.unwrap().unwrap();
    assert_eq!(run.status(), RunStatus::Completed);
    let messages = store.messages(run_id).await.unwrap();
    let tool_results = messages.iter().filter(|m| matches!(m, Message::Tool(_))).count();
    assert_eq!((messages.len(), tool_results), (4, 1), "{messages:?}");
    assert_eq!(
        messages[3],
        Message::assistant(format!("Booked: User answered: {winning_answer}"), vec![])
    );
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_of_two_processes_resuming_one_run_exactly_one_wins() {
    of_two_processes_resuming_one_run_exactly_one_wins(Target::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_of_two_processes_resuming_one_run_exactly_one_wins() {
    let Some(target) = Target::postgres("postgres_of_two_processes_resuming_one_run_exactly_one_wins") else {
        return;
    };
    of_two_processes_resuming_one_run_exactly_one_wins(target).await;
}

// ---------------------------------------------------------------------------
// Load: 50 runs resumed at once from two processes

async fn fifty_concurrent_resumes_from_two_processes_all_complete_without_lock_errors(target: Target) {
    let run_ids: Vec<String> = (0..50).map(|i| format!("run-load-{i:02}")).collect();
    let mut args = vec!["start-many", target.location()];
    args.extend(run_ids.iter().map(String::as_str));
    let (code, printed) = finish(target.command(&args).spawn().unwrap(), None).await;
    assert_eq!(
        (code, printed.last().map(String::as_str)),
        (0, Some("suspended-all")),
        "{printed:?}"
    );

    let mut children = Vec::new();
    for half in run_ids.chunks(25) {
        let mut args = vec!["resume-many", target.location(), "Lisbon"];
        args.extend(half.iter().map(String::as_str));
        let mut command = target.command(&args);
        command.stdin(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let mut out = lines(&mut child);
        wait_for(&mut out, "ready").await;
        children.push((child, out));
    }
    let mut stdins: Vec<_> = children.iter_mut().map(|(c, _)| c.stdin.take().unwrap()).collect();
    for stdin in &mut stdins {
        stdin.write_all(b"go\n").await.unwrap();
        stdin.flush().await.unwrap();
    }
    let mut completed = 0;
    for (child, out) in children {
        let (code, printed) = finish(child, Some(out)).await;
        assert!(
            !printed.iter().any(|l| l.contains("locked") || l.contains("busy")),
            "no write may fail on the file lock: {printed:?}"
        );
        assert_eq!(code, 0, "every resume must complete: {printed:?}");
        completed += printed.iter().filter(|l| l.starts_with("completed ")).count();
    }
    assert_eq!(completed, 50);

    let store = target.open().await;
    for run_id in &run_ids {
        let run = store.get(run_id).await.unwrap().unwrap();
        assert_eq!(run.status(), RunStatus::Completed, "{run_id}");
        assert_eq!(store.messages(run_id).await.unwrap().len(), 4, "{run_id}");
    }
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_fifty_concurrent_resumes_from_two_processes_all_complete_without_lock_errors() {
    fifty_concurrent_resumes_from_two_processes_all_complete_without_lock_errors(Target::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fifty_concurrent_resumes_from_two_processes_all_complete() {
    let Some(target) = Target::postgres("postgres_fifty_concurrent_resumes_from_two_processes_all_complete") else {
        return;
    };
    fifty_concurrent_resumes_from_two_processes_all_complete_without_lock_errors(target).await;
}

/// A long run read by one store handle and written by another on the same
/// store (as by two processes): each read has every resolution, in order,
/// though the reader keeps those it read and reads only the newer ones; a
/// run deleted and made again under the same id reads as the new run.
async fn a_long_runs_resolutions_read_again_after_another_process_wrote_are_all_there_in_order(target: Target) {
    let writer = target.open().await;
    let reader = target.open().await;
    let answer = |k: usize| {
        askloop::Resolution::new(
            Some(format!("c{k}").as_str()),
            askloop::ResolutionKind::Answered,
            Utc::now(),
            askloop::Author::named(askloop::Interface::Http, "ana"),
        )
    };
    fn decide(made: &[askloop::Resolution], version: i64, from: usize) -> RunUpdate<'_> {
        let mut update = step_to("long", version, RunStatus::Running);
        update.resolutions = &made[from..];
        update
    }
    let made: Vec<_> = (0..40).map(answer).collect();
    let ids = |resolutions: Vec<askloop::Resolution>| -> Vec<String> {
        resolutions.into_iter().map(|r| r.tool_call_id.unwrap()).collect()
    };
    let expected = |n: usize| -> Vec<String> { (0..n).map(|k| format!("c{k}")).collect() };

    writer.create(&new_run("long", "a", Utc::now(), 0), &[]).await.unwrap();
    let mut version = 0;
    for k in 0..30 {
        version = writer.update(decide(&made[..=k], version, k)).await.unwrap();
    }
    assert_eq!(
        ids(reader.get("long").await.unwrap().unwrap().resolutions),
        expected(30)
    );
    // Several at once, then one at a time, each read in between.
    version = writer.update(decide(&made[..33], version, 30)).await.unwrap();
    assert_eq!(
        ids(reader.get("long").await.unwrap().unwrap().resolutions),
        expected(33)
    );
    for k in 33..40 {
        version = writer.update(decide(&made[..=k], version, k)).await.unwrap();
        assert_eq!(
            ids(reader.get("long").await.unwrap().unwrap().resolutions),
            expected(k + 1)
        );
    }
    // The writer's own reads agree, and a write with none adds nothing.
    version = writer
        .update(step_to("long", version, RunStatus::Running))
        .await
        .unwrap();
    assert_eq!(
        ids(writer.get("long").await.unwrap().unwrap().resolutions),
        expected(40)
    );
    assert_eq!(
        ids(reader.get("long").await.unwrap().unwrap().resolutions),
        expected(40)
    );

    // Deleted and made again under the same id: the new run's own only.
    writer
        .update(step_to("long", version, RunStatus::Completed))
        .await
        .unwrap();
    writer.prune(Utc::now() + chrono::Duration::days(1)).await.unwrap();
    writer.create(&new_run("long", "a", Utc::now(), 0), &[]).await.unwrap();
    let again: Vec<_> = (100..120).map(answer).collect();
    let mut version = 0;
    for k in 0..20 {
        version = writer.update(decide(&again[..=k], version, k)).await.unwrap();
    }
    // Past the version the reader last read the old run at.
    while version < 60 {
        version = writer
            .update(step_to("long", version, RunStatus::Running))
            .await
            .unwrap();
    }
    let read = ids(reader.get("long").await.unwrap().unwrap().resolutions);
    assert_eq!(read, (100..120).map(|k| format!("c{k}")).collect::<Vec<_>>());
    target.cleanup().await;
}

#[tokio::test]
async fn sqlite_a_long_runs_resolutions_read_again_after_another_process_wrote_are_all_there_in_order() {
    a_long_runs_resolutions_read_again_after_another_process_wrote_are_all_there_in_order(Target::sqlite()).await;
}

#[tokio::test]
async fn postgres_a_long_runs_resolutions_read_again_after_another_process_wrote_are_all_there_in_order() {
    let Some(target) = Target::postgres(
        "postgres_a_long_runs_resolutions_read_again_after_another_process_wrote_are_all_there_in_order",
    ) else {
        return;
    };
    a_long_runs_resolutions_read_again_after_another_process_wrote_are_all_there_in_order(target).await;
}

fn step_to(run_id: &str, expected_version: i64, status: RunStatus) -> RunUpdate<'_> {
    askloop_store::conformance::step(run_id, expected_version, status, &[], &[])
}

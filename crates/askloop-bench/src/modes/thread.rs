//! `thread M`: a stored thread grown to M messages, then runs on it. A run
//! on a thread reads only the thread's last messages (10 by default), by
//! their index, so starting a run on a thread of 10,000 messages and
//! answering its question must cost what they cost on a thread of 10.
//!
//! The thread is grown through the store, not by thousands of model round
//! trips: runs of at most [`GROW_CHUNK`] alternating user and assistant
//! messages, written completed, each write appending its messages to the
//! thread. Then, on the thread: one round trip not counted, [`REPEATS`]
//! measured in this process, and [`COLD`] more, each half in a fresh
//! process of this binary (the hidden `__thread-start THREAD_ID` and
//! `__thread-answer RUN_ID` modes, on the same model server and store).
//! Every run is checked: it suspended on the question having started from
//! the thread's last messages as the context rules give them (its stored
//! `memory.context` and the messages themselves), then completed with the
//! expected text, which the thread then ends with. The thread (with its
//! runs) is deleted at the end.

use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail, ensure};
use askloop::{
    Agent, DEFAULT_LAST_MESSAGES, Message, RunMemory, RunRecord, RunStatus, RunStore, StreamOptions, ThreadKey,
    ThreadOptions, ThreadStore, ToolCall, ToolResult, context_messages,
};
use askloop_testkit::workload;
use serde::Serialize;

use super::restart::{ChildReport, child};
use super::{Failures, IMPL, Report};
use crate::cli::Target;
use crate::environment::{AGENT_ID, Environment, Workload};
use crate::measure;
use crate::run::{self, DEPLOY_ANSWER, DEPLOY_EXPECTED};

/// The resource the bench's threads belong to.
const RESOURCE: &str = "askloop-bench";

/// The most messages one write of the growth holds.
const GROW_CHUNK: usize = 1_000;

/// Round trips measured in this process (after one not counted).
const REPEATS: usize = 5;

/// Round trips measured in fresh processes.
const COLD: usize = 3;

#[derive(Debug, Serialize)]
struct Figures {
    #[serde(rename = "impl")]
    implementation: &'static str,
    mode: &'static str,
    m: usize,
    suspend_ms: f64,
    suspend_cpu_ms: f64,
    resume_ms: f64,
    resume_cpu_ms: f64,
    cold_suspend_ms: f64,
    cold_resume_ms: f64,
    grow_s: f64,
    db_bytes: Option<u64>,
    peak_rss_mb: f64,
    ok: usize,
}

/// One round trip on the thread in this process: each half's time and the
/// process's CPU over it.
#[derive(Debug)]
struct Measured {
    suspend: Duration,
    suspend_cpu: Duration,
    resume: Duration,
    resume_cpu: Duration,
}

/// What the round trips measured, kept while the thread is deleted.
#[derive(Debug, Default)]
struct Timings {
    grow: Duration,
    warm: Vec<Measured>,
    cold_suspends: Vec<Duration>,
    cold_resumes: Vec<Duration>,
}

pub async fn thread(target: &Target, m: usize) -> anyhow::Result<Report> {
    let environment = Environment::prepare(target, Workload::Deploy).await?;
    let agent = environment.agent().await?;
    let threads = threads_of(&agent)?;
    // A thread of its own: nothing else writes to it, and no schema needs
    // to be fresh.
    let key = ThreadKey::new(
        RESOURCE,
        format!(
            "thread-{m}-{}-{}",
            std::process::id(),
            chrono::Utc::now().timestamp_micros()
        ),
    );
    let mut failures = Failures::default();
    let mut timings = Timings::default();
    let measured = measure_thread(target, &environment, &agent, &key, m, &mut timings, &mut failures).await;
    let figures = Figures {
        implementation: IMPL,
        mode: "thread",
        m,
        suspend_ms: median_ms(timings.warm.iter().map(|t| t.suspend)),
        suspend_cpu_ms: median_ms(timings.warm.iter().map(|t| t.suspend_cpu)),
        resume_ms: median_ms(timings.warm.iter().map(|t| t.resume)),
        resume_cpu_ms: median_ms(timings.warm.iter().map(|t| t.resume_cpu)),
        cold_suspend_ms: measure::median_ms(&timings.cold_suspends),
        cold_resume_ms: measure::median_ms(&timings.cold_resumes),
        grow_s: measure::secs(timings.grow),
        db_bytes: environment.db_bytes(),
        peak_rss_mb: measure::peak_rss_mb(),
        ok: timings.warm.len() + timings.cold_resumes.len(),
    };
    // What this run wrote goes, whether or not it went well. A run left
    // waiting by a failure keeps the thread (`ThreadDeletion::Busy`): that
    // failure is reported already.
    if let Err(err) = threads.delete_thread(&key).await {
        failures.push(anyhow!(err).context(format!("cannot delete the thread {}", key.thread_id)));
    }
    measured?;
    Report::new(&figures, failures)
}

/// Grows the thread and measures the round trips on it; a wrong round trip
/// is a failure, anything that stops the measuring an error.
async fn measure_thread(
    target: &Target,
    environment: &Environment,
    agent: &Agent,
    key: &ThreadKey,
    m: usize,
    timings: &mut Timings,
    failures: &mut Failures,
) -> anyhow::Result<()> {
    let started = Instant::now();
    grow(agent.store().as_ref(), threads_of(agent)?, key, m).await?;
    timings.grow = started.elapsed();

    // Connections and prepared statements are warm when timing starts.
    if let Err(err) = round_trip(agent, key).await {
        failures.push(err.context("the round trip before measuring"));
    }
    for _ in 0..REPEATS {
        match round_trip(agent, key).await {
            Ok(measured) => timings.warm.push(measured),
            Err(err) => failures.push(err),
        }
    }
    for _ in 0..COLD {
        let suspended = child(target, environment, &["__thread-start", &key.thread_id]).await?;
        if let Some(problem) = &suspended.problem {
            failures.push(problem);
            continue;
        }
        let resumed = child(target, environment, &["__thread-answer", &suspended.run_id]).await?;
        if let Some(problem) = &resumed.problem {
            failures.push(problem);
            continue;
        }
        timings.cold_suspends.push(from_ms(suspended.ms));
        timings.cold_resumes.push(from_ms(resumed.ms));
    }
    Ok(())
}

/// A child's time, as it printed it.
fn from_ms(ms: f64) -> Duration {
    Duration::from_secs_f64(ms.max(0.0) / 1000.0)
}

fn median_ms(values: impl Iterator<Item = Duration>) -> f64 {
    measure::median_ms(&values.collect::<Vec<_>>())
}

/// The store's threads; a store without them cannot be measured.
fn threads_of(agent: &Agent) -> anyhow::Result<&dyn ThreadStore> {
    agent
        .store()
        .thread_store()
        .ok_or_else(|| anyhow!("the store keeps no threads, so `thread` cannot run on it"))
}

/// How a measured run is started: on the thread, reading its last
/// messages as the agent's default says.
fn on_thread(key: &ThreadKey) -> StreamOptions {
    StreamOptions::default().on_thread(ThreadOptions::new(&key.resource_id, &key.thread_id))
}

/// Appends `m` alternating user and assistant messages to the thread, in
/// completed runs of at most [`GROW_CHUNK`] messages (the first creates the
/// thread), and checks the thread holds them.
async fn grow(store: &dyn RunStore, threads: &dyn ThreadStore, key: &ThreadKey, m: usize) -> anyhow::Result<()> {
    let now = chrono::Utc::now();
    for (part, first) in (0..m).step_by(GROW_CHUNK).enumerate() {
        let messages: Vec<Message> = (first..m.min(first + GROW_CHUNK)).map(grown_message).collect();
        let run = {
            let mut record = RunRecord::default().with_calls(RunStatus::Completed, Vec::new());
            record.run_id = format!("{}-grown-{part}", key.thread_id);
            record.agent_id = AGENT_ID.to_owned();
            // No context: every message is the run's own, appended.
            record.memory = Some(RunMemory {
                key: key.clone(),
                context: 0,
            });
            record.created_at = now;
            record.updated_at = now;
            record.message_count = messages.len() as i64;
            record
        };
        store
            .create(&run, &messages)
            .await
            .with_context(|| format!("cannot write messages {first}.. of the thread"))?;
    }
    let count = threads.thread(key).await?.map_or(0, |thread| thread.message_count);
    ensure!(
        count == m as i64,
        "the thread holds {count} messages after {m} were written to it"
    );
    Ok(())
}

/// The `i`th message (from 0) of the grown thread: the person's on even
/// places, the assistant's on odd ones.
fn grown_message(i: usize) -> Message {
    let n = i + 1;
    if i.is_multiple_of(2) {
        Message::user(format!("Message {n}: how did the last deploy go?"))
    } else {
        Message::assistant(format!("Message {n}: it went to staging, then production."), Vec::new())
    }
}

/// One round trip on the thread in this process, timed, then checked.
async fn round_trip(agent: &Agent, key: &ThreadKey) -> anyhow::Result<Measured> {
    let cpu = measure::cpu_time();
    let suspended = run::start_with(agent, on_thread(key)).await?;
    let suspend_cpu = measure::cpu_time().saturating_sub(cpu);
    suspended.expect_question(workload::DEPLOY_QUESTION)?;
    check_context(agent, key, &suspended.run_id).await?;
    let cpu = measure::cpu_time();
    let resumed = run::resume(agent, &suspended.run_id, DEPLOY_ANSWER).await?;
    let resume_cpu = measure::cpu_time().saturating_sub(cpu);
    resumed.expect_text(DEPLOY_EXPECTED)?;
    check_thread_end(agent, key, &resumed.run_id).await?;
    Ok(Measured {
        suspend: suspended.elapsed,
        suspend_cpu,
        resume: resumed.elapsed,
        resume_cpu,
    })
}

/// Checks the suspended run started from the thread's last messages, as
/// the context rules give them: its `memory.context` is their count and its
/// first messages are they. Read after the run (so a fresh process's timed
/// start is its first use of the store): the thread held, before the run,
/// its messages now less the run's own.
async fn check_context(agent: &Agent, key: &ThreadKey, run_id: &str) -> anyhow::Result<()> {
    let store = agent.store();
    let threads = threads_of(agent)?;
    let run = store
        .get(run_id)
        .await?
        .ok_or_else(|| anyhow!("run {run_id} is not stored"))?;
    let memory = run.memory.ok_or_else(|| anyhow!("run {run_id} is on no thread"))?;
    ensure!(
        memory.key == *key,
        "run {run_id} is on thread {:?}, not {:?}",
        memory.key,
        key
    );
    let messages = store.messages(run_id).await?;
    let own = messages.len() as i64 - memory.context;
    let count = threads.thread(key).await?.map_or(0, |thread| thread.message_count);
    let before = count - own;
    let from = (before - i64::from(DEFAULT_LAST_MESSAGES)).max(0);
    let window = u32::try_from(before - from).context("a negative window of the thread")?;
    let stored = threads.thread_messages(key, from, window).await?;
    let expected = context_messages(stored.into_iter().map(|m| m.message).collect(), unanswered);
    ensure!(
        memory.context == expected.len() as i64,
        "run {run_id} started from {} of the thread's messages; its last {window} give {}",
        memory.context,
        expected.len()
    );
    ensure!(
        messages.get(..expected.len()) == Some(expected.as_slice()),
        "run {run_id} did not start from the thread's last {window} messages"
    );
    Ok(())
}

/// What the context rules put for a call with no result in the thread. The
/// bench answers every question before the next run, so none is expected:
/// a run's context holding one shows as not the thread's messages.
fn unanswered(call: &ToolCall) -> ToolResult {
    ToolResult {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: "(no answer in the thread)".into(),
        is_error: true,
    }
}

/// Checks the completed run's final text is the thread's last message.
async fn check_thread_end(agent: &Agent, key: &ThreadKey, run_id: &str) -> anyhow::Result<()> {
    let threads = threads_of(agent)?;
    let count = threads.thread(key).await?.map_or(0, |thread| thread.message_count);
    let last = threads.thread_messages(key, count - 1, 1).await?;
    match last.first() {
        Some(last) if last.run_id == run_id && last.message == Message::assistant(DEPLOY_EXPECTED, Vec::new()) => {
            Ok(())
        }
        other => bail!(
            "the thread should end with run {run_id}'s {DEPLOY_EXPECTED:?}; it ends with {:?}",
            other.map(|m| (&m.run_id, &m.message))
        ),
    }
}

/// The child that starts a run on the thread and exits once it is
/// suspended.
pub async fn thread_start(target: &Target, thread_id: &str) -> anyhow::Result<Report> {
    let environment = Environment::prepare(target, Workload::Deploy).await?;
    let agent = environment.agent().await?;
    let key = ThreadKey::new(RESOURCE, thread_id);
    let streamed = run::start_with(&agent, on_thread(&key)).await?;
    let checked = match streamed.expect_question(workload::DEPLOY_QUESTION) {
        Ok(()) => check_context(&agent, &key, &streamed.run_id).await,
        Err(err) => Err(err),
    };
    let report = ChildReport {
        problem: checked.err().map(|e| format!("{e:#}")),
        run_id: streamed.run_id,
        ms: measure::ms(streamed.elapsed),
    };
    Report::new(&report, Failures::default())
}

/// The child that answers the run, knowing only its id.
pub async fn thread_answer(target: &Target, run_id: &str) -> anyhow::Result<Report> {
    let environment = Environment::prepare(target, Workload::Deploy).await?;
    let agent = environment.agent().await?;
    let streamed = run::resume(&agent, run_id, DEPLOY_ANSWER).await?;
    let checked = match streamed.expect_text(DEPLOY_EXPECTED) {
        Ok(()) => match agent.store().get(run_id).await?.and_then(|run| run.memory) {
            Some(memory) => check_thread_end(&agent, &memory.key, run_id).await,
            None => Err(anyhow!("run {run_id} is on no thread")),
        },
        Err(err) => Err(err),
    };
    let report = ChildReport {
        problem: checked.err().map(|e| format!("{e:#}")),
        run_id: streamed.run_id,
        ms: measure::ms(streamed.elapsed),
    };
    Report::new(&report, Failures::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grown_thread_alternates_person_and_assistant() {
        assert!(matches!(grown_message(0), Message::User { .. }));
        assert!(matches!(grown_message(1), Message::Assistant { .. }));
        assert!(matches!(grown_message(9_998), Message::User { .. }));
        assert_eq!(
            grown_message(9_999),
            Message::assistant("Message 10000: it went to staging, then production.", Vec::new())
        );
    }
}

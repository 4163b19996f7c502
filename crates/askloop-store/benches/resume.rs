//! What one resume costs the SQLite store (and PostgreSQL), for a run with 10 messages and
//! one with 1,000 (the store's goal: the second within 1.5x of the first).
//!
//! A resume, as `Agent::resume_stream` does it, is: read the run, claim it,
//! read its messages (the model needs the whole conversation), write the
//! step. Measured apart:
//!
//! - `resume_writes`: claim + update appending 2 messages + reading the run
//!   back: the store's own per-step work, which must not grow with the
//!   conversation.
//! - `read_messages`: reading the whole conversation, which grows with it by
//!   nature (the same bytes go to the model next).
//! - `resume_cycle`: both together, what one resume costs end to end.
//!
//! Each measured cycle starts from a run of exactly 10 or 1,000 messages:
//! between cycles (untimed) the 2 appended messages are deleted again.
//! Each runs with `synchronous = FULL` (the default: an fsync per commit) and
//! `NORMAL`, and against PostgreSQL when `ASKLOOP_TEST_DATABASE_URL` is set.
//! Run with:
//!
//! ```text
//! cargo bench -p askloop-store --bench resume
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use askloop::{
    Message, PendingKind, PendingToolCall, RunRecord, RunStatus, RunStore, RunUpdate, ToolCall, ToolContent,
    ToolResult, Usage,
};
use askloop_store::conformance::{self, RawRows};
use askloop_store::{SqliteOptions, SqliteStore, SqliteSync};
use chrono::Utc;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::json;

const SIZES: [usize; 2] = [10, 1_000];

/// A message of realistic size: a question, a tool call, an answer.
fn message(i: usize) -> Message {
    match i % 3 {
        0 => Message::user(format!(
            "Message {i}: please look at the deployment notes for service {i} and tell me which steps are still open."
        )),
        1 => Message::assistant(
            format!("Checking the notes for service {i}."),
            vec![ToolCall {
                id: format!("call_{i}"),
                name: "ask_user".into(),
                args: json!({"question": format!("Which environment for service {i}?"), "options": [{"label": "staging"}, {"label": "production"}]}).into(),
            }],
        ),
        _ => Message::Tool(ToolResult {
            tool_call_id: format!("call_{}", i - 1),
            tool_name: "ask_user".into(),
            content: ToolContent::Text("User answered: staging".into()),
            is_error: false,
        }),
    }
}

fn pending() -> Vec<PendingToolCall> {
    vec![PendingToolCall {
        tool_call_id: "call_next".into(),
        tool_name: "ask_user".into(),
        args: json!({"question": "Which environment?"}).into(),
        kind: PendingKind::Suspended,
        suspend_payload: Some(
            json!({"question": "Which environment?", "options": [{"label": "staging"}, {"label": "production"}], "selectionMode": "single-select"}).into(),
        ),
        resume_schema: Some(json!({"type": "string", "enum": ["staging", "production"]}).into()),
        expires_at: None,
        started_at: None,
    }]
}

struct Fixture {
    store: Arc<dyn RunStore>,
    raw: Arc<dyn RawRows>,
    run_id: String,
    messages: i64,
    version: i64,
    /// Keeps the store's file or schema until the fixture is dropped.
    _keep: Box<dyn std::any::Any>,
}

async fn sqlite_fixture(size: usize, sync: SqliteSync) -> Fixture {
    // Under target/, on the same disk as a real store (not a tmpfs), so an
    // fsync costs what it costs.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let store = SqliteStore::open_with(dir.path().join("bench.db"), SqliteOptions::default().sync(sync))
        .await
        .unwrap();
    seed(Arc::new(store.clone()), Arc::new(store), size, Box::new(dir)).await
}

async fn postgres_fixture(size: usize) -> Option<Fixture> {
    let subject = conformance::postgres_subject().await?;
    let (store, raw) = (Arc::clone(&subject.store), subject.raw.clone()?);
    Some(seed(store, raw, size, Box::new(subject)).await)
}

/// A suspended run of exactly `size` messages.
async fn seed(store: Arc<dyn RunStore>, raw: Arc<dyn RawRows>, size: usize, keep: Box<dyn std::any::Any>) -> Fixture {
    let run_id = format!("bench-{size}");
    let messages: Vec<Message> = (0..size).map(message).collect();
    let now = Utc::now();
    let run = {
        let mut record = RunRecord::default().with_calls(RunStatus::Running, Vec::new());
        record.run_id = run_id.clone();
        record.agent_id = "bench".into();
        record.version = 0;
        record.created_at = now;
        record.updated_at = now;
        record.message_count = size as i64;
        record.steps = 0;
        record.metadata = json!({});
        record
    };
    store.create(&run, &messages).await.unwrap();
    let pending = pending();
    let version = store
        .update(RunUpdate {
            run_id: &run_id,
            expected_version: 0,
            status: RunStatus::Suspended,
            pending: &pending,
            step_results: &[],
            append: &[],
            steps: 1,
            usage: Usage::default(),
            error: None,
            failure: None,
            lease: None,
            resolutions: &[],
            outbox: &[],
            grants: &[],
        })
        .await
        .unwrap();
    Fixture {
        store,
        raw,
        run_id,
        messages: size as i64,
        version,
        _keep: keep,
    }
}

impl Fixture {
    /// One resume's store work; leaves the run suspended again. Returns the
    /// time spent.
    async fn cycle(&mut self, read_messages: bool, write: bool) -> Duration {
        let pending = pending();
        let append = [message(1), message(2)];
        let started = Instant::now();
        if write {
            let claimed = self
                .store
                .claim(&self.run_id, self.version, &askloop_store::conformance::test_lease())
                .await
                .unwrap();
            if read_messages {
                let conversation = self.store.messages(&self.run_id).await.unwrap();
                assert_eq!(conversation.len() as i64, self.messages);
            }
            self.version = self
                .store
                .update(RunUpdate {
                    run_id: &self.run_id,
                    expected_version: claimed,
                    status: RunStatus::Suspended,
                    pending: &pending,
                    step_results: &[],
                    append: &append,
                    steps: 2,
                    usage: Usage::default(),
                    error: None,
                    failure: None,
                    lease: None,
                    resolutions: &[],
                    outbox: &[],
                    grants: &[],
                })
                .await
                .unwrap();
            let run = self.store.get(&self.run_id).await.unwrap().unwrap();
            assert_eq!(run.version, self.version);
        } else {
            let conversation = self.store.messages(&self.run_id).await.unwrap();
            assert_eq!(conversation.len() as i64, self.messages);
        }
        let spent = started.elapsed();
        if write {
            // Untimed: back to exactly `messages` messages.
            self.raw.truncate_messages(&self.run_id, self.messages).await;
        }
        spent
    }
}

const MEASURES: [(&str, bool, bool); 3] = [
    ("resume_writes", false, true),
    ("read_messages", true, false),
    ("resume_cycle", true, true),
];

fn measure(c: &mut Criterion, rt: &tokio::runtime::Runtime, backend: &str, fixtures: &mut [(usize, Fixture)]) {
    for (name, read_messages, write) in MEASURES {
        let mut group = c.benchmark_group(format!("{backend}/{name}"));
        for (size, fx) in fixtures.iter_mut() {
            group.bench_function(BenchmarkId::from_parameter(*size), |b| {
                b.iter_custom(|iters| {
                    rt.block_on(async {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            total += fx.cycle(read_messages, write).await;
                        }
                        total
                    })
                })
            });
        }
        group.finish();
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (sync, name) in [(SqliteSync::Full, "sqlite_full"), (SqliteSync::Normal, "sqlite_normal")] {
        let mut fixtures: Vec<_> = SIZES
            .iter()
            .map(|&size| (size, rt.block_on(sqlite_fixture(size, sync))))
            .collect();
        measure(c, &rt, name, &mut fixtures);
    }
    // PostgreSQL when ASKLOOP_TEST_DATABASE_URL names a server (a schema of
    // its own, dropped afterwards).
    let postgres: Option<Vec<_>> = SIZES
        .iter()
        .map(|&size| rt.block_on(postgres_fixture(size)).map(|fx| (size, fx)))
        .collect();
    if let Some(mut fixtures) = postgres {
        measure(c, &rt, "postgres", &mut fixtures);
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = bench
}
criterion_main!(benches);

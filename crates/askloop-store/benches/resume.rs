//! What one resume costs the SQLite store, for a run with 10 messages and
//! one with 1,000 (issue 3: the second within 1.5x of the first).
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
//! `NORMAL`. Run with:
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
use askloop_store::conformance::RawRows;
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
                args: json!({"question": format!("Which environment for service {i}?"), "options": [{"label": "staging"}, {"label": "production"}]}),
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
        args: json!({"question": "Which environment?"}),
        kind: PendingKind::Suspended,
        suspend_payload: Some(
            json!({"question": "Which environment?", "options": [{"label": "staging"}, {"label": "production"}], "selectionMode": "single-select"}),
        ),
        resume_schema: Some(json!({"type": "string", "enum": ["staging", "production"]})),
    }]
}

struct Fixture {
    store: Arc<SqliteStore>,
    run_id: String,
    messages: i64,
    version: i64,
    _dir: tempfile::TempDir,
}

async fn fixture(size: usize, sync: SqliteSync) -> Fixture {
    // Under target/, on the same disk as a real store (not a tmpfs), so an
    // fsync costs what it costs.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let store = SqliteStore::open_with(dir.path().join("bench.db"), SqliteOptions::default().sync(sync))
        .await
        .unwrap();
    let run_id = format!("bench-{size}");
    let messages: Vec<Message> = (0..size).map(message).collect();
    let now = Utc::now();
    let run = RunRecord {
        run_id: run_id.clone(),
        agent_id: "bench".into(),
        thread_id: None,
        status: RunStatus::Running,
        version: 0,
        created_at: now,
        updated_at: now,
        pending: Vec::new(),
        step_results: Vec::new(),
        message_count: size as i64,
        steps: 0,
        usage: Usage::default(),
        error: None,
        metadata: json!({}),
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
        })
        .await
        .unwrap();
    Fixture {
        store: Arc::new(store),
        run_id,
        messages: size as i64,
        version,
        _dir: dir,
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
            let claimed = self.store.claim(&self.run_id, self.version).await.unwrap();
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
            self.store.truncate_messages(&self.run_id, self.messages).await;
        }
        spent
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (sync, sync_name) in [(SqliteSync::Full, "full"), (SqliteSync::Normal, "normal")] {
        for (name, read_messages, write) in [
            ("resume_writes", false, true),
            ("read_messages", true, false),
            ("resume_cycle", true, true),
        ] {
            let mut group = c.benchmark_group(format!("sqlite_{sync_name}/{name}"));
            for size in SIZES {
                let mut fx = rt.block_on(fixture(size, sync));
                group.bench_function(BenchmarkId::from_parameter(size), |b| {
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

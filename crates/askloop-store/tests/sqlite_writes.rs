//! The SQLite store's write path: messages inserted in chunks of several rows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use askloop::{Message, RunStatus, RunStore, RunUpdate, Usage};
use askloop_store::SqliteStore;
use askloop_store::conformance::new_run;
use chrono::Utc;

fn users(prefix: &str, n: usize) -> Vec<Message> {
    (0..n).map(|i| Message::user(format!("{prefix} {i}"))).collect()
}

fn step<'a>(run_id: &'a str, expected_version: i64, append: &'a [Message]) -> RunUpdate<'a> {
    RunUpdate {
        run_id,
        expected_version,
        status: RunStatus::Running,
        pending: &[],
        step_results: &[],
        append,
        steps: 1,
        usage: Usage::default(),
        error: None,
    }
}

async fn open() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("runs.db")).await.unwrap();
    (dir, store)
}

/// More messages than one multi-row `INSERT` holds, at creation and in an
/// update: all stored, in order, numbered on.
#[tokio::test]
async fn many_messages_are_written_in_chunks_in_order() {
    let (_dir, store) = open().await;
    let first = users("created", 600);
    store
        .create(&new_run("r1", "a", Utc::now(), first.len()), &first)
        .await
        .unwrap();
    let more = users("appended", 513);
    let version = store.update(step("r1", 0, &more)).await.unwrap();
    assert_eq!(version, 1);
    let stored = store.messages("r1").await.unwrap();
    let expected: Vec<Message> = first.iter().chain(&more).cloned().collect();
    assert_eq!(stored.len(), 1113);
    assert_eq!(stored, expected);
    assert_eq!(store.get("r1").await.unwrap().unwrap().message_count, 1113);
}

//! Each `SqliteStore` has a write thread of its own; it ends when the last
//! clone of the store is dropped, so a process that opens and drops stores
//! does not gather threads. (A test file of its own: it counts the threads
//! of the whole process.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use askloop::{Message, RunStore};
use askloop_store::SqliteStore;
use askloop_store::conformance::new_run;
use chrono::Utc;

/// The threads of this process named `askloop-sqlite`.
fn write_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "askloop-sqlite")
        .count()
}

#[tokio::test]
async fn dropping_a_store_ends_its_write_thread() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(write_threads(), 0);
    for i in 0..20 {
        let store = SqliteStore::open(dir.path().join(format!("runs-{i}.db")))
            .await
            .unwrap();
        let clone = store.clone();
        clone
            .create(&new_run("r1", "a", Utc::now(), 1), &[Message::user("hi")])
            .await
            .unwrap();
        drop(store);
        assert_eq!(clone.get("r1").await.unwrap().unwrap().agent_id, "a");
    }
    assert_eq!(settled_write_threads().await, 0, "write threads outlived their stores");

    let kept = SqliteStore::open(dir.path().join("kept.db")).await.unwrap();
    assert_eq!(started_write_threads(1).await, 1, "an open store has its write thread");
    kept.close().await;
    assert_eq!(
        settled_write_threads().await,
        0,
        "a closed store's write thread has ended"
    );
}

/// The write threads once those that are ending have ended (a thread ends
/// on its own, a moment after its store is gone), waiting up to 2 s.
async fn settled_write_threads() -> usize {
    let mut left = write_threads();
    for _ in 0..100 {
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = write_threads();
    }
    left
}

/// The write threads once `expected` of them carry their name (a new
/// thread names itself a moment after it starts), waiting up to 2 s.
async fn started_write_threads(expected: usize) -> usize {
    let mut found = write_threads();
    for _ in 0..100 {
        if found >= expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        found = write_threads();
    }
    found
}

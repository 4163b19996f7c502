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
    assert_eq!(
        write_threads_once_settled_at(0).await,
        0,
        "write threads outlived their stores"
    );

    let kept = SqliteStore::open(dir.path().join("kept.db")).await.unwrap();
    assert_eq!(
        write_threads_once_settled_at(1).await,
        1,
        "an open store has its write thread"
    );
    kept.close().await;
    assert_eq!(
        write_threads_once_settled_at(0).await,
        0,
        "a closed store's write thread has ended"
    );
}

/// The write threads once their count has reached `expected`, or after
/// 30 s if it never does. A thread ends on its own a moment after its store
/// is gone, and names itself a moment after it starts; on a loaded machine
/// (the whole suite on 2 cores) that moment has taken over 2 s, so the wait
/// is long and ends as soon as the count is reached.
async fn write_threads_once_settled_at(expected: usize) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut count = write_threads();
    while count != expected && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        count = write_threads();
    }
    count
}

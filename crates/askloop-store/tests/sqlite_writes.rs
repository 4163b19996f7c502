//! The SQLite store's threads: messages inserted in chunks of several rows,
//! many writes at once from one store (committed together in groups by its
//! write thread) each landing with its own result, reads that never wait for
//! a writer, and closing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use askloop::{Message, RunStatus, RunStore, RunUpdate, StoreError};
use askloop_store::SqliteStore;
use askloop_store::conformance::new_run;
use chrono::Utc;

fn users(prefix: &str, n: usize) -> Vec<Message> {
    (0..n).map(|i| Message::user(format!("{prefix} {i}"))).collect()
}

fn step<'a>(run_id: &'a str, expected_version: i64, append: &'a [Message]) -> RunUpdate<'a> {
    step_to(run_id, expected_version, RunStatus::Running, append)
}

fn step_to<'a>(run_id: &'a str, expected_version: i64, status: RunStatus, append: &'a [Message]) -> RunUpdate<'a> {
    askloop_store::conformance::step(run_id, expected_version, status, &[], append)
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

/// 200 runs written at once from one store, each created, stepped three
/// times and suspended: every write lands, with its own version, and every
/// run holds exactly its own messages in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_writes_to_different_runs_all_land_with_their_versions() {
    let (_dir, store) = open().await;
    let store = Arc::new(store);
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let run_id = format!("run-{i}");
                let first = [Message::user(format!("{run_id} start"))];
                store.create(&new_run(&run_id, "a", Utc::now(), 1), &first).await?;
                let mut versions = Vec::new();
                for k in 0..3 {
                    let append = [
                        Message::user(format!("{run_id} step {k}")),
                        Message::user(format!("{run_id} step {k} again")),
                    ];
                    let status = if k == 2 {
                        RunStatus::Suspended
                    } else {
                        RunStatus::Running
                    };
                    versions.push(store.update(step_to(&run_id, k, status, &append)).await?);
                }
                Ok::<_, StoreError>(versions)
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap(), [1, 2, 3]);
    }
    for i in 0..200 {
        let run_id = format!("run-{i}");
        let run = store.get(&run_id).await.unwrap().unwrap();
        assert_eq!(
            (run.status(), run.version, run.message_count),
            (RunStatus::Suspended, 3, 7)
        );
        let mut expected = vec![Message::user(format!("{run_id} start"))];
        for k in 0..3 {
            expected.push(Message::user(format!("{run_id} step {k}")));
            expected.push(Message::user(format!("{run_id} step {k} again")));
        }
        assert_eq!(store.messages(&run_id).await.unwrap(), expected);
    }
}

/// 50 suspended runs, each claimed by 4 tasks at once (200 claims queued
/// together, so claims of one run share batches): exactly one claim of each
/// run wins, the others are conflicts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_concurrent_claims_of_each_run_exactly_one_wins() {
    let (_dir, store) = open().await;
    let store = Arc::new(store);
    for i in 0..50 {
        let run_id = format!("run-{i}");
        store.create(&new_run(&run_id, "a", Utc::now(), 0), &[]).await.unwrap();
        store
            .update(step_to(&run_id, 0, RunStatus::Suspended, &[]))
            .await
            .unwrap();
    }
    let start = Arc::new(tokio::sync::Barrier::new(200));
    let tasks: Vec<_> = (0..200)
        .map(|n| {
            let store = Arc::clone(&store);
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                let run_id = format!("run-{}", n % 50);
                start.wait().await;
                (
                    run_id.clone(),
                    store.claim(&run_id, 1, &askloop_store::conformance::test_lease()).await,
                )
            })
        })
        .collect();
    let mut wins = std::collections::HashMap::new();
    for task in tasks {
        let (run_id, claimed) = task.await.unwrap();
        match claimed {
            Ok(version) => {
                assert_eq!(version, 2);
                *wins.entry(run_id).or_insert(0) += 1;
            }
            Err(StoreError::Conflict { .. }) => {}
            Err(other) => panic!("a claim of {run_id} failed with {other}"),
        }
    }
    assert_eq!(wins.len(), 50);
    assert!(wins.values().all(|&n| n == 1), "{wins:?}");
}

/// Writers that give up (their futures dropped while writing or queued, as
/// when a client disconnects) neither stop the others nor leave the store
/// stuck: every write that was awaited lands, and the store goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_giving_up_midway_leave_the_store_writing() {
    let (_dir, store) = open().await;
    let store = Arc::new(store);
    let tasks: Vec<_> = (0..150)
        .map(|i| {
            let store = Arc::clone(&store);
            let task = tokio::spawn(async move {
                let run_id = format!("run-{i}");
                let first = [Message::user("start")];
                store.create(&new_run(&run_id, "a", Utc::now(), 1), &first).await?;
                let append = [Message::user("step")];
                store.update(step(&run_id, 0, &append)).await
            });
            (i, task)
        })
        .collect();
    let mut kept = Vec::new();
    for (i, task) in tasks {
        if i % 3 == 0 {
            task.abort();
        } else {
            kept.push((i, task));
        }
    }
    let all = async {
        for (i, task) in kept {
            assert_eq!(task.await.unwrap().unwrap(), 1, "run-{i}");
        }
        for i in (0..150).filter(|i| i % 3 != 0) {
            let run = store.get(&format!("run-{i}")).await.unwrap().unwrap();
            assert_eq!((run.version, run.message_count), (1, 2));
        }
        // An aborted writer's run is either absent or whole.
        for i in (0..150).filter(|i| i % 3 == 0) {
            let run_id = format!("run-{i}");
            if let Some(run) = store.get(&run_id).await.unwrap() {
                assert_eq!(store.messages(&run_id).await.unwrap().len() as i64, run.message_count);
            }
        }
        store.create(&new_run("after", "a", Utc::now(), 0), &[]).await.unwrap();
        store.close().await;
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), all)
        .await
        .expect("the store got stuck after writers gave up");
}

/// Writes in flight on a runtime that is shut down (their tasks dropped
/// wherever they were) do not leave the store stuck for another runtime.
/// (Writes queued from another runtime while that shutdown is under way may
/// fail with a backend error; they never wait forever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_shut_down_mid_write_leaves_the_store_writing() {
    let (_dir, store) = open().await;
    let store = Arc::new(store);
    let other = Arc::clone(&store);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        for i in 0..100 {
            let store = Arc::clone(&other);
            runtime.spawn(async move {
                let run_id = format!("gone-{i}");
                let first = [Message::user("start")];
                store.create(&new_run(&run_id, "a", Utc::now(), 1), &first).await
            });
        }
        runtime.block_on(async { tokio::time::sleep(std::time::Duration::from_millis(5)).await });
        // Waits until the runtime's tasks are dropped (wherever they were),
        // but not for them to finish.
        runtime.shutdown_timeout(std::time::Duration::from_secs(30));
    })
    .join()
    .unwrap();
    let after = async {
        for i in 0..20 {
            let run_id = format!("after-{i}");
            let first = [Message::user("start")];
            store
                .create(&new_run(&run_id, "a", Utc::now(), 1), &first)
                .await
                .unwrap();
            assert_eq!(store.update(step(&run_id, 0, &first)).await.unwrap(), 1);
        }
        // Whatever landed of the other runtime's writes is whole.
        for i in 0..100 {
            let run_id = format!("gone-{i}");
            if let Some(run) = store.get(&run_id).await.unwrap() {
                assert_eq!(store.messages(&run_id).await.unwrap().len() as i64, run.message_count);
            }
        }
        store.close().await;
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), after)
        .await
        .expect("the store got stuck after a runtime was shut down mid-write");
}

/// Reads run on the caller's thread and, in WAL mode, never wait for a
/// writer: with another connection holding the write lock in an open
/// transaction, the store still reads the last committed state at once,
/// and its own write waits (busy timeout) and lands once the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_do_not_wait_for_another_connections_write_lock() {
    let (_dir, store) = open().await;
    let first = [Message::user("start")];
    store.create(&new_run("r1", "a", Utc::now(), 1), &first).await.unwrap();

    let other = rusqlite::Connection::open(store.path()).unwrap();
    other
        .execute_batch("BEGIN IMMEDIATE; UPDATE runs SET steps = 99 WHERE run_id = 'r1';")
        .unwrap();

    let read = async {
        let run = store.get("r1").await.unwrap().unwrap();
        (run.steps, store.messages("r1").await.unwrap().len())
    };
    let (steps, messages) = tokio::time::timeout(std::time::Duration::from_secs(2), read)
        .await
        .expect("a read waited for another connection's write lock");
    assert_eq!((steps, messages), (0, 1), "the uncommitted write is not seen");

    let store2 = store.clone();
    let write = tokio::spawn(async move {
        let append = [Message::user("step")];
        store2.update(step("r1", 0, &append)).await
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(!write.is_finished(), "the store's write must wait for the lock");
    other.execute_batch("ROLLBACK;").unwrap();
    assert_eq!(write.await.unwrap().unwrap(), 1);
    let run = store.get("r1").await.unwrap().unwrap();
    assert_eq!((run.steps, run.message_count), (1, 2));
}

/// After `close`, reads and writes fail with an error that says so, and a
/// second `close` returns.
#[tokio::test]
async fn after_close_reads_and_writes_say_the_store_is_closed() {
    let (_dir, store) = open().await;
    store.create(&new_run("r1", "a", Utc::now(), 0), &[]).await.unwrap();
    store.close().await;
    let read = store.get("r1").await.unwrap_err().to_string();
    assert!(read.contains("closed"), "{read}");
    let write = store
        .claim("r1", 0, &askloop_store::conformance::test_lease())
        .await
        .unwrap_err()
        .to_string();
    assert!(write.contains("closed"), "{write}");
    store.close().await;
}

//! The change feed of every store (`ChangeFeed::changes`), and what it hears
//! from other handles of the same database: another SQLite connection (as
//! another process would be), another PostgreSQL instance.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use askloop::{ChangeFeed, Message, RunChange, RunStore};
use askloop_store::conformance::{drop_schema, new_run, postgres_test_url, unique_schema_name};
use askloop_store::{PostgresOptions, PostgresStore, SqliteStore};
use chrono::Utc;
use futures::StreamExt;

mod memory {
    askloop_store::change_feed_conformance_tests!(askloop_store::conformance::memory_subject());
}

mod sqlite {
    askloop_store::change_feed_conformance_tests!(askloop_store::conformance::sqlite_subject());
}

mod postgres {
    askloop_store::change_feed_conformance_tests!(askloop_store::conformance::postgres_subject());
}

const PATIENCE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_feed_hears_writes_made_through_another_handle_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let watcher = SqliteStore::open(&path).await.unwrap();
    let writer = SqliteStore::open(&path).await.unwrap();
    let mut feed = watcher.changes().await.unwrap().unwrap();
    writer
        .create(&new_run("elsewhere", "agent-1", Utc::now(), 1), &[Message::user("hi")])
        .await
        .unwrap();
    let change = tokio::time::timeout(PATIENCE, feed.next()).await.unwrap().unwrap();
    assert_eq!(change, RunChange::unknown(), "SQLite cannot tell which run changed");
    assert!(watcher.get("elsewhere").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_feed_hears_another_instances_writes_of_its_schema_only() {
    let Some(url) = postgres_test_url("postgres change feed across instances") else {
        return;
    };
    let schema = unique_schema_name();
    let other_schema = unique_schema_name();
    let open = |schema: String| {
        let url = url.clone();
        async move {
            PostgresStore::connect_with(&url, PostgresOptions::default().schema(&schema).max_connections(2))
                .await
                .unwrap()
        }
    };
    let watcher = open(schema.clone()).await;
    let instance = open(schema.clone()).await;
    let neighbour = open(other_schema.clone()).await;
    let mut feed = watcher.changes().await.unwrap().unwrap();
    // A write in another schema first: the feed must skip it and report
    // only the write of its own schema after it.
    neighbour
        .create(
            &new_run("neighbours-run", "agent-1", Utc::now(), 1),
            &[Message::user("hi")],
        )
        .await
        .unwrap();
    instance
        .create(&new_run("shared-run", "agent-1", Utc::now(), 1), &[Message::user("hi")])
        .await
        .unwrap();
    let change = tokio::time::timeout(PATIENCE, feed.next()).await.unwrap().unwrap();
    assert_eq!(change, RunChange::of("shared-run"));
    drop(feed);
    for store in [&watcher, &instance, &neighbour] {
        store.close().await;
    }
    drop_schema(&url, &schema).await;
    drop_schema(&url, &other_schema).await;
}

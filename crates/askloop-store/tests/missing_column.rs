//! Tables made elsewhere: a SQLite file and a PostgreSQL schema whose
//! migration state says "current" while a table lacks a column (made by
//! hand, or by another program). Opening is refused with one error naming
//! the database and the column; no run is read half, and no list comes back
//! empty as if there were no runs (a pending question silently skipped).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use askloop::{DatabaseFault, Message, RunStore, StoreError};
use askloop_store::conformance::{drop_schema, new_run, postgres_test_url, unique_schema_name};
use askloop_store::{PostgresOptions, PostgresStore, SqliteOptions, SqliteStore};
use chrono::Utc;

fn assert_refused_naming(err: &StoreError, location: &str, column: &str) {
    let StoreError::Unusable {
        location: at, fault, ..
    } = err
    else {
        panic!("not a refusal of the database: {err:?}")
    };
    assert_eq!(*fault, DatabaseFault::NotADatabase, "{err}");
    assert!(at.contains(location), "{err}");
    let text = err.to_string();
    assert!(text.contains(column), "{text}");
    assert!(text.contains("changed by hand or by another program"), "{text}");
}

/// A SQLite file with a run, then the column dropped by hand.
async fn sqlite_file_without(table: &str, column: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db").to_str().unwrap().to_owned();
    let store = SqliteStore::open(&path).await.unwrap();
    store
        .create(&new_run("waiting", "assistant", Utc::now(), 1), &[Message::user("hi")])
        .await
        .unwrap();
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let before: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
    conn.execute_batch(&format!("ALTER TABLE {table} DROP COLUMN {column}"))
        .unwrap();
    let after: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
    assert_eq!(before, after, "the file still says its tables are current");
    (dir, path)
}

#[tokio::test]
async fn a_sqlite_file_whose_runs_table_lacks_a_column_is_refused_naming_the_column() {
    let (_dir, path) = sqlite_file_without("runs", "failure").await;
    let err = askloop_store::open(&path).await.unwrap_err();
    assert_refused_naming(&err, &path, "runs.failure");
    // Read only (as `askloop runs` opens it): the same refusal.
    let err = SqliteStore::open_with(&path, SqliteOptions::default().read_only(true))
        .await
        .unwrap_err();
    assert_refused_naming(&err, &path, "runs.failure");
}

#[tokio::test]
async fn a_sqlite_file_whose_messages_table_lacks_a_column_is_refused_naming_the_column() {
    let (_dir, path) = sqlite_file_without("messages", "body").await;
    let err = askloop_store::open(&path).await.unwrap_err();
    assert_refused_naming(&err, &path, "messages.body");
}

#[tokio::test]
async fn a_sqlite_file_whose_thread_messages_table_lacks_a_column_is_refused_naming_the_column() {
    let (_dir, path) = sqlite_file_without("thread_messages", "run_seq").await;
    let err = askloop_store::open(&path).await.unwrap_err();
    assert_refused_naming(&err, &path, "thread_messages.run_seq");
}

#[tokio::test]
async fn a_postgres_schema_whose_runs_table_lacks_a_column_is_refused_naming_the_column() {
    let Some(url) = postgres_test_url("postgres missing column") else {
        return;
    };
    let schema = unique_schema_name();
    let options = || PostgresOptions::default().schema(&schema);
    let store = PostgresStore::connect_with(&url, options()).await.unwrap();
    store
        .create(&new_run("waiting", "assistant", Utc::now(), 1), &[Message::user("hi")])
        .await
        .unwrap();
    store.close().await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER TABLE \"{schema}\".runs DROP COLUMN resolutions"
    )))
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;

    let err = PostgresStore::connect_with(&url, options()).await.unwrap_err();
    assert_refused_naming(&err, &schema, "runs.resolutions");
    drop_schema(&url, &schema).await;
}

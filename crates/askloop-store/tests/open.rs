//! `askloop_store::open`: one string picks and opens a store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use askloop::{Message, RunQuery, RunStatus, StoreError};
use askloop_store::conformance::{drop_schema, new_run, postgres_test_url, unique_schema_name};
use std::time::Duration;

use askloop_store::{PostgresOptions, PostgresStore};
use chrono::Utc;

#[tokio::test]
async fn a_plain_path_creates_the_sqlite_file_and_its_directory_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/deeper/runs.db");
    let store = askloop_store::open(path.to_str().unwrap()).await.unwrap();
    store
        .create(&new_run("r1", "a", Utc::now(), 1), &[Message::user("hi")])
        .await
        .unwrap();
    assert!(path.exists());

    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |row| row.get(0)).unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn a_sqlite_url_and_a_reopened_file_see_the_same_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let first = askloop_store::open(path.to_str().unwrap()).await.unwrap();
    first
        .create(&new_run("r1", "a", Utc::now(), 1), &[Message::user("hi")])
        .await
        .unwrap();
    drop(first);

    let again = askloop_store::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let runs = again.list(&RunQuery::default()).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status(), RunStatus::Running);
    assert_eq!(again.messages("r1").await.unwrap(), [Message::user("hi")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_stores_opening_one_new_file_at_once_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db").to_str().unwrap().to_owned();
    let opens: Vec<_> = (0..6)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move { askloop_store::open(&path).await.map(|_| ()) })
        })
        .collect();
    for open in opens {
        open.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn other_locations_are_refused_with_the_accepted_forms() {
    for bad in ["mysql://root@localhost/askloop", "", "sqlite::memory:"] {
        match askloop_store::open(bad).await {
            Err(StoreError::InvalidLocation(message)) => {
                assert!(
                    message.contains("sqlite://PATH") && message.contains("postgres://"),
                    "{message}"
                );
            }
            Err(other) => panic!("{bad:?}: expected InvalidLocation, got {other}"),
            Ok(_) => panic!("{bad:?} must be refused"),
        }
    }
}

#[tokio::test]
async fn a_postgres_url_opens_a_pool_and_its_search_path_option_picks_the_schema() {
    let Some(url) = postgres_test_url("a_postgres_url_opens_a_pool_and_its_search_path_option_picks_the_schema") else {
        return;
    };
    let schema = unique_schema_name();
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
        .execute(&admin)
        .await
        .unwrap();

    let separator = if url.contains('?') { '&' } else { '?' };
    let location = format!("{url}{separator}options=-c%20search_path%3D{schema}");
    let store = askloop_store::open(&location).await.unwrap();
    store
        .create(&new_run("r1", "a", Utc::now(), 1), &[Message::user("hi")])
        .await
        .unwrap();
    assert_eq!(store.get("r1").await.unwrap().unwrap().agent_id, "a");

    let tables: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name IN ('runs', 'messages')",
    )
    .bind(&schema)
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(tables, 2, "the tables must be in the schema named by the URL");
    admin.close().await;
    drop(store);
    drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn an_unreachable_postgres_server_is_an_error_naming_it() {
    // Port 1 on the loopback: nothing listens there. (A refused connection is
    // retried until the acquire timeout, 30 s by default: a server may start
    // before its database.)
    let options = PostgresOptions::default().acquire_timeout(Duration::from_secs(2));
    match PostgresStore::connect_with("postgres://askloop:secret@127.0.0.1:1/askloop", options).await {
        // Not InvalidLocation: the URL is fine, the server is not there.
        Err(err @ StoreError::Backend(_)) => {
            let message = err.to_string();
            assert!(message.contains("127.0.0.1:1"), "{message}");
            assert!(!message.contains("secret"), "the password must not be shown: {message}");
        }
        Err(other) => panic!("expected a backend error, got {other:?}"),
        Ok(_) => panic!("nothing listens on port 1"),
    }
}

#[tokio::test]
async fn a_file_migrated_further_by_a_newer_askloop_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let store = askloop_store::open(path.to_str().unwrap()).await.unwrap();
    store
        .create(&new_run("r1", "a", Utc::now(), 1), &[Message::user("hi")])
        .await
        .unwrap();
    drop(store);
    // As if a newer askloop had applied migrations this build does not know.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA user_version = 9999; CREATE TABLE from_the_future (x INTEGER);")
        .unwrap();
    drop(conn);

    let store = askloop_store::open(path.to_str().unwrap()).await.unwrap();
    assert_eq!(store.get("r1").await.unwrap().unwrap().agent_id, "a");
    store.create(&new_run("r2", "a", Utc::now(), 0), &[]).await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let level: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
    assert_eq!(level, 9999, "an older build must not lower the file's level");
}

/// The index names of the `runs` table of the file at `path`, sorted.
fn run_indexes(path: &std::path::Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut names = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs' AND sql IS NOT NULL ORDER BY name")
        .unwrap();
    names
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// A file made by a build that kept an index per status on the sweeps'
/// columns (migrations 1 to 4) gets the partial indexes in their place,
/// keeping its runs, and its sweeps find them as before.
#[tokio::test]
async fn a_file_of_the_fourth_layout_gets_the_partial_indexes_and_keeps_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    for migration in [
        include_str!("../migrations/sqlite/0001_runs.sql"),
        include_str!("../migrations/sqlite/0002_leases.sql"),
        include_str!("../migrations/sqlite/0003_expiry_and_resolutions.sql"),
        include_str!("../migrations/sqlite/0004_outbox.sql"),
    ] {
        conn.execute_batch(migration).unwrap();
    }
    conn.execute_batch(
        "PRAGMA user_version = 4;
         INSERT INTO runs (run_id, agent_id, thread_id, status, version, created_at, updated_at, pending, \
         step_results, message_count, steps, usage, error, metadata, schema_version, expires_at) \
         VALUES ('overdue', 'a', NULL, 'suspended', 2, 0, 0, '[]', '[]', 0, 1, \
         '{\"inputTokens\":0,\"outputTokens\":0,\"totalTokens\":0}', NULL, 'null', 1, 1000), \
         ('old', 'a', NULL, 'completed', 5, 0, 0, '[]', '[]', 0, 2, \
         '{\"inputTokens\":0,\"outputTokens\":0,\"totalTokens\":0}', NULL, 'null', 1, NULL);",
    )
    .unwrap();
    drop(conn);
    assert!(run_indexes(&path).contains(&"runs_by_status_expiry".to_owned()));

    let store = askloop_store::open(path.to_str().unwrap()).await.unwrap();
    assert_eq!(
        run_indexes(&path),
        [
            "runs_by_agent",
            "runs_by_created",
            "runs_by_status",
            "runs_by_thread",
            "runs_finished_by_updated",
            "runs_suspended_by_expiry"
        ]
    );
    let overdue = store.expiring(Utc::now(), None, 10).await.unwrap();
    assert_eq!(
        overdue.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(),
        ["overdue"]
    );
    assert_eq!(store.prune(Utc::now()).await.unwrap(), 1, "the finished run is pruned");
    assert_eq!(store.get("overdue").await.unwrap().unwrap().version, 2);
}

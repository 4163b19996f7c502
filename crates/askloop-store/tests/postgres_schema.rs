//! Where askloop's tables live in a PostgreSQL database shared with another
//! application, and bounded lock waits.
//! Each test makes a database of its own (its `public` schema matters).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use askloop::{Message, RunStatus, RunStore, StoreError};
use askloop_store::PostgresStore;
use askloop_store::conformance::{new_run, postgres_test_url};
use chrono::Utc;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};

/// A new, empty database on the test server, dropped with the guard.
struct TestDatabase {
    admin: PgPool,
    name: String,
    url: String,
}

impl TestDatabase {
    async fn create(test: &str) -> Option<TestDatabase> {
        let base = postgres_test_url(test)?;
        let admin = PgPoolOptions::new().max_connections(1).connect(&base).await.unwrap();
        let name = askloop_store::conformance::unique_schema_name().replace("askloop_test", "askloop_db");
        admin
            .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .await
            .unwrap();
        let mut url = url::Url::parse(&base).unwrap();
        url.set_path(&name);
        Some(TestDatabase {
            admin,
            name,
            url: url.to_string(),
        })
    }

    async fn pool(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(2)
            .connect(&self.url)
            .await
            .unwrap()
    }

    async fn drop(self) {
        self.admin
            .execute(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                self.name
            )))
            .await
            .unwrap();
    }
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_host_applications_migrations_and_runs_table_are_left_intact() {
    let Some(db) = TestDatabase::create("a_host_applications_migrations_and_runs_table_are_left_intact").await else {
        return;
    };
    let host = db.pool().await;
    // Another sqlx application: its own migration 1 and its own `runs`.
    host.execute(
        "CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
         installed_on TIMESTAMPTZ NOT NULL DEFAULT now(), success BOOLEAN NOT NULL, checksum BYTEA NOT NULL, \
         execution_time BIGINT NOT NULL); \
         INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (1, 'host tables', true, '\\x0102', 5); \
         CREATE TABLE runs (id SERIAL PRIMARY KEY, pipeline TEXT NOT NULL); \
         INSERT INTO runs (pipeline) VALUES ('nightly build');",
    )
    .await
    .unwrap();

    let store = PostgresStore::connect(&db.url).await.unwrap();
    assert_eq!(store.schema(), "askloop");
    store
        .create(&new_run("r1", "agent", Utc::now(), 1), &[Message::user("hi")])
        .await
        .unwrap();
    assert_eq!(store.get("r1").await.unwrap().unwrap().agent_id, "agent");
    // Opening again finds its own record and applies nothing twice.
    let again = PostgresStore::connect(&db.url).await.unwrap();
    assert_eq!(again.messages("r1").await.unwrap(), [Message::user("hi")]);

    assert_eq!(count(&host, "SELECT COUNT(*) FROM public._sqlx_migrations").await, 1);
    let (description, checksum): (String, Vec<u8>) =
        sqlx::query_as("SELECT description, checksum FROM public._sqlx_migrations WHERE version = 1")
            .fetch_one(&host)
            .await
            .unwrap();
    assert_eq!((description.as_str(), checksum), ("host tables", vec![1, 2]));
    let pipelines: Vec<String> = sqlx::query_scalar("SELECT pipeline FROM public.runs")
        .fetch_all(&host)
        .await
        .unwrap();
    assert_eq!(pipelines, ["nightly build"]);
    // askloop's own migrations, each recorded once.
    let migrations = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/postgres"))
        .unwrap()
        .count() as i64;
    assert_eq!(
        count(&host, "SELECT COUNT(*) FROM askloop._sqlx_migrations").await,
        migrations
    );
    assert_eq!(count(&host, "SELECT COUNT(*) FROM askloop.runs").await, 1);
    store.close().await;
    again.close().await;
    host.close().await;
    db.drop().await;
}

#[tokio::test]
async fn a_run_row_locked_by_another_session_fails_at_the_lock_timeout_with_a_clear_message() {
    let Some(db) = TestDatabase::create("a_run_row_locked_by_another_session").await else {
        return;
    };
    let url = format!("{}?lock_timeout=200ms", db.url);
    let store = PostgresStore::connect(&url).await.unwrap();
    store.create(&new_run("r1", "agent", Utc::now(), 0), &[]).await.unwrap();
    // Another session takes the whole table and keeps its transaction open.
    let other = db.pool().await;
    let mut locker = other.begin().await.unwrap();
    locker
        .execute("LOCK TABLE askloop.runs IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();

    let read = tokio::time::timeout(Duration::from_secs(60), store.get("r1"))
        .await
        .expect("the read never ended: no lock timeout");
    match read {
        Err(err @ StoreError::Backend(_)) => {
            let message = err.to_string();
            assert!(message.contains("reading run r1"), "{message}");
            assert!(message.contains("lock_timeout"), "{message}");
            assert!(!message.contains("error returned from database"), "{message}");
        }
        other => panic!("expected a lock timeout, got {other:?}"),
    }
    locker.rollback().await.unwrap();
    assert!(store.get("r1").await.unwrap().is_some(), "works again once released");
    store.close().await;
    other.close().await;
    db.drop().await;
}

/// Per agent, the runs waiting and their calls, counted from the rows
/// themselves, as the tally must say.
async fn waiting_counted_from_the_rows(pool: &PgPool) -> Vec<askloop::AgentWaiting> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT agent_id, COUNT(*), SUM(CASE WHEN jsonb_typeof(pending) = 'array' \
         THEN jsonb_array_length(pending) ELSE 0 END)::BIGINT \
         FROM askloop.runs WHERE status = 'suspended' GROUP BY agent_id ORDER BY agent_id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(agent_id, runs, calls)| askloop::AgentWaiting {
            agent_id,
            runs: runs as u64,
            calls: calls as u64,
        })
        .collect()
}

/// The store's counts of waiting runs (read from the tally) against the
/// rows, for every agent and for all.
async fn assert_tally_agrees(store: &PostgresStore, pool: &PgPool, after: &str) {
    let expected = waiting_counted_from_the_rows(pool).await;
    assert_eq!(store.waiting().await.unwrap(), expected, "after {after}");
    let suspended = askloop::RunQuery {
        status: Some(RunStatus::Suspended),
        ..Default::default()
    };
    let all: u64 = expected.iter().map(|w| w.runs).sum();
    assert_eq!(store.count(&suspended).await.unwrap(), all, "after {after}");
    for agent in ["agent-a", "agent-b", "agent-c"] {
        let of_agent = expected.iter().find(|w| w.agent_id == agent).map_or(0, |w| w.runs);
        let query = askloop::RunQuery {
            agent_id: Some(agent.to_owned()),
            ..suspended.clone()
        };
        assert_eq!(store.count(&query).await.unwrap(), of_agent, "{agent} after {after}");
    }
}

/// A run created waiting on `calls` questions.
async fn create_waiting(store: &PostgresStore, run_id: &str, agent: &str, calls: usize) {
    let pending = (0..calls)
        .map(|i| askloop_store::conformance::pending_question(&format!("{run_id}-call-{i}"), "Which one?"))
        .collect();
    let run = new_run(run_id, agent, Utc::now(), 1).with_calls(RunStatus::Suspended, pending);
    store.create(&run, &[Message::user("hello")]).await.unwrap();
}

#[tokio::test]
async fn the_count_of_waiting_runs_follows_every_change_of_a_run_whoever_makes_it() {
    let Some(db) =
        TestDatabase::create("the_count_of_waiting_runs_follows_every_change_of_a_run_whoever_makes_it").await
    else {
        return;
    };
    let store = PostgresStore::connect(&db.url).await.unwrap();
    let pool = db.pool().await;
    assert_tally_agrees(&store, &pool, "nothing").await;

    for i in 0..40 {
        let agent = ["agent-a", "agent-b"][i % 2];
        create_waiting(&store, &format!("run-{i}"), agent, 1 + i % 3).await;
    }
    store
        .create(&new_run("running", "agent-c", Utc::now(), 1), &[Message::user("hi")])
        .await
        .unwrap();
    assert_tally_agrees(&store, &pool, "forty runs created waiting and one running").await;

    // Answered: claimed by the store, then finished.
    for i in 0..10 {
        let id = format!("run-{i}");
        let run = store.get(&id).await.unwrap().unwrap();
        store
            .claim(&id, run.version, &askloop_store::conformance::test_lease())
            .await
            .unwrap();
    }
    assert_tally_agrees(&store, &pool, "ten answered").await;

    // Rows changed around the store, as another program or an older build
    // would: one of two questions answered while the run still waits, a
    // run's pending calls no longer a list, a run cancelled, the running
    // run suspended, a waiting run deleted, a run moved to another agent.
    pool.execute(
        "UPDATE askloop.runs SET pending = pending - 0 WHERE run_id = 'run-11'; \
         UPDATE askloop.runs SET pending = '{\"not\": \"a list\"}' WHERE run_id = 'run-12'; \
         UPDATE askloop.runs SET status = 'cancelled' WHERE run_id = 'run-13'; \
         UPDATE askloop.runs SET status = 'suspended' WHERE run_id = 'running'; \
         DELETE FROM askloop.runs WHERE run_id = 'run-14'; \
         UPDATE askloop.runs SET agent_id = 'agent-c' WHERE run_id = 'run-15'; \
         UPDATE askloop.runs SET lease_until = now() WHERE run_id = 'run-16';",
    )
    .await
    .unwrap();
    assert_tally_agrees(&store, &pool, "changes made around the store").await;

    // Everything answered: nothing waits, and no agent is listed.
    pool.execute("UPDATE askloop.runs SET status = 'completed'")
        .await
        .unwrap();
    assert_tally_agrees(&store, &pool, "every run completed").await;
    assert!(store.waiting().await.unwrap().is_empty());

    // An operator empties the table, which fires no row trigger.
    create_waiting(&store, "after-all", "agent-a", 2).await;
    pool.execute("TRUNCATE askloop.runs CASCADE").await.unwrap();
    assert_tally_agrees(&store, &pool, "TRUNCATE").await;
    create_waiting(&store, "after-truncate", "agent-b", 1).await;
    assert_tally_agrees(&store, &pool, "a run waiting after the TRUNCATE").await;

    store.close().await;
    pool.close().await;
    db.drop().await;
}

#[tokio::test]
async fn runs_already_waiting_when_the_tally_is_made_are_counted() {
    let Some(db) = TestDatabase::create("runs_already_waiting_when_the_tally_is_made_are_counted").await else {
        return;
    };
    let store = PostgresStore::connect(&db.url).await.unwrap();
    for i in 0..25 {
        let agent = ["agent-a", "agent-b", "agent-c"][i % 3];
        create_waiting(&store, &format!("run-{i}"), agent, 1 + i % 2).await;
    }
    store.close().await;
    // The database as a build before the tally left it: the migration that
    // makes it undone, with the runs still waiting.
    let pool = db.pool().await;
    pool.execute(
        "DROP TRIGGER runs_waiting_tally_rows ON askloop.runs; \
         DROP TRIGGER runs_waiting_tally_changes ON askloop.runs; \
         DROP TRIGGER runs_waiting_tally_truncate ON askloop.runs; \
         DROP FUNCTION askloop.waiting_tally_follow(); \
         DROP FUNCTION askloop.waiting_tally_clear(); \
         DROP FUNCTION askloop.waiting_tally_calls(jsonb); \
         DROP TABLE askloop.waiting_tally; \
         DELETE FROM askloop._sqlx_migrations WHERE version = 11;",
    )
    .await
    .unwrap();

    let store = PostgresStore::connect(&db.url).await.unwrap();
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) FROM askloop._sqlx_migrations WHERE version = 11"
        )
        .await,
        1,
        "the migration ran again"
    );
    assert_tally_agrees(&store, &pool, "the migration").await;
    assert_eq!(store.waiting().await.unwrap().iter().map(|w| w.runs).sum::<u64>(), 25);

    store.close().await;
    pool.close().await;
    db.drop().await;
}

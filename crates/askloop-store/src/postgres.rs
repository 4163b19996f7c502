//! [`PostgresStore`]: runs in PostgreSQL, shared by any number of askloop
//! processes on any number of machines.
//!
//! Claims and step writes are compare-and-sets on the run's version. Under
//! PostgreSQL's default READ COMMITTED isolation a second `UPDATE ... WHERE
//! version = $n` of the same row waits for the first to commit and then
//! re-checks its condition against the new row, so it matches nothing and
//! the writer gets [`StoreError::Conflict`]: exactly one wins, whatever the
//! number of servers.

use std::time::Duration;

use askloop::{Message, RUN_SCHEMA_VERSION, RunQuery, RunRecord, RunStore, RunUpdate, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, Row};

use crate::row::{FINISHED, JsonColumns, RowState, StoredRun, explain_missed_write, message_bodies, message_from_row};

/// The embedded migrations. A database migrated further by a newer askloop
/// still opens: migrations only add, and each row's layout version decides
/// whether this build may read it (see `row.rs`).
fn migrator() -> sqlx::migrate::Migrator {
    let mut migrator = sqlx::migrate!("./migrations/postgres");
    migrator.set_ignore_missing(true);
    migrator
}

/// How [`PostgresStore::connect_with`] connects.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    schema: Option<String>,
    max_connections: u32,
    acquire_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            schema: None,
            max_connections: 10,
            acquire_timeout: Duration::from_secs(30),
        }
    }
}

impl PostgresOptions {
    /// Keeps askloop's tables in this schema (created if missing) instead of
    /// the connection's default `search_path`. A schema name is lower-case
    /// ASCII letters, digits and `_`, not starting with a digit.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The most connections the pool opens.
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// How long a query waits for a free connection.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }
}

/// How long opening a store waits for the server's first answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs stored in PostgreSQL.
///
/// Cloning is cheap and shares the pool.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pub(crate) pool: PgPool,
    schema: Option<String>,
}

impl PostgresStore {
    /// Connects to `url` (`postgres://...` or `postgresql://...`) and brings
    /// the tables up to date.
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects to `url` with `options`; with a schema, every connection of
    /// the pool uses it (its `search_path`), so several stores can share one
    /// database apart (tests in parallel, tenants).
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<PostgresStore, StoreError> {
        let mut connect: PgConnectOptions = url.parse().map_err(|e| {
            StoreError::InvalidLocation(format!(
                "cannot read the PostgreSQL URL {}: {e}; expected postgres://USER@HOST:PORT/DATABASE",
                redact(url)
            ))
        })?;
        // The URL was fine; the server was not there or refused us.
        let cannot_connect = |e: sqlx::Error| {
            StoreError::backend(ConnectError {
                message: format!("cannot connect to PostgreSQL at {}", redact(url)),
                source: e,
            })
        };
        // One direct connection first, so a server that is not there fails
        // at once: the pool would retry a refused connection for its whole
        // acquire timeout.
        match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&connect)).await {
            Ok(Ok(probe)) => {
                let _ = probe.close().await;
            }
            Ok(Err(err)) => return Err(cannot_connect(err)),
            Err(_) => {
                return Err(StoreError::backend(ConnectError {
                    message: format!(
                        "cannot connect to PostgreSQL at {}: no answer within {}s",
                        redact(url),
                        CONNECT_TIMEOUT.as_secs()
                    ),
                    source: sqlx::Error::PoolTimedOut,
                }));
            }
        }
        if let Some(schema) = &options.schema {
            check_schema_name(schema)?;
            // Created over a plain connection first: the pool's connections
            // start with the schema on their search path.
            let admin = PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(options.acquire_timeout)
                .connect_with(connect.clone())
                .await
                .map_err(cannot_connect)?;
            let created = sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"")))
                .execute(&admin)
                .await;
            admin.close().await;
            if let Err(err) = created {
                // Another process creating the same schema at the same moment
                // loses on the catalog's unique index; the schema is there.
                if !err.as_database_error().is_some_and(|e| e.is_unique_violation()) {
                    return Err(StoreError::backend(err));
                }
            }
            connect = connect.options([("search_path", schema.as_str())]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await
            .map_err(cannot_connect)?;
        // sqlx holds an advisory lock while migrating, so servers starting
        // together apply each migration once.
        migrator().run(&pool).await.map_err(StoreError::backend)?;
        Ok(PostgresStore {
            pool,
            schema: options.schema,
        })
    }

    /// The schema given at connect time, if any.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    async fn row_state(&self, run_id: &str) -> Result<Option<RowState>, StoreError> {
        let row = sqlx::query("SELECT status, version, schema_version FROM runs WHERE run_id = $1")
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::backend)?;
        row.map(|row| RowState::from_row(&row)).transpose()
    }
}

/// A failure to reach the server, saying which server.
#[derive(Debug, thiserror::Error)]
#[error("{message}: {source}")]
struct ConnectError {
    message: String,
    source: sqlx::Error,
}

/// Refuses schema names that would need quoting rules to be safe.
fn check_schema_name(schema: &str) -> Result<(), StoreError> {
    let mut chars = schema.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && schema.len() <= 63 {
        Ok(())
    } else {
        Err(StoreError::InvalidLocation(format!(
            "{schema:?} is not a usable PostgreSQL schema name: use at most 63 lower-case ASCII letters, digits \
             and _, not starting with a digit"
        )))
    }
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let credentials = &url[scheme_end + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// The columns of `runs` (JSON read back as text), in the order
/// [`stored_run`] reads them.
macro_rules! run_columns {
    () => {
        "run_id, agent_id, thread_id, status, version, created_at, updated_at, pending::text AS pending, \
         step_results::text AS step_results, message_count, steps, usage::text AS usage, error, \
         metadata::text AS metadata, schema_version"
    };
}

fn stored_run(row: &PgRow) -> Result<StoredRun, StoreError> {
    let run_id: String = row.try_get("run_id").map_err(StoreError::backend)?;
    let column = |e: sqlx::Error| StoreError::Corrupt {
        run_id: run_id.clone(),
        detail: e.to_string(),
    };
    Ok(StoredRun {
        agent_id: row.try_get("agent_id").map_err(column)?,
        thread_id: row.try_get("thread_id").map_err(column)?,
        status: row.try_get("status").map_err(column)?,
        version: row.try_get("version").map_err(column)?,
        created_at: row.try_get("created_at").map_err(column)?,
        updated_at: row.try_get("updated_at").map_err(column)?,
        pending: row.try_get("pending").map_err(column)?,
        step_results: row.try_get("step_results").map_err(column)?,
        message_count: row.try_get("message_count").map_err(column)?,
        steps: row.try_get("steps").map_err(column)?,
        usage: row.try_get("usage").map_err(column)?,
        error: row.try_get("error").map_err(column)?,
        metadata: row.try_get("metadata").map_err(column)?,
        schema_version: row.try_get("schema_version").map_err(column)?,
        run_id: run_id.clone(),
    })
}

/// Appends messages in one statement, whatever their number.
async fn insert_messages(
    tx: &mut sqlx::PgConnection,
    run_id: &str,
    first_seq: i64,
    bodies: Vec<String>,
) -> Result<(), StoreError> {
    if bodies.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO messages (run_id, seq, body) \
         SELECT $1, $2 + m.ord - 1, m.body::jsonb FROM UNNEST($3::text[]) WITH ORDINALITY AS m(body, ord)",
    )
    .bind(run_id)
    .bind(first_seq)
    .bind(bodies)
    .execute(&mut *tx)
    .await
    .map_err(StoreError::backend)?;
    Ok(())
}

#[async_trait]
impl RunStore for PostgresStore {
    async fn create(&self, run: &RunRecord, messages: &[Message]) -> Result<(), StoreError> {
        let json = JsonColumns::of_record(run)?;
        let metadata = crate::row::to_json(&run.run_id, "metadata", &run.metadata)?;
        let bodies = message_bodies(&run.run_id, messages)?;
        let mut tx = self.pool.begin().await.map_err(StoreError::backend)?;
        let inserted = sqlx::query(concat!(
            "INSERT INTO runs (",
            "run_id, agent_id, thread_id, status, version, created_at, updated_at, pending, step_results, \
             message_count, steps, usage, error, metadata, schema_version",
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9::jsonb, $10, $11, $12::jsonb, $13, $14::jsonb, $15)"
        ))
        .bind(&run.run_id)
        .bind(&run.agent_id)
        .bind(&run.thread_id)
        .bind(run.status.as_str())
        .bind(run.version)
        .bind(run.created_at)
        .bind(run.updated_at)
        .bind(&json.pending)
        .bind(&json.step_results)
        .bind(bodies.len() as i64)
        .bind(i64::from(run.steps))
        .bind(&json.usage)
        .bind(&run.error)
        .bind(&metadata)
        .bind(RUN_SCHEMA_VERSION)
        .execute(&mut *tx)
        .await;
        if let Err(err) = inserted {
            if err.as_database_error().is_some_and(|e| e.is_unique_violation()) {
                return Err(StoreError::AlreadyExists {
                    run_id: run.run_id.clone(),
                });
            }
            return Err(StoreError::backend(err));
        }
        insert_messages(&mut tx, &run.run_id, 0, bodies).await?;
        tx.commit().await.map_err(StoreError::backend)
    }

    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let row = sqlx::query(concat!("SELECT ", run_columns!(), " FROM runs WHERE run_id = $1"))
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::backend)?;
        row.map(|row| stored_run(&row)?.into_record()).transpose()
    }

    async fn messages(&self, run_id: &str) -> Result<Vec<Message>, StoreError> {
        let rows = sqlx::query("SELECT seq, body::text AS body FROM messages WHERE run_id = $1 ORDER BY seq")
            .bind(run_id)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::backend)?;
        rows.iter().map(|row| message_from_row(run_id, row)).collect()
    }

    async fn claim(&self, run_id: &str, expected_version: i64) -> Result<i64, StoreError> {
        let claimed = sqlx::query(
            "UPDATE runs SET status = 'running', version = version + 1, updated_at = $1 \
             WHERE run_id = $2 AND status = 'suspended' AND version = $3 AND schema_version <= $4 \
             RETURNING version",
        )
        .bind(Utc::now())
        .bind(run_id)
        .bind(expected_version)
        .bind(RUN_SCHEMA_VERSION)
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::backend)?;
        match claimed {
            Some(row) => row.try_get("version").map_err(StoreError::backend),
            None => Err(explain_missed_write(
                run_id,
                expected_version,
                self.row_state(run_id).await?,
            )),
        }
    }

    async fn update(&self, update: RunUpdate<'_>) -> Result<i64, StoreError> {
        let json = JsonColumns::of_update(&update)?;
        let bodies = message_bodies(update.run_id, update.append)?;
        let appended = bodies.len() as i64;
        let mut tx = self.pool.begin().await.map_err(StoreError::backend)?;
        let written = sqlx::query(
            "UPDATE runs SET status = $1, version = version + 1, updated_at = $2, pending = $3::jsonb, \
             step_results = $4::jsonb, message_count = message_count + $5, steps = $6, usage = $7::jsonb, \
             error = $8, schema_version = $9 \
             WHERE run_id = $10 AND version = $11 AND schema_version <= $9 \
             RETURNING version, message_count",
        )
        .bind(update.status.as_str())
        .bind(Utc::now())
        .bind(&json.pending)
        .bind(&json.step_results)
        .bind(appended)
        .bind(i64::from(update.steps))
        .bind(&json.usage)
        .bind(update.error)
        .bind(RUN_SCHEMA_VERSION)
        .bind(update.run_id)
        .bind(update.expected_version)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::backend)?;
        let Some(row) = written else {
            tx.rollback().await.map_err(StoreError::backend)?;
            return Err(explain_missed_write(
                update.run_id,
                update.expected_version,
                self.row_state(update.run_id).await?,
            ));
        };
        let version: i64 = row.try_get("version").map_err(StoreError::backend)?;
        let message_count: i64 = row.try_get("message_count").map_err(StoreError::backend)?;
        insert_messages(&mut tx, update.run_id, message_count - appended, bodies).await?;
        tx.commit().await.map_err(StoreError::backend)?;
        Ok(version)
    }

    async fn list(&self, query: &RunQuery) -> Result<Vec<RunRecord>, StoreError> {
        // A NULL limit is no limit. The id order is bytewise (the column is
        // COLLATE "C"), as in the other stores.
        let sql = match (query.status.is_some(), query.agent_id.is_some()) {
            (false, false) => concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs ORDER BY created_at DESC, run_id DESC LIMIT $1 OFFSET $2"
            ),
            (true, false) => concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs WHERE status = $3 ORDER BY created_at DESC, run_id DESC LIMIT $1 OFFSET $2"
            ),
            (false, true) => concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs WHERE agent_id = $3 ORDER BY created_at DESC, run_id DESC LIMIT $1 OFFSET $2"
            ),
            (true, true) => concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs WHERE status = $3 AND agent_id = $4 \
                 ORDER BY created_at DESC, run_id DESC LIMIT $1 OFFSET $2"
            ),
        };
        let mut q = sqlx::query(sql)
            .bind(query.limit.map(i64::from))
            .bind(i64::from(query.offset));
        if let Some(status) = query.status {
            q = q.bind(status.as_str());
        }
        if let Some(agent_id) = &query.agent_id {
            q = q.bind(agent_id);
        }
        let rows = q.fetch_all(&self.pool).await.map_err(StoreError::backend)?;
        crate::readable_runs(rows.iter().map(|row| stored_run(row)?.into_record()))
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        // Messages go with their run (ON DELETE CASCADE), in the same
        // statement.
        let done = sqlx::query("DELETE FROM runs WHERE status IN ($1, $2, $3) AND updated_at < $4")
            .bind(FINISHED[0].as_str())
            .bind(FINISHED[1].as_str())
            .bind(FINISHED[2].as_str())
            .bind(before)
            .execute(&self.pool)
            .await
            .map_err(StoreError::backend)?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_left_out_of_messages() {
        assert_eq!(redact("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
    }

    #[test]
    fn only_plain_schema_names_are_accepted() {
        assert!(check_schema_name("askloop_test_1").is_ok());
        for bad in ["", "1abc", "a-b", "A", "x\"; DROP TABLE runs; --", &"a".repeat(64)] {
            assert!(check_schema_name(bad).is_err(), "{bad:?}");
        }
    }
}

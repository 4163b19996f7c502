//! [`SqliteStore`]: runs in one SQLite file, the embedded default.
//!
//! # Concurrency
//!
//! The file is in WAL mode, so readers never block the writer nor the writer
//! readers. Each store holds two pools: one connection that does every write
//! of this process, and a few connections for reads. Writers of one process
//! therefore queue (asynchronously) for the one write connection instead of
//! spinning in SQLite's busy handler, and at most one writer per process
//! competes for the file lock; `busy_timeout` makes that competitor wait
//! rather than fail. Every multi-statement write starts with `BEGIN
//! IMMEDIATE`, which takes the write lock up front: a transaction that read
//! first and then tried to write could fail at once with "database is
//! locked" (`SQLITE_BUSY_SNAPSHOT`), which no busy timeout retries.
//!
//! # Durability
//!
//! `synchronous = FULL` by default: a commit is on disk (the WAL is fsynced)
//! before `update` returns. askloop's promise is that a client that saw
//! `tool-call-suspended` can always resume, and a question may wait for
//! days; with `NORMAL` a commit survives the process being killed (SIGKILL,
//! a panic, an OOM kill) but the last commits can be lost to a power cut or
//! an OS crash. One fsync per step is small next to the model call of the
//! same step (see `docs/benchmarks.md`). Hosts that would rather trade the
//! power-loss guarantee for throughput choose [`SqliteSync::Normal`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use askloop::{Message, RUN_SCHEMA_VERSION, RunQuery, RunRecord, RunStore, RunUpdate, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};

use crate::row::{FINISHED, JsonColumns, RowState, StoredRun, explain_missed_write, message_bodies, parse_message};

/// The embedded migrations. A database migrated further by a newer askloop
/// still opens: migrations only add, and each row's layout version decides
/// whether this build may read it (see `row.rs`).
fn migrator() -> sqlx::migrate::Migrator {
    let mut migrator = sqlx::migrate!("./migrations/sqlite");
    migrator.set_ignore_missing(true);
    migrator
}

/// How long a write waits for another process's write lock by default.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How a commit reaches the disk (SQLite's `synchronous` setting, with the
/// file in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SqliteSync {
    /// Every commit is fsynced: it survives a power cut. The default.
    #[default]
    Full,
    /// Commits survive the process crashing or being killed, but the last
    /// ones can be lost to a power cut or an OS crash (the file stays
    /// consistent). Faster: no fsync per commit.
    Normal,
}

impl SqliteSync {
    fn pragma(self) -> SqliteSynchronous {
        match self {
            SqliteSync::Full => SqliteSynchronous::Full,
            SqliteSync::Normal => SqliteSynchronous::Normal,
        }
    }
}

/// How [`SqliteStore::open_with`] opens a file.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    busy_timeout: Duration,
    sync: SqliteSync,
    readers: u32,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            sync: SqliteSync::default(),
            readers: 4,
        }
    }
}

impl SqliteOptions {
    /// How long a write waits for another process's lock before failing.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// How commits reach the disk.
    pub fn sync(mut self, sync: SqliteSync) -> Self {
        self.sync = sync;
        self
    }

    /// How many connections serve reads (at least one).
    pub fn readers(mut self, readers: u32) -> Self {
        self.readers = readers.max(1);
        self
    }
}

/// Runs stored in one SQLite file (WAL mode).
///
/// Cloning is cheap and shares the connections. Several processes may open
/// the same file; exactly one of concurrent claims of a run wins.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use askloop::{RunQuery, RunStore};
/// let dir = tempfile::tempdir().unwrap();
/// let store = askloop_store::SqliteStore::open(dir.path().join("runs.db")).await.unwrap();
/// assert!(store.list(&RunQuery::default()).await.unwrap().is_empty());
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pub(crate) writer: SqlitePool,
    pub(crate) readers: SqlitePool,
    path: PathBuf,
}

/// How many times opening retries when another process is creating the same
/// file at the same moment.
const OPEN_ATTEMPTS: u32 = 8;

impl SqliteStore {
    /// Opens (creating it and its directory if needed) the database file at
    /// `path`, with the default options, and brings its tables up to date.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Opens the file at `path` with `options`.
    pub async fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                StoreError::InvalidLocation(format!(
                    "cannot create the directory {} for the SQLite store {}: {e}",
                    parent.display(),
                    path.display()
                ))
            })?;
        }
        let connect = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(options.sync.pragma())
            .busy_timeout(options.busy_timeout)
            .foreign_keys(true);

        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::connect(&path, &connect, &options).await {
                Ok(store) => return Ok(store),
                // Two processes creating the same new file race on switching
                // it to WAL and on the first migration (sqlx takes no lock for
                // SQLite migrations). The loser sees "locked" or "already
                // exists"; once the winner is done, a retry finds the tables.
                Err(OpenError::Racy(err)) if attempt < OPEN_ATTEMPTS => {
                    tracing::debug!(path = %path.display(), attempt, error = %err, "opening the SQLite store again");
                    tokio::time::sleep(Duration::from_millis(25 * u64::from(attempt))).await;
                }
                Err(OpenError::Racy(err) | OpenError::Fatal(err)) => return Err(err),
            }
        }
    }

    async fn connect(path: &Path, connect: &SqliteConnectOptions, options: &SqliteOptions) -> Result<Self, OpenError> {
        let cannot_open = |e: sqlx::Error| {
            let racy = is_database_error(&e);
            let err = StoreError::InvalidLocation(format!("cannot open the SQLite store {}: {e}", path.display()));
            if racy {
                OpenError::Racy(err)
            } else {
                OpenError::Fatal(err)
            }
        };
        // No ping before each acquire (`test_before_acquire`, on by default):
        // a SQLite connection is a file opened in this process, not a socket,
        // so it cannot go stale while idle, and the ping is one more hand-off
        // to the connection's thread per store call.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .test_before_acquire(false)
            .connect_with(connect.clone())
            .await
            .map_err(cannot_open)?;
        if let Err(err) = migrator().run(&writer).await {
            let racy = matches!(
                &err,
                sqlx::migrate::MigrateError::Execute(e) | sqlx::migrate::MigrateError::ExecuteMigration(e, _)
                    if is_database_error(e)
            );
            writer.close().await;
            let err = StoreError::Backend(Box::new(err));
            return Err(if racy {
                OpenError::Racy(err)
            } else {
                OpenError::Fatal(err)
            });
        }
        let readers = SqlitePoolOptions::new()
            .max_connections(options.readers)
            .test_before_acquire(false)
            .connect_with(connect.clone().create_if_missing(false))
            .await
            .map_err(cannot_open)?;
        Ok(SqliteStore {
            writer,
            readers,
            path: path.to_path_buf(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the connections (waiting for writes in flight).
    pub async fn close(&self) {
        self.writer.close().await;
        self.readers.close().await;
    }

    async fn row_state(&self, run_id: &str) -> Result<Option<RowState>, StoreError> {
        let row = sqlx::query("SELECT status, version, schema_version FROM runs WHERE run_id = ?")
            .bind(run_id)
            .fetch_optional(&self.readers)
            .await
            .map_err(StoreError::backend)?;
        row.map(|row| {
            Ok(RowState {
                status: row.try_get("status").map_err(StoreError::backend)?,
                version: row.try_get("version").map_err(StoreError::backend)?,
                schema_version: row.try_get("schema_version").map_err(StoreError::backend)?,
            })
        })
        .transpose()
    }
}

enum OpenError {
    /// Possibly another process opening the same file; worth a retry.
    Racy(StoreError),
    Fatal(StoreError),
}

fn is_database_error(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(_))
}

/// The columns of `runs`, in the order [`stored_run`] reads them.
macro_rules! run_columns {
    () => {
        "run_id, agent_id, thread_id, status, version, created_at, updated_at, pending, step_results, \
         message_count, steps, usage, error, metadata, schema_version"
    };
}

fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

/// Reads a `runs` row. A column of the wrong type is a corrupt row.
fn stored_run(row: &SqliteRow) -> Result<StoredRun, StoreError> {
    let run_id: String = row.try_get("run_id").map_err(StoreError::backend)?;
    let corrupt = |detail: String| StoreError::Corrupt {
        run_id: run_id.clone(),
        detail,
    };
    let column = |e: sqlx::Error| corrupt(e.to_string());
    let time = |name: &str| -> Result<DateTime<Utc>, StoreError> {
        let value: i64 = row.try_get(name).map_err(column)?;
        DateTime::from_timestamp_micros(value).ok_or_else(|| corrupt(format!("{name}: {value} is not a time")))
    };
    Ok(StoredRun {
        agent_id: row.try_get("agent_id").map_err(column)?,
        thread_id: row.try_get("thread_id").map_err(column)?,
        status: row.try_get("status").map_err(column)?,
        version: row.try_get("version").map_err(column)?,
        created_at: time("created_at")?,
        updated_at: time("updated_at")?,
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

/// How many messages one `INSERT` writes at most: 3 variables a row keeps a
/// statement at 768 variables, under SQLite's limit even in builds older than
/// 3.32 (999).
const MESSAGES_PER_INSERT: usize = 256;

/// `INSERT INTO messages ... VALUES (?, ?, ?), (?, ?, ?), ...` for `rows` rows.
fn insert_messages_sql(rows: usize) -> String {
    const HEAD: &str = "INSERT INTO messages (run_id, seq, body) VALUES (?, ?, ?)";
    const ROW: &str = ", (?, ?, ?)";
    let mut sql = String::with_capacity(HEAD.len() + ROW.len() * rows.saturating_sub(1));
    sql.push_str(HEAD);
    for _ in 1..rows {
        sql.push_str(ROW);
    }
    sql
}

/// Appends `bodies` numbered from `first_seq`, in one statement per
/// [`MESSAGES_PER_INSERT`] messages (each statement is one hand-off to the
/// connection's thread).
async fn insert_messages(
    conn: &mut sqlx::SqliteConnection,
    run_id: &str,
    first_seq: i64,
    bodies: &[String],
) -> Result<(), StoreError> {
    let mut seq = first_seq;
    for chunk in bodies.chunks(MESSAGES_PER_INSERT) {
        let mut insert = sqlx::query(sqlx::AssertSqlSafe(insert_messages_sql(chunk.len())));
        for body in chunk {
            insert = insert.bind(run_id).bind(seq).bind(body);
            seq += 1;
        }
        insert.execute(&mut *conn).await.map_err(StoreError::backend)?;
    }
    Ok(())
}

#[async_trait]
impl RunStore for SqliteStore {
    async fn create(&self, run: &RunRecord, messages: &[Message]) -> Result<(), StoreError> {
        let json = JsonColumns::of_record(run)?;
        let metadata = crate::row::to_json(&run.run_id, "metadata", &run.metadata)?;
        let bodies = message_bodies(&run.run_id, messages)?;
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(StoreError::backend)?;
        let inserted = sqlx::query(concat!(
            "INSERT INTO runs (",
            run_columns!(),
            ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ))
        .bind(&run.run_id)
        .bind(&run.agent_id)
        .bind(&run.thread_id)
        .bind(run.status.as_str())
        .bind(run.version)
        .bind(micros(run.created_at))
        .bind(micros(run.updated_at))
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
        insert_messages(&mut tx, &run.run_id, 0, &bodies).await?;
        tx.commit().await.map_err(StoreError::backend)
    }

    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let row = sqlx::query(concat!("SELECT ", run_columns!(), " FROM runs WHERE run_id = ?"))
            .bind(run_id)
            .fetch_optional(&self.readers)
            .await
            .map_err(StoreError::backend)?;
        row.map(|row| stored_run(&row)?.into_record()).transpose()
    }

    async fn messages(&self, run_id: &str) -> Result<Vec<Message>, StoreError> {
        let rows = sqlx::query("SELECT seq, body FROM messages WHERE run_id = ? ORDER BY seq")
            .bind(run_id)
            .fetch_all(&self.readers)
            .await
            .map_err(StoreError::backend)?;
        rows.iter()
            .map(|row| {
                let seq: i64 = row.try_get("seq").map_err(StoreError::backend)?;
                let body: String = row.try_get("body").map_err(|e| StoreError::Corrupt {
                    run_id: run_id.to_owned(),
                    detail: format!("message {seq}: {e}"),
                })?;
                parse_message(run_id, seq, &body)
            })
            .collect()
    }

    async fn claim(&self, run_id: &str, expected_version: i64) -> Result<i64, StoreError> {
        // One statement: the status and version test and the write happen
        // under SQLite's single write lock, so of concurrent claimants in any
        // number of processes exactly one matches the row.
        let claimed = sqlx::query(
            "UPDATE runs SET status = 'running', version = version + 1, updated_at = ? \
             WHERE run_id = ? AND status = 'suspended' AND version = ? AND schema_version <= ? \
             RETURNING version",
        )
        .bind(micros(Utc::now()))
        .bind(run_id)
        .bind(expected_version)
        .bind(RUN_SCHEMA_VERSION)
        .fetch_optional(&self.writer)
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
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(StoreError::backend)?;
        let written = sqlx::query(
            "UPDATE runs SET status = ?, version = version + 1, updated_at = ?, pending = ?, step_results = ?, \
             message_count = message_count + ?, steps = ?, usage = ?, error = ?, schema_version = ? \
             WHERE run_id = ? AND version = ? AND schema_version <= ? \
             RETURNING version, message_count",
        )
        .bind(update.status.as_str())
        .bind(micros(Utc::now()))
        .bind(&json.pending)
        .bind(&json.step_results)
        .bind(bodies.len() as i64)
        .bind(i64::from(update.steps))
        .bind(&json.usage)
        .bind(update.error)
        .bind(RUN_SCHEMA_VERSION)
        .bind(update.run_id)
        .bind(update.expected_version)
        .bind(RUN_SCHEMA_VERSION)
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
        // Only the new messages, numbered on from what was stored.
        let first_seq = message_count - bodies.len() as i64;
        insert_messages(&mut tx, update.run_id, first_seq, &bodies).await?;
        tx.commit().await.map_err(StoreError::backend)?;
        Ok(version)
    }

    async fn list(&self, query: &RunQuery) -> Result<Vec<RunRecord>, StoreError> {
        let sql = match (query.status.is_some(), query.agent_id.is_some()) {
            (false, false) => concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs ORDER BY created_at DESC, run_id DESC LIMIT ? OFFSET ?"
            ),
            (true, false) => concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs WHERE status = ? ORDER BY created_at DESC, run_id DESC LIMIT ? OFFSET ?"
            ),
            (false, true) => concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs WHERE agent_id = ? ORDER BY created_at DESC, run_id DESC LIMIT ? OFFSET ?"
            ),
            (true, true) => concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs WHERE status = ? AND agent_id = ? ORDER BY created_at DESC, run_id DESC LIMIT ? OFFSET ?"
            ),
        };
        let mut q = sqlx::query(sql);
        if let Some(status) = query.status {
            q = q.bind(status.as_str());
        }
        if let Some(agent_id) = &query.agent_id {
            q = q.bind(agent_id);
        }
        // SQLite reads a negative LIMIT as "no limit".
        let limit = query.limit.map_or(-1, i64::from);
        let rows = q
            .bind(limit)
            .bind(i64::from(query.offset))
            .fetch_all(&self.readers)
            .await
            .map_err(StoreError::backend)?;
        crate::readable_runs(rows.iter().map(|row| stored_run(row)?.into_record()))
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        // Messages go with their run (ON DELETE CASCADE), in the same
        // statement.
        let done = sqlx::query("DELETE FROM runs WHERE status IN (?, ?, ?) AND updated_at < ?")
            .bind(FINISHED[0].as_str())
            .bind(FINISHED[1].as_str())
            .bind(FINISHED[2].as_str())
            .bind(micros(before))
            .execute(&self.writer)
            .await
            .map_err(StoreError::backend)?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use askloop::RunStatus;

    /// The claim statement spells these names out.
    #[test]
    fn statuses_in_sql_match_their_stored_names() {
        assert_eq!(RunStatus::Running.as_str(), "running");
        assert_eq!(RunStatus::Suspended.as_str(), "suspended");
    }
}

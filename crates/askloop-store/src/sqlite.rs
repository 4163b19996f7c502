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
//! Writes that wait for each other are committed together (`writes.rs`): a
//! write that finds nobody writing is written at once by its caller; those
//! queued meanwhile are then committed in one transaction, sharing one fsync
//! (group commit), each with its own result.
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
use std::sync::Arc;
use std::time::Duration;

use askloop::{Message, RunQuery, RunRecord, RunStore, RunUpdate, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};

use crate::row::{JsonColumns, StoredRun, message_bodies, message_from_row};
use writes::{NewRun, Step, Write, WriteQueue};

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
    /// The one write connection. Writes go through `writes`; only the
    /// conformance suite's raw row access uses the pool directly.
    pub(crate) writer: SqlitePool,
    writes: Arc<WriteQueue>,
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
            writes: Arc::new(WriteQueue::new(writer.clone())),
            writer,
            readers,
            path: path.to_path_buf(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the connections (waiting for writes in flight). Writes after
    /// this fail.
    pub async fn close(&self) {
        self.writes.close().await;
        self.writer.close().await;
        self.readers.close().await;
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

mod writes;

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
        let run = NewRun {
            run_id: run.run_id.clone(),
            agent_id: run.agent_id.clone(),
            thread_id: run.thread_id.clone(),
            status: run.status.as_str(),
            version: run.version,
            created_at: micros(run.created_at),
            updated_at: micros(run.updated_at),
            pending: json.pending,
            step_results: json.step_results,
            steps: i64::from(run.steps),
            usage: json.usage,
            error: run.error.clone(),
            metadata,
        };
        self.writes.write(Write::Create { run, bodies }).await?;
        Ok(())
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
        rows.iter().map(|row| message_from_row(run_id, row)).collect()
    }

    async fn claim(&self, run_id: &str, expected_version: i64) -> Result<i64, StoreError> {
        self.writes
            .write(Write::Claim {
                run_id: run_id.to_owned(),
                expected_version,
            })
            .await
    }

    async fn update(&self, update: RunUpdate<'_>) -> Result<i64, StoreError> {
        let json = JsonColumns::of_update(&update)?;
        let bodies = message_bodies(update.run_id, update.append)?;
        let step = Step {
            run_id: update.run_id.to_owned(),
            expected_version: update.expected_version,
            status: update.status.as_str(),
            pending: json.pending,
            step_results: json.step_results,
            steps: i64::from(update.steps),
            usage: json.usage,
            error: update.error.map(str::to_owned),
        };
        self.writes.write(Write::Update { step, bodies }).await
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
        let deleted = self.writes.write(Write::Prune { before: micros(before) }).await?;
        Ok(u64::try_from(deleted).unwrap_or_default())
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

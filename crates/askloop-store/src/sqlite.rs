//! [`SqliteStore`]: runs in one SQLite file, the embedded default.
//!
//! # Threads and connections
//!
//! The file is in WAL mode, so readers never block the writer nor the writer
//! readers. Each store has one write connection, owned by a thread of its
//! own (`writes.rs`): a write is handed to that thread as one job (whatever
//! the number of statements in it) and its caller waits asynchronously for
//! the result. Writers of one process therefore queue for the one write
//! connection instead of spinning in SQLite's busy handler, at most one
//! writer per process competes for the file lock (`busy_timeout` makes it
//! wait rather than fail), and writes queued behind each other are committed
//! together, sharing one fsync (group commit).
//!
//! Reads run on the calling thread, on one of a few read connections kept
//! open: a read by key or of one run's messages is a few microseconds to a
//! few milliseconds of work on pages SQLite mostly has in memory, and in WAL
//! mode it never waits for a writer, so handing it to another thread and
//! back would cost more than the read itself.
//!
//! # Durability
//!
//! `synchronous = FULL` by default: a commit is on disk (the WAL is fsynced)
//! before `update` or `claim` returns. (`create` alone is not fsynced: the
//! next commit's fsync covers it; see `writes.rs`.) askloop's promise is that a client that saw
//! `tool-call-suspended` can always resume, and a question may wait for
//! days; with `NORMAL` a commit survives the process being killed (SIGKILL,
//! a panic, an OOM kill) but the last commits can be lost to a power cut or
//! an OS crash. One fsync per step is small next to the model call of the
//! same step (see `docs/benchmarks.md`). Hosts that would rather trade the
//! power-loss guarantee for throughput choose [`SqliteSync::Normal`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::Duration;

use askloop::{
    AgentWaiting, ChangeFeed, Clock, DatabaseFault, Delivery, DeliveryOutcome, DeliveryStore, Lease, Message,
    Resolution, RunChanges, RunCursor, RunQuery, RunRecord, RunStore, RunUpdate, StoreError,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::row::{
    JsonColumns, RESOLUTION_ROWS_LAYOUT, StoredRun, message_bodies, parse_message, resolution_rows_condition,
};
use connection::Role;
use writes::{Job, NewRun, Queued, Step, Write, failed};

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

/// How [`SqliteStore::open_with`] opens a file.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    busy_timeout: Duration,
    sync: SqliteSync,
    readers: u32,
    create: bool,
    read_only: bool,
    clock: Arc<dyn Clock>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            sync: SqliteSync::default(),
            readers: 4,
            create: true,
            read_only: false,
            clock: askloop::system_clock(),
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

    /// How many read connections are kept open between reads (at least
    /// one; 4 by default). More reads at once each open their own.
    pub fn readers(mut self, readers: u32) -> Self {
        self.readers = readers.max(1);
        self
    }

    /// Whether a missing file (and its folder) is created (the default).
    /// When not, opening a path where no file exists fails with
    /// [`StoreError::Unusable`] and [`askloop::DatabaseFault::Missing`],
    /// leaving nothing behind: a mistyped path never becomes an empty
    /// store.
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create = create;
        self
    }

    /// Opens the file for reading only (never creating it): a read-only
    /// file, folder or file system can be read, and every write fails with
    /// [`askloop::DatabaseFault::ReadOnly`]. The tables must already be
    /// there.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        if read_only {
            self.create = false;
        }
        self
    }

    /// The clock that stamps the store's writes (a run's `updated_at`):
    /// the system's by default. Give it the agent's clock, so a test that
    /// moves a [`askloop::ManualClock`] moves both.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
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
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    path: PathBuf,
    options: SqliteOptions,
    /// To the write thread, which stops when every sender is gone (the last
    /// clone of the store dropped) or when asked to by `close`.
    jobs: mpsc::Sender<Job>,
    closed: AtomicBool,
    /// Read connections not in use.
    readers: Mutex<Vec<Connection>>,
    /// The resolution rows of the long runs read last.
    resolution_rows: crate::resolution_rows::ResolutionRows,
}

/// How many times opening retries when another process is creating the same
/// file at the same moment.
const OPEN_ATTEMPTS: u32 = 8;

/// The wait between those attempts: 12-25 ms at first, doubling up to
/// 100-200 ms (under a second and a quarter over all seven retries).
const OPEN_BACKOFF: askloop::Backoff = askloop::Backoff::new(Duration::from_millis(25), Duration::from_millis(200));

impl SqliteStore {
    /// Opens (creating it and its directory if needed) the database file at
    /// `path`, with the default options, and brings its tables up to date.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Opens the file at `path` with `options`.
    ///
    /// A file that cannot be used (missing when it is not to be created,
    /// not a database, read only, on a full disk, behind a file where a
    /// folder should be) is [`StoreError::Unusable`], naming the file and
    /// the [`askloop::DatabaseFault`].
    pub async fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        if options.create {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| fault::from_io(&path, &e))?;
            }
        } else {
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() => {
                    return Err(fault::from_io(&path, &std::io::ErrorKind::IsADirectory.into()));
                }
                Ok(_) => {}
                Err(e) => return Err(fault::from_io(&path, &e)),
            }
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            // Opening touches the disk and may wait for another process's
            // write lock (the busy timeout): not on the async runtime.
            let (p, o) = (path.clone(), options.clone());
            let connected = tokio::task::spawn_blocking(move || Self::connect(p, o))
                .await
                .map_err(|e| OpenError::Fatal(StoreError::backend(e)))
                .and_then(|connected| connected);
            match connected {
                Ok(store) => return Ok(store),
                // Two processes creating the same new file race on switching
                // it to WAL; the loser may see "locked" at once. Once the
                // winner is done, a retry finds the file ready.
                Err(OpenError::Racy(err)) if attempt < OPEN_ATTEMPTS => {
                    tracing::debug!(path = %path.display(), attempt, error = %err, "opening the SQLite store again");
                    tokio::time::sleep(OPEN_BACKOFF.wait(attempt - 1)).await;
                }
                Err(OpenError::Racy(err) | OpenError::Fatal(err)) => return Err(err),
            }
        }
    }

    fn connect(path: PathBuf, options: SqliteOptions) -> Result<Self, OpenError> {
        let cannot_open = |e: rusqlite::Error| {
            let racy = is_busy(&e);
            let err = fault::from_sqlite(&path, &e).unwrap_or_else(|| StoreError::backend(OpenFailed(e)));
            OpenError::new(racy, err)
        };
        if options.read_only {
            let store = Self::connect_read_only(path.clone(), options.clone()).map_err(cannot_open)?;
            let reader = connection::open(&path, Role::ReadOnly, &options).map_err(cannot_open)?;
            check_columns(&path, &reader, cannot_open)?;
            return Ok(store);
        }
        let mut writer = connection::open(&path, Role::Writer, &options).map_err(cannot_open)?;
        let mode = connection::switch_to_wal(&writer).map_err(cannot_open)?;
        if !mode.eq_ignore_ascii_case("wal") {
            let detail = format!(
                "it stays in journal mode {mode:?}, and askloop needs WAL (is it on a file system without shared \
                 memory, or held by another program in exclusive mode?)"
            );
            return Err(OpenError::Fatal(fault::unusable(
                &path,
                DatabaseFault::CannotOpen,
                detail,
            )));
        }
        if let Err(e) = connection::migrate(&mut writer) {
            let racy = is_busy(&e);
            let err = fault::from_sqlite(&path, &e).unwrap_or_else(|| StoreError::backend(MigrationFailed(e)));
            return Err(OpenError::new(racy, err));
        }
        check_columns(&path, &writer, cannot_open)?;
        // One read connection now: a file that cannot be read fails here,
        // not at the first read.
        let reader = connection::open(&path, Role::Reader, &options).map_err(cannot_open)?;
        let (jobs, queue) = mpsc::channel();
        let sync = options.sync;
        std::thread::Builder::new()
            .name("askloop-sqlite".to_owned())
            .spawn(move || writes::run(writer, queue, sync))
            .map_err(|e| OpenError::Fatal(StoreError::backend(e)))?;
        Ok(SqliteStore::new(path, options, jobs, reader))
    }

    /// A store that only reads: no write connection and no write thread;
    /// the file must hold the tables already.
    fn connect_read_only(path: PathBuf, options: SqliteOptions) -> rusqlite::Result<Self> {
        let reader = connection::open(&path, Role::ReadOnly, &options)?;
        if !connection::has_tables(&reader)? {
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_NOTADB),
                Some("a SQLite file without askloop's tables".to_owned()),
            ));
        }
        // Writes are refused before they reach the queue (see `write`).
        let (jobs, _) = mpsc::channel();
        Ok(SqliteStore::new(path, options, jobs, reader))
    }

    fn new(path: PathBuf, options: SqliteOptions, jobs: mpsc::Sender<Job>, reader: Connection) -> Self {
        SqliteStore {
            shared: Arc::new(Shared {
                path,
                options,
                jobs,
                closed: AtomicBool::new(false),
                readers: Mutex::new(vec![reader]),
                resolution_rows: crate::resolution_rows::ResolutionRows::default(),
            }),
        }
    }

    /// The store clock's time, in microseconds, for a write's `updated_at`.
    fn now(&self) -> i64 {
        micros(self.shared.options.clock.now())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Closes the connections (waiting for writes in flight). Reads and
    /// writes after this fail.
    pub async fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.lock_readers().clear();
        let (done, finished) = oneshot::channel();
        if self.shared.jobs.send(Job::Close(done)).is_ok() {
            // An error here means the thread had already stopped.
            let _ = finished.await;
        }
    }

    fn lock_readers(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.shared.readers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Hands `write` to the write thread and waits for its result.
    async fn write(&self, write: Write) -> Result<i64, StoreError> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        if self.shared.options.read_only {
            let detail = "read only (the store was opened for reading only)".to_owned();
            return Err(fault::unusable(&self.shared.path, DatabaseFault::ReadOnly, detail));
        }
        let (reply, result) = oneshot::channel();
        self.shared
            .jobs
            .send(Job::Write(Queued { write, reply }))
            .map_err(|_| failed("the SQLite store's write thread has stopped"))?;
        let written = result
            .await
            .map_err(|_| failed("the SQLite store's write thread stopped before the write was done"))?;
        written.map_err(|err| fault::explain(&self.shared.path, err))
    }

    /// The count a `SELECT COUNT(*)` statement reads.
    fn count_rows(&self, sql: &str, values: Vec<rusqlite::types::Value>) -> Result<u64, StoreError> {
        let counted: i64 = self.read(|conn| {
            conn.prepare_cached(sql)
                .and_then(|mut count| count.query_row(rusqlite::params_from_iter(values), |row| row.get(0)))
                .map_err(StoreError::backend)
        })?;
        Ok(u64::try_from(counted).unwrap_or_default())
    }

    /// Runs a `SELECT` of [`run_select!`] and reads each row as a run; a
    /// damaged row is an error naming its run.
    fn select_runs(&self, sql: &str, params: impl rusqlite::Params) -> Result<Vec<RunRecord>, StoreError> {
        let rows = self.read(|conn| {
            let mut select = conn.prepare_cached(sql).map_err(StoreError::backend)?;
            let mut rows = select.query(params).map_err(StoreError::backend)?;
            let mut stored = Vec::new();
            while let Some(row) = rows.next().map_err(StoreError::backend)? {
                stored.push(stored_run(row));
            }
            Ok(stored)
        })?;
        crate::readable_runs(rows.into_iter().map(|row| row?.into_record()))
    }

    /// Runs `read` on an idle read connection (or a new one), on this thread.
    fn read<T>(&self, read: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        let idle = self.lock_readers().pop();
        let role = if self.shared.options.read_only {
            Role::ReadOnly
        } else {
            Role::Reader
        };
        let conn = match idle {
            Some(conn) => conn,
            None => connection::open(&self.shared.path, role, &self.shared.options)
                .map_err(|e| fault::from_sqlite(&self.shared.path, &e).unwrap_or_else(|| StoreError::backend(e)))?,
        };
        let result = read(&conn).map_err(|err| fault::explain(&self.shared.path, err));
        let mut idle = self.lock_readers();
        if idle.len() < self.shared.options.readers as usize && !self.is_closed() {
            idle.push(conn);
        }
        result
    }
}

/// Refuses a file whose tables lack a column askloop needs, though its
/// `user_version` says they are current (see `columns.rs`).
fn check_columns(
    path: &Path,
    conn: &rusqlite::Connection,
    cannot_open: impl Fn(rusqlite::Error) -> OpenError,
) -> Result<(), OpenError> {
    let present = connection::columns(conn).map_err(cannot_open)?;
    let missing = crate::columns::missing(&present);
    if missing.is_empty() {
        return Ok(());
    }
    Err(OpenError::Fatal(fault::unusable(
        path,
        DatabaseFault::NotADatabase,
        crate::columns::refusal(&missing, "the file's user_version"),
    )))
}

enum OpenError {
    /// Possibly another process opening the same file; worth a retry.
    Racy(StoreError),
    Fatal(StoreError),
}

impl OpenError {
    /// `err`, worth a retry if it came of another connection's lock.
    fn new(racy: bool, err: StoreError) -> Self {
        if racy {
            OpenError::Racy(err)
        } else {
            OpenError::Fatal(err)
        }
    }
}

/// The file is locked by another connection (`SQLITE_BUSY`, `SQLITE_LOCKED`).
fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// The file could not be opened, for a reason that is not about the file
/// (see `fault.rs` for those).
#[derive(Debug, thiserror::Error)]
#[error("could not open the SQLite store: {0}")]
struct OpenFailed(rusqlite::Error);

/// Bringing the tables up to date failed.
#[derive(Debug, thiserror::Error)]
#[error("could not create or update the SQLite store's tables: {0}")]
struct MigrationFailed(rusqlite::Error);

/// The columns of `runs`, in the order [`stored_run`] reads them.
macro_rules! run_columns {
    () => {
        "run_id, agent_id, thread_id, status, version, created_at, updated_at, pending, step_results, \
         message_count, steps, usage, error, metadata, schema_version, lease_owner, lease_until, failure, \
         resolutions, expires_at, settings, memory_resource_id, memory_thread_id, memory_context, trace_parent, \
         resource_id"
    };
}

/// What a read of runs selects: the columns of `runs` (see [`run_columns`]),
/// then the run's resolutions past its row's as one JSON array, NULL when
/// it has none: only a run at layout 7 (`RESOLUTION_ROWS_LAYOUT`) has any
/// (`resolution_rows_condition!`).
macro_rules! run_select {
    () => {
        concat!(
            run_columns!(),
            ", CASE WHEN ",
            resolution_rows_condition!(),
            " THEN (SELECT '[' || group_concat(body, ',' ORDER BY version, n) || ']' \
             FROM run_resolutions WHERE run_resolutions.run_id = runs.run_id) END"
        )
    };
}

/// Running runs whose lease ran out (`?1`: now), after the cursor `?2, ?3`
/// (last write, run id), oldest write first: the running runs (those in
/// flight, a handful) are read by status and sorted.
const STALLED_RUNS: &str = concat!(
    "SELECT ",
    run_select!(),
    " FROM runs WHERE status = 'running' AND (lease_until IS NULL OR lease_until <= ?1) \
     AND (?2 IS NULL OR (updated_at, run_id) > (?2, ?3)) \
     ORDER BY updated_at, run_id LIMIT ?4"
);

/// Suspended runs whose earliest time limit passed (`?1`: now), after the
/// cursor `?2, ?3` (time limit, run id), soonest first: read from the index
/// of suspended runs with a time limit (`runs_suspended_by_expiry`).
const EXPIRING_RUNS: &str = concat!(
    "SELECT ",
    run_select!(),
    " FROM runs WHERE status = 'suspended' AND expires_at <= ?1 \
     AND (?2 IS NULL OR (expires_at, run_id) > (?2, ?3)) \
     ORDER BY expires_at, run_id LIMIT ?4"
);

/// The statement that lists the runs `query` asks for, newest first, and
/// its values in order.
fn list_statement(query: &RunQuery) -> (String, Vec<rusqlite::types::Value>) {
    let (filter, values) = listing_filter(query);
    let sql = format!(
        concat!(
            "SELECT ",
            run_select!(),
            " FROM runs{} ORDER BY created_at DESC, run_id DESC LIMIT ? OFFSET ?"
        ),
        filter
    );
    (sql, values)
}

/// The statement that counts the runs `query` lists, and its values in
/// order: from the index the listing reads, without reading the rows.
fn count_statement(query: &RunQuery) -> (String, Vec<rusqlite::types::Value>) {
    let (filter, values) = listing_filter(query);
    let sql = format!("SELECT COUNT(*) FROM (SELECT 1 FROM runs{filter} LIMIT ? OFFSET ?)");
    (sql, values)
}

/// The `WHERE` clause of a listing for `query` (or nothing), and its
/// values in order, followed by the values of `LIMIT ? OFFSET ?`.
fn listing_filter(query: &RunQuery) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value;
    let walled = query.resources.as_ref().map(|r| resources_condition(r.len()));
    let mut conditions: Vec<&str> = Vec::with_capacity(4);
    let mut values = Vec::with_capacity(6);
    if let Some(status) = query.status {
        conditions.push("status = ?");
        values.push(Value::Text(status.as_str().to_owned()));
    }
    if let Some(agent_id) = &query.agent_id {
        conditions.push("agent_id = ?");
        values.push(Value::Text(agent_id.clone()));
    }
    if let Some(thread) = &query.thread {
        conditions.push("memory_resource_id = ?");
        values.push(Value::Text(thread.resource_id.clone()));
        if thread.thread_id.is_empty() {
            conditions.push("memory_thread_id IS NOT NULL");
        } else {
            conditions.push("memory_thread_id = ?");
            values.push(Value::Text(thread.thread_id.clone()));
        }
    }
    if let (Some(resources), Some(walled)) = (&query.resources, &walled) {
        conditions.push(walled);
        values.extend(resources.iter().map(|r| Value::Text(r.clone())));
    }
    // A row value: the index on (created_at DESC, run_id DESC) (or the
    // status or agent one) is entered right after the previous page.
    if let Some(after) = &query.after {
        conditions.push("(created_at, run_id) < (?, ?)");
        values.push(Value::Integer(micros(after.at)));
        values.push(Value::Text(after.run_id.clone()));
    }
    (page_filter(&conditions, &mut values, query.limit, query.offset), values)
}

/// The condition of [`RunQuery::resources`] with `count` resources: a run
/// that belongs to one of them (`RunRecord::resource`: its thread's
/// resource, else the one it was started for), a placeholder each.
fn resources_condition(count: usize) -> String {
    if count == 0 {
        return "0".to_owned();
    }
    let placeholders = vec!["?"; count].join(", ");
    format!("COALESCE(memory_resource_id, resource_id) IN ({placeholders})")
}

/// The `WHERE` clause of `conditions` (or nothing), with the values of
/// `LIMIT ? OFFSET ?` pushed after theirs.
fn page_filter(
    conditions: &[&str],
    values: &mut Vec<rusqlite::types::Value>,
    limit: Option<u32>,
    offset: u32,
) -> String {
    use rusqlite::types::Value;
    // SQLite reads a negative LIMIT as "no limit".
    values.push(Value::Integer(limit.map_or(-1, i64::from)));
    values.push(Value::Integer(i64::from(offset)));
    if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    }
}

mod changes;
mod connection;
mod fault;
mod grants;
mod links;
mod outbox;
mod resolutions;
mod threads;
mod writes;

fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

/// Reads a `runs` row (columns as in [`run_select`]). A column of the wrong
/// type is a corrupt row.
fn stored_run(row: &rusqlite::Row<'_>) -> Result<StoredRun, StoreError> {
    let run_id: String = row.get(0).map_err(StoreError::backend)?;
    let corrupt = |detail: String| StoreError::Corrupt {
        run_id: run_id.clone(),
        detail,
    };
    let column = |e: rusqlite::Error| corrupt(e.to_string());
    let time = |index: usize, name: &str| -> Result<DateTime<Utc>, StoreError> {
        let value: i64 = row.get(index).map_err(column)?;
        DateTime::from_timestamp_micros(value).ok_or_else(|| corrupt(format!("{name}: {value} is not a time")))
    };
    Ok(StoredRun {
        agent_id: row.get(1).map_err(column)?,
        thread_id: row.get(2).map_err(column)?,
        status: row.get(3).map_err(column)?,
        version: row.get(4).map_err(column)?,
        created_at: time(5, "created_at")?,
        updated_at: time(6, "updated_at")?,
        pending: row.get(7).map_err(column)?,
        step_results: row.get(8).map_err(column)?,
        message_count: row.get(9).map_err(column)?,
        steps: row.get(10).map_err(column)?,
        usage: row.get(11).map_err(column)?,
        error: row.get(12).map_err(column)?,
        metadata: row.get(13).map_err(column)?,
        schema_version: row.get(14).map_err(column)?,
        lease_owner: row.get(15).map_err(column)?,
        lease_until: match row.get::<_, Option<i64>>(16).map_err(column)? {
            Some(_) => Some(time(16, "lease_until")?),
            None => None,
        },
        failure: row.get(17).map_err(column)?,
        resolutions: row.get(18).map_err(column)?,
        resolution_rows: row.get(26).map_err(column)?,
        settings: row.get(20).map_err(column)?,
        memory_resource_id: row.get(21).map_err(column)?,
        memory_thread_id: row.get(22).map_err(column)?,
        memory_context: row.get(23).map_err(column)?,
        trace_parent: row.get(24).map_err(column)?,
        resource_id: row.get(25).map_err(column)?,
        run_id: run_id.clone(),
    })
}

#[async_trait]
impl RunStore for SqliteStore {
    /// Notices, within half a second, that any process committed to the
    /// file (see `sqlite/changes.rs`).
    fn thread_store(&self) -> Option<&dyn askloop::ThreadStore> {
        Some(self)
    }

    fn grant_store(&self) -> Option<&dyn askloop::GrantStore> {
        Some(self)
    }

    /// The answer links, in the same file as the runs.
    fn link_store(&self) -> Option<&dyn askloop::LinkStore> {
        Some(self)
    }

    async fn create(&self, run: &RunRecord, messages: &[Message]) -> Result<(), StoreError> {
        let json = JsonColumns::of_record(run)?;
        let metadata = crate::row::to_json(&run.run_id, "metadata", &run.metadata)?;
        let settings = crate::row::to_json(&run.run_id, "settings", &run.settings)?;
        let bodies = message_bodies(&run.run_id, messages)?;
        let run = NewRun {
            run_id: run.run_id.clone(),
            agent_id: run.agent_id.clone(),
            thread_id: run.thread_id.clone(),
            status: run.status().as_str(),
            version: run.version,
            created_at: micros(run.created_at),
            updated_at: micros(run.updated_at),
            pending: json.pending,
            step_results: json.step_results,
            steps: i64::from(run.steps),
            usage: json.usage,
            error: run.error(),
            metadata,
            settings,
            schema_version: run.schema_version(),
            lease_owner: run.lease.as_ref().map(|lease| lease.owner.clone()),
            lease_until: run.lease.as_ref().map(|lease| micros(lease.until)),
            failure: json.failure,
            resolutions: json.resolutions.unwrap_or_else(|| "[]".to_owned()),
            expires_at: json.expires_at.map(micros),
            memory_resource_id: run.memory.as_ref().map(|m| m.key.resource_id.clone()),
            memory_thread_id: run.memory.as_ref().map(|m| m.key.thread_id.clone()),
            memory_context: run.memory.as_ref().map(|m| m.context),
            trace_parent: run.trace_parent.clone(),
            resource_id: run.resource_id.clone(),
            written_at: self.now(),
        };
        self.write(Write::Create { run, bodies }).await?;
        Ok(())
    }

    /// A run's resolutions past its row's come from the store's cache of
    /// them (see `resolution_rows.rs`): only those added since the run
    /// was last read here are read.
    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.read(|conn| {
            let stored = {
                let mut select = conn
                    .prepare_cached(concat!("SELECT ", run_columns!(), ", NULL FROM runs WHERE run_id = ?"))
                    .map_err(StoreError::backend)?;
                let mut rows = select.query([run_id]).map_err(StoreError::backend)?;
                match rows.next().map_err(StoreError::backend)? {
                    Some(row) => stored_run(row)?,
                    None => return Ok(None),
                }
            };
            let (layout, created_at, version) = (stored.schema_version, stored.created_at, stored.version);
            let mut record = stored.into_record()?;
            if layout >= RESOLUTION_ROWS_LAYOUT {
                let rows = resolutions::read(&self.shared.resolution_rows, conn, run_id, created_at, version)?;
                record.resolutions.extend(rows);
            }
            Ok(Some(record))
        })
    }

    async fn messages(&self, run_id: &str) -> Result<Vec<Message>, StoreError> {
        self.read(|conn| {
            let mut select = conn
                .prepare_cached("SELECT seq, body FROM messages WHERE run_id = ? ORDER BY seq")
                .map_err(StoreError::backend)?;
            let mut rows = select.query([run_id]).map_err(StoreError::backend)?;
            let mut messages = Vec::new();
            while let Some(row) = rows.next().map_err(StoreError::backend)? {
                let seq: i64 = row.get(0).map_err(StoreError::backend)?;
                let body = row
                    .get_ref(1)
                    .and_then(|value| value.as_str().map_err(Into::into))
                    .map_err(|e| StoreError::Corrupt {
                        run_id: run_id.to_owned(),
                        detail: format!("message {seq}: {e}"),
                    })?;
                messages.push(parse_message(run_id, seq, body)?);
            }
            Ok(messages)
        })
    }

    async fn claim(&self, run_id: &str, expected_version: i64, lease: &Lease) -> Result<i64, StoreError> {
        self.write(Write::Claim {
            at: self.now(),
            run_id: run_id.to_owned(),
            expected_version,
            owner: lease.owner.clone(),
            until: micros(lease.until),
        })
        .await
    }

    async fn renew_lease(&self, run_id: &str, lease: &Lease) -> Result<(), StoreError> {
        self.write(Write::Renew {
            run_id: run_id.to_owned(),
            owner: lease.owner.clone(),
            until: micros(lease.until),
        })
        .await?;
        Ok(())
    }

    async fn expired(
        &self,
        now: DateTime<Utc>,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let now = micros(now);
        let limit = i64::from(limit);
        let (after_write, after_id) = match after {
            Some(after) => (Some(micros(after.at)), Some(after.run_id.as_str())),
            None => (None, None),
        };
        self.select_runs(STALLED_RUNS, rusqlite::params![now, after_write, after_id, limit])
    }

    async fn expiring(
        &self,
        now: DateTime<Utc>,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let now = micros(now);
        let limit = i64::from(limit);
        let (after_limit, after_id) = match after {
            Some(after) => (Some(micros(after.at)), Some(after.run_id.as_str())),
            None => (None, None),
        };
        self.select_runs(EXPIRING_RUNS, rusqlite::params![now, after_limit, after_id, limit])
    }

    async fn reclaim(
        &self,
        run_id: &str,
        expected_version: i64,
        lease: &Lease,
        now: DateTime<Utc>,
        resolution: Option<&Resolution>,
    ) -> Result<i64, StoreError> {
        let resolution = resolution
            .map(|r| crate::row::to_json(run_id, "resolution", r))
            .transpose()?;
        self.write(Write::Reclaim {
            at: self.now(),
            run_id: run_id.to_owned(),
            expected_version,
            owner: lease.owner.clone(),
            until: micros(lease.until),
            now: micros(now),
            resolution,
        })
        .await
    }

    async fn update(&self, update: RunUpdate<'_>) -> Result<i64, StoreError> {
        let json = JsonColumns::of_update(&update)?;
        let bodies = message_bodies(update.run_id, update.append)?;
        let step = Step {
            updated_at: self.now(),
            run_id: update.run_id.to_owned(),
            expected_version: update.expected_version,
            status: update.status.as_str(),
            pending: json.pending,
            step_results: json.step_results,
            steps: i64::from(update.steps),
            usage: json.usage,
            error: update.error.map(str::to_owned),
            failure: json.failure,
            lease_owner: update.lease.map(|lease| lease.owner.clone()),
            lease_until: update.lease.map(|lease| micros(lease.until)),
            resolutions: json.resolutions,
            resolution_bodies: json.resolution_bodies,
            layout: update.needs_layout(),
            expires_at: json.expires_at.map(micros),
            outbox: update
                .outbox
                .iter()
                .map(outbox::NewDelivery::of)
                .collect::<Result<_, _>>()?,
            grants: update
                .grants
                .iter()
                .map(crate::grants::GrantRow::of)
                .collect::<Result<_, _>>()?,
        };
        self.write(Write::Update { step, bodies }).await
    }

    async fn list(&self, query: &RunQuery) -> Result<Vec<RunRecord>, StoreError> {
        let (sql, values) = list_statement(query);
        self.select_runs(&sql, rusqlite::params_from_iter(values))
    }

    async fn count(&self, query: &RunQuery) -> Result<u64, StoreError> {
        let (sql, values) = count_statement(query);
        self.count_rows(&sql, values)
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let deleted = self.write(Write::Prune { before: micros(before) }).await?;
        Ok(u64::try_from(deleted).unwrap_or_default())
    }

    async fn waiting(&self) -> Result<Vec<AgentWaiting>, StoreError> {
        // `INDEXED BY`: left to itself, SQLite may read the agent index and
        // every run of an agent, finished ones included. A row whose pending
        // calls cannot be read counts as a run waiting on none.
        const WAITING: &str = "SELECT agent_id, COUNT(*), \
             SUM(CASE WHEN json_valid(pending) THEN json_array_length(pending) ELSE 0 END) \
             FROM runs INDEXED BY runs_by_status WHERE status = 'suspended' GROUP BY agent_id ORDER BY agent_id";
        self.read(|conn| {
            let mut select = conn.prepare_cached(WAITING).map_err(StoreError::backend)?;
            let rows = select
                .query_map([], |row| {
                    Ok(AgentWaiting {
                        agent_id: row.get(0)?,
                        runs: u64::try_from(row.get::<_, i64>(1)?).unwrap_or_default(),
                        calls: u64::try_from(row.get::<_, Option<i64>>(2)?.unwrap_or_default()).unwrap_or_default(),
                    })
                })
                .map_err(StoreError::backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(StoreError::backend)
        })
    }
}

#[async_trait]
impl DeliveryStore for SqliteStore {
    async fn claim_deliveries(
        &self,
        now: DateTime<Utc>,
        lease: &Lease,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError> {
        let token = uuid::Uuid::now_v7().to_string();
        let taken = self
            .write(Write::ClaimDeliveries {
                now: micros(now),
                owner: lease.owner.clone(),
                until: micros(lease.until),
                limit: i64::from(limit),
                token: token.clone(),
            })
            .await?;
        if taken == 0 {
            return Ok(Vec::new());
        }
        // What this claim took, still held by it (the write is committed,
        // so any reader sees it).
        self.read(|conn| {
            outbox::select(
                conn,
                &format!(
                    "SELECT {} FROM outbox WHERE claim_token = ? AND lease_owner = ? AND state = 'pending' \
                     ORDER BY next_at, id",
                    outbox::COLUMNS
                ),
                rusqlite::params![token, lease.owner],
            )
        })
    }

    async fn finish_delivery(&self, id: &str, owner: &str, outcome: &DeliveryOutcome) -> Result<(), StoreError> {
        self.write(Write::FinishDelivery {
            id: id.to_owned(),
            owner: owner.to_owned(),
            outcome: outbox::Outcome::of(outcome),
        })
        .await?;
        Ok(())
    }

    async fn deliveries(&self, run_id: &str) -> Result<Vec<Delivery>, StoreError> {
        self.read(|conn| {
            outbox::select(
                conn,
                &format!(
                    "SELECT {} FROM outbox WHERE run_id = ? ORDER BY created_at, id",
                    outbox::COLUMNS
                ),
                rusqlite::params![run_id],
            )
        })
    }
}

#[async_trait]
impl ChangeFeed for SqliteStore {
    async fn changes(&self) -> Result<Option<RunChanges>, StoreError> {
        if self.is_closed() {
            return Err(failed("the SQLite store is closed"));
        }
        let feed = changes::watch(self.shared.path.clone(), self.shared.options.clone()).await?;
        Ok(Some(feed))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use askloop::RunStatus;

    use super::connection::{Role, open};
    use askloop::RunQuery;

    use super::{EXPIRING_RUNS, STALLED_RUNS, SqliteStore, count_statement, list_statement};

    /// The claim statement spells these names out.
    #[test]
    fn statuses_in_sql_match_their_stored_names() {
        assert_eq!(RunStatus::Running.as_str(), "running");
        assert_eq!(RunStatus::Suspended.as_str(), "suspended");
    }

    /// SQLite's plan for `sql`: the `detail` column of `EXPLAIN QUERY PLAN`.
    fn plan(conn: &rusqlite::Connection, sql: &str, params: impl rusqlite::Params) -> String {
        let mut explain = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let details: Vec<String> = explain
            .query_map(params, |row| row.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        // A run's own resolution rows are put in order for it (see
        // `run_select`): a sort of one run's rows, not of the runs read.
        details
            .into_iter()
            .filter(|detail| detail != "USE TEMP B-TREE FOR group_concat(ORDER BY)")
            .collect::<Vec<_>>()
            .join("; ")
    }

    #[tokio::test]
    async fn sweeps_and_listings_read_only_the_runs_they_look_for_from_an_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("runs.db")).await.unwrap();
        let conn = open(store.path(), Role::Reader, &Default::default()).unwrap();
        let none: Option<i64> = None;
        // The running runs (those in flight), sorted: a handful.
        let stalled = plan(&conn, STALLED_RUNS, rusqlite::params![0, none, none, 10]);
        assert!(stalled.contains("USING INDEX runs_by_status (status=?)"), "{stalled}");
        // Of the suspended runs, which may be many, only those with a time
        // limit that passed, in order.
        let expiring = plan(&conn, EXPIRING_RUNS, rusqlite::params![0, none, none, 10]);
        assert!(
            expiring.contains("USING INDEX runs_suspended_by_expiry (status=? AND expires_at<?)"),
            "{expiring}"
        );
        assert!(
            !expiring.contains("TEMP B-TREE"),
            "read in order, not sorted: {expiring}"
        );
        // A page of a listing starts in the index right after the previous
        // page, however far down: no rows skipped one by one, no sort.
        let after = Some(askloop::RunCursor {
            at: chrono::Utc::now(),
            run_id: "r".into(),
        });
        let by = |status, agent_id: Option<&str>| RunQuery {
            status,
            agent_id: agent_id.map(str::to_owned),
            after: after.clone(),
            limit: Some(50),
            ..Default::default()
        };
        for (query, index) in [
            (by(None, None), "runs_by_created ((created_at,run_id)<(?,?))"),
            (
                by(Some(RunStatus::Suspended), None),
                "runs_by_status (status=? AND (created_at,run_id)<(?,?))",
            ),
            (
                by(None, Some("a")),
                "runs_by_agent (agent_id=? AND (created_at,run_id)<(?,?))",
            ),
        ] {
            let (sql, values) = list_statement(&query);
            let page = plan(&conn, &sql, rusqlite::params_from_iter(values));
            assert!(page.contains(index), "{page}");
            assert!(!page.contains("TEMP B-TREE"), "{page}");
        }
        // The runs of one thread, from the index of runs on threads.
        let on_thread = RunQuery {
            thread: Some(askloop::ThreadKey::new("ana", "t1")),
            ..by(None, None)
        };
        let (sql, values) = list_statement(&on_thread);
        let page = plan(&conn, &sql, rusqlite::params_from_iter(values));
        assert!(page.contains("runs_by_thread"), "{page}");
        assert!(!page.contains("TEMP B-TREE"), "{page}");
        // A count reads the listing's index alone, not the rows.
        for (query, index) in [
            (
                by(None, None),
                "COVERING INDEX runs_by_created ((created_at,run_id)<(?,?))",
            ),
            (
                by(Some(RunStatus::Suspended), None),
                "COVERING INDEX runs_by_status (status=? AND (created_at,run_id)<(?,?))",
            ),
            (
                by(None, Some("a")),
                "COVERING INDEX runs_by_agent (agent_id=? AND (created_at,run_id)<(?,?))",
            ),
        ] {
            let (sql, values) = count_statement(&query);
            let count = plan(&conn, &sql, rusqlite::params_from_iter(values));
            assert!(count.contains(index), "{count}");
        }
        // Of the finished runs, only those last written before the cut-off.
        let prune = plan(&conn, super::writes::PRUNE, [0]);
        assert!(
            prune.contains("INDEX runs_finished_by_updated (status=? AND updated_at<?)"),
            "{prune}"
        );
    }
}

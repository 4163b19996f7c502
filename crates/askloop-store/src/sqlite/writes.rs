//! Group commit: the writes of one [`SqliteStore`](super::SqliteStore)
//! that wait for each other are committed together.
//!
//! With `synchronous = FULL` every commit costs an fsync, and the writes of
//! one process queue for the one write connection anyway. A write that finds
//! nobody writing is written at once by its caller, alone. Writes arriving
//! while one is being written are queued; when it is done, a drain task takes
//! every write queued at that moment (up to [`MAX_BATCH`]) and runs them one
//! after another in ONE `BEGIN IMMEDIATE ... COMMIT`: they share its fsync,
//! and so on until the queue is empty. Nothing is reported before the commit
//! has returned, so a write reported `Ok` is as durable as before, and a
//! crash mid-batch loses only writes that were not yet reported.
//!
//! Each write keeps its own result and stays all-or-nothing for itself:
//!
//! - A write that is refused (`Conflict`, `NotFound`, `NewerSchema`,
//!   `AlreadyExists`) is refused by its first statement, which changed
//!   nothing (a compare-and-set matching no row, or a unique violation that
//!   SQLite undoes for that statement alone); the batch goes on.
//! - Writes run in the order they were queued, each seeing the ones before
//!   it, so compare-and-set stays exact: of two claims of one run in one
//!   batch, the second finds the version the first wrote and is a
//!   `Conflict`.
//! - Any other failure of a statement (the disk, a constraint that cannot
//!   happen) rolls the whole batch back, and its writes are then run again
//!   one by one, each in its own transaction, so only the failing one fails.
//! - A commit that fails fails every write of the batch (none is reported
//!   `Ok`), as a single write's failed commit would.
//!
//! A write alone (and a batch of one) is written as before the queue
//! existed, by its caller when nobody else is writing: in its own
//! `BEGIN IMMEDIATE` transaction, or, when it is a single statement (a claim,
//! a prune, a step without messages), without a transaction around it.
//! Other processes are unaffected: the batch takes SQLite's write lock with
//! `BEGIN IMMEDIATE` and theirs wait in the busy timeout, as before.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use askloop::{RUN_SCHEMA_VERSION, StoreError};
use chrono::Utc;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::SqlitePool;
use sqlx::{Connection as _, Row, Sqlite, SqliteConnection};
use tokio::sync::{Notify, oneshot};

use crate::row::{FINISHED, RowState, explain_missed_write};

use super::insert_messages;

/// The most writes committed together.
pub(crate) const MAX_BATCH: usize = 128;

/// A `runs` row to insert, serialised.
#[derive(Debug)]
pub(crate) struct NewRun {
    pub(crate) run_id: String,
    pub(crate) agent_id: String,
    pub(crate) thread_id: Option<String>,
    pub(crate) status: &'static str,
    pub(crate) version: i64,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) pending: String,
    pub(crate) step_results: String,
    pub(crate) steps: i64,
    pub(crate) usage: String,
    pub(crate) error: Option<String>,
    pub(crate) metadata: String,
}

/// A step to write on a run, serialised.
#[derive(Debug)]
pub(crate) struct Step {
    pub(crate) run_id: String,
    pub(crate) expected_version: i64,
    pub(crate) status: &'static str,
    pub(crate) pending: String,
    pub(crate) step_results: String,
    pub(crate) steps: i64,
    pub(crate) usage: String,
    pub(crate) error: Option<String>,
}

/// One write, with everything it writes already serialised (by the caller,
/// not by the writer task).
#[derive(Debug)]
pub(crate) enum Write {
    /// `create`: the row and its first messages. Result 0.
    Create { run: NewRun, bodies: Vec<String> },
    /// `update`: a compare-and-set of the row plus new messages. Result: the
    /// new version.
    Update { step: Step, bodies: Vec<String> },
    /// `claim`. Result: the new version.
    Claim { run_id: String, expected_version: i64 },
    /// `prune`, of runs last written before this time (microseconds).
    /// Result: how many were deleted.
    Prune { before: i64 },
}

impl Write {
    /// Whether the write is more than one statement, so that alone it needs
    /// a transaction around it to be all-or-nothing.
    fn needs_transaction(&self) -> bool {
        match self {
            Write::Create { bodies, .. } | Write::Update { bodies, .. } => !bodies.is_empty(),
            Write::Claim { .. } | Write::Prune { .. } => false,
        }
    }

    /// Runs the write on `conn` (inside the batch's transaction, if any). A
    /// refusal (`Conflict`, `NotFound`, ...) has changed nothing; any
    /// `Backend` error may have left part of the write behind.
    async fn apply(&self, conn: &mut SqliteConnection) -> Result<i64, StoreError> {
        match self {
            Write::Create { run, bodies } => {
                let inserted = sqlx::query(concat!(
                    "INSERT INTO runs (",
                    run_columns!(),
                    ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ))
                .bind(&run.run_id)
                .bind(&run.agent_id)
                .bind(&run.thread_id)
                .bind(run.status)
                .bind(run.version)
                .bind(run.created_at)
                .bind(run.updated_at)
                .bind(&run.pending)
                .bind(&run.step_results)
                .bind(bodies.len() as i64)
                .bind(run.steps)
                .bind(&run.usage)
                .bind(&run.error)
                .bind(&run.metadata)
                .bind(RUN_SCHEMA_VERSION)
                .execute(&mut *conn)
                .await;
                if let Err(err) = inserted {
                    if err.as_database_error().is_some_and(|e| e.is_unique_violation()) {
                        return Err(StoreError::AlreadyExists {
                            run_id: run.run_id.clone(),
                        });
                    }
                    return Err(StoreError::backend(err));
                }
                insert_messages(conn, &run.run_id, 0, bodies).await?;
                Ok(0)
            }
            Write::Update { step, bodies } => {
                let written = sqlx::query(
                    "UPDATE runs SET status = ?, version = version + 1, updated_at = ?, pending = ?, \
                     step_results = ?, message_count = message_count + ?, steps = ?, usage = ?, error = ?, \
                     schema_version = ? \
                     WHERE run_id = ? AND version = ? AND schema_version <= ? \
                     RETURNING version, message_count",
                )
                .bind(step.status)
                .bind(Utc::now().timestamp_micros())
                .bind(&step.pending)
                .bind(&step.step_results)
                .bind(bodies.len() as i64)
                .bind(step.steps)
                .bind(&step.usage)
                .bind(&step.error)
                .bind(RUN_SCHEMA_VERSION)
                .bind(&step.run_id)
                .bind(step.expected_version)
                .bind(RUN_SCHEMA_VERSION)
                .fetch_optional(&mut *conn)
                .await
                .map_err(StoreError::backend)?;
                let Some(row) = written else {
                    return Err(explain_missed_write(
                        &step.run_id,
                        step.expected_version,
                        row_state(conn, &step.run_id).await?,
                    ));
                };
                let version: i64 = row.try_get("version").map_err(StoreError::backend)?;
                let message_count: i64 = row.try_get("message_count").map_err(StoreError::backend)?;
                // Only the new messages, numbered on from what was stored.
                let first_seq = message_count - bodies.len() as i64;
                insert_messages(conn, &step.run_id, first_seq, bodies).await?;
                Ok(version)
            }
            Write::Claim {
                run_id,
                expected_version,
            } => {
                // One statement: the status and version test and the write
                // happen under SQLite's single write lock, so of concurrent
                // claimants in any number of processes (or in one batch)
                // exactly one matches the row.
                let claimed = sqlx::query(
                    "UPDATE runs SET status = 'running', version = version + 1, updated_at = ? \
                     WHERE run_id = ? AND status = 'suspended' AND version = ? AND schema_version <= ? \
                     RETURNING version",
                )
                .bind(Utc::now().timestamp_micros())
                .bind(run_id)
                .bind(expected_version)
                .bind(RUN_SCHEMA_VERSION)
                .fetch_optional(&mut *conn)
                .await
                .map_err(StoreError::backend)?;
                match claimed {
                    Some(row) => row.try_get("version").map_err(StoreError::backend),
                    None => Err(explain_missed_write(
                        run_id,
                        *expected_version,
                        row_state(conn, run_id).await?,
                    )),
                }
            }
            Write::Prune { before } => {
                // Messages go with their run (ON DELETE CASCADE), in the
                // same statement.
                let done = sqlx::query("DELETE FROM runs WHERE status IN (?, ?, ?) AND updated_at < ?")
                    .bind(FINISHED[0].as_str())
                    .bind(FINISHED[1].as_str())
                    .bind(FINISHED[2].as_str())
                    .bind(before)
                    .execute(&mut *conn)
                    .await
                    .map_err(StoreError::backend)?;
                Ok(i64::try_from(done.rows_affected()).unwrap_or(i64::MAX))
            }
        }
    }
}

/// The status and version of a row, read on the write connection so that a
/// write earlier in the same batch is seen.
async fn row_state(conn: &mut SqliteConnection, run_id: &str) -> Result<Option<RowState>, StoreError> {
    let row = sqlx::query("SELECT status, version, schema_version FROM runs WHERE run_id = ?")
        .bind(run_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(StoreError::backend)?;
    row.map(|row| RowState::from_row(&row)).transpose()
}

/// A queued write and where its result goes.
struct Queued {
    write: Write,
    reply: oneshot::Sender<Result<i64, StoreError>>,
}

/// The writes of a store (shared by its clones), and whose turn it is to
/// write.
///
/// A write that finds nobody writing is written at once by its own caller,
/// alone, exactly as before the queue existed (no hand-off to another task).
/// Writes that arrive meanwhile are queued; when the writer is done, a drain
/// task commits the queue in batches until it is empty. So writes are only
/// grouped when they actually wait for each other, and only one writer
/// (caller or drain task) uses the write connection at a time.
pub(crate) struct WriteQueue {
    pool: SqlitePool,
    state: Mutex<QueueState>,
    /// Told when the queue becomes idle (for `close`).
    idle: Notify,
}

#[derive(Default)]
struct QueueState {
    /// Someone (a caller writing alone, or the drain task) is writing.
    /// Not busy implies nothing queued.
    busy: bool,
    queued: VecDeque<Queued>,
    closed: bool,
}

/// Shows the queue's state, not the queued writes (their messages can be
/// large, and are the users' conversations).
impl std::fmt::Debug for WriteQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("WriteQueue")
            .field("busy", &state.busy)
            .field("queued", &state.queued.len())
            .field("closed", &state.closed)
            .finish()
    }
}

/// An error for a write that could not be done, with a reason (several
/// writes of a batch each get their own).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct WriteFailed(String);

fn failed(reason: impl Into<String>) -> StoreError {
    StoreError::backend(WriteFailed(reason.into()))
}

// Lives for one call, on the stack: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Role {
    /// Nobody was writing: write it now.
    Write(Write),
    /// Queued: wait for the result.
    Wait(oneshot::Receiver<Result<i64, StoreError>>),
}

impl WriteQueue {
    /// A queue writing through `pool` (one connection).
    pub(crate) fn new(pool: SqlitePool) -> Self {
        WriteQueue {
            pool,
            state: Mutex::new(QueueState::default()),
            idle: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `write` (alone, or queued and committed with others) and
    /// returns its result after its commit.
    pub(crate) async fn write(self: &Arc<Self>, write: Write) -> Result<i64, StoreError> {
        let role = {
            let mut state = self.lock();
            if state.closed {
                return Err(failed("the SQLite store is closed"));
            }
            if state.busy {
                let (reply, result) = oneshot::channel();
                state.queued.push_back(Queued { write, reply });
                Role::Wait(result)
            } else {
                state.busy = true;
                Role::Write(write)
            }
        };
        match role {
            Role::Wait(result) => result
                .await
                .map_err(|_| failed("the SQLite store's writer stopped before the write was done"))?,
            Role::Write(write) => {
                // Dropped when the write is done or its caller gives up: then
                // whatever was queued meanwhile is handed to a drain task.
                let _turn = Turn(Arc::clone(self));
                write_one(&self.pool, &write).await
            }
        }
    }

    /// Marks the queue idle (nothing queued) and tells `close`.
    fn set_idle(&self, mut state: std::sync::MutexGuard<'_, QueueState>) {
        state.busy = false;
        drop(state);
        self.idle.notify_waiters();
    }

    /// Refuses new writes and waits until the queued ones are done.
    pub(crate) async fn close(&self) {
        self.lock().closed = true;
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.lock().busy {
                return;
            }
            notified.await;
        }
    }
}

/// A caller's turn to write; when it ends, the writes queued meanwhile go to
/// a drain task.
struct Turn(Arc<WriteQueue>);

impl Drop for Turn {
    fn drop(&mut self) {
        let state = self.0.lock();
        if state.queued.is_empty() {
            self.0.set_idle(state);
            return;
        }
        drop(state);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(drain(Arc::clone(&self.0)));
            }
            Err(_) => {
                // No runtime to write them on (cannot happen from an async
                // caller): they fail rather than wait forever.
                let mut state = self.0.lock();
                state.queued.clear();
                self.0.set_idle(state);
            }
        }
    }
}

/// Commits the queued writes, in batches of up to [`MAX_BATCH`] (all those
/// queued at that moment), until none is left.
///
/// The guard is made before the future is first polled, so that even a
/// future dropped unpolled (spawned on a runtime that is shutting down)
/// leaves the queue usable.
fn drain(queue: Arc<WriteQueue>) -> impl Future<Output = ()> + Send {
    let mut draining = Draining { queue, done: false };
    async move {
        loop {
            let mut batch: Vec<Queued> = {
                let mut state = draining.queue.lock();
                if state.queued.is_empty() {
                    draining.done = true;
                    draining.queue.set_idle(state);
                    return;
                }
                let n = state.queued.len().min(MAX_BATCH);
                state.queued.drain(..n).collect()
            };
            // A caller that stopped waiting (its future was dropped) before
            // its write started does not get it written, as before the queue.
            batch.retain(|queued| !queued.reply.is_closed());
            write_batch(&draining.queue.pool, batch).await;
        }
    }
}

/// The drain task's turn. Dropped before it is done only if the task is
/// (its runtime shutting down): the writes still queued then fail rather
/// than wait forever, and the next write starts afresh.
struct Draining {
    queue: Arc<WriteQueue>,
    done: bool,
}

impl Drop for Draining {
    fn drop(&mut self) {
        if !self.done {
            let mut state = self.queue.lock();
            state.queued.clear();
            self.queue.set_idle(state);
        }
    }
}

async fn write_batch(pool: &SqlitePool, mut batch: Vec<Queued>) {
    if batch.len() <= 1 {
        if let Some(queued) = batch.pop() {
            write_alone(pool, queued).await;
        }
        return;
    }
    match write_together(pool, &batch).await {
        Together::Committed(results) => {
            for (queued, result) in batch.into_iter().zip(results) {
                let _ = queued.reply.send(result);
            }
        }
        Together::Failed(reason) => {
            for queued in batch {
                let _ = queued.reply.send(Err(failed(reason.clone())));
            }
        }
        Together::RolledBack(err) => {
            tracing::debug!(error = %err, writes = batch.len(), "a group commit was rolled back; writing its writes one by one");
            for queued in batch {
                write_alone(pool, queued).await;
            }
        }
    }
}

enum Together {
    /// Committed: each write's own result.
    Committed(Vec<Result<i64, StoreError>>),
    /// Nothing could be written (no connection, no write lock, the commit
    /// failed): every write fails with this.
    Failed(String),
    /// A statement failed and the batch was rolled back: nothing was
    /// written, so each write can be run again alone.
    RolledBack(StoreError),
}

async fn write_together(pool: &SqlitePool, batch: &[Queued]) -> Together {
    let mut conn = match pool.acquire().await {
        Ok(conn) => conn,
        Err(e) => return Together::Failed(format!("no connection to the SQLite store: {e}")),
    };
    let mut tx = match conn.begin_with("BEGIN IMMEDIATE").await {
        Ok(tx) => tx,
        Err(e) => return Together::Failed(format!("could not start a write: {e}")),
    };
    let mut results = Vec::with_capacity(batch.len());
    for queued in batch {
        match queued.write.apply(&mut tx).await {
            Err(err @ StoreError::Backend(_)) => {
                // SQLite may already have rolled the transaction back itself
                // (e.g. on an I/O error); then ROLLBACK fails and sqlx's
                // count of open transactions is off: use a new connection.
                if tx.rollback().await.is_err() {
                    discard(conn);
                }
                return Together::RolledBack(err);
            }
            result => results.push(result),
        }
    }
    match tx.commit().await {
        Ok(()) => Together::Committed(results),
        Err(e) => {
            discard(conn);
            Together::Failed(format!("the write could not be committed: {e}"))
        }
    }
}

/// One write in its own transaction (or none, for a single statement), as
/// before the queue existed.
async fn write_one(pool: &SqlitePool, write: &Write) -> Result<i64, StoreError> {
    let mut conn = pool.acquire().await.map_err(StoreError::backend)?;
    if !write.needs_transaction() {
        return write.apply(&mut conn).await;
    }
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(StoreError::backend)?;
    match write.apply(&mut tx).await {
        Ok(value) => match tx.commit().await {
            Ok(()) => Ok(value),
            Err(e) => {
                discard(conn);
                Err(StoreError::backend(e))
            }
        },
        Err(err) => {
            if tx.rollback().await.is_err() {
                discard(conn);
            }
            Err(err)
        }
    }
}

/// A queued write, alone.
async fn write_alone(pool: &SqlitePool, queued: Queued) {
    if queued.reply.is_closed() {
        return;
    }
    let result = write_one(pool, &queued.write).await;
    let _ = queued.reply.send(result);
}

/// Closes a connection whose transaction state is unknown instead of giving
/// it back to the pool (which opens a new one when needed).
fn discard(mut conn: PoolConnection<Sqlite>) {
    conn.close_on_drop();
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Batches built by hand and written with [`write_batch`], so that the
    //! writes are certainly committed together.
    use askloop::{Message, RunRecord, RunStatus, RunStore, RunUpdate, Usage};

    use super::*;
    use crate::SqliteStore;

    async fn store() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("runs.db")).await.unwrap();
        (dir, store)
    }

    fn record(run_id: &str, messages: usize) -> RunRecord {
        let now = Utc::now();
        RunRecord {
            run_id: run_id.to_owned(),
            agent_id: "agent".to_owned(),
            thread_id: None,
            status: RunStatus::Running,
            version: 0,
            created_at: now,
            updated_at: now,
            pending: Vec::new(),
            step_results: Vec::new(),
            message_count: messages as i64,
            steps: 0,
            usage: Usage::default(),
            error: None,
            metadata: serde_json::Value::Null,
        }
    }

    fn bodies(texts: &[&str]) -> Vec<String> {
        texts
            .iter()
            .map(|t| serde_json::to_string(&Message::user(*t)).unwrap())
            .collect()
    }

    fn new_run(run_id: &str, texts: &[&str]) -> Write {
        let now = Utc::now().timestamp_micros();
        Write::Create {
            run: NewRun {
                run_id: run_id.to_owned(),
                agent_id: "agent".to_owned(),
                thread_id: None,
                status: "running",
                version: 0,
                created_at: now,
                updated_at: now,
                pending: "[]".to_owned(),
                step_results: "[]".to_owned(),
                steps: 0,
                usage: serde_json::to_string(&Usage::default()).unwrap(),
                error: None,
                metadata: "null".to_owned(),
            },
            bodies: bodies(texts),
        }
    }

    fn step(run_id: &str, expected_version: i64, status: RunStatus, texts: &[&str]) -> Write {
        Write::Update {
            step: Step {
                run_id: run_id.to_owned(),
                expected_version,
                status: status.as_str(),
                pending: "[]".to_owned(),
                step_results: "[]".to_owned(),
                steps: 1,
                usage: serde_json::to_string(&Usage::default()).unwrap(),
                error: None,
            },
            bodies: bodies(texts),
        }
    }

    fn claim(run_id: &str, expected_version: i64) -> Write {
        Write::Claim {
            run_id: run_id.to_owned(),
            expected_version,
        }
    }

    /// Writes `writes` as one batch; their results in order.
    async fn batch(store: &SqliteStore, writes: Vec<Write>) -> Vec<Result<i64, StoreError>> {
        let (queued, results): (Vec<_>, Vec<_>) = writes
            .into_iter()
            .map(|write| {
                let (reply, result) = oneshot::channel();
                (Queued { write, reply }, result)
            })
            .unzip();
        write_batch(&store.writer, queued).await;
        let mut out = Vec::new();
        for result in results {
            out.push(result.await.expect("every write of a batch gets its result"));
        }
        out
    }

    /// A run created with one message and suspended: version 1.
    async fn suspended(store: &SqliteStore, run_id: &str) {
        store
            .create(&record(run_id, 1), &[Message::user("start")])
            .await
            .unwrap();
        let version = store
            .update(RunUpdate {
                run_id,
                expected_version: 0,
                status: RunStatus::Suspended,
                pending: &[],
                step_results: &[],
                append: &[],
                steps: 1,
                usage: Usage::default(),
                error: None,
            })
            .await
            .unwrap();
        assert_eq!(version, 1);
    }

    fn texts(messages: &[Message]) -> Vec<String> {
        messages
            .iter()
            .map(|m| serde_json::to_value(m).unwrap()["content"].to_string())
            .collect()
    }

    #[tokio::test]
    async fn of_claims_of_one_run_in_one_batch_exactly_one_wins() {
        let (_dir, store) = store().await;
        suspended(&store, "a").await;
        let results = batch(&store, (0..5).map(|_| claim("a", 1)).collect()).await;
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "{results:?}");
        assert_eq!(*results[0].as_ref().unwrap(), 2);
        for lost in &results[1..] {
            assert!(
                matches!(lost, Err(StoreError::Conflict { run_id, .. }) if run_id == "a"),
                "{lost:?}"
            );
        }
        let run = store.get("a").await.unwrap().unwrap();
        assert_eq!((run.status, run.version), (RunStatus::Running, 2));
    }

    /// Each write of a batch gets its own result; refused ones change nothing
    /// and do not disturb the others, and later writes see earlier ones.
    #[tokio::test]
    async fn refused_writes_in_a_batch_leave_the_others_written() {
        let (_dir, store) = store().await;
        suspended(&store, "a").await;
        suspended(&store, "b").await;
        let results = batch(
            &store,
            vec![
                claim("a", 1),                                     // 2
                step("b", 7, RunStatus::Completed, &["stale"]),    // Conflict
                claim("a", 1),                                     // Conflict: sees the first claim
                step("a", 2, RunStatus::Completed, &["a1", "a2"]), // 3: sees the first claim
                new_run("a", &["again"]),                          // AlreadyExists
                step("missing", 0, RunStatus::Running, &["x"]),    // NotFound
                claim("missing", 0),                               // NotFound
                new_run("c", &["c0", "c1"]),                       // created
                step("c", 0, RunStatus::Running, &["c2"]),         // 1: sees the creation
                step("c", 0, RunStatus::Running, &["never"]),      // Conflict
            ],
        )
        .await;
        assert_eq!(*results[0].as_ref().unwrap(), 2);
        assert!(matches!(&results[1], Err(StoreError::Conflict { run_id, expected_version: 7 }) if run_id == "b"));
        assert!(matches!(&results[2], Err(StoreError::Conflict { run_id, .. }) if run_id == "a"));
        assert_eq!(*results[3].as_ref().unwrap(), 3);
        assert!(matches!(&results[4], Err(StoreError::AlreadyExists { run_id }) if run_id == "a"));
        assert!(matches!(&results[5], Err(StoreError::NotFound { run_id }) if run_id == "missing"));
        assert!(matches!(&results[6], Err(StoreError::NotFound { run_id }) if run_id == "missing"));
        assert_eq!(*results[7].as_ref().unwrap(), 0);
        assert_eq!(*results[8].as_ref().unwrap(), 1);
        assert!(matches!(&results[9], Err(StoreError::Conflict { run_id, .. }) if run_id == "c"));

        let a = store.get("a").await.unwrap().unwrap();
        assert_eq!((a.status, a.version, a.message_count), (RunStatus::Completed, 3, 3));
        assert_eq!(
            texts(&store.messages("a").await.unwrap()),
            ["\"start\"", "\"a1\"", "\"a2\""]
        );
        let b = store.get("b").await.unwrap().unwrap();
        assert_eq!((b.status, b.version, b.message_count), (RunStatus::Suspended, 1, 1));
        let c = store.get("c").await.unwrap().unwrap();
        assert_eq!((c.version, c.message_count), (1, 3));
        assert_eq!(
            texts(&store.messages("c").await.unwrap()),
            ["\"c0\"", "\"c1\"", "\"c2\""]
        );
        assert!(store.get("missing").await.unwrap().is_none());
    }

    /// A row written by a newer askloop is refused inside a batch; the
    /// others are written.
    #[tokio::test]
    async fn a_newer_row_in_a_batch_is_refused_alone() {
        let (_dir, store) = store().await;
        suspended(&store, "new").await;
        suspended(&store, "old").await;
        sqlx::query("UPDATE runs SET schema_version = ? WHERE run_id = 'new'")
            .bind(RUN_SCHEMA_VERSION + 1)
            .execute(&store.writer)
            .await
            .unwrap();
        let results = batch(
            &store,
            vec![
                claim("new", 1),
                claim("old", 1),
                step("new", 1, RunStatus::Completed, &["x"]),
            ],
        )
        .await;
        assert!(matches!(&results[0], Err(StoreError::NewerSchema { run_id, .. }) if run_id == "new"));
        assert_eq!(*results[1].as_ref().unwrap(), 2);
        assert!(matches!(&results[2], Err(StoreError::NewerSchema { run_id, .. }) if run_id == "new"));
        let row: (i64, i64) = sqlx::query_as("SELECT version, message_count FROM runs WHERE run_id = 'new'")
            .fetch_one(&store.readers)
            .await
            .unwrap();
        assert_eq!(row, (1, 1));
    }

    /// A statement failing half-way through a write (here: a stray message
    /// row where the step's new message goes) rolls the batch back; each
    /// write is then run alone, so only that one fails, and it leaves
    /// nothing half-written.
    #[tokio::test]
    async fn a_write_failing_half_way_fails_alone_and_leaves_nothing_behind() {
        let (_dir, store) = store().await;
        suspended(&store, "a").await;
        suspended(&store, "broken").await;
        sqlx::query("INSERT INTO messages (run_id, seq, body) VALUES ('broken', 1, '\"stray\"')")
            .execute(&store.writer)
            .await
            .unwrap();
        let results = batch(
            &store,
            vec![
                claim("a", 1),
                new_run("c", &["c0"]),
                claim("broken", 1),
                step("broken", 2, RunStatus::Completed, &["b1"]),
                step("a", 2, RunStatus::Completed, &["a1"]),
            ],
        )
        .await;
        assert_eq!(*results[0].as_ref().unwrap(), 2);
        assert_eq!(*results[1].as_ref().unwrap(), 0);
        assert_eq!(*results[2].as_ref().unwrap(), 2);
        assert!(matches!(&results[3], Err(StoreError::Backend(_))), "{:?}", results[3]);
        assert_eq!(*results[4].as_ref().unwrap(), 3);

        // The failed step changed neither the row nor the messages.
        let broken = store.get("broken").await.unwrap().unwrap();
        assert_eq!(
            (broken.status, broken.version, broken.message_count),
            (RunStatus::Running, 2, 1)
        );
        let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE run_id = 'broken'")
            .fetch_one(&store.readers)
            .await
            .unwrap();
        assert_eq!(rows, 2, "the first message and the stray one");
        assert_eq!(store.get("a").await.unwrap().unwrap().message_count, 2);
        assert_eq!(store.get("c").await.unwrap().unwrap().message_count, 1);
        // The store goes on writing.
        assert_eq!(
            store.claim("missing", 0).await.unwrap_err().to_string(),
            "run missing not found"
        );
        store.create(&record("d", 0), &[]).await.unwrap();
    }

    #[tokio::test]
    async fn after_close_writes_fail_and_queued_ones_were_done() {
        let (_dir, store) = store().await;
        let writes: Vec<_> = (0..20)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { store.create(&record(&format!("r{i}"), 0), &[]).await })
            })
            .collect();
        for write in writes {
            write.await.unwrap().unwrap();
        }
        store.close().await;
        let err = store.create(&record("late", 0), &[]).await.unwrap_err();
        assert!(err.to_string().contains("closed"), "{err}");
    }
}

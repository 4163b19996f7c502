//! The writes of threads, run on the store's one write thread: a thread
//! created, renamed or deleted, and a run's messages appended to its thread
//! in the transaction of the run write. Appends need no lock of their own:
//! every write of the file goes through the write thread under SQLite's
//! write lock, so a thread's `message_count` read and bumped in one write is
//! never bumped by another in between.

use askloop::StoreError;
use rusqlite::{Connection, OptionalExtension, params};

use crate::row::sqlite_finished_condition;

/// How many thread messages one `INSERT` writes at most (7 variables a
/// row: 700 a statement, under the oldest SQLite limit of 999).
const MESSAGES_PER_INSERT: usize = 100;

pub(crate) const THREAD_COLUMNS: &str =
    "resource_id, thread_id, agent_id, title, metadata, created_at, updated_at, message_count";

/// Where a run's messages go on its thread.
pub(crate) struct Append<'a> {
    pub(crate) resource_id: &'a str,
    pub(crate) thread_id: &'a str,
    /// The agent of the run, for a thread the run creates.
    pub(crate) agent_id: &'a str,
    pub(crate) run_id: &'a str,
    /// The first message's place among the run's own messages.
    pub(crate) first_run_seq: i64,
    /// When (microseconds).
    pub(crate) at: i64,
}

/// Appends `bodies` to the thread (created if it does not exist), numbered
/// from its counter; inside the caller's transaction.
pub(crate) fn append(conn: &Connection, to: &Append<'_>, bodies: &[String]) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO threads (resource_id, thread_id, agent_id, title, metadata, created_at, updated_at, \
         message_count) VALUES (?, ?, ?, '', 'null', ?, ?, 0) ON CONFLICT DO NOTHING",
    )
    .and_then(|mut insert| insert.execute(params![to.resource_id, to.thread_id, to.agent_id, to.at, to.at]))
    .map_err(StoreError::backend)?;
    let count = bodies.len() as i64;
    let end: i64 = conn
        .prepare_cached(
            "UPDATE threads SET message_count = message_count + ?, updated_at = ? \
             WHERE resource_id = ? AND thread_id = ? RETURNING message_count",
        )
        .and_then(|mut bump| bump.query_row(params![count, to.at, to.resource_id, to.thread_id], |row| row.get(0)))
        .map_err(StoreError::backend)?;
    let first_seq = end - count;
    for (chunk_index, chunk) in bodies.chunks(MESSAGES_PER_INSERT).enumerate() {
        let offset = (chunk_index * MESSAGES_PER_INSERT) as i64;
        let rows = vec!["(?, ?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ");
        let sql = format!(
            "INSERT INTO thread_messages (resource_id, thread_id, seq, run_id, run_seq, body, created_at) VALUES {rows}"
        );
        let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(chunk.len() * 7);
        let seqs: Vec<(i64, i64)> = (0..chunk.len() as i64)
            .map(|i| (first_seq + offset + i, to.first_run_seq + offset + i))
            .collect();
        for (body, (seq, run_seq)) in chunk.iter().zip(&seqs) {
            values.extend([
                &to.resource_id as &dyn rusqlite::ToSql,
                &to.thread_id,
                seq,
                &to.run_id,
                run_seq,
                body,
                &to.at,
            ]);
        }
        conn.prepare_cached(&sql)
            .and_then(|mut insert| insert.execute(values.as_slice()))
            .map_err(StoreError::backend)?;
    }
    Ok(())
}

/// A `threads` row to insert.
#[derive(Debug)]
pub(crate) struct NewThread {
    pub(crate) resource_id: String,
    pub(crate) thread_id: String,
    pub(crate) agent_id: String,
    pub(crate) title: String,
    pub(crate) metadata: String,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

/// A change of a thread's title or metadata.
#[derive(Debug)]
pub(crate) struct ThreadChange {
    pub(crate) resource_id: String,
    pub(crate) thread_id: String,
    pub(crate) title: Option<String>,
    pub(crate) metadata: Option<String>,
    pub(crate) at: i64,
}

pub(crate) fn create(conn: &Connection, thread: &NewThread) -> Result<i64, StoreError> {
    let inserted = conn
        .prepare_cached(&format!(
            "INSERT INTO threads ({THREAD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, 0)"
        ))
        .and_then(|mut insert| {
            insert.execute(params![
                thread.resource_id,
                thread.thread_id,
                thread.agent_id,
                thread.title,
                thread.metadata,
                thread.created_at,
                thread.updated_at,
            ])
        });
    match inserted {
        Ok(_) => Ok(0),
        Err(rusqlite::Error::SqliteFailure(e, _)) if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
            Err(StoreError::ThreadExists {
                resource_id: thread.resource_id.clone(),
                thread_id: thread.thread_id.clone(),
            })
        }
        Err(err) => Err(StoreError::backend(err)),
    }
}

pub(crate) fn update(conn: &Connection, change: &ThreadChange) -> Result<i64, StoreError> {
    conn.prepare_cached(
        "UPDATE threads SET title = COALESCE(?, title), metadata = COALESCE(?, metadata), updated_at = ? \
         WHERE resource_id = ? AND thread_id = ?",
    )
    .and_then(|mut update| {
        update.execute(params![
            change.title,
            change.metadata,
            change.at,
            change.resource_id,
            change.thread_id
        ])
    })
    .map(|changed| changed as i64)
    .map_err(StoreError::backend)
}

/// [`delete`]'s result when there is no such thread.
pub(crate) const NOT_FOUND: i64 = -1;
/// [`delete`]'s result when runs of the thread are not finished.
pub(crate) const BUSY: i64 = -2;

/// Deletes a thread with its messages and its runs (their messages by
/// `ON DELETE CASCADE`), unless one of its runs is not finished; inside
/// the write's transaction. Result: how many runs went, or [`NOT_FOUND`]
/// or [`BUSY`] (nothing changed).
pub(crate) fn delete(conn: &Connection, resource_id: &str, thread_id: &str) -> Result<i64, StoreError> {
    let exists = conn
        .prepare_cached("SELECT 1 FROM threads WHERE resource_id = ? AND thread_id = ?")
        .and_then(|mut select| select.query_row(params![resource_id, thread_id], |_| Ok(())).optional())
        .map_err(StoreError::backend)?;
    if exists.is_none() {
        return Ok(NOT_FOUND);
    }
    let unfinished: i64 = conn
        .prepare_cached(concat!(
            "SELECT COUNT(*) FROM runs WHERE memory_resource_id = ? AND memory_thread_id = ? AND NOT ",
            sqlite_finished_condition!()
        ))
        .and_then(|mut count| count.query_row(params![resource_id, thread_id], |row| row.get(0)))
        .map_err(StoreError::backend)?;
    if unfinished > 0 {
        return Ok(BUSY);
    }
    let runs = conn
        .prepare_cached("DELETE FROM runs WHERE memory_resource_id = ? AND memory_thread_id = ?")
        .and_then(|mut delete| delete.execute(params![resource_id, thread_id]))
        .map_err(StoreError::backend)?;
    conn.prepare_cached("DELETE FROM threads WHERE resource_id = ? AND thread_id = ?")
        .and_then(|mut delete| delete.execute(params![resource_id, thread_id]))
        .map_err(StoreError::backend)?;
    // Its approvals that stick go with it: a new thread of the same id is
    // another conversation.
    conn.prepare_cached("DELETE FROM grants WHERE resource_id = ? AND thread_id = ? AND scope = 'thread'")
        .and_then(|mut delete| delete.execute(params![resource_id, thread_id]))
        .map_err(StoreError::backend)?;
    Ok(runs as i64)
}

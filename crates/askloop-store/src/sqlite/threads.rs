//! Threads in SQLite: the reads, and [`ThreadStore`] for [`SqliteStore`].
//! The writes run on the store's one write thread (`writes/threads.rs`).

use askloop::{Thread, ThreadDeletion, ThreadEdit, ThreadKey, ThreadMessage, ThreadQuery, ThreadStore};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::params;

use super::writes::Write;
use super::writes::threads::{BUSY, NOT_FOUND, NewThread, THREAD_COLUMNS, ThreadChange};
use super::{SqliteStore, micros};
use crate::row::{parse_message, sqlite_finished_condition};
use askloop::StoreError;

/// A damaged thread row.
fn corrupt(resource_id: &str, thread_id: &str, detail: String) -> StoreError {
    StoreError::ThreadCorrupt {
        resource_id: resource_id.to_owned(),
        thread_id: thread_id.to_owned(),
        detail,
    }
}

fn time(value: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_micros(value)
}

/// Reads a `thread_messages` row of the thread `key` whose columns `seq,
/// run_id, run_seq, body, created_at` start at `first`.
fn read_message(key: &ThreadKey, row: &rusqlite::Row<'_>, first: usize) -> Result<ThreadMessage, StoreError> {
    let seq: i64 = row.get(first).map_err(StoreError::backend)?;
    let bad = |e: rusqlite::Error| corrupt(&key.resource_id, &key.thread_id, format!("message {seq}: {e}"));
    let run_id: String = row.get(first + 1).map_err(bad)?;
    let run_seq: i64 = row.get(first + 2).map_err(bad)?;
    let body: String = row.get(first + 3).map_err(bad)?;
    let at: i64 = row.get(first + 4).map_err(bad)?;
    let created_at = time(at).ok_or_else(|| {
        corrupt(
            &key.resource_id,
            &key.thread_id,
            format!("message {seq}: created_at: {at} is not a time"),
        )
    })?;
    Ok(ThreadMessage {
        message: parse_message(&run_id, run_seq, &body)?,
        seq,
        run_id,
        run_seq,
        created_at,
    })
}

/// Reads a `threads` row (columns as in [`THREAD_COLUMNS`]).
fn read_thread(row: &rusqlite::Row<'_>) -> Result<Thread, StoreError> {
    let resource_id: String = row.get(0).map_err(StoreError::backend)?;
    let id: String = row.get(1).map_err(StoreError::backend)?;
    let bad = |detail: String| corrupt(&resource_id, &id, detail);
    let column = |e: rusqlite::Error| bad(e.to_string());
    let metadata: String = row.get(4).map_err(column)?;
    let metadata = serde_json::from_str(&metadata).map_err(|e| bad(format!("metadata: {e}")))?;
    let created_at: i64 = row.get(5).map_err(column)?;
    let updated_at: i64 = row.get(6).map_err(column)?;
    let message_count: i64 = row.get(7).map_err(column)?;
    if message_count < 0 {
        return Err(bad(format!("message_count: {message_count} is negative")));
    }
    Ok(Thread {
        agent_id: row.get(2).map_err(column)?,
        title: row.get(3).map_err(column)?,
        metadata,
        created_at: time(created_at).ok_or_else(|| bad(format!("created_at: {created_at} is not a time")))?,
        updated_at: time(updated_at).ok_or_else(|| bad(format!("updated_at: {updated_at} is not a time")))?,
        message_count,
        id: id.clone(),
        resource_id: resource_id.clone(),
    })
}

/// The `WHERE` clause of a listing of threads, and its values followed by
/// those of `LIMIT ? OFFSET ?`.
fn thread_filter(query: &ThreadQuery) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value;
    let mut conditions = Vec::with_capacity(3);
    let mut values = Vec::with_capacity(5);
    for (column, value) in [
        ("resource_id = ?", &query.resource_id),
        ("agent_id = ?", &query.agent_id),
        ("thread_id = ?", &query.thread_id),
    ] {
        if let Some(value) = value {
            conditions.push(column);
            values.push(Value::Text(value.clone()));
        }
    }
    (
        super::page_filter(&conditions, &mut values, query.limit, query.offset),
        values,
    )
}

#[async_trait]
impl ThreadStore for SqliteStore {
    async fn create_thread(&self, thread: &Thread) -> Result<(), StoreError> {
        let metadata = serde_json::to_string(&thread.metadata)
            .map_err(|e| corrupt(&thread.resource_id, &thread.id, format!("metadata: {e}")))?;
        self.write(Write::CreateThread(NewThread {
            resource_id: thread.resource_id.clone(),
            thread_id: thread.id.clone(),
            agent_id: thread.agent_id.clone(),
            title: thread.title.clone(),
            metadata,
            created_at: micros(thread.created_at),
            updated_at: micros(thread.updated_at),
        }))
        .await?;
        Ok(())
    }

    async fn thread(&self, key: &ThreadKey) -> Result<Option<Thread>, StoreError> {
        self.read(|conn| {
            let mut select = conn
                .prepare_cached(&format!(
                    "SELECT {THREAD_COLUMNS} FROM threads WHERE resource_id = ? AND thread_id = ?"
                ))
                .map_err(StoreError::backend)?;
            let mut rows = select
                .query(params![key.resource_id, key.thread_id])
                .map_err(StoreError::backend)?;
            match rows.next().map_err(StoreError::backend)? {
                Some(row) => read_thread(row).map(Some),
                None => Ok(None),
            }
        })
    }

    async fn update_thread(&self, key: &ThreadKey, edit: ThreadEdit<'_>) -> Result<Option<Thread>, StoreError> {
        let metadata = edit
            .metadata
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| corrupt(&key.resource_id, &key.thread_id, format!("metadata: {e}")))?;
        let changed = self
            .write(Write::UpdateThread(ThreadChange {
                resource_id: key.resource_id.clone(),
                thread_id: key.thread_id.clone(),
                title: edit.title.map(str::to_owned),
                metadata,
                at: self.now(),
            }))
            .await?;
        if changed == 0 {
            return Ok(None);
        }
        self.thread(key).await
    }

    async fn threads(&self, query: &ThreadQuery) -> Result<Vec<Thread>, StoreError> {
        let (filter, values) = thread_filter(query);
        let sql = format!(
            "SELECT {THREAD_COLUMNS} FROM threads{filter} ORDER BY created_at DESC, thread_id DESC LIMIT ? OFFSET ?"
        );
        self.read(|conn| {
            let mut select = conn.prepare_cached(&sql).map_err(StoreError::backend)?;
            let mut rows = select
                .query(rusqlite::params_from_iter(values))
                .map_err(StoreError::backend)?;
            let mut read = Vec::new();
            while let Some(row) = rows.next().map_err(StoreError::backend)? {
                read.push(read_thread(row));
            }
            crate::readable_threads(read.into_iter())
        })
    }

    async fn count_threads(&self, query: &ThreadQuery) -> Result<u64, StoreError> {
        let (filter, values) = thread_filter(query);
        let sql = format!("SELECT COUNT(*) FROM (SELECT 1 FROM threads{filter} LIMIT ? OFFSET ?)");
        self.count_rows(&sql, values)
    }

    async fn thread_messages(&self, key: &ThreadKey, from: i64, limit: u32) -> Result<Vec<ThreadMessage>, StoreError> {
        self.read(|conn| {
            let mut select = conn
                .prepare_cached(
                    "SELECT seq, run_id, run_seq, body, created_at FROM thread_messages \
                     WHERE resource_id = ? AND thread_id = ? AND seq >= ? ORDER BY seq LIMIT ?",
                )
                .map_err(StoreError::backend)?;
            let mut rows = select
                .query(params![key.resource_id, key.thread_id, from, i64::from(limit)])
                .map_err(StoreError::backend)?;
            let mut messages = Vec::new();
            while let Some(row) = rows.next().map_err(StoreError::backend)? {
                messages.push(read_message(key, row, 0)?);
            }
            Ok(messages)
        })
    }

    async fn first_messages(&self, keys: &[ThreadKey]) -> Result<Vec<(ThreadKey, ThreadMessage)>, StoreError> {
        self.read(|conn| {
            let mut found = Vec::with_capacity(keys.len());
            // Two variables a thread: under the oldest SQLite limit of 999.
            for chunk in keys.chunks(400) {
                let pairs = vec!["(?, ?)"; chunk.len()].join(", ");
                let mut select = conn
                    .prepare_cached(&format!(
                        "SELECT resource_id, thread_id, seq, run_id, run_seq, body, created_at FROM thread_messages \
                         WHERE seq = 0 AND (resource_id, thread_id) IN (VALUES {pairs})"
                    ))
                    .map_err(StoreError::backend)?;
                let values: Vec<&dyn rusqlite::ToSql> = chunk
                    .iter()
                    .flat_map(|key| [&key.resource_id as &dyn rusqlite::ToSql, &key.thread_id])
                    .collect();
                let mut rows = select.query(values.as_slice()).map_err(StoreError::backend)?;
                while let Some(row) = rows.next().map_err(StoreError::backend)? {
                    let key = ThreadKey::new(
                        row.get::<_, String>(0).map_err(StoreError::backend)?,
                        row.get::<_, String>(1).map_err(StoreError::backend)?,
                    );
                    let first = read_message(&key, row, 2)?;
                    found.push((key, first));
                }
            }
            Ok(found)
        })
    }

    async fn delete_thread(&self, key: &ThreadKey) -> Result<ThreadDeletion, StoreError> {
        let result = self
            .write(Write::DeleteThread {
                resource_id: key.resource_id.clone(),
                thread_id: key.thread_id.clone(),
            })
            .await?;
        match result {
            NOT_FOUND => Ok(ThreadDeletion::NotFound),
            BUSY => {
                let runs = self.read(|conn| {
                    let mut select = conn
                        .prepare_cached(concat!(
                            "SELECT run_id FROM runs WHERE memory_resource_id = ? AND memory_thread_id = ? AND NOT ",
                            sqlite_finished_condition!(),
                            " ORDER BY run_id"
                        ))
                        .map_err(StoreError::backend)?;
                    let ids = select
                        .query_map(params![key.resource_id, key.thread_id], |row| row.get::<_, String>(0))
                        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                        .map_err(StoreError::backend)?;
                    Ok(ids)
                })?;
                Ok(ThreadDeletion::Busy { runs })
            }
            _ => Ok(ThreadDeletion::Deleted),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use askloop::{Message, RunMemory, RunStore, ThreadKey, ThreadStore};

    use crate::SqliteStore;
    use crate::conformance::new_run;

    /// A store with thread `ana/t1` holding one message, and a raw
    /// connection to its file.
    async fn with_thread() -> (tempfile::TempDir, SqliteStore, rusqlite::Connection) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("runs.db")).await.unwrap();
        let mut run = new_run("r1", "agent", chrono::Utc::now(), 1);
        run.memory = Some(RunMemory {
            key: ThreadKey::new("ana", "t1"),
            context: 0,
        });
        store.create(&run, &[Message::user("hello")]).await.unwrap();
        let raw = rusqlite::Connection::open(dir.path().join("runs.db")).unwrap();
        (dir, store, raw)
    }

    #[tokio::test]
    async fn a_damaged_thread_row_is_reported_naming_the_thread_and_not_a_run() {
        let (_dir, store, raw) = with_thread().await;
        raw.execute("UPDATE threads SET metadata = '{not json'", []).unwrap();
        let err = store.thread(&ThreadKey::new("ana", "t1")).await.unwrap_err();
        assert!(
            matches!(&err, askloop::StoreError::ThreadCorrupt { resource_id, thread_id, detail }
                if resource_id == "ana" && thread_id == "t1" && detail.contains("metadata")),
            "{err:?}"
        );
        // A listing leaves it out and goes on with the others.
        let mut other = new_run("r2", "agent", chrono::Utc::now(), 1);
        other.memory = Some(RunMemory {
            key: ThreadKey::new("ana", "t2"),
            context: 0,
        });
        store.create(&other, &[Message::user("hi")]).await.unwrap();
        let listed = store.threads(&askloop::ThreadQuery::default()).await.unwrap();
        let ids: Vec<&str> = listed.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["t2"]);
    }

    #[tokio::test]
    async fn a_damaged_thread_message_is_reported_naming_the_run_that_wrote_it() {
        let (_dir, store, raw) = with_thread().await;
        raw.execute("UPDATE thread_messages SET body = 'not a message'", [])
            .unwrap();
        let err = store
            .thread_messages(&ThreadKey::new("ana", "t1"), 0, 10)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, askloop::StoreError::Corrupt { run_id, .. } if run_id == "r1"),
            "{err:?}"
        );
    }
}

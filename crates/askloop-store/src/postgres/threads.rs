//! Threads in a [`PostgresStore`]: the `threads` and `thread_messages`
//! tables (migration 7).
//!
//! A run on a thread appends its messages in the transaction of its own
//! write ([`PostgresStore::append_to_thread`]): one `INSERT ... ON CONFLICT
//! DO UPDATE` creates the thread if it is missing or bumps its message
//! count, which locks the thread's row until the write commits, so
//! concurrent runs on one thread take turns and number their messages in
//! one dense sequence. Writes lock a run's row first and its thread's
//! second; deleting a thread locks the thread and then never waits for a
//! run's row (see [`PostgresStore::delete_locked_thread`]), so the two never
//! wait on each other in a circle.
//!
//! Ids holding NUL cannot be stored (PostgreSQL's text refuses it), so a
//! read or a listing naming one finds nothing, as for agent ids; titles,
//! metadata and message bodies are stored with NUL spelled as `nul.rs`
//! says.

use askloop::{StoreError, Thread, ThreadDeletion, ThreadEdit, ThreadKey, ThreadMessage, ThreadQuery, ThreadStore};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::{PostgresStore, changes, nul};
use crate::row::{finished_condition, parse_message, to_json};

/// The columns [`read_thread`] reads.
const THREAD_COLUMNS: &str =
    "resource_id, thread_id, agent_id, title, metadata::text AS metadata, created_at, updated_at, message_count";

/// The statement of [`RUNS_OF_THREAD`].
macro_rules! runs_of_thread {
    () => {
        concat!(
            "SELECT run_id, ",
            finished_condition!(),
            " AS finished FROM runs WHERE memory_resource_id = $1 AND memory_thread_id = $2 ORDER BY run_id"
        )
    };
}

/// The runs on thread `$1, $2` as committed now, each with whether it is
/// finished (spelled as `finished_condition!`), by id.
const RUNS_OF_THREAD: &str = runs_of_thread!();

/// [`RUNS_OF_THREAD`], each run's row locked until the transaction ends,
/// leaving out those another transaction holds (without waiting for them).
const RUNS_OF_THREAD_LOCKED: &str = concat!(runs_of_thread!(), " FOR UPDATE SKIP LOCKED");

/// Up to `$4` messages of thread `$1, $2` from sequence number `$3`, in
/// order, read by the primary key however long the thread.
pub(super) const MESSAGES_FROM: &str = "SELECT seq, run_id, run_seq, body::text AS body, created_at \
     FROM thread_messages WHERE resource_id = $1 AND thread_id = $2 AND seq >= $3 ORDER BY seq LIMIT $4";

/// Whether `key` holds NUL, which no stored thread's key can.
fn holds_nul(key: &ThreadKey) -> bool {
    key.resource_id.contains('\0') || key.thread_id.contains('\0')
}

/// A thread's key for messages: "thread T of resource R".
fn describe(key: &ThreadKey) -> String {
    format!("thread {} of resource {}", key.thread_id, key.resource_id)
}

/// A damaged thread row.
fn corrupt_thread(key: &ThreadKey, detail: String) -> StoreError {
    StoreError::ThreadCorrupt {
        resource_id: key.resource_id.clone(),
        thread_id: key.thread_id.clone(),
        detail,
    }
}

/// One `threads` row as a [`Thread`].
fn read_thread(row: &PgRow) -> Result<Thread, StoreError> {
    let text = |name: &str| row.try_get::<String, _>(name);
    let (resource_id, id) = match (text("resource_id"), text("thread_id")) {
        (Ok(resource_id), Ok(id)) => (resource_id, id),
        (Err(e), _) | (_, Err(e)) => {
            return Err(StoreError::backend(super::errors::PostgresFailure(format!(
                "reading a thread's key: {e}"
            ))));
        }
    };
    let key = ThreadKey::new(resource_id, id);
    let column = |name: &str, e: sqlx::Error| corrupt_thread(&key, format!("{name}: {e}"));
    let metadata = text("metadata").map_err(|e| column("metadata", e))?;
    let metadata = serde_json::from_str(&nul::decode_json(metadata))
        .map_err(|e| corrupt_thread(&key, format!("metadata: {e}")))?;
    let message_count: i64 = row.try_get("message_count").map_err(|e| column("message_count", e))?;
    if message_count < 0 {
        return Err(corrupt_thread(
            &key,
            format!("message_count: {message_count} is negative"),
        ));
    }
    Ok(Thread {
        agent_id: text("agent_id").map_err(|e| column("agent_id", e))?,
        title: nul::decode_text(text("title").map_err(|e| column("title", e))?),
        metadata,
        created_at: row.try_get("created_at").map_err(|e| column("created_at", e))?,
        updated_at: row.try_get("updated_at").map_err(|e| column("updated_at", e))?,
        message_count,
        id: key.thread_id,
        resource_id: key.resource_id,
    })
}

/// One `thread_messages` row as a [`ThreadMessage`]. A body that cannot be
/// read is [`StoreError::Corrupt`] naming the run that wrote it.
fn read_message(key: &ThreadKey, row: &PgRow) -> Result<ThreadMessage, StoreError> {
    let seq: i64 = row
        .try_get("seq")
        .map_err(|e| corrupt_thread(key, format!("a message's seq: {e}")))?;
    let run_id: String = row
        .try_get("run_id")
        .map_err(|e| corrupt_thread(key, format!("message {seq}: run_id: {e}")))?;
    let at = |what: &str, e: sqlx::Error| StoreError::Corrupt {
        run_id: run_id.clone(),
        detail: format!("message {seq} of {}: {what}: {e}", describe(key)),
    };
    let run_seq: i64 = row.try_get("run_seq").map_err(|e| at("run_seq", e))?;
    let body: String = row.try_get("body").map_err(|e| at("body", e))?;
    let created_at: DateTime<Utc> = row.try_get("created_at").map_err(|e| at("created_at", e))?;
    let message = parse_message(&run_id, run_seq, &nul::decode_json(body)).map_err(|e| match e {
        StoreError::Corrupt { run_id, detail } => StoreError::Corrupt {
            detail: format!("{detail} (message {seq} of {})", describe(key)),
            run_id,
        },
        other => other,
    })?;
    Ok(ThreadMessage {
        seq,
        run_id,
        run_seq,
        message,
        created_at,
    })
}

/// The `WHERE` clause of a listing of threads for `query` (or nothing).
/// `$1` and `$2` are the limit and offset; the conditions take `$3` on, as
/// [`bind_query`] binds them.
fn thread_filter(query: &ThreadQuery) -> String {
    let mut conditions = Vec::with_capacity(3);
    let mut next = 3;
    if query.resource_id.is_some() {
        conditions.push(format!("resource_id = ${next}"));
        next += 1;
    }
    if query.agent_id.is_some() {
        conditions.push(format!("agent_id = ${next}"));
        next += 1;
    }
    if query.thread_id.is_some() {
        conditions.push(format!("thread_id = ${next}"));
    }
    if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    }
}

/// The statement listing the threads `query` asks for, newest first, from
/// the index of its filter (`threads_by_resource`, `threads_by_agent`,
/// `threads_by_created`).
pub(super) fn listing_statement(query: &ThreadQuery) -> String {
    format!(
        "SELECT {THREAD_COLUMNS} FROM threads{} ORDER BY created_at DESC, thread_id DESC LIMIT $1 OFFSET $2",
        thread_filter(query)
    )
}

/// `sql` (a statement over [`thread_filter`]) with `query`'s values bound:
/// the limit (NULL: none), the offset, then the conditions'.
fn bind_query(sql: String, query: &ThreadQuery) -> sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(query.limit.map(i64::from))
        .bind(i64::from(query.offset));
    if let Some(resource_id) = &query.resource_id {
        q = q.bind(resource_id);
    }
    if let Some(agent_id) = &query.agent_id {
        q = q.bind(agent_id);
    }
    if let Some(thread_id) = &query.thread_id {
        q = q.bind(thread_id);
    }
    q
}

/// Whether `query` names an id holding NUL, which no stored thread has.
fn finds_nothing(query: &ThreadQuery) -> bool {
    [&query.resource_id, &query.agent_id, &query.thread_id]
        .into_iter()
        .any(|id| id.as_deref().is_some_and(|id| id.contains('\0')))
}

/// A run's messages to append to its thread.
pub(super) struct Append<'a> {
    /// The thread.
    pub(super) key: &'a ThreadKey,
    /// The run's agent: the thread's, if the run creates it.
    pub(super) agent_id: &'a str,
    /// The run.
    pub(super) run_id: &'a str,
    /// The first message's place in the run's own messages.
    pub(super) first_run_seq: i64,
    /// The messages, storable (see `message_bodies` in `postgres.rs`).
    pub(super) bodies: &'a [String],
    /// The time of the write.
    pub(super) now: DateTime<Utc>,
}

impl PostgresStore {
    /// Appends a run's messages to its thread in `tx` (see [`Append`]),
    /// creating the thread if it does not exist. The thread's row stays
    /// locked until `tx` ends, so appenders to one thread take turns; a
    /// thread created or deleted meanwhile by another transaction is waited
    /// for and then updated or created again, never an error.
    pub(super) async fn append_to_thread(&self, tx: &mut PgConnection, append: Append<'_>) -> Result<(), StoreError> {
        let Append {
            key,
            agent_id,
            run_id,
            first_run_seq,
            bodies,
            now,
        } = append;
        let appending = || format!("appending the messages of run {run_id} to {}", describe(key));
        let added = bodies.len() as i64;
        // An append of nothing creates a missing thread and leaves an
        // existing one as it was, but still locks its row: a deletion of
        // the thread then waits for this write, which may add a run to it.
        let first: i64 = sqlx::query_scalar(
            "INSERT INTO threads AS t (resource_id, thread_id, agent_id, title, metadata, created_at, updated_at, \
             message_count) VALUES ($1, $2, $3, '', 'null'::jsonb, $4, $4, $5) \
             ON CONFLICT (resource_id, thread_id) DO UPDATE SET message_count = t.message_count + $5, \
             updated_at = CASE WHEN $5 > 0 THEN $4 ELSE t.updated_at END \
             RETURNING t.message_count - $5",
        )
        .bind(&key.resource_id)
        .bind(&key.thread_id)
        .bind(agent_id)
        .bind(now)
        .bind(added)
        .fetch_one(&mut *tx)
        .await
        .map_err(self.failed(appending))?;
        if bodies.is_empty() {
            return Ok(());
        }
        sqlx::query(
            "INSERT INTO thread_messages (resource_id, thread_id, seq, run_id, run_seq, body, created_at) \
             SELECT $1, $2, $3 + m.ord - 1, $4, $5 + m.ord - 1, m.body::jsonb, $6 \
             FROM UNNEST($7::text[]) WITH ORDINALITY AS m(body, ord)",
        )
        .bind(&key.resource_id)
        .bind(&key.thread_id)
        .bind(first)
        .bind(run_id)
        .bind(first_run_seq)
        .bind(now)
        .bind(bodies)
        .execute(&mut *tx)
        .await
        .map_err(self.failed(appending))?;
        Ok(())
    }

    /// Deletes thread `key` (see [`ThreadStore::delete_thread`]) in one
    /// transaction. It locks the thread's row first: a write adding a run
    /// or messages to the thread holds that row until it commits, so once
    /// it is held the thread's runs are all visible and no other can join.
    /// It then locks those runs without waiting for any (`SKIP LOCKED`):
    /// a write appending to the thread locks its run's row before the
    /// thread's, so waiting here could close a circle. A run whose row
    /// another write holds is being written, and counts as busy.
    async fn delete_locked_thread(&self, key: &ThreadKey) -> Result<ThreadDeletion, StoreError> {
        let deleting = || format!("deleting {}", describe(key));
        let mut tx = self.pool.begin().await.map_err(self.failed(deleting))?;
        let found: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM threads WHERE resource_id = $1 AND thread_id = $2 FOR UPDATE")
                .bind(&key.resource_id)
                .bind(&key.thread_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(self.failed(deleting))?;
        if found.is_none() {
            tx.rollback().await.map_err(self.failed(deleting))?;
            return Ok(ThreadDeletion::NotFound);
        }
        let on_thread: Vec<(String, bool)> = sqlx::query_as(RUNS_OF_THREAD)
            .bind(&key.resource_id)
            .bind(&key.thread_id)
            .fetch_all(&mut *tx)
            .await
            .map_err(self.failed(deleting))?;
        let locked: Vec<(String, bool)> = sqlx::query_as(RUNS_OF_THREAD_LOCKED)
            .bind(&key.resource_id)
            .bind(&key.thread_id)
            .fetch_all(&mut *tx)
            .await
            .map_err(self.failed(deleting))?;
        // Unfinished as locked now, or held by a write in progress.
        let mut busy: Vec<String> = on_thread
            .into_iter()
            .filter(|(run_id, _)| {
                locked
                    .iter()
                    .find(|(id, _)| id == run_id)
                    .is_none_or(|(_, finished)| !finished)
            })
            .map(|(run_id, _)| run_id)
            .collect();
        if !busy.is_empty() {
            tx.rollback().await.map_err(self.failed(deleting))?;
            busy.sort();
            return Ok(ThreadDeletion::Busy { runs: busy });
        }
        // The runs' messages go with them, the thread's with it (ON DELETE
        // CASCADE).
        sqlx::query("DELETE FROM runs WHERE memory_resource_id = $1 AND memory_thread_id = $2")
            .bind(&key.resource_id)
            .bind(&key.thread_id)
            .execute(&mut *tx)
            .await
            .map_err(self.failed(deleting))?;
        sqlx::query("DELETE FROM threads WHERE resource_id = $1 AND thread_id = $2")
            .bind(&key.resource_id)
            .bind(&key.thread_id)
            .execute(&mut *tx)
            .await
            .map_err(self.failed(deleting))?;
        // Its approvals that stick go with it: a new thread of the same id
        // is another conversation.
        sqlx::query("DELETE FROM grants WHERE resource_id = $1 AND thread_id = $2 AND scope = 'thread'")
            .bind(&key.resource_id)
            .bind(&key.thread_id)
            .execute(&mut *tx)
            .await
            .map_err(self.failed(deleting))?;
        // The change feed hears of each deleted run, as of any write.
        let payloads = locked
            .iter()
            .map(|(run_id, _)| changes::payload(&self.schema, run_id))
            .collect::<Result<Vec<_>, _>>()?;
        if !payloads.is_empty() {
            sqlx::query("SELECT pg_notify($1, p) FROM UNNEST($2::text[]) AS p")
                .bind(changes::CHANNEL)
                .bind(payloads)
                .execute(&mut *tx)
                .await
                .map_err(self.failed(|| format!("announcing the deletion of the runs of {}", describe(key))))?;
        }
        tx.commit().await.map_err(self.failed(deleting))?;
        Ok(ThreadDeletion::Deleted)
    }
}

#[async_trait]
impl ThreadStore for PostgresStore {
    async fn create_thread(&self, thread: &Thread) -> Result<(), StoreError> {
        let key = thread.key();
        let creating = || format!("creating {}", describe(&key));
        let metadata = to_json(&describe(&key), "the thread's metadata", &thread.metadata)?;
        let inserted = sqlx::query(
            "INSERT INTO threads (resource_id, thread_id, agent_id, title, metadata, created_at, updated_at, \
             message_count) VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, 0) \
             ON CONFLICT (resource_id, thread_id) DO NOTHING",
        )
        .bind(&key.resource_id)
        .bind(&key.thread_id)
        .bind(&thread.agent_id)
        .bind(nul::encode_text(&thread.title).as_ref())
        .bind(nul::encode_json(&metadata).as_ref())
        .bind(thread.created_at)
        .bind(thread.updated_at)
        .execute(&self.pool)
        .await
        .map_err(self.failed(creating))?;
        if inserted.rows_affected() == 0 {
            return Err(StoreError::ThreadExists {
                resource_id: key.resource_id,
                thread_id: key.thread_id,
            });
        }
        Ok(())
    }

    async fn thread(&self, key: &ThreadKey) -> Result<Option<Thread>, StoreError> {
        if holds_nul(key) {
            return Ok(None);
        }
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {THREAD_COLUMNS} FROM threads WHERE resource_id = $1 AND thread_id = $2"
        )))
        .bind(&key.resource_id)
        .bind(&key.thread_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(self.failed(|| format!("reading {}", describe(key))))?;
        row.map(|row| read_thread(&row)).transpose()
    }

    async fn update_thread(&self, key: &ThreadKey, edit: ThreadEdit<'_>) -> Result<Option<Thread>, StoreError> {
        if holds_nul(key) {
            return Ok(None);
        }
        let metadata = edit
            .metadata
            .map(|m| {
                to_json(&describe(key), "the thread's metadata", m).map(|json| nul::encode_json(&json).into_owned())
            })
            .transpose()?;
        let title = edit.title.map(nul::encode_text);
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE threads SET title = COALESCE($3, title), metadata = COALESCE($4::jsonb, metadata), \
             updated_at = $5 WHERE resource_id = $1 AND thread_id = $2 RETURNING {THREAD_COLUMNS}"
        )))
        .bind(&key.resource_id)
        .bind(&key.thread_id)
        .bind(title.as_deref())
        .bind(metadata.as_deref())
        .bind(self.clock.now())
        .fetch_optional(&self.pool)
        .await
        .map_err(self.failed(|| format!("editing {}", describe(key))))?;
        row.map(|row| read_thread(&row)).transpose()
    }

    async fn threads(&self, query: &ThreadQuery) -> Result<Vec<Thread>, StoreError> {
        if finds_nothing(query) {
            return Ok(Vec::new());
        }
        let rows = bind_query(listing_statement(query), query)
            .fetch_all(&self.pool)
            .await
            .map_err(self.failed(|| "listing threads".to_owned()))?;
        crate::readable_threads(rows.iter().map(read_thread))
    }

    async fn count_threads(&self, query: &ThreadQuery) -> Result<u64, StoreError> {
        if finds_nothing(query) {
            return Ok(0);
        }
        let sql = format!(
            "SELECT COUNT(*) FROM (SELECT 1 FROM threads{} LIMIT $1 OFFSET $2) AS listed",
            thread_filter(query)
        );
        let counted: i64 = bind_query(sql, query)
            .fetch_one(&self.pool)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(self.failed(|| "counting threads".to_owned()))?;
        Ok(u64::try_from(counted).unwrap_or_default())
    }

    async fn thread_messages(&self, key: &ThreadKey, from: i64, limit: u32) -> Result<Vec<ThreadMessage>, StoreError> {
        if holds_nul(key) {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(MESSAGES_FROM)
            .bind(&key.resource_id)
            .bind(&key.thread_id)
            .bind(from)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(self.failed(|| format!("reading the messages of {}", describe(key))))?;
        rows.iter().map(|row| read_message(key, row)).collect()
    }

    async fn delete_thread(&self, key: &ThreadKey) -> Result<ThreadDeletion, StoreError> {
        if holds_nul(key) {
            return Ok(ThreadDeletion::NotFound);
        }
        self.delete_locked_thread(key).await
    }

    async fn first_messages(&self, keys: &[ThreadKey]) -> Result<Vec<(ThreadKey, ThreadMessage)>, StoreError> {
        // A key holding NUL names no stored thread.
        let keys: Vec<&ThreadKey> = keys.iter().filter(|key| !holds_nul(key)).collect();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let resources: Vec<&str> = keys.iter().map(|key| key.resource_id.as_str()).collect();
        let threads: Vec<&str> = keys.iter().map(|key| key.thread_id.as_str()).collect();
        let rows = sqlx::query(
            "SELECT m.resource_id, m.thread_id, m.seq, m.run_id, m.run_seq, m.body::text AS body, m.created_at \
             FROM UNNEST($1::text[], $2::text[]) AS k (resource_id, thread_id) \
             JOIN thread_messages m ON m.resource_id = k.resource_id COLLATE \"C\" \
             AND m.thread_id = k.thread_id COLLATE \"C\" AND m.seq = 0",
        )
        .bind(&resources)
        .bind(&threads)
        .fetch_all(&self.pool)
        .await
        .map_err(self.failed(|| format!("reading the first messages of {} threads", keys.len())))?;
        rows.iter()
            .map(|row| {
                let key = ThreadKey::new(
                    row.try_get::<String, _>("resource_id").map_err(StoreError::backend)?,
                    row.try_get::<String, _>("thread_id").map_err(StoreError::backend)?,
                );
                let first = read_message(&key, row)?;
                Ok((key, first))
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;

    use askloop::{Message, RunMemory, RunQuery, RunStatus, RunStore};
    use serde_json::json;

    use super::*;
    use crate::PostgresOptions;
    use crate::conformance::{drop_schema, new_run, postgres_test_url, unique_schema_name};

    async fn store(test: &str) -> Option<(PostgresStore, String, String)> {
        let url = postgres_test_url(test)?;
        let schema = unique_schema_name();
        let options = PostgresOptions::default().schema(schema.clone()).max_connections(8);
        let store = PostgresStore::connect_with(&url, options).await.unwrap();
        Some((store, url, schema))
    }

    /// Creates run `run_id` on `key` with one message of its own, in
    /// `status`.
    async fn run_on(store: &PostgresStore, run_id: &str, key: &ThreadKey, status: RunStatus) {
        let mut run = new_run(run_id, "agent", Utc::now(), 1).with_calls(status, Vec::new());
        run.lease = None;
        run.memory = Some(RunMemory {
            key: key.clone(),
            context: 0,
        });
        store.create(&run, &[Message::user(run_id)]).await.unwrap();
    }

    #[tokio::test]
    async fn titles_metadata_and_messages_holding_nul_round_trip() {
        let Some((store, url, schema)) = store("postgres thread text with NUL").await else {
            return;
        };
        let key = ThreadKey::new("ana", "t1");
        let awkward = "a\0b \u{10FFFF}0 \\u0000";
        let mut thread = Thread::new(&key, "agent", Utc::now());
        thread.title = awkward.to_owned();
        thread.metadata = json!({ awkward: [awkward] });
        store.create_thread(&thread).await.unwrap();
        let mut run = new_run("r1", "agent", Utc::now(), 1);
        run.memory = Some(RunMemory {
            key: key.clone(),
            context: 0,
        });
        store.create(&run, &[Message::user(awkward)]).await.unwrap();

        let stored = store.thread(&key).await.unwrap().unwrap();
        assert_eq!((stored.title.as_str(), &stored.metadata), (awkward, &thread.metadata));
        let messages = store.thread_messages(&key, 0, 10).await.unwrap();
        assert_eq!(messages[0].message, Message::user(awkward));
        let edited = store
            .update_thread(
                &key,
                ThreadEdit {
                    title: Some("\0"),
                    metadata: Some(&json!("\0")),
                },
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!((edited.title.as_str(), &edited.metadata), ("\0", &json!("\0")));
        // A key holding NUL names no stored thread.
        let nul_key = ThreadKey::new("ana\0", "t1");
        assert_eq!(store.thread(&nul_key).await.unwrap(), None);
        assert_eq!(store.delete_thread(&nul_key).await.unwrap(), ThreadDeletion::NotFound);
        let by_nul = RunQuery {
            thread: Some(nul_key),
            ..RunQuery::default()
        };
        assert_eq!(store.count(&by_nul).await.unwrap(), 0);
        store.close().await;
        drop_schema(&url, &schema).await;
    }

    /// Deletions of a thread while runs are created on it (finished ones,
    /// which do not keep it from being deleted) all end without an error,
    /// and leave no run on a thread that does not exist.
    #[tokio::test]
    async fn deleting_a_thread_while_runs_are_created_on_it_never_fails_or_orphans_a_run() {
        let Some((store, url, schema)) = store("postgres thread deletion under load").await else {
            return;
        };
        let store = Arc::new(store);
        let key = ThreadKey::new("ana", "busy");
        run_on(&store, "first", &key, RunStatus::Completed).await;
        let mut tasks = Vec::new();
        for i in 0..5 {
            let (store, key) = (store.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                for j in 0..8 {
                    run_on(&store, &format!("r{i}-{j}"), &key, RunStatus::Completed).await;
                }
            }));
        }
        for _ in 0..3 {
            let (store, key) = (store.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let done = store.delete_thread(&key).await.unwrap();
                    assert!(
                        matches!(done, ThreadDeletion::Deleted | ThreadDeletion::NotFound),
                        "{done:?}"
                    );
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let left = store
            .list(&RunQuery {
                thread: Some(key.clone()),
                ..RunQuery::default()
            })
            .await
            .unwrap();
        match store.thread(&key).await.unwrap() {
            None => assert!(left.is_empty(), "runs left on a deleted thread: {left:?}"),
            Some(thread) => {
                let messages = store.thread_messages(&key, 0, 100).await.unwrap();
                let seqs: Vec<i64> = messages.iter().map(|m| m.seq).collect();
                assert_eq!(seqs, (0..thread.message_count).collect::<Vec<_>>());
                let mut written: Vec<&str> = messages.iter().map(|m| m.run_id.as_str()).collect();
                let mut runs: Vec<&str> = left.iter().map(|r| r.run_id.as_str()).collect();
                written.sort_unstable();
                runs.sort_unstable();
                assert_eq!(
                    written, runs,
                    "the thread holds the messages of its runs, and only those"
                );
            }
        }
        store.close().await;
        drop_schema(&url, &schema).await;
    }
}

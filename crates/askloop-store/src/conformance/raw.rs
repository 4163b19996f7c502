//! Raw access to a SQL store's rows, for the cases about damaged rows and
//! for benchmarks that reset a run between measured cycles.
#![allow(clippy::expect_used)]

use async_trait::async_trait;

use crate::{PostgresStore, SqliteStore};

/// Direct access to a SQL store's rows, to write what askloop itself never
/// writes.
#[async_trait]
pub trait RawRows: Send + Sync {
    /// Makes the run's row unparsable (its pending calls).
    async fn corrupt_run(&self, run_id: &str);
    /// Makes one stored message unparsable.
    async fn corrupt_message(&self, run_id: &str, seq: i64);
    /// Sets the layout version the row claims to be written with.
    async fn set_schema_version(&self, run_id: &str, version: i32);
    /// The layout version the row is written with.
    async fn schema_version(&self, run_id: &str) -> i32;
    /// How many message rows the run has.
    async fn message_rows(&self, run_id: &str) -> i64;
    /// Where the run's resolutions are: how many its row holds, and how
    /// many are rows of their own (`run_resolutions`).
    async fn resolutions_stored(&self, run_id: &str) -> (i64, i64);
    /// Deletes the run's messages from `keep` on and sets its message count
    /// to `keep` (benchmarks reset a run between measured cycles with it).
    async fn truncate_messages(&self, run_id: &str, keep: i64);
}

/// A connection of its own to the store's file: raw writes go around the
/// store, as another program's would.
fn sqlite_connection(store: &SqliteStore) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(store.path()).expect("opening the SQLite file");
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .expect("setting a busy timeout");
    conn
}

#[async_trait]
impl RawRows for SqliteStore {
    async fn corrupt_run(&self, run_id: &str) {
        sqlite_connection(self)
            .execute(
                "UPDATE runs SET pending = '[{\"toolCallId\": ' WHERE run_id = ?",
                [run_id],
            )
            .expect("corrupting a run row");
    }

    async fn corrupt_message(&self, run_id: &str, seq: i64) {
        sqlite_connection(self)
            .execute(
                "UPDATE messages SET body = '{\"role\": ' WHERE run_id = ? AND seq = ?",
                rusqlite::params![run_id, seq],
            )
            .expect("corrupting a message row");
    }

    async fn resolutions_stored(&self, run_id: &str) -> (i64, i64) {
        sqlite_connection(self)
            .query_row(
                "SELECT (SELECT json_array_length(resolutions) FROM runs WHERE run_id = ?1), \
                 (SELECT COUNT(*) FROM run_resolutions WHERE run_id = ?1)",
                [run_id],
                |row| Ok((row.get::<_, Option<i64>>(0)?.unwrap_or(0), row.get(1)?)),
            )
            .expect("reading where a run's resolutions are")
    }

    async fn set_schema_version(&self, run_id: &str, version: i32) {
        sqlite_connection(self)
            .execute(
                "UPDATE runs SET schema_version = ? WHERE run_id = ?",
                rusqlite::params![version, run_id],
            )
            .expect("setting a row's layout version");
    }

    async fn schema_version(&self, run_id: &str) -> i32 {
        sqlite_connection(self)
            .query_row("SELECT schema_version FROM runs WHERE run_id = ?", [run_id], |row| {
                row.get(0)
            })
            .expect("reading a row's layout version")
    }

    async fn message_rows(&self, run_id: &str) -> i64 {
        sqlite_connection(self)
            .query_row("SELECT COUNT(*) FROM messages WHERE run_id = ?", [run_id], |row| {
                row.get(0)
            })
            .expect("counting message rows")
    }

    async fn truncate_messages(&self, run_id: &str, keep: i64) {
        let mut conn = sqlite_connection(self);
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("starting a write");
        tx.execute(
            "DELETE FROM messages WHERE run_id = ? AND seq >= ?",
            rusqlite::params![run_id, keep],
        )
        .expect("deleting messages");
        tx.execute(
            "UPDATE runs SET message_count = ? WHERE run_id = ?",
            rusqlite::params![keep, run_id],
        )
        .expect("setting the message count");
        tx.commit().expect("committing");
    }
}

#[async_trait]
impl RawRows for PostgresStore {
    // JSONB holds only valid JSON, so damage here is JSON of the wrong shape,
    // which askloop cannot read either.
    async fn corrupt_run(&self, run_id: &str) {
        sqlx::query("UPDATE runs SET pending = '{\"toolCallId\": 7}'::jsonb WHERE run_id = $1")
            .bind(run_id)
            .execute(&self.pool)
            .await
            .expect("corrupting a run row");
    }

    async fn corrupt_message(&self, run_id: &str, seq: i64) {
        sqlx::query("UPDATE messages SET body = '{\"role\": \"robot\"}'::jsonb WHERE run_id = $1 AND seq = $2")
            .bind(run_id)
            .bind(seq)
            .execute(&self.pool)
            .await
            .expect("corrupting a message row");
    }

    async fn resolutions_stored(&self, run_id: &str) -> (i64, i64) {
        sqlx::query_as(
            "SELECT COALESCE((SELECT jsonb_array_length(resolutions) FROM runs WHERE run_id = $1), 0)::BIGINT, \
             (SELECT COUNT(*) FROM run_resolutions WHERE run_id = $1)",
        )
        .bind(run_id)
        .fetch_one(&self.pool)
        .await
        .expect("reading where a run's resolutions are")
    }

    async fn set_schema_version(&self, run_id: &str, version: i32) {
        sqlx::query("UPDATE runs SET schema_version = $1 WHERE run_id = $2")
            .bind(version)
            .bind(run_id)
            .execute(&self.pool)
            .await
            .expect("setting a row's layout version");
    }

    async fn schema_version(&self, run_id: &str) -> i32 {
        sqlx::query_scalar("SELECT schema_version FROM runs WHERE run_id = $1")
            .bind(run_id)
            .fetch_one(&self.pool)
            .await
            .expect("reading a row's layout version")
    }

    async fn message_rows(&self, run_id: &str) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE run_id = $1")
            .bind(run_id)
            .fetch_one(&self.pool)
            .await
            .expect("counting message rows")
    }

    async fn truncate_messages(&self, run_id: &str, keep: i64) {
        let mut tx = self.pool.begin().await.expect("starting a write");
        sqlx::query("DELETE FROM messages WHERE run_id = $1 AND seq >= $2")
            .bind(run_id)
            .bind(keep)
            .execute(&mut *tx)
            .await
            .expect("deleting messages");
        sqlx::query("UPDATE runs SET message_count = $1 WHERE run_id = $2")
            .bind(keep)
            .bind(run_id)
            .execute(&mut *tx)
            .await
            .expect("setting the message count");
        tx.commit().await.expect("committing");
    }
}

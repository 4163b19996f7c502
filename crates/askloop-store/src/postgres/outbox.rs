//! The `outbox` table of a [`PostgresStore`]: the notifications a run write
//! raises, inserted in that write's transaction, and their deliveries,
//! claimed with `FOR UPDATE SKIP LOCKED` so that senders on several
//! instances never take the same row.

use askloop::{Delivery, DeliveryOutcome, DeliveryState, Lease, OutboxMessage, StoreError};
use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::{PostgresStore, nul};
use crate::row::to_json;

/// The columns [`read_row`] reads.
/// Leases (`$1` owner, `$2` until) up to `$4` pending deliveries due at
/// `$3` that no sender holds, oldest due first, from the `outbox_due`
/// index: what a claim reads grows with what is due, not with what waits
/// (a reminder due in a day, a delivery long delivered).
pub(super) const CLAIM: &str = "UPDATE outbox SET lease_owner = $1, lease_until = $2 WHERE id IN (\
     SELECT id FROM outbox WHERE state = 'pending' AND next_at <= $3 \
     AND (lease_until IS NULL OR lease_until <= $3) ORDER BY next_at, id LIMIT $4 \
     FOR UPDATE SKIP LOCKED)";

const COLUMNS: &str = "id, run_id, destination, event, payload::text AS payload, created_at, state, attempts, \
                       next_at, last_error, lease_owner, lease_until";

impl PostgresStore {
    /// Inserts the notifications of a run write, due at once, in its
    /// transaction.
    pub(super) async fn insert_outbox(
        &self,
        tx: &mut PgConnection,
        messages: &[OutboxMessage],
    ) -> Result<(), StoreError> {
        for message in messages {
            let payload = to_json(&message.run_id, "a notification", &message.payload)?;
            sqlx::query(
                "INSERT INTO outbox (id, run_id, destination, event, payload, created_at, next_at) \
                 VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7)",
            )
            .bind(&message.id)
            .bind(&message.run_id)
            .bind(nul::encode_text(&message.destination).as_ref())
            .bind(message.event.as_str())
            .bind(nul::encode_json(&payload).as_ref())
            .bind(message.created_at)
            .bind(message.due_at())
            .execute(&mut *tx)
            .await
            .map_err(self.failed(|| format!("writing the notifications of run {}", message.run_id)))?;
        }
        Ok(())
    }

    pub(super) async fn claim_outbox(
        &self,
        now: DateTime<Utc>,
        lease: &Lease,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError> {
        // SKIP LOCKED: a row another sender is claiming right now is left to
        // it; one it claimed and committed no longer matches the lease test.
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!("{CLAIM} RETURNING {COLUMNS}")))
            .bind(&lease.owner)
            .bind(lease.until)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(self.failed(|| "claiming notifications to deliver".to_owned()))?;
        let mut taken = rows.iter().map(read_row).collect::<Result<Vec<_>, _>>()?;
        taken.sort_by(|a, b| a.next_at.cmp(&b.next_at).then_with(|| a.message.id.cmp(&b.message.id)));
        Ok(taken)
    }

    pub(super) async fn finish_outbox(
        &self,
        id: &str,
        owner: &str,
        outcome: &DeliveryOutcome,
    ) -> Result<(), StoreError> {
        let (state, next_at, error) = match outcome {
            DeliveryOutcome::Delivered => (DeliveryState::Delivered, None, None),
            DeliveryOutcome::Retry { next_at, error } => (DeliveryState::Pending, Some(*next_at), Some(error.as_str())),
            DeliveryOutcome::Dead { error } => (DeliveryState::Dead, None, Some(error.as_str())),
            _ => (DeliveryState::Dead, None, Some("an outcome this build does not know")),
        };
        let done = sqlx::query(
            "UPDATE outbox SET state = $1, attempts = attempts + 1, next_at = COALESCE($2, next_at), \
             last_error = COALESCE($3, last_error), lease_owner = NULL, lease_until = NULL \
             WHERE id = $4 AND state = 'pending' AND lease_owner = $5",
        )
        .bind(state.as_str())
        .bind(next_at)
        .bind(error.map(nul::encode_text).as_deref())
        .bind(id)
        .bind(owner)
        .execute(&self.pool)
        .await
        .map_err(self.failed(|| format!("recording the delivery of notification {id}")))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::DeliveryLost {
                id: id.to_owned(),
                owner: owner.to_owned(),
            });
        }
        Ok(())
    }

    pub(super) async fn outbox_of(&self, run_id: &str) -> Result<Vec<Delivery>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM outbox WHERE run_id = $1 ORDER BY created_at, id"
        )))
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.failed(|| format!("reading the notifications of run {run_id}")))?;
        rows.iter().map(read_row).collect()
    }
}

/// One stored delivery; a column of the wrong type or value is a corrupt
/// row of its run.
fn read_row(row: &PgRow) -> Result<Delivery, StoreError> {
    let id: String = row.try_get("id").map_err(StoreError::backend)?;
    let run_id: String = row.try_get("run_id").map_err(StoreError::backend)?;
    let corrupt = |detail: String| StoreError::Corrupt {
        run_id: run_id.clone(),
        detail: format!("notification {id}: {detail}"),
    };
    let column = |e: sqlx::Error| corrupt(e.to_string());
    let event: String = row.try_get("event").map_err(column)?;
    let payload: String = row.try_get("payload").map_err(column)?;
    let state: String = row.try_get("state").map_err(column)?;
    let attempts: i32 = row.try_get("attempts").map_err(column)?;
    let lease_owner: Option<String> = row.try_get("lease_owner").map_err(column)?;
    let lease_until: Option<DateTime<Utc>> = row.try_get("lease_until").map_err(column)?;
    let destination: String = row.try_get("destination").map_err(column)?;
    let last_error: Option<String> = row.try_get("last_error").map_err(column)?;
    Ok(Delivery {
        message: OutboxMessage {
            destination: nul::decode_text(destination),
            event: event
                .parse()
                .map_err(|e: askloop::UnknownName| corrupt(e.to_string()))?,
            payload: serde_json::from_str(&nul::decode_json(payload)).map_err(|e| corrupt(format!("payload: {e}")))?,
            created_at: row.try_get("created_at").map_err(column)?,
            id: id.clone(),
            run_id: run_id.clone(),
        },
        state: state
            .parse()
            .map_err(|e: askloop::UnknownName| corrupt(e.to_string()))?,
        attempts: u32::try_from(attempts).map_err(|e| corrupt(format!("attempts: {e}")))?,
        next_at: row.try_get("next_at").map_err(column)?,
        last_error: last_error.map(nul::decode_text),
        lease: match (lease_owner, lease_until) {
            (Some(owner), Some(until)) => Some(Lease::new(owner, until)),
            _ => None,
        },
    })
}

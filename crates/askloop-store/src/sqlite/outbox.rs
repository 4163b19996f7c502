//! The `outbox` table of a [`SqliteStore`](super::SqliteStore): the
//! notifications a run write raises, inserted in that write's transaction,
//! and their deliveries, claimed and finished through the write thread.

use askloop::{Delivery, DeliveryOutcome, DeliveryState, OutboxMessage, StoreError};
use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};

use crate::row::to_json;

/// An outbox row to insert, serialised.
#[derive(Debug)]
pub(crate) struct NewDelivery {
    id: String,
    run_id: String,
    destination: String,
    event: &'static str,
    payload: String,
    created_at: i64,
    due_at: i64,
}

impl NewDelivery {
    pub(crate) fn of(message: &OutboxMessage) -> Result<Self, StoreError> {
        Ok(NewDelivery {
            id: message.id.clone(),
            run_id: message.run_id.clone(),
            destination: message.destination.clone(),
            event: message.event.as_str(),
            payload: to_json(&message.run_id, "a notification", &message.payload)?,
            created_at: message.created_at.timestamp_micros(),
            due_at: message.due_at().timestamp_micros(),
        })
    }
}

/// Inserts the notifications of a run write, each due at its `due_at`
/// (when it was written, or later for a reminder or an escalation).
pub(crate) fn insert(conn: &Connection, rows: &[NewDelivery]) -> Result<(), StoreError> {
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO outbox (id, run_id, destination, event, payload, created_at, next_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .map_err(StoreError::backend)?;
    for row in rows {
        insert
            .execute(params![
                row.id,
                row.run_id,
                row.destination,
                row.event,
                row.payload,
                row.created_at,
                row.due_at
            ])
            .map_err(StoreError::backend)?;
    }
    Ok(())
}

/// Leases up to `limit` due deliveries to `owner` until `until`; one
/// statement under SQLite's write lock, so two senders never get the same
/// row. Returns how many it took; the sender reads them back by `token`
/// (unique to this claim: the same sender may claim again while it still
/// holds earlier rows).
pub(crate) fn claim(
    conn: &Connection,
    now: i64,
    owner: &str,
    until: i64,
    limit: i64,
    token: &str,
) -> Result<i64, StoreError> {
    let taken = conn
        .prepare_cached(
            "UPDATE outbox SET lease_owner = ?, lease_until = ?, claim_token = ? WHERE id IN (\
             SELECT id FROM outbox WHERE state = 'pending' AND next_at <= ? \
             AND (lease_until IS NULL OR lease_until <= ?) ORDER BY next_at, id LIMIT ?)",
        )
        .and_then(|mut claim| claim.execute(params![owner, until, token, now, now, limit]))
        .map_err(StoreError::backend)?;
    Ok(i64::try_from(taken).unwrap_or(i64::MAX))
}

/// Records an attempt's outcome if `owner` still holds the delivery.
pub(crate) fn finish(conn: &Connection, id: &str, owner: &str, outcome: &Outcome) -> Result<i64, StoreError> {
    let finished = conn
        .prepare_cached(
            "UPDATE outbox SET state = ?, attempts = attempts + 1, next_at = COALESCE(?, next_at), \
             last_error = COALESCE(?, last_error), lease_owner = NULL, lease_until = NULL \
             WHERE id = ? AND state = 'pending' AND lease_owner = ?",
        )
        .and_then(|mut finish| finish.execute(params![outcome.state, outcome.next_at, outcome.error, id, owner]))
        .map_err(StoreError::backend)?;
    if finished == 0 {
        return Err(StoreError::DeliveryLost {
            id: id.to_owned(),
            owner: owner.to_owned(),
        });
    }
    Ok(0)
}

/// An attempt's outcome, as stored.
#[derive(Debug)]
pub(crate) struct Outcome {
    state: &'static str,
    next_at: Option<i64>,
    error: Option<String>,
}

impl Outcome {
    pub(crate) fn of(outcome: &DeliveryOutcome) -> Self {
        match outcome {
            DeliveryOutcome::Delivered => Outcome {
                state: DeliveryState::Delivered.as_str(),
                next_at: None,
                error: None,
            },
            DeliveryOutcome::Retry { next_at, error } => Outcome {
                state: DeliveryState::Pending.as_str(),
                next_at: Some(next_at.timestamp_micros()),
                error: Some(error.clone()),
            },
            DeliveryOutcome::Dead { error } => Outcome {
                state: DeliveryState::Dead.as_str(),
                next_at: None,
                error: Some(error.clone()),
            },
            other => Outcome {
                state: DeliveryState::Dead.as_str(),
                next_at: None,
                error: Some(format!("unknown outcome {other:?}")),
            },
        }
    }
}

/// The columns [`read_row`] reads.
pub(crate) const COLUMNS: &str = "id, run_id, destination, event, payload, created_at, state, attempts, next_at, \
                                  last_error, lease_owner, lease_until";

/// Reads the rows a query selects (columns as in [`COLUMNS`]).
pub(crate) fn select(
    conn: &Connection,
    sql: &str,
    values: &[&dyn rusqlite::ToSql],
) -> Result<Vec<Delivery>, StoreError> {
    let mut select = conn.prepare_cached(sql).map_err(StoreError::backend)?;
    let mut rows = select.query(values).map_err(StoreError::backend)?;
    let mut found = Vec::new();
    while let Some(row) = rows.next().map_err(StoreError::backend)? {
        found.push(read_row(row)?);
    }
    Ok(found)
}

/// One stored delivery; a column of the wrong type or value is a corrupt
/// row of its run.
fn read_row(row: &rusqlite::Row<'_>) -> Result<Delivery, StoreError> {
    let id: String = row.get(0).map_err(StoreError::backend)?;
    let run_id: String = row.get(1).map_err(StoreError::backend)?;
    let corrupt = |detail: String| StoreError::Corrupt {
        run_id: run_id.clone(),
        detail: format!("notification {id}: {detail}"),
    };
    let column = |e: rusqlite::Error| corrupt(e.to_string());
    let time = |value: i64, name: &str| {
        DateTime::<Utc>::from_timestamp_micros(value).ok_or_else(|| corrupt(format!("{name}: {value} is not a time")))
    };
    let event: String = row.get(3).map_err(column)?;
    let payload: String = row.get(4).map_err(column)?;
    let state: String = row.get(6).map_err(column)?;
    let lease_owner: Option<String> = row.get(10).map_err(column)?;
    let lease_until: Option<i64> = row.get(11).map_err(column)?;
    let lease = match (lease_owner, lease_until) {
        (Some(owner), Some(until)) => Some(askloop::Lease::new(owner, time(until, "lease_until")?)),
        _ => None,
    };
    Ok(Delivery {
        message: OutboxMessage {
            destination: row.get(2).map_err(column)?,
            event: event
                .parse()
                .map_err(|e: askloop::UnknownName| corrupt(e.to_string()))?,
            payload: serde_json::from_str(&payload).map_err(|e| corrupt(format!("payload: {e}")))?,
            created_at: time(row.get(5).map_err(column)?, "created_at")?,
            id: id.clone(),
            run_id: run_id.clone(),
        },
        state: state
            .parse()
            .map_err(|e: askloop::UnknownName| corrupt(e.to_string()))?,
        attempts: row.get(7).map_err(column)?,
        next_at: time(row.get(8).map_err(column)?, "next_at")?,
        last_error: row.get(9).map_err(column)?,
        lease,
    })
}

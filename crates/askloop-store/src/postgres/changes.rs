//! The PostgreSQL store's change feed: every write of a run sends
//! `NOTIFY askloop_runs` inside its own transaction (PostgreSQL delivers it
//! at commit, never for a rolled-back write), and [`watch`] `LISTEN`s on a
//! connection of its own. Every instance sharing the database hears every
//! instance's writes. Stores in other schemas of the same database share
//! the channel; the payload names the schema, and a feed keeps only its own.

use std::time::Duration;

use askloop::{RunChange, RunChanges, StoreError};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgPoolOptions};

/// The channel every store's writes are announced on.
pub(crate) const CHANNEL: &str = "askloop_runs";

/// How long the feed waits before listening again after the connection
/// failed (PostgreSQL restarting, a network cut).
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// What one notification says.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Announcement {
    pub(crate) schema: String,
    pub(crate) run_id: String,
}

/// The payload announcing a write of `run_id` in `schema`.
pub(crate) fn payload(schema: &str, run_id: &str) -> Result<String, StoreError> {
    serde_json::to_string(&Announcement {
        schema: schema.to_owned(),
        run_id: run_id.to_owned(),
    })
    .map_err(StoreError::backend)
}

/// Listens for the writes of the store in `schema`, until the feed is
/// dropped. After a lost connection, missed notifications are reported as
/// one [`RunChange::unknown`].
pub(crate) async fn watch(pool: &PgPool, schema: String) -> Result<RunChanges, StoreError> {
    // A pool of its own, with the store's connection options: the listening
    // connection is held for as long as the feed lives, and closing the
    // store's pool must not wait for it.
    let own = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with((*pool.connect_options()).clone());
    let mut listener = PgListener::connect_with(&own).await.map_err(StoreError::backend)?;
    listener.listen(CHANNEL).await.map_err(StoreError::backend)?;
    let notifications = listener.into_stream();
    Ok(Box::pin(notifications.filter_map(move |notification| {
        let schema = schema.clone();
        async move {
            match notification {
                Ok(notification) => match serde_json::from_str::<Announcement>(notification.payload()) {
                    Ok(announced) if announced.schema == schema => Some(RunChange::of(announced.run_id)),
                    Ok(_) => None,
                    Err(err) => {
                        tracing::warn!(payload = notification.payload(), error = %err, "a notification on {CHANNEL} that askloop did not send; ignored");
                        None
                    }
                },
                Err(err) => {
                    tracing::warn!(error = %err, "listening for run changes failed; listening again");
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                    Some(RunChange::unknown())
                }
            }
        }
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trips_schema_and_run_id() {
        let text = payload("tenant \"a\"", "run-1").unwrap();
        let back: Announcement = serde_json::from_str(&text).unwrap();
        assert_eq!(
            back,
            Announcement {
                schema: "tenant \"a\"".to_owned(),
                run_id: "run-1".to_owned()
            }
        );
    }
}

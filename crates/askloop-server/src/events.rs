//! `GET /api/events`: the store's run changes as server-sent events, for
//! pages that show runs as they change (the web page's Inbox and its count
//! of waiting questions).
//!
//! The server reads the store's change feed ([`askloop::RunStore::changes`])
//! once, from the first listener on, and hands each change to every open
//! stream. A stream starts with `event: ready` (from then on no change is
//! missed, so a client reads what it shows after it), then one
//! `event: run` per change with `{"runId": "..."}` (`null`: some runs may
//! have changed, read again), and a comment every
//! [`KEEP_ALIVE`] so proxies keep it open.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use askloop::{RunChange, RunStore};
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use tokio::sync::{OnceCell, broadcast};

use crate::AppState;
use crate::error::ApiError;

/// How often an idle stream sends a comment.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Changes that may wait for a slow listener before it is told to read
/// everything again.
const BACKLOG: usize = 256;

/// The store's change feed, read once and shared by every stream.
#[derive(Debug, Default)]
pub(crate) struct RunEvents {
    sender: OnceCell<broadcast::Sender<RunChange>>,
}

impl RunEvents {
    /// A receiver of every change from now on; the first call starts
    /// reading the store's feed. `None`: the store has no feed.
    async fn subscribe(&self, store: &Arc<dyn RunStore>) -> Result<broadcast::Receiver<RunChange>, ApiError> {
        let sender = self
            .sender
            .get_or_try_init(|| async {
                let feed = store.changes().await?.ok_or(ApiError::NoChangeFeed)?;
                let (sender, _) = broadcast::channel(BACKLOG);
                tokio::spawn(forward(feed, sender.clone()));
                Ok::<_, ApiError>(sender)
            })
            .await?;
        Ok(sender.subscribe())
    }
}

/// Hands each change of the store's feed to every listener, for as long
/// as the feed lasts.
async fn forward(mut feed: askloop::RunChanges, sender: broadcast::Sender<RunChange>) {
    while let Some(change) = feed.next().await {
        // No listener right now is fine: the next one reads afresh.
        let _ = sender.send(change);
    }
    tracing::warn!("the store's change feed ended; pages no longer update by themselves");
}

/// `GET /api/events`.
pub(crate) async fn stream(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let receiver = state.events.subscribe(&state.store).await?;
    Ok(Sse::new(events(receiver))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

fn events(receiver: broadcast::Receiver<RunChange>) -> impl Stream<Item = Result<Event, Infallible>> {
    let ready = futures::stream::once(async { Ok(Event::default().event("ready").data("{}")) });
    let changes = futures::stream::unfold(receiver, |mut receiver| async move {
        let change = match receiver.recv().await {
            Ok(change) => change,
            Err(broadcast::error::RecvError::Lagged(_)) => RunChange::unknown(),
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        Some((change, receiver))
    })
    .filter_map(|change| async move {
        match Event::default().event("run").json_data(&change) {
            Ok(event) => Some(Ok(event)),
            Err(err) => {
                tracing::error!(error = %err, "a run change could not be written as JSON; skipped");
                None
            }
        }
    });
    ready.chain(changes)
}

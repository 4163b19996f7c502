//! `GET /api/events`: the store's run changes as server-sent events, for
//! pages that show runs as they change (the web page's Inbox and its count
//! of waiting questions).
//!
//! The server reads the store's change feed ([`askloop::ChangeFeed::changes`])
//! once, from the first listener on, and hands each change to every open
//! stream. A stream starts with `event: ready` (from then on no change is
//! missed, so a client reads what it shows after it), then one
//! `event: run` per change with `{"runId": "..."}` (`null`: some runs may
//! have changed, read again), and a comment every
//! [`KEEP_ALIVE`] so proxies keep it open.
//!
//! A caller holds at most so many streams open at once
//! ([`ServerOptions::event_streams_per_caller`](crate::ServerOptions::event_streams_per_caller)):
//! the next is refused with 429 `too_many_streams`, and a stream's slot is
//! given back when its client goes away.
//!
//! A token limited to some agents hears only of their runs: each change
//! naming a run is checked against the run's agent (read once per run and
//! stream, then remembered) before it is sent.

use std::collections::HashMap;
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
use crate::auth::Caller;
use crate::caps::AtMost;
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

/// `GET /api/events`. The stream ends when the server begins to shut down:
/// a page keeps it open for as long as it is shown, so waiting for it would
/// hold every shutdown for the whole grace period.
///
/// A caller holds at most so many streams at once (`caps.rs`); one more is
/// a 429 naming the cap. The stream holds its slot until it is dropped: its
/// client went away, or the server ended it.
pub(crate) async fn stream(State(state): State<Arc<AppState>>, caller: Caller) -> Result<Response, ApiError> {
    let slot = state
        .event_streams
        .take(&caller)
        .map_err(|AtMost(most)| ApiError::TooManyStreams { most })?;
    let receiver = state.events.subscribe(&state.store).await?;
    let visible = Visible::to(&caller, Arc::clone(&state.store));
    let mut stopping = state.stopping.subscribe();
    let shutdown = async move {
        let _ = stopping.wait_for(|stopping| *stopping).await;
    };
    // The closure owns the slot: it is given back when the stream is
    // dropped, however it ends.
    let stream = events(receiver, visible).take_until(shutdown).map(move |event| {
        let _held = &slot;
        event
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// Which changes one stream's caller may hear of.
struct Visible {
    /// Who listens: a run it may not see ([`Caller::may_see`]) is not
    /// heard of.
    caller: Caller,
    store: Arc<dyn RunStore>,
    /// Whether each run seen so far is the caller's (a run never changes
    /// agent or thread).
    known: HashMap<String, bool>,
}

/// How many runs a stream remembers before it forgets them all.
const REMEMBERED_RUNS: usize = 4096;

impl Visible {
    fn to(caller: &Caller, store: Arc<dyn RunStore>) -> Visible {
        Visible {
            caller: caller.clone(),
            store,
            known: HashMap::new(),
        }
    }

    /// The change as this caller may hear of it: as it is, `None` for a
    /// run of another agent or on another resource's thread (or one gone),
    /// or "some runs changed" when the run could not be read.
    async fn filter(&mut self, change: RunChange) -> Option<RunChange> {
        let Some(run_id) = &change.run_id else {
            return Some(change);
        };
        if self.caller.agents().is_none() && self.caller.resources().is_none() {
            return Some(change);
        }
        if let Some(&mine) = self.known.get(run_id) {
            return mine.then_some(change);
        }
        let mine = match self.store.get(run_id).await {
            Ok(run) => run.is_some_and(|run| self.caller.may_see(&run)),
            Err(err) => {
                tracing::debug!(error = %err, "a changed run could not be read; the stream says some runs changed");
                return Some(RunChange::unknown());
            }
        };
        if self.known.len() >= REMEMBERED_RUNS {
            self.known.clear();
        }
        self.known.insert(run_id.clone(), mine);
        mine.then_some(change)
    }
}

fn events(receiver: broadcast::Receiver<RunChange>, visible: Visible) -> impl Stream<Item = Result<Event, Infallible>> {
    let ready = futures::stream::once(async { Ok(Event::default().event("ready").data("{}")) });
    let changes = futures::stream::unfold((receiver, visible), |(mut receiver, mut visible)| async move {
        loop {
            let change = match receiver.recv().await {
                Ok(change) => change,
                Err(broadcast::error::RecvError::Lagged(_)) => RunChange::unknown(),
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            if let Some(change) = visible.filter(change).await {
                return Some((change, (receiver, visible)));
            }
        }
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

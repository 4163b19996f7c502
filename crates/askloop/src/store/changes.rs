//! A live feed of changes to a store's runs, for pages and programs that
//! show runs as they change (the web page's Inbox, a dashboard).
//!
//! A change says only that a run was created or written, and which one when
//! the store knows it; readers read the runs they care about again. That
//! keeps every store's feed cheap: PostgreSQL sends one `NOTIFY` per write,
//! inside the write's transaction, so a listener on any instance hears of
//! it once it is committed; SQLite has no notifications across processes,
//! so its feed notices that the file changed, by whichever process, and
//! cannot say which run.

use std::fmt;
use std::pin::Pin;

use futures::Stream;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

/// One change to the runs of a store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunChange {
    /// The run that was created or written, when the store knows which;
    /// `None`: some runs may have changed (another process wrote the file,
    /// or changes were missed), read again what you show.
    pub run_id: Option<String>,
}

impl RunChange {
    /// A change of this run.
    pub fn of(run_id: impl Into<String>) -> Self {
        RunChange {
            run_id: Some(run_id.into()),
        }
    }

    /// Some runs may have changed.
    pub fn unknown() -> Self {
        RunChange { run_id: None }
    }
}

/// The changes of a store, from the moment it was asked for, for as long
/// as it is read (see [`crate::ChangeFeed::changes`]).
pub type RunChanges = Pin<Box<dyn Stream<Item = RunChange> + Send>>;

/// Hands each change of an in-process store to every reader of its feed.
/// A reader that falls behind gets one [`RunChange::unknown`] for all it
/// missed, never an error.
#[derive(Clone)]
pub struct ChangeBroadcast {
    sender: broadcast::Sender<RunChange>,
}

/// How many changes wait for a slow reader before it is told it missed some.
const BACKLOG: usize = 256;

impl Default for ChangeBroadcast {
    fn default() -> Self {
        ChangeBroadcast {
            sender: broadcast::channel(BACKLOG).0,
        }
    }
}

impl fmt::Debug for ChangeBroadcast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChangeBroadcast")
            .field("readers", &self.sender.receiver_count())
            .finish()
    }
}

impl ChangeBroadcast {
    /// Tells every current reader that `run_id` changed (nobody listening
    /// is not an error).
    pub fn send(&self, change: RunChange) {
        let _ = self.sender.send(change);
    }

    /// A feed of the changes sent from now on.
    pub fn subscribe(&self) -> RunChanges {
        let receiver = self.sender.subscribe();
        Box::pin(futures::stream::unfold(receiver, |mut receiver| async move {
            match receiver.recv().await {
                Ok(change) => Some((change, receiver)),
                Err(broadcast::error::RecvError::Lagged(_)) => Some((RunChange::unknown(), receiver)),
                Err(broadcast::error::RecvError::Closed) => None,
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    #[tokio::test]
    async fn every_reader_gets_each_change_sent_after_it_subscribed() {
        let broadcast = ChangeBroadcast::default();
        broadcast.send(RunChange::of("before"));
        let mut first = broadcast.subscribe();
        let mut second = broadcast.subscribe();
        broadcast.send(RunChange::of("r1"));
        assert_eq!(first.next().await, Some(RunChange::of("r1")));
        assert_eq!(second.next().await, Some(RunChange::of("r1")));
    }

    #[tokio::test]
    async fn a_reader_that_fell_behind_is_told_to_read_again() {
        let broadcast = ChangeBroadcast::default();
        let mut reader = broadcast.subscribe();
        for i in 0..BACKLOG + 10 {
            broadcast.send(RunChange::of(format!("r{i}")));
        }
        assert_eq!(reader.next().await, Some(RunChange::unknown()));
    }
}

//! What a chat's stream has sent so far, kept on this instance for clients
//! that re-attach (`replay.rs` serves them): the stream's writer
//! ([`ReplayWriter`], which `sse.rs` hands every frame) and the chats with
//! a stream now ([`ActiveChats`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

/// Which chat a stream belongs to: the agent, the chat's id on the client,
/// and who started it (the token's name or the person a proxy named).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ChatKey {
    pub(crate) agent_id: String,
    pub(crate) chat_id: String,
    pub(crate) author: Option<String>,
}

/// The chats with a stream on this instance now.
#[derive(Debug)]
pub(crate) struct ActiveChats {
    streams: Mutex<HashMap<ChatKey, Arc<Replay>>>,
    /// The most bytes one replay keeps.
    pub(crate) limit: usize,
}

/// What was sent of one chat's stream so far.
#[derive(Debug)]
pub(crate) struct Replay {
    /// The run streamed: a re-attacher must be allowed to act on it.
    pub(crate) run_id: String,
    pub(crate) sent: watch::Sender<Sent>,
}

/// The frames of a stream so far, and whether it is over.
#[derive(Debug, Default)]
pub(crate) struct Sent {
    pub(crate) frames: Vec<u8>,
    /// The stream grew past the limit: `frames` were dropped.
    pub(crate) past_limit: bool,
    /// The stream's last frame has been kept (or its writer is gone).
    pub(crate) ended: bool,
}

impl ActiveChats {
    /// No chat, each replay kept up to `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        ActiveChats {
            streams: Mutex::default(),
            limit,
        }
    }

    /// Registers the stream of `chat_id` (streaming `run_id`), started by
    /// `author`, and hands back the writer its frames go through.
    pub(crate) fn open(
        self: &Arc<Self>,
        author: Option<String>,
        agent_id: &str,
        chat_id: &str,
        run_id: &str,
    ) -> ReplayWriter {
        let key = ChatKey {
            agent_id: agent_id.to_owned(),
            chat_id: chat_id.to_owned(),
            author,
        };
        let replay = Arc::new(Replay {
            run_id: run_id.to_owned(),
            sent: watch::Sender::new(Sent::default()),
        });
        self.lock().insert(key.clone(), Arc::clone(&replay));
        ReplayWriter {
            chats: Arc::clone(self),
            key,
            replay,
        }
    }

    pub(crate) fn find(&self, key: &ChatKey) -> Option<Arc<Replay>> {
        self.lock().get(key).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ChatKey, Arc<Replay>>> {
        // The map is whole after every operation on it: a panic elsewhere
        // while it was held leaves nothing half-done.
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Keeps a stream's frames for re-attaching; dropping it ends the replay
/// and forgets the chat's stream.
#[derive(Debug)]
pub(crate) struct ReplayWriter {
    chats: Arc<ActiveChats>,
    key: ChatKey,
    replay: Arc<Replay>,
}

impl ReplayWriter {
    /// Keeps `frames`, which were just sent (or would have been, to a
    /// connection that went away).
    pub(crate) fn push(&self, frames: &[u8]) {
        let limit = self.chats.limit;
        self.replay.sent.send_modify(|sent| {
            if sent.past_limit {
                return;
            }
            if sent.frames.len() + frames.len() > limit {
                sent.past_limit = true;
                sent.frames = Vec::new();
                tracing::warn!(
                    chat_id = %self.key.chat_id,
                    limit,
                    "the chat's stream grew past what is kept for re-attaching; re-attaches now get an error part"
                );
            } else {
                sent.frames.extend_from_slice(frames);
            }
        });
    }
}

impl Drop for ReplayWriter {
    fn drop(&mut self) {
        // Forgotten before the end is told, so a re-attacher that has read
        // `[DONE]` and asks again finds nothing.
        let mut streams = self.chats.lock();
        if streams.get(&self.key).is_some_and(|r| Arc::ptr_eq(r, &self.replay)) {
            streams.remove(&self.key);
        }
        drop(streams);
        self.replay.sent.send_modify(|sent| sent.ended = true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_stream_of_the_chat_takes_its_id_and_the_older_ending_leaves_it() {
        let chats = Arc::new(ActiveChats::new(1024));
        let older = chats.open(None, "assistant", "c1", "run-1");
        let newer = chats.open(None, "assistant", "c1", "run-2");
        drop(older);
        let key = ChatKey {
            agent_id: "assistant".into(),
            chat_id: "c1".into(),
            author: None,
        };
        assert_eq!(chats.find(&key).unwrap().run_id, "run-2");
        drop(newer);
        assert!(chats.find(&key).is_none());
    }

    #[test]
    fn past_the_limit_what_was_kept_is_dropped() {
        let chats = Arc::new(ActiveChats::new(10));
        let writer = chats.open(None, "assistant", "c1", "run-1");
        writer.push(b"123456");
        writer.push(b"7890ab");
        let sent = writer.replay.sent.borrow();
        assert!(sent.past_limit);
        assert!(
            sent.frames.is_empty() && sent.frames.capacity() == 0,
            "the memory is given back"
        );
    }
}

//! `GET /chat/{agentId}/{chatId}/stream`: re-attaching to a chat's stream
//! after the connection that started it went away, what the AI SDK's
//! `DefaultChatTransport.reconnectToStream` asks for (`useChat` with
//! `resume: true`, or `resumeStream()`).
//!
//! The contract:
//!
//! - A chat's stream is the response to a `POST /chat/{agentId}` that
//!   carries the chat's `id` and streams a run. While that run is being
//!   streamed on this instance, every frame handed to the connection is kept
//!   in the chat's [`Replay`], from the first (`start`).
//! - A re-attach gets the whole stream kept so far, then the rest live, to
//!   `[DONE]`: `DefaultChatTransport` treats a resumed stream as a replay
//!   (`resumeStreamIsReplay`) and starts the message again at `start`.
//!   Several may be attached at once.
//! - The run does not wait for its first connection: a client that goes
//!   away leaves it to be driven to its next stored state (`sse.rs`), and
//!   the frames it produces on the way are still kept for re-attaching.
//! - A replay keeps at most [`crate::ServerOptions::chat_replay_bytes`]
//!   bytes. A stream that grows past that can no longer be replayed from
//!   `start`: what was kept is dropped at once, and every re-attacher (the
//!   ones attached then and the ones to come) gets an `error` part saying
//!   so, then `[DONE]`. The run goes on; its outcome is stored as always.
//! - When the stream ends, its replay is dropped: a re-attach then answers
//!   `204`, as for a chat id with no stream here (the AI SDK then leaves
//!   the chat as it is). So are re-attaches by a caller who may not act on
//!   the run (`runs::load`, the run routes' own check), and by another
//!   author than the one who started it: nothing of the stream is told.
//! - A newer stream of the same chat (by the same author) takes the chat id
//!   over; the older one goes on for the clients attached to it.
//!
//! Replays live in this instance's memory: a re-attach that reaches
//! another instance answers `204`. A stream that answers a question has no
//! `start` (it goes on writing the assistant message that asked), and so
//! neither has its replay: the AI SDK appends it to the chat's last
//! assistant message, so a client that kept the parts it had received
//! before the drop shows those parts twice; a page that opens with the
//! messages stored before the answer (a thread's) does not.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use super::parts::UiChunk;
use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::ApiPath;
use crate::sse::{self, push_json};

/// What an SSE stream sends while it has nothing else to send, so that
/// proxies that close idle connections keep it open. Clients skip comments.
pub(crate) const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// How long a stream may stay silent before a [`KEEP_ALIVE`] goes out.
pub(crate) const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(15);

/// Which chat a stream belongs to: the agent, the chat's id on the client,
/// and who started it (the token's name or the person a proxy named).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ChatKey {
    agent_id: String,
    chat_id: String,
    author: Option<String>,
}

/// The chats with a stream on this instance now.
#[derive(Debug)]
pub(crate) struct ActiveChats {
    streams: Mutex<HashMap<ChatKey, Arc<Replay>>>,
    /// The most bytes one replay keeps.
    limit: usize,
}

/// What was sent of one chat's stream so far.
#[derive(Debug)]
pub(crate) struct Replay {
    /// The run streamed: a re-attacher must be allowed to act on it.
    run_id: String,
    sent: watch::Sender<Sent>,
}

/// The frames of a stream so far, and whether it is over.
#[derive(Debug, Default)]
struct Sent {
    frames: Vec<u8>,
    /// The stream grew past the limit: `frames` were dropped.
    past_limit: bool,
    /// The stream's last frame has been kept (or its writer is gone).
    ended: bool,
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

    fn find(&self, key: &ChatKey) -> Option<Arc<Replay>> {
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

/// `GET /chat/{agentId}/{chatId}/stream`.
pub(crate) async fn reattach(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath((agent_id, chat_id)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    caller.check(&agent_id)?;
    state.agent(&agent_id)?;
    let key = ChatKey {
        agent_id,
        chat_id,
        author: caller.author().by,
    };
    let Some(replay) = state.chats.find(&key) else {
        return Ok(no_stream());
    };
    match crate::runs::load(&state, &caller, &replay.run_id, Some(&key.agent_id)).await {
        Ok(_) => {}
        Err(ApiError::UnknownRun { .. }) => return Ok(no_stream()),
        Err(err) => return Err(err),
    }
    tracing::info!(chat_id = %key.chat_id, run_id = %replay.run_id, "a client re-attached to the chat's stream");
    let frames = futures::stream::unfold(Reader::new(&replay, state.chats.limit), Reader::next);
    Ok(sse::ui_response(Body::from_stream(frames)))
}

/// `204`: no stream of this chat to re-attach to.
fn no_stream() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// One re-attacher's place in a [`Replay`].
struct Reader {
    sent: watch::Receiver<Sent>,
    /// How many bytes of the frames it has been sent.
    offset: usize,
    limit: usize,
    done: bool,
    keep_alive: tokio::time::Interval,
}

impl Reader {
    fn new(replay: &Replay, limit: usize) -> Self {
        let mut sent = replay.sent.subscribe();
        sent.mark_changed();
        Reader {
            sent,
            offset: 0,
            limit,
            done: false,
            keep_alive: keep_alive(),
        }
    }

    /// The next bytes for the connection: what was kept since the last,
    /// once there is some, or a keep-alive after a silence.
    async fn next(mut self) -> Option<(Result<Bytes, std::convert::Infallible>, Self)> {
        if self.done {
            return None;
        }
        loop {
            tokio::select! {
                changed = self.sent.changed() => {
                    if let Some(bytes) = self.take(changed.is_err()) {
                        self.keep_alive.reset();
                        return Some((Ok(bytes), self));
                    }
                }
                _ = self.keep_alive.tick() => return Some((Ok(Bytes::from_static(KEEP_ALIVE)), self)),
            }
        }
    }

    /// What is new since the last call, if anything (`gone`: the writer was
    /// dropped, so nothing more will come).
    fn take(&mut self, gone: bool) -> Option<Bytes> {
        let sent = self.sent.borrow_and_update();
        if sent.past_limit {
            self.done = true;
            let mut out = Vec::new();
            let error_text = format!(
                "this chat's stream is longer than the {} bytes kept for re-attaching, so it cannot be replayed from its start; the run goes on, and its outcome is stored",
                self.limit
            );
            push_json(&mut out, &UiChunk::Error { error_text }, "error");
            out.extend_from_slice(sse::DONE);
            return Some(Bytes::from(out));
        }
        let new = sent.frames.get(self.offset..).unwrap_or_default();
        self.offset = sent.frames.len();
        if sent.ended || gone {
            self.done = true;
            return Some(Bytes::copy_from_slice(new));
        }
        (!new.is_empty()).then(|| Bytes::copy_from_slice(new))
    }
}

/// A timer that ticks after each [`KEEP_ALIVE_EVERY`] of silence (reset it
/// whenever something is sent).
pub(crate) fn keep_alive() -> tokio::time::Interval {
    let mut every = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE_EVERY, KEEP_ALIVE_EVERY);
    every.set_missed_tick_behavior(MissedTickBehavior::Delay);
    every
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader_of(chats: &Arc<ActiveChats>, chat_id: &str) -> Reader {
        let key = ChatKey {
            agent_id: "assistant".into(),
            chat_id: chat_id.into(),
            author: None,
        };
        Reader::new(&chats.find(&key).unwrap(), chats.limit)
    }

    async fn next(reader: Reader) -> (Option<Bytes>, Option<Reader>) {
        match reader.next().await {
            Some((Ok(bytes), reader)) => (Some(bytes), Some(reader)),
            None => (None, None),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_stream_sends_a_keep_alive_every_fifteen_seconds_and_frames_as_they_come() {
        let chats = Arc::new(ActiveChats::new(1024));
        let writer = chats.open(None, "assistant", "c1", "run-1");
        writer.push(b"data: 1\n\n");
        let reader = reader_of(&chats, "c1");
        let (bytes, reader) = next(reader).await;
        assert_eq!(bytes.unwrap(), &b"data: 1\n\n"[..], "what was sent before, at once");
        let started = tokio::time::Instant::now();
        let (bytes, reader) = next(reader.unwrap()).await;
        assert_eq!(bytes.unwrap(), KEEP_ALIVE);
        assert_eq!(started.elapsed(), KEEP_ALIVE_EVERY);
        writer.push(b"data: 2\n\n");
        let (bytes, reader) = next(reader.unwrap()).await;
        assert_eq!(bytes.unwrap(), &b"data: 2\n\n"[..]);
        drop(writer);
        let (bytes, reader) = next(reader.unwrap()).await;
        assert_eq!(bytes.unwrap(), &b""[..], "the end, with nothing more");
        assert!(next(reader.unwrap()).await.0.is_none());
        assert!(chats.lock().is_empty(), "the ended stream is forgotten");
    }

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

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
//!   in the chat's [`Replay`] (`kept.rs`), from the first (`start`).
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

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::watch;

use super::kept::{ChatKey, Replay, Sent};
use super::parts::UiChunk;
use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::ApiPath;
use crate::sse::{self, KEEP_ALIVE, keep_alive, push_json};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::kept::ActiveChats;
    use crate::sse::KEEP_ALIVE_EVERY;

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
        let key = ChatKey {
            agent_id: "assistant".into(),
            chat_id: "c1".into(),
            author: None,
        };
        assert!(chats.find(&key).is_none(), "the ended stream is forgotten");
    }
}

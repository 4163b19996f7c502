//! A run's chunks as a Server-Sent Events body, framed exactly as Mastra's
//! server frames them: `data: <json>\n\n` per chunk, then `data: [DONE]\n\n`,
//! then the body ends (`@mastra/client-js` waits for the end). No `event:`
//! or `id:` lines: the client drops them. The chat route frames the AI
//! SDK's UI message chunks the same way ([`Wire::UiMessage`]).
//!
//! The body drives the run: polling it polls the [`AgentStream`], which
//! polls the run's driver, on the connection's own task: no task, no
//! channel and no hand-over between tasks per chunk.
//!
//! Frames are written in batches (see [`Batch`]): the chunks a run produces
//! back to back go out in one write to the socket, not one write each. A
//! model's response often arrives whole in one read, yet its HTTP client
//! hands it over one HTTP chunk at a time, two turns of the scheduler
//! apart; before writing, the body lets the scheduler run the tasks the run
//! waits on until two turns in a row bring nothing new. That costs a poll per turn and no
//! system call; a chunk is never held back waiting for I/O. What the body's
//! first poll finds goes at once, in the same write as the response's head.
//!
//! A client that goes away mid-stream drops the body; the rest of the run is
//! then driven on a task tracked by the server, so it still reaches its next
//! stored state (suspended, completed, failed) and can be resumed from
//! there, through this server or another. On the chat route, what is sent
//! is also kept for clients that re-attach, and so are the frames of the
//! rest of the run once the client has gone (`chat/replay.rs`). A slow client slows its run
//! (hyper stops polling the body while its write buffer is full), as a full
//! channel to it would.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use askloop::{AgentStream, Chunk};
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{FutureExt, Stream, StreamExt};
use tokio::time::MissedTickBehavior;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::Instrument;

use crate::AppState;
use crate::chat::kept::ReplayWriter;
use crate::memory::OpenStream;

/// The last frame of every stream.
pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

/// A buffer of frames is handed to the connection once it holds this many
/// bytes, even if more chunks are ready, so one write never grows without
/// bound.
const FLUSH_BYTES: usize = 64 * 1024;

/// Frames wait for more while the run brings new chunks, and are written
/// once this many turns of the scheduler in a row have brought none. The
/// model's HTTP client takes two turns to hand over the next chunk of a
/// response it has already read (`askloop-bench http`, writes per stream:
/// 15 when one idle turn writes, 3.5 with two or three, 3 with five). With
/// the first frames sent with the response's head, writes to sockets per
/// round trip (the model's two requests included): 8.8 with two, three or
/// five idle turns, 7.8 with eight (2026-12-06).
const IDLE_TURNS: u8 = 2;

/// What the frames of a stream carry: Mastra's chunks (`/api`), or the
/// Vercel AI SDK's UI message chunks (`/chat`, see `chat/parts.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    /// Each chunk as it is, in Mastra's envelope.
    Mastra,
    /// Each chunk as the UI message chunks it stands for (none, one or two).
    UiMessage,
}

/// Appends one chunk as SSE frames of `wire` to `out`.
fn push_frame(out: &mut Vec<u8>, chunk: &Chunk, wire: Wire) {
    match wire {
        Wire::Mastra => push_json(out, chunk, chunk.type_name()),
        Wire::UiMessage => {
            for part in crate::chat::parts::of(chunk) {
                push_json(out, &part, chunk.type_name());
            }
        }
    }
}

/// Appends one value as an SSE frame to `out`. A value that cannot be
/// written as JSON is left out whole (nothing of it stays in `out`).
pub(crate) fn push_json(out: &mut Vec<u8>, value: &impl serde::Serialize, what: &str) {
    let start = out.len();
    out.extend_from_slice(b"data: ");
    match serde_json::to_writer(&mut *out, value) {
        Ok(()) => out.extend_from_slice(b"\n\n"),
        Err(err) => {
            out.truncate(start);
            tracing::error!(chunk = what, error = %err, "a chunk could not be written as JSON; skipped");
        }
    }
}

/// Streams a run to the client as SSE; the body drives the run (see the
/// module's documentation), and the server's shutdown waits for it.
pub(crate) fn respond(state: &AppState, stream: AgentStream, span: tracing::Span) -> Response {
    let frames = Frames {
        run: Some(stream),
        span,
        runs: state.runs.clone(),
        _open: state.runs.token(),
        _counted: state.streams.open(),
        batch: Batch::new(Wire::Mastra, Vec::new()),
        replay: None,
        // `@mastra/client-js` reads only `data:` lines; no comments for it.
        keep_alive: None,
    };
    sse_response(Body::from_stream(frames))
}

/// Streams a run to the client as the Vercel AI SDK's UI message stream
/// (protocol v1): `prelude` first (frames already written with
/// [`push_json`]), then the run's chunks as UI message chunks, if there is
/// a run to stream, then `[DONE]`. What is sent also goes to `replay`, for
/// clients that re-attach (`chat/replay.rs`); if the client goes away, the
/// rest of the run still goes there. A silence of 15 s is broken by an SSE
/// comment (`: keep-alive`), so proxies keep an idle stream open.
pub(crate) fn respond_ui(
    state: &AppState,
    prelude: Vec<u8>,
    stream: Option<(AgentStream, Option<ReplayWriter>)>,
    span: tracing::Span,
) -> Response {
    let body = match stream {
        Some((stream, replay)) => Body::from_stream(Frames {
            run: Some(stream),
            span,
            runs: state.runs.clone(),
            _open: state.runs.token(),
            _counted: state.streams.open(),
            batch: Batch::new(Wire::UiMessage, prelude),
            replay,
            keep_alive: Some(keep_alive()),
        }),
        None => Body::from([prelude, DONE.to_vec()].concat()),
    };
    ui_response(body)
}

/// A `200` response carrying the UI message stream `body`.
pub(crate) fn ui_response(body: Body) -> Response {
    let mut response = sse_response(body);
    response
        .headers_mut()
        .insert("x-vercel-ai-ui-message-stream", HeaderValue::from_static("v1"));
    response
}

/// A `200` SSE response with the headers Mastra's streams have.
fn sse_response(body: Body) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The body of one stream: the run's frames, as many at a time as are ready.
struct Frames {
    /// The run, until its last frame (`[DONE]`) has been handed out.
    run: Option<AgentStream>,
    span: tracing::Span,
    /// Where the rest of the run goes if the client leaves early.
    runs: TaskTracker,
    /// Keeps the server's shutdown waiting while the stream is open.
    _open: TaskTrackerToken,
    /// Counts the stream among the open ones (see `memory.rs`).
    _counted: OpenStream,
    /// The frames not yet handed to the connection.
    batch: Batch,
    /// Where what is sent is kept for clients that re-attach.
    replay: Option<ReplayWriter>,
    /// When to send a comment to a connection that has had nothing for a
    /// while (`None`: never).
    keep_alive: Option<tokio::time::Interval>,
}

impl Stream for Frames {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(run) = this.run.as_mut() else {
            return Poll::Ready(None);
        };
        let _entered = this.span.enter();
        let gathered = match this.batch.poll(run, cx) {
            Poll::Ready(gathered) => gathered,
            Poll::Pending => {
                if let Some(every) = this.keep_alive.as_mut()
                    && every.poll_tick(cx).is_ready()
                {
                    return Poll::Ready(Some(Ok(Bytes::from_static(KEEP_ALIVE))));
                }
                return Poll::Pending;
            }
        };
        if let Some(every) = this.keep_alive.as_mut() {
            every.reset();
        }
        let frames = match gathered {
            Gathered::Frames(frames) => {
                if let Some(replay) = &this.replay {
                    replay.push(&frames);
                }
                frames
            }
            Gathered::Last(frames) => {
                // Kept, then the replay ends: the stream is over.
                if let Some(replay) = this.replay.take() {
                    replay.push(&frames);
                }
                if let Some(run) = this.run.take() {
                    log_end(run);
                }
                frames
            }
        };
        Poll::Ready(Some(Ok(frames)))
    }
}

/// The frames of a run's chunks gathered for one write.
#[derive(Debug)]
struct Batch {
    /// How chunks are written.
    wire: Wire,
    out: Vec<u8>,
    /// Polls in a row that found the frames waiting and brought no new chunk.
    idle_turns: u8,
    /// No poll has happened yet: the connection has the response's head
    /// waiting in its buffer.
    first_poll: bool,
}

/// What a [`Batch`] hands to the connection.
#[derive(Debug, PartialEq)]
enum Gathered {
    /// Frames, with more to come.
    Frames(Bytes),
    /// The last frames, `[DONE]` included: the run's stream has ended.
    Last(Bytes),
}

impl Batch {
    /// A batch writing chunks as `wire` says, with `out` (frames already
    /// written) to go first.
    fn new(wire: Wire, out: Vec<u8>) -> Self {
        Batch {
            wire,
            out,
            idle_turns: 0,
            first_poll: true,
        }
    }

    /// Takes the chunks `run` has ready. Frames are handed out when the run
    /// has ended, when they reach [`FLUSH_BYTES`], or once [`IDLE_TURNS`]
    /// polls in a row brought nothing new; until then the task wakes itself
    /// and yields, so that what the run waits on can run first. With no
    /// frames waiting, the run's own waker is the only one registered.
    ///
    /// The first poll hands out at once what it found: hyper polls the body
    /// right after taking the response's head, and writes the head when the
    /// body next says it has nothing. Frames handed out then share the
    /// head's write; frames held for another turn would go in a write of
    /// their own, after the head's (`askloop-bench http`: 11 writes to
    /// sockets per round trip before, 9 after).
    fn poll(&mut self, run: &mut (impl Stream<Item = Chunk> + Unpin), cx: &mut Context<'_>) -> Poll<Gathered> {
        let first_poll = std::mem::replace(&mut self.first_poll, false);
        let mut grew = false;
        loop {
            match run.poll_next_unpin(cx) {
                Poll::Ready(Some(chunk)) => {
                    push_frame(&mut self.out, &chunk, self.wire);
                    grew = true;
                    if self.out.len() >= FLUSH_BYTES {
                        return Poll::Ready(Gathered::Frames(self.take()));
                    }
                }
                Poll::Ready(None) => {
                    self.out.extend_from_slice(DONE);
                    return Poll::Ready(Gathered::Last(self.take()));
                }
                Poll::Pending => break,
            }
        }
        if self.out.is_empty() {
            return Poll::Pending;
        }
        if first_poll {
            return Poll::Ready(Gathered::Frames(self.take()));
        }
        self.idle_turns = if grew { 0 } else { self.idle_turns + 1 };
        if self.idle_turns >= IDLE_TURNS {
            return Poll::Ready(Gathered::Frames(self.take()));
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn take(&mut self) -> Bytes {
        self.idle_turns = 0;
        Bytes::from(std::mem::take(&mut self.out))
    }
}

impl Drop for Frames {
    fn drop(&mut self) {
        let Some(run) = self.run.take() else { return };
        let _entered = self.span.enter();
        tracing::info!("the client went away; the run goes on to its next stored state");
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => match self.replay.take() {
                // Nobody may come back for the frames: only the run matters.
                None => {
                    let rest = run.output().map(|output| {
                        tracing::info!(status = %output.status, error = output.error().as_deref(), "stream ended");
                    });
                    self.runs.spawn_on(rest.instrument(self.span.clone()), &runtime);
                }
                Some(replay) => {
                    let unsent = std::mem::take(&mut self.batch.out);
                    let rest = keep_for_replay(run, self.batch.wire, unsent, replay);
                    self.runs.spawn_on(rest.instrument(self.span.clone()), &runtime);
                }
            },
            // Outside a runtime the stream's own drop says the run stays
            // where it is.
            Err(_) => drop(run),
        }
    }
}

/// Drives the rest of a run whose client went away, keeping its frames
/// (`unsent` first) in `replay` for a client that re-attaches.
async fn keep_for_replay(mut run: AgentStream, wire: Wire, unsent: Vec<u8>, replay: ReplayWriter) {
    replay.push(&unsent);
    let mut out = Vec::new();
    while let Some(chunk) = run.next().await {
        push_frame(&mut out, &chunk, wire);
        replay.push(&out);
        out.clear();
    }
    replay.push(DONE);
    drop(replay);
    log_end(run);
}

/// Logs how a stream that was read to its end ended.
fn log_end(run: AgentStream) {
    // The stream has ended, so its outcome is there: no waiting.
    match run.output().now_or_never() {
        Some(output) => tracing::info!(status = %output.status, error = output.error().as_deref(), "stream ended"),
        None => tracing::warn!("the stream ended without its outcome"),
    }
}

/// What an SSE stream sends while it has nothing else to send, so that
/// proxies that close idle connections keep it open. Clients skip comments.
pub(crate) const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// How long a stream may stay silent before a [`KEEP_ALIVE`] goes out.
pub(crate) const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(15);

/// A timer that ticks after each [`KEEP_ALIVE_EVERY`] of silence (reset it
/// whenever something is sent).
pub(crate) fn keep_alive() -> tokio::time::Interval {
    let mut every = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE_EVERY, KEEP_ALIVE_EVERY);
    every.set_missed_tick_behavior(MissedTickBehavior::Delay);
    every
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    use askloop::ChunkKind;
    use askloop::chunk::TextDelta;

    use super::*;

    /// A run whose chunks come as scripted: each poll of the script takes
    /// its next step (`Some(text)`: a text delta; `None`: nothing yet).
    struct Scripted {
        steps: VecDeque<Option<&'static str>>,
    }

    impl Stream for Scripted {
        type Item = Chunk;

        fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Chunk>> {
            match self.steps.pop_front() {
                Some(Some(text)) => Poll::Ready(Some(delta(text))),
                Some(None) => Poll::Pending,
                None => Poll::Ready(None),
            }
        }
    }

    fn scripted(steps: &[Option<&'static str>]) -> Scripted {
        Scripted {
            steps: steps.iter().copied().collect(),
        }
    }

    fn delta(text: &str) -> Chunk {
        Chunk::new(
            "run-1",
            ChunkKind::TextDelta(TextDelta {
                id: "t1".into(),
                text: text.into(),
            }),
        )
    }

    fn frames(texts: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for text in texts {
            push_frame(&mut out, &delta(text), Wire::Mastra);
        }
        out
    }

    /// Counts the wake-ups the batch asks for.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Wakes>, Waker) {
        let wakes = Arc::new(Wakes::default());
        (Arc::clone(&wakes), Waker::from(Arc::clone(&wakes)))
    }

    #[test]
    fn chunks_that_come_turn_after_turn_are_written_together_after_two_idle_turns() {
        // Nothing on the first poll; then "a", "b" one turn later, then
        // nothing for two turns.
        let mut run = scripted(&[None, Some("a"), None, Some("b"), None, None, None, Some("c"), None]);
        let (wakes, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut batch = Batch::new(Wire::Mastra, Vec::new());
        assert_eq!(batch.poll(&mut run, &mut cx), Poll::Pending, "nothing yet");
        assert_eq!(batch.poll(&mut run, &mut cx), Poll::Pending, "a waits for more");
        assert_eq!(batch.poll(&mut run, &mut cx), Poll::Pending, "b came: both wait");
        assert_eq!(
            batch.poll(&mut run, &mut cx),
            Poll::Pending,
            "one turn with nothing new"
        );
        assert_eq!(
            batch.poll(&mut run, &mut cx),
            Poll::Ready(Gathered::Frames(Bytes::from(frames(&["a", "b"])))),
            "the second turn with nothing new writes them"
        );
        assert_eq!(wakes.0.load(Ordering::SeqCst), 3, "the task yielded once per held turn");
        assert_eq!(batch.poll(&mut run, &mut cx), Poll::Pending, "c waits for more");
        assert_eq!(
            batch.poll(&mut run, &mut cx),
            Poll::Ready(Gathered::Last(Bytes::from([frames(&["c"]), DONE.to_vec()].concat()))),
            "the end of the run writes what waits at once, then [DONE]"
        );
    }

    #[test]
    fn what_the_first_poll_finds_goes_at_once_with_the_response_head() {
        let mut run = scripted(&[Some("start"), None, None, Some("a"), None, None, None]);
        let (wakes, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut batch = Batch::new(Wire::Mastra, Vec::new());
        assert_eq!(
            batch.poll(&mut run, &mut cx),
            Poll::Ready(Gathered::Frames(Bytes::from(frames(&["start"])))),
            "the first frames are not held for more"
        );
        assert_eq!(
            batch.poll(&mut run, &mut cx),
            Poll::Pending,
            "nothing new: the head goes"
        );
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            0,
            "nothing waits, so the task does not spin"
        );
        assert_eq!(
            batch.poll(&mut run, &mut cx),
            Poll::Pending,
            "later frames wait for more"
        );
        assert_eq!(batch.poll(&mut run, &mut cx), Poll::Pending);
        assert_eq!(
            batch.poll(&mut run, &mut cx),
            Poll::Ready(Gathered::Frames(Bytes::from(frames(&["a"])))),
            "after two idle turns"
        );
    }

    #[test]
    fn a_run_with_nothing_ready_leaves_waking_to_the_run() {
        let mut run = scripted(&[None, None]);
        let (wakes, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut batch = Batch::new(Wire::Mastra, Vec::new());
        assert_eq!(batch.poll(&mut run, &mut cx), Poll::Pending);
        assert_eq!(batch.poll(&mut run, &mut cx), Poll::Pending);
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            0,
            "no frames wait, so the task does not spin"
        );
    }

    #[test]
    fn frames_are_written_at_once_when_they_reach_the_flush_size() {
        let big: &'static str = "x".repeat(FLUSH_BYTES).leak();
        let mut run = scripted(&[Some(big), Some("after")]);
        let (_, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut batch = Batch::new(Wire::Mastra, Vec::new());
        assert_eq!(
            batch.poll(&mut run, &mut cx),
            Poll::Ready(Gathered::Frames(Bytes::from(frames(&[big])))),
            "no chunk is added past the flush size"
        );
        assert_eq!(
            batch.poll(&mut run, &mut cx),
            Poll::Ready(Gathered::Last(Bytes::from(
                [frames(&["after"]), DONE.to_vec()].concat()
            )))
        );
    }

    #[test]
    fn the_idle_count_starts_again_after_each_write() {
        // After a write, a new chunk waits its own two idle turns.
        let mut run = scripted(&[None, Some("a"), None, None, None, Some("b"), None, None, None]);
        let (_, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let mut batch = Batch::new(Wire::Mastra, Vec::new());
        let mut written = Vec::new();
        for _ in 0..7 {
            if let Poll::Ready(Gathered::Frames(bytes)) = batch.poll(&mut run, &mut cx) {
                written.push(bytes);
            }
        }
        assert_eq!(written, vec![Bytes::from(frames(&["a"])), Bytes::from(frames(&["b"]))]);
    }
}

//! A run's chunks as a Server-Sent Events body, framed exactly as Mastra's
//! server frames them: `data: <json>\n\n` per chunk, then `data: [DONE]\n\n`,
//! then the body ends (`@mastra/client-js` waits for the end). No `event:`
//! or `id:` lines: the client drops them.
//!
//! The body drives the run: polling it polls the [`AgentStream`], which
//! polls the run's driver, on the connection's own task: no task, no
//! channel and no hand-over between tasks per chunk. The chunks that are
//! ready at one poll (a step's closing chunks, a tool call's chunks) go out
//! as one buffer, one write to the socket.
//!
//! A client that goes away mid-stream drops the body; the rest of the run is
//! then driven on a task tracked by the server, so it still reaches its next
//! stored state (suspended, completed, failed) and can be resumed from
//! there, through this server or another. A slow client slows its run
//! (hyper stops polling the body while its write buffer is full), as a full
//! channel to it would.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use askloop::{AgentStream, Chunk};
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{FutureExt, Stream, StreamExt};
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::Instrument;

use crate::AppState;
use crate::memory::OpenStream;

/// The last frame of every stream.
pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

/// A buffer of frames is handed to the connection once it holds this many
/// bytes, even if more chunks are ready, so one write never grows without
/// bound.
const FLUSH_BYTES: usize = 64 * 1024;

/// Appends one chunk as an SSE frame to `out`. A chunk that cannot be
/// written as JSON is left out whole (nothing of it stays in `out`).
fn push_frame(out: &mut Vec<u8>, chunk: &Chunk) {
    let start = out.len();
    out.extend_from_slice(b"data: ");
    match serde_json::to_writer(&mut *out, chunk) {
        Ok(()) => out.extend_from_slice(b"\n\n"),
        Err(err) => {
            out.truncate(start);
            tracing::error!(chunk = chunk.type_name(), error = %err, "a chunk could not be written as JSON; skipped");
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
    };
    let mut response = (StatusCode::OK, Body::from_stream(frames)).into_response();
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
}

impl Stream for Frames {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(run) = this.run.as_mut() else {
            return Poll::Ready(None);
        };
        let _entered = this.span.enter();
        let mut out = Vec::new();
        loop {
            match run.poll_next_unpin(cx) {
                Poll::Ready(Some(chunk)) => {
                    push_frame(&mut out, &chunk);
                    if out.len() >= FLUSH_BYTES {
                        break;
                    }
                }
                Poll::Ready(None) => {
                    out.extend_from_slice(DONE);
                    if let Some(run) = this.run.take() {
                        log_end(run);
                    }
                    break;
                }
                Poll::Pending if out.is_empty() => return Poll::Pending,
                Poll::Pending => break,
            }
        }
        Poll::Ready(Some(Ok(Bytes::from(out))))
    }
}

impl Drop for Frames {
    fn drop(&mut self) {
        let Some(run) = self.run.take() else { return };
        let _entered = self.span.enter();
        tracing::info!("the client went away; the run goes on to its next stored state");
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let rest = run.output().map(|output| {
                    tracing::info!(status = %output.status, error = output.error.as_deref(), "stream ended");
                });
                self.runs.spawn_on(rest.instrument(self.span.clone()), &runtime);
            }
            // Outside a runtime the stream's own drop says the run stays
            // where it is.
            Err(_) => drop(run),
        }
    }
}

/// Logs how a stream that was read to its end ended.
fn log_end(run: AgentStream) {
    // The stream has ended, so its outcome is there: no waiting.
    match run.output().now_or_never() {
        Some(output) => tracing::info!(status = %output.status, error = output.error.as_deref(), "stream ended"),
        None => tracing::warn!("the stream ended without its outcome"),
    }
}

//! A run's chunks as a Server-Sent Events body, framed exactly as Mastra's
//! server frames them: `data: <json>\n\n` per chunk, then `data: [DONE]\n\n`,
//! then the body ends (`@mastra/client-js` waits for the end). No `event:`
//! or `id:` lines: the client drops them.
//!
//! The run is driven by a task of its own, not by the response body: a
//! client that goes away mid-stream only stops receiving; the run goes on to
//! its next stored state (suspended, completed, failed) and can be resumed
//! from there, through this server or another.

use std::convert::Infallible;

use askloop::{AgentStream, Chunk};
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::AppState;

/// The last frame of every stream.
pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

/// How many frames may wait for a slow client before the run waits too.
const BUFFERED_FRAMES: usize = 64;

/// One chunk as an SSE frame.
pub(crate) fn frame(chunk: &Chunk) -> Option<Bytes> {
    match serde_json::to_vec(chunk) {
        Ok(json) => {
            let mut frame = Vec::with_capacity(json.len() + 8);
            frame.extend_from_slice(b"data: ");
            frame.extend_from_slice(&json);
            frame.extend_from_slice(b"\n\n");
            Some(Bytes::from(frame))
        }
        Err(err) => {
            tracing::error!(chunk = chunk.type_name(), error = %err, "a chunk could not be written as JSON; skipped");
            None
        }
    }
}

/// Streams a run to the client as SSE, driving it on a task tracked by the
/// server (see [`crate::Server::serve`] for shutdown).
pub(crate) fn respond(state: &AppState, stream: AgentStream, span: tracing::Span) -> Response {
    let (frames, receiver) = mpsc::channel::<Bytes>(BUFFERED_FRAMES);
    state.runs.spawn(drive(stream, frames).instrument(span));
    let body = Body::from_stream(futures::stream::unfold(receiver, |mut receiver| async move {
        let frame = receiver.recv().await?;
        Some((Ok::<_, Infallible>(frame), receiver))
    }));
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// Reads the run to the end of this stream, sending each chunk while the
/// client listens.
async fn drive(mut stream: AgentStream, frames: mpsc::Sender<Bytes>) {
    let mut client = Some(frames);
    while let Some(chunk) = stream.next().await {
        let Some(sender) = &client else { continue };
        let Some(frame) = frame(&chunk) else { continue };
        if sender.send(frame).await.is_err() {
            tracing::info!("the client went away; the run goes on to its next stored state");
            client = None;
        }
    }
    let output = stream.output().await;
    tracing::info!(status = %output.status, error = output.error.as_deref(), "stream ended");
    if let Some(sender) = client {
        let _ = sender.send(Bytes::from_static(DONE)).await;
    }
}

//! The event stream of a successful response: SSE events read with an idle
//! timeout and handed to a provider's parser, which turns them into model
//! events. A failure here comes after streaming began, so it ends the turn
//! with an error and is never retried.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use askloop::{ModelError, ModelEvent, ModelStream};
use bytes::Bytes;
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use reqwest::Response;

use crate::http::error_chain;

/// A provider's stream parser: fed SSE events, it produces model events.
pub(crate) trait StreamParser: Send + 'static {
    /// Handles one SSE event; pushes what it yields into `out`. Returns
    /// `Ok(true)` when the event ended the stream (`[DONE]`,
    /// `message_stop`).
    fn on_event(&mut self, event: &Event, out: &mut VecDeque<ModelEvent>) -> Result<bool, ModelError>;

    /// The body ended (or the stream was ended by [`Self::on_event`]): pushes
    /// what is still held back, or fails when the response was cut short.
    fn on_end(&mut self, out: &mut VecDeque<ModelEvent>) -> Result<(), ModelError>;
}

/// Why the body stopped before its end.
#[derive(Debug)]
enum BodyError {
    /// The connection failed.
    Transport(reqwest::Error),
    /// No bytes for the idle timeout.
    Idle,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Transport(err) => f.write_str(&error_chain(err)),
            BodyError::Idle => f.write_str("idle"),
        }
    }
}

type SseStream = Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<BodyError>>> + Send>>;

/// The body's bytes, failing with [`BodyError::Idle`] when none come for
/// `idle`. Idleness is measured on bytes, not events, so SSE comments that
/// servers send as keep-alives (`: processing`) keep a slow turn alive.
fn body_with_idle_timeout(
    response: Response,
    idle: Duration,
) -> impl Stream<Item = Result<Bytes, BodyError>> + Send + 'static {
    let body = Box::pin(response.bytes_stream());
    futures::stream::unfold(Some(body), move |body| async move {
        let mut body = body?;
        match tokio::time::timeout(idle, body.next()).await {
            Err(_) => Some((Err(BodyError::Idle), None)),
            Ok(None) => None,
            Ok(Some(Ok(bytes))) => Some((Ok(bytes), Some(body))),
            Ok(Some(Err(err))) => Some((Err(BodyError::Transport(err)), None)),
        }
    })
}

struct SseState<P> {
    provider: String,
    events: SseStream,
    parser: P,
    idle: Duration,
    ready: VecDeque<ModelEvent>,
    done: bool,
}

/// Turns a successful streaming response into model events. Dropping the
/// returned stream drops the response body, which closes the connection and
/// so cancels the request.
pub(crate) fn model_stream<P: StreamParser>(
    provider: &str,
    response: Response,
    parser: P,
    idle: Duration,
) -> ModelStream {
    let state = SseState {
        provider: provider.to_owned(),
        events: Box::pin(body_with_idle_timeout(response, idle).eventsource()),
        parser,
        idle,
        ready: VecDeque::new(),
        done: false,
    };
    Box::pin(futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.ready.pop_front() {
                return Some((Ok(event), state));
            }
            if state.done {
                return None;
            }
            match state.next_events().await {
                Ok(()) => {}
                Err(err) => {
                    // Nothing after an error: the turn is over.
                    state.done = true;
                    state.ready.clear();
                    return Some((Err(err), state));
                }
            }
        }
    }))
}

impl<P: StreamParser> SseState<P> {
    /// Reads until the parser has something to say or the stream ends.
    async fn next_events(&mut self) -> Result<(), ModelError> {
        match self.events.next().await {
            None => {
                self.done = true;
                self.parser.on_end(&mut self.ready)
            }
            Some(Err(EventStreamError::Transport(BodyError::Idle))) => Err(ModelError::Transport {
                provider: self.provider.clone(),
                message: format!(
                    "the stream stalled: no data for {:?} (the response was cut short)",
                    self.idle
                ),
            }),
            Some(Err(EventStreamError::Transport(err))) => Err(ModelError::Transport {
                provider: self.provider.clone(),
                message: format!("the connection broke while the response streamed: {err}"),
            }),
            Some(Err(err)) => Err(ModelError::Protocol {
                provider: self.provider.clone(),
                message: format!("invalid server-sent events: {err}"),
            }),
            Some(Ok(event)) => {
                if self.parser.on_event(&event, &mut self.ready)? {
                    self.done = true;
                    self.parser.on_end(&mut self.ready)?;
                }
                Ok(())
            }
        }
    }
}

/// Replays SSE text through a parser, as the stream of a response would:
/// for parser tests against recorded streams.
#[cfg(test)]
pub(crate) fn parse_sse_text<P: StreamParser>(text: &str, mut parser: P) -> Vec<Result<ModelEvent, ModelError>> {
    let bytes = futures::stream::iter([Ok::<_, std::convert::Infallible>(Bytes::from(text.to_owned()))]);
    let events: Vec<_> = futures::executor::block_on(bytes.eventsource().collect());
    let mut out = VecDeque::new();
    let mut results = Vec::new();
    for event in events.into_iter().flatten() {
        match parser.on_event(&event, &mut out) {
            Ok(done) => {
                results.extend(out.drain(..).map(Ok));
                if done {
                    break;
                }
            }
            Err(err) => {
                results.push(Err(err));
                return results;
            }
        }
    }
    match parser.on_end(&mut out) {
        Ok(()) => results.extend(out.drain(..).map(Ok)),
        Err(err) => results.push(Err(err)),
    }
    results
}

//! The event stream of a successful response: SSE events (read by
//! [`askloop::sse::SseDecoder`]) within the idle timeout and the call's
//! deadline, and handed to a provider's parser, which turns them into model
//! events. A failure here comes after streaming
//! began, so it ends the turn with an error and is never retried.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use askloop::sse::{SseDecoder, SseEvent};
use askloop::{Cause, ErrorChain, ModelError, ModelEvent, ModelStream};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::Response;
use tokio::time::Instant;

use crate::http::{Deadline, HttpConfig, human};

/// A provider's stream parser: fed SSE events, it produces model events.
pub(crate) trait StreamParser: Send + 'static {
    /// Handles one SSE event; pushes what it yields into `out`. Returns
    /// `Ok(true)` when the event ended the stream (`[DONE]`,
    /// `message_stop`).
    fn on_event(&mut self, event: &SseEvent<'_>, out: &mut VecDeque<ModelEvent>) -> Result<bool, ModelError>;

    /// The body ended (or the stream was ended by [`Self::on_event`]): pushes
    /// what is still held back, or fails when the response was cut short.
    fn on_end(&mut self, out: &mut VecDeque<ModelEvent>) -> Result<(), ModelError>;
}

type Body = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// Progress is an event: the idle timeout runs from the response headers
/// or the last event, so comments (keep-alives) and the bytes of an event
/// still incomplete do not reset it. A server that sends only `: ping` for
/// ever is cut off after the idle timeout, and every stream ends by the
/// call's total deadline.
struct SseState<P> {
    provider: String,
    body: Body,
    decoder: SseDecoder,
    parser: P,
    idle: Duration,
    deadline: Deadline,
    /// When the last event (or the headers) came.
    progress_at: Instant,
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
    http: &HttpConfig,
    deadline: Deadline,
) -> ModelStream {
    let state = SseState {
        provider: provider.to_owned(),
        body: Box::pin(response.bytes_stream()),
        decoder: SseDecoder::new(),
        parser,
        idle: http.idle_timeout,
        deadline,
        progress_at: Instant::now(),
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
    /// Reads until the parser has handled one event or the stream ends.
    async fn next_events(&mut self) -> Result<(), ModelError> {
        loop {
            let event = self.decoder.next_event().map_err(|err| ModelError::Protocol {
                provider: self.provider.clone(),
                message: format!("invalid server-sent events: {err}"),
            })?;
            if let Some(event) = event {
                self.progress_at = Instant::now();
                if self.parser.on_event(&event, &mut self.ready)? {
                    self.done = true;
                    self.parser.on_end(&mut self.ready)?;
                }
                return Ok(());
            }
            let idle_end = self.progress_at.checked_add(self.idle).unwrap_or(self.deadline.at());
            let read = tokio::time::timeout_at(idle_end.min(self.deadline.at()), self.body.next()).await;
            match read {
                Err(_) if Instant::now() >= self.deadline.at() => return Err(self.deadline.exceeded(&self.provider)),
                Err(_) => {
                    return Err(ModelError::Transport {
                        provider: self.provider.clone(),
                        message: format!(
                            "the stream stalled: no event for {} (keep-alive comments do not count; \
                             ASKLOOP_MODEL_IDLE_TIMEOUT or HttpConfig::idle_timeout sets it), so the \
                             response was cut short",
                            human(self.idle)
                        ),
                        source: None,
                    });
                }
                Ok(None) => {
                    self.decoder.end();
                    self.done = true;
                    return self.parser.on_end(&mut self.ready);
                }
                Ok(Some(Err(err))) => {
                    return Err(ModelError::Transport {
                        provider: self.provider.clone(),
                        message: format!("the connection broke while the response streamed: {}", ErrorChain(&err)),
                        source: Some(Cause::new(err)),
                    });
                }
                Ok(Some(Ok(bytes))) => self.decoder.push(&bytes),
            }
        }
    }
}

/// Replays SSE text through a parser, as the stream of a response would:
/// for parser tests against recorded streams.
#[cfg(test)]
pub(crate) fn parse_sse_text<P: StreamParser>(text: &str, parser: P) -> Vec<Result<ModelEvent, ModelError>> {
    parse_sse_chunks([text.as_bytes()], parser)
}

/// Replays a body cut into the given chunks through a parser, as the
/// stream of a response would (`parse_sse_text` with cuts; the fuzz targets).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn parse_sse_chunks<'a, P: StreamParser>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
    mut parser: P,
) -> Vec<Result<ModelEvent, ModelError>> {
    let mut decoder = SseDecoder::new();
    let mut out = VecDeque::new();
    let mut results = Vec::new();
    let mut chunks = chunks.into_iter();
    loop {
        let event = match decoder.next_event() {
            Ok(event) => event,
            Err(err) => {
                results.push(Err(ModelError::Protocol {
                    provider: "test".to_owned(),
                    message: format!("invalid server-sent events: {err}"),
                }));
                return results;
            }
        };
        match event {
            Some(event) => match parser.on_event(&event, &mut out) {
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
            },
            None => match chunks.next() {
                Some(chunk) => decoder.push(chunk),
                None => {
                    decoder.end();
                    break;
                }
            },
        }
    }
    match parser.on_end(&mut out) {
        Ok(()) => results.extend(out.drain(..).map(Ok)),
        Err(err) => results.push(Err(err)),
    }
    results
}

#[cfg(test)]
mod tests {
    use askloop::sse::SseError;

    type Events = Vec<(String, String)>;

    /// The events of a body cut into `chunks`, as (type, data).
    fn decode<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Result<Events, SseError> {
        Ok(askloop::sse::decode_chunks(chunks)?
            .into_iter()
            .map(|e| (e.event, e.data))
            .collect())
    }

    fn decode_text(text: &str) -> Events {
        decode([text.as_bytes()]).unwrap()
    }

    fn one_byte_at_a_time(bytes: &[u8]) -> Result<Events, SseError> {
        decode(bytes.chunks(1))
    }

    /// xorshift64: reproducible chunk boundaries without a dependency.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    fn random_chunks<'a>(bytes: &'a [u8], rng: &mut Rng) -> Vec<&'a [u8]> {
        let mut chunks = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            // Mostly small pieces, sometimes empty ones, sometimes big ones.
            let len = match rng.below(10) {
                0 => 0,
                1 => rng.below(400),
                _ => rng.below(8) + 1,
            }
            .min(rest.len());
            let (chunk, tail) = rest.split_at(len);
            chunks.push(chunk);
            rest = tail;
        }
        chunks
    }

    const FIXTURES: &[(&str, &str)] = &[
        (
            "anthropic/text_after_tool_result_sonnet46",
            include_str!("../tests/fixtures/anthropic/text_after_tool_result_sonnet46.sse"),
        ),
        (
            "anthropic/text_only_sonnet46",
            include_str!("../tests/fixtures/anthropic/text_only_sonnet46.sse"),
        ),
        (
            "anthropic/text_then_tool_use_nested_sonnet46",
            include_str!("../tests/fixtures/anthropic/text_then_tool_use_nested_sonnet46.sse"),
        ),
        (
            "anthropic/thinking_then_text_sonnet46",
            include_str!("../tests/fixtures/anthropic/thinking_then_text_sonnet46.sse"),
        ),
        (
            "anthropic/tool_use_empty_input_sonnet46",
            include_str!("../tests/fixtures/anthropic/tool_use_empty_input_sonnet46.sse"),
        ),
        (
            "anthropic/tool_use_only_haiku45",
            include_str!("../tests/fixtures/anthropic/tool_use_only_haiku45.sse"),
        ),
        (
            "ollama/v1_parallel_tool_calls_single_chunk_qwen25_coder",
            include_str!("../tests/fixtures/ollama/v1_parallel_tool_calls_single_chunk_qwen25_coder.sse"),
        ),
        (
            "ollama/v1_tool_call_single_chunk_llama31_8b",
            include_str!("../tests/fixtures/ollama/v1_tool_call_single_chunk_llama31_8b.sse"),
        ),
        (
            "openai/text_after_tool_result_gpt4o_mini",
            include_str!("../tests/fixtures/openai/text_after_tool_result_gpt4o_mini.sse"),
        ),
        (
            "openai/text_plain_gpt41_nano",
            include_str!("../tests/fixtures/openai/text_plain_gpt41_nano.sse"),
        ),
        (
            "openai/tool_call_single_gpt4o_mini",
            include_str!("../tests/fixtures/openai/tool_call_single_gpt4o_mini.sse"),
        ),
        (
            "openai/tool_call_zero_args_gpt4o_mini",
            include_str!("../tests/fixtures/openai/tool_call_zero_args_gpt4o_mini.sse"),
        ),
        (
            "openai/tool_calls_parallel_gpt41_mini",
            include_str!("../tests/fixtures/openai/tool_calls_parallel_gpt41_mini.sse"),
        ),
    ];

    #[test]
    fn recorded_fixtures_give_the_same_events_however_they_are_cut() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for (name, text) in FIXTURES {
            let whole = decode_text(text);
            let blocks = text.split("\n\n").filter(|b| b.contains("data:")).count();
            assert!(!whole.is_empty(), "{name}");
            assert_eq!(whole.len(), blocks, "{name}: one event per data block");
            assert_eq!(
                one_byte_at_a_time(text.as_bytes()).unwrap(),
                whole,
                "{name}: one byte at a time"
            );
            for round in 0..50 {
                let chunks = random_chunks(text.as_bytes(), &mut rng);
                assert_eq!(decode(chunks).unwrap(), whole, "{name}: random cut, round {round}");
            }
            for line_end in ["\r\n", "\r"] {
                let other = text.replace('\n', line_end);
                assert_eq!(decode_text(&other), whole, "{name} with {line_end:?}");
                for round in 0..20 {
                    let chunks = random_chunks(other.as_bytes(), &mut rng);
                    assert_eq!(
                        decode(chunks).unwrap(),
                        whole,
                        "{name} with {line_end:?}, round {round}"
                    );
                }
            }
        }
    }
}

//! The event stream of a successful response: SSE events read within the
//! idle timeout and the call's deadline, and handed to a provider's parser,
//! which turns them into model events. A failure here comes after streaming
//! began, so it ends the turn with an error and is never retried.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use askloop::{Cause, ErrorChain, ModelError, ModelEvent, ModelStream};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::Response;
use tokio::time::Instant;

use crate::http::{Deadline, HttpConfig, human};

/// One server-sent event: its type (`message` when the event had no
/// `event:` line) and its data (the `data:` lines joined with `\n`).
/// Borrowed from the [`SseDecoder`] until its next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SseEvent<'a> {
    pub(crate) event: &'a str,
    pub(crate) data: &'a str,
}

/// The stream's bytes are not server-sent events (invalid UTF-8).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SseError(String);

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Server-sent event framing (the WHATWG `text/event-stream` rules), fed
/// the body's chunks as they come:
///
/// - lines end with `\n`, `\r\n` or `\r`, and a line end may be split
///   between two chunks (a `\r` at the end of one, the `\n` at the start
///   of the next);
/// - `data:` with or without one space after the colon; several `data:`
///   lines of one event are joined with `\n`; `event:` sets the type;
///   `id:`, `retry:`, unknown fields and `:` comment lines (keep-alives)
///   are ignored; a line without a colon is a field with an empty value;
/// - a blank line dispatches the event, unless it had no `data:` line;
/// - a UTF-8 byte order mark at the very start is skipped;
/// - at the end of the body, an event not closed by a blank line is
///   dropped (as the spec and browsers do): a stream cut in the middle of
///   an event must not hand the parser half of it;
/// - the `data:` and `event:` values must be UTF-8, else [`SseError`]
///   (lines that are ignored are not checked).
///
/// The bytes of a partial line are kept until the line ends; complete
/// lines are read in place, so an event costs one copy of its data.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    /// Received bytes; `buf[pos..]` is not read yet.
    buf: Vec<u8>,
    pos: usize,
    /// `buf[pos..searched]` holds no line end: a long line arriving in many
    /// chunks is searched once, not again from its start at each chunk.
    searched: usize,
    /// The data of the event being read, each line followed by `\n`.
    data: String,
    /// The type of the event being read (empty: `message`).
    event: String,
    /// The previous line ended with `\r`: a `\n` that comes next belongs to it.
    after_cr: bool,
    /// The byte order mark was looked for.
    bom_checked: bool,
    /// The last call returned an event: its buffers are cleared first.
    dispatched: bool,
    /// The body ended.
    ended: bool,
}

impl SseDecoder {
    pub(crate) fn new() -> Self {
        SseDecoder::default()
    }

    /// Adds a chunk of the body.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        if self.pos == self.buf.len() {
            self.buf.clear();
        } else if self.pos > 0 {
            self.buf.drain(..self.pos);
        }
        self.searched -= self.pos.min(self.searched);
        self.pos = 0;
        self.buf.extend_from_slice(chunk);
    }

    /// Tells that the body ended: what is left unterminated is dropped.
    pub(crate) fn end(&mut self) {
        self.ended = true;
    }

    /// The next complete event in what was pushed, if any.
    pub(crate) fn next_event(&mut self) -> Result<Option<SseEvent<'_>>, SseError> {
        if !self.advance()? {
            return Ok(None);
        }
        // `advance` returns true only with at least one data line.
        let data = &self.data[..self.data.len() - 1];
        let event = if self.event.is_empty() { "message" } else { &self.event };
        Ok(Some(SseEvent { event, data }))
    }

    /// Reads lines until an event is complete (true) or the bytes run out.
    fn advance(&mut self) -> Result<bool, SseError> {
        if self.dispatched {
            self.dispatched = false;
            self.data.clear();
            self.event.clear();
        }
        if !self.bom_checked {
            let rest = &self.buf[self.pos..];
            if rest.len() < BOM.len() && BOM.starts_with(rest) && !self.ended {
                return Ok(false);
            }
            if rest.starts_with(BOM) {
                self.pos += BOM.len();
            }
            self.bom_checked = true;
        }
        loop {
            if self.after_cr && self.pos < self.buf.len() {
                self.after_cr = false;
                if self.buf[self.pos] == b'\n' {
                    self.pos += 1;
                }
            }
            let start = self.pos;
            let from = self.searched.max(start);
            let Some(found) = memchr::memchr2(b'\n', b'\r', &self.buf[from..]) else {
                // A partial line (dropped if the body ended).
                self.searched = self.buf.len();
                return Ok(false);
            };
            let end = from + found - start;
            self.pos = start + end + 1;
            self.searched = self.pos;
            if self.buf[start + end] == b'\r' {
                self.after_cr = true;
            }
            if end == 0 {
                if self.data.is_empty() {
                    // No data line: nothing to dispatch (the type is reset).
                    self.event.clear();
                    continue;
                }
                self.dispatched = true;
                return Ok(true);
            }
            self.field(start, start + end)?;
        }
    }

    /// Handles the non-blank line `buf[start..end]`.
    fn field(&mut self, start: usize, end: usize) -> Result<(), SseError> {
        let line = &self.buf[start..end];
        let (name, value) = match memchr::memchr(b':', line) {
            // A comment (`: keep-alive`).
            Some(0) => return Ok(()),
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        let target = match name {
            b"data" => &mut self.data,
            b"event" => &mut self.event,
            // id, retry, and fields nobody defined.
            _ => return Ok(()),
        };
        let value = std::str::from_utf8(value).map_err(|err| {
            SseError(format!(
                "a `{}:` line is not UTF-8 ({err})",
                String::from_utf8_lossy(name)
            ))
        })?;
        if name == b"data" {
            target.push_str(value);
            target.push('\n');
        } else {
            target.clear();
            target.push_str(value);
        }
        Ok(())
    }
}

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
    use super::*;

    type Events = Vec<(String, String)>;

    /// The events of a body cut into `chunks`.
    fn decode<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Result<Events, SseError> {
        let mut decoder = SseDecoder::new();
        let mut events = Vec::new();
        for chunk in chunks {
            decoder.push(chunk);
            while let Some(event) = decoder.next_event()? {
                events.push((event.event.to_owned(), event.data.to_owned()));
            }
        }
        decoder.end();
        while let Some(event) = decoder.next_event()? {
            events.push((event.event.to_owned(), event.data.to_owned()));
        }
        Ok(events)
    }

    fn decode_text(text: &str) -> Events {
        decode([text.as_bytes()]).unwrap()
    }

    fn one_byte_at_a_time(bytes: &[u8]) -> Result<Events, SseError> {
        decode(bytes.chunks(1))
    }

    fn ev(event: &str, data: &str) -> (String, String) {
        (event.to_owned(), data.to_owned())
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
    fn fields_with_and_without_space_joined_data_lines_and_event_types() {
        let text = concat!(
            "data: one\n\n",
            "data:two\n\n",
            "data:  three\n\n", // only one space is taken off
            "event: ping\ndata: {}\n\n",
            "data: a\ndata: b\ndata:\ndata: c\n\n",
            "event: message_stop\nid: 7\nretry: 1000\nunknown: x\ndata: last\n\n",
            "data: typed again?\n\n",
        );
        assert_eq!(
            decode_text(text),
            vec![
                ev("message", "one"),
                ev("message", "two"),
                ev("message", " three"),
                ev("ping", "{}"),
                ev("message", "a\nb\n\nc"),
                ev("message_stop", "last"),
                ev("message", "typed again?"),
            ]
        );
    }

    #[test]
    fn comments_and_events_without_data_dispatch_nothing() {
        let text = ": keep-alive\n\n: processing\n:\n\nevent: ping\n\nid: 3\n\n\n\ndata: after\n\n";
        // The `event: ping` without data is dropped and its type with it.
        assert_eq!(decode_text(text), vec![ev("message", "after")]);
        assert_eq!(decode_text(": OPENROUTER PROCESSING\n\n"), vec![]);
    }

    #[test]
    fn a_line_without_colon_is_a_field_with_an_empty_value() {
        assert_eq!(decode_text("data\n\n"), vec![ev("message", "")]);
        assert_eq!(decode_text("data\ndata\n\n"), vec![ev("message", "\n")]);
        assert_eq!(decode_text("event\ndata: x\n\n"), vec![ev("message", "x")]);
        // A colon inside the value stays in it.
        assert_eq!(decode_text("data: a: b\n\n"), vec![ev("message", "a: b")]);
    }

    #[test]
    fn lf_crlf_and_cr_line_ends_mixed_and_split_between_chunks() {
        let expected = vec![ev("message", "a"), ev("e", "b\nc"), ev("message", "d")];
        for text in [
            "data: a\n\nevent: e\ndata: b\ndata: c\n\ndata: d\n\n",
            "data: a\r\n\r\nevent: e\r\ndata: b\r\ndata: c\r\n\r\ndata: d\r\n\r\n",
            "data: a\r\revent: e\rdata: b\rdata: c\r\rdata: d\r\r",
            "data: a\r\n\nevent: e\rdata: b\ndata: c\r\n\rdata: d\n\r\n",
        ] {
            assert_eq!(decode_text(text), expected, "{text:?}");
            assert_eq!(one_byte_at_a_time(text.as_bytes()).unwrap(), expected, "{text:?}");
            // Every way of cutting it in two.
            for cut in 0..=text.len() {
                let (a, b) = text.as_bytes().split_at(cut);
                assert_eq!(decode([a, b]).unwrap(), expected, "{text:?} cut at {cut}");
            }
        }
        // `\r` ends a chunk and the next chunk starts with `\n`: one line end,
        // not a line end and a blank line.
        assert_eq!(
            decode([&b"data: a\r"[..], b"\ndata: b\r", b"\n\r", b"\n"]).unwrap(),
            vec![ev("message", "a\nb")]
        );
        // ... and with chunks in between that are empty.
        assert_eq!(
            decode([&b"data: a\r"[..], b"", b"\n", b"", b"\r\n"]).unwrap(),
            vec![ev("message", "a")]
        );
    }

    #[test]
    fn an_event_not_closed_by_a_blank_line_at_the_end_of_the_body_is_dropped() {
        assert_eq!(decode_text("data: a\n\ndata: b\n"), vec![ev("message", "a")]);
        assert_eq!(decode_text("data: a\n\ndata: b"), vec![ev("message", "a")]);
        assert_eq!(decode_text("data: a\n\ndata: [DONE]\r"), vec![ev("message", "a")]);
        assert_eq!(decode_text(""), vec![]);
    }

    #[test]
    fn a_byte_order_mark_at_the_start_is_skipped_even_when_split() {
        let text = "\u{feff}data: a\n\n";
        assert_eq!(decode_text(text), vec![ev("message", "a")]);
        assert_eq!(one_byte_at_a_time(text.as_bytes()).unwrap(), vec![ev("message", "a")]);
        // Only at the very start: later it is part of a field name.
        assert_eq!(
            decode_text("data: a\n\n\u{feff}data: b\n\ndata: c\n\n"),
            vec![ev("message", "a"), ev("message", "c")]
        );
        // In the data it is kept.
        assert_eq!(decode_text("data: \u{feff}x\n\n"), vec![ev("message", "\u{feff}x")]);
        // A body that is only part of one.
        assert_eq!(decode([&b"\xEF\xBB"[..]]).unwrap(), vec![]);
    }

    #[test]
    fn invalid_utf8_is_an_error_and_characters_split_between_chunks_are_not() {
        let err = decode([&b"data: ok\n\ndata: \xFF\xFE\n\n"[..]]).unwrap_err();
        assert!(err.to_string().contains("`data:` line is not UTF-8"), "{err}");
        let err = decode([&b"event: \xC3\n\ndata: x\n\n"[..]]).unwrap_err();
        assert!(err.to_string().contains("`event:` line is not UTF-8"), "{err}");
        // Ignored lines are not looked at.
        assert_eq!(
            decode([&b": \xFF\n\ndata: x\n\n"[..]]).unwrap(),
            vec![ev("message", "x")]
        );
        let text = "data: Kyōto ☀ 🦀\n\n";
        assert_eq!(
            one_byte_at_a_time(text.as_bytes()).unwrap(),
            vec![ev("message", "Kyōto ☀ 🦀")]
        );
    }

    #[test]
    fn a_long_line_in_many_chunks_is_one_event() {
        let long = "x".repeat(100_000);
        let text = format!(": ping\ndata: {long}\r\ndata: {long}\r\n\r\ndata: end\n\n");
        let expected = vec![ev("message", &format!("{long}\n{long}")), ev("message", "end")];
        assert_eq!(decode(text.as_bytes().chunks(997)).unwrap(), expected);
        assert_eq!(decode(text.as_bytes().chunks(1)).unwrap(), expected);
    }

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

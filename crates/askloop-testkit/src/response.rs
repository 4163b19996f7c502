//! What the fake server answers to one request, independent of the wire
//! format: the server renders a [`FakeTurn`] as OpenAI chunks or Anthropic
//! events depending on the route that was called.

use std::time::Duration;

use serde_json::Value;

/// The answer to one request.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FakeResponse {
    /// A streamed model turn.
    Turn(FakeTurn),
    /// An HTTP error status with the provider's error body.
    Error(FakeError),
    /// A raw SSE body sent as is, e.g. a recorded provider stream.
    RawSse(String),
}

impl FakeResponse {
    /// A turn that streams `text` in one piece.
    pub fn text(text: impl Into<String>) -> Self {
        FakeResponse::Turn(FakeTurn::text(text))
    }

    /// An error status with a provider-shaped body carrying `message`.
    pub fn status(status: u16, message: impl Into<String>) -> Self {
        FakeResponse::Error(FakeError::new(status, message))
    }
}

impl From<FakeTurn> for FakeResponse {
    fn from(turn: FakeTurn) -> Self {
        FakeResponse::Turn(turn)
    }
}

impl From<FakeError> for FakeResponse {
    fn from(error: FakeError) -> Self {
        FakeResponse::Error(error)
    }
}

/// An HTTP error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeError {
    /// The status, e.g. 429, 500, 529.
    pub status: u16,
    /// The message in the error body (`{"error": {"message", ...}}`).
    pub message: String,
    /// A `Retry-After` header, in seconds.
    pub retry_after: Option<u64>,
    /// A body sent instead of the provider-shaped one.
    pub raw_body: Option<String>,
}

impl FakeError {
    /// An error with a provider-shaped body.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        FakeError {
            status,
            message: message.into(),
            retry_after: None,
            raw_body: None,
        }
    }

    /// Adds a `Retry-After: <seconds>` header.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// Sends this body as is instead.
    pub fn raw_body(mut self, body: impl Into<String>) -> Self {
        self.raw_body = Some(body.into());
        self
    }
}

/// How a turn says it ended, rendered per wire format (`stop` / `end_turn`,
/// `tool_calls` / `tool_use`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Finish {
    /// `stop` / `end_turn`.
    Stop,
    /// `tool_calls` / `tool_use`.
    ToolCalls,
    /// `length` / `max_tokens`.
    Length,
    /// Any other value, sent as is.
    Other(String),
}

/// One tool call of a fake turn.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeToolCall {
    /// The call's id; by default the server makes one up per request.
    pub id: Option<String>,
    /// The tool's name.
    pub name: String,
    /// The arguments text, in the pieces it is streamed in (may be
    /// malformed JSON on purpose).
    pub arguments: Vec<String>,
}

impl FakeToolCall {
    /// A call with these arguments, streamed in `pieces` nearly even pieces.
    pub fn new(name: impl Into<String>, arguments: &Value, pieces: usize) -> Self {
        FakeToolCall {
            id: None,
            name: name.into(),
            arguments: split_even(&arguments.to_string(), pieces),
        }
    }

    /// A call whose arguments text is sent as given (e.g. malformed JSON).
    pub fn raw(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        FakeToolCall {
            id: None,
            name: name.into(),
            arguments: vec![arguments.into()],
        }
    }

    /// Sets the call's id.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
}

/// A streamed model turn: reasoning, text, then tool calls, then the
/// finish, with the quirks of real servers on request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FakeTurn {
    /// The model's reasoning before the text, in the pieces it is streamed
    /// in: `delta.reasoning_content` (OpenAI format), a `thinking` block
    /// ended by its signature (Anthropic).
    pub reasoning: Vec<String>,
    /// The text, in the pieces it is streamed in.
    pub text: Vec<String>,
    /// The tool calls, after the text.
    pub tool_calls: Vec<FakeToolCall>,
    /// The finish reason; by default tool calls if there are any, else stop.
    pub finish: Option<Finish>,
    /// Output tokens reported (input tokens are estimated from the request).
    pub output_tokens: u64,
    /// No usage report at all (some OpenAI-compatible servers).
    pub no_usage: bool,
    /// Quirk: each tool call whole in one chunk, role included (Ollama).
    pub whole_calls: bool,
    /// Quirk (OpenAI format): the finish reason in the same chunk as the
    /// last text or call, not in a chunk of its own (Ollama).
    pub finish_in_last_chunk: bool,
    /// Quirk: tool calls without ids.
    pub without_ids: bool,
    /// Ends the stream with this error event (Anthropic `event: error`,
    /// OpenAI `{"error": ...}` data) instead of a finish.
    pub stream_error: Option<String>,
    /// Closes the connection abruptly after this many SSE frames.
    pub disconnect_after: Option<usize>,
    /// Waits this long before the response headers.
    pub delay: Duration,
    /// Waits this long before each SSE frame but the first.
    pub frame_delay: Duration,
    /// While waiting between frames, sends an SSE comment (`: keep-alive`)
    /// this often, as servers do while a model thinks.
    pub keep_alive: Option<Duration>,
    /// After this many SSE frames, sends nothing more and never ends the
    /// body (only keep-alive comments, when `keep_alive` is set): a server
    /// stuck thinking for ever.
    pub stall_after: Option<usize>,
}

impl FakeTurn {
    /// A turn that streams `text` in one piece.
    pub fn text(text: impl Into<String>) -> Self {
        FakeTurn {
            text: vec![text.into()],
            ..FakeTurn::default()
        }
    }

    /// A turn that streams `text` in `pieces` nearly even pieces.
    pub fn text_in(text: &str, pieces: usize) -> Self {
        FakeTurn {
            text: split_even(text, pieces),
            ..FakeTurn::default()
        }
    }

    /// A turn that makes one tool call, its arguments in one piece.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        FakeTurn::default().call(FakeToolCall::new(name, &arguments, 1))
    }

    /// Reasons `reasoning` first, in `pieces` nearly even pieces.
    pub fn reasoning_in(mut self, reasoning: &str, pieces: usize) -> Self {
        self.reasoning = split_even(reasoning, pieces);
        self
    }

    /// Adds a tool call.
    pub fn call(mut self, call: FakeToolCall) -> Self {
        self.tool_calls.push(call);
        self
    }

    /// Sets the finish reason.
    pub fn finish(mut self, finish: Finish) -> Self {
        self.finish = Some(finish);
        self
    }

    /// Sets the output tokens reported.
    pub fn output_tokens(mut self, tokens: u64) -> Self {
        self.output_tokens = tokens;
        self
    }

    /// Sends no usage report.
    pub fn no_usage(mut self) -> Self {
        self.no_usage = true;
        self
    }

    /// Sends each tool call whole in one chunk (Ollama).
    pub fn whole_calls(mut self) -> Self {
        self.whole_calls = true;
        self
    }

    /// Sends the finish reason with the last call or text (Ollama).
    pub fn finish_in_last_chunk(mut self) -> Self {
        self.finish_in_last_chunk = true;
        self
    }

    /// Sends tool calls without ids.
    pub fn without_ids(mut self) -> Self {
        self.without_ids = true;
        self
    }

    /// Ends the stream with an error event after the content.
    pub fn stream_error(mut self, message: impl Into<String>) -> Self {
        self.stream_error = Some(message.into());
        self
    }

    /// Drops the connection after `frames` SSE frames.
    pub fn disconnect_after(mut self, frames: usize) -> Self {
        self.disconnect_after = Some(frames);
        self
    }

    /// Waits before sending the response headers.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Waits before each SSE frame but the first.
    pub fn frame_delay(mut self, delay: Duration) -> Self {
        self.frame_delay = delay;
        self
    }

    /// Sends `: keep-alive` comments this often while waiting between frames.
    pub fn keep_alive(mut self, every: Duration) -> Self {
        self.keep_alive = Some(every);
        self
    }

    /// Stalls for ever after `frames` SSE frames, keeping the connection
    /// open (with `keep_alive`, sending only comments).
    pub fn stall_after(mut self, frames: usize) -> Self {
        self.stall_after = Some(frames);
        self
    }

    /// The finish reason this turn reports.
    pub(crate) fn finish_or_default(&self) -> Finish {
        match &self.finish {
            Some(finish) => finish.clone(),
            None if self.tool_calls.is_empty() => Finish::Stop,
            None => Finish::ToolCalls,
        }
    }
}

/// Splits text into `n` nearly even pieces on character boundaries (fewer
/// when the text is shorter than `n`).
pub fn split_even(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    let n = n.clamp(1, chars.len());
    let (base, extra) = (chars.len() / n, chars.len() % n);
    let mut pieces = Vec::with_capacity(n);
    let mut start = 0;
    for i in 0..n {
        let len = base + usize::from(i < extra);
        pieces.push(chars[start..start + len].iter().collect());
        start += len;
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_even_gives_exactly_n_pieces_that_join_to_the_text() {
        let text = "Deploying to User answered: staging.";
        let pieces = split_even(text, 20);
        assert_eq!(pieces.len(), 20);
        assert_eq!(pieces.concat(), text);
        assert_eq!(split_even("ab", 4), vec!["a", "b"]);
        assert_eq!(split_even("héllo wörld", 3).concat(), "héllo wörld");
    }
}

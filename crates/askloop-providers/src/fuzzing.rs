//! Entry points for the fuzz targets (`crates/askloop-fuzz`): the SSE
//! decoder and the stream parsers over bytes, with no HTTP in between. Not
//! part of the supported API; compiled only with the `fuzzing` feature.

use askloop::{ModelError, ModelEvent};

use crate::anthropic::stream::MessagesStreamParser;
use crate::openai::stream::ChatStreamParser;
pub use askloop::sse::SseError;

use crate::sse::parse_sse_chunks;

/// A provider whose stream format is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenAI Chat Completions (`chat.completion.chunk`, `[DONE]`).
    OpenAi,
    /// Anthropic Messages (`message_start` .. `message_stop`).
    Anthropic,
}

/// The SSE events (type, data) of a body cut into `chunks`, or the
/// decoder's error.
pub fn decode_sse<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<(String, String)>, SseError> {
    let events = askloop::sse::decode_chunks(chunks)?;
    Ok(events.into_iter().map(|e| (e.event, e.data)).collect())
}

/// The model events a response body cut into `chunks` turns into, as the
/// provider's stream would yield them (nothing after an error).
pub fn parse_stream<'a>(
    format: Format,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<Result<ModelEvent, ModelError>> {
    match format {
        Format::OpenAi => parse_sse_chunks(chunks, ChatStreamParser::new("openai", "fuzz_1")),
        Format::Anthropic => parse_sse_chunks(chunks, MessagesStreamParser::new("anthropic", "fuzz_1")),
    }
}

//! Entry points for the fuzz targets (`crates/askloop-fuzz`): the SSE
//! decoder and the stream parsers over bytes, with no HTTP in between. Not
//! part of the supported API; compiled only with the `fuzzing` feature.

use askloop::{ModelError, ModelEvent};

use crate::anthropic::stream::MessagesStreamParser;
use crate::openai::stream::ChatStreamParser;
use askloop::sse::SseDecoder;
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

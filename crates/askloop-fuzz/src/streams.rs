//! The provider stream parsers and the SSE decoder, over bytes split
//! anywhere.

use askloop::{ModelError, ModelEvent};
use askloop_providers::fuzzing::{Format, decode_sse, parse_stream};

use crate::{cuts_from_seed, split_at_cuts};

/// An OpenAI Chat Completions stream body: the first byte picks the
/// split points, the rest is the body.
pub fn openai_stream(data: &[u8]) {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    stream_case(Format::OpenAi, body, &cuts_from_seed(seed, body));
}

/// An Anthropic Messages stream body, as [`openai_stream`].
pub fn anthropic_stream(data: &[u8]) {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    stream_case(Format::Anthropic, body, &cuts_from_seed(seed, body));
}

/// A body parsed whole and parsed cut at `cuts` must give the same events
/// and the same outcome; a turn ends with at most one `Finish`, last; a
/// complete tool call has an id; an error says what was wrong.
pub fn stream_case(format: Format, body: &[u8], cuts: &[usize]) {
    let whole = parse_stream(format, [body]);
    let cut = parse_stream(format, split_at_cuts(body, cuts));
    assert_eq!(
        outcome(&whole),
        outcome(&cut),
        "the same body cut at {cuts:?} parsed differently"
    );
    for results in [&whole, &cut] {
        let mut finished = false;
        for result in results.iter() {
            assert!(!finished, "an event came after Finish: {result:?}");
            match result {
                Ok(ModelEvent::Finish { .. }) => finished = true,
                Ok(ModelEvent::ToolCall { id, .. }) => assert!(!id.is_empty(), "a tool call without an id"),
                Ok(_) => {}
                Err(err) => assert_clear(err),
            }
        }
        let errors = results.iter().filter(|r| r.is_err()).count();
        assert!(errors <= 1, "more than one error in one turn");
        if errors == 1 {
            assert!(results.last().is_some_and(Result::is_err), "events after an error");
        }
    }
}

/// The events, and whether the turn ended in an error (messages may name
/// the chunk an error was found in, so only the fact is compared).
fn outcome(results: &[Result<ModelEvent, ModelError>]) -> (Vec<&ModelEvent>, bool) {
    (
        results.iter().filter_map(|r| r.as_ref().ok()).collect(),
        results.iter().any(Result::is_err),
    )
}

fn assert_clear(err: &ModelError) {
    let message = err.to_string();
    assert!(message.trim().len() > 10, "an error that says nothing: {message:?}");
}

/// Bytes fed to the SSE decoder: first byte picks the split points.
pub fn sse_decoder(data: &[u8]) {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    sse_decoder_case(body, &cuts_from_seed(seed, body));
}

/// The decoder gives the same events (or the same error) for a body
/// whole, cut at `cuts` and fed one byte at a time.
pub fn sse_decoder_case(body: &[u8], cuts: &[usize]) {
    let whole = decode_sse([body]);
    let cut = decode_sse(split_at_cuts(body, cuts));
    let bytewise = decode_sse(body.chunks(1));
    assert_eq!(whole, cut, "the same body cut at {cuts:?} decoded differently");
    assert_eq!(
        whole, bytewise,
        "the same body fed a byte at a time decoded differently"
    );
    if let Err(err) = &whole {
        assert!(!err.to_string().trim().is_empty(), "an SSE error without a message");
    }
}

//! Helpers shared by the stream parsers' tests.

use askloop::{FinishReason, ModelEvent, Usage};

/// The text of a turn's events.
pub(crate) fn text_of(events: &[ModelEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

/// The complete tool calls of a turn's events: (id, name, arguments).
pub(crate) fn calls_of(events: &[ModelEvent]) -> Vec<(String, String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCall { id, name, arguments } => Some((id.clone(), name.clone(), arguments.clone())),
            _ => None,
        })
        .collect()
}

/// The finish reason and usage of a turn, which must end with `Finish`.
pub(crate) fn finish_of(events: &[ModelEvent]) -> (FinishReason, Usage) {
    match events.last() {
        Some(ModelEvent::Finish { reason, usage }) => (reason.clone(), *usage),
        other => panic!("last event is not Finish: {other:?}"),
    }
}

/// The reasoning of a turn's events.
pub(crate) fn reasoning_of(events: &[ModelEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ReasoningDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

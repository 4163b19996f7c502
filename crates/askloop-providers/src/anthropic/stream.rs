//! The Messages stream parser: `message_start`, `content_block_start`,
//! `ping`, `content_block_delta` (`text_delta`, `input_json_delta`,
//! `thinking_delta`), `content_block_stop`, `message_delta`, `message_stop`
//! and `error` events into [`ModelEvent`]s.
//!
//! A `tool_use` block is complete at its `content_block_stop`; its input is
//! the `input_json_delta` fragments joined, or, when they are all empty
//! (a tool without parameters), the start block's `input` (`{}`). A
//! `thinking` block's text is the model's reasoning
//! ([`ModelEvent::ReasoningDelta`]); its signature (`signature_delta`),
//! `redacted_thinking` blocks (encrypted, nothing to show) and block types
//! this parser does not know are skipped: askloop sends no thinking back.
//! The event's kind is read from the JSON `type`, so a missing `event:` line
//! does not matter.

use std::collections::{HashMap, VecDeque};

use askloop::sse::SseEvent;
use askloop::{FinishReason, ModelError, ModelEvent, ToolCallIds, Usage};
use serde::Deserialize;
use serde_json::Value;

use crate::http::ErrorDetail;
use crate::openai::shorten;
use crate::sse::StreamParser;
use crate::wire::Text;

/// One Messages stream event. Strings are borrowed from the event's text
/// where they have no escapes.
#[derive(Debug, Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Text<'a>,
    #[serde(default)]
    message: Option<MessageStart>,
    #[serde(default)]
    index: Option<usize>,
    #[serde(default, borrow)]
    content_block: Option<ContentBlock<'a>>,
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<ErrorDetail>,
}

#[derive(Debug, Deserialize)]
struct MessageStart {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
struct ContentBlock<'a> {
    #[serde(rename = "type", borrow)]
    kind: Text<'a>,
    #[serde(default, borrow)]
    id: Option<Text<'a>>,
    #[serde(default, borrow)]
    name: Option<Text<'a>>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default, borrow)]
    text: Option<Text<'a>>,
    #[serde(default, borrow)]
    thinking: Option<Text<'a>>,
}

#[derive(Debug, Deserialize)]
struct WireDelta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Text<'a>>,
    #[serde(default, borrow)]
    text: Option<Text<'a>>,
    #[serde(default, borrow)]
    partial_json: Option<Text<'a>>,
    #[serde(default, borrow)]
    thinking: Option<Text<'a>>,
    #[serde(default, borrow)]
    stop_reason: Option<Text<'a>>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

/// A `tool_use` block being streamed.
#[derive(Debug)]
struct OpenToolUse {
    id: String,
    name: String,
    start_input: Option<Value>,
    json: String,
}

/// Parses one streamed Messages turn.
#[derive(Debug)]
pub(crate) struct MessagesStreamParser {
    provider: String,
    fallback_id: String,
    tools: HashMap<usize, OpenToolUse>,
    /// The ids given out, so no two calls of the turn share one.
    ids: ToolCallIds,
    stop_reason: Option<FinishReason>,
    input_tokens: u64,
    output_tokens: u64,
    stopped: bool,
}

impl MessagesStreamParser {
    /// `fallback_id` names the request, for a `tool_use` block without id.
    pub(crate) fn new(provider: impl Into<String>, fallback_id: impl Into<String>) -> Self {
        MessagesStreamParser {
            provider: provider.into(),
            fallback_id: fallback_id.into(),
            tools: HashMap::new(),
            ids: ToolCallIds::new(),
            stop_reason: None,
            input_tokens: 0,
            output_tokens: 0,
            stopped: false,
        }
    }

    fn take_usage(&mut self, usage: Option<WireUsage>) {
        if let Some(usage) = usage {
            // Anthropic's counts are cumulative: the latest report wins.
            if let Some(input) = usage.input_tokens {
                self.input_tokens = input;
            }
            if let Some(output) = usage.output_tokens {
                self.output_tokens = output;
            }
        }
    }

    fn on_wire_event(&mut self, event: WireEvent<'_>, out: &mut VecDeque<ModelEvent>) -> Result<bool, ModelError> {
        match event.kind.as_str() {
            "message_start" => self.take_usage(event.message.and_then(|m| m.usage)),
            "content_block_start" => {
                let (Some(index), Some(block)) = (event.index, event.content_block) else {
                    return Ok(false);
                };
                match block.kind.as_str() {
                    "text" => {
                        if let Some(text) = block.text.filter(|t| !t.is_empty()) {
                            out.push_back(ModelEvent::TextDelta(text.into_owned()));
                        }
                    }
                    // Its text comes in `thinking_delta`s; a start that
                    // carries some is passed on all the same.
                    "thinking" => {
                        if let Some(thinking) = block.thinking.filter(|t| !t.is_empty()) {
                            out.push_back(ModelEvent::ReasoningDelta(thinking.into_owned()));
                        }
                    }
                    "tool_use" => {
                        // Blocks are keyed by index; an id another block of
                        // the turn already has is replaced by a fresh one.
                        let proposed = block
                            .id
                            .filter(|id| !id.is_empty())
                            .map_or_else(|| format!("toolu_{}_{index}", self.fallback_id), Text::into_owned);
                        let id = self.ids.claim(&proposed);
                        let name = block.name.map(Text::into_owned).unwrap_or_default();
                        out.push_back(ModelEvent::ToolCallStart {
                            id: id.clone(),
                            name: name.clone(),
                        });
                        self.tools.insert(
                            index,
                            OpenToolUse {
                                id,
                                name,
                                start_input: block.input,
                                json: String::new(),
                            },
                        );
                    }
                    // redacted_thinking, server tools: not for the agent.
                    _ => {}
                }
            }
            "content_block_delta" => {
                let Some(delta) = event.delta else {
                    return Ok(false);
                };
                match delta.kind.as_ref().map(Text::as_str) {
                    Some("text_delta") => {
                        if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
                            out.push_back(ModelEvent::TextDelta(text.into_owned()));
                        }
                    }
                    Some("input_json_delta") => {
                        if let (Some(index), Some(piece)) = (event.index, delta.partial_json)
                            && !piece.is_empty()
                            && let Some(tool) = self.tools.get_mut(&index)
                        {
                            tool.json.push_str(piece.as_str());
                            out.push_back(ModelEvent::ToolCallDelta {
                                id: tool.id.clone(),
                                args_delta: piece.into_owned(),
                            });
                        }
                    }
                    Some("thinking_delta") => {
                        if let Some(thinking) = delta.thinking.filter(|t| !t.is_empty()) {
                            out.push_back(ModelEvent::ReasoningDelta(thinking.into_owned()));
                        }
                    }
                    // signature_delta, citations_delta, ...
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(tool) = event.index.and_then(|i| self.tools.remove(&i)) {
                    out.push_back(complete_call(tool));
                }
            }
            "message_delta" => {
                if let Some(reason) = event.delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(stop_reason(reason.as_str()));
                }
                self.take_usage(event.usage);
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(true);
            }
            "error" => {
                let message = event.error.map_or_else(|| "unknown error".to_owned(), |e| e.describe());
                return Err(ModelError::Stream {
                    provider: self.provider.clone(),
                    message,
                });
            }
            // ping, and event types added after this was written.
            _ => {}
        }
        Ok(false)
    }
}

fn complete_call(tool: OpenToolUse) -> ModelEvent {
    let arguments = if !tool.json.trim().is_empty() {
        tool.json
    } else {
        match tool.start_input {
            Some(Value::Object(map)) if !map.is_empty() => Value::Object(map).to_string(),
            // `""` (or nothing) streamed for a tool without parameters.
            _ => "{}".to_owned(),
        }
    };
    ModelEvent::ToolCall {
        id: tool.id,
        name: tool.name,
        arguments,
    }
}

impl StreamParser for MessagesStreamParser {
    fn on_event(&mut self, event: &SseEvent<'_>, out: &mut VecDeque<ModelEvent>) -> Result<bool, ModelError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(false);
        }
        let wire: WireEvent<'_> = serde_json::from_str(data).map_err(|err| ModelError::Protocol {
            provider: self.provider.clone(),
            message: format!(
                "a `{}` event is not a Messages stream event ({err}): {}",
                event.event,
                shorten(data)
            ),
        })?;
        self.on_wire_event(wire, out)
    }

    fn on_end(&mut self, out: &mut VecDeque<ModelEvent>) -> Result<(), ModelError> {
        if !self.stopped && self.stop_reason.is_none() {
            return Err(ModelError::Transport {
                provider: self.provider.clone(),
                message: "the connection closed before the response was complete".to_owned(),
                source: None,
            });
        }
        // A tool block left open by a server that skipped its stop event.
        let mut open: Vec<(usize, OpenToolUse)> = self.tools.drain().collect();
        open.sort_by_key(|(index, _)| *index);
        out.extend(open.into_iter().map(|(_, tool)| complete_call(tool)));
        out.push_back(ModelEvent::Finish {
            reason: self.stop_reason.clone().unwrap_or(FinishReason::Stop),
            usage: Usage {
                input_tokens: self.input_tokens,
                output_tokens: self.output_tokens,
                total_tokens: self.input_tokens + self.output_tokens,
            },
        });
        Ok(())
    }
}

fn stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::{parse_sse_chunks, parse_sse_text};
    use crate::test_support::{calls_of, finish_of, reasoning_of, text_of};

    fn parse(text: &str) -> Vec<Result<ModelEvent, ModelError>> {
        parse_sse_text(text, MessagesStreamParser::new("anthropic", "run1_2"))
    }

    fn ok(text: &str) -> Vec<ModelEvent> {
        parse(text).into_iter().map(|e| e.unwrap()).collect()
    }

    #[test]
    fn recorded_text_answer_streams_every_delta_and_final_usage() {
        let events = ok(include_str!("../../tests/fixtures/anthropic/text_only_sonnet46.sse"));
        assert_eq!(
            events.iter().filter(|e| matches!(e, ModelEvent::TextDelta(_))).count(),
            8
        );
        assert!(text_of(&events).starts_with("A solar eclipse occurs when the Moon"));
        assert_eq!(
            finish_of(&events),
            (
                FinishReason::Stop,
                Usage {
                    input_tokens: 33,
                    output_tokens: 134,
                    total_tokens: 167
                }
            )
        );
        let after = ok(include_str!(
            "../../tests/fixtures/anthropic/text_after_tool_result_sonnet46.sse"
        ));
        assert_eq!(text_of(&after), "The result of 2 - 5 is **-3**.");
    }

    #[test]
    fn recorded_lone_tool_use_streams_start_deltas_and_complete_call() {
        let events = ok(include_str!("../../tests/fixtures/anthropic/tool_use_only_haiku45.sse"));
        assert_eq!(
            events[0],
            ModelEvent::ToolCallStart {
                id: "toolu_REDACTED_1".into(),
                name: "get_weather".into()
            }
        );
        // The empty first fragment is not emitted.
        let deltas = events
            .iter()
            .filter(|e| matches!(e, ModelEvent::ToolCallDelta { .. }))
            .count();
        assert_eq!(deltas, 2);
        assert_eq!(
            calls_of(&events),
            vec![(
                "toolu_REDACTED_1".into(),
                "get_weather".into(),
                r#"{"city": "Paris"}"#.into()
            )]
        );
        assert_eq!(finish_of(&events).0, FinishReason::ToolCalls);
    }

    #[test]
    fn recorded_text_then_nested_tool_input_is_joined_exactly() {
        let events = ok(include_str!(
            "../../tests/fixtures/anthropic/text_then_tool_use_nested_sonnet46.sse"
        ));
        assert_eq!(
            text_of(&events),
            "I'll book this trip right away with exactly the values you specified!"
        );
        let calls = calls_of(&events);
        assert_eq!(calls.len(), 1);
        let input: Value = serde_json::from_str(&calls[0].2).unwrap();
        assert_eq!(
            input,
            serde_json::json!({"itinerary": {"city": "Kyoto", "days": 3, "activities": ["temples", "tea ceremony"], "lodging": {"name": "Sakura Inn", "rooms": 2}}})
        );
    }

    #[test]
    fn recorded_tool_use_with_empty_input_becomes_an_empty_object() {
        let events = ok(include_str!(
            "../../tests/fixtures/anthropic/tool_use_empty_input_sonnet46.sse"
        ));
        assert_eq!(
            calls_of(&events),
            vec![("toolu_REDACTED_1".into(), "ping".into(), "{}".into())]
        );
    }

    #[test]
    fn recorded_thinking_block_arrives_as_reasoning_before_the_unchanged_text() {
        let events = ok(include_str!(
            "../../tests/fixtures/anthropic/thinking_then_text_sonnet46.sse"
        ));
        assert_eq!(
            reasoning_of(&events),
            "I need to find positive integers n < 300 that are divisible by 8 but not by 12.\n\n\
             Divisible by 8: multiples of 8 less than 300.\n\
             Floor(299/8) = 37, so there are 37 multiples of 8 less than 300.\n\n\
             Now I need to subtract those divisible by both 8 and 12.\nLCM(8, 12) = 24.\n\n\
             Divisible by 24: floor(299/24) = 12, so there are 12 multiples of 24 less than 300.\n\
             So the answer is 37 - 12 = 25."
        );
        // One piece per `thinking_delta`, all before the text; the
        // signature is not among them.
        let pieces = events
            .iter()
            .filter(|e| matches!(e, ModelEvent::ReasoningDelta(_)))
            .count();
        assert_eq!(pieces, 7);
        let first_text = events
            .iter()
            .position(|e| matches!(e, ModelEvent::TextDelta(_)))
            .unwrap();
        assert!(
            events[..first_text]
                .iter()
                .all(|e| matches!(e, ModelEvent::ReasoningDelta(_)))
        );
        let text = text_of(&events);
        assert!(text.starts_with("## Setting Up the Problem"), "{text}");
        assert!(!text.contains("I need to find"), "thinking leaked into the text");
        assert!(!reasoning_of(&events).contains("signature"));
        assert_eq!(finish_of(&events).1.output_tokens, 353);
    }

    #[test]
    fn redacted_thinking_and_signatures_give_no_reasoning() {
        let sse = concat!(
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"EmwKAhgBEgy3va3pzix\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIM\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let events = ok(sse);
        assert_eq!(events[0], ModelEvent::TextDelta("Hi".into()));
        assert!(matches!(events[1], ModelEvent::Finish { .. }), "{events:?}");
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn error_event_mid_stream_is_a_stream_error_after_the_text_so_far() {
        let sse = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":5}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
        );
        let events = parse(sse);
        assert_eq!(events[0], Ok(ModelEvent::TextDelta("Hi".into())));
        match &events[1] {
            Err(ModelError::Stream { message, .. }) => {
                assert_eq!(message, "Overloaded (type: overloaded_error)")
            }
            other => panic!("expected a stream error, got {other:?}"),
        }
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn two_tool_use_blocks_with_one_id_get_distinct_ids_and_keep_their_input() {
        let block = |index: usize, question: &str| {
            format!(
                concat!(
                    "event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":{i},\"content_block\":{{\"type\":\"tool_use\",\"id\":\"toolu_same\",\"name\":\"ask_user\",\"input\":{{}}}}}}\n\n",
                    "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{i},\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":\"{{\\\"question\\\":\\\"{q}\\\"}}\"}}}}\n\n",
                    "event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":{i}}}\n\n"
                ),
                i = index,
                q = question
            )
        };
        let sse = format!(
            "{}{}{}",
            block(0, "A?"),
            block(1, "B?"),
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
        );
        let events = ok(&sse);
        let calls = calls_of(&events);
        assert_eq!(calls.len(), 2, "{events:?}");
        assert_eq!(
            calls[0],
            ("toolu_same".into(), "ask_user".into(), r#"{"question":"A?"}"#.into())
        );
        assert_eq!(calls[1].2, r#"{"question":"B?"}"#);
        assert_ne!(calls[1].0, "toolu_same");
        let delta_ids: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                ModelEvent::ToolCallDelta { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(delta_ids, [calls[0].0.as_str(), calls[1].0.as_str()]);
    }

    #[test]
    fn a_stream_cut_before_message_stop_is_an_error() {
        let sse = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"x\",\"input\":{}}}\n\n";
        let events = parse(sse);
        assert!(
            matches!(events.last(), Some(Err(ModelError::Transport { .. }))),
            "{events:?}"
        );
        assert!(!events.iter().any(|e| matches!(e, Ok(ModelEvent::ToolCall { .. }))));
    }

    #[test]
    fn recorded_streams_read_one_byte_at_a_time_give_the_same_events() {
        for text in [
            include_str!("../../tests/fixtures/anthropic/text_after_tool_result_sonnet46.sse"),
            include_str!("../../tests/fixtures/anthropic/text_only_sonnet46.sse"),
            include_str!("../../tests/fixtures/anthropic/text_then_tool_use_nested_sonnet46.sse"),
            include_str!("../../tests/fixtures/anthropic/thinking_then_text_sonnet46.sse"),
            include_str!("../../tests/fixtures/anthropic/tool_use_empty_input_sonnet46.sse"),
            include_str!("../../tests/fixtures/anthropic/tool_use_only_haiku45.sse"),
        ] {
            let whole = parse(text);
            let split = parse_sse_chunks(
                text.as_bytes().chunks(1),
                MessagesStreamParser::new("anthropic", "run1_2"),
            );
            assert_eq!(split, whole);
            assert!(whole.iter().all(Result::is_ok), "{whole:?}");
        }
    }
}

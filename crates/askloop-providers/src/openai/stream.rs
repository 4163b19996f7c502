//! The Chat Completions stream parser: `chat.completion.chunk` SSE events
//! into [`ModelEvent`]s.
//!
//! What real servers send, and how it is handled:
//! - the role, the tool-call head (`id`, `name`) and argument fragments in
//!   separate chunks (OpenAI), or the role and the head together, or the
//!   whole call in one chunk, sometimes with `finish_reason` (Ollama);
//! - `finish_reason` before the usage chunk (`choices: []`), so the turn's
//!   `Finish` waits for `[DONE]` (or the end of the body) to carry usage;
//! - tool calls finished by `"stop"` (the agent treats any turn with calls
//!   as a tool turn);
//! - missing call ids: made up from the response id (or the request) and
//!   the call's index, so the same response always gets the same ids;
//! - one id for several calls (`call_0` for each): every call is keyed by
//!   its `index`, and an id already used in the turn is replaced by a fresh
//!   one ([`ToolCallIds`]), so each call keeps its own arguments and answer;
//! - `{"error": {...}}` as a data event mid-stream (OpenRouter and others);
//! - the model's reasoning as `delta.reasoning_content` (vLLM, llama.cpp,
//!   DeepSeek) or `delta.reasoning` (Ollama, OpenRouter), often beside an
//!   empty `content`: passed on as [`ModelEvent::ReasoningDelta`], from
//!   `reasoning_content` when a server sends both (some send the same
//!   text under the two names).
//!
//! Tool calls are emitted complete (`ToolCall`) when the choice finishes,
//! in index order; argument text is passed through raw, so malformed JSON
//! reaches the agent, which answers it with an is-error tool result.

use std::collections::VecDeque;

use askloop::sse::SseEvent;
use askloop::{FinishReason, ModelError, ModelEvent, ToolCallIds, Usage};
use serde::Deserialize;

use crate::http::ErrorDetail;
use crate::sse::StreamParser;
use crate::wire::Text;

/// One `chat.completion.chunk`. Every field is optional: servers differ.
/// Strings are borrowed from the event's text where they have no escapes.
#[derive(Debug, Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    id: Option<Text<'a>>,
    #[serde(default, borrow, deserialize_with = "null_as_empty")]
    choices: Vec<Choice<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<ErrorDetail>,
}

#[derive(Debug, Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Text<'a>>,
}

#[derive(Debug, Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Text<'a>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Text<'a>>,
    #[serde(default, borrow)]
    reasoning: Option<Text<'a>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

#[derive(Debug, Deserialize)]
struct ToolCallDelta<'a> {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default, borrow)]
    id: Option<Text<'a>>,
    #[serde(default, borrow)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Debug, Deserialize)]
struct FunctionDelta<'a> {
    #[serde(default, borrow)]
    name: Option<Text<'a>>,
    #[serde(default, borrow)]
    arguments: Option<Text<'a>>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    total_tokens: Option<u64>,
}

/// `null` read as an empty list: some servers send `"choices": null`.
fn null_as_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

/// A tool call being assembled from its fragments.
#[derive(Debug, Default)]
struct PartialCall {
    index: usize,
    /// The id as the server sent it, which later fragments may repeat.
    wire_id: Option<String>,
    /// The call's id in the turn: the server's when it is unique, else a
    /// fresh one (given when the call starts or is flushed).
    id: Option<String>,
    name: String,
    arguments: String,
    /// How much of `arguments` was already emitted as deltas.
    emitted: usize,
    started: bool,
}

/// Parses one streamed Chat Completions turn.
#[derive(Debug)]
pub(crate) struct ChatStreamParser {
    provider: String,
    /// Used for made-up call ids when the response has no id.
    fallback_id: String,
    response_id: Option<String>,
    calls: Vec<PartialCall>,
    /// The ids given out, so no two calls of the turn share one.
    ids: ToolCallIds,
    calls_flushed: bool,
    finish: Option<FinishReason>,
    usage: Usage,
    saw_done: bool,
}

impl ChatStreamParser {
    /// `fallback_id` names the request (e.g. run id and message count), for
    /// making up call ids when the server sends neither call nor response ids.
    pub(crate) fn new(provider: impl Into<String>, fallback_id: impl Into<String>) -> Self {
        ChatStreamParser {
            provider: provider.into(),
            fallback_id: fallback_id.into(),
            response_id: None,
            calls: Vec::new(),
            ids: ToolCallIds::new(),
            calls_flushed: false,
            finish: None,
            usage: Usage::default(),
            saw_done: false,
        }
    }

    fn on_chunk(&mut self, chunk: Chunk<'_>, out: &mut VecDeque<ModelEvent>) -> Result<(), ModelError> {
        if let Some(error) = chunk.error {
            return Err(ModelError::Stream {
                provider: self.provider.clone(),
                message: error.describe(),
            });
        }
        if self.response_id.is_none() {
            self.response_id = chunk.id.filter(|id| !id.is_empty()).map(Text::into_owned);
        }
        if let Some(usage) = chunk.usage {
            self.usage = Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
                total_tokens: usage
                    .total_tokens
                    .unwrap_or(usage.prompt_tokens + usage.completion_tokens),
            };
        }
        // One answer is asked for (no `n`); other choices are ignored.
        for choice in chunk.choices.into_iter().filter(|c| c.index.unwrap_or(0) == 0) {
            if let Some(delta) = choice.delta {
                let reasoning = match delta.reasoning_content.filter(|t| !t.is_empty()) {
                    Some(reasoning) => Some(reasoning),
                    None => delta.reasoning.filter(|t| !t.is_empty()),
                };
                if let Some(reasoning) = reasoning {
                    out.push_back(ModelEvent::ReasoningDelta(reasoning.into_owned()));
                }
                if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                    out.push_back(ModelEvent::TextDelta(text.into_owned()));
                }
                for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                    self.on_call_delta(position, call, out);
                }
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finish = Some(finish_reason(reason.as_str()));
                self.flush_calls(out);
            }
        }
        Ok(())
    }

    fn on_call_delta(&mut self, position: usize, delta: ToolCallDelta<'_>, out: &mut VecDeque<ModelEvent>) {
        // Servers that omit `index` send one call per chunk in order, or all
        // calls whole in one chunk: the id, else the position, tells them
        // apart. A fragment that names its tool again under an id already
        // used is a new call: some servers give every call the same id.
        let names_tool = delta.function.as_ref().is_some_and(|f| f.name.is_some());
        let index = match (delta.index, &delta.id) {
            (Some(index), _) => index,
            (None, Some(id)) => self
                .calls
                .iter()
                .rev()
                .find(|c| c.wire_id.as_deref() == Some(id.as_str()) && (!names_tool || c.name.is_empty()))
                .map_or_else(|| self.next_index(), |c| c.index),
            (None, None) => self.calls.last().map_or(position, |c| c.index),
        };
        let slot = match self.calls.iter().position(|c| c.index == index) {
            Some(slot) => slot,
            None => {
                self.calls.push(PartialCall {
                    index,
                    ..PartialCall::default()
                });
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[slot];
        if call.wire_id.is_none() {
            call.wire_id = delta.id.filter(|id| !id.is_empty()).map(Text::into_owned);
        }
        if let Some(function) = delta.function {
            if call.name.is_empty()
                && let Some(name) = function.name
            {
                call.name = name.into_owned();
            }
            if let Some(arguments) = function.arguments {
                call.arguments.push_str(arguments.as_str());
            }
        }
        if !call.started && !call.name.is_empty() {
            call.started = true;
            let proposed = match &call.wire_id {
                Some(id) => id.clone(),
                None => made_up_id(self.response_id.as_deref(), &self.fallback_id, index),
            };
            let id = self.ids.claim(&proposed);
            call.id = Some(id.clone());
            out.push_back(ModelEvent::ToolCallStart {
                id,
                name: call.name.clone(),
            });
        }
        if call.started && call.emitted < call.arguments.len() {
            out.push_back(ModelEvent::ToolCallDelta {
                id: call.id.clone().unwrap_or_default(),
                args_delta: call.arguments[call.emitted..].to_owned(),
            });
            call.emitted = call.arguments.len();
        }
    }

    /// An index no call has yet, for a server that sends none.
    fn next_index(&self) -> usize {
        self.calls.iter().map(|c| c.index + 1).max().unwrap_or(0)
    }

    /// Emits every assembled call, in index order, once.
    fn flush_calls(&mut self, out: &mut VecDeque<ModelEvent>) {
        if self.calls_flushed {
            return;
        }
        self.calls_flushed = true;
        let mut calls = std::mem::take(&mut self.calls);
        calls.sort_by_key(|c| c.index);
        for call in calls {
            let id = match (call.id, call.wire_id) {
                (Some(id), _) => id,
                (None, Some(wire_id)) => self.ids.claim(&wire_id),
                (None, None) => self
                    .ids
                    .claim(&made_up_id(self.response_id.as_deref(), &self.fallback_id, call.index)),
            };
            out.push_back(ModelEvent::ToolCall {
                id,
                name: call.name,
                arguments: call.arguments,
            });
        }
    }
}

impl StreamParser for ChatStreamParser {
    fn on_event(&mut self, event: &SseEvent<'_>, out: &mut VecDeque<ModelEvent>) -> Result<bool, ModelError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.saw_done = true;
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Chunk<'_> = serde_json::from_str(data).map_err(|err| ModelError::Protocol {
            provider: self.provider.clone(),
            message: format!(
                "a stream event is not a chat completion chunk ({err}): {}",
                shorten(data)
            ),
        })?;
        self.on_chunk(chunk, out)?;
        Ok(false)
    }

    fn on_end(&mut self, out: &mut VecDeque<ModelEvent>) -> Result<(), ModelError> {
        // Without `[DONE]` and without a finish reason the body was cut short:
        // the calls may be incomplete, so none of them is given to the agent.
        if !self.saw_done && self.finish.is_none() {
            return Err(ModelError::Transport {
                provider: self.provider.clone(),
                message: "the connection closed before the response was complete".to_owned(),
                source: None,
            });
        }
        self.flush_calls(out);
        out.push_back(ModelEvent::Finish {
            reason: self.finish.clone().unwrap_or(FinishReason::Stop),
            usage: self.usage,
        });
        Ok(())
    }
}

/// A call id for a server that sent none: from the response id, else the
/// request (`fallback`), and the call's index.
fn made_up_id(response_id: Option<&str>, fallback: &str, index: usize) -> String {
    match response_id {
        Some(response) => format!("call_{response}_{index}"),
        None => format!("call_{fallback}_{index}"),
    }
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" | "end_turn" | "eos" => FinishReason::Stop,
        "tool_calls" | "function_call" | "tool_use" => FinishReason::ToolCalls,
        "length" | "max_tokens" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

pub(crate) fn shorten(text: &str) -> String {
    const SHOWN: usize = 300;
    match text.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::{parse_sse_chunks, parse_sse_text};
    use crate::test_support::{calls_of, finish_of, reasoning_of, text_of};

    fn parse(text: &str) -> Vec<Result<ModelEvent, ModelError>> {
        parse_sse_text(text, ChatStreamParser::new("openai", "run1_2"))
    }

    fn ok(text: &str) -> Vec<ModelEvent> {
        parse(text).into_iter().map(|e| e.unwrap()).collect()
    }

    /// An SSE body of the given `delta`s, then `finish_reason: stop` and `[DONE]`.
    fn deltas(deltas: &[&str]) -> String {
        let mut sse: String = deltas
            .iter()
            .map(|delta| format!("data: {{\"id\":\"r\",\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n"))
            .collect();
        sse.push_str("data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
        sse.push_str("data: [DONE]\n\n");
        sse
    }

    #[test]
    fn ollamas_reasoning_beside_empty_content_is_reasoning_before_the_text() {
        // As Ollama's `/v1/chat/completions` streams a thinking model.
        let events = ok(&deltas(&[
            r#"{"role":"assistant","content":"","reasoning":"We"}"#,
            r#"{"content":"","reasoning":" need"}"#,
            r#"{"content":"","reasoning":" an answer."}"#,
            r#"{"content":"Forty"}"#,
            r#"{"content":"-two."}"#,
        ]));
        assert_eq!(
            &events[..5],
            [
                ModelEvent::ReasoningDelta("We".into()),
                ModelEvent::ReasoningDelta(" need".into()),
                ModelEvent::ReasoningDelta(" an answer.".into()),
                ModelEvent::TextDelta("Forty".into()),
                ModelEvent::TextDelta("-two.".into()),
            ]
        );
        assert_eq!(finish_of(&events).0, FinishReason::Stop);
    }

    #[test]
    fn reasoning_content_is_reasoning_and_taken_once_when_a_server_sends_both_names() {
        // vLLM, llama.cpp and DeepSeek name it `reasoning_content`; some
        // servers repeat it under `reasoning`, or send `null` beside text.
        let events = ok(&deltas(&[
            r#"{"role":"assistant","content":null,"reasoning_content":"Think"}"#,
            r#"{"reasoning_content":"ing.","reasoning":"ing."}"#,
            r#"{"content":"Done.","reasoning_content":null,"reasoning":null}"#,
        ]));
        assert_eq!(reasoning_of(&events), "Thinking.");
        assert_eq!(text_of(&events), "Done.");
        assert_eq!(events.len(), 4, "{events:?}");
    }

    #[test]
    fn recorded_text_answer_streams_text_then_finishes_with_usage() {
        let events = ok(include_str!("../../tests/fixtures/openai/text_plain_gpt41_nano.sse"));
        assert_eq!(
            events,
            vec![
                ModelEvent::TextDelta("pong".into()),
                ModelEvent::Finish {
                    reason: FinishReason::Stop,
                    usage: Usage {
                        input_tokens: 15,
                        output_tokens: 1,
                        total_tokens: 16
                    }
                }
            ]
        );
        let after_tool = ok(include_str!(
            "../../tests/fixtures/openai/text_after_tool_result_gpt4o_mini.sse"
        ));
        assert_eq!(text_of(&after_tool), "azimuth-47");
        assert_eq!(
            after_tool
                .iter()
                .filter(|e| matches!(e, ModelEvent::TextDelta(_)))
                .count(),
            4
        );
        assert_eq!(finish_of(&after_tool).1.total_tokens, 48);
    }

    #[test]
    fn recorded_single_call_with_role_and_head_in_one_chunk_streams_start_deltas_and_call() {
        let events = ok(include_str!(
            "../../tests/fixtures/openai/tool_call_single_gpt4o_mini.sse"
        ));
        assert_eq!(
            events[0],
            ModelEvent::ToolCallStart {
                id: "call_REDACTED_1".into(),
                name: "add".into()
            }
        );
        let deltas: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                ModelEvent::ToolCallDelta { args_delta, .. } => Some(args_delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas.len(), 9);
        assert_eq!(deltas.concat(), r#"{"x":17,"y":25}"#);
        assert_eq!(
            calls_of(&events),
            vec![("call_REDACTED_1".into(), "add".into(), r#"{"x":17,"y":25}"#.into())]
        );
        let (reason, usage) = finish_of(&events);
        assert_eq!(reason, FinishReason::ToolCalls);
        assert_eq!(usage.input_tokens, 80);
        assert_eq!(usage.output_tokens, 17);
    }

    #[test]
    fn recorded_parallel_calls_come_out_in_index_order_with_their_own_arguments() {
        let events = ok(include_str!(
            "../../tests/fixtures/openai/tool_calls_parallel_gpt41_mini.sse"
        ));
        assert_eq!(
            calls_of(&events),
            vec![
                ("call_REDACTED_1".into(), "alpha".into(), r#"{"value": "red"}"#.into()),
                ("call_REDACTED_2".into(), "beta".into(), r#"{"value": "blue"}"#.into()),
            ]
        );
        assert_eq!(text_of(&events), "");
        assert_eq!(finish_of(&events).0, FinishReason::ToolCalls);
    }

    #[test]
    fn recorded_zero_argument_call_keeps_its_empty_object() {
        let events = ok(include_str!(
            "../../tests/fixtures/openai/tool_call_zero_args_gpt4o_mini.sse"
        ));
        assert_eq!(
            calls_of(&events),
            vec![("call_REDACTED_1".into(), "ping".into(), "{}".into())]
        );
    }

    #[test]
    fn recorded_ollama_whole_call_in_one_chunk_is_one_call() {
        let events = ok(include_str!(
            "../../tests/fixtures/ollama/v1_tool_call_single_chunk_llama31_8b.sse"
        ));
        assert_eq!(
            calls_of(&events),
            vec![(
                "call_rjzv4ky2".into(),
                "get_weather".into(),
                r#"{"city":"Copenhagen"}"#.into()
            )]
        );
        let (reason, usage) = finish_of(&events);
        assert_eq!(reason, FinishReason::ToolCalls);
        assert_eq!(usage.total_tokens, 185);
    }

    #[test]
    fn recorded_ollama_parallel_calls_each_in_one_chunk_without_usage() {
        let events = ok(include_str!(
            "../../tests/fixtures/ollama/v1_parallel_tool_calls_single_chunk_qwen25_coder.sse"
        ));
        assert_eq!(
            calls_of(&events),
            vec![
                (
                    "call_wteop8bt".into(),
                    "run_command".into(),
                    r#"{"command":"ls"}"#.into()
                ),
                (
                    "call_rk2xye1l".into(),
                    "run_command".into(),
                    r#"{"command":"ls -l"}"#.into()
                ),
            ]
        );
        assert_eq!(finish_of(&events), (FinishReason::ToolCalls, Usage::default()));
    }

    #[test]
    fn whole_call_together_with_finish_reason_stop_and_no_ids_gets_stable_made_up_ids() {
        let sse = concat!(
            "data: {\"id\":\"resp9\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[",
            "{\"index\":0,\"function\":{\"name\":\"a\",\"arguments\":\"{}\"}},",
            "{\"index\":1,\"function\":{\"name\":\"b\",\"arguments\":\"{\\\"k\\\":1}\"}}",
            "]},\"finish_reason\":\"stop\",\"brand_new_field\":{\"x\":1}}]}\n\n",
            "data: [DONE]\n\n"
        );
        let first = ok(sse);
        assert_eq!(
            calls_of(&first),
            vec![
                ("call_resp9_0".into(), "a".into(), "{}".into()),
                ("call_resp9_1".into(), "b".into(), r#"{"k":1}"#.into()),
            ]
        );
        assert_eq!(calls_of(&ok(sse)), calls_of(&first), "ids are stable across parses");
        // Reported as the server said; the agent treats it as a tool turn.
        assert_eq!(finish_of(&first).0, FinishReason::Stop);

        let no_response_id = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"a\",\"arguments\":\"\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
        assert_eq!(calls_of(&ok(no_response_id))[0].0, "call_run1_2_0");
    }

    /// Each call's start and deltas name it alone: (start ids, delta text per id).
    fn streamed_ids(events: &[ModelEvent]) -> (Vec<String>, Vec<(String, String)>) {
        let starts: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                ModelEvent::ToolCallStart { id, .. } => Some(id.clone()),
                _ => None,
            })
            .collect();
        let deltas = starts
            .iter()
            .map(|start| {
                let text: String = events
                    .iter()
                    .filter_map(|e| match e {
                        ModelEvent::ToolCallDelta { id, args_delta } if id == start => Some(args_delta.as_str()),
                        _ => None,
                    })
                    .collect();
                (start.clone(), text)
            })
            .collect();
        (starts, deltas)
    }

    #[test]
    fn two_calls_with_one_id_at_different_indexes_stay_two_calls_with_distinct_ids() {
        let sse = concat!(
            "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_0\",\"function\":{\"name\":\"ask_user\",\"arguments\":\"{\\\"question\\\":\"}}]}}]}\n\n",
            "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_0\",\"function\":{\"name\":\"ask_user\",\"arguments\":\"{\\\"question\\\":\"}}]}}]}\n\n",
            "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"Where?\\\"}\"}}]}}]}\n\n",
            "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"\\\"When?\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: [DONE]\n\n"
        );
        let events = ok(sse);
        let calls = calls_of(&events);
        assert_eq!(calls.len(), 2, "{events:?}");
        assert_eq!(
            calls[0],
            ("call_0".into(), "ask_user".into(), r#"{"question":"Where?"}"#.into())
        );
        assert_eq!(calls[1].2, r#"{"question":"When?"}"#);
        assert_ne!(calls[1].0, "call_0", "the second call gets an id of its own");
        let (starts, deltas) = streamed_ids(&events);
        assert_eq!(starts, [calls[0].0.clone(), calls[1].0.clone()]);
        assert_eq!(
            deltas,
            [
                (calls[0].0.clone(), calls[0].2.clone()),
                (calls[1].0.clone(), calls[1].2.clone())
            ]
        );
    }

    #[test]
    fn whole_calls_without_index_under_one_id_stay_two_calls_with_distinct_ids() {
        let sse = concat!(
            "data: {\"id\":\"r\",\"choices\":[{\"delta\":{\"tool_calls\":[",
            "{\"id\":\"call_0\",\"function\":{\"name\":\"ask_user\",\"arguments\":\"{\\\"question\\\":\\\"A?\\\"}\"}},",
            "{\"id\":\"call_0\",\"function\":{\"name\":\"ask_user\",\"arguments\":\"{\\\"question\\\":\\\"B?\\\"}\"}}",
            "]},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: [DONE]\n\n"
        );
        let calls = calls_of(&ok(sse));
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(calls[0].2, r#"{"question":"A?"}"#);
        assert_eq!(calls[1].2, r#"{"question":"B?"}"#);
        assert_ne!(calls[0].0, calls[1].0);
    }

    #[test]
    fn nulls_where_lists_and_numbers_are_expected_are_tolerated() {
        let sse = "data: {\"id\":null,\"choices\":null,\"usage\":null}\n\ndata: {\"choices\":[{\"index\":null,\"delta\":{\"content\":\"ok\",\"tool_calls\":null},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        let events = ok(sse);
        assert_eq!(text_of(&events), "ok");
        assert_eq!(finish_of(&events).0, FinishReason::Stop);
    }

    #[test]
    fn malformed_arguments_are_passed_through_raw() {
        let sse = "data: {\"id\":\"r\",\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"t\",\"arguments\":\"{\\\"a\\\": \"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
        assert_eq!(calls_of(&ok(sse)), vec![("c1".into(), "t".into(), "{\"a\": ".into())]);
    }

    #[test]
    fn error_object_mid_stream_is_a_stream_error_after_the_text_so_far() {
        let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\ndata: {\"error\":{\"message\":\"upstream overloaded\",\"type\":\"server_error\",\"code\":502}}\n\n";
        let events = parse(sse);
        assert_eq!(events[0], Ok(ModelEvent::TextDelta("Hel".into())));
        match &events[1] {
            Err(ModelError::Stream { message, .. }) => assert!(message.contains("upstream overloaded"), "{message}"),
            other => panic!("expected a stream error, got {other:?}"),
        }
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn a_body_cut_short_is_an_error_and_its_partial_call_is_not_emitted() {
        let sse = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"t\",\"arguments\":\"{\\\"a\"}}]}}]}\n\n";
        let events = parse(sse);
        assert!(
            matches!(events.last(), Some(Err(ModelError::Transport { .. }))),
            "{events:?}"
        );
        assert!(!events.iter().any(|e| matches!(e, Ok(ModelEvent::ToolCall { .. }))));
    }

    #[test]
    fn a_data_line_that_is_not_json_is_a_protocol_error() {
        let events = parse("data: {not json\n\n");
        assert!(
            matches!(events.last(), Some(Err(ModelError::Protocol { .. }))),
            "{events:?}"
        );
    }

    #[test]
    fn recorded_streams_read_one_byte_at_a_time_give_the_same_events() {
        for text in [
            include_str!("../../tests/fixtures/openai/text_after_tool_result_gpt4o_mini.sse"),
            include_str!("../../tests/fixtures/openai/text_plain_gpt41_nano.sse"),
            include_str!("../../tests/fixtures/openai/tool_call_single_gpt4o_mini.sse"),
            include_str!("../../tests/fixtures/openai/tool_call_zero_args_gpt4o_mini.sse"),
            include_str!("../../tests/fixtures/openai/tool_calls_parallel_gpt41_mini.sse"),
            include_str!("../../tests/fixtures/ollama/v1_parallel_tool_calls_single_chunk_qwen25_coder.sse"),
            include_str!("../../tests/fixtures/ollama/v1_tool_call_single_chunk_llama31_8b.sse"),
        ] {
            let whole = parse(text);
            let split = parse_sse_chunks(text.as_bytes().chunks(1), ChatStreamParser::new("openai", "run1_2"));
            assert_eq!(split, whole);
            assert!(whole.iter().all(Result::is_ok), "{whole:?}");
        }
    }
}

//! The payload of `step-finish` and `finish`, in the shape Mastra's carry:
//! `messageId`, `stepResult`, `metadata`, `output` (text, tool calls, usage,
//! every step of the run), `messages` (the conversation) and
//! `processorRetryCount`.
//!
//! Where Mastra reports provider-internal data askloop does not keep (the
//! provider's response id and headers, raw usage, the raw finish reason),
//! the key is there with an empty value of the same JSON type, so clients
//! that read it find what they expect and nothing made up.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::ToolCallPayload;
use super::conversation::{ContentPart, ConversationMessages, ModelMessage, ModelRole};
use crate::message::{FinishReason, Message, ToolCall, Usage};
use crate::rfc3339;

/// Payload of `step-finish` and `finish`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepFinish {
    /// The id of the message this stream's steps produce.
    pub message_id: String,
    /// Why the step ended.
    pub step_result: StepResult,
    /// Which model answered.
    pub metadata: StepMetadata,
    /// What the step (or, for `finish`, the last step) produced.
    pub output: StepOutput,
    /// The run's conversation so far.
    pub messages: ConversationMessages,
    /// How often output processors retried the step (askloop has none: 0).
    pub processor_retry_count: u32,
}

/// Why a step ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepResult {
    /// The reason.
    pub reason: FinishReason,
    /// The provider's own word for it (not kept: empty).
    #[serde(default)]
    pub raw_reason: String,
    /// Whether another step follows.
    pub is_continued: bool,
    /// The message the next step continues, when one follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

/// Which model answered a step.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepMetadata {
    /// Provider-specific metadata (not kept: empty).
    #[serde(default)]
    pub provider_metadata: Map<String, Value>,
    /// The provider's response id (not kept: empty).
    #[serde(default)]
    pub id: String,
    /// When the step started, as an RFC 3339 time.
    #[serde(default)]
    pub timestamp: String,
    /// The model, without its provider (`gpt-4o-mini`).
    #[serde(default)]
    pub model_id: String,
    /// The provider's response headers (not kept: empty).
    #[serde(default)]
    pub headers: Map<String, Value>,
    /// The model and its provider.
    #[serde(default)]
    pub model_metadata: ModelMetadata,
}

/// The model and its provider, from a name like `openai/gpt-4o-mini`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelMetadata {
    /// The model (`gpt-4o-mini`).
    pub model_id: String,
    /// The version of the model interface (Mastra's; none here: empty).
    #[serde(default)]
    pub model_version: String,
    /// The provider (`openai`), empty when the name has none.
    pub model_provider: String,
}

impl ModelMetadata {
    /// Splits a model name at its first `/`.
    pub fn from_name(name: &str) -> Self {
        let (provider, model) = name.split_once('/').unwrap_or(("", name));
        ModelMetadata {
            model_id: model.to_owned(),
            model_version: String::new(),
            model_provider: provider.to_owned(),
        }
    }
}

/// What a step produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepOutput {
    /// The step's text.
    pub text: String,
    /// The step's tool calls.
    pub tool_calls: Vec<ToolCallPayload>,
    /// Tokens used (for `finish`: by the whole run so far).
    pub usage: StepUsage,
    /// Every step of the run so far, oldest first.
    #[serde(default)]
    pub steps: Vec<Arc<StepRecord>>,
}

/// Token counts in Mastra's shape.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepUsage {
    /// Tokens in the request.
    pub input_tokens: u64,
    /// Tokens generated.
    pub output_tokens: u64,
    /// Their sum.
    pub total_tokens: u64,
    /// Reasoning tokens (not reported separately: 0).
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// Input tokens read from a cache (not reported separately: 0).
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// The provider's own usage report (not kept: empty).
    #[serde(default)]
    pub raw: Map<String, Value>,
}

impl From<Usage> for StepUsage {
    fn from(usage: Usage) -> Self {
        StepUsage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            total_tokens: usage.total_tokens,
            ..StepUsage::default()
        }
    }
}

/// One step of the run: a model turn and the results of its tool calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepRecord {
    /// The turn's text, its tool calls, and their results.
    pub content: Vec<ContentPart>,
    /// Tokens the turn used, where known (earlier steps of a stored run: 0).
    pub usage: StepUsage,
    /// Provider warnings (none).
    #[serde(default)]
    pub warnings: Vec<Value>,
    /// The turn's response.
    pub response: StepResponse,
    /// Provider-specific metadata (not kept: empty).
    #[serde(default)]
    pub provider_metadata: Map<String, Value>,
}

/// A step's response: its messages, and what is known of the provider's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepResponse {
    /// The provider's response id (not kept: empty).
    #[serde(default)]
    pub id: String,
    /// When the step started, where known (RFC 3339; else empty).
    #[serde(default)]
    pub timestamp: String,
    /// The model, without its provider.
    #[serde(default)]
    pub model_id: String,
    /// The provider's response headers (not kept: empty).
    #[serde(default)]
    pub headers: Map<String, Value>,
    /// The step's assistant message and tool results (shared with the
    /// payload's [`ConversationMessages`]).
    pub messages: Vec<Arc<ModelMessage>>,
}

/// What the driver knows when a step ends.
pub(crate) struct StepReport<'a> {
    pub(crate) message_id: &'a str,
    pub(crate) model_name: &'a str,
    /// When the step's model turn started, if it ran in this stream.
    pub(crate) started_at: Option<DateTime<Utc>>,
    pub(crate) reason: FinishReason,
    pub(crate) is_continued: bool,
    /// The step's usage, if it ran in this stream.
    pub(crate) usage: Usage,
    /// The run's conversation, ending with the step.
    pub(crate) conversation: &'a [Message],
}

impl StepFinish {
    /// The `step-finish` payload of the step that ends `report.conversation`.
    ///
    /// `converted` holds what earlier payloads of the same conversation
    /// converted: only the messages added since are converted again, and
    /// `messages` and every step's response share the converted messages,
    /// so a step's payload costs what its new messages cost, plus a copy of
    /// one pointer per message and step.
    pub(crate) fn report(report: StepReport<'_>, converted: &mut ConvertedConversation) -> StepFinish {
        let model = ModelMetadata::from_name(report.model_name);
        let timestamp = report.started_at.map(rfc3339).unwrap_or_default();
        let usage = StepUsage::from(report.usage);
        let (all, mut steps) = converted.extend_to(report.conversation, &model.model_id);
        if let Some(last) = steps.last_mut() {
            let last = Arc::make_mut(last);
            last.usage = usage.clone();
            last.response.timestamp = timestamp.clone();
        }
        let (text, calls) = last_turn(report.conversation);
        StepFinish {
            message_id: report.message_id.to_owned(),
            step_result: StepResult {
                reason: report.reason,
                raw_reason: String::new(),
                is_continued: report.is_continued,
                message_id: report.is_continued.then(|| report.message_id.to_owned()),
            },
            metadata: StepMetadata {
                timestamp,
                model_id: model.model_id.clone(),
                model_metadata: model,
                ..StepMetadata::default()
            },
            output: StepOutput {
                text,
                tool_calls: calls.iter().map(ToolCallPayload::from).collect(),
                usage,
                steps,
            },
            messages: ConversationMessages::from_model_messages(all),
            processor_retry_count: 0,
        }
    }

    /// The `finish` payload: the last step's, with the run's total usage.
    pub(crate) fn into_finish(mut self, run_usage: Usage) -> StepFinish {
        self.output.usage = run_usage.into();
        self
    }
}

/// A conversation converted for `step-finish` and `finish`, as far as
/// messages added later cannot change it: kept with the conversation (by
/// the driver between steps, by the agent's conversation cache between
/// drives) so each payload converts only what is new.
///
/// Messages are only ever appended to a run's conversation. What they could
/// still change is the trailing run of tool results (a later result joins
/// their `tool` message) and the step of the last settled message (its
/// results may follow); everything before is kept.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConvertedConversation {
    /// How many of the conversation's messages `messages` covers.
    covered: usize,
    /// The model messages of those.
    messages: Vec<Arc<ModelMessage>>,
    /// The conversation's index of the last assistant message among the
    /// covered ones: the calls a tool result right after them answers.
    last_assistant: Option<usize>,
    /// The steps of the assistant messages among `messages[..stepped]`.
    steps: Vec<Arc<StepRecord>>,
    stepped: usize,
    /// The model id the steps name.
    model_id: String,
}

impl ConvertedConversation {
    /// Converts what `conversation` added since the last call and returns
    /// all of its model messages and steps. A conversation that does not
    /// extend the converted one (shorter), or another model, starts over.
    fn extend_to(
        &mut self,
        conversation: &[Message],
        model_id: &str,
    ) -> (Vec<Arc<ModelMessage>>, Vec<Arc<StepRecord>>) {
        if self.covered > conversation.len() || self.model_id != model_id {
            *self = ConvertedConversation {
                model_id: model_id.to_owned(),
                ..ConvertedConversation::default()
            };
        }
        let calls = match self.last_assistant.and_then(|at| conversation.get(at)) {
            Some(Message::Assistant { tool_calls, .. }) => tool_calls.as_slice(),
            _ => &[],
        };
        let mut all = Vec::with_capacity(self.messages.len() + conversation.len() - self.covered);
        all.extend(self.messages.iter().cloned());
        all.extend(
            ModelMessage::continuing(&conversation[self.covered..], calls)
                .into_iter()
                .map(Arc::new),
        );

        // Settle everything but a trailing run of tool results.
        let open_results = conversation[self.covered..]
            .iter()
            .rev()
            .take_while(|m| matches!(m, Message::Tool(_)))
            .count();
        let settled_to = conversation.len() - open_results;
        if let Some(at) = conversation[self.covered..settled_to]
            .iter()
            .rposition(|m| matches!(m, Message::Assistant { .. }))
        {
            self.last_assistant = Some(self.covered + at);
        }
        let settled_messages = all.len() - usize::from(open_results > 0);
        self.messages
            .extend(all[self.messages.len()..settled_messages].iter().cloned());
        self.covered = settled_to;

        // A step is settled once the message after its assistant message is.
        let stepped = settled_messages.saturating_sub(1).max(self.stepped);
        self.steps.extend(
            steps_of(&all, self.stepped..stepped, model_id)
                .into_iter()
                .map(Arc::new),
        );
        self.stepped = stepped;
        let mut steps = Vec::with_capacity(self.steps.len() + 1);
        steps.extend(self.steps.iter().cloned());
        steps.extend(steps_of(&all, stepped..all.len(), model_id).into_iter().map(Arc::new));
        (all, steps)
    }
}

/// The text and tool calls of the last assistant message.
fn last_turn(conversation: &[Message]) -> (String, &[ToolCall]) {
    conversation
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Assistant { content, tool_calls } => Some((content.clone(), tool_calls.as_slice())),
            _ => None,
        })
        .unwrap_or_default()
}

/// The steps of the assistant messages among `all[of]`: each with the tool
/// message right after it, which holds the results of its calls
/// (consecutive results are one tool message).
fn steps_of(all: &[Arc<ModelMessage>], of: std::ops::Range<usize>, model_id: &str) -> Vec<StepRecord> {
    let mut steps = Vec::new();
    for at in of {
        let message = &all[at];
        if message.role != ModelRole::Assistant {
            continue;
        }
        let results = all.get(at + 1).filter(|m| m.role == ModelRole::Tool);
        let mut content = Vec::with_capacity(message.content.len() + results.map_or(0, |r| r.content.len()));
        content.extend(message.content.iter().cloned());
        let mut messages = vec![Arc::clone(message)];
        if let Some(results) = results {
            content.extend(results.content.iter().cloned());
            messages.push(Arc::clone(results));
        }
        steps.push(StepRecord {
            content,
            usage: StepUsage::default(),
            warnings: Vec::new(),
            response: StepResponse {
                id: String::new(),
                timestamp: String::new(),
                model_id: model_id.to_owned(),
                headers: Map::new(),
                messages,
            },
            provider_metadata: Map::new(),
        });
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ToolContent, ToolResult};
    use serde_json::json;

    #[test]
    fn model_names_split_into_provider_and_model() {
        let split = ModelMetadata::from_name("openai/gpt-4o-mini");
        assert_eq!(
            (split.model_provider.as_str(), split.model_id.as_str()),
            ("openai", "gpt-4o-mini")
        );
        let bare = ModelMetadata::from_name("scripted");
        assert_eq!((bare.model_provider.as_str(), bare.model_id.as_str()), ("", "scripted"));
    }

    #[test]
    fn a_report_lists_every_step_with_its_results_and_the_current_steps_usage() {
        let call = ToolCall {
            id: "c1".into(),
            name: "ask_user".into(),
            args: json!({"question": "Where?"}).into(),
        };
        let conversation = vec![
            Message::user("Deploy"),
            Message::assistant("", vec![call]),
            Message::Tool(ToolResult {
                tool_call_id: "c1".into(),
                tool_name: "ask_user".into(),
                content: ToolContent::Text("User answered: staging".into()),
                is_error: false,
            }),
            Message::assistant("Deploying.", vec![]),
        ];
        let usage = Usage {
            input_tokens: 3,
            output_tokens: 2,
            total_tokens: 5,
        };
        let finish = StepFinish::report(
            StepReport {
                message_id: "m1",
                model_name: "openai/gpt-4o-mini",
                started_at: None,
                reason: FinishReason::Stop,
                is_continued: false,
                usage,
                conversation: &conversation,
            },
            &mut ConvertedConversation::default(),
        );
        assert_eq!(finish.output.text, "Deploying.");
        assert!(finish.output.tool_calls.is_empty());
        assert_eq!(finish.output.steps.len(), 2);
        assert_eq!(finish.output.steps[0].content.len(), 2, "the call and its result");
        assert_eq!(
            finish.output.steps[0].usage.total_tokens, 0,
            "not known for earlier steps"
        );
        assert_eq!(finish.output.steps[1].usage.total_tokens, 5);
        assert_eq!(finish.step_result.message_id, None, "nothing continues");
        assert_eq!(finish.messages.all.len(), 4);
        assert_eq!(
            finish.output.steps[0].response.messages,
            finish.messages.all[1..3],
            "a step's response is its assistant message and the tool message after it"
        );
        assert!(
            Arc::ptr_eq(&finish.output.steps[1].response.messages[0], &finish.messages.all[3]),
            "steps share the conversation's messages"
        );
        assert_eq!(finish.metadata.model_id, "gpt-4o-mini");
    }

    /// What a report says when the conversation grows one message at a
    /// time and every payload reuses the earlier conversion.
    fn reports_as_it_grows(conversation: &[Message]) -> Vec<StepFinish> {
        let mut converted = ConvertedConversation::default();
        (1..=conversation.len())
            .map(|len| StepFinish::report(report_of(&conversation[..len]), &mut converted))
            .collect()
    }

    fn report_of(conversation: &[Message]) -> StepReport<'_> {
        StepReport {
            message_id: "m",
            model_name: "openai/gpt-4o-mini",
            started_at: None,
            reason: FinishReason::ToolCalls,
            is_continued: true,
            usage: Usage {
                input_tokens: 1,
                output_tokens: 1,
                total_tokens: 2,
            },
            conversation,
        }
    }

    /// A conversation of user messages, assistant turns with 0 to 2 calls,
    /// and results (of the last turn's calls or of none), in any order.
    fn conversation(kinds: &[u8]) -> Vec<Message> {
        let mut calls: Vec<ToolCall> = Vec::new();
        kinds
            .iter()
            .enumerate()
            .map(|(at, kind)| match kind % 5 {
                0 => Message::user(format!("u{at}")),
                1 | 2 => {
                    calls = (0..(kind % 3))
                        .map(|n| ToolCall {
                            id: format!("c{at}.{n}"),
                            name: "t".into(),
                            args: json!({ "at": at, "n": n }).into(),
                        })
                        .collect();
                    Message::assistant(format!("a{at}"), calls.clone())
                }
                _ => Message::Tool(ToolResult {
                    tool_call_id: calls.get(at % 2).map_or_else(|| format!("none{at}"), |c| c.id.clone()),
                    tool_name: "t".into(),
                    content: ToolContent::Text(format!("r{at}")),
                    is_error: at % 3 == 0,
                }),
            })
            .collect()
    }

    proptest::proptest! {
        #[test]
        fn a_payload_built_on_earlier_ones_equals_one_built_from_the_whole_conversation(
            kinds in proptest::collection::vec(0u8..15, 0..40)
        ) {
            let conversation = conversation(&kinds);
            let grown = reports_as_it_grows(&conversation);
            for (len, report) in (1..=conversation.len()).zip(grown) {
                let whole = StepFinish::report(report_of(&conversation[..len]), &mut ConvertedConversation::default());
                proptest::prop_assert_eq!(report, whole, "after {} messages", len);
            }
        }
    }

    #[test]
    fn a_payload_converts_only_the_messages_added_since_the_last() {
        let conversation = conversation(&[0, 1, 3, 4, 2, 3, 0, 1]);
        let mut converted = ConvertedConversation::default();
        let first = StepFinish::report(report_of(&conversation[..5]), &mut converted);
        let second = StepFinish::report(report_of(&conversation), &mut converted);
        assert!(
            Arc::ptr_eq(&first.messages.all[0], &second.messages.all[0]),
            "a settled message is converted once"
        );
        assert!(
            Arc::ptr_eq(&first.output.steps[0], &second.output.steps[0]),
            "a settled step is built once"
        );
        assert_eq!(first.output.steps[1].content.len(), 3, "the turn's text and two calls");
        assert_eq!(
            second.output.steps[1].content.len(),
            4,
            "the second turn's step took the result that came after the first payload"
        );
        let shorter = StepFinish::report(report_of(&conversation[..2]), &mut converted);
        assert_eq!(shorter.messages.all.len(), 2, "a shorter conversation starts over");
    }
}

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
    /// The conversation is converted once; `messages` and every step's
    /// response share those messages, so the payload costs one pass over
    /// the conversation, not one per place a message appears.
    pub(crate) fn report(report: StepReport<'_>) -> StepFinish {
        let model = ModelMetadata::from_name(report.model_name);
        let timestamp = report.started_at.map(rfc3339).unwrap_or_default();
        let usage = StepUsage::from(report.usage);
        let all: Vec<Arc<ModelMessage>> = ModelMessage::from_conversation(report.conversation)
            .into_iter()
            .map(Arc::new)
            .collect();
        let mut steps = steps_of(&all, &model.model_id);
        if let Some(last) = steps.last_mut() {
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
                steps: steps.into_iter().map(Arc::new).collect(),
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

/// Every step of the conversation, from its model messages: each assistant
/// message with the tool message right after it, which holds the results of
/// its calls (consecutive results are one tool message).
fn steps_of(all: &[Arc<ModelMessage>], model_id: &str) -> Vec<StepRecord> {
    let mut steps = Vec::new();
    for (at, message) in all.iter().enumerate() {
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
            args: json!({"question": "Where?"}),
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
        let finish = StepFinish::report(StepReport {
            message_id: "m1",
            model_name: "openai/gpt-4o-mini",
            started_at: None,
            reason: FinishReason::Stop,
            is_continued: false,
            usage,
            conversation: &conversation,
        });
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
}

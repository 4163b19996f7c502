//! The conversation: messages, tool calls, usage and finish reasons.
//!
//! These types are stored (one row per message in a SQL store) and sent to
//! models, so their serde shape is a wire format: change it only with a
//! schema-version bump in the stores.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of a run's conversation.
///
/// The system prompt is not a message: it is the agent's instructions, sent
/// with every model request, so changing an agent's instructions does not
/// require rewriting stored conversations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "camelCase")]
#[non_exhaustive]
pub enum Message {
    /// What the person (or the calling program) said.
    User {
        /// The text of the message.
        content: String,
    },
    /// What the model answered: text, tool calls, or both.
    Assistant {
        /// The text, empty when the model only called tools.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        content: String,
        /// The tools the model called, in the order it called them.
        #[serde(default, rename = "toolCalls", skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, sent back to the model.
    Tool(ToolResult),
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Message::Assistant {
            content: content.into(),
            tool_calls,
        }
    }

    /// True for an assistant message.
    pub fn is_assistant(&self) -> bool {
        matches!(self, Message::Assistant { .. })
    }
}

/// A tool call made by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// The id the model (or the provider adapter) gave the call.
    pub id: String,
    /// The tool's id.
    pub name: String,
    /// The arguments. A JSON object when the model sent valid JSON; the raw
    /// text as a JSON string when it did not (the call then fails with an
    /// is-error result the model can read and correct).
    ///
    /// Shared, not copied, by everything that carries the call on: the
    /// pending call, the stream's chunks, the conversation's payloads
    /// (`Arc::new(json!(...))` or `json!(...).into()` makes one).
    pub args: Arc<Value>,
}

/// The result of a tool call, as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The call this answers.
    pub tool_call_id: String,
    /// The tool's id.
    pub tool_name: String,
    /// What the tool returned.
    pub content: ToolContent,
    /// Whether the tool reported an error.
    #[serde(default)]
    pub is_error: bool,
}

/// What a tool returns to the model: text or JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolContent {
    /// Plain text, sent as is.
    Text(String),
    /// Structured output, sent to the model as JSON text.
    Json(Value),
}

impl ToolContent {
    /// The content as the text a model receives.
    pub fn to_model_text(&self) -> String {
        match self {
            ToolContent::Text(text) => text.clone(),
            ToolContent::Json(value) => value.to_string(),
        }
    }

    /// The content as a JSON value (text becomes a JSON string).
    pub fn to_value(&self) -> Value {
        match self {
            ToolContent::Text(text) => Value::String(text.clone()),
            ToolContent::Json(value) => value.clone(),
        }
    }
}

impl From<String> for ToolContent {
    fn from(text: String) -> Self {
        ToolContent::Text(text)
    }
}

impl From<&str> for ToolContent {
    fn from(text: &str) -> Self {
        ToolContent::Text(text.to_owned())
    }
}

/// Token counts reported by the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Tokens in the request.
    pub input_tokens: u64,
    /// Tokens generated.
    pub output_tokens: u64,
    /// Their sum.
    pub total_tokens: u64,
}

impl Usage {
    /// Adds another usage report to this one.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.total_tokens += other.total_tokens;
    }
}

/// Why a model turn, or a whole stream, ended. Names follow Mastra's
/// (`stop`, `tool-calls`, ...), plus `suspended` for a stream that waits on a
/// person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum FinishReason {
    /// The model finished its answer.
    Stop,
    /// The model called tools.
    ToolCalls,
    /// The model hit its output token limit.
    Length,
    /// The provider filtered the output.
    ContentFilter,
    /// The run is waiting for an answer or an approval.
    Suspended,
    /// The run failed.
    Error,
    /// The run was cancelled.
    Cancelled,
    /// Anything else a provider reports.
    Other,
}

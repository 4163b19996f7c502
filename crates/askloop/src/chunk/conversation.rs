//! The conversation in the message shape Mastra's `step-finish` and `finish`
//! chunks carry (the AI SDK's model messages), so a front end that saves
//! `finish.payload.messages` gets what it would get from Mastra.
//!
//! ```
//! use askloop::chunk::ModelMessage;
//! use askloop::{Message, ToolCall, ToolContent, ToolResult};
//! use serde_json::json;
//!
//! let conversation = vec![
//!     Message::user("Deploy"),
//!     Message::assistant("", vec![ToolCall { id: "c1".into(), name: "ask_user".into(), args: json!({"question": "Where?"}).into() }]),
//!     Message::Tool(ToolResult {
//!         tool_call_id: "c1".into(),
//!         tool_name: "ask_user".into(),
//!         content: ToolContent::Text("User answered: staging".into()),
//!         is_error: false,
//!     }),
//! ];
//! let messages = ModelMessage::from_conversation(&conversation);
//! assert_eq!(
//!     serde_json::to_value(&messages[2]).unwrap(),
//!     json!({"role": "tool", "content": [{
//!         "type": "tool-result", "toolCallId": "c1", "toolName": "ask_user",
//!         "output": {"type": "text", "value": "User answered: staging"},
//!         "input": {"question": "Where?"}
//!     }]})
//! );
//! ```

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{Message, ToolCall, ToolContent, ToolResult};

/// One message of the conversation, as a model message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelMessage {
    /// Who said it.
    pub role: ModelRole,
    /// What was said: text, tool calls, tool results.
    pub content: Vec<ContentPart>,
}

/// The author of a [`ModelMessage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ModelRole {
    /// The person (or calling program).
    User,
    /// The model.
    Assistant,
    /// Tool results.
    Tool,
}

/// One part of a [`ModelMessage`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", rename_all_fields = "camelCase")]
#[non_exhaustive]
pub enum ContentPart {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call the model made.
    ToolCall {
        /// The call's id.
        tool_call_id: String,
        /// The tool's id.
        tool_name: String,
        /// The call's input.
        input: Arc<Value>,
    },
    /// A tool call's result.
    ToolResult {
        /// The call's id.
        tool_call_id: String,
        /// The tool's id.
        tool_name: String,
        /// What the model was told.
        output: ToolResultOutput,
        /// The call's input.
        input: Arc<Value>,
    },
}

/// A tool result as the model was told it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ToolResultOutput {
    /// Text.
    Text(String),
    /// JSON.
    Json(Value),
    /// Text of an error result.
    ErrorText(String),
    /// JSON of an error result.
    ErrorJson(Value),
}

impl ToolResultOutput {
    fn of(result: &ToolResult) -> Self {
        match (&result.content, result.is_error) {
            (ToolContent::Text(text), false) => ToolResultOutput::Text(text.clone()),
            (ToolContent::Json(value), false) => ToolResultOutput::Json(value.clone()),
            (ToolContent::Text(text), true) => ToolResultOutput::ErrorText(text.clone()),
            (ToolContent::Json(value), true) => ToolResultOutput::ErrorJson(value.clone()),
        }
    }
}

impl ModelMessage {
    /// The conversation as model messages: consecutive tool results become
    /// one `tool` message, and each result carries its call's input.
    pub fn from_conversation(messages: &[Message]) -> Vec<ModelMessage> {
        Self::continuing(messages, &[])
    }

    /// The model messages of a conversation's later part, whose first tool
    /// results (if it starts with some) answer `calls`.
    pub(super) fn continuing<'a>(messages: &'a [Message], mut calls: &'a [ToolCall]) -> Vec<ModelMessage> {
        let mut out: Vec<ModelMessage> = Vec::with_capacity(messages.len());
        for message in messages {
            match message {
                Message::User { content } => out.push(ModelMessage {
                    role: ModelRole::User,
                    content: vec![ContentPart::Text { text: content.clone() }],
                }),
                Message::Assistant { content, tool_calls } => {
                    calls = tool_calls;
                    out.push(assistant_message(content, tool_calls));
                }
                Message::Tool(result) => {
                    let part = result_part(result, calls);
                    match out.last_mut() {
                        Some(last) if last.role == ModelRole::Tool => last.content.push(part),
                        _ => out.push(ModelMessage {
                            role: ModelRole::Tool,
                            content: vec![part],
                        }),
                    }
                }
            }
        }
        out
    }
}

fn assistant_message(text: &str, tool_calls: &[ToolCall]) -> ModelMessage {
    let mut content = Vec::with_capacity(tool_calls.len() + 1);
    if !text.is_empty() {
        content.push(ContentPart::Text { text: text.to_owned() });
    }
    content.extend(tool_calls.iter().map(call_part));
    ModelMessage {
        role: ModelRole::Assistant,
        content,
    }
}

fn call_part(call: &ToolCall) -> ContentPart {
    ContentPart::ToolCall {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        input: call.args.clone(),
    }
}

/// A result's part; `calls` are the calls of the assistant message it answers.
fn result_part(result: &ToolResult, calls: &[ToolCall]) -> ContentPart {
    let input = calls
        .iter()
        .find(|c| c.id == result.tool_call_id)
        .map_or_else(|| Arc::new(Value::Object(Default::default())), |c| Arc::clone(&c.args));
    ContentPart::ToolResult {
        tool_call_id: result.tool_call_id.clone(),
        tool_name: result.tool_name.clone(),
        output: ToolResultOutput::of(result),
        input,
    }
}

/// The conversation as Mastra's `messages` of `step-finish` and `finish`:
/// all of it, the person's messages, and the rest.
///
/// The three lists share their messages (and with the steps of
/// [`StepOutput`](super::StepOutput)): each message of the conversation is
/// converted once per payload, whatever the number of places it appears in.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationMessages {
    /// Every message, oldest first.
    pub all: Vec<Arc<ModelMessage>>,
    /// The person's messages.
    pub user: Vec<Arc<ModelMessage>>,
    /// The model's messages and tool results.
    pub non_user: Vec<Arc<ModelMessage>>,
}

impl ConversationMessages {
    /// Splits a conversation the way Mastra reports it.
    pub fn from_conversation(messages: &[Message]) -> Self {
        let all = ModelMessage::from_conversation(messages)
            .into_iter()
            .map(Arc::new)
            .collect();
        Self::from_model_messages(all)
    }

    /// Splits converted messages, sharing them between the lists.
    pub(super) fn from_model_messages(all: Vec<Arc<ModelMessage>>) -> Self {
        let (user, non_user) = all.iter().cloned().partition(|m| m.role == ModelRole::User);
        ConversationMessages { all, user, non_user }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(id: &str, text: &str, is_error: bool) -> Message {
        Message::Tool(ToolResult {
            tool_call_id: id.into(),
            tool_name: "t".into(),
            content: ToolContent::Text(text.into()),
            is_error,
        })
    }

    #[test]
    fn consecutive_results_share_one_tool_message_with_their_calls_inputs() {
        let calls = vec![
            ToolCall {
                id: "a".into(),
                name: "t".into(),
                args: json!({"n": 1}).into(),
            },
            ToolCall {
                id: "b".into(),
                name: "t".into(),
                args: json!({"n": 2}).into(),
            },
        ];
        let conversation = vec![
            Message::user("go"),
            Message::assistant("Two calls.", calls),
            result("a", "one", false),
            result("b", "bad", true),
            Message::assistant("Done.", vec![]),
        ];
        let messages = ConversationMessages::from_conversation(&conversation);
        assert_eq!(messages.all.len(), 4);
        assert_eq!(messages.user.len(), 1);
        assert_eq!(messages.non_user.len(), 3);
        let value = serde_json::to_value(&messages.all[1..3]).unwrap();
        assert_eq!(
            value,
            json!([
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Two calls."},
                    {"type": "tool-call", "toolCallId": "a", "toolName": "t", "input": {"n": 1}},
                    {"type": "tool-call", "toolCallId": "b", "toolName": "t", "input": {"n": 2}}
                ]},
                {"role": "tool", "content": [
                    {"type": "tool-result", "toolCallId": "a", "toolName": "t", "output": {"type": "text", "value": "one"}, "input": {"n": 1}},
                    {"type": "tool-result", "toolCallId": "b", "toolName": "t", "output": {"type": "error-text", "value": "bad"}, "input": {"n": 2}}
                ]}
            ])
        );
        let back: Vec<Arc<ModelMessage>> = serde_json::from_value(value).unwrap();
        assert_eq!(back, messages.all[1..3]);
        assert!(
            Arc::ptr_eq(&messages.all[1], &messages.non_user[0]),
            "the lists share their messages"
        );
    }
}

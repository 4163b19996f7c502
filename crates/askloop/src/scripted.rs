//! [`ScriptedModel`]: a model that replays a JSON script, for tests,
//! examples and the offline demo.
//!
//! It picks turn N, where N is the number of assistant messages already in
//! the request, so it keeps no memory and works across processes and resumes.
//!
//! ```json
//! {"turns": [
//!   {"text": "optional text first", "toolCalls": [{"name": "ask_user", "args": {"question": "Which city?"}}]},
//!   {"reasoning": "optional reasoning before it all", "text": "Booked: {{toolResults}}"}
//! ]}
//! ```
//!
//! `reasoning` streams as the model's reasoning before the text (as
//! `reasoning-*` chunks; like a real model's, it is not stored in the
//! conversation).
//!
//! In `text`, `{{toolResults}}` is the content of the tool results after the
//! last assistant message, joined with `"; "`, and `{{input}}` is the first
//! user message. A turn may instead be `{"error": "message"}` to make the
//! model fail, which tests use to exercise failed runs.

use std::path::Path;

use async_trait::async_trait;
use futures::stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{FinishReason, Message, Usage};
use crate::model::{Model, ModelError, ModelEvent, ModelRequest, ModelStream};

/// A script: one entry per model turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Script {
    /// The turns, in order.
    pub turns: Vec<ScriptTurn>,
}

/// One scripted model turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScriptTurn {
    /// Reasoning to stream before the text and the calls, as
    /// [`ModelEvent::ReasoningDelta`]s (taken as it is: no templates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Text to stream (with `{{toolResults}}` and `{{input}}` filled in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Tool calls to make after the text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptToolCall>,
    /// Fail this turn with this message instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScriptToolCall {
    /// The tool's id.
    pub name: String,
    /// The arguments.
    #[serde(default = "empty_object")]
    pub args: Value,
    /// The call's id; by default `call_<turn>_<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// A script that could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The file could not be read.
    #[error("cannot read script {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a script.
    #[error(
        "script {name} is not valid: {source}; expected {{\"turns\": [{{\"text\": \"...\", \"toolCalls\": [{{\"name\": \"ask_user\", \"args\": {{...}}}}]}}]}}"
    )]
    Parse {
        /// The script's name.
        name: String,
        /// Why.
        source: serde_json::Error,
    },
    /// The script has no turns.
    #[error("script {name} has no turns")]
    Empty {
        /// The script's name.
        name: String,
    },
}

/// A model that replays a [`Script`].
#[derive(Debug, Clone)]
pub struct ScriptedModel {
    name: String,
    script: Script,
}

impl ScriptedModel {
    /// A model named `name` playing `script`.
    pub fn new(name: impl Into<String>, script: Script) -> Self {
        ScriptedModel {
            name: name.into(),
            script,
        }
    }

    /// Parses a script from JSON text; `name` is used in error messages.
    pub fn from_json(name: impl Into<String>, json: &str) -> Result<Self, ScriptError> {
        let name = name.into();
        let script: Script = serde_json::from_str(json).map_err(|source| ScriptError::Parse {
            name: name.clone(),
            source,
        })?;
        if script.turns.is_empty() {
            return Err(ScriptError::Empty { name });
        }
        Ok(ScriptedModel::new(name, script))
    }

    /// Reads a script file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ScriptError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(format!("script:{}", path.display()), &text)
    }

    /// The script.
    pub fn script(&self) -> &Script {
        &self.script
    }

    fn turn_events(&self, request: &ModelRequest<'_>) -> Result<Vec<ModelEvent>, ModelError> {
        let index = request.messages.iter().filter(|m| m.is_assistant()).count();
        let turn = self.script.turns.get(index).ok_or_else(|| {
            ModelError::Script(format!(
                "{} has {} turns and was asked for turn {} (the conversation already holds {} assistant messages)",
                self.name,
                self.script.turns.len(),
                index + 1,
                index
            ))
        })?;
        if let Some(message) = &turn.error {
            return Err(ModelError::Script(format!(
                "{}: turn {}: {message}",
                self.name,
                index + 1
            )));
        }

        let mut events = Vec::new();
        let mut output_chars = 0usize;
        if let Some(reasoning) = &turn.reasoning {
            output_chars += reasoning.len();
            events.extend(split_text(reasoning).into_iter().map(ModelEvent::ReasoningDelta));
        }
        if let Some(template) = &turn.text {
            let text = fill_template(template, request.messages);
            output_chars += text.len();
            events.extend(split_text(&text).into_iter().map(ModelEvent::TextDelta));
        }
        for (i, call) in turn.tool_calls.iter().enumerate() {
            let id = call
                .id
                .clone()
                .unwrap_or_else(|| format!("call_{}_{}", index + 1, i + 1));
            let arguments = call.args.to_string();
            output_chars += arguments.len();
            events.push(ModelEvent::ToolCallStart {
                id: id.clone(),
                name: call.name.clone(),
            });
            for piece in split_even(&arguments, 4) {
                events.push(ModelEvent::ToolCallDelta {
                    id: id.clone(),
                    args_delta: piece,
                });
            }
            events.push(ModelEvent::ToolCall {
                id,
                name: call.name.clone(),
                arguments,
            });
        }
        let input_chars: usize = request.messages.iter().map(message_len).sum();
        let input_tokens = (input_chars / 4).max(1) as u64;
        let output_tokens = (output_chars / 4).max(1) as u64;
        events.push(ModelEvent::Finish {
            reason: if turn.tool_calls.is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            },
            usage: Usage {
                input_tokens,
                output_tokens,
                total_tokens: input_tokens + output_tokens,
            },
        });
        Ok(events)
    }
}

#[async_trait]
impl Model for ScriptedModel {
    fn name(&self) -> &str {
        &self.name
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        let events = self.turn_events(&request)?;
        Ok(Box::pin(stream::iter(events.into_iter().map(Ok))))
    }
}

fn message_len(message: &Message) -> usize {
    match message {
        Message::User { content } => content.len(),
        Message::Assistant { content, tool_calls } => {
            content.len() + tool_calls.iter().map(|c| c.args.to_string().len()).sum::<usize>()
        }
        Message::Tool(result) => result.content.to_model_text().len(),
    }
}

fn fill_template(template: &str, messages: &[Message]) -> String {
    let mut text = template.to_owned();
    if text.contains("{{toolResults}}") {
        let last_assistant = messages.iter().rposition(Message::is_assistant);
        let after = last_assistant.map_or(messages, |i| &messages[i + 1..]);
        let results: Vec<String> = after
            .iter()
            .filter_map(|m| match m {
                Message::Tool(result) => Some(result.content.to_model_text()),
                _ => None,
            })
            .collect();
        text = text.replace("{{toolResults}}", &results.join("; "));
    }
    if text.contains("{{input}}") {
        let input = messages
            .iter()
            .find_map(|m| match m {
                Message::User { content } => Some(content.as_str()),
                _ => None,
            })
            .unwrap_or("");
        text = text.replace("{{input}}", input);
    }
    text
}

/// Splits text into word-sized deltas, the way models stream.
fn split_text(text: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut current = String::new();
    for ch in text.chars() {
        current.push(ch);
        if ch == ' ' && current.len() > 1 {
            pieces.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}

/// Splits text into `n` nearly even pieces on character boundaries.
fn split_even(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(n).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ToolCall, ToolContent, ToolResult};
    use futures::StreamExt;
    use serde_json::json;

    fn request<'a>(messages: &'a [Message]) -> ModelRequest<'a> {
        ModelRequest {
            run_id: "r",
            system: None,
            messages,
            tools: &[],
        }
    }

    async fn collect(model: &ScriptedModel, messages: &[Message]) -> Result<Vec<ModelEvent>, ModelError> {
        let stream = model.stream(request(messages)).await?;
        stream.collect::<Vec<_>>().await.into_iter().collect()
    }

    fn model() -> ScriptedModel {
        ScriptedModel::from_json(
            "test",
            r#"{"turns": [
                {"text": "Let me ask.", "toolCalls": [{"name": "ask_user", "args": {"question": "Which city?"}}]},
                {"text": "Booked for {{input}}: {{toolResults}}"}
            ]}"#,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn picks_turn_by_assistant_message_count_and_fills_template() {
        let model = model();
        let first = collect(&model, &[Message::user("a trip")]).await.unwrap();
        let deltas: String = first
            .iter()
            .filter_map(|e| match e {
                ModelEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, "Let me ask.");
        assert!(first.iter().filter(|e| matches!(e, ModelEvent::TextDelta(_))).count() > 1);
        assert!(first.contains(&ModelEvent::ToolCall {
            id: "call_1_1".into(),
            name: "ask_user".into(),
            arguments: json!({"question": "Which city?"}).to_string()
        }));

        let history = vec![
            Message::user("a trip"),
            Message::assistant(
                "",
                vec![ToolCall {
                    id: "c".into(),
                    name: "ask_user".into(),
                    args: json!({}).into(),
                }],
            ),
            Message::Tool(ToolResult {
                tool_call_id: "c".into(),
                tool_name: "ask_user".into(),
                content: ToolContent::Text("User answered: Paris".into()),
                is_error: false,
            }),
        ];
        let second = collect(&model, &history).await.unwrap();
        let text: String = second
            .iter()
            .filter_map(|e| match e {
                ModelEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "Booked for a trip: User answered: Paris");
        assert!(matches!(
            second.last(),
            Some(ModelEvent::Finish {
                reason: FinishReason::Stop,
                ..
            })
        ));
    }

    #[tokio::test]
    async fn reasoning_streams_in_pieces_before_the_text() {
        let model = ScriptedModel::from_json(
            "test",
            r#"{"turns": [{"reasoning": "The user wants {{input}} spelled out.", "text": "Done."}]}"#,
        )
        .unwrap();
        let events = collect(&model, &[Message::user("x")]).await.unwrap();
        let reasoning: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                ModelEvent::ReasoningDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert!(reasoning.len() > 1, "{events:?}");
        assert_eq!(reasoning.concat(), "The user wants {{input}} spelled out.");
        let first_text = events
            .iter()
            .position(|e| matches!(e, ModelEvent::TextDelta(_)))
            .unwrap();
        assert!(
            events[..first_text]
                .iter()
                .all(|e| matches!(e, ModelEvent::ReasoningDelta(_))),
            "{events:?}"
        );
    }

    #[tokio::test]
    async fn past_the_last_turn_fails_naming_script_and_turn() {
        let model = model();
        let history = vec![
            Message::user("x"),
            Message::assistant("a", vec![]),
            Message::user("y"),
            Message::assistant("b", vec![]),
        ];
        let err = collect(&model, &history).await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains("test") && text.contains("turn 3"), "{text}");
    }

    #[test]
    fn bad_script_error_says_what_is_expected() {
        let err = ScriptedModel::from_json("s.json", r#"{"turn": []}"#).unwrap_err();
        assert!(err.to_string().contains("expected"), "{err}");
        assert!(matches!(
            ScriptedModel::from_json("s", r#"{"turns": []}"#),
            Err(ScriptError::Empty { .. })
        ));
    }
}

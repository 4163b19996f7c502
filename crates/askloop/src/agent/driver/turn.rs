//! One model turn, streamed: its chunks are emitted as they arrive, and the
//! turn (text, calls with their arguments checked for JSON, finish reason,
//! usage) is returned whole.
//!
//! Text and reasoning stream in blocks (`text-start` ... `text-end`,
//! `reasoning-start` ... `reasoning-end`): a block is opened by its first
//! delta and closed by anything else the model sends, so at most one is
//! open and each contiguous run of deltas is one block, closed before the
//! next text, reasoning or tool input starts. The reasoning is only
//! streamed: it is not part of the returned turn, so it is neither stored
//! nor sent back to the model (see [`ModelEvent::ReasoningDelta`]).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde_json::Value;

use super::{Driver, new_id};
use crate::agent::machine::{CheckedCall, ModelTurn};
use crate::chunk::*;
use crate::message::{FinishReason, ToolCall, Usage};
use crate::model::{ModelError, ModelEvent, ModelRequest, ToolCallIds};

impl Driver {
    /// Streams one model turn, emitting its chunks as they arrive.
    pub(super) async fn model_turn(&mut self, started_at: DateTime<Utc>) -> Result<ModelTurn, ModelError> {
        let settings = &self.state.record.settings;
        let request = ModelRequest {
            run_id: &self.state.record.run_id,
            system: settings.instructions.as_deref().or(self.agent.instructions.as_deref()),
            messages: &self.state.messages,
            tools: self.tool_specs.as_deref().unwrap_or(&self.tools.specs),
        };
        let mut events = self.agent.model.stream(request).await?;

        let mut turn = ModelTurn {
            started_at,
            text: String::new(),
            calls: Vec::new(),
            reason: FinishReason::Stop,
            usage: Usage::default(),
        };
        let mut block: Option<OpenBlock> = None;
        // Calls whose input is streaming: (the model's id, the call's id in
        // the run, the tool). Ids are made unique per turn here, whatever the
        // model sent, so every chunk, pending call and result of a step names
        // exactly one call.
        let mut ids = ToolCallIds::new();
        let mut open: Vec<(String, String, String)> = Vec::new();
        let mut finished = false;

        while let Some(event) = events.next().await {
            match event? {
                ModelEvent::TextDelta(text) => {
                    if !text.is_empty() {
                        let id = self.open_block(&mut block, BlockKind::Text);
                        turn.text.push_str(&text);
                        self.text.push_str(&text);
                        self.emit(ChunkKind::TextDelta(TextDelta { id, text }));
                    }
                }
                ModelEvent::ReasoningDelta(text) => {
                    if !text.is_empty() {
                        let id = self.open_block(&mut block, BlockKind::Reasoning);
                        self.emit(ChunkKind::ReasoningDelta(ReasoningDelta { id, text }));
                    }
                }
                ModelEvent::ToolCallStart { id: model_id, name } => {
                    self.close_block(&mut block);
                    let id = ids.claim(&model_id);
                    self.emit(ChunkKind::ToolCallInputStreamingStart(ToolCallRef {
                        tool_call_id: id.clone(),
                        tool_name: name.clone(),
                    }));
                    open.push((model_id, id, name));
                }
                ModelEvent::ToolCallDelta {
                    id: model_id,
                    args_delta,
                } => {
                    self.close_block(&mut block);
                    // The latest call started under this id is the one streaming.
                    let (id, tool_name) = match open.iter().rev().find(|(m, _, _)| *m == model_id) {
                        Some((_, id, name)) => (id.clone(), name.clone()),
                        None => (model_id, String::new()),
                    };
                    self.emit(ChunkKind::ToolCallDelta(ToolCallDelta {
                        tool_call_id: id,
                        tool_name,
                        args_text_delta: args_delta,
                    }));
                }
                ModelEvent::ToolCall {
                    id: model_id,
                    name,
                    arguments,
                } => {
                    self.close_block(&mut block);
                    let call = self.whole_call(&mut open, &mut ids, model_id, name, arguments);
                    turn.calls.push(call);
                }
                ModelEvent::Finish { reason, usage } => {
                    turn.reason = reason;
                    turn.usage = usage;
                    finished = true;
                }
            }
        }
        self.close_block(&mut block);
        if !finished && turn.text.is_empty() && turn.calls.is_empty() {
            return Err(ModelError::Protocol {
                provider: self.agent.model.name().to_owned(),
                message: "the stream ended without any output".to_owned(),
            });
        }
        // A turn with tool calls is a tool turn, whatever the provider said.
        if !turn.calls.is_empty() {
            turn.reason = FinishReason::ToolCalls;
        }
        Ok(turn)
    }

    /// The id of the open block of `kind`: the one open, or a new one
    /// started after the block of the other kind is closed.
    fn open_block(&self, block: &mut Option<OpenBlock>, kind: BlockKind) -> String {
        if let Some(open) = block
            && open.kind == kind
        {
            return open.id.clone();
        }
        self.close_block(block);
        let id = new_id();
        self.emit(match kind {
            BlockKind::Text => ChunkKind::TextStart(TextId { id: id.clone() }),
            BlockKind::Reasoning => ChunkKind::ReasoningStart(ReasoningId { id: id.clone() }),
        });
        *block = Some(OpenBlock { kind, id: id.clone() });
        id
    }

    /// Ends the open text or reasoning block, if one is open.
    fn close_block(&self, block: &mut Option<OpenBlock>) {
        if let Some(OpenBlock { kind, id }) = block.take() {
            self.emit(match kind {
                BlockKind::Text => ChunkKind::TextEnd(TextId { id }),
                BlockKind::Reasoning => ChunkKind::ReasoningEnd(ReasoningId { id }),
            });
        }
    }

    /// A call the model finished: emitted the way a streamed one looks,
    /// with its arguments checked for JSON and its input against its
    /// tool's schema.
    fn whole_call(
        &self,
        open: &mut Vec<(String, String, String)>,
        ids: &mut ToolCallIds,
        model_id: String,
        name: String,
        arguments: String,
    ) -> CheckedCall {
        // Calls started under one id finish in the order they started.
        let started = open.iter().position(|(m, _, _)| *m == model_id);
        let id = match started {
            Some(position) => open.remove(position).1,
            None => ids.claim(&model_id),
        };
        if started.is_none() {
            // The provider sent the call whole (Ollama does): show it the
            // way a streamed one looks.
            self.emit(ChunkKind::ToolCallInputStreamingStart(ToolCallRef {
                tool_call_id: id.clone(),
                tool_name: name.clone(),
            }));
            self.emit(ChunkKind::ToolCallDelta(ToolCallDelta {
                tool_call_id: id.clone(),
                tool_name: name.clone(),
                args_text_delta: arguments.clone(),
            }));
        }
        self.emit(ChunkKind::ToolCallInputStreamingEnd(ToolCallId {
            tool_call_id: id.clone(),
        }));
        let (args, malformed) = parse_arguments(&arguments);
        let call = ToolCall {
            id,
            name,
            args: Arc::new(args),
        };
        self.emit(ChunkKind::ToolCall(ToolCallPayload::from(&call)));
        // Input that is not JSON is refused for that; a schema has
        // nothing to say about it.
        let invalid = if malformed.is_none() {
            self.invalid_input(&call)
        } else {
            None
        };
        // The agent's approval rules judge a call whose input is sound.
        let ruling = if malformed.is_none() && invalid.is_none() {
            self.agent.ruling(&call, &self.state.record, &self.grants)
        } else {
            None
        };
        CheckedCall {
            call,
            malformed,
            invalid,
            ruling,
        }
    }
}

/// The text or reasoning block whose deltas are streaming.
struct OpenBlock {
    kind: BlockKind,
    id: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Text,
    Reasoning,
}

/// Parses a tool call's arguments. Empty means `{}` (providers send that for
/// tools without parameters); malformed JSON is kept as text and reported.
fn parse_arguments(arguments: &str) -> (Value, Option<String>) {
    if arguments.trim().is_empty() {
        return (Value::Object(Default::default()), None);
    }
    match serde_json::from_str(arguments) {
        Ok(value) => (value, None),
        Err(err) => (Value::String(arguments.to_owned()), Some(err.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_arguments_mean_an_empty_object() {
        assert_eq!(parse_arguments(""), (serde_json::json!({}), None));
        assert_eq!(parse_arguments("  "), (serde_json::json!({}), None));
    }

    #[test]
    fn malformed_arguments_are_kept_as_text_and_reported() {
        let (value, problem) = parse_arguments("{\"a\": ");
        assert_eq!(value, Value::String("{\"a\": ".into()));
        assert!(problem.is_some());
    }
}

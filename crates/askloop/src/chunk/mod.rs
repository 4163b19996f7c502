//! Stream chunks: what an agent run emits, in Mastra's wire shape.
//!
//! Every chunk is `{"type", "runId", "from": "AGENT", "payload"}`. The type
//! names and payload fields match Mastra's, so front ends written for Mastra
//! read askloop streams unchanged.
//!
//! ```
//! use askloop::{Chunk, ChunkKind, chunk::TextDelta};
//! let chunk = Chunk::new("run-1", ChunkKind::TextDelta(TextDelta { id: "t1".into(), text: "Hi".into() }));
//! let json = serde_json::to_value(&chunk).unwrap();
//! assert_eq!(json["type"], "text-delta");
//! assert_eq!(json["runId"], "run-1");
//! assert_eq!(json["from"], "AGENT");
//! assert_eq!(json["payload"]["text"], "Hi");
//! ```

use std::sync::Arc;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use crate::message::ToolCall;

mod conversation;
pub(crate) mod finish;

pub use conversation::{ContentPart, ConversationMessages, ModelMessage, ModelRole, ToolResultOutput};
pub use finish::{
    ModelMetadata, StepFinish, StepMetadata, StepOutput, StepRecord, StepResponse, StepResult, StepUsage,
};

/// One chunk of an agent stream.
///
/// Serialised with its keys in Mastra's order, `type, runId, from, payload`
/// (written by hand: a flattened adjacently tagged enum would put `runId`
/// first); read in any order.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Chunk {
    /// The run that emitted it.
    pub run_id: String,
    /// Who emitted it; always `AGENT`.
    pub from: ChunkSource,
    /// The chunk's type and payload.
    #[serde(flatten)]
    pub kind: ChunkKind,
}

impl Chunk {
    /// A chunk of the given kind for a run.
    pub fn new(run_id: impl Into<String>, kind: ChunkKind) -> Self {
        Chunk {
            run_id: run_id.into(),
            from: ChunkSource::Agent,
            kind,
        }
    }

    /// The wire name of the chunk's type, e.g. `tool-call-suspended`.
    pub fn type_name(&self) -> &'static str {
        self.kind.type_name()
    }
}

impl Serialize for Chunk {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut chunk = serializer.serialize_struct("Chunk", 4)?;
        chunk.serialize_field("type", self.type_name())?;
        chunk.serialize_field("runId", &self.run_id)?;
        chunk.serialize_field("from", &self.from)?;
        chunk.serialize_field("payload", &PayloadOf(&self.kind))?;
        chunk.end()
    }
}

/// A chunk kind's payload alone, for [`Chunk`]'s serialisation.
struct PayloadOf<'a>(&'a ChunkKind);

impl Serialize for PayloadOf<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            ChunkKind::Start(p) => p.serialize(serializer),
            ChunkKind::StepStart(p) => p.serialize(serializer),
            ChunkKind::TextStart(p) => p.serialize(serializer),
            ChunkKind::TextDelta(p) => p.serialize(serializer),
            // Mastra repeats the type inside this one payload.
            ChunkKind::TextEnd(p) => TextEndPayload {
                kind: "text-end",
                id: &p.id,
            }
            .serialize(serializer),
            ChunkKind::ReasoningStart(p) | ChunkKind::ReasoningEnd(p) => p.serialize(serializer),
            ChunkKind::ReasoningDelta(p) => p.serialize(serializer),
            ChunkKind::ToolCallInputStreamingStart(p) => p.serialize(serializer),
            ChunkKind::ToolCallDelta(p) => p.serialize(serializer),
            ChunkKind::ToolCallInputStreamingEnd(p) => p.serialize(serializer),
            ChunkKind::ToolCall(p) => p.serialize(serializer),
            ChunkKind::ToolResult(p) => p.serialize(serializer),
            ChunkKind::ToolError(p) => p.serialize(serializer),
            ChunkKind::ToolCallSuspended(p) => p.serialize(serializer),
            ChunkKind::ToolCallApproval(p) => p.serialize(serializer),
            ChunkKind::ToolOutputDenied(p) => p.serialize(serializer),
            ChunkKind::StepFinish(p) | ChunkKind::Finish(p) => p.serialize(serializer),
            ChunkKind::Error(p) => p.serialize(serializer),
            ChunkKind::Abort(p) => p.serialize(serializer),
        }
    }
}

/// The payload of `text-end` as Mastra writes it.
#[derive(Serialize)]
struct TextEndPayload<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: &'a str,
}

/// The emitter of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChunkSource {
    /// An agent.
    #[serde(rename = "AGENT")]
    Agent,
}

/// The type of a chunk, with its payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ChunkKind {
    /// The run started (fresh streams only).
    Start(Start),
    /// A model step started.
    StepStart(StepStart),
    /// A text block started.
    TextStart(TextId),
    /// A piece of text.
    TextDelta(TextDelta),
    /// A text block ended.
    TextEnd(TextId),
    /// A block of the model's reasoning started. Each contiguous run of
    /// reasoning is one block, ended before any text or tool input.
    ReasoningStart(ReasoningId),
    /// A piece of the model's reasoning (streamed only: it is not stored
    /// in the run's conversation, see [`ModelEvent::ReasoningDelta`]).
    ///
    /// [`ModelEvent::ReasoningDelta`]: crate::ModelEvent::ReasoningDelta
    ReasoningDelta(ReasoningDelta),
    /// A block of the model's reasoning ended.
    ReasoningEnd(ReasoningId),
    /// The model began streaming a tool call's input.
    ToolCallInputStreamingStart(ToolCallRef),
    /// A piece of a tool call's input.
    ToolCallDelta(ToolCallDelta),
    /// The model finished streaming a tool call's input.
    ToolCallInputStreamingEnd(ToolCallId),
    /// A complete tool call.
    ToolCall(ToolCallPayload),
    /// A tool call's result.
    ToolResult(ToolResultPayload),
    /// A tool call failed before producing a result (bad input, unknown
    /// tool, the tool returned an error). The model is told the reason.
    ToolError(ToolErrorPayload),
    /// A tool suspended, waiting for a person's answer.
    ToolCallSuspended(ToolCallSuspended),
    /// A tool call waits for approval before it runs.
    ToolCallApproval(ToolCallApproval),
    /// A tool call was declined and never ran.
    ToolOutputDenied(ToolOutputDenied),
    /// A model step finished. Boxed: it carries the conversation, and
    /// every other chunk is small.
    StepFinish(Box<StepFinish>),
    /// The run finished (completed).
    Finish(Box<StepFinish>),
    /// The run failed.
    Error(ErrorPayload),
    /// The run was cancelled.
    Abort(AbortPayload),
}

impl ChunkKind {
    /// The wire name of this type.
    pub fn type_name(&self) -> &'static str {
        match self {
            ChunkKind::Start(_) => "start",
            ChunkKind::StepStart(_) => "step-start",
            ChunkKind::TextStart(_) => "text-start",
            ChunkKind::TextDelta(_) => "text-delta",
            ChunkKind::TextEnd(_) => "text-end",
            ChunkKind::ReasoningStart(_) => "reasoning-start",
            ChunkKind::ReasoningDelta(_) => "reasoning-delta",
            ChunkKind::ReasoningEnd(_) => "reasoning-end",
            ChunkKind::ToolCallInputStreamingStart(_) => "tool-call-input-streaming-start",
            ChunkKind::ToolCallDelta(_) => "tool-call-delta",
            ChunkKind::ToolCallInputStreamingEnd(_) => "tool-call-input-streaming-end",
            ChunkKind::ToolCall(_) => "tool-call",
            ChunkKind::ToolResult(_) => "tool-result",
            ChunkKind::ToolError(_) => "tool-error",
            ChunkKind::ToolCallSuspended(_) => "tool-call-suspended",
            ChunkKind::ToolCallApproval(_) => "tool-call-approval",
            ChunkKind::ToolOutputDenied(_) => "tool-output-denied",
            ChunkKind::StepFinish(_) => "step-finish",
            ChunkKind::Finish(_) => "finish",
            ChunkKind::Error(_) => "error",
            ChunkKind::Abort(_) => "abort",
        }
    }
}

/// Payload of `start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Start {
    /// The agent's id.
    pub id: String,
    /// The id of the first step's message.
    pub message_id: String,
}

/// Payload of `step-start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepStart {
    /// The step's message id.
    pub message_id: String,
    /// When the step started, in milliseconds since the Unix epoch.
    pub started_at: i64,
    /// Provider warnings (always empty for now; kept for Mastra's shape).
    #[serde(default)]
    pub warnings: Vec<Value>,
    /// The request sent to the model, as Mastra reports it. Mastra's is
    /// empty too; askloop keeps the key so Mastra clients find it.
    #[serde(default)]
    pub request: serde_json::Map<String, Value>,
}

/// Payload of `text-start` and `text-end`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextId {
    /// The text block's id.
    pub id: String,
}

/// Payload of `text-delta`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextDelta {
    /// The text block's id.
    pub id: String,
    /// The new text.
    pub text: String,
}

/// Payload of `reasoning-start` and `reasoning-end`, as Mastra's (which
/// may also carry `providerMetadata`, and `signature` on a start; askloop
/// sends neither).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningId {
    /// The reasoning block's id.
    pub id: String,
}

/// Payload of `reasoning-delta`, as Mastra's: the piece is `text`, as in
/// `text-delta` (the AI SDK's UI message chunk calls it `delta`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningDelta {
    /// The reasoning block's id.
    pub id: String,
    /// The new piece of reasoning.
    pub text: String,
}

/// Payload naming a tool call and its tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRef {
    /// The call's id.
    pub tool_call_id: String,
    /// The tool's id.
    pub tool_name: String,
}

/// Payload naming a tool call only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallId {
    /// The call's id.
    pub tool_call_id: String,
}

/// Payload of `tool-call-delta`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallDelta {
    /// The call's id.
    pub tool_call_id: String,
    /// The tool's id.
    pub tool_name: String,
    /// The next piece of the input's JSON text.
    pub args_text_delta: String,
}

/// Payload of `tool-call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallPayload {
    /// The call's id.
    pub tool_call_id: String,
    /// The tool's id.
    pub tool_name: String,
    /// The call's input.
    pub args: Arc<Value>,
}

impl From<&ToolCall> for ToolCallPayload {
    fn from(call: &ToolCall) -> Self {
        ToolCallPayload {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            args: call.args.clone(),
        }
    }
}

/// Payload of `tool-result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultPayload {
    /// The call's id.
    pub tool_call_id: String,
    /// The tool's id.
    pub tool_name: String,
    /// The call's input.
    pub args: Arc<Value>,
    /// What the tool returned, as it returned it ([`ToolOutput::value`]):
    /// `"staging-approved"` for a tool that returns a string, Mastra's
    /// `{"content", "isError"}` for `ask_user`.
    ///
    /// [`ToolOutput::value`]: crate::ToolOutput::value
    pub result: Value,
}

/// Payload of `tool-error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolErrorPayload {
    /// The call's id.
    pub tool_call_id: String,
    /// The tool's id.
    pub tool_name: String,
    /// The call's input.
    pub args: Arc<Value>,
    /// What went wrong (also what the model is told).
    pub error: String,
}

/// Payload of `tool-call-suspended`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallSuspended {
    /// The call's id: pass it to resume this call.
    pub tool_call_id: String,
    /// The tool's id.
    pub tool_name: String,
    /// The call's input.
    pub args: Arc<Value>,
    /// What the tool suspended with (for `ask_user`: the question).
    pub suspend_payload: Arc<Value>,
    /// JSON Schema of the accepted resume data, as JSON text (Mastra's shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_schema: Option<String>,
}

/// Payload of `tool-call-approval`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallApproval {
    /// The call's id.
    pub tool_call_id: String,
    /// The tool's id.
    pub tool_name: String,
    /// The call's input.
    pub args: Arc<Value>,
    /// JSON Schema of an approval decision, as JSON text (Mastra's shape).
    pub resume_schema: String,
}

/// Payload of `tool-output-denied`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolOutputDenied {
    /// The call's id.
    pub tool_call_id: String,
    /// The tool's id.
    pub tool_name: String,
    /// The call's input.
    pub args: Arc<Value>,
    /// The decision.
    pub approval: ApprovalDecision,
}

/// An approval decision, as in `tool-output-denied`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalDecision {
    /// The call's id.
    pub id: String,
    /// Whether it was approved.
    pub approved: bool,
    /// Why, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Payload of `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorPayload {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The error inside an `error` chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorDetail {
    /// A message for people.
    pub message: String,
}

/// Payload of `abort`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AbortPayload {
    /// Why the run was stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn suspended_chunk_has_mastra_envelope_and_camel_case_payload() {
        let chunk = Chunk::new(
            "r1",
            ChunkKind::ToolCallSuspended(ToolCallSuspended {
                tool_call_id: "c1".into(),
                tool_name: "ask_user".into(),
                args: json!({"question": "Q?"}).into(),
                suspend_payload: json!({"question": "Q?"}).into(),
                resume_schema: Some("{\"type\":\"string\"}".into()),
            }),
        );
        let value = serde_json::to_value(&chunk).unwrap();
        assert_eq!(
            value,
            json!({
                "runId": "r1", "from": "AGENT", "type": "tool-call-suspended",
                "payload": {"toolCallId": "c1", "toolName": "ask_user", "args": {"question": "Q?"},
                            "suspendPayload": {"question": "Q?"}, "resumeSchema": "{\"type\":\"string\"}"}
            })
        );
        let back: Chunk = serde_json::from_value(value).unwrap();
        assert_eq!(back, chunk);
    }

    #[test]
    fn chunk_keys_come_in_mastras_order_type_run_id_from_payload() {
        let chunk = Chunk::new(
            "r1",
            ChunkKind::TextDelta(TextDelta {
                id: "t1".into(),
                text: "Hi".into(),
            }),
        );
        assert_eq!(
            serde_json::to_string(&chunk).unwrap(),
            r#"{"type":"text-delta","runId":"r1","from":"AGENT","payload":{"id":"t1","text":"Hi"}}"#
        );
        let call = Chunk::new(
            "r1",
            ChunkKind::ToolCall(ToolCallPayload {
                tool_call_id: "c1".into(),
                tool_name: "t".into(),
                args: serde_json::from_str(r#"{"zeta":1,"alpha":{"y":2,"b":3}}"#).unwrap(),
            }),
        );
        assert_eq!(
            serde_json::to_string(&call).unwrap(),
            r#"{"type":"tool-call","runId":"r1","from":"AGENT","payload":{"toolCallId":"c1","toolName":"t","args":{"zeta":1,"alpha":{"y":2,"b":3}}}}"#,
            "args keep the model's key order"
        );
        let back: Chunk = serde_json::from_str(&serde_json::to_string(&call).unwrap()).unwrap();
        assert_eq!(back, call);
    }

    #[test]
    fn type_name_matches_serialized_type_for_every_kind() {
        let kinds = vec![
            ChunkKind::Start(Start {
                id: "a".into(),
                message_id: "m".into(),
            }),
            ChunkKind::StepStart(StepStart {
                message_id: "m".into(),
                started_at: 1,
                warnings: vec![],
                request: Default::default(),
            }),
            ChunkKind::TextStart(TextId { id: "t".into() }),
            ChunkKind::TextEnd(TextId { id: "t".into() }),
            ChunkKind::ReasoningStart(ReasoningId { id: "r".into() }),
            ChunkKind::ReasoningDelta(ReasoningDelta {
                id: "r".into(),
                text: "Hm".into(),
            }),
            ChunkKind::ReasoningEnd(ReasoningId { id: "r".into() }),
            ChunkKind::ToolCallInputStreamingEnd(ToolCallId {
                tool_call_id: "c".into(),
            }),
            ChunkKind::Error(ErrorPayload {
                error: ErrorDetail { message: "x".into() },
            }),
            ChunkKind::Abort(AbortPayload { reason: None }),
            ChunkKind::Finish(Box::new(StepFinish::report(
                finish::StepReport {
                    message_id: "m",
                    model_name: "scripted",
                    started_at: None,
                    reason: crate::FinishReason::Stop,
                    is_continued: false,
                    usage: crate::Usage::default(),
                    conversation: &[],
                },
                &mut finish::ConvertedConversation::default(),
            ))),
        ];
        for kind in kinds {
            let chunk = Chunk::new("r", kind);
            let value = serde_json::to_value(&chunk).unwrap();
            assert_eq!(value["type"], chunk.type_name());
        }
    }

    #[test]
    fn reasoning_chunks_have_mastras_payloads_and_read_back_with_its_provider_metadata_ignored() {
        let kinds = [
            (
                ChunkKind::ReasoningStart(ReasoningId { id: "r1".into() }),
                r#"{"type":"reasoning-start","runId":"run-1","from":"AGENT","payload":{"id":"r1"}}"#,
            ),
            (
                ChunkKind::ReasoningDelta(ReasoningDelta {
                    id: "r1".into(),
                    text: "Divisible by 8".into(),
                }),
                r#"{"type":"reasoning-delta","runId":"run-1","from":"AGENT","payload":{"id":"r1","text":"Divisible by 8"}}"#,
            ),
            (
                ChunkKind::ReasoningEnd(ReasoningId { id: "r1".into() }),
                r#"{"type":"reasoning-end","runId":"run-1","from":"AGENT","payload":{"id":"r1"}}"#,
            ),
        ];
        for (kind, wire) in kinds {
            let chunk = Chunk::new("run-1", kind);
            assert_eq!(serde_json::to_string(&chunk).unwrap(), wire);
            let back: Chunk = serde_json::from_str(wire).unwrap();
            assert_eq!(back, chunk);
        }
        // What Mastra sends when the provider gave metadata.
        let mastra = r#"{"type":"reasoning-delta","runId":"run-1","from":"AGENT","payload":{"id":"r1","providerMetadata":{"anthropic":{"signature":"s"}},"text":"Hm"}}"#;
        let chunk: Chunk = serde_json::from_str(mastra).unwrap();
        assert_eq!(
            chunk.kind,
            ChunkKind::ReasoningDelta(ReasoningDelta {
                id: "r1".into(),
                text: "Hm".into()
            })
        );
    }

    #[test]
    fn mastra_recorded_suspended_chunk_parses() {
        let raw = r#"{"type":"tool-call-suspended","runId":"614c","from":"AGENT","payload":{"toolCallId":"call_2","toolName":"ask_user","suspendPayload":{"question":"Which environment should I deploy to?","options":[{"label":"staging"},{"label":"production"}],"selectionMode":"single_select"},"args":{"question":"Which environment should I deploy to?"},"resumeSchema":"{}"}}"#;
        let chunk: Chunk = serde_json::from_str(raw).unwrap();
        assert_eq!(chunk.type_name(), "tool-call-suspended");
        let ChunkKind::ToolCallSuspended(payload) = chunk.kind else {
            panic!("wrong kind")
        };
        assert_eq!(payload.suspend_payload["selectionMode"], "single_select");
    }
}

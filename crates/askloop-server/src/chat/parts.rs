//! A run's chunks as the Vercel AI SDK's UI message chunks, in the shapes
//! and order `@mastra/ai-sdk`'s chat route sends them (recorded in
//! `tests/fixtures/mastra-chat/chat-*`): `{"type": …, …}` with no
//! `runId`/`from`/`payload` envelope.
//!
//! A suspended call is Mastra's data part `data-tool-call-suspended`; a
//! call waiting for approval is the AI SDK's `tool-approval-request` (its
//! `approvalId` is `<runId>::<toolCallId>`, as Mastra makes it) followed by
//! Mastra's `data-tool-call-approval`. The run's id reaches the client only
//! in these data parts, as with Mastra.
//!
//! The model's reasoning is `reasoning-start`, `reasoning-delta` (its piece
//! in `delta`) and `reasoning-end`, as `@mastra/ai-sdk` sends them with
//! `sendReasoning: true` (without it, Mastra drops the deltas and keeps the
//! empty start and end). The AI SDK makes them a `reasoning` part of the
//! message; a client that sends that part back is not read (see `history`).

use std::sync::Arc;

use askloop::chunk::StepFinish;
use askloop::{Chunk, ChunkKind, FinishReason};
use serde::Serialize;
use serde_json::Value;

/// One UI message chunk.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case", rename_all_fields = "camelCase")]
pub(crate) enum UiChunk {
    /// The assistant message begins (or, with the id of the message the
    /// client continues, goes on).
    Start {
        message_id: String,
    },
    StartStep,
    TextStart {
        id: String,
    },
    TextDelta {
        id: String,
        delta: String,
    },
    TextEnd {
        id: String,
    },
    ReasoningStart {
        id: String,
    },
    ReasoningDelta {
        id: String,
        delta: String,
    },
    ReasoningEnd {
        id: String,
    },
    ToolInputStart {
        tool_call_id: String,
        tool_name: String,
        dynamic: bool,
    },
    ToolInputDelta {
        tool_call_id: String,
        input_text_delta: String,
    },
    ToolInputAvailable {
        tool_call_id: String,
        tool_name: String,
        input: Arc<Value>,
    },
    ToolApprovalRequest {
        approval_id: String,
        tool_call_id: String,
    },
    ToolOutputAvailable {
        tool_call_id: String,
        output: Value,
    },
    ToolOutputError {
        tool_call_id: String,
        error_text: String,
    },
    ToolOutputDenied {
        tool_call_id: String,
    },
    #[serde(rename = "data-tool-call-suspended")]
    DataToolCallSuspended {
        data: SuspendedData,
        id: String,
    },
    #[serde(rename = "data-tool-call-approval")]
    DataToolCallApproval {
        data: ApprovalData,
        id: String,
    },
    FinishStep,
    Finish {
        finish_reason: &'static str,
    },
    Error {
        error_text: String,
    },
    Abort {
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// The data of `data-tool-call-suspended`: what the client needs to show
/// the question and answer it (`runId`, `toolCallId`, `resumeData`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SuspendedData {
    state: &'static str,
    run_id: String,
    tool_call_id: String,
    tool_name: String,
    suspend_payload: Arc<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resume_schema: Option<String>,
}

/// The data of `data-tool-call-approval`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApprovalData {
    state: &'static str,
    run_id: String,
    tool_call_id: String,
    tool_name: String,
    args: Arc<Value>,
    resume_schema: String,
}

/// The approval id of a call waiting for approval, as Mastra makes it:
/// `<runId>::<toolCallId>`.
pub(crate) fn approval_id(run_id: &str, tool_call_id: &str) -> String {
    format!("{run_id}::{tool_call_id}")
}

/// The UI message chunks one chunk of a run stands for: none (the end of a
/// tool call's input, which `tool-input-available` says), one, or two (a
/// call waiting for approval).
pub(crate) fn of(chunk: &Chunk) -> Vec<UiChunk> {
    let one = |part| vec![part];
    match &chunk.kind {
        ChunkKind::Start(start) => one(UiChunk::Start {
            message_id: start.message_id.clone(),
        }),
        ChunkKind::StepStart(_) => one(UiChunk::StartStep),
        ChunkKind::TextStart(text) => one(UiChunk::TextStart { id: text.id.clone() }),
        ChunkKind::TextDelta(delta) => one(UiChunk::TextDelta {
            id: delta.id.clone(),
            delta: delta.text.clone(),
        }),
        ChunkKind::TextEnd(text) => one(UiChunk::TextEnd { id: text.id.clone() }),
        ChunkKind::ReasoningStart(block) => one(UiChunk::ReasoningStart { id: block.id.clone() }),
        ChunkKind::ReasoningDelta(delta) => one(UiChunk::ReasoningDelta {
            id: delta.id.clone(),
            delta: delta.text.clone(),
        }),
        ChunkKind::ReasoningEnd(block) => one(UiChunk::ReasoningEnd { id: block.id.clone() }),
        ChunkKind::ToolCallInputStreamingStart(call) => one(UiChunk::ToolInputStart {
            tool_call_id: call.tool_call_id.clone(),
            tool_name: call.tool_name.clone(),
            dynamic: false,
        }),
        ChunkKind::ToolCallDelta(delta) => one(UiChunk::ToolInputDelta {
            tool_call_id: delta.tool_call_id.clone(),
            input_text_delta: delta.args_text_delta.clone(),
        }),
        ChunkKind::ToolCallInputStreamingEnd(_) => Vec::new(),
        ChunkKind::ToolCall(call) => one(UiChunk::ToolInputAvailable {
            tool_call_id: call.tool_call_id.clone(),
            tool_name: call.tool_name.clone(),
            input: Arc::clone(&call.args),
        }),
        ChunkKind::ToolResult(result) => one(UiChunk::ToolOutputAvailable {
            tool_call_id: result.tool_call_id.clone(),
            output: result.result.clone(),
        }),
        ChunkKind::ToolError(error) => one(UiChunk::ToolOutputError {
            tool_call_id: error.tool_call_id.clone(),
            error_text: error.error.clone(),
        }),
        ChunkKind::ToolCallSuspended(suspended) => one(UiChunk::DataToolCallSuspended {
            id: suspended.tool_call_id.clone(),
            data: SuspendedData {
                state: "data-tool-call-suspended",
                run_id: chunk.run_id.clone(),
                tool_call_id: suspended.tool_call_id.clone(),
                tool_name: suspended.tool_name.clone(),
                suspend_payload: Arc::clone(&suspended.suspend_payload),
                resume_schema: suspended.resume_schema.clone(),
            },
        }),
        ChunkKind::ToolCallApproval(approval) => vec![
            UiChunk::ToolApprovalRequest {
                approval_id: approval_id(&chunk.run_id, &approval.tool_call_id),
                tool_call_id: approval.tool_call_id.clone(),
            },
            UiChunk::DataToolCallApproval {
                id: approval.tool_call_id.clone(),
                data: ApprovalData {
                    state: "data-tool-call-approval",
                    run_id: chunk.run_id.clone(),
                    tool_call_id: approval.tool_call_id.clone(),
                    tool_name: approval.tool_name.clone(),
                    args: Arc::clone(&approval.args),
                    resume_schema: approval.resume_schema.clone(),
                },
            },
        ],
        ChunkKind::ToolOutputDenied(denied) => one(UiChunk::ToolOutputDenied {
            tool_call_id: denied.tool_call_id.clone(),
        }),
        ChunkKind::StepFinish(_) => one(UiChunk::FinishStep),
        ChunkKind::Finish(finish) => one(UiChunk::Finish {
            finish_reason: finish_reason(finish),
        }),
        ChunkKind::Error(error) => one(UiChunk::Error {
            error_text: error.error.message.clone(),
        }),
        ChunkKind::Abort(abort) => one(UiChunk::Abort {
            reason: abort.reason.clone(),
        }),
        // A chunk kind this server does not know yet says nothing to a
        // chat client; it is left out rather than sent in a shape the AI
        // SDK would reject.
        _ => Vec::new(),
    }
}

/// The AI SDK's name for why a run finished (its `finish` chunk takes
/// `stop`, `length`, `content-filter`, `tool-calls`, `error`,
/// `interrupted` and `other`).
fn finish_reason(finish: &StepFinish) -> &'static str {
    match finish.step_result.reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ContentFilter => "content-filter",
        FinishReason::ToolCalls => "tool-calls",
        FinishReason::Error => "error",
        FinishReason::Cancelled => "interrupted",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use askloop::chunk::{ReasoningDelta, ReasoningId, ToolCallApproval, ToolCallSuspended};
    use serde_json::json;

    use super::*;

    fn json_of(chunk: ChunkKind) -> Vec<String> {
        of(&Chunk::new("run-1", chunk))
            .iter()
            .map(|part| serde_json::to_string(part).unwrap())
            .collect()
    }

    #[test]
    fn a_suspension_is_mastras_data_part_with_the_run_id_keys_in_mastras_order() {
        let parts = json_of(ChunkKind::ToolCallSuspended(ToolCallSuspended {
            tool_call_id: "c1".into(),
            tool_name: "ask_user".into(),
            args: json!({"question": "Q?"}).into(),
            suspend_payload: json!({"question": "Q?"}).into(),
            resume_schema: Some("{}".into()),
        }));
        assert_eq!(
            parts,
            [
                r#"{"type":"data-tool-call-suspended","data":{"state":"data-tool-call-suspended","runId":"run-1","toolCallId":"c1","toolName":"ask_user","suspendPayload":{"question":"Q?"},"resumeSchema":"{}"},"id":"c1"}"#
            ]
        );
    }

    #[test]
    fn an_approval_is_the_ai_sdk_request_with_run_and_call_in_its_id_then_mastras_data_part() {
        let parts = json_of(ChunkKind::ToolCallApproval(ToolCallApproval {
            tool_call_id: "c1".into(),
            tool_name: "deploy".into(),
            args: json!({"env": "prod"}).into(),
            resume_schema: "{}".into(),
        }));
        assert_eq!(
            parts,
            [
                r#"{"type":"tool-approval-request","approvalId":"run-1::c1","toolCallId":"c1"}"#,
                r#"{"type":"data-tool-call-approval","data":{"state":"data-tool-call-approval","runId":"run-1","toolCallId":"c1","toolName":"deploy","args":{"env":"prod"},"resumeSchema":"{}"},"id":"c1"}"#
            ]
        );
    }

    #[test]
    fn reasoning_is_the_ai_sdks_reasoning_parts_with_the_piece_in_delta() {
        let parts: Vec<String> = [
            ChunkKind::ReasoningStart(ReasoningId { id: "r1".into() }),
            ChunkKind::ReasoningDelta(ReasoningDelta {
                id: "r1".into(),
                text: "Divisible by 8".into(),
            }),
            ChunkKind::ReasoningEnd(ReasoningId { id: "r1".into() }),
        ]
        .into_iter()
        .flat_map(json_of)
        .collect();
        assert_eq!(
            parts,
            [
                r#"{"type":"reasoning-start","id":"r1"}"#,
                r#"{"type":"reasoning-delta","id":"r1","delta":"Divisible by 8"}"#,
                r#"{"type":"reasoning-end","id":"r1"}"#,
            ]
        );
    }

    #[test]
    fn bare_parts_carry_only_their_type() {
        assert_eq!(
            serde_json::to_string(&UiChunk::StartStep).unwrap(),
            r#"{"type":"start-step"}"#
        );
        assert_eq!(
            serde_json::to_string(&UiChunk::FinishStep).unwrap(),
            r#"{"type":"finish-step"}"#
        );
        assert_eq!(
            serde_json::to_string(&UiChunk::Abort { reason: None }).unwrap(),
            r#"{"type":"abort"}"#
        );
    }
}

//! Carrying out the machine's plan for a step's calls: refusing, asking for
//! approval, or running the tool (concurrently; a panic in a tool becomes
//! a tool error, not a lost run).

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use chrono::Utc;
use futures::{FutureExt, future::join_all};
use tracing::Instrument;

use super::super::approval_schema;
use super::Driver;
use super::turn::ModelCall;
use crate::agent::expiry;
use crate::agent::machine::{self, CallFacts, CallOutcome, CallPlan, ToolRules};
use crate::chunk::*;
use crate::message::{ToolCall, ToolContent, ToolResult};
use crate::store::{PendingKind, PendingToolCall};
use crate::tool::{ToolContext, ToolOutcome, ToolOutput, describe_errors};

impl Driver {
    /// What the machine decides for each of a turn's calls, with its
    /// tool's rules. `started`: the calls a recovered run finds marked
    /// started (see `machine::marks_start`).
    pub(super) fn plan_calls(
        &self,
        calls: &[ModelCall],
        recovering: bool,
        started: &[String],
    ) -> Vec<(CallPlan, ToolRules)> {
        let known: Vec<&str> = self.agent.specs.iter().map(|s| s.name.as_str()).collect();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        calls
            .iter()
            .map(|mc| {
                let nth_of_tool = seen.entry(mc.call.name.as_str()).or_default();
                *nth_of_tool += 1;
                let tool = self
                    .agent
                    .tools
                    .get(&mc.call.name)
                    .map(|t| (t.rules(), describe_errors(&t.validator, &mc.call.args)));
                let rules = tool.as_ref().map(|(rules, _)| *rules).unwrap_or(ToolRules {
                    needs_approval: false,
                    idempotent: true,
                    max_per_step: None,
                });
                let facts = CallFacts {
                    malformed: mc.malformed.as_deref(),
                    tool,
                    known_tools: &known,
                    recovering,
                    started: started.contains(&mc.call.id),
                    nth_of_tool: *nth_of_tool,
                };
                (machine::plan_call(&mc.call, facts), rules)
            })
            .collect()
    }

    /// Carries out a step's plans, running the tools concurrently.
    pub(super) async fn run_calls(&self, calls: &[ToolCall], plans: &[(CallPlan, ToolRules)]) -> Vec<CallOutcome> {
        let run_id = &self.state.record.run_id;
        join_all(calls.iter().zip(plans).map(|(call, (plan, _))| async move {
            match plan {
                CallPlan::Refuse(message) => error_result(call, message.clone()),
                CallPlan::AskApproval => CallOutcome::Pending(self.with_time_limit(PendingToolCall {
                    tool_call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    args: call.args.clone(),
                    kind: PendingKind::Approval,
                    suspend_payload: None,
                    resume_schema: Some(approval_schema()),
                    expires_at: None,
                    started_at: None,
                })),
                CallPlan::Execute => {
                    let span = tracing::info_span!("tool_call", tool_call_id = %call.id, tool = %call.name);
                    self.execute(call, ToolContext::in_run(run_id, &call.id))
                        .instrument(span)
                        .await
                }
            }
        }))
        .await
    }

    /// A new waiting call with the agent's time limit for its tool, from now.
    fn with_time_limit(&self, pending: PendingToolCall) -> PendingToolCall {
        let expires_at = expiry::deadline(self.agent.time_limit_for(&pending.tool_name), Utc::now());
        expiry::with_deadline(pending, expires_at)
    }

    /// Executes one tool; a panic in the tool becomes a tool error, not a
    /// lost run.
    pub(super) async fn execute(&self, call: &ToolCall, ctx: ToolContext) -> CallOutcome {
        let Some(registered) = self.agent.tools.get(&call.name) else {
            return error_result(call, format!("Unknown tool {}.", call.name));
        };
        let tool = Arc::clone(&registered.tool);
        let run = AssertUnwindSafe(tool.execute(call.args.clone(), ctx))
            .catch_unwind()
            .await;
        match run {
            Ok(Ok(ToolOutcome::Output(output))) => done_result(call, output),
            Ok(Ok(ToolOutcome::Suspended(payload))) => CallOutcome::Pending(self.with_time_limit(PendingToolCall {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                args: call.args.clone(),
                kind: PendingKind::Suspended,
                resume_schema: tool.resume_schema_for(&payload),
                suspend_payload: Some(payload),
                expires_at: None,
                started_at: None,
            })),
            Ok(Err(err)) => error_result(call, err.to_string()),
            Err(_) => error_result(call, format!("Tool {} crashed while running.", call.name)),
        }
    }
}

/// A finished call: the chunk shows the tool's own value, the model is told
/// its model content.
pub(super) fn done_result(call: &ToolCall, output: ToolOutput) -> CallOutcome {
    let result = ToolResult {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: output.model_content(),
        is_error: output.is_error,
    };
    let chunk = ChunkKind::ToolResult(ToolResultPayload {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        args: call.args.clone(),
        result: output.value,
    });
    CallOutcome::Done(result, chunk)
}

pub(super) fn error_result(call: &ToolCall, message: String) -> CallOutcome {
    let chunk = ChunkKind::ToolError(ToolErrorPayload {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        args: call.args.clone(),
        error: message.clone(),
    });
    let result = ToolResult {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: ToolContent::Text(message),
        is_error: true,
    };
    CallOutcome::Done(result, chunk)
}

/// The default reason a model is given for a declined call.
const NOT_APPROVED: &str = "Tool call was not approved by the user";

/// A call that was declined before it ran: the model gets the reason (or
/// the default), the stream `tool-output-denied`.
pub(super) fn denied(call: &ToolCall, reason: Option<String>) -> CallOutcome {
    let result = ToolResult {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: ToolContent::Text(reason.clone().unwrap_or_else(|| NOT_APPROVED.to_owned())),
        is_error: false,
    };
    let chunk = ChunkKind::ToolOutputDenied(ToolOutputDenied {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        args: call.args.clone(),
        approval: ApprovalDecision {
            id: call.id.clone(),
            approved: false,
            reason,
        },
    });
    CallOutcome::Done(result, chunk)
}

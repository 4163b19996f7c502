//! Carrying out the machine's calls: running tools (concurrently; a panic
//! in a tool becomes a tool error, not a lost run), and checking a call's
//! input against its tool's schema for the machine.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::{FutureExt, future::join_all};
use tracing::Instrument;

use super::Driver;
use crate::agent::machine::{CallOutcome, ToolRun, done_result, error_result};
use crate::cause::ErrorChain;
use crate::chunk::ChunkKind;
use crate::message::ToolCall;
use crate::store::{PendingKind, PendingToolCall};
use crate::tool::{ToolContext, ToolOutcome};

impl Driver {
    /// Why `call`'s input does not fit its tool's schema, if it does not
    /// (nothing for a tool the agent does not have: the machine refuses
    /// that call anyway).
    pub(super) fn invalid_input(&self, call: &ToolCall) -> Option<String> {
        crate::agent::inner::input_problem(&self.tools, &call.name, &call.args)
    }

    /// Carries out a step's calls, running the tools concurrently; the
    /// outcomes come back in the calls' order.
    pub(super) async fn run_tools(&self, runs: Vec<ToolRun>) -> Vec<CallOutcome> {
        let run_id = &self.state.record.run_id;
        join_all(runs.into_iter().map(|run| async move {
            match run {
                ToolRun::Done(outcome) => outcome,
                ToolRun::Wait(pending) => CallOutcome::Pending(pending),
                ToolRun::Execute { call, resumed } => {
                    let ctx = ToolContext::in_run(run_id, &call.id);
                    let ctx = match resumed {
                        Some(resumed) => ctx.resumed(resumed.payload, Some(resumed.data)),
                        None => ctx,
                    };
                    let span = crate::telemetry::tool_span(run_id, &call.id, &call.name, &call.args);
                    let outcome = self.execute_while_held(&call, ctx).instrument(span.clone()).await;
                    let ended = match &outcome {
                        CallOutcome::Done(_, ChunkKind::ToolError(_)) => "error",
                        CallOutcome::Done(..) => "result",
                        CallOutcome::Pending(_) => "suspended",
                    };
                    span.record("askloop.tool.outcome", ended);
                    outcome
                }
            }
        }))
        .await
    }

    /// Executes one tool while the run is this driver's: once it is not
    /// (it was cancelled, or another process took it over), the call is
    /// given up (its future dropped: an MCP call is cancelled at its
    /// server) and ends as an error no one will store, since the driver's
    /// next write finds the run changed and ends the drive as the run now
    /// is.
    async fn execute_while_held(&self, call: &ToolCall, ctx: ToolContext) -> CallOutcome {
        let execute = std::pin::pin!(self.execute(call, ctx));
        let lost = std::pin::pin!(self.released.lost());
        match futures::future::select(execute, lost).await {
            futures::future::Either::Left((outcome, _)) => outcome,
            futures::future::Either::Right(((), _)) => {
                tracing::info!(tool_call_id = %call.id, tool = %call.name, "gave up the call: the run is no longer driven here");
                error_result(
                    call,
                    format!(
                        "The call of {} was given up: the run is no longer driven here (it was cancelled, or another \
                         process took it over).",
                        call.name
                    ),
                )
            }
        }
    }

    /// Executes one tool; a panic in the tool becomes a tool error, not a
    /// lost run.
    async fn execute(&self, call: &ToolCall, ctx: ToolContext) -> CallOutcome {
        let Some(registered) = self.tools.get(&call.name) else {
            return error_result(call, format!("Unknown tool {}.", call.name));
        };
        let tool = Arc::clone(&registered.tool);
        let run = AssertUnwindSafe(tool.execute(call.args.as_ref().clone(), ctx))
            .catch_unwind()
            .await;
        match run {
            Ok(Ok(ToolOutcome::Output(output))) => done_result(call, output),
            Ok(Ok(ToolOutcome::Suspended(payload))) => CallOutcome::Pending(PendingToolCall {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                args: call.args.clone(),
                kind: PendingKind::Suspended,
                resume_schema: tool.resume_schema_for(&payload).map(Arc::new),
                suspend_payload: Some(Arc::new(payload)),
                expires_at: None,
                started_at: None,
            }),
            Ok(Err(err)) => {
                tracing::warn!(tool_call_id = %call.id, tool = %call.name, error = %ErrorChain(&err), "the tool failed");
                error_result(call, err.model_message(&call.name))
            }
            Err(_) => error_result(call, format!("Tool {} crashed while running.", call.name)),
        }
    }
}

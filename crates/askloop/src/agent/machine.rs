//! The run's decisions, with no I/O: whether a call runs, errors or waits;
//! what a result or an answer does to the step's pending calls and what is
//! written for it; which decision fits which pending call; what a lost
//! write means; when a lost claim is tried again; where a recovered run
//! goes on. [`RunMachine`] (`machine/run.rs`) puts them together as a
//! state that takes events and returns effects; the driver (`driver.rs`)
//! only carries the effects out (model calls, tools, store writes,
//! chunks). `machine_properties.rs` drives the machine with random runs,
//! crashes and answers.
//!
//! A run's status and pending calls are this module's to read and set
//! (and the stores' to keep): the crate's `clippy.toml` keeps every other
//! module to [`RunRecord::call_state`], [`RunRecord::waiting_calls`] and
//! [`RunRecord::status`].
#![allow(
    clippy::disallowed_fields,
    reason = "the machines own a run's status and pending calls"
)]

use std::sync::{Arc, LazyLock};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::options::{CallDecision, MAX_REASON_BYTES};
use crate::chunk::{ApprovalDecision, ChunkKind, ToolErrorPayload, ToolOutputDenied, ToolResultPayload};
use crate::error::RunError;
use crate::message::{Message, ToolCall, ToolContent, ToolResult};
use crate::rules::Verdict;
use crate::store::{
    EventRun, Lease, OutboxMessage, PendingKind, PendingToolCall, Resolution, ResolutionKind, RunRecord, RunStatus,
    Subscription, messages_for,
};
use crate::tool::{InvalidResume, ToolOutput};

mod calls;
mod entry;
pub(crate) mod expiry;
mod run;

pub(crate) use calls::decided_already;
pub use calls::{CallState, Closed, Waiting, WaitsOn};

pub(crate) use entry::{
    ApplyFailure, DriveFrom, Entered, Entry, EntryEffect, EntryEvent, Request, ToolBook, UNANSWERED,
};
pub(crate) use run::{
    CheckedCall, Decided, Decisions, Effect, End, Event, ModelTurn, RunMachine, RunWrite, StepSummary, ToolRun,
};

/// The JSON Schema of an approval decision, as Mastra publishes it: one
/// value, shared by every call that waits for approval.
pub(crate) fn approval_schema() -> Arc<Value> {
    static SCHEMA: LazyLock<Arc<Value>> = LazyLock::new(|| {
        Arc::new(json!({
            "type": "object",
            "properties": {
                "approved": {"type": "boolean", "description": "true to run the tool call, false to decline it"},
                "reason": {"type": "string", "description": "Why, shown to the model when the call is declined"}
            },
            "required": ["approved"],
            "additionalProperties": false
        }))
    });
    Arc::clone(&SCHEMA)
}

/// Makes `record` what the store holds once `write` landed at `version`
/// with `lease`: the one place a record follows its stored row. The
/// write's resolutions and failure are taken into the record; its pending
/// calls and step results are left to the caller (a driver's machine holds
/// them while it drives, a claim puts them in the record).
/// A new run as it is first stored: `running`, held by `lease`, waiting on
/// nothing, at version 0, with nothing resolved (the status of a run is set
/// by the machines alone, this its first).
pub(crate) fn started(run: RunRecord, lease: Lease) -> RunRecord {
    RunRecord {
        status: RunStatus::Running,
        version: 0,
        pending: Vec::new(),
        step_results: Vec::new(),
        steps: 0,
        usage: Default::default(),
        lease: Some(lease),
        failure: None,
        resolutions: Vec::new(),
        ..run
    }
}

pub(crate) fn record_landed(record: &mut RunRecord, write: &mut RunWrite, version: i64, lease: Option<Lease>) {
    record.version = version;
    record.status = write.status;
    record.steps = write.steps;
    record.usage = write.usage;
    record.message_count += write.append.len() as i64;
    record.resolutions.append(&mut write.resolutions);
    record.failure = write.failure.take();
    record.lease = lease;
}

/// The notifications a write of `record` made at `now` announces, for the agent's
/// subscriptions: each call of `pending` that was not among the calls that
/// `waited` before is raised, and each decision applied resolves its call
/// as it waited. Nothing (and no work) for an agent without subscriptions.
pub(crate) fn notifications(
    subscriptions: &[Subscription],
    record: &RunRecord,
    waited: &[PendingToolCall],
    pending: &[PendingToolCall],
    resolutions: &[Resolution],
    now: DateTime<Utc>,
) -> Vec<OutboxMessage> {
    if subscriptions.is_empty() {
        return Vec::new();
    }
    let raised: Vec<&PendingToolCall> = pending
        .iter()
        .filter(|p| !waited.iter().any(|w| w.tool_call_id == p.tool_call_id))
        .collect();
    let resolved: Vec<(&Resolution, Option<&PendingToolCall>)> = resolutions
        .iter()
        .map(|r| {
            let call = r
                .tool_call_id
                .as_deref()
                .and_then(|id| waited.iter().find(|w| w.tool_call_id == id));
            (r, call)
        })
        .collect();
    let run = EventRun {
        run_id: &record.run_id,
        agent_id: &record.agent_id,
    };
    messages_for(subscriptions, run, &raised, &resolved, now)
}

/// What follows a model turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterModel {
    /// No tool calls: the run is complete.
    Complete,
    /// Run the tool calls.
    RunTools,
}

pub(crate) fn after_model(tool_calls: &[ToolCall]) -> AfterModel {
    if tool_calls.is_empty() {
        AfterModel::Complete
    } else {
        AfterModel::RunTools
    }
}

/// What follows a tool step (or an answer to one of its calls).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AfterTools {
    /// Some calls wait on a person: store them and end the stream suspended.
    Wait,
    /// Every call has a result: append them in call order and call the model.
    Continue(Vec<ToolResult>),
}

/// Decides after tools: wait while anything is pending; otherwise the results,
/// ordered as the model called them.
pub(crate) fn after_tools(calls: &[ToolCall], pending: &[PendingToolCall], results: &[ToolResult]) -> AfterTools {
    if !pending.is_empty() {
        return AfterTools::Wait;
    }
    let mut ordered: Vec<ToolResult> = Vec::with_capacity(results.len());
    for call in calls {
        if let Some(result) = results.iter().find(|r| r.tool_call_id == call.id) {
            ordered.push(result.clone());
        }
    }
    // Results whose call is not in the message (should not happen) are kept
    // rather than lost.
    for result in results {
        if !ordered.iter().any(|r| r.tool_call_id == result.tool_call_id) {
            ordered.push(result.clone());
        }
    }
    AfterTools::Continue(ordered)
}

/// Whether another model call is allowed in this stream.
pub(crate) fn may_call_model(steps_this_stream: u32, max_steps: u32) -> bool {
    steps_this_stream < max_steps
}

/// What the machine needs to know of a registered tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ToolRules {
    /// Its calls wait for a person's approval before they run.
    pub(crate) needs_approval: bool,
    /// The tool's own policy asks for approval (no rule can lift that).
    pub(crate) own_approval: bool,
    /// It may run again after an interruption (see [`Tool::idempotent`]).
    pub(crate) idempotent: bool,
    /// How many of its calls one step accepts (see
    /// [`Tool::max_calls_per_step`]); `None`: no limit.
    pub(crate) max_per_step: Option<usize>,
    /// How long one of its calls may wait for a person (see `expiry.rs`);
    /// `None`: no limit.
    pub(crate) time_limit: Option<std::time::Duration>,
}

/// A call as the machine judges it: the call, and what is known of it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CallFacts<'a> {
    /// Why its arguments are not JSON, if they are not.
    pub(crate) malformed: Option<&'a str>,
    /// Its tool's rules and why its input does not fit the tool's schema
    /// (`None` when it fits); `None` when the agent has no such tool.
    pub(crate) tool: Option<(ToolRules, Option<&'a str>)>,
    /// The tools the agent has, for an unknown tool's error.
    pub(crate) known_tools: &'a [&'a str],
    /// The call was interrupted with the process that ran it.
    pub(crate) recovering: bool,
    /// It was approved (or answered) and its tool had started when its
    /// process died: the claim marked it (see [`marks_start`]).
    pub(crate) started: bool,
    /// Which call of its tool this is in the step, counting from 1.
    pub(crate) nth_of_tool: usize,
    /// What the agent's approval rules decided about it, if anything.
    pub(crate) ruling: Option<&'a Ruling>,
}

/// What an approval rule decided about a call, the rule's name, and when
/// (the driver asks the rules, which are the agent's code, and reads the
/// clock; the machine records what they decided).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ruling {
    pub(crate) rule: String,
    pub(crate) verdict: crate::rules::Verdict,
    pub(crate) at: DateTime<Utc>,
    /// The run already records it (a recovered run's call, ruled on before
    /// its process stopped): it is not recorded a second time.
    pub(crate) recorded: bool,
    /// The approval that sticks that allows the call (`rule` is its id):
    /// a person's standing decision, which may lift even a tool's own
    /// policy.
    pub(crate) grant: Option<crate::Grant>,
}

/// Whether a call runs, errors or waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallPlan {
    /// The model is told this, as the call's error result.
    Refuse(String),
    /// The call waits for a person's approval.
    AskApproval,
    /// The tool runs.
    Execute,
    /// A rule refused the call: it never runs, and the model is told why.
    DeniedByRule { rule: String, reason: String },
    /// The call would have waited for approval; a rule let it run.
    AllowedByRule { rule: String },
}

/// Decides whether a call runs, errors or waits.
pub(crate) fn plan_call(call: &ToolCall, facts: CallFacts<'_>) -> CallPlan {
    if let Some(problem) = facts.malformed {
        return CallPlan::Refuse(format!(
            "The arguments for tool {} are not valid JSON ({problem}). Call the tool again with a JSON object that matches its input schema.",
            call.name
        ));
    }
    let Some((rules, input)) = facts.tool else {
        let known = if facts.known_tools.is_empty() {
            "none".to_owned()
        } else {
            facts.known_tools.join(", ")
        };
        return CallPlan::Refuse(format!("Unknown tool {}. Available tools: {known}.", call.name));
    };
    if let Some(limit) = rules.max_per_step.filter(|limit| facts.nth_of_tool > *limit) {
        return CallPlan::Refuse(format!(
            "Not run: at most {limit} calls of {} are accepted in one step. Make this call again after the \
             others are answered.",
            call.name
        ));
    }
    if let Some(problems) = input {
        return CallPlan::Refuse(format!(
            "Invalid input for tool {}: {problems}. Call it again with input that matches its schema.",
            call.name
        ));
    }
    // A call a person already approved (its claim marked it started) is
    // not judged again.
    let mut needs_approval = rules.needs_approval;
    let mut allowed_by = None;
    if !facts.started
        && let Some(Ruling {
            rule, verdict, grant, ..
        }) = facts.ruling
    {
        match verdict {
            Verdict::Deny(reason) => {
                return CallPlan::DeniedByRule {
                    rule: rule.clone(),
                    reason: reason.clone(),
                };
            }
            Verdict::Ask => needs_approval = true,
            // A rule may lift what the agent's configuration asks, never the
            // tool's own policy; a person's grant may lift both.
            Verdict::Allow if needs_approval && (!rules.own_approval || grant.is_some()) => {
                needs_approval = false;
                allowed_by = Some(rule.clone());
            }
            Verdict::Allow => {}
        }
    }
    if needs_approval && !facts.started {
        return CallPlan::AskApproval;
    }
    if (facts.recovering || facts.started) && !rules.idempotent {
        return CallPlan::Refuse(format!(
            "Tool {} was interrupted while it ran (the process running it stopped); it may or may not have \
             taken effect, and it was not run again. Check before calling it again.",
            call.name
        ));
    }
    match allowed_by {
        Some(rule) => CallPlan::AllowedByRule { rule },
        None => CallPlan::Execute,
    }
}

/// Whether a turn must be written before its tools run: a call whose tool
/// must not run twice is, so that a process dying while it runs leaves the
/// call stored without a result (recovery then tells the model) instead of
/// a model call made again that may run it twice.
pub(crate) fn store_turn_first(plans: &[(CallPlan, ToolRules)]) -> bool {
    plans
        .iter()
        .any(|(plan, rules)| matches!(plan, CallPlan::Execute | CallPlan::AllowedByRule { .. }) && !rules.idempotent)
}

/// Whether the claim that applies `action` marks its call started (see
/// [`PendingToolCall::started_at`]) and stores the decision: an approval
/// always, an answer when its tool must not run twice (`rules`, `None` for
/// a tool the agent does not have). The tool runs after the claim; a
/// process dying before the result is written then leaves a call that
/// recovery treats by the tool's rule (run again if idempotent, else the
/// model is told), never one that waits to be approved, and run, a second
/// time. The mark goes with the claim's own write: it costs no write of
/// its own. An answer to an idempotent tool is not marked: the answer is
/// not stored with the mark, so such a question is asked again.
pub(crate) fn marks_start(action: &FittedDecision, rules: Option<ToolRules>) -> bool {
    match action {
        FittedDecision::Approve { .. } => rules.is_some(),
        FittedDecision::Answer { .. } => rules.is_some_and(|rules| !rules.idempotent),
        _ => false,
    }
}

/// The pending calls with call `tool_call_id` marked started at `at`.
pub(crate) fn mark_started(
    pending: &[PendingToolCall],
    tool_call_id: &str,
    at: chrono::DateTime<chrono::Utc>,
) -> Vec<PendingToolCall> {
    pending
        .iter()
        .map(|p| {
            let mut p = p.clone();
            if p.tool_call_id == tool_call_id {
                p.started_at = Some(at);
            }
            p
        })
        .collect()
}

/// How one tool call ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallOutcome {
    /// A result, with the chunk that shows it.
    Done(ToolResult, ChunkKind),
    /// The call waits on a person.
    Pending(PendingToolCall),
}

/// A finished call: the chunk shows the tool's own value, the model is told
/// its model content.
pub(crate) fn done_result(call: &ToolCall, output: ToolOutput) -> CallOutcome {
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

/// A call that ended in an error the model is told: `tool-error` on the
/// stream.
pub(crate) fn error_result(call: &ToolCall, message: String) -> CallOutcome {
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
pub(crate) fn denied(call: &ToolCall, reason: Option<String>) -> CallOutcome {
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

/// The calls of one step and how far they got: the state an answer, a
/// decline, an approval or a tool's return moves on.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Step {
    /// The calls, as the model made them.
    pub(crate) calls: Vec<ToolCall>,
    /// The calls waiting on people, in the order they were raised.
    pub(crate) pending: Vec<PendingToolCall>,
    /// The results so far, in the order they came.
    pub(crate) results: Vec<ToolResult>,
}

/// What a step's state asks the driver to write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StepWrite {
    /// The run's status after the write.
    pub(crate) status: RunStatus,
    /// Messages to append: the turn (when not stored yet), then, once
    /// every call has a result, the results in call order.
    pub(crate) append: Vec<Message>,
    /// The calls still pending.
    pub(crate) pending: Vec<PendingToolCall>,
    /// The step's results while calls are pending (empty once appended).
    pub(crate) step_results: Vec<ToolResult>,
}

impl StepWrite {
    /// Whether the run waits on people after this write.
    pub(crate) fn waiting(&self) -> bool {
        self.status == RunStatus::Suspended
    }
}

impl Step {
    /// Records how one call ended: a result is kept (and the call is no
    /// longer pending); a call that waits takes the place it had among the
    /// pending calls, or the end. Returns the chunk that shows a result.
    pub(crate) fn resolve(&mut self, outcome: CallOutcome) -> Option<ChunkKind> {
        match outcome {
            CallOutcome::Done(result, chunk) => {
                self.pending.retain(|p| p.tool_call_id != result.tool_call_id);
                if !self.results.iter().any(|r| r.tool_call_id == result.tool_call_id) {
                    self.results.push(result);
                }
                Some(chunk)
            }
            CallOutcome::Pending(p) => {
                match self.pending.iter_mut().find(|q| q.tool_call_id == p.tool_call_id) {
                    Some(place) => *place = p,
                    None => self.pending.push(p),
                }
                None
            }
        }
    }

    /// The calls of the step with neither a result nor a pending entry:
    /// those whose run was interrupted.
    pub(crate) fn unresolved(&self) -> Vec<ToolCall> {
        self.calls
            .iter()
            .filter(|c| {
                !self.results.iter().any(|r| r.tool_call_id == c.id)
                    && !self.pending.iter().any(|p| p.tool_call_id == c.id)
            })
            .cloned()
            .collect()
    }

    /// The write that stores this step's state: suspended while calls are
    /// pending, else running with the results appended in call order.
    /// `turn` is the model turn when it is not stored yet.
    pub(crate) fn write(self, turn: Option<Message>) -> StepWrite {
        match after_tools(&self.calls, &self.pending, &self.results) {
            AfterTools::Wait => StepWrite {
                status: RunStatus::Suspended,
                append: turn.into_iter().collect(),
                pending: self.pending,
                step_results: self.results,
            },
            AfterTools::Continue(ordered) => {
                let mut append = Vec::with_capacity(ordered.len() + 1);
                append.extend(turn);
                append.extend(ordered.into_iter().map(Message::Tool));
                StepWrite {
                    status: RunStatus::Running,
                    append,
                    pending: Vec::new(),
                    step_results: Vec::new(),
                }
            }
        }
    }
}

/// Where a run taken over (its driver stopped) or retried goes on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Recovery {
    /// Calls wait on people: store it suspended again and show them. A
    /// decision that was being applied when the driver stopped (never
    /// stored) is asked for again; stored answers never are.
    Resuspend(Step),
    /// The last stored turn has calls without a result: they were
    /// interrupted. Each is run again if its tool is idempotent, else the
    /// model is told (see [`plan_call`] with `recovering`). `started` are
    /// the calls among them that had been approved or answered and marked
    /// started (see [`marks_start`]): they are not asked again. Calls
    /// still waiting on people stay in the step's pending calls.
    Interrupted { step: Step, started: Vec<String> },
    /// Make the model call the driver was making again.
    CallModel,
}

/// Decides where a stored run goes on.
#[cfg(test)]
pub(crate) fn recovery(record: &RunRecord, messages: &[Message]) -> Recovery {
    let ends_on_calls =
        matches!(messages.last(), Some(Message::Assistant { tool_calls, .. }) if !tool_calls.is_empty());
    recovery_at(
        &record.pending,
        &record.step_results,
        last_tool_calls(messages),
        ends_on_calls,
    )
}

/// Decides where a stored run goes on, from what is stored of its step:
/// its pending calls and results, the calls of its last turn with tool
/// calls (`last_calls`), and whether the conversation ends on that turn
/// (`ends_on_calls`: its results are not stored yet).
pub(crate) fn recovery_at(
    pending: &[PendingToolCall],
    step_results: &[ToolResult],
    last_calls: Option<Vec<ToolCall>>,
    ends_on_calls: bool,
) -> Recovery {
    let (started, waiting): (Vec<_>, Vec<_>) = pending.iter().cloned().partition(|p| p.started_at.is_some());
    let step = |pending| Step {
        calls: last_calls.clone().unwrap_or_default(),
        pending,
        results: step_results.to_vec(),
    };
    if !started.is_empty() {
        return Recovery::Interrupted {
            step: step(waiting),
            started: started.into_iter().map(|p| p.tool_call_id).collect(),
        };
    }
    if !waiting.is_empty() {
        return Recovery::Resuspend(step(waiting));
    }
    if ends_on_calls {
        return Recovery::Interrupted {
            step: step(Vec::new()),
            started: Vec::new(),
        };
    }
    Recovery::CallModel
}

/// The tool calls of the last assistant message.
pub(crate) fn last_tool_calls(messages: &[Message]) -> Option<Vec<ToolCall>> {
    messages.iter().rev().find_map(|m| match m {
        Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => Some(tool_calls.clone()),
        _ => None,
    })
}

/// What a lost compare-and-set on the run means for this driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LostWrite {
    /// The run was cancelled meanwhile: end with `abort`.
    Cancelled,
    /// Another process took the run over (this one's lease ran out) or
    /// wrote it: that one goes on from what is stored; this one stops,
    /// writing nothing of its step.
    TakenOver,
}

/// Decides what a lost write means, from the run's status as read after it.
pub(crate) fn lost_write(now: Option<RunStatus>) -> LostWrite {
    match now {
        Some(RunStatus::Cancelled) => LostWrite::Cancelled,
        _ => LostWrite::TakenOver,
    }
}

/// Whether another process may hold the run to answer a *different* call of
/// the same step: several calls are pending and ours is one of them. Then a
/// lost claim is worth trying again once that (short) write lands. With a
/// single pending call, whoever won answered ours: that is a plain conflict.
pub(crate) fn sibling_answer_in_flight(run: &RunRecord, tool_call_id: Option<&str>) -> bool {
    run.pending.len() > 1 && tool_call_id.is_some_and(|id| run.pending.iter().any(|p| p.tool_call_id == id))
}

/// Whether a decision for call `ours` that lost its claim to another writer
/// is tried again, from the run as read after the loss: yes while `ours` is
/// still pending, or another answer of the same step holds the run.
pub(crate) fn retry_lost_claim(now: &RunRecord, ours: &str) -> bool {
    match now.status {
        RunStatus::Suspended => now.pending.iter().any(|p| p.tool_call_id == ours),
        RunStatus::Running => sibling_answer_in_flight(now, Some(ours)),
        _ => false,
    }
}

/// A decision the machines apply to a pending call: one someone made
/// (the [`CallDecision`] every route, channel and library method hands the
/// agent, the one decision type from the routes to the machine), or the
/// sweep's expiry of a call whose time limit passed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// Someone's decision, with the reason their options gave beside it:
    /// told to the model for an answer that declines an approval
    /// (`{"approved": false}`) without a reason of its own.
    Made {
        decision: CallDecision,
        reason: Option<String>,
    },
    /// The call's time limit passed unanswered (see `expiry.rs`).
    Expire,
}

impl Decision {
    /// `decision` with the reason given beside it (a resume's options): a
    /// decline without a reason of its own takes it; an approval takes
    /// none, and one given is refused.
    pub(crate) fn made(decision: CallDecision, reason: Option<String>) -> Result<Decision, RunError> {
        match decision {
            CallDecision::Approve | CallDecision::ApproveWith(_) | CallDecision::ApproveAlways(_)
                if reason.is_some() =>
            {
                Err(RunError::InvalidInput(
                    "an approval takes no `reason`: a reason goes with a decline, and is told to the model".into(),
                ))
            }
            CallDecision::Decline(own) => Ok(Decision::from(CallDecision::Decline(own.or(reason)))),
            decision => Ok(Decision::Made { decision, reason }),
        }
    }

    /// Whether applying it keeps a standing approval (an approval that
    /// sticks to the run's thread or resource).
    pub(crate) fn keeps_a_grant(&self) -> bool {
        matches!(
            self,
            Decision::Made {
                decision: CallDecision::ApproveAlways(_),
                ..
            }
        )
    }
}

impl From<CallDecision> for Decision {
    fn from(decision: CallDecision) -> Decision {
        Decision::Made { decision, reason: None }
    }
}

/// What a decision does to its pending call, checked against it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FittedDecision {
    /// Run the suspended tool again with this answer.
    Answer { tool_call_id: String, data: Value },
    /// Leave the question unanswered; the model is told.
    DeclineQuestion {
        tool_call_id: String,
        reason: Option<String>,
    },
    /// Run the call that waited for approval: with the model's arguments,
    /// or with `args` a person edited (checked against the tool's input
    /// schema); `always`: and let later calls of its tool run in that
    /// scope (the run is on a thread).
    Approve {
        tool_call_id: String,
        args: Option<Value>,
        always: Option<crate::Always>,
    },
    /// Never run the call that waited for approval; the model is told.
    DeclineApproval {
        tool_call_id: String,
        reason: Option<String>,
    },
    /// The call's time limit passed unanswered: a question is resolved with
    /// a text saying so, an approval is declined (see `expiry.rs`).
    Expire { tool_call_id: String },
}

impl FittedDecision {
    pub(crate) fn tool_call_id(&self) -> &str {
        match self {
            FittedDecision::Answer { tool_call_id, .. }
            | FittedDecision::DeclineQuestion { tool_call_id, .. }
            | FittedDecision::Approve { tool_call_id, .. }
            | FittedDecision::DeclineApproval { tool_call_id, .. }
            | FittedDecision::Expire { tool_call_id } => tool_call_id,
        }
    }

    /// What the decision is, as stored among the run's resolutions.
    pub(crate) fn resolution_kind(&self) -> ResolutionKind {
        match self {
            FittedDecision::Answer { .. } => ResolutionKind::Answered,
            FittedDecision::DeclineQuestion { .. } => ResolutionKind::Declined,
            FittedDecision::Approve { .. } => ResolutionKind::Approved,
            FittedDecision::DeclineApproval { .. } => ResolutionKind::Denied,
            FittedDecision::Expire { .. } => ResolutionKind::Expired,
        }
    }
}

/// Which decision fits which pending call: checks `decision` against
/// `pending` (of `run`), with its tool when the agent has it. An answer to
/// a question is checked by the tool; a decline and an expiry fit any call;
/// an approval only a call that waits for one, and edited arguments only
/// when they fit the tool's input schema. A decline's reason may be
/// at most [`MAX_REASON_BYTES`] long.
pub(crate) fn fit_decision(
    run: &RunRecord,
    pending: &PendingToolCall,
    decision: &Decision,
    tools: &dyn ToolBook,
    agent_id: &str,
) -> Result<FittedDecision, RunError> {
    let action = fit(run, pending, decision, tools, agent_id)?;
    if let FittedDecision::DeclineQuestion {
        tool_call_id,
        reason: Some(reason),
    }
    | FittedDecision::DeclineApproval {
        tool_call_id,
        reason: Some(reason),
    } = &action
        && reason.len() > MAX_REASON_BYTES
    {
        return Err(RunError::ReasonTooLong {
            run_id: run.run_id.clone(),
            tool_call_id: tool_call_id.clone(),
            bytes: reason.len(),
            limit: MAX_REASON_BYTES,
        });
    }
    Ok(action)
}

fn fit(
    run: &RunRecord,
    pending: &PendingToolCall,
    decision: &Decision,
    tools: &dyn ToolBook,
    agent_id: &str,
) -> Result<FittedDecision, RunError> {
    let tool = tools.tool(&pending.tool_name);
    let tool_call_id = pending.tool_call_id.clone();
    let has_tool = || {
        tool.ok_or_else(|| RunError::UnknownTool {
            run_id: run.run_id.clone(),
            agent_id: agent_id.to_owned(),
            tool_name: pending.tool_name.clone(),
        })
    };
    let (decision, given) = match decision {
        Decision::Expire => return Ok(FittedDecision::Expire { tool_call_id }),
        Decision::Made { decision, reason } => (decision, reason),
    };
    match (pending.kind, decision) {
        (PendingKind::Suspended, CallDecision::Answer(data)) => {
            let payload = pending.suspend_payload.as_deref().unwrap_or(&Value::Null);
            has_tool()?
                .check_resume_data(data, payload)
                .map_err(|InvalidResume { reason, accepted }| RunError::InvalidAnswer {
                    run_id: run.run_id.clone(),
                    tool_call_id: tool_call_id.clone(),
                    reason,
                    accepted,
                })?;
            Ok(FittedDecision::Answer {
                tool_call_id,
                data: data.clone(),
            })
        }
        (PendingKind::Suspended, CallDecision::Decline(reason)) => Ok(FittedDecision::DeclineQuestion {
            tool_call_id,
            reason: reason.clone(),
        }),
        (PendingKind::Suspended, CallDecision::Approve) => Err(RunError::WrongPendingKind {
            run_id: run.run_id.clone(),
            tool_call_id,
            detail: "is a question waiting for an answer, not a call waiting for approval; answer it instead".into(),
        }),
        (PendingKind::Approval, CallDecision::Approve) => {
            has_tool()?;
            Ok(FittedDecision::Approve {
                tool_call_id,
                args: None,
                always: None,
            })
        }
        (PendingKind::Approval, CallDecision::ApproveWith(args)) => {
            has_tool()?;
            let invalid = |reason: String| RunError::InvalidArguments {
                run_id: run.run_id.clone(),
                tool_call_id: tool_call_id.clone(),
                reason,
            };
            if !args.is_object() {
                return Err(invalid(format!("the arguments must be a JSON object, got {args}")));
            }
            if let Some(problem) = tools.input_problem(&pending.tool_name, args) {
                return Err(invalid(problem));
            }
            // Edited arguments meet the rules the model's arguments meet:
            // a person's edit cannot run what a rule refuses.
            if let Some((rule, crate::Verdict::Deny(reason))) = tools.rule_verdict(run, &pending.tool_name, args) {
                return Err(RunError::DeniedByRule {
                    run_id: run.run_id.clone(),
                    tool_call_id,
                    rule,
                    reason,
                });
            }
            Ok(FittedDecision::Approve {
                tool_call_id,
                args: Some(args.clone()),
                always: None,
            })
        }
        (PendingKind::Approval, CallDecision::ApproveAlways(always)) => {
            has_tool()?;
            if let Some(problem) = always.lasts_problem() {
                return Err(RunError::InvalidInput(format!(
                    "call {} of run {}: {problem}",
                    tool_call_id, run.run_id
                )));
            }
            if run.memory.is_none() {
                return Err(RunError::InvalidInput(format!(
                    "run {} is on no thread, so an approval cannot stick to its thread or resource; approve \
                     this call alone, or start runs on a thread (a resource and a thread id) to let approvals \
                     stick",
                    run.run_id
                )));
            }
            Ok(FittedDecision::Approve {
                tool_call_id,
                args: None,
                always: Some(always.clone()),
            })
        }
        (PendingKind::Suspended, CallDecision::ApproveWith(_) | CallDecision::ApproveAlways(_)) => {
            Err(RunError::WrongPendingKind {
                run_id: run.run_id.clone(),
                tool_call_id,
                detail: "is a question waiting for an answer, not a call waiting for approval; answer it instead"
                    .into(),
            })
        }
        (PendingKind::Approval, CallDecision::Decline(reason)) => Ok(FittedDecision::DeclineApproval {
            tool_call_id,
            reason: reason.clone(),
        }),
        (PendingKind::Approval, CallDecision::Answer(data)) => {
            let approved = data.get("approved").and_then(Value::as_bool);
            let reason = data
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| given.clone());
            match approved {
                Some(true) => {
                    has_tool()?;
                    Ok(FittedDecision::Approve {
                        tool_call_id,
                        args: None,
                        always: None,
                    })
                }
                Some(false) => Ok(FittedDecision::DeclineApproval { tool_call_id, reason }),
                None => Err(RunError::InvalidAnswer {
                    run_id: run.run_id.clone(),
                    tool_call_id,
                    reason: format!(
                        "this call waits for approval; resume it with {} or {}, got {data}",
                        json!({"approved": true}),
                        json!({"approved": false, "reason": "..."})
                    ),
                    accepted: None,
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolContent;
    use crate::store::PendingKind;
    use serde_json::json;

    #[test]
    fn a_reason_beside_a_decision_goes_to_a_decline_or_an_answer_and_is_refused_with_an_approval() {
        let reason = || Some("not on a Friday".to_owned());
        assert_eq!(
            Decision::made(CallDecision::Decline(None), reason()).unwrap(),
            Decision::from(CallDecision::Decline(reason())),
            "a decline without a reason of its own takes the one given"
        );
        assert_eq!(
            Decision::made(CallDecision::Decline(Some("mine".into())), reason()).unwrap(),
            Decision::from(CallDecision::Decline(Some("mine".into()))),
            "a decline's own reason wins"
        );
        assert_eq!(
            Decision::made(CallDecision::Answer(json!({"approved": false})), reason()).unwrap(),
            Decision::Made {
                decision: CallDecision::Answer(json!({"approved": false})),
                reason: reason()
            }
        );
        for approval in [
            CallDecision::Approve,
            CallDecision::ApproveWith(json!({})),
            CallDecision::ApproveAlways(crate::Always::in_scope(crate::GrantScope::Thread)),
        ] {
            assert!(matches!(
                Decision::made(approval.clone(), reason()),
                Err(RunError::InvalidInput(message)) if message.contains("no `reason`")
            ));
            assert!(Decision::made(approval, None).is_ok());
        }
        assert!(
            Decision::made(
                CallDecision::ApproveAlways(crate::Always::in_scope(crate::GrantScope::Thread)),
                None
            )
            .unwrap()
            .keeps_a_grant()
        );
        assert!(!Decision::Expire.keeps_a_grant());
    }

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "t".into(),
            args: json!({}).into(),
        }
    }

    fn result(id: &str) -> ToolResult {
        ToolResult {
            tool_call_id: id.into(),
            tool_name: "t".into(),
            content: ToolContent::Text(id.into()),
            is_error: false,
        }
    }

    fn pending(id: &str) -> PendingToolCall {
        PendingToolCall {
            tool_call_id: id.into(),
            tool_name: "ask_user".into(),
            args: json!({}).into(),
            kind: PendingKind::Suspended,
            suspend_payload: None,
            resume_schema: None,
            expires_at: None,
            started_at: None,
        }
    }

    #[test]
    fn results_answered_in_any_order_continue_in_call_order() {
        let calls = [call("a"), call("b"), call("c")];
        let answered = [result("c"), result("a"), result("b")];
        let AfterTools::Continue(ordered) = after_tools(&calls, &[], &answered) else {
            panic!("expected continue")
        };
        let ids: Vec<&str> = ordered.iter().map(|r| r.tool_call_id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
    }

    #[test]
    fn calls_of_a_tool_past_its_per_step_limit_are_refused_and_the_earlier_ones_run() {
        let rules = ToolRules {
            needs_approval: false,
            own_approval: false,
            idempotent: true,
            max_per_step: Some(2),
            time_limit: None,
        };
        let plan = |nth_of_tool| {
            plan_call(
                &call("x"),
                CallFacts {
                    malformed: None,
                    tool: Some((rules, None)),
                    known_tools: &["t"],
                    recovering: false,
                    started: false,
                    nth_of_tool,
                    ruling: None,
                },
            )
        };
        assert_eq!(plan(1), CallPlan::Execute);
        assert_eq!(plan(2), CallPlan::Execute);
        let CallPlan::Refuse(message) = plan(3) else {
            panic!("the third call should be refused")
        };
        assert!(message.contains("at most 2 calls of t"), "{message}");
    }

    #[test]
    fn an_approval_or_an_answer_to_a_tool_that_must_not_run_twice_marks_its_call_started() {
        let rules = |idempotent| {
            Some(ToolRules {
                needs_approval: true,
                own_approval: true,
                idempotent,
                max_per_step: None,
                time_limit: None,
            })
        };
        let approve = FittedDecision::Approve {
            tool_call_id: "a".into(),
            args: None,
            always: None,
        };
        let answer = FittedDecision::Answer {
            tool_call_id: "a".into(),
            data: json!("yes"),
        };
        let decline = FittedDecision::DeclineApproval {
            tool_call_id: "a".into(),
            reason: None,
        };
        assert!(marks_start(&approve, rules(false)));
        assert!(marks_start(&answer, rules(false)));
        assert!(marks_start(&approve, rules(true)));
        assert!(!marks_start(&answer, rules(true)));
        assert!(!marks_start(&decline, rules(false)));
        assert!(!marks_start(&approve, None));
        let marked = mark_started(&[pending("a"), pending("b")], "b", chrono::Utc::now());
        assert!(marked[0].started_at.is_none());
        assert!(marked[1].started_at.is_some());
    }

    #[test]
    fn a_started_call_without_a_result_is_interrupted_on_recovery_and_not_approved_again() {
        let mut started = pending("a");
        started.kind = PendingKind::Approval;
        started.started_at = Some(chrono::Utc::now());
        let run = RunRecord {
            status: RunStatus::Running,
            pending: vec![started, pending("b")],
            ..suspended_run(&[])
        };
        let messages = [Message::user("go"), Message::assistant("", vec![call("a"), call("b")])];
        let Recovery::Interrupted { step, started } = recovery(&run, &messages) else {
            panic!("a started call is interrupted")
        };
        assert_eq!(started, ["a"]);
        assert_eq!(step.pending.len(), 1, "the question still waits");
        assert_eq!(step.pending[0].tool_call_id, "b");
        assert_eq!(step.unresolved(), [call("a")]);

        let guarded = ToolRules {
            needs_approval: true,
            own_approval: true,
            idempotent: false,
            max_per_step: None,
            time_limit: None,
        };
        let facts = |started| CallFacts {
            malformed: None,
            tool: Some((guarded, None)),
            known_tools: &["t"],
            recovering: true,
            started,
            nth_of_tool: 1,
            ruling: None,
        };
        let CallPlan::Refuse(told) = plan_call(&call("a"), facts(true)) else {
            panic!("a started call that must not run twice is not run again")
        };
        assert!(told.contains("was interrupted"), "{told}");
        // Not started: the approval was never given for good; ask again.
        assert_eq!(plan_call(&call("a"), facts(false)), CallPlan::AskApproval);
    }

    #[test]
    fn any_pending_call_means_wait() {
        let calls = [call("a"), call("b")];
        assert_eq!(after_tools(&calls, &[pending("b")], &[result("a")]), AfterTools::Wait);
    }

    #[test]
    fn no_tool_calls_completes() {
        assert_eq!(after_model(&[]), AfterModel::Complete);
        assert_eq!(after_model(&[call("a")]), AfterModel::RunTools);
    }

    #[test]
    fn step_limit_counts_model_calls_per_stream() {
        assert!(may_call_model(0, 1));
        assert!(!may_call_model(1, 1));
    }

    fn suspended_run(pending_ids: &[&str]) -> RunRecord {
        RunRecord {
            run_id: "r".into(),
            status: RunStatus::Suspended,
            pending: pending_ids.iter().map(|id| pending(id)).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn resume_without_id_picks_the_only_pending_call() {
        let run = suspended_run(&["a"]);
        assert_eq!(run.resume_target(None).unwrap().tool_call_id, "a");
    }

    #[test]
    fn resume_without_id_is_ambiguous_with_several_pending_and_lists_them() {
        let run = suspended_run(&["a", "b"]);
        let err = run.resume_target(None).unwrap_err();
        assert!(matches!(&err, RunError::AmbiguousResume { pending, .. } if pending == &["a", "b"]));
        assert!(err.to_string().contains("a, b"));
    }

    #[test]
    fn resume_of_a_call_that_is_not_pending_lists_the_pending_ones() {
        let run = suspended_run(&["a"]);
        let err = run.resume_target(Some("zzz")).unwrap_err();
        assert!(matches!(err, RunError::ToolCallNotPending { ref pending, .. } if pending == &["a"]));
    }

    #[test]
    fn resume_of_a_run_that_is_not_suspended_names_its_status() {
        let mut run = suspended_run(&["a"]);
        run.status = RunStatus::Completed;
        let err = run.resume_target(Some("a")).unwrap_err();
        assert!(matches!(
            err,
            RunError::NotSuspended {
                status: RunStatus::Completed,
                ..
            }
        ));
    }
}

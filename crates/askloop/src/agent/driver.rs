//! The async driver: calls the model, runs tools, writes the store, emits
//! chunks. The decisions it follows are in `machine.rs`.
//!
//! Order of effects in a step: stream the model turn (emitting its chunks as
//! they arrive), run the tools, write the step to the store, and only then
//! emit the tool results and any suspension. A client that saw
//! `tool-call-suspended` can therefore always resume, from any process.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::{FutureExt, StreamExt, future::join_all};
use serde_json::Value;
use tracing::Instrument;

use super::expiry;
use super::machine::{self, AfterModel, AfterTools};
use super::stream::Outbox;
use super::{AgentInner, StreamOutput, approval_schema};
use crate::chunk::finish::StepReport;
use crate::chunk::*;
use crate::message::{FinishReason, Message, ToolCall, ToolContent, ToolResult, Usage};
use crate::model::{ModelError, ModelEvent, ModelRequest, ToolCallIds};
use crate::store::{
    Author, Lease, PendingKind, PendingToolCall, Resolution, ResolutionKind, RunFailure, RunRecord, RunStatus,
    RunUpdate, StoreError,
};
use crate::tool::{ToolContext, ToolOutcome, ToolOutput, describe_errors};

/// The default reason a model is given for a declined call.
const NOT_APPROVED: &str = "Tool call was not approved by the user";

/// A run as the driver holds it: the stored row (with its current version)
/// and the whole conversation.
pub(crate) struct RunState {
    pub(crate) record: RunRecord,
    pub(crate) messages: Vec<Message>,
}

/// What a resume does to its pending call, already checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ResumeAction {
    Answer {
        tool_call_id: String,
        data: Value,
    },
    DeclineQuestion {
        tool_call_id: String,
        reason: Option<String>,
    },
    Approve {
        tool_call_id: String,
    },
    Deny {
        tool_call_id: String,
        reason: Option<String>,
    },
    /// The call's time limit passed unanswered (see `expiry.rs`).
    Expire {
        tool_call_id: String,
    },
}

impl ResumeAction {
    pub(crate) fn tool_call_id(&self) -> &str {
        match self {
            ResumeAction::Answer { tool_call_id, .. }
            | ResumeAction::DeclineQuestion { tool_call_id, .. }
            | ResumeAction::Approve { tool_call_id }
            | ResumeAction::Deny { tool_call_id, .. }
            | ResumeAction::Expire { tool_call_id } => tool_call_id,
        }
    }

    /// What the decision is, as stored among the run's resolutions.
    fn resolution_kind(&self) -> ResolutionKind {
        match self {
            ResumeAction::Answer { .. } => ResolutionKind::Answered,
            ResumeAction::DeclineQuestion { .. } => ResolutionKind::Declined,
            ResumeAction::Approve { .. } => ResolutionKind::Approved,
            ResumeAction::Deny { .. } => ResolutionKind::Denied,
            ResumeAction::Expire { .. } => ResolutionKind::Expired,
        }
    }
}

/// Where a driver starts.
pub(crate) enum Start {
    /// A new run.
    Fresh,
    /// A claimed run, with the decision to apply and who made it.
    Resume(ResumeAction, Author),
    /// A decision already applied and written (see `Driver::apply`).
    Applied(Applied),
    /// A run taken over after its driver stopped (see `Driver::recovered`).
    Recovered,
}

/// A decision applied to its call and written to the store.
pub(crate) struct Applied {
    /// The chunk that shows the call's result (none if it suspended again).
    chunk: Option<ChunkKind>,
    /// Whether calls of the step are still pending.
    waiting: bool,
}

/// Why a decision could not be applied.
pub(crate) enum ApplyFailed {
    /// The write failed (a lost compare-and-set is `StoreError::Conflict`).
    Store(StoreError),
    /// The stored run is not in a state the decision fits (a bug, or a
    /// damaged row).
    Broken(String),
}

/// How one tool call ended in this stream.
enum CallOutcome {
    /// A result, with the chunk that shows it.
    Done(ToolResult, ChunkKind),
    /// The call waits on a person.
    Pending(PendingToolCall),
}

/// Sorts a step's call outcomes into the calls still waiting, the results
/// (after `results`, the step's results stored earlier) and the chunks that
/// show the new results, each in call order.
fn sort_outcomes(
    outcomes: Vec<CallOutcome>,
    mut results: Vec<ToolResult>,
) -> (Vec<PendingToolCall>, Vec<ToolResult>, Vec<ChunkKind>) {
    let mut pending = Vec::new();
    let mut chunks = Vec::new();
    for outcome in outcomes {
        match outcome {
            CallOutcome::Done(result, chunk) => {
                results.push(result);
                chunks.push(chunk);
            }
            CallOutcome::Pending(p) => pending.push(p),
        }
    }
    (pending, results, chunks)
}

/// A tool call as the model produced it, with its arguments checked for JSON.
struct ModelCall {
    call: ToolCall,
    malformed: Option<String>,
}

/// One model turn, complete.
struct Turn {
    started_at: DateTime<Utc>,
    text: String,
    calls: Vec<ModelCall>,
    reason: FinishReason,
    usage: Usage,
}

/// How the stream ended.
enum Ended {
    Completed,
    Suspended,
    Failed(RunFailure),
    Cancelled,
}

pub(crate) struct Driver {
    agent: Arc<AgentInner>,
    state: RunState,
    chunks: Outbox,
    /// The id of the message this stream's steps produce (one per stream,
    /// as Mastra's: `start`, every `step-start` and `step-finish`, `finish`).
    message_id: String,
    /// The text the model produced in this stream.
    text: String,
    /// Model calls made in this stream.
    steps_here: u32,
    /// The resolution the next write records (set by [`Driver::apply`]).
    resolution: Option<Resolution>,
    /// Who holds the run's lease while this driver has it running: the
    /// owner of the lease the run was claimed or created with, else a new
    /// one (taken by the first write that keeps the run running).
    lease_owner: String,
}

impl Driver {
    pub(crate) fn new(agent: Arc<AgentInner>, state: RunState, chunks: Outbox) -> Self {
        let lease_owner = match &state.record.lease {
            Some(lease) => lease.owner.clone(),
            None => new_id(),
        };
        Driver {
            agent,
            state,
            chunks,
            message_id: new_id(),
            text: String::new(),
            steps_here: 0,
            resolution: None,
            lease_owner,
        }
    }

    /// Drives the run until it completes, suspends or fails, renewing its
    /// lease meanwhile (see [`super::lease::heartbeat`]).
    pub(crate) async fn run(mut self, start: Start) -> StreamOutput {
        let heartbeat = super::lease::heartbeat(
            Arc::clone(&self.agent.store),
            self.state.record.run_id.clone(),
            self.lease_owner.clone(),
            self.agent.lease_duration,
        );
        let work = async {
            match start {
                Start::Fresh => {
                    self.emit(ChunkKind::Start(crate::chunk::Start {
                        id: self.agent.id.clone(),
                        message_id: self.message_id.clone(),
                    }));
                    self.steps().await
                }
                Start::Resume(action, author) => self.resume(action, author).await,
                Start::Applied(applied) => self.after_apply(applied).await,
                Start::Recovered => self.recovered().await,
            }
        };
        let ended = super::lease::while_renewing(work, heartbeat).await;
        self.output(ended)
    }

    fn output(self, ended: Ended) -> StreamOutput {
        let RunState { record, messages } = self.state;
        if matches!(ended, Ended::Suspended) {
            self.agent.conversations.put(&record.run_id, record.version, messages);
        }
        let (status, finish_reason, failure) = match ended {
            Ended::Completed => (RunStatus::Completed, FinishReason::Stop, None),
            Ended::Suspended => (RunStatus::Suspended, FinishReason::Suspended, None),
            Ended::Failed(failure) => (RunStatus::Failed, FinishReason::Error, Some(failure)),
            Ended::Cancelled => (RunStatus::Cancelled, FinishReason::Cancelled, None),
        };
        StreamOutput {
            run_id: record.run_id,
            status,
            finish_reason,
            text: self.text,
            pending: if status == RunStatus::Suspended {
                record.pending
            } else {
                Vec::new()
            },
            usage: record.usage,
            error: failure.as_ref().map(RunFailure::message),
            failure,
        }
    }

    /// Leaves a chunk for the stream. It never waits: the stream polls the
    /// driver only once it has handed out what was left.
    fn emit(&self, kind: ChunkKind) {
        let chunk = Chunk::new(&self.state.record.run_id, kind);
        self.chunks.lock().unwrap_or_else(|p| p.into_inner()).push_back(chunk);
    }

    /// Model steps until the run completes, suspends or fails.
    async fn steps(&mut self) -> Ended {
        loop {
            if !machine::may_call_model(self.steps_here, self.agent.max_steps) {
                let failure = RunFailure::StepLimit {
                    limit: self.agent.max_steps,
                };
                return self.fail(failure).await;
            }
            let started_at = Utc::now();
            self.emit(ChunkKind::StepStart(StepStart {
                message_id: self.message_id.clone(),
                started_at: started_at.timestamp_millis(),
                warnings: Vec::new(),
                request: serde_json::Map::new(),
            }));
            self.steps_here += 1;
            self.state.record.steps += 1;

            let span = tracing::info_span!(
                "model_step",
                run_id = %self.state.record.run_id,
                step = self.state.record.steps
            );
            let turn = match self.model_turn(started_at).instrument(span).await {
                Ok(turn) => turn,
                Err(err) => {
                    let failure = RunFailure::Model {
                        transient: err.is_transient(),
                        message: err.to_string(),
                    };
                    return self.fail(failure).await;
                }
            };
            self.state.record.usage.add(turn.usage);
            let calls: Vec<ToolCall> = turn.calls.iter().map(|c| c.call.clone()).collect();
            let assistant = Message::assistant(turn.text.clone(), calls.clone());

            match machine::after_model(&calls) {
                AfterModel::Complete => {
                    if let Err(err) = self
                        .save(RunStatus::Completed, vec![assistant], Vec::new(), Vec::new(), None)
                        .await
                    {
                        return self.store_failed(err).await;
                    }
                    let finish = self.report(&turn, false);
                    self.emit(ChunkKind::StepFinish(Box::new(finish.clone())));
                    self.emit(ChunkKind::Finish(Box::new(finish.into_finish(self.state.record.usage))));
                    return Ended::Completed;
                }
                AfterModel::RunTools => {}
            }

            // A call whose tool must not run twice is preceded by a write of
            // the turn: if this process dies while it runs, recovery finds
            // the call stored without a result and tells the model, instead
            // of calling the model again and maybe running it twice.
            let mut assistant = Some(assistant);
            if self.runs_unrepeatable(&turn.calls) {
                let turn_only = assistant.take().into_iter().collect();
                if let Err(err) = self
                    .save(RunStatus::Running, turn_only, Vec::new(), Vec::new(), None)
                    .await
                {
                    return self.store_failed(err).await;
                }
            }
            let outcomes = self.run_calls(&turn.calls, false).await;
            let (pending, results, result_chunks) = sort_outcomes(outcomes, Vec::new());

            match machine::after_tools(&calls, &pending, &results) {
                AfterTools::Wait => {
                    let saved = self
                        .save(
                            RunStatus::Suspended,
                            assistant.into_iter().collect(),
                            pending,
                            results,
                            None,
                        )
                        .await;
                    if let Err(err) = saved {
                        return self.store_failed(err).await;
                    }
                    for chunk in result_chunks {
                        self.emit(chunk);
                    }
                    self.emit_pending();
                    return Ended::Suspended;
                }
                AfterTools::Continue(ordered) => {
                    let mut append = Vec::with_capacity(ordered.len() + 1);
                    append.extend(assistant);
                    append.extend(ordered.into_iter().map(Message::Tool));
                    if let Err(err) = self
                        .save(RunStatus::Running, append, Vec::new(), Vec::new(), None)
                        .await
                    {
                        return self.store_failed(err).await;
                    }
                    for chunk in result_chunks {
                        self.emit(chunk);
                    }
                    self.emit(ChunkKind::StepFinish(Box::new(self.report(&turn, true))));
                }
            }
        }
    }

    /// Continues a run taken over after its driver stopped (its lease ran
    /// out) or failed (a retry), from its last stored step:
    ///
    /// - calls still pending wait on people: the run is suspended again, and
    ///   a decision that was being applied when the driver stopped (never
    ///   stored) is asked for again; stored answers are never asked again;
    /// - calls of the last stored turn that have no result were interrupted:
    ///   each is run again if its tool is idempotent, else the model is told
    ///   it was interrupted;
    /// - otherwise the model call the driver was making is made again.
    async fn recovered(&mut self) -> Ended {
        self.emit(ChunkKind::Start(crate::chunk::Start {
            id: self.agent.id.clone(),
            message_id: self.message_id.clone(),
        }));
        let record = &self.state.record;
        if !record.pending.is_empty() {
            let (pending, results) = (record.pending.clone(), record.step_results.clone());
            if let Err(err) = self
                .save(RunStatus::Suspended, Vec::new(), pending, results, None)
                .await
            {
                return self.store_failed(err).await;
            }
            self.emit_pending();
            return Ended::Suspended;
        }
        let Some(turn_calls) = unanswered_turn(&self.state.messages) else {
            return self.steps().await;
        };
        let done: Vec<&str> = record.step_results.iter().map(|r| r.tool_call_id.as_str()).collect();
        let interrupted: Vec<ModelCall> = turn_calls
            .iter()
            .filter(|call| !done.contains(&call.id.as_str()))
            .map(|call| ModelCall {
                call: call.clone(),
                malformed: None,
            })
            .collect();
        let outcomes = self.run_calls(&interrupted, true).await;
        let (pending, results, result_chunks) = sort_outcomes(outcomes, record.step_results.clone());
        match machine::after_tools(&turn_calls, &pending, &results) {
            AfterTools::Wait => {
                if let Err(err) = self
                    .save(RunStatus::Suspended, Vec::new(), pending, results, None)
                    .await
                {
                    return self.store_failed(err).await;
                }
                for chunk in result_chunks {
                    self.emit(chunk);
                }
                self.emit_pending();
                Ended::Suspended
            }
            AfterTools::Continue(ordered) => {
                let append = ordered.into_iter().map(Message::Tool).collect();
                if let Err(err) = self
                    .save(RunStatus::Running, append, Vec::new(), Vec::new(), None)
                    .await
                {
                    return self.store_failed(err).await;
                }
                for chunk in result_chunks {
                    self.emit(chunk);
                }
                self.steps().await
            }
        }
    }

    /// Applies a checked decision to its pending call, then carries on.
    async fn resume(&mut self, action: ResumeAction, author: Author) -> Ended {
        match self.apply(action, author).await {
            Ok(applied) => self.after_apply(applied).await,
            Err(ApplyFailed::Store(err)) => self.store_failed(err).await,
            Err(ApplyFailed::Broken(message)) => self.fail(RunFailure::Broken { message }).await,
        }
    }

    /// Applies a checked decision to its pending call and writes the result,
    /// as one compare-and-set on the version this driver holds. Emits
    /// nothing: what the stream shows comes from [`Driver::after_apply`].
    pub(crate) async fn apply(&mut self, action: ResumeAction, author: Author) -> Result<Applied, ApplyFailed> {
        let target_id = action.tool_call_id().to_owned();
        let Some(position) = self
            .state
            .record
            .pending
            .iter()
            .position(|p| p.tool_call_id == target_id)
        else {
            // Checked before the claim; only a bug gets here.
            return Err(ApplyFailed::Broken(format!(
                "tool call {target_id} is no longer pending"
            )));
        };
        let target = self.state.record.pending[position].clone();
        let call = ToolCall {
            id: target.tool_call_id.clone(),
            name: target.tool_name.clone(),
            args: target.args.clone(),
        };
        let run_id = self.state.record.run_id.clone();
        self.resolution = Some(Resolution::now(Some(&target_id), action.resolution_kind(), author));

        let outcome = match action {
            ResumeAction::Answer { data, .. } => {
                let ctx = ToolContext::in_run(&run_id, &call.id).resumed(target.suspend_payload.clone(), Some(data));
                self.execute(&call, ctx).await
            }
            ResumeAction::Approve { .. } => self.execute(&call, ToolContext::in_run(&run_id, &call.id)).await,
            ResumeAction::DeclineQuestion { reason, .. } => {
                let text = match reason {
                    Some(reason) if !reason.trim().is_empty() => format!("The user declined to answer: {reason}"),
                    _ => "The user declined to answer.".to_owned(),
                };
                done_result(&call, ToolOutput::text(text))
            }
            ResumeAction::Deny { reason, .. } => denied(&call, reason.filter(|r| !r.trim().is_empty())),
            ResumeAction::Expire { .. } => match target.kind {
                PendingKind::Suspended => done_result(
                    &call,
                    ToolOutput::text(expiry::expired_question_text(target.expires_at)),
                ),
                PendingKind::Approval => denied(&call, Some(expiry::expired_approval_reason(target.expires_at))),
            },
        };

        let mut pending = self.state.record.pending.clone();
        let mut results = self.state.record.step_results.clone();
        let mut chunk = None;
        match outcome {
            CallOutcome::Done(result, c) => {
                pending.remove(position);
                results.push(result);
                chunk = Some(c);
            }
            // Suspended again (or, after approval, the tool asked something):
            // it keeps its place among the pending calls.
            CallOutcome::Pending(p) => pending[position] = p,
        }

        let Some(assistant_calls) = last_tool_calls(&self.state.messages) else {
            return Err(ApplyFailed::Broken(
                "the stored conversation has no tool calls to answer".to_owned(),
            ));
        };
        let waiting = match machine::after_tools(&assistant_calls, &pending, &results) {
            AfterTools::Wait => {
                self.save(RunStatus::Suspended, Vec::new(), pending, results, None)
                    .await
                    .map_err(ApplyFailed::Store)?;
                true
            }
            AfterTools::Continue(ordered) => {
                let append: Vec<Message> = ordered.into_iter().map(Message::Tool).collect();
                self.save(RunStatus::Running, append, Vec::new(), Vec::new(), None)
                    .await
                    .map_err(ApplyFailed::Store)?;
                false
            }
        };
        Ok(Applied { chunk, waiting })
    }

    /// Shows an applied decision and carries on: ends suspended while calls
    /// are pending, otherwise calls the model.
    async fn after_apply(&mut self, applied: Applied) -> Ended {
        if let Some(chunk) = applied.chunk {
            self.emit(chunk);
        }
        if applied.waiting {
            self.emit_pending();
            return Ended::Suspended;
        }
        // The step's turn ran in an earlier stream: its usage is not known here.
        let finish = StepFinish::report(StepReport {
            message_id: &self.message_id,
            model_name: self.agent.model.name(),
            started_at: None,
            reason: FinishReason::ToolCalls,
            is_continued: true,
            usage: Usage::default(),
            conversation: &self.state.messages,
        });
        self.emit(ChunkKind::StepFinish(Box::new(finish)));
        self.steps().await
    }

    /// Emits the suspension chunk of every pending call: a stream that
    /// suspends ends with what it waits on.
    fn emit_pending(&self) {
        for p in &self.state.record.pending {
            let chunk = match p.kind {
                PendingKind::Suspended => ChunkKind::ToolCallSuspended(ToolCallSuspended {
                    tool_call_id: p.tool_call_id.clone(),
                    tool_name: p.tool_name.clone(),
                    args: p.args.clone(),
                    suspend_payload: p.suspend_payload.clone().unwrap_or(Value::Null),
                    resume_schema: p.resume_schema.as_ref().map(Value::to_string),
                }),
                PendingKind::Approval => ChunkKind::ToolCallApproval(ToolCallApproval {
                    tool_call_id: p.tool_call_id.clone(),
                    tool_name: p.tool_name.clone(),
                    args: p.args.clone(),
                    resume_schema: p.resume_schema.clone().unwrap_or_else(approval_schema).to_string(),
                }),
            };
            self.emit(chunk);
        }
    }

    /// The `step-finish` payload of a turn of this stream, once its step is
    /// stored (the conversation ends with it).
    fn report(&self, turn: &Turn, is_continued: bool) -> StepFinish {
        StepFinish::report(StepReport {
            message_id: &self.message_id,
            model_name: self.agent.model.name(),
            started_at: Some(turn.started_at),
            reason: turn.reason.clone(),
            is_continued,
            usage: turn.usage,
            conversation: &self.state.messages,
        })
    }

    /// Streams one model turn, emitting its chunks as they arrive.
    async fn model_turn(&mut self, started_at: DateTime<Utc>) -> Result<Turn, ModelError> {
        let request = ModelRequest {
            run_id: &self.state.record.run_id,
            system: self.agent.instructions.as_deref(),
            messages: &self.state.messages,
            tools: &self.agent.specs,
        };
        let mut events = self.agent.model.stream(request).await?;

        let mut turn = Turn {
            started_at,
            text: String::new(),
            calls: Vec::new(),
            reason: FinishReason::Stop,
            usage: Usage::default(),
        };
        let mut text_id: Option<String> = None;
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
                    if text.is_empty() {
                        continue;
                    }
                    let id = match &text_id {
                        Some(id) => id.clone(),
                        None => {
                            let id = new_id();
                            self.emit(ChunkKind::TextStart(TextId { id: id.clone() }));
                            text_id = Some(id.clone());
                            id
                        }
                    };
                    turn.text.push_str(&text);
                    self.text.push_str(&text);
                    self.emit(ChunkKind::TextDelta(TextDelta { id, text }));
                }
                ModelEvent::ToolCallStart { id: model_id, name } => {
                    self.close_text(&mut text_id);
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
                    self.close_text(&mut text_id);
                    // Calls started under one id finish in the order they started.
                    let started = open.iter().position(|(m, _, _)| *m == model_id);
                    let id = match started {
                        Some(position) => open.remove(position).1,
                        None => ids.claim(&model_id),
                    };
                    if started.is_none() {
                        // The provider sent the call whole (Ollama does):
                        // show it the way a streamed one looks.
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
                    let call = ToolCall { id, name, args };
                    self.emit(ChunkKind::ToolCall(ToolCallPayload::from(&call)));
                    turn.calls.push(ModelCall { call, malformed });
                }
                ModelEvent::Finish { reason, usage } => {
                    turn.reason = reason;
                    turn.usage = usage;
                    finished = true;
                }
            }
        }
        self.close_text(&mut text_id);
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

    fn close_text(&self, text_id: &mut Option<String>) {
        if let Some(id) = text_id.take() {
            self.emit(ChunkKind::TextEnd(TextId { id }));
        }
    }

    /// Whether any of these calls would execute a tool that must not run
    /// twice (see [`crate::Tool::idempotent`]).
    fn runs_unrepeatable(&self, calls: &[ModelCall]) -> bool {
        calls.iter().any(|mc| {
            mc.malformed.is_none()
                && self
                    .agent
                    .tools
                    .get(&mc.call.name)
                    .is_some_and(|t| !t.needs_approval && !t.tool.idempotent())
        })
    }

    /// Runs a step's tool calls concurrently. When `recovering` (the calls
    /// were interrupted with the process that ran them), a tool that must
    /// not run twice is not run: its result tells the model so.
    async fn run_calls(&self, calls: &[ModelCall], recovering: bool) -> Vec<CallOutcome> {
        let run_id = &self.state.record.run_id;
        join_all(calls.iter().map(|mc| {
            let span = tracing::info_span!("tool_call", tool_call_id = %mc.call.id, tool = %mc.call.name);
            self.run_call(run_id, mc, recovering).instrument(span)
        }))
        .await
    }

    /// Checks and runs one tool call of a step.
    async fn run_call(&self, run_id: &str, mc: &ModelCall, recovering: bool) -> CallOutcome {
        if let Some(problem) = &mc.malformed {
            let message = format!(
                "The arguments for tool {} are not valid JSON ({problem}). Call the tool again with a JSON object that matches its input schema.",
                mc.call.name
            );
            return error_result(&mc.call, message);
        }
        let Some(registered) = self.agent.tools.get(&mc.call.name) else {
            let known: Vec<&str> = self.agent.specs.iter().map(|s| s.name.as_str()).collect();
            let message = format!(
                "Unknown tool {}. Available tools: {}.",
                mc.call.name,
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            );
            return error_result(&mc.call, message);
        };
        if let Err(problems) = describe_errors(&registered.validator, &mc.call.args) {
            let message = format!(
                "Invalid input for tool {}: {problems}. Call it again with input that matches its schema.",
                mc.call.name
            );
            return error_result(&mc.call, message);
        }
        if registered.needs_approval {
            let pending = PendingToolCall {
                tool_call_id: mc.call.id.clone(),
                tool_name: mc.call.name.clone(),
                args: mc.call.args.clone(),
                kind: PendingKind::Approval,
                suspend_payload: None,
                resume_schema: Some(approval_schema()),
                expires_at: None,
            };
            return CallOutcome::Pending(self.with_time_limit(pending));
        }
        if recovering && !registered.tool.idempotent() {
            let message = format!(
                "Tool {} was interrupted while it ran (the process running it stopped); it may or may not have \
                 taken effect, and it was not run again. Check before calling it again.",
                mc.call.name
            );
            return error_result(&mc.call, message);
        }
        self.execute(&mc.call, ToolContext::in_run(run_id, &mc.call.id)).await
    }

    /// A new waiting call with the agent's time limit for its tool, from now.
    fn with_time_limit(&self, pending: PendingToolCall) -> PendingToolCall {
        let expires_at = expiry::deadline(self.agent.time_limit_for(&pending.tool_name), Utc::now());
        expiry::with_deadline(pending, expires_at)
    }

    /// Executes one tool; a panic in the tool becomes a tool error, not a
    /// lost run.
    async fn execute(&self, call: &ToolCall, ctx: ToolContext) -> CallOutcome {
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
            })),
            Ok(Err(err)) => error_result(call, err.to_string()),
            Err(_) => error_result(call, format!("Tool {} crashed while running.", call.name)),
        }
    }

    /// Writes the run's new state and appends messages, as one
    /// compare-and-set on the version this driver holds.
    async fn save(
        &mut self,
        status: RunStatus,
        append: Vec<Message>,
        pending: Vec<PendingToolCall>,
        step_results: Vec<ToolResult>,
        failure: Option<RunFailure>,
    ) -> Result<(), StoreError> {
        let error = failure.as_ref().map(RunFailure::message);
        // A run that stays running stays held, for a full lease from now.
        let lease = (status == RunStatus::Running)
            .then(|| Lease::new(self.lease_owner.clone(), Utc::now() + self.agent.lease_duration));
        let record = &self.state.record;
        let update = RunUpdate {
            run_id: &record.run_id,
            expected_version: record.version,
            status,
            pending: &pending,
            step_results: &step_results,
            append: &append,
            steps: record.steps,
            usage: record.usage,
            error: error.as_deref(),
            failure: failure.as_ref(),
            lease: lease.as_ref(),
            resolution: self.resolution.as_ref(),
        };
        let version = self.agent.store.update(update).await?;
        if let Some(resolution) = self.resolution.take() {
            self.state.record.resolutions.push(resolution);
        }
        let record = &mut self.state.record;
        record.version = version;
        record.status = status;
        record.pending = pending;
        record.step_results = step_results;
        record.message_count += append.len() as i64;
        record.error = error;
        record.failure = failure;
        record.lease = lease;
        self.state.messages.extend(append);
        Ok(())
    }

    /// Marks the run failed with its typed reason and emits the `error`
    /// chunk. What the step had stored (messages, pending calls, results)
    /// is kept, so a transient failure can be retried from there. If even
    /// that write fails, the run stays `running` under a lease nobody
    /// renews once this stream ends: recovery takes it over.
    async fn fail(&mut self, failure: RunFailure) -> Ended {
        let record = &self.state.record;
        let (pending, results) = (record.pending.clone(), record.step_results.clone());
        if let Err(err) = self
            .save(RunStatus::Failed, Vec::new(), pending, results, Some(failure.clone()))
            .await
        {
            tracing::warn!(run_id = %self.state.record.run_id, error = %err, "could not record the run's failure");
        }
        self.emit(ChunkKind::Error(ErrorPayload {
            error: ErrorDetail {
                message: failure.message(),
            },
        }));
        Ended::Failed(failure)
    }

    /// A step could not be written. Nothing of it is emitted; a lost
    /// compare-and-set to a cancel ends the stream with `abort`.
    async fn store_failed(&mut self, err: StoreError) -> Ended {
        if err.is_conflict() {
            if let Ok(Some(now)) = self.agent.store.get(&self.state.record.run_id).await
                && now.status == RunStatus::Cancelled
            {
                self.state.record = now;
                self.emit(ChunkKind::Abort(AbortPayload {
                    reason: Some("the run was cancelled".into()),
                }));
                return Ended::Cancelled;
            }
            // Another process took the run over (this one's lease ran out)
            // or wrote it: that one goes on from what is stored; nothing of
            // this step is written here.
            let message = format!(
                "run {} was changed by someone else while this process drove it; its step was not written",
                self.state.record.run_id
            );
            self.emit(ChunkKind::Error(ErrorPayload {
                error: ErrorDetail {
                    message: message.clone(),
                },
            }));
            return Ended::Failed(RunFailure::Interrupted { message });
        }
        let failure = RunFailure::Store {
            transient: err.is_transient(),
            message: format!("run {}: could not store the step: {err}", self.state.record.run_id),
        };
        self.fail(failure).await
    }
}

fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
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

/// A finished call: the chunk shows the tool's own value, the model is told
/// its model content.
fn done_result(call: &ToolCall, output: ToolOutput) -> CallOutcome {
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

/// A call that was declined before it ran: the model gets the reason (or
/// the default), the stream `tool-output-denied`.
fn denied(call: &ToolCall, reason: Option<String>) -> CallOutcome {
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

fn error_result(call: &ToolCall, message: String) -> CallOutcome {
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

/// The tool calls of the conversation's last message, when it is a model
/// turn with calls whose results were never stored.
fn unanswered_turn(messages: &[Message]) -> Option<Vec<ToolCall>> {
    match messages.last()? {
        Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => Some(tool_calls.clone()),
        _ => None,
    }
}

/// The tool calls of the last assistant message.
fn last_tool_calls(messages: &[Message]) -> Option<Vec<ToolCall>> {
    messages.iter().rev().find_map(|m| match m {
        Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => Some(tool_calls.clone()),
        _ => None,
    })
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

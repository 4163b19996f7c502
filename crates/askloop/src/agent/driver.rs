//! The async driver: calls the model, runs tools, writes the store, emits
//! chunks. It decides nothing about the run itself: what a call does, what
//! a step writes, where a recovered run goes on and what a lost write means
//! are decided in `machine.rs`.
//!
//! Order of effects in a step: stream the model turn (emitting its chunks as
//! they arrive), run the tools, write the step to the store, and only then
//! emit the tool results and any suspension. A client that saw
//! `tool-call-suspended` can therefore always resume, from any process.

mod calls;
mod turn;

use std::sync::Arc;

use chrono::Utc;
use serde_json::Value;
use tracing::Instrument;

use calls::{denied, done_result};
use turn::{ModelCall, Turn};

use super::expiry;
use super::machine::{self, AfterModel, CallPlan, LostWrite, Recovery, ResumeAction, Step, StepWrite, ToolRules};
use super::stream::Outbox;
use super::{AgentInner, StreamOutput, approval_schema};
use crate::chunk::finish::StepReport;
use crate::chunk::*;
use crate::message::{FinishReason, Message, ToolCall, ToolResult, Usage};
use crate::store::{
    Author, EventRun, Lease, OutboxMessage, PendingKind, PendingToolCall, Resolution, RunFailure, RunRecord, RunStatus,
    RunUpdate, StoreError, Subscription, messages_for,
};
use crate::tool::{ToolContext, ToolOutput};

/// A run as the driver holds it: the stored row (with its current version)
/// and the whole conversation.
pub(crate) struct RunState {
    pub(crate) record: RunRecord,
    pub(crate) messages: Vec<Message>,
}

/// Where a driver starts.
pub(crate) enum Start {
    /// A new run.
    Fresh,
    /// A claimed run, with the decision to apply and who made it (`None`:
    /// the claim stored the decision already, marking its call started).
    Resume(ResumeAction, Option<Author>),
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

            let plans = self.plan_calls(&turn.calls, false, &[]);
            let mut assistant = Some(assistant);
            if machine::store_turn_first(&plans) {
                let turn_only = assistant.take().into_iter().collect();
                if let Err(err) = self
                    .save(RunStatus::Running, turn_only, Vec::new(), Vec::new(), None)
                    .await
                {
                    return self.store_failed(err).await;
                }
            }
            let step = Step {
                calls: calls.clone(),
                ..Step::default()
            };
            match self.finish_calls(step, &calls, &plans, assistant).await {
                Ok(true) => return Ended::Suspended,
                Ok(false) => self.emit(ChunkKind::StepFinish(Box::new(self.report(&turn, true)))),
                Err(ended) => return ended,
            }
        }
    }

    /// Runs a step's calls as planned, records how each ended, writes the
    /// step (with `turn` when it is not stored yet) and then shows the new
    /// results and, when the run waits, what it waits on. `Ok(true)` when it
    /// waits; `Err` when the write failed (the stream's end).
    async fn finish_calls(
        &mut self,
        mut step: Step,
        calls: &[ToolCall],
        plans: &[(CallPlan, ToolRules)],
        turn: Option<Message>,
    ) -> Result<bool, Ended> {
        let mut chunks = Vec::new();
        for outcome in self.run_calls(calls, plans).await {
            chunks.extend(step.resolve(outcome));
        }
        let write = step.write(turn);
        let waiting = write.waiting();
        if let Err(err) = self.save_step(write).await {
            return Err(self.store_failed(err).await);
        }
        for chunk in chunks {
            self.emit(chunk);
        }
        if waiting {
            self.emit_pending();
        }
        Ok(waiting)
    }

    /// Continues a run taken over after its driver stopped (its lease ran
    /// out) or failed (a retry), from its last stored step:
    ///
    /// - calls still pending wait on people: the run is suspended again, and
    ///   a decision that was being applied when the driver stopped (never
    ///   stored) is asked for again; stored answers are never asked again;
    /// - a call approved or answered whose claim marked it started (a tool
    ///   that must not run twice) and that has no result was interrupted;
    /// - calls of the last stored turn that have no result were interrupted:
    ///   each is run again if its tool is idempotent, else the model is told
    ///   it was interrupted;
    /// - otherwise the model call the driver was making is made again.
    async fn recovered(&mut self) -> Ended {
        self.emit(ChunkKind::Start(crate::chunk::Start {
            id: self.agent.id.clone(),
            message_id: self.message_id.clone(),
        }));
        match machine::recovery(&self.state.record, &self.state.messages) {
            Recovery::Resuspend(step) => {
                if let Err(err) = self.save_step(step.write(None)).await {
                    return self.store_failed(err).await;
                }
                self.emit_pending();
                Ended::Suspended
            }
            Recovery::Interrupted { step, started } => {
                let interrupted = step.unresolved();
                let model_calls: Vec<ModelCall> = interrupted
                    .iter()
                    .map(|call| ModelCall {
                        call: call.clone(),
                        malformed: None,
                    })
                    .collect();
                let plans = self.plan_calls(&model_calls, true, &started);
                match self.finish_calls(step, &interrupted, &plans, None).await {
                    Ok(true) => Ended::Suspended,
                    Ok(false) => self.steps().await,
                    Err(ended) => ended,
                }
            }
            Recovery::CallModel => self.steps().await,
        }
    }

    /// Applies a checked decision to its pending call, then carries on.
    async fn resume(&mut self, action: ResumeAction, author: Option<Author>) -> Ended {
        match self.apply(action, author).await {
            Ok(applied) => self.after_apply(applied).await,
            Err(ApplyFailed::Store(err)) => self.store_failed(err).await,
            Err(ApplyFailed::Broken(message)) => self.fail(RunFailure::Broken { message }).await,
        }
    }

    /// Applies a checked decision to its pending call and writes the result,
    /// as one compare-and-set on the version this driver holds. Emits
    /// nothing: what the stream shows comes from [`Driver::after_apply`].
    /// The same write records who decided, among the run's resolutions,
    /// unless the claim did (`author` is `None`).
    pub(crate) async fn apply(&mut self, action: ResumeAction, author: Option<Author>) -> Result<Applied, ApplyFailed> {
        let target_id = action.tool_call_id().to_owned();
        let Some(target) = self
            .state
            .record
            .pending
            .iter()
            .find(|p| p.tool_call_id == target_id)
            .cloned()
        else {
            // Checked before the claim; only a bug gets here.
            return Err(ApplyFailed::Broken(format!(
                "tool call {target_id} is no longer pending"
            )));
        };
        let call = ToolCall {
            id: target.tool_call_id.clone(),
            name: target.tool_name.clone(),
            args: target.args.clone(),
        };
        let run_id = self.state.record.run_id.clone();
        self.resolution = author.map(|author| Resolution::now(Some(&target_id), action.resolution_kind(), author));

        let outcome = match action {
            ResumeAction::Answer { data, .. } => {
                let ctx = ToolContext::in_run(&run_id, &call.id).resumed(target.suspend_payload.clone(), Some(data));
                self.execute(&call, ctx).await
            }
            ResumeAction::Approve { .. } => self.execute(&call, ToolContext::in_run(&run_id, &call.id)).await,
            ResumeAction::DeclineQuestion { reason, .. } => match self
                .agent
                .decline_as_answer(&call.name, reason.as_deref())
            {
                Some(data) => {
                    let ctx =
                        ToolContext::in_run(&run_id, &call.id).resumed(target.suspend_payload.clone(), Some(data));
                    self.execute(&call, ctx).await
                }
                None => {
                    let text = match reason {
                        Some(reason) if !reason.trim().is_empty() => format!("The user declined to answer: {reason}"),
                        _ => "The user declined to answer.".to_owned(),
                    };
                    done_result(&call, ToolOutput::text(text))
                }
            },
            ResumeAction::DeclineApproval { reason, .. } => denied(&call, reason.filter(|r| !r.trim().is_empty())),
            ResumeAction::Expire { .. } => match target.kind {
                PendingKind::Suspended => done_result(
                    &call,
                    ToolOutput::text(expiry::expired_question_text(target.expires_at)),
                ),
                PendingKind::Approval => denied(&call, Some(expiry::expired_approval_reason(target.expires_at))),
            },
        };

        let Some(mut step) = Step::stored(&self.state.record, &self.state.messages) else {
            return Err(ApplyFailed::Broken(
                "the stored conversation has no tool calls to answer".to_owned(),
            ));
        };
        let chunk = step.resolve(outcome);
        let write = step.write(None);
        let waiting = write.waiting();
        self.save_step(write).await.map_err(ApplyFailed::Store)?;
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

    /// Writes a step's state as the machine decided it.
    async fn save_step(&mut self, write: StepWrite) -> Result<(), StoreError> {
        self.save(write.status, write.append, write.pending, write.step_results, None)
            .await
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
        // The decision being applied goes with this write only: a write
        // that fails takes it along.
        let resolution = self.resolution.take();
        let record = &self.state.record;
        let outbox = notifications(&self.agent.subscriptions, record, &pending, resolution.as_ref());
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
            resolution: resolution.as_ref(),
            outbox: &outbox,
        };
        let version = self.agent.store.update(update).await?;
        self.state.record.resolutions.extend(resolution);
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
            let now = self.agent.store.get(&self.state.record.run_id).await.ok().flatten();
            if let (LostWrite::Cancelled, Some(now)) = (machine::lost_write(now.as_ref().map(|r| r.status)), now) {
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

/// The notifications a write of `record` announces, for the agent's
/// subscriptions: each call of `pending` that did not wait before is raised,
/// and the decision applied resolves the call as it waited. Nothing (and no
/// work) for an agent without subscriptions.
pub(super) fn notifications(
    subscriptions: &[Subscription],
    record: &RunRecord,
    pending: &[PendingToolCall],
    resolution: Option<&Resolution>,
) -> Vec<OutboxMessage> {
    if subscriptions.is_empty() {
        return Vec::new();
    }
    let waited = &record.pending;
    let raised: Vec<&PendingToolCall> = pending
        .iter()
        .filter(|p| !waited.iter().any(|w| w.tool_call_id == p.tool_call_id))
        .collect();
    let resolved = resolution.map(|r| {
        let call = r
            .tool_call_id
            .as_deref()
            .and_then(|id| waited.iter().find(|w| w.tool_call_id == id));
        (r, call)
    });
    let run = EventRun {
        run_id: &record.run_id,
        agent_id: &record.agent_id,
    };
    messages_for(subscriptions, run, &raised, resolved)
}

//! The async driver: carries out the run machine's effects (model calls,
//! tools, store writes, chunks) and tells it how each went. It decides
//! nothing about the run itself: what a call does, what a step writes,
//! where a recovered run goes on and what a lost write means are the
//! machine's (`machine/run.rs`).
//!
//! The loop: take the machine's next effect, carry it out, turn the outcome
//! into the next event. The model's text and tool-call chunks pass through
//! as they stream; everything else the stream shows comes from the machine,
//! which emits a step's results and suspensions only once the step is
//! stored. A client that saw `tool-call-suspended` can therefore always
//! resume, from any process.

mod calls;
mod turn;

use std::sync::Arc;

use chrono::Utc;
use tracing::Instrument;

use super::machine::{
    CheckedCall, Effect, End, Event, Resume, ResumeAction, RunMachine, RunWrite, StepSummary, last_tool_calls,
};
use super::stream::Outbox;
use super::{AgentInner, StreamOutput};
use crate::chunk::finish::StepReport;
use crate::chunk::*;
use crate::message::{FinishReason, Message, Usage};
use crate::store::{
    Author, EventRun, Lease, OutboxMessage, PendingToolCall, Resolution, RunFailure, RunRecord, RunStatus, RunUpdate,
    StoreError, Subscription, messages_for,
};

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
    /// A decision already applied and written (see `Driver::apply`): the
    /// machine goes on from there.
    Applied,
    /// A run taken over after its driver stopped.
    Recovered,
}

/// Why a decision could not be applied.
pub(crate) enum ApplyFailed {
    /// The write failed (a lost compare-and-set is `StoreError::Conflict`).
    Store(StoreError),
    /// The stored run is not in a state the decision fits (a bug, or a
    /// damaged row).
    Broken(String),
}

pub(crate) struct Driver {
    agent: Arc<AgentInner>,
    state: RunState,
    machine: RunMachine,
    chunks: Outbox,
    /// The id of the message this stream's steps produce (one per stream,
    /// as Mastra's: `start`, every `step-start` and `step-finish`, `finish`).
    message_id: String,
    /// The text the model produced in this stream.
    text: String,
    /// Who holds the run's lease while this driver has it running: the
    /// owner of the lease the run was claimed or created with, else a new
    /// one (taken by the first write that keeps the run running).
    lease_owner: String,
}

impl Driver {
    pub(crate) fn new(agent: Arc<AgentInner>, mut state: RunState, chunks: Outbox) -> Self {
        let lease_owner = match &state.record.lease {
            Some(lease) => lease.owner.clone(),
            None => new_id(),
        };
        let message_id = new_id();
        let tools = agent
            .specs
            .iter()
            .filter_map(|spec| agent.tools.get(&spec.name).map(|t| (spec.name.clone(), t.rules())))
            .collect();
        // The machine holds the run's pending calls and step results from
        // here on (the driver reads them there): no copy of them per write.
        let machine = RunMachine::new(
            &mut state.record,
            agent.id.clone(),
            message_id.clone(),
            tools,
            agent.max_steps,
        );
        Driver {
            agent,
            state,
            machine,
            chunks,
            message_id,
            text: String::new(),
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
            let first = match start {
                Start::Fresh => Some(Event::Started),
                Start::Resume(action, author) => Some(Event::Resumed(self.resume(action, author, true))),
                Start::Applied => None,
                Start::Recovered => Some(self.recovered()),
            };
            self.drive(first).await
        };
        let ended = super::lease::while_renewing(work, heartbeat).await;
        self.output(ended)
    }

    /// The loop: feeds `first` (if any) to the machine, then carries out
    /// its effects, turning each outcome into the next event, until the
    /// machine finishes the stream.
    async fn drive(&mut self, first: Option<Event>) -> End {
        if let Some(event) = first {
            self.machine.handle(event);
        }
        loop {
            let Some(effect) = self.machine.poll_effect() else {
                return self.stalled();
            };
            let event = match effect {
                Effect::Emit(chunk) => {
                    self.emit(chunk);
                    continue;
                }
                Effect::ReportStep { summary, finish } => {
                    self.report(summary, finish);
                    continue;
                }
                Effect::Finish(end) => return end,
                Effect::CallModel { step } => self.call_model(step).await,
                Effect::RunTools(runs) => Event::ToolsReturned(self.run_tools(runs).await),
                Effect::Save(write) => match self.save(write).await {
                    Ok(write) => Event::Saved(write),
                    Err(err) => save_failed(&err),
                },
                Effect::ReadRun => {
                    let now = self.agent.store.get(&self.state.record.run_id).await.ok().flatten();
                    Event::RunRead(now.map(Box::new))
                }
                Effect::Refused(message) => return End::Failed(RunFailure::Broken { message }),
            };
            self.machine.handle(event);
        }
    }

    /// The machine left nothing to do without ending the stream: a bug in
    /// it, reported as the run's failure.
    fn stalled(&mut self) -> End {
        let message = format!(
            "run {}: the run machine stopped without an end",
            self.state.record.run_id
        );
        self.emit(ChunkKind::Error(ErrorPayload {
            error: ErrorDetail {
                message: message.clone(),
            },
        }));
        End::Failed(RunFailure::Broken { message })
    }

    fn output(self, ended: End) -> StreamOutput {
        let RunState { mut record, messages } = self.state;
        let pending = self.machine.into_pending();
        let (status, finish_reason, failure) = match ended {
            End::Completed => (RunStatus::Completed, FinishReason::Stop, None),
            End::Suspended => (RunStatus::Suspended, FinishReason::Suspended, None),
            End::Failed(failure) => (RunStatus::Failed, FinishReason::Error, Some(failure)),
            End::Cancelled(now) => {
                record = *now;
                (RunStatus::Cancelled, FinishReason::Cancelled, None)
            }
        };
        if status == RunStatus::Suspended {
            self.agent.conversations.put(&record.run_id, record.version, messages);
        }
        StreamOutput {
            run_id: record.run_id,
            status,
            finish_reason,
            text: self.text,
            pending: if status == RunStatus::Suspended {
                pending
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

    /// Calls the model: `step-start`, then the turn as it streams.
    async fn call_model(&mut self, step: u32) -> Event {
        let started_at = Utc::now();
        self.emit(ChunkKind::StepStart(StepStart {
            message_id: self.message_id.clone(),
            started_at: started_at.timestamp_millis(),
            warnings: Vec::new(),
            request: serde_json::Map::new(),
        }));
        let span = tracing::info_span!("model_step", run_id = %self.state.record.run_id, step);
        match self.model_turn(started_at).instrument(span).await {
            Ok(turn) => Event::ModelFinished(turn),
            Err(err) => Event::ModelFailed {
                transient: err.is_transient(),
                message: err.to_string(),
            },
        }
    }

    /// What a run taken over has stored of its last turn with tool calls,
    /// checked against the tools as a model's turn is.
    fn recovered(&self) -> Event {
        let messages = &self.state.messages;
        let ends_on_calls =
            matches!(messages.last(), Some(Message::Assistant { tool_calls, .. }) if !tool_calls.is_empty());
        let last_calls = last_tool_calls(messages).map(|calls| {
            calls
                .into_iter()
                .map(|call| CheckedCall {
                    invalid: self.invalid_input(&call),
                    call,
                    malformed: None,
                })
                .collect()
        });
        Event::Recovered {
            last_calls,
            ends_on_calls,
        }
    }

    /// A decision as the machine takes it, with what the driver knows of
    /// its call: who decided (`author`; `None` when the claim recorded
    /// it), what the tool takes a decline as, and the stored turn.
    fn resume(&self, action: ResumeAction, author: Option<Author>, claimed: bool) -> Resume {
        let id = action.tool_call_id();
        let resolution = author.map(|author| Resolution::now(Some(id), action.resolution_kind(), author));
        let decline_answer = match &action {
            ResumeAction::DeclineQuestion { reason, .. } => self
                .machine
                .pending()
                .iter()
                .find(|p| p.tool_call_id == id)
                .and_then(|p| self.agent.decline_as_answer(&p.tool_name, reason.as_deref())),
            _ => None,
        };
        Resume {
            action,
            resolution,
            decline_answer,
            turn_calls: last_tool_calls(&self.state.messages),
            claimed,
        }
    }

    /// Applies a checked decision to its pending call and writes the
    /// result, as one compare-and-set on the version this driver holds:
    /// the write is the run's claim. Returns once it is stored, emitting
    /// nothing yet: the machine goes on from there when the stream runs
    /// (`Start::Applied`). The same write records who decided, among the
    /// run's resolutions.
    pub(crate) async fn apply(&mut self, action: ResumeAction, author: Author) -> Result<(), ApplyFailed> {
        let resume = self.resume(action, Some(author), false);
        self.machine.handle(Event::Resumed(resume));
        loop {
            let event = match self.machine.poll_effect() {
                Some(Effect::RunTools(runs)) => Event::ToolsReturned(self.run_tools(runs).await),
                Some(Effect::Save(write)) => {
                    let write = self.save(write).await.map_err(ApplyFailed::Store)?;
                    self.machine.handle(Event::Saved(write));
                    return Ok(());
                }
                Some(Effect::Refused(message)) => return Err(ApplyFailed::Broken(message)),
                other => {
                    return Err(ApplyFailed::Broken(format!(
                        "applying a decision, the run machine asked for {other:?}"
                    )));
                }
            };
            self.machine.handle(event);
        }
    }

    /// Emits the `step-finish` of the last stored turn (and `finish`), as
    /// the machine summed it up; the payload renders the conversation.
    fn report(&self, summary: StepSummary, finish: Option<Usage>) {
        let step_finish = StepFinish::report(StepReport {
            message_id: &self.message_id,
            model_name: self.agent.model.name(),
            started_at: summary.started_at,
            reason: summary.reason,
            is_continued: summary.is_continued,
            usage: summary.usage,
            conversation: &self.state.messages,
        });
        match finish {
            Some(usage) => {
                self.emit(ChunkKind::StepFinish(Box::new(step_finish.clone())));
                self.emit(ChunkKind::Finish(Box::new(step_finish.into_finish(usage))));
            }
            None => self.emit(ChunkKind::StepFinish(Box::new(step_finish))),
        }
    }

    /// Writes the run's new state and appends messages, as one
    /// compare-and-set on the version this driver holds. A write that
    /// landed is handed back for the machine, its messages taken into the
    /// conversation.
    async fn save(&mut self, mut write: RunWrite) -> Result<RunWrite, StoreError> {
        let error = write.failure.as_ref().map(RunFailure::message);
        // A run that stays running stays held, for a full lease from now.
        let lease = (write.status == RunStatus::Running)
            .then(|| Lease::new(self.lease_owner.clone(), Utc::now() + self.agent.lease_duration));
        let record = &self.state.record;
        let outbox = notifications(
            &self.agent.subscriptions,
            record,
            self.machine.pending(),
            &write.pending,
            write.resolution.as_ref(),
        );
        let update = RunUpdate {
            run_id: &record.run_id,
            expected_version: record.version,
            status: write.status,
            pending: &write.pending,
            step_results: &write.step_results,
            append: &write.append,
            steps: write.steps,
            usage: write.usage,
            error: error.as_deref(),
            failure: write.failure.as_ref(),
            lease: lease.as_ref(),
            resolution: write.resolution.as_ref(),
            outbox: &outbox,
        };
        let stored = self.agent.store.update(update).await;
        let record = &mut self.state.record;
        // The counters are the machine's, whether or not this write lands.
        record.steps = write.steps;
        record.usage = write.usage;
        let version = match stored {
            Ok(version) => version,
            Err(err) => {
                if write.failure.is_some() {
                    tracing::warn!(run_id = %record.run_id, error = %err, "could not record the run's failure");
                }
                return Err(err);
            }
        };
        // What the machine takes back is what is stored of the run: its
        // status, pending calls and step results; the rest goes here.
        record.resolutions.extend(write.resolution.take());
        record.version = version;
        record.status = write.status;
        record.message_count += write.append.len() as i64;
        record.error = error;
        record.failure = write.failure.take();
        record.lease = lease;
        self.state.messages.append(&mut write.append);
        Ok(write)
    }
}

/// A failed write, as the machine weighs it.
fn save_failed(err: &StoreError) -> Event {
    Event::SaveFailed {
        conflict: err.is_conflict(),
        transient: err.is_transient(),
        message: err.to_string(),
    }
}

fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// The notifications a write of `record` announces, for the agent's
/// subscriptions: each call of `pending` that was not among the calls that
/// `waited` before is raised, and the decision applied resolves the call
/// as it waited. Nothing (and no work) for an agent without subscriptions.
pub(super) fn notifications(
    subscriptions: &[Subscription],
    record: &RunRecord,
    waited: &[PendingToolCall],
    pending: &[PendingToolCall],
    resolution: Option<&Resolution>,
) -> Vec<OutboxMessage> {
    if subscriptions.is_empty() {
        return Vec::new();
    }
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

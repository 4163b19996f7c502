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

use tracing::Instrument;

use super::inner::AgentInner;
use super::lease::Released;
use super::machine::expiry;
use super::machine::{
    ApplyFailure, CheckedCall, Decided, Decisions, DriveFrom, Effect, End, Event, FittedDecision, RunMachine, RunWrite,
    StepSummary, last_tool_calls, notifications, record_landed,
};
use super::stream::{ChunkQueue, StreamOutput};
use super::tools::ToolTable;
use crate::cause::ErrorChain;
use crate::chunk::finish::{ConvertedConversation, StepReport};
use crate::chunk::*;
use crate::message::{FinishReason, Message, Usage};
use crate::model::ToolSpec;
use crate::store::{
    Author, Lease, OutboxMessage, PendingToolCall, RunFailure, RunRecord, RunStatus, RunUpdate, StoreError,
};
use crate::telemetry::{self, DriveKind};

/// A run as the driver holds it: the stored row (with its current version)
/// and the whole conversation.
pub(crate) struct RunState {
    pub(crate) record: RunRecord,
    pub(crate) messages: Vec<Message>,
    /// The conversation as far as `step-finish` payloads converted it.
    pub(crate) converted: ConvertedConversation,
}

impl RunState {
    /// A run whose conversation no payload has converted yet.
    pub(crate) fn new(record: RunRecord, messages: Vec<Message>) -> Self {
        RunState {
            record,
            messages,
            converted: ConvertedConversation::default(),
        }
    }
}

/// A call's wait that a decision ended, for its span.
struct EndedWait {
    call: PendingToolCall,
    how: crate::store::ResolutionKind,
    author: Option<Author>,
    raised_at: chrono::DateTime<chrono::Utc>,
    resolved_at: chrono::DateTime<chrono::Utc>,
}

impl EndedWait {
    fn write(&self, record: &RunRecord) {
        telemetry::wait_ended(
            record,
            &self.call,
            self.how,
            self.author.as_ref(),
            self.raised_at,
            self.resolved_at,
        );
    }
}

/// Where a driver starts.
pub(crate) enum Begin {
    /// A new run.
    Fresh,
    /// A claimed run, with the decisions to apply together and who made
    /// each (`None`: the claim stored that decision already, marking its
    /// call started).
    Resume(Vec<(FittedDecision, Option<Author>)>),
    /// A decision already applied and written (see `Driver::apply`): the
    /// machine goes on from there.
    Applied,
    /// A run taken over after its driver stopped.
    Recovered,
}

impl From<DriveFrom> for Begin {
    fn from(start: DriveFrom) -> Self {
        match start {
            DriveFrom::Resume(decisions) => Begin::Resume(decisions),
            DriveFrom::Recovered => Begin::Recovered,
        }
    }
}

pub(crate) struct Driver {
    agent: Arc<AgentInner>,
    state: RunState,
    /// The agent's tools as they were when this driver started: one set for
    /// the whole drive (see `tools.rs`).
    tools: Arc<ToolTable>,
    /// The tools offered to the model, when the run's settings leave out
    /// some of the agent's (`None`: all of them).
    tool_specs: Option<Vec<ToolSpec>>,
    machine: RunMachine,
    chunks: ChunkQueue,
    /// The id of the message this stream's steps produce (one per stream,
    /// as Mastra's: `start`, every `step-start` and `step-finish`, `finish`).
    message_id: String,
    /// The text the model produced in this stream.
    text: String,
    /// Who holds the run's lease while this driver has it running: the
    /// owner of the lease the run was claimed or created with, else a new
    /// one (taken by the first write that keeps the run running).
    lease_owner: String,
    /// The live approvals that stick of the run's resource, read before
    /// each model call (a grant revoked meanwhile covers nothing from the
    /// next call on).
    grants: Vec<crate::Grant>,
    /// The span of this drive, once made (see [`Driver::run`]): a decision
    /// applied before the stream runs (`apply`) is part of the drive.
    span: Option<tracing::Span>,
    /// Whether the run is no longer this driver's (see `lease.rs`): the
    /// tool calls it waits on are given up then.
    released: Released,
}

impl Driver {
    pub(crate) fn new(agent: Arc<AgentInner>, mut state: RunState, chunks: ChunkQueue) -> Self {
        let lease_owner = match &state.record.lease {
            Some(lease) => lease.owner.clone(),
            None => new_id(),
        };
        let message_id = new_id();
        // The run's own settings, stored with it, hold in every stream.
        let settings = &state.record.settings;
        let table = agent.tools();
        let tools = agent.tool_rules_for(&table, settings);
        let max_steps = agent.max_steps_for(settings);
        let tool_specs = AgentInner::tool_specs_for(&table, settings);
        // The machine holds the run's pending calls and step results from
        // here on (the driver reads them there): no copy of them per write.
        let machine = RunMachine::new(
            &mut state.record,
            agent.id.clone(),
            message_id.clone(),
            tools,
            max_steps,
        );
        Driver {
            agent,
            state,
            tools: table,
            tool_specs,
            machine,
            chunks,
            message_id,
            text: String::new(),
            lease_owner,
            grants: Vec::new(),
            span: None,
            released: Released::never(),
        }
    }

    /// This drive's span, made now, in the run's stored trace, if not made
    /// yet.
    fn drive_span(&mut self, kind: DriveKind) -> tracing::Span {
        let record = &self.state.record;
        self.span
            .get_or_insert_with(|| {
                telemetry::drive_span(&record.run_id, &self.agent.id, record.trace_parent.as_deref(), kind)
            })
            .clone()
    }

    /// Drives the run until it completes, suspends or fails, renewing its
    /// lease meanwhile (see [`super::lease::heartbeat`]).
    ///
    /// The drive's span is `span` when given (a new run's, made before the
    /// run was stored: its trace context is stored with it), else made
    /// here, now, in the run's stored trace (see [`crate::telemetry`]).
    pub(crate) fn run(
        mut self,
        start: Begin,
        span: Option<tracing::Span>,
    ) -> impl Future<Output = StreamOutput> + use<> {
        // Every line logged while the run is driven (its model calls, its
        // tools, its writes) carries the run's id and agent, also when no
        // request drives it (a recovery, a client gone away, the CLI).
        let kind = match start {
            Begin::Fresh => DriveKind::Start,
            Begin::Recovered => DriveKind::Recover,
            Begin::Resume(_) | Begin::Applied => DriveKind::Resume,
        };
        let span = span.unwrap_or_else(|| self.drive_span(kind));
        self.run_in_span(start).instrument(span)
    }

    async fn run_in_span(mut self, start: Begin) -> StreamOutput {
        let (wake, _driving) = self.agent.drives.enter(&self.state.record.run_id);
        let (lost, released) = Released::pair();
        self.released = released;
        let heartbeat = super::lease::heartbeat(
            Arc::clone(&self.agent.store),
            Arc::clone(&self.agent.clock),
            self.state.record.run_id.clone(),
            self.lease_owner.clone(),
            self.agent.lease_duration,
            wake,
            lost,
        );
        let work = async {
            let first = match start {
                Begin::Fresh => Some(Event::Started),
                Begin::Resume(decisions) => {
                    // The claim that holds the run stored the decisions:
                    // their waits have ended.
                    let waits = self.ended_waits(&decisions);
                    self.let_go(&waits);
                    for wait in waits {
                        wait.write(&self.state.record);
                    }
                    Some(Event::Decided(self.resume(decisions, true)))
                }
                Begin::Applied => None,
                Begin::Recovered => {
                    self.read_grants().await;
                    Some(self.recovered())
                }
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
                Effect::RunTools(runs) => self.tools_returned(runs).await,
                Effect::Save(write) => match self.save(write).await {
                    Ok(write) => Event::Saved(write),
                    Err(err) => {
                        // A lost compare-and-set is the machine's to judge
                        // (another process took the run); anything else is
                        // logged here with what caused it.
                        if !err.is_conflict() {
                            let run_id = &self.state.record.run_id;
                            tracing::warn!(run_id = %run_id, error = %ErrorChain(&err), "the run's write failed");
                        }
                        Event::SaveFailed(err)
                    }
                },
                Effect::ReadRun => {
                    let now = self.agent.store.get(&self.state.record.run_id).await;
                    Event::RunRead(now.map(|run| run.map(Box::new)))
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
        let RunState {
            mut record,
            messages,
            converted,
        } = self.state;
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
            self.agent
                .conversations
                .put(&record.run_id, record.version, messages, converted);
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
            failure,
        }
    }

    /// Leaves a chunk for the stream. It never waits: the stream polls the
    /// driver only once it has handed out what was left.
    fn emit(&self, kind: ChunkKind) {
        match &kind {
            ChunkKind::ToolCallSuspended(p) => telemetry::question_raised(&p.tool_name, &p.tool_call_id, "question"),
            ChunkKind::ToolCallApproval(p) => telemetry::question_raised(&p.tool_name, &p.tool_call_id, "approval"),
            _ => {}
        }
        let chunk = Chunk::new(&self.state.record.run_id, kind);
        self.chunks.lock().unwrap_or_else(|p| p.into_inner()).push_back(chunk);
    }

    /// Reads the live grants of the run's resource into
    /// [`Driver::grants`]: none for a run on no thread, an agent none of
    /// whose calls can wait for approval, or a store without grants. A
    /// store that fails leaves none: calls then wait for a person.
    async fn read_grants(&mut self) {
        self.grants.clear();
        let (Some(memory), Some(store)) = (&self.state.record.memory, self.agent.store.grant_store()) else {
            return;
        };
        if !self.agent.asks_approval() {
            return;
        }
        let now = self.agent.clock.now();
        match store.live_grants(&self.agent.id, &memory.key.resource_id, now).await {
            Ok(grants) => self.grants = grants,
            Err(err) => {
                let run_id = &self.state.record.run_id;
                tracing::warn!(run_id = %run_id, error = %ErrorChain(&err), "reading the approvals that stick failed; calls wait for a person");
            }
        }
    }

    /// Calls the model: `step-start`, then the turn as it streams.
    async fn call_model(&mut self, step: u32) -> Event {
        self.read_grants().await;
        let started_at = self.agent.clock.now();
        self.emit(ChunkKind::StepStart(StepStart {
            message_id: self.message_id.clone(),
            started_at: started_at.timestamp_millis(),
            warnings: Vec::new(),
            request: serde_json::Map::new(),
        }));
        let span = telemetry::model_span(&self.state.record.run_id, step, self.agent.model.name());
        match self.model_turn(started_at).instrument(span.clone()).await {
            Ok(turn) => {
                telemetry::model_call_ended(&span, turn.usage, &turn.reason, &turn.text);
                Event::ModelFinished(turn)
            }
            Err(err) => {
                let run_id = &self.state.record.run_id;
                tracing::warn!(run_id = %run_id, error = %ErrorChain(&err), "the model call failed");
                Event::ModelFailed(err)
            }
        }
    }

    /// What a run taken over has stored of its last turn with tool calls,
    /// checked against the tools as a model's turn is.
    fn recovered(&self) -> Event {
        let messages = &self.state.messages;
        let ends_on_calls =
            matches!(messages.last(), Some(Message::Assistant { tool_calls, .. }) if !tool_calls.is_empty());
        // A call approved with edited arguments runs (if it runs again)
        // with exactly those, as stored with its approval.
        let mut edited = Vec::new();
        let last_calls = last_tool_calls(messages).map(|calls| {
            calls
                .into_iter()
                .map(|mut call| {
                    if let Some(edit) = self.state.record.resolution_of(&call.id).and_then(|r| r.edit.as_ref()) {
                        call.args = Arc::new(edit.edited.clone());
                        edited.push((call.id.clone(), edit.edited.clone()));
                    }
                    let invalid = self.invalid_input(&call);
                    let ruling = match invalid {
                        None => self.agent.ruling(&call, &self.state.record, &self.grants),
                        Some(_) => None,
                    };
                    CheckedCall {
                        invalid,
                        call,
                        malformed: None,
                        ruling,
                    }
                })
                .collect()
        });
        Event::Recovered {
            last_calls,
            ends_on_calls,
            edited,
        }
    }

    /// The waits `decisions` end, for their spans (see
    /// [`telemetry::wait_ended`]): each decided call as it waited, from the
    /// run's last stored write before the decisions to now; who decided, as
    /// given or as the claim recorded it.
    fn ended_waits(&self, decisions: &[(FittedDecision, Option<Author>)]) -> Vec<EndedWait> {
        let now = self.agent.clock.now();
        let record = &self.state.record;
        decisions
            .iter()
            .filter_map(|(action, author)| {
                let id = action.tool_call_id();
                let call = self.machine.pending().iter().find(|p| p.tool_call_id == id)?;
                // A decision the claim stored has its time and author in
                // the run's audit record; the others are stored from now.
                let stored = author.is_none().then(|| record.resolution_of(id)).flatten();
                Some(EndedWait {
                    call: call.clone(),
                    how: action.resolution_kind(),
                    author: author.clone().or_else(|| stored.map(|r| r.author.clone())),
                    raised_at: record.updated_at,
                    resolved_at: stored.map_or(now, |r| r.at),
                })
            })
            .collect()
    }

    /// Tells the tools of the calls whose waits ended without their tool
    /// running again (an expiry; a decline the tool takes no answer for)
    /// to let go of what they held for them.
    fn let_go(&self, waits: &[EndedWait]) {
        use crate::store::ResolutionKind;
        let closed = waits.iter().filter(|wait| match wait.how {
            ResolutionKind::Expired => true,
            ResolutionKind::Declined => self.agent.decline_as_answer(&wait.call.tool_name, None).is_none(),
            _ => false,
        });
        self.agent
            .forget_calls(&self.state.record, closed.map(|wait| &wait.call));
    }

    /// Decisions as the machine takes them, with what the driver knows of
    /// their calls: who decided each (`None` when the claim recorded it),
    /// what a tool takes a decline as, and the stored turn.
    fn resume(&self, decisions: Vec<(FittedDecision, Option<Author>)>, claimed: bool) -> Decisions {
        let now = self.agent.clock.now();
        let decisions = decisions
            .into_iter()
            .map(|(action, author)| {
                let id = action.tool_call_id();
                let call = self.machine.pending().iter().find(|p| p.tool_call_id == id);
                let resolution = author.map(|author| expiry::resolution(call, &action, author, now));
                let decline_answer = match (&action, call) {
                    (FittedDecision::DeclineQuestion { reason, .. }, Some(call)) => {
                        self.agent.decline_as_answer(&call.tool_name, reason.as_deref())
                    }
                    _ => None,
                };
                Decided {
                    action,
                    resolution,
                    decline_answer,
                }
            })
            .collect();
        Decisions {
            decisions,
            turn_calls: last_tool_calls(&self.state.messages),
            claimed,
        }
    }

    /// Applies checked decisions to their pending calls and writes the
    /// results, as one compare-and-set on the version this driver holds:
    /// the write is the run's claim. Returns once it is stored, emitting
    /// nothing yet: the machine goes on from there when the stream runs
    /// (`Begin::Applied`). The same write records who decided, among the
    /// run's resolutions.
    pub(crate) async fn apply(&mut self, actions: Vec<FittedDecision>, author: Author) -> Result<(), ApplyFailure> {
        let span = self.drive_span(DriveKind::Resume);
        self.apply_in_span(actions, author).instrument(span).await
    }

    async fn apply_in_span(&mut self, actions: Vec<FittedDecision>, author: Author) -> Result<(), ApplyFailure> {
        let decisions = actions
            .into_iter()
            .map(|action| (action, Some(author.clone())))
            .collect::<Vec<_>>();
        let waits = self.ended_waits(&decisions);
        let resume = self.resume(decisions, false);
        self.machine.handle(Event::Decided(resume));
        loop {
            let event = match self.machine.poll_effect() {
                Some(Effect::RunTools(runs)) => self.tools_returned(runs).await,
                Some(Effect::Save(write)) => {
                    let write = self.save(write).await.map_err(ApplyFailure::Store)?;
                    self.machine.handle(Event::Saved(write));
                    // Only a decision that was stored ends a wait.
                    self.let_go(&waits);
                    for wait in waits {
                        wait.write(&self.state.record);
                    }
                    return Ok(());
                }
                Some(Effect::Refused(message)) => return Err(self.refused(message)),
                // The run machine answers a decision with tools, a write or
                // a refusal: anything else is a bug of askloop.
                other => {
                    return Err(ApplyFailure::Refused(crate::error::RunError::internal(
                        &self.state.record.run_id,
                        format!("applying a decision, the run machine asked for {other:?}"),
                    )));
                }
            };
            self.machine.handle(event);
        }
    }

    /// Why the run as stored did not take a decision, as the request that
    /// brought it is told.
    fn refused(&self, detail: String) -> ApplyFailure {
        ApplyFailure::Refused(crate::error::RunError::Refused {
            run_id: self.state.record.run_id.clone(),
            detail,
        })
    }

    /// Emits the `step-finish` of the last stored turn (and `finish`), as
    /// the machine summed it up; the payload renders the conversation.
    fn report(&mut self, summary: StepSummary, finish: Option<Usage>) {
        let step_finish = StepFinish::report(
            StepReport {
                message_id: &self.message_id,
                model_name: self.agent.model.name(),
                started_at: summary.started_at,
                reason: summary.reason,
                is_continued: summary.is_continued,
                usage: summary.usage,
                conversation: &self.state.messages,
            },
            &mut self.state.converted,
        );
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
        // The machine says whether the run stays held: a full lease from now.
        let lease = write.hold.then(|| {
            Lease::new(
                self.lease_owner.clone(),
                self.agent.clock.now() + self.agent.lease_duration,
            )
        });
        let record = &self.state.record;
        let update = store_update(&self.agent, record, self.machine.pending(), &write, lease.as_ref());
        let stored = self.agent.store.update(update.as_update()).await;
        let version = match stored {
            Ok(version) => version,
            Err(err) => {
                // The counters are the machine's, whether or not this write
                // lands.
                let record = &mut self.state.record;
                record.steps = write.steps;
                record.usage = write.usage;
                if write.failure.is_some() {
                    tracing::warn!(run_id = %record.run_id, error = %err, "could not record the run's failure");
                }
                return Err(err);
            }
        };
        // What the machine takes back is what is stored of the run: its
        // status, pending calls and step results; the rest goes here.
        record_landed(&mut self.state.record, &mut write, version, lease);
        self.state.messages.append(&mut write.append);
        Ok(write)
    }

    /// Runs the step's tools; when they returned, with the time.
    async fn tools_returned(&self, runs: Vec<super::machine::ToolRun>) -> Event {
        let outcomes = self.run_tools(runs).await;
        Event::ToolsReturned {
            outcomes,
            now: self.agent.clock.now(),
        }
    }

    /// The run's id.
    pub(crate) fn run_id(&self) -> &str {
        &self.state.record.run_id
    }
}

/// A machine write as the store takes it: the one place a write becomes a
/// [`RunUpdate`], with the failure's text for the row's `error` column and
/// the notifications it raises for the agent's subscriptions. `waited`:
/// the calls pending before the write.
pub(crate) fn store_update<'a>(
    agent: &AgentInner,
    record: &'a RunRecord,
    waited: &[PendingToolCall],
    write: &'a RunWrite,
    lease: Option<&'a Lease>,
) -> StoreUpdate<'a> {
    StoreUpdate {
        record,
        write,
        lease,
        error: write.failure.as_ref().map(RunFailure::message),
        outbox: notifications(
            &agent.subscriptions,
            record,
            waited,
            &write.pending,
            &write.resolutions,
            agent.clock.now(),
        ),
    }
}

/// A machine write with what the store needs beside it (see
/// [`store_update`]).
pub(crate) struct StoreUpdate<'a> {
    record: &'a RunRecord,
    write: &'a RunWrite,
    lease: Option<&'a Lease>,
    error: Option<String>,
    outbox: Vec<OutboxMessage>,
}

impl StoreUpdate<'_> {
    /// The compare-and-set on the version the record holds.
    pub(crate) fn as_update(&self) -> RunUpdate<'_> {
        let write = self.write;
        RunUpdate {
            run_id: &self.record.run_id,
            expected_version: self.record.version,
            status: write.status,
            pending: &write.pending,
            step_results: &write.step_results,
            append: &write.append,
            steps: write.steps,
            usage: write.usage,
            error: self.error.as_deref(),
            failure: write.failure.as_ref(),
            lease: self.lease,
            resolutions: &write.resolutions,
            outbox: &self.outbox,
            grants: &write.grants,
        }
    }
}

fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

//! The run as a machine of events in, effects out.
//!
//! [`RunMachine`] holds what a driver needs to decide anything about a run:
//! the phase it is in, the step's calls, their plans and results, what is
//! stored of the run (status, pending calls, results) and its counters. It
//! takes [`Event`]s (the model finished, the tools returned, a write landed
//! or was lost, a person decided) and queues [`Effect`]s (call the model,
//! run tools, save, emit a chunk, finish), which the driver takes one at a
//! time with [`RunMachine::poll_effect`], quinn-proto's shape. It does no
//! I/O, awaits nothing and reads no clock: time comes in with the events
//! (a turn's start, a pending call's deadline, a decision's resolution).
//! So every decision of a run can be tested by feeding events, with no
//! store and no model (see the tests below and `machine_properties.rs`).
//!
//! What stays with the driver is carrying effects out: streaming the model
//! (its text and tool-call chunks pass through as they arrive, with the
//! `step-start` that opens them), running tools, stamping a new waiting
//! call with its time limit, the store write with its lease and
//! notifications, and the `step-finish` payload, which renders the stored
//! conversation the machine does not hold.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::expiry;
use super::{
    AfterModel, CallFacts, CallOutcome, CallPlan, FittedDecision, LostWrite, Recovery, Ruling, Step, StepWrite,
    ToolRules, after_model, approval_schema, denied, done_result, error_result, lost_write, may_call_model, plan_call,
    recovery_at, store_turn_first,
};
use crate::chunk::{AbortPayload, ChunkKind, ErrorDetail, ErrorPayload, Start, ToolCallApproval, ToolCallSuspended};
use crate::message::{FinishReason, Message, ToolCall, ToolContent, ToolResult, Usage};
use crate::model::ModelError;
use crate::store::{
    Author, Interface, PendingKind, PendingToolCall, Resolution, ResolutionKind, RunFailure, RunRecord, RunStatus,
    StoreError,
};
use crate::tool::ToolOutput;

/// A tool call the model made, with what the driver found checking it
/// against its tool (the schema lives with the tool, not in the machine).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CheckedCall {
    pub(crate) call: ToolCall,
    /// Why its arguments are not JSON, if they are not.
    pub(crate) malformed: Option<String>,
    /// Why its input does not fit its tool's schema, if it does not.
    pub(crate) invalid: Option<String>,
    /// What the agent's approval rules decided about it, if anything.
    pub(crate) ruling: Option<Ruling>,
}

impl CheckedCall {
    /// A call with nothing found wrong.
    pub(crate) fn sound(call: ToolCall) -> CheckedCall {
        CheckedCall {
            call,
            malformed: None,
            invalid: None,
            ruling: None,
        }
    }
}

/// One model turn, as it streamed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ModelTurn {
    /// When the model call began (its `step-start`).
    pub(crate) started_at: DateTime<Utc>,
    pub(crate) text: String,
    pub(crate) calls: Vec<CheckedCall>,
    pub(crate) reason: FinishReason,
    pub(crate) usage: Usage,
}

/// People's decisions for pending calls of one step (one, or several
/// applied together), each checked against its call (see `fit_decision`),
/// as the machine applies them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decisions {
    /// The decisions, in the order given, one per call.
    pub(crate) decisions: Vec<Decided>,
    /// The calls of the stored turn the pending calls belong to.
    pub(crate) turn_calls: Option<Vec<ToolCall>>,
    /// Whether the run was claimed before: if not, the decision's write is
    /// the claim, and a decision that cannot be applied goes back to its
    /// caller unwritten ([`Effect::Refused`]) instead of failing the run.
    pub(crate) claimed: bool,
}

/// One decision of [`Decisions`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decided {
    pub(crate) action: FittedDecision,
    /// Who decided, recorded by the decision's write; `None` when the claim
    /// recorded it already.
    pub(crate) resolution: Option<Resolution>,
    /// What the call's tool takes a declined question as (see
    /// [`Tool::decline_as_answer`](crate::Tool::decline_as_answer)).
    pub(crate) decline_answer: Option<Value>,
}

/// What happened, as the driver tells the machine.
#[derive(Debug)]
pub(crate) enum Event {
    /// A new run begins.
    Started,
    /// A run taken over after its driver stopped, or retried: the calls of
    /// its last stored turn with tool calls, checked, and whether the
    /// conversation ends on that turn.
    Recovered {
        last_calls: Option<Vec<CheckedCall>>,
        ends_on_calls: bool,
        /// The calls of that turn approved with edited arguments, with
        /// them (from the run's resolutions): run again, a call runs with
        /// those, and its result says so.
        edited: Vec<(String, Value)>,
    },
    /// Decisions for pending calls: answered, declined, approved, expired.
    Decided(Decisions),
    /// The model's turn streamed to its end.
    ModelFinished(ModelTurn),
    /// The model call failed.
    ModelFailed(ModelError),
    /// The tools of [`Effect::RunTools`] returned (or waited), in its
    /// order, at `now` (a call that waits from now on gets its time limit
    /// from then).
    ToolsReturned {
        outcomes: Vec<CallOutcome>,
        now: DateTime<Utc>,
    },
    /// The last [`Effect::Save`] is stored: its write, handed back (the
    /// driver keeps its `append`), becomes what the machine knows is stored,
    /// with no copy.
    Saved(RunWrite),
    /// The last [`Effect::Save`] is not (a lost compare-and-set to another
    /// writer is [`StoreError::Conflict`]).
    SaveFailed(StoreError),
    /// The run as stored after a lost write (see [`Effect::ReadRun`]):
    /// cancelled, or taken over by another process; or why it could not
    /// be read.
    RunRead(Result<Option<Box<RunRecord>>, StoreError>),
}

/// One call of [`Effect::RunTools`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ToolRun {
    /// Decided without the tool (refused, declined, expired): hand it back.
    Done(CallOutcome),
    /// The call waits on a person: hand it back with the agent's time limit
    /// for its tool, from now.
    Wait(PendingToolCall),
    /// Run the tool; `resumed` with the person's answer to what it asked.
    Execute {
        call: ToolCall,
        resumed: Option<ToolAnswer>,
    },
}

/// An answer for a tool that suspended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolAnswer {
    pub(crate) payload: Option<Arc<Value>>,
    pub(crate) data: Value,
}

/// The run's new state, for one compare-and-set on the version held.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunWrite {
    pub(crate) status: RunStatus,
    /// Messages to append.
    pub(crate) append: Vec<Message>,
    pub(crate) pending: Vec<PendingToolCall>,
    pub(crate) step_results: Vec<ToolResult>,
    pub(crate) steps: u32,
    pub(crate) usage: Usage,
    pub(crate) failure: Option<RunFailure>,
    /// The decisions this write applies, appended to the run's resolutions.
    pub(crate) resolutions: Vec<Resolution>,
    /// The run stays held by its driver (a lease from the write's time on).
    pub(crate) hold: bool,
    /// Approvals that stick, made by the approvals this write records.
    pub(crate) grants: Vec<crate::Grant>,
}

impl RunWrite {
    /// The write that claims `run` as it is stored: running, nothing else
    /// changed.
    pub(crate) fn claim(run: &RunRecord) -> RunWrite {
        RunWrite {
            status: RunStatus::Running,
            append: Vec::new(),
            pending: run.pending.clone(),
            step_results: run.step_results.clone(),
            steps: run.steps,
            usage: run.usage,
            failure: None,
            resolutions: Vec::new(),
            hold: true,
            grants: Vec::new(),
        }
    }
}

/// The `step-finish` of a stored turn (the driver renders it with the
/// conversation).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StepSummary {
    /// `None`: the turn ran in an earlier stream.
    pub(crate) started_at: Option<DateTime<Utc>>,
    pub(crate) reason: FinishReason,
    pub(crate) is_continued: bool,
    pub(crate) usage: Usage,
}

/// How the stream ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum End {
    Completed,
    Suspended,
    Failed(RunFailure),
    /// Cancelled meanwhile: the run as stored now.
    Cancelled(Box<RunRecord>),
}

/// What the driver is to do next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect {
    /// Emit this chunk.
    Emit(ChunkKind),
    /// Call the model on the stored conversation: emit `step-start`, stream
    /// the turn, then [`Event::ModelFinished`] or [`Event::ModelFailed`].
    /// `step`: the run's model call, counting from 1.
    CallModel { step: u32 },
    /// Carry out these calls together, then [`Event::ToolsReturned`].
    RunTools(Vec<ToolRun>),
    /// Write this, then [`Event::Saved`] or [`Event::SaveFailed`].
    Save(RunWrite),
    /// Emit the `step-finish` of the last stored turn, and after it
    /// `finish` with the run's usage when `finish` is set.
    ReportStep {
        summary: StepSummary,
        finish: Option<Usage>,
    },
    /// A write was lost: read the run, then [`Event::RunRead`].
    ReadRun,
    /// The decision cannot be applied (the stored run does not fit it) and
    /// nothing was claimed: its caller is told; nothing is written.
    Refused(String),
    /// The stream ends.
    Finish(End),
}

/// What is stored of the run, as the machine last wrote or read it.
#[derive(Debug, Clone, PartialEq)]
struct Stored {
    status: RunStatus,
    pending: Vec<PendingToolCall>,
    step_results: Vec<ToolResult>,
}

/// Where the run is.
#[derive(Debug, Clone, PartialEq, Default)]
enum Phase {
    /// Before the first event.
    #[default]
    Idle,
    /// The model is streaming a turn.
    Model,
    /// The step's tools run; `turn` is the model turn when not stored yet.
    Tools { turn: Option<Message>, then: Then },
    /// A write is in flight; once it lands, `next`.
    Saving { next: AfterSave },
    /// A lost write: the run is being read.
    ReadingRun,
    /// The stream ended.
    Ended,
}

/// What a step whose calls all have results goes on with.
#[derive(Debug, Clone, PartialEq)]
enum Then {
    /// A turn of this stream: its `step-finish`, then the model.
    Turn(StepSummary),
    /// A decision for a turn of an earlier stream: a `step-finish` without
    /// its usage, then the model.
    Decision,
    /// A recovered step: the model.
    Recovery,
}

/// What a landed write leads to.
#[derive(Debug, Clone, PartialEq)]
enum AfterSave {
    /// The model's answer without calls: the run is complete.
    Completed(StepSummary),
    /// A turn stored before its tools, which run now.
    TurnStored { runs: Vec<ToolRun>, then: Then },
    /// A step's results (or its pending calls): show `chunks`, then wait
    /// or go on.
    Step {
        chunks: Vec<ChunkKind>,
        waiting: bool,
        then: Then,
    },
    /// The run's failure: show it.
    Failure(RunFailure),
}

/// The run's decisions as a state that events move on (see the module
/// documentation).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunMachine {
    run_id: String,
    agent_id: String,
    /// The id of the message this stream's steps produce.
    message_id: String,
    /// The agent's tools, in the order the model is shown them.
    tools: Vec<(String, ToolRules)>,
    max_steps: u32,
    /// Model calls made in this stream.
    steps_here: u32,
    /// Model calls made in the run.
    steps: u32,
    usage: Usage,
    stored: Stored,
    step: Step,
    /// The decisions the next write records.
    resolutions: Vec<Resolution>,
    /// The calls of this step approved with edited arguments, and those
    /// arguments: their results tell the model what the call ran with.
    edited: Vec<(String, Value)>,
    phase: Phase,
    effects: VecDeque<Effect>,
}

impl RunMachine {
    /// A machine for `record` as stored, driven by one stream of agent
    /// `agent_id` with these tools. It takes the record's pending calls and
    /// step results (left empty there) and holds them from then on:
    /// [`RunMachine::pending`] reads them.
    pub(crate) fn new(
        record: &mut RunRecord,
        agent_id: String,
        message_id: String,
        tools: Vec<(String, ToolRules)>,
        max_steps: u32,
    ) -> RunMachine {
        RunMachine {
            run_id: record.run_id.clone(),
            agent_id,
            message_id,
            tools,
            max_steps,
            steps_here: 0,
            steps: record.steps,
            usage: record.usage,
            stored: Stored {
                status: record.status,
                pending: std::mem::take(&mut record.pending),
                step_results: std::mem::take(&mut record.step_results),
            },
            step: Step::default(),
            resolutions: Vec::new(),
            edited: Vec::new(),
            phase: Phase::Idle,
            effects: VecDeque::new(),
        }
    }

    /// The calls waiting on people as last stored (while a write is in
    /// flight, as before it).
    pub(crate) fn pending(&self) -> &[PendingToolCall] {
        &self.stored.pending
    }

    /// The calls waiting on people as last stored, once the stream ended.
    pub(crate) fn into_pending(self) -> Vec<PendingToolCall> {
        self.stored.pending
    }

    /// The next thing to do, if any.
    pub(crate) fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// Moves the run on by one event, queueing what follows from it.
    pub(crate) fn handle(&mut self, event: Event) {
        match event {
            // A stream begins once, with one of these.
            Event::Started | Event::Recovered { .. } | Event::Decided(_) if self.phase != Phase::Idle => {
                self.out_of_phase("the start of a stream");
            }
            Event::Started => {
                self.emit_start();
                self.call_model();
            }
            Event::Recovered {
                last_calls,
                ends_on_calls,
                edited,
            } => {
                self.edited = edited;
                self.recovered(last_calls, ends_on_calls)
            }
            Event::Decided(decisions) => self.decided(decisions),
            Event::ModelFinished(turn) => self.model_finished(turn),
            Event::ModelFailed(err) if self.phase != Phase::Model => {
                self.out_of_phase(&format!("a model failure ({err})"));
            }
            Event::ModelFailed(err) => self.fail(RunFailure::Model {
                transient: err.is_transient(),
                message: err.to_string(),
            }),
            Event::ToolsReturned { outcomes, now } => self.tools_returned(outcomes, now),
            Event::Saved(write) => self.saved(write),
            Event::SaveFailed(err) => self.save_failed(&err),
            Event::RunRead(now) => self.run_read(now),
        }
    }

    fn emit(&mut self, chunk: ChunkKind) {
        self.effects.push_back(Effect::Emit(chunk));
    }

    fn emit_start(&mut self) {
        self.emit(ChunkKind::Start(Start {
            id: self.agent_id.clone(),
            message_id: self.message_id.clone(),
        }));
    }

    fn end(&mut self, end: End) {
        self.phase = Phase::Ended;
        self.effects.push_back(Effect::Finish(end));
    }

    /// An event that does not fit the phase: a driver bug, which fails the
    /// run rather than guessing.
    fn out_of_phase(&mut self, event: &str) {
        let message = format!(
            "run {}: {event} arrived while the run was {:?}",
            self.run_id, self.phase
        );
        self.fail(RunFailure::Broken { message });
    }

    /// Calls the model, unless this stream made all the calls it may.
    fn call_model(&mut self) {
        if !may_call_model(self.steps_here, self.max_steps) {
            return self.fail(RunFailure::StepLimit { limit: self.max_steps });
        }
        self.steps_here += 1;
        self.steps += 1;
        self.phase = Phase::Model;
        self.effects.push_back(Effect::CallModel { step: self.steps });
    }

    fn model_finished(&mut self, turn: ModelTurn) {
        if self.phase != Phase::Model {
            return self.out_of_phase("a model turn");
        }
        self.usage.add(turn.usage);
        let calls: Vec<ToolCall> = turn.calls.iter().map(|c| c.call.clone()).collect();
        let summary = |is_continued| StepSummary {
            started_at: Some(turn.started_at),
            reason: turn.reason.clone(),
            is_continued,
            usage: turn.usage,
        };
        if after_model(&calls) == AfterModel::Complete {
            let summary = summary(false);
            let assistant = Message::assistant(turn.text, calls);
            let write = StepWrite {
                status: RunStatus::Completed,
                append: vec![assistant],
                pending: Vec::new(),
                step_results: Vec::new(),
            };
            return self.save(write, None, AfterSave::Completed(summary));
        }
        let then = Then::Turn(summary(true));
        let plans = self.plan(&turn.calls, false, &[]);
        self.resolutions.extend(rulings(&turn.calls, &plans));
        let runs = runs(&turn.calls, &plans);
        let first = store_turn_first(&plans);
        let assistant = Message::assistant(turn.text, calls.clone());
        self.step = Step {
            calls,
            ..Step::default()
        };
        if first {
            let write = StepWrite {
                status: RunStatus::Running,
                append: vec![assistant],
                pending: Vec::new(),
                step_results: Vec::new(),
            };
            self.save(write, None, AfterSave::TurnStored { runs, then });
        } else {
            self.run_tools(runs, Some(assistant), then);
        }
    }

    /// What the machine decides for each call, with its tool's rules.
    /// `started`: the calls a recovered run finds marked started (see
    /// [`super::marks_start`]).
    fn plan(&self, calls: &[CheckedCall], recovering: bool, started: &[String]) -> Vec<(CallPlan, ToolRules)> {
        let known: Vec<&str> = self.tools.iter().map(|(name, _)| name.as_str()).collect();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        calls
            .iter()
            .map(|checked| {
                let call = &checked.call;
                let nth_of_tool = seen.entry(call.name.as_str()).or_default();
                *nth_of_tool += 1;
                let rules = self.tools.iter().find(|(name, _)| *name == call.name).map(|(_, r)| *r);
                let facts = CallFacts {
                    malformed: checked.malformed.as_deref(),
                    tool: rules.map(|rules| (rules, checked.invalid.as_deref())),
                    known_tools: &known,
                    recovering,
                    started: started.contains(&call.id),
                    nth_of_tool: *nth_of_tool,
                    ruling: checked.ruling.as_ref(),
                };
                let rules = rules.unwrap_or(ToolRules {
                    needs_approval: false,
                    own_approval: false,
                    idempotent: true,
                    max_per_step: None,
                    time_limit: None,
                });
                (plan_call(call, facts), rules)
            })
            .collect()
    }

    fn run_tools(&mut self, runs: Vec<ToolRun>, turn: Option<Message>, then: Then) {
        self.phase = Phase::Tools { turn, then };
        self.effects.push_back(Effect::RunTools(runs));
    }

    /// Records how each call ended and writes the step: its results in call
    /// order once none waits, else what waits.
    fn tools_returned(&mut self, outcomes: Vec<CallOutcome>, now: DateTime<Utc>) {
        let Phase::Tools { turn, then } = std::mem::take(&mut self.phase) else {
            return self.out_of_phase("tool results");
        };
        let mut step = std::mem::take(&mut self.step);
        let edited = std::mem::take(&mut self.edited);
        let chunks: Vec<ChunkKind> = outcomes
            .into_iter()
            .map(|outcome| self.with_time_limit(outcome, now))
            .map(|outcome| with_edit_told(outcome, &edited))
            .filter_map(|o| step.resolve(o))
            .collect();
        let write = step.write(turn);
        let waiting = write.waiting();
        self.save(write, None, AfterSave::Step { chunks, waiting, then });
    }

    /// A call that waits from `now` on, with its tool's time limit (see
    /// `expiry.rs`); any other outcome as it is.
    fn with_time_limit(&self, outcome: CallOutcome, now: DateTime<Utc>) -> CallOutcome {
        let CallOutcome::Pending(pending) = outcome else {
            return outcome;
        };
        let limit = self
            .tools
            .iter()
            .find(|(name, _)| *name == pending.tool_name)
            .and_then(|(_, rules)| rules.time_limit);
        CallOutcome::Pending(expiry::with_deadline(pending, expiry::deadline(limit, now)))
    }

    /// Queues a write of the step's state and waits for it to land.
    fn save(&mut self, write: StepWrite, failure: Option<RunFailure>, next: AfterSave) {
        self.effects.push_back(Effect::Save(RunWrite {
            status: write.status,
            append: write.append,
            pending: write.pending,
            step_results: write.step_results,
            steps: self.steps,
            usage: self.usage,
            failure,
            // The decisions go with this write only: a write that fails
            // takes them along.
            resolutions: std::mem::take(&mut self.resolutions),
            // A run that stays running stays held by this stream.
            hold: write.status == RunStatus::Running,
            grants: Vec::new(),
        }));
        self.phase = Phase::Saving { next };
    }

    fn saved(&mut self, write: RunWrite) {
        let Phase::Saving { next } = std::mem::take(&mut self.phase) else {
            return self.out_of_phase("a stored write");
        };
        self.stored = Stored {
            status: write.status,
            pending: write.pending,
            step_results: write.step_results,
        };
        match next {
            AfterSave::Completed(summary) => {
                self.effects.push_back(Effect::ReportStep {
                    summary,
                    finish: Some(self.usage),
                });
                self.end(End::Completed);
            }
            AfterSave::TurnStored { runs, then } => self.run_tools(runs, None, then),
            AfterSave::Step { chunks, waiting, then } => {
                // Persist before you emit: the results and what waits are
                // shown only once stored.
                for chunk in chunks {
                    self.emit(chunk);
                }
                if waiting {
                    self.emit_pending();
                    return self.end(End::Suspended);
                }
                let summary = match then {
                    Then::Turn(summary) => Some(summary),
                    // The step's turn ran in an earlier stream: its usage is
                    // not known here.
                    Then::Decision => Some(StepSummary {
                        started_at: None,
                        reason: FinishReason::ToolCalls,
                        is_continued: true,
                        usage: Usage::default(),
                    }),
                    Then::Recovery => None,
                };
                if let Some(summary) = summary {
                    self.effects.push_back(Effect::ReportStep { summary, finish: None });
                }
                self.call_model();
            }
            AfterSave::Failure(failure) => self.show_failure(failure),
        }
    }

    fn save_failed(&mut self, err: &StoreError) {
        let Phase::Saving { next, .. } = std::mem::take(&mut self.phase) else {
            return self.out_of_phase("a failed write");
        };
        let (conflict, transient) = (err.is_conflict(), err.is_transient());
        if let AfterSave::Failure(failure) = next {
            // Even the failure could not be written: the run stays running
            // under a lease nobody renews once this stream ends, and
            // recovery takes it over.
            return self.show_failure(failure);
        }
        if conflict {
            // Nothing of the step is emitted: what the loss means depends
            // on who won.
            self.phase = Phase::ReadingRun;
            self.effects.push_back(Effect::ReadRun);
            return;
        }
        let message = format!("run {}: could not store the step: {err}", self.run_id);
        self.fail(RunFailure::Store { transient, message });
    }

    fn run_read(&mut self, now: Result<Option<Box<RunRecord>>, StoreError>) {
        if self.phase != Phase::ReadingRun {
            return self.out_of_phase("the run read after a lost write");
        }
        let now = match now {
            Ok(now) => now,
            // Whoever won goes on from what is stored; this stream cannot
            // tell who, so it stops, writing nothing, and says why.
            Err(err) => {
                let message = format!(
                    "run {} was changed by someone else while this process drove it, and could not be read \
                     again: {err}; its step was not written",
                    self.run_id
                );
                self.emit(ChunkKind::Error(ErrorPayload {
                    error: ErrorDetail {
                        message: message.clone(),
                    },
                }));
                return self.end(End::Failed(RunFailure::Interrupted { message }));
            }
        };
        if let (LostWrite::Cancelled, Some(now)) = (lost_write(now.as_ref().map(|r| r.status)), now) {
            self.emit(ChunkKind::Abort(AbortPayload {
                reason: Some("the run was cancelled".into()),
            }));
            return self.end(End::Cancelled(now));
        }
        // Another process took the run over (this one's lease ran out) or
        // wrote it: that one goes on from what is stored; nothing of this
        // step is written here.
        let message = format!(
            "run {} was changed by someone else while this process drove it; its step was not written",
            self.run_id
        );
        self.emit(ChunkKind::Error(ErrorPayload {
            error: ErrorDetail {
                message: message.clone(),
            },
        }));
        self.end(End::Failed(RunFailure::Interrupted { message }));
    }

    /// Marks the run failed with its typed reason, keeping what the step had
    /// stored (messages, pending calls, results), so that a transient
    /// failure can be retried from there; then shows it.
    fn fail(&mut self, failure: RunFailure) {
        let write = StepWrite {
            status: RunStatus::Failed,
            append: Vec::new(),
            pending: self.stored.pending.clone(),
            step_results: self.stored.step_results.clone(),
        };
        self.save(write, Some(failure.clone()), AfterSave::Failure(failure));
    }

    fn show_failure(&mut self, failure: RunFailure) {
        self.emit(ChunkKind::Error(ErrorPayload {
            error: ErrorDetail {
                message: failure.message(),
            },
        }));
        self.end(End::Failed(failure));
    }

    /// Emits the suspension chunk of every pending call: a stream that
    /// suspends ends with what it waits on.
    fn emit_pending(&mut self) {
        for p in &self.stored.pending {
            let chunk = match p.kind {
                PendingKind::Suspended => ChunkKind::ToolCallSuspended(ToolCallSuspended {
                    tool_call_id: p.tool_call_id.clone(),
                    tool_name: p.tool_name.clone(),
                    args: p.args.clone(),
                    suspend_payload: p.suspend_payload.clone().unwrap_or_else(|| Arc::new(Value::Null)),
                    resume_schema: p.resume_schema.as_ref().map(|schema| schema.to_string()),
                }),
                PendingKind::Approval => ChunkKind::ToolCallApproval(ToolCallApproval {
                    tool_call_id: p.tool_call_id.clone(),
                    tool_name: p.tool_name.clone(),
                    args: p.args.clone(),
                    resume_schema: p.resume_schema.clone().unwrap_or_else(approval_schema).to_string(),
                }),
            };
            self.effects.push_back(Effect::Emit(chunk));
        }
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
    fn recovered(&mut self, last_calls: Option<Vec<CheckedCall>>, ends_on_calls: bool) {
        self.emit_start();
        let calls = last_calls
            .as_ref()
            .map(|checked| checked.iter().map(|c| c.call.clone()).collect());
        let recovery = recovery_at(&self.stored.pending, &self.stored.step_results, calls, ends_on_calls);
        match recovery {
            Recovery::Resuspend(step) => {
                let next = AfterSave::Step {
                    chunks: Vec::new(),
                    waiting: true,
                    then: Then::Recovery,
                };
                self.save(step.write(None), None, next);
            }
            Recovery::Interrupted { step, started } => {
                let checked = last_calls.unwrap_or_default();
                let interrupted: Vec<CheckedCall> = step
                    .unresolved()
                    .into_iter()
                    .map(|call| match checked.iter().find(|c| c.call.id == call.id) {
                        Some(found) => found.clone(),
                        None => CheckedCall::sound(call),
                    })
                    .collect();
                let plans = self.plan(&interrupted, true, &started);
                self.resolutions.extend(rulings(&interrupted, &plans));
                let runs = runs(&interrupted, &plans);
                self.step = step;
                self.run_tools(runs, None, Then::Recovery);
            }
            Recovery::CallModel => self.call_model(),
        }
    }

    /// Applies decisions to their pending calls: runs each tool with its
    /// answer, or resolves its call without it, then writes the step once,
    /// with every decision's resolution.
    fn decided(&mut self, event: Decisions) {
        let Decisions {
            decisions,
            turn_calls,
            claimed,
        } = event;
        let mut runs = Vec::with_capacity(decisions.len());
        let mut decided_ids: Vec<String> = Vec::with_capacity(decisions.len());
        let mut resolutions = Vec::with_capacity(decisions.len());
        let mut edited = Vec::new();
        for decided in decisions {
            let id = decided.action.tool_call_id().to_owned();
            // Both checked before the claim; only a bug gets here.
            let Some(target) = self.stored.pending.iter().find(|p| p.tool_call_id == id) else {
                return self.refuse(format!("tool call {id} is no longer pending"), claimed);
            };
            if decided_ids.contains(&id) {
                return self.refuse(format!("tool call {id} was decided twice"), claimed);
            }
            if let FittedDecision::Approve { args: Some(args), .. } = &decided.action {
                edited.push((id.clone(), args.clone()));
            }
            runs.push(decided_run(target, decided.action, decided.decline_answer));
            decided_ids.push(id);
            resolutions.extend(decided.resolution);
        }
        let Some(calls) = turn_calls else {
            return self.refuse(
                "the stored conversation has no tool calls to answer".to_owned(),
                claimed,
            );
        };
        // Recorded by the step's write, once every decision was found to fit.
        self.resolutions = resolutions;
        self.edited = edited;
        self.step = Step {
            calls,
            pending: self.stored.pending.clone(),
            results: self.stored.step_results.clone(),
        };
        self.run_tools(runs, None, Then::Decision);
    }

    /// A decision the stored run does not fit (a bug, or a damaged row):
    /// the run fails if this stream holds it, else the caller is told.
    fn refuse(&mut self, message: String, claimed: bool) {
        if claimed {
            return self.fail(RunFailure::Broken { message });
        }
        self.phase = Phase::Ended;
        self.effects.push_back(Effect::Refused(message));
    }
}

/// What a decision does to its call `target`: run the tool with the answer
/// (or with what its tool takes a decline as), or resolve the call without
/// it.
fn decided_run(target: &PendingToolCall, action: FittedDecision, decline_answer: Option<Value>) -> ToolRun {
    let call = ToolCall {
        id: target.tool_call_id.clone(),
        name: target.tool_name.clone(),
        args: target.args.clone(),
    };
    let resumed = |data| {
        Some(ToolAnswer {
            payload: target.suspend_payload.clone(),
            data,
        })
    };
    match action {
        FittedDecision::Answer { data, .. } => ToolRun::Execute {
            resumed: resumed(data),
            call,
        },
        FittedDecision::Approve { args: None, .. } => ToolRun::Execute { call, resumed: None },
        // The call runs with exactly the arguments stored with the approval.
        FittedDecision::Approve { args: Some(args), .. } => ToolRun::Execute {
            call: ToolCall {
                args: Arc::new(args),
                ..call
            },
            resumed: None,
        },
        FittedDecision::DeclineQuestion { reason, .. } => match decline_answer {
            Some(data) => ToolRun::Execute {
                resumed: resumed(data),
                call,
            },
            None => {
                let text = match reason {
                    Some(reason) if !reason.trim().is_empty() => format!("The user declined to answer: {reason}"),
                    _ => "The user declined to answer.".to_owned(),
                };
                ToolRun::Done(done_result(&call, ToolOutput::text(text)))
            }
        },
        FittedDecision::DeclineApproval { reason, .. } => {
            ToolRun::Done(denied(&call, reason.filter(|r| !r.trim().is_empty())))
        }
        FittedDecision::Expire { .. } => ToolRun::Done(match target.kind {
            PendingKind::Suspended => done_result(
                &call,
                ToolOutput::text(expiry::expired_question_text(target.expires_at)),
            ),
            PendingKind::Approval => denied(&call, Some(expiry::expired_approval_reason(target.expires_at))),
        }),
    }
}

/// The result of a call approved with edited arguments, as the model is
/// told it: what the call ran with, then what it returned. The model's own
/// call stays as it made it (stored messages are never rewritten, and a
/// model shown arguments it never chose would take them for its own): the
/// result says plainly that a person changed them, which models read as
/// they read any tool output, and carry on from.
fn with_edit_told(outcome: CallOutcome, edited: &[(String, Value)]) -> CallOutcome {
    let CallOutcome::Done(mut result, chunk) = outcome else {
        return outcome;
    };
    if let Some((_, args)) = edited.iter().find(|(id, _)| *id == result.tool_call_id) {
        let returned = result.content.to_model_text();
        result.content = ToolContent::Text(format!(
            "The user edited the arguments before approving; the call ran with {args}. It returned: {returned}"
        ));
    }
    CallOutcome::Done(result, chunk)
}

/// The calls of a step as the driver is to carry them out.
fn runs(calls: &[CheckedCall], plans: &[(CallPlan, ToolRules)]) -> Vec<ToolRun> {
    calls
        .iter()
        .zip(plans)
        .map(|(checked, (plan, _))| {
            let call = &checked.call;
            match plan {
                CallPlan::Refuse(message) => ToolRun::Done(error_result(call, message.clone())),
                CallPlan::AskApproval => ToolRun::Wait(PendingToolCall {
                    tool_call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    args: call.args.clone(),
                    kind: PendingKind::Approval,
                    suspend_payload: None,
                    resume_schema: Some(approval_schema()),
                    expires_at: None,
                    started_at: None,
                }),
                CallPlan::Execute | CallPlan::AllowedByRule { .. } => ToolRun::Execute {
                    call: call.clone(),
                    resumed: None,
                },
                CallPlan::DeniedByRule { reason, .. } => ToolRun::Done(denied(call, Some(reason.clone()))),
            }
        })
        .collect()
}

/// The record of what the approval rules and grants decided in `plans` (a
/// call refused, or allowed to run where it would have waited): made by
/// the rule or the grant, recorded with the step's next write, before any
/// tool runs.
fn rulings(calls: &[CheckedCall], plans: &[(CallPlan, ToolRules)]) -> Vec<Resolution> {
    calls
        .iter()
        .zip(plans)
        .filter_map(|(checked, (plan, _))| {
            let (kind, rule) = match plan {
                CallPlan::DeniedByRule { rule, .. } => (ResolutionKind::Denied, rule),
                CallPlan::AllowedByRule { rule } => (ResolutionKind::Approved, rule),
                _ => return None,
            };
            let ruling = checked.ruling.as_ref().filter(|r| !r.recorded)?;
            let at = ruling.at;
            // A call a grant allows is approved by the person who made it,
            // through the grant.
            let author = match &ruling.grant {
                Some(grant) => Author::maybe_named(Interface::Grant, grant.granted_by.by.clone()),
                None => Author::named(Interface::Rule, rule.clone()),
            };
            let mut resolution = Resolution::new(Some(&checked.call.id), kind, at, author);
            resolution.grant = ruling.grant.as_ref().map(crate::Grant::note);
            Some(resolution)
        })
        .collect()
}

#[cfg(test)]
mod tests;

//! Property tests of the run machine: random runs (model turns of 0-4 tool
//! calls: plain, must-not-run-twice, questions, questions of a tool that
//! must not run twice once answered, and calls waiting for approval, of
//! tools that may or must not run twice), answered, declined, expired and
//! approved in random order, one at a time or all of a step at once, with
//! cancels, process deaths before any write
//! and lost leases. A small simulated driver carries out the effects of the
//! [`Entry`] machine (how a decision or a take-over gets into the run: the
//! real claim logic) and of the [`RunMachine`] against a simulated model,
//! tools and store, the way `enter.rs` and `driver.rs` do against real
//! ones, and feeds back the events; the properties are checked on what is
//! stored.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use serde_json::{Value, json};

use super::machine::{
    self, ApplyFailure, CallOutcome, CheckedCall, Decided, Decision, Decisions, DriveFrom, Effect, End, Entered, Entry,
    EntryEffect, EntryEvent, Event, FittedDecision, ModelTurn, Request, Ruling, RunMachine, RunWrite, ToolBook,
    ToolRules, ToolRun,
};
use crate::CallDecision;
use crate::ask_user::AskUser;
use crate::chunk::{ChunkKind, ToolErrorPayload};
use crate::error::RunError;
use crate::message::{FinishReason, Message, ToolCall, ToolContent, ToolResult};
use crate::rules::Verdict;
use crate::store::{Author, ResolutionKind, StoreError};
use crate::store::{PendingKind, PendingToolCall, RunFailure, RunRecord, RunStatus};
use crate::tool::{Tool, ToolContext, ToolError, ToolOutcome};

/// The kinds of tool a model turn calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Idempotent, returns at once.
    Plain,
    /// Must not run twice.
    Once,
    /// `ask_user`: suspends with a question.
    Ask,
    /// Waits for approval, then runs; must not run twice.
    Guarded,
    /// Waits for approval, then runs; may run again.
    Checked,
    /// Suspends with a question; runs with the answer for real, so must not
    /// run twice once answered (as an MCP elicitation or a custom tool).
    AskOnce,
}

const TOOLS: [&str; 6] = ["plain", "once", "ask_user", "guarded", "checked", "ask_once"];

fn rules(name: &str) -> Option<ToolRules> {
    match name {
        "plain" | "ask_user" => Some(ToolRules {
            needs_approval: false,
            own_approval: false,
            idempotent: true,
            max_per_step: None,
            time_limit: None,
        }),
        "once" => Some(ToolRules {
            needs_approval: false,
            own_approval: false,
            idempotent: false,
            max_per_step: None,
            time_limit: None,
        }),
        "guarded" => Some(ToolRules {
            needs_approval: true,
            own_approval: true,
            idempotent: false,
            max_per_step: None,
            time_limit: None,
        }),
        "ask_once" => Some(ToolRules {
            needs_approval: false,
            own_approval: false,
            idempotent: false,
            max_per_step: None,
            time_limit: None,
        }),
        // Waits for approval by the agent's configuration, not its own
        // policy: an allow rule lifts that.
        "checked" => Some(ToolRules {
            needs_approval: true,
            own_approval: false,
            idempotent: true,
            max_per_step: None,
            time_limit: None,
        }),
        _ => None,
    }
}

/// Where the simulated world interferes with the driver.
#[derive(Debug, Clone, Default)]
struct Faults {
    /// For the n-th write attempt: the process dies just before it.
    crash: Vec<bool>,
    /// For the n-th write attempt: another process took the run over.
    lease_lost: Vec<bool>,
    /// For the n-th suspension: the run is cancelled instead of answered.
    cancel: Vec<bool>,
}

/// The stored run.
#[derive(Debug, Clone, PartialEq)]
struct Stored {
    record: RunRecord,
    messages: Vec<Message>,
}

/// Why the simulated driver stopped.
#[derive(Debug, PartialEq)]
enum Stop {
    /// Its process died: recovery takes the run over.
    Died,
    /// The run is suspended, completed or cancelled.
    Settled,
}

struct World {
    script: Vec<Vec<Kind>>,
    faults: Faults,
    /// Decision per call id: true answers or approves, false declines (or,
    /// for the calls in `expire`, lets the time limit pass).
    accept: HashMap<String, bool>,
    /// Refused calls resolved by their time limit passing, not a decline.
    expire: HashSet<String>,
    /// Calls whose approval comes with edited arguments ([`edited_args`]).
    edit: HashSet<String>,
    /// Per call: the arguments each run of its tool got.
    ran_with: HashMap<String, Vec<Value>>,
    store: Stored,
    writes: usize,
    suspensions: usize,
    model_calls: usize,
    /// Model calls whose turn never reached the store (the process died or
    /// lost the run first).
    lost_turns: usize,
    /// How often each call's tool actually ran.
    executions: HashMap<String, u32>,
    /// How many times recovery took the run over.
    recoveries: usize,
    /// Per call: how many approvals of it were stored (claimed).
    approvals: HashMap<String, u32>,
    /// Per call: how often its tool ran with a person's answer.
    answered_runs: HashMap<String, u32>,
}

impl World {
    fn new(script: Vec<Vec<Kind>>, faults: Faults, accept_bits: &[bool]) -> World {
        let mut accept = HashMap::new();
        let mut expire = HashSet::new();
        let mut edit = HashSet::new();
        for (t, turn) in script.iter().enumerate() {
            for c in 0..turn.len() {
                let bit = accept_bits.get(t * 4 + c).copied().unwrap_or(true);
                accept.insert(call_id(t, c), bit);
                if !bit && (t + c) % 2 == 1 {
                    expire.insert(call_id(t, c));
                }
                if bit && (t + c) % 3 == 0 {
                    edit.insert(call_id(t, c));
                }
            }
        }
        let record = RunRecord {
            run_id: "run".into(),
            agent_id: "agent".into(),
            status: RunStatus::Running,
            ..Default::default()
        };
        World {
            script,
            faults,
            accept,
            expire,
            edit,
            ran_with: HashMap::new(),
            store: Stored {
                record,
                messages: vec![Message::user("go")],
            },
            writes: 0,
            suspensions: 0,
            model_calls: 0,
            lost_turns: 0,
            executions: HashMap::new(),
            recoveries: 0,
            approvals: HashMap::new(),
            answered_runs: HashMap::new(),
        }
    }

    /// Writes as one compare-and-set: `Err(Stop::Died)` when the process
    /// dies just before it, `Ok(false)` when it loses to a cancel or to
    /// another process that took the run over.
    fn write(&mut self, write: RunWrite) -> Result<bool, Stop> {
        let n = self.writes;
        self.writes += 1;
        let turn_in_it = write.append.iter().any(|m| matches!(m, Message::Assistant { .. }));
        if self.faults.crash.get(n).copied().unwrap_or(false) {
            self.lost_turns += usize::from(turn_in_it);
            return Err(Stop::Died);
        }
        if self.store.record.status == RunStatus::Cancelled || self.faults.lease_lost.get(n).copied().unwrap_or(false) {
            self.lost_turns += usize::from(turn_in_it);
            return Ok(false);
        }
        for resolution in &write.resolutions {
            if resolution.kind == ResolutionKind::Approved
                && let Some(id) = &resolution.tool_call_id
            {
                *self.approvals.entry(id.clone()).or_default() += 1;
            }
        }
        let record = &mut self.store.record;
        record.status = write.status;
        record.pending = write.pending;
        record.step_results = write.step_results;
        record.steps = write.steps;
        record.version += 1;
        record.resolutions.extend(write.resolutions);
        self.store.messages.extend(write.append);
        Ok(true)
    }

    /// The model: the n-th assistant turn of the script, by how many turns
    /// the stored conversation has (so a model call made again answers the
    /// same), then plain text.
    fn model(&mut self) -> ModelTurn {
        self.model_calls += 1;
        let turn = self
            .store
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        let kinds = self.script.get(turn).cloned().unwrap_or_default();
        let calls = kinds
            .iter()
            .enumerate()
            .map(|(c, kind)| {
                let call = ToolCall {
                    id: call_id(turn, c),
                    name: TOOLS[*kind as usize].into(),
                    args: json!({"question": format!("q{turn}{c}")}).into(),
                };
                CheckedCall {
                    ruling: ruling_for(&call.id, false),
                    ..CheckedCall::sound(call)
                }
            })
            .collect();
        ModelTurn {
            started_at: chrono::DateTime::UNIX_EPOCH,
            text: String::new(),
            calls,
            reason: FinishReason::Stop,
            usage: Default::default(),
        }
    }

    fn execute(&mut self, call: &ToolCall, answer: Option<&Value>) -> CallOutcome {
        *self.executions.entry(call.id.clone()).or_default() += 1;
        self.ran_with
            .entry(call.id.clone())
            .or_default()
            .push((*call.args).clone());
        if answer.is_some() {
            *self.answered_runs.entry(call.id.clone()).or_default() += 1;
        }
        match (call.name.as_str(), answer) {
            ("ask_user" | "ask_once", None) => CallOutcome::Pending(PendingToolCall {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                args: call.args.clone(),
                kind: PendingKind::Suspended,
                suspend_payload: Some(call.args.clone()),
                resume_schema: None,
                expires_at: None,
                started_at: None,
            }),
            (_, answer) => done(
                call,
                format!("{} ran: {}", call.id, answer.cloned().unwrap_or_default()),
            ),
        }
    }

    /// A machine for the run as stored, as a new driver makes one.
    fn machine(&self) -> RunMachine {
        let tools = TOOLS
            .iter()
            .filter_map(|name| rules(name).map(|r| ((*name).to_owned(), r)))
            .collect();
        RunMachine::new(
            &mut self.store.record.clone(),
            "agent".into(),
            "message".into(),
            tools,
            100,
        )
    }

    /// Carries out the machine's effects against the simulated model, tools
    /// and store, the way `driver.rs` does against real ones, until the
    /// stream ends or its process dies.
    fn drive(&mut self, mut machine: RunMachine, first: Event) -> Result<(), Stop> {
        machine.handle(first);
        self.drive_on(machine)
    }

    /// Carries out the effects of a machine already moving.
    fn drive_on(&mut self, mut machine: RunMachine) -> Result<(), Stop> {
        loop {
            let effect = machine.poll_effect().expect("the machine ends every stream");
            let event = match effect {
                Effect::Emit(_) | Effect::ReportStep { .. } => continue,
                Effect::CallModel { .. } => Event::ModelFinished(self.model()),
                Effect::RunTools(runs) => self.tools(runs),
                Effect::Save(write) => match self.write(write.clone())? {
                    true => Event::Saved(write),
                    false => Event::SaveFailed(lost()),
                },
                Effect::ReadRun => Event::RunRead(Ok(Some(Box::new(self.store.record.clone())))),
                Effect::Finish(End::Completed | End::Suspended) => return Ok(()),
                Effect::Finish(End::Cancelled(_)) => return Err(Stop::Settled),
                // Another process took the run over: it goes on from what
                // is stored, as a dead one's would be.
                Effect::Finish(End::Failed(RunFailure::Interrupted { .. })) => return Err(Stop::Died),
                other => panic!("unexpected effect {other:?}"),
            };
            machine.handle(event);
        }
    }

    /// Carries out a step's calls, as `driver/calls.rs` does.
    fn tools(&mut self, runs: Vec<ToolRun>) -> Event {
        Event::ToolsReturned {
            outcomes: runs
                .into_iter()
                .map(|run| match run {
                    ToolRun::Done(outcome) => outcome,
                    ToolRun::Wait(pending) => CallOutcome::Pending(pending),
                    ToolRun::Execute { call, resumed } => self.execute(&call, resumed.as_ref().map(|r| &r.data)),
                })
                .collect(),
            now: chrono::DateTime::UNIX_EPOCH,
        }
    }

    /// A new run's first stream.
    fn start(&mut self) -> Result<(), Stop> {
        self.drive(self.machine(), Event::Started)
    }

    /// Continues the stored run the way recovery does: the take-over of
    /// the entry machine, then a driver from the last stored step.
    fn recover(&mut self) -> Result<(), Stop> {
        self.recoveries += 1;
        match self.enter(Request::Recover {
            author: Author::default(),
        })? {
            Entered::Drive {
                start: DriveFrom::Recovered,
                ..
            } => {}
            // The simulated store has no leases: a running run is stalled,
            // and anything else is not this test's to take over.
            _ => return Ok(()),
        }
        let messages = &self.store.messages;
        let ends_on_calls =
            matches!(messages.last(), Some(Message::Assistant { tool_calls, .. }) if !tool_calls.is_empty());
        // As the driver does: a call approved with edited arguments runs
        // again, if it does, with those.
        let mut edited = Vec::new();
        let record = &self.store.record;
        let last_calls = machine::last_tool_calls(messages).map(|calls| {
            calls
                .into_iter()
                .map(|mut call| {
                    if let Some(edit) = record.resolution_of(&call.id).and_then(|r| r.edit.as_ref()) {
                        call.args = edit.edited.clone().into();
                        edited.push((call.id.clone(), edit.edited.clone()));
                    }
                    // As the driver does: a ruling the run records already
                    // is not recorded again.
                    let recorded = record.resolution_of(&call.id).is_some_and(|r| {
                        matches!(
                            r.author.via,
                            crate::store::Interface::Rule | crate::store::Interface::Grant
                        )
                    });
                    CheckedCall {
                        ruling: ruling_for(&call.id, recorded),
                        ..CheckedCall::sound(call)
                    }
                })
                .collect()
        });
        self.drive(
            self.machine(),
            Event::Recovered {
                last_calls,
                ends_on_calls,
                edited,
            },
        )
    }

    /// Decides one pending call (picked by `pick`) through the entry
    /// machine, as `Agent::resume_stream`, `approve_tool_call` and
    /// `decline_tool_call` do; for a `pick` of [`ALL_AT_ONCE`], every
    /// pending call in one request, as `Agent::decide_all` does; of
    /// [`EVERY_APPROVAL`], every call waiting for approval with one
    /// decision, as `Agent::decide_every_approval` does (when the script
    /// decides them all alike); of [`EXPIRE_DUE`], every call whose limit
    /// the script lets pass, as `Agent::expire_run` does; and carries on.
    fn decide(&mut self, pick: usize) -> Result<(), Stop> {
        // The limits of the calls the script lets expire have passed (as
        // stored with the calls), whichever way they are then resolved.
        let due: Vec<String> = self
            .store
            .record
            .pending
            .iter()
            .filter(|pending| self.decision_for(pending) == Decision::Expire)
            .map(|pending| pending.tool_call_id.clone())
            .collect();
        for pending in &mut self.store.record.pending {
            if due.contains(&pending.tool_call_id) {
                pending.expires_at = Some(chrono::DateTime::UNIX_EPOCH);
            }
        }
        let record = self.store.record.clone();
        if pick == REPEAT {
            self.repeat_a_decision();
        }
        if pick == EXPIRE_DUE && !due.is_empty() {
            let entered = self.enter(Request::ExpireDue {
                author: Author::default(),
            })?;
            return self.carry_on(entered);
        }
        if pick == EVERY_APPROVAL {
            let decided: Vec<Decision> = record
                .pending
                .iter()
                .filter(|pending| pending.kind == PendingKind::Approval)
                .map(|pending| self.decision_for(pending))
                .collect();
            if let Some(first) = decided.first()
                && matches!(
                    first,
                    Decision::Made {
                        decision: CallDecision::Approve | CallDecision::Decline(_),
                        ..
                    }
                )
                && decided.iter().all(|d| d == first)
            {
                let entered = self.enter(Request::DecideEveryApproval {
                    decision: first.clone(),
                    author: Author::default(),
                })?;
                return self.carry_on(entered);
            }
        }
        // An expiry comes from a sweep, one call at a time, never with a
        // person's other decisions.
        let by_person: Vec<(String, Decision)> = record
            .pending
            .iter()
            .map(|pending| (pending.tool_call_id.clone(), self.decision_for(pending)))
            .filter(|(_, decision)| *decision != Decision::Expire)
            .collect();
        let request = if pick >= ALL_AT_ONCE && by_person.len() > 1 {
            Request::DecideAll {
                decisions: by_person,
                author: Author::default(),
            }
        } else {
            let pending = &record.pending[pick % record.pending.len()];
            Request::Decide {
                tool_call_id: Some(pending.tool_call_id.clone()),
                decision: self.decision_for(pending),
                author: Author::default(),
            }
        };
        let entered = self.enter(request)?;
        self.carry_on(entered)
    }

    /// Sends again, as a person would, a decision the run recorded (the
    /// last one that named a call): it changes nothing, and the machine
    /// says it was made already (an approval or a decline) or refuses it
    /// (a second answer).
    fn repeat_a_decision(&mut self) {
        let Some(made) = self.store.record.resolutions.iter().rev().find(|r| {
            r.tool_call_id.is_some()
                && matches!(
                    r.kind,
                    ResolutionKind::Answered | ResolutionKind::Approved | ResolutionKind::Denied
                )
        }) else {
            return;
        };
        let (id, kind) = (made.tool_call_id.clone().unwrap_or_default(), made.kind);
        let decision = match kind {
            ResolutionKind::Answered => Decision::from(CallDecision::Answer(json!(format!("answer to {id}")))),
            ResolutionKind::Approved => Decision::from(CallDecision::Approve),
            _ => Decision::from(CallDecision::Decline(Some("no".into()))),
        };
        let before = self.store.record.clone();
        let request = Request::Decide {
            tool_call_id: Some(id.clone()),
            decision,
            author: Author::default(),
        };
        let mut entry = Entry::new("run", "agent", request, std::time::Duration::from_secs(30));
        entry.poll_effect();
        entry.handle(
            EntryEvent::Read {
                run: Some(before.clone()),
                now: chrono::DateTime::UNIX_EPOCH,
            },
            &Book,
        );
        match entry.poll_effect() {
            Some(EntryEffect::Finish(Ok(Entered::Untouched { already }))) if kind != ResolutionKind::Answered => {
                assert_eq!(already, [(id, kind)], "a repeat is told as made already");
            }
            Some(EntryEffect::Finish(Err(RunError::AlreadyDecided { decided, .. })))
                if kind == ResolutionKind::Answered =>
            {
                assert_eq!(decided, kind, "a second answer is refused");
            }
            other => panic!("a repeat of {id} ({kind}) did not leave the run alone: {other:?}"),
        }
        assert_eq!(self.store.record, before, "a repeat writes nothing");
    }

    /// Drives on from how a decision request ended.
    fn carry_on(&mut self, entered: Entered) -> Result<(), Stop> {
        match entered {
            Entered::Drive {
                start: DriveFrom::Resume(decisions),
                ..
            } => {
                let decisions = decisions.into_iter().map(|(a, author)| (a, author.is_some())).collect();
                let resume = self.resume(decisions, true);
                self.drive(self.machine(), Event::Decided(resume))
            }
            Entered::Applied | Entered::Untouched { .. } | Entered::Cancelled => Ok(()),
            Entered::Drive { .. } => panic!("a decision started a driver that is not a resume"),
        }
    }

    /// What the person decides for `pending`, as the script says.
    fn decision_for(&self, pending: &PendingToolCall) -> Decision {
        let accept = self.accept.get(&pending.tool_call_id).copied().unwrap_or(true);
        match (pending.kind, accept) {
            (PendingKind::Suspended, true) => Decision::from(CallDecision::Answer(json!(format!(
                "answer to {}",
                pending.tool_call_id
            )))),
            (PendingKind::Approval, true) if self.edit.contains(&pending.tool_call_id) => {
                Decision::from(CallDecision::ApproveWith(edited_args(&pending.tool_call_id)))
            }
            (PendingKind::Approval, true) => Decision::from(CallDecision::Approve),
            (_, false) if self.expire.contains(&pending.tool_call_id) => Decision::Expire,
            (_, false) => Decision::from(CallDecision::Decline(Some("no".into()))),
        }
    }

    /// Decisions as a driver hands them to its machine, each with whether
    /// its write records it (else the claim did).
    fn resume(&self, decisions: Vec<(FittedDecision, bool)>, claimed: bool) -> Decisions {
        let decisions = decisions
            .into_iter()
            .map(|(action, record_it)| Decided {
                resolution: record_it.then(|| crate::store::Resolution {
                    tool_call_id: Some(action.tool_call_id().to_owned()),
                    kind: action.resolution_kind(),
                    at: chrono::DateTime::UNIX_EPOCH,
                    author: Author::default(),
                    edit: None,
                    grant: None,
                }),
                action,
                decline_answer: None,
            })
            .collect();
        Decisions {
            decisions,
            turn_calls: machine::last_tool_calls(&self.store.messages),
            claimed,
        }
    }

    /// Carries `request` through the entry machine against the simulated
    /// store. A decision the machine applies in one write is applied by a
    /// driver's machine here, which then drives the rest of the stream.
    fn enter(&mut self, request: Request) -> Result<Entered, Stop> {
        let mut entry = Entry::new("run", "agent", request, std::time::Duration::from_secs(30));
        loop {
            let event = match entry.poll_effect().expect("the entry machine ends every request") {
                EntryEffect::Read => EntryEvent::Read {
                    run: Some(self.store.record.clone()),
                    now: chrono::DateTime::UNIX_EPOCH,
                },
                EntryEffect::Wait(_) => EntryEvent::Waited,
                EntryEffect::Claim { .. } => self.entry_write(RunWrite::claim(&self.store.record.clone()))?,
                EntryEffect::Write { write, .. } => self.entry_write(write)?,
                EntryEffect::Reclaim { resolution, .. } => {
                    let mut write = RunWrite::claim(&self.store.record.clone());
                    write.resolutions = vec![resolution];
                    self.entry_write(write)?
                }
                EntryEffect::Apply { actions, .. } => {
                    let mut machine = self.machine();
                    let decisions = actions.into_iter().map(|action| (action, true)).collect();
                    machine.handle(Event::Decided(self.resume(decisions, false)));
                    match self.apply(&mut machine)? {
                        Some(event) => event,
                        None => {
                            // Stored: the stream goes on from there.
                            self.drive_on(machine)?;
                            EntryEvent::Applied
                        }
                    }
                }
                EntryEffect::Finish(Ok(entered)) => return Ok(entered),
                // Someone else won (a take-over, a cancel): nothing of ours
                // was written.
                EntryEffect::Finish(Err(RunError::Conflict { .. } | RunError::NotSuspended { .. })) => {
                    return Ok(Entered::Untouched { already: Vec::new() });
                }
                EntryEffect::Finish(Err(err)) => panic!("the request was refused: {err}"),
            };
            entry.handle(event, &Book);
        }
    }

    /// A write of the entry machine, as its event.
    fn entry_write(&mut self, write: RunWrite) -> Result<EntryEvent, Stop> {
        Ok(if self.write(write)? {
            EntryEvent::Written {
                version: self.store.record.version,
                lease: None,
            }
        } else {
            EntryEvent::WriteFailed(lost())
        })
    }

    /// Runs a driver's machine to its first write, which applies the
    /// decision: `None` once stored, else the event that says why not.
    fn apply(&mut self, machine: &mut RunMachine) -> Result<Option<EntryEvent>, Stop> {
        loop {
            let event = match machine.poll_effect().expect("applying a decision ends in a write") {
                Effect::RunTools(runs) => self.tools(runs),
                Effect::Save(write) => {
                    if self.write(write.clone())? {
                        machine.handle(Event::Saved(write));
                        return Ok(None);
                    }
                    return Ok(Some(EntryEvent::ApplyFailed(ApplyFailure::Store(lost()))));
                }
                other => panic!("applying a decision, the machine asked for {other:?}"),
            };
            machine.handle(event);
        }
    }

    /// Drives the run to its end: the first stream, then recoveries after
    /// every death, and decisions (or a cancel) at every suspension.
    fn run_to_end(&mut self, picks: &[usize]) {
        let mut result = self.start();
        for round in 0..200 {
            match result {
                Err(Stop::Died) => result = self.recover(),
                Err(Stop::Settled) | Ok(()) => match self.store.record.status {
                    RunStatus::Suspended => {
                        let n = self.suspensions;
                        self.suspensions += 1;
                        if self.faults.cancel.get(n).copied().unwrap_or(false) {
                            self.store.record.status = RunStatus::Cancelled;
                            return;
                        }
                        result = self.decide(picks.get(round).copied().unwrap_or(0));
                    }
                    RunStatus::Running => result = self.recover(),
                    _ => return,
                },
            }
        }
        panic!("the run did not settle in 200 rounds: {:?}", self.store.record.status);
    }
}

/// The arguments a person approves call `id` with instead of the model's
/// (they fit the simulated tools' schema, `ask_user`'s).
fn edited_args(id: &str) -> Value {
    json!({"question": format!("edited {id}")})
}

/// A write that lost its compare-and-set.
fn lost() -> StoreError {
    StoreError::Conflict {
        run_id: "run".into(),
        expected_version: 0,
    }
}

/// The simulated agent's tools, as the entry machine asks for them: the
/// questions are `ask_user`'s (applied in one write) or `ask_once`'s (a tool
/// that acts on its answer: claimed first); for the other tools only their
/// presence is checked.
struct Book;

impl ToolBook for Book {
    fn tool(&self, name: &str) -> Option<&dyn Tool> {
        static ASK_USER: std::sync::LazyLock<AskUser> = std::sync::LazyLock::new(AskUser::new);
        match name {
            "ask_once" => Some(&AskOnce),
            _ if rules(name).is_some() => Some(&*ASK_USER),
            _ => None,
        }
    }

    fn rules(&self, name: &str) -> Option<ToolRules> {
        rules(name)
    }

    fn rule_verdict(&self, _run: &RunRecord, _name: &str, _args: &Value) -> Option<(String, crate::Verdict)> {
        None
    }
}

/// A tool that asks a question and acts on the answer (as an MCP
/// elicitation does): applying the answer runs it for real.
struct AskOnce;

#[async_trait::async_trait]
impl Tool for AskOnce {
    fn id(&self) -> &str {
        "ask_once"
    }

    fn description(&self) -> &str {
        "Asks, then acts on the answer."
    }

    fn input_schema(&self) -> &Value {
        static SCHEMA: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| json!({"type": "object"}));
        &SCHEMA
    }

    fn resume_is_pure(&self) -> bool {
        false
    }

    fn idempotent(&self) -> bool {
        false
    }

    async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<ToolOutcome, ToolError> {
        unreachable!("the simulated driver runs the tools")
    }
}

/// What the simulated agent's approval rules and grants decide about call
/// `id`, the same each time it is asked (as a rule of the agent's code is,
/// and a grant not revoked meanwhile): some calls refused, some allowed by
/// a rule, some by an earlier person's grant, the rest left to their tool.
fn ruling_for(id: &str, recorded: bool) -> Option<Ruling> {
    let (verdict, grant) = match id.bytes().map(usize::from).sum::<usize>() % 5 {
        4 => (Verdict::Deny(format!("{id} ruled out")), None),
        2 => (Verdict::Allow, None),
        3 => (Verdict::Allow, Some(simulated_grant())),
        _ => return None,
    };
    Some(Ruling {
        rule: grant.as_ref().map_or_else(|| "simulated".into(), |g| g.id.clone()),
        verdict,
        at: chrono::DateTime::UNIX_EPOCH,
        recorded,
        grant,
    })
}

/// The grant the simulation's person made earlier, for every tool.
fn simulated_grant() -> crate::Grant {
    crate::Grant {
        id: "earlier:c0".into(),
        agent_id: "agent".into(),
        tool: "any".into(),
        mcp_server: None,
        scope: crate::GrantScope::Thread,
        resource_id: "r".into(),
        thread_id: "t".into(),
        args: None,
        granted_by: Author::named(crate::Interface::Page, "dana"),
        granted_at: chrono::DateTime::UNIX_EPOCH,
        expires_at: None,
        run_id: "earlier".into(),
        tool_call_id: "c0".into(),
        revoked_at: None,
        revoked_by: None,
    }
}

fn call_id(turn: usize, call: usize) -> String {
    format!("t{turn}c{call}")
}

fn done(call: &ToolCall, text: String) -> CallOutcome {
    let result = ToolResult {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: ToolContent::Text(text.clone()),
        is_error: false,
    };
    let chunk = ChunkKind::ToolError(ToolErrorPayload {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        args: call.args.clone(),
        error: text,
    });
    CallOutcome::Done(result, chunk)
}

/// Every tool call has exactly one result, the results follow their turn
/// directly and in call order, and no result stands without its call.
fn assert_provider_accepts(messages: &[Message]) {
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            Message::Assistant { tool_calls, .. } => {
                for (k, call) in tool_calls.iter().enumerate() {
                    match messages.get(i + 1 + k) {
                        Some(Message::Tool(result)) => assert_eq!(result.tool_call_id, call.id, "{messages:#?}"),
                        // The last turn, waiting on people: its results are
                        // not in the conversation yet.
                        None if k == 0 => break,
                        None => panic!("some results of a turn are missing: {messages:#?}"),
                        Some(other) => panic!("{other:?} stands where the result of {} belongs", call.id),
                    }
                }
                i += 1 + tool_calls.len();
            }
            Message::Tool(result) => panic!("result {} has no call before it", result.tool_call_id),
            _ => i += 1,
        }
    }
}

fn script() -> impl Strategy<Value = Vec<Vec<Kind>>> {
    let kind = prop_oneof![
        Just(Kind::Plain),
        Just(Kind::Once),
        Just(Kind::Ask),
        Just(Kind::Guarded),
        Just(Kind::Checked),
        Just(Kind::AskOnce)
    ];
    prop::collection::vec(prop::collection::vec(kind, 0..=4), 0..5)
}

/// A pick of a pending call at this value or above decides every pending
/// call at once (see `World::decide`), but for the two picks below.
const ALL_AT_ONCE: usize = 4;

/// The pick that decides every call waiting for approval alike.
const EVERY_APPROVAL: usize = 6;

/// The pick that expires every call whose limit the script lets pass.
const EXPIRE_DUE: usize = 7;

/// The pick that sends a recorded decision again, then decides every
/// pending call at once.
const REPEAT: usize = 8;

fn bits(n: usize, weight: f64) -> impl Strategy<Value = Vec<bool>> {
    prop::collection::vec(prop::bool::weighted(weight), n)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn every_call_is_resolved_once_and_the_stored_conversation_stays_valid(
        script in script(),
        crash in bits(40, 0.15),
        lease_lost in bits(40, 0.1),
        cancel in bits(10, 0.1),
        accept in bits(20, 0.7),
        picks in prop::collection::vec(0usize..9, 200),
    ) {
        let faults = Faults { crash, lease_lost, cancel };
        let mut world = World::new(script.clone(), faults, &accept);
        world.run_to_end(&picks);
        let messages = &world.store.messages;
        assert_provider_accepts(messages);

        let status = world.store.record.status;
        prop_assert!(matches!(status, RunStatus::Completed | RunStatus::Cancelled), "{status:?}");
        if status == RunStatus::Completed {
            // Each call of every stored turn has exactly one result.
            for m in messages {
                if let Message::Assistant { tool_calls, .. } = m {
                    for call in tool_calls {
                        let results = messages.iter()
                            .filter(|r| matches!(r, Message::Tool(t) if t.tool_call_id == call.id))
                            .count();
                        prop_assert_eq!(results, 1, "call {}", call.id);
                    }
                }
            }
            prop_assert!(world.store.record.pending.is_empty());
            prop_assert!(world.store.record.step_results.is_empty());
        }
        // A tool the model called that must not run twice never does,
        // whatever died when: neither one that runs at once nor one that
        // runs once a person approved it.
        for (id, runs) in &world.executions {
            let kind = messages.iter().find_map(|m| match m {
                Message::Assistant { tool_calls, .. } => tool_calls.iter().find(|c| &c.id == id).map(|c| c.name.clone()),
                _ => None,
            });
            if matches!(kind.as_deref(), Some("once" | "guarded")) {
                prop_assert!(*runs <= 1, "{id} ran {runs} times");
            }
        }
        // Nor does a tool that acts on a person's answer, once answered.
        for (id, runs) in &world.answered_runs {
            let asks_once = messages.iter().any(|m| matches!(m, Message::Assistant { tool_calls, .. }
                if tool_calls.iter().any(|c| &c.id == id && c.name == "ask_once")));
            if asks_once {
                prop_assert!(*runs <= 1, "{id} ran {runs} times with its answer");
            }
        }
        // A call approved with edited arguments runs, every time it runs,
        // with exactly those, and its result tells the model so.
        for id in &world.edit {
            let approved = world.store.record.resolutions.iter().any(|r| {
                r.tool_call_id.as_deref() == Some(id.as_str()) && r.kind == ResolutionKind::Approved && r.edit.is_some()
            });
            if !approved {
                continue;
            }
            for args in world.ran_with.get(id).into_iter().flatten() {
                prop_assert_eq!(args, &edited_args(id), "{} ran with the model's arguments", id);
            }
            let told = messages.iter().any(|m| matches!(m, Message::Tool(t) if &t.tool_call_id == id
                && t.content.to_model_text().starts_with("The user edited the arguments")));
            let interrupted = messages.iter().any(|m| matches!(m, Message::Tool(t) if &t.tool_call_id == id
                && t.content.to_model_text().contains("was interrupted")));
            prop_assert!(told || interrupted || status != RunStatus::Completed, "{id}: {messages:#?}");
        }
        // A call a rule refused never runs, its result is the rule's
        // reason, and the rule's decision is recorded once; a call a rule
        // allowed where its tool's own policy asks still waited for a
        // person.
        for m in messages {
            let Message::Assistant { tool_calls, .. } = m else { continue };
            for call in tool_calls {
                let ruled = world.store.record.resolutions.iter()
                    .filter(|r| r.tool_call_id.as_deref() == Some(call.id.as_str())
                        && matches!(r.author.via, crate::store::Interface::Rule | crate::store::Interface::Grant))
                    .count();
                let ruling = ruling_for(&call.id, false);
                if ruling.as_ref().is_some_and(|r| r.grant.is_some()) {
                    // A person's grant lifts even the tool's own policy: the
                    // call never waits, and is recorded once as approved
                    // through the grant, by its maker.
                    if matches!(call.name.as_str(), "checked" | "guarded") && status == RunStatus::Completed {
                        prop_assert_eq!(ruled, 1, "{} allowed by the grant, recorded once", call.id);
                        let by_grant = world.store.record.resolution_of(&call.id);
                        prop_assert!(by_grant.is_some_and(|r| r.author.via == crate::store::Interface::Grant
                            && r.author.by.as_deref() == Some("dana")
                            && r.grant.as_ref().is_some_and(|g| g.id == "earlier:c0")), "{:?}", by_grant);
                    }
                    continue;
                }
                match ruling.map(|r| r.verdict) {
                    Some(Verdict::Deny(reason)) if status == RunStatus::Completed => {
                        prop_assert!(!world.executions.contains_key(&call.id), "{} ran though refused", call.id);
                        let told = messages.iter().any(|m| matches!(m, Message::Tool(t)
                            if t.tool_call_id == call.id && t.content.to_model_text() == reason));
                        prop_assert!(told, "{}: {messages:#?}", call.id);
                        prop_assert_eq!(ruled, 1, "{} refused once", call.id);
                    }
                    Some(Verdict::Allow) if call.name == "checked" && status == RunStatus::Completed => {
                        prop_assert_eq!(ruled, 1, "{} allowed by the rule, recorded once", call.id);
                    }
                    Some(Verdict::Allow) if call.name == "guarded" => {
                        prop_assert_eq!(ruled, 0, "{}: a rule never lifts the tool's own policy", call.id);
                    }
                    _ => {}
                }
            }
        }
        // An approval, once stored, is never asked for again, whatever
        // died when.
        for (id, approvals) in &world.approvals {
            prop_assert!(*approvals <= 1, "{id} was approved {approvals} times");
        }
        // The model is called once per stored turn, and again only for a
        // turn whose process died (or lost the run) before storing it.
        let turns = messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count();
        prop_assert_eq!(world.model_calls, turns + world.lost_turns);
    }

    #[test]
    fn a_recovered_run_ends_as_an_uninterrupted_one_given_the_same_answers(
        script in script(),
        crash in bits(40, 0.2),
        lease_lost in bits(40, 0.1),
        accept in bits(20, 0.7),
        picks in prop::collection::vec(0usize..9, 200),
        calm_picks in prop::collection::vec(0usize..9, 200),
    ) {
        let mut calm = World::new(script.clone(), Faults::default(), &accept);
        calm.run_to_end(&calm_picks);
        prop_assert_eq!(calm.recoveries, 0);
        prop_assert_eq!(calm.model_calls, calm.store.messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count());

        let faults = Faults { crash, lease_lost, cancel: Vec::new() };
        let mut rough = World::new(script, faults, &accept);
        rough.run_to_end(&picks);
        let interrupted = rough.store.messages.iter().any(|m| matches!(m, Message::Tool(t)
            if matches!(&t.content, ToolContent::Text(text) if text.contains("was interrupted"))));
        // A must-not-run-twice tool interrupted mid-run is reported to the
        // model instead of run again: that run ends differently, by design.
        if !interrupted {
            prop_assert_eq!(&rough.store.messages, &calm.store.messages);
            prop_assert_eq!(rough.store.record.status, calm.store.record.status);
        }
    }
}

//! Property tests of the run machine: random runs (model turns of 0-4 tool
//! calls: plain, must-not-run-twice, questions and calls waiting for
//! approval, of tools that may or must not run twice), answered, declined,
//! expired and approved in random order, with cancels, process deaths
//! before any write and lost leases. A small simulated driver carries out
//! the [`RunMachine`]'s effects against a simulated model, tools and store
//! the way `driver.rs` does against real ones, and feeds back the events;
//! the properties are checked on what is stored.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use serde_json::{Value, json};

use super::machine::{
    self, CallOutcome, CheckedCall, Decision, Effect, End, Event, ModelTurn, Resume, ResumeAction, RunMachine,
    RunWrite, ToolRules, ToolRun,
};
use crate::ask_user::AskUser;
use crate::chunk::{ChunkKind, ToolErrorPayload};
use crate::message::{FinishReason, Message, ToolCall, ToolContent, ToolResult};
use crate::store::{PendingKind, PendingToolCall, RunFailure, RunRecord, RunStatus};

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
}

const TOOLS: [&str; 5] = ["plain", "once", "ask_user", "guarded", "checked"];

fn rules(name: &str) -> Option<ToolRules> {
    match name {
        "plain" | "ask_user" => Some(ToolRules {
            needs_approval: false,
            idempotent: true,
            max_per_step: None,
        }),
        "once" => Some(ToolRules {
            needs_approval: false,
            idempotent: false,
            max_per_step: None,
        }),
        "guarded" => Some(ToolRules {
            needs_approval: true,
            idempotent: false,
            max_per_step: None,
        }),
        "checked" => Some(ToolRules {
            needs_approval: true,
            idempotent: true,
            max_per_step: None,
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
}

impl World {
    fn new(script: Vec<Vec<Kind>>, faults: Faults, accept_bits: &[bool]) -> World {
        let mut accept = HashMap::new();
        let mut expire = HashSet::new();
        for (t, turn) in script.iter().enumerate() {
            for c in 0..turn.len() {
                let bit = accept_bits.get(t * 4 + c).copied().unwrap_or(true);
                accept.insert(call_id(t, c), bit);
                if !bit && (t + c) % 2 == 1 {
                    expire.insert(call_id(t, c));
                }
            }
        }
        let record = RunRecord {
            run_id: "run".into(),
            status: RunStatus::Running,
            ..Default::default()
        };
        World {
            script,
            faults,
            accept,
            expire,
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
        let record = &mut self.store.record;
        record.status = write.status;
        record.pending = write.pending;
        record.step_results = write.step_results;
        record.steps = write.steps;
        record.version += 1;
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
                CheckedCall::sound(ToolCall {
                    id: call_id(turn, c),
                    name: TOOLS[*kind as usize].into(),
                    args: json!({"question": format!("q{turn}{c}")}),
                })
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
        match (call.name.as_str(), answer) {
            ("ask_user", None) => CallOutcome::Pending(PendingToolCall {
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
        loop {
            let effect = machine.poll_effect().expect("the machine ends every stream");
            let event = match effect {
                Effect::Emit(_) | Effect::ReportStep { .. } => continue,
                Effect::CallModel { .. } => Event::ModelFinished(self.model()),
                Effect::RunTools(runs) => Event::ToolsReturned(
                    runs.into_iter()
                        .map(|run| match run {
                            ToolRun::Done(outcome) => outcome,
                            ToolRun::Wait(pending) => CallOutcome::Pending(pending),
                            ToolRun::Execute { call, resumed } => {
                                self.execute(&call, resumed.as_ref().map(|r| &r.data))
                            }
                        })
                        .collect(),
                ),
                Effect::Save(write) => match self.write(write.clone())? {
                    true => Event::Saved(write),
                    false => Event::SaveFailed {
                        conflict: true,
                        transient: false,
                        message: "lost".into(),
                    },
                },
                Effect::ReadRun => Event::RunRead(Some(Box::new(self.store.record.clone()))),
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

    /// A new run's first stream.
    fn start(&mut self) -> Result<(), Stop> {
        self.drive(self.machine(), Event::Started)
    }

    /// Continues the stored run the way recovery does.
    fn recover(&mut self) -> Result<(), Stop> {
        self.recoveries += 1;
        let messages = &self.store.messages;
        let ends_on_calls =
            matches!(messages.last(), Some(Message::Assistant { tool_calls, .. }) if !tool_calls.is_empty());
        let last_calls =
            machine::last_tool_calls(messages).map(|calls| calls.into_iter().map(CheckedCall::sound).collect());
        self.drive(
            self.machine(),
            Event::Recovered {
                last_calls,
                ends_on_calls,
            },
        )
    }

    /// Decides one pending call (picked by `pick`) and carries on.
    fn decide(&mut self, pick: usize) -> Result<(), Stop> {
        let record = self.store.record.clone();
        let pending = record.pending[pick % record.pending.len()].clone();
        let accept = self.accept.get(&pending.tool_call_id).copied().unwrap_or(true);
        let decision = match (pending.kind, accept) {
            (PendingKind::Suspended, true) => Decision::Answer {
                data: json!(format!("answer to {}", pending.tool_call_id)),
                reason: None,
            },
            (PendingKind::Approval, true) => Decision::Approve,
            (_, false) if self.expire.contains(&pending.tool_call_id) => Decision::Expire,
            (_, false) => Decision::Decline(Some("no".into())),
        };
        // The questions are ask_user's; for an approval only the tool's
        // presence is checked.
        let tool = AskUser::new();
        let action =
            machine::fit_decision(&record, &pending, &decision, Some(&tool), "agent").expect("the decision fits");
        // An approval runs the tool for real: the run is claimed first, as
        // `resume.rs` does (answers to ask_user are applied in one write).
        // A tool that must not run twice is marked started by the claim.
        let claimed = matches!(action, ResumeAction::Approve { .. });
        if claimed {
            let mut pending = record.pending.clone();
            if machine::marks_start(&action, rules(&pending_name(&record, &action))) {
                pending = machine::mark_started(&pending, action.tool_call_id(), chrono::Utc::now());
            }
            let claim = RunWrite {
                status: RunStatus::Running,
                append: Vec::new(),
                pending,
                step_results: record.step_results.clone(),
                steps: record.steps,
                usage: record.usage,
                failure: None,
                resolution: None,
            };
            if !self.write(claim)? {
                // Lost to a cancel or a take-over: nothing was claimed.
                return Err(if self.store.record.status == RunStatus::Cancelled {
                    Stop::Settled
                } else {
                    Stop::Died
                });
            }
            *self.approvals.entry(action.tool_call_id().to_owned()).or_default() += 1;
        }
        let resume = Resume {
            action,
            resolution: None,
            decline_answer: None,
            turn_calls: machine::last_tool_calls(&self.store.messages),
            claimed,
        };
        self.drive(self.machine(), Event::Resumed(resume))
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

/// The tool of the pending call `action` decides.
fn pending_name(record: &RunRecord, action: &ResumeAction) -> String {
    record
        .pending
        .iter()
        .find(|p| p.tool_call_id == action.tool_call_id())
        .map(|p| p.tool_name.clone())
        .unwrap_or_default()
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
        Just(Kind::Checked)
    ];
    prop::collection::vec(prop::collection::vec(kind, 0..=4), 0..5)
}

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
        picks in prop::collection::vec(0usize..4, 200),
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
        picks in prop::collection::vec(0usize..4, 200),
        calm_picks in prop::collection::vec(0usize..4, 200),
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

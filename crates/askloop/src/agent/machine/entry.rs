//! How a request about a stored run gets into it: a person's decision for a
//! pending call (an answer, an approval, a decline, an expiry), a cancel, a
//! take-over of a run whose driver stopped, a retry of a failed run.
//!
//! [`Entry`] is that protocol as a machine of events in, effects out, the
//! shape of [`RunMachine`](super::RunMachine): it reads the run, decides
//! whether the request fits it, and says what to write (a claim, a cancel, a
//! take-over) or which driver to start, and what a lost compare-and-set
//! means: wait for a sibling answer's write and try again, or give up with
//! [`RunError::Conflict`]. It does no I/O and reads no clock: the time
//! comes with each read of the run ([`EntryEvent::Read`]), and waits are
//! effects. What it needs of the agent's tools (whether an answer fits a
//! question, whether applying it has effects) it asks a [`ToolBook`].
//!
//! Once the request holds the run, the [`RunMachine`](super::RunMachine) of
//! the driver it starts takes over.

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::expiry;
use super::{Decision, FittedDecision, RunWrite, ToolRules, calls, fit_decision, mark_started, marks_start};
use crate::Backoff;
use crate::error::RunError;
use crate::store::{Author, Lease, Resolution, ResolutionKind, RunRecord, RunStatus, StoreError};
use crate::tool::Tool;

/// How many times a request reads the run and tries its write when other
/// writers change the run first.
pub(crate) const ATTEMPTS: u32 = 12;

/// The waits before trying again: from 2 ms, doubled each time up to 128
/// ms: another answer of the same step holds the run for one short write.
const WAITS: Backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(128));

/// What the machine needs to know of the agent's tools.
pub(crate) trait ToolBook {
    /// The tool called `name`, if the agent has it.
    fn tool(&self, name: &str) -> Option<&dyn Tool>;
    /// Its rules, if the agent has it.
    fn rules(&self, name: &str) -> Option<ToolRules>;
    /// Why `args` do not fit the input schema of the tool called `name`,
    /// if they do not (nothing for a tool the agent does not have). The
    /// agent answers from the validator it compiled once per tool.
    fn input_problem(&self, name: &str, args: &serde_json::Value) -> Option<String> {
        let tool = self.tool(name)?;
        crate::tool::check_against_schema(tool.input_schema(), args)
            .err()
            .map(|err| err.to_string())
    }
    /// The first of the agent's approval rules with a verdict about a call
    /// of the tool `name` with `args` in `run`, judged as the model's calls
    /// are (on the arguments as the tool will act on them), and that
    /// rule's name. Asked of arguments a person edited before approving.
    fn rule_verdict(&self, run: &RunRecord, name: &str, args: &serde_json::Value) -> Option<(String, crate::Verdict)>;
}

/// What someone asks of a stored run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Request {
    /// A decision for a pending call: the one named, or the only one.
    Decide {
        tool_call_id: Option<String>,
        decision: Decision,
        author: Author,
    },
    /// Decisions for several pending calls of the run's step, each named,
    /// applied as one: every one is checked before anything is written,
    /// the run is claimed once, and the model is called once after the
    /// last (if no other call still waits).
    DecideAll {
        decisions: Vec<(String, Decision)>,
        author: Author,
    },
    /// The same decision (an approval or a decline) for every call of the
    /// run that waits for approval, applied as one; questions stay open.
    /// Which calls those are is read from the run on each attempt, so a
    /// call someone else decided meanwhile is not decided twice.
    DecideEveryApproval { decision: Decision, author: Author },
    /// Every call of the run whose time limit has passed at the read,
    /// resolved as expired, as one decision. A run with none due is left
    /// alone; so is one whose due calls someone else resolved first.
    ExpireDue { author: Author },
    /// End the run where it is.
    Cancel { author: Author },
    /// End a run waiting on a person because a new message came on its
    /// thread instead of an answer: its pending calls get a result saying
    /// so (a thread never holds a call without its result), the run is
    /// cancelled and the model is not called again. A run not waiting is
    /// left alone.
    Supersede { author: Author },
    /// Take over the run if its lease ran out (its driver stopped).
    Recover { author: Author },
    /// Continue a failed run, if it failed for a reason trying again may fix.
    Retry { author: Author },
}

/// What happened, as the executor tells the machine.
// Handed over once each, by value: the run read is the common case.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum EntryEvent {
    /// The run as read at `now` (`None`: there is no such run).
    Read { run: Option<RunRecord>, now: DateTime<Utc> },
    /// The run could not be read.
    ReadFailed(StoreError),
    /// The wait of [`EntryEffect::Wait`] is over.
    Waited,
    /// The write of [`EntryEffect::Claim`], [`EntryEffect::Write`] or
    /// [`EntryEffect::Reclaim`] landed: the run's new version, and the
    /// lease it was written with.
    Written { version: i64, lease: Option<Lease> },
    /// That write did not land (a lost compare-and-set is
    /// [`StoreError::Conflict`]).
    WriteFailed(StoreError),
    /// The decision of [`EntryEffect::Apply`] is applied and stored.
    Applied,
    /// It was not: the write failed (or lost), or the run's stored step did
    /// not fit it.
    ApplyFailed(ApplyFailure),
}

/// Why a decision could not be applied.
#[derive(Debug)]
pub(crate) enum ApplyFailure {
    /// Its write failed (a lost compare-and-set is `StoreError::Conflict`).
    Store(StoreError),
    /// The run as stored does not fit it.
    Refused(RunError),
}

/// What the executor is to do next.
#[derive(Debug)]
pub(crate) enum EntryEffect {
    /// Read the run, with the time now: [`EntryEvent::Read`].
    Read,
    /// Wait this long, give or take the jitter the executor adds:
    /// [`EntryEvent::Waited`].
    Wait(Duration),
    /// Claim the suspended run as read (status `running`, held by a new
    /// lease until `lease_until`), in one compare-and-set.
    Claim { lease_until: DateTime<Utc> },
    /// Write this over the run as read, in one compare-and-set; a lease
    /// until `lease_until` when the run stays running.
    Write {
        write: RunWrite,
        lease_until: Option<DateTime<Utc>>,
    },
    /// Take the run over (a stalled or failed run), held by a new lease
    /// until `lease_until`, recording `resolution`.
    Reclaim {
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
        resolution: Resolution,
    },
    /// Let a driver of the run as read apply these decisions, with no
    /// effect outside the run, in one write that is also the claim. The run
    /// goes with the effect (the machine needs it no more: a lost write
    /// reads it again), so the driver takes it without a copy.
    Apply {
        actions: Vec<FittedDecision>,
        author: Author,
        run: Box<RunRecord>,
    },
    /// The request is done.
    Finish(Result<Entered, RunError>),
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Entered {
    /// The run is held: drive it from `start`. `settle`: drive it to its
    /// next stored state before handing the stream out (an answer while
    /// other calls of the step still wait ends in one write, which answers
    /// to sibling questions must not wait on).
    Drive { start: DriveFrom, settle: bool },
    /// The decisions were applied by the driver of [`EntryEffect::Apply`]:
    /// it goes on from there.
    Applied,
    /// The run is cancelled.
    Cancelled,
    /// Nothing was done: the run did not need it (not stalled), someone
    /// else did it first (the call was answered, the run taken over), or
    /// every decision asked was made already, as `already` lists (a
    /// repeat: each call with how it was decided).
    Untouched { already: Vec<(String, ResolutionKind)> },
}

/// Where a driver of a held run starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DriveFrom {
    /// Apply these decisions together, recording who made each (`None`:
    /// the claim recorded it already, marking its call started).
    Resume(Vec<(FittedDecision, Option<Author>)>),
    /// Go on from the last stored step of a run taken over.
    Recovered,
}

/// Where the request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A read is in flight.
    Reading,
    /// A read is in flight after a lost write: is ours still worth trying?
    ReadingAfterLoss,
    /// Waiting before the next read.
    Waiting,
    /// A write (or an applying driver) is in flight.
    Writing,
    Ended,
}

/// One request's way into a stored run (see the module documentation).
#[derive(Debug)]
pub(crate) struct Entry {
    run_id: String,
    agent_id: String,
    request: Request,
    lease: TimeDelta,
    attempt: u32,
    phase: Phase,
    /// The run as last read, then as the landed write left it.
    run: Option<RunRecord>,
    /// The version the run was read at (the conversation cache's key).
    read_version: i64,
    /// The write in flight, applied to `run` once it lands.
    writing: Option<Writing>,
    /// The calls the decisions resolve, once found.
    ours: Vec<String>,
    /// The decisions found made already, as asked (repeats): each call
    /// with how it was decided. They are left out of what is applied.
    already: Vec<(String, ResolutionKind)>,
    effects: VecDeque<EntryEffect>,
}

/// What the write in flight does, once it lands.
// One per request, held while its write is in flight.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
enum Writing {
    /// A claim, then a driver from `start`.
    Claim {
        write: Option<RunWrite>,
        start: DriveFrom,
    },
    Cancel,
    Reclaim {
        resolution: Resolution,
    },
    /// A decision applied by a driver.
    Apply,
}

impl Entry {
    /// A request of agent `agent_id` (whose drivers hold a run for
    /// `lease_duration` at a time) about run `run_id`. It starts by reading
    /// the run.
    pub(crate) fn new(run_id: &str, agent_id: &str, request: Request, lease_duration: Duration) -> Entry {
        let mut entry = Entry {
            run_id: run_id.to_owned(),
            agent_id: agent_id.to_owned(),
            request,
            lease: TimeDelta::from_std(lease_duration).unwrap_or(TimeDelta::MAX),
            attempt: 0,
            phase: Phase::Reading,
            run: None,
            read_version: 0,
            writing: None,
            ours: Vec::new(),
            already: Vec::new(),
            effects: VecDeque::new(),
        };
        entry.effects.push_back(EntryEffect::Read);
        entry
    }

    /// The next thing to do, if any.
    pub(crate) fn poll_effect(&mut self) -> Option<EntryEffect> {
        self.effects.pop_front()
    }

    /// The run the request is about.
    pub(crate) fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The run as last read and written (none while a driver applies a
    /// decision: [`EntryEffect::Apply`] took it).
    pub(crate) fn run(&self) -> Option<&RunRecord> {
        self.run.as_ref()
    }

    /// The run, once the request holds it.
    pub(crate) fn into_run(self) -> Option<RunRecord> {
        self.run
    }

    /// The version the run was last read at.
    pub(crate) fn read_version(&self) -> i64 {
        self.read_version
    }

    /// The decisions of the request found made already, as asked, on the
    /// last read (see [`Entered::Untouched`]).
    pub(crate) fn already(&self) -> &[(String, ResolutionKind)] {
        &self.already
    }

    /// Moves the request on by one event.
    pub(crate) fn handle(&mut self, event: EntryEvent, tools: &dyn ToolBook) {
        match (self.phase, event) {
            (Phase::Reading, EntryEvent::Read { run, now }) => self.read(run, now, tools),
            (Phase::ReadingAfterLoss, EntryEvent::Read { run, .. }) => self.read_after_loss(run),
            (Phase::Reading | Phase::ReadingAfterLoss, EntryEvent::ReadFailed(err)) => self.finish(Err(err.into())),
            (Phase::Waiting, EntryEvent::Waited) => self.read_again(),
            (Phase::Writing, EntryEvent::Written { version, lease }) => self.written(version, lease),
            (Phase::Writing, EntryEvent::WriteFailed(err)) => self.write_failed(err),
            (Phase::Writing, EntryEvent::Applied) => self.finish(Ok(Entered::Applied)),
            (Phase::Writing, EntryEvent::ApplyFailed(ApplyFailure::Store(err))) => self.write_failed(err),
            (Phase::Writing, EntryEvent::ApplyFailed(ApplyFailure::Refused(err))) => self.finish(Err(err)),
            (phase, event) => {
                let detail = format!("{event:?} arrived while the request was {phase:?}");
                self.finish(Err(RunError::internal(&self.run_id, detail)));
            }
        }
    }

    fn finish(&mut self, result: Result<Entered, RunError>) {
        // An expiry that someone else's decision (or another sweep) beat to
        // the call has nothing left to do.
        let result = match (&self.request, result) {
            (
                Request::Decide {
                    decision: Decision::Expire,
                    ..
                }
                | Request::ExpireDue { .. },
                Err(
                    RunError::ToolCallNotPending { .. }
                    | RunError::NotSuspended { .. }
                    | RunError::Conflict { .. }
                    | RunError::Expired { .. }
                    | RunError::AlreadyDecided { .. },
                ),
            ) => Ok(Entered::Untouched { already: Vec::new() }),
            (_, result) => result,
        };
        self.phase = Phase::Ended;
        self.effects.push_back(EntryEffect::Finish(result));
    }

    fn read_again(&mut self) {
        self.phase = Phase::Reading;
        self.effects.push_back(EntryEffect::Read);
    }

    /// Waits before reading again: askloop's one backoff, longer each
    /// attempt. The machine names the nominal wait, so it stays
    /// deterministic; the code carrying out [`EntryEffect::Wait`] adds the
    /// jitter ([`crate::jitter`]).
    fn wait_and_read(&mut self) {
        let wait = WAITS.nominal(self.attempt);
        self.phase = Phase::Waiting;
        self.effects.push_back(EntryEffect::Wait(wait));
    }

    /// The run as read, checked to be this agent's.
    fn own(&self, run: Option<RunRecord>) -> Result<RunRecord, RunError> {
        let run = run.ok_or_else(|| RunError::UnknownRun {
            run_id: self.run_id.clone(),
        })?;
        if run.agent_id != self.agent_id {
            return Err(RunError::OtherAgent {
                run_id: run.run_id,
                agent_id: self.agent_id.clone(),
                owner: run.agent_id,
            });
        }
        Ok(run)
    }

    fn read(&mut self, run: Option<RunRecord>, now: DateTime<Utc>, tools: &dyn ToolBook) {
        self.attempt += 1;
        let run = match self.own(run) {
            Ok(run) => run,
            Err(err) => return self.finish(Err(err)),
        };
        self.read_version = run.version;
        let request = self.request.clone();
        let outcome = match request {
            Request::Decide {
                tool_call_id,
                decision,
                author,
            } => self.decide(&run, &[(tool_call_id.as_deref(), &decision)], author, now, tools),
            Request::DecideAll { decisions, author } => {
                let named: Vec<(Option<&str>, &Decision)> = decisions
                    .iter()
                    .map(|(id, decision)| (Some(id.as_str()), decision))
                    .collect();
                self.decide(&run, &named, author, now, tools)
            }
            Request::DecideEveryApproval { decision, author } => match every_approval(&run) {
                Ok(ids) => {
                    let named: Vec<(Option<&str>, &Decision)> =
                        ids.iter().map(|id| (Some(id.as_str()), &decision)).collect();
                    self.decide(&run, &named, author, now, tools)
                }
                Err(err) => Err(err),
            },
            Request::ExpireDue { author } => {
                let due: Vec<String> = run.expired_calls(now).map(|p| p.tool_call_id.clone()).collect();
                if due.is_empty() {
                    self.finish(Ok(Entered::Untouched { already: Vec::new() }));
                    Ok(None)
                } else {
                    let named: Vec<(Option<&str>, &Decision)> =
                        due.iter().map(|id| (Some(id.as_str()), &Decision::Expire)).collect();
                    self.decide(&run, &named, author, now, tools)
                }
            }
            Request::Cancel { author } => self.cancel(&run, author, now).map(|()| None),
            Request::Supersede { author } => {
                self.supersede(&run, author, now);
                Ok(None)
            }
            Request::Recover { author } => self.recover(&run, author, now).map(|()| None),
            Request::Retry { author } => self.retry(&run, author, now).map(|()| None),
        };
        match outcome {
            Ok(None) => self.run = Some(run),
            Ok(Some((actions, author))) => self.effects.push_back(EntryEffect::Apply {
                actions,
                author,
                run: Box::new(run),
            }),
            Err(err) => {
                self.run = Some(run);
                self.finish(Err(err));
            }
        }
    }

    /// Decisions (one, or several applied as one): refused, all of them,
    /// when one comes too late, does not fit its call or names a call
    /// another decision names; applied in one write when applying them has
    /// no effect outside the run, else after one claim (a tool may have
    /// effects, so it runs only once the run is held). Decisions to apply
    /// at once come back, for [`EntryEffect::Apply`] to carry with the run.
    fn decide(
        &mut self,
        run: &RunRecord,
        decisions: &[(Option<&str>, &Decision)],
        author: Author,
        now: DateTime<Utc>,
        tools: &dyn ToolBook,
    ) -> Result<Option<(Vec<FittedDecision>, Author)>, RunError> {
        // Another answer of the same step holds the run for one write.
        if run.status == RunStatus::Running
            && self.attempt < ATTEMPTS
            && decisions
                .iter()
                .any(|(id, _)| super::sibling_answer_in_flight(run, *id))
        {
            self.wait_and_read();
            return Ok(None);
        }
        let mut fitted = Vec::with_capacity(decisions.len());
        self.already.clear();
        for &(tool_call_id, decision) in decisions {
            let late = *decision != Decision::Expire;
            if late && let Some((tool_call_id, expired_at)) = calls::expired_before_answer(run, tool_call_id, now) {
                return Err(self.expired(tool_call_id, expired_at));
            }
            if let Some(id) = tool_call_id
                && let Some(made) = super::decided_already(run, id, decision, now)?
            {
                self.already.push((id.to_owned(), made));
                continue;
            }
            let target = run.resume_target(tool_call_id)?;
            if late && let Some(expired_at) = target.expires_at.filter(|at| *at <= now) {
                return Err(self.expired(target.tool_call_id.clone(), expired_at));
            }
            let action = fit_decision(run, target, decision, tools, &self.agent_id)?;
            if fitted
                .iter()
                .any(|(_, a): &(_, FittedDecision)| a.tool_call_id() == action.tool_call_id())
            {
                return Err(RunError::InvalidInput(format!(
                    "call {} of run {} has two decisions in one request; send one per call",
                    action.tool_call_id(),
                    self.run_id
                )));
            }
            fitted.push((target, action));
        }
        if fitted.is_empty() {
            // Every decision was made already, as asked: nothing to do.
            self.finish(Ok(Entered::Untouched {
                already: self.already.clone(),
            }));
            return Ok(None);
        }
        self.ours = fitted.iter().map(|(_, a)| a.tool_call_id().to_owned()).collect();
        self.phase = Phase::Writing;
        if fitted
            .iter()
            .all(|(target, action)| applies_without_effects(action, &target.tool_name, tools))
        {
            self.writing = Some(Writing::Apply);
            return Ok(Some((fitted.into_iter().map(|(_, a)| a).collect(), author)));
        }
        let lease_until = now + self.lease;
        let marked: Vec<bool> = fitted
            .iter()
            .map(|(target, action)| marks_start(action, tools.rules(&target.tool_name)))
            .collect();
        if !marked.contains(&true) {
            let start = fitted.into_iter().map(|(_, a)| (a, Some(author.clone()))).collect();
            self.writing = Some(Writing::Claim {
                write: None,
                start: DriveFrom::Resume(start),
            });
            self.effects.push_back(EntryEffect::Claim { lease_until });
            return Ok(None);
        }
        // The claim marks those calls started and records their decisions:
        // a process dying before their results are written leaves calls
        // that recovery never runs (or asks) a second time.
        let mut pending = run.pending.clone();
        let mut resolutions = Vec::new();
        let mut grants = Vec::new();
        let mut start = Vec::with_capacity(fitted.len());
        for ((target, action), marked) in fitted.into_iter().zip(marked) {
            if marked {
                let id = action.tool_call_id();
                pending = mark_started(&pending, id, now);
                let mut resolution = expiry::resolution(Some(target), &action, author.clone(), now);
                // An approval that sticks is stored with the approval, in
                // the claim's write: a lost claim grants nothing.
                if let Some(grant) = grant_of(run, target, &action, tools, &self.agent_id, &author, now) {
                    resolution.grant = Some(grant.note());
                    grants.push(grant);
                }
                resolutions.push(resolution);
                start.push((action, None));
            } else {
                start.push((action, Some(author.clone())));
            }
        }
        let write = RunWrite {
            status: RunStatus::Running,
            append: Vec::new(),
            pending,
            step_results: run.step_results.clone(),
            steps: run.steps,
            usage: run.usage,
            failure: None,
            resolutions,
            hold: true,
            grants,
        };
        self.writing = Some(Writing::Claim {
            write: Some(write.clone()),
            start: DriveFrom::Resume(start),
        });
        self.effects.push_back(EntryEffect::Write {
            write,
            lease_until: Some(lease_until),
        });
        Ok(None)
    }

    fn expired(&self, tool_call_id: String, expired_at: DateTime<Utc>) -> RunError {
        RunError::Expired {
            run_id: self.run_id.clone(),
            tool_call_id,
            expired_at,
        }
    }

    /// A cancel: a finished run cannot be; any other is written cancelled,
    /// with nothing pending.
    fn cancel(&mut self, run: &RunRecord, author: Author, now: DateTime<Utc>) -> Result<(), RunError> {
        if run.status.is_finished() {
            return Err(RunError::Finished {
                run_id: self.run_id.clone(),
                status: run.status,
            });
        }
        let resolution = Resolution {
            tool_call_id: None,
            kind: ResolutionKind::Cancelled,
            at: now,
            author,
            edit: None,
            grant: None,
        };
        self.end_cancelled(run, Vec::new(), resolution);
        Ok(())
    }

    /// A supersession: a suspended run is written cancelled, each of its
    /// step's calls paired with its result (those produced, and for each
    /// pending call one saying it went unanswered), in one write; any other
    /// run is left alone.
    fn supersede(&mut self, run: &RunRecord, author: Author, now: DateTime<Utc>) {
        if run.status != RunStatus::Suspended {
            return self.finish(Ok(Entered::Untouched { already: Vec::new() }));
        }
        let produced = run.step_results.iter().cloned();
        let unanswered = run.pending.iter().map(superseded_result);
        let append = produced.chain(unanswered).map(crate::message::Message::Tool).collect();
        let only = match run.pending.as_slice() {
            [only] => Some(only.tool_call_id.clone()),
            _ => None,
        };
        let resolution = Resolution {
            tool_call_id: only,
            kind: ResolutionKind::Superseded,
            at: now,
            author,
            edit: None,
            grant: None,
        };
        self.end_cancelled(run, append, resolution);
    }

    /// Writes the run cancelled with nothing pending, appending `append`
    /// and recording `resolution`, in one compare-and-set.
    fn end_cancelled(&mut self, run: &RunRecord, append: Vec<crate::message::Message>, resolution: Resolution) {
        let write = RunWrite {
            status: RunStatus::Cancelled,
            append,
            pending: Vec::new(),
            step_results: Vec::new(),
            steps: run.steps,
            usage: run.usage,
            failure: None,
            resolutions: vec![resolution],
            hold: false,
            grants: Vec::new(),
        };
        self.phase = Phase::Writing;
        self.writing = Some(Writing::Cancel);
        self.effects.push_back(EntryEffect::Write {
            write,
            lease_until: None,
        });
    }

    /// A take-over of a stalled run; a run that is not stalled (its driver
    /// renewed its lease, or it is no longer running) is left alone.
    fn recover(&mut self, run: &RunRecord, author: Author, now: DateTime<Utc>) -> Result<(), RunError> {
        if !run.is_stalled(now) {
            self.finish(Ok(Entered::Untouched { already: Vec::new() }));
            return Ok(());
        }
        self.reclaim(author, now);
        Ok(())
    }

    /// A retry: only of a run that failed, for a reason trying again may fix.
    fn retry(&mut self, run: &RunRecord, author: Author, now: DateTime<Utc>) -> Result<(), RunError> {
        if run.status != RunStatus::Failed {
            return Err(RunError::NotRetryable {
                run_id: self.run_id.clone(),
                reason: format!("it is {}, not failed", run.status),
            });
        }
        if let Some(failure) = run.failure.as_ref().filter(|f| !f.is_transient()) {
            return Err(RunError::NotRetryable {
                run_id: self.run_id.clone(),
                reason: format!("it failed for a reason trying again does not fix: {failure}"),
            });
        }
        self.reclaim(author, now);
        Ok(())
    }

    fn reclaim(&mut self, author: Author, now: DateTime<Utc>) {
        let resolution = Resolution {
            tool_call_id: None,
            kind: ResolutionKind::Recovered,
            at: now,
            author,
            edit: None,
            grant: None,
        };
        self.phase = Phase::Writing;
        self.writing = Some(Writing::Reclaim {
            resolution: resolution.clone(),
        });
        self.effects.push_back(EntryEffect::Reclaim {
            lease_until: now + self.lease,
            now,
            resolution,
        });
    }

    /// The write landed: the run as it left it, then what follows.
    fn written(&mut self, version: i64, lease: Option<Lease>) {
        let (Some(mut run), Some(writing)) = (self.run.take(), self.writing.take()) else {
            return self.finish(Err(RunError::internal(
                &self.run_id,
                "a write landed that the request did not make",
            )));
        };
        let entered = match writing {
            Writing::Claim { write, start } => {
                let mut write = write.unwrap_or_else(|| RunWrite::claim(&run));
                super::record_landed(&mut run, &mut write, version, lease);
                run.pending = write.pending;
                // Answers while other calls of the step still wait end in
                // one write and no model call.
                let decided = match &start {
                    DriveFrom::Resume(decisions) => decisions.len(),
                    DriveFrom::Recovered => 0,
                };
                let settle = run.pending.len() > decided;
                Entered::Drive { start, settle }
            }
            Writing::Cancel => Entered::Cancelled,
            Writing::Reclaim { resolution } => {
                let mut write = RunWrite::claim(&run);
                write.resolutions = vec![resolution];
                super::record_landed(&mut run, &mut write, version, lease);
                Entered::Drive {
                    start: DriveFrom::Recovered,
                    settle: false,
                }
            }
            Writing::Apply => Entered::Applied,
        };
        self.run = Some(run);
        self.finish(Ok(entered));
    }

    /// The write did not land. Lost to another writer: a decision for a
    /// call still wanted tries again; a take-over leaves the run to whoever
    /// won; a cancel reads and tries again. Anything else fails the request.
    fn write_failed(&mut self, err: StoreError) {
        let writing = self.writing.take();
        if !err.is_conflict() {
            return self.finish(Err(err.into()));
        }
        let conflict = RunError::Conflict {
            run_id: self.run_id.clone(),
        };
        match (&self.request, writing) {
            (Request::Recover { .. }, _) => self.finish(Ok(Entered::Untouched { already: Vec::new() })),
            (Request::Retry { .. }, _) => self.finish(Err(conflict)),
            _ if self.attempt >= ATTEMPTS => self.finish(Err(conflict)),
            // Which calls these decide is read again: those still due, or
            // still waiting for approval.
            (
                Request::Cancel { .. }
                | Request::Supersede { .. }
                | Request::DecideEveryApproval { .. }
                | Request::ExpireDue { .. },
                _,
            ) => self.wait_and_read(),
            (Request::Decide { .. } | Request::DecideAll { .. }, _) => {
                self.phase = Phase::ReadingAfterLoss;
                self.effects.push_back(EntryEffect::Read);
            }
        }
    }

    /// After a lost write of decisions: tried again while each of their
    /// calls is still pending, or another answer of the same step holds the
    /// run.
    fn read_after_loss(&mut self, run: Option<RunRecord>) {
        let retry = match run.as_ref() {
            Some(now) => !self.ours.is_empty() && self.ours.iter().all(|ours| super::retry_lost_claim(now, ours)),
            None => false,
        };
        if !retry {
            return self.finish(Err(RunError::Conflict {
                run_id: self.run_id.clone(),
            }));
        }
        self.wait_and_read();
    }
}

/// The calls of `run` that wait for approval, for a decision of every one;
/// refused, saying why, when the run does not wait (as a single decision
/// would be) or waits only on questions.
fn every_approval(run: &RunRecord) -> Result<Vec<String>, RunError> {
    if run.status != RunStatus::Suspended {
        return Err(match run.resume_target(None) {
            Err(why) => why,
            Ok(_) => RunError::NotSuspended {
                run_id: run.run_id.clone(),
                status: run.status,
            },
        });
    }
    let (approvals, questions): (Vec<_>, Vec<_>) = run
        .pending
        .iter()
        .partition(|p| p.kind == crate::store::PendingKind::Approval);
    if approvals.is_empty() {
        return Err(RunError::NothingToApprove {
            run_id: run.run_id.clone(),
            questions: questions.iter().map(|q| q.tool_call_id.clone()).collect(),
        });
    }
    Ok(approvals.iter().map(|p| p.tool_call_id.clone()).collect())
}

/// The result a call gets when a new message on its thread came instead of
/// its answer: what the model is told, in the thread and in every later
/// run's context.
pub(crate) fn superseded_result(call: &crate::store::PendingToolCall) -> crate::message::ToolResult {
    crate::message::ToolResult {
        tool_call_id: call.tool_call_id.clone(),
        tool_name: call.tool_name.clone(),
        content: crate::message::ToolContent::Text(UNANSWERED.into()),
        is_error: true,
    }
}

/// What the model is told of a call that got no answer because the person
/// sent a new message instead.
pub(crate) const UNANSWERED: &str =
    "No answer: the user sent a new message instead of answering. Do not assume an answer.";

/// Whether applying `action` to a call of `tool_name` has no effect outside
/// the run, so that it can be written as the claim itself (see
/// [`Tool::resume_is_pure`]): declines always, except where the tool hears
/// a decline as an answer ([`Tool::decline_as_answer`]); expiries always;
/// answers when the tool says so; never an approval, which runs the tool for
/// real.
/// The grant an approval that sticks makes: for the call's tool (and its
/// MCP server) of agent `agent_id`, in the run's thread or resource, with
/// the arguments as the tool acts on them when it covers only those, made
/// by `author` at `now`. `None` for any other decision (and for a run on
/// no thread, which the decision's check refused already).
fn grant_of(
    run: &RunRecord,
    call: &crate::store::PendingToolCall,
    action: &FittedDecision,
    tools: &dyn ToolBook,
    agent_id: &str,
    author: &Author,
    now: DateTime<Utc>,
) -> Option<crate::Grant> {
    let FittedDecision::Approve {
        always: Some(always), ..
    } = action
    else {
        return None;
    };
    let memory = run.memory.as_ref()?;
    let tool = tools.tool(&call.tool_name);
    let args = always
        .same_arguments
        .then(|| tool.map_or_else(|| call.args.as_ref().clone(), |t| t.acts_on(&call.args)));
    let granted_at = crate::clock::to_micros(now);
    let expires_at = always
        .lasts
        .and_then(|lasts| chrono::TimeDelta::from_std(lasts).ok())
        .and_then(|lasts| granted_at.checked_add_signed(lasts));
    Some(crate::Grant {
        id: crate::Grant::id_for(&run.run_id, &call.tool_call_id),
        agent_id: agent_id.to_owned(),
        tool: call.tool_name.clone(),
        mcp_server: tool.and_then(|t| t.mcp_server()).map(str::to_owned),
        scope: always.scope,
        resource_id: memory.key.resource_id.clone(),
        thread_id: memory.key.thread_id.clone(),
        args,
        granted_by: author.clone(),
        granted_at,
        expires_at,
        run_id: run.run_id.clone(),
        tool_call_id: call.tool_call_id.clone(),
        revoked_at: None,
        revoked_by: None,
    })
}

fn applies_without_effects(action: &FittedDecision, tool_name: &str, tools: &dyn ToolBook) -> bool {
    let tool = tools.tool(tool_name);
    match action {
        FittedDecision::DeclineQuestion { reason, .. } => {
            tool.is_none_or(|tool| tool.decline_as_answer(reason.as_deref()).is_none())
        }
        FittedDecision::DeclineApproval { .. } | FittedDecision::Expire { .. } => true,
        FittedDecision::Approve { .. } => false,
        FittedDecision::Answer { .. } => tool.is_some_and(|tool| tool.resume_is_pure()),
    }
}

#[cfg(test)]
mod tests;

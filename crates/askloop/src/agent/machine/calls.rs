//! Where a call of a run stands: the one place that says whether a call
//! still waits, on what, and how it closed if it does not.
//!
//! A run's status and its pending calls are private to the core: the
//! routes, the chat route, answer links, Slack, email, reminders, the CLI
//! and MCP ask [`RunRecord::call_state`] or [`RunRecord::waiting_calls`]
//! and turn the answer into their own words. The entry machine decides
//! from the same answer, so what a channel shows as open is what a
//! decision can still reach.

use chrono::{DateTime, Utc};

use crate::error::RunError;
use crate::store::{PendingKind, PendingToolCall, Resolution, ResolutionKind, RunRecord, RunStatus};

/// Where one call of a run stands at a moment ([`RunRecord::call_state`]).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum CallState<'a> {
    /// It waits: a decision for it is taken.
    Waiting(Waiting<'a>),
    /// It waits, but a driver holds the run for a moment: a decision for
    /// another call of the same step is being written. A decision for this
    /// one waits its turn; a channel that offers only open questions does
    /// not offer it now.
    Held(&'a PendingToolCall),
    /// It does not wait (any more): a decision for it is refused, and
    /// [`Closed`] says why.
    Closed(Closed<'a>),
}

/// A call that waits, and what it waits on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Waiting<'a> {
    /// The call as the run holds it: its question or arguments, its time
    /// limit.
    pub call: &'a PendingToolCall,
    /// What ends the wait.
    pub on: WaitsOn,
}

/// What a waiting call waits on. More ways of waiting come as variants
/// (a delegated run, a remote peer, several people's votes), so a
/// channel that cannot serve one says so instead of guessing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitsOn {
    /// A person: an answer to the tool's question (or suspension), or an
    /// approval, as [`PendingToolCall::kind`] says.
    Person(PendingKind),
}

/// How a call that does not wait closed.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Closed<'a> {
    /// It was resolved, as recorded: answered, approved, declined, expired,
    /// or ended with its run (cancelled, superseded by a new message).
    Resolved(&'a Resolution),
    /// Its time limit passed at `at` and no sweep has recorded it yet: no
    /// decision reaches it any more; the next sweep resolves it.
    TimedOut {
        /// The call.
        call: &'a PendingToolCall,
        /// Its limit.
        at: DateTime<Utc>,
    },
    /// The run ended (`status`) with no resolution of the call.
    RunEnded(RunStatus),
    /// The run does not wait on it: it is being applied, or the run never
    /// waited on a call of that id.
    NotWaiting,
}

/// The decision of a call made already, if there is one, at `now`: how it
/// was decided when `decision` is the same again (a repeat, which changes
/// nothing), else [`RunError::AlreadyDecided`] (a decision made cannot be
/// changed). `None` while the call is not decided. An expiry is the
/// sweep's, and told apart before this (an answer that came too late).
pub(crate) fn decided_already(
    run: &RunRecord,
    tool_call_id: &str,
    decision: &super::Decision,
    now: DateTime<Utc>,
) -> Result<Option<ResolutionKind>, RunError> {
    let CallState::Closed(Closed::Resolved(made)) = run.call_state(tool_call_id, now) else {
        return Ok(None);
    };
    let person_or_sweep = matches!(
        made.kind,
        ResolutionKind::Answered
            | ResolutionKind::Declined
            | ResolutionKind::Approved
            | ResolutionKind::Denied
            | ResolutionKind::Expired
    );
    if made.tool_call_id.as_deref() != Some(tool_call_id) || !person_or_sweep {
        // The run ended (cancelled, superseded by a new message): not a
        // decision about the call, and said as the run's state.
        return Ok(None);
    }
    if repeats(decision, made.kind) {
        return Ok(Some(made.kind));
    }
    Err(RunError::AlreadyDecided {
        run_id: run.run_id.clone(),
        tool_call_id: tool_call_id.to_owned(),
        decided: made.kind,
    })
}

/// Whether `decision` is the one recorded as `made`. An answer to a
/// question is never taken for a repeat: what it said is not compared, so
/// a second answer is refused rather than dropped unread.
fn repeats(decision: &super::Decision, made: ResolutionKind) -> bool {
    use crate::CallDecision;
    let decision = match decision {
        super::Decision::Expire => return made == ResolutionKind::Expired,
        super::Decision::Made { decision, .. } => decision,
    };
    match decision {
        CallDecision::Answer(data) => match made {
            // An approval's answer: `{"approved": true}` or `false`.
            ResolutionKind::Approved => data.get("approved") == Some(&serde_json::Value::Bool(true)),
            ResolutionKind::Denied => data.get("approved") == Some(&serde_json::Value::Bool(false)),
            _ => false,
        },
        CallDecision::Approve | CallDecision::ApproveWith(_) | CallDecision::ApproveAlways(_) => {
            made == ResolutionKind::Approved
        }
        CallDecision::Decline(_) => matches!(made, ResolutionKind::Declined | ResolutionKind::Denied),
    }
}

/// Which call an answer came too late for, and when it expired, if it
/// did: the named call is still pending but its limit has passed at `now`,
/// or it was resolved as expired (see [`resolved_as_expired`]). `None`
/// when the answer is not late (a pending call named by none is checked
/// once it is found).
pub(crate) fn expired_before_answer(
    run: &RunRecord,
    tool_call_id: Option<&str>,
    now: DateTime<Utc>,
) -> Option<(String, DateTime<Utc>)> {
    let past_limit = tool_call_id.and_then(|id| {
        let pending = run.pending.iter().find(|p| p.tool_call_id == id)?;
        pending.expires_at.filter(|at| *at <= now).map(|at| (id.to_owned(), at))
    });
    past_limit.or_else(|| resolved_as_expired(run, tool_call_id))
}

/// The call an answer is for, and when it expired, when a sweep resolved
/// it as expired: the named call, no longer pending; or, when no call is
/// named and the run waits on nothing now, the last call the run resolved
/// (the one such an answer was meant for).
pub(crate) fn resolved_as_expired(run: &RunRecord, tool_call_id: Option<&str>) -> Option<(String, DateTime<Utc>)> {
    let resolved = match tool_call_id {
        Some(id) if run.pending.iter().all(|p| p.tool_call_id != id) => run.resolution_of(id)?,
        None if run.pending.is_empty() => run.resolutions.iter().rev().find(|r| r.tool_call_id.is_some())?,
        _ => return None,
    };
    match (&resolved.tool_call_id, resolved.kind) {
        (Some(id), ResolutionKind::Expired) => Some((id.clone(), resolved.at)),
        _ => None,
    }
}

impl Closed<'_> {
    /// How a call that closed is described to a person: "answered by Bob
    /// (page) at …", "its time limit passed at …", "the run is completed",
    /// with `describe` turning a stored resolution into words.
    pub fn describe_with(&self, describe: impl FnOnce(&Resolution) -> String) -> String {
        match self {
            Closed::Resolved(resolution) => describe(resolution),
            Closed::TimedOut { at, .. } => format!("its time limit passed at {}", crate::rfc3339(*at)),
            Closed::RunEnded(status) => format!("the run is {status}"),
            Closed::NotWaiting => "it no longer waits for an answer".to_owned(),
        }
    }
}

impl RunRecord {
    /// The run's status.
    pub fn status(&self) -> RunStatus {
        self.status
    }

    /// Where the call `tool_call_id` stands at `now`: waiting (the run is
    /// suspended on it and its time limit, if any, is still ahead), or
    /// closed, and how. The one answer every channel and the entry machine
    /// use.
    pub fn call_state(&self, tool_call_id: &str, now: DateTime<Utc>) -> CallState<'_> {
        let held = self.pending.iter().find(|p| p.tool_call_id == tool_call_id);
        if self.status == RunStatus::Suspended
            && let Some(call) = held
        {
            return match call.expires_at.filter(|at| *at <= now) {
                Some(at) => CallState::Closed(Closed::TimedOut { call, at }),
                None => CallState::Waiting(Waiting {
                    call,
                    on: WaitsOn::Person(call.kind),
                }),
            };
        }
        // Decided already (a claim records its decision before the tool
        // runs, while the call is still held as pending).
        if let Some(resolution) = self.resolution_of(tool_call_id) {
            return CallState::Closed(Closed::Resolved(resolution));
        }
        if let Some(call) = held
            && self.status == RunStatus::Running
            && super::sibling_answer_in_flight(self, Some(tool_call_id))
        {
            return CallState::Held(call);
        }
        // Ended with its run: cancelled, or superseded by a new message.
        if held.is_none()
            && let Some(resolution) = self.call_resolution(tool_call_id)
        {
            return CallState::Closed(Closed::Resolved(resolution));
        }
        if self.status.is_finished() {
            return CallState::Closed(Closed::RunEnded(self.status));
        }
        CallState::Closed(Closed::NotWaiting)
    }

    /// The calls that wait at `now`, in the order the model made them
    /// (none unless the run is suspended; a call past its time limit does
    /// not wait).
    pub fn waiting_calls(&self, now: DateTime<Utc>) -> impl Iterator<Item = Waiting<'_>> {
        let suspended = self.status == RunStatus::Suspended;
        self.pending
            .iter()
            .filter(move |call| suspended && !call.is_expired(now))
            .map(|call| Waiting {
                call,
                on: WaitsOn::Person(call.kind),
            })
    }

    /// The earliest time limit of the pending calls, if any has one.
    pub fn earliest_limit(&self) -> Option<DateTime<Utc>> {
        self.pending.iter().filter_map(|p| p.expires_at).min()
    }

    /// The pending calls whose time limit has passed at `now`.
    pub fn expired_calls(&self, now: DateTime<Utc>) -> impl Iterator<Item = &PendingToolCall> {
        self.pending.iter().filter(move |p| p.is_expired(now))
    }

    /// The ids of the pending tool calls.
    pub(crate) fn pending_ids(&self) -> Vec<String> {
        self.pending.iter().map(|p| p.tool_call_id.clone()).collect()
    }

    /// Whether the run says `running` but nobody drives it any more: its
    /// lease ran out at `now` (its process died or stopped renewing), or it
    /// has none (a row written without one: nothing could renew it). Such a
    /// run is continued
    /// by recovery (`Agent::recover_runs`).
    pub fn is_stalled(&self, now: DateTime<Utc>) -> bool {
        self.status == RunStatus::Running && self.lease.as_ref().is_none_or(|lease| lease.is_expired(now))
    }

    /// The calls the run holds as pending, whether or not they still wait:
    /// what a store writes, and what a display of the stored run lists. A
    /// decision about whether a call waits is [`RunRecord::call_state`]'s
    /// (the server, CLI and MCP crates are kept from this method by their
    /// clippy configuration).
    pub fn stored_calls(&self) -> &[PendingToolCall] {
        &self.pending
    }

    /// The record with its status and pending calls set as a store read
    /// them back (or as a test builds a run). The machines are the only
    /// writers of a run that is driven.
    pub fn with_calls(mut self, status: RunStatus, pending: Vec<PendingToolCall>) -> RunRecord {
        self.status = status;
        self.pending = pending;
        self
    }

    /// The pending call a resume of this run targets: the one named, or the
    /// only one when none is named. Says why there is none (the call was
    /// resolved as expired, the run is not suspended, the call is not
    /// pending, several are pending), with the same errors
    /// [`Agent::resume_stream`](crate::Agent::resume_stream) returns, so a
    /// host can check before it asks a person anything. A call whose limit
    /// passed but that no sweep resolved yet is still its target: the
    /// decision then finds it late.
    pub fn resume_target(&self, tool_call_id: Option<&str>) -> Result<&PendingToolCall, RunError> {
        if let Some((tool_call_id, expired_at)) = resolved_as_expired(self, tool_call_id) {
            return Err(RunError::Expired {
                run_id: self.run_id.clone(),
                tool_call_id,
                expired_at,
            });
        }
        let superseded = self
            .resolutions
            .last()
            .is_some_and(|r| r.kind == ResolutionKind::Superseded);
        if self.status == RunStatus::Cancelled && superseded {
            return Err(RunError::Superseded {
                run_id: self.run_id.clone(),
            });
        }
        if self.status != RunStatus::Suspended {
            return Err(RunError::NotSuspended {
                run_id: self.run_id.clone(),
                status: self.status,
            });
        }
        match tool_call_id {
            Some(id) => {
                self.pending
                    .iter()
                    .find(|p| p.tool_call_id == id)
                    .ok_or_else(|| RunError::ToolCallNotPending {
                        run_id: self.run_id.clone(),
                        tool_call_id: id.to_owned(),
                        pending: self.pending_ids(),
                    })
            }
            None => match self.pending.as_slice() {
                [only] => Ok(only),
                _ => Err(RunError::AmbiguousResume {
                    run_id: self.run_id.clone(),
                    pending: self.pending_ids(),
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;
    use serde_json::json;

    use super::*;
    use crate::store::Author;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::<Utc>::UNIX_EPOCH + TimeDelta::seconds(seconds)
    }

    fn call(id: &str, kind: PendingKind, expires_at: Option<DateTime<Utc>>) -> PendingToolCall {
        PendingToolCall {
            tool_call_id: id.into(),
            tool_name: "ask_user".into(),
            args: json!({}).into(),
            kind,
            suspend_payload: None,
            resume_schema: None,
            expires_at,
            started_at: None,
        }
    }

    fn resolved(id: Option<&str>, kind: ResolutionKind) -> Resolution {
        Resolution {
            tool_call_id: id.map(str::to_owned),
            kind,
            at: at(5),
            author: Author::default(),
            edit: None,
            grant: None,
        }
    }

    fn run(status: RunStatus, pending: Vec<PendingToolCall>, resolutions: Vec<Resolution>) -> RunRecord {
        let mut run = RunRecord::default().with_calls(status, pending);
        run.run_id = "r".into();
        run.resolutions = resolutions;
        run
    }

    #[test]
    fn a_call_of_a_suspended_run_waits_on_a_person_until_its_limit() {
        let run = run(
            RunStatus::Suspended,
            vec![
                call("q", PendingKind::Suspended, Some(at(10))),
                call("a", PendingKind::Approval, None),
            ],
            vec![],
        );
        let CallState::Waiting(waiting) = run.call_state("q", at(9)) else {
            panic!("{:?}", run.call_state("q", at(9)));
        };
        assert_eq!(
            (waiting.call.tool_call_id.as_str(), waiting.on),
            ("q", WaitsOn::Person(PendingKind::Suspended))
        );
        assert_eq!(
            run.call_state("q", at(10)),
            CallState::Closed(Closed::TimedOut {
                call: &run.pending[0],
                at: at(10)
            }),
            "at its limit a call no longer waits"
        );
        let ids = |now| {
            run.waiting_calls(now)
                .map(|w| w.call.tool_call_id.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(at(9)), ["q", "a"]);
        assert_eq!(ids(at(10)), ["a"]);
        assert!(matches!(
            run.call_state("a", at(10)),
            CallState::Waiting(Waiting {
                on: WaitsOn::Person(PendingKind::Approval),
                ..
            })
        ));
    }

    #[test]
    fn a_resolved_call_is_closed_with_its_own_resolution_even_while_its_claim_holds_it() {
        let answered = resolved(Some("q"), ResolutionKind::Answered);
        // A claim records the decision and keeps the call until the tool's
        // result is stored.
        let claimed = run(
            RunStatus::Running,
            vec![call("q", PendingKind::Suspended, None)],
            vec![answered.clone()],
        );
        assert_eq!(
            claimed.call_state("q", at(1)),
            CallState::Closed(Closed::Resolved(&answered))
        );
        let done = run(RunStatus::Completed, vec![], vec![answered.clone()]);
        assert_eq!(
            done.call_state("q", at(1)),
            CallState::Closed(Closed::Resolved(&answered))
        );
        assert!(done.waiting_calls(at(1)).next().is_none());
    }

    #[test]
    fn a_sibling_of_a_call_being_written_is_held_not_closed() {
        let run = run(
            RunStatus::Running,
            vec![
                call("q1", PendingKind::Suspended, None),
                call("q2", PendingKind::Suspended, None),
            ],
            vec![resolved(Some("q1"), ResolutionKind::Answered)],
        );
        assert_eq!(run.call_state("q2", at(1)), CallState::Held(&run.pending[1]));
        assert!(run.waiting_calls(at(1)).next().is_none(), "a held run offers nothing");
    }

    #[test]
    fn a_call_of_a_cancelled_or_superseded_run_is_closed_by_the_runs_resolution() {
        for kind in [ResolutionKind::Cancelled, ResolutionKind::Superseded] {
            let ended = resolved(None, kind);
            let run = run(RunStatus::Cancelled, vec![], vec![ended.clone()]);
            assert_eq!(run.call_state("q", at(1)), CallState::Closed(Closed::Resolved(&ended)));
        }
    }

    #[test]
    fn a_call_no_resolution_names_is_closed_by_its_runs_end_or_does_not_wait() {
        let failed = run(RunStatus::Failed, vec![], vec![]);
        assert_eq!(
            failed.call_state("q", at(1)),
            CallState::Closed(Closed::RunEnded(RunStatus::Failed))
        );
        let running = run(RunStatus::Running, vec![], vec![]);
        assert_eq!(running.call_state("q", at(1)), CallState::Closed(Closed::NotWaiting));
        let suspended = run(
            RunStatus::Suspended,
            vec![call("q", PendingKind::Suspended, None)],
            vec![],
        );
        assert_eq!(
            suspended.call_state("zzz", at(1)),
            CallState::Closed(Closed::NotWaiting)
        );
    }

    #[test]
    fn how_a_call_closed_is_told_in_words() {
        let timed_out = call("q", PendingKind::Suspended, Some(at(0)));
        let told = Closed::TimedOut {
            call: &timed_out,
            at: at(0),
        }
        .describe_with(|_| unreachable!());
        assert_eq!(told, "its time limit passed at 1970-01-01T00:00:00.000Z");
        assert_eq!(
            Closed::RunEnded(RunStatus::Failed).describe_with(|_| unreachable!()),
            "the run is failed"
        );
        let answered = resolved(Some("q"), ResolutionKind::Answered);
        assert_eq!(
            Closed::Resolved(&answered).describe_with(|r| format!("{} at {}", r.kind, r.at.timestamp())),
            "answered at 5"
        );
    }

    #[test]
    fn an_answer_is_late_when_its_call_passed_its_limit_or_was_resolved_as_expired() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().to_utc();
        let limit = t("2026-01-01T00:01:30Z");
        let late = Some(("c1".to_owned(), limit));
        let question = || call("c1", PendingKind::Suspended, Some(limit));
        let run = run(RunStatus::Suspended, vec![question()], vec![]);
        assert_eq!(expired_before_answer(&run, Some("c1"), t("2026-01-01T00:01:00Z")), None);
        assert_eq!(expired_before_answer(&run, Some("c1"), limit), late);
        assert_eq!(expired_before_answer(&run, None, limit), None);

        let mut run = run.with_calls(RunStatus::Completed, Vec::new());
        assert_eq!(expired_before_answer(&run, Some("c1"), limit), None);
        assert_eq!(expired_before_answer(&run, None, limit), None);
        let expiry = crate::agent::machine::expiry::resolution(
            Some(&question()),
            &super::super::FittedDecision::Expire {
                tool_call_id: "c1".into(),
            },
            Author::via(crate::store::Interface::Server),
            limit + chrono::Duration::seconds(40),
        );
        assert_eq!(expiry.at, limit, "an expiry is recorded at the call's limit");
        run.resolutions.push(expiry);
        assert_eq!(expired_before_answer(&run, Some("c1"), limit), late);
        // Naming no call: the call the run last resolved is the one meant.
        assert_eq!(expired_before_answer(&run, None, limit), late);
        run.resolutions.push(Resolution::new(
            None,
            ResolutionKind::Cancelled,
            limit,
            Author::default(),
        ));
        assert_eq!(expired_before_answer(&run, None, limit), late);
        run.resolutions.push(Resolution::new(
            Some("c2"),
            ResolutionKind::Answered,
            limit,
            Author::default(),
        ));
        assert_eq!(expired_before_answer(&run, None, limit), None);
        assert_eq!(expired_before_answer(&run, Some("c1"), limit), late);
    }
}

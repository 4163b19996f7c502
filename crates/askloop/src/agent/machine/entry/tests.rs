//! The entry machine driven by events alone: each test reads a run at a
//! time it chooses and asserts what the machine asks for next.

use serde_json::json;

use super::*;
use crate::CallDecision;
use crate::ask_user::AskUser;
use crate::store::{Interface, PendingKind, PendingToolCall, RunFailure};

const LEASE: Duration = Duration::from_secs(30);

fn t(seconds: i64) -> DateTime<Utc> {
    DateTime::UNIX_EPOCH + TimeDelta::seconds(seconds)
}

/// `ask_user` (an answer applied in one write) and `deploy` (waits for
/// approval, must not run twice).
struct Tools(AskUser);

impl ToolBook for Tools {
    fn tool(&self, name: &str) -> Option<&dyn Tool> {
        matches!(name, "ask_user" | "deploy").then_some(&self.0 as &dyn Tool)
    }

    fn rules(&self, name: &str) -> Option<ToolRules> {
        let rules = ToolRules {
            needs_approval: false,
            own_approval: false,
            idempotent: true,
            max_per_step: None,
            time_limit: None,
        };
        match name {
            "ask_user" => Some(rules),
            "deploy" => Some(ToolRules {
                needs_approval: true,
                own_approval: true,
                idempotent: false,
                ..rules
            }),
            _ => None,
        }
    }

    /// One rule: `deploy` never runs with a question naming production.
    fn rule_verdict(&self, _run: &RunRecord, name: &str, args: &serde_json::Value) -> Option<(String, crate::Verdict)> {
        let production = args["question"].as_str().is_some_and(|q| q.contains("production"));
        (name == "deploy" && production).then(|| {
            (
                "no-production".to_owned(),
                crate::Verdict::Deny("production is off limits".into()),
            )
        })
    }
}

fn tools() -> Tools {
    Tools(AskUser::new())
}

fn question(id: &str, expires_at: Option<DateTime<Utc>>) -> PendingToolCall {
    PendingToolCall {
        tool_call_id: id.into(),
        tool_name: "ask_user".into(),
        args: json!({"question": "Which city?"}).into(),
        kind: PendingKind::Suspended,
        suspend_payload: Some(json!({"question": "Which city?"}).into()),
        resume_schema: None,
        expires_at,
        started_at: None,
    }
}

fn approval(id: &str) -> PendingToolCall {
    PendingToolCall {
        tool_name: "deploy".into(),
        kind: PendingKind::Approval,
        suspend_payload: None,
        ..question(id, None)
    }
}

fn run(status: RunStatus, pending: Vec<PendingToolCall>) -> RunRecord {
    RunRecord {
        run_id: "run".into(),
        agent_id: "agent".into(),
        status,
        version: 4,
        pending,
        ..Default::default()
    }
}

fn answer(id: Option<&str>, data: serde_json::Value) -> Request {
    Request::Decide {
        tool_call_id: id.map(str::to_owned),
        decision: Decision::from(CallDecision::Answer(data)),
        author: Author::named(Interface::Http, "alice"),
    }
}

fn entry(request: Request) -> Entry {
    let mut entry = Entry::new("run", "agent", request, LEASE);
    assert!(
        matches!(entry.poll_effect(), Some(EntryEffect::Read)),
        "a request reads the run first"
    );
    entry
}

/// Hands `entry` the run as read at `now` and returns what it asks next.
fn read(entry: &mut Entry, run: Option<RunRecord>, now: DateTime<Utc>) -> EntryEffect {
    entry.handle(EntryEvent::Read { run, now }, &tools());
    next(entry)
}

fn next(entry: &mut Entry) -> EntryEffect {
    let effect = entry.poll_effect().expect("an effect");
    assert!(entry.poll_effect().is_none(), "one effect at a time");
    effect
}

fn lost() -> EntryEvent {
    EntryEvent::WriteFailed(StoreError::Conflict {
        run_id: "run".into(),
        expected_version: 4,
    })
}

#[test]
fn an_answer_after_the_time_limit_is_refused_as_expired_by_the_time_the_read_came_with() {
    let waiting = run(RunStatus::Suspended, vec![question("c1", Some(t(60)))]);
    let mut late = entry(answer(Some("c1"), json!("Paris")));
    let refused = read(&mut late, Some(waiting.clone()), t(61));
    assert!(
        matches!(&refused, EntryEffect::Finish(Err(RunError::Expired { tool_call_id, expired_at, .. }))
            if tool_call_id == "c1" && *expired_at == t(60)),
        "{refused:?}"
    );
    // A second earlier, the same answer is applied in one write.
    let mut on_time = entry(answer(Some("c1"), json!("Paris")));
    let applied = read(&mut on_time, Some(waiting), t(59));
    assert!(
        matches!(&applied, EntryEffect::Apply { actions, .. }
            if matches!(actions.as_slice(), [FittedDecision::Answer { tool_call_id, .. }] if tool_call_id == "c1")),
        "{applied:?}"
    );
}

#[test]
fn an_answer_the_question_does_not_accept_is_refused_before_anything_is_written() {
    let waiting = run(RunStatus::Suspended, vec![question("c1", None)]);
    let mut empty = entry(answer(None, json!("   ")));
    let refused = read(&mut empty, Some(waiting), t(0));
    assert!(
        matches!(refused, EntryEffect::Finish(Err(RunError::InvalidAnswer { .. }))),
        "{refused:?}"
    );
}

#[test]
fn an_approval_claims_the_run_marking_its_call_started_and_recording_who_in_the_same_write() {
    let waiting = run(RunStatus::Suspended, vec![approval("c1"), question("c2", None)]);
    let mut approve = entry(Request::Decide {
        tool_call_id: Some("c1".into()),
        decision: Decision::from(CallDecision::Approve),
        author: Author::named(Interface::Page, "bob"),
    });
    let EntryEffect::Write { write, lease_until } = read(&mut approve, Some(waiting), t(100)) else {
        panic!("an approval is written as the claim")
    };
    assert_eq!(lease_until, Some(t(130)), "held for a lease from the read's time");
    assert_eq!(write.status, RunStatus::Running);
    assert_eq!(write.pending[0].started_at, Some(t(100)), "marked started");
    assert_eq!(write.pending[1].started_at, None);
    let [resolution] = write.resolutions.as_slice() else {
        panic!("one decision recorded: {:?}", write.resolutions)
    };
    assert_eq!(
        (resolution.kind, resolution.at, resolution.author.by.as_deref()),
        (ResolutionKind::Approved, t(100), Some("bob"))
    );

    approve.handle(
        EntryEvent::Written {
            version: 5,
            lease: Some(Lease::new("me", t(130))),
        },
        &tools(),
    );
    let finished = next(&mut approve);
    assert!(
        matches!(
            &finished,
            EntryEffect::Finish(Ok(Entered::Drive {
                start: DriveFrom::Resume(decisions),
                settle: true
            })) if matches!(decisions.as_slice(), [(FittedDecision::Approve { .. }, None)])
        ),
        "the claim recorded the decision; the question still waits, so the stream settles first: {finished:?}"
    );
    let held = approve.into_run().expect("the run");
    assert_eq!((held.version, held.status), (5, RunStatus::Running));
    assert_eq!(held.resolutions.len(), 1);
    assert!(held.pending[0].started_at.is_some());
}

#[test]
fn edited_arguments_a_rule_denies_are_refused_naming_the_rule_before_anything_is_written() {
    let waiting = run(RunStatus::Suspended, vec![approval("c1")]);
    let approve_with = |question: &str| Request::Decide {
        tool_call_id: Some("c1".into()),
        decision: Decision::from(CallDecision::ApproveWith(json!({"question": question}))),
        author: Author::named(Interface::Http, "bob"),
    };
    let mut denied = entry(approve_with("deploy to production"));
    let refused = read(&mut denied, Some(waiting.clone()), t(0));
    assert!(
        matches!(&refused, EntryEffect::Finish(Err(RunError::DeniedByRule { tool_call_id, rule, reason, .. }))
            if tool_call_id == "c1" && rule == "no-production" && reason == "production is off limits"),
        "{refused:?}"
    );
    let mut allowed = entry(approve_with("deploy to staging"));
    assert!(
        matches!(read(&mut allowed, Some(waiting), t(0)), EntryEffect::Write { .. }),
        "edited arguments the rules let through are written as the claim"
    );
}

#[test]
fn an_answer_while_a_sibling_answer_holds_the_run_waits_and_reads_it_again() {
    let held = run(RunStatus::Running, vec![question("c1", None), question("c2", None)]);
    let mut second = entry(answer(Some("c2"), json!("Rome")));
    let waited = read(&mut second, Some(held), t(0));
    assert!(
        matches!(waited, EntryEffect::Wait(wait) if wait == Duration::from_millis(4)),
        "{waited:?}"
    );
    second.handle(EntryEvent::Waited, &tools());
    assert!(matches!(next(&mut second), EntryEffect::Read));
    // The sibling's write landed: ours is applied.
    let suspended = run(RunStatus::Suspended, vec![question("c2", None)]);
    assert!(matches!(
        read(&mut second, Some(suspended), t(0)),
        EntryEffect::Apply { .. }
    ));
}

#[test]
fn a_lost_claim_is_tried_again_while_its_call_still_waits_and_is_a_conflict_once_someone_answered_it() {
    let waiting = run(RunStatus::Suspended, vec![approval("c1"), approval("c2")]);
    let approve = || Request::Decide {
        tool_call_id: Some("c1".into()),
        decision: Decision::from(CallDecision::Approve),
        author: Author::default(),
    };
    let mut still_wanted = entry(approve());
    read(&mut still_wanted, Some(waiting.clone()), t(0));
    still_wanted.handle(lost(), &tools());
    assert!(matches!(next(&mut still_wanted), EntryEffect::Read));
    // Someone approved c2 meanwhile; c1 still waits.
    let after = run(RunStatus::Suspended, vec![approval("c1")]);
    assert!(matches!(
        read(&mut still_wanted, Some(after), t(0)),
        EntryEffect::Wait(_)
    ));

    let mut beaten = entry(approve());
    read(&mut beaten, Some(waiting), t(0));
    beaten.handle(lost(), &tools());
    next(&mut beaten);
    let answered = run(RunStatus::Suspended, vec![approval("c2")]);
    let refused = read(&mut beaten, Some(answered), t(0));
    assert!(
        matches!(refused, EntryEffect::Finish(Err(RunError::Conflict { .. }))),
        "{refused:?}"
    );
}

#[test]
fn an_expiry_that_someone_beat_to_its_call_leaves_the_run_untouched() {
    let answered = run(RunStatus::Running, Vec::new());
    let mut expire = entry(Request::Decide {
        tool_call_id: Some("c1".into()),
        decision: Decision::Expire,
        author: Author::via(Interface::Server),
    });
    let done = read(&mut expire, Some(answered), t(0));
    assert!(
        matches!(done, EntryEffect::Finish(Ok(Entered::Untouched { .. }))),
        "{done:?}"
    );
}

#[test]
fn a_cancel_writes_the_run_cancelled_tries_again_when_it_loses_and_refuses_a_finished_run() {
    let waiting = run(RunStatus::Suspended, vec![question("c1", None)]);
    let mut cancel = entry(Request::Cancel {
        author: Author::named(Interface::Cli, "carol"),
    });
    let EntryEffect::Write { write, lease_until } = read(&mut cancel, Some(waiting.clone()), t(7)) else {
        panic!("a cancel is one write")
    };
    assert_eq!(
        (write.status, write.pending.len(), lease_until),
        (RunStatus::Cancelled, 0, None)
    );
    assert_eq!(
        write.resolutions.iter().map(|r| (r.kind, r.at)).collect::<Vec<_>>(),
        [(ResolutionKind::Cancelled, t(7))]
    );
    cancel.handle(lost(), &tools());
    assert!(matches!(next(&mut cancel), EntryEffect::Wait(_)));
    cancel.handle(EntryEvent::Waited, &tools());
    next(&mut cancel);
    read(&mut cancel, Some(waiting), t(8));
    cancel.handle(
        EntryEvent::Written {
            version: 6,
            lease: None,
        },
        &tools(),
    );
    assert!(matches!(next(&mut cancel), EntryEffect::Finish(Ok(Entered::Cancelled))));

    let mut too_late = entry(Request::Cancel {
        author: Author::default(),
    });
    let refused = read(&mut too_late, Some(run(RunStatus::Completed, Vec::new())), t(0));
    assert!(
        matches!(refused, EntryEffect::Finish(Err(RunError::Finished { .. }))),
        "{refused:?}"
    );
}

#[test]
fn a_supersession_pairs_every_call_of_the_step_with_a_result_and_leaves_a_run_not_waiting_alone() {
    let mut waiting = run(RunStatus::Suspended, vec![question("c1", None), question("c2", None)]);
    waiting.step_results = vec![crate::message::ToolResult {
        tool_call_id: "c0".into(),
        tool_name: "lookup".into(),
        content: "found".into(),
        is_error: false,
    }];
    let mut supersede = entry(Request::Supersede {
        author: Author::named(Interface::Http, "ana"),
    });
    let EntryEffect::Write { write, lease_until } = read(&mut supersede, Some(waiting.clone()), t(3)) else {
        panic!("a supersession is one write")
    };
    assert_eq!(
        (write.status, write.pending.len(), write.step_results.len(), lease_until),
        (RunStatus::Cancelled, 0, 0, None)
    );
    let paired: Vec<(&str, bool)> = write
        .append
        .iter()
        .map(|m| match m {
            crate::message::Message::Tool(r) => (r.tool_call_id.as_str(), r.is_error),
            other => panic!("only results are appended: {other:?}"),
        })
        .collect();
    assert_eq!(paired, vec![("c0", false), ("c1", true), ("c2", true)]);
    let [resolution] = write.resolutions.as_slice() else {
        panic!("one resolution: {:?}", write.resolutions)
    };
    assert_eq!(
        (resolution.kind, resolution.at, resolution.tool_call_id.as_deref()),
        (ResolutionKind::Superseded, t(3), None),
        "two calls: the resolution names the run, not one call"
    );
    supersede.handle(lost(), &tools());
    assert!(
        matches!(next(&mut supersede), EntryEffect::Wait(_)),
        "a lost write reads again"
    );

    for status in [RunStatus::Running, RunStatus::Completed, RunStatus::Cancelled] {
        let mut late = entry(Request::Supersede {
            author: Author::default(),
        });
        let untouched = read(&mut late, Some(run(status, Vec::new())), t(0));
        assert!(
            matches!(untouched, EntryEffect::Finish(Ok(Entered::Untouched { .. }))),
            "{status}: {untouched:?}"
        );
    }
}

#[test]
fn a_take_over_needs_a_lease_that_ran_out_by_the_read_time_and_leaves_a_run_someone_else_took() {
    let mut held = run(RunStatus::Running, Vec::new());
    held.lease = Some(Lease::new("other", t(30)));
    let recover = || Request::Recover {
        author: Author::via(Interface::Server),
    };
    let mut early = entry(recover());
    let left = read(&mut early, Some(held.clone()), t(29));
    assert!(
        matches!(left, EntryEffect::Finish(Ok(Entered::Untouched { .. }))),
        "{left:?}"
    );

    let mut late = entry(recover());
    let EntryEffect::Reclaim {
        lease_until,
        now,
        resolution,
    } = read(&mut late, Some(held.clone()), t(31))
    else {
        panic!("a stalled run is reclaimed")
    };
    assert_eq!(
        (lease_until, now, resolution.kind),
        (t(61), t(31), ResolutionKind::Recovered)
    );
    late.handle(lost(), &tools());
    assert!(matches!(
        next(&mut late),
        EntryEffect::Finish(Ok(Entered::Untouched { .. }))
    ));
}

#[test]
fn a_retry_takes_over_only_a_run_that_failed_for_a_reason_trying_again_may_fix() {
    let retry = || Request::Retry {
        author: Author::default(),
    };
    let mut not_failed = entry(retry());
    let refused = read(&mut not_failed, Some(run(RunStatus::Suspended, Vec::new())), t(0));
    assert!(
        matches!(&refused, EntryEffect::Finish(Err(RunError::NotRetryable { reason, .. })) if reason.contains("suspended")),
        "{refused:?}"
    );
    let mut failed = run(RunStatus::Failed, Vec::new());
    failed.failure = Some(RunFailure::StepLimit { limit: 5 });
    let mut for_good = entry(retry());
    let refused = read(&mut for_good, Some(failed.clone()), t(0));
    assert!(
        matches!(refused, EntryEffect::Finish(Err(RunError::NotRetryable { .. }))),
        "{refused:?}"
    );
    failed.failure = Some(RunFailure::Model {
        transient: true,
        message: "503".into(),
    });
    let mut worth_it = entry(retry());
    assert!(matches!(
        read(&mut worth_it, Some(failed), t(0)),
        EntryEffect::Reclaim { .. }
    ));
}

#[test]
fn another_agents_run_or_none_is_refused_by_name() {
    let mut other = run(RunStatus::Suspended, vec![question("c1", None)]);
    other.agent_id = "ops".into();
    let mut asked = entry(answer(None, json!("Paris")));
    let refused = read(&mut asked, Some(other), t(0));
    assert!(matches!(refused, EntryEffect::Finish(Err(RunError::OtherAgent { ref owner, .. })) if owner == "ops"));
    let mut missing = entry(answer(None, json!("Paris")));
    let refused = read(&mut missing, None, t(0));
    assert!(matches!(refused, EntryEffect::Finish(Err(RunError::UnknownRun { .. }))));
}

#[test]
fn an_event_that_does_not_fit_where_the_request_is_is_an_internal_error_not_guessed() {
    let mut cancel = entry(Request::Cancel {
        author: Author::default(),
    });
    cancel.handle(
        EntryEvent::Written {
            version: 9,
            lease: None,
        },
        &tools(),
    );
    let refused = next(&mut cancel);
    assert!(
        matches!(&refused, EntryEffect::Finish(Err(RunError::Internal { run_id: Some(run), .. })) if run == "run"),
        "a bug of the machine, never the caller's: {refused:?}"
    );
}

fn decide_all(decisions: &[(&str, Decision)]) -> Request {
    Request::DecideAll {
        decisions: decisions.iter().map(|(id, d)| ((*id).to_owned(), d.clone())).collect(),
        author: Author::named(Interface::Page, "carol"),
    }
}

#[test]
fn decisions_for_several_calls_claim_the_run_once_marking_the_approved_call_started() {
    let waiting = run(
        RunStatus::Suspended,
        vec![approval("c1"), question("c2", None), question("c3", None)],
    );
    let answer = Decision::from(CallDecision::Answer(json!("Paris")));
    let mut both = entry(decide_all(&[
        ("c2", answer),
        ("c1", Decision::from(CallDecision::Approve)),
    ]));
    let EntryEffect::Write { write, lease_until } = read(&mut both, Some(waiting), t(100)) else {
        panic!("the approval's mark is the one claim")
    };
    assert_eq!(lease_until, Some(t(130)));
    assert_eq!(write.status, RunStatus::Running);
    let started: Vec<_> = write.pending.iter().map(|p| p.started_at).collect();
    assert_eq!(
        started,
        [Some(t(100)), None, None],
        "only the approved call is marked started"
    );
    let recorded: Vec<_> = write
        .resolutions
        .iter()
        .map(|r| (r.tool_call_id.as_deref(), r.kind, r.author.by.as_deref()))
        .collect();
    assert_eq!(
        recorded,
        [(Some("c1"), ResolutionKind::Approved, Some("carol"))],
        "the claim records the approval; the answer is recorded by the step's write"
    );

    both.handle(
        EntryEvent::Written {
            version: 5,
            lease: Some(Lease::new("me", t(130))),
        },
        &tools(),
    );
    let finished = next(&mut both);
    let EntryEffect::Finish(Ok(Entered::Drive {
        start: DriveFrom::Resume(decisions),
        settle,
    })) = finished
    else {
        panic!("a driver applies both: {finished:?}")
    };
    let applied: Vec<_> = decisions
        .iter()
        .map(|(action, author)| (action.tool_call_id(), author.is_some()))
        .collect();
    assert_eq!(applied, [("c2", true), ("c1", false)], "in the order given");
    assert!(settle, "c3 still waits: the stream settles before it is handed out");
}

#[test]
fn decisions_without_effects_outside_the_run_are_applied_in_one_write() {
    let waiting = run(RunStatus::Suspended, vec![approval("c1"), question("c2", None)]);
    let mut both = entry(decide_all(&[
        ("c1", Decision::from(CallDecision::Decline(Some("not today".into())))),
        ("c2", Decision::from(CallDecision::Answer(json!("Oslo")))),
    ]));
    let applied = read(&mut both, Some(waiting), t(5));
    let EntryEffect::Apply { actions, author, .. } = applied else {
        panic!("a decline and a pure answer are one write: {applied:?}")
    };
    assert_eq!(author.by.as_deref(), Some("carol"));
    assert!(
        matches!(actions.as_slice(), [
            FittedDecision::DeclineApproval { tool_call_id: a, reason: Some(r) },
            FittedDecision::Answer { tool_call_id: b, .. },
        ] if a == "c1" && r == "not today" && b == "c2"),
        "{actions:?}"
    );
}

#[test]
fn one_refused_decision_refuses_them_all_before_anything_is_written() {
    let waiting = run(RunStatus::Suspended, vec![approval("c1"), question("c2", None)]);
    let blank = Decision::from(CallDecision::Answer(json!("   ")));
    let mut refused = entry(decide_all(&[
        ("c1", Decision::from(CallDecision::Approve)),
        ("c2", blank),
    ]));
    let effect = read(&mut refused, Some(waiting.clone()), t(5));
    assert!(
        matches!(&effect, EntryEffect::Finish(Err(RunError::InvalidAnswer { tool_call_id, .. })) if tool_call_id == "c2"),
        "{effect:?}"
    );
    assert!(refused.poll_effect().is_none(), "nothing written");

    let mut unknown = entry(decide_all(&[
        ("c1", Decision::from(CallDecision::Approve)),
        ("c9", Decision::from(CallDecision::Approve)),
    ]));
    let effect = read(&mut unknown, Some(waiting.clone()), t(5));
    assert!(
        matches!(&effect, EntryEffect::Finish(Err(RunError::ToolCallNotPending { tool_call_id, .. })) if tool_call_id == "c9"),
        "{effect:?}"
    );

    let mut twice = entry(decide_all(&[
        ("c1", Decision::from(CallDecision::Approve)),
        ("c1", Decision::from(CallDecision::Decline(None))),
    ]));
    let effect = read(&mut twice, Some(waiting), t(5));
    assert!(
        matches!(&effect, EntryEffect::Finish(Err(RunError::InvalidInput(message))) if message.contains("two decisions")),
        "{effect:?}"
    );
}

#[test]
fn decisions_that_lost_their_claim_try_again_only_while_every_call_still_waits() {
    let waiting = run(RunStatus::Suspended, vec![approval("c1"), approval("c2")]);
    let request = decide_all(&[
        ("c1", Decision::from(CallDecision::Approve)),
        ("c2", Decision::from(CallDecision::Approve)),
    ]);
    let mut lost_one = entry(request.clone());
    assert!(matches!(
        read(&mut lost_one, Some(waiting.clone()), t(1)),
        EntryEffect::Write { .. }
    ));
    lost_one.handle(lost(), &tools());
    assert!(matches!(next(&mut lost_one), EntryEffect::Read));
    // Someone decided c2 meanwhile: the pair is no longer what was asked.
    let moved_on = run(RunStatus::Suspended, vec![approval("c1")]);
    lost_one.handle(
        EntryEvent::Read {
            run: Some(moved_on),
            now: t(2),
        },
        &tools(),
    );
    assert!(
        matches!(next(&mut lost_one), EntryEffect::Finish(Err(RunError::Conflict { .. }))),
        "a conflict, with nothing applied"
    );

    let mut again = entry(request);
    assert!(matches!(
        read(&mut again, Some(waiting.clone()), t(1)),
        EntryEffect::Write { .. }
    ));
    again.handle(lost(), &tools());
    assert!(matches!(next(&mut again), EntryEffect::Read));
    again.handle(
        EntryEvent::Read {
            run: Some(waiting),
            now: t(2),
        },
        &tools(),
    );
    assert!(
        matches!(next(&mut again), EntryEffect::Wait(_)),
        "both still wait: tried again"
    );
}

/// The calls an `Apply` effect carries, by id.
fn applied_ids(effect: &EntryEffect) -> Vec<String> {
    match effect {
        EntryEffect::Apply { actions, .. } => actions.iter().map(|a| a.tool_call_id().to_owned()).collect(),
        other => panic!("not an apply: {other:?}"),
    }
}

#[test]
fn a_decision_of_every_approval_reads_which_calls_wait_again_after_a_lost_write() {
    let decline = || Request::DecideEveryApproval {
        decision: Decision::from(CallDecision::Decline(Some("not today".into()))),
        author: Author::named(Interface::Http, "alice"),
    };
    let both = run(
        RunStatus::Suspended,
        vec![approval("a1"), question("q1", None), approval("a2")],
    );
    let mut every = entry(decline());
    let first = read(&mut every, Some(both.clone()), t(0));
    assert_eq!(applied_ids(&first), ["a1", "a2"], "the question stays open");
    // Someone else declined a1 first: the write is lost, and the next read
    // decides only what still waits for approval.
    let conflict = StoreError::Conflict {
        run_id: "run".into(),
        expected_version: 4,
    };
    every.handle(EntryEvent::ApplyFailed(ApplyFailure::Store(conflict)), &tools());
    assert!(matches!(next(&mut every), EntryEffect::Wait(_)));
    every.handle(EntryEvent::Waited, &tools());
    assert!(matches!(next(&mut every), EntryEffect::Read));
    let mut after = run(RunStatus::Suspended, vec![question("q1", None), approval("a2")]);
    after.version = 5;
    assert_eq!(applied_ids(&read(&mut every, Some(after), t(1))), ["a2"]);

    // Only questions left: nothing to approve, and it says which questions wait.
    let questions = run(RunStatus::Suspended, vec![question("q1", None)]);
    let refused = read(&mut entry(decline()), Some(questions), t(2));
    assert!(
        matches!(&refused, EntryEffect::Finish(Err(RunError::NothingToApprove { questions, .. })) if questions == &["q1"]),
        "{refused:?}"
    );
    // A run that does not wait says so, as a single decision would.
    let done = run(RunStatus::Completed, vec![]);
    let refused = read(&mut entry(decline()), Some(done), t(2));
    assert!(
        matches!(refused, EntryEffect::Finish(Err(RunError::NotSuspended { .. }))),
        "{refused:?}"
    );
}

#[test]
fn an_expiry_sweep_resolves_what_is_due_at_the_read_in_one_decision_and_leaves_the_rest() {
    let sweep = || Request::ExpireDue {
        author: Author::via(Interface::Server),
    };
    let waiting = run(
        RunStatus::Suspended,
        vec![
            question("due1", Some(t(10))),
            question("later", Some(t(100))),
            question("due2", Some(t(20))),
        ],
    );
    let applied = read(&mut entry(sweep()), Some(waiting.clone()), t(30));
    assert_eq!(applied_ids(&applied), ["due1", "due2"]);
    // Nothing due yet: left alone, not refused.
    let early = read(&mut entry(sweep()), Some(waiting), t(5));
    assert!(
        matches!(early, EntryEffect::Finish(Ok(Entered::Untouched { .. }))),
        "{early:?}"
    );
    // Answered meanwhile: the run no longer waits, and the sweep is left with nothing.
    let answered = run(RunStatus::Completed, vec![]);
    let gone = read(&mut entry(sweep()), Some(answered), t(30));
    assert!(
        matches!(gone, EntryEffect::Finish(Ok(Entered::Untouched { .. }))),
        "{gone:?}"
    );
}

fn answered(id: &str, kind: ResolutionKind) -> Resolution {
    Resolution {
        tool_call_id: Some(id.into()),
        kind,
        at: t(1),
        author: Author::named(Interface::Http, "bob"),
        edit: None,
        grant: None,
    }
}

#[test]
fn an_approval_or_decline_made_already_changes_nothing_and_anything_else_is_refused_by_how() {
    // q1 was answered and a1 approved; a2 still waits for approval.
    let mut stored = run(RunStatus::Suspended, vec![approval("a2")]);
    stored.resolutions = vec![
        answered("q1", ResolutionKind::Answered),
        answered("a1", ResolutionKind::Approved),
    ];
    let approve = |id: &str| Request::Decide {
        tool_call_id: Some(id.into()),
        decision: Decision::from(CallDecision::Approve),
        author: Author::default(),
    };
    let again = read(&mut entry(approve("a1")), Some(stored.clone()), t(2));
    assert!(
        matches!(&again, EntryEffect::Finish(Ok(Entered::Untouched { already })) if already == &[("a1".to_owned(), ResolutionKind::Approved)]),
        "{again:?}"
    );
    // A second answer is not compared with the first: it is refused, not dropped.
    let second = read(
        &mut entry(answer(Some("q1"), json!("Lyon"))),
        Some(stored.clone()),
        t(2),
    );
    assert!(
        matches!(
            &second,
            EntryEffect::Finish(Err(RunError::AlreadyDecided {
                decided: ResolutionKind::Answered,
                ..
            }))
        ),
        "{second:?}"
    );
    let decline = Request::Decide {
        tool_call_id: Some("a1".into()),
        decision: Decision::from(CallDecision::Decline(None)),
        author: Author::default(),
    };
    let refused = read(&mut entry(decline), Some(stored.clone()), t(2));
    assert!(
        matches!(&refused, EntryEffect::Finish(Err(RunError::AlreadyDecided { tool_call_id, decided: ResolutionKind::Approved, .. })) if tool_call_id == "a1"),
        "{refused:?}"
    );
    // Several at once: the repeat is left out, the rest is applied.
    let both = Request::DecideAll {
        decisions: vec![
            ("a1".into(), Decision::from(CallDecision::Approve)),
            ("a2".into(), Decision::from(CallDecision::Decline(Some("no".into())))),
        ],
        author: Author::default(),
    };
    let mut both = entry(both);
    let applied = read(&mut both, Some(stored), t(2));
    assert_eq!(applied_ids(&applied), ["a2"]);
    assert_eq!(both.already(), [("a1".to_owned(), ResolutionKind::Approved)]);
}

//! The run machine driven by events alone: no store, no model, no tools.
//! Each test feeds what a driver would see and asserts the exact effects.

use serde_json::json;

use super::*;
use crate::chunk::{ToolCallSuspended, ToolResultPayload};
use crate::message::ToolContent;
use crate::store::ResolutionKind;

const RULES: ToolRules = ToolRules {
    needs_approval: false,
    own_approval: false,
    idempotent: true,
    max_per_step: None,
    time_limit: None,
};

/// The tools returned these, at a time these tests do not look at.
fn returned(outcomes: Vec<CallOutcome>) -> Event {
    Event::ToolsReturned {
        outcomes,
        now: DateTime::UNIX_EPOCH,
    }
}

/// The write lost its compare-and-set.
fn lost() -> Event {
    Event::SaveFailed(StoreError::Conflict {
        run_id: "run".into(),
        expected_version: 0,
    })
}

/// A machine for a new run of an agent with `lookup` (idempotent),
/// `ask_user` and `charge` (must not run twice).
fn machine(record: &RunRecord, max_steps: u32) -> RunMachine {
    let tools = vec![
        ("lookup".to_owned(), RULES),
        ("ask_user".to_owned(), RULES),
        (
            "charge".to_owned(),
            ToolRules {
                idempotent: false,
                ..RULES
            },
        ),
    ];
    RunMachine::new(&mut record.clone(), "agent".into(), "msg".into(), tools, max_steps)
}

fn new_run() -> RunRecord {
    RunRecord {
        run_id: "run".into(),
        agent_id: "agent".into(),
        status: RunStatus::Running,
        ..Default::default()
    }
}

fn drain(machine: &mut RunMachine) -> Vec<Effect> {
    std::iter::from_fn(|| machine.poll_effect()).collect()
}

fn call(id: &str, tool: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: tool.into(),
        args: json!({"q": id}).into(),
    }
}

fn at() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap()
}

fn turn(text: &str, calls: &[ToolCall]) -> ModelTurn {
    ModelTurn {
        started_at: at(),
        text: text.into(),
        calls: calls.iter().cloned().map(CheckedCall::sound).collect(),
        reason: if calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        },
        usage: Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Usage::default()
        },
    }
}

fn ran(call: &ToolCall, value: &str) -> (ToolResult, ChunkKind) {
    let result = ToolResult {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: ToolContent::Text(value.into()),
        is_error: false,
    };
    let chunk = ChunkKind::ToolResult(ToolResultPayload {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        args: call.args.clone(),
        result: json!(value),
    });
    (result, chunk)
}

fn question(call: &ToolCall) -> PendingToolCall {
    PendingToolCall {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        args: call.args.clone(),
        kind: PendingKind::Suspended,
        suspend_payload: Some(json!({"question": "Which region?"}).into()),
        resume_schema: None,
        expires_at: None,
        started_at: None,
    }
}

fn execute(call: &ToolCall) -> ToolRun {
    ToolRun::Execute {
        call: call.clone(),
        resumed: None,
    }
}

fn the_save(effects: Vec<Effect>) -> RunWrite {
    match effects.as_slice() {
        [Effect::Save(write)] => write.clone(),
        other => panic!("expected one write, got {other:?}"),
    }
}

/// A new run's machine whose first model turn called `lookup`, which
/// returned: the step's write is what it asked for last, returned with it.
fn one_lookup_step_to_save(max_steps: u32) -> (RunMachine, RunWrite) {
    let lookup = call("c1", "lookup");
    let mut m = machine(&new_run(), max_steps);
    m.handle(Event::Started);
    drain(&mut m);
    m.handle(Event::ModelFinished(turn("", std::slice::from_ref(&lookup))));
    drain(&mut m);
    let (result, chunk) = ran(&lookup, "found");
    m.handle(returned(vec![CallOutcome::Done(result, chunk)]));
    let write = the_save(drain(&mut m));
    (m, write)
}

#[test]
fn a_turn_with_two_calls_where_one_suspends_stores_then_shows_the_result_and_the_question() {
    let (lookup, ask) = (call("c1", "lookup"), call("c2", "ask_user"));
    let mut m = machine(&new_run(), 5);

    m.handle(Event::Started);
    assert_eq!(
        drain(&mut m),
        [
            Effect::Emit(ChunkKind::Start(Start {
                id: "agent".into(),
                message_id: "msg".into(),
            })),
            Effect::CallModel { step: 1 },
        ]
    );

    m.handle(Event::ModelFinished(turn("", &[lookup.clone(), ask.clone()])));
    // Both tools may run again after a crash: the turn is stored with
    // their results, in one write, not before them.
    assert_eq!(drain(&mut m), [Effect::RunTools(vec![execute(&lookup), execute(&ask)])]);

    let (result, chunk) = ran(&lookup, "eu-west");
    m.handle(returned(vec![
        CallOutcome::Done(result.clone(), chunk.clone()),
        CallOutcome::Pending(question(&ask)),
    ]));
    let write = the_save(drain(&mut m));
    assert_eq!(
        write,
        RunWrite {
            status: RunStatus::Suspended,
            append: vec![Message::assistant("", vec![lookup.clone(), ask.clone()])],
            pending: vec![question(&ask)],
            step_results: vec![result.clone()],
            steps: 1,
            usage: turn("", &[]).usage,
            failure: None,
            resolutions: Vec::new(),
            hold: false,
            grants: Vec::new(),
        }
    );

    // Persist before you emit: nothing of the step is shown before this.
    m.handle(Event::Saved(write));
    assert_eq!(
        drain(&mut m),
        [
            Effect::Emit(chunk),
            Effect::Emit(ChunkKind::ToolCallSuspended(ToolCallSuspended {
                tool_call_id: "c2".into(),
                tool_name: "ask_user".into(),
                args: ask.args.clone(),
                suspend_payload: json!({"question": "Which region?"}).into(),
                resume_schema: None,
            })),
            Effect::Finish(End::Suspended),
        ]
    );

    // The answer arrives in another stream: the run as stored, claimed.
    let stored = RunRecord {
        status: RunStatus::Running,
        pending: vec![question(&ask)],
        step_results: vec![result.clone()],
        steps: 1,
        ..new_run()
    };
    let mut m = machine(&stored, 5);
    m.handle(Event::Decided(Decisions {
        decisions: vec![Decided {
            action: FittedDecision::Answer {
                tool_call_id: "c2".into(),
                data: json!("eu-west"),
            },
            resolution: None,
            decline_answer: None,
        }],
        turn_calls: Some(vec![lookup.clone(), ask.clone()]),
        claimed: true,
    }));
    assert_eq!(
        drain(&mut m),
        [Effect::RunTools(vec![ToolRun::Execute {
            call: ask.clone(),
            resumed: Some(ToolAnswer {
                payload: Some(json!({"question": "Which region?"}).into()),
                data: json!("eu-west"),
            }),
        }])]
    );

    let (answered, answered_chunk) = ran(&ask, "eu-west");
    m.handle(returned(vec![CallOutcome::Done(
        answered.clone(),
        answered_chunk.clone(),
    )]));
    let write = the_save(drain(&mut m));
    assert_eq!(write.status, RunStatus::Running);
    assert_eq!(
        write.append,
        [Message::Tool(result), Message::Tool(answered)],
        "every call has a result: appended in call order"
    );
    assert!(write.pending.is_empty() && write.step_results.is_empty());

    m.handle(Event::Saved(write));
    assert_eq!(
        drain(&mut m),
        [
            Effect::Emit(answered_chunk),
            Effect::ReportStep {
                summary: StepSummary {
                    started_at: None,
                    reason: FinishReason::ToolCalls,
                    is_continued: true,
                    usage: Usage::default(),
                },
                finish: None,
            },
            Effect::CallModel { step: 2 },
        ]
    );

    m.handle(Event::ModelFinished(turn("Deployed to eu-west.", &[])));
    let write = the_save(drain(&mut m));
    assert_eq!(write.status, RunStatus::Completed);
    assert_eq!(write.append, [Message::assistant("Deployed to eu-west.", Vec::new())]);
    m.handle(Event::Saved(write));
    let effects = drain(&mut m);
    assert!(
        matches!(
            effects.as_slice(),
            [
                Effect::ReportStep { finish: Some(_), .. },
                Effect::Finish(End::Completed)
            ]
        ),
        "{effects:?}"
    );
}

#[test]
fn a_lease_lost_mid_step_shows_nothing_of_the_step_and_ends_interrupted() {
    let (mut m, _) = one_lookup_step_to_save(5);

    m.handle(lost());
    assert_eq!(
        drain(&mut m),
        [Effect::ReadRun],
        "what a lost write means depends on who won"
    );

    let taken_over = RunRecord {
        version: 7,
        ..new_run()
    };
    m.handle(Event::RunRead(Ok(Some(Box::new(taken_over)))));
    let effects = drain(&mut m);
    let [
        Effect::Emit(ChunkKind::Error(shown)),
        Effect::Finish(End::Failed(RunFailure::Interrupted { message })),
    ] = effects.as_slice()
    else {
        panic!("expected an error and an interrupted end, got {effects:?}")
    };
    assert_eq!(&shown.error.message, message);
    assert!(message.contains("its step was not written"), "{message}");
}

#[test]
fn a_cancel_while_a_tool_that_must_not_run_twice_runs_ends_with_abort() {
    let charge = call("c1", "charge");
    let mut m = machine(&new_run(), 5);
    m.handle(Event::Started);
    drain(&mut m);

    m.handle(Event::ModelFinished(turn("", std::slice::from_ref(&charge))));
    // A tool that must not run twice: its turn is stored before it runs.
    let write = the_save(drain(&mut m));
    assert_eq!(write.status, RunStatus::Running);
    assert_eq!(write.append, [Message::assistant("", vec![charge.clone()])]);
    m.handle(Event::Saved(write));
    assert_eq!(drain(&mut m), [Effect::RunTools(vec![execute(&charge)])]);

    // The run is cancelled while the tool runs; the step's write loses.
    let (result, chunk) = ran(&charge, "charged");
    m.handle(returned(vec![CallOutcome::Done(result, chunk)]));
    let write = the_save(drain(&mut m));
    assert!(
        write.append.iter().all(|m| matches!(m, Message::Tool(_))),
        "the turn is not written twice"
    );
    m.handle(lost());
    assert_eq!(drain(&mut m), [Effect::ReadRun]);
    let cancelled = RunRecord {
        status: RunStatus::Cancelled,
        ..new_run()
    };
    m.handle(Event::RunRead(Ok(Some(Box::new(cancelled.clone())))));
    assert_eq!(
        drain(&mut m),
        [
            Effect::Emit(ChunkKind::Abort(AbortPayload {
                reason: Some("the run was cancelled".into()),
            })),
            Effect::Finish(End::Cancelled(Box::new(cancelled))),
        ]
    );
}

#[test]
fn a_failed_model_call_is_stored_with_the_step_kept_then_shown() {
    let ask = call("c2", "ask_user");
    let (result, _) = ran(&call("c1", "lookup"), "eu-west");
    let stored = RunRecord {
        pending: vec![question(&ask)],
        step_results: vec![result.clone()],
        ..new_run()
    };
    let mut m = machine(&stored, 5);
    m.handle(Event::Started);
    drain(&mut m);
    let down = ModelError::Api {
        provider: "openai".into(),
        status: 503,
        message: "overloaded".into(),
    };
    let failure = RunFailure::Model {
        transient: true,
        message: down.to_string(),
    };
    m.handle(Event::ModelFailed(down));
    let write = the_save(drain(&mut m));
    assert_eq!(write.status, RunStatus::Failed);
    assert_eq!(write.failure.as_ref(), Some(&failure));
    assert_eq!(write.pending, [question(&ask)], "a retry goes on from what was stored");
    assert_eq!(write.step_results, [result]);
    // Shown even when the failure itself could not be written.
    m.handle(Event::SaveFailed(StoreError::Busy {
        location: "runs.db".into(),
        detail: "disk full".into(),
    }));
    let effects = drain(&mut m);
    assert!(
        matches!(effects.as_slice(), [Effect::Emit(ChunkKind::Error(_)), Effect::Finish(End::Failed(f))] if *f == failure),
        "{effects:?}"
    );
}

#[test]
fn a_stream_past_its_step_limit_fails_instead_of_calling_the_model() {
    let (mut m, write) = one_lookup_step_to_save(1);
    m.handle(Event::Saved(write));
    let effects = drain(&mut m);
    let Some(Effect::Save(write)) = effects.last() else {
        panic!("expected the failure's write, got {effects:?}")
    };
    assert_eq!(write.failure, Some(RunFailure::StepLimit { limit: 1 }));
    assert!(!effects.iter().any(|e| matches!(e, Effect::CallModel { .. })));
}

#[test]
fn a_decision_for_a_call_no_longer_pending_is_refused_unwritten_when_nothing_was_claimed() {
    let mut m = machine(&new_run(), 5);
    m.handle(Event::Decided(Decisions {
        decisions: vec![Decided {
            action: FittedDecision::Approve {
                tool_call_id: "gone".into(),
                args: None,
                always: None,
            },
            resolution: None,
            decline_answer: None,
        }],
        turn_calls: None,
        claimed: false,
    }));
    assert_eq!(
        drain(&mut m),
        [Effect::Refused("tool call gone is no longer pending".into())]
    );
}

#[test]
fn a_recovered_run_with_a_question_still_open_is_suspended_again_without_running_anything() {
    let (lookup, ask) = (call("c1", "lookup"), call("c2", "ask_user"));
    let (result, _) = ran(&lookup, "eu-west");
    let stored = RunRecord {
        pending: vec![question(&ask)],
        step_results: vec![result],
        ..new_run()
    };
    let mut m = machine(&stored, 5);
    m.handle(Event::Recovered {
        last_calls: Some(vec![CheckedCall::sound(lookup), CheckedCall::sound(ask)]),
        ends_on_calls: true,
        edited: Vec::new(),
    });
    let effects = drain(&mut m);
    assert!(
        matches!(effects.as_slice(), [Effect::Emit(ChunkKind::Start(_)), Effect::Save(w)] if w.status == RunStatus::Suspended),
        "{effects:?}"
    );
    let Some(Effect::Save(write)) = effects.last().cloned() else {
        panic!("expected a write, got {effects:?}")
    };
    m.handle(Event::Saved(write));
    let effects = drain(&mut m);
    assert!(
        matches!(
            effects.as_slice(),
            [
                Effect::Emit(ChunkKind::ToolCallSuspended(_)),
                Effect::Finish(End::Suspended)
            ]
        ),
        "{effects:?}"
    );
}

#[test]
fn a_second_start_of_the_same_stream_fails_the_run_instead_of_starting_again() {
    let mut m = machine(&new_run(), 5);
    m.handle(Event::Started);
    drain(&mut m);
    m.handle(Event::Started);
    let write = the_save(drain(&mut m));
    assert_eq!(write.status, RunStatus::Failed);
    assert!(
        matches!(&write.failure, Some(RunFailure::Broken { message }) if message.contains("the start of a stream")),
        "{:?}",
        write.failure
    );
}

#[test]
fn a_call_that_waits_gets_its_tools_time_limit_from_when_the_tools_returned() {
    let ask = call("c1", "ask_user");
    let limited = ToolRules {
        time_limit: Some(std::time::Duration::from_secs(600)),
        ..RULES
    };
    let mut m = RunMachine::new(
        &mut new_run(),
        "agent".into(),
        "msg".into(),
        vec![("ask_user".to_owned(), limited)],
        5,
    );
    m.handle(Event::Started);
    drain(&mut m);
    m.handle(Event::ModelFinished(turn("", std::slice::from_ref(&ask))));
    drain(&mut m);
    let returned_at: DateTime<Utc> = "2026-12-04T10:00:00Z".parse().unwrap();
    m.handle(Event::ToolsReturned {
        outcomes: vec![CallOutcome::Pending(question(&ask))],
        now: returned_at,
    });
    let write = the_save(drain(&mut m));
    let deadline: DateTime<Utc> = "2026-12-04T10:10:00Z".parse().unwrap();
    assert_eq!(write.pending[0].expires_at, Some(deadline));
    assert_eq!(
        write.pending[0].suspend_payload.as_ref().unwrap()["metadata"]["expiresAt"],
        "2026-12-04T10:10:00.000Z",
        "the question shows the same instant"
    );
}

#[test]
fn decisions_for_every_call_of_a_step_run_together_and_are_written_once_before_one_model_call() {
    let (ask_a, ask_b) = (call("a", "ask_user"), call("b", "ask_user"));
    let stored = RunRecord {
        status: RunStatus::Running,
        pending: vec![question(&ask_a), question(&ask_b)],
        steps: 1,
        ..new_run()
    };
    let by = |id: &str| Resolution {
        tool_call_id: Some(id.into()),
        kind: ResolutionKind::Answered,
        at: at(),
        author: crate::store::Author::default(),
        edit: None,
        grant: None,
    };
    let answer = |id: &str, data: &str| Decided {
        action: FittedDecision::Answer {
            tool_call_id: id.into(),
            data: json!(data),
        },
        resolution: Some(by(id)),
        decline_answer: None,
    };
    let mut m = machine(&stored, 5);
    // Given in the other order than the calls were made.
    m.handle(Event::Decided(Decisions {
        decisions: vec![answer("b", "north"), answer("a", "south")],
        turn_calls: Some(vec![ask_a.clone(), ask_b.clone()]),
        claimed: true,
    }));
    let effects = drain(&mut m);
    let [Effect::RunTools(runs)] = effects.as_slice() else {
        panic!("both tools run in one step: {effects:?}")
    };
    let ran_ids: Vec<_> = runs
        .iter()
        .map(|run| match run {
            ToolRun::Execute { call, .. } => call.id.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ran_ids, ["b", "a"]);

    let (b, b_chunk) = ran(&ask_b, "north");
    let (a, a_chunk) = ran(&ask_a, "south");
    m.handle(returned(vec![
        CallOutcome::Done(b.clone(), b_chunk.clone()),
        CallOutcome::Done(a.clone(), a_chunk.clone()),
    ]));
    let write = the_save(drain(&mut m));
    assert_eq!(write.status, RunStatus::Running);
    assert_eq!(
        write.append,
        [Message::Tool(a), Message::Tool(b)],
        "results in call order"
    );
    assert_eq!(write.resolutions, [by("b"), by("a")], "both decisions, in one write");

    m.handle(Event::Saved(write));
    let effects = drain(&mut m);
    assert_eq!(
        effects.iter().filter(|e| matches!(e, Effect::CallModel { .. })).count(),
        1,
        "the model is called once, after both: {effects:?}"
    );
    assert_eq!(effects.last(), Some(&Effect::CallModel { step: 2 }));
}

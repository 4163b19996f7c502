//! The conformance cases, and the runs they build.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;

use askloop::{
    Clock, Lease, Message, PendingKind, PendingToolCall, RUN_SCHEMA_VERSION, RunCursor, RunQuery, RunRecord,
    RunSettings, RunStatus, RunStore, RunUpdate, StoreError, SystemClock, ToolCall, ToolContent, ToolResult, Usage,
};
use chrono::{DateTime, Duration, DurationRound, Utc};
use serde_json::json;

use super::{RawRows, Subject};

// ---------------------------------------------------------------------------
// Building runs

/// A time the SQL stores keep exactly (they store microseconds).
pub(crate) fn at(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(Duration::microseconds(1)).unwrap_or(t)
}

pub(crate) fn base_time() -> DateTime<Utc> {
    at(SystemClock.now())
}

/// A new run record, as an agent creates it.
pub fn new_run(run_id: &str, agent_id: &str, created_at: DateTime<Utc>, messages: usize) -> RunRecord {
    let mut record = RunRecord::default().with_calls(RunStatus::Running, Vec::new());
    record.run_id = run_id.to_owned();
    record.agent_id = agent_id.to_owned();
    record.created_at = at(created_at);
    record.updated_at = at(created_at);
    record.message_count = messages as i64;
    record.metadata = json!({"model": "scripted"});
    record
}

/// A lease held for a minute from now by `owner-test`.
pub fn test_lease() -> askloop::Lease {
    askloop::Lease::new("owner-test", SystemClock.now() + Duration::seconds(60))
}

pub(crate) fn user(text: &str) -> Message {
    Message::user(text)
}

fn ask_call(id: &str, question: &str) -> ToolCall {
    ToolCall {
        id: id.to_owned(),
        name: "ask_user".to_owned(),
        args: json!({"question": question}).into(),
    }
}

/// A pending `ask_user` question, for tests outside the conformance suite.
pub fn pending_question(id: &str, question: &str) -> PendingToolCall {
    PendingToolCall {
        tool_call_id: id.to_owned(),
        tool_name: "ask_user".to_owned(),
        args: json!({"question": question}).into(),
        kind: PendingKind::Suspended,
        suspend_payload: Some(json!({"question": question, "selectionMode": "free-text"}).into()),
        resume_schema: Some(json!({"type": "string"}).into()),
        expires_at: None,
        started_at: None,
    }
}

/// A listing of the runs with `status` (any, if `None`) of `agent` (any,
/// if `None`).
fn query(status: Option<RunStatus>, agent: Option<&str>) -> RunQuery {
    RunQuery {
        status,
        agent_id: agent.map(str::to_owned),
        ..Default::default()
    }
}

fn tool_result(id: &str, text: &str) -> ToolResult {
    ToolResult {
        tool_call_id: id.to_owned(),
        tool_name: "ask_user".to_owned(),
        content: ToolContent::Text(text.to_owned()),
        is_error: false,
    }
}

/// A step's write of a run: its new status, pending calls and messages, at
/// `expected_version`; nothing else.
pub fn step<'a>(
    run_id: &'a str,
    expected_version: i64,
    status: RunStatus,
    pending: &'a [PendingToolCall],
    append: &'a [Message],
) -> RunUpdate<'a> {
    RunUpdate {
        run_id,
        expected_version,
        status,
        pending,
        step_results: &[],
        append,
        steps: 1,
        usage: Usage {
            input_tokens: 10,
            output_tokens: 5,
            total_tokens: 15,
        },
        error: None,
        failure: None,
        lease: None,
        resolutions: &[],
        outbox: &[],
        grants: &[],
    }
}

/// Creates a run and suspends it on one question; returns its version.
pub(crate) async fn suspended_run(
    store: &dyn RunStore,
    run_id: &str,
    agent_id: &str,
    created_at: DateTime<Utc>,
) -> i64 {
    let messages = [user("book a trip")];
    store
        .create(&new_run(run_id, agent_id, created_at, 1), &messages)
        .await
        .unwrap();
    let pending = [pending_question("call_1", "Which city?")];
    let assistant = [Message::assistant("", vec![ask_call("call_1", "Which city?")])];
    store
        .update(step(run_id, 0, RunStatus::Suspended, &pending, &assistant))
        .await
        .unwrap()
}

pub(crate) fn ids(runs: &[RunRecord]) -> Vec<&str> {
    runs.iter().map(|r| r.run_id.as_str()).collect()
}

pub(crate) fn expect_conflict<T: std::fmt::Debug>(result: Result<T, StoreError>, run_id: &str) {
    match result {
        Err(StoreError::Conflict { run_id: id, .. }) => assert_eq!(id, run_id),
        other => panic!("expected a conflict on {run_id}, got {other:?}"),
    }
}

pub(crate) fn expect_not_found<T: std::fmt::Debug>(result: Result<T, StoreError>, run_id: &str) {
    match result {
        Err(StoreError::NotFound { run_id: id }) => assert_eq!(id, run_id),
        other => panic!("expected {run_id} not found, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Cases every store passes

/// A created run reads back as written, with its first messages.
pub async fn create_then_get_returns_the_run_and_its_messages(s: &Subject) {
    let mut run = new_run("run-a", "agent-1", base_time(), 2);
    run.thread_id = Some("thread-9".into());
    let messages = [user("hello"), Message::assistant("hi", vec![])];
    s.store.create(&run, &messages).await.unwrap();

    assert_eq!(s.store.get("run-a").await.unwrap(), Some(run));
    assert_eq!(s.store.messages("run-a").await.unwrap(), messages);
}

/// A run's trace context is stored with it and read back as written,
/// through every later write (none of which touches it).
pub async fn a_runs_trace_context_is_stored_with_it_and_kept_by_later_writes(s: &Subject) {
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut run = new_run("run-traced", "agent-1", base_time(), 1);
    run.trace_parent = Some(traceparent.into());
    s.store.create(&run, &[user("hello")]).await.unwrap();
    let stored = s.store.get("run-traced").await.unwrap().unwrap();
    assert_eq!(stored.trace_parent.as_deref(), Some(traceparent));
    s.store
        .create(&new_run("run-untraced", "agent-1", base_time(), 0), &[])
        .await
        .unwrap();
    let untraced = s.store.get("run-untraced").await.unwrap().unwrap();
    assert_eq!(untraced.trace_parent, None, "a run stored without one has none");

    let pending = [pending_question("call_1", "Which city?")];
    let version = s
        .store
        .update(step("run-traced", 0, RunStatus::Suspended, &pending, &[]))
        .await
        .unwrap();
    s.store
        .update(step("run-traced", version, RunStatus::Completed, &[], &[]))
        .await
        .unwrap();
    let after = s.store.get("run-traced").await.unwrap().unwrap();
    assert_eq!(after.status(), RunStatus::Completed);
    assert_eq!(after.trace_parent.as_deref(), Some(traceparent));
}

/// Creating an existing id fails and keeps the first run.
pub async fn creating_an_existing_run_is_refused_and_keeps_the_first(s: &Subject) {
    let first = new_run("run-a", "agent-1", base_time(), 1);
    s.store.create(&first, &[user("first")]).await.unwrap();
    let second = new_run("run-a", "agent-2", base_time(), 1);
    match s.store.create(&second, &[user("second")]).await {
        Err(StoreError::AlreadyExists { run_id }) => assert_eq!(run_id, "run-a"),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    assert_eq!(s.store.get("run-a").await.unwrap().unwrap().agent_id, "agent-1");
    assert_eq!(s.store.messages("run-a").await.unwrap(), [user("first")]);
}

/// An unknown run is `None` with no messages; claiming or writing it is
/// `NotFound`.
pub async fn an_unknown_run_is_absent_and_cannot_be_claimed_or_written(s: &Subject) {
    assert_eq!(s.store.get("nope").await.unwrap(), None);
    assert!(s.store.messages("nope").await.unwrap().is_empty());
    expect_not_found(
        s.store.claim("nope", 0, &crate::conformance::test_lease()).await,
        "nope",
    );
    expect_not_found(
        s.store.update(step("nope", 0, RunStatus::Running, &[], &[])).await,
        "nope",
    );
}

/// Each write appends only its new messages, in order, and bumps the version.
pub async fn updates_append_only_new_messages_in_order(s: &Subject) {
    let run = new_run("run-a", "agent-1", base_time(), 1);
    s.store.create(&run, &[user("m0")]).await.unwrap();

    let v1 = s
        .store
        .update(step(
            "run-a",
            0,
            RunStatus::Running,
            &[],
            &[Message::assistant("m1", vec![])],
        ))
        .await
        .unwrap();
    let v2 = s
        .store
        .update(step("run-a", v1, RunStatus::Running, &[], &[]))
        .await
        .unwrap();
    let v3 = s
        .store
        .update(step(
            "run-a",
            v2,
            RunStatus::Running,
            &[],
            &[user("m2"), Message::assistant("m3", vec![])],
        ))
        .await
        .unwrap();
    assert!(v1 > 0 && v2 > v1 && v3 > v2, "versions {v1}, {v2}, {v3} must grow");

    let stored = s.store.get("run-a").await.unwrap().unwrap();
    assert_eq!(stored.version, v3);
    assert_eq!(stored.message_count, 4);
    assert_eq!(stored.created_at, run.created_at);
    assert!(stored.updated_at >= run.updated_at);
    let texts: Vec<String> = s
        .store
        .messages("run-a")
        .await
        .unwrap()
        .iter()
        .map(|m| match m {
            Message::User { content } | Message::Assistant { content, .. } => content.clone(),
            other => panic!("unexpected message {other:?}"),
        })
        .collect();
    assert_eq!(texts, ["m0", "m1", "m2", "m3"]);
}

/// A write at a stale version is a conflict and changes nothing.
pub async fn an_update_at_a_stale_version_is_a_conflict_and_changes_nothing(s: &Subject) {
    s.store
        .create(&new_run("run-a", "agent-1", base_time(), 1), &[user("m0")])
        .await
        .unwrap();
    let v1 = s
        .store
        .update(step("run-a", 0, RunStatus::Running, &[], &[user("m1")]))
        .await
        .unwrap();
    let before = s.store.get("run-a").await.unwrap().unwrap();

    expect_conflict(
        s.store
            .update(step("run-a", 0, RunStatus::Completed, &[], &[user("late")]))
            .await,
        "run-a",
    );
    assert_eq!(s.store.get("run-a").await.unwrap().unwrap(), before);
    assert_eq!(before.version, v1);
    assert_eq!(s.store.messages("run-a").await.unwrap(), [user("m0"), user("m1")]);
}

/// Suspending stores the pending calls with payloads and resume schemas and
/// the step's results; claiming moves the run to running at a new version;
/// completing records the answer and the final reply.
pub async fn suspend_claim_and_complete_round_trip(s: &Subject) {
    s.store
        .create(&new_run("run-a", "agent-1", base_time(), 1), &[user("two questions")])
        .await
        .unwrap();
    let pending = [pending_question("call_2", "Which date?")];
    let assistant = [Message::assistant(
        "",
        vec![ask_call("call_1", "Which city?"), ask_call("call_2", "Which date?")],
    )];
    let results = [tool_result("call_1", "User answered: Paris")];
    let suspended = s
        .store
        .update(RunUpdate {
            step_results: &results,
            ..step("run-a", 0, RunStatus::Suspended, &pending, &assistant)
        })
        .await
        .unwrap();

    let run = s.store.get("run-a").await.unwrap().unwrap();
    assert_eq!(run.status(), RunStatus::Suspended);
    assert_eq!(run.stored_calls(), pending);
    assert_eq!(run.step_results, results);
    assert_eq!(run.steps, 1);
    assert_eq!(run.usage.total_tokens, 15);
    assert_eq!(
        s.store
            .list(&RunQuery {
                status: Some(RunStatus::Suspended),
                ..Default::default()
            })
            .await
            .unwrap()
            .len(),
        1
    );

    let claimed = s
        .store
        .claim("run-a", suspended, &crate::conformance::test_lease())
        .await
        .unwrap();
    assert!(claimed > suspended);
    let run = s.store.get("run-a").await.unwrap().unwrap();
    assert_eq!((run.status(), run.version), (RunStatus::Running, claimed));
    assert_eq!(
        run.stored_calls(),
        pending,
        "a claim leaves the pending calls for the resuming driver"
    );

    let answers = [
        Message::Tool(tool_result("call_1", "User answered: Paris")),
        Message::Tool(tool_result("call_2", "User answered: Friday")),
        Message::assistant("Booked Paris on Friday", vec![]),
    ];
    let done = s
        .store
        .update(step("run-a", claimed, RunStatus::Completed, &[], &answers))
        .await
        .unwrap();
    let run = s.store.get("run-a").await.unwrap().unwrap();
    assert_eq!((run.status(), run.version), (RunStatus::Completed, done));
    assert!(run.stored_calls().is_empty() && run.step_results.is_empty());
    assert_eq!(run.message_count, 5);
    assert_eq!(s.store.messages("run-a").await.unwrap()[2..], answers);
}

/// A failed run keeps its error.
pub async fn a_failed_run_keeps_its_error(s: &Subject) {
    s.store
        .create(&new_run("run-a", "agent-1", base_time(), 1), &[user("m0")])
        .await
        .unwrap();
    s.store
        .update(RunUpdate {
            error: Some("model error: rate limited"),
            ..step("run-a", 0, RunStatus::Failed, &[], &[])
        })
        .await
        .unwrap();
    let run = s.store.get("run-a").await.unwrap().unwrap();
    assert_eq!(run.status(), RunStatus::Failed);
    assert_eq!(run.error().as_deref(), Some("model error: rate limited"));
}

/// Only a suspended run at the expected version can be claimed.
pub async fn claiming_a_run_that_is_not_suspended_or_at_another_version_is_a_conflict(s: &Subject) {
    s.store
        .create(&new_run("running", "agent-1", base_time(), 1), &[user("m0")])
        .await
        .unwrap();
    expect_conflict(
        s.store.claim("running", 0, &crate::conformance::test_lease()).await,
        "running",
    );

    let version = suspended_run(s.store.as_ref(), "waiting", "agent-1", base_time()).await;
    expect_conflict(
        s.store
            .claim("waiting", version - 1, &crate::conformance::test_lease())
            .await,
        "waiting",
    );
    expect_conflict(
        s.store
            .claim("waiting", version + 1, &crate::conformance::test_lease())
            .await,
        "waiting",
    );
    let run = s.store.get("waiting").await.unwrap().unwrap();
    assert_eq!((run.status(), run.version), (RunStatus::Suspended, version));

    s.store
        .claim("waiting", version, &crate::conformance::test_lease())
        .await
        .unwrap();
    expect_conflict(
        s.store
            .claim("waiting", version, &crate::conformance::test_lease())
            .await,
        "waiting",
    );
}

/// Of 20 tasks claiming one run at the same version, exactly one wins; the
/// others get `Conflict`.
pub async fn of_twenty_concurrent_claims_exactly_one_wins(s: &Subject) {
    let version = suspended_run(s.store.as_ref(), "run-a", "agent-1", base_time()).await;
    let start = Arc::new(tokio::sync::Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let store = Arc::clone(&s.store);
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                start.wait().await;
                store.claim("run-a", version, &crate::conformance::test_lease()).await
            })
        })
        .collect();
    let mut won = Vec::new();
    let mut conflicts = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(v) => won.push(v),
            Err(StoreError::Conflict { .. }) => conflicts += 1,
            Err(other) => panic!("a claim failed with something other than a conflict: {other}"),
        }
    }
    assert_eq!(won.len(), 1, "exactly one claim must win, {} did", won.len());
    assert_eq!(conflicts, 19);
    let run = s.store.get("run-a").await.unwrap().unwrap();
    assert_eq!((run.status(), run.version), (RunStatus::Running, won[0]));
}

/// Of 10 writers at one version, exactly one step (with its messages) is
/// written.
pub async fn of_ten_concurrent_updates_at_one_version_exactly_one_is_written(s: &Subject) {
    s.store
        .create(&new_run("run-a", "agent-1", base_time(), 1), &[user("m0")])
        .await
        .unwrap();
    let start = Arc::new(tokio::sync::Barrier::new(10));
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let store = Arc::clone(&s.store);
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                start.wait().await;
                let append = [user(&format!("writer {i}")), user(&format!("writer {i} again"))];
                store
                    .update(step("run-a", 0, RunStatus::Running, &[], &append))
                    .await
                    .map(|_| i)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(i) => winners.push(i),
            Err(StoreError::Conflict { .. }) => {}
            Err(other) => panic!("an update failed with something other than a conflict: {other}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one update must win, {} did", winners.len());
    let i = winners[0];
    assert_eq!(
        s.store.messages("run-a").await.unwrap(),
        [
            user("m0"),
            user(&format!("writer {i}")),
            user(&format!("writer {i} again"))
        ]
    );
    assert_eq!(s.store.get("run-a").await.unwrap().unwrap().message_count, 3);
}

/// Listing is newest first; runs created at the same instant come in
/// descending id order, compared bytewise (whatever a database's locale).
pub async fn list_is_newest_first_then_by_id_descending(s: &Subject) {
    let t0 = base_time() - Duration::hours(1);
    let runs = [
        ("r-old", t0),
        ("r-new", t0 + Duration::minutes(30)),
        // Same instant: bytewise "b" > "a-2" > "Z" > "A_1" (a locale order
        // would put "a-2" before "A_1" and "Z" last).
        ("A_1", t0 + Duration::minutes(10)),
        ("Z", t0 + Duration::minutes(10)),
        ("a-2", t0 + Duration::minutes(10)),
        ("b", t0 + Duration::minutes(10)),
        ("r-mid", t0 + Duration::minutes(20)),
    ];
    for (id, created) in runs {
        s.store
            .create(&new_run(id, "agent-1", created, 1), &[user(id)])
            .await
            .unwrap();
    }
    let listed = s.store.list(&RunQuery::default()).await.unwrap();
    assert_eq!(ids(&listed), ["r-new", "r-mid", "b", "a-2", "Z", "A_1", "r-old"]);
}

/// Listing filters by status, by agent, and by both.
pub async fn list_filters_by_status_and_agent(s: &Subject) {
    let t0 = base_time() - Duration::hours(1);
    suspended_run(s.store.as_ref(), "s-1", "agent-1", t0).await;
    suspended_run(s.store.as_ref(), "s-2", "agent-2", t0 + Duration::seconds(1)).await;
    s.store
        .create(&new_run("r-1", "agent-1", t0 + Duration::seconds(2), 1), &[user("x")])
        .await
        .unwrap();
    s.store
        .create(&new_run("r-2", "agent-2", t0 + Duration::seconds(3), 1), &[user("x")])
        .await
        .unwrap();

    let suspended = s.store.list(&query(Some(RunStatus::Suspended), None)).await.unwrap();
    assert_eq!(ids(&suspended), ["s-2", "s-1"]);
    let agent_1 = s.store.list(&query(None, Some("agent-1"))).await.unwrap();
    assert_eq!(ids(&agent_1), ["r-1", "s-1"]);
    let both = s
        .store
        .list(&query(Some(RunStatus::Running), Some("agent-2")))
        .await
        .unwrap();
    assert_eq!(ids(&both), ["r-2"]);
    let none = s.store.list(&query(Some(RunStatus::Completed), None)).await.unwrap();
    assert!(none.is_empty());
    assert!(s.store.list(&query(None, Some("agent-3"))).await.unwrap().is_empty());
}

/// Pages of `limit` from `offset` add up to the whole listing.
pub async fn list_pages_with_limit_and_offset(s: &Subject) {
    let t0 = base_time() - Duration::hours(1);
    for i in 0..7 {
        let id = format!("run-{i}");
        s.store
            .create(&new_run(&id, "agent-1", t0 + Duration::seconds(i), 1), &[user("x")])
            .await
            .unwrap();
    }
    let all = s.store.list(&RunQuery::default()).await.unwrap();
    assert_eq!(all.len(), 7);
    let mut paged = Vec::new();
    for page in 0..4 {
        let query = RunQuery {
            limit: Some(3),
            offset: page * 3,
            ..Default::default()
        };
        let runs = s.store.list(&query).await.unwrap();
        assert!(runs.len() <= 3);
        paged.extend(runs);
    }
    assert_eq!(ids(&paged), ids(&all));
    let page_two = RunQuery {
        limit: Some(2),
        offset: 2,
        ..Default::default()
    };
    assert_eq!(ids(&s.store.list(&page_two).await.unwrap()), ["run-4", "run-3"]);
    let past_end = RunQuery {
        offset: 7,
        ..Default::default()
    };
    assert!(s.store.list(&past_end).await.unwrap().is_empty());
    let zero = RunQuery {
        limit: Some(0),
        ..Default::default()
    };
    assert!(s.store.list(&zero).await.unwrap().is_empty());
}

/// Pages that each start after the last run of the page before add up to
/// the whole listing, with or without filters, runs created in the same
/// microsecond ordered by id; a run created since the first page is not
/// shown again, and one gone from a filtered listing shifts nothing.
pub async fn list_pages_after_the_last_run_of_the_page_before(s: &Subject) {
    let t0 = base_time() - Duration::hours(1);
    for i in 0..5 {
        suspended_run(
            s.store.as_ref(),
            &format!("s-{i}"),
            "agent-1",
            t0 + Duration::seconds(i),
        )
        .await;
    }
    // Three runs in one microsecond: their ids order them.
    for id in ["same-a", "same-c", "same-b"] {
        s.store
            .create(&new_run(id, "agent-2", t0 + Duration::seconds(10), 1), &[user("x")])
            .await
            .unwrap();
    }
    let pages = |filter: RunQuery, limit: u32| async move {
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let query = RunQuery {
                limit: Some(limit),
                after: after.clone(),
                ..filter.clone()
            };
            let page = s.store.list(&query).await.unwrap();
            assert!(page.len() <= limit as usize);
            let Some(last) = page.last() else { break };
            after = Some(RunCursor::after_created(last));
            seen.extend(ids(&page).into_iter().map(str::to_owned));
        }
        seen
    };
    let all = ids(&s.store.list(&RunQuery::default()).await.unwrap())
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    assert_eq!(&all[..3], ["same-c", "same-b", "same-a"]);
    assert_eq!(pages(RunQuery::default(), 2).await, all);
    assert_eq!(pages(RunQuery::default(), 1).await, all);
    let suspended = RunQuery {
        status: Some(RunStatus::Suspended),
        ..Default::default()
    };
    assert_eq!(pages(suspended.clone(), 2).await, ["s-4", "s-3", "s-2", "s-1", "s-0"]);
    let agent_2 = RunQuery {
        agent_id: Some("agent-2".into()),
        ..Default::default()
    };
    assert_eq!(pages(agent_2, 2).await, ["same-c", "same-b", "same-a"]);

    // The first page of suspended runs, then a new one and one claimed.
    let first = s
        .store
        .list(&RunQuery {
            limit: Some(2),
            ..suspended.clone()
        })
        .await
        .unwrap();
    assert_eq!(ids(&first), ["s-4", "s-3"]);
    suspended_run(s.store.as_ref(), "s-new", "agent-1", t0 + Duration::seconds(20)).await;
    let claimed = s.store.get("s-2").await.unwrap().unwrap();
    s.store
        .claim("s-2", claimed.version, &super::test_lease())
        .await
        .unwrap();
    let second = s
        .store
        .list(&RunQuery {
            limit: Some(2),
            after: first.last().map(RunCursor::after_created),
            ..suspended
        })
        .await
        .unwrap();
    assert_eq!(
        ids(&second),
        ["s-1", "s-0"],
        "the next two, nothing skipped or repeated"
    );
}

/// `count` is the number of runs the listing for the same query holds:
/// by status, by agent, by both, after a place, past an offset, up to a
/// limit; a run that leaves a status leaves its count.
pub async fn count_is_the_length_of_the_listing_for_the_same_query(s: &Subject) {
    let t0 = base_time() - Duration::hours(1);
    for i in 0..7 {
        let agent = if i < 4 { "agent-1" } else { "agent-2" };
        suspended_run(s.store.as_ref(), &format!("s-{i}"), agent, t0 + Duration::seconds(i)).await;
    }
    for i in 0..3 {
        s.store
            .create(
                &new_run(&format!("r-{i}"), "agent-1", t0 + Duration::seconds(10 + i), 1),
                &[user("x")],
            )
            .await
            .unwrap();
    }
    let suspended = query(Some(RunStatus::Suspended), None);
    let s3 = s.store.get("s-3").await.unwrap().unwrap();
    let cases = [
        (RunQuery::default(), 10),
        (suspended.clone(), 7),
        (query(Some(RunStatus::Running), None), 3),
        (query(Some(RunStatus::Completed), None), 0),
        (query(None, Some("agent-2")), 3),
        (query(Some(RunStatus::Suspended), Some("agent-1")), 4),
        (query(None, Some("agent-3")), 0),
        (
            RunQuery {
                after: Some(RunCursor::after_created(&s3)),
                ..suspended.clone()
            },
            3,
        ),
        (
            RunQuery {
                limit: Some(5),
                ..suspended.clone()
            },
            5,
        ),
        (
            RunQuery {
                offset: 5,
                limit: Some(5),
                ..suspended.clone()
            },
            2,
        ),
        (
            RunQuery {
                offset: 9,
                ..suspended.clone()
            },
            0,
        ),
    ];
    for (query, expected) in cases {
        let listed = s.store.list(&query).await.unwrap().len() as u64;
        assert_eq!(listed, expected, "the listing for {query:?}");
        assert_eq!(
            s.store.count(&query).await.unwrap(),
            expected,
            "the count for {query:?}"
        );
    }

    // Answered: no longer counted as suspended.
    let claimed = s.store.get("s-0").await.unwrap().unwrap();
    s.store
        .claim("s-0", claimed.version, &super::test_lease())
        .await
        .unwrap();
    assert_eq!(s.store.count(&suspended).await.unwrap(), 6);
}

/// `waiting` counts the suspended runs of each agent and the calls they
/// wait on; running and finished runs, and agents with nothing waiting, are
/// left out; a run that is answered leaves the count.
pub async fn waiting_counts_suspended_runs_and_their_calls_by_agent(s: &Subject) {
    let t0 = base_time() - Duration::hours(1);
    assert!(
        s.store.waiting().await.unwrap().is_empty(),
        "an empty store has nothing waiting"
    );
    suspended_run(s.store.as_ref(), "a-1", "agent-1", t0).await;
    suspended_run(s.store.as_ref(), "b-1", "agent-2", t0 + Duration::seconds(1)).await;
    // Two questions at once on one run of agent-1.
    s.store
        .create(&new_run("a-2", "agent-1", t0 + Duration::seconds(2), 1), &[user("x")])
        .await
        .unwrap();
    let pending = [
        pending_question("call_1", "Which city?"),
        pending_question("call_2", "When?"),
    ];
    let assistant = [Message::assistant(
        "",
        vec![ask_call("call_1", "Which city?"), ask_call("call_2", "When?")],
    )];
    s.store
        .update(step("a-2", 0, RunStatus::Suspended, &pending, &assistant))
        .await
        .unwrap();
    // Running and completed runs wait on nothing.
    s.store
        .create(&new_run("c-1", "agent-3", t0 + Duration::seconds(3), 1), &[user("x")])
        .await
        .unwrap();
    s.store
        .update(step("c-1", 0, RunStatus::Completed, &[], &[]))
        .await
        .unwrap();
    s.store
        .create(&new_run("c-2", "agent-3", t0 + Duration::seconds(4), 1), &[user("x")])
        .await
        .unwrap();

    let waiting = |agent: &str, runs: u64, calls: u64| askloop::AgentWaiting {
        agent_id: agent.to_owned(),
        runs,
        calls,
    };
    assert_eq!(
        s.store.waiting().await.unwrap(),
        [waiting("agent-1", 2, 3), waiting("agent-2", 1, 1)]
    );

    let b1 = s.store.get("b-1").await.unwrap().unwrap();
    s.store.claim("b-1", b1.version, &super::test_lease()).await.unwrap();
    assert_eq!(
        s.store.waiting().await.unwrap(),
        [waiting("agent-1", 2, 3)],
        "b-1 was answered"
    );
}

/// `prune` deletes completed, failed and cancelled runs last written before
/// the cutoff, with their messages, and nothing else.
pub async fn prune_deletes_only_finished_runs_older_than_the_cutoff_with_their_messages(s: &Subject) {
    let now = base_time();
    let old = now - Duration::days(30);
    let cutoff = now - Duration::days(7);
    let with_status = |id: &str, status: RunStatus, written: DateTime<Utc>| {
        new_run(id, "agent-1", written, 2).with_calls(status, Vec::new())
    };
    let runs = [
        with_status("old-completed", RunStatus::Completed, old),
        with_status("old-failed", RunStatus::Failed, old),
        with_status("old-cancelled", RunStatus::Cancelled, old),
        with_status("old-suspended", RunStatus::Suspended, old),
        with_status("old-running", RunStatus::Running, old),
        with_status("new-completed", RunStatus::Completed, now),
    ];
    for run in &runs {
        s.store
            .create(run, &[user("q"), Message::assistant("a", vec![])])
            .await
            .unwrap();
    }

    assert_eq!(s.store.prune(cutoff).await.unwrap(), 3);
    let left: HashSet<String> = s
        .store
        .list(&RunQuery::default())
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    let expected: HashSet<String> = ["old-suspended", "old-running", "new-completed"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(left, expected);
    for gone in ["old-completed", "old-failed", "old-cancelled"] {
        assert_eq!(s.store.get(gone).await.unwrap(), None);
        assert!(s.store.messages(gone).await.unwrap().is_empty());
        if let Some(raw) = &s.raw {
            assert_eq!(raw.message_rows(gone).await, 0, "messages of {gone} must be deleted");
        }
    }
    assert_eq!(s.store.messages("old-suspended").await.unwrap().len(), 2);
    assert_eq!(s.store.prune(cutoff).await.unwrap(), 0);
}

/// Settings a run was started with, as a caller may send them (text with
/// a NUL included).
fn narrowed_settings() -> RunSettings {
    RunSettings::default()
        .max_steps(2)
        .require_tool_approval()
        .active_tools(["ask_user"])
        .instructions("Be brief.\u{0}")
}

/// Creates run `narrowed`, running with [`narrowed_settings`], and run
/// `plain`, suspended without settings.
async fn narrowed_and_plain_runs(s: &Subject) {
    let t0 = base_time();
    let mut run = new_run("narrowed", "agent-1", t0, 1);
    run.settings = narrowed_settings();
    s.store.create(&run, &[user("hi")]).await.unwrap();
    suspended_run(s.store.as_ref(), "plain", "agent-1", t0).await;
}

/// A run's settings read back as created, through a suspension, a claim
/// and a completion; a run without settings reads back with none.
pub async fn a_runs_settings_are_stored_with_it_and_kept_by_its_writes(s: &Subject) {
    narrowed_and_plain_runs(s).await;
    assert_eq!(
        s.store.get("narrowed").await.unwrap().unwrap().settings,
        narrowed_settings()
    );

    let pending = [pending_question("call_1", "Which city?")];
    let assistant = [Message::assistant("", vec![ask_call("call_1", "Which city?")])];
    let version = s
        .store
        .update(step("narrowed", 0, RunStatus::Suspended, &pending, &assistant))
        .await
        .unwrap();
    let version = s.store.claim("narrowed", version, &super::test_lease()).await.unwrap();
    s.store
        .update(step("narrowed", version, RunStatus::Completed, &[], &[]))
        .await
        .unwrap();
    let stored = s.store.get("narrowed").await.unwrap().unwrap();
    assert_eq!(
        (stored.status(), stored.settings),
        (RunStatus::Completed, narrowed_settings())
    );
    assert!(s.store.get("plain").await.unwrap().unwrap().settings.is_default());
}

// ---------------------------------------------------------------------------
// Cases for stores with rows

fn raw(s: &Subject) -> &dyn RawRows {
    s.raw.as_deref().expect("this case needs a store with raw row access")
}

/// A run row that cannot be parsed is `Corrupt` naming the run; other runs
/// read, list and claim as before, and the listing leaves the bad one out.
pub async fn a_corrupt_run_row_is_reported_for_that_run_only(s: &Subject) {
    let t0 = base_time() - Duration::hours(1);
    let good_1 = suspended_run(s.store.as_ref(), "good-1", "agent-1", t0).await;
    suspended_run(s.store.as_ref(), "bad", "agent-1", t0 + Duration::seconds(1)).await;
    suspended_run(s.store.as_ref(), "good-2", "agent-1", t0 + Duration::seconds(2)).await;
    raw(s).corrupt_run("bad").await;

    match s.store.get("bad").await {
        Err(StoreError::Corrupt { run_id, detail }) => {
            assert_eq!(run_id, "bad");
            assert!(detail.contains("pending"), "the detail names the column: {detail}");
        }
        other => panic!("expected Corrupt for run bad, got {other:?}"),
    }
    assert!(s.store.get("good-1").await.unwrap().is_some());
    let listed = s.store.list(&RunQuery::default()).await.unwrap();
    assert_eq!(ids(&listed), ["good-2", "good-1"]);
    let suspended = RunQuery {
        status: Some(RunStatus::Suspended),
        agent_id: Some("agent-1".into()),
        ..Default::default()
    };
    assert_eq!(ids(&s.store.list(&suspended).await.unwrap()), ["good-2", "good-1"]);
    s.store
        .claim("good-1", good_1, &crate::conformance::test_lease())
        .await
        .unwrap();
}

/// A message that cannot be parsed is `Corrupt` naming the run and the
/// message; the run's row and other runs' messages read as before.
pub async fn a_corrupt_message_is_reported_for_that_run_only(s: &Subject) {
    let t0 = base_time();
    suspended_run(s.store.as_ref(), "good", "agent-1", t0).await;
    suspended_run(s.store.as_ref(), "bad", "agent-1", t0).await;
    raw(s).corrupt_message("bad", 1).await;

    match s.store.messages("bad").await {
        Err(StoreError::Corrupt { run_id, detail }) => {
            assert_eq!(run_id, "bad");
            assert!(detail.contains("message 1"), "the detail names the message: {detail}");
        }
        other => panic!("expected Corrupt for run bad, got {other:?}"),
    }
    assert_eq!(
        s.store.get("bad").await.unwrap().unwrap().status(),
        RunStatus::Suspended
    );
    assert_eq!(s.store.messages("good").await.unwrap().len(), 2);
}

/// A row written by a newer askloop is refused naming the run (reading,
/// claiming and writing it), is left out of listings, and is not changed.
pub async fn a_row_from_a_newer_askloop_is_refused_and_left_unchanged(s: &Subject) {
    let t0 = base_time();
    let version = suspended_run(s.store.as_ref(), "future", "agent-1", t0).await;
    suspended_run(s.store.as_ref(), "today", "agent-1", t0).await;
    let newer = RUN_SCHEMA_VERSION + 1;
    raw(s).set_schema_version("future", newer).await;

    let expect_newer = |result: Result<(), StoreError>, what: &str| match result {
        Err(StoreError::NewerSchema {
            run_id,
            found,
            supported,
        }) => {
            assert_eq!(run_id, "future", "{what}");
            assert_eq!((found, supported), (newer, RUN_SCHEMA_VERSION), "{what}");
        }
        other => panic!("{what}: expected NewerSchema for run future, got {other:?}"),
    };
    expect_newer(s.store.get("future").await.map(|_| ()), "get");
    expect_newer(
        s.store
            .claim("future", version, &crate::conformance::test_lease())
            .await
            .map(|_| ()),
        "claim",
    );
    expect_newer(
        s.store
            .update(step("future", version, RunStatus::Completed, &[], &[user("x")]))
            .await
            .map(|_| ()),
        "update",
    );
    assert_eq!(ids(&s.store.list(&RunQuery::default()).await.unwrap()), ["today"]);

    // Back at this build's layout, the row is exactly as it was.
    raw(s).set_schema_version("future", RUN_SCHEMA_VERSION).await;
    let run = s.store.get("future").await.unwrap().unwrap();
    assert_eq!(
        (run.status(), run.version, run.message_count),
        (RunStatus::Suspended, version, 2)
    );
    assert_eq!(raw(s).message_rows("future").await, 2);
}

/// A run with settings is written at the layout that builds without them
/// refuse (they would drive it past its limits), through every write; a run
/// without settings stays at the first layout, which every build reads.
pub async fn only_a_run_with_settings_is_stored_at_the_layout_that_older_builds_refuse(s: &Subject) {
    narrowed_and_plain_runs(s).await;
    assert_eq!(raw(s).schema_version("narrowed").await, 2);
    assert_eq!(raw(s).schema_version("plain").await, 1);

    let version = s
        .store
        .update(step("narrowed", 0, RunStatus::Suspended, &[], &[]))
        .await
        .unwrap();
    s.store.claim("narrowed", version, &super::test_lease()).await.unwrap();
    let plain = s.store.get("plain").await.unwrap().unwrap();
    let version = s
        .store
        .claim("plain", plain.version, &super::test_lease())
        .await
        .unwrap();
    s.store
        .update(step("plain", version, RunStatus::Completed, &[], &[]))
        .await
        .unwrap();
    assert_eq!(raw(s).schema_version("narrowed").await, 2, "kept by its writes");
    assert_eq!(raw(s).schema_version("plain").await, 1, "kept by its writes");
    assert_eq!(
        s.store.get("narrowed").await.unwrap().unwrap().settings,
        narrowed_settings(),
        "this build reads both"
    );
}

/// A run on a thread is written at layout 3, which older builds refuse.
pub async fn a_run_on_a_thread_is_stored_at_the_layout_that_older_builds_refuse(s: &Subject) {
    let mut run = new_run("on-thread", "agent", base_time(), 1);
    run.memory = Some(askloop::RunMemory {
        key: askloop::ThreadKey::new("ana", "t1"),
        context: 0,
    });
    s.store.create(&run, &[user("hello")]).await.unwrap();
    assert_eq!(raw(s).schema_version("on-thread").await, 3);
    s.store
        .update(step("on-thread", 0, RunStatus::Suspended, &[], &[]))
        .await
        .unwrap();
    assert_eq!(raw(s).schema_version("on-thread").await, 3, "kept by its writes");
    assert_eq!(s.store.get("on-thread").await.unwrap().unwrap().memory, run.memory);
}

/// A write that records an approval with edited arguments, a decision by
/// an approval rule (layout 4), or an approval that sticks or one it made
/// (layout 5), raises the row to the layout that holds them, so an older
/// build refuses the run instead of misreading it; no later write lowers
/// it, and other writes leave a run's layout as it was.
pub async fn a_decision_older_builds_cannot_read_raises_the_row_to_the_layout_they_refuse(s: &Subject) {
    let edited = {
        let mut r = askloop::Resolution::new(
            Some("c1"),
            askloop::ResolutionKind::Approved,
            base_time(),
            askloop::Author::named(askloop::Interface::Page, "dana"),
        );
        r.edit = Some(askloop::ArgumentsEdit {
            original: json!({"path": "a.txt"}),
            edited: json!({"path": "b.txt"}),
        });
        r
    };
    let ruled = askloop::Resolution::new(
        Some("c1"),
        askloop::ResolutionKind::Denied,
        base_time(),
        askloop::Author::named(askloop::Interface::Rule, "no-secrets"),
    );
    let granted = {
        let mut r = askloop::Resolution::new(
            Some("c1"),
            askloop::ResolutionKind::Approved,
            base_time(),
            askloop::Author::named(askloop::Interface::Grant, "dana"),
        );
        r.grant = Some(askloop::GrantNote {
            id: "earlier:c0".into(),
            scope: askloop::GrantScope::Thread,
            granted_at: base_time(),
            granted_via: askloop::Interface::Page,
        });
        r
    };
    for (run_id, decision, layout) in [("edited", edited, 4), ("ruled", ruled, 4), ("granted", granted, 5)] {
        s.store
            .create(&new_run(run_id, "agent", base_time(), 0), &[])
            .await
            .unwrap();
        let v = s
            .store
            .update(step(run_id, 0, RunStatus::Running, &[], &[]))
            .await
            .unwrap();
        assert_eq!(
            raw(s).schema_version(run_id).await,
            1,
            "{run_id}: a plain write keeps layout 1"
        );
        let mut decided = step(run_id, v, RunStatus::Running, &[], &[]);
        decided.resolutions = std::slice::from_ref(&decision);
        let v = s.store.update(decided).await.unwrap();
        assert_eq!(raw(s).schema_version(run_id).await, layout, "{run_id}");
        assert!(layout <= RUN_SCHEMA_VERSION, "this build reads what it writes");
        s.store
            .update(step(run_id, v, RunStatus::Completed, &[], &[]))
            .await
            .unwrap();
        assert_eq!(
            raw(s).schema_version(run_id).await,
            layout,
            "{run_id}: never lowered again"
        );
        assert_eq!(s.store.get(run_id).await.unwrap().unwrap().resolutions, [decision]);
    }
}

/// A write that records a decision made in Slack raises the row to layout
/// 6 (a build before Slack cannot read its record), also from layout 5.
pub async fn a_decision_in_slack_raises_the_row_to_the_layout_older_builds_refuse(s: &Subject) {
    let by_link = askloop::Resolution::new(
        Some("c1"),
        askloop::ResolutionKind::Answered,
        base_time(),
        askloop::Author::named(askloop::Interface::Link, "Alice"),
    );
    let in_slack = askloop::Resolution::new(
        Some("c2"),
        askloop::ResolutionKind::Approved,
        base_time(),
        askloop::Author::named(askloop::Interface::Slack, "U0123ABC"),
    );
    s.store
        .create(&new_run("slacked", "agent", base_time(), 0), &[])
        .await
        .unwrap();
    let mut first = step("slacked", 0, RunStatus::Running, &[], &[]);
    first.resolutions = std::slice::from_ref(&by_link);
    let v = s.store.update(first).await.unwrap();
    assert_eq!(raw(s).schema_version("slacked").await, 5);
    let mut decided = step("slacked", v, RunStatus::Completed, &[], &[]);
    decided.resolutions = std::slice::from_ref(&in_slack);
    s.store.update(decided).await.unwrap();
    assert_eq!(raw(s).schema_version("slacked").await, 6);
    const { assert!(6 <= RUN_SCHEMA_VERSION, "this build reads what it writes") };
    let stored = s.store.get("slacked").await.unwrap().unwrap();
    assert_eq!(stored.resolutions, [by_link, in_slack]);
}

/// A write that records an answer given through an answer link raises the
/// row to layout 5 (a build before links cannot read its record), also
/// from layout 4, and no later write lowers it.
pub async fn an_answer_by_link_raises_the_row_to_the_layout_older_builds_refuse(s: &Subject) {
    let ruled = askloop::Resolution::new(
        Some("c1"),
        askloop::ResolutionKind::Approved,
        base_time(),
        askloop::Author::named(askloop::Interface::Rule, "reads"),
    );
    let by_link = askloop::Resolution::new(
        Some("c2"),
        askloop::ResolutionKind::Answered,
        base_time(),
        askloop::Author::named(askloop::Interface::Link, "Alice"),
    );
    s.store
        .create(&new_run("linked", "agent", base_time(), 0), &[])
        .await
        .unwrap();
    let mut first = step("linked", 0, RunStatus::Running, &[], &[]);
    first.resolutions = std::slice::from_ref(&ruled);
    let v = s.store.update(first).await.unwrap();
    assert_eq!(raw(s).schema_version("linked").await, 4);
    let mut answered = step("linked", v, RunStatus::Running, &[], &[]);
    answered.resolutions = std::slice::from_ref(&by_link);
    let v = s.store.update(answered).await.unwrap();
    assert_eq!(raw(s).schema_version("linked").await, 5);
    s.store
        .update(step("linked", v, RunStatus::Completed, &[], &[]))
        .await
        .unwrap();
    assert_eq!(raw(s).schema_version("linked").await, 5, "never lowered again");
    let stored = s.store.get("linked").await.unwrap().unwrap();
    assert_eq!(stored.resolutions, [ruled, by_link]);
    assert_eq!(stored.schema_version(), 5);
}

/// A run's row holds its first 16 resolutions; each later one is a row of
/// its own, and the write that stores the first such row raises the run to
/// layout 7, so a build that reads only the row refuses the run instead of
/// missing its later decisions. A write never splits its resolutions
/// between the two; a refused write stores none; the run reads back with
/// every resolution in order, alone or listed; a takeover's resolution goes
/// where the run's go; pruning the run deletes its rows.
pub async fn a_long_runs_later_resolutions_are_rows_of_their_own_at_a_layout_older_builds_refuse(s: &Subject) {
    let answer = |k: usize| {
        askloop::Resolution::new(
            Some(format!("c{k}").as_str()),
            askloop::ResolutionKind::Answered,
            base_time() + Duration::seconds(k as i64),
            askloop::Author::named(askloop::Interface::Http, "ana"),
        )
    };
    let run_id = "long";
    s.store
        .create(&new_run(run_id, "agent", base_time(), 0), &[])
        .await
        .unwrap();
    let mut made = Vec::new();
    let mut v = 0;
    for k in 0..15 {
        made.push(answer(k));
        let mut decided = step(run_id, v, RunStatus::Running, &[], &[]);
        decided.resolutions = &made[k..];
        v = s.store.update(decided).await.unwrap();
    }
    assert_eq!(raw(s).resolutions_stored(run_id).await, (15, 0));
    assert_eq!(raw(s).schema_version(run_id).await, 1, "15 fit in the row");

    // Two more do not fit (15 + 2 > 16): both go to rows, none is split off.
    made.extend([answer(15), answer(16)]);
    let mut decided = step(run_id, v, RunStatus::Running, &[], &[]);
    decided.resolutions = &made[15..];
    v = s.store.update(decided).await.unwrap();
    assert_eq!(raw(s).resolutions_stored(run_id).await, (15, 2));
    assert_eq!(raw(s).schema_version(run_id).await, 7);
    const {
        assert!(
            crate::row::RESOLUTION_ROWS_LAYOUT <= RUN_SCHEMA_VERSION,
            "this build reads what it writes"
        )
    };

    // A refused write with resolutions stores none of them.
    let late = answer(99);
    let mut stale = step(run_id, v - 1, RunStatus::Running, &[], &[]);
    stale.resolutions = std::slice::from_ref(&late);
    assert!(s.store.update(stale).await.unwrap_err().is_conflict());
    assert_eq!(raw(s).resolutions_stored(run_id).await, (15, 2));

    // From now on every resolution is a row, one that needs layout 4 too,
    // and the layout stays 7.
    let mut edited = answer(17);
    edited.kind = askloop::ResolutionKind::Approved;
    edited.edit = Some(askloop::ArgumentsEdit {
        original: json!({"path": "a.txt"}),
        edited: json!({"path": "b.txt"}),
    });
    made.push(edited);
    let mut decided = step(run_id, v, RunStatus::Running, &[], &[]);
    decided.resolutions = &made[17..];
    v = s.store.update(decided).await.unwrap();
    assert_eq!(raw(s).resolutions_stored(run_id).await, (15, 3));
    assert_eq!(raw(s).schema_version(run_id).await, 7);

    // A takeover's resolution goes to a row too.
    let recovered = askloop::Resolution::new(
        None,
        askloop::ResolutionKind::Recovered,
        base_time(),
        askloop::Author::named(askloop::Interface::Server, "instance-b"),
    );
    let lease = Lease::new("instance-b", base_time() + Duration::hours(1));
    v = s
        .store
        .reclaim(run_id, v, &lease, base_time(), Some(&recovered))
        .await
        .unwrap();
    made.push(recovered);
    assert_eq!(raw(s).resolutions_stored(run_id).await, (15, 4));

    let read = s.store.get(run_id).await.unwrap().unwrap();
    assert_eq!(read.resolutions, made, "the row's, then the rows', in order");
    assert_eq!(read.version, v);
    let listed = s.store.list(&RunQuery::default()).await.unwrap();
    assert_eq!(listed.iter().find(|r| r.run_id == run_id).unwrap().resolutions, made);

    // A run created with more than its row holds (an older build's long
    // run) keeps them there; its next resolution is a row.
    let mut old = new_run("older", "agent", base_time(), 0);
    old.resolutions = (0..20).map(answer).collect();
    s.store.create(&old, &[]).await.unwrap();
    let next = answer(20);
    let mut decided = step("older", 0, RunStatus::Completed, &[], &[]);
    decided.resolutions = std::slice::from_ref(&next);
    s.store.update(decided).await.unwrap();
    assert_eq!(raw(s).resolutions_stored("older").await, (20, 1));
    assert_eq!(raw(s).schema_version("older").await, 7);
    let mut all = old.resolutions.clone();
    all.push(next);
    assert_eq!(s.store.get("older").await.unwrap().unwrap().resolutions, all);

    // Pruning a finished run deletes its rows with it.
    s.store
        .update(step(run_id, v, RunStatus::Completed, &[], &[]))
        .await
        .unwrap();
    s.store.prune(Utc::now() + Duration::days(1)).await.unwrap();
    assert!(s.store.get(run_id).await.unwrap().is_none());
    assert_eq!(raw(s).resolutions_stored(run_id).await, (0, 0));
    assert_eq!(raw(s).resolutions_stored("older").await, (0, 0));
}

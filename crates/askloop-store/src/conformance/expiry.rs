//! The conformance cases of time limits and resolutions: finding suspended
//! runs whose questions expired, and keeping who resolved what.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use askloop::{
    Author, Clock, ExpiredRuns, Interface, Message, PendingKind, PendingToolCall, Resolution, ResolutionKind,
    RunStatus, SystemClock,
};
use chrono::{DateTime, Duration, Utc};
use serde_json::json;

use super::Subject;
use super::cases::{at, base_time, ids, new_run, step, user};

fn question(id: &str, expires_at: Option<DateTime<Utc>>) -> PendingToolCall {
    PendingToolCall {
        tool_call_id: id.to_owned(),
        tool_name: "ask_user".to_owned(),
        args: json!({"question": "Which city?"}).into(),
        kind: PendingKind::Suspended,
        suspend_payload: Some(json!({"question": "Which city?"}).into()),
        resume_schema: None,
        expires_at,
        started_at: None,
    }
}

/// Creates a run suspended on `pending`; returns its version.
async fn suspended_on(s: &Subject, run_id: &str, pending: &[PendingToolCall]) -> i64 {
    s.store
        .create(&new_run(run_id, "agent-1", base_time(), 1), &[user("go")])
        .await
        .unwrap();
    let assistant = [Message::assistant("", vec![])];
    s.store
        .update(step(run_id, 0, RunStatus::Suspended, pending, &assistant))
        .await
        .unwrap()
}

/// A suspended run is found by `expiring` once the earliest time limit of
/// its pending calls has passed, and not before; a run with no limit, or
/// one no longer suspended, never is. The limit is kept to the microsecond.
pub async fn a_suspended_run_is_expiring_once_its_earliest_time_limit_passed(s: &Subject) {
    let now = at(SystemClock.now());
    let soon = now + Duration::seconds(30);
    let later = now + Duration::seconds(300);
    suspended_on(s, "no-limit", &[question("c1", None)]).await;
    suspended_on(
        s,
        "two-limits",
        &[question("c1", Some(later)), question("c2", Some(soon))],
    )
    .await;
    let v = suspended_on(s, "answered", &[question("c1", Some(soon))]).await;
    s.store
        .update(step("answered", v, RunStatus::Completed, &[], &[]))
        .await
        .unwrap();

    assert!(s.store.expiring(now, None, 10).await.unwrap().is_empty());
    let found = s.store.expiring(soon, None, 10).await.unwrap();
    assert_eq!(ids(&found), ["two-limits"]);
    assert_eq!(found[0].stored_calls()[1].expires_at, Some(soon));
    assert_eq!(
        found[0]
            .expired_calls(soon)
            .map(|p| p.tool_call_id.as_str())
            .collect::<Vec<_>>(),
        ["c2"]
    );
    assert_eq!(ids(&s.store.expiring(later, None, 10).await.unwrap()), ["two-limits"]);
    assert!(s.store.expiring(later, None, 0).await.unwrap().is_empty());
}

/// Runs with expired questions are read page after page, earliest time
/// limit first, then by id (runs with the same limit to the microsecond),
/// each exactly once, however many come before them: a page of runs nobody
/// resolves cannot hide the runs after it.
pub async fn expiring_runs_are_read_page_after_page_each_once(s: &Subject) {
    let now = at(SystemClock.now());
    let mut expected = Vec::new();
    for n in 0..7 {
        // Three share one limit; the rest are a second apart, the latest
        // first by id so that id order and limit order differ.
        let limit = now - Duration::seconds(if n < 3 { 10 } else { 10 - n });
        let run_id = format!("exp-{}", 9 - n);
        suspended_on(s, &run_id, &[question("c1", Some(limit))]).await;
        expected.push((limit, run_id));
    }
    suspended_on(s, "not-yet", &[question("c1", Some(now + Duration::seconds(60)))]).await;
    expected.sort();
    let mut pages = ExpiredRuns::time_limits(s.store.as_ref(), now, 3);
    let mut read = Vec::new();
    let mut sizes = Vec::new();
    while let Some(page) = pages.next_page().await.unwrap() {
        sizes.push(page.len());
        read.extend(page.into_iter().map(|run| run.run_id));
    }
    let expected: Vec<String> = expected.into_iter().map(|(_, id)| id).collect();
    assert_eq!(read, expected, "every expired run once, earliest limit first");
    assert_eq!(sizes, [3, 3, 1]);
}

/// Each write may append resolutions (several when decisions for several
/// calls are applied together); the run keeps them all, in order, with
/// their author and time, and a write without any keeps them as they were.
pub async fn resolutions_are_appended_by_writes_and_kept_in_order(s: &Subject) {
    let v = suspended_on(s, "run-r", &[question("c1", None), question("c2", None)]).await;
    let answered = Resolution {
        tool_call_id: Some("c1".into()),
        kind: ResolutionKind::Answered,
        at: at(SystemClock.now()),
        author: Author::named(Interface::Http, "ops"),
        edit: None,
        grant: None,
    };
    let mut first = step("run-r", v, RunStatus::Suspended, &[], &[]);
    let still = [question("c2", None)];
    first.pending = &still;
    first.resolutions = std::slice::from_ref(&answered);
    let v = s.store.update(first).await.unwrap();
    let v = s
        .store
        .update(step("run-r", v, RunStatus::Suspended, &still, &[]))
        .await
        .unwrap();
    let expired = Resolution {
        tool_call_id: Some("c2".into()),
        kind: ResolutionKind::Expired,
        at: at(SystemClock.now()),
        author: Author::via(Interface::Server),
        edit: None,
        grant: None,
    };
    // Two in one write: a late decision for c1 and the expiry of c2.
    let redecided = Resolution {
        tool_call_id: Some("c1".into()),
        kind: ResolutionKind::Declined,
        at: at(SystemClock.now()),
        author: Author::named(Interface::Cli, "lead"),
        edit: None,
        grant: None,
    };
    let both = [redecided.clone(), expired.clone()];
    let mut last = step("run-r", v, RunStatus::Completed, &[], &[]);
    last.resolutions = &both;
    s.store.update(last).await.unwrap();

    let run = s.store.get("run-r").await.unwrap().unwrap();
    let all = [answered, redecided.clone(), expired.clone()];
    assert_eq!(run.resolutions, all);
    assert_eq!(run.resolution_of("c2"), Some(&expired));
    assert_eq!(
        run.resolution_of("c1"),
        Some(&redecided),
        "the latest of a call's resolutions"
    );
    let listed = s.store.list(&Default::default()).await.unwrap();
    assert_eq!(listed[0].resolutions, all);
}

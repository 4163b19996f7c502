//! Conformance cases of the change feed ([`ChangeFeed::changes`]): every
//! store that has a feed reports each write once it is stored; a store that
//! can say which run changed says the right one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use askloop::{
    Clock, Message, PendingKind, PendingToolCall, RunChange, RunChanges, RunStatus, RunStore, RunUpdate, SystemClock,
    Usage,
};
use futures::StreamExt;
use serde_json::json;

use super::{Subject, new_run};

/// How long a case waits for a change before it fails (a bound on a hang,
/// not a measure of speed: the SQLite feed polls twice a second).
const PATIENCE: Duration = Duration::from_secs(30);

/// Waits for the next change, which must be of `run_id` or of runs unknown.
async fn expect_change(feed: &mut RunChanges, run_id: &str, after: &str) {
    let change = tokio::time::timeout(PATIENCE, feed.next())
        .await
        .unwrap_or_else(|_| panic!("no change reported within {PATIENCE:?} after {after}"))
        .unwrap_or_else(|| panic!("the change feed ended after {after}"));
    assert!(
        change == RunChange::of(run_id) || change == RunChange::unknown(),
        "after {after}, expected a change of {run_id} (or of unknown runs), got {change:?}"
    );
}

fn question() -> PendingToolCall {
    PendingToolCall {
        tool_call_id: "call_1".to_owned(),
        tool_name: "ask_user".to_owned(),
        args: json!({"question": "Which city?"}).into(),
        kind: PendingKind::Suspended,
        suspend_payload: Some(json!({"question": "Which city?", "selectionMode": "free-text"}).into()),
        resume_schema: Some(json!({"type": "string"}).into()),
        expires_at: None,
        started_at: None,
    }
}

fn write<'a>(run_id: &'a str, version: i64, status: RunStatus, pending: &'a [PendingToolCall]) -> RunUpdate<'a> {
    RunUpdate {
        run_id,
        expected_version: version,
        status,
        pending,
        step_results: &[],
        append: &[],
        steps: 1,
        usage: Usage::default(),
        error: None,
        failure: None,
        lease: None,
        resolutions: &[],
        outbox: &[],
        grants: &[],
    }
}

/// Creating, suspending, claiming and finishing a run are each reported.
pub async fn each_write_of_a_run_is_reported_on_the_change_feed(s: &Subject) {
    let Some(mut feed) = s.store.changes().await.unwrap() else {
        panic!("{:?} has no change feed", s.store)
    };
    let store: &dyn RunStore = s.store.as_ref();
    store
        .create(
            &new_run("run-c", "agent-1", SystemClock.now(), 1),
            &[Message::user("hello")],
        )
        .await
        .unwrap();
    expect_change(&mut feed, "run-c", "creating the run").await;
    let pending = [question()];
    let suspended = store
        .update(write("run-c", 0, RunStatus::Suspended, &pending))
        .await
        .unwrap();
    expect_change(&mut feed, "run-c", "suspending the run").await;
    let claimed = store.claim("run-c", suspended, &super::test_lease()).await.unwrap();
    expect_change(&mut feed, "run-c", "claiming the run").await;
    store
        .update(write("run-c", claimed, RunStatus::Completed, &[]))
        .await
        .unwrap();
    expect_change(&mut feed, "run-c", "completing the run").await;
}

/// Two feeds of one store both hear of a write.
pub async fn every_open_feed_hears_of_a_write(s: &Subject) {
    let mut first = s.store.changes().await.unwrap().unwrap();
    let mut second = s.store.changes().await.unwrap().unwrap();
    s.store
        .create(
            &new_run("run-d", "agent-1", SystemClock.now(), 1),
            &[Message::user("hello")],
        )
        .await
        .unwrap();
    expect_change(&mut first, "run-d", "creating the run (first feed)").await;
    expect_change(&mut second, "run-d", "creating the run (second feed)").await;
}

/// Generates a `#[tokio::test]` per change feed case.
#[macro_export]
macro_rules! change_feed_conformance_tests {
    ($subject:expr) => {
        $crate::__conformance_cases!($subject;
            each_write_of_a_run_is_reported_on_the_change_feed,
            every_open_feed_hears_of_a_write
        );
    };
}

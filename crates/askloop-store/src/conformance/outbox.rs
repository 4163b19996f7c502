//! The conformance cases of the outbox: notifications written with the run
//! write that raised them (and not at all when the write is refused), and
//! deliveries claimed under a lease so that two senders never take the
//! same one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;

use askloop::{
    Clock, DeliveryOutcome, DeliveryState, EventType, Lease, Message, OutboxMessage, PendingKind, PendingToolCall,
    RunStatus, RunUpdate, StoreError, SystemClock,
};
use chrono::{DateTime, Duration, Utc};
use serde_json::json;

use super::Subject;
use super::cases::{at, base_time, new_run, step, user};

fn question(id: &str) -> PendingToolCall {
    PendingToolCall {
        tool_call_id: id.to_owned(),
        tool_name: "ask_user".to_owned(),
        args: json!({"question": "Which city?"}).into(),
        kind: PendingKind::Suspended,
        suspend_payload: Some(json!({"question": "Which city?"}).into()),
        resume_schema: None,
        expires_at: None,
        started_at: None,
    }
}

fn message(id: &str, run_id: &str, created_at: DateTime<Utc>) -> OutboxMessage {
    OutboxMessage {
        id: id.to_owned(),
        run_id: run_id.to_owned(),
        destination: "https://hooks.example/askloop".to_owned(),
        event: EventType::QuestionRaised,
        payload: json!({"type": "question.raised", "data": {"runId": run_id, "text": "Zürich \u{0}"}}),
        created_at: at(created_at),
    }
}

fn lease(owner: &str, seconds: i64) -> Lease {
    Lease::new(owner, SystemClock.now() + Duration::seconds(seconds))
}

/// Creates `run_id` and suspends it on one question, raising `messages` in
/// the same write.
async fn suspend_with(s: &Subject, run_id: &str, messages: &[OutboxMessage]) {
    s.store
        .create(&new_run(run_id, "agent-1", base_time(), 1), &[user("go")])
        .await
        .unwrap();
    let pending = [question("c1")];
    let assistant = [Message::assistant("", vec![])];
    s.store
        .update(RunUpdate {
            outbox: messages,
            ..step(run_id, 0, RunStatus::Suspended, &pending, &assistant)
        })
        .await
        .unwrap();
}

/// A write's notifications are stored with it, pending and due at once,
/// and read back as written (NUL and non-ASCII text included); a write
/// that loses its compare-and-set stores none of its own.
pub async fn notifications_are_stored_with_their_write_and_not_with_a_refused_one(s: &Subject) {
    let now = SystemClock.now();
    let raised = message("msg_1", "run-a", now);
    suspend_with(s, "run-a", std::slice::from_ref(&raised)).await;

    let stored = s.store.deliveries("run-a").await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].message, raised);
    assert_eq!(stored[0].state, DeliveryState::Pending);
    assert_eq!(stored[0].attempts, 0);
    assert_eq!(stored[0].next_at, raised.created_at, "due as soon as written");
    assert_eq!(stored[0].last_error, None);

    // Version 0 is gone: this write is refused, and so is its notification.
    let refused = [message("msg_2", "run-a", now)];
    let err = s
        .store
        .update(RunUpdate {
            outbox: &refused,
            grants: &[],
            ..step("run-a", 0, RunStatus::Completed, &[], &[])
        })
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "expected a conflict, got {err}");
    let ids: Vec<String> = s
        .store
        .deliveries("run-a")
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.message.id)
        .collect();
    assert_eq!(ids, ["msg_1"], "a refused write must not leave a notification behind");
}

/// A held-back notice (a reminder, an escalation) is stored due at its
/// body's `dueAt`, read back as written, and not claimed before then; at
/// that time it is.
pub async fn a_held_back_notice_is_not_claimed_before_it_is_due(s: &Subject) {
    let now = at(SystemClock.now());
    let due = now + Duration::hours(2);
    let mut reminder = message("msg_later", "run-a", now);
    reminder.payload["notice"] = json!("reminder");
    reminder.payload["dueAt"] = json!(due.to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
    suspend_with(s, "run-a", std::slice::from_ref(&reminder)).await;

    let stored = s.store.deliveries("run-a").await.unwrap();
    assert_eq!(stored[0].message, reminder);
    assert_eq!(stored[0].next_at, due, "due when its body says, not when written");
    assert_eq!(stored[0].message.notice(), askloop::Notice::Reminder);

    let early = s
        .store
        .claim_deliveries(due - Duration::seconds(1), &lease("sender-1", 60), 8)
        .await
        .unwrap();
    assert!(early.is_empty(), "taken a second before it is due: {early:?}");
    let on_time = s.store.claim_deliveries(due, &lease("sender-1", 60), 8).await.unwrap();
    let ids: Vec<&str> = on_time.iter().map(|d| d.message.id.as_str()).collect();
    assert_eq!(ids, ["msg_later"]);
}

/// A claim takes due, unheld deliveries (oldest due first, at most
/// `limit`) and leases them; a second claim does not get them while the
/// lease holds, and does once it ran out. A delivery due later is not
/// taken before its time.
pub async fn claimed_deliveries_are_held_until_their_lease_runs_out(s: &Subject) {
    let now = at(SystemClock.now());
    let earlier = now - Duration::seconds(10);
    suspend_with(
        s,
        "run-a",
        &[message("msg_b", "run-a", now), message("msg_a", "run-a", earlier)],
    )
    .await;

    let first = s.store.claim_deliveries(now, &lease("sender-1", 60), 1).await.unwrap();
    let ids: Vec<&str> = first.iter().map(|d| d.message.id.as_str()).collect();
    assert_eq!(ids, ["msg_a"], "oldest due first, at most the limit");
    assert_eq!(first[0].lease.as_ref().map(|l| l.owner.as_str()), Some("sender-1"));

    let second = s.store.claim_deliveries(now, &lease("sender-2", 60), 10).await.unwrap();
    let ids: Vec<&str> = second.iter().map(|d| d.message.id.as_str()).collect();
    assert_eq!(ids, ["msg_b"], "a held delivery is not claimed again");
    assert!(
        s.store
            .claim_deliveries(now, &lease("sender-3", 60), 10)
            .await
            .unwrap()
            .is_empty()
    );

    // Later than both leases: both are free again.
    let after = now + Duration::seconds(120);
    let third = s
        .store
        .claim_deliveries(after, &lease("sender-3", 300), 10)
        .await
        .unwrap();
    assert_eq!(
        third.len(),
        2,
        "deliveries whose sender's lease ran out are claimed again"
    );
    // The first sender lost its delivery: its outcome is refused.
    match s
        .store
        .finish_delivery("msg_a", "sender-1", &DeliveryOutcome::Delivered)
        .await
    {
        Err(StoreError::DeliveryLost { id, owner }) => assert_eq!((id.as_str(), owner.as_str()), ("msg_a", "sender-1")),
        other => panic!("a sender that lost its lease must get DeliveryLost, got {other:?}"),
    }
}

/// A retry counts the attempt, keeps the error and makes the delivery due
/// again at its time, not before; a delivered or dead one is never claimed
/// again, and finishing it twice is refused.
pub async fn finished_attempts_are_counted_and_only_retries_come_back(s: &Subject) {
    let now = at(SystemClock.now());
    suspend_with(
        s,
        "run-a",
        &[
            message("msg_ok", "run-a", now),
            message("msg_retry", "run-a", now),
            message("msg_dead", "run-a", now),
        ],
    )
    .await;
    let sender = lease("sender-1", 60);
    assert_eq!(s.store.claim_deliveries(now, &sender, 10).await.unwrap().len(), 3);
    let retry_at = now + Duration::seconds(30);
    s.store
        .finish_delivery("msg_ok", "sender-1", &DeliveryOutcome::Delivered)
        .await
        .unwrap();
    s.store
        .finish_delivery(
            "msg_retry",
            "sender-1",
            &DeliveryOutcome::Retry {
                next_at: retry_at,
                error: "HTTP 500".to_owned(),
            },
        )
        .await
        .unwrap();
    s.store
        .finish_delivery(
            "msg_dead",
            "sender-1",
            &DeliveryOutcome::Dead {
                error: "HTTP 410".to_owned(),
            },
        )
        .await
        .unwrap();
    assert!(matches!(
        s.store
            .finish_delivery("msg_ok", "sender-1", &DeliveryOutcome::Delivered)
            .await,
        Err(StoreError::DeliveryLost { .. })
    ));

    let stored = s.store.deliveries("run-a").await.unwrap();
    let find = |id: &str| stored.iter().find(|d| d.message.id == id).unwrap();
    assert_eq!(
        (find("msg_ok").state, find("msg_ok").attempts),
        (DeliveryState::Delivered, 1)
    );
    let retry = find("msg_retry");
    assert_eq!((retry.state, retry.attempts), (DeliveryState::Pending, 1));
    assert_eq!(
        (retry.next_at, retry.last_error.as_deref()),
        (retry_at, Some("HTTP 500"))
    );
    assert_eq!(retry.lease, None);
    let dead = find("msg_dead");
    assert_eq!(
        (dead.state, dead.last_error.as_deref()),
        (DeliveryState::Dead, Some("HTTP 410"))
    );

    assert!(
        s.store
            .claim_deliveries(now, &lease("sender-2", 60), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let again = s
        .store
        .claim_deliveries(retry_at, &lease("sender-2", 60), 10)
        .await
        .unwrap();
    let ids: Vec<&str> = again.iter().map(|d| d.message.id.as_str()).collect();
    assert_eq!(ids, ["msg_retry"], "only the retry comes back, at its time");
    assert_eq!(again[0].attempts, 1);
}

/// Of 8 senders claiming at once, in separate tasks, each of 40 due
/// deliveries goes to exactly one.
pub async fn of_concurrent_senders_each_delivery_goes_to_exactly_one(s: &Subject) {
    let now = at(SystemClock.now());
    let messages: Vec<OutboxMessage> = (0..40).map(|n| message(&format!("msg_{n:02}"), "run-a", now)).collect();
    suspend_with(s, "run-a", &messages).await;
    let start = Arc::new(tokio::sync::Barrier::new(8));
    let tasks: Vec<_> = (0..8)
        .map(|n| {
            let store = Arc::clone(&s.store);
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                let mine = lease(&format!("sender-{n}"), 60);
                let mut taken = Vec::new();
                start.wait().await;
                loop {
                    let batch = store.claim_deliveries(now, &mine, 3).await.unwrap();
                    if batch.is_empty() {
                        return taken;
                    }
                    for d in &batch {
                        assert_eq!(d.lease.as_ref().map(|l| l.owner.as_str()), Some(mine.owner.as_str()));
                    }
                    taken.extend(batch.into_iter().map(|d| d.message.id));
                }
            })
        })
        .collect();
    let mut seen = HashSet::new();
    let mut total = 0;
    for task in tasks {
        for id in task.await.unwrap() {
            total += 1;
            assert!(seen.insert(id.clone()), "{id} was claimed by two senders");
        }
    }
    assert_eq!((total, seen.len()), (40, 40), "every delivery claimed exactly once");
}

//! Cases about the text a store keeps: whatever an answer or a payload
//! holds, it reads back exactly as written.
#![allow(clippy::unwrap_used)]

use askloop::{Clock, Message, PendingKind, PendingToolCall, RunStatus, RunUpdate, SystemClock, ToolCall, Usage};
use serde_json::json;

use super::{Subject, new_run};

/// Text with the characters stores are most likely to refuse or change:
/// NUL, other control characters, a backslash before `u0000`, and the
/// last Unicode code point.
const AWKWARD: &str = "a\u{0}b \u{1}\u{1f} \\u0000 \\\u{0} \u{10FFFF}0 \u{10FFFF} end\u{0}";

/// A message, a pending call's payload and arguments, and a run's error
/// holding NUL characters read back exactly.
pub async fn text_with_nul_characters_round_trips_exactly(s: &Subject) {
    let run = new_run("run-nul", "agent-1", SystemClock.now(), 1);
    let first = [Message::user(AWKWARD)];
    s.store.create(&run, &first).await.unwrap();

    let pending = [PendingToolCall {
        tool_call_id: "call_1".to_owned(),
        tool_name: "ask_user".to_owned(),
        args: json!({"question": AWKWARD}).into(),
        kind: PendingKind::Suspended,
        suspend_payload: Some(json!({"question": AWKWARD, "options": [{"label": AWKWARD}], AWKWARD: 1}).into()),
        resume_schema: Some(json!({"type": "string"}).into()),
        expires_at: None,
        started_at: None,
    }];
    let call = ToolCall {
        id: "call_1".to_owned(),
        name: "ask_user".to_owned(),
        args: json!({"question": AWKWARD}).into(),
    };
    let assistant = [Message::assistant(AWKWARD, vec![call])];
    let suspended = s
        .store
        .update(RunUpdate {
            run_id: "run-nul",
            expected_version: 0,
            status: RunStatus::Suspended,
            pending: &pending,
            step_results: &[],
            append: &assistant,
            steps: 1,
            usage: Usage::default(),
            error: None,
            failure: None,
            lease: None,
            resolutions: &[],
            outbox: &[],
            grants: &[],
        })
        .await
        .unwrap();
    let stored = s.store.get("run-nul").await.unwrap().unwrap();
    assert_eq!(stored.stored_calls(), pending);
    let messages = s.store.messages("run-nul").await.unwrap();
    assert_eq!(messages, [first[0].clone(), assistant[0].clone()]);

    let claimed = s
        .store
        .claim("run-nul", suspended, &crate::conformance::test_lease())
        .await
        .unwrap();
    s.store
        .update(RunUpdate {
            run_id: "run-nul",
            expected_version: claimed,
            status: RunStatus::Failed,
            pending: &[],
            step_results: &[],
            append: &[Message::user(AWKWARD)],
            steps: 2,
            usage: Usage::default(),
            error: Some(AWKWARD),
            failure: None,
            lease: None,
            resolutions: &[],
            outbox: &[],
            grants: &[],
        })
        .await
        .unwrap();
    let failed = s.store.get("run-nul").await.unwrap().unwrap();
    assert_eq!(failed.error().as_deref(), Some(AWKWARD));
    assert_eq!(s.store.messages("run-nul").await.unwrap()[2], Message::user(AWKWARD));
}

/// A listing by an agent id holding NUL (which no stored run can have:
/// PostgreSQL cannot hold it) finds nothing, as any unknown agent id does,
/// rather than failing.
pub async fn a_listing_by_an_agent_id_holding_nul_finds_nothing(s: &Subject) {
    let run = new_run("run-1", "agent-1", SystemClock.now(), 1);
    s.store.create(&run, &[Message::user("hi")]).await.unwrap();
    for agent_id in ["agent-1\u{0}", "\u{0}"] {
        let query = askloop::RunQuery {
            agent_id: Some(agent_id.to_owned()),
            ..Default::default()
        };
        assert_eq!(s.store.list(&query).await.unwrap(), [], "{agent_id:?}");
    }
}

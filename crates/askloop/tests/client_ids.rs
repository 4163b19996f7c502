//! Ids a caller chooses (a run's, a thread's) follow one rule, checked
//! before the store is asked: an id outside it is refused with
//! `RunError::InvalidId` naming the kind of id and the problem, and
//! nothing is written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use askloop::{
    Author, IdKind, IdProblem, MAX_ID_BYTES, MemoryStore, Message, PendingKind, PendingToolCall, ResumeOptions,
    RunError, RunQuery, RunRecord, RunStatus, RunStore, StreamOptions, ToolCall,
};
use chrono::Utc;
use common::*;
use serde_json::json;

const ASK: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?"}}]},
  {"text": "Deploying to {{toolResults}}."}
]}"#;

/// Ids that break each clause of the rule.
fn bad_ids() -> Vec<(String, IdProblem)> {
    vec![
        (String::new(), IdProblem::Empty),
        (
            "r".repeat(MAX_ID_BYTES + 1),
            IdProblem::TooLong {
                bytes: MAX_ID_BYTES + 1,
            },
        ),
        (
            "run\u{0}1".into(),
            IdProblem::ControlCharacter { character: '\0', at: 3 },
        ),
        (
            "run\u{7f}".into(),
            IdProblem::ControlCharacter {
                character: '\u{7f}',
                at: 3,
            },
        ),
        (" run".into(), IdProblem::SurroundingWhiteSpace),
        ("run\t".into(), IdProblem::ControlCharacter { character: '\t', at: 3 }),
        ("run ".into(), IdProblem::SurroundingWhiteSpace),
        (".".into(), IdProblem::DotSegment),
        ("..".into(), IdProblem::DotSegment),
    ]
}

fn refused_as(result: Result<impl Sized, RunError>, kind: IdKind, problem: &IdProblem, what: &str) {
    match result {
        Err(RunError::InvalidId(err)) => assert_eq!((err.kind, &err.problem), (kind, problem), "{what}"),
        Err(other) => panic!("{what}: expected InvalidId, got {other}"),
        Ok(_) => panic!("{what}: accepted"),
    }
}

#[tokio::test]
async fn a_run_id_outside_the_rule_is_refused_and_no_run_is_stored() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let agent = agent_with(CountingModel::new(ASK), store.clone());
    for (id, problem) in bad_ids() {
        let started = agent
            .stream_with("Deploy", StreamOptions::with_run_id(id.clone()))
            .await;
        refused_as(started, IdKind::Run, &problem, &format!("{id:?}"));
    }
    assert!(store.list(&RunQuery::default()).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_thread_id_outside_the_rule_is_refused_and_no_run_is_stored() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let agent = agent_with(CountingModel::new(ASK), store.clone());
    for (id, problem) in bad_ids() {
        let started = agent
            .stream_with("Deploy", StreamOptions::default().thread_id(id.clone()))
            .await;
        refused_as(started, IdKind::Thread, &problem, &format!("{id:?}"));
    }
    assert!(store.list(&RunQuery::default()).await.unwrap().is_empty());
}

#[tokio::test]
async fn ids_with_spaces_slashes_marks_and_other_scripts_are_kept_exactly() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let agent = agent_with(CountingModel::new(ASK), store.clone());
    for id in ["a b/c?d#e<x>", "運行 1", "...", &"é".repeat(MAX_ID_BYTES / 2)] {
        let options = StreamOptions::with_run_id(id).thread_id(id);
        let output = agent.stream_with("Deploy", options).await.unwrap().output().await;
        assert_eq!((output.run_id.as_str(), output.status), (id, RunStatus::Suspended));
        let stored = agent.get_run(id).await.unwrap();
        assert_eq!(stored.thread_id.as_deref(), Some(id));
        agent
            .resume_stream("staging", ResumeOptions::run(id))
            .await
            .unwrap()
            .output()
            .await;
        assert_eq!(agent.get_run(id).await.unwrap().status(), RunStatus::Completed);
    }
}

#[tokio::test]
async fn every_operation_on_a_run_refuses_an_id_outside_the_rule() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let agent = agent_with(CountingModel::new(ASK), store.clone());
    for (id, problem) in bad_ids() {
        let what = |op: &str| format!("{op} {id:?}");
        refused_as(
            agent.resume_stream("staging", ResumeOptions::run(&id)).await,
            IdKind::Run,
            &problem,
            &what("resume"),
        );
        refused_as(
            agent.approve_tool_call(ResumeOptions::run(&id)).await,
            IdKind::Run,
            &problem,
            &what("approve"),
        );
        refused_as(
            agent.decline_tool_call(ResumeOptions::run(&id)).await,
            IdKind::Run,
            &problem,
            &what("decline"),
        );
        refused_as(
            agent.cancel_run(&id, askloop::Author::default()).await,
            IdKind::Run,
            &problem,
            &what("cancel"),
        );
        refused_as(agent.get_run(&id).await, IdKind::Run, &problem, &what("get"));
        refused_as(
            agent.retry_run(&id, askloop::Author::default()).await,
            IdKind::Run,
            &problem,
            &what("retry"),
        );
        refused_as(
            agent.recover_run(&id, askloop::Author::default()).await,
            IdKind::Run,
            &problem,
            &what("recover"),
        );
    }
}

#[tokio::test]
async fn a_run_stored_before_the_rule_with_an_id_outside_it_still_expires() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let agent = agent_with(CountingModel::new(ASK), store.clone());
    let call = ToolCall {
        id: "call_1".into(),
        name: "ask_user".into(),
        args: json!({"question": "Which environment?"}).into(),
    };
    let expired_at = Utc::now() - chrono::Duration::seconds(1);
    let legacy = {
        let mut record = RunRecord::default().with_calls(
            RunStatus::Suspended,
            vec![PendingToolCall {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                args: call.args.clone(),
                kind: PendingKind::Suspended,
                suspend_payload: Some(call.args.clone()),
                resume_schema: None,
                expires_at: Some(expired_at),
                started_at: None,
            }],
        );
        record.run_id = "legacy ".into();
        record.agent_id = agent.id().to_owned();
        record.created_at = expired_at;
        record.updated_at = expired_at;
        record.message_count = 2;
        record.steps = 1;
        record
    };
    let messages = [Message::user("Deploy"), Message::assistant("", vec![call])];
    store.create(&legacy, &messages).await.unwrap();

    let streams = agent.expire_runs(Author::default()).await.unwrap();
    assert_eq!(streams.len(), 1, "the sweep found it by the id it read from the store");
    for stream in streams {
        assert_eq!(stream.output().await.status, RunStatus::Completed);
    }
    let stored = store.get("legacy ").await.unwrap().unwrap();
    assert_eq!(stored.resolutions[0].kind, askloop::ResolutionKind::Expired);
}

//! `AskUserLimits`: too many options and too many questions in one step are
//! refused to the model (which is told the limit), an answer too large is
//! refused to the person and the question stays open.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use askloop::{
    Agent, AskUser, AskUserLimits, MemoryStore, ResumeOptions, RunError, RunStatus, RunStore, ScriptedModel,
};
use serde_json::json;

fn agent(script: serde_json::Value, limits: AskUserLimits) -> (Agent, Arc<dyn RunStore>) {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let model = ScriptedModel::from_json("limits", &script.to_string()).unwrap();
    let agent = Agent::builder("limits")
        .model(Arc::new(model))
        .tool(AskUser::new().limits(limits))
        .store(Arc::clone(&store))
        .build()
        .unwrap();
    (agent, store)
}

fn ask(question: &str, labels: &[&str]) -> serde_json::Value {
    let options: Vec<_> = labels.iter().map(|l| json!({"label": l})).collect();
    json!({"name": "ask_user", "args": {"question": question, "options": options}})
}

#[tokio::test]
async fn a_question_with_more_options_than_the_limit_is_refused_to_the_model_with_the_limit() {
    let limits = AskUserLimits {
        max_options: 2,
        ..AskUserLimits::default()
    };
    let script = json!({"turns": [{"toolCalls": [ask("Which?", &["a", "b", "c"])]}, {"text": "{{toolResults}}"}]});
    let (agent, _) = agent(script, limits);
    let output = agent.generate("go").await.unwrap();
    assert_eq!(output.status, RunStatus::Completed);
    assert!(output.pending.is_empty());
    assert!(
        output.text.contains("3 options were given; at most 2"),
        "{}",
        output.text
    );
}

#[tokio::test]
async fn questions_past_the_per_step_limit_are_not_asked_and_the_model_is_told() {
    let limits = AskUserLimits {
        max_questions_per_step: 2,
        ..AskUserLimits::default()
    };
    let calls = vec![
        ask("One?", &["a", "b"]),
        ask("Two?", &["a", "b"]),
        ask("Three?", &["a", "b"]),
    ];
    let script = json!({"turns": [{"toolCalls": calls}, {"text": "{{toolResults}}"}]});
    let (agent, _) = agent(script, limits);
    let output = agent.generate("go").await.unwrap();
    assert_eq!(output.status, RunStatus::Suspended);
    let asked: Vec<_> = output
        .pending
        .iter()
        .map(|p| {
            p.suspend_payload.as_ref().unwrap()["question"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(asked, ["One?", "Two?"]);
    let first = output.pending[0].tool_call_id.clone();
    let second = output.pending[1].tool_call_id.clone();
    agent
        .resume_stream(json!("a"), ResumeOptions::call(&output.run_id, &first))
        .await
        .unwrap()
        .output()
        .await;
    let done = agent
        .resume_stream(json!("b"), ResumeOptions::call(&output.run_id, &second))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(done.status, RunStatus::Completed);
    assert!(done.text.contains("at most 2 calls of ask_user"), "{}", done.text);
}

#[tokio::test]
async fn an_answer_larger_than_the_limit_is_refused_and_the_question_stays_open() {
    let limits = AskUserLimits {
        max_answer_bytes: 64,
        ..AskUserLimits::default()
    };
    let script = json!({"turns": [{"toolCalls": [{"name": "ask_user", "args": {"question": "Why?"}}]}, {"text": "{{toolResults}}"}]});
    let (agent, store) = agent(script, limits);
    let output = agent.generate("go").await.unwrap();
    let long = "x".repeat(100);
    let err = agent
        .resume_stream(json!(long), ResumeOptions::run(&output.run_id))
        .await
        .unwrap_err();
    let RunError::InvalidAnswer { reason, .. } = &err else {
        panic!("expected InvalidAnswer, got {err:?}")
    };
    assert!(reason.contains("102 bytes; at most 64"), "{reason}");
    let stored = store.get(&output.run_id).await.unwrap().unwrap();
    assert_eq!(stored.status(), RunStatus::Suspended);
    let done = agent
        .resume_stream(json!("short"), ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(done.text, "User answered: short");
}

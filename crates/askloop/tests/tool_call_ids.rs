//! Tool call ids are unique within a step, whatever the model sent: two
//! questions under one id are two questions, each answered on its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use askloop::{ChunkKind, MemoryStore, Message, ResumeOptions, RunStatus, RunStore};
use common::*;
use serde_json::json;

fn setup(script: &str) -> (askloop::Agent, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    (agent_with(CountingModel::new(script), store.clone()), store)
}

/// The ids named by every chunk that names a tool call, by chunk type.
fn chunk_ids(chunks: &[askloop::Chunk], type_name: &str) -> Vec<String> {
    chunks
        .iter()
        .filter(|c| c.type_name() == type_name)
        .map(|c| {
            let value = serde_json::to_value(c).unwrap();
            value["payload"]["toolCallId"].as_str().unwrap().to_owned()
        })
        .collect()
}

const TWO_WITH_ONE_ID: &str = r#"{"turns": [
  {"toolCalls": [
    {"id": "dup", "name": "ask_user", "args": {"question": "Where?"}},
    {"id": "dup", "name": "ask_user", "args": {"question": "When?"}}
  ]},
  {"text": "Got: {{toolResults}}"}
]}"#;

#[tokio::test]
async fn two_questions_with_one_id_get_distinct_ids_and_keep_their_own_answers() {
    let (agent, store) = setup(TWO_WITH_ONE_ID);
    let (chunks, output) = run(&agent, "Plan a trip").await;
    assert_eq!(output.status, RunStatus::Suspended);
    let ids = suspended_ids(&chunks);
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "each question has its own id");
    assert_eq!(ids[0], "dup", "the model's id is kept where it is unique");
    for type_name in [
        "tool-call-input-streaming-start",
        "tool-call-input-streaming-end",
        "tool-call",
    ] {
        assert_eq!(chunk_ids(&chunks, type_name), ids, "{type_name}");
    }
    // Every delta names the call whose input it carries.
    let deltas: Vec<(String, String)> = chunks
        .iter()
        .filter_map(|c| match &c.kind {
            ChunkKind::ToolCallDelta(d) => Some((d.tool_call_id.clone(), d.args_text_delta.clone())),
            _ => None,
        })
        .collect();
    for (id, question) in ids.iter().zip(["Where?", "When?"]) {
        let text: String = deltas
            .iter()
            .filter(|(d, _)| d == id)
            .map(|(_, t)| t.as_str())
            .collect();
        assert_eq!(text, json!({"question": question}).to_string());
    }
    let questions: Vec<_> = output.pending.iter().map(|p| p.args["question"].clone()).collect();
    assert_eq!(questions, [json!("Where?"), json!("When?")]);

    let first = agent
        .resume_stream("Kyoto", ResumeOptions::call(&output.run_id, &ids[0]))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(first.status, RunStatus::Suspended);
    assert_eq!(first.pending.len(), 1);
    assert_eq!(first.pending[0].tool_call_id, ids[1]);
    let done = agent
        .resume_stream("Monday", ResumeOptions::call(&output.run_id, &ids[1]))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error());
    // What the model received next: each answer once, in call order.
    assert_eq!(done.text, "Got: User answered: Kyoto; User answered: Monday");

    let messages = store.messages(&output.run_id).await.unwrap();
    let Message::Assistant { tool_calls, .. } = &messages[1] else {
        panic!("expected the assistant's calls, got {:?}", messages[1])
    };
    let call_ids: Vec<&str> = tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(call_ids, ids);
    let stored: Vec<(String, String)> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(result) => Some((result.tool_call_id.clone(), result.content.to_model_text())),
            _ => None,
        })
        .collect();
    assert_eq!(
        stored,
        [
            (ids[0].clone(), "User answered: Kyoto".to_owned()),
            (ids[1].clone(), "User answered: Monday".to_owned())
        ]
    );
}

#[tokio::test]
async fn calls_without_ids_get_distinct_ids_the_provider_pattern_accepts() {
    let script = r#"{"turns": [
      {"toolCalls": [
        {"id": "", "name": "ask_user", "args": {"question": "A?"}},
        {"id": "", "name": "ask_user", "args": {"question": "B?"}},
        {"id": "call 1!", "name": "ask_user", "args": {"question": "C?"}},
        {"id": "call 1!", "name": "ask_user", "args": {"question": "D?"}}
      ]},
      {"text": "Got: {{toolResults}}"}
    ]}"#;
    let (agent, _) = setup(script);
    let (chunks, output) = run(&agent, "x").await;
    let ids = suspended_ids(&chunks);
    assert_eq!(ids.len(), 4);
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 4, "{ids:?}");
    // Fresh ids fit Anthropic's `^[a-zA-Z0-9_-]+$` and OpenAI's 40 characters.
    for id in &ids[..2] {
        assert!(!id.is_empty() && id.len() <= 40, "{id}");
        assert!(
            id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{id}"
        );
    }
    assert_eq!(ids[2], "call 1!", "a unique id is the model's own");
    assert!(
        ids[3]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
        "{}",
        ids[3]
    );
    let mut last = None;
    for (id, answer) in ids.iter().zip(["a", "b", "c", "d"]) {
        let out = agent
            .resume_stream(answer, ResumeOptions::call(&output.run_id, id))
            .await
            .unwrap()
            .output()
            .await;
        last = Some(out);
    }
    let done = last.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error());
    assert_eq!(
        done.text,
        "Got: User answered: a; User answered: b; User answered: c; User answered: d"
    );
}

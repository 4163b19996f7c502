//! ask_user inside agent runs: the three prompt shapes, answers checked
//! against the question, decline and cancel, several questions in one step.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use askloop::{ChunkKind, MemoryStore, ResumeOptions, RunError, RunStatus, RunStore};
use common::*;
use serde_json::{Value, json};

const FREE_TEXT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which repo?"}}]},
  {"text": "Done: {{toolResults}}"}
]}"#;

const SINGLE: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?", "options": [{"label": "staging"}, {"label": "production", "description": "careful"}]}}]},
  {"text": "Deploying: {{toolResults}}"}
]}"#;

const MULTI: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "What next?", "options": [{"label": "Add tests"}, {"label": "Update docs"}, {"label": "Refactor"}], "selectionMode": "multi_select"}}]},
  {"text": "Plan: {{toolResults}}"}
]}"#;

fn setup(script: &str) -> (askloop::Agent, Arc<CountingModel>, Arc<MemoryStore>) {
    let model = CountingModel::new(script);
    let store = Arc::new(MemoryStore::new());
    (agent_with(model.clone(), store.clone()), model, store)
}

fn suspend_payload(chunks: &[askloop::Chunk]) -> Value {
    chunks
        .iter()
        .find_map(|c| match &c.kind {
            ChunkKind::ToolCallSuspended(s) => Some(Value::clone(&s.suspend_payload)),
            _ => None,
        })
        .expect("a tool-call-suspended chunk")
}

#[tokio::test]
async fn free_text_question_suspends_with_question_and_no_mode() {
    let (agent, _, _) = setup(FREE_TEXT);
    let (chunks, output) = run(&agent, "Summarize my project").await;
    assert_eq!(suspend_payload(&chunks), json!({"question": "Which repo?"}));
    assert_eq!(output.status, RunStatus::Suspended);
    assert_eq!(output.finish_reason, askloop::FinishReason::Suspended);
    assert_eq!(output.pending.len(), 1);
}

#[tokio::test]
async fn single_select_question_defaults_mode_and_keeps_descriptions() {
    let (agent, _, _) = setup(SINGLE);
    let (chunks, _) = run(&agent, "Deploy").await;
    assert_eq!(
        suspend_payload(&chunks),
        json!({"question": "Which environment?", "options": [{"label": "staging"}, {"label": "production", "description": "careful"}], "selectionMode": "single_select"})
    );
}

#[tokio::test]
async fn suspended_chunk_carries_a_resume_schema_listing_the_labels() {
    let (agent, _, _) = setup(SINGLE);
    let (chunks, _) = run(&agent, "Deploy").await;
    let schema = chunks
        .iter()
        .find_map(|c| match &c.kind {
            ChunkKind::ToolCallSuspended(s) => s.resume_schema.clone(),
            _ => None,
        })
        .unwrap();
    let schema: Value = serde_json::from_str(&schema).unwrap();
    assert_eq!(schema["enum"], json!(["staging", "production"]));
}

#[tokio::test]
async fn multi_select_answer_reaches_the_model_joined_with_commas() {
    let (agent, model, _) = setup(MULTI);
    let (chunks, output) = run(&agent, "Plan").await;
    assert_eq!(suspend_payload(&chunks)["selectionMode"], "multi_select");
    let resumed = agent
        .resume_stream(json!(["Add tests", "Update docs"]), ResumeOptions::run(&output.run_id))
        .await
        .unwrap();
    let output = resumed.output().await;
    assert_eq!(output.status, RunStatus::Completed);
    assert_eq!(output.text, "Plan: User answered: Add tests, Update docs");
    assert_eq!(model.calls(), 2);
}

#[tokio::test]
async fn selection_mode_without_options_is_an_error_result_the_model_sees_and_no_suspension() {
    let script = r#"{"turns": [
      {"toolCalls": [{"name": "ask_user", "args": {"question": "Q?", "selectionMode": "multi_select"}}]},
      {"text": "Model saw: {{toolResults}}"}
    ]}"#;
    let (agent, _, _) = setup(script);
    let (chunks, output) = run(&agent, "x").await;
    assert!(!types(&chunks).contains(&"tool-call-suspended"));
    let result = chunks
        .iter()
        .find_map(|c| match &c.kind {
            ChunkKind::ToolResult(r) => Some(r.result.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        result,
        json!({"content": "Failed to ask user: selectionMode requires options.", "isError": true})
    );
    assert_eq!(output.status, RunStatus::Completed);
    assert_eq!(
        output.text,
        "Model saw: Failed to ask user: selectionMode requires options."
    );
}

/// Every way an answer can be wrong is refused before anything is written;
/// the run stays suspended and a good answer still works afterwards.
#[tokio::test]
async fn invalid_answers_are_rejected_and_the_run_stays_suspended_and_answerable() {
    let cases: &[(&str, Vec<Value>, Value)] = &[
        (
            SINGLE,
            vec![json!("qa"), json!(["staging"]), json!(""), json!(3), json!(null)],
            json!("staging"),
        ),
        (
            MULTI,
            vec![
                json!("Add tests"),
                json!([]),
                json!(["Add tests", "Add tests"]),
                json!(["Nope"]),
                json!([1]),
            ],
            json!(["Refactor"]),
        ),
        (
            FREE_TEXT,
            vec![json!(""), json!("   "), json!(["a"]), json!({"a": 1})],
            json!("main"),
        ),
    ];
    for (script, bad_answers, good) in cases {
        let (agent, model, store) = setup(script);
        let (_, output) = run(&agent, "x").await;
        let before = store.get(&output.run_id).await.unwrap().unwrap();
        let messages_before = store.messages(&output.run_id).await.unwrap();
        for bad in bad_answers {
            let err = agent
                .resume_stream(bad.clone(), ResumeOptions::run(&output.run_id))
                .await
                .expect_err("a bad answer must be refused");
            let RunError::InvalidAnswer {
                run_id, tool_call_id, ..
            } = &err
            else {
                panic!("expected InvalidAnswer for {bad}, got {err:?}")
            };
            assert_eq!(run_id, &output.run_id);
            assert_eq!(tool_call_id, &before.stored_calls()[0].tool_call_id);
            assert_eq!(
                store.get(&output.run_id).await.unwrap().unwrap(),
                before,
                "run changed after {bad}"
            );
            assert_eq!(store.messages(&output.run_id).await.unwrap(), messages_before);
        }
        let resumed = agent
            .resume_stream(good.clone(), ResumeOptions::run(&output.run_id))
            .await
            .unwrap();
        assert_eq!(resumed.output().await.status, RunStatus::Completed);
        assert_eq!(model.calls(), 2);
    }
}

#[tokio::test]
async fn rejected_single_select_answer_names_the_accepted_labels() {
    let (agent, _, _) = setup(SINGLE);
    let (_, output) = run(&agent, "x").await;
    let err = agent
        .resume_stream("qa", ResumeOptions::run(&output.run_id))
        .await
        .unwrap_err();
    let RunError::InvalidAnswer { accepted, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        accepted.as_deref(),
        Some(&["staging".to_string(), "production".to_string()][..])
    );
    let message = err.to_string();
    assert!(
        message.contains("\"staging\"") && message.contains("\"production\""),
        "{message}"
    );
}

#[tokio::test]
async fn free_text_outside_labels_is_accepted_when_the_host_allows_it() {
    let model = CountingModel::new(SINGLE);
    let agent = askloop::Agent::builder("a")
        .model(model)
        .tool(askloop::AskUser::new().allow_free_text_answers(true))
        .build()
        .unwrap();
    let (_, output) = run(&agent, "x").await;
    let resumed = agent
        .resume_stream("qa", ResumeOptions::run(&output.run_id))
        .await
        .unwrap();
    assert_eq!(resumed.output().await.text, "Deploying: User answered: qa");
}

#[tokio::test]
async fn declining_a_question_tells_the_model_with_the_reason_and_the_run_goes_on() {
    let (agent, model, _) = setup(FREE_TEXT);
    let (_, output) = run(&agent, "x").await;
    let resumed = agent
        .decline_tool_call(ResumeOptions::run(&output.run_id).reason("not now"))
        .await
        .unwrap();
    let (chunks, output) = resumed.output_with_chunks().await;
    assert_eq!(types(&chunks)[0], "tool-result");
    assert_eq!(output.status, RunStatus::Completed);
    assert_eq!(output.text, "Done: The user declined to answer: not now");
    assert_eq!(model.calls(), 2);
}

#[tokio::test]
async fn cancelling_a_suspended_run_stops_it_without_calling_the_model() {
    let (agent, model, store) = setup(FREE_TEXT);
    let (_, output) = run(&agent, "x").await;
    agent
        .cancel_run(&output.run_id, askloop::Author::default())
        .await
        .unwrap();
    let stored = store.get(&output.run_id).await.unwrap().unwrap();
    assert_eq!(stored.status(), RunStatus::Cancelled);
    assert!(stored.stored_calls().is_empty());
    let err = agent
        .resume_stream("main", ResumeOptions::run(&output.run_id))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            RunError::NotSuspended {
                status: RunStatus::Cancelled,
                ..
            }
        ),
        "{err:?}"
    );
    let again = agent
        .cancel_run(&output.run_id, askloop::Author::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            again,
            RunError::Finished {
                status: RunStatus::Cancelled,
                ..
            }
        ),
        "{again:?}"
    );
    assert_eq!(
        again.to_string(),
        format!(
            "run {} is already cancelled; only a suspended or running run can be cancelled",
            output.run_id
        )
    );
    assert_eq!(model.calls(), 1);
}

#[tokio::test]
async fn resuming_an_unknown_run_is_a_typed_error_naming_it() {
    let (agent, _, _) = setup(FREE_TEXT);
    let err = agent
        .resume_stream("x", ResumeOptions::run("no-such-run"))
        .await
        .unwrap_err();
    assert!(matches!(&err, RunError::UnknownRun { run_id } if run_id == "no-such-run"));
    assert!(err.to_string().contains("no-such-run"));
}

#[tokio::test]
async fn another_agent_on_the_same_store_cannot_read_answer_or_cancel_the_run() {
    let (agent, model, store) = setup(FREE_TEXT);
    let (_, output) = run(&agent, "Summarize my project").await;
    let other = askloop::Agent::builder("reviewer")
        .model(model.clone())
        .tool(askloop::AskUser::new())
        .store(store.clone())
        .build()
        .unwrap();
    let before = store.get(&output.run_id).await.unwrap().unwrap();
    let refusals = [
        other.get_run(&output.run_id).await.map(|_| ()),
        other
            .resume_stream("main", ResumeOptions::run(&output.run_id))
            .await
            .map(|_| ()),
        other
            .decline_tool_call(ResumeOptions::run(&output.run_id))
            .await
            .map(|_| ()),
        other.cancel_run(&output.run_id, askloop::Author::default()).await,
        other
            .retry_run(&output.run_id, askloop::Author::default())
            .await
            .map(|_| ()),
    ];
    for refused in refusals {
        let err = refused.unwrap_err();
        assert!(
            matches!(&err, RunError::OtherAgent { run_id, agent_id, owner }
                if *run_id == output.run_id && agent_id == "reviewer" && owner == "assistant"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains("a run of agent assistant, not of agent reviewer"),
            "{err}"
        );
    }
    assert_eq!(
        store.get(&output.run_id).await.unwrap().unwrap(),
        before,
        "nothing written"
    );
    assert_eq!(model.calls(), 1, "the other agent's model was never called");
    // Its own agent still answers it.
    let done = agent
        .resume_stream("main", ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(done.status, RunStatus::Completed);
}

#[tokio::test]
async fn resuming_a_completed_run_is_refused_and_changes_nothing() {
    let (agent, model, store) = setup(FREE_TEXT);
    let (_, output) = run(&agent, "x").await;
    agent
        .resume_stream("main", ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output()
        .await;
    let before = store.get(&output.run_id).await.unwrap().unwrap();
    let err = agent
        .resume_stream("main", ResumeOptions::run(&output.run_id))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            RunError::NotSuspended {
                status: RunStatus::Completed,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(store.get(&output.run_id).await.unwrap().unwrap(), before);
    assert_eq!(model.calls(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_resumes_of_one_run_exactly_one_wins() {
    let (agent, model, _) = setup(FREE_TEXT);
    let (_, output) = run(&agent, "x").await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let agent = agent.clone();
        let run_id = output.run_id.clone();
        tasks.push(tokio::spawn(async move {
            agent
                .resume_stream(format!("answer {i}"), ResumeOptions::run(run_id))
                .await
        }));
    }
    let mut winners = Vec::new();
    let mut losers = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(stream) => winners.push(stream.output().await),
            Err(RunError::Conflict { .. } | RunError::NotSuspended { .. }) => losers += 1,
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one resume must win");
    assert_eq!(losers, 7);
    assert_eq!(winners[0].status, RunStatus::Completed);
    assert_eq!(model.calls(), 2, "the model is called once more, by the winner only");
}

const THREE_QUESTIONS: &str = r#"{"turns": [
  {"toolCalls": [
    {"name": "ask_user", "args": {"question": "Name?"}},
    {"name": "ask_user", "args": {"question": "Colour?", "options": [{"label": "red"}, {"label": "blue"}]}},
    {"name": "ask_user", "args": {"question": "Extras?", "options": [{"label": "a"}, {"label": "b"}], "selectionMode": "multi_select"}}
  ]},
  {"text": "Got: {{toolResults}}"}
]}"#;

#[tokio::test]
async fn three_questions_in_one_step_answered_in_reverse_order_call_the_model_once_after_the_last() {
    let (agent, model, store) = setup(THREE_QUESTIONS);
    let (chunks, output) = run(&agent, "x").await;
    let ids = suspended_ids(&chunks);
    assert_eq!(ids.len(), 3);
    assert_eq!(output.pending.len(), 3);

    let answers = [json!("Ada"), json!("blue"), json!(["a", "b"])];
    for (i, answer) in answers.iter().enumerate().rev() {
        let stream = agent
            .resume_stream(answer.clone(), ResumeOptions::call(&output.run_id, &ids[i]))
            .await
            .unwrap();
        let (chunks, out) = stream.output_with_chunks().await;
        assert_eq!(
            types(&chunks)[0],
            "tool-result",
            "a resumed stream starts with its tool-result"
        );
        if i > 0 {
            assert_eq!(out.status, RunStatus::Suspended);
            // The stream names what is still pending, as chunks and in its output.
            let still: Vec<String> = ids[..i].to_vec();
            assert_eq!(suspended_ids(&chunks), still);
            assert_eq!(
                out.pending.iter().map(|p| p.tool_call_id.clone()).collect::<Vec<_>>(),
                still
            );
            assert_eq!(model.calls(), 1, "the model waits for every answer");
        } else {
            assert_eq!(out.status, RunStatus::Completed);
            assert_eq!(
                out.text,
                "Got: User answered: Ada; User answered: blue; User answered: a, b"
            );
        }
    }
    assert_eq!(model.calls(), 2);
    // The tool results were appended once, in call order.
    let messages = store.messages(&output.run_id).await.unwrap();
    assert_eq!(messages.len(), 1 + 1 + 3 + 1);
}

#[tokio::test]
async fn resume_without_tool_call_id_while_several_are_pending_lists_them() {
    let (agent, _, store) = setup(THREE_QUESTIONS);
    let (chunks, output) = run(&agent, "x").await;
    let before = store.get(&output.run_id).await.unwrap().unwrap();
    let err = agent
        .resume_stream("Ada", ResumeOptions::run(&output.run_id))
        .await
        .unwrap_err();
    let RunError::AmbiguousResume { pending, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(pending, &suspended_ids(&chunks));
    for id in pending {
        assert!(err.to_string().contains(id.as_str()));
    }
    assert_eq!(store.get(&output.run_id).await.unwrap().unwrap(), before);
}

#[tokio::test]
async fn resume_of_a_tool_call_that_is_not_pending_lists_the_pending_ones() {
    let (agent, _, _) = setup(FREE_TEXT);
    let (chunks, output) = run(&agent, "x").await;
    let err = agent
        .resume_stream("a", ResumeOptions::call(&output.run_id, "call_nope"))
        .await
        .unwrap_err();
    assert!(matches!(&err, RunError::ToolCallNotPending { pending, .. } if pending == &suspended_ids(&chunks)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_answers_to_different_questions_of_one_step_both_land() {
    let (agent, model, _) = setup(THREE_QUESTIONS);
    let (chunks, output) = run(&agent, "x").await;
    let ids = suspended_ids(&chunks);
    let answers = [json!("Ada"), json!("red"), json!(["b"])];
    let mut tasks = Vec::new();
    for (id, answer) in ids.iter().zip(answers) {
        let agent = agent.clone();
        let options = ResumeOptions::call(&output.run_id, id);
        tasks.push(tokio::spawn(async move {
            agent
                .resume_stream(answer, options)
                .await
                .map(|s| async { s.output().await })
        }));
    }
    let mut completed = 0;
    for task in tasks {
        let stream = task
            .await
            .unwrap()
            .expect("an answer to a different pending call must land");
        if stream.await.status == RunStatus::Completed {
            completed += 1;
        }
    }
    let stored = agent.get_run(&output.run_id).await.unwrap();
    assert_eq!(stored.status(), RunStatus::Completed);
    assert_eq!(completed, 1, "exactly one answer completes the step");
    assert_eq!(model.calls(), 2, "the model is called once, after the last answer");
}

/// Runs a script whose first turn calls `ask_user` with `args`; returns the
/// `tool-error` message and what the model saw next.
async fn refused_question(args: Value) -> (String, String) {
    let script = json!({"turns": [
        {"toolCalls": [{"name": "ask_user", "args": args}]},
        {"text": "Model saw: {{toolResults}}"}
    ]})
    .to_string();
    let (agent, _, _) = setup(&script);
    let (chunks, output) = run(&agent, "x").await;
    assert!(!types(&chunks).contains(&"tool-call-suspended"), "{:?}", types(&chunks));
    assert_eq!(output.status, RunStatus::Completed);
    let error = tool_errors(&chunks).into_iter().next().expect("a tool-error chunk");
    (error, output.text)
}

#[tokio::test]
async fn an_option_with_a_blank_label_is_refused_and_the_model_is_told_why() {
    let (error, seen) =
        refused_question(json!({"question": "Env?", "options": [{"label": "staging"}, {"label": " "}]})).await;
    assert!(error.contains("option 2 has an empty label"), "{error}");
    assert_eq!(seen, format!("Model saw: {error}"));
}

#[tokio::test]
async fn unknown_keys_in_ask_user_input_are_refused_and_the_model_is_told_which() {
    let (error, seen) = refused_question(json!({"question": "Env?", "urgent": true})).await;
    assert!(error.contains("urgent"), "{error}");
    assert_eq!(seen, format!("Model saw: {error}"));
}

/// The rest of the run after `data` answers as `options` say.
async fn answered(agent: &askloop::Agent, data: impl Into<Value>, options: ResumeOptions) -> askloop::StreamOutput {
    agent.resume_stream(data, options).await.unwrap().output().await
}

/// A fresh agent on a store that counts its reads, with `script`.
fn counted(script: &str) -> (askloop::Agent, Arc<FlakyStore>) {
    let store = flaky_store();
    (agent_with(CountingModel::new(script), store.clone()), store)
}

#[tokio::test]
async fn a_resume_from_the_callers_read_of_the_run_reads_it_once_less() {
    let mut reads = Vec::new();
    for from_read in [false, true] {
        let (agent, store) = counted(FREE_TEXT);
        let (_, output) = run(&agent, "x").await;
        let read = store.get(&output.run_id).await.unwrap().unwrap();
        let options = ResumeOptions::run(&output.run_id);
        let options = if from_read { options.from_read(read) } else { options };
        let before = store.layer().run_reads.load(Ordering::SeqCst);
        let out = answered(&agent, "main", options).await;
        assert_eq!(out.status, RunStatus::Completed);
        assert_eq!(out.text, "Done: User answered: main");
        reads.push(store.layer().run_reads.load(Ordering::SeqCst) - before);
    }
    assert_eq!(reads[1] + 1, reads[0], "reads without and with the caller's: {reads:?}");
}

#[tokio::test]
async fn a_resume_from_an_out_of_date_read_reads_the_run_again_and_loses_no_answer() {
    let (agent, store) = counted(THREE_QUESTIONS);
    let (chunks, output) = run(&agent, "x").await;
    let ids = suspended_ids(&chunks);
    let stale = store.get(&output.run_id).await.unwrap().unwrap();
    let fresh = store.get(&output.run_id).await.unwrap().unwrap();
    let reads = || store.layer().run_reads.load(Ordering::SeqCst);
    // Another question of the step is answered after the reads, from the
    // fresh one.
    let before = reads();
    let out = answered(
        &agent,
        "blue",
        ResumeOptions::call(&output.run_id, &ids[1]).from_read(fresh),
    )
    .await;
    assert_eq!(out.status, RunStatus::Suspended);
    let from_fresh = reads() - before;
    let before = reads();
    let out = answered(
        &agent,
        "Ada",
        ResumeOptions::call(&output.run_id, &ids[0]).from_read(stale),
    )
    .await;
    assert_eq!(out.status, RunStatus::Suspended);
    assert!(
        reads() - before > from_fresh,
        "the out-of-date read is read again: {} reads against {from_fresh}",
        reads() - before
    );
    assert_eq!(
        out.pending.iter().map(|p| p.tool_call_id.as_str()).collect::<Vec<_>>(),
        [ids[2].as_str()]
    );
    let out = answered(&agent, json!(["a", "b"]), ResumeOptions::call(&output.run_id, &ids[2])).await;
    assert_eq!(
        out.text,
        "Got: User answered: Ada; User answered: blue; User answered: a, b"
    );
    // Each tool result once.
    assert_eq!(store.messages(&output.run_id).await.unwrap().len(), 1 + 1 + 3 + 1);
}

#[tokio::test]
async fn a_resume_from_a_read_taken_before_the_question_was_answered_loses_as_a_concurrent_one_would() {
    let (agent, store) = counted(FREE_TEXT);
    let (_, output) = run(&agent, "x").await;
    let stale = store.get(&output.run_id).await.unwrap().unwrap();
    answered(&agent, "main", ResumeOptions::run(&output.run_id)).await;
    let before = store.get(&output.run_id).await.unwrap().unwrap();
    let err = agent
        .resume_stream("dev", ResumeOptions::run(&output.run_id).from_read(stale))
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::Conflict { .. }), "{err:?}");
    assert_eq!(store.get(&output.run_id).await.unwrap().unwrap(), before);
}

#[tokio::test]
async fn a_resume_handed_another_runs_record_reads_its_own_run() {
    let (agent, store) = counted(FREE_TEXT);
    let (_, first) = run(&agent, "x").await;
    let (_, second) = run(&agent, "y").await;
    let other = store.get(&first.run_id).await.unwrap().unwrap();
    let before = store.layer().run_reads.load(Ordering::SeqCst);
    let out = answered(&agent, "main", ResumeOptions::run(&second.run_id).from_read(other)).await;
    assert!(
        store.layer().run_reads.load(Ordering::SeqCst) > before,
        "its own run is read"
    );
    assert_eq!(out.run_id, second.run_id);
    assert_eq!(out.status, RunStatus::Completed);
    let first_now = store.get(&first.run_id).await.unwrap().unwrap();
    assert_eq!(first_now.status(), RunStatus::Suspended, "the other run is untouched");
}

//! The agent loop: chunk order, tools, approval, failures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use askloop::{
    Agent, AskUser, ChunkKind, FunctionTool, MemoryStore, Message, ResumeOptions, RunError, RunStatus, RunStore,
    ToolError, ToolOutput,
};
use common::*;
use serde::Deserialize;
use serde_json::json;

const ASK_THEN_ANSWER: &str = r#"{"turns": [
  {"text": "Let me ask.", "toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?", "options": [{"label": "staging"}, {"label": "production"}]}}]},
  {"text": "Deploying to {{toolResults}}."}
]}"#;

#[tokio::test]
async fn fresh_stream_chunk_order_ends_with_suspension_and_no_finish() {
    let agent = agent_with(CountingModel::new(ASK_THEN_ANSWER), Arc::new(MemoryStore::new()));
    let (chunks, _) = run(&agent, "Deploy").await;
    let types = types(&chunks);
    let expected_prefix = ["start", "step-start", "text-start"];
    assert_eq!(&types[..3], expected_prefix);
    let after_text: Vec<&str> = types.iter().copied().skip_while(|t| *t != "text-end").collect();
    assert_eq!(after_text[0], "text-end");
    assert_eq!(after_text[1], "tool-call-input-streaming-start");
    assert!(after_text[2..].iter().take_while(|t| **t == "tool-call-delta").count() >= 1);
    assert_eq!(
        &types[types.len() - 3..],
        ["tool-call-input-streaming-end", "tool-call", "tool-call-suspended"]
    );
    assert!(!types.contains(&"finish") && !types.contains(&"step-finish"));
    assert!(chunks.iter().all(|c| c.run_id == chunks[0].run_id));
}

#[tokio::test]
async fn resumed_stream_starts_with_tool_result_and_finishes() {
    let agent = agent_with(CountingModel::new(ASK_THEN_ANSWER), Arc::new(MemoryStore::new()));
    let (_, output) = run(&agent, "Deploy").await;
    let (chunks, out) = agent
        .resume_stream("staging", ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output_with_chunks()
        .await;
    let types = types(&chunks);
    assert_eq!(&types[..4], ["tool-result", "step-finish", "step-start", "text-start"]);
    assert_eq!(&types[types.len() - 3..], ["text-end", "step-finish", "finish"]);
    assert!(!types.contains(&"start") && !types.contains(&"tool-call"));
    let ChunkKind::ToolResult(result) = &chunks[0].kind else {
        panic!()
    };
    // ask_user returns Mastra's `{content, isError}`; the model is told the content.
    assert_eq!(
        result.result,
        json!({"content": "User answered: staging", "isError": false})
    );
    assert_eq!(text_of(&chunks), "Deploying to User answered: staging.");
    assert_eq!(out.text, "Deploying to User answered: staging.");
    assert_eq!(
        chunks[0].run_id, output.run_id,
        "the resumed stream continues the same run id"
    );
}

#[tokio::test]
async fn caller_chosen_run_id_is_used() {
    let agent = agent_with(CountingModel::new(ASK_THEN_ANSWER), Arc::new(MemoryStore::new()));
    let stream = agent
        .stream_with("Deploy", askloop::StreamOptions::with_run_id("interop-1"))
        .await
        .unwrap();
    assert_eq!(stream.run_id(), "interop-1");
    let (chunks, _) = stream.output_with_chunks().await;
    assert!(chunks.iter().all(|c| c.run_id == "interop-1"));
    let again = agent
        .stream_with("Deploy", askloop::StreamOptions::with_run_id("interop-1"))
        .await
        .unwrap_err();
    assert!(matches!(
        again,
        RunError::Store(askloop::StoreError::AlreadyExists { .. })
    ));
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Deploy {
    env: String,
}

fn deploy_tool(executions: Arc<AtomicUsize>) -> FunctionTool {
    FunctionTool::builder("deploy")
        .description("Deploys.")
        .input::<Deploy>()
        .requires_approval(true)
        .execute(move |input: Deploy, _ctx| {
            let executions = executions.clone();
            async move {
                executions.fetch_add(1, Ordering::SeqCst);
                Ok(ToolOutput::text(format!("{}-approved", input.env)).into())
            }
        })
}

const DEPLOY: &str = r#"{"turns": [
  {"toolCalls": [{"name": "deploy", "args": {"env": "staging"}}]},
  {"text": "Deploying to {{toolResults}}."}
]}"#;

fn approval_agent(executions: Arc<AtomicUsize>) -> (Agent, Arc<CountingModel>) {
    let model = CountingModel::new(DEPLOY);
    let agent = Agent::builder("approver")
        .model(model.clone())
        .tool(deploy_tool(executions))
        .build()
        .unwrap();
    (agent, model)
}

#[tokio::test]
async fn tool_needing_approval_suspends_before_running_and_approve_runs_it() {
    let executions = Arc::new(AtomicUsize::new(0));
    let (agent, model) = approval_agent(executions.clone());
    let (chunks, output) = run(&agent, "Deploy").await;
    assert_eq!(types(&chunks).last(), Some(&"tool-call-approval"));
    let ChunkKind::ToolCallApproval(approval) = &chunks.last().unwrap().kind else {
        panic!()
    };
    let schema: serde_json::Value = serde_json::from_str(&approval.resume_schema).unwrap();
    assert_eq!(schema["required"], json!(["approved"]));
    assert_eq!(executions.load(Ordering::SeqCst), 0, "nothing runs before approval");
    assert_eq!(output.pending[0].kind, askloop::PendingKind::Approval);

    let (chunks, out) = agent
        .approve_tool_call(ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output_with_chunks()
        .await;
    let ChunkKind::ToolResult(result) = &chunks[0].kind else {
        panic!("{:?}", chunks[0])
    };
    assert_eq!(
        result.result,
        json!("staging-approved"),
        "the tool's own return value, unwrapped"
    );
    assert_eq!(executions.load(Ordering::SeqCst), 1);
    assert_eq!(out.text, "Deploying to staging-approved.");
    assert_eq!(model.calls(), 2);
}

#[tokio::test]
async fn declined_tool_never_runs_and_the_model_sees_the_reason() {
    let executions = Arc::new(AtomicUsize::new(0));
    let (agent, _) = approval_agent(executions.clone());
    let (_, output) = run(&agent, "Deploy").await;
    let (chunks, out) = agent
        .decline_tool_call(ResumeOptions::run(&output.run_id).reason("not on a Friday"))
        .await
        .unwrap()
        .output_with_chunks()
        .await;
    let ChunkKind::ToolOutputDenied(denied) = &chunks[0].kind else {
        panic!("{:?}", chunks[0])
    };
    assert_eq!(denied.approval.reason.as_deref(), Some("not on a Friday"));
    assert!(!denied.approval.approved);
    assert_eq!(executions.load(Ordering::SeqCst), 0);
    assert_eq!(out.text, "Deploying to not on a Friday.");
}

/// Asserts `declined` was refused for its reason's length.
fn refused_as_too_long(declined: Result<askloop::AgentStream, RunError>, bytes: usize, what: &str) {
    match declined {
        Err(RunError::ReasonTooLong { bytes: got, limit, .. }) => {
            assert_eq!((got, limit), (bytes, askloop::MAX_REASON_BYTES), "{what}");
        }
        Err(other) => panic!("{what}: expected ReasonTooLong, got {other}"),
        Ok(_) => panic!("{what}: a reason of {bytes} bytes was taken"),
    }
}

#[tokio::test]
async fn a_decline_reason_over_the_limit_is_refused_and_the_call_stays_pending() {
    let executions = Arc::new(AtomicUsize::new(0));
    let (approver, _) = approval_agent(executions.clone());
    let asker = agent_with(CountingModel::new(ASK_THEN_ANSWER), Arc::new(MemoryStore::new()));
    let too_long = "r".repeat(askloop::MAX_REASON_BYTES + 1);
    for agent in [&approver, &asker] {
        let (_, output) = run(agent, "Deploy").await;
        let run_id = output.run_id.as_str();
        let before = agent.get_run(run_id).await.unwrap();
        let declined = agent
            .decline_tool_call(ResumeOptions::run(run_id).reason(too_long.clone()))
            .await;
        refused_as_too_long(declined, too_long.len(), agent.id());
        if agent.id() == "approver" {
            let data = json!({"approved": false, "reason": too_long});
            let declined = agent.resume_stream(data, ResumeOptions::run(run_id)).await;
            refused_as_too_long(declined, too_long.len(), "a decline as resume data");
        }
        let after = agent.get_run(run_id).await.unwrap();
        assert_eq!((after.status(), after.version), (RunStatus::Suspended, before.version));

        let at_the_limit = "r".repeat(askloop::MAX_REASON_BYTES);
        let out = agent
            .decline_tool_call(ResumeOptions::run(run_id).reason(at_the_limit))
            .await
            .unwrap()
            .output()
            .await;
        assert_eq!(out.status, RunStatus::Completed, "{}", agent.id());
    }
    assert_eq!(executions.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn declined_without_reason_gives_the_model_the_default_reason() {
    let (agent, _) = approval_agent(Arc::new(AtomicUsize::new(0)));
    let (_, output) = run(&agent, "Deploy").await;
    let out = agent
        .decline_tool_call(ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(out.text, "Deploying to Tool call was not approved by the user.");
}

#[tokio::test]
async fn approval_can_be_given_as_resume_data_and_bad_shapes_are_refused() {
    let executions = Arc::new(AtomicUsize::new(0));
    let (agent, _) = approval_agent(executions.clone());
    let (_, output) = run(&agent, "Deploy").await;
    let err = agent
        .resume_stream("yes", ResumeOptions::run(&output.run_id))
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::InvalidAnswer { .. }), "{err:?}");
    let out = agent
        .resume_stream(json!({"approved": true}), ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(executions.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn approving_a_question_is_refused_with_what_to_do_instead() {
    let agent = agent_with(CountingModel::new(ASK_THEN_ANSWER), Arc::new(MemoryStore::new()));
    let (_, output) = run(&agent, "Deploy").await;
    let err = agent
        .approve_tool_call(ResumeOptions::run(&output.run_id))
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::WrongPendingKind { .. }), "{err:?}");
    assert!(err.to_string().contains("answer it"));
}

#[tokio::test]
async fn require_tool_approval_applies_to_every_tool_but_ask_user() {
    let add = FunctionTool::builder("add")
        .input_schema(json!({"type": "object"}))
        .execute(|_input: serde_json::Value, _ctx| async { Ok(ToolOutput::text("3").into()) });
    let agent = Agent::builder("a")
        .model(CountingModel::new(ASK_THEN_ANSWER))
        .tool(AskUser::new())
        .tool(add)
        .require_tool_approval(true)
        .build()
        .unwrap();
    assert!(agent.requires_approval("add"));
    assert!(!agent.requires_approval("ask_user"));
}

#[tokio::test]
async fn invalid_tool_input_becomes_an_error_result_the_model_can_read() {
    let script = r#"{"turns": [
      {"toolCalls": [{"name": "ask_user", "args": {"question": ""}}, {"name": "nope", "args": {}}]},
      {"text": "Errors: {{toolResults}}"}
    ]}"#;
    let agent = agent_with(CountingModel::new(script), Arc::new(MemoryStore::new()));
    let (chunks, out) = run(&agent, "x").await;
    let errors = tool_errors(&chunks);
    assert_eq!(errors.len(), 2);
    assert!(
        errors[0].starts_with("Invalid input for tool ask_user"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].contains("Unknown tool nope") && errors[1].contains("ask_user"),
        "{}",
        errors[1]
    );
    assert_eq!(out.status, RunStatus::Completed);
    assert!(out.text.contains("Invalid input for tool ask_user"));
}

#[tokio::test]
async fn a_tools_own_error_reaches_the_model_and_an_internal_one_only_as_the_tool_having_failed() {
    let script = r#"{"turns": [
      {"toolCalls": [{"name": "lookup", "args": {"id": "missing"}}, {"name": "lookup", "args": {"id": "db"}}]},
      {"text": "Results: {{toolResults}}"}
    ]}"#;
    let lookup = FunctionTool::builder("lookup")
        .input_schema(json!({"type": "object"}))
        .execute(|input: serde_json::Value, _ctx| async move {
            match input["id"].as_str() {
                Some("missing") => Err(ToolError::new("no order with id missing; list the orders first")),
                _ => Err(
                    ToolError::internal("the orders database refused the password for user app")
                        .with_source(std::io::Error::other("authentication failed")),
                ),
            }
        });
    let store = Arc::new(MemoryStore::new());
    let agent = Agent::builder("assistant")
        .model(CountingModel::new(script))
        .tool(lookup)
        .store(store.clone())
        .build()
        .unwrap();
    let (chunks, out) = run(&agent, "x").await;
    let errors = tool_errors(&chunks);
    assert_eq!(
        errors,
        [
            "no order with id missing; list the orders first",
            "The tool lookup failed."
        ]
    );
    // What the model was given to read: the same two texts, and nothing of
    // the database's password error.
    let told: Vec<String> = store
        .messages(&out.run_id)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            Message::Tool(result) => Some(serde_json::to_string(&result.content).unwrap()),
            _ => None,
        })
        .collect();
    assert_eq!(told.len(), 2);
    assert!(told[0].contains("list the orders first"), "{told:?}");
    assert!(
        told[1].contains("The tool lookup failed.") && !told[1].contains("password"),
        "{told:?}"
    );
    assert_eq!(out.status, RunStatus::Completed);
}

#[derive(Debug)]
struct MalformedArgsModel;

#[async_trait::async_trait]
impl askloop::Model for MalformedArgsModel {
    fn name(&self) -> &str {
        "malformed"
    }
    async fn stream(&self, request: askloop::ModelRequest<'_>) -> Result<askloop::ModelStream, askloop::ModelError> {
        use askloop::ModelEvent;
        let events = if request.messages.iter().any(Message::is_assistant) {
            vec![
                ModelEvent::TextDelta("retrying".into()),
                ModelEvent::Finish {
                    reason: askloop::FinishReason::Stop,
                    usage: Default::default(),
                },
            ]
        } else {
            vec![
                ModelEvent::ToolCall {
                    id: "c1".into(),
                    name: "ask_user".into(),
                    arguments: "{\"question\": ".into(),
                },
                ModelEvent::Finish {
                    reason: askloop::FinishReason::ToolCalls,
                    usage: Default::default(),
                },
            ]
        };
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }
}

#[tokio::test]
async fn malformed_tool_arguments_become_an_error_result_not_a_failed_run() {
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with(Arc::new(MalformedArgsModel), store.clone());
    let (chunks, out) = run(&agent, "x").await;
    let types = types(&chunks);
    // A call sent whole still shows as streamed input.
    assert!(types.contains(&"tool-call-input-streaming-start"));
    assert!(types.contains(&"tool-error"));
    assert_eq!(out.status, RunStatus::Completed);
    let messages = store.messages(&out.run_id).await.unwrap();
    let Message::Tool(result) = &messages[2] else {
        panic!("{messages:?}")
    };
    assert!(result.is_error);
    assert!(result.content.to_model_text().contains("not valid JSON"));
}

#[tokio::test]
async fn model_error_gives_an_error_chunk_and_a_failed_run_with_the_message_stored() {
    let script = r#"{"turns": [{"error": "the model fell over"}]}"#;
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with(CountingModel::new(script), store.clone());
    let (chunks, out) = run(&agent, "x").await;
    assert_eq!(types(&chunks).last(), Some(&"error"));
    assert_eq!(out.status, RunStatus::Failed);
    let stored = store.get(&out.run_id).await.unwrap().unwrap();
    assert_eq!(stored.status(), RunStatus::Failed);
    assert!(stored.error().unwrap().contains("the model fell over"));
}

#[tokio::test]
async fn store_write_failure_gives_an_error_chunk_and_no_suspension_chunk() {
    let store = flaky_store();
    store.layer().fail_suspend.store(true, Ordering::SeqCst);
    let agent = agent_with(CountingModel::new(ASK_THEN_ANSWER), store.clone());
    let (chunks, out) = run(&agent, "Deploy").await;
    let types = types(&chunks);
    assert!(!types.contains(&"tool-call-suspended"), "{types:?}");
    assert_eq!(types.last(), Some(&"error"));
    assert_eq!(out.status, RunStatus::Failed);
    assert!(out.error().unwrap().contains("disk full"));
}

#[tokio::test]
async fn step_limit_fails_the_run_with_a_typed_message() {
    // A tool that always asks for another step, so the model never stops.
    let looping = FunctionTool::builder("again")
        .input_schema(json!({"type": "object"}))
        .execute(|_i: serde_json::Value, _c| async { Ok(ToolOutput::text("again").into()) });
    let turns: Vec<String> = (0..5)
        .map(|i| format!(r#"{{"toolCalls": [{{"name": "again", "id": "c{i}"}}]}}"#))
        .collect();
    let loop_script = format!(r#"{{"turns": [{}]}}"#, turns.join(","));
    let agent = Agent::builder("a")
        .model(CountingModel::new(&loop_script))
        .tool(looping)
        .max_steps(3)
        .build()
        .unwrap();
    let (chunks, out) = run(&agent, "x").await;
    assert_eq!(out.status, RunStatus::Failed);
    assert!(
        out.error().as_deref().unwrap().contains("step limit of 3"),
        "{:?}",
        out.error()
    );
    assert_eq!(types(&chunks).last(), Some(&"error"));
}

#[tokio::test]
async fn past_the_end_of_the_script_the_run_fails_naming_the_turn() {
    let script = r#"{"turns": [{"toolCalls": [{"name": "ask_user", "args": {"question": "Q?"}}]}]}"#;
    let agent = agent_with(CountingModel::new(script), Arc::new(MemoryStore::new()));
    let (_, output) = run(&agent, "x").await;
    let out = agent
        .resume_stream("a", ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(out.status, RunStatus::Failed);
    assert!(out.error().unwrap().contains("turn 2"));
}

#[tokio::test]
async fn generate_returns_the_outcome_without_streaming() {
    let agent = agent_with(
        CountingModel::new(r#"{"turns": [{"text": "hello there"}]}"#),
        Arc::new(MemoryStore::new()),
    );
    let out = agent.generate("hi").await.unwrap();
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.text, "hello there");
    assert!(out.usage.total_tokens > 0);
}

#[tokio::test]
async fn text_stream_yields_only_text() {
    let agent = agent_with(
        CountingModel::new(r#"{"turns": [{"text": "one two three"}]}"#),
        Arc::new(MemoryStore::new()),
    );
    use futures::StreamExt;
    let texts: Vec<String> = agent.stream("hi").await.unwrap().text_stream().collect().await;
    assert!(texts.len() > 1);
    assert_eq!(texts.concat(), "one two three");
}

#[tokio::test]
async fn a_run_survives_in_the_store_and_another_agent_instance_resumes_it() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let first = agent_with(CountingModel::new(ASK_THEN_ANSWER), store.clone());
    let (_, output) = run(&first, "Deploy").await;
    drop(first);
    let second = agent_with(CountingModel::new(ASK_THEN_ANSWER), store.clone());
    let out = second
        .resume_stream("production", ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(out.text, "Deploying to User answered: production.");
}

#[tokio::test]
async fn suspended_tool_gets_its_payload_and_answer_when_executed_again() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen_in_tool = seen.clone();
    let confirm = FunctionTool::builder("confirm")
        .input_schema(json!({"type": "object"}))
        .resume_schema(json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}))
        .execute(move |_input: serde_json::Value, ctx| {
            let seen = seen_in_tool.clone();
            async move {
                match ctx.resume_data() {
                    None => Ok(ctx.suspend(json!({"ask": "sure?"}))?),
                    Some(data) => {
                        seen.lock().unwrap().push((
                            ctx.suspend_payload().cloned(),
                            data.clone(),
                            ctx.run_id().map(String::from),
                        ));
                        Ok(ToolOutput::json(json!({"confirmed": data["ok"]})).into())
                    }
                }
            }
        });
    let script = r#"{"turns": [{"toolCalls": [{"name": "confirm"}]}, {"text": "{{toolResults}}"}]}"#;
    let agent = Agent::builder("a")
        .model(CountingModel::new(script))
        .tool(confirm)
        .build()
        .unwrap();
    let (chunks, output) = run(&agent, "x").await;
    assert_eq!(types(&chunks).last(), Some(&"tool-call-suspended"));
    // Resume data is checked against the tool's resume schema first.
    let err = agent
        .resume_stream(json!({"ok": "yes"}), ResumeOptions::run(&output.run_id))
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::InvalidAnswer { .. }), "{err:?}");
    let (chunks_after, out) = agent
        .resume_stream(json!({"ok": true}), ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output_with_chunks()
        .await;
    assert_eq!(out.text, r#"{"confirmed":true}"#);
    let shown = chunks_after.iter().find_map(|c| match &c.kind {
        ChunkKind::ToolResult(r) => Some(r.result.clone()),
        _ => None,
    });
    assert_eq!(
        shown,
        Some(json!({"confirmed": true})),
        "a JSON value goes on the wire as it is"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].0, Some(json!({"ask": "sure?"})));
    assert_eq!(seen[0].1, json!({"ok": true}));
    assert_eq!(seen[0].2.as_deref(), Some(output.run_id.as_str()));
}

#[tokio::test]
async fn cancel_while_running_ends_the_stream_with_abort() {
    // A tool that cancels its own run mid-step: the driver's next write
    // loses the compare-and-set to the cancel and ends with `abort`.
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let holder: Arc<std::sync::OnceLock<Agent>> = Arc::new(std::sync::OnceLock::new());
    let holder_in_tool = holder.clone();
    let stopper = FunctionTool::builder("stop")
        .input_schema(json!({"type": "object"}))
        .execute(move |_i: serde_json::Value, ctx| {
            let holder = holder_in_tool.clone();
            async move {
                let agent = holder.get().unwrap();
                agent
                    .cancel_run(ctx.run_id().unwrap(), askloop::Author::default())
                    .await
                    .unwrap();
                Ok(ToolOutput::text("stopped").into())
            }
        });
    let script = r#"{"turns": [{"toolCalls": [{"name": "stop"}]}, {"text": "never"}]}"#;
    let model = CountingModel::new(script);
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(stopper)
        .store(store.clone())
        .build()
        .unwrap();
    holder.set(agent.clone()).unwrap();
    let (chunks, out) = run(&agent, "x").await;
    assert_eq!(types(&chunks).last(), Some(&"abort"));
    assert_eq!(out.status, RunStatus::Cancelled);
    assert_eq!(model.calls(), 1);
    assert_eq!(
        store.get(&out.run_id).await.unwrap().unwrap().status(),
        RunStatus::Cancelled
    );
}

/// A tool that never ends, saying when it started and when its call was
/// given up (its future dropped).
fn never_ends(started: Arc<tokio::sync::Notify>, dropped: Arc<tokio::sync::Notify>) -> FunctionTool {
    struct SaysWhenDropped(Arc<tokio::sync::Notify>);
    impl Drop for SaysWhenDropped {
        fn drop(&mut self) {
            self.0.notify_one();
        }
    }
    FunctionTool::builder("hang")
        .input_schema(json!({"type": "object"}))
        .execute(move |_i: serde_json::Value, _ctx| {
            let (started, dropped) = (started.clone(), dropped.clone());
            async move {
                let _guard = SaysWhenDropped(dropped);
                started.notify_one();
                std::future::pending::<()>().await;
                Ok(ToolOutput::text("never").into())
            }
        })
}

#[tokio::test]
async fn cancelling_a_run_gives_up_the_tool_call_its_driver_waits_on_and_its_stream_ends() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let (started, dropped) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let script = r#"{"turns": [{"toolCalls": [{"name": "hang"}]}, {"text": "never"}]}"#;
    let model = CountingModel::new(script);
    let agent = Agent::builder("a")
        .model(model.clone())
        .tool(never_ends(started.clone(), dropped.clone()))
        .store(store.clone())
        .build()
        .unwrap();
    let stream = agent.stream("x").await.unwrap();
    let run_id = stream.run_id().to_owned();
    let driving = tokio::spawn(stream.output());
    started.notified().await;
    agent.cancel_run(&run_id, askloop::Author::default()).await.unwrap();
    // The call is given up and the stream ends, with no wait for a beat of
    // the lease's heartbeat (30 s). The bound only keeps a failure from
    // hanging the suite.
    tokio::time::timeout(std::time::Duration::from_secs(20), dropped.notified())
        .await
        .expect("the call was given up");
    let out = driving.await.unwrap();
    assert_eq!(out.status, RunStatus::Cancelled);
    assert_eq!(model.calls(), 1, "the model is not called again");
    assert_eq!(
        store.get(&run_id).await.unwrap().unwrap().status(),
        RunStatus::Cancelled
    );
}

#[tokio::test]
async fn a_drive_whose_run_another_process_cancelled_gives_up_its_tool_call_at_the_next_beat() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let (started, dropped) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let script = r#"{"turns": [{"toolCalls": [{"name": "hang"}]}, {"text": "never"}]}"#;
    let build = |store: &Arc<dyn RunStore>| {
        Agent::builder("a")
            .model(CountingModel::new(script))
            .tool(never_ends(started.clone(), dropped.clone()))
            .store(store.clone())
            .lease_duration(std::time::Duration::from_millis(300))
            .build()
            .unwrap()
    };
    let (driver, other) = (build(&store), build(&store));
    let stream = driver.stream("x").await.unwrap();
    let run_id = stream.run_id().to_owned();
    let driving = tokio::spawn(stream.output());
    started.notified().await;
    // Another agent object (as another process would) cancels: no bell
    // rings in the driver's; its heartbeat finds the lease gone.
    other.cancel_run(&run_id, askloop::Author::default()).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(20), dropped.notified())
        .await
        .expect("the call was given up");
    assert_eq!(driving.await.unwrap().status, RunStatus::Cancelled);
}

#[derive(Default)]
struct Forgotten(std::sync::Mutex<Vec<(String, String)>>);

/// A tool that asks once and records the calls it is told to forget.
struct Asks(Arc<Forgotten>);

#[async_trait::async_trait]
impl askloop::Tool for Asks {
    fn id(&self) -> &str {
        "asks"
    }
    fn description(&self) -> &str {
        "asks"
    }
    fn input_schema(&self) -> &serde_json::Value {
        static SCHEMA: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
        SCHEMA.get_or_init(|| json!({"type": "object"}))
    }
    fn forget_call(&self, run_id: &str, tool_call_id: &str) {
        self.0
            .0
            .lock()
            .unwrap()
            .push((run_id.to_owned(), tool_call_id.to_owned()));
    }
    async fn execute(
        &self,
        _input: serde_json::Value,
        ctx: askloop::ToolContext,
    ) -> Result<askloop::ToolOutcome, ToolError> {
        Ok(ctx.suspend(json!({"question": "?"}))?)
    }
}

#[tokio::test]
async fn a_waiting_call_is_forgotten_by_its_tool_when_its_run_is_cancelled_and_not_when_it_is_answered() {
    let forgotten = Arc::new(Forgotten::default());
    let script = r#"{"turns": [{"toolCalls": [{"name": "asks", "id": "c1"}]}, {"text": "done"}]}"#;
    let agent = Agent::builder("a")
        .model(CountingModel::new(script))
        .tool(Asks(forgotten.clone()))
        .build()
        .unwrap();
    let (_, answered) = run(&agent, "x").await;
    agent
        .resume_stream(json!("yes"), ResumeOptions::run(&answered.run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert!(
        forgotten.0.lock().unwrap().is_empty(),
        "an answered call is not forgotten"
    );
    let (_, cancelled) = run(&agent, "y").await;
    agent
        .cancel_run(&cancelled.run_id, askloop::Author::default())
        .await
        .unwrap();
    assert_eq!(
        *forgotten.0.lock().unwrap(),
        [(cancelled.run_id.clone(), "c1".to_owned())]
    );
}

#[tokio::test]
async fn a_waiting_call_whose_question_expires_is_forgotten_by_its_tool() {
    let clock = askloop::ManualClock::starting_at("2026-12-04T10:00:00Z".parse().unwrap());
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let forgotten = Arc::new(Forgotten::default());
    let script = r#"{"turns": [{"toolCalls": [{"name": "asks", "id": "c1"}]}, {"text": "done"}]}"#;
    let agent = Agent::builder("a")
        .model(CountingModel::new(script))
        .tool(Asks(forgotten.clone()))
        .store(store.clone())
        .clock(Arc::new(clock.clone()))
        .time_limit_for("asks", std::time::Duration::from_secs(60))
        .build()
        .unwrap();
    let (_, waiting) = run(&agent, "x").await;
    let expires_at = store.get(&waiting.run_id).await.unwrap().unwrap().stored_calls()[0]
        .expires_at
        .unwrap();
    clock.set(expires_at + chrono::Duration::milliseconds(1));
    for stream in agent.expire_runs(askloop::Author::default()).await.unwrap() {
        stream.output().await;
    }
    assert_eq!(
        *forgotten.0.lock().unwrap(),
        [(waiting.run_id.clone(), "c1".to_owned())]
    );
}

const TWO_IN_A_ROW: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "First?"}}]},
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Second?"}}]},
  {"text": "{{input}} / last: {{toolResults}}"}
]}"#;

#[tokio::test]
async fn resuming_in_the_process_that_suspended_skips_reading_the_conversation_back() {
    let store = flaky_store();
    let agent = agent_with(CountingModel::new(TWO_IN_A_ROW), store.clone());
    let (_, output) = run(&agent, "trip").await;
    agent
        .resume_stream("a", ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output()
        .await;
    let out = agent
        .resume_stream("b", ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(out.text, "trip / last: User answered: b");
    assert_eq!(store.layer().message_reads.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_run_changed_by_another_process_is_read_back_not_taken_from_the_cache() {
    let store = flaky_store();
    let here = agent_with(CountingModel::new(TWO_IN_A_ROW), store.clone());
    let elsewhere = agent_with(CountingModel::new(TWO_IN_A_ROW), store.clone());
    let (_, output) = run(&here, "trip").await;
    // Another process answers the first question; its write bumps the version.
    elsewhere
        .resume_stream("from elsewhere", ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output()
        .await;
    // This process still holds the conversation as of the first suspension.
    let out = here
        .resume_stream("b", ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(out.status, RunStatus::Completed);
    // One read by the other process (it never had the run), one by this
    // process, whose cached copy is older than the stored run.
    assert_eq!(store.layer().message_reads.load(Ordering::SeqCst), 2);
    let messages = store.messages(&output.run_id).await.unwrap();
    let answers: Vec<String> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r.content.to_model_text()),
            _ => None,
        })
        .collect();
    assert_eq!(answers, ["User answered: from elsewhere", "User answered: b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_stream_mid_run_still_brings_the_run_to_its_stored_suspension() {
    use futures::StreamExt;
    #[derive(Debug)]
    struct SlowModel(Arc<CountingModel>);
    #[async_trait::async_trait]
    impl askloop::Model for SlowModel {
        fn name(&self) -> &str {
            "slow"
        }
        async fn stream(
            &self,
            request: askloop::ModelRequest<'_>,
        ) -> Result<askloop::ModelStream, askloop::ModelError> {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            self.0.stream(request).await
        }
    }
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with(Arc::new(SlowModel(CountingModel::new(ASK_THEN_ANSWER))), store.clone());
    let mut stream = agent.stream("Deploy").await.unwrap();
    let run_id = stream.run_id().to_owned();
    let first = stream.next().await.unwrap();
    assert_eq!(first.type_name(), "start");
    // The model has not answered yet: the run is mid-step when its reader goes.
    assert_eq!(store.get(&run_id).await.unwrap().unwrap().status(), RunStatus::Running);
    drop(stream);
    let mut status = RunStatus::Running;
    for _ in 0..200 {
        status = store.get(&run_id).await.unwrap().unwrap().status();
        if status != RunStatus::Running {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(status, RunStatus::Suspended, "the run went on without its reader");
    let out = agent
        .resume_stream("staging", ResumeOptions::run(&run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(out.text, "Deploying to User answered: staging.");
}

#[tokio::test]
async fn an_answer_is_written_as_the_compare_and_set_itself_with_no_separate_claim() {
    let store = flaky_store();
    let agent = agent_with(CountingModel::new(ASK_THEN_ANSWER), store.clone());
    let (_, output) = run(&agent, "Deploy").await;
    let updates_before = store.layer().updates.load(Ordering::SeqCst);
    let out = agent
        .resume_stream("staging", ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(
        store.layer().claims.load(Ordering::SeqCst),
        0,
        "ask_user answers need no separate claim"
    );
    // One write for the answer (the compare-and-set), one for the finished run.
    assert_eq!(store.layer().updates.load(Ordering::SeqCst) - updates_before, 2);
}

#[tokio::test]
async fn an_approval_claims_the_run_and_marks_its_call_started_before_the_tool_runs() {
    let store = flaky_store();
    // What the store holds when the tool runs: (status, call marked started).
    let seen = Arc::new(std::sync::Mutex::new(None));
    let tool = {
        let (store, seen) = (store.clone(), seen.clone());
        FunctionTool::builder("deploy")
            .description("Deploys.")
            .input::<Deploy>()
            .requires_approval(true)
            .execute(move |input: Deploy, ctx| {
                let (store, seen) = (store.clone(), seen.clone());
                async move {
                    let run = store.get(ctx.run_id().unwrap()).await.unwrap().unwrap();
                    let marked = run.stored_calls().iter().any(|p| p.started_at.is_some());
                    *seen.lock().unwrap() = Some((run.status(), marked));
                    Ok(ToolOutput::text(format!("{}-approved", input.env)).into())
                }
            })
    };
    let agent = Agent::builder("approver")
        .model(CountingModel::new(DEPLOY))
        .tool(tool)
        .store(store.clone())
        .build()
        .unwrap();
    let (_, output) = run(&agent, "Deploy").await;
    let updates_before = store.layer().updates.load(Ordering::SeqCst);
    let out = agent
        .approve_tool_call(ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(
        *seen.lock().unwrap(),
        Some((RunStatus::Running, true)),
        "a tool with effects runs only once the run is claimed and its call marked started"
    );
    // The claim is the compare-and-set that stores the mark and the
    // approval (no claim of its own), then the result, then the reply.
    assert_eq!(store.layer().claims.load(Ordering::SeqCst), 0);
    assert_eq!(store.layer().updates.load(Ordering::SeqCst) - updates_before, 3);
    let stored = store.get(&output.run_id).await.unwrap().unwrap();
    assert!(stored.stored_calls().is_empty());
}

/// A model that reasons, says something, reasons again, then asks; and on
/// the next step reasons and answers.
#[derive(Debug)]
struct ReasoningModel;

#[async_trait::async_trait]
impl askloop::Model for ReasoningModel {
    fn name(&self) -> &str {
        "reasoning"
    }
    async fn stream(&self, request: askloop::ModelRequest<'_>) -> Result<askloop::ModelStream, askloop::ModelError> {
        use askloop::ModelEvent::*;
        let finish = |reason| Finish {
            reason,
            usage: Default::default(),
        };
        let events = if request.messages.iter().any(Message::is_assistant) {
            vec![
                ReasoningDelta("They chose.".into()),
                TextDelta("Deploying.".into()),
                finish(askloop::FinishReason::Stop),
            ]
        } else {
            vec![
                ReasoningDelta("Which env".into()),
                ReasoningDelta("ironment?".into()),
                TextDelta("Let me ask.".into()),
                ReasoningDelta("".into()),
                ReasoningDelta("Ask with options.".into()),
                ToolCallStart {
                    id: "c1".into(),
                    name: "ask_user".into(),
                },
                ToolCallDelta {
                    id: "c1".into(),
                    args_delta: r#"{"question": "Which?"}"#.into(),
                },
                ToolCall {
                    id: "c1".into(),
                    name: "ask_user".into(),
                    arguments: r#"{"question": "Which?"}"#.into(),
                },
                finish(askloop::FinishReason::ToolCalls),
            ]
        };
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }
}

#[tokio::test]
async fn reasoning_streams_in_its_own_blocks_in_order_and_is_neither_stored_nor_sent_back() {
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with(Arc::new(ReasoningModel), store.clone());
    let (chunks, out) = run(&agent, "Deploy").await;
    assert_eq!(
        types(&chunks),
        [
            "start",
            "step-start",
            "reasoning-start",
            "reasoning-delta",
            "reasoning-delta",
            "reasoning-end",
            "text-start",
            "text-delta",
            "text-end",
            // The empty piece opened nothing; the next one a new block.
            "reasoning-start",
            "reasoning-delta",
            "reasoning-end",
            "tool-call-input-streaming-start",
            "tool-call-delta",
            "tool-call-input-streaming-end",
            "tool-call",
            "tool-call-suspended",
        ]
    );
    // Every delta names the block it is in; the two blocks differ.
    let mut blocks: Vec<(String, String)> = Vec::new();
    for chunk in &chunks {
        match &chunk.kind {
            ChunkKind::ReasoningStart(start) => blocks.push((start.id.clone(), String::new())),
            ChunkKind::ReasoningDelta(delta) => {
                let (id, text) = blocks.last_mut().unwrap();
                assert_eq!(&delta.id, id);
                text.push_str(&delta.text);
            }
            ChunkKind::ReasoningEnd(end) => assert_eq!(end.id, blocks.last().unwrap().0),
            _ => {}
        }
    }
    assert_eq!(blocks.len(), 2);
    assert_ne!(blocks[0].0, blocks[1].0);
    assert_eq!(blocks[0].1, "Which environment?");
    assert_eq!(blocks[1].1, "Ask with options.");
    assert_eq!(out.text, "Let me ask.");

    let (chunks, out) = agent
        .resume_stream("staging", ResumeOptions::run(&out.run_id))
        .await
        .unwrap()
        .output_with_chunks()
        .await;
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.text, "Deploying.");
    let types = types(&chunks);
    let start = types.iter().position(|t| *t == "reasoning-start").unwrap();
    assert_eq!(
        &types[start..start + 4],
        ["reasoning-start", "reasoning-delta", "reasoning-end", "text-start"]
    );
    // The conversation the model reads back has its text and calls only.
    let stored = serde_json::to_string(&store.messages(&out.run_id).await.unwrap()).unwrap();
    for reasoning in ["Which env", "ironment?", "Ask with options.", "They chose."] {
        assert!(!stored.contains(reasoning), "{reasoning} stored: {stored}");
    }
    assert!(
        stored.contains("Let me ask.") && stored.contains("Deploying."),
        "{stored}"
    );
}

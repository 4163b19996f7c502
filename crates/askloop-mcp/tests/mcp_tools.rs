//! An agent using a real MCP server's tools (an rmcp server over streamable
//! HTTP): calls, error results, and elicitations as durable questions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use askloop::store::{PendingKind, RunStatus};
use askloop::{Agent, ResumeOptions, RunError, RunStore, ScriptedModel};
use askloop_mcp::{ELICITATION_KIND, McpServerSpec, mcp_tools};
use serde_json::{Value, json};

async fn agent(url: &str, store: Arc<dyn RunStore>, script: Value) -> Agent {
    let spec = McpServerSpec::http("desk", url);
    let mut builder = Agent::builder("clerk")
        .model(Arc::new(
            ScriptedModel::from_json("clerk", &script.to_string()).unwrap(),
        ))
        .store(store);
    for tool in mcp_tools(&spec).await.unwrap() {
        builder = builder.tool_arc(tool);
    }
    builder.build().unwrap()
}

fn booking_script() -> Value {
    json!({"turns": [
        {"toolCalls": [{"name": "book", "args": {"show": "Hamlet"}, "id": "call_book"}]},
        {"text": "Done: {{toolResults}}"}
    ]})
}

fn memory() -> Arc<dyn RunStore> {
    Arc::new(askloop::MemoryStore::new())
}

#[tokio::test]
async fn the_servers_tools_are_offered_with_their_schemas_and_calls_return_results() {
    let url = common::serve_desk().await;
    let script = json!({"turns": [
        {"toolCalls": [{"name": "add", "args": {"a": 2, "b": 40}}]},
        {"text": "Sum: {{toolResults}}"}
    ]});
    let agent = agent(&url, memory(), script).await;
    let specs = agent.tool_specs();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["add", "fail", "book"]);
    assert_eq!(agent.tool_specs()[0].input_schema["required"], json!(["a", "b"]));
    let output = agent.generate("add them").await.unwrap();
    assert_eq!(output.status, RunStatus::Completed);
    assert_eq!(output.text, "Sum: 42");
}

#[tokio::test]
async fn calls_one_after_another_reuse_one_session_to_the_server_also_after_a_question() {
    let (url, sessions) = common::serve_counted_desk().await;
    let opened = || sessions.load(std::sync::atomic::Ordering::SeqCst);
    let script = json!({"turns": [
        {"toolCalls": [{"name": "add", "args": {"a": 2, "b": 40}}]},
        {"text": "Sum: {{toolResults}}"}
    ]});
    let adder = agent(&url, memory(), script).await;
    assert_eq!(opened(), 1, "listing the tools opens one session");
    for _ in 0..3 {
        assert_eq!(adder.generate("add them").await.unwrap().text, "Sum: 42");
    }
    assert_eq!(opened(), 1, "the calls took the listing's session in turn");

    // A call that asked the person keeps its session to itself until the
    // answer; then the session serves the next call.
    let booker = agent(&url, memory(), booking_script()).await;
    let before = opened();
    let run_id = suspended_booking(&booker).await;
    let output = booker
        .resume_stream(
            json!({"action": "accept", "content": {"name": "Ada", "seats": 2}}),
            ResumeOptions::run(&run_id),
        )
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(output.text, "Done: Booked 2 seats for Ada at Hamlet");
    let run_id = suspended_booking(&booker).await;
    assert_eq!(opened(), before, "the second booking reused the first one's session");
    let output = booker
        .resume_stream(json!({"action": "decline"}), ResumeOptions::run(&run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(output.text, "Done: Not booked: the person declined");
}

#[tokio::test]
async fn an_error_result_of_the_server_reaches_the_model_as_an_error() {
    let url = common::serve_desk().await;
    let script = json!({"turns": [
        {"toolCalls": [{"name": "fail"}]},
        {"text": "Got: {{toolResults}}"}
    ]});
    let store = memory();
    let agent = agent(&url, Arc::clone(&store), script).await;
    let output = agent.generate("try").await.unwrap();
    assert_eq!(output.text, "Got: the box office is closed");
    let messages = store.messages(&output.run_id).await.unwrap();
    let told = serde_json::to_value(&messages).unwrap().to_string();
    let result = messages
        .iter()
        .find_map(|m| match m {
            askloop::Message::Tool(result) => Some(result.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no tool result in {told}"));
    assert!(result.is_error, "{told}");
}

async fn suspended_booking(agent: &Agent) -> String {
    let output = agent.stream("book Hamlet").await.unwrap().output().await;
    assert_eq!(output.status, RunStatus::Suspended);
    let pending = &output.pending[0];
    assert_eq!(pending.kind, PendingKind::Suspended);
    let payload = pending.suspend_payload.as_ref().unwrap();
    assert_eq!(payload["kind"], ELICITATION_KIND);
    assert_eq!(payload["server"], "desk");
    assert_eq!(payload["message"], "Who is booking for Hamlet, and how many seats?");
    assert_eq!(payload["requestedSchema"]["required"], json!(["name", "seats"]));
    assert!(pending.resume_schema.is_some());
    output.run_id
}

#[tokio::test]
async fn an_accepted_elicitation_goes_back_to_the_live_call_and_its_result_follows() {
    let url = common::serve_desk().await;
    let store = memory();
    let agent = agent(&url, Arc::clone(&store), booking_script()).await;
    let run_id = suspended_booking(&agent).await;
    // The question is stored: the run reads as suspended from the store.
    assert_eq!(
        store.get(&run_id).await.unwrap().unwrap().status(),
        RunStatus::Suspended
    );
    let output = agent
        .resume_stream(
            json!({"action": "accept", "content": {"name": "Ada", "seats": 2}}),
            ResumeOptions::call(&run_id, "call_book"),
        )
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(output.status, RunStatus::Completed, "{output:?}");
    assert_eq!(output.text, "Done: Booked 2 seats for Ada at Hamlet");
}

#[tokio::test]
async fn an_answer_outside_the_requested_schema_is_refused_and_the_question_stays_open() {
    let url = common::serve_desk().await;
    let store = memory();
    let agent = agent(&url, Arc::clone(&store), booking_script()).await;
    let run_id = suspended_booking(&agent).await;
    // Each refusal says what is wrong in the form's terms: the field, or the
    // missing action; never the whole schema back.
    for (bad, says) in [
        (
            json!({"action": "accept", "content": {"name": "Ada", "seats": 12}}),
            "seats",
        ),
        (
            json!({"action": "accept", "content": {"name": "Ada"}}),
            "\"seats\" is a required property",
        ),
        (json!("Ada"), "the answer has no action"),
        (json!({"action": "maybe"}), "unknown action \"maybe\""),
        (json!({"action": "accept"}), "needs its content"),
    ] {
        let err = agent
            .resume_stream(bad.clone(), ResumeOptions::call(&run_id, "call_book"))
            .await
            .err()
            .unwrap_or_else(|| panic!("{bad} was accepted"));
        let RunError::InvalidAnswer { reason, .. } = &err else {
            panic!("{bad}: {err:?}")
        };
        assert!(reason.contains(says), "{bad}: {reason}");
        assert!(
            !reason.contains("properties"),
            "the schema is not repeated back: {reason}"
        );
        assert_eq!(
            store.get(&run_id).await.unwrap().unwrap().status(),
            RunStatus::Suspended
        );
    }
    // The live call still takes a good answer afterwards.
    let output = agent
        .resume_stream(
            json!({"action": "accept", "content": {"name": "Bo", "seats": 1}}),
            ResumeOptions::run(&run_id),
        )
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(output.text, "Done: Booked 1 seats for Bo at Hamlet");
}

#[tokio::test]
async fn declined_and_cancelled_elicitations_reach_the_server_as_such() {
    let url = common::serve_desk().await;
    for (action, said) in [("decline", "the person declined"), ("cancel", "the person cancelled")] {
        let agent = agent(&url, memory(), booking_script()).await;
        let run_id = suspended_booking(&agent).await;
        let output = agent
            .resume_stream(json!({"action": action}), ResumeOptions::run(&run_id))
            .await
            .unwrap()
            .output()
            .await;
        assert_eq!(output.text, format!("Done: Not booked: {said}"));
    }
}

#[tokio::test]
async fn declining_the_call_as_a_question_reaches_the_live_server_as_its_decline() {
    let url = common::serve_desk().await;
    let agent = agent(&url, memory(), booking_script()).await;
    let run_id = suspended_booking(&agent).await;
    let output = agent
        .decline_tool_call(ResumeOptions::call(&run_id, "call_book").reason("not today"))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(output.status, RunStatus::Completed);
    // The server's own result for a decline, not askloop's generic text.
    assert_eq!(output.text, "Done: Not booked: the person declined");
    let run = agent.store().get(&run_id).await.unwrap().unwrap();
    assert_eq!(run.resolutions.last().unwrap().kind.as_str(), "declined");
}

#[tokio::test]
async fn an_answer_reaching_a_process_without_the_live_call_is_given_to_the_model_with_a_note() {
    let url = common::serve_desk().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let run_id = {
        let store = askloop_store::open(db.to_str().unwrap()).await.unwrap();
        let asking = agent(&url, store, booking_script()).await;
        suspended_booking(&asking).await
        // `asking` and its live MCP session are dropped here, as when the
        // process that asked stops.
    };
    let store = askloop_store::open(db.to_str().unwrap()).await.unwrap();
    let other = agent(&url, store, booking_script()).await;
    let output = other
        .resume_stream(
            json!({"action": "accept", "content": {"name": "Ada", "seats": 2}}),
            ResumeOptions::run(&run_id),
        )
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(output.status, RunStatus::Completed);
    assert!(
        output.text.starts_with("Done: The MCP server desk asked the person"),
        "{}",
        output.text
    );
    assert!(output.text.contains("never received the answer"), "{}", output.text);
    assert!(
        output.text.contains(r#"accepted, with {"name":"Ada","seats":2}"#),
        "{}",
        output.text
    );
}

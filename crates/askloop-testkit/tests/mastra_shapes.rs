//! askloop's chunks for the recorded Mastra scenarios have Mastra's shapes:
//! the same chunk types in the same order, the same payload keys with the
//! same JSON types, the envelope's keys in Mastra's order, and tool-call
//! arguments in the model's key order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use askloop::{Agent, AskUser, Chunk, FunctionTool, MemoryStore, ResumeOptions, RunStatus, ScriptedModel, ToolOutput};
use askloop_testkit::mastra::{self, Exchange};
use serde_json::{Value, json};

const PROMPT: &str = "Deploy the app. Ask me which environment first.";

/// The recorded exchanges that streamed chunks: the first stream, then the
/// call that continued it.
fn streams(scenario: &str) -> (Exchange, Exchange) {
    let trace = mastra::trace(scenario).unwrap();
    let mut streams = trace.exchanges.into_iter().filter(|e| !e.chunks.is_empty());
    (streams.next().unwrap(), streams.next().unwrap())
}

/// The recorded model's tool call, with its arguments in the order the
/// model wrote them, and the tool it called.
fn recorded_call(first: &Exchange) -> (String, Value) {
    let call = first.chunks.iter().find(|c| c["type"] == "tool-call").unwrap();
    (
        call["payload"]["toolName"].as_str().unwrap().to_owned(),
        call["payload"]["args"].clone(),
    )
}

/// A scripted model that makes the recorded call, then answers with the
/// tool's result, as the recorded model did.
fn model(tool: &str, args: &Value) -> Arc<ScriptedModel> {
    let script = json!({"turns": [
        {"toolCalls": [{"name": tool, "args": args}]},
        {"text": "Deploying to {{toolResults}}."}
    ]});
    Arc::new(ScriptedModel::from_json("openai/gpt-4o-mini", &script.to_string()).unwrap())
}

fn ask_approval() -> FunctionTool {
    FunctionTool::builder("ask_approval")
        .description("Deploy to the chosen environment (needs the user to approve first).")
        .input_schema(
            json!({"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}),
        )
        .requires_approval(true)
        .execute(|_input: Value, _ctx| async { Ok(ToolOutput::text("staging-approved").into()) })
}

fn as_json(chunks: &[Chunk]) -> Vec<Value> {
    chunks.iter().map(|c| serde_json::to_value(c).unwrap()).collect()
}

fn assert_same_shapes(scenario: &str, part: &str, recorded: &Exchange, ours: &[Chunk]) {
    let problems = mastra::shape_problems(&recorded.chunks, &as_json(ours));
    assert!(problems.is_empty(), "{scenario}, {part}:\n{}", problems.join("\n"));
    for chunk in ours {
        let text = serde_json::to_string(chunk).unwrap();
        let head = format!(r#"{{"type":"{}","runId":"#, chunk.type_name());
        assert!(text.starts_with(&head), "{text}");
        assert!(text.contains(r#","from":"AGENT","payload":{"#), "{text}");
    }
}

/// Every message id the chunks name (`start`, steps, `stepResult`).
fn message_ids(chunks: &[Value]) -> std::collections::BTreeSet<String> {
    chunks
        .iter()
        .flat_map(|c| [&c["payload"]["messageId"], &c["payload"]["stepResult"]["messageId"]])
        .filter_map(|id| id.as_str().map(str::to_owned))
        .collect()
}

/// Runs a scenario's first stream; returns its chunks and the call's id.
async fn first_stream(agent: &Agent, scenario: &str, recorded: &Exchange) -> (Vec<Chunk>, String, String) {
    let (chunks, output) = agent.stream(PROMPT).await.unwrap().output_with_chunks().await;
    assert_eq!(output.status, RunStatus::Suspended, "{:?}", output.error());
    assert_same_shapes(scenario, "stream", recorded, &chunks);
    let call_id = output.pending[0].tool_call_id.clone();
    (chunks, output.run_id, call_id)
}

#[tokio::test]
async fn single_question_stream_and_resume_have_mastras_chunk_shapes() {
    let (first, second) = streams("single");
    let (tool, args) = recorded_call(&first);
    let agent = Agent::builder("assistant")
        .model(model(&tool, &args))
        .tool(AskUser::new())
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    let (chunks, run_id, call_id) = first_stream(&agent, "single", &first).await;

    // The arguments come out in the order the model wrote them.
    let recorded_text = first
        .chunk_texts
        .iter()
        .find(|t| t.contains(r#""type":"tool-call""#))
        .unwrap();
    let ours = chunks.iter().find(|c| c.type_name() == "tool-call").unwrap();
    let ours_args = serde_json::to_value(ours).unwrap()["payload"]["args"].to_string();
    assert!(
        recorded_text.contains(&format!(r#""args":{ours_args}"#)),
        "{ours_args}\n{recorded_text}"
    );

    let (resumed, _) = agent
        .resume_stream("staging", ResumeOptions::call(&run_id, &call_id))
        .await
        .unwrap()
        .output_with_chunks()
        .await;
    assert_same_shapes("single", "resume-stream", &second, &resumed);
    // As in the recording, one message id runs through the stream's steps.
    assert_eq!(message_ids(&second.chunks).len(), 1);
    assert_eq!(
        message_ids(&as_json(&resumed)).len(),
        1,
        "{:?}",
        message_ids(&as_json(&resumed))
    );
    let result = as_json(&resumed)[0]["payload"]["result"].clone();
    assert_eq!(
        result, second.chunks[0]["payload"]["result"],
        "ask_user's {{content, isError}}"
    );
}

#[tokio::test]
async fn approved_tool_call_has_mastras_chunk_shapes_and_its_own_result() {
    let (first, second) = streams("approve");
    let (tool, args) = recorded_call(&first);
    let agent = Agent::builder("approver")
        .model(model(&tool, &args))
        .tool(ask_approval())
        .build()
        .unwrap();
    let (_, run_id, call_id) = first_stream(&agent, "approve", &first).await;
    let (approved, _) = agent
        .approve_tool_call(ResumeOptions::call(&run_id, &call_id))
        .await
        .unwrap()
        .output_with_chunks()
        .await;
    assert_same_shapes("approve", "approve-tool-call", &second, &approved);
    assert_eq!(as_json(&approved)[0]["payload"]["result"], json!("staging-approved"));
}

#[tokio::test]
async fn declined_tool_call_has_mastras_chunk_shapes() {
    let (first, second) = streams("decline");
    let (tool, args) = recorded_call(&first);
    let agent = Agent::builder("approver")
        .model(model(&tool, &args))
        .tool(ask_approval())
        .build()
        .unwrap();
    let (_, run_id, call_id) = first_stream(&agent, "decline", &first).await;
    let reason = second.chunks[0]["payload"]["approval"]["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    let (declined, _) = agent
        .decline_tool_call(ResumeOptions::call(&run_id, &call_id).reason(reason))
        .await
        .unwrap()
        .output_with_chunks()
        .await;
    assert_same_shapes("decline", "decline-tool-call", &second, &declined);
}

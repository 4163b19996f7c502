//! The seed's usage, in Rust: an agent with `ask_user` asks a question, the
//! stream ends with `tool-call-suspended`, and the run is resumed with an
//! answer: first a free-text one, then a multi-select array.
//!
//! Runs offline with a scripted model: `cargo run --example ask_user`.

use std::sync::Arc;

use askloop::{Agent, AskUser, ChunkKind, ResumeOptions, ScriptedModel};
use futures::StreamExt;
use serde_json::json;

const SCRIPT: &str = r#"{"turns": [
  {"text": "Let me check first. ", "toolCalls": [{"name": "ask_user", "args": {"question": "Which repository should I summarize?"}}]},
  {"toolCalls": [{"name": "ask_user", "args": {
      "question": "What should the summary cover?",
      "options": [{"label": "Add tests", "description": "What is untested"}, {"label": "Update docs"}, {"label": "Refactor"}],
      "selectionMode": "multi_select"}}]},
  {"text": "Summary of {{input}}, as asked: {{toolResults}}."}
]}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = ScriptedModel::from_json("example", SCRIPT)?;
    let agent = Agent::builder("assistant")
        .name("Assistant")
        .instructions("Ask the user for clarification when the request is ambiguous.")
        .model(Arc::new(model))
        .tool(AskUser::new())
        .build()?;

    let mut stream = agent.stream("Summarize my project").await?;
    let run_id = stream.run_id().to_owned();
    while let Some(chunk) = stream.next().await {
        match &chunk.kind {
            ChunkKind::TextDelta(delta) => print!("{}", delta.text),
            ChunkKind::ToolCallSuspended(s) => println!("\n[asked] {}", s.suspend_payload["question"]),
            _ => {}
        }
    }

    // The person answers the free-text question...
    let mut resumed = agent
        .resume_stream("The main repo", ResumeOptions::run(&run_id))
        .await?;
    let mut tool_call_id = None;
    while let Some(chunk) = resumed.next().await {
        if let ChunkKind::ToolCallSuspended(s) = &chunk.kind {
            let payload = &s.suspend_payload;
            println!("[asked] {} ({})", payload["question"], payload["selectionMode"]);
            for option in payload["options"].as_array().into_iter().flatten() {
                println!("  - {}", option["label"]);
            }
            tool_call_id = Some(s.tool_call_id.clone());
        }
    }

    // ...then picks two options of the multi-select one.
    let tool_call_id = tool_call_id.ok_or("the agent did not ask its second question")?;
    let answer = json!(["Add tests", "Update docs"]);
    let resumed = agent
        .resume_stream(answer, ResumeOptions::call(&run_id, tool_call_id))
        .await?;
    let mut text = resumed.text_stream();
    while let Some(delta) = text.next().await {
        print!("{delta}");
    }
    println!();
    Ok(())
}

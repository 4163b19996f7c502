//! `askloop runs` and `askloop runs show RUN_ID`.

use askloop::{Message, RunQuery, RunRecord, RunStatus};
use serde_json::{Value, json};

use super::Context;
use crate::exit::{CliError, Done};
use crate::render;
use crate::setup;

pub async fn list(ctx: &Context, status: Option<&str>, limit: u32, as_json: bool) -> Result<Done, CliError> {
    let status = status
        .map(|s| s.parse::<RunStatus>())
        .transpose()
        .map_err(CliError::usage)?;
    let store = setup::open_store(ctx.db.as_deref()).await?;
    let query = RunQuery {
        status,
        limit: Some(limit),
        ..Default::default()
    };
    let runs = store.list(&query).await?;
    if as_json {
        let rows: Vec<Value> = runs.iter().map(summary_json).collect();
        println!("{}", Value::Array(rows));
        return Ok(Done::Ok);
    }
    if runs.is_empty() {
        eprintln!(
            "No runs{}.",
            status.map(|s| format!(" with status {s}")).unwrap_or_default()
        );
        return Ok(Done::Ok);
    }
    println!("{:<36}  {:<10}  {:<20}  WAITING ON", "RUN ID", "STATUS", "UPDATED");
    for run in &runs {
        println!(
            "{:<36}  {:<10}  {:<20}  {}",
            run.run_id,
            run.status.as_str(),
            run.updated_at.format("%Y-%m-%d %H:%M:%S"),
            waiting_on(run)
        );
    }
    Ok(Done::Ok)
}

fn waiting_on(run: &RunRecord) -> String {
    let first = run.pending.first().map(|p| {
        p.suspend_payload
            .as_ref()
            .and_then(|s| s.get("question"))
            .and_then(Value::as_str)
            .map_or_else(|| format!("approval of {}", p.tool_name), str::to_owned)
    });
    match (first, run.pending.len()) {
        (None, _) => String::new(),
        (Some(q), 1) => q,
        (Some(q), n) => format!("{q} (+{} more)", n - 1),
    }
}

fn pending_json(run: &RunRecord) -> Value {
    Value::Array(
        run.pending
            .iter()
            .map(|p| {
                let mut entry = json!({
                    "toolCallId": p.tool_call_id,
                    "toolName": p.tool_name,
                    "kind": p.kind,
                    "args": p.args,
                });
                if let Some(payload) = &p.suspend_payload {
                    entry["suspendPayload"] = payload.clone();
                }
                if let Some(schema) = &p.resume_schema {
                    entry["resumeSchema"] = schema.clone();
                }
                entry
            })
            .collect(),
    )
}

fn summary_json(run: &RunRecord) -> Value {
    json!({
        "runId": run.run_id,
        "agentId": run.agent_id,
        "threadId": run.thread_id,
        "status": run.status,
        "createdAt": run.created_at,
        "updatedAt": run.updated_at,
        "pending": pending_json(run),
        "error": run.error,
    })
}

pub async fn show(ctx: &Context, run_id: &str, as_json: bool) -> Result<Done, CliError> {
    let store = setup::open_store(ctx.db.as_deref()).await?;
    let run = setup::load_run(&store, run_id).await?;
    let messages = store.messages(run_id).await?;
    if as_json {
        let mut value = summary_json(&run);
        value["messages"] = serde_json::to_value(&messages).unwrap_or(Value::Null);
        value["usage"] = serde_json::to_value(run.usage).unwrap_or(Value::Null);
        value["steps"] = json!(run.steps);
        value["metadata"] = run.metadata.clone();
        println!("{value}");
        return Ok(Done::Ok);
    }
    println!("Run {}", run.run_id);
    println!("  agent    {}", run.agent_id);
    println!("  status   {}", run.status);
    println!("  created  {}", run.created_at.format("%Y-%m-%d %H:%M:%S UTC"));
    println!("  updated  {}", run.updated_at.format("%Y-%m-%d %H:%M:%S UTC"));
    if let Some(error) = &run.error {
        println!("  error    {error}");
    }
    if !run.pending.is_empty() {
        println!();
        print!(
            "{}",
            render::describe_pending(&ctx.askloop(), &run.run_id, &run.pending)
        );
    }
    println!();
    println!("Conversation:");
    for message in &messages {
        match message {
            Message::User { content } => println!("  user: {content}"),
            Message::Assistant { content, tool_calls } => {
                if !content.is_empty() {
                    println!("  assistant: {content}");
                }
                for call in tool_calls {
                    println!("  assistant calls {} {}", call.name, call.args);
                }
            }
            Message::Tool(result) => println!("  {} -> {}", result.tool_name, result.content.to_model_text()),
            _ => {}
        }
    }
    Ok(Done::Ok)
}

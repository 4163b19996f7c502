//! `askloop runs` and `askloop runs show RUN_ID`.

use askloop::{Clock, Message, PendingToolCall, RunQuery, RunRecord, RunStatus, SystemClock};
use serde_json::{Value, json};

use super::{Access, Context};
use crate::escape;
use crate::exit::{CliError, Done};
use crate::render;
use crate::setup;

pub async fn list(ctx: &Context, status: Option<&str>, limit: u32, as_json: bool) -> Result<Done, CliError> {
    let status = status
        .map(|s| s.parse::<RunStatus>())
        .transpose()
        .map_err(|e| CliError::usage(e.to_string()))?;
    let store = ctx.store(Access::ReadOnly).await?;
    let query = RunQuery {
        status,
        limit: Some(limit),
        ..Default::default()
    };
    let runs = store.list(&query).await?;
    if as_json {
        let rows: Vec<Value> = runs.iter().map(summary_json).collect();
        crate::out::json(&rows)?;
        return Ok(Done::Ok);
    }
    if runs.is_empty() {
        errln!(
            "No runs{}.",
            status.map(|s| format!(" with status {s}")).unwrap_or_default()
        );
        return Ok(Done::Ok);
    }
    outln!("{:<36}  {:<10}  {:<20}  WAITING ON", "RUN ID", "STATUS", "UPDATED");
    let now = SystemClock.now();
    for run in &runs {
        outln!(
            "{:<36}  {:<10}  {:<20}  {}",
            run.run_id,
            shown_status(run, now),
            run.updated_at.format("%Y-%m-%d %H:%M:%S"),
            escape::one_line(&waiting_on(run))
        );
    }
    Ok(Done::Ok)
}

/// The calls `run` waits on now, as the CLI lists them.
pub(super) fn waiting(run: &RunRecord) -> Vec<PendingToolCall> {
    run.waiting_calls(SystemClock.now())
        .map(|waiting| waiting.call.clone())
        .collect()
}

fn waiting_on(run: &RunRecord) -> String {
    let pending = waiting(run);
    let first = pending.first().map(|p| {
        p.suspend_payload
            .as_ref()
            .and_then(|s| s.get("question"))
            .and_then(Value::as_str)
            .map_or_else(|| format!("approval of {}", p.tool_name), str::to_owned)
    });
    match (first, pending.len()) {
        (None, _) => String::new(),
        (Some(q), 1) => q,
        (Some(q), n) => format!("{q} (+{} more)", n - 1),
    }
}

pub(super) fn pending_json(run: &RunRecord) -> Value {
    Value::Array(
        waiting(run)
            .iter()
            .map(|p| {
                let mut entry = json!({
                    "toolCallId": p.tool_call_id,
                    "toolName": p.tool_name,
                    "kind": p.kind,
                    "args": p.args,
                });
                if let Some(payload) = &p.suspend_payload {
                    entry["suspendPayload"] = Value::clone(payload);
                }
                if let Some(schema) = &p.resume_schema {
                    entry["resumeSchema"] = Value::clone(schema);
                }
                entry
            })
            .collect(),
    )
}

/// The status as people should read it: a running run whose process died
/// (its lease ran out) is `stalled`, not `running`; `askloop runs recover`
/// continues it.
fn shown_status(run: &RunRecord, now: chrono::DateTime<chrono::Utc>) -> &'static str {
    if run.is_stalled(now) {
        "stalled"
    } else {
        run.status().as_str()
    }
}

fn summary_json(run: &RunRecord) -> Value {
    json!({
        "runId": run.run_id,
        "agentId": run.agent_id,
        "threadId": run.thread_id,
        "status": run.status(),
        "stalled": run.is_stalled(SystemClock.now()),
        "failure": run.failure,
        "createdAt": askloop::rfc3339(run.created_at),
        "updatedAt": askloop::rfc3339(run.updated_at),
        "pending": pending_json(run),
        "error": run.error(),
    })
}

pub async fn show(ctx: &Context, run_id: &str, as_json: bool) -> Result<Done, CliError> {
    let store = ctx.store(Access::ReadOnly).await?;
    let run = setup::load_run(&store, run_id).await?;
    let messages = store.messages(run_id).await?;
    if as_json {
        let mut value = summary_json(&run);
        value["messages"] = serde_json::to_value(&messages).unwrap_or(Value::Null);
        value["usage"] = serde_json::to_value(run.usage).unwrap_or(Value::Null);
        value["steps"] = json!(run.steps);
        value["metadata"] = run.metadata.clone();
        value["resolutions"] = run.resolutions.iter().map(|r| json!(r.on_wire())).collect();
        crate::out::json(&value)?;
        return Ok(Done::Ok);
    }
    outln!("Run {}", run.run_id);
    outln!("  agent    {}", escape::one_line(&run.agent_id));
    outln!("  status   {}", shown_status(&run, SystemClock.now()));
    outln!("  created  {}", run.created_at.format("%Y-%m-%d %H:%M:%S UTC"));
    outln!("  updated  {}", run.updated_at.format("%Y-%m-%d %H:%M:%S UTC"));
    if let Some(error) = &run.error() {
        outln!("  error    {}", error);
    }
    if run.is_stalled(SystemClock.now()) {
        outln!(
            "  stalled  the process driving it stopped; `{} runs recover` continues it",
            ctx.askloop()
        );
    } else if run.failure.as_ref().is_some_and(askloop::RunFailure::is_transient) {
        outln!(
            "  retry    `{} retry {}` continues it from its last stored step",
            ctx.askloop(),
            run.run_id
        );
    }
    let pending = waiting(&run);
    if !pending.is_empty() {
        outln!();
        out!("{}", render::describe_pending(&ctx.askloop(), &run.run_id, &pending));
        for call in &pending {
            if let Some(at) = call.expires_at {
                outln!(
                    "  {} expires {}",
                    escape::one_line(&call.tool_call_id),
                    at.format("%Y-%m-%d %H:%M:%S UTC")
                );
            }
        }
    }
    if !run.resolutions.is_empty() {
        outln!();
        outln!("Decisions:");
        for r in &run.resolutions {
            let call = r.tool_call_id.as_deref().map(escape::one_line).unwrap_or_default();
            let by = render::author_suffix(&r.author);
            outln!(
                "  {} {} {call} via {}{by}",
                r.at.format("%Y-%m-%d %H:%M:%S UTC"),
                r.kind,
                r.author.via
            );
        }
    }
    outln!();
    outln!("Conversation:");
    for message in &messages {
        match message {
            Message::User { content } => outln!("  user: {}", content),
            Message::Assistant { content, tool_calls } => {
                if !content.is_empty() {
                    outln!("  assistant: {}", content);
                }
                for call in tool_calls {
                    outln!("  assistant calls {} {}", escape::one_line(&call.name), call.args);
                }
            }
            Message::Tool(result) => outln!(
                "  {} -> {}",
                escape::one_line(&result.tool_name),
                result.content.to_model_text()
            ),
            _ => {}
        }
    }
    Ok(Done::Ok)
}

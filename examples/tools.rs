//! Tools of your own that wait on people: one that suspends itself with a
//! payload of its own (and is run again from the top with the answer), and
//! one that needs a person's approval before it runs. In between, a
//! program that knows nothing but the store finds what waits and answers
//! it, as another process would.
//!
//! Runs offline with a scripted model: `cargo run --example tools`.

use std::sync::Arc;

use askloop::{
    Agent, ChunkKind, Clock, FunctionTool, MemoryStore, PendingKind, ResumeOptions, RunQuery, RunStatus, RunStore,
    ScriptedModel, SystemClock, ToolOutput,
};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// The refund tool's arguments: its input schema is derived from them.
#[derive(Deserialize, JsonSchema)]
struct Refund {
    /// The order to refund.
    order: String,
    /// How much, in cents.
    amount_cents: u64,
}

const SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "confirm_address", "args": {"order": "A-17"}}]},
  {"toolCalls": [{"name": "refund", "args": {"order": "A-17", "amount_cents": 1250}}]},
  {"text": "Done: {{toolResults}}"}
]}"#;

/// Asks a person to confirm the address on file before going on.
fn confirm_address() -> FunctionTool {
    FunctionTool::builder("confirm_address")
        .description("Asks the customer to confirm the delivery address of an order.")
        .input_schema(json!({"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}))
        // What the person is shown, and what an answer must look like:
        // answers that do not fit are refused before anything is stored.
        .suspend_schema(json!({"type": "object", "properties": {"order": {}, "address": {"type": "string"}}}))
        .resume_schema(json!({
            "type": "object",
            "properties": {"confirmed": {"type": "boolean"}},
            "required": ["confirmed"]
        }))
        .execute(|input: Value, ctx| async move {
            // Run again from the top once answered, with the answer.
            if let Some(answer) = ctx.resume_data() {
                let confirmed = answer["confirmed"].as_bool() == Some(true);
                return Ok(ToolOutput::text(format!("address confirmed: {confirmed}")).into());
            }
            let payload = json!({"order": input["order"], "address": "12 Rue de la Paix, Paris"});
            Ok(ctx.suspend(payload)?)
        })
}

/// Refunds an order; every call waits for a person's approval first.
fn refund() -> FunctionTool {
    FunctionTool::builder("refund")
        .description("Refunds an order.")
        .input::<Refund>()
        .requires_approval(true)
        .execute(|refund: Refund, _ctx| async move {
            let done = format!("refunded {} cents on {}", refund.amount_cents, refund.order);
            Ok(ToolOutput::text(done).into())
        })
}

/// Every call of the store's suspended runs that waits on a person, as
/// (run, call, kind, what it shows): what an inbox lists.
async fn waiting(store: &dyn RunStore) -> Result<Vec<(String, String, PendingKind, Value)>, askloop::StoreError> {
    let query = RunQuery {
        status: Some(RunStatus::Suspended),
        ..RunQuery::default()
    };
    let now = SystemClock.now();
    let mut found = Vec::new();
    for run in store.list(&query).await? {
        for waiting in run.waiting_calls(now) {
            let call = waiting.call;
            let shown = match call.kind {
                PendingKind::Suspended => call.suspend_payload.as_deref().cloned().unwrap_or(Value::Null),
                _ => Value::clone(&call.args),
            };
            found.push((run.run_id.clone(), call.tool_call_id.clone(), call.kind, shown));
        }
    }
    Ok(found)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let agent = Agent::builder("support")
        .model(Arc::new(ScriptedModel::from_json("example", SCRIPT)?))
        .tool(confirm_address())
        .tool(refund())
        .store(Arc::clone(&store))
        .build()?;

    let mut stream = agent.stream("Refund order A-17").await?;
    while let Some(chunk) = stream.next().await {
        if let ChunkKind::ToolCallSuspended(s) = &chunk.kind {
            println!("[suspended] {} shows {}", s.tool_name, s.suspend_payload);
        }
    }

    // Elsewhere, with only the store: what waits, and an answer to it.
    let [(run_id, call_id, PendingKind::Suspended, shown)] = &waiting(store.as_ref()).await?[..] else {
        return Err("one question should wait".into());
    };
    println!("[waiting] {run_id} / {call_id}: {shown}");
    let refused = agent
        .resume_stream(json!({"confirmed": "yes"}), ResumeOptions::call(run_id, call_id))
        .await;
    if let Err(err) = refused {
        println!("[refused] {err}");
    }
    let mut resumed = agent
        .resume_stream(json!({"confirmed": true}), ResumeOptions::call(run_id, call_id))
        .await?;
    while let Some(chunk) = resumed.next().await {
        if let ChunkKind::ToolCallApproval(a) = &chunk.kind {
            println!("[approval] {} with {}", a.tool_name, a.args);
        }
    }

    // The refund waits for approval: approve it (or `decline_tool_call`).
    let [(_, refund_call, PendingKind::Approval, _)] = &waiting(store.as_ref()).await?[..] else {
        return Err("the refund should wait for approval".into());
    };
    let approved = agent
        .approve_tool_call(ResumeOptions::call(run_id, refund_call))
        .await?;
    let mut text = approved.text_stream();
    while let Some(delta) = text.next().await {
        print!("{delta}");
    }
    println!();
    Ok(())
}

//! `askloop threads`, `threads show ID` and `threads delete ID`: a
//! resource's conversations, read from the store that holds its runs. A
//! tool call is shown as its run stands now (waiting, or how it was
//! resolved and by whom), never from a copy, as the server's thread routes
//! show it.

use std::collections::HashMap;
use std::sync::Arc;

use askloop::{
    CallState, Clock, IdKind, Message, PendingToolCall, Resolution, RunError, RunQuery, RunRecord, RunStatus, RunStore,
    StoreError, SystemClock, Thread, ThreadDeletion, ThreadKey, ThreadMessage, ThreadQuery, ThreadStore, ToolCall,
    ToolResult,
};
use serde_json::{Value, json};

use super::decide::{cli_author, rebuild_agent};
use super::runs::pending_json;
use super::{Access, Context};
use crate::escape;
use crate::exit::{CliError, Done};
use crate::render;

/// The variable that names the resource when `--resource` is not given.
pub const RESOURCE_ENV: &str = "ASKLOOP_RESOURCE";

/// How many messages a store read of a thread takes at once.
const PAGE: u32 = 500;

/// Whose threads: `given` (`--resource`), else `$ASKLOOP_RESOURCE`, else
/// the login name (`$USER`, as the CLI names its author). Checked against
/// the rule for resource ids: a bad one is bad usage, naming where it came
/// from.
pub fn resource(given: Option<&str>) -> Result<String, CliError> {
    let non_empty = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (name, from) = match given {
        Some(name) => (name.to_owned(), "--resource"),
        None => match non_empty(RESOURCE_ENV) {
            Some(name) => (name, RESOURCE_ENV),
            None => match non_empty("USER").or_else(|| non_empty("USERNAME")) {
                Some(name) => (name, "the login name ($USER)"),
                None => {
                    return Err(CliError::usage(format!(
                        "no resource to keep threads under: pass --resource NAME or set {RESOURCE_ENV} (the login name, $USER, is not set either)"
                    )));
                }
            },
        },
    };
    IdKind::Resource
        .check(&name)
        .map_err(|err| CliError::usage(format!("{err} (the resource from {from})")))?;
    Ok(name)
}

/// A thread id as typed, checked against the rule for thread ids.
pub fn thread_key(resource: String, thread_id: &str) -> Result<ThreadKey, CliError> {
    IdKind::Thread.check(thread_id)?;
    Ok(ThreadKey::new(resource, thread_id))
}

/// The store's threads, or why this database has none.
pub fn thread_store(store: &Arc<dyn RunStore>) -> Result<&dyn ThreadStore, CliError> {
    store
        .thread_store()
        .ok_or_else(|| CliError::from(StoreError::NoThreads))
}

/// Reads a thread, or says there is no such thread of the resource.
async fn load(store: &Arc<dyn RunStore>, key: &ThreadKey) -> Result<Thread, CliError> {
    thread_store(store)?.thread(key).await?.ok_or_else(|| {
        CliError::failure(format!(
            "resource {} has no thread {} (`askloop threads --resource {}` lists its threads)",
            key.resource_id,
            key.thread_id,
            render::shell_quote(&key.resource_id)
        ))
    })
}

/// `askloop threads`: the resource's threads, newest first.
pub async fn list(ctx: &Context, resource: String, limit: u32, as_json: bool) -> Result<Done, CliError> {
    let store = ctx.store(Access::ReadOnly).await?;
    let query = ThreadQuery {
        resource_id: Some(resource.clone()),
        limit: Some(limit),
        ..ThreadQuery::default()
    };
    let threads = thread_store(&store)?.threads(&query).await?;
    if as_json {
        let rows: Vec<Value> = threads.iter().map(thread_json).collect();
        crate::out::json(&rows)?;
        return Ok(Done::Ok);
    }
    if threads.is_empty() {
        errln!("No threads of resource {}.", escape::one_line(&resource));
        return Ok(Done::Ok);
    }
    outln!(
        "{:<24}  {:<24}  {:>8}  {:<20}  AGENT",
        "THREAD ID",
        "TITLE",
        "MESSAGES",
        "UPDATED"
    );
    for thread in &threads {
        outln!(
            "{:<24}  {:<24}  {:>8}  {:<20}  {}",
            escape::one_line(&thread.id),
            escape::one_line(&thread.title),
            thread.message_count,
            thread.updated_at.format("%Y-%m-%d %H:%M:%S"),
            escape::one_line(&thread.agent_id)
        );
    }
    Ok(Done::Ok)
}

fn thread_json(thread: &Thread) -> Value {
    let mut value = serde_json::to_value(thread).unwrap_or(Value::Null);
    // Times as every time askloop sends: RFC 3339 with milliseconds.
    value["createdAt"] = json!(askloop::rfc3339(thread.created_at));
    value["updatedAt"] = json!(askloop::rfc3339(thread.updated_at));
    value
}

/// `askloop threads show ID`: the thread's messages and the questions it
/// waits on.
pub async fn show(ctx: &Context, resource: String, thread_id: &str, as_json: bool) -> Result<Done, CliError> {
    let key = thread_key(resource, thread_id)?;
    let store = ctx.store(Access::ReadOnly).await?;
    let thread = load(&store, &key).await?;
    let mut stored = Vec::new();
    loop {
        let page = thread_store(&store)?
            .thread_messages(&key, stored.len() as i64, PAGE)
            .await?;
        let done = page.len() < PAGE as usize;
        stored.extend(page);
        if done {
            break;
        }
    }
    let shown = shown_messages(&store, &stored).await?;
    let waiting = waiting_runs(&store, &key).await?;
    if as_json {
        let value = json!({
            "thread": thread_json(&thread),
            "messages": shown.iter().map(ShownMessage::to_json).collect::<Vec<_>>(),
            "waiting": waiting.iter().map(|run| json!({
                "runId": run.run_id,
                "agentId": run.agent_id,
                "pending": pending_json(run),
            })).collect::<Vec<_>>(),
        });
        crate::out::json(&value)?;
        return Ok(Done::Ok);
    }
    outln!("Thread {}", escape::one_line(&thread.id));
    outln!("  resource {}", escape::one_line(&thread.resource_id));
    outln!("  agent    {}", escape::one_line(&thread.agent_id));
    if !thread.title.is_empty() {
        outln!("  title    {}", escape::one_line(&thread.title));
    }
    outln!("  messages {}", thread.message_count);
    outln!("  created  {}", thread.created_at.format("%Y-%m-%d %H:%M:%S UTC"));
    outln!("  updated  {}", thread.updated_at.format("%Y-%m-%d %H:%M:%S UTC"));
    outln!();
    outln!("Conversation:");
    out!("{}", describe_messages(&shown));
    if !waiting.is_empty() {
        outln!();
        outln!("Waiting:");
        for run in &waiting {
            out!(
                "{}",
                render::describe_pending(&ctx.askloop(), &run.run_id, &super::runs::waiting(run))
            );
        }
    }
    Ok(Done::Ok)
}

/// `askloop threads delete ID`: the thread, its messages and its runs. A
/// thread whose runs are not finished is kept, naming them, unless
/// `cancel_runs`: they are then cancelled first, by the CLI's author.
pub async fn delete(
    ctx: &Context,
    resource: String,
    thread_id: &str,
    cancel_runs: bool,
    as_json: bool,
) -> Result<Done, CliError> {
    let key = thread_key(resource, thread_id)?;
    let store = ctx.store(Access::Existing).await?;
    load(&store, &key).await?;
    let mut cancelled = Vec::new();
    // A run may start on the thread between a cancel and the delete: a few
    // rounds, then say so.
    for _ in 0..3 {
        match thread_store(&store)?.delete_thread(&key).await? {
            ThreadDeletion::Deleted => {
                if as_json {
                    crate::out::json(&json!({
                        "deleted": true,
                        "threadId": key.thread_id,
                        "resourceId": key.resource_id,
                        "cancelledRuns": cancelled,
                    }))?;
                } else {
                    outln!(
                        "Deleted thread {} of resource {}.",
                        escape::one_line(&key.thread_id),
                        escape::one_line(&key.resource_id)
                    );
                }
                return Ok(Done::Ok);
            }
            ThreadDeletion::NotFound => {
                return Err(CliError::failure(format!(
                    "resource {} has no thread {} (deleted meanwhile?)",
                    key.resource_id, key.thread_id
                )));
            }
            ThreadDeletion::Busy { runs } if cancel_runs => {
                for run_id in runs {
                    let Some(run) = store.get(&run_id).await? else {
                        continue;
                    };
                    let agent = rebuild_agent(ctx, &store, &run, None).await?;
                    match agent.cancel_run(&run_id, cli_author()).await {
                        Ok(()) => {
                            errln!("Cancelled run {run_id}.");
                            cancelled.push(run_id);
                        }
                        Err(RunError::Finished { .. }) => {}
                        Err(err) => return Err(err.into()),
                    }
                }
            }
            ThreadDeletion::Busy { runs } => {
                return Err(CliError::failure(format!(
                    "thread {} still has runs that are not finished: {}; answer them (`askloop resume RUN`), or pass --cancel-runs to cancel them and delete the thread",
                    key.thread_id,
                    runs.join(", ")
                )));
            }
        }
    }
    Err(CliError::failure(format!(
        "thread {} kept getting new runs while its runs were cancelled; try again",
        key.thread_id
    )))
}

/// The runs on the thread that wait on a person, oldest first.
pub async fn waiting_runs(store: &Arc<dyn RunStore>, key: &ThreadKey) -> Result<Vec<RunRecord>, CliError> {
    let mut runs = store
        .list(&RunQuery {
            status: Some(RunStatus::Suspended),
            thread: Some(key.clone()),
            ..RunQuery::default()
        })
        .await?;
    runs.sort_by_key(|run| run.created_at);
    Ok(runs)
}

/// A thread's message as shown: a tool result is shown with its call.
pub struct ShownMessage {
    stored: ThreadMessage,
    calls: Vec<ShownCall>,
}

/// A tool call and its state now.
struct ShownCall {
    call: ToolCall,
    /// Set while its run still waits on it.
    pending: Option<PendingToolCall>,
    result: Option<ToolResult>,
    resolution: Option<Resolution>,
}

impl ShownCall {
    /// `waiting`, how it was resolved (`answered`, `superseded`...), `done`
    /// (a result with no decision, as a tool that ran by itself), or
    /// `unanswered` (no result and nothing waits: its run ended).
    fn state(&self) -> &'static str {
        match (&self.pending, &self.resolution, &self.result) {
            (Some(_), _, _) => "waiting",
            (None, Some(r), _) => r.kind.as_str(),
            (None, None, Some(_)) => "done",
            (None, None, None) => "unanswered",
        }
    }
}

impl ShownMessage {
    fn to_json(&self) -> Value {
        let (role, text) = match &self.stored.message {
            Message::User { content } => ("user", content.as_str()),
            Message::Assistant { content, .. } => ("assistant", content.as_str()),
            _ => ("assistant", ""),
        };
        let mut value = json!({
            "id": self.stored.id(),
            "seq": self.stored.seq,
            "runId": self.stored.run_id,
            "role": role,
            "text": text,
            "createdAt": askloop::rfc3339(self.stored.created_at),
        });
        if !self.calls.is_empty() {
            value["toolCalls"] = Value::Array(
                self.calls
                    .iter()
                    .map(|c| {
                        let mut call = json!({
                            "toolCallId": c.call.id,
                            "toolName": c.call.name,
                            "args": c.call.args,
                            "state": c.state(),
                        });
                        if let Some(p) = &c.pending {
                            call["kind"] = json!(p.kind);
                            if let Some(payload) = &p.suspend_payload {
                                call["suspendPayload"] = Value::clone(payload);
                            }
                        }
                        if let Some(result) = &c.result {
                            call["result"] = json!({"content": result.content.to_value(), "isError": result.is_error});
                        }
                        if let Some(resolution) = &c.resolution {
                            call["resolution"] = serde_json::to_value(resolution.on_wire()).unwrap_or(Value::Null);
                        }
                        call
                    })
                    .collect(),
            );
        }
        value
    }
}

/// The messages of a thread as people and scripts see them: each tool
/// result with its call (paired by the library's one rule,
/// [`askloop::call_results`]), each call with its run's state now.
pub async fn shown_messages(
    store: &Arc<dyn RunStore>,
    stored: &[ThreadMessage],
) -> Result<Vec<ShownMessage>, CliError> {
    let plain: Vec<Message> = stored.iter().map(|m| m.message.clone()).collect();
    let results = askloop::call_results(&plain);
    let mut runs: HashMap<String, Option<RunRecord>> = HashMap::new();
    let mut shown = Vec::with_capacity(stored.len());
    for (j, message) in stored.iter().enumerate() {
        let calls = match &message.message {
            Message::Tool(_) => continue,
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                if !runs.contains_key(&message.run_id) {
                    let run = store.get(&message.run_id).await?;
                    runs.insert(message.run_id.clone(), run);
                }
                let run = runs.get(&message.run_id).and_then(Option::as_ref);
                tool_calls
                    .iter()
                    .enumerate()
                    .map(|(k, call)| {
                        let pending = run.and_then(|r| match r.call_state(&call.id, SystemClock.now()) {
                            CallState::Waiting(waiting) => Some(waiting.call.clone()),
                            _ => None,
                        });
                        let result = results.get(&(j, k)).and_then(|&i| match &plain[i] {
                            Message::Tool(result) => Some(result.clone()),
                            _ => None,
                        });
                        ShownCall {
                            call: call.clone(),
                            resolution: run.and_then(|r| r.call_resolution(&call.id)).cloned(),
                            pending,
                            result,
                        }
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        shown.push(ShownMessage {
            stored: message.clone(),
            calls,
        });
    }
    Ok(shown)
}

/// The messages for people, one block per message; names and ids kept on
/// their line (the output layer escapes the rest as it prints).
pub fn describe_messages(shown: &[ShownMessage]) -> String {
    let mut text = String::new();
    for message in shown {
        match &message.stored.message {
            Message::User { content } => text.push_str(&format!("  user: {}\n", content)),
            Message::Assistant { content, .. } => {
                if !content.is_empty() {
                    text.push_str(&format!("  assistant: {}\n", content));
                }
                for call in &message.calls {
                    text.push_str(&describe_call(&message.stored.run_id, call));
                }
            }
            _ => {}
        }
    }
    text
}

fn describe_call(run_id: &str, c: &ShownCall) -> String {
    let what = match c.call.args.get("question").and_then(Value::as_str) {
        Some(question) => format!(
            "asks ({}): {}",
            escape::one_line(&c.call.name),
            escape::one_line(question)
        ),
        None => format!("calls {} {}", escape::one_line(&c.call.name), c.call.args),
    };
    let mut text = format!("  assistant {what}\n");
    if c.pending.is_some() {
        text.push_str(&format!(
            "    waiting: run {}, tool call {}\n",
            escape::one_line(run_id),
            escape::one_line(&c.call.id)
        ));
        return text;
    }
    let state = match &c.resolution {
        Some(r) => {
            let by = render::author_suffix(&r.author);
            format!("{} via {}{by}", r.kind, r.author.via)
        }
        None => c.state().to_owned(),
    };
    match &c.result {
        Some(result) => text.push_str(&format!("    {state}: {}\n", result.content.to_model_text())),
        None => text.push_str(&format!("    {state}\n")),
    }
    text
}

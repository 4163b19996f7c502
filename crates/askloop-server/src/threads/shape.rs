//! The bodies of the memory routes, in Mastra's shapes (recorded from a
//! real Mastra server with `@mastra/memory`).

use std::collections::HashMap;

use askloop::{CallState, Message, PendingKind, RunRecord, Thread, ThreadKey, ThreadMessage, ThreadStore};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::error::ApiError;

/// The most characters of a thread's first message its body carries:
/// more than any title made of it needs, and a bound however long the
/// message.
const FIRST_MESSAGE_CHARS: usize = 200;

/// A thread: `{id, resourceId, title, metadata?, createdAt, updatedAt}`,
/// and askloop's `agentId`: the agent whose run created it, which a front
/// end continues it with; and, for a thread without a title, askloop's
/// `firstMessage`: the start of its first message's text, which a front end
/// names it by (so a listing of untitled threads needs no read per thread).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ThreadBody {
    id: String,
    resource_id: String,
    agent_id: String,
    title: String,
    #[serde(skip_serializing_if = "Value::is_null")]
    metadata: Value,
    created_at: String,
    updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_message: Option<String>,
}

impl ThreadBody {
    pub(crate) fn of(thread: &Thread) -> Self {
        ThreadBody {
            id: thread.id.clone(),
            resource_id: thread.resource_id.clone(),
            agent_id: thread.agent_id.clone(),
            title: thread.title.clone(),
            metadata: thread.metadata.clone(),
            created_at: askloop::rfc3339(thread.created_at),
            updated_at: askloop::rfc3339(thread.updated_at),
            first_message: None,
        }
    }

    /// The bodies of `threads`, each untitled one with the start of its
    /// first message's text, read for all of them in one store call.
    pub(crate) async fn named(store: &dyn ThreadStore, threads: &[Thread]) -> Result<Vec<ThreadBody>, ApiError> {
        let untitled: Vec<ThreadKey> = threads.iter().filter(|t| t.title.is_empty()).map(Thread::key).collect();
        let mut firsts: HashMap<ThreadKey, String> = HashMap::new();
        if !untitled.is_empty() {
            for (key, first) in store.first_messages(&untitled).await? {
                if let Some(text) = message_text(&first.message) {
                    firsts.insert(key, text.chars().take(FIRST_MESSAGE_CHARS).collect());
                }
            }
        }
        Ok(threads
            .iter()
            .map(|thread| ThreadBody {
                first_message: firsts.remove(&thread.key()),
                ..ThreadBody::of(thread)
            })
            .collect())
    }
}

/// The text a person or the model wrote in `message`, if any.
fn message_text(message: &Message) -> Option<&str> {
    match message {
        Message::User { content } | Message::Assistant { content, .. } => {
            Some(content.as_str()).filter(|text| !text.trim().is_empty())
        }
        _ => None,
    }
}

/// A page of threads.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ThreadPage {
    pub(crate) threads: Vec<ThreadBody>,
    pub(crate) total: u64,
    pub(crate) page: u32,
    pub(crate) per_page: u32,
    pub(crate) has_more: bool,
}

/// A page of a thread's messages.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MessagePage {
    pub(crate) messages: Vec<Value>,
    pub(crate) total: i64,
    pub(crate) page: u32,
    pub(crate) per_page: u32,
    pub(crate) has_more: bool,
    pub(crate) ui_messages: Value,
}

/// The stored messages as Mastra shows them: a tool result is shown in its
/// call's part (`state: "result"`), not as a message of its own; a call its
/// run still waits on shows `state: "call"` with the question in the
/// message's `suspendedTools` (or `pendingToolApprovals`), read from the run
/// store now, never from a copy. A resolved call's part also has askloop's
/// `resolution` (`kind`, `at`, `via`, `by`): answered, declined, expired,
/// superseded, and by whom; and a question of the built-in `ask_user` has
/// `builtInAskUser: true`.
pub(crate) async fn messages(
    state: &AppState,
    thread: &Thread,
    stored: Vec<ThreadMessage>,
) -> Result<Vec<Value>, ApiError> {
    let plain: Vec<Message> = stored.iter().map(|m| m.message.clone()).collect();
    // Each call's result in this page, by the one pairing rule of threads.
    let results: HashMap<(usize, usize), Value> = askloop::call_results(&plain)
        .into_iter()
        .filter_map(|(place, i)| match &plain[i] {
            Message::Tool(result) => Some((
                place,
                json!({"content": result.content.to_value(), "isError": result.is_error}),
            )),
            _ => None,
        })
        .collect();
    let mut runs: HashMap<String, Option<RunRecord>> = HashMap::new();
    let mut out = Vec::with_capacity(stored.len());
    for (j, message) in stored.iter().enumerate() {
        let at_ms = message.created_at.timestamp_millis();
        let (role, content) = match &message.message {
            Message::Tool(_) => continue,
            Message::User { content } => ("user", text_content(content, at_ms)),
            Message::Assistant { content, tool_calls } if tool_calls.is_empty() => {
                ("assistant", text_content(content, at_ms))
            }
            Message::Assistant { content, tool_calls } => {
                if !runs.contains_key(&message.run_id) {
                    let run = state.store.get(&message.run_id).await?;
                    runs.insert(message.run_id.clone(), run);
                }
                let run = runs.get(&message.run_id).and_then(Option::as_ref);
                let mut parts = Vec::new();
                if !content.is_empty() {
                    parts.push(json!({"type": "text", "text": content, "createdAt": at_ms}));
                }
                let mut suspended = Map::new();
                let mut approvals = Map::new();
                for (k, call) in tool_calls.iter().enumerate() {
                    let pending = run.and_then(|r| match r.call_state(&call.id, state.now()) {
                        CallState::Waiting(waiting) => Some(waiting.call),
                        CallState::Held(held) => Some(held),
                        _ => None,
                    });
                    let mut invocation = json!({
                        "state": "call",
                        "toolCallId": call.id,
                        "toolName": call.name,
                        "args": call.args,
                    });
                    if let Some(result) = results.get(&(j, k)).filter(|_| pending.is_none()) {
                        invocation["state"] = json!("result");
                        invocation["result"] = result.clone();
                    }
                    // askloop's own: whether the call is a question of the
                    // built-in ask_user, which the model cannot say by naming
                    // a call so.
                    if call.name == askloop::ASK_USER_TOOL_ID
                        && run.is_some_and(|r| state.asks_with_ask_user(&r.agent_id))
                    {
                        invocation["builtInAskUser"] = json!(true);
                    }
                    // askloop's own: how the call was resolved, by whom and
                    // through what, as its run records it now.
                    if let Some(resolution) = run.and_then(|r| r.call_resolution(&call.id)) {
                        invocation["resolution"] = serde_json::to_value(resolution.on_wire()).unwrap_or(Value::Null);
                    }
                    parts.push(json!({"type": "tool-invocation", "toolInvocation": invocation}));
                    match pending {
                        Some(p) if p.kind == PendingKind::Approval => {
                            approvals.insert(
                                call.id.clone(),
                                json!({
                                    "toolCallId": call.id,
                                    "toolName": call.name,
                                    "args": call.args,
                                    "type": "approval",
                                    "runId": message.run_id,
                                    "resumeSchema": p.resume_schema.as_deref().map(Value::to_string),
                                }),
                            );
                        }
                        Some(p) => {
                            suspended.insert(
                                call.id.clone(),
                                json!({
                                    "toolCallId": call.id,
                                    "toolName": call.name,
                                    "args": call.args,
                                    "type": "suspension",
                                    "runId": message.run_id,
                                    "suspendPayload": p.suspend_payload,
                                    "resumeSchema": p.resume_schema.as_deref().map(Value::to_string),
                                }),
                            );
                        }
                        None => {}
                    }
                }
                let mut content = json!({"format": 2, "parts": parts});
                let mut metadata = Map::new();
                if !suspended.is_empty() {
                    metadata.insert("suspendedTools".into(), Value::Object(suspended));
                }
                if !approvals.is_empty() {
                    metadata.insert("pendingToolApprovals".into(), Value::Object(approvals));
                }
                if !metadata.is_empty() {
                    content["metadata"] = Value::Object(metadata);
                }
                ("assistant", content)
            }
            // A kind of message added later: shown as its text, if any.
            _ => ("assistant", text_content("", at_ms)),
        };
        out.push(json!({
            "id": message.id(),
            "content": content,
            "role": role,
            "createdAt": askloop::rfc3339(message.created_at),
            "threadId": thread.id,
            "resourceId": thread.resource_id,
        }));
    }
    Ok(out)
}

fn text_content(text: &str, at_ms: i64) -> Value {
    json!({
        "format": 2,
        "parts": [{"type": "text", "text": text, "createdAt": at_ms}],
        "content": text,
    })
}

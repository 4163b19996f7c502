//! Threads: conversations that outlive their runs.
//!
//! A thread belongs to a resource (a person, an account: whoever the
//! conversation is with) and is keyed by the resource and its own id, so
//! one resource's thread id names nothing of another's. Its messages are
//! numbered by a per-thread sequence, written in the same write as the run
//! step that produced them: a run started on a thread reads the thread's
//! last messages as its context, and every message the run adds (its input,
//! the model's replies, tool results) is appended to the thread in the
//! write that stores it on the run, so a crash can neither lose nor double
//! one. Open questions are never copied into the thread: a thread's
//! assistant message holding a call names its run, and the call's state is
//! read from the run store.
//!
//! Working memory and semantic recall (facts kept per resource or per
//! thread, messages found by meaning) are not here yet; a store of facts
//! keyed like threads is their natural home.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::StoreError;
use crate::message::{Message, ToolResult};

/// Which thread: its resource and its id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadKey {
    /// Whom the conversation is with.
    pub resource_id: String,
    /// The thread's id, unique within its resource.
    pub thread_id: String,
}

impl ThreadKey {
    /// The key of thread `thread_id` of `resource_id`.
    pub fn new(resource_id: impl Into<String>, thread_id: impl Into<String>) -> Self {
        ThreadKey {
            resource_id: resource_id.into(),
            thread_id: thread_id.into(),
        }
    }
}

/// A stored thread, without its messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Thread {
    /// The thread's id.
    pub id: String,
    /// The resource it belongs to.
    pub resource_id: String,
    /// The agent whose run created it.
    pub agent_id: String,
    /// Its title (empty until someone gives it one).
    pub title: String,
    /// Free-form data its owner attaches (`Null` for none).
    #[serde(default)]
    pub metadata: Value,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was last written (a message appended, a title changed).
    pub updated_at: DateTime<Utc>,
    /// How many messages it holds: the next message's sequence number.
    pub message_count: i64,
}

impl Thread {
    /// A new, empty thread.
    pub fn new(key: &ThreadKey, agent_id: impl Into<String>, now: DateTime<Utc>) -> Self {
        Thread {
            id: key.thread_id.clone(),
            resource_id: key.resource_id.clone(),
            agent_id: agent_id.into(),
            title: String::new(),
            metadata: Value::Null,
            created_at: now,
            updated_at: now,
            message_count: 0,
        }
    }

    /// Its key.
    pub fn key(&self) -> ThreadKey {
        ThreadKey::new(&self.resource_id, &self.id)
    }
}

/// One message of a thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadMessage {
    /// Its place in the thread, from 0.
    pub seq: i64,
    /// The run that added it.
    pub run_id: String,
    /// Its place in that run's messages: with the run id, the message's
    /// stable id ([`ThreadMessage::id`]).
    pub run_seq: i64,
    /// The message.
    pub message: Message,
    /// When it was appended.
    pub created_at: DateTime<Utc>,
}

impl ThreadMessage {
    /// The message's id: its run and its place in the run, the same however
    /// often it is read.
    pub fn id(&self) -> String {
        format!("{}-{}", self.run_id, self.run_seq)
    }
}

/// A run's place in a thread, stored with the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunMemory {
    /// The thread.
    #[serde(flatten)]
    pub key: ThreadKey,
    /// How many of the run's first messages came from the thread as
    /// context: only the messages after them are the run's own, appended to
    /// the thread.
    pub context: i64,
}

/// Which threads to list: newest first (by creation, then id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadQuery {
    /// Only threads of this resource.
    pub resource_id: Option<String>,
    /// Only threads created by this agent.
    pub agent_id: Option<String>,
    /// Only threads with this id (of any resource the other filters let
    /// through): a route that names a thread but not its resource finds it
    /// this way.
    pub thread_id: Option<String>,
    /// Skip this many.
    pub offset: u32,
    /// At most this many (all when `None`).
    pub limit: Option<u32>,
}

impl ThreadQuery {
    /// Whether `thread` is one this query lists (before offset and limit).
    pub fn matches(&self, thread: &Thread) -> bool {
        self.resource_id.as_deref().is_none_or(|r| thread.resource_id == r)
            && self.agent_id.as_deref().is_none_or(|a| thread.agent_id == a)
            && self.thread_id.as_deref().is_none_or(|t| thread.id == t)
    }
}

/// A change to a thread's title or metadata; `None` keeps what is stored.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ThreadEdit<'a> {
    /// The new title.
    pub title: Option<&'a str>,
    /// The new metadata.
    pub metadata: Option<&'a Value>,
}

/// How a deletion of a thread ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadDeletion {
    /// The thread, its messages and its runs are gone.
    Deleted,
    /// No such thread.
    NotFound,
    /// Runs of the thread are not finished (waiting on a person, or
    /// running): nothing was deleted.
    Busy {
        /// Those runs.
        runs: Vec<String>,
    },
}

/// Where threads live: the same database as the runs, since a run's step
/// and the messages it appends to its thread are one write.
///
/// A run whose record holds a [`RunMemory`] is on a thread: its
/// [`RunStore::create`](super::RunStore::create) creates the thread when it
/// does not exist yet and appends the run's messages after its context;
/// each [`RunStore::update`](super::RunStore::update) appends the step's
/// messages, numbered from the thread's counter in the same transaction.
#[async_trait]
pub trait ThreadStore: Send + Sync {
    /// Stores a new thread (with no messages). A thread with its key exists
    /// already: [`StoreError::ThreadExists`].
    async fn create_thread(&self, thread: &Thread) -> Result<(), StoreError>;

    /// Reads a thread, or `None` if its resource has no such thread.
    async fn thread(&self, key: &ThreadKey) -> Result<Option<Thread>, StoreError>;

    /// Changes a thread's title or metadata (and its `updated_at`); returns
    /// the thread as stored after, or `None` if there is no such thread.
    async fn update_thread(&self, key: &ThreadKey, edit: ThreadEdit<'_>) -> Result<Option<Thread>, StoreError>;

    /// Lists threads, newest first.
    async fn threads(&self, query: &ThreadQuery) -> Result<Vec<Thread>, StoreError>;

    /// How many threads [`ThreadStore::threads`] lists for `query`.
    async fn count_threads(&self, query: &ThreadQuery) -> Result<u64, StoreError>;

    /// Up to `limit` messages of a thread from sequence number `from`, in
    /// order: read by the sequence's index, so the last messages of a long
    /// thread cost what the first do.
    async fn thread_messages(&self, key: &ThreadKey, from: i64, limit: u32) -> Result<Vec<ThreadMessage>, StoreError>;

    /// Deletes a thread with its messages and its runs (their rows and
    /// messages), in one write, unless one of its runs is not finished.
    async fn delete_thread(&self, key: &ThreadKey) -> Result<ThreadDeletion, StoreError>;

    /// The first message of each thread of `keys` that has one, with its
    /// thread's key, in no particular order: what names an untitled thread
    /// in a listing. This reads each thread's first message in turn; a
    /// store over a database reads them all in one query.
    async fn first_messages(&self, keys: &[ThreadKey]) -> Result<Vec<(ThreadKey, ThreadMessage)>, StoreError> {
        let mut found = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(first) = self.thread_messages(key, 0, 1).await?.into_iter().next() {
                found.push((key.clone(), first));
            }
        }
        Ok(found)
    }
}

/// Which message holds the result of each tool call of `messages`: for a
/// call (the index of its assistant message, its index among that
/// message's calls), the index of its result. A result belongs to the
/// latest call before it with its id that has none yet: runs of one thread
/// may reuse call ids (models number them per conversation). Calls without
/// a result are not in the map.
pub fn call_results(messages: &[Message]) -> std::collections::HashMap<(usize, usize), usize> {
    let mut found = std::collections::HashMap::new();
    for (i, message) in messages.iter().enumerate() {
        let Message::Tool(result) = message else { continue };
        let owner = messages[..i]
            .iter()
            .enumerate()
            .rev()
            .find_map(|(j, earlier)| match earlier {
                Message::Assistant { tool_calls, .. } => tool_calls
                    .iter()
                    .enumerate()
                    .find(|(k, call)| call.id == result.tool_call_id && !found.contains_key(&(j, *k)))
                    .map(|(k, _)| (j, k)),
                _ => None,
            });
        if let Some(place) = owner {
            found.insert(place, i);
        }
    }
    found
}

/// What a model is given of a thread's messages: each tool call followed at
/// once by its result (a result the thread holds later, after other
/// messages, is moved up to its call; a call with none, a question nobody
/// answered, gets `unanswered`), and no result before its call (the window
/// of the last messages may start between them). Results are paired with
/// calls by [`call_results`]. A model API refuses a conversation holding a
/// call without its result.
pub fn context_messages(
    messages: Vec<Message>,
    unanswered: impl Fn(&crate::message::ToolCall) -> ToolResult,
) -> Vec<Message> {
    let mut found: std::collections::HashMap<(usize, usize), ToolResult> = call_results(&messages)
        .into_iter()
        .filter_map(|(place, i)| match &messages[i] {
            Message::Tool(result) => Some((place, result.clone())),
            _ => None,
        })
        .collect();
    let mut out = Vec::with_capacity(messages.len());
    for (j, message) in messages.into_iter().enumerate() {
        match message {
            // Placed after its call (or dropped, when its call is not in
            // the window).
            Message::Tool(_) => {}
            Message::Assistant { content, tool_calls } => {
                let paired: Vec<Message> = tool_calls
                    .iter()
                    .enumerate()
                    .map(|(k, call)| Message::Tool(found.remove(&(j, k)).unwrap_or_else(|| unanswered(call))))
                    .collect();
                out.push(Message::Assistant { content, tool_calls });
                out.extend(paired);
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::message::ToolCall;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "ask_user".into(),
            args: json!({"question": "?"}).into(),
        }
    }

    fn result(id: &str, text: &str) -> Message {
        Message::Tool(ToolResult {
            tool_call_id: id.into(),
            tool_name: "ask_user".into(),
            content: text.into(),
            is_error: false,
        })
    }

    fn unanswered(call: &ToolCall) -> ToolResult {
        ToolResult {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            content: "unanswered".into(),
            is_error: true,
        }
    }

    #[test]
    fn a_result_stored_after_other_messages_follows_its_call_at_once() {
        let thread = vec![
            Message::user("one"),
            Message::assistant("", vec![call("a")]),
            Message::user("two"),
            result("a", "staging"),
        ];
        assert_eq!(
            context_messages(thread, unanswered),
            vec![
                Message::user("one"),
                Message::assistant("", vec![call("a")]),
                result("a", "staging"),
                Message::user("two"),
            ]
        );
    }

    #[test]
    fn runs_of_one_thread_reusing_a_call_id_each_get_their_own_result() {
        let thread = vec![
            Message::user("one"),
            Message::assistant("", vec![call("a")]),
            result("a", "first"),
            Message::user("two"),
            Message::assistant("", vec![call("a")]),
            Message::user("three"),
            result("a", "second"),
        ];
        assert_eq!(
            context_messages(thread, unanswered),
            vec![
                Message::user("one"),
                Message::assistant("", vec![call("a")]),
                result("a", "first"),
                Message::user("two"),
                Message::assistant("", vec![call("a")]),
                result("a", "second"),
                Message::user("three"),
            ]
        );
    }

    #[test]
    fn a_call_without_a_result_gets_the_unanswered_one_and_a_result_without_its_call_is_left_out() {
        let thread = vec![
            result("gone", "from before the window"),
            Message::user("one"),
            Message::assistant("", vec![call("a"), call("b")]),
            result("b", "yes"),
        ];
        let context = context_messages(thread, unanswered);
        assert_eq!(
            context,
            vec![
                Message::user("one"),
                Message::assistant("", vec![call("a"), call("b")]),
                Message::Tool(unanswered(&call("a"))),
                result("b", "yes"),
            ]
        );
    }
}

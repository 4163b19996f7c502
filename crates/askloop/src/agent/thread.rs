//! A new run on a stored thread: the questions the thread still waits on
//! are superseded by the new message, and the run starts from the thread's
//! last messages.

use super::machine::{self, Request};
use super::options::ThreadOptions;
use super::{Agent, enter};
use crate::error::RunError;
use crate::id::IdKind;
use crate::message::{Message, ToolCall, ToolContent, ToolResult};
use crate::store::{RunMemory, RunQuery, RunStatus, StoreError, Thread, ThreadStore, context_messages};

impl Agent {
    /// The messages a run on `options`' thread starts from (the thread's
    /// last messages, then `input`) and its place in the thread.
    ///
    /// Runs of this agent on the thread that wait on a person are first
    /// superseded: a new message came instead of their answer (see
    /// [`Request::Supersede`]). A thread never holds a call without its
    /// result, so the model is never given one.
    pub(super) async fn thread_start(
        &self,
        options: &ThreadOptions,
        input: Vec<Message>,
    ) -> Result<(Vec<Message>, RunMemory), RunError> {
        IdKind::Resource.check(&options.key.resource_id)?;
        IdKind::Thread.check(&options.key.thread_id)?;
        let store = &self.inner.store;
        let threads: &dyn ThreadStore = store.thread_store().ok_or(StoreError::NoThreads)?;
        let waiting = store
            .list(&RunQuery {
                status: Some(RunStatus::Suspended),
                agent_id: Some(self.inner.id.clone()),
                thread: Some(options.key.clone()),
                ..RunQuery::default()
            })
            .await?;
        for run in waiting {
            let run_id = run.run_id.clone();
            let request = Request::Supersede {
                author: options.author.clone(),
            };
            if let enter::Outcome::Stream(_) = self.enter(&run_id, request, Some(run)).await? {
                return Err(RunError::internal(
                    &run_id,
                    "superseding its question started a stream of the run",
                ));
            }
        }
        let count = match threads.thread(&options.key).await? {
            Some(thread) => thread.message_count,
            None if options.title.is_some() || options.metadata.is_some() => {
                // A new thread with what the caller gave it; the run would
                // create it bare.
                let mut thread = Thread::new(&options.key, &self.inner.id, self.inner.clock.now());
                thread.title = options.title.clone().unwrap_or_default();
                thread.metadata = options.metadata.clone().unwrap_or(serde_json::Value::Null);
                match threads.create_thread(&thread).await {
                    Ok(()) | Err(StoreError::ThreadExists { .. }) => {}
                    Err(err) => return Err(err.into()),
                }
                0
            }
            None => 0,
        };
        let last = options.last_messages.unwrap_or(self.inner.last_messages);
        let from = count.saturating_sub(i64::from(last)).max(0);
        let stored = if last == 0 {
            Vec::new()
        } else {
            threads.thread_messages(&options.key, from, last).await?
        };
        let mut messages = context_messages(stored.into_iter().map(|m| m.message).collect(), unanswered);
        let context = messages.len() as i64;
        messages.extend(input);
        Ok((
            messages,
            RunMemory {
                key: options.key.clone(),
                context,
            },
        ))
    }
}

/// The result a call gets in a run's context when its thread holds none:
/// its run ended without one, or the answer is still on its way.
fn unanswered(call: &ToolCall) -> ToolResult {
    ToolResult {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: ToolContent::Text(machine::UNANSWERED.into()),
        is_error: true,
    }
}

//! What the channels that bring a question to people (email, Slack) share:
//! whether the call a delivery is about still waits, and what it asks, in
//! the form both render.

use askloop::{CallState, OutboxMessage, PendingKind, PendingToolCall, Question, RunStore};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::links::closed_how;

/// What became of one attempt to bring a question to people: a mail, a
/// Slack post.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// The channel took it (the SMTP server accepted the mail, Slack the
    /// post).
    Sent,
    /// Not sent, and never will be (the question was resolved first); the
    /// reason is recorded.
    NotSent(String),
    /// Not sent this time; try again later.
    Failed(String),
}

/// The call a delivery of `message` is about, its run read again when it
/// is sent: the call must still wait (the run suspended on it, its time limit
/// not passed), else nothing is sent and why is recorded. `what` names the
/// delivery in that record ("mail", "post").
pub(crate) async fn waiting_call(
    store: &dyn RunStore,
    message: &OutboxMessage,
    call_id: &str,
    now: DateTime<Utc>,
    what: &str,
) -> Result<PendingToolCall, Attempt> {
    let run = match store.get(&message.run_id).await {
        Ok(Some(run)) => run,
        Ok(None) => {
            return Err(Attempt::NotSent(format!(
                "not sent: run {} no longer exists",
                message.run_id
            )));
        }
        Err(err) => {
            return Err(Attempt::Failed(format!(
                "cannot read run {}: {}",
                message.run_id,
                askloop::ErrorChain(&err)
            )));
        }
    };
    match run.call_state(call_id, now) {
        CallState::Waiting(waiting) => Ok(waiting.call.clone()),
        state => Err(Attempt::NotSent(format!(
            "not sent: the question was closed before the {what} went out ({})",
            closed_how(&state)
        ))),
    }
}

/// What a waiting call asks, as a channel shows it.
pub(crate) enum Asked {
    /// An `ask_user` question (or any suspension with its shape).
    Question(Question),
    /// A call waiting for approval: the tool and its arguments.
    Approval { tool: String, args: String },
    /// Another tool's suspension: its payload as JSON, answered in text.
    Other { tool: String, payload: String },
}

pub(crate) fn asked(call: &PendingToolCall) -> Asked {
    let pretty = |value: &Value| serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    match call.kind {
        PendingKind::Approval => Asked::Approval {
            tool: call.tool_name.clone(),
            args: pretty(&call.args),
        },
        _ => match call.suspend_payload.as_deref().and_then(Question::from_payload) {
            Some(question) => Asked::Question(question),
            None => Asked::Other {
                tool: call.tool_name.clone(),
                payload: call.suspend_payload.as_deref().map(pretty).unwrap_or_default(),
            },
        },
    }
}

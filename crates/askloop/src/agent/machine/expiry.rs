//! Time limits on waiting calls, with no I/O: when a call stops waiting,
//! what the model is told when it does, and how an expiry is recorded
//! (whether an answer came too late is `calls.rs`'s to say). The machines
//! and the driver call these; they hold no state of their own.
//!
//! An expired question is resolved explicitly, never with an invented
//! answer: the model gets a tool result saying no answer came within the
//! limit. An expired approval counts as declined, with that reason.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::FittedDecision;
use crate::clock::rfc3339;
use crate::store::{ArgumentsEdit, Author, PendingToolCall, Resolution, ResolutionKind};

/// When a call made at `now` with time limit `limit` expires (none without
/// a limit). Kept to the microsecond, as every store keeps it.
pub(crate) fn deadline(limit: Option<std::time::Duration>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let limit = chrono::Duration::from_std(limit?).ok()?;
    let at = now.checked_add_signed(limit)?;
    Some(DateTime::from_timestamp_micros(at.timestamp_micros()).unwrap_or(at))
}

/// The call with its expiry set. The time also goes into the suspend
/// payload's `metadata.expiresAt` (RFC 3339), where the page and clients
/// read it to show a countdown; a payload that is not an object is left as
/// it is.
pub(crate) fn with_deadline(mut pending: PendingToolCall, expires_at: Option<DateTime<Utc>>) -> PendingToolCall {
    pending.expires_at = expires_at;
    if let (Some(at), Some(Value::Object(payload))) = (expires_at, pending.suspend_payload.as_mut().map(Arc::make_mut))
    {
        let metadata = payload
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Value::Object(metadata) = metadata {
            metadata.insert("expiresAt".to_owned(), Value::String(rfc3339(at)));
        }
    }
    pending
}

/// The tool result the model gets for a question nobody answered in time.
pub(crate) fn expired_question_text(expired_at: Option<DateTime<Utc>>) -> String {
    format!(
        "No answer came within the time limit: the question expired unanswered{}. Do not assume an answer; \
         carry on without it, or ask again if it is still needed.",
        at_suffix(expired_at)
    )
}

/// The reason an approval nobody gave in time is declined with.
pub(crate) fn expired_approval_reason(expired_at: Option<DateTime<Utc>>) -> String {
    format!(
        "Tool call was declined: no one approved it within the time limit{}.",
        at_suffix(expired_at)
    )
}

/// The record of `action`, a decision about `call` made at `now`: an
/// expiry is recorded at the call's time limit (the instant its question
/// showed as `metadata.expiresAt`, and a late answer is told), whenever a
/// sweep got to it; anything else at `now`. An approval with edited
/// arguments keeps the model's and the edited ones.
pub(crate) fn resolution(
    call: Option<&PendingToolCall>,
    action: &FittedDecision,
    author: Author,
    now: DateTime<Utc>,
) -> Resolution {
    let kind = action.resolution_kind();
    let at = match (kind, call.and_then(|c| c.expires_at)) {
        (ResolutionKind::Expired, Some(deadline)) => deadline,
        _ => now,
    };
    let edit = match (action, call) {
        (FittedDecision::Approve { args: Some(edited), .. }, Some(call)) => Some(ArgumentsEdit {
            original: Value::clone(&call.args),
            edited: edited.clone(),
        }),
        _ => None,
    };
    Resolution {
        tool_call_id: Some(action.tool_call_id().to_owned()),
        kind,
        at,
        author,
        edit,
        grant: None,
    }
}

fn at_suffix(at: Option<DateTime<Utc>>) -> String {
    at.map(|at| format!(" (it expired at {})", rfc3339(at)))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::PendingKind;
    use serde_json::json;
    use std::time::Duration;

    fn question(expires_at: Option<DateTime<Utc>>) -> PendingToolCall {
        PendingToolCall {
            tool_call_id: "c1".into(),
            tool_name: "ask_user".into(),
            args: json!({}).into(),
            kind: PendingKind::Suspended,
            suspend_payload: Some(json!({"question": "Which city?"}).into()),
            resume_schema: None,
            expires_at,
            started_at: None,
        }
    }

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn no_limit_means_no_deadline_and_an_untouched_payload() {
        assert_eq!(deadline(None, t("2026-01-01T00:00:00Z")), None);
        let p = with_deadline(question(None), None);
        assert_eq!(p.suspend_payload, Some(Arc::new(json!({"question": "Which city?"}))));
    }

    #[test]
    fn a_deadline_is_stored_on_the_call_and_shown_in_the_payload_metadata() {
        let at = deadline(Some(Duration::from_secs(90)), t("2026-01-01T00:00:00Z"));
        assert_eq!(at, Some(t("2026-01-01T00:01:30Z")));
        let p = with_deadline(question(None), at);
        assert_eq!(p.expires_at, at);
        assert_eq!(
            p.suspend_payload.unwrap()["metadata"]["expiresAt"],
            "2026-01-01T00:01:30.000Z"
        );
    }

    #[test]
    fn the_expiry_texts_say_no_answer_came_and_never_invent_one() {
        let at = Some(t("2026-01-01T00:01:30Z"));
        let text = expired_question_text(at);
        assert!(text.starts_with("No answer came within the time limit"), "{text}");
        assert!(text.contains("2026-01-01T00:01:30.000Z"), "{text}");
        assert!(expired_approval_reason(at).contains("declined"));
    }
}

//! Time limits on waiting calls, with no I/O: when a call stops waiting,
//! what the model is told when it does, and whether an answer came too late.
//! The driver and `Agent` call these; they hold no state of their own.
//!
//! An expired question is resolved explicitly, never with an invented
//! answer: the model gets a tool result saying no answer came within the
//! limit. An expired approval counts as declined, with that reason.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;

use crate::store::{PendingToolCall, ResolutionKind, RunRecord};

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
    if let (Some(at), Some(Value::Object(payload))) = (expires_at, pending.suspend_payload.as_mut()) {
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

/// When the call an answer targets expired, if it did: it is still pending
/// but its limit has passed at `now`, or it is no longer pending because it
/// was resolved as expired. `None` when the answer is not late.
pub(crate) fn expired_before_answer(
    run: &RunRecord,
    tool_call_id: Option<&str>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let id = tool_call_id?;
    if let Some(pending) = run.pending.iter().find(|p| p.tool_call_id == id) {
        return pending.expires_at.filter(|at| *at <= now);
    }
    run.resolution_of(id)
        .filter(|r| r.kind == ResolutionKind::Expired)
        .map(|r| r.at)
}

pub(crate) fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn at_suffix(at: Option<DateTime<Utc>>) -> String {
    at.map(|at| format!(" (it expired at {})", rfc3339(at)))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Author, Interface, PendingKind, Resolution, RunStatus};
    use serde_json::json;
    use std::time::Duration;

    fn question(expires_at: Option<DateTime<Utc>>) -> PendingToolCall {
        PendingToolCall {
            tool_call_id: "c1".into(),
            tool_name: "ask_user".into(),
            args: json!({}),
            kind: PendingKind::Suspended,
            suspend_payload: Some(json!({"question": "Which city?"})),
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
        assert_eq!(deadline(None, Utc::now()), None);
        let p = with_deadline(question(None), None);
        assert_eq!(p.suspend_payload, Some(json!({"question": "Which city?"})));
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

    #[test]
    fn an_answer_is_late_when_its_call_passed_its_limit_or_was_resolved_as_expired() {
        let limit = t("2026-01-01T00:01:30Z");
        let mut run = RunRecord {
            status: RunStatus::Suspended,
            pending: vec![question(Some(limit))],
            ..Default::default()
        };
        assert_eq!(expired_before_answer(&run, Some("c1"), t("2026-01-01T00:01:00Z")), None);
        assert_eq!(expired_before_answer(&run, Some("c1"), limit), Some(limit));
        assert_eq!(expired_before_answer(&run, None, limit), None);

        run.pending.clear();
        run.status = RunStatus::Completed;
        assert_eq!(expired_before_answer(&run, Some("c1"), limit), None);
        let resolved = Resolution {
            tool_call_id: Some("c1".into()),
            kind: ResolutionKind::Expired,
            at: limit,
            author: Author::via(Interface::Server),
        };
        run.resolutions.push(resolved);
        assert_eq!(expired_before_answer(&run, Some("c1"), limit), Some(limit));
    }
}

//! Notifications that someone must act (a question raised) or that someone
//! did (answered, declined, approved, expired), kept in the store as an
//! **outbox**: each is written in the same store write that suspends or
//! resolves the run, so a crash can neither lose one (the write happened,
//! so did the notification) nor invent one (the write failed, so no
//! notification). A delivery worker (the server's webhooks) then claims due
//! rows under a lease, sends them, and records the outcome.
//!
//! The core knows nothing of HTTP: an agent is given
//! [`Subscription`]s (a destination's name and the events it wants), and
//! writes one [`OutboxMessage`] per event and subscription. An agent with
//! none writes nothing and pays nothing.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::clock::{to_micros, up_to_millis};

use super::{Lease, PendingKind, PendingToolCall, Resolution, ResolutionKind};

/// What a notification announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum EventType {
    /// A question or an approval waits for a person.
    #[serde(rename = "question.raised")]
    QuestionRaised,
    /// A question got its answer.
    #[serde(rename = "question.answered")]
    QuestionAnswered,
    /// A question was declined, or a call waiting for approval was denied.
    #[serde(rename = "question.declined")]
    QuestionDeclined,
    /// A call waiting for approval was approved.
    #[serde(rename = "question.approved")]
    QuestionApproved,
    /// A question or approval got no answer within its time limit.
    #[serde(rename = "question.expired")]
    QuestionExpired,
}

impl EventType {
    /// Every event type.
    pub const ALL: [EventType; 5] = [
        EventType::QuestionRaised,
        EventType::QuestionAnswered,
        EventType::QuestionDeclined,
        EventType::QuestionApproved,
        EventType::QuestionExpired,
    ];

    /// The name on the wire (the body's `type`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::QuestionRaised => "question.raised",
            EventType::QuestionAnswered => "question.answered",
            EventType::QuestionDeclined => "question.declined",
            EventType::QuestionApproved => "question.approved",
            EventType::QuestionExpired => "question.expired",
        }
    }

    /// The event a resolution announces, if any (a cancel or a recovery
    /// announces none).
    pub fn of_resolution(kind: ResolutionKind) -> Option<EventType> {
        match kind {
            ResolutionKind::Answered => Some(EventType::QuestionAnswered),
            ResolutionKind::Declined | ResolutionKind::Denied => Some(EventType::QuestionDeclined),
            ResolutionKind::Approved => Some(EventType::QuestionApproved),
            ResolutionKind::Expired => Some(EventType::QuestionExpired),
            ResolutionKind::Cancelled | ResolutionKind::Recovered | ResolutionKind::Superseded => None,
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for EventType {
    type Err = crate::unknown_name::UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventType::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| crate::unknown_name::UnknownName::new("event", s, EventType::ALL.map(EventType::as_str)))
    }
}

/// Which notice of a raised question a notification is: the first, or one
/// held back until the question has waited a while (see
/// [`Subscription::later`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Notice {
    /// Sent when the question is raised.
    First,
    /// The same person again, the question still open.
    Reminder,
    /// Someone else, because the question is still open.
    Escalation,
}

impl Notice {
    /// The name in a held-back notification's body (`notice`).
    pub fn as_str(self) -> &'static str {
        match self {
            Notice::First => "first",
            Notice::Reminder => "reminder",
            Notice::Escalation => "escalation",
        }
    }

    /// Reads a body's `notice`.
    pub fn parse(name: &str) -> Option<Notice> {
        [Notice::First, Notice::Reminder, Notice::Escalation]
            .into_iter()
            .find(|n| n.as_str() == name)
    }
}

/// A destination that wants to hear of some events of an agent's runs
/// (see `AgentBuilder::notify`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Names the destination to the delivery worker (the server uses the
    /// webhook's URL).
    pub destination: String,
    /// The events it wants.
    pub events: Vec<EventType>,
    /// How long after a question is raised its notification is due (zero:
    /// at once). Held-back notices are for raised questions only.
    pub delay: std::time::Duration,
    /// Which notice it is.
    pub notice: Notice,
}

impl Subscription {
    /// A destination wanting `events`, each at once.
    pub fn new(destination: impl Into<String>, events: impl IntoIterator<Item = EventType>) -> Self {
        Subscription {
            destination: destination.into(),
            events: events.into_iter().collect(),
            delay: std::time::Duration::ZERO,
            notice: Notice::First,
        }
    }

    /// A destination to hear of a raised question only once it has waited
    /// `delay`: a reminder or an escalation. The notification is written
    /// with the suspension, as every other is, due `delay` later; the
    /// delivery worker reads the question again when it is due and drops
    /// it if the question was resolved meanwhile. None is written for a
    /// call whose time limit comes first.
    pub fn later(destination: impl Into<String>, delay: std::time::Duration, notice: Notice) -> Self {
        Subscription {
            destination: destination.into(),
            events: vec![EventType::QuestionRaised],
            delay,
            notice,
        }
    }

    /// Whether it wants `event`.
    pub fn wants(&self, event: EventType) -> bool {
        self.events.contains(&event)
    }
}

/// One notification to deliver, written with the run write that caused it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboxMessage {
    /// Unique, and the same on every attempt (the `webhook-id` a receiver
    /// dedupes on): `msg_` and a UUID v7.
    pub id: String,
    /// The run it is about.
    pub run_id: String,
    /// Where it goes ([`Subscription::destination`]).
    pub destination: String,
    /// What it announces.
    pub event: EventType,
    /// The body: `{type, timestamp, data}`.
    pub payload: Value,
    /// When it was written. Kept to the microsecond, as every store keeps
    /// it.
    pub created_at: DateTime<Utc>,
}

impl OutboxMessage {
    /// When it is first due: when it was written, or for a held-back notice
    /// (a reminder, an escalation) the body's `dueAt`. Stores schedule the
    /// first attempt here.
    pub fn due_at(&self) -> DateTime<Utc> {
        self.payload
            .get("dueAt")
            .and_then(Value::as_str)
            .and_then(|at| DateTime::parse_from_rfc3339(at).ok())
            .map_or(self.created_at, |at| to_micros(at.with_timezone(&Utc)))
    }

    /// Which notice of its question it is (the body's `notice`; the first
    /// when it names none).
    pub fn notice(&self) -> Notice {
        self.payload
            .get("notice")
            .and_then(Value::as_str)
            .and_then(Notice::parse)
            .unwrap_or(Notice::First)
    }
}

/// Where a delivery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DeliveryState {
    /// Not yet accepted by its destination; due at `next_at`.
    Pending,
    /// Accepted.
    Delivered,
    /// Given up on after the last allowed attempt.
    Dead,
}

impl DeliveryState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Dead => "dead",
        }
    }
}

impl std::str::FromStr for DeliveryState {
    type Err = crate::unknown_name::UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pending" => Ok(DeliveryState::Pending),
            "delivered" => Ok(DeliveryState::Delivered),
            "dead" => Ok(DeliveryState::Dead),
            other => Err(crate::unknown_name::UnknownName::new(
                "delivery state",
                other,
                ["pending", "delivered", "dead"],
            )),
        }
    }
}

/// A stored notification and how its delivery goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// What to deliver.
    #[serde(flatten)]
    pub message: OutboxMessage,
    /// Where it is.
    pub state: DeliveryState,
    /// How many attempts were finished (sent and answered, or failed).
    pub attempts: u32,
    /// When it is next due (for a pending one).
    pub next_at: DateTime<Utc>,
    /// What went wrong the last time, if anything did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Who is sending it now and until when (see
    /// [`DeliveryStore::claim_deliveries`](super::DeliveryStore::claim_deliveries)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
}

/// How an attempt ended (see
/// [`DeliveryStore::finish_delivery`](super::DeliveryStore::finish_delivery)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeliveryOutcome {
    /// The destination accepted it.
    Delivered,
    /// It failed; try again at `next_at`.
    Retry {
        /// When.
        next_at: DateTime<Utc>,
        /// What went wrong.
        error: String,
    },
    /// It failed for the last allowed time.
    Dead {
        /// What went wrong.
        error: String,
    },
}

/// The run a notification is about, for its body.
pub(crate) struct EventRun<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) agent_id: &'a str,
}

/// The notifications of one run write made at `now`: `raised` calls that now
/// wait (and did not before), and each resolution the write applies, with
/// its call as it waited, one message per event and subscription that
/// wants it.
pub(crate) fn messages_for(
    subscriptions: &[Subscription],
    run: EventRun<'_>,
    raised: &[&PendingToolCall],
    resolutions: &[(&Resolution, Option<&PendingToolCall>)],
    now: DateTime<Utc>,
) -> Vec<OutboxMessage> {
    // Each event: what, its body's data, when it happened, and the time
    // limit of the call it raises (none for a resolution).
    type Event = (EventType, Value, DateTime<Utc>, Option<DateTime<Utc>>);
    let mut events: Vec<Event> = Vec::new();
    let now = to_micros(now);
    for call in raised {
        events.push((
            EventType::QuestionRaised,
            call_data(&run, call, None),
            now,
            call.expires_at,
        ));
    }
    for &(resolution, call) in resolutions {
        let Some(event) = EventType::of_resolution(resolution.kind) else {
            continue;
        };
        let data = match call {
            Some(call) => call_data(&run, call, Some(resolution)),
            None => json!({
                "runId": run.run_id,
                "agentId": run.agent_id,
                "toolCallId": resolution.tool_call_id,
                "resolution": resolution.on_wire(),
            }),
        };
        events.push((event, data, resolution.at, None));
    }
    let mut messages = Vec::new();
    for (event, data, at, expires_at) in events {
        for subscription in subscriptions.iter().filter(|s| s.wants(event)) {
            let mut payload = json!({
                "type": event.as_str(),
                "timestamp": crate::rfc3339(at),
                "data": data,
            });
            if !subscription.delay.is_zero() {
                if event != EventType::QuestionRaised {
                    continue;
                }
                // On the millisecond, as the body sends it: the time it is
                // scheduled at is the one the body says.
                let Some(due) = chrono::Duration::from_std(subscription.delay)
                    .ok()
                    .and_then(|delay| now.checked_add_signed(delay))
                    .map(up_to_millis)
                else {
                    continue;
                };
                // A notice due when the question can no longer be answered
                // would only ever be dropped.
                if expires_at.is_some_and(|limit| due >= limit) {
                    continue;
                }
                payload["notice"] = json!(subscription.notice.as_str());
                payload["dueAt"] = json!(crate::rfc3339(due));
            }
            messages.push(OutboxMessage {
                id: format!("msg_{}", uuid::Uuid::now_v7().simple()),
                run_id: run.run_id.to_owned(),
                destination: subscription.destination.clone(),
                event,
                payload,
                created_at: now,
            });
        }
    }
    messages
}

/// The body's `data` for a call: what it asks (the suspend payload of a
/// question, the arguments of a call waiting for approval) and how it was
/// resolved, if it was.
fn call_data(run: &EventRun<'_>, call: &PendingToolCall, resolution: Option<&Resolution>) -> Value {
    let mut data = json!({
        "runId": run.run_id,
        "agentId": run.agent_id,
        "toolCallId": call.tool_call_id,
        "toolName": call.tool_name,
        "kind": match call.kind {
            PendingKind::Suspended => "question",
            PendingKind::Approval => "approval",
        },
        "args": call.args,
    });
    if let Some(payload) = &call.suspend_payload {
        data["suspendPayload"] = Value::clone(payload);
    }
    if let Some(at) = call.expires_at {
        data["expiresAt"] = json!(crate::rfc3339(at));
    }
    if let Some(resolution) = resolution {
        data["resolution"] = json!(resolution.on_wire());
    }
    data
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::{Author, Interface};

    fn question(id: &str) -> PendingToolCall {
        PendingToolCall {
            tool_call_id: id.into(),
            tool_name: "ask_user".into(),
            args: json!({"question": "Which region?"}).into(),
            kind: PendingKind::Suspended,
            suspend_payload: Some(json!({"question": "Which region?"}).into()),
            resume_schema: None,
            expires_at: None,
            started_at: None,
        }
    }

    #[test]
    fn event_names_read_back_and_an_unknown_one_lists_the_accepted() {
        for event in EventType::ALL {
            assert_eq!(event.as_str().parse::<EventType>().unwrap(), event);
            assert_eq!(serde_json::to_value(event).unwrap(), json!(event.as_str()));
        }
        let err = "question.asked".parse::<EventType>().unwrap_err().to_string();
        assert!(
            err.contains("question.asked") && err.contains("question.raised, question.answered"),
            "{err}"
        );
    }

    #[test]
    fn each_event_goes_to_the_subscriptions_that_want_it_with_its_own_id() {
        let subscriptions = [
            Subscription::new("a", EventType::ALL),
            Subscription::new("b", [EventType::QuestionAnswered]),
        ];
        let run = || EventRun {
            run_id: "r1",
            agent_id: "agent",
        };
        let call = question("c1");
        let now: DateTime<Utc> = "2026-01-02T03:04:05Z".parse().unwrap();
        let raised = messages_for(&subscriptions, run(), &[&call], &[], now);
        assert_eq!(raised.len(), 1);
        assert_eq!(raised[0].destination, "a");
        assert_eq!(raised[0].payload["type"], "question.raised");
        assert_eq!(raised[0].payload["data"]["suspendPayload"]["question"], "Which region?");
        assert_eq!(raised[0].payload["data"]["toolCallId"], "c1");

        let answer = Resolution::new(
            Some("c1"),
            ResolutionKind::Answered,
            now,
            Author::named(Interface::Http, "ops"),
        );
        let answered = messages_for(&subscriptions, run(), &[], &[(&answer, Some(&call))], now);
        assert_eq!(answered.len(), 2);
        assert_ne!(answered[0].id, answered[1].id);
        for message in &answered {
            assert_eq!(message.payload["type"], "question.answered");
            assert_eq!(message.payload["data"]["resolution"]["by"], "ops");
            assert_eq!(message.payload["data"]["resolution"]["kind"], "answered");
        }

        let cancel = Resolution::new(None, ResolutionKind::Cancelled, now, Author::default());
        assert!(messages_for(&subscriptions, run(), &[], &[(&cancel, None)], now).is_empty());
    }

    #[test]
    fn a_held_back_notice_is_due_after_its_delay_and_never_after_the_time_limit() {
        let subscriptions = [
            Subscription::new("mailto:alice@example.com", [EventType::QuestionRaised]),
            Subscription::later("mailto:alice@example.com", Duration::from_secs(3600), Notice::Reminder),
            Subscription::later(
                "mailto:bob@example.com",
                Duration::from_secs(4 * 3600),
                Notice::Escalation,
            ),
        ];
        let run = || EventRun {
            run_id: "r1",
            agent_id: "agent",
        };
        let now: DateTime<Utc> = "2026-01-02T03:04:05.123456Z".parse().unwrap();
        let call = question("c1");
        let raised = messages_for(&subscriptions, run(), &[&call], &[], now);
        let notices: Vec<(&str, Notice, DateTime<Utc>)> = raised
            .iter()
            .map(|m| (m.destination.as_str(), m.notice(), m.due_at()))
            .collect();
        let hours = |h: i64| now + chrono::Duration::hours(h);
        // Held back to the next millisecond, the precision the body sends.
        let later = |h: i64| up_to_millis(hours(h));
        assert_eq!(later(1), "2026-01-02T04:04:05.124Z".parse::<DateTime<Utc>>().unwrap());
        assert_eq!(
            notices,
            [
                ("mailto:alice@example.com", Notice::First, now),
                ("mailto:alice@example.com", Notice::Reminder, later(1)),
                ("mailto:bob@example.com", Notice::Escalation, later(4)),
            ]
        );
        assert!(
            raised[0].payload.get("dueAt").is_none(),
            "a first notice's body is as before"
        );

        // A limit two hours away leaves the reminder and drops the escalation.
        let limited = PendingToolCall {
            expires_at: Some(hours(2)),
            ..question("c2")
        };
        let raised = messages_for(&subscriptions, run(), &[&limited], &[], now);
        let notices: Vec<Notice> = raised.iter().map(OutboxMessage::notice).collect();
        assert_eq!(notices, [Notice::First, Notice::Reminder]);

        // A resolution is announced at once or not at all.
        let answer = Resolution::new(Some("c1"), ResolutionKind::Answered, now, Author::default());
        let later_only = &subscriptions[1..];
        assert!(messages_for(later_only, run(), &[], &[(&answer, Some(&call))], now).is_empty());
    }
}

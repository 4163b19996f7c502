//! Questions in Slack: when a run of an agent with Slack recipients raises a
//! question (or waits for an approval), the agent writes one notification
//! per channel into the store's outbox, in the same write, with the
//! destination `slack:<channel id>` (see `askloop_config`). The server's
//! outbox sender (`webhooks.rs`) hands those to `Slack`, which
//!
//! 1. reads the run again: a question resolved meanwhile is not posted (the
//!    delivery is recorded as not sent, with the reason);
//! 2. posts a message with the question and its answers as Block Kit
//!    buttons, a multi-select with a submit button, or a text field
//!    (`chat.postMessage`, with the bot token), the model's text escaped
//!    and mentions and link previews off (`blocks.rs`).
//!
//! A click comes back to `POST /slack/interactions` (`interactions.rs`),
//! signed by Slack with the app's signing secret; it answers the question
//! as the Slack user who clicked, if they are among the channel's
//! recipients, through the same exactly-once decision as every other
//! answer, and the message is updated to say who answered.
//!
//! A Slack API that cannot be reached, answers 5xx or 429
//! (`ratelimited`) fails the attempt: the outbox tries again with its
//! backoff, up to `max_attempts`, and records each attempt. Delivery is at
//! least once: a server that dies between Slack's acceptance and recording
//! it posts again.

mod blocks;
pub(crate) mod interactions;

pub use interactions::slack_signature;

use std::fmt;
use std::time::Duration;

use askloop::{ErrorChain, OutboxMessage, RunStore, Subscription};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::reach;
use crate::reach::Attempt;

/// Where Slack sends the clicks (the app's "Request URL" is the public URL
/// and this).
pub const INTERACTIONS_PATH: &str = "/slack/interactions";

/// The destinations of Slack notifications start with this.
pub const SLACK: &str = "slack:";

/// Slack's Web API, unless `[slack] api_url` says otherwise.
pub const DEFAULT_SLACK_API: &str = "https://slack.com/api";

/// How many attempts a post gets, unless `[slack] max_attempts` says
/// otherwise.
pub const DEFAULT_SLACK_ATTEMPTS: u32 = 20;

/// How long one call of Slack's API may take, unless `[slack] timeout`
/// says otherwise.
pub const DEFAULT_SLACK_TIMEOUT: Duration = Duration::from_secs(10);

/// A channel questions are posted to, and who may answer them there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackRecipient {
    /// The channel's id (`C0123ABC`).
    pub channel: String,
    /// The Slack user ids that may answer (`U0123ABC`).
    pub users: Vec<String>,
    /// A user group whose members may answer (`S0123ABC`), read from
    /// Slack (`usergroups.users.list`) when someone clicks.
    pub usergroup: Option<String>,
    /// Only calls of these tools are posted; empty: every call.
    pub tools: Vec<String>,
    /// How long a question waits before it is posted (zero: at once); more
    /// than zero makes the post an escalation.
    pub after: Duration,
    /// How long after the first post it is posted again if still open.
    pub remind_after: Option<Duration>,
}

impl SlackRecipient {
    /// A channel where `users` may answer, posted every question at once.
    pub fn new(channel: impl Into<String>, users: impl IntoIterator<Item = impl Into<String>>) -> Self {
        SlackRecipient {
            channel: channel.into(),
            users: users.into_iter().map(Into::into).collect(),
            usergroup: None,
            tools: Vec::new(),
            after: Duration::ZERO,
            remind_after: None,
        }
    }

    /// The outbox destination of its posts.
    pub fn destination(&self) -> String {
        format!("{SLACK}{}", self.channel)
    }

    /// The subscriptions an agent writes its posts with: the first notice
    /// (at once, or after [`after`](Self::after)), and a reminder
    /// [`remind_after`](Self::remind_after) later.
    pub fn subscriptions(&self) -> Vec<Subscription> {
        crate::email::notices(self.destination(), self.after, self.remind_after)
    }
}

/// `[slack]`, checked: the app's bot token and signing secret, and each
/// agent's channels. Its `Debug` shows neither secret.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlackSettings {
    /// The bot token (`xoxb-...`) messages are posted with.
    pub bot_token: String,
    /// The signing secret Slack signs interactions with.
    pub signing_secret: String,
    /// Slack's Web API base URL.
    pub api_url: String,
    /// Attempts per post before it is given up on.
    pub max_attempts: u32,
    /// How long one API call may take.
    pub timeout: Duration,
    /// Each agent's channels: (agent id, recipient).
    pub recipients: Vec<(String, SlackRecipient)>,
}

impl fmt::Debug for SlackSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlackSettings")
            .field("api_url", &self.api_url)
            .field("max_attempts", &self.max_attempts)
            .field("timeout", &self.timeout)
            .field("recipients", &self.recipients)
            .finish_non_exhaustive()
    }
}

impl SlackSettings {
    /// Settings for a Slack app, with no channel yet, on Slack's own API.
    pub fn new(bot_token: impl Into<String>, signing_secret: impl Into<String>) -> Self {
        SlackSettings {
            bot_token: bot_token.into(),
            signing_secret: signing_secret.into(),
            api_url: DEFAULT_SLACK_API.to_owned(),
            max_attempts: DEFAULT_SLACK_ATTEMPTS,
            timeout: DEFAULT_SLACK_TIMEOUT,
            recipients: Vec::new(),
        }
    }

    /// The channels of agent `agent_id`.
    pub fn recipients_of<'a>(&'a self, agent_id: &'a str) -> impl Iterator<Item = &'a SlackRecipient> + 'a {
        self.recipients
            .iter()
            .filter(move |(a, _)| a == agent_id)
            .map(|(_, r)| r)
    }

    fn recipient(&self, agent_id: &str, channel: &str) -> Option<&SlackRecipient> {
        self.recipients
            .iter()
            .find(|(a, r)| a == agent_id && r.channel == channel)
            .map(|(_, r)| r)
    }
}

/// A Slack app's client: posts questions, updates them once answered, and
/// checks interactions.
pub(crate) struct Slack {
    settings: SlackSettings,
    client: reqwest::Client,
}

impl fmt::Debug for Slack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slack").field("settings", &self.settings).finish()
    }
}

/// Why a call of Slack's API did not work.
#[derive(Debug)]
pub(crate) enum ApiFailure {
    /// Worth trying again: no answer, a 5xx, or rate limited.
    Transient(String),
    /// Slack said no (`{"ok": false, "error": ...}`) for a reason another
    /// attempt will not change.
    Refused(String),
}

impl fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiFailure::Transient(why) | ApiFailure::Refused(why) => f.write_str(why),
        }
    }
}

impl Slack {
    pub(crate) fn new(settings: SlackSettings) -> Result<Slack, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Slack { settings, client })
    }

    pub(crate) fn settings(&self) -> &SlackSettings {
        &self.settings
    }

    pub(crate) fn max_attempts(&self) -> u32 {
        self.settings.max_attempts
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.settings.timeout
    }

    /// Calls Slack's Web API method `method` with a JSON `body`, with the
    /// bot token; `Ok` holds Slack's answer when it says `ok`.
    pub(crate) async fn call(&self, method: &str, body: &Value) -> Result<Value, ApiFailure> {
        let url = format!("{}/{method}", self.settings.api_url.trim_end_matches('/'));
        let response = self
            .client
            .post(&url)
            .bearer_auth(&self.settings.bot_token)
            .json(body)
            .send()
            .await
            .map_err(|err| ApiFailure::Transient(format!("Slack {method}: {}", ErrorChain(&err))))?;
        self.answer_of(method, response).await
    }

    /// A GET of method `method` with `query`, with the bot token.
    pub(crate) async fn get(&self, method: &str, query: &[(&str, &str)]) -> Result<Value, ApiFailure> {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(query)
            .finish();
        let url = format!("{}/{method}?{query}", self.settings.api_url.trim_end_matches('/'));
        let response = self
            .client
            .get(&url)
            .bearer_auth(&self.settings.bot_token)
            .send()
            .await
            .map_err(|err| ApiFailure::Transient(format!("Slack {method}: {}", ErrorChain(&err))))?;
        self.answer_of(method, response).await
    }

    async fn answer_of(&self, method: &str, response: reqwest::Response) -> Result<Value, ApiFailure> {
        let status = response.status();
        if status.as_u16() == 429 || status.is_server_error() {
            let wait = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(|v| format!(" (Retry-After: {v})"))
                .unwrap_or_default();
            return Err(ApiFailure::Transient(format!("Slack {method}: HTTP {status}{wait}")));
        }
        let body: Value = response
            .json()
            .await
            .map_err(|err| ApiFailure::Transient(format!("Slack {method}: an answer that is not JSON: {err}")))?;
        if body.get("ok").and_then(Value::as_bool) == Some(true) {
            return Ok(body);
        }
        let error = body.get("error").and_then(Value::as_str).unwrap_or("no error given");
        let why = format!("Slack {method}: {error}");
        if error == "ratelimited" || error == "internal_error" || error == "fatal_error" {
            Err(ApiFailure::Transient(why))
        } else {
            Err(ApiFailure::Refused(why))
        }
    }

    /// One attempt to post the question `message` announces, at `now`.
    pub(crate) async fn deliver(&self, store: &dyn RunStore, message: &OutboxMessage, now: DateTime<Utc>) -> Attempt {
        let channel = message.destination.strip_prefix(SLACK).unwrap_or_default();
        let data = message.payload.get("data");
        let field = |name: &str| {
            data.and_then(|d| d.get(name))
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let (agent, call_id) = (field("agentId"), field("toolCallId"));
        let Some(recipient) = self.settings.recipient(agent, channel) else {
            return Attempt::Failed(format!(
                "no Slack channel {channel:?} of agent {agent:?} in this server's configuration ([agents.{agent}] slack)"
            ));
        };
        let call = match reach::waiting_call(store, message, call_id, now, "post").await {
            Ok(call) => call,
            Err(outcome) => return outcome,
        };
        if !recipient.tools.is_empty() && !recipient.tools.contains(&call.tool_name) {
            return Attempt::NotSent(format!(
                "not sent: channel {channel} is posted calls of {} only, not of {}",
                recipient.tools.join(", "),
                call.tool_name
            ));
        }
        let Some(question) = blocks::QuestionRef::new(&message.run_id, call_id) else {
            return Attempt::NotSent(format!(
                "not sent: run {} and call {call_id} name a question too long to carry in a Slack message",
                message.run_id
            ));
        };
        let post = blocks::question_message(&blocks::Posted {
            channel,
            agent,
            question: &question,
            call: &call,
            notice: message.notice(),
            raised_at: message.created_at,
        });
        match self.call("chat.postMessage", &post).await {
            Ok(_) => Attempt::Sent,
            Err(ApiFailure::Transient(why)) => Attempt::Failed(why),
            Err(ApiFailure::Refused(why)) => Attempt::Failed(why),
        }
    }
}

/// A JSON body for Slack's `response_url`: a message only `text`'s reader
/// sees, leaving the original as it is.
pub(crate) fn ephemeral(text: &str) -> Value {
    json!({
        "response_type": "ephemeral",
        "replace_original": false,
        "text": blocks::escape(text),
    })
}

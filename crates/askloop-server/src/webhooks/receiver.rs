//! A receiver of the store's notifications: where they are POSTed, the
//! secret they are signed with (the Standard Webhooks way), which events
//! and agents it hears of, and how hard to try. `askloop.toml`'s
//! `[[webhooks]]` tables are read into these (`askloop_config`); a program
//! can make them itself with [`WebhookConfig::new`].

use std::fmt;
use std::time::Duration;

use askloop::EventType;
use base64::Engine;

/// Attempts of one delivery before it is given up on, by default.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;

/// How long one attempt may take, by default.
pub const DEFAULT_WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// One receiver of notifications (an `askloop.toml` `[[webhooks]]` table,
/// checked).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebhookConfig {
    /// Where to POST (`http://` or `https://`). Also names the webhook in
    /// the store's outbox, so two tables may not share it.
    pub url: String,
    /// The signing secret.
    pub secret: WebhookSecret,
    /// The events it gets.
    pub events: Vec<EventType>,
    /// The agents whose runs it hears of (`None`: every agent).
    pub agents: Option<Vec<String>>,
    /// Attempts before a delivery is given up on.
    pub max_attempts: u32,
    /// How long one attempt may take.
    pub timeout: Duration,
}

impl WebhookConfig {
    /// A receiver at `url` of every event of every agent, with the default
    /// attempts and timeout; set the public fields to narrow it.
    pub fn new(url: impl Into<String>, secret: WebhookSecret) -> Self {
        WebhookConfig {
            url: url.into(),
            secret,
            events: EventType::ALL.to_vec(),
            agents: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            timeout: DEFAULT_WEBHOOK_TIMEOUT,
        }
    }

    /// Whether it hears of the runs of `agent_id`.
    pub fn covers(&self, agent_id: &str) -> bool {
        self.agents
            .as_ref()
            .is_none_or(|agents| agents.iter().any(|a| a == agent_id))
    }
}

/// A Standard Webhooks signing secret: the bytes of the base64 after
/// `whsec_`. Its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(Vec<u8>);

/// What a webhook signing secret is written as.
const SECRET_ACCEPTED: &str = "a Standard Webhooks secret is \"whsec_\" followed by base64 of random bytes \
                               (e.g. from: echo \"whsec_$(openssl rand -base64 32)\")";

/// A webhook signing secret askloop cannot use, saying what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSecret {
    /// It does not start with `whsec_`.
    #[error("the secret does not start with whsec_; {SECRET_ACCEPTED}")]
    NoPrefix,
    /// What follows `whsec_` is not base64.
    #[error("the part after whsec_ is not base64 ({0}); {SECRET_ACCEPTED}")]
    NotBase64(String),
    /// It holds fewer than 16 bytes.
    #[error("the secret is {0} bytes; give at least 16 (24 to 64 is usual); {SECRET_ACCEPTED}")]
    TooShort(usize),
}

impl WebhookSecret {
    /// Reads `whsec_<base64>`, or says what is accepted.
    pub fn parse(text: &str) -> Result<Self, InvalidSecret> {
        let Some(encoded) = text.trim().strip_prefix("whsec_") else {
            return Err(InvalidSecret::NoPrefix);
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|err| InvalidSecret::NotBase64(err.to_string()))?;
        if bytes.len() < 16 {
            return Err(InvalidSecret::TooShort(bytes.len()));
        }
        Ok(WebhookSecret(bytes))
    }

    /// The key bytes HMAC is computed with.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(<hidden>)")
    }
}

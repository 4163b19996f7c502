//! `[[webhooks]]` and `public_url` in `askloop.toml`: where notifications of
//! questions go, signed the Standard Webhooks way.
//!
//! ```toml
//! public_url = "https://askloop.example.com"   # links in notifications: <public_url>/runs/<runId>
//!
//! [[webhooks]]
//! url = "https://hooks.example.com/askloop"
//! secret_env = "ASKLOOP_WEBHOOK_SECRET"        # or: secret = "whsec_..." (base64 after whsec_)
//! events = ["question.raised", "question.expired"]   # default: every event
//! agents = ["deployer"]                        # default: every agent
//! max_attempts = 10                            # then the delivery is given up on (dead)
//! timeout = "10s"                              # per attempt
//! ```

use std::path::Path;

use askloop::EventType;
use askloop_server::{DEFAULT_MAX_ATTEMPTS, DEFAULT_WEBHOOK_TIMEOUT, WebhookConfig, WebhookSecret};

use super::raw::RawWebhook;
use super::{ConfigError, duration};

/// Checks `public_url`: an http(s) URL, kept without a trailing slash.
pub(super) fn resolve_public_url(file: &Path, raw: Option<String>) -> Result<Option<String>, ConfigError> {
    let Some(url) = raw else { return Ok(None) };
    if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() <= "https://".len() {
        return Err(ConfigError::new(
            file,
            "public_url",
            format!(
                "{url:?} is not an http:// or https:// URL; give the address people open the page at, e.g. https://askloop.example.com"
            ),
        ));
    }
    Ok(Some(url.trim_end_matches('/').to_owned()))
}

/// Checks every `[[webhooks]]` table; `agents` are the configured agent ids.
pub(super) fn resolve_webhooks(
    file: &Path,
    raw: Vec<RawWebhook>,
    agents: &[String],
) -> Result<Vec<WebhookConfig>, ConfigError> {
    let mut hooks: Vec<WebhookConfig> = Vec::with_capacity(raw.len());
    for (i, hook) in raw.into_iter().enumerate() {
        let key = |field: &str| format!("webhooks[{i}].{field}");
        let Some(url) = hook.url.filter(|u| !u.trim().is_empty()) else {
            return Err(ConfigError::new(
                file,
                key("url"),
                "missing: give url = \"https://...\" (where notifications are POSTed)",
            ));
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ConfigError::new(
                file,
                key("url"),
                format!("{url:?} is not an http:// or https:// URL"),
            ));
        }
        if hooks.iter().any(|h| h.url == url) {
            return Err(ConfigError::new(
                file,
                key("url"),
                format!("another webhook has the url {url:?}; give each receiver one table"),
            ));
        }
        let secret = match (hook.secret, hook.secret_env) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    file,
                    key("secret_env"),
                    "give either secret or secret_env, not both",
                ));
            }
            (None, None) => {
                return Err(ConfigError::new(
                    file,
                    key("secret"),
                    "missing: give secret = \"whsec_...\" or secret_env = \"NAME\" (an environment variable holding it)",
                ));
            }
            (Some(secret), None) => WebhookSecret::parse(&secret)
                .map_err(|problem| ConfigError::new(file, key("secret"), problem.to_string()))?,
            (None, Some(name)) => {
                let value = std::env::var(&name).map_err(|_| {
                    ConfigError::new(
                        file,
                        key("secret_env"),
                        format!("the environment variable {name} is not set (or not UTF-8); set it to whsec_..."),
                    )
                })?;
                WebhookSecret::parse(&value)
                    .map_err(|problem| ConfigError::new(file, key("secret_env"), format!("{name}: {problem}")))?
            }
        };
        let events = match hook.events {
            None => EventType::ALL.to_vec(),
            Some(names) if names.is_empty() => {
                return Err(ConfigError::new(
                    file,
                    key("events"),
                    "no events: leave the key out for every event, or name some",
                ));
            }
            Some(names) => {
                let mut events = Vec::with_capacity(names.len());
                for (j, name) in names.iter().enumerate() {
                    let event: EventType = name.parse().map_err(|problem: askloop::UnknownName| {
                        ConfigError::new(file, format!("webhooks[{i}].events[{j}]"), problem.to_string())
                    })?;
                    if !events.contains(&event) {
                        events.push(event);
                    }
                }
                events
            }
        };
        if let Some(names) = &hook.agents {
            for (j, name) in names.iter().enumerate() {
                if !agents.contains(name) {
                    return Err(ConfigError::new(
                        file,
                        format!("webhooks[{i}].agents[{j}]"),
                        format!(
                            "no agent {name:?} is configured; configured agents: {}",
                            agents.join(", ")
                        ),
                    ));
                }
            }
        }
        let max_attempts = match hook.max_attempts {
            Some(0) => {
                return Err(ConfigError::new(
                    file,
                    key("max_attempts"),
                    format!("0 would never send; give a positive number (the default is {DEFAULT_MAX_ATTEMPTS})"),
                ));
            }
            Some(n) => n,
            None => DEFAULT_MAX_ATTEMPTS,
        };
        let timeout = hook
            .timeout
            .map(|text| {
                duration::parse_limit(&text)
                    .map_err(|problem| ConfigError::new(file, key("timeout"), problem.to_string()))
            })
            .transpose()?
            .unwrap_or(DEFAULT_WEBHOOK_TIMEOUT);
        let mut receiver = WebhookConfig::new(url, secret);
        receiver.events = events;
        receiver.agents = hook.agents;
        receiver.max_attempts = max_attempts;
        receiver.timeout = timeout;
        hooks.push(receiver);
    }
    Ok(hooks)
}

//! `[slack]` and each agent's `[[agents.<id>.slack]]` in `askloop.toml`:
//! questions posted to Slack channels, answered with the message's buttons
//! by the people each channel names.
//!
//! ```toml
//! [slack]
//! bot_token_env = "ASKLOOP_SLACK_BOT_TOKEN"           # xoxb-...
//! signing_secret_env = "ASKLOOP_SLACK_SIGNING_SECRET"
//! max_attempts = 20                                    # then the post is given up on (dead)
//! timeout = "10s"                                      # per call of Slack's API
//!
//! [[agents.deployer.slack]]                            # repeat for each channel
//! channel = "C0123DEPLOY"
//! users = ["U0123ALICE", "U0456BOB"]                   # who may answer there
//! usergroup = "S0123ONCALL"                            # and/or the members of a user group
//! tools = ["write_file"]                               # optional: only calls of these tools
//! remind_after = "2h"                                  # optional: posted again if still open
//! after = "30m"                                        # optional: posted only if still open then
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use askloop_server::slack::{DEFAULT_SLACK_ATTEMPTS, DEFAULT_SLACK_TIMEOUT, SlackRecipient, SlackSettings};
use serde::Deserialize;

use super::reach::Reach;
use super::{ConfigError, duration};

/// `[slack]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSlack {
    bot_token_env: Option<String>,
    signing_secret_env: Option<String>,
    api_url: Option<String>,
    max_attempts: Option<u32>,
    timeout: Option<String>,
}

/// One `[[agents.<id>.slack]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawChannel {
    channel: Option<String>,
    users: Option<Vec<String>>,
    usergroup: Option<String>,
    tools: Option<Vec<String>>,
    after: Option<String>,
    remind_after: Option<String>,
}

/// Whether `id` looks like a Slack id: upper-case letters and digits,
/// starting with `prefixes`' letter.
fn is_slack_id(id: &str, prefixes: &str) -> bool {
    id.len() >= 2
        && id.len() <= 40
        && id.starts_with(|c: char| prefixes.contains(c))
        && id.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

/// Checks `[slack]` and every agent's channels (`channels`: by agent id, as
/// written).
pub(super) fn resolve_slack(
    file: &Path,
    raw: Option<RawSlack>,
    channels: BTreeMap<String, Vec<RawChannel>>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<SlackSettings>, ConfigError> {
    let Some(raw) = raw else {
        if let Some((agent, _)) = channels.iter().find(|(_, list)| !list.is_empty()) {
            return Err(ConfigError::new(
                file,
                format!("agents.{agent}.slack"),
                "channels need the Slack app to post with: add a [slack] table with bot_token_env and signing_secret_env",
            ));
        }
        return Ok(None);
    };
    let secret = |key: &str, variable: Option<String>, example: &str| {
        let Some(variable) = variable.filter(|v| !v.trim().is_empty()) else {
            return Err(ConfigError::new(
                file,
                format!("slack.{key}"),
                format!("missing: give {key} = \"{example}\" (the environment variable holding it)"),
            ));
        };
        env(&variable).filter(|v| !v.trim().is_empty()).ok_or_else(|| {
            ConfigError::new(
                file,
                format!("slack.{key}"),
                format!("the environment variable {variable} is not set"),
            )
        })
    };
    let bot_token = secret("bot_token_env", raw.bot_token_env, "ASKLOOP_SLACK_BOT_TOKEN")?;
    let signing_secret = secret(
        "signing_secret_env",
        raw.signing_secret_env,
        "ASKLOOP_SLACK_SIGNING_SECRET",
    )?;
    let mut settings = SlackSettings::new(bot_token, signing_secret);
    if let Some(url) = raw.api_url {
        let url = url.trim().trim_end_matches('/').to_owned();
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(ConfigError::new(
                file,
                "slack.api_url",
                format!("{url:?} is not an http(s) URL; leave it out for Slack's own (https://slack.com/api)"),
            ));
        }
        settings.api_url = url;
    }
    settings.max_attempts = match raw.max_attempts {
        Some(0) => {
            return Err(ConfigError::new(
                file,
                "slack.max_attempts",
                format!("0 would never post; give a positive number (the default is {DEFAULT_SLACK_ATTEMPTS})"),
            ));
        }
        Some(n) => n,
        None => DEFAULT_SLACK_ATTEMPTS,
    };
    settings.timeout = raw
        .timeout
        .map(|text| {
            duration::parse_limit(&text).map_err(|problem| ConfigError::new(file, "slack.timeout", problem.to_string()))
        })
        .transpose()?
        .unwrap_or(DEFAULT_SLACK_TIMEOUT);
    for (agent, list) in channels {
        let mut resolved: Vec<SlackRecipient> = Vec::with_capacity(list.len());
        for (i, raw) in list.into_iter().enumerate() {
            let key = |field: &str| format!("agents.{agent}.slack[{i}].{field}");
            let channel = raw.channel.map(|c| c.trim().to_owned()).unwrap_or_default();
            if !is_slack_id(&channel, "CGD") {
                return Err(ConfigError::new(
                    file,
                    key("channel"),
                    format!(
                        "{channel:?} is not a Slack channel id; give the id (e.g. \"C0123DEPLOY\", from the channel's details), not its name"
                    ),
                ));
            }
            if resolved.iter().any(|r| r.channel == channel) {
                return Err(ConfigError::new(
                    file,
                    key("channel"),
                    format!("{channel} is listed twice for agent {agent}; give each channel one table"),
                ));
            }
            let users = raw.users.unwrap_or_default();
            if let Some((j, user)) = users.iter().enumerate().find(|(_, u)| !is_slack_id(u, "UW")) {
                return Err(ConfigError::new(
                    file,
                    format!("agents.{agent}.slack[{i}].users[{j}]"),
                    format!(
                        "{user:?} is not a Slack user id; give ids like \"U0123ALICE\" (a member's profile, \"Copy member ID\")"
                    ),
                ));
            }
            let usergroup = raw.usergroup.map(|g| g.trim().to_owned());
            if let Some(group) = &usergroup
                && !is_slack_id(group, "S")
            {
                return Err(ConfigError::new(
                    file,
                    key("usergroup"),
                    format!("{group:?} is not a Slack user group id; give an id like \"S0123ONCALL\""),
                ));
            }
            if users.is_empty() && usergroup.is_none() {
                return Err(ConfigError::new(
                    file,
                    key("users"),
                    "nobody may answer in this channel: give users = [\"U0123ALICE\"] or usergroup = \"S0123ONCALL\"",
                ));
            }
            let reach = Reach::read(
                file,
                &format!("agents.{agent}.slack[{i}]"),
                raw.tools,
                raw.after,
                raw.remind_after,
            )?;
            let mut recipient = SlackRecipient::new(channel, users);
            recipient.usergroup = usergroup;
            recipient.tools = reach.tools;
            recipient.after = reach.after;
            recipient.remind_after = reach.remind_after;
            resolved.push(recipient);
        }
        settings
            .recipients
            .extend(resolved.into_iter().map(|r| (agent.clone(), r)));
    }
    Ok(Some(settings))
}

#[cfg(test)]
mod tests {
    use super::super::ServerConfig;
    use std::path::Path;

    const BASE: &str = "[agents.deployer]\ninstructions = \"x\"\n";
    const SLACK: &str = "[slack]\nbot_token_env = \"BOT\"\nsigning_secret_env = \"SIGNING\"\n";

    fn env(name: &str) -> Option<String> {
        match name {
            "BOT" => Some("xoxb-1".to_owned()),
            "SIGNING" => Some("s".repeat(32)),
            _ => None,
        }
    }

    fn load(text: &str) -> Result<ServerConfig, super::ConfigError> {
        ServerConfig::from_toml_with_env(Path::new("/etc/askloop.toml"), text, &env)
    }

    #[test]
    fn a_slack_table_and_an_agents_channels_read_with_their_people_and_delays() {
        let config = load(&format!(
            "{BASE}{SLACK}timeout = \"5s\"\n[[agents.deployer.slack]]\nchannel = \"C0DEPLOY\"\nusers = [\"U0ALICE\"]\n\
             usergroup = \"S0ONCALL\"\nremind_after = \"2h\"\n"
        ))
        .unwrap();
        let slack = config.slack.unwrap();
        assert_eq!((slack.bot_token.as_str(), slack.timeout.as_secs()), ("xoxb-1", 5));
        assert!(!format!("{slack:?}").contains("xoxb-1"), "Debug hides the token");
        let channel: Vec<_> = slack.recipients_of("deployer").collect();
        assert_eq!(channel[0].users, ["U0ALICE"]);
        assert_eq!(channel[0].usergroup.as_deref(), Some("S0ONCALL"));
        assert_eq!(channel[0].subscriptions().len(), 2, "the first post and a reminder");
    }

    #[test]
    fn bad_slack_settings_name_the_key_and_what_is_accepted() {
        let channel = "[[agents.deployer.slack]]\n";
        let cases = [
            (
                format!("{BASE}{channel}channel = \"C0A\"\nusers = [\"U0A\"]\n"),
                "agents.deployer.slack",
                "add a [slack] table",
            ),
            (
                format!("{BASE}[slack]\nsigning_secret_env = \"SIGNING\"\n"),
                "slack.bot_token_env",
                "missing",
            ),
            (
                format!("{BASE}[slack]\nbot_token_env = \"NOPE\"\nsigning_secret_env = \"SIGNING\"\n"),
                "slack.bot_token_env",
                "NOPE is not set",
            ),
            (
                format!("{BASE}{SLACK}{channel}channel = \"#deploys\"\nusers = [\"U0A\"]\n"),
                "agents.deployer.slack[0].channel",
                "not a Slack channel id",
            ),
            (
                format!("{BASE}{SLACK}{channel}channel = \"C0A\"\nusers = [\"alice\"]\n"),
                "agents.deployer.slack[0].users[0]",
                "not a Slack user id",
            ),
            (
                format!("{BASE}{SLACK}{channel}channel = \"C0A\"\n"),
                "agents.deployer.slack[0].users",
                "nobody may answer",
            ),
            (
                format!("{BASE}{SLACK}{channel}channel = \"C0A\"\nusergroup = \"oncall\"\n"),
                "agents.deployer.slack[0].usergroup",
                "not a Slack user group id",
            ),
            (
                format!("{BASE}{SLACK}{channel}channel = \"C0A\"\nusers = [\"U0A\"]\nafter = \"soon\"\n"),
                "agents.deployer.slack[0].after",
                "2h, 3d",
            ),
            (
                format!("{BASE}{SLACK}max_attempts = 0\n"),
                "slack.max_attempts",
                "positive",
            ),
            (
                format!("{BASE}{SLACK}api_url = \"slack.com\"\n"),
                "slack.api_url",
                "http(s) URL",
            ),
        ];
        for (text, key, problem) in cases {
            let err = load(&text).unwrap_err();
            assert_eq!(err.key, key, "{err}");
            assert!(err.problem.contains(problem), "{key}: {err}");
        }
    }
}

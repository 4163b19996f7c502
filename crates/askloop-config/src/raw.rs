//! `askloop.toml` as written: serde reads it into these, refusing unknown
//! keys (a typo would otherwise be silently ignored), and the error names
//! the key path and the line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) agents: BTreeMap<String, RawAgent>,
    #[serde(default)]
    pub(super) limits: RawLimits,
    /// `[[tokens]]`: named API tokens.
    #[serde(default)]
    pub(super) tokens: Vec<RawToken>,
    /// The header a trusted proxy names the author in.
    pub(super) author_header: Option<String>,
    /// Host names the server answers to besides loopback names and
    /// addresses.
    pub(super) allowed_hosts: Option<Vec<String>>,
    pub(super) public_url: Option<String>,
    #[serde(default)]
    pub(super) webhooks: Vec<RawWebhook>,
    /// `[links]`: signed answer links.
    pub(super) links: Option<super::links::RawLinks>,
    /// `[telemetry]`: OpenTelemetry trace export.
    pub(super) telemetry: Option<super::telemetry::RawTelemetry>,
    /// `[email]`: the SMTP server questions are mailed through.
    pub(super) email: Option<super::email::RawEmail>,
    /// `[slack]`: the Slack app questions are posted with.
    pub(super) slack: Option<super::slack::RawSlack>,
    /// `[mcp]`: the limits of the `/mcp` endpoint's sessions.
    pub(super) mcp: Option<RawMcpEndpoint>,
}

/// `[mcp]`: how many `/mcp` sessions may be open, and for how long one may
/// idle.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcpEndpoint {
    pub(super) max_sessions: Option<usize>,
    pub(super) max_sessions_per_token: Option<usize>,
    pub(super) session_idle: Option<String>,
}

/// One `[[tokens]]` table: an API token's name, its secret (from the
/// environment, or written in the file) and the agents it may act for.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToken {
    pub(super) name: Option<String>,
    pub(super) token: Option<String>,
    pub(super) token_env: Option<String>,
    pub(super) agents: Option<Vec<String>>,
    /// Resources beyond its own name whose threads it may use.
    pub(super) resources: Option<Vec<String>>,
    /// Behind a proxy (`author_header`): may act as itself when a request
    /// names no person.
    pub(super) without_person: Option<bool>,
}

/// One `[[webhooks]]` table: where notifications of questions are POSTed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhook {
    pub(super) url: Option<String>,
    pub(super) secret: Option<String>,
    pub(super) secret_env: Option<String>,
    pub(super) events: Option<Vec<String>>,
    pub(super) agents: Option<Vec<String>>,
    pub(super) max_attempts: Option<u32>,
    pub(super) timeout: Option<String>,
}

/// `[limits]`: what one `ask_user` call may ask and be answered with.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    pub(super) max_answer_bytes: Option<usize>,
    pub(super) max_options: Option<usize>,
    pub(super) max_questions_per_step: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAgent {
    pub(super) name: Option<String>,
    pub(super) instructions: Option<String>,
    pub(super) model: Option<String>,
    pub(super) script: Option<PathBuf>,
    pub(super) tools: Option<Vec<String>>,
    pub(super) require_approval: Option<Vec<String>>,
    pub(super) allow_free_text: Option<bool>,
    pub(super) max_steps: Option<u32>,
    pub(super) last_messages: Option<u32>,
    pub(super) request_overrides: Option<Vec<String>>,
    pub(super) write_dir: Option<PathBuf>,
    pub(super) time_limit: Option<String>,
    pub(super) time_limits: Option<BTreeMap<String, String>>,
    pub(super) mcp: Option<Vec<RawMcpServer>>,
    /// `[[agents.<id>.rules]]`: approval rules, in order.
    pub(super) rules: Option<Vec<super::rules::RawRule>>,
    /// `[[agents.<id>.email]]`: whom its questions are mailed to.
    pub(super) email: Option<Vec<super::email::RawRecipient>>,
    /// `[[agents.<id>.slack]]`: the Slack channels its questions are
    /// posted to.
    pub(super) slack: Option<Vec<super::slack::RawChannel>>,
}

/// One `[[agents.<id>.mcp]]` table: an MCP server whose tools the agent
/// gets, started as a program (`command`) or reached at a `url`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcpServer {
    pub(super) name: Option<String>,
    pub(super) command: Option<String>,
    pub(super) args: Option<Vec<String>>,
    pub(super) env: Option<BTreeMap<String, String>>,
    pub(super) cwd: Option<PathBuf>,
    pub(super) url: Option<String>,
    pub(super) headers: Option<BTreeMap<String, String>>,
    pub(super) tools: Option<Vec<String>>,
    pub(super) hold_for_secs: Option<u64>,
    /// Every call of its tools waits for approval.
    pub(super) require_approval: Option<bool>,
    /// Deadlines: `initialize`, `tools/list`, each call.
    pub(super) initialize_timeout: Option<String>,
    pub(super) list_timeout: Option<String>,
    pub(super) call_timeout: Option<String>,
    /// A stdio server's grace to end before SIGTERM, and before SIGKILL.
    pub(super) stop_grace: Option<String>,
    /// The most questions one call may ask.
    pub(super) max_questions: Option<u32>,
}

pub(super) fn parse(file: &Path, text: &str) -> Result<RawConfig, ConfigError> {
    let deserializer = toml::Deserializer::parse(text).map_err(|err| toml_error(file, text, "", &err))?;
    serde_path_to_error::deserialize(deserializer).map_err(|err| {
        let key = err.path().to_string();
        let key = if key == "." { String::new() } else { key };
        toml_error(file, text, &key, err.inner())
    })
}

fn toml_error(file: &Path, text: &str, key: &str, err: &toml::de::Error) -> ConfigError {
    ConfigError {
        file: file.to_path_buf(),
        key: key.to_owned(),
        line: err.span().map(|span| line_of(text, span.start)),
        problem: err.message().trim().to_owned(),
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset).map_or(1, |before| before.matches('\n').count() + 1)
}

//! `[[tokens]]`, `author_header` and `allowed_hosts`: who may call the
//! server, for which agents, under which name their answers are recorded,
//! and which host names the server answers to.
//!
//! ```toml
//! author_header = "X-Forwarded-User"  # only behind a proxy that sets it and strips it from clients
//! allowed_hosts = ["askloop.internal"] # names a proxy forwards, besides loopback names and addresses
//!
//! [[tokens]]
//! name = "alice"                      # recorded as the author of what is done with it
//! token_env = "ALICE_TOKEN"           # the secret, from the environment (or token = "...", in the file)
//!
//! [[tokens]]
//! name = "support-bot"
//! token_env = "SUPPORT_BOT_TOKEN"
//! agents = ["support"]                # may act for these agents only (others: 403)
//! without_person = true               # behind author_header: may call without a person's name
//! ```
//!
//! Behind a proxy (`author_header`), every request must name a person in
//! that header; a request without one is refused (401 `no_person`), except
//! with a token marked `without_person = true`, which then acts as itself
//! (for a program that calls the server directly, not through the proxy).

use std::path::Path;

use askloop_server::{ApiToken, DEFAULT_TOKEN_NAME};

use super::ConfigError;
use super::raw::RawToken;

/// Resolves `[[tokens]]`: each needs a name of its own and one secret,
/// and names only agents of the file. `env` reads an environment variable.
/// Returns the tokens and warnings (secrets written in the file).
pub(super) fn resolve_tokens(
    file: &Path,
    raw: Vec<RawToken>,
    agent_ids: &[&str],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Vec<ApiToken>, Vec<String>), ConfigError> {
    let mut tokens: Vec<ApiToken> = Vec::with_capacity(raw.len());
    // The secrets of `tokens`, in order: a token keeps its own to itself.
    let mut secrets: Vec<String> = Vec::with_capacity(raw.len());
    let mut warnings = Vec::new();
    for (i, token) in raw.into_iter().enumerate() {
        let key = |field: &str| format!("tokens[{i}].{field}");
        let name = token.name.as_deref().map(str::trim).unwrap_or_default().to_owned();
        if name.is_empty() {
            return Err(ConfigError::new(
                file,
                key("name"),
                "a token needs a name (e.g. name = \"alice\"): it is recorded as the author of what is done with it",
            ));
        }
        if name == DEFAULT_TOKEN_NAME {
            return Err(ConfigError::new(
                file,
                key("name"),
                format!("{DEFAULT_TOKEN_NAME:?} is the name of the ASKLOOP_API_TOKEN token; choose another"),
            ));
        }
        if tokens.iter().any(|t| t.name() == name) {
            return Err(ConfigError::new(
                file,
                key("name"),
                format!("another token is named {name:?}; each token needs its own name"),
            ));
        }
        let secret = match (token.token, token.token_env) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    file,
                    key("token_env"),
                    "give either token_env (the environment variable holding the secret) or token, not both",
                ));
            }
            (None, None) => {
                return Err(ConfigError::new(
                    file,
                    format!("tokens[{i}]"),
                    "give token_env = \"VARIABLE\" (the environment variable holding the secret), or token = \"...\"",
                ));
            }
            (Some(secret), None) => {
                warnings.push(format!(
                    "{}: tokens[{i}].token: the secret of token {name:?} is written in the file; token_env keeps it out of files",
                    file.display()
                ));
                secret
            }
            (None, Some(variable)) => env(&variable).ok_or_else(|| {
                ConfigError::new(
                    file,
                    key("token_env"),
                    format!("the environment variable {variable} is not set or is empty; set it to the secret of token {name:?}"),
                )
            })?,
        };
        if secret.trim().is_empty() {
            return Err(ConfigError::new(
                file,
                key("token"),
                "the secret is empty; give the secret the token's clients send",
            ));
        }
        if secrets.contains(&secret) {
            return Err(ConfigError::new(
                file,
                format!("tokens[{i}]"),
                format!("token {name:?} has the same secret as another token; each token needs its own"),
            ));
        }
        if secret.trim() != secret {
            return Err(ConfigError::new(
                file,
                key("token"),
                format!(
                    "the secret of token {name:?} starts or ends with white space, so no request could ever match it; remove the white space"
                ),
            ));
        }
        // A named token's threads are walled: its own name, and the
        // resources it lists.
        let mut resources = vec![name.clone()];
        for (j, resource) in token.resources.unwrap_or_default().into_iter().enumerate() {
            if let Err(err) = askloop::IdKind::Resource.check(&resource) {
                return Err(ConfigError::new(
                    file,
                    format!("tokens[{i}].resources[{j}]"),
                    err.to_string(),
                ));
            }
            if !resources.contains(&resource) {
                resources.push(resource);
            }
        }
        secrets.push(secret.clone());
        let mut resolved = ApiToken::new(name, secret).only_resources(resources);
        if token.without_person == Some(true) {
            resolved = resolved.acts_without_person();
        }
        if let Some(agents) = token.agents {
            if agents.is_empty() {
                return Err(ConfigError::new(
                    file,
                    key("agents"),
                    "an empty list lets the token act for no agent; list its agents, or leave the key out for all",
                ));
            }
            for (j, agent) in agents.iter().enumerate() {
                if !agent_ids.contains(&agent.as_str()) {
                    return Err(ConfigError::new(
                        file,
                        format!("tokens[{i}].agents[{j}]"),
                        format!("unknown agent {agent:?}; agents in this file: {}", agent_ids.join(", ")),
                    ));
                }
            }
            resolved = resolved.only_agents(agents);
        }
        tokens.push(resolved);
    }
    Ok((tokens, warnings))
}

/// Warnings for tokens marked `without_person` on a server with no
/// `author_header`, where every token acts as itself anyway.
pub(super) fn idle_without_person(file: &Path, tokens: &[ApiToken]) -> Vec<String> {
    tokens
        .iter()
        .enumerate()
        .filter(|(_, token)| token.may_act_without_person())
        .map(|(i, token)| {
            format!(
                "{}: tokens[{i}].without_person: token {:?} is marked to act without a person, which only matters behind a proxy (author_header); without one, every token acts as itself",
                file.display(),
                token.name()
            )
        })
        .collect()
}

/// Checks `allowed_hosts`: host names or addresses, without scheme or port.
pub(super) fn resolve_allowed_hosts(file: &Path, raw: Option<Vec<String>>) -> Result<Vec<String>, ConfigError> {
    let hosts = raw.unwrap_or_default();
    for (i, host) in hosts.iter().enumerate() {
        if !askloop_server::is_host_name(host) {
            return Err(ConfigError::new(
                file,
                format!("allowed_hosts[{i}]"),
                format!("{host:?} is not a host name; give one like \"askloop.example.com\", without scheme or port"),
            ));
        }
    }
    Ok(hosts)
}

/// Checks `author_header`: a valid header name.
pub(super) fn resolve_author_header(file: &Path, raw: Option<String>) -> Result<Option<String>, ConfigError> {
    let Some(header) = raw else {
        return Ok(None);
    };
    let header = header.trim().to_owned();
    if header.is_empty() || http::HeaderName::from_bytes(header.as_bytes()).is_err() {
        return Err(ConfigError::new(
            file,
            "author_header",
            format!("{header:?} is not an HTTP header name; give one like \"X-Forwarded-User\", or leave the key out"),
        ));
    }
    if header.eq_ignore_ascii_case("authorization") {
        return Err(ConfigError::new(
            file,
            "author_header",
            "Authorization carries the token; name the header your proxy sets to the person's name",
        ));
    }
    Ok(Some(header))
}

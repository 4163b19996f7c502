//! `[links]` in `askloop.toml`: signed answer links (see `links/` in this
//! crate and docs/server.md).
//!
//! ```toml
//! public_url = "https://askloop.example.com"  # links need it: <public_url>/links/<token>
//!
//! [links]
//! max_age = "3d"                   # the longest a link works (default 7d); never past the question's own limit
//! webhook_recipient = "on-call"    # whom links in webhook notifications are made out to (default "webhook")
//! recipients = ["bob@corp.example", "carol@corp.example"]  # only these may be named by `askloop link` and the API (default: anyone)
//!
//! [[links.keys]]                   # the first key signs; every key listed verifies
//! id = "2026-12"
//! secret_env = "ASKLOOP_LINK_KEY"  # at least 32 characters, e.g. from: openssl rand -base64 32
//!
//! [[links.keys]]                   # the key before, kept while its links may still be open
//! id = "2026-06"
//! secret_env = "ASKLOOP_LINK_KEY_OLD"
//! ```

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, duration};
use askloop_server::links::{
    DEFAULT_LINK_MAX_AGE, DEFAULT_WEBHOOK_RECIPIENT, LinkKey, LinkSettings, MIN_LINK_KEY_CHARS,
};

/// `[links]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLinks {
    #[serde(default)]
    keys: Vec<RawLinkKey>,
    max_age: Option<String>,
    webhook_recipient: Option<String>,
    /// The only names links may be made out to.
    recipients: Option<Vec<String>>,
}

/// One `[[links.keys]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLinkKey {
    id: Option<String>,
    secret_env: Option<String>,
}

/// Checks `[links]`: at least one key, each with an id of its own and a
/// long enough secret read from the environment by `env`.
pub(super) fn resolve_links(
    file: &Path,
    raw: Option<RawLinks>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<LinkSettings>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    if raw.keys.is_empty() {
        return Err(ConfigError::new(
            file,
            "links.keys",
            "links need a signing key: add [[links.keys]] with id = \"...\" and secret_env = \"VARIABLE\"",
        ));
    }
    let mut keys: Vec<LinkKey> = Vec::with_capacity(raw.keys.len());
    for (i, key) in raw.keys.into_iter().enumerate() {
        let at = |field: &str| format!("links.keys[{i}].{field}");
        let id = key.id.as_deref().map(str::trim).unwrap_or_default().to_owned();
        if id.is_empty()
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(ConfigError::new(
                file,
                at("id"),
                "a key needs an id of letters, digits, '-', '_' or '.' (e.g. id = \"2026-12\"): links name the key that signed them",
            ));
        }
        if keys.iter().any(|k| k.id() == id) {
            return Err(ConfigError::new(
                file,
                at("id"),
                format!("another key has the id {id:?}"),
            ));
        }
        let Some(variable) = key.secret_env.filter(|v| !v.trim().is_empty()) else {
            return Err(ConfigError::new(
                file,
                at("secret_env"),
                "give secret_env = \"VARIABLE\": the environment variable holding the key",
            ));
        };
        let Some(secret) = env(&variable) else {
            return Err(ConfigError::new(
                file,
                at("secret_env"),
                format!("the environment variable {variable} is not set"),
            ));
        };
        if secret.chars().count() < MIN_LINK_KEY_CHARS {
            return Err(ConfigError::new(
                file,
                at("secret_env"),
                format!(
                    "the key in {variable} has {} characters; give at least {MIN_LINK_KEY_CHARS} (e.g. from: openssl rand -base64 32)",
                    secret.chars().count()
                ),
            ));
        }
        keys.push(LinkKey::new(id, secret.into_bytes()));
    }
    let max_age = match raw.max_age {
        None => DEFAULT_LINK_MAX_AGE,
        Some(text) => {
            duration::parse_limit(&text).map_err(|err| ConfigError::new(file, "links.max_age", err.to_string()))?
        }
    };
    let webhook_recipient = match raw.webhook_recipient {
        None => DEFAULT_WEBHOOK_RECIPIENT.to_owned(),
        Some(name) => askloop_server::links::check_recipient(&name)
            .map_err(|problem| ConfigError::new(file, "links.webhook_recipient", problem.to_string()))?,
    };
    let recipients = raw
        .recipients
        .map(|names| resolve_recipients(file, names))
        .transpose()?;
    let mut keys = keys.into_iter();
    let Some(signing) = keys.next() else {
        return Ok(None);
    };
    let mut settings = LinkSettings::new(signing, keys);
    settings.max_age = Duration::max(max_age, Duration::from_secs(1));
    settings.webhook_recipient = webhook_recipient;
    settings.recipients = recipients;
    Ok(Some(settings))
}

/// Checks `[links] recipients`: some names, each one a link could be made
/// out to (as `askloop_server::links::check_recipient` says), each once.
fn resolve_recipients(file: &Path, names: Vec<String>) -> Result<Vec<String>, ConfigError> {
    if names.is_empty() {
        return Err(ConfigError::new(
            file,
            "links.recipients",
            "an empty list allows no link at all; list the names links may be made out to \
             (e.g. recipients = [\"bob@corp.example\"]), or leave the key out to allow any name",
        ));
    }
    let mut checked: Vec<String> = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let name = askloop_server::links::check_recipient(name)
            .map_err(|problem| ConfigError::new(file, format!("links.recipients[{i}]"), problem.to_string()))?;
        if checked.contains(&name) {
            return Err(ConfigError::new(
                file,
                format!("links.recipients[{i}]"),
                format!("{name:?} is listed twice"),
            ));
        }
        checked.push(name);
    }
    Ok(checked)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn resolve(text: &str) -> Result<Option<LinkSettings>, ConfigError> {
        let raw: RawLinks = toml::from_str(text).unwrap();
        let key = "a-secret-of-at-least-thirty-two-characters";
        resolve_links(Path::new("askloop.toml"), Some(raw), &|_| Some(key.to_owned()))
    }

    const KEY: &str = "[[keys]]\nid = \"k1\"\nsecret_env = \"KEY\"\n";

    #[test]
    fn recipients_are_checked_trimmed_and_any_name_is_allowed_without_them() {
        let settings = resolve(&format!("recipients = [\" bob@corp \", \"Carol\"]\n{KEY}"))
            .unwrap()
            .unwrap();
        assert_eq!(
            settings.recipients,
            Some(vec!["bob@corp".to_owned(), "Carol".to_owned()])
        );
        assert_eq!(resolve(KEY).unwrap().unwrap().recipients, None);
    }

    #[test]
    fn an_empty_a_blank_or_a_repeated_recipient_is_refused_naming_its_place() {
        for (list, key, problem) in [
            ("[]", "links.recipients", "allows no link"),
            ("[\"bob\", \" \"]", "links.recipients[1]", "give the name"),
            ("[\"bob\", \"bob \"]", "links.recipients[1]", "listed twice"),
        ] {
            let err = resolve(&format!("recipients = {list}\n{KEY}")).unwrap_err();
            assert_eq!(err.key, key, "{list}");
            assert!(err.to_string().contains(problem), "{list}: {err}");
        }
    }
}

//! `[email]` and each agent's `[[agents.<id>.email]]` in `askloop.toml`:
//! questions mailed to people, each with an answer link made out to them
//! (so email needs `[links]` and `public_url`).
//!
//! ```toml
//! public_url = "https://askloop.example.com"
//!
//! [email]
//! host = "smtp.example.com"
//! port = 587                            # default: 25, 587 or 465 by tls
//! tls = "starttls"                      # "none", "starttls" (default) or "tls"
//! username = "askloop"
//! password_env = "ASKLOOP_SMTP_PASSWORD"  # the environment variable holding the password
//! from = "askloop <askloop@example.com>"
//! max_attempts = 20                     # then the mail is given up on (dead)
//! timeout = "30s"                       # per attempt
//!
//! [[agents.deployer.email]]             # repeat for each person
//! name = "Alice"                        # links are made out to her; answers recorded as hers
//! address = "alice@example.com"
//! tools = ["write_file"]                # optional: only calls of these tools
//! remind_after = "2h"                   # optional: mailed again if still open 2h later
//!
//! [[agents.deployer.email]]
//! name = "Bob"
//! address = "bob@example.com"
//! after = "8h"                          # optional: an escalation, mailed only if still open then
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use askloop_server::email::{
    DEFAULT_MAIL_ATTEMPTS, DEFAULT_SMTP_TIMEOUT, EmailSettings, MailRecipient, SmtpTls, check_address, check_from,
};
use serde::Deserialize;

use super::reach::Reach;
use super::{ConfigError, duration};

/// `[email]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEmail {
    host: Option<String>,
    port: Option<u16>,
    tls: Option<String>,
    username: Option<String>,
    password_env: Option<String>,
    from: Option<String>,
    max_attempts: Option<u32>,
    timeout: Option<String>,
}

/// One `[[agents.<id>.email]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRecipient {
    name: Option<String>,
    address: Option<String>,
    tools: Option<Vec<String>>,
    after: Option<String>,
    remind_after: Option<String>,
}

/// What email needs besides `[email]`.
pub(super) struct Needs<'a> {
    pub(super) links: bool,
    pub(super) public_url: Option<&'a str>,
}

/// Checks `[email]` and every agent's recipients (`recipients`: by agent
/// id, as written).
pub(super) fn resolve_email(
    file: &Path,
    raw: Option<RawEmail>,
    recipients: BTreeMap<String, Vec<RawRecipient>>,
    needs: Needs<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<EmailSettings>, ConfigError> {
    let Some(raw) = raw else {
        if let Some((agent, _)) = recipients.iter().find(|(_, list)| !list.is_empty()) {
            return Err(ConfigError::new(
                file,
                format!("agents.{agent}.email"),
                "recipients need the SMTP server to mail through: add an [email] table with host and from",
            ));
        }
        return Ok(None);
    };
    if !needs.links {
        return Err(ConfigError::new(
            file,
            "email",
            "mailed questions carry answer links, which need [links] with a key ([[links.keys]]); add it",
        ));
    }
    if needs.public_url.is_none() {
        return Err(ConfigError::new(
            file,
            "email",
            "mailed questions carry answer links, which need public_url (the address people open them at, e.g. public_url = \"https://askloop.example.com\")",
        ));
    }
    let Some(host) = raw.host.map(|h| h.trim().to_owned()).filter(|h| !h.is_empty()) else {
        return Err(ConfigError::new(
            file,
            "email.host",
            "missing: give host = \"smtp.example.com\" (the SMTP server)",
        ));
    };
    let tls = match raw.tls.as_deref() {
        None => SmtpTls::StartTls,
        Some(name) => SmtpTls::parse(name).ok_or_else(|| {
            ConfigError::new(
                file,
                "email.tls",
                format!("{name:?} is not a TLS mode; give {}", SmtpTls::NAMES),
            )
        })?,
    };
    let port = match raw.port {
        Some(0) => return Err(ConfigError::new(file, "email.port", "0 is no port; give e.g. 587")),
        Some(port) => port,
        None => tls.default_port(),
    };
    let Some(from) = raw.from.filter(|f| !f.trim().is_empty()) else {
        return Err(ConfigError::new(
            file,
            "email.from",
            "missing: give from = \"askloop <askloop@example.com>\" (the sender of every message)",
        ));
    };
    check_from(&from).map_err(|problem| ConfigError::new(file, "email.from", problem.to_string()))?;
    let password = match (&raw.username, raw.password_env) {
        (None, None) => None,
        (None, Some(_)) => {
            return Err(ConfigError::new(
                file,
                "email.username",
                "password_env is given without username; give both, or neither for a server that takes no login",
            ));
        }
        (Some(_), None) => {
            return Err(ConfigError::new(
                file,
                "email.password_env",
                "username is given without password_env; give password_env = \"VARIABLE\" (the environment variable holding the password)",
            ));
        }
        (Some(_), Some(variable)) => Some(env(&variable).ok_or_else(|| {
            ConfigError::new(
                file,
                "email.password_env",
                format!("the environment variable {variable} is not set"),
            )
        })?),
    };
    let max_attempts = match raw.max_attempts {
        Some(0) => {
            return Err(ConfigError::new(
                file,
                "email.max_attempts",
                format!("0 would never send; give a positive number (the default is {DEFAULT_MAIL_ATTEMPTS})"),
            ));
        }
        Some(n) => n,
        None => DEFAULT_MAIL_ATTEMPTS,
    };
    let timeout = raw
        .timeout
        .map(|text| {
            duration::parse_limit(&text).map_err(|problem| ConfigError::new(file, "email.timeout", problem.to_string()))
        })
        .transpose()?
        .unwrap_or(DEFAULT_SMTP_TIMEOUT);
    let mut settings = EmailSettings::new(host, tls, from);
    settings.port = port;
    settings.username = raw.username;
    settings.password = password;
    settings.max_attempts = max_attempts;
    settings.timeout = timeout;
    for (agent, list) in recipients {
        let mut resolved: Vec<MailRecipient> = Vec::with_capacity(list.len());
        for (i, recipient) in list.into_iter().enumerate() {
            let key = |field: &str| format!("agents.{agent}.email[{i}].{field}");
            let name = askloop_server::links::check_recipient(recipient.name.as_deref().unwrap_or_default())
                .map_err(|problem| ConfigError::new(file, key("name"), problem.to_string()))?;
            let Some(address) = recipient.address.map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()) else {
                return Err(ConfigError::new(
                    file,
                    key("address"),
                    "missing: give address = \"alice@example.com\"",
                ));
            };
            check_address(&address).map_err(|problem| ConfigError::new(file, key("address"), problem.to_string()))?;
            if resolved.iter().any(|r| r.address == address) {
                return Err(ConfigError::new(
                    file,
                    key("address"),
                    format!("{address} is listed twice for agent {agent}; give each person one table"),
                ));
            }
            let Reach {
                tools,
                after,
                remind_after,
            } = Reach::read(
                file,
                &format!("agents.{agent}.email[{i}]"),
                recipient.tools,
                recipient.after,
                recipient.remind_after,
            )?;
            resolved.push(MailRecipient {
                name,
                address,
                tools,
                after,
                remind_after,
            });
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

    const BASE: &str = "public_url = \"https://askloop.example.com\"\n\
        [links]\n[[links.keys]]\nid = \"k1\"\nsecret_env = \"LINK_KEY\"\n\
        [agents.deployer]\ninstructions = \"x\"\n";

    fn env(name: &str) -> Option<String> {
        match name {
            "LINK_KEY" => Some("k".repeat(40)),
            "SMTP_PASSWORD" => Some("hunter2".to_owned()),
            _ => None,
        }
    }

    fn load(text: &str) -> Result<ServerConfig, super::ConfigError> {
        ServerConfig::from_toml_with_env(Path::new("/etc/askloop.toml"), text, &env)
    }

    #[test]
    fn a_whole_email_table_reads_with_each_agents_recipients() {
        let config = load(&format!(
            "{BASE}[[agents.deployer.email]]\nname = \"Alice\"\naddress = \"alice@example.com\"\ntools = [\"ask_user\"]\n\
             [email]\nhost = \"smtp.example.com\"\ntls = \"tls\"\nusername = \"askloop\"\npassword_env = \"SMTP_PASSWORD\"\n\
             from = \"askloop <askloop@example.com>\"\ntimeout = \"10s\"\n"
        ))
        .unwrap();
        let email = config.email.unwrap();
        assert_eq!(email.port, 465, "tls's port by default");
        assert_eq!(email.password.as_deref(), Some("hunter2"));
        assert!(!format!("{email:?}").contains("hunter2"), "Debug hides the password");
        let alice: Vec<_> = email.recipients_of("deployer").collect();
        assert_eq!(alice.len(), 1);
        assert_eq!(
            (alice[0].name.as_str(), alice[0].tools.as_slice()),
            ("Alice", &["ask_user".to_owned()][..])
        );
    }

    #[test]
    fn a_reminder_and_an_escalation_read_as_delays_and_become_held_back_subscriptions() {
        let email = "[email]\nhost = \"smtp.example.com\"\nfrom = \"askloop@example.com\"\n";
        let config = load(&format!(
            "{BASE}{email}[[agents.deployer.email]]\nname = \"Alice\"\naddress = \"alice@example.com\"\nremind_after = \"2h\"\n\
             [[agents.deployer.email]]\nname = \"Bob\"\naddress = \"bob@example.com\"\nafter = \"8h\"\nremind_after = \"1d\"\n"
        ))
        .unwrap();
        let settings = config.email.unwrap();
        let hour = std::time::Duration::from_secs(3600);
        let held: Vec<Vec<(std::time::Duration, askloop::Notice)>> = settings
            .recipients_of("deployer")
            .map(|r| r.subscriptions().iter().map(|s| (s.delay, s.notice)).collect())
            .collect();
        assert_eq!(
            held,
            [
                vec![
                    (std::time::Duration::ZERO, askloop::Notice::First),
                    (2 * hour, askloop::Notice::Reminder)
                ],
                vec![
                    (8 * hour, askloop::Notice::Escalation),
                    (32 * hour, askloop::Notice::Reminder)
                ],
            ]
        );

        for (value, problem) in [("\"0s\"", "leave the key out"), ("\"soon\"", "2h, 3d")] {
            let err = load(&format!(
                "{BASE}{email}[[agents.deployer.email]]\nname = \"A\"\naddress = \"a@example.com\"\nafter = {value}\n"
            ))
            .unwrap_err();
            assert_eq!(err.key, "agents.deployer.email[0].after", "{err}");
            assert!(err.problem.contains(problem), "{err}");
        }
    }

    #[test]
    fn bad_email_settings_name_the_file_the_key_and_the_problem() {
        let email = "[email]\nhost = \"smtp.example.com\"\nfrom = \"askloop@example.com\"\n";
        let cases = [
            (
                format!("{BASE}{email}tls = \"ssl\"\n"),
                "email.tls",
                "\"none\", \"starttls\" or \"tls\"",
            ),
            (
                format!("{BASE}[email]\nfrom = \"a@example.com\"\n"),
                "email.host",
                "missing",
            ),
            (
                format!("{BASE}[email]\nhost = \"h\"\nfrom = \"not an address\"\n"),
                "email.from",
                "not a mail address",
            ),
            (
                format!("{BASE}{email}username = \"u\"\npassword_env = \"NOPE\"\n"),
                "email.password_env",
                "NOPE is not set",
            ),
            (
                format!("{BASE}{email}username = \"u\"\n"),
                "email.password_env",
                "without password_env",
            ),
            (
                format!("{BASE}{email}[[agents.deployer.email]]\nname = \"A\"\naddress = \"alice\"\n"),
                "agents.deployer.email[0].address",
                "not a mail address",
            ),
            (
                format!("{BASE}{email}[[agents.deployer.email]]\naddress = \"a@example.com\"\n"),
                "agents.deployer.email[0].name",
                "give the name",
            ),
            (
                format!("{BASE}[[agents.deployer.email]]\nname = \"A\"\naddress = \"a@example.com\"\n"),
                "agents.deployer.email",
                "add an [email] table",
            ),
            (
                format!("[agents.deployer]\ninstructions = \"x\"\n{email}"),
                "email",
                "[links]",
            ),
        ];
        for (text, key, problem) in cases {
            let err = load(&text).unwrap_err();
            assert_eq!(err.key, key, "{err}");
            assert!(err.problem.contains(problem), "{key}: {err}");
            assert!(err.to_string().starts_with("/etc/askloop.toml: "), "{err}");
        }
        let no_url = format!(
            "{}{email}",
            BASE.replace("public_url = \"https://askloop.example.com\"\n", "")
        );
        let err = load(&no_url).unwrap_err();
        assert!(err.key == "email" && err.problem.contains("public_url"), "{err}");
    }
}

//! Questions by email: when a run of an agent with email recipients raises
//! a question (or waits for an approval), the agent writes one notification
//! per recipient into the store's outbox, in the same write, with the
//! destination `mailto:<address>` (see `askloop_config`). The server's
//! outbox sender (`webhooks.rs`) hands those to its `Mailer`, which
//!
//! 1. reads the run again: a question resolved meanwhile is not mailed
//!    (the delivery is recorded as not sent, with the reason);
//! 2. makes an answer link made out to the recipient, as `askloop link`
//!    does, its id derived from the delivery's so a mail sent again after a
//!    failed attempt carries the same link;
//! 3. sends a plain-text and HTML message (`message.rs`) over SMTP.
//!
//! A mail server that cannot be reached or refuses the message fails the
//! attempt: the outbox tries again with its backoff, up to `max_attempts`,
//! and records each attempt. Delivery is at least once: a server that dies
//! between the SMTP server's acceptance and recording it sends again, with
//! the same `Message-ID`.

mod message;

use std::fmt;
use std::time::Duration;

use askloop::{ErrorChain, EventType, Notice, OutboxMessage, RunStore, Subscription};
use chrono::{DateTime, Utc};
use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use crate::links::{AnswerLinks, LinkError};
use crate::reach::{self, Attempt};

/// The destinations of mail notifications start with this.
pub const MAILTO: &str = "mailto:";

/// How many attempts a mail gets, unless `[email] max_attempts` says
/// otherwise.
pub const DEFAULT_MAIL_ATTEMPTS: u32 = 20;

/// How long one SMTP attempt may take, unless `[email] timeout` says
/// otherwise.
pub const DEFAULT_SMTP_TIMEOUT: Duration = Duration::from_secs(30);

/// How the connection to the SMTP server is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SmtpTls {
    /// Plain text (a relay on this machine or a test server only).
    None,
    /// A plain connection upgraded with STARTTLS, which must succeed
    /// (port 587).
    StartTls,
    /// TLS from the first byte (port 465).
    Tls,
}

impl SmtpTls {
    /// The names accepted in `[email] tls`.
    pub const NAMES: &'static str = "\"none\", \"starttls\" or \"tls\"";

    /// Reads a `tls` value.
    pub fn parse(name: &str) -> Option<SmtpTls> {
        match name {
            "none" => Some(SmtpTls::None),
            "starttls" => Some(SmtpTls::StartTls),
            "tls" => Some(SmtpTls::Tls),
            _ => None,
        }
    }

    /// The port used when none is given.
    pub fn default_port(self) -> u16 {
        match self {
            SmtpTls::None => 25,
            SmtpTls::StartTls => 587,
            SmtpTls::Tls => 465,
        }
    }
}

/// A person questions are mailed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailRecipient {
    /// Their name: answer links are made out to it, and answers recorded
    /// as by it.
    pub name: String,
    /// Their address.
    pub address: String,
    /// Only calls of these tools are mailed to them; empty: every call.
    pub tools: Vec<String>,
    /// How long a question waits before they are mailed (zero: at once).
    /// More than zero makes them an escalation: mailed only if the
    /// question is still open then.
    pub after: Duration,
    /// How long after their first mail they are mailed again if the
    /// question is still open; `None`: never.
    pub remind_after: Option<Duration>,
}

impl MailRecipient {
    /// A recipient mailed every question at once, and never reminded.
    pub fn new(name: impl Into<String>, address: impl Into<String>) -> Self {
        MailRecipient {
            name: name.into(),
            address: address.into(),
            tools: Vec::new(),
            after: Duration::ZERO,
            remind_after: None,
        }
    }

    /// The outbox destination of their mail.
    pub fn destination(&self) -> String {
        format!("{MAILTO}{}", self.address)
    }

    /// The subscriptions an agent writes their mail with: the first notice
    /// (at once, or after [`after`](Self::after) as an escalation), and a
    /// reminder [`remind_after`](Self::remind_after) later.
    pub fn subscriptions(&self) -> Vec<Subscription> {
        notices(self.destination(), self.after, self.remind_after)
    }
}

/// The subscriptions of a person or channel to raised questions: the first
/// notice at once, or after `after` as an escalation; and a reminder
/// `remind_after` after that, if given.
pub(crate) fn notices(destination: String, after: Duration, remind_after: Option<Duration>) -> Vec<Subscription> {
    let mut subscriptions = vec![if after.is_zero() {
        Subscription::new(destination.clone(), [EventType::QuestionRaised])
    } else {
        Subscription::later(destination.clone(), after, Notice::Escalation)
    }];
    if let Some(remind) = remind_after {
        subscriptions.push(Subscription::later(destination, after + remind, Notice::Reminder));
    }
    subscriptions
}

/// `[email]`, checked: the SMTP server, the sender, and each agent's
/// recipients. Its `Debug` does not show the password.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EmailSettings {
    /// The SMTP server's host name.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// How the connection is secured.
    pub tls: SmtpTls,
    /// The user to log in as, if the server wants a login.
    pub username: Option<String>,
    /// Their password (read from the environment variable the
    /// configuration names).
    pub password: Option<String>,
    /// The `From` of every message, e.g. `askloop <askloop@example.com>`.
    pub from: String,
    /// Attempts per message before it is given up on.
    pub max_attempts: u32,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// Each agent's recipients: (agent id, recipient).
    pub recipients: Vec<(String, MailRecipient)>,
}

impl fmt::Debug for EmailSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmailSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("from", &self.from)
            .field("max_attempts", &self.max_attempts)
            .field("timeout", &self.timeout)
            .field("recipients", &self.recipients)
            .finish_non_exhaustive()
    }
}

impl EmailSettings {
    /// Settings for the SMTP server `host` (port, TLS and attempts at
    /// their defaults for `tls`), sending as `from`, with no recipients.
    pub fn new(host: impl Into<String>, tls: SmtpTls, from: impl Into<String>) -> Self {
        EmailSettings {
            host: host.into(),
            port: tls.default_port(),
            tls,
            username: None,
            password: None,
            from: from.into(),
            max_attempts: DEFAULT_MAIL_ATTEMPTS,
            timeout: DEFAULT_SMTP_TIMEOUT,
            recipients: Vec::new(),
        }
    }

    /// The recipients of `agent`.
    pub fn recipients_of<'a>(&'a self, agent: &'a str) -> impl Iterator<Item = &'a MailRecipient> + 'a {
        self.recipients.iter().filter(move |(a, _)| a == agent).map(|(_, r)| r)
    }
}

/// Why the mail settings cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmailError {
    /// `from` is not a mailbox.
    #[error("from: {from:?} is not a mail address (give e.g. \"askloop <askloop@example.com>\"): {error}")]
    From {
        /// As given.
        from: String,
        /// Why.
        error: lettre::address::AddressError,
    },
    /// A recipient's address cannot be used.
    #[error("recipient {address:?}: {problem}")]
    Recipient {
        /// As given.
        address: String,
        /// Why.
        problem: InvalidAddress,
    },
    /// The SMTP connection cannot be set up (a TLS host name that is not
    /// one).
    #[error("cannot set up SMTP to {host}: {error}")]
    Transport {
        /// The host.
        host: String,
        /// Why.
        error: lettre::transport::smtp::Error,
    },
}

/// A mail address that is not one: what was given, why, and an example of
/// what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not a mail address ({why}); give e.g. \"{example}\"")]
pub struct InvalidAddress {
    /// What was given.
    pub given: String,
    /// Why it is not an address.
    pub why: String,
    /// An address of the accepted form.
    pub example: &'static str,
}

/// Checks a recipient's address: a mailbox lettre can send to.
pub fn check_address(address: &str) -> Result<(), InvalidAddress> {
    address
        .parse::<lettre::Address>()
        .map(|_| ())
        .map_err(|err| InvalidAddress {
            given: address.to_owned(),
            why: err.to_string(),
            example: "alice@example.com",
        })
}

/// Checks a `From`: a mailbox, with or without a name.
pub fn check_from(from: &str) -> Result<(), InvalidAddress> {
    from.parse::<Mailbox>().map(|_| ()).map_err(|err| InvalidAddress {
        given: from.to_owned(),
        why: err.to_string(),
        example: "askloop <askloop@example.com>",
    })
}

/// Sends questions by email.
pub(crate) struct Mailer {
    settings: EmailSettings,
    from: Mailbox,
    transport: AsyncSmtpTransport<Tokio1Executor>,
}

impl fmt::Debug for Mailer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mailer")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Mailer {
    /// A mailer for `settings`, checked.
    pub(crate) fn new(settings: EmailSettings) -> Result<Mailer, EmailError> {
        let from: Mailbox = settings.from.parse().map_err(|error| EmailError::From {
            from: settings.from.clone(),
            error,
        })?;
        for (_, recipient) in &settings.recipients {
            check_address(&recipient.address).map_err(|problem| EmailError::Recipient {
                address: recipient.address.clone(),
                problem,
            })?;
        }
        let transport_error = |error| EmailError::Transport {
            host: settings.host.clone(),
            error,
        };
        let builder = match settings.tls {
            SmtpTls::None => AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&settings.host),
            SmtpTls::StartTls => {
                AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&settings.host).map_err(transport_error)?
            }
            SmtpTls::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(&settings.host).map_err(transport_error)?,
        };
        let mut builder = builder.port(settings.port).timeout(Some(settings.timeout));
        if let Some(user) = &settings.username {
            builder = builder.credentials(Credentials::new(
                user.clone(),
                settings.password.clone().unwrap_or_default(),
            ));
        }
        Ok(Mailer {
            from,
            transport: builder.build(),
            settings,
        })
    }

    /// Attempts per message.
    pub(crate) fn max_attempts(&self) -> u32 {
        self.settings.max_attempts
    }

    /// How long one attempt may take.
    pub(crate) fn timeout(&self) -> Duration {
        self.settings.timeout
    }

    /// One attempt to mail the question `message` announces, at `now`.
    pub(crate) async fn deliver(
        &self,
        store: &dyn RunStore,
        links: Option<&AnswerLinks>,
        message: &OutboxMessage,
        now: DateTime<Utc>,
    ) -> Attempt {
        let address = message.destination.strip_prefix(MAILTO).unwrap_or_default();
        let data = message.payload.get("data");
        let field = |name: &str| {
            data.and_then(|d| d.get(name))
                .and_then(|v| v.as_str())
                .unwrap_or_default()
        };
        let (agent, call_id) = (field("agentId"), field("toolCallId"));
        let Some(recipient) = self.settings.recipients_of(agent).find(|r| r.address == address) else {
            return Attempt::Failed(format!(
                "no recipient {address:?} of agent {agent:?} in this server's configuration ([agents.{agent}] email)"
            ));
        };
        let call = match reach::waiting_call(store, message, call_id, now, "mail").await {
            Ok(call) => call,
            Err(outcome) => return outcome,
        };
        if !recipient.tools.is_empty() && !recipient.tools.contains(&call.tool_name) {
            return Attempt::NotSent(format!(
                "not sent: {} is mailed calls of {} only, not of {}",
                recipient.address,
                recipient.tools.join(", "),
                call.tool_name
            ));
        }
        let Some(links) = links else {
            return Attempt::Failed(
                "this server makes no answer links ([links] and public_url), and a mailed question needs one"
                    .to_owned(),
            );
        };
        let link = match links
            .mint_for_notification(
                store,
                &message.id,
                &message.run_id,
                call_id,
                &recipient.name,
                // A reminder's link lives from when it is due, not from
                // when the question was raised.
                message.due_at(),
            )
            .await
        {
            Ok(link) => link,
            Err(
                err @ (LinkError::NotWaiting { .. }
                | LinkError::CallNotWaiting { .. }
                | LinkError::CallExpired { .. }
                | LinkError::UnknownRun { .. }),
            ) => return Attempt::NotSent(format!("not sent: {err}")),
            Err(err) => return Attempt::Failed(format!("cannot make the answer link: {}", ErrorChain(&err))),
        };
        let composed = message::compose(&message::MailQuestion {
            agent,
            run_id: &message.run_id,
            recipient: &recipient.name,
            call: &call,
            link: &link.url,
            expires_at: link.expires_at,
            notice: message.notice(),
            raised_at: message.created_at,
        });
        let to: Mailbox = match recipient.address.parse() {
            Ok(address) => Mailbox::new(Some(recipient.name.clone()), address),
            Err(err) => return Attempt::Failed(format!("recipient {:?}: {err}", recipient.address)),
        };
        let built = lettre::Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(composed.subject)
            // The same on every attempt, so a mail sent twice (a server
            // that died before recording the first) can be told apart.
            .message_id(Some(format!("<{}@askloop>", message.id)))
            .multipart(MultiPart::alternative_plain_html(composed.text, composed.html));
        let mail = match built {
            Ok(mail) => mail,
            Err(err) => return Attempt::Failed(format!("cannot build the message: {err}")),
        };
        match self.transport.send(mail).await {
            Ok(_) => Attempt::Sent,
            Err(err) => Attempt::Failed(format!(
                "SMTP {}:{}: {}",
                self.settings.host,
                self.settings.port,
                ErrorChain(&err)
            )),
        }
    }
}

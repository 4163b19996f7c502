//! Sending the store's outbox to the configured webhooks.
//!
//! Agents write a notification into the store's outbox in the same write
//! that raises a question or resolves one (see `AgentBuilder::notify`), so
//! none is lost to a crash and none is invented. This sender claims due
//! deliveries under a lease (of several servers on one database, each
//! delivery goes to one at a time), POSTs each, signed the Standard
//! Webhooks way, and records the outcome: a 2xx is delivered; anything else,
//! or no answer within the webhook's timeout, is tried again later, with
//! exponential backoff, until `max_attempts`, after which the delivery is
//! dead with its last error. The time of the next attempt is stored, so a
//! restart keeps the schedule. A sender that dies mid-attempt lets its lease
//! run out and another sends again: delivery is at least once, and the
//! `webhook-id` is the same on every attempt so receivers can drop repeats.
//!
//! Runs never wait for this: a failing receiver delays only its own
//! notifications.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use askloop::{Clock, Delivery, DeliveryOutcome, ErrorChain, Lease, RunStore, StoreError};
use base64::Engine;
use chrono::{DateTime, Utc};
use hmac::Mac;
use tokio::sync::watch;

mod receiver;

pub use receiver::{DEFAULT_MAX_ATTEMPTS, DEFAULT_WEBHOOK_TIMEOUT, InvalidSecret, WebhookConfig, WebhookSecret};

use crate::email::{MAILTO, Mailer};
use crate::links::AnswerLinks;
use crate::reach::Attempt;
use crate::slack::{SLACK, Slack};

/// How many deliveries one claim takes, sent at once.
const BATCH: u32 = 8;

/// The first retry waits at most this long (and at least half of it);
/// each next one twice as long.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// The longest wait between two attempts.
const LONGEST_RETRY: Duration = Duration::from_secs(3600);

/// How often to look for due deliveries when there were none, by default.
pub const DEFAULT_WEBHOOK_POLL: Duration = Duration::from_secs(1);

/// The webhooks a server sends notifications to, and the page address its
/// links use.
#[derive(Debug, Clone, Default)]
pub struct Webhooks {
    /// The webhooks (`[[webhooks]]`).
    pub hooks: Vec<WebhookConfig>,
    /// Links in notifications read `<public_url>/runs/<runId>` (the id
    /// percent-encoded, see [`askloop::run_page_url`]); without it
    /// notifications carry no link.
    pub public_url: Option<String>,
    /// How often to look for due deliveries when there were none.
    pub poll_every: Duration,
}

impl Webhooks {
    /// The webhooks of a configuration.
    pub fn new(hooks: Vec<WebhookConfig>, public_url: Option<String>) -> Self {
        Webhooks {
            hooks,
            public_url,
            poll_every: DEFAULT_WEBHOOK_POLL,
        }
    }
}

/// The Standard Webhooks signature of one attempt: `v1,` and the base64 of
/// HMAC-SHA256, keyed with the secret's bytes, of `{id}.{timestamp}.{body}`.
///
/// ```
/// let signature = askloop_server::webhook_signature(b"0123456789abcdef", "msg_1", 1_700_000_000, "{}");
/// assert!(signature.starts_with("v1,"));
/// ```
pub fn webhook_signature(secret: &[u8], id: &str, timestamp: i64, body: &str) -> String {
    let timestamp = timestamp.to_string();
    let parts: [&[u8]; 5] = [id.as_bytes(), b".", timestamp.as_bytes(), b".", body.as_bytes()];
    let tag = crate::signing::mac(secret, &parts).finalize().into_bytes();
    format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(tag))
}

/// Sends due deliveries until `stopping` turns true.
pub(crate) struct Sender {
    store: Arc<dyn RunStore>,
    /// When deliveries are due, their signatures' timestamps and when a
    /// retry is: the agents' clock.
    clock: Arc<dyn Clock>,
    hooks: HashMap<String, WebhookConfig>,
    public_url: Option<String>,
    poll_every: Duration,
    client: reqwest::Client,
    owner: String,
    lease: Duration,
    /// Answer links, when the server makes them: a raised question's
    /// notification carries one.
    links: Option<Arc<AnswerLinks>>,
    /// Sends the deliveries whose destination is `mailto:...`, when the
    /// server mails questions.
    mailer: Option<Arc<Mailer>>,
    /// Posts the deliveries whose destination is `slack:...`, when the
    /// server posts questions to Slack.
    slack: Option<Arc<Slack>>,
}

impl fmt::Debug for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl Sender {
    pub(crate) fn new(
        store: Arc<dyn RunStore>,
        clock: Arc<dyn Clock>,
        webhooks: Webhooks,
        links: Option<Arc<AnswerLinks>>,
        mailer: Option<Arc<Mailer>>,
        slack: Option<Arc<Slack>>,
    ) -> Result<Self, reqwest::Error> {
        // A receiver's redirect is not followed: the signature is for the
        // configured URL, and a 3xx counts as a failed attempt.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let longest = webhooks
            .hooks
            .iter()
            .map(|h| h.timeout)
            .chain(mailer.as_ref().map(|m| m.timeout()))
            .chain(slack.as_ref().map(|s| s.timeout()))
            .max()
            .unwrap_or_default();
        Ok(Sender {
            store,
            clock,
            hooks: webhooks.hooks.into_iter().map(|h| (h.url.clone(), h)).collect(),
            public_url: webhooks.public_url,
            poll_every: webhooks.poll_every,
            client,
            owner: format!("webhooks-{}-{}", std::process::id(), uuid::Uuid::now_v7()),
            // Long enough for every attempt of a batch (they run at once).
            lease: longest + Duration::from_secs(30),
            links,
            mailer,
            slack,
        })
    }

    pub(crate) async fn run(self, mut stopping: watch::Receiver<bool>) {
        loop {
            let taken = match self.round().await {
                Ok(taken) => taken,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot read the notifications to deliver");
                    0
                }
            };
            if *stopping.borrow() {
                return;
            }
            if taken == 0 {
                tokio::select! {
                    () = tokio::time::sleep(self.poll_every) => {}
                    _ = stopping.wait_for(|stop| *stop) => return,
                }
            }
        }
    }

    /// Claims a batch of due deliveries and sends them; returns how many.
    async fn round(&self) -> Result<usize, StoreError> {
        let now = self.clock.now();
        let lease = Lease::new(self.owner.clone(), now + self.lease);
        let batch = self.store.claim_deliveries(now, &lease, BATCH).await?;
        let taken = batch.len();
        futures::future::join_all(batch.into_iter().map(|delivery| self.deliver(delivery))).await;
        Ok(taken)
    }

    async fn deliver(&self, delivery: Delivery) {
        let id = delivery.message.id.clone();
        let outcome = if delivery.message.destination.starts_with(MAILTO) {
            self.mail(&delivery).await
        } else if delivery.message.destination.starts_with(SLACK) {
            self.post_to_slack(&delivery).await
        } else {
            self.post(&delivery).await
        };
        match &outcome {
            DeliveryOutcome::Delivered => {
                tracing::info!(id = %id, run_id = %delivery.message.run_id, event = %delivery.message.event, destination = %shown_destination(&delivery.message.destination), "notification delivered")
            }
            DeliveryOutcome::Dead { error } => tracing::warn!(id = %id, error = %error, "notification given up on"),
            other => tracing::info!(id = %id, outcome = ?other, "notification not delivered yet"),
        }
        if let Err(err) = self.store.finish_delivery(&id, &self.owner, &outcome).await {
            // Lost: another sender took it (this attempt outlasted the
            // lease) and sends it again; the receiver dedupes on the id.
            tracing::warn!(id = %id, error = %err, "cannot record a delivery attempt");
        }
    }

    /// One attempt of a mail delivery. A question closed before its mail
    /// went out is not mailed: the delivery ends as given up on, its error
    /// saying why it was not sent.
    async fn mail(&self, delivery: &Delivery) -> DeliveryOutcome {
        let Some(mailer) = &self.mailer else {
            let error = AttemptError::Unconfigured {
                destination: delivery.message.destination.clone(),
            };
            return failed(delivery, DEFAULT_MAX_ATTEMPTS, &error, self.clock.now());
        };
        let now = self.clock.now();
        let outcome = mailer
            .deliver(self.store.as_ref(), self.links.as_deref(), &delivery.message, now)
            .await;
        self.channel_outcome(delivery, outcome, mailer.max_attempts())
    }

    /// One attempt of a Slack delivery: as for mail, a question closed
    /// before its post went out is not posted.
    async fn post_to_slack(&self, delivery: &Delivery) -> DeliveryOutcome {
        let Some(slack) = &self.slack else {
            let error = AttemptError::Unconfigured {
                destination: delivery.message.destination.clone(),
            };
            return failed(delivery, DEFAULT_MAX_ATTEMPTS, &error, self.clock.now());
        };
        let now = self.clock.now();
        let outcome = slack.deliver(self.store.as_ref(), &delivery.message, now).await;
        self.channel_outcome(delivery, outcome, slack.max_attempts())
    }

    /// What one attempt through a channel (mail, Slack) comes to: sent, not
    /// sent for good (given up on, saying why), or failed this time (tried
    /// again until `max_attempts`).
    fn channel_outcome(&self, delivery: &Delivery, outcome: Attempt, max_attempts: u32) -> DeliveryOutcome {
        match outcome {
            Attempt::Sent => DeliveryOutcome::Delivered,
            Attempt::NotSent(reason) => DeliveryOutcome::Dead { error: reason },
            Attempt::Failed(error) => failed(delivery, max_attempts, &AttemptError::Channel(error), self.clock.now()),
        }
    }

    /// One attempt of a webhook delivery.
    async fn post(&self, delivery: &Delivery) -> DeliveryOutcome {
        match self.hooks.get(&delivery.message.destination) {
            Some(hook) => match self.attempt(hook, delivery).await {
                Ok(()) => DeliveryOutcome::Delivered,
                Err(error) => failed(delivery, hook.max_attempts, &error, self.clock.now()),
            },
            None => failed(
                delivery,
                DEFAULT_MAX_ATTEMPTS,
                &AttemptError::Unconfigured {
                    destination: delivery.message.destination.clone(),
                },
                self.clock.now(),
            ),
        }
    }

    /// One POST; `Err` says why it did not count as delivered.
    async fn attempt(&self, hook: &WebhookConfig, delivery: &Delivery) -> Result<(), AttemptError> {
        let message = &delivery.message;
        let mut payload = message.payload.clone();
        if let (Some(base), Some(data)) = (&self.public_url, payload.get_mut("data"))
            && let Some(data) = data.as_object_mut()
        {
            data.insert(
                "link".to_owned(),
                serde_json::Value::String(askloop::run_page_url(base, &message.run_id)),
            );
        }
        if let Some(link) = self.answer_link(message).await
            && let Some(data) = payload.get_mut("data").and_then(|d| d.as_object_mut())
        {
            data.insert("answerLink".to_owned(), serde_json::Value::String(link));
        }
        let body = serde_json::to_string(&payload).map_err(AttemptError::Body)?;
        let timestamp = self.clock.now().timestamp();
        let signature = webhook_signature(hook.secret.bytes(), &message.id, timestamp, &body);
        let response = self
            .client
            .post(&hook.url)
            .timeout(hook.timeout)
            .header("content-type", "application/json")
            .header("webhook-id", &message.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await
            .map_err(|error| AttemptError::Unreachable {
                url: hook.url.clone(),
                error: error.without_url(),
            })?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(AttemptError::Refused {
                url: hook.url.clone(),
                status,
            })
        }
    }
}

impl Sender {
    /// The answer link of a raised question's notification, when the
    /// server makes links and the question still waits: the same link on
    /// every attempt (its id comes from the notification's). A link that
    /// cannot be made leaves the notification without one.
    async fn answer_link(&self, message: &askloop::OutboxMessage) -> Option<String> {
        let links = self.links.as_deref()?;
        if message.event != askloop::EventType::QuestionRaised {
            return None;
        }
        let call = message.payload.get("data")?.get("toolCallId")?.as_str()?;
        let made = links
            .mint_for_notification(
                self.store.as_ref(),
                &message.id,
                &message.run_id,
                call,
                &links.settings().webhook_recipient,
                message.created_at,
            )
            .await;
        match made {
            Ok(link) => Some(link.url),
            Err(err) => {
                tracing::info!(id = %message.id, run_id = %message.run_id, error = %err, "notification sent without an answer link");
                None
            }
        }
    }
}

/// Why an attempt did not count as delivered; its text is the delivery's
/// stored `last_error`.
#[derive(Debug)]
enum AttemptError {
    /// The delivery names a webhook this server has no `[[webhooks]]` table
    /// for.
    Unconfigured { destination: String },
    /// The mail or the Slack post was not sent this time (the SMTP server
    /// or Slack's API could not be reached, or refused it).
    Channel(String),
    /// The body could not be written as JSON.
    Body(serde_json::Error),
    /// No answer: the receiver could not be reached, or did not answer
    /// within the webhook's timeout.
    Unreachable { url: String, error: reqwest::Error },
    /// The receiver answered with a status other than 2xx.
    Refused { url: String, status: reqwest::StatusCode },
}

impl fmt::Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptError::Unconfigured { destination } if destination.starts_with(MAILTO) => write!(
                f,
                "this server mails no questions ([email] in its configuration), and this delivery is to {destination}"
            ),
            AttemptError::Unconfigured { destination } if destination.starts_with(SLACK) => write!(
                f,
                "this server posts no questions to Slack ([slack] in its configuration), and this delivery is to {destination}"
            ),
            AttemptError::Channel(error) => f.write_str(error),
            AttemptError::Unconfigured { destination } => write!(
                f,
                "no [[webhooks]] table with url {} in this server's configuration",
                shown_destination(destination)
            ),
            AttemptError::Body(err) => write!(f, "cannot serialise the body: {err}"),
            AttemptError::Unreachable { url, error } => {
                write!(f, "cannot POST to {}: {}", shown_destination(url), ErrorChain(error))
            }
            AttemptError::Refused { url, status } => write!(f, "{} answered HTTP {status}", shown_destination(url)),
        }
    }
}

impl std::error::Error for AttemptError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AttemptError::Body(err) => Some(err),
            AttemptError::Unreachable { error, .. } => Some(error),
            AttemptError::Unconfigured { .. } | AttemptError::Refused { .. } | AttemptError::Channel(_) => None,
        }
    }
}

/// The outcome at `now` of a failed attempt: tried again later, unless it
/// was the last allowed one.
/// A destination as logs and stored errors show it: a webhook's URL by its
/// origin only, since the rest may hold a token (Slack's and Discord's
/// incoming webhooks carry theirs in the path) that anyone reading a log
/// could post with; an address (`mailto:`) or a channel (`slack:`) as it is.
pub(crate) fn shown_destination(destination: &str) -> String {
    if destination.starts_with(MAILTO) || destination.starts_with(SLACK) {
        return destination.to_owned();
    }
    match reqwest::Url::parse(destination) {
        Ok(url) if url.path() == "/" && url.query().is_none() => url.origin().ascii_serialization(),
        Ok(url) => format!("{}/…", url.origin().ascii_serialization()),
        Err(_) => "a URL that cannot be read".to_owned(),
    }
}

fn failed(delivery: &Delivery, max_attempts: u32, error: &AttemptError, now: DateTime<Utc>) -> DeliveryOutcome {
    let error = error.to_string();
    let attempts = delivery.attempts + 1;
    if attempts >= max_attempts {
        return DeliveryOutcome::Dead {
            error: format!("{error} (attempt {attempts} of {max_attempts})"),
        };
    }
    let wait = retry_wait(delivery.attempts);
    DeliveryOutcome::Retry {
        next_at: now + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::hours(1)),
        error,
    }
}

/// How long to wait after the `done + 1`th failed attempt: askloop's one
/// [`Backoff`](askloop::Backoff), doubling from [`FIRST_RETRY`] up to
/// [`LONGEST_RETRY`], each wait between half and all of that at random, so
/// receivers coming back are not hit by every retry at once.
fn retry_wait(done: u32) -> Duration {
    askloop::Backoff::new(FIRST_RETRY, LONGEST_RETRY).wait(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_this_server_cannot_send_names_the_table_it_lacks() {
        let unconfigured = |destination: &str| {
            AttemptError::Unconfigured {
                destination: destination.to_owned(),
            }
            .to_string()
        };
        assert!(unconfigured("mailto:a@example.com").contains("[email]"));
        assert!(unconfigured("slack:C0DEPLOY").contains("[slack]"));
        assert!(unconfigured("https://hooks.example.com/x").contains("[[webhooks]]"));
    }

    #[test]
    fn a_webhooks_url_is_shown_by_its_origin_and_addresses_and_channels_as_they_are() {
        let hook = "https://hooks.slack.com/services/T000/B000/XXXXsecretXXXX?x=1";
        let refused = AttemptError::Refused {
            url: hook.to_owned(),
            status: reqwest::StatusCode::NOT_FOUND,
        }
        .to_string();
        assert_eq!(refused, "https://hooks.slack.com/… answered HTTP 404 Not Found");
        let unconfigured = AttemptError::Unconfigured {
            destination: hook.to_owned(),
        }
        .to_string();
        assert!(!unconfigured.contains("secret"), "{unconfigured}");
        assert_eq!(shown_destination("http://127.0.0.1:9000/"), "http://127.0.0.1:9000");
        assert_eq!(shown_destination("mailto:ana@example.com"), "mailto:ana@example.com");
        assert_eq!(shown_destination("slack:C0DEPLOY"), "slack:C0DEPLOY");
    }

    #[test]
    fn the_signature_matches_the_standard_webhooks_example() {
        // The example of the Standard Webhooks specification
        // (github.com/standard-webhooks/standard-webhooks, spec/standard-webhooks.md).
        let secret = base64::engine::general_purpose::STANDARD
            .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .unwrap();
        let body = r#"{"test": 2432232314}"#;
        assert_eq!(
            webhook_signature(&secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn retries_wait_longer_each_time_up_to_an_hour() {
        let within = |done: u32, secs: f64| {
            let wait = retry_wait(done).as_secs_f64();
            assert!(
                wait >= secs * 0.5 && wait <= secs,
                "attempt {done}: {wait}s, expected about {secs}s"
            );
        };
        within(0, 1.0);
        within(1, 2.0);
        within(5, 32.0);
        within(40, 3600.0);
    }
}

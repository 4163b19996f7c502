//! Answer links: a signed, single-use link that answers one waiting call
//! as the person it was made out to, without an API token.
//!
//! - **Made** for a waiting call and a named recipient ([`AnswerLinks::mint`]):
//!   by `POST /api/runs/{runId}/links` (behind the API token, for runs the
//!   token may see), by `askloop link`, and for each question a webhook
//!   announces. A link works until the earliest of the configured longest
//!   age, the time asked for, and the question's own time limit. Its row
//!   keeps who made it (the name the maker acted under: the token's, the
//!   person a trusted proxy named, the CLI's user), and `[links]
//!   recipients` may limit whom links are made out to.
//! - **Signed** (`token.rs`): the token names its row, run, call, recipient
//!   and expiry, under HMAC-SHA256 with the first configured key; every
//!   configured key verifies.
//! - **Kept** in the store ([`askloop::LinkStore`]): the row says whether
//!   the link was used or revoked, which no signature can. Answering first
//!   takes the row in one compare-and-set, so a link answers once; an
//!   answer the question refuses gives the row back.
//! - **Opened** at `/links/{token}` (`page.rs`): a GET shows the question
//!   and never answers (mail scanners and link previews follow links); the
//!   answer is a POST from that page carrying the link's form token, under
//!   the server's Host and cross-site rules. It goes through the same
//!   exactly-once resume as every answer, recorded as by the recipient
//!   through [`Interface::Link`], made by the link's maker
//!   ([`Author::made_by`](askloop::Author::made_by)). Whoever holds a
//!   forwarded link answers as its recipient.

mod api;
mod page;
mod token;

use std::fmt;
use std::time::Duration;

use askloop::{
    AnswerLink, CallState, Closed, Interface, LinkState, PendingToolCall, Resolution, RunError, RunRecord, RunStatus,
    RunStore, StoreError, quoted_excerpt,
};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

pub(crate) use api::{list as list_route, mint as mint_route, revoke as revoke_route};
pub(crate) use page::routes as page_routes;
use token::{BadToken, Claims};

/// Where links are opened (`<public_url>/links/<token>`), and their page's
/// reads and answers below it.
pub(crate) const LINKS_PATH: &str = "/links/";

/// A request's path as logs and traces show it. A path under
/// [`LINKS_PATH`] holds a link's token, a credential that answers as the
/// link's recipient: whoever reads a log line or a trace holding it could
/// answer. So such a path is shown as its `route` (`/links/{token}`,
/// `/links/{token}/question`), or as `/links/…` when no route matched (a
/// link cut short or mistyped). Every other path is shown as it is: run,
/// agent and thread ids name things, they open nothing.
pub(crate) fn shown_path<'a>(path: &'a str, route: Option<&'a str>) -> &'a str {
    if !path.starts_with(LINKS_PATH) {
        return path;
    }
    route
        .filter(|route| route.starts_with(LINKS_PATH))
        .unwrap_or("/links/…")
}

/// How long a link works at most, unless `[links] max_age` says otherwise.
pub const DEFAULT_LINK_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Whom links in webhook notifications are made out to, unless
/// `[links] webhook_recipient` says otherwise.
pub const DEFAULT_WEBHOOK_RECIPIENT: &str = "webhook";

/// The fewest characters of a link signing key.
pub const MIN_LINK_KEY_CHARS: usize = 32;

/// The longest recipient name, in characters.
const MAX_RECIPIENT_CHARS: usize = 200;

/// How soon after a link is taken its answer is stored (in milliseconds, in
/// practice). A link taken longer ago than this whose call still waits lost
/// its answer (the process died between the two writes) and opens again.
const TAKEN_AND_LOST: chrono::Duration = chrono::Duration::seconds(60);

/// A link signing key: its id (named in the links it signs) and its
/// secret. Its `Debug` does not show the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct LinkKey {
    id: String,
    secret: Vec<u8>,
}

impl LinkKey {
    /// A key `id` with these secret bytes.
    pub fn new(id: impl Into<String>, secret: Vec<u8>) -> Self {
        LinkKey { id: id.into(), secret }
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn secret(&self) -> &[u8] {
        &self.secret
    }
}

impl fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkKey").field("id", &self.id).finish_non_exhaustive()
    }
}

/// `[links]`, checked: the keys (the first signs), the longest a link
/// works, whom webhook links are made out to, and whom links may be made
/// out to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkSettings {
    /// The keys; the first signs, all verify. Never empty.
    pub keys: Vec<LinkKey>,
    /// The longest a link works.
    pub max_age: Duration,
    /// Whom links in webhook notifications are made out to.
    pub webhook_recipient: String,
    /// The only names links may be made out to, when set (`[links]
    /// recipients`): a link to anyone else is refused. Links the server
    /// makes for its own notifications are made out to names the
    /// configuration gives already (`webhook_recipient`, `[email]`'s
    /// recipients) and are not checked against it.
    pub recipients: Option<Vec<String>>,
}

impl LinkSettings {
    /// Settings with these keys (the first signs) and the defaults.
    pub fn new(signing: LinkKey, verifying: impl IntoIterator<Item = LinkKey>) -> Self {
        LinkSettings {
            keys: std::iter::once(signing).chain(verifying).collect(),
            max_age: DEFAULT_LINK_MAX_AGE,
            webhook_recipient: DEFAULT_WEBHOOK_RECIPIENT.to_owned(),
            recipients: None,
        }
    }

    /// Sets the longest a link works.
    pub fn max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }

    /// Allows links made out to these names only.
    pub fn only_recipients(mut self, names: Vec<String>) -> Self {
        self.recipients = Some(names);
        self
    }
}

/// Links need the address people open them at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "answer links are configured ([links]) but public_url is not: a link needs the address people open it at. Set public_url = \"https://...\" in askloop.toml; until then no links are made"
)]
pub struct LinksNeedPublicUrl;

/// The answer links of a server: its settings and its public address.
#[derive(Debug, Clone)]
pub struct AnswerLinks {
    settings: LinkSettings,
    public_url: String,
}

/// What to make a link for.
#[derive(Debug, Clone, Copy)]
pub struct LinkRequest<'a> {
    /// The run.
    pub run_id: &'a str,
    /// The waiting call; `None`: the run's only waiting call.
    pub tool_call_id: Option<&'a str>,
    /// Whom it is made out to (recorded as the author of its answer).
    pub recipient: &'a str,
    /// Who makes it: the name the maker acts under (an API token's name,
    /// a person a trusted proxy named, the CLI's user), if anything names
    /// them. Kept with the link and recorded beside the recipient in its
    /// answer.
    pub maker: Option<&'a str>,
    /// How long it should work, if less than the longest allowed.
    pub valid_for: Option<Duration>,
}

/// A link made: where to send the person, and what it answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MintedLink {
    /// The link's id (to revoke it).
    pub link_id: String,
    /// The link: `<public_url>/links/<token>`.
    pub url: String,
    /// The run.
    pub run_id: String,
    /// The call it answers.
    pub tool_call_id: String,
    /// Whom it is made out to.
    pub recipient: String,
    /// Who made it, if anything named them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub made_by: Option<String>,
    /// When it stops working (on the wire as every time is:
    /// `crate::wire::millis`).
    #[serde(serialize_with = "crate::wire::millis")]
    pub expires_at: DateTime<Utc>,
}

/// Why a link could not be made or revoked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The store keeps no links.
    #[error("this server's store keeps no answer links")]
    NoLinkStore,
    /// No such run.
    #[error("no run with id {run_id}")]
    UnknownRun {
        /// The run.
        run_id: String,
    },
    /// The run waits on nothing.
    #[error("run {run_id} is {status} and waits on no answer; links are made for waiting calls")]
    NotWaiting {
        /// The run.
        run_id: String,
        /// Its status.
        status: RunStatus,
    },
    /// Several calls wait and none was named.
    #[error("run {run_id} waits on several calls; name one (--call or toolCallId): {}", pending.join(", "))]
    Ambiguous {
        /// The run.
        run_id: String,
        /// The calls waiting.
        pending: Vec<String>,
    },
    /// The call named does not wait.
    #[error("call {tool_call_id} of run {run_id} does not wait for an answer; waiting: {}", pending.join(", "))]
    CallNotWaiting {
        /// The run.
        run_id: String,
        /// The call.
        tool_call_id: String,
        /// The calls waiting.
        pending: Vec<String>,
    },
    /// The call's own time limit has passed.
    #[error("call {tool_call_id} of run {run_id} stopped waiting at {at}")]
    CallExpired {
        /// The run.
        run_id: String,
        /// The call.
        tool_call_id: String,
        /// When.
        at: DateTime<Utc>,
    },
    /// The recipient's name is not usable.
    #[error("recipient: {0}")]
    BadRecipient(RecipientProblem),
    /// `[links] recipients` does not name the recipient.
    #[error(
        "links may be made out only to the recipients this server lists ([links] recipients in askloop.toml), \
         and {} is not one of them; make it out to one of: {}",
        quoted_excerpt(recipient), allowed.join(", ")
    )]
    RecipientNotAllowed {
        /// The recipient asked for.
        recipient: String,
        /// The names links may be made out to.
        allowed: Vec<String>,
    },
    /// The time asked for is no time at all.
    #[error("a link must work for some time; ask for at least one second")]
    NoTime,
    /// No such link.
    #[error("no answer link with id {link_id}")]
    UnknownLink {
        /// The link.
        link_id: String,
    },
    /// The link was used or revoked already.
    #[error("answer link {link_id} is {state} and cannot be revoked")]
    NotRevocable {
        /// The link.
        link_id: String,
        /// Where it is.
        state: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a link's page does not answer: the link is not one of this
/// server's, or it no longer works, or its question was resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkRefusal {
    /// Not a link of this server, or changed since it was made.
    #[error("this link is not valid: it was changed, cut short, or signed with a key this server no longer holds")]
    Invalid,
    /// Used already.
    #[error("this link was already used, at {at}; a link answers once")]
    Used {
        /// When.
        at: String,
    },
    /// Revoked.
    #[error("this link was revoked at {at}")]
    Revoked {
        /// When.
        at: String,
    },
    /// Ran out.
    #[error("this link expired at {at}")]
    Expired {
        /// When.
        at: String,
    },
    /// Its question no longer waits.
    #[error("this question is closed: {how}")]
    Closed {
        /// What happened to it.
        how: String,
    },
    /// The form's token is missing or not this link's.
    #[error("the form was not sent from this link's page; open the link again and answer there")]
    FormToken,
}

impl LinkRefusal {
    /// The error code on the wire.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            LinkRefusal::Invalid => "link_invalid",
            LinkRefusal::Used { .. } => "link_used",
            LinkRefusal::Revoked { .. } => "link_revoked",
            LinkRefusal::Expired { .. } => "link_expired",
            LinkRefusal::Closed { .. } => "question_closed",
            LinkRefusal::FormToken => "link_form_token",
        }
    }

    fn of_state(state: LinkState) -> Option<LinkRefusal> {
        let at = askloop::rfc3339;
        match state {
            LinkState::Open => None,
            LinkState::Used(when) => Some(LinkRefusal::Used { at: at(when) }),
            LinkState::Revoked(when) => Some(LinkRefusal::Revoked { at: at(when) }),
            LinkState::Expired(when) => Some(LinkRefusal::Expired { at: at(when) }),
            _ => Some(LinkRefusal::Invalid),
        }
    }
}

impl From<BadToken> for LinkRefusal {
    fn from(_: BadToken) -> Self {
        LinkRefusal::Invalid
    }
}

/// What is wrong with the name a link is made out to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecipientProblem {
    /// No name at all.
    #[error("give the name of the person the link is for (e.g. \"Alice\")")]
    Empty,
    /// A control character in it.
    #[error("a name cannot hold control characters")]
    ControlCharacter,
    /// Longer than a name may be.
    #[error("a name has at most {MAX_RECIPIENT_CHARS} characters")]
    TooLong,
}

/// Checks a recipient's name: some text, no control characters, not too
/// long. Returns it trimmed, or what is wrong with it.
pub fn check_recipient(name: &str) -> Result<String, RecipientProblem> {
    let name = name.trim();
    if name.is_empty() {
        return Err(RecipientProblem::Empty);
    }
    if name.chars().any(char::is_control) {
        return Err(RecipientProblem::ControlCharacter);
    }
    if name.chars().count() > MAX_RECIPIENT_CHARS {
        return Err(RecipientProblem::TooLong);
    }
    Ok(name.to_owned())
}

/// A link opened: its verified claims, its row, and the run it answers.
#[derive(Debug)]
pub(crate) struct OpenedLink {
    pub(crate) claims: Claims,
    pub(crate) row: AnswerLink,
    pub(crate) run: RunRecord,
    pub(crate) call: PendingToolCall,
}

impl AnswerLinks {
    /// The links of a server reached at `public_url` (kept without a
    /// trailing slash).
    pub fn new(settings: LinkSettings, public_url: impl Into<String>) -> Self {
        AnswerLinks {
            settings,
            public_url: public_url.into().trim_end_matches('/').to_owned(),
        }
    }

    /// The links a configuration asks for: none without `[links]`; an
    /// error when `[links]` is there without `public_url`.
    pub fn configured(
        settings: Option<&LinkSettings>,
        public_url: Option<&str>,
    ) -> Result<Option<AnswerLinks>, LinksNeedPublicUrl> {
        match (settings, public_url) {
            (None, _) => Ok(None),
            (Some(_), None) => Err(LinksNeedPublicUrl),
            (Some(settings), Some(url)) => Ok(Some(AnswerLinks::new(settings.clone(), url))),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &LinkSettings {
        &self.settings
    }

    fn signing_key(&self) -> &LinkKey {
        // `LinkSettings::new` and the configuration always give one key.
        &self.settings.keys[0]
    }

    /// Makes a link for a waiting call of a run in `store`, at `now`,
    /// made out to one of [`LinkSettings::recipients`] when it lists some.
    pub async fn mint(
        &self,
        store: &dyn RunStore,
        request: LinkRequest<'_>,
        now: DateTime<Utc>,
    ) -> Result<MintedLink, LinkError> {
        if let Some(allowed) = &self.settings.recipients {
            let recipient = check_recipient(request.recipient).map_err(LinkError::BadRecipient)?;
            if !allowed.contains(&recipient) {
                return Err(LinkError::RecipientNotAllowed {
                    recipient,
                    allowed: allowed.clone(),
                });
            }
        }
        let link_id = format!("lnk_{}", uuid::Uuid::now_v7().simple());
        self.mint_with_id(store, request, now, link_id).await
    }

    /// Makes the link of a notification, made out to `recipient` (its id
    /// derived from the notification's, so each attempt of one delivery
    /// carries one link: a webhook retried, or a mail sent again after a
    /// failed attempt).
    pub(crate) async fn mint_for_notification(
        &self,
        store: &dyn RunStore,
        notification_id: &str,
        run_id: &str,
        tool_call_id: &str,
        recipient: &str,
        written_at: DateTime<Utc>,
    ) -> Result<MintedLink, LinkError> {
        let digest = Sha256::digest(format!("notification:{notification_id}").as_bytes());
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        let request = LinkRequest {
            run_id,
            tool_call_id: Some(tool_call_id),
            recipient,
            maker: None,
            valid_for: None,
        };
        self.mint_with_id(store, request, written_at, format!("lnk_{hex}"))
            .await
    }

    async fn mint_with_id(
        &self,
        store: &dyn RunStore,
        request: LinkRequest<'_>,
        now: DateTime<Utc>,
        link_id: String,
    ) -> Result<MintedLink, LinkError> {
        let links = store.link_store().ok_or(LinkError::NoLinkStore)?;
        let recipient = check_recipient(request.recipient).map_err(LinkError::BadRecipient)?;
        let run_id = request.run_id;
        let run = store.get(run_id).await?.ok_or_else(|| LinkError::UnknownRun {
            run_id: run_id.to_owned(),
        })?;
        let call = waiting_call(&run, request.tool_call_id, now)?.clone();
        let mut expires_at = now + chrono_duration(self.settings.max_age);
        if let Some(wanted) = request.valid_for {
            if wanted.is_zero() {
                return Err(LinkError::NoTime);
            }
            expires_at = expires_at.min(now + chrono_duration(wanted));
        }
        if let Some(limit) = call.expires_at {
            expires_at = expires_at.min(limit);
        }
        // Whole seconds, rounded down: the token carries seconds, and a
        // link never outlives what it says.
        let expires_at = DateTime::from_timestamp(expires_at.timestamp(), 0).unwrap_or(expires_at);
        let stored = links
            .create_link(&AnswerLink {
                link_id,
                run_id: run_id.to_owned(),
                tool_call_id: call.tool_call_id.clone(),
                recipient,
                made_by: request.maker.map(str::to_owned),
                created_at: now,
                expires_at,
                used_at: None,
                revoked_at: None,
            })
            .await?;
        Ok(self.minted(&stored))
    }

    /// The link of a stored row, signed with the current key.
    fn minted(&self, row: &AnswerLink) -> MintedLink {
        let key = self.signing_key();
        let claims = Claims {
            key: key.id().to_owned(),
            link: row.link_id.clone(),
            run: row.run_id.clone(),
            call: row.tool_call_id.clone(),
            to: row.recipient.clone(),
            exp: row.expires_at.timestamp(),
        };
        let token = token::sign(&claims, key);
        MintedLink {
            link_id: row.link_id.clone(),
            url: format!("{}/links/{token}", self.public_url),
            run_id: row.run_id.clone(),
            tool_call_id: row.tool_call_id.clone(),
            recipient: row.recipient.clone(),
            made_by: row.made_by.clone(),
            expires_at: row.expires_at,
        }
    }

    /// Verifies a token and reads what it answers, at `now`: refused unless
    /// the signature holds, the row matches it, the link is open and its
    /// call still waits.
    pub(crate) async fn open(
        &self,
        store: &dyn RunStore,
        token: &str,
        now: DateTime<Utc>,
    ) -> Result<OpenedLink, OpenError> {
        let claims = token::verify(token, &self.settings.keys).map_err(LinkRefusal::from)?;
        let links = store.link_store().ok_or(LinkRefusal::Invalid)?;
        let row = links.link(&claims.link).await?.ok_or(LinkRefusal::Invalid)?;
        let matches = row.run_id == claims.run
            && row.tool_call_id == claims.call
            && row.recipient == claims.to
            && row.expires_at.timestamp() == claims.exp;
        if !matches {
            return Err(LinkRefusal::Invalid.into());
        }
        let mut row = row;
        let state = row.state(now);
        let stale_take = match state {
            LinkState::Used(taken) if now - taken >= TAKEN_AND_LOST => Some(taken),
            other => {
                if let Some(refusal) = LinkRefusal::of_state(other) {
                    return Err(refusal.into());
                }
                None
            }
        };
        let run = store.get(&row.run_id).await?.ok_or(LinkRefusal::Invalid)?;
        let standing = run.call_state(&row.tool_call_id, now);
        let call = match standing {
            CallState::Waiting(waiting) => Some(waiting.call.clone()),
            _ => None,
        };
        if let Some(taken) = stale_take {
            // Taken long ago, and its call still waits: the answer of that
            // take was never stored (the process died between the two
            // writes, or could not give the link back). The link is given
            // back, once, by a compare-and-set on the time it was taken.
            if call.is_none() || row.revoked_at.is_some() || row.expires_at <= now {
                return Err(LinkRefusal::of_state(state).unwrap_or(LinkRefusal::Invalid).into());
            }
            links.release_link(&row.link_id, taken).await?;
            row.used_at = None;
            tracing::warn!(link_id = %row.link_id, taken_at = %taken, "an answer link taken without its answer being stored is open again");
        }
        let Some(call) = call else {
            return Err(LinkRefusal::Closed {
                how: closed_how(&standing),
            }
            .into());
        };
        Ok(OpenedLink { claims, row, run, call })
    }

    /// The form token of an opened link's page.
    pub(crate) fn form_token(&self, opened: &OpenedLink) -> String {
        let key = self
            .settings
            .keys
            .iter()
            .find(|k| k.id() == opened.claims.key)
            .unwrap_or_else(|| self.signing_key());
        token::form_token(&opened.claims, key)
    }

    /// Whether `sent` is the form token of the opened link.
    pub(crate) fn form_token_matches(&self, sent: &str, opened: &OpenedLink) -> bool {
        token::form_token_matches(sent, &opened.claims, &self.settings.keys)
    }
}

/// Why opening a link failed: a refusal to show, or a store that failed.
#[derive(Debug)]
pub(crate) enum OpenError {
    Refused(LinkRefusal),
    Store(StoreError),
}

impl From<LinkRefusal> for OpenError {
    fn from(refusal: LinkRefusal) -> Self {
        OpenError::Refused(refusal)
    }
}

impl From<StoreError> for OpenError {
    fn from(err: StoreError) -> Self {
        OpenError::Store(err)
    }
}

/// Revokes a link of `store` at `now`: it answers nothing from then on.
/// Needs no key, so a link can be revoked after its key was removed.
pub async fn revoke(store: &dyn RunStore, link_id: &str, now: DateTime<Utc>) -> Result<AnswerLink, LinkError> {
    let links = store.link_store().ok_or(LinkError::NoLinkStore)?;
    let unknown = || LinkError::UnknownLink {
        link_id: link_id.to_owned(),
    };
    if !links.revoke_link(link_id, now).await? {
        let row = links.link(link_id).await?.ok_or_else(unknown)?;
        return Err(LinkError::NotRevocable {
            link_id: link_id.to_owned(),
            state: row.state(now).to_string(),
        });
    }
    links.link(link_id).await?.ok_or_else(unknown)
}

/// The call of `run` a link would answer at `now`: the one named, else the
/// only one (the run's [`RunRecord::resume_target`], in a link's words), and
/// it must still wait.
fn waiting_call<'a>(
    run: &'a RunRecord,
    tool_call_id: Option<&str>,
    now: DateTime<Utc>,
) -> Result<&'a PendingToolCall, LinkError> {
    let run_id = || run.run_id.clone();
    let target = run.resume_target(tool_call_id).map_err(|err| match err {
        RunError::Expired {
            tool_call_id,
            expired_at,
            ..
        } => LinkError::CallExpired {
            run_id: run_id(),
            tool_call_id,
            at: expired_at,
        },
        RunError::ToolCallNotPending {
            tool_call_id, pending, ..
        } => LinkError::CallNotWaiting {
            run_id: run_id(),
            tool_call_id,
            pending,
        },
        RunError::AmbiguousResume { pending, .. } if !pending.is_empty() => LinkError::Ambiguous {
            run_id: run_id(),
            pending,
        },
        // Not suspended, superseded, or suspended on nothing.
        _ => LinkError::NotWaiting {
            run_id: run_id(),
            status: run.status(),
        },
    })?;
    match run.call_state(&target.tool_call_id, now) {
        CallState::Waiting(waiting) => Ok(waiting.call),
        CallState::Closed(Closed::TimedOut { call, at }) => Err(LinkError::CallExpired {
            run_id: run_id(),
            tool_call_id: call.tool_call_id.clone(),
            at,
        }),
        _ => Err(LinkError::NotWaiting {
            run_id: run_id(),
            status: run.status(),
        }),
    }
}

/// What became of a call that no longer waits, for the link's page and
/// the deliveries that were not sent.
pub(crate) fn closed_how(state: &CallState<'_>) -> String {
    match state {
        CallState::Closed(closed) => closed.describe_with(describe),
        _ => "it waits on something other than a person's answer".to_owned(),
    }
}

/// "answered by Bob through the page at ...", "answered by Bob through a
/// link made by alice at ...".
fn describe(resolution: &Resolution) -> String {
    let by = match (&resolution.author.by, resolution.author.via) {
        (Some(name), Interface::Link) => match &resolution.author.made_by {
            Some(maker) => format!(" by {name} through a link made by {maker}"),
            None => format!(" by {name} through a link"),
        },
        (Some(name), via) => format!(" by {name} ({via})"),
        (None, via) => format!(" through {via}"),
    };
    format!("{}{by} at {}", resolution.kind, askloop::rfc3339(resolution.at))
}

fn chrono_duration(duration: Duration) -> chrono::Duration {
    chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::days(365 * 100))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_holding_a_links_token_is_shown_as_its_route_and_other_paths_as_they_are() {
        let token = "eyJrZXkiOiJrMSJ9.c2lnbmF0dXJl";
        let page = format!("/links/{token}");
        assert_eq!(shown_path(&page, Some("/links/{token}")), "/links/{token}");
        let question = format!("/links/{token}/question");
        assert_eq!(
            shown_path(&question, Some("/links/{token}/question")),
            "/links/{token}/question"
        );
        for unmatched in [
            format!("/links/{token}/"),
            format!("/links/{token}/x/y"),
            "/links/".to_owned(),
        ] {
            assert_eq!(shown_path(&unmatched, None), "/links/…", "{unmatched}");
            assert_eq!(shown_path(&unmatched, Some("/{*rest}")), "/links/…", "{unmatched}");
        }
        let run = "/api/runs/01a2/links";
        assert_eq!(shown_path(run, Some("/api/runs/{run_id}/links")), run);
        assert_eq!(shown_path("/linksomething", None), "/linksomething");
    }
}

//! Answer links as the store keeps them: what a link was made for, and
//! whether it was used or revoked.
//!
//! A link's signature proves who made it and that nothing in it was
//! changed, but not that it was not used already, nor that nobody took it
//! back: a signature alone gives neither. So each link made is a row, and
//! answering through it first takes the row in one compare-and-set
//! ([`LinkStore::take_link`]): of two people opening one link at once,
//! exactly one gets to answer.

use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::StoreError;

/// One answer link, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnswerLink {
    /// The link's own id (`lnk_` and random hex): what revoking names.
    pub link_id: String,
    /// The run whose call it answers.
    pub run_id: String,
    /// The call it answers.
    pub tool_call_id: String,
    /// Whom it was made out to: the author of its answer, whoever follows it.
    pub recipient: String,
    /// Who made it: the name its maker acted under (an API token's name, a
    /// person a trusted proxy named, the CLI's user); `None` when nothing
    /// named them (a server without tokens, a link the server made for a
    /// notification).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made_by: Option<String>,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// When it stops working.
    pub expires_at: DateTime<Utc>,
    /// When it was used to answer, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_at: Option<DateTime<Utc>>,
    /// When it was revoked, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Whether a link still answers, and if not, why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkState {
    /// It may answer its call.
    Open,
    /// It was used, at this time.
    Used(DateTime<Utc>),
    /// It was revoked, at this time.
    Revoked(DateTime<Utc>),
    /// It ran out, at this time.
    Expired(DateTime<Utc>),
}

impl AnswerLink {
    /// Where it is at `now`. A used link reads as used even after it ran
    /// out or was revoked: that is what its recipient needs to know.
    pub fn state(&self, now: DateTime<Utc>) -> LinkState {
        if let Some(at) = self.used_at {
            LinkState::Used(at)
        } else if let Some(at) = self.revoked_at {
            LinkState::Revoked(at)
        } else if self.expires_at <= now {
            LinkState::Expired(self.expires_at)
        } else {
            LinkState::Open
        }
    }
}

impl fmt::Display for LinkState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkState::Open => "open",
            LinkState::Used(_) => "used",
            LinkState::Revoked(_) => "revoked",
            LinkState::Expired(_) => "expired",
        })
    }
}

/// The answer links of a store (see [`RunStore::link_store`](super::RunStore::link_store)).
/// Times are kept to the microsecond, as every store keeps them.
#[async_trait]
pub trait LinkStore: Send + Sync {
    /// Stores a new link and returns it as stored. A link with the same id
    /// stored already is left as it is and returned instead, so a
    /// notification sent again carries the same link.
    async fn create_link(&self, link: &AnswerLink) -> Result<AnswerLink, StoreError>;

    /// The link with this id, if there is one.
    async fn link(&self, link_id: &str) -> Result<Option<AnswerLink>, StoreError>;

    /// Marks the link used at `at` if it is [`LinkState::Open`] then, in one
    /// compare-and-set: `true` for the one caller that took it, `false` for
    /// every other (and for a link that does not exist).
    async fn take_link(&self, link_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError>;

    /// Gives back a link taken at `taken_at` whose answer was refused (the
    /// question is still open, and its recipient may try again). A link
    /// taken at another time is left as it is.
    async fn release_link(&self, link_id: &str, taken_at: DateTime<Utc>) -> Result<(), StoreError>;

    /// Revokes the link at `at` unless it was used or revoked already:
    /// `true` if this call revoked it.
    async fn revoke_link(&self, link_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError>;

    /// The links made for a run, oldest first.
    async fn links(&self, run_id: &str) -> Result<Vec<AnswerLink>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap()
    }

    #[test]
    fn a_used_link_reads_as_used_even_once_it_ran_out_or_was_revoked() {
        let mut link = AnswerLink {
            link_id: "lnk_1".into(),
            run_id: "r".into(),
            tool_call_id: "c".into(),
            recipient: "Alice".into(),
            made_by: None,
            created_at: at(0),
            expires_at: at(100),
            used_at: None,
            revoked_at: None,
        };
        assert_eq!(link.state(at(99)), LinkState::Open);
        assert_eq!(link.state(at(100)), LinkState::Expired(at(100)));
        link.revoked_at = Some(at(50));
        assert_eq!(link.state(at(60)), LinkState::Revoked(at(50)));
        link.used_at = Some(at(40));
        assert_eq!(link.state(at(200)), LinkState::Used(at(40)));
    }
}

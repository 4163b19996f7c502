//! Who resolved what, and how: every answer, decline, approval, expiry,
//! cancel and recovery of a run is stored with the run, in the same write
//! that applies it, so the record cannot disagree with what happened.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What a resolution did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum ResolutionKind {
    /// A question got its answer.
    Answered,
    /// A question was declined (left unanswered on purpose).
    Declined,
    /// A call waiting for approval was approved.
    Approved,
    /// A call waiting for approval was declined.
    Denied,
    /// A question or approval got no answer within its time limit.
    Expired,
    /// The run was cancelled.
    Cancelled,
    /// The run was taken over after the process driving it stopped.
    Recovered,
    /// A question or approval was left unanswered because a new message
    /// came on the run's thread instead; the run ended there.
    Superseded,
}

impl ResolutionKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            ResolutionKind::Answered => "answered",
            ResolutionKind::Declined => "declined",
            ResolutionKind::Approved => "approved",
            ResolutionKind::Denied => "denied",
            ResolutionKind::Expired => "expired",
            ResolutionKind::Cancelled => "cancelled",
            ResolutionKind::Recovered => "recovered",
            ResolutionKind::Superseded => "superseded",
        }
    }
}

impl fmt::Display for ResolutionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Through which interface a resolution came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum Interface {
    /// A program calling the library directly.
    Library,
    /// The `askloop` command.
    Cli,
    /// The HTTP API.
    Http,
    /// The web page (through the HTTP API).
    Page,
    /// The server itself (its expiry sweep or its recovery).
    Server,
    /// An MCP client, through `askloop mcp` (stdio) or the `/mcp` endpoint
    /// of `askloop serve`.
    Mcp,
    /// One of the agent's approval rules (its name is the author's `by`),
    /// deciding a call instead of a person.
    Rule,
    /// An earlier approval that sticks ([`Resolution::grant`] names it; the
    /// author's `by` is whoever made it), approving a call in its scope.
    Grant,
    /// A signed answer link, opened by the person it was made out to (the
    /// author's `by`: the link's recipient, whoever followed it).
    Link,
    /// A Slack message's buttons or fields (the author's `by`: the Slack
    /// user id of whoever clicked, checked against the question's
    /// recipients).
    Slack,
}

impl Interface {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Interface::Library => "library",
            Interface::Cli => "cli",
            Interface::Http => "http",
            Interface::Page => "page",
            Interface::Server => "server",
            Interface::Mcp => "mcp",
            Interface::Rule => "rule",
            Interface::Grant => "grant",
            Interface::Link => "link",
            Interface::Slack => "slack",
        }
    }
}

impl fmt::Display for Interface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who acts on a run: the interface and, where known, the person or client
/// (the name of an API token, a name a proxy vouched for, the CLI's user).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Author {
    /// Through which interface.
    pub via: Interface,
    /// By whom, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl Author {
    /// An author known only by the interface.
    pub fn via(via: Interface) -> Self {
        Author { via, by: None }
    }

    /// An author with a name.
    pub fn named(via: Interface, by: impl Into<String>) -> Self {
        Author {
            via,
            by: Some(by.into()),
        }
    }
}

impl Default for Author {
    fn default() -> Self {
        Author::via(Interface::Library)
    }
}

/// One resolution of a run, as stored with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolution {
    /// The call it resolved (none for a cancel or a recovery of the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// What it did.
    pub kind: ResolutionKind,
    /// When.
    pub at: DateTime<Utc>,
    /// Through which interface and by whom.
    #[serde(flatten)]
    pub author: Author,
    /// For a call approved with arguments the person edited: the model's
    /// and the ones the call ran with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit: Option<ArgumentsEdit>,
    /// An approval that sticks: the grant this approval made or, through
    /// [`Interface::Grant`], the one that approved this call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<super::GrantNote>,
}

/// Arguments a person changed before approving a call: the call ran with
/// `edited`, never with `original`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArgumentsEdit {
    /// The arguments the model gave.
    pub original: serde_json::Value,
    /// The arguments the call ran with.
    pub edited: serde_json::Value,
}

impl Resolution {
    /// The oldest layout of stored runs that holds this resolution (see
    /// [`RUN_SCHEMA_VERSION`](crate::RUN_SCHEMA_VERSION)): 6 for a decision
    /// made in Slack, 5 for a grant or an answer through a link, 4 for an
    /// edit or a decision by a rule, else 1.
    pub(crate) fn layout(&self) -> i32 {
        if self.author.via == Interface::Slack {
            6
        } else if self.grant.is_some() || matches!(self.author.via, Interface::Grant | Interface::Link) {
            5
        } else if self.edit.is_some() || self.author.via == Interface::Rule {
            4
        } else {
            1
        }
    }

    /// A resolution made at `at` (read from the [`Clock`](crate::Clock) of
    /// whoever made it). The time is kept to the microsecond, as every store
    /// keeps it.
    pub fn new(tool_call_id: Option<&str>, kind: ResolutionKind, at: DateTime<Utc>, author: Author) -> Self {
        Resolution {
            tool_call_id: tool_call_id.map(str::to_owned),
            kind,
            at: crate::clock::to_micros(at),
            author,
            edit: None,
            grant: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_resolution_reads_flat_on_the_wire_and_round_trips() {
        let at = DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z").unwrap().to_utc();
        let resolution = Resolution {
            tool_call_id: Some("c1".into()),
            kind: ResolutionKind::Answered,
            at,
            author: Author::named(Interface::Http, "ops-bot"),
            edit: None,
            grant: None,
        };
        let wire = serde_json::to_value(&resolution).unwrap();
        assert_eq!(
            wire,
            json!({"toolCallId": "c1", "kind": "answered", "at": "2026-01-02T03:04:05Z", "via": "http", "by": "ops-bot"})
        );
        assert_eq!(serde_json::from_value::<Resolution>(wire).unwrap(), resolution);
    }
}

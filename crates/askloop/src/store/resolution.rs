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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum Interface {
    /// A program calling the library directly.
    #[default]
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
///
/// `by` is only ever a name something askloop trusts vouched for. A name a
/// client merely says it has (an MCP client's `clientInfo.name` on a
/// server without tokens) is kept apart, as `declared`; an answer through a
/// link names the link's recipient as `by` and whoever made the link as
/// `made_by`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Author {
    /// Through which interface.
    pub via: Interface,
    /// By whom, where known: a token's name, a name a trusted proxy
    /// vouched for, the CLI's user, a rule's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// A name the client gave itself, which nothing checked (an MCP
    /// client's `clientInfo.name` without a token). Never shown as `by`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<String>,
    /// For an answer through a link: who made the link (its maker's token
    /// name or author), while `by` is the recipient it was made out to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made_by: Option<String>,
}

impl Author {
    /// An author known only by the interface.
    pub fn via(via: Interface) -> Self {
        Author {
            via,
            by: None,
            declared: None,
            made_by: None,
        }
    }

    /// An author with a name.
    pub fn named(via: Interface, by: impl Into<String>) -> Self {
        Author {
            by: Some(by.into()),
            ..Author::via(via)
        }
    }

    /// An author with a name, or known only by the interface.
    pub fn maybe_named(via: Interface, by: Option<String>) -> Self {
        Author { by, ..Author::via(via) }
    }

    /// The same author with a name the client declared and nothing
    /// checked (see [`Author::declared`]).
    pub fn with_declared(mut self, name: impl Into<String>) -> Self {
        self.declared = Some(name.into());
        self
    }

    /// The same author, answering through a link `maker` made.
    pub fn with_made_by(mut self, maker: impl Into<String>) -> Self {
        self.made_by = Some(maker.into());
        self
    }
}

/// One resolution of a run, as stored with it: a JSON object of
/// `toolCallId` (absent for none), `kind`, `at`, the author's `via` and
/// `by` (absent for none), `edit` and `grant` (absent for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// The call it resolved (none for a cancel or a recovery of the run).
    pub tool_call_id: Option<String>,
    /// What it did.
    pub kind: ResolutionKind,
    /// When.
    pub at: DateTime<Utc>,
    /// Through which interface and by whom.
    pub author: Author,
    /// For a call approved with arguments the person edited: the model's
    /// and the ones the call ran with.
    pub edit: Option<ArgumentsEdit>,
    /// An approval that sticks: the grant this approval made or, through
    /// [`Interface::Grant`], the one that approved this call.
    pub grant: Option<super::GrantNote>,
}

/// A [`Resolution`] as written: the author's fields inline. Written out
/// rather than derived with `#[serde(flatten)]`, which reads every field
/// through a buffer first: every read of a run parses all its resolutions
/// (one per answer), and this reads them several times faster (see
/// `docs/benchmarks.md`, "A long conversation").
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StoredOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    kind: ResolutionKind,
    at: Stamp<'a>,
    via: Interface,
    #[serde(skip_serializing_if = "Option::is_none")]
    by: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    declared: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    made_by: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    edit: Option<&'a ArgumentsEdit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grant: Option<NoteOut<'a>>,
}

/// [`super::GrantNote`] as [`StoredOut`] writes it: its derived form, the
/// time stamped as the resolution's is.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NoteOut<'a> {
    id: &'a str,
    scope: super::GrantScope,
    granted_at: Stamp<'a>,
    granted_via: Interface,
}

/// A time as stored (chrono's form, to the microsecond a store keeps), or
/// as clients read it: RFC 3339 with milliseconds ([`crate::rfc3339`]),
/// the one form of every time askloop sends.
#[derive(Clone, Copy)]
enum Stamp<'a> {
    Stored(&'a DateTime<Utc>),
    Wire(&'a DateTime<Utc>),
}

impl Serialize for Stamp<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Stamp::Stored(at) => at.serialize(serializer),
            Stamp::Wire(at) => serializer.serialize_str(&crate::rfc3339(**at)),
        }
    }
}

/// A [`Resolution`] as clients read it (the HTTP API, webhooks): the
/// stored shape, its times in RFC 3339 with milliseconds. See
/// [`Resolution::on_wire`].
#[derive(Debug, Clone, Copy)]
pub struct ResolutionOnWire<'a>(&'a Resolution);

impl Serialize for ResolutionOnWire<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.out(Stamp::Wire).serialize(serializer)
    }
}

/// A [`Resolution`] as read (fields it does not know are ignored, as
/// before).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredIn {
    #[serde(default)]
    tool_call_id: Option<String>,
    kind: ResolutionKind,
    at: DateTime<Utc>,
    via: Interface,
    #[serde(default)]
    by: Option<String>,
    #[serde(default)]
    declared: Option<String>,
    #[serde(default)]
    made_by: Option<String>,
    #[serde(default)]
    edit: Option<ArgumentsEdit>,
    #[serde(default)]
    grant: Option<super::GrantNote>,
}

impl Serialize for Resolution {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.out(Stamp::Stored).serialize(serializer)
    }
}

impl Resolution {
    fn out<'a>(&'a self, stamp: fn(&'a DateTime<Utc>) -> Stamp<'a>) -> StoredOut<'a> {
        StoredOut {
            tool_call_id: self.tool_call_id.as_deref(),
            kind: self.kind,
            at: stamp(&self.at),
            via: self.author.via,
            by: self.author.by.as_deref(),
            declared: self.author.declared.as_deref(),
            made_by: self.author.made_by.as_deref(),
            edit: self.edit.as_ref(),
            grant: self.grant.as_ref().map(|note| {
                // Every field named: a field added to the note is a compile
                // error here until its stored form says how it is written.
                let super::GrantNote {
                    id,
                    scope,
                    granted_at,
                    granted_via,
                } = note;
                NoteOut {
                    id,
                    scope: *scope,
                    granted_at: stamp(granted_at),
                    granted_via: *granted_via,
                }
            }),
        }
    }

    /// This resolution as clients read it: what it serialises to, with
    /// its times (`at`, the grant's `grantedAt`) in RFC 3339 with
    /// milliseconds, as every time on askloop's wire is. Serialising a
    /// `Resolution` itself writes its stored form, to the microsecond.
    ///
    /// ```
    /// use askloop::{Author, Interface, Resolution, ResolutionKind};
    /// use chrono::{DateTime, Utc};
    ///
    /// let at: DateTime<Utc> = "2026-12-04T10:00:01.623456Z".parse().unwrap();
    /// let answered = Resolution {
    ///     tool_call_id: Some("call_1".into()),
    ///     kind: ResolutionKind::Answered,
    ///     at,
    ///     author: Author::via(Interface::Http),
    ///     edit: None,
    ///     grant: None,
    /// };
    /// let wire = serde_json::to_value(answered.on_wire()).unwrap();
    /// assert_eq!(wire["at"], "2026-12-04T10:00:01.623Z");
    /// assert_eq!(serde_json::to_value(&answered).unwrap()["at"], "2026-12-04T10:00:01.623456Z");
    /// ```
    pub fn on_wire(&self) -> ResolutionOnWire<'_> {
        ResolutionOnWire(self)
    }
}

impl<'de> Deserialize<'de> for Resolution {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let stored = StoredIn::deserialize(deserializer)?;
        Ok(Resolution {
            tool_call_id: stored.tool_call_id,
            kind: stored.kind,
            at: stored.at,
            author: Author {
                via: stored.via,
                by: stored.by,
                declared: stored.declared,
                made_by: stored.made_by,
            },
            edit: stored.edit,
            grant: stored.grant,
        })
    }
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

    #[test]
    fn a_declared_name_and_a_link_maker_are_stored_apart_from_by_and_read_back() {
        let at = DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z").unwrap().to_utc();
        let declared = Resolution::new(
            Some("c1"),
            ResolutionKind::Answered,
            at,
            Author::via(Interface::Mcp).with_declared("ceo@corp"),
        );
        let wire = serde_json::to_value(&declared).unwrap();
        assert_eq!(wire["declared"], "ceo@corp");
        assert!(wire.get("by").is_none(), "a declared name is never `by`: {wire}");
        assert_eq!(serde_json::from_value::<Resolution>(wire).unwrap(), declared);
        let linked = Resolution::new(
            Some("c1"),
            ResolutionKind::Answered,
            at,
            Author::named(Interface::Link, "bob").with_made_by("alice"),
        );
        let wire = serde_json::to_value(&linked).unwrap();
        assert_eq!(
            (wire["by"].as_str(), wire["madeBy"].as_str()),
            (Some("bob"), Some("alice"))
        );
        assert_eq!(serde_json::from_value::<Resolution>(wire).unwrap(), linked);
    }

    #[test]
    fn a_resolution_is_written_as_stored_rows_hold_it_key_for_key_and_read_back() {
        let at = DateTime::parse_from_rfc3339("2026-01-02T03:04:05.123456Z")
            .unwrap()
            .to_utc();
        let resolution = Resolution {
            tool_call_id: Some("c\"1".into()),
            kind: ResolutionKind::Approved,
            at,
            author: Author::named(Interface::Page, "ana"),
            edit: Some(ArgumentsEdit {
                original: json!({"path": "a"}),
                edited: json!({"path": "b"}),
            }),
            grant: Some(super::super::GrantNote {
                id: "g1".into(),
                scope: super::super::GrantScope::Thread,
                granted_at: at,
                granted_via: Interface::Page,
            }),
        };
        let text = serde_json::to_string(&resolution).unwrap();
        assert_eq!(
            text,
            r#"{"toolCallId":"c\"1","kind":"approved","at":"2026-01-02T03:04:05.123456Z","via":"page","by":"ana","edit":{"original":{"path":"a"},"edited":{"path":"b"}},"grant":{"id":"g1","scope":"thread","grantedAt":"2026-01-02T03:04:05.123456Z","grantedVia":"page"}}"#
        );
        assert_eq!(serde_json::from_str::<Resolution>(&text).unwrap(), resolution);

        let bare = Resolution::new(None, ResolutionKind::Recovered, at, Author::via(Interface::Server));
        let text = serde_json::to_string(&bare).unwrap();
        assert_eq!(
            text,
            r#"{"kind":"recovered","at":"2026-01-02T03:04:05.123456Z","via":"server"}"#
        );
        assert_eq!(serde_json::from_str::<Resolution>(&text).unwrap(), bare);
    }

    #[test]
    fn a_stored_resolution_with_fields_this_build_does_not_know_is_read_and_one_without_its_interface_is_refused() {
        let read: Resolution = serde_json::from_str(
            r#"{"kind":"answered","at":"2026-01-02T03:04:05Z","via":"cli","note":"later","toolCallId":"c1"}"#,
        )
        .unwrap();
        assert_eq!(
            (read.tool_call_id.as_deref(), read.author.via),
            (Some("c1"), Interface::Cli)
        );

        let err = serde_json::from_str::<Resolution>(r#"{"kind":"answered","at":"2026-01-02T03:04:05Z"}"#)
            .expect_err("who resolved it is part of every resolution");
        assert!(err.to_string().contains("missing field `via`"), "{err}");
    }
}

//! Approvals that stick: a person approving a call can let later calls of
//! the same tool run without asking, in the same conversation (thread) or
//! for everything of the same resource, optionally only with the same
//! arguments, optionally for a time.
//!
//! A grant is written in the same write as the approval that makes it, so
//! an approval that lost a race to another decision grants nothing. It
//! names the agent and, for an MCP tool, the tool's server: the same tool
//! name on another agent or another server is not covered. The agent reads
//! the live grants of a run's resource before each model call; a call a
//! grant covers runs without waiting and is recorded as approved by that
//! grant (its id, who made it and when), through [`Interface::Grant`].
//! A revoked or expired grant covers nothing from the next model call on.
//!
//! [`Interface::Grant`]: crate::Interface::Grant

use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Author, StoreError};
use crate::rules::ProposedCall;

/// How far an approval reaches beyond its own call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum GrantScope {
    /// Later calls of the tool in the same thread (conversation).
    Thread,
    /// Later calls of the tool in any thread of the same resource (whom the
    /// conversations are with).
    Resource,
}

impl GrantScope {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantScope::Thread => "thread",
            GrantScope::Resource => "resource",
        }
    }
}

impl fmt::Display for GrantScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for GrantScope {
    type Err = crate::unknown_name::UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "thread" => Ok(GrantScope::Thread),
            "resource" => Ok(GrantScope::Resource),
            other => Err(
                crate::unknown_name::UnknownName::new("scope", other, ["thread", "resource"]).hint(
                    "an approval sticks for \"thread\" (this conversation) or \"resource\" (every conversation of \
                     this resource)",
                ),
            ),
        }
    }
}

/// What a person asks of an approval that sticks (see
/// [`Agent::approve_tool_call_always`](crate::Agent::approve_tool_call_always)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Always {
    /// How far it reaches.
    pub scope: GrantScope,
    /// Only later calls with the same arguments (as the tool acts on them)
    /// are covered.
    pub same_arguments: bool,
    /// How long it lasts; `None`: until it is revoked.
    pub lasts: Option<std::time::Duration>,
}

impl Always {
    /// Later calls of the tool in `scope`, with any arguments, until revoked.
    pub fn in_scope(scope: GrantScope) -> Self {
        Always {
            scope,
            same_arguments: false,
            lasts: None,
        }
    }

    /// Only later calls with the same arguments.
    pub fn same_arguments(mut self) -> Self {
        self.same_arguments = true;
        self
    }

    /// Until `lasts` from the approval ([`Always::SHORTEST`] to
    /// [`Always::LONGEST`]; an approval given another is refused).
    pub fn lasting(mut self, lasts: std::time::Duration) -> Self {
        self.lasts = Some(lasts);
        self
    }

    /// The shortest time an approval that sticks may last: one that ends
    /// as it is made would cover nothing.
    pub const SHORTEST: std::time::Duration = std::time::Duration::from_secs(1);

    /// The longest time an approval that sticks may be given: a year. For
    /// longer, give none (it lasts until revoked), which a listing shows
    /// as such instead of as a far date.
    pub const LONGEST: std::time::Duration = std::time::Duration::from_secs(366 * 24 * 60 * 60);

    /// Why its time is not one an approval may be given, if it is not.
    pub(crate) fn lasts_problem(&self) -> Option<String> {
        let lasts = self.lasts?;
        let given = if lasts.as_secs() > 0 {
            format!("{}s", lasts.as_secs())
        } else {
            format!("{}ms", lasts.as_millis())
        };
        (!(Self::SHORTEST..=Self::LONGEST).contains(&lasts)).then(|| {
            format!("an approval that sticks lasts from 1s to 366d (or, given no time, until revoked); got {given}")
        })
    }
}

/// A stored approval that sticks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    /// Its id: the run and the call whose approval made it
    /// (`{run_id}:{tool_call_id}`).
    pub id: String,
    /// The agent whose calls it covers.
    pub agent_id: String,
    /// The tool whose calls it covers.
    pub tool: String,
    /// For an MCP tool, the server it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_server: Option<String>,
    /// How far it reaches.
    pub scope: GrantScope,
    /// The resource it is for.
    pub resource_id: String,
    /// The thread it is for (a grant for the whole resource names the
    /// thread it was made in).
    pub thread_id: String,
    /// The only arguments it covers (as the tool acts on them); `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// Who made it, and through which interface.
    pub granted_by: Author,
    /// When.
    pub granted_at: DateTime<Utc>,
    /// When it stops covering calls, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// The run whose approval made it.
    pub run_id: String,
    /// The call whose approval made it.
    pub tool_call_id: String,
    /// When it was revoked, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
    /// Who revoked it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_by: Option<Author>,
}

impl Grant {
    /// The id of the grant the approval of `tool_call_id` in `run_id` makes.
    pub fn id_for(run_id: &str, tool_call_id: &str) -> String {
        format!("{run_id}:{tool_call_id}")
    }

    /// Whether it covers calls at `now`: neither revoked nor expired.
    pub fn is_live(&self, now: DateTime<Utc>) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|until| now < until)
    }

    /// Whether it covers `call` at `now`: live, of the same agent, tool and
    /// MCP server, in its scope, and with its arguments if it names them.
    pub fn covers(&self, call: &ProposedCall<'_>, now: DateTime<Utc>) -> bool {
        let in_scope = match self.scope {
            GrantScope::Thread => {
                call.resource_id == Some(self.resource_id.as_str()) && call.thread_id == Some(self.thread_id.as_str())
            }
            GrantScope::Resource => call.resource_id == Some(self.resource_id.as_str()),
        };
        self.is_live(now)
            && in_scope
            && call.agent_id == self.agent_id
            && call.tool == self.tool
            && call.mcp_server == self.mcp_server.as_deref()
            && self.args.as_ref().is_none_or(|args| args == call.args)
    }

    /// What a resolution made through it records of it.
    pub fn note(&self) -> GrantNote {
        GrantNote {
            id: self.id.clone(),
            scope: self.scope,
            granted_at: self.granted_at,
            granted_via: self.granted_by.via,
        }
    }
}

/// A grant as a resolution records it: on the approval that made it, and
/// on each later approval it made (whose author is then
/// [`Interface::Grant`](crate::Interface::Grant) and the grant's maker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantNote {
    /// The grant's id.
    pub id: String,
    /// How far it reaches.
    pub scope: GrantScope,
    /// When it was made.
    pub granted_at: DateTime<Utc>,
    /// Through which interface it was made.
    pub granted_via: super::Interface,
}

/// Which grants to list, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrantQuery {
    /// Only this agent's.
    pub agent_id: Option<String>,
    /// Only this resource's.
    pub resource_id: Option<String>,
    /// Only those made in this thread (with `resource_id`).
    pub thread_id: Option<String>,
    /// Only those live at this time (neither revoked nor expired); `None`:
    /// revoked and expired ones too.
    pub live_at: Option<DateTime<Utc>>,
    /// At most this many (at most 1,000; 100 when 0).
    pub limit: u32,
}

impl GrantQuery {
    /// The most grants a listing returns.
    pub const MAX_LIMIT: u32 = 1_000;

    /// How many to return.
    pub fn page_size(&self) -> u32 {
        match self.limit {
            0 => 100,
            n => n.min(Self::MAX_LIMIT),
        }
    }

    /// Whether `grant` is listed (the stores filter in SQL; this is the
    /// same filter, for the memory store and for tests).
    pub fn admits(&self, grant: &Grant) -> bool {
        self.agent_id.as_ref().is_none_or(|a| *a == grant.agent_id)
            && self.resource_id.as_ref().is_none_or(|r| *r == grant.resource_id)
            && self.thread_id.as_ref().is_none_or(|t| *t == grant.thread_id)
            && self.live_at.is_none_or(|now| grant.is_live(now))
    }
}

/// Where grants are kept: written with the run write of the approval that
/// makes them ([`RunUpdate::grants`](crate::RunUpdate::grants)), read,
/// listed and revoked here.
#[async_trait]
pub trait GrantStore: Send + Sync {
    /// The grants of `agent_id` for `resource_id` that are live at `now`.
    async fn live_grants(
        &self,
        agent_id: &str,
        resource_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<Grant>, StoreError>;

    /// The grant `id`, live or not.
    async fn grant(&self, id: &str) -> Result<Option<Grant>, StoreError>;

    /// Grants, newest first.
    async fn grants(&self, query: &GrantQuery) -> Result<Vec<Grant>, StoreError>;

    /// Revokes the grant `id` at `at` by `by`: it covers no call from then
    /// on. `None` if there is no such grant; a grant already revoked keeps
    /// its first revocation.
    async fn revoke_grant(&self, id: &str, by: &Author, at: DateTime<Utc>) -> Result<Option<Grant>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Author, Interface};
    use serde_json::json;

    fn grant() -> Grant {
        let at = DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z").unwrap().to_utc();
        Grant {
            id: "r1:c1".into(),
            agent_id: "ops".into(),
            tool: "search".into(),
            mcp_server: Some("docs".into()),
            scope: GrantScope::Thread,
            resource_id: "alice".into(),
            thread_id: "t1".into(),
            args: None,
            granted_by: Author::named(Interface::Page, "dana"),
            granted_at: at,
            expires_at: Some(at + chrono::TimeDelta::hours(1)),
            run_id: "r1".into(),
            tool_call_id: "c1".into(),
            revoked_at: None,
            revoked_by: None,
        }
    }

    fn call<'a>(tool: &'a str, server: &'a str, args: &'a Value, thread: &'a str) -> ProposedCall<'a> {
        ProposedCall {
            agent_id: "ops",
            resource_id: Some("alice"),
            thread_id: Some(thread),
            ..ProposedCall::new(tool, args).from_server(server)
        }
    }

    #[test]
    fn a_grant_covers_only_its_agent_tool_server_scope_arguments_and_time() {
        let g = grant();
        let now = g.granted_at + chrono::TimeDelta::minutes(5);
        let args = json!({"q": "x"});
        assert!(g.covers(&call("search", "docs", &args, "t1"), now));
        assert!(
            !g.covers(&call("search", "web", &args, "t1"), now),
            "another server's tool of the same name"
        );
        assert!(!g.covers(&call("fetch", "docs", &args, "t1"), now), "another tool");
        assert!(!g.covers(&call("search", "docs", &args, "t2"), now), "another thread");
        let other_agent = ProposedCall {
            agent_id: "helper",
            ..call("search", "docs", &args, "t1")
        };
        assert!(!g.covers(&other_agent, now), "another agent");
        assert!(
            !g.covers(&call("search", "docs", &args, "t1"), g.expires_at.unwrap()),
            "expired at its time"
        );

        let resource = Grant {
            scope: GrantScope::Resource,
            args: Some(json!({"q": "x"})),
            ..grant()
        };
        assert!(
            resource.covers(&call("search", "docs", &args, "t2"), now),
            "any thread of the resource"
        );
        let other_args = json!({"q": "y"});
        assert!(
            !resource.covers(&call("search", "docs", &other_args, "t2"), now),
            "only its arguments"
        );
        let revoked = Grant {
            revoked_at: Some(now),
            ..grant()
        };
        assert!(!revoked.covers(&call("search", "docs", &args, "t1"), now));
    }

    #[test]
    fn a_scope_reads_from_its_name_and_says_what_it_accepts() {
        assert_eq!("thread".parse::<GrantScope>(), Ok(GrantScope::Thread));
        assert_eq!("resource".parse::<GrantScope>(), Ok(GrantScope::Resource));
        let err = "always".parse::<GrantScope>().unwrap_err().to_string();
        assert!(err.contains("\"thread\"") && err.contains("\"resource\""), "{err}");
    }
}

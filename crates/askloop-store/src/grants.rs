//! The `grants` table's rows (approvals that stick, see [`Grant`]), as both
//! SQL stores write and read them: the columns, the serialised row, and
//! its reading back into a [`Grant`], naming the grant when a column does
//! not parse.

use askloop::{Author, Grant, GrantScope, Interface, StoreError};
use chrono::{DateTime, Utc};

/// The columns of a `grants` row, in the order [`GrantRow`] holds them.
pub(crate) const COLUMNS: [&str; 17] = [
    "id",
    "agent_id",
    "tool",
    "mcp_server",
    "scope",
    "resource_id",
    "thread_id",
    "args",
    "granted_via",
    "granted_by",
    "granted_at",
    "expires_at",
    "run_id",
    "tool_call_id",
    "revoked_at",
    "revoked_via",
    "revoked_by",
];

/// A grant as stored: text where the row holds text, the arguments as JSON
/// text, times as times (each store converts them to its columns).
#[derive(Debug, Clone)]
pub(crate) struct GrantRow {
    pub(crate) id: String,
    pub(crate) agent_id: String,
    pub(crate) tool: String,
    pub(crate) mcp_server: Option<String>,
    pub(crate) scope: String,
    pub(crate) resource_id: String,
    pub(crate) thread_id: String,
    pub(crate) args: Option<String>,
    pub(crate) granted_via: String,
    pub(crate) granted_by: Option<String>,
    pub(crate) granted_at: DateTime<Utc>,
    pub(crate) expires_at: Option<DateTime<Utc>>,
    pub(crate) run_id: String,
    pub(crate) tool_call_id: String,
    pub(crate) revoked_at: Option<DateTime<Utc>>,
    pub(crate) revoked_via: Option<String>,
    pub(crate) revoked_by: Option<String>,
}

impl GrantRow {
    pub(crate) fn of(grant: &Grant) -> Result<Self, StoreError> {
        let args = grant
            .args
            .as_ref()
            .map(|args| crate::row::to_json(&grant.run_id, "a grant's arguments", args))
            .transpose()?;
        Ok(GrantRow {
            id: grant.id.clone(),
            agent_id: grant.agent_id.clone(),
            tool: grant.tool.clone(),
            mcp_server: grant.mcp_server.clone(),
            scope: grant.scope.as_str().to_owned(),
            resource_id: grant.resource_id.clone(),
            thread_id: grant.thread_id.clone(),
            args,
            granted_via: grant.granted_by.via.as_str().to_owned(),
            granted_by: grant.granted_by.by.clone(),
            granted_at: grant.granted_at,
            expires_at: grant.expires_at,
            run_id: grant.run_id.clone(),
            tool_call_id: grant.tool_call_id.clone(),
            revoked_at: grant.revoked_at,
            revoked_via: grant.revoked_by.as_ref().map(|a| a.via.as_str().to_owned()),
            revoked_by: grant.revoked_by.as_ref().and_then(|a| a.by.clone()),
        })
    }

    pub(crate) fn into_grant(self) -> Result<Grant, StoreError> {
        let id = self.id;
        let bad = |detail: String| StoreError::GrantCorrupt { id: id.clone(), detail };
        let scope: GrantScope = self
            .scope
            .parse()
            .map_err(|e: askloop::UnknownName| bad(format!("scope: {e}")))?;
        let args = self
            .args
            .map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(|e| bad(format!("args: {e}")))?;
        let granted_via = interface(&self.granted_via).map_err(|e| bad(format!("granted_via: {e}")))?;
        let revoked_by = match self.revoked_via {
            Some(via) => Some(Author::maybe_named(
                interface(&via).map_err(|e| bad(format!("revoked_via: {e}")))?,
                self.revoked_by,
            )),
            None => None,
        };
        Ok(Grant {
            agent_id: self.agent_id,
            tool: self.tool,
            mcp_server: self.mcp_server,
            scope,
            resource_id: self.resource_id,
            thread_id: self.thread_id,
            args,
            granted_by: Author::maybe_named(granted_via, self.granted_by),
            granted_at: self.granted_at,
            expires_at: self.expires_at,
            run_id: self.run_id,
            tool_call_id: self.tool_call_id,
            revoked_at: self.revoked_at,
            revoked_by,
            id,
        })
    }
}

/// An interface by its stored name.
fn interface(name: &str) -> Result<Interface, serde_json::Error> {
    serde_json::from_value(serde_json::Value::String(name.to_owned()))
}

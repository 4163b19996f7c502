//! The writes of grants, run on the store's one write thread: the grants
//! of a run write inserted in its transaction, and a grant revoked.

use askloop::StoreError;
use rusqlite::{Connection, params};

use crate::grants::{COLUMNS, GrantRow};
use crate::sqlite::micros;

/// Inserts the grants of a run write (a grant already stored is kept: its
/// id is its approval's, made once).
pub(crate) fn insert(conn: &Connection, rows: &[GrantRow]) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = conn
        .prepare_cached(&format!(
            "INSERT INTO grants ({}) VALUES ({}) ON CONFLICT (id) DO NOTHING",
            COLUMNS.join(", "),
            ["?"; COLUMNS.len()].join(", ")
        ))
        .map_err(StoreError::backend)?;
    for row in rows {
        insert
            .execute(params![
                row.id,
                row.agent_id,
                row.tool,
                row.mcp_server,
                row.scope,
                row.resource_id,
                row.thread_id,
                row.args,
                row.granted_via,
                row.granted_by,
                micros(row.granted_at),
                row.expires_at.map(micros),
                row.run_id,
                row.tool_call_id,
                row.revoked_at.map(micros),
                row.revoked_via,
                row.revoked_by,
            ])
            .map_err(StoreError::backend)?;
    }
    Ok(())
}

/// A revocation to write: the grant, when, through which interface, by whom.
#[derive(Debug)]
pub(crate) struct Revocation {
    pub(crate) id: String,
    pub(crate) at: i64,
    pub(crate) via: &'static str,
    pub(crate) by: Option<String>,
}

/// Revokes a grant not revoked yet. Result: rows changed.
pub(crate) fn revoke(conn: &Connection, revocation: &Revocation) -> Result<i64, StoreError> {
    let changed = conn
        .prepare_cached(
            "UPDATE grants SET revoked_at = ?, revoked_via = ?, revoked_by = ? WHERE id = ? AND revoked_at IS NULL",
        )
        .and_then(|mut update| update.execute(params![revocation.at, revocation.via, revocation.by, revocation.id]))
        .map_err(StoreError::backend)?;
    Ok(changed as i64)
}

//! The writes of answer links, run on the store's one write thread, so a
//! link's compare-and-set is one statement under SQLite's write lock.

use askloop::StoreError;
use rusqlite::{Connection, params};

pub(crate) const LINK_COLUMNS: &str =
    "link_id, run_id, tool_call_id, recipient, created_at, expires_at, used_at, revoked_at, made_by";

/// A link to insert, its times in microseconds.
#[derive(Debug)]
pub(crate) struct NewLink {
    pub(crate) link_id: String,
    pub(crate) run_id: String,
    pub(crate) tool_call_id: String,
    pub(crate) recipient: String,
    pub(crate) made_by: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) expires_at: i64,
}

/// One compare-and-set on a link's row.
#[derive(Debug)]
pub(crate) enum LinkChange {
    /// Sets `used_at` if the link is open at `at`.
    Take { link_id: String, at: i64 },
    /// Clears `used_at` if it is `taken_at`.
    Release { link_id: String, taken_at: i64 },
    /// Sets `revoked_at` if the link was neither used nor revoked.
    Revoke { link_id: String, at: i64 },
}

pub(crate) fn create(conn: &Connection, link: &NewLink) -> Result<i64, StoreError> {
    conn.prepare_cached(&format!(
        "INSERT INTO answer_links ({LINK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, ?) ON CONFLICT (link_id) DO NOTHING"
    ))
    .and_then(|mut insert| {
        insert.execute(params![
            link.link_id,
            link.run_id,
            link.tool_call_id,
            link.recipient,
            link.created_at,
            link.expires_at,
            link.made_by,
        ])
    })
    .map(|rows| rows as i64)
    .map_err(StoreError::backend)
}

pub(crate) fn change(conn: &Connection, change: &LinkChange) -> Result<i64, StoreError> {
    let changed = match change {
        LinkChange::Take { link_id, at } => conn
            .prepare_cached(
                "UPDATE answer_links SET used_at = ?2 \
                 WHERE link_id = ?1 AND used_at IS NULL AND revoked_at IS NULL AND expires_at > ?2",
            )
            .and_then(|mut take| take.execute(params![link_id, at])),
        LinkChange::Release { link_id, taken_at } => conn
            .prepare_cached("UPDATE answer_links SET used_at = NULL WHERE link_id = ? AND used_at = ?")
            .and_then(|mut release| release.execute(params![link_id, taken_at])),
        LinkChange::Revoke { link_id, at } => conn
            .prepare_cached(
                "UPDATE answer_links SET revoked_at = ? WHERE link_id = ? AND used_at IS NULL AND revoked_at IS NULL",
            )
            .and_then(|mut revoke| revoke.execute(params![at, link_id])),
    };
    changed.map(|rows| rows as i64).map_err(StoreError::backend)
}

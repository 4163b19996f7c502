//! Answer links in a [`PostgresStore`]: the `answer_links` table
//! (migration 9, and 15 for their makers). Taking a link is one
//! `UPDATE ... WHERE used_at IS NULL AND revoked_at IS NULL AND
//! expires_at > $2`: of instances sharing the database, one takes it.

use askloop::{AnswerLink, LinkStore, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PostgresStore;

const LINK_COLUMNS: &str =
    "link_id, run_id, tool_call_id, recipient, created_at, expires_at, used_at, revoked_at, made_by";

fn read_link(row: &PgRow) -> Result<AnswerLink, StoreError> {
    let link_id: String = row.try_get("link_id").map_err(StoreError::backend)?;
    let run_id: String = row.try_get("run_id").map_err(StoreError::backend)?;
    let bad = |e: sqlx::Error| StoreError::Corrupt {
        run_id: run_id.clone(),
        detail: format!("answer link {link_id}: {e}"),
    };
    Ok(AnswerLink {
        tool_call_id: row.try_get("tool_call_id").map_err(bad)?,
        recipient: row.try_get("recipient").map_err(bad)?,
        made_by: row.try_get("made_by").map_err(bad)?,
        created_at: row.try_get("created_at").map_err(bad)?,
        expires_at: row.try_get("expires_at").map_err(bad)?,
        used_at: row.try_get("used_at").map_err(bad)?,
        revoked_at: row.try_get("revoked_at").map_err(bad)?,
        link_id: link_id.clone(),
        run_id: run_id.clone(),
    })
}

/// Whether `text` holds NUL, which no stored id can.
fn holds_nul(text: &str) -> bool {
    text.contains('\0')
}

impl PostgresStore {
    /// Runs one compare-and-set on a link's row (`sql` binds its id as $1
    /// and a time as $2): whether it changed the row.
    async fn change_link(&self, sql: &'static str, link_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        if holds_nul(link_id) {
            return Ok(false);
        }
        let done = sqlx::query(sql)
            .bind(link_id)
            .bind(at)
            .execute(&self.pool)
            .await
            .map_err(self.failed(|| format!("changing answer link {link_id}")))?;
        Ok(done.rows_affected() > 0)
    }
}

#[async_trait]
impl LinkStore for PostgresStore {
    async fn create_link(&self, link: &AnswerLink) -> Result<AnswerLink, StoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO answer_links ({LINK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, NULL, NULL, $7) \
             ON CONFLICT (link_id) DO NOTHING"
        )))
        .bind(&link.link_id)
        .bind(&link.run_id)
        .bind(&link.tool_call_id)
        .bind(&link.recipient)
        .bind(link.created_at)
        .bind(link.expires_at)
        .bind(&link.made_by)
        .execute(&self.pool)
        .await
        .map_err(self.failed(|| format!("storing answer link {} of run {}", link.link_id, link.run_id)))?;
        self.link(&link.link_id).await?.ok_or_else(|| StoreError::NotFound {
            run_id: link.run_id.clone(),
        })
    }

    async fn link(&self, link_id: &str) -> Result<Option<AnswerLink>, StoreError> {
        if holds_nul(link_id) {
            return Ok(None);
        }
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {LINK_COLUMNS} FROM answer_links WHERE link_id = $1"
        )))
        .bind(link_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(self.failed(|| format!("reading answer link {link_id}")))?;
        row.as_ref().map(read_link).transpose()
    }

    async fn take_link(&self, link_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        self.change_link(
            "UPDATE answer_links SET used_at = $2 \
             WHERE link_id = $1 AND used_at IS NULL AND revoked_at IS NULL AND expires_at > $2",
            link_id,
            at,
        )
        .await
    }

    async fn release_link(&self, link_id: &str, taken_at: DateTime<Utc>) -> Result<(), StoreError> {
        self.change_link(
            "UPDATE answer_links SET used_at = NULL WHERE link_id = $1 AND used_at = $2",
            link_id,
            taken_at,
        )
        .await
        .map(drop)
    }

    async fn revoke_link(&self, link_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        self.change_link(
            "UPDATE answer_links SET revoked_at = $2 WHERE link_id = $1 AND used_at IS NULL AND revoked_at IS NULL",
            link_id,
            at,
        )
        .await
    }

    async fn links(&self, run_id: &str) -> Result<Vec<AnswerLink>, StoreError> {
        if holds_nul(run_id) {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {LINK_COLUMNS} FROM answer_links WHERE run_id = $1 ORDER BY created_at, link_id"
        )))
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.failed(|| format!("listing the answer links of run {run_id}")))?;
        rows.iter().map(read_link).collect()
    }
}

//! Answer links in SQLite: the reads, and [`LinkStore`] for
//! [`SqliteStore`]. The writes run on the store's one write thread
//! (`writes/links.rs`).

use askloop::{AnswerLink, LinkStore, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::params;

use super::writes::Write;
use super::writes::links::{LINK_COLUMNS, LinkChange, NewLink};
use super::{SqliteStore, micros};

/// Reads an `answer_links` row (columns as in [`LINK_COLUMNS`]).
fn read_link(row: &rusqlite::Row<'_>) -> Result<AnswerLink, StoreError> {
    let link_id: String = row.get(0).map_err(StoreError::backend)?;
    let bad = |detail: String| StoreError::Corrupt {
        run_id: row.get::<_, String>(1).unwrap_or_default(),
        detail: format!("answer link {link_id}: {detail}"),
    };
    let time = |index: usize, name: &str| -> Result<Option<DateTime<Utc>>, StoreError> {
        let value: Option<i64> = row.get(index).map_err(|e| bad(format!("{name}: {e}")))?;
        value
            .map(|v| DateTime::from_timestamp_micros(v).ok_or_else(|| bad(format!("{name}: {v} is not a time"))))
            .transpose()
    };
    let required = |index: usize, name: &str| -> Result<DateTime<Utc>, StoreError> {
        time(index, name)?.ok_or_else(|| bad(format!("{name} is missing")))
    };
    Ok(AnswerLink {
        run_id: row.get(1).map_err(|e| bad(e.to_string()))?,
        tool_call_id: row.get(2).map_err(|e| bad(e.to_string()))?,
        recipient: row.get(3).map_err(|e| bad(e.to_string()))?,
        created_at: required(4, "created_at")?,
        expires_at: required(5, "expires_at")?,
        used_at: time(6, "used_at")?,
        revoked_at: time(7, "revoked_at")?,
        made_by: row.get(8).map_err(|e| bad(format!("made_by: {e}")))?,
        link_id: link_id.clone(),
    })
}

impl SqliteStore {
    async fn change_link(&self, change: LinkChange) -> Result<bool, StoreError> {
        Ok(self.write(Write::ChangeLink(change)).await? > 0)
    }
}

#[async_trait]
impl LinkStore for SqliteStore {
    async fn create_link(&self, link: &AnswerLink) -> Result<AnswerLink, StoreError> {
        self.write(Write::CreateLink(NewLink {
            link_id: link.link_id.clone(),
            run_id: link.run_id.clone(),
            tool_call_id: link.tool_call_id.clone(),
            recipient: link.recipient.clone(),
            made_by: link.made_by.clone(),
            created_at: micros(link.created_at),
            expires_at: micros(link.expires_at),
        }))
        .await?;
        self.link(&link.link_id).await?.ok_or_else(|| StoreError::NotFound {
            run_id: link.run_id.clone(),
        })
    }

    async fn link(&self, link_id: &str) -> Result<Option<AnswerLink>, StoreError> {
        self.read(|conn| {
            let mut select = conn
                .prepare_cached(&format!("SELECT {LINK_COLUMNS} FROM answer_links WHERE link_id = ?"))
                .map_err(StoreError::backend)?;
            let mut rows = select.query(params![link_id]).map_err(StoreError::backend)?;
            match rows.next().map_err(StoreError::backend)? {
                Some(row) => read_link(row).map(Some),
                None => Ok(None),
            }
        })
    }

    async fn take_link(&self, link_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        self.change_link(LinkChange::Take {
            link_id: link_id.to_owned(),
            at: micros(at),
        })
        .await
    }

    async fn release_link(&self, link_id: &str, taken_at: DateTime<Utc>) -> Result<(), StoreError> {
        self.change_link(LinkChange::Release {
            link_id: link_id.to_owned(),
            taken_at: micros(taken_at),
        })
        .await
        .map(drop)
    }

    async fn revoke_link(&self, link_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        self.change_link(LinkChange::Revoke {
            link_id: link_id.to_owned(),
            at: micros(at),
        })
        .await
    }

    async fn links(&self, run_id: &str) -> Result<Vec<AnswerLink>, StoreError> {
        self.read(|conn| {
            let mut select = conn
                .prepare_cached(&format!(
                    "SELECT {LINK_COLUMNS} FROM answer_links WHERE run_id = ? ORDER BY created_at, link_id"
                ))
                .map_err(StoreError::backend)?;
            let mut rows = select.query(params![run_id]).map_err(StoreError::backend)?;
            let mut links = Vec::new();
            while let Some(row) = rows.next().map_err(StoreError::backend)? {
                links.push(read_link(row)?);
            }
            Ok(links)
        })
    }
}

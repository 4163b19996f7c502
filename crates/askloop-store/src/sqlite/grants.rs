//! The `grants` table of a [`SqliteStore`]: approvals that stick, read by
//! the agents before each model call, listed and revoked. They are inserted
//! in the transaction of the run write that records their approval, and
//! revoked, on the store's one write thread (`writes/grants.rs`).

use askloop::{Author, Grant, GrantQuery, GrantStore, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::types::Value;

use super::writes::Write;
use super::writes::grants::Revocation;
use super::{SqliteStore, micros};
use crate::grants::{COLUMNS, GrantRow};

fn time(value: i64) -> Result<DateTime<Utc>, rusqlite::Error> {
    DateTime::from_timestamp_micros(value).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Integer, "time out of range".into())
    })
}

/// Reads a `grants` row (columns as in [`COLUMNS`]).
fn read_row(row: &rusqlite::Row<'_>) -> Result<Grant, StoreError> {
    let id: String = row.get(0).map_err(StoreError::backend)?;
    let bad = |e: rusqlite::Error| StoreError::GrantCorrupt {
        id: id.clone(),
        detail: e.to_string(),
    };
    let optional_time = |index: usize| -> Result<Option<DateTime<Utc>>, StoreError> {
        row.get::<_, Option<i64>>(index)
            .and_then(|at| at.map(time).transpose())
            .map_err(bad)
    };
    let stored = GrantRow {
        id: id.clone(),
        agent_id: row.get(1).map_err(bad)?,
        tool: row.get(2).map_err(bad)?,
        mcp_server: row.get(3).map_err(bad)?,
        scope: row.get(4).map_err(bad)?,
        resource_id: row.get(5).map_err(bad)?,
        thread_id: row.get(6).map_err(bad)?,
        args: row.get(7).map_err(bad)?,
        granted_via: row.get(8).map_err(bad)?,
        granted_by: row.get(9).map_err(bad)?,
        granted_at: row.get::<_, i64>(10).and_then(time).map_err(bad)?,
        expires_at: optional_time(11)?,
        run_id: row.get(12).map_err(bad)?,
        tool_call_id: row.get(13).map_err(bad)?,
        revoked_at: optional_time(14)?,
        revoked_via: row.get(15).map_err(bad)?,
        revoked_by: row.get(16).map_err(bad)?,
    };
    stored.into_grant()
}

impl SqliteStore {
    fn select_grants(&self, sql: &str, values: Vec<Value>) -> Result<Vec<Grant>, StoreError> {
        self.read(|conn| {
            let mut select = conn.prepare_cached(sql).map_err(StoreError::backend)?;
            let mut rows = select
                .query(rusqlite::params_from_iter(values))
                .map_err(StoreError::backend)?;
            let mut found = Vec::new();
            while let Some(row) = rows.next().map_err(StoreError::backend)? {
                found.push(read_row(row)?);
            }
            Ok(found)
        })
    }
}

#[async_trait]
impl GrantStore for SqliteStore {
    async fn live_grants(
        &self,
        agent_id: &str,
        resource_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<Grant>, StoreError> {
        let sql = format!(
            "SELECT {} FROM grants WHERE agent_id = ? AND resource_id = ? AND revoked_at IS NULL \
             AND (expires_at IS NULL OR expires_at > ?) ORDER BY granted_at, id",
            COLUMNS.join(", ")
        );
        let values = vec![
            Value::Text(agent_id.to_owned()),
            Value::Text(resource_id.to_owned()),
            Value::Integer(micros(now)),
        ];
        self.select_grants(&sql, values)
    }

    async fn grant(&self, id: &str) -> Result<Option<Grant>, StoreError> {
        let sql = format!("SELECT {} FROM grants WHERE id = ?", COLUMNS.join(", "));
        Ok(self.select_grants(&sql, vec![Value::Text(id.to_owned())])?.pop())
    }

    async fn grants(&self, query: &GrantQuery) -> Result<Vec<Grant>, StoreError> {
        let mut filters = Vec::new();
        let mut values = Vec::new();
        for (column, value) in [
            ("agent_id", &query.agent_id),
            ("resource_id", &query.resource_id),
            ("thread_id", &query.thread_id),
        ] {
            if let Some(value) = value {
                filters.push(format!("{column} = ?"));
                values.push(Value::Text(value.clone()));
            }
        }
        if let Some(now) = query.live_at {
            filters.push("revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)".to_owned());
            values.push(Value::Integer(micros(now)));
        }
        let filter = if filters.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", filters.join(" AND "))
        };
        values.push(Value::Integer(i64::from(query.page_size())));
        let sql = format!(
            "SELECT {} FROM grants{filter} ORDER BY granted_at DESC, id DESC LIMIT ?",
            COLUMNS.join(", ")
        );
        self.select_grants(&sql, values)
    }

    async fn revoke_grant(&self, id: &str, by: &Author, at: DateTime<Utc>) -> Result<Option<Grant>, StoreError> {
        self.write(Write::RevokeGrant(Revocation {
            id: id.to_owned(),
            at: micros(at),
            via: by.via.as_str(),
            by: by.by.clone(),
        }))
        .await?;
        self.grant(id).await
    }
}

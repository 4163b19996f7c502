//! The `grants` table of a [`PostgresStore`]: approvals that stick, inserted
//! in the transaction of the run write that records their approval, read
//! by the agents before each model call, listed and revoked.

use askloop::{Author, Grant, GrantQuery, GrantStore, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::{PostgresStore, nul};
use crate::grants::{COLUMNS, GrantRow};

/// The columns as read: the arguments as text.
fn select_columns() -> String {
    COLUMNS
        .iter()
        .map(|c| if *c == "args" { "args::text AS args" } else { c })
        .collect::<Vec<_>>()
        .join(", ")
}

impl PostgresStore {
    /// Inserts the grants of a run write in its transaction (a grant already
    /// stored is kept: its id is its approval's, made once).
    pub(super) async fn insert_grants(&self, tx: &mut PgConnection, grants: &[Grant]) -> Result<(), StoreError> {
        // Built from the column list only: no value goes into the text.
        let insert = format!(
            "INSERT INTO grants ({}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11, $12, $13, $14, \
             $15, $16, $17) ON CONFLICT (id) DO NOTHING",
            COLUMNS.join(", ")
        );
        for grant in grants {
            let row = GrantRow::of(grant)?;
            sqlx::query(sqlx::AssertSqlSafe(insert.clone()))
                .bind(nul::encode_text(&row.id).as_ref())
                .bind(nul::encode_text(&row.agent_id).as_ref())
                .bind(nul::encode_text(&row.tool).as_ref())
                .bind(row.mcp_server.as_deref().map(nul::encode_text).as_deref())
                .bind(&row.scope)
                .bind(nul::encode_text(&row.resource_id).as_ref())
                .bind(nul::encode_text(&row.thread_id).as_ref())
                .bind(row.args.as_deref().map(nul::encode_json).as_deref())
                .bind(&row.granted_via)
                .bind(row.granted_by.as_deref().map(nul::encode_text).as_deref())
                .bind(row.granted_at)
                .bind(row.expires_at)
                .bind(nul::encode_text(&row.run_id).as_ref())
                .bind(nul::encode_text(&row.tool_call_id).as_ref())
                .bind(row.revoked_at)
                .bind(&row.revoked_via)
                .bind(row.revoked_by.as_deref().map(nul::encode_text).as_deref())
                .execute(&mut *tx)
                .await
                .map_err(self.failed(|| format!("writing the grant {}", grant.id)))?;
        }
        Ok(())
    }

    async fn select_grants(
        &self,
        query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
        what: impl FnOnce() -> String,
    ) -> Result<Vec<Grant>, StoreError> {
        let rows = query.fetch_all(&self.pool).await.map_err(self.failed(what))?;
        rows.iter().map(read_row).collect()
    }
}

/// Reads a `grants` row (columns as [`select_columns`] names them).
fn read_row(row: &PgRow) -> Result<Grant, StoreError> {
    let id: String = nul::decode_text(row.try_get("id").map_err(StoreError::backend)?);
    let bad = |e: sqlx::Error| StoreError::GrantCorrupt {
        id: id.clone(),
        detail: e.to_string(),
    };
    let text = |column: &str| row.try_get::<String, _>(column).map(nul::decode_text).map_err(bad);
    let optional = |column: &str| {
        row.try_get::<Option<String>, _>(column)
            .map(|value| value.map(nul::decode_text))
            .map_err(bad)
    };
    let stored = GrantRow {
        id: id.clone(),
        agent_id: text("agent_id")?,
        tool: text("tool")?,
        mcp_server: optional("mcp_server")?,
        scope: text("scope")?,
        resource_id: text("resource_id")?,
        thread_id: text("thread_id")?,
        args: row
            .try_get::<Option<String>, _>("args")
            .map(|value| value.map(nul::decode_json))
            .map_err(bad)?,
        granted_via: text("granted_via")?,
        granted_by: optional("granted_by")?,
        granted_at: row.try_get("granted_at").map_err(bad)?,
        expires_at: row.try_get("expires_at").map_err(bad)?,
        run_id: text("run_id")?,
        tool_call_id: text("tool_call_id")?,
        revoked_at: row.try_get("revoked_at").map_err(bad)?,
        revoked_via: optional("revoked_via")?,
        revoked_by: optional("revoked_by")?,
    };
    stored.into_grant()
}

#[async_trait]
impl GrantStore for PostgresStore {
    async fn live_grants(
        &self,
        agent_id: &str,
        resource_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<Grant>, StoreError> {
        let sql = format!(
            "SELECT {} FROM grants WHERE agent_id = $1 AND resource_id = $2 AND revoked_at IS NULL \
             AND (expires_at IS NULL OR expires_at > $3) ORDER BY granted_at, id",
            select_columns()
        );
        let query = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(nul::encode_text(agent_id).as_ref())
            .bind(nul::encode_text(resource_id).as_ref())
            .bind(now);
        self.select_grants(query, || format!("reading the grants of resource {resource_id}"))
            .await
    }

    async fn grant(&self, id: &str) -> Result<Option<Grant>, StoreError> {
        let sql = format!("SELECT {} FROM grants WHERE id = $1", select_columns());
        let query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(nul::encode_text(id).as_ref());
        Ok(self
            .select_grants(query, || format!("reading the grant {id}"))
            .await?
            .pop())
    }

    async fn grants(&self, query: &GrantQuery) -> Result<Vec<Grant>, StoreError> {
        let mut filters = Vec::new();
        let mut texts = Vec::new();
        for (column, value) in [
            ("agent_id", &query.agent_id),
            ("resource_id", &query.resource_id),
            ("thread_id", &query.thread_id),
        ] {
            if let Some(value) = value {
                texts.push(nul::encode_text(value).into_owned());
                filters.push(format!("{column} = ${}", texts.len()));
            }
        }
        let live = texts.len() + 1;
        if query.live_at.is_some() {
            filters.push(format!(
                "revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ${live})"
            ));
        }
        let filter = if filters.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", filters.join(" AND "))
        };
        let limit = if query.live_at.is_some() { live + 1 } else { live };
        let sql = format!(
            "SELECT {} FROM grants{filter} ORDER BY granted_at DESC, id DESC LIMIT ${limit}",
            select_columns()
        );
        let mut select = sqlx::query(sqlx::AssertSqlSafe(sql));
        for text in texts {
            select = select.bind(text);
        }
        if let Some(now) = query.live_at {
            select = select.bind(now);
        }
        let select = select.bind(i64::from(query.page_size()));
        self.select_grants(select, || "listing grants".to_owned()).await
    }

    async fn revoke_grant(&self, id: &str, by: &Author, at: DateTime<Utc>) -> Result<Option<Grant>, StoreError> {
        sqlx::query(
            "UPDATE grants SET revoked_at = $1, revoked_via = $2, revoked_by = $3 WHERE id = $4 AND revoked_at IS NULL",
        )
        .bind(at)
        .bind(by.via.as_str())
        .bind(by.by.as_deref().map(nul::encode_text).as_deref())
        .bind(nul::encode_text(id).as_ref())
        .execute(&self.pool)
        .await
        .map_err(self.failed(|| format!("revoking the grant {id}")))?;
        self.grant(id).await
    }
}

//! Where askloop's tables live in a PostgreSQL database, and bringing them
//! up to date.
//!
//! askloop keeps its tables (`runs`, `messages`, `threads`,
//! `thread_messages`, `outbox`, `grants`, `answer_links`, `waiting_tally`),
//! the functions of `waiting_tally`'s triggers, and its own
//! `_sqlx_migrations` in one schema ([`DEFAULT_POSTGRES_SCHEMA`] unless
//! told otherwise), so a database shared with another application (its
//! own `runs` table, its own sqlx migrations) is never touched outside that
//! schema.
//!
//! Databases made before askloop had a schema of its own hold its tables in
//! the connection's default schema (usually `public`), next to a
//! `_sqlx_migrations` that records askloop's first migration. Such a
//! database keeps working where it is: when no schema was asked for and
//! [`DEFAULT_POSTGRES_SCHEMA`] holds no askloop tables, those tables are used in
//! place (with a warning that says how to move them). Nothing is moved
//! behind the back of processes still running an earlier build.

use sqlx::PgConnection;

use super::settings::DEFAULT_POSTGRES_SCHEMA;

/// Which schema the caller asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Requested {
    /// Named in the options or the URL.
    Named(String),
    /// Nothing said: [`DEFAULT_POSTGRES_SCHEMA`], or where an earlier askloop put
    /// the tables.
    Default,
}

/// The schema the store uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) schema: String,
    /// The tables are where an earlier askloop created them.
    pub(crate) earlier_layout: bool,
}

/// A schema name quoted for SQL.
pub(crate) fn quoted(schema: &str) -> String {
    format!("\"{}\"", schema.replace('"', "\"\""))
}

/// The embedded migrations, recording themselves in `schema`. A database
/// migrated further by a newer askloop still opens: migrations only add, and
/// each row's layout version decides whether this build may read it (see
/// `row.rs`).
pub(crate) fn migrator(schema: &str) -> sqlx::migrate::Migrator {
    let mut migrator = sqlx::migrate!("./migrations/postgres");
    migrator.set_ignore_missing(true);
    migrator.dangerous_set_table_name(format!("{}._sqlx_migrations", quoted(schema)));
    migrator
}

/// Decides where the tables are, on a connection with the URL's own
/// settings (its default `search_path`).
pub(crate) async fn place(conn: &mut PgConnection, requested: Requested) -> Result<Placement, sqlx::Error> {
    let named = |schema: String| Placement {
        schema,
        earlier_layout: false,
    };
    if let Requested::Named(schema) = requested {
        return Ok(named(schema));
    }
    let (current, default_has_runs, current_has_runs, current_has_record): (Option<String>, bool, bool, bool) =
        sqlx::query_as(
            "SELECT current_schema()::text, \
                    to_regclass(format('%I.runs', $1::text)) IS NOT NULL, \
                    CASE WHEN current_schema() IS NULL THEN false \
                         ELSE to_regclass(format('%I.runs', current_schema())) IS NOT NULL END, \
                    CASE WHEN current_schema() IS NULL THEN false \
                         ELSE to_regclass(format('%I._sqlx_migrations', current_schema())) IS NOT NULL END",
        )
        .bind(DEFAULT_POSTGRES_SCHEMA)
        .fetch_one(&mut *conn)
        .await?;
    let Some(current) = current.filter(|c| c != DEFAULT_POSTGRES_SCHEMA) else {
        return Ok(named(DEFAULT_POSTGRES_SCHEMA.to_owned()));
    };
    if default_has_runs || !current_has_runs || !current_has_record {
        return Ok(named(DEFAULT_POSTGRES_SCHEMA.to_owned()));
    }
    // A `runs` table beside a migration record: askloop's only if the record
    // holds askloop's first migration, byte for byte.
    let first = migrator(&current);
    let Some(ours) = first.iter().find(|m| m.version == 1) else {
        return Ok(named(DEFAULT_POSTGRES_SCHEMA.to_owned()));
    };
    let recorded: Option<Vec<u8>> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT checksum FROM {}._sqlx_migrations WHERE version = 1 AND success",
        quoted(&current)
    )))
    .fetch_optional(&mut *conn)
    .await?;
    if recorded.as_deref() != Some(&*ours.checksum) {
        return Ok(named(DEFAULT_POSTGRES_SCHEMA.to_owned()));
    }
    tracing::warn!(
        schema = %current,
        "askloop's tables are in schema {current}, where an earlier askloop created them, and stay there; \
         new databases keep them in schema {DEFAULT_POSTGRES_SCHEMA} (see askloop-store's README to move them)"
    );
    Ok(Placement {
        schema: current,
        earlier_layout: true,
    })
}

/// The columns of askloop's tables in `schema`: (table, column).
pub(crate) async fn columns(conn: &mut PgConnection, schema: &str) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns \
         WHERE table_schema = $1 AND table_name = ANY($2)",
    )
    .bind(schema)
    .bind(crate::columns::table_names())
    .fetch_all(conn)
    .await
}

/// Creates the schema if it is missing and applies the migrations there, on
/// a connection of its own: migrations may take longer than statements are
/// allowed to, and wait for servers starting together (sqlx holds an
/// advisory lock while migrating).
pub(crate) async fn migrate(
    conn: &mut PgConnection,
    schema: &str,
) -> Result<(), Result<sqlx::Error, sqlx::migrate::MigrateError>> {
    for setting in ["SET statement_timeout = 0", "SET lock_timeout = '60s'"] {
        sqlx::query(setting).execute(&mut *conn).await.map_err(Ok)?;
    }
    let exists: bool = sqlx::query_scalar("SELECT to_regnamespace($1) IS NOT NULL")
        .bind(quoted(schema))
        .fetch_one(&mut *conn)
        .await
        .map_err(Ok)?;
    if !exists {
        let created = sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE SCHEMA IF NOT EXISTS {}",
            quoted(schema)
        )))
        .execute(&mut *conn)
        .await;
        if let Err(err) = created {
            // Another process creating the same schema at the same moment
            // loses on the catalog's unique index; the schema is there.
            if !err.as_database_error().is_some_and(|e| e.is_unique_violation()) {
                return Err(Ok(err));
            }
        }
    }
    // The migrations' unqualified names land in the schema.
    sqlx::query("SELECT set_config('search_path', $1, false)")
        .bind(quoted(schema))
        .execute(&mut *conn)
        .await
        .map_err(Ok)?;
    // `run_direct`: `run` takes an `Acquire`, whose bound makes the
    // future not `Send`.
    migrator(schema).run_direct(None, conn, false).await.map_err(Err)
}

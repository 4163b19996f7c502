//! Where askloop's tables live in a PostgreSQL database, and bringing them
//! up to date.
//!
//! askloop keeps its tables (`runs`, `messages`, `threads`,
//! `thread_messages`, `outbox`, `grants`, `answer_links`, `waiting_tally`),
//! the functions of `waiting_tally`'s triggers, and its own
//! `_sqlx_migrations` in one schema
//! ([`DEFAULT_POSTGRES_SCHEMA`](super::settings::DEFAULT_POSTGRES_SCHEMA) unless
//! told otherwise), so a database shared with another application (its
//! own `runs` table, its own sqlx migrations) is never touched outside that
//! schema.

use sqlx::PgConnection;

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

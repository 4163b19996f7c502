//! PostgreSQL failures in words a user can act on. sqlx's own wording
//! ("error returned from database: ...") and the server's internals (its
//! source file and line) stay out of the message; the SQLSTATE code stays
//! in, for searching.

use std::time::Duration;

use askloop::StoreError;
use sqlx::migrate::MigrateError;

use super::settings::human;

/// A PostgreSQL failure, described. Its message is whole: it has no
/// `source`, so printing the chain does not repeat sqlx's text.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct PostgresFailure(pub(crate) String);

/// The limits a failure may be about, for the message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// `None` when the URL's `options` set it (its value is PostgreSQL's).
    pub(crate) lock_timeout: Option<Duration>,
    pub(crate) statement_timeout: Option<Duration>,
    pub(crate) acquire_timeout: Duration,
    pub(crate) max_connections: u32,
}

impl Limits {
    /// `err`, met while doing `action` ("claiming run r1"), as a store error.
    pub(crate) fn failure(&self, action: &str, err: sqlx::Error) -> StoreError {
        StoreError::backend(PostgresFailure(format!("{action}: {}", self.describe(&err))))
    }

    /// What happened, in words.
    pub(crate) fn describe(&self, err: &sqlx::Error) -> String {
        let limit = |timeout: Option<Duration>| timeout.map_or_else(|| "the configured limit".to_owned(), human);
        match err {
            sqlx::Error::Database(db) => {
                let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                let message = db.message();
                match code.as_str() {
                    "55P03" => format!(
                        "PostgreSQL gave up waiting for a lock after {} (lock_timeout): another session holds a lock \
                         on askloop's tables or on this run (a long transaction, a manual LOCK, a migration). Try \
                         again once it is released, or allow longer waits with ?lock_timeout=30s in the URL or \
                         PostgresOptions::lock_timeout",
                        limit(self.lock_timeout)
                    ),
                    "57014" if message.contains("statement timeout") => format!(
                        "PostgreSQL cancelled a statement that ran longer than {} (statement_timeout). Allow longer \
                         with ?statement_timeout=2min in the URL or PostgresOptions::statement_timeout",
                        limit(self.statement_timeout)
                    ),
                    "57014" => {
                        "PostgreSQL cancelled the statement (an administrator or pg_cancel_backend did)".to_owned()
                    }
                    "57P01" | "57P02" | "57P03" => {
                        format!("the PostgreSQL server is shutting down or not accepting work ({message}); try again")
                    }
                    "53300" => format!(
                        "PostgreSQL refused another connection ({message}); lower max_connections or \
                         raise the server's"
                    ),
                    "28P01" | "28000" => format!("PostgreSQL refused the login: {message}"),
                    "3D000" => format!("{message}: create the database first (createdb) or fix the URL"),
                    "42501" => format!("the PostgreSQL user lacks a privilege askloop needs: {message}"),
                    _ => {
                        let detail = db
                            .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                            .and_then(|pg| pg.detail())
                            .map(|d| format!(" ({d})"))
                            .unwrap_or_default();
                        format!("PostgreSQL refused the statement: {message}{detail} [SQLSTATE {code}]")
                    }
                }
            }
            sqlx::Error::PoolTimedOut => format!(
                "no PostgreSQL connection became free within {}: all {} are busy, or the server stopped answering",
                human(self.acquire_timeout),
                self.max_connections
            ),
            sqlx::Error::PoolClosed => "the store was closed".to_owned(),
            sqlx::Error::Io(io) => format!("the connection to PostgreSQL failed: {io}"),
            sqlx::Error::Tls(tls) => format!("TLS with the PostgreSQL server failed: {tls}"),
            other => other.to_string(),
        }
    }

    /// A failed migration of askloop's tables in `schema`.
    pub(crate) fn migration_failure(&self, schema: &str, err: MigrateError) -> StoreError {
        let why = match err {
            MigrateError::VersionMismatch(version) => format!(
                "askloop's migration {version} recorded in {schema}._sqlx_migrations differs from this build's. \
                 Is another program's migration record in that table? Give askloop a schema of its own \
                 (?schema=askloop)"
            ),
            MigrateError::Dirty(version) => format!(
                "migration {version} failed part-way in an earlier attempt ({schema}._sqlx_migrations marks it \
                 unfinished); see why in the server's log, repair it, and delete that row"
            ),
            MigrateError::Execute(err) | MigrateError::ExecuteMigration(err, _) => self.describe(&err),
            other => other.to_string(),
        };
        StoreError::backend(PostgresFailure(format!(
            "cannot bring askloop's tables in schema {schema} up to date: {why}"
        )))
    }
}

//! Durable run stores for askloop: [`SqliteStore`] (one file, no set-up, the
//! default) and [`PostgresStore`] (several askloop processes or machines
//! sharing runs). Both implement [`askloop::RunStore`] and pass the same
//! conformance suite as [`askloop::MemoryStore`].
//!
//! [`open`] picks one from a string, the way the CLI and server take it:
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let location = dir.path().join("askloop/runs.db");
//! let store = askloop_store::open(location.to_str().unwrap()).await.unwrap();
//! # let _ = store;
//! // store is an Arc<dyn askloop::RunStore>: hand it to Agent::builder(..).store(store)
//! # });
//! ```
//!
//! # Tables
//!
//! `runs` holds one row per run: its status, version (the compare-and-set
//! token), pending tool calls with their payloads and resume schemas, the
//! results already produced in the current step, usage, error, metadata and
//! the layout version it was written with. `messages` is append-only, keyed
//! by (run id, sequence): a step writes the run's row and only its new
//! messages, so the cost of a write does not grow with the conversation.
//!
//! # Unreadable rows
//!
//! A row written by a newer askloop is refused with
//! [`StoreError::NewerSchema`]; a row that cannot be parsed is
//! [`StoreError::Corrupt`], naming the run. Either affects only that run:
//! [`RunStore::get`] and [`RunStore::messages`] of it fail, while
//! [`RunStore::list`] leaves it out (logging a `tracing` warning with the
//! reason), so one bad row never hides the others. A listed page can
//! therefore hold fewer runs than its limit; the next page still starts at
//! `offset + limit`, or after the page's last run ([`askloop::RunQuery::after`], read
//! from the index however deep the page).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod columns;
#[cfg(feature = "conformance")]
pub mod conformance;
mod grants;
mod location;
mod postgres;
mod resolution_rows;
mod row;
mod sqlite;

use std::sync::Arc;

#[cfg(doc)]
use askloop::DatabaseFault;
use askloop::{RunRecord, RunStore, StoreError};

pub use postgres::{
    DEFAULT_LOCK_TIMEOUT, DEFAULT_POSTGRES_SCHEMA, DEFAULT_STATEMENT_TIMEOUT, PostgresOptions, PostgresStore,
};
pub use sqlite::{DEFAULT_BUSY_TIMEOUT, SqliteOptions, SqliteStore, SqliteSync};

use location::Location;

/// Opens the run store at `location`:
///
/// - a file path, or `sqlite://PATH` (also `sqlite:PATH`): a SQLite file,
///   created with its directory if missing, in WAL mode with a busy timeout;
/// - `postgres://...` or `postgresql://...`: a PostgreSQL connection pool.
///   askloop's tables live in schema `askloop` unless `?schema=NAME` (or a
///   `search_path` in the URL's `options`) names another; `?lock_timeout=`
///   and `?statement_timeout=` bound waits (see [`PostgresOptions`]).
///
/// The tables are created or brought up to date before this returns.
/// Anything else is [`StoreError::InvalidLocation`], whose message lists the
/// accepted forms. A SQLite file that cannot be created or used (not a
/// database, read only, on a full disk) is [`StoreError::Unusable`], naming
/// the file and the [`DatabaseFault`]. A
/// PostgreSQL server that cannot be reached (after retrying for 30 s: a
/// server may start before its database) or refuses the connection is
/// [`StoreError::Backend`], naming the server without its password.
pub async fn open(location: &str) -> Result<Arc<dyn RunStore>, StoreError> {
    open_with(location, Access::Create).await
}

/// What a caller of [`open_with`] will do with the store, which decides
/// whether a missing SQLite file is created and whether it is opened for
/// writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Access {
    /// Read and write; a missing SQLite file is created, with its folder.
    #[default]
    Create,
    /// Read and write a database that exists: a SQLite path with no file is
    /// [`StoreError::Unusable`] with [`DatabaseFault::Missing`], and
    /// nothing is created (a mistyped path never becomes an empty store).
    Existing,
    /// Only read a database that exists. A SQLite file is opened read only,
    /// so a read-only file, folder or file system can be read; writes fail
    /// with [`DatabaseFault::ReadOnly`].
    ReadOnly,
}

/// [`open`] for a given [`Access`]. A PostgreSQL database always exists
/// before askloop connects to it, so `access` changes nothing there.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use askloop::DatabaseFault;
/// use askloop_store::Access;
///
/// let dir = tempfile::tempdir().unwrap();
/// let typo = dir.path().join("rnus.db");
/// let err = askloop_store::open_with(typo.to_str().unwrap(), Access::ReadOnly).await.unwrap_err();
/// assert_eq!(err.fault(), Some(DatabaseFault::Missing));
/// assert!(!typo.exists());
/// # });
/// ```
pub async fn open_with(location: &str, access: Access) -> Result<Arc<dyn RunStore>, StoreError> {
    match Location::parse(location)? {
        Location::Sqlite(path) => {
            let options = match access {
                Access::Create => SqliteOptions::default(),
                Access::Existing => SqliteOptions::default().create_if_missing(false),
                Access::ReadOnly => SqliteOptions::default().read_only(true),
            };
            Ok(Arc::new(SqliteStore::open_with(path, options).await?))
        }
        Location::Postgres(url) => Ok(Arc::new(PostgresStore::connect(&url).await?)),
    }
}

/// The runs of a listing that can be read. Corrupt rows and rows of a newer
/// layout are logged and left out (see the crate documentation); any other
/// error fails the listing.
fn readable_runs(rows: impl Iterator<Item = Result<RunRecord, StoreError>>) -> Result<Vec<RunRecord>, StoreError> {
    let mut runs = Vec::new();
    for row in rows {
        match row {
            Ok(run) => runs.push(run),
            Err(err @ (StoreError::Corrupt { .. } | StoreError::NewerSchema { .. })) => {
                tracing::warn!(error = %err, "left an unreadable run out of a listing");
            }
            Err(err) => return Err(err),
        }
    }
    Ok(runs)
}

/// The threads of a listing that can be read: as [`readable_runs`], a
/// damaged row is logged and left out, so one bad row never hides the rest.
fn readable_threads(
    rows: impl Iterator<Item = Result<askloop::Thread, StoreError>>,
) -> Result<Vec<askloop::Thread>, StoreError> {
    let mut threads = Vec::new();
    for row in rows {
        match row {
            Ok(thread) => threads.push(thread),
            Err(err @ StoreError::ThreadCorrupt { .. }) => {
                tracing::warn!(error = %err, "left an unreadable thread out of a listing");
            }
            Err(err) => return Err(err),
        }
    }
    Ok(threads)
}

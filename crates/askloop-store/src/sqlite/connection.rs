//! Opening the file: connections, their settings, and the tables.

use std::path::Path;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::SqliteOptions;

/// The tables' migrations, in order: `(version, SQL)`. Migrations only add,
/// so a file migrated further by a newer askloop still opens, and each row's
/// layout version decides whether this build may read it (see `row.rs`).
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../../migrations/sqlite/0001_runs.sql")),
    (2, include_str!("../../migrations/sqlite/0002_leases.sql")),
    (
        3,
        include_str!("../../migrations/sqlite/0003_expiry_and_resolutions.sql"),
    ),
    (4, include_str!("../../migrations/sqlite/0004_outbox.sql")),
    (5, include_str!("../../migrations/sqlite/0005_partial_indexes.sql")),
    (6, include_str!("../../migrations/sqlite/0006_run_settings.sql")),
    (7, include_str!("../../migrations/sqlite/0007_threads.sql")),
    (8, include_str!("../../migrations/sqlite/0008_grants.sql")),
    (9, include_str!("../../migrations/sqlite/0009_answer_links.sql")),
    (10, include_str!("../../migrations/sqlite/0010_trace_parent.sql")),
    (11, include_str!("../../migrations/sqlite/0011_resolution_rows.sql")),
    (
        12,
        include_str!("../../migrations/sqlite/0012_finished_by_comparisons.sql"),
    ),
    (13, include_str!("../../migrations/sqlite/0013_run_resource.sql")),
    (14, include_str!("../../migrations/sqlite/0014_link_makers.sql")),
];

/// How many prepared statements a connection keeps (the write connection
/// uses about ten, plus one per size of multi-row message `INSERT`).
const STATEMENT_CACHE: usize = 64;

/// What a connection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The store's one write connection: creates the file, switches it to
    /// WAL and brings the tables up to date.
    Writer,
    /// A read connection of an existing file: it cannot write.
    Reader,
    /// A read connection of a store opened read only: the file is never
    /// opened for writing, so a read-only file or folder can be read.
    ReadOnly,
}

/// Opens a connection to `path` with the store's settings.
pub(crate) fn open(path: &Path, role: Role, options: &SqliteOptions) -> rusqlite::Result<Connection> {
    let flags = match role {
        Role::Writer if options.create => OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        Role::Writer | Role::Reader => OpenFlags::SQLITE_OPEN_READ_WRITE,
        Role::ReadOnly => OpenFlags::SQLITE_OPEN_READ_ONLY,
    } | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    let conn = if role == Role::ReadOnly {
        readable(conn, path, flags)?
    } else {
        conn
    };
    conn.busy_timeout(options.busy_timeout)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    match role {
        Role::Writer => conn.execute_batch(match options.sync {
            super::SqliteSync::Full => "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;",
            super::SqliteSync::Normal => "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
        })?,
        Role::Reader | Role::ReadOnly => conn.execute_batch("PRAGMA query_only = ON;")?,
    }
    Ok(conn)
}

/// A read-only connection that can read: SQLite opens lazily, so the first
/// read tells. A WAL file in a folder that cannot be written, closed
/// cleanly (no -shm file left), cannot be read the ordinary way: reading
/// would need to create the -shm file. Nobody can write the file through
/// that folder either, so it is then read as immutable (what a last writer
/// left in a -wal file that could not be folded back is not seen).
fn readable(conn: Connection, path: &Path, flags: OpenFlags) -> rusqlite::Result<Connection> {
    let probe = conn.query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get::<_, i64>(0));
    match probe {
        Ok(_) => Ok(conn),
        Err(err) if cannot_share(&err) && path.is_file() => {
            drop(conn);
            Connection::open_with_flags(immutable_uri(path), flags | OpenFlags::SQLITE_OPEN_URI)
        }
        Err(err) => Err(err),
    }
}

fn cannot_share(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::ReadOnly)
    )
}

/// `file:PATH?immutable=1`, with every byte a URI path cannot hold as is
/// escaped (SQLite decodes `%XX` in URI file names).
fn immutable_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for &byte in path.as_os_str().as_encoded_bytes() {
        if byte.is_ascii_graphic() && !matches!(byte, b'%' | b'?' | b'#') {
            uri.push(char::from(byte));
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// Switches the file to WAL (the file remembers it) and returns the journal
/// mode it is in afterwards: `wal`, unless the file system or another
/// program's exclusive lock prevents it.
pub(crate) fn switch_to_wal(conn: &Connection) -> rusqlite::Result<String> {
    conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
}

/// Whether the file holds askloop's tables (a store opened read only
/// cannot create them).
pub(crate) fn has_tables(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs')",
        [],
        |row| row.get(0),
    )
}

/// The columns of askloop's tables as the file has them: (table, column).
pub(crate) fn columns(conn: &Connection) -> rusqlite::Result<Vec<(String, String)>> {
    let mut statement = conn.prepare(
        "SELECT m.name, p.name FROM sqlite_master AS m, pragma_table_info(m.name) AS p \
         WHERE m.type = 'table' AND m.name IN (SELECT value FROM json_each(?))",
    )?;
    let tables = serde_json::to_string(&crate::columns::table_names()).unwrap_or_default();
    statement
        .query_map([tables], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect()
}

/// Brings the tables up to date: applies, in one `BEGIN IMMEDIATE`
/// transaction, the migrations the file has not seen. The file's level is
/// SQLite's `user_version`; two processes migrating one new file at once
/// take turns on the write lock, and the second finds nothing to do.
pub(crate) fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let latest = MIGRATIONS.last().map_or(0, |(version, _)| *version);
    if user_version(conn)? >= latest {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let level = user_version(&tx)?;
    for (version, sql) in MIGRATIONS {
        if *version > level {
            tx.execute_batch(sql)?;
        }
    }
    if latest > level {
        tx.pragma_update(None, "user_version", latest)?;
    }
    tx.commit()
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
}

//! The SQLite store's change feed: SQLite has no notifications between
//! processes, so a thread of the feed's own, on a connection of its own,
//! asks the file every [`POLL`] whether anyone committed to it since
//! (`PRAGMA data_version`, which changes when another connection, in this
//! process or another, commits). It costs one tiny query per poll and sees
//! every process's writes, not only this store's; it cannot say which run
//! changed, so it reports [`RunChange::unknown`].

use std::path::PathBuf;
use std::time::Duration;

use askloop::{RunChange, RunChanges, StoreError};
use rusqlite::Connection;
use tokio::sync::mpsc;

use super::SqliteOptions;
use super::connection::{self, Role};
use super::fault;

/// How often the file is asked whether it changed.
pub(crate) const POLL: Duration = Duration::from_millis(500);

/// Starts watching the file at `path`; the watch (its thread and
/// connection) ends when the returned feed is dropped.
pub(crate) async fn watch(path: PathBuf, options: SqliteOptions) -> Result<RunChanges, StoreError> {
    let role = if options.read_only {
        Role::ReadOnly
    } else {
        Role::Reader
    };
    let opened = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || {
            let conn = connection::open(&path, role, &options)?;
            let version = data_version(&conn)?;
            Ok::<_, rusqlite::Error>((conn, version))
        })
        .await
        .map_err(StoreError::backend)?
    };
    let (conn, version) =
        opened.map_err(|e| fault::from_sqlite(&path, &e).unwrap_or_else(|| StoreError::backend(e)))?;
    let (sender, receiver) = mpsc::channel(1);
    std::thread::Builder::new()
        .name("askloop-sqlite-watch".to_owned())
        .spawn(move || poll(&path, &conn, version, &sender))
        .map_err(StoreError::backend)?;
    Ok(Box::pin(futures::stream::unfold(receiver, |mut receiver| async move {
        let change = receiver.recv().await?;
        Some((change, receiver))
    })))
}

fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA data_version", [], |row| row.get(0))
}

/// Polls until the feed is dropped. A change not yet read is not sent
/// twice: one pending [`RunChange::unknown`] already says "read again".
fn poll(path: &std::path::Path, conn: &Connection, mut seen: i64, sender: &mpsc::Sender<RunChange>) {
    loop {
        std::thread::sleep(POLL);
        if sender.is_closed() {
            return;
        }
        match data_version(conn) {
            Ok(version) if version != seen => {
                seen = version;
                // Full: a change is already waiting to be read.
                if let Err(mpsc::error::TrySendError::Closed(_)) = sender.try_send(RunChange::unknown()) {
                    return;
                }
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "watching the SQLite file for changes failed; trying again");
            }
        }
    }
}

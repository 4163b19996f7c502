//! What is wrong with a SQLite file, in words a person can act on.
//!
//! SQLite and the file system report a missing file, a file that is not a
//! database, a read-only file or folder and a full disk each in their own
//! way; here they become one [`StoreError::Unusable`] naming the file (its
//! absolute path) and the [`DatabaseFault`]. Errors that say nothing about
//! the file itself (a lost compare-and-set, a corrupt row) are left as they
//! are.

use std::io;
use std::path::Path;

use askloop::{DatabaseFault, StoreError};
use rusqlite::ErrorCode;

/// The error for `path` with `fault`, explained by `detail` (the fault's
/// own words when empty).
pub(crate) fn unusable(path: &Path, fault: DatabaseFault, detail: String) -> StoreError {
    let detail = if detail.is_empty() { fault.to_string() } else { detail };
    StoreError::Unusable {
        location: shown(path),
        fault,
        detail,
    }
}

/// "`lead` (`words`)", or only `lead` when there are no words.
fn said(lead: impl std::fmt::Display, words: &str) -> String {
    if words.is_empty() {
        lead.to_string()
    } else {
        format!("{lead} ({words})")
    }
}

/// The path as a person finds it from any folder: absolute.
fn shown(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// The fault a SQLite error stands for, if it is about the file.
pub(crate) fn of_sqlite(err: &rusqlite::Error) -> Option<DatabaseFault> {
    Some(match err.sqlite_error_code()? {
        ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt => DatabaseFault::NotADatabase,
        ErrorCode::ReadOnly => DatabaseFault::ReadOnly,
        ErrorCode::DiskFull => DatabaseFault::DiskFull,
        ErrorCode::CannotOpen | ErrorCode::PermissionDenied => DatabaseFault::CannotOpen,
        _ => return None,
    })
}

/// `err` about the file at `path` as [`StoreError::Unusable`], or `None`
/// when it is not about the file.
pub(crate) fn from_sqlite(path: &Path, err: &rusqlite::Error) -> Option<StoreError> {
    let fault = of_sqlite(err)?;
    let words = sqlite_words(err);
    let detail = match err.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => said("not a SQLite database", &words),
        Some(ErrorCode::DatabaseCorrupt) => said("a damaged SQLite database", &words),
        _ => said(fault, &words),
    };
    Some(unusable(path, fault, detail))
}

/// A store error as it should reach people: a SQLite error about the file
/// becomes [`StoreError::Unusable`]; anything else is returned unchanged.
pub(crate) fn explain(path: &Path, err: StoreError) -> StoreError {
    let about_file = match &err {
        StoreError::Backend(source) => source
            .downcast_ref::<rusqlite::Error>()
            .and_then(|sqlite| busy(path, sqlite).or_else(|| from_sqlite(path, sqlite))),
        _ => None,
    };
    about_file.unwrap_or(err)
}

/// Another connection held the file's lock for longer than the store waits
/// (`busy_timeout`): [`StoreError::Busy`], which is worth a later try and
/// is not the caller's mistake.
fn busy(path: &Path, err: &rusqlite::Error) -> Option<StoreError> {
    match err.sqlite_error_code()? {
        ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Some(StoreError::Busy {
            location: shown(path),
            detail: said("another connection holds its lock", &sqlite_words(err)),
        }),
        _ => None,
    }
}

/// A file-system error met at `path` (creating its folder, looking at it).
pub(crate) fn from_io(path: &Path, err: &io::Error) -> StoreError {
    let words = without_os_code(err);
    let (fault, detail) = match err.kind() {
        io::ErrorKind::NotFound => (DatabaseFault::Missing, String::new()),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
            (DatabaseFault::ReadOnly, said(DatabaseFault::ReadOnly, &words))
        }
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => {
            (DatabaseFault::DiskFull, said(DatabaseFault::DiskFull, &words))
        }
        io::ErrorKind::NotADirectory | io::ErrorKind::AlreadyExists => (
            DatabaseFault::CannotOpen,
            "cannot be opened (a file is in the way where a folder of the path should be)".to_owned(),
        ),
        io::ErrorKind::IsADirectory => (
            DatabaseFault::NotADatabase,
            "not a SQLite database (it is a folder)".to_owned(),
        ),
        _ => (DatabaseFault::CannotOpen, said(DatabaseFault::CannotOpen, &words)),
    };
    unusable(path, fault, detail)
}

/// SQLite's own words for an error, without what only its developers can
/// use: the source line of the check that failed ("... at line 948 of
/// [a1b2c3]") and the path repeated after the message.
fn sqlite_words(err: &rusqlite::Error) -> String {
    let text = match err {
        rusqlite::Error::SqliteFailure(_, Some(message)) if !message.is_empty() => message.clone(),
        rusqlite::Error::SqliteFailure(code, _) => code.to_string(),
        other => other.to_string(),
    };
    let text = match text.find(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    };
    // rusqlite appends the path to "unable to open database file: PATH";
    // the message names the file already.
    match text.split_once(": /") {
        Some((words, _)) => words.to_owned(),
        None => text,
    }
}

/// "Permission denied (os error 13)" without the number.
fn without_os_code(err: &io::Error) -> String {
    let text = err.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite_error(code: i32, message: &str) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some(message.to_owned()))
    }

    fn fault_and_text(err: StoreError) -> (DatabaseFault, String) {
        let text = err.to_string();
        (err.fault().unwrap(), text)
    }

    #[test]
    fn a_full_disk_is_named_with_the_file() {
        let err = from_sqlite(
            Path::new("/data/runs.db"),
            &sqlite_error(rusqlite::ffi::SQLITE_FULL, "database or disk is full"),
        )
        .unwrap();
        let (fault, text) = fault_and_text(err);
        assert_eq!(fault, DatabaseFault::DiskFull);
        assert_eq!(
            text,
            "cannot use the database /data/runs.db: disk full (database or disk is full)"
        );
    }

    #[test]
    fn a_full_disk_reported_by_a_write_is_explained_too() {
        let write_failed = StoreError::backend(sqlite_error(rusqlite::ffi::SQLITE_FULL, "database or disk is full"));
        let err = explain(Path::new("/data/runs.db"), write_failed);
        assert_eq!(err.fault(), Some(DatabaseFault::DiskFull));
        let conflict = StoreError::Conflict {
            run_id: "r".into(),
            expected_version: 1,
        };
        assert!(explain(Path::new("/data/runs.db"), conflict).is_conflict());
    }

    #[test]
    fn sqlite_source_lines_and_repeated_paths_are_left_out() {
        let corrupt = sqlite_error(
            rusqlite::ffi::SQLITE_CORRUPT,
            "database corruption at line 948 of [a1b2c3d4e5]",
        );
        let (fault, text) = fault_and_text(from_sqlite(Path::new("/d/x.db"), &corrupt).unwrap());
        assert_eq!(fault, DatabaseFault::NotADatabase);
        assert_eq!(
            text,
            "cannot use the database /d/x.db: a damaged SQLite database (database corruption)"
        );
        let cannot = sqlite_error(rusqlite::ffi::SQLITE_CANTOPEN, "unable to open database file: /d/x.db");
        let (_, text) = fault_and_text(from_sqlite(Path::new("/d/x.db"), &cannot).unwrap());
        assert!(text.ends_with("(unable to open database file)"), "{text}");
    }

    #[test]
    fn garbage_is_not_a_sqlite_database_and_read_only_is_read_only() {
        let garbage = sqlite_error(rusqlite::ffi::SQLITE_NOTADB, "file is not a database");
        let (fault, text) = fault_and_text(from_sqlite(Path::new("/d/x.db"), &garbage).unwrap());
        assert_eq!(fault, DatabaseFault::NotADatabase);
        assert!(text.contains("not a SQLite database"), "{text}");
        let read_only = sqlite_error(rusqlite::ffi::SQLITE_READONLY, "attempt to write a readonly database");
        assert_eq!(
            from_sqlite(Path::new("/d/x.db"), &read_only).unwrap().fault(),
            Some(DatabaseFault::ReadOnly)
        );
        let busy = sqlite_error(rusqlite::ffi::SQLITE_BUSY, "database is locked");
        assert!(
            from_sqlite(Path::new("/d/x.db"), &busy).is_none(),
            "busy is not about the file"
        );
    }

    #[test]
    fn file_system_errors_map_to_their_fault() {
        let cases = [
            (io::ErrorKind::NotFound, DatabaseFault::Missing),
            (io::ErrorKind::PermissionDenied, DatabaseFault::ReadOnly),
            (io::ErrorKind::ReadOnlyFilesystem, DatabaseFault::ReadOnly),
            (io::ErrorKind::StorageFull, DatabaseFault::DiskFull),
            (io::ErrorKind::NotADirectory, DatabaseFault::CannotOpen),
        ];
        for (kind, fault) in cases {
            let err = from_io(Path::new("/d/x.db"), &io::Error::from(kind));
            assert_eq!(err.fault(), Some(fault), "{kind:?}");
        }
    }
}

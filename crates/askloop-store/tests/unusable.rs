//! A SQLite location that cannot be used is reported as what is wrong with
//! it, naming the file; reads never create a database.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use askloop::{DatabaseFault, Message, RunQuery, RunStore, StoreError};
use askloop_store::Access;
use askloop_store::conformance::new_run;
use chrono::Utc;

async fn open(path: &std::path::Path, access: Access) -> Result<std::sync::Arc<dyn askloop::RunStore>, StoreError> {
    askloop_store::open_with(path.to_str().unwrap(), access).await
}

fn fault_of(result: Result<std::sync::Arc<dyn askloop::RunStore>, StoreError>) -> (DatabaseFault, String) {
    let err = result.expect_err("the open must fail");
    let fault = err.fault().unwrap_or_else(|| panic!("no fault in {err:?}"));
    (fault, err.to_string())
}

#[tokio::test]
async fn reading_or_resuming_a_missing_file_fails_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("sub/rnus.db");
    for access in [Access::ReadOnly, Access::Existing] {
        let (fault, text) = fault_of(open(&typo, access).await);
        assert_eq!(fault, DatabaseFault::Missing);
        assert!(text.contains(typo.to_str().unwrap()), "{text}");
        assert!(text.contains("no database exists there"), "{text}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing was created");
}

#[tokio::test]
async fn a_relative_path_is_named_absolute_in_the_error() {
    let (_, text) = fault_of(open(std::path::Path::new("no-such-askloop-file.db"), Access::ReadOnly).await);
    let absolute = std::env::current_dir().unwrap().join("no-such-askloop-file.db");
    assert!(text.contains(absolute.to_str().unwrap()), "{text}");
}

#[tokio::test]
async fn garbage_is_not_a_sqlite_database_for_every_access() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.db");
    std::fs::write(&path, "this is not a database, it is a shopping list ".repeat(200)).unwrap();
    for access in [Access::Create, Access::Existing, Access::ReadOnly] {
        let (fault, text) = fault_of(open(&path, access).await);
        assert_eq!(fault, DatabaseFault::NotADatabase, "{access:?}: {text}");
        assert!(text.contains("not a SQLite database"), "{text}");
        assert!(text.contains(path.to_str().unwrap()), "{text}");
    }
}

#[tokio::test]
async fn a_truncated_database_is_reported_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let store = open(&path, Access::Create).await.unwrap();
    for i in 0..40 {
        let run = new_run(&format!("r{i}"), "a", Utc::now(), 1);
        store.create(&run, &[Message::user("x".repeat(2000))]).await.unwrap();
    }
    drop(store);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 16384, "{}", bytes.len());
    let cut = dir.path().join("cut.db");
    std::fs::write(&cut, &bytes[..8192]).unwrap();
    let (fault, text) = fault_of(open(&cut, Access::ReadOnly).await);
    assert_eq!(fault, DatabaseFault::NotADatabase, "{text}");
    assert!(text.contains("damaged SQLite database"), "{text}");
}

#[tokio::test]
async fn a_file_in_place_of_a_folder_cannot_be_opened() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), "x").unwrap();
    let path = dir.path().join("file/runs.db");
    for access in [Access::Create, Access::ReadOnly] {
        let (fault, text) = fault_of(open(&path, access).await);
        assert_eq!(fault, DatabaseFault::CannotOpen, "{access:?}: {text}");
        assert!(text.contains("a file is in the way"), "{text}");
    }
}

#[tokio::test]
async fn a_sqlite_file_without_askloop_tables_is_not_read_as_an_empty_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE songs (title TEXT)")
        .unwrap();
    let (fault, text) = fault_of(open(&path, Access::ReadOnly).await);
    assert_eq!(fault, DatabaseFault::NotADatabase);
    assert!(text.contains("without askloop's tables"), "{text}");
}

#[tokio::test]
async fn a_store_opened_read_only_reads_and_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let store = open(&path, Access::Create).await.unwrap();
    store
        .create(&new_run("r1", "a", Utc::now(), 1), &[Message::user("hi")])
        .await
        .unwrap();
    drop(store);
    let reader = open(&path, Access::ReadOnly).await.unwrap();
    assert_eq!(reader.list(&RunQuery::default()).await.unwrap().len(), 1);
    assert_eq!(reader.messages("r1").await.unwrap(), [Message::user("hi")]);
    let refused = reader
        .create(&new_run("r2", "a", Utc::now(), 1), &[Message::user("no")])
        .await
        .unwrap_err();
    assert_eq!(refused.fault(), Some(DatabaseFault::ReadOnly), "{refused}");
    drop(reader);
    let again = open(&path, Access::Existing).await.unwrap();
    assert_eq!(
        again.list(&RunQuery::default()).await.unwrap().len(),
        1,
        "r2 was never written"
    );
}

/// A file whose lock another connection holds longer than the store waits
/// is busy: a transient failure worth a later try, not a fault of the file
/// and not bad usage.
#[tokio::test]
async fn a_file_locked_by_another_connection_is_busy_and_transient() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let options = askloop_store::SqliteOptions::default().busy_timeout(std::time::Duration::from_millis(50));
    let store = askloop_store::SqliteStore::open_with(&path, options).await.unwrap();
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = store
        .create(&new_run("r1", "a", Utc::now(), 1), &[Message::user("hi")])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Busy { .. }), "{err:?}");
    assert!(err.is_transient());
    assert_eq!(err.fault(), None);
    assert!(err.to_string().contains("busy"), "{err}");
    holder.execute_batch("ROLLBACK").unwrap();
    store
        .create(&new_run("r1", "a", Utc::now(), 1), &[Message::user("hi")])
        .await
        .unwrap();
}

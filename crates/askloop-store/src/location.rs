//! Where a store is, parsed from the one string the CLI and server accept.

use std::path::PathBuf;

use askloop::StoreError;

/// The forms [`crate::open`] accepts, for error messages.
pub(crate) const ACCEPTED_FORMS: &str = "a file path (e.g. ./askloop.db), sqlite://PATH (e.g. sqlite://./askloop.db or \
     sqlite:///var/lib/askloop/runs.db), or postgres://USER@HOST:PORT/DATABASE (postgresql:// works too)";

/// A parsed store location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    /// A SQLite database file.
    Sqlite(PathBuf),
    /// A PostgreSQL connection URL, as given.
    Postgres(String),
}

impl Location {
    pub(crate) fn parse(location: &str) -> Result<Location, StoreError> {
        let trimmed = location.trim();
        if trimmed.is_empty() {
            return Err(invalid(location, "it is empty"));
        }
        if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
            return Ok(Location::Postgres(trimmed.to_owned()));
        }
        if let Some(rest) = trimmed.strip_prefix("sqlite:") {
            // sqlite://./a.db, sqlite:///abs/a.db and sqlite:a.db all name a file.
            let path = rest.strip_prefix("//").unwrap_or(rest);
            return sqlite_path(location, path);
        }
        if let Some((scheme, _)) = trimmed.split_once("://") {
            return Err(invalid(location, &format!("askloop has no store for {scheme}://")));
        }
        sqlite_path(location, trimmed)
    }
}

fn sqlite_path(location: &str, path: &str) -> Result<Location, StoreError> {
    if path.is_empty() {
        return Err(invalid(location, "it names no file"));
    }
    if path == ":memory:" || path.starts_with(":memory:?") {
        return Err(invalid(
            location,
            "an in-memory SQLite database would not outlive the process; use askloop::MemoryStore for that",
        ));
    }
    if path.contains('?') {
        return Err(invalid(
            location,
            "SQLite options in the location are not supported (askloop sets WAL mode and a busy timeout itself); \
             give only the file",
        ));
    }
    Ok(Location::Sqlite(PathBuf::from(path)))
}

fn invalid(location: &str, why: &str) -> StoreError {
    StoreError::InvalidLocation(format!(
        "cannot open a run store at {location:?}: {why}; expected {ACCEPTED_FORMS}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(path: &str) -> Location {
        Location::Sqlite(PathBuf::from(path))
    }

    #[test]
    fn plain_paths_and_sqlite_urls_name_a_sqlite_file() {
        assert_eq!(Location::parse("runs.db").unwrap(), sqlite("runs.db"));
        assert_eq!(Location::parse("./data/runs.db").unwrap(), sqlite("./data/runs.db"));
        assert_eq!(Location::parse("/var/lib/a.db").unwrap(), sqlite("/var/lib/a.db"));
        assert_eq!(Location::parse("sqlite://./a.db").unwrap(), sqlite("./a.db"));
        assert_eq!(Location::parse("sqlite:///abs/a.db").unwrap(), sqlite("/abs/a.db"));
        assert_eq!(Location::parse("sqlite:a.db").unwrap(), sqlite("a.db"));
    }

    #[test]
    fn postgres_urls_are_kept_whole() {
        let url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable";
        assert_eq!(Location::parse(url).unwrap(), Location::Postgres(url.to_owned()));
        let url = "postgresql://u:p@db/x";
        assert_eq!(Location::parse(url).unwrap(), Location::Postgres(url.to_owned()));
    }

    #[test]
    fn other_schemes_and_empty_locations_are_refused_listing_the_accepted_forms() {
        for bad in [
            "mysql://u@h/db",
            "http://example.test/x",
            "",
            "   ",
            "sqlite://",
            "sqlite::memory:",
        ] {
            match Location::parse(bad) {
                Err(StoreError::InvalidLocation(message)) => {
                    assert!(message.contains("sqlite://PATH"), "{message}");
                    assert!(message.contains("postgres://"), "{message}");
                }
                other => panic!("{bad:?} should be refused, got {other:?}"),
            }
        }
    }

    #[test]
    fn the_refusal_names_the_unsupported_scheme() {
        let Err(StoreError::InvalidLocation(message)) = Location::parse("mysql://u@h/db") else {
            panic!("mysql should be refused");
        };
        assert!(message.contains("mysql://"), "{message}");
    }
}

//! How a [`PostgresStore`](crate::PostgresStore) connects: the schema its
//! tables live in and the limits on waiting, from [`PostgresOptions`] and
//! the URL's query (`?schema=`, `?lock_timeout=`, `?statement_timeout=`,
//! or `search_path` in `?options=`).

use std::sync::Arc;
use std::time::Duration;

use askloop::{Clock, StoreError};

/// The schema askloop's tables and their migration record live in, unless
/// told otherwise.
pub const DEFAULT_POSTGRES_SCHEMA: &str = "askloop";
/// How long a statement waits for a lock held by another session before
/// PostgreSQL gives up.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a statement may run before PostgreSQL cancels it.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// How [`PostgresStore::connect_with`](crate::PostgresStore::connect_with)
/// connects. What is set here wins over the URL's query, which wins over
/// the defaults.
///
/// ```
/// use std::time::Duration;
/// use askloop_store::PostgresOptions;
///
/// let options = PostgresOptions::default()
///     .schema("agents")
///     .lock_timeout(Duration::from_secs(2))
///     .statement_timeout(Duration::from_secs(60));
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    pub(crate) schema: Option<String>,
    pub(crate) max_connections: u32,
    pub(crate) acquire_timeout: Duration,
    pub(crate) lock_timeout: Option<Duration>,
    pub(crate) statement_timeout: Option<Duration>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            schema: None,
            max_connections: 10,
            acquire_timeout: Duration::from_secs(30),
            lock_timeout: None,
            statement_timeout: None,
            clock: askloop::system_clock(),
        }
    }
}

impl PostgresOptions {
    /// Keeps askloop's tables, and the record of their migrations, in this
    /// schema (created if missing) instead of [`DEFAULT_POSTGRES_SCHEMA`]. A schema
    /// name is lower-case ASCII letters, digits and `_`, not starting with
    /// a digit.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The most connections the pool opens.
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// How long a query waits for a free connection.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// How long a statement waits for a lock another session holds (on a
    /// run's row, or a table) before failing; default
    /// [`DEFAULT_LOCK_TIMEOUT`], zero for no limit.
    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = Some(timeout);
        self
    }

    /// How long a statement may run before PostgreSQL cancels it; default
    /// [`DEFAULT_STATEMENT_TIMEOUT`], zero for no limit.
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = Some(timeout);
        self
    }

    /// The clock that stamps the store's writes (a run's `updated_at`,
    /// bound as a parameter rather than read from the database server's
    /// `now()`): the system's by default. Give it the agent's clock, so a
    /// test that moves a [`askloop::ManualClock`] moves both.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

/// What the URL's query said about askloop's own settings, and the URL
/// without them (for sqlx).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct UrlSettings {
    pub(crate) url: String,
    pub(crate) schema: Option<String>,
    pub(crate) lock_timeout: Option<Duration>,
    pub(crate) statement_timeout: Option<Duration>,
}

/// askloop's own query parameters.
const OWN_PARAMETERS: [&str; 3] = ["schema", "lock_timeout", "statement_timeout"];

/// Takes `schema`, `lock_timeout` and `statement_timeout` out of the URL's
/// query; a URL without them is kept exactly as given.
pub(crate) fn split_url(url: &str, shown: &str) -> Result<UrlSettings, StoreError> {
    let invalid = |why: String| {
        StoreError::InvalidLocation(format!(
            "cannot read the PostgreSQL URL {shown}: {why}; expected \
             postgres://USER@HOST:PORT/DATABASE[?schema=NAME&lock_timeout=5s&statement_timeout=30s]"
        ))
    };
    let mut parsed = url::Url::parse(url).map_err(|e| invalid(e.to_string()))?;
    let pairs: Vec<(String, String)> = parsed.query_pairs().into_owned().collect();
    if !pairs.iter().any(|(key, _)| OWN_PARAMETERS.contains(&key.as_str())) {
        return Ok(UrlSettings {
            url: url.to_owned(),
            ..UrlSettings::default()
        });
    }
    let mut settings = UrlSettings::default();
    let mut rest = Vec::new();
    for (key, value) in pairs {
        match key.as_str() {
            "schema" => settings.schema = Some(value),
            "lock_timeout" => {
                settings.lock_timeout = Some(parse_timeout(&key, &value).map_err(|err| invalid(err.to_string()))?)
            }
            "statement_timeout" => {
                settings.statement_timeout = Some(parse_timeout(&key, &value).map_err(|err| invalid(err.to_string()))?);
            }
            _ => rest.push((key, value)),
        }
    }
    if rest.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(rest);
    }
    settings.url = parsed.into();
    Ok(settings)
}

/// A timeout in the URL askloop cannot read, saying what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {why}")]
struct InvalidTimeout {
    key: String,
    why: String,
}

/// A duration in [`askloop::parse_duration`]'s forms with its unit, or `0`
/// for no limit. A number alone is refused: PostgreSQL reads it as
/// milliseconds and the rest of askloop as seconds, so either reading would
/// surprise someone.
fn parse_timeout(key: &str, value: &str) -> Result<Duration, InvalidTimeout> {
    let refuse = |why: String| InvalidTimeout {
        key: key.to_owned(),
        why,
    };
    let text = value.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    const FORMS: &str = "write a number with its unit (5s, 500ms, 1.5s, 2min, 1h) or 0 for no limit";
    let timeout = askloop::parse_duration(text).map_err(|_| refuse(format!("{text:?} is not a timeout; {FORMS}")))?;
    if text.ends_with(|c: char| c.is_ascii_digit() || c == '.') {
        return Err(refuse(format!(
            "{text:?} has no unit (PostgreSQL would read milliseconds, askloop seconds); {FORMS}"
        )));
    }
    if !timeout.is_zero() && timeout < Duration::from_millis(1) {
        return Err(refuse(format!(
            "{text:?} is less than the millisecond PostgreSQL counts in; write at least 1ms, or 0 for no limit"
        )));
    }
    Ok(timeout)
}

/// The first schema of a `search_path` set in the connection's `options`
/// (`-c search_path=name`, `--search_path=name`), if any.
pub(crate) fn search_path_schema(options: Option<&str>) -> Option<String> {
    let options = options?;
    let at = options.rfind("search_path=")?;
    let value = &options[at + "search_path=".len()..];
    let first = value.split([',', ' ']).next()?.trim().trim_matches('"');
    (!first.is_empty()).then(|| first.to_owned())
}

/// Whether the connection's `options` already set this parameter.
pub(crate) fn options_set(options: Option<&str>, parameter: &str) -> bool {
    options.is_some_and(|options| options.contains(&format!("{parameter}=")))
}

/// A timeout as PostgreSQL reads it.
pub(crate) fn pg_duration(timeout: Duration) -> String {
    format!("{}ms", timeout.as_millis())
}

/// A timeout as people read it (zero: none).
pub(crate) fn human(timeout: Duration) -> String {
    if timeout.is_zero() {
        "no limit".to_owned()
    } else {
        askloop::human_duration(timeout)
    }
}

/// Refuses schema names that would need quoting rules to be safe.
pub(crate) fn check_schema_name(schema: &str) -> Result<(), StoreError> {
    let mut chars = schema.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && schema.len() <= 63 {
        Ok(())
    } else {
        Err(StoreError::InvalidLocation(format!(
            "{schema:?} is not a usable PostgreSQL schema name: use at most 63 lower-case ASCII letters, digits \
             and _, not starting with a digit"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn askloop_parameters_are_taken_out_of_the_url_and_the_rest_kept() {
        let settings = split_url(
            "postgres://u@h:5432/db?sslmode=disable&schema=agents&lock_timeout=2s&statement_timeout=1min",
            "x",
        )
        .unwrap();
        assert_eq!(settings.url, "postgres://u@h:5432/db?sslmode=disable");
        assert_eq!(settings.schema.as_deref(), Some("agents"));
        assert_eq!(settings.lock_timeout, Some(Duration::from_secs(2)));
        assert_eq!(settings.statement_timeout, Some(Duration::from_secs(60)));
        let plain = "postgres://u@h/db?options=-c%20search_path%3Dx";
        assert_eq!(split_url(plain, "x").unwrap().url, plain, "kept exactly");
        assert_eq!(
            split_url("postgres://u@h/db?schema=a", "x").unwrap().url,
            "postgres://u@h/db"
        );
    }

    #[test]
    fn a_timeout_without_a_unit_is_refused_with_the_accepted_forms() {
        for bad in ["5", "soon", "5 fortnights", "-1s", "0.5ms"] {
            let url = format!("postgres://u@h/db?lock_timeout={bad}");
            match split_url(&url, "postgres://u@h/db") {
                Err(StoreError::InvalidLocation(message)) => {
                    assert!(message.contains("lock_timeout: "), "{message}");
                    assert!(message.contains(&format!("{bad:?}")), "{message}");
                    assert!(message.contains("0 for no limit"), "{message}");
                }
                other => panic!("{bad:?}: expected InvalidLocation, got {other:?}"),
            }
        }
        assert_eq!(parse_timeout("k", "0"), Ok(Duration::ZERO));
        assert_eq!(parse_timeout("k", "0s"), Ok(Duration::ZERO));
        assert_eq!(parse_timeout("k", "250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_timeout("k", "1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_timeout("k", "2min"), Ok(Duration::from_secs(120)));
    }

    #[test]
    fn the_search_path_of_the_connection_options_names_a_schema() {
        assert_eq!(
            search_path_schema(Some("-c search_path=agents")).as_deref(),
            Some("agents")
        );
        assert_eq!(
            search_path_schema(Some("-c geqo=off --search_path=a,public")).as_deref(),
            Some("a")
        );
        assert_eq!(search_path_schema(Some("-c geqo=off")), None);
        assert_eq!(search_path_schema(None), None);
    }

    #[test]
    fn only_plain_schema_names_are_accepted() {
        assert!(check_schema_name("askloop_test_1").is_ok());
        for bad in ["", "1abc", "a-b", "A", "x\"; DROP TABLE runs; --", &"a".repeat(64)] {
            assert!(check_schema_name(bad).is_err(), "{bad:?}");
        }
    }
}

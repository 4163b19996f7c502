//! Timeouts from the environment: `ASKLOOP_MODEL_TIMEOUT` (the total
//! deadline of one model call) and `ASKLOOP_MODEL_IDLE_TIMEOUT` (the
//! longest wait for the next event), read by [`crate::from_spec`] on top of
//! the [`HttpConfig`] it is given.

use std::time::Duration;

use crate::http::HttpConfig;

/// The total deadline of one model call, retries and stream included.
pub const MODEL_TIMEOUT_VAR: &str = "ASKLOOP_MODEL_TIMEOUT";
/// The longest a model call may go without an event (keep-alive comments
/// do not count).
pub const MODEL_IDLE_TIMEOUT_VAR: &str = "ASKLOOP_MODEL_IDLE_TIMEOUT";

/// A timeout variable whose value is not a duration askloop accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {why}")]
pub(crate) struct InvalidTimeout {
    variable: String,
    why: String,
}

/// `http` with the timeouts the variables set. `var` returns a variable's
/// trimmed, non-empty value. A value that is not a duration is refused with
/// what would be accepted.
pub(crate) fn with_env_timeouts(
    mut http: HttpConfig,
    var: impl Fn(&str) -> Option<String>,
) -> Result<HttpConfig, InvalidTimeout> {
    if let Some(value) = var(MODEL_TIMEOUT_VAR) {
        http.total_timeout = parse_duration(MODEL_TIMEOUT_VAR, &value)?;
    }
    if let Some(value) = var(MODEL_IDLE_TIMEOUT_VAR) {
        http.idle_timeout = parse_duration(MODEL_IDLE_TIMEOUT_VAR, &value)?;
    }
    Ok(http)
}

/// A duration in [`askloop::parse_duration`]'s forms, more than zero.
fn parse_duration(name: &str, value: &str) -> Result<Duration, InvalidTimeout> {
    let refuse = |why: String| InvalidTimeout {
        variable: name.to_owned(),
        why,
    };
    match askloop::parse_duration(value) {
        Ok(duration) if duration.is_zero() => Err(refuse(format!(
            "{:?} is no time at all; give more than zero: {}",
            value.trim(),
            askloop::DURATION_FORMS
        ))),
        Ok(duration) => Ok(duration),
        Err(problem) => Err(refuse(problem.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_seconds_or_a_number_with_a_unit() {
        let ok = |v: &str| parse_duration("X", v).unwrap();
        assert_eq!(ok("90"), Duration::from_secs(90));
        assert_eq!(ok("90s"), Duration::from_secs(90));
        assert_eq!(ok(" 500ms "), Duration::from_millis(500));
        assert_eq!(ok("10m"), Duration::from_secs(600));
        assert_eq!(ok("10min"), Duration::from_secs(600));
        assert_eq!(ok("1h"), Duration::from_secs(3600));
        assert_eq!(ok("1.5s"), Duration::from_millis(1500));
        assert_eq!(ok("1d"), Duration::from_secs(86_400));
    }

    #[test]
    fn a_value_that_is_not_a_duration_is_refused_naming_the_variable_and_the_forms() {
        for bad in ["", "soon", "10 fortnights", "0", "-5s", "1e400"] {
            let message = parse_duration("ASKLOOP_MODEL_TIMEOUT", bad).unwrap_err().to_string();
            assert!(message.starts_with("ASKLOOP_MODEL_TIMEOUT: "), "{message}");
            assert!(message.contains(&format!("{:?}", bad.trim())), "{message}");
            assert!(message.contains(askloop::DURATION_FORMS), "{message}");
        }
    }

    #[test]
    fn the_variables_set_the_total_and_idle_timeouts_and_leave_the_rest() {
        let env = |name: &str| match name {
            MODEL_TIMEOUT_VAR => Some("2m".to_owned()),
            MODEL_IDLE_TIMEOUT_VAR => Some("45".to_owned()),
            _ => None,
        };
        let http = with_env_timeouts(HttpConfig::default(), env).unwrap();
        assert_eq!(http.total_timeout, Duration::from_secs(120));
        assert_eq!(http.idle_timeout, Duration::from_secs(45));
        assert_eq!(http.connect_timeout, HttpConfig::default().connect_timeout);
        let unset = with_env_timeouts(HttpConfig::default(), |_| None).unwrap();
        assert_eq!(unset, HttpConfig::default());
    }
}

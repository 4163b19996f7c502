//! Time limits as written in `askloop.toml`: [`askloop::parse_duration`]'s
//! forms (`90s`, `15m`, `2h`, `3d`, `1.5h`, or `90` for seconds), more than
//! zero: a limit of no time would end every wait at once, and a missing key
//! already means no limit.

use std::time::Duration;

use askloop::InvalidDuration;

/// A time limit askloop cannot read, saying what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InvalidLimit {
    #[error(transparent)]
    NotADuration(#[from] InvalidDuration),
    #[error("{0:?} is no time at all; leave the key out for no limit")]
    Zero(String),
}

/// Reads a time limit, or says what is accepted.
pub(super) fn parse_limit(text: &str) -> Result<Duration, InvalidLimit> {
    match askloop::parse_duration(text)? {
        limit if limit.is_zero() => Err(InvalidLimit::Zero(text.trim().to_owned())),
        limit => Ok(limit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_take_the_one_duration_grammar() {
        assert_eq!(parse_limit("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_limit("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_limit("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_limit("3d"), Ok(Duration::from_secs(259_200)));
        assert_eq!(parse_limit("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_limit("1.5h"), Ok(Duration::from_secs(5400)));
    }

    #[test]
    fn a_limit_that_is_no_time_or_not_a_duration_is_refused_saying_what_is_accepted() {
        for bad in ["m", "-1s", "0s", "0", "5 weeks"] {
            let err = parse_limit(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
        assert!(parse_limit("0s").unwrap_err().to_string().contains("leave the key out"));
        assert!(parse_limit("5 weeks").unwrap_err().to_string().contains("2h, 3d"));
    }
}

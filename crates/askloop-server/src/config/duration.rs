//! Time limits as written in `askloop.toml`: a whole number and a unit,
//! `90s`, `15m`, `2h`, `3d`.

use std::time::Duration;

/// What a time limit is written as.
const ACCEPTED: &str = "write a whole number and a unit: s, m, h or d (e.g. \"90s\", \"15m\", \"2h\", \"3d\")";

/// A time limit askloop cannot read, saying what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InvalidLimit {
    #[error("{0:?} is not a time limit; {ACCEPTED}")]
    NotANumber(String),
    #[error("{0:?} has no known unit; {ACCEPTED}")]
    UnknownUnit(String),
    #[error("{0:?} is no time at all; leave the key out for no limit")]
    Zero(String),
    #[error("{0:?} is too long")]
    TooLong(String),
}

/// Reads a time limit, or says what is accepted.
pub(super) fn parse_limit(text: &str) -> Result<Duration, InvalidLimit> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| InvalidLimit::NotANumber(text.to_owned()))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(InvalidLimit::UnknownUnit(text.to_owned())),
    };
    if number == 0 {
        return Err(InvalidLimit::Zero(text.to_owned()));
    }
    number
        .checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| InvalidLimit::TooLong(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_a_number_and_a_unit() {
        assert_eq!(parse_limit("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_limit("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_limit("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_limit("3d"), Ok(Duration::from_secs(259_200)));
    }

    #[test]
    fn a_limit_without_unit_number_or_length_is_refused_saying_what_is_accepted() {
        for bad in ["90", "m", "1.5h", "-1s", "0s", "5 weeks"] {
            let err = parse_limit(bad).unwrap_err().to_string();
            assert!(err.contains(bad.trim()), "{err}");
        }
        assert!(parse_limit("90").unwrap_err().to_string().contains("e.g."));
    }
}

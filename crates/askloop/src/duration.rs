//! [`parse_duration`]: the one way askloop reads a length of time a person
//! wrote, in a flag, an environment variable, `askloop.toml` or a database
//! URL's options.
//!
//! A number, whole or with a decimal point, then a unit: `ms`, `s` (or
//! `sec`), `m` (or `min`), `h`, `d`; a number alone is seconds. So `90`,
//! `1.5s`, `500ms`, `15m`, `2h` and `3d` all read. Zero reads as zero: what
//! zero means (no limit, never, refused) is the caller's rule, as is whether
//! less than a millisecond makes sense.

use std::time::Duration;

/// The forms [`parse_duration`] reads, for error messages.
pub const DURATION_FORMS: &str = "seconds (90) or a number with a unit: ms, s, m, h or d (500ms, 1.5s, 15m, 2h, 3d)";

/// Text that is not a length of time; its message names the text and the
/// accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidDuration {
    /// No number, a negative one, or text that is not a number.
    #[error("{0:?} is not a duration; write {DURATION_FORMS}")]
    NotANumber(String),
    /// A number with a unit askloop does not know.
    #[error("{0:?} has a unit askloop does not know; write {DURATION_FORMS}")]
    UnknownUnit(String),
    /// More time than a duration holds.
    #[error("{0:?} is too long")]
    TooLong(String),
}

/// Reads a length of time: a number, whole or decimal, then `ms`, `s`
/// (`sec`), `m` (`min`), `h` or `d`; a number alone is seconds. Zero reads as
/// zero; what it means is the caller's rule.
pub fn parse_duration(text: &str) -> Result<Duration, InvalidDuration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    // `f64`'s parser alone would take "inf", "1e3" and "-1"; the split above
    // leaves only digits and points in `number`.
    let number: f64 = number
        .parse()
        .map_err(|_| InvalidDuration::NotANumber(text.to_owned()))?;
    let seconds_per_unit = match unit.trim() {
        "" | "s" | "sec" => 1.0,
        "ms" => 0.001,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => return Err(InvalidDuration::UnknownUnit(text.to_owned())),
    };
    Duration::try_from_secs_f64(number * seconds_per_unit).map_err(|_| InvalidDuration::TooLong(text.to_owned()))
}

/// A length of time as people read it in a message: `300 s`, `250 ms`,
/// `1.5 s`.
pub fn human_duration(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{} ms", duration.as_millis())
    } else if duration.subsec_millis() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_reads_in_seconds_or_milliseconds() {
        assert_eq!(human_duration(Duration::from_secs(60)), "60 s");
        assert_eq!(human_duration(Duration::from_millis(250)), "250 ms");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5 s");
    }

    #[test]
    fn every_form_askloop_has_accepted_reads() {
        let ok = |text: &str| parse_duration(text).unwrap();
        // Bare seconds: flags and environment variables.
        assert_eq!(ok("90"), Duration::from_secs(90));
        assert_eq!(ok(" 45 "), Duration::from_secs(45));
        // Decimal numbers: environment variables.
        assert_eq!(ok("1.5s"), Duration::from_millis(1500));
        assert_eq!(ok("0.25h"), Duration::from_secs(900));
        // Each unit and its long spelling.
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("90s"), Duration::from_secs(90));
        assert_eq!(ok("90sec"), Duration::from_secs(90));
        assert_eq!(ok("15m"), Duration::from_secs(900));
        assert_eq!(ok("10min"), Duration::from_secs(600));
        assert_eq!(ok("10 min"), Duration::from_secs(600));
        assert_eq!(ok("2h"), Duration::from_secs(7200));
        assert_eq!(ok("3d"), Duration::from_secs(259_200));
        // Zero is the caller's to judge.
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("0s"), Duration::ZERO);
    }

    #[test]
    fn text_that_is_not_a_duration_is_refused_naming_it_and_the_forms() {
        for bad in [
            "",
            "soon",
            "-5s",
            "1e3",
            "inf",
            "1.2.3s",
            "s",
            "5 weeks",
            "10 fortnights",
            "1..5",
        ] {
            let message = parse_duration(bad).unwrap_err().to_string();
            assert!(message.contains(&format!("{:?}", bad.trim())), "{message}");
            assert!(message.contains("500ms, 1.5s, 15m, 2h, 3d"), "{message}");
        }
        assert_eq!(
            parse_duration("99999999999999999999999d"),
            Err(InvalidDuration::TooLong("99999999999999999999999d".into()))
        );
    }
}

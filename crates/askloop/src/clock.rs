//! [`Clock`]: where askloop reads the time.
//!
//! Runs decide by the clock (a question's time limit, a driver's lease, a
//! webhook's next try), and stores stamp what they write with it. Every such
//! reading goes through one [`Clock`], given to the agent
//! ([`AgentBuilder::clock`](crate::AgentBuilder::clock)), the stores and the
//! server: [`SystemClock`] by default, a [`ManualClock`] in tests, which then
//! move time forward instead of waiting for it.
//!
//! Times are kept to the microsecond, as every store keeps them, so a time
//! read here and stored reads back equal.

use std::fmt;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, TimeDelta, Timelike, Utc};

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now, to the microsecond.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        to_micros(Utc::now())
    }
}

/// The clock every agent, store and server uses unless given another.
pub fn system_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

/// A clock that stands still until moved: tests of time limits, leases and
/// retries set it and move it forward instead of sleeping. Clones share one
/// time.
///
/// ```
/// use askloop::{Clock, ManualClock};
/// let clock = ManualClock::starting_at("2026-12-04T10:00:00Z".parse().unwrap());
/// clock.advance(std::time::Duration::from_secs(90));
/// assert_eq!(clock.now().to_rfc3339(), "2026-12-04T10:01:30+00:00");
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    /// A clock reading `start` until moved.
    pub fn starting_at(start: DateTime<Utc>) -> Self {
        ManualClock {
            now: Arc::new(Mutex::new(to_micros(start))),
        }
    }

    /// A clock reading the system's time now, until moved.
    pub fn starting_now() -> Self {
        Self::starting_at(SystemClock.now())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: std::time::Duration) {
        let by = TimeDelta::from_std(by).unwrap_or(TimeDelta::MAX);
        let mut now = self.lock();
        *now = now.checked_add_signed(by).unwrap_or(*now);
    }

    /// Sets the clock to `at` (backwards too: a clock that jumps back is a
    /// case worth testing).
    pub fn set(&self, at: DateTime<Utc>) {
        *self.lock() = to_micros(at);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DateTime<Utc>> {
        // A poisoned lock still holds a valid time.
        self.now.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.lock()
    }
}

/// A time as askloop writes it for people and clients: RFC 3339 with
/// milliseconds and `Z`, as Mastra writes times
/// (`2026-12-04T10:00:00.000Z`).
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// `at` without its nanoseconds below the microsecond.
pub(crate) fn to_micros(at: DateTime<Utc>) -> DateTime<Utc> {
    // Only the time of day's nanoseconds change: no calendar arithmetic on
    // a path every write of a run takes.
    at.with_nanosecond(at.nanosecond() / 1_000 * 1_000).unwrap_or(at)
}

/// `at` rounded up to the millisecond, the precision of [`rfc3339`]: a
/// time that is sent as it is kept (a held-back notice's `dueAt`) and
/// must never come before the time it was computed as.
pub(crate) fn up_to_millis(at: DateTime<Utc>) -> DateTime<Utc> {
    let below = at.timestamp_subsec_nanos() % 1_000_000;
    match below {
        0 => at,
        _ => at + chrono::Duration::nanoseconds(i64::from(1_000_000 - below)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_rounded_up_to_the_millisecond_is_never_earlier_and_reads_back_the_same() {
        for (given, up) in [
            ("2026-12-04T10:00:00.123456Z", "2026-12-04T10:00:00.124Z"),
            ("2026-12-04T10:00:00.123Z", "2026-12-04T10:00:00.123Z"),
            ("2026-12-04T23:59:59.999001Z", "2026-12-05T00:00:00.000Z"),
        ] {
            let at: DateTime<Utc> = given.parse().unwrap();
            let rounded = up_to_millis(at);
            assert!(rounded >= at, "{given}");
            assert_eq!(rfc3339(rounded), up);
            assert_eq!(rfc3339(rounded).parse::<DateTime<Utc>>().unwrap(), rounded);
        }
    }

    #[test]
    fn a_manual_clock_stands_still_until_moved_and_its_clones_move_with_it() {
        let clock = ManualClock::starting_at("2026-12-04T10:00:00.123456789Z".parse().unwrap());
        let other = clock.clone();
        assert_eq!(clock.now(), clock.now());
        assert_eq!(
            clock.now().timestamp_subsec_nanos(),
            123_456_000,
            "kept to the microsecond"
        );
        other.advance(std::time::Duration::from_millis(1500));
        assert_eq!(clock.now().to_rfc3339(), "2026-12-04T10:00:01.623456+00:00");
        clock.set("2026-12-04T09:00:00Z".parse().unwrap());
        assert_eq!(other.now().to_rfc3339(), "2026-12-04T09:00:00+00:00");
    }

    #[test]
    fn the_system_clock_reads_microseconds() {
        assert_eq!(SystemClock.now().timestamp_subsec_nanos() % 1_000, 0);
    }
}

//! [`Backoff`]: how long askloop waits before trying something again, for
//! every retry it makes (a model call, a webhook delivery, a claim of a run
//! another answer holds, opening a SQLite file another process is creating).
//!
//! The wait doubles from a first wait up to a longest one, then takes "equal
//! jitter": a random point between half and all of it, so that many clients
//! failing together do not come back together, while none retries sooner
//! than half the nominal wait.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Exponential backoff with equal jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The nominal wait before the first retry; it doubles at each retry.
    pub first: Duration,
    /// The longest nominal wait.
    pub longest: Duration,
}

impl Backoff {
    /// Doubling from `first` up to `longest`.
    pub const fn new(first: Duration, longest: Duration) -> Self {
        Backoff { first, longest }
    }

    /// The wait before retry number `retry` (0-based), with its jitter.
    pub fn wait(&self, retry: u32) -> Duration {
        jitter(self.nominal(retry))
    }

    /// The wait before retry number `retry` without jitter: `first` doubled
    /// `retry` times, at most `longest`. A machine that must stay
    /// deterministic (the run machine's entries) asks for this one and the
    /// code that carries out its wait adds the jitter ([`jitter`]).
    pub fn nominal(&self, retry: u32) -> Duration {
        self.first
            .saturating_mul(2u32.saturating_pow(retry.min(31)))
            .min(self.longest)
    }
}

/// A random point between half of `wait` and all of it.
pub fn jitter(wait: Duration) -> Duration {
    jitter_with(wait, random_u64())
}

/// [`jitter`] with the random number given: the same number gives the same
/// wait.
fn jitter_with(wait: Duration, random: u64) -> Duration {
    let half = wait / 2;
    let nanos = u64::try_from((wait - half).as_nanos()).unwrap_or(u64::MAX);
    let extra = if nanos == 0 { 0 } else { random % (nanos + 1) };
    half + Duration::from_nanos(extra)
}

/// A random number without a dependency: the keys of std's `RandomState`
/// are random for each one made. Good enough to spread retries; not for
/// anything secret.
fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_nominal_wait_doubles_and_stops_at_the_longest() {
        let backoff = Backoff::new(100 * MS, 1000 * MS);
        let waits: Vec<_> = (0..6).map(|r| backoff.nominal(r)).collect();
        assert_eq!(waits, [100 * MS, 200 * MS, 400 * MS, 800 * MS, 1000 * MS, 1000 * MS]);
        assert_eq!(backoff.nominal(u32::MAX), 1000 * MS, "no overflow at any retry");
    }

    #[test]
    fn the_jittered_wait_lies_between_half_and_all_of_the_nominal_one() {
        let backoff = Backoff::new(100 * MS, 300 * MS);
        for retry in 0..5 {
            let nominal = backoff.nominal(retry);
            for _ in 0..200 {
                let wait = backoff.wait(retry);
                assert!(
                    wait >= nominal / 2 && wait <= nominal,
                    "retry {retry}: {wait:?} of {nominal:?}"
                );
            }
        }
        assert_eq!(jitter_with(100 * MS, 0), 50 * MS);
        assert_eq!(jitter_with(100 * MS, 50_000_000), 100 * MS);
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn jitter_spreads_the_waits_of_clients_failing_together() {
        let waits: std::collections::HashSet<_> = (0..50).map(|_| jitter(Duration::from_secs(1))).collect();
        assert!(waits.len() > 40, "{} distinct waits of 50", waits.len());
    }
}

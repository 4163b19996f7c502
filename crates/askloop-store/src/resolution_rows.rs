//! A long run's resolutions past its row's (`run_resolutions`, see
//! `RESOLUTIONS_IN_ROW`), kept for `get` by each store handle.
//!
//! The rows are only ever added, each keyed by the version of the write
//! that made it, and deleted only with their run. So once a run's rows up
//! to version V have been read, reading it again at version V' needs only
//! the rows with a version in (V, V'], whichever process wrote them: a
//! resume of a run with 1,000 decisions reads the one or two rows its last
//! steps added instead of all of them. Both stores read that way (SQLite
//! with a second statement on its read connection, PostgreSQL in the
//! statement that reads the run); listings and sweeps read every row with
//! the runs, in their statement (`run_select!`).

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use askloop::Resolution;
use chrono::{DateTime, Utc};

/// How many runs' rows are kept: the runs being resumed now. Each holds its
/// resolutions past the first 16, about 200 bytes each.
const CACHED_RUNS: usize = 32;

/// The rows of the runs read last, most recent first.
#[derive(Debug, Default)]
pub(crate) struct ResolutionRows {
    runs: Mutex<VecDeque<Known>>,
}

/// The rows of one run read so far.
#[derive(Debug)]
pub(crate) struct Known {
    run_id: String,
    /// A run deleted and made again under the same id starts over: its
    /// rows are not these.
    pub(crate) created_at: DateTime<Utc>,
    /// Every row with a version up to this one is in `resolutions`.
    pub(crate) through: i64,
    pub(crate) resolutions: Vec<Resolution>,
}

impl Known {
    /// What of these a read of the run made at `created_at`, at `version`,
    /// can start from: the resolutions and the version they run through,
    /// or nothing (read every row) when they are of another run of that id
    /// or of a later version than the one read.
    pub(crate) fn usable_for(self, created_at: DateTime<Utc>, version: i64) -> Option<(Vec<Resolution>, i64)> {
        (self.created_at == created_at && self.through <= version).then_some((self.resolutions, self.through))
    }
}

impl ResolutionRows {
    /// What was read of `run_id`'s rows before, taken out until [`keep`]
    /// puts the newer reading back.
    ///
    /// [`keep`]: ResolutionRows::keep
    pub(crate) fn take(&self, run_id: &str) -> Option<Known> {
        let mut runs = self.lock();
        let found = runs.iter().position(|known| known.run_id == run_id);
        found.and_then(|at| runs.remove(at))
    }

    /// Keeps `resolutions`, every row of `run_id` (made at `created_at`) up
    /// to `through`, in order; the run kept longest ago is let go.
    pub(crate) fn keep(&self, run_id: &str, created_at: DateTime<Utc>, through: i64, resolutions: Vec<Resolution>) {
        let mut runs = self.lock();
        runs.push_front(Known {
            run_id: run_id.to_owned(),
            created_at,
            through,
            resolutions,
        });
        runs.truncate(CACHED_RUNS);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Known>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(id: &str) -> Resolution {
        Resolution::new(
            Some(id),
            askloop::ResolutionKind::Answered,
            DateTime::<Utc>::UNIX_EPOCH,
            askloop::Author::named(askloop::Interface::Http, "ana"),
        )
    }

    #[test]
    fn a_reading_is_used_only_for_the_same_run_at_its_version_or_later() {
        let rows = ResolutionRows::default();
        let made = DateTime::<Utc>::UNIX_EPOCH;
        rows.keep("r1", made, 5, vec![answered("c1")]);
        assert!(rows.take("r2").is_none());
        let known = rows.take("r1").unwrap();
        assert!(rows.take("r1").is_none(), "taken out until kept again");
        let (resolutions, through) = known.usable_for(made, 7).unwrap();
        assert_eq!((resolutions.len(), through), (1, 5));

        rows.keep("r1", made, 5, vec![answered("c1")]);
        assert!(
            rows.take("r1").unwrap().usable_for(made, 4).is_none(),
            "read at a later version"
        );
        rows.keep("r1", made, 5, vec![answered("c1")]);
        let remade = made + chrono::Duration::seconds(1);
        assert!(
            rows.take("r1").unwrap().usable_for(remade, 9).is_none(),
            "another run of that id"
        );
    }

    #[test]
    fn only_the_runs_read_last_are_kept() {
        let rows = ResolutionRows::default();
        let made = DateTime::<Utc>::UNIX_EPOCH;
        for k in 0..=CACHED_RUNS {
            rows.keep(&format!("r{k}"), made, 1, Vec::new());
        }
        assert!(rows.take("r0").is_none());
        assert!(rows.take("r1").is_some());
        assert!(rows.take(&format!("r{CACHED_RUNS}")).is_some());
    }
}

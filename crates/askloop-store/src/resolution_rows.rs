//! A long run's resolutions past its row's (`run_resolutions`, see
//! `RESOLUTIONS_IN_ROW`), read for `get` through a small cache.
//!
//! The rows are only ever added, each keyed by the version of the write
//! that made it, and deleted only with their run. So once a run's rows up
//! to version V have been read, reading it again at version V' needs only
//! the rows with a version in (V, V'], whichever process wrote them: a
//! resume of a run with 1,000 decisions reads the one or two rows its last
//! steps added instead of all of them. Listings and sweeps read the rows
//! with the runs, in their statement (`run_select!`).

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use askloop::{Resolution, StoreError};
use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};

/// How many runs' rows are kept: the runs being resumed now. Each holds its
/// resolutions past the first 16, about 200 bytes each.
const CACHED_RUNS: usize = 32;

/// The rows of the runs read last, most recent first.
#[derive(Debug, Default)]
pub(crate) struct ResolutionRows {
    runs: Mutex<VecDeque<Cached>>,
}

#[derive(Debug)]
struct Cached {
    run_id: String,
    /// A run deleted and made again under the same id starts over: its
    /// rows are not these.
    created_at: DateTime<Utc>,
    /// Every row with a version up to this one is in `resolutions`.
    through: i64,
    resolutions: Vec<Resolution>,
}

impl ResolutionRows {
    /// The resolutions in rows of `run_id` (made at `created_at`) as of
    /// its `version`, in order, read on `conn`: only those not read before.
    pub(crate) fn read(
        &self,
        conn: &Connection,
        run_id: &str,
        created_at: DateTime<Utc>,
        version: i64,
    ) -> Result<Vec<Resolution>, StoreError> {
        let earlier = {
            let mut runs = self.lock();
            let found = runs.iter().position(|cached| cached.run_id == run_id);
            found.and_then(|at| runs.remove(at))
        };
        let (mut resolutions, through) = match earlier {
            Some(cached) if cached.created_at == created_at && cached.through <= version => {
                (cached.resolutions, cached.through)
            }
            _ => (Vec::new(), -1),
        };
        let mut select = conn
            .prepare_cached(
                "SELECT version, n, body FROM run_resolutions \
                 WHERE run_id = ? AND version > ? AND version <= ? ORDER BY version, n",
            )
            .map_err(StoreError::backend)?;
        let mut rows = select
            .query(params![run_id, through, version])
            .map_err(StoreError::backend)?;
        while let Some(row) = rows.next().map_err(StoreError::backend)? {
            let corrupt = |detail: String| StoreError::Corrupt {
                run_id: run_id.to_owned(),
                detail: format!("run_resolutions: {detail}"),
            };
            let at: i64 = row.get(0).map_err(|e| corrupt(e.to_string()))?;
            let n: i64 = row.get(1).map_err(|e| corrupt(e.to_string()))?;
            let body = row
                .get_ref(2)
                .and_then(|value| value.as_str().map_err(Into::into))
                .map_err(|e| corrupt(format!("version {at}, {n}: {e}")))?;
            let resolution = serde_json::from_str(body).map_err(|e| corrupt(format!("version {at}, {n}: {e}")))?;
            resolutions.push(resolution);
        }
        let read = resolutions.clone();
        let mut runs = self.lock();
        runs.push_front(Cached {
            run_id: run_id.to_owned(),
            created_at,
            through: version,
            resolutions,
        });
        runs.truncate(CACHED_RUNS);
        Ok(read)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Cached>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

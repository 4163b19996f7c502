//! Reading a long run's resolution rows on a read connection, through the
//! store's [`ResolutionRows`]: only the rows not read before.

use askloop::{Resolution, StoreError};
use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};

use crate::resolution_rows::ResolutionRows;

/// The resolutions in rows of `run_id` (made at `created_at`) as of its
/// `version`, in order, read on `conn`: those `kept` from earlier reads,
/// then the rows written since.
pub(super) fn read(
    kept: &ResolutionRows,
    conn: &Connection,
    run_id: &str,
    created_at: DateTime<Utc>,
    version: i64,
) -> Result<Vec<Resolution>, StoreError> {
    let (mut resolutions, through) = kept
        .take(run_id)
        .and_then(|known| known.usable_for(created_at, version))
        .unwrap_or((Vec::new(), -1));
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
    kept.keep(run_id, created_at, version, resolutions.clone());
    Ok(resolutions)
}

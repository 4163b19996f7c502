//! Turning stored columns into a [`RunRecord`] and back, the same way for
//! every SQL store.
//!
//! Each backend reads its columns into a [`StoredRun`] (JSON as text, the
//! status as text); [`StoredRun::into_record`] checks the layout version
//! first and then parses, so a row written by a newer askloop is refused
//! rather than misread, and a row that cannot be parsed is a
//! [`StoreError::Corrupt`] naming the run.

use askloop::{
    Lease, Message, PendingToolCall, RUN_SCHEMA_VERSION, Resolution, RunFailure, RunMemory, RunRecord, RunSettings,
    RunStatus, RunUpdate, StoreError, ThreadKey, ToolResult, Usage,
};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::{ColumnIndex, Decode, Row, Type};

/// The columns of one `runs` row, as read from any backend.
#[derive(Debug)]
pub(crate) struct StoredRun {
    pub(crate) run_id: String,
    pub(crate) agent_id: String,
    pub(crate) thread_id: Option<String>,
    pub(crate) status: String,
    pub(crate) version: i64,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
    pub(crate) pending: String,
    pub(crate) step_results: String,
    pub(crate) message_count: i64,
    pub(crate) steps: i64,
    pub(crate) usage: String,
    pub(crate) error: Option<String>,
    pub(crate) metadata: String,
    pub(crate) schema_version: i32,
    pub(crate) lease_owner: Option<String>,
    pub(crate) lease_until: Option<DateTime<Utc>>,
    pub(crate) failure: Option<String>,
    pub(crate) resolutions: String,
    /// The run's resolutions past its row's (`run_resolutions`, see
    /// [`RESOLUTIONS_IN_ROW`]), as one JSON array in order; `None` when it
    /// has none.
    pub(crate) resolution_rows: Option<String>,
    pub(crate) settings: String,
    /// The stored thread the run is on (`memory_resource_id`,
    /// `memory_thread_id`, `memory_context`; all NULL for none).
    pub(crate) memory_resource_id: Option<String>,
    pub(crate) memory_thread_id: Option<String>,
    pub(crate) memory_context: Option<i64>,
    /// The run's trace context (`trace_parent`), NULL for none.
    pub(crate) trace_parent: Option<String>,
    /// The resource the run belongs to beyond its thread's (`resource_id`).
    pub(crate) resource_id: Option<String>,
}

impl StoredRun {
    /// The record, or why it cannot be read.
    pub(crate) fn into_record(self) -> Result<RunRecord, StoreError> {
        check_schema_version(&self.run_id, self.schema_version)?;
        let run_id = self.run_id;
        let corrupt = |detail: String| StoreError::Corrupt {
            run_id: run_id.clone(),
            detail,
        };
        let status: RunStatus = self.status.parse().map_err(|e| corrupt(format!("status: {e}")))?;
        let pending: Vec<PendingToolCall> =
            parse_column(&self.pending).map_err(|e| corrupt(format!("pending: {e}")))?;
        let step_results: Vec<ToolResult> =
            parse_column(&self.step_results).map_err(|e| corrupt(format!("step_results: {e}")))?;
        let usage: Usage = parse_column(&self.usage).map_err(|e| corrupt(format!("usage: {e}")))?;
        let metadata = parse_column(&self.metadata).map_err(|e| corrupt(format!("metadata: {e}")))?;
        let settings: RunSettings = parse_column(&self.settings).map_err(|e| corrupt(format!("settings: {e}")))?;
        let steps =
            u32::try_from(self.steps).map_err(|_| corrupt(format!("steps: {} is not a step count", self.steps)))?;
        let lease = match (self.lease_owner, self.lease_until) {
            (Some(owner), Some(until)) => Some(Lease::new(owner, until)),
            _ => None,
        };
        // A failure this build cannot read (a kind added later), or one
        // stored before failures were typed, leaves the run readable: its
        // error text still says what happened.
        let failure = self
            .failure
            .as_deref()
            .and_then(|text| parse_column(text).ok())
            .or_else(|| self.error.map(|message| RunFailure::Other { message }));
        let mut resolutions: Vec<Resolution> =
            parse_column(&self.resolutions).map_err(|e| corrupt(format!("resolutions: {e}")))?;
        if let Some(rows) = &self.resolution_rows {
            resolutions.extend(parse_resolution_rows(&run_id, rows)?);
        }
        if self.message_count < 0 {
            return Err(corrupt(format!("message_count: {} is negative", self.message_count)));
        }
        let memory = match (self.memory_resource_id, self.memory_thread_id, self.memory_context) {
            (None, None, None) => None,
            (Some(resource_id), Some(thread_id), Some(context)) if context >= 0 => Some(RunMemory {
                key: ThreadKey::new(resource_id, thread_id),
                context,
            }),
            (resource, thread, context) => {
                return Err(corrupt(format!(
                    "memory: a run's thread needs its resource, its id and a context count, found {resource:?}, {thread:?}, {context:?}"
                )));
            }
        };
        // Status and pending calls are the machines' to change: a store
        // only sets them as it read them.
        let mut record = RunRecord::default().with_calls(status, pending);
        record.run_id = run_id;
        record.agent_id = self.agent_id;
        record.thread_id = self.thread_id;
        record.memory = memory;
        record.resource_id = self.resource_id;
        record.version = self.version;
        record.created_at = self.created_at;
        record.updated_at = self.updated_at;
        record.step_results = step_results;
        record.message_count = self.message_count;
        record.steps = steps;
        record.usage = usage;
        record.metadata = metadata;
        record.settings = settings;
        record.lease = lease;
        record.failure = failure;
        record.resolutions = resolutions;
        record.trace_parent = self.trace_parent;
        Ok(record)
    }
}

/// How many resolutions a run's row holds (its `resolutions` column). Each
/// later one is a row of its own in `run_resolutions`, so a step of a long
/// run writes only its own decisions, not every earlier one again.
pub(crate) const RESOLUTIONS_IN_ROW: i64 = 16;

/// The layout of a run with resolutions in `run_resolutions` (see
/// [`RUN_SCHEMA_VERSION`]): a write that stores such a row raises the run to
/// it, and a run at it or newer stores every new resolution there, never in
/// its row, so that the rows always come after the column's.
pub(crate) const RESOLUTION_ROWS_LAYOUT: i32 = 7;

/// Refuses a row written with a newer layout than this build reads.
pub(crate) fn check_schema_version(run_id: &str, found: i32) -> Result<(), StoreError> {
    if found > RUN_SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            run_id: run_id.to_owned(),
            found,
            supported: RUN_SCHEMA_VERSION,
        });
    }
    Ok(())
}

fn parse_column<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    serde_json::from_str(text)
}

/// Parses `run_resolutions` rows read together as one JSON array of their
/// bodies (`resolution_rows`).
pub(crate) fn parse_resolution_rows(run_id: &str, rows: &str) -> Result<Vec<Resolution>, StoreError> {
    parse_column(rows).map_err(|e| StoreError::Corrupt {
        run_id: run_id.to_owned(),
        detail: format!("run_resolutions: {e}"),
    })
}

/// Parses one stored message body; `seq` names it in the error.
pub(crate) fn parse_message(run_id: &str, seq: i64, body: &str) -> Result<Message, StoreError> {
    serde_json::from_str(body).map_err(|e| StoreError::Corrupt {
        run_id: run_id.to_owned(),
        detail: format!("message {seq}: {e}"),
    })
}

/// A value serialised for a JSON column. Serialising askloop's own types
/// cannot fail (their maps have string keys), but if it ever did the write is
/// refused with the reason rather than storing something unreadable.
pub(crate) fn to_json<T: Serialize + ?Sized>(run_id: &str, what: &str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt {
        run_id: run_id.to_owned(),
        detail: format!("{what} could not be serialised: {e}"),
    })
}

/// The JSON columns of a run as they are written.
#[derive(Debug)]
pub(crate) struct JsonColumns {
    pub(crate) pending: String,
    pub(crate) step_results: String,
    pub(crate) usage: String,
    pub(crate) failure: Option<String>,
    /// For a new run, all its resolutions; for an update, those it
    /// appends, if any, as one JSON array.
    pub(crate) resolutions: Option<String>,
    /// For an update, each resolution it appends on its own: the rows of
    /// `run_resolutions` when the run's row holds no more.
    pub(crate) resolution_bodies: Vec<String>,
    /// The earliest time limit of the pending calls.
    pub(crate) expires_at: Option<DateTime<Utc>>,
}

impl JsonColumns {
    pub(crate) fn of_record(run: &RunRecord) -> Result<Self, StoreError> {
        let mut json = Self::build(
            &run.run_id,
            run.stored_calls(),
            &run.step_results,
            &run.usage,
            run.failure.as_ref(),
        )?;
        json.resolutions = Some(to_json(&run.run_id, "resolutions", &run.resolutions)?);
        Ok(json)
    }

    pub(crate) fn of_update(update: &RunUpdate<'_>) -> Result<Self, StoreError> {
        let mut json = Self::build(
            update.run_id,
            update.pending,
            update.step_results,
            &update.usage,
            update.failure,
        )?;
        json.resolution_bodies = update
            .resolutions
            .iter()
            .map(|resolution| to_json(update.run_id, "a resolution", resolution))
            .collect::<Result<_, _>>()?;
        json.resolutions =
            (!json.resolution_bodies.is_empty()).then(|| format!("[{}]", json.resolution_bodies.join(",")));
        Ok(json)
    }

    fn build(
        run_id: &str,
        pending: &[PendingToolCall],
        step_results: &[ToolResult],
        usage: &Usage,
        failure: Option<&RunFailure>,
    ) -> Result<Self, StoreError> {
        Ok(JsonColumns {
            pending: to_json(run_id, "pending", pending)?,
            step_results: to_json(run_id, "step_results", step_results)?,
            usage: to_json(run_id, "usage", usage)?,
            // A failure known only by its text stays only text: the error
            // column holds it, and the row reads as it was written.
            failure: failure
                .filter(|f| !matches!(f, RunFailure::Other { .. }))
                .map(|f| to_json(run_id, "failure", f))
                .transpose()?,
            resolutions: None,
            resolution_bodies: Vec::new(),
            expires_at: pending.iter().filter_map(|p| p.expires_at).min(),
        })
    }
}

/// Message bodies to append, serialised.
pub(crate) fn message_bodies(run_id: &str, messages: &[Message]) -> Result<Vec<String>, StoreError> {
    messages.iter().map(|m| to_json(run_id, "a message", m)).collect()
}

/// The status and version of a row, read to say why a compare-and-set
/// changed nothing.
#[derive(Debug)]
pub(crate) struct RowState {
    pub(crate) status: String,
    pub(crate) version: i64,
    pub(crate) schema_version: i32,
}

impl RowState {
    /// Reads `status`, `version` and `schema_version` from a row of any backend.
    pub(crate) fn from_row<R>(row: &R) -> Result<Self, StoreError>
    where
        R: Row,
        for<'c> &'c str: ColumnIndex<R>,
        for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
        for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
        for<'r> i32: Decode<'r, R::Database> + Type<R::Database>,
    {
        Ok(RowState {
            status: row.try_get("status").map_err(StoreError::backend)?,
            version: row.try_get("version").map_err(StoreError::backend)?,
            schema_version: row.try_get("schema_version").map_err(StoreError::backend)?,
        })
    }
}

/// Why a compare-and-set on `run_id` matched no row: the run is missing,
/// newer than this build, or was changed by someone else.
pub(crate) fn explain_missed_write(run_id: &str, expected_version: i64, state: Option<RowState>) -> StoreError {
    match state {
        None => StoreError::NotFound {
            run_id: run_id.to_owned(),
        },
        Some(state) => match check_schema_version(run_id, state.schema_version) {
            Err(newer) => newer,
            Ok(()) => {
                tracing::debug!(
                    run_id,
                    expected_version,
                    found_version = state.version,
                    status = %state.status,
                    "compare-and-set lost"
                );
                StoreError::Conflict {
                    run_id: run_id.to_owned(),
                    expected_version,
                }
            }
        },
    }
}

/// The SQL condition "the run may have resolutions in rows of their own":
/// it is at [`RESOLUTION_ROWS_LAYOUT`] or newer. Reads of runs read those
/// rows only under it.
macro_rules! resolution_rows_condition {
    () => {
        "schema_version >= 7"
    };
}
pub(crate) use resolution_rows_condition;

/// The finished statuses, which `prune` deletes.
#[cfg(test)]
const FINISHED: [RunStatus; 3] = [RunStatus::Completed, RunStatus::Failed, RunStatus::Cancelled];

/// The SQL condition "the run is finished", written out as PostgreSQL's
/// partial index on finished runs (migration 5) spells it: a database uses
/// that index only for a query that states the index's condition itself.
macro_rules! finished_condition {
    () => {
        "status IN ('completed', 'failed', 'cancelled')"
    };
}
pub(crate) use finished_condition;

/// The same condition as SQLite's index on finished runs spells it since its
/// migration 12: comparisons, because SQLite builds a temporary table for a
/// constant `IN` list of more than two values at every write that checks
/// the index's condition.
macro_rules! sqlite_finished_condition {
    () => {
        "(status = 'completed' OR status = 'failed' OR status = 'cancelled')"
    };
}
pub(crate) use sqlite_finished_condition;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_finished_condition_names_every_finished_status_as_stored() {
        let listed = FINISHED.map(|status| format!("'{}'", status.as_str())).join(", ");
        assert_eq!(finished_condition!(), format!("status IN ({listed})"));
        let compared = FINISHED
            .map(|status| format!("status = '{}'", status.as_str()))
            .join(" OR ");
        assert_eq!(sqlite_finished_condition!(), format!("({compared})"));
        let unfinished = [RunStatus::Running, RunStatus::Suspended];
        for condition in [finished_condition!(), sqlite_finished_condition!()] {
            assert!(
                unfinished
                    .iter()
                    .all(|s| !condition.contains(&format!("'{}'", s.as_str()))),
                "{condition}"
            );
        }
    }

    fn stored() -> StoredRun {
        StoredRun {
            run_id: "r1".into(),
            agent_id: "a".into(),
            thread_id: None,
            status: "suspended".into(),
            version: 3,
            created_at: DateTime::<Utc>::UNIX_EPOCH,
            updated_at: DateTime::<Utc>::UNIX_EPOCH,
            pending: "[]".into(),
            step_results: "[]".into(),
            message_count: 2,
            steps: 1,
            usage: r#"{"inputTokens":1,"outputTokens":2,"totalTokens":3}"#.into(),
            error: None,
            metadata: "null".into(),
            schema_version: RUN_SCHEMA_VERSION,
            lease_owner: None,
            lease_until: None,
            failure: None,
            resolutions: "[]".into(),
            resolution_rows: None,
            settings: "{}".into(),
            memory_resource_id: None,
            memory_thread_id: None,
            memory_context: None,
            trace_parent: None,
            resource_id: None,
        }
    }

    #[test]
    fn a_runs_thread_reads_back_whole_and_a_part_of_one_is_corrupt() {
        let on_thread = StoredRun {
            memory_resource_id: Some("ana".into()),
            memory_thread_id: Some("t1".into()),
            memory_context: Some(4),
            ..stored()
        };
        let memory = on_thread.into_record().unwrap().memory.unwrap();
        assert_eq!((memory.key, memory.context), (ThreadKey::new("ana", "t1"), 4));
        let partial = StoredRun {
            memory_resource_id: Some("ana".into()),
            ..stored()
        };
        let err = partial.into_record().unwrap_err().to_string();
        assert!(err.contains("memory") && err.contains("r1"), "{err}");
    }

    #[test]
    fn the_resolution_rows_condition_names_their_layout() {
        assert_eq!(
            resolution_rows_condition!(),
            format!("schema_version >= {RESOLUTION_ROWS_LAYOUT}")
        );
    }

    #[test]
    fn a_runs_resolutions_are_its_rows_then_its_own_rows_and_unreadable_ones_are_corrupt() {
        let answered = |call: &str| {
            format!(r#"{{"toolCallId":"{call}","kind":"answered","at":"2026-01-02T03:04:05Z","via":"cli"}}"#)
        };
        let row = StoredRun {
            resolutions: format!("[{}]", answered("c1")),
            resolution_rows: Some(format!("[{},{}]", answered("c2"), answered("c3"))),
            ..stored()
        };
        let calls: Vec<_> = row
            .into_record()
            .unwrap()
            .resolutions
            .into_iter()
            .map(|r| r.tool_call_id.unwrap())
            .collect();
        assert_eq!(calls, ["c1", "c2", "c3"]);
        let damaged = StoredRun {
            resolution_rows: Some(r#"[{"kind":"answered"}]"#.into()),
            ..stored()
        };
        match damaged.into_record() {
            Err(StoreError::Corrupt { run_id, detail }) => {
                assert_eq!(run_id, "r1");
                assert!(detail.starts_with("run_resolutions"), "{detail}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn a_readable_row_becomes_its_record() {
        let record = stored().into_record().unwrap();
        assert_eq!(record.status(), RunStatus::Suspended);
        assert_eq!(record.usage.total_tokens, 3);
        assert_eq!(record.steps, 1);
    }

    #[test]
    fn a_newer_layout_is_refused_before_anything_is_parsed() {
        let row = StoredRun {
            schema_version: RUN_SCHEMA_VERSION + 1,
            pending: "not json at all".into(),
            ..stored()
        };
        match row.into_record() {
            Err(StoreError::NewerSchema { run_id, found, .. }) => {
                assert_eq!(run_id, "r1");
                assert_eq!(found, RUN_SCHEMA_VERSION + 1);
            }
            other => panic!("expected NewerSchema, got {other:?}"),
        }
    }

    #[test]
    fn an_unparsable_column_is_corrupt_naming_the_run_and_the_column() {
        let row = StoredRun {
            step_results: "{".into(),
            ..stored()
        };
        match row.into_record() {
            Err(StoreError::Corrupt { run_id, detail }) => {
                assert_eq!(run_id, "r1");
                assert!(detail.starts_with("step_results"), "{detail}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn settings_read_back_as_written_and_unreadable_ones_are_corrupt_naming_the_column() {
        let row = StoredRun {
            settings: r#"{"maxSteps":2,"requireToolApproval":true}"#.into(),
            ..stored()
        };
        let settings = row.into_record().unwrap().settings;
        assert_eq!(
            settings,
            askloop::RunSettings::default().max_steps(2).require_tool_approval()
        );
        let row = StoredRun {
            settings: r#"{"maxSteps":"two"}"#.into(),
            ..stored()
        };
        match row.into_record() {
            Err(StoreError::Corrupt { detail, .. }) => assert!(detail.starts_with("settings"), "{detail}"),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn an_unknown_status_or_negative_steps_is_corrupt() {
        let bad_status = StoredRun {
            status: "sleeping".into(),
            ..stored()
        };
        assert!(matches!(bad_status.into_record(), Err(StoreError::Corrupt { .. })));
        let bad_steps = StoredRun { steps: -1, ..stored() };
        assert!(matches!(bad_steps.into_record(), Err(StoreError::Corrupt { .. })));
    }

    #[test]
    fn a_missed_write_is_explained_by_what_the_row_holds() {
        assert!(matches!(
            explain_missed_write("r", 1, None),
            StoreError::NotFound { .. }
        ));
        let changed = RowState {
            status: "running".into(),
            version: 2,
            schema_version: RUN_SCHEMA_VERSION,
        };
        assert!(explain_missed_write("r", 1, Some(changed)).is_conflict());
        let newer = RowState {
            status: "suspended".into(),
            version: 1,
            schema_version: RUN_SCHEMA_VERSION + 1,
        };
        assert!(matches!(
            explain_missed_write("r", 1, Some(newer)),
            StoreError::NewerSchema { .. }
        ));
    }
}

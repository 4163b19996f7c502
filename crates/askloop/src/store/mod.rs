//! Where runs live between steps: the [`RunStore`] trait and [`MemoryStore`].
//!
//! The trait is shaped for SQL: a run is one row (status, version, pending
//! tool calls) plus an append-only list of messages keyed by (run id,
//! sequence). A step writes the row and only its new messages; claiming a
//! suspended run is one compare-and-set on (status, version), so exactly one
//! resume wins across processes. The durable stores (SQLite, PostgreSQL) are
//! in the `askloop-store` crate and pass the same conformance suite.

mod changes;
mod grant;
mod layer;
mod link;
mod memory;
mod outbox;
mod record;
mod resolution;
mod settings;
mod thread;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{Message, ToolResult, Usage};

pub use changes::{ChangeBroadcast, RunChange, RunChanges};
pub use grant::{Always, Grant, GrantNote, GrantQuery, GrantScope, GrantStore};
pub use layer::{Layered, Next, StoreLayer, StoreRequest, StoreResponse};
pub use link::{AnswerLink, LinkState, LinkStore};
pub use memory::MemoryStore;
pub use outbox::{Delivery, DeliveryOutcome, DeliveryState, EventType, Notice, OutboxMessage, Subscription};
pub(crate) use outbox::{EventRun, messages_for};
pub use record::RunRecord;
pub use resolution::{ArgumentsEdit, Author, Interface, Resolution, ResolutionKind, ResolutionOnWire};
pub use settings::RunSettings;
pub use thread::{
    RunMemory, Thread, ThreadDeletion, ThreadEdit, ThreadKey, ThreadMessage, ThreadQuery, ThreadStore, call_results,
    context_messages,
};

/// The newest layout of stored runs this build reads. A store refuses rows
/// written with a newer one rather than misread them. Each row is written
/// with the oldest layout that holds it ([`RunRecord::schema_version`]), so
/// an older build goes on reading every run it can read correctly:
///
/// - 1: a run started without [`RunSettings`];
/// - 2: a run with settings. A build that does not know them would drive
///   the run past its limits (every tool call waiting for approval, fewer
///   steps), so it must refuse the run rather than read it;
/// - 3: a run on a thread ([`RunMemory`]). A build that does not know
///   threads would drive it without appending its messages to the thread.
/// - 4: a run with a call approved with edited arguments
///   ([`Resolution::edit`]), or decided by an approval rule
///   ([`Interface::Rule`]). A build that does not know edits would read
///   the approval as one of the model's arguments, and a recovery would run
///   the call again with them; one that does not know rules could not read
///   the run's record at all. A write that records either raises the row's
///   layout to 4 ([`RunUpdate::needs_layout`]).
/// - 5: a run with an approval that sticks ([`Resolution::grant`]): one
///   that made a grant, or a call approved by one ([`Interface::Grant`]).
///   A build that does not know grants could not read the run's record.
///   So is a run with a call resolved through an answer link
///   ([`Interface::Link`]).
/// - 6: a run with a call decided in Slack ([`Interface::Slack`]). A build
///   that does not know Slack could not read the run's record.
/// - 7: a run whose resolutions outgrew its row. The SQL stores keep a
///   run's first resolutions in its row and each later one in a row of its
///   own, so that a step of a long run appends one small row instead of
///   rewriting every earlier decision. A build that does not know those
///   rows would read only the first resolutions: it would drive a resumed
///   call without its edit, or take a call resolved as expired for one
///   still waiting. The write that stores a run's first such row raises
///   the run to 7.
/// - 8: a run on no thread that belongs to a resource
///   ([`RunRecord::resource_id`]: it was started by a caller walled to
///   resources). A build that does not know it would show the run to every
///   caller of its agent, other people included; it must leave it out.
///   A run on a thread is walled by its thread in every build, so its
///   resource raises nothing.
///
/// A run's trace context ([`RunRecord::trace_parent`]) raises no layout:
/// it is advisory. A build that does not know it reads and drives the run
/// exactly as stored; only its drives of the run start traces of their own
/// instead of continuing the run's.
pub const RUN_SCHEMA_VERSION: i32 = 8;

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum RunStatus {
    /// A process is driving it now.
    Running,
    /// It waits for answers or approvals.
    Suspended,
    /// It finished.
    Completed,
    /// It failed; the error is stored.
    Failed,
    /// Someone cancelled it.
    Cancelled,
}

impl RunStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Suspended => "suspended",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the run is over (completed, failed or cancelled).
    pub fn is_finished(self) -> bool {
        matches!(self, RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RunStatus {
    type Err = crate::unknown_name::UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const ALL: [RunStatus; 5] = [
            RunStatus::Running,
            RunStatus::Suspended,
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
        ];
        ALL.into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| crate::unknown_name::UnknownName::new("run status", s, ALL.map(RunStatus::as_str)))
    }
}

/// Why a tool call waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PendingKind {
    /// The tool suspended itself (e.g. `ask_user` asked a question).
    Suspended,
    /// The tool needs approval before it runs.
    Approval,
}

/// A tool call the run waits on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingToolCall {
    /// The call's id.
    pub tool_call_id: String,
    /// The tool's id.
    pub tool_name: String,
    /// The call's input (shared with the call it waits on).
    pub args: Arc<Value>,
    /// Why it waits.
    pub kind: PendingKind,
    /// What the tool suspended with (for `kind: suspended`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend_payload: Option<Arc<Value>>,
    /// JSON Schema of the accepted resume data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_schema: Option<Arc<Value>>,
    /// When the call stops waiting, unanswered, if it has a time limit:
    /// then a question is resolved as expired and an approval as declined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// When its tool started running after an approval or an answer, for
    /// a tool that must not run twice (see `Tool::idempotent`): stored with
    /// the claim that takes the run, before the tool runs. A run whose
    /// process died meanwhile has the call marked and no result; recovery
    /// then tells the model it was interrupted instead of asking again and
    /// running it twice. `None` while the call waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
}

impl PendingToolCall {
    /// Whether its time limit has passed at `now`.
    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

/// A hold on a running run: its `owner` drives it and no one else may take
/// it before `until`. The owner renews it while it works; once it has run
/// out, any process may take the run over ([`RunStore::reclaim`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// Who holds it (an id unique to one driver of one process).
    pub owner: String,
    /// When it runs out.
    pub until: DateTime<Utc>,
}

impl Lease {
    /// A lease held by `owner` until `until`. The time is kept to the
    /// microsecond, as every store keeps it.
    pub fn new(owner: impl Into<String>, until: DateTime<Utc>) -> Self {
        let until = DateTime::from_timestamp_micros(until.timestamp_micros()).unwrap_or(until);
        Lease {
            owner: owner.into(),
            until,
        }
    }

    /// Whether it has run out at `now`.
    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        self.until <= now
    }
}

/// Why a run failed, as stored with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
#[non_exhaustive]
pub enum RunFailure {
    /// The model could not be reached or failed.
    Model {
        /// Whether trying again later may work (unreachable, 5xx, rate
        /// limited), as opposed to a refused request or a bad key.
        transient: bool,
        /// What the provider said.
        message: String,
    },
    /// The run took more model calls than the agent allows.
    StepLimit {
        /// The limit.
        limit: u32,
    },
    /// The store failed while the run was driven.
    Store {
        /// Whether trying again later may work (database busy, closed,
        /// unreachable).
        transient: bool,
        /// What the store said.
        message: String,
    },
    /// The process driving the run stopped before the run was done and the
    /// run could not be continued.
    Interrupted {
        /// What happened.
        message: String,
    },
    /// The stored run was not in a state its next step fits (a damaged
    /// row, or an agent that lost a tool the run waits on).
    Broken {
        /// What was wrong.
        message: String,
    },
    /// A failure stored only as its text: by a build that knew kinds of
    /// failure this one does not, or by one from before failures were
    /// typed. Such a run may be retried, as it always could.
    Other {
        /// What the stored text says.
        message: String,
    },
}

impl RunFailure {
    /// Whether the run may be continued from its last stored step with
    /// some hope that it works this time (see `Agent::retry_run`).
    pub fn is_transient(&self) -> bool {
        match self {
            RunFailure::Model { transient, .. } | RunFailure::Store { transient, .. } => *transient,
            RunFailure::Interrupted { .. } | RunFailure::Other { .. } => true,
            RunFailure::StepLimit { .. } | RunFailure::Broken { .. } => false,
        }
    }

    /// What happened, for people.
    pub fn message(&self) -> String {
        match self {
            RunFailure::Model { message, .. }
            | RunFailure::Store { message, .. }
            | RunFailure::Interrupted { message }
            | RunFailure::Broken { message }
            | RunFailure::Other { message } => message.clone(),
            RunFailure::StepLimit { limit } => format!("reached the step limit of {limit} model calls"),
        }
    }
}

impl fmt::Display for RunFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

/// One write of a run: the new row state and the messages to append, applied
/// only if the stored version is still `expected_version`.
#[derive(Debug, Clone, Copy)]
pub struct RunUpdate<'a> {
    /// The run.
    pub run_id: &'a str,
    /// The version the writer read; the write fails with
    /// [`StoreError::Conflict`] if it changed.
    pub expected_version: i64,
    /// The new status.
    pub status: RunStatus,
    /// The new pending calls.
    pub pending: &'a [PendingToolCall],
    /// The new step results.
    pub step_results: &'a [ToolResult],
    /// Messages to append, numbered from the stored `message_count`.
    pub append: &'a [Message],
    /// The new step count.
    pub steps: u32,
    /// The new usage total.
    pub usage: Usage,
    /// The error, for a failed run.
    pub error: Option<&'a str>,
    /// Why, typed, for a failed run.
    pub failure: Option<&'a RunFailure>,
    /// The writer's lease, for a run that stays `running` (a run in any
    /// other status holds none: pass `None`).
    pub lease: Option<&'a Lease>,
    /// The resolutions this write makes (an answer, a decline, an
    /// expiry...: several when decisions for several calls are applied
    /// together), appended in this order to the run's
    /// [`RunRecord::resolutions`] in the same write.
    pub resolutions: &'a [Resolution],
    /// Notifications this write raises (a question now waiting, a call
    /// resolved), stored in the same write: see [`OutboxMessage`]. Empty
    /// for an agent with no subscriptions.
    pub outbox: &'a [OutboxMessage],
    /// Approvals that stick, made by the approvals this write records,
    /// stored in the same write (see [`Grant`]): a write that fails stores
    /// none of them. Empty but for such an approval.
    pub grants: &'a [Grant],
}

impl RunUpdate<'_> {
    /// The oldest layout of stored runs (see [`RUN_SCHEMA_VERSION`]) that
    /// holds what this write adds: a store raises the row's layout to it
    /// (never lowers it), so that an older build refuses the run from then
    /// on instead of misreading it.
    pub fn needs_layout(&self) -> i32 {
        self.resolutions.iter().map(Resolution::layout).max().unwrap_or(1)
    }
}

/// A place in a listing of runs ordered by a time, then by id (to order
/// runs with the same microsecond): the last run read. The next page
/// starts after it. Runs whose lease ran out are listed by their last
/// write ([`RunCursor::after`]); runs with a question past its time limit
/// by their earliest time limit ([`RunCursor::after_limit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCursor {
    /// The run's time in the listing's order.
    pub at: DateTime<Utc>,
    /// The run's id.
    pub run_id: String,
}

impl RunCursor {
    /// The place just after `run` in a listing by last write.
    pub fn after(run: &RunRecord) -> RunCursor {
        RunCursor {
            at: run.updated_at,
            run_id: run.run_id.clone(),
        }
    }

    /// The place just after `run` in a listing by earliest time limit (a
    /// run without one sorts by its last write).
    pub fn after_limit(run: &RunRecord) -> RunCursor {
        RunCursor {
            at: run.earliest_limit().unwrap_or(run.updated_at),
            run_id: run.run_id.clone(),
        }
    }

    /// Whether a run at `at` with id `run_id` comes after this place.
    pub fn precedes(&self, at: DateTime<Utc>, run_id: &str) -> bool {
        (at, run_id) > (self.at, self.run_id.as_str())
    }

    /// The place just after `run` in a listing of runs newest first (by
    /// creation, then by id, both descending), as [`RunStore::list`] lists
    /// them: for [`RunQuery::after`].
    pub fn after_created(run: &RunRecord) -> RunCursor {
        RunCursor {
            at: run.created_at,
            run_id: run.run_id.clone(),
        }
    }

    /// Whether this place comes before a run created at `created_at` with
    /// id `run_id` in a listing newest first (the run is older, or as old
    /// with a smaller id).
    pub fn precedes_in_listing(&self, created_at: DateTime<Utc>, run_id: &str) -> bool {
        (created_at, run_id) < (self.at, self.run_id.as_str())
    }
}

/// Pages through every run nobody attends to at one moment, a bounded page
/// at a time: the runs whose lease ran out ([`ExpiredRuns::new`]), or the
/// suspended runs with a call past its time limit
/// ([`ExpiredRuns::time_limits`]). Keyset paging on [`RunCursor`], so a page
/// costs the same however far in it is, runs resolved meanwhile are not
/// read twice, and no run is crowded out by runs before it that nobody
/// takes (those of an agent no process knows).
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use askloop::{Clock, ExpiredRuns, MemoryStore, SystemClock};
/// let store = MemoryStore::new();
/// let mut pages = ExpiredRuns::new(&store, SystemClock.now(), 500);
/// while let Some(page) = pages.next_page().await.unwrap() {
///     for run in page {
///         println!("{} has no driver", run.run_id);
///     }
/// }
/// # });
/// ```
#[derive(Debug)]
pub struct ExpiredRuns<'a> {
    store: &'a dyn RunStore,
    now: DateTime<Utc>,
    page: u32,
    after: Option<RunCursor>,
    done: bool,
    /// Time limits rather than leases.
    limits: bool,
}

impl<'a> ExpiredRuns<'a> {
    /// Runs of `store` whose lease ran out at `now`, `page` at a time (at
    /// least one).
    pub fn new(store: &'a dyn RunStore, now: DateTime<Utc>, page: u32) -> Self {
        ExpiredRuns {
            store,
            now,
            page: page.max(1),
            after: None,
            done: false,
            limits: false,
        }
    }

    /// Suspended runs of `store` with a pending call whose time limit
    /// passed at `now`, `page` at a time (at least one).
    pub fn time_limits(store: &'a dyn RunStore, now: DateTime<Utc>, page: u32) -> Self {
        ExpiredRuns {
            limits: true,
            ..Self::new(store, now, page)
        }
    }

    /// The next page, or `None` once every page was read.
    pub async fn next_page(&mut self) -> Result<Option<Vec<RunRecord>>, StoreError> {
        if self.done {
            return Ok(None);
        }
        let after = self.after.as_ref();
        let runs = if self.limits {
            self.store.expiring(self.now, after, self.page).await?
        } else {
            self.store.expired(self.now, after, self.page).await?
        };
        self.done = runs.len() < self.page as usize;
        match runs.last() {
            Some(last) => {
                self.after = Some(if self.limits {
                    RunCursor::after_limit(last)
                } else {
                    RunCursor::after(last)
                });
                Ok(Some(runs))
            }
            None => {
                self.done = true;
                Ok(None)
            }
        }
    }
}

/// Which runs to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunQuery {
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only runs of this agent.
    pub agent_id: Option<String>,
    /// Only runs on this stored thread ([`RunRecord::memory`]); with an
    /// empty `thread_id`, runs on any thread of the resource.
    pub thread: Option<ThreadKey>,
    /// Only runs that belong to one of these resources ([`RunRecord::resource`]:
    /// on one of their threads, or started for one of them on no thread);
    /// `None`: any run. What a caller walled to some resources may list:
    /// another resource's runs, and runs of no resource, are not listed,
    /// nor counted.
    pub resources: Option<Vec<String>>,
    /// At most this many (all when `None`).
    pub limit: Option<u32>,
    /// Skip this many (for paging).
    pub offset: u32,
    /// Only runs listed after this place (see [`RunCursor::after_created`]):
    /// the next page after a page that ended with that run. Unlike
    /// `offset`, the stores seek to it in their index, so a page deep in a
    /// long listing costs what the first one does, and runs created or
    /// gone since the previous page shift nothing.
    pub after: Option<RunCursor>,
}

/// What can go wrong in a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No run has this id.
    #[error("run {run_id} not found")]
    NotFound {
        /// The id asked for.
        run_id: String,
    },
    /// A run with this id already exists.
    #[error("run {run_id} already exists")]
    AlreadyExists {
        /// The id.
        run_id: String,
    },
    /// The run changed since it was read (another process resumed or wrote
    /// it first).
    #[error("run {run_id} was changed by someone else (expected version {expected_version})")]
    Conflict {
        /// The run.
        run_id: String,
        /// The version the writer expected.
        expected_version: i64,
    },
    /// A stored row could not be read.
    #[error("run {run_id} is stored corrupt: {detail}")]
    Corrupt {
        /// The run.
        run_id: String,
        /// What was wrong.
        detail: String,
    },
    /// A row was written by a newer askloop.
    #[error(
        "run {run_id} was stored by a newer askloop (layout version {found}, this build reads up to {supported}); upgrade askloop to read it"
    )]
    NewerSchema {
        /// The run.
        run_id: String,
        /// The row's layout version.
        found: i32,
        /// The newest this build reads.
        supported: i32,
    },
    /// The store could not be opened from what was given: the location
    /// itself is malformed or names no kind of store askloop has.
    #[error("{0}")]
    InvalidLocation(String),
    /// The database at a well-formed location cannot be used: it does not
    /// exist (and was not to be created), it is not a database, it cannot
    /// be written, its disk is full... [`DatabaseFault`] says which.
    #[error("cannot use the database {location}: {detail}")]
    Unusable {
        /// The database, as a person would find it (an absolute file path,
        /// or a URL without its password).
        location: String,
        /// What is wrong with it.
        fault: DatabaseFault,
        /// The same, for people, with the database's own words where they
        /// help (e.g. "disk full (database or disk is full)").
        detail: String,
    },
    /// The lease on a running run is no longer this owner's: it ran out
    /// and another process took the run over, or the run stopped running.
    #[error(
        "run {run_id} is no longer held by {owner}: its lease ran out and it was taken over, or it stopped running"
    )]
    LeaseLost {
        /// The run.
        run_id: String,
        /// The owner that lost it.
        owner: String,
    },
    /// A delivery is no longer held by this sender: its lease ran out and
    /// another sender claimed it, or it was finished already.
    #[error(
        "delivery {id} is no longer held by {owner}: its lease ran out and another sender took it, or it was finished"
    )]
    DeliveryLost {
        /// The delivery.
        id: String,
        /// The sender that lost it.
        owner: String,
    },
    /// A thread with this key exists already.
    #[error("thread {thread_id} of resource {resource_id} already exists")]
    ThreadExists {
        /// The resource.
        resource_id: String,
        /// The thread.
        thread_id: String,
    },
    /// A stored approval that sticks could not be read.
    #[error("grant {id} is stored corrupt: {detail}")]
    GrantCorrupt {
        /// The grant.
        id: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A stored thread row could not be read.
    #[error("thread {thread_id} of resource {resource_id} is stored corrupt: {detail}")]
    ThreadCorrupt {
        /// The resource.
        resource_id: String,
        /// The thread.
        thread_id: String,
        /// What was wrong.
        detail: String,
    },
    /// The store keeps no threads (see [`RunStore::thread_store`]).
    #[error("this store keeps no threads")]
    NoThreads,
    /// The store keeps no standing approvals (see [`RunStore::grant_store`]).
    #[error("this store keeps no standing approvals (grants)")]
    NoGrants,
    /// The store was closed; nothing more can be read or written through it.
    #[error("the store is closed")]
    Closed,
    /// The database is busy: another connection holds the lock longer than
    /// the store waits. Trying again later may work.
    #[error("the database {location} is busy: {detail}")]
    Busy {
        /// The database.
        location: String,
        /// What the database said.
        detail: String,
    },
    /// The database failed.
    #[error("store error: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    /// Wraps a database error.
    pub fn backend(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        StoreError::Backend(Box::new(err))
    }

    /// Whether this is a lost compare-and-set.
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }

    /// Whether trying the same operation again later may work: the
    /// database was busy, closed, unreachable or failed for a reason not
    /// about this run. A refusal about the run itself (not found, conflict,
    /// corrupt, newer) or about the location is not.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Busy { .. } | StoreError::Closed | StoreError::Backend(_) => true,
            StoreError::Unusable { fault, .. } => *fault == DatabaseFault::DiskFull,
            _ => false,
        }
    }

    /// What kind of failure it is, for a host that answers it in its own
    /// words; decided here for every variant, without a wildcard.
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            StoreError::NotFound { .. } => StoreErrorKind::NotFound,
            StoreError::AlreadyExists { .. } | StoreError::ThreadExists { .. } | StoreError::Conflict { .. } => {
                StoreErrorKind::Conflict
            }
            StoreError::Corrupt { .. }
            | StoreError::NewerSchema { .. }
            | StoreError::ThreadCorrupt { .. }
            | StoreError::GrantCorrupt { .. } => StoreErrorKind::Unreadable,
            StoreError::NoThreads | StoreError::NoGrants => StoreErrorKind::Unsupported,
            StoreError::InvalidLocation(_)
            | StoreError::Unusable { .. }
            | StoreError::LeaseLost { .. }
            | StoreError::DeliveryLost { .. }
            | StoreError::Closed
            | StoreError::Busy { .. }
            | StoreError::Backend(_) => StoreErrorKind::Unavailable,
        }
    }

    /// A stable, machine-readable name of the error (`run_exists`,
    /// `run_unreadable`, `store_unavailable`, ...), as the HTTP API's
    /// `error.code` gives it.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::NotFound { .. } => "unknown_run",
            StoreError::AlreadyExists { .. } => "run_exists",
            StoreError::Conflict { .. } => "conflict",
            StoreError::ThreadExists { .. } => "thread_exists",
            StoreError::Corrupt { .. } | StoreError::NewerSchema { .. } => "run_unreadable",
            StoreError::ThreadCorrupt { .. } => "thread_unreadable",
            StoreError::GrantCorrupt { .. } => "grant_unreadable",
            StoreError::NoThreads => "no_threads",
            StoreError::NoGrants => "no_grants",
            StoreError::InvalidLocation(_)
            | StoreError::Unusable { .. }
            | StoreError::LeaseLost { .. }
            | StoreError::DeliveryLost { .. }
            | StoreError::Closed
            | StoreError::Busy { .. }
            | StoreError::Backend(_) => "store_unavailable",
        }
    }

    /// What is wrong with the database, when the store could tell.
    pub fn fault(&self) -> Option<DatabaseFault> {
        match self {
            StoreError::Unusable { fault, .. } => Some(*fault),
            _ => None,
        }
    }
}

/// What kind of failure a [`StoreError`] is ([`StoreError::kind`]). Not
/// `#[non_exhaustive]` on purpose: a host matches every kind, so a kind
/// added later is a compile error there rather than an answer guessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreErrorKind {
    /// No such run.
    NotFound,
    /// The write lost to another (a compare-and-set, an id taken).
    Conflict,
    /// A stored row cannot be read (damaged, or of a newer askloop).
    Unreadable,
    /// The store does not keep what was asked for (threads, grants).
    Unsupported,
    /// The database cannot be reached or used now.
    Unavailable,
}

/// Why a database cannot be used (see [`StoreError::Unusable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DatabaseFault {
    /// Nothing exists at the location, and the caller asked not to create
    /// a database there (a read of runs never makes an empty database).
    Missing,
    /// The file is not a database of the store's kind, or a damaged one.
    NotADatabase,
    /// The file, its folder or its file system cannot be written.
    ReadOnly,
    /// The disk (or the quota) is full.
    DiskFull,
    /// The location cannot be opened at all: no permission, or a file
    /// where a folder should be.
    CannotOpen,
}

impl fmt::Display for DatabaseFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DatabaseFault::Missing => "no database exists there",
            DatabaseFault::NotADatabase => "not a database (or a damaged one)",
            DatabaseFault::ReadOnly => "read only",
            DatabaseFault::DiskFull => "disk full",
            DatabaseFault::CannotOpen => "cannot be opened",
        })
    }
}

/// The durable outbox of a store: the deliveries of webhook notifications,
/// written with the run writes that raise them ([`RunUpdate::outbox`]) and
/// taken from here by the senders (`askloop serve`'s webhook sender).
#[async_trait]
pub trait DeliveryStore: Send + Sync {
    /// Takes up to `limit` deliveries to send under `lease`: pending ones
    /// due at `now` that no sender holds (or whose sender's lease ran out at
    /// `now`), oldest due first. Taking them is atomic: of concurrent
    /// claimants (in any number of processes) each delivery goes to one.
    async fn claim_deliveries(
        &self,
        now: DateTime<Utc>,
        lease: &Lease,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError>;

    /// Records how an attempt to send delivery `id` ended, if `owner` still
    /// holds it (else [`StoreError::DeliveryLost`]), and releases it: it
    /// counts one more attempt; a retry is due again at its `next_at`.
    async fn finish_delivery(&self, id: &str, owner: &str, outcome: &DeliveryOutcome) -> Result<(), StoreError>;

    /// The deliveries of a run's notifications, oldest first.
    async fn deliveries(&self, run_id: &str) -> Result<Vec<Delivery>, StoreError>;
}

/// A live feed of changes to a store's runs (what `/api/events` and the
/// page's live updates read).
#[async_trait]
pub trait ChangeFeed: Send + Sync {
    /// A live feed of changes to the store's runs, from now on, or `None`
    /// when this store cannot report them. See [`RunChange`] for what each
    /// store reports and how soon.
    async fn changes(&self) -> Result<Option<RunChanges>, StoreError>;
}

/// Durable (or in-memory) storage of runs, with its outbox
/// ([`DeliveryStore`]) and its feed of changes ([`ChangeFeed`]): a store
/// implements all three, each with its own conformance cases.
///
/// Implementations must make [`RunStore::claim`] and [`RunStore::update`]
/// atomic compare-and-sets: of many concurrent callers with the same expected
/// version, exactly one succeeds and the others get
/// [`StoreError::Conflict`].
#[async_trait]
pub trait RunStore: DeliveryStore + ChangeFeed + fmt::Debug + 'static {
    /// The store's answer links, when it keeps them (the stores of askloop
    /// do). Without them, a server makes no links.
    fn link_store(&self) -> Option<&dyn LinkStore>;

    /// The store's threads, when it keeps them (the stores of askloop do).
    /// A store that does not refuses runs on a thread.
    fn thread_store(&self) -> Option<&dyn ThreadStore>;

    /// The store's approvals that stick, when it keeps them (the stores of
    /// askloop do). With a store that does not, an approval cannot stick.
    fn grant_store(&self) -> Option<&dyn GrantStore>;

    /// Stores a new run with its first messages. `run.message_count` must be
    /// `messages.len()`. A run on a thread ([`RunRecord::memory`]) creates
    /// its thread if it does not exist and appends its messages after its
    /// context to it, in the same write.
    async fn create(&self, run: &RunRecord, messages: &[Message]) -> Result<(), StoreError>;

    /// Reads a run's row, or `None` if there is no such run.
    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError>;

    /// Reads a run's messages, oldest first.
    async fn messages(&self, run_id: &str) -> Result<Vec<Message>, StoreError>;

    /// Moves a suspended run at `expected_version` to `running`, held by
    /// `lease`, and bumps its version, in one compare-and-set. Returns the
    /// new version.
    async fn claim(&self, run_id: &str, expected_version: i64, lease: &Lease) -> Result<i64, StoreError>;

    /// Moves the end of a running run's lease to `lease.until`, if the run
    /// is still running and held by `lease.owner` (else
    /// [`StoreError::LeaseLost`]). Changes neither the version nor anything
    /// else, so the owner's next write still matches.
    async fn renew_lease(&self, run_id: &str, lease: &Lease) -> Result<(), StoreError>;

    /// Running runs whose lease ran out at `now` (or that have none, which
    /// nothing can renew), oldest write first (by `updated_at`,
    /// then id), at most `limit`; with `after`, only those after it in that
    /// order, so that a caller pages through them all (see
    /// [`ExpiredRuns`]).
    async fn expired(
        &self,
        now: DateTime<Utc>,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError>;

    /// Takes a run nobody drives, to drive it under `lease`: a running run
    /// whose lease ran out at `now` (or that has none), or a failed run (to
    /// retry it). One compare-and-set on `expected_version`: of concurrent
    /// reclaimers exactly one wins, the others get
    /// [`StoreError::Conflict`]; so does a reclaim of a run whose owner
    /// renewed its lease meanwhile. The run becomes `running` with its
    /// error cleared; everything it stored is kept. `resolution` (who took
    /// it over, and how) is appended to [`RunRecord::resolutions`] in the
    /// same write. Returns the new version.
    async fn reclaim(
        &self,
        run_id: &str,
        expected_version: i64,
        lease: &Lease,
        now: DateTime<Utc>,
        resolution: Option<&Resolution>,
    ) -> Result<i64, StoreError>;

    /// Writes a step: the row's new state and the new messages, if the
    /// version is still `expected_version`. Returns the new version. For a
    /// run on a thread, the new messages are appended to the thread too, in
    /// the same write.
    async fn update(&self, update: RunUpdate<'_>) -> Result<i64, StoreError>;

    /// Suspended runs with a pending call whose time limit passed at `now`,
    /// earliest time limit first (then id), at most `limit`; with `after`,
    /// only those after it in that order, so that a caller pages through
    /// them all (see [`ExpiredRuns::time_limits`]). The SQL stores answer
    /// from an index; a store that can only list calls
    /// [`expiring_by_listing`].
    async fn expiring(
        &self,
        now: DateTime<Utc>,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError>;

    /// Lists runs, newest first.
    async fn list(&self, query: &RunQuery) -> Result<Vec<RunRecord>, StoreError>;

    /// How many runs [`RunStore::list`] returns for `query` (its status,
    /// agent and `after`; at most `limit`, past `offset`), without reading
    /// them: the number a page shows as the total of a listing it reads a
    /// page at a time. A row too damaged to read, which listings leave out,
    /// may be counted.
    ///
    /// The SQL stores count in their indexes; a store that can only list
    /// calls [`count_by_listing`].
    async fn count(&self, query: &RunQuery) -> Result<u64, StoreError>;

    /// Deletes finished runs (completed, failed, cancelled) last written
    /// before `before`, with their messages. Returns how many were deleted.
    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;

    /// How many runs wait for people (are suspended), and on how many tool
    /// calls, for each agent that has any: the figures a server reports as
    /// questions waiting. Agents with none are left out; the order is by
    /// agent id.
    ///
    /// The SQL stores read only the suspended runs' entries of their status
    /// index, so the cost follows how many runs wait, not how many the
    /// store holds; a store that can only list calls
    /// [`waiting_by_listing`].
    async fn waiting(&self) -> Result<Vec<AgentWaiting>, StoreError>;
}

/// What one agent's runs wait on (see [`RunStore::waiting`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentWaiting {
    /// The agent.
    pub agent_id: String,
    /// Its suspended runs.
    pub runs: u64,
    /// The tool calls those runs wait on (questions and approvals).
    pub calls: u64,
}

/// [`RunStore::expiring`] for a store that can only list: reads every
/// suspended run and keeps those whose earliest time limit passed at `now`.
pub async fn expiring_by_listing<S: RunStore + ?Sized>(
    store: &S,
    now: DateTime<Utc>,
    after: Option<&RunCursor>,
    limit: u32,
) -> Result<Vec<RunRecord>, StoreError> {
    let suspended = store
        .list(&RunQuery {
            status: Some(RunStatus::Suspended),
            ..RunQuery::default()
        })
        .await?;
    let mut due: Vec<(DateTime<Utc>, RunRecord)> = suspended
        .into_iter()
        .filter_map(|run| Some((run.earliest_limit().filter(|at| *at <= now)?, run)))
        .filter(|(at, run)| after.is_none_or(|after| after.precedes(*at, &run.run_id)))
        .collect();
    due.sort_by(|(a, x), (b, y)| a.cmp(b).then_with(|| x.run_id.cmp(&y.run_id)));
    Ok(due.into_iter().take(limit as usize).map(|(_, run)| run).collect())
}

/// [`RunStore::waiting`] for a store that can only list: the suspended runs
/// a page at a time, counted by agent.
pub async fn waiting_by_listing<S: RunStore + ?Sized>(store: &S) -> Result<Vec<AgentWaiting>, StoreError> {
    const PAGE: u32 = 500;
    let mut by_agent: std::collections::BTreeMap<String, AgentWaiting> = std::collections::BTreeMap::new();
    let mut page = RunQuery {
        status: Some(RunStatus::Suspended),
        limit: Some(PAGE),
        ..RunQuery::default()
    };
    loop {
        let runs = store.list(&page).await?;
        let Some(last) = runs.last() else {
            return Ok(by_agent.into_values().collect());
        };
        page.after = Some(RunCursor::after_created(last));
        for run in &runs {
            let waiting = by_agent.entry(run.agent_id.clone()).or_insert_with(|| AgentWaiting {
                agent_id: run.agent_id.clone(),
                runs: 0,
                calls: 0,
            });
            waiting.runs += 1;
            waiting.calls += run.stored_calls().len() as u64;
        }
    }
}

/// [`RunStore::count`] for a store that can only list: reads the listing a
/// page at a time (so a store of any size is never read whole into memory)
/// and counts it. Only the first page skips `offset`; each next one starts
/// after the last run of the one before. An empty page ends it (a short
/// one may only have left a damaged row out).
pub async fn count_by_listing<S: RunStore + ?Sized>(store: &S, query: &RunQuery) -> Result<u64, StoreError> {
    const PAGE: u32 = 500;
    let mut page = query.clone();
    let mut counted: u64 = 0;
    loop {
        let room = match query.limit {
            Some(limit) => u64::from(limit).saturating_sub(counted).min(u64::from(PAGE)),
            None => u64::from(PAGE),
        };
        if room == 0 {
            return Ok(counted);
        }
        page.limit = Some(u32::try_from(room).unwrap_or(PAGE));
        let runs = store.list(&page).await?;
        let Some(last) = runs.last() else {
            return Ok(counted);
        };
        counted += runs.len() as u64;
        page.after = Some(RunCursor::after_created(last));
        page.offset = 0;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use chrono::Duration;

    use super::*;

    fn run(run_id: &str, agent_id: &str, status: RunStatus, created_at: DateTime<Utc>) -> RunRecord {
        RunRecord {
            run_id: run_id.to_owned(),
            agent_id: agent_id.to_owned(),
            thread_id: None,
            memory: None,
            resource_id: None,
            status,
            version: 0,
            created_at,
            updated_at: created_at,
            pending: Vec::new(),
            step_results: Vec::new(),
            message_count: 0,
            steps: 0,
            usage: Usage::default(),
            metadata: Value::Null,
            lease: None,
            failure: None,
            resolutions: Vec::new(),
            settings: Default::default(),
            trace_parent: None,
        }
    }

    /// A call's own resolution wins; a call without one takes the run-wide
    /// supersession or cancel, never another call's resolution nor a
    /// run-wide recovery.
    #[test]
    fn a_call_resolution_is_its_own_else_the_runs_supersession_or_cancel() {
        let at = Utc::now();
        let by = Author::via(Interface::Http);
        let mut record = run("r", "a", RunStatus::Suspended, at);
        record.resolutions = vec![
            Resolution::new(Some("c1"), ResolutionKind::Answered, at, by.clone()),
            Resolution::new(None, ResolutionKind::Recovered, at, by.clone()),
        ];
        assert_eq!(
            record.call_resolution("c1").map(|r| r.kind),
            Some(ResolutionKind::Answered)
        );
        assert_eq!(record.call_resolution("c2"), None, "a recovery resolves no call");

        record
            .resolutions
            .push(Resolution::new(None, ResolutionKind::Superseded, at, by.clone()));
        assert_eq!(
            record.call_resolution("c2").map(|r| r.kind),
            Some(ResolutionKind::Superseded)
        );
        assert_eq!(
            record.call_resolution("c1").map(|r| r.kind),
            Some(ResolutionKind::Answered)
        );

        record
            .resolutions
            .push(Resolution::new(None, ResolutionKind::Cancelled, at, by));
        assert_eq!(
            record.call_resolution("c2").map(|r| r.kind),
            Some(ResolutionKind::Cancelled),
            "the latest wins"
        );
    }

    /// A store that can only list counts by reading the listing: the same
    /// number as the listing's length over several pages, with every part
    /// of the query.
    #[tokio::test]
    async fn the_default_count_is_the_length_of_the_listing_across_pages() {
        let store = MemoryStore::new();
        let t0 = Utc::now();
        for i in 0..1203 {
            let status = if i % 3 == 0 {
                RunStatus::Completed
            } else {
                RunStatus::Suspended
            };
            let agent = if i % 2 == 0 { "even" } else { "odd" };
            // Pairs made in the same instant: the listing orders them by id.
            let created = t0 + Duration::seconds(i / 2);
            store
                .create(&run(&format!("run-{i:04}"), agent, status, created), &[])
                .await
                .unwrap();
        }
        let middle = RunCursor {
            at: t0 + Duration::seconds(300),
            run_id: "run-0601".into(),
        };
        let queries = [
            RunQuery::default(),
            RunQuery {
                status: Some(RunStatus::Suspended),
                ..Default::default()
            },
            RunQuery {
                status: Some(RunStatus::Suspended),
                agent_id: Some("odd".into()),
                ..Default::default()
            },
            RunQuery {
                limit: Some(700),
                offset: 450,
                ..Default::default()
            },
            RunQuery {
                limit: Some(2000),
                offset: 1200,
                ..Default::default()
            },
            RunQuery {
                after: Some(middle.clone()),
                ..Default::default()
            },
            RunQuery {
                status: Some(RunStatus::Completed),
                after: Some(middle),
                limit: Some(3),
                ..Default::default()
            },
            RunQuery {
                limit: Some(0),
                ..Default::default()
            },
            RunQuery {
                agent_id: Some("nobody".into()),
                ..Default::default()
            },
        ];
        for query in queries {
            let listed = store.list(&query).await.unwrap().len() as u64;
            assert_eq!(count_by_listing(&store, &query).await.unwrap(), listed, "{query:?}");
            assert_eq!(store.count(&query).await.unwrap(), listed, "{query:?}");
        }
    }
}

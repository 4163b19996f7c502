//! The run store conformance suite: what every [`RunStore`] must do, written
//! once and run against [`MemoryStore`], [`SqliteStore`] and
//! [`PostgresStore`] (enable the `conformance` feature).
//!
//! Each case is an async function taking a [`Subject`]: a fresh, empty store
//! and, for stores that have rows, a [`RawRows`] handle that can damage a
//! row the way a bad disk, a bad hand edit or a newer askloop would. The
//! [`store_conformance_tests!`](crate::store_conformance_tests) and
//! [`raw_row_conformance_tests!`](crate::raw_row_conformance_tests) macros
//! turn the cases into `#[tokio::test]`s:
//!
//! ```ignore
//! askloop_store::store_conformance_tests!(askloop_store::conformance::sqlite_subject());
//! askloop_store::raw_row_conformance_tests!(askloop_store::conformance::sqlite_subject());
//! ```
//!
//! Cases panic (assert) on a failure; they are test code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod cases;
mod changes;
mod clock;
mod expiry;
mod grants;
mod leases;
mod links;
mod outbox;
mod raw;
mod text;
mod threads;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use askloop::{Clock, MemoryStore, RunStore, SystemClock};
use futures::future::BoxFuture;

use crate::{PostgresOptions, PostgresStore, SqliteOptions, SqliteStore};

pub use cases::*;
pub use changes::*;
pub use clock::*;
pub use expiry::*;
pub use grants::*;
pub use leases::*;
pub use links::*;
pub use outbox::*;
pub use raw::RawRows;
pub use text::*;
pub use threads::*;

/// A store under test, empty.
pub struct Subject {
    /// The store.
    pub store: Arc<dyn RunStore>,
    /// Raw access to its rows, for stores that have rows.
    pub raw: Option<Arc<dyn RawRows>>,
    /// The clock the store stamps its writes with: the system's time until
    /// a case sets it.
    pub clock: Arc<SubjectClock>,
    /// Kept alive while the test runs (a temporary directory, ...).
    _keep: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// Run when the subject is dropped, even after a failed assertion.
    cleanup: Option<BoxFuture<'static, ()>>,
}

impl std::fmt::Debug for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subject")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Drop for Subject {
    fn drop(&mut self) {
        if let Some(cleanup) = self.cleanup.take() {
            // Drop cannot await; a short-lived runtime on its own thread can.
            let done = std::thread::spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    rt.block_on(cleanup);
                }
            })
            .join();
            if done.is_err() {
                eprintln!("conformance: cleaning up a test store panicked");
            }
        }
    }
}
// ---------------------------------------------------------------------------
// Subjects

/// An empty [`MemoryStore`].
pub async fn memory_subject() -> Option<Subject> {
    let clock = Arc::new(SubjectClock::default());
    Some(Subject {
        store: Arc::new(MemoryStore::with_clock(clock.clone())),
        raw: None,
        clock,
        _keep: None,
        cleanup: None,
    })
}

/// An empty [`SqliteStore`] in a new temporary directory.
pub async fn sqlite_subject() -> Option<Subject> {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let clock = Arc::new(SubjectClock::default());
    let options = SqliteOptions::default().clock(clock.clone());
    let store = SqliteStore::open_with(dir.path().join("runs.db"), options)
        .await
        .expect("opening a SQLite store");
    Some(Subject {
        store: Arc::new(store.clone()),
        raw: Some(Arc::new(store)),
        clock,
        _keep: Some(Box::new(dir)),
        cleanup: None,
    })
}

/// The environment variable naming the PostgreSQL server for tests.
pub const TEST_DATABASE_URL_VAR: &str = "ASKLOOP_TEST_DATABASE_URL";

/// The PostgreSQL URL for tests, or `None` (after saying why) when it is not
/// set outside CI. Under CI (`CI=true`) a missing URL fails the test: a
/// PostgreSQL test must never pass by not running.
pub fn postgres_test_url(test: &str) -> Option<String> {
    match std::env::var(TEST_DATABASE_URL_VAR) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => panic!(
            "{test}: {TEST_DATABASE_URL_VAR} is not set and CI=true: PostgreSQL tests must run in CI \
             (.ci/run sets it to postgres://postgres@127.0.0.1:5432/test)"
        ),
        _ => {
            eprintln!(
                "{test}: skipped: {TEST_DATABASE_URL_VAR} is not set (e.g. \
                 {TEST_DATABASE_URL_VAR}=postgres://postgres@127.0.0.1:5432/test runs it)"
            );
            None
        }
    }
}

/// A uniquely named schema for one test, so tests share a database in
/// parallel.
pub fn unique_schema_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemClock.now().timestamp_nanos_opt().unwrap_or_default();
    format!("askloop_test_{}_{}_{n}", std::process::id(), nanos)
}

/// Drops a test schema and everything in it.
pub async fn drop_schema(url: &str, schema: &str) {
    let Ok(pool) = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
    else {
        eprintln!("could not connect to drop the test schema {schema}");
        return;
    };
    let dropped = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await;
    if let Err(err) = dropped {
        eprintln!("could not drop the test schema {schema}: {err}");
    }
    pool.close().await;
}

/// An empty [`PostgresStore`] in its own new schema (dropped afterwards), or
/// `None` when PostgreSQL tests are skipped (see [`postgres_test_url`]).
pub async fn postgres_subject() -> Option<Subject> {
    let url = postgres_test_url("postgres conformance")?;
    let schema = unique_schema_name();
    let clock = Arc::new(SubjectClock::default());
    let options = PostgresOptions::default()
        .schema(&schema)
        .max_connections(8)
        .clock(clock.clone());
    let store = PostgresStore::connect_with(&url, options)
        .await
        .unwrap_or_else(|e| panic!("connecting to PostgreSQL at {url} (from {TEST_DATABASE_URL_VAR}): {e}"));
    let pool_owner = store.clone();
    Some(Subject {
        store: Arc::new(store.clone()),
        raw: Some(Arc::new(store)),
        clock,
        _keep: None,
        cleanup: Some(Box::pin(async move {
            pool_owner.close().await;
            drop_schema(&url, &schema).await;
        })),
    })
}

/// Generates a `#[tokio::test]` per conformance case of a store's runs and
/// threads ([`askloop::RunStore`], [`askloop::ThreadStore`]), for a subject
/// expression (an `async` producing `Option<Subject>`; `None` skips). Its
/// outbox and change feed have case lists of their own
/// ([`delivery_store_conformance_tests!`], `change_feed_conformance_tests!`).
#[macro_export]
macro_rules! store_conformance_tests {
    ($subject:expr) => {
        $crate::__conformance_cases!($subject;
            create_then_get_returns_the_run_and_its_messages,
            a_runs_trace_context_is_stored_with_it_and_kept_by_later_writes,
            creating_an_existing_run_is_refused_and_keeps_the_first,
            an_unknown_run_is_absent_and_cannot_be_claimed_or_written,
            updates_append_only_new_messages_in_order,
            an_update_at_a_stale_version_is_a_conflict_and_changes_nothing,
            suspend_claim_and_complete_round_trip,
            a_failed_run_keeps_its_error,
            claiming_a_run_that_is_not_suspended_or_at_another_version_is_a_conflict,
            of_twenty_concurrent_claims_exactly_one_wins,
            of_ten_concurrent_updates_at_one_version_exactly_one_is_written,
            list_is_newest_first_then_by_id_descending,
            list_filters_by_status_and_agent,
            list_pages_with_limit_and_offset,
            list_pages_after_the_last_run_of_the_page_before,
            count_is_the_length_of_the_listing_for_the_same_query,
            waiting_counts_suspended_runs_and_their_calls_by_agent,
            prune_deletes_only_finished_runs_older_than_the_cutoff_with_their_messages,
            text_with_nul_characters_round_trips_exactly,
            a_listing_by_an_agent_id_holding_nul_finds_nothing,
            a_claim_holds_the_run_and_only_its_owner_renews_it_without_a_new_version,
            runs_whose_lease_ran_out_or_that_have_none_are_expired_and_held_ones_are_not,
            expired_runs_are_read_page_after_page_each_once_past_five_hundred,
            reclaim_takes_an_expired_or_failed_run_and_refuses_a_held_or_stale_one,
            resolutions_of_a_take_over_and_of_later_steps_are_kept_in_order,
            of_twenty_concurrent_reclaims_exactly_one_wins,
            after_a_takeover_the_old_owner_can_neither_renew_nor_write,
            an_update_sets_or_clears_the_lease_and_keeps_the_typed_failure,
            a_suspended_run_is_expiring_once_its_earliest_time_limit_passed,
            expiring_runs_are_read_page_after_page_each_once,
            resolutions_are_appended_by_writes_and_kept_in_order,
            a_runs_settings_are_stored_with_it_and_kept_by_its_writes,
            a_store_stamps_its_writes_with_its_clock,
            a_run_on_a_thread_creates_it_and_appends_its_own_messages_after_its_context,
            a_step_retried_after_a_lost_write_appends_once,
            runs_appending_to_one_thread_at_once_never_collide,
            threads_are_created_read_edited_listed_and_counted_by_resource_and_agent,
            a_threads_messages_are_read_from_any_place_by_sequence,
            the_first_messages_of_many_threads_are_read_at_once,
            runs_are_listed_by_their_thread_and_by_resource,
            runs_walled_to_resources_are_listed_paged_and_counted_within_the_wall,
            deleting_a_thread_deletes_its_messages_and_runs_unless_one_is_unfinished,
            grants_are_stored_with_their_write_and_not_with_a_refused_one,
            live_grants_leave_out_other_agents_resources_revoked_and_expired_ones,
            grants_are_listed_newest_first_filtered_and_paged,
            deleting_a_thread_deletes_its_own_grants_and_keeps_the_resources,
            a_link_is_stored_once_and_of_twenty_takers_exactly_one_wins,
            revoked_and_expired_links_cannot_be_taken_and_used_ones_cannot_be_revoked,
            a_runs_links_are_listed_oldest_first_and_pruned_with_it,
            a_links_maker_is_kept_and_a_link_made_without_one_reads_as_made_by_nobody
        );
    };
}

/// Generates a `#[tokio::test]` per case of a store's outbox
/// ([`askloop::DeliveryStore`]), for a subject expression as
/// [`store_conformance_tests!`] takes. (The change feed's cases are
/// `change_feed_conformance_tests!`.)
#[macro_export]
macro_rules! delivery_store_conformance_tests {
    ($subject:expr) => {
        $crate::__conformance_cases!($subject;
            notifications_are_stored_with_their_write_and_not_with_a_refused_one,
            claimed_deliveries_are_held_until_their_lease_runs_out,
            a_held_back_notice_is_not_claimed_before_it_is_due,
            finished_attempts_are_counted_and_only_retries_come_back,
            of_concurrent_senders_each_delivery_goes_to_exactly_one
        );
    };
}

/// Generates a `#[tokio::test]` per raw-row case (corrupt and newer rows),
/// for stores that implement [`RawRows`].
#[macro_export]
macro_rules! raw_row_conformance_tests {
    ($subject:expr) => {
        $crate::__conformance_cases!($subject;
            a_corrupt_run_row_is_reported_for_that_run_only,
            a_corrupt_message_is_reported_for_that_run_only,
            a_row_from_a_newer_askloop_is_refused_and_left_unchanged,
            only_a_run_with_settings_is_stored_at_the_layout_that_older_builds_refuse,
            a_run_on_a_thread_is_stored_at_the_layout_that_older_builds_refuse,
            a_decision_older_builds_cannot_read_raises_the_row_to_the_layout_they_refuse,
            a_decision_in_slack_raises_the_row_to_the_layout_older_builds_refuse,
            an_answer_by_link_raises_the_row_to_the_layout_older_builds_refuse,
            a_long_runs_later_resolutions_are_rows_of_their_own_at_a_layout_older_builds_refuse
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($subject:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let Some(subject) = $subject.await else { return };
                $crate::conformance::$case(&subject).await;
            }
        )*
    };
}

//! The write thread of a [`SqliteStore`](super::SqliteStore): every write of
//! the store, one thread, one connection, and group commit.
//!
//! A write is serialised by its caller (JSON, message bodies) and handed to
//! the thread as one job; the caller then waits for its result. One hand-off
//! per write, whatever the number of statements in it: the thread runs
//! `BEGIN IMMEDIATE`, the statements and `COMMIT` itself, with statements
//! prepared once and kept.
//!
//! With `synchronous = FULL` every commit costs an fsync. When the thread
//! picks up a job it also takes every job queued behind it (up to
//! [`MAX_BATCH`]) and commits them in ONE transaction: they share its fsync.
//! A job alone is written alone: in its own `BEGIN IMMEDIATE` transaction,
//! or, when it is a single statement (a claim, a prune, a step without
//! messages), without a transaction around it. Nothing is reported before
//! the commit has returned, so a write reported `Ok` is on disk (but for the
//! one exception below), and a crash mid-batch loses only writes that were
//! not yet reported.
//!
//! Each write keeps its own result and stays all-or-nothing for itself:
//!
//! - A write that is refused (`Conflict`, `NotFound`, `NewerSchema`,
//!   `AlreadyExists`) is refused by its first statement, which changed
//!   nothing (a compare-and-set matching no row, or a unique violation that
//!   SQLite undoes for that statement alone); the batch goes on.
//! - Writes run in the order they were queued, each seeing the ones before
//!   it, so compare-and-set stays exact: of two claims of one run in one
//!   batch, the second finds the version the first wrote and is a
//!   `Conflict`.
//! - Any other failure of a statement (the disk, a constraint that cannot
//!   happen) rolls the whole batch back, and its writes are then run again
//!   one by one, each in its own transaction, so only the failing one fails.
//! - A commit that fails fails every write of the batch (none is reported
//!   `Ok`), as a single write's failed commit would.
//!
//! # Which commits are fsynced
//!
//! With [`SqliteSync::Full`] every commit is fsynced before its writes are
//! reported, except a batch made only of new runs (`create`): it is
//! committed without an fsync of its own, and made durable by the next
//! commit's fsync (the WAL is one file written in order, so an fsync of it
//! covers every commit before). What a power cut can lose is then a run that
//! has not yet asked or answered anything, only taken its caller's input
//! (which the caller still has); every commit whose effect can leave the
//! machine (a question shown, an answer taken, a tool's side effect, a
//! result) is on disk before it does. A process crash loses nothing either
//! way: the commit is in the OS's page cache.
//!
//! A caller that stops waiting (its future dropped: a client gone, a runtime
//! shut down) before the thread takes its job does not get it written; once
//! taken, the write is done whole or not at all. Other processes are
//! unaffected: the thread takes SQLite's write lock with `BEGIN IMMEDIATE`
//! and theirs wait in the busy timeout.

use std::sync::mpsc;

use askloop::{RUN_SCHEMA_VERSION, StoreError};
use rusqlite::{Connection, OptionalExtension, ToSql, params};
use tokio::sync::oneshot;

use crate::row::{
    RESOLUTION_ROWS_LAYOUT, RESOLUTIONS_IN_ROW, RowState, explain_missed_write, sqlite_finished_condition,
};

use super::SqliteSync;
use super::outbox::{self, NewDelivery, Outcome};

pub(crate) mod grants;
pub(crate) mod links;
pub(crate) mod threads;

/// The most writes committed together.
pub(crate) const MAX_BATCH: usize = 128;

/// How many messages one `INSERT` writes at most: 3 variables a row keeps a
/// statement at 768 variables, under SQLite's limit even in builds older than
/// 3.32 (999).
const MESSAGES_PER_INSERT: usize = 256;

/// Deletes finished runs last written before `?` (with their messages, by
/// `ON DELETE CASCADE`), found from the index of finished runs.
pub(crate) const PRUNE: &str = concat!(
    "DELETE FROM runs WHERE ",
    sqlite_finished_condition!(),
    " AND updated_at < ?"
);

/// Inserts a new run's row.
const CREATE_RUN: &str = concat!(
    "INSERT INTO runs (",
    run_columns!(),
    ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
);

/// Writes a step to a run's row, if the row is still at the version the
/// step was made from (see `Write::Update`).
const UPDATE_RUN: &str = "UPDATE runs SET status = ?, version = version + 1, updated_at = ?, pending = ?, \
     step_results = ?, message_count = message_count + ?, steps = ?, usage = ?, error = ?, \
     failure = ?, lease_owner = ?, lease_until = ?, expires_at = ?, \
     resolutions = CASE WHEN ?13 IS NULL OR schema_version >= ?20 OR ?17 >= ?20 \
       OR json_array_length(resolutions) + ?18 > ?19 THEN resolutions \
     WHEN resolutions = '[]' THEN ?13 \
     ELSE substr(resolutions, 1, length(resolutions) - 1) || ',' || substr(?13, 2) END, \
     schema_version = CASE WHEN ?13 IS NULL OR (schema_version < ?20 AND ?17 < ?20 \
       AND json_array_length(resolutions) + ?18 <= ?19) THEN MAX(schema_version, ?17) \
     ELSE MAX(schema_version, ?17, ?20) END \
     WHERE run_id = ?14 AND version = ?15 AND schema_version <= ?16";

/// Takes a suspended run for its resumer, if the row is still at the version
/// the claimant read (see `Write::Claim`).
const CLAIM_RUN: &str = "UPDATE runs SET status = 'running', version = version + 1, updated_at = ?, \
     lease_owner = ?, lease_until = ? \
     WHERE run_id = ? AND status = 'suspended' AND version = ? AND schema_version <= ?";

/// A `runs` row to insert, serialised.
#[derive(Debug)]
pub(crate) struct NewRun {
    pub(crate) run_id: String,
    pub(crate) agent_id: String,
    pub(crate) thread_id: Option<String>,
    pub(crate) status: &'static str,
    pub(crate) version: i64,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) pending: String,
    pub(crate) step_results: String,
    pub(crate) steps: i64,
    pub(crate) usage: String,
    pub(crate) error: Option<String>,
    pub(crate) metadata: String,
    pub(crate) settings: String,
    /// The layout the row is written with (`RunRecord::schema_version`).
    pub(crate) schema_version: i32,
    pub(crate) lease_owner: Option<String>,
    pub(crate) lease_until: Option<i64>,
    pub(crate) failure: Option<String>,
    pub(crate) resolutions: String,
    pub(crate) expires_at: Option<i64>,
    /// The stored thread the run is on (all `None`: none).
    pub(crate) memory_resource_id: Option<String>,
    pub(crate) memory_thread_id: Option<String>,
    pub(crate) memory_context: Option<i64>,
    pub(crate) trace_parent: Option<String>,
    /// The resource the run belongs to, beyond its thread's.
    pub(crate) resource_id: Option<String>,
    /// When the write is made (microseconds), from the store's clock: the
    /// time of the messages it appends to its thread.
    pub(crate) written_at: i64,
}

/// A step to write on a run, serialised.
#[derive(Debug)]
pub(crate) struct Step {
    /// When the step is written (microseconds), from the store's clock.
    pub(crate) updated_at: i64,
    pub(crate) run_id: String,
    pub(crate) expected_version: i64,
    pub(crate) status: &'static str,
    pub(crate) pending: String,
    pub(crate) step_results: String,
    pub(crate) steps: i64,
    pub(crate) usage: String,
    pub(crate) error: Option<String>,
    pub(crate) failure: Option<String>,
    pub(crate) lease_owner: Option<String>,
    pub(crate) lease_until: Option<i64>,
    /// Resolutions to append to the run's, as a JSON array.
    pub(crate) resolutions: Option<String>,
    /// The same resolutions one by one: rows of `run_resolutions` when the
    /// run's row holds no more.
    pub(crate) resolution_bodies: Vec<String>,
    /// The layout the row is raised to, if older ([`RunUpdate::needs_layout`]).
    pub(crate) layout: i32,
    pub(crate) expires_at: Option<i64>,
    /// Notifications the step raises, inserted in its transaction.
    pub(crate) outbox: Vec<NewDelivery>,
    /// Approvals that stick its approvals make, inserted in its transaction.
    pub(crate) grants: Vec<crate::grants::GrantRow>,
}

/// One write, with everything it writes already serialised (by the caller,
/// not by the write thread).
#[derive(Debug)]
pub(crate) enum Write {
    /// `create`: the row and its first messages. Result 0.
    Create { run: NewRun, bodies: Vec<String> },
    /// `update`: a compare-and-set of the row plus new messages. Result: the
    /// new version.
    Update { step: Step, bodies: Vec<String> },
    /// `claim` at `at`, under a lease (`until`; both in microseconds).
    /// Result: the new version.
    Claim {
        at: i64,
        run_id: String,
        expected_version: i64,
        owner: String,
        until: i64,
    },
    /// `renew_lease`. Result 0.
    Renew { run_id: String, owner: String, until: i64 },
    /// `reclaim` at `at` of a run whose lease ran out at `now`, or that
    /// failed. Result: the new version.
    Reclaim {
        at: i64,
        run_id: String,
        expected_version: i64,
        owner: String,
        until: i64,
        now: i64,
        /// Who took it over, as JSON, appended to `resolutions`.
        resolution: Option<String>,
    },
    /// `prune`, of runs last written before this time (microseconds).
    /// Result: how many were deleted.
    Prune { before: i64 },
    /// `claim_deliveries`: leases due deliveries to `owner` until `until`.
    /// Result: how many.
    ClaimDeliveries {
        now: i64,
        owner: String,
        until: i64,
        limit: i64,
        token: String,
    },
    /// `finish_delivery`. Result 0.
    FinishDelivery {
        id: String,
        owner: String,
        outcome: Outcome,
    },
    /// `create_thread`. Result 0.
    CreateThread(threads::NewThread),
    /// `update_thread`. Result: rows changed (0: no such thread).
    UpdateThread(threads::ThreadChange),
    /// `delete_thread`. Result: see [`threads::delete`].
    DeleteThread { resource_id: String, thread_id: String },
    /// `revoke_grant`. Result: rows changed (0: no such grant, or revoked
    /// already).
    RevokeGrant(grants::Revocation),
    /// `create_link`. Result: rows inserted (0: the id was taken).
    CreateLink(links::NewLink),
    /// `take_link`, `release_link`, `revoke_link`. Result: rows changed.
    ChangeLink(links::LinkChange),
}

/// `SQLITE_CONSTRAINT_PRIMARYKEY` and `SQLITE_CONSTRAINT_UNIQUE`.
fn is_unique_violation(err: &rusqlite::Error) -> bool {
    matches!(
        err,
        rusqlite::Error::SqliteFailure(e, _)
            if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                || e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
    )
}

impl Write {
    /// Whether, with [`SqliteSync::Full`], the write must be fsynced before
    /// it is reported, rather than by the next commit (see the module's
    /// documentation).
    fn needs_own_fsync(&self) -> bool {
        // A renewal lost to a power cut only makes the lease end sooner.
        !matches!(self, Write::Create { .. } | Write::Renew { .. })
    }

    /// Whether the write is more than one statement, so that alone it needs
    /// a transaction around it to be all-or-nothing.
    fn needs_transaction(&self) -> bool {
        match self {
            Write::Create { run, bodies } => !bodies.is_empty() || run.memory_thread_id.is_some(),
            Write::Update { step, bodies } => {
                !bodies.is_empty()
                    || !step.resolution_bodies.is_empty()
                    || !step.outbox.is_empty()
                    || !step.grants.is_empty()
            }
            Write::Reclaim { resolution, .. } => resolution.is_some(),
            Write::DeleteThread { .. } => true,
            Write::CreateThread(_)
            | Write::UpdateThread(_)
            | Write::RevokeGrant(_)
            | Write::CreateLink(_)
            | Write::ChangeLink(_) => false,
            Write::Claim { .. }
            | Write::Renew { .. }
            | Write::Prune { .. }
            | Write::ClaimDeliveries { .. }
            | Write::FinishDelivery { .. } => false,
        }
    }

    /// Runs the write on `conn` (inside the batch's transaction, if any). A
    /// refusal (`Conflict`, `NotFound`, ...) has changed nothing; any
    /// `Backend` error may have left part of the write behind.
    fn apply(&self, conn: &Connection) -> Result<i64, StoreError> {
        match self {
            Write::Create { run, bodies } => {
                let mut insert = conn.prepare_cached(CREATE_RUN).map_err(StoreError::backend)?;
                let inserted = insert.execute(params![
                    run.run_id,
                    run.agent_id,
                    run.thread_id,
                    run.status,
                    run.version,
                    run.created_at,
                    run.updated_at,
                    run.pending,
                    run.step_results,
                    bodies.len() as i64,
                    run.steps,
                    run.usage,
                    run.error,
                    run.metadata,
                    run.schema_version,
                    run.lease_owner,
                    run.lease_until,
                    run.failure,
                    run.resolutions,
                    run.expires_at,
                    run.settings,
                    run.memory_resource_id,
                    run.memory_thread_id,
                    run.memory_context,
                    run.trace_parent,
                    run.resource_id,
                ]);
                match inserted {
                    Ok(_) => {}
                    Err(err) if is_unique_violation(&err) => {
                        return Err(StoreError::AlreadyExists {
                            run_id: run.run_id.clone(),
                        });
                    }
                    Err(err) => return Err(StoreError::backend(err)),
                }
                insert_messages(conn, &run.run_id, 0, bodies)?;
                if let (Some(resource_id), Some(thread_id), Some(context)) =
                    (&run.memory_resource_id, &run.memory_thread_id, run.memory_context)
                {
                    // The run's own messages, after those it read from the
                    // thread as context.
                    let own = usize::try_from(context).unwrap_or(0).min(bodies.len());
                    let append = threads::Append {
                        resource_id,
                        thread_id,
                        agent_id: &run.agent_id,
                        run_id: &run.run_id,
                        first_run_seq: own as i64,
                        at: run.written_at,
                    };
                    threads::append(conn, &append, &bodies[own..])?;
                }
                Ok(0)
            }
            Write::Update { step, bodies } => {
                // A step leaves the row's layout version as the run was
                // created with (what decides it, the run's settings and
                // thread, never changes), unless it records what only a
                // newer layout holds (an edited approval): then the row is
                // raised to it, so an older build refuses the run from then
                // on instead of misreading it.
                //
                // New resolutions are appended to the column's text while
                // the row holds fewer than `RESOLUTIONS_IN_ROW` (it only ever
                // holds compact JSON arrays, written by serde_json or
                // SQLite's own JSON functions, so nothing is parsed and
                // rebuilt). Past that, and for a run whose resolutions went
                // there already, they are rows of `run_resolutions`, and the
                // row is raised to their layout, which is read back with
                // the row's counts, and at that layout the rows are inserted.
                let mut update = conn.prepare_cached(UPDATE_RUN).map_err(StoreError::backend)?;
                let written = update
                    .execute(params![
                        step.status,
                        step.updated_at,
                        step.pending,
                        step.step_results,
                        bodies.len() as i64,
                        step.steps,
                        step.usage,
                        step.error,
                        step.failure,
                        step.lease_owner,
                        step.lease_until,
                        step.expires_at,
                        step.resolutions,
                        step.run_id,
                        step.expected_version,
                        RUN_SCHEMA_VERSION,
                        step.layout,
                        step.resolution_bodies.len() as i64,
                        RESOLUTIONS_IN_ROW,
                        RESOLUTION_ROWS_LAYOUT,
                    ])
                    .map_err(StoreError::backend)?;
                if written == 0 {
                    return Err(explain_missed_write(
                        &step.run_id,
                        step.expected_version,
                        row_state(conn, &step.run_id)?,
                    ));
                }
                // What the rows below are numbered and filed by, read back
                // by the run's key. `RETURNING` would hand it over too, but
                // SQLite gathers a statement's returned rows in a temporary
                // table, built and dropped at every write.
                let version = step.expected_version + 1;
                let (message_count, agent_id, resource_id, thread_id, layout) = conn
                    .prepare_cached(
                        "SELECT message_count, agent_id, memory_resource_id, memory_thread_id, schema_version \
                         FROM runs WHERE run_id = ?",
                    )
                    .and_then(|mut written| {
                        written.query_row([&step.run_id], |row| {
                            Ok((
                                row.get::<_, i64>(0)?,
                                row.get::<_, String>(1)?,
                                row.get::<_, Option<String>>(2)?,
                                row.get::<_, Option<String>>(3)?,
                                row.get::<_, i32>(4)?,
                            ))
                        })
                    })
                    .map_err(StoreError::backend)?;
                if layout >= RESOLUTION_ROWS_LAYOUT {
                    insert_resolution_rows(conn, &step.run_id, version, &step.resolution_bodies)?;
                }
                // Only the new messages, numbered on from what was stored.
                let first_seq = message_count - bodies.len() as i64;
                insert_messages(conn, &step.run_id, first_seq, bodies)?;
                if let (Some(resource_id), Some(thread_id)) = (&resource_id, &thread_id)
                    && !bodies.is_empty()
                {
                    let append = threads::Append {
                        resource_id,
                        thread_id,
                        agent_id: &agent_id,
                        run_id: &step.run_id,
                        first_run_seq: first_seq,
                        at: step.updated_at,
                    };
                    threads::append(conn, &append, bodies)?;
                }
                outbox::insert(conn, &step.outbox)?;
                grants::insert(conn, &step.grants)?;
                Ok(version)
            }
            Write::Claim {
                at,
                run_id,
                expected_version,
                owner,
                until,
            } => {
                // One statement: the status and version test and the write
                // happen under SQLite's single write lock, so of concurrent
                // claimants in any number of processes (or in one batch)
                // exactly one matches the row.
                let claimed = conn
                    .prepare_cached(CLAIM_RUN)
                    .and_then(|mut claim| {
                        claim.execute(params![at, owner, until, run_id, expected_version, RUN_SCHEMA_VERSION])
                    })
                    .map_err(StoreError::backend)?;
                // The version the statement wrote, known without `RETURNING`
                // and the temporary table SQLite builds for it.
                match claimed {
                    1 => Ok(expected_version + 1),
                    _ => Err(explain_missed_write(
                        run_id,
                        *expected_version,
                        row_state(conn, run_id)?,
                    )),
                }
            }
            Write::Renew { run_id, owner, until } => {
                let renewed = conn
                    .prepare_cached(
                        "UPDATE runs SET lease_until = ? \
                         WHERE run_id = ? AND status = 'running' AND lease_owner = ? AND schema_version <= ?",
                    )
                    .and_then(|mut renew| renew.execute(params![until, run_id, owner, RUN_SCHEMA_VERSION]))
                    .map_err(StoreError::backend)?;
                if renewed == 1 {
                    return Ok(0);
                }
                Err(match row_state(conn, run_id)? {
                    None => StoreError::NotFound { run_id: run_id.clone() },
                    Some(state) => match crate::row::check_schema_version(run_id, state.schema_version) {
                        Err(newer) => newer,
                        Ok(()) => StoreError::LeaseLost {
                            run_id: run_id.clone(),
                            owner: owner.clone(),
                        },
                    },
                })
            }
            Write::Reclaim {
                at,
                run_id,
                expected_version,
                owner,
                until,
                now,
                resolution,
            } => {
                // As `Claim`: one statement, so of concurrent reclaimers
                // exactly one matches the row; the lease test is in it too,
                // so an owner that renewed meanwhile keeps its run.
                // Who took the run over is appended as a step's resolutions
                // are (see `Update`): to the row's column while it has room,
                // else as a row of `run_resolutions`.
                let reclaimed = conn
                    .prepare_cached(
                        "UPDATE runs SET status = 'running', version = version + 1, updated_at = ?1, \
                         lease_owner = ?2, lease_until = ?3, error = NULL, failure = NULL, \
                         resolutions = CASE WHEN ?4 IS NULL OR schema_version >= ?9 \
                           OR json_array_length(resolutions) >= ?10 THEN resolutions \
                         ELSE json_insert(resolutions, '$[#]', json(?4)) END, \
                         schema_version = CASE WHEN ?4 IS NULL OR (schema_version < ?9 \
                           AND json_array_length(resolutions) < ?10) THEN schema_version \
                         ELSE MAX(schema_version, ?9) END \
                         WHERE run_id = ?5 AND version = ?6 AND schema_version <= ?7 \
                         AND (status = 'failed' OR (status = 'running' AND (lease_until IS NULL OR lease_until <= ?8))) \
                         RETURNING version, schema_version",
                    )
                    .and_then(|mut reclaim| {
                        reclaim
                            .query_row(
                                params![
                                    at,
                                    owner,
                                    until,
                                    resolution,
                                    run_id,
                                    expected_version,
                                    RUN_SCHEMA_VERSION,
                                    now,
                                    RESOLUTION_ROWS_LAYOUT,
                                    RESOLUTIONS_IN_ROW,
                                ],
                                |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i32>(1)?)),
                            )
                            .optional()
                    })
                    .map_err(StoreError::backend)?;
                match reclaimed {
                    Some((version, layout)) => {
                        if layout >= RESOLUTION_ROWS_LAYOUT
                            && let Some(resolution) = resolution
                        {
                            insert_resolution_rows(conn, run_id, version, std::slice::from_ref(resolution))?;
                        }
                        Ok(version)
                    }
                    None => Err(explain_missed_write(
                        run_id,
                        *expected_version,
                        row_state(conn, run_id)?,
                    )),
                }
            }
            Write::Prune { before } => {
                // Messages go with their run (ON DELETE CASCADE), in the
                // same statement.
                let deleted = conn
                    .prepare_cached(PRUNE)
                    .and_then(|mut prune| prune.execute(params![before]))
                    .map_err(StoreError::backend)?;
                Ok(i64::try_from(deleted).unwrap_or(i64::MAX))
            }
            Write::ClaimDeliveries {
                now,
                owner,
                until,
                limit,
                token,
            } => outbox::claim(conn, *now, owner, *until, *limit, token),
            Write::FinishDelivery { id, owner, outcome } => outbox::finish(conn, id, owner, outcome),
            Write::CreateThread(thread) => threads::create(conn, thread),
            Write::UpdateThread(change) => threads::update(conn, change),
            Write::DeleteThread { resource_id, thread_id } => threads::delete(conn, resource_id, thread_id),
            Write::RevokeGrant(revocation) => grants::revoke(conn, revocation),
            Write::CreateLink(link) => links::create(conn, link),
            Write::ChangeLink(change) => links::change(conn, change),
        }
    }
}

/// `INSERT INTO messages ... VALUES (?, ?, ?), (?, ?, ?), ...` for `rows` rows.
fn insert_messages_sql(rows: usize) -> String {
    const HEAD: &str = "INSERT INTO messages (run_id, seq, body) VALUES (?, ?, ?)";
    const ROW: &str = ", (?, ?, ?)";
    let mut sql = String::with_capacity(HEAD.len() + ROW.len() * rows.saturating_sub(1));
    sql.push_str(HEAD);
    for _ in 1..rows {
        sql.push_str(ROW);
    }
    sql
}

/// Appends `bodies` numbered from `first_seq`, in one statement per
/// [`MESSAGES_PER_INSERT`] messages.
fn insert_messages(conn: &Connection, run_id: &str, first_seq: i64, bodies: &[String]) -> Result<(), StoreError> {
    let mut seq = first_seq;
    for chunk in bodies.chunks(MESSAGES_PER_INSERT) {
        let seqs: Vec<i64> = (seq..).take(chunk.len()).collect();
        let mut values: Vec<&dyn ToSql> = Vec::with_capacity(chunk.len() * 3);
        for (body, seq) in chunk.iter().zip(&seqs) {
            values.push(&run_id);
            values.push(seq);
            values.push(body);
        }
        conn.prepare_cached(&insert_messages_sql(chunk.len()))
            .and_then(|mut insert| insert.execute(values.as_slice()))
            .map_err(StoreError::backend)?;
        seq += chunk.len() as i64;
    }
    Ok(())
}

/// Stores `bodies`, resolutions of `run_id` past its row's, as rows of
/// `run_resolutions` made by the write that left the run at `version`.
fn insert_resolution_rows(conn: &Connection, run_id: &str, version: i64, bodies: &[String]) -> Result<(), StoreError> {
    let mut insert = conn
        .prepare_cached("INSERT INTO run_resolutions (run_id, version, n, body) VALUES (?, ?, ?, ?)")
        .map_err(StoreError::backend)?;
    for (n, body) in bodies.iter().enumerate() {
        insert
            .execute(params![run_id, version, n as i64, body])
            .map_err(StoreError::backend)?;
    }
    Ok(())
}

/// The status and version of a row, read on the write connection so that a
/// write earlier in the same batch is seen.
fn row_state(conn: &Connection, run_id: &str) -> Result<Option<RowState>, StoreError> {
    conn.prepare_cached("SELECT status, version, schema_version FROM runs WHERE run_id = ?")
        .and_then(|mut read| {
            read.query_row([run_id], |row| {
                Ok(RowState {
                    status: row.get(0)?,
                    version: row.get(1)?,
                    schema_version: row.get(2)?,
                })
            })
            .optional()
        })
        .map_err(StoreError::backend)
}

/// A write handed to the thread and where its result goes.
pub(crate) struct Queued {
    pub(crate) write: Write,
    pub(crate) reply: oneshot::Sender<Result<i64, StoreError>>,
}

/// What the write thread is asked to do.
// Moved once into the channel: boxing the write would cost an allocation per
// write for nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Job {
    Write(Queued),
    /// Finish the jobs before this one, answer, and stop.
    Close(oneshot::Sender<()>),
}

/// An error for a write that could not be done, with a reason (several
/// writes of a batch each get their own).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct WriteFailed(pub(crate) String);

pub(crate) fn failed(reason: impl Into<String>) -> StoreError {
    StoreError::backend(WriteFailed(reason.into()))
}

/// The write thread's loop: until the store is closed or dropped (every
/// sender gone), takes the next job and those queued behind it, and writes
/// them. The connection is closed when the loop ends.
pub(crate) fn run(mut conn: Connection, jobs: mpsc::Receiver<Job>, sync: SqliteSync) {
    let mut syncing = Syncing::new(sync);
    let mut batch = Vec::new();
    while let Ok(job) = jobs.recv() {
        let mut close = None;
        let mut next = Some(job);
        while let Some(job) = next.take() {
            match job {
                Job::Write(queued) => batch.push(queued),
                Job::Close(done) => {
                    close = Some(done);
                    break;
                }
            }
            if batch.len() < MAX_BATCH {
                next = jobs.try_recv().ok();
            }
        }
        // A caller that stopped waiting before its write was taken does not
        // get it written.
        batch.retain(|queued| !queued.reply.is_closed());
        write_batch(&mut conn, &mut syncing, std::mem::take(&mut batch));
        if let Some(done) = close {
            let _ = done.send(());
            return;
        }
    }
}

/// The write connection's `synchronous` setting, switched per batch: with
/// [`SqliteSync::Full`], a batch of new runs only is committed with
/// `NORMAL` (no fsync of its own).
#[derive(Debug)]
pub(crate) struct Syncing {
    configured: SqliteSync,
    /// The connection is at `NORMAL` while configured `FULL`.
    relaxed: bool,
}

impl Syncing {
    /// The connection was opened with `configured`.
    pub(crate) fn new(configured: SqliteSync) -> Self {
        Syncing {
            configured,
            relaxed: false,
        }
    }

    /// Sets the connection up for `batch`. An error means the batch could
    /// not be made as durable as it must be, and must not be written.
    fn prepare(&mut self, conn: &Connection, batch: &[Queued]) -> rusqlite::Result<()> {
        let relax = self.configured == SqliteSync::Full && !batch.iter().any(|queued| queued.write.needs_own_fsync());
        if relax != self.relaxed {
            let pragma = if relax {
                "PRAGMA synchronous = NORMAL"
            } else {
                "PRAGMA synchronous = FULL"
            };
            conn.prepare_cached(pragma)?.execute([])?;
            self.relaxed = relax;
        }
        Ok(())
    }
}

/// Writes `batch`: alone if it is one write, otherwise together in one
/// transaction (falling back to one by one if a statement fails), and sends
/// each write its result.
pub(crate) fn write_batch(conn: &mut Connection, syncing: &mut Syncing, mut batch: Vec<Queued>) {
    if batch.is_empty() {
        return;
    }
    if let Err(e) = syncing.prepare(conn, &batch) {
        let reason = format!("could not set how the write reaches the disk: {e}");
        for queued in batch {
            let _ = queued.reply.send(Err(failed(reason.clone())));
        }
        return;
    }
    if batch.len() <= 1 {
        if let Some(queued) = batch.pop() {
            let result = write_one(conn, &queued.write);
            let _ = queued.reply.send(result);
        }
        return;
    }
    match write_together(conn, &batch) {
        Together::Committed(results) => {
            for (queued, result) in batch.into_iter().zip(results) {
                let _ = queued.reply.send(result);
            }
        }
        Together::Failed(reason) => {
            for queued in batch {
                let _ = queued.reply.send(Err(failed(reason.clone())));
            }
        }
        Together::RolledBack(err) => {
            tracing::debug!(error = %err, writes = batch.len(), "a group commit was rolled back; writing its writes one by one");
            for queued in batch {
                let result = write_one(conn, &queued.write);
                let _ = queued.reply.send(result);
            }
        }
    }
}

enum Together {
    /// Committed: each write's own result.
    Committed(Vec<Result<i64, StoreError>>),
    /// Nothing could be written (no write lock, the commit failed): every
    /// write fails with this.
    Failed(String),
    /// A statement failed and the batch was rolled back: nothing was
    /// written, so each write can be run again alone.
    RolledBack(StoreError),
}

fn write_together(conn: &Connection, batch: &[Queued]) -> Together {
    if let Err(e) = begin(conn) {
        return Together::Failed(format!("could not start a write: {e}"));
    }
    let mut results = Vec::with_capacity(batch.len());
    for queued in batch {
        match queued.write.apply(conn) {
            Err(err @ StoreError::Backend(_)) => {
                rollback(conn);
                return Together::RolledBack(err);
            }
            result => results.push(result),
        }
    }
    match commit(conn) {
        Ok(()) => Together::Committed(results),
        Err(e) => Together::Failed(format!("the write could not be committed: {e}")),
    }
}

/// One write in its own transaction (or none, for a single statement).
fn write_one(conn: &Connection, write: &Write) -> Result<i64, StoreError> {
    if !write.needs_transaction() {
        return write.apply(conn);
    }
    begin(conn).map_err(StoreError::backend)?;
    match write.apply(conn) {
        Ok(value) => commit(conn).map(|()| value).map_err(StoreError::backend),
        Err(err) => {
            rollback(conn);
            Err(err)
        }
    }
}

/// `BEGIN IMMEDIATE`: the write lock up front (a transaction that read first
/// and then wrote could fail at once with `SQLITE_BUSY_SNAPSHOT`, which no
/// busy timeout retries). A transaction some failure left open is rolled
/// back first, so that one failure cannot stop every later write.
fn begin(conn: &Connection) -> rusqlite::Result<()> {
    rollback(conn);
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([]).map(drop)
}

/// Commits; if the commit fails, makes sure no transaction is left open (a
/// failed `COMMIT` can leave it open, e.g. when the lock is busy).
fn commit(conn: &Connection) -> rusqlite::Result<()> {
    let committed = conn.prepare_cached("COMMIT").and_then(|mut commit| commit.execute([]));
    match committed {
        Ok(_) => Ok(()),
        Err(e) => {
            rollback(conn);
            Err(e)
        }
    }
}

/// Rolls back the open transaction, if SQLite has not already done so itself
/// (as it does on some errors, an I/O error for one).
fn rollback(conn: &Connection) {
    if !conn.is_autocommit()
        && let Err(e) = conn.execute_batch("ROLLBACK")
    {
        tracing::warn!(error = %e, "rolling back a failed SQLite write failed");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Batches built by hand and written with [`write_batch`], so that the
    //! writes are certainly committed together.
    use askloop::{Message, RunRecord, RunStatus, RunStore, RunUpdate, Usage};
    use chrono::Utc;

    use super::*;
    use crate::SqliteStore;

    /// A write connection of its own to the store's file, as the write
    /// thread has.
    fn raw(store: &SqliteStore) -> Connection {
        crate::sqlite::connection::open(
            store.path(),
            crate::sqlite::connection::Role::Writer,
            &Default::default(),
        )
        .unwrap()
    }

    /// The opcodes of the program SQLite compiles `sql` to.
    fn program(conn: &Connection, sql: &str) -> Vec<String> {
        let mut explain = conn.prepare(&format!("EXPLAIN {sql}")).unwrap();
        let unbound = std::iter::repeat_n(rusqlite::types::Null, explain.parameter_count());
        explain
            .query_map(rusqlite::params_from_iter(unbound), |row| row.get::<_, String>(1))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// A round trip writes its run with these statements four times. None of
    /// them builds a temporary table (`OpenEphemeral`), which SQLite makes
    /// for a `RETURNING` clause and for a constant `IN` list of more than two
    /// values, such as a partial index's condition it checks at the write.
    #[tokio::test]
    async fn a_runs_writes_build_no_temporary_table() {
        let (_dir, store) = store().await;
        let conn = raw(&store);
        for sql in [CREATE_RUN, UPDATE_RUN, CLAIM_RUN, &insert_messages_sql(2)] {
            let program = program(&conn, sql);
            let writes = |op: &String| op == "Insert" || op == "IdxInsert";
            assert!(program.iter().any(writes), "{sql}: {program:?}");
            assert!(!program.iter().any(|op| op == "OpenEphemeral"), "{sql}: {program:?}");
        }
        // The condition as the file held it before, for contrast: the test
        // sees the temporary table where there is one.
        conn.execute_batch(
            "DROP INDEX runs_finished_by_updated; \
             CREATE INDEX runs_finished_by_updated ON runs (status, updated_at) \
             WHERE status IN ('completed', 'failed', 'cancelled');",
        )
        .unwrap();
        assert!(program(&conn, CLAIM_RUN).iter().any(|op| op == "OpenEphemeral"));
    }

    async fn store() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("runs.db")).await.unwrap();
        (dir, store)
    }

    /// A new run of agent `agent` with `messages` messages, as the conformance
    /// suite makes them.
    fn record(run_id: &str, messages: usize) -> RunRecord {
        crate::conformance::new_run(run_id, "agent", Utc::now(), messages)
    }

    fn bodies(texts: &[&str]) -> Vec<String> {
        texts
            .iter()
            .map(|t| serde_json::to_string(&Message::user(*t)).unwrap())
            .collect()
    }

    fn new_run(run_id: &str, texts: &[&str]) -> Write {
        let now = Utc::now().timestamp_micros();
        Write::Create {
            run: NewRun {
                run_id: run_id.to_owned(),
                agent_id: "agent".to_owned(),
                thread_id: None,
                status: "running",
                version: 0,
                created_at: now,
                updated_at: now,
                pending: "[]".to_owned(),
                step_results: "[]".to_owned(),
                steps: 0,
                usage: serde_json::to_string(&Usage::default()).unwrap(),
                error: None,
                metadata: "null".to_owned(),
                settings: "{}".to_owned(),
                schema_version: 1,
                lease_owner: None,
                lease_until: None,
                failure: None,
                resolutions: "[]".to_owned(),
                expires_at: None,
                memory_resource_id: None,
                memory_thread_id: None,
                memory_context: None,
                trace_parent: None,
                resource_id: None,
                written_at: now,
            },
            bodies: bodies(texts),
        }
    }

    fn step(run_id: &str, expected_version: i64, status: RunStatus, texts: &[&str]) -> Write {
        Write::Update {
            step: Step {
                updated_at: Utc::now().timestamp_micros(),
                run_id: run_id.to_owned(),
                expected_version,
                status: status.as_str(),
                pending: "[]".to_owned(),
                step_results: "[]".to_owned(),
                steps: 1,
                usage: serde_json::to_string(&Usage::default()).unwrap(),
                error: None,
                failure: None,
                lease_owner: None,
                lease_until: None,
                resolutions: None,
                resolution_bodies: Vec::new(),
                layout: 1,
                expires_at: None,
                outbox: Vec::new(),
                grants: Vec::new(),
            },
            bodies: bodies(texts),
        }
    }

    fn claim(run_id: &str, expected_version: i64) -> Write {
        Write::Claim {
            at: Utc::now().timestamp_micros(),
            run_id: run_id.to_owned(),
            expected_version,
            owner: "test".to_owned(),
            until: Utc::now().timestamp_micros() + 60_000_000,
        }
    }

    /// Writes `writes` as one batch; their results in order.
    async fn batch(store: &SqliteStore, writes: Vec<Write>) -> Vec<Result<i64, StoreError>> {
        batch_on(&mut raw(store), &mut Syncing::new(SqliteSync::Full), writes).await
    }

    /// Writes `writes` as one batch on `conn` with `syncing`; their results
    /// in order.
    async fn batch_on(
        conn: &mut Connection,
        syncing: &mut Syncing,
        writes: Vec<Write>,
    ) -> Vec<Result<i64, StoreError>> {
        let (queued, results): (Vec<_>, Vec<_>) = writes
            .into_iter()
            .map(|write| {
                let (reply, result) = oneshot::channel();
                (Queued { write, reply }, result)
            })
            .unzip();
        write_batch(conn, syncing, queued);
        let mut out = Vec::new();
        for result in results {
            out.push(result.await.expect("every write of a batch gets its result"));
        }
        out
    }

    /// A run created with one message and suspended: version 1.
    async fn suspended(store: &SqliteStore, run_id: &str) {
        store
            .create(&record(run_id, 1), &[Message::user("start")])
            .await
            .unwrap();
        let version = store
            .update(RunUpdate {
                run_id,
                expected_version: 0,
                status: RunStatus::Suspended,
                pending: &[],
                step_results: &[],
                append: &[],
                steps: 1,
                usage: Usage::default(),
                error: None,
                failure: None,
                lease: None,
                resolutions: &[],
                outbox: &[],
                grants: &[],
            })
            .await
            .unwrap();
        assert_eq!(version, 1);
    }

    fn texts(messages: &[Message]) -> Vec<String> {
        messages
            .iter()
            .map(|m| serde_json::to_value(m).unwrap()["content"].to_string())
            .collect()
    }

    #[tokio::test]
    async fn of_claims_of_one_run_in_one_batch_exactly_one_wins() {
        let (_dir, store) = store().await;
        suspended(&store, "a").await;
        let results = batch(&store, (0..5).map(|_| claim("a", 1)).collect()).await;
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "{results:?}");
        assert_eq!(*results[0].as_ref().unwrap(), 2);
        for lost in &results[1..] {
            assert!(
                matches!(lost, Err(StoreError::Conflict { run_id, .. }) if run_id == "a"),
                "{lost:?}"
            );
        }
        let run = store.get("a").await.unwrap().unwrap();
        assert_eq!((run.status(), run.version), (RunStatus::Running, 2));
    }

    /// Each write of a batch gets its own result; refused ones change nothing
    /// and do not disturb the others, and later writes see earlier ones.
    #[tokio::test]
    async fn refused_writes_in_a_batch_leave_the_others_written() {
        let (_dir, store) = store().await;
        suspended(&store, "a").await;
        suspended(&store, "b").await;
        let results = batch(
            &store,
            vec![
                claim("a", 1),                                     // 2
                step("b", 7, RunStatus::Completed, &["stale"]),    // Conflict
                claim("a", 1),                                     // Conflict: sees the first claim
                step("a", 2, RunStatus::Completed, &["a1", "a2"]), // 3: sees the first claim
                new_run("a", &["again"]),                          // AlreadyExists
                step("missing", 0, RunStatus::Running, &["x"]),    // NotFound
                claim("missing", 0),                               // NotFound
                new_run("c", &["c0", "c1"]),                       // created
                step("c", 0, RunStatus::Running, &["c2"]),         // 1: sees the creation
                step("c", 0, RunStatus::Running, &["never"]),      // Conflict
            ],
        )
        .await;
        assert_eq!(*results[0].as_ref().unwrap(), 2);
        assert!(matches!(&results[1], Err(StoreError::Conflict { run_id, expected_version: 7 }) if run_id == "b"));
        assert!(matches!(&results[2], Err(StoreError::Conflict { run_id, .. }) if run_id == "a"));
        assert_eq!(*results[3].as_ref().unwrap(), 3);
        assert!(matches!(&results[4], Err(StoreError::AlreadyExists { run_id }) if run_id == "a"));
        assert!(matches!(&results[5], Err(StoreError::NotFound { run_id }) if run_id == "missing"));
        assert!(matches!(&results[6], Err(StoreError::NotFound { run_id }) if run_id == "missing"));
        assert_eq!(*results[7].as_ref().unwrap(), 0);
        assert_eq!(*results[8].as_ref().unwrap(), 1);
        assert!(matches!(&results[9], Err(StoreError::Conflict { run_id, .. }) if run_id == "c"));

        let a = store.get("a").await.unwrap().unwrap();
        assert_eq!((a.status(), a.version, a.message_count), (RunStatus::Completed, 3, 3));
        assert_eq!(
            texts(&store.messages("a").await.unwrap()),
            ["\"start\"", "\"a1\"", "\"a2\""]
        );
        let b = store.get("b").await.unwrap().unwrap();
        assert_eq!((b.status(), b.version, b.message_count), (RunStatus::Suspended, 1, 1));
        let c = store.get("c").await.unwrap().unwrap();
        assert_eq!((c.version, c.message_count), (1, 3));
        assert_eq!(
            texts(&store.messages("c").await.unwrap()),
            ["\"c0\"", "\"c1\"", "\"c2\""]
        );
        assert!(store.get("missing").await.unwrap().is_none());
    }

    /// A row written by a newer askloop is refused inside a batch; the
    /// others are written.
    #[tokio::test]
    async fn a_newer_row_in_a_batch_is_refused_alone() {
        let (_dir, store) = store().await;
        suspended(&store, "new").await;
        suspended(&store, "old").await;
        raw(&store)
            .execute(
                "UPDATE runs SET schema_version = ? WHERE run_id = 'new'",
                [RUN_SCHEMA_VERSION + 1],
            )
            .unwrap();
        let results = batch(
            &store,
            vec![
                claim("new", 1),
                claim("old", 1),
                step("new", 1, RunStatus::Completed, &["x"]),
            ],
        )
        .await;
        assert!(matches!(&results[0], Err(StoreError::NewerSchema { run_id, .. }) if run_id == "new"));
        assert_eq!(*results[1].as_ref().unwrap(), 2);
        assert!(matches!(&results[2], Err(StoreError::NewerSchema { run_id, .. }) if run_id == "new"));
        let row: (i64, i64) = raw(&store)
            .query_row(
                "SELECT version, message_count FROM runs WHERE run_id = 'new'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        assert_eq!(row, (1, 1));
    }

    /// A statement failing half-way through a write (here: a stray message
    /// row where the step's new message goes) rolls the batch back; each
    /// write is then run alone, so only that one fails, and it leaves
    /// nothing half-written.
    #[tokio::test]
    async fn a_write_failing_half_way_fails_alone_and_leaves_nothing_behind() {
        let (_dir, store) = store().await;
        suspended(&store, "a").await;
        suspended(&store, "broken").await;
        raw(&store)
            .execute(
                "INSERT INTO messages (run_id, seq, body) VALUES ('broken', 1, '\"stray\"')",
                [],
            )
            .unwrap();
        let results = batch(
            &store,
            vec![
                claim("a", 1),
                new_run("c", &["c0"]),
                claim("broken", 1),
                step("broken", 2, RunStatus::Completed, &["b1"]),
                step("a", 2, RunStatus::Completed, &["a1"]),
            ],
        )
        .await;
        assert_eq!(*results[0].as_ref().unwrap(), 2);
        assert_eq!(*results[1].as_ref().unwrap(), 0);
        assert_eq!(*results[2].as_ref().unwrap(), 2);
        assert!(matches!(&results[3], Err(StoreError::Backend(_))), "{:?}", results[3]);
        assert_eq!(*results[4].as_ref().unwrap(), 3);

        // The failed step changed neither the row nor the messages.
        let broken = store.get("broken").await.unwrap().unwrap();
        assert_eq!(
            (broken.status(), broken.version, broken.message_count),
            (RunStatus::Running, 2, 1)
        );
        let rows: i64 = raw(&store)
            .query_row("SELECT COUNT(*) FROM messages WHERE run_id = 'broken'", [], |row| {
                row.get(0)
            })
            .unwrap();
        assert_eq!(rows, 2, "the first message and the stray one");
        assert_eq!(store.get("a").await.unwrap().unwrap().message_count, 2);
        assert_eq!(store.get("c").await.unwrap().unwrap().message_count, 1);
        // The store goes on writing.
        assert_eq!(
            store
                .claim("missing", 0, &crate::conformance::test_lease())
                .await
                .unwrap_err()
                .to_string(),
            "run missing not found"
        );
        store.create(&record("d", 0), &[]).await.unwrap();
    }

    /// Writes `writes` as one batch on `conn` with `syncing`; then the
    /// connection's `synchronous` setting (1 NORMAL, 2 FULL).
    async fn synchronous_after(conn: &mut Connection, syncing: &mut Syncing, writes: Vec<Write>) -> i64 {
        // Written or refused, but answered.
        batch_on(conn, syncing, writes).await;
        conn.query_row("PRAGMA synchronous", [], |row| row.get(0)).unwrap()
    }

    /// With FULL, a batch of new runs only is committed without an fsync
    /// of its own (NORMAL); any batch with another write is fsynced (FULL),
    /// also when new runs are in it. With NORMAL nothing is switched.
    #[tokio::test]
    async fn only_a_batch_of_new_runs_skips_its_own_fsync() {
        let (_dir, store) = store().await;
        let mut conn = raw(&store);
        let mut full = Syncing::new(SqliteSync::Full);
        assert_eq!(
            synchronous_after(&mut conn, &mut full, vec![new_run("a", &["a0"])]).await,
            1
        );
        assert_eq!(
            synchronous_after(&mut conn, &mut full, vec![new_run("b", &[]), new_run("c", &["c0"])]).await,
            1
        );
        assert_eq!(
            synchronous_after(&mut conn, &mut full, vec![step("a", 0, RunStatus::Suspended, &["a1"])]).await,
            2
        );
        assert_eq!(
            synchronous_after(&mut conn, &mut full, vec![new_run("d", &[]), claim("missing", 0)]).await,
            2,
            "a refused write still makes its batch durable"
        );
        assert_eq!(
            synchronous_after(&mut conn, &mut full, vec![new_run("e", &[])]).await,
            1
        );
        assert_eq!(
            synchronous_after(&mut conn, &mut full, vec![step("e", 0, RunStatus::Completed, &[])]).await,
            2
        );

        let mut normal_conn = crate::sqlite::connection::open(
            store.path(),
            crate::sqlite::connection::Role::Writer,
            &crate::SqliteOptions::default().sync(SqliteSync::Normal),
        )
        .unwrap();
        let mut normal = Syncing::new(SqliteSync::Normal);
        assert_eq!(
            synchronous_after(&mut normal_conn, &mut normal, vec![new_run("f", &[])]).await,
            1
        );
        assert_eq!(
            synchronous_after(
                &mut normal_conn,
                &mut normal,
                vec![step("f", 0, RunStatus::Completed, &[])]
            )
            .await,
            1
        );
    }

    #[tokio::test]
    async fn after_close_writes_fail_and_queued_ones_were_done() {
        let (_dir, store) = store().await;
        let writes: Vec<_> = (0..20)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { store.create(&record(&format!("r{i}"), 0), &[]).await })
            })
            .collect();
        for write in writes {
            write.await.unwrap().unwrap();
        }
        store.close().await;
        let err = store.create(&record("late", 0), &[]).await.unwrap_err();
        assert!(err.to_string().contains("closed"), "{err}");
    }
}

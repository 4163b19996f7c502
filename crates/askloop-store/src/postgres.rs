//! [`PostgresStore`]: runs in PostgreSQL, shared by any number of askloop
//! processes on any number of machines.
//!
//! Claims and step writes are compare-and-sets on the run's version. Under
//! PostgreSQL's default READ COMMITTED isolation a second `UPDATE ... WHERE
//! version = $n` of the same row waits for the first to commit and then
//! re-checks its condition against the new row, so it matches nothing and
//! the writer gets [`StoreError::Conflict`]: exactly one wins, whatever the
//! number of servers.
//!
//! No wait is unbounded: every connection sets `lock_timeout` and
//! `statement_timeout` (see [`PostgresOptions`]), so a run whose row or
//! table another session holds locked fails with a message saying so
//! instead of hanging.

mod changes;
mod errors;
mod grants;
mod links;
mod nul;
mod outbox;
mod schema;
mod settings;
mod threads;

use std::sync::Arc;
use std::time::Duration;

use askloop::{
    AgentWaiting, ChangeFeed, Clock, Delivery, DeliveryOutcome, DeliveryStore, Lease, Message, RUN_SCHEMA_VERSION,
    Resolution, RunChanges, RunCursor, RunQuery, RunRecord, RunStatus, RunStore, RunUpdate, StoreError, ThreadKey,
    ThreadStore,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, Row};

use crate::resolution_rows::ResolutionRows;
use crate::row::{
    JsonColumns, RESOLUTION_ROWS_LAYOUT, RESOLUTIONS_IN_ROW, RowState, StoredRun, explain_missed_write,
    finished_condition, parse_message, parse_resolution_rows, resolution_rows_condition,
};
use errors::{Limits, PostgresFailure};
use schema::quoted;
pub use settings::{DEFAULT_LOCK_TIMEOUT, DEFAULT_POSTGRES_SCHEMA, DEFAULT_STATEMENT_TIMEOUT, PostgresOptions};
use settings::{check_schema_name, options_set, pg_duration, search_path_schema, split_url};

/// How long opening a store waits for the server's first answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs stored in PostgreSQL.
///
/// Cloning is cheap and shares the pool.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pub(crate) pool: PgPool,
    schema: String,
    limits: Limits,
    /// What stamps each write's `updated_at`.
    clock: Arc<dyn Clock>,
    /// The resolution rows of the long runs read last, shared by clones.
    resolution_rows: Arc<ResolutionRows>,
}

impl PostgresStore {
    /// Connects to `url` (`postgres://...` or `postgresql://...`) and brings
    /// the tables up to date. The URL's query may name the schema
    /// (`?schema=NAME`) and the limits (`?lock_timeout=5s`,
    /// `?statement_timeout=30s`); see [`PostgresOptions`].
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects to `url` with `options`, which win over the URL's query.
    /// Every connection of the pool uses the store's schema (its
    /// `search_path`), so several stores can share one database apart
    /// (tests in parallel, tenants), and none touches another
    /// application's tables.
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<PostgresStore, StoreError> {
        let shown = redact(url);
        let Resolved {
            connect,
            schema: tables,
            limits,
        } = resolve(url, &shown, &options)?;
        // One direct connection first, so a server that is not there fails
        // at once (the pool would retry a refused connection for its whole
        // acquire timeout); it also places and migrates the tables.
        let mut setup = match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&connect)).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(err)) => return Err(cannot_connect(&shown, &limits, &err)),
            Err(_) => {
                return Err(StoreError::backend(PostgresFailure(format!(
                    "cannot connect to PostgreSQL at {shown}: no answer within {} s",
                    CONNECT_TIMEOUT.as_secs()
                ))));
            }
        };
        let migrated = schema::migrate(&mut setup, &tables).await;
        let present = match migrated {
            Ok(()) => Some(schema::columns(&mut setup, &tables).await),
            Err(_) => None,
        };
        let _ = setup.close().await;
        if let Err(err) = migrated {
            return Err(match err {
                Ok(err) => limits.failure(&format!("preparing schema {tables}"), err),
                Err(err) => limits.migration_failure(&tables, err),
            });
        }
        if let Some(present) = present {
            let present = present.map_err(|e| limits.failure("reading the columns of askloop's tables", e))?;
            let missing = crate::columns::missing(&present);
            if !missing.is_empty() {
                return Err(StoreError::Unusable {
                    location: format!("{shown} (schema {tables})"),
                    fault: askloop::DatabaseFault::NotADatabase,
                    detail: crate::columns::refusal(&missing, &format!("{tables}._sqlx_migrations")),
                });
            }
        }
        let mut settings = vec![("search_path", quoted(&tables))];
        if let Some(timeout) = limits.lock_timeout {
            settings.push(("lock_timeout", pg_duration(timeout)));
        }
        if let Some(timeout) = limits.statement_timeout {
            settings.push(("statement_timeout", pg_duration(timeout)));
        }
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect.options(settings))
            .await
            .map_err(|err| cannot_connect(&shown, &limits, &err))?;
        Ok(PostgresStore {
            pool,
            schema: tables,
            limits,
            clock: options.clock,
            resolution_rows: Arc::default(),
        })
    }

    /// The schema askloop's tables are in.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Announces a write of `run_id` to the store's change feeds; sent by
    /// PostgreSQL when `tx` commits, and only then.
    async fn announce(&self, tx: &mut sqlx::PgConnection, run_id: &str) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(changes::CHANNEL)
            .bind(changes::payload(&self.schema, run_id)?)
            .execute(tx)
            .await
            .map_err(self.failed(|| format!("announcing the write of run {run_id}")))?;
        Ok(())
    }

    /// `err`, met while doing `action`, in words a user can act on.
    fn failed(&self, action: impl FnOnce() -> String) -> impl FnOnce(sqlx::Error) -> StoreError {
        let limits = self.limits;
        move |err| limits.failure(&action(), err)
    }

    /// One page of a sweep's listing (`sql`: [`STALLED_RUNS`] or
    /// [`EXPIRING_RUNS`], which take the same parameters).
    async fn sweep_page(
        &self,
        sql: &'static str,
        now: DateTime<Utc>,
        after: Option<&RunCursor>,
        limit: u32,
        action: &'static str,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query(sql)
            .bind(now)
            .bind(after.map(|after| after.at))
            .bind(after.map(|after| after.run_id.as_str()))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(self.failed(|| action.to_owned()))?;
        crate::readable_runs(rows.iter().map(|row| stored_run(row)?.into_record()))
    }

    async fn row_state(&self, run_id: &str) -> Result<Option<RowState>, StoreError> {
        let row = sqlx::query("SELECT status, version, schema_version FROM runs WHERE run_id = $1")
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(self.failed(|| format!("reading run {run_id}")))?;
        row.map(|row| RowState::from_row(&row)).transpose()
    }
}

/// What a URL and options ask for.
struct Resolved {
    connect: PgConnectOptions,
    /// The schema of askloop's tables.
    schema: String,
    limits: Limits,
}

/// Reads the URL and merges it with `options` (which win) and the defaults.
fn resolve(url: &str, shown: &str, options: &PostgresOptions) -> Result<Resolved, StoreError> {
    let from_url = split_url(url, shown)?;
    let connect: PgConnectOptions = from_url.url.parse().map_err(|e| {
        StoreError::InvalidLocation(format!(
            "cannot read the PostgreSQL URL {shown}: {e}; expected postgres://USER@HOST:PORT/DATABASE"
        ))
    })?;
    let schema = match options
        .schema
        .clone()
        .or(from_url.schema)
        .or_else(|| search_path_schema(connect.get_options()))
    {
        Some(schema) => {
            check_schema_name(&schema)?;
            schema
        }
        None => DEFAULT_POSTGRES_SCHEMA.to_owned(),
    };
    let own = |set: Option<Duration>, parameter: &str, default: Duration| match set {
        Some(timeout) => Some(timeout),
        // Set in the URL's `options`: PostgreSQL has it.
        None if options_set(connect.get_options(), parameter) => None,
        None => Some(default),
    };
    let limits = Limits {
        lock_timeout: own(
            options.lock_timeout.or(from_url.lock_timeout),
            "lock_timeout",
            DEFAULT_LOCK_TIMEOUT,
        ),
        statement_timeout: own(
            options.statement_timeout.or(from_url.statement_timeout),
            "statement_timeout",
            DEFAULT_STATEMENT_TIMEOUT,
        ),
        acquire_timeout: options.acquire_timeout,
        max_connections: options.max_connections,
    };
    Ok(Resolved {
        connect,
        schema,
        limits,
    })
}

/// The URL was fine; the server was not there or refused us.
fn cannot_connect(shown: &str, limits: &Limits, err: &sqlx::Error) -> StoreError {
    StoreError::backend(PostgresFailure(format!(
        "cannot connect to PostgreSQL at {shown}: {}",
        limits.describe(err)
    )))
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let credentials = &url[scheme_end + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// The columns of `runs` (JSON read back as text), in the order
/// [`stored_run`] reads them.
macro_rules! run_columns {
    () => {
        "run_id, agent_id, thread_id, status, version, created_at, updated_at, pending::text AS pending, \
         step_results::text AS step_results, message_count, steps, usage::text AS usage, error, \
         metadata::text AS metadata, schema_version, lease_owner, lease_until, failure::text AS failure, \
         resolutions::text AS resolutions, settings::text AS settings, memory_resource_id, memory_thread_id, \
         memory_context, trace_parent, resource_id"
    };
}

/// What a read of runs selects: the columns of `runs` (see [`run_columns`]),
/// then the run's resolutions past its row's as one JSON array
/// (`resolution_rows`), NULL when it has none: only a run at layout 7
/// (`RESOLUTION_ROWS_LAYOUT`, `resolution_rows_condition!`) has any.
macro_rules! run_select {
    () => {
        concat!(
            run_columns!(),
            ", CASE WHEN ",
            resolution_rows_condition!(),
            " THEN (SELECT jsonb_agg(body ORDER BY version, n)::text \
             FROM run_resolutions WHERE run_resolutions.run_id = runs.run_id) END AS resolution_rows"
        )
    };
}

/// One run (`$1`), with its resolution rows past those this handle kept
/// from an earlier read: `$2` and `$3` are the creation time of the run
/// they were read of and the version they run through (NULL and -1 for
/// none). `rows_after_kept` says whether they serve: the run is the one
/// they were read of, at that version or a later one. Then
/// `resolution_rows` holds the rows after `$3`; else all of them.
const GET_RUN: &str = concat!(
    "SELECT ",
    run_columns!(),
    ", CASE WHEN ",
    resolution_rows_condition!(),
    " THEN (SELECT jsonb_agg(body ORDER BY version, n)::text FROM run_resolutions \
     WHERE run_resolutions.run_id = runs.run_id \
     AND run_resolutions.version > CASE WHEN kept.serves THEN $3 ELSE -1 END) END AS resolution_rows, \
     kept.serves AS rows_after_kept \
     FROM runs CROSS JOIN LATERAL \
     (SELECT COALESCE(runs.created_at = $2 AND runs.version >= $3, false) AS serves) AS kept \
     WHERE run_id = $1"
);

/// Running runs whose lease ran out (`$1`: now), after the cursor `$2, $3`
/// (last write, run id), oldest write first, from the index of running runs
/// (`runs_running_by_updated`).
const STALLED_RUNS: &str = concat!(
    "SELECT ",
    run_select!(),
    " FROM runs WHERE status = 'running' AND (lease_until IS NULL OR lease_until <= $1) \
     AND ($2::timestamptz IS NULL OR (updated_at, run_id) > ($2, $3)) \
     ORDER BY updated_at, run_id LIMIT $4"
);

/// Suspended runs whose earliest time limit passed (`$1`: now), after the
/// cursor `$2, $3` (time limit, run id), soonest first, from the index of
/// suspended runs with a time limit (`runs_suspended_by_expiry`).
const EXPIRING_RUNS: &str = concat!(
    "SELECT ",
    run_select!(),
    " FROM runs WHERE status = 'suspended' AND expires_at <= $1 \
     AND ($2::timestamptz IS NULL OR (expires_at, run_id) > ($2, $3)) \
     ORDER BY expires_at, run_id LIMIT $4"
);

/// Deletes finished runs last written before `$1` (with their messages, by
/// `ON DELETE CASCADE`), from the index of finished runs.
const PRUNE: &str = concat!("DELETE FROM runs WHERE ", finished_condition!(), " AND updated_at < $1");

fn stored_run(row: &PgRow) -> Result<StoredRun, StoreError> {
    let run_id: String = row
        .try_get("run_id")
        .map_err(|e| StoreError::backend(PostgresFailure(format!("reading a run's id: {e}"))))?;
    let column = |e: sqlx::Error| StoreError::Corrupt {
        run_id: run_id.clone(),
        detail: e.to_string(),
    };
    let json = |name: &str| row.try_get::<String, _>(name).map(nul::decode_json);
    Ok(StoredRun {
        agent_id: row.try_get("agent_id").map_err(column)?,
        thread_id: row.try_get("thread_id").map_err(column)?,
        status: row.try_get("status").map_err(column)?,
        version: row.try_get("version").map_err(column)?,
        created_at: row.try_get("created_at").map_err(column)?,
        updated_at: row.try_get("updated_at").map_err(column)?,
        pending: json("pending").map_err(column)?,
        step_results: json("step_results").map_err(column)?,
        message_count: row.try_get("message_count").map_err(column)?,
        steps: row.try_get("steps").map_err(column)?,
        usage: json("usage").map_err(column)?,
        error: row
            .try_get::<Option<String>, _>("error")
            .map(|e| e.map(nul::decode_text))
            .map_err(column)?,
        metadata: json("metadata").map_err(column)?,
        schema_version: row.try_get("schema_version").map_err(column)?,
        lease_owner: row.try_get("lease_owner").map_err(column)?,
        lease_until: row.try_get("lease_until").map_err(column)?,
        failure: row
            .try_get::<Option<String>, _>("failure")
            .map(|f| f.map(nul::decode_json))
            .map_err(column)?,
        resolutions: json("resolutions").map_err(column)?,
        resolution_rows: row
            .try_get::<Option<String>, _>("resolution_rows")
            .map(|rows| rows.map(nul::decode_json))
            .map_err(column)?,
        settings: json("settings").map_err(column)?,
        memory_resource_id: row.try_get("memory_resource_id").map_err(column)?,
        memory_thread_id: row.try_get("memory_thread_id").map_err(column)?,
        memory_context: row.try_get("memory_context").map_err(column)?,
        trace_parent: row.try_get("trace_parent").map_err(column)?,
        resource_id: row.try_get("resource_id").map_err(column)?,
        run_id: run_id.clone(),
    })
}

/// The JSON columns of a run, storable (see `nul.rs`).
struct PgJson {
    pending: String,
    step_results: String,
    usage: String,
    failure: Option<String>,
    resolutions: Option<String>,
    expires_at: Option<chrono::DateTime<Utc>>,
}

impl PgJson {
    fn of(json: JsonColumns) -> Self {
        PgJson {
            pending: nul::encode_json(&json.pending).into_owned(),
            step_results: nul::encode_json(&json.step_results).into_owned(),
            usage: nul::encode_json(&json.usage).into_owned(),
            failure: json.failure.map(|f| nul::encode_json(&f).into_owned()),
            resolutions: json.resolutions.map(|r| nul::encode_json(&r).into_owned()),
            expires_at: json.expires_at,
        }
    }
}

/// Message bodies to append, serialised and storable.
fn message_bodies(run_id: &str, messages: &[Message]) -> Result<Vec<String>, StoreError> {
    let bodies = crate::row::message_bodies(run_id, messages)?;
    Ok(bodies
        .into_iter()
        .map(|body| match nul::encode_json(&body) {
            std::borrow::Cow::Borrowed(_) => body,
            std::borrow::Cow::Owned(encoded) => encoded,
        })
        .collect())
}

impl PostgresStore {
    /// Appends messages in one statement, whatever their number.
    async fn insert_messages(
        &self,
        tx: &mut sqlx::PgConnection,
        run_id: &str,
        first_seq: i64,
        bodies: &[String],
    ) -> Result<(), StoreError> {
        if bodies.is_empty() {
            return Ok(());
        }
        sqlx::query(
            "INSERT INTO messages (run_id, seq, body) \
             SELECT $1, $2 + m.ord - 1, m.body::jsonb FROM UNNEST($3::text[]) WITH ORDINALITY AS m(body, ord)",
        )
        .bind(run_id)
        .bind(first_seq)
        .bind(bodies)
        .execute(&mut *tx)
        .await
        .map_err(self.failed(|| format!("writing the messages of run {run_id}")))?;
        Ok(())
    }
}

#[async_trait]
impl RunStore for PostgresStore {
    /// The threads, in the same database as the runs: a run's write and
    /// its thread's messages commit together (see `postgres/threads.rs`).
    fn thread_store(&self) -> Option<&dyn ThreadStore> {
        Some(self)
    }

    fn grant_store(&self) -> Option<&dyn askloop::GrantStore> {
        Some(self)
    }

    /// The answer links, in the same database as the runs.
    fn link_store(&self) -> Option<&dyn askloop::LinkStore> {
        Some(self)
    }

    async fn create(&self, run: &RunRecord, messages: &[Message]) -> Result<(), StoreError> {
        let run_id = run.run_id.as_str();
        let json = PgJson::of(JsonColumns::of_record(run)?);
        let metadata = nul::encode_json(&crate::row::to_json(run_id, "metadata", &run.metadata)?).into_owned();
        let settings = nul::encode_json(&crate::row::to_json(run_id, "settings", &run.settings)?).into_owned();
        let error = run.error();
        let error = error.as_deref().map(nul::encode_text);
        let bodies = message_bodies(run_id, messages)?;
        let creating = || format!("creating run {run_id}");
        let mut tx = self.pool.begin().await.map_err(self.failed(creating))?;
        let inserted = sqlx::query(concat!(
            "INSERT INTO runs (",
            "run_id, agent_id, thread_id, status, version, created_at, updated_at, pending, step_results, \
             message_count, steps, usage, error, metadata, schema_version, lease_owner, lease_until, failure, \
             resolutions, expires_at, settings, memory_resource_id, memory_thread_id, memory_context, trace_parent, \
             resource_id",
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9::jsonb, $10, $11, $12::jsonb, $13, $14::jsonb, $15, \
             $16, $17, $18::jsonb, COALESCE($19::jsonb, '[]'::jsonb), $20, $21::jsonb, $22, $23, $24, $25, $26)"
        ))
        .bind(run_id)
        .bind(&run.agent_id)
        .bind(&run.thread_id)
        .bind(run.status().as_str())
        .bind(run.version)
        .bind(run.created_at)
        .bind(run.updated_at)
        .bind(&json.pending)
        .bind(&json.step_results)
        .bind(bodies.len() as i64)
        .bind(i64::from(run.steps))
        .bind(&json.usage)
        .bind(error.as_deref())
        .bind(&metadata)
        .bind(run.schema_version())
        .bind(run.lease.as_ref().map(|lease| lease.owner.as_str()))
        .bind(run.lease.as_ref().map(|lease| lease.until))
        .bind(&json.failure)
        .bind(&json.resolutions)
        .bind(json.expires_at)
        .bind(&settings)
        .bind(run.memory.as_ref().map(|m| m.key.resource_id.as_str()))
        .bind(run.memory.as_ref().map(|m| m.key.thread_id.as_str()))
        .bind(run.memory.as_ref().map(|m| m.context))
        .bind(run.trace_parent.as_deref())
        .bind(run.resource_id.as_deref())
        .execute(&mut *tx)
        .await;
        if let Err(err) = inserted {
            if err.as_database_error().is_some_and(|e| e.is_unique_violation()) {
                return Err(StoreError::AlreadyExists {
                    run_id: run_id.to_owned(),
                });
            }
            return Err(self.limits.failure(&creating(), err));
        }
        self.insert_messages(&mut tx, run_id, 0, &bodies).await?;
        if let Some(memory) = &run.memory {
            // The messages after the context are the run's own; the context
            // is the thread's already.
            let own = usize::try_from(memory.context).unwrap_or(0).min(bodies.len());
            let append = threads::Append {
                key: &memory.key,
                agent_id: &run.agent_id,
                run_id,
                first_run_seq: own as i64,
                bodies: &bodies[own..],
                now: self.clock.now(),
            };
            self.append_to_thread(&mut tx, append).await?;
        }
        self.announce(&mut tx, run_id).await?;
        tx.commit().await.map_err(self.failed(creating))
    }

    /// A long run's resolutions past its row's come from this handle's
    /// copy of them (see `resolution_rows.rs`) and, in the same statement,
    /// the rows added since it was last read here.
    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let known = self.resolution_rows.take(run_id);
        let (created, through) = known
            .as_ref()
            .map_or((None, -1), |known| (Some(known.created_at), known.through));
        let row = sqlx::query(GET_RUN)
            .bind(run_id)
            .bind(created)
            .bind(through)
            .fetch_optional(&self.pool)
            .await
            .map_err(self.failed(|| format!("reading run {run_id}")))?;
        let Some(row) = row else { return Ok(None) };
        let after_kept: bool = row.try_get("rows_after_kept").map_err(|e| StoreError::Corrupt {
            run_id: run_id.to_owned(),
            detail: format!("column rows_after_kept: {e}"),
        })?;
        let mut stored = stored_run(&row)?;
        let (layout, created_at, version) = (stored.schema_version, stored.created_at, stored.version);
        let added = stored.resolution_rows.take();
        let mut record = stored.into_record()?;
        if layout >= RESOLUTION_ROWS_LAYOUT {
            let mut rows = match known {
                Some(known) if after_kept => known.resolutions,
                _ => Vec::new(),
            };
            if let Some(added) = added {
                rows.extend(parse_resolution_rows(run_id, &added)?);
            }
            record.resolutions.extend(rows.iter().cloned());
            self.resolution_rows.keep(run_id, created_at, version, rows);
        }
        Ok(Some(record))
    }

    async fn messages(&self, run_id: &str) -> Result<Vec<Message>, StoreError> {
        let rows = sqlx::query("SELECT seq, body::text AS body FROM messages WHERE run_id = $1 ORDER BY seq")
            .bind(run_id)
            .fetch_all(&self.pool)
            .await
            .map_err(self.failed(|| format!("reading the messages of run {run_id}")))?;
        rows.iter()
            .map(|row| {
                let corrupt = |e: sqlx::Error| StoreError::Corrupt {
                    run_id: run_id.to_owned(),
                    detail: format!("a message: {e}"),
                };
                let seq: i64 = row.try_get("seq").map_err(corrupt)?;
                let body: String = row.try_get("body").map_err(corrupt)?;
                parse_message(run_id, seq, &nul::decode_json(body))
            })
            .collect()
    }

    async fn claim(&self, run_id: &str, expected_version: i64, lease: &Lease) -> Result<i64, StoreError> {
        let claiming = || format!("claiming run {run_id}");
        let claimed = sqlx::query(
            "UPDATE runs SET status = 'running', version = version + 1, updated_at = $1, \
             lease_owner = $7, lease_until = $8 \
             WHERE run_id = $2 AND status = 'suspended' AND version = $3 AND schema_version <= $4 \
             RETURNING version, pg_notify($5, $6) IS NULL AS announced",
        )
        .bind(self.clock.now())
        .bind(run_id)
        .bind(expected_version)
        .bind(RUN_SCHEMA_VERSION)
        .bind(changes::CHANNEL)
        .bind(changes::payload(&self.schema, run_id)?)
        .bind(&lease.owner)
        .bind(lease.until)
        .fetch_optional(&self.pool)
        .await
        .map_err(self.failed(claiming))?;
        match claimed {
            Some(row) => row.try_get("version").map_err(self.failed(claiming)),
            None => Err(explain_missed_write(
                run_id,
                expected_version,
                self.row_state(run_id).await?,
            )),
        }
    }

    async fn renew_lease(&self, run_id: &str, lease: &Lease) -> Result<(), StoreError> {
        let renewing = || format!("renewing the lease on run {run_id}");
        let renewed = sqlx::query(
            "UPDATE runs SET lease_until = $1 \
             WHERE run_id = $2 AND status = 'running' AND lease_owner = $3 AND schema_version <= $4",
        )
        .bind(lease.until)
        .bind(run_id)
        .bind(&lease.owner)
        .bind(RUN_SCHEMA_VERSION)
        .execute(&self.pool)
        .await
        .map_err(self.failed(renewing))?;
        if renewed.rows_affected() == 1 {
            return Ok(());
        }
        Err(match self.row_state(run_id).await? {
            None => StoreError::NotFound {
                run_id: run_id.to_owned(),
            },
            Some(state) => match crate::row::check_schema_version(run_id, state.schema_version) {
                Err(newer) => newer,
                Ok(()) => StoreError::LeaseLost {
                    run_id: run_id.to_owned(),
                    owner: lease.owner.clone(),
                },
            },
        })
    }

    async fn expired(
        &self,
        now: DateTime<Utc>,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.sweep_page(STALLED_RUNS, now, after, limit, "listing runs whose lease ran out")
            .await
    }

    async fn expiring(
        &self,
        now: DateTime<Utc>,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.sweep_page(EXPIRING_RUNS, now, after, limit, "listing runs whose questions expired")
            .await
    }

    async fn reclaim(
        &self,
        run_id: &str,
        expected_version: i64,
        lease: &Lease,
        now: DateTime<Utc>,
        resolution: Option<&Resolution>,
    ) -> Result<i64, StoreError> {
        let reclaiming = || format!("taking over run {run_id}");
        let resolution = resolution
            .map(|r| crate::row::to_json(run_id, "resolution", r).map(|json| nul::encode_json(&json).into_owned()))
            .transpose()?;
        // As `claim`: a second UPDATE of the row waits for the first and
        // re-checks the version, so exactly one reclaimer wins; the lease
        // test is in the statement, so an owner that renewed keeps its run.
        // Who took the run over is appended as a step's resolutions are
        // (see `update`): to the row while it has room, else as a row of
        // `run_resolutions`, in the same statement.
        let reclaimed = sqlx::query(
            "WITH written AS (UPDATE runs SET status = 'running', version = version + 1, updated_at = $1, \
             lease_owner = $5, lease_until = $6, error = NULL, failure = NULL, \
             resolutions = CASE WHEN $10::jsonb IS NULL OR schema_version >= $11 \
               OR jsonb_array_length(resolutions) >= $12 THEN resolutions \
             ELSE resolutions || jsonb_build_array($10::jsonb) END, \
             schema_version = CASE WHEN $10::jsonb IS NULL OR (schema_version < $11 \
               AND jsonb_array_length(resolutions) < $12) THEN schema_version \
             ELSE GREATEST(schema_version, $11) END \
             WHERE run_id = $2 AND version = $3 AND schema_version <= $4 \
             AND (status = 'failed' OR (status = 'running' AND (lease_until IS NULL OR lease_until <= $7))) \
             RETURNING version, schema_version, pg_notify($8, $9) IS NULL AS announced), \
             moved AS (INSERT INTO run_resolutions (run_id, version, n, body) \
             SELECT $2, version, 0, $10::jsonb FROM written WHERE $10::jsonb IS NOT NULL AND schema_version >= $11) \
             SELECT version, announced FROM written",
        )
        .bind(self.clock.now())
        .bind(run_id)
        .bind(expected_version)
        .bind(RUN_SCHEMA_VERSION)
        .bind(&lease.owner)
        .bind(lease.until)
        .bind(now)
        .bind(changes::CHANNEL)
        .bind(changes::payload(&self.schema, run_id)?)
        .bind(&resolution)
        .bind(RESOLUTION_ROWS_LAYOUT)
        .bind(RESOLUTIONS_IN_ROW)
        .fetch_optional(&self.pool)
        .await
        .map_err(self.failed(reclaiming))?;
        match reclaimed {
            Some(row) => row.try_get("version").map_err(self.failed(reclaiming)),
            None => Err(explain_missed_write(
                run_id,
                expected_version,
                self.row_state(run_id).await?,
            )),
        }
    }

    async fn update(&self, update: RunUpdate<'_>) -> Result<i64, StoreError> {
        let run_id = update.run_id;
        let json = PgJson::of(JsonColumns::of_update(&update)?);
        let error = update.error.map(nul::encode_text);
        let bodies = message_bodies(run_id, update.append)?;
        let appended = bodies.len() as i64;
        let writing = || format!("writing run {run_id}");
        let now = self.clock.now();
        let mut tx = self.pool.begin().await.map_err(self.failed(writing))?;
        // A step leaves the row's layout version as the run was created
        // with (what decides it, the run's settings and thread, never
        // changes), unless it records what only a newer layout holds (an
        // edited approval): then the row is raised to it, so an older build
        // refuses the run from then on instead of misreading it.
        //
        // New resolutions are appended to the row's column while it holds
        // fewer than `RESOLUTIONS_IN_ROW`. Past that, and for a run whose
        // resolutions went there already, they are rows of
        // `run_resolutions`, inserted by the same statement, and the row is
        // raised to their layout.
        let written = sqlx::query(
            "WITH written AS (UPDATE runs SET status = $1, version = version + 1, updated_at = $2, \
             pending = $3::jsonb, step_results = $4::jsonb, message_count = message_count + $5, steps = $6, \
             usage = $7::jsonb, error = $8, failure = $12::jsonb, lease_owner = $13, lease_until = $14, \
             expires_at = $15, \
             resolutions = CASE WHEN $16::jsonb IS NULL OR schema_version >= $18 OR $17 >= $18 \
               OR jsonb_array_length(resolutions) + jsonb_array_length($16::jsonb) > $19 THEN resolutions \
             ELSE resolutions || $16::jsonb END, \
             schema_version = CASE WHEN $16::jsonb IS NULL OR (schema_version < $18 AND $17 < $18 \
               AND jsonb_array_length(resolutions) + jsonb_array_length($16::jsonb) <= $19) \
               THEN GREATEST(schema_version, $17) \
             ELSE GREATEST(schema_version, $17, $18) END \
             WHERE run_id = $10 AND version = $11 AND schema_version <= $9 \
             RETURNING version, message_count, agent_id, memory_resource_id, memory_thread_id, schema_version), \
             moved AS (INSERT INTO run_resolutions (run_id, version, n, body) \
             SELECT $10, written.version, r.n - 1, r.body FROM written, \
             jsonb_array_elements($16::jsonb) WITH ORDINALITY AS r(body, n) WHERE written.schema_version >= $18) \
             SELECT version, message_count, agent_id, memory_resource_id, memory_thread_id FROM written",
        )
        .bind(update.status.as_str())
        .bind(now)
        .bind(&json.pending)
        .bind(&json.step_results)
        .bind(appended)
        .bind(i64::from(update.steps))
        .bind(&json.usage)
        .bind(error.as_deref())
        .bind(RUN_SCHEMA_VERSION)
        .bind(run_id)
        .bind(update.expected_version)
        .bind(&json.failure)
        .bind(update.lease.map(|lease| lease.owner.as_str()))
        .bind(update.lease.map(|lease| lease.until))
        .bind(json.expires_at)
        .bind(&json.resolutions)
        .bind(update.needs_layout())
        .bind(RESOLUTION_ROWS_LAYOUT)
        .bind(RESOLUTIONS_IN_ROW)
        .fetch_optional(&mut *tx)
        .await
        .map_err(self.failed(writing))?;
        let Some(row) = written else {
            tx.rollback().await.map_err(self.failed(writing))?;
            return Err(explain_missed_write(
                run_id,
                update.expected_version,
                self.row_state(run_id).await?,
            ));
        };
        let version: i64 = row.try_get("version").map_err(self.failed(writing))?;
        let message_count: i64 = row.try_get("message_count").map_err(self.failed(writing))?;
        let first = message_count - appended;
        self.insert_messages(&mut tx, run_id, first, &bodies).await?;
        // The run's thread, read in the compare-and-set: a run is on the
        // same thread all its life.
        let resource: Option<String> = row.try_get("memory_resource_id").map_err(self.failed(writing))?;
        let thread: Option<String> = row.try_get("memory_thread_id").map_err(self.failed(writing))?;
        if let (Some(resource), Some(thread)) = (resource, thread) {
            let agent_id: String = row.try_get("agent_id").map_err(self.failed(writing))?;
            let append = threads::Append {
                key: &ThreadKey::new(resource, thread),
                agent_id: &agent_id,
                run_id,
                first_run_seq: first,
                bodies: &bodies,
                now,
            };
            self.append_to_thread(&mut tx, append).await?;
        }
        self.insert_outbox(&mut tx, update.outbox).await?;
        self.insert_grants(&mut tx, update.grants).await?;
        self.announce(&mut tx, run_id).await?;
        tx.commit().await.map_err(self.failed(writing))?;
        Ok(version)
    }

    async fn list(&self, query: &RunQuery) -> Result<Vec<RunRecord>, StoreError> {
        // Text cannot hold NUL here, so no stored run has such an agent id
        // (and PostgreSQL would refuse the statement): none, as elsewhere.
        if finds_nothing(query) {
            return Ok(Vec::new());
        }
        let sql = format!(
            concat!(
                "SELECT ",
                run_select!(),
                " FROM runs{} ORDER BY created_at DESC, run_id DESC LIMIT $1 OFFSET $2"
            ),
            listing_filter(query)
        );
        let rows = bind_listing(sql, query)
            .fetch_all(&self.pool)
            .await
            .map_err(self.failed(|| "listing runs".to_owned()))?;
        crate::readable_runs(rows.iter().map(|row| stored_run(row)?.into_record()))
    }

    async fn count(&self, query: &RunQuery) -> Result<u64, StoreError> {
        if finds_nothing(query) {
            return Ok(0);
        }
        let counted: i64 = if counts_all_waiting(query) {
            // Every waiting run, or an agent's: the tally the database
            // keeps as runs change (migration 0011), a few rows.
            sqlx::query(
                "SELECT COALESCE(SUM(runs), 0)::BIGINT FROM waiting_tally WHERE $1::text IS NULL OR agent_id = $1",
            )
            .bind(query.agent_id.as_deref())
            .fetch_one(&self.pool)
            .await
        } else {
            bind_listing(count_statement(query), query).fetch_one(&self.pool).await
        }
        .and_then(|row| row.try_get(0))
        .map_err(self.failed(|| "counting runs".to_owned()))?;
        Ok(u64::try_from(counted).unwrap_or_default())
    }

    async fn waiting(&self) -> Result<Vec<AgentWaiting>, StoreError> {
        // A row whose pending calls are not a list counts as a run waiting
        // on none. The database keeps these sums as runs change (migration
        // 0011); an agent whose runs all stopped waiting keeps zeroed slots.
        let rows = sqlx::query(
            "SELECT agent_id, SUM(runs)::BIGINT, SUM(calls)::BIGINT FROM waiting_tally \
             GROUP BY agent_id HAVING SUM(runs) > 0 ORDER BY agent_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(self.failed(|| "counting the runs waiting".to_owned()))?;
        rows.iter()
            .map(|row| {
                Ok(AgentWaiting {
                    agent_id: row.try_get(0)?,
                    runs: u64::try_from(row.try_get::<i64, _>(1)?).unwrap_or_default(),
                    calls: u64::try_from(row.try_get::<i64, _>(2)?).unwrap_or_default(),
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(self.failed(|| "reading the runs waiting".to_owned()))
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        // Messages go with their run (ON DELETE CASCADE), in the same
        // statement.
        let done = sqlx::query(PRUNE)
            .bind(before)
            .execute(&self.pool)
            .await
            .map_err(self.failed(|| "pruning finished runs".to_owned()))?;
        Ok(done.rows_affected())
    }
}

#[async_trait]
impl DeliveryStore for PostgresStore {
    async fn claim_deliveries(
        &self,
        now: DateTime<Utc>,
        lease: &Lease,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.claim_outbox(now, lease, limit).await
    }

    async fn finish_delivery(&self, id: &str, owner: &str, outcome: &DeliveryOutcome) -> Result<(), StoreError> {
        self.finish_outbox(id, owner, outcome).await
    }

    async fn deliveries(&self, run_id: &str) -> Result<Vec<Delivery>, StoreError> {
        self.outbox_of(run_id).await
    }
}

#[async_trait]
impl ChangeFeed for PostgresStore {
    /// Every committed write of any process sharing the schema, through
    /// `LISTEN`/`NOTIFY` (see `postgres/changes.rs`).
    async fn changes(&self) -> Result<Option<RunChanges>, StoreError> {
        Ok(Some(changes::watch(&self.pool, self.schema.clone()).await?))
    }
}

/// Whether `query` names an agent id or a thread holding NUL, which no
/// stored run can have.
fn finds_nothing(query: &RunQuery) -> bool {
    query.agent_id.as_deref().is_some_and(|id| id.contains('\0'))
        || query
            .thread
            .as_ref()
            .is_some_and(|key| key.resource_id.contains('\0') || key.thread_id.contains('\0'))
}

/// The `WHERE` clause of a listing for `query` (or nothing). `$1` and `$2`
/// are the listing's limit and offset; the conditions take the next numbers
/// in order, as [`bind_listing`] binds them.
fn listing_filter(query: &RunQuery) -> String {
    let mut conditions = Vec::with_capacity(5);
    let mut next = 3;
    let mut placeholder = || {
        next += 1;
        next - 1
    };
    if query.status.is_some() {
        conditions.push(format!("status = ${}", placeholder()));
    }
    if query.agent_id.is_some() {
        conditions.push(format!("agent_id = ${}", placeholder()));
    }
    // From the index of runs on a thread (`runs_by_thread`), whose
    // condition is stated for PostgreSQL to see that it may use it. An
    // empty thread id: any thread of the resource.
    if let Some(thread) = &query.thread {
        conditions.push(format!(
            "memory_resource_id = ${} AND memory_thread_id IS NOT NULL",
            placeholder()
        ));
        if !thread.thread_id.is_empty() {
            conditions.push(format!("memory_thread_id = ${}", placeholder()));
        }
    }
    // One array of any length: the statement is the same for every wall.
    // A run belongs to its thread's resource, else to the one it was
    // started for (`RunRecord::resource`).
    if query.resources.is_some() {
        conditions.push(format!(
            "COALESCE(memory_resource_id, resource_id) = ANY(${})",
            placeholder()
        ));
    }
    // A row value: the index on (created_at DESC, run_id DESC) (or the
    // status or agent one) is entered right after the previous page. The id
    // order is bytewise (the column is COLLATE "C"), as in the other stores.
    if query.after.is_some() {
        conditions.push(format!(
            "(created_at, run_id) < (${}, ${})",
            placeholder(),
            placeholder()
        ));
    }
    if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    }
}

/// Whether `query` counts every waiting run, or every waiting run of one
/// agent, with no window: what the waiting tally holds.
fn counts_all_waiting(query: &RunQuery) -> bool {
    let RunQuery {
        status,
        agent_id: _,
        thread,
        resources,
        limit,
        offset,
        after,
    } = query;
    *status == Some(RunStatus::Suspended)
        && thread.is_none()
        && resources.is_none()
        && limit.is_none()
        && *offset == 0
        && after.is_none()
}

/// The statement that counts the runs `query` lists: from the index the
/// listing reads.
fn count_statement(query: &RunQuery) -> String {
    format!(
        "SELECT COUNT(*) FROM (SELECT 1 FROM runs{} LIMIT $1 OFFSET $2) AS listed",
        listing_filter(query)
    )
}

/// `sql` (a statement over [`listing_filter`]) with the values of `query`
/// bound: the limit (NULL: none), the offset, then the conditions'.
fn bind_listing(sql: String, query: &RunQuery) -> sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(query.limit.map(i64::from))
        .bind(i64::from(query.offset));
    if let Some(status) = query.status {
        q = q.bind(status.as_str());
    }
    if let Some(agent_id) = &query.agent_id {
        q = q.bind(agent_id);
    }
    if let Some(thread) = &query.thread {
        q = q.bind(thread.resource_id.as_str());
        if !thread.thread_id.is_empty() {
            q = q.bind(thread.thread_id.as_str());
        }
    }
    if let Some(resources) = &query.resources {
        // A resource holding NUL is on no stored run (PostgreSQL's text
        // cannot hold it, nor be sent it).
        let storable: Vec<&str> = resources
            .iter()
            .map(String::as_str)
            .filter(|r| !r.contains('\0'))
            .collect();
        q = q.bind(storable);
    }
    if let Some(after) = &query.after {
        q = q.bind(after.at).bind(after.run_id.as_str());
    }
    q
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// PostgreSQL's generic plan (the one that holds for every value of the
    /// parameters) for `sql`, with sequential scans made a last resort so
    /// that a usable index shows even in an empty table.
    async fn generic_plan(pool: &sqlx::PgPool, schema: &str, sql: &str, types: &str) -> String {
        let mut conn = pool.acquire().await.unwrap();
        let setup = format!(
            "SET search_path = {}; SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan; \
             PREPARE probe ({types}) AS {sql}",
            schema::quoted(schema)
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(setup))
            .execute(&mut *conn)
            .await
            .unwrap();
        let args = types.split(',').map(|_| "NULL").collect::<Vec<_>>().join(", ");
        let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "EXPLAIN (COSTS OFF) EXECUTE probe ({args})"
        )))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
        sqlx::raw_sql("DEALLOCATE probe").execute(&mut *conn).await.unwrap();
        rows.into_iter().map(|(line,)| line).collect::<Vec<_>>().join("\n")
    }

    #[tokio::test]
    async fn every_sweep_the_prune_and_a_count_use_their_indexes_for_any_parameters() {
        let Some(url) = crate::conformance::postgres_test_url("postgres partial indexes") else {
            return;
        };
        let schema = crate::conformance::unique_schema_name();
        let store = PostgresStore::connect_with(&url, PostgresOptions::default().schema(schema.clone()))
            .await
            .unwrap();
        let expiring = generic_plan(
            &store.pool,
            &schema,
            EXPIRING_RUNS,
            "timestamptz, timestamptz, text, bigint",
        )
        .await;
        let prune = generic_plan(&store.pool, &schema, PRUNE, "timestamptz").await;
        let stalled = generic_plan(
            &store.pool,
            &schema,
            STALLED_RUNS,
            "timestamptz, timestamptz, text, bigint",
        )
        .await;
        let claim = generic_plan(
            &store.pool,
            &schema,
            outbox::CLAIM,
            "text, timestamptz, timestamptz, bigint",
        )
        .await;
        let suspended = RunQuery {
            status: Some(askloop::RunStatus::Suspended),
            ..Default::default()
        };
        let count = generic_plan(
            &store.pool,
            &schema,
            &count_statement(&suspended),
            "bigint, bigint, text",
        )
        .await;
        let on_thread = RunQuery {
            thread: Some(ThreadKey::new("ana", "t1")),
            ..Default::default()
        };
        let of_thread = generic_plan(
            &store.pool,
            &schema,
            &count_statement(&on_thread),
            "bigint, bigint, text, text",
        )
        .await;
        let of_resource = RunQuery {
            thread: Some(ThreadKey::new("ana", "")),
            ..Default::default()
        };
        let of_resource = generic_plan(
            &store.pool,
            &schema,
            &count_statement(&of_resource),
            "bigint, bigint, text",
        )
        .await;
        let messages = generic_plan(
            &store.pool,
            &schema,
            threads::MESSAGES_FROM,
            "text, text, bigint, bigint",
        )
        .await;
        let threads_of_resource = askloop::ThreadQuery {
            resource_id: Some("ana".into()),
            ..Default::default()
        };
        let threads_of_resource = generic_plan(
            &store.pool,
            &schema,
            &threads::listing_statement(&threads_of_resource),
            "bigint, bigint, text",
        )
        .await;
        store.pool.close().await;
        crate::conformance::drop_schema(&url, &schema).await;
        assert!(of_thread.contains("runs_by_thread"), "{of_thread}");
        assert!(of_resource.contains("runs_by_thread"), "{of_resource}");
        assert!(messages.contains("thread_messages_pkey"), "{messages}");
        assert!(
            threads_of_resource.contains("threads_by_resource"),
            "{threads_of_resource}"
        );
        assert!(expiring.contains("runs_suspended_by_expiry"), "{expiring}");
        assert!(prune.contains("runs_finished_by_updated"), "{prune}");
        // The recovery sweep reads running runs only, in order (an index
        // scan, which skips entries it found dead before; a bitmap scan
        // would visit the table for each); the outbox's sender due
        // deliveries only.
        assert!(
            stalled.starts_with("Limit\n  ->  Index Scan using runs_running_by_updated on runs\n"),
            "{stalled}"
        );
        assert!(claim.contains("outbox_due"), "{claim}");
        for plan in [&stalled, &claim] {
            assert!(!plan.contains("Seq Scan"), "{plan}");
        }
        assert!(count.contains("runs_by_status"), "{count}");
    }

    #[test]
    fn passwords_are_left_out_of_messages() {
        assert_eq!(redact("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
    }
}

//! Taking over runs nobody drives: runs whose driver's lease ran out (its
//! process died, or its stream was dropped outside a runtime) and failed
//! runs that are retried.
//!
//! A take-over is one compare-and-set ([`RunStore::reclaim`]): of several
//! processes recovering at once, exactly one gets each run. The run then
//! continues from its last stored step (see `Driver::recovered`): nothing
//! it stored is done again, and answers already stored are never asked
//! again.

use chrono::Utc;

use super::driver::{RunState, Start};
use super::{Agent, AgentStream};
use crate::error::RunError;
use crate::store::{Author, ExpiredRuns, Resolution, ResolutionKind, RunRecord, RunStatus, RunStore, StoreError};

/// How many runs one read of expired leases returns; a look reads page
/// after page until it has seen them all.
const EXPIRED_PAGE: u32 = 500;

impl Agent {
    /// Takes over this agent's runs whose lease ran out (the process driving
    /// them died or stopped) and continues each from its last stored step.
    /// Returns one stream per run taken over; each is driven as its stream
    /// is read (or dropped, see [`AgentStream`]). Runs another process took
    /// over first, or whose owner renewed its lease meanwhile, are left
    /// alone. A host calls this at start and then from time to time.
    ///
    /// Each take-over is recorded on the run as a
    /// [`ResolutionKind::Recovered`] resolution, in the same write, made
    /// through the library; [`Agent::recover_runs_by`] names who recovers.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use askloop::{Agent, ScriptedModel};
    /// let model = ScriptedModel::from_json("demo", r#"{"turns": [{"text": "hi"}]}"#).unwrap();
    /// let agent = Agent::builder("assistant").model(Arc::new(model)).build().unwrap();
    /// for stream in agent.recover_runs().await.unwrap() {
    ///     println!("{}: {:?}", stream.run_id().to_owned(), stream.output().await.status);
    /// }
    /// # });
    /// ```
    pub async fn recover_runs(&self) -> Result<Vec<AgentStream>, RunError> {
        self.recover_runs_by(Author::default()).await
    }

    /// Takes over stalled runs (see [`Agent::recover_runs`]), recording
    /// `author` as who took each over (e.g. the server's sweep).
    pub async fn recover_runs_by(&self, author: Author) -> Result<Vec<AgentStream>, RunError> {
        let mut streams = Vec::new();
        let mut pages = ExpiredRuns::new(self.inner.store.as_ref(), Utc::now(), EXPIRED_PAGE);
        while let Some(page) = pages.next_page().await? {
            for run in page.into_iter().filter(|run| run.agent_id == self.inner.id) {
                if let Some(stream) = self.take_over(run, author.clone()).await? {
                    streams.push(stream);
                }
            }
        }
        Ok(streams)
    }

    /// Takes over `run`, as a listing of expired runs read it (see
    /// [`ExpiredRuns`]), if it is still at that version and stalled; `None`
    /// when another process took it first or its owner renewed its lease.
    /// For a host that reads the expired runs once for all its agents and
    /// hands each to its agent; [`Agent::recover_runs`] does both for one
    /// agent. A run of another agent is refused. `author` is recorded as
    /// who took it over.
    pub async fn recover_listed_run(&self, run: RunRecord, author: Author) -> Result<Option<AgentStream>, RunError> {
        if run.agent_id != self.inner.id {
            return Err(RunError::OtherAgent {
                run_id: run.run_id,
                agent_id: self.inner.id.clone(),
                owner: run.agent_id,
            });
        }
        // Only a run listed as running: a failed one is retried by
        // `retry_run`, which checks why it failed.
        if run.status != RunStatus::Running {
            return Ok(None);
        }
        self.take_over(run, author).await
    }

    /// Takes over one run if its lease ran out (see [`Agent::recover_runs`]);
    /// `None` when it is not stalled (held, not running) or another process
    /// took it first.
    pub async fn recover_run(&self, run_id: &str) -> Result<Option<AgentStream>, RunError> {
        self.recover_run_by(run_id, Author::default()).await
    }

    /// Takes over one stalled run (see [`Agent::recover_run`]), recording
    /// `author` as who took it over.
    pub async fn recover_run_by(&self, run_id: &str, author: Author) -> Result<Option<AgentStream>, RunError> {
        let run = self.load(run_id).await?;
        if !run.is_stalled(Utc::now()) {
            return Ok(None);
        }
        self.take_over(run, author).await
    }

    /// Continues a failed run from its last stored step, if it failed for a
    /// reason that trying again may fix (the model or the database
    /// unreachable or busy, the process interrupted; see
    /// [`crate::RunFailure::is_transient`]). What it stored is kept: stored
    /// answers are not asked again and stored tool results are not run
    /// again.
    pub async fn retry_run(&self, run_id: &str) -> Result<AgentStream, RunError> {
        self.retry_run_by(run_id, Author::default()).await
    }

    /// Retries a failed run (see [`Agent::retry_run`]), recording `author`
    /// as who took it over.
    pub async fn retry_run_by(&self, run_id: &str, author: Author) -> Result<AgentStream, RunError> {
        let run = self.load(run_id).await?;
        if run.status != RunStatus::Failed {
            return Err(RunError::NotRetryable {
                run_id: run_id.to_owned(),
                reason: format!("it is {}, not failed", run.status),
            });
        }
        if let Some(failure) = run.failure.as_ref().filter(|f| !f.is_transient()) {
            return Err(RunError::NotRetryable {
                run_id: run_id.to_owned(),
                reason: format!("it failed for a reason trying again does not fix: {failure}"),
            });
        }
        match self.take_over(run, author).await? {
            Some(stream) => Ok(stream),
            None => Err(RunError::Conflict {
                run_id: run_id.to_owned(),
            }),
        }
    }

    /// Reclaims `run` as read and starts a driver on it; `None` when another
    /// writer changed it first. The take-over and its record (a
    /// `recovered` resolution by `author`) are one store write.
    async fn take_over(&self, run: RunRecord, author: Author) -> Result<Option<AgentStream>, RunError> {
        let store: &dyn RunStore = self.inner.store.as_ref();
        let lease = self.inner.new_lease();
        let resolution = Resolution::now(None, ResolutionKind::Recovered, author);
        let now = Utc::now();
        let version = match store
            .reclaim(&run.run_id, run.version, &lease, now, Some(&resolution))
            .await
        {
            Ok(version) => version,
            Err(StoreError::Conflict { .. }) => return Ok(None),
            Err(err) => return Err(err.into()),
        };
        tracing::info!(run_id = %run.run_id, was = %run.status, "took the run over");
        // Another process wrote it: never this process's cached copy.
        let messages = store.messages(&run.run_id).await?;
        let mut record = run;
        record.version = version;
        record.status = RunStatus::Running;
        record.lease = Some(lease);
        record.error = None;
        record.failure = None;
        record.resolutions.push(resolution);
        Ok(Some(self.spawn(RunState { record, messages }, Start::Recovered)))
    }
}

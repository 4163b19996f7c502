//! Taking over runs nobody drives: runs whose driver's lease ran out (its
//! process died, or its stream was dropped outside a runtime) and failed
//! runs that are retried.
//!
//! A take-over is one compare-and-set ([`RunStore::reclaim`]): of several
//! processes recovering at once, exactly one gets each run. The run then
//! continues from its last stored step (see `Driver::recovered`): nothing
//! it stored is done again, and answers already stored are never asked
//! again.

use super::enter::Outcome;
use super::machine::Request;
use super::{Agent, AgentStream};
use crate::error::RunError;
use crate::id::IdKind;
use crate::store::{Author, ExpiredRuns, RunRecord};

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
    /// [`ResolutionKind::Recovered`](crate::ResolutionKind::Recovered) resolution, in the same write,
    /// made by `author` (e.g. the server's sweep; `Author::default()` names
    /// no one).
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use askloop::{Agent, Author, ScriptedModel};
    /// let model = ScriptedModel::from_json("demo", r#"{"turns": [{"text": "hi"}]}"#).unwrap();
    /// let agent = Agent::builder("assistant").model(Arc::new(model)).build().unwrap();
    /// for stream in agent.recover_runs(Author::default()).await.unwrap() {
    ///     println!("{}: {:?}", stream.run_id().to_owned(), stream.output().await.status);
    /// }
    /// # });
    /// ```
    pub async fn recover_runs(&self, author: Author) -> Result<Vec<AgentStream>, RunError> {
        let mut streams = Vec::new();
        let mut pages = ExpiredRuns::new(self.inner.store.as_ref(), self.inner.clock.now(), EXPIRED_PAGE);
        while let Some(page) = pages.next_page().await? {
            for run in page.into_iter().filter(|run| run.agent_id == self.inner.id) {
                if let Some(stream) = self.recover_listed_run(run, author.clone()).await? {
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
        // Whose run it is, the entry machine checks on this read as on any.
        let run_id = run.run_id.clone();
        self.take_over(&run_id, Request::Recover { author }, Some(run)).await
    }

    /// Takes over one run if its lease ran out (see [`Agent::recover_runs`]),
    /// recording `author` as who took it over; `None` when it is not stalled
    /// (held, not running) or another process took it first.
    pub async fn recover_run(&self, run_id: &str, author: Author) -> Result<Option<AgentStream>, RunError> {
        IdKind::Run.check(run_id)?;
        self.take_over(run_id, Request::Recover { author }, None).await
    }

    /// Continues a failed run from its last stored step, if it failed for a
    /// reason that trying again may fix (the model or the database
    /// unreachable or busy, the process interrupted; see
    /// [`crate::RunFailure::is_transient`]). What it stored is kept: stored
    /// answers are not asked again and stored tool results are not run
    /// again. `author` is recorded as who took it over.
    pub async fn retry_run(&self, run_id: &str, author: Author) -> Result<AgentStream, RunError> {
        IdKind::Run.check(run_id)?;
        match self.take_over(run_id, Request::Retry { author }, None).await? {
            Some(stream) => Ok(stream),
            None => Err(RunError::Conflict {
                run_id: run_id.to_owned(),
            }),
        }
    }

    /// Takes the run over as `request` asks (see `machine/entry.rs`): a
    /// driver goes on from its last stored step; `None` when it was left
    /// alone (not stalled, or another process took it first).
    async fn take_over(
        &self,
        run_id: &str,
        request: Request,
        listed: Option<RunRecord>,
    ) -> Result<Option<AgentStream>, RunError> {
        match self.enter(run_id, request, listed).await? {
            Outcome::Stream(stream) => Ok(Some(stream)),
            Outcome::Cancelled | Outcome::Untouched { .. } => Ok(None),
        }
    }
}

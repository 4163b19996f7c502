//! Resuming a suspended run: a decision (answer, approval, decline, expiry)
//! is checked against its pending call (see `machine::fit_decision`), then
//! applied in one compare-and-set, or after a claim when applying it runs
//! a tool. Either way the write records who decided.

use std::sync::Arc;

use chrono::Utc;
use serde_json::Value;

use super::driver::{self, ApplyFailed, Driver, RunState, Start};
use super::expiry;
use super::machine::{self, Decision, ResumeAction};
use super::{Agent, AgentStream, ResumeOptions, stream};
use crate::error::RunError;
use crate::message::Message;
use crate::store::{Author, ExpiredRuns, Resolution, RunRecord, RunStatus, RunUpdate, StoreError};

/// How one try at taking a suspended run went wrong.
enum Attempt {
    /// Another writer changed the run first.
    Lost,
    /// Anything else; not worth another try.
    Failed(RunError),
}

/// How many times a resume tries to claim a run when another answer to the
/// same run (for a different call of the step) holds it.
pub(super) const CLAIM_ATTEMPTS: u32 = 12;

/// First wait before such a retry, doubled each time (capped at 64x).
const CLAIM_BACKOFF_MS: u64 = 2;

impl Agent {
    /// Answers a pending call and continues the run. The answer is checked
    /// against the question first; a refused answer changes nothing.
    ///
    /// For a call waiting on approval, `{"approved": true}` approves it and
    /// `{"approved": false, "reason": "..."}` declines it (without a reason
    /// in the data, `options.reason` is the reason).
    pub async fn resume_stream(
        &self,
        resume_data: impl Into<Value>,
        options: ResumeOptions,
    ) -> Result<AgentStream, RunError> {
        let decision = Decision::Answer {
            data: resume_data.into(),
            reason: options.reason.clone(),
        };
        self.decide(options, decision).await
    }

    /// Approves a call that waits on approval; the tool then runs. Takes the
    /// same options as [`Agent::resume_stream`] (a reason is refused: an
    /// approval needs none).
    pub async fn approve_tool_call(&self, options: ResumeOptions) -> Result<AgentStream, RunError> {
        if options.reason.is_some() {
            return Err(RunError::InvalidInput(
                "an approval takes no reason; a reason goes with a decline".into(),
            ));
        }
        self.decide(options, Decision::Approve).await
    }

    /// Declines a pending call. A call waiting on approval never runs (the
    /// stream shows `tool-output-denied`); a question is left unanswered. The
    /// model is told, with `options.reason` when given, and the run goes on.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use askloop::{Agent, AskUser, ResumeOptions, ScriptedModel};
    /// let model = ScriptedModel::from_json("demo", r#"{"turns": [
    ///     {"toolCalls": [{"name": "ask_user", "args": {"question": "Deploy now?"}}]},
    ///     {"text": "Understood: {{toolResults}}"}
    /// ]}"#).unwrap();
    /// let agent = Agent::builder("assistant").model(Arc::new(model)).tool(AskUser::new()).build().unwrap();
    /// let run = agent.generate("Deploy").await.unwrap();
    /// let declined = agent
    ///     .decline_tool_call(ResumeOptions::run(&run.run_id).reason("not on a Friday"))
    ///     .await
    ///     .unwrap()
    ///     .output()
    ///     .await;
    /// assert_eq!(declined.text, "Understood: The user declined to answer: not on a Friday");
    /// # });
    /// ```
    pub async fn decline_tool_call(&self, options: ResumeOptions) -> Result<AgentStream, RunError> {
        let reason = options.reason.clone();
        self.decide(options, Decision::Decline(reason)).await
    }

    /// Resolves every pending call of this agent's runs whose time limit
    /// has passed (see [`AgentBuilder::time_limit`]), as `author`: a
    /// question is answered for the model with a text saying no answer came
    /// within the limit, an approval is declined with that reason. Returns
    /// the streams of the runs that continue (each calls the model once its
    /// last waiting call is resolved): drive them to the end. Works from
    /// any process: the expiry time is stored with the call.
    ///
    /// [`AgentBuilder::time_limit`]: crate::AgentBuilder::time_limit
    pub async fn expire_runs(&self, author: Author) -> Result<Vec<AgentStream>, RunError> {
        // Page after page, so that runs of agents nobody here resolves
        // cannot hide this agent's runs behind them.
        const PAGE: u32 = 200;
        let mut pages = ExpiredRuns::time_limits(self.inner.store.as_ref(), Utc::now(), PAGE);
        let mut streams = Vec::new();
        while let Some(page) = pages.next_page().await? {
            for run in page.into_iter().filter(|run| run.agent_id == self.inner.id) {
                streams.extend(self.expire_run(&run.run_id, author.clone()).await?);
            }
        }
        Ok(streams)
    }

    /// Resolves the pending calls of one run whose time limit has passed,
    /// as `author` (see [`Agent::expire_runs`]). Calls answered meanwhile
    /// by someone else are left alone.
    pub async fn expire_run(&self, run_id: &str, author: Author) -> Result<Vec<AgentStream>, RunError> {
        let run = self.load(run_id).await?;
        let now = Utc::now();
        let mut streams = Vec::new();
        for id in run
            .expired_calls(now)
            .map(|p| p.tool_call_id.clone())
            .collect::<Vec<_>>()
        {
            let options = ResumeOptions::call(run_id, id).by(author.clone());
            match self.decide(options, Decision::Expire).await {
                Ok(stream) => streams.push(stream),
                // Answered, declined or expired by someone else first.
                Err(
                    RunError::ToolCallNotPending { .. } | RunError::NotSuspended { .. } | RunError::Conflict { .. },
                ) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(streams)
    }

    async fn decide(&self, options: ResumeOptions, decision: Decision) -> Result<AgentStream, RunError> {
        let run_id = options.run_id.as_str();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let run = self.load(run_id).await?;
            if run.status == RunStatus::Running
                && attempt < CLAIM_ATTEMPTS
                && machine::sibling_answer_in_flight(&run, options.tool_call_id.as_deref())
            {
                claim_backoff(attempt).await;
                continue;
            }
            if decision != Decision::Expire
                && let Some(expired_at) =
                    expiry::expired_before_answer(&run, options.tool_call_id.as_deref(), Utc::now())
            {
                return Err(RunError::Expired {
                    run_id: run_id.to_owned(),
                    tool_call_id: options.tool_call_id.clone().unwrap_or_default(),
                    expired_at,
                });
            }
            let target = run.resume_target(options.tool_call_id.as_deref())?;
            if decision != Decision::Expire
                && let Some(expired_at) = target.expires_at.filter(|at| *at <= Utc::now())
            {
                return Err(RunError::Expired {
                    run_id: run_id.to_owned(),
                    tool_call_id: target.tool_call_id.clone(),
                    expired_at,
                });
            }
            let action = self.check_decision(&run, target, &decision)?;
            let ours = action.tool_call_id().to_owned();
            let author = options.author.clone();
            let tried = if self.is_pure(&run, &action) {
                self.resume_pure(run, action, author).await
            } else {
                self.resume_claimed(run, action, author).await
            };
            match tried {
                Ok(stream) => return Ok(stream),
                // Another answer to the same run won. If ours is for another
                // call of the same step and still wanted, try again.
                Err(Attempt::Lost) if attempt < CLAIM_ATTEMPTS => {
                    let now = self.load(run_id).await?;
                    if !machine::retry_lost_claim(&now, &ours) {
                        return Err(RunError::Conflict {
                            run_id: run_id.to_owned(),
                        });
                    }
                    claim_backoff(attempt).await;
                }
                Err(Attempt::Lost) => {
                    return Err(RunError::Conflict {
                        run_id: run_id.to_owned(),
                    });
                }
                Err(Attempt::Failed(err)) => return Err(err),
            }
        }
    }

    /// Whether a decision can be applied before the claim (see
    /// [`Tool::resume_is_pure`]): declines always, except where the tool
    /// hears a decline as an answer ([`Tool::decline_as_answer`]); answers
    /// when the tool says so; never an approval, which runs the tool for real.
    fn is_pure(&self, run: &RunRecord, action: &ResumeAction) -> bool {
        match action {
            ResumeAction::DeclineQuestion { tool_call_id, reason } => run
                .pending
                .iter()
                .find(|p| &p.tool_call_id == tool_call_id)
                .is_none_or(|p| self.inner.decline_as_answer(&p.tool_name, reason.as_deref()).is_none()),
            ResumeAction::DeclineApproval { .. } | ResumeAction::Expire { .. } => true,
            ResumeAction::Approve { .. } => false,
            ResumeAction::Answer { tool_call_id, .. } => run
                .pending
                .iter()
                .find(|p| &p.tool_call_id == tool_call_id)
                .and_then(|p| self.inner.tools.get(&p.tool_name))
                .is_some_and(|t| t.tool.resume_is_pure()),
        }
    }

    /// The conversation as of `run`'s version: this process's copy if it has
    /// that one, else the store's.
    async fn conversation(&self, run: &RunRecord) -> Result<Vec<Message>, RunError> {
        match self.inner.conversations.take(&run.run_id, run.version) {
            Some(messages) => Ok(messages),
            None => Ok(self.inner.store.messages(&run.run_id).await?),
        }
    }

    /// Computes the decision's result and writes it as the compare-and-set
    /// on the version read: one commit for claim and answer.
    async fn resume_pure(&self, run: RunRecord, action: ResumeAction, author: Author) -> Result<AgentStream, Attempt> {
        let messages = self.conversation(&run).await.map_err(Attempt::Failed)?;
        let run_id = run.run_id.clone();
        let outbox = stream::Outbox::default();
        // The driver takes a lease of its own with its first write.
        let mut run = run;
        run.lease = None;
        let mut driver = Driver::new(
            Arc::clone(&self.inner),
            RunState { record: run, messages },
            Arc::clone(&outbox),
        );
        match driver.apply(action, author).await {
            Ok(()) => Ok(AgentStream::new(run_id, outbox, driver.run(Start::Applied))),
            Err(ApplyFailed::Store(StoreError::Conflict { .. })) => Err(Attempt::Lost),
            Err(ApplyFailed::Store(err)) => Err(Attempt::Failed(err.into())),
            Err(ApplyFailed::Broken(detail)) => {
                Err(Attempt::Failed(RunError::Store(StoreError::Corrupt { run_id, detail })))
            }
        }
    }

    /// Claims the run, then lets the stream apply the decision (the tool
    /// may have effects, so it runs only once the run is ours). When the
    /// tool must not run twice, the claim also marks the call started and
    /// records the decision (see [`machine::marks_start`]), in its one
    /// compare-and-set: a process dying before the result is written then
    /// leaves a call that recovery reports as interrupted, never one that
    /// waits to be approved and run again.
    async fn resume_claimed(
        &self,
        run: RunRecord,
        action: ResumeAction,
        author: Author,
    ) -> Result<AgentStream, Attempt> {
        let lease = self.inner.new_lease();
        let target = action.tool_call_id();
        let rules = run
            .pending
            .iter()
            .find(|p| p.tool_call_id == target)
            .and_then(|p| self.inner.tools.get(&p.tool_name))
            .map(|t| t.rules());
        let mut record = run;
        let claimed = if machine::marks_start(&action, rules) {
            let pending = machine::mark_started(&record.pending, target, Utc::now());
            let resolution = Resolution::now(Some(target), action.resolution_kind(), author);
            let outbox = driver::notifications(
                &self.inner.subscriptions,
                &record,
                &record.pending,
                &pending,
                Some(&resolution),
            );
            let claim = RunUpdate {
                run_id: &record.run_id,
                expected_version: record.version,
                status: RunStatus::Running,
                pending: &pending,
                step_results: &record.step_results,
                append: &[],
                steps: record.steps,
                usage: record.usage,
                error: None,
                failure: None,
                lease: Some(&lease),
                resolution: Some(&resolution),
                outbox: &outbox,
            };
            let claimed = self.inner.store.update(claim).await;
            if claimed.is_ok() {
                record.pending = pending;
                record.resolutions.push(resolution);
            }
            claimed.map(|version| (version, None))
        } else {
            let claimed = self.inner.store.claim(&record.run_id, record.version, &lease).await;
            claimed.map(|version| (version, Some(author)))
        };
        let (version, author) = match claimed {
            Ok(claimed) => claimed,
            Err(StoreError::Conflict { .. }) => return Err(Attempt::Lost),
            Err(err) => return Err(Attempt::Failed(err.into())),
        };
        let messages = self.conversation(&record).await.map_err(Attempt::Failed)?;
        record.version = version;
        record.status = RunStatus::Running;
        record.lease = Some(lease);
        // With other calls still pending, this answer ends in one store
        // write and no model call: make it before returning, so answers to
        // sibling questions never wait on a stream its caller has not
        // polled yet.
        let siblings_pending = record.pending.len() > 1;
        let stream = self.spawn(RunState { record, messages }, Start::Resume(action, author));
        Ok(if siblings_pending {
            stream.settled().await
        } else {
            stream
        })
    }

    /// Checks a decision against the pending call, before anything is
    /// written (see [`machine::fit_decision`]).
    fn check_decision(
        &self,
        run: &RunRecord,
        pending: &crate::store::PendingToolCall,
        decision: &Decision,
    ) -> Result<ResumeAction, RunError> {
        let tool = self.inner.tools.get(&pending.tool_name).map(|t| t.tool.as_ref());
        machine::fit_decision(run, pending, decision, tool, &self.inner.id)
    }
}

async fn claim_backoff(attempt: u32) {
    let wait = CLAIM_BACKOFF_MS.saturating_mul(1 << attempt.min(6));
    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
}

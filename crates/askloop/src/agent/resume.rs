//! Resuming a suspended run: a decision (answer, approval, decline, expiry)
//! is checked against its pending call, then applied in one compare-and-set,
//! or after a claim when applying it runs a tool; either way the write
//! records who decided. The protocol is the entry machine's
//! (`machine/entry.rs`); these are the agent's methods that ask for it.

use serde_json::Value;

use super::enter::Outcome;
use super::machine::{Decision, Request};
use super::{Agent, AgentStream, CallDecision, ResumeOptions};
use crate::error::RunError;
use crate::id::IdKind;
use crate::store::{Author, ExpiredRuns, RunRecord};

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
        self.decide(options, CallDecision::Answer(resume_data.into())).await
    }

    /// Applies one decision for the pending call `options` names (or the
    /// only one), as the method named for its kind does:
    /// [`Agent::resume_stream`] for an answer, [`Agent::approve_tool_call`],
    /// [`Agent::approve_tool_call_with`], [`Agent::approve_tool_call_always`]
    /// and [`Agent::decline_tool_call`] (a decline without a reason of its
    /// own takes `options.reason`). For a host that receives decisions of
    /// any kind, as askloop's routes do.
    pub async fn decide(&self, options: ResumeOptions, decision: CallDecision) -> Result<AgentStream, RunError> {
        let decision = self.machine_decision(decision, options.reason.clone())?;
        self.enter_decision(options, decision).await
    }

    /// Approves a call that waits on approval; the tool then runs. Takes the
    /// same options as [`Agent::resume_stream`] (a reason is refused: an
    /// approval needs none).
    pub async fn approve_tool_call(&self, options: ResumeOptions) -> Result<AgentStream, RunError> {
        self.decide(options, CallDecision::Approve).await
    }

    /// Approves a call that waits for approval, to run with `args` (the
    /// arguments a person edited) instead of the model's. The arguments are
    /// checked against the tool's input schema first: arguments that do not
    /// fit are [`RunError::InvalidArguments`], and nothing runs or is
    /// stored. Then they meet the agent's approval rules as the model's
    /// arguments do: arguments a rule denies are
    /// [`RunError::DeniedByRule`], naming the rule and its reason, and
    /// nothing runs or is stored either. The tool runs with exactly these arguments; the model's call
    /// stays as it made it, and the call's result tells the model what the
    /// call ran with. The run's resolution keeps both the model's and the
    /// edited arguments ([`Resolution::edit`](crate::Resolution::edit)),
    /// with who edited.
    pub async fn approve_tool_call_with(&self, options: ResumeOptions, args: Value) -> Result<AgentStream, RunError> {
        self.decide(options, CallDecision::ApproveWith(args)).await
    }

    /// Approves a call that waits for approval, and lets later calls of the
    /// same tool run without waiting in `always`'s scope: the run's thread,
    /// or every thread of its resource (see [`Grant`](crate::Grant)). The
    /// grant is stored in the same write as the approval, so an approval
    /// that loses to another decision grants nothing; later calls it
    /// covers are recorded as approved by it
    /// ([`Interface::Grant`](crate::Interface::Grant)), with who made it.
    /// A run on no thread cannot make one: [`RunError::InvalidInput`].
    pub async fn approve_tool_call_always(
        &self,
        options: ResumeOptions,
        always: crate::Always,
    ) -> Result<AgentStream, RunError> {
        self.decide(options, CallDecision::ApproveAlways(always)).await
    }

    /// A store that keeps no grants cannot make an approval stick: refused
    /// before anything is decided, rather than approved without its grant.
    /// `decision` as the machine takes it, with the reason given beside it
    /// ([`Decision::made`]), checked as every way in checks it before the
    /// run is read: an approval that sticks needs a store that keeps grants.
    fn machine_decision(&self, decision: CallDecision, reason: Option<String>) -> Result<Decision, RunError> {
        let decision = Decision::made(decision, reason)?;
        if decision.keeps_a_grant() {
            self.can_keep_grants()?;
        }
        Ok(decision)
    }

    /// Decisions each naming its call, as the machine takes them (none
    /// with a reason beside it): [`Agent::machine_decision`] of each.
    fn named_decisions(
        &self,
        decisions: impl IntoIterator<Item = (String, CallDecision)>,
    ) -> Result<Vec<(String, Decision)>, RunError> {
        decisions
            .into_iter()
            .map(|(tool_call_id, decision)| Ok((tool_call_id, self.machine_decision(decision, None)?)))
            .collect()
    }

    fn can_keep_grants(&self) -> Result<(), RunError> {
        match self.inner.store.grant_store() {
            Some(_) => Ok(()),
            None => Err(RunError::Store(crate::StoreError::NoGrants)),
        }
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
        self.decide(options, CallDecision::Decline(None)).await
    }

    /// Applies decisions for several pending calls of one run as one
    /// decision, in the order given: every one is checked against its call
    /// before anything is written (one refused decision refuses them all,
    /// and nothing runs); the run is claimed once; the tools of the
    /// approved and answered calls run; the run's resolutions record each
    /// decision, by `author`; and the model is called once, after the last,
    /// if no other call still waits (else the run stays suspended on those).
    ///
    /// Each call is named: a call another decision of the list names too is
    /// [`RunError::InvalidInput`], as is an empty list. An approval or a
    /// decline made already (sent again) is left alone, and the others are
    /// applied; when every one was, the request is
    /// [`RunError::AlreadyDecided`], as is a decision contrary to one made
    /// and a second answer to a question (answers are not compared).
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use askloop::{Agent, Author, CallDecision, FunctionTool, ScriptedModel, ToolOutput};
    /// use serde_json::{Value, json};
    /// let model = ScriptedModel::from_json("demo", r#"{"turns": [
    ///     {"toolCalls": [
    ///         {"id": "a", "name": "deploy", "args": {"env": "staging"}},
    ///         {"id": "b", "name": "deploy", "args": {"env": "prod"}}
    ///     ]},
    ///     {"text": "Done: {{toolResults}}"}
    /// ]}"#).unwrap();
    /// let deploy = FunctionTool::builder("deploy")
    ///     .input_schema(json!({"type": "object"}))
    ///     .requires_approval(true)
    ///     .execute(|args: Value, _ctx| async move {
    ///         Ok(ToolOutput::text(format!("deployed to {}", args["env"].as_str().unwrap_or("?"))).into())
    ///     });
    /// let agent = Agent::builder("ops").model(Arc::new(model)).tool(deploy).build().unwrap();
    /// let run = agent.generate("Deploy everywhere").await.unwrap();
    /// let decisions = vec![
    ///     ("a".to_owned(), CallDecision::Approve),
    ///     ("b".to_owned(), CallDecision::Decline(Some("not on a Friday".into()))),
    /// ];
    /// let done = agent.decide_all(&run.run_id, decisions, Author::default()).await.unwrap().output().await;
    /// assert!(done.text.starts_with("Done: deployed to staging"), "{}", done.text);
    /// # });
    /// ```
    pub async fn decide_all(
        &self,
        run_id: &str,
        decisions: Vec<(String, CallDecision)>,
        author: Author,
    ) -> Result<AgentStream, RunError> {
        IdKind::Run.check(run_id)?;
        if decisions.is_empty() {
            return Err(RunError::InvalidInput(
                "no decisions: name at least one pending call and what to do with it".into(),
            ));
        }
        let decisions = self.named_decisions(decisions)?;
        self.decided(run_id, Request::DecideAll { decisions, author }, None)
            .await
    }

    /// Checks decisions for calls of `run`, as read, as
    /// [`Agent::decide_all`] checks them on that read, writing nothing: the
    /// decisions made already exactly as asked (repeats, which
    /// `decide_all` would leave alone: each call with how it was decided),
    /// or the error `decide_all` would refuse them with. For a host that
    /// applies decisions over several runs and refuses them all when one
    /// would be refused.
    pub fn check_decisions(
        &self,
        run: &RunRecord,
        decisions: &[(String, CallDecision)],
    ) -> Result<Vec<(String, crate::ResolutionKind)>, RunError> {
        let decisions = self.named_decisions(decisions.iter().cloned())?;
        let request = Request::DecideAll {
            decisions,
            author: Author::default(),
        };
        self.check_on_read(run, request)
    }

    /// Approves (with [`CallDecision::Approve`]) or declines (with
    /// [`CallDecision::Decline`]) every call of the run that waits for
    /// approval, as one decision ([`Agent::decide_all`]): each exactly once,
    /// the model called once after the last. Questions stay open, and the
    /// run waits on them. A run waiting on no call for approval is
    /// [`RunError::NothingToApprove`]; an answer is
    /// [`RunError::InvalidInput`] (an answer goes to one question).
    pub async fn decide_every_approval(
        &self,
        run_id: &str,
        decision: CallDecision,
        author: Author,
    ) -> Result<AgentStream, RunError> {
        if let CallDecision::Answer(_) | CallDecision::ApproveWith(_) | CallDecision::ApproveAlways(_) = decision {
            return Err(RunError::InvalidInput(
                "every call waiting for approval is approved or declined as it is, not answered, edited or made to stick".into(),
            ));
        }
        let decision = self.machine_decision(decision, None)?;
        IdKind::Run.check(run_id)?;
        self.decided(run_id, Request::DecideEveryApproval { decision, author }, None)
            .await
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
        let mut pages = ExpiredRuns::time_limits(self.inner.store.as_ref(), self.inner.clock.now(), PAGE);
        let mut streams = Vec::new();
        while let Some(page) = pages.next_page().await? {
            for run in page.into_iter().filter(|run| run.agent_id == self.inner.id) {
                streams.extend(self.expire_run(&run.run_id, author.clone()).await?);
            }
        }
        Ok(streams)
    }

    /// Resolves the pending calls of one run whose time limit has passed,
    /// as `author` (see [`Agent::expire_runs`]), as one decision: which
    /// calls are due is read with the run, and the model is called once
    /// after the last (if no other call still waits). Calls answered
    /// meanwhile by someone else are left alone. Returns the run's stream
    /// when it continues, nothing when there was nothing left to expire. `run_id` is one a sweep read from
    /// the store: it is not checked against the rule for ids a client
    /// chooses, so a run stored before that rule still expires.
    pub async fn expire_run(&self, run_id: &str, author: Author) -> Result<Vec<AgentStream>, RunError> {
        // Calls answered, declined or expired by someone else first are
        // left alone (`Outcome::Untouched`).
        match self.enter(run_id, Request::ExpireDue { author }, None).await? {
            Outcome::Stream(stream) => Ok(vec![stream]),
            Outcome::Cancelled | Outcome::Untouched { .. } => Ok(Vec::new()),
        }
    }

    /// Hands a decision to the run's entry protocol (`machine/entry.rs`).
    async fn enter_decision(&self, options: ResumeOptions, decision: Decision) -> Result<AgentStream, RunError> {
        let run_id = options.run_id.as_str();
        IdKind::Run.check(run_id)?;
        let request = Request::Decide {
            tool_call_id: options.tool_call_id.clone(),
            decision,
            author: options.author,
        };
        let read = options.read.filter(|run| run.run_id == run_id).map(|run| *run);
        self.decided(run_id, request, read).await
    }

    /// Carries a person's decision request into the run: the stream of the
    /// run it continues. Decisions all made already, as asked, are
    /// [`RunError::AlreadyDecided`] (naming the first); a request that ends
    /// without a stream otherwise lost to someone else:
    /// [`RunError::Conflict`].
    async fn decided(&self, run_id: &str, request: Request, read: Option<RunRecord>) -> Result<AgentStream, RunError> {
        match self.enter(run_id, request, read).await? {
            Outcome::Stream(stream) => Ok(stream),
            Outcome::Untouched { already } => match already.into_iter().next() {
                Some((tool_call_id, decided)) => Err(RunError::AlreadyDecided {
                    run_id: run_id.to_owned(),
                    tool_call_id,
                    decided,
                }),
                None => Err(RunError::Conflict {
                    run_id: run_id.to_owned(),
                }),
            },
            Outcome::Cancelled => Err(RunError::Conflict {
                run_id: run_id.to_owned(),
            }),
        }
    }
}

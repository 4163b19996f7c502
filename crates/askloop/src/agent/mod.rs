//! [`Agent`]: a model, instructions and tools, driving runs that can stop to
//! ask a person and carry on when the answer comes.

mod cache;
mod driver;
mod expiry;
mod lease;
mod machine;
mod recovery;
mod stream;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use chrono::Utc;
use serde_json::{Value, json};

use crate::ask_user::ASK_USER_TOOL_ID;
use crate::error::RunError;
use crate::message::Message;
use crate::model::{Model, ToolSpec};
use crate::store::{
    Author, Lease, MemoryStore, PendingKind, Resolution, ResolutionKind, RunRecord, RunStatus, RunStore, RunUpdate,
    StoreError,
};
use crate::tool::{InvalidResume, Tool};

pub(crate) use expiry::rfc3339;
pub use lease::DEFAULT_LEASE;
pub use stream::{AgentStream, StreamOutput};

use cache::{ConversationCache, DEFAULT_CACHED_MESSAGES};
use driver::{ApplyFailed, Driver, ResumeAction, RunState, Start};

/// How many model calls one stream (or resume) may make, by default.
pub const DEFAULT_MAX_STEPS: u32 = 25;

/// An agent: a model, instructions and tools, with a store for its runs.
///
/// Cloning is cheap and shares everything.
///
/// ```
/// use std::sync::Arc;
/// use askloop::{Agent, AskUser, ScriptedModel, ChunkKind};
/// use futures::StreamExt;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let model = ScriptedModel::from_json("demo", r#"{"turns": [
///     {"toolCalls": [{"name": "ask_user", "args": {"question": "Which repo?"}}]},
///     {"text": "Summarising {{toolResults}}"}
/// ]}"#).unwrap();
/// let agent = Agent::builder("assistant").model(Arc::new(model)).tool(AskUser::new()).build().unwrap();
///
/// let mut stream = agent.stream("Summarize my project").await.unwrap();
/// let run_id = stream.run_id().to_owned();
/// while let Some(chunk) = stream.next().await {
///     if let ChunkKind::ToolCallSuspended(s) = &chunk.kind {
///         assert_eq!(s.suspend_payload["question"], "Which repo?");
///     }
/// }
/// let resumed = agent.resume_stream("The main repo", askloop::ResumeOptions::run(&run_id)).await.unwrap();
/// let output = resumed.output().await;
/// assert_eq!(output.text, "Summarising User answered: The main repo");
/// # });
/// ```
#[derive(Clone)]
pub struct Agent {
    inner: Arc<AgentInner>,
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.inner.id)
            .field("model", &self.inner.model.name())
            .field("tools", &self.inner.specs.iter().map(|s| &s.name).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

pub(crate) struct AgentInner {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) instructions: Option<String>,
    pub(crate) model: Arc<dyn Model>,
    pub(crate) tools: HashMap<String, RegisteredTool>,
    pub(crate) specs: Vec<ToolSpec>,
    pub(crate) store: Arc<dyn RunStore>,
    pub(crate) max_steps: u32,
    pub(crate) conversations: ConversationCache,
    pub(crate) lease_duration: std::time::Duration,
    pub(crate) time_limits: TimeLimits,
}

/// How long a call of each tool may wait for an answer or an approval.
#[derive(Debug, Clone, Default)]
pub(crate) struct TimeLimits {
    /// For every tool without its own.
    pub(crate) default: Option<std::time::Duration>,
    /// Per tool id.
    pub(crate) per_tool: HashMap<String, std::time::Duration>,
}

impl AgentInner {
    /// How long a call of `tool_id` may wait, if it has a limit.
    pub(crate) fn time_limit_for(&self, tool_id: &str) -> Option<std::time::Duration> {
        self.time_limits
            .per_tool
            .get(tool_id)
            .copied()
            .or(self.time_limits.default)
    }

    /// A lease for a new driver of a run, from now.
    pub(crate) fn new_lease(&self) -> Lease {
        Lease::new(uuid::Uuid::now_v7().to_string(), Utc::now() + self.lease_duration)
    }
}

pub(crate) struct RegisteredTool {
    pub(crate) tool: Arc<dyn Tool>,
    pub(crate) validator: jsonschema::Validator,
    pub(crate) needs_approval: bool,
}

/// Builds an [`Agent`].
pub struct AgentBuilder {
    id: String,
    name: Option<String>,
    instructions: Option<String>,
    model: Option<Arc<dyn Model>>,
    tools: Vec<Arc<dyn Tool>>,
    store: Option<Arc<dyn RunStore>>,
    max_steps: u32,
    approve_all: bool,
    approve_tools: HashSet<String>,
    cached_messages: usize,
    lease_duration: std::time::Duration,
    time_limits: TimeLimits,
}

impl fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Why an agent could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No model was given.
    #[error("agent {0} has no model: call .model(...)")]
    MissingModel(String),
    /// Two tools share an id.
    #[error("agent {agent_id} has two tools with id {tool_id}")]
    DuplicateTool {
        /// The agent.
        agent_id: String,
        /// The id.
        tool_id: String,
    },
    /// A tool's input schema is not a valid JSON Schema.
    #[error("tool {tool_id} has an invalid input schema: {reason}")]
    InvalidSchema {
        /// The tool.
        tool_id: String,
        /// Why.
        reason: String,
    },
    /// Approval was required for a tool the agent does not have.
    #[error("approval is required for tool {0}, which the agent does not have")]
    UnknownApprovalTool(String),
}

impl AgentBuilder {
    /// The display name (defaults to the id).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The instructions, sent as the system prompt.
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// The model.
    pub fn model(mut self, model: Arc<dyn Model>) -> Self {
        self.model = Some(model);
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Adds a shared tool.
    pub fn tool_arc(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Where runs are stored (in memory by default).
    pub fn store(mut self, store: Arc<dyn RunStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// How many model calls one stream or resume may make.
    pub fn max_steps(mut self, max_steps: u32) -> Self {
        self.max_steps = max_steps.max(1);
        self
    }

    /// Every tool call needs a person's approval before it runs, except
    /// `ask_user` (asking permission to ask a question would be noise).
    pub fn require_tool_approval(mut self, yes: bool) -> Self {
        self.approve_all = yes;
        self
    }

    /// Calls of this tool need a person's approval before they run.
    pub fn require_approval_for(mut self, tool_id: impl Into<String>) -> Self {
        self.approve_tools.insert(tool_id.into());
        self
    }

    /// How many messages, across runs, this process keeps of the runs it
    /// suspended, so resuming them here skips reading their conversation
    /// back from the store (0 turns it off). Entries are checked against the
    /// run's version, so another process's writes are never missed.
    pub fn conversation_cache(mut self, messages: usize) -> Self {
        self.cached_messages = messages;
        self
    }

    /// How long a question (`ask_user` or any suspended tool) or an approval
    /// may wait for a person (none by default: it waits until answered).
    /// Once the limit passes, [`Agent::expire_runs`] resolves it: the model
    /// is told no answer came within the limit (never given an invented
    /// one), and an approval counts as declined with that reason. Answers
    /// after the limit are refused with [`RunError::Expired`].
    pub fn time_limit(mut self, limit: std::time::Duration) -> Self {
        self.time_limits.default = Some(limit);
        self
    }

    /// How long a call of one tool may wait (overrides
    /// [`AgentBuilder::time_limit`] for it).
    pub fn time_limit_for(mut self, tool_id: impl Into<String>, limit: std::time::Duration) -> Self {
        self.time_limits.per_tool.insert(tool_id.into(), limit);
        self
    }

    /// How long a run this agent drives stays held after the process driving
    /// it stops renewing (30 s by default): the longest a run whose process
    /// died waits before `recover_runs` may take it over. Renewed every
    /// third of it while the run is driven.
    pub fn lease_duration(mut self, duration: std::time::Duration) -> Self {
        self.lease_duration = duration.max(std::time::Duration::from_millis(30));
        self
    }

    /// Builds the agent, checking tool schemas once here rather than on
    /// every call.
    pub fn build(self) -> Result<Agent, BuildError> {
        let model = self.model.ok_or_else(|| BuildError::MissingModel(self.id.clone()))?;
        let mut tools = HashMap::new();
        let mut specs = Vec::new();
        for tool in self.tools {
            let tool_id = tool.id().to_owned();
            let validator =
                jsonschema::validator_for(tool.input_schema()).map_err(|err| BuildError::InvalidSchema {
                    tool_id: tool_id.clone(),
                    reason: err.to_string(),
                })?;
            let needs_approval = tool.requires_approval()
                || self.approve_tools.contains(&tool_id)
                || (self.approve_all && tool_id != ASK_USER_TOOL_ID);
            specs.push(ToolSpec {
                name: tool_id.clone(),
                description: tool.description().to_owned(),
                input_schema: tool.input_schema().clone(),
            });
            let registered = RegisteredTool {
                tool,
                validator,
                needs_approval,
            };
            if tools.insert(tool_id.clone(), registered).is_some() {
                return Err(BuildError::DuplicateTool {
                    agent_id: self.id,
                    tool_id,
                });
            }
        }
        if let Some(missing) = self.approve_tools.iter().find(|id| !tools.contains_key(*id)) {
            return Err(BuildError::UnknownApprovalTool(missing.clone()));
        }
        Ok(Agent {
            inner: Arc::new(AgentInner {
                name: self.name.unwrap_or_else(|| self.id.clone()),
                id: self.id,
                instructions: self.instructions,
                model,
                tools,
                specs,
                store: self.store.unwrap_or_else(|| Arc::new(MemoryStore::new())),
                max_steps: self.max_steps,
                conversations: ConversationCache::new(self.cached_messages),
                lease_duration: self.lease_duration,
                time_limits: self.time_limits,
            }),
        })
    }
}

/// What a run starts from.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentInput {
    messages: Vec<Message>,
}

impl From<&str> for AgentInput {
    fn from(text: &str) -> Self {
        AgentInput {
            messages: vec![Message::user(text)],
        }
    }
}

impl From<String> for AgentInput {
    fn from(text: String) -> Self {
        AgentInput {
            messages: vec![Message::user(text)],
        }
    }
}

impl From<Vec<Message>> for AgentInput {
    fn from(messages: Vec<Message>) -> Self {
        AgentInput { messages }
    }
}

/// Options for a new run.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct StreamOptions {
    /// Use this run id instead of a new UUID v7.
    pub run_id: Option<String>,
    /// The conversation thread the run belongs to.
    pub thread_id: Option<String>,
    /// Data stored with the run (e.g. how to rebuild its agent later).
    pub metadata: Value,
}

impl StreamOptions {
    /// Options with a caller-chosen run id.
    pub fn with_run_id(run_id: impl Into<String>) -> Self {
        StreamOptions {
            run_id: Some(run_id.into()),
            ..Default::default()
        }
    }

    /// Sets the metadata stored with the run.
    pub fn metadata(mut self, metadata: Value) -> Self {
        self.metadata = metadata;
        self
    }

    /// Sets the thread.
    pub fn thread_id(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }
}

/// Which run, and which of its pending calls, a resume answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResumeOptions {
    /// The run.
    pub run_id: String,
    /// The call; may be left out when exactly one call is pending.
    pub tool_call_id: Option<String>,
    /// Who decides, stored with the run's resolution (the library, with
    /// no name, unless set with [`ResumeOptions::by`]).
    pub author: Author,
}

impl ResumeOptions {
    /// Resumes the run's only pending call, whichever it is when the resume
    /// arrives (Mastra's `resumeStream(data, { runId })`). When others may
    /// answer the same run, prefer [`ResumeOptions::call`]: if the run moved
    /// on to its next question meanwhile, this form would answer that one.
    pub fn run(run_id: impl Into<String>) -> Self {
        ResumeOptions {
            run_id: run_id.into(),
            tool_call_id: None,
            author: Author::default(),
        }
    }

    /// Resumes a specific call.
    pub fn call(run_id: impl Into<String>, tool_call_id: impl Into<String>) -> Self {
        ResumeOptions {
            run_id: run_id.into(),
            tool_call_id: Some(tool_call_id.into()),
            author: Author::default(),
        }
    }

    /// Who decides: the interface and, where known, the person or client.
    pub fn by(mut self, author: Author) -> Self {
        self.author = author;
        self
    }
}

/// What a person decided about a pending call.
#[derive(Debug, Clone, PartialEq)]
enum Decision {
    Answer(Value),
    Approve,
    Decline(Option<String>),
    /// The call's time limit passed.
    Expire,
}

/// How one try at taking a suspended run went wrong.
enum Attempt {
    /// Another writer changed the run first.
    Lost,
    /// Anything else; not worth another try.
    Failed(RunError),
}

/// How many times a resume tries to claim a run when another answer to the
/// same run (for a different call of the step) holds it.
const CLAIM_ATTEMPTS: u32 = 12;

/// First wait before such a retry, doubled each time (capped at 64x).
const CLAIM_BACKOFF_MS: u64 = 2;

impl Agent {
    /// Starts building an agent with an id.
    pub fn builder(id: impl Into<String>) -> AgentBuilder {
        AgentBuilder {
            id: id.into(),
            name: None,
            instructions: None,
            model: None,
            tools: Vec::new(),
            store: None,
            max_steps: DEFAULT_MAX_STEPS,
            approve_all: false,
            approve_tools: HashSet::new(),
            cached_messages: DEFAULT_CACHED_MESSAGES,
            lease_duration: DEFAULT_LEASE,
            time_limits: TimeLimits::default(),
        }
    }

    /// The agent's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The agent's display name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The agent's instructions.
    pub fn instructions(&self) -> Option<&str> {
        self.inner.instructions.as_deref()
    }

    /// The agent's model.
    pub fn model(&self) -> &Arc<dyn Model> {
        &self.inner.model
    }

    /// The tools, as the model sees them.
    pub fn tool_specs(&self) -> &[ToolSpec] {
        &self.inner.specs
    }

    /// Whether calls of this tool wait for approval.
    pub fn needs_approval(&self, tool_id: &str) -> bool {
        self.inner.tools.get(tool_id).is_some_and(|t| t.needs_approval)
    }

    /// The store holding this agent's runs.
    pub fn store(&self) -> &Arc<dyn RunStore> {
        &self.inner.store
    }

    /// Starts a run and streams it.
    pub async fn stream(&self, input: impl Into<AgentInput>) -> Result<AgentStream, RunError> {
        self.stream_with(input, StreamOptions::default()).await
    }

    /// Starts a run with options and streams it. The run (with its input) is
    /// stored before this returns.
    pub async fn stream_with(
        &self,
        input: impl Into<AgentInput>,
        options: StreamOptions,
    ) -> Result<AgentStream, RunError> {
        let messages = input.into().messages;
        if messages.is_empty() {
            return Err(RunError::InvalidInput("a run needs at least one message".into()));
        }
        let run_id = match options.run_id {
            Some(id) if id.trim().is_empty() => {
                return Err(RunError::InvalidInput("a run id must not be empty".into()));
            }
            Some(id) => id,
            None => uuid::Uuid::now_v7().to_string(),
        };
        let now = Utc::now();
        let record = RunRecord {
            run_id: run_id.clone(),
            agent_id: self.inner.id.clone(),
            thread_id: options.thread_id,
            status: RunStatus::Running,
            version: 0,
            created_at: now,
            updated_at: now,
            pending: Vec::new(),
            step_results: Vec::new(),
            message_count: messages.len() as i64,
            steps: 0,
            usage: Default::default(),
            error: None,
            metadata: options.metadata,
            lease: Some(self.inner.new_lease()),
            failure: None,
            resolutions: Vec::new(),
        };
        self.inner.store.create(&record, &messages).await?;
        let state = RunState { record, messages };
        Ok(self.spawn(state, Start::Fresh))
    }

    /// Runs to the end (or to a suspension) and returns the outcome. A run
    /// that failed is [`RunError::Failed`], with its typed reason.
    pub async fn generate(&self, input: impl Into<AgentInput>) -> Result<StreamOutput, RunError> {
        let output = self.stream(input).await?.output().await;
        match (&output.status, &output.failure) {
            (RunStatus::Failed, Some(failure)) => Err(RunError::Failed {
                run_id: output.run_id,
                failure: failure.clone(),
            }),
            _ => Ok(output),
        }
    }

    /// Answers a pending call and continues the run. The answer is checked
    /// against the question first; a refused answer changes nothing.
    ///
    /// For a call waiting on approval, `{"approved": true}` approves it and
    /// `{"approved": false, "reason": "..."}` declines it.
    pub async fn resume_stream(
        &self,
        resume_data: impl Into<Value>,
        options: ResumeOptions,
    ) -> Result<AgentStream, RunError> {
        self.decide(options, Decision::Answer(resume_data.into())).await
    }

    /// Approves a call that waits on approval; the tool then runs.
    pub async fn approve_tool_call(&self, run_id: &str, tool_call_id: Option<&str>) -> Result<AgentStream, RunError> {
        self.decide(call_options(run_id, tool_call_id), Decision::Approve).await
    }

    /// Declines a pending call. A call waiting on approval never runs (the
    /// stream shows `tool-output-denied`); a question is left unanswered. The
    /// model is told, with the reason when given, and the run goes on.
    pub async fn decline_tool_call(
        &self,
        run_id: &str,
        tool_call_id: Option<&str>,
        reason: Option<String>,
    ) -> Result<AgentStream, RunError> {
        self.decide(call_options(run_id, tool_call_id), Decision::Decline(reason))
            .await
    }

    /// Approves a call that waits on approval, as `options.author`.
    pub async fn approve(&self, options: ResumeOptions) -> Result<AgentStream, RunError> {
        self.decide(options, Decision::Approve).await
    }

    /// Declines a pending call (see [`Agent::decline_tool_call`]), as
    /// `options.author`.
    pub async fn decline(&self, options: ResumeOptions, reason: Option<String>) -> Result<AgentStream, RunError> {
        self.decide(options, Decision::Decline(reason)).await
    }

    /// Resolves every pending call of this agent's runs whose time limit
    /// has passed (see [`AgentBuilder::time_limit`]), as `author`: a
    /// question is answered for the model with a text saying no answer came
    /// within the limit, an approval is declined with that reason. Returns
    /// the streams of the runs that continue (each calls the model once its
    /// last waiting call is resolved): drive them to the end. Works from
    /// any process: the expiry time is stored with the call.
    pub async fn expire_runs(&self, author: Author) -> Result<Vec<AgentStream>, RunError> {
        const BATCH: u32 = 100;
        let now = Utc::now();
        let mut streams = Vec::new();
        for run in self.inner.store.expiring(now, BATCH).await? {
            if run.agent_id == self.inner.id {
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

    /// Cancels a suspended (or running) run: its status becomes `cancelled`
    /// and the model is not called again.
    pub async fn cancel_run(&self, run_id: &str) -> Result<(), RunError> {
        self.cancel_run_by(run_id, Author::default()).await
    }

    /// Cancels a run (see [`Agent::cancel_run`]), recording `author`.
    pub async fn cancel_run_by(&self, run_id: &str, author: Author) -> Result<(), RunError> {
        let resolution = Resolution::now(None, ResolutionKind::Cancelled, author);
        for _ in 0..CLAIM_ATTEMPTS {
            let run = self.load(run_id).await?;
            if run.status.is_finished() {
                return Err(RunError::NotSuspended {
                    run_id: run_id.to_owned(),
                    status: run.status,
                });
            }
            let update = RunUpdate {
                run_id,
                expected_version: run.version,
                status: RunStatus::Cancelled,
                pending: &[],
                step_results: &[],
                append: &[],
                steps: run.steps,
                usage: run.usage,
                error: None,
                failure: None,
                lease: None,
                resolution: Some(&resolution),
            };
            match self.inner.store.update(update).await {
                Ok(_) => return Ok(()),
                Err(StoreError::Conflict { .. }) => continue,
                Err(err) => return Err(err.into()),
            }
        }
        Err(RunError::Conflict {
            run_id: run_id.to_owned(),
        })
    }

    /// Reads a run's stored state.
    pub async fn get_run(&self, run_id: &str) -> Result<RunRecord, RunError> {
        self.load(run_id).await
    }

    async fn load(&self, run_id: &str) -> Result<RunRecord, RunError> {
        self.inner.store.get(run_id).await?.ok_or_else(|| RunError::UnknownRun {
            run_id: run_id.to_owned(),
        })
    }

    async fn decide(&self, options: ResumeOptions, decision: Decision) -> Result<AgentStream, RunError> {
        let run_id = options.run_id.as_str();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let run = self.load(run_id).await?;
            if run.status == RunStatus::Running
                && attempt < CLAIM_ATTEMPTS
                && sibling_answer_in_flight(&run, options.tool_call_id.as_deref())
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
                    let retry = match now.status {
                        RunStatus::Suspended => now.pending.iter().any(|p| p.tool_call_id == ours),
                        RunStatus::Running => sibling_answer_in_flight(&now, Some(&ours)),
                        _ => false,
                    };
                    if !retry {
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
    /// [`Tool::resume_is_pure`]): declines always, answers when the tool
    /// says so; never an approval, which runs the tool for real.
    fn is_pure(&self, run: &RunRecord, action: &ResumeAction) -> bool {
        match action {
            ResumeAction::DeclineQuestion { .. } | ResumeAction::Deny { .. } | ResumeAction::Expire { .. } => true,
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
            Ok(applied) => Ok(AgentStream::new(run_id, outbox, driver.run(Start::Applied(applied)))),
            Err(ApplyFailed::Store(StoreError::Conflict { .. })) => Err(Attempt::Lost),
            Err(ApplyFailed::Store(err)) => Err(Attempt::Failed(err.into())),
            Err(ApplyFailed::Broken(detail)) => {
                Err(Attempt::Failed(RunError::Store(StoreError::Corrupt { run_id, detail })))
            }
        }
    }

    /// Claims the run, then lets the stream apply the decision (the tool
    /// may have effects, so it runs only once the run is ours).
    async fn resume_claimed(
        &self,
        run: RunRecord,
        action: ResumeAction,
        author: Author,
    ) -> Result<AgentStream, Attempt> {
        let lease = self.inner.new_lease();
        let version = match self.inner.store.claim(&run.run_id, run.version, &lease).await {
            Ok(version) => version,
            Err(StoreError::Conflict { .. }) => return Err(Attempt::Lost),
            Err(err) => return Err(Attempt::Failed(err.into())),
        };
        let messages = self.conversation(&run).await.map_err(Attempt::Failed)?;
        let mut record = run;
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

    /// Checks a decision against the pending call, before anything is written.
    fn check_decision(
        &self,
        run: &RunRecord,
        pending: &crate::store::PendingToolCall,
        decision: &Decision,
    ) -> Result<ResumeAction, RunError> {
        let tool_call_id = pending.tool_call_id.clone();
        let wrong_kind = |detail: &str| RunError::WrongPendingKind {
            run_id: run.run_id.clone(),
            tool_call_id: tool_call_id.clone(),
            detail: detail.to_owned(),
        };
        let tool = || {
            self.inner
                .tools
                .get(&pending.tool_name)
                .map(|t| Arc::clone(&t.tool))
                .ok_or_else(|| RunError::UnknownTool {
                    run_id: run.run_id.clone(),
                    agent_id: self.inner.id.clone(),
                    tool_name: pending.tool_name.clone(),
                })
        };
        match (pending.kind, decision) {
            (_, Decision::Expire) => Ok(ResumeAction::Expire { tool_call_id }),
            (PendingKind::Suspended, Decision::Answer(data)) => {
                let tool = tool()?;
                let payload = pending.suspend_payload.clone().unwrap_or(Value::Null);
                tool.check_resume_data(data, &payload)
                    .map_err(|InvalidResume { reason, accepted }| RunError::InvalidAnswer {
                        run_id: run.run_id.clone(),
                        tool_call_id: tool_call_id.clone(),
                        reason,
                        accepted,
                    })?;
                Ok(ResumeAction::Answer {
                    tool_call_id,
                    data: data.clone(),
                })
            }
            (PendingKind::Suspended, Decision::Decline(reason)) => Ok(ResumeAction::DeclineQuestion {
                tool_call_id,
                reason: reason.clone(),
            }),
            (PendingKind::Suspended, Decision::Approve) => Err(wrong_kind(
                "is a question waiting for an answer, not a call waiting for approval; answer it instead",
            )),
            (PendingKind::Approval, Decision::Approve) => {
                tool()?;
                Ok(ResumeAction::Approve { tool_call_id })
            }
            (PendingKind::Approval, Decision::Decline(reason)) => Ok(ResumeAction::Deny {
                tool_call_id,
                reason: reason.clone(),
            }),
            (PendingKind::Approval, Decision::Answer(data)) => {
                let approved = data.get("approved").and_then(Value::as_bool);
                let reason = data.get("reason").and_then(Value::as_str).map(str::to_owned);
                match approved {
                    Some(true) => {
                        tool()?;
                        Ok(ResumeAction::Approve { tool_call_id })
                    }
                    Some(false) => Ok(ResumeAction::Deny { tool_call_id, reason }),
                    None => Err(RunError::InvalidAnswer {
                        run_id: run.run_id.clone(),
                        tool_call_id,
                        reason: format!(
                            "this call waits for approval; resume it with {} or {}, got {data}",
                            json!({"approved": true}),
                            json!({"approved": false, "reason": "..."})
                        ),
                        accepted: None,
                    }),
                }
            }
        }
    }

    fn spawn(&self, state: RunState, start: Start) -> AgentStream {
        let outbox = stream::Outbox::default();
        let run_id = state.record.run_id.clone();
        let driver = Driver::new(Arc::clone(&self.inner), state, Arc::clone(&outbox));
        AgentStream::new(run_id, outbox, driver.run(start))
    }
}

/// Whether another process may hold the run to answer a *different* call of
/// the same step: several calls are pending and ours is one of them. Then a
/// lost claim is worth retrying once that (short) write lands. With a single
/// pending call, whoever won answered ours: that is a plain conflict.
fn sibling_answer_in_flight(run: &RunRecord, tool_call_id: Option<&str>) -> bool {
    run.pending.len() > 1 && tool_call_id.is_some_and(|id| run.pending.iter().any(|p| p.tool_call_id == id))
}

async fn claim_backoff(attempt: u32) {
    let wait = CLAIM_BACKOFF_MS.saturating_mul(1 << attempt.min(6));
    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
}

fn call_options(run_id: &str, tool_call_id: Option<&str>) -> ResumeOptions {
    ResumeOptions {
        run_id: run_id.to_owned(),
        tool_call_id: tool_call_id.map(str::to_owned),
        author: Author::default(),
    }
}

/// The JSON Schema of an approval decision, as Mastra publishes it.
pub(crate) fn approval_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "approved": {"type": "boolean", "description": "true to run the tool call, false to decline it"},
            "reason": {"type": "string", "description": "Why, shown to the model when the call is declined"}
        },
        "required": ["approved"],
        "additionalProperties": false
    })
}

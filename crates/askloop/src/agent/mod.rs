//! [`Agent`]: a model, instructions and tools, driving runs that can stop to
//! ask a person and carry on when the answer comes.

mod build_error;
mod builder;
mod cache;
mod driver;
mod enter;
mod inner;
mod lease;
mod machine;
#[cfg(test)]
#[allow(
    clippy::disallowed_fields,
    reason = "the machines' property tests play the store, holding what the machines write"
)]
mod machine_properties;
mod options;
mod recovery;
mod resume;
mod settings;
mod stream;
mod thread;
mod tools;

use std::fmt;
use std::sync::Arc;

use crate::error::RunError;
use crate::id::IdKind;
use crate::model::{Model, ToolSpec};
use crate::store::{Author, RunRecord, RunStatus, RunStore};
use crate::telemetry;
use crate::tool::Tool;

pub use build_error::BuildError;
pub use builder::AgentBuilder;
pub use lease::DEFAULT_LEASE;
pub use machine::{CallState, Closed, Waiting, WaitsOn};
pub use options::{AgentInput, CallDecision, MAX_REASON_BYTES, ResumeOptions, StreamOptions, ThreadOptions};
pub use stream::{AgentStream, StreamOutput};

use driver::{Begin, Driver, RunState};
use inner::AgentInner;

/// How many model calls one stream (or resume) may make, by default.
pub const DEFAULT_MAX_STEPS: u32 = 25;

/// How many of a thread's last messages a run on it reads as context,
/// unless its agent or the run says otherwise (Mastra's default).
pub const DEFAULT_LAST_MESSAGES: u32 = 10;

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
            .field(
                "tools",
                &self.inner.tools().specs.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Agent {
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

    /// The tools, as the model sees them now (tools added later with
    /// [`Agent::add_tools`] are among them from then on).
    pub fn tool_specs(&self) -> impl std::ops::Deref<Target = [ToolSpec]> + use<> {
        tools::Specs(self.inner.tools())
    }

    /// Adds tools to the agent after it was built: the tools of an MCP
    /// server that could not be reached when the agent was built, say, once
    /// it answers. They are checked as [`AgentBuilder::build`] checks
    /// tools (a schema that does not compile, an id the agent has already
    /// is an error, and nothing is added); calls of those `approve` names
    /// (and of any, if the agent was built to approve every call) wait for
    /// approval. A run offers them to the model from its next stream on.
    pub fn add_tools(&self, tools: Vec<Arc<dyn Tool>>, approve: &[String]) -> Result<(), BuildError> {
        self.inner.tools.add(&self.inner.id, tools, approve)
    }

    /// How many model calls one stream (or resume) of a run may make, at
    /// most: a run's own [`RunSettings::max_steps`](crate::RunSettings) may
    /// only be lower.
    pub fn max_steps(&self) -> u32 {
        self.inner.max_steps
    }

    /// Whether calls of this tool wait for approval.
    pub fn requires_approval(&self, tool_id: &str) -> bool {
        self.inner.tools().get(tool_id).is_some_and(|t| t.needs_approval)
    }

    /// The store holding this agent's runs.
    pub fn store(&self) -> &Arc<dyn RunStore> {
        &self.inner.store
    }

    /// The clock the agent reads the time from.
    pub fn clock(&self) -> &Arc<dyn crate::clock::Clock> {
        &self.inner.clock
    }

    /// Starts a run and streams it.
    pub async fn stream(&self, input: impl Into<AgentInput>) -> Result<AgentStream, RunError> {
        self.stream_with(input, StreamOptions::default()).await
    }

    /// Starts a run with options and streams it. The run (with its input) is
    /// stored before this returns. Settings that would let the run do more
    /// than the agent allows (a step limit above the agent's, a tool it does
    /// not have) are [`RunError::InvalidInput`], and nothing is stored.
    ///
    /// On a thread ([`StreamOptions::on_thread`]) the run starts from the
    /// thread's last messages, then `input`, and appends its own messages
    /// to the thread as it stores them. A question of this agent the thread
    /// still waits on is superseded first: the new message came instead of
    /// its answer, so its run ends (cancelled, recorded as
    /// [`ResolutionKind::Superseded`](crate::ResolutionKind::Superseded))
    /// with a result saying the call went unanswered, and a late answer to
    /// it is [`RunError::Superseded`].
    pub async fn stream_with(
        &self,
        input: impl Into<AgentInput>,
        options: StreamOptions,
    ) -> Result<AgentStream, RunError> {
        let messages = input.into().messages;
        if messages.is_empty() {
            return Err(RunError::InvalidInput("a run needs at least one message".into()));
        }
        // Chosen ids are checked before the store sees them (see `IdKind`).
        if let Some(id) = &options.thread_id {
            IdKind::Thread.check(id)?;
        }
        if let Some(id) = &options.resource_id {
            IdKind::Resource.check(id)?;
        }
        let run_id = match options.run_id {
            Some(id) => {
                IdKind::Run.check(&id)?;
                id
            }
            None => uuid::Uuid::now_v7().to_string(),
        };
        self.inner.check_settings(&options.settings)?;
        let (messages, memory) = match &options.thread {
            Some(thread) => {
                let (messages, memory) = self.thread_start(thread, messages).await?;
                (messages, Some(memory))
            }
            None => (messages, None),
        };
        let now = self.inner.clock.now();
        // The drive's span is made before the run is stored, so that its
        // trace context is stored with the run (see `telemetry`).
        let span = telemetry::drive_span(&run_id, &self.inner.id, None, telemetry::DriveKind::Start);
        let record = machine::started(
            RunRecord {
                run_id: run_id.clone(),
                agent_id: self.inner.id.clone(),
                thread_id: options.thread_id,
                memory,
                resource_id: options.resource_id,
                created_at: now,
                updated_at: now,
                message_count: messages.len() as i64,
                metadata: options.metadata,
                settings: options.settings,
                trace_parent: telemetry::stored_context(&span),
                ..RunRecord::default()
            },
            self.inner.new_lease(),
        );
        self.inner.store.create(&record, &messages).await?;
        let state = RunState::new(record, messages);
        Ok(self.spawn_in(state, Begin::Fresh, Some(span)))
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

    /// Cancels a suspended (or running) run, recording `author` as who
    /// cancelled it (`Author::default()` names no one): its status becomes
    /// `cancelled` and the model is not called again. A run that has
    /// finished already is [`RunError::Finished`].
    pub async fn cancel_run(&self, run_id: &str, author: Author) -> Result<(), RunError> {
        IdKind::Run.check(run_id)?;
        match self.enter(run_id, machine::Request::Cancel { author }, None).await? {
            enter::Outcome::Cancelled => Ok(()),
            enter::Outcome::Stream(_) | enter::Outcome::Untouched { .. } => {
                Err(RunError::internal(run_id, "a cancel ended without cancelling the run"))
            }
        }
    }

    /// Reads the stored state of one of this agent's runs (a run of another
    /// agent is [`RunError::OtherAgent`], as for every operation on a run).
    pub async fn get_run(&self, run_id: &str) -> Result<RunRecord, RunError> {
        self.load_named(run_id).await
    }

    /// Reads one of this agent's runs by an id a caller gave: an id outside
    /// the rule for run ids (see [`IdKind`]) is refused before the store is
    /// asked.
    async fn load_named(&self, run_id: &str) -> Result<RunRecord, RunError> {
        IdKind::Run.check(run_id)?;
        self.load(run_id).await
    }

    /// Reads one of this agent's runs. Sweeps read by ids they found in the
    /// store, so a run stored before the rule for ids still expires.
    async fn load(&self, run_id: &str) -> Result<RunRecord, RunError> {
        let run = self
            .inner
            .store
            .get(run_id)
            .await?
            .ok_or_else(|| RunError::UnknownRun {
                run_id: run_id.to_owned(),
            })?;
        if run.agent_id != self.inner.id {
            return Err(RunError::OtherAgent {
                run_id: run.run_id,
                agent_id: self.inner.id.clone(),
                owner: run.agent_id,
            });
        }
        Ok(run)
    }

    fn spawn(&self, state: RunState, start: Begin) -> AgentStream {
        self.spawn_in(state, start, None)
    }

    /// A stream of the run driven from `start`, in `span` when given.
    fn spawn_in(&self, state: RunState, start: Begin, span: Option<tracing::Span>) -> AgentStream {
        let queue = stream::ChunkQueue::default();
        let run_id = state.record.run_id.clone();
        let driver = Driver::new(Arc::clone(&self.inner), state, Arc::clone(&queue));
        AgentStream::new(run_id, queue, driver.run(start, span))
    }
}

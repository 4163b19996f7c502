//! [`Agent`]: a model, instructions and tools, driving runs that can stop to
//! ask a person and carry on when the answer comes.

mod builder;
mod cache;
mod driver;
mod expiry;
mod lease;
mod machine;
#[cfg(test)]
mod machine_properties;
mod options;
mod recovery;
mod resume;
mod stream;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use chrono::Utc;
use serde_json::{Value, json};

use crate::error::RunError;
use crate::model::{Model, ToolSpec};
use crate::store::{Author, Lease, Resolution, ResolutionKind, RunRecord, RunStatus, RunStore, RunUpdate, StoreError};
use crate::tool::Tool;

pub use builder::{AgentBuilder, BuildError};
pub(crate) use expiry::rfc3339;
pub use lease::DEFAULT_LEASE;
pub use options::{AgentInput, ResumeOptions, StreamOptions};
pub use stream::{AgentStream, StreamOutput};

use cache::ConversationCache;
use driver::{Driver, RunState, Start};

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
    /// Who hears of questions raised and resolved (see `AgentBuilder::notify`).
    pub(crate) subscriptions: Vec<crate::store::Subscription>,
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

    /// What declining a question of `tool_id` means as an answer to it,
    /// when the tool has a decline of its own ([`Tool::decline_as_answer`]).
    pub(crate) fn decline_as_answer(&self, tool_id: &str, reason: Option<&str>) -> Option<serde_json::Value> {
        self.tools.get(tool_id)?.tool.decline_as_answer(reason)
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

impl RegisteredTool {
    /// What the run machine needs to know of the tool.
    pub(crate) fn rules(&self) -> machine::ToolRules {
        machine::ToolRules {
            needs_approval: self.needs_approval,
            idempotent: self.tool.idempotent(),
            max_per_step: self.tool.max_calls_per_step(),
        }
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

    /// The tools, as the model sees them.
    pub fn tool_specs(&self) -> &[ToolSpec] {
        &self.inner.specs
    }

    /// Whether calls of this tool wait for approval.
    pub fn requires_approval(&self, tool_id: &str) -> bool {
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

    /// Cancels a suspended (or running) run: its status becomes `cancelled`
    /// and the model is not called again.
    pub async fn cancel_run(&self, run_id: &str) -> Result<(), RunError> {
        self.cancel_run_by(run_id, Author::default()).await
    }

    /// Cancels a run (see [`Agent::cancel_run`]), recording `author`.
    pub async fn cancel_run_by(&self, run_id: &str, author: Author) -> Result<(), RunError> {
        let resolution = Resolution::now(None, ResolutionKind::Cancelled, author);
        for _ in 0..resume::CLAIM_ATTEMPTS {
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
                outbox: &[],
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

    /// Reads the stored state of one of this agent's runs (a run of another
    /// agent is [`RunError::OtherAgent`], as for every operation on a run).
    pub async fn get_run(&self, run_id: &str) -> Result<RunRecord, RunError> {
        self.load(run_id).await
    }

    /// Reads one of this agent's runs.
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

    fn spawn(&self, state: RunState, start: Start) -> AgentStream {
        let outbox = stream::Outbox::default();
        let run_id = state.record.run_id.clone();
        let driver = Driver::new(Arc::clone(&self.inner), state, Arc::clone(&outbox));
        AgentStream::new(run_id, outbox, driver.run(start))
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

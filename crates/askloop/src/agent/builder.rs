//! Building an [`Agent`]: its model, instructions and tools, checked once.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use super::build_error::BuildError;
use super::cache::{ConversationCache, DEFAULT_CACHED_MESSAGES};

use super::inner::{AgentInner, TimeLimits};
use super::tools::{AgentTools, Approvals};
use super::{Agent, DEFAULT_LAST_MESSAGES, DEFAULT_LEASE, DEFAULT_MAX_STEPS};
use crate::clock::{Clock, system_clock};
use crate::model::Model;
use crate::store::{MemoryStore, RunStore, Subscription};
use crate::tool::Tool;

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
    subscriptions: Vec<Subscription>,
    clock: Arc<dyn Clock>,
    last_messages: u32,
    rules: Vec<crate::rules::ApprovalRule>,
}

impl fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
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

    /// How many of a thread's last messages a run started on it reads as
    /// its context, unless the run asks for another number (Mastra's
    /// `lastMessages`; 10 by default).
    pub fn last_messages(mut self, messages: u32) -> Self {
        self.last_messages = messages;
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

    /// Adds an approval rule, asked after the ones added before it: the
    /// first rule with a verdict about a call decides it (allow, ask, or
    /// deny with a reason), recorded as decided by the rule. See
    /// [`ApprovalRule`](crate::ApprovalRule) for what each verdict may do.
    pub fn approval_rule(mut self, rule: crate::rules::ApprovalRule) -> Self {
        self.rules.push(rule);
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
    /// after the limit are refused with
    /// [`RunError::Expired`](crate::RunError::Expired).
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

    /// Notifies `subscription` of the events it wants (a question raised,
    /// answered, declined, approved, expired) of this agent's runs: each
    /// notification is written to the store's outbox in the same write as
    /// the change it announces, for a delivery worker to send (the server's
    /// webhooks; see
    /// [`DeliveryStore::claim_deliveries`](crate::DeliveryStore::claim_deliveries)).
    /// Without any, nothing is written and a step costs what it did.
    pub fn notify(mut self, subscription: Subscription) -> Self {
        self.subscriptions.push(subscription);
        self
    }

    /// The clock the agent reads the time from (time limits, leases, the
    /// times it records): the system's by default; a
    /// [`ManualClock`](crate::ManualClock) in tests. The store should read
    /// the same clock ([`MemoryStore::with_clock`], the SQL stores'
    /// options); the store made when none is given does.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Builds the agent, checking tool schemas once here rather than on
    /// every call.
    pub fn build(self) -> Result<Agent, BuildError> {
        let model = self.model.ok_or_else(|| BuildError::MissingModel(self.id.clone()))?;
        let approvals = Approvals {
            tools: self.approve_tools,
            all: self.approve_all,
        };
        let tools = AgentTools::new(&self.id, self.tools, approvals)?;
        Ok(Agent {
            inner: Arc::new(AgentInner {
                name: self.name.unwrap_or_else(|| self.id.clone()),
                id: self.id,
                instructions: self.instructions,
                model,
                tools,
                store: self
                    .store
                    .unwrap_or_else(|| Arc::new(MemoryStore::with_clock(Arc::clone(&self.clock)))),
                max_steps: self.max_steps,
                conversations: ConversationCache::new(self.cached_messages),
                lease_duration: self.lease_duration,
                time_limits: self.time_limits,
                subscriptions: self.subscriptions,
                clock: self.clock,
                last_messages: self.last_messages,
                rules: self.rules,
                drives: Arc::default(),
            }),
        })
    }
}

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
            subscriptions: Vec::new(),
            clock: system_clock(),
            last_messages: DEFAULT_LAST_MESSAGES,
            rules: Vec::new(),
        }
    }
}

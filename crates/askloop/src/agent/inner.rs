//! What an [`Agent`](super::Agent) holds: its model, tools, store, limits
//! and clock, shared by every stream of its runs.

use std::collections::HashMap;
use std::sync::Arc;

use super::cache::ConversationCache;
use super::lease::Drives;
use super::machine;
use super::tools::{AgentTools, ToolTable};
use crate::clock::Clock;
use crate::model::Model;
use crate::store::{Lease, PendingToolCall, RunRecord, RunStore, Subscription};

pub(crate) struct AgentInner {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) instructions: Option<String>,
    pub(crate) model: Arc<dyn Model>,
    /// Its tools (see `tools.rs`): read with [`AgentInner::tools`].
    pub(crate) tools: AgentTools,
    pub(crate) store: Arc<dyn RunStore>,
    pub(crate) max_steps: u32,
    pub(crate) conversations: ConversationCache,
    pub(crate) lease_duration: std::time::Duration,
    pub(crate) time_limits: TimeLimits,
    /// Who hears of questions raised and resolved (see `AgentBuilder::notify`).
    pub(crate) subscriptions: Vec<Subscription>,
    /// Where the agent reads the time.
    pub(crate) clock: Arc<dyn Clock>,
    /// How many of a thread's last messages a run on it reads by default.
    pub(crate) last_messages: u32,
    /// The approval rules, asked in order (see `rules.rs`).
    pub(crate) rules: Vec<crate::rules::ApprovalRule>,
    /// The runs this agent drives in this process (see `lease.rs`).
    pub(crate) drives: Arc<Drives>,
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
    /// Tells the tool of each of `calls` of `run` that the call will not be
    /// executed again ([`Tool::forget_call`](crate::Tool::forget_call)).
    pub(crate) fn forget_calls<'a>(&self, run: &RunRecord, calls: impl Iterator<Item = &'a PendingToolCall>) {
        let tools = self.tools();
        for call in calls {
            if let Some(registered) = tools.get(&call.tool_name) {
                registered.tool.forget_call(&run.run_id, &call.tool_call_id);
            }
        }
    }

    /// The agent's tools as they are now.
    pub(crate) fn tools(&self) -> Arc<ToolTable> {
        self.tools.now()
    }

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
        self.tools().get(tool_id)?.tool.decline_as_answer(reason)
    }

    /// A lease for a new driver of a run, from now.
    pub(crate) fn new_lease(&self) -> Lease {
        Lease::new(uuid::Uuid::now_v7().to_string(), self.clock.now() + self.lease_duration)
    }
}

/// Why `args` do not fit the input schema of the tool `name` of `tools`,
/// if they do not, checked with the validator compiled when it was added
/// (nothing for a tool the agent does not have).
pub(crate) fn input_problem(tools: &ToolTable, name: &str, args: &serde_json::Value) -> Option<String> {
    let registered = tools.get(name)?;
    crate::tool::describe_errors(&registered.validator, args)
        .err()
        .map(|err| err.to_string())
}

impl AgentInner {
    /// Asks `judge` about a call of the tool `name` with `args` in the run
    /// `record`, as the agent's rules and grants see it: with the arguments
    /// as the tool will act on them ([`crate::Tool::acts_on`]). The one
    /// place a proposed call is put to them, whoever proposed its
    /// arguments: the model, or a person who edited them before approving.
    fn judge<T>(
        &self,
        name: &str,
        args: &serde_json::Value,
        record: &RunRecord,
        judge: impl FnOnce(&crate::rules::ProposedCall<'_>) -> T,
    ) -> T {
        let tools = self.tools();
        let tool = tools.get(name).map(|t| t.tool.as_ref());
        let args = tool.map_or_else(|| args.clone(), |t| t.acts_on(args));
        let memory = record.memory.as_ref();
        let proposed = crate::rules::ProposedCall {
            tool: name,
            mcp_server: tool.and_then(|t| t.mcp_server()),
            args: &args,
            agent_id: &self.id,
            run_id: &record.run_id,
            thread_id: memory.map(|m| m.key.thread_id.as_str()),
            resource_id: memory.map(|m| m.key.resource_id.as_str()),
        };
        judge(&proposed)
    }

    /// The first of the agent's approval rules with a verdict about a call
    /// of `name` with `args` in the run `record`, and that rule's name.
    pub(crate) fn rule_verdict(
        &self,
        name: &str,
        args: &serde_json::Value,
        record: &RunRecord,
    ) -> Option<(String, crate::Verdict)> {
        if self.rules.is_empty() {
            return None;
        }
        self.judge(name, args, record, |proposed| {
            crate::rules::first_verdict(&self.rules, proposed)
        })
    }

    /// What the agent's approval rules and `grants` decide about `call` of
    /// the run `record`, judged on the arguments as the call's tool will
    /// act on them: a rule that denies the call wins; else a grant that
    /// covers it allows it; else the first rule with a verdict.
    pub(crate) fn ruling(
        &self,
        call: &crate::message::ToolCall,
        record: &RunRecord,
        grants: &[crate::Grant],
    ) -> Option<machine::Ruling> {
        if self.rules.is_empty() && grants.is_empty() {
            return None;
        }
        let now = self.clock.now();
        let (ruled, granted) = self.judge(&call.name, &call.args, record, |proposed| {
            (
                crate::rules::first_verdict(&self.rules, proposed),
                grants.iter().find(|g| g.covers(proposed, now)),
            )
        });
        let recorded = record.resolution_of(&call.id).is_some_and(|r| {
            matches!(
                r.author.via,
                crate::store::Interface::Rule | crate::store::Interface::Grant
            )
        });
        let (rule, verdict, grant) = match (ruled, granted) {
            (Some((rule, verdict @ crate::Verdict::Deny(_))), _) | (Some((rule, verdict)), None) => {
                (rule, verdict, None)
            }
            (_, Some(grant)) => (grant.id.clone(), crate::Verdict::Allow, Some(grant.clone())),
            (None, None) => return None,
        };
        Some(machine::Ruling {
            rule,
            verdict,
            at: now,
            recorded,
            grant,
        })
    }

    /// Whether a call of the agent can wait for approval at all (then a
    /// grant can matter to it).
    pub(crate) fn asks_approval(&self) -> bool {
        self.tools()
            .registered()
            .any(|t| t.needs_approval || t.tool.requires_approval())
            || !self.rules.is_empty()
    }
}

impl AgentInner {
    /// What the run machine needs to know of the tool `name` of `tools`, if
    /// the agent has it.
    pub(crate) fn rules_in(&self, tools: &ToolTable, name: &str) -> Option<machine::ToolRules> {
        let registered = tools.get(name)?;
        Some(machine::ToolRules {
            needs_approval: registered.needs_approval,
            own_approval: registered.tool.requires_approval(),
            idempotent: registered.tool.idempotent(),
            max_per_step: registered.tool.max_calls_per_step(),
            time_limit: self.time_limit_for(name),
        })
    }
}

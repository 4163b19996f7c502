//! Approval rules: functions of a tool call that decide it instead of a
//! person for the obvious cases: run it without asking, ask, or refuse it
//! with a reason the model is told.
//!
//! An agent's rules ([`AgentBuilder::approval_rule`]) are asked in order,
//! once per call, when the model makes it; the first with a verdict wins,
//! and a call no rule decides follows its tool's policy (and the agent's
//! `require_approval`). What a rule decided is recorded among the run's
//! resolutions as decided by the rule (its name), not by a person:
//!
//! - [`Verdict::Deny`]: the call never runs; the model is told the reason,
//!   as for a decline (`tool-output-denied`).
//! - [`Verdict::Allow`]: the call runs without waiting, even where the
//!   agent's configuration would have it wait (`require_approval`), but
//!   never where the tool's own policy asks ([`Tool::requires_approval`]):
//!   a tool that acts outside the process (`write_file`) asks unless its
//!   own option says otherwise. An allowed call that would have waited is
//!   recorded as approved by the rule.
//! - [`Verdict::Ask`]: the call waits for a person, as if its tool needed
//!   approval.
//!
//! A rule sees the arguments as the tool will act on them
//! ([`Tool::acts_on`]): `write_file`'s path resolved, so that `docs/../x`
//! is not inside `docs/`. Rules are a convenience, not a sandbox: a rule
//! that allows what a tool can be talked into doing beyond what its
//! arguments say allows that too.
//!
//! [`AgentBuilder::approval_rule`]: crate::AgentBuilder::approval_rule
//! [`Tool::requires_approval`]: crate::Tool::requires_approval
//! [`Tool::acts_on`]: crate::Tool::acts_on

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// What a rule decides about a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Run it without waiting for a person.
    Allow,
    /// Wait for a person's approval.
    Ask,
    /// Never run it; the model is told this reason.
    Deny(String),
}

/// A tool call as a rule sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ProposedCall<'a> {
    /// The tool's name.
    pub tool: &'a str,
    /// The MCP server the tool comes from, for an MCP tool.
    pub mcp_server: Option<&'a str>,
    /// The arguments, as the tool will act on them ([`crate::Tool::acts_on`]).
    pub args: &'a Value,
    /// The agent.
    pub agent_id: &'a str,
    /// The run.
    pub run_id: &'a str,
    /// The thread the run is on, if any.
    pub thread_id: Option<&'a str>,
    /// Whom that thread belongs to, if the run is on one.
    pub resource_id: Option<&'a str>,
}

impl<'a> ProposedCall<'a> {
    /// A call of `tool` with `args`, on no thread, of no MCP server, of no
    /// run in particular: for trying rules out (the agent fills in the
    /// rest when it asks them).
    pub fn new(tool: &'a str, args: &'a Value) -> Self {
        ProposedCall {
            tool,
            mcp_server: None,
            args,
            agent_id: "",
            run_id: "",
            thread_id: None,
            resource_id: None,
        }
    }

    /// The MCP server the tool comes from.
    pub fn from_server(mut self, server: &'a str) -> Self {
        self.mcp_server = Some(server);
        self
    }
}

type Decide = dyn Fn(&ProposedCall<'_>) -> Option<Verdict> + Send + Sync;

/// A named approval rule: a function of a call returning a [`Verdict`], or
/// `None` to leave the call to the next rule. Cloning is cheap.
///
/// ```
/// use askloop::{ApprovalRule, Verdict};
/// let no_deletes = ApprovalRule::new("no-deletes", |call| {
///     call.tool.starts_with("delete_").then(|| Verdict::Deny("deleting is not allowed here".into()))
/// });
/// assert_eq!(no_deletes.name(), "no-deletes");
/// ```
#[derive(Clone)]
pub struct ApprovalRule {
    name: String,
    decide: Arc<Decide>,
}

impl ApprovalRule {
    /// A rule called `name` (recorded as the author of what it decides).
    pub fn new(
        name: impl Into<String>,
        decide: impl Fn(&ProposedCall<'_>) -> Option<Verdict> + Send + Sync + 'static,
    ) -> Self {
        ApprovalRule {
            name: name.into(),
            decide: Arc::new(decide),
        }
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the rule decides about `call`, if anything.
    pub fn decide(&self, call: &ProposedCall<'_>) -> Option<Verdict> {
        (self.decide)(call)
    }
}

impl fmt::Debug for ApprovalRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalRule")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The verdict of the first of `rules` that has one about `call`, with
/// that rule's name.
pub(crate) fn first_verdict(rules: &[ApprovalRule], call: &ProposedCall<'_>) -> Option<(String, Verdict)> {
    rules
        .iter()
        .find_map(|rule| rule.decide(call).map(|verdict| (rule.name.clone(), verdict)))
}

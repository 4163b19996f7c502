//! The tools an agent has: one table, checked as it is made, read whole by
//! each driver and request, and replaced whole when tools are added later
//! ([`Agent::add_tools`]: an MCP server that could not be reached when the
//! agent was built, whose tools come once it answers).
//!
//! A driver takes the table once, when it starts, so a run's step sees one
//! set of tools from its model call to its tool calls; a tool added
//! meanwhile is offered from the run's next stream on.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};

use super::build_error::BuildError;
use crate::ask_user::ASK_USER_TOOL_ID;
use crate::model::ToolSpec;
use crate::tool::Tool;

/// A tool of the agent, with its input schema compiled and whether its
/// calls wait for approval.
pub(crate) struct RegisteredTool {
    pub(crate) tool: Arc<dyn Tool>,
    pub(crate) validator: jsonschema::Validator,
    pub(crate) needs_approval: bool,
}

/// The tools at one moment: each by its id, with its checked schema, and
/// as the model is shown them, in order.
#[derive(Default)]
pub(crate) struct ToolTable {
    by_id: HashMap<String, Arc<RegisteredTool>>,
    pub(crate) specs: Vec<ToolSpec>,
}

impl ToolTable {
    pub(crate) fn get(&self, id: &str) -> Option<&RegisteredTool> {
        self.by_id.get(id).map(|registered| &**registered)
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    pub(crate) fn registered(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.by_id.values().map(|registered| &**registered)
    }
}

/// The tools of a table, as the model sees them (what
/// [`Agent::tool_specs`](super::Agent::tool_specs) gives).
pub(crate) struct Specs(pub(crate) Arc<ToolTable>);

impl std::ops::Deref for Specs {
    type Target = [ToolSpec];

    fn deref(&self) -> &[ToolSpec] {
        &self.0.specs
    }
}

/// Which calls wait for approval: those of the tools named, or of every
/// tool but `ask_user`; kept for tools added later.
#[derive(Debug, Clone, Default)]
pub(crate) struct Approvals {
    pub(crate) tools: HashSet<String>,
    pub(crate) all: bool,
}

/// An agent's tools, as they are now.
pub(crate) struct AgentTools {
    table: RwLock<Arc<ToolTable>>,
    approvals: Approvals,
}

impl AgentTools {
    /// The agent `agent_id`'s tools, checked: each schema compiles, no two
    /// share an id, each tool `approvals` names is one of them.
    pub(crate) fn new(agent_id: &str, tools: Vec<Arc<dyn Tool>>, approvals: Approvals) -> Result<Self, BuildError> {
        let mut table = ToolTable::default();
        add(&mut table, agent_id, tools, &approvals)?;
        if let Some(missing) = approvals.tools.iter().find(|id| !table.contains(id)) {
            return Err(BuildError::UnknownApprovalTool(missing.clone()));
        }
        Ok(AgentTools {
            table: RwLock::new(Arc::new(table)),
            approvals,
        })
    }

    /// The table as it is now.
    pub(crate) fn now(&self) -> Arc<ToolTable> {
        // A writer swaps one Arc: a panic cannot leave the table half made.
        Arc::clone(&self.table.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Adds `tools`, checked as the first ones were, the calls of those
    /// `approve` names (and those the agent was built to approve) waiting
    /// for approval. All or none: a tool that cannot be added leaves the
    /// table as it was.
    pub(crate) fn add(&self, agent_id: &str, tools: Vec<Arc<dyn Tool>>, approve: &[String]) -> Result<(), BuildError> {
        let mut approvals = self.approvals.clone();
        approvals.tools.extend(approve.iter().cloned());
        let mut slot = self.table.write().unwrap_or_else(PoisonError::into_inner);
        let mut table = ToolTable {
            by_id: slot.by_id.clone(),
            specs: slot.specs.clone(),
        };
        let ids: Vec<String> = tools.iter().map(|t| t.id().to_owned()).collect();
        add(&mut table, agent_id, tools, &approvals)?;
        if let Some(missing) = approve.iter().find(|id| !ids.contains(id)) {
            return Err(BuildError::UnknownApprovalTool(missing.clone()));
        }
        *slot = Arc::new(table);
        Ok(())
    }
}

/// Registers `tools` in `table`, in order.
fn add(
    table: &mut ToolTable,
    agent_id: &str,
    tools: Vec<Arc<dyn Tool>>,
    approvals: &Approvals,
) -> Result<(), BuildError> {
    for tool in tools {
        let tool_id = tool.id().to_owned();
        let validator = jsonschema::validator_for(tool.input_schema()).map_err(|err| BuildError::InvalidSchema {
            tool_id: tool_id.clone(),
            reason: err.to_string(),
        })?;
        let needs_approval = tool.requires_approval()
            || approvals.tools.contains(&tool_id)
            || (approvals.all && tool_id != ASK_USER_TOOL_ID);
        if table.by_id.contains_key(&tool_id) {
            return Err(BuildError::DuplicateTool {
                agent_id: agent_id.to_owned(),
                tool_id,
            });
        }
        table.specs.push(ToolSpec {
            name: tool_id.clone(),
            description: tool.description().to_owned(),
            input_schema: tool.input_schema().clone(),
        });
        table.by_id.insert(
            tool_id,
            Arc::new(RegisteredTool {
                tool,
                validator,
                needs_approval,
            }),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use crate::{Agent, FunctionTool, ScriptedModel, ToolOutput};

    use super::*;

    fn tool(id: &str) -> Arc<dyn Tool> {
        let said = format!("{id} ran");
        Arc::new(
            FunctionTool::builder(id)
                .input_schema(json!({"type": "object"}))
                .execute(move |_input: serde_json::Value, _ctx| {
                    let said = said.clone();
                    async move { Ok(ToolOutput::text(said).into()) }
                }),
        )
    }

    fn agent() -> Agent {
        let script = r#"{"turns": [{"toolCalls": [{"name": "late"}]}, {"text": "{{toolResults}}"}]}"#;
        Agent::builder("worker")
            .model(Arc::new(ScriptedModel::from_json("demo", script).unwrap()))
            .tool_arc(tool("early"))
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn a_tool_added_later_is_offered_and_run_from_then_on() {
        let agent = agent();
        let before = agent.stream("Go.").await.unwrap().output().await;
        assert!(before.text.starts_with("Unknown tool late."), "{}", before.text);
        agent.add_tools(vec![tool("late")], &[]).unwrap();
        let names: Vec<String> = agent.tool_specs().iter().map(|s| s.name.clone()).collect();
        assert_eq!(names, ["early", "late"]);
        let after = agent.stream("Go.").await.unwrap().output().await;
        assert_eq!(after.text, "late ran");
    }

    #[test]
    fn tools_added_later_are_checked_as_at_build_all_or_none_and_may_wait_for_approval() {
        let agent = agent();
        let err = agent.add_tools(vec![tool("late"), tool("early")], &[]).unwrap_err();
        assert!(
            matches!(err, BuildError::DuplicateTool { ref tool_id, .. } if tool_id == "early"),
            "{err}"
        );
        let err = agent.add_tools(vec![tool("late")], &["other".into()]).unwrap_err();
        assert!(
            matches!(err, BuildError::UnknownApprovalTool(ref id) if id == "other"),
            "{err}"
        );
        assert_eq!(agent.tool_specs().len(), 1, "nothing was added");
        agent
            .add_tools(vec![tool("late"), tool("later")], &["later".into()])
            .unwrap();
        assert!(!agent.requires_approval("late"));
        assert!(agent.requires_approval("later"));
    }
}

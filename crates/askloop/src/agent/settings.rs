//! A run's [`RunSettings`] applied to its agent: which of them an agent
//! accepts, and the step limit, tools and instructions a driver of the run
//! works with.

use super::inner::AgentInner;
use super::machine::ToolRules;
use super::tools::ToolTable;
use crate::error::RunError;
use crate::model::ToolSpec;
use crate::store::RunSettings;

impl AgentInner {
    /// Refuses settings that would let a run do more than the agent
    /// allows: a step limit above the agent's, a tool it does not have.
    pub(crate) fn check_settings(&self, settings: &RunSettings) -> Result<(), RunError> {
        match settings.max_steps {
            Some(0) => return Err(RunError::InvalidInput("a run's max steps must be at least 1".into())),
            Some(steps) if steps > self.max_steps => {
                return Err(RunError::InvalidInput(format!(
                    "a run's max steps ({steps}) may not exceed its agent's ({})",
                    self.max_steps
                )));
            }
            _ => {}
        }
        let tools = self.tools();
        let unknown: Vec<&str> = settings
            .active_tools
            .iter()
            .flatten()
            .filter(|name| !tools.contains(name))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            return Err(RunError::InvalidInput(format!(
                "active tools {} are not tools of agent {}; its tools: {}",
                unknown.join(", "),
                self.id,
                tools
                    .specs
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(())
    }

    /// How many model calls a stream of a run with `settings` may make.
    pub(crate) fn max_steps_for(&self, settings: &RunSettings) -> u32 {
        settings
            .max_steps
            .map_or(self.max_steps, |steps| steps.min(self.max_steps))
    }

    /// The tools a run with `settings` has, in the order the model is shown
    /// them, with the rules the run machine applies to their calls.
    pub(crate) fn tool_rules_for(&self, tools: &ToolTable, settings: &RunSettings) -> Vec<(String, ToolRules)> {
        tools
            .specs
            .iter()
            .filter(|spec| settings.is_active(&spec.name))
            .filter_map(|spec| {
                let mut rules = self.rules_in(tools, &spec.name)?;
                rules.needs_approval |= settings.require_tool_approval;
                Some((spec.name.clone(), rules))
            })
            .collect()
    }

    /// The tools offered to the model in a run with `settings`: `None`
    /// when they are all of the agent's (no copy needed).
    pub(crate) fn tool_specs_for(tools: &ToolTable, settings: &RunSettings) -> Option<Vec<ToolSpec>> {
        settings.active_tools.as_ref()?;
        Some(
            tools
                .specs
                .iter()
                .filter(|spec| settings.is_active(&spec.name))
                .cloned()
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::{Agent, AskUser, FunctionTool, ScriptedModel, ToolOutput};

    fn agent() -> Agent {
        let model = ScriptedModel::from_json("demo", r#"{"turns": [{"text": "Hi"}]}"#).unwrap();
        let lookup = FunctionTool::builder("lookup")
            .input_schema(json!({"type": "object"}))
            .execute(|_input: serde_json::Value, _ctx| async move { Ok(ToolOutput::text("found").into()) });
        Agent::builder("worker")
            .model(Arc::new(model))
            .tool(AskUser::new())
            .tool(lookup)
            .max_steps(5)
            .build()
            .unwrap()
    }

    #[test]
    fn require_tool_approval_makes_every_tool_of_the_run_wait_and_active_tools_leave_the_others_out() {
        let agent = agent();
        let approvals = |settings: &RunSettings| -> Vec<(String, bool)> {
            agent
                .inner
                .tool_rules_for(&agent.inner.tools(), settings)
                .into_iter()
                .map(|(name, rules)| (name, rules.needs_approval))
                .collect()
        };
        let plain = RunSettings::default();
        assert_eq!(
            approvals(&plain),
            [("ask_user".into(), false), ("lookup".into(), false)]
        );
        assert!(
            AgentInner::tool_specs_for(&agent.inner.tools(), &plain).is_none(),
            "all of the agent's: no copy"
        );

        let all_wait = RunSettings::default().require_tool_approval();
        assert_eq!(
            approvals(&all_wait),
            [("ask_user".into(), true), ("lookup".into(), true)]
        );

        let only_lookup = RunSettings::default().active_tools(["lookup"]);
        assert_eq!(approvals(&only_lookup), [("lookup".into(), false)]);
        let offered: Vec<String> = AgentInner::tool_specs_for(&agent.inner.tools(), &only_lookup)
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(offered, ["lookup"]);
    }

    #[test]
    fn a_run_may_lower_the_step_limit_but_not_raise_it_nor_name_a_tool_the_agent_lacks() {
        let agent = agent();
        let inner = &agent.inner;
        assert_eq!(inner.max_steps_for(&RunSettings::default()), 5);
        assert_eq!(inner.max_steps_for(&RunSettings::default().max_steps(2)), 2);
        assert!(inner.check_settings(&RunSettings::default().max_steps(5)).is_ok());
        for refused in [
            RunSettings::default().max_steps(0),
            RunSettings::default().max_steps(6),
            RunSettings::default().active_tools(["shell"]),
        ] {
            let err = inner.check_settings(&refused).unwrap_err();
            assert!(matches!(err, RunError::InvalidInput(_)), "{err}");
        }
    }
}

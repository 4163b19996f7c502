//! [`RunSettings`]: what one run was started with beyond its agent's own
//! configuration, stored with the run.

use serde::{Deserialize, Serialize};

/// What one run may do, at most what its agent allows, and the
/// instructions it runs with when they are not the agent's. Set when the
/// run starts ([`StreamOptions`](crate::StreamOptions)) and stored with it,
/// so every process that drives the run later (a resume, an approval, a
/// recovery) keeps to the same settings.
///
/// The default changes nothing: the agent's limit, tools and instructions.
/// A run with settings is stored at a layout version that builds without
/// them refuse ([`RunRecord::schema_version`](crate::RunRecord::schema_version)):
/// a setting added later needs a layout of its own, for the same reason.
///
/// ```
/// use askloop::RunSettings;
/// let settings = RunSettings::default().max_steps(1).require_tool_approval();
/// assert_eq!(settings.max_steps, Some(1));
/// assert!(settings.require_tool_approval);
/// assert!(RunSettings::default().is_default());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RunSettings {
    /// Most model calls per stream (or resume), when lower than the
    /// agent's own limit; `None`: the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// Every tool call of the run waits for a person's approval before its
    /// tool runs, whether or not the tool asks for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_tool_approval: bool,
    /// Only these of the agent's tools are offered to the model and run
    /// (a call of another is refused as an unknown tool); `None`: all of
    /// them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_tools: Option<Vec<String>>,
    /// The system prompt of the run, instead of the agent's instructions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

impl RunSettings {
    /// At most `max_steps` model calls per stream (it may not exceed the
    /// agent's limit: [`Agent::stream_with`](crate::Agent::stream_with)
    /// refuses a larger one).
    pub fn max_steps(mut self, max_steps: u32) -> Self {
        self.max_steps = Some(max_steps);
        self
    }

    /// Every tool call waits for approval.
    pub fn require_tool_approval(mut self) -> Self {
        self.require_tool_approval = true;
        self
    }

    /// Only these of the agent's tools.
    pub fn active_tools<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.active_tools = Some(tools.into_iter().map(Into::into).collect());
        self
    }

    /// These instructions instead of the agent's.
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// Whether nothing differs from the agent's own configuration.
    pub fn is_default(&self) -> bool {
        *self == RunSettings::default()
    }

    /// Whether `tool_id` is offered to the model in this run.
    pub fn is_active(&self, tool_id: &str) -> bool {
        self.active_tools
            .as_ref()
            .is_none_or(|tools| tools.iter().any(|t| t == tool_id))
    }
}

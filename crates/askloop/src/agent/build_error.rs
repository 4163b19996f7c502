//! Why an agent could not be built: the error of [`AgentBuilder::build`](crate::AgentBuilder::build)
//! and of adding tools to a built agent.

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

//! `require_approval`: which of an agent's tools wait for a person before
//! each call.
//!
//! An agent's `require_approval` names tools it has: its built-in tools,
//! known when the file is read, and its MCP servers' tools, known only once
//! the servers list them. So a name that is none of its built-in tools is
//! checked when `askloop serve` or `askloop mcp` starts the servers
//! ([`ApprovalNames::Check`]): a name no tool has is a start-up error naming
//! the agent, the name and the tools it has. A server that cannot be reached
//! does not stop start-up; its tools are unknown then, so a name that may be
//! one of them is reported as unchecked rather than refused. Commands that
//! only go on with a run trust the names ([`ApprovalNames::Trust`]): they
//! were checked when the run's server started, and starting servers just to
//! check them again is not worth it.
//!
//! An `[[agents.<id>.mcp]]` table with `require_approval = true` makes every
//! tool of that server wait (`McpServerSpec::require_approval`).

use std::path::Path;

use super::{AgentConfig, ConfigError, ToolKind};

/// What to do with a `require_approval` name that none of the tools an
/// agent was built with has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalNames {
    /// It is an error, unless an MCP server of the agent could not be
    /// reached (then it is reported as unchecked): when `serve` or `mcp`
    /// starts.
    Check,
    /// It is left out without a word: commands that go on with a run that
    /// a server, which checked the names, started.
    Trust,
}

/// Reads the names when the file is read: each once, and, for an agent
/// without MCP servers, each one of its built-in `tools`.
pub(super) fn resolve(
    file: &Path,
    agent: &str,
    names: Vec<String>,
    tools: &[ToolKind],
    has_mcp: bool,
) -> Result<Vec<String>, ConfigError> {
    for (i, name) in names.iter().enumerate() {
        let at = format!("agents.{agent}.require_approval[{i}]");
        if names[..i].contains(name) {
            return Err(ConfigError::new(file, at, format!("{name} is listed twice")));
        }
        if has_mcp || tools.iter().any(|t| t.id() == name) {
            continue;
        }
        let problem = if ToolKind::from_id(name).is_some() {
            format!("{name} needs approval but is not in this agent's tools; add it to tools or remove it here")
        } else {
            let have: Vec<&str> = tools.iter().map(|t| t.id()).collect();
            format!(
                "agent {agent} has no tool {name:?}; its tools: {}. require_approval names the agent's built-in \
                 tools and the tools of its MCP servers ([[agents.{agent}.mcp]])",
                have.join(", ")
            )
        };
        return Err(ConfigError::new(file, at, problem));
    }
    Ok(names)
}

/// The names of `agent`'s `require_approval` that one of its tools has
/// (`have`: built-in and listed by its MCP servers), checked as `mode`
/// says. `unreachable`: the MCP servers that could not list their tools.
pub(super) fn applicable(
    file: &Path,
    agent: &AgentConfig,
    have: &[&str],
    unreachable: &[&str],
    mode: ApprovalNames,
    warnings: &mut Vec<String>,
) -> Result<Vec<String>, ConfigError> {
    let mut unchecked = Vec::new();
    for (i, name) in agent.require_approval.iter().enumerate() {
        if have.contains(&name.as_str()) || mode == ApprovalNames::Trust {
            continue;
        }
        if unreachable.is_empty() {
            return Err(ConfigError::new(
                file,
                format!("agents.{}.require_approval[{i}]", agent.id),
                format!(
                    "agent {} has no tool {name:?}; its tools: {}",
                    agent.id,
                    have.join(", ")
                ),
            ));
        }
        unchecked.push(format!("{name:?}"));
    }
    if !unchecked.is_empty() {
        warnings.push(format!(
            "{}: agents.{}.require_approval: {} could not be checked: none of the agent's tools has that name, and \
             its MCP server{} {}, which may have it, could not be reached",
            file.display(),
            agent.id,
            unchecked.join(", "),
            if unreachable.len() == 1 { "" } else { "s" },
            unreachable.join(", "),
        ));
    }
    Ok(agent
        .require_approval
        .iter()
        .filter(|name| have.contains(&name.as_str()))
        .cloned()
        .collect())
}

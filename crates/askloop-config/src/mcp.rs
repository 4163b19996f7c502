//! An agent's `[[agents.<id>.mcp]]` tables: the MCP servers whose tools it
//! is given, checked; and which of the tools they list the agent takes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use askloop::Tool;
use askloop_mcp::McpServerSpec;

use crate::{ConfigError, ToolKind, raw};

pub(crate) fn mcp_servers(
    file: &Path,
    base: &Path,
    agent: &str,
    raw: Vec<raw::RawMcpServer>,
) -> Result<Vec<McpServerSpec>, ConfigError> {
    let mut servers: Vec<McpServerSpec> = Vec::with_capacity(raw.len());
    for (i, server) in raw.into_iter().enumerate() {
        let key = |field: &str| format!("agents.{agent}.mcp[{i}]{field}");
        let mut spec = match (server.command, server.url) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    file,
                    key(""),
                    "give either command (stdio) or url (streamable HTTP), not both",
                ));
            }
            (None, None) => {
                return Err(ConfigError::new(
                    file,
                    key(""),
                    "give command = \"...\" (a program speaking MCP on stdio) or url = \"http://...\" (a streamable-HTTP endpoint)",
                ));
            }
            (Some(command), None) => {
                if server.headers.is_some() {
                    return Err(ConfigError::new(
                        file,
                        key(".headers"),
                        "headers go with url; a command takes env",
                    ));
                }
                let name = server.name.clone().unwrap_or_else(|| command.clone());
                let mut spec = McpServerSpec::stdio(name, command, server.args.unwrap_or_default());
                for (k, v) in server.env.unwrap_or_default() {
                    spec = spec.env(k, v);
                }
                spec.cwd(base.join(server.cwd.unwrap_or_else(|| PathBuf::from("."))))
            }
            (None, Some(url)) => {
                if server.args.is_some() || server.env.is_some() || server.cwd.is_some() {
                    return Err(ConfigError::new(
                        file,
                        key(""),
                        "args, env and cwd go with command; a url takes headers",
                    ));
                }
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(ConfigError::new(
                        file,
                        key(".url"),
                        format!("{url:?} is not an http:// or https:// URL"),
                    ));
                }
                let name = server.name.clone().unwrap_or_else(|| url.clone());
                let mut spec = McpServerSpec::http(name, url);
                for (k, v) in server.headers.unwrap_or_default() {
                    spec = spec.header(k, v);
                }
                spec
            }
        };
        if let Some(tools) = server.tools {
            spec = spec.only_tools(tools);
        }
        if let Some(secs) = server.hold_for_secs {
            spec = spec.hold_for(std::time::Duration::from_secs(secs));
        }
        if let Some(all) = server.require_approval {
            spec = spec.require_approval(all);
        }
        if servers.iter().any(|s| s.name == spec.name) {
            return Err(ConfigError::new(
                file,
                key(".name"),
                format!("another MCP server of this agent is named {:?}", spec.name),
            ));
        }
        servers.push(spec);
    }
    Ok(servers)
}

/// Adds to `tools` the tools `server` listed for agent `agent` (`key`: the
/// server's table), except a tool whose name is taken. A built-in tool's
/// name is always taken, whether or not the agent has that tool: a call of
/// `ask_user` is a question askloop asks and the page shows as one, so it
/// must never reach a server instead. So is the name of a tool the agent
/// already has from another of its servers. Such a tool is left out with a
/// warning naming the agent, the server and the tool, and the agent starts
/// without it: one server's choice of name does not keep every agent from
/// starting.
pub(crate) fn admit(
    file: &Path,
    key: &str,
    agent: &str,
    server: &McpServerSpec,
    listed: Vec<Arc<dyn Tool>>,
    tools: &mut Vec<Arc<dyn Tool>>,
    warnings: &mut Vec<String>,
) {
    for tool in listed {
        let name = tool.id();
        let taken_by = if ToolKind::ALL.iter().any(|built_in| built_in.id() == name) {
            Some(format!("the name of askloop's built-in tool {name}"))
        } else {
            tools.iter().find(|have| have.id() == name).map(|have| {
                let other = have.mcp_server().unwrap_or("another source");
                format!("a name the agent already has from the MCP server {other}")
            })
        };
        match taken_by {
            Some(taken_by) => warnings.push(format!(
                "{}: {key}: the MCP server {} offers a tool named {name}, {taken_by}; agent {agent} goes without that \
                 tool of {} (rename it in the server, or leave it out with the table's tools = [...])",
                file.display(),
                server.name,
                server.name,
            )),
            None => tools.push(tool),
        }
    }
}

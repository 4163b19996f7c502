//! An agent's `[[agents.<id>.mcp]]` tables: the MCP servers whose tools it
//! is given, checked.

use std::path::{Path, PathBuf};

use askloop_mcp::McpServerSpec;

use crate::{ConfigError, raw};

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

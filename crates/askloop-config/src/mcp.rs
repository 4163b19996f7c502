//! An agent's `[[agents.<id>.mcp]]` tables: the MCP servers whose tools it
//! is given, checked; and which of the tools they list the agent takes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use askloop::{Agent, Tool};
use askloop_mcp::McpServerSpec;

use crate::{ConfigError, ToolKind, duration, raw};

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
        let limit = |field: &str, text: Option<String>| -> Result<Option<Duration>, ConfigError> {
            text.map(|text| duration::parse_limit(&text))
                .transpose()
                .map_err(|problem| ConfigError::new(file, key(field), problem.to_string()))
        };
        if let Some(deadline) = limit(".initialize_timeout", server.initialize_timeout)? {
            spec = spec.initialize_timeout(deadline);
        }
        if let Some(deadline) = limit(".list_timeout", server.list_timeout)? {
            spec = spec.list_timeout(deadline);
        }
        if let Some(deadline) = limit(".call_timeout", server.call_timeout)? {
            spec = spec.call_timeout(deadline);
        }
        if let Some(grace) = limit(".stop_grace", server.stop_grace)? {
            spec = spec.stop_grace(grace);
        }
        match server.max_questions {
            Some(0) => {
                return Err(ConfigError::new(
                    file,
                    key(".max_questions"),
                    format!(
                        "0 would end every call that asks; give a positive number (the default is {})",
                        askloop_mcp::DEFAULT_MAX_QUESTIONS
                    ),
                ));
            }
            Some(most) => spec = spec.max_questions(most),
            None => {}
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

/// `[mcp]`: the limits of the `/mcp` sessions, each key falling back to its
/// default; zero would refuse every session, so it is an error.
pub(crate) fn resolve_endpoint(
    file: &Path,
    raw: Option<raw::RawMcpEndpoint>,
) -> Result<askloop_mcp::SessionLimits, ConfigError> {
    let defaults = askloop_mcp::SessionLimits::DEFAULT;
    let raw = raw.unwrap_or_default();
    let count = |key: &str, value: Option<usize>, default: usize| match value {
        Some(0) => Err(ConfigError::new(
            file,
            format!("mcp.{key}"),
            format!("0 would refuse every MCP session; give a positive number (the default is {default})"),
        )),
        Some(value) => Ok(value),
        None => Ok(default),
    };
    let idle = match raw.session_idle {
        Some(text) => duration::parse_limit(&text)
            .map_err(|problem| ConfigError::new(file, "mcp.session_idle", problem.to_string()))?,
        None => defaults.idle,
    };
    Ok(askloop_mcp::SessionLimits::new(
        count("max_sessions", raw.max_sessions, defaults.max_sessions)?,
        count(
            "max_sessions_per_token",
            raw.max_sessions_per_token,
            defaults.max_sessions_per_token,
        )?,
        idle,
    ))
}

/// Adds to `tools` the tools `server` listed for agent `agent` (`key`: the
/// server's table), except a tool whose name is taken. A built-in tool's
/// name is always taken, whether or not the agent has that tool: a call of
/// `ask_user` is a question askloop asks and the page shows as one, so it
/// must never reach a server instead. So is the name of a tool the agent
/// already has: one of `tools`, or one `has` names (a tool the built agent
/// has, saying where it came from). Such a tool is left out with a warning
/// naming the agent, the server and the tool, and the agent starts without
/// it: one server's choice of name does not keep every agent from starting.
#[allow(clippy::too_many_arguments)]
pub(crate) fn admit(
    file: &Path,
    key: &str,
    agent: &str,
    server: &McpServerSpec,
    listed: Vec<Arc<dyn Tool>>,
    has: &dyn Fn(&str) -> Option<String>,
    tools: &mut Vec<Arc<dyn Tool>>,
    warnings: &mut Vec<String>,
) {
    for tool in listed {
        let name = tool.id();
        let taken_by = if ToolKind::ALL.iter().any(|built_in| built_in.id() == name) {
            Some(format!("the name of askloop's built-in tool {name}"))
        } else if let Some(have) = tools.iter().find(|have| have.id() == name) {
            let other = have.mcp_server().unwrap_or("another source");
            Some(format!("a name the agent already has from the MCP server {other}"))
        } else {
            has(name).map(|from| format!("a name the agent already has from {from}"))
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

/// An MCP server an agent was built without, because it could not be
/// reached (it did not start, or missed its `initialize` or `tools/list`
/// deadline). [`LateServer::connect`] keeps trying, in the background,
/// and gives the agent the server's tools once it answers.
#[derive(Debug)]
pub struct LateServer {
    pub(crate) file: PathBuf,
    pub(crate) key: String,
    pub(crate) agent: Agent,
    pub(crate) server: McpServerSpec,
    /// The agent's `require_approval` names none of its tools had.
    pub(crate) approve: Vec<String>,
}

/// The waits between tries of a server that could not be reached: from a
/// second, doubling, up to a minute.
const RETRY: askloop::Backoff = askloop::Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

impl LateServer {
    /// The server's name.
    pub fn name(&self) -> &str {
        &self.server.name
    }

    /// Tries the server again (each try within its deadlines) until it
    /// lists its tools, then adds them to the agent, as at start-up: a tool
    /// whose name is taken is left out, and the calls of those the agent's
    /// `require_approval` names wait for approval. Returns what to tell the
    /// person: that the tools came, and any left out.
    pub async fn connect(self) -> Vec<String> {
        let mut retry = 0;
        let listed = loop {
            tokio::time::sleep(RETRY.wait(retry)).await;
            retry = retry.saturating_add(1);
            match askloop_mcp::mcp_tools(&self.server).await {
                Ok(listed) => break listed,
                Err(err) => {
                    tracing::info!(server = %self.server.name, error = %err, "the MCP server still cannot be reached")
                }
            }
        };
        let file = self.file.display();
        let specs = self.agent.tool_specs();
        let has = |name: &str| {
            specs
                .iter()
                .any(|spec| spec.name == name)
                .then(|| "another of its tools".to_owned())
        };
        let mut said = Vec::new();
        let mut tools = Vec::new();
        admit(
            &self.file,
            &self.key,
            self.agent.id(),
            &self.server,
            listed,
            &has,
            &mut tools,
            &mut said,
        );
        drop(specs);
        let names: Vec<String> = tools.iter().map(|tool| tool.id().to_owned()).collect();
        let approve: Vec<String> = self.approve.into_iter().filter(|name| names.contains(name)).collect();
        match self.agent.add_tools(tools, &approve) {
            Ok(()) => said.insert(
                0,
                format!(
                    "{file}: {}: the MCP server {} answered; agent {} has its tools now: {}",
                    self.key,
                    self.server.name,
                    self.agent.id(),
                    names.join(", ")
                ),
            ),
            Err(err) => said.push(format!(
                "{file}: {}: the MCP server {} answered, but its tools cannot be added to agent {}: {err}",
                self.key,
                self.server.name,
                self.agent.id()
            )),
        }
        said
    }
}

//! `askloop.toml`: the agents a server serves, and their assembly.
//!
//! This crate turns a configuration into working parts: agents with their
//! models, built-in tools ([`tools`]), MCP servers' tools and approval
//! rules, and the tokens, hosts and webhooks the server is given.
//! `askloop serve`, `askloop mcp` and the `askloop` command all build their
//! agents here; the HTTP server (`askloop-server`) only serves them.
//!
//! The file is read in two passes, as ripgrep reads its flags: serde reads
//! it into raw values (`raw.rs`), then [`ServerConfig::from_toml`] checks them
//! and resolves them into one [`ServerConfig`]; nothing else sees the raw
//! values. Every problem is one [`ConfigError`] naming the file, the key and
//! what is wrong.
//!
//! ```toml
//! [agents.deployer]
//! name = "Deployer"
//! instructions = "Ask which environment before deploying."
//! model = "openai/gpt-4o-mini"      # or: script = "deployer.json" (relative to this file)
//! tools = ["ask_user", "write_file"]
//! require_approval = ["write_file"]  # calls that wait for approval: built-in or MCP servers' tools
//! allow_free_text = true             # answers outside the offered options are accepted
//! request_overrides = ["instructions"]  # a request's `instructions` may replace the agent's
//!
//! [[agents.deployer.mcp]]            # an MCP server's tools (repeat the table for more)
//! name = "everything"
//! command = "npx"                    # a program speaking MCP on stdio...
//! args = ["-y", "@modelcontextprotocol/server-everything"]
//! # url = "http://127.0.0.1:3001/mcp"  # ...or a streamable-HTTP endpoint
//! # headers = { Authorization = "Bearer ..." }
//! # tools = ["echo"]                 # only these of its tools
//! # require_approval = true          # every call of its tools waits for approval
//! # call_timeout = "60s"             # each call's deadline (also initialize_timeout, list_timeout)
//!
//! [[agents.deployer.rules]]          # approval rules, first match decides (see `rules.rs`)
//! name = "no-secrets"
//! tool = "write_file"                # a glob over tool names; server = "..." for one MCP server's
//! arg = "/path"                      # the value at this JSON pointer, as the tool acts on it...
//! glob = "secrets/**"                # ...matched by equals, glob or regex
//! decision = "deny"                  # allow, ask or deny
//! reason = "secrets are not written by agents"
//! ```
//!
//! API tokens, the author header and the hosts answered to are top-level
//! keys (see `access.rs`):
//!
//! ```toml
//! author_header = "X-Forwarded-User"  # set by a trusted proxy; it must strip it from clients
//! allowed_hosts = ["askloop.internal"] # besides loopback names, addresses and public_url's host
//!
//! [mcp]                               # the /mcp endpoint's sessions (see mcp.rs)
//! max_sessions = 1000
//! max_sessions_per_token = 100
//! session_idle = "5m"
//!
//! [[tokens]]
//! name = "alice"
//! token_env = "ALICE_TOKEN"
//! agents = ["deployer"]              # optional: only these agents (others: 403)
//! ```

#![warn(missing_docs)]

mod access;
mod agents;
mod approvals;
mod duration;
mod email;
mod links;
mod mcp;
mod raw;
mod reach;
mod rules;
mod slack;
mod telemetry;
pub mod tools;
mod webhooks;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use askloop::{Agent, AskUserLimits, Model, RunStore, ScriptedModel, Tool};
use askloop_mcp::{McpError, McpServerSpec};
use askloop_server::{ApiToken, RequestOverride};

use crate::agents::{resolve_agent, resolve_limits};
use crate::tools::WRITE_FILE_TOOL_ID;

pub use approvals::ApprovalNames;
pub use askloop_server::{DEFAULT_MAX_ATTEMPTS, DEFAULT_WEBHOOK_TIMEOUT, InvalidSecret, WebhookConfig, WebhookSecret};
pub use mcp::LateServer;
pub use rules::RuleConfig;
pub use telemetry::{TelemetryConfig, read_telemetry};

/// The default agent's id, when there is no configuration file.
pub const DEFAULT_AGENT_ID: &str = "assistant";

/// The configuration file read from the working folder when `--config` is
/// not given.
pub const DEFAULT_FILE: &str = "askloop.toml";

/// The default agent's instructions, and those of an agent with `ask_user`
/// whose table gives none.
pub const DEFAULT_INSTRUCTIONS: &str = "You are a helpful assistant. When a request is ambiguous, when you are \
about to act on an assumption, or when there are several reasonable options, ask the person with the ask_user \
tool instead of guessing: give 2-4 options for a choice, none for an open question. Keep answers short.";

/// The instructions of an agent without `ask_user` whose table gives none.
/// They name no tool: the model is never sent to an `ask_user` the agent
/// does not have.
pub const DEFAULT_INSTRUCTIONS_WITHOUT_ASK_USER: &str = "You are a helpful assistant. When a request is ambiguous, \
or when you act on an assumption, say so in your answer. Keep answers short.";

/// The agents to serve, checked.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The file they came from (`None`: the built-in default).
    pub path: Option<PathBuf>,
    /// The agents, ordered by id.
    pub agents: Vec<AgentConfig>,
    /// The `[limits]` table: options, answer size and questions per step
    /// of every agent's `ask_user`.
    pub limits: AskUserLimits,
    /// `[[tokens]]`: named API tokens, their secrets read.
    pub tokens: Vec<ApiToken>,
    /// `author_header`: the header a trusted proxy names the author in.
    pub author_header: Option<String>,
    /// `allowed_hosts`: host names the server answers to besides loopback
    /// names, addresses and the public URL's host.
    pub allowed_hosts: Vec<String>,
    /// What is allowed but unwise (a token's secret written in the file),
    /// for the program to show.
    pub warnings: Vec<String>,
    /// The address people open the page at (`public_url`), for links to
    /// runs in notifications.
    pub public_url: Option<String>,
    /// Where notifications of questions go (`[[webhooks]]`).
    pub webhooks: Vec<WebhookConfig>,
    /// Signed answer links (`[links]`), when on.
    pub links: Option<askloop_server::links::LinkSettings>,
    /// OpenTelemetry trace export (`[telemetry]`), when the file has the
    /// table.
    pub telemetry: Option<TelemetryConfig>,
    /// Questions mailed to each agent's recipients (`[email]` and
    /// `[[agents.<id>.email]]`), when on.
    pub email: Option<askloop_server::email::EmailSettings>,
    /// Questions posted to each agent's Slack channels (`[slack]` and
    /// `[[agents.<id>.slack]]`), when on.
    pub slack: Option<askloop_server::slack::SlackSettings>,
    /// `[mcp]`: how many `/mcp` sessions may be open, and for how long one
    /// may idle.
    pub mcp_sessions: askloop_mcp::SessionLimits,
}

/// One agent, checked.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The id (the key under `[agents]`).
    pub id: String,
    /// The display name (defaults to the id).
    pub name: String,
    /// The instructions (system prompt).
    pub instructions: String,
    /// The model.
    pub model: ModelSource,
    /// The tools, in the order given.
    pub tools: Vec<ToolKind>,
    /// The names of the tools whose calls wait for approval (`write_file`
    /// always does): built-in tools, or its MCP servers' tools, which are
    /// checked when the servers list them.
    pub require_approval: Vec<String>,
    /// Whether choice questions accept answers outside their options.
    pub allow_free_text: bool,
    /// Most model calls per stream, when not the default.
    pub max_steps: Option<u32>,
    /// How many of a thread's last messages a run on it reads, when not
    /// the default (10).
    pub last_messages: Option<u32>,
    /// The fields a stream or generate request may replace this agent's
    /// settings with for its run (`request_overrides`); none by default.
    pub request_overrides: Vec<RequestOverride>,
    /// Where `write_file` writes.
    pub write_dir: PathBuf,
    /// How long any question or approval of this agent may wait.
    pub time_limit: Option<std::time::Duration>,
    /// How long a call of one tool may wait (over `time_limit`).
    pub time_limits: Vec<(ToolKind, std::time::Duration)>,
    /// MCP servers whose tools the agent gets (`[[agents.<id>.mcp]]`).
    pub mcp: Vec<McpServerSpec>,
    /// Approval rules, asked in order (`[[agents.<id>.rules]]`).
    pub rules: Vec<RuleConfig>,
}

/// Where an agent's model comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelSource {
    /// The server's default model (the `askloop` command: `--model`,
    /// `--script`, the environment, else the offline demo).
    Default,
    /// A model spec, e.g. `openai/gpt-4o-mini`.
    Spec(String),
    /// A scripted model file (absolute path).
    Script(PathBuf),
}

impl ModelSource {
    /// Makes the model: a spec's provider from the environment, a script
    /// read from its file, or `default_model`'s. The error names the key
    /// that chose it (`model` or `script`) and what is wrong.
    pub fn make(&self, default_model: &DefaultModel<'_>) -> Result<Arc<dyn Model>, ModelSourceError> {
        let failed = |key, problem: String| ModelSourceError { key, problem };
        match self {
            ModelSource::Default => default_model().map_err(|err| failed("model", err.to_string())),
            ModelSource::Spec(spec) => {
                askloop_providers::from_spec(spec).map_err(|err| failed("model", err.to_string()))
            }
            ModelSource::Script(path) => ScriptedModel::from_file(path)
                .map(|model| Arc::new(model) as Arc<dyn Model>)
                .map_err(|err| failed("script", err.to_string())),
        }
    }
}

/// Why [`ModelSource::make`] made no model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
#[non_exhaustive]
pub struct ModelSourceError {
    /// The key that chose the model: `model` (a spec, or the default) or
    /// `script`.
    pub key: &'static str,
    /// What is wrong, and what would be accepted.
    pub problem: String,
}

/// A built-in tool an agent can be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolKind {
    /// `ask_user`: free-text, single-select and multi-select questions.
    AskUser,
    /// `write_file`: writes a file under `write_dir`, after approval.
    WriteFile,
}

impl ToolKind {
    /// Every tool, for messages.
    pub const ALL: [ToolKind; 2] = [ToolKind::AskUser, ToolKind::WriteFile];

    /// The tool's id.
    pub fn id(self) -> &'static str {
        match self {
            ToolKind::AskUser => askloop::ASK_USER_TOOL_ID,
            ToolKind::WriteFile => WRITE_FILE_TOOL_ID,
        }
    }

    fn from_id(id: &str) -> Option<ToolKind> {
        ToolKind::ALL.into_iter().find(|t| t.id() == id)
    }
}

/// A configuration file that cannot be used: which file, which key, what is
/// wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}{}: {problem}", file.display(), if key.is_empty() { "(top level)" } else { key }, line.map(|l| format!(" (line {l})")).unwrap_or_default())]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// The key, e.g. `agents.deployer.tools[1]`; empty for the whole file.
    pub key: String,
    /// The line, when known.
    pub line: Option<usize>,
    /// What is wrong, and what would be accepted.
    pub problem: String,
}

impl ConfigError {
    fn new(file: &Path, key: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_path_buf(),
            key: key.into(),
            line: None,
            problem: problem.into(),
        }
    }
}

impl ServerConfig {
    /// The configuration without a file: one agent, `assistant`, with
    /// `ask_user` and the server's default model.
    pub fn default_agent() -> Self {
        ServerConfig {
            path: None,
            agents: vec![AgentConfig {
                id: DEFAULT_AGENT_ID.to_owned(),
                name: "Assistant".to_owned(),
                instructions: DEFAULT_INSTRUCTIONS.to_owned(),
                model: ModelSource::Default,
                tools: vec![ToolKind::AskUser],
                require_approval: Vec::new(),
                allow_free_text: false,
                max_steps: None,
                last_messages: None,
                request_overrides: Vec::new(),
                write_dir: PathBuf::from("."),
                time_limit: None,
                time_limits: Vec::new(),
                mcp: Vec::new(),
                rules: Vec::new(),
            }],
            limits: AskUserLimits::default(),
            tokens: Vec::new(),
            author_header: None,
            allowed_hosts: Vec::new(),
            warnings: Vec::new(),
            public_url: None,
            webhooks: Vec::new(),
            links: None,
            telemetry: None,
            email: None,
            slack: None,
            mcp_sessions: askloop_mcp::SessionLimits::DEFAULT,
        }
    }

    /// The configuration file a command reads: `given` (`--config`), else
    /// [`DEFAULT_FILE`] in the working folder when it exists; `None` when
    /// there is none, for the built-in configuration.
    pub fn locate(given: Option<&Path>) -> Option<PathBuf> {
        match given {
            Some(path) => Some(path.to_path_buf()),
            None => Some(PathBuf::from(DEFAULT_FILE)).filter(|path| path.is_file()),
        }
    }

    /// The configuration of the file [`ServerConfig::locate`] finds,
    /// checked, else [`ServerConfig::default_agent`].
    pub fn find(given: Option<&Path>) -> Result<Self, ConfigError> {
        match Self::locate(given) {
            Some(path) => Self::load(&path),
            None => Ok(Self::default_agent()),
        }
    }

    /// Reads and checks a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|err| ConfigError::new(path, "", format!("cannot read the file: {err}")))?;
        Self::from_toml(path, &text)
    }

    /// Checks configuration text; `path` names it in errors and anchors
    /// relative paths (`script`, `write_dir`). Tokens' `token_env` are read
    /// from this process's environment.
    pub fn from_toml(path: &Path, text: &str) -> Result<Self, ConfigError> {
        Self::from_toml_with_env(path, text, &|name| {
            std::env::var(name).ok().filter(|value| !value.trim().is_empty())
        })
    }

    /// As [`ServerConfig::from_toml`], reading environment variables with
    /// `env` (`None`: not set).
    pub fn from_toml_with_env(
        path: &Path,
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut raw = raw::parse(path, text)?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let base = std::path::absolute(&base).unwrap_or(base);
        if raw.agents.is_empty() {
            return Err(ConfigError::new(
                path,
                "agents",
                "no agents: add at least one table like [agents.assistant] with instructions = \"...\"",
            ));
        }
        let limits = resolve_limits(path, raw.limits)?;
        let public_url = webhooks::resolve_public_url(path, raw.public_url)?;
        let ids: Vec<String> = raw.agents.keys().cloned().collect();
        let recipients = raw
            .agents
            .iter_mut()
            .filter_map(|(id, agent)| agent.email.take().map(|list| (id.clone(), list)))
            .collect();
        let channels = raw
            .agents
            .iter_mut()
            .filter_map(|(id, agent)| agent.slack.take().map(|list| (id.clone(), list)))
            .collect();
        let hooks = webhooks::resolve_webhooks(path, raw.webhooks, &ids)?;
        let agents = raw
            .agents
            .into_iter()
            .map(|(id, agent)| resolve_agent(path, &base, id, agent))
            .collect::<Result<Vec<_>, _>>()?;
        let ids: Vec<&str> = agents.iter().map(|a| a.id.as_str()).collect();
        let (tokens, mut warnings) = access::resolve_tokens(path, raw.tokens, &ids, env)?;
        let author_header = access::resolve_author_header(path, raw.author_header)?;
        if author_header.is_none() {
            warnings.extend(access::idle_without_person(path, &tokens));
        }
        let allowed_hosts = access::resolve_allowed_hosts(path, raw.allowed_hosts)?;
        let links = links::resolve_links(path, raw.links, env)?;
        let telemetry = telemetry::resolve_telemetry(path, raw.telemetry)?;
        let needs = email::Needs {
            links: links.is_some(),
            public_url: public_url.as_deref(),
        };
        let email = email::resolve_email(path, raw.email, recipients, needs, env)?;
        let slack = slack::resolve_slack(path, raw.slack, channels, env)?;
        let mcp_sessions = mcp::resolve_endpoint(path, raw.mcp)?;
        Ok(ServerConfig {
            path: Some(path.to_path_buf()),
            agents,
            limits,
            tokens,
            author_header,
            allowed_hosts,
            warnings,
            public_url,
            webhooks: hooks,
            links,
            telemetry,
            email,
            slack,
            mcp_sessions,
        })
    }

    /// Builds the agents on `store`. `default_model` makes the model of
    /// agents that name none. A model that cannot be made (a missing key, an
    /// unreadable script) is an error naming the agent's key. Agents with MCP
    /// servers need [`ServerConfig::build_agents_with_mcp`], which lists
    /// their tools first.
    pub fn build_agents(
        &self,
        store: &Arc<dyn RunStore>,
        default_model: &DefaultModel<'_>,
    ) -> Result<Vec<Agent>, ConfigError> {
        let file = self.file();
        self.agents
            .iter()
            .map(|agent| {
                if !agent.mcp.is_empty() {
                    return Err(ConfigError::new(
                        &file,
                        format!("agents.{}.mcp", agent.id),
                        "MCP servers' tools are listed before the agent is built: use build_agents_with_mcp",
                    ));
                }
                let model = agent.model(&file, default_model)?;
                agent.build(&file, store, model, Vec::new(), &agent.require_approval, self)
            })
            .collect()
    }

    /// Builds the agents as [`ServerConfig::build_agents`] does, first
    /// starting (or connecting to) each agent's MCP servers to list their
    /// tools, all at once, and checks the `require_approval` names as
    /// `names` says (see [`ApprovalNames`]). A server that cannot be
    /// reached, or misses its `initialize_timeout` or `list_timeout`, does
    /// not stop this: its agent is built without its tools, a warning says
    /// so, and [`BuiltAgents::late`] has it, to try again. A server that
    /// lacks a tool its `tools` key names is an error.
    pub async fn build_agents_with_mcp(
        &self,
        store: &Arc<dyn RunStore>,
        default_model: &DefaultModel<'_>,
        names: ApprovalNames,
    ) -> Result<BuiltAgents, ConfigError> {
        self.build_agents_observed(store, default_model, names, &unobserved)
            .await
    }

    /// Builds the agents as [`ServerConfig::build_agents_with_mcp`] does,
    /// each on the model `observe` returns for the one it would have had
    /// (`askloop serve` times and counts model calls for `/metrics` so).
    pub async fn build_agents_observed(
        &self,
        store: &Arc<dyn RunStore>,
        default_model: &DefaultModel<'_>,
        names_mode: ApprovalNames,
        observe: &ObserveModel<'_>,
    ) -> Result<BuiltAgents, ConfigError> {
        let file = self.file();
        let mut built = BuiltAgents::default();
        // Every server of every agent at once: start-up waits as long as
        // the slowest server's deadlines, not for their sum.
        let listings = futures::future::join_all(
            self.agents
                .iter()
                .flat_map(|agent| agent.mcp.iter().map(askloop_mcp::mcp_tools)),
        )
        .await;
        let mut listings = listings.into_iter();
        for agent in &self.agents {
            let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
            let mut unreachable: Vec<(String, &McpServerSpec)> = Vec::new();
            for (i, server) in agent.mcp.iter().enumerate() {
                let key = format!("agents.{}.mcp[{i}]", agent.id);
                let Some(listed) = listings.next() else {
                    break;
                };
                match listed {
                    Ok(listed) => mcp::admit(
                        &file,
                        &key,
                        &agent.id,
                        server,
                        listed,
                        &|_| None,
                        &mut tools,
                        &mut built.warnings,
                    ),
                    Err(err @ McpError::UnknownTool { .. }) => {
                        return Err(ConfigError::new(&file, format!("{key}.tools"), err.to_string()));
                    }
                    Err(err) => {
                        built.warnings.push(format!(
                            "{}: {key}: {err}; agent {} starts without the tools of {}, which are added if it answers \
                             later (askloop serve and askloop mcp keep trying)",
                            file.display(),
                            agent.id,
                            server.name
                        ));
                        unreachable.push((key, server));
                    }
                }
            }
            let have: Vec<&str> = agent
                .tools
                .iter()
                .map(|t| t.id())
                .chain(tools.iter().map(|t| t.id()))
                .collect();
            let names: Vec<&str> = unreachable.iter().map(|(_, server)| server.name.as_str()).collect();
            let approve = approvals::applicable(&file, agent, &have, &names, names_mode, &mut built.warnings)?;
            let waiting: Vec<String> = agent
                .require_approval
                .iter()
                .filter(|name| !have.contains(&name.as_str()))
                .cloned()
                .collect();
            let built_agent = agent.build(
                &file,
                store,
                observe(agent.model(&file, default_model)?),
                tools,
                &approve,
                self,
            )?;
            for (key, server) in unreachable {
                built.late.push(mcp::LateServer {
                    file: file.clone(),
                    key,
                    agent: built_agent.clone(),
                    server: server.clone(),
                    approve: waiting.clone(),
                });
            }
            built.agents.push(built_agent);
        }
        Ok(built)
    }

    fn file(&self) -> PathBuf {
        self.path
            .clone()
            .unwrap_or_else(|| PathBuf::from("(built-in configuration)"))
    }
}

/// Makes the model of agents whose table names none (`askloop serve
/// --model`'s choice), or says why it cannot.
pub type DefaultModel<'a> = dyn Fn() -> Result<Arc<dyn Model>, Box<dyn std::error::Error + Send + Sync>> + 'a;

/// Wraps the model an agent is built on (to measure it, say), or returns it.
pub type ObserveModel<'a> = dyn Fn(Arc<dyn Model>) -> Arc<dyn Model> + Send + Sync + 'a;

/// The model as it is.
fn unobserved(model: Arc<dyn Model>) -> Arc<dyn Model> {
    model
}

/// The agents [`ServerConfig::build_agents_with_mcp`] built, and what it
/// found wrong but not fatal (an MCP server that could not be reached), for
/// the program to show.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct BuiltAgents {
    /// The agents, in the configuration's order.
    pub agents: Vec<Agent>,
    /// One line per problem, naming the file and the key.
    pub warnings: Vec<String>,
    /// The MCP servers that could not be reached, whose agents started
    /// without their tools: a program that serves the agents for long
    /// runs each one's [`LateServer::connect`] in the background.
    pub late: Vec<LateServer>,
}

impl fmt::Display for ToolKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

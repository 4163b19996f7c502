//! One agent's table of `askloop.toml`: read and checked into an
//! [`AgentConfig`], then built into an [`Agent`] on its model, tools, rules
//! and MCP servers.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use askloop::{Agent, AskUser, AskUserLimits, Model, RunStore, Subscription, Tool};
use askloop_server::RequestOverride;

use crate::mcp::mcp_servers;
use crate::tools::write_file;
use crate::{
    AgentConfig, ConfigError, DEFAULT_INSTRUCTIONS, DEFAULT_INSTRUCTIONS_WITHOUT_ASK_USER, DefaultModel, ModelSource,
    ServerConfig, ToolKind, approvals, duration, raw, rules,
};

impl AgentConfig {
    /// The agent's model: its table's, else the default one.
    pub(crate) fn model(&self, file: &Path, default_model: &DefaultModel<'_>) -> Result<Arc<dyn Model>, ConfigError> {
        self.model
            .make(default_model)
            .map_err(|err| ConfigError::new(file, format!("agents.{}.{}", self.id, err.key), err.problem))
    }

    /// Builds the agent with its MCP servers' tools; `approve`: the tools
    /// whose calls wait for approval (each one it has).
    pub(crate) fn build(
        &self,
        file: &Path,
        store: &Arc<dyn RunStore>,
        model: Arc<dyn Model>,
        mcp_tools: Vec<Arc<dyn Tool>>,
        approve: &[String],
        server: &ServerConfig,
    ) -> Result<Agent, ConfigError> {
        let limits = server.limits;
        let mut builder = Agent::builder(self.id.clone())
            .name(self.name.clone())
            .instructions(self.instructions.clone())
            .model(model)
            .store(Arc::clone(store));
        if let Some(steps) = self.max_steps {
            builder = builder.max_steps(steps);
        }
        if let Some(messages) = self.last_messages {
            builder = builder.last_messages(messages);
        }
        if let Some(limit) = self.time_limit {
            builder = builder.time_limit(limit);
        }
        for (tool, limit) in &self.time_limits {
            builder = builder.time_limit_for(tool.id(), *limit);
        }
        for tool in &self.tools {
            builder = match tool {
                ToolKind::AskUser => builder.tool(
                    AskUser::new()
                        .allow_free_text_answers(self.allow_free_text)
                        .limits(limits),
                ),
                ToolKind::WriteFile => builder.tool(write_file(self.write_dir.clone())),
            };
        }
        for tool in mcp_tools {
            builder = builder.tool_arc(tool);
        }
        for tool in approve {
            builder = builder.require_approval_for(tool.clone());
        }
        for rule in &self.rules {
            builder = builder.approval_rule(rule.to_rule());
        }
        // Each webhook that hears of this agent is a subscription: the
        // agent writes its notifications to the store's outbox, in the
        // write that raises them, for the server's sender.
        for hook in server.webhooks.iter().filter(|h| h.covers(&self.id)) {
            builder = builder.notify(Subscription::new(hook.url.clone(), hook.events.iter().copied()));
        }
        // Each person its questions are mailed to is a subscription too,
        // to questions raised only: one mail per recipient, written with
        // the suspension, and their reminder or escalation written with it,
        // due later.
        for recipient in server.email.iter().flat_map(|email| email.recipients_of(&self.id)) {
            for subscription in recipient.subscriptions() {
                builder = builder.notify(subscription);
            }
        }
        // And each Slack channel its questions are posted to.
        for channel in server.slack.iter().flat_map(|slack| slack.recipients_of(&self.id)) {
            for subscription in channel.subscriptions() {
                builder = builder.notify(subscription);
            }
        }
        builder
            .build()
            .map_err(|err| ConfigError::new(file, format!("agents.{}", self.id), err.to_string()))
    }
}

/// `[limits]`: each key falls back to its default; zero would refuse
/// everything, so it is an error.
pub(crate) fn resolve_limits(file: &Path, raw: raw::RawLimits) -> Result<AskUserLimits, ConfigError> {
    let defaults = AskUserLimits::default();
    let pick = |key: &str, value: Option<usize>, default: usize| match value {
        Some(0) => Err(ConfigError::new(
            file,
            format!("limits.{key}"),
            format!("0 would refuse every question; give a positive number (the default is {default})"),
        )),
        Some(value) => Ok(value),
        None => Ok(default),
    };
    Ok(AskUserLimits {
        max_answer_bytes: pick("max_answer_bytes", raw.max_answer_bytes, defaults.max_answer_bytes)?,
        max_options: pick("max_options", raw.max_options, defaults.max_options)?,
        max_questions_per_step: pick(
            "max_questions_per_step",
            raw.max_questions_per_step,
            defaults.max_questions_per_step,
        )?,
    })
}

pub(crate) fn resolve_agent(
    file: &Path,
    base: &Path,
    id: String,
    raw: raw::RawAgent,
) -> Result<AgentConfig, ConfigError> {
    let key = |field: &str| format!("agents.{id}.{field}");
    if !valid_id(&id) {
        return Err(ConfigError::new(
            file,
            format!("agents.{id}"),
            "an agent id may hold only letters, digits, '-' and '_' (it is part of the URL /api/agents/{agentId})",
        ));
    }
    let model = match (raw.model, raw.script) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::new(
                file,
                key("script"),
                "give either model or script, not both",
            ));
        }
        (Some(spec), None) if spec.trim().is_empty() => {
            return Err(ConfigError::new(
                file,
                key("model"),
                "the model is empty; give a spec like openai/gpt-4o-mini, or leave the key out for the server's default model",
            ));
        }
        (Some(spec), None) => ModelSource::Spec(spec),
        (None, Some(script)) => ModelSource::Script(base.join(script)),
        (None, None) => ModelSource::Default,
    };
    let tools = tool_list(
        file,
        &key("tools"),
        raw.tools.unwrap_or_else(|| vec!["ask_user".to_owned()]),
    )?;
    let has_mcp = raw.mcp.as_ref().is_some_and(|servers| !servers.is_empty());
    let require_approval = approvals::resolve(file, &id, raw.require_approval.unwrap_or_default(), &tools, has_mcp)?;
    if raw.max_steps == Some(0) {
        return Err(ConfigError::new(file, key("max_steps"), "must be at least 1"));
    }
    if raw.last_messages.is_some_and(|n| n > 10_000) {
        return Err(ConfigError::new(
            file,
            key("last_messages"),
            "must be from 0 to 10000 (how many of a thread's last messages a run reads)",
        ));
    }
    let time_limit = raw
        .time_limit
        .map(|text| {
            duration::parse_limit(&text)
                .map_err(|problem| ConfigError::new(file, key("time_limit"), problem.to_string()))
        })
        .transpose()?;
    let mut time_limits = Vec::new();
    for (name, text) in raw.time_limits.unwrap_or_default() {
        let at = format!("{}.{name}", key("time_limits"));
        let tool = ToolKind::from_id(&name)
            .filter(|t| tools.contains(t))
            .ok_or_else(|| ConfigError::new(file, at.clone(), format!("{name} is not one of this agent's tools")))?;
        let limit = duration::parse_limit(&text).map_err(|problem| ConfigError::new(file, at, problem.to_string()))?;
        time_limits.push((tool, limit));
    }
    let mcp = mcp_servers(file, base, &id, raw.mcp.unwrap_or_default())?;
    let servers: Vec<&str> = mcp.iter().map(|server| server.name.as_str()).collect();
    let rules = rules::resolve(file, &id, raw.rules.unwrap_or_default(), &servers)?;
    Ok(AgentConfig {
        name: raw.name.filter(|n| !n.trim().is_empty()).unwrap_or_else(|| id.clone()),
        instructions: raw
            .instructions
            .unwrap_or_else(|| default_instructions(&tools).to_owned()),
        model,
        tools,
        require_approval,
        allow_free_text: raw.allow_free_text.unwrap_or(false),
        max_steps: raw.max_steps,
        last_messages: raw.last_messages,
        request_overrides: request_overrides(file, &key("request_overrides"), raw.request_overrides)?,
        write_dir: base.join(raw.write_dir.unwrap_or_else(|| PathBuf::from("."))),
        time_limit,
        time_limits,
        rules,
        mcp,
        id,
    })
}

/// The instructions of an agent whose table gives none: they ask the model
/// to put questions to the person with `ask_user` only when the agent has it.
fn default_instructions(tools: &[ToolKind]) -> &'static str {
    if tools.contains(&ToolKind::AskUser) {
        DEFAULT_INSTRUCTIONS
    } else {
        DEFAULT_INSTRUCTIONS_WITHOUT_ASK_USER
    }
}

/// `request_overrides`: names of [`RequestOverride`]s, each once.
fn request_overrides(file: &Path, key: &str, names: Option<Vec<String>>) -> Result<Vec<RequestOverride>, ConfigError> {
    let mut overrides = Vec::new();
    for (i, name) in names.unwrap_or_default().iter().enumerate() {
        let known = || {
            RequestOverride::ALL
                .iter()
                .map(|o| o.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let at = format!("{key}[{i}]");
        let Some(over) = RequestOverride::from_name(name) else {
            return Err(ConfigError::new(
                file,
                at,
                format!(
                    "{name:?} is not a field a request may override; these may be: {}",
                    known()
                ),
            ));
        };
        if overrides.contains(&over) {
            return Err(ConfigError::new(file, at, format!("{name} is listed twice")));
        }
        overrides.push(over);
    }
    Ok(overrides)
}

fn tool_list(file: &Path, key: &str, names: Vec<String>) -> Result<Vec<ToolKind>, ConfigError> {
    let mut tools = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let tool = ToolKind::from_id(name).ok_or_else(|| {
            let known: Vec<&str> = ToolKind::ALL.iter().map(|t| t.id()).collect();
            ConfigError::new(
                file,
                format!("{key}[{i}]"),
                format!("unknown tool {name:?}; known tools: {}", known.join(", ")),
            )
        })?;
        if tools.contains(&tool) {
            return Err(ConfigError::new(
                file,
                format!("{key}[{i}]"),
                format!("{name} is listed twice"),
            ));
        }
        tools.push(tool);
    }
    Ok(tools)
}

fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

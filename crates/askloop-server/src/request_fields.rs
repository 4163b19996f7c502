//! The fields of Mastra's stream and generate body beyond `messages`,
//! `runId` and `threadId`, and what askloop does with each: every field of
//! Mastra's body (its server's `agentExecutionBodySchema`) is honoured,
//! accepted because it changes nothing the agent does, or refused with a
//! 400 that names it and says why. None is dropped without a word: a
//! client asking for fewer steps, or for approval of every tool call,
//! must get them or hear that it did not.
//!
//! The rule: a field that only narrows what the run may do is honoured and
//! stored with the run ([`askloop::RunSettings`]), so it holds after a
//! resume in any process. A field that would widen what the agent may do
//! or replace what its operator set (its instructions, tools, model
//! settings) is refused, unless the agent's configuration allows it
//! ([`RequestOverride`], `request_overrides` in `askloop.toml`). A field
//! that is not Mastra's is refused with the list of fields this route
//! takes. `null` asks for nothing, as if the field were left out.

use std::fmt;

use askloop::{Agent, RunSettings};
use serde_json::{Map, Value};

use crate::error::{ApiError, RefusedField};

/// A field of a stream or generate request that may replace an agent's own
/// setting for one run, when the agent's configuration allows it
/// (`request_overrides = ["instructions"]` in `askloop.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RequestOverride {
    /// `instructions`: the run's system prompt instead of the agent's.
    Instructions,
}

impl RequestOverride {
    /// Every override, as named in `askloop.toml`.
    pub const ALL: &[RequestOverride] = &[RequestOverride::Instructions];

    /// Its name in `askloop.toml` (and the body field it allows).
    pub fn name(self) -> &'static str {
        match self {
            RequestOverride::Instructions => "instructions",
        }
    }

    /// The override named `name`, if there is one.
    pub fn from_name(name: &str) -> Option<RequestOverride> {
        Self::ALL.iter().copied().find(|o| o.name() == name)
    }
}

impl fmt::Display for RequestOverride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The fields this route takes, for the refusal of one it does not know.
const ACCEPTED: &str = "messages, runId, threadId, memory, resourceId, maxSteps, requireToolApproval (true), activeTools, toolChoice \
(\"auto\" or \"none\"), instructions (where the agent allows it), requestContext ({}), tracingOptions, savePerStep, \
returnScorerData (false)";

/// The run's settings from the request's other fields, for `agent` with
/// the overrides its configuration allows; every field it cannot honour
/// is refused together, each named with why.
pub(crate) fn run_settings(
    fields: Map<String, Value>,
    agent: &Agent,
    allowed: &[RequestOverride],
) -> Result<RunSettings, ApiError> {
    let mut settings = RunSettings::default();
    let mut refused = Vec::new();
    for (field, value) in fields {
        if value.is_null() {
            continue;
        }
        if let Err(Why(reason)) = apply(&mut settings, &field, value, agent, allowed) {
            refused.push(RefusedField { field, reason });
        }
    }
    if refused.is_empty() {
        Ok(settings)
    } else {
        Err(ApiError::RefusedFields { refused })
    }
}

/// Why a field of the request is not honoured, in words for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct Why(String);

impl From<String> for Why {
    fn from(text: String) -> Self {
        Why(text)
    }
}

impl From<&str> for Why {
    fn from(text: &str) -> Self {
        Why(text.to_owned())
    }
}

/// Honours one field in `settings`, or says why not.
fn apply(
    settings: &mut RunSettings,
    field: &str,
    value: Value,
    agent: &Agent,
    allowed: &[RequestOverride],
) -> Result<(), Why> {
    match (field, value) {
        // Narrowing: honoured, and stored with the run.
        ("maxSteps", value) => settings.max_steps = Some(max_steps(&value, agent)?),
        ("requireToolApproval", Value::Bool(true)) => settings.require_tool_approval = true,
        ("requireToolApproval", Value::Bool(false)) => {
            return Err(
                "the agent's approvals are set by its operator and a request cannot turn them off; \
                        send true (every tool call waits for approval) or leave the field out"
                    .into(),
            );
        }
        ("requireToolApproval", _) => return Err("must be true or false".into()),
        ("activeTools", value) => narrow_tools(settings, active_tools(&value, agent)?),
        // "auto" is what askloop always asks the model for; "none": the
        // model is offered no tool.
        ("toolChoice", Value::String(choice)) if choice == "auto" => {}
        ("toolChoice", Value::String(choice)) if choice == "none" => narrow_tools(settings, Vec::new()),
        // Replaces what the operator set: only where the agent allows it.
        ("instructions", Value::String(text)) if allowed.contains(&RequestOverride::Instructions) => {
            settings.instructions = Some(text);
        }
        ("instructions", _) if allowed.contains(&RequestOverride::Instructions) => {
            return Err("must be a string".into());
        }
        // Telemetry for Mastra's tracing: changes nothing the agent does.
        ("tracingOptions", _) => {}
        // askloop stores every step of every run, whatever this asks: the
        // run does the same either way.
        ("savePerStep", _) => {}
        // Mastra hands it to tools; askloop's tools read none, so an empty
        // one changes nothing.
        ("requestContext", Value::Object(context)) if context.is_empty() => {}
        ("returnScorerData", Value::Bool(false)) => {}
        _ => return Err(refusal(field, agent, allowed).into()),
    }
    Ok(())
}

/// Checks the fields of a resume-stream, approve-tool-call or
/// decline-tool-call body beyond the decision itself (`takes` names those):
/// what only Mastra's tracing reads is accepted; a run's settings were
/// chosen when it started and a decision cannot change them; anything else
/// is refused by name, as on the routes that start runs.
pub(crate) fn decision_fields(fields: Map<String, Value>, takes: &str) -> Result<(), ApiError> {
    let refused: Vec<RefusedField> = fields
        .into_iter()
        .filter(|(_, value)| !value.is_null())
        .filter_map(|(field, value)| {
            let reason = match (field.as_str(), &value) {
                ("tracingOptions", _) => return None,
                ("requestContext", Value::Object(context)) if context.is_empty() => return None,
                (
                    "maxSteps"
                    | "requireToolApproval"
                    | "activeTools"
                    | "toolChoice"
                    | "instructions"
                    | "system"
                    | "context"
                    | "tools"
                    | "toolsets"
                    | "clientTools"
                    | "modelSettings"
                    | "providerOptions"
                    | "requestContext"
                    | "savePerStep"
                    | "stopWhen"
                    | "output"
                    | "structuredOutput",
                    _,
                ) => "a run keeps the settings it was started with; a decision cannot change them".to_owned(),
                _ => format!("this route does not take it; it takes {takes}"),
            };
            Some(RefusedField { field, reason })
        })
        .collect();
    if refused.is_empty() {
        Ok(())
    } else {
        Err(ApiError::RefusedFields { refused })
    }
}

/// Why a field (or its value) is not taken, and what would be.
fn refusal(field: &str, agent: &Agent, allowed: &[RequestOverride]) -> String {
    let id = agent.id();
    match field {
        "toolChoice" => {
            "askloop lets the model choose whether to call a tool; \"auto\" and \"none\" (no tools) are taken".into()
        }
        "instructions" => format!(
            "agent {id}'s instructions are set by its operator; to let requests replace them, add \
             request_overrides = [\"instructions\"] to [agents.{id}] in askloop.toml"
        ),
        "system" | "context" if allowed.contains(&RequestOverride::Instructions) => {
            "the agent's system prompt is set by its operator; send the conversation in `messages`, and \
             replace the instructions with `instructions`"
                .into()
        }
        "system" | "context" => {
            "the agent's system prompt is set by its operator; send the conversation in `messages`".into()
        }
        "tools" | "toolsets" | "clientTools" => "an agent's tools are set by its operator (askloop.toml); a \
                                                 request may only narrow them with `activeTools`"
            .into(),
        "modelSettings" | "providerOptions" => "the agent's model and its settings are set by its operator".into(),
        "resourceid" => "did you mean `resourceId`? A thread is named by `memory: {thread, resource}`".into(),
        "requestContext" => "askloop's tools take no request context; leave it out or send {}".into(),
        "stopWhen" => "stop conditions are not taken; use `maxSteps`".into(),
        "versions" => "this server serves one version of each agent".into(),
        "scorers" | "returnScorerData" => "no scorers run on this server, so there is no scorer data".into(),
        "output" | "structuredOutput" => "structured output is not supported by this server; the answer is text".into(),
        _ => format!("this route does not take it; it takes {ACCEPTED}"),
    }
}

/// `maxSteps`: a whole number from 1 to the agent's own limit.
fn max_steps(value: &Value, agent: &Agent) -> Result<u32, Why> {
    let limit = agent.max_steps();
    let steps = value
        .as_u64()
        .filter(|steps| *steps >= 1)
        .ok_or_else(|| format!("must be a whole number from 1 to {limit} (the agent's limit)"))?;
    u32::try_from(steps)
        .ok()
        .filter(|steps| *steps <= limit)
        .ok_or_else(|| {
            Why(format!(
                "{steps} is more than agent {}'s limit of {limit} model calls",
                agent.id()
            ))
        })
}

/// `activeTools`: names of the agent's tools.
fn active_tools(value: &Value, agent: &Agent) -> Result<Vec<String>, Why> {
    let specs = agent.tool_specs();
    let known: Vec<&str> = specs.iter().map(|spec| spec.name.as_str()).collect();
    let shape = || format!("must be an array of the agent's tool names: {}", known.join(", "));
    let names = value.as_array().ok_or_else(shape)?;
    let mut tools = Vec::with_capacity(names.len());
    for name in names {
        let name = name.as_str().ok_or_else(shape)?;
        if !known.contains(&name) {
            return Err(format!("{name:?} is not a tool of agent {}; {}", agent.id(), shape()).into());
        }
        tools.push(name.to_owned());
    }
    Ok(tools)
}

/// Keeps only the tools both in `tools` and already active.
fn narrow_tools(settings: &mut RunSettings, tools: Vec<String>) {
    let kept = match settings.active_tools.take() {
        Some(active) => tools.into_iter().filter(|t| active.contains(t)).collect(),
        None => tools,
    };
    settings.active_tools = Some(kept);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use askloop::{AskUser, ScriptedModel};
    use serde_json::json;

    use super::*;

    fn agent() -> Agent {
        let model = ScriptedModel::from_json("demo", r#"{"turns": [{"text": "Hi"}]}"#).unwrap();
        Agent::builder("worker")
            .model(Arc::new(model))
            .tool(AskUser::new())
            .build()
            .unwrap()
    }

    /// Each field of Mastra's stream and generate body (its server's
    /// `agentExecutionBodySchema`, and the legacy fields it still reads),
    /// with a value a client may send.
    fn mastra_fields() -> Vec<(&'static str, Value)> {
        vec![
            ("instructions", json!("Be brief.")),
            ("system", json!("Be brief.")),
            ("context", json!([{"role": "user", "content": "earlier"}])),
            // `memory` and `resourceId` are taken before these fields, by
            // the threads (threads/request.rs).
            ("savePerStep", json!(true)),
            ("requestContext", json!({"tenant": "acme"})),
            ("versions", json!({"defaultStatus": "published"})),
            ("maxSteps", json!(1)),
            ("stopWhen", json!({})),
            ("providerOptions", json!({"openai": {}})),
            ("modelSettings", json!({"temperature": 0})),
            ("activeTools", json!(["ask_user"])),
            ("toolsets", json!({"extra": {}})),
            ("clientTools", json!({"shell": {}})),
            ("toolChoice", json!("required")),
            ("requireToolApproval", json!(true)),
            ("scorers", json!({"relevance": {"scorer": "relevance"}})),
            ("returnScorerData", json!(true)),
            ("tracingOptions", json!({"traceId": "t"})),
            ("output", json!({})),
            ("structuredOutput", json!({"schema": {}})),
            ("tools", json!({"shell": {}})),
        ]
    }

    #[test]
    fn every_field_of_mastras_body_is_honoured_accepted_or_refused_for_a_reason_of_its_own() {
        let agent = agent();
        for (field, value) in mastra_fields() {
            let fields = Map::from_iter([(field.to_owned(), value)]);
            if let Err(ApiError::RefusedFields { refused }) = run_settings(fields, &agent, &[]) {
                assert_eq!(refused[0].field, field);
                assert!(
                    !refused[0].reason.starts_with("this route does not take it"),
                    "{field} is Mastra's and has a decision of its own: {}",
                    refused[0].reason
                );
            }
        }
    }

    #[test]
    fn a_decision_takes_tracing_and_nothing_else_beyond_itself() {
        let fields = json!({"tracingOptions": {"traceId": "t"}, "requestContext": {}, "reason": null});
        let Value::Object(fields) = fields else { unreachable!() };
        assert!(decision_fields(fields, "runId, toolCallId").is_ok());
        let fields = json!({"maxSteps": 1, "instructions": "x", "answer": "staging"});
        let Value::Object(fields) = fields else { unreachable!() };
        let Err(ApiError::RefusedFields { refused }) = decision_fields(fields, "runId, toolCallId") else {
            panic!("refused")
        };
        let reason = |field: &str| {
            refused
                .iter()
                .find(|r| r.field == field)
                .map_or("", |r| r.reason.as_str())
        };
        assert_eq!(refused.len(), 3);
        assert!(reason("answer").ends_with("it takes runId, toolCallId"));
        assert!(reason("maxSteps").contains("settings it was started with"));
        assert!(reason("instructions").contains("settings it was started with"));
    }

    #[test]
    fn narrowing_fields_become_the_runs_settings_and_null_asks_for_nothing() {
        let fields = json!({
            "maxSteps": 2,
            "requireToolApproval": true,
            "toolChoice": "none",
            "instructions": null,
            "tracingOptions": {"traceId": "t"},
        });
        let Value::Object(fields) = fields else { unreachable!() };
        let settings = run_settings(fields, &agent(), &[]).unwrap();
        assert_eq!(
            settings,
            RunSettings::default()
                .max_steps(2)
                .require_tool_approval()
                .active_tools(Vec::<String>::new())
        );
    }
}

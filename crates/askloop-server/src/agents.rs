//! Mastra's agent routes: `/api/agents/...`.

use std::collections::BTreeMap;
use std::sync::Arc;

use askloop::{
    Agent, AgentStream, Author, CallDecision, Message, ResumeOptions, RunError, RunQuery, RunStatus, StreamOptions,
};
use axum::Json;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::request_fields::{self, RequestOverride};
use crate::sse;
use crate::wire::{
    AgentInfo, DecisionRequest, GenerateResponse, Keyed, PageOf, PendingCall, ResumeRequest, StreamRequest,
    SuspendedRun, SuspendedRuns, ToolInfo,
};

type AppStateRef = State<Arc<AppState>>;

/// `GET /api/agents`: every agent the caller may act for, keyed by id.
pub(crate) async fn list(State(state): AppStateRef, caller: Caller) -> Json<Keyed<AgentInfo>> {
    Json(Keyed(
        state
            .agents
            .iter()
            .filter(|agent| caller.may_act_for(agent.id()))
            .map(|agent| (agent.id().to_owned(), info(agent)))
            .collect(),
    ))
}

/// `GET /api/agents/{agentId}`.
pub(crate) async fn get(
    State(state): AppStateRef,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<Json<AgentInfo>, ApiError> {
    caller.check(&agent_id)?;
    Ok(Json(info(state.agent(&agent_id)?)))
}

fn info(agent: &Agent) -> AgentInfo {
    let model = agent.model().name().to_owned();
    let (provider, model_id) = match model.split_once('/') {
        Some((provider, id)) => (provider.to_owned(), id.to_owned()),
        None => (String::new(), model),
    };
    AgentInfo {
        id: agent.id().to_owned(),
        name: agent.name().to_owned(),
        description: String::new(),
        instructions: agent.instructions().unwrap_or_default().to_owned(),
        agents: BTreeMap::new(),
        tools: Keyed(
            agent
                .tool_specs()
                .iter()
                .map(|spec| {
                    let tool = ToolInfo {
                        id: spec.name.clone(),
                        description: spec.description.clone(),
                        input_schema: json!({"json": spec.input_schema}).to_string(),
                        require_approval: agent.requires_approval(&spec.name),
                    };
                    (spec.name.clone(), tool)
                })
                .collect(),
        ),
        workflows: BTreeMap::new(),
        provider,
        model_id,
        default_options: BTreeMap::new(),
    }
}

/// `POST /api/agents/{agentId}/stream`: starts a run and streams it.
pub(crate) async fn stream(
    State(state): AppStateRef,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(request): ApiJson<StreamRequest>,
) -> Result<Response, ApiError> {
    caller.check(&agent_id)?;
    let agent = state.agent(&agent_id)?;
    let (messages, options) = start_options(request, agent, state.overrides_for(&agent_id), &caller)?;
    let stream = agent.stream_with(messages, options).await?;
    let span = run_span(&agent_id, stream.run_id(), None);
    Ok(sse::respond(&state, stream, span))
}

/// `POST /api/agents/{agentId}/generate`: runs to the end or to a
/// suspension and answers with the outcome as JSON.
pub(crate) async fn generate(
    State(state): AppStateRef,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(request): ApiJson<StreamRequest>,
) -> Result<Json<GenerateResponse>, ApiError> {
    caller.check(&agent_id)?;
    let agent = state.agent(&agent_id)?;
    let (messages, options) = start_options(request, agent, state.overrides_for(&agent_id), &caller)?;
    let stream = agent.stream_with(messages, options).await?;
    let span = run_span(&agent_id, stream.run_id(), None);
    generated(&state, stream, span).await
}

/// Drives a stream to its end (or its next suspension) and answers with
/// the outcome, as `generate` does.
async fn generated(
    state: &AppState,
    stream: AgentStream,
    span: tracing::Span,
) -> Result<Json<GenerateResponse>, ApiError> {
    // On a task of the server's, so a client that hangs up does not stop
    // the run short of its next stored state.
    let driven = state.runs.spawn(tracing::Instrument::instrument(stream.output(), span));
    let output = driven
        .await
        .map_err(|err| ApiError::Internal(format!("the run's driver stopped: {err}")))?;
    let suspend_payload = output.pending.iter().find_map(|p| p.suspend_payload.clone());
    let error = output.error();
    Ok(Json(GenerateResponse {
        text: output.text,
        finish_reason: output.finish_reason,
        run_id: output.run_id,
        status: output.status,
        usage: output.usage,
        suspend_payload,
        pending_tool_calls: output.pending.into_iter().map(PendingCall::from).collect(),
        error,
    }))
}

/// `POST /api/agents/{agentId}/resume-stream`: answers a pending call and
/// streams the rest of the run.
pub(crate) async fn resume_stream(
    State(state): AppStateRef,
    ApiPath(agent_id): ApiPath<String>,
    caller: Caller,
    ApiJson(request): ApiJson<ResumeRequest>,
) -> Result<Response, ApiError> {
    let mut fields = request.fields;
    crate::threads::request::decision_memory(&mut fields, &caller)?;
    request_fields::decision_fields(fields, "runId, toolCallId, resumeData")?;
    let decision = CallDecision::Answer(request.resume_data);
    decide(
        &state,
        &caller,
        &agent_id,
        &request.run_id,
        request.tool_call_id.as_deref(),
        decision,
    )
    .await
}

/// `POST /api/agents/{agentId}/approve-tool-call`. A `reason` is refused
/// (400) rather than dropped: an approval's record has no place for one,
/// and the model is told a reason only when a call is declined.
pub(crate) async fn approve(
    State(state): AppStateRef,
    ApiPath(agent_id): ApiPath<String>,
    caller: Caller,
    ApiJson(request): ApiJson<DecisionRequest>,
) -> Result<Response, ApiError> {
    let (run_id, call, decision) = approval(request, &caller, true)?;
    decide(&state, &caller, &agent_id, &run_id, call.as_deref(), decision).await
}

/// `POST /api/agents/{agentId}/approve-tool-call-generate`: approves as
/// `approve-tool-call` does and answers with the outcome as JSON, as
/// `generate` does.
pub(crate) async fn approve_generate(
    State(state): AppStateRef,
    ApiPath(agent_id): ApiPath<String>,
    caller: Caller,
    ApiJson(request): ApiJson<DecisionRequest>,
) -> Result<Json<GenerateResponse>, ApiError> {
    let (run_id, call, decision) = approval(request, &caller, true)?;
    let stream = decision_stream(&state, &caller, &agent_id, &run_id, call.as_deref(), decision).await?;
    generated(&state, stream, run_span(&agent_id, &run_id, call.as_deref())).await
}

/// `POST /api/agents/{agentId}/decline-tool-call-generate`.
pub(crate) async fn decline_generate(
    State(state): AppStateRef,
    ApiPath(agent_id): ApiPath<String>,
    caller: Caller,
    ApiJson(request): ApiJson<DecisionRequest>,
) -> Result<Json<GenerateResponse>, ApiError> {
    let (run_id, call, decision) = approval(request, &caller, false)?;
    let stream = decision_stream(&state, &caller, &agent_id, &run_id, call.as_deref(), decision).await?;
    generated(&state, stream, run_span(&agent_id, &run_id, call.as_deref())).await
}

/// `POST /api/agents/{agentId}/decline-tool-call`.
pub(crate) async fn decline(
    State(state): AppStateRef,
    ApiPath(agent_id): ApiPath<String>,
    caller: Caller,
    ApiJson(request): ApiJson<DecisionRequest>,
) -> Result<Response, ApiError> {
    let (run_id, call, decision) = approval(request, &caller, false)?;
    decide(&state, &caller, &agent_id, &run_id, call.as_deref(), decision).await
}

/// The run, the call and the decision an approve (`approved`) or decline
/// body asks for, its other fields checked first: a `memory` must be the
/// caller's, and any other field is refused by name. An approval may carry
/// `args`, askloop's extension of Mastra's body: the arguments a person
/// edited, which the call runs with instead of the model's.
fn approval(
    request: DecisionRequest,
    caller: &Caller,
    approved: bool,
) -> Result<(String, Option<String>, CallDecision), ApiError> {
    let mut fields = request.fields;
    crate::threads::request::decision_memory(&mut fields, caller)?;
    const APPROVAL: &str = "runId, toolCallId, args, always, alwaysSameArguments, alwaysFor";
    let (accepted, decision) = if approved {
        let always = always(&mut fields)?;
        let decision = match (fields.remove("args"), always) {
            (None | Some(Value::Null), None) => CallDecision::Approve,
            (None | Some(Value::Null), Some(always)) => CallDecision::ApproveAlways(always),
            (Some(args), None) => CallDecision::ApproveWith(args),
            (Some(_), Some(_)) => {
                return Err(ApiError::BadRequest(
                    "an approval with edited `args` cannot also stick (`always`): approve the edited call alone, \
                     or let the model's call stick"
                        .into(),
                ));
            }
        };
        no_reason(request.reason.as_ref())?;
        (APPROVAL, decision)
    } else {
        ("runId, toolCallId, reason", CallDecision::Decline(request.reason))
    };
    request_fields::decision_fields(fields, accepted)?;
    Ok((request.run_id, request.tool_call_id, decision))
}

fn no_reason(reason: Option<&String>) -> Result<(), ApiError> {
    match reason {
        Some(_) => Err(ApiError::BadRequest(
            "an approval takes no `reason`: a reason goes with a decline".into(),
        )),
        None => Ok(()),
    }
}

/// askloop's extension of Mastra's approval body for an approval that
/// sticks: `always` (`"thread"` or `"resource"`), and optionally
/// `alwaysSameArguments` (only later calls with the same arguments) and
/// `alwaysFor` (how long, e.g. `"8h"`; until revoked without it). The two
/// options without `always` are refused.
pub(crate) fn always(fields: &mut serde_json::Map<String, Value>) -> Result<Option<askloop::Always>, ApiError> {
    let scope = fields.remove("always");
    let same = fields.remove("alwaysSameArguments");
    let lasts = fields.remove("alwaysFor");
    let scope = match scope {
        None | Some(Value::Null) => {
            if same.is_some() || lasts.is_some() {
                return Err(ApiError::BadRequest(
                    "`alwaysSameArguments` and `alwaysFor` go with `always` (\"thread\" or \"resource\")".into(),
                ));
            }
            return Ok(None);
        }
        Some(Value::String(scope)) => scope
            .parse::<askloop::GrantScope>()
            .map_err(|e| ApiError::BadRequest(format!("`always`: {e}")))?,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "`always` must be \"thread\" or \"resource\", got {other}"
            )));
        }
    };
    let mut always = askloop::Always::in_scope(scope);
    match same {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => always = always.same_arguments(),
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "`alwaysSameArguments` must be true or false, got {other}"
            )));
        }
    }
    match lasts {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => {
            let lasts =
                askloop::parse_duration(&text).map_err(|e| ApiError::BadRequest(format!("`alwaysFor`: {e}")))?;
            always = always.lasting(lasts);
        }
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "`alwaysFor` must be a duration such as \"8h\" or \"30m\", got {other}"
            )));
        }
    }
    Ok(Some(always))
}

/// Hands a decision about a pending call of a run of the route's agent to
/// the agent, and streams the rest of the run.
async fn decide(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    run_id: &str,
    tool_call_id: Option<&str>,
    decision: CallDecision,
) -> Result<Response, ApiError> {
    let stream = decision_stream(state, caller, agent_id, run_id, tool_call_id, decision).await?;
    Ok(sse::respond(state, stream, run_span(agent_id, run_id, tool_call_id)))
}

/// Hands a decision about a pending call of a run of the route's agent to
/// the agent, recorded as the caller's; returns the rest of the run.
pub(crate) async fn decision_stream(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    run_id: &str,
    tool_call_id: Option<&str>,
    decision: CallDecision,
) -> Result<AgentStream, ApiError> {
    // Refused before the run is read: a limited token learns nothing of
    // another agent's runs, and nothing is written.
    caller.check(agent_id)?;
    let agent = state.agent(agent_id)?;
    // A run walled off from the caller is refused before the decision is
    // handed on: nothing of it is written, and it answers as an unknown run.
    // The agent starts from the run as read here, not from a read of its own.
    let run = crate::runs::load(state, caller, run_id, Some(agent_id)).await?;
    let author: Author = caller.author();
    let options = ResumeOptions::call_or_run(run_id, tool_call_id)
        .by(author)
        .from_read(run);
    agent
        .decide(options, decision)
        .await
        .map_err(|err| on_agent_route(err, agent_id))
}

/// Hands decisions about several pending calls of one run of the route's
/// agent to the agent, applied as one (see [`askloop::Agent::decide_all`]),
/// recorded as the caller's; returns the rest of the run.
pub(crate) async fn decisions_stream(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    run_id: &str,
    decisions: Vec<(String, CallDecision)>,
) -> Result<AgentStream, ApiError> {
    // As for one decision: the caller first, then the run's wall.
    caller.check(agent_id)?;
    let agent = state.agent(agent_id)?;
    crate::runs::load(state, caller, run_id, Some(agent_id)).await?;
    agent
        .decide_all(run_id, decisions, caller.author())
        .await
        .map_err(|err| on_agent_route(err, agent_id))
}

/// Waiting runs a page of `suspended-runs` holds when `perPage` is not given.
const SUSPENDED_PER_PAGE: u32 = 100;
/// The most a page of `suspended-runs` holds.
const MOST_SUSPENDED_PER_PAGE: u32 = 1000;

/// `suspended-runs` paging, as Mastra pages its listings: `page` counts
/// from 0, `perPage` runs to a page.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SuspendedPage {
    #[serde(default)]
    page: Option<u32>,
    #[serde(default)]
    per_page: Option<u32>,
}

impl SuspendedPage {
    /// `(page, perPage, offset)`, or why the values cannot be used.
    fn resolve(&self) -> Result<(u32, u32, u32), ApiError> {
        let per_page = match self.per_page {
            None => SUSPENDED_PER_PAGE,
            Some(n) if (1..=MOST_SUSPENDED_PER_PAGE).contains(&n) => n,
            Some(n) => {
                return Err(ApiError::BadRequest(format!(
                    "perPage {n} is out of range; give 1 to {MOST_SUSPENDED_PER_PAGE} (default {SUSPENDED_PER_PAGE})"
                )));
            }
        };
        let page = self.page.unwrap_or(0);
        let offset = page.checked_mul(per_page).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "page {page} of {per_page} runs is past any listing; pages count from 0"
            ))
        })?;
        Ok((page, per_page, offset))
    }
}

/// `GET /api/agents/{agentId}/suspended-runs?page=&perPage=`: the agent's
/// runs waiting on a person, newest first, a page at a time (`total`
/// counts them all); to a caller walled to resources, those on no thread or
/// on their threads.
pub(crate) async fn suspended_runs(
    State(state): AppStateRef,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(filter): ApiQuery<crate::threads::ThreadFilter>,
    ApiQuery(paging): ApiQuery<SuspendedPage>,
) -> Result<Json<SuspendedRuns>, ApiError> {
    caller.check(&agent_id)?;
    let agent = state.agent(&agent_id)?;
    let (page, per_page, offset) = paging.resolve()?;
    let thread = filter.resolve(&state, &caller).await?;
    let mut query = RunQuery {
        status: Some(RunStatus::Suspended),
        agent_id: Some(agent.id().to_owned()),
        thread,
        resources: caller.resources().map(<[String]>::to_vec),
        ..Default::default()
    };
    let total = state.store.count(&query).await?;
    query.limit = Some(per_page);
    query.offset = offset;
    let runs: Vec<SuspendedRun> = state
        .store
        .list(&query)
        .await?
        .into_iter()
        .map(|run| SuspendedRun::of(run, state.now()))
        .collect();
    let named = paging.page.is_some() || paging.per_page.is_some();
    let paging = named.then(|| PageOf {
        page,
        per_page,
        has_more: u64::from(offset) + (runs.len() as u64) < total,
    });
    Ok(Json(SuspendedRuns { runs, total, paging }))
}

pub(crate) fn run_span(agent_id: &str, run_id: &str, tool_call_id: Option<&str>) -> tracing::Span {
    tracing::info_span!("run", agent_id = %agent_id, run_id = %run_id, tool_call_id = tool_call_id.unwrap_or(""))
}

/// On an agent's routes, a run of another agent is no run at all (its tools
/// and model are another agent's), and a token limited to this agent learns
/// nothing of it.
pub(crate) fn on_agent_route(err: RunError, agent_id: &str) -> ApiError {
    match err {
        RunError::UnknownRun { run_id } | RunError::OtherAgent { run_id, .. } => ApiError::UnknownRun {
            run_id,
            agent_id: Some(agent_id.to_owned()),
        },
        other => other.into(),
    }
}

/// The run a stream or generate request starts, checked before anything
/// is stored: its messages, and its options with the settings its other
/// fields ask for (refused together when the agent cannot honour them).
fn start_options(
    request: StreamRequest,
    agent: &Agent,
    allowed: &[RequestOverride],
    caller: &Caller,
) -> Result<(Vec<Message>, StreamOptions), ApiError> {
    let messages = input_messages(&request.messages)?;
    let options = run_options(
        request.fields,
        request.run_id,
        request.thread_id,
        agent,
        allowed,
        caller,
    )?;
    Ok((messages, options))
}

/// The options of a new run from the request's fields beyond its messages
/// (its thread, its settings), with the caller's right to the thread's
/// resource checked: every field is honoured or refused
/// (`request_fields.rs`).
pub(crate) fn run_options(
    mut fields: serde_json::Map<String, Value>,
    run_id: Option<String>,
    thread_id: Option<String>,
    agent: &Agent,
    allowed: &[RequestOverride],
    caller: &Caller,
) -> Result<StreamOptions, ApiError> {
    // Run ids are one namespace, shared by every caller: a chosen id
    // that is taken would tell a caller of a run it may not see. So only
    // a caller that sees every run may choose one; any other is refused
    // whatever the id, taken or free.
    if run_id.is_some() && !caller.sees_every_run() {
        return Err(ApiError::refused(
            "runId",
            "a caller limited to some agents or resources cannot choose a new run's id (run ids are shared by \
             every caller, so a taken one would tell of runs it may not see); leave runId out and use the id \
             the server answers with",
        ));
    }
    let thread = crate::threads::request::thread_options(&mut fields, thread_id.as_deref(), caller)?;
    let mut options = StreamOptions::default();
    options.run_id = run_id;
    // A walled caller's run is its own, on a thread or not.
    options.resource_id = caller.own_resource().map(str::to_owned);
    // A run on a stored thread is labelled with its id too, as Mastra
    // lists it.
    options.thread_id = thread_id.or_else(|| thread.as_ref().map(|t| t.key.thread_id.clone()));
    options.thread = thread;
    options.settings = request_fields::run_settings(fields, agent, allowed)?;
    Ok(options)
}

const MESSAGES_SHAPE: &str = "`messages` must be a string or an array of {role, content} with role user or assistant and content a string or an array of {type: \"text\", text} parts";

/// Mastra's `messages`: a string, or `{role, content}` objects whose content
/// is a string or text parts.
fn input_messages(messages: &Value) -> Result<Vec<Message>, ApiError> {
    let bad = |detail: String| ApiError::BadRequest(format!("{detail}; {MESSAGES_SHAPE}"));
    let items = match messages {
        Value::String(text) => return Ok(vec![Message::user(text.clone())]),
        Value::Array(items) => items,
        other => return Err(bad(format!("`messages` is {}", kind(other)))),
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if let Value::String(text) = item {
            out.push(Message::user(text.clone()));
            continue;
        }
        let role = item.get("role").and_then(Value::as_str);
        let content = item
            .get("content")
            .map(text_content)
            .transpose()
            .map_err(|d| bad(format!("messages[{i}].content {d}")))?;
        let content = content.ok_or_else(|| bad(format!("messages[{i}] has no content")))?;
        match role {
            Some("user") => out.push(Message::user(content)),
            Some("assistant") => out.push(Message::assistant(content, Vec::new())),
            Some(other) => return Err(bad(format!("messages[{i}] has role {other:?}"))),
            None => return Err(bad(format!("messages[{i}] has no role"))),
        }
    }
    if out.is_empty() {
        return Err(bad("`messages` is empty".to_owned()));
    }
    Ok(out)
}

/// Why a message's content is not text, completing "messages[i].content ...".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NotText {
    #[error("has a part that is not {{type: \"text\", text}}: {0}")]
    Part(Value),
    #[error("is {0}")]
    Kind(&'static str),
}

fn text_content(content: &Value) -> Result<String, NotText> {
    match content {
        Value::String(text) => Ok(text.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in parts {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(piece)) => text.push_str(piece),
                    _ => return Err(NotText::Part(part.clone())),
                }
            }
            Ok(text)
        }
        other => Err(NotText::Kind(kind(other))),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_may_be_a_string_or_role_content_objects_with_text_parts() {
        assert_eq!(input_messages(&json!("Hi")).unwrap(), vec![Message::user("Hi")]);
        let parts = json!([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                           {"role": "assistant", "content": "ok"}]);
        assert_eq!(
            input_messages(&parts).unwrap(),
            vec![Message::user("ab"), Message::assistant("ok", Vec::new())]
        );
    }

    #[test]
    fn messages_of_another_shape_are_refused_with_the_accepted_shape() {
        for bad in [
            json!(3),
            json!([]),
            json!([{"role": "tool", "content": "x"}]),
            json!([{"role": "user"}]),
            json!([{"role": "user", "content": [{"type": "image"}]}]),
        ] {
            let err = input_messages(&bad).unwrap_err().to_string();
            assert!(err.contains("must be a string or an array"), "{err}");
        }
    }
}

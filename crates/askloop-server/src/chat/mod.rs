//! `POST /chat/{agentId}`: the Vercel AI SDK's chat route, so a `useChat`
//! front end (`DefaultChatTransport`) talks to an agent directly, as it
//! talks to `@mastra/ai-sdk`'s `chatRoute` (recorded in
//! `tests/fixtures/mastra-chat/chat-*`). The response is the UI message
//! stream, protocol v1 (`parts.rs`).
//!
//! A request does one of three things, decided in this order:
//!
//! 1. **Answer** (`runId` + `resumeData`, and `toolCallId` when several
//!    calls wait): the run's pending call gets the answer, checked against
//!    the question (a refused answer is a 422 and the question stays open);
//!    `{approved, reason?}` decides a call waiting for approval.
//! 2. **Approval decisions** the AI SDK sends by itself after
//!    `addToolApprovalResponse`: tool parts in state `approval-responded`
//!    in the last (assistant) message. Each `approval.id`
//!    (`<runId>::<toolCallId>`) is all that is taken from the client: every
//!    run it names is read and checked (the route's agent, a thread the
//!    caller may use, the call waiting for approval) before any decision
//!    is applied. The decisions for one run are applied as one: one claim
//!    of the run, the model called once after the last. The same decision
//!    sent again is answered as applied, and nothing runs again; one
//!    contradicting a decision already made is a 409.
//! 3. **A new run** from the client's `messages` (the history), or, with
//!    `memory: {thread, resource}`, from the thread's messages and the
//!    client's newest message, which is appended to the thread.
//!
//! Unlike Mastra's route, which answers every failure with a bare 500,
//! everything is checked before the stream starts and refused with the
//! status and JSON error body of every other route; what fails after the
//! stream started is an `error` part.

mod history;
pub(crate) mod kept;
pub(crate) mod parts;
pub(crate) mod replay;

use std::sync::Arc;

use askloop::{CallDecision, CallState, Closed, Message, PendingKind, ResolutionKind, RunError, RunRecord, Waiting};
use axum::extract::State;
use axum::response::Response;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::AppState;
use crate::agents;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::request_fields;
use crate::sse::{self, push_json};
use history::{ApprovalResponse, refused};
use parts::UiChunk;

/// The fields a decision through this route takes besides the chat's own.
const DECISION_FIELDS: &str = "id, messages, trigger, messageId, runId, resumeData, toolCallId, approvalArgs, memory";

/// The AI SDK's chat request (`DefaultChatTransport`), with Mastra's
/// extras.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChatRequest {
    /// `UIMessage[]`.
    #[serde(default)]
    messages: Option<Value>,
    /// `submit-message` or `regenerate-message`.
    #[serde(default)]
    trigger: Option<String>,
    /// The assistant message the request continues, when it does.
    #[serde(default)]
    message_id: Option<String>,
    /// The chat's id on the client (not the run's, not a thread's): the
    /// stream is kept under it for re-attaching (`replay.rs`).
    #[serde(default, rename = "id")]
    chat_id: Option<Value>,
    /// The run whose pending call `resumeData` answers.
    #[serde(default)]
    run_id: Option<String>,
    /// The answer (`null`: none, as Mastra reads it).
    #[serde(default)]
    resume_data: Option<Value>,
    /// Which pending call `resumeData` answers, when several wait.
    #[serde(default)]
    tool_call_id: Option<String>,
    /// askloop's extension of the chat request: for approvals this request
    /// approves, the arguments a person edited, by approval id
    /// (`<runId>::<toolCallId>`): the call runs with them instead of the
    /// model's. The AI SDK's approval response has no place for them; an
    /// app sends them in the request's `body`.
    #[serde(default)]
    approval_args: Option<Map<String, Value>>,
    /// Every other field, each honoured or refused (`request_fields.rs`).
    #[serde(flatten)]
    fields: Map<String, Value>,
}

/// `POST /chat/{agentId}`.
pub(crate) async fn chat(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(request): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    caller.check(&agent_id)?;
    state.agent(&agent_id)?;
    let messages = history::parse(request.messages)?;
    let trigger = request.trigger.as_deref();
    if let Some(other) = trigger.filter(|t| !matches!(*t, "submit-message" | "regenerate-message")) {
        return Err(refused(
            "trigger",
            format!("{other:?} is not a trigger of the AI SDK; send submit-message or regenerate-message"),
        ));
    }
    let mut fields = request.fields;
    let chat = Chat {
        agent_id: &agent_id,
        id: request.chat_id.as_ref().and_then(Value::as_str),
    };
    if let Some(data) = request.resume_data {
        if request.approval_args.is_some() {
            return Err(refused(
                "approvalArgs",
                "goes with approvals sent back in `messages`, not with `resumeData`".to_owned(),
            ));
        }
        let Some(run_id) = request.run_id else {
            return Err(refused(
                "resumeData",
                "an answer needs the `runId` of the run it answers (the `runId` of the data-tool-call-suspended part)"
                    .to_owned(),
            ));
        };
        crate::threads::request::decision_memory(&mut fields, &caller)?;
        request_fields::decision_fields(fields, DECISION_FIELDS)?;
        return answer(&state, &caller, chat, &run_id, request.tool_call_id.as_deref(), data).await;
    }
    if request.tool_call_id.is_some() {
        return Err(refused(
            "toolCallId",
            "names the call `resumeData` answers; send both, with `runId`".to_owned(),
        ));
    }
    let approvals = history::approval_responses(&messages, trigger)?;
    if approvals.is_empty() && request.approval_args.is_some() {
        return Err(refused(
            "approvalArgs",
            "gives edited arguments for approvals this request sends (tool parts in state approval-responded); it sends none"
                .to_owned(),
        ));
    }
    if !approvals.is_empty() {
        if let Some(run_id) = &request.run_id
            && approvals.iter().any(|a| &a.run_id != run_id)
        {
            return Err(refused(
                "runId",
                format!("names run {run_id}, and the approvals sent are about another run"),
            ));
        }
        crate::threads::request::decision_memory(&mut fields, &caller)?;
        request_fields::decision_fields(fields, DECISION_FIELDS)?;
        let message_id = request
            .message_id
            .or_else(|| history::last_assistant_id(&messages))
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let edited = request.approval_args.unwrap_or_default();
        return decide_approvals(&state, &caller, chat, approvals, edited, message_id).await;
    }
    if let Some(run_id) = request.run_id {
        return Err(refused(
            "runId",
            format!(
                "continues run {run_id} only with `resumeData` (the answer to its question); leave it out to start a new run"
            ),
        ));
    }
    start(&state, &caller, chat, &messages, fields).await
}

/// The chat a request streams for: its agent, and its id on the client
/// when it sent one.
#[derive(Clone, Copy)]
struct Chat<'a> {
    agent_id: &'a str,
    id: Option<&'a str>,
}

impl Chat<'_> {
    /// `stream`, with the writer that keeps it for re-attaching when the
    /// chat has an id.
    fn kept(
        self,
        state: &AppState,
        caller: &Caller,
        stream: askloop::AgentStream,
    ) -> (askloop::AgentStream, Option<kept::ReplayWriter>) {
        let writer = self
            .id
            .map(|id| state.chats.open(caller.author().by, self.agent_id, id, stream.run_id()));
        (stream, writer)
    }
}

/// Starts a run from the client's messages (or, with `memory`, the
/// thread's and the client's newest) and streams it.
async fn start(
    state: &AppState,
    caller: &Caller,
    chat: Chat<'_>,
    messages: &[history::UiMessage],
    fields: Map<String, Value>,
) -> Result<Response, ApiError> {
    let agent_id = chat.agent_id;
    let agent = state.agent(agent_id)?;
    let options = agents::run_options(fields, None, None, agent, state.overrides_for(agent_id), caller)?;
    let input: Vec<Message> = match options.thread {
        Some(_) => vec![history::newest_user_message(messages)?],
        None => history::conversation(messages)?,
    };
    let stream = agent.stream_with(input, options).await?;
    let span = agents::run_span(agent_id, stream.run_id(), None);
    Ok(sse::respond_ui(
        state,
        Vec::new(),
        Some(chat.kept(state, caller, stream)),
        span,
    ))
}

/// Answers a pending call of a run the caller may act on, and streams the
/// rest of the run (no `start`: the client goes on writing the assistant
/// message that asked, as with Mastra).
async fn answer(
    state: &AppState,
    caller: &Caller,
    chat: Chat<'_>,
    run_id: &str,
    tool_call_id: Option<&str>,
    data: Value,
) -> Result<Response, ApiError> {
    let agent_id = chat.agent_id;
    let stream = agents::decision_stream(
        state,
        caller,
        agent_id,
        run_id,
        tool_call_id,
        CallDecision::Answer(data),
    )
    .await?;
    let span = agents::run_span(agent_id, run_id, tool_call_id);
    Ok(sse::respond_ui(
        state,
        Vec::new(),
        Some(chat.kept(state, caller, stream)),
        span,
    ))
}

/// Refused unless the call `response` names is one that waits (or waited)
/// for approval: an approval response of the chat protocol answers an
/// approval request, never a question. Whether the call still waits, and
/// what a repeat of a decision does, is the agent's to say
/// ([`askloop::Agent::check_decisions`]).
fn approval_call(run: &RunRecord, response: &ApprovalResponse, now: DateTime<Utc>) -> Result<(), ApiError> {
    let call = response.tool_call_id.as_str();
    let question = match run.call_state(call, now) {
        CallState::Waiting(Waiting { call: pending, .. })
        | CallState::Held(pending)
        | CallState::Closed(Closed::TimedOut { call: pending, .. }) => {
            (pending.kind != PendingKind::Approval).then_some(pending)
        }
        _ => None,
    };
    match question {
        Some(pending) => Err(RunError::WrongPendingKind {
            run_id: run.run_id.clone(),
            tool_call_id: call.to_owned(),
            detail: format!(
                "call {call} of tool {} is a question, not a call waiting for approval; answer it with `runId` and `resumeData`",
                pending.tool_name
            ),
        }
        .into()),
        None => Ok(()),
    }
}

/// Applies the approval decisions the client sent back, once every one
/// has been checked, in one response: `start` with the id of the assistant
/// message the client continues, then what the decisions produced. The
/// decisions for one run are applied as one (one claim of the run, the
/// model called once after the last).
async fn decide_approvals(
    state: &AppState,
    caller: &Caller,
    chat: Chat<'_>,
    approvals: Vec<ApprovalResponse>,
    mut edited: Map<String, Value>,
    message_id: String,
) -> Result<Response, ApiError> {
    let agent_id = chat.agent_id;
    // Everything is checked before anything is applied: one refused
    // decision refuses the request, and nothing runs.
    let mut waiting: Vec<(String, Vec<(String, CallDecision)>)> = Vec::new();
    let mut responses = Vec::new();
    for response in approvals {
        let args = edited.remove(&format!("{}::{}", response.run_id, response.tool_call_id));
        if args.is_some() && !response.approved {
            return Err(refused(
                "approvalArgs",
                format!(
                    "gives arguments for {}, which this request declines; edited arguments go with an approval",
                    response.tool_call_id
                ),
            ));
        }
        // The AI SDK lets a reason go with an approval too; only a
        // decline's reason has a place (it is told to the model).
        let decision = match (response.approved, args) {
            (true, Some(args)) => CallDecision::ApproveWith(args),
            (true, None) => CallDecision::Approve,
            (false, _) => CallDecision::Decline(response.reason.clone()),
        };
        let call = (response.tool_call_id.clone(), decision);
        match waiting.iter_mut().find(|(run_id, _)| *run_id == response.run_id) {
            Some((_, calls)) => calls.push(call),
            None => waiting.push((response.run_id.clone(), vec![call])),
        }
        responses.push(response);
    }
    if let Some(unknown) = edited.keys().next() {
        return Err(refused(
            "approvalArgs",
            format!(
                "names approval {unknown}, which this request does not send; its keys are the approval ids it approves"
            ),
        ));
    }
    // Each run's decisions as the agent checks them on the run as read:
    // those made already, as asked, are repeats that run nothing again.
    let agent = state.agent(agent_id)?;
    let mut decided = Vec::new();
    for (run_id, decisions) in &mut waiting {
        let run = crate::runs::load(state, caller, run_id, Some(agent_id)).await?;
        for response in responses.iter().filter(|r| r.run_id == *run_id) {
            approval_call(&run, response, state.now())?;
        }
        let repeats = agent
            .check_decisions(&run, decisions)
            .map_err(|err| agents::on_agent_route(err, agent_id))?;
        decisions.retain(|(call, _)| !repeats.iter().any(|(repeat, _)| repeat == call));
        for (call, kind) in repeats {
            if let Some(response) = responses.iter().find(|r| r.run_id == *run_id && r.tool_call_id == call) {
                decided.push((response, kind));
            }
        }
    }
    waiting.retain(|(_, decisions)| !decisions.is_empty());
    let mut prelude = Vec::new();
    push_json(&mut prelude, &UiChunk::Start { message_id }, "start");
    for (response, kind) in &decided {
        repeat_outcome(state, response, *kind, &mut prelude).await?;
    }
    let last = waiting.len().saturating_sub(1);
    let mut live = None;
    for (i, (run_id, decisions)) in waiting.into_iter().enumerate() {
        let call = match decisions.as_slice() {
            [(only, _)] => Some(only.clone()),
            _ => None,
        };
        match agents::decisions_stream(state, caller, agent_id, &run_id, decisions).await {
            Ok(stream) if i == last => {
                live = Some((stream, agents::run_span(agent_id, &run_id, call.as_deref())));
            }
            // The runs before the last are driven here, each to its end.
            Ok(stream) => {
                for chunk in stream.output_with_chunks().await.0 {
                    for part in parts::of(&chunk) {
                        push_json(&mut prelude, &part, chunk.type_name());
                    }
                }
            }
            // Nothing was applied yet: refused as a whole.
            Err(err) if i == 0 => return Err(err),
            Err(err) => {
                let part = UiChunk::Error {
                    error_text: err.to_string(),
                };
                push_json(&mut prelude, &part, "error");
                break;
            }
        }
    }
    Ok(match live {
        Some((stream, span)) => sse::respond_ui(state, prelude, Some(chat.kept(state, caller, stream)), span),
        None => sse::respond_ui(state, prelude, None, tracing::Span::current()),
    })
}

/// What a decision applied before produced, told again: the call's stored
/// result for an approval (once its tool has returned), `tool-output-denied`
/// for a decline.
async fn repeat_outcome(
    state: &AppState,
    response: &ApprovalResponse,
    kind: ResolutionKind,
    out: &mut Vec<u8>,
) -> Result<(), ApiError> {
    let tool_call_id = response.tool_call_id.clone();
    if kind == ResolutionKind::Denied {
        push_json(out, &UiChunk::ToolOutputDenied { tool_call_id }, "tool-output-denied");
        return Ok(());
    }
    let messages = state.store.messages(&response.run_id).await?;
    let result = messages.iter().find_map(|m| match m {
        Message::Tool(result) if result.tool_call_id == tool_call_id => Some(result.content.to_value()),
        _ => None,
    });
    if let Some(output) = result {
        push_json(
            out,
            &UiChunk::ToolOutputAvailable { tool_call_id, output },
            "tool-output-available",
        );
    }
    Ok(())
}

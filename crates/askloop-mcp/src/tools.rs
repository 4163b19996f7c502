//! An MCP server's tools as askloop tools.
//!
//! Each call has an MCP session to itself for as long as it runs (taken from
//! the server's [`Pool`] of idle sessions, or opened, which starts the
//! program of a stdio server), so an elicitation the server sends belongs,
//! without doubt, to the call that is running. A call whose
//! server asks something suspends the run with an [`ElicitationPayload`];
//! the session stays open in a [`LiveCalls`] table keyed by run id and tool
//! call id, and the answer, when it comes to this process, goes straight
//! back to it. When the process that asked is gone, so is the session: the
//! stored answer is then given to the model as the tool's result, with a
//! note saying the server never received it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use askloop::{Cause, InvalidResume, Tool, ToolContext, ToolError, ToolOutcome, ToolOutput};
use async_trait::async_trait;
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam, ClientRequest,
    ElicitRequestParams, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::McpError;
use crate::connect::{ElicitReply, Elicitation, Relay, connect, elicitation_channel, within};
use crate::elicitation::{ELICITATION_KIND, ElicitationAnswer, ElicitationPayload, answer_schema};
use crate::pool::Pool;
use crate::spec::McpServerSpec;

/// Lists a server's tools (one short session) and returns them as askloop
/// tools, in the server's order, with the server's names. The server has
/// its `initialize_timeout` to start the session and its `list_timeout` to
/// list them; one that misses either is [`McpError::Timeout`]. The
/// assembly of `askloop.toml` leaves out a tool whose name is a built-in
/// tool's (such as `ask_user`) or one the agent already has; a program that
/// gives an agent these tools itself should do the same, since the page
/// shows a call of `ask_user` as a question askloop asked.
pub async fn mcp_tools(spec: &McpServerSpec) -> Result<Vec<Arc<dyn Tool>>, McpError> {
    let relay = Relay::default();
    let session = connect(spec, relay.clone()).await?;
    let listed = within(spec, "tools/list", spec.list_timeout, session.peer().list_all_tools()).await;
    let listed = match listed {
        Ok(Ok(listed)) => listed,
        Ok(Err(err)) => return Err(request_error(spec, "tools/list", err, session.fault())),
        Err(late) => return Err(late),
    };
    let pool = Pool::default();
    pool.keep_listing(session, relay);
    for wanted in &spec.only_tools {
        if !listed.iter().any(|t| t.name == *wanted) {
            let names: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
            return Err(McpError::UnknownTool {
                server: spec.name.clone(),
                tool: wanted.clone(),
                known: names.join(", "),
            });
        }
    }
    let live = LiveCalls::default();
    Ok(listed
        .into_iter()
        .filter(|t| spec.only_tools.is_empty() || spec.only_tools.iter().any(|w| *w == t.name))
        .map(|t| {
            let annotations = t.annotations.as_ref();
            let idempotent =
                annotations.is_some_and(|a| a.read_only_hint == Some(true) || a.idempotent_hint == Some(true));
            Arc::new(McpTool {
                spec: spec.clone(),
                name: t.name.to_string(),
                description: t.description.as_deref().unwrap_or_default().to_owned(),
                input_schema: Value::Object((*t.input_schema).clone()),
                idempotent,
                live: live.clone(),
                pool: pool.clone(),
            }) as Arc<dyn Tool>
        })
        .collect())
}

/// One tool of an MCP server.
#[derive(Debug)]
pub struct McpTool {
    spec: McpServerSpec,
    name: String,
    description: String,
    input_schema: Value,
    idempotent: bool,
    live: LiveCalls,
    /// Sessions to the server kept open between calls, shared by its tools.
    pool: Pool,
}

/// Calls that wait on an answer, each with its open MCP session, by
/// (run id, tool call id).
#[derive(Debug, Clone, Default)]
pub struct LiveCalls {
    calls: Arc<Mutex<HashMap<(String, String), LiveCall>>>,
}

impl LiveCalls {
    fn put(&self, key: (String, String), call: LiveCall) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.insert(key, call);
        }
    }

    fn take(&self, key: &(String, String)) -> Option<LiveCall> {
        self.calls.lock().ok()?.remove(key)
    }

    /// Gives up the call `key` waits on, if this process holds it: the
    /// server hears `notifications/cancelled` and its session ends.
    fn give_up(&self, key: &(String, String), why: &str) {
        if let Some(call) = self.take(key) {
            call.abandon.now(why);
        }
    }

    /// How many calls wait on an answer in this process.
    pub fn len(&self) -> usize {
        self.calls.lock().map(|c| c.len()).unwrap_or(0)
    }

    /// Whether no call waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a call was given up, when nothing more is known: its driver
/// dropped it.
const GAVE_UP: &str = "askloop gave the call up (its run was cancelled, or it stopped waiting for the call)";

/// The end of a call askloop gave up on, and why: the call's task tells the
/// server (`notifications/cancelled`, with the reason) and ends its session.
#[derive(Debug, Clone, Default)]
struct Abandon {
    token: CancellationToken,
    reason: Arc<OnceLock<String>>,
}

impl Abandon {
    /// Gives the call up; the first reason given is the one the server
    /// hears.
    fn now(&self, why: &str) {
        let _ = self.reason.set(why.to_owned());
        self.token.cancel();
    }

    fn reason(&self) -> String {
        self.reason.get().cloned().unwrap_or_else(|| GAVE_UP.to_owned())
    }
}

/// A call in flight (its task runs the request): the server's
/// elicitations, the reply to the one it waits on, how many it asked, and
/// how to give it up.
#[derive(Debug)]
struct LiveCall {
    elicitations: mpsc::Receiver<Elicitation>,
    done: oneshot::Receiver<Result<CallToolResult, McpError>>,
    reply: Option<oneshot::Sender<ElicitReply>>,
    expiry: Option<JoinHandle<()>>,
    asked: u32,
    abandon: Abandon,
}

impl Drop for LiveCall {
    fn drop(&mut self) {
        // The call's task hears it, tells the server and ends the session
        // (which stops a stdio server); a call that ended is not affected.
        self.abandon.now(GAVE_UP);
        if let Some(expiry) = &self.expiry {
            expiry.abort();
        }
    }
}

impl McpTool {
    fn start(&self, input: Value) -> LiveCall {
        let (to_driver, elicitations) = elicitation_channel();
        let (finish, done) = oneshot::channel();
        let mut params = CallToolRequestParams::new(self.name.clone());
        params.arguments = match input {
            Value::Object(map) => Some(map),
            _ => None,
        };
        let abandon = Abandon::default();
        let (pool, spec, tool, gave_up) = (self.pool.clone(), self.spec.clone(), self.name.clone(), abandon.clone());
        // It ends on its own: with a result, or soon after it is given up.
        tokio::spawn(async move {
            let outcome = call(&pool, &spec, &tool, params, to_driver, &gave_up).await;
            let _ = finish.send(outcome);
        });
        LiveCall {
            elicitations,
            done,
            reply: None,
            expiry: None,
            asked: 0,
            abandon,
        }
    }

    /// Waits for the call's next event: its result, or a question. The
    /// server has the tool's `call_timeout` from now (a question stops the
    /// clock: the person's time is not the server's); a call that misses
    /// it, or asks more than `max_questions`, is given up and ends as a
    /// tool error the model is told of.
    async fn drive(&self, mut call: LiveCall, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        let deadline = tokio::time::sleep(self.spec.call_timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                biased;
                done = &mut call.done => {
                    return match done {
                        Ok(Ok(result)) => Ok(tool_output(result).into()),
                        // The model may try again later: it is told why.
                        Ok(Err(err)) => Err(ToolError::new(err.to_string()).with_source(err)),
                        Err(_) => Err(ToolError::new(format!("the call to {} on the MCP server {} ended without a result", self.name, self.spec.name))),
                    };
                }
                Some(elicitation) = call.elicitations.recv() => {
                    let payload = match &elicitation.params {
                        ElicitRequestParams::FormElicitationParams { message, requested_schema, .. } => ElicitationPayload {
                            kind: ELICITATION_KIND.to_owned(),
                            server: self.spec.name.clone(),
                            tool: self.name.clone(),
                            message: message.clone(),
                            requested_schema: serde_json::to_value(requested_schema).unwrap_or(Value::Null),
                        },
                        _ => {
                            // URL elicitations send the person to a web page
                            // askloop cannot show; the server hears "cancel".
                            let _ = elicitation.reply.send(Ok(ElicitationAnswer::Cancel.into_result()));
                            continue;
                        }
                    };
                    let (Some(run_id), Some(call_id)) = (ctx.run_id(), ctx.tool_call_id()) else {
                        let _ = elicitation.reply.send(Ok(ElicitationAnswer::Cancel.into_result()));
                        continue;
                    };
                    if call.asked >= self.spec.max_questions {
                        let err = McpError::TooManyQuestions {
                            server: self.spec.name.clone(),
                            tool: self.name.clone(),
                            most: self.spec.max_questions,
                        };
                        let why = err.to_string();
                        let _ = elicitation.reply.send(Err(rmcp::ErrorData::invalid_request(why.clone(), None)));
                        call.abandon.now(&why);
                        return Err(ToolError::new(why).with_source(err));
                    }
                    call.asked += 1;
                    let key = (run_id.to_owned(), call_id.to_owned());
                    call.reply = Some(elicitation.reply);
                    let live = self.live.clone();
                    let expiring = key.clone();
                    let hold_for = self.spec.hold_for;
                    call.expiry = Some(tokio::spawn(async move {
                        tokio::time::sleep(hold_for).await;
                        live.give_up(&expiring, "the person's answer did not come in time (hold_for)");
                    }));
                    self.live.put(key, call);
                    return Ok(ctx.suspend(serde_json::to_value(&payload).unwrap_or(Value::Null))?);
                }
                () = &mut deadline => {
                    let err = McpError::Timeout {
                        server: self.spec.name.clone(),
                        what: format!("the call of {}", self.name),
                        after: self.spec.call_timeout,
                    };
                    call.abandon.now(&err.to_string());
                    return Err(ToolError::new(err.to_string()).with_source(err));
                }
            }
        }
    }
}

/// One call of `tool` on a session of its own: its result, or why there is
/// none. Given up (`abandon`), it tells the server
/// (`notifications/cancelled`, with the reason) and ends the session; a
/// session is kept for the next call only after a result.
async fn call(
    pool: &Pool,
    spec: &McpServerSpec,
    tool: &str,
    params: CallToolRequestParams,
    to_driver: mpsc::Sender<Elicitation>,
    abandon: &Abandon,
) -> Result<CallToolResult, McpError> {
    let gave_up = || McpError::Call {
        server: spec.name.clone(),
        tool: tool.to_owned(),
        reason: format!("the call was given up: {}", abandon.reason()),
        source: None,
    };
    let open = tokio::select! {
        open = pool.take(spec, to_driver) => open?,
        () = abandon.token.cancelled() => return Err(gave_up()),
    };
    let peer = open.session.peer().clone();
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = match peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
    {
        Ok(handle) => handle,
        Err(err) => return Err(request_error(spec, tool, err, open.session.fault())),
    };
    let id = handle.id.clone();
    tokio::select! {
        answer = handle.await_response() => match answer {
            Ok(ServerResult::CallToolResult(result)) => {
                pool.put_back(open);
                Ok(result)
            }
            Ok(_) => Err(McpError::Call {
                server: spec.name.clone(),
                tool: tool.to_owned(),
                reason: "it answered tools/call with something other than a tool's result".into(),
                source: None,
            }),
            Err(err) => Err(request_error(spec, tool, err, open.session.fault())),
        },
        () = abandon.token.cancelled() => {
            let cancelled = CancelledNotificationParam::new(Some(id), Some(abandon.reason()));
            // A server that stopped reading its input cannot hold this up.
            let _ = tokio::time::timeout(spec.stop_grace, peer.notify_cancelled(cancelled)).await;
            Err(gave_up())
        }
    }
}

/// Why a request (`what`) to the server failed: what it sent that ended
/// the session, if it did, else the transport's error.
fn request_error(spec: &McpServerSpec, what: &str, err: ServiceError, fault: Option<String>) -> McpError {
    match fault {
        Some(sent) => McpError::Unreadable {
            server: spec.name.clone(),
            during: what.to_owned(),
            sent,
        },
        None => McpError::Call {
            server: spec.name.clone(),
            tool: what.to_owned(),
            reason: err.to_string(),
            source: Some(Cause::new(err)),
        },
    }
}

/// An MCP result as a tool output: the value is the structured content when
/// the server gave one, else the content blocks; the model reads the text.
fn tool_output(result: CallToolResult) -> ToolOutput {
    let texts: Vec<String> = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect();
    let value = match (&result.structured_content, texts.as_slice()) {
        (Some(structured), _) => structured.clone(),
        (None, [one]) if result.content.len() == 1 => Value::String(one.clone()),
        (None, _) => serde_json::to_value(&result.content).unwrap_or(Value::Null),
    };
    let is_error = result.is_error == Some(true);
    let for_model = if texts.is_empty() { None } else { Some(texts.join("\n")) };
    let mut output = ToolOutput::json(value);
    output.is_error = is_error;
    if let Some(text) = for_model {
        output = output.for_model(text);
    }
    output
}

#[async_trait]
impl Tool for McpTool {
    fn id(&self) -> &str {
        &self.name
    }

    fn mcp_server(&self) -> Option<&str> {
        Some(&self.spec.name)
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    fn resume_schema_for(&self, suspend_payload: &Value) -> Option<Value> {
        let requested = suspend_payload.get("requestedSchema").cloned().unwrap_or(json!({}));
        Some(answer_schema(&requested))
    }

    fn check_resume_data(&self, data: &Value, suspend_payload: &Value) -> Result<(), InvalidResume> {
        let Some(payload) = ElicitationPayload::from_value(suspend_payload) else {
            return Err(InvalidResume {
                reason: "the stored question of this MCP call could not be read".into(),
                accepted: None,
            });
        };
        check_elicitation_answer(&payload, data)
    }

    /// A decline of the server's form is MCP's own `decline`: the server
    /// hears it (while its call is alive) and its result goes to the model.
    /// MCP's decline carries no reason, so a reason given is not passed on.
    fn decline_as_answer(&self, _reason: Option<&str>) -> Option<Value> {
        Some(json!({ "action": "decline" }))
    }

    fn idempotent(&self) -> bool {
        self.idempotent
    }

    /// The call's run was cancelled or superseded, or its question expired:
    /// the server hears `notifications/cancelled` and the session ends.
    fn forget_call(&self, run_id: &str, tool_call_id: &str) {
        let key = (run_id.to_owned(), tool_call_id.to_owned());
        self.live.give_up(
            &key,
            "its run was cancelled, or its question was closed without an answer",
        );
    }

    fn requires_approval(&self) -> bool {
        self.spec.require_approval
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutcome, ToolError> {
        let Some(data) = ctx.resume_data() else {
            let call = self.start(input);
            return self.drive(call, &ctx).await;
        };
        let answer = ElicitationAnswer::from_resume_data(data).ok_or_else(|| {
            ToolError::new(format!(
                "the answer to the MCP server {} could not be read: {data}",
                self.spec.name
            ))
        })?;
        let key = (
            ctx.run_id().unwrap_or_default().to_owned(),
            ctx.tool_call_id().unwrap_or_default().to_owned(),
        );
        match self.live.take(&key) {
            Some(mut call) => {
                if let Some(expiry) = call.expiry.take() {
                    expiry.abort();
                }
                if let Some(reply) = call.reply.take() {
                    let _ = reply.send(Ok(answer.into_result()));
                }
                self.drive(call, &ctx).await
            }
            None => Ok(lost_session_note(&self.spec.name, &self.name, &answer).into()),
        }
    }
}

/// What the model is told when the answer came after the MCP session that
/// asked was gone (the process stopped, or the call was held too long).
fn lost_session_note(server: &str, tool: &str, answer: &ElicitationAnswer) -> ToolOutput {
    let note = format!(
        "The MCP server {server} asked the person a question during this call of {tool}, but its session ended before \
         the answer came (the process that made the call stopped, or the call was held too long), so the server never \
         received the answer and the call did not finish. The person {}. Call {tool} again if it is still needed.",
        answer.describe()
    );
    ToolOutput::json(json!({
        "sessionLost": true,
        "answer": answer,
        "note": note,
    }))
    .for_model(note)
}

/// Checks an answer to an elicitation, saying what is wrong in the terms of
/// the form: which action is missing, or which field of the content does not
/// fit the server's schema (not the whole schema back).
fn check_elicitation_answer(payload: &ElicitationPayload, data: &Value) -> Result<(), InvalidResume> {
    const SHAPES: &str =
        r#"give {"action": "accept", "content": {...}}, {"action": "decline"} or {"action": "cancel"}"#;
    let refuse = |reason: String| InvalidResume { reason, accepted: None };
    let action = data.get("action").and_then(Value::as_str);
    match action {
        Some("accept") => {
            let Some(content) = data.get("content") else {
                return Err(refuse(format!("an accepted form needs its content: {SHAPES}")));
            };
            askloop::tool::check_against_schema(&payload.requested_schema, content).map_err(|problems| {
                refuse(format!(
                    "the form's content does not fit what {} asked: {problems}",
                    payload.server
                ))
            })?;
        }
        Some("decline" | "cancel") => {}
        Some(other) => return Err(refuse(format!("unknown action {other:?}: {SHAPES}"))),
        None => return Err(refuse(format!("the answer has no action: {SHAPES}"))),
    }
    // Whatever the checks above let through must still fit the whole answer
    // schema (no stray keys, for one).
    askloop::tool::check_against_schema(&payload.answer_schema(), data)
        .map_err(|_| refuse(format!("the answer has keys other than action and content: {SHAPES}")))
}

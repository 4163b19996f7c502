//! askloop's agents as MCP tools: `askloop mcp` (stdio) and the `/mcp`
//! endpoint of `askloop serve` (streamable HTTP).
//!
//! Each agent is a tool `ask_<agent id>` taking `{"message": "..."}`, and
//! optionally `"thread"`: a thread id, whose conversation the run continues
//! (it reads the thread's last messages and appends its own). A call
//! starts a run and waits for it. When the run asks a question, a client
//! that declared form elicitation is asked through `elicitation/create`
//! (free text as a string field, a single-select as an enum, a multi-select
//! as an array of enum, an approval as a boolean beside a field for each
//! top-level string, number or boolean argument, which the person may
//! change before allowing the call; several calls waiting for
//! approval as one form with a boolean for each, decided as one), and the
//! run goes on with its answer; a client without it gets a result saying the run waits, with
//! its run id and where to answer, so the question is never lost.
//!
//! Every answer given through MCP is recorded on the run as made through
//! the `mcp` interface, by the [`Caller`] the HTTP server put on the
//! request (its token's name, or the person a trusted proxy named). Without
//! one, the name the client gave itself in its `initialize` request is
//! recorded as declared by the client ([`Author::declared`]), never as who
//! answered: nothing checked it. Over HTTP, a
//! caller limited to some agents sees and may call only their tools, and a
//! session serves only the caller that opened it (see [`McpHttpService`](crate::McpHttpService)).
//!
//! The thread's resource is never an argument: it is the caller's. Over
//! HTTP, the first of the resources the [`Caller`]'s token may use (its own
//! name for a named token, the person behind a trusted proxy's author
//! header); a caller whose resources are not walled (no token, or only
//! `ASKLOOP_API_TOKEN`) and every stdio client use the resource the
//! [`AgentTools`] were given ([`AgentTools::resource`], [`DEFAULT_RESOURCE`]
//! unless set; `askloop mcp` sets its `--resource`).

use std::sync::Arc;

use askloop::store::{PendingKind, PendingToolCall, RunStatus};
use askloop::{
    Agent, Author, CallDecision, IdKind, Interface, Question, ResumeOptions, RunError, SelectionMode, StreamOptions,
    StreamOutput, ThreadOptions,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams, ElicitationAction,
    ElicitationSchema, Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool as McpToolInfo,
};
use rmcp::service::{ElicitationMode, RequestContext};

use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

use crate::connect::protocol_version;
use crate::elicitation::{ElicitationAnswer, ElicitationPayload};

/// The resource of the threads of callers whose resources are not walled,
/// unless [`AgentTools::resource`] sets another: over HTTP, a caller
/// without a token or with only `ASKLOOP_API_TOKEN` (for whom a resource is
/// a label, not a wall, as on the rest of the API).
pub const DEFAULT_RESOURCE: &str = "mcp";

/// The MCP tool name of an agent.
pub fn ask_tool_name(agent_id: &str) -> String {
    format!("ask_{agent_id}")
}

/// Where a person can answer a waiting run, for the result given to a
/// client that cannot be asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaitingLinks {
    /// The web page's base URL (e.g. `http://127.0.0.1:4111`), whose
    /// `/runs/{run_id}` shows the run's questions. When `None` over HTTP,
    /// the `Host` the client used is taken (the page is served beside
    /// `/mcp`).
    pub page: Option<String>,
}

impl WaitingLinks {
    fn page_for(&self, context: &RequestContext<RoleServer>) -> Option<String> {
        if let Some(page) = &self.page {
            return Some(page.trim_end_matches('/').to_owned());
        }
        let parts = context.extensions.get::<http::request::Parts>()?;
        let host = parts.headers.get(http::header::HOST)?.to_str().ok()?;
        let https = parts
            .headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"));
        Some(format!("{}://{host}", if https { "https" } else { "http" }))
    }
}

/// Who calls the `/mcp` endpoint, as the HTTP server in front of it found
/// out: it puts this in the request's extensions (see
/// [`http::Extensions`]), and the tools read it from there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// The name of the token the caller sent (`None` on a server without
    /// tokens). A session belongs to the token that opened it.
    pub token: Option<String>,
    /// Who to record as the author of answers (a token's name, a name a
    /// proxy vouched for).
    pub by: Option<String>,
    /// The agents the caller may ask (`None`: every agent).
    pub agents: Option<Vec<String>>,
    /// The resources whose threads the caller may use, its own first
    /// (`None`: not walled, so the tools' own resource is used). A thread
    /// named in a call is the first one's.
    pub resources: Option<Vec<String>>,
}

impl Caller {
    /// The caller of a request: what the HTTP server put on it, else
    /// anyone (stdio).
    fn of(context: &RequestContext<RoleServer>) -> Caller {
        context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned()
            .unwrap_or_default()
    }

    /// The resource of the threads this caller names: its first walled
    /// resource, else `unwalled`. An error when it is walled off from every
    /// resource.
    fn resource<'a>(&'a self, unwalled: &'a str) -> Result<&'a str, NoThreads> {
        match self.resources.as_deref() {
            None => Ok(unwalled),
            Some([first, ..]) => Ok(first),
            Some([]) => Err(NoThreads { by: self.by.clone() }),
        }
    }

    fn may_ask(&self, agent_id: &str) -> bool {
        self.agents
            .as_ref()
            .is_none_or(|agents| agents.iter().any(|a| a == agent_id))
    }

    /// The author of answers given in this request: the name the HTTP
    /// server vouched for (a token's, a person's a trusted proxy named).
    /// Without one (stdio, a server without tokens), the name the client
    /// gave itself in `initialize` is kept as only declared: nothing checked
    /// it, so it is never recorded as who answered.
    fn author(&self, context: &RequestContext<RoleServer>) -> Author {
        if let Some(by) = &self.by {
            return Author::named(Interface::Mcp, by.clone());
        }
        let client = context
            .peer
            .peer_info()
            .map(|info| info.client_info.name.clone())
            .filter(|name| !name.trim().is_empty());
        match client {
            Some(name) => Author::via(Interface::Mcp).with_declared(name),
            None => Author::via(Interface::Mcp),
        }
    }
}

/// A caller walled off from every resource named a thread: it may use no
/// thread at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} may use no resource's threads, so it cannot name a thread", by.as_deref().unwrap_or("this caller"))]
struct NoThreads {
    /// Who the caller is, when the HTTP server named it.
    by: Option<String>,
}

/// The MCP server of a set of agents.
#[derive(Debug, Clone)]
pub struct AgentTools {
    agents: Arc<Vec<Agent>>,
    links: WaitingLinks,
    resource: String,
}

impl AgentTools {
    /// Serves these agents; the threads callers name are of
    /// [`DEFAULT_RESOURCE`] unless their resources are walled.
    pub fn new(agents: Vec<Agent>, links: WaitingLinks) -> Self {
        AgentTools {
            agents: Arc::new(agents),
            links,
            resource: DEFAULT_RESOURCE.to_owned(),
        }
    }

    /// The resource of the threads named by a caller whose resources are
    /// not walled (every stdio client; over HTTP, one without a named
    /// token).
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = resource.into();
        self
    }

    fn tools(&self, caller: &Caller) -> Vec<McpToolInfo> {
        self.agents
            .iter()
            .filter(|agent| caller.may_ask(agent.id()))
            .map(|agent| {
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "message": {"type": "string", "description": "What to ask the agent."},
                        "thread": {"type": "string", "description": THREAD_ARGUMENT},
                    },
                    "required": ["message"],
                });
                let mut description = format!("Ask the agent {} ({}).", agent.name(), agent.id());
                if let Some(instructions) = agent.instructions() {
                    description.push_str(" Its instructions: ");
                    description.push_str(instructions);
                }
                description.push_str(
                    " It may ask the person questions before it answers; if they cannot be asked here, the result \
                     says the run waits and where to answer.",
                );
                let schema = match schema {
                    Value::Object(map) => map,
                    _ => Map::new(),
                };
                McpToolInfo::new(ask_tool_name(agent.id()), description, Arc::new(schema))
            })
            .collect()
    }

    async fn ask(
        &self,
        agent: &Agent,
        message: String,
        thread: Option<String>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let caller = Caller::of(context);
        let author = caller.author(context);
        let mut options = StreamOptions::default();
        // A walled caller's run is its own, on a thread or not, as over
        // HTTP: its first resource (the token's name, or the person).
        if let Some(own) = caller.resources.as_deref().and_then(<[String]>::first) {
            options = options.for_resource(own.clone());
        }
        let on_thread = thread.is_some();
        if let Some(thread) = thread {
            if let Err(err) = IdKind::Thread.check(&thread) {
                return failed(err.to_string());
            }
            let resource = match caller.resource(&self.resource) {
                Ok(resource) => resource,
                Err(why) => return failed(why.to_string()),
            };
            options = options.on_thread(ThreadOptions::new(resource, thread).by(author.clone()));
        }
        let mut output = match agent.stream_with(message, options).await {
            Ok(stream) => stream.output().await,
            Err(err) => return failed(format!("the run could not start: {err}")),
        };
        let can_ask = context
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form);
        loop {
            match output.status {
                RunStatus::Completed => return finished(&output),
                RunStatus::Suspended => {}
                RunStatus::Cancelled => return failed(format!("run {} was cancelled", output.run_id)),
                _ => {
                    let reason = output.error().unwrap_or_else(|| format!("status {:?}", output.status));
                    return failed(format!("run {} failed: {reason}", output.run_id));
                }
            }
            if !can_ask {
                return self.waiting(context, &output, None);
            }
            let approvals: Vec<&PendingToolCall> = output
                .pending
                .iter()
                .filter(|p| p.kind == PendingKind::Approval)
                .collect();
            if approvals.len() > 1 {
                output = match self
                    .approvals_at_once(agent, &output, &approvals, &author, context)
                    .await
                {
                    Ok(next) => next,
                    Err(result) => return result,
                };
                continue;
            }
            let Some(pending) = output.pending.first().cloned() else {
                return self.waiting(context, &output, None);
            };
            let Some(form) = Form::of(&pending, on_thread) else {
                return self.waiting(context, &output, Some("this question cannot be shown as an MCP form"));
            };
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: form.message.clone(),
                requested_schema: form.schema.clone(),
            };
            let answer = match context.peer.create_elicitation(params).await {
                Ok(answer) => answer,
                Err(err) => {
                    return self.waiting(context, &output, Some(&format!("the client could not be asked: {err}")));
                }
            };
            let next = match answer.action {
                ElicitationAction::Accept => {
                    let content = answer.content.unwrap_or(Value::Null);
                    let options =
                        ResumeOptions::call(output.run_id.clone(), pending.tool_call_id.clone()).by(author.clone());
                    match (form.edited_args(&content), form.always(&content)) {
                        (Some(_), true) => {
                            let why = "an approval with changed arguments cannot also be allowed always; approve \
                                       the changed call alone, or allow the call as the agent made it always";
                            return self.waiting(context, &output, Some(why));
                        }
                        (Some(args), false) => agent.approve_tool_call_with(options, args).await,
                        (None, true) => {
                            let always = askloop::Always::in_scope(askloop::GrantScope::Thread);
                            agent.approve_tool_call_always(options, always).await
                        }
                        (None, false) => agent.resume_stream(form.resume_data(&content), options).await,
                    }
                }
                ElicitationAction::Decline => match form.kind {
                    FormKind::Elicitation => {
                        agent
                            .resume_stream(
                                serde_json::to_value(ElicitationAnswer::Decline).unwrap_or(Value::Null),
                                ResumeOptions::call(output.run_id.clone(), pending.tool_call_id.clone())
                                    .by(author.clone()),
                            )
                            .await
                    }
                    _ => {
                        agent
                            .decline_tool_call(
                                ResumeOptions::call(output.run_id.clone(), pending.tool_call_id.clone())
                                    .by(author.clone()),
                            )
                            .await
                    }
                },
                _ => return self.waiting(context, &output, Some("the question was dismissed")),
            };
            output = match next {
                Ok(stream) => stream.output().await,
                Err(err) => return self.waiting(context, &output, Some(&refused(&err))),
            };
        }
    }

    /// Several calls waiting for approval, asked in one form with a box to
    /// tick for each (MCP forms are flat) and decided as one
    /// ([`Agent::decide_all`]): the ticked calls run, the others are
    /// declined, and the model is called once after all of them. Declining
    /// the form declines them all; dismissing it leaves them waiting.
    async fn approvals_at_once(
        &self,
        agent: &Agent,
        output: &StreamOutput,
        approvals: &[&PendingToolCall],
        author: &Author,
        context: &RequestContext<RoleServer>,
    ) -> Result<StreamOutput, CallToolResult> {
        let fields: Map<String, Value> = approvals
            .iter()
            .map(|p| {
                let title = format!("Allow {} with {}", p.tool_name, p.args);
                (p.tool_call_id.clone(), json!({"type": "boolean", "title": title}))
            })
            .collect();
        let ids: Vec<&str> = approvals.iter().map(|p| p.tool_call_id.as_str()).collect();
        let schema = json!({"type": "object", "properties": fields, "required": ids});
        let Ok(requested_schema) = serde_json::from_value::<ElicitationSchema>(schema) else {
            return Err(self.waiting(context, output, Some("these calls cannot be shown as an MCP form")));
        };
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: format!(
                "The agent wants to run {} tool calls. Tick each one to allow; the others are declined.",
                approvals.len()
            ),
            requested_schema,
        };
        let answer = match context.peer.create_elicitation(params).await {
            Ok(answer) => answer,
            Err(err) => {
                return Err(self.waiting(context, output, Some(&format!("the client could not be asked: {err}"))));
            }
        };
        let run_id = output.run_id.as_str();
        let decided = match answer.action {
            ElicitationAction::Accept => {
                let content = answer.content.unwrap_or(Value::Null);
                let decisions = ids
                    .iter()
                    .map(|id| {
                        let allowed = content.get(*id).and_then(Value::as_bool) == Some(true);
                        let decision = if allowed {
                            CallDecision::Approve
                        } else {
                            CallDecision::Decline(None)
                        };
                        ((*id).to_owned(), decision)
                    })
                    .collect();
                agent.decide_all(run_id, decisions, author.clone()).await
            }
            ElicitationAction::Decline => {
                agent
                    .decide_every_approval(run_id, CallDecision::Decline(None), author.clone())
                    .await
            }
            _ => return Err(self.waiting(context, output, Some("the question was dismissed"))),
        };
        match decided {
            Ok(stream) => Ok(stream.output().await),
            Err(err) => Err(self.waiting(context, output, Some(&refused(&err)))),
        }
    }

    /// The result for a run that waits on a person who cannot be asked here.
    fn waiting(
        &self,
        context: &RequestContext<RoleServer>,
        output: &StreamOutput,
        why: Option<&str>,
    ) -> CallToolResult {
        let questions: Vec<Value> = output
            .pending
            .iter()
            .map(|p| {
                json!({
                    "toolCallId": p.tool_call_id,
                    "toolName": p.tool_name,
                    "kind": match p.kind { PendingKind::Approval => "approval", _ => "question" },
                    "question": Form::of(p, false).map(|f| f.message),
                    "suspendPayload": p.suspend_payload,
                    "resumeSchema": p.resume_schema,
                })
            })
            .collect();
        let answer_at = self
            .links
            .page_for(context)
            .map(|page| askloop::run_page_url(&page, &output.run_id));
        let mut text = format!("The run {} is waiting for an answer", output.run_id);
        if let Some(why) = why {
            text.push_str(&format!(" ({why})"));
        }
        text.push('.');
        for q in &questions {
            if let Some(question) = q["question"].as_str() {
                text.push_str(&format!(" Question: {question}"));
            }
        }
        match &answer_at {
            Some(url) => text.push_str(&format!(
                " Answer it at {url} (or POST to the server's /api/agents/<agent>/resume-stream with this runId)."
            )),
            None => {
                text.push_str(" Answer it from `askloop serve`'s page or API on the same database, with this run id.")
            }
        }
        if !output.text.is_empty() {
            text.push_str(&format!(" The agent said so far: {}", output.text));
        }
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({
            "status": "suspended",
            "runId": output.run_id,
            "answerUrl": answer_at,
            "pending": questions,
        }));
        result
    }
}

/// The description of the `thread` argument of every `ask_<agent>` tool.
const THREAD_ARGUMENT: &str = "Optional: the id of a thread (a conversation) to continue. The agent reads the thread's \
     last messages before yours, and your message and its answer are added to it, so a later call with the same id \
     continues the conversation; an unknown id starts a new thread. The thread belongs to your resource (who you are \
     to this server), so another caller's thread of the same id is not yours.";

fn finished(output: &StreamOutput) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(output.text.clone())]);
    result.structured_content = Some(json!({"status": "completed", "runId": output.run_id, "text": output.text}));
    result
}

fn failed(reason: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(reason)])
}

fn refused(err: &RunError) -> String {
    format!("the answer was not taken: {err}")
}

/// How a pending call is shown as an MCP form, and how the form's content
/// becomes resume data.
struct Form {
    kind: FormKind,
    message: String,
    schema: ElicitationSchema,
}

enum FormKind {
    /// `ask_user`: one field, `answer`.
    Question,
    /// A call waiting on approval: one boolean, `approve`, and a field for
    /// each argument the form can hold (a top-level string, number or
    /// boolean), holding the model's value: a changed one approves the call
    /// with the edited arguments. On a thread, a boolean
    /// [`ALWAYS_FIELD`] too: allow the tool in the thread from now on.
    Approval { args: Value },
    /// An MCP server's own elicitation (an agent's MCP tool asked): passed
    /// on as it came.
    Elicitation,
}

/// The approval form's field that makes the approval stick to the thread.
const ALWAYS_FIELD: &str = "alwaysInThisConversation";

impl Form {
    /// `on_thread`: the call's run is on a thread, so an approval may stick
    /// to it.
    fn of(pending: &PendingToolCall, on_thread: bool) -> Option<Form> {
        let (kind, message, schema) = match pending.kind {
            PendingKind::Approval => {
                let mut fields = Map::new();
                fields.insert("approve".into(), json!({"type": "boolean", "title": "Allow"}));
                if on_thread {
                    fields.insert(
                        ALWAYS_FIELD.into(),
                        json!({"type": "boolean", "title": "Always allow this tool in this conversation", "default": false}),
                    );
                }
                // MCP forms are flat: only top-level primitive arguments can
                // be edited here; the others run as the model gave them.
                for (name, value) in pending.args.as_object().into_iter().flatten() {
                    let kind = match value {
                        Value::String(_) => "string",
                        Value::Bool(_) => "boolean",
                        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
                        Value::Number(_) => "number",
                        _ => continue,
                    };
                    if name != "approve" && name != ALWAYS_FIELD {
                        fields.insert(name.clone(), json!({"type": kind, "title": name, "default": value}));
                    }
                }
                (
                    FormKind::Approval {
                        args: Value::clone(&pending.args),
                    },
                    format!(
                        "The agent wants to run {} with {}. Allow it? You may change its arguments first.",
                        pending.tool_name, pending.args
                    ),
                    json!({"type": "object", "properties": fields, "required": ["approve"]}),
                )
            }
            _ => {
                let payload = pending.suspend_payload.as_ref()?;
                if let Some(elicitation) = ElicitationPayload::from_value(payload) {
                    (FormKind::Elicitation, elicitation.message, elicitation.requested_schema)
                } else {
                    let question = Question::from_payload(payload)?;
                    let labels = question.labels();
                    let field = match question.mode {
                        None => json!({"type": "string", "title": "Answer"}),
                        Some(SelectionMode::MultiSelect) => {
                            json!({"type": "array", "title": "Answer", "items": {"type": "string", "enum": labels}})
                        }
                        Some(_) => json!({"type": "string", "title": "Answer", "enum": labels}),
                    };
                    (
                        FormKind::Question,
                        question.text,
                        json!({"type": "object", "properties": {"answer": field}, "required": ["answer"]}),
                    )
                }
            }
        };
        let schema = serde_json::from_value(schema).ok()?;
        Some(Form { kind, message, schema })
    }

    /// For an approval the person allowed with changed arguments, the
    /// arguments the call is to run with: the model's, with each field of
    /// the form that differs from them.
    fn edited_args(&self, content: &Value) -> Option<Value> {
        let FormKind::Approval { args } = &self.kind else {
            return None;
        };
        if content.get("approve").and_then(Value::as_bool) != Some(true) {
            return None;
        }
        let mut edited = args.clone();
        let fields = edited.as_object_mut()?;
        for (name, value) in fields.iter_mut() {
            if let Some(new) = content
                .get(name)
                .filter(|new| *new != value && name != "approve" && name != ALWAYS_FIELD)
            {
                *value = new.clone();
            }
        }
        (edited != *args).then_some(edited)
    }

    /// Whether the person allowed the call and ticked [`ALWAYS_FIELD`].
    fn always(&self, content: &Value) -> bool {
        matches!(self.kind, FormKind::Approval { .. })
            && content.get("approve").and_then(Value::as_bool) == Some(true)
            && content.get(ALWAYS_FIELD).and_then(Value::as_bool) == Some(true)
    }

    fn resume_data(&self, content: &Value) -> Value {
        match self.kind {
            FormKind::Question => content.get("answer").cloned().unwrap_or(Value::Null),
            FormKind::Approval { .. } => {
                json!({"approved": content.get("approve").and_then(Value::as_bool).unwrap_or(false)})
            }
            FormKind::Elicitation => serde_json::to_value(ElicitationAnswer::Accept {
                content: content.clone(),
            })
            .unwrap_or(Value::Null),
        }
    }
}

impl ServerHandler for AgentTools {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.protocol_version = protocol_version();
        info.server_info = Implementation::new("askloop", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "Each tool asks one askloop agent. An agent may ask you questions (as elicitations) before it answers."
                .into(),
        );
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, rmcp::ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools(&Caller::of(&context))))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        let caller = Caller::of(&context);
        let Some(agent) = self.agents.iter().find(|a| ask_tool_name(a.id()) == request.name) else {
            let names: Vec<String> = self
                .agents
                .iter()
                .filter(|a| caller.may_ask(a.id()))
                .map(|a| ask_tool_name(a.id()))
                .collect();
            return Err(rmcp::ErrorData::invalid_params(
                format!("no tool {:?}; the tools are: {}", request.name, names.join(", ")),
                None,
            ));
        };
        if !caller.may_ask(agent.id()) {
            return Err(rmcp::ErrorData::invalid_request(
                format!(
                    "{} may not ask agent {}; it may ask: {}",
                    caller.by.as_deref().unwrap_or("this caller"),
                    agent.id(),
                    caller.agents.as_deref().unwrap_or_default().join(", ")
                ),
                None,
            ));
        }
        let message = request
            .arguments
            .as_ref()
            .and_then(|args| args.get("message"))
            .and_then(Value::as_str)
            .filter(|m| !m.trim().is_empty())
            .ok_or_else(|| {
                rmcp::ErrorData::invalid_params(
                    format!("{} needs {{\"message\": \"...\"}}, a non-empty string", request.name),
                    None,
                )
            })?
            .to_owned();
        let thread = match request.arguments.as_ref().and_then(|args| args.get("thread")) {
            None | Some(Value::Null) => None,
            Some(Value::String(thread)) => Some(thread.clone()),
            Some(other) => {
                return Ok(failed(format!("thread must be a string, a thread id; got {other}")).into());
            }
        };
        Ok(self.ask(agent, message, thread, &context).await.into())
    }
}

/// Serves the agents over stdio until the client closes it; every line
/// that is not a message is answered with its JSON-RPC error (see
/// [`crate::stdio`]).
pub async fn serve_stdio(tools: AgentTools) -> Result<(), std::io::Error> {
    let transport = crate::stdio::LineTransport::<RoleServer, _, _>::new(tokio::io::stdin(), tokio::io::stdout());
    let running = tools
        .serve(transport)
        .await
        .map_err(|err| std::io::Error::other(err.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|err| std::io::Error::other(err.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_callers_threads_are_of_its_first_walled_resource_else_the_tools_own() {
        let walled = Caller {
            token: Some("ana".into()),
            by: Some("ana".into()),
            agents: None,
            resources: Some(vec!["ana".into(), "team".into()]),
        };
        assert_eq!(walled.resource("mcp"), Ok("ana"));
        assert_eq!(Caller::default().resource("mcp"), Ok("mcp"));
        let nowhere = Caller {
            resources: Some(Vec::new()),
            ..walled
        };
        let err = nowhere.resource("mcp").unwrap_err();
        assert_eq!(err, NoThreads { by: Some("ana".into()) });
        assert_eq!(
            err.to_string(),
            "ana may use no resource's threads, so it cannot name a thread"
        );
    }
}

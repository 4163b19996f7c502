//! Tools: what a model can call, and the suspension primitive.
//!
//! A tool either finishes with a [`ToolOutput`] or suspends with a payload
//! ([`ToolContext::suspend`]). A suspended tool is executed again, with the
//! answer in [`ToolContext::resume_data`], when the run is resumed.
//!
//! ```
//! use askloop::{FunctionTool, ToolOutput};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Add { a: i64, b: i64 }
//!
//! let add = FunctionTool::builder("add")
//!     .description("Adds two numbers.")
//!     .input::<Add>()
//!     .execute(|input: Add, _ctx| async move { Ok(ToolOutput::text((input.a + input.b).to_string()).into()) });
//! # let _ = add;
//! ```

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::cause::Cause;
use crate::message::ToolContent;

/// A tool the model can call.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The tool's id: the function name the model calls.
    fn id(&self) -> &str;

    /// What the tool does and when to use it, for the model.
    fn description(&self) -> &str;

    /// JSON Schema of the input. The model's input is checked against it
    /// before [`Tool::execute`] runs.
    fn input_schema(&self) -> &Value;

    /// JSON Schema of what the tool suspends with, if it suspends.
    fn suspend_schema(&self) -> Option<&Value> {
        None
    }

    /// JSON Schema of the resume data the tool accepts after suspending.
    fn resume_schema(&self) -> Option<&Value> {
        None
    }

    /// JSON Schema of the resume data for one suspension. Defaults to
    /// [`Tool::resume_schema`]; a tool whose accepted answers depend on what
    /// it asked (like `ask_user` and its labels) narrows it here.
    fn resume_schema_for(&self, _suspend_payload: &Value) -> Option<Value> {
        self.resume_schema().cloned()
    }

    /// Checks resume data before anything is written. The default checks it
    /// against [`Tool::resume_schema_for`].
    fn check_resume_data(&self, data: &Value, suspend_payload: &Value) -> Result<(), InvalidResume> {
        match self.resume_schema_for(suspend_payload) {
            Some(schema) => check_against_schema(&schema, data).map_err(|err| InvalidResume {
                reason: err.to_string(),
                accepted: None,
            }),
            None => Ok(()),
        }
    }

    /// Whether every call needs a person's approval before it runs.
    fn requires_approval(&self) -> bool {
        false
    }

    /// The arguments of a call as this tool will act on them, for the
    /// agent's approval rules to judge (see [`crate::ApprovalRule`]): a
    /// tool that resolves its input (a path against its folder) gives the
    /// resolved form, so a rule matches what the call does, not only how
    /// the model wrote it. The arguments as given, by default.
    fn acts_on(&self, args: &Value) -> Value {
        args.clone()
    }

    /// The MCP server this tool comes from, for a tool of one: a rule may
    /// name the server, so that the same tool name elsewhere is not
    /// covered. `None` by default.
    fn mcp_server(&self) -> Option<&str> {
        None
    }

    /// Whether executing this tool again with resume data has no effect
    /// beyond producing its result (like `ask_user`, which only turns the
    /// answer into text). The agent may then compute the result *before*
    /// claiming the run and write both in one compare-and-set: one store
    /// commit less per answer. Exactly-once still holds for the run; a
    /// losing concurrent resume may have computed a result that is thrown
    /// away, so say `true` only for tools where that is harmless.
    fn resume_is_pure(&self) -> bool {
        false
    }

    /// Whether running a call of this tool twice does no harm: its effects,
    /// if any, are the same whether it ran once or twice (reading, or
    /// asking a question). When the process driving a run dies while a call
    /// runs, recovery runs the call again if this is `true`; otherwise the
    /// model is told the call was interrupted and may or may not have taken
    /// effect, and the call is never run a second time. `false` by default.
    fn idempotent(&self) -> bool {
        false
    }

    /// The most calls of this tool the model may make in one step (`None`:
    /// no limit). Calls past it are not run: each gets an error result
    /// telling the model the limit, so it can make them after the others.
    fn max_calls_per_step(&self) -> Option<usize> {
        None
    }

    /// The answer that declining this tool's question stands for, when the
    /// tool's own protocol has a decline of its own (an MCP server's form:
    /// `{"action": "decline"}`). Then a decline resumes the call with it, so
    /// the tool hears the decline and the model gets the tool's result.
    /// `None` (the default): a decline ends the call, and the model is told
    /// the person declined (with the reason, if one was given).
    fn decline_as_answer(&self, _reason: Option<&str>) -> Option<Value> {
        None
    }

    /// The call `tool_call_id` of the run `run_id`, which waited on a
    /// person, will not be executed again: its run was cancelled, or a new
    /// message superseded it, or its question expired. A tool that holds
    /// something for a waiting call (an MCP server's session, kept open for
    /// the answer) lets it go here. Nothing by default.
    fn forget_call(&self, _run_id: &str, _tool_call_id: &str) {}

    /// Runs the tool with its checked input.
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutcome, ToolError>;
}

impl fmt::Debug for dyn Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool").field("id", &self.id()).finish()
    }
}

/// Why resume data was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidResume {
    /// What was wrong.
    pub reason: String,
    /// The accepted values, when they are a fixed set (the labels of a
    /// question).
    pub accepted: Option<Vec<String>>,
}

/// What a tool finished with.
///
/// `value` is the tool's own return value: it is the `result` of the
/// `tool-result` chunk, as in Mastra. The model is told the same value (a
/// string as it is, other JSON as JSON text) unless [`ToolOutput::for_model`]
/// gives it something else.
///
/// ```
/// use askloop::{ToolContent, ToolOutput};
/// use serde_json::json;
///
/// let plain = ToolOutput::text("5");
/// assert_eq!(plain.value, json!("5"));
///
/// let booking = ToolOutput::json(json!({"id": 7, "seats": [12, 13]})).for_model("Booked seats 12 and 13.");
/// assert_eq!(booking.value["seats"], json!([12, 13]));
/// assert_eq!(booking.model_content(), ToolContent::Text("Booked seats 12 and 13.".into()));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// What the tool returned, as streams show it.
    pub value: Value,
    /// What the model is told instead of `value`, when set.
    pub for_model: Option<ToolContent>,
    /// Whether this is an error the model should see and react to.
    pub is_error: bool,
}

impl ToolOutput {
    /// A text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self::json(Value::String(text.into()))
    }

    /// A JSON result.
    pub fn json(value: Value) -> Self {
        ToolOutput {
            value,
            for_model: None,
            is_error: false,
        }
    }

    /// An error result the model can read (and retry after).
    pub fn error(text: impl Into<String>) -> Self {
        ToolOutput {
            is_error: true,
            ..Self::text(text)
        }
    }

    /// Tells the model `content` instead of the value (a summary of a large
    /// value, or the text inside a wrapper object).
    pub fn for_model(mut self, content: impl Into<ToolContent>) -> Self {
        self.for_model = Some(content.into());
        self
    }

    /// What the model is told.
    pub fn model_content(&self) -> ToolContent {
        match (&self.for_model, &self.value) {
            (Some(content), _) => content.clone(),
            (None, Value::String(text)) => ToolContent::Text(text.clone()),
            (None, value) => ToolContent::Json(value.clone()),
        }
    }
}

/// How a tool execution ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// The tool finished.
    Output(ToolOutput),
    /// The tool suspended, waiting for resume data.
    Suspended(Value),
}

impl From<ToolOutput> for ToolOutcome {
    fn from(output: ToolOutput) -> Self {
        ToolOutcome::Output(output)
    }
}

/// A tool failed; the run goes on. The model gets an is-error result and
/// the stream a `tool-error` chunk, saying either the tool's own message
/// (an error the model can act on: bad arguments, a file that is not
/// there; [`ToolError::new`]) or, for a failure whose detail is not the
/// model's business (a database down, a bug; [`ToolError::internal`]), only
/// that the tool failed. Either way the whole error, with its
/// [`source`](std::error::Error::source) chain, goes to the logs.
///
/// ```
/// use askloop::ToolError;
/// let err = ToolError::internal("the orders database did not answer")
///     .with_source(std::io::Error::other("connection refused"));
/// assert!(!err.shown_to_model());
/// assert_eq!(err.model_message("lookup_order"), "The tool lookup_order failed.");
/// assert_eq!(askloop::ErrorChain(&err).to_string(),
///     "the orders database did not answer: connection refused");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    message: String,
    shown_to_model: bool,
    #[source]
    source: Option<Cause>,
}

impl ToolError {
    /// An error the model is told, in these words.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            shown_to_model: true,
            source: None,
        }
    }

    /// An error for the logs only: the model and the stream are told that
    /// the tool failed, not why.
    pub fn internal(message: impl Into<String>) -> Self {
        ToolError {
            shown_to_model: false,
            ..ToolError::new(message)
        }
    }

    /// The same error, caused by `source` (kept for the logs' chain).
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Cause::new(source));
        self
    }

    /// The tool's own message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the model (and the stream) see [`ToolError::message`].
    pub fn shown_to_model(&self) -> bool {
        self.shown_to_model
    }

    /// What the model and the stream are told of this error, from a call of
    /// `tool_name`.
    pub fn model_message(&self, tool_name: &str) -> String {
        if self.shown_to_model {
            self.message.clone()
        } else {
            format!("The tool {tool_name} failed.")
        }
    }
}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        ToolError::new(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        ToolError::new(message)
    }
}

/// What a tool knows about the call it is executing.
#[derive(Debug, Clone, Default)]
pub struct ToolContext {
    run_id: Option<String>,
    tool_call_id: Option<String>,
    can_suspend: bool,
    resume_data: Option<Value>,
    suspend_payload: Option<Arc<Value>>,
}

impl ToolContext {
    /// A context for executing a tool outside an agent run: no run, no
    /// suspension.
    pub fn standalone() -> Self {
        ToolContext::default()
    }

    /// A context inside an agent run, where the tool may suspend.
    pub(crate) fn in_run(run_id: &str, tool_call_id: &str) -> Self {
        ToolContext {
            run_id: Some(run_id.to_owned()),
            tool_call_id: Some(tool_call_id.to_owned()),
            can_suspend: true,
            resume_data: None,
            suspend_payload: None,
        }
    }

    /// The same context, for re-executing after a resume.
    pub(crate) fn resumed(mut self, suspend_payload: Option<Arc<Value>>, resume_data: Option<Value>) -> Self {
        self.suspend_payload = suspend_payload;
        self.resume_data = resume_data;
        self
    }

    /// The run's id, inside an agent run.
    pub fn run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }

    /// The tool call's id, inside an agent run.
    pub fn tool_call_id(&self) -> Option<&str> {
        self.tool_call_id.as_deref()
    }

    /// Whether [`ToolContext::suspend`] is available (inside an agent run).
    pub fn can_suspend(&self) -> bool {
        self.can_suspend
    }

    /// The answer, when the tool is executed again after a resume.
    pub fn resume_data(&self) -> Option<&Value> {
        self.resume_data.as_ref()
    }

    /// What the tool suspended with, when executed again after a resume.
    pub fn suspend_payload(&self) -> Option<&Value> {
        self.suspend_payload.as_deref()
    }

    /// Suspends the tool call with a payload for the person. The agent stores
    /// the run, emits `tool-call-suspended`, and executes the tool again with
    /// the resume data when the run is resumed.
    ///
    /// Fails outside an agent run, where there is no run to store.
    pub fn suspend(&self, payload: Value) -> Result<ToolOutcome, SuspendUnavailable> {
        if self.can_suspend {
            Ok(ToolOutcome::Suspended(payload))
        } else {
            Err(SuspendUnavailable)
        }
    }
}

/// `suspend` was called outside an agent run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("suspend is only available inside an agent run")]
pub struct SuspendUnavailable;

impl From<SuspendUnavailable> for ToolError {
    fn from(err: SuspendUnavailable) -> Self {
        ToolError::new(err.to_string())
    }
}

/// Why a value does not fit a JSON Schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The schema itself is not one the validator can use.
    #[error("the schema itself is invalid: {0}")]
    InvalidSchema(String),
    /// The value breaks the schema: every problem, in one readable line
    /// (`at /path: what is wrong; ...`).
    #[error("{0}")]
    Mismatch(String),
}

/// Checks a value against a JSON Schema, with every problem in one
/// readable line.
pub fn check_against_schema(schema: &Value, value: &Value) -> Result<(), SchemaError> {
    let validator = jsonschema::validator_for(schema).map_err(|err| SchemaError::InvalidSchema(err.to_string()))?;
    describe_errors(&validator, value)
}

pub(crate) fn describe_errors(validator: &jsonschema::Validator, value: &Value) -> Result<(), SchemaError> {
    let problems: Vec<String> = validator
        .iter_errors(value)
        .map(|err| {
            let path = err.instance_path().to_string();
            if path.is_empty() {
                err.to_string()
            } else {
                format!("at {path}: {err}")
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(SchemaError::Mismatch(problems.join("; ")))
    }
}

type ActsOnFn = dyn Fn(&Value) -> Value + Send + Sync;

type ExecuteFn =
    dyn Fn(Value, ToolContext) -> Pin<Box<dyn Future<Output = Result<ToolOutcome, ToolError>> + Send>> + Send + Sync;

/// A tool made from a closure, with its input schema derived from a Rust type
/// (via `schemars`) or given by hand.
pub struct FunctionTool {
    id: String,
    description: String,
    input_schema: Value,
    suspend_schema: Option<Value>,
    resume_schema: Option<Value>,
    requires_approval: bool,
    idempotent: bool,
    acts_on: Option<Arc<ActsOnFn>>,
    execute: Arc<ExecuteFn>,
}

impl fmt::Debug for FunctionTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FunctionTool")
            .field("id", &self.id)
            .field("requires_approval", &self.requires_approval)
            .finish_non_exhaustive()
    }
}

impl FunctionTool {
    /// Starts building a tool with an id.
    pub fn builder(id: impl Into<String>) -> FunctionToolBuilder<Value> {
        FunctionToolBuilder {
            id: id.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            suspend_schema: None,
            resume_schema: None,
            requires_approval: false,
            idempotent: false,
            acts_on: None,
            input: PhantomData,
        }
    }
}

/// Builds a [`FunctionTool`]. `I` is the input type the closure receives.
pub struct FunctionToolBuilder<I> {
    id: String,
    description: String,
    input_schema: Value,
    suspend_schema: Option<Value>,
    resume_schema: Option<Value>,
    requires_approval: bool,
    idempotent: bool,
    acts_on: Option<Arc<ActsOnFn>>,
    input: PhantomData<fn() -> I>,
}

impl<I> fmt::Debug for FunctionToolBuilder<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FunctionToolBuilder")
            .field("id", &self.id)
            .field("requires_approval", &self.requires_approval)
            .finish_non_exhaustive()
    }
}

impl<I> FunctionToolBuilder<I> {
    /// The description the model reads.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Derives the input schema from `T` and passes the closure a `T`.
    pub fn input<T: schemars::JsonSchema + DeserializeOwned>(self) -> FunctionToolBuilder<T> {
        let schema = schemars::schema_for!(T);
        FunctionToolBuilder {
            id: self.id,
            description: self.description,
            input_schema: schema.to_value(),
            suspend_schema: self.suspend_schema,
            resume_schema: self.resume_schema,
            requires_approval: self.requires_approval,
            idempotent: self.idempotent,
            acts_on: self.acts_on,
            input: PhantomData,
        }
    }

    /// Sets the input schema by hand; the closure receives the raw JSON.
    pub fn input_schema(self, schema: Value) -> FunctionToolBuilder<Value> {
        FunctionToolBuilder {
            id: self.id,
            description: self.description,
            input_schema: schema,
            suspend_schema: self.suspend_schema,
            resume_schema: self.resume_schema,
            requires_approval: self.requires_approval,
            idempotent: self.idempotent,
            acts_on: self.acts_on,
            input: PhantomData,
        }
    }

    /// JSON Schema of the suspend payload.
    pub fn suspend_schema(mut self, schema: Value) -> Self {
        self.suspend_schema = Some(schema);
        self
    }

    /// JSON Schema of the resume data; answers are checked against it
    /// before anything is written.
    pub fn resume_schema(mut self, schema: Value) -> Self {
        self.resume_schema = Some(schema);
        self
    }

    /// Every call needs a person's approval before it runs.
    pub fn requires_approval(mut self, yes: bool) -> Self {
        self.requires_approval = yes;
        self
    }

    /// Declares that running a call twice does no harm, so a call
    /// interrupted by a crash is run again (see [`Tool::idempotent`]).
    pub fn idempotent(mut self, yes: bool) -> Self {
        self.idempotent = yes;
        self
    }

    /// The arguments as the tool will act on them, for approval rules
    /// (see [`Tool::acts_on`]).
    pub fn acts_on(mut self, f: impl Fn(&Value) -> Value + Send + Sync + 'static) -> Self {
        self.acts_on = Some(Arc::new(f));
        self
    }
}

impl<I: DeserializeOwned + Send + 'static> FunctionToolBuilder<I> {
    /// Finishes the tool with the function that runs it.
    pub fn execute<F, Fut>(self, f: F) -> FunctionTool
    where
        F: Fn(I, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutcome, ToolError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let execute: Arc<ExecuteFn> = Arc::new(move |input: Value, ctx: ToolContext| {
            let f = Arc::clone(&f);
            Box::pin(async move {
                let input: I =
                    serde_json::from_value(input).map_err(|err| ToolError::new(format!("invalid input: {err}")))?;
                f(input, ctx).await
            })
        });
        FunctionTool {
            id: self.id,
            description: self.description,
            input_schema: self.input_schema,
            suspend_schema: self.suspend_schema,
            resume_schema: self.resume_schema,
            requires_approval: self.requires_approval,
            idempotent: self.idempotent,
            acts_on: self.acts_on,
            execute,
        }
    }
}

#[async_trait]
impl Tool for FunctionTool {
    fn id(&self) -> &str {
        &self.id
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    fn suspend_schema(&self) -> Option<&Value> {
        self.suspend_schema.as_ref()
    }

    fn resume_schema(&self) -> Option<&Value> {
        self.resume_schema.as_ref()
    }

    fn requires_approval(&self) -> bool {
        self.requires_approval
    }

    fn idempotent(&self) -> bool {
        self.idempotent
    }

    fn acts_on(&self, args: &Value) -> Value {
        match &self.acts_on {
            Some(f) => f(args),
            None => args.clone(),
        }
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutcome, ToolError> {
        (self.execute)(input, ctx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, schemars::JsonSchema)]
    struct Add {
        a: i64,
        b: i64,
    }

    fn add_tool() -> FunctionTool {
        FunctionTool::builder("add")
            .description("Adds.")
            .input::<Add>()
            .execute(|input: Add, _ctx| async move { Ok(ToolOutput::text((input.a + input.b).to_string()).into()) })
    }

    #[tokio::test]
    async fn function_tool_derives_schema_from_type_and_runs() {
        let tool = add_tool();
        assert_eq!(tool.input_schema()["properties"]["a"]["type"], "integer");
        let outcome = tool
            .execute(json!({"a": 2, "b": 3}), ToolContext::standalone())
            .await
            .unwrap();
        assert_eq!(outcome, ToolOutcome::Output(ToolOutput::text("5")));
    }

    #[test]
    fn the_model_is_told_the_value_unless_told_otherwise() {
        assert_eq!(ToolOutput::text("5").model_content(), ToolContent::Text("5".into()));
        assert_eq!(
            ToolOutput::json(json!({"a": 1})).model_content(),
            ToolContent::Json(json!({"a": 1}))
        );
        let wrapped = ToolOutput::json(json!({"content": "hi", "isError": false})).for_model("hi");
        assert_eq!(wrapped.model_content(), ToolContent::Text("hi".into()));
        assert_eq!(wrapped.value["content"], "hi");
        let failed = ToolOutput::error("no");
        assert!(failed.is_error);
        assert_eq!(failed.value, json!("no"));
    }

    #[test]
    fn schema_check_reports_path_and_reason() {
        let tool = add_tool();
        let err = check_against_schema(tool.input_schema(), &json!({"a": "x", "b": 1})).unwrap_err();
        assert!(err.to_string().contains("/a"), "{err}");
        assert!(err.to_string().contains("integer"), "{err}");
    }

    #[test]
    fn suspend_outside_a_run_is_unavailable() {
        assert_eq!(ToolContext::standalone().suspend(json!({})), Err(SuspendUnavailable));
        let ctx = ToolContext::in_run("r", "c");
        assert_eq!(
            ctx.suspend(json!({"q": 1})),
            Ok(ToolOutcome::Suspended(json!({"q": 1})))
        );
    }
}

//! The built-in `ask_user` tool: free-text, single-select and multi-select
//! questions to a person.
//!
//! Same contract as Mastra's `askUserTool`, plus one thing it lacks: the
//! answer is checked against the question before anything is written. A
//! single-select answer must be one of the labels, a multi-select answer a
//! non-empty list of distinct labels, a free-text answer a non-empty string.
//!
//! ```
//! use askloop::{AskUser, Tool, ToolContext, ToolOutcome};
//! # tokio_test_block(async {
//! let tool = AskUser::new();
//! let outcome = tool
//!     .execute(serde_json::json!({"question": "Which city?"}), ToolContext::standalone())
//!     .await
//!     .unwrap();
//! // Outside an agent run there is no one to ask: the question comes back as text.
//! let ToolOutcome::Output(output) = outcome else { unreachable!() };
//! assert_eq!(output.model_content().to_model_text(), "[Question for user]: Which city?");
//! // Streams show Mastra's `{content, isError}`.
//! assert_eq!(output.value["content"], "[Question for user]: Which city?");
//! # });
//! # fn tokio_test_block(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::message::ToolContent;
use crate::tool::{InvalidResume, Tool, ToolContext, ToolError, ToolOutcome, ToolOutput};

/// The tool's id, as the model calls it.
pub const ASK_USER_TOOL_ID: &str = "ask_user";

const DESCRIPTION: &str = "Ask the user a question and wait for the answer. Use it when the request is \
ambiguous and you need clarification, when you want to confirm an assumption before acting on it, or \
when the user has to decide between alternatives. For a structured choice give 2-4 short options; for \
an open question give none. Set selectionMode to \"multi_select\" when several options may be chosen \
together (it defaults to \"single_select\" when options are given).";

/// One choice offered to the user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AskUserOption {
    /// Short text shown for this choice; returned to the model when chosen.
    pub label: String,
    /// What this choice means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// How many options the user may pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SelectionMode {
    /// Exactly one.
    SingleSelect,
    /// One or more.
    MultiSelect,
}

impl SelectionMode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SelectionMode::SingleSelect => "single_select",
            SelectionMode::MultiSelect => "multi_select",
        }
    }
}

/// The tool's input, as the model sends it. Unknown keys are refused, as in
/// Mastra: the model is told which key was unexpected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AskUserInput {
    /// The question to ask. Must not be empty.
    #[schemars(length(min = 1))]
    pub question: String,
    /// Structured choices; omit for a free-text question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<AskUserOption>>,
    /// How many options may be picked. Defaults to single_select when
    /// options are given; requires options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_mode: Option<SelectionMode>,
}

/// What the tool suspends with: the question, with the resolved selection
/// mode (absent for free text).
pub type AskUserPayload = AskUserInput;

/// Whether `text` is empty or only white space, as Rust counts it
/// ([`char::is_whitespace`]) or as a JSON Schema validator's `\S` does
/// (ECMA-262's `\s`, which also counts U+FEFF, the byte-order mark): an
/// answer the check accepts is then always one its schema
/// ([`Question::answer_schema`], `"pattern": "\\S"`) accepts too.
pub fn is_blank(text: &str) -> bool {
    text.chars().all(|c| c.is_whitespace() || c == '\u{FEFF}')
}

/// A suspend payload as stored: the question's fields, and the `metadata`
/// the runtime adds, which is not part of the question.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StoredPayload {
    question: String,
    #[serde(default)]
    options: Option<Vec<AskUserOption>>,
    #[serde(default)]
    selection_mode: Option<SelectionMode>,
    #[serde(default, rename = "metadata")]
    _metadata: Option<serde::de::IgnoredAny>,
}

/// A question, read back from a suspend payload, that knows which answers it
/// accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The question's text.
    pub text: String,
    /// The choices, empty for free text.
    pub options: Vec<AskUserOption>,
    /// The resolved mode; `None` for free text.
    pub mode: Option<SelectionMode>,
}

impl Question {
    /// Reads a question from an `ask_user` suspend payload. Its `metadata`
    /// (what the runtime adds, such as `expiresAt`) is not part of the
    /// question.
    pub fn from_payload(payload: &Value) -> Option<Question> {
        // Read in place (a `&Value` is a deserializer): no copy of the
        // payload per answer checked or schema made.
        let input = StoredPayload::deserialize(payload).ok()?;
        let options = input.options.unwrap_or_default();
        let mode = match (options.is_empty(), input.selection_mode) {
            (true, _) => None,
            (false, None) => Some(SelectionMode::SingleSelect),
            (false, Some(mode)) => Some(mode),
        };
        Some(Question {
            text: input.question,
            options,
            mode,
        })
    }

    /// The option labels.
    pub fn labels(&self) -> Vec<String> {
        self.options.iter().map(|o| o.label.clone()).collect()
    }

    /// JSON Schema of the answers this question accepts.
    pub fn answer_schema(&self, allow_free_text: bool) -> Value {
        let labels = self.labels();
        // Text with something other than white space: the check refuses a
        // blank answer, so the schema clients validate with does too.
        let text = json!({"type": "string", "minLength": 1, "pattern": "\\S"});
        match self.mode {
            None => text,
            Some(SelectionMode::SingleSelect) if allow_free_text => text,
            Some(SelectionMode::SingleSelect) => json!({"type": "string", "enum": labels}),
            Some(SelectionMode::MultiSelect) if allow_free_text => json!({
                "type": "array", "items": text, "minItems": 1, "uniqueItems": true
            }),
            Some(SelectionMode::MultiSelect) => json!({
                "type": "array", "items": {"type": "string", "enum": labels}, "minItems": 1, "uniqueItems": true
            }),
        }
    }

    /// Checks an answer. `allow_free_text` accepts text outside the labels.
    pub fn check_answer(&self, answer: &Value, allow_free_text: bool) -> Result<(), InvalidResume> {
        let labels = self.labels();
        let refuse = |reason: String| {
            Err(InvalidResume {
                reason,
                accepted: if labels.is_empty() { None } else { Some(labels.clone()) },
            })
        };
        let known = |label: &str| allow_free_text || labels.iter().any(|l| l == label);
        match (self.mode, answer) {
            (None, Value::String(text)) if is_blank(text) => {
                refuse("the answer is empty; a free-text question needs a non-empty string".into())
            }
            (None, Value::String(_)) => Ok(()),
            (None, other) => refuse(format!(
                "a free-text question needs a string answer, got {}",
                json_kind(other)
            )),
            // With free text allowed, a blank answer would pass as "known".
            (Some(SelectionMode::SingleSelect), Value::String(label)) if is_blank(label) => {
                refuse("the answer is empty; a single-select question needs one of the labels".into())
            }
            (Some(SelectionMode::SingleSelect), Value::String(label)) if known(label) => Ok(()),
            (Some(SelectionMode::SingleSelect), Value::String(label)) => {
                refuse(format!("{label:?} is not one of the options"))
            }
            (Some(SelectionMode::SingleSelect), other) => refuse(format!(
                "a single-select question needs one label as a string, got {}",
                json_kind(other)
            )),
            (Some(SelectionMode::MultiSelect), Value::Array(items)) => {
                if items.is_empty() {
                    return refuse("a multi-select answer needs at least one label".into());
                }
                let mut seen: Vec<&str> = Vec::with_capacity(items.len());
                for item in items {
                    let Value::String(label) = item else {
                        return refuse(format!(
                            "a multi-select answer is a list of labels (strings), got {} in it",
                            json_kind(item)
                        ));
                    };
                    if !known(label) {
                        return refuse(format!("{label:?} is not one of the options"));
                    }
                    if is_blank(label) {
                        return refuse("an empty label is not an answer".into());
                    }
                    if seen.contains(&label.as_str()) {
                        return refuse(format!("{label:?} is chosen twice"));
                    }
                    seen.push(label);
                }
                Ok(())
            }
            (Some(SelectionMode::MultiSelect), other) => refuse(format!(
                "a multi-select question needs a list of labels, got {}",
                json_kind(other)
            )),
        }
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// How much one `ask_user` call may ask and be answered with. Each refusal
/// says the limit: options and questions are refused to the model (which
/// can ask again with less), an answer is refused to the person (the
/// question stays open).
///
/// ```
/// use askloop::{AskUser, AskUserLimits};
/// let tool = AskUser::new().limits(AskUserLimits { max_options: 5, ..AskUserLimits::default() });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AskUserLimits {
    /// Most bytes of an answer, as JSON (default 64 KiB).
    pub max_answer_bytes: usize,
    /// Most options of one question (default 20).
    pub max_options: usize,
    /// Most `ask_user` calls the model may make in one step (default 8);
    /// calls past it are told to wait until the others are answered.
    pub max_questions_per_step: usize,
}

impl Default for AskUserLimits {
    fn default() -> Self {
        AskUserLimits {
            max_answer_bytes: 64 * 1024,
            max_options: 20,
            max_questions_per_step: 8,
        }
    }
}

/// The built-in `ask_user` tool.
#[derive(Debug, Clone)]
pub struct AskUser {
    input_schema: Value,
    resume_schema: Value,
    allow_free_text: bool,
    limits: AskUserLimits,
}

impl Default for AskUser {
    fn default() -> Self {
        Self::new()
    }
}

impl AskUser {
    /// The tool with strict answer checking.
    pub fn new() -> Self {
        AskUser {
            input_schema: input_schema(),
            resume_schema: json!({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}),
            allow_free_text: false,
            limits: AskUserLimits::default(),
        }
    }

    /// Sets the limits on options, answers and questions per step.
    pub fn limits(mut self, limits: AskUserLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Accepts answers outside the offered labels (a host-side choice, off by
    /// default).
    pub fn allow_free_text_answers(mut self, yes: bool) -> Self {
        self.allow_free_text = yes;
        self
    }
}

#[async_trait]
impl Tool for AskUser {
    fn id(&self) -> &str {
        ASK_USER_TOOL_ID
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    fn suspend_schema(&self) -> Option<&Value> {
        Some(&self.input_schema)
    }

    fn resume_schema(&self) -> Option<&Value> {
        Some(&self.resume_schema)
    }

    fn resume_schema_for(&self, suspend_payload: &Value) -> Option<Value> {
        match Question::from_payload(suspend_payload) {
            Some(question) => Some(question.answer_schema(self.allow_free_text)),
            None => Some(self.resume_schema.clone()),
        }
    }

    fn resume_is_pure(&self) -> bool {
        true
    }

    /// Asking again only asks again: a question interrupted before it was
    /// stored is asked once more by recovery, and never stored twice.
    fn idempotent(&self) -> bool {
        true
    }

    fn max_calls_per_step(&self) -> Option<usize> {
        Some(self.limits.max_questions_per_step)
    }

    fn check_resume_data(&self, data: &Value, suspend_payload: &Value) -> Result<(), InvalidResume> {
        let size = serde_json::to_vec(data).map_or(usize::MAX, |bytes| bytes.len());
        if size > self.limits.max_answer_bytes {
            return Err(InvalidResume {
                reason: format!(
                    "the answer is {size} bytes; at most {} are accepted (AskUserLimits::max_answer_bytes, \
                     [limits] max_answer_bytes in askloop.toml)",
                    self.limits.max_answer_bytes
                ),
                accepted: None,
            });
        }
        match Question::from_payload(suspend_payload) {
            Some(question) => question.check_answer(data, self.allow_free_text),
            None => Err(InvalidResume {
                reason: "the stored question could not be read".into(),
                accepted: None,
            }),
        }
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutcome, ToolError> {
        let input: AskUserInput =
            serde_json::from_value(input).map_err(|err| ToolError::new(format!("Failed to ask user: {err}")))?;
        check_options(input.options.as_deref().unwrap_or_default(), self.limits.max_options)?;
        let options = input.options.filter(|o| !o.is_empty());
        if input.selection_mode.is_some() && options.is_none() {
            return Ok(reply("Failed to ask user: selectionMode requires options.", true).into());
        }
        let mode = options
            .as_ref()
            .map(|_| input.selection_mode.unwrap_or(SelectionMode::SingleSelect));

        if let Some(answer) = ctx.resume_data() {
            return Ok(reply(format!("User answered: {}", answer_text(answer)), false).into());
        }

        if !ctx.can_suspend() {
            let mut text = format!("[Question for user]: {}", input.question);
            if let Some(options) = &options {
                let labels: Vec<&str> = options.iter().map(|o| o.label.as_str()).collect();
                text.push_str(&format!("\nOptions: {}", labels.join(", ")));
            }
            if let Some(mode) = mode {
                text.push_str(&format!("\nSelection mode: {}", mode.as_str()));
            }
            return Ok(reply(text, false).into());
        }

        let payload = AskUserPayload {
            question: input.question,
            options,
            selection_mode: mode,
        };
        let payload = serde_json::to_value(payload)
            .map_err(|err| ToolError::internal("the question could not be written as JSON").with_source(err))?;
        Ok(ctx.suspend(payload)?)
    }
}

/// The input schema models are given, written out rather than derived: every
/// object closed with `additionalProperties: false` and no `null` types, so
/// OpenAI's strict tool mode accepts it; optional keys are simply left out.
fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "question": {
                "type": "string",
                "minLength": 1,
                "description": "The question to ask the user. Should be clear and specific."
            },
            "options": {
                "type": "array",
                "description": "Optional choices. If provided, shows a selection list. If omitted, shows a free-text input.",
                "items": {
                    "type": "object",
                    "properties": {
                        "label": {"type": "string", "description": "Short display text for this option (1-5 words)"},
                        "description": {"type": "string", "description": "Explanation of what this option means"}
                    },
                    "required": ["label"],
                    "additionalProperties": false
                }
            },
            "selectionMode": {
                "type": "string",
                "enum": ["single_select", "multi_select"],
                "description": "Controls how many provided options the user can select. Defaults to single_select when options are provided. Requires options."
            }
        },
        "required": ["question"],
        "additionalProperties": false
    })
}

/// Refuses options a person could not tell apart or pick: an empty (or
/// blank) label, a label offered twice, more options than the limit.
fn check_options(options: &[AskUserOption], max_options: usize) -> Result<(), ToolError> {
    if options.len() > max_options {
        return Err(ToolError::new(format!(
            "Failed to ask user: {} options were given; at most {max_options} are accepted. Offer fewer options, \
             or ask a free-text question.",
            options.len()
        )));
    }
    for (position, option) in options.iter().enumerate() {
        if is_blank(&option.label) {
            return Err(ToolError::new(format!(
                "Failed to ask user: option {} has an empty label. Every option needs a short, non-empty label.",
                position + 1
            )));
        }
        if options[..position].iter().any(|o| o.label == option.label) {
            return Err(ToolError::new(format!(
                "Failed to ask user: the label {:?} is offered twice. Every option needs its own label.",
                option.label
            )));
        }
    }
    Ok(())
}

/// What `ask_user` returns: Mastra's `{content, isError}` on the wire; the
/// model is told the content.
fn reply(content: impl Into<String>, is_error: bool) -> ToolOutput {
    let content = content.into();
    ToolOutput {
        value: json!({"content": content, "isError": is_error}),
        for_model: Some(ToolContent::Text(content)),
        is_error,
    }
}

/// The answer as the model reads it: arrays joined with `", "`.
fn answer_text(answer: &Value) -> String {
    match answer {
        Value::String(text) => text.clone(),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_run() -> ToolContext {
        ToolContext::in_run("run", "call")
    }

    async fn run(input: Value, ctx: ToolContext) -> ToolOutcome {
        AskUser::new().execute(input, ctx).await.unwrap()
    }

    #[tokio::test]
    async fn free_text_question_suspends_with_question_only() {
        let outcome = run(json!({"question": "Which repo?"}), in_run()).await;
        assert_eq!(outcome, ToolOutcome::Suspended(json!({"question": "Which repo?"})));
    }

    #[tokio::test]
    async fn options_without_mode_resolve_to_single_select() {
        let outcome = run(
            json!({"question": "Env?", "options": [{"label": "a"}, {"label": "b"}]}),
            in_run(),
        )
        .await;
        assert_eq!(
            outcome,
            ToolOutcome::Suspended(json!({
                "question": "Env?", "options": [{"label": "a"}, {"label": "b"}], "selectionMode": "single_select"
            }))
        );
    }

    #[tokio::test]
    async fn multi_select_keeps_mode_and_descriptions() {
        let input = json!({"question": "Which?", "options": [{"label": "a", "description": "first"}, {"label": "b"}], "selectionMode": "multi_select"});
        let outcome = run(input.clone(), in_run()).await;
        assert_eq!(outcome, ToolOutcome::Suspended(input));
    }

    #[tokio::test]
    async fn selection_mode_without_options_is_an_error_result_and_no_suspension() {
        let outcome = run(json!({"question": "Q?", "selectionMode": "multi_select"}), in_run()).await;
        assert_eq!(
            outcome,
            ToolOutcome::Output(reply("Failed to ask user: selectionMode requires options.", true))
        );
    }

    #[tokio::test]
    async fn outside_a_run_returns_readable_fallback_text() {
        let plain = run(json!({"question": "Q?"}), ToolContext::standalone()).await;
        assert_eq!(plain, ToolOutcome::Output(reply("[Question for user]: Q?", false)));
        let choice = run(
            json!({"question": "Q?", "options": [{"label": "a"}, {"label": "b"}]}),
            ToolContext::standalone(),
        )
        .await;
        assert_eq!(
            choice,
            ToolOutcome::Output(reply(
                "[Question for user]: Q?\nOptions: a, b\nSelection mode: single_select",
                false
            ))
        );
    }

    #[tokio::test]
    async fn resumed_with_array_answers_joined() {
        let ctx = in_run().resumed(Some(json!({}).into()), Some(json!(["a", "b"])));
        let outcome = run(
            json!({"question": "Q?", "options": [{"label": "a"}, {"label": "b"}], "selectionMode": "multi_select"}),
            ctx,
        )
        .await;
        let ToolOutcome::Output(output) = outcome else {
            panic!("expected an output")
        };
        assert_eq!(
            output.value,
            json!({"content": "User answered: a, b", "isError": false})
        );
        assert_eq!(output.model_content(), ToolContent::Text("User answered: a, b".into()));
    }

    fn question(payload: Value) -> Question {
        Question::from_payload(&payload).unwrap()
    }

    #[test]
    fn an_answer_of_white_space_as_a_schema_validator_counts_it_is_refused_by_the_check_and_the_schema() {
        let free = question(json!({"question": "Why?"}));
        let schema = free.answer_schema(false);
        // U+FEFF is white space to ECMA-262's `\s` (JSON Schema patterns),
        // not to Rust; U+0085 to Rust, not to ECMA-262.
        for blank in ["", " \n", "\u{FEFF}", "\u{FEFF} \n", "\u{00A0}\u{3000}", "\u{0085}"] {
            let answer = json!(blank);
            assert!(free.check_answer(&answer, false).is_err(), "{blank:?} was accepted");
        }
        for blank in ["\u{FEFF}", "\u{FEFF} \n", "\u{00A0}\u{3000}"] {
            assert!(
                crate::tool::check_against_schema(&schema, &json!(blank)).is_err(),
                "{blank:?} passes the schema"
            );
        }
        assert!(free.check_answer(&json!("\u{FEFF}ok"), false).is_ok());
    }

    #[test]
    fn a_stored_payload_reads_as_its_question_whatever_metadata_the_runtime_added() {
        let stored = json!({
            "question": "Which environment?",
            "options": [{"label": "staging"}, {"label": "production"}],
            "selectionMode": "single_select",
            "metadata": {"expiresAt": "2026-01-01T00:01:30.000Z"}
        });
        let read = question(stored);
        assert_eq!(read.text, "Which environment?");
        assert_eq!(read.labels(), ["staging", "production"]);
        assert_eq!(read.mode, Some(SelectionMode::SingleSelect));
        assert_eq!(question(json!({"question": "Why?"})).mode, None);
        assert_eq!(
            Question::from_payload(&json!({"question": "Why?", "extra": 1})),
            None,
            "a key that is neither the question's nor metadata is not an ask_user payload"
        );
        assert_eq!(Question::from_payload(&json!("Why?")), None);
    }

    #[test]
    fn answers_are_checked_against_the_question() {
        let single = question(
            json!({"question": "Q", "options": [{"label": "a"}, {"label": "b"}], "selectionMode": "single_select"}),
        );
        assert!(single.check_answer(&json!("a"), false).is_ok());
        let err = single.check_answer(&json!("c"), false).unwrap_err();
        assert_eq!(err.accepted, Some(vec!["a".to_string(), "b".to_string()]));
        assert!(single.check_answer(&json!(["a"]), false).is_err());
        assert!(single.check_answer(&json!("c"), true).is_ok());

        let multi = question(
            json!({"question": "Q", "options": [{"label": "a"}, {"label": "b"}], "selectionMode": "multi_select"}),
        );
        assert!(multi.check_answer(&json!(["a", "b"]), false).is_ok());
        assert!(multi.check_answer(&json!([]), false).is_err());
        assert!(multi.check_answer(&json!(["a", "a"]), false).is_err());
        assert!(multi.check_answer(&json!("a"), false).is_err());
        assert!(multi.check_answer(&json!(["z"]), false).is_err());

        let free = question(json!({"question": "Q"}));
        assert!(free.check_answer(&json!("anything"), false).is_ok());
        assert!(free.check_answer(&json!(""), false).is_err());
        assert!(free.check_answer(&json!(["x"]), false).is_err());
    }

    #[test]
    fn answer_schema_lists_labels() {
        let single = question(json!({"question": "Q", "options": [{"label": "a"}, {"label": "b"}]}));
        assert_eq!(
            single.answer_schema(false),
            json!({"type": "string", "enum": ["a", "b"]})
        );
    }

    /// Every object in a schema, depth first.
    fn objects(value: &Value, out: &mut Vec<Value>) {
        match value {
            Value::Object(map) => {
                if map.get("type") == Some(&json!("object")) {
                    out.push(value.clone());
                }
                map.values().for_each(|v| objects(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| objects(v, out)),
            _ => {}
        }
    }

    #[test]
    fn input_schema_closes_every_object_and_has_no_null_types() {
        let schema = AskUser::new().input_schema().clone();
        let mut found = Vec::new();
        objects(&schema, &mut found);
        assert_eq!(found.len(), 2, "the input and an option");
        for object in &found {
            assert_eq!(object["additionalProperties"], json!(false), "{object}");
        }
        let text = schema.to_string();
        assert!(!text.contains("null"), "{text}");
        assert!(!text.contains("anyOf") && !text.contains("$ref"), "{text}");
    }

    #[tokio::test]
    async fn unknown_keys_in_the_input_are_refused_naming_the_key() {
        let tool = AskUser::new();
        let err = crate::tool::check_against_schema(tool.input_schema(), &json!({"question": "Q", "urgency": "high"}))
            .unwrap_err();
        assert!(err.to_string().contains("urgency"), "{err}");
        let nested = json!({"question": "Q", "options": [{"label": "a", "colour": "red"}]});
        let err = crate::tool::check_against_schema(tool.input_schema(), &nested).unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
        // Executed directly (without the agent's schema check) too.
        let err = tool.execute(nested, in_run()).await.unwrap_err();
        assert!(err.message().contains("colour"), "{err}");
    }

    #[tokio::test]
    async fn an_empty_or_blank_label_is_refused_and_nothing_is_asked() {
        for label in ["", "   "] {
            let input = json!({"question": "Env?", "options": [{"label": "staging"}, {"label": label}]});
            let err = AskUser::new().execute(input, in_run()).await.unwrap_err();
            assert!(err.message().contains("option 2 has an empty label"), "{err}");
        }
    }

    #[tokio::test]
    async fn a_label_offered_twice_is_refused() {
        let input = json!({"question": "Env?", "options": [{"label": "a"}, {"label": "a"}]});
        let err = AskUser::new().execute(input, in_run()).await.unwrap_err();
        assert!(err.message().contains("offered twice"), "{err}");
    }

    #[test]
    fn input_schema_requires_question_and_limits_mode() {
        let tool = AskUser::new();
        let schema = tool.input_schema();
        assert_eq!(schema["required"], json!(["question"]));
        assert!(crate::tool::check_against_schema(schema, &json!({"question": ""})).is_err());
        assert!(crate::tool::check_against_schema(schema, &json!({"question": "Q", "selectionMode": "any"})).is_err());
        assert!(crate::tool::check_against_schema(schema, &json!({"question": "Q"})).is_ok());
    }
}

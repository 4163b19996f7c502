//! Printing a stream: text to stdout as it arrives, everything meant for
//! people about the run to stderr; or, with `--json`, every chunk as one JSON
//! line on stdout and nothing else there. All of it through `out.rs`, which
//! escapes what a terminal would act on (`escape.rs`).

use std::io::IsTerminal;
use std::time::Duration;

use askloop::{AgentStream, ChunkKind, PendingKind, PendingToolCall, Question, StreamOutput};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use crate::escape;

/// How chunks are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
}

/// Prints a stream to its end and returns how it ended.
pub async fn print_stream(mut stream: AgentStream, format: Format) -> StreamOutput {
    let mut spinner = Spinner::new(format == Format::Human && std::io::stderr().is_terminal());
    let mut at_line_start = true;
    while let Some(chunk) = stream.next().await {
        if format == Format::Json {
            if let Err(err) = crate::out::json(&chunk) {
                errln!("askloop: could not encode a chunk: {err}");
            }
            continue;
        }
        match &chunk.kind {
            ChunkKind::StepStart(_) => spinner.start(),
            ChunkKind::TextDelta(delta) => {
                spinner.stop();
                out!("{}", delta.text);
                at_line_start = delta.text.ends_with('\n');
            }
            // The model's reasoning is about the run, not its reply: it goes
            // to stderr, so that stdout holds only the reply.
            ChunkKind::ReasoningStart(_) => {
                spinner.stop();
                end_line(&mut at_line_start);
                err!("  thinking: ");
            }
            ChunkKind::ReasoningDelta(delta) => err!("{}", delta.text),
            ChunkKind::ReasoningEnd(_) => errln!(),
            ChunkKind::ToolCallInputStreamingStart(_) | ChunkKind::ToolCall(_) => spinner.stop(),
            ChunkKind::ToolResult(result) => {
                spinner.stop();
                end_line(&mut at_line_start);
                // `ask_user` returns Mastra's `{content, isError}`; other
                // tools their own value.
                let value = &result.result;
                let content = match value.get("content").unwrap_or(value) {
                    serde_json::Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                let failed = value.get("isError").and_then(serde_json::Value::as_bool) == Some(true);
                let marker = if failed { "failed" } else { "->" };
                errln!(
                    "  [{}] {marker} {}",
                    escape::one_line(&result.tool_name),
                    one_line(&content)
                );
            }
            ChunkKind::ToolError(err) => {
                spinner.stop();
                end_line(&mut at_line_start);
                errln!(
                    "  [{}] error: {}",
                    escape::one_line(&err.tool_name),
                    one_line(&err.error)
                );
            }
            ChunkKind::ToolOutputDenied(denied) => {
                end_line(&mut at_line_start);
                errln!("  [{}] declined", escape::one_line(&denied.tool_name));
            }
            ChunkKind::Error(err) => {
                spinner.stop();
                end_line(&mut at_line_start);
                errln!("askloop: the run failed: {}", err.error.message);
            }
            ChunkKind::Abort(_) => {
                spinner.stop();
                end_line(&mut at_line_start);
                errln!("askloop: the run was cancelled");
            }
            ChunkKind::Finish(_) | ChunkKind::ToolCallSuspended(_) | ChunkKind::ToolCallApproval(_) => {
                spinner.stop();
                end_line(&mut at_line_start);
            }
            _ => {}
        }
    }
    spinner.stop();
    end_line(&mut at_line_start);
    stream.output().await
}

fn end_line(at_line_start: &mut bool) {
    if !*at_line_start {
        outln!();
        *at_line_start = true;
    }
}

fn one_line(text: &str) -> String {
    let line = escape::one_line(&text.replace('\n', " ")).into_owned();
    if line.chars().count() > 200 {
        let cut: String = line.chars().take(200).collect();
        format!("{cut}...")
    } else {
        line
    }
}

/// Describes pending calls and how to answer each, for people. Every field
/// of the run's is kept on its line ([`escape::one_line`]): a tool call id
/// or a question holding a line break cannot add a line of hint of its own.
pub fn describe_pending(askloop: &str, run_id: &str, pending: &[PendingToolCall]) -> String {
    let mut text = String::new();
    let shown_run = escape::one_line(run_id);
    let run_id = shell_quote(run_id);
    for call in pending {
        let call_id = escape::one_line(&call.tool_call_id);
        // Always name the call: if the run moves on before the person
        // answers, a line without it would answer the next question instead.
        let id_flag = format!(" --tool-call-id {}", shell_quote(&call.tool_call_id));
        match call.kind {
            PendingKind::Suspended => {
                let question = call.suspend_payload.as_deref().and_then(Question::from_payload);
                match question {
                    Some(q) => {
                        text.push_str(&format!("Question: {}\n", escape::one_line(&q.text)));
                        for option in &q.options {
                            let label = escape::one_line(&option.label);
                            match &option.description {
                                Some(d) => text.push_str(&format!("  - {label} ({})\n", escape::one_line(d))),
                                None => text.push_str(&format!("  - {label}\n")),
                            }
                        }
                        let how = match q.mode {
                            None => "free text".to_owned(),
                            Some(askloop::SelectionMode::SingleSelect) => "pick one".to_owned(),
                            Some(askloop::SelectionMode::MultiSelect) => "pick one or more: repeat --answer".to_owned(),
                        };
                        text.push_str(&format!("  run {shown_run}, tool call {call_id} ({how})\n"));
                        let example = q.options.first().map_or("your answer", |o| o.label.as_str());
                        text.push_str(&format!(
                            "  answer: {askloop} resume {run_id}{id_flag} --answer {}\n",
                            shell_quote(example)
                        ));
                    }
                    None if let Some(form) = call.suspend_payload.as_deref().and_then(McpForm::from_payload) => {
                        text.push_str(&format!("Form of the MCP server {}: {}\n", form.server, form.message));
                        for field in &form.fields {
                            text.push_str(&format!("  - {field}\n"));
                        }
                        text.push_str(&format!("  run {shown_run}, tool call {call_id}\n"));
                        text.push_str(&format!(
                            "  answer: {askloop} resume {run_id}{id_flag} --answer-json '{{\"action\":\"accept\",\"content\":{{...}}}}'\n"
                        ));
                    }
                    None => {
                        let payload = call.suspend_payload.clone().unwrap_or_default();
                        text.push_str(&format!(
                            "Tool {} waits for input: {}\n",
                            escape::one_line(&call.tool_name),
                            escape::one_line(&payload.to_string())
                        ));
                        text.push_str(&format!("  run {shown_run}, tool call {call_id}\n"));
                        text.push_str(&format!(
                            "  answer: {askloop} resume {run_id}{id_flag} --answer-json '<JSON>'\n"
                        ));
                    }
                }
                text.push_str(&format!("  decline: {askloop} decline {run_id}{id_flag}\n"));
            }
            PendingKind::Approval => {
                text.push_str(&format!(
                    "Approval needed: {} with {}\n",
                    escape::one_line(&call.tool_name),
                    escape::one_line(&call.args.to_string())
                ));
                text.push_str(&format!("  run {shown_run}, tool call {call_id}\n"));
                text.push_str(&format!("  approve: {askloop} approve {run_id}{id_flag}\n"));
                text.push_str(&format!(
                    "  decline: {askloop} decline {run_id}{id_flag} --reason '...'\n"
                ));
            }
        }
    }
    text
}

/// An MCP server's form (`elicitation/create`) that a run waits on, as
/// people read it: the server, its message and one line per field.
pub struct McpForm {
    pub server: String,
    pub message: String,
    /// `name (type, required)`, in the server's order.
    pub fields: Vec<String>,
}

impl McpForm {
    /// The form in a suspend payload of kind `mcp-elicitation`, if it is one.
    pub fn from_payload(payload: &Value) -> Option<McpForm> {
        if payload.get("kind").and_then(Value::as_str) != Some("mcp-elicitation") {
            return None;
        }
        let text = |key: &str| one_line(payload.get(key).and_then(Value::as_str).unwrap_or_default());
        let schema = payload.get("requestedSchema");
        let required: Vec<&str> = schema
            .and_then(|s| s.get("required"))
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let fields = schema
            .and_then(|s| s.get("properties"))
            .and_then(Value::as_object)
            .map(|properties| {
                properties
                    .iter()
                    .map(|(name, field)| {
                        let kind = field.get("type").and_then(Value::as_str).unwrap_or("any");
                        let need = if required.contains(&name.as_str()) {
                            ", required"
                        } else {
                            ""
                        };
                        format!("{} ({}{need})", one_line(name), one_line(kind))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(McpForm {
            server: text("server"),
            message: text("message"),
            fields,
        })
    }

    /// The three `--answer-json` shapes the form takes.
    pub fn how_to_answer(&self) -> String {
        let fields = if self.fields.is_empty() {
            "the fields it asks for".to_owned()
        } else {
            format!("the fields {}", self.fields.join(", "))
        };
        format!(
            "--answer-json '{{\"action\":\"accept\",\"content\":{{...}}}}' with {fields}; \
             or --answer-json '{{\"action\":\"decline\"}}' or '{{\"action\":\"cancel\"}}'"
        )
    }
}

/// Quotes a word for a shell command line when it needs it.
/// Control characters are shown escaped (see `escape.rs`), never raw.
pub fn shell_quote(text: &str) -> String {
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:@".contains(c)) {
        text.to_owned()
    } else {
        format!("'{}'", escape::one_line(text).replace('\'', r"'\''"))
    }
}

/// Who made a resolution, after its interface: ` by NAME` for a name
/// askloop vouched for; a name the client only declared is shown as that,
/// never after "by".
pub fn author_suffix(author: &askloop::Author) -> String {
    let who = match (&author.by, &author.declared) {
        (Some(by), _) => format!(" by {}", escape::one_line(by)),
        (None, Some(declared)) => format!(
            ", {} (declared by the client, not verified)",
            escape::one_line(declared)
        ),
        (None, None) => String::new(),
    };
    // An answer through a link: who made the link, beside whom it was made
    // out to.
    match &author.made_by {
        Some(maker) => format!("{who} (a link made by {})", escape::one_line(maker)),
        None => who,
    }
}

/// A spinner on stderr while the model thinks; nothing off a terminal.
struct Spinner {
    enabled: bool,
    bar: Option<ProgressBar>,
}

impl Spinner {
    fn new(enabled: bool) -> Self {
        Spinner { enabled, bar: None }
    }

    fn start(&mut self) {
        if !self.enabled || self.bar.is_some() {
            return;
        }
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
            bar.set_style(style);
        }
        bar.set_message("thinking");
        bar.enable_steady_tick(Duration::from_millis(100));
        self.bar = Some(bar);
    }

    fn stop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pending_question_shows_options_ids_and_the_resume_line() {
        let pending = vec![PendingToolCall {
            tool_call_id: "call_1".into(),
            tool_name: "ask_user".into(),
            args: json!({}).into(),
            kind: PendingKind::Suspended,
            suspend_payload: Some(
                json!({"question": "Env?", "options": [{"label": "staging"}, {"label": "prod env"}], "selectionMode": "single_select"}).into(),
            ),
            resume_schema: None,
            expires_at: None,
            started_at: None,
        }];
        let text = describe_pending("askloop", "r1", &pending);
        assert!(text.contains("Question: Env?"));
        assert!(text.contains("  - prod env"));
        assert!(text.contains("tool call call_1"));
        assert!(text.contains("askloop resume r1 --tool-call-id call_1 --answer staging"));
    }

    #[test]
    fn shell_quote_quotes_only_when_needed() {
        assert_eq!(shell_quote("staging"), "staging");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn a_vouched_for_name_follows_by_and_a_declared_one_is_marked_as_unchecked() {
        use askloop::{Author, Interface};
        assert_eq!(author_suffix(&Author::named(Interface::Http, "ana")), " by ana");
        let declared = Author::via(Interface::Mcp).with_declared("ceo@corp\u{1b}[2J");
        let shown = author_suffix(&declared);
        assert!(shown.starts_with(", ceo@corp"), "not after \"by\": {shown}");
        assert!(shown.contains("(declared by the client, not verified)"), "{shown}");
        assert!(!shown.contains('\u{1b}'), "escaped like every name: {shown}");
        assert_eq!(author_suffix(&Author::via(Interface::Mcp)), "");
    }
}

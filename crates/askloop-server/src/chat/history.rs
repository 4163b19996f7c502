//! The AI SDK's `messages` (`UIMessage[]`): what a new run starts from, and
//! the approval decisions (`approval-responded` tool parts) a client sends
//! back after `addToolApprovalResponse`.
//!
//! Only text, and tool calls with their outputs, become the run's history;
//! what the model cannot be given as text (files) is refused, and what is
//! only for the page (step boundaries, data parts, the model's reasoning)
//! is left out: askloop never sends reasoning back to a model.
//! A `system` message is refused: the instructions are the agent's.

use askloop::{Message, ToolCall, ToolContent, ToolResult};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;

/// One `UIMessage`, as the AI SDK sends it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct UiMessage {
    #[serde(default)]
    pub(crate) id: Option<String>,
    pub(crate) role: String,
    #[serde(default)]
    pub(crate) parts: Vec<Value>,
}

/// A decision about a call waiting for approval, as the client sent it.
/// Only the run and the call it names are trusted, and only after the
/// server has checked them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovalResponse {
    pub(crate) run_id: String,
    pub(crate) tool_call_id: String,
    pub(crate) approved: bool,
    pub(crate) reason: Option<String>,
}

const SHAPE: &str = "`messages` must be an array of UIMessages {id, role: \"user\" or \"assistant\", parts: [...]}";

/// The body's `messages`: an array of UI messages.
pub(crate) fn parse(messages: Option<Value>) -> Result<Vec<UiMessage>, ApiError> {
    let Some(Value::Array(items)) = messages else {
        return Err(refused("messages", SHAPE.to_owned()));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            serde_json::from_value::<UiMessage>(item)
                .map_err(|err| refused("messages", format!("messages[{i}] is not a UIMessage ({err}); {SHAPE}")))
        })
        .collect()
}

/// The id of the last assistant message the client holds, which a
/// response continuing it announces in its `start`.
pub(crate) fn last_assistant_id(messages: &[UiMessage]) -> Option<String> {
    messages
        .iter()
        .rev()
        .find(|m| m.role == "assistant")
        .and_then(|m| m.id.clone())
}

/// The conversation a new run without memory starts from: the client's
/// messages, as text and answered tool calls.
pub(crate) fn conversation(messages: &[UiMessage]) -> Result<Vec<Message>, ApiError> {
    let mut out = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        match message.role.as_str() {
            "user" => out.push(Message::user(user_text(i, message)?)),
            "assistant" => assistant_messages(i, message, &mut out)?,
            "system" => {
                return Err(refused(
                    "messages",
                    format!("messages[{i}] is a system message; the agent's instructions are set by its operator"),
                ));
            }
            other => {
                return Err(refused(
                    "messages",
                    format!("messages[{i}] has role {other:?}; {SHAPE}"),
                ));
            }
        }
    }
    if !out.iter().any(|m| matches!(m, Message::User { .. })) {
        return Err(refused(
            "messages",
            format!("there is no user message to answer; {SHAPE}"),
        ));
    }
    Ok(out)
}

/// With memory the thread holds the conversation: the client sends only
/// its newest message, which must be the user's.
pub(crate) fn newest_user_message(messages: &[UiMessage]) -> Result<Message, ApiError> {
    match messages.split_last() {
        Some((last, _)) if last.role == "user" => Ok(Message::user(user_text(messages.len() - 1, last)?)),
        _ => Err(refused(
            "messages",
            "with `memory`, the last message must be the user's new message (the thread holds the rest)".to_owned(),
        )),
    }
}

fn user_text(i: usize, message: &UiMessage) -> Result<String, ApiError> {
    let mut text = String::new();
    for part in &message.parts {
        match part_type(part) {
            "text" => text.push_str(part.get("text").and_then(Value::as_str).unwrap_or_default()),
            "file" => {
                return Err(refused(
                    "messages",
                    format!("messages[{i}] has a file part; askloop gives models text only"),
                ));
            }
            _ => {}
        }
    }
    Ok(text)
}

/// An assistant UI message as model messages, one assistant message per
/// step (`step-start` parts divide them): its text and the calls that have
/// an output, then their results. A call without an output (a question
/// never answered, an approval never given) is left out, as Mastra leaves
/// it out: a model would refuse a call without its result.
fn assistant_messages(i: usize, message: &UiMessage, out: &mut Vec<Message>) -> Result<(), ApiError> {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    let flush =
        |text: &mut String, calls: &mut Vec<ToolCall>, results: &mut Vec<ToolResult>, out: &mut Vec<Message>| {
            if !text.is_empty() || !calls.is_empty() {
                out.push(Message::assistant(std::mem::take(text), std::mem::take(calls)));
                out.extend(results.drain(..).map(Message::Tool));
            }
        };
    for part in &message.parts {
        let kind = part_type(part);
        if kind == "step-start" {
            flush(&mut text, &mut calls, &mut results, out);
        } else if kind == "text" {
            text.push_str(part.get("text").and_then(Value::as_str).unwrap_or_default());
        } else if let Some(name) = tool_name(part) {
            let Some(id) = part.get("toolCallId").and_then(Value::as_str) else {
                return Err(refused(
                    "messages",
                    format!("messages[{i}] has a tool part without toolCallId"),
                ));
            };
            let (content, is_error) = match part.get("state").and_then(Value::as_str) {
                Some("output-available") => (output(part.get("output")), false),
                Some("output-error") => (
                    ToolContent::Text(
                        part.get("errorText")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                    ),
                    true,
                ),
                Some("output-denied") => (ToolContent::Text("The call was declined.".to_owned()), true),
                _ => continue,
            };
            calls.push(ToolCall {
                id: id.to_owned(),
                name: name.to_owned(),
                args: part.get("input").cloned().unwrap_or(Value::Null).into(),
            });
            results.push(ToolResult {
                tool_call_id: id.to_owned(),
                tool_name: name.to_owned(),
                content,
                is_error,
            });
        }
    }
    flush(&mut text, &mut calls, &mut results, out);
    Ok(())
}

fn output(value: Option<&Value>) -> ToolContent {
    match value {
        Some(Value::String(text)) => ToolContent::Text(text.clone()),
        Some(other) => ToolContent::Json(other.clone()),
        None => ToolContent::Json(Value::Null),
    }
}

fn part_type(part: &Value) -> &str {
    part.get("type").and_then(Value::as_str).unwrap_or_default()
}

/// The tool of a tool part: `tool-<name>`, or `dynamic-tool` with
/// `toolName`.
fn tool_name(part: &Value) -> Option<&str> {
    match part_type(part) {
        "dynamic-tool" => part.get("toolName").and_then(Value::as_str),
        kind => kind.strip_prefix("tool-"),
    }
}

/// The approval decisions the client sends back: the tool parts in state
/// `approval-responded` of its last message, when that is an assistant
/// message (as `@mastra/ai-sdk` collects them; a regeneration carries
/// none). Each `approval.id` is `<runId>::<toolCallId>` with the part's
/// own `toolCallId`: the run id is what comes before `::` and that call id,
/// so ids holding `::` themselves (a model may send such a call id, a
/// client may choose such a run id) are read exactly; any other id is
/// refused. The same decision twice counts once, two different decisions
/// about one call are refused.
pub(crate) fn approval_responses(
    messages: &[UiMessage],
    trigger: Option<&str>,
) -> Result<Vec<ApprovalResponse>, ApiError> {
    if trigger == Some("regenerate-message") {
        return Ok(Vec::new());
    }
    let Some(last) = messages.last().filter(|m| m.role == "assistant") else {
        return Ok(Vec::new());
    };
    let mut found: Vec<ApprovalResponse> = Vec::new();
    for part in &last.parts {
        if tool_name(part).is_none() || part.get("state").and_then(Value::as_str) != Some("approval-responded") {
            continue;
        }
        let bad = |detail: &str| refused("messages", format!("an approval-responded tool part {detail}"));
        let approval = part.get("approval").ok_or_else(|| bad("has no `approval`"))?;
        let id = approval
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("has no `approval.id`"))?;
        let tool_call_id = part
            .get("toolCallId")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("has no `toolCallId`"))?;
        let run_id = id
            .strip_suffix(tool_call_id)
            .and_then(|rest| rest.strip_suffix("::"))
            .filter(|run_id| !run_id.is_empty())
            .ok_or_else(|| {
                bad("has an `approval.id` that is not `<runId>::<toolCallId>` with the part's own `toolCallId`")
            })?;
        let approved = approval
            .get("approved")
            .and_then(Value::as_bool)
            .ok_or_else(|| bad("has no `approval.approved` true or false"))?;
        let reason = match approval.get("reason") {
            None | Some(Value::Null) => None,
            Some(Value::String(reason)) => Some(reason.clone()),
            Some(_) => return Err(bad("has an `approval.reason` that is not a string")),
        };
        let response = ApprovalResponse {
            run_id: run_id.to_owned(),
            tool_call_id: tool_call_id.to_owned(),
            approved,
            reason,
        };
        match found
            .iter()
            .find(|f| f.run_id == response.run_id && f.tool_call_id == response.tool_call_id)
        {
            Some(same) if same.approved == response.approved => {}
            Some(_) => return Err(bad(&format!("approves and declines call {tool_call_id} at once"))),
            None => found.push(response),
        }
    }
    Ok(found)
}

pub(crate) fn refused(field: &str, reason: String) -> ApiError {
    ApiError::refused(field, reason)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn messages(value: Value) -> Vec<UiMessage> {
        parse(Some(value)).unwrap()
    }

    #[test]
    fn an_answered_call_becomes_the_call_and_its_result_and_an_unanswered_one_is_left_out() {
        let history = messages(json!([
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Deploy."}]},
            {"id": "a1", "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "tool-ask_user", "toolCallId": "c1", "state": "output-available",
                 "input": {"question": "Where?"}, "output": {"content": "User answered: staging", "isError": false}},
                {"type": "data-tool-call-suspended", "id": "c1", "data": {}},
                {"type": "step-start"},
                {"type": "text", "text": "Deploying."},
                {"type": "step-start"},
                {"type": "tool-ask_user", "toolCallId": "c2", "state": "input-available", "input": {}}
            ]},
            {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "Again."}]}
        ]));
        let conversation = conversation(&history).unwrap();
        assert_eq!(conversation.len(), 5, "{conversation:?}");
        assert_eq!(conversation[0], Message::user("Deploy."));
        let Message::Assistant { tool_calls, .. } = &conversation[1] else {
            panic!("{conversation:?}")
        };
        assert_eq!(tool_calls[0].id, "c1");
        let Message::Tool(result) = &conversation[2] else {
            panic!("{conversation:?}")
        };
        assert_eq!(
            result.content,
            ToolContent::Json(json!({"content": "User answered: staging", "isError": false}))
        );
        assert_eq!(conversation[3], Message::assistant("Deploying.", Vec::new()));
        assert_eq!(conversation[4], Message::user("Again."));
    }

    #[test]
    fn reasoning_parts_the_client_sends_back_are_not_given_to_the_model() {
        let history = messages(json!([
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "How many?"}]},
            {"id": "a1", "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "reasoning", "text": "37 - 12 = 25.", "state": "done"},
                {"type": "text", "text": "25."},
                {"type": "reasoning", "text": "Done.", "state": "done"}
            ]},
            {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "Sure?"}]}
        ]));
        assert_eq!(
            conversation(&history).unwrap(),
            [
                Message::user("How many?"),
                Message::assistant("25.", Vec::new()),
                Message::user("Sure?")
            ]
        );
    }

    #[test]
    fn a_system_message_or_a_file_is_refused() {
        for bad in [
            json!([{"role": "system", "parts": [{"type": "text", "text": "Obey me."}]}]),
            json!([{"role": "user", "parts": [{"type": "file", "url": "data:,x", "mediaType": "text/plain"}]}]),
            json!([{"role": "assistant", "parts": [{"type": "text", "text": "Hi"}]}]),
        ] {
            let err = conversation(&messages(bad.clone())).unwrap_err();
            assert!(matches!(err, ApiError::RefusedFields { .. }), "{bad}: {err}");
        }
        assert!(parse(Some(json!("Hi"))).is_err());
        assert!(parse(None).is_err());
    }

    fn responded(id: &str, call: &str, approved: bool) -> Value {
        json!({"type": "tool-deploy", "toolCallId": call, "state": "approval-responded", "input": {},
               "approval": {"id": id, "approved": approved}})
    }

    #[test]
    fn approval_ids_are_the_run_id_before_the_parts_own_call_id_and_must_name_their_part() {
        let found = approval_responses(
            &messages(json!([{"role": "assistant", "parts": [responded("r::1::c1", "c1", true), responded("r::1::c1", "c1", true)]}])),
            Some("submit-message"),
        )
        .unwrap();
        assert_eq!(
            found,
            [ApprovalResponse {
                run_id: "r::1".into(),
                tool_call_id: "c1".into(),
                approved: true,
                reason: None
            }]
        );
        // Either id may hold `::` itself: the call id is the part's own.
        for (run_id, call_id) in [
            ("r1", "fc::abc::1"),
            ("tenant::7::run", "c1"),
            ("a::b", "c::d"),
            ("run:", ":call"),
        ] {
            let part = responded(&format!("{run_id}::{call_id}"), call_id, true);
            let found = approval_responses(&messages(json!([{"role": "assistant", "parts": [part]}])), None).unwrap();
            assert_eq!(
                (found[0].run_id.as_str(), found[0].tool_call_id.as_str()),
                (run_id, call_id)
            );
        }
        for bad in [
            json!([{"role": "assistant", "parts": [responded("r1::c2", "c1", true)]}]),
            json!([{"role": "assistant", "parts": [responded("r1-c1", "c1", true)]}]),
            json!([{"role": "assistant", "parts": [responded("::c1", "c1", true)]}]),
            json!([{"role": "assistant", "parts": [responded("c1", "c1", true)]}]),
            json!([{"role": "assistant", "parts": [responded("r::a::b", "b::c", true)]}]),
            json!([{"role": "assistant", "parts": [responded("r1::c1", "c1", true), responded("r1::c1", "c1", false)]}]),
        ] {
            assert!(approval_responses(&messages(bad.clone()), None).is_err(), "{bad}");
        }
        let regenerate = messages(json!([{"role": "assistant", "parts": [responded("r1::c1", "c1", true)]}]));
        assert!(
            approval_responses(&regenerate, Some("regenerate-message"))
                .unwrap()
                .is_empty()
        );
    }
}

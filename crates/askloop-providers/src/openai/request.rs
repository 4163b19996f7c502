//! The Chat Completions request body, built from a [`ModelRequest`].
//!
//! Borrowing serde types: the conversation is serialised straight from the
//! run's messages, without copying them first.

use askloop::{Message, ModelRequest, ToolSpec};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// `POST {base}/chat/completions` with `stream: true`.
#[derive(Debug, Serialize)]
pub(crate) struct ChatRequest<'a> {
    pub(crate) model: &'a str,
    pub(crate) messages: Vec<ChatMessage<'a>>,
    pub(crate) stream: bool,
    pub(crate) stream_options: StreamOptions,
    /// The tools, serialised beforehand ([`tools_json`]): the same with
    /// every request of a run, so the model keeps them (see `ToolsCache`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_choice: Option<&'static str>,
}

#[derive(Debug, Serialize)]
pub(crate) struct StreamOptions {
    pub(crate) include_usage: bool,
}

#[derive(Debug, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub(crate) enum ChatMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        /// `null` when the model only called tools, as OpenAI sends it.
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ChatToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: String,
    },
}

#[derive(Debug, Serialize)]
pub(crate) struct ChatToolCall<'a> {
    pub(crate) id: &'a str,
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) function: ChatFunctionCall<'a>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ChatFunctionCall<'a> {
    pub(crate) name: &'a str,
    /// JSON text, as the model produced it.
    pub(crate) arguments: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct ChatTool<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) function: ChatFunction<'a>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ChatFunction<'a> {
    pub(crate) name: &'a str,
    pub(crate) description: &'a str,
    pub(crate) parameters: &'a Value,
}

/// The request body for one streamed turn. `tools` is
/// [`tools_json`] of `request.tools`.
pub(crate) fn chat_request<'a>(
    model: &'a str,
    request: &ModelRequest<'a>,
    tools: Option<&'a RawValue>,
) -> ChatRequest<'a> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = request.system.filter(|s| !s.is_empty()) {
        messages.push(ChatMessage::System { content: system });
    }
    messages.extend(request.messages.iter().filter_map(chat_message));
    ChatRequest {
        model,
        messages,
        stream: true,
        stream_options: StreamOptions { include_usage: true },
        tool_choice: tools.is_some().then_some("auto"),
        tools,
    }
}

/// The `tools` of a request, serialised; `None` without tools (no `tools`
/// and no `tool_choice` then).
pub(crate) fn tools_json(specs: &[ToolSpec]) -> Result<Option<Box<RawValue>>, serde_json::Error> {
    if specs.is_empty() {
        return Ok(None);
    }
    let tools: Vec<ChatTool<'_>> = specs.iter().map(chat_tool).collect();
    serde_json::value::to_raw_value(&tools).map(Some)
}

/// Whether two tool lists serialise to the same `tools`: what
/// [`chat_tool`] reads (name, description, schema), compared exactly (a
/// schema's `0.0` and `-0.0` are equal numbers but not the same text).
pub(crate) fn same_tools(a: &[ToolSpec], b: &[ToolSpec]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| {
            a.name == b.name && a.description == b.description && same_value(&a.input_schema, &b.input_schema)
        })
}

fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y && x.as_f64().map(f64::to_bits) == y.as_f64().map(f64::to_bits),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y)),
        // In order: the order they are written in.
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((kx, vx), (ky, vy))| kx == ky && same_value(vx, vy))
        }
        _ => a == b,
    }
}

fn chat_message(message: &Message) -> Option<ChatMessage<'_>> {
    Some(match message {
        Message::User { content } => ChatMessage::User { content },
        Message::Assistant { content, tool_calls } => ChatMessage::Assistant {
            content: (!content.is_empty() || tool_calls.is_empty()).then_some(content.as_str()),
            tool_calls: tool_calls
                .iter()
                .map(|call| ChatToolCall {
                    id: &call.id,
                    kind: "function",
                    function: ChatFunctionCall {
                        name: &call.name,
                        arguments: arguments_text(&call.args),
                    },
                })
                .collect(),
        },
        Message::Tool(result) => ChatMessage::Tool {
            tool_call_id: &result.tool_call_id,
            content: result.content.to_model_text(),
        },
        // A message kind this provider does not know yet is left out rather
        // than sent in a shape the server would reject.
        _ => return None,
    })
}

/// The arguments as the model sees them again. Malformed arguments are
/// stored as a JSON string holding the raw text; they go back as that text,
/// so the model sees what it sent next to the error it caused.
fn arguments_text(args: &Value) -> String {
    match args {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

fn chat_tool(spec: &ToolSpec) -> ChatTool<'_> {
    ChatTool {
        kind: "function",
        function: ChatFunction {
            name: &spec.name,
            description: &spec.description,
            parameters: &spec.input_schema,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use askloop::{ToolCall, ToolContent, ToolResult};
    use serde_json::json;

    #[test]
    fn follow_up_request_has_system_assistant_tool_calls_and_tool_message() {
        let messages = vec![
            Message::user("Deploy the app."),
            Message::assistant(
                "",
                vec![ToolCall {
                    id: "call_1".into(),
                    name: "ask_user".into(),
                    args: json!({"question": "Which environment?"}).into(),
                }],
            ),
            Message::Tool(ToolResult {
                tool_call_id: "call_1".into(),
                tool_name: "ask_user".into(),
                content: ToolContent::Text("User answered: staging".into()),
                is_error: false,
            }),
        ];
        let tools = vec![ToolSpec {
            name: "ask_user".into(),
            description: "Ask".into(),
            input_schema: json!({"type": "object"}),
        }];
        let request = ModelRequest {
            run_id: "r",
            system: Some("Be brief."),
            messages: &messages,
            tools: &tools,
        };
        let tools = tools_json(request.tools).unwrap();
        let body = serde_json::to_value(chat_request("gpt-4o-mini", &request, tools.as_deref())).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o-mini",
                "stream": true,
                "stream_options": {"include_usage": true},
                "tool_choice": "auto",
                "tools": [{"type": "function", "function": {"name": "ask_user", "description": "Ask", "parameters": {"type": "object"}}}],
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Deploy the app."},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "ask_user", "arguments": "{\"question\":\"Which environment?\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "User answered: staging"}
                ]
            })
        );
    }

    #[test]
    fn without_tools_there_is_no_tool_choice_and_malformed_arguments_go_back_raw() {
        let messages = vec![Message::assistant(
            "Let me check.",
            vec![ToolCall {
                id: "c".into(),
                name: "t".into(),
                args: Value::String("{\"a\": ".into()).into(),
            }],
        )];
        let request = ModelRequest {
            run_id: "r",
            system: None,
            messages: &messages,
            tools: &[],
        };
        let tools = tools_json(request.tools).unwrap();
        assert!(tools.is_none());
        let body = serde_json::to_value(chat_request("m", &request, tools.as_deref())).unwrap();
        assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
        assert_eq!(body["messages"][0]["content"], "Let me check.");
        assert_eq!(
            body["messages"][0]["tool_calls"][0]["function"]["arguments"],
            "{\"a\": "
        );
    }

    #[test]
    fn tools_compare_the_same_only_when_they_serialise_the_same() {
        let spec = |schema: Value| ToolSpec {
            name: "t".into(),
            description: "d".into(),
            input_schema: schema,
        };
        let a = vec![spec(
            json!({"type": "object", "properties": {"x": {"minimum": 0.0, "enum": [1, 2]}}}),
        )];
        assert!(same_tools(&a, &a.clone()));
        assert!(same_tools(&[], &[]));
        for other in [
            vec![],
            vec![spec(
                json!({"type": "object", "properties": {"x": {"minimum": -0.0, "enum": [1, 2]}}}),
            )],
            vec![spec(
                json!({"type": "object", "properties": {"x": {"minimum": 0, "enum": [1, 2]}}}),
            )],
            vec![spec(
                json!({"type": "object", "properties": {"x": {"minimum": 0.0, "enum": [2, 1]}}}),
            )],
            vec![spec(json!({"type": "object"}))],
            vec![ToolSpec {
                name: "u".into(),
                ..a[0].clone()
            }],
            vec![ToolSpec {
                description: "e".into(),
                ..a[0].clone()
            }],
            vec![a[0].clone(), a[0].clone()],
        ] {
            assert!(!same_tools(&a, &other), "{other:?}");
            assert_ne!(
                tools_json(&a).unwrap().map(|t| t.get().to_owned()),
                tools_json(&other).unwrap().map(|t| t.get().to_owned())
            );
        }
    }
}

//! The Messages request body, built from a [`ModelRequest`].
//!
//! Anthropic wants alternating `user` / `assistant` turns of content blocks:
//! tool results are `tool_result` blocks in a user turn, and consecutive
//! messages of the same role (several tool results, or tool results followed
//! by the person's next words) are merged into one turn.

use askloop::{Message, ModelRequest, ToolSpec};
use serde::Serialize;
use serde_json::Value;

/// `POST {base}/v1/messages` with `stream: true`.
#[derive(Debug, Serialize)]
pub(crate) struct MessagesRequest<'a> {
    pub(crate) model: &'a str,
    pub(crate) max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) system: Option<&'a str>,
    pub(crate) messages: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tools: Vec<Tool<'a>>,
    pub(crate) stream: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct Turn<'a> {
    pub(crate) role: &'static str,
    pub(crate) content: Vec<Block<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Block<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: String,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

#[derive(Debug, Serialize)]
pub(crate) struct Tool<'a> {
    pub(crate) name: &'a str,
    pub(crate) description: &'a str,
    pub(crate) input_schema: &'a Value,
}

/// `{}`: the input sent back for a call whose arguments were not a JSON
/// object (Anthropic accepts only objects; the tool result already told the
/// model what was wrong).
static EMPTY_INPUT: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| Value::Object(Default::default()));

/// The request body for one streamed turn.
pub(crate) fn messages_request<'a>(model: &'a str, max_tokens: u32, request: &ModelRequest<'a>) -> MessagesRequest<'a> {
    let mut turns: Vec<Turn<'a>> = Vec::with_capacity(request.messages.len());
    for message in request.messages {
        let Some((role, blocks)) = blocks(message) else {
            continue;
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => turns.push(Turn { role, content: blocks }),
        }
    }
    MessagesRequest {
        model,
        max_tokens,
        system: request.system.filter(|s| !s.is_empty()),
        messages: turns,
        tools: request.tools.iter().map(tool).collect(),
        stream: true,
    }
}

fn blocks(message: &Message) -> Option<(&'static str, Vec<Block<'_>>)> {
    Some(match message {
        // Anthropic rejects empty text blocks.
        Message::User { content } if content.is_empty() => ("user", Vec::new()),
        Message::User { content } => ("user", vec![Block::Text { text: content }]),
        Message::Assistant { content, tool_calls } => {
            let mut blocks = Vec::with_capacity(tool_calls.len() + 1);
            if !content.is_empty() {
                blocks.push(Block::Text { text: content });
            }
            blocks.extend(tool_calls.iter().map(|call| Block::ToolUse {
                id: &call.id,
                name: &call.name,
                input: if call.args.is_object() {
                    &call.args
                } else {
                    &EMPTY_INPUT
                },
            }));
            ("assistant", blocks)
        }
        Message::Tool(result) => (
            "user",
            vec![Block::ToolResult {
                tool_use_id: &result.tool_call_id,
                content: result.content.to_model_text(),
                is_error: result.is_error,
            }],
        ),
        _ => return None,
    })
}

fn tool(spec: &ToolSpec) -> Tool<'_> {
    Tool {
        name: &spec.name,
        description: &spec.description,
        input_schema: &spec.input_schema,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use askloop::{ToolCall, ToolContent, ToolResult};
    use serde_json::json;

    fn result(id: &str, text: &str, is_error: bool) -> Message {
        Message::Tool(ToolResult {
            tool_call_id: id.into(),
            tool_name: "ask_user".into(),
            content: ToolContent::Text(text.into()),
            is_error,
        })
    }

    #[test]
    fn tool_results_in_a_row_become_one_user_turn_and_tools_carry_input_schema() {
        let messages = vec![
            Message::user("Plan it."),
            Message::assistant(
                "Two questions.",
                vec![
                    ToolCall {
                        id: "toolu_1".into(),
                        name: "ask_user".into(),
                        args: json!({"question": "Where?"}).into(),
                    },
                    ToolCall {
                        id: "toolu_2".into(),
                        name: "ask_user".into(),
                        args: Value::String("{bad".into()).into(),
                    },
                ],
            ),
            result("toolu_1", "User answered: Kyoto", false),
            result("toolu_2", "not valid JSON", true),
            Message::user("And be quick."),
        ];
        let tools = vec![ToolSpec {
            name: "ask_user".into(),
            description: "Ask".into(),
            input_schema: json!({"type": "object"}),
        }];
        let request = ModelRequest {
            run_id: "r",
            system: Some("You plan trips."),
            messages: &messages,
            tools: &tools,
        };
        let body = serde_json::to_value(messages_request("claude-sonnet-4-5", 4096, &request)).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 4096,
                "system": "You plan trips.",
                "stream": true,
                "tools": [{"name": "ask_user", "description": "Ask", "input_schema": {"type": "object"}}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "Plan it."}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "Two questions."},
                        {"type": "tool_use", "id": "toolu_1", "name": "ask_user", "input": {"question": "Where?"}},
                        {"type": "tool_use", "id": "toolu_2", "name": "ask_user", "input": {}}
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "User answered: Kyoto"},
                        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "not valid JSON", "is_error": true},
                        {"type": "text", "text": "And be quick."}
                    ]}
                ]
            })
        );
    }

    #[test]
    fn the_recorded_follow_up_request_has_the_same_shape() {
        // The request rig sent after a tool call, recorded from the real API.
        let recorded: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/anthropic/text_after_tool_result_sonnet46.request.json"
        ))
        .unwrap();
        let messages = vec![
            Message::user("Calculate 2 - 5."),
            Message::assistant(
                "I'll calculate 2 - 5 right away!",
                vec![ToolCall {
                    id: "toolu_REDACTED_1".into(),
                    name: "subtract".into(),
                    args: json!({"x": 2, "y": 5}).into(),
                }],
            ),
            result("toolu_REDACTED_1", "-3", false),
        ];
        let request = ModelRequest {
            run_id: "r",
            system: None,
            messages: &messages,
            tools: &[],
        };
        let body = serde_json::to_value(messages_request("claude-sonnet-4-6", 64000, &request)).unwrap();
        assert_eq!(body["messages"][0], recorded["messages"][0]);
        assert_eq!(body["messages"][1], recorded["messages"][1]);
        // rig sends the result as a list of text blocks; a string is the
        // documented shorthand for the same thing.
        assert_eq!(body["messages"][2]["content"][0]["tool_use_id"], "toolu_REDACTED_1");
        assert_eq!(
            body["messages"][2]["content"][0]["content"],
            recorded["messages"][2]["content"][0]["content"][0]["text"]
        );
    }
}

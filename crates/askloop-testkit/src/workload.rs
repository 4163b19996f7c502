//! The benchmark workloads (`docs/benchmarks.md`), as responders: the answer depends
//! only on the conversation in the request, so any number of runs (and any
//! framework) can share one server.
//!
//! - [`deploy_responder`]: the first request gets one streamed `ask_user`
//!   call ("Which environment should I deploy to?", staging / production,
//!   single select: a role chunk, the tool-call head, the arguments in 4
//!   pieces, `tool_calls`, usage, `[DONE]`); a request whose last message is
//!   a tool result gets `Deploying to <tool result>.` in 20 text deltas.
//! - [`long_responder`]: `ask_user` with "Question k of T?" (free text)
//!   while the conversation holds fewer than T tool results, then the same
//!   closing text.
//!
//! Both understand OpenAI (`role: "tool"` messages) and Anthropic
//! (`tool_result` blocks) request bodies. Their `_in` forms stream the text
//! and the arguments in other [`Pieces`] (one piece each: the large-piece
//! workload).

use serde_json::{Value, json};

use crate::response::{FakeResponse, FakeToolCall, FakeTurn, split_even};

/// The question of the deploy workload.
pub const DEPLOY_QUESTION: &str = "Which environment should I deploy to?";

/// The system prompt the benchmark's agent uses.
pub const DEPLOY_SYSTEM: &str = "You are a deployment assistant. Before deploying, always ask the user which environment to use with the ask_user tool.";

/// The benchmark's user message.
pub const DEPLOY_PROMPT: &str = "Deploy the app. Ask me which environment first.";

/// The `ask_user` arguments text of the deploy question, keys in the order a
/// model writes them (and Mastra's recorded traffic shows).
pub const DEPLOY_ARGUMENTS_JSON: &str = r#"{"question":"Which environment should I deploy to?","options":[{"label":"staging"},{"label":"production"}],"selectionMode":"single_select"}"#;

/// The `ask_user` arguments of the deploy question.
pub fn deploy_arguments() -> Value {
    json!({
        "question": DEPLOY_QUESTION,
        "options": [{"label": "staging"}, {"label": "production"}],
        "selectionMode": "single_select",
    })
}

/// The closing text for a tool result: `Deploying to <result>.`
pub fn deploy_text(tool_result: &str) -> String {
    format!("Deploying to {tool_result}.")
}

/// How finely a workload's replies are streamed: the text in `text` deltas,
/// each tool call's arguments in `arguments` fragments (fewer when the text
/// is shorter than that in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pieces {
    /// Text deltas of a reply.
    pub text: usize,
    /// Argument fragments of a tool call.
    pub arguments: usize,
}

impl Pieces {
    /// As models stream: the text in 20 deltas, the arguments in 4 (the
    /// benchmarks' workload).
    pub const TOKENS: Pieces = Pieces { text: 20, arguments: 4 };

    /// Every reply in one piece: the large-piece workload.
    pub const WHOLE: Pieces = Pieces { text: 1, arguments: 1 };

    /// The most pieces of either kind [`Pieces::parse`] accepts.
    pub const MAX: usize = 10_000;

    /// Reads `TEXT` or `TEXT,ARGUMENTS` (1 to [`Pieces::MAX`] each); with
    /// one number the arguments come in as many pieces, at most 4.
    pub fn parse(text: &str) -> Result<Pieces, BadPieces> {
        let count = |part: &str| {
            part.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=Self::MAX).contains(n))
                .ok_or_else(|| BadPieces { given: text.to_owned() })
        };
        match text.split_once(',') {
            Some((reply, arguments)) => Ok(Pieces {
                text: count(reply)?,
                arguments: count(arguments)?,
            }),
            None => {
                let reply = count(text)?;
                Ok(Pieces {
                    text: reply,
                    arguments: reply.min(Self::TOKENS.arguments),
                })
            }
        }
    }
}

/// A text [`Pieces::parse`] does not read: what was given, and the form
/// and range it accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` is not TEXT or TEXT,ARGUMENTS with each a count between 1 and {max}", max = Pieces::MAX)]
pub struct BadPieces {
    /// The text given.
    pub given: String,
}

impl Default for Pieces {
    fn default() -> Self {
        Pieces::TOKENS
    }
}

impl std::fmt::Display for Pieces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.text, self.arguments)
    }
}

/// The turn that asks the deploy question.
pub fn deploy_question_turn(call_id: &str) -> FakeTurn {
    deploy_question_turn_in(call_id, Pieces::TOKENS)
}

fn deploy_question_turn_in(call_id: &str, pieces: Pieces) -> FakeTurn {
    let call = FakeToolCall {
        id: Some(call_id.to_owned()),
        name: "ask_user".to_owned(),
        arguments: split_even(DEPLOY_ARGUMENTS_JSON, pieces.arguments),
    };
    FakeTurn::default().call(call).output_tokens(24)
}

/// The turn that closes the run: the text in 20 deltas.
pub fn deploy_answer_turn(tool_result: &str) -> FakeTurn {
    deploy_answer_turn_in(tool_result, Pieces::TOKENS)
}

fn deploy_answer_turn_in(tool_result: &str, pieces: Pieces) -> FakeTurn {
    FakeTurn::text_in(&deploy_text(tool_result), pieces.text).output_tokens(8)
}

/// The deploy workload (one question, then the closing text).
pub fn deploy_responder() -> impl Fn(&Value) -> FakeResponse + Send + Sync + 'static {
    deploy_responder_in(Pieces::TOKENS)
}

/// The deploy workload, streamed in `pieces`.
pub fn deploy_responder_in(pieces: Pieces) -> impl Fn(&Value) -> FakeResponse + Send + Sync + 'static {
    move |body: &Value| match last_tool_result(body) {
        Some(result) => deploy_answer_turn_in(&result, pieces).into(),
        None => deploy_question_turn_in("call_ask_1", pieces).into(),
    }
}

/// The `long T` workload: T free-text questions in a row, then the closing
/// text for the last answer.
pub fn long_responder(t: usize) -> impl Fn(&Value) -> FakeResponse + Send + Sync + 'static {
    long_responder_in(t, Pieces::TOKENS)
}

/// The `long T` workload, streamed in `pieces`.
pub fn long_responder_in(t: usize, pieces: Pieces) -> impl Fn(&Value) -> FakeResponse + Send + Sync + 'static {
    move |body: &Value| {
        let answered = tool_result_count(body);
        if answered >= t {
            let last = last_tool_result(body).unwrap_or_default();
            return deploy_answer_turn_in(&last, pieces).into();
        }
        let k = answered + 1;
        let args = json!({"question": format!("Question {k} of {t}?")});
        FakeTurn::default()
            .call(FakeToolCall::new("ask_user", &args, pieces.arguments).id(format!("call_ask_{k}")))
            .output_tokens(16)
            .into()
    }
}

fn messages(body: &Value) -> &[Value] {
    body.get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The text of a tool result: a string, or Anthropic's list of text blocks.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The tool result content when the last message of the request is a tool
/// result (OpenAI `role: "tool"`, or an Anthropic user turn ending in a
/// `tool_result` block).
pub fn last_tool_result(body: &Value) -> Option<String> {
    let last = messages(body).last()?;
    match last.get("role").and_then(Value::as_str)? {
        "tool" => Some(content_text(last.get("content").unwrap_or(&Value::Null))),
        "user" => {
            let block = last.get("content")?.as_array()?.last()?;
            (block.get("type").and_then(Value::as_str) == Some("tool_result"))
                .then(|| content_text(block.get("content").unwrap_or(&Value::Null)))
        }
        _ => None,
    }
}

/// How many tool results the conversation holds.
pub fn tool_result_count(body: &Value) -> usize {
    messages(body)
        .iter()
        .map(|m| match m.get("role").and_then(Value::as_str) {
            Some("tool") => 1,
            Some("user") => m.get("content").and_then(Value::as_array).map_or(0, |blocks| {
                blocks
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                    .count()
            }),
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(response: FakeResponse) -> FakeTurn {
        match response {
            FakeResponse::Turn(turn) => turn,
            other => panic!("not a turn: {other:?}"),
        }
    }

    #[test]
    fn deploy_asks_first_then_answers_with_the_tool_result_in_20_pieces() {
        let responder = deploy_responder();
        let first = turn(responder(&json!({"messages": [{"role": "user", "content": "Deploy"}]})));
        assert_eq!(first.tool_calls.len(), 1);
        assert_eq!(first.tool_calls[0].arguments.len(), 4);
        let text = first.tool_calls[0].arguments.concat();
        assert!(text.starts_with(r#"{"question":"Which environment"#), "{text}");
        let args: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(args, deploy_arguments());

        let openai = json!({"messages": [
            {"role": "user", "content": "Deploy"},
            {"role": "assistant", "content": null, "tool_calls": []},
            {"role": "tool", "tool_call_id": "c", "content": "User answered: staging"}
        ]});
        let second = turn(responder(&openai));
        assert_eq!(second.text.len(), 20);
        assert_eq!(second.text.concat(), "Deploying to User answered: staging.");

        let anthropic = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "Deploy"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "ask_user", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "User answered: production"}]}
        ]});
        assert_eq!(
            turn(responder(&anthropic)).text.concat(),
            "Deploying to User answered: production."
        );
    }

    #[test]
    fn the_large_piece_workload_streams_each_reply_in_one_piece() {
        let responder = deploy_responder_in(Pieces::WHOLE);
        let first = turn(responder(&json!({"messages": [{"role": "user", "content": "Deploy"}]})));
        assert_eq!(first.tool_calls[0].arguments, vec![DEPLOY_ARGUMENTS_JSON.to_owned()]);
        let answered = json!({"messages": [
            {"role": "user", "content": "Deploy"},
            {"role": "tool", "tool_call_id": "c", "content": "staging"}
        ]});
        assert_eq!(
            turn(responder(&answered)).text,
            vec!["Deploying to staging.".to_owned()]
        );

        let long = long_responder_in(1, Pieces { text: 3, arguments: 2 });
        let ask = turn(long(&json!({"messages": [{"role": "user", "content": "go"}]})));
        assert_eq!(ask.tool_calls[0].arguments.len(), 2);
        assert_eq!(turn(long(&answered)).text.len(), 3);
    }

    #[test]
    fn pieces_read_one_count_or_two_and_refuse_the_rest() {
        assert_eq!(Pieces::parse("1"), Ok(Pieces::WHOLE));
        assert_eq!(Pieces::parse("20"), Ok(Pieces::TOKENS));
        assert_eq!(
            Pieces::parse("100"),
            Ok(Pieces {
                text: 100,
                arguments: 4
            })
        );
        assert_eq!(Pieces::parse("5,12"), Ok(Pieces { text: 5, arguments: 12 }));
        assert_eq!(Pieces::parse(&Pieces::TOKENS.to_string()), Ok(Pieces::TOKENS));
        for bad in ["", "0", "-1", "many", "2,", ",2", "1,2,3", "10001", "3,0"] {
            assert_eq!(Pieces::parse(bad), Err(BadPieces { given: bad.to_owned() }), "{bad}");
        }
        assert_eq!(
            Pieces::parse("0").unwrap_err().to_string(),
            "`0` is not TEXT or TEXT,ARGUMENTS with each a count between 1 and 10000"
        );
    }

    #[test]
    fn long_keeps_asking_until_t_results_then_closes() {
        let responder = long_responder(2);
        let ask = |n: usize| {
            let mut messages = vec![json!({"role": "user", "content": "go"})];
            for i in 0..n {
                messages.push(json!({"role": "assistant", "content": null}));
                messages.push(
                    json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": format!("answer-{}", i + 1)}),
                );
            }
            turn(responder(&json!({ "messages": messages })))
        };
        let first: Value = serde_json::from_str(&ask(0).tool_calls[0].arguments.concat()).unwrap();
        assert_eq!(first["question"], "Question 1 of 2?");
        let second = ask(1);
        assert_eq!(second.tool_calls[0].id.as_deref(), Some("call_ask_2"));
        let done = ask(2);
        assert!(done.tool_calls.is_empty());
        assert_eq!(done.text.concat(), "Deploying to answer-2.");
    }
}

//! Every recorded provider stream, replayed over HTTP by the fake server
//! and read by the real model: the whole path (reqwest, SSE framing,
//! parser) gives the text, calls and finish the recording holds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use askloop::{FinishReason, Message, Model, ModelEvent, ModelRequest};
use askloop_testkit::{FakeResponse, FakeServer};
use common::*;
use futures::StreamExt;

struct Expected {
    fixture: &'static str,
    text_starts: &'static str,
    calls: &'static [(&'static str, &'static str)],
    finish: FinishReason,
}

async fn replay(fixture: &str, anthropic: bool) -> Vec<ModelEvent> {
    let path = format!("{}/tests/fixtures/{fixture}", env!("CARGO_MANIFEST_DIR"));
    let recorded = std::fs::read_to_string(&path).unwrap();
    let server = FakeServer::builder()
        .respond(FakeResponse::RawSse(recorded))
        .start()
        .await
        .unwrap();
    let model: Arc<dyn Model> = if anthropic {
        anthropic_model(&server, quick_http(0))
    } else {
        openai_model(&server, quick_http(0))
    };
    let messages = [Message::user("replay")];
    let request = ModelRequest {
        run_id: "run",
        system: None,
        messages: &messages,
        tools: &[],
    };
    let stream = model.stream(request).await.unwrap();
    stream.map(|e| e.unwrap()).collect().await
}

fn check(expected: &Expected, events: &[ModelEvent]) {
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert!(text.starts_with(expected.text_starts), "{}: {text:?}", expected.fixture);
    let calls: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCall { name, arguments, .. } => Some((name.clone(), arguments.clone())),
            _ => None,
        })
        .collect();
    let want: Vec<(String, String)> = expected
        .calls
        .iter()
        .map(|(n, a)| (n.to_string(), a.to_string()))
        .collect();
    assert_eq!(calls, want, "{}", expected.fixture);
    match events.last() {
        Some(ModelEvent::Finish { reason, .. }) => assert_eq!(reason, &expected.finish, "{}", expected.fixture),
        other => panic!("{}: ends with {other:?}", expected.fixture),
    }
}

#[tokio::test]
async fn recorded_openai_and_ollama_streams_read_over_http() {
    let cases = [
        Expected {
            fixture: "openai/text_plain_gpt41_nano.sse",
            text_starts: "pong",
            calls: &[],
            finish: FinishReason::Stop,
        },
        Expected {
            fixture: "openai/text_after_tool_result_gpt4o_mini.sse",
            text_starts: "azimuth-47",
            calls: &[],
            finish: FinishReason::Stop,
        },
        Expected {
            fixture: "openai/tool_call_single_gpt4o_mini.sse",
            text_starts: "",
            calls: &[("add", r#"{"x":17,"y":25}"#)],
            finish: FinishReason::ToolCalls,
        },
        Expected {
            fixture: "openai/tool_calls_parallel_gpt41_mini.sse",
            text_starts: "",
            calls: &[("alpha", r#"{"value": "red"}"#), ("beta", r#"{"value": "blue"}"#)],
            finish: FinishReason::ToolCalls,
        },
        Expected {
            fixture: "openai/tool_call_zero_args_gpt4o_mini.sse",
            text_starts: "",
            calls: &[("ping", "{}")],
            finish: FinishReason::ToolCalls,
        },
        Expected {
            fixture: "ollama/v1_tool_call_single_chunk_llama31_8b.sse",
            text_starts: "",
            calls: &[("get_weather", r#"{"city":"Copenhagen"}"#)],
            finish: FinishReason::ToolCalls,
        },
        Expected {
            fixture: "ollama/v1_parallel_tool_calls_single_chunk_qwen25_coder.sse",
            text_starts: "",
            calls: &[
                ("run_command", r#"{"command":"ls"}"#),
                ("run_command", r#"{"command":"ls -l"}"#),
            ],
            finish: FinishReason::ToolCalls,
        },
    ];
    for case in &cases {
        check(case, &replay(case.fixture, false).await);
    }
}

#[tokio::test]
async fn recorded_anthropic_streams_read_over_http() {
    let cases = [
        Expected {
            fixture: "anthropic/text_only_sonnet46.sse",
            text_starts: "A solar eclipse occurs",
            calls: &[],
            finish: FinishReason::Stop,
        },
        Expected {
            fixture: "anthropic/text_after_tool_result_sonnet46.sse",
            text_starts: "The result of 2 - 5 is **-3**.",
            calls: &[],
            finish: FinishReason::Stop,
        },
        Expected {
            fixture: "anthropic/tool_use_only_haiku45.sse",
            text_starts: "",
            calls: &[("get_weather", r#"{"city": "Paris"}"#)],
            finish: FinishReason::ToolCalls,
        },
        Expected {
            fixture: "anthropic/text_then_tool_use_nested_sonnet46.sse",
            text_starts: "I'll book this trip",
            calls: &[(
                "plan_trip",
                r#"{"itinerary": {"city":"Kyoto","days":3,"activities":["temples","tea ceremony"],"lodging":{"name":"Sakura Inn","rooms":2}}}"#,
            )],
            finish: FinishReason::ToolCalls,
        },
        Expected {
            fixture: "anthropic/tool_use_empty_input_sonnet46.sse",
            text_starts: "",
            calls: &[("ping", "{}")],
            finish: FinishReason::ToolCalls,
        },
        Expected {
            fixture: "anthropic/thinking_then_text_sonnet46.sse",
            text_starts: "## Setting Up the Problem",
            calls: &[],
            finish: FinishReason::Stop,
        },
    ];
    for case in &cases {
        check(case, &replay(case.fixture, true).await);
    }
}

#[tokio::test]
async fn recorded_thinking_reaches_an_agent_as_one_reasoning_block_before_the_unchanged_text() {
    let path = format!(
        "{}/tests/fixtures/anthropic/thinking_then_text_sonnet46.sse",
        env!("CARGO_MANIFEST_DIR")
    );
    let server = FakeServer::builder()
        .respond(FakeResponse::RawSse(std::fs::read_to_string(&path).unwrap()))
        .start()
        .await
        .unwrap();
    let agent = deploy_agent(anthropic_model(&server, quick_http(0)));
    let (chunks, output) = agent.stream("How many?").await.unwrap().output_with_chunks().await;
    let types = type_names(&chunks);
    assert_eq!(&types[..3], ["start", "step-start", "reasoning-start"]);
    let end = types.iter().position(|t| *t == "reasoning-end").unwrap();
    assert!(types[3..end].iter().all(|t| *t == "reasoning-delta"), "{types:?}");
    assert_eq!(types[end + 1], "text-start");
    assert_eq!(count(&chunks, "reasoning-start"), 1);
    let reasoning: String = chunks
        .iter()
        .filter_map(|c| match &c.kind {
            askloop::ChunkKind::ReasoningDelta(d) => Some(d.text.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        reasoning.starts_with("I need to find positive integers n < 300"),
        "{reasoning}"
    );
    assert!(reasoning.ends_with("So the answer is 37 - 12 = 25."), "{reasoning}");
    let text = streamed_text(&chunks);
    assert!(text.starts_with("## Setting Up the Problem"), "{text}");
    assert_eq!(output.text, text, "the answer is the text alone");
}

//! One streaming conformance suite, run against every provider: the same
//! scripted turn, served in each wire format by the fake server, must come
//! out of each provider as the same model events.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use askloop::{FinishReason, Message, Model, ModelEvent, ModelRequest};
use askloop_testkit::{FakeServer, FakeToolCall, FakeTurn, Finish};
use common::*;
use futures::StreamExt;
use serde_json::json;

async fn events(turn: FakeTurn, anthropic: bool) -> Vec<ModelEvent> {
    let server = FakeServer::builder().respond(turn).start().await.unwrap();
    let model: Arc<dyn Model> = if anthropic {
        anthropic_model(&server, quick_http(0))
    } else {
        openai_model(&server, quick_http(0))
    };
    let messages = [Message::user("go")];
    let request = ModelRequest {
        run_id: "run-1",
        system: Some("system"),
        messages: &messages,
        tools: &[],
    };
    let stream = model.stream(request).await.unwrap();
    stream.map(|e| e.unwrap()).collect().await
}

/// The events with the input token count left out: it is the server's
/// estimate from the request body, whose size differs between the APIs.
fn without_input_tokens(events: Vec<ModelEvent>) -> Vec<ModelEvent> {
    events
        .into_iter()
        .map(|event| match event {
            ModelEvent::Finish { reason, mut usage } => {
                usage.total_tokens -= usage.input_tokens;
                usage.input_tokens = 0;
                ModelEvent::Finish { reason, usage }
            }
            other => other,
        })
        .collect()
}

/// The streamed events and the completed calls, each in order. Where a
/// completed call falls among the others differs, and does not matter: an
/// Anthropic call completes at its block's end, an OpenAI call at the finish
/// (OpenAI-compatible servers do not all promise one call after the other).
fn calls_apart(events: &[ModelEvent]) -> (Vec<ModelEvent>, Vec<ModelEvent>) {
    events
        .iter()
        .cloned()
        .partition(|e| !matches!(e, ModelEvent::ToolCall { .. }))
}

/// Both providers' events for a turn, checked equivalent; OpenAI's returned.
async fn same_events_from_both(turn: FakeTurn) -> Vec<ModelEvent> {
    let openai = without_input_tokens(events(turn.clone(), false).await);
    let anthropic = without_input_tokens(events(turn, true).await);
    assert_eq!(
        calls_apart(&openai),
        calls_apart(&anthropic),
        "OpenAI and Anthropic disagree"
    );
    openai
}

fn finish(events: &[ModelEvent]) -> (FinishReason, u64) {
    match events.last() {
        Some(ModelEvent::Finish { reason, usage }) => (reason.clone(), usage.output_tokens),
        other => panic!("ends with {other:?}"),
    }
}

#[tokio::test]
async fn text_streams_as_the_same_deltas_and_finish() {
    let events = same_events_from_both(FakeTurn::text_in("The quick brown fox jumps", 5).output_tokens(7)).await;
    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas.len(), 5);
    assert_eq!(deltas.concat(), "The quick brown fox jumps");
    assert_eq!(finish(&events), (FinishReason::Stop, 7));
}

#[tokio::test]
async fn reasoning_streams_as_the_same_reasoning_deltas_before_the_text_and_calls() {
    let turn = FakeTurn::text("Asking.")
        .reasoning_in("The user did not say which environment.", 4)
        .call(FakeToolCall::new("ask_user", &json!({"question": "Where?"}), 2).id("call_a"))
        .output_tokens(20);
    let events = same_events_from_both(turn).await;
    let reasoning: Vec<&str> = events
        .iter()
        .take_while(|e| matches!(e, ModelEvent::ReasoningDelta(_)))
        .map(|e| match e {
            ModelEvent::ReasoningDelta(r) => r.as_str(),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(reasoning.len(), 4, "{events:?}");
    assert_eq!(reasoning.concat(), "The user did not say which environment.");
    assert_eq!(events[4], ModelEvent::TextDelta("Asking.".into()));
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, ModelEvent::ReasoningDelta(_)))
            .count(),
        4,
        "no reasoning after the text, nor the signature: {events:?}"
    );
    assert_eq!(finish(&events), (FinishReason::ToolCalls, 20));
}

#[tokio::test]
async fn text_then_parallel_calls_stream_start_deltas_and_calls_in_order() {
    let turn = FakeTurn::text("Asking two things.")
        .call(FakeToolCall::new("ask_user", &json!({"question": "Where?"}), 3).id("call_a"))
        .call(
            FakeToolCall::new(
                "ask_user",
                &json!({"question": "When?", "options": [{"label": "now"}]}),
                4,
            )
            .id("call_b"),
        )
        .output_tokens(30);
    let events = same_events_from_both(turn).await;
    assert_eq!(events[0], ModelEvent::TextDelta("Asking two things.".into()));
    assert_eq!(
        events[1],
        ModelEvent::ToolCallStart {
            id: "call_a".into(),
            name: "ask_user".into()
        }
    );
    let calls: Vec<(String, serde_json::Value)> = events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCall { id, arguments, .. } => Some((id.clone(), serde_json::from_str(arguments).unwrap())),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            ("call_a".to_owned(), json!({"question": "Where?"})),
            (
                "call_b".to_owned(),
                json!({"question": "When?", "options": [{"label": "now"}]})
            ),
        ]
    );
    let b_deltas: String = events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCallDelta { id, args_delta } if id == "call_b" => Some(args_delta.as_str()),
            _ => None,
        })
        .collect();
    // The arguments stream in the order they were written.
    assert_eq!(b_deltas, r#"{"question":"When?","options":[{"label":"now"}]}"#);
    assert_eq!(finish(&events), (FinishReason::ToolCalls, 30));
}

#[tokio::test]
async fn a_whole_call_in_one_chunk_finished_by_stop_is_still_a_call() {
    let turn = FakeTurn::tool_call("lookup", json!({"key": "harbor"}))
        .whole_calls()
        .finish(Finish::Stop)
        .output_tokens(5);
    for anthropic in [false, true] {
        let turn = if anthropic {
            turn.clone()
        } else {
            turn.clone().finish_in_last_chunk()
        };
        let events = events(turn, anthropic).await;
        let calls: Vec<&ModelEvent> = events
            .iter()
            .filter(|e| matches!(e, ModelEvent::ToolCall { .. }))
            .collect();
        assert_eq!(calls.len(), 1, "anthropic={anthropic}: {events:?}");
        assert!(
            matches!(calls[0], ModelEvent::ToolCall { name, arguments, .. } if name == "lookup" && arguments == r#"{"key":"harbor"}"#)
        );
        assert_eq!(
            finish(&events).0,
            FinishReason::Stop,
            "reported as sent; the agent decides"
        );
    }
}

#[tokio::test]
async fn calls_without_ids_get_distinct_ids_that_are_the_same_every_time() {
    let turn = FakeTurn::default()
        .call(FakeToolCall::new("a", &json!({}), 1))
        .call(FakeToolCall::new("b", &json!({}), 1))
        .without_ids();
    for anthropic in [false, true] {
        let ids = |events: Vec<ModelEvent>| -> Vec<String> {
            events
                .into_iter()
                .filter_map(|e| match e {
                    ModelEvent::ToolCall { id, .. } => Some(id),
                    _ => None,
                })
                .collect()
        };
        let first = ids(events(turn.clone(), anthropic).await);
        assert_eq!(first.len(), 2);
        assert!(!first[0].is_empty() && first[0] != first[1], "{first:?}");
        assert_eq!(
            ids(events(turn.clone(), anthropic).await),
            first,
            "anthropic={anthropic}"
        );
    }
}

#[tokio::test]
async fn a_zero_argument_call_means_an_empty_object() {
    for anthropic in [false, true] {
        let events = events(FakeTurn::default().call(FakeToolCall::raw("ping", "")), anthropic).await;
        let arguments = events
            .iter()
            .find_map(|e| match e {
                ModelEvent::ToolCall { arguments, .. } => Some(arguments.clone()),
                _ => None,
            })
            .unwrap();
        // Empty arguments are `{}` to the agent.
        assert!(
            arguments.is_empty() || arguments == "{}",
            "anthropic={anthropic}: {arguments:?}"
        );
    }
}

#[tokio::test]
async fn a_length_limit_is_reported_as_length() {
    let events = same_events_from_both(FakeTurn::text("cut").finish(Finish::Length)).await;
    assert_eq!(finish(&events).0, FinishReason::Length);
}

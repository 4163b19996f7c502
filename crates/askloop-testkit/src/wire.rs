//! Renders a [`FakeTurn`] as the SSE frames a real server sends, in the
//! shapes of the recorded OpenAI and Anthropic streams.

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};

use crate::response::{FakeError, FakeTurn, Finish};

/// Which API a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFormat {
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    OpenAi,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
}

/// Facts about the request a response is rendered for.
#[derive(Debug, Clone)]
pub(crate) struct RequestInfo {
    /// 1-based request number on this server.
    pub(crate) number: usize,
    /// The `model` of the request body.
    pub(crate) model: String,
    /// A rough token estimate of the request.
    pub(crate) input_tokens: u64,
}

/// The SSE frames of a turn, in order. A frame is one event, blank line
/// included.
pub(crate) fn turn_frames(format: WireFormat, turn: &FakeTurn, info: &RequestInfo) -> Vec<Bytes> {
    match format {
        WireFormat::OpenAi => openai_frames(turn, info),
        WireFormat::Anthropic => anthropic_frames(turn, info),
    }
}

/// The error body a provider sends with an error status.
pub(crate) fn error_body(format: WireFormat, error: &FakeError) -> Vec<u8> {
    if let Some(raw) = &error.raw_body {
        return raw.clone().into_bytes();
    }
    let body = match format {
        WireFormat::OpenAi => json!({"error": {
            "message": error.message,
            "type": openai_error_type(error.status),
            "param": null,
            "code": null,
        }}),
        WireFormat::Anthropic => json!({
            "type": "error",
            "error": {"type": anthropic_error_type(error.status), "message": error.message},
        }),
    };
    body.to_string().into_bytes()
}

fn openai_error_type(status: u16) -> &'static str {
    match status {
        400 | 404 | 422 => "invalid_request_error",
        401 => "authentication_error",
        429 => "rate_limit_exceeded",
        _ => "server_error",
    }
}

fn anthropic_error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

fn data_frame(value: &Value) -> Bytes {
    let mut frame = Vec::with_capacity(256);
    frame.extend_from_slice(b"data: ");
    // Writing a Value to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut frame, value);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

fn event_frame(event: &str, value: &Value) -> Bytes {
    let mut frame = Vec::with_capacity(256);
    frame.extend_from_slice(b"event: ");
    frame.extend_from_slice(event.as_bytes());
    frame.extend_from_slice(b"\ndata: ");
    let _ = serde_json::to_writer(&mut frame, value);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

fn openai_finish(finish: &Finish) -> String {
    match finish {
        Finish::Stop => "stop".to_owned(),
        Finish::ToolCalls => "tool_calls".to_owned(),
        Finish::Length => "length".to_owned(),
        Finish::Other(other) => other.clone(),
    }
}

fn anthropic_stop(finish: &Finish) -> String {
    match finish {
        Finish::Stop => "end_turn".to_owned(),
        Finish::ToolCalls => "tool_use".to_owned(),
        Finish::Length => "max_tokens".to_owned(),
        Finish::Other(other) => other.clone(),
    }
}

/// The whole answer as one JSON body, for a request without `stream: true`
/// (`chat.completion` or a Messages `message`). Stream-only quirks
/// (disconnects, error events, frame delays) do not apply.
pub(crate) fn whole_body(format: WireFormat, turn: &FakeTurn, info: &RequestInfo) -> Vec<u8> {
    let text: String = turn.text.concat();
    let body = match format {
        WireFormat::OpenAi => {
            let calls: Vec<Value> = turn
                .tool_calls
                .iter()
                .enumerate()
                .map(|(index, call)| {
                    let mut out = json!({"type": "function", "function": {"name": call.name, "arguments": call.arguments.concat()}});
                    if !turn.without_ids {
                        out["id"] = json!(call.id.clone().unwrap_or_else(|| format!("call_{}_{index}", info.number)));
                    }
                    out
                })
                .collect();
            let mut message = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }, "refusal": null});
            if !calls.is_empty() {
                message["tool_calls"] = Value::Array(calls);
            }
            json!({
                "id": format!("chatcmpl-fake-{}", info.number),
                "object": "chat.completion",
                "created": 1_700_000_000u64,
                "model": info.model,
                "system_fingerprint": "fp_askloop_fake",
                "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": openai_finish(&turn.finish_or_default())}],
                "usage": {
                    "prompt_tokens": info.input_tokens,
                    "completion_tokens": turn.output_tokens,
                    "total_tokens": info.input_tokens + turn.output_tokens,
                },
            })
        }
        WireFormat::Anthropic => {
            let mut content = Vec::new();
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            for (n, call) in turn.tool_calls.iter().enumerate() {
                let input: Value = serde_json::from_str(&call.arguments.concat()).unwrap_or_else(|_| json!({}));
                let mut block = json!({"type": "tool_use", "name": call.name, "input": input});
                if !turn.without_ids {
                    block["id"] = json!(
                        call.id
                            .clone()
                            .unwrap_or_else(|| format!("toolu_fake_{}_{n}", info.number))
                    );
                }
                content.push(block);
            }
            json!({
                "id": format!("msg_fake_{}", info.number),
                "type": "message",
                "role": "assistant",
                "model": info.model,
                "content": content,
                "stop_reason": anthropic_stop(&turn.finish_or_default()),
                "stop_sequence": null,
                "usage": {"input_tokens": info.input_tokens, "output_tokens": turn.output_tokens},
            })
        }
    };
    body.to_string().into_bytes()
}

/// A `chat.completion.chunk`, typed rather than built as a `Value`: the
/// benchmark runs this server in its own process, so its CPU counts.
#[derive(Serialize)]
struct ChunkOut<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    system_fingerprint: &'static str,
    choices: &'a [ChoiceOut<'a>],
    usage: Option<UsageOut>,
}

#[derive(Serialize)]
struct ChoiceOut<'a> {
    index: u32,
    delta: &'a DeltaOut<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'a str>,
}

#[derive(Serialize, Default)]
struct DeltaOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    /// `Some(None)` is `"content": null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[CallOut<'a>; 1]>,
}

#[derive(Serialize)]
struct CallOut<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: FunctionOut<'a>,
}

#[derive(Serialize)]
struct FunctionOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

#[derive(Serialize)]
struct UsageOut {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

/// The first chunk of a call: index, id, type, name, and its arguments
/// (empty, or all of them for a whole call).
fn call_head<'a>(index: usize, id: Option<&'a str>, name: &'a str, arguments: &'a str) -> CallOut<'a> {
    CallOut {
        index,
        id,
        kind: Some("function"),
        function: FunctionOut {
            name: Some(name),
            arguments,
        },
    }
}

fn data_frame_of<T: Serialize>(value: &T) -> Bytes {
    let mut frame = Vec::with_capacity(320);
    frame.extend_from_slice(b"data: ");
    // Serialising these types to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut frame, value);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

/// OpenAI: a role chunk, content chunks, for each call a head chunk and
/// argument chunks, a finish chunk, a usage chunk (`choices: []`), `[DONE]`.
fn openai_frames(turn: &FakeTurn, info: &RequestInfo) -> Vec<Bytes> {
    let id = format!("chatcmpl-fake-{}", info.number);
    let finish = openai_finish(&turn.finish_or_default());
    let call_ids: Vec<Option<String>> = turn
        .tool_calls
        .iter()
        .enumerate()
        .map(|(index, call)| {
            (!turn.without_ids).then(|| {
                call.id
                    .clone()
                    .unwrap_or_else(|| format!("call_{}_{index}", info.number))
            })
        })
        .collect();
    let whole_arguments: Vec<String> = if turn.whole_calls {
        turn.tool_calls.iter().map(|c| c.arguments.concat()).collect()
    } else {
        Vec::new()
    };

    let mut deltas: Vec<DeltaOut<'_>> = Vec::new();
    if !turn.whole_calls || turn.tool_calls.is_empty() {
        let content = if turn.tool_calls.is_empty() { Some("") } else { None };
        deltas.push(DeltaOut {
            role: Some("assistant"),
            content: Some(content),
            ..DeltaOut::default()
        });
    }
    deltas.extend(
        turn.reasoning
            .iter()
            .filter(|r| !r.is_empty())
            .map(|reasoning| DeltaOut {
                reasoning_content: Some(reasoning),
                ..DeltaOut::default()
            }),
    );
    deltas.extend(turn.text.iter().filter(|t| !t.is_empty()).map(|text| DeltaOut {
        content: Some(Some(text)),
        ..DeltaOut::default()
    }));
    for (index, call) in turn.tool_calls.iter().enumerate() {
        if turn.whole_calls {
            deltas.push(DeltaOut {
                role: Some("assistant"),
                content: Some(Some("")),
                reasoning_content: None,
                tool_calls: Some([call_head(
                    index,
                    call_ids[index].as_deref(),
                    &call.name,
                    &whole_arguments[index],
                )]),
            });
            continue;
        }
        deltas.push(DeltaOut {
            tool_calls: Some([call_head(index, call_ids[index].as_deref(), &call.name, "")]),
            ..DeltaOut::default()
        });
        deltas.extend(call.arguments.iter().filter(|p| !p.is_empty()).map(|piece| DeltaOut {
            tool_calls: Some([CallOut {
                index,
                id: None,
                kind: None,
                function: FunctionOut {
                    name: None,
                    arguments: piece,
                },
            }]),
            ..DeltaOut::default()
        }));
    }

    let chunk = |delta: &DeltaOut<'_>, finish_reason: Option<&str>| {
        data_frame_of(&ChunkOut {
            id: &id,
            object: "chat.completion.chunk",
            created: 1_700_000_000,
            model: &info.model,
            system_fingerprint: "fp_askloop_fake",
            choices: &[ChoiceOut {
                index: 0,
                delta,
                logprobs: None,
                finish_reason,
            }],
            usage: None,
        })
    };
    let mut frames = Vec::with_capacity(deltas.len() + 3);
    let last = deltas.len().saturating_sub(1);
    for (i, delta) in deltas.iter().enumerate() {
        let finish_here = turn.finish_in_last_chunk && turn.stream_error.is_none() && i == last;
        frames.push(chunk(delta, finish_here.then_some(finish.as_str())));
    }
    if let Some(message) = &turn.stream_error {
        frames.push(data_frame(
            &json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}}),
        ));
        return frames;
    }
    if !turn.finish_in_last_chunk {
        frames.push(chunk(&DeltaOut::default(), Some(&finish)));
    }
    if !turn.no_usage {
        frames.push(data_frame_of(&ChunkOut {
            id: &id,
            object: "chat.completion.chunk",
            created: 1_700_000_000,
            model: &info.model,
            system_fingerprint: "fp_askloop_fake",
            choices: &[],
            usage: Some(UsageOut {
                prompt_tokens: info.input_tokens,
                completion_tokens: turn.output_tokens,
                total_tokens: info.input_tokens + turn.output_tokens,
            }),
        }));
    }
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    frames
}

/// Anthropic: `message_start`, blocks (`content_block_start`, deltas,
/// `content_block_stop`; a `ping` after the first start), `message_delta`,
/// `message_stop`.
fn anthropic_frames(turn: &FakeTurn, info: &RequestInfo) -> Vec<Bytes> {
    let mut frames = Vec::new();
    frames.push(event_frame(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": format!("msg_fake_{}", info.number),
            "type": "message",
            "role": "assistant",
            "model": info.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": info.input_tokens, "output_tokens": 1},
        }}),
    ));
    let ping = || event_frame("ping", &json!({"type": "ping"}));
    let mut index = 0usize;
    let reasoning: Vec<&String> = turn.reasoning.iter().filter(|r| !r.is_empty()).collect();
    if !reasoning.is_empty() {
        frames.push(event_frame(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ));
        frames.push(ping());
        for piece in reasoning {
            frames.push(event_frame(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": piece}}),
            ));
        }
        frames.push(event_frame(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": format!("sig_fake_{}", info.number)}}),
        ));
        frames.push(event_frame(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    let text: Vec<&String> = turn.text.iter().filter(|t| !t.is_empty()).collect();
    if !text.is_empty() {
        frames.push(event_frame(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        ));
        if index == 0 {
            frames.push(ping());
        }
        for piece in text {
            frames.push(event_frame(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        frames.push(event_frame(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for (n, call) in turn.tool_calls.iter().enumerate() {
        let mut block = json!({"type": "tool_use", "name": call.name, "input": {}});
        if !turn.without_ids {
            block["id"] = json!(
                call.id
                    .clone()
                    .unwrap_or_else(|| format!("toolu_fake_{}_{n}", info.number))
            );
        }
        frames.push(event_frame(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        if index == 0 {
            frames.push(ping());
        }
        let pieces: Vec<String> = if turn.whole_calls {
            vec![String::new(), call.arguments.concat()]
        } else {
            std::iter::once(String::new())
                .chain(call.arguments.iter().cloned())
                .collect()
        };
        for piece in pieces {
            frames.push(event_frame(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}),
            ));
        }
        frames.push(event_frame(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    if index == 0 {
        frames.push(ping());
    }
    if let Some(message) = &turn.stream_error {
        frames.push(event_frame(
            "error",
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": message}}),
        ));
        return frames;
    }
    let mut usage = json!({"output_tokens": turn.output_tokens});
    if turn.no_usage {
        usage = json!({});
    }
    frames.push(event_frame(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": anthropic_stop(&turn.finish_or_default()), "stop_sequence": null}, "usage": usage}),
    ));
    frames.push(event_frame("message_stop", &json!({"type": "message_stop"})));
    frames
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::FakeToolCall;
    use askloop::sse::{self, OwnedSseEvent};

    fn info() -> RequestInfo {
        RequestInfo {
            number: 1,
            model: "gpt-4o-mini".into(),
            input_tokens: 10,
        }
    }

    /// The event of each frame, read with askloop's SSE reader: a frame is
    /// exactly one whole event.
    fn frame_events(frames: &[Bytes]) -> Vec<OwnedSseEvent> {
        frames
            .iter()
            .map(|frame| {
                let mut events = sse::events(frame).unwrap();
                assert_eq!(events.len(), 1, "one event a frame: {frame:?}");
                events.remove(0)
            })
            .collect()
    }

    /// The JSON of each frame, `[DONE]` left out.
    fn datas(frames: &[Bytes]) -> Vec<Value> {
        frame_events(frames)
            .iter()
            .filter(|event| event.data != "[DONE]")
            .map(|event| serde_json::from_str(&event.data).unwrap())
            .collect()
    }

    #[test]
    fn a_whole_body_holds_the_text_and_calls_of_the_turn() {
        let turn =
            FakeTurn::text_in("Let me ask.", 3).call(FakeToolCall::new("ask_user", &json!({"question": "Q?"}), 4));
        let openai: Value = serde_json::from_slice(&whole_body(WireFormat::OpenAi, &turn, &info())).unwrap();
        let message = &openai["choices"][0]["message"];
        assert_eq!(message["content"], "Let me ask.");
        assert_eq!(
            message["tool_calls"][0]["function"]["arguments"],
            "{\"question\":\"Q?\"}"
        );
        assert_eq!(openai["choices"][0]["finish_reason"], "tool_calls");
        let anthropic: Value = serde_json::from_slice(&whole_body(WireFormat::Anthropic, &turn, &info())).unwrap();
        assert_eq!(anthropic["content"][1]["input"], json!({"question": "Q?"}));
        assert_eq!(anthropic["stop_reason"], "tool_use");
    }

    #[test]
    fn openai_tool_turn_has_role_head_pieces_finish_usage_and_done() {
        let turn = FakeTurn::default().call(FakeToolCall::new("ask_user", &json!({"question": "Which?"}), 4));
        let frames = openai_frames(&turn, &info());
        assert_eq!(frames.len(), 1 + 1 + 4 + 1 + 1 + 1);
        let values = datas(&frames);
        assert_eq!(
            values[0]["choices"][0]["delta"],
            json!({"role": "assistant", "content": null})
        );
        assert_eq!(values[1]["choices"][0]["delta"]["tool_calls"][0]["id"], "call_1_0");
        assert_eq!(values[6]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(values[7]["choices"], json!([]));
        assert_eq!(values[7]["usage"]["prompt_tokens"], 10);
        assert_eq!(frames.last().unwrap().as_ref(), b"data: [DONE]\n\n");
    }

    #[test]
    fn openai_ollama_quirks_put_the_whole_call_and_finish_in_one_chunk() {
        let turn = FakeTurn::tool_call("t", json!({"a": 1}))
            .whole_calls()
            .finish_in_last_chunk()
            .without_ids()
            .no_usage();
        let values = datas(&openai_frames(&turn, &info()));
        assert_eq!(values.len(), 1);
        let choice = &values[0]["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["delta"]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        assert!(choice["delta"]["tool_calls"][0].get("id").is_none());
    }

    #[test]
    fn anthropic_turn_has_the_recorded_event_sequence() {
        let turn = FakeTurn::text_in("Hello there", 2).call(FakeToolCall::new("t", &json!({}), 1));
        let frames = anthropic_frames(&turn, &info());
        let events: Vec<String> = frame_events(&frames).into_iter().map(|event| event.event).collect();
        assert_eq!(
            events,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let values = datas(&frames);
        assert_eq!(values[10]["delta"]["stop_reason"], "tool_use");
    }
}

//! Recorded traffic of a real Mastra server, and the comparison of a
//! stream's chunks against it.
//!
//! The recordings are in this crate's `fixtures/mastra-server/` (see the
//! README there): one scenario a file, every HTTP exchange with its SSE body.
//! [`shape_problems`] checks that askloop's chunks for the same scenario have
//! Mastra's shape: the same chunk types in the same order, each payload with
//! the same keys holding the same JSON types (ids, timestamps and text
//! aside). It works on plain JSON, so any layer that produces chunks (the
//! library, an HTTP server) can be held to it.
//!
//! ```
//! use askloop_testkit::mastra;
//!
//! let single = mastra::trace("single").unwrap();
//! let stream = &single.exchanges[0];
//! assert_eq!(stream.path, "/api/agents/assistant/stream");
//! assert_eq!(stream.chunks[0]["type"], "start");
//! // A recording compared with itself has nothing to report.
//! assert!(mastra::shape_problems(&stream.chunks, &stream.chunks).is_empty());
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use askloop::sse;
use serde_json::Value;

/// The data of the event that ends a Mastra stream.
const DONE: &str = "[DONE]";

/// Payload keys whose contents are free-form (the model's arguments, a
/// tool's value) or provider-internal (metadata askloop does not keep):
/// only their JSON type is compared.
pub const OPAQUE_KEYS: &[&str] = &[
    "args",
    "suspendPayload",
    "result",
    "input",
    "providerMetadata",
    "headers",
    "raw",
    "request",
    "warnings",
];

/// The scenarios recorded in this crate.
pub const SCENARIOS: &[&str] = &["single", "approve", "decline"];

/// One recorded scenario.
#[derive(Debug, Clone)]
pub struct Trace {
    /// The HTTP exchanges, in order.
    pub exchanges: Vec<Exchange>,
}

/// One recorded HTTP exchange.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The request's method.
    pub method: String,
    /// The request's path (`/api/agents/assistant/stream`).
    pub path: String,
    /// The request's JSON body (`null` for none).
    pub request_body: Value,
    /// The response status.
    pub status: u16,
    /// The SSE chunks of the response, parsed, without `[DONE]`.
    pub chunks: Vec<Value>,
    /// The same chunks as the JSON text Mastra sent.
    pub chunk_texts: Vec<String>,
}

/// A recording could not be read.
#[derive(Debug)]
pub struct FixtureError {
    path: PathBuf,
    reason: String,
}

impl fmt::Display for FixtureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot read the Mastra recording {}: {} (the recordings live in askloop-testkit/fixtures/mastra-server/)",
            self.path.display(),
            self.reason
        )
    }
}

impl std::error::Error for FixtureError {}

/// The directory of the recordings.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/mastra-server")
}

/// Reads a recorded scenario (`single`, `approve`, `decline`).
pub fn trace(scenario: &str) -> Result<Trace, FixtureError> {
    let path = fixtures_dir().join(format!("{scenario}.trace.jsonl"));
    let fail = |reason: String| FixtureError {
        path: path.clone(),
        reason,
    };
    let text = std::fs::read_to_string(&path).map_err(|err| fail(err.to_string()))?;
    let mut exchanges = Vec::new();
    for (number, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let record: Value = serde_json::from_str(line).map_err(|err| fail(format!("line {}: {err}", number + 1)))?;
        exchanges.push(exchange(&record).map_err(|reason| fail(format!("line {}: {reason}", number + 1)))?);
    }
    Ok(Trace { exchanges })
}

/// What is wrong with one recorded exchange.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct BadRecord(String);

fn exchange(record: &Value) -> Result<Exchange, BadRecord> {
    let text = |key: &str| {
        record[key]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| BadRecord(format!("`{key}` is not a string")))
    };
    let url = text("url")?;
    let path = url
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|at| rest[at..].to_owned()))
        .unwrap_or(url);
    let body = record["response_body"].as_str().unwrap_or_default();
    let is_stream = record["response_headers"]["content-type"]
        .as_str()
        .is_some_and(|kind| kind.starts_with("text/event-stream"));
    let mut chunks = Vec::new();
    let mut chunk_texts = Vec::new();
    if is_stream {
        let events = sse::events(body.as_bytes()).map_err(|err| BadRecord(format!("the SSE body: {err}")))?;
        for event in events.into_iter().filter(|e| e.data != DONE) {
            chunks.push(
                serde_json::from_str(&event.data)
                    .map_err(|err| BadRecord(format!("an SSE event is not JSON: {err}")))?,
            );
            chunk_texts.push(event.data);
        }
    }
    Ok(Exchange {
        method: text("method")?,
        path,
        request_body: record["request_body"].clone(),
        status: record["status"]
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .unwrap_or(0),
        chunks,
        chunk_texts,
    })
}

/// Asserts that an SSE body is framed exactly as Mastra frames a stream,
/// byte for byte: every event one `data: <json>` line closed by a blank
/// line (no `event:`, `id:` or comment lines, no `data:` without its
/// space, no event over two lines), and `data: [DONE]` last. Clients
/// written against Mastra may split on exactly this, so askloop's streams
/// are held to it; reading the events is [`framed_chunks`]'s job.
///
/// # Panics
///
/// With the first way the body departs from that framing.
#[track_caller]
pub fn assert_framing(body: &str) {
    assert!(
        body.ends_with("data: [DONE]\n\n"),
        "the body must end with data: [DONE]: {body:?}"
    );
    let frames: Vec<&str> = body.split_terminator("\n\n").collect();
    let Some((done, chunks)) = frames.split_last() else {
        panic!("no frames in {body:?}");
    };
    assert_eq!(*done, "data: [DONE]");
    for frame in chunks {
        let Some(json) = frame.strip_prefix("data: ") else {
            panic!("a frame without `data: `: {frame:?}");
        };
        assert!(!json.contains(['\n', '\r']), "one line per frame: {frame:?}");
    }
}

/// The chunks of a stream body framed as Mastra frames it
/// ([`assert_framing`]), read with [`askloop::sse`]: each event's JSON,
/// `[DONE]` left out.
///
/// # Panics
///
/// When the framing is not Mastra's or a chunk is not JSON.
#[track_caller]
pub fn framed_chunks(body: &str) -> Vec<Value> {
    assert_framing(body);
    let events = sse::events(body.as_bytes()).unwrap_or_else(|err| panic!("{err}: {body:?}"));
    events
        .iter()
        .filter(|event| event.data != DONE)
        .map(|event| {
            assert_eq!(event.event, "message", "{event:?}");
            serde_json::from_str(&event.data)
                .unwrap_or_else(|err| panic!("a chunk that is not JSON ({err}): {event:?}"))
        })
        .collect()
}

/// Every way `actual` differs from `expected` in shape, one line each; empty
/// when they match.
///
/// Checked: the sequence of chunk types (runs of deltas count as one, since
/// text is split differently); the envelope keys; and for each chunk, the
/// payload's keys and their JSON types against the recorded chunk of the
/// same type at the same place (the n-th `step-finish` against the n-th),
/// recursively through objects. Arrays, and the keys in [`OPAQUE_KEYS`],
/// are compared by type only.
pub fn shape_problems(expected: &[Value], actual: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    let (want, got) = (type_runs(expected), type_runs(actual));
    if want != got {
        problems.push(format!("chunk types differ:\n  Mastra:  {want:?}\n  askloop: {got:?}"));
    }
    let mut recorded: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for chunk in expected {
        recorded.entry(type_of(chunk)).or_default().push(chunk);
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for chunk in actual {
        let kind = type_of(chunk);
        let Some(samples) = recorded.get(kind) else {
            continue;
        };
        let nth = seen.entry(kind).or_default();
        let sample = samples[(*nth).min(samples.len() - 1)];
        *nth += 1;
        let envelope = |c: &Value| c.as_object().map(|o| sorted_keys(o.keys())).unwrap_or_default();
        if envelope(chunk) != envelope(sample) {
            problems.push(format!(
                "{kind}: envelope keys {:?}, Mastra's {:?}",
                envelope(chunk),
                envelope(sample)
            ));
        }
        compare(
            &format!("{kind} payload"),
            &sample["payload"],
            &chunk["payload"],
            &mut problems,
        );
    }
    problems
}

fn compare(path: &str, want: &Value, got: &Value, problems: &mut Vec<String>) {
    if json_type(want) != json_type(got) {
        problems.push(format!("{path}: {}, Mastra has {}", json_type(got), json_type(want)));
        return;
    }
    let (Value::Object(want), Value::Object(got)) = (want, got) else {
        return;
    };
    let (want_keys, got_keys) = (sorted_keys(want.keys()), sorted_keys(got.keys()));
    if want_keys != got_keys {
        problems.push(format!("{path}: keys {got_keys:?}, Mastra's {want_keys:?}"));
    }
    for (key, want_value) in want {
        let Some(got_value) = got.get(key) else {
            continue;
        };
        let inner = format!("{path}.{key}");
        if OPAQUE_KEYS.contains(&key.as_str()) {
            if json_type(want_value) != json_type(got_value) {
                problems.push(format!(
                    "{inner}: {}, Mastra has {}",
                    json_type(got_value),
                    json_type(want_value)
                ));
            }
        } else {
            compare(&inner, want_value, got_value, problems);
        }
    }
}

/// The chunk types, with each run of one type counted once.
fn type_runs(chunks: &[Value]) -> Vec<&str> {
    let mut runs: Vec<&str> = chunks.iter().map(type_of).collect();
    runs.dedup();
    runs
}

fn type_of(chunk: &Value) -> &str {
    chunk["type"].as_str().unwrap_or("<no type>")
}

fn sorted_keys<'a>(keys: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut keys: Vec<String> = keys.cloned().collect();
    keys.sort();
    keys
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_recorded_scenario_reads_with_its_chunks() {
        for scenario in SCENARIOS {
            let trace = trace(scenario).unwrap();
            assert!(trace.exchanges.iter().any(|e| !e.chunks.is_empty()), "{scenario}");
            for exchange in &trace.exchanges {
                assert_eq!(exchange.chunks.len(), exchange.chunk_texts.len());
            }
        }
    }

    #[test]
    fn a_missing_recording_is_an_error_naming_the_file() {
        let err = trace("no-such-scenario").unwrap_err().to_string();
        assert!(err.contains("no-such-scenario.trace.jsonl"), "{err}");
    }

    #[test]
    fn a_missing_key_a_wrong_type_and_a_missing_chunk_type_are_each_reported() {
        let recorded = vec![
            json!({"type": "start", "runId": "r", "from": "AGENT", "payload": {"id": "a", "messageId": "m"}}),
            json!({"type": "finish", "runId": "r", "from": "AGENT", "payload": {"output": {"usage": {"inputTokens": 1}}, "args": {}}}),
        ];
        let ours = vec![
            json!({"type": "start", "runId": "r", "from": "AGENT", "payload": {"id": "a"}}),
            json!({"type": "finish", "runId": "r", "from": "AGENT", "payload": {"output": {"usage": {"inputTokens": "1"}}, "args": {"x": 1}}}),
        ];
        let problems = shape_problems(&recorded, &ours);
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert!(problems[0].contains("start payload: keys"), "{problems:#?}");
        assert!(
            problems[1].contains("finish payload.output.usage.inputTokens"),
            "{problems:#?}"
        );
        let fewer = shape_problems(&recorded, &ours[..1]);
        assert!(fewer[0].contains("chunk types differ"), "{fewer:#?}");
    }

    #[test]
    fn mastras_own_recorded_streams_pass_the_framing_check_and_read_as_recorded() {
        let mut streams = 0;
        for scenario in SCENARIOS {
            let text = std::fs::read_to_string(fixtures_dir().join(format!("{scenario}.trace.jsonl"))).unwrap();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let record: Value = serde_json::from_str(line).unwrap();
                let recorded = exchange(&record).unwrap();
                if recorded.chunks.is_empty() {
                    continue;
                }
                streams += 1;
                let body = record["response_body"].as_str().unwrap();
                assert_eq!(framed_chunks(body), recorded.chunks, "{scenario} {}", recorded.path);
            }
        }
        assert_eq!(streams, 6, "two streams a scenario");
    }

    #[test]
    #[should_panic(expected = "one line per frame")]
    fn a_chunk_over_two_data_lines_is_not_mastras_framing() {
        framed_chunks("data: {\"type\":\ndata: \"start\"}\n\ndata: [DONE]\n\n");
    }

    #[test]
    #[should_panic(expected = "a frame without `data: `")]
    fn an_event_line_is_not_mastras_framing() {
        framed_chunks("event: chunk\ndata: {}\n\ndata: [DONE]\n\n");
    }

    #[test]
    #[should_panic(expected = "must end with data: [DONE]")]
    fn a_stream_without_done_is_not_mastras_framing() {
        framed_chunks("data: {}\n\n");
    }
}

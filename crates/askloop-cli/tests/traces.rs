//! OpenTelemetry export of `askloop serve`, received by a real OTLP/HTTP
//! receiver (a loopback HTTP server decoding the protobuf with
//! `opentelemetry-proto`): one trace per run across two server instances on
//! one PostgreSQL database, the first killed while the run waits; the
//! server's figures as OTLP metrics, the same as its `/metrics`; and a
//! receiver that is down, which no run notices.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use prost::Message;
use serde_json::{Value, json};

mod common;

use askloop_store::conformance::{drop_schema, postgres_test_url};
use common::{Serve, Serving};

/// One span as the receiver got it, with its resource's `service.name`.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
    start: u64,
    end: u64,
    attributes: HashMap<String, String>,
    events: Vec<(String, HashMap<String, String>)>,
    links: Vec<(String, String)>,
}

impl Received {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

fn text(value: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter().map(|kv| (kv.key.clone(), text(&kv.value))).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One data point of a metric as the receiver got it: its metric's name,
/// its attributes, and its value (a sum or gauge's number, a histogram's
/// count).
#[derive(Debug, Clone)]
struct Point {
    metric: String,
    attributes: HashMap<String, String>,
    value: f64,
}

/// What the receiver got: spans, and every export's metric data points.
#[derive(Default)]
struct Got {
    spans: Mutex<Vec<Received>>,
    exports: Mutex<Vec<Vec<Point>>>,
}

/// An OTLP/HTTP receiver on a loopback port: `POST /v1/traces` with an
/// `ExportTraceServiceRequest` and `POST /v1/metrics` with an
/// `ExportMetricsServiceRequest`, in protobuf; everything is kept.
struct Receiver {
    endpoint: String,
    got: Arc<Got>,
}

impl Receiver {
    async fn start() -> Receiver {
        let got: Arc<Got> = Arc::default();
        let app = axum::Router::new()
            .route("/v1/traces", post(receive))
            .route("/v1/metrics", post(receive_metrics))
            .with_state(Arc::clone(&got));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { endpoint, got }
    }

    /// The data points of the last metrics export received.
    fn last_export(&self) -> Vec<Point> {
        self.got.exports.lock().unwrap().last().cloned().unwrap_or_default()
    }

    fn spans(&self) -> Vec<Received> {
        self.got.spans.lock().unwrap().clone()
    }

    /// Waits (up to 60 s, a hang guard) until `done` holds for the spans
    /// received; returns them.
    async fn wait_for(&self, what: &str, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(Instant::now() < deadline, "the receiver never got {what}: {spans:#?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn receive_metrics(State(got): State<Arc<Got>>, body: Bytes) -> Vec<u8> {
    let request = ExportMetricsServiceRequest::decode(body).expect("an OTLP protobuf metrics export");
    let mut points = Vec::new();
    for resource in request.resource_metrics {
        for scope in resource.scope_metrics {
            for metric in scope.metrics {
                let number = |value: &Option<Number>| match value {
                    Some(Number::AsInt(i)) => *i as f64,
                    Some(Number::AsDouble(d)) => *d,
                    None => f64::NAN,
                };
                let mut add = |attributes: &[KeyValue], value: f64| {
                    points.push(Point {
                        metric: metric.name.clone(),
                        attributes: self::attributes(attributes),
                        value,
                    });
                };
                match &metric.data {
                    Some(Data::Sum(sum)) => sum
                        .data_points
                        .iter()
                        .for_each(|p| add(&p.attributes, number(&p.value))),
                    Some(Data::Gauge(gauge)) => gauge
                        .data_points
                        .iter()
                        .for_each(|p| add(&p.attributes, number(&p.value))),
                    Some(Data::Histogram(histogram)) => histogram
                        .data_points
                        .iter()
                        .for_each(|p| add(&p.attributes, p.count as f64)),
                    other => panic!("{}: an unexpected kind of metric: {other:?}", metric.name),
                }
            }
        }
    }
    got.exports.lock().unwrap().push(points);
    ExportMetricsServiceResponse::default().encode_to_vec()
}

async fn receive(State(got): State<Arc<Got>>, body: Bytes) -> Vec<u8> {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf trace export");
    let mut received = got.spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.push(Received {
                    service: service.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name.clone(),
                    start: span.start_time_unix_nano,
                    end: span.end_time_unix_nano,
                    attributes: attributes(&span.attributes),
                    events: span
                        .events
                        .iter()
                        .map(|e| (e.name.clone(), attributes(&e.attributes)))
                        .collect(),
                    links: span.links.iter().map(|l| (hex(&l.trace_id), hex(&l.span_id))).collect(),
                });
            }
        }
    }
    ExportTraceServiceResponse::default().encode_to_vec()
}

/// The agents both instances serve: `assistant`, on the OpenAI-compatible
/// fake model, asking with `ask_user`; the second instance's export is
/// turned on by `[telemetry]` alone.
fn config(dir: &Path, telemetry: &str) -> std::path::PathBuf {
    let path = dir.join("askloop.toml");
    std::fs::write(
        &path,
        format!(
            "[agents.assistant]\ninstructions = \"Ask before deploying.\"\nmodel = \"openai/gpt-4o-mini\"\ntools = [\"ask_user\"]\n\n{telemetry}"
        ),
    )
    .unwrap();
    path
}

/// `askloop serve` on the store `db` and the fake model at `model_url`,
/// for the test to add its exporter to.
fn serve(dir: &Path, db: &str, model_url: &str) -> Command {
    Serve::in_dir(dir)
        .env("ASKLOOP_DB", db)
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", model_url)
        // Spans leave within 50 ms of ending, so the test can wait for
        // them before it kills the first instance.
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .addr("127.0.0.1:0")
        .command()
}

fn sse_chunks(body: &str) -> Vec<Value> {
    common::chunks(body)
}

const CALLER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";
const RESUMER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const RESUMER_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test]
async fn a_run_that_waits_across_two_instances_is_one_trace_under_the_callers_with_its_model_calls_tool_calls_wait_and_resume()
 {
    let test = "a_run_that_waits_across_two_instances_is_one_trace";
    let Some(base) = postgres_test_url(test) else { return };
    let schema = format!("askloop_traces_{}_{}", std::process::id(), unique());
    let db = format!("{base}{}schema={schema}", if base.contains('?') { '&' } else { '?' });
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start().await;
    let model = askloop_testkit::FakeServer::with_responder(askloop_testkit::workload::deploy_responder())
        .await
        .unwrap();
    let config = config(
        dir.path(),
        &format!(
            "[telemetry]\nendpoint = \"{}\"\nservice_name = \"askloop-b\"\ncapture_content = true\n",
            receiver.endpoint
        ),
    );
    let config = config.to_str().unwrap();
    let client = reqwest::Client::new();

    // The first instance: export turned on by the standard variables (they
    // win over the file's endpoint), JSON logs at info.
    let mut first = serve(dir.path(), &db, &model.openai_base_url());
    first
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env("OTEL_SERVICE_NAME", "askloop-a")
        // The GenAI conventions' switch wins over the file's capture_content.
        .env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "false")
        .env("ASKLOOP_LOG", "info")
        .args(["--config", config, "--log-format", "json"]);
    let mut first = Serving::start(first);
    let body = client
        .post(first.url("/api/agents/assistant/stream"))
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .json(&json!({"messages": "Deploy the app."}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let suspended = sse_chunks(&body)
        .into_iter()
        .find(|c| c["type"] == "tool-call-suspended")
        .unwrap_or_else(|| panic!("no question: {body}"));
    let run_id = suspended["runId"].as_str().unwrap().to_owned();
    let call_id = suspended["payload"]["toolCallId"].as_str().unwrap().to_owned();

    // A JSON log line of the drive names the trace it belongs to.
    let line = first.wait_for_line("askloop.question");
    let line: Value = serde_json::from_str(&line).unwrap();
    let drive = line["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "drive")
        .unwrap_or_else(|| panic!("no drive span in {line}"));
    assert_eq!(drive["trace_id"], CALLER_TRACE, "{line}");
    assert_eq!(drive["run_id"], run_id.as_str());

    // Killed once its first drive's spans were received: nothing else of
    // it is flushed.
    receiver
        .wait_for("the first drive", |spans| {
            spans
                .iter()
                .any(|s| s.attr("askloop.drive") == Some("start") && s.attr("run_id") == Some(&run_id))
        })
        .await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    // The second instance: export turned on by [telemetry] alone.
    let mut second = serve(dir.path(), &db, &model.openai_base_url());
    second.args(["--config", config]);
    let second = Serving::start(second);
    let resumed = client
        .post(second.url("/api/agents/assistant/resume-stream"))
        .header("traceparent", format!("00-{RESUMER_TRACE}-{RESUMER_SPAN}-01"))
        .json(&json!({"runId": run_id, "toolCallId": call_id, "resumeData": "staging"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    let chunks = sse_chunks(&resumed.text().await.unwrap());
    assert_eq!(chunks.last().unwrap()["type"], "finish", "{chunks:#?}");

    let spans = receiver
        .wait_for("the resumed drive and its spans", |spans| {
            let of_run = |name: &str| {
                spans
                    .iter()
                    .filter(|s| s.name == name && s.attr("askloop.run.id") == Some(&run_id))
                    .count()
            };
            of_run("invoke_agent assistant") == 2
                && of_run("chat gpt-4o-mini") == 2
                && of_run("execute_tool ask_user") == 2
                && of_run("wait ask_user") == 1
        })
        .await;
    second.terminate();

    // What the receiver holds, compactly, for whoever reads a failure.
    for span in &spans {
        let mut attributes: Vec<_> = span
            .attributes
            .iter()
            .filter(|(k, _)| k.starts_with("gen_ai.") || k.starts_with("askloop.") || k.starts_with("http."))
            .collect();
        attributes.sort();
        eprintln!(
            "[span] {} {} trace={} span={} parent={} links={:?} events={:?} {attributes:?}",
            span.service,
            span.name,
            span.trace_id,
            span.span_id,
            span.parent_span_id,
            span.links,
            span.events.iter().map(|(n, _)| n).collect::<Vec<_>>()
        );
    }

    // One trace: every span of the run is in the caller's trace.
    let of_run: Vec<&Received> = spans
        .iter()
        .filter(|s| s.attr("askloop.run.id") == Some(&run_id))
        .collect();
    assert!(of_run.len() >= 7, "{of_run:#?}");
    for span in &of_run {
        assert_eq!(
            span.trace_id, CALLER_TRACE,
            "{} is in another trace: {span:#?}",
            span.name
        );
    }

    // The request that started the run is the caller's child; the first
    // drive is the request's.
    let start_request = spans
        .iter()
        .find(|s| s.name == "POST /api/agents/{agent_id}/stream")
        .unwrap_or_else(|| panic!("no request span: {spans:#?}"));
    assert_eq!(
        (start_request.trace_id.as_str(), start_request.parent_span_id.as_str()),
        (CALLER_TRACE, CALLER_SPAN)
    );
    assert_eq!(start_request.attr("http.route"), Some("/api/agents/{agent_id}/stream"));
    let drives: Vec<&&Received> = of_run.iter().filter(|s| s.name == "invoke_agent assistant").collect();
    let first_drive = drives
        .iter()
        .find(|s| s.attr("askloop.drive") == Some("start"))
        .unwrap();
    let resumed_drive = drives
        .iter()
        .find(|s| s.attr("askloop.drive") == Some("resume"))
        .unwrap();
    assert_eq!(first_drive.parent_span_id, start_request.span_id);
    assert_eq!(first_drive.service, "askloop-a", "OTEL_SERVICE_NAME");
    assert_eq!(first_drive.attr("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(first_drive.attr("gen_ai.agent.id"), Some("assistant"));
    assert_eq!(first_drive.attr("run_id"), Some(run_id.as_str()));

    // The question raised: an event on the first drive, with its kind.
    let (_, question) = first_drive
        .events
        .iter()
        .find(|(name, _)| name == "askloop.question")
        .unwrap_or_else(|| panic!("no question event: {first_drive:#?}"));
    assert_eq!(
        question.get("askloop.question.kind").map(String::as_str),
        Some("question")
    );
    assert_eq!(question.get("gen_ai.tool.call.id"), Some(&call_id));
    assert_eq!(question.get("gen_ai.tool.name").map(String::as_str), Some("ask_user"));

    // The resume, from another instance, continues the stored context (a
    // child of the first drive) and links the resuming caller's trace
    // instead of joining it.
    assert_eq!(resumed_drive.parent_span_id, first_drive.span_id);
    assert_eq!(resumed_drive.service, "askloop-b", "[telemetry] service_name");
    let resume_request = spans
        .iter()
        .find(|s| s.name == "POST /api/agents/{agent_id}/resume-stream")
        .unwrap();
    assert_eq!(
        (resume_request.trace_id.as_str(), resume_request.parent_span_id.as_str()),
        (RESUMER_TRACE, RESUMER_SPAN)
    );
    assert_eq!(
        resumed_drive.links,
        vec![(RESUMER_TRACE.to_owned(), resume_request.span_id.clone())],
        "the resume request is a link"
    );

    // The model calls, with the GenAI attributes, one in each drive.
    let chats: Vec<&&Received> = of_run.iter().filter(|s| s.name == "chat gpt-4o-mini").collect();
    for chat in &chats {
        assert_eq!(chat.attr("gen_ai.operation.name"), Some("chat"));
        assert_eq!(chat.attr("gen_ai.provider.name"), Some("openai"));
        assert_eq!(chat.attr("gen_ai.system"), Some("openai"));
        assert_eq!(chat.attr("gen_ai.request.model"), Some("gpt-4o-mini"));
        assert!(chat.attr("gen_ai.usage.input_tokens").is_some(), "{chat:#?}");
    }
    // Message contents only where the operator opted in: the second
    // instance's capture_content.
    let contents = |drive: &Received, key: &str| {
        of_run
            .iter()
            .find(|s| s.parent_span_id == drive.span_id && s.attributes.contains_key(key))
            .and_then(|s| s.attr(key))
            .map(str::to_owned)
    };
    assert_eq!(contents(first_drive, "gen_ai.output.messages"), None);
    assert_eq!(contents(first_drive, "gen_ai.tool.call.arguments"), None);
    let output: Value = serde_json::from_str(&contents(resumed_drive, "gen_ai.output.messages").unwrap()).unwrap();
    assert_eq!(
        output,
        json!([{"role": "assistant", "parts": [{"type": "text", "content": "Deploying to User answered: staging."}]}])
    );
    let arguments: Value =
        serde_json::from_str(&contents(resumed_drive, "gen_ai.tool.call.arguments").unwrap()).unwrap();
    assert_eq!(arguments["question"], "Which environment should I deploy to?");
    let mut outputs: Vec<(&str, &str)> = chats
        .iter()
        .map(|c| (c.parent_span_id.as_str(), c.attr("gen_ai.usage.output_tokens").unwrap()))
        .collect();
    outputs.sort();
    let mut expected = vec![
        (first_drive.span_id.as_str(), "24"),
        (resumed_drive.span_id.as_str(), "8"),
    ];
    expected.sort();
    assert_eq!(
        outputs, expected,
        "the question turn (24 tokens) and the closing turn (8)"
    );

    // The tool call: suspended in the first drive, run with the answer in
    // the second.
    let tools: Vec<&&Received> = of_run.iter().filter(|s| s.name == "execute_tool ask_user").collect();
    for tool in &tools {
        assert_eq!(tool.attr("gen_ai.operation.name"), Some("execute_tool"));
        assert_eq!(tool.attr("gen_ai.tool.name"), Some("ask_user"));
        assert_eq!(tool.attr("gen_ai.tool.call.id"), Some(call_id.as_str()));
    }
    let outcome_in = |drive: &Received| {
        tools
            .iter()
            .find(|t| t.parent_span_id == drive.span_id)
            .and_then(|t| t.attr("askloop.tool.outcome"))
            .map(str::to_owned)
    };
    assert_eq!(outcome_in(first_drive).as_deref(), Some("suspended"));
    assert_eq!(outcome_in(resumed_drive).as_deref(), Some("result"));

    // The wait: from the stored times, in the run's trace under its first
    // drive, with how and through what it was resolved.
    let wait = of_run.iter().find(|s| s.name == "wait ask_user").unwrap();
    assert_eq!(wait.parent_span_id, first_drive.span_id);
    assert_eq!(wait.attr("askloop.wait.resolution"), Some("answered"));
    assert_eq!(wait.attr("askloop.wait.via"), Some("http"));
    assert_eq!(wait.attr("askloop.question.kind"), Some("question"));
    assert_eq!(wait.attr("gen_ai.tool.call.id"), Some(call_id.as_str()));
    assert!(wait.start >= first_drive.start && wait.start <= wait.end, "{wait:#?}");
    assert!(wait.end <= resumed_drive.end, "{wait:#?} ends after the resume");

    drop_schema(&base, &schema).await;
}

#[tokio::test]
async fn a_run_completes_while_the_trace_receiver_is_down() {
    let dir = tempfile::tempdir().unwrap();
    // A port that was free a moment ago: nothing listens there.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let model = askloop_testkit::FakeServer::with_responder(askloop_testkit::workload::deploy_responder())
        .await
        .unwrap();
    let db = dir.path().join("runs.db");
    let mut cmd = serve(dir.path(), db.to_str().unwrap(), &model.openai_base_url());
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &dead)
        .args(["--model", "openai/gpt-4o-mini"]);
    let mut serving = Serving::start(cmd);
    let client = reqwest::Client::new();
    let asked = serving.ask(&client, "assistant", None).await;
    let body = serving.answer(&client, "assistant", &asked).await;
    let chunks = sse_chunks(&body);
    assert_eq!(chunks.last().unwrap()["type"], "finish", "{chunks:#?}");
    let run: Value = client
        .get(serving.url(&format!("/api/runs/{}", asked.run_id)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "completed");
    serving.terminate();
    let status = serving.exit_within(Duration::from_secs(60)).expect("serve stopped");
    assert_eq!(
        status.code(),
        Some(0),
        "a receiver that is down does not fail the server"
    );
    let stderr = serving.rest_of_stderr().join("\n");
    assert!(
        stderr.contains("BatchSpanProcessor.ExportError"),
        "the failed export is logged for the operator: {stderr}"
    );
}

/// The value of the sample `name_and_labels` (as the text writes it) in
/// a Prometheus text exposition.
fn sample(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| line.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name_and_labels} in:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

/// The value of the point of `metric` with exactly `attributes`.
fn point(points: &[Point], metric: &str, attributes: &[(&str, &str)]) -> Option<f64> {
    points
        .iter()
        .find(|p| {
            p.metric == metric
                && p.attributes.len() == attributes.len()
                && attributes
                    .iter()
                    .all(|(k, v)| p.attributes.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|p| p.value)
}

#[tokio::test]
async fn the_servers_figures_go_out_as_otlp_metrics_equal_to_its_metrics_page_and_without_run_ids() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start().await;
    let model = askloop_testkit::FakeServer::with_responder(askloop_testkit::workload::deploy_responder())
        .await
        .unwrap();
    let db = dir.path().join("runs.db");
    let mut cmd = serve(dir.path(), db.to_str().unwrap(), &model.openai_base_url());
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env("OTEL_TRACES_EXPORTER", "none")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .args(["--model", "openai/gpt-4o-mini"]);
    let serving = Serving::start(cmd);
    let client = reqwest::Client::new();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let asked = serving.ask(&client, "assistant", None).await;
        let body = serving.answer(&client, "assistant", &asked).await;
        assert_eq!(sse_chunks(&body).last().unwrap()["type"], "finish");
        runs.push(asked.run_id);
    }

    // Counters only grow: once the export shows both runs' last model call,
    // nothing moves any more and the two must agree.
    let ok_calls = [("provider", "openai"), ("outcome", "ok")];
    let deadline = Instant::now() + Duration::from_secs(60);
    let exported = loop {
        let points = receiver.last_export();
        if point(&points, "askloop_model_calls", &ok_calls) == Some(4.0)
            && point(&points, "askloop_runs_finished", &[("status", "completed")]) == Some(2.0)
        {
            break points;
        }
        assert!(
            Instant::now() < deadline,
            "the export never showed both runs: {points:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let page = client
        .get(serving.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let pairs = [
        ("askloop_runs_started_total", "askloop_runs_started", vec![]),
        (
            "askloop_runs_finished_total{status=\"completed\"}",
            "askloop_runs_finished",
            vec![("status", "completed")],
        ),
        (
            "askloop_resolutions_total{kind=\"answered\",via=\"http\",edited=\"false\"}",
            "askloop_resolutions",
            vec![("kind", "answered"), ("via", "http"), ("edited", "false")],
        ),
        (
            "askloop_model_calls_total{provider=\"openai\",outcome=\"ok\"}",
            "askloop_model_calls",
            ok_calls.to_vec(),
        ),
        (
            "askloop_model_call_seconds_count{provider=\"openai\"}",
            "askloop_model_call_seconds",
            vec![("provider", "openai")],
        ),
    ];
    for (in_text, name, attributes) in pairs {
        let scraped = sample(&page, in_text);
        assert_eq!(point(&exported, name, &attributes), Some(scraped), "{in_text}");
    }
    assert_eq!(sample(&page, "askloop_runs_started_total"), 2.0);
    for p in &exported {
        for (key, value) in &p.attributes {
            assert!(
                !runs.contains(value) && !key.contains("run"),
                "{} carries a run: {key}={value}",
                p.metric
            );
        }
    }
    assert!(receiver.spans().is_empty(), "OTEL_TRACES_EXPORTER=none exports no span");
    serving.terminate();
}

/// The signing key of the answer links test.
const LINK_KEY: &str = "a-link-signing-key-for-the-traces-test-0123";

#[tokio::test]
async fn an_answer_links_token_is_in_no_exported_span_and_no_log_line_only_its_route() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start().await;
    let model = askloop_testkit::FakeServer::with_responder(askloop_testkit::workload::deploy_responder())
        .await
        .unwrap();
    let config = dir.path().join("askloop.toml");
    std::fs::write(
        &config,
        "public_url = \"https://askloop.example.com\"\n\n[links]\n\n[[links.keys]]\nid = \"k1\"\nsecret_env = \"ASKLOOP_TEST_LINK_KEY\"\n\n\
         [agents.assistant]\ninstructions = \"Ask before deploying.\"\nmodel = \"openai/gpt-4o-mini\"\ntools = [\"ask_user\"]\n",
    )
    .unwrap();
    let db = dir.path().join("runs.db");
    let mut cmd = serve(dir.path(), db.to_str().unwrap(), &model.openai_base_url());
    // Debug logs hold every line info does, and more.
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env("ASKLOOP_TEST_LINK_KEY", LINK_KEY)
        .env("ASKLOOP_LOG", "debug")
        .args(["--config", config.to_str().unwrap()]);
    let serving = Serving::start(cmd);
    let client = reqwest::Client::new();
    let asked = serving.ask(&client, "assistant", None).await;

    let minted: Value = client
        .post(serving.url(&format!("/api/runs/{}/links", asked.run_id)))
        .json(&json!({"to": "Bob"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let url = minted["url"].as_str().unwrap_or_else(|| panic!("no link: {minted}"));
    let token = url.rsplit_once("/links/").unwrap().1.to_owned();
    let (claims, tag) = token.split_once('.').unwrap();
    let link = |tail: &str| serving.url(&format!("/links/{token}{tail}"));

    // The page, its question, a mistyped address and the answer.
    assert_eq!(client.get(link("")).send().await.unwrap().status(), 200);
    assert_eq!(client.get(link("/")).send().await.unwrap().status(), 404);
    assert_eq!(client.delete(link("")).send().await.unwrap().status(), 405);
    let question: Value = client
        .get(link("/question?from=mail"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let answered = client
        .post(link(""))
        .json(&json!({"formToken": question["formToken"], "resumeData": "staging"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200, "{}", answered.text().await.unwrap());

    let spans = receiver
        .wait_for("the answer's request and the drive it resumed", |spans| {
            spans.iter().any(|s| s.name == "POST /links/{token}")
                && spans
                    .iter()
                    .any(|s| s.attr("askloop.drive") == Some("resume") && s.attr("run_id") == Some(&asked.run_id))
        })
        .await;
    serving.terminate();
    let mut lines = serving.banner.clone();
    lines.extend(serving.rest_of_stderr());

    let holds_token = |text: &str| text.contains(claims) || text.contains(tag);
    for span in &spans {
        let texts = std::iter::once(&span.name).chain(span.attributes.values()).chain(
            span.events
                .iter()
                .flat_map(|(name, attributes)| std::iter::once(name).chain(attributes.values())),
        );
        for text in texts {
            assert!(
                !holds_token(text),
                "span {} exports the link's token: {span:#?}",
                span.name
            );
        }
    }
    let answer = spans.iter().find(|s| s.name == "POST /links/{token}").unwrap();
    assert_eq!(
        (answer.attr("http.route"), answer.attr("path")),
        (Some("/links/{token}"), Some("/links/{token}")),
        "the request is exported by its route: {answer:#?}"
    );
    let question_span = spans.iter().find(|s| s.name == "GET /links/{token}/question").unwrap();
    assert_eq!(question_span.attr("path"), Some("/links/{token}/question"));

    let leaked: Vec<&String> = lines.iter().filter(|line| holds_token(line)).collect();
    assert!(leaked.is_empty(), "log lines hold the link's token: {leaked:#?}");
    let logged = |needle: &str| lines.iter().any(|line| line.contains(needle));
    assert!(
        logged("path=/links/{token}/question") && logged("path=/links/{token}"),
        "the link's requests are logged, by their route"
    );
}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

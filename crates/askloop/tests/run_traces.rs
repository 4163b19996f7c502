//! A run's trace as the OpenTelemetry SDK records it, in one process with
//! a manual clock: a run that waits on a question with a time limit, which
//! a later sweep expires. The run is one trace under its caller's; the
//! expiry's drive continues the stored context and links the sweep's own
//! span; the wait is a span from the suspension to the expiry, at the
//! clock's times, naming who expired it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use askloop::{Agent, AskUser, Author, Clock, Interface, ManualClock, MemoryStore, RunStatus, RunStore, ScriptedModel};
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::prelude::*;

const ASK: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which city?"}}]},
  {"text": "Model saw: {{toolResults}}"}
]}"#;

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[tokio::test]
async fn an_expired_question_continues_the_runs_trace_with_a_wait_span_at_the_stored_times() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _guard = tracing::subscriber::set_default(subscriber);

    let clock = ManualClock::starting_at("2026-12-04T10:00:00Z".parse().unwrap());
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let agent = Agent::builder("asker")
        .model(Arc::new(ScriptedModel::from_json("scripted/script", ASK).unwrap()))
        .tool(AskUser::new())
        .store(store.clone())
        .clock(Arc::new(clock.clone()))
        .time_limit_for("ask_user", Duration::from_secs(600))
        .build()
        .unwrap();

    // The caller: a span of another trace, made the parent by hand as a
    // server does from a `traceparent` header.
    let caller_trace = TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap();
    let caller = tracing::info_span!("caller");
    askloop::telemetry::continue_caller_trace(&caller, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    let caller_span = caller.context().span().span_context().span_id();
    let output = {
        let _entered = caller.enter();
        agent.stream("plan").await.unwrap()
    }
    .output()
    .await;
    assert_eq!(output.status, RunStatus::Suspended);
    let run = store.get(&output.run_id).await.unwrap().unwrap();
    let stored =
        askloop::telemetry::parse_traceparent(run.trace_parent.as_deref().expect("a trace context stored")).unwrap();
    assert_eq!(stored.trace_id(), caller_trace);

    // The sweep, in a trace of its own, after the time limit.
    clock.set("2026-12-04T10:10:01Z".parse().unwrap());
    let sweep = tracing::info_span!("sweep");
    let sweep_context = sweep.context().span().span_context().clone();
    let streams = {
        let _entered = sweep.enter();
        agent.expire_runs(Author::named(Interface::Cli, "alice")).await.unwrap()
    };
    assert_eq!(streams.len(), 1);
    for stream in streams {
        assert_eq!(stream.output().await.status, RunStatus::Completed);
    }
    drop(sweep);
    drop(caller);

    let spans = exporter.get_finished_spans().unwrap();
    let of_run: Vec<&SpanData> = spans
        .iter()
        .filter(|s| attr(s, "askloop.run.id").as_deref() == Some(output.run_id.as_str()))
        .collect();
    for span in &of_run {
        assert_eq!(span.span_context.trace_id(), caller_trace, "{span:#?}");
    }
    let drive = |kind: &str| {
        *of_run
            .iter()
            .find(|s| s.name == "invoke_agent asker" && attr(s, "askloop.drive").as_deref() == Some(kind))
            .unwrap_or_else(|| panic!("no {kind} drive in {of_run:#?}"))
    };
    let first = drive("start");
    let later = drive("resume");
    assert_eq!(first.parent_span_id, caller_span);
    assert_eq!(
        first.span_context.span_id(),
        stored.span_id(),
        "the stored context is the first drive's"
    );
    assert_eq!(later.parent_span_id, first.span_context.span_id());
    let links: Vec<(TraceId, SpanId)> = later
        .links
        .iter()
        .map(|l| (l.span_context.trace_id(), l.span_context.span_id()))
        .collect();
    assert_eq!(links, vec![(sweep_context.trace_id(), sweep_context.span_id())]);

    let wait = of_run.iter().find(|s| s.name == "wait ask_user").expect("a wait span");
    assert_eq!(wait.parent_span_id, first.span_context.span_id());
    assert_eq!(attr(wait, "askloop.wait.resolution").as_deref(), Some("expired"));
    assert_eq!(attr(wait, "askloop.wait.via").as_deref(), Some("cli"));
    assert_eq!(attr(wait, "askloop.wait.by").as_deref(), Some("alice"));
    let at = |text: &str| SystemTime::from(text.parse::<chrono::DateTime<chrono::Utc>>().unwrap());
    assert_eq!(
        wait.start_time,
        at("2026-12-04T10:00:00Z"),
        "raised when the suspension was stored"
    );
    assert_eq!(
        wait.end_time,
        at("2026-12-04T10:10:01Z"),
        "resolved when the expiry was decided"
    );

    // The model call of the resumed drive is the scripted model's `chat`.
    let chats: Vec<&&SpanData> = of_run.iter().filter(|s| s.name == "chat script").collect();
    assert_eq!(chats.len(), 2, "{of_run:#?}");
    assert!(
        chats
            .iter()
            .all(|c| attr(c, "gen_ai.provider.name").as_deref() == Some("scripted"))
    );
}

#[tokio::test]
async fn a_recovered_run_continues_its_stored_trace() {
    // No global provider here (the wait spans use it; the other test sets
    // it): the drive's spans go through the layer alone.
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _guard = tracing::subscriber::set_default(subscriber);

    // A run whose driver died: running, its lease long run out, with the
    // trace context its first drive stored.
    let clock = ManualClock::starting_at("2026-12-04T10:00:00Z".parse().unwrap());
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let stored = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let now = clock.now();
    let run = {
        let mut record = askloop::RunRecord::default().with_calls(RunStatus::Running, Vec::new());
        record.run_id = "stranded".into();
        record.agent_id = "asker".into();
        record.created_at = now;
        record.updated_at = now;
        record.message_count = 1;
        record.lease = Some(askloop::Lease::new("dead", now - chrono::Duration::minutes(5)));
        record.trace_parent = Some(stored.into());
        record
    };
    store.create(&run, &[askloop::Message::user("plan")]).await.unwrap();
    let agent = Agent::builder("asker")
        .model(Arc::new(ScriptedModel::from_json("scripted/script", ASK).unwrap()))
        .tool(AskUser::new())
        .store(store.clone())
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();

    let recovered = agent.recover_runs(Author::via(Interface::Server)).await.unwrap();
    assert_eq!(recovered.len(), 1);
    for stream in recovered {
        assert_eq!(stream.output().await.status, RunStatus::Suspended);
    }

    let spans = exporter.get_finished_spans().unwrap();
    let drive = spans
        .iter()
        .find(|s| s.name == "invoke_agent asker")
        .unwrap_or_else(|| panic!("no drive in {spans:#?}"));
    assert_eq!(attr(drive, "askloop.drive").as_deref(), Some("recover"));
    let parent = askloop::telemetry::parse_traceparent(stored).unwrap();
    assert_eq!(drive.span_context.trace_id(), parent.trace_id());
    assert_eq!(drive.parent_span_id, parent.span_id());
    assert!(drive.links.is_empty(), "no request drove it: {drive:#?}");
    let chat = spans.iter().find(|s| s.name == "chat script").expect("the model call");
    assert_eq!(chat.parent_span_id, drive.span_context.span_id());
}

//! A run's work is traced in spans a subscriber can filter and correlate:
//! one per model step (run id, step number) and one per tool call (its id).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use askloop::{MemoryStore, RunStatus};
use common::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Records every span opened: its name and its fields as `name=value`.
#[derive(Default)]
struct SpanRecorder {
    spans: Arc<Mutex<Vec<(String, String)>>>,
    next: AtomicU64,
}

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl Subscriber for SpanRecorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let mut fields = Fields(String::new());
        attrs.record(&mut fields);
        let name = attrs.metadata().name().to_owned();
        self.spans.lock().unwrap().push((name, fields.0));
        Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[tokio::test]
async fn each_model_step_and_each_tool_call_has_its_own_span() {
    let recorder = SpanRecorder::default();
    let spans = Arc::clone(&recorder.spans);
    let _guard = tracing::subscriber::set_default(recorder);
    let script = r#"{"turns": [
      {"toolCalls": [{"id": "c1", "name": "ask_user", "args": {"question": "Where?"}}]},
      {"text": "Done."}
    ]}"#;
    let agent = agent_with(CountingModel::new(script), Arc::new(MemoryStore::new()));
    let (_, output) = run(&agent, "Deploy").await;
    assert_eq!(output.status, RunStatus::Suspended);

    let spans = spans.lock().unwrap().clone();
    let step = spans
        .iter()
        .find(|(name, _)| name == "model_step")
        .unwrap_or_else(|| panic!("no model_step span in {spans:?}"));
    assert!(step.1.contains(&format!("run_id={} ", output.run_id)), "{step:?}");
    assert!(step.1.contains("step=1 "), "{step:?}");
    let call = spans
        .iter()
        .find(|(name, _)| name == "tool_call")
        .unwrap_or_else(|| panic!("no tool_call span in {spans:?}"));
    assert!(call.1.contains("tool_call_id=c1 "), "{call:?}");
    assert!(call.1.contains("tool=ask_user "), "{call:?}");
}

//! What `GET /metrics` reports, in the Prometheus (OpenMetrics) text format.
//!
//! Two kinds of figures, named apart so that several servers on one
//! database never add up to double:
//!
//! - **This server's**: what passed through its store (runs started and
//!   finished, resolutions and how long they waited, store errors, webhook
//!   deliveries), and its model calls (latency and outcome by provider,
//!   seen by wrapping each agent's model: [`Metrics::observe_model`]). Each write is made by exactly one server, so summing these
//!   over servers is right. They are seen by wrapping the store the agents
//!   are built on ([`Metrics::observe_store`]): the library's decisions need
//!   no hook of their own.
//! - **The store's** (`askloop_store_*`): runs and calls waiting by agent,
//!   runs running. Every server on one database reports the same figures:
//!   aggregate them with `max`, never `sum`. They are read from the store's
//!   status index ([`RunStore::waiting`], [`RunStore::count`]) every
//!   [`ServerOptions::metrics_every`](crate::ServerOptions::metrics_every),
//!   on a blocking thread, never per scrape and never on a request thread; a
//!   scrape only formats figures already in memory.
//!
//! No figure is labelled with a run, thread or resource id.
//!
//! Each figure is also recorded, under the same name and labels, on the
//! `askloop` meter of the process's global OpenTelemetry meter provider
//! ([`Otel`]): exported over OTLP when the process installed one (as
//! `askloop serve` does when export is on; its reader runs on a thread of
//! its own), a no-op otherwise. Both are written by the same calls, so the
//! two never disagree.

mod model;
mod store;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use askloop::{Model, Resolution, RunQuery, RunStatus, RunStore};
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use opentelemetry::KeyValue;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::AppState;

use store::Observed;

/// The content type of the OpenMetrics text format.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the wait histogram, in seconds: from a person answering
/// at once to a question left for a week.
const WAIT_BUCKETS: [f64; 13] = [
    1.0,
    5.0,
    15.0,
    60.0,
    300.0,
    900.0,
    3600.0,
    4.0 * 3600.0,
    12.0 * 3600.0,
    86400.0,
    3.0 * 86400.0,
    7.0 * 86400.0,
    30.0 * 86400.0,
];

/// Upper bounds of the model call histograms, in seconds: from a local
/// model's first token to a long reply of a slow one.
const MODEL_BUCKETS: [f64; 12] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0];

/// How many suspended runs' last write times are kept to measure their
/// waits: more than are answered between two reads of one run in any
/// ordinary load; past it the memory is cleared (a few waits go unmeasured).
const REMEMBERED_WAITS: usize = 4096;

type Labels1 = [(&'static str, &'static str); 1];
type AgentLabel = [(&'static str, String); 1];
type ProviderLabel = [(&'static str, String); 1];
/// A histogram for each label set, with the buckets its constructor gives.
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// The figures of one server, shared by its store wrapper, its sampler and
/// its `/metrics` route. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    figures: Arc<Figures>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

struct Figures {
    registry: Registry,
    runs_started: Counter,
    runs_finished: Family<Labels1, Counter>,
    resolutions: Family<[(&'static str, &'static str); 3], Counter>,
    waits: Family<Labels1, Histogram, fn() -> Histogram>,
    store_errors: Family<Labels1, Counter>,
    deliveries: Family<Labels1, Counter>,
    runs_waiting: Family<AgentLabel, Gauge>,
    calls_waiting: Family<AgentLabel, Gauge>,
    runs_running: Gauge,
    model_calls: Family<[(&'static str, String); 2], Counter>,
    model_seconds: Histograms<ProviderLabel>,
    model_first_event_seconds: Histograms<ProviderLabel>,
    /// The same figures, for OpenTelemetry.
    otel: Otel,
    /// When each suspended run read lately was last written, by (run id,
    /// version): the start of the wait that the write resolving it ends.
    waiting_since: Mutex<HashMap<(String, i64), DateTime<Utc>>>,
}

/// What each figure means (its `# HELP` line, and its OpenTelemetry
/// description), by name without the `askloop_` prefix.
const HELP: [(&str, &str); 12] = [
    ("runs_started", "Runs started through this server's store"),
    (
        "runs_finished",
        "Runs this server's store wrote finished, by status (completed, failed, cancelled)",
    ),
    (
        "resolutions",
        "Resolutions written through this server's store, by kind (answered, declined, approved, denied, expired, cancelled, recovered, superseded), by the interface they came through (via: http, page, mcp, server, rule, ...) and whether the arguments were edited",
    ),
    (
        "wait_seconds",
        "How long a question or approval waited before its resolution, by kind: from the run's last write while it waited to the resolution",
    ),
    (
        "store_errors",
        "Store calls of this server that failed, by operation (conflicts and other lost races are not errors)",
    ),
    (
        "webhook_deliveries",
        "Webhook delivery attempts this server finished, by outcome (delivered, retry, dead)",
    ),
    (
        "store_runs_waiting",
        "Suspended runs in the store, by agent (store-wide: every server on one database reports the same; aggregate with max)",
    ),
    (
        "store_calls_waiting",
        "Questions and approvals waiting in the store, by agent (store-wide: aggregate with max)",
    ),
    (
        "store_runs_running",
        "Runs running in the store (store-wide: aggregate with max)",
    ),
    (
        "model_calls",
        "Model calls of this server's agents, by provider and outcome (ok, or how it failed: api, transport, protocol, stream, missing_api_key, unknown_model, other); a call cut short by its run's end counts nowhere",
    ),
    (
        "model_call_seconds",
        "How long a model call took, from the request to its last event or its error, by provider",
    ),
    (
        "model_first_event_seconds",
        "How long a model call took to stream its first event, by provider",
    ),
];

/// The meaning of figure `name` (one of [`HELP`]).
fn help(name: &str) -> &'static str {
    HELP.iter().find(|(n, _)| *n == name).map_or("", |(_, help)| help)
}

/// The figures as OpenTelemetry instruments of the global meter provider's
/// `askloop` meter, named as in the Prometheus text (counters without its
/// `_total`).
struct Otel {
    runs_started: opentelemetry::metrics::Counter<u64>,
    runs_finished: opentelemetry::metrics::Counter<u64>,
    resolutions: opentelemetry::metrics::Counter<u64>,
    waits: opentelemetry::metrics::Histogram<f64>,
    store_errors: opentelemetry::metrics::Counter<u64>,
    deliveries: opentelemetry::metrics::Counter<u64>,
    runs_waiting: opentelemetry::metrics::Gauge<i64>,
    calls_waiting: opentelemetry::metrics::Gauge<i64>,
    runs_running: opentelemetry::metrics::Gauge<i64>,
    model_calls: opentelemetry::metrics::Counter<u64>,
    model_seconds: opentelemetry::metrics::Histogram<f64>,
    model_first_event_seconds: opentelemetry::metrics::Histogram<f64>,
}

impl Otel {
    /// The instruments, each described as in the Prometheus text.
    fn new() -> Otel {
        let meter = opentelemetry::global::meter("askloop");
        let name = |short: &str| format!("askloop_{short}");
        let counter = |short: &str| meter.u64_counter(name(short)).with_description(help(short)).build();
        let gauge = |short: &str| meter.i64_gauge(name(short)).with_description(help(short)).build();
        let histogram = |short: &str, buckets: &[f64]| {
            meter
                .f64_histogram(name(short))
                .with_description(help(short))
                .with_unit("s")
                .with_boundaries(buckets.to_vec())
                .build()
        };
        Otel {
            runs_started: counter("runs_started"),
            runs_finished: counter("runs_finished"),
            resolutions: counter("resolutions"),
            waits: histogram("wait_seconds", &WAIT_BUCKETS),
            store_errors: counter("store_errors"),
            deliveries: counter("webhook_deliveries"),
            runs_waiting: gauge("store_runs_waiting"),
            calls_waiting: gauge("store_calls_waiting"),
            runs_running: gauge("store_runs_running"),
            model_calls: counter("model_calls"),
            model_seconds: histogram("model_call_seconds", &MODEL_BUCKETS),
            model_first_event_seconds: histogram("model_first_event_seconds", &MODEL_BUCKETS),
        }
    }
}

fn wait_histogram() -> Histogram {
    Histogram::new(WAIT_BUCKETS)
}

fn model_histogram() -> Histogram {
    Histogram::new(MODEL_BUCKETS)
}

impl Metrics {
    /// Figures at zero.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("askloop");

        let runs_started = Counter::default();
        registry.register("runs_started", help("runs_started"), runs_started.clone());
        let runs_finished = Family::<Labels1, Counter>::default();
        registry.register("runs_finished", help("runs_finished"), runs_finished.clone());
        let resolutions = Family::default();
        registry.register("resolutions", help("resolutions"), resolutions.clone());
        let waits = Family::<Labels1, Histogram, fn() -> Histogram>::new_with_constructor(wait_histogram);
        registry.register("wait_seconds", help("wait_seconds"), waits.clone());
        let store_errors = Family::<Labels1, Counter>::default();
        registry.register("store_errors", help("store_errors"), store_errors.clone());
        let deliveries = Family::<Labels1, Counter>::default();
        registry.register("webhook_deliveries", help("webhook_deliveries"), deliveries.clone());
        let runs_waiting = Family::<AgentLabel, Gauge>::default();
        registry.register("store_runs_waiting", help("store_runs_waiting"), runs_waiting.clone());
        let calls_waiting = Family::<AgentLabel, Gauge>::default();
        registry.register(
            "store_calls_waiting",
            help("store_calls_waiting"),
            calls_waiting.clone(),
        );
        let runs_running = Gauge::default();
        registry.register("store_runs_running", help("store_runs_running"), runs_running.clone());
        let model_calls = Family::default();
        registry.register("model_calls", help("model_calls"), model_calls.clone());
        let model_seconds = Family::<_, Histogram, fn() -> Histogram>::new_with_constructor(model_histogram);
        registry.register("model_call_seconds", help("model_call_seconds"), model_seconds.clone());
        let model_first_event_seconds =
            Family::<_, Histogram, fn() -> Histogram>::new_with_constructor(model_histogram);
        registry.register(
            "model_first_event_seconds",
            help("model_first_event_seconds"),
            model_first_event_seconds.clone(),
        );
        Metrics {
            figures: Arc::new(Figures {
                registry,
                runs_started,
                runs_finished,
                resolutions,
                waits,
                store_errors,
                deliveries,
                runs_waiting,
                calls_waiting,
                runs_running,
                model_calls,
                model_seconds,
                model_first_event_seconds,
                otel: Otel::new(),
                waiting_since: Mutex::default(),
            }),
        }
    }

    /// `store`, with what passes through it counted in these figures. Build
    /// the agents on the store this returns, and give it to the server.
    pub fn observe_store(&self, store: Arc<dyn RunStore>) -> Arc<dyn RunStore> {
        Arc::new(askloop::store::Layered::new(store, Observed::new(self.clone())))
    }

    /// `model`, with its calls timed and counted in these figures, by
    /// provider. Build the agents on the models this returns.
    pub fn observe_model(&self, model: Arc<dyn Model>) -> Arc<dyn Model> {
        Arc::new(model::ObservedModel::new(model, self.clone()))
    }

    fn model_call_ended(&self, provider: &str, outcome: &'static str, took: Duration) {
        let figures = &self.figures;
        figures
            .model_calls
            .get_or_create(&[("provider", provider.to_owned()), ("outcome", outcome.to_owned())])
            .inc();
        figures
            .model_seconds
            .get_or_create(&[("provider", provider.to_owned())])
            .observe(took.as_secs_f64());
        let by = KeyValue::new("provider", provider.to_owned());
        figures
            .otel
            .model_calls
            .add(1, &[by.clone(), KeyValue::new("outcome", outcome)]);
        figures.otel.model_seconds.record(took.as_secs_f64(), &[by]);
    }

    fn model_first_event(&self, provider: &str, took: Duration) {
        self.figures
            .model_first_event_seconds
            .get_or_create(&[("provider", provider.to_owned())])
            .observe(took.as_secs_f64());
        self.figures
            .otel
            .model_first_event_seconds
            .record(took.as_secs_f64(), &[KeyValue::new("provider", provider.to_owned())]);
    }

    /// The figures in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.figures.registry);
        text
    }

    fn store_error(&self, operation: &'static str) {
        self.figures
            .store_errors
            .get_or_create(&[("operation", operation)])
            .inc();
        self.figures
            .otel
            .store_errors
            .add(1, &[KeyValue::new("operation", operation)]);
    }

    fn run_started(&self) {
        self.figures.runs_started.inc();
        self.figures.otel.runs_started.add(1, &[]);
    }

    fn run_written(&self, status: RunStatus) {
        if status.is_finished() {
            self.figures
                .runs_finished
                .get_or_create(&[("status", status.as_str())])
                .inc();
            self.figures
                .otel
                .runs_finished
                .add(1, &[KeyValue::new("status", status.as_str())]);
        }
    }

    fn delivery(&self, outcome: &'static str) {
        self.figures.deliveries.get_or_create(&[("outcome", outcome)]).inc();
        self.figures
            .otel
            .deliveries
            .add(1, &[KeyValue::new("outcome", outcome)]);
    }

    /// Remembers when a suspended run was last written, to measure the wait
    /// that a write at this version will end.
    fn waiting_since(&self, run_id: &str, version: i64, written: DateTime<Utc>) {
        let mut waiting = self
            .figures
            .waiting_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if waiting.len() >= REMEMBERED_WAITS {
            waiting.clear();
        }
        waiting.insert((run_id.to_owned(), version), written);
    }

    /// Counts `resolutions`, written on `run_id` over `version`, and the
    /// waits they ended when the run was read while it waited.
    fn resolved(&self, run_id: &str, version: i64, resolutions: &[Resolution]) {
        let since = self
            .figures
            .waiting_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(run_id.to_owned(), version));
        for resolution in resolutions {
            let edited = if resolution.edit.is_some() { "true" } else { "false" };
            self.figures
                .resolutions
                .get_or_create(&[
                    ("kind", resolution.kind.as_str()),
                    ("via", resolution.author.via.as_str()),
                    ("edited", edited),
                ])
                .inc();
            let kind = KeyValue::new("kind", resolution.kind.as_str());
            self.figures.otel.resolutions.add(
                1,
                &[
                    kind.clone(),
                    KeyValue::new("via", resolution.author.via.as_str()),
                    KeyValue::new("edited", edited),
                ],
            );
            if let (Some(since), Some(_)) = (since, &resolution.tool_call_id) {
                let waited = (resolution.at - since).to_std().unwrap_or_default();
                self.figures
                    .waits
                    .get_or_create(&[("kind", resolution.kind.as_str())])
                    .observe(waited.as_secs_f64());
                self.figures.otel.waits.record(waited.as_secs_f64(), &[kind]);
            }
        }
    }

    /// Sets the store-wide figures from one read of the store.
    fn store_figures(&self, read: &StoreFigures, shown: &mut BTreeSet<String>) {
        let figures = &self.figures;
        // A served agent with nothing waiting, or one whose last run
        // stopped waiting, shows 0, not its last figure or none.
        for agent in shown.iter() {
            if !read.waiting.iter().any(|w| &w.agent_id == agent) {
                figures.runs_waiting.get_or_create(&[("agent", agent.clone())]).set(0);
                figures.calls_waiting.get_or_create(&[("agent", agent.clone())]).set(0);
                let of = [KeyValue::new("agent", agent.clone())];
                figures.otel.runs_waiting.record(0, &of);
                figures.otel.calls_waiting.record(0, &of);
            }
        }
        for waiting in &read.waiting {
            let agent = [("agent", waiting.agent_id.clone())];
            figures.runs_waiting.get_or_create(&agent).set(gauge(waiting.runs));
            figures.calls_waiting.get_or_create(&agent).set(gauge(waiting.calls));
            let of = [KeyValue::new("agent", waiting.agent_id.clone())];
            figures.otel.runs_waiting.record(gauge(waiting.runs), &of);
            figures.otel.calls_waiting.record(gauge(waiting.calls), &of);
            shown.insert(waiting.agent_id.clone());
        }
        figures.runs_running.set(gauge(read.running));
        figures.otel.runs_running.record(gauge(read.running), &[]);
    }
}

fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One read of the store-wide figures.
struct StoreFigures {
    waiting: Vec<askloop::AgentWaiting>,
    running: u64,
}

/// Reads the store-wide figures into `metrics` now and every `every` until
/// the server stops; `agents` (those served) show 0 when nothing of theirs
/// waits, rather than no figure. The reads run on a blocking thread (the SQLite store
/// reads on its caller's thread), so a one-thread server never serves a
/// request late for them; a read that fails leaves the last figures (and
/// counts as a store error when the store is observed).
pub(crate) async fn sample_store(
    metrics: Metrics,
    store: Arc<dyn RunStore>,
    agents: Vec<String>,
    every: Duration,
    mut stopping: watch::Receiver<bool>,
) {
    let mut shown: BTreeSet<String> = agents.into_iter().collect();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        let handle = tokio::runtime::Handle::current();
        let store = Arc::clone(&store);
        let read = tokio::task::spawn_blocking(move || {
            handle.block_on(async {
                let waiting = store.waiting().await?;
                let running = store
                    .count(&RunQuery {
                        status: Some(RunStatus::Running),
                        ..RunQuery::default()
                    })
                    .await?;
                Ok::<_, askloop::StoreError>(StoreFigures { waiting, running })
            })
        })
        .await;
        match read {
            Ok(Ok(read)) => metrics.store_figures(&read, &mut shown),
            Ok(Err(err)) => tracing::warn!(error = %err, "could not read the store's figures for /metrics"),
            Err(err) => tracing::warn!(error = %err, "the read of the store's figures for /metrics stopped"),
        }
    }
}

/// `GET /metrics`: the figures as they are (behind the token on a server
/// with tokens, like the API).
pub(crate) async fn scrape(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], state.metrics.render())
}

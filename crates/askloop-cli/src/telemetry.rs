//! Export to an OpenTelemetry receiver over OTLP/HTTP (protobuf): the spans
//! of runs (see `askloop::telemetry`), and the server's figures (the same
//! as `/metrics`, see `askloop_server::Metrics`).
//!
//! Each signal is off unless its endpoint variable
//! (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`) or `OTEL_EXPORTER_OTLP_ENDPOINT`
//! is set, or the configuration file has a `[telemetry]` table with an
//! `endpoint`; the variables win over the file. `OTEL_SDK_DISABLED=true`
//! turns both off, `OTEL_TRACES_EXPORTER=none` or
//! `OTEL_METRICS_EXPORTER=none` one. `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TIMEOUT`, the batch processor's `OTEL_BSP_*` and
//! `OTEL_METRIC_EXPORT_INTERVAL` (60 s by default) are read by the
//! OpenTelemetry SDK itself.
//!
//! Spans are handed to a batch processor, and figures read by a periodic
//! reader, each exporting from a thread of its own: a run or a request
//! never waits for the receiver, and a receiver that is down only costs the
//! spans the processor's queue cannot hold (the SDK logs the failed
//! exports as warnings).

use std::path::Path;

use askloop_config::ConfigError;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{ExporterBuildError, MetricExporter, Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};
use tracing::{Level, Metadata};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::FilterFn;
use tracing_subscriber::registry::LookupSpan;

/// The service name when neither the environment nor the file names one.
const DEFAULT_SERVICE_NAME: &str = "askloop";

/// The spans exported: a server's requests, a run's drives, its model and
/// tool calls (each run's wait is written apart, with its stored times).
/// Other spans (a request's `run` wrapper, sweeps) only group log lines.
const EXPORTED_SPANS: &[&str] = &["request", "drive", "model_step", "tool_call"];

/// Where one signal (traces, metrics) goes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Signal {
    /// Its URL from the file's `endpoint` (`<endpoint>/v1/traces`,
    /// `<endpoint>/v1/metrics`); `None`: the exporter reads the
    /// `OTEL_EXPORTER_OTLP_*` variables.
    file_endpoint: Option<String>,
}

/// What is exported and where, as the environment and `[telemetry]`
/// decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportPlan {
    /// Spans, if exported.
    traces: Option<Signal>,
    /// The server's figures, if exported.
    metrics: Option<Signal>,
    /// The service name from the file, used when the environment names none.
    service_name: Option<String>,
    /// Whether spans carry message contents.
    capture_content: bool,
}

/// Whether and where to export, from the environment (`env`) and the
/// configuration file at `config` (its `[telemetry]` table only). A
/// `[telemetry]` table that cannot be read is the error, naming its key.
pub fn plan(config: Option<&Path>, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<ExportPlan>, ConfigError> {
    let file = match config.map(askloop_config::read_telemetry) {
        None | Some(Ok(None)) => None,
        Some(Ok(Some(file))) => Some(file),
        Some(Err(err)) if err.key.starts_with("telemetry") => return Err(err),
        // A file that is no TOML at all is reported by the command that
        // reads it whole; a command that does not read it never did.
        Some(Err(_)) => None,
    };
    let set = |name: &str| env(name).filter(|value| !value.trim().is_empty());
    let is = |name: &str, value: &str| set(name).is_some_and(|v| v.trim().eq_ignore_ascii_case(value));
    if is("OTEL_SDK_DISABLED", "true") {
        return Ok(None);
    }
    let file_endpoint = file.as_ref().and_then(|f| f.endpoint.clone());
    let signal = |endpoint_var: &str, exporter_var: &str, path: &str| {
        if is(exporter_var, "none") {
            None
        } else if set(endpoint_var).is_some() || set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
            Some(Signal { file_endpoint: None })
        } else {
            file_endpoint.as_ref().map(|endpoint| Signal {
                file_endpoint: Some(format!("{endpoint}{path}")),
            })
        }
    };
    let traces = signal(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_TRACES_EXPORTER",
        "/v1/traces",
    );
    let metrics = signal(
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_METRICS_EXPORTER",
        "/v1/metrics",
    );
    if traces.is_none() && metrics.is_none() {
        return Ok(None);
    }
    let capture_env =
        set("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT").map(|v| v.trim().eq_ignore_ascii_case("true"));
    Ok(Some(ExportPlan {
        traces,
        metrics,
        service_name: service_name_from(file.as_ref().and_then(|f| f.service_name.clone()), &set),
        capture_content: capture_env.unwrap_or_else(|| file.as_ref().is_some_and(|f| f.capture_content)),
    }))
}

/// The service name to set: `None` when the environment names one (the
/// SDK reads it), else the file's, else [`DEFAULT_SERVICE_NAME`].
fn service_name_from(file: Option<String>, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let named_by_env = env("OTEL_SERVICE_NAME").is_some()
        || env("OTEL_RESOURCE_ATTRIBUTES")
            .is_some_and(|attributes| attributes.split(',').any(|kv| kv.trim().starts_with("service.name=")));
    (!named_by_env).then(|| file.unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned()))
}

/// An exporter that cannot start (its HTTP client, an `OTEL_EXPORTER_OTLP_*`
/// variable it cannot use): which signal, and the SDK's reason.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The span exporter.
    #[error("cannot start trace export: {0}")]
    Traces(#[source] ExporterBuildError),
    /// The metric exporter.
    #[error("cannot start metrics export: {0}")]
    Metrics(#[source] ExporterBuildError),
}

/// Export running: flush and stop it with [`Export::shutdown`].
#[derive(Debug)]
pub struct Export {
    traces: Option<SdkTracerProvider>,
    metrics: Option<SdkMeterProvider>,
}

impl Export {
    /// Starts the exporters, the spans' batch processor and the figures'
    /// periodic reader, and installs them as the global providers (the
    /// server's figures are recorded on the global meter provider). Call
    /// outside the async runtime (the blocking HTTP client has a runtime of
    /// its own).
    pub fn start(plan: &ExportPlan) -> Result<Export, ExportError> {
        let mut resource = Resource::builder();
        if let Some(name) = &plan.service_name {
            resource = resource.with_service_name(name.clone());
        }
        let resource = resource.build();
        let traces = match &plan.traces {
            None => None,
            Some(signal) => {
                let mut exporter = SpanExporter::builder().with_http().with_protocol(Protocol::HttpBinary);
                if let Some(endpoint) = &signal.file_endpoint {
                    exporter = exporter.with_endpoint(endpoint.clone());
                }
                let exporter = exporter.build().map_err(ExportError::Traces)?;
                let provider = SdkTracerProvider::builder()
                    .with_span_processor(BatchSpanProcessor::builder(exporter).build())
                    .with_resource(resource.clone())
                    .build();
                opentelemetry::global::set_tracer_provider(provider.clone());
                askloop::telemetry::capture_message_content(plan.capture_content);
                Some(provider)
            }
        };
        let metrics = match &plan.metrics {
            None => None,
            Some(signal) => {
                let mut exporter = MetricExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary);
                if let Some(endpoint) = &signal.file_endpoint {
                    exporter = exporter.with_endpoint(endpoint.clone());
                }
                let exporter = exporter.build().map_err(ExportError::Metrics)?;
                let provider = SdkMeterProvider::builder()
                    .with_reader(PeriodicReader::builder(exporter).build())
                    .with_resource(resource)
                    .build();
                opentelemetry::global::set_meter_provider(provider.clone());
                Some(provider)
            }
        };
        Ok(Export { traces, metrics })
    }

    /// The `tracing` layer that turns the exported spans into OpenTelemetry
    /// spans (see [`EXPORTED_SPANS`]), with the `askloop` crates' events
    /// at info and above as span events; `None` when spans are not
    /// exported.
    pub fn layer<S>(&self) -> Option<impl Layer<S> + use<S>>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        self.traces.as_ref().map(|provider| {
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("askloop"))
                .with_filter(FilterFn::new(exported))
        })
    }

    /// Exports what is queued (and the figures once more) and stops. A
    /// receiver that does not answer holds this up to the export timeout
    /// (`OTEL_EXPORTER_OTLP_TIMEOUT`, 10 s by default), once per signal.
    pub fn shutdown(self) {
        if let Some(traces) = self.traces
            && let Err(err) = traces.shutdown()
        {
            tracing::warn!(error = %err, "trace export did not finish cleanly");
        }
        if let Some(metrics) = self.metrics
            && let Err(err) = metrics.shutdown()
        {
            tracing::warn!(error = %err, "metrics export did not finish cleanly");
        }
    }
}

/// Whether the OpenTelemetry layer takes `meta`: the askloop crates' spans
/// of [`EXPORTED_SPANS`] and their events at info and above; never the
/// SDK's own (an export failure logged as a span event would be exported).
fn exported(meta: &Metadata<'_>) -> bool {
    if !meta.target().starts_with("askloop") {
        return false;
    }
    if meta.is_span() {
        EXPORTED_SPANS.contains(&meta.name())
    } else {
        *meta.level() <= Level::INFO
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |name| vars.get(name).cloned()
    }

    fn config(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn export_is_off_without_an_endpoint_anywhere() {
        assert_eq!(plan(None, &env_of(&[])).unwrap(), None);
        let file = config("[telemetry]\nservice_name = \"a\"\n");
        assert_eq!(plan(Some(file.path()), &env_of(&[])).unwrap(), None);
    }

    #[test]
    fn the_standard_variables_turn_export_on_and_win_over_the_file() {
        let file = config("[telemetry]\nendpoint = \"http://file:4318\"\nservice_name = \"from-file\"\n");
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318")]);
        let plan = plan(Some(file.path()), &env).unwrap().unwrap();
        let from_env = Some(Signal { file_endpoint: None });
        assert_eq!(
            (&plan.traces, &plan.metrics),
            (&from_env, &from_env),
            "the exporters read the variable itself"
        );
        assert_eq!(plan.service_name.as_deref(), Some("from-file"));
        let traces_only = env_of(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://env:4318/v1/traces")]);
        let plan = super::plan(None, &traces_only).unwrap().unwrap();
        assert_eq!((plan.traces.is_some(), plan.metrics.is_some()), (true, false));
        let metrics_only = env_of(&[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://env:4318/v1/metrics")]);
        let plan = super::plan(None, &metrics_only).unwrap().unwrap();
        assert_eq!((plan.traces.is_some(), plan.metrics.is_some()), (false, true));
    }

    #[test]
    fn the_file_endpoint_is_the_base_of_the_traces_and_metrics_urls() {
        let file = config("[telemetry]\nendpoint = \"http://127.0.0.1:4318\"\ncapture_content = true\n");
        let plan = plan(Some(file.path()), &env_of(&[])).unwrap().unwrap();
        let url = |signal: &Option<Signal>| signal.as_ref().and_then(|s| s.file_endpoint.clone());
        assert_eq!(url(&plan.traces).as_deref(), Some("http://127.0.0.1:4318/v1/traces"));
        assert_eq!(url(&plan.metrics).as_deref(), Some("http://127.0.0.1:4318/v1/metrics"));
        assert_eq!(plan.service_name.as_deref(), Some(DEFAULT_SERVICE_NAME));
        assert!(plan.capture_content);
    }

    #[test]
    fn a_service_name_from_the_environment_is_left_to_the_sdk() {
        let on = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318");
        for named in [
            ("OTEL_SERVICE_NAME", "x"),
            ("OTEL_RESOURCE_ATTRIBUTES", "team=a, service.name=x"),
        ] {
            let plan = plan(None, &env_of(&[on, named])).unwrap().unwrap();
            assert_eq!(plan.service_name, None, "{named:?}");
        }
    }

    #[test]
    fn export_can_be_turned_off_by_the_standard_switches() {
        let on = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318");
        assert_eq!(plan(None, &env_of(&[on, ("OTEL_SDK_DISABLED", "true")])).unwrap(), None);
        let both_off = [on, ("OTEL_TRACES_EXPORTER", "none"), ("OTEL_METRICS_EXPORTER", "none")];
        assert_eq!(plan(None, &env_of(&both_off)).unwrap(), None);
        let no_traces = plan(None, &env_of(&[on, ("OTEL_TRACES_EXPORTER", "none")]))
            .unwrap()
            .unwrap();
        assert_eq!((no_traces.traces.is_some(), no_traces.metrics.is_some()), (false, true));
        let no_metrics = plan(None, &env_of(&[on, ("OTEL_METRICS_EXPORTER", "none")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (no_metrics.traces.is_some(), no_metrics.metrics.is_some()),
            (true, false)
        );
    }

    #[test]
    fn a_bad_telemetry_table_is_an_error_naming_the_key() {
        let file = config("[telemetry]\nendpoint = \"collector:4318\"\n");
        let err = plan(Some(file.path()), &env_of(&[])).unwrap_err();
        assert_eq!(
            (err.file.as_path(), err.key.as_str()),
            (file.path(), "telemetry.endpoint")
        );
        let file = config("[telemetry]\nendpoint = 4318\n");
        let err = plan(Some(file.path()), &env_of(&[])).unwrap_err();
        assert!(err.key.starts_with("telemetry"), "{err}");
    }

    #[test]
    fn a_file_that_is_no_toml_is_left_to_the_command_that_reads_it() {
        let file = config("[agents.a\n");
        assert_eq!(plan(Some(file.path()), &env_of(&[])).unwrap(), None);
        let on = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318")]);
        assert!(
            plan(Some(file.path()), &on).unwrap().is_some(),
            "the variables still turn export on"
        );
    }
}

//! `[telemetry]` in `askloop.toml`: OpenTelemetry trace export (see
//! docs/operations.md). Off unless this table or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
//! variables say where to send; the variables win over the file.
//!
//! ```toml
//! [telemetry]
//! endpoint = "http://127.0.0.1:4318"  # an OTLP/HTTP receiver; traces go to <endpoint>/v1/traces
//! service_name = "askloop-eu"         # service.name (OTEL_SERVICE_NAME wins; default "askloop")
//! capture_content = false             # model output text and tool arguments on the spans
//! ```

use std::path::Path;

use serde::Deserialize;

use super::ConfigError;

/// `[telemetry]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    endpoint: Option<String>,
    service_name: Option<String>,
    capture_content: Option<bool>,
}

/// `[telemetry]`, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TelemetryConfig {
    /// The OTLP/HTTP receiver's base URL (`http://` or `https://`); spans
    /// are sent to `<endpoint>/v1/traces`. `None`: only the environment's
    /// `OTEL_EXPORTER_OTLP_*ENDPOINT` turns export on.
    pub endpoint: Option<String>,
    /// The `service.name` of the exported spans, unless `OTEL_SERVICE_NAME`
    /// (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`) names one.
    pub service_name: Option<String>,
    /// Whether spans carry message contents (model output text, tool call
    /// arguments). Off by default: they may hold what people typed.
    pub capture_content: bool,
}

/// Checks `[telemetry]`: an endpoint is an `http://` or `https://` URL with
/// a host; a service name is not empty.
pub(super) fn resolve_telemetry(
    file: &Path,
    raw: Option<RawTelemetry>,
) -> Result<Option<TelemetryConfig>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let endpoint = match raw.endpoint {
        None => None,
        Some(endpoint) => {
            let trimmed = endpoint.trim().trim_end_matches('/');
            let host = trimmed
                .strip_prefix("http://")
                .or_else(|| trimmed.strip_prefix("https://"))
                .unwrap_or("");
            if host.is_empty() || host.starts_with('/') || trimmed.contains(char::is_whitespace) {
                return Err(ConfigError::new(
                    file,
                    "telemetry.endpoint",
                    format!(
                        "{endpoint:?} is not an OTLP/HTTP endpoint: give the receiver's base URL, e.g. \"http://127.0.0.1:4318\" (spans go to <endpoint>/v1/traces)"
                    ),
                ));
            }
            Some(trimmed.to_owned())
        }
    };
    let service_name = match raw.service_name {
        Some(name) if name.trim().is_empty() => {
            return Err(ConfigError::new(
                file,
                "telemetry.service_name",
                "the service name is empty: give a name such as \"askloop\", or leave the key out",
            ));
        }
        other => other,
    };
    Ok(Some(TelemetryConfig {
        endpoint,
        service_name,
        capture_content: raw.capture_content.unwrap_or(false),
    }))
}

/// Only `[telemetry]` of a configuration file, read before anything else
/// (logging starts before the rest of the file is checked); other keys are
/// not looked at here. `Ok(None)`: the file has no such table. A problem
/// of the table names a key under `telemetry`; one of the file as a whole
/// (unreadable, not TOML) names none.
pub fn read_telemetry(path: &Path) -> Result<Option<TelemetryConfig>, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| ConfigError::new(path, "", format!("cannot read the file: {err}")))?;
    let table: toml::Table = text
        .parse()
        .map_err(|err: toml::de::Error| ConfigError::new(path, "", err.message().trim().to_owned()))?;
    let raw = match table.get("telemetry") {
        None => None,
        Some(value) => Some(
            RawTelemetry::deserialize(value.clone())
                .map_err(|err| ConfigError::new(path, "telemetry", err.message().trim().to_owned()))?,
        ),
    };
    resolve_telemetry(path, raw)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn resolve(text: &str) -> Result<Option<TelemetryConfig>, ConfigError> {
        #[derive(Deserialize)]
        struct OnlyTelemetry {
            telemetry: Option<RawTelemetry>,
        }
        let only: OnlyTelemetry = toml::from_str(text).unwrap();
        resolve_telemetry(Path::new("askloop.toml"), only.telemetry)
    }

    #[test]
    fn a_telemetry_table_is_read_with_its_defaults() {
        let config = resolve("[telemetry]\nendpoint = \"http://127.0.0.1:4318/\"\n")
            .unwrap()
            .unwrap();
        assert_eq!(config.endpoint.as_deref(), Some("http://127.0.0.1:4318"));
        assert_eq!(config.service_name, None);
        assert!(!config.capture_content);
        assert_eq!(resolve("").unwrap(), None);
    }

    #[test]
    fn an_endpoint_that_is_not_an_http_url_is_refused_naming_the_key() {
        for bad in ["127.0.0.1:4318", "grpc://collector:4317", "http://", ""] {
            let err = resolve(&format!("[telemetry]\nendpoint = \"{bad}\"\n")).unwrap_err();
            assert_eq!(err.key, "telemetry.endpoint", "{bad}");
            assert!(err.problem.contains("http://127.0.0.1:4318"), "{}", err.problem);
        }
    }

    #[test]
    fn an_empty_service_name_is_refused() {
        let err = resolve("[telemetry]\nservice_name = \" \"\n").unwrap_err();
        assert_eq!(err.key, "telemetry.service_name");
    }
}

//! What every provider shares on the wire: the HTTP client settings,
//! retries before a response streams, and error bodies. The event stream
//! that follows a successful response is in `sse.rs`.
//!
//! The one rule that shapes this module: a request is retried only while
//! nothing of its answer has reached the agent. Once the first byte of a
//! successful response body is read, a failure is an error event in the
//! model's stream (the agent then fails the run), never a second request
//! whose text would be emitted twice.
//!
//! Every wait is bounded twice: by the idle timeout (no progress for that
//! long) and by the call's total deadline (`Deadline`), which covers the
//! attempts, the waits between them and the whole stream. A server that
//! accepts and never answers, or streams keep-alive comments forever, ends
//! the call with an error instead of holding the run.

use std::time::Duration;

use tokio::time::Instant;

use askloop::{Cause, ErrorChain, ModelError};
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{RequestBuilder, Response, StatusCode};
use serde::Deserialize;

/// How a provider talks HTTP: timeouts and retries.
///
/// ```
/// use std::time::Duration;
/// use askloop_providers::{HttpConfig, RetryPolicy};
///
/// let http = HttpConfig {
///     idle_timeout: Duration::from_secs(60),
///     retry: RetryPolicy { max_retries: 5, ..RetryPolicy::default() },
///     ..HttpConfig::default()
/// };
/// assert_eq!(http.connect_timeout, Duration::from_secs(10));
/// assert_eq!(http.total_timeout, Duration::from_secs(600));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    /// How long opening a connection (TCP and TLS) may take.
    pub connect_timeout: Duration,
    /// How long a call may go without progress: waiting for the response
    /// headers, and between two events of the stream. SSE comments
    /// (`: keep-alive`, `: OPENROUTER PROCESSING`) are not progress: a
    /// server that sends only those is cut off after this long. Generous by
    /// default, because reasoning models can think for minutes before the
    /// first token.
    pub idle_timeout: Duration,
    /// The longest one model call may take, from its first attempt to the
    /// end of its stream, retries and their waits included.
    pub total_timeout: Duration,
    /// When failed requests are tried again.
    pub retry: RetryPolicy,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            total_timeout: Duration::from_secs(600),
            retry: RetryPolicy::default(),
        }
    }
}

/// When a model call must be over: [`HttpConfig::total_timeout`] after it
/// started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    at: Instant,
    total: Duration,
}

impl Deadline {
    /// The deadline of a call starting now.
    pub(crate) fn start(http: &HttpConfig) -> Self {
        let now = Instant::now();
        Deadline {
            at: now.checked_add(http.total_timeout).unwrap_or(now + FAR_FUTURE),
            total: http.total_timeout,
        }
    }

    pub(crate) fn at(&self) -> Instant {
        self.at
    }

    /// Whether a wait of `wait` from now would end after the deadline.
    fn would_pass(&self, wait: Duration) -> bool {
        Instant::now().checked_add(wait).is_none_or(|end| end >= self.at)
    }

    /// The error of a call that ran out of time.
    pub(crate) fn exceeded(&self, provider: &str) -> ModelError {
        ModelError::Transport {
            provider: provider.to_owned(),
            message: format!(
                "the model call took longer than its total timeout of {} and was stopped \
                 (ASKLOOP_MODEL_TIMEOUT or HttpConfig::total_timeout sets it)",
                human(self.total)
            ),
            source: None,
        }
    }
}

/// A time so far away it is never reached (a year), for durations that
/// would overflow an `Instant`.
const FAR_FUTURE: Duration = Duration::from_secs(365 * 24 * 3600);

pub(crate) use askloop::human_duration as human;

/// Retries of a request that failed before its response began to stream:
/// connection errors, HTTP 408, 429 and 5xx (Anthropic's 529 overload
/// included). Exponential backoff with jitter; a `Retry-After` (or OpenAI's
/// `retry-after-ms`) header is honoured instead when present.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retries).
    pub max_retries: u32,
    /// The wait before the first retry; it doubles at each retry.
    pub initial_backoff: Duration,
    /// The longest computed wait between two attempts.
    pub max_backoff: Duration,
    /// The longest `Retry-After` honoured; a server asking for a longer wait
    /// gets its error returned at once rather than a run that hangs.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based): askloop's one
    /// [`Backoff`](askloop::Backoff), doubling from `initial_backoff` up to
    /// `max_backoff`, with jitter so that many clients failing together do
    /// not retry together.
    fn backoff(&self, retry: u32) -> Duration {
        askloop::Backoff::new(self.initial_backoff, self.max_backoff).wait(retry)
    }
}

/// How many idle connections to one provider host a client keeps open for
/// the next calls. Without a bound, a burst of N calls at once (a server
/// resuming N runs) leaves N idle connections and their buffers behind for
/// the pool's idle timeout; a few dozen serve any steady rate of calls.
const IDLE_CONNECTIONS_PER_HOST: usize = 32;

/// Builds the `reqwest` client for a provider.
pub(crate) fn client(provider: &str, http: &HttpConfig) -> Result<reqwest::Client, ModelError> {
    reqwest::Client::builder()
        .connect_timeout(http.connect_timeout)
        .pool_max_idle_per_host(IDLE_CONNECTIONS_PER_HOST)
        .build()
        .map_err(|err| ModelError::Transport {
            provider: provider.to_owned(),
            message: format!("cannot build the HTTP client: {err}"),
            source: Some(Cause::new(err)),
        })
}

/// A request URL parsed once, when the model is built, rather than for
/// every request. A URL that does not parse (or has no host) is kept as
/// text and given to reqwest as before, so it fails the same way: a
/// builder error at the first attempt, not retried.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    text: String,
    parsed: Option<reqwest::Url>,
}

/// Why a request got no response.
#[derive(Debug)]
pub(crate) enum SendError {
    /// The request could not be built: sending it again would fail the same
    /// way.
    Builder(reqwest::Error),
    /// reqwest could not send it, or got no response.
    Reqwest(reqwest::Error),
}

impl Endpoint {
    pub(crate) fn new(text: String) -> Self {
        let parsed = reqwest::Url::parse(&text).ok().filter(reqwest::Url::has_host);
        Endpoint { text, parsed }
    }

    /// The URL as configured, for error messages.
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// A `POST` to this URL.
    pub(crate) fn post(&self, client: &reqwest::Client) -> RequestBuilder {
        match &self.parsed {
            Some(url) => client.post(url.clone()),
            None => client.post(&self.text),
        }
    }

    /// Sends a request made by [`Endpoint::post`].
    pub(crate) async fn send(&self, request: RequestBuilder) -> Result<Response, SendError> {
        request.send().await.map_err(|err| match err.is_builder() {
            true => SendError::Builder(err),
            false => SendError::Reqwest(err),
        })
    }
}

/// A header value checked once, when the model is built (an API key),
/// marked sensitive so that it is never logged. `None` when the value is
/// not a valid header value: the caller then sets it the usual way, which
/// fails the request as before.
pub(crate) fn sensitive_header(value: String) -> Option<HeaderValue> {
    let mut value = HeaderValue::try_from(value).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// Sends a request, retrying what may be retried, and returns a response
/// with a success status whose body has not been read yet.
///
/// `make` builds a fresh request for each attempt (a request is consumed by
/// sending it); `url` is only for error messages. Nothing is waited for
/// past `deadline`: an attempt still waiting then is abandoned, and a retry
/// whose backoff would end after it is not made.
pub(crate) async fn send_with_retries(
    provider: &str,
    endpoint: &Endpoint,
    http: &HttpConfig,
    deadline: Deadline,
    make: impl Fn() -> RequestBuilder,
) -> Result<Response, ModelError> {
    let url = endpoint.as_str();
    let mut retry = 0u32;
    loop {
        let idle_end = Instant::now().checked_add(http.idle_timeout).unwrap_or(deadline.at());
        let attempt = tokio::time::timeout_at(idle_end.min(deadline.at()), endpoint.send(make())).await;
        let (error, wait) = match attempt {
            Err(_) if Instant::now() >= deadline.at() => {
                return Err(with_attempts(deadline.exceeded(provider), retry + 1));
            }
            Err(_) => (
                ModelError::Transport {
                    provider: provider.to_owned(),
                    message: format!(
                        "no response within the idle timeout of {} (ASKLOOP_MODEL_IDLE_TIMEOUT or \
                         HttpConfig::idle_timeout sets it)",
                        human(http.idle_timeout)
                    ),
                    source: None,
                },
                None,
            ),
            Ok(Err(SendError::Builder(err))) => return Err(transport(provider, err)),
            Ok(Err(SendError::Reqwest(err))) => (transport(provider, err), None),
            Ok(Ok(response)) if response.status().is_success() => {
                return if is_json(response.headers()) {
                    Err(json_instead_of_stream(provider, response, http.idle_timeout).await)
                } else {
                    Ok(response)
                };
            }
            Ok(Ok(response)) => {
                let status = response.status();
                let wait = retry_after(response.headers());
                let body = read_error_body(response, http.idle_timeout).await;
                let error = ModelError::Api {
                    provider: provider.to_owned(),
                    status: status.as_u16(),
                    message: if status == StatusCode::NOT_FOUND {
                        // Most often a base URL without (or with a doubled) `/v1`.
                        format!(
                            "{} (POST {url}: check the base URL and the model name)",
                            error_message(&body)
                        )
                    } else {
                        error_message(&body)
                    },
                };
                if !is_retryable(status) {
                    return Err(error);
                }
                (error, wait)
            }
        };
        if retry >= http.retry.max_retries {
            return Err(with_attempts(error, retry + 1));
        }
        let wait = match wait {
            Some(wait) if wait > http.retry.max_retry_after => return Err(error),
            Some(wait) => wait,
            None => http.retry.backoff(retry),
        };
        if deadline.would_pass(wait) {
            // The retry could not finish in time: the last error says more
            // than the deadline would.
            return Err(with_attempts(error, retry + 1));
        }
        tracing::debug!(provider, retry = retry + 1, ?wait, error = %error, "retrying model request");
        tokio::time::sleep(wait).await;
        retry += 1;
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

/// A success status with a JSON body where an event stream was asked for:
/// some proxies and servers report errors this way. Their message is
/// surfaced; anything else says what came instead of the stream.
async fn json_instead_of_stream(provider: &str, response: Response, idle: Duration) -> ModelError {
    let status = response.status().as_u16();
    let body = read_error_body(response, idle).await;
    if let Ok(envelope) = serde_json::from_str::<ErrorEnvelope>(&body) {
        return ModelError::Api {
            provider: provider.to_owned(),
            status,
            message: envelope.error.describe(),
        };
    }
    ModelError::Protocol {
        provider: provider.to_owned(),
        message: format!(
            "expected an event stream (text/event-stream) but got JSON; does the server support `stream: true`? body: {}",
            error_message(&body)
        ),
    }
}

/// Says how many attempts were made, so a failed run tells that retrying
/// happened and did not help.
fn with_attempts(error: ModelError, attempts: u32) -> ModelError {
    if attempts <= 1 {
        return error;
    }
    match error {
        ModelError::Api {
            provider,
            status,
            message,
        } => ModelError::Api {
            provider,
            status,
            message: format!("{message} (after {attempts} attempts)"),
        },
        ModelError::Transport {
            provider,
            message,
            source,
        } => ModelError::Transport {
            provider,
            message: format!("{message} (after {attempts} attempts)"),
            source,
        },
        other => other,
    }
}

fn is_retryable(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT || status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// The wait a server asked for: `retry-after-ms` (OpenAI) or `Retry-After`
/// in seconds. An HTTP date is not honoured (the computed backoff applies).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| -> Option<f64> {
        let value: f64 = headers.get(name)?.to_str().ok()?.trim().parse().ok()?;
        (value.is_finite() && value >= 0.0).then_some(value)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    number(RETRY_AFTER.as_str()).map(Duration::from_secs_f64)
}

/// Reads an error body, at most a few KB and within the idle timeout.
async fn read_error_body(response: Response, idle: Duration) -> String {
    const LIMIT: usize = 8 * 1024;
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while body.len() < LIMIT {
        match tokio::time::timeout(idle, stream.next()).await {
            Ok(Some(Ok(bytes))) => body.extend_from_slice(&bytes),
            _ => break,
        }
    }
    body.truncate(LIMIT);
    String::from_utf8_lossy(&body).into_owned()
}

/// `{"error": {"message", "type", "code"}}`, the shape of both OpenAI's and
/// Anthropic's error bodies (Anthropic adds `"type": "error"` outside).
#[derive(Debug, Deserialize)]
pub(crate) struct ErrorEnvelope {
    pub(crate) error: ErrorDetail,
}

/// The inner error object; every field optional, because OpenAI-compatible
/// servers vary.
#[derive(Debug, Deserialize)]
pub(crate) struct ErrorDetail {
    #[serde(default)]
    pub(crate) message: Option<String>,
    #[serde(default, rename = "type")]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) code: Option<serde_json::Value>,
}

impl ErrorDetail {
    /// `message (type, code)`, with what is there.
    pub(crate) fn describe(&self) -> String {
        let mut text = self.message.clone().unwrap_or_else(|| "no message".to_owned());
        let mut extra = Vec::new();
        if let Some(kind) = &self.kind {
            extra.push(format!("type: {kind}"));
        }
        match &self.code {
            Some(serde_json::Value::String(code)) => extra.push(format!("code: {code}")),
            Some(serde_json::Value::Number(code)) => extra.push(format!("code: {code}")),
            _ => {}
        }
        if !extra.is_empty() {
            text.push_str(&format!(" ({})", extra.join(", ")));
        }
        text
    }
}

/// The message of an error body: the provider's own message when the body
/// is a JSON error envelope (or `{"error": "text"}`), the body itself
/// (shortened) otherwise.
pub(crate) fn error_message(body: &str) -> String {
    if let Ok(envelope) = serde_json::from_str::<ErrorEnvelope>(body) {
        return envelope.error.describe();
    }
    #[derive(Deserialize)]
    struct Plain {
        error: String,
    }
    if let Ok(plain) = serde_json::from_str::<Plain>(body) {
        return plain.error;
    }
    let trimmed = body.trim();
    if trimmed.is_empty() {
        return "empty response body".to_owned();
    }
    const SHOWN: usize = 500;
    match trimmed.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}...", &trimmed[..cut]),
        None => trimmed.to_owned(),
    }
}

/// A request that failed on the way: the message is the error with its
/// causes (reqwest's own message hides them, "error sending request"; the
/// chain says what happened, connection refused, ...), and the error is kept
/// as the source.
pub(crate) fn transport(provider: &str, err: impl std::error::Error + Send + Sync + 'static) -> ModelError {
    ModelError::Transport {
        provider: provider.to_owned(),
        message: ErrorChain(&err).to_string(),
        source: Some(Cause::new(err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered_within_half_to_full() {
        let policy = RetryPolicy {
            max_retries: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(300),
            max_retry_after: Duration::from_secs(1),
        };
        for _ in 0..50 {
            let first = policy.backoff(0);
            assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
            let third = policy.backoff(2);
            assert!(third >= Duration::from_millis(150) && third <= Duration::from_millis(300));
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_openai_milliseconds() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, "2".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert("retry-after-ms", "150".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(150)));
        let mut date = HeaderMap::new();
        date.insert(RETRY_AFTER, "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&date), None);
    }

    #[test]
    fn error_message_surfaces_the_provider_message_type_and_code() {
        let openai = include_str!("../tests/fixtures/openai/error_400_invalid_temperature.json");
        let message = error_message(openai);
        assert!(
            message.starts_with("Invalid 'temperature': decimal above maximum value."),
            "{message}"
        );
        assert!(message.contains("invalid_request_error") && message.contains("decimal_above_max_value"));

        let anthropic = include_str!("../tests/fixtures/anthropic/error_404_not_found_streaming.json");
        assert_eq!(
            error_message(anthropic),
            "model: claude-nonexistent-rig-test (type: not_found_error)"
        );
        assert_eq!(error_message("upstream exploded"), "upstream exploded");
        assert_eq!(error_message(r#"{"error":"model not found"}"#), "model not found");
        assert_eq!(error_message(""), "empty response body");
    }

    #[test]
    fn an_endpoint_is_parsed_once_and_a_bad_one_fails_as_reqwest_would() {
        let client = reqwest::Client::new();
        let good = Endpoint::new("http://127.0.0.1:9/v1/chat/completions".to_owned());
        assert_eq!(good.as_str(), "http://127.0.0.1:9/v1/chat/completions");
        let request = good.post(&client).build().unwrap();
        assert_eq!(request.url().as_str(), "http://127.0.0.1:9/v1/chat/completions");
        assert_eq!(request.method(), reqwest::Method::POST);
        for bad in ["not a url/chat/completions", "unix:/tmp/socket"] {
            let endpoint = Endpoint::new(bad.to_owned());
            let ours = endpoint.post(&client).build().unwrap_err();
            let theirs = client.post(bad).build().unwrap_err();
            assert!(ours.is_builder(), "{ours}");
            assert_eq!(ours.to_string(), theirs.to_string());
        }
    }

    #[test]
    fn a_key_header_is_sensitive_and_an_invalid_one_is_left_to_reqwest() {
        let value = sensitive_header("Bearer sk-test".to_owned()).unwrap();
        assert!(value.is_sensitive());
        assert_eq!(value.to_str().unwrap(), "Bearer sk-test");
        assert_eq!(format!("{value:?}"), "Sensitive");
        assert!(sensitive_header("Bearer sk\ntest".to_owned()).is_none());
    }

    #[test]
    fn only_timeouts_rate_limits_and_server_errors_are_retried() {
        for code in [408, 429, 500, 502, 503, 529] {
            assert!(is_retryable(StatusCode::from_u16(code).unwrap()), "{code}");
        }
        for code in [400, 401, 403, 404, 422] {
            assert!(!is_retryable(StatusCode::from_u16(code).unwrap()), "{code}");
        }
    }
}

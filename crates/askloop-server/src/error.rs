//! [`ApiError`]: every way a request can fail, and the one place that picks
//! its HTTP status.
//!
//! The body is always `{"error": {"code", "message"}}`, plus `accepted` (the
//! labels a question accepts) or `pending` (the tool calls a run waits on)
//! when there are some: a client can act on the error without parsing the
//! message. Bad input from outside is a 4xx; a 5xx means the store or the
//! server itself failed, never the request.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use askloop::{InvalidId, RunError, RunErrorKind, StoreError, StoreErrorKind, quoted_excerpt};

use crate::links::{LinkError, LinkRefusal};

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// The body or the query string is not what the route accepts.
    #[error("{0}")]
    BadRequest(String),
    /// Fields of the body the route will not act on, each with why: the
    /// request is refused rather than run without them.
    #[error("{}", refused.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    RefusedFields {
        /// Each field refused and why.
        refused: Vec<RefusedField>,
    },
    /// `Authorization: Bearer <token>` is missing or wrong.
    #[error(
        "this server needs `Authorization: Bearer <token>` with one of its tokens (ASKLOOP_API_TOKEN, or a [[tokens]] entry of askloop.toml)"
    )]
    Unauthorized,
    /// Behind a proxy (`author_header`), the request names no person it can
    /// act as: it is refused rather than run as the token.
    #[error(
        "this server acts as the person its proxy names in the {header} header, and {problem}; send one {header} header with the person's name (UTF-8, as is or percent-encoded like Jos%C3%A9, 1 to 256 bytes, no control characters); a program that calls the server without a person needs a token marked without_person = true"
    )]
    NoPerson {
        /// The header the proxy names the person in.
        header: String,
        /// What was wrong with it.
        problem: crate::person::PersonProblem,
    },
    /// The token may not act for this agent (it is limited to others).
    #[error("the token {token:?} may not act for agent {}; it may act for: {}", quoted_excerpt(agent_id), allowed.join(", "))]
    Forbidden {
        /// The token's name.
        token: String,
        /// The agent of the route, or of the run.
        agent_id: String,
        /// The agents the token may act for.
        allowed: Vec<String>,
    },
    /// The caller may not use threads of this resource (a named token uses
    /// its own name's and the resources it lists; behind the author header,
    /// the person named).
    #[error(
        "{} may not use the threads of resource {}; it may use: {}",
        described_caller(caller),
        quoted_excerpt(resource_id),
        allowed.join(", ")
    )]
    ForeignResource {
        /// The token's name, or the person the author header named.
        caller: String,
        /// The resource asked for.
        resource_id: String,
        /// The resources it may use.
        allowed: Vec<String>,
    },
    /// No thread with this id, among the threads the caller may see.
    #[error("thread {} not found", quoted_excerpt(thread_id))]
    UnknownThread {
        /// The thread asked for.
        thread_id: String,
    },
    /// No approval that sticks with this id, among those the caller may see.
    #[error("grant {} not found", quoted_excerpt(id))]
    UnknownGrant {
        /// The grant asked for.
        id: String,
    },
    /// A thread id names threads of several resources and the request did
    /// not say which.
    #[error(
        "thread {} exists for several resources; name one with ?resourceId=",
        quoted_excerpt(thread_id)
    )]
    AmbiguousThread {
        /// The thread asked for.
        thread_id: String,
    },
    /// A thread holds runs of agents the caller may not act for, which
    /// deleting it would delete.
    #[error(
        "{} may not delete thread {}: it holds runs of agents it may not act for; a caller that may act for every agent of the thread can",
        described_caller(caller),
        quoted_excerpt(thread_id)
    )]
    ThreadOfOtherAgents {
        /// The thread.
        thread_id: String,
        /// The token's name, or the person the author header named.
        caller: String,
    },
    /// A thread cannot be deleted while runs on it wait on a person or run.
    #[error(
        "thread {} has runs that are not finished: {}; cancel them first, or delete with ?cancelRuns=true to cancel them and delete",
        quoted_excerpt(thread_id),
        runs.join(", ")
    )]
    ThreadBusy {
        /// The thread.
        thread_id: String,
        /// Its unfinished runs.
        runs: Vec<String>,
    },
    /// The request names a host this server does not answer to (a page of
    /// another site whose name was pointed at this machine).
    #[error(
        "this server does not answer to the host {host}; it answers to loopback names, IP addresses, its public URL's host and the hosts allowed with --allow-host (allowed_hosts in askloop.toml; ServerOptions::allowed_hosts in a server built in Rust)"
    )]
    HostNotAllowed {
        /// The `Host` the request named, quoted (cut short when long).
        host: String,
    },
    /// A browser sent a request that changes something from a page of
    /// another origin.
    #[error(
        "a request from {from} may not change anything here: only this server's own page, programs that send no Origin, and origins allowed with --cors-origin may"
    )]
    CrossSite {
        /// The origin of the page, quoted (cut short when long), or what
        /// the browser said of it.
        from: String,
    },
    /// A body that is not JSON.
    #[error("the body must be JSON, sent with `Content-Type: application/json`, not {content_type}")]
    UnsupportedMediaType {
        /// The `Content-Type` sent, quoted (cut short when long).
        content_type: String,
    },
    /// No agent has this id.
    #[error("no agent with id {}; agents here: {}", quoted_excerpt(agent_id), known.join(", "))]
    UnknownAgent {
        /// The id asked for.
        agent_id: String,
        /// The ids this server serves.
        known: Vec<String>,
    },
    /// No run has this id (for this agent, on agent routes).
    #[error("no run with id {run_id}{}", agent_id.as_ref().map(|a| format!(" for agent {a}")).unwrap_or_default())]
    UnknownRun {
        /// The id asked for.
        run_id: String,
        /// The agent of the route, when it was an agent route.
        agent_id: Option<String>,
    },
    /// No route has this path (or method).
    #[error(
        "no route {method} {}; the API is under /api (GET /api/agents lists the agents)",
        quoted_excerpt(path)
    )]
    UnknownRoute {
        /// The method.
        method: String,
        /// The path.
        path: String,
    },
    /// The route exists, but not with this method.
    #[error(
        "{} does not take {method}; see the Allow header for the methods it takes",
        quoted_excerpt(path)
    )]
    MethodNotAllowed {
        /// The method.
        method: String,
        /// The path.
        path: String,
    },
    /// The request body is larger than the server accepts.
    #[error("the request body is larger than this server accepts ({limit} bytes)")]
    BodyTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The request body did not arrive in full within the time the server
    /// gives it.
    #[error("the request body did not arrive in full within {seconds} s; send the whole body without pausing")]
    BodyTimeout {
        /// The time given, in seconds.
        seconds: u64,
    },
    /// The request could not be read as HTTP/1.1: hyper refused it before
    /// any route ran. The message says what was wrong.
    #[error("{0}")]
    MalformedRequest(String),
    /// The request target (path and query) is longer than the server reads.
    #[error(
        "the request's path and query are longer than this server reads (at most {max_bytes} bytes); send long values in a body"
    )]
    UriTooLong {
        /// The longest target read, in bytes.
        max_bytes: usize,
    },
    /// The request's headers are larger than the server reads.
    #[error("the request's headers are larger than this server reads: at most {max_headers} headers, and {} KiB with the request line", max_bytes / 1024)]
    HeadersTooLarge {
        /// The most headers read.
        max_headers: usize,
        /// The most bytes of request line and headers read.
        max_bytes: usize,
    },
    /// The store cannot report changes, so `/api/events` has nothing to
    /// send.
    #[error("this server's store cannot report run changes; read GET /api/runs again to see new questions")]
    NoChangeFeed,
    /// The server itself failed (a run's driver panicked).
    #[error("internal error: {0}")]
    Internal(String),
    /// The server makes no answer links (no `[links]`, or no `public_url`).
    #[error("this server makes no answer links: configure [links] with a signing key, and public_url")]
    LinksOff,
    /// An answer link's page refuses to answer (see [`LinkRefusal`]).
    #[error(transparent)]
    LinkRefused(#[from] LinkRefusal),
    /// The caller holds the most live event streams it may already.
    #[error(
        "this caller holds {most} live event streams (GET /api/events) open already, the most one token \
         (or one person behind a trusted proxy) may hold at once; close one (a tab of the page), or start \
         the server with a higher --max-event-streams"
    )]
    TooManyStreams {
        /// The cap.
        most: usize,
    },
    /// A link could not be made or revoked.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// A request to `POST /slack/interactions` that is not a click Slack
    /// signed for this server's app (see [`SlackRefusal`]).
    #[error(transparent)]
    SlackRefused(#[from] SlackRefusal),
    /// The health check (`GET /healthz`): the store does not answer. Its
    /// body carries `"status": "unavailable"` beside the error, as the
    /// check's 200 carries `"status": "ok"`.
    #[error(transparent)]
    Unhealthy(StoreError),
    /// The run refused the operation.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A body field a route refuses, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedField {
    /// The field, as sent.
    pub field: String,
    /// Why it is refused, and what would be taken instead.
    pub reason: String,
}

impl std::fmt::Display for RefusedField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` is refused: {}", self.field, self.reason)
    }
}

/// Why `POST /slack/interactions` refuses a request before reading what
/// was clicked: only a click Slack signed for this server's app, lately,
/// is read (see `slack/interactions.rs`). Each refusal changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SlackRefusal {
    /// The server has no Slack app (no `[slack]` in `askloop.toml`).
    #[error("this server has no Slack app ([slack])")]
    NoApp,
    /// `X-Slack-Signature` is missing, or does not sign the timestamp and
    /// the body with the app's signing secret.
    #[error("the request is not signed with this app's signing secret")]
    BadSignature,
    /// `X-Slack-Request-Timestamp` is not within five minutes of the
    /// server's clock.
    #[error("the request's timestamp is more than five minutes from now: a replay, or a clock far off")]
    Stale,
    /// The form has no `payload` field holding JSON.
    #[error("no payload field holding the interaction's JSON")]
    NoPayload,
    /// A `block_actions` payload that does not say who clicked what where.
    #[error("a block_actions payload without a user, channel or action")]
    IncompleteClick,
}

/// Who a refusal names: a token or the person a proxy named.
fn described_caller(caller: &str) -> String {
    if caller.is_empty() {
        "this caller".to_owned()
    } else {
        format!("{caller:?}")
    }
}

/// The error body: `{"error": {...}}`.
#[derive(Debug, Serialize)]
struct ErrorBody<'a> {
    /// `unavailable`, for [`ApiError::Unhealthy`] only.
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'static str>,
    error: ErrorDetail<'a>,
}

#[derive(Debug, Serialize)]
struct ErrorDetail<'a> {
    code: &'static str,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    accepted: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pending: Option<&'a [String]>,
    /// The body fields refused, for [`ApiError::RefusedFields`].
    #[serde(skip_serializing_if = "Option::is_none")]
    fields: Option<Vec<&'a str>>,
}

impl ApiError {
    /// One body field refused, and why (400 `refused_field`).
    pub(crate) fn refused(field: &str, reason: impl Into<String>) -> ApiError {
        ApiError::RefusedFields {
            refused: vec![RefusedField {
                field: field.to_owned(),
                reason: reason.into(),
            }],
        }
    }

    /// The status and the stable, machine-readable code of this error.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::RefusedFields { .. } => (StatusCode::BAD_REQUEST, "refused_field"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::NoPerson { .. } => (StatusCode::UNAUTHORIZED, "no_person"),
            ApiError::Forbidden { .. } => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::ForeignResource { .. } => (StatusCode::FORBIDDEN, "forbidden_resource"),
            ApiError::UnknownThread { .. } => (StatusCode::NOT_FOUND, "unknown_thread"),
            ApiError::UnknownGrant { .. } => (StatusCode::NOT_FOUND, "unknown_grant"),
            ApiError::AmbiguousThread { .. } => (StatusCode::CONFLICT, "ambiguous_thread"),
            ApiError::ThreadBusy { .. } => (StatusCode::CONFLICT, "thread_busy"),
            ApiError::ThreadOfOtherAgents { .. } => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::HostNotAllowed { .. } => (StatusCode::FORBIDDEN, "host_not_allowed"),
            ApiError::CrossSite { .. } => (StatusCode::FORBIDDEN, "cross_site"),
            ApiError::UnsupportedMediaType { .. } => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            ApiError::UnknownAgent { .. } => (StatusCode::NOT_FOUND, "unknown_agent"),
            ApiError::UnknownRun { .. } => (StatusCode::NOT_FOUND, "unknown_run"),
            ApiError::UnknownRoute { .. } => (StatusCode::NOT_FOUND, "unknown_route"),
            ApiError::TooManyStreams { .. } => (StatusCode::TOO_MANY_REQUESTS, "too_many_streams"),
            ApiError::MethodNotAllowed { .. } => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::BodyTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            ApiError::BodyTimeout { .. } => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            ApiError::MalformedRequest(_) => (StatusCode::BAD_REQUEST, "malformed_request"),
            ApiError::UriTooLong { .. } => (StatusCode::URI_TOO_LONG, "uri_too_long"),
            ApiError::HeadersTooLarge { .. } => (StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "headers_too_large"),
            ApiError::NoChangeFeed => (StatusCode::NOT_IMPLEMENTED, "no_change_feed"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            ApiError::LinksOff => (StatusCode::NOT_FOUND, "links_off"),
            ApiError::LinkRefused(refusal) => (
                match refusal {
                    LinkRefusal::Invalid | LinkRefusal::FormToken => StatusCode::FORBIDDEN,
                    _ => StatusCode::GONE,
                },
                refusal.code(),
            ),
            ApiError::Link(err) => link_status(err),
            ApiError::SlackRefused(refusal) => slack_status(*refusal),
            ApiError::Unhealthy(_) => (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
            ApiError::Run(err) => run_status(err),
            ApiError::Store(err) => store_status(err),
        }
    }
}

/// A refusal of the run's, by its kind: the core names every variant's
/// kind and code, so no variant is answered by a guess here.
fn run_status(err: &RunError) -> (StatusCode, &'static str) {
    let status = match err.kind() {
        RunErrorKind::NotFound => StatusCode::NOT_FOUND,
        // The run's state, or the run as stored, stands in the way: not the
        // request (a damaged run is the store's `run_unreadable`).
        RunErrorKind::State | RunErrorKind::RunState => StatusCode::CONFLICT,
        RunErrorKind::BadRequest => StatusCode::BAD_REQUEST,
        RunErrorKind::NotAccepted => StatusCode::UNPROCESSABLE_ENTITY,
        RunErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        RunErrorKind::Store => match err {
            RunError::Store(store) => return store_status(store),
            other => return (StatusCode::INTERNAL_SERVER_ERROR, other.code()),
        },
    };
    (status, err.code())
}

fn link_status(err: &LinkError) -> (StatusCode, &'static str) {
    match err {
        LinkError::NoLinkStore => (StatusCode::NOT_IMPLEMENTED, "no_link_store"),
        LinkError::UnknownRun { .. } => (StatusCode::NOT_FOUND, "unknown_run"),
        LinkError::NotWaiting { .. } => (StatusCode::CONFLICT, "run_not_suspended"),
        LinkError::Ambiguous { .. } => (StatusCode::BAD_REQUEST, "ambiguous_resume"),
        LinkError::CallNotWaiting { .. } => (StatusCode::CONFLICT, "tool_call_not_pending"),
        LinkError::CallExpired { .. } => (StatusCode::CONFLICT, "expired"),
        LinkError::BadRecipient(_) | LinkError::NoTime => (StatusCode::BAD_REQUEST, "bad_request"),
        LinkError::RecipientNotAllowed { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "recipient_not_allowed"),
        LinkError::UnknownLink { .. } => (StatusCode::NOT_FOUND, "unknown_link"),
        LinkError::NotRevocable { .. } => (StatusCode::CONFLICT, "link_not_revocable"),
        LinkError::Store(err) => store_status(err),
    }
}

/// A Slack request refused: the signature and its time are the caller's
/// credentials (401), the rest is a malformed request.
fn slack_status(refusal: SlackRefusal) -> (StatusCode, &'static str) {
    match refusal {
        SlackRefusal::NoApp => (StatusCode::NOT_FOUND, "slack_off"),
        SlackRefusal::BadSignature => (StatusCode::UNAUTHORIZED, "slack_bad_signature"),
        SlackRefusal::Stale => (StatusCode::UNAUTHORIZED, "slack_stale_timestamp"),
        SlackRefusal::NoPayload => (StatusCode::BAD_REQUEST, "slack_no_payload"),
        SlackRefusal::IncompleteClick => (StatusCode::BAD_REQUEST, "slack_incomplete_click"),
    }
}

/// A store's failure, by its kind (see [`StoreError::kind`]).
fn store_status(err: &StoreError) -> (StatusCode, &'static str) {
    let status = match err.kind() {
        StoreErrorKind::NotFound => StatusCode::NOT_FOUND,
        StoreErrorKind::Conflict => StatusCode::CONFLICT,
        StoreErrorKind::Unreadable => StatusCode::INTERNAL_SERVER_ERROR,
        StoreErrorKind::Unsupported => StatusCode::NOT_IMPLEMENTED,
        StoreErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, err.code())
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if status.is_server_error() {
            tracing::error!(%code, error = %askloop::ErrorChain(&self), "request failed");
        } else {
            tracing::debug!(%code, error = %self, "request refused");
        }
        (status, Json(self.body())).into_response()
    }
}

impl ApiError {
    /// The body: `{"error": {...}}`.
    fn body(&self) -> ErrorBody<'_> {
        let (_, code) = self.status_and_code();
        let (accepted, pending) = match self {
            ApiError::Run(RunError::InvalidAnswer { accepted, .. }) => (accepted.as_deref(), None),
            ApiError::Run(RunError::AmbiguousResume { pending, .. })
            | ApiError::Run(RunError::ToolCallNotPending { pending, .. }) => (None, Some(pending.as_slice())),
            _ => (None, None),
        };
        let fields = match self {
            ApiError::RefusedFields { refused } => Some(refused.iter().map(|r| r.field.as_str()).collect()),
            _ => None,
        };
        let status = match self {
            ApiError::Unhealthy(_) => Some("unavailable"),
            _ => None,
        };
        ErrorBody {
            status,
            error: ErrorDetail {
                code,
                message: self.to_string(),
                accepted,
                pending,
                fields,
            },
        }
    }

    /// The body as JSON, for a response written outside axum
    /// (`refusals.rs`).
    pub(crate) fn json(&self) -> Vec<u8> {
        // Strings and string lists only: serialising cannot fail.
        serde_json::to_vec(&self.body()).unwrap_or_default()
    }
}

impl From<InvalidId> for ApiError {
    fn from(err: InvalidId) -> Self {
        ApiError::Run(err.into())
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match &rejection {
            JsonRejection::MissingJsonContentType(_) => {
                ApiError::BadRequest("the body must be JSON, sent with `Content-Type: application/json`".into())
            }
            _ => ApiError::BadRequest(format!(
                "the body is not what this route accepts: {}",
                rejection.body_text()
            )),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::BadRequest(format!("the query string is not valid: {}", rejection.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bug_of_askloop_is_a_500_internal_naming_the_run_not_a_conflict() {
        let err = ApiError::Run(RunError::Internal {
            run_id: Some("r1".into()),
            detail: "the request stopped without an end".into(),
        });
        assert_eq!(err.status_and_code(), (StatusCode::INTERNAL_SERVER_ERROR, "internal"));
        let message = err.to_string();
        assert!(message.contains("r1") && message.contains("bug"), "{message}");
    }

    #[test]
    fn every_store_failure_is_answered_by_its_kind_with_its_own_code() {
        for (err, expected) in [
            (
                StoreError::NotFound { run_id: "r".into() },
                (StatusCode::NOT_FOUND, "unknown_run"),
            ),
            (
                StoreError::AlreadyExists { run_id: "r".into() },
                (StatusCode::CONFLICT, "run_exists"),
            ),
            (StoreError::NoGrants, (StatusCode::NOT_IMPLEMENTED, "no_grants")),
            (
                StoreError::Closed,
                (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
            ),
            (
                StoreError::NewerSchema {
                    run_id: "r".into(),
                    found: 9,
                    supported: 8,
                },
                (StatusCode::INTERNAL_SERVER_ERROR, "run_unreadable"),
            ),
        ] {
            assert_eq!(ApiError::Store(err).status_and_code(), expected);
        }
    }

    #[test]
    fn a_slack_request_without_a_fresh_signature_is_a_401_and_a_malformed_one_a_400_each_with_its_code() {
        for (refusal, expected) in [
            (SlackRefusal::NoApp, (StatusCode::NOT_FOUND, "slack_off")),
            (
                SlackRefusal::BadSignature,
                (StatusCode::UNAUTHORIZED, "slack_bad_signature"),
            ),
            (SlackRefusal::Stale, (StatusCode::UNAUTHORIZED, "slack_stale_timestamp")),
            (SlackRefusal::NoPayload, (StatusCode::BAD_REQUEST, "slack_no_payload")),
            (
                SlackRefusal::IncompleteClick,
                (StatusCode::BAD_REQUEST, "slack_incomplete_click"),
            ),
        ] {
            let err = ApiError::from(refusal);
            assert_eq!(err.status_and_code(), expected, "{refusal:?}");
            let body: serde_json::Value = serde_json::from_slice(&err.json()).unwrap();
            assert_eq!(body["error"]["message"], refusal.to_string());
            assert_eq!(body.get("status"), None, "{body}");
        }
    }

    #[test]
    fn an_unhealthy_store_is_a_503_whatever_its_kind_with_the_health_checks_status_beside_the_error() {
        for store in [
            StoreError::Closed,
            StoreError::NewerSchema {
                run_id: "r".into(),
                found: 9,
                supported: 8,
            },
        ] {
            let message = store.to_string();
            let err = ApiError::Unhealthy(store);
            assert_eq!(
                err.status_and_code(),
                (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
            );
            let body: serde_json::Value = serde_json::from_slice(&err.json()).unwrap();
            assert_eq!(
                body,
                serde_json::json!({"status": "unavailable", "error": {"code": "store_unavailable", "message": message}})
            );
        }
    }

    #[test]
    fn a_request_the_run_machine_refused_is_a_conflict_saying_what_was_refused_not_an_unreadable_run() {
        let err = ApiError::Run(RunError::Refused {
            run_id: "r1".into(),
            detail: "the run is already being taken over".into(),
        });
        let (status, code) = err.status_and_code();
        assert_eq!((status, code), (StatusCode::CONFLICT, "run_state"));
        let body: serde_json::Value = serde_json::from_slice(&err.json()).unwrap();
        assert_eq!(body["error"]["code"], "run_state");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("already being taken over"), "{body}");
    }
}

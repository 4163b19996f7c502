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

use askloop::{RunError, StoreError};

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// The body or the query string is not what the route accepts.
    #[error("{0}")]
    BadRequest(String),
    /// `Authorization: Bearer <token>` is missing or wrong.
    #[error(
        "this server needs `Authorization: Bearer <token>` with one of its tokens (ASKLOOP_API_TOKEN, or a [[tokens]] entry of askloop.toml)"
    )]
    Unauthorized,
    /// The token may not act for this agent (it is limited to others).
    #[error("the token {token:?} may not act for agent {agent_id}; it may act for: {}", allowed.join(", "))]
    Forbidden {
        /// The token's name.
        token: String,
        /// The agent of the route, or of the run.
        agent_id: String,
        /// The agents the token may act for.
        allowed: Vec<String>,
    },
    /// No agent has this id.
    #[error("no agent with id {agent_id}; agents here: {}", known.join(", "))]
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
    #[error("no route {method} {path}; the API is under /api (GET /api/agents lists the agents)")]
    UnknownRoute {
        /// The method.
        method: String,
        /// The path.
        path: String,
    },
    /// The route exists, but not with this method.
    #[error("{path} does not take {method}; see the Allow header for the methods it takes")]
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
    /// The request body stopped arriving: no byte for longer than the
    /// server waits.
    #[error("the request body stopped arriving: no byte came for {seconds} s; send the whole body at once")]
    BodyTimeout {
        /// The wait, in seconds.
        seconds: u64,
    },
    /// The store cannot report changes, so `/api/events` has nothing to
    /// send.
    #[error("this server's store cannot report run changes; read GET /api/runs again to see new questions")]
    NoChangeFeed,
    /// The server itself failed (a run's driver panicked).
    #[error("internal error: {0}")]
    Internal(String),
    /// The run refused the operation.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The error body: `{"error": {...}}`.
#[derive(Debug, Serialize)]
struct ErrorBody<'a> {
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
}

impl ApiError {
    /// The status and the stable, machine-readable code of this error.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden { .. } => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::UnknownAgent { .. } => (StatusCode::NOT_FOUND, "unknown_agent"),
            ApiError::UnknownRun { .. } => (StatusCode::NOT_FOUND, "unknown_run"),
            ApiError::UnknownRoute { .. } => (StatusCode::NOT_FOUND, "unknown_route"),
            ApiError::MethodNotAllowed { .. } => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::BodyTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            ApiError::BodyTimeout { .. } => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            ApiError::NoChangeFeed => (StatusCode::NOT_IMPLEMENTED, "no_change_feed"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            ApiError::Run(err) => run_status(err),
            ApiError::Store(err) => store_status(err),
        }
    }
}

fn run_status(err: &RunError) -> (StatusCode, &'static str) {
    match err {
        RunError::UnknownRun { .. } | RunError::OtherAgent { .. } => (StatusCode::NOT_FOUND, "unknown_run"),
        RunError::NotSuspended { .. } => (StatusCode::CONFLICT, "run_not_suspended"),
        RunError::Expired { .. } => (StatusCode::CONFLICT, "expired"),
        RunError::ToolCallNotPending { .. } => (StatusCode::CONFLICT, "tool_call_not_pending"),
        RunError::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
        RunError::NotRetryable { .. } => (StatusCode::CONFLICT, "not_retryable"),
        RunError::AmbiguousResume { .. } => (StatusCode::BAD_REQUEST, "ambiguous_resume"),
        RunError::InvalidInput(_) => (StatusCode::BAD_REQUEST, "bad_request"),
        RunError::InvalidAnswer { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_answer"),
        RunError::WrongPendingKind { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "wrong_pending_kind"),
        // The stored run and this server's agent disagree: the run's state,
        // not the request, is what stands in the way.
        RunError::UnknownTool { .. } | RunError::StepLimit { .. } => (StatusCode::CONFLICT, "run_state"),
        RunError::Store(err) => store_status(err),
        _ => (StatusCode::CONFLICT, "run_state"),
    }
}

fn store_status(err: &StoreError) -> (StatusCode, &'static str) {
    match err {
        StoreError::NotFound { .. } => (StatusCode::NOT_FOUND, "unknown_run"),
        StoreError::AlreadyExists { .. } => (StatusCode::CONFLICT, "run_exists"),
        StoreError::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
        StoreError::Corrupt { .. } | StoreError::NewerSchema { .. } => {
            (StatusCode::INTERNAL_SERVER_ERROR, "run_unreadable")
        }
        _ => (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if status.is_server_error() {
            tracing::error!(%code, error = %self, "request failed");
        } else {
            tracing::debug!(%code, error = %self, "request refused");
        }
        let (accepted, pending) = match &self {
            ApiError::Run(RunError::InvalidAnswer { accepted, .. }) => (accepted.as_deref(), None),
            ApiError::Run(RunError::AmbiguousResume { pending, .. })
            | ApiError::Run(RunError::ToolCallNotPending { pending, .. }) => (None, Some(pending.as_slice())),
            _ => (None, None),
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code,
                message: self.to_string(),
                accepted,
                pending,
            },
        };
        (status, Json(body)).into_response()
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

//! `/mcp`: each agent as an MCP tool `ask_<agent>` over streamable HTTP
//! (rmcp's service, see `askloop_mcp`), behind the API's token, with the
//! server's body limit, and bad input answered in JSON.
//!
//! rmcp reads bodies up to a limit of its own and refuses what it cannot
//! read in plain text (a body that is not JSON is a 415). So a POST's body
//! is read here first, under the server's limit (413) and read timeout
//! (408), and checked as one JSON-RPC message by the rules `askloop mcp`
//! follows on stdio ([`askloop_mcp::incoming`]): a message that cannot be
//! used is a 400 whose body is its JSON-RPC error (`-32700`; `-32600` or
//! `-32602` with the request's id when it can be read). What rmcp still
//! refuses itself (a wrong `Content-Type` or `Accept`, an unknown session)
//! keeps its status and gets the same JSON-RPC error body, with rmcp's
//! text as the message. A session one past its limits (`[mcp]` of
//! `askloop.toml`) is a 429 with a JSON-RPC error naming the limit.

use std::sync::Arc;

use askloop_mcp::incoming::{Refusal, read_message};
use askloop_mcp::{AgentTools, BoundSessions, SessionHold, WaitingLinks};
use axum::body::Body;
use axum::extract::{FromRequest, Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{Method, StatusCode};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};

use crate::error::ApiError;
use crate::extract::ApiBytes;
use crate::{AppState, auth};

/// The most of a plain-text refusal of rmcp's that is read to answer it.
const REFUSAL_TEXT_BYTES: usize = 64 * 1024;

/// The `/mcp` route, for the agents of `state`. The server's guard checks
/// the `Host` of every request (`guard.rs`), so rmcp's own check is off.
pub(crate) fn routes(state: &Arc<AppState>) -> Router<Arc<AppState>> {
    let tools = AgentTools::new(state.agents.clone(), WaitingLinks::default());
    // An open session counts as an open stream: after a flood of them
    // closes, the allocator's free pages go back to the system.
    let streams = Arc::clone(&state.streams);
    let hold: SessionHold = Arc::new(move || Box::new(streams.open()));
    let sessions = BoundSessions::new(state.mcp_sessions, Some(hold));
    let service = askloop_mcp::streamable_http_service(tools, false, state.body_limit, sessions);
    Router::new()
        .route_service("/mcp", service)
        .route_layer(from_fn_with_state(Arc::clone(state), answer_in_json))
        .route_layer(from_fn_with_state(Arc::clone(state), auth::require_token))
}

/// Checks a POST's body before rmcp reads it, and turns rmcp's own
/// refusals into JSON.
async fn answer_in_json(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let request = if request.method() == Method::POST {
        match checked(request, &state).await {
            Ok(request) => request,
            Err(refused) => return refused.into_response(),
        }
    } else {
        request
    };
    in_json(next.run(request).await).await
}

/// The request, its body read and found to be one usable message.
async fn checked(request: Request, state: &Arc<AppState>) -> Result<Request, McpRefusal> {
    let (parts, body) = request.into_parts();
    let ApiBytes(bytes) = ApiBytes::from_request(Request::from_parts(parts.clone(), body), state).await?;
    read_message(&bytes).map_err(|refusal| McpRefusal::Message(*refusal))?;
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// Why `/mcp` refused a request before rmcp saw it.
#[derive(Debug)]
enum McpRefusal {
    /// The body could not be read (too large, too slow): its status is the
    /// API's.
    Body(ApiError),
    /// The body is not one usable JSON-RPC message: a 400.
    Message(Refusal),
}

impl From<ApiError> for McpRefusal {
    fn from(err: ApiError) -> Self {
        McpRefusal::Body(err)
    }
}

impl IntoResponse for McpRefusal {
    fn into_response(self) -> Response {
        let (status, refusal) = match self {
            McpRefusal::Body(err) => (err.status_and_code().0, Refusal::invalid_request(None, err.to_string())),
            McpRefusal::Message(refusal) => (StatusCode::BAD_REQUEST, refusal),
        };
        tracing::debug!(%status, code = refusal.error.code.0, message = %refusal.error.message, "/mcp refused a request");
        (status, Json(refusal.response())).into_response()
    }
}

/// rmcp's response, with a refusal in plain text turned into a JSON-RPC
/// error body (same status, same other headers).
async fn in_json(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, REFUSAL_TEXT_BYTES)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("refused").to_owned()
    } else {
        text
    };
    let refusal = if status.is_server_error() {
        Refusal::internal_error(None, message)
    } else {
        Refusal::invalid_request(None, message)
    };
    let mut json = (status, Json(refusal.response())).into_response();
    for (name, value) in &parts.headers {
        if name != CONTENT_TYPE && name != CONTENT_LENGTH {
            json.headers_mut().append(name, value.clone());
        }
    }
    json
}

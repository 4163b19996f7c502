//! The bearer token every `/api` route needs when the server has one.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::AppState;
use crate::error::ApiError;

/// Lets the request through when the server has no token, or when it
/// carries `Authorization: Bearer <token>` with the right one. The
/// comparison takes the same time however much of the token matches.
pub(crate) async fn require_token(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let Some(expected) = state.token.as_deref() else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(token) if bool::from(token.as_bytes().ct_eq(expected.as_bytes())) => next.run(request).await,
        _ => ApiError::Unauthorized.into_response(),
    }
}

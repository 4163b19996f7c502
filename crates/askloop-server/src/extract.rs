//! Extractors whose rejections are [`ApiError`]s, so a malformed body gets
//! the same `{"error": ...}` shape as every other failure.

use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::AppState;
use crate::error::ApiError;

/// A JSON body; a body over the limit is a 413, anything malformed a 400.
#[derive(Debug)]
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequest<Arc<AppState>> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(ApiJson(value)),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ApiError::BodyTooLarge {
                limit: state.body_limit,
            }),
            Err(rejection) if stopped_arriving(&rejection) => Err(ApiError::BodyTimeout {
                seconds: state.body_read_timeout.as_secs(),
            }),
            Err(rejection) => Err(rejection.into()),
        }
    }
}

/// A whole body, as bytes; a body over the limit is a 413, one that
/// stopped arriving a 408.
#[derive(Debug)]
pub(crate) struct ApiBytes(pub(crate) axum::body::Bytes);

impl FromRequest<Arc<AppState>> for ApiBytes {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        match axum::body::Bytes::from_request(request, state).await {
            Ok(bytes) => Ok(ApiBytes(bytes)),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ApiError::BodyTooLarge {
                limit: state.body_limit,
            }),
            Err(rejection) if stopped_arriving(&rejection) => Err(ApiError::BodyTimeout {
                seconds: state.body_read_timeout.as_secs(),
            }),
            Err(rejection) => Err(ApiError::BadRequest(format!(
                "the body could not be read: {}",
                rejection.body_text()
            ))),
        }
    }
}

/// Whether the body could not be read because its deadline passed (see
/// `body.rs`).
fn stopped_arriving(rejection: &(dyn std::error::Error + 'static)) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(rejection);
    while let Some(error) = source {
        if error.is::<crate::body::BodyDeadlinePassed>() {
            return true;
        }
        source = error.source();
    }
    false
}

/// A query string.
#[derive(Debug)]
pub(crate) struct ApiQuery<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequestParts<Arc<AppState>> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| ApiQuery(value))
            .map_err(ApiError::from)
    }
}

/// A path parameter.
#[derive(Debug)]
pub(crate) struct ApiPath<T>(pub(crate) T);

impl<T: DeserializeOwned + Send> FromRequestParts<Arc<AppState>> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| ApiPath(value))
            .map_err(|rejection| ApiError::BadRequest(format!("bad path: {}", rejection.body_text())))
    }
}

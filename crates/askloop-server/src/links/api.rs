//! The API's link routes, behind the API token like every `/api` route,
//! each for runs the caller may see (a run of another agent or resource
//! answers as an unknown one):
//!
//! - `POST /api/runs/{runId}/links` with `{"to": "Alice", "toolCallId"?,
//!   "expiresIn"?: "2h"}`: a link for a waiting call, made by the caller
//!   (`madeBy`: the token's name, or the person a trusted proxy named);
//! - `GET /api/runs/{runId}/links`: the run's links, used or not, each
//!   with its maker;
//! - `POST /api/links/{linkId}/revoke`: the link answers nothing from then on.

use std::sync::Arc;

use askloop::AnswerLink;
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};

use super::{LinkRequest, MintedLink};
use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};

/// The body of `POST /api/runs/{runId}/links`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct MintBody {
    /// Whom the link is for.
    to: String,
    #[serde(default)]
    tool_call_id: Option<String>,
    /// How long it should work (askloop's duration forms: `90s`, `2h`,
    /// `3d`), if less than the configured longest.
    #[serde(default)]
    expires_in: Option<String>,
}

pub(crate) async fn mint(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(run_id): ApiPath<String>,
    ApiJson(body): ApiJson<MintBody>,
) -> Result<Json<MintedLink>, ApiError> {
    // The caller may see the run, before anything else of it is read.
    crate::runs::load(&state, &caller, &run_id, None).await?;
    let links = state.links.as_deref().ok_or(ApiError::LinksOff)?;
    let valid_for = body
        .expires_in
        .as_deref()
        .map(askloop::parse_duration)
        .transpose()
        .map_err(|err| ApiError::BadRequest(format!("expiresIn: {err}")))?;
    // Its maker: the name the caller acts under (the token's, or the person
    // a trusted proxy named); none on a server without tokens.
    let maker = caller.author().by;
    let request = LinkRequest {
        run_id: &run_id,
        tool_call_id: body.tool_call_id.as_deref(),
        recipient: &body.to,
        maker: maker.as_deref(),
        valid_for,
    };
    Ok(Json(links.mint(state.store.as_ref(), request, state.now()).await?))
}

/// The body of `GET /api/runs/{runId}/links`.
#[derive(Debug, Serialize)]
pub(crate) struct LinkList {
    links: Vec<AnswerLink>,
}

pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(run_id): ApiPath<String>,
) -> Result<Json<LinkList>, ApiError> {
    crate::runs::load(&state, &caller, &run_id, None).await?;
    let store = state.store.link_store().ok_or(ApiError::LinksOff)?;
    Ok(Json(LinkList {
        links: store.links(&run_id).await?,
    }))
}

pub(crate) async fn revoke(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(link_id): ApiPath<String>,
) -> Result<Json<AnswerLink>, ApiError> {
    let store = state.store.link_store().ok_or(ApiError::LinksOff)?;
    let unknown = || {
        ApiError::Link(super::LinkError::UnknownLink {
            link_id: link_id.clone(),
        })
    };
    let link = store.link(&link_id).await?.ok_or_else(unknown)?;
    // A link of a run the caller may not see is one it cannot know of.
    crate::runs::load(&state, &caller, &link.run_id, None)
        .await
        .map_err(|_| unknown())?;
    Ok(Json(super::revoke(state.store.as_ref(), &link_id, state.now()).await?))
}

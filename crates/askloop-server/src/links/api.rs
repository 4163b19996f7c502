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
use chrono::{DateTime, Utc};
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
    links: Vec<LinkView>,
}

/// A stored link as the routes send it: [`AnswerLink`]'s fields, its
/// times as every time on the wire ([`crate::wire::millis`]).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LinkView {
    link_id: String,
    run_id: String,
    tool_call_id: String,
    recipient: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    made_by: Option<String>,
    #[serde(serialize_with = "crate::wire::millis")]
    created_at: DateTime<Utc>,
    #[serde(serialize_with = "crate::wire::millis")]
    expires_at: DateTime<Utc>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::wire::millis_or_none"
    )]
    used_at: Option<DateTime<Utc>>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::wire::millis_or_none"
    )]
    revoked_at: Option<DateTime<Utc>>,
}

impl From<AnswerLink> for LinkView {
    fn from(link: AnswerLink) -> Self {
        let AnswerLink {
            link_id,
            run_id,
            tool_call_id,
            recipient,
            made_by,
            created_at,
            expires_at,
            used_at,
            revoked_at,
        } = link;
        LinkView {
            link_id,
            run_id,
            tool_call_id,
            recipient,
            made_by,
            created_at,
            expires_at,
            used_at,
            revoked_at,
        }
    }
}

pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(run_id): ApiPath<String>,
) -> Result<Json<LinkList>, ApiError> {
    crate::runs::load(&state, &caller, &run_id, None).await?;
    let store = state.store.link_store().ok_or(ApiError::LinksOff)?;
    let links = store.links(&run_id).await?;
    Ok(Json(LinkList {
        links: links.into_iter().map(LinkView::from).collect(),
    }))
}

pub(crate) async fn revoke(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(link_id): ApiPath<String>,
) -> Result<Json<LinkView>, ApiError> {
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
    let revoked = super::revoke(state.store.as_ref(), &link_id, state.now()).await?;
    Ok(Json(revoked.into()))
}

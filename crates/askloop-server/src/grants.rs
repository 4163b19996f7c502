//! Approvals that stick, listed and revoked:
//!
//! - `GET /api/grants?agentId=&resourceId=&threadId=&all=&limit=`: the
//!   grants the caller may see, newest first; live ones only unless
//!   `all=true` (revoked and expired ones too). A caller walled to
//!   resources lists its own (the one it has when it names none).
//! - `POST /api/grants/{grantId}/revoke`: the grant covers no call from the
//!   next model call on; recorded with who revoked it and when. Revoking a
//!   revoked grant keeps its first revocation.
//!
//! A grant the caller may not see (another agent's, another resource's) is
//! answered as one that does not exist.

use std::sync::Arc;

use askloop::{Author, Grant, GrantQuery, GrantScope, GrantStore, StoreError};
use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};

type AppStateRef = State<Arc<AppState>>;

/// `?agentId=&resourceId=&threadId=&all=&limit=`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct GrantParams {
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    resource_id: Option<String>,
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    all: bool,
    #[serde(default)]
    limit: Option<u32>,
}

/// `GET /api/grants`.
#[derive(Debug, Serialize)]
pub(crate) struct GrantList {
    grants: Vec<GrantView>,
}

/// A grant as the routes (and `askloop grants --json`) send it: [`Grant`]'s fields, its times as every
/// time on the wire (RFC 3339 with milliseconds, [`askloop::rfc3339`]).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantView {
    id: String,
    agent_id: String,
    tool: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    mcp_server: Option<String>,
    scope: GrantScope,
    resource_id: String,
    thread_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<Value>,
    granted_by: Author,
    #[serde(serialize_with = "crate::wire::millis")]
    granted_at: DateTime<Utc>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::wire::millis_or_none"
    )]
    expires_at: Option<DateTime<Utc>>,
    run_id: String,
    tool_call_id: String,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::wire::millis_or_none"
    )]
    revoked_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    revoked_by: Option<Author>,
}

impl From<Grant> for GrantView {
    fn from(grant: Grant) -> Self {
        // Every field named: a field added to `Grant` is a compile error
        // here until the wire says whether it sends it.
        let Grant {
            id,
            agent_id,
            tool,
            mcp_server,
            scope,
            resource_id,
            thread_id,
            args,
            granted_by,
            granted_at,
            expires_at,
            run_id,
            tool_call_id,
            revoked_at,
            revoked_by,
        } = grant;
        GrantView {
            id,
            agent_id,
            tool,
            mcp_server,
            scope,
            resource_id,
            thread_id,
            args,
            granted_by,
            granted_at,
            expires_at,
            run_id,
            tool_call_id,
            revoked_at,
            revoked_by,
        }
    }
}

fn store(state: &AppState) -> Result<&dyn GrantStore, ApiError> {
    state.store.grant_store().ok_or(ApiError::Store(StoreError::NoGrants))
}

/// Whether the caller may see `grant`: of an agent it may act for, for a
/// resource it may use.
fn may_see(caller: &Caller, grant: &Grant) -> bool {
    caller.may_act_for(&grant.agent_id) && caller.check_resource(&grant.resource_id).is_ok()
}

/// `GET /api/grants`.
pub(crate) async fn list(
    State(state): AppStateRef,
    caller: Caller,
    ApiQuery(params): ApiQuery<GrantParams>,
) -> Result<Json<GrantList>, ApiError> {
    if let Some(agent_id) = &params.agent_id {
        caller.check(agent_id)?;
        state.agent(agent_id)?;
    }
    let resource_id = caller.listing_resource(params.resource_id.as_deref(), "grants")?;
    if params.thread_id.is_some() && resource_id.is_none() {
        return Err(ApiError::BadRequest(
            "?threadId= names a thread of a resource: send ?resourceId= with it".into(),
        ));
    }
    if params.limit.is_some_and(|limit| limit > GrantQuery::MAX_LIMIT) {
        return Err(ApiError::BadRequest(format!(
            "?limit= is at most {}",
            GrantQuery::MAX_LIMIT
        )));
    }
    let query = GrantQuery {
        agent_id: params.agent_id,
        resource_id,
        thread_id: params.thread_id,
        live_at: (!params.all).then(|| state.now()),
        limit: params.limit.unwrap_or(0),
    };
    let grants = store(&state)?
        .grants(&query)
        .await?
        .into_iter()
        // A token limited to some agents sees only theirs.
        .filter(|grant| may_see(&caller, grant))
        .map(GrantView::from)
        .collect();
    Ok(Json(GrantList { grants }))
}

/// `POST /api/grants/{grantId}/revoke`.
pub(crate) async fn revoke(
    State(state): AppStateRef,
    ApiPath(id): ApiPath<String>,
    caller: Caller,
) -> Result<Json<GrantView>, ApiError> {
    let grants = store(&state)?;
    let unknown = || ApiError::UnknownGrant { id: id.clone() };
    let grant = grants.grant(&id).await?.ok_or_else(unknown)?;
    if !may_see(&caller, &grant) {
        return Err(unknown());
    }
    let revoked = grants
        .revoke_grant(&id, &caller.author(), state.now())
        .await?
        .ok_or_else(unknown)?;
    tracing::info!(grant = %id, by = ?caller.author().by, "an approval that sticks was revoked");
    Ok(Json(revoked.into()))
}

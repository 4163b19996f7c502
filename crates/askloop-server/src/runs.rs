//! askloop's own routes: `/api/runs` (every run of the store, paged),
//! `/api/runs/{runId}`, its `cancel`, `retry` and `deliveries`, and
//! `/healthz`.

use std::sync::Arc;

use askloop::{IdKind, RunCursor, RunQuery, RunRecord, RunStatus, quoted_excerpt};
use axum::Json;
use axum::extract::State;
use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::threads::ThreadFilter;
use crate::wire::{Cancelled, RunDetail, RunPage, RunSummary};

/// Runs per page when `limit` is not given.
const DEFAULT_PAGE: u32 = 50;
/// The most runs one page holds.
const MAX_PAGE: u32 = 500;

/// `GET /api/runs` query.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListQuery {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    cursor: Option<String>,
    /// Also count every run the listing holds (`total` in the page).
    #[serde(default)]
    total: bool,
    /// Only runs on this stored thread (of `resourceId`, or found among
    /// the caller's resources).
    #[serde(default)]
    thread_id: Option<String>,
    /// Only runs on threads of this resource.
    #[serde(default)]
    resource_id: Option<String>,
}

/// Where the previous page ended: the last run it showed (runs are listed
/// by creation time, then id, newest first). The next page starts right
/// after it in the store's index, so runs created since, or gone from a
/// status-filtered listing, shift nothing.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Cursor {
    #[serde(rename = "t")]
    created_at: DateTime<Utc>,
    #[serde(rename = "r")]
    run_id: String,
}

impl Cursor {
    fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    /// A cursor this server gave out: it names a run id within the rule
    /// for run ids, as every run's id is.
    fn decode(text: &str) -> Result<Cursor, ApiError> {
        URL_SAFE_NO_PAD
            .decode(text)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Cursor>(&bytes).ok())
            .filter(|cursor| IdKind::Run.check(&cursor.run_id).is_ok())
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "cursor {} is not one this server gave out; pass the nextCursor of the previous page, or no cursor for the first page",
                    quoted_excerpt(text)
                ))
            })
    }

    /// The place right after `run`.
    fn after(run: &RunRecord) -> Cursor {
        Cursor {
            created_at: run.created_at,
            run_id: run.run_id.clone(),
        }
    }
}

/// `GET /api/runs?status=&agentId=&threadId=&resourceId=&limit=&cursor=&total=`:
/// runs, newest first. A token limited to some agents sees only their runs,
/// one walled to resources only the runs of those resources, on their
/// threads or started by them on no thread (others are neither listed nor
/// counted); asking for another agent's
/// (`agentId`) is a 403, for another resource's threads (`resourceId`) too,
/// and another resource's thread (`threadId`) is a 404 as for a missing
/// one. With `total=true` the page also
/// says how many runs the whole listing holds (every page, not only those
/// after `cursor`), counted in the store's index.
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<RunPage>, ApiError> {
    let status = query
        .status
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<RunStatus>().map_err(|e| ApiError::BadRequest(e.to_string())))
        .transpose()?;
    let limit = match query.limit {
        None => DEFAULT_PAGE,
        Some(n) if (1..=MAX_PAGE).contains(&n) => n,
        Some(n) => {
            return Err(ApiError::BadRequest(format!(
                "limit {n} is out of range; give 1 to {MAX_PAGE}"
            )));
        }
    };
    let cursor = query
        .cursor
        .as_deref()
        .filter(|c| !c.is_empty())
        .map(Cursor::decode)
        .transpose()?;
    let mut agent_id = query.agent_id.filter(|a| !a.is_empty());
    if let Some(agent_id) = &agent_id {
        caller.check(agent_id)?;
    }
    // A token for one agent reads that agent's runs from the store's
    // index; one for several skips the others' runs as it reads.
    if let Some([only]) = caller.agents() {
        agent_id.get_or_insert_with(|| only.clone());
    }
    let thread = ThreadFilter {
        thread_id: query.thread_id,
        resource_id: query.resource_id,
    }
    .resolve(&state, &caller)
    .await?;
    let filter = RunQuery {
        status,
        agent_id,
        thread,
        resources: caller.resources().map(<[String]>::to_vec),
        ..Default::default()
    };
    let total = if query.total {
        Some(total(&state, &caller, &filter).await?)
    } else {
        None
    };
    let (runs, next) = page(&state, &caller, filter, limit, cursor).await?;
    Ok(Json(RunPage {
        runs: runs.into_iter().map(|run| RunSummary::of(run, state.now())).collect(),
        next_cursor: next.map(|c| c.encode()),
        total,
    }))
}

/// How many runs match `filter` that the caller may see: for a token
/// limited to several agents (not all), the sum of each agent's count.
async fn total(state: &AppState, caller: &Caller, filter: &RunQuery) -> Result<u64, ApiError> {
    let agents = match (caller.agents(), &filter.agent_id) {
        (Some(agents), None) => agents,
        _ => return Ok(state.store.count(filter).await?),
    };
    let mut agents = agents.to_vec();
    agents.sort();
    agents.dedup();
    let mut total = 0;
    for agent_id in agents {
        let of_agent = RunQuery {
            agent_id: Some(agent_id),
            ..filter.clone()
        };
        total += state.store.count(&of_agent).await?;
    }
    Ok(total)
}

/// Reads one page after `cursor`, from the store's index. A token for
/// several agents (not all) skips the others' runs, and a damaged row is
/// skipped by the store: either way, reading goes on until the page is
/// full or the listing ends.
async fn page(
    state: &AppState,
    caller: &Caller,
    mut filter: RunQuery,
    limit: u32,
    cursor: Option<Cursor>,
) -> Result<(Vec<RunRecord>, Option<Cursor>), ApiError> {
    filter.after = cursor.map(|c| RunCursor {
        at: c.created_at,
        run_id: c.run_id,
    });
    // One more than the page, to know whether another page follows.
    let wanted = limit as usize + 1;
    filter.limit = Some(limit + 1);
    let mut runs: Vec<RunRecord> = Vec::with_capacity(wanted);
    loop {
        let batch = state.store.list(&filter).await?;
        // A store leaves out rows it cannot read, so a short batch may not
        // be the end: only an empty one is (the next read starts after the
        // last run read, past any such row).
        let exhausted = batch.is_empty();
        filter.after = batch.last().map(RunCursor::after_created);
        let room = wanted - runs.len();
        runs.extend(batch.into_iter().filter(|run| caller.may_see(run)).take(room));
        if runs.len() == wanted || exhausted {
            break;
        }
    }
    let more = runs.len() == wanted;
    runs.truncate(limit as usize);
    let next = runs.last().filter(|_| more).map(Cursor::after);
    Ok((runs, next))
}

/// `GET /api/runs/{runId}`: the run, what it waits on, its conversation.
pub(crate) async fn get(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(run_id): ApiPath<String>,
) -> Result<Json<RunDetail>, ApiError> {
    let run = load(&state, &caller, &run_id, None).await?;
    let messages = state.store.messages(&run_id).await?;
    Ok(Json(RunDetail {
        version: run.version,
        usage: run.usage,
        settings: run.settings.clone(),
        built_in_ask_user: state.asks_with_ask_user(&run.agent_id),
        summary: RunSummary::of(run, state.now()),
        messages,
    }))
}

/// `GET /api/runs/{runId}/deliveries` body.
#[derive(Debug, Serialize)]
pub(crate) struct DeliveryList {
    deliveries: Vec<DeliveryView>,
}

/// A delivery as the route sends it: [`askloop::Delivery`]'s fields (its
/// message's inline), its times as every time on the wire
/// ([`crate::wire::millis`]), its destination without secrets.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeliveryView {
    id: String,
    run_id: String,
    destination: String,
    event: askloop::EventType,
    payload: serde_json::Value,
    #[serde(serialize_with = "crate::wire::millis")]
    created_at: DateTime<Utc>,
    state: askloop::DeliveryState,
    attempts: u32,
    #[serde(serialize_with = "crate::wire::millis")]
    next_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease: Option<LeaseView>,
}

/// Who sends a delivery now, and until when.
#[derive(Debug, Serialize)]
pub(crate) struct LeaseView {
    owner: String,
    #[serde(serialize_with = "crate::wire::millis")]
    until: DateTime<Utc>,
}

impl From<askloop::Delivery> for DeliveryView {
    fn from(delivery: askloop::Delivery) -> Self {
        let askloop::Delivery {
            message,
            state,
            attempts,
            next_at,
            last_error,
            lease,
        } = delivery;
        let askloop::OutboxMessage {
            id,
            run_id,
            destination,
            event,
            payload,
            created_at,
        } = message;
        DeliveryView {
            id,
            run_id,
            destination: crate::webhooks::shown_destination(&destination),
            event,
            payload,
            created_at,
            state,
            attempts,
            next_at,
            last_error,
            lease: lease.map(|lease| LeaseView {
                owner: lease.owner,
                until: lease.until,
            }),
        }
    }
}

/// `GET /api/runs/{runId}/deliveries`: every notification of the run (to
/// webhooks, by email; the first notice of a question, its reminder and
/// its escalation), when each is or was due, and how its delivery went,
/// oldest first. A webhook's URL is shown by its origin, as in the logs:
/// the rest may hold the receiver's token, which anyone who may see the run
/// could otherwise post with.
pub(crate) async fn deliveries(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(run_id): ApiPath<String>,
) -> Result<Json<DeliveryList>, ApiError> {
    load(&state, &caller, &run_id, None).await?;
    let deliveries = state.store.deliveries(&run_id).await?;
    let deliveries = deliveries.into_iter().map(DeliveryView::from).collect();
    Ok(Json(DeliveryList { deliveries }))
}

/// `POST /api/runs/{runId}/cancel`: the run stops where it is; its status
/// becomes `cancelled`. A finished run cannot be cancelled (409).
pub(crate) async fn cancel(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(run_id): ApiPath<String>,
) -> Result<Json<Cancelled>, ApiError> {
    let run = load(&state, &caller, &run_id, None).await?;
    // Cancelling needs the run's agent only to write through its store;
    // a run of an agent this server does not serve is left alone.
    let agent = state.agent(&run.agent_id)?;
    agent.cancel_run(&run_id, caller.author()).await?;
    Ok(Json(Cancelled {
        run_id,
        status: RunStatus::Cancelled,
    }))
}

/// `POST /api/runs/{runId}/retry`: continues a run that failed for a
/// reason trying again may fix (the model unreachable, rate limited,
/// overloaded or cut off mid-stream, the database busy) from its last stored
/// step, and streams it as `resume-stream` does. Stored answers are not
/// asked again, stored tool results not run again. A run that did not fail,
/// or failed for good (a refused request, the step limit), is 409
/// `not_retryable` with the reason. The take-over is recorded as by the
/// caller.
pub(crate) async fn retry(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(run_id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let run = load(&state, &caller, &run_id, None).await?;
    let agent = state.agent(&run.agent_id)?;
    let stream = agent.retry_run(&run_id, caller.author()).await?;
    let span = tracing::info_span!("run", agent_id = %run.agent_id, run_id = %run_id, tool_call_id = "");
    Ok(crate::sse::respond(&state, stream, span))
}

/// Reads a run the caller may see ([`Caller::may_see`]), before anything
/// else of it is read or changed; on an agent's routes (`route_agent`), a
/// run of that agent. An id no run can have (see [`IdKind`]) is a 400
/// before the store is asked. Any other run is answered exactly as a run
/// that does not exist: what a limited or walled token learns must not
/// depend on runs it may not see.
pub(crate) async fn load(
    state: &AppState,
    caller: &Caller,
    run_id: &str,
    route_agent: Option<&str>,
) -> Result<RunRecord, ApiError> {
    IdKind::Run.check(run_id)?;
    let unknown = || ApiError::UnknownRun {
        run_id: run_id.to_owned(),
        agent_id: route_agent.map(str::to_owned),
    };
    let run = state.store.get(run_id).await?.ok_or_else(unknown)?;
    let of_route = route_agent.is_none_or(|agent_id| run.agent_id == agent_id);
    if !(of_route && caller.may_see(&run)) {
        return Err(unknown());
    }
    Ok(run)
}

/// `GET /healthz`: 200 `{"status": "ok"}` when the store answers, 503
/// [`ApiError::Unhealthy`] when it does not. Needs no token, for load
/// balancers.
pub(crate) async fn health(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    state.store.get("healthz").await.map_err(ApiError::Unhealthy)?;
    Ok(Json(json!({"status": "ok"})))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_one_with_fields_of_its_own_is_refused() {
        let cursor = Cursor {
            created_at: "2026-12-04T10:00:00.000001Z".parse().unwrap(),
            run_id: "run-7".into(),
        };
        assert_eq!(Cursor::decode(&cursor.encode()).unwrap(), cursor);
        let made_up = URL_SAFE_NO_PAD.encode(br#"{"o":40,"t":"2026-12-04T10:00:00.000001Z","r":"run-7"}"#);
        let err = Cursor::decode(&made_up).unwrap_err().to_string();
        assert!(err.contains("pass the nextCursor of the previous page"), "{err}");
    }

    #[test]
    fn a_cursor_this_server_did_not_give_out_is_refused_saying_what_to_pass() {
        for bad in ["nope", "e30", &URL_SAFE_NO_PAD.encode(b"[1,2]")] {
            let err = Cursor::decode(bad).unwrap_err().to_string();
            assert!(err.contains("pass the nextCursor of the previous page"), "{err}");
        }
    }
}

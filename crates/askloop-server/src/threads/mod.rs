//! Mastra's memory routes, `/api/memory/threads...`: threads listed by
//! resource and agent, created, read, renamed and deleted, and their
//! messages with each waiting question as its run stands now.
//!
//! A thread is keyed by its resource and its id. Mastra's routes that read
//! one thread name only its id (and the agent); the thread is found among
//! the resources the caller may use, or by `?resourceId=`. Another
//! resource's thread answers exactly as an unknown one.

pub(crate) mod request;
mod shape;

use std::sync::Arc;

use askloop::{StoreError, Thread, ThreadDeletion, ThreadEdit, ThreadKey, ThreadQuery, ThreadStore};
use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};

pub(crate) use shape::{MessagePage, ThreadBody, ThreadPage};

type AppStateRef = State<Arc<AppState>>;

/// The most threads or messages one page holds.
const MAX_PER_PAGE: u32 = 1000;

fn store(state: &AppState) -> Result<&dyn ThreadStore, ApiError> {
    state.store.thread_store().ok_or(ApiError::Store(StoreError::NoThreads))
}

/// `?agentId=&resourceId=&page=&perPage=` of the thread routes.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ThreadParams {
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    resource_id: Option<String>,
    #[serde(default)]
    page: Option<u32>,
    #[serde(default)]
    per_page: Option<u32>,
    /// On a delete: cancel the thread's unfinished runs first.
    #[serde(default)]
    cancel_runs: Option<bool>,
}

impl ThreadParams {
    fn paging(&self, default: u32) -> (u32, u32) {
        (
            self.page.unwrap_or(0),
            self.per_page.unwrap_or(default).clamp(1, MAX_PER_PAGE),
        )
    }
}

/// Checks `agentId` when the request names one: a known agent the caller
/// may act for.
fn check_agent(state: &AppState, caller: &Caller, agent_id: Option<&str>) -> Result<(), ApiError> {
    if let Some(agent_id) = agent_id {
        caller.check(agent_id)?;
        state.agent(agent_id)?;
    }
    Ok(())
}

/// `GET /api/memory/threads?resourceId=&agentId=`: the caller's threads,
/// newest first, a page at a time (Mastra's `page` and `perPage`, 100 by
/// default), with how many there are in all (`total`); an untitled thread
/// carries the start of its first message (`firstMessage`), read for the
/// whole page in one store call.
pub(crate) async fn list(
    State(state): AppStateRef,
    caller: Caller,
    ApiQuery(params): ApiQuery<ThreadParams>,
) -> Result<Json<ThreadPage>, ApiError> {
    check_agent(&state, &caller, params.agent_id.as_deref())?;
    let resource = caller.listing_resource(params.resource_id.as_deref(), "threads")?;
    let (page, per_page) = params.paging(100);
    let query = ThreadQuery {
        resource_id: resource,
        agent_id: params.agent_id.clone(),
        offset: page.saturating_mul(per_page),
        limit: Some(per_page),
        ..ThreadQuery::default()
    };
    let threads = store(&state)?;
    let listed = threads.threads(&query).await?;
    let total = threads
        .count_threads(&ThreadQuery {
            offset: 0,
            limit: None,
            ..query.clone()
        })
        .await?;
    let has_more = u64::from(query.offset) + (listed.len() as u64) < total;
    Ok(Json(ThreadPage {
        threads: ThreadBody::named(threads, &listed).await?,
        total,
        page,
        per_page,
        has_more,
    }))
}

/// `POST /api/memory/threads`: a new thread, `{threadId?, resourceId,
/// title?, metadata?, agentId?}` (a thread id is made when none is given).
pub(crate) async fn create(
    State(state): AppStateRef,
    caller: Caller,
    ApiQuery(params): ApiQuery<ThreadParams>,
    ApiJson(mut body): ApiJson<Map<String, Value>>,
) -> Result<Json<ThreadBody>, ApiError> {
    let resource = text_field(&mut body, "resourceId")?.ok_or_else(|| refused("resourceId", "is required"))?;
    let thread_id = text_field(&mut body, "threadId")?.unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let title = text_field(&mut body, "title")?;
    let agent_id = text_field(&mut body, "agentId")?.or(params.agent_id.clone());
    let metadata = metadata_field(&mut body)?.unwrap_or(Value::Null);
    if let Some(field) = body.keys().next() {
        return Err(refused(
            field,
            "this route takes threadId, resourceId, title, metadata and agentId",
        ));
    }
    caller.check_resource(&resource)?;
    askloop::IdKind::Resource
        .check(&resource)
        .map_err(askloop::RunError::from)?;
    askloop::IdKind::Thread
        .check(&thread_id)
        .map_err(askloop::RunError::from)?;
    let agent_id = match agent_id {
        Some(agent_id) => {
            check_agent(&state, &caller, Some(&agent_id))?;
            agent_id
        }
        None => state
            .agents
            .iter()
            .find(|a| caller.may_act_for(a.id()))
            .map(|a| a.id().to_owned())
            .ok_or_else(|| refused("agentId", "is required: the caller may act for no agent of this server"))?,
    };
    let key = ThreadKey::new(resource, thread_id);
    let mut thread = Thread::new(&key, agent_id, state.now());
    thread.title = title.unwrap_or_default();
    thread.metadata = metadata;
    store(&state)?.create_thread(&thread).await?;
    Ok(Json(ThreadBody::of(&thread)))
}

/// The thread a route names by its id, among the resources the caller may
/// use (or the one `?resourceId=` names): another resource's thread is as
/// unknown as a missing one.
pub(crate) async fn find(
    state: &AppState,
    caller: &Caller,
    thread_id: &str,
    resource: Option<&str>,
) -> Result<Thread, ApiError> {
    let threads = store(state)?;
    let unknown = || ApiError::UnknownThread {
        thread_id: thread_id.to_owned(),
    };
    if askloop::IdKind::Thread.check(thread_id).is_err() {
        return Err(unknown());
    }
    if let Some(resource) = resource {
        caller.check_resource(resource)?;
        return threads
            .thread(&ThreadKey::new(resource, thread_id))
            .await?
            .ok_or_else(unknown);
    }
    if let Some(resources) = caller.resources() {
        for resource in resources {
            if let Some(thread) = threads.thread(&ThreadKey::new(resource.as_str(), thread_id)).await? {
                return Ok(thread);
            }
        }
        return Err(unknown());
    }
    let found = threads
        .threads(&ThreadQuery {
            thread_id: Some(thread_id.to_owned()),
            limit: Some(2),
            ..ThreadQuery::default()
        })
        .await?;
    match <[Thread; 1]>::try_from(found) {
        Ok([thread]) => Ok(thread),
        Err(found) if found.is_empty() => Err(unknown()),
        Err(_) => Err(ApiError::AmbiguousThread {
            thread_id: thread_id.to_owned(),
        }),
    }
}

/// `?threadId=&resourceId=` of the listings of runs (`GET /api/runs`,
/// `suspended-runs`): the runs on one stored thread, or on any thread of a
/// resource.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ThreadFilter {
    #[serde(default)]
    pub(crate) thread_id: Option<String>,
    #[serde(default)]
    pub(crate) resource_id: Option<String>,
}

impl ThreadFilter {
    /// The stored threads a listing is limited to: one thread (found among
    /// the caller's resources, or in the one named: another resource's is
    /// as unknown as a missing one), every thread of a resource the caller
    /// may use, or none named (`None`).
    pub(crate) async fn resolve(self, state: &AppState, caller: &Caller) -> Result<Option<ThreadKey>, ApiError> {
        let thread_id = self.thread_id.filter(|t| !t.is_empty());
        let resource_id = self.resource_id.filter(|r| !r.is_empty());
        match (thread_id, resource_id) {
            (None, None) => Ok(None),
            (None, Some(resource)) => {
                caller.check_resource(&resource)?;
                Ok(Some(ThreadKey::new(resource, "")))
            }
            (Some(thread), resource) => Ok(Some(find(state, caller, &thread, resource.as_deref()).await?.key())),
        }
    }
}

/// `GET /api/memory/threads/{threadId}`.
pub(crate) async fn get(
    State(state): AppStateRef,
    caller: Caller,
    ApiPath(thread_id): ApiPath<String>,
    ApiQuery(params): ApiQuery<ThreadParams>,
) -> Result<Json<ThreadBody>, ApiError> {
    check_agent(&state, &caller, params.agent_id.as_deref())?;
    let thread = find(&state, &caller, &thread_id, params.resource_id.as_deref()).await?;
    let named = ThreadBody::named(store(&state)?, std::slice::from_ref(&thread)).await?;
    Ok(Json(
        named.into_iter().next().unwrap_or_else(|| ThreadBody::of(&thread)),
    ))
}

/// `PATCH /api/memory/threads/{threadId}`: `{title?, metadata?,
/// resourceId?}`.
pub(crate) async fn update(
    State(state): AppStateRef,
    caller: Caller,
    ApiPath(thread_id): ApiPath<String>,
    ApiQuery(params): ApiQuery<ThreadParams>,
    ApiJson(mut body): ApiJson<Map<String, Value>>,
) -> Result<Json<ThreadBody>, ApiError> {
    check_agent(&state, &caller, params.agent_id.as_deref())?;
    let resource = text_field(&mut body, "resourceId")?.or(params.resource_id.clone());
    let title = text_field(&mut body, "title")?;
    let metadata = metadata_field(&mut body)?;
    if let Some(field) = body.keys().next() {
        return Err(refused(field, "this route takes title, metadata and resourceId"));
    }
    let thread = find(&state, &caller, &thread_id, resource.as_deref()).await?;
    let edit = ThreadEdit {
        title: title.as_deref(),
        metadata: metadata.as_ref(),
    };
    let edited = store(&state)?
        .update_thread(&thread.key(), edit)
        .await?
        .ok_or(ApiError::UnknownThread { thread_id })?;
    Ok(Json(ThreadBody::of(&edited)))
}

/// `DELETE /api/memory/threads/{threadId}`: the thread with its messages
/// and runs. A thread whose runs still wait on a person (or run) is a 409
/// naming them, unless `?cancelRuns=true` cancels them first (recorded as
/// cancels by the caller).
pub(crate) async fn delete(
    State(state): AppStateRef,
    caller: Caller,
    ApiPath(thread_id): ApiPath<String>,
    ApiQuery(params): ApiQuery<ThreadParams>,
) -> Result<Json<Value>, ApiError> {
    check_agent(&state, &caller, params.agent_id.as_deref())?;
    let thread = find(&state, &caller, &thread_id, params.resource_id.as_deref()).await?;
    // Deleting a thread deletes its runs: only a caller that may act on
    // every one of them may.
    if caller.agents().is_some() && holds_runs_of_other_agents(&state, &caller, &thread).await? {
        return Err(ApiError::ThreadOfOtherAgents {
            thread_id,
            caller: caller.author().by.unwrap_or_default(),
        });
    }
    let threads = store(&state)?;
    for _ in 0..3 {
        match threads.delete_thread(&thread.key()).await? {
            ThreadDeletion::Deleted => return Ok(Json(json!({"result": "Thread deleted"}))),
            ThreadDeletion::NotFound => return Err(ApiError::UnknownThread { thread_id }),
            ThreadDeletion::Busy { runs } if params.cancel_runs == Some(true) => {
                for run_id in runs {
                    let Some(run) = state.store.get(&run_id).await? else {
                        continue;
                    };
                    let agent = state.agent(&run.agent_id)?;
                    caller.check(agent.id())?;
                    match agent.cancel_run(&run_id, caller.author()).await {
                        Ok(()) | Err(askloop::RunError::Finished { .. }) => {}
                        Err(err) => return Err(err.into()),
                    }
                }
            }
            ThreadDeletion::Busy { runs } => return Err(ApiError::ThreadBusy { thread_id, runs }),
        }
    }
    Err(ApiError::ThreadBusy {
        thread_id,
        runs: Vec::new(),
    })
}

/// `GET /api/memory/threads/{threadId}/messages?page=&perPage=`: the
/// thread's messages, oldest first, in Mastra's stored shape; a page is a
/// range of the thread's sequence numbers (40 by default). A tool call
/// shows its run's state now: waiting (with the question), or its result.
pub(crate) async fn messages(
    State(state): AppStateRef,
    caller: Caller,
    ApiPath(thread_id): ApiPath<String>,
    ApiQuery(params): ApiQuery<ThreadParams>,
) -> Result<Json<MessagePage>, ApiError> {
    check_agent(&state, &caller, params.agent_id.as_deref())?;
    let thread = find(&state, &caller, &thread_id, params.resource_id.as_deref()).await?;
    let (page, per_page) = params.paging(40);
    let from = i64::from(page) * i64::from(per_page);
    let stored = store(&state)?.thread_messages(&thread.key(), from, per_page).await?;
    let has_more = from + (stored.len() as i64) < thread.message_count;
    let stored = of_agents_it_may_act_for(&state, &caller, stored).await?;
    let messages = shape::messages(&state, &thread, stored).await?;
    Ok(Json(MessagePage {
        messages,
        total: thread.message_count,
        page,
        per_page,
        has_more,
        ui_messages: Value::Null,
    }))
}

/// Whether any run on `thread` is of an agent `caller` may not act for.
async fn holds_runs_of_other_agents(state: &AppState, caller: &Caller, thread: &Thread) -> Result<bool, ApiError> {
    let mut query = askloop::RunQuery {
        thread: Some(thread.key()),
        limit: Some(100),
        ..Default::default()
    };
    loop {
        let page = state.store.list(&query).await?;
        if page.iter().any(|run| !caller.may_act_for(&run.agent_id)) {
            return Ok(true);
        }
        match page.last() {
            Some(last) if page.len() == 100 => query.after = Some(askloop::RunCursor::after_created(last)),
            _ => return Ok(false),
        }
    }
}

/// The messages of `stored` whose runs are of agents `caller` may act for:
/// a token limited to some agents reads nothing of other agents' runs on a
/// thread it shares (a message whose run is gone is left out too).
async fn of_agents_it_may_act_for(
    state: &AppState,
    caller: &Caller,
    stored: Vec<askloop::ThreadMessage>,
) -> Result<Vec<askloop::ThreadMessage>, ApiError> {
    if caller.agents().is_none() {
        return Ok(stored);
    }
    let mut agents: std::collections::HashMap<String, bool> = std::collections::HashMap::new();
    let mut kept = Vec::with_capacity(stored.len());
    for message in stored {
        let allowed = match agents.get(&message.run_id) {
            Some(allowed) => *allowed,
            None => {
                let run = state.store.get(&message.run_id).await?;
                let allowed = run.is_some_and(|run| caller.may_act_for(&run.agent_id));
                agents.insert(message.run_id.clone(), allowed);
                allowed
            }
        };
        if allowed {
            kept.push(message);
        }
    }
    Ok(kept)
}

/// A text field of a body, taken out of it (`null` or missing: `None`).
fn text_field(body: &mut Map<String, Value>, field: &str) -> Result<Option<String>, ApiError> {
    match body.remove(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(refused(field, "must be a string")),
    }
}

/// A thread's `metadata`, taken out of a body: an object (`null` or
/// missing: `None`).
fn metadata_field(body: &mut Map<String, Value>) -> Result<Option<Value>, ApiError> {
    match body.remove("metadata") {
        None | Some(Value::Null) => Ok(None),
        Some(metadata @ Value::Object(_)) => Ok(Some(metadata)),
        Some(_) => Err(refused("metadata", "must be an object")),
    }
}

fn refused(field: &str, reason: &str) -> ApiError {
    ApiError::refused(field, reason)
}

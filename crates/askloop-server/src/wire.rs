//! The JSON bodies of the routes: what clients send and what they get.
//! Mastra's routes use Mastra's field names and order (recorded from a real
//! Mastra server); askloop's own routes follow the same camelCase style.

use std::collections::BTreeMap;
use std::sync::Arc;

use askloop::{Message, PendingKind, PendingToolCall, RunRecord, RunStatus, Usage};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Every time the server sends, written as `#[serde(serialize_with =
/// "crate::wire::millis")]`: RFC 3339 in UTC with milliseconds
/// (`2026-12-04T10:00:01.623Z`), as Mastra sends them
/// ([`askloop::rfc3339`]). Stored times keep microseconds; the wire has
/// one precision, whatever type a route sends.
pub(crate) fn millis<S: serde::Serializer>(at: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&askloop::rfc3339(*at))
}

/// [`millis`] for a time that may be absent.
pub(crate) fn millis_or_none<S: serde::Serializer>(
    at: &Option<DateTime<Utc>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match at {
        Some(at) => serializer.serialize_some(&askloop::rfc3339(*at)),
        None => serializer.serialize_none(),
    }
}

/// A run's resolutions as clients read them ([`askloop::Resolution::on_wire`]).
pub(crate) fn resolutions_on_wire<S: serde::Serializer>(
    resolutions: &[askloop::Resolution],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(resolutions.iter().map(askloop::Resolution::on_wire))
}

/// `POST /api/agents/{agentId}/stream` and `/generate`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StreamRequest {
    /// A string, or an array of `{role, content}`.
    pub(crate) messages: Value,
    /// The run's id, chosen by the caller.
    #[serde(default)]
    pub(crate) run_id: Option<String>,
    /// The conversation thread.
    #[serde(default)]
    pub(crate) thread_id: Option<String>,
    /// Every other field, each honoured or refused (`request_fields.rs`).
    #[serde(flatten)]
    pub(crate) fields: serde_json::Map<String, Value>,
}

/// `POST /api/agents/{agentId}/resume-stream`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResumeRequest {
    pub(crate) run_id: String,
    #[serde(default)]
    pub(crate) tool_call_id: Option<String>,
    /// Required; `null` is an answer like any other (and usually refused).
    pub(crate) resume_data: Value,
    /// Every other field, each accepted or refused (`request_fields.rs`).
    #[serde(flatten)]
    pub(crate) fields: serde_json::Map<String, Value>,
}

/// `POST /api/agents/{agentId}/approve-tool-call` and `/decline-tool-call`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DecisionRequest {
    pub(crate) run_id: String,
    #[serde(default)]
    pub(crate) tool_call_id: Option<String>,
    #[serde(default)]
    pub(crate) reason: Option<String>,
    /// Every other field, each accepted or refused (`request_fields.rs`).
    #[serde(flatten)]
    pub(crate) fields: serde_json::Map<String, Value>,
}

/// One agent in `GET /api/agents`, in Mastra's shape (the fields a client
/// reads; Mastra's internals such as processors are left out).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AgentInfo {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) instructions: String,
    pub(crate) agents: BTreeMap<String, Value>,
    pub(crate) tools: Keyed<ToolInfo>,
    pub(crate) workflows: BTreeMap<String, Value>,
    pub(crate) provider: String,
    pub(crate) model_id: String,
    pub(crate) default_options: BTreeMap<String, Value>,
}

/// A JSON object of values keyed by id, in the order given (Mastra lists
/// agents and tools in the order they were registered).
#[derive(Debug)]
pub(crate) struct Keyed<T>(pub(crate) Vec<(String, T)>);

impl<T: Serialize> Serialize for Keyed<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// One tool in [`AgentInfo`]. `inputSchema` is JSON text of
/// `{"json": <schema>}`, as Mastra sends it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolInfo {
    pub(crate) id: String,
    pub(crate) description: String,
    pub(crate) input_schema: String,
    pub(crate) require_approval: bool,
}

/// `GET /api/agents/{agentId}/suspended-runs`: Mastra's `runs` and `total`
/// (every waiting run the listing holds, also those past the page), and,
/// when the request named a page, the page's place as Mastra's paged
/// listings say it (without one, the body is Mastra's, byte for byte).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SuspendedRuns {
    pub(crate) runs: Vec<SuspendedRun>,
    pub(crate) total: u64,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(crate) paging: Option<PageOf>,
}

/// Where a page sits in a paged listing.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PageOf {
    pub(crate) page: u32,
    pub(crate) per_page: u32,
    pub(crate) has_more: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SuspendedRun {
    pub(crate) run_id: String,
    pub(crate) status: RunStatus,
    /// The stored thread the run is on, as Mastra lists a run with memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) thread_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) resource_id: Option<String>,
    pub(crate) suspended_at: String,
    pub(crate) tool_calls: Vec<SuspendedCall>,
}

/// A pending call as Mastra lists it: the question (`suspendPayload`) for a
/// suspended tool, the input (`args`) for a call waiting on approval.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SuspendedCall {
    pub(crate) tool_call_id: String,
    pub(crate) tool_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) args: Option<Arc<Value>>,
    pub(crate) requires_approval: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) suspend_payload: Option<Arc<Value>>,
}

impl SuspendedRun {
    /// The run as it waits at `now`.
    pub(crate) fn of(run: RunRecord, now: DateTime<Utc>) -> Self {
        let (thread_id, resource_id) = match &run.memory {
            Some(memory) => (Some(memory.key.thread_id.clone()), Some(memory.key.resource_id.clone())),
            None => (None, None),
        };
        let tool_calls = run
            .waiting_calls(now)
            .map(|waiting| waiting.call.clone())
            .map(|p| match p.kind {
                PendingKind::Approval => SuspendedCall {
                    tool_call_id: p.tool_call_id,
                    tool_name: p.tool_name,
                    args: Some(p.args),
                    requires_approval: true,
                    suspend_payload: None,
                },
                PendingKind::Suspended => SuspendedCall {
                    tool_call_id: p.tool_call_id,
                    tool_name: p.tool_name,
                    args: None,
                    requires_approval: false,
                    suspend_payload: Some(p.suspend_payload.unwrap_or_else(|| Arc::new(Value::Null))),
                },
            })
            .collect();
        SuspendedRun {
            thread_id,
            resource_id,
            suspended_at: askloop::rfc3339(run.updated_at),
            status: run.status(),
            run_id: run.run_id,
            tool_calls,
        }
    }
}

/// `POST /api/agents/{agentId}/generate`: how the run ended. A suspended
/// run has `finishReason: "suspended"`, its `runId` and the calls it waits
/// on; `suspendPayload` is the first question's, as Mastra reports it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GenerateResponse {
    pub(crate) text: String,
    pub(crate) finish_reason: askloop::FinishReason,
    pub(crate) run_id: String,
    pub(crate) status: RunStatus,
    pub(crate) usage: Usage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) suspend_payload: Option<Arc<Value>>,
    pub(crate) pending_tool_calls: Vec<PendingCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

/// A pending call in askloop's own shapes: everything needed to show and
/// answer it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PendingCall {
    pub(crate) tool_call_id: String,
    pub(crate) tool_name: String,
    /// `suspended` (answer it with resume-stream) or `approval` (approve or
    /// decline it).
    pub(crate) kind: PendingKind,
    pub(crate) requires_approval: bool,
    pub(crate) args: Arc<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) suspend_payload: Option<Arc<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) resume_schema: Option<Arc<Value>>,
    /// When it stops waiting (RFC 3339), if it has a time limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) expires_at: Option<String>,
}

impl From<PendingToolCall> for PendingCall {
    fn from(p: PendingToolCall) -> Self {
        PendingCall {
            requires_approval: p.kind == PendingKind::Approval,
            tool_call_id: p.tool_call_id,
            tool_name: p.tool_name,
            kind: p.kind,
            args: p.args,
            suspend_payload: p.suspend_payload,
            resume_schema: p.resume_schema,
            expires_at: p.expires_at.map(askloop::rfc3339),
        }
    }
}

/// One run in `GET /api/runs`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunSummary {
    pub(crate) run_id: String,
    pub(crate) agent_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) thread_id: Option<String>,
    /// The resource of the stored thread the run is on; absent when the
    /// run is on none (its `threadId`, if any, is then only a label).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) resource_id: Option<String>,
    pub(crate) status: RunStatus,
    pub(crate) created_at: String,
    pub(crate) updated_at: String,
    pub(crate) steps: u32,
    pub(crate) pending_tool_calls: Vec<PendingCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// Every answer, decline, approval, expiry and cancel, with when, through
    /// which interface and by whom.
    #[serde(serialize_with = "resolutions_on_wire")]
    pub(crate) resolutions: Vec<askloop::Resolution>,
}

impl RunSummary {
    /// The run as it stands at `now`: its waiting calls are those that
    /// still wait then.
    pub(crate) fn of(run: RunRecord, now: DateTime<Utc>) -> Self {
        let error = run.error();
        let pending_tool_calls = run
            .waiting_calls(now)
            .map(|waiting| PendingCall::from(waiting.call.clone()))
            .collect();
        RunSummary {
            status: run.status(),
            resource_id: run.memory.as_ref().map(|m| m.key.resource_id.clone()),
            thread_id: run.memory.as_ref().map(|m| m.key.thread_id.clone()).or(run.thread_id),
            run_id: run.run_id,
            agent_id: run.agent_id,
            created_at: askloop::rfc3339(run.created_at),
            updated_at: askloop::rfc3339(run.updated_at),
            steps: run.steps,
            pending_tool_calls,
            error,
            resolutions: run.resolutions,
        }
    }
}

/// `GET /api/runs`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunPage {
    pub(crate) runs: Vec<RunSummary>,
    /// Pass as `cursor` for the next (older) page; `null` on the last page.
    pub(crate) next_cursor: Option<String>,
    /// How many runs the whole listing holds, when asked for (`total=true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) total: Option<u64>,
}

/// `GET /api/runs/{runId}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunDetail {
    #[serde(flatten)]
    pub(crate) summary: RunSummary,
    pub(crate) version: i64,
    pub(crate) usage: Usage,
    /// What the run was started with beyond its agent's configuration (a
    /// lower step limit, approval of every call, ...); left out when
    /// nothing.
    #[serde(skip_serializing_if = "askloop::RunSettings::is_default")]
    pub(crate) settings: askloop::RunSettings,
    /// Whether the run's calls named `ask_user` are questions of askloop's
    /// built-in tool (see `AppState::asks_with_ask_user`).
    pub(crate) built_in_ask_user: bool,
    pub(crate) messages: Vec<Message>,
}

/// `POST /api/runs/{runId}/cancel`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Cancelled {
    pub(crate) run_id: String,
    pub(crate) status: RunStatus,
}

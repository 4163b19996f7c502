//! The stored state of a run, without its messages: what every store
//! keeps of a run and hands back.
//!
//! Its status and pending calls are kept here and set and read by the run
//! and entry machines (`agent::machine`): the crate's `clippy.toml` keeps
//! every other module of the crate from them (the derives below read every
//! field, hence the allowance on this module).
#![allow(clippy::disallowed_fields, reason = "the record's own derives read every field")]

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Lease, PendingToolCall, Resolution, ResolutionKind, RunFailure, RunMemory, RunSettings, RunStatus};
use crate::message::{ToolResult, Usage};

/// The stored state of a run, without its messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    /// The run's id (UUID v7 unless the caller chose one).
    pub run_id: String,
    /// The agent that owns it.
    pub agent_id: String,
    /// A label naming a conversation, as given by a caller (Mastra's
    /// deprecated top-level `threadId`): nothing is read from it. A run on
    /// a stored thread has [`RunRecord::memory`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// The stored thread the run is on: it started from the thread's last
    /// messages and appends its own to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<RunMemory>,
    /// The resource of whoever started the run, when they were walled to
    /// resources (the person a proxy named, or a named token's own
    /// resource): a run on no thread belongs to it as a thread's run belongs
    /// to its thread's resource (see [`RunRecord::resource`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_id: Option<String>,
    /// Where it is: read through [`RunRecord::status`]; only the run and
    /// entry machines change it.
    pub(crate) status: RunStatus,
    /// Bumped by every write; the compare-and-set token.
    pub version: i64,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was last written.
    pub updated_at: DateTime<Utc>,
    /// The tool calls it waits on (empty unless suspended): whether one
    /// still waits is [`RunRecord::call_state`]'s to say.
    pub(crate) pending: Vec<PendingToolCall>,
    /// Results already produced in the current step, kept while other calls
    /// of the step are pending (never re-run).
    #[serde(default)]
    pub step_results: Vec<ToolResult>,
    /// How many messages the run has (the next message's sequence number).
    pub message_count: i64,
    /// How many model steps it has taken.
    pub steps: u32,
    /// Tokens used so far.
    pub usage: Usage,
    /// Free-form data the host attaches (e.g. the CLI records the model it
    /// started with).
    #[serde(default)]
    pub metadata: Value,
    /// What the run was started with beyond its agent's configuration:
    /// narrower limits, other instructions.
    #[serde(default, skip_serializing_if = "RunSettings::is_default")]
    pub settings: RunSettings,
    /// Who drives the run and until when, while it is `running` (none for
    /// runs not running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    /// Why the run failed, typed, for a failed run written by a build that
    /// stores it (older failed runs have only [`RunRecord::error`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<RunFailure>,
    /// Every answer, decline, approval, expiry, cancel and recovery of the
    /// run, oldest first, with who made it and through which interface.
    #[serde(default)]
    pub resolutions: Vec<Resolution>,
    /// The run's trace context, as a W3C `traceparent`: its first drive's
    /// span, stored when the run starts with trace export on, so that every
    /// later drive (from any process) continues the same trace (see
    /// [`crate::telemetry`]). Advisory: a build that does not read it only
    /// starts a new trace, so it raises no layout version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
}

impl RunRecord {
    /// What went wrong, for people, when the run failed: its failure's
    /// message (the one place a failed run's reason is held is
    /// [`RunRecord::failure`]).
    pub fn error(&self) -> Option<String> {
        self.failure.as_ref().map(RunFailure::message)
    }

    /// The resource the run belongs to: its thread's, else the one it was
    /// started for ([`RunRecord::resource_id`]); `None` for a run on no
    /// thread started by a caller walled to no resource (or stored before
    /// runs kept their resource).
    pub fn resource(&self) -> Option<&str> {
        match &self.memory {
            Some(memory) => Some(&memory.key.resource_id),
            None => self.resource_id.as_deref(),
        }
    }

    /// The layout the run is stored with: the oldest that holds it (see
    /// [`RUN_SCHEMA_VERSION`](super::RUN_SCHEMA_VERSION)).
    pub fn schema_version(&self) -> i32 {
        let own = if self.memory.is_none() && self.resource_id.is_some() {
            8
        } else if self.memory.is_some() {
            3
        } else if self.settings.is_default() {
            1
        } else {
            2
        };
        self.resolutions.iter().map(Resolution::layout).fold(own, i32::max)
    }

    /// The stored resolution of a call, the latest if several.
    pub fn resolution_of(&self, tool_call_id: &str) -> Option<&Resolution> {
        self.resolutions
            .iter()
            .rev()
            .find(|r| r.tool_call_id.as_deref() == Some(tool_call_id))
    }

    /// How a call was resolved: its own resolution, else the run's
    /// supersession or cancel when that named no one call (a run superseded
    /// or cancelled while it waited resolved every call it waited on).
    pub fn call_resolution(&self, tool_call_id: &str) -> Option<&Resolution> {
        self.resolution_of(tool_call_id).or_else(|| {
            self.resolutions.iter().rev().find(|r| {
                r.tool_call_id.is_none() && matches!(r.kind, ResolutionKind::Superseded | ResolutionKind::Cancelled)
            })
        })
    }
}

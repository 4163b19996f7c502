//! askloop: LLM agents that stop in the middle of a run to ask a person, and
//! carry on in the same run when the answer comes, from any process.
//!
//! - [`Agent`] drives runs: [`Agent::stream`], [`Agent::resume_stream`],
//!   [`Agent::approve_tool_call`], [`Agent::decline_tool_call`],
//!   [`Agent::cancel_run`].
//! - [`AskUser`] is the built-in `ask_user` tool (free text, single select,
//!   multi select), with answers checked against the question.
//! - [`Tool`] and [`ToolContext::suspend`] let any tool pause for a person.
//! - [`Chunk`]s are Mastra's stream chunks (`tool-call-suspended`, ...).
//! - [`RunStore`] keeps runs between steps ([`MemoryStore`] here; SQLite and
//!   PostgreSQL in `askloop-store`).
//! - [`Model`] is what a language model provides; [`ScriptedModel`] replays a
//!   script for tests and demos, real providers are in `askloop-providers`.
//! - [`sse`] reads server-sent events, as the providers' streams and
//!   askloop's own arrive.
//! - [`visible`] is how every surface shows text a person decides on:
//!   bidirectional controls and invisible characters marked, never hidden.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod agent;
pub mod ask_user;
mod backoff;
mod cause;
pub mod chunk;
mod clock;
mod duration;
mod error;
mod id;
pub mod message;
pub mod model;
mod rules;
pub mod scripted;
pub mod sse;
pub mod store;
pub mod telemetry;
pub mod tool;
mod unknown_name;
pub mod visible;

pub use agent::{
    Agent, AgentBuilder, AgentInput, AgentStream, BuildError, CallDecision, CallState, Closed, DEFAULT_LAST_MESSAGES,
    DEFAULT_MAX_STEPS, MAX_REASON_BYTES, ResumeOptions, StreamOptions, StreamOutput, ThreadOptions, Waiting, WaitsOn,
};
pub use ask_user::{ASK_USER_TOOL_ID, AskUser, AskUserInput, AskUserLimits, AskUserOption, Question, SelectionMode};
pub use backoff::{Backoff, jitter};
pub use cause::{Cause, ErrorChain};
pub use chunk::{Chunk, ChunkKind};
pub use clock::{Clock, ManualClock, SystemClock, rfc3339, system_clock};
pub use duration::{DURATION_FORMS, InvalidDuration, human_duration, parse_duration};
pub use error::{RunError, RunErrorKind};
pub use id::{IdKind, IdProblem, InvalidId, MAX_ID_BYTES, quoted_excerpt, run_page_url, url_path_segment};
pub use message::{FinishReason, Message, ToolCall, ToolContent, ToolResult, Usage};
pub use model::{Model, ModelError, ModelEvent, ModelRequest, ModelStream, ToolCallIds, ToolSpec};
pub use rules::{ApprovalRule, ProposedCall, Verdict};
pub use scripted::{Script, ScriptError, ScriptedModel};
pub use store::{
    AgentWaiting, Always, AnswerLink, ArgumentsEdit, Author, ChangeBroadcast, ChangeFeed, DatabaseFault, Delivery,
    DeliveryOutcome, DeliveryState, DeliveryStore, EventType, ExpiredRuns, Grant, GrantNote, GrantQuery, GrantScope,
    GrantStore, Interface, Lease, LinkState, LinkStore, MemoryStore, Notice, OutboxMessage, PendingKind,
    PendingToolCall, RUN_SCHEMA_VERSION, Resolution, ResolutionKind, RunChange, RunChanges, RunCursor, RunFailure,
    RunMemory, RunQuery, RunRecord, RunSettings, RunStatus, RunStore, RunUpdate, StoreError, StoreErrorKind,
    Subscription, Thread, ThreadDeletion, ThreadEdit, ThreadKey, ThreadMessage, ThreadQuery, ThreadStore, call_results,
    context_messages,
};
pub use tool::{FunctionTool, InvalidResume, SchemaError, Tool, ToolContext, ToolError, ToolOutcome, ToolOutput};
pub use unknown_name::UnknownName;

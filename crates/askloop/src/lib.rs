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
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod agent;
pub mod ask_user;
pub mod chunk;
mod error;
pub mod message;
pub mod model;
pub mod scripted;
pub mod store;
pub mod tool;

pub use agent::{
    Agent, AgentBuilder, AgentInput, AgentStream, BuildError, DEFAULT_MAX_STEPS, ResumeOptions, StreamOptions,
    StreamOutput,
};
pub use ask_user::{ASK_USER_TOOL_ID, AskUser, AskUserInput, AskUserLimits, AskUserOption, Question, SelectionMode};
pub use chunk::{Chunk, ChunkKind};
pub use error::RunError;
pub use message::{FinishReason, Message, ToolCall, ToolContent, ToolResult, Usage};
pub use model::{Model, ModelError, ModelEvent, ModelRequest, ModelStream, ToolCallIds, ToolSpec};
pub use scripted::{Script, ScriptError, ScriptedModel};
pub use store::{
    Author, ChangeBroadcast, DatabaseFault, Delivery, DeliveryOutcome, DeliveryState, EventType, ExpiredRuns,
    Interface, Lease, MemoryStore, OutboxMessage, PendingKind, PendingToolCall, RUN_SCHEMA_VERSION, Resolution,
    ResolutionKind, RunChange, RunChanges, RunCursor, RunFailure, RunQuery, RunRecord, RunStatus, RunStore, RunUpdate,
    StoreError, Subscription,
};
pub use tool::{FunctionTool, InvalidResume, Tool, ToolContext, ToolError, ToolOutcome, ToolOutput};

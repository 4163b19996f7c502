//! MCP both ways for askloop.
//!
//! - **MCP servers' tools for agents** ([`mcp_tools`]): the tools of a
//!   server started as a program (stdio) or reached over streamable HTTP
//!   become askloop tools, with their schemas. When the server asks the
//!   person something mid-call (`elicitation/create`), the run suspends with
//!   an [`ElicitationPayload`], a question like any other: stored, shown,
//!   answered from the CLI, the API or the page, and checked against the
//!   server's schema before it is accepted.
//! - **Agents as MCP tools** ([`AgentTools`]): each agent is a tool
//!   `ask_<agent>`; its questions reach the MCP client as elicitations when
//!   the client supports them, and otherwise the result says the run waits,
//!   with its id and where to answer.
//!
//! askloop speaks MCP protocol revision [`PROTOCOL_VERSION`] (through rmcp).
//!
//! # What is durable
//!
//! The question and its answer are: the suspension is stored before it is
//! shown, and the answer is checked and stored like any resume. The MCP
//! session of the call that asked is not: it lives in the process that made
//! the call, for at most [`McpServerSpec::hold_for`]. An answer that reaches
//! that process in time goes back to the server, and the call finishes (or
//! asks again). An answer that comes later, or to another process, cannot
//! reach the server: the model is then given the answer as the tool's
//! result, with a note that the server never received it, and the run goes
//! on.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use askloop::Agent;
//! use askloop_mcp::{McpServerSpec, mcp_tools};
//!
//! let everything = McpServerSpec::stdio("everything", "npx", ["-y", "@modelcontextprotocol/server-everything"]);
//! let mut agent = Agent::builder("helper").instructions("Use the tools.");
//! for tool in mcp_tools(&everything).await? {
//!     agent = agent.tool_arc(tool);
//! }
//! // ... run the agent; before the program ends, no server it started runs on:
//! askloop_mcp::stop_servers().await;
//! # Ok(()) }
//! ```
//!
//! # Servers that misbehave
//!
//! Each server is held to deadlines ([`McpServerSpec::initialize_timeout`],
//! `list_timeout`, `call_timeout`: a call that misses its deadline ends as a
//! tool error and the server hears `notifications/cancelled`), a number of
//! questions per call ([`McpServerSpec::max_questions`], and
//! [`MAX_QUEUED_QUESTIONS`] held at once), and what a stdio server sends
//! that askloop cannot read ends its session and fails the call at once
//! ([`stdio`]). A stdio server runs in a process group of its own and is
//! stopped when its session ends (SIGTERM, then SIGKILL after
//! [`McpServerSpec::stop_grace`]), and [`stop_servers`] stops every one
//! still running. The sessions of the `/mcp` endpoint are bounded by
//! [`SessionLimits`].

mod agents;
mod connect;
pub mod elicitation;
pub mod incoming;
mod pool;
mod process;
mod sessions;
mod spec;
pub mod stdio;
mod tools;

use askloop::Cause;

pub use agents::{AgentTools, Caller, DEFAULT_RESOURCE, WaitingLinks, ask_tool_name, serve_stdio};
pub use connect::{MAX_QUEUED_QUESTIONS, PROTOCOL_VERSION};
pub use elicitation::{ELICITATION_KIND, ElicitationAnswer, ElicitationPayload};
pub use process::stop_servers;
pub use sessions::{
    BoundSessions, McpHttpService, SessionHold, SessionLimits, TOO_MANY_SESSIONS, streamable_http_service,
};
pub use spec::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_HOLD_FOR, DEFAULT_INITIALIZE_TIMEOUT, DEFAULT_LIST_TIMEOUT, DEFAULT_MAX_QUESTIONS,
    DEFAULT_STOP_GRACE, McpServerSpec, McpTransport,
};
pub use tools::{LiveCalls, McpTool, mcp_tools};

/// An MCP server could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The program of a stdio server could not be started.
    #[error("cannot start the MCP server {server} ({command}): {reason}")]
    Start {
        /// The server's name.
        server: String,
        /// The program.
        command: String,
        /// Why.
        reason: String,
        /// The error underneath, for logs.
        #[source]
        source: Option<Cause>,
    },
    /// The server did not complete the `initialize` handshake.
    #[error("the MCP server {server} did not start a session: {reason}")]
    Handshake {
        /// The server's name.
        server: String,
        /// Why.
        reason: String,
        /// The error underneath, for logs.
        #[source]
        source: Option<Cause>,
    },
    /// A request to the server failed (not a tool's own error result).
    #[error("the MCP server {server} failed the request {tool}: {reason}")]
    Call {
        /// The server's name.
        server: String,
        /// The tool, or the request.
        tool: String,
        /// Why.
        reason: String,
        /// The error underneath, for logs.
        #[source]
        source: Option<Cause>,
    },
    /// The server did not answer within its deadline.
    #[error("the MCP server {server} did not answer {what} within {}", askloop::human_duration(*after))]
    Timeout {
        /// The server's name.
        server: String,
        /// What it did not answer (`initialize`, `tools/list`, a call).
        what: String,
        /// Its deadline.
        after: std::time::Duration,
    },
    /// The server sent something askloop cannot read (a line over 16 MiB,
    /// JSON nested too deep, a request or an answer that does not fit), so
    /// its session was ended.
    #[error("the MCP server {server} sent what askloop cannot read during {during}, so its session was ended: {sent}")]
    Unreadable {
        /// The server's name.
        server: String,
        /// The request it was answering (`tools/list`, a tool's name).
        during: String,
        /// What was wrong with what it sent.
        sent: String,
    },
    /// A call asked the person more questions than its server may ask in
    /// one call.
    #[error(
        "the MCP server {server} asked more than {most} questions in one call of {tool}, so askloop ended the call \
         (max_questions in its [[agents.<id>.mcp]] table)"
    )]
    TooManyQuestions {
        /// The server's name.
        server: String,
        /// The tool called.
        tool: String,
        /// The most questions one call may ask.
        most: u32,
    },
    /// The configuration names a tool the server does not have.
    #[error("the MCP server {server} has no tool {tool:?}; its tools: {known}")]
    UnknownTool {
        /// The server's name.
        server: String,
        /// The missing tool.
        tool: String,
        /// The tools it has.
        known: String,
    },
}

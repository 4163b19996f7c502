//! The [`Model`] trait: what the agent needs from a language model.
//!
//! A model streams [`ModelEvent`]s for one turn. Real providers live in the
//! `askloop-providers` crate; [`ScriptedModel`](crate::ScriptedModel) replays a
//! script for tests, examples and the offline demo.

use std::fmt;
use std::pin::Pin;

use async_trait::async_trait;
use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cause::Cause;
use crate::message::{FinishReason, Message, Usage};

/// A tool as the model sees it: name, description and input schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    /// The tool's id, which the model uses as the function name.
    pub name: String,
    /// What the tool does and when to use it.
    pub description: String,
    /// JSON Schema of the tool's input.
    pub input_schema: Value,
}

/// One request to a model: the whole conversation so far.
///
/// Borrowed, so a step does not copy the conversation: the provider serialises
/// it into its request body before its stream starts.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    /// The run this request belongs to (for logs and headers).
    pub run_id: &'a str,
    /// The agent's instructions (or the run's own, when its
    /// [`RunSettings`](crate::RunSettings) replace them), sent as the
    /// system prompt.
    pub system: Option<&'a str>,
    /// The conversation, oldest first.
    pub messages: &'a [Message],
    /// The tools the model may call (those of the agent the run's
    /// settings leave active).
    pub tools: &'a [ToolSpec],
}

/// One event of a streamed model turn.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ModelEvent {
    /// A piece of the answer's text.
    TextDelta(String),
    /// A piece of the model's reasoning: Anthropic's thinking, the
    /// `reasoning_content` or `reasoning` of OpenAI-compatible servers
    /// (Ollama, vLLM, DeepSeek). It streams before or between the text and
    /// the calls, and the agent passes it on as `reasoning-*` chunks.
    ///
    /// It is shown, never kept: it is not stored in the run's conversation
    /// and not sent back to the model on the next step. Anthropic needs a
    /// thinking block sent back (with its signature) only when thinking is
    /// enabled together with tool use, and askloop does not enable thinking
    /// itself; the OpenAI-compatible servers take no reasoning back at all.
    ReasoningDelta(String),
    /// The model began a tool call.
    ToolCallStart {
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// A piece of a tool call's JSON arguments.
    ToolCallDelta {
        /// The call's id.
        id: String,
        /// The next piece of the arguments text.
        args_delta: String,
    },
    /// A tool call is complete. `arguments` is the raw JSON text the model
    /// produced (possibly empty or malformed: the agent checks it).
    ToolCall {
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
        /// The complete arguments text.
        arguments: String,
    },
    /// The turn ended.
    Finish {
        /// Why it ended, as the provider said.
        reason: FinishReason,
        /// Token counts, when the provider reported them.
        usage: Usage,
    },
}

/// The stream of one model turn.
pub type ModelStream = Pin<Box<dyn Stream<Item = Result<ModelEvent, ModelError>> + Send>>;

/// A language model that streams one turn at a time.
///
/// Implementations must be stateless across turns: everything a turn needs is
/// in the request, which is what lets a run resume in another process.
#[async_trait]
pub trait Model: Send + Sync + fmt::Debug + 'static {
    /// The model's name as users write it, e.g. `openai/gpt-4o-mini`.
    fn name(&self) -> &str;

    /// Starts one streamed turn. Errors before the first event (connection,
    /// HTTP status, missing key) are returned here; errors after it come
    /// through the stream.
    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError>;
}

/// What can go wrong talking to a model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A provider needs a key that is not set.
    #[error("{provider} needs an API key: set the {variable} environment variable")]
    MissingApiKey {
        /// The provider, e.g. `openai`.
        provider: String,
        /// The environment variable to set.
        variable: String,
    },
    /// The model name could not be understood.
    #[error("unknown model `{spec}`: {reason}")]
    UnknownModel {
        /// What was given.
        spec: String,
        /// What is accepted.
        reason: String,
    },
    /// The provider answered with an error status.
    #[error("{provider} returned HTTP {status}: {message}")]
    Api {
        /// The provider.
        provider: String,
        /// The HTTP status.
        status: u16,
        /// The provider's error message.
        message: String,
    },
    /// The provider could not be reached, or the connection broke mid-stream.
    #[error("the connection to {provider} failed: {message}")]
    Transport {
        /// The provider.
        provider: String,
        /// What happened.
        message: String,
        /// The error underneath (the HTTP client's, the socket's), for logs.
        #[source]
        source: Option<Cause>,
    },
    /// The provider sent something that is not its documented wire format.
    #[error("{provider} sent a malformed stream: {message}")]
    Protocol {
        /// The provider.
        provider: String,
        /// What was wrong.
        message: String,
    },
    /// The provider reported an error in the middle of its stream.
    #[error("{provider} reported an error mid-stream: {message}")]
    Stream {
        /// The provider.
        provider: String,
        /// The provider's message.
        message: String,
    },
    /// A scripted model could not produce the requested turn.
    #[error("{0}")]
    Script(String),
}

impl ModelError {
    /// Whether the same request may work later: the provider could not be
    /// reached, broke off, was overloaded or rate limited, or failed on its
    /// side (HTTP 408, 409, 425, 429 and 5xx). A missing key, an unknown
    /// model, a refused request or a malformed stream is not.
    pub fn is_transient(&self) -> bool {
        match self {
            ModelError::Transport { .. } | ModelError::Stream { .. } => true,
            ModelError::Api { status, .. } => matches!(status, 408 | 409 | 425 | 429 | 500..=599),
            _ => false,
        }
    }
}

/// Gives every tool call of one model turn an id that no other call of the
/// turn has.
///
/// A run answers, stores and reports its pending calls by id, so two calls of
/// one step must never share one. Some servers send the same id twice
/// (`call_0` for every call) or none at all; this keeps the model's id when it
/// is new in the turn and otherwise makes a fresh one from it. Fresh ids use
/// only `[A-Za-z0-9_-]`, which every provider accepts back, and depend only on
/// the ids seen before, so the same turn always gets the same ids.
///
/// The agent applies it to every turn of every [`Model`]; stream parsers use
/// it too, so their own events are unambiguous.
///
/// ```
/// use askloop::model::ToolCallIds;
/// let mut ids = ToolCallIds::new();
/// assert_eq!(ids.claim("call_0"), "call_0");
/// assert_eq!(ids.claim("call_0"), "call_0_2");
/// assert_eq!(ids.claim(""), "call_1");
/// ```
#[derive(Debug, Clone, Default)]
pub struct ToolCallIds {
    used: std::collections::HashSet<String>,
}

impl ToolCallIds {
    /// No ids used yet: the start of a turn.
    pub fn new() -> Self {
        ToolCallIds::default()
    }

    /// Whether `id` was already given out in this turn.
    pub fn is_used(&self, id: &str) -> bool {
        self.used.contains(id)
    }

    /// The id for the next call: `proposed` when it is not empty and not yet
    /// used in this turn, otherwise a fresh one.
    pub fn claim(&mut self, proposed: &str) -> String {
        if !proposed.is_empty() && !self.used.contains(proposed) {
            self.used.insert(proposed.to_owned());
            return proposed.to_owned();
        }
        // Short enough for OpenAI's 40-character limit on call ids.
        let base: String = proposed
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .take(30)
            .collect();
        let (base, first) = if base.is_empty() {
            ("call".to_owned(), 1)
        } else {
            (base, 2)
        };
        let fresh = (first..)
            .map(|n| format!("{base}_{n}"))
            .find(|candidate| !self.used.contains(candidate))
            .unwrap_or_else(|| base.clone());
        self.used.insert(fresh.clone());
        fresh
    }
}

//! Streaming model providers for askloop.
//!
//! - [`OpenAiModel`]: OpenAI-compatible Chat Completions (OpenAI, Ollama,
//!   vLLM, LM Studio, OpenRouter, Groq, ...).
//! - [`AnthropicModel`]: Anthropic Messages.
//! - [`from_spec`]: a model from its name, the way Mastra users write it
//!   (`openai/gpt-4o-mini`, `anthropic/claude-sonnet-4-5`, `ollama/qwen2.5`,
//!   `openai-compatible/<model>@<base-url>`), keys from the environment.
//!
//! Requests that fail before their response streams (connection errors,
//! 408, 429, 5xx, 529) are retried with backoff ([`RetryPolicy`]); a failure
//! after streaming began ends the turn with an error, and nothing is emitted
//! twice. Every call is bounded: by an idle timeout that keep-alive comments
//! do not reset and by a total deadline ([`HttpConfig`]). Each provider keeps its request mapping (`request.rs`) apart from
//! its stream parser (`stream.rs`).
//!
//! ```no_run
//! use askloop::{Agent, AskUser};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let model = askloop_providers::from_spec("openai/gpt-4o-mini")?;
//! let agent = Agent::builder("assistant").model(model).tool(AskUser::new()).build()?;
//! let output = agent.stream("Deploy the app. Ask me which environment first.").await?.output().await;
//! println!("{:?}", output.pending);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod anthropic;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod http;
mod openai;
mod settings;
mod spec;
mod sse;
#[cfg(test)]
mod test_support;
mod wire;

pub use anthropic::{ANTHROPIC_VERSION, AnthropicConfig, AnthropicModel, DEFAULT_MAX_TOKENS};
pub use http::{HttpConfig, RetryPolicy};
pub use openai::{OpenAiConfig, OpenAiModel};
pub use settings::{MODEL_IDLE_TIMEOUT_VAR, MODEL_TIMEOUT_VAR};
pub use spec::{
    ACCEPTED_SPECS, ANTHROPIC_DEFAULT_BASE_URL, Endpoint, OLLAMA_DEFAULT_BASE_URL, OPENAI_DEFAULT_BASE_URL,
    ResolvedSpec, from_spec, from_spec_with, resolve_spec,
};

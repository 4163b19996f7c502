//! Helpers shared by the end-to-end tests: models pointed at a fake server,
//! the benchmark's agent, and chunk inspection.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use askloop::{Agent, AskUser, Chunk, ChunkKind, Model};
use askloop_providers::{HttpConfig, RetryPolicy, from_spec_with};
use askloop_testkit::{FakeServer, workload};

/// Retries with waits of a few milliseconds, so retry tests stay quick.
pub fn quick_http(max_retries: u32) -> HttpConfig {
    HttpConfig {
        connect_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
        total_timeout: Duration::from_secs(60),
        retry: RetryPolicy {
            max_retries,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
            max_retry_after: Duration::from_secs(5),
        },
    }
}

fn env(pairs: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<&'static str, String> = pairs.into_iter().collect();
    move |name| map.get(name).cloned()
}

/// `openai/gpt-4o-mini` at the fake server, through `from_spec_with`.
pub fn openai_model(server: &FakeServer, http: HttpConfig) -> Arc<dyn Model> {
    let env = env(vec![
        ("OPENAI_API_KEY", "sk-test".to_owned()),
        ("OPENAI_BASE_URL", server.openai_base_url()),
    ]);
    from_spec_with("openai/gpt-4o-mini", env, http).unwrap()
}

/// `ollama/llama3.1` at the fake server.
pub fn ollama_model(server: &FakeServer, http: HttpConfig) -> Arc<dyn Model> {
    let env = env(vec![("OLLAMA_BASE_URL", server.openai_base_url())]);
    from_spec_with("ollama/llama3.1", env, http).unwrap()
}

/// `anthropic/claude-sonnet-4-5` at the fake server.
pub fn anthropic_model(server: &FakeServer, http: HttpConfig) -> Arc<dyn Model> {
    let env = env(vec![
        ("ANTHROPIC_API_KEY", "sk-ant-test".to_owned()),
        ("ANTHROPIC_BASE_URL", server.anthropic_base_url()),
    ]);
    from_spec_with("anthropic/claude-sonnet-4-5", env, http).unwrap()
}

/// The benchmark's agent: deployment instructions and `ask_user`.
pub fn deploy_agent(model: Arc<dyn Model>) -> Agent {
    Agent::builder("assistant")
        .instructions(workload::DEPLOY_SYSTEM)
        .model(model)
        .tool(AskUser::new())
        .build()
        .unwrap()
}

pub fn type_names(chunks: &[Chunk]) -> Vec<&'static str> {
    chunks.iter().map(Chunk::type_name).collect()
}

/// Every text delta, joined.
pub fn streamed_text(chunks: &[Chunk]) -> String {
    chunks
        .iter()
        .filter_map(|c| match &c.kind {
            ChunkKind::TextDelta(d) => Some(d.text.as_str()),
            _ => None,
        })
        .collect()
}

pub fn count(chunks: &[Chunk], type_name: &str) -> usize {
    chunks.iter().filter(|c| c.type_name() == type_name).count()
}

/// The error chunk's message.
pub fn error_message(chunks: &[Chunk]) -> Option<String> {
    chunks.iter().find_map(|c| match &c.kind {
        ChunkKind::Error(e) => Some(e.error.message.clone()),
        _ => None,
    })
}

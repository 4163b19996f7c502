//! Helpers shared by the agent tests: a model that counts its calls and a
//! store that can be told to fail.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use askloop::store::{Layered, Next, StoreLayer, StoreRequest, StoreResponse};
use askloop::{
    Agent, AskUser, Chunk, ChunkKind, GrantStore, LinkStore, MemoryStore, Model, ModelError, ModelRequest, ModelStream,
    RunStatus, RunStore, ScriptedModel, StoreError, StreamOutput, ThreadStore,
};
use async_trait::async_trait;

/// A scripted model that counts how often it was called.
#[derive(Debug)]
pub struct CountingModel {
    inner: ScriptedModel,
    pub calls: AtomicUsize,
}

impl CountingModel {
    pub fn new(script: &str) -> Arc<Self> {
        Arc::new(CountingModel {
            inner: ScriptedModel::from_json("test-script", script).unwrap(),
            calls: AtomicUsize::new(0),
        })
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Model for CountingModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.stream(request).await
    }
}

/// A memory store whose writes of a given status fail on demand, and which
/// counts its reads and writes (see [`Flaky`]).
pub type FlakyStore = Layered<Flaky>;

/// A [`FlakyStore`] over a fresh memory store.
pub fn flaky_store() -> Arc<FlakyStore> {
    Arc::new(Layered::new(Arc::new(MemoryStore::new()), Flaky::default()))
}

/// A memory store that keeps no threads, no approvals that stick and no
/// answer links, as a store written without them would be.
pub fn bare_store() -> Arc<Layered<Bare>> {
    Arc::new(Layered::new(Arc::new(MemoryStore::new()), Bare))
}

/// What a [`FlakyStore`] injects and counts.
#[derive(Debug, Default)]
pub struct Flaky {
    pub fail_suspend: AtomicBool,
    pub fail_all_updates: AtomicBool,
    pub message_reads: AtomicUsize,
    /// Reads of a run's record (`get`).
    pub run_reads: AtomicUsize,
    pub claims: AtomicUsize,
    pub updates: AtomicUsize,
}

#[async_trait]
impl StoreLayer for Flaky {
    async fn call(&self, request: StoreRequest<'_>, next: Next<'_>) -> Result<StoreResponse, StoreError> {
        let counter = match request {
            StoreRequest::Get { .. } => Some(&self.run_reads),
            StoreRequest::Messages { .. } => Some(&self.message_reads),
            StoreRequest::Claim { .. } => Some(&self.claims),
            StoreRequest::Update(_) => Some(&self.updates),
            _ => None,
        };
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::SeqCst);
        }
        if let StoreRequest::Update(update) = request {
            let refuse = self.fail_all_updates.load(Ordering::SeqCst)
                || (update.status == RunStatus::Suspended && self.fail_suspend.load(Ordering::SeqCst));
            if refuse {
                return Err(StoreError::backend(std::io::Error::other("disk full")));
            }
        }
        next.run(request).await
    }
}

/// See [`bare_store`].
#[derive(Debug)]
pub struct Bare;

impl StoreLayer for Bare {
    fn link_store<'a>(&self, _inner: Option<&'a dyn LinkStore>) -> Option<&'a dyn LinkStore> {
        None
    }

    fn thread_store<'a>(&self, _inner: Option<&'a dyn ThreadStore>) -> Option<&'a dyn ThreadStore> {
        None
    }

    fn grant_store<'a>(&self, _inner: Option<&'a dyn GrantStore>) -> Option<&'a dyn GrantStore> {
        None
    }
}

pub fn agent_with(model: Arc<dyn Model>, store: Arc<dyn RunStore>) -> Agent {
    Agent::builder("assistant")
        .instructions("Ask when in doubt.")
        .model(model)
        .tool(AskUser::new())
        .store(store)
        .build()
        .unwrap()
}

pub fn types(chunks: &[Chunk]) -> Vec<&'static str> {
    chunks.iter().map(Chunk::type_name).collect()
}

/// Streams a fresh run to its end.
pub async fn run(agent: &Agent, input: &str) -> (Vec<Chunk>, StreamOutput) {
    agent.stream(input).await.unwrap().output_with_chunks().await
}

/// The text of every `tool-error` chunk, in order.
pub fn tool_errors(chunks: &[Chunk]) -> Vec<String> {
    chunks
        .iter()
        .filter_map(|c| match &c.kind {
            ChunkKind::ToolError(e) => Some(e.error.clone()),
            _ => None,
        })
        .collect()
}

pub fn suspended_ids(chunks: &[Chunk]) -> Vec<String> {
    chunks
        .iter()
        .filter_map(|c| match &c.kind {
            ChunkKind::ToolCallSuspended(s) => Some(s.tool_call_id.clone()),
            _ => None,
        })
        .collect()
}

pub fn text_of(chunks: &[Chunk]) -> String {
    chunks
        .iter()
        .filter_map(|c| match &c.kind {
            ChunkKind::TextDelta(d) => Some(d.text.as_str()),
            _ => None,
        })
        .collect()
}

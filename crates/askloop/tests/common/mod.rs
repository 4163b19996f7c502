//! Helpers shared by the agent tests: a model that counts its calls and a
//! store that can be told to fail.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use askloop::{
    Agent, AskUser, ChangeFeed, Chunk, ChunkKind, DeliveryStore, Lease, MemoryStore, Message, Model, ModelError,
    ModelRequest, ModelStream, RunQuery, RunRecord, RunStatus, RunStore, RunUpdate, ScriptedModel, StoreError,
    StreamOutput,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

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

/// A memory store whose writes of a given status fail on demand.
#[derive(Debug, Default)]
pub struct FlakyStore {
    pub inner: MemoryStore,
    pub fail_suspend: AtomicBool,
    pub fail_all_updates: AtomicBool,
    pub message_reads: AtomicUsize,
    /// Reads of a run's record (`get`).
    pub run_reads: AtomicUsize,
    pub claims: AtomicUsize,
    pub updates: AtomicUsize,
}

#[async_trait]
impl RunStore for FlakyStore {
    async fn create(&self, run: &RunRecord, messages: &[Message]) -> Result<(), StoreError> {
        self.inner.create(run, messages).await
    }
    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.run_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.get(run_id).await
    }
    async fn messages(&self, run_id: &str) -> Result<Vec<Message>, StoreError> {
        self.message_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.messages(run_id).await
    }
    async fn claim(&self, run_id: &str, expected_version: i64, lease: &Lease) -> Result<i64, StoreError> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.inner.claim(run_id, expected_version, lease).await
    }
    async fn update(&self, update: RunUpdate<'_>) -> Result<i64, StoreError> {
        self.updates.fetch_add(1, Ordering::SeqCst);
        let refuse = self.fail_all_updates.load(Ordering::SeqCst)
            || (update.status == RunStatus::Suspended && self.fail_suspend.load(Ordering::SeqCst));
        if refuse {
            return Err(StoreError::backend(std::io::Error::other("disk full")));
        }
        self.inner.update(update).await
    }
    async fn list(&self, query: &RunQuery) -> Result<Vec<RunRecord>, StoreError> {
        self.inner.list(query).await
    }
    async fn renew_lease(&self, run_id: &str, lease: &Lease) -> Result<(), StoreError> {
        self.inner.renew_lease(run_id, lease).await
    }

    async fn expired(
        &self,
        now: DateTime<Utc>,
        after: Option<&askloop::RunCursor>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.inner.expired(now, after, limit).await
    }

    async fn reclaim(
        &self,
        run_id: &str,
        expected_version: i64,
        lease: &Lease,
        now: DateTime<Utc>,
        resolution: Option<&askloop::Resolution>,
    ) -> Result<i64, StoreError> {
        self.inner
            .reclaim(run_id, expected_version, lease, now, resolution)
            .await
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        self.inner.prune(before).await
    }
}

#[async_trait]
impl DeliveryStore for FlakyStore {
    async fn claim_deliveries(
        &self,
        now: DateTime<Utc>,
        lease: &askloop::Lease,
        limit: u32,
    ) -> Result<Vec<askloop::Delivery>, StoreError> {
        self.inner.claim_deliveries(now, lease, limit).await
    }

    async fn finish_delivery(
        &self,
        id: &str,
        owner: &str,
        outcome: &askloop::DeliveryOutcome,
    ) -> Result<(), StoreError> {
        self.inner.finish_delivery(id, owner, outcome).await
    }

    async fn deliveries(&self, run_id: &str) -> Result<Vec<askloop::Delivery>, StoreError> {
        self.inner.deliveries(run_id).await
    }
}

#[async_trait]
impl ChangeFeed for FlakyStore {}

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

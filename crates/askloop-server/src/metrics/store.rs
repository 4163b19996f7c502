//! A store that counts what passes through it: every call goes to the
//! store it wraps, unchanged; what was written and what failed is counted
//! in [`Metrics`] on the way back.

use std::sync::Arc;

use askloop::{
    AgentWaiting, ChangeFeed, Delivery, DeliveryOutcome, DeliveryStore, Lease, Message, Resolution, RunChanges,
    RunCursor, RunQuery, RunRecord, RunStatus, RunStore, RunUpdate, StoreError, ThreadStore,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::Metrics;

/// See the module's comment.
#[derive(Debug)]
pub(crate) struct ObservedStore {
    inner: Arc<dyn RunStore>,
    metrics: Metrics,
}

impl ObservedStore {
    pub(crate) fn new(inner: Arc<dyn RunStore>, metrics: Metrics) -> Self {
        ObservedStore { inner, metrics }
    }

    /// `result`, counted as a store error of `operation` when it failed for
    /// a reason other than a lost race or a missing row (which callers
    /// expect and handle).
    fn counted<T>(&self, operation: &'static str, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(err) = &result {
            let expected = matches!(
                err,
                StoreError::NotFound { .. }
                    | StoreError::AlreadyExists { .. }
                    | StoreError::Conflict { .. }
                    | StoreError::LeaseLost { .. }
                    | StoreError::DeliveryLost { .. }
                    | StoreError::ThreadExists { .. }
            );
            if !expected {
                self.metrics.store_error(operation);
            }
        }
        result
    }

    /// Remembers the suspended runs among `runs`, whose waits a later write
    /// may end.
    fn read_waiting<'a>(&self, runs: impl IntoIterator<Item = &'a RunRecord>) {
        for run in runs {
            if run.status() == RunStatus::Suspended {
                self.metrics.waiting_since(&run.run_id, run.version, run.updated_at);
            }
        }
    }
}

#[async_trait]
impl DeliveryStore for ObservedStore {
    async fn claim_deliveries(
        &self,
        now: DateTime<Utc>,
        lease: &Lease,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError> {
        let result = self.inner.claim_deliveries(now, lease, limit).await;
        self.counted("claim_deliveries", result)
    }

    async fn finish_delivery(&self, id: &str, owner: &str, outcome: &DeliveryOutcome) -> Result<(), StoreError> {
        let result = self.inner.finish_delivery(id, owner, outcome).await;
        if result.is_ok() {
            self.metrics.delivery(match outcome {
                DeliveryOutcome::Delivered => "delivered",
                DeliveryOutcome::Retry { .. } => "retry",
                DeliveryOutcome::Dead { .. } => "dead",
                _ => "other",
            });
        }
        self.counted("finish_delivery", result)
    }

    async fn deliveries(&self, run_id: &str) -> Result<Vec<Delivery>, StoreError> {
        let result = self.inner.deliveries(run_id).await;
        self.counted("deliveries", result)
    }
}

#[async_trait]
impl ChangeFeed for ObservedStore {
    async fn changes(&self) -> Result<Option<RunChanges>, StoreError> {
        let result = self.inner.changes().await;
        self.counted("changes", result)
    }
}

#[async_trait]
impl RunStore for ObservedStore {
    fn thread_store(&self) -> Option<&dyn ThreadStore> {
        self.inner.thread_store()
    }

    fn grant_store(&self) -> Option<&dyn askloop::GrantStore> {
        self.inner.grant_store()
    }

    fn link_store(&self) -> Option<&dyn askloop::LinkStore> {
        self.inner.link_store()
    }

    async fn create(&self, run: &RunRecord, messages: &[Message]) -> Result<(), StoreError> {
        let result = self.inner.create(run, messages).await;
        if result.is_ok() {
            self.metrics.run_started();
            self.metrics.run_written(run.status());
        }
        self.counted("create", result)
    }

    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let result = self.inner.get(run_id).await;
        if let Ok(Some(run)) = &result {
            self.read_waiting([run]);
        }
        self.counted("get", result)
    }

    async fn messages(&self, run_id: &str) -> Result<Vec<Message>, StoreError> {
        let result = self.inner.messages(run_id).await;
        self.counted("messages", result)
    }

    async fn claim(&self, run_id: &str, expected_version: i64, lease: &Lease) -> Result<i64, StoreError> {
        let result = self.inner.claim(run_id, expected_version, lease).await;
        self.counted("claim", result)
    }

    async fn renew_lease(&self, run_id: &str, lease: &Lease) -> Result<(), StoreError> {
        let result = self.inner.renew_lease(run_id, lease).await;
        self.counted("renew_lease", result)
    }

    async fn expired(
        &self,
        now: DateTime<Utc>,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let result = self.inner.expired(now, after, limit).await;
        self.counted("expired", result)
    }

    async fn reclaim(
        &self,
        run_id: &str,
        expected_version: i64,
        lease: &Lease,
        now: DateTime<Utc>,
        resolution: Option<&Resolution>,
    ) -> Result<i64, StoreError> {
        let result = self
            .inner
            .reclaim(run_id, expected_version, lease, now, resolution)
            .await;
        if result.is_ok() {
            self.metrics.resolved(
                run_id,
                expected_version,
                resolution.map(std::slice::from_ref).unwrap_or_default(),
            );
        }
        self.counted("reclaim", result)
    }

    async fn update(&self, update: RunUpdate<'_>) -> Result<i64, StoreError> {
        let (run_id, version, status, resolutions) = (
            update.run_id,
            update.expected_version,
            update.status,
            update.resolutions,
        );
        let result = self.inner.update(update).await;
        if result.is_ok() {
            self.metrics.run_written(status);
            if !resolutions.is_empty() {
                self.metrics.resolved(run_id, version, resolutions);
            }
        }
        self.counted("update", result)
    }

    async fn expiring(
        &self,
        now: DateTime<Utc>,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let result = self.inner.expiring(now, after, limit).await;
        if let Ok(runs) = &result {
            self.read_waiting(runs);
        }
        self.counted("expiring", result)
    }

    async fn list(&self, query: &RunQuery) -> Result<Vec<RunRecord>, StoreError> {
        let result = self.inner.list(query).await;
        self.counted("list", result)
    }

    async fn count(&self, query: &RunQuery) -> Result<u64, StoreError> {
        let result = self.inner.count(query).await;
        self.counted("count", result)
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let result = self.inner.prune(before).await;
        self.counted("prune", result)
    }

    async fn waiting(&self) -> Result<Vec<AgentWaiting>, StoreError> {
        let result = self.inner.waiting().await;
        self.counted("waiting", result)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use askloop::{MemoryStore, RunStore};

    use crate::Metrics;

    /// What the server's routes reach through the store they are given:
    /// a wrapper that hid one of these would turn threads, approvals that
    /// stick or answer links off without a word.
    #[test]
    fn the_observed_store_passes_threads_grants_and_links_through() {
        let observed = Metrics::new().observe_store(Arc::new(MemoryStore::new()) as Arc<dyn RunStore>);
        assert!(observed.thread_store().is_some(), "threads");
        assert!(observed.grant_store().is_some(), "grants");
        assert!(observed.link_store().is_some(), "answer links");
    }
}

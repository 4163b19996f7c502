//! The layer that counts what passes through a store: every call goes to
//! the store below, unchanged; what was written and what failed is counted
//! in [`Metrics`] on the way back.

use askloop::store::{Next, StoreLayer, StoreRequest, StoreResponse};
use askloop::{DeliveryOutcome, RunRecord, RunStatus, StoreError};
use async_trait::async_trait;

use super::Metrics;

/// See the module's comment.
#[derive(Debug)]
pub(crate) struct Observed {
    metrics: Metrics,
}

impl Observed {
    pub(crate) fn new(metrics: Metrics) -> Self {
        Observed { metrics }
    }

    /// Counts `err` as a store error of `operation` when it failed for a
    /// reason other than a lost race or a missing row (which callers expect
    /// and handle).
    fn failed(&self, operation: &'static str, err: &StoreError) {
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

    /// Counts what a request that succeeded wrote, and remembers the
    /// suspended runs it read, whose waits a later write may end.
    fn succeeded(&self, request: StoreRequest<'_>, response: &StoreResponse) {
        match (request, response) {
            (StoreRequest::Create { run, .. }, _) => {
                self.metrics.run_started();
                self.metrics.run_written(run.status());
            }
            (StoreRequest::Get { .. }, StoreResponse::Run(Some(run))) => self.read_waiting([run]),
            (StoreRequest::Expiring { .. }, StoreResponse::Runs(runs)) => self.read_waiting(runs),
            (
                StoreRequest::Reclaim {
                    run_id,
                    expected_version,
                    resolution,
                    ..
                },
                _,
            ) => self.metrics.resolved(
                run_id,
                expected_version,
                resolution.map(std::slice::from_ref).unwrap_or_default(),
            ),
            (StoreRequest::Update(update), _) => {
                self.metrics.run_written(update.status);
                if !update.resolutions.is_empty() {
                    self.metrics
                        .resolved(update.run_id, update.expected_version, update.resolutions);
                }
            }
            (StoreRequest::FinishDelivery { outcome, .. }, _) => self.metrics.delivery(match outcome {
                DeliveryOutcome::Delivered => "delivered",
                DeliveryOutcome::Retry { .. } => "retry",
                DeliveryOutcome::Dead { .. } => "dead",
                _ => "other",
            }),
            _ => {}
        }
    }

    fn read_waiting<'a>(&self, runs: impl IntoIterator<Item = &'a RunRecord>) {
        for run in runs {
            if run.status() == RunStatus::Suspended {
                self.metrics.waiting_since(&run.run_id, run.version, run.updated_at);
            }
        }
    }
}

#[async_trait]
impl StoreLayer for Observed {
    async fn call(&self, request: StoreRequest<'_>, next: Next<'_>) -> Result<StoreResponse, StoreError> {
        let result = next.run(request).await;
        match &result {
            Ok(response) => self.succeeded(request, response),
            Err(err) => self.failed(request.operation(), err),
        }
        result
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
    #[tokio::test]
    async fn the_observed_store_passes_threads_grants_links_and_the_change_feed_through() {
        let observed = Metrics::new().observe_store(Arc::new(MemoryStore::new()) as Arc<dyn RunStore>);
        assert!(observed.thread_store().is_some(), "threads");
        assert!(observed.grant_store().is_some(), "grants");
        assert!(observed.link_store().is_some(), "answer links");
        assert!(observed.changes().await.unwrap().is_some(), "the change feed");
    }
}

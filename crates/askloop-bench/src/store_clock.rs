//! A [`RunStore`] wrapper that adds up the time spent in the store, split
//! into the run row (create, get, claim, update) and the conversation read
//! (`messages`), for `long --detail`: is the store's own cost of a resume
//! flat as the conversation grows?

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use askloop::message::Message;
use askloop::{ChangeFeed, DeliveryStore, Lease, RunQuery, RunRecord, RunStore, RunUpdate, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// Time spent in the store so far.
#[derive(Debug, Default)]
pub struct StoreClock {
    row_ns: AtomicU64,
    messages_ns: AtomicU64,
}

impl StoreClock {
    /// (run row operations, conversation reads) so far.
    pub fn read(&self) -> (Duration, Duration) {
        (
            Duration::from_nanos(self.row_ns.load(Ordering::Relaxed)),
            Duration::from_nanos(self.messages_ns.load(Ordering::Relaxed)),
        )
    }

    fn add(counter: &AtomicU64, since: Instant) {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        counter.fetch_add(ns, Ordering::Relaxed);
    }
}

/// The store, timed.
#[derive(Debug)]
pub struct TimedStore {
    pub inner: Arc<dyn RunStore>,
    pub clock: Arc<StoreClock>,
}

#[async_trait]
impl RunStore for TimedStore {
    async fn create(&self, run: &RunRecord, messages: &[Message]) -> Result<(), StoreError> {
        let started = Instant::now();
        let result = self.inner.create(run, messages).await;
        StoreClock::add(&self.clock.row_ns, started);
        result
    }

    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let started = Instant::now();
        let result = self.inner.get(run_id).await;
        StoreClock::add(&self.clock.row_ns, started);
        result
    }

    async fn messages(&self, run_id: &str) -> Result<Vec<Message>, StoreError> {
        let started = Instant::now();
        let result = self.inner.messages(run_id).await;
        StoreClock::add(&self.clock.messages_ns, started);
        result
    }

    async fn claim(&self, run_id: &str, expected_version: i64, lease: &Lease) -> Result<i64, StoreError> {
        let started = Instant::now();
        let result = self.inner.claim(run_id, expected_version, lease).await;
        StoreClock::add(&self.clock.row_ns, started);
        result
    }

    async fn update(&self, update: RunUpdate<'_>) -> Result<i64, StoreError> {
        let started = Instant::now();
        let result = self.inner.update(update).await;
        StoreClock::add(&self.clock.row_ns, started);
        result
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
impl DeliveryStore for TimedStore {
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
impl ChangeFeed for TimedStore {}

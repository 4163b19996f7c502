//! Layers around a store, in the manner of tower's `Layer`: what a wrapper
//! does around a store's operations (inject a fault, count the calls, hold
//! a claim at a gate, time the reads, report metrics) is written once, as a
//! [`StoreLayer`] that sees each operation as a [`StoreRequest`] and passes
//! it on with [`Next`]; [`Layered`] puts it around any store and forwards
//! every operation of [`RunStore`], [`DeliveryStore`] and [`ChangeFeed`]
//! through it. A new store operation is one edit here and one in each
//! store; no wrapper re-implements the traits, so none can drop an
//! operation, the change feed or the thread, grant and link stores by
//! forgetting them.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//!
//! use askloop::store::{Layered, Next, StoreLayer, StoreRequest, StoreResponse};
//! use askloop::{MemoryStore, RunStore, StoreError};
//!
//! /// Counts the reads of runs.
//! #[derive(Debug, Default)]
//! struct CountReads(AtomicU64);
//!
//! #[async_trait::async_trait]
//! impl StoreLayer for CountReads {
//!     async fn call(&self, request: StoreRequest<'_>, next: Next<'_>) -> Result<StoreResponse, StoreError> {
//!         if let StoreRequest::Get { .. } = request {
//!             self.0.fetch_add(1, Ordering::Relaxed);
//!         }
//!         next.run(request).await
//!     }
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store = Layered::new(Arc::new(MemoryStore::new()), CountReads::default());
//! assert_eq!(store.get("run_1").await.unwrap(), None);
//! assert_eq!(store.layer().0.load(Ordering::Relaxed), 1);
//! # });
//! ```

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{
    AgentWaiting, ChangeFeed, Delivery, DeliveryOutcome, DeliveryStore, GrantStore, Lease, LinkStore, Resolution,
    RunChanges, RunCursor, RunQuery, RunRecord, RunStore, RunUpdate, StoreError, ThreadStore,
};
use crate::message::Message;

/// One operation of a store, with its arguments, as a [`StoreLayer`] sees
/// it: one variant for each method of [`RunStore`], [`DeliveryStore`] and
/// [`ChangeFeed`], named as the method, whose fields are the method's
/// arguments (documented there).
#[allow(
    missing_docs,
    reason = "each field is the argument of the same name, documented on the method"
)]
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum StoreRequest<'a> {
    /// [`RunStore::create`].
    Create {
        run: &'a RunRecord,
        messages: &'a [Message],
    },
    /// [`RunStore::get`].
    Get { run_id: &'a str },
    /// [`RunStore::messages`].
    Messages { run_id: &'a str },
    /// [`RunStore::claim`].
    Claim {
        run_id: &'a str,
        expected_version: i64,
        lease: &'a Lease,
    },
    /// [`RunStore::renew_lease`].
    RenewLease { run_id: &'a str, lease: &'a Lease },
    /// [`RunStore::expired`].
    Expired {
        now: DateTime<Utc>,
        after: Option<&'a RunCursor>,
        limit: u32,
    },
    /// [`RunStore::reclaim`].
    Reclaim {
        run_id: &'a str,
        expected_version: i64,
        lease: &'a Lease,
        now: DateTime<Utc>,
        resolution: Option<&'a Resolution>,
    },
    /// [`RunStore::update`].
    Update(RunUpdate<'a>),
    /// [`RunStore::expiring`].
    Expiring {
        now: DateTime<Utc>,
        after: Option<&'a RunCursor>,
        limit: u32,
    },
    /// [`RunStore::list`].
    List { query: &'a RunQuery },
    /// [`RunStore::count`].
    Count { query: &'a RunQuery },
    /// [`RunStore::prune`].
    Prune { before: DateTime<Utc> },
    /// [`RunStore::waiting`].
    Waiting,
    /// [`DeliveryStore::claim_deliveries`].
    ClaimDeliveries {
        now: DateTime<Utc>,
        lease: &'a Lease,
        limit: u32,
    },
    /// [`DeliveryStore::finish_delivery`].
    FinishDelivery {
        id: &'a str,
        owner: &'a str,
        outcome: &'a DeliveryOutcome,
    },
    /// [`DeliveryStore::deliveries`].
    Deliveries { run_id: &'a str },
    /// [`ChangeFeed::changes`].
    Changes,
}

impl StoreRequest<'_> {
    /// The name of the method, as written in the trait (`"get"`,
    /// `"claim_deliveries"`): what metrics and logs call the operation.
    pub fn operation(&self) -> &'static str {
        match self {
            StoreRequest::Create { .. } => "create",
            StoreRequest::Get { .. } => "get",
            StoreRequest::Messages { .. } => "messages",
            StoreRequest::Claim { .. } => "claim",
            StoreRequest::RenewLease { .. } => "renew_lease",
            StoreRequest::Expired { .. } => "expired",
            StoreRequest::Reclaim { .. } => "reclaim",
            StoreRequest::Update(_) => "update",
            StoreRequest::Expiring { .. } => "expiring",
            StoreRequest::List { .. } => "list",
            StoreRequest::Count { .. } => "count",
            StoreRequest::Prune { .. } => "prune",
            StoreRequest::Waiting => "waiting",
            StoreRequest::ClaimDeliveries { .. } => "claim_deliveries",
            StoreRequest::FinishDelivery { .. } => "finish_delivery",
            StoreRequest::Deliveries { .. } => "deliveries",
            StoreRequest::Changes => "changes",
        }
    }
}

/// What a store answered to a [`StoreRequest`]: one variant for each
/// return type of the store traits' methods.
#[allow(
    clippy::large_enum_variant,
    reason = "a response moves once, from the store to its caller; boxing the run would cost an allocation on every read"
)]
#[non_exhaustive]
pub enum StoreResponse {
    /// `create`, `renew_lease`, `finish_delivery`.
    Done,
    /// `get`.
    Run(Option<RunRecord>),
    /// `expired`, `expiring`, `list`.
    Runs(Vec<RunRecord>),
    /// `messages`.
    Messages(Vec<Message>),
    /// The new version: `claim`, `reclaim`, `update`.
    Version(i64),
    /// `count`, `prune`.
    Count(u64),
    /// `waiting`.
    Waiting(Vec<AgentWaiting>),
    /// `claim_deliveries`, `deliveries`.
    Deliveries(Vec<Delivery>),
    /// `changes`.
    Changes(Option<RunChanges>),
}

impl StoreResponse {
    fn kind(&self) -> &'static str {
        match self {
            StoreResponse::Done => "Done",
            StoreResponse::Run(_) => "Run",
            StoreResponse::Runs(_) => "Runs",
            StoreResponse::Messages(_) => "Messages",
            StoreResponse::Version(_) => "Version",
            StoreResponse::Count(_) => "Count",
            StoreResponse::Waiting(_) => "Waiting",
            StoreResponse::Deliveries(_) => "Deliveries",
            StoreResponse::Changes(_) => "Changes",
        }
    }
}

impl fmt::Debug for StoreResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreResponse::Run(run) => f.debug_tuple("Run").field(run).finish(),
            StoreResponse::Runs(runs) => f.debug_tuple("Runs").field(runs).finish(),
            StoreResponse::Messages(messages) => f.debug_tuple("Messages").field(messages).finish(),
            StoreResponse::Version(version) => f.debug_tuple("Version").field(version).finish(),
            StoreResponse::Count(count) => f.debug_tuple("Count").field(count).finish(),
            StoreResponse::Waiting(waiting) => f.debug_tuple("Waiting").field(waiting).finish(),
            StoreResponse::Deliveries(deliveries) => f.debug_tuple("Deliveries").field(deliveries).finish(),
            StoreResponse::Done | StoreResponse::Changes(_) => f.write_str(self.kind()),
        }
    }
}

/// The store below a layer: [`Next::run`] passes a request on to it.
#[derive(Clone, Copy)]
pub struct Next<'a> {
    store: &'a dyn RunStore,
}

impl fmt::Debug for Next<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Next").field(&self.store).finish()
    }
}

impl Next<'_> {
    /// Passes `request` to the store below and returns its answer.
    pub async fn run(self, request: StoreRequest<'_>) -> Result<StoreResponse, StoreError> {
        let store = self.store;
        Ok(match request {
            StoreRequest::Create { run, messages } => {
                store.create(run, messages).await?;
                StoreResponse::Done
            }
            StoreRequest::Get { run_id } => StoreResponse::Run(store.get(run_id).await?),
            StoreRequest::Messages { run_id } => StoreResponse::Messages(store.messages(run_id).await?),
            StoreRequest::Claim {
                run_id,
                expected_version,
                lease,
            } => StoreResponse::Version(store.claim(run_id, expected_version, lease).await?),
            StoreRequest::RenewLease { run_id, lease } => {
                store.renew_lease(run_id, lease).await?;
                StoreResponse::Done
            }
            StoreRequest::Expired { now, after, limit } => StoreResponse::Runs(store.expired(now, after, limit).await?),
            StoreRequest::Reclaim {
                run_id,
                expected_version,
                lease,
                now,
                resolution,
            } => StoreResponse::Version(store.reclaim(run_id, expected_version, lease, now, resolution).await?),
            StoreRequest::Update(update) => StoreResponse::Version(store.update(update).await?),
            StoreRequest::Expiring { now, after, limit } => {
                StoreResponse::Runs(store.expiring(now, after, limit).await?)
            }
            StoreRequest::List { query } => StoreResponse::Runs(store.list(query).await?),
            StoreRequest::Count { query } => StoreResponse::Count(store.count(query).await?),
            StoreRequest::Prune { before } => StoreResponse::Count(store.prune(before).await?),
            StoreRequest::Waiting => StoreResponse::Waiting(store.waiting().await?),
            StoreRequest::ClaimDeliveries { now, lease, limit } => {
                StoreResponse::Deliveries(store.claim_deliveries(now, lease, limit).await?)
            }
            StoreRequest::FinishDelivery { id, owner, outcome } => {
                store.finish_delivery(id, owner, outcome).await?;
                StoreResponse::Done
            }
            StoreRequest::Deliveries { run_id } => StoreResponse::Deliveries(store.deliveries(run_id).await?),
            StoreRequest::Changes => StoreResponse::Changes(store.changes().await?),
        })
    }
}

/// What a wrapper does around a store's operations: see the module's
/// comment. Every method has a default that passes through, so a layer
/// writes only what it changes.
#[async_trait]
pub trait StoreLayer: fmt::Debug + Send + Sync + 'static {
    /// Handles one operation: usually something before, `next.run(request)`,
    /// something after. A layer may refuse the operation (return an error
    /// without calling `next`), wait before it, or look at what it answered;
    /// it must answer with the [`StoreResponse`] variant of the request's
    /// method, or the caller gets a [`StoreError::Backend`] naming both.
    async fn call(&self, request: StoreRequest<'_>, next: Next<'_>) -> Result<StoreResponse, StoreError> {
        next.run(request).await
    }

    /// The answer links the layered store offers, given the inner store's
    /// (`None` turns them off).
    fn link_store<'a>(&self, inner: Option<&'a dyn LinkStore>) -> Option<&'a dyn LinkStore> {
        inner
    }

    /// The threads the layered store offers, given the inner store's
    /// (`None` turns them off).
    fn thread_store<'a>(&self, inner: Option<&'a dyn ThreadStore>) -> Option<&'a dyn ThreadStore> {
        inner
    }

    /// The approvals that stick the layered store offers, given the inner
    /// store's (`None` turns them off).
    fn grant_store<'a>(&self, inner: Option<&'a dyn GrantStore>) -> Option<&'a dyn GrantStore> {
        inner
    }
}

/// A store with a [`StoreLayer`] around it: every operation goes through
/// the layer to the inner store. Layers stack: a `Layered` is a store.
#[derive(Debug)]
pub struct Layered<L> {
    inner: Arc<dyn RunStore>,
    layer: L,
}

impl<L: StoreLayer> Layered<L> {
    /// `layer` around `inner`.
    pub fn new(inner: Arc<dyn RunStore>, layer: L) -> Self {
        Layered { inner, layer }
    }

    /// The layer (to read what it counted, to flip what it injects).
    pub fn layer(&self) -> &L {
        &self.layer
    }

    /// The store inside, reached without the layer.
    pub fn inner(&self) -> &Arc<dyn RunStore> {
        &self.inner
    }

    async fn pass(&self, request: StoreRequest<'_>) -> Result<StoreResponse, StoreError> {
        self.layer.call(request, Next { store: &*self.inner }).await
    }
}

/// The error for a layer that answered `operation` with the wrong variant.
fn mismatch(operation: &str, response: &StoreResponse) -> StoreError {
    StoreError::backend(std::io::Error::other(format!(
        "a store layer answered `{operation}` with `{}`",
        response.kind()
    )))
}

/// Unwraps the one response variant a request's method returns.
macro_rules! answer {
    ($self:ident, $operation:literal, $request:expr, $variant:pat => $value:expr) => {
        match $self.pass($request).await? {
            $variant => Ok($value),
            other => Err(mismatch($operation, &other)),
        }
    };
}

#[async_trait]
impl<L: StoreLayer> DeliveryStore for Layered<L> {
    async fn claim_deliveries(
        &self,
        now: DateTime<Utc>,
        lease: &Lease,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError> {
        let request = StoreRequest::ClaimDeliveries { now, lease, limit };
        answer!(self, "claim_deliveries", request, StoreResponse::Deliveries(taken) => taken)
    }

    async fn finish_delivery(&self, id: &str, owner: &str, outcome: &DeliveryOutcome) -> Result<(), StoreError> {
        let request = StoreRequest::FinishDelivery { id, owner, outcome };
        answer!(self, "finish_delivery", request, StoreResponse::Done => ())
    }

    async fn deliveries(&self, run_id: &str) -> Result<Vec<Delivery>, StoreError> {
        let request = StoreRequest::Deliveries { run_id };
        answer!(self, "deliveries", request, StoreResponse::Deliveries(deliveries) => deliveries)
    }
}

#[async_trait]
impl<L: StoreLayer> ChangeFeed for Layered<L> {
    async fn changes(&self) -> Result<Option<RunChanges>, StoreError> {
        answer!(self, "changes", StoreRequest::Changes, StoreResponse::Changes(changes) => changes)
    }
}

#[async_trait]
impl<L: StoreLayer> RunStore for Layered<L> {
    fn link_store(&self) -> Option<&dyn LinkStore> {
        self.layer.link_store(self.inner.link_store())
    }

    fn thread_store(&self) -> Option<&dyn ThreadStore> {
        self.layer.thread_store(self.inner.thread_store())
    }

    fn grant_store(&self) -> Option<&dyn GrantStore> {
        self.layer.grant_store(self.inner.grant_store())
    }

    async fn create(&self, run: &RunRecord, messages: &[Message]) -> Result<(), StoreError> {
        answer!(self, "create", StoreRequest::Create { run, messages }, StoreResponse::Done => ())
    }

    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        answer!(self, "get", StoreRequest::Get { run_id }, StoreResponse::Run(run) => run)
    }

    async fn messages(&self, run_id: &str) -> Result<Vec<Message>, StoreError> {
        answer!(self, "messages", StoreRequest::Messages { run_id }, StoreResponse::Messages(messages) => messages)
    }

    async fn claim(&self, run_id: &str, expected_version: i64, lease: &Lease) -> Result<i64, StoreError> {
        let request = StoreRequest::Claim {
            run_id,
            expected_version,
            lease,
        };
        answer!(self, "claim", request, StoreResponse::Version(version) => version)
    }

    async fn renew_lease(&self, run_id: &str, lease: &Lease) -> Result<(), StoreError> {
        answer!(self, "renew_lease", StoreRequest::RenewLease { run_id, lease }, StoreResponse::Done => ())
    }

    async fn expired(
        &self,
        now: DateTime<Utc>,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let request = StoreRequest::Expired { now, after, limit };
        answer!(self, "expired", request, StoreResponse::Runs(runs) => runs)
    }

    async fn reclaim(
        &self,
        run_id: &str,
        expected_version: i64,
        lease: &Lease,
        now: DateTime<Utc>,
        resolution: Option<&Resolution>,
    ) -> Result<i64, StoreError> {
        let request = StoreRequest::Reclaim {
            run_id,
            expected_version,
            lease,
            now,
            resolution,
        };
        answer!(self, "reclaim", request, StoreResponse::Version(version) => version)
    }

    async fn update(&self, update: RunUpdate<'_>) -> Result<i64, StoreError> {
        answer!(self, "update", StoreRequest::Update(update), StoreResponse::Version(version) => version)
    }

    async fn expiring(
        &self,
        now: DateTime<Utc>,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let request = StoreRequest::Expiring { now, after, limit };
        answer!(self, "expiring", request, StoreResponse::Runs(runs) => runs)
    }

    async fn list(&self, query: &RunQuery) -> Result<Vec<RunRecord>, StoreError> {
        answer!(self, "list", StoreRequest::List { query }, StoreResponse::Runs(runs) => runs)
    }

    async fn count(&self, query: &RunQuery) -> Result<u64, StoreError> {
        answer!(self, "count", StoreRequest::Count { query }, StoreResponse::Count(count) => count)
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        answer!(self, "prune", StoreRequest::Prune { before }, StoreResponse::Count(pruned) => pruned)
    }

    async fn waiting(&self) -> Result<Vec<AgentWaiting>, StoreError> {
        answer!(self, "waiting", StoreRequest::Waiting, StoreResponse::Waiting(waiting) => waiting)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    /// Answers every read of a run with the wrong variant and keeps no
    /// threads.
    #[derive(Debug)]
    struct Broken;

    #[async_trait]
    impl StoreLayer for Broken {
        async fn call(&self, request: StoreRequest<'_>, next: Next<'_>) -> Result<StoreResponse, StoreError> {
            match request {
                StoreRequest::Get { .. } => Ok(StoreResponse::Count(3)),
                _ => next.run(request).await,
            }
        }

        fn thread_store<'a>(&self, _inner: Option<&'a dyn ThreadStore>) -> Option<&'a dyn ThreadStore> {
            None
        }
    }

    #[tokio::test]
    async fn a_layer_that_answers_with_the_wrong_variant_is_a_backend_error_naming_both() {
        let store = Layered::new(Arc::new(MemoryStore::new()), Broken);
        let err = store.get("run_1").await.unwrap_err();
        assert!(matches!(err, StoreError::Backend(_)), "{err:?}");
        assert!(err.to_string().contains("answered `get` with `Count`"), "{err}");
    }

    #[tokio::test]
    async fn a_layer_passes_the_sub_stores_and_the_change_feed_through_unless_it_turns_them_off() {
        let plain = Layered::new(Arc::new(MemoryStore::new()), Passing);
        assert!(plain.link_store().is_some());
        assert!(plain.thread_store().is_some());
        assert!(plain.grant_store().is_some());
        assert!(plain.changes().await.unwrap().is_some(), "the memory store's feed");
        let without = Layered::new(Arc::new(MemoryStore::new()), Broken);
        assert!(without.thread_store().is_none());
        assert!(without.grant_store().is_some());
    }

    #[derive(Debug)]
    struct Passing;

    impl StoreLayer for Passing {}

    #[test]
    fn every_request_is_named_as_its_method() {
        let at = Utc::now();
        let query = RunQuery::default();
        let names: Vec<&str> = [
            StoreRequest::Get { run_id: "r" },
            StoreRequest::Expiring {
                now: at,
                after: None,
                limit: 1,
            },
            StoreRequest::Count { query: &query },
            StoreRequest::Waiting,
            StoreRequest::Changes,
        ]
        .iter()
        .map(StoreRequest::operation)
        .collect();
        assert_eq!(names, ["get", "expiring", "count", "waiting", "changes"]);
    }
}

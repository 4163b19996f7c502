//! Holding a run while it is driven: the heartbeat that renews its lease.
//!
//! A driver's run is `running` with a lease (owner, until) in the store.
//! While the driver works (model calls, tools), [`heartbeat`] moves the end
//! of the lease forward every third of its length; every write of the
//! driver that keeps the run running does too. When the process dies, the
//! renewals stop, the lease runs out, and any process may take the run over
//! (`Agent::recover_runs`). The heartbeat runs inside the driver's future
//! (see [`while_renewing`]), so a stream that is dropped or no longer polled
//! stops holding its run as well.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{Either, select};

use crate::clock::Clock;
use crate::store::{Lease, RunStore, StoreError};

/// How long a lease lasts by default: the longest a crashed driver's run
/// waits before another process may take it over.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Renews the lease of `owner` on `run_id` every third of `duration`, until
/// the lease is lost (the run stopped running, or another process took it
/// over); then waits forever. Each renewal runs to `duration` past the
/// `clock`'s time. A renewal that fails for another reason (the database
/// busy a moment) is tried again at the next beat.
pub(super) async fn heartbeat(
    store: Arc<dyn RunStore>,
    clock: Arc<dyn Clock>,
    run_id: String,
    owner: String,
    duration: Duration,
) {
    let every = duration / 3;
    loop {
        tokio::time::sleep(every).await;
        let lease = Lease::new(owner.clone(), clock.now() + duration);
        match store.renew_lease(&run_id, &lease).await {
            Ok(()) => {}
            Err(StoreError::LeaseLost { .. } | StoreError::NotFound { .. }) => break,
            Err(err) => tracing::warn!(run_id = %run_id, error = %err, "could not renew the run's lease"),
        }
    }
    std::future::pending::<()>().await
}

/// Runs `work` to its end while `heartbeat` beats beside it.
pub(super) async fn while_renewing<T>(work: impl Future<Output = T>, heartbeat: impl Future<Output = ()>) -> T {
    let work = std::pin::pin!(work);
    let heartbeat = std::pin::pin!(heartbeat);
    match select(work, heartbeat).await {
        Either::Left((done, _)) => done,
        Either::Right(((), work)) => work.await,
    }
}

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
//!
//! A renewal that finds the run no longer held by this driver (it was
//! cancelled, or another process took it over) is how the driver learns it
//! lost the run while it waits on something else: the heartbeat says so on
//! its [`Released`], and the driver gives up the tool calls it waits on
//! (an MCP server's call is cancelled, its program stopped), where it
//! would otherwise wait for them to end before its next write found the
//! run gone. The store's lease stays the one owner of whether the run is
//! still this driver's: a cancel in this process only makes the heartbeat
//! look now ([`Drives::wake`]) instead of at its next beat; a cancel in
//! another process is seen at the next beat.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::{Either, select};
use tokio::sync::{Notify, watch};

use crate::clock::Clock;
use crate::store::{Lease, RunStore, StoreError};

/// How long a lease lasts by default: the longest a crashed driver's run
/// waits before another process may take it over.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Renews the lease of `owner` on `run_id` every third of `duration` (and
/// at once when `wake` is notified), until the lease is lost (the run
/// stopped running, or another process took it over); then says so on
/// `lost` and waits forever. Each renewal runs to `duration` past the
/// `clock`'s time. A renewal that fails for another reason (the database
/// busy a moment) is tried again at the next beat.
pub(super) async fn heartbeat(
    store: Arc<dyn RunStore>,
    clock: Arc<dyn Clock>,
    run_id: String,
    owner: String,
    duration: Duration,
    wake: Arc<Notify>,
    lost: watch::Sender<bool>,
) {
    let every = duration / 3;
    loop {
        let beat = std::pin::pin!(tokio::time::sleep(every));
        let woken = std::pin::pin!(wake.notified());
        select(beat, woken).await;
        let lease = Lease::new(owner.clone(), clock.now() + duration);
        match store.renew_lease(&run_id, &lease).await {
            Ok(()) => {}
            Err(StoreError::LeaseLost { .. } | StoreError::NotFound { .. }) => break,
            Err(err) => tracing::warn!(run_id = %run_id, error = %err, "could not renew the run's lease"),
        }
    }
    let _ = lost.send(true);
    std::future::pending::<()>().await
}

/// Whether the driver lost its run: what a tool call it waits on is raced
/// against.
#[derive(Clone)]
pub(super) struct Released(watch::Receiver<bool>);

impl Released {
    /// A pair: the heartbeat's side and the driver's.
    pub(super) fn pair() -> (watch::Sender<bool>, Released) {
        let (lost, released) = watch::channel(false);
        (lost, Released(released))
    }

    /// Never released: a driver that does not renew a lease.
    pub(super) fn never() -> Released {
        Released::pair().1
    }

    /// Completes once the run is no longer this driver's; never, while it
    /// is (or once the heartbeat is gone, with its drive).
    pub(super) async fn lost(&self) {
        let mut released = self.0.clone();
        if released.wait_for(|lost| *lost).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The runs this agent drives in this process, each with the bell that
/// makes its heartbeat look at its lease now.
#[derive(Default)]
pub(crate) struct Drives {
    wakes: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Drives {
    fn wakes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        // One insert or remove at a time: a panic cannot leave it half done.
        self.wakes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Enters a drive of `run_id`: its bell, rung by [`Drives::wake`],
    /// until the guard is dropped.
    pub(super) fn enter(self: &Arc<Self>, run_id: &str) -> (Arc<Notify>, DriveGuard) {
        let wake = Arc::new(Notify::new());
        self.wakes().insert(run_id.to_owned(), Arc::clone(&wake));
        let guard = DriveGuard {
            drives: Arc::clone(self),
            run_id: run_id.to_owned(),
            wake: Arc::clone(&wake),
        };
        (wake, guard)
    }

    /// Makes the heartbeat of `run_id`'s drive in this process, if there is
    /// one, look at its lease now (the run was just cancelled).
    pub(crate) fn wake(&self, run_id: &str) {
        if let Some(wake) = self.wakes().get(run_id) {
            wake.notify_one();
        }
    }
}

/// A drive's place in [`Drives`], left when dropped.
pub(super) struct DriveGuard {
    drives: Arc<Drives>,
    run_id: String,
    wake: Arc<Notify>,
}

impl Drop for DriveGuard {
    fn drop(&mut self) {
        let mut wakes = self.drives.wakes();
        // A later drive of the same run may have taken the place.
        if wakes.get(&self.run_id).is_some_and(|w| Arc::ptr_eq(w, &self.wake)) {
            wakes.remove(&self.run_id);
        }
    }
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

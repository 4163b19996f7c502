//! The clock of a store under test, and the case proving the store reads
//! the time from it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;

use askloop::{Clock, Lease, Resolution, ResolutionKind, RunStatus, SystemClock};
use chrono::{DateTime, Duration, Utc};

use super::Subject;
use super::cases::{step, suspended_run, user};

/// The clock a [`Subject`]'s store stamps its writes with: the system's time
/// until a case [sets](SubjectClock::set) it, then that time until set
/// again. Cases that do not set it see a store on the system's clock, as
/// users do.
#[derive(Debug, Default)]
pub struct SubjectClock {
    set: Mutex<Option<DateTime<Utc>>>,
}

impl SubjectClock {
    /// From now on, the clock reads `at`.
    pub fn set(&self, at: DateTime<Utc>) {
        *self.set.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(at);
    }
}

impl Clock for SubjectClock {
    fn now(&self) -> DateTime<Utc> {
        let set = *self.set.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        set.unwrap_or_else(|| SystemClock.now())
    }
}

/// Every write that stamps a run (an update, a claim, a reclaim) stamps it
/// with the store's clock, not the machine's or the database server's: a
/// clock set years ahead is what `updated_at` reads, to the microsecond.
pub async fn a_store_stamps_its_writes_with_its_clock(s: &Subject) {
    let t0: DateTime<Utc> = "2030-06-01T12:00:00.123456Z".parse().unwrap();
    s.clock.set(t0);
    let version = suspended_run(s.store.as_ref(), "stamped", "agent-1", t0 - Duration::days(1)).await;
    let run = s.store.get("stamped").await.unwrap().unwrap();
    assert_eq!(run.updated_at, t0, "an update stamps the clock's time");
    assert_eq!(
        run.created_at,
        t0 - Duration::days(1),
        "creation keeps the run's own time"
    );

    let t1 = t0 + Duration::seconds(90);
    s.clock.set(t1);
    let held = Lease::new("owner-a", t1 + Duration::seconds(30));
    let version = s.store.claim("stamped", version, &held).await.unwrap();
    assert_eq!(s.store.get("stamped").await.unwrap().unwrap().updated_at, t1, "a claim");

    // The lease runs out by the clock; whoever takes the run over stamps it
    // with the clock's time too.
    let t2 = t1 + Duration::minutes(5);
    s.clock.set(t2);
    let recovered = Resolution::new(None, ResolutionKind::Recovered, t2, Default::default());
    let taker = Lease::new("owner-b", t2 + Duration::seconds(30));
    let version = s
        .store
        .reclaim("stamped", version, &taker, t2, Some(&recovered))
        .await
        .unwrap();
    assert_eq!(
        s.store.get("stamped").await.unwrap().unwrap().updated_at,
        t2,
        "a reclaim"
    );

    let t3 = t2 + Duration::milliseconds(1);
    s.clock.set(t3);
    let done = [user("thanks")];
    s.store
        .update(step("stamped", version, RunStatus::Completed, &[], &done))
        .await
        .unwrap();
    let run = s.store.get("stamped").await.unwrap().unwrap();
    assert_eq!(run.updated_at, t3, "a step");
    assert_eq!(run.resolutions.last().map(|r| r.at), Some(t2));
}

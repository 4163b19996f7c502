//! The conformance cases of leases: claim under a lease, renewal, expiry and
//! take-over.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use askloop::{
    Author, Clock, ExpiredRuns, Interface, Lease, Resolution, ResolutionKind, RunFailure, RunStatus, RunUpdate,
    StoreError, SystemClock,
};
use chrono::Duration;

use super::Subject;
use super::cases::{at, base_time, expect_conflict, expect_not_found, ids, new_run, step, suspended_run, user};

fn lease(owner: &str, seconds_from_now: i64) -> Lease {
    Lease::new(owner, at(SystemClock.now() + Duration::seconds(seconds_from_now)))
}

/// Creates a running run held by `held` (or by nobody); returns its version.
async fn running_run(s: &Subject, run_id: &str, held: Option<Lease>) -> i64 {
    let mut run = new_run(run_id, "agent-1", base_time(), 1);
    run.lease = held;
    s.store.create(&run, &[user("go")]).await.unwrap();
    0
}

fn expect_lease_lost<T: std::fmt::Debug>(result: Result<T, StoreError>, run_id: &str, owner: &str) {
    match result {
        Err(StoreError::LeaseLost { run_id: id, owner: o }) => assert_eq!((id.as_str(), o.as_str()), (run_id, owner)),
        other => panic!("expected the lease of {owner} on {run_id} lost, got {other:?}"),
    }
}

/// A claim stores its lease; only its owner renews it, and a renewal moves
/// only the lease's end (not the version, so the owner's next write still
/// matches).
pub async fn a_claim_holds_the_run_and_only_its_owner_renews_it_without_a_new_version(s: &Subject) {
    let version = suspended_run(s.store.as_ref(), "run-a", "agent-1", base_time()).await;
    assert_eq!(s.store.get("run-a").await.unwrap().unwrap().lease, None);
    let held = lease("owner-a", 60);
    let claimed = s.store.claim("run-a", version, &held).await.unwrap();
    let run = s.store.get("run-a").await.unwrap().unwrap();
    assert_eq!((run.status(), run.version), (RunStatus::Running, claimed));
    assert_eq!(run.lease.as_ref(), Some(&held));

    let renewed = lease("owner-a", 120);
    s.store.renew_lease("run-a", &renewed).await.unwrap();
    let run = s.store.get("run-a").await.unwrap().unwrap();
    assert_eq!(run.lease.as_ref(), Some(&renewed));
    assert_eq!(run.version, claimed, "a renewal is not a new version");

    expect_lease_lost(
        s.store.renew_lease("run-a", &lease("owner-b", 300)).await,
        "run-a",
        "owner-b",
    );
    assert_eq!(s.store.get("run-a").await.unwrap().unwrap().lease, Some(renewed));
    expect_not_found(s.store.renew_lease("nope", &lease("owner-a", 60)).await, "nope");

    // A run that stopped running is held by nobody.
    s.store
        .update(step("run-a", claimed, RunStatus::Completed, &[], &[]))
        .await
        .unwrap();
    expect_lease_lost(
        s.store.renew_lease("run-a", &lease("owner-a", 60)).await,
        "run-a",
        "owner-a",
    );
}

/// `expired` lists running runs whose lease ran out or that have none
/// (nothing can renew it), oldest write first, up to its limit;
/// never a held run or one that is not running.
pub async fn runs_whose_lease_ran_out_or_that_have_none_are_expired_and_held_ones_are_not(s: &Subject) {
    running_run(s, "ran-out", Some(lease("owner-a", -5))).await;
    running_run(s, "no-lease", None).await;
    running_run(s, "held", Some(lease("owner-b", 60))).await;
    suspended_run(s.store.as_ref(), "waiting", "agent-1", base_time()).await;
    let now = SystemClock.now();
    let mut expired = ids(&s.store.expired(now, None, 10).await.unwrap())
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    expired.sort();
    assert_eq!(expired, ["no-lease", "ran-out"]);
    assert_eq!(s.store.expired(now, None, 1).await.unwrap().len(), 1, "the limit holds");
    let later = now + Duration::seconds(120);
    assert_eq!(
        s.store.expired(later, None, 10).await.unwrap().len(),
        3,
        "once its lease has run out, the held run is expired too"
    );
    let run = s.store.expired(now, None, 10).await.unwrap().remove(0);
    assert!(run.is_stalled(now));
}

/// Paging through expired runs ([`ExpiredRuns`] over `expired` with a
/// cursor) reads every one once, in order of last write then id (runs
/// written at the same moment included), 500 at a time; runs taken over
/// between two pages are not read, and none is skipped.
pub async fn expired_runs_are_read_page_after_page_each_once_past_five_hundred(s: &Subject) {
    const RUNS: usize = 1203;
    let id = |n: usize| format!("paged-{n:04}");
    let ran_out = lease("owner-dead", -5);
    // Three runs per moment, so pages end inside a moment too.
    for chunk in (0..RUNS).collect::<Vec<_>>().chunks(100) {
        futures::future::join_all(chunk.iter().map(|&n| {
            let mut run = new_run(&id(n), "agent-1", base_time() + Duration::seconds((n / 3) as i64), 1);
            run.lease = Some(ran_out.clone());
            let store = Arc::clone(&s.store);
            async move { store.create(&run, &[user("go")]).await.unwrap() }
        }))
        .await;
    }
    running_run(s, "held", Some(lease("owner-b", 60))).await;
    suspended_run(s.store.as_ref(), "waiting", "agent-1", base_time()).await;

    let now = SystemClock.now();
    let mut pages = ExpiredRuns::new(s.store.as_ref(), now, 500);
    let first = pages.next_page().await.unwrap().unwrap();
    assert_eq!(first.len(), 500);
    // Another process takes over ten runs of the next page meanwhile.
    let taken: Vec<String> = (600..610).map(id).collect();
    for run_id in &taken {
        s.store
            .reclaim(run_id, 0, &lease("owner-new", 60), now, None)
            .await
            .unwrap();
    }
    let mut read: Vec<String> = first.iter().map(|r| r.run_id.clone()).collect();
    let mut sizes = vec![first.len()];
    while let Some(page) = pages.next_page().await.unwrap() {
        assert!(page.len() <= 500);
        sizes.push(page.len());
        read.extend(page.into_iter().map(|r| r.run_id));
    }
    let expected: Vec<String> = (0..RUNS).map(id).filter(|run_id| !taken.contains(run_id)).collect();
    assert_eq!(read.len(), expected.len(), "pages of {sizes:?}");
    assert_eq!(read, expected, "each expired run once, oldest write first, then by id");
    assert_eq!(sizes, [500, 500, 193]);
}

/// Resolutions are kept in the order they were written, whichever write
/// appended them (a take-over, a step with one, a step with several) and
/// whatever their text holds (quotes, commas, brackets, non-ASCII).
pub async fn resolutions_of_a_take_over_and_of_later_steps_are_kept_in_order(s: &Subject) {
    let now = SystemClock.now();
    running_run(s, "decided", Some(lease("owner-a", -5))).await;
    let recovered = Resolution::new(None, ResolutionKind::Recovered, now, Author::via(Interface::Server));
    let taken = s
        .store
        .reclaim("decided", 0, &lease("owner-b", 60), now, Some(&recovered))
        .await
        .unwrap();
    let answered = |call: &str, who: &str| {
        Resolution::new(
            Some(call),
            ResolutionKind::Answered,
            now,
            Author::named(Interface::Cli, who),
        )
    };
    let one = [answered("c1", "Zoë \"ops\", [night] 🚀")];
    let two = [answered("c2", "Ana, {lead}"), answered("c3", "]")];
    let mut first = step("decided", taken, RunStatus::Running, &[], &[]);
    first.resolutions = &one;
    let version = s.store.update(first).await.unwrap();
    let mut second = step("decided", version, RunStatus::Completed, &[], &[]);
    second.resolutions = &two;
    s.store.update(second).await.unwrap();
    let run = s.store.get("decided").await.unwrap().unwrap();
    let expected: Vec<Resolution> = std::iter::once(recovered).chain(one).chain(two).collect();
    assert_eq!(run.resolutions, expected);
}

/// `reclaim` takes a running run whose lease ran out (or that has none) and
/// a failed run, at the version read; it refuses a held run, a stale
/// version, and runs that are suspended or finished otherwise.
pub async fn reclaim_takes_an_expired_or_failed_run_and_refuses_a_held_or_stale_one(s: &Subject) {
    let now = SystemClock.now();
    let new_owner = lease("owner-new", 60);

    running_run(s, "held", Some(lease("owner-a", 60))).await;
    expect_conflict(s.store.reclaim("held", 0, &new_owner, now, None).await, "held");
    let run = s.store.get("held").await.unwrap().unwrap();
    assert_eq!((run.version, run.lease.unwrap().owner.as_str()), (0, "owner-a"));

    running_run(s, "ran-out", Some(lease("owner-a", -5))).await;
    expect_conflict(s.store.reclaim("ran-out", 1, &new_owner, now, None).await, "ran-out");
    let recovered = Resolution::new(None, ResolutionKind::Recovered, now, Author::via(Interface::Server));
    let version = s
        .store
        .reclaim("ran-out", 0, &new_owner, now, Some(&recovered))
        .await
        .unwrap();
    assert!(version > 0);
    let run = s.store.get("ran-out").await.unwrap().unwrap();
    assert_eq!((run.status(), run.version), (RunStatus::Running, version));
    assert_eq!(
        run.resolutions,
        [recovered],
        "the take-over is recorded in the same write"
    );
    assert_eq!(run.lease.as_ref(), Some(&new_owner));
    assert_eq!(
        s.store.messages("ran-out").await.unwrap(),
        [user("go")],
        "messages are kept"
    );

    running_run(s, "no-lease", None).await;
    s.store.reclaim("no-lease", 0, &new_owner, now, None).await.unwrap();

    running_run(s, "failed", None).await;
    let failure = RunFailure::Model {
        transient: true,
        message: "unreachable".into(),
    };
    let failed = s
        .store
        .update(RunUpdate {
            error: Some("unreachable"),
            failure: Some(&failure),
            ..step("failed", 0, RunStatus::Failed, &[], &[])
        })
        .await
        .unwrap();
    let retried = s.store.reclaim("failed", failed, &new_owner, now, None).await.unwrap();
    let run = s.store.get("failed").await.unwrap().unwrap();
    assert!(run.resolutions.is_empty(), "no resolution given, none recorded");
    assert_eq!((run.status(), run.version), (RunStatus::Running, retried));
    assert_eq!(
        (run.error(), run.failure),
        (None, None),
        "a retried run's failure is cleared"
    );

    let waiting = suspended_run(s.store.as_ref(), "waiting", "agent-1", base_time()).await;
    expect_conflict(
        s.store.reclaim("waiting", waiting, &new_owner, now, None).await,
        "waiting",
    );
    expect_not_found(s.store.reclaim("nope", 0, &new_owner, now, None).await, "nope");
}

/// Of 20 tasks taking over one expired run at the same version, exactly one
/// wins; the others get `Conflict`, and the run is held by the winner.
pub async fn of_twenty_concurrent_reclaims_exactly_one_wins(s: &Subject) {
    running_run(s, "run-a", Some(lease("dead", -1))).await;
    let start = Arc::new(tokio::sync::Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|n| {
            let store = Arc::clone(&s.store);
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                let mine = lease(&format!("owner-{n}"), 60);
                start.wait().await;
                (
                    mine.clone(),
                    store.reclaim("run-a", 0, &mine, SystemClock.now(), None).await,
                )
            })
        })
        .collect();
    let mut won = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            (mine, Ok(version)) => won.push((mine, version)),
            (_, Err(StoreError::Conflict { .. })) => {}
            (_, Err(other)) => panic!("a reclaim failed with something other than a conflict: {other}"),
        }
    }
    assert_eq!(won.len(), 1, "exactly one reclaim must win, {} did", won.len());
    let run = s.store.get("run-a").await.unwrap().unwrap();
    assert_eq!(run.version, won[0].1);
    assert_eq!(run.lease.as_ref(), Some(&won[0].0));
}

/// Once another process took a run over, its old owner's renewal is
/// refused and its write at the version it held is a conflict: a driver
/// that lost its run stores nothing more.
pub async fn after_a_takeover_the_old_owner_can_neither_renew_nor_write(s: &Subject) {
    let old = lease("owner-old", -1);
    running_run(s, "run-a", Some(old.clone())).await;
    s.store
        .reclaim("run-a", 0, &lease("owner-new", 60), SystemClock.now(), None)
        .await
        .unwrap();
    expect_lease_lost(
        s.store.renew_lease("run-a", &lease("owner-old", 60)).await,
        "run-a",
        "owner-old",
    );
    expect_conflict(
        s.store
            .update(step("run-a", 0, RunStatus::Completed, &[], &[user("late")]))
            .await,
        "run-a",
    );
    assert_eq!(s.store.messages("run-a").await.unwrap(), [user("go")]);
}

/// An update that keeps a run running stores the writer's lease; one that
/// ends it clears the lease and keeps the typed failure it is given.
pub async fn an_update_sets_or_clears_the_lease_and_keeps_the_typed_failure(s: &Subject) {
    running_run(s, "run-a", Some(lease("owner-a", 60))).await;
    let renewed = lease("owner-a", 90);
    let v1 = s
        .store
        .update(RunUpdate {
            lease: Some(&renewed),
            ..step("run-a", 0, RunStatus::Running, &[], &[user("more")])
        })
        .await
        .unwrap();
    assert_eq!(s.store.get("run-a").await.unwrap().unwrap().lease, Some(renewed));

    let failure = RunFailure::Store {
        transient: true,
        message: "database busy".into(),
    };
    s.store
        .update(RunUpdate {
            error: Some("database busy"),
            failure: Some(&failure),
            ..step("run-a", v1, RunStatus::Failed, &[], &[])
        })
        .await
        .unwrap();
    let run = s.store.get("run-a").await.unwrap().unwrap();
    assert_eq!(run.lease, None);
    assert_eq!(run.failure, Some(failure));
    assert!(run.failure.as_ref().unwrap().is_transient());
    assert_eq!(run.error().as_deref(), Some("database busy"));
}

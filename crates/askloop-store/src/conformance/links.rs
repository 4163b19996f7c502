//! Cases of [`askloop::LinkStore`]: answer links are stored once, taken by
//! exactly one caller, given back only by that caller, revoked, and go
//! with their run.

use askloop::{AnswerLink, LinkState, LinkStore, RunStatus};
use chrono::{DateTime, Duration, Utc};
use futures::future::join_all;

use super::Subject;
use super::cases::{base_time, new_run};

fn links(s: &Subject) -> &dyn LinkStore {
    s.store.link_store().expect("the store keeps answer links")
}

fn link(t0: DateTime<Utc>, link_id: &str, run_id: &str, recipient: &str, minutes: i64) -> AnswerLink {
    AnswerLink {
        link_id: link_id.into(),
        run_id: run_id.into(),
        tool_call_id: "c1".into(),
        recipient: recipient.into(),
        made_by: None,
        created_at: t0,
        expires_at: t0 + Duration::minutes(minutes),
        used_at: None,
        revoked_at: None,
    }
}

/// A link is stored as made, and making it again (a notification sent
/// again) keeps the first; of twenty callers taking it at once exactly one
/// gets it; only the time it was taken at gives it back.
pub async fn a_link_is_stored_once_and_of_twenty_takers_exactly_one_wins(s: &Subject) {
    let t0 = base_time();
    s.store.create(&new_run("r1", "agent", t0, 0), &[]).await.unwrap();
    let made = link(t0, "lnk_a", "r1", "Alice", 60);
    assert_eq!(links(s).create_link(&made).await.unwrap(), made);
    let again = links(s)
        .create_link(&link(t0, "lnk_a", "r1", "Mallory", 600))
        .await
        .unwrap();
    assert_eq!(again, made, "the first link stays as it was made");
    assert_eq!(links(s).link("lnk_a").await.unwrap(), Some(made.clone()));
    assert_eq!(links(s).link("lnk_none").await.unwrap(), None);

    let now = t0 + Duration::minutes(1);
    let takes = join_all((0..20).map(|_| links(s).take_link("lnk_a", now))).await;
    let won = takes.into_iter().map(Result::unwrap).filter(|taken| *taken).count();
    assert_eq!(won, 1, "exactly one taker wins");
    let used = links(s).link("lnk_a").await.unwrap().unwrap();
    assert_eq!(used.state(now), LinkState::Used(now));

    links(s)
        .release_link("lnk_a", now + Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(
        links(s).link("lnk_a").await.unwrap().unwrap().used_at,
        Some(now),
        "another taking's time gives nothing back"
    );
    links(s).release_link("lnk_a", now).await.unwrap();
    assert_eq!(
        links(s).link("lnk_a").await.unwrap().unwrap().state(now),
        LinkState::Open
    );
    assert!(
        links(s).take_link("lnk_a", now).await.unwrap(),
        "a link given back is open again"
    );
    assert!(!links(s).take_link("lnk_none", now).await.unwrap());
}

/// A revoked or expired link cannot be taken; a used one cannot be
/// revoked; revoking twice revokes once.
pub async fn revoked_and_expired_links_cannot_be_taken_and_used_ones_cannot_be_revoked(s: &Subject) {
    let t0 = base_time();
    s.store.create(&new_run("r1", "agent", t0, 0), &[]).await.unwrap();
    for id in ["lnk_revoked", "lnk_short", "lnk_used"] {
        links(s).create_link(&link(t0, id, "r1", "Bob", 10)).await.unwrap();
    }
    let now = t0 + Duration::minutes(1);
    assert!(links(s).revoke_link("lnk_revoked", now).await.unwrap());
    assert!(!links(s).revoke_link("lnk_revoked", now).await.unwrap(), "revoked once");
    assert!(!links(s).take_link("lnk_revoked", now).await.unwrap());
    assert_eq!(
        links(s).link("lnk_revoked").await.unwrap().unwrap().state(now),
        LinkState::Revoked(now)
    );

    let late = t0 + Duration::minutes(10);
    assert!(
        !links(s).take_link("lnk_short", late).await.unwrap(),
        "a link is taken only before it runs out"
    );
    assert!(
        links(s)
            .take_link("lnk_short", late - Duration::microseconds(1))
            .await
            .unwrap()
    );

    assert!(links(s).take_link("lnk_used", now).await.unwrap());
    assert!(
        !links(s).revoke_link("lnk_used", now).await.unwrap(),
        "a used link stays used"
    );
    assert_eq!(links(s).link("lnk_used").await.unwrap().unwrap().revoked_at, None);
}

/// A run's links are listed oldest first, and pruning the run deletes them.
pub async fn a_runs_links_are_listed_oldest_first_and_pruned_with_it(s: &Subject) {
    let t0 = base_time();
    let done = new_run("done", "agent", t0, 0).with_calls(RunStatus::Completed, Vec::new());
    s.store.create(&done, &[]).await.unwrap();
    s.store.create(&new_run("open", "agent", t0, 0), &[]).await.unwrap();
    let mut later = link(t0, "lnk_2", "done", "Bob", 60);
    later.created_at += Duration::seconds(5);
    links(s).create_link(&later).await.unwrap();
    links(s)
        .create_link(&link(t0, "lnk_1", "done", "Alice", 60))
        .await
        .unwrap();
    links(s)
        .create_link(&link(t0, "lnk_3", "open", "Carol", 60))
        .await
        .unwrap();
    let listed: Vec<String> = links(s)
        .links("done")
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.link_id)
        .collect();
    assert_eq!(listed, ["lnk_1", "lnk_2"]);

    assert_eq!(s.store.prune(t0 + Duration::days(1)).await.unwrap(), 1);
    assert!(links(s).links("done").await.unwrap().is_empty());
    assert_eq!(links(s).link("lnk_1").await.unwrap(), None);
    assert_eq!(
        links(s).links("open").await.unwrap().len(),
        1,
        "a live run keeps its links"
    );
}

/// A link's maker is stored with it and read back by every read (one link,
/// a run's links, after it is taken and revoked); a link made without one
/// reads as made by nobody, never as made by its recipient.
pub async fn a_links_maker_is_kept_and_a_link_made_without_one_reads_as_made_by_nobody(s: &Subject) {
    let t0 = base_time();
    s.store.create(&new_run("r1", "agent", t0, 0), &[]).await.unwrap();
    let mut made = link(t0, "lnk_made", "r1", "Bob the CFO", 60);
    made.made_by = Some("alice é 🙂".into());
    assert_eq!(links(s).create_link(&made).await.unwrap(), made);
    let mut anonymous = link(t0, "lnk_anon", "r1", "Bob the CFO", 60);
    anonymous.created_at += Duration::seconds(1);
    assert_eq!(links(s).create_link(&anonymous).await.unwrap().made_by, None);

    let now = t0 + Duration::minutes(1);
    assert!(links(s).take_link("lnk_made", now).await.unwrap());
    assert!(links(s).revoke_link("lnk_anon", now).await.unwrap());
    let makers: Vec<(String, Option<String>)> = links(s)
        .links("r1")
        .await
        .unwrap()
        .into_iter()
        .map(|l| (l.link_id, l.made_by))
        .collect();
    assert_eq!(
        makers,
        [
            ("lnk_made".to_owned(), Some("alice é 🙂".to_owned())),
            ("lnk_anon".to_owned(), None)
        ]
    );
    assert_eq!(
        links(s).link("lnk_made").await.unwrap().unwrap().made_by.as_deref(),
        Some("alice é 🙂"),
        "taking a link keeps its maker"
    );
}

//! Approvals that stick: stored with the write of the approval that makes
//! them (and not with a refused one), read live, listed and revoked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use askloop::{
    Author, Grant, GrantQuery, GrantScope, GrantStore, Interface, RunMemory, RunStatus, StoreError, ThreadKey,
};
use chrono::Duration;
use serde_json::json;

use super::Subject;
use super::cases::{base_time, new_run, step};

fn grants(s: &Subject) -> &dyn GrantStore {
    s.store.grant_store().expect("the store keeps grants")
}

/// A grant of `agent` for `tool` in `resource`/`thread`, made at `base_time() + minutes`.
fn grant(id: &str, agent: &str, tool: &str, resource: &str, thread: &str, minutes: i64) -> Grant {
    Grant {
        id: id.to_owned(),
        agent_id: agent.to_owned(),
        tool: tool.to_owned(),
        mcp_server: None,
        scope: GrantScope::Thread,
        resource_id: resource.to_owned(),
        thread_id: thread.to_owned(),
        args: None,
        granted_by: Author::named(Interface::Page, "dana"),
        granted_at: base_time() + Duration::minutes(minutes),
        expires_at: None,
        run_id: "r".to_owned(),
        tool_call_id: id.to_owned(),
        revoked_at: None,
        revoked_by: None,
    }
}

/// Creates run `run_id` on thread `t1` of resource `alice`; returns its version.
async fn run_on_thread(s: &Subject, run_id: &str) -> i64 {
    let mut run = new_run(run_id, "agent", base_time(), 0);
    run.memory = Some(RunMemory {
        key: ThreadKey::new("alice", "t1"),
        context: 0,
    });
    s.store.create(&run, &[]).await.unwrap();
    0
}

/// A grant is stored by the write that records its approval, exactly as
/// given (its arguments, its MCP server, its expiry), and a write refused
/// for its stale version stores none.
pub async fn grants_are_stored_with_their_write_and_not_with_a_refused_one(s: &Subject) {
    let v = run_on_thread(s, "r").await;
    let mut full = grant("r:c1", "agent", "send_email", "alice", "t1", 0);
    full.mcp_server = Some("mail".into());
    full.scope = GrantScope::Resource;
    full.args = Some(json!({"to": "ops@example.com", "n": 2, "nul": "a\u{0}b"}));
    full.expires_at = Some(base_time() + Duration::hours(1));
    let mut write = step("r", v, RunStatus::Running, &[], &[]);
    write.grants = std::slice::from_ref(&full);
    let v = s.store.update(write).await.unwrap();
    assert_eq!(grants(s).grant("r:c1").await.unwrap(), Some(full.clone()));
    assert_eq!(
        grants(s).live_grants("agent", "alice", base_time()).await.unwrap(),
        [full.clone()]
    );

    let refused = grant("r:c2", "agent", "send_email", "alice", "t1", 1);
    let mut stale = step("r", v - 1, RunStatus::Running, &[], &[]);
    stale.grants = std::slice::from_ref(&refused);
    let err = s.store.update(stale).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err:?}");
    assert_eq!(
        grants(s).grant("r:c2").await.unwrap(),
        None,
        "a refused write grants nothing"
    );
}

/// The live grants of an agent and resource leave out other agents' and
/// resources', revoked ones and expired ones; a revocation keeps who made
/// it and when, and a second one does not change it.
pub async fn live_grants_leave_out_other_agents_resources_revoked_and_expired_ones(s: &Subject) {
    let v = run_on_thread(s, "r").await;
    let mut expiring = grant("r:expiring", "agent", "t", "alice", "t1", 0);
    expiring.expires_at = Some(base_time() + Duration::minutes(30));
    let all = [
        grant("r:live", "agent", "t", "alice", "t1", 0),
        grant("r:other-agent", "helper", "t", "alice", "t1", 0),
        grant("r:other-resource", "agent", "t", "bob", "t9", 0),
        grant("r:revoked", "agent", "t", "alice", "t1", 0),
        expiring,
    ];
    let mut write = step("r", v, RunStatus::Running, &[], &[]);
    write.grants = &all;
    s.store.update(write).await.unwrap();

    let ops = Author::named(Interface::Http, "ops");
    let revoked_at = base_time() + Duration::minutes(5);
    let revoked = grants(s)
        .revoke_grant("r:revoked", &ops, revoked_at)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (revoked.revoked_at, revoked.revoked_by.clone()),
        (Some(revoked_at), Some(ops.clone()))
    );
    let again = grants(s)
        .revoke_grant(
            "r:revoked",
            &Author::named(Interface::Cli, "late"),
            revoked_at + Duration::minutes(1),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again, revoked, "the first revocation is kept");
    assert_eq!(grants(s).revoke_grant("r:none", &ops, revoked_at).await.unwrap(), None);

    let ids = |found: Vec<Grant>| {
        let mut ids: Vec<String> = found.into_iter().map(|g| g.id).collect();
        ids.sort();
        ids
    };
    let early = base_time() + Duration::minutes(10);
    assert_eq!(
        ids(grants(s).live_grants("agent", "alice", early).await.unwrap()),
        ["r:expiring", "r:live"]
    );
    let late = base_time() + Duration::minutes(30);
    assert_eq!(
        ids(grants(s).live_grants("agent", "alice", late).await.unwrap()),
        ["r:live"],
        "expired at its time"
    );
}

/// Grants are listed newest first, by agent, resource and thread, live
/// ones only when asked, at most the page size.
pub async fn grants_are_listed_newest_first_filtered_and_paged(s: &Subject) {
    let v = run_on_thread(s, "r").await;
    let all: Vec<Grant> = (0..5)
        .map(|i| {
            grant(
                &format!("r:g{i}"),
                "agent",
                "t",
                "alice",
                if i % 2 == 0 { "t1" } else { "t2" },
                i,
            )
        })
        .chain([grant("r:bob", "agent", "t", "bob", "t1", 9)])
        .collect();
    let mut write = step("r", v, RunStatus::Running, &[], &[]);
    write.grants = &all;
    s.store.update(write).await.unwrap();
    grants(s)
        .revoke_grant(
            "r:g4",
            &Author::via(Interface::Cli),
            base_time() + Duration::minutes(20),
        )
        .await
        .unwrap();
    let list = |query: GrantQuery| async move {
        grants(s)
            .grants(&query)
            .await
            .unwrap()
            .into_iter()
            .map(|g| g.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        list(GrantQuery::default()).await,
        ["r:bob", "r:g4", "r:g3", "r:g2", "r:g1", "r:g0"]
    );
    let alice = GrantQuery {
        resource_id: Some("alice".into()),
        ..GrantQuery::default()
    };
    let thread = GrantQuery {
        thread_id: Some("t1".into()),
        ..alice.clone()
    };
    assert_eq!(list(thread.clone()).await, ["r:g4", "r:g2", "r:g0"]);
    let live = GrantQuery {
        live_at: Some(base_time() + Duration::hours(1)),
        ..thread
    };
    assert_eq!(list(live).await, ["r:g2", "r:g0"], "revoked ones left out");
    let page = GrantQuery { limit: 2, ..alice };
    assert_eq!(list(page).await, ["r:g4", "r:g3"]);
    let other_agent = GrantQuery {
        agent_id: Some("helper".into()),
        ..GrantQuery::default()
    };
    assert!(list(other_agent).await.is_empty());
}

/// Deleting a thread deletes the grants made for it alone (a new thread of
/// the same id is another conversation); grants for the whole resource made
/// in it, and other threads' grants, stay.
pub async fn deleting_a_thread_deletes_its_own_grants_and_keeps_the_resources(s: &Subject) {
    let v = run_on_thread(s, "r").await;
    let mut for_resource = grant("r:resource", "agent", "t", "alice", "t1", 0);
    for_resource.scope = GrantScope::Resource;
    let all = [
        grant("r:thread", "agent", "t", "alice", "t1", 0),
        for_resource,
        grant("r:other-thread", "agent", "t", "alice", "t2", 0),
    ];
    let mut write = step("r", v, RunStatus::Completed, &[], &[]);
    write.grants = &all;
    s.store.update(write).await.unwrap();
    let threads = s.store.thread_store().unwrap();
    let deleted = threads.delete_thread(&ThreadKey::new("alice", "t1")).await.unwrap();
    assert_eq!(deleted, askloop::ThreadDeletion::Deleted);
    assert_eq!(
        grants(s).grant("r:thread").await.unwrap(),
        None,
        "the thread's own grant is gone"
    );
    assert!(grants(s).grant("r:resource").await.unwrap().is_some());
    assert!(grants(s).grant("r:other-thread").await.unwrap().is_some());
}

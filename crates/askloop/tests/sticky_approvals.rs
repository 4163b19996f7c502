//! Approvals that stick: approving a call can let later calls of the same
//! tool run without waiting in the same thread or resource, recorded as
//! approved by that earlier decision; grants can be revoked and expire.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use askloop::{
    Agent, Always, Author, CallDecision, Clock, FunctionTool, GrantQuery, GrantScope, GrantStore, Interface,
    ManualClock, MemoryStore, ResolutionKind, ResumeOptions, RunError, RunStatus, StoreError, StreamOptions,
    StreamOutput, ThreadOptions, ToolOutput,
};
use common::{CountingModel, bare_store};
use serde_json::{Value, json};

/// Turn N is played when the request holds N assistant messages: a run on a
/// new thread sends to a@example.com; the next run on the same thread (two
/// assistant messages of context) sends to b@example.com.
const SCRIPT: &str = r#"{"turns": [
    {"toolCalls": [{"id": "c1", "name": "send", "args": {"to": "a@example.com"}}]},
    {"text": "Sent: {{toolResults}}"},
    {"toolCalls": [{"id": "c2", "name": "send", "args": {"to": "b@example.com"}}]},
    {"text": "Sent again: {{toolResults}}"}
]}"#;

struct Setup {
    agent: Agent,
    sent: Arc<AtomicUsize>,
    clock: Arc<ManualClock>,
    store: Arc<MemoryStore>,
}

/// A `send` tool that asks for approval by its own policy, counting its sends in `sent`.
fn send_tool(sent: &Arc<AtomicUsize>) -> FunctionTool {
    let counter = Arc::clone(sent);
    FunctionTool::builder("send")
        .input_schema(json!({"type": "object", "properties": {"to": {"type": "string"}}}))
        .requires_approval(true)
        .execute(move |args: Value, _ctx| {
            let counter = Arc::clone(&counter);
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(ToolOutput::text(format!("sent to {}", args["to"])).into())
            }
        })
}

/// An agent whose `send` tool asks for approval by its own policy.
fn setup() -> Setup {
    let sent = Arc::new(AtomicUsize::new(0));
    let send = send_tool(&sent);
    let clock = Arc::new(ManualClock::starting_now());
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let agent = Agent::builder("mailer")
        .model(CountingModel::new(SCRIPT))
        .tool(send)
        .store(store.clone())
        .clock(clock.clone())
        .build()
        .unwrap();
    Setup {
        agent,
        sent,
        clock,
        store,
    }
}

async fn on(agent: &Agent, resource: &str, thread: &str) -> StreamOutput {
    let options = StreamOptions::default().on_thread(ThreadOptions::new(resource, thread));
    agent.stream_with("Send it", options).await.unwrap().output().await
}

fn dana() -> Author {
    Author::named(Interface::Page, "dana")
}

/// Runs on thread `t1` of alice until its first call waits, then approves
/// it with `always`.
async fn approve_first(setup: &Setup, always: Always) -> StreamOutput {
    let first = on(&setup.agent, "alice", "t1").await;
    assert_eq!(first.status, RunStatus::Suspended);
    setup
        .agent
        .approve_tool_call_always(ResumeOptions::run(&first.run_id).by(dana()), always)
        .await
        .unwrap()
        .output()
        .await
}

#[tokio::test]
async fn an_approval_that_sticks_to_the_thread_lets_its_later_calls_run_recorded_as_approved_by_it() {
    let setup = setup();
    let approved = approve_first(&setup, Always::in_scope(GrantScope::Thread)).await;
    assert_eq!(approved.status, RunStatus::Completed);
    let first = setup.agent.get_run(&approved.run_id).await.unwrap();
    let made = first.resolutions[0]
        .grant
        .clone()
        .expect("the approval records its grant");
    assert_eq!(
        (made.id.as_str(), made.scope, made.granted_via),
        (
            format!("{}:c1", approved.run_id).as_str(),
            GrantScope::Thread,
            Interface::Page
        )
    );
    assert_eq!(first.schema_version(), 5, "older builds refuse it");

    let later = on(&setup.agent, "alice", "t1").await;
    assert_eq!(later.status, RunStatus::Completed, "no wait: the grant covers it");
    assert_eq!(later.text, "Sent again: sent to \"b@example.com\"");
    assert_eq!(setup.sent.load(Ordering::SeqCst), 2);
    let stored = setup.agent.get_run(&later.run_id).await.unwrap();
    let [by_grant] = stored.resolutions.as_slice() else {
        panic!("{:?}", stored.resolutions)
    };
    assert_eq!(
        (by_grant.kind, by_grant.author.clone(), by_grant.grant.as_ref()),
        (
            ResolutionKind::Approved,
            Author::named(Interface::Grant, "dana"),
            Some(&made)
        ),
        "approved by dana's earlier decision, through the grant"
    );

    let elsewhere = on(&setup.agent, "alice", "t2").await;
    assert_eq!(elsewhere.status, RunStatus::Suspended, "another thread is not covered");
    let bob = on(&setup.agent, "bob", "t1").await;
    assert_eq!(
        bob.status,
        RunStatus::Suspended,
        "nor another resource's thread of the same id"
    );
    assert_eq!(setup.sent.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_grant_for_the_resource_with_its_arguments_covers_only_those_arguments_in_any_thread() {
    let setup = setup();
    approve_first(&setup, Always::in_scope(GrantScope::Resource).same_arguments()).await;
    let same = on(&setup.agent, "alice", "t2").await;
    assert_eq!(
        same.status,
        RunStatus::Completed,
        "a@example.com again, in another thread"
    );
    let other = on(&setup.agent, "alice", "t1").await;
    assert_eq!(
        other.status,
        RunStatus::Suspended,
        "b@example.com is not what was approved"
    );
    assert_eq!(setup.sent.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_revoked_grant_covers_nothing_from_the_next_call_and_an_expired_one_neither() {
    let setup = setup();
    let approved = approve_first(&setup, Always::in_scope(GrantScope::Thread)).await;
    let id = format!("{}:c1", approved.run_id);
    let ops = Author::named(Interface::Cli, "ops");
    let revoked = setup
        .store
        .revoke_grant(&id, &ops, setup.clock.now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(revoked.revoked_by, Some(ops));
    let next = on(&setup.agent, "alice", "t1").await;
    assert_eq!(next.status, RunStatus::Suspended, "revoked: the call waits again");

    let setup = setup_with_expiry().await;
    setup.clock.advance(std::time::Duration::from_secs(120));
    let next = on(&setup.agent, "alice", "t1").await;
    assert_eq!(
        next.status,
        RunStatus::Suspended,
        "expired after a minute: the call waits again"
    );
    assert_eq!(setup.sent.load(Ordering::SeqCst), 1);
    let live = GrantQuery {
        live_at: Some(setup.clock.now()),
        ..GrantQuery::default()
    };
    assert!(setup.store.grants(&live).await.unwrap().is_empty());
}

async fn setup_with_expiry() -> Setup {
    let setup = setup();
    approve_first(
        &setup,
        Always::in_scope(GrantScope::Thread).lasting(std::time::Duration::from_secs(60)),
    )
    .await;
    setup
}

#[tokio::test]
async fn a_store_that_keeps_no_grants_refuses_an_approval_that_sticks_and_its_call_still_waits() {
    let sent = Arc::new(AtomicUsize::new(0));
    let store = bare_store();
    let agent = Agent::builder("mailer")
        .model(CountingModel::new(SCRIPT))
        .tool(send_tool(&sent))
        .store(store.clone())
        .build()
        .unwrap();
    let out = agent.stream("Send it").await.unwrap().output().await;
    assert_eq!(out.status, RunStatus::Suspended);
    let call = out.pending[0].tool_call_id.clone();
    let always = Always::in_scope(GrantScope::Thread);
    let alone = agent
        .approve_tool_call_always(ResumeOptions::run(&out.run_id), always.clone())
        .await;
    assert!(
        matches!(alone, Err(RunError::Store(StoreError::NoGrants))),
        "{:?}",
        alone.err()
    );
    let together = agent
        .decide_all(&out.run_id, vec![(call, CallDecision::ApproveAlways(always))], dana())
        .await;
    assert!(
        matches!(together, Err(RunError::Store(StoreError::NoGrants))),
        "{:?}",
        together.err()
    );
    let run = agent.get_run(&out.run_id).await.unwrap();
    assert_eq!((run.status(), run.stored_calls().len()), (RunStatus::Suspended, 1));
    assert_eq!(sent.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_run_on_no_thread_cannot_make_an_approval_stick_and_its_call_still_waits() {
    let setup = setup();
    let out = setup.agent.stream("Send it").await.unwrap().output().await;
    assert_eq!(out.status, RunStatus::Suspended);
    let Err(err) = setup
        .agent
        .approve_tool_call_always(ResumeOptions::run(&out.run_id), Always::in_scope(GrantScope::Thread))
        .await
    else {
        panic!("an approval on no thread cannot stick")
    };
    assert!(
        matches!(&err, RunError::InvalidInput(message) if message.contains("on no thread")),
        "{err}"
    );
    let run = setup.agent.get_run(&out.run_id).await.unwrap();
    assert_eq!((run.status(), run.stored_calls().len()), (RunStatus::Suspended, 1));
    assert_eq!(setup.sent.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn of_two_people_approving_one_call_at_once_with_grants_exactly_one_grant_is_made() {
    let setup = setup();
    let first = on(&setup.agent, "alice", "t1").await;
    let approve = |who: &'static str, scope| {
        let agent = setup.agent.clone();
        let run_id = first.run_id.clone();
        async move {
            agent
                .approve_tool_call_always(
                    ResumeOptions::run(&run_id).by(Author::named(Interface::Http, who)),
                    Always::in_scope(scope),
                )
                .await
        }
    };
    let (a, b) = tokio::join!(approve("ana", GrantScope::Thread), approve("ben", GrantScope::Resource));
    let won: Vec<_> = [a, b].into_iter().filter_map(Result::ok).collect();
    assert_eq!(won.len(), 1, "exactly one approval wins");
    let grants = setup.store.grants(&GrantQuery::default()).await.unwrap();
    assert_eq!(grants.len(), 1, "{grants:?}");
    let run = setup.agent.get_run(&first.run_id).await.unwrap();
    assert_eq!(
        run.resolutions[0].author.by.as_deref(),
        grants[0].granted_by.by.as_deref(),
        "the grant is the winner's"
    );
}

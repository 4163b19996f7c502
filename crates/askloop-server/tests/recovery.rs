//! A server takes over runs whose driver stopped mid-step (their process
//! died: the lease ran out) and continues them from their last stored step,
//! without any client asking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use askloop::{
    Agent, AskUser, ManualClock, MemoryStore, Model, ModelError, ModelRequest, ModelStream, RunStore, ScriptedModel,
};
use askloop_server::ServerOptions;
use futures::StreamExt;

use common::{DEPLOY_SCRIPT, TestServer, stored_run};

const LEASE: Duration = Duration::from_millis(300);

/// The deploy script, but its first call never answers (a provider that
/// hangs while the process driving the run dies).
#[derive(Debug)]
struct HangsOnFirstCall {
    inner: ScriptedModel,
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl Model for HangsOnFirstCall {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            return Ok(futures::stream::pending().boxed());
        }
        self.inner.stream(request).await
    }
}

fn assistant_with(model: Arc<dyn Model>, store: &Arc<dyn RunStore>, clock: &ManualClock) -> Agent {
    Agent::builder("assistant")
        .model(model)
        .tool(AskUser::new())
        .store(Arc::clone(store))
        .clock(Arc::new(clock.clone()))
        .lease_duration(LEASE)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_run_whose_driver_died_mid_model_call_is_taken_over_by_the_server_and_reaches_its_question() {
    // Years from the system's time: a lease runs out when this clock says
    // so, whatever the machine's time.
    let clock = ManualClock::starting_at("2030-01-01T00:00:00Z".parse().unwrap());
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let hanging = Arc::new(HangsOnFirstCall {
        inner: ScriptedModel::from_json("test-script", DEPLOY_SCRIPT).unwrap(),
        calls: AtomicUsize::new(0),
    });
    let dying = assistant_with(hanging.clone(), &store, &clock);
    let mut stream = dying.stream("Deploy the app").await.unwrap();
    let run_id = stream.run_id().to_owned();
    // Drive it until the model call hangs, then abandon the driver the way a
    // killed process does: never polled again, never dropped.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while hanging.calls.load(Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < deadline, "no model call within 30 s");
        tokio::select! {
            chunk = stream.next() => assert!(chunk.is_some(), "the stream ended before its model call"),
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    }
    std::mem::forget(stream);
    assert_eq!(
        store.get(&run_id).await.unwrap().unwrap().status(),
        askloop::RunStatus::Running
    );

    // The dead driver's lease runs out; the server's next look (it reads
    // the agents' clock) takes the run over.
    clock.advance(LEASE + Duration::from_millis(1));
    let healthy = assistant_with(common::scripted(DEPLOY_SCRIPT), &store, &clock);
    let options = ServerOptions::default().recover_every(Duration::from_millis(100));
    let server = TestServer::start_with(vec![healthy], Arc::clone(&store), options).await;

    let mut status = String::new();
    for _ in 0..300 {
        let run = stored_run(&server, &run_id).await;
        status = run["status"].as_str().unwrap_or_default().to_owned();
        if status == "suspended" {
            assert_eq!(run["pendingToolCalls"][0]["toolName"], "ask_user", "{run}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, "suspended", "the server never took the stalled run over");
    let listed = server.get("/api/agents/assistant/suspended-runs").await;
    let listed: serde_json::Value = listed.json().await.unwrap();
    assert_eq!(listed["runs"][0]["runId"], run_id.as_str());
    server.stop().await.unwrap();
}

//! Runs whose driver died are taken over and continued from their last
//! stored step; failed runs are retried; a driver that renews its lease
//! keeps its run.
//!
//! A driver "dies" here the way a killed process does: its stream stops
//! being polled and is never dropped (`mem::forget`), so nothing more of it
//! runs, its heartbeat included. (Killing real processes is the crash test's
//! job, in `askloop-store`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use askloop::{
    Agent, AgentStream, AskUser, Author, ChunkKind, Clock, FunctionTool, Interface, ManualClock, MemoryStore, Message,
    Model, ModelError, ModelRequest, ModelStream, ResolutionKind, ResumeOptions, RunError, RunFailure, RunStatus,
    RunStore, ScriptedModel, ToolContent, ToolOutput,
};
use async_trait::async_trait;
use chrono::Utc;
use common::{CountingModel, types};
use futures::StreamExt;
use serde_json::json;

const LEASE: Duration = Duration::from_millis(300);

/// A scripted model that, on the turn given, never answers (the call hangs
/// as a call to a dead or slow provider does).
#[derive(Debug)]
struct HangsOnTurn {
    inner: ScriptedModel,
    turn: usize,
    calls: AtomicUsize,
}

#[async_trait]
impl Model for HangsOnTurn {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if request.messages.iter().filter(|m| m.is_assistant()).count() == self.turn {
            return Ok(futures::stream::pending().boxed());
        }
        self.inner.stream(request).await
    }
}

fn hangs_on_turn(script: &str, turn: usize) -> Arc<HangsOnTurn> {
    Arc::new(HangsOnTurn {
        inner: ScriptedModel::from_json("test-script", script).unwrap(),
        turn,
        calls: AtomicUsize::new(0),
    })
}

fn agent(model: Arc<dyn Model>, store: &Arc<dyn RunStore>) -> Agent {
    Agent::builder("assistant")
        .model(model)
        .tool(AskUser::new())
        .store(Arc::clone(store))
        .lease_duration(LEASE)
        .build()
        .unwrap()
}

/// Polls `stream` until `dead` is true, then abandons it without dropping
/// it: the driver stops where it is, as if its process had been killed.
async fn kill_when(mut stream: AgentStream, dead: impl Fn() -> bool) {
    loop {
        tokio::select! {
            chunk = stream.next() => {
                assert!(chunk.is_some(), "the stream ended before the moment to kill it");
            }
            () = until(&dead) => break,
        }
    }
    std::mem::forget(stream);
}

/// Waits for `condition`, checking every few milliseconds (for at most 10 s).
async fn until(condition: impl Fn() -> bool) {
    for _ in 0..2000 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("waited 10 s for a condition that never held");
}

/// What a test's processes share: the store, and the clock that it and
/// every agent read, moved past a lease instead of waiting for it to run
/// out.
struct World {
    store: Arc<dyn RunStore>,
    clock: ManualClock,
}

impl World {
    fn new() -> Self {
        let clock = ManualClock::starting_at("2026-12-04T10:00:00Z".parse().unwrap());
        World {
            store: Arc::new(MemoryStore::with_clock(Arc::new(clock.clone()))),
            clock,
        }
    }

    fn clock(&self) -> Arc<dyn Clock> {
        Arc::new(self.clock.clone())
    }

    /// The `assistant`, on the world's store and clock.
    fn agent(&self, model: Arc<dyn Model>) -> Agent {
        Agent::builder("assistant")
            .model(model)
            .tool(AskUser::new())
            .store(Arc::clone(&self.store))
            .clock(self.clock())
            .lease_duration(LEASE)
            .build()
            .unwrap()
    }

    /// Moves the clock past the lease of `run_id`'s dead driver: the store
    /// then lists the run as expired.
    async fn lease_runs_out(&self, run_id: &str) {
        self.clock.advance(LEASE + Duration::from_millis(1));
        let expired = self.store.expired(self.clock.now(), None, 100).await.unwrap();
        assert!(
            expired.iter().any(|r| r.run_id == run_id),
            "run {run_id} is not listed as expired once its lease ran out"
        );
    }
}

const ASK_THEN_ANSWER: &str = r#"{"turns": [
    {"toolCalls": [{"name": "ask_user", "args": {"question": "Which city?"}}]},
    {"text": "Booked {{toolResults}}"}
]}"#;

#[tokio::test]
async fn a_run_whose_driver_died_mid_model_call_is_taken_over_and_the_call_made_again() {
    let world = World::new();
    let store = Arc::clone(&world.store);
    let dying = hangs_on_turn(ASK_THEN_ANSWER, 0);
    let first = world.agent(dying.clone());
    let stream = first.stream("Book a trip").await.unwrap();
    let run_id = stream.run_id().to_owned();
    kill_when(stream, || dying.calls.load(Ordering::SeqCst) == 1).await;

    let run = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!(run.status(), RunStatus::Running);
    world.lease_runs_out(&run_id).await;
    assert!(store.get(&run_id).await.unwrap().unwrap().is_stalled(world.clock.now()));

    let model = CountingModel::new(ASK_THEN_ANSWER);
    let second = world.agent(model.clone());
    let mut recovered = second.recover_runs(Author::via(Interface::Server)).await.unwrap();
    assert_eq!(recovered.len(), 1);
    let (chunks, output) = recovered.remove(0).output_with_chunks().await;
    assert_eq!(output.status, RunStatus::Suspended);
    let run = store.get(&run_id).await.unwrap().unwrap();
    let [taken_over] = &run.resolutions[..] else {
        panic!("{:?}", run.resolutions)
    };
    assert_eq!(
        (taken_over.kind, &taken_over.author, taken_over.tool_call_id.as_deref()),
        (ResolutionKind::Recovered, &Author::via(Interface::Server), None),
        "the take-over is recorded as a recovered resolution, by who took it over"
    );
    assert_eq!(model.calls(), 1, "the interrupted model call is made again, once");
    assert!(types(&chunks).contains(&"tool-call-suspended"));
    assert!(
        second
            .recover_runs(askloop::Author::default())
            .await
            .unwrap()
            .is_empty(),
        "nothing left to recover"
    );

    let done = second
        .resume_stream("Paris", ResumeOptions::run(&run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.text, "Booked User answered: Paris");
    let messages = store.messages(&run_id).await.unwrap();
    assert_eq!(
        messages.len(),
        4,
        "user, question, answer, reply; nothing twice: {messages:?}"
    );
}

#[tokio::test]
async fn answers_stored_before_the_driver_died_are_not_asked_again() {
    let script = r#"{"turns": [
        {"toolCalls": [
            {"name": "ask_user", "args": {"question": "Which city?"}},
            {"name": "ask_user", "args": {"question": "Which day?"}}
        ]},
        {"text": "Booked {{toolResults}}"}
    ]}"#;
    let world = World::new();
    let dying = hangs_on_turn(script, 1);
    let first = world.agent(dying.clone());
    let output = first.stream("Book a trip").await.unwrap().output().await;
    let ids: Vec<String> = output.pending.iter().map(|p| p.tool_call_id.clone()).collect();
    let run_id = output.run_id;
    first
        .resume_stream("Paris", ResumeOptions::call(&run_id, &ids[0]))
        .await
        .unwrap()
        .output()
        .await;
    // The last answer starts the model call that hangs; the process dies.
    let last = first
        .resume_stream("Friday", ResumeOptions::call(&run_id, &ids[1]))
        .await
        .unwrap();
    kill_when(last, || dying.calls.load(Ordering::SeqCst) == 2).await;
    world.lease_runs_out(&run_id).await;

    let second = world.agent(CountingModel::new(script));
    let (chunks, output) = second
        .recover_runs(askloop::Author::default())
        .await
        .unwrap()
        .remove(0)
        .output_with_chunks()
        .await;
    assert_eq!(output.status, RunStatus::Completed);
    assert!(!types(&chunks).contains(&"tool-call-suspended"), "{:?}", types(&chunks));
    assert_eq!(output.text, "Booked User answered: Paris; User answered: Friday");
}

/// A tool that counts its runs and, in the process that is to die, never
/// returns from its first run.
fn charge_tool(runs: Arc<AtomicUsize>, hang: bool, idempotent: bool) -> FunctionTool {
    charge_tool_approved(runs, hang, idempotent, false)
}

/// [`charge_tool`], waiting for a person's approval when `approval`.
fn charge_tool_approved(runs: Arc<AtomicUsize>, hang: bool, idempotent: bool, approval: bool) -> FunctionTool {
    FunctionTool::builder("charge")
        .description("Charges the card.")
        .input_schema(json!({"type": "object"}))
        .idempotent(idempotent)
        .requires_approval(approval)
        .execute(move |_input: serde_json::Value, _ctx| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                if hang {
                    futures::future::pending::<()>().await;
                }
                Ok(ToolOutput::text("charged").into())
            }
        })
}

const CHARGE_THEN_REPLY: &str = r#"{"turns": [
    {"toolCalls": [{"name": "charge", "args": {}}]},
    {"text": "Done: {{toolResults}}"}
]}"#;

/// Runs a charge that dies mid-tool, then recovers it in another agent;
/// returns (runs in the dead process, runs in the recovering one, the
/// recovered stream's output, the stored tool result).
async fn die_mid_tool(idempotent: bool) -> (usize, usize, askloop::StreamOutput, ToolContent) {
    let world = World::new();
    let store = Arc::clone(&world.store);
    let build = |runs: &Arc<AtomicUsize>, hang: bool| {
        Agent::builder("assistant")
            .model(CountingModel::new(CHARGE_THEN_REPLY))
            .tool(charge_tool(Arc::clone(runs), hang, idempotent))
            .store(Arc::clone(&store))
            .clock(world.clock())
            .lease_duration(LEASE)
            .build()
            .unwrap()
    };
    let dead_runs = Arc::new(AtomicUsize::new(0));
    let stream = build(&dead_runs, true).stream("Charge me").await.unwrap();
    let run_id = stream.run_id().to_owned();
    kill_when(stream, || dead_runs.load(Ordering::SeqCst) == 1).await;
    world.lease_runs_out(&run_id).await;

    let new_runs = Arc::new(AtomicUsize::new(0));
    let output = build(&new_runs, false)
        .recover_runs(askloop::Author::default())
        .await
        .unwrap()
        .remove(0)
        .output()
        .await;
    let messages = store.messages(&run_id).await.unwrap();
    let result = messages
        .iter()
        .find_map(|m| match m {
            Message::Tool(result) => Some(result.content.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(messages.len(), 4, "user, call, result, reply: {messages:?}");
    (
        dead_runs.load(Ordering::SeqCst),
        new_runs.load(Ordering::SeqCst),
        output,
        result,
    )
}

#[tokio::test]
async fn an_interrupted_tool_that_is_not_idempotent_is_not_run_again_and_the_model_is_told() {
    let (dead, new, output, result) = die_mid_tool(false).await;
    assert_eq!((dead, new), (1, 0), "the charge must never run twice");
    assert_eq!(output.status, RunStatus::Completed);
    let ToolContent::Text(text) = result else {
        panic!("{result:?}")
    };
    assert!(text.contains("interrupted"), "{text}");
}

#[tokio::test]
async fn an_interrupted_idempotent_tool_is_run_again() {
    let (dead, new, output, result) = die_mid_tool(true).await;
    assert_eq!((dead, new), (1, 1));
    assert_eq!(output.status, RunStatus::Completed);
    assert_eq!(output.text, "Done: charged");
    assert_eq!(result, ToolContent::Text("charged".into()));
}

#[tokio::test]
async fn a_driver_that_renews_its_lease_keeps_its_run_from_recovery() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let slow = hangs_on_turn(ASK_THEN_ANSWER, 0);
    let first = agent(slow.clone(), &store);
    let mut stream = first.stream("Book a trip").await.unwrap();
    let run_id = stream.run_id().to_owned();
    let taken = store.get(&run_id).await.unwrap().unwrap().lease.unwrap();
    // Keep driving (the model call hangs) until the heartbeat has moved the
    // lease past its first end twice over.
    let until_renewed = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let now = store.get(&run_id).await.unwrap().unwrap().lease.unwrap();
            if now.until > taken.until + chrono::Duration::from_std(LEASE).unwrap() {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let mut until_renewed = std::pin::pin!(until_renewed);
    let renewed = loop {
        tokio::select! {
            chunk = stream.next() => assert!(chunk.is_some(), "the hanging model call ended"),
            renewed = &mut until_renewed => break renewed.expect("the heartbeat renewed the lease within 30 s"),
        }
    };
    assert_eq!(renewed.owner, taken.owner);
    assert!(Utc::now() > taken.until, "the first lease has run out by now");
    let other = agent(CountingModel::new(ASK_THEN_ANSWER), &store);
    assert!(
        other.recover_runs(askloop::Author::default()).await.unwrap().is_empty(),
        "a held run is not taken over"
    );
    assert_eq!(store.get(&run_id).await.unwrap().unwrap().status(), RunStatus::Running);
}

#[tokio::test]
async fn a_run_failed_by_an_unreachable_model_keeps_its_answer_and_is_retried_from_there() {
    #[derive(Debug)]
    struct Unreachable;
    #[async_trait]
    impl Model for Unreachable {
        fn name(&self) -> &str {
            "down"
        }
        async fn stream(&self, _request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
            Err(ModelError::Transport {
                provider: "down".into(),
                message: "connection refused".into(),
                source: None,
            })
        }
    }

    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let up = agent(CountingModel::new(ASK_THEN_ANSWER), &store);
    let down = agent(Arc::new(Unreachable), &store);
    let run_id = up.stream("Book a trip").await.unwrap().output().await.run_id;
    let failed = down
        .resume_stream("Paris", ResumeOptions::run(&run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(failed.status, RunStatus::Failed);
    let run = store.get(&run_id).await.unwrap().unwrap();
    assert!(
        matches!(&run.failure, Some(RunFailure::Model { transient: true, message }) if message.contains("refused")),
        "{:?}",
        run.failure
    );
    assert!(run.lease.is_none());

    let model = CountingModel::new(ASK_THEN_ANSWER);
    let retried = agent(model.clone(), &store)
        .retry_run(&run_id, askloop::Author::default())
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(retried.status, RunStatus::Completed);
    assert_eq!(
        retried.text, "Booked User answered: Paris",
        "the stored answer is used, not asked again"
    );
    assert_eq!(model.calls(), 1);
    let run = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!((run.error(), run.failure), (None, None));
    let kinds: Vec<ResolutionKind> = run.resolutions.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [ResolutionKind::Answered, ResolutionKind::Recovered],
        "the retry is recorded after the answer"
    );

    match up.retry_run(&run_id, askloop::Author::default()).await {
        Err(RunError::NotRetryable { reason, .. }) => assert!(reason.contains("completed"), "{reason}"),
        other => panic!("a completed run is not retried: {other:?}"),
    }
}

#[tokio::test]
async fn generate_returns_the_typed_failure_and_a_step_limit_is_not_retried() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let looping = r#"{"turns": [
        {"toolCalls": [{"name": "charge", "args": {}}]},
        {"toolCalls": [{"name": "charge", "args": {}}]}
    ]}"#;
    let agent = Agent::builder("assistant")
        .model(CountingModel::new(looping))
        .tool(charge_tool(Arc::new(AtomicUsize::new(0)), false, true))
        .store(Arc::clone(&store))
        .max_steps(1)
        .build()
        .unwrap();
    let run_id = match agent.generate("Charge me").await {
        Err(RunError::Failed {
            run_id,
            failure: RunFailure::StepLimit { limit: 1 },
        }) => run_id,
        other => panic!("expected a step-limit failure, got {other:?}"),
    };
    let run = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!(run.failure, Some(RunFailure::StepLimit { limit: 1 }));
    assert!(matches!(
        agent.retry_run(&run_id, askloop::Author::default()).await,
        Err(RunError::NotRetryable { .. })
    ));
}

#[tokio::test]
async fn the_stream_of_a_recovered_run_shows_only_what_is_new() {
    let world = World::new();
    let dying = hangs_on_turn(ASK_THEN_ANSWER, 1);
    let first = world.agent(dying.clone());
    let run_id = first.stream("Book a trip").await.unwrap().output().await.run_id;
    let resumed = first.resume_stream("Paris", ResumeOptions::run(&run_id)).await.unwrap();
    kill_when(resumed, || dying.calls.load(Ordering::SeqCst) == 2).await;
    world.lease_runs_out(&run_id).await;
    let (chunks, output) = world
        .agent(CountingModel::new(ASK_THEN_ANSWER))
        .recover_runs(askloop::Author::default())
        .await
        .unwrap()
        .remove(0)
        .output_with_chunks()
        .await;
    assert_eq!(output.status, RunStatus::Completed);
    let results = chunks
        .iter()
        .filter(|c| matches!(c.kind, ChunkKind::ToolResult(_)))
        .count();
    assert_eq!(results, 0, "the stored answer's result is not shown again");
    assert_eq!(types(&chunks).first(), Some(&"start"));
    assert_eq!(types(&chunks).last(), Some(&"finish"));
}

/// Approves a charge that waits for approval; the process that runs it
/// dies mid-tool, and another agent recovers the run. Returns (runs in the
/// dead process, runs in the recovering one, the recovered output, the
/// stored tool result, the stored run).
async fn die_mid_approved_tool(
    idempotent: bool,
) -> (usize, usize, askloop::StreamOutput, ToolContent, askloop::RunRecord) {
    let world = World::new();
    let store = Arc::clone(&world.store);
    let build = |runs: &Arc<AtomicUsize>, hang: bool| {
        Agent::builder("assistant")
            .model(CountingModel::new(CHARGE_THEN_REPLY))
            .tool(charge_tool_approved(Arc::clone(runs), hang, idempotent, true))
            .store(Arc::clone(&store))
            .clock(world.clock())
            .lease_duration(LEASE)
            .build()
            .unwrap()
    };
    let dead_runs = Arc::new(AtomicUsize::new(0));
    let dying = build(&dead_runs, true);
    let waiting = dying.generate("Charge me").await.unwrap();
    assert_eq!(waiting.status, RunStatus::Suspended);
    let run_id = waiting.run_id.clone();
    let stream = dying.approve_tool_call(ResumeOptions::run(&run_id)).await.unwrap();
    kill_when(stream, || dead_runs.load(Ordering::SeqCst) == 1).await;
    world.lease_runs_out(&run_id).await;

    let new_runs = Arc::new(AtomicUsize::new(0));
    let recovering = build(&new_runs, false);
    let mut streams = recovering.recover_runs(askloop::Author::default()).await.unwrap();
    assert_eq!(streams.len(), 1);
    let output = streams.remove(0).output().await;
    let messages = store.messages(&run_id).await.unwrap();
    let result = messages
        .iter()
        .find_map(|m| match m {
            Message::Tool(result) => Some(result.content.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(messages.len(), 4, "user, call, result, reply: {messages:?}");
    let run = store.get(&run_id).await.unwrap().unwrap();
    (
        dead_runs.load(Ordering::SeqCst),
        new_runs.load(Ordering::SeqCst),
        output,
        result,
        run,
    )
}

#[tokio::test]
async fn an_approved_tool_that_is_not_idempotent_interrupted_mid_run_is_neither_approved_nor_run_again() {
    let (dead, new, output, result, run) = die_mid_approved_tool(false).await;
    assert_eq!((dead, new), (1, 0), "the approved charge must never run twice");
    assert_eq!(
        output.status,
        RunStatus::Completed,
        "the run does not wait for a second approval"
    );
    let ToolContent::Text(text) = result else {
        panic!("{result:?}")
    };
    assert!(text.contains("interrupted"), "{text}");
    // The approval was stored with the claim, before the tool ran: once.
    let approvals = run
        .resolutions
        .iter()
        .filter(|r| r.kind == askloop::ResolutionKind::Approved)
        .count();
    assert_eq!(approvals, 1, "{:?}", run.resolutions);
    assert!(run.stored_calls().is_empty());
}

#[tokio::test]
async fn an_approved_idempotent_tool_interrupted_mid_run_is_run_again_without_asking_again() {
    let (dead, new, output, result, _) = die_mid_approved_tool(true).await;
    assert_eq!(output.status, RunStatus::Completed);
    assert_eq!(output.text, "Done: charged");
    assert_eq!(result, ToolContent::Text("charged".into()));
    // The approval was stored with the claim: the tool, which may run
    // twice, runs again without asking the person a second time.
    assert_eq!((dead, new), (1, 1));
}

#[tokio::test]
async fn approving_a_tool_that_must_not_run_twice_takes_no_more_writes_than_before() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = Agent::builder("assistant")
        .model(CountingModel::new(CHARGE_THEN_REPLY))
        .tool(charge_tool_approved(Arc::clone(&runs), false, false, true))
        .store(Arc::clone(&store))
        .build()
        .unwrap();
    let waiting = agent.generate("Charge me").await.unwrap();
    let before = store.get(&waiting.run_id).await.unwrap().unwrap();
    let output = agent
        .approve_tool_call(ResumeOptions::run(&waiting.run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(output.status, RunStatus::Completed);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let after = store.get(&waiting.run_id).await.unwrap().unwrap();
    // The claim (which carries the started mark and the approval), the
    // step's result, the model's reply: three writes, as without the mark.
    assert_eq!(after.version - before.version, 3);
    assert_eq!(after.resolutions.len(), 1, "{:?}", after.resolutions);
}

#[tokio::test]
async fn recover_runs_takes_over_every_stalled_run_of_its_agent_however_many_pages_they_take() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let dead = askloop::Lease::new("dead", Utc::now() - chrono::Duration::seconds(5));
    // 1,100 stalled runs of this agent among 1,100 of another: more than
    // two pages of either.
    for n in 0..2200 {
        let run = {
            let mut record = askloop::RunRecord::default().with_calls(RunStatus::Running, Vec::new());
            record.run_id = format!("r{n:04}");
            record.agent_id = if n % 2 == 0 { "assistant" } else { "other" }.to_owned();
            record.lease = Some(dead.clone());
            record.message_count = 1;
            record
        };
        store.create(&run, &[Message::user("Book a trip")]).await.unwrap();
    }
    let agent = agent(CountingModel::new(ASK_THEN_ANSWER), &store);
    let streams = agent.recover_runs(askloop::Author::default()).await.unwrap();
    assert_eq!(streams.len(), 1100);
    for stream in streams {
        assert_eq!(stream.output().await.status, RunStatus::Suspended);
    }
    let others = store.expired(Utc::now(), None, 5000).await.unwrap();
    assert_eq!(others.len(), 1100);
    assert!(others.iter().all(|r| r.agent_id == "other"));
    assert!(agent.recover_runs(askloop::Author::default()).await.unwrap().is_empty());
}

/// A charge of an amount, waiting for approval, that may run again; it
/// keeps the amounts it ran with and, in the process that is to die, never
/// returns.
fn amount_tool(amounts: Arc<std::sync::Mutex<Vec<serde_json::Value>>>, hang: bool) -> FunctionTool {
    FunctionTool::builder("charge")
        .description("Charges the card.")
        .input_schema(json!({"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}))
        .idempotent(true)
        .requires_approval(true)
        .execute(move |input: serde_json::Value, _ctx| {
            let amounts = Arc::clone(&amounts);
            async move {
                amounts.lock().unwrap().push(input["amount"].clone());
                if hang {
                    futures::future::pending::<()>().await;
                }
                Ok(ToolOutput::text(format!("charged {}", input["amount"])).into())
            }
        })
}

#[tokio::test]
async fn a_call_approved_with_edited_arguments_runs_again_after_a_crash_with_the_edited_ones() {
    let world = World::new();
    let store = Arc::clone(&world.store);
    let script = r#"{"turns": [
        {"toolCalls": [{"name": "charge", "args": {"amount": 500}}]},
        {"text": "Done: {{toolResults}}"}
    ]}"#;
    let build = |amounts: &Arc<std::sync::Mutex<Vec<serde_json::Value>>>, hang: bool| {
        Agent::builder("assistant")
            .model(CountingModel::new(script))
            .tool(amount_tool(Arc::clone(amounts), hang))
            .store(Arc::clone(&store))
            .clock(world.clock())
            .lease_duration(LEASE)
            .build()
            .unwrap()
    };
    let dead = Arc::new(std::sync::Mutex::new(Vec::new()));
    let dying = build(&dead, true);
    let run_id = dying.generate("Charge me").await.unwrap().run_id;
    let stream = dying
        .approve_tool_call_with(ResumeOptions::run(&run_id), json!({"amount": 50}))
        .await
        .unwrap();
    kill_when(stream, || dead.lock().unwrap().len() == 1).await;
    world.lease_runs_out(&run_id).await;

    let again = Arc::new(std::sync::Mutex::new(Vec::new()));
    let output = build(&again, false)
        .recover_runs(askloop::Author::default())
        .await
        .unwrap()
        .remove(0)
        .output()
        .await;
    assert_eq!(*dead.lock().unwrap(), [json!(50)]);
    assert_eq!(
        *again.lock().unwrap(),
        [json!(50)],
        "run again with the edited amount, never the model's"
    );
    assert_eq!(
        output.text,
        "Done: The user edited the arguments before approving; the call ran with {\"amount\":50}. It returned: charged 50"
    );
}

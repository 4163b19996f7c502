//! Questions and approvals with a time limit: resolved explicitly once it
//! passes, by whichever process looks next, never with an invented answer;
//! later answers are refused; every resolution records who made it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use askloop::{
    Agent, AskUser, Author, FunctionTool, Interface, ManualClock, MemoryStore, ResolutionKind, ResumeOptions, RunError,
    RunRecord, RunStatus, RunStore, ScriptedModel, ToolOutput,
};

const ASK: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which city?"}}]},
  {"text": "Model saw: {{toolResults}}"}
]}"#;

const DEPLOY: &str = r#"{"turns": [
  {"toolCalls": [{"name": "deploy", "args": {}}]},
  {"text": "Model saw: {{toolResults}}"}
]}"#;

/// A store and the clock that it and the test's agents read: the tests move
/// the clock past a time limit instead of waiting for it.
fn clocked_store() -> (ManualClock, Arc<dyn RunStore>) {
    let clock = ManualClock::starting_at("2026-12-04T10:00:00Z".parse().unwrap());
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    (clock, store)
}

fn asking_agent(store: Arc<dyn RunStore>, clock: &ManualClock, limit: Option<Duration>) -> Agent {
    let mut builder = Agent::builder("asker")
        .model(Arc::new(ScriptedModel::from_json("script", ASK).unwrap()))
        .tool(AskUser::new())
        .store(store)
        .clock(Arc::new(clock.clone()));
    if let Some(limit) = limit {
        builder = builder.time_limit_for("ask_user", limit);
    }
    builder.build().unwrap()
}

/// Moves `clock` just past the run's earliest time limit (read from the
/// store: the clock moves to that instant, not by a guess).
fn past_the_limit(run: &RunRecord, clock: &ManualClock) {
    let at = run
        .stored_calls()
        .iter()
        .filter_map(|p| p.expires_at)
        .min()
        .expect("a time limit");
    clock.set(at + chrono::Duration::milliseconds(1));
}

#[tokio::test]
async fn a_question_expires_while_no_process_runs_and_the_next_one_resolves_it_with_the_expiry_text() {
    let (clock, store) = clocked_store();
    let run_id = {
        // The process that asked: it suspends and goes away.
        let asker = asking_agent(store.clone(), &clock, Some(Duration::from_secs(600)));
        let output = asker.stream("plan").await.unwrap().output().await;
        assert_eq!(output.status, RunStatus::Suspended);
        output.run_id
    };
    let run = store.get(&run_id).await.unwrap().unwrap();
    let expires_at = run.stored_calls()[0].expires_at.expect("the call has a time limit");
    assert_eq!(
        run.stored_calls()[0].suspend_payload.as_ref().unwrap()["metadata"]["expiresAt"],
        expires_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    );
    // Not expired yet: nothing to do.
    let later = asking_agent(store.clone(), &clock, None);
    assert!(later.expire_runs(Author::via(Interface::Cli)).await.unwrap().is_empty());

    past_the_limit(&run, &clock);
    let streams = later.expire_runs(Author::named(Interface::Cli, "alice")).await.unwrap();
    assert_eq!(streams.len(), 1);
    let mut outputs = Vec::new();
    for stream in streams {
        outputs.push(stream.output().await);
    }
    let output = outputs.pop().unwrap();
    assert_eq!(output.status, RunStatus::Completed);
    assert!(
        output
            .text
            .starts_with("Model saw: No answer came within the time limit"),
        "{}",
        output.text
    );

    let run = store.get(&run_id).await.unwrap().unwrap();
    let resolution = run
        .resolution_of(&run.resolutions[0].tool_call_id.clone().unwrap())
        .unwrap();
    assert_eq!(resolution.kind, ResolutionKind::Expired);
    assert_eq!(resolution.author, Author::named(Interface::Cli, "alice"));

    // A late answer is refused, saying it expired and when.
    let call_id = resolution.tool_call_id.clone().unwrap();
    let late = later
        .resume_stream("Paris", ResumeOptions::call(&run_id, &call_id))
        .await;
    let Err(err @ RunError::Expired { .. }) = late else {
        panic!(
            "expected the late answer refused as expired, got {late:?}",
            late = late.map(|_| ())
        )
    };
    assert!(err.to_string().contains("expired at"), "{err}");
}

/// The `metadata.expiresAt` of a run's only pending call, as shown to
/// clients, and the call's id.
fn shown_limit(run: &RunRecord) -> (String, String) {
    let call = &run.stored_calls()[0];
    let shown = call.suspend_payload.as_ref().unwrap()["metadata"]["expiresAt"]
        .as_str()
        .unwrap()
        .to_owned();
    (call.tool_call_id.clone(), shown)
}

#[tokio::test]
async fn late_answers_after_the_sweep_naming_the_call_or_none_are_refused_as_expired_at_the_shown_limit() {
    let (clock, store) = clocked_store();
    let agent = asking_agent(store.clone(), &clock, Some(Duration::from_secs(600)));
    let run_id = agent.stream("plan").await.unwrap().output().await.run_id;
    let run = store.get(&run_id).await.unwrap().unwrap();
    let (call_id, shown) = shown_limit(&run);
    past_the_limit(&run, &clock);
    for stream in agent.expire_runs(Author::via(Interface::Server)).await.unwrap() {
        assert_eq!(stream.output().await.status, RunStatus::Completed);
    }
    let swept = store.get(&run_id).await.unwrap().unwrap();

    let late = [
        (
            "answer naming the call",
            agent
                .resume_stream("Paris", ResumeOptions::call(&run_id, &call_id))
                .await,
        ),
        (
            "answer naming none",
            agent.resume_stream("Paris", ResumeOptions::run(&run_id)).await,
        ),
        (
            "decline naming none",
            agent.decline_tool_call(ResumeOptions::run(&run_id)).await,
        ),
        (
            "approve naming none",
            agent.approve_tool_call(ResumeOptions::run(&run_id)).await,
        ),
    ];
    for (what, result) in late {
        let err = match result {
            Err(err @ RunError::Expired { .. }) => err,
            Err(other) => panic!("{what}: expected Expired, got {other}"),
            Ok(_) => panic!("{what}: accepted"),
        };
        let RunError::Expired { tool_call_id, .. } = &err else {
            unreachable!()
        };
        assert_eq!(tool_call_id, &call_id, "{what}");
        assert!(
            err.to_string().contains(&format!("expired at {shown}")),
            "{what}: {err} (shown: {shown})"
        );
    }
    let after = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!(after.version, swept.version, "nothing was written");
}

#[tokio::test]
async fn an_answer_after_the_limit_but_before_any_sweep_is_refused_and_the_question_stays_for_expiry() {
    let (clock, store) = clocked_store();
    let agent = asking_agent(store.clone(), &clock, Some(Duration::from_secs(600)));
    let run_id = agent.stream("plan").await.unwrap().output().await.run_id;
    let run = store.get(&run_id).await.unwrap().unwrap();
    past_the_limit(&run, &clock);
    let late = agent.resume_stream("Paris", ResumeOptions::run(&run_id)).await;
    assert!(matches!(late, Err(RunError::Expired { .. })), "{:?}", late.map(|_| ()));
    let unchanged = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!(
        (unchanged.status(), unchanged.version),
        (RunStatus::Suspended, run.version)
    );
}

#[tokio::test]
async fn an_answer_within_the_limit_is_taken_and_recorded_with_its_author() {
    let (clock, store) = clocked_store();
    let agent = asking_agent(store.clone(), &clock, Some(Duration::from_secs(3600)));
    let run_id = agent.stream("plan").await.unwrap().output().await.run_id;
    let output = agent
        .resume_stream(
            "Paris",
            ResumeOptions::run(&run_id).by(Author::named(Interface::Http, "ops")),
        )
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(output.status, RunStatus::Completed);
    let run = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!(run.resolutions.len(), 1);
    assert_eq!(run.resolutions[0].kind, ResolutionKind::Answered);
    assert_eq!(run.resolutions[0].author, Author::named(Interface::Http, "ops"));
    assert!(agent.expire_runs(Author::default()).await.unwrap().is_empty());
}

#[tokio::test]
async fn an_approval_that_expires_counts_as_declined_and_the_tool_never_runs() {
    let (clock, store) = clocked_store();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let deploy = FunctionTool::builder("deploy")
        .description("Deploys.")
        .input_schema(serde_json::json!({"type": "object"}))
        .requires_approval(true)
        .execute(move |_: serde_json::Value, _ctx| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(ToolOutput::text("deployed").into())
            }
        });
    let agent = Agent::builder("deployer")
        .model(Arc::new(ScriptedModel::from_json("script", DEPLOY).unwrap()))
        .tool(deploy)
        .store(store.clone())
        .clock(Arc::new(clock.clone()))
        .time_limit(Duration::from_secs(600))
        .build()
        .unwrap();
    let run_id = agent.stream("ship it").await.unwrap().output().await.run_id;
    let run = store.get(&run_id).await.unwrap().unwrap();
    past_the_limit(&run, &clock);
    let mut streams = agent.expire_runs(Author::via(Interface::Server)).await.unwrap();
    let output = streams.pop().unwrap().output().await;
    assert_eq!(output.status, RunStatus::Completed);
    assert!(
        output
            .text
            .contains("declined: no one approved it within the time limit"),
        "{}",
        output.text
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let run = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!(run.resolutions[0].kind, ResolutionKind::Expired);
    let approve = agent
        .approve_tool_call(ResumeOptions::call_or_run(
            &run_id,
            run.resolutions[0].tool_call_id.as_deref(),
        ))
        .await;
    assert!(
        matches!(approve, Err(RunError::Expired { .. })),
        "{:?}",
        approve.map(|_| ())
    );
}

#[tokio::test]
async fn a_cancel_is_recorded_with_its_author() {
    let (clock, store) = clocked_store();
    let agent = asking_agent(store.clone(), &clock, None);
    let run_id = agent.stream("plan").await.unwrap().output().await.run_id;
    agent
        .cancel_run(&run_id, Author::named(Interface::Page, "bob"))
        .await
        .unwrap();
    let run = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!(run.resolutions.len(), 1);
    assert_eq!(run.resolutions[0].kind, ResolutionKind::Cancelled);
    assert_eq!(run.resolutions[0].tool_call_id, None);
    assert_eq!(run.resolutions[0].author, Author::named(Interface::Page, "bob"));
}

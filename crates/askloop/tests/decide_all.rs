//! Decisions for several pending calls of a run applied as one
//! (`Agent::decide_all`): checked together, one claim, the model called once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use askloop::{
    Agent, AskUser, Author, CallDecision, FunctionTool, Interface, ResolutionKind, ResumeOptions, RunError, RunStatus,
    RunStore, ToolOutput,
};
use common::{CountingModel, FlakyStore, flaky_store, run};
use serde_json::{Value, json};

/// Two deploys that wait for approval and a question, in one turn; then a
/// reply that repeats what each call returned.
const THREE_CALLS: &str = r#"{"turns": [
  {"toolCalls": [
    {"id": "staging", "name": "deploy", "args": {"env": "staging"}},
    {"id": "prod", "name": "deploy", "args": {"env": "prod"}},
    {"id": "when", "name": "ask_user", "args": {"question": "When?"}}
  ]},
  {"text": "Done: {{toolResults}}"}
]}"#;

struct World {
    agent: Agent,
    model: Arc<CountingModel>,
    store: Arc<FlakyStore>,
    deploys: Arc<AtomicUsize>,
    run_id: String,
}

async fn three_waiting_calls() -> World {
    let deploys = Arc::new(AtomicUsize::new(0));
    let deploy = {
        let deploys = deploys.clone();
        FunctionTool::builder("deploy")
            .input_schema(json!({"type": "object", "properties": {"env": {"type": "string"}}}))
            .requires_approval(true)
            .execute(move |args: Value, _ctx| {
                let deploys = deploys.clone();
                async move {
                    deploys.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolOutput::text(format!("deployed {}", args["env"].as_str().unwrap_or("?"))).into())
                }
            })
    };
    let model = CountingModel::new(THREE_CALLS);
    let store = flaky_store();
    let agent = Agent::builder("ops")
        .model(model.clone())
        .tool(deploy)
        .tool(AskUser::new())
        .store(store.clone())
        .build()
        .unwrap();
    let (_, output) = run(&agent, "Deploy everywhere").await;
    assert_eq!(output.pending.len(), 3);
    World {
        agent,
        model,
        store,
        deploys,
        run_id: output.run_id,
    }
}

fn carol() -> Author {
    Author::named(Interface::Page, "carol")
}

#[tokio::test]
async fn every_call_of_a_step_decided_at_once_runs_under_one_claim_and_calls_the_model_once() {
    let w = three_waiting_calls().await;
    let updates_before = w.store.layer().updates.load(Ordering::SeqCst);
    let decisions = vec![
        ("when".to_owned(), CallDecision::Answer(json!("tonight"))),
        ("prod".to_owned(), CallDecision::Decline(Some("not on a Friday".into()))),
        ("staging".to_owned(), CallDecision::Approve),
    ];
    let out = w
        .agent
        .decide_all(&w.run_id, decisions, carol())
        .await
        .unwrap()
        .output()
        .await;

    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(w.deploys.load(Ordering::SeqCst), 1, "only the approved deploy ran");
    assert_eq!(
        w.model.calls(),
        2,
        "the model was called once after the three decisions"
    );
    assert_eq!(
        out.text, "Done: deployed staging; not on a Friday; User answered: tonight",
        "the results in call order"
    );
    // The claim (marking the approved call started and recording it), the
    // step with the other two decisions and the results, the reply.
    assert_eq!(w.store.layer().claims.load(Ordering::SeqCst), 0);
    assert_eq!(w.store.layer().updates.load(Ordering::SeqCst) - updates_before, 3);
    let stored = w.store.get(&w.run_id).await.unwrap().unwrap();
    let recorded: Vec<_> = stored
        .resolutions
        .iter()
        .map(|r| (r.tool_call_id.as_deref().unwrap(), r.kind, r.author.by.as_deref()))
        .collect();
    assert_eq!(
        recorded,
        [
            ("staging", ResolutionKind::Approved, Some("carol")),
            ("when", ResolutionKind::Answered, Some("carol")),
            ("prod", ResolutionKind::Denied, Some("carol")),
        ],
        "each decision recorded once, with who made it"
    );
}

#[tokio::test]
async fn deciding_some_calls_at_once_leaves_the_run_waiting_on_the_others() {
    let w = three_waiting_calls().await;
    let decisions = vec![
        ("staging".to_owned(), CallDecision::Approve),
        ("prod".to_owned(), CallDecision::Approve),
    ];
    let out = w
        .agent
        .decide_all(&w.run_id, decisions, carol())
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(out.status, RunStatus::Suspended);
    assert_eq!(w.deploys.load(Ordering::SeqCst), 2);
    assert_eq!(w.model.calls(), 1, "the question still waits: no model call");
    let ids: Vec<_> = out.pending.iter().map(|p| p.tool_call_id.as_str()).collect();
    assert_eq!(ids, ["when"]);

    let done = w
        .agent
        .resume_stream("now", ResumeOptions::call(&w.run_id, "when"))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(done.text, "Done: deployed staging; deployed prod; User answered: now");
    assert_eq!(w.model.calls(), 2);
}

#[tokio::test]
async fn one_decision_that_does_not_fit_refuses_them_all_and_nothing_runs() {
    let w = three_waiting_calls().await;
    let version = w.store.get(&w.run_id).await.unwrap().unwrap().version;
    // The decisions, and what their refusal must be.
    type Case = (Vec<(String, CallDecision)>, fn(&RunError) -> bool);
    let cases: Vec<Case> = vec![
        (
            vec![
                ("staging".to_owned(), CallDecision::Approve),
                ("when".to_owned(), CallDecision::Answer(json!("  "))),
            ],
            |e| matches!(e, RunError::InvalidAnswer { tool_call_id, .. } if tool_call_id == "when"),
        ),
        (
            vec![
                ("staging".to_owned(), CallDecision::Approve),
                ("when".to_owned(), CallDecision::Approve),
            ],
            |e| matches!(e, RunError::WrongPendingKind { tool_call_id, .. } if tool_call_id == "when"),
        ),
        (
            vec![
                ("staging".to_owned(), CallDecision::Approve),
                ("nope".to_owned(), CallDecision::Approve),
            ],
            |e| matches!(e, RunError::ToolCallNotPending { tool_call_id, .. } if tool_call_id == "nope"),
        ),
        (
            vec![
                ("staging".to_owned(), CallDecision::Approve),
                ("staging".to_owned(), CallDecision::Decline(None)),
            ],
            |e| matches!(e, RunError::InvalidInput(m) if m.contains("two decisions")),
        ),
        (
            Vec::new(),
            |e| matches!(e, RunError::InvalidInput(m) if m.contains("no decisions")),
        ),
    ];
    for (decisions, expected) in cases {
        let err = w.agent.decide_all(&w.run_id, decisions, carol()).await.unwrap_err();
        assert!(expected(&err), "unexpected refusal: {err}");
    }
    assert_eq!(w.deploys.load(Ordering::SeqCst), 0, "nothing ran");
    let stored = w.store.get(&w.run_id).await.unwrap().unwrap();
    assert_eq!(
        (stored.status(), stored.version, stored.stored_calls().len()),
        (RunStatus::Suspended, version, 3),
        "nothing was written"
    );
}

#[tokio::test]
async fn two_people_deciding_the_same_call_at_once_one_alone_and_one_with_others_exactly_one_wins() {
    let w = three_waiting_calls().await;
    let alone = w.agent.approve_tool_call(ResumeOptions::call(&w.run_id, "staging"));
    let together = w.agent.decide_all(
        &w.run_id,
        vec![
            ("staging".to_owned(), CallDecision::Decline(Some("no".into()))),
            ("prod".to_owned(), CallDecision::Approve),
        ],
        carol(),
    );
    // Each side drives its stream to the end before the other's result is
    // looked at: a winner's tools have run by then.
    let alone = async { Ok::<_, RunError>(alone.await?.output().await) };
    let together = async { Ok::<_, RunError>(together.await?.output().await) };
    let (alone, together) = tokio::join!(alone, together);
    let won = [alone.is_ok(), together.is_ok()];
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "exactly one wins: {won:?}");
    let lost = [alone.err(), together.err()].into_iter().flatten().next().unwrap();
    assert!(
        matches!(
            lost,
            RunError::Conflict { .. } | RunError::ToolCallNotPending { .. } | RunError::AlreadyDecided { .. }
        ),
        "{lost}"
    );
    let stored = w.store.get(&w.run_id).await.unwrap().unwrap();
    let staging: Vec<_> = stored
        .resolutions
        .iter()
        .filter(|r| r.tool_call_id.as_deref() == Some("staging"))
        .collect();
    assert_eq!(staging.len(), 1, "the call was decided once: {staging:?}");
}

#[tokio::test]
async fn a_decision_sent_again_is_told_as_made_already_and_checked_decisions_write_nothing() {
    let w = three_waiting_calls().await;
    let staging = || vec![("staging".to_owned(), CallDecision::Approve)];
    // Decided once: staging runs, and the run waits on the other two.
    let first = w.agent.decide_all(&w.run_id, staging(), carol()).await.unwrap();
    assert_eq!(first.output().await.status, RunStatus::Suspended);
    let run = w.store.get(&w.run_id).await.unwrap().unwrap();
    let (updates, version) = (w.store.layer().updates.load(Ordering::SeqCst), run.version);

    // The same decision again changes nothing and says how it was made.
    let again = w.agent.decide_all(&w.run_id, staging(), carol()).await.unwrap_err();
    assert!(
        matches!(&again, RunError::AlreadyDecided { tool_call_id, decided: ResolutionKind::Approved, .. } if tool_call_id == "staging"),
        "{again}"
    );
    // Checked on the run as read: the repeat is named, the decision for
    // a call still waiting fits, a contrary one is refused; nothing is written.
    let checked = w
        .agent
        .check_decisions(
            &run,
            &[
                ("staging".to_owned(), CallDecision::Approve),
                ("prod".to_owned(), CallDecision::Decline(None)),
            ],
        )
        .unwrap();
    assert_eq!(checked, [("staging".to_owned(), ResolutionKind::Approved)]);
    let contrary = w
        .agent
        .check_decisions(&run, &[("staging".to_owned(), CallDecision::Decline(None))])
        .unwrap_err();
    assert!(matches!(contrary, RunError::AlreadyDecided { .. }), "{contrary}");
    assert_eq!(w.store.layer().updates.load(Ordering::SeqCst), updates);
    assert_eq!(w.store.get(&w.run_id).await.unwrap().unwrap().version, version);
    assert_eq!(w.deploys.load(Ordering::SeqCst), 1, "staging ran once");
}

//! Notifications of questions: an agent with subscriptions writes one
//! outbox message per event and subscription, in the same store write as
//! the suspension or resolution it announces; an agent without any writes
//! none.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use askloop::{
    Agent, AskUser, Author, DeliveryState, EventType, FunctionTool, Interface, ManualClock, MemoryStore, ResumeOptions,
    RunStatus, RunStore, ScriptedModel, Subscription, ToolOutput,
};

const ASK: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which city?"}}]},
  {"text": "Model saw: {{toolResults}}"}
]}"#;

const TWO_DEPLOYS: &str = r#"{"turns": [
  {"toolCalls": [{"name": "deploy", "args": {"env": "staging"}}, {"name": "deploy", "args": {"env": "prod"}}]},
  {"text": "Model saw: {{toolResults}}"}
]}"#;

fn asker(store: Arc<dyn RunStore>, subscriptions: Vec<Subscription>) -> Agent {
    let mut builder = Agent::builder("asker")
        .model(Arc::new(ScriptedModel::from_json("script", ASK).unwrap()))
        .tool(AskUser::new())
        .store(store);
    for subscription in subscriptions {
        builder = builder.notify(subscription);
    }
    builder.build().unwrap()
}

/// The events stored for a run, in order, with their destinations.
async fn events(store: &Arc<dyn RunStore>, run_id: &str) -> Vec<(String, String)> {
    store
        .deliveries(run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.message.event.as_str().to_owned(), d.message.destination))
        .collect()
}

#[tokio::test]
async fn a_question_raised_and_answered_is_announced_to_each_subscription_that_wants_it() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let agent = asker(
        store.clone(),
        vec![
            Subscription::new("all", EventType::ALL),
            Subscription::new("answers", [EventType::QuestionAnswered]),
        ],
    );
    let output = agent.stream("plan").await.unwrap().output().await;
    assert_eq!(output.status, RunStatus::Suspended);
    let run_id = output.run_id;
    assert_eq!(
        events(&store, &run_id).await,
        [("question.raised".to_owned(), "all".to_owned())],
        "the suspension's write raised it"
    );
    let raised = &store.deliveries(&run_id).await.unwrap()[0];
    assert_eq!(raised.state, DeliveryState::Pending);
    assert_eq!(
        raised.message.payload["data"]["suspendPayload"]["question"],
        "Which city?"
    );
    assert_eq!(raised.message.payload["data"]["agentId"], "asker");

    // The answer is announced to both subscriptions, with who gave it.
    let call_id = store.get(&run_id).await.unwrap().unwrap().stored_calls()[0]
        .tool_call_id
        .clone();
    let output = agent
        .resume_stream(
            "Paris",
            ResumeOptions::call(&run_id, &call_id).by(Author::named(Interface::Http, "ops")),
        )
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(output.status, RunStatus::Completed);
    let stored = store.deliveries(&run_id).await.unwrap();
    let answered: Vec<_> = stored
        .iter()
        .filter(|d| d.message.event == EventType::QuestionAnswered)
        .collect();
    let mut destinations: Vec<&str> = answered.iter().map(|d| d.message.destination.as_str()).collect();
    destinations.sort();
    assert_eq!(destinations, ["all", "answers"]);
    assert_ne!(
        answered[0].message.id, answered[1].message.id,
        "each delivery has its own id"
    );
    let resolution = &answered[0].message.payload["data"]["resolution"];
    assert_eq!(
        (resolution["kind"].as_str(), resolution["by"].as_str()),
        (Some("answered"), Some("ops"))
    );
    assert_eq!(
        stored.len(),
        3,
        "raised once, answered once per subscription: {stored:?}"
    );
}

#[tokio::test]
async fn an_agent_without_subscriptions_writes_no_notification() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let agent = asker(store.clone(), Vec::new());
    let run_id = agent.stream("plan").await.unwrap().output().await.run_id;
    let call_id = store.get(&run_id).await.unwrap().unwrap().stored_calls()[0]
        .tool_call_id
        .clone();
    agent
        .resume_stream("Paris", ResumeOptions::call(&run_id, &call_id))
        .await
        .unwrap()
        .output()
        .await;
    assert!(store.deliveries(&run_id).await.unwrap().is_empty());
}

#[tokio::test]
async fn approvals_announce_raised_approved_declined_and_expired() {
    // The store and the agent with a time limit read one clock, moved past
    // the limit instead of waited for.
    let clock = ManualClock::starting_now();
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let deploy = FunctionTool::builder("deploy")
        .description("Deploys.")
        .input_schema(serde_json::json!({"type": "object"}))
        .requires_approval(true)
        .execute(|_: serde_json::Value, _ctx| async move { Ok(ToolOutput::text("deployed").into()) });
    let agent = Agent::builder("deployer")
        .model(Arc::new(ScriptedModel::from_json("script", TWO_DEPLOYS).unwrap()))
        .tool(deploy)
        .store(store.clone())
        .notify(Subscription::new("hook", EventType::ALL))
        .build()
        .unwrap();
    let run_id = agent.stream("ship it").await.unwrap().output().await.run_id;
    let run = store.get(&run_id).await.unwrap().unwrap();
    let (first, second) = (
        run.stored_calls()[0].tool_call_id.clone(),
        run.stored_calls()[1].tool_call_id.clone(),
    );
    let raised = store.deliveries(&run_id).await.unwrap();
    assert_eq!(raised.len(), 2, "one question.raised per waiting call");
    for (delivery, call) in raised.iter().zip([&first, &second]) {
        assert_eq!(delivery.message.event, EventType::QuestionRaised);
        assert_eq!(delivery.message.payload["data"]["kind"], "approval");
        assert_eq!(delivery.message.payload["data"]["toolCallId"], call.as_str());
    }

    agent
        .approve_tool_call(ResumeOptions::call(&run_id, &first))
        .await
        .unwrap()
        .output()
        .await;
    agent
        .decline_tool_call(ResumeOptions::call(&run_id, &second).with_reason(Some("not today".into())))
        .await
        .unwrap()
        .output()
        .await;
    let kinds: Vec<(String, String)> = store
        .deliveries(&run_id)
        .await
        .unwrap()
        .into_iter()
        .skip(2)
        .map(|d| {
            (
                d.message.event.as_str().to_owned(),
                d.message.payload["data"]["toolCallId"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("question.approved".to_owned(), first.clone()),
            ("question.declined".to_owned(), second.clone())
        ]
    );

    // An approval that expires is announced as expired.
    let agent = Agent::builder("deployer")
        .model(Arc::new(ScriptedModel::from_json("script", TWO_DEPLOYS).unwrap()))
        .tool(
            FunctionTool::builder("deploy")
                .description("Deploys.")
                .input_schema(serde_json::json!({"type": "object"}))
                .requires_approval(true)
                .execute(|_: serde_json::Value, _ctx| async move { Ok(ToolOutput::text("deployed").into()) }),
        )
        .store(store.clone())
        .clock(Arc::new(clock.clone()))
        .time_limit(Duration::from_secs(600))
        .notify(Subscription::new("hook", [EventType::QuestionExpired]))
        .build()
        .unwrap();
    let run_id = agent.stream("ship it").await.unwrap().output().await.run_id;
    let run = store.get(&run_id).await.unwrap().unwrap();
    let at = run.stored_calls().iter().filter_map(|p| p.expires_at).min().unwrap();
    clock.set(at + chrono::Duration::milliseconds(1));
    for stream in agent.expire_runs(Author::via(Interface::Server)).await.unwrap() {
        stream.output().await;
    }
    let expired = events(&store, &run_id).await;
    assert_eq!(
        expired,
        [
            ("question.expired".to_owned(), "hook".to_owned()),
            ("question.expired".to_owned(), "hook".to_owned())
        ]
    );
}

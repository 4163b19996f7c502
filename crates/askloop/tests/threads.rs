//! Runs on stored threads: a run starts from the thread's last messages,
//! appends its own, and a new message supersedes a question the thread
//! still waits on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};

use askloop::{
    Agent, AskUser, Author, Interface, MemoryStore, Message, Model, ModelError, ModelRequest, ModelStream,
    ResolutionKind, ResumeOptions, RunError, RunStatus, RunStore, ScriptedModel, StoreError, StreamOptions, ThreadKey,
    ThreadOptions, ToolContent,
};
use async_trait::async_trait;
use common::bare_store;
use serde_json::json;

/// A scripted model that keeps what it was given each time.
#[derive(Debug)]
struct Recording {
    inner: ScriptedModel,
    seen: Mutex<Vec<Vec<Message>>>,
}

impl Recording {
    fn new(script: &str) -> Arc<Self> {
        Arc::new(Recording {
            inner: ScriptedModel::from_json("threads", script).unwrap(),
            seen: Mutex::new(Vec::new()),
        })
    }

    fn last(&self) -> Vec<Message> {
        self.seen.lock().unwrap().last().cloned().unwrap()
    }
}

#[async_trait]
impl Model for Recording {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        self.seen.lock().unwrap().push(request.messages.to_vec());
        self.inner.stream(request).await
    }
}

/// Asks which environment, deploys; asks again, deploys again.
const TWICE: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?"}}]},
  {"text": "Deploying to {{toolResults}}."},
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?"}}]},
  {"text": "Deploying again to {{toolResults}}."}
]}"#;

fn agent(model: Arc<Recording>, store: Arc<dyn RunStore>) -> Agent {
    Agent::builder("assistant")
        .instructions("Ask first.")
        .model(model)
        .tool(AskUser::new())
        .store(store)
        .build()
        .unwrap()
}

/// The recording model, a memory store and the agent on them.
fn setup() -> (Arc<Recording>, Arc<MemoryStore>, Agent) {
    let model = Recording::new(TWICE);
    let store = Arc::new(MemoryStore::new());
    let agent = agent(model.clone(), store.clone());
    (model, store, agent)
}

/// The first message of a conversation on `thread`, to its question.
async fn ask(agent: &Agent, thread: &str) -> askloop::StreamOutput {
    agent
        .stream_with("Deploy the app.", on(thread))
        .await
        .unwrap()
        .output()
        .await
}

fn on(thread: &str) -> StreamOptions {
    StreamOptions::default().on_thread(ThreadOptions::new("ana", thread))
}

fn texts(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| match m {
            Message::User { content } => format!("user: {content}"),
            Message::Assistant { content, tool_calls } if tool_calls.is_empty() => format!("assistant: {content}"),
            Message::Assistant { tool_calls, .. } => format!("assistant calls {}", tool_calls[0].id),
            Message::Tool(result) => format!("tool {}: {}", result.tool_call_id, result.content.to_model_text()),
            other => format!("{other:?}"),
        })
        .collect()
}

async fn answer(agent: &Agent, run_id: &str, text: &str) -> askloop::StreamOutput {
    agent
        .resume_stream(json!(text), ResumeOptions::run(run_id))
        .await
        .unwrap()
        .output()
        .await
}

#[tokio::test]
async fn a_second_run_sent_only_its_new_message_is_given_the_first_exchange_from_the_thread() {
    let (model, store, agent) = setup();
    let first = ask(&agent, "t1").await;
    assert_eq!(first.status, RunStatus::Suspended);
    let done = answer(&agent, &first.run_id, "staging").await;
    assert_eq!(done.status, RunStatus::Completed);

    let second = agent.stream_with("Now again.", on("t1")).await.unwrap().output().await;
    assert_eq!(second.status, RunStatus::Suspended);
    assert_eq!(
        texts(&model.last()),
        vec![
            "user: Deploy the app.",
            "assistant calls call_1_1",
            "tool call_1_1: User answered: staging",
            "assistant: Deploying to User answered: staging.",
            "user: Now again.",
        ],
        "the first exchange, its call paired with its answer, then the new message"
    );
    let thread = store.thread_store().unwrap();
    let stored = thread
        .thread_messages(&ThreadKey::new("ana", "t1"), 0, 100)
        .await
        .unwrap();
    assert_eq!(stored.len(), 6, "both runs' own messages, each once");
    assert_eq!(stored[4].run_id, second.run_id);
    let run = store.get(&second.run_id).await.unwrap().unwrap();
    assert_eq!(run.memory.as_ref().unwrap().context, 4);
    assert_eq!(run.schema_version(), 3);
}

#[tokio::test]
async fn last_messages_bounds_the_context_and_a_window_never_starts_with_a_result() {
    let (model, _store, agent) = setup();
    let first = ask(&agent, "t1").await;
    answer(&agent, &first.run_id, "staging").await;
    // The thread: user, call, result, text. The last two are the result and
    // the text: the result's call is not in the window, so it is left out.
    let options = StreamOptions::default().on_thread(ThreadOptions::new("ana", "t1").last_messages(2));
    agent.stream_with("Now again.", options).await.unwrap().output().await;
    assert_eq!(
        texts(&model.last()),
        vec!["assistant: Deploying to User answered: staging.", "user: Now again."]
    );
}

#[tokio::test]
async fn a_new_message_supersedes_the_waiting_question_and_a_late_answer_is_told_so() {
    let (model, store, agent) = setup();
    let first = ask(&agent, "t1").await;
    assert_eq!(first.status, RunStatus::Suspended);

    let ana = Author::named(Interface::Http, "ana");
    let options = StreamOptions::default().on_thread(ThreadOptions::new("ana", "t1").by(ana.clone()));
    let second = agent
        .stream_with("Never mind, do this.", options)
        .await
        .unwrap()
        .output()
        .await;
    // The script's next turn (after one assistant message) is text.
    assert_eq!(
        second.status,
        RunStatus::Completed,
        "the new run goes on from the new message"
    );
    assert_eq!(
        model.seen.lock().unwrap().len(),
        2,
        "the old run called the model no more"
    );

    let old = store.get(&first.run_id).await.unwrap().unwrap();
    assert_eq!(old.status(), RunStatus::Cancelled);
    assert!(old.stored_calls().is_empty());
    let resolution = old.resolutions.last().unwrap();
    assert_eq!(resolution.kind, ResolutionKind::Superseded);
    assert_eq!(resolution.tool_call_id.as_deref(), Some("call_1_1"));
    assert_eq!(resolution.author, ana);

    let given = model.last();
    assert_eq!(given.len(), 4);
    assert_eq!(
        texts(&given)[..2],
        ["user: Deploy the app.", "assistant calls call_1_1"]
    );
    let Message::Tool(result) = &given[2] else {
        panic!("the call is followed by its result: {given:?}")
    };
    assert_eq!(result.tool_call_id, "call_1_1");
    assert!(result.is_error);
    let ToolContent::Text(text) = &result.content else {
        panic!("{result:?}")
    };
    assert!(text.contains("new message instead of answering"), "{text}");
    assert_eq!(texts(&given)[3], "user: Never mind, do this.");

    let late = agent
        .resume_stream(json!("staging"), ResumeOptions::run(&first.run_id))
        .await;
    assert!(
        matches!(&late, Err(RunError::Superseded { run_id }) if *run_id == first.run_id),
        "{late:?}"
    );
    let stored = store
        .thread_store()
        .unwrap()
        .thread_messages(&ThreadKey::new("ana", "t1"), 0, 100)
        .await
        .unwrap();
    assert!(
        matches!(&stored[2].message, Message::Tool(r) if r.tool_call_id == "call_1_1"),
        "the thread holds the call's result too: {stored:?}"
    );
}

#[tokio::test]
async fn an_answer_that_won_the_race_is_not_superseded() {
    let (_model, store, agent) = setup();
    let first = ask(&agent, "t1").await;
    answer(&agent, &first.run_id, "staging").await;
    agent.stream_with("Now again.", on("t1")).await.unwrap().output().await;
    let old = store.get(&first.run_id).await.unwrap().unwrap();
    assert_eq!(old.status(), RunStatus::Completed);
    assert!(
        old.resolutions.iter().all(|r| r.kind != ResolutionKind::Superseded),
        "{:?}",
        old.resolutions
    );
}

#[tokio::test]
async fn another_resources_thread_of_the_same_id_is_another_conversation() {
    let (model, store, agent) = setup();
    let first = ask(&agent, "t1").await;
    answer(&agent, &first.run_id, "staging").await;
    let bo = StreamOptions::default().on_thread(ThreadOptions::new("bo", "t1"));
    let other = agent.stream_with("Hello.", bo).await.unwrap().output().await;
    assert_eq!(texts(&model.last()), vec!["user: Hello."]);
    assert_eq!(
        store.get(&first.run_id).await.unwrap().unwrap().status(),
        RunStatus::Completed
    );
    assert_eq!(other.status, RunStatus::Suspended);
}

#[tokio::test]
async fn a_store_without_threads_and_ids_outside_the_rule_are_refused_before_anything_is_stored() {
    let model = Recording::new(TWICE);
    let plain = bare_store();
    let agent_without = agent(model.clone(), plain.clone());
    let err = agent_without.stream_with("Hi", on("t1")).await.unwrap_err();
    assert!(matches!(err, RunError::Store(StoreError::NoThreads)), "{err:?}");

    let store = Arc::new(MemoryStore::new());
    let agent = agent(model, store.clone());
    for (resource, thread) in [("", "t1"), ("ana", ".."), (" ana", "t1")] {
        let options = StreamOptions::default().on_thread(ThreadOptions::new(resource, thread));
        let err = agent.stream_with("Hi", options).await.unwrap_err();
        assert!(
            matches!(err, RunError::InvalidId(_)),
            "{resource:?} {thread:?}: {err:?}"
        );
    }
    assert_eq!(store.list(&Default::default()).await.unwrap(), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_an_answer_and_a_new_message_racing_exactly_one_resolves_the_question_and_the_loser_is_told() {
    for round in 0..20 {
        let (_model, store, agent) = setup();
        let thread = format!("race-{round}");
        let first = ask(&agent, &thread).await;
        let (answered, _) = tokio::join!(
            async {
                match agent
                    .resume_stream(json!("staging"), ResumeOptions::run(&first.run_id))
                    .await
                {
                    Ok(stream) => Ok(stream.output().await),
                    Err(err) => Err(err),
                }
            },
            async {
                agent
                    .stream_with("Something else.", on(&thread))
                    .await
                    .unwrap()
                    .output()
                    .await
            }
        );
        let old = store.get(&first.run_id).await.unwrap().unwrap();
        let kinds: Vec<ResolutionKind> = old.resolutions.iter().map(|r| r.kind).collect();
        match answered {
            Ok(output) => {
                assert_eq!(output.status, RunStatus::Completed, "round {round}");
                assert_eq!(kinds, vec![ResolutionKind::Answered], "round {round}");
            }
            Err(RunError::Superseded { .. }) => {
                assert_eq!(old.status(), RunStatus::Cancelled, "round {round}");
                assert_eq!(kinds, vec![ResolutionKind::Superseded], "round {round}");
            }
            Err(other) => panic!("round {round}: the loser is told it was superseded, not {other:?}"),
        }
    }
}

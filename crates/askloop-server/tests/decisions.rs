//! `POST /api/runs/{runId}/decisions`: several pending calls of a run
//! decided in one request, as one decision.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use askloop::{Agent, AskUser, FunctionTool, ResolutionKind, RunStatus, RunStore, ToolOutput};
use common::*;
use serde_json::{Value, json};

/// An agent whose model calls two deploys (waiting for approval) and asks
/// a question in one turn, then repeats the results; and how many deploys ran.
fn deployer(store: &Arc<dyn RunStore>) -> (Agent, Arc<AtomicUsize>) {
    let ran = Arc::new(AtomicUsize::new(0));
    let deploy = {
        let ran = Arc::clone(&ran);
        FunctionTool::builder("deploy")
            .input_schema(json!({"type": "object", "properties": {"env": {"type": "string"}}}))
            .requires_approval(true)
            .execute(move |args: Value, _ctx| {
                let ran = Arc::clone(&ran);
                async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolOutput::text(format!("deployed {}", args["env"].as_str().unwrap_or("?"))).into())
                }
            })
    };
    let script = json!({"turns": [
        {"toolCalls": [
            {"id": "staging", "name": "deploy", "args": {"env": "staging"}},
            {"id": "prod", "name": "deploy", "args": {"env": "prod"}},
            {"id": "when", "name": "ask_user", "args": {"question": "When?"}}
        ]},
        {"text": "Done: {{toolResults}}"}
    ]});
    let agent = Agent::builder("deployer")
        .model(scripted(&script.to_string()))
        .tool(deploy)
        .tool(AskUser::new())
        .store(Arc::clone(store))
        .build()
        .unwrap();
    (agent, ran)
}

struct World {
    server: TestServer,
    store: Arc<dyn RunStore>,
    ran: Arc<AtomicUsize>,
    run_id: String,
}

async fn waiting_on_three() -> World {
    let store = memory_store();
    let (agent, ran) = deployer(&store);
    let server = TestServer::start(vec![agent], Arc::clone(&store)).await;
    let started = server
        .post_sse("/api/agents/deployer/stream", json!({"messages": "Deploy"}))
        .await;
    let run_id = started.chunks[0]["runId"].as_str().unwrap().to_owned();
    World {
        server,
        store,
        ran,
        run_id,
    }
}

impl World {
    fn path(&self) -> String {
        format!("/api/runs/{}/decisions", self.run_id)
    }
}

#[tokio::test]
async fn every_call_decided_in_one_request_runs_each_once_and_the_model_once() {
    let w = waiting_on_three().await;
    let body = json!({"decisions": [
        {"toolCallId": "when", "resumeData": "tonight"},
        {"toolCallId": "prod", "approved": false, "reason": "not on a Friday"},
        {"toolCallId": "staging", "approved": true}
    ]});
    let decided = w.server.post_sse(&w.path(), body).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_eq!(
        decided.text(),
        "Done: deployed staging; not on a Friday; User answered: tonight"
    );
    let types = decided.types();
    assert_eq!(
        types.iter().filter(|t| *t == "step-start").count(),
        1,
        "one model call: {types:?}"
    );
    assert_eq!(types.last().map(String::as_str), Some("finish"));
    assert_eq!(w.ran.load(Ordering::SeqCst), 1);

    let run = w.store.get(&w.run_id).await.unwrap().unwrap();
    assert_eq!(run.status(), RunStatus::Completed);
    let recorded: Vec<_> = run
        .resolutions
        .iter()
        .map(|r| (r.tool_call_id.clone().unwrap(), r.kind, r.author.via))
        .collect();
    assert_eq!(
        recorded,
        [
            ("staging".to_owned(), ResolutionKind::Approved, askloop::Interface::Http),
            ("when".to_owned(), ResolutionKind::Answered, askloop::Interface::Http),
            ("prod".to_owned(), ResolutionKind::Denied, askloop::Interface::Http),
        ]
    );
}

#[tokio::test]
async fn all_approve_runs_every_call_waiting_for_approval_and_leaves_the_question_open() {
    let w = waiting_on_three().await;
    let decided = w.server.post_sse(&w.path(), json!({"all": "approve"})).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_eq!(w.ran.load(Ordering::SeqCst), 2);
    assert_eq!(decided.first("tool-call-suspended")["payload"]["toolCallId"], "when");
    let run = w.store.get(&w.run_id).await.unwrap().unwrap();
    assert_eq!(run.status(), RunStatus::Suspended);
    let pending: Vec<_> = run
        .waiting_calls(chrono::DateTime::<chrono::Utc>::MIN_UTC)
        .map(|w| w.call.tool_call_id.as_str())
        .collect();
    assert_eq!(pending, ["when"]);

    // Nothing left to approve: said so, naming the question.
    let (status, error) = error_of(w.server.post(&w.path(), json!({"all": "decline"})).await).await;
    assert_eq!(status, 409);
    assert_eq!(error["code"], "nothing_to_approve");
    assert!(error["message"].as_str().unwrap().contains("when"), "{error}");
    assert_eq!(w.ran.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn all_decline_tells_the_model_the_reason_for_each_and_runs_nothing() {
    let w = waiting_on_three().await;
    let decided = w
        .server
        .post_sse(&w.path(), json!({"all": "decline", "reason": "freeze"}))
        .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    let denied: Vec<_> = decided
        .chunks
        .iter()
        .filter(|c| c["type"] == "tool-output-denied")
        .map(|c| c["payload"]["toolCallId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(denied, ["staging", "prod"]);
    assert_eq!(w.ran.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_body_that_does_not_say_one_thing_is_refused_naming_the_forms_and_nothing_changes() {
    let w = waiting_on_three().await;
    let before = w.store.get(&w.run_id).await.unwrap().unwrap();
    let bodies = [
        (json!({}), "nothing to decide"),
        (json!({"all": "approve", "decisions": []}), "cannot go together"),
        (json!({"all": "approve", "reason": "x"}), "takes no `reason`"),
        (json!({"all": "maybe"}), "unknown variant"),
        (
            json!({"decisions": [{"toolCallId": "staging"}]}),
            "needs `approved` or `resumeData`",
        ),
        (
            json!({"decisions": [{"toolCallId": "staging", "approved": true, "resumeData": 1}]}),
            "both",
        ),
        (
            json!({"decisions": [{"toolCallId": "staging", "approved": true, "reason": "x"}]}),
            "no `reason`",
        ),
        (json!({"decisions": [], "reason": "x"}), "each declined call"),
        (
            json!({"decisions": [{"toolCallId": "staging", "approve": true}]}),
            "unknown field `approve`",
        ),
        (json!({"decisions": []}), "no decisions"),
    ];
    for (body, says) in bodies {
        let (status, error) = error_of(w.server.post(&w.path(), body.clone()).await).await;
        assert_eq!(status, 400, "{body}: {error}");
        assert!(error["message"].as_str().unwrap().contains(says), "{body}: {error}");
    }
    // A decision that does not fit its call refuses the others with it.
    let unfit = json!({"decisions": [
        {"toolCallId": "staging", "approved": true},
        {"toolCallId": "when", "resumeData": "  "}
    ]});
    let (status, error) = error_of(w.server.post(&w.path(), unfit).await).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (422, Some("invalid_answer")),
        "{error}"
    );
    let after = w.store.get(&w.run_id).await.unwrap().unwrap();
    assert_eq!(
        (
            after.version,
            after.waiting_calls(chrono::DateTime::<chrono::Utc>::MIN_UTC).count()
        ),
        (before.version, 3),
        "nothing written"
    );
    assert_eq!(w.ran.load(Ordering::SeqCst), 0);

    let (status, error) = error_of(
        w.server
            .post("/api/runs/no-such-run/decisions", json!({"all": "approve"}))
            .await,
    )
    .await;
    assert_eq!((status, error["code"].as_str()), (404, Some("unknown_run")));
}

#[tokio::test]
async fn an_approval_carries_the_arguments_a_person_edited_and_arguments_that_do_not_fit_are_refused() {
    let w = waiting_on_three().await;
    // Through approve-tool-call, askloop's `args` beside Mastra's body.
    let approve = "/api/agents/deployer/approve-tool-call";
    let unfit = json!({"runId": w.run_id, "toolCallId": "staging", "args": {"env": 7}});
    let (status, error) = error_of(w.server.post(approve, unfit).await).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (422, Some("invalid_arguments")),
        "{error}"
    );
    assert!(error["message"].as_str().unwrap().contains("still waits"), "{error}");
    let with_reason = json!({"runId": w.run_id, "toolCallId": "staging", "args": {"env": "qa"}, "reason": "x"});
    let (status, _) = error_of(w.server.post(approve, with_reason).await).await;
    assert_eq!(status, 400);
    assert_eq!(w.ran.load(Ordering::SeqCst), 0);

    let edited = json!({"runId": w.run_id, "toolCallId": "staging", "args": {"env": "qa"}});
    let approved = w.server.post_sse(approve, edited).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert_eq!(approved.first("tool-result")["payload"]["result"], "deployed qa");

    // Through the decisions route, with the other calls.
    let body = json!({"decisions": [
        {"toolCallId": "prod", "approved": true, "args": {"env": "canary"}},
        {"toolCallId": "when", "resumeData": "now"}
    ]});
    let decided = w.server.post_sse(&w.path(), body).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert!(
        decided
            .text()
            .contains("the call ran with {\"env\":\"canary\"}. It returned: deployed canary"),
        "{}",
        decided.text()
    );
    let run = w.store.get(&w.run_id).await.unwrap().unwrap();
    let edits: Vec<(String, Value)> = run
        .resolutions
        .iter()
        .filter_map(|r| Some((r.tool_call_id.clone()?, r.edit.as_ref()?.edited.clone())))
        .collect();
    assert_eq!(
        edits,
        [
            ("staging".to_owned(), json!({"env": "qa"})),
            ("prod".to_owned(), json!({"env": "canary"}))
        ]
    );
    let (status, _) = error_of(
        w.server
            .post(
                &w.path(),
                json!({"decisions": [{"toolCallId": "x", "approved": false, "args": {}}]}),
            )
            .await,
    )
    .await;
    assert_eq!(status, 400, "args go with an approval only");
}

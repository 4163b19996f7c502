//! `POST /chat/{agentId}`, the Vercel AI SDK's chat route, over real HTTP:
//! the recorded requests of a `useChat` client against a real Mastra server
//! (`tests/fixtures/mastra-chat/chat-*`) are sent again, and the parts that
//! come back are compared with the recorded ones, ids aside. Then what
//! askloop does on purpose beyond Mastra: answers checked against the
//! question, approvals checked against the run before anything runs, and
//! every refusal a 4xx with its JSON error instead of a bare 500.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use askloop::{Agent, AskUser, RunStore};
use askloop_server::{ApiToken, ServerOptions};
use askloop_testkit::{FakeServer, workload};
use common::*;
use serde_json::{Value, json};

const INSTRUCTIONS: &str = "You are a deployment assistant. Before deploying, always ask the user which environment to use with the ask_user tool.";

/// The recorded `assistant` on a fake OpenAI server that answers as the
/// recorded model did (the same pieces: 4 argument deltas, 20 text deltas).
async fn recorded_assistant(store: &Arc<dyn RunStore>) -> (Agent, FakeServer) {
    let model = FakeServer::with_responder(workload::deploy_responder()).await.unwrap();
    let base = model.openai_base_url();
    let env = move |name: &str| match name {
        "OPENAI_API_KEY" => Some("sk-test".to_owned()),
        "OPENAI_BASE_URL" => Some(base.clone()),
        _ => None,
    };
    let provider = askloop_providers::from_spec_with("openai/gpt-4o-mini", env, Default::default()).unwrap();
    let agent = Agent::builder("assistant")
        .instructions(INSTRUCTIONS)
        .model(provider)
        .tool(AskUser::new())
        .store(Arc::clone(store))
        .build()
        .unwrap();
    (agent, model)
}

/// A chunk with its ids and text pieces replaced, so that two streams
/// compare by their parts' order, types, keys and every other value.
fn shape(chunk: &Value) -> Value {
    let mut chunk = chunk.clone();
    for key in ["messageId", "id", "toolCallId", "approvalId"] {
        if chunk.get(key).is_some_and(Value::is_string) {
            chunk[key] = json!("<id>");
        }
    }
    if let Some(data) = chunk.get_mut("data") {
        for key in ["runId", "toolCallId"] {
            data[key] = json!("<id>");
        }
        // JSON Schema text, as Mastra sends it; what it accepts is
        // askloop's own (see `resume_schema`).
        if let Some(schema) = data["resumeSchema"].as_str() {
            assert!(serde_json::from_str::<Value>(schema).unwrap().is_object(), "{schema}");
            data["resumeSchema"] = json!("<schema>");
        }
    }
    for key in ["delta", "inputTextDelta"] {
        if chunk.get(key).is_some() {
            chunk[key] = json!("<text>");
        }
    }
    chunk
}

/// What a JSON Schema accepts, without its descriptions and `$schema`.
fn accepted_by(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| !matches!(key.as_str(), "$schema" | "description"))
                .map(|(key, value)| (key.clone(), accepted_by(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(accepted_by).collect()),
        other => other.clone(),
    }
}

/// The `resumeSchema` of a stream's waiting call, read.
fn resume_schema(chunks: &[Value]) -> Value {
    let part = chunks
        .iter()
        .find(|c| c["type"] == "data-tool-call-suspended" || c["type"] == "data-tool-call-approval")
        .unwrap();
    serde_json::from_str(part["data"]["resumeSchema"].as_str().unwrap()).unwrap()
}

fn shapes(chunks: &[Value]) -> Vec<Value> {
    chunks.iter().map(shape).collect()
}

/// The shapes with each run of text or input deltas folded to one (how
/// many there are depends on how the model splits its output).
fn folded(chunks: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for chunk in shapes(chunks) {
        let delta = matches!(chunk["type"].as_str(), Some("text-delta" | "tool-input-delta"));
        if delta && out.last() == Some(&chunk) {
            continue;
        }
        out.push(chunk);
    }
    out
}

/// A recorded request body with the recorded run's ids replaced by this
/// server's (`pairs`: recorded id, id here).
fn rewritten(body: &Value, pairs: &[(&str, &str)]) -> Value {
    let mut text = body.to_string();
    for (recorded, here) in pairs {
        text = text.replace(recorded, here);
    }
    serde_json::from_str(&text).unwrap()
}

/// The run id and call id a stream's question or approval names.
fn waiting(sse: &Sse) -> (String, String) {
    let part = sse
        .chunks
        .iter()
        .find(|c| c["type"] == "data-tool-call-suspended" || c["type"] == "data-tool-call-approval")
        .unwrap_or_else(|| panic!("no waiting call in {:?}", sse.types()));
    (
        part["data"]["runId"].as_str().unwrap().to_owned(),
        part["data"]["toolCallId"].as_str().unwrap().to_owned(),
    )
}

fn recorded_waiting(exchange: &Exchange) -> (String, String) {
    let chunks = exchange.chunks();
    let part = chunks
        .iter()
        .find(|c| c["type"] == "data-tool-call-suspended" || c["type"] == "data-tool-call-approval")
        .unwrap();
    (
        part["data"]["runId"].as_str().unwrap().to_owned(),
        part["data"]["toolCallId"].as_str().unwrap().to_owned(),
    )
}

fn start_id(sse: &Sse) -> String {
    sse.first("start")["messageId"].as_str().unwrap().to_owned()
}

fn recorded_start_id(exchange: &Exchange) -> String {
    exchange.chunks()[0]["messageId"].as_str().unwrap().to_owned()
}

fn ui_text(sse: &Sse) -> String {
    sse.chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["delta"].as_str().unwrap())
        .collect()
}

/// The chat-completions conversation of a model request: roles and, for
/// system and user messages, the text.
fn conversation(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match m["role"].as_str().unwrap() {
            "assistant" if m.get("tool_calls").is_some_and(|c| !c.is_null()) => "assistant calls".to_owned(),
            "assistant" => "assistant text".to_owned(),
            // askloop tells the model an answer as its text, Mastra as
            // the tool's JSON output: compared apart.
            "tool" => "tool".to_owned(),
            role => format!("{role}: {}", m["content"].as_str().unwrap_or_default()),
        })
        .collect()
}

fn recorded_model(name: &str) -> Vec<Vec<String>> {
    let path = format!(
        "{}/tests/fixtures/mastra-chat/{name}.model.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| conversation(&serde_json::from_str::<Value>(l).unwrap()["request_body"]))
        .collect()
}

/// How every run of the store stands: a request refused must leave it as
/// it was.
async fn snapshot(store: &Arc<dyn RunStore>) -> Vec<Value> {
    store
        .list(&askloop::RunQuery::default())
        .await
        .unwrap()
        .into_iter()
        .map(|run| {
            json!([
                run.run_id,
                run.status(),
                run.version,
                run.resolutions.len(),
                run.message_count
            ])
        })
        .collect()
}

/// A user message as `DefaultChatTransport` sends it.
fn user(text: &str) -> Value {
    json!({"parts": [{"type": "text", "text": text}], "id": uuid::Uuid::now_v7().to_string(), "role": "user"})
}

#[tokio::test]
async fn asking_and_answering_give_the_recorded_parts_and_the_model_the_recorded_conversation() {
    let recorded = trace("mastra-chat/chat-ask");
    let store = memory_store();
    let (agent, model) = recorded_assistant(&store).await;
    let server = TestServer::start(vec![agent], store).await;

    let asked = server
        .post_sse("/chat/assistant", recorded[0].request_body.clone().unwrap())
        .await;
    assert_eq!(asked.status, 200, "{}", asked.body);
    assert_eq!(shapes(&asked.chunks), shapes(&recorded[0].chunks()));
    for header in [
        "content-type",
        "cache-control",
        "x-accel-buffering",
        "x-vercel-ai-ui-message-stream",
    ] {
        assert_eq!(
            asked.headers.get(header).map(|v| v.to_str().unwrap()),
            recorded[0].response_headers[header].as_str(),
            "header {header}"
        );
    }
    let (run_id, call_id) = waiting(&asked);
    let (recorded_run, recorded_call) = recorded_waiting(&recorded[0]);
    assert_eq!(asked.first("data-tool-call-suspended")["id"], call_id.as_str());
    // Mastra's schema takes any string or strings; askloop's names the
    // labels the question accepts, as it checks them.
    assert_eq!(
        resume_schema(&asked.chunks),
        json!({"type": "string", "enum": ["staging", "production"]})
    );

    let answer = rewritten(
        recorded[1].request_body.as_ref().unwrap(),
        &[
            (&recorded_run, &run_id),
            (&recorded_call, &call_id),
            (&recorded_start_id(&recorded[0]), &start_id(&asked)),
        ],
    );
    let answered = server.post_sse("/chat/assistant", answer).await;
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert_eq!(
        shapes(&answered.chunks),
        shapes(&recorded[1].chunks()),
        "no start: the same message goes on"
    );
    assert_eq!(
        recorded_text(&recorded[1]),
        r#"Deploying to {"content":"User answered: staging","isError":false}."#
    );
    assert_eq!(ui_text(&answered), "Deploying to User answered: staging.");

    let sent: Vec<Vec<String>> = model.requests().iter().map(|r| conversation(&r.body)).collect();
    assert_eq!(sent, recorded_model("chat-ask"));
}

fn recorded_text(exchange: &Exchange) -> String {
    exchange
        .chunks()
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["delta"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn with_memory_the_thread_supplies_the_history_and_the_model_gets_what_mastras_got() {
    let recorded = trace("mastra-chat/chat-memory");
    let store = memory_store();
    let (agent, model) = recorded_assistant(&store).await;
    let server = TestServer::start(vec![agent], store).await;

    let mut pairs: Vec<(String, String)> = Vec::new();
    for (i, exchange) in recorded
        .iter()
        .enumerate()
        .filter(|(_, e)| e.path.starts_with("/chat/"))
    {
        let body = exchange.request_body.clone().unwrap();
        let pairs_ref: Vec<(&str, &str)> = pairs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let sse = server.post_sse("/chat/assistant", rewritten(&body, &pairs_ref)).await;
        assert_eq!(sse.status, 200, "exchange {i}: {}", sse.body);
        assert_eq!(folded(&sse.chunks), folded(&exchange.chunks()), "exchange {i}");
        if sse.chunks.iter().any(|c| c["type"] == "data-tool-call-suspended") {
            let (run, call) = waiting(&sse);
            let (recorded_run, recorded_call) = recorded_waiting(exchange);
            pairs.push((recorded_run, run));
            pairs.push((recorded_call, call));
            pairs.push((recorded_start_id(exchange), start_id(&sse)));
        }
    }
    let sent: Vec<Vec<String>> = model.requests().iter().map(|r| conversation(&r.body)).collect();
    assert_eq!(
        sent,
        recorded_model("chat-memory"),
        "the second question came with the first exchange"
    );

    let listing = recorded.last().unwrap();
    let listed: Value = server.get(&listing.path).await.json().await.unwrap();
    let roles = |page: &Value| -> Vec<String> {
        page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        roles(&listed),
        roles(&listing.json()),
        "the thread holds both exchanges"
    );
}

/// A server with the recorded `approver` (scripted: one call that needs
/// approval, then `Deploying to <result>.`) and `assistant`.
async fn approver_server(options: ServerOptions) -> (TestServer, Arc<dyn RunStore>) {
    let store = memory_store();
    let server = TestServer::start_with(vec![approver(&store), assistant(&store)], Arc::clone(&store), options).await;
    (server, store)
}

/// Starts a chat with `approver` from the recorded first request, checks
/// the parts against the recording, and returns the stream.
async fn approval_requested(server: &TestServer, exchange: &Exchange) -> Sse {
    let sse = server
        .post_sse("/chat/approver", exchange.request_body.clone().unwrap())
        .await;
    assert_eq!(sse.status, 200, "{}", sse.body);
    assert_eq!(folded(&sse.chunks), folded(&exchange.chunks()));
    let (run_id, call_id) = waiting(&sse);
    assert_eq!(
        sse.first("tool-approval-request")["approvalId"],
        format!("{run_id}::{call_id}").as_str()
    );
    // The wording is askloop's; what the schema accepts is Mastra's.
    assert_eq!(
        accepted_by(&resume_schema(&sse.chunks)),
        accepted_by(&resume_schema(&exchange.chunks()))
    );
    sse
}

/// The recorded follow-up of `first` (recorded as `recorded_first`) with
/// this server's ids.
fn follow_up(recorded_first: &Exchange, follow: &Exchange, first: &Sse) -> Value {
    let (recorded_run, recorded_call) = recorded_waiting(recorded_first);
    let (run_id, call_id) = waiting(first);
    rewritten(
        follow.request_body.as_ref().unwrap(),
        &[
            (&recorded_run, &run_id),
            (&recorded_call, &call_id),
            (&recorded_start_id(recorded_first), &start_id(first)),
        ],
    )
}

#[tokio::test]
async fn approvals_sent_back_by_the_ai_sdk_approve_and_decline_as_recorded_and_resume_data_approves() {
    let recorded = trace("mastra-chat/chat-approval");
    let (server, store) = approver_server(ServerOptions::default()).await;

    // Approved with addToolApprovalResponse: `start` continues the client's
    // assistant message, then the tool's output and the model's answer.
    let first = approval_requested(&server, &recorded[0]).await;
    let approved = server
        .post_sse("/chat/approver", follow_up(&recorded[0], &recorded[1], &first))
        .await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert_eq!(folded(&approved.chunks), folded(&recorded[1].chunks()));
    assert_eq!(start_id(&approved), start_id(&first));
    assert_eq!(approved.first("tool-output-available")["output"], "staging-approved");
    let (run_id, call_id) = waiting(&first);
    let run = stored_run(&server, &run_id).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(
        (
            &run["resolutions"][0]["kind"],
            &run["resolutions"][0]["toolCallId"],
            &run["resolutions"][0]["via"]
        ),
        (&json!("approved"), &json!(call_id), &json!("http"))
    );

    // Declined with a reason: the model is told the reason.
    let second = approval_requested(&server, &recorded[2]).await;
    let declined = server
        .post_sse("/chat/approver", follow_up(&recorded[2], &recorded[3], &second))
        .await;
    assert_eq!(folded(&declined.chunks), folded(&recorded[3].chunks()));
    assert!(
        ui_text(&declined).contains("the chat check declined this call"),
        "{}",
        ui_text(&declined)
    );
    let (declined_run, _) = waiting(&second);
    assert_eq!(
        stored_run(&server, &declined_run).await["resolutions"][0]["kind"],
        "denied"
    );

    // Approved through `runId` + `resumeData`: the resume path, no `start`.
    let third = approval_requested(&server, &recorded[4]).await;
    let by_body = server
        .post_sse("/chat/approver", follow_up(&recorded[4], &recorded[5], &third))
        .await;
    assert_eq!(folded(&by_body.chunks), folded(&recorded[5].chunks()));
    assert_eq!(by_body.first("tool-output-available")["output"], "staging-approved");
    assert_eq!(snapshot(&store).await.len(), 3);
}

#[tokio::test]
async fn a_decision_sent_again_is_answered_as_applied_and_runs_nothing_and_a_contradiction_is_refused() {
    let recorded = trace("mastra-chat/chat-approval");
    let (server, store) = approver_server(ServerOptions::default()).await;
    let first = approval_requested(&server, &recorded[0]).await;
    let approval = follow_up(&recorded[0], &recorded[1], &first);
    let approved = server.post_sse("/chat/approver", approval.clone()).await;
    assert_eq!(approved.status, 200);
    let before = snapshot(&store).await;

    let again = server.post_sse("/chat/approver", approval.clone()).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.types(), ["start", "tool-output-available"]);
    assert_eq!(again.first("tool-output-available")["output"], "staging-approved");
    assert_eq!(snapshot(&store).await, before, "nothing ran again");

    let contradiction = rewritten(&approval, &[("\"approved\":true", "\"approved\":false")]);
    let (status, error) = error_of(server.post("/chat/approver", contradiction).await).await;
    assert_eq!((status, error["code"].as_str()), (409, Some("already_decided")));
    assert_eq!(snapshot(&store).await, before);
}

/// The native approval request for `approval_id` on call `call_id`.
fn approval_request(approval_id: &str, call_id: &str, approved: bool) -> Value {
    json!({"id": "chat-1", "trigger": "submit-message", "messages": [
        user(PROMPT),
        {"id": "a1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "tool-ask_approval", "toolCallId": call_id, "state": "approval-responded", "input": {},
             "approval": {"id": approval_id, "approved": approved}}
        ]}
    ]})
}

#[tokio::test]
async fn a_forged_approval_id_or_a_run_of_another_agent_is_refused_and_nothing_runs() {
    let (server, store) = approver_server(ServerOptions::default()).await;
    let started = server
        .post_sse("/chat/approver", json!({"messages": [user(PROMPT)]}))
        .await;
    let (run_id, call_id) = waiting(&started);
    let asked = server
        .post_sse("/chat/assistant", json!({"messages": [user(PROMPT)]}))
        .await;
    let (question_run, question_call) = waiting(&asked);
    let before = snapshot(&store).await;

    for (id, call, code) in [
        (
            format!("{}::{call_id}", uuid::Uuid::now_v7()),
            call_id.clone(),
            "unknown_run",
        ),
        (
            format!("{run_id}::call_forged"),
            "call_forged".to_owned(),
            "tool_call_not_pending",
        ),
        (
            format!("{question_run}::{question_call}"),
            question_call.clone(),
            "unknown_run",
        ),
    ] {
        let response = server.post("/chat/approver", approval_request(&id, &call, true)).await;
        let (status, error) = error_of(response).await;
        assert!(matches!(status, 404 | 409), "{id}: {status} {error}");
        assert_eq!(error["code"], code, "{id}");
    }
    // An approval id naming another call than its part is refused unread.
    let (status, _) = error_of(
        server
            .post(
                "/chat/approver",
                approval_request(&format!("{run_id}::{call_id}"), "call_other", true),
            )
            .await,
    )
    .await;
    assert_eq!(status, 400);
    // An approval of a question is not how a question is answered.
    let (status, error) = error_of(
        server
            .post(
                "/chat/assistant",
                approval_request(&format!("{question_run}::{question_call}"), &question_call, true),
            )
            .await,
    )
    .await;
    assert_eq!((status, error["code"].as_str()), (422, Some("wrong_pending_kind")));
    assert_eq!(snapshot(&store).await, before, "nothing ran, nothing was written");
}

const ALICE: &str = "secret-of-alice-0123";
const BOB: &str = "secret-of-bob-456789";

fn walled() -> ServerOptions {
    ServerOptions::default().tokens(vec![
        ApiToken::new("alice", ALICE).only_resources(vec!["alice".into()]),
        ApiToken::new("bob", BOB).only_resources(vec!["bob".into()]),
    ])
}

async fn post_as(server: &TestServer, secret: &str, path: &str, body: Value) -> reqwest::Response {
    server
        .client
        .post(server.url(path))
        .bearer_auth(secret)
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn another_resources_run_or_thread_is_refused_and_the_route_needs_a_token() {
    let (server, store) = approver_server(walled()).await;
    let memory = json!({"thread": "t1", "resource": "alice"});
    let started = Sse::read(
        post_as(
            &server,
            ALICE,
            "/chat/approver",
            json!({"messages": [user(PROMPT)], "memory": memory}),
        )
        .await,
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.body);
    let (run_id, call_id) = waiting(&started);
    let before = snapshot(&store).await;

    let approval = approval_request(&format!("{run_id}::{call_id}"), &call_id, true);
    let (status, error) = error_of(post_as(&server, BOB, "/chat/approver", approval.clone()).await).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (404, Some("unknown_run")),
        "bob's token learns nothing of it"
    );
    let by_body = json!({"messages": [], "runId": run_id, "resumeData": {"approved": true}});
    let (status, _) = error_of(post_as(&server, BOB, "/chat/approver", by_body).await).await;
    assert_eq!(status, 404);
    let on_alices_thread = json!({"messages": [user("Hi")], "memory": memory});
    let (status, error) = error_of(post_as(&server, BOB, "/chat/approver", on_alices_thread).await).await;
    assert_eq!((status, error["code"].as_str()), (403, Some("forbidden_resource")));
    let (status, error) = error_of(server.post("/chat/approver", approval.clone()).await).await;
    assert_eq!((status, error["code"].as_str()), (401, Some("unauthorized")));
    assert_eq!(snapshot(&store).await, before, "nothing ran, nothing was written");

    let approved = Sse::read(post_as(&server, ALICE, "/chat/approver", approval).await).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    let run = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!(
        run.resolutions[0].author.by.as_deref(),
        Some("alice"),
        "recorded as alice's"
    );
}

#[tokio::test]
async fn the_recorded_error_cases_are_4xx_with_askloops_error_body_where_mastra_answers_500() {
    let recorded = trace("mastra-chat/chat-errors");
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;

    // An unknown agent.
    let (status, error) = error_of(
        server
            .post(&recorded[0].path, recorded[0].request_body.clone().unwrap())
            .await,
    )
    .await;
    assert_eq!(recorded[0].status, 500);
    assert_eq!((status, error["code"].as_str()), (404, Some("unknown_agent")));

    // A second answer to a run that finished.
    let asked = server
        .post_sse("/chat/assistant", recorded[1].request_body.clone().unwrap())
        .await;
    let (recorded_run, recorded_call) = recorded_waiting(&recorded[1]);
    let (run_id, call_id) = waiting(&asked);
    let pairs = [
        (recorded_run.as_str(), run_id.as_str()),
        (recorded_call.as_str(), call_id.as_str()),
    ];
    let answered = server
        .post_sse(
            "/chat/assistant",
            rewritten(recorded[2].request_body.as_ref().unwrap(), &pairs),
        )
        .await;
    assert_eq!(answered.status, 200);
    let again = rewritten(recorded[3].request_body.as_ref().unwrap(), &pairs);
    let (status, error) = error_of(server.post("/chat/assistant", again).await).await;
    assert_eq!(recorded[3].status, 500);
    assert_eq!((status, error["code"].as_str()), (409, Some("run_not_suspended")));

    // An answer without `runId`.
    let without = rewritten(recorded[4].request_body.as_ref().unwrap(), &pairs);
    let (status, error) = error_of(server.post("/chat/assistant", without).await).await;
    assert_eq!(recorded[4].status, 500);
    assert_eq!((status, error["code"].as_str()), (400, Some("refused_field")));
    assert!(error["message"].as_str().unwrap().contains("runId"), "{error}");

    // No `messages`, and messages that are not UI messages.
    for body in [
        json!({"id": "c"}),
        json!({"messages": "Hi"}),
        json!({"messages": [{"parts": []}]}),
    ] {
        let (status, _) = error_of(server.post("/chat/assistant", body.clone()).await).await;
        assert_eq!(status, 400, "{body}");
    }
}

/// `assistant` with a scripted model that asks `questions` (the args of
/// `ask_user` calls, all in one step), then says what it was told.
async fn asking(questions: Value) -> (TestServer, Arc<dyn RunStore>) {
    let script = json!({"turns": [
        {"toolCalls": questions.as_array().unwrap().iter().map(|q| json!({"name": "ask_user", "args": q})).collect::<Vec<_>>()},
        {"text": "Told: {{toolResults}}"}
    ]});
    let store = memory_store();
    let agent = Agent::builder("assistant")
        .model(scripted(&script.to_string()))
        .tool(AskUser::new())
        .store(Arc::clone(&store))
        .build()
        .unwrap();
    (TestServer::start(vec![agent], Arc::clone(&store)).await, store)
}

async fn answer(server: &TestServer, run_id: &str, call: Option<&str>, data: Value) -> reqwest::Response {
    let mut body = json!({"messages": [], "runId": run_id, "resumeData": data});
    if let Some(call) = call {
        body["toolCallId"] = json!(call);
    }
    server.post("/chat/assistant", body).await
}

#[tokio::test]
async fn free_text_and_multi_select_questions_are_answered_and_a_refused_answer_leaves_the_question_open() {
    for (question, refused, accepted, told) in [
        (
            json!({"question": "Which branch?"}),
            json!(""),
            json!("main"),
            "User answered: main",
        ),
        (
            json!({"question": "Which regions?", "options": [{"label": "eu"}, {"label": "us"}, {"label": "ap"}],
                   "selectionMode": "multi_select"}),
            json!(["eu", "mars"]),
            json!(["eu", "ap"]),
            "eu",
        ),
        (
            json!({"question": "Which environment?", "options": [{"label": "staging"}, {"label": "production"}],
                   "selectionMode": "single_select"}),
            json!("qa"),
            json!("production"),
            "production",
        ),
    ] {
        let (server, store) = asking(json!([question])).await;
        let asked = server
            .post_sse("/chat/assistant", json!({"messages": [user("Go.")]}))
            .await;
        let (run_id, call_id) = waiting(&asked);
        assert_eq!(
            asked.first("data-tool-call-suspended")["data"]["suspendPayload"]["question"],
            question["question"]
        );
        let before = snapshot(&store).await;

        let (status, error) = error_of(answer(&server, &run_id, None, refused.clone()).await).await;
        assert_eq!(
            (status, error["code"].as_str()),
            (422, Some("invalid_answer")),
            "{refused}"
        );
        if question.get("options").is_some() {
            assert!(error["accepted"].as_array().is_some_and(|a| !a.is_empty()), "{error}");
        }
        assert_eq!(snapshot(&store).await, before, "{refused}: the question stays open");
        assert_eq!(
            stored_run(&server, &run_id).await["pendingToolCalls"][0]["toolCallId"],
            call_id.as_str()
        );

        let answered = Sse::read(answer(&server, &run_id, None, accepted.clone()).await).await;
        assert_eq!(answered.status, 200, "{}", answered.body);
        assert_eq!(answered.types()[0], "tool-output-available");
        assert!(ui_text(&answered).contains(told), "{accepted}: {}", ui_text(&answered));
        assert_eq!(answered.chunks.last().unwrap()["type"], "finish");
    }
}

#[tokio::test]
async fn two_open_questions_are_answered_each_by_its_tool_call_id() {
    let (server, _store) = asking(json!([{"question": "First?"}, {"question": "Second?"}])).await;
    let asked = server
        .post_sse("/chat/assistant", json!({"messages": [user("Go.")]}))
        .await;
    let calls: Vec<String> = asked
        .chunks
        .iter()
        .filter(|c| c["type"] == "data-tool-call-suspended")
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(calls.len(), 2, "{:?}", asked.types());
    let (run_id, _) = waiting(&asked);

    let (status, error) = error_of(answer(&server, &run_id, None, json!("one")).await).await;
    assert_eq!((status, error["code"].as_str()), (400, Some("ambiguous_resume")));
    assert_eq!(error["pending"].as_array().unwrap().len(), 2);

    let second = Sse::read(answer(&server, &run_id, Some(&calls[1]), json!("two")).await).await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(
        stored_run(&server, &run_id).await["status"],
        "suspended",
        "the first still waits"
    );
    let first = Sse::read(answer(&server, &run_id, Some(&calls[0]), json!("one")).await).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let text = ui_text(&first);
    assert!(text.contains("one") && text.contains("two"), "{text}");
    assert_eq!(stored_run(&server, &run_id).await["status"], "completed");
}

#[tokio::test]
async fn without_memory_the_clients_history_is_the_conversation_and_nothing_is_stored_on_a_thread() {
    let store = memory_store();
    let (agent, model) = recorded_assistant(&store).await;
    let server = TestServer::start(vec![agent], Arc::clone(&store)).await;
    let history = json!({"messages": [
        user("Deploy the app."),
        {"id": "a1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "tool-ask_user", "toolCallId": "call_old", "state": "output-available",
             "input": {"question": "Which environment should I deploy to?"},
             "output": {"content": "User answered: staging", "isError": false}},
            {"type": "step-start"},
            {"type": "text", "text": "Deploying to staging."}
        ]},
        user("Once more.")
    ]});
    let sse = server.post_sse("/chat/assistant", history).await;
    assert_eq!(sse.status, 200, "{}", sse.body);
    assert_eq!(
        conversation(&model.requests()[0].body),
        [
            format!("system: {INSTRUCTIONS}"),
            "user: Deploy the app.".to_owned(),
            "assistant calls".to_owned(),
            "tool".to_owned(),
            "assistant text".to_owned(),
            "user: Once more.".to_owned(),
        ]
    );
    assert_eq!(
        model.requests()[0].body["messages"][3]["content"],
        r#"{"content":"User answered: staging","isError":false}"#,
        "the output the client holds, as the tool's result"
    );
    let threads = store.thread_store().unwrap();
    assert!(
        threads
            .threads(&askloop::ThreadQuery::default())
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn the_generate_forms_of_approve_and_decline_answer_with_the_outcome_as_json() {
    let store = memory_store();
    let server = TestServer::start(vec![approver(&store)], store).await;
    let (run_id, call_id) = approval_run(&server).await;
    let response = server
        .post(
            "/api/agents/approver/approve-tool-call-generate",
            json!({"runId": run_id, "toolCallId": call_id}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        (&body["status"], &body["finishReason"]),
        (&json!("completed"), &json!("stop"))
    );
    assert_eq!(body["text"], "Deploying to staging-approved.");

    let (run_id, call_id) = approval_run(&server).await;
    let response = server
        .post(
            "/api/agents/approver/decline-tool-call-generate",
            json!({"runId": run_id, "toolCallId": call_id, "reason": "not today"}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert!(body["text"].as_str().unwrap().contains("not today"), "{body}");
    let (status, error) = error_of(
        server
            .post(
                "/api/agents/approver/approve-tool-call-generate",
                json!({"runId": run_id, "toolCallId": call_id}),
            )
            .await,
    )
    .await;
    // Declined already: an approval cannot change it.
    assert_eq!((status, error["code"].as_str()), (409, Some("already_decided")));
    assert!(error["message"].as_str().unwrap().contains("already denied"), "{error}");
}

#[tokio::test]
async fn failures_after_the_stream_started_are_error_parts_and_a_failed_tool_call_is_a_tool_output_error() {
    let store = memory_store();
    let agent = |id: &str, script: Value| {
        Agent::builder(id)
            .model(scripted(&script.to_string()))
            .tool(AskUser::new())
            .store(Arc::clone(&store))
            .build()
            .unwrap()
    };
    let failing = agent("failing", json!({"turns": [{"error": "the model is down"}]}));
    let clumsy = agent(
        "clumsy",
        json!({"turns": [
            {"toolCalls": [{"name": "ask_user", "args": {"options": "not a list"}}]},
            {"text": "Sorry: {{toolResults}}"}
        ]}),
    );
    let server = TestServer::start(vec![failing, clumsy], Arc::clone(&store)).await;

    let failed = server
        .post_sse("/chat/failing", json!({"messages": [user("Go.")]}))
        .await;
    assert_eq!(failed.status, 200, "the stream had started: {}", failed.body);
    let error = failed.first("error");
    assert_eq!(keys(error), ["type", "errorText"]);
    assert!(
        error["errorText"].as_str().unwrap().contains("the model is down"),
        "{error}"
    );

    let clumsy = server
        .post_sse("/chat/clumsy", json!({"messages": [user("Go.")]}))
        .await;
    let tool_error = clumsy.first("tool-output-error");
    assert_eq!(keys(tool_error), ["type", "toolCallId", "errorText"]);
    assert_eq!(
        clumsy.chunks.last().unwrap()["type"],
        "finish",
        "the run went on: {:?}",
        clumsy.types()
    );
}

#[tokio::test]
async fn two_calls_waiting_for_approval_are_decided_in_one_request_as_one_decision_each_once() {
    let store = memory_store();
    let tool = askloop::FunctionTool::builder("ask_approval")
        .input_schema(json!({"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]}))
        .requires_approval(true)
        .execute(|input: Value, _ctx| async move {
            Ok(askloop::ToolOutput::text(format!("{}-approved", input["env"].as_str().unwrap_or_default())).into())
        });
    let script = json!({"turns": [
        {"toolCalls": [{"name": "ask_approval", "args": {"env": "staging"}},
                       {"name": "ask_approval", "args": {"env": "production"}}]},
        {"text": "Results: {{toolResults}}"}
    ]});
    let agent = Agent::builder("approver")
        .model(scripted(&script.to_string()))
        .tool(tool)
        .store(Arc::clone(&store))
        .build()
        .unwrap();
    let server = TestServer::start(vec![agent], Arc::clone(&store)).await;
    let started = server
        .post_sse("/chat/approver", json!({"messages": [user(PROMPT)]}))
        .await;
    let ids: Vec<(String, String)> = started
        .chunks
        .iter()
        .filter(|c| c["type"] == "tool-approval-request")
        .map(|c| {
            (
                c["approvalId"].as_str().unwrap().to_owned(),
                c["toolCallId"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(ids.len(), 2, "{:?}", started.types());
    let part = |(approval, call): &(String, String), approved: bool| {
        json!({"type": "tool-ask_approval", "toolCallId": call, "state": "approval-responded", "input": {},
               "approval": {"id": approval, "approved": approved, "reason": "not production"}})
    };
    let body = json!({"messages": [user(PROMPT), {"id": "a1", "role": "assistant", "parts": [
        {"type": "step-start"}, part(&ids[0], true), part(&ids[1], false)
    ]}]});
    let run_id = ids[0].0.split("::").next().unwrap().to_owned();
    let version_before = store.get(&run_id).await.unwrap().unwrap().version;
    let decided = server.post_sse("/chat/approver", body.clone()).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    // Applied as one: the claim (both calls marked started, the approval
    // recorded), the step (the decline and both results), the reply. One
    // decision after the other would take a fourth write.
    let stored = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!(stored.version - version_before, 3, "one claim for both decisions");
    let kinds: Vec<_> = stored.resolutions.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [askloop::ResolutionKind::Approved, askloop::ResolutionKind::Denied]
    );
    let types = decided.types();
    assert_eq!(types.iter().filter(|t| *t == "start").count(), 1, "{types:?}");
    assert_eq!(decided.first("start")["messageId"], "a1");
    assert_eq!(decided.first("tool-output-available")["output"], "staging-approved");
    assert_eq!(decided.first("tool-output-denied")["toolCallId"], ids[1].1.as_str());
    assert_eq!(types.last().map(String::as_str), Some("finish"), "{types:?}");
    let text = ui_text(&decided);
    assert!(
        text.contains("staging-approved") && text.contains("not production"),
        "{text}"
    );

    let before = snapshot(&store).await;
    let again = server.post_sse("/chat/approver", body).await;
    assert_eq!(again.types(), ["start", "tool-output-available", "tool-output-denied"]);
    assert_eq!(snapshot(&store).await, before, "each decision applied once");
}

/// An agent whose one turn reasons, then answers.
fn thinker(store: &Arc<dyn RunStore>) -> Agent {
    let script = json!({"turns": [{"reasoning": "They want a greeting.", "text": "Hello there."}]});
    Agent::builder("thinker")
        .model(scripted(&script.to_string()))
        .store(Arc::clone(store))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_turn_that_reasons_then_answers_gives_one_reasoning_part_closed_before_the_text() {
    let store = memory_store();
    let server = TestServer::start(vec![thinker(&store)], store).await;
    let sse = server
        .post_sse("/chat/thinker", json!({"messages": [user("Hi.")]}))
        .await;
    assert_eq!(sse.status, 200, "{}", sse.body);
    let id_of = |kind: &str| sse.first(kind)["id"].as_str().unwrap().to_owned();
    let (reasoning, text) = (id_of("reasoning-start"), id_of("text-start"));
    assert_ne!(reasoning, text);
    assert_eq!(
        sse.chunks,
        [
            json!({"type": "start", "messageId": sse.first("start")["messageId"]}),
            json!({"type": "start-step"}),
            json!({"type": "reasoning-start", "id": reasoning}),
            json!({"type": "reasoning-delta", "id": reasoning, "delta": "They "}),
            json!({"type": "reasoning-delta", "id": reasoning, "delta": "want "}),
            json!({"type": "reasoning-delta", "id": reasoning, "delta": "a "}),
            json!({"type": "reasoning-delta", "id": reasoning, "delta": "greeting."}),
            json!({"type": "reasoning-end", "id": reasoning}),
            json!({"type": "text-start", "id": text}),
            json!({"type": "text-delta", "id": text, "delta": "Hello "}),
            json!({"type": "text-delta", "id": text, "delta": "there."}),
            json!({"type": "text-end", "id": text}),
            json!({"type": "finish-step"}),
            json!({"type": "finish", "finishReason": "stop"}),
        ]
    );
    assert!(
        sse.body.contains(r#"{"type":"reasoning-delta","id":"#) && sse.body.contains(r#","delta":"They "}"#),
        "keys in the AI SDK's order: {}",
        sse.body
    );
}

#[tokio::test]
async fn an_approval_sent_with_edited_arguments_runs_with_them_and_unfit_or_stray_ones_are_refused() {
    let (server, store) = approver_server(ServerOptions::default()).await;
    let started = server
        .post_sse("/chat/approver", json!({"messages": [user(PROMPT)]}))
        .await;
    let (run_id, call_id) = waiting(&started);
    let approval_id = format!("{run_id}::{call_id}");
    let with_args = |args: Value, approved: bool| {
        let mut body = approval_request(&approval_id, &call_id, approved);
        body["approvalArgs"] = json!({approval_id.as_str(): args});
        body
    };
    let before = snapshot(&store).await;
    for (body, code) in [
        (with_args(json!({"question": 5}), true), 422),
        (with_args(json!({"question": "Deploy to qa?"}), false), 400),
        (
            {
                let mut body = approval_request(&approval_id, &call_id, true);
                body["approvalArgs"] = json!({"other-run::call": {"question": "x"}});
                body
            },
            400,
        ),
        (
            json!({"messages": [user(PROMPT)], "approvalArgs": {approval_id.as_str(): {}}}),
            400,
        ),
    ] {
        let refused = server.post("/chat/approver", body.clone()).await;
        assert_eq!(refused.status().as_u16(), code, "{body}");
    }
    assert_eq!(snapshot(&store).await, before, "nothing changed");

    let approved = server
        .post_sse("/chat/approver", with_args(json!({"question": "Deploy to qa?"}), true))
        .await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert_eq!(approved.first("tool-output-available")["output"], "staging-approved");
    let run = store.get(&run_id).await.unwrap().unwrap();
    let edit = run.resolutions[0].edit.as_ref().expect("the edit is recorded");
    assert_eq!(edit.edited, json!({"question": "Deploy to qa?"}));
    let text = ui_text(&approved);
    assert!(
        text.contains("the call ran with {\"question\":\"Deploy to qa?\"}"),
        "{text}"
    );
}

//! `GET /chat/{agentId}/{chatId}/stream`: a `useChat` client that lost its
//! connection re-attaches to the chat's stream (what the AI SDK's
//! `DefaultChatTransport.reconnectToStream` asks for), over real HTTP, with
//! a model slow enough that the stream is still going when it comes back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use askloop::RunStore;
use askloop::sse::SseDecoder;
use askloop_server::{ApiToken, ServerOptions};
use askloop_testkit::{FakeResponse, FakeServer, workload};
use common::*;
use serde_json::{Value, json};

/// The deploy workload, each frame of the model's response `delay` after
/// the one before, so that a stream lasts a while.
fn slow_deploy(delay: Duration) -> impl Fn(&Value) -> FakeResponse + Send + Sync + 'static {
    let answer = workload::deploy_responder();
    move |body: &Value| match answer(body) {
        FakeResponse::Turn(turn) => turn.frame_delay(delay).into(),
        other => other,
    }
}

/// A server whose `assistant` (and `other`) asks the deploy question slowly
/// (about two seconds from `start` to the question).
async fn slow_server(options: ServerOptions) -> (TestServer, Arc<dyn RunStore>, FakeServer) {
    let model = FakeServer::with_responder(slow_deploy(Duration::from_millis(250)))
        .await
        .unwrap();
    let store = memory_store();
    let server = TestServer::start_with(
        vec![agent_on("assistant", &model, &store), agent_on("other", &model, &store)],
        Arc::clone(&store),
        options,
    )
    .await;
    (server, store, model)
}

/// How many calls the stored run waits on, whatever their time limits.
async fn waiting(store: &dyn RunStore, run_id: &str) -> usize {
    let run = store.get(run_id).await.unwrap().unwrap();
    run.waiting_calls(chrono::DateTime::<chrono::Utc>::MIN_UTC).count()
}

fn user(text: &str) -> Value {
    json!({"parts": [{"type": "text", "text": text}], "id": uuid::Uuid::now_v7().to_string(), "role": "user"})
}

fn chat_request(chat_id: &str) -> Value {
    json!({"id": chat_id, "messages": [user(workload::DEPLOY_PROMPT)], "trigger": "submit-message"})
}

/// Reads `response` until its body holds a whole first frame, and returns
/// that frame's chunk (the response is still open).
async fn first_frame(response: &mut reqwest::Response) -> Value {
    let mut decoder = SseDecoder::new();
    loop {
        if let Some(event) = decoder.next_event().unwrap() {
            assert_eq!(event.event, "message", "a chunk is a plain `data:` event");
            return serde_json::from_str(event.data).unwrap();
        }
        let bytes = response
            .chunk()
            .await
            .unwrap()
            .expect("the stream ended before a frame");
        decoder.push(&bytes);
    }
}

async fn get_as(server: &TestServer, secret: Option<&str>, path: &str) -> reqwest::Response {
    let request = server.client.get(server.url(path));
    let request = match secret {
        Some(secret) => request.bearer_auth(secret),
        None => request,
    };
    request.send().await.unwrap()
}

async fn post_as(server: &TestServer, secret: Option<&str>, path: &str, body: Value) -> reqwest::Response {
    let request = server.client.post(server.url(path)).json(&body);
    let request = match secret {
        Some(secret) => request.bearer_auth(secret),
        None => request,
    };
    request.send().await.unwrap()
}

#[tokio::test]
async fn a_client_that_drops_mid_stream_re_attaches_and_gets_the_stream_from_start_then_the_rest_live() {
    let (server, store, _model) = slow_server(ServerOptions::default()).await;
    let mut dropped = server.post("/chat/assistant", chat_request("chat-1")).await;
    assert_eq!(dropped.status(), 200);
    let start = first_frame(&mut dropped).await;
    assert_eq!(start["type"], "start");
    drop(dropped);

    // Two clients come back at once, while the model is still answering.
    let mut first = get_as(&server, None, "/chat/assistant/chat-1/stream").await;
    let second = get_as(&server, None, "/chat/assistant/chat-1/stream").await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["x-vercel-ai-ui-message-stream"], "v1");
    assert_eq!(first.headers()["content-type"], "text/event-stream");
    assert_eq!(
        first_frame(&mut first).await,
        start,
        "the replay starts at the same `start`"
    );
    let runs = store.list(&Default::default()).await.unwrap();
    assert_eq!(runs.len(), 1);
    let run_id = runs[0].run_id.clone();
    assert_eq!(
        waiting(store.as_ref(), &run_id).await,
        0,
        "re-attached before the question was asked: the rest comes live"
    );

    let rest = first.text().await.unwrap();
    let second = Sse::read(second).await;
    assert_eq!(second.status, 200);
    let types = second
        .chunks
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect::<Vec<_>>();
    assert_eq!(types.first(), Some(&"start"));
    assert_eq!(
        types.last(),
        Some(&"data-tool-call-suspended"),
        "a question ends the stream"
    );

    assert!(second.body.ends_with(&rest), "both re-attachers got the same stream");
    let suspended = second
        .chunks
        .iter()
        .find(|c| c["type"] == "data-tool-call-suspended")
        .unwrap();
    assert_eq!(suspended["data"]["runId"], run_id.as_str());
    assert_eq!(
        waiting(store.as_ref(), &run_id).await,
        1,
        "the run went on without its first client, to the question"
    );

    let after = get_as(&server, None, "/chat/assistant/chat-1/stream").await;
    assert_eq!(after.status(), 204, "the stream has ended: nothing to re-attach to");
}

#[tokio::test]
async fn a_chat_with_no_stream_here_answers_204_and_an_unknown_agent_404() {
    let (server, _store, _model) = slow_server(ServerOptions::default()).await;
    let unknown = get_as(&server, None, "/chat/assistant/no-such-chat/stream").await;
    assert_eq!(unknown.status(), 204);
    assert_eq!(unknown.text().await.unwrap(), "");
    let (status, error) = error_of(get_as(&server, None, "/chat/nobody/chat-1/stream").await).await;
    assert_eq!((status, error["code"].as_str()), (404, Some("unknown_agent")));
}

const ALICE: &str = "secret-of-alice-0123";
const BOB: &str = "secret-of-bob-456789";
const CAROL: &str = "secret-of-carol-0123";

#[tokio::test]
async fn only_the_caller_who_may_act_on_the_run_re_attaches_and_others_learn_nothing() {
    let options = ServerOptions::default().tokens(vec![
        ApiToken::new("alice", ALICE).only_resources(vec!["alice".into()]),
        ApiToken::new("bob", BOB).only_resources(vec!["bob".into()]),
        ApiToken::new("carol", CAROL).only_agents(vec!["other".into()]),
    ]);
    let (server, _store, _model) = slow_server(options).await;
    let mut body = chat_request("alices-chat");
    body["memory"] = json!({"thread": "t1", "resource": "alice"});
    let mut started = post_as(&server, Some(ALICE), "/chat/assistant", body).await;
    assert_eq!(started.status(), 200);
    first_frame(&mut started).await;

    let path = "/chat/assistant/alices-chat/stream";
    let (status, error) = error_of(get_as(&server, None, path).await).await;
    assert_eq!((status, error["code"].as_str()), (401, Some("unauthorized")));
    let (status, error) = error_of(get_as(&server, Some(CAROL), path).await).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (403, Some("forbidden")),
        "a token for other agents is refused as the POST refuses it"
    );
    let bobs = get_as(&server, Some(BOB), path).await;
    assert_eq!(bobs.status(), 204, "bob's token learns nothing of alice's stream");

    let alices = Sse::read(get_as(&server, Some(ALICE), path).await).await;
    assert_eq!(alices.status, 200);
    assert_eq!(alices.chunks.first().unwrap()["type"], "start");
    assert_eq!(alices.chunks.last().unwrap()["type"], "data-tool-call-suspended");
}

#[tokio::test]
async fn a_stream_past_the_replay_limit_is_not_replayed_and_re_attaching_gets_an_error_part() {
    let (server, store, _model) = slow_server(ServerOptions::default().chat_replay_bytes(10)).await;
    let mut client = server.post("/chat/assistant", chat_request("long-chat")).await;
    first_frame(&mut client).await;

    let reattached = Sse::read(get_as(&server, None, "/chat/assistant/long-chat/stream").await).await;
    assert_eq!(reattached.status, 200);
    assert_eq!(reattached.chunks.len(), 1, "{}", reattached.body);
    let error = &reattached.chunks[0];
    assert_eq!(error["type"], "error");
    assert!(error["errorText"].as_str().unwrap().contains("10 bytes"), "{error}");

    let rest = client.text().await.unwrap();
    assert!(
        rest.contains("data-tool-call-suspended") && rest.ends_with("data: [DONE]\n\n"),
        "the client still attached gets the whole stream: {rest}"
    );
    let runs = store.list(&Default::default()).await.unwrap();
    assert_eq!(waiting(store.as_ref(), &runs[0].run_id).await, 1);
}

//! The server with real providers (the fake OpenAI and Anthropic servers of
//! askloop-testkit): the recorded round trip, a client that hangs up
//! mid-stream, and a shutdown with a stream open.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use askloop::sse::SseDecoder;
use askloop::{Agent, AskUser, Model, RunStore};
use askloop_providers::{HttpConfig, from_spec_with};
use askloop_server::ServerOptions;
use askloop_testkit::{FakeResponse, FakeServer, workload};
use common::*;
use serde_json::{Value, json};

fn model(spec: &str, fake: &FakeServer) -> Arc<dyn Model> {
    let env: HashMap<&str, String> = HashMap::from([
        ("OPENAI_API_KEY", "sk-test".to_owned()),
        ("OPENAI_BASE_URL", fake.openai_base_url()),
        ("ANTHROPIC_API_KEY", "sk-ant-test".to_owned()),
        ("ANTHROPIC_BASE_URL", fake.anthropic_base_url()),
    ]);
    from_spec_with(spec, move |name| env.get(name).cloned(), HttpConfig::default()).unwrap()
}

fn deploy_agent(model: Arc<dyn Model>, store: &Arc<dyn RunStore>) -> Agent {
    Agent::builder("assistant")
        .name("Assistant")
        .instructions(workload::DEPLOY_SYSTEM)
        .model(model)
        .tool(AskUser::new())
        .store(Arc::clone(store))
        .build()
        .unwrap()
}

/// The deploy workload with `delay` between the frames of the question.
fn slow_question(delay: Duration) -> impl Fn(&Value) -> FakeResponse + Send + Sync + 'static {
    let answer = workload::deploy_responder();
    move |body: &Value| {
        let has_result = body["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        if has_result {
            answer(body)
        } else {
            workload::deploy_question_turn("call_ask_1").frame_delay(delay).into()
        }
    }
}

fn folded(types: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in types {
        if (t == "text-delta" || t == "tool-call-delta") && out.last() == Some(&t) {
            continue;
        }
        out.push(t);
    }
    out
}

async fn round_trip_through_the_server(spec: &str) {
    let recorded = trace("single");
    let fake = FakeServer::with_responder(workload::deploy_responder()).await.unwrap();
    let store = memory_store();
    let server = TestServer::start(vec![deploy_agent(model(spec, &fake), &store)], store).await;

    let started = server
        .post_sse(
            "/api/agents/assistant/stream",
            json!({"messages": workload::DEPLOY_PROMPT}),
        )
        .await;
    let recorded_types = |i: usize| {
        folded(
            recorded[i]
                .chunks()
                .iter()
                .map(|c| c["type"].as_str().unwrap().to_owned())
                .collect(),
        )
    };
    assert_eq!(folded(started.types()), recorded_types(0), "{spec}");
    let suspended = started.first("tool-call-suspended");
    assert_eq!(
        suspended["payload"]["suspendPayload"],
        recorded[0].chunks()[9]["payload"]["suspendPayload"]
    );

    let resumed = server
        .post_sse(
            "/api/agents/assistant/resume-stream",
            json!({"runId": suspended["runId"], "toolCallId": suspended["payload"]["toolCallId"], "resumeData": "staging"}),
        )
        .await;
    assert_eq!(folded(resumed.types()), recorded_types(1), "{spec}");
    assert_eq!(resumed.text(), "Deploying to User answered: staging.");
    assert_eq!(resumed.types().iter().filter(|t| *t == "text-delta").count(), 20);
}

#[tokio::test]
async fn an_openai_model_round_trips_through_the_server_as_the_recorded_mastra_exchange() {
    round_trip_through_the_server("openai/gpt-4o-mini").await;
}

#[tokio::test]
async fn an_anthropic_model_round_trips_through_the_server_as_the_recorded_mastra_exchange() {
    round_trip_through_the_server("anthropic/claude-sonnet-4-5").await;
}

/// Waits until the run's stored status is `status` (checking the store
/// through the API), or fails after a generous while.
async fn wait_for_status(server: &TestServer, run_id: &str, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let run: Value = server.get(&format!("/api/runs/{run_id}")).await.json().await.unwrap();
        if run["status"] == status {
            return run;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run {run_id} never became {status}: {run}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_client_that_hangs_up_mid_stream_leaves_the_run_suspended_and_resumable() {
    let fake = FakeServer::with_responder(slow_question(Duration::from_millis(40)))
        .await
        .unwrap();
    let store = memory_store();
    let server = TestServer::start(vec![deploy_agent(model("openai/gpt-4o-mini", &fake), &store)], store).await;

    let mut response = server
        .post(
            "/api/agents/assistant/stream",
            json!({"messages": workload::DEPLOY_PROMPT}),
        )
        .await;
    let mut decoder = SseDecoder::new();
    decoder.push(&response.chunk().await.unwrap().unwrap());
    let first = decoder
        .next_event()
        .unwrap()
        .expect("a whole first event in the first chunk");
    assert_eq!(first.event, "message", "a chunk is a plain `data:` event");
    let start: Value = serde_json::from_str(first.data).unwrap();
    let run_id = start["runId"].as_str().unwrap().to_owned();
    drop(response);

    let run = wait_for_status(&server, &run_id, "suspended").await;
    let call = run["pendingToolCalls"][0]["toolCallId"].as_str().unwrap();
    let resumed = server
        .post_sse(
            "/api/agents/assistant/resume-stream",
            json!({"runId": run_id, "toolCallId": call, "resumeData": "production"}),
        )
        .await;
    assert_eq!(resumed.text(), "Deploying to User answered: production.");
}

#[tokio::test]
async fn a_shutdown_lets_an_open_stream_finish_then_stops_serving() {
    let fake = FakeServer::with_responder(slow_question(Duration::from_millis(30)))
        .await
        .unwrap();
    let store = memory_store();
    let options = ServerOptions::default().shutdown_grace(Duration::from_secs(30));
    let server = TestServer::start_with(
        vec![deploy_agent(model("openai/gpt-4o-mini", &fake), &store)],
        store,
        options,
    )
    .await;
    let url = server.url("/api/agents");
    let client = server.client.clone();

    let mut response = server
        .post(
            "/api/agents/assistant/stream",
            json!({"messages": workload::DEPLOY_PROMPT}),
        )
        .await;
    let mut body = String::from_utf8(response.chunk().await.unwrap().unwrap().to_vec()).unwrap();
    let stopping = tokio::spawn(server.stop());
    while let Some(bytes) = response.chunk().await.unwrap() {
        body.push_str(std::str::from_utf8(&bytes).unwrap());
    }
    let chunks = framed_chunks(&body);
    assert_eq!(chunks.last().unwrap()["type"], "tool-call-suspended");
    stopping.await.unwrap().unwrap();
    assert!(
        client.get(url).send().await.is_err(),
        "the server no longer accepts connections"
    );
}

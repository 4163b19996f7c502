//! The fake server over real HTTP: recording, scripted errors, routes,
//! raw replays, and the `askloop-fake-openai` program.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use askloop_testkit::{FakeError, FakeResponse, FakeServer, FakeTurn, workload};
use serde_json::{Value, json};

async fn post(url: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .header("x-test", "yes")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// The data of every event of a whole SSE body.
fn data_lines(body: &str) -> Vec<String> {
    askloop::sse::events(body.as_bytes())
        .unwrap()
        .into_iter()
        .map(|event| event.data)
        .collect()
}

#[tokio::test]
async fn requests_are_recorded_and_scripted_failures_hit_the_nth_request() {
    let server = FakeServer::builder()
        .fail_request(2, FakeError::new(429, "slow down").retry_after(7))
        .respond(FakeResponse::text("first"))
        .respond(FakeResponse::text("second"))
        .start()
        .await
        .unwrap();
    let url = format!("{}/chat/completions", server.openai_base_url());

    let first = post(&url, &json!({"model": "m", "stream": true, "messages": []})).await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["content-type"], "text/event-stream");
    let first_body = first.text().await.unwrap();
    assert!(first_body.contains("\"content\":\"first\""), "{first_body}");

    let limited = post(&url, &json!({"model": "m", "stream": true, "n": 2})).await;
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "7");
    let error: Value = limited.json().await.unwrap();
    assert_eq!(error["error"]["message"], "slow down");

    // The failure did not consume the queue.
    let third = post(&url, &json!({"model": "m", "stream": true}))
        .await
        .text()
        .await
        .unwrap();
    assert!(third.contains("\"content\":\"second\""), "{third}");
    // Nothing left: a clear 500.
    let fourth = post(&url, &json!({"model": "m", "stream": true})).await;
    assert_eq!(fourth.status(), 500);
    assert!(
        fourth
            .text()
            .await
            .unwrap()
            .contains("no response scripted for request 4")
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(requests[1].number, 2);
    assert_eq!(requests[1].method, "POST");
    assert_eq!(requests[1].path, "/v1/chat/completions");
    assert_eq!(requests[1].header("X-Test"), Some("yes"));
    assert_eq!(requests[1].body, json!({"model": "m", "stream": true, "n": 2}));
}

#[tokio::test]
async fn the_route_decides_the_wire_format_and_errors_take_its_shape() {
    let server = FakeServer::builder()
        .respond(FakeTurn::text("hi"))
        .respond(FakeError::new(529, "Overloaded"))
        .start()
        .await
        .unwrap();
    let url = format!("{}/v1/messages", server.anthropic_base_url());
    let stream = post(&url, &json!({"model": "claude", "stream": true}))
        .await
        .text()
        .await
        .unwrap();
    assert!(stream.starts_with("event: message_start\n"), "{stream}");
    assert!(
        stream.trim_end().ends_with("data: {\"type\":\"message_stop\"}"),
        "{stream}"
    );

    let overloaded = post(&url, &json!({"model": "claude"})).await;
    assert_eq!(overloaded.status(), 529);
    let error: Value = overloaded.json().await.unwrap();
    assert_eq!(
        error,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );

    let missing = post(&format!("{}/v2/other", server.anthropic_base_url()), &json!({})).await;
    assert_eq!(missing.status(), 404);
    let not_json = reqwest::Client::new().post(&url).body("{oops").send().await.unwrap();
    assert_eq!(not_json.status(), 400);
}

#[tokio::test]
async fn the_deploy_workload_streams_the_benchmark_shapes() {
    let server = FakeServer::with_responder(workload::deploy_responder()).await.unwrap();
    let url = format!("{}/chat/completions", server.openai_base_url());
    let ask = post(
        &url,
        &json!({"model": "gpt-4o-mini", "stream": true, "messages": [{"role": "user", "content": "Deploy"}]}),
    )
    .await
    .text()
    .await
    .unwrap();
    let frames = data_lines(&ask);
    // role, head, 4 argument pieces, finish, usage, [DONE]
    assert_eq!(frames.len(), 9, "{ask}");
    let chunks: Vec<Value> = frames[..8].iter().map(|f| serde_json::from_str(f).unwrap()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(
        chunks[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"],
        "ask_user"
    );
    let arguments: String = chunks[2..6]
        .iter()
        .map(|c| {
            c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&arguments).unwrap(),
        workload::deploy_arguments()
    );
    assert_eq!(chunks[6]["choices"][0]["finish_reason"], "tool_calls");
    assert!(chunks[7]["usage"]["total_tokens"].as_u64().unwrap() > 0);
    assert_eq!(frames[8], "[DONE]");

    let answer = post(
        &url,
        &json!({"model": "gpt-4o-mini", "stream": true, "messages": [
            {"role": "user", "content": "Deploy"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_ask_1", "type": "function", "function": {"name": "ask_user", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_ask_1", "content": "User answered: staging"}
        ]}),
    )
    .await
    .text()
    .await
    .unwrap();
    let frames = data_lines(&answer);
    // role, 20 content deltas, finish, usage, [DONE]
    assert_eq!(frames.len(), 24, "{answer}");
    let text: String = frames[1..21]
        .iter()
        .map(|f| {
            serde_json::from_str::<Value>(f).unwrap()["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(text, "Deploying to User answered: staging.");
}

#[tokio::test]
async fn raw_sse_is_replayed_byte_for_byte() {
    let recorded = "data: {\"choices\":[]}\n\ndata: [DONE]\n\n";
    let server = FakeServer::builder()
        .respond(FakeResponse::RawSse(recorded.to_owned()))
        .start()
        .await
        .unwrap();
    let body = post(&format!("{}/chat/completions", server.openai_base_url()), &json!({}))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(body, recorded);
}

#[tokio::test]
async fn requests_are_not_kept_when_recording_is_off() {
    let server = FakeServer::builder()
        .record_requests(false)
        .responder(workload::deploy_responder())
        .start()
        .await
        .unwrap();
    let response = post(
        &format!("{}/chat/completions", server.openai_base_url()),
        &json!({"messages": []}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(server.request_count(), 1);
    assert!(server.requests().is_empty());
}

/// Kills the child when the test ends, pass or fail.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_fake_openai_program_serves_the_long_workload_in_its_pieces_on_the_port_it_prints() {
    let child = Command::new(env!("CARGO_BIN_EXE_askloop-fake-openai"))
        .args(["--port", "0", "--workload", "long:3", "--pieces", "5,1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    assert!(base.starts_with("http://127.0.0.1:") && base.ends_with("/v1"), "{base}");

    let body = post(
        &format!("{base}/chat/completions"),
        &json!({"model": "gpt-4o-mini", "stream": true, "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null},
            {"role": "tool", "tool_call_id": "call_ask_1", "content": "answer-1"}
        ]}),
    )
    .await
    .text()
    .await
    .unwrap();
    let fragments: Vec<String> = data_lines(&body)
        .iter()
        .filter_map(|f| serde_json::from_str::<Value>(f).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .filter(|fragment| !fragment.is_empty())
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(
        fragments.len(),
        1,
        "`--pieces 5,1` streams the arguments whole: {fragments:?}"
    );
    let arguments = fragments.concat();
    assert_eq!(
        serde_json::from_str::<Value>(&arguments).unwrap(),
        json!({"question": "Question 2 of 3?"})
    );
}

#[test]
fn the_fake_openai_program_rejects_a_bad_workload_or_pieces_with_usage() {
    for (args, problem) in [
        (["--workload", "forever"], "expected deploy or long:T"),
        (["--pieces", "0"], "--pieces: `0` is not TEXT or TEXT,ARGUMENTS"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_askloop-fake-openai"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(problem) && stderr.contains("usage:"), "{stderr}");
    }
}

#[tokio::test]
async fn a_request_that_does_not_ask_to_stream_gets_one_json_body() {
    let server = FakeServer::with_responder(workload::deploy_responder()).await.unwrap();
    let response = post(
        &format!("{}/chat/completions", server.openai_base_url()),
        &json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Deploy"}]}),
    )
    .await;
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    let call = &body["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "ask_user");
    let arguments: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, workload::deploy_arguments());
}

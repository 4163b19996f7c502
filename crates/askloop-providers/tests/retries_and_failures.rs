//! Retries before a response streams, and failures after it began: over
//! real HTTP to the fake server, through the agent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use askloop::{Model, ModelError, ModelRequest, RunStatus};
use askloop_providers::{HttpConfig, OpenAiConfig, OpenAiModel};
use askloop_testkit::{FakeError, FakeServer, FakeTurn, workload};
use common::*;

#[tokio::test]
async fn a_429_with_retry_after_is_retried_and_the_run_goes_on() {
    let server = FakeServer::builder()
        .fail_request(
            1,
            FakeError::new(429, "Rate limit reached for gpt-4o-mini").retry_after(0),
        )
        .responder(workload::deploy_responder())
        .start()
        .await
        .unwrap();
    let agent = deploy_agent(openai_model(&server, quick_http(3)));
    let (chunks, output) = agent
        .stream(workload::DEPLOY_PROMPT)
        .await
        .unwrap()
        .output_with_chunks()
        .await;
    assert_eq!(output.status, RunStatus::Suspended, "{:?}", output.error());
    assert_eq!(server.request_count(), 2);
    assert_eq!(
        count(&chunks, "tool-call"),
        1,
        "the call is emitted once: {:?}",
        type_names(&chunks)
    );
    assert_eq!(count(&chunks, "error"), 0);
}

#[tokio::test]
async fn an_anthropic_529_overload_is_retried_and_the_run_goes_on() {
    let server = FakeServer::builder()
        .fail_request(1, FakeError::new(529, "Overloaded"))
        .responder(workload::deploy_responder())
        .start()
        .await
        .unwrap();
    let agent = deploy_agent(anthropic_model(&server, quick_http(3)));
    let output = agent.stream(workload::DEPLOY_PROMPT).await.unwrap().output().await;
    assert_eq!(output.status, RunStatus::Suspended, "{:?}", output.error());
    assert_eq!(server.request_count(), 2);
    assert_eq!(
        server.requests()[0].body,
        server.requests()[1].body,
        "the retry sends the same request"
    );
}

#[tokio::test]
async fn a_500_three_times_fails_the_run_with_the_status_message_and_attempts() {
    let mut builder = FakeServer::builder();
    for n in 1..=3 {
        builder = builder.fail_request(
            n,
            FakeError::new(500, "The server had an error while processing your request"),
        );
    }
    let server = builder.responder(workload::deploy_responder()).start().await.unwrap();
    let agent = deploy_agent(openai_model(&server, quick_http(2)));

    let (chunks, output) = agent
        .stream(workload::DEPLOY_PROMPT)
        .await
        .unwrap()
        .output_with_chunks()
        .await;
    assert_eq!(output.status, RunStatus::Failed);
    assert_eq!(server.request_count(), 3, "one attempt and two retries");
    let message = error_message(&chunks).expect("an error chunk");
    assert!(message.contains("HTTP 500"), "{message}");
    assert!(
        message.contains("The server had an error while processing your request"),
        "{message}"
    );
    assert!(message.contains("after 3 attempts"), "{message}");
    assert_eq!(output.error().as_deref(), Some(message.as_str()));
    let stored = agent.get_run(&output.run_id).await.unwrap();
    assert_eq!(stored.status(), RunStatus::Failed);
}

#[tokio::test]
async fn a_400_is_not_retried_and_its_error_body_message_is_surfaced() {
    let body = include_str!("fixtures/openai/error_400_invalid_temperature.json");
    let server = FakeServer::builder()
        .respond(FakeError::new(400, "").raw_body(body))
        .start()
        .await
        .unwrap();
    let agent = deploy_agent(openai_model(&server, quick_http(3)));
    let output = agent.stream("Deploy").await.unwrap().output().await;
    assert_eq!(output.status, RunStatus::Failed);
    assert_eq!(server.request_count(), 1);
    let message = output.error().unwrap();
    assert!(message.contains("HTTP 400"), "{message}");
    assert!(
        message.contains("Invalid 'temperature': decimal above maximum value"),
        "{message}"
    );
}

#[tokio::test]
async fn a_disconnect_mid_stream_fails_the_run_once_without_retrying_or_duplicating_text() {
    for anthropic in [false, true] {
        // Frames: OpenAI role + 10 text pieces; Anthropic start, block start,
        // ping, text pieces. Cut after some text in both.
        let turn = FakeTurn::text_in("one two three four five six seven eight nine ten", 10).disconnect_after(6);
        let server = FakeServer::builder().respond(turn).start().await.unwrap();
        let model = if anthropic {
            anthropic_model(&server, quick_http(3))
        } else {
            openai_model(&server, quick_http(3))
        };
        let agent = deploy_agent(model);

        let (chunks, output) = agent.stream("Count").await.unwrap().output_with_chunks().await;
        assert_eq!(output.status, RunStatus::Failed, "anthropic={anthropic}");
        assert_eq!(server.request_count(), 1, "nothing is retried once streaming began");
        assert_eq!(count(&chunks, "error"), 1);
        assert_eq!(chunks.last().map(|c| c.type_name()), Some("error"));
        let text = streamed_text(&chunks);
        assert!(!text.is_empty(), "some text streamed before the cut");
        assert!(
            "one two three four five six seven eight nine ten".starts_with(&text),
            "text is the prefix sent, once: {text:?}"
        );
        let message = error_message(&chunks).unwrap();
        assert!(message.contains("the connection to"), "{message}");
        assert_eq!(agent.get_run(&output.run_id).await.unwrap().status(), RunStatus::Failed);
    }
}

#[tokio::test]
async fn an_anthropic_error_event_mid_stream_fails_the_run_with_its_message() {
    let server = FakeServer::builder()
        .respond(FakeTurn::text_in("Let me think", 3).stream_error("Overloaded"))
        .start()
        .await
        .unwrap();
    let agent = deploy_agent(anthropic_model(&server, quick_http(3)));
    let (chunks, output) = agent.stream("Hi").await.unwrap().output_with_chunks().await;
    assert_eq!(output.status, RunStatus::Failed);
    assert_eq!(streamed_text(&chunks), "Let me think");
    let message = error_message(&chunks).unwrap();
    assert!(
        message.contains("mid-stream") && message.contains("Overloaded"),
        "{message}"
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_connection_refused_is_retried_then_reported_naming_the_provider() {
    // A port that was free a moment ago: nothing listens there.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let config = OpenAiConfig::new("gpt-4o-mini", format!("http://127.0.0.1:{port}/v1")).http(quick_http(2));
    let model = OpenAiModel::new("openai/gpt-4o-mini", config).unwrap();
    let request = ModelRequest {
        run_id: "r",
        system: None,
        messages: &[askloop::Message::user("hi")],
        tools: &[],
    };
    let Err(err) = model.stream(request).await else {
        panic!("expected a connection error");
    };
    // The whole chain, for logs: the HTTP client's error and the
    // socket's under it.
    let chain = askloop::ErrorChain(&err).to_string();
    match err {
        ModelError::Transport {
            provider,
            message,
            source,
        } => {
            assert_eq!(provider, "openai");
            assert!(message.contains("after 3 attempts"), "{message}");
            assert!(message.contains(&port.to_string()), "the address is named: {message}");
            let source = source.expect("the HTTP client's error is kept as the source");
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source.get());
            let mut refused = false;
            while let Some(error) = cause {
                refused |= error
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
                cause = error.source();
            }
            assert!(refused, "the socket's refusal is in the sources: {chain}");
            assert!(chain.to_lowercase().contains("connect"), "{chain}");
        }
        other => panic!("expected a transport error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stalled_stream_hits_the_idle_timeout() {
    let server = FakeServer::builder()
        .respond(FakeTurn::text_in("slow words here", 3).frame_delay(Duration::from_secs(30)))
        .start()
        .await
        .unwrap();
    let http = HttpConfig {
        idle_timeout: Duration::from_millis(200),
        ..quick_http(0)
    };
    let agent = deploy_agent(openai_model(&server, http));
    let output = agent.stream("Hi").await.unwrap().output().await;
    assert_eq!(output.status, RunStatus::Failed);
    let message = output.error().unwrap();
    assert!(message.contains("stalled"), "{message}");
}

/// Waits for a run's output, failing the test (instead of hanging it) when
/// no outcome comes at all: the deadlines under test did not fire.
async fn output_within_a_minute(agent: &askloop::Agent, prompt: &str) -> askloop::StreamOutput {
    let stream = agent.stream(prompt).await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), stream.output())
        .await
        .expect("the run never ended: no deadline cut the model call off")
}

#[tokio::test]
async fn keep_alive_comments_forever_do_not_keep_a_stream_alive() {
    for anthropic in [false, true] {
        // Some text, then only `: ping` comments, far more often than the
        // idle timeout, for ever.
        let turn = FakeTurn::text_in("let me think", 3)
            .stall_after(2)
            .keep_alive(Duration::from_millis(20));
        let server = FakeServer::builder().respond(turn).start().await.unwrap();
        let http = HttpConfig {
            idle_timeout: Duration::from_millis(300),
            ..quick_http(3)
        };
        let model = if anthropic {
            anthropic_model(&server, http)
        } else {
            openai_model(&server, http)
        };
        let output = output_within_a_minute(&deploy_agent(model), "Hi").await;
        assert_eq!(output.status, RunStatus::Failed, "anthropic={anthropic}");
        let message = output.error().unwrap();
        assert!(
            message.contains("stalled") && message.contains("keep-alive comments do not count"),
            "{message}"
        );
        assert_eq!(server.request_count(), 1, "nothing is retried once streaming began");
    }
}

#[tokio::test]
async fn events_within_the_idle_timeout_keep_a_slow_stream_going() {
    // Each frame comes after a pause shorter than the idle timeout, with
    // comments in between: the pauses add up to more than one idle timeout.
    let server = FakeServer::builder()
        .respond(
            FakeTurn::text_in("thinking very hard here", 6)
                .frame_delay(Duration::from_millis(100))
                .keep_alive(Duration::from_millis(30)),
        )
        .start()
        .await
        .unwrap();
    let http = HttpConfig {
        idle_timeout: Duration::from_millis(400),
        ..quick_http(0)
    };
    let output = output_within_a_minute(&deploy_agent(openai_model(&server, http)), "Hi").await;
    assert_eq!(output.status, RunStatus::Completed, "{:?}", output.error());
    assert_eq!(output.text, "thinking very hard here");
}

#[tokio::test]
async fn a_stream_that_keeps_sending_events_is_stopped_at_the_total_timeout() {
    // Events often enough for the idle timeout, for far longer than the
    // total deadline.
    let server = FakeServer::builder()
        .respond(FakeTurn::text_in(&"word ".repeat(2000), 2000).frame_delay(Duration::from_millis(10)))
        .start()
        .await
        .unwrap();
    let http = HttpConfig {
        idle_timeout: Duration::from_secs(30),
        total_timeout: Duration::from_millis(500),
        ..quick_http(3)
    };
    let output = output_within_a_minute(&deploy_agent(openai_model(&server, http)), "Hi").await;
    assert_eq!(output.status, RunStatus::Failed);
    let message = output.error().unwrap();
    assert!(message.contains("total timeout of 500 ms"), "{message}");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_server_that_accepts_and_never_answers_is_given_up_at_the_total_timeout() {
    // Every attempt waits for headers that never come; the idle timeout
    // alone would allow four long waits.
    let mut builder = FakeServer::builder();
    for n in 1..=4 {
        builder = builder.fail_request(n, FakeTurn::text("late").delay(Duration::from_secs(3600)));
    }
    let server = builder.start().await.unwrap();
    let http = HttpConfig {
        idle_timeout: Duration::from_secs(30),
        total_timeout: Duration::from_millis(400),
        ..quick_http(3)
    };
    let output = output_within_a_minute(&deploy_agent(openai_model(&server, http)), "Hi").await;
    assert_eq!(output.status, RunStatus::Failed);
    let message = output.error().unwrap();
    assert!(message.contains("total timeout of 400 ms"), "{message}");
    assert!(message.contains("ASKLOOP_MODEL_TIMEOUT"), "{message}");
}

#[tokio::test]
async fn silence_before_the_headers_is_retried_within_the_total_timeout() {
    // The first attempt gets no answer within the idle timeout; the retry
    // is answered: the rule "retry only before the first byte" still holds.
    let server = FakeServer::builder()
        .fail_request(1, FakeTurn::text("late").delay(Duration::from_secs(3600)))
        .respond(FakeTurn::text("on time"))
        .start()
        .await
        .unwrap();
    let http = HttpConfig {
        idle_timeout: Duration::from_millis(300),
        ..quick_http(3)
    };
    let output = output_within_a_minute(&deploy_agent(openai_model(&server, http)), "Hi").await;
    assert_eq!(output.status, RunStatus::Completed, "{:?}", output.error());
    assert_eq!(output.text, "on time");
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn dropping_the_model_stream_closes_the_connection() {
    // Six frames a second apart: sent whole, the body would stream for
    // five seconds or more.
    let server = FakeServer::builder()
        .respond(FakeTurn::text_in("a b c d e f", 6).frame_delay(Duration::from_secs(1)))
        .start()
        .await
        .unwrap();
    let model = openai_model(&server, quick_http(0));
    let messages = [askloop::Message::user("hi")];
    let request = ModelRequest {
        run_id: "r",
        system: None,
        messages: &messages,
        tools: &[],
    };
    let stream = model.stream(request).await.unwrap();
    assert_eq!(server.open_streams(), 1);
    drop(stream);
    // The server notices the closed connection at its next write, well
    // before the body could have finished on its own.
    for _ in 0..150 {
        if server.open_streams() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.open_streams(), 0, "the client dropped the response body");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_json_error_with_status_200_instead_of_a_stream_is_reported_with_its_message() {
    let server = FakeServer::builder()
        .respond(FakeError::new(200, "").raw_body(r#"{"error":{"message":"model 'x' not found","type":"not_found"}}"#))
        .respond(FakeError::new(200, "").raw_body(r#"{"id":"chatcmpl-1","choices":[]}"#))
        .start()
        .await
        .unwrap();
    let agent = deploy_agent(openai_model(&server, quick_http(3)));
    let first = agent.stream("Hi").await.unwrap().output().await;
    assert_eq!(first.status, RunStatus::Failed);
    let message = first.error().unwrap();
    assert!(message.contains("model 'x' not found"), "{message}");
    let second = agent.stream("Hi").await.unwrap().output().await;
    let message = second.error().unwrap();
    assert!(message.contains("expected an event stream"), "{message}");
    assert_eq!(server.request_count(), 2, "not retried");
}

#[tokio::test]
async fn a_404_names_the_url_that_was_called() {
    let server = FakeServer::builder().start().await.unwrap();
    // A base URL the server does not serve.
    let config = OpenAiConfig::new("gpt-4o-mini", format!("{}/v2", server.anthropic_base_url())).http(quick_http(3));
    let model = OpenAiModel::new("openai/gpt-4o-mini", config).unwrap();
    let messages = [askloop::Message::user("hi")];
    let request = ModelRequest {
        run_id: "r",
        system: None,
        messages: &messages,
        tools: &[],
    };
    let Err(ModelError::Api { status, message, .. }) = model.stream(request).await else {
        panic!("expected an API error");
    };
    assert_eq!(status, 404);
    assert!(
        message.contains("/v2/chat/completions") && message.contains("check the base URL"),
        "{message}"
    );
    assert_eq!(server.request_count(), 1, "a 404 is not retried");
}

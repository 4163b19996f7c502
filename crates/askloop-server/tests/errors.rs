//! Every error of the API: its status, its `{"error": {"code", "message"}}`
//! body, and that the run it was about is left as it was.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use askloop_server::ServerOptions;
use common::*;
use serde_json::{Value, json};

async fn run_status(server: &TestServer, run_id: &str) -> String {
    stored_run(server, run_id).await["status"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_body_that_is_not_json_is_a_400_or_a_415_in_the_error_shape() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let cases: Vec<(&str, Option<&str>, &str)> = vec![
        ("{\"messages\": ", Some("application/json"), "not JSON"),
        ("{\"messages\": \"hi\"}", None, "no content type"),
        ("{\"messages\": \"hi\"}", Some("text/plain"), "wrong content type"),
        ("[1, 2]", Some("application/json"), "an array"),
        ("{}", Some("application/json"), "no messages"),
        ("{\"messages\": 42}", Some("application/json"), "messages a number"),
        ("{\"messages\": []}", Some("application/json"), "no message"),
        (
            "{\"messages\": \"hi\", \"runId\": 7}",
            Some("application/json"),
            "runId a number",
        ),
        (
            "{\"messages\": \"hi\", \"runId\": \" \"}",
            Some("application/json"),
            "runId blank",
        ),
    ];
    for (body, content_type, what) in cases {
        let mut request = server
            .client
            .post(server.url("/api/agents/assistant/stream"))
            .body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let (status, error) = error_of(request.send().await.unwrap()).await;
        // A body sent as another type is refused before the route reads it
        // (no HTML form can post to the server).
        let expected = if content_type == Some("text/plain") {
            (415, "unsupported_media_type")
        } else {
            (400, "bad_request")
        };
        assert_eq!((status, error["code"].as_str().unwrap()), expected, "{what}: {error}");
    }
    let listed: Value = server.get("/api/runs").await.json().await.unwrap();
    assert_eq!(listed["runs"], json!([]), "no run was started by a bad request");
}

#[tokio::test]
async fn resume_bodies_without_run_id_or_resume_data_are_400() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let (run_id, _) = suspended_run(&server).await;
    for body in [
        json!({"resumeData": "staging"}),
        json!({"runId": run_id}),
        json!({"runId": 5, "resumeData": "x"}),
    ] {
        let (status, error) = error_of(server.post("/api/agents/assistant/resume-stream", body.clone()).await).await;
        assert_eq!(status, 400, "{body}: {error}");
    }
    assert_eq!(run_status(&server, &run_id).await, "suspended");
}

#[tokio::test]
async fn unknown_agents_runs_and_routes_are_404() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store), approver(&store)], store).await;
    let (run_id, _) = suspended_run(&server).await;

    let (status, error) = error_of(server.get("/api/agents/nobody").await).await;
    assert_eq!((status, error["code"].as_str().unwrap()), (404, "unknown_agent"));
    assert!(error["message"].as_str().unwrap().contains("assistant, approver"));
    let (status, _) = error_of(
        server
            .post("/api/agents/nobody/stream", json!({"messages": "hi"}))
            .await,
    )
    .await;
    assert_eq!(status, 404);

    let body = json!({"runId": "no-such-run", "resumeData": "staging"});
    let (status, error) = error_of(server.post("/api/agents/assistant/resume-stream", body).await).await;
    assert_eq!((status, error["code"].as_str().unwrap()), (404, "unknown_run"));

    // A run of another agent is not this agent's to answer.
    let body = json!({"runId": run_id, "toolCallId": "x"});
    let (status, error) = error_of(server.post("/api/agents/approver/approve-tool-call", body).await).await;
    assert_eq!((status, error["code"].as_str().unwrap()), (404, "unknown_run"));
    let message = error["message"].as_str().unwrap();
    assert_eq!(message, format!("no run with id {run_id} for agent approver"));
    // The answer route says the same, and names no other agent.
    let body = json!({"runId": run_id, "resumeData": "staging"});
    let (status, error) = error_of(server.post("/api/agents/approver/resume-stream", body).await).await;
    assert_eq!(status, 404);
    assert!(!error["message"].as_str().unwrap().contains("assistant"), "{error}");

    for path in ["/api/runs/no-such-run", "/api/nothing-here", "/nothing"] {
        let (status, _) = error_of(server.get(path).await).await;
        assert_eq!(status, 404, "{path}");
    }
    let (status, _) = error_of(server.post("/api/runs/no-such-run/cancel", json!({})).await).await;
    assert_eq!(status, 404);
    let (status, error) = error_of(server.client.delete(server.url("/api/agents")).send().await.unwrap()).await;
    assert_eq!((status, error["code"].as_str().unwrap()), (405, "method_not_allowed"));
    assert_eq!(run_status(&server, &run_id).await, "suspended");
}

#[tokio::test]
async fn resuming_a_finished_run_is_a_409_where_mastra_answers_500() {
    let recorded = trace("resume-finished");
    assert_eq!(
        recorded[2].status, 500,
        "the recorded Mastra behaviour this improves on"
    );
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let (run_id, call) = suspended_run(&server).await;
    let body = json!({"runId": run_id, "toolCallId": call, "resumeData": "staging"});
    let first = server
        .post_sse("/api/agents/assistant/resume-stream", body.clone())
        .await;
    assert_eq!(first.types().last().unwrap(), "finish");

    let (status, error) = error_of(server.post("/api/agents/assistant/resume-stream", body).await).await;
    // The call it names was answered: said as such, whatever the run did since.
    assert_eq!((status, error["code"].as_str().unwrap()), (409, "already_decided"));
    assert!(
        error["message"].as_str().unwrap().contains("already answered"),
        "{error}"
    );
    assert_eq!(run_status(&server, &run_id).await, "completed");
}

#[tokio::test]
async fn of_concurrent_answers_to_one_question_exactly_one_wins_and_the_others_get_409() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let (run_id, call) = suspended_run(&server).await;
    let body = json!({"runId": run_id, "toolCallId": call, "resumeData": "staging"});
    let attempts = (0..8).map(|_| server.post("/api/agents/assistant/resume-stream", body.clone()));
    let responses = futures::future::join_all(attempts).await;
    assert_eq!(
        sorted_statuses(&responses.iter().collect::<Vec<_>>()),
        [200, 409, 409, 409, 409, 409, 409, 409]
    );
    for response in responses {
        if response.status() == 200 {
            let won = Sse::read(response).await;
            assert_eq!(won.types().last().unwrap(), "finish");
        } else {
            let (_, error) = error_of(response).await;
            assert!(
                [
                    "conflict",
                    "run_not_suspended",
                    "tool_call_not_pending",
                    "already_decided"
                ]
                .contains(&error["code"].as_str().unwrap()),
                "{error}"
            );
        }
    }
    let run = stored_run(&server, &run_id).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(tool_results(&run), 1, "the question was answered once");
}

#[tokio::test]
async fn an_answer_the_question_does_not_accept_is_422_listing_the_options_and_the_question_stays_open() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let (run_id, call) = suspended_run(&server).await;
    for bad in [
        json!("qa"),
        json!(""),
        json!(["staging", "production"]),
        json!(42),
        json!(null),
    ] {
        let body = json!({"runId": run_id, "toolCallId": call, "resumeData": bad});
        let (status, error) = error_of(server.post("/api/agents/assistant/resume-stream", body).await).await;
        assert_eq!(
            (status, error["code"].as_str().unwrap()),
            (422, "invalid_answer"),
            "{bad}"
        );
        assert_eq!(error["accepted"], json!(["staging", "production"]), "{bad}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("\"staging\", \"production\"")
        );
    }
    let listed: Value = server
        .get("/api/agents/assistant/suspended-runs")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["total"], 1);
    let good = json!({"runId": run_id, "toolCallId": call, "resumeData": "staging"});
    assert_eq!(
        server
            .post_sse("/api/agents/assistant/resume-stream", good)
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn approving_a_question_or_answering_an_unknown_call_is_refused_without_changing_the_run() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let (run_id, call) = suspended_run(&server).await;
    let (status, error) = error_of(
        server
            .post(
                "/api/agents/assistant/approve-tool-call",
                json!({"runId": run_id, "toolCallId": call}),
            )
            .await,
    )
    .await;
    assert_eq!((status, error["code"].as_str().unwrap()), (422, "wrong_pending_kind"));

    let body = json!({"runId": run_id, "toolCallId": "call_nope", "resumeData": "staging"});
    let (status, error) = error_of(server.post("/api/agents/assistant/resume-stream", body).await).await;
    assert_eq!(
        (status, error["code"].as_str().unwrap()),
        (409, "tool_call_not_pending")
    );
    assert_eq!(error["pending"], json!([call]));
    assert_eq!(run_status(&server, &run_id).await, "suspended");
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let store = memory_store();
    let options = ServerOptions::default().body_limit(1024);
    let server = TestServer::start_with(vec![assistant(&store)], store, options).await;
    let big = "x".repeat(4096);
    let (status, error) = error_of(
        server
            .post("/api/agents/assistant/stream", json!({"messages": big}))
            .await,
    )
    .await;
    assert_eq!((status, error["code"].as_str().unwrap()), (413, "body_too_large"));
    assert!(error["message"].as_str().unwrap().contains("1024 bytes"));

    // Without a length up front (chunked), the limit holds as well.
    let chunks = futures::stream::iter((0..8).map(|_| Ok::<_, std::io::Error>(vec![b' '; 512])));
    let response = server
        .client
        .post(server.url("/api/agents/assistant/stream"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    let (status, _) = error_of(response).await;
    assert_eq!(status, 413);
}

#[tokio::test]
async fn bad_query_strings_are_400() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    for path in [
        "/api/runs?status=sleeping",
        "/api/runs?limit=0",
        "/api/runs?limit=99999",
        "/api/runs?limit=x",
        "/api/runs?cursor=garbage",
    ] {
        let (status, error) = error_of(server.get(path).await).await;
        assert_eq!(status, 400, "{path}: {error}");
    }
}

#[tokio::test]
async fn arbitrary_bodies_on_every_route_never_get_a_5xx() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store), approver(&store)], store).await;
    let (run_id, call) = suspended_run(&server).await;
    let bodies = [
        json!(null),
        json!("text"),
        json!({"runId": run_id}),
        json!({"runId": run_id, "toolCallId": call, "resumeData": {"deep": [1, {"x": null}]}}),
        json!({"runId": run_id, "toolCallId": call, "reason": 5}),
        json!({"runId": "", "toolCallId": "", "resumeData": ""}),
        json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
        json!({"messages": "\u{0000}\u{FFFF}"}),
    ];
    let routes = [
        "stream",
        "generate",
        "resume-stream",
        "approve-tool-call",
        "decline-tool-call",
    ];
    for agent in ["assistant", "approver", "ghost"] {
        for route in routes {
            for body in &bodies {
                let response = server.post(&format!("/api/agents/{agent}/{route}"), body.clone()).await;
                let status = response.status();
                assert!(!status.is_server_error(), "{agent}/{route} {body}: {status}");
                // Drain streams so their runs settle.
                let _ = response.bytes().await;
            }
        }
    }
}

/// The `assistant` of the recorded scenario with a time limit on its
/// question, on a server that runs no sweep of its own; the agent, its
/// store and the server read the returned clock.
async fn limited_server(limit: std::time::Duration) -> (TestServer, askloop::Agent, askloop::ManualClock) {
    let clock = askloop::ManualClock::starting_now();
    let store: Arc<dyn askloop::RunStore> = Arc::new(askloop::MemoryStore::with_clock(Arc::new(clock.clone())));
    let agent = askloop::Agent::builder("assistant")
        .model(scripted(DEPLOY_SCRIPT))
        .tool(askloop::AskUser::new())
        .store(store.clone())
        .clock(Arc::new(clock.clone()))
        .time_limit(limit)
        .build()
        .unwrap();
    let options = ServerOptions::default().recover_every(std::time::Duration::ZERO);
    let server = TestServer::start_with(vec![agent.clone()], store, options).await;
    (server, agent, clock)
}

#[tokio::test]
async fn a_late_answer_after_the_sweep_is_409_expired_at_the_limit_the_question_showed() {
    let (server, agent, clock) = limited_server(std::time::Duration::from_secs(600)).await;
    let started = server
        .post_sse("/api/agents/assistant/stream", json!({"messages": PROMPT}))
        .await;
    let suspended = started.first("tool-call-suspended");
    let run_id = suspended["runId"].as_str().unwrap().to_owned();
    let call = suspended["payload"]["toolCallId"].as_str().unwrap().to_owned();
    let shown = suspended["payload"]["suspendPayload"]["metadata"]["expiresAt"]
        .as_str()
        .unwrap()
        .to_owned();
    // The clock moves to just past the shown instant, not by a guess.
    let limit = chrono::DateTime::parse_from_rfc3339(&shown).unwrap().to_utc();
    clock.set(limit + chrono::Duration::milliseconds(1));
    for swept in agent
        .expire_runs(askloop::Author::via(askloop::Interface::Server))
        .await
        .unwrap()
    {
        swept.output().await;
    }
    assert_eq!(run_status(&server, &run_id).await, "completed");

    for (route, body) in [
        (
            "resume-stream",
            json!({"runId": run_id, "toolCallId": call, "resumeData": "staging"}),
        ),
        ("resume-stream", json!({"runId": run_id, "resumeData": "staging"})),
        ("decline-tool-call", json!({"runId": run_id})),
        ("approve-tool-call", json!({"runId": run_id})),
    ] {
        let response = server
            .post(&format!("/api/agents/assistant/{route}"), body.clone())
            .await;
        let (status, error) = error_of(response).await;
        assert_eq!(
            (status, error["code"].as_str().unwrap()),
            (409, "expired"),
            "{route} {body}: {error}"
        );
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("tool call {call} of run {run_id} expired at {shown}")),
            "{message}"
        );
    }
}

#[tokio::test]
async fn a_decline_reason_over_the_limit_is_refused_and_the_call_stays_pending() {
    let store = memory_store();
    let server = TestServer::start(vec![approver(&store)], store).await;
    let (run_id, _) = approval_run(&server).await;
    let reason = "r".repeat(askloop::MAX_REASON_BYTES + 1);
    let body = json!({"runId": run_id, "reason": reason});
    let (status, error) = error_of(server.post("/api/agents/approver/decline-tool-call", body).await).await;
    assert_eq!(
        (status, error["code"].as_str().unwrap()),
        (422, "reason_too_long"),
        "{error}"
    );
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("at most 65536 bytes"), "{message}");
    assert!(message.len() < 600, "the reason is not echoed: {} bytes", message.len());
    assert_eq!(run_status(&server, &run_id).await, "suspended");
}

#[tokio::test]
async fn an_approval_with_a_reason_is_refused_naming_the_field_and_nothing_runs() {
    let store = memory_store();
    let server = TestServer::start(vec![approver(&store)], store).await;
    let (run_id, _) = approval_run(&server).await;
    let body = json!({"runId": run_id, "reason": "looks fine"});
    let (status, error) = error_of(server.post("/api/agents/approver/approve-tool-call", body).await).await;
    assert_eq!(
        (status, error["code"].as_str().unwrap()),
        (400, "bad_request"),
        "{error}"
    );
    assert!(error["message"].as_str().unwrap().contains("`reason`"), "{error}");
    assert_eq!(run_status(&server, &run_id).await, "suspended");
}

#[tokio::test]
async fn errors_quote_only_the_start_of_a_huge_id_a_client_sent() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let (run_id, _) = suspended_run(&server).await;
    let huge = "x".repeat(30_000);
    let unknown_agent = server.get(&format!("/api/agents/{huge}")).await;
    let unknown_route = server.get(&format!("/api/{huge}")).await;
    let not_pending = server
        .post(
            "/api/agents/assistant/resume-stream",
            json!({"runId": run_id, "toolCallId": huge, "resumeData": "staging"}),
        )
        .await;
    for (what, response) in [
        ("unknown agent", unknown_agent),
        ("unknown route", unknown_route),
        ("call not pending", not_pending),
    ] {
        let (status, error) = error_of(response).await;
        assert!(status >= 400, "{what}");
        let message = error["message"].as_str().unwrap();
        assert!(message.len() < 600, "{what}: {} bytes", message.len());
        assert!(message.contains("xxxx…\""), "{what}: {message}");
    }
    assert_eq!(stored_run(&server, &run_id).await["status"], "suspended");
}

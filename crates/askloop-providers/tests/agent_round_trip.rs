//! End to end, over real HTTP to the fake servers: an agent with `ask_user`
//! streams a tool call, suspends, is resumed, and finishes with streamed
//! text; the server saw the right follow-up messages.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use askloop::{ChunkKind, ResumeOptions, RunStatus};
use askloop_testkit::{FakeResponse, FakeServer, FakeToolCall, FakeTurn, Finish, workload};
use common::*;
use serde_json::{Value, json};

#[tokio::test]
async fn openai_agent_suspends_on_a_streamed_ask_user_and_resumes_to_streamed_text() {
    let server = FakeServer::with_responder(workload::deploy_responder()).await.unwrap();
    let agent = deploy_agent(openai_model(&server, quick_http(0)));

    let stream = agent.stream(workload::DEPLOY_PROMPT).await.unwrap();
    let (chunks, output) = stream.output_with_chunks().await;
    assert_eq!(output.status, RunStatus::Suspended, "{:?}", output.error());
    assert_eq!(count(&chunks, "tool-call-delta"), 4, "{:?}", type_names(&chunks));
    let suspended = chunks
        .iter()
        .find_map(|c| match &c.kind {
            ChunkKind::ToolCallSuspended(s) => Some(s.clone()),
            _ => None,
        })
        .expect("a tool-call-suspended chunk");
    assert_eq!(suspended.tool_name, "ask_user");
    assert_eq!(suspended.suspend_payload["question"], workload::DEPLOY_QUESTION);
    assert_eq!(suspended.args, workload::deploy_arguments().into());

    let resumed = agent
        .resume_stream("staging", ResumeOptions::call(&output.run_id, &suspended.tool_call_id))
        .await
        .unwrap();
    let (chunks, output) = resumed.output_with_chunks().await;
    assert_eq!(output.status, RunStatus::Completed, "{:?}", output.error());
    assert_eq!(output.text, "Deploying to User answered: staging.");
    assert_eq!(count(&chunks, "text-delta"), 20);
    assert_eq!(streamed_text(&chunks), output.text);
    assert!(output.usage.total_tokens > 0);

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            (request.method.as_str(), request.path.as_str()),
            ("POST", "/v1/chat/completions")
        );
        assert_eq!(request.header("authorization"), Some("Bearer sk-test"));
        assert_eq!(request.body["model"], "gpt-4o-mini");
        assert_eq!(request.body["stream"], true);
        assert_eq!(request.body["stream_options"]["include_usage"], true);
        assert_eq!(request.body["tool_choice"], "auto");
        assert_eq!(request.body["tools"][0]["function"]["name"], "ask_user");
    }
    let messages = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4);
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": workload::DEPLOY_SYSTEM})
    );
    assert_eq!(messages[1], json!({"role": "user", "content": workload::DEPLOY_PROMPT}));
    assert_eq!(messages[2]["role"], "assistant");
    let call = &messages[2]["tool_calls"][0];
    assert_eq!(call["id"], suspended.tool_call_id.as_str());
    assert_eq!(call["function"]["name"], "ask_user");
    let sent_args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(sent_args, workload::deploy_arguments());
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": suspended.tool_call_id, "content": "User answered: staging"})
    );
}

#[tokio::test]
async fn anthropic_agent_suspends_on_a_streamed_tool_use_and_resumes_to_streamed_text() {
    let server = FakeServer::with_responder(workload::deploy_responder()).await.unwrap();
    let agent = deploy_agent(anthropic_model(&server, quick_http(0)));

    let output = agent.stream(workload::DEPLOY_PROMPT).await.unwrap().output().await;
    assert_eq!(output.status, RunStatus::Suspended, "{:?}", output.error());
    assert_eq!(output.pending.len(), 1);
    let pending = &output.pending[0];
    assert_eq!(pending.args, workload::deploy_arguments().into());

    let (chunks, done) = agent
        .resume_stream("staging", ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output_with_chunks()
        .await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error());
    assert_eq!(streamed_text(&chunks), "Deploying to User answered: staging.");
    assert_eq!(count(&chunks, "text-delta"), 20);

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.path, "/v1/messages");
        assert_eq!(request.header("x-api-key"), Some("sk-ant-test"));
        assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(request.body["model"], "claude-sonnet-4-5");
        assert_eq!(request.body["max_tokens"], 4096);
        assert_eq!(request.body["system"], workload::DEPLOY_SYSTEM);
        assert_eq!(request.body["tools"][0]["name"], "ask_user");
        assert!(request.body["tools"][0]["input_schema"].is_object());
    }
    let messages = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(
        messages[0],
        json!({"role": "user", "content": [{"type": "text", "text": workload::DEPLOY_PROMPT}]})
    );
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": pending.tool_call_id, "name": "ask_user", "input": workload::deploy_arguments()}]})
    );
    assert_eq!(
        messages[2],
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": pending.tool_call_id, "content": "User answered: staging"}]})
    );
}

#[tokio::test]
async fn ollama_whole_call_with_finish_stop_in_one_chunk_and_no_id_still_suspends_and_resumes() {
    let ask = FakeTurn::tool_call("ask_user", json!({"question": "Which city?"}))
        .whole_calls()
        .finish_in_last_chunk()
        .finish(Finish::Stop)
        .without_ids()
        .no_usage();
    let server = FakeServer::builder()
        .respond(ask)
        .respond(FakeTurn::text_in("Booked Paris.", 3))
        .start()
        .await
        .unwrap();
    let agent = deploy_agent(ollama_model(&server, quick_http(0)));

    let output = agent.stream("Book a trip").await.unwrap().output().await;
    assert_eq!(output.status, RunStatus::Suspended, "{:?}", output.error());
    let call_id = output.pending[0].tool_call_id.clone();
    assert_eq!(
        call_id, "call_chatcmpl-fake-1_0",
        "made up from the response id and index"
    );

    let done = agent
        .resume_stream("Paris", ResumeOptions::run(&output.run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error());
    assert_eq!(done.text, "Booked Paris.");
    let requests = server.requests();
    assert_eq!(requests[0].header("authorization"), None, "ollama needs no key");
    let messages = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["tool_call_id"], call_id.as_str());
}

#[tokio::test]
async fn malformed_arguments_become_an_is_error_result_the_model_sees_with_its_raw_text() {
    let server = FakeServer::builder()
        .respond(FakeTurn::default().call(FakeToolCall::raw("ask_user", "{\"question\": ").id("call_bad")))
        .respond(FakeTurn::text("Sorry, let me try again later."))
        .start()
        .await
        .unwrap();
    let agent = deploy_agent(openai_model(&server, quick_http(0)));

    let (chunks, output) = agent.stream("Deploy").await.unwrap().output_with_chunks().await;
    assert_eq!(output.status, RunStatus::Completed, "{:?}", output.error());
    assert_eq!(count(&chunks, "tool-error"), 1, "{:?}", type_names(&chunks));

    let second = &server.requests()[1].body["messages"];
    assert_eq!(second[2]["tool_calls"][0]["function"]["arguments"], "{\"question\": ");
    assert_eq!(second[3]["tool_call_id"], "call_bad");
    let told = second[3]["content"].as_str().unwrap();
    assert!(told.contains("not valid JSON"), "{told}");
}

#[tokio::test]
async fn parallel_ask_user_calls_suspend_together_and_one_request_follows_both_answers() {
    let server = FakeServer::builder()
        .respond(
            FakeTurn::text("Two things first.")
                .call(FakeToolCall::new("ask_user", &json!({"question": "Where?"}), 3).id("call_a"))
                .call(FakeToolCall::new("ask_user", &json!({"question": "When?"}), 2).id("call_b")),
        )
        .respond(FakeResponse::text("Done."))
        .start()
        .await
        .unwrap();
    let agent = deploy_agent(anthropic_model(&server, quick_http(0)));
    let output = agent.stream("Plan").await.unwrap().output().await;
    assert_eq!(output.pending.len(), 2, "{:?}", output.error());
    let partial = agent
        .resume_stream("Kyoto", ResumeOptions::call(&output.run_id, "call_a"))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(partial.status, RunStatus::Suspended);
    assert_eq!(
        server.request_count(),
        1,
        "no model call until every call has an answer"
    );
    let done = agent
        .resume_stream("Monday", ResumeOptions::call(&output.run_id, "call_b"))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error());
    let messages = server.requests()[1].body["messages"].clone();
    // One assistant turn with text and both calls, then one user turn with both results.
    assert_eq!(messages.as_array().unwrap().len(), 3);
    assert_eq!(messages[1]["content"].as_array().unwrap().len(), 3);
    let results: Vec<&str> = messages[2]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["call_a", "call_b"]);
}

/// Two `ask_user` calls the server gives one id, answered one at a time with
/// different answers: each tool result the next request carries answers its
/// own call, under the id the assistant message gave that call.
async fn two_questions_under_one_id_keep_their_own_answers(
    model: impl Fn(&FakeServer) -> std::sync::Arc<dyn askloop::Model>,
) -> Vec<Value> {
    let server = FakeServer::builder()
        .respond(
            FakeTurn::default()
                .call(FakeToolCall::new("ask_user", &json!({"question": "Where?"}), 3).id("dup"))
                .call(FakeToolCall::new("ask_user", &json!({"question": "When?"}), 2).id("dup")),
        )
        .respond(FakeResponse::text("Done."))
        .start()
        .await
        .unwrap();
    let store = std::sync::Arc::new(askloop::MemoryStore::new());
    let agent = askloop::Agent::builder("assistant")
        .model(model(&server))
        .tool(askloop::AskUser::new())
        .store(store.clone())
        .build()
        .unwrap();
    let (chunks, output) = agent.stream("Plan").await.unwrap().output_with_chunks().await;
    assert_eq!(output.pending.len(), 2, "{:?}", output.error());
    let ids: Vec<String> = output.pending.iter().map(|p| p.tool_call_id.clone()).collect();
    assert_ne!(ids[0], ids[1], "each question has its own id");
    let questions: Vec<&Value> = output.pending.iter().map(|p| &p.args["question"]).collect();
    assert_eq!(questions, [&json!("Where?"), &json!("When?")]);
    assert_eq!(count(&chunks, "tool-call-suspended"), 2);

    for (id, answer) in ids.iter().zip(["Kyoto", "Monday"]) {
        agent
            .resume_stream(answer, ResumeOptions::call(&output.run_id, id))
            .await
            .unwrap()
            .output()
            .await;
    }
    let stored: Vec<(String, String)> = askloop::RunStore::messages(store.as_ref(), &output.run_id)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            askloop::Message::Tool(r) => Some((r.tool_call_id, r.content.to_model_text())),
            _ => None,
        })
        .collect();
    assert_eq!(
        stored,
        [
            (ids[0].clone(), "User answered: Kyoto".to_owned()),
            (ids[1].clone(), "User answered: Monday".to_owned())
        ]
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "one model call after both answers");
    requests[1].body["messages"].as_array().unwrap().clone()
}

#[tokio::test]
async fn openai_two_questions_under_one_id_each_carry_their_own_answer_to_the_model() {
    let messages = two_questions_under_one_id_keep_their_own_answers(|s| openai_model(s, quick_http(0))).await;
    let call_ids: Vec<&str> = messages[1]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(call_ids.len(), 2);
    assert_ne!(call_ids[0], call_ids[1]);
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": call_ids[0], "content": "User answered: Kyoto"})
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": call_ids[1], "content": "User answered: Monday"})
    );
}

#[tokio::test]
async fn anthropic_two_questions_under_one_id_each_carry_their_own_answer_to_the_model() {
    let messages = two_questions_under_one_id_keep_their_own_answers(|s| anthropic_model(s, quick_http(0))).await;
    let call_ids: Vec<&str> = messages[1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(call_ids.len(), 2);
    assert_ne!(call_ids[0], call_ids[1]);
    for id in &call_ids {
        assert!(
            id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{id}"
        );
    }
    assert_eq!(
        messages[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": call_ids[0], "content": "User answered: Kyoto"},
            {"type": "tool_result", "tool_use_id": call_ids[1], "content": "User answered: Monday"}
        ])
    );
}

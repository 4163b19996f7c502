//! Threads through Mastra's API, against what a real Mastra server with
//! `@mastra/memory` sent (`tests/fixtures/mastra-chat/memory-*`): runs on a
//! thread sent only the newest message keep their context, the memory
//! routes answer in Mastra's shapes, and resources wall named tokens'
//! threads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use askloop::{Agent, AskUser, RunStore};
use askloop_server::{ApiToken, ServerOptions};
use askloop_testkit::{FakeServer, workload};
use common::*;
use serde_json::{Value, json};

const INSTRUCTIONS: &str = "You are a deployment assistant. Before deploying, always ask the user which environment to use with the ask_user tool.";

/// The recorded agent `assistant` on a fake OpenAI server that answers as
/// the recorded model did: a question unless the last message is a tool
/// result, then `Deploying to <result>.`
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

/// What a chat-completions request's messages hold, ids and tool result
/// texts left out: `role` and, for system and user messages, the text; for
/// an assistant message its text or `calls <names>`.
fn conversation(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let role = m["role"].as_str().unwrap();
            match role {
                "assistant" if m.get("tool_calls").is_some_and(|c| !c.is_null()) => {
                    let names: Vec<&str> = m["tool_calls"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c["function"]["name"].as_str().unwrap())
                        .collect();
                    format!("assistant calls {}", names.join(","))
                }
                "tool" => "tool".to_owned(),
                "assistant" => "assistant text".to_owned(),
                _ => format!("{role}: {}", m["content"].as_str().unwrap_or_default()),
            }
        })
        .collect()
}

/// The model requests of a recorded scenario.
fn recorded_model(name: &str) -> Vec<Value> {
    let path = format!(
        "{}/tests/fixtures/mastra-chat/{name}.model.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["request_body"].clone())
        .collect()
}

/// The run id and the pending call of a suspended stream.
fn suspended(sse: &Sse) -> (String, String) {
    let chunk = sse.first("tool-call-suspended");
    (
        chunk["runId"].as_str().unwrap().to_owned(),
        chunk["payload"]["toolCallId"].as_str().unwrap().to_owned(),
    )
}

async fn patch(server: &TestServer, path: &str, body: Value) -> reqwest::Response {
    server.client.patch(server.url(path)).json(&body).send().await.unwrap()
}

/// A server of the recorded `assistant` on a memory store, and its model.
async fn served() -> (TestServer, FakeServer) {
    let store = memory_store();
    let (agent, model) = recorded_assistant(&store).await;
    (TestServer::start(vec![agent], store).await, model)
}

/// Sends a recorded stream request again, to this server.
async fn replay(server: &TestServer, exchange: &Exchange) -> Sse {
    let body = exchange.request_body.clone().unwrap();
    server.post_sse("/api/agents/assistant/stream", body).await
}

async fn delete(server: &TestServer, path: &str) -> reqwest::Response {
    server.client.delete(server.url(path)).send().await.unwrap()
}

#[tokio::test]
async fn a_second_stream_sent_only_its_new_message_gives_the_model_the_first_exchange_as_mastra_does() {
    let recorded = trace("mastra-chat/memory-stream");
    let (server, model) = served().await;

    let first = replay(&server, &recorded[0]).await;
    let (run_id, call_id) = suspended(&first);
    let recorded_types: Vec<String> = recorded[0]
        .chunks()
        .iter()
        .map(|c| c["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(first.types(), recorded_types, "memory changes nothing in the chunks");
    let answered = server
        .post_sse(
            "/api/agents/assistant/resume-stream",
            json!({"runId": run_id, "toolCallId": call_id, "resumeData": "staging"}),
        )
        .await;
    assert!(answered.text().starts_with("Deploying to "), "{}", answered.text());

    let second = replay(&server, &recorded[2]).await;
    suspended(&second);

    let sent: Vec<Vec<String>> = model.requests().iter().map(|r| conversation(&r.body)).collect();
    let expected: Vec<Vec<String>> = recorded_model("memory-stream").iter().map(conversation).collect();
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[..], expected[..3], "what the model received, request by request");
    assert_eq!(
        sent[2],
        vec![
            format!("system: {INSTRUCTIONS}"),
            "user: Deploy the app. Ask me which environment first.".to_owned(),
            "assistant calls ask_user".to_owned(),
            "tool".to_owned(),
            "assistant text".to_owned(),
            "user: Now deploy it again, ask me again.".to_owned(),
        ]
    );
}

#[tokio::test]
async fn the_memory_routes_answer_in_mastras_shapes_with_the_waiting_question_read_from_its_run() {
    let recorded = trace("mastra-chat/memory-threads");
    let (server, _model) = served().await;
    let thread = "chat-check-thread-4ca093c8";
    let resource = "chat-check-user-4ca093c8";

    let created = server
        .post(&recorded[0].path, recorded[0].request_body.clone().unwrap())
        .await;
    assert_eq!(created.status(), 200);
    let created: Value = created.json().await.unwrap();
    // Mastra's thread, beside askloop's `agentId` (the agent that continues it).
    let mastra_keys = |thread: &Value| {
        assert!(thread["agentId"].is_string(), "{thread}");
        keys(thread).into_iter().filter(|k| k != "agentId").collect::<Vec<_>>()
    };
    let mut expected_keys = keys(&recorded[0].json());
    let mut got_keys = mastra_keys(&created);
    expected_keys.sort();
    got_keys.sort();
    assert_eq!(got_keys, expected_keys);
    assert_eq!(
        (&created["id"], &created["title"], &created["metadata"]),
        (
            &json!(thread),
            &json!("chat check thread"),
            &json!({"purpose": "chat-check"})
        )
    );

    let stream = replay(&server, &recorded[1]).await;
    let (run_id, call_id) = suspended(&stream);

    let listed: Value = server.get(&recorded[2].path).await.json().await.unwrap();
    assert_eq!(keys(&listed), keys(&recorded[2].json()));
    assert_eq!(
        (
            &listed["total"],
            &listed["page"],
            &listed["perPage"],
            &listed["hasMore"]
        ),
        (&json!(1), &json!(0), &json!(100), &json!(false))
    );
    assert_eq!(listed["threads"][0]["id"], thread);

    let got: Value = server.get(&recorded[3].path).await.json().await.unwrap();
    assert_eq!(mastra_keys(&got), keys(&recorded[3].json()));
    assert_eq!(got["resourceId"], resource);

    let messages: Value = server.get(&recorded[4].path).await.json().await.unwrap();
    let expected = recorded[4].json();
    assert_eq!(keys(&messages), keys(&expected));
    assert_eq!((&messages["total"], &messages["perPage"]), (&json!(2), &json!(40)));
    let question = &messages["messages"][1];
    assert_eq!(keys(question), keys(&expected["messages"][1]));
    let invocation = &question["content"]["parts"][0]["toolInvocation"];
    assert_eq!(
        (&invocation["state"], &invocation["toolCallId"]),
        (&json!("call"), &json!(call_id))
    );
    let waiting = &question["content"]["metadata"]["suspendedTools"][&call_id];
    let mut waiting_keys = keys(waiting);
    let mut recorded_waiting_keys = keys(
        &expected["messages"][1]["content"]["metadata"]["suspendedTools"]
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap()
            .clone(),
    );
    waiting_keys.sort();
    recorded_waiting_keys.sort();
    assert_eq!(waiting_keys, recorded_waiting_keys);
    assert_eq!(waiting["runId"], run_id.as_str());
    assert_eq!(
        waiting["suspendPayload"]["question"],
        "Which environment should I deploy to?"
    );

    let renamed = patch(&server, &recorded[5].path, recorded[5].request_body.clone().unwrap()).await;
    assert_eq!(renamed.status(), 200);
    let renamed: Value = renamed.json().await.unwrap();
    assert_eq!(
        (&renamed["title"], &renamed["metadata"]),
        (
            &json!("renamed by chat check"),
            &json!({"purpose": "chat-check", "step": 2})
        )
    );
    assert_ne!(renamed["updatedAt"], created["updatedAt"]);

    server
        .post_sse(
            "/api/agents/assistant/resume-stream",
            json!({"runId": run_id, "toolCallId": call_id, "resumeData": "staging"}),
        )
        .await;
    let after: Value = server.get(&recorded[8].path).await.json().await.unwrap();
    let roles: Vec<&str> = after["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "assistant"], "as Mastra lists them");
    let answered = &after["messages"][1]["content"];
    assert_eq!(answered["parts"][0]["toolInvocation"]["state"], "result");
    let resolution = &answered["parts"][0]["toolInvocation"]["resolution"];
    assert_eq!(
        (&resolution["kind"], &resolution["via"]),
        (&json!("answered"), &json!("http"))
    );
    assert!(answered["metadata"].get("suspendedTools").is_none(), "{answered}");

    let deleted = delete(&server, &recorded[9].path).await;
    assert_eq!(deleted.status(), 200);
    assert_eq!(deleted.json::<Value>().await.unwrap(), recorded[9].json());
    let (status, error) = error_of(server.get(&recorded[10].path).await).await;
    assert_eq!(status, 404);
    assert_eq!(error["code"], "unknown_thread");
    let empty: Value = server.get(&recorded[11].path).await.json().await.unwrap();
    assert_eq!(empty, recorded[11].json());
    assert_eq!(
        server.get(&format!("/api/runs/{run_id}")).await.status(),
        404,
        "the thread's runs went with it"
    );
}

#[tokio::test]
async fn suspended_runs_are_listed_by_thread_and_by_resource_with_their_thread() {
    let recorded = trace("mastra-chat/memory-suspended");
    let (server, _model) = served().await;
    assert_eq!(
        server
            .post(&recorded[0].path, recorded[0].request_body.clone().unwrap())
            .await
            .status(),
        200
    );
    let stream = replay(&server, &recorded[1]).await;
    let (run_id, _) = suspended(&stream);

    for exchange in &recorded[2..4] {
        let listed: Value = server.get(&exchange.path).await.json().await.unwrap();
        let expected = exchange.json();
        assert_eq!(keys(&listed), keys(&expected), "{}", exchange.path);
        assert_eq!(
            keys(&listed["runs"][0]),
            keys(&expected["runs"][0]),
            "{}",
            exchange.path
        );
        assert_eq!(listed["runs"][0]["runId"], run_id.as_str());
        assert_eq!(listed["runs"][0]["threadId"], expected["runs"][0]["threadId"]);
        assert_eq!(listed["runs"][0]["resourceId"], expected["runs"][0]["resourceId"]);
    }
    let other: Value = server.get(&recorded[4].path).await.json().await.unwrap();
    assert_eq!(other, recorded[4].json(), "another thread of the resource has none");
    // Mastra answers 403 "Access denied: thread not found"; an unknown thread
    // is askloop's usual 404.
    let (status, error) = error_of(server.get(&recorded[5].path).await).await;
    assert_eq!((status, error["code"].as_str()), (404, Some("unknown_thread")));
}

#[tokio::test]
async fn a_new_message_while_a_question_waits_supersedes_it_where_mastra_leaves_it_waiting() {
    let recorded = trace("mastra-chat/memory-unanswered");
    let (server, model) = served().await;
    let first = replay(&server, &recorded[0]).await;
    let (old_run, old_call) = suspended(&first);
    let second = replay(&server, &recorded[1]).await;
    let (new_run, _) = suspended(&second);

    let sent = conversation(&model.requests()[1].body);
    assert_eq!(
        sent,
        vec![
            format!("system: {INSTRUCTIONS}"),
            "user: Deploy the app. Ask me which environment first.".to_owned(),
            "assistant calls ask_user".to_owned(),
            "tool".to_owned(),
            "user: Now deploy it again, ask me again.".to_owned(),
        ],
        "the old call with its result saying it went unanswered (Mastra leaves the call out)"
    );
    let thread: Value = server.get(&recorded[2].path).await.json().await.unwrap();
    let old_question = &thread["messages"][1]["content"]["parts"][0]["toolInvocation"];
    assert_eq!(old_question["toolCallId"], old_call.as_str());
    assert_eq!(
        (&old_question["state"], &old_question["resolution"]["kind"]),
        (&json!("result"), &json!("superseded")),
        "the thread shows the old question resolved, with the result the model was given"
    );
    let listed: Value = server.get(&recorded[3].path).await.json().await.unwrap();
    let runs: Vec<&str> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].as_str().unwrap())
        .collect();
    assert_eq!(
        runs,
        [new_run.as_str()],
        "only the new question waits (Mastra lists both)"
    );
    let old = stored_run(&server, &old_run).await;
    assert_eq!(old["status"], "cancelled");
    let late = server
        .post(
            "/api/agents/assistant/resume-stream",
            json!({"runId": old_run, "toolCallId": old_call, "resumeData": "staging"}),
        )
        .await;
    let (status, error) = error_of(late).await;
    assert_eq!((status, error["code"].as_str()), (409, Some("superseded")));
}

fn named_tokens() -> ServerOptions {
    ServerOptions::default().tokens(vec![
        ApiToken::new("ana", "secret-of-ana-0123").only_resources(vec!["ana".into(), "team".into()]),
        ApiToken::new("bo", "secret-of-bo-456789").only_resources(vec!["bo".into()]),
    ])
}

#[tokio::test]
async fn a_named_token_uses_only_its_resources_threads_and_anothers_look_unknown() {
    let store = memory_store();
    let (agent, model) = recorded_assistant(&store).await;
    let server = TestServer::start_with(vec![agent], Arc::clone(&store), named_tokens()).await;
    let as_user = |secret: &'static str| {
        let client = server.client.clone();
        let url = server.url("");
        move |method: reqwest::Method, path: &str, body: Option<Value>| {
            let mut request = client.request(method, format!("{url}{path}")).bearer_auth(secret);
            if let Some(body) = body {
                request = request.json(&body);
            }
            request.send()
        }
    };
    let ana = as_user("secret-of-ana-0123");
    let bo = as_user("secret-of-bo-456789");
    let stream = ana(
        reqwest::Method::POST,
        "/api/agents/assistant/stream",
        Some(json!({"messages": "Deploy.", "memory": {"thread": "t1", "resource": "team"}})),
    )
    .await
    .unwrap();
    assert_eq!(stream.status(), 200);
    let (run_id, _) = suspended(&Sse::read(stream).await);

    let requests_before = model.request_count();
    let refused = bo(
        reqwest::Method::POST,
        "/api/agents/assistant/stream",
        Some(json!({"messages": "Hi.", "memory": {"thread": "t1", "resource": "team"}})),
    )
    .await
    .unwrap();
    let (status, error) = error_of(refused).await;
    assert_eq!((status, error["code"].as_str()), (403, Some("forbidden_resource")));
    assert_eq!(model.request_count(), requests_before, "nothing ran");
    let run = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!(run.status(), askloop::RunStatus::Suspended, "nothing superseded");

    for path in ["/api/memory/threads/t1", "/api/memory/threads/t1/messages"] {
        let (status, error) = error_of(bo(reqwest::Method::GET, path, None).await.unwrap()).await;
        assert_eq!(
            (status, error["code"].as_str()),
            (404, Some("unknown_thread")),
            "{path}"
        );
        let unknown = bo(reqwest::Method::GET, &path.replace("t1", "t-none"), None)
            .await
            .unwrap();
        let (unknown_status, unknown_error) = error_of(unknown).await;
        assert_eq!(
            (unknown_status, &unknown_error["code"]),
            (status, &error["code"]),
            "another resource's thread answers as an unknown one"
        );
    }
    let (status, _) = error_of(
        bo(reqwest::Method::GET, "/api/memory/threads?resourceId=team", None)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = error_of(
        bo(
            reqwest::Method::POST,
            "/api/agents/assistant/resume-stream",
            Some(json!({"runId": run_id, "resumeData": "staging", "memory": {"thread": "t1", "resource": "team"}})),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 403, "a decision naming another's resource is refused");

    let mine: Value = ana(reqwest::Method::GET, "/api/memory/threads/t1", None)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(mine["resourceId"], "team");
    let listed: Value = ana(reqwest::Method::GET, "/api/memory/threads?resourceId=team", None)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["total"], 1);
}

#[tokio::test]
async fn a_thread_with_a_waiting_question_is_deleted_only_when_asked_to_cancel_its_runs() {
    let store = memory_store();
    let (agent, _model) = recorded_assistant(&store).await;
    let server = TestServer::start(vec![agent], Arc::clone(&store)).await;
    let stream = server
        .post_sse(
            "/api/agents/assistant/stream",
            json!({"messages": "Deploy.", "memory": {"thread": "t1", "resource": "ana"}}),
        )
        .await;
    let (run_id, _) = suspended(&stream);
    let (status, error) = error_of(delete(&server, "/api/memory/threads/t1").await).await;
    assert_eq!((status, error["code"].as_str()), (409, Some("thread_busy")));
    assert!(error["message"].as_str().unwrap().contains(&run_id), "{error}");
    assert_eq!(
        server.get("/api/memory/threads/t1").await.status(),
        200,
        "nothing deleted"
    );

    let deleted = delete(&server, "/api/memory/threads/t1?cancelRuns=true").await;
    assert_eq!(deleted.status(), 200);
    assert_eq!(store.get(&run_id).await.unwrap(), None);
    assert_eq!(server.get("/api/memory/threads/t1").await.status(), 404);
}

#[tokio::test]
async fn memory_that_cannot_be_honoured_is_refused_by_name_before_anything_is_stored() {
    let store = memory_store();
    let (agent, model) = recorded_assistant(&store).await;
    let server = TestServer::start(vec![agent], Arc::clone(&store)).await;
    for (memory, says) in [
        (json!({"thread": "t1"}), "`resource` is missing"),
        (json!({"resource": "ana"}), "`thread` is missing"),
        (json!({"thread": 7, "resource": "ana"}), "`thread` is not a string"),
        (
            json!({"thread": "t1", "resource": "ana", "options": {"readOnly": true}}),
            "readOnly",
        ),
        (
            json!({"thread": "t1", "resource": "ana", "options": {"semanticRecall": true}}),
            "semanticRecall",
        ),
        (
            json!({"thread": "t1", "resource": "ana", "options": {"lastMessages": -1}}),
            "lastMessages",
        ),
        (json!("t1"), "is not an object"),
    ] {
        let response = server
            .post(
                "/api/agents/assistant/stream",
                json!({"messages": "Deploy.", "memory": memory}),
            )
            .await;
        let (status, error) = error_of(response).await;
        assert_eq!(
            (status, error["code"].as_str()),
            (400, Some("refused_field")),
            "{memory}"
        );
        assert!(error["message"].as_str().unwrap().contains(says), "{memory}: {error}");
    }
    let (status, _) = error_of(
        server
            .post(
                "/api/agents/assistant/stream",
                json!({"messages": "Deploy.", "memory": {"thread": "..", "resource": "ana"}}),
            )
            .await,
    )
    .await;
    assert_eq!(status, 400, "an id outside the rule");
    assert_eq!(model.request_count(), 0);
    assert_eq!(store.list(&Default::default()).await.unwrap(), vec![]);
}

#[tokio::test]
async fn the_deprecated_thread_id_with_resource_id_names_a_thread_and_a_lone_thread_id_stays_a_label() {
    let store = memory_store();
    let (agent, model) = recorded_assistant(&store).await;
    let server = TestServer::start(vec![agent], Arc::clone(&store)).await;
    let labelled = server
        .post_sse(
            "/api/agents/assistant/stream",
            json!({"messages": "Deploy.", "threadId": "label-only"}),
        )
        .await;
    let (labelled_run, _) = suspended(&labelled);
    let run = store.get(&labelled_run).await.unwrap().unwrap();
    assert_eq!(
        (run.thread_id.as_deref(), run.memory.is_none()),
        (Some("label-only"), true)
    );

    let stream = server
        .post_sse(
            "/api/agents/assistant/stream",
            json!({"messages": "Deploy.", "threadId": "t1", "resourceId": "ana"}),
        )
        .await;
    let (run_id, _) = suspended(&stream);
    let run = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!(run.memory.unwrap().key, askloop::ThreadKey::new("ana", "t1"));
    let lone = server
        .post(
            "/api/agents/assistant/stream",
            json!({"messages": "Hi.", "resourceId": "ana"}),
        )
        .await;
    assert_eq!(error_of(lone).await.0, 400);
    assert_eq!(model.request_count(), 2);
}

#[tokio::test]
async fn a_front_end_of_an_allowed_origin_may_rename_and_delete_threads() {
    let store = memory_store();
    let (agent, _model) = recorded_assistant(&store).await;
    let options = ServerOptions::default().cors_origins(vec!["https://chat.example".into()]);
    let server = TestServer::start_with(vec![agent], store, options).await;
    for method in ["PATCH", "DELETE"] {
        let preflight = server
            .client
            .request(reqwest::Method::OPTIONS, server.url("/api/memory/threads/t1"))
            .header("origin", "https://chat.example")
            .header("access-control-request-method", method)
            .header("access-control-request-headers", "content-type")
            .send()
            .await
            .unwrap();
        let allowed = preflight.headers()["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(allowed.contains(method), "{method}: {allowed}");
    }
}

#[tokio::test]
async fn a_token_learns_which_resource_it_acts_as_and_lists_the_runs_of_one_of_its_conversations_only() {
    let store = memory_store();
    let (agent, _model) = recorded_assistant(&store).await;
    let server = TestServer::start_with(vec![agent], Arc::clone(&store), named_tokens()).await;
    let get = |secret: &'static str, path: &str| server.client.get(server.url(path)).bearer_auth(secret).send();
    let ana = "secret-of-ana-0123";
    let bo = "secret-of-bo-456789";

    assert_eq!(
        server.get("/api/me").await.status(),
        401,
        "who one is needs a token too"
    );
    let me: Value = get(ana, "/api/me").await.unwrap().json().await.unwrap();
    assert_eq!(
        me,
        json!({"name": "ana", "resource": "ana", "resources": ["ana", "team"], "agents": null})
    );
    let me: Value = get(bo, "/api/me").await.unwrap().json().await.unwrap();
    assert_eq!(me["resource"], "bo");

    // One run on ana's team thread, one on no thread.
    let on_thread = server
        .client
        .post(server.url("/api/agents/assistant/stream"))
        .bearer_auth(ana)
        .json(&json!({"messages": "Deploy.", "memory": {"thread": "t1", "resource": "team"}}))
        .send()
        .await
        .unwrap();
    let (run_id, _) = suspended(&Sse::read(on_thread).await);
    let plain = server
        .client
        .post(server.url("/api/agents/assistant/stream"))
        .bearer_auth(ana)
        .json(&json!({"messages": "Deploy."}))
        .send()
        .await
        .unwrap();
    let (plain, _) = suspended(&Sse::read(plain).await);

    let all: Value = get(ana, "/api/runs?status=suspended")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let by_id = |id: &str| {
        all["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["runId"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_id(&run_id)["threadId"], "t1");
    assert_eq!(by_id(&run_id)["resourceId"], "team");
    assert!(
        by_id(&plain).get("resourceId").is_none(),
        "a run on no thread shows no thread's resource"
    );

    for path in [
        "/api/runs?status=suspended&threadId=t1&total=true",
        "/api/runs?status=suspended&threadId=t1&resourceId=team&total=true",
        "/api/runs?status=suspended&resourceId=team&total=true",
    ] {
        let page: Value = get(ana, path).await.unwrap().json().await.unwrap();
        let ids: Vec<&str> = page["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["runId"].as_str().unwrap())
            .collect();
        assert_eq!(ids, [run_id.as_str()], "{path}");
        assert_eq!(page["total"], 1, "{path}");
    }
    let (status, error) = error_of(get(bo, "/api/runs?threadId=t1").await.unwrap()).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (404, Some("unknown_thread")),
        "another resource's thread is as unknown as a missing one"
    );
    let (status, error) = error_of(get(bo, "/api/runs?resourceId=team").await.unwrap()).await;
    assert_eq!((status, error["code"].as_str()), (403, Some("forbidden_resource")));
    // Another resource's run is neither listed nor counted, nor read.
    let seen: Value = get(bo, "/api/runs?status=suspended&total=true")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = seen["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].as_str().unwrap())
        .collect();
    assert!(ids.is_empty(), "ana's run on no thread is hers: {ids:?}");
    assert_eq!(seen["total"], 0);
    for theirs in [&run_id, &plain] {
        let (status, error) = error_of(get(bo, &format!("/api/runs/{theirs}")).await.unwrap()).await;
        assert_eq!((status, error["code"].as_str()), (404, Some("unknown_run")));
    }

    // The thread says which agent continues it.
    let thread: Value = get(ana, "/api/memory/threads/t1").await.unwrap().json().await.unwrap();
    assert_eq!(thread["agentId"], "assistant");
}

#[tokio::test]
async fn a_caller_that_may_name_any_resource_keeps_its_conversations_under_the_shared_one() {
    let (server, _model) = served().await;
    let me: Value = server.get("/api/me").await.json().await.unwrap();
    assert_eq!(
        me,
        json!({"name": null, "resource": "page", "resources": null, "agents": null})
    );
    assert_eq!(askloop_server::PAGE_RESOURCE, "page");

    let store = memory_store();
    let (agent, _model) = recorded_assistant(&store).await;
    let options = ServerOptions::default().token(Some("one-shared-secret-0123".to_owned()));
    let server = TestServer::start_with(vec![agent], store, options).await;
    let me: Value = server
        .client
        .get(server.url("/api/me"))
        .bearer_auth("one-shared-secret-0123")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        me,
        json!({"name": "api-token", "resource": "page", "resources": null, "agents": null})
    );
}

#[tokio::test]
async fn a_token_limited_to_some_agents_reads_only_their_messages_on_a_shared_thread_and_cannot_delete_it() {
    let store = memory_store();
    let (assistant, _model) = recorded_assistant(&store).await;
    let approver = approver(&store);
    let options = ServerOptions::default().tokens(vec![
        ApiToken::new("ana", "secret-of-ana-0123").only_resources(vec!["ana".into(), "team".into()]),
        ApiToken::new("bot", "secret-of-bot-4567")
            .only_agents(vec!["assistant".into()])
            .only_resources(vec!["bot".into(), "team".into()]),
    ]);
    let server = TestServer::start_with(vec![assistant, approver], Arc::clone(&store), options).await;
    let send = |secret: &'static str, method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut request = server.client.request(method, server.url(path)).bearer_auth(secret);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send()
    };
    let memory = json!({"thread": "shared", "resource": "team"});
    // Ana runs each agent on the team's thread (the approver first: its
    // scripted model counts the thread's turns); the approver's run ends
    // declined, so nothing on the thread still waits.
    let approving = send(
        "secret-of-ana-0123",
        reqwest::Method::POST,
        "/api/agents/approver/stream",
        Some(json!({"messages": "Ship the secret project.", "memory": memory})),
    )
    .await
    .unwrap();
    let approval = Sse::read(approving).await.first("tool-call-approval").clone();
    let declined = send(
        "secret-of-ana-0123",
        reqwest::Method::POST,
        "/api/agents/approver/decline-tool-call",
        Some(json!({"runId": approval["runId"], "toolCallId": approval["payload"]["toolCallId"], "reason": "no"})),
    )
    .await
    .unwrap();
    Sse::read(declined).await;

    let asked = send(
        "secret-of-ana-0123",
        reqwest::Method::POST,
        "/api/agents/assistant/stream",
        Some(json!({"messages": "Deploy.", "memory": memory})),
    )
    .await
    .unwrap();
    let (asked, call) = suspended(&Sse::read(asked).await);
    let answered = send(
        "secret-of-ana-0123",
        reqwest::Method::POST,
        "/api/agents/assistant/resume-stream",
        Some(json!({"runId": asked, "toolCallId": call, "resumeData": "staging"})),
    )
    .await
    .unwrap();
    Sse::read(answered).await;
    let texts = |page: &Value| -> Vec<String> {
        page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].to_string())
            .collect()
    };
    let path = "/api/memory/threads/shared/messages?resourceId=team";
    let ana_sees: Value = send("secret-of-ana-0123", reqwest::Method::GET, path, None)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        texts(&ana_sees).iter().any(|t| t.contains("Ship the secret project.")),
        "{ana_sees}"
    );
    let bot_sees: Value = send("secret-of-bot-4567", reqwest::Method::GET, path, None)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        texts(&bot_sees).iter().any(|t| t.contains("Deploy.")),
        "its own agent's messages: {bot_sees}"
    );
    assert!(
        !bot_sees.to_string().contains("secret project") && !bot_sees.to_string().contains("ask_approval"),
        "nothing of the approver's run: {bot_sees}"
    );

    let refused = send(
        "secret-of-bot-4567",
        reqwest::Method::DELETE,
        "/api/memory/threads/shared?resourceId=team",
        None,
    )
    .await
    .unwrap();
    let (status, error) = error_of(refused).await;
    assert_eq!((status, error["code"].as_str()), (403, Some("forbidden")), "{error}");
    assert!(
        !error["message"].as_str().unwrap().contains("approver"),
        "names no agent it may not see: {error}"
    );
    assert_eq!(
        store.list(&askloop::RunQuery::default()).await.unwrap().len(),
        2,
        "both runs are still stored"
    );
    let deleted = send(
        "secret-of-ana-0123",
        reqwest::Method::DELETE,
        "/api/memory/threads/shared?resourceId=team",
        None,
    )
    .await
    .unwrap();
    assert_eq!(deleted.status(), 200, "a caller of every agent deletes it");
}

#[tokio::test]
async fn a_listing_names_each_untitled_thread_by_its_first_message_and_counts_them_all() {
    let (server, _model) = served().await;
    let long = format!("Deploy the app. {}", "Then tell me how it went. ".repeat(20));
    for (thread, message) in [
        ("t-short", "Deploy the app."),
        ("t-long", long.as_str()),
        ("t-titled", "Deploy it."),
    ] {
        let stream = server
            .post_sse(
                "/api/agents/assistant/stream",
                json!({"messages": message, "memory": {"thread": thread, "resource": "ana"}}),
            )
            .await;
        suspended(&stream);
    }
    let renamed = patch(
        &server,
        "/api/memory/threads/t-titled?resourceId=ana",
        json!({"title": "Release"}),
    )
    .await;
    assert_eq!(renamed.status(), 200);

    let listed: Value = server
        .get("/api/memory/threads?resourceId=ana&perPage=2")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (&listed["total"], &listed["hasMore"]),
        (&json!(3), &json!(true)),
        "{listed}"
    );
    let second: Value = server
        .get("/api/memory/threads?resourceId=ana&perPage=2&page=1")
        .await
        .json()
        .await
        .unwrap();
    let threads: Vec<&Value> = listed["threads"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second["threads"].as_array().unwrap())
        .collect();
    let by_id = |id: &str| {
        *threads
            .iter()
            .find(|t| t["id"] == id)
            .unwrap_or_else(|| panic!("{id}: {threads:?}"))
    };
    assert_eq!(by_id("t-short")["firstMessage"], "Deploy the app.");
    let first_of_long = by_id("t-long")["firstMessage"].as_str().unwrap();
    assert_eq!(
        first_of_long,
        long.chars().take(200).collect::<String>(),
        "the start of a long message, a bound on the listing"
    );
    assert!(
        by_id("t-titled").get("firstMessage").is_none(),
        "a titled thread is named by its title"
    );
    let one: Value = server
        .get("/api/memory/threads/t-short?resourceId=ana")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        one["firstMessage"], "Deploy the app.",
        "one thread read alone carries it too"
    );
}

//! Mastra's agent routes over real HTTP, replaying the recorded scenarios of
//! a real Mastra server (`tests/fixtures/`) against askloop's server with a
//! scripted model that makes the same calls.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use serde_json::{Value, json};

/// The chunk types of a stream, with the runs of text deltas and tool-call
/// deltas folded to one (their count depends on how the model splits).
fn folded_types(chunks: &[Value]) -> Vec<String> {
    let mut types: Vec<String> = Vec::new();
    for chunk in chunks {
        let t = chunk["type"].as_str().unwrap().to_owned();
        if (t == "text-delta" || t == "tool-call-delta") && types.last() == Some(&t) {
            continue;
        }
        types.push(t);
    }
    types
}

#[tokio::test]
async fn stream_until_suspended_then_resume_matches_the_recorded_mastra_exchange() {
    let recorded = trace("single");
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;

    let started = server
        .post_sse(
            "/api/agents/assistant/stream",
            recorded[0].request_body.clone().unwrap(),
        )
        .await;
    assert_eq!(started.status, 200);
    assert_eq!(folded_types(&started.chunks), folded_types(&recorded[0].chunks()));
    for header in [
        "content-type",
        "cache-control",
        "x-accel-buffering",
        "transfer-encoding",
    ] {
        assert_eq!(
            started.headers.get(header).map(|v| v.to_str().unwrap()),
            recorded[0].response_headers[header].as_str(),
            "header {header}"
        );
    }
    let suspended = started.first("tool-call-suspended");
    let run_id = suspended["runId"].as_str().unwrap().to_owned();
    let tool_call_id = suspended["payload"]["toolCallId"].as_str().unwrap().to_owned();
    let recorded_suspended = &recorded[0].chunks()[9];
    assert_eq!(
        suspended["payload"]["suspendPayload"],
        recorded_suspended["payload"]["suspendPayload"]
    );
    assert!(
        started
            .chunks
            .iter()
            .all(|c| c["runId"] == run_id.as_str() && c["from"] == "AGENT")
    );

    let resumed = server
        .post_sse(
            "/api/agents/assistant/resume-stream",
            json!({"runId": run_id, "toolCallId": tool_call_id, "resumeData": "staging"}),
        )
        .await;
    assert_eq!(resumed.status, 200);
    assert_eq!(folded_types(&resumed.chunks), folded_types(&recorded[1].chunks()));
    assert_eq!(
        resumed.first("tool-result")["payload"]["toolCallId"],
        tool_call_id.as_str()
    );
    assert!(resumed.text().contains("staging"), "{}", resumed.text());
}

#[tokio::test]
async fn every_chunk_is_the_core_chunk_serialised_as_is_in_one_data_frame() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let started = server
        .post_sse("/api/agents/assistant/stream", json!({"messages": PROMPT}))
        .await;
    for (frame, chunk) in started.body.split_terminator("\n\n").zip(&started.chunks) {
        let parsed: askloop::Chunk = serde_json::from_value(chunk.clone()).unwrap();
        assert_eq!(frame, format!("data: {}", serde_json::to_string(&parsed).unwrap()));
    }
    assert!(!started.body.contains("\nevent:") && !started.body.starts_with("event:"));
    assert!(!started.body.contains("\nid:") && !started.body.starts_with("id:"));
}

#[tokio::test]
async fn a_caller_chosen_run_id_is_the_run_id() {
    let recorded = trace("client-run-id");
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let body = recorded[0].request_body.clone().unwrap();
    let run_id = body["runId"].as_str().unwrap();
    let started = server.post_sse("/api/agents/assistant/stream", body.clone()).await;
    assert!(started.chunks.iter().all(|c| c["runId"] == run_id));
    assert_eq!(stored_run(&server, run_id).await["status"], "suspended");

    let again = server.post("/api/agents/assistant/stream", body).await;
    let (status, error) = error_of(again).await;
    assert_eq!(status, 409);
    assert_eq!(error["code"], "run_exists");
}

#[tokio::test]
async fn messages_may_be_an_array_of_role_and_content() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let started = server
        .post_sse(
            "/api/agents/assistant/stream",
            json!({"messages": [{"role": "user", "content": PROMPT}]}),
        )
        .await;
    assert_eq!(started.types().last().unwrap(), "tool-call-suspended");
}

#[tokio::test]
async fn suspended_runs_lists_the_question_as_mastra_does_and_empties_after_the_answer() {
    let recorded = trace("listing");
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let started = server
        .post_sse("/api/agents/assistant/stream", json!({"messages": PROMPT}))
        .await;
    let run_id = started.chunks[0]["runId"].as_str().unwrap().to_owned();

    let listed = server.get("/api/agents/assistant/suspended-runs").await;
    assert_eq!(listed.status(), 200);
    let raw = listed.text().await.unwrap();
    let ours: Value = serde_json::from_str(&raw).unwrap();
    let theirs = recorded[1].json();
    assert_eq!(ours["total"], 1);
    assert_eq!(keys(&ours), keys(&theirs));
    let (run, recorded_run) = (&ours["runs"][0], &theirs["runs"][0]);
    assert_eq!(run["runId"], run_id.as_str());
    assert_eq!(keys(run), keys(recorded_run));
    assert_eq!(
        run["toolCalls"][0]["suspendPayload"],
        recorded_run["toolCalls"][0]["suspendPayload"]
    );
    assert_eq!(run["toolCalls"][0]["requiresApproval"], false);
    // Mastra's field order, checked on the raw text.
    assert!(
        raw.contains(r#"{"toolCallId":"#)
            && raw.contains(r#""toolName":"ask_user","requiresApproval":false,"suspendPayload":"#)
    );
    assert!(run["suspendedAt"].as_str().unwrap().ends_with('Z'));

    let tool_call_id = run["toolCalls"][0]["toolCallId"].as_str().unwrap();
    let resumed = server
        .post_sse(
            "/api/agents/assistant/resume-stream",
            json!({"runId": run_id, "toolCallId": tool_call_id, "resumeData": "staging"}),
        )
        .await;
    assert_eq!(resumed.status, 200);
    let after: Value = server
        .get("/api/agents/assistant/suspended-runs")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(after, recorded[3].json());
}

#[tokio::test]
async fn suspended_runs_come_a_page_at_a_time_newest_first_with_the_total_and_bad_pages_refused() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let mut started = Vec::new();
    for _ in 0..5 {
        let run = server
            .post_sse("/api/agents/assistant/stream", json!({"messages": PROMPT}))
            .await;
        started.push(run.chunks[0]["runId"].as_str().unwrap().to_owned());
    }
    let newest_first: Vec<String> = started.iter().rev().cloned().collect();
    let page = |query: &'static str| {
        let server = &server;
        async move {
            let response = server
                .get(&format!("/api/agents/assistant/suspended-runs{query}"))
                .await;
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let ids = |body: &Value| -> Vec<String> {
        body["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["runId"].as_str().unwrap().to_owned())
            .collect()
    };

    let (status, first) = page("?perPage=2").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(ids(&first), newest_first[..2]);
    assert_eq!(
        (&first["total"], &first["page"], &first["perPage"], &first["hasMore"]),
        (&json!(5), &json!(0), &json!(2), &json!(true))
    );
    let (_, last) = page("?page=2&perPage=2").await;
    assert_eq!(ids(&last), newest_first[4..]);
    assert_eq!((&last["total"], &last["hasMore"]), (&json!(5), &json!(false)));
    let (status, beyond) = page("?page=9&perPage=2").await;
    assert_eq!(status, 200);
    assert_eq!(
        (ids(&beyond).len(), &beyond["total"], &beyond["hasMore"]),
        (0, &json!(5), &json!(false))
    );
    // No page named: Mastra's body (runs and total), at most the default page.
    let (_, plain) = page("").await;
    assert_eq!(ids(&plain), newest_first);
    assert_eq!(keys(&plain), vec!["runs", "total"]);

    for (query, says) in [
        ("?perPage=0", "perPage 0 is out of range; give 1 to 1000"),
        ("?perPage=1001", "perPage 1001 is out of range"),
        ("?page=-1", "page"),
        ("?page=4294967295&perPage=2", "pages count from 0"),
    ] {
        let (status, body) = page(query).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.to_string().contains(says), "{query}: {body}");
    }
}

#[tokio::test]
async fn approve_tool_call_runs_the_tool_and_matches_the_recorded_exchange() {
    let recorded = trace("approve");
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store), approver(&store)], store).await;
    let started = server
        .post_sse("/api/agents/approver/stream", json!({"messages": PROMPT}))
        .await;
    assert_eq!(folded_types(&started.chunks), folded_types(&recorded[0].chunks()));
    let approval = started.first("tool-call-approval");
    let run_id = approval["runId"].as_str().unwrap().to_owned();
    let tool_call_id = approval["payload"]["toolCallId"].as_str().unwrap().to_owned();

    let listed = server
        .get("/api/agents/approver/suspended-runs")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        listed.contains(r#""toolName":"ask_approval","args":{"#) && listed.contains(r#""requiresApproval":true}"#),
        "{listed}"
    );

    let approved = server
        .post_sse(
            "/api/agents/approver/approve-tool-call",
            json!({"runId": run_id, "toolCallId": tool_call_id}),
        )
        .await;
    assert_eq!(folded_types(&approved.chunks), folded_types(&recorded[2].chunks()));
    assert!(approved.text().contains("staging-approved"));
}

#[tokio::test]
async fn decline_tool_call_never_runs_the_tool_and_tells_the_model_the_reason() {
    let recorded = trace("decline");
    let store = memory_store();
    let server = TestServer::start(vec![approver(&store)], store).await;
    let started = server
        .post_sse("/api/agents/approver/stream", json!({"messages": PROMPT}))
        .await;
    let approval = started.first("tool-call-approval");
    let run_id = approval["runId"].as_str().unwrap().to_owned();
    let body = json!({"runId": run_id, "toolCallId": approval["payload"]["toolCallId"], "reason": "the interop check declined this call"});
    let declined = server.post_sse("/api/agents/approver/decline-tool-call", body).await;
    assert_eq!(folded_types(&declined.chunks), folded_types(&recorded[2].chunks()));
    let denied = declined.first("tool-output-denied");
    assert_eq!(denied["payload"]["approval"]["approved"], false);
    assert!(declined.text().contains("the interop check declined this call"));
    assert!(!declined.text().contains("staging-approved"));
}

#[tokio::test]
async fn get_agents_is_keyed_by_id_with_mastra_fields() {
    let recorded = trace("agents");
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store), approver(&store)], store).await;
    let ours: Value = server.get("/api/agents").await.json().await.unwrap();
    let theirs = recorded[0].json();
    assert_eq!(keys(&ours), keys(&theirs));
    for id in ["assistant", "approver"] {
        for field in [
            "id",
            "name",
            "description",
            "instructions",
            "tools",
            "agents",
            "workflows",
            "provider",
            "modelId",
        ] {
            assert!(ours[id].get(field).is_some(), "{id}.{field}");
        }
        assert_eq!(ours[id]["name"], theirs[id]["name"]);
        assert_eq!(ours[id]["instructions"], theirs[id]["instructions"]);
        assert_eq!(keys(&ours[id]["tools"]), keys(&theirs[id]["tools"]));
    }
    let tool = &ours["approver"]["tools"]["ask_approval"];
    assert_eq!(tool["requireApproval"], true);
    let schema: Value = serde_json::from_str(tool["inputSchema"].as_str().unwrap()).unwrap();
    assert_eq!(schema["json"]["type"], "object");
    assert_eq!(ours["assistant"]["tools"]["ask_user"]["requireApproval"], false);

    let one: Value = server.get("/api/agents/approver").await.json().await.unwrap();
    assert_eq!(one, ours["approver"]);
}

#[tokio::test]
async fn generate_answers_with_the_run_id_and_pending_calls_when_it_suspends() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let response = server
        .post("/api/agents/assistant/generate", json!({"messages": PROMPT}))
        .await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let output: Value = response.json().await.unwrap();
    assert_eq!(output["finishReason"], "suspended");
    assert_eq!(output["status"], "suspended");
    let run_id = output["runId"].as_str().unwrap();
    let pending = &output["pendingToolCalls"][0];
    assert_eq!(pending["toolName"], "ask_user");
    assert_eq!(
        output["suspendPayload"]["question"],
        "Which environment should I deploy to?"
    );

    let resumed = server
        .post_sse(
            "/api/agents/assistant/resume-stream",
            json!({"runId": run_id, "toolCallId": pending["toolCallId"], "resumeData": "production"}),
        )
        .await;
    assert!(resumed.text().contains("production"));
    assert_eq!(resumed.types().last().unwrap(), "finish");
}

#[tokio::test]
async fn resume_without_tool_call_id_answers_the_only_pending_call() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let (run_id, _) = suspended_run(&server).await;
    let resumed = server
        .post_sse(
            "/api/agents/assistant/resume-stream",
            json!({"runId": run_id, "resumeData": "staging"}),
        )
        .await;
    assert_eq!(resumed.status, 200);
    assert_eq!(resumed.types().last().unwrap(), "finish");
}

/// The payload keys of each chunk type, from the first chunk of that type.
fn payload_keys(chunks: &[Value]) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut out = std::collections::BTreeMap::new();
    for chunk in chunks {
        let keys = chunk["payload"].as_object().unwrap().keys().cloned().collect();
        out.entry(chunk["type"].as_str().unwrap().to_owned()).or_insert(keys);
    }
    out
}

#[tokio::test]
async fn every_chunk_has_the_envelope_order_and_payload_keys_of_the_recorded_mastra_chunks() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store), approver(&store)], store).await;
    let scenarios = [
        ("single", "assistant", "resume-stream"),
        ("approve", "approver", "approve-tool-call"),
        ("decline", "approver", "decline-tool-call"),
    ];
    for (scenario, agent, route) in scenarios {
        let recorded = trace(scenario);
        let started = server
            .post_sse(&format!("/api/agents/{agent}/stream"), json!({"messages": PROMPT}))
            .await;
        let last = started.chunks.last().unwrap();
        // Each route's own fields, as Mastra's client sends them.
        let mut body = json!({"runId": last["runId"], "toolCallId": last["payload"]["toolCallId"]});
        match route {
            "resume-stream" => body["resumeData"] = json!("staging"),
            "decline-tool-call" => body["reason"] = json!("no"),
            _ => {}
        }
        let answered = server.post_sse(&format!("/api/agents/{agent}/{route}"), body).await;
        let answer_index = recorded.iter().position(|e| e.path.ends_with(route)).unwrap();
        for (ours, theirs) in [(&started, &recorded[0]), (&answered, &recorded[answer_index])] {
            assert_eq!(
                payload_keys(&ours.chunks),
                payload_keys(&theirs.chunks()),
                "{scenario} {}",
                theirs.path
            );
            for (frame, chunk) in ours.body.split_terminator("\n\n").zip(&ours.chunks) {
                let envelope = format!(
                    "data: {{\"type\":{},\"runId\":{},\"from\":\"AGENT\",\"payload\":",
                    chunk["type"], chunk["runId"]
                );
                assert!(frame.starts_with(&envelope), "{scenario}: {frame}");
            }
        }
    }
}

#[tokio::test]
async fn reasoning_streams_as_mastras_reasoning_chunks_and_stays_out_of_the_stored_conversation() {
    let store = memory_store();
    let script = json!({"turns": [{"reasoning": "They want a greeting.", "text": "Hello there."}]});
    let thinker = askloop::Agent::builder("thinker")
        .model(scripted(&script.to_string()))
        .store(std::sync::Arc::clone(&store))
        .build()
        .unwrap();
    let server = TestServer::start(vec![thinker], store).await;
    let sse = server
        .post_sse("/api/agents/thinker/stream", json!({"messages": "Hi."}))
        .await;
    assert_eq!(sse.status, 200, "{}", sse.body);
    assert_eq!(
        folded_types(&sse.chunks),
        [
            "start",
            "step-start",
            "reasoning-start",
            "reasoning-delta",
            "reasoning-delta",
            "reasoning-delta",
            "reasoning-delta",
            "reasoning-end",
            "text-start",
            "text-delta",
            "text-end",
            "step-finish",
            "finish"
        ]
    );
    let reasoning = sse.first("reasoning-start")["payload"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let payloads: Vec<&Value> = sse
        .chunks
        .iter()
        .filter(|c| c["type"].as_str().unwrap().starts_with("reasoning-"))
        .map(|c| &c["payload"])
        .collect();
    assert_eq!(
        payloads,
        [
            &json!({"id": reasoning}),
            &json!({"id": reasoning, "text": "They "}),
            &json!({"id": reasoning, "text": "want "}),
            &json!({"id": reasoning, "text": "a "}),
            &json!({"id": reasoning, "text": "greeting."}),
            &json!({"id": reasoning}),
        ]
    );
    assert_ne!(sse.first("text-start")["payload"]["id"], json!(reasoning));
    // The step's and the run's conversation hold the answer, not the reasoning.
    for kind in ["step-finish", "finish"] {
        let finish = sse.first(kind).to_string();
        assert!(
            finish.contains("Hello there.") && !finish.contains("greeting"),
            "{finish}"
        );
    }
    let run_id = sse.chunks[0]["runId"].as_str().unwrap();
    let stored = stored_run(&server, run_id).await.to_string();
    assert!(!stored.contains("greeting"), "{stored}");
}

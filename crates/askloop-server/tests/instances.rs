//! Two servers on one PostgreSQL database (each with its own connection
//! pool, as two `askloop serve` processes would have) behave as one
//! service: a run suspended through one is listed, answered and continued
//! through the other, and the same answer sent to both at once gives one
//! success and one 409; a thread started through one is continued through
//! the other.
//!
//! Needs `ASKLOOP_TEST_DATABASE_URL`; skipped without it, except under
//! `CI=true`, where a missing database fails the test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use askloop::RunStore;
use askloop_store::conformance::{drop_schema, postgres_test_url, unique_schema_name};
use askloop_store::{PostgresOptions, PostgresStore};
use common::*;
use serde_json::{Value, json};

/// Two servers on two stores of one schema, and how to clean up.
struct TwoInstances {
    a: TestServer,
    b: TestServer,
    stores: [PostgresStore; 2],
    url: String,
    schema: String,
}

impl TwoInstances {
    async fn start(test: &str) -> Option<TwoInstances> {
        let url = postgres_test_url(test)?;
        let schema = unique_schema_name();
        let connect =
            || PostgresStore::connect_with(&url, PostgresOptions::default().schema(&schema).max_connections(4));
        let first = connect().await.unwrap();
        let second = connect().await.unwrap();
        let (store_a, store_b): (Arc<dyn RunStore>, Arc<dyn RunStore>) =
            (Arc::new(first.clone()), Arc::new(second.clone()));
        let a = TestServer::start(vec![assistant(&store_a), approver(&store_a), talker(&store_a)], store_a).await;
        let b = TestServer::start(vec![assistant(&store_b), approver(&store_b), talker(&store_b)], store_b).await;
        Some(TwoInstances {
            a,
            b,
            stores: [first, second],
            url,
            schema,
        })
    }

    async fn finish(self) {
        drop(self.a);
        drop(self.b);
        for store in &self.stores {
            store.close().await;
        }
        drop_schema(&self.url, &self.schema).await;
    }
}

/// An agent for a conversation of two exchanges: a question, then text;
/// on a thread holding that, another question, then text naming the
/// thread's first message.
fn talker(store: &Arc<dyn RunStore>) -> askloop::Agent {
    const SCRIPT: &str = r#"{"turns": [
      {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?"}}]},
      {"text": "Deploying to {{toolResults}}."},
      {"toolCalls": [{"name": "ask_user", "args": {"question": "Again: which environment?"}}]},
      {"text": "Deploying again to {{toolResults}}; you first asked: {{input}}"}
    ]}"#;
    askloop::Agent::builder("talker")
        .model(scripted(SCRIPT))
        .tool(askloop::AskUser::new())
        .store(Arc::clone(store))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thread_is_continued_through_the_other_instance_with_its_context_and_its_waiting_question() {
    let Some(both) = TwoInstances::start("two instances: a thread").await else {
        return;
    };
    let memory = json!({"thread": "t1", "resource": "ana"});
    let first = both
        .a
        .post_sse(
            "/api/agents/talker/stream",
            json!({"messages": "Deploy the app.", "memory": memory}),
        )
        .await;
    let asked = first.first("tool-call-suspended");
    let answer =
        json!({"runId": asked["runId"], "toolCallId": asked["payload"]["toolCallId"], "resumeData": "staging"});
    let answered = both.b.post_sse("/api/agents/talker/resume-stream", answer).await;
    assert_eq!(answered.text(), "Deploying to User answered: staging.");

    let second = both
        .b
        .post_sse(
            "/api/agents/talker/stream",
            json!({"messages": "Now again.", "memory": memory}),
        )
        .await;
    let again = second.first("tool-call-suspended");
    assert_eq!(
        again["payload"]["suspendPayload"]["question"], "Again: which environment?",
        "instance B read the thread instance A wrote"
    );
    let messages: Value = both
        .a
        .get("/api/memory/threads/t1/messages?agentId=talker")
        .await
        .json()
        .await
        .unwrap();
    let roles: Vec<&str> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "assistant", "user", "assistant"]);
    let waiting = &messages["messages"][4]["content"]["metadata"]["suspendedTools"];
    assert_eq!(
        waiting[again["payload"]["toolCallId"].as_str().unwrap()]["runId"],
        again["runId"]
    );
    let answer =
        json!({"runId": again["runId"], "toolCallId": again["payload"]["toolCallId"], "resumeData": "production"});
    let done = both.a.post_sse("/api/agents/talker/resume-stream", answer).await;
    assert_eq!(
        done.text(),
        "Deploying again to User answered: production; you first asked: Deploy the app."
    );
    both.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_suspended_through_one_instance_is_listed_answered_and_continued_through_the_other() {
    let Some(both) = TwoInstances::start("two instances: suspend and resume").await else {
        return;
    };
    let (run_id, _) = suspended_run(&both.a).await;

    let listed: Value = both
        .b
        .get("/api/agents/assistant/suspended-runs")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["total"], 1);
    assert_eq!(listed["runs"][0]["runId"], run_id.as_str());
    let runs: Value = both.b.get("/api/runs?status=suspended").await.json().await.unwrap();
    assert_eq!(runs["runs"][0]["runId"], run_id.as_str());

    let call = listed["runs"][0]["toolCalls"][0]["toolCallId"].as_str().unwrap();
    let resumed = both
        .b
        .post_sse(
            "/api/agents/assistant/resume-stream",
            json!({"runId": run_id, "toolCallId": call, "resumeData": "staging"}),
        )
        .await;
    assert_eq!(resumed.status, 200);
    assert_eq!(resumed.types().last().unwrap(), "finish");
    assert!(resumed.text().contains("staging"));

    assert_eq!(stored_run(&both.a, &run_id).await["status"], "completed");
    let again = both
        .a
        .post(
            "/api/agents/assistant/resume-stream",
            json!({"runId": run_id, "toolCallId": call, "resumeData": "staging"}),
        )
        .await;
    assert_eq!(again.status(), 409);
    both.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_answer_sent_to_both_instances_at_once_gives_one_success_and_one_409() {
    let Some(both) = TwoInstances::start("two instances: concurrent resumes").await else {
        return;
    };
    for round in 0..5 {
        let (run_id, call) = suspended_run(&both.a).await;
        let body = json!({"runId": run_id, "toolCallId": call, "resumeData": "production"});
        let (via_a, via_b) = tokio::join!(
            both.a.post("/api/agents/assistant/resume-stream", body.clone()),
            both.b.post("/api/agents/assistant/resume-stream", body.clone()),
        );
        assert_eq!(sorted_statuses(&[&via_a, &via_b]), [200, 409], "round {round}");
        let winner = if via_a.status() == 200 { via_a } else { via_b };
        assert_eq!(Sse::read(winner).await.types().last().unwrap(), "finish");
        let run = stored_run(&both.b, &run_id).await;
        assert_eq!(tool_results(&run), 1, "round {round}: answered once");
    }

    // An approval, too: one instance runs the tool, the other gets a 409.
    let started = both
        .a
        .post_sse("/api/agents/approver/stream", json!({"messages": PROMPT}))
        .await;
    let approval = started.first("tool-call-approval");
    let body = json!({"runId": approval["runId"], "toolCallId": approval["payload"]["toolCallId"]});
    let (via_a, via_b) = tokio::join!(
        both.a.post("/api/agents/approver/approve-tool-call", body.clone()),
        both.b.post("/api/agents/approver/approve-tool-call", body.clone()),
    );
    assert_eq!(sorted_statuses(&[&via_a, &via_b]), [200, 409]);
    drop((via_a, via_b));
    both.finish().await;
}

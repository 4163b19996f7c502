//! Requests and checks the HTTP tests repeat: start a run to its question,
//! read a stored run, read an error body, the statuses of racing answers.

use serde_json::{Value, json};

use super::TestServer;

/// The prompt of the recorded Mastra scenarios.
pub const PROMPT: &str = "Deploy the app. Ask me which environment first.";

/// Starts a run of `assistant` and returns its id and pending call id.
pub async fn suspended_run(server: &TestServer) -> (String, String) {
    let started = server
        .post_sse("/api/agents/assistant/stream", json!({"messages": PROMPT}))
        .await;
    let suspended = started.first("tool-call-suspended");
    (
        suspended["runId"].as_str().unwrap().to_owned(),
        suspended["payload"]["toolCallId"].as_str().unwrap().to_owned(),
    )
}

/// Starts a run of `approver` and returns its id and the call waiting for
/// approval.
pub async fn approval_run(server: &TestServer) -> (String, String) {
    let started = server
        .post_sse("/api/agents/approver/stream", json!({"messages": PROMPT}))
        .await;
    let approval = started.first("tool-call-approval");
    (
        approval["runId"].as_str().unwrap().to_owned(),
        approval["payload"]["toolCallId"].as_str().unwrap().to_owned(),
    )
}

/// `GET /api/runs/{run_id}`.
pub async fn stored_run(server: &TestServer, run_id: &str) -> Value {
    let response = server.get(&format!("/api/runs/{run_id}")).await;
    assert_eq!(response.status(), 200, "run {run_id}");
    response.json().await.unwrap()
}

/// How many answers (tool results) a stored run holds.
pub fn tool_results(run: &Value) -> usize {
    run["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .count()
}

/// An error response's status and its `error` object, checking the shape
/// every error has: JSON `{"error": {"code", "message"}}`.
pub async fn error_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "status {status}"
    );
    let body: Value = response.json().await.unwrap();
    let error = &body["error"];
    assert!(error["code"].is_string() && error["message"].is_string(), "{body}");
    (status, error.clone())
}

/// The statuses of racing requests, sorted (the order they finished in is
/// not the point).
pub fn sorted_statuses(responses: &[&reqwest::Response]) -> Vec<u16> {
    let mut statuses: Vec<u16> = responses.iter().map(|r| r.status().as_u16()).collect();
    statuses.sort_unstable();
    statuses
}

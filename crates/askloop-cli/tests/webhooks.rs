//! Webhooks end to end: real `askloop serve` processes on a real SQLite
//! file, POSTing to a receiver (axum, in this test) that checks every
//! signature itself (HMAC-SHA256 computed here, with the same crates any
//! Rust receiver would use) and counts, per `webhook-id`, the attempts and
//! the deliveries it accepted. Each event must be accepted exactly once:
//! when the receiver fails the first two attempts of each, and when the
//! server is SIGKILLed after the event was stored but before it was
//! delivered, and started again; and an answer given through the CLI
//! with the server's configuration is announced like one given over HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

mod common;

use common::{Asked, Serve, Serving, askloop};

/// 32 random bytes, as `whsec_` + base64.
const SECRET: &str = "whsec_c2VjcmV0LWZvci10aGUtd2ViaG9vay10ZXN0cy0xMjM0NQ==";

const SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?"}}]},
  {"text": "Deploying to {{toolResults}}"}
]}"#;

/// What the receiver saw of one `webhook-id`.
#[derive(Debug, Default, Clone)]
struct Seen {
    attempts: usize,
    accepted: usize,
    bad_signatures: usize,
    body: Value,
}

#[derive(Debug, Default)]
struct Receiver {
    by_id: BTreeMap<String, Seen>,
    /// Refuse (500) this many first attempts of every id.
    fail_first: usize,
    /// Refuse everything (500) while true.
    down: bool,
}

type Shared = Arc<Mutex<Receiver>>;

/// Checks the Standard Webhooks signature the way a receiver should:
/// HMAC-SHA256 keyed with the base64-decoded part of the secret after
/// `whsec_`, over `{id}.{timestamp}.{body}`, compared in constant time
/// with each `v1,` signature of the header.
fn signature_is_valid(headers: &HeaderMap, body: &str) -> bool {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let (id, timestamp) = (header("webhook-id"), header("webhook-timestamp"));
    let key = base64::engine::general_purpose::STANDARD
        .decode(SECRET.strip_prefix("whsec_").unwrap())
        .unwrap();
    header("webhook-signature").split(' ').any(|sig| {
        let Some(encoded) = sig.strip_prefix("v1,") else {
            return false;
        };
        let Ok(given) = base64::engine::general_purpose::STANDARD.decode(encoded) else {
            return false;
        };
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).unwrap();
        mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
        mac.verify_slice(&given).is_ok()
    })
}

async fn receive(State(shared): State<Shared>, headers: HeaderMap, body: String) -> StatusCode {
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("(none)")
        .to_owned();
    let valid = signature_is_valid(&headers, &body);
    let mut receiver = shared.lock().unwrap();
    let (fail_first, down) = (receiver.fail_first, receiver.down);
    let seen = receiver.by_id.entry(id).or_default();
    seen.attempts += 1;
    seen.body = serde_json::from_str(&body).unwrap_or(Value::Null);
    if !valid {
        seen.bad_signatures += 1;
        return StatusCode::UNAUTHORIZED;
    }
    if down || seen.attempts <= fail_first {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    seen.accepted += 1;
    StatusCode::NO_CONTENT
}

/// Starts the receiver; returns its URL.
async fn start_receiver(shared: Shared) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(shared);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/hook")
}

fn write_config(dir: &Path, hook: &str) {
    std::fs::write(dir.join("deploy.json"), SCRIPT).unwrap();
    std::fs::write(
        dir.join("askloop.toml"),
        format!(
            "public_url = \"https://askloop.example.com/\"\n\n\
             [agents.deployer]\nscript = \"deploy.json\"\n\n\
             [[webhooks]]\nurl = \"{hook}\"\nsecret_env = \"TEST_WEBHOOK_SECRET\"\ntimeout = \"5s\"\n"
        ),
    )
    .unwrap();
}

fn start(dir: &Path) -> Serving {
    Serve::in_dir(dir)
        .env("TEST_WEBHOOK_SECRET", SECRET)
        .config(dir.join("askloop.toml"))
        .start()
}

/// Starts a run that asks one question; returns the run id and the call id.
async fn ask(client: &reqwest::Client, server: &Serving) -> Asked {
    server.ask(client, "deployer", None).await
}

async fn answer(client: &reqwest::Client, server: &Serving, asked: &Asked) {
    let body = server.answer(client, "deployer", asked).await;
    assert!(body.contains("Deploying to"), "{body}");
}

/// Waits (up to 60 s) until `done` holds of what the receiver saw.
async fn wait_for(shared: &Shared, what: &str, done: impl Fn(&Receiver) -> bool) {
    for _ in 0..1200 {
        if done(&shared.lock().unwrap()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "timed out waiting for {what}; the receiver saw {:#?}",
        shared.lock().unwrap()
    );
}

/// Waits (up to 60 s) until the run's `count` notifications are all
/// recorded delivered. From then on no sender takes any of them again, so
/// what the receiver saw is all it will ever see of them.
async fn until_all_delivered(client: &reqwest::Client, server: &Serving, run_id: &str, count: usize) {
    let url = server.url(&format!("/api/runs/{run_id}/deliveries"));
    let mut listed = Value::Null;
    for _ in 0..1200 {
        listed = client.get(&url).send().await.unwrap().json().await.unwrap();
        let states: Vec<&Value> = listed["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| &d["state"])
            .collect();
        if states.len() == count && states.iter().all(|state| *state == "delivered") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the {count} notifications of {run_id} were not all recorded delivered: {listed:#}");
}

/// The ids the receiver saw for events of `kind`.
fn ids_of(receiver: &Receiver, kind: &str) -> Vec<String> {
    receiver
        .by_id
        .iter()
        .filter(|(_, seen)| seen.body["type"] == kind)
        .map(|(id, _)| id.clone())
        .collect()
}

fn accepted(receiver: &Receiver, kind: &str) -> usize {
    receiver
        .by_id
        .values()
        .filter(|seen| seen.body["type"] == kind)
        .map(|seen| seen.accepted)
        .sum()
}

#[tokio::test]
async fn each_event_is_delivered_once_signed_even_when_the_receiver_fails_its_first_two_attempts() {
    let shared: Shared = Arc::new(Mutex::new(Receiver {
        fail_first: 2,
        ..Receiver::default()
    }));
    let hook = start_receiver(Arc::clone(&shared)).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &hook);
    let server = start(dir.path());
    let client = reqwest::Client::new();

    let asked = ask(&client, &server).await;
    let (run_id, call_id) = (asked.run_id.clone(), asked.call_id.clone());
    wait_for(&shared, "the question.raised delivery", |r| {
        accepted(r, "question.raised") == 1
    })
    .await;
    answer(&client, &server, &asked).await;
    wait_for(&shared, "the question.answered delivery", |r| {
        accepted(r, "question.answered") == 1
    })
    .await;
    // Once both are recorded delivered, nothing is sent again.
    until_all_delivered(&client, &server, &run_id, 2).await;

    let receiver = shared.lock().unwrap();
    assert_eq!(receiver.by_id.len(), 2, "one webhook-id per event: {receiver:#?}");
    for (id, seen) in &receiver.by_id {
        assert!(id.starts_with("msg_"), "{id}");
        assert_eq!(seen.bad_signatures, 0, "{id}: every signature checks out");
        assert_eq!(seen.accepted, 1, "{id}: accepted exactly once");
        assert_eq!(
            seen.attempts, 3,
            "{id}: two refused attempts, then the accepted one, same id"
        );
        let data = &seen.body["data"];
        assert_eq!(data["runId"], run_id.as_str());
        assert_eq!(data["agentId"], "deployer");
        assert_eq!(data["toolCallId"], call_id.as_str());
        assert_eq!(data["toolName"], "ask_user");
        assert_eq!(data["suspendPayload"]["question"], "Which environment?");
        assert_eq!(data["link"], format!("https://askloop.example.com/runs/{run_id}"));
        assert!(seen.body["timestamp"].is_string());
    }
    let answered = &receiver.by_id[&ids_of(&receiver, "question.answered")[0]].body["data"]["resolution"];
    assert_eq!(answered["kind"], "answered");
    assert_eq!(answered["via"], "http");
}

#[tokio::test]
async fn a_notification_stored_before_a_sigkill_is_delivered_once_by_the_next_server() {
    let shared: Shared = Arc::new(Mutex::new(Receiver {
        down: true,
        ..Receiver::default()
    }));
    let hook = start_receiver(Arc::clone(&shared)).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &hook);
    let client = reqwest::Client::new();

    let mut first = start(dir.path());
    let asked = ask(&client, &first).await;
    // The event is stored and was tried (and refused): kill the server
    // before it is delivered.
    wait_for(&shared, "a first attempt", |r| {
        r.by_id.values().any(|s| s.body["type"] == "question.raised")
    })
    .await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let before = shared.lock().unwrap().by_id.clone();
    assert!(
        before.values().all(|s| s.accepted == 0),
        "nothing delivered before the kill"
    );
    shared.lock().unwrap().down = false;

    let second = start(dir.path());
    wait_for(&shared, "the question.raised delivery after the restart", |r| {
        accepted(r, "question.raised") == 1
    })
    .await;
    answer(&client, &second, &asked).await;
    wait_for(&shared, "the question.answered delivery", |r| {
        accepted(r, "question.answered") == 1
    })
    .await;
    until_all_delivered(&client, &second, &asked.run_id, 2).await;

    let receiver = shared.lock().unwrap();
    assert_eq!(ids_of(&receiver, "question.raised").len(), 1, "{receiver:#?}");
    assert_eq!(ids_of(&receiver, "question.answered").len(), 1, "{receiver:#?}");
    for (id, seen) in &receiver.by_id {
        assert_eq!(seen.accepted, 1, "{id} accepted exactly once: {seen:#?}");
        assert_eq!(seen.bad_signatures, 0, "{id}");
    }
}

#[tokio::test]
async fn an_answer_given_through_the_cli_with_the_servers_configuration_is_announced_by_the_server() {
    let shared: Shared = Arc::new(Mutex::new(Receiver::default()));
    let hook = start_receiver(Arc::clone(&shared)).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &hook);
    let server = start(dir.path());
    let client = reqwest::Client::new();
    let asked = ask(&client, &server).await;
    let (run_id, call_id) = (asked.run_id.clone(), asked.call_id.clone());

    // The CLI builds the run's agent from the same file, webhooks'
    // subscriptions included: the notification is stored with the answer
    // and the server's sender delivers it.
    let answered = askloop()
        .env("TEST_WEBHOOK_SECRET", SECRET)
        .env("ASKLOOP_DB", dir.path().join("runs.db"))
        .env("USER", "ops-on-call")
        .current_dir(dir.path())
        .arg("--config")
        .arg(dir.path().join("askloop.toml"))
        .args(["resume", &run_id, "--answer", "staging"])
        .output()
        .unwrap();
    assert!(answered.status.success(), "{answered:?}");
    assert!(
        String::from_utf8_lossy(&answered.stdout).contains("Deploying to User answered: staging"),
        "{answered:?}"
    );
    wait_for(&shared, "the question.answered delivery", |r| {
        accepted(r, "question.answered") == 1
    })
    .await;

    let receiver = shared.lock().unwrap();
    let ids = ids_of(&receiver, "question.answered");
    assert_eq!(ids.len(), 1, "{receiver:#?}");
    let data = &receiver.by_id[&ids[0]].body["data"];
    assert_eq!(data["toolCallId"], call_id.as_str());
    assert_eq!(data["resolution"]["via"], "cli");
    assert_eq!(data["resolution"]["by"], "ops-on-call");
    drop(server);
}

#[tokio::test]
async fn a_webhook_with_a_secret_that_is_not_whsec_base64_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("deploy.json"), SCRIPT).unwrap();
    std::fs::write(
        dir.path().join("askloop.toml"),
        "[agents.deployer]\nscript = \"deploy.json\"\n\n[[webhooks]]\nurl = \"http://127.0.0.1:9/hook\"\nsecret = \"hunter2\"\n",
    )
    .unwrap();
    let out = Serve::in_dir(dir.path())
        .config("askloop.toml")
        .addr("127.0.0.1:0")
        .command()
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "bad configuration is bad usage: {stderr}");
    assert!(stderr.contains("webhooks[0].secret"), "{stderr}");
    assert!(stderr.contains("whsec_"), "{stderr}");
}

#[tokio::test]
async fn the_link_carries_a_run_id_with_spaces_slashes_and_marks_as_one_path_segment_that_opens_the_run() {
    let shared: Shared = Arc::default();
    let hook = start_receiver(Arc::clone(&shared)).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &hook);
    let server = start(dir.path());
    let client = reqwest::Client::new();

    let run_id = "a b/c?d#e<x>";
    let started = client
        .post(server.url("/api/agents/deployer/stream"))
        .json(&serde_json::json!({"messages": "Deploy the app.", "runId": run_id}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 200);
    let _ = started.text().await.unwrap();
    wait_for(&shared, "the question.raised delivery", |r| {
        accepted(r, "question.raised") == 1
    })
    .await;
    let link = {
        let receiver = shared.lock().unwrap();
        let raised = &receiver.by_id[&ids_of(&receiver, "question.raised")[0]];
        raised.body["data"]["link"].as_str().unwrap().to_owned()
    };
    assert_eq!(link, "https://askloop.example.com/runs/a%20b%2Fc%3Fd%23e%3Cx%3E");

    // The same path on the server opens the page, and the page's own read
    // of the run (the path segment, decoded) finds it.
    let path = link.strip_prefix("https://askloop.example.com").unwrap();
    let page = client.get(server.url(path)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("<html"));
    let run: Value = client
        .get(server.url(&format!("/api{path}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["runId"], run_id);
}

//! Questions in Slack over real HTTP: a fake Slack Web API (an axum server
//! on a loopback port, recording `chat.postMessage`, `chat.update` and the
//! interactions' `response_url` posts, and answering
//! `usergroups.users.list`), and interaction payloads built and signed as
//! Slack documents them (`application/x-www-form-urlencoded`, one field
//! `payload` with the `block_actions` JSON; `X-Slack-Signature` the `v0=`
//! HMAC-SHA256 of `v0:{timestamp}:{body}`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use askloop::{DeliveryState, Interface, ResolutionKind, RunStatus, RunStore};
use askloop_server::slack::{SlackRecipient, SlackSettings, slack_signature};
use askloop_server::{Server, ServerOptions, Webhooks};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use common::*;
use serde_json::{Value, json};

const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const CHANNEL: &str = "C0DEPLOY";

/// What the fake Slack API got, and how it answers.
#[derive(Default)]
struct FakeSlack {
    posted: Mutex<Vec<Value>>,
    updated: Mutex<Vec<Value>>,
    told: Mutex<Vec<Value>>,
    /// Posts answered 503 before one is taken.
    failures_left: AtomicUsize,
}

async fn post_message(State(slack): State<Arc<FakeSlack>>, Json(body): Json<Value>) -> impl IntoResponse {
    if slack
        .failures_left
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"ok": false}))).into_response();
    }
    let mut posted = slack.posted.lock().unwrap();
    posted.push(body.clone());
    let ts = format!("1700000000.{:06}", posted.len());
    Json(json!({"ok": true, "channel": body["channel"], "ts": ts})).into_response()
}

async fn update(State(slack): State<Arc<FakeSlack>>, Json(body): Json<Value>) -> Json<Value> {
    slack.updated.lock().unwrap().push(body);
    Json(json!({"ok": true}))
}

async fn usergroup(State(_): State<Arc<FakeSlack>>) -> Json<Value> {
    Json(json!({"ok": true, "users": ["U0GROUPIE"]}))
}

async fn respond(State(slack): State<Arc<FakeSlack>>, Path(_id): Path<String>, Json(body): Json<Value>) -> StatusCode {
    slack.told.lock().unwrap().push(body);
    StatusCode::OK
}

struct Setup {
    store: Arc<dyn RunStore>,
    server: TestServer,
    slack: Arc<FakeSlack>,
    api: String,
}

/// A server of `assistant` and `approver` posting to the fake Slack's
/// channel, where Alice and Bob (and the members of a user group) may
/// answer; the first `failing` posts are answered 503.
async fn setup(failing: usize) -> Setup {
    let slack = Arc::new(FakeSlack::default());
    slack.failures_left.store(failing, Ordering::SeqCst);
    let app = axum::Router::new()
        .route("/chat.postMessage", post(post_message))
        .route("/chat.update", post(update))
        .route("/usergroups.users.list", get(usergroup))
        .route("/respond/{id}", post(respond))
        .with_state(Arc::clone(&slack));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let mut channel = SlackRecipient::new(CHANNEL, ["U0ALICE", "U0BOB"]);
    channel.usergroup = Some("S0ONCALL".to_owned());
    let mut settings = SlackSettings::new("xoxb-test-token", SECRET);
    settings.api_url = api.clone();
    settings.recipients.push(("assistant".to_owned(), channel.clone()));
    settings.recipients.push(("approver".to_owned(), channel.clone()));

    let store = memory_store();
    let with_channel = |builder: askloop::AgentBuilder| {
        channel
            .subscriptions()
            .into_iter()
            .fold(builder, |builder, subscription| builder.notify(subscription))
    };
    let assistant = with_channel(
        askloop::Agent::builder("assistant")
            .model(scripted(DEPLOY_SCRIPT))
            .tool(askloop::AskUser::new())
            .store(Arc::clone(&store)),
    )
    .build()
    .unwrap();
    let tool = askloop::FunctionTool::builder("ask_approval")
        .description("Deploy.")
        .input_schema(json!({"type": "object", "properties": {"question": {"type": "string"}}}))
        .requires_approval(true)
        .execute(|_input: Value, _ctx| async move { Ok(askloop::ToolOutput::text("staging-approved").into()) });
    let approver = with_channel(
        askloop::Agent::builder("approver")
            .model(scripted(APPROVE_SCRIPT))
            .tool(tool)
            .store(Arc::clone(&store)),
    )
    .build()
    .unwrap();
    let mut webhooks = Webhooks::new(Vec::new(), None);
    webhooks.poll_every = Duration::from_millis(20);
    let server = Server::new(vec![assistant, approver], Arc::clone(&store))
        .unwrap()
        .options(ServerOptions::default().recover_every(Duration::ZERO))
        .webhooks(webhooks)
        .slack(settings)
        .unwrap();
    Setup {
        store,
        server: TestServer::serve(server).await,
        slack,
        api,
    }
}

impl Setup {
    /// Waits (10 s at most) for the `n`th post to the channel.
    async fn post_number(&self, n: usize) -> Value {
        for _ in 0..1000 {
            if let Some(post) = self.slack.posted.lock().unwrap().get(n - 1) {
                return post.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("post {n} never came: {:?}", self.slack.posted.lock().unwrap());
    }

    /// Waits (10 s at most) until a delivery of the run is recorded
    /// delivered: the sender is done with it, so what it posted is all it
    /// will post. The run's deliveries then.
    async fn until_delivered(&self, run_id: &str) -> Vec<askloop::Delivery> {
        for _ in 0..1000 {
            let deliveries = self.store.deliveries(run_id).await.unwrap();
            if deliveries.iter().any(|d| d.state == DeliveryState::Delivered) {
                return deliveries;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "no delivery of run {run_id} was recorded delivered: {:?}",
            self.store.deliveries(run_id).await
        );
    }

    /// Sends `payload` as Slack would: form-encoded, signed at `at`
    /// (seconds since the epoch) with `secret`; the status.
    async fn interact_signed(&self, payload: &Value, at: i64, secret: &str) -> u16 {
        self.interact_answer(payload, at, secret).await.0
    }

    /// The same, with the body of a refusal (`Null` for an empty body).
    async fn interact_answer(&self, payload: &Value, at: i64, secret: &str) -> (u16, Value) {
        let body: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish();
        self.interact_body(body, at, secret).await
    }

    /// Sends the form `body` as is, signed at `at` with `secret`.
    async fn interact_body(&self, body: String, at: i64, secret: &str) -> (u16, Value) {
        let timestamp = at.to_string();
        let signature = slack_signature(secret.as_bytes(), &timestamp, body.as_bytes());
        let answer = reqwest::Client::new()
            .post(self.server.url("/slack/interactions"))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("x-slack-request-timestamp", timestamp)
            .header("x-slack-signature", signature)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        let bytes = answer.bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        (status, body)
    }

    async fn interact(&self, payload: &Value) -> u16 {
        self.interact_signed(payload, chrono::Utc::now().timestamp(), SECRET)
            .await
    }

    async fn run(&self, run_id: &str) -> askloop::RunRecord {
        self.store.get(run_id).await.unwrap().unwrap()
    }

    async fn until_status(&self, run_id: &str, status: RunStatus) -> askloop::RunRecord {
        for _ in 0..1000 {
            let run = self.run(run_id).await;
            if run.status() == status {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("run {run_id} never became {status}: {:?}", self.run(run_id).await);
    }
}

/// A `block_actions` payload: `user` clicked `action` (with `value`) in
/// the block `block_id` of the message `ts` of the channel.
fn click(user: &str, block_id: &str, action: &str, value: &str, ts: &str, respond_to: &str) -> Value {
    json!({
        "type": "block_actions",
        "user": {"id": user, "username": user.to_lowercase(), "team_id": "T0TEAM"},
        "api_app_id": "A0APP",
        "token": "legacy-verification-token",
        "container": {"type": "message", "message_ts": ts, "channel_id": CHANNEL, "is_ephemeral": false},
        "trigger_id": "1234567890.0987654321.abcdef",
        "team": {"id": "T0TEAM", "domain": "example"},
        "channel": {"id": CHANNEL, "name": "deploys"},
        "message": {"type": "message", "ts": ts},
        "response_url": respond_to,
        "actions": [{
            "type": "button",
            "action_id": action,
            "block_id": block_id,
            "value": value,
            "text": {"type": "plain_text", "text": "production"},
            "action_ts": "1700000001.000200"
        }],
        "state": {"values": {}}
    })
}

/// The block id of the answers of a posted question.
fn answers_block(post: &Value) -> String {
    post["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|b| b["block_id"].as_str().filter(|id| id.starts_with("askloop.")))
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_recipients_click_answers_once_as_them_the_run_goes_on_and_the_message_says_who() {
    let setup = setup(0).await;
    let (run_id, _) = suspended_run(&setup.server).await;
    let post = setup.post_number(1).await;
    assert_eq!(post["channel"], CHANNEL);
    assert_eq!(
        (post["unfurl_links"].as_bool(), post["unfurl_media"].as_bool()),
        (Some(false), Some(false))
    );
    assert_eq!(
        post["blocks"][1]["text"]["text"],
        "Which environment should I deploy to?"
    );
    let block = answers_block(&post);
    let respond_to = format!("{}/respond/1", setup.api);
    let clicked = click("U0ALICE", &block, "answer_1", "1", "1700000000.000001", &respond_to);
    assert_eq!(setup.interact(&clicked).await, 200);

    let run = setup.until_status(&run_id, RunStatus::Completed).await;
    let decision = run.resolutions.iter().find(|r| r.tool_call_id.is_some()).unwrap();
    assert_eq!(decision.kind, ResolutionKind::Answered);
    assert_eq!(
        (decision.author.via, decision.author.by.as_deref()),
        (Interface::Slack, Some("U0ALICE"))
    );
    assert_eq!(
        run.schema_version(),
        6,
        "a run decided in Slack is stored at the layout older builds refuse"
    );
    let messages = setup.store.messages(&run_id).await.unwrap();
    assert!(
        format!("{messages:?}").contains("Deploying to User answered: production."),
        "{messages:?}"
    );

    let updated = setup.slack.updated.lock().unwrap().clone();
    assert_eq!(updated.len(), 1, "{updated:?}");
    assert_eq!(
        (updated[0]["channel"].as_str(), updated[0]["ts"].as_str()),
        (Some(CHANNEL), Some("1700000000.000001"))
    );
    assert_eq!(
        updated[0]["blocks"][1]["text"]["text"],
        ":white_check_mark: <@U0ALICE> answered: production"
    );
    assert!(
        updated[0]["blocks"].to_string().matches("askloop.").count() == 0,
        "nothing left to click"
    );

    // The same click again changes nothing, and says why.
    assert_eq!(setup.interact(&clicked).await, 200);
    let told = setup.slack.told.lock().unwrap().clone();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0]["response_type"], "ephemeral");
    assert!(told[0]["text"].as_str().unwrap().contains("already closed"), "{told:?}");
    assert_eq!(setup.run(&run_id).await.resolutions.len(), run.resolutions.len());
}

#[tokio::test]
async fn a_badly_signed_or_replayed_interaction_is_refused_and_changes_nothing() {
    let setup = setup(0).await;
    let (run_id, _) = suspended_run(&setup.server).await;
    let block = answers_block(&setup.post_number(1).await);
    let clicked = click("U0ALICE", &block, "answer_0", "0", "1.1", "");
    // A minute past each edge of the five-minute window: the server reads
    // its own clock later than this, by however long a loaded machine takes.
    let now = chrono::Utc::now().timestamp();
    let code = |(status, body): (u16, Value)| (status, body["error"]["code"].as_str().unwrap_or_default().to_owned());
    assert_eq!(
        code(setup.interact_answer(&clicked, now, "not-the-signing-secret").await),
        (401, "slack_bad_signature".to_owned())
    );
    assert_eq!(
        code(setup.interact_answer(&clicked, now - 360, SECRET).await),
        (401, "slack_stale_timestamp".to_owned()),
        "older than five minutes"
    );
    assert_eq!(
        code(setup.interact_answer(&clicked, now + 360, SECRET).await),
        (401, "slack_stale_timestamp".to_owned()),
        "from the future"
    );
    let unsigned = reqwest::Client::new()
        .post(setup.server.url("/slack/interactions"))
        .body(format!("payload={clicked}"))
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
    let body: Value = unsigned.json().await.unwrap();
    assert_eq!(body["error"]["code"], "slack_bad_signature", "{body}");
    assert_eq!(
        body["error"]["message"], "the request is not signed with this app's signing secret",
        "{body}"
    );
    // Each refusal was answered before anything was read or written for
    // it, and starts nothing in the background: the run is as it was.
    let run = setup.run(&run_id).await;
    assert_eq!(run.status(), RunStatus::Suspended);
    assert!(run.resolutions.is_empty(), "{:?}", run.resolutions);
    assert!(setup.slack.updated.lock().unwrap().is_empty());
}

/// A signed request that is no click askloop can read is a 400 with its
/// own code; one of another kind than a click gets Slack's plain 200.
#[tokio::test]
async fn a_signed_request_without_a_readable_click_is_refused_by_name_and_changes_nothing() {
    let setup = setup(0).await;
    let (run_id, _) = suspended_run(&setup.server).await;
    let now = chrono::Utc::now().timestamp();
    let (status, body) = setup.interact_body("nothing=here".to_owned(), now, SECRET).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("slack_no_payload")),
        "{body}"
    );
    let (status, body) = setup
        .interact_answer(&json!({"type": "block_actions", "actions": []}), now, SECRET)
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("slack_incomplete_click")),
        "{body}"
    );
    let (status, body) = setup
        .interact_answer(&json!({"type": "view_submission"}), now, SECRET)
        .await;
    assert_eq!((status, body), (200, Value::Null));
    let run = setup.run(&run_id).await;
    assert_eq!(run.status(), RunStatus::Suspended);
    assert!(run.resolutions.is_empty(), "{:?}", run.resolutions);
}

/// A server without `[slack]` has no interactions to take.
#[tokio::test]
async fn a_server_without_a_slack_app_answers_interactions_404_slack_off() {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store)], store).await;
    let answer = reqwest::Client::new()
        .post(server.url("/slack/interactions"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("payload=%7B%7D")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "slack_off", "{body}");
}

#[tokio::test]
async fn someone_not_among_the_recipients_is_told_so_alone_and_a_user_group_member_answers() {
    let setup = setup(0).await;
    let (run_id, _) = suspended_run(&setup.server).await;
    let block = answers_block(&setup.post_number(1).await);
    let respond_to = format!("{}/respond/mallory", setup.api);
    let mallory = click("U0MALLORY", &block, "answer_1", "1", "1.1", &respond_to);
    assert_eq!(setup.interact(&mallory).await, 200);
    let told = setup.slack.told.lock().unwrap().clone();
    assert_eq!(told.len(), 1);
    assert_eq!(
        (told[0]["response_type"].as_str(), told[0]["replace_original"].as_bool()),
        (Some("ephemeral"), Some(false))
    );
    assert!(
        told[0]["text"].as_str().unwrap().contains("not among the people"),
        "{told:?}"
    );
    assert_eq!(setup.run(&run_id).await.status(), RunStatus::Suspended);

    let groupie = click("U0GROUPIE", &block, "answer_0", "0", "1.1", &respond_to);
    assert_eq!(setup.interact(&groupie).await, 200);
    let run = setup.until_status(&run_id, RunStatus::Completed).await;
    assert_eq!(run.resolutions[0].author.by.as_deref(), Some("U0GROUPIE"));
}

#[tokio::test]
async fn of_two_people_clicking_at_once_exactly_one_answers_and_the_other_hears_who() {
    let setup = setup(0).await;
    let (run_id, _) = suspended_run(&setup.server).await;
    let block = answers_block(&setup.post_number(1).await);
    let alice = click(
        "U0ALICE",
        &block,
        "answer_0",
        "0",
        "1.1",
        &format!("{}/respond/alice", setup.api),
    );
    let bob = click(
        "U0BOB",
        &block,
        "answer_1",
        "1",
        "1.1",
        &format!("{}/respond/bob", setup.api),
    );
    let (a, b) = tokio::join!(setup.interact(&alice), setup.interact(&bob));
    assert_eq!((a, b), (200, 200));
    let run = setup.until_status(&run_id, RunStatus::Completed).await;
    let answers: Vec<_> = run.resolutions.iter().filter(|r| r.tool_call_id.is_some()).collect();
    assert_eq!(answers.len(), 1, "{answers:?}");
    let winner = answers[0].author.by.clone().unwrap();
    let told = setup.slack.told.lock().unwrap().clone();
    assert_eq!(told.len(), 1, "the one who lost hears of it: {told:?}");
    let text = told[0]["text"].as_str().unwrap();
    assert!(text.contains(&winner), "{text}");
    assert_eq!(setup.slack.updated.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn an_approval_is_approved_with_its_button() {
    let setup = setup(0).await;
    let (run_id, _) = approval_run(&setup.server).await;
    let post = setup.post_number(1).await;
    assert!(
        post["blocks"][1]["text"]["text"]
            .as_str()
            .unwrap()
            .contains("ask_approval"),
        "{post}"
    );
    let block = answers_block(&post);
    let clicked = click("U0BOB", &block, "approve", "approve", "1.1", "");
    assert_eq!(setup.interact(&clicked).await, 200);
    let run = setup.until_status(&run_id, RunStatus::Completed).await;
    let decision = run.resolutions.iter().find(|r| r.tool_call_id.is_some()).unwrap();
    assert_eq!(
        (decision.kind, decision.author.by.as_deref()),
        (ResolutionKind::Approved, Some("U0BOB"))
    );
}

#[tokio::test]
async fn a_slack_api_down_at_first_gets_the_question_posted_once_when_it_is_back() {
    let setup = setup(2).await;
    let (run_id, _) = suspended_run(&setup.server).await;
    setup.post_number(1).await;
    let deliveries = setup.until_delivered(&run_id).await;
    assert_eq!(setup.slack.posted.lock().unwrap().len(), 1, "posted once");
    assert_eq!(deliveries.len(), 1);
    assert_eq!(
        (deliveries[0].state, deliveries[0].attempts),
        (DeliveryState::Delivered, 3)
    );
}

#[tokio::test]
async fn a_question_answered_while_slack_was_down_is_not_posted_when_it_comes_back() {
    let setup = setup(usize::MAX).await;
    let (run_id, call_id) = suspended_run(&setup.server).await;
    let resumed = setup
        .server
        .post_sse(
            "/api/agents/assistant/resume-stream",
            json!({"runId": run_id, "toolCallId": call_id, "resumeData": "staging"}),
        )
        .await;
    assert!(resumed.types().contains(&"finish".to_owned()));
    setup.slack.failures_left.store(0, Ordering::SeqCst);
    for _ in 0..1000 {
        let deliveries = setup.store.deliveries(&run_id).await.unwrap();
        if deliveries[0].state == DeliveryState::Dead {
            let error = deliveries[0].last_error.clone().unwrap_or_default();
            assert!(error.starts_with("not sent: the question was closed"), "{error}");
            assert!(setup.slack.posted.lock().unwrap().is_empty());
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "the delivery was never given up on: {:?}",
        setup.store.deliveries(&run_id).await
    );
}

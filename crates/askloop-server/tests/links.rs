//! Answer links over real HTTP: a signed, single-use link answers one
//! waiting call as its recipient, without an API token; a GET never
//! answers; a used, expired, revoked or changed link says so and changes
//! nothing; a page of another site cannot answer through it; keys rotate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use askloop::{
    Agent, AskUser, EventType, Interface, ManualClock, MemoryStore, ResolutionKind, RunStatus, RunStore, Subscription,
};
use askloop_server::links::{AnswerLinks, LinkKey, LinkSettings};
use askloop_server::{ApiToken, Server, ServerOptions, Webhooks};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::*;
use serde_json::{Value, json};

const PUBLIC: &str = "http://askloop.test";

fn key(id: &str) -> LinkKey {
    LinkKey::new(id, format!("{id}-secret-of-at-least-thirty-two-chars").into_bytes())
}

fn links_with(keys: &[&str]) -> AnswerLinks {
    let settings = LinkSettings::new(key(keys[0]), keys[1..].iter().map(|k| key(k)));
    AnswerLinks::new(settings, PUBLIC)
}

/// A server of `assistant` and `approver` on `store` that makes links
/// signed with the first of `keys`.
async fn server_on(store: &Arc<dyn RunStore>, keys: &[&str]) -> TestServer {
    let server = Server::new(vec![assistant(store), approver(store)], Arc::clone(store))
        .unwrap()
        .options(ServerOptions::default().public_url(Some(PUBLIC.to_owned())))
        .links(links_with(keys));
    TestServer::serve(server).await
}

/// Mints a link for the only waiting call of `run_id`; returns the
/// response body (`url`, `linkId`, `expiresAt`, ...).
async fn mint(server: &TestServer, run_id: &str, body: Value) -> Value {
    let response = server.post(&format!("/api/runs/{run_id}/links"), body).await;
    assert_eq!(response.status(), 200, "minting a link for {run_id}");
    response.json().await.unwrap()
}

/// The path of a minted link on the test server.
fn path_of(link: &Value) -> String {
    link["url"].as_str().unwrap().strip_prefix(PUBLIC).unwrap().to_owned()
}

async fn question(server: &TestServer, path: &str) -> (u16, Value) {
    let response = server.get(&format!("{path}/question")).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn answer(server: &TestServer, path: &str, body: Value) -> (u16, Value) {
    let response = server.post(path, body).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn form_token(server: &TestServer, path: &str) -> String {
    let (status, body) = question(server, path).await;
    assert_eq!(status, 200, "{body}");
    body["formToken"].as_str().unwrap().to_owned()
}

/// Waits (up to 10 s) until the run is `status`, and returns it.
async fn until_status(store: &Arc<dyn RunStore>, run_id: &str, status: RunStatus) -> askloop::RunRecord {
    for _ in 0..1000 {
        let run = store.get(run_id).await.unwrap().unwrap();
        if run.status() == status {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("run {run_id} never became {status}");
}

/// A run of `assistant` waiting on its question, a link for it made out
/// to Alice, and the link's form token: `(run_id, path, form_token)`.
async fn question_for_alice(server: &TestServer) -> (String, String, String) {
    let (run_id, _) = suspended_run(server).await;
    let path = path_of(&mint(server, &run_id, json!({"to": "Alice"})).await);
    let token = form_token(server, &path).await;
    (run_id, path, token)
}

/// A server of `assistant` whose clock (and its store's) the test holds,
/// from 2030-01-01, making links with `settings`.
async fn held_clock_server(settings: LinkSettings) -> (ManualClock, Arc<dyn RunStore>, TestServer) {
    let clock = ManualClock::starting_at("2030-01-01T00:00:00Z".parse().unwrap());
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let agent = Agent::builder("assistant")
        .model(scripted(DEPLOY_SCRIPT))
        .tool(AskUser::new())
        .store(Arc::clone(&store))
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    let server = Server::new(vec![agent], Arc::clone(&store))
        .unwrap()
        .options(ServerOptions::default().recover_every(Duration::ZERO))
        .links(AnswerLinks::new(settings, PUBLIC));
    (clock, store, TestServer::serve(server).await)
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_link_answers_its_question_once_as_its_recipient_and_a_get_answers_nothing() {
    let store = memory_store();
    let server = server_on(&store, &["k1"]).await;
    let (run_id, call_id) = suspended_run(&server).await;
    let link = mint(&server, &run_id, json!({"to": "Alice"})).await;
    assert_eq!(
        (link["recipient"].as_str(), link["toolCallId"].as_str()),
        (Some("Alice"), Some(call_id.as_str()))
    );
    let path = path_of(&link);

    // The page and the question, read as often as a mail scanner likes.
    let page = server.get(&path).await;
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    for _ in 0..3 {
        let (status, shown) = question(&server, &path).await;
        assert_eq!(status, 200, "{shown}");
        assert_eq!(shown["recipient"], "Alice");
        assert_eq!(shown["call"]["toolCallId"], call_id.as_str());
        assert_eq!(
            shown["call"]["suspendPayload"]["question"],
            "Which environment should I deploy to?"
        );
    }
    let waiting = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!(waiting.status(), RunStatus::Suspended, "a GET never answers");
    assert!(waiting.resolutions.is_empty());

    let token = form_token(&server, &path).await;
    let (status, answered) = answer(&server, &path, json!({"formToken": token, "resumeData": "staging"})).await;
    assert_eq!(status, 200, "{answered}");
    assert_eq!(
        (answered["outcome"].as_str(), answered["recipient"].as_str()),
        (Some("answered"), Some("Alice"))
    );

    let done = until_status(&store, &run_id, RunStatus::Completed).await;
    let [resolution] = &done.resolutions[..] else {
        panic!("{:?}", done.resolutions)
    };
    assert_eq!(
        (resolution.kind, resolution.author.via, resolution.author.by.as_deref()),
        (ResolutionKind::Answered, Interface::Link, Some("Alice"))
    );
    assert_eq!(done.schema_version(), 5, "builds that do not know links refuse the run");
    let run = stored_run(&server, &run_id).await;
    assert_eq!(tool_results(&run), 1, "the tool ran once");

    // Used: said so, and nothing changes.
    let (status, again) = answer(&server, &path, json!({"formToken": token, "resumeData": "production"})).await;
    assert_eq!((status, code(&again)), (410, "link_used"), "{again}");
    let (status, shown) = question(&server, &path).await;
    assert_eq!((status, code(&shown)), (410, "link_used"));
    let after = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!((after.version, after.resolutions.len()), (done.version, 1));
}

#[tokio::test]
async fn a_changed_link_is_refused_and_changes_nothing() {
    let store = memory_store();
    let server = server_on(&store, &["k1"]).await;
    let (run_id, path, token) = question_for_alice(&server).await;
    let (prefix, signed) = path.rsplit_once('/').unwrap();
    let (claims, tag) = signed.split_once('.').unwrap();

    // The same claims, made out to someone else, with the old tag.
    let mut forged: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap();
    forged["to"] = json!("Mallory");
    let forged = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
    // The tag with one character changed.
    let flipped = format!("{}{}", if tag.starts_with('A') { 'B' } else { 'A' }, &tag[1..]);
    for changed in [
        format!("{prefix}/{forged}.{tag}"),
        format!("{prefix}/{claims}.{flipped}"),
        format!("{prefix}/{claims}"),
    ] {
        let (status, shown) = question(&server, &changed).await;
        assert_eq!((status, code(&shown)), (403, "link_invalid"), "{changed}");
        let (status, refused) = answer(&server, &changed, json!({"formToken": token, "resumeData": "staging"})).await;
        assert_eq!((status, code(&refused)), (403, "link_invalid"), "{changed}");
    }
    let run = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!((run.status(), run.resolutions.len()), (RunStatus::Suspended, 0));
    assert_eq!(question(&server, &path).await.0, 200, "the real link still works");
}

#[tokio::test]
async fn an_expired_link_says_so_and_a_link_never_outlives_the_configured_age() {
    let settings = LinkSettings::new(key("k1"), []).max_age(Duration::from_secs(3600));
    let (clock, store, server) = held_clock_server(settings).await;
    let (run_id, _) = suspended_run(&server).await;

    let long = mint(&server, &run_id, json!({"to": "Alice", "expiresIn": "3d"})).await;
    assert_eq!(
        long["expiresAt"], "2030-01-01T01:00:00.000Z",
        "at most the configured age"
    );
    let short = mint(&server, &run_id, json!({"to": "Bob", "expiresIn": "60s"})).await;
    assert_eq!(short["expiresAt"], "2030-01-01T00:01:00.000Z");
    let path = path_of(&short);
    let token = form_token(&server, &path).await;

    clock.advance(Duration::from_secs(120));
    let (status, shown) = question(&server, &path).await;
    assert_eq!((status, code(&shown)), (410, "link_expired"), "{shown}");
    let (status, refused) = answer(&server, &path, json!({"formToken": token, "resumeData": "staging"})).await;
    assert_eq!((status, code(&refused)), (410, "link_expired"));
    let run = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!((run.status(), run.resolutions.len()), (RunStatus::Suspended, 0));
    assert_eq!(
        question(&server, &path_of(&long)).await.0,
        200,
        "the longer link still works"
    );
}

#[tokio::test]
async fn a_link_taken_by_a_process_that_died_before_storing_its_answer_opens_again_a_minute_later() {
    let (clock, store, server) = held_clock_server(LinkSettings::new(key("k1"), [])).await;
    let (run_id, _) = suspended_run(&server).await;
    let link = mint(&server, &run_id, json!({"to": "Alice"})).await;
    let path = path_of(&link);
    let token = form_token(&server, &path).await;
    // What a process that died between the two writes leaves: the link
    // taken, no answer stored.
    let links = store.link_store().unwrap();
    let link_id = link["linkId"].as_str().unwrap();
    assert!(links.take_link(link_id, askloop::Clock::now(&clock)).await.unwrap());

    clock.advance(Duration::from_secs(30));
    let (status, shown) = question(&server, &path).await;
    assert_eq!(
        (status, code(&shown)),
        (410, "link_used"),
        "within the minute, the take may still be storing: {shown}"
    );
    let (status, _) = answer(&server, &path, json!({"formToken": token, "resumeData": "staging"})).await;
    assert_eq!(status, 410);

    clock.advance(Duration::from_secs(31));
    let (status, shown) = question(&server, &path).await;
    assert_eq!(
        status, 200,
        "its call still waits, so the lost take is given back: {shown}"
    );
    let (status, answered) = answer(&server, &path, json!({"formToken": token, "resumeData": "staging"})).await;
    assert_eq!(status, 200, "{answered}");
    let run = until_status(&store, &run_id, RunStatus::Completed).await;
    let [resolution] = &run.resolutions[..] else {
        panic!("{:?}", run.resolutions)
    };
    assert_eq!(
        (resolution.author.via, resolution.author.by.as_deref()),
        (Interface::Link, Some("Alice"))
    );

    // Now the link was used and its call answered: a minute later it stays used.
    clock.advance(Duration::from_secs(120));
    let (status, shown) = question(&server, &path).await;
    assert_eq!((status, code(&shown)), (410, "link_used"), "{shown}");
}

#[tokio::test]
async fn a_revoked_link_says_so_and_is_revoked_once() {
    let store = memory_store();
    let server = server_on(&store, &["k1"]).await;
    let (run_id, _) = suspended_run(&server).await;
    let link = mint(&server, &run_id, json!({"to": "Alice"})).await;
    let path = path_of(&link);
    let token = form_token(&server, &path).await;

    let revoke = format!("/api/links/{}/revoke", link["linkId"].as_str().unwrap());
    let response = server.post(&revoke, json!({})).await;
    assert_eq!(response.status(), 200);
    let revoked: Value = response.json().await.unwrap();
    assert!(revoked["revokedAt"].is_string(), "{revoked}");
    let (status, again) = error_of(server.post(&revoke, json!({})).await).await;
    assert_eq!((status, again["code"].as_str()), (409, Some("link_not_revocable")));

    let (status, shown) = question(&server, &path).await;
    assert_eq!((status, code(&shown)), (410, "link_revoked"));
    let (status, refused) = answer(&server, &path, json!({"formToken": token, "resumeData": "staging"})).await;
    assert_eq!((status, code(&refused)), (410, "link_revoked"));
    assert_eq!(
        store.get(&run_id).await.unwrap().unwrap().status(),
        RunStatus::Suspended
    );

    let listed: Value = server
        .get(&format!("/api/runs/{run_id}/links"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["links"][0]["linkId"], link["linkId"]);
    assert!(listed["links"][0]["revokedAt"].is_string());
}

#[tokio::test]
async fn an_answer_from_another_site_or_without_the_pages_form_token_is_refused() {
    let store = memory_store();
    let server = server_on(&store, &["k1"]).await;
    let (run_id, path, token) = question_for_alice(&server).await;
    let body = json!({"formToken": token, "resumeData": "staging"});

    let from_elsewhere = server
        .client
        .post(server.url(&path))
        .header("origin", "https://evil.example")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(from_elsewhere).await.0, 403);
    let cross_site = server
        .client
        .post(server.url(&path))
        .header("sec-fetch-site", "cross-site")
        .json(&body)
        .send()
        .await
        .unwrap();
    let (status, refused) = error_of(cross_site).await;
    assert_eq!((status, refused["code"].as_str()), (403, Some("cross_site")));
    // A form of another page (not JSON) is refused before anything is read.
    let form = server
        .client
        .post(server.url(&path))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("resumeData=staging")
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 415);
    for wrong in ["", "bm90LXRoZS10b2tlbg"] {
        let (status, refused) = answer(&server, &path, json!({"formToken": wrong, "resumeData": "staging"})).await;
        assert_eq!((status, code(&refused)), (403, "link_form_token"));
    }
    let run = store.get(&run_id).await.unwrap().unwrap();
    assert_eq!((run.status(), run.resolutions.len()), (RunStatus::Suspended, 0));

    // The same page, same origin: answered.
    let same = server
        .client
        .post(server.url(&path))
        .header("sec-fetch-site", "same-origin")
        .header("origin", format!("http://{}", server.addr))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(same.status(), 200);
}

#[tokio::test]
async fn a_refused_answer_gives_the_link_back_and_a_decline_keeps_its_reason() {
    let store = memory_store();
    let server = server_on(&store, &["k1"]).await;
    let (_, path, token) = question_for_alice(&server).await;
    let (status, refused) = answer(&server, &path, json!({"formToken": token, "resumeData": "the moon"})).await;
    assert_eq!((status, code(&refused)), (422, "invalid_answer"), "{refused}");
    let (status, _) = answer(&server, &path, json!({"formToken": token, "resumeData": "staging"})).await;
    assert_eq!(status, 200, "the link answered after all");

    let (run_id, _) = approval_run(&server).await;
    let path = path_of(&mint(&server, &run_id, json!({"to": "Dana"})).await);
    let (status, shown) = question(&server, &path).await;
    assert_eq!((status, shown["call"]["kind"].as_str()), (200, Some("approval")));
    let token = shown["formToken"].as_str().unwrap();
    let (status, declined) = answer(
        &server,
        &path,
        json!({"formToken": token, "approved": false, "reason": "not on a Friday"}),
    )
    .await;
    assert_eq!((status, declined["outcome"].as_str()), (200, Some("declined")));
    let done = until_status(&store, &run_id, RunStatus::Completed).await;
    let resolution = done.resolutions.last().unwrap();
    assert_eq!(
        (resolution.kind, resolution.author.via, resolution.author.by.as_deref()),
        (ResolutionKind::Denied, Interface::Link, Some("Dana"))
    );
    let messages = store.messages(&run_id).await.unwrap();
    assert!(
        format!("{messages:?}").contains("not on a Friday"),
        "the model is told why"
    );
}

#[tokio::test]
async fn after_a_key_rotation_the_old_key_still_verifies_and_the_new_one_signs() {
    let store = memory_store();
    let before = server_on(&store, &["k1"]).await;
    let (run_id, _) = suspended_run(&before).await;
    let old = path_of(&mint(&before, &run_id, json!({"to": "Alice"})).await);
    before.stop().await.unwrap();

    let claims_key = |path: &str| -> String {
        let signed = path.rsplit_once('/').unwrap().1;
        let claims = URL_SAFE_NO_PAD.decode(signed.split_once('.').unwrap().0).unwrap();
        serde_json::from_slice::<Value>(&claims).unwrap()["key"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(claims_key(&old), "k1");

    let rotated = server_on(&store, &["k2", "k1"]).await;
    let new = path_of(&mint(&rotated, &run_id, json!({"to": "Bob"})).await);
    assert_eq!(claims_key(&new), "k2", "the first key signs");
    assert_eq!(question(&rotated, &new).await.0, 200);
    assert_eq!(question(&rotated, &old).await.0, 200, "the old key still verifies");
    rotated.stop().await.unwrap();

    let retired = server_on(&store, &["k2"]).await;
    let (status, shown) = question(&retired, &old).await;
    assert_eq!(
        (status, code(&shown)),
        (403, "link_invalid"),
        "a removed key verifies nothing"
    );
    let token = form_token(&retired, &new).await;
    let (status, _) = answer(&retired, &new, json!({"formToken": token, "resumeData": "production"})).await;
    assert_eq!(status, 200);
    let done = until_status(&store, &run_id, RunStatus::Completed).await;
    assert_eq!(done.resolutions[0].author.by.as_deref(), Some("Bob"));
}

#[tokio::test]
async fn links_are_made_only_for_runs_the_token_may_see_and_for_waiting_calls() {
    let store = memory_store();
    let tokens = vec![
        ApiToken::new("ops", "ops-secret-0123456789"),
        ApiToken::new("approvals", "approvals-secret-0123456789").only_agents(vec!["approver".into()]),
    ];
    let server = Server::new(vec![assistant(&store), approver(&store)], Arc::clone(&store))
        .unwrap()
        .options(
            ServerOptions::default()
                .tokens(tokens)
                .public_url(Some(PUBLIC.to_owned())),
        )
        .links(links_with(&["k1"]));
    let server = TestServer::serve(server).await;
    let as_token = |secret: &'static str, path: String, body: Value| {
        server
            .client
            .post(server.url(&path))
            .bearer_auth(secret)
            .json(&body)
            .send()
    };
    let started = server
        .client
        .post(server.url("/api/agents/assistant/stream"))
        .bearer_auth("ops-secret-0123456789")
        .json(&json!({"messages": PROMPT}))
        .send()
        .await
        .unwrap();
    let run_id = Sse::read(started).await.first("tool-call-suspended")["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/api/runs/{run_id}/links");

    let (status, _) = error_of(server.post(&path, json!({"to": "Alice"})).await).await;
    assert_eq!(status, 401, "minting needs the API token");
    let (status, refused) = error_of(
        as_token("approvals-secret-0123456789", path.clone(), json!({"to": "Alice"}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (404, Some("unknown_run")),
        "another agent's run is unknown"
    );
    let (status, refused) = error_of(
        as_token("ops-secret-0123456789", path.clone(), json!({"to": "  "}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, refused["code"].as_str()), (400, Some("bad_request")));
    let (status, refused) = error_of(
        as_token(
            "ops-secret-0123456789",
            path.clone(),
            json!({"to": "Alice", "toolCallId": "nope"}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((status, refused["code"].as_str()), (409, Some("tool_call_not_pending")));
    let minted = as_token("ops-secret-0123456789", path.clone(), json!({"to": "Alice"}))
        .await
        .unwrap();
    assert_eq!(minted.status(), 200);
    let link: Value = minted.json().await.unwrap();

    // The link itself needs no token.
    let link_path = path_of(&link);
    let (status, shown) = question(&server, &link_path).await;
    assert_eq!(status, 200, "{shown}");
    let revoke = format!("/api/links/{}/revoke", link["linkId"].as_str().unwrap());
    let (status, _) = error_of(
        as_token("approvals-secret-0123456789", revoke, json!({}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404, "a link of a run the token may not see is unknown to it");
}

#[tokio::test]
async fn a_raised_questions_notification_carries_one_link_made_out_to_the_configured_recipient() {
    let received: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = Arc::clone(&received);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let seen = Arc::clone(&seen);
            async move {
                let first = seen.lock().unwrap().is_empty();
                seen.lock().unwrap().push(body);
                // The first attempt is refused: the retry carries the same link.
                if first {
                    axum::http::StatusCode::SERVICE_UNAVAILABLE
                } else {
                    axum::http::StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let clock = ManualClock::starting_now();
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let agent = Agent::builder("assistant")
        .model(scripted(DEPLOY_SCRIPT))
        .tool(AskUser::new())
        .store(Arc::clone(&store))
        .clock(Arc::new(clock.clone()))
        .notify(Subscription::new(hook.clone(), [EventType::QuestionRaised]))
        .build()
        .unwrap();
    // As `askloop.toml` would give them (its reading is askloop-config's
    // to test): one webhook, and links made out to "on-call".
    let secret = askloop_server::WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let mut settings = LinkSettings::new(
        LinkKey::new("k1", b"k1-secret-of-at-least-thirty-two-chars".to_vec()),
        [],
    );
    settings.webhook_recipient = "on-call".to_owned();
    let links = AnswerLinks::configured(Some(&settings), Some(PUBLIC)).unwrap().unwrap();
    let mut webhooks = Webhooks::new(
        vec![askloop_server::WebhookConfig::new(hook.clone(), secret)],
        Some(PUBLIC.to_owned()),
    );
    webhooks.poll_every = Duration::from_millis(10);
    let server = Server::new(vec![agent.clone()], Arc::clone(&store))
        .unwrap()
        .options(ServerOptions::default().recover_every(Duration::ZERO))
        .webhooks(webhooks)
        .links(links);
    let server = TestServer::serve(server).await;

    let run_id = agent.stream("Deploy the app").await.unwrap().output().await.run_id;
    for _ in 0..500 {
        if received.lock().unwrap().len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    clock.advance(Duration::from_secs(5));
    for _ in 0..500 {
        if received.lock().unwrap().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let bodies = received.lock().unwrap().clone();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    let link = bodies[0]["data"]["answerLink"].as_str().unwrap().to_owned();
    assert_eq!(
        bodies[1]["data"]["answerLink"],
        link.as_str(),
        "one link on every attempt"
    );
    let made = store.link_store().unwrap().links(&run_id).await.unwrap();
    assert_eq!(made.len(), 1);
    assert_eq!(made[0].recipient, "on-call");

    let path = link.strip_prefix(PUBLIC).unwrap();
    let token = form_token(&server, path).await;
    let (status, _) = answer(&server, path, json!({"formToken": token, "resumeData": "staging"})).await;
    assert_eq!(status, 200);
    let done = until_status(&store, &run_id, RunStatus::Completed).await;
    assert_eq!(done.resolutions[0].author.by.as_deref(), Some("on-call"));
}

/// A server of `assistant` with `options` (and the public URL), making
/// links with `settings`.
async fn links_server(store: &Arc<dyn RunStore>, options: ServerOptions, settings: LinkSettings) -> TestServer {
    let server = Server::new(vec![assistant(store)], Arc::clone(store))
        .unwrap()
        .options(options.public_url(Some(PUBLIC.to_owned())))
        .links(AnswerLinks::new(settings, PUBLIC));
    TestServer::serve(server).await
}

/// A POST of `body` to `path` with the bearer `secret` and `headers`.
async fn post_as(
    server: &TestServer,
    secret: &str,
    headers: &[(&str, &str)],
    path: &str,
    body: Value,
) -> reqwest::Response {
    let mut request = server.client.post(server.url(path)).bearer_auth(secret).json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// Starts a run of `assistant` that waits on its question, as `secret`.
async fn waiting_run_as(server: &TestServer, secret: &str, headers: &[(&str, &str)]) -> String {
    let started = post_as(
        server,
        secret,
        headers,
        "/api/agents/assistant/stream",
        json!({"messages": PROMPT}),
    )
    .await;
    Sse::read(started).await.first("tool-call-suspended")["runId"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_link_keeps_who_made_it_and_its_answer_names_the_maker_beside_the_recipient() {
    let store = memory_store();
    let options = ServerOptions::default().tokens(vec![ApiToken::new("alice", "alice-secret-0123456789")]);
    let server = links_server(&store, options, LinkSettings::new(key("k1"), [])).await;
    let secret = "alice-secret-0123456789";
    let run_id = waiting_run_as(&server, secret, &[]).await;
    let made = |to: &'static str| {
        let path = format!("/api/runs/{run_id}/links");
        let server = &server;
        async move {
            let response = post_as(server, secret, &[], &path, json!({"to": to})).await;
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()
        }
    };
    let to_bob = made("Bob the CFO").await;
    let to_carol = made("Carol").await;
    assert_eq!(
        (to_bob["recipient"].as_str(), to_bob["madeBy"].as_str()),
        (Some("Bob the CFO"), Some("alice")),
        "{to_bob}"
    );

    // Listed with its maker.
    let listed: Value = server
        .client
        .get(server.url(&format!("/api/runs/{run_id}/links")))
        .bearer_auth(secret)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let makers: Vec<(&str, &str)> = listed["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["recipient"].as_str().unwrap(), l["madeBy"].as_str().unwrap()))
        .collect();
    assert_eq!(makers, [("Bob the CFO", "alice"), ("Carol", "alice")]);

    // The page says who made it, and the answer is recorded as by the
    // recipient, made by the maker.
    let bob = path_of(&to_bob);
    let (status, shown) = question(&server, &bob).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(
        (shown["recipient"].as_str(), shown["madeBy"].as_str()),
        (Some("Bob the CFO"), Some("alice"))
    );
    let token = form_token(&server, &bob).await;
    let (status, answered) = answer(&server, &bob, json!({"formToken": token, "resumeData": "staging"})).await;
    assert_eq!(status, 200, "{answered}");
    let done = until_status(&store, &run_id, RunStatus::Completed).await;
    let [resolution] = &done.resolutions[..] else {
        panic!("{:?}", done.resolutions)
    };
    assert_eq!(
        (
            resolution.author.via,
            resolution.author.by.as_deref(),
            resolution.author.made_by.as_deref()
        ),
        (Interface::Link, Some("Bob the CFO"), Some("alice"))
    );
    let shown_run: Value = server
        .client
        .get(server.url(&format!("/api/runs/{run_id}")))
        .bearer_auth(secret)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let recorded = &shown_run["resolutions"][0];
    assert_eq!(
        (
            recorded["via"].as_str(),
            recorded["by"].as_str(),
            recorded["madeBy"].as_str()
        ),
        (Some("link"), Some("Bob the CFO"), Some("alice")),
        "{shown_run}"
    );

    // Another link to the same question says who answered, through whose link.
    let (status, closed) = question(&server, &path_of(&to_carol)).await;
    assert_eq!((status, code(&closed)), (410, "question_closed"), "{closed}");
    let message = closed["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("by Bob the CFO through a link made by alice"),
        "{message}"
    );
}

#[tokio::test]
async fn a_link_is_made_by_the_person_a_proxy_names_and_by_nobody_on_a_server_without_tokens() {
    let store = memory_store();
    let options = ServerOptions::default()
        .tokens(vec![ApiToken::new("proxy", "proxy-secret-0123456789")])
        .author_header(Some("X-Forwarded-User".to_owned()));
    let server = links_server(&store, options, LinkSettings::new(key("k1"), [])).await;
    let as_dana = [("X-Forwarded-User", "dana")];
    let run_id = waiting_run_as(&server, "proxy-secret-0123456789", &as_dana).await;
    let made = post_as(
        &server,
        "proxy-secret-0123456789",
        &as_dana,
        &format!("/api/runs/{run_id}/links"),
        json!({"to": "Bob"}),
    )
    .await;
    assert_eq!(made.status(), 200);
    let made: Value = made.json().await.unwrap();
    assert_eq!(
        made["madeBy"], "dana",
        "the person the proxy named, not the proxy's token: {made}"
    );

    let open = memory_store();
    let server = links_server(&open, ServerOptions::default(), LinkSettings::new(key("k1"), [])).await;
    let (run_id, _) = suspended_run(&server).await;
    let made = mint(&server, &run_id, json!({"to": "Bob"})).await;
    assert!(made.get("madeBy").is_none(), "nothing names the maker: {made}");
    let path = path_of(&made);
    let token = form_token(&server, &path).await;
    let (status, _) = answer(&server, &path, json!({"formToken": token, "resumeData": "staging"})).await;
    assert_eq!(status, 200);
    let done = until_status(&open, &run_id, RunStatus::Completed).await;
    assert_eq!(
        (
            done.resolutions[0].author.by.as_deref(),
            done.resolutions[0].author.made_by.as_deref()
        ),
        (Some("Bob"), None)
    );
}

#[tokio::test]
async fn a_link_to_a_recipient_the_server_does_not_list_is_refused_naming_whom_it_may_be_made_out_to() {
    let store = memory_store();
    let settings =
        LinkSettings::new(key("k1"), []).only_recipients(vec!["bob@corp.example".into(), "carol@corp.example".into()]);
    let server = links_server(&store, ServerOptions::default(), settings).await;
    let (run_id, _) = suspended_run(&server).await;
    let path = format!("/api/runs/{run_id}/links");
    for stranger in ["Bob the CFO", "BOB@corp.example", "mallory@evil.example"] {
        let (status, refused) = error_of(server.post(&path, json!({"to": stranger})).await).await;
        assert_eq!(
            (status, refused["code"].as_str()),
            (422, Some("recipient_not_allowed")),
            "{stranger}"
        );
        let message = refused["message"].as_str().unwrap();
        assert!(
            message.contains("bob@corp.example, carol@corp.example") && message.contains("[links] recipients"),
            "{message}"
        );
    }
    let links_now = || async {
        let listed: Value = server.get(&path).await.json().await.unwrap();
        listed["links"].as_array().unwrap().len()
    };
    assert_eq!(links_now().await, 0, "a refused link is not made");
    let made = mint(&server, &run_id, json!({"to": " carol@corp.example "})).await;
    assert_eq!(made["recipient"], "carol@corp.example");
    assert_eq!(links_now().await, 1);
}

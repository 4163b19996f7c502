//! The server's webhook sender decides by the agents' clock: a failed
//! delivery is tried again when that clock passes its next try, and each
//! attempt is signed with that clock's time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use askloop::{Agent, AskUser, Clock, DeliveryState, EventType, ManualClock, MemoryStore, RunStore, Subscription};
use askloop_server::{ServerOptions, WebhookConfig, WebhookSecret, Webhooks};
use axum::http::{HeaderMap, StatusCode};
use tokio::net::TcpListener;

use common::{DEPLOY_SCRIPT, TestServer, scripted};

/// A receiver that refuses its first POST (HTTP 500) and takes the others,
/// keeping the `webhook-timestamp` of each.
async fn refusing_once() -> (String, Arc<Mutex<Vec<i64>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap| {
            let seen = Arc::clone(&kept);
            async move {
                let timestamp = headers["webhook-timestamp"].to_str().unwrap().parse().unwrap();
                let mut seen = seen.lock().unwrap();
                seen.push(timestamp);
                if seen.len() == 1 {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::NO_CONTENT
                }
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

/// Waits (up to 10 s) until the run's one notification has been tried
/// `attempts` times and is in `state`.
async fn until_tried(store: &Arc<dyn RunStore>, run_id: &str, attempts: u32, state: DeliveryState) {
    for _ in 0..1000 {
        let deliveries = store.deliveries(run_id).await.unwrap();
        if let [delivery] = &deliveries[..]
            && delivery.attempts == attempts
            && delivery.state == state
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the notification was not tried {attempts} times: {:?}",
        store.deliveries(run_id).await.unwrap()
    );
}

#[tokio::test]
async fn a_refused_notification_is_sent_again_once_the_agents_clock_passes_its_retry_and_signed_with_that_clock() {
    // Years from the system's time: only this clock can make a retry due.
    let clock = ManualClock::starting_at("2030-01-01T00:00:00Z".parse().unwrap());
    let passes = common::counting_passes(Arc::new(MemoryStore::with_clock(Arc::new(clock.clone()))));
    let store: Arc<dyn RunStore> = passes.clone();
    let (url, seen) = refusing_once().await;
    let agent = Agent::builder("assistant")
        .model(scripted(DEPLOY_SCRIPT))
        .tool(AskUser::new())
        .store(Arc::clone(&store))
        .clock(Arc::new(clock.clone()))
        .notify(Subscription::new(url.clone(), [EventType::QuestionRaised]))
        .build()
        .unwrap();
    // The receiver of the agent's subscription.
    let mut hook = WebhookConfig::new(
        url,
        WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap(),
    );
    hook.events = vec![EventType::QuestionRaised];
    let mut webhooks = Webhooks::new(vec![hook], None);
    webhooks.poll_every = Duration::from_millis(10);
    let server = askloop_server::Server::new(vec![agent.clone()], Arc::clone(&store))
        .unwrap()
        .options(ServerOptions::default().recover_every(Duration::ZERO))
        .webhooks(webhooks);
    let server = TestServer::serve(server).await;

    let run_id = agent.stream("Deploy the app").await.unwrap().output().await.run_id;
    until_tried(&store, &run_id, 1, DeliveryState::Pending).await;
    let first_try = clock.now().timestamp();
    assert_eq!(*seen.lock().unwrap(), [first_try], "signed with the clock's time");

    // The retry waits about a second by the clock, which stands still:
    // passes of the sender later it is still not due.
    passes.layer().run(3).await;
    assert_eq!(seen.lock().unwrap().len(), 1, "tried again before its time");

    clock.advance(Duration::from_secs(2));
    until_tried(&store, &run_id, 2, DeliveryState::Delivered).await;
    assert_eq!(*seen.lock().unwrap(), [first_try, first_try + 2]);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_runs_deliveries_show_a_webhooks_url_by_its_origin_never_the_token_in_its_path() {
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    // As Slack's and Discord's incoming webhooks do, the path is the secret.
    let url = "http://127.0.0.1:9/services/T0001/B0001/secret-in-the-path";
    let agent = Agent::builder("assistant")
        .model(scripted(DEPLOY_SCRIPT))
        .tool(AskUser::new())
        .store(Arc::clone(&store))
        .notify(Subscription::new(url, [EventType::QuestionRaised]))
        .build()
        .unwrap();
    let server = TestServer::start_with(vec![agent.clone()], Arc::clone(&store), ServerOptions::default()).await;
    let run_id = agent.stream("Deploy the app").await.unwrap().output().await.run_id;
    let body: serde_json::Value = server
        .get(&format!("/api/runs/{run_id}/deliveries"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["deliveries"][0]["destination"], "http://127.0.0.1:9/…", "{body}");
    assert!(!body.to_string().contains("secret-in-the-path"), "{body}");
    let stored = store.deliveries(&run_id).await.unwrap();
    assert_eq!(stored[0].message.destination, url, "the store keeps where it goes");
}

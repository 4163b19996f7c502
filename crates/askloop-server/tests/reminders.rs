//! Reminders and escalation by email, on a clock the test holds: a
//! question still open an hour after its first mail is mailed again to the
//! same person, and four hours after it was raised to someone else; each
//! step is an outbox row, written with the suspension and due later. A
//! question answered before a reminder is due is not mailed again: the
//! sender reads the run when the reminder is due, and records why it was
//! not sent.
//!
//! Mail goes through a real SMTP server (aiosmtpd, see
//! `askloop_testkit::smtp`) and is read back with Python's `email` package.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use askloop::{Agent, AskUser, DeliveryState, ManualClock, MemoryStore, Notice, RunStatus, RunStore};
use askloop_server::email::{EmailSettings, MailRecipient, SmtpTls};
use askloop_server::links::{AnswerLinks, LinkKey, LinkSettings};
use askloop_server::{Server, ServerOptions, Webhooks};
use askloop_testkit::skipped_for_lack_of;
use askloop_testkit::smtp::{Smtp, free_port, messages, missing_smtp, parse};
use chrono::{DateTime, Utc};
use common::*;
use serde_json::{Value, json};

const PUBLIC: &str = "http://askloop.test";

const RAISED: &str = "2030-01-01T00:00:00Z";

struct Setup {
    clock: ManualClock,
    passes: Arc<askloop::store::Layered<common::Passes>>,
    store: Arc<dyn RunStore>,
    server: TestServer,
    maildir: PathBuf,
    _smtp: Smtp,
    _dir: tempfile::TempDir,
}

/// A server of `assistant` on a held clock, mailing through a real SMTP
/// server: Alice at once and again an hour later, Bob four hours after a
/// question is raised.
async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let maildir = dir.path().join("maildir");
    let port = free_port();
    let smtp = Smtp::start(port, &maildir);

    let mut alice = MailRecipient::new("Alice", "alice@example.com");
    alice.remind_after = Some(Duration::from_secs(3600));
    let mut bob = MailRecipient::new("Bob", "bob@example.com");
    bob.after = Duration::from_secs(4 * 3600);
    let mut email = EmailSettings::new("127.0.0.1", SmtpTls::None, "askloop <askloop@example.com>");
    email.port = port;
    // On the held clock a failed attempt is tried again only when the test
    // moves the clock, so one slow moment of the SMTP server must not fail
    // it: a long timeout, still under the 60 s the test waits for a mail.
    email.timeout = Duration::from_secs(30);

    let clock = ManualClock::starting_at(RAISED.parse().unwrap());
    let passes = common::counting_passes(Arc::new(MemoryStore::with_clock(Arc::new(clock.clone()))));
    let store: Arc<dyn RunStore> = passes.clone();
    let mut agent = Agent::builder("assistant")
        .model(scripted(DEPLOY_SCRIPT))
        .tool(AskUser::new())
        .store(Arc::clone(&store))
        .clock(Arc::new(clock.clone()));
    for recipient in [&alice, &bob] {
        for subscription in recipient.subscriptions() {
            agent = agent.notify(subscription);
        }
        email.recipients.push(("assistant".to_owned(), recipient.clone()));
    }
    let key = LinkKey::new("k1", b"k1-secret-of-at-least-thirty-two-chars".to_vec());
    let mut webhooks = Webhooks::new(Vec::new(), Some(PUBLIC.to_owned()));
    webhooks.poll_every = Duration::from_millis(20);
    let server = Server::new(vec![agent.build().unwrap()], Arc::clone(&store))
        .unwrap()
        .options(ServerOptions::default().recover_every(Duration::ZERO))
        .links(AnswerLinks::new(LinkSettings::new(key, []), PUBLIC))
        .webhooks(webhooks)
        .email(email)
        .unwrap();
    Setup {
        clock,
        passes,
        store,
        server: TestServer::serve(server).await,
        maildir,
        _smtp: smtp,
        _dir: dir,
    }
}

/// One step of a run's notifications as `GET /api/runs/{runId}/deliveries`
/// shows it: (to, notice, due, state, last error).
type Step = (String, Notice, DateTime<Utc>, DeliveryState, String);

/// The run's deliveries, read through the API, oldest due first.
async fn steps(server: &TestServer, run_id: &str) -> Vec<Step> {
    let response = server.get(&format!("/api/runs/{run_id}/deliveries")).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let mut steps: Vec<Step> = body["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let delivery: askloop::Delivery = serde_json::from_value(d.clone()).unwrap();
            (
                delivery.message.destination.clone(),
                delivery.message.notice(),
                delivery.message.due_at(),
                delivery.state,
                delivery.last_error.unwrap_or_default(),
            )
        })
        .collect();
    steps.sort_by_key(|step| step.2);
    steps
}

/// Waits (10 s at most) until the run's deliveries satisfy `done`.
async fn until_steps(server: &TestServer, run_id: &str, what: &str, done: impl Fn(&[Step]) -> bool) {
    for _ in 0..1000 {
        if done(&steps(server, run_id).await) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}: {:?}", steps(server, run_id).await);
}

/// The mails in the maildir once there are `count`, read back, in the order
/// they arrived. Waits 60 s at most (a hang guard); when they do not come,
/// the failure shows the run's deliveries, whose last error says why (on a
/// held clock, a failed attempt is tried again only when the test moves it).
async fn mails(setup: &Setup, run_id: &str, count: usize) -> Vec<Value> {
    for _ in 0..600 {
        if messages(&setup.maildir).len() >= count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let arrived = messages(&setup.maildir).len();
    assert!(
        arrived >= count,
        "{count} mail(s) did not arrive, {arrived} did; the run's deliveries: {:?}",
        steps(&setup.server, run_id).await
    );
    let maildir = setup.maildir.clone();
    tokio::task::spawn_blocking(move || {
        let mut read: Vec<(String, Value)> = messages(&maildir)
            .iter()
            .map(|path| {
                let mail = parse(path);
                // aiosmtpd's maildir names sort by arrival second only: order
                // by the Message-ID's UUID v7, which sorts by creation.
                (mail["messageId"].as_str().unwrap_or_default().to_owned(), mail)
            })
            .collect();
        read.sort_by(|a, b| a.0.cmp(&b.0));
        read.into_iter().map(|(_, mail)| mail).collect()
    })
    .await
    .unwrap()
}

fn at(hours: i64) -> DateTime<Utc> {
    let raised: DateTime<Utc> = RAISED.parse().unwrap();
    raised + chrono::Duration::hours(hours)
}

/// The answer link in a mail's text, as a path on the test server.
fn link_path(mail: &Value) -> String {
    let text = mail["text"].as_str().unwrap();
    let start = text.find(PUBLIC).expect("the mail carries an answer link");
    let url = text[start..].split_whitespace().next().unwrap();
    url.strip_prefix(PUBLIC).unwrap().to_owned()
}

#[tokio::test]
async fn a_question_still_open_is_mailed_again_then_to_someone_else_each_step_recorded() {
    if skipped_for_lack_of("reminders", missing_smtp()) {
        return;
    }
    let setup = setup().await;
    let (run_id, _call_id) = suspended_run(&setup.server).await;

    let first = mails(&setup, &run_id, 1).await;
    assert_eq!(first[0]["to"], "Alice <alice@example.com>");
    assert!(
        first[0]["subject"]
            .as_str()
            .unwrap()
            .starts_with("[askloop] assistant asks:"),
        "{}",
        first[0]["subject"]
    );
    use DeliveryState::{Delivered, Pending};
    let (alice, bob) = (
        "mailto:alice@example.com".to_owned(),
        "mailto:bob@example.com".to_owned(),
    );
    until_steps(&setup.server, &run_id, "the first mail recorded", |s| {
        s[0].3 == Delivered
    })
    .await;
    let written: Vec<_> = steps(&setup.server, &run_id)
        .await
        .into_iter()
        .map(|(to, notice, due, state, _)| (to, notice, due, state))
        .collect();
    assert_eq!(
        written,
        [
            (alice.clone(), Notice::First, at(0), Delivered),
            (alice.clone(), Notice::Reminder, at(1), Pending),
            (bob.clone(), Notice::Escalation, at(4), Pending),
        ],
        "every step is written with the suspension, the later ones due later"
    );

    // Nothing more goes out while the clock stands still: not in the
    // senders' passes over the outbox after the first mail was recorded.
    setup.passes.layer().run(3).await;
    assert_eq!(messages(&setup.maildir).len(), 1);

    setup.clock.advance(Duration::from_secs(3600));
    let two = mails(&setup, &run_id, 2).await;
    assert_eq!(two[1]["to"], "Alice <alice@example.com>");
    assert!(
        two[1]["subject"]
            .as_str()
            .unwrap()
            .starts_with("[askloop] Reminder: assistant asks:"),
        "{}",
        two[1]["subject"]
    );
    assert!(
        two[1]["text"].as_str().unwrap().contains(&format!(
            "A reminder: this was asked at {} and still waits",
            askloop::rfc3339(at(0))
        )),
        "{}",
        two[1]["text"]
    );
    assert_ne!(
        link_path(&two[0]),
        link_path(&two[1]),
        "a reminder carries a link of its own"
    );

    setup.clock.advance(Duration::from_secs(3 * 3600));
    let three = mails(&setup, &run_id, 3).await;
    assert_eq!(three[2]["to"], "Bob <bob@example.com>");
    assert!(
        three[2]["subject"]
            .as_str()
            .unwrap()
            .starts_with("[askloop] Still waiting: assistant asks:"),
        "{}",
        three[2]["subject"]
    );
    until_steps(&setup.server, &run_id, "every step delivered", |s| {
        s.iter().all(|step| step.3 == Delivered)
    })
    .await;

    // Bob's link answers, as Bob: the escalation reached someone who can.
    let path = link_path(&three[2]);
    let question = setup.server.get(&format!("{path}/question")).await;
    assert_eq!(question.status(), 200);
    let token = question.json::<Value>().await.unwrap()["formToken"]
        .as_str()
        .unwrap()
        .to_owned();
    let answered = setup
        .server
        .post(&path, json!({"formToken": token, "resumeData": "staging"}))
        .await;
    assert_eq!(answered.status(), 200, "{}", answered.text().await.unwrap());
    let mut run = setup.store.get(&run_id).await.unwrap().unwrap();
    for _ in 0..1000 {
        if run.status() == RunStatus::Completed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        run = setup.store.get(&run_id).await.unwrap().unwrap();
    }
    assert_eq!(run.status(), RunStatus::Completed);
    let decision = run.resolutions.last().unwrap();
    assert_eq!(
        (decision.author.via, decision.author.by.as_deref()),
        (askloop::Interface::Link, Some("Bob"))
    );
}

#[tokio::test]
async fn a_reminder_due_after_the_answer_is_not_sent_and_says_why() {
    if skipped_for_lack_of("reminders", missing_smtp()) {
        return;
    }
    let setup = setup().await;
    let (run_id, call_id) = suspended_run(&setup.server).await;
    mails(&setup, &run_id, 1).await;

    // Answered 59 minutes in, a minute before the reminder is due.
    setup.clock.advance(Duration::from_secs(59 * 60));
    let resumed = setup
        .server
        .post_sse(
            "/api/agents/assistant/resume-stream",
            json!({"runId": run_id, "toolCallId": call_id, "resumeData": "staging"}),
        )
        .await;
    assert!(resumed.types().contains(&"finish".to_owned()), "{:?}", resumed.types());

    setup.clock.advance(Duration::from_secs(5 * 3600));
    until_steps(&setup.server, &run_id, "the later steps given up on", |s| {
        s[1..].iter().all(|step| step.3 == DeliveryState::Dead)
    })
    .await;
    for (to, notice, _, _, error) in &steps(&setup.server, &run_id).await[1..] {
        assert!(
            error.starts_with("not sent: the question was closed before the mail went out"),
            "{to} {notice:?}: {error}"
        );
    }
    // Every later step is recorded given up on: no sender will mail it.
    assert_eq!(messages(&setup.maildir).len(), 1, "only the first mail went out");
}

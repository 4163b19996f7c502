//! Questions by email end to end: the real `askloop serve` on a SQLite file
//! mails through a real SMTP server (Python's aiosmtpd, Debian's
//! `python3-aiosmtpd`, started here on a free loopback port and keeping
//! each message it receives in a maildir). Each message is read back with
//! Python's `email` package, its answer link taken from it and followed
//! over HTTP: the page's question (GET) and the answer (POST with the
//! form token), after which the run completes.
//!
//! Also: a mail server down when the question is raised gets the message
//! once it is up, exactly once, after attempts that failed and were
//! recorded; a question answered before its mail went out is not mailed;
//! an approval whose path holds a right-to-left override is mailed with it
//! marked, so the path reads as it will be written.
//!
//! Without aiosmtpd the tests fail under CI (`CI=true`) and are skipped
//! with the reason otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use askloop_testkit::smtp::{Smtp, free_port, messages, missing_smtp, parse, wait_for_messages};
use serde_json::{Value, json};

mod common;

use common::{DEPLOYER_SCRIPT, Serve, Serving, chunks, screenshots_dir, skipped_for_lack_of};

const KEY: &str = "a-link-signing-key-of-the-email-tests-0123456";

/// A question written to be dangerous: markup, a fake link, and a line
/// break with a header after it.
const HOSTILE: &str = "Which region?</p><a href=\"https://evil.example/steal\">Answer here</a><script>alert(1)</script>\r\nBcc: victim@example.com\r\n\r\nAnswer here instead: https://evil.example/links/fake";

/// A file whose name reads `report_gpj.sh` unless its right-to-left
/// override is shown, its content ending in a zero-width space.
const SPOOFER_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "write_file", "args": {"path": "docs/report_\u202ehs.gpj", "content": "echo done\u200b"}}]},
  {"text": "Wrote {{toolResults}}"}
]}"#;

fn script() -> String {
    json!({"turns": [
        {"toolCalls": [{"name": "ask_user", "args": {"question": HOSTILE, "options": [
            {"label": "Europe", "description": "Frankfurt"},
            {"label": "<b>Americas</b>", "description": "<img src=x onerror=alert(1)>"}]}}]},
        {"text": "Launching in {{toolResults}}."}
    ]})
    .to_string()
}

/// The outbox rows of mail deliveries: (destination, state, attempts, last_error).
fn mail_rows(db: &Path) -> Vec<(String, String, i64, Option<String>)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT destination, state, attempts, last_error FROM outbox WHERE destination LIKE 'mailto:%'")
        .unwrap();
    stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Waits (60 s at most) until the mail deliveries satisfy `done`.
fn wait_for_rows(db: &Path, what: &str, done: impl Fn(&[(String, String, i64, Option<String>)]) -> bool) {
    for _ in 0..600 {
        let rows = mail_rows(db);
        if done(&rows) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}: {:?}", mail_rows(db));
}

struct Setup {
    dir: tempfile::TempDir,
    maildir: PathBuf,
    smtp_port: u16,
    server: Serving,
}

impl Setup {
    fn db(&self) -> PathBuf {
        self.dir.path().join("runs.db")
    }
}

/// `askloop serve` with answer links and `[email]` on a free port, its
/// agent `launcher` mailing Alice; the SMTP server is not started.
fn serve() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let maildir = dir.path().join("maildir");
    let (smtp_port, http_port) = (free_port(), free_port());
    std::fs::write(dir.path().join("launcher.json"), script()).unwrap();
    std::fs::write(dir.path().join("writer.json"), DEPLOYER_SCRIPT).unwrap();
    std::fs::write(dir.path().join("spoofer.json"), SPOOFER_SCRIPT).unwrap();
    std::fs::write(
        dir.path().join("free.json"),
        r#"{"turns": [{"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?"}}]}, {"text": "Deploying to {{toolResults}}"}]}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("askloop.toml"),
        format!(
            "public_url = \"http://127.0.0.1:{http_port}\"\n\n\
             [links]\n[[links.keys]]\nid = \"k1\"\nsecret_env = \"TEST_LINK_KEY\"\n\n\
             [email]\nhost = \"127.0.0.1\"\nport = {smtp_port}\ntls = \"none\"\nfrom = \"askloop <askloop@example.com>\"\ntimeout = \"5s\"\n\n\
             [agents.launcher]\nscript = \"launcher.json\"\n\n\
             [[agents.launcher.email]]\nname = \"Alice\"\naddress = \"alice@example.com\"\n\n\
             [agents.deployer]\nscript = \"free.json\"\n\n\
             [[agents.deployer.email]]\nname = \"Bob\"\naddress = \"bob@example.com\"\n\n\
             [agents.writer]\nscript = \"writer.json\"\ntools = [\"write_file\"]\nrequire_approval = [\"write_file\"]\nwrite_dir = \"out\"\n\n\
             [[agents.writer.email]]\nname = \"Carol\"\naddress = \"carol@example.com\"\ntools = [\"write_file\"]\n\n\
             [[agents.writer.email]]\nname = \"Dave\"\naddress = \"dave@example.com\"\ntools = [\"ask_user\"]\n\n\
             [agents.spoofer]\nscript = \"spoofer.json\"\ntools = [\"write_file\"]\nwrite_dir = \"out\"\n\n\
             [[agents.spoofer.email]]\nname = \"Erin\"\naddress = \"erin@example.com\"\n"
        ),
    )
    .unwrap();
    let mut server = Serve::in_dir(dir.path())
        .env("TEST_LINK_KEY", KEY)
        .addr(format!("127.0.0.1:{http_port}"))
        .config(dir.path().join("askloop.toml"))
        .start();
    server.wait_for_line(&format!(
        "mailing questions through 127.0.0.1:{smtp_port} to 5 recipients"
    ));
    // The banner's first address is the links' (public_url), the same here.
    server.base = format!("http://127.0.0.1:{http_port}");
    Setup {
        dir,
        maildir,
        smtp_port,
        server,
    }
}

/// The answer link of a message's text part.
fn link_of(mail: &Value, base: &str) -> String {
    let text = mail["text"].as_str().unwrap();
    let links: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with(&format!("{base}/links/")))
        .collect();
    assert_eq!(links.len(), 1, "one answer link, on a line of its own: {text}");
    links[0].trim().to_owned()
}

async fn run_status(client: &reqwest::Client, server: &Serving, run_id: &str) -> Value {
    client
        .get(server.url(&format!("/api/runs/{run_id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Waits (60 s at most) for the run to complete; returns it.
async fn completed(client: &reqwest::Client, server: &Serving, run_id: &str) -> Value {
    for _ in 0..600 {
        let run = run_status(client, server, run_id).await;
        if run["status"] == "completed" {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "run {run_id} did not complete: {}",
        run_status(client, server, run_id).await
    );
}

/// Follows a mailed link as its recipient would: the page, its question,
/// then the answer with the form token.
async fn answer_through(client: &reqwest::Client, link: &str, answer: Value) -> Value {
    let page = client.get(link).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let question: Value = client
        .get(format!("{link}/question"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let form_token = question["formToken"].as_str().unwrap_or_else(|| panic!("{question}"));
    let answered = client
        .post(link)
        .json(&json!({"formToken": form_token, "resumeData": answer}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200, "{:?}", answered.text().await);
    question
}

#[tokio::test]
async fn a_mailed_question_arrives_inert_and_its_link_answers_it_as_the_recipient() {
    if skipped_for_lack_of("the email tests", missing_smtp()) {
        return;
    }
    let setup = serve();
    let _smtp = Smtp::start(setup.smtp_port, &setup.maildir);
    let client = reqwest::Client::new();
    let asked = setup.server.ask(&client, "launcher", None).await;

    let mails = wait_for_messages(&setup.maildir, 1);
    assert_eq!(mails.len(), 1, "one recipient, one message");
    let mail = parse(&mails[0]);
    assert!(mail["to"].as_str().unwrap().contains("alice@example.com"), "{mail}");
    // The question's line break added no header, and the subject is one line.
    let subject = mail["subject"].as_str().unwrap();
    assert!(!subject.contains('\r') && !subject.contains('\n'), "{subject:?}");
    assert!(subject.contains("Which region?"), "{subject:?}");
    let names: Vec<String> = mail["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h[0].as_str().unwrap().to_ascii_lowercase())
        .collect();
    assert!(!names.contains(&"bcc".to_owned()), "{names:?}");
    // In the HTML the model's markup is text: no tag of it, one link (ours).
    let html = mail["html"].as_str().unwrap();
    // Kept for a look in a browser (docs/email.png was taken of it).
    std::fs::create_dir_all(screenshots_dir()).unwrap();
    std::fs::write(screenshots_dir().join("email.html"), html).unwrap();
    assert!(
        !html.contains("<script") && !html.contains("<img") && !html.contains("<b>Americas"),
        "{html}"
    );
    assert!(!html.contains("evil.example/steal\""), "{html}");
    assert!(
        html.contains("&lt;a href=&quot;https://evil.example/steal&quot;&gt;"),
        "{html}"
    );
    assert_eq!(html.matches("<a ").count(), 1, "{html}");
    // In the text the model's words are quoted, the fake link among them.
    let text = mail["text"].as_str().unwrap();
    assert!(
        text.contains("> Answer here instead: https://evil.example/links/fake"),
        "{text}"
    );
    let public = setup.server.base.clone();
    let link = link_of(&mail, &public);
    assert!(
        html.contains(&format!("href=\"{link}\"")),
        "the HTML's one link is the answer link: {html}"
    );

    let question = answer_through(&client, &link, json!("Europe")).await;
    assert_eq!(question["recipient"], "Alice");
    assert_eq!(question["runId"].as_str(), Some(asked.run_id.as_str()));
    let run = completed(&client, &setup.server, &asked.run_id).await;
    let resolution = run.to_string();
    assert!(
        resolution.contains("\"Alice\""),
        "the answer is recorded as Alice's: {run}"
    );
    // The link answered once: the page now says it was used.
    let again = client.get(format!("{link}/question")).send().await.unwrap();
    assert!(again.text().await.unwrap().contains("link_used"));
    wait_for_rows(&setup.db(), "the delivery recorded as delivered", |rows| {
        rows.len() == 1 && rows[0].1 == "delivered"
    });
}

#[tokio::test]
async fn a_mail_server_down_at_first_gets_the_message_exactly_once_when_it_comes_back() {
    if skipped_for_lack_of("the email tests", missing_smtp()) {
        return;
    }
    let setup = serve();
    let client = reqwest::Client::new();
    let asked = setup.server.ask(&client, "launcher", None).await;
    // Attempts fail while nothing listens, each recorded.
    wait_for_rows(&setup.db(), "a failed attempt recorded", |rows| {
        rows.len() == 1 && rows[0].2 >= 1 && rows[0].3.as_deref().is_some_and(|e| e.contains("SMTP"))
    });
    assert!(messages(&setup.maildir).is_empty());
    let _smtp = Smtp::start(setup.smtp_port, &setup.maildir);
    wait_for_rows(&setup.db(), "the delivery recorded as delivered", |rows| {
        rows.len() == 1 && rows[0].1 == "delivered"
    });
    let rows = mail_rows(&setup.db());
    assert!(rows[0].2 >= 2, "failed attempts, then the one that sent: {rows:?}");
    // Delivered is final: the sender never takes the row again.
    let mails = messages(&setup.maildir);
    assert_eq!(mails.len(), 1, "exactly one message");
    let public = setup.server.base.clone();
    let link = link_of(&parse(&mails[0]), &public);
    answer_through(&client, &link, json!("Europe")).await;
    completed(&client, &setup.server, &asked.run_id).await;
    assert_eq!(messages(&setup.maildir).len(), 1);
}

#[tokio::test]
async fn a_question_answered_before_its_mail_went_out_is_not_mailed() {
    if skipped_for_lack_of("the email tests", missing_smtp()) {
        return;
    }
    let setup = serve();
    let client = reqwest::Client::new();
    let asked = setup.server.ask(&client, "deployer", None).await;
    wait_for_rows(&setup.db(), "a failed attempt recorded", |rows| {
        rows.len() == 1 && rows[0].2 >= 1
    });
    let body = setup.server.answer(&client, "deployer", &asked).await;
    assert!(body.contains("Deploying to"), "{body}");
    let _smtp = Smtp::start(setup.smtp_port, &setup.maildir);
    wait_for_rows(&setup.db(), "the delivery recorded as not sent", |rows| {
        rows.len() == 1 && rows[0].1 == "dead"
    });
    let rows = mail_rows(&setup.db());
    let reason = rows[0].3.clone().unwrap_or_default();
    assert!(
        reason.contains("not sent") && reason.contains("answered"),
        "the reason is recorded: {reason}"
    );
    assert!(messages(&setup.maildir).is_empty(), "no mail for a closed question");
}

/// Streams `message` to `agent` until its run waits for an approval;
/// returns the run's id.
async fn approval_asked(client: &reqwest::Client, setup: &Setup, agent: &str, message: &str) -> String {
    let body = client
        .post(setup.server.url(&format!("/api/agents/{agent}/stream")))
        .json(&json!({ "messages": message }))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let waiting = chunks(&body)
        .into_iter()
        .find(|c| c["type"] == "tool-call-approval")
        .unwrap_or_else(|| panic!("no approval asked: {body}"));
    waiting["runId"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_call_waiting_for_approval_is_mailed_with_its_tool_and_arguments_and_approved_through_the_link() {
    if skipped_for_lack_of("the email tests", missing_smtp()) {
        return;
    }
    let setup = serve();
    let _smtp = Smtp::start(setup.smtp_port, &setup.maildir);
    let client = reqwest::Client::new();
    let run_id = approval_asked(&client, &setup, "writer", "Write the release notes.").await;

    let mails = wait_for_messages(&setup.maildir, 1);
    assert_eq!(mails.len(), 1);
    let mail = parse(&mails[0]);
    assert!(mail["to"].as_str().unwrap().contains("carol@example.com"), "{mail}");
    assert_eq!(mail["subject"], "[askloop] writer asks to run write_file");
    let text = mail["text"].as_str().unwrap();
    assert!(
        text.contains("write_file") && text.contains("\"path\": \"NOTES.md\""),
        "{text}"
    );
    let link = link_of(&mail, &setup.server.base);

    let page = client.get(&link).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let question: Value = client
        .get(format!("{link}/question"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(question["recipient"], "Carol");
    let approved = client
        .post(&link)
        .json(&json!({"formToken": question["formToken"], "approved": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), 200, "{:?}", approved.text().await);
    completed(&client, &setup.server, &run_id).await;
    let written = std::fs::read_to_string(setup.dir.path().join("out/NOTES.md")).unwrap();
    assert!(written.starts_with("# Release notes"), "{written}");
    // Dave is mailed ask_user's questions only: his delivery of this call
    // was recorded as not sent, and Carol's was the one message.
    wait_for_rows(&setup.db(), "both deliveries finished", |rows| {
        rows.len() == 2 && rows.iter().all(|r| r.1 != "pending")
    });
    let rows = mail_rows(&setup.db());
    let dave = rows.iter().find(|r| r.0 == "mailto:dave@example.com").unwrap();
    assert_eq!(dave.1, "dead");
    assert!(
        dave.3.as_deref().unwrap_or_default().contains("calls of ask_user only"),
        "{rows:?}"
    );
    assert_eq!(messages(&setup.maildir).len(), 1);
}

#[tokio::test]
async fn an_approval_whose_path_hides_a_bidi_override_is_mailed_with_it_marked_in_the_subject_text_and_html() {
    if skipped_for_lack_of("the email tests", missing_smtp()) {
        return;
    }
    let setup = serve();
    let _smtp = Smtp::start(setup.smtp_port, &setup.maildir);
    approval_asked(&reqwest::Client::new(), &setup, "spoofer", "Publish the report.").await;
    let mails = wait_for_messages(&setup.maildir, 1);
    let mail = parse(&mails[0]);
    assert!(mail["to"].as_str().unwrap().contains("erin@example.com"), "{mail}");
    let text = mail["text"].as_str().unwrap();
    assert!(
        text.contains(">   \"path\": \"docs/report_<U+202E>hs.gpj\",\n"),
        "{text}"
    );
    assert!(text.contains(">   \"content\": \"echo done<U+200B>\"\n"), "{text}");
    let html = mail["html"].as_str().unwrap();
    assert!(
        html.contains("&quot;docs/report_<span title=\"an invisible character, U+202E\""),
        "{html}"
    );
    assert!(html.contains("&lt;U+202E&gt;</span>hs.gpj&quot;"), "{html}");
    for part in [&mail["subject"], &mail["text"], &mail["html"]] {
        let part = part.as_str().unwrap();
        assert!(!part.contains('\u{202e}') && !part.contains('\u{200b}'), "{part}");
    }
}

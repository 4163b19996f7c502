//! Who answered, end to end with real processes on one SQLite file: answers
//! through the CLI, over HTTP with two named tokens and through the page
//! behind a proxy each show their author and interface, in
//! `GET /api/runs/{runId}` and in `askloop runs show --json`; and
//! `askloop runs expire`, with no server running, resolves an expired
//! question of a server's run and records who did.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

mod common;

use common::{Env, SUSPENDED, Serve, Serving, code, stderr};

const SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?"}}]},
  {"text": "Model saw: {{toolResults}}"}
]}"#;

const ALICE: &str = "secret-of-alice";
const BOB: &str = "secret-of-bob";

fn serve(env: &Env, config: &Path) -> Serving {
    Serve::in_dir(env.dir.path())
        .env("ALICE_TOKEN", ALICE)
        .env("BOB_TOKEN", BOB)
        .config(config)
        .start()
}

/// Starts a run of `deployer` over HTTP and returns its id.
async fn start_run(client: &reqwest::Client, server: &Serving, token: Option<&str>) -> String {
    server.ask(client, "deployer", token).await.run_id
}

/// `GET /api/runs/{run_id}` with `token` and, behind the proxy, the name
/// it sends (raw bytes); its status and body.
async fn api_run_as(
    client: &reqwest::Client,
    server: &Serving,
    token: Option<&str>,
    person: Option<&[u8]>,
    run_id: &str,
) -> (u16, Value) {
    let mut request = client.get(server.url(&format!("/api/runs/{run_id}")));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(person) = person {
        request = request.header(
            "X-Forwarded-User",
            reqwest::header::HeaderValue::from_bytes(person).unwrap(),
        );
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn api_run(client: &reqwest::Client, server: &Serving, token: Option<&str>, run_id: &str) -> Value {
    let (status, run) = api_run_as(client, server, token, None, run_id).await;
    assert_eq!(status, 200, "{run}");
    run
}

fn only_resolution(run: &Value) -> Value {
    let resolutions = run["resolutions"].as_array().unwrap();
    assert_eq!(resolutions.len(), 1, "{run}");
    resolutions[0].clone()
}

#[tokio::test]
async fn answers_through_the_cli_two_named_tokens_and_the_page_show_their_author_in_the_api_and_runs_show() {
    let env = Env::new();
    let script = env.script("deploy.json", SCRIPT);
    let config = env.dir.path().join("askloop.toml");
    std::fs::write(
        &config,
        r#"author_header = "X-Forwarded-User"

[agents.deployer]
script = "deploy.json"

[[tokens]]
name = "alice"
token_env = "ALICE_TOKEN"
without_person = true

[[tokens]]
name = "bob"
token_env = "BOB_TOKEN"
"#,
    )
    .unwrap();

    // Through the CLI, as the login user.
    let out = env
        .cmd()
        .env("USER", "dave")
        .args(["run", "--script", script.to_str().unwrap(), "Deploy the app."])
        .output()
        .unwrap();
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    let by_cli = env.only_run_id();
    let out = env
        .cmd()
        .env("USER", "dave")
        .args(["resume", &by_cli, "--answer", "staging"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // Over HTTP with alice's token (a program's, marked to act without a
    // person), and on the page with bob's token behind a proxy that names
    // carol.
    let server = serve(&env, &config);
    let client = reqwest::Client::new();
    let by_alice = start_run(&client, &server, Some(ALICE)).await;
    let started = client
        .post(server.url("/api/agents/deployer/stream"))
        .bearer_auth(BOB)
        .header("X-Forwarded-User", "carol")
        .json(&json!({"messages": "Deploy the app."}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let by_carol = started
        .split("\"runId\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    let answered = client
        .post(server.url("/api/agents/deployer/resume-stream"))
        .bearer_auth(ALICE)
        .json(&json!({"runId": by_alice, "resumeData": "production"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    assert!(answered.text().await.unwrap().contains("finish"));
    let answered = client
        .post(server.url("/api/agents/deployer/resume-stream"))
        .bearer_auth(BOB)
        .header("X-Forwarded-User", "carol")
        .header("X-Askloop-Interface", "page")
        .json(&json!({"runId": by_carol, "resumeData": "qa"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    assert!(answered.text().await.unwrap().contains("finish"));

    // Each run is read by whoever it belongs to: alice's token hers,
    // carol (through bob's token and the proxy) hers; the CLI's run belongs
    // to no resource, so the CLI alone reads it.
    for (run_id, via, by, reader) in [
        (&by_cli, "cli", "dave", None),
        (&by_alice, "http", "alice", Some((ALICE, None))),
        (&by_carol, "page", "carol", Some((BOB, Some(&b"carol"[..])))),
    ] {
        let from_cli = only_resolution(&env.show(run_id));
        let Some((token, person)) = reader else {
            for (token, person) in [(ALICE, None), (BOB, Some(&b"carol"[..]))] {
                let (status, _) = api_run_as(&client, &server, Some(token), person, run_id).await;
                assert_eq!(status, 404, "a run of no resource is no walled caller's");
            }
            assert_eq!(
                (from_cli["via"].as_str(), from_cli["by"].as_str()),
                (Some(via), Some(by))
            );
            continue;
        };
        let (status, run) = api_run_as(&client, &server, Some(token), person, run_id).await;
        assert_eq!(status, 200, "{run}");
        let from_api = only_resolution(&run);
        for resolution in [&from_api, &from_cli] {
            assert_eq!(resolution["kind"], "answered", "{run_id}: {resolution}");
            assert_eq!(resolution["via"], via, "{run_id}: {resolution}");
            assert_eq!(resolution["by"], by, "{run_id}: {resolution}");
        }
        assert_eq!(from_api, from_cli, "the API and the CLI show the same record");
    }

    // Behind the proxy, bob's token acts only as a person the header names:
    // none is 401 (never the token itself), and José, sent as UTF-8 or
    // percent-encoded, is José, who sees carol's run no more than alice's.
    for person in [None, Some(&b""[..]), Some(&b"Jos\xe9"[..])] {
        let (status, error) = api_run_as(&client, &server, Some(BOB), person, &by_carol).await;
        assert_eq!(
            (status, error["error"]["code"].as_str()),
            (401, Some("no_person")),
            "{person:?}"
        );
    }
    for jose in ["José".as_bytes(), b"Jos%C3%A9"] {
        let me: Value = client
            .get(server.url("/api/me"))
            .bearer_auth(BOB)
            .header(
                "X-Forwarded-User",
                reqwest::header::HeaderValue::from_bytes(jose).unwrap(),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            (me["name"].as_str(), me["resource"].as_str()),
            (Some("José"), Some("José"))
        );
        for theirs in [&by_carol, &by_alice] {
            let (status, _) = api_run_as(&client, &server, Some(BOB), Some(jose), theirs).await;
            assert_eq!(status, 404, "José sees no one else's run");
        }
    }
}

#[tokio::test]
async fn askloop_runs_expire_without_a_server_resolves_an_expired_question_and_records_who_did() {
    let env = Env::new();
    env.script("deploy.json", SCRIPT);
    let config = env.dir.path().join("askloop.toml");
    std::fs::write(
        &config,
        "[agents.deployer]\nscript = \"deploy.json\"\n[agents.deployer.time_limits]\nask_user = \"1s\"\n",
    )
    .unwrap();
    let client = reqwest::Client::new();
    let mut server = serve(&env, &config);
    let run_id = start_run(&client, &server, None).await;
    let run = api_run(&client, &server, None, &run_id).await;
    let expires_at = run["pendingToolCalls"][0]["expiresAt"].as_str().unwrap().to_owned();
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);

    // No process runs while the limit passes (the wait is for the stored
    // instant, not a guess).
    let at = chrono::DateTime::parse_from_rfc3339(&expires_at).unwrap().to_utc();
    let left = (at - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(50)).await;
    assert_eq!(env.show(&run_id)["status"], "suspended", "nothing expired it yet");

    let out = env
        .cmd()
        .env("USER", "erin")
        .args(["runs", "expire", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains(&run_id), "{}", stderr(&out));

    let shown = env.show(&run_id);
    assert_eq!(shown["status"], "completed", "{shown}");
    let resolution = only_resolution(&shown);
    assert_eq!(resolution["kind"], "expired");
    assert_eq!(resolution["via"], "cli");
    assert_eq!(resolution["by"], "erin");
    let last = shown["messages"].as_array().unwrap().last().unwrap().to_string();
    assert!(
        last.contains("Model saw: No answer came within the time limit"),
        "{last}"
    );
    let again = env.run(&["runs", "expire", "--config", config.to_str().unwrap()]);
    assert!(stderr(&again).contains("No expired questions"), "{}", stderr(&again));
}

//! The `askloop` binary against a real HTTP model server (the testkit's fake
//! OpenAI-compatible server, speaking the exact wire format): a run started
//! with `--model` suspends, and a second process resumes it knowing only the
//! database.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use askloop_testkit::{FakeServer, workload};

const BIN: &str = env!("CARGO_BIN_EXE_askloop");

fn askloop(db: &std::path::Path, envs: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ASKLOOP_MODEL")
        .env("ASKLOOP_DB", db)
        .args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

async fn askloop_async(db: std::path::PathBuf, envs: Vec<(String, String)>, args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        askloop(&db, &envs, &args)
    })
    .await
    .unwrap()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_an_openai_model_then_resume_from_another_process_with_only_the_db() {
    let server = FakeServer::builder()
        .responder(workload::deploy_responder())
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let env = vec![
        ("OPENAI_API_KEY".to_string(), "sk-test".to_string()),
        ("OPENAI_BASE_URL".to_string(), server.openai_base_url()),
    ];

    let out = askloop_async(
        db.clone(),
        env.clone(),
        strings(&[
            "run",
            "--model",
            "openai/gpt-4o-mini",
            "Deploy the app. Ask me which environment first.",
        ]),
    )
    .await;
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("Question: Which environment should I deploy to?"),
        "{printed}"
    );
    assert!(
        printed.contains("  - staging") && printed.contains("  - production"),
        "{printed}"
    );

    let list = askloop_async(db.clone(), vec![], strings(&["runs", "--json"])).await;
    let runs: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let run_id = runs[0]["runId"].as_str().unwrap().to_owned();

    // A second process, told nothing about the model but the key.
    let out = askloop_async(db.clone(), env, strings(&["resume", &run_id, "--answer", "staging"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Deploying to User answered: staging."
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].header("authorization"), Some("Bearer sk-test"));
    let messages = requests[1].body["messages"].as_array().unwrap();
    let tool = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool["content"], "User answered: staging");
    assert_eq!(
        messages[0]["role"], "system",
        "the run's instructions are sent again on resume"
    );
}

#[test]
fn a_model_without_its_key_is_one_clear_line_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let out = askloop(
        &dir.path().join("runs.db"),
        &[],
        &["run", "--model", "openai/gpt-4o-mini", "hi"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("OPENAI_API_KEY"), "{err}");
    let out = askloop(&dir.path().join("runs.db"), &[], &["run", "--model", "gpt-4o", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("openai/<model>"));
}

fn ask(question: &str) -> askloop_testkit::FakeTurn {
    askloop_testkit::FakeTurn::tool_call("ask_user", serde_json::json!({ "question": question }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_goes_to_the_endpoint_the_run_started_with_unless_model_is_given() {
    use askloop_testkit::FakeTurn;
    let started_at = FakeServer::builder()
        .respond(ask("First?"))
        .respond(ask("Second?"))
        .start()
        .await
        .unwrap();
    let elsewhere = FakeServer::builder()
        .respond(FakeTurn::text("answered elsewhere"))
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let key = ("OPENAI_API_KEY".to_string(), "sk-local".to_string());
    let at = |server: &FakeServer| ("OPENAI_BASE_URL".to_string(), server.openai_base_url());

    let out = askloop_async(
        db.clone(),
        vec![key.clone(), at(&started_at)],
        strings(&["run", "--model", "openai/gpt-4o-mini", "go"]),
    )
    .await;
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let list = askloop_async(db.clone(), vec![], strings(&["runs", "--json"])).await;
    let runs: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let run_id = runs[0]["runId"].as_str().unwrap().to_owned();

    // Another shell, without OPENAI_BASE_URL: the environment now means the
    // public API. The run goes on where it started, and says why.
    let out = askloop_async(
        db.clone(),
        vec![key.clone()],
        strings(&["resume", &run_id, "--answer", "one"]),
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("Second?"));
    assert!(
        err.contains(&format!(
            "was started against openai at {}",
            started_at.openai_base_url()
        )),
        "{err}"
    );
    assert!(err.contains("https://api.openai.com/v1"), "{err}");
    assert!(err.contains("pass --model openai/gpt-4o-mini"), "{err}");
    assert_eq!(started_at.request_count(), 2);
    assert_eq!(elsewhere.request_count(), 0);

    // Told to move: --model sends the rest to the endpoint named now.
    let out = askloop_async(
        db.clone(),
        vec![key.clone(), at(&elsewhere)],
        strings(&["resume", &run_id, "--answer", "two", "--model", "openai/gpt-4o-mini"]),
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("was started against"), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "answered elsewhere");
    assert_eq!(started_at.request_count(), 2);
    assert_eq!(elsewhere.request_count(), 1);
    assert_eq!(elsewhere.requests()[0].header("authorization"), Some("Bearer sk-local"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_records_its_endpoint_and_never_its_key() {
    let server = FakeServer::builder().respond(ask("Which?")).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let env = vec![
        ("OPENAI_API_KEY".to_string(), "sk-secret-key".to_string()),
        ("OPENAI_BASE_URL".to_string(), server.openai_base_url()),
    ];
    let out = askloop_async(
        db.clone(),
        env,
        strings(&["run", "--model", "openai/gpt-4o-mini", "go"]),
    )
    .await;
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let list = askloop_async(db.clone(), vec![], strings(&["runs", "--json"])).await;
    let runs: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let run_id = runs[0]["runId"].as_str().unwrap().to_owned();
    let shown = askloop_async(db.clone(), vec![], strings(&["runs", "show", &run_id, "--json"])).await;
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let model = &shown["metadata"]["askloopCli"]["model"];
    assert_eq!(model["endpoint"]["provider"], "openai");
    assert_eq!(model["endpoint"]["baseUrl"], server.openai_base_url());
    let file = std::fs::read(&db).unwrap();
    let wal = std::fs::read(dir.path().join("runs.db-wal")).unwrap_or_default();
    for bytes in [file, wal] {
        assert!(
            !bytes.windows(b"sk-secret-key".len()).any(|w| w == b"sk-secret-key"),
            "the key is never stored"
        );
    }
}

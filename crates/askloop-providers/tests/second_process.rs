//! A run suspended in this process is resumed by another process, with the
//! SQLite store in between and the fake server still serving both.
//!
//! The child process is this test binary again, running the ignored test
//! `child_resumes_the_run` with the run's coordinates in its environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::process::Command;

use askloop::{Agent, AskUser, ResumeOptions, RunStatus};
use askloop_providers::from_spec_with;
use askloop_testkit::{FakeServer, workload};
use common::*;

const CHILD_TEST: &str = "child_resumes_the_run";
const DONE_MARKER: &str = "CHILD-RESUMED:";

async fn agent(spec: &str, env: HashMap<String, String>, db: &str) -> Agent {
    let model = from_spec_with(spec, move |name| env.get(name).cloned(), quick_http(0)).unwrap();
    let store = askloop_store::open(db).await.unwrap();
    Agent::builder("assistant")
        .instructions(workload::DEPLOY_SYSTEM)
        .model(model)
        .tool(AskUser::new())
        .store(store)
        .build()
        .unwrap()
}

fn provider_env(provider: &str, server: &FakeServer) -> (String, HashMap<String, String>) {
    let mut env = HashMap::new();
    let spec = if provider == "anthropic" {
        env.insert("ANTHROPIC_API_KEY".to_owned(), "sk-ant-test".to_owned());
        env.insert("ANTHROPIC_BASE_URL".to_owned(), server.anthropic_base_url());
        "anthropic/claude-sonnet-4-5"
    } else {
        env.insert("OPENAI_API_KEY".to_owned(), "sk-test".to_owned());
        env.insert("OPENAI_BASE_URL".to_owned(), server.openai_base_url());
        "openai/gpt-4o-mini"
    };
    (spec.to_owned(), env)
}

#[tokio::test]
async fn a_run_suspended_here_is_resumed_by_a_second_process_through_sqlite() {
    for provider in ["openai", "anthropic"] {
        let server = FakeServer::with_responder(workload::deploy_responder()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("runs.db").to_str().unwrap().to_owned();
        let (spec, env) = provider_env(provider, &server);

        let run_id = {
            let agent = agent(&spec, env.clone(), &db).await;
            let output = agent.stream(workload::DEPLOY_PROMPT).await.unwrap().output().await;
            assert_eq!(output.status, RunStatus::Suspended, "{provider}: {:?}", output.error());
            output.run_id
        };

        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([CHILD_TEST, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env("ASKLOOP_E2E_CHILD_DB", &db)
            .env("ASKLOOP_E2E_CHILD_RUN_ID", &run_id)
            .env("ASKLOOP_E2E_CHILD_SPEC", &spec)
            .env("ASKLOOP_E2E_CHILD_ENV", serde_json::to_string(&env).unwrap());
        // Waiting on the child off the runtime: the fake server it calls
        // runs on this test's runtime.
        let child = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap()
            .unwrap();
        let stdout = String::from_utf8_lossy(&child.stdout);
        assert!(
            child.status.success(),
            "{provider}: child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&child.stderr)
        );
        let text = stdout
            .lines()
            .find_map(|l| l.split_once(DONE_MARKER).map(|(_, t)| t.to_owned()))
            .unwrap_or_else(|| panic!("{provider}: the child test did not run:\n{stdout}"));
        assert_eq!(text, "Deploying to User answered: staging.");

        // The child's model call carried the answer; the store says so too.
        let requests = server.requests();
        assert_eq!(requests.len(), 2, "{provider}");
        let follow_up = requests[1].body["messages"].as_array().unwrap().last().unwrap().clone();
        if provider == "anthropic" {
            assert_eq!(follow_up["content"][0]["type"], "tool_result");
            assert_eq!(follow_up["content"][0]["content"], "User answered: staging");
        } else {
            assert_eq!(follow_up["role"], "tool");
            assert_eq!(follow_up["content"], "User answered: staging");
        }
        let store = askloop_store::open(&db).await.unwrap();
        let record = store.get(&run_id).await.unwrap().unwrap();
        assert_eq!(record.status(), RunStatus::Completed, "{provider}");
    }
}

/// Runs only as the child of the test above (it is ignored otherwise, and
/// fails if started by hand without the parent's environment).
#[tokio::test]
#[ignore = "the child half of a_run_suspended_here_is_resumed_by_a_second_process_through_sqlite"]
async fn child_resumes_the_run() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set by the parent test"));
    let env: HashMap<String, String> = serde_json::from_str(&var("ASKLOOP_E2E_CHILD_ENV")).unwrap();
    let agent = agent(&var("ASKLOOP_E2E_CHILD_SPEC"), env, &var("ASKLOOP_E2E_CHILD_DB")).await;
    let run_id = var("ASKLOOP_E2E_CHILD_RUN_ID");
    let output = agent
        .resume_stream("staging", ResumeOptions::run(&run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(output.status, RunStatus::Completed, "{:?}", output.error());
    println!("{DONE_MARKER}{}", output.text);
}

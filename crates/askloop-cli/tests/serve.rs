//! `askloop serve` as a real process: start-up errors, a kill -9 between a
//! question and its answer (the restarted server resumes the run from the
//! SQLite file), a SIGTERM that stops it cleanly (at once when only event
//! streams are open), a second SIGTERM that stops it without waiting, and
//! what an operator sees: `GET /metrics` after a run asked and was
//! answered, and `--log-format json` lines, a run's lines naming it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use askloop_testkit::{FakeServer, FakeTurn};
use serde_json::{Value, json};

mod common;

use common::raw::{host_port, open_events, read_to_close};
use common::{BIN, Serve, Serving};

const DEPLOY_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment should I deploy to?",
     "options": [{"label": "staging"}, {"label": "production"}]}}]},
  {"text": "Deploying to {{toolResults}}."}
]}"#;

/// The chunks of a stream body, its framing held to Mastra's.
fn frames(body: &str) -> Vec<Value> {
    askloop_testkit::mastra::framed_chunks(body)
}

fn script(dir: &Path) -> PathBuf {
    let path = dir.join("deploy.json");
    std::fs::write(&path, DEPLOY_SCRIPT).unwrap();
    path
}

#[tokio::test]
async fn a_server_killed_between_question_and_answer_resumes_the_run_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path());
    let script = script.to_str().unwrap();
    let client = reqwest::Client::new();

    let mut first = Serve::in_dir(dir.path()).args(["--script", script]).start();
    let body = client
        .post(first.url("/api/agents/assistant/stream"))
        .json(&json!({"messages": "Deploy the app."}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let suspended = frames(&body).into_iter().last().unwrap();
    assert_eq!(suspended["type"], "tool-call-suspended");
    let run_id = suspended["runId"].as_str().unwrap().to_owned();
    // SIGKILL: no shutdown, no flushing, nothing but what was committed.
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    let second = Serve::in_dir(dir.path()).args(["--script", script]).start();
    let listed: Value = client
        .get(second.url("/api/agents/assistant/suspended-runs"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["runs"][0]["runId"], run_id.as_str());
    let call = listed["runs"][0]["toolCalls"][0]["toolCallId"].as_str().unwrap();
    let resumed = client
        .post(second.url("/api/agents/assistant/resume-stream"))
        .json(&json!({"runId": run_id, "toolCallId": call, "resumeData": "staging"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    let chunks = frames(&resumed.text().await.unwrap());
    assert_eq!(chunks.last().unwrap()["type"], "finish");
    let run: Value = client
        .get(second.url(&format!("/api/runs/{run_id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "completed");
}

#[test]
fn a_bad_config_file_stops_serve_at_start_up_naming_the_file_the_key_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("askloop.toml");
    std::fs::write(&config, "[agents.deployer]\ntools = [\"ask_user\", \"shell\"]\n").unwrap();
    let output = Serve::in_dir(dir.path())
        .args(["--config", config.to_str().unwrap()])
        .command()
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains(&config.display().to_string()), "{stderr}");
    assert!(stderr.contains("agents.deployer.tools[1]"), "{stderr}");
    assert!(stderr.contains("unknown tool \"shell\""), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one error: {stderr}");

    // ./askloop.toml is read without --config.
    let output = Serve::in_dir(dir.path()).command().output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .contains("agents.deployer.tools[1]")
    );

    let output = Serve::in_dir(dir.path())
        .args(["--config", "missing.toml"])
        .command()
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8(output.stderr).unwrap().contains("missing.toml: "));
}

#[test]
fn serve_refuses_a_public_address_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let output = Serve::in_dir(dir.path())
        .args(["--addr", "0.0.0.0:0"])
        .command()
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("ASKLOOP_API_TOKEN") && stderr.contains("--allow-unauthenticated"),
        "{stderr}"
    );
}

#[tokio::test]
async fn serve_says_it_is_loopback_only_without_a_token_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut serving = Serve::in_dir(dir.path()).start();
    let banner = serving.banner.join("\n");
    assert!(
        banner.contains("no ASKLOOP_API_TOKEN") && banner.contains("loopback only"),
        "{banner}"
    );
    let agents: Value = reqwest::get(serving.url("/api/agents"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(agents.get("assistant").is_some(), "the default agent: {agents}");

    let terminated = Command::new("kill")
        .args(["-TERM", &serving.child.id().to_string()])
        .status()
        .unwrap();
    assert!(terminated.success());
    let status = serving.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let stderr = serving.rest_of_stderr().join("\n");
    assert!(stderr.contains("stopped"), "{stderr}");
}

#[tokio::test]
async fn with_askloop_api_token_set_serve_needs_the_bearer_token_and_warns_of_a_short_one_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Serve::in_dir(dir.path()).args(["--addr", "127.0.0.1:0"]).command();
    cmd.env("ASKLOOP_API_TOKEN", "t0ken")
        .stderr(Stdio::piped())
        .stdout(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = loop {
        let line = lines.next().unwrap().unwrap();
        assert!(!line.contains("no ASKLOOP_API_TOKEN"), "{line}");
        if line.contains("http://") {
            break line;
        }
    };
    let base = &line[line.find("http://").unwrap()..];
    let client = reqwest::Client::new();
    let refused = client.get(format!("{base}/agents")).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let allowed = client
        .get(format!("{base}/agents"))
        .bearer_auth("t0ken")
        .send()
        .await
        .unwrap();
    assert_eq!(allowed.status(), 200);
    child.kill().unwrap();
    child.wait().unwrap();
    // Serving had begun, so its warnings were written; the rest of stderr
    // ends with the process.
    let warned = lines
        .map(Result::unwrap)
        .any(|line| line.contains("ASKLOOP_API_TOKEN") && line.contains("has 5 characters"));
    assert!(warned, "a 5-character token on loopback is warned of");
}

#[test]
fn serve_refuses_a_token_that_could_never_match_a_short_one_beyond_loopback_and_any_origin_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[&str], Option<&str>, &[&str]); 4] = [
        (
            &["--addr", "127.0.0.1:0"],
            Some(" x-0123456789abcdef "),
            &["ASKLOOP_API_TOKEN", "white space"],
        ),
        (
            &["--addr", "0.0.0.0:0"],
            Some("x"),
            &["ASKLOOP_API_TOKEN", "at least 16"],
        ),
        (
            &["--addr", "127.0.0.1:0", "--cors-origin", "*"],
            None,
            &["--cors-origin '*'", "token"],
        ),
        (
            &["--addr", "127.0.0.1:0", "--allow-host", "https://x.example"],
            None,
            &["https://x.example", "host name"],
        ),
    ];
    for (args, token, said) in cases {
        let mut cmd = Serve::in_dir(dir.path()).args(args).command();
        if let Some(token) = token {
            cmd.env("ASKLOOP_API_TOKEN", token);
        }
        let output = cmd.output().unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        for words in said {
            assert!(stderr.contains(words), "{args:?}: {stderr}");
        }
    }
}

/// How many of a process's threads are named as Tokio's worker threads.
#[cfg(target_os = "linux")]
fn worker_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "tokio-rt-worker")
        .count()
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn serve_runs_on_one_thread_by_default_and_on_as_many_as_threads_says() {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path());
    let script = script.to_str().unwrap();
    let client = reqwest::Client::new();
    for (threads, said) in [
        (None, "1 thread handles requests"),
        (Some("3"), "3 threads handle requests"),
    ] {
        let mut args = vec!["--script", script];
        args.extend(threads.iter().flat_map(|n| ["--threads", n]));
        let serving = Serve::in_dir(dir.path()).args(&args).start();
        let banner = serving.banner.join("\n");
        assert!(banner.contains(said), "--threads {threads:?}: {banner}");
        // A runtime of worker threads starts them all at once (the default
        // runs on the main thread; Tokio's threads for blocking calls have
        // the same name as workers, so only the larger count is telling).
        if threads.is_some() {
            let workers = worker_threads(serving.child.id());
            assert!(workers >= 3, "{workers} worker threads for --threads 3");
        }
        let asked = serving.ask(&client, "assistant", None).await;
        let resumed = serving.answer(&client, "assistant", &asked).await;
        let chunks = frames(&resumed);
        assert_eq!(chunks.last().unwrap()["type"], "finish", "--threads {threads:?}");
        assert!(resumed.ends_with("data: [DONE]\n\n"));
    }
}

#[test]
fn serve_refuses_a_thread_count_that_is_not_a_number() {
    let dir = tempfile::tempdir().unwrap();
    let out = Serve::in_dir(dir.path())
        .args(["--threads", "many"])
        .command()
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--threads") && stderr.contains("many"), "{stderr}");
}

#[test]
fn serve_refuses_a_thread_count_above_its_bound_naming_the_accepted_range() {
    let dir = tempfile::tempdir().unwrap();
    let out = Serve::in_dir(dir.path())
        .args(["--threads", "100000"])
        .command()
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--threads") && stderr.contains("100000"), "{stderr}");
    assert!(stderr.contains("0..=512"), "the accepted range: {stderr}");
}

/// A bound on waiting for the process to exit, far below the grace period
/// the tests give (60 s): reaching it means the grace was waited out.
const PROMPT_EXIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn sigterm_with_an_event_stream_open_ends_the_stream_and_exits_without_waiting_out_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let mut serving = Serve::in_dir(dir.path()).args(["--shutdown-grace", "60"]).start();
    // The web page keeps this open for as long as it is shown.
    let mut events = open_events(&host_port(&serving)).await;

    serving.terminate();
    let status = serving
        .exit_within(PROMPT_EXIT)
        .expect("serve exited without waiting out the grace period");
    assert_eq!(status.code(), Some(0));
    // The stream was ended (its last chunk sent), not cut.
    let rest = read_to_close(&mut events).await;
    assert!(rest.ends_with("0\r\n\r\n"), "{rest:?}");
}

#[tokio::test]
async fn a_second_sigterm_during_the_grace_period_stops_at_once_leaving_the_run_at_its_last_stored_step() {
    let dir = tempfile::tempdir().unwrap();
    // A model that starts answering, then goes silent: the run's stream
    // stays open for as long as the server lets it.
    let model = FakeServer::with_responder(|_: &Value| FakeTurn::text_in("Deploying now.", 3).stall_after(1).into())
        .await
        .unwrap();
    let mut cmd = Serve::in_dir(dir.path())
        .args([
            "--addr",
            "127.0.0.1:0",
            "--model",
            "openai/gpt-4o-mini",
            "--shutdown-grace",
            "60",
        ])
        .command();
    cmd.env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", model.openai_base_url());
    let mut serving = Serving::start(cmd);
    let mut stream = reqwest::Client::new()
        .post(serving.url("/api/agents/assistant/stream"))
        .json(&json!({"messages": "Deploy the app.", "runId": "held-open"}))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    stream.chunk().await.unwrap().expect("the run's stream started");

    serving.terminate();
    serving.wait_for_line("shutting down");
    serving.terminate();
    let status = serving
        .exit_within(PROMPT_EXIT)
        .expect("a second SIGTERM stopped serve at once");
    assert_eq!(status.code(), Some(0));
    let stderr = serving.rest_of_stderr().join("\n");
    assert!(stderr.contains("stopping now"), "{stderr}");

    let shown = Command::new(BIN)
        .env("ASKLOOP_DB", dir.path().join("runs.db"))
        .args(["runs", "show", "held-open", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        shown.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    let run: Value = serde_json::from_slice(&shown.stdout).unwrap();
    // Started and stored; the step the model was in never finished, so the
    // run waits for its lease to run out and another server to take it over.
    assert_eq!(run["status"], "running", "{run}");
}

/// The value of the one sample `series` (name and labels exactly as
/// printed) in a scrape, if it is there.
fn metrics_sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter_map(|line| line.rsplit_once(' '))
        .find(|(name, _)| *name == series)
        .map(|(_, value)| value.parse().unwrap())
}

#[tokio::test]
async fn a_served_run_moves_the_figures_and_every_log_line_of_it_is_json_with_its_run_id() {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path());
    let mut cmd = Serve::in_dir(dir.path())
        .args([
            "--addr",
            "127.0.0.1:0",
            "--metrics-every",
            "10ms",
            "--script",
            script.to_str().unwrap(),
        ])
        .command();
    cmd.env("ASKLOOP_LOG", "info").env("ASKLOOP_LOG_FORMAT", "json");
    let serving = Serving::start(cmd);
    let client = reqwest::Client::new();
    let asked = serving.ask(&client, "assistant", None).await;
    let answered = serving.answer(&client, "assistant", &asked).await;
    assert!(answered.contains("Deploying to"), "{answered}");

    // The store-wide figures are read in the background: scrape until the
    // question no longer shows as waiting (a hang guard bounds it, no
    // timing is asserted).
    let mut scraped = String::new();
    for _ in 0..500 {
        let response = client.get(serving.url("/metrics")).send().await.unwrap();
        assert_eq!(response.status(), 200);
        scraped = response.text().await.unwrap();
        if metrics_sample(&scraped, "askloop_store_calls_waiting{agent=\"assistant\"}") == Some(0.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        metrics_sample(&scraped, "askloop_store_calls_waiting{agent=\"assistant\"}"),
        Some(0.0),
        "{scraped}"
    );
    assert_eq!(
        metrics_sample(&scraped, "askloop_runs_started_total"),
        Some(1.0),
        "{scraped}"
    );
    assert_eq!(
        metrics_sample(&scraped, "askloop_runs_finished_total{status=\"completed\"}"),
        Some(1.0),
        "{scraped}"
    );
    assert_eq!(
        metrics_sample(
            &scraped,
            "askloop_resolutions_total{kind=\"answered\",via=\"http\",edited=\"false\"}"
        ),
        Some(1.0),
        "{scraped}"
    );
    assert_eq!(
        metrics_sample(&scraped, "askloop_wait_seconds_count{kind=\"answered\"}"),
        Some(1.0),
        "{scraped}"
    );
    // Two model calls (to the question, after the answer), by provider.
    assert_eq!(
        metrics_sample(
            &scraped,
            "askloop_model_calls_total{provider=\"script\",outcome=\"ok\"}"
        ),
        Some(2.0),
        "{scraped}"
    );
    for histogram in [
        "askloop_model_call_seconds_count",
        "askloop_model_first_event_seconds_count",
    ] {
        assert_eq!(
            metrics_sample(&scraped, &format!("{histogram}{{provider=\"script\"}}")),
            Some(2.0),
            "{scraped}"
        );
    }
    assert!(!scraped.contains(&asked.run_id), "a run id in the figures");

    serving.terminate();
    let lines = serving.rest_of_stderr();
    // The start-up banner is for people; the log lines after it are JSON.
    let logs: Vec<Value> = lines
        .iter()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}")))
        .collect();
    // Every line logged in a run's span (the server's `run`, the driver's
    // `drive`) names the run.
    for log in &logs {
        for span in log_spans(log).filter(|span| in_a_run(span)) {
            assert_eq!(span["run_id"], asked.run_id.as_str(), "{log}");
            assert_eq!(span["agent_id"], "assistant", "{log}");
        }
    }
    // Both of its streams (to the question, then after the answer) ended
    // with a line of the run.
    let ended: Vec<&Value> = logs
        .iter()
        .filter(|log| log["message"] == "stream ended" && log_spans(log).any(in_a_run))
        .map(|log| &log["status"])
        .collect();
    assert_eq!(ended, ["suspended", "completed"], "{logs:#?}");
}

/// Whether `span` is one of a run: the server's `run`, the driver's `drive`.
fn in_a_run(span: &Value) -> bool {
    span["name"] == "run" || span["name"] == "drive"
}

fn log_spans(log: &Value) -> impl Iterator<Item = &Value> {
    log["spans"].as_array().into_iter().flatten()
}

//! What an operator of `askloop serve` sees of its runs: `GET /metrics`
//! scraped from the real process after a run that asked a question and was
//! answered, and `--log-format json` lines, each one JSON, a run's lines
//! carrying its run id.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

mod common;

use common::{BIN, Serving};

const DEPLOY_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment should I deploy to?",
     "options": [{"label": "staging"}, {"label": "production"}]}}]},
  {"text": "Deploying to {{toolResults}}."}
]}"#;

fn serve_json_logs(dir: &Path) -> Serving {
    let script = dir.join("deploy.json");
    std::fs::write(&script, DEPLOY_SCRIPT).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ASKLOOP_MODEL")
        .env_remove("ASKLOOP_API_TOKEN")
        .env("ASKLOOP_DB", dir.join("runs.db"))
        .env("ASKLOOP_LOG", "info")
        .env("ASKLOOP_LOG_FORMAT", "json")
        .current_dir(dir)
        .args(["serve", "--addr", "127.0.0.1:0", "--metrics-every", "10ms", "--script"])
        .arg(&script);
    Serving::start(cmd)
}

/// The value of the one sample `series` (name and labels exactly as
/// printed) in a scrape, if it is there.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter_map(|line| line.rsplit_once(' '))
        .find(|(name, _)| *name == series)
        .map(|(_, value)| value.parse().unwrap())
}

#[tokio::test]
async fn a_served_run_moves_the_figures_and_every_log_line_of_it_is_json_with_its_run_id() {
    let dir = tempfile::tempdir().unwrap();
    let serving = serve_json_logs(dir.path());
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
        if sample(&scraped, "askloop_store_calls_waiting{agent=\"assistant\"}") == Some(0.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        sample(&scraped, "askloop_store_calls_waiting{agent=\"assistant\"}"),
        Some(0.0),
        "{scraped}"
    );
    assert_eq!(sample(&scraped, "askloop_runs_started_total"), Some(1.0), "{scraped}");
    assert_eq!(
        sample(&scraped, "askloop_runs_finished_total{status=\"completed\"}"),
        Some(1.0),
        "{scraped}"
    );
    assert_eq!(
        sample(
            &scraped,
            "askloop_resolutions_total{kind=\"answered\",via=\"http\",edited=\"false\"}"
        ),
        Some(1.0),
        "{scraped}"
    );
    assert_eq!(
        sample(&scraped, "askloop_wait_seconds_count{kind=\"answered\"}"),
        Some(1.0),
        "{scraped}"
    );
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
    let in_a_run = |span: &Value| span["name"] == "run" || span["name"] == "drive";
    for log in &logs {
        for span in spans(log).filter(|span| in_a_run(span)) {
            assert_eq!(span["run_id"], asked.run_id.as_str(), "{log}");
            assert_eq!(span["agent_id"], "assistant", "{log}");
        }
    }
    // Both of its streams (to the question, then after the answer) ended
    // with a line of the run.
    let ended: Vec<&Value> = logs
        .iter()
        .filter(|log| log["message"] == "stream ended" && spans(log).any(|span| in_a_run(span)))
        .map(|log| &log["status"])
        .collect();
    assert_eq!(ended, ["suspended", "completed"], "{logs:#?}");
}

fn spans(log: &Value) -> impl Iterator<Item = &Value> {
    log["spans"].as_array().into_iter().flatten()
}

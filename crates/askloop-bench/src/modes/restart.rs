//! `restart`: a run suspends in one process and is resumed, by its id, in a
//! fresh process of this same binary (the hidden `__restart-suspend` and
//! `__restart-resume RUN_ID` modes). Each child times its stream as
//! `docs/benchmarks.md` defines it; "cold" means the process, its store connections and its HTTP
//! client are new.

use anyhow::{Context, bail};
use askloop_testkit::workload;
use serde::{Deserialize, Serialize};

use super::{Failures, IMPL, Report, one_line};
use crate::cli::Target;
use crate::environment::{Environment, Workload};
use crate::measure;
use crate::run::{self, DEPLOY_ANSWER, DEPLOY_EXPECTED};

#[derive(Debug, Serialize)]
struct Figures {
    #[serde(rename = "impl")]
    implementation: &'static str,
    mode: &'static str,
    ok: usize,
    cold_suspend_ms: f64,
    cold_resume_ms: f64,
}

/// What a child process reports on its one line of output.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ChildReport {
    /// The run it started or resumed.
    pub run_id: String,
    /// Its stream's time.
    pub ms: f64,
    /// Why the run did not do what it should, if it did not.
    pub problem: Option<String>,
}

pub async fn restart(target: &Target) -> anyhow::Result<Report> {
    let environment = Environment::prepare(target, Workload::Deploy).await?;
    let mut failures = Failures::default();
    let suspended = child(target, &environment, &["__restart-suspend"]).await?;
    let resumed = child(target, &environment, &["__restart-resume", &suspended.run_id]).await?;
    for problem in [&suspended.problem, &resumed.problem].into_iter().flatten() {
        failures.push(problem);
    }
    let figures = Figures {
        implementation: IMPL,
        mode: "restart",
        ok: usize::from(suspended.problem.is_none() && resumed.problem.is_none()),
        cold_suspend_ms: suspended.ms,
        cold_resume_ms: resumed.ms,
    };
    Report::new(&figures, failures)
}

/// Runs this binary on the same server and store, and reads its report.
pub(super) async fn child(target: &Target, environment: &Environment, mode: &[&str]) -> anyhow::Result<ChildReport> {
    let exe = std::env::current_exe().context("cannot find this program to start it again")?;
    let output = tokio::process::Command::new(&exe)
        .args(["--base-url", &environment.base_url, "--db", &environment.db])
        .args(["--model", &target.model, "--api-key", &target.api_key])
        .args(mode)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("cannot start {}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{'));
    match (output.status.success(), line) {
        (true, Some(line)) => {
            serde_json::from_str(line).with_context(|| format!("the {} process printed {line:?}", mode[0]))
        }
        _ => bail!(
            "the {} process failed ({}): {}",
            mode[0],
            output.status,
            one_line(&String::from_utf8_lossy(&output.stderr))
        ),
    }
}

/// The child that starts the run and exits once it is suspended.
pub async fn restart_suspend(target: &Target) -> anyhow::Result<Report> {
    let environment = Environment::prepare(target, Workload::Deploy).await?;
    let agent = environment.agent().await?;
    let streamed = run::start(&agent).await?;
    let report = ChildReport {
        problem: streamed
            .expect_question(workload::DEPLOY_QUESTION)
            .err()
            .map(|e| e.to_string()),
        run_id: streamed.run_id,
        ms: measure::ms(streamed.elapsed),
    };
    Report::new(&report, Failures::default())
}

/// The child that answers the run, knowing only its id.
pub async fn restart_resume(target: &Target, run_id: &str) -> anyhow::Result<Report> {
    let environment = Environment::prepare(target, Workload::Deploy).await?;
    let agent = environment.agent().await?;
    let streamed = run::resume(&agent, run_id, DEPLOY_ANSWER).await?;
    let report = ChildReport {
        problem: streamed.expect_text(DEPLOY_EXPECTED).err().map(|e| e.to_string()),
        run_id: streamed.run_id,
        ms: measure::ms(streamed.elapsed),
    };
    Report::new(&report, Failures::default())
}

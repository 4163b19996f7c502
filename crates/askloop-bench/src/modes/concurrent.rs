//! `concurrent K`: K runs started at once until all are suspended, then all
//! resumed at once.

use std::time::Instant;

use anyhow::Context;
use askloop::Agent;
use askloop_testkit::workload;
use serde::Serialize;

use super::{Failures, IMPL, Report};
use crate::cli::Target;
use crate::environment::{Environment, Workload};
use crate::measure;
use crate::run::{self, DEPLOY_ANSWER, DEPLOY_EXPECTED};

#[derive(Debug, Serialize)]
struct Figures {
    #[serde(rename = "impl")]
    implementation: &'static str,
    mode: &'static str,
    k: usize,
    all_suspended_s: f64,
    all_resumed_s: f64,
    runs_per_s: f64,
    peak_rss_mb: f64,
    ok: usize,
}

/// `ok` counts the runs that asked the question and completed with the
/// expected text.
pub async fn concurrent(target: &Target, k: usize) -> anyhow::Result<Report> {
    let environment = Environment::prepare(target, Workload::Deploy).await?;
    let agent = environment.agent().await?;
    let mut failures = Failures::default();

    let started = Instant::now();
    let starts: Vec<_> = (0..k)
        .map(|_| {
            let agent = agent.clone();
            tokio::spawn(async move { run::start(&agent).await })
        })
        .collect();
    let mut suspended = Vec::with_capacity(k);
    for task in starts {
        let streamed = task.await.context("a run's task panicked").and_then(|r| r);
        match streamed.and_then(|s| s.expect_question(workload::DEPLOY_QUESTION).map(|()| s)) {
            Ok(s) => suspended.push(s.run_id),
            Err(err) => failures.push(err),
        }
    }
    let all_suspended = started.elapsed();

    let resumed_at = Instant::now();
    let resumes: Vec<_> = suspended
        .into_iter()
        .map(|run_id| {
            let agent: Agent = agent.clone();
            tokio::spawn(async move { run::resume(&agent, &run_id, DEPLOY_ANSWER).await })
        })
        .collect();
    let mut ok = 0;
    for task in resumes {
        let streamed = task.await.context("a run's task panicked").and_then(|r| r);
        match streamed.and_then(|s| s.expect_text(DEPLOY_EXPECTED)) {
            Ok(()) => ok += 1,
            Err(err) => failures.push(err),
        }
    }
    let all_resumed = resumed_at.elapsed();

    let figures = Figures {
        implementation: IMPL,
        mode: "concurrent",
        k,
        all_suspended_s: measure::secs(all_suspended),
        all_resumed_s: measure::secs(all_resumed),
        runs_per_s: measure::round3(k as f64 / (all_suspended + all_resumed).as_secs_f64().max(1e-9)),
        peak_rss_mb: measure::peak_rss_mb(),
        ok,
    };
    Report::new(&figures, failures)
}

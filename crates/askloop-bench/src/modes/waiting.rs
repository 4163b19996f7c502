//! `waiting M`: M runs started with at most 100 in flight until all are
//! suspended (and waiting on a person), then all resumed the same way.

use std::future::Future;
use std::time::Instant;

use anyhow::Context;
use askloop::Agent;
use askloop_testkit::workload;
use futures::StreamExt;
use serde::Serialize;

use super::{Failures, IMPL, Report};
use crate::cli::Target;
use crate::environment::{Environment, Workload};
use crate::measure;
use crate::run::{self, DEPLOY_ANSWER, DEPLOY_EXPECTED, Streamed};

/// Runs in flight at once, as the benchmark scenario sets it (`docs/benchmarks.md`).
const IN_FLIGHT: usize = 100;

#[derive(Debug, Serialize)]
struct Figures {
    #[serde(rename = "impl")]
    implementation: &'static str,
    mode: &'static str,
    m: usize,
    all_suspended_s: f64,
    all_resumed_s: f64,
    peak_rss_mb_suspended: f64,
    peak_rss_mb_end: f64,
    ok: usize,
}

pub async fn waiting(target: &Target, m: usize) -> anyhow::Result<Report> {
    let environment = Environment::prepare(target, Workload::Deploy).await?;
    let agent = environment.agent().await?;
    let mut failures = Failures::default();

    let started = Instant::now();
    let suspended = suspend(&agent, m, &mut failures).await;
    let all_suspended = started.elapsed();
    let peak_suspended = measure::peak_rss_mb();

    let resumed_at = Instant::now();
    let resumes = bounded(suspended.into_iter().map(|run_id| {
        let agent = agent.clone();
        async move { run::resume(&agent, &run_id, DEPLOY_ANSWER).await }
    }))
    .await;
    let mut ok = 0;
    for streamed in resumes {
        match streamed.and_then(|s| s.expect_text(DEPLOY_EXPECTED)) {
            Ok(()) => ok += 1,
            Err(err) => failures.push(err),
        }
    }
    let all_resumed = resumed_at.elapsed();

    let figures = Figures {
        implementation: IMPL,
        mode: "waiting",
        m,
        all_suspended_s: measure::secs(all_suspended),
        all_resumed_s: measure::secs(all_resumed),
        peak_rss_mb_suspended: peak_suspended,
        peak_rss_mb_end: measure::peak_rss_mb(),
        ok,
    };
    Report::new(&figures, failures)
}

/// Starts `m` runs, at most [`IN_FLIGHT`] at once, and returns the ids of
/// those that suspended on the benchmark's question; the others are
/// `failures`.
pub(super) async fn suspend(agent: &Agent, m: usize, failures: &mut Failures) -> Vec<String> {
    let starts = bounded((0..m).map(|_| {
        let agent = agent.clone();
        async move { run::start(&agent).await }
    }))
    .await;
    let mut suspended = Vec::with_capacity(m);
    for streamed in starts {
        match streamed.and_then(|s| s.expect_question(workload::DEPLOY_QUESTION).map(|()| s)) {
            Ok(s) => suspended.push(s.run_id),
            Err(err) => failures.push(err),
        }
    }
    suspended
}

/// Runs the futures on the runtime's workers, at most [`IN_FLIGHT`] at once.
pub(super) async fn bounded<F>(futures: impl Iterator<Item = F>) -> Vec<anyhow::Result<Streamed>>
where
    F: Future<Output = anyhow::Result<Streamed>> + Send + 'static,
{
    futures::stream::iter(futures.map(tokio::spawn))
        .buffer_unordered(IN_FLIGHT)
        .map(|joined| joined.context("a run's task panicked").and_then(|r| r))
        .collect()
        .await
}

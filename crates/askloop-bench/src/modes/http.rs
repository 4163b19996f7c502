//! `http N` and `http-concurrent K`: the round trip through a running
//! `askloop serve` process over real HTTP and SSE, measured on the server's
//! side (its CPU time and memory, from `/proc`), the way a deployment runs.
//!
//! The fake model server runs in this process (or is `--base-url`), so the
//! server's figures are the server's alone.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use super::{Failures, IMPL, Report};
use crate::cli::Target;
use crate::environment::{Environment, Workload};
use crate::measure::{self, percentile_ms};
use crate::served::Served;
use crate::sse_client;

/// Round trips run (and checked) before measuring, as in `roundtrip`.
const WARM_UPS: usize = 3;

#[derive(Debug, Serialize)]
struct RoundTrips {
    #[serde(rename = "impl")]
    implementation: &'static str,
    mode: &'static str,
    n: usize,
    total_s: f64,
    roundtrips_per_s: f64,
    p50_suspend_ms: f64,
    p99_suspend_ms: f64,
    p50_resume_ms: f64,
    p99_resume_ms: f64,
    server_cpu_ms_per_roundtrip: f64,
    server_peak_rss_mb: f64,
}

/// `http N`: N sequential round trips; any wrong one fails the mode.
pub async fn http(target: &Target, n: usize) -> anyhow::Result<Report> {
    let environment = Environment::prepare(target, Workload::Deploy).await?;
    let served = Served::start(target, &environment).await?;
    let client = sse_client::client()?;
    for _ in 0..WARM_UPS {
        sse_client::round_trip(&client, &served.api).await?;
    }
    let mut suspends = Vec::with_capacity(n);
    let mut resumes = Vec::with_capacity(n);
    let cpu_before = served.cpu_time()?;
    let started = Instant::now();
    for _ in 0..n {
        let (suspend, resume) = sse_client::round_trip(&client, &served.api).await?;
        suspends.push(suspend);
        resumes.push(resume);
    }
    let total = started.elapsed();
    let cpu = served.cpu_time()?.saturating_sub(cpu_before);
    let memory = served.memory_mb()?;
    let implementation = served.implementation;
    served.stop().await?;
    let figures = RoundTrips {
        implementation,
        mode: "http",
        n,
        total_s: measure::secs(total),
        roundtrips_per_s: measure::round3(n as f64 / total.as_secs_f64().max(1e-9)),
        p50_suspend_ms: percentile_ms(&suspends, 50.0),
        p99_suspend_ms: percentile_ms(&suspends, 99.0),
        p50_resume_ms: percentile_ms(&resumes, 50.0),
        p99_resume_ms: percentile_ms(&resumes, 99.0),
        server_cpu_ms_per_roundtrip: measure::round3(cpu.as_secs_f64() * 1000.0 / n.max(1) as f64),
        server_peak_rss_mb: memory.peak,
    };
    Report::new(&figures, Failures::default())
}

#[derive(Debug, Serialize)]
struct Concurrent {
    #[serde(rename = "impl")]
    implementation: &'static str,
    mode: &'static str,
    k: usize,
    all_suspended_s: f64,
    all_resumed_s: f64,
    total_s: f64,
    server_rss_mb_suspended: f64,
    server_rss_mb_settled: f64,
    server_peak_rss_mb_suspended: f64,
    server_peak_rss_mb: f64,
    server_cpu_ms_per_run: f64,
    ok: usize,
}

/// How long after the last run suspended the server's memory is read again.
const SETTLE: Duration = Duration::from_secs(1);

/// `http-concurrent K`: K runs started at once until all are suspended
/// (the server's memory is read then, with K runs waiting, and again
/// [`SETTLE`] later), then all
/// resumed at once. `ok` counts the runs that asked the question and
/// finished with the expected text.
pub async fn http_concurrent(target: &Target, k: usize) -> anyhow::Result<Report> {
    let environment = Environment::prepare(target, Workload::Deploy).await?;
    let served = Served::start(target, &environment).await?;
    let client = sse_client::client()?;
    sse_client::round_trip(&client, &served.api).await?;
    let mut failures = Failures::default();

    let cpu_before = served.cpu_time()?;
    let started = Instant::now();
    let starts: Vec<_> = (0..k)
        .map(|_| {
            let (client, api) = (client.clone(), served.api.clone());
            tokio::spawn(async move { sse_client::start(&client, &api).await })
        })
        .collect();
    let mut suspended = Vec::with_capacity(k);
    for task in starts {
        let streamed = task.await.context("a run's task panicked").and_then(|r| r);
        match streamed.and_then(|s| sse_client::expect_question(&s)) {
            Ok(run) => suspended.push(run),
            Err(err) => failures.push(err),
        }
    }
    let all_suspended = started.elapsed();
    let waiting = served.memory_mb()?;
    // The same a second later: what the server holds while its runs wait
    // (it gives the memory of a burst back as the burst ends).
    tokio::time::sleep(SETTLE).await;
    let settled = served.memory_mb()?;
    if let Some(hold) = target.hold {
        eprintln!(
            "askloop-bench: {} runs suspended on server pid {} ({} MB resident); holding {hold:?}",
            suspended.len(),
            served.pid(),
            waiting.rss
        );
        tokio::time::sleep(hold).await;
    }

    let resumed_at = Instant::now();
    let resumes: Vec<_> = suspended
        .into_iter()
        .map(|(run_id, call)| {
            let (client, api) = (client.clone(), served.api.clone());
            tokio::spawn(async move { sse_client::resume(&client, &api, &run_id, &call).await })
        })
        .collect();
    let mut ok = 0;
    for task in resumes {
        let streamed = task.await.context("a run's task panicked").and_then(|r| r);
        match streamed.and_then(|s| sse_client::expect_finish(&s)) {
            Ok(()) => ok += 1,
            Err(err) => failures.push(err),
        }
    }
    let all_resumed = resumed_at.elapsed();
    let cpu = served.cpu_time()?.saturating_sub(cpu_before);
    let end = served.memory_mb()?;
    served.stop().await?;

    let figures = Concurrent {
        implementation: IMPL,
        mode: "http-concurrent",
        k,
        all_suspended_s: measure::secs(all_suspended),
        all_resumed_s: measure::secs(all_resumed),
        total_s: measure::secs(all_suspended + all_resumed),
        server_rss_mb_suspended: waiting.rss,
        server_rss_mb_settled: settled.rss,
        server_peak_rss_mb_suspended: waiting.peak,
        server_peak_rss_mb: end.peak,
        server_cpu_ms_per_run: measure::round3(cpu.as_secs_f64() * 1000.0 / k.max(1) as f64),
        ok,
    };
    Report::new(&figures, failures)
}

//! `roundtrip N`: N sequential round trips after 3 warm-ups.

use std::time::Instant;

use serde::Serialize;

use super::{Failures, IMPL, Report};
use crate::cli::Target;
use crate::environment::{Environment, Workload};
use crate::measure::{self, percentile_ms};
use crate::run;

/// Round trips run (and checked) before measuring: connections, the SQLite
/// page cache and the allocator are warm when timing starts.
const WARM_UPS: usize = 3;

#[derive(Debug, Serialize)]
struct Figures {
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
    /// This process's CPU, the in-process fake model's included.
    cpu_ms_per_roundtrip: f64,
    /// The in-process fake model's CPU (its thread's clock); null when the
    /// model is an outside server (`--base-url`).
    model_cpu_ms_per_roundtrip: Option<f64>,
    /// This process's CPU without the fake model's: askloop's own, and the
    /// bench's driving of it.
    askloop_cpu_ms_per_roundtrip: f64,
    peak_rss_mb: f64,
}

/// Any wrong round trip fails the mode: its figures would be worthless.
pub async fn roundtrip(target: &Target, n: usize) -> anyhow::Result<Report> {
    let environment = Environment::prepare(target, Workload::Deploy).await?;
    let agent = environment.agent().await?;
    for _ in 0..WARM_UPS {
        run::deploy_round_trip(&agent).await?;
    }
    let mut suspends = Vec::with_capacity(n);
    let mut resumes = Vec::with_capacity(n);
    let cpu_before = measure::cpu_time();
    let model_before = environment.model_cpu_time().await;
    let started = Instant::now();
    for _ in 0..n {
        let (suspend, resume) = run::deploy_round_trip(&agent).await?;
        suspends.push(suspend);
        resumes.push(resume);
    }
    let total = started.elapsed();
    let model = match (model_before, environment.model_cpu_time().await) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    let cpu = measure::cpu_time().saturating_sub(cpu_before);
    let per_roundtrip = |spent: std::time::Duration| measure::ms(spent / n.max(1) as u32);
    let figures = Figures {
        implementation: IMPL,
        mode: "roundtrip",
        n,
        total_s: measure::secs(total),
        roundtrips_per_s: measure::round3(n as f64 / total.as_secs_f64().max(1e-9)),
        p50_suspend_ms: percentile_ms(&suspends, 50.0),
        p99_suspend_ms: percentile_ms(&suspends, 99.0),
        p50_resume_ms: percentile_ms(&resumes, 50.0),
        p99_resume_ms: percentile_ms(&resumes, 99.0),
        cpu_ms_per_roundtrip: per_roundtrip(cpu),
        model_cpu_ms_per_roundtrip: model.map(per_roundtrip),
        askloop_cpu_ms_per_roundtrip: per_roundtrip(cpu.saturating_sub(model.unwrap_or_default())),
        peak_rss_mb: measure::peak_rss_mb(),
    };
    Report::new(&figures, Failures::default())
}

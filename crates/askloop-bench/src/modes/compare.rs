//! `compare N`: the round trip in askloop and in Mastra (`bench/mastra`),
//! one after the other on this machine against the same fake model, so that
//! every ratio in `docs/benchmarks.md` comes from one run:
//!
//! - in-process: `roundtrip N` here, and Mastra's `agent.stream` /
//!   `resumeStream` in a Node process (`bench/mastra/roundtrip.mjs`), each
//!   measured by its own process's CPU time, askloop's without the fake
//!   model server's thread, which runs in this process (Mastra's process
//!   has no model in it);
//! - over HTTP: `http N` through `askloop serve`, and through Mastra's own
//!   server (`bench/mastra/serve`, the Hono adapter), the server's CPU time
//!   read from the kernel's CPU clock of its process the same way for both.
//!
//! Prints one JSON line: each side's figures and Mastra's CPU per round trip
//! over askloop's, with the load average before and after (a ratio measured
//! beside other work is worth less, and says so).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, anyhow, bail};
use askloop_testkit::workload;
use serde::Serialize;
use serde_json::Value;
use tokio::process::Command;

use super::{Failures, Report};
use crate::cli::Target;
use crate::environment::{Environment, Workload};

#[derive(Debug, Serialize)]
struct Comparison {
    #[serde(rename = "impl")]
    implementation: &'static str,
    mode: &'static str,
    n: usize,
    /// `/proc/loadavg`'s first three fields, before and after.
    load_before: String,
    load_after: String,
    roundtrip: Side,
    http: Side,
}

/// One surface measured on both: CPU per round trip, peak memory, p50s.
#[derive(Debug, Serialize)]
struct Side {
    askloop_cpu_ms: f64,
    mastra_cpu_ms: f64,
    /// Mastra's CPU per round trip over askloop's.
    mastra_over_askloop: f64,
    askloop_peak_rss_mb: f64,
    mastra_peak_rss_mb: f64,
    askloop_p50_resume_ms: f64,
    mastra_p50_resume_ms: f64,
}

/// The Mastra program's folder: `--mastra`, else the repository's `bench/mastra`.
fn mastra_dir(target: &Target) -> anyhow::Result<PathBuf> {
    let dir = target
        .mastra_dir
        .clone()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/mastra"));
    if !dir.join("node_modules/@mastra/core").is_dir() {
        bail!(
            "no Mastra installed in {}: run `npm ci` there (Node 20+), or pass --mastra DIR",
            dir.display()
        );
    }
    Ok(dir)
}

pub async fn compare(target: &Target, n: usize) -> anyhow::Result<Report> {
    if target.db.as_deref().is_some_and(|db| db.contains("://")) {
        bail!(
            "compare runs on SQLite files only (Mastra's server keeps its runs in LibSQL beside them): leave out --db or give a path"
        );
    }
    let dir = mastra_dir(target)?;
    let load_before = loadavg();
    let askloop_roundtrip = figures(super::roundtrip(target, n).await?)?;
    let mastra_roundtrip = mastra_in_process(target, &dir, n).await?;
    let askloop_http = figures(super::http(target, n).await?)?;
    let mastra_target = Target {
        server_bin: Some(dir.join("serve")),
        ..target.clone()
    };
    let mastra_http = figures(super::http(&mastra_target, n).await?)?;
    if mastra_http["impl"] != "mastra" {
        bail!("{} did not say it is Mastra's server", dir.join("serve").display());
    }
    let comparison = Comparison {
        implementation: "askloop-vs-mastra",
        mode: "compare",
        n,
        load_before,
        load_after: loadavg(),
        // Mastra's Node process has no model in it: askloop's CPU is
        // counted without the fake model's thread.
        roundtrip: side(
            &askloop_roundtrip,
            &mastra_roundtrip,
            ["askloop_cpu_ms_per_roundtrip", "cpu_ms_per_roundtrip"],
            "peak_rss_mb",
        )?,
        http: side(
            &askloop_http,
            &mastra_http,
            ["server_cpu_ms_per_roundtrip"; 2],
            "server_peak_rss_mb",
        )?,
    };
    Report::new(&comparison, Failures::default())
}

/// Mastra's in-process round trip, against this process's fake model.
async fn mastra_in_process(target: &Target, dir: &Path, n: usize) -> anyhow::Result<Value> {
    let environment = Environment::prepare(target, Workload::Deploy).await?;
    let script = dir.join("roundtrip.mjs");
    let output = Command::new("node")
        .arg(&script)
        .arg(n.to_string())
        .args(["--model", &target.model, "--instructions", workload::DEPLOY_SYSTEM])
        .env("OPENAI_BASE_URL", &environment.base_url)
        .env("OPENAI_API_KEY", &target.api_key)
        .env("ASKLOOP_BENCH_PROMPT", workload::DEPLOY_PROMPT)
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("cannot run node {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "node {} failed ({}): {}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|line| line.starts_with('{'))
        .ok_or_else(|| anyhow!("node {} printed no JSON line", script.display()))?;
    serde_json::from_str(line).with_context(|| format!("node {} printed {line}", script.display()))
}

fn figures(report: Report) -> anyhow::Result<Value> {
    if report.failed > 0 {
        bail!("{} run(s) went wrong: {}", report.failed, report.failures.join(" | "));
    }
    Ok(serde_json::from_str(&report.line)?)
}

/// `cpu`: the key of askloop's CPU figure, then of Mastra's.
fn side(askloop: &Value, mastra: &Value, cpu: [&str; 2], rss: &str) -> anyhow::Result<Side> {
    let number = |figures: &Value, key: &str| figures[key].as_f64().ok_or_else(|| anyhow!("no `{key}` in {figures}"));
    let askloop_cpu = number(askloop, cpu[0])?;
    let mastra_cpu = number(mastra, cpu[1])?;
    Ok(Side {
        askloop_cpu_ms: askloop_cpu,
        mastra_cpu_ms: mastra_cpu,
        mastra_over_askloop: crate::measure::round3(mastra_cpu / askloop_cpu.max(1e-9)),
        askloop_peak_rss_mb: number(askloop, rss)?,
        mastra_peak_rss_mb: number(mastra, rss)?,
        askloop_p50_resume_ms: number(askloop, "p50_resume_ms")?,
        mastra_p50_resume_ms: number(mastra, "p50_resume_ms")?,
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

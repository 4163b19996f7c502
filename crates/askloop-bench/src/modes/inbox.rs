//! `inbox M`: how long the web page's Inbox takes to show its first
//! question with M runs waiting. The M runs are started and suspended in the
//! bench's store as `waiting` does (at most 100 in flight), `askloop serve`
//! serves that store, and headless chromium, driven through playwright-core
//! by `tests/web/inbox-timing.mjs`, opens `/inbox` [`LOADS`] times, each in
//! a fresh browser context (no cache), after one load not counted. Each
//! load gives the time from the start of the navigation to the frame that
//! first draws a card, and to the one whose heading shows the count of M.
//!
//! Needs `node`, `npm ci` in `tests/web`, and chromium (`CHROMIUM`, else
//! `/usr/bin/chromium`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde::{Deserialize, Serialize};

use super::waiting::suspend;
use super::{Failures, IMPL, Report};
use crate::cli::Target;
use crate::environment::{Environment, Workload};
use crate::measure::{self, median_ms, percentile_ms};
use crate::served::Served;

/// Loads measured.
const LOADS: usize = 5;

#[derive(Debug, Serialize)]
struct Figures {
    #[serde(rename = "impl")]
    implementation: &'static str,
    mode: &'static str,
    m: usize,
    loads: usize,
    first_card_ms_median: f64,
    first_card_ms_max: f64,
    /// `null` when the heading never showed the count (a page that does
    /// not count every waiting run).
    heading_count_ms_median: Option<f64>,
    heading_count_ms_max: Option<f64>,
    cards_at_first_count: usize,
    fill_s: f64,
}

/// What `inbox-timing.mjs` prints.
#[derive(Debug, Deserialize)]
struct Timings {
    first_card_ms: Vec<f64>,
    heading_count_ms: Vec<Option<f64>>,
    cards: usize,
}

pub async fn inbox(target: &Target, m: usize) -> anyhow::Result<Report> {
    let script = timing_script()?;
    let environment = Environment::prepare(target, Workload::Deploy).await?;
    let agent = environment.agent().await?;
    let mut failures = Failures::default();
    let filling = Instant::now();
    let waiting = suspend(&agent, m, &mut failures).await.len();
    let fill = filling.elapsed();

    let served = Served::start(target, &environment).await?;
    let base = served
        .api
        .strip_suffix("/api")
        .ok_or_else(|| anyhow!("the server's API is not under /api: {}", served.api))?
        .to_owned();
    let timings = time_page_loads(&script, &base, waiting).await;
    served.stop().await?;
    let timings = timings?;
    let first_card = durations(timings.first_card_ms.iter().copied().map(Some));
    let heading = durations(timings.heading_count_ms.iter().copied());
    // The count's figures only when every load showed it.
    let counted = heading.len() == timings.heading_count_ms.len();
    let figures = Figures {
        implementation: IMPL,
        mode: "inbox",
        m,
        loads: first_card.len(),
        first_card_ms_median: median_ms(&first_card),
        first_card_ms_max: percentile_ms(&first_card, 100.0),
        heading_count_ms_median: counted.then(|| median_ms(&heading)),
        heading_count_ms_max: counted.then(|| percentile_ms(&heading, 100.0)),
        cards_at_first_count: timings.cards,
        fill_s: measure::secs(fill),
    };
    Report::new(&figures, failures)
}

/// Times given in ms, without the missing ones.
fn durations(ms: impl Iterator<Item = Option<f64>>) -> Vec<Duration> {
    ms.flatten()
        .map(|ms| Duration::from_secs_f64(ms.max(0.0) / 1000.0))
        .collect()
}

/// `tests/web/inbox-timing.mjs`, with playwright-core installed beside it.
fn timing_script() -> anyhow::Result<PathBuf> {
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/web");
    if !web.join("node_modules/playwright-core").is_dir() {
        bail!(
            "inbox needs playwright-core in {}: run `npm ci --no-audit --no-fund` there",
            web.display()
        );
    }
    Ok(web.join("inbox-timing.mjs"))
}

async fn time_page_loads(script: &Path, base: &str, waiting: usize) -> anyhow::Result<Timings> {
    let output = tokio::process::Command::new("node")
        .arg(script)
        .args([base, &waiting.to_string(), &LOADS.to_string()])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .context("cannot run node (needed to drive chromium)")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "{} failed ({}): {}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).with_context(|| format!("cannot read the timings of {}: {line}", script.display()))
}

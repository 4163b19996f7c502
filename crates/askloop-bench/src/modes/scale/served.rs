//! `scale`'s served part: two `askloop serve` processes on the store the M
//! runs wait in, as two instances of a deployment share one, and two on
//! the empty twin. Round trips are started on one instance and answered on
//! the other, over HTTP, alternating between the two stores in blocks; the
//! Inbox's first page (`GET /api/runs?status=suspended&limit=50&total=true`,
//! what the web page asks first) is read from each instance. Then each
//! server's memory: what the M waiting runs cost a server, side by side
//! with servers that have none.

use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;
use serde_json::Value;

use super::{BLOCKS, Latency, PAGE, RoundTrips};
use crate::cli::Target;
use crate::environment::Environment;
use crate::measure;
use crate::served::Served;
use crate::sse_client;

/// Round trips through each pair of servers.
const ROUND_TRIPS: usize = 100;

/// Times each server's Inbox page is read.
const PAGES: usize = 50;

/// What one pair of served instances measured.
#[derive(Debug, Serialize)]
pub(super) struct Pair {
    /// Started on one instance and answered on the other.
    round_trips: RoundTrips,
    /// Read from both instances in turn.
    inbox_first_page: Latency,
    /// The two servers' CPU over the round trips, per round trip.
    cpu_ms_per_roundtrip: f64,
    /// Each server's resident memory at the end, in MB.
    rss_mb: [f64; 2],
    /// Each server's peak resident memory, in MB.
    peak_rss_mb: [f64; 2],
}

/// The served part: the pair on the store with the runs waiting, and the
/// pair on the empty twin.
#[derive(Debug, Serialize)]
pub(super) struct Served2 {
    pub(super) waiting: Pair,
    pub(super) empty: Pair,
}

/// Two servers on one store, and what they measured so far.
struct Instances {
    servers: [Served; 2],
    suspends: Vec<Duration>,
    answers: Vec<Duration>,
    pages: Vec<Duration>,
    /// The two servers' CPU over the round trips.
    round_trips_cpu: Duration,
}

impl Instances {
    async fn start(target: &Target, environment: &Environment) -> anyhow::Result<Instances> {
        let servers = [
            Served::start(target, environment).await?,
            Served::start(target, environment).await?,
        ];
        Ok(Instances {
            servers,
            suspends: Vec::new(),
            answers: Vec::new(),
            pages: Vec::new(),
            round_trips_cpu: Duration::ZERO,
        })
    }

    /// `n` round trips, the first started on one server and answered on
    /// the other, the next the other way round.
    async fn round_trips(&mut self, client: &reqwest::Client, n: usize) -> anyhow::Result<()> {
        let before = cpu(&self.servers)?;
        for i in 0..n {
            let (starter, answerer) = if i % 2 == 0 { (0, 1) } else { (1, 0) };
            let suspended = sse_client::start(client, &self.servers[starter].api).await?;
            let (run_id, call) = sse_client::expect_question(&suspended)?;
            let resumed = sse_client::resume(client, &self.servers[answerer].api, &run_id, &call).await?;
            sse_client::expect_finish(&resumed)?;
            self.suspends.push(suspended.elapsed);
            self.answers.push(resumed.elapsed);
        }
        self.round_trips_cpu += cpu(&self.servers)?.saturating_sub(before);
        Ok(())
    }

    /// Reads the Inbox's first page `n` times from each server in turn;
    /// `waiting`: how many runs it should count at least.
    async fn pages(&mut self, client: &reqwest::Client, n: usize, waiting: usize) -> anyhow::Result<()> {
        for i in 0..n {
            let api = &self.servers[i % 2].api;
            let url = format!("{api}/runs?status=suspended&limit={PAGE}&total=true");
            let started = std::time::Instant::now();
            let response = client.get(&url).send().await.with_context(|| format!("GET {url}"))?;
            let status = response.status();
            let page: Value = response.json().await.with_context(|| format!("GET {url}: the page"))?;
            self.pages.push(started.elapsed());
            let (runs, total) = (page["runs"].as_array().map_or(0, Vec::len), page["total"].as_u64());
            let expected = waiting.min(PAGE as usize);
            if !status.is_success() || runs < expected || total.is_none_or(|total| total < waiting as u64) {
                bail!("GET {url}: {status}, {runs} runs of {total:?}; expected {expected} of at least {waiting}");
            }
        }
        Ok(())
    }

    async fn finish(self) -> anyhow::Result<Pair> {
        let memory = [self.servers[0].memory_mb()?, self.servers[1].memory_mb()?];
        let [one, two] = self.servers;
        one.stop().await?;
        two.stop().await?;
        Ok(Pair {
            round_trips: RoundTrips {
                suspend: Latency::of(&self.suspends),
                answer: Latency::of(&self.answers),
            },
            inbox_first_page: Latency::of(&self.pages),
            cpu_ms_per_roundtrip: measure::round3(
                self.round_trips_cpu.as_secs_f64() * 1000.0 / self.suspends.len().max(1) as f64,
            ),
            rss_mb: memory.map(|m| m.rss),
            peak_rss_mb: memory.map(|m| m.peak),
        })
    }
}

fn cpu(servers: &[Served; 2]) -> anyhow::Result<Duration> {
    Ok(servers[0].cpu_time()? + servers[1].cpu_time()?)
}

/// The served part of `scale`: `waiting` runs wait in `full`'s store,
/// none in `empty`'s.
pub(super) async fn served(
    full: (&Target, &Environment),
    empty: (&Target, &Environment),
    waiting: usize,
) -> anyhow::Result<Served2> {
    let client = sse_client::client()?;
    let mut on_full = Instances::start(full.0, full.1).await?;
    let mut on_empty = Instances::start(empty.0, empty.1).await?;
    for _ in 0..BLOCKS {
        on_empty.round_trips(&client, ROUND_TRIPS / BLOCKS).await?;
        on_full.round_trips(&client, ROUND_TRIPS / BLOCKS).await?;
    }
    on_empty.pages(&client, PAGES, 0).await?;
    on_full.pages(&client, PAGES, waiting).await?;
    Ok(Served2 {
        waiting: on_full.finish().await?,
        empty: on_empty.finish().await?,
    })
}

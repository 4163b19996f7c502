//! `scale M`: what M runs waiting on people cost everything else, on the
//! store the target names (PostgreSQL: `--db postgres://...`, as several
//! instances share one).
//!
//! Two agents on two store handles (two connection pools, as two
//! instances have) play the round trip [`ROUND_TRIPS`] times, each started
//! on one and answered on the other, first with no run waiting, then after
//! M runs were suspended and left waiting, each on a thread of its own (of
//! [`RESOURCES`] people). The round trips with M waiting alternate, in
//! [`BLOCKS`] blocks, with as many on a twin store that holds none (a
//! second SQLite file; a second PostgreSQL schema, `<schema>_empty`), so
//! that the two figures a ratio divides are measured side by side, under
//! the same load and caches; the round trips before the M runs are kept
//! as `empty_before`. Between them, with the M runs waiting, it times
//! what reads the store while they wait: the Inbox's first page (the
//! newest 50 waiting runs, and their count), a thread's messages, a run's
//! messages, and the sweeps (expiry, stalled runs, the outbox's due
//! deliveries, the figures of questions waiting), [`PROBES`] times each.
//! Last, the same with two `askloop serve` instances on each store, over
//! HTTP, and each server's memory (`served.rs`).

mod served;

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use askloop::{Agent, Lease, RunQuery, RunStatus, RunStore, StreamOptions, ThreadKey, ThreadOptions};
use serde::Serialize;

use super::waiting::bounded;
use super::{Failures, IMPL, Report};
use crate::cli::Target;
use crate::environment::{Environment, Workload, sqlite_file};
use crate::measure::{self, median_ms, percentile_ms};
use crate::run;

/// Round trips timed before and after the M runs wait.
const ROUND_TRIPS: usize = 200;

/// The blocks the round trips with M runs waiting and those on the empty
/// twin store alternate in.
const BLOCKS: usize = 4;

/// Times each read is timed.
const PROBES: usize = 200;

/// The Inbox's first page.
const PAGE: u32 = 50;

/// The people whose threads the waiting runs are on.
const RESOURCES: usize = 100;

#[derive(Debug, Serialize)]
struct Latency {
    p50_ms: f64,
    p99_ms: f64,
}

impl Latency {
    fn of(values: &[Duration]) -> Latency {
        Latency {
            p50_ms: median_ms(values),
            p99_ms: percentile_ms(values, 99.0),
        }
    }
}

#[derive(Debug, Serialize)]
struct RoundTrips {
    suspend: Latency,
    answer: Latency,
}

#[derive(Debug, Serialize)]
struct Figures {
    #[serde(rename = "impl")]
    implementation: &'static str,
    mode: &'static str,
    m: usize,
    store: &'static str,
    /// On the empty twin store, alternating with `waiting`.
    empty: RoundTrips,
    /// On the store before the M runs, at the start.
    empty_before: RoundTrips,
    all_suspended_s: f64,
    waiting: RoundTrips,
    suspend_ratio_p50: f64,
    answer_ratio_p50: f64,
    inbox_first_page: Latency,
    inbox_count: Latency,
    thread_messages: Latency,
    run_messages: Latency,
    expiry_sweep: Latency,
    stalled_sweep: Latency,
    outbox_claim: Latency,
    questions_waiting: Latency,
    peak_rss_mb_empty: f64,
    peak_rss_mb_end: f64,
    /// Two served instances on each store.
    served: served::Served2,
    ok: usize,
}

pub async fn scale(target: &Target, m: usize) -> anyhow::Result<Report> {
    let environment = Environment::prepare(target, Workload::Deploy).await?;
    let (one, two) = (environment.agent().await?, environment.agent().await?);
    let store = askloop_store::open(&environment.db)
        .await
        .with_context(|| format!("cannot open the store at {}", environment.db))?;
    let already = store.count(&waiting_query(None)).await?;
    if already > 0 {
        bail!(
            "the store already holds {already} waiting runs; `scale` measures from none: give it a store of its own \
             (for PostgreSQL, a schema of its own: ?schema=NAME)"
        );
    }
    let twin_target = Target {
        db: empty_twin(target.db.as_deref())?,
        ..target.clone()
    };
    let twin = Environment::prepare(&twin_target, Workload::Deploy).await?;
    let (twin_one, twin_two) = (twin.agent().await?, twin.agent().await?);
    let twin_store = askloop_store::open(&twin.db)
        .await
        .with_context(|| format!("cannot open the empty twin store at {}", twin.db))?;
    let twin_holds = twin_store.count(&RunQuery::default()).await?;
    if twin_holds > 0 {
        bail!(
            "the empty twin store {} already holds {twin_holds} runs; remove it, or give `scale` a store whose twin is new",
            twin.db
        );
    }
    let mut failures = Failures::default();
    let mut ok = 0;

    let empty_before = round_trips(&one, &two, ROUND_TRIPS, &mut failures, &mut ok).await;
    let peak_rss_mb_empty = measure::peak_rss_mb();

    let started = Instant::now();
    let waiting = suspend_on_threads(&one, &two, m, &mut failures).await;
    let all_suspended = started.elapsed();

    let reads = Reads::time(store.as_ref(), &waiting).await?;
    let (mut empty, mut full) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    for _ in 0..BLOCKS {
        let block = round_trips(&twin_one, &twin_two, ROUND_TRIPS / BLOCKS, &mut failures, &mut ok).await;
        empty.0.extend(block.0);
        empty.1.extend(block.1);
        let block = round_trips(&one, &two, ROUND_TRIPS / BLOCKS, &mut failures, &mut ok).await;
        full.0.extend(block.0);
        full.1.extend(block.1);
    }
    let peak_rss_mb_end = measure::peak_rss_mb();
    let served = served::served((target, &environment), (&twin_target, &twin), waiting.len()).await?;

    let figures = Figures {
        implementation: IMPL,
        mode: "scale",
        m: waiting.len(),
        store: if environment.db_file.is_some() {
            "sqlite"
        } else {
            "postgres"
        },
        suspend_ratio_p50: measure::round3(median_ms(&full.0) / median_ms(&empty.0)),
        answer_ratio_p50: measure::round3(median_ms(&full.1) / median_ms(&empty.1)),
        empty: RoundTrips {
            suspend: Latency::of(&empty.0),
            answer: Latency::of(&empty.1),
        },
        empty_before: RoundTrips {
            suspend: Latency::of(&empty_before.0),
            answer: Latency::of(&empty_before.1),
        },
        all_suspended_s: measure::secs(all_suspended),
        waiting: RoundTrips {
            suspend: Latency::of(&full.0),
            answer: Latency::of(&full.1),
        },
        inbox_first_page: Latency::of(&reads.first_page),
        inbox_count: Latency::of(&reads.count),
        thread_messages: Latency::of(&reads.thread),
        run_messages: Latency::of(&reads.messages),
        expiry_sweep: Latency::of(&reads.expiry),
        stalled_sweep: Latency::of(&reads.stalled),
        outbox_claim: Latency::of(&reads.claim),
        questions_waiting: Latency::of(&reads.questions),
        peak_rss_mb_empty,
        peak_rss_mb_end,
        served,
        ok,
    };
    Report::new(&figures, failures)
}

/// The waiting runs, newest first, a page of them when `limit` is given.
fn waiting_query(limit: Option<u32>) -> RunQuery {
    RunQuery {
        status: Some(RunStatus::Suspended),
        limit,
        ..RunQuery::default()
    }
}

/// The thread of the `i`th waiting run.
fn thread_of(i: usize) -> ThreadKey {
    ThreadKey::new(format!("person-{}", i % RESOURCES), format!("thread-{i}"))
}

/// Starts `m` runs, each on a thread of its own, half on `one` and half
/// on `two`, at most 100 in flight, and returns the ids of those that
/// suspended on the benchmark's question; the others are `failures`.
async fn suspend_on_threads(one: &Agent, two: &Agent, m: usize, failures: &mut Failures) -> Vec<String> {
    let starts = bounded((0..m).map(|i| {
        let agent = if i % 2 == 0 { one.clone() } else { two.clone() };
        async move {
            let key = thread_of(i);
            let options = StreamOptions::default().on_thread(ThreadOptions::new(&key.resource_id, &key.thread_id));
            run::start_with(&agent, options).await
        }
    }))
    .await;
    let mut suspended = Vec::with_capacity(m);
    for streamed in starts {
        match streamed.and_then(|s| {
            s.expect_question(askloop_testkit::workload::DEPLOY_QUESTION)
                .map(|()| s)
        }) {
            Ok(s) => suspended.push(s.run_id),
            Err(err) => failures.push(err),
        }
    }
    suspended
}

/// Where the empty twin of the store at `db` is: a new SQLite file for
/// none (the bench's own), the file's path with `.empty` added, or the same
/// PostgreSQL database with `_empty` added to the schema's name.
fn empty_twin(db: Option<&str>) -> anyhow::Result<Option<String>> {
    let Some(db) = db else { return Ok(None) };
    if sqlite_file(db).is_some() {
        return Ok(Some(format!("{db}.empty")));
    }
    let mut url = reqwest::Url::parse(db).with_context(|| format!("cannot read the PostgreSQL URL {db}"))?;
    let mut schema = askloop_store::DEFAULT_POSTGRES_SCHEMA.to_owned();
    let others: Vec<(String, String)> = url
        .query_pairs()
        .filter_map(|(key, value)| {
            if key == "schema" {
                schema = value.into_owned();
                None
            } else {
                Some((key.into_owned(), value.into_owned()))
            }
        })
        .collect();
    url.query_pairs_mut()
        .clear()
        .extend_pairs(others)
        .append_pair("schema", &format!("{schema}_empty"));
    Ok(Some(url.into()))
}

/// `n` round trips, each started on `one` and answered on `two` (then the
/// other way round): (suspend times, answer times).
async fn round_trips(
    one: &Agent,
    two: &Agent,
    n: usize,
    failures: &mut Failures,
    ok: &mut usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let (mut suspends, mut answers) = (Vec::new(), Vec::new());
    for i in 0..n {
        let (starter, answerer) = if i % 2 == 0 { (one, two) } else { (two, one) };
        let trip = async {
            let suspended = run::start(starter).await?;
            suspended.expect_question(askloop_testkit::workload::DEPLOY_QUESTION)?;
            let resumed = run::resume(answerer, &suspended.run_id, run::DEPLOY_ANSWER).await?;
            resumed.expect_text(run::DEPLOY_EXPECTED)?;
            anyhow::Ok((suspended.elapsed, resumed.elapsed))
        };
        match trip.await {
            Ok((suspend, answer)) => {
                suspends.push(suspend);
                answers.push(answer);
                *ok += 1;
            }
            Err(err) => failures.push(err),
        }
    }
    (suspends, answers)
}

/// What reads of the store cost with the runs waiting.
struct Reads {
    first_page: Vec<Duration>,
    thread: Vec<Duration>,
    count: Vec<Duration>,
    messages: Vec<Duration>,
    expiry: Vec<Duration>,
    stalled: Vec<Duration>,
    claim: Vec<Duration>,
    questions: Vec<Duration>,
}

impl Reads {
    async fn time(store: &dyn RunStore, waiting: &[String]) -> anyhow::Result<Reads> {
        let mut reads = Reads {
            first_page: Vec::new(),
            thread: Vec::new(),
            count: Vec::new(),
            messages: Vec::new(),
            expiry: Vec::new(),
            stalled: Vec::new(),
            claim: Vec::new(),
            questions: Vec::new(),
        };
        let lease = Lease::new("scale-bench", chrono::Utc::now() + chrono::Duration::seconds(30));
        for i in 0..PROBES {
            let now = chrono::Utc::now();
            let page = timed(&mut reads.first_page, store.list(&waiting_query(Some(PAGE)))).await?;
            if page.len() != PAGE as usize && waiting.len() >= PAGE as usize {
                bail!("the Inbox's first page held {} runs, not {PAGE}", page.len());
            }
            timed(&mut reads.count, store.count(&waiting_query(None))).await?;
            if let Some(run_id) = waiting.get(i * waiting.len() / PROBES) {
                timed(&mut reads.messages, store.messages(run_id)).await?;
            }
            if let Some(threads) = store.thread_store() {
                let key = thread_of(i * waiting.len().max(1) / PROBES);
                let messages = timed(&mut reads.thread, threads.thread_messages(&key, 0, 100)).await?;
                if messages.is_empty() && !waiting.is_empty() {
                    bail!("thread {} of {} holds no messages", key.thread_id, key.resource_id);
                }
            }
            timed(&mut reads.expiry, store.expiring(now, None, 100)).await?;
            timed(&mut reads.stalled, store.expired(now, None, 100)).await?;
            timed(&mut reads.claim, store.claim_deliveries(now, &lease, 8)).await?;
            timed(&mut reads.questions, store.waiting()).await?;
        }
        Ok(reads)
    }
}

/// Awaits `read`, adding how long it took to `times`.
async fn timed<T, E>(times: &mut Vec<Duration>, read: impl Future<Output = Result<T, E>>) -> anyhow::Result<T>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let started = Instant::now();
    let value = read.await?;
    times.push(started.elapsed());
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_empty_twin_is_a_file_beside_or_a_schema_beside() {
        assert_eq!(empty_twin(None).unwrap(), None);
        assert_eq!(
            empty_twin(Some("/tmp/runs.db")).unwrap().as_deref(),
            Some("/tmp/runs.db.empty")
        );
        assert_eq!(
            empty_twin(Some("sqlite:///tmp/runs.db")).unwrap().as_deref(),
            Some("sqlite:///tmp/runs.db.empty")
        );
        assert_eq!(
            empty_twin(Some("postgres://postgres@127.0.0.1:5432/test?schema=bench_current"))
                .unwrap()
                .as_deref(),
            Some("postgres://postgres@127.0.0.1:5432/test?schema=bench_current_empty")
        );
        assert_eq!(
            empty_twin(Some("postgres://postgres@127.0.0.1/test?sslmode=disable"))
                .unwrap()
                .as_deref(),
            Some(&*format!(
                "postgres://postgres@127.0.0.1/test?sslmode=disable&schema={}_empty",
                askloop_store::DEFAULT_POSTGRES_SCHEMA
            ))
        );
    }
}

//! `askloop-bench`: the ask-the-user round trip benchmark (`docs/benchmarks.md`).
//!
//! ```text
//! askloop-bench [--base-url URL] [--db PATH_OR_URL] [--model NAME] [--api-key KEY]
//!               [--runtime multi|current] [--pieces TEXT[,ARGUMENTS]] MODE
//!   roundtrip N | concurrent K | restart | long T | waiting M
//!   | http N | http-concurrent K      (with [--server-bin PATH])
//!   | inbox M                         (the web page, in headless chromium)
//!   | thread M                        (runs on a stored thread of M messages)
//!   | scale M                         (round trips and reads with M runs waiting)
//!   | compare N                       (askloop and Mastra side by side, [--mastra DIR])
//! ```
//!
//! Each mode prints one JSON line (`"impl":"askloop"`). Without
//! `--base-url` the testkit's fake OpenAI-compatible server runs inside this
//! process, on a thread of its own whose CPU `roundtrip` reports apart. It
//! streams each reply's text in 20 deltas and each tool call's arguments in
//! 4 fragments, as models do (`--pieces 1`: the large-piece workload, each
//! in one). Without `--db` the store is
//! a fresh SQLite file in a temporary directory, removed at the end. Every
//! run is checked: a run that does not end with the expected text is not
//! counted in `ok` and makes the exit status non-zero. The `http` modes run
//! the same round trip through an `askloop serve` process (the binary next
//! to this one, or `--server-bin`) over HTTP, and report the server's CPU
//! and memory. See
//! `docs/benchmarks.md` for the figures.
#![forbid(unsafe_code)]

mod cli;
mod environment;
mod measure;
mod modes;
mod resume_clock;
mod run;
mod served;
mod sse_client;

use std::process::ExitCode;

use cli::{Config, Mode, RuntimeKind, USAGE};
use modes::{Report, one_line};

fn main() -> ExitCode {
    let config = match cli::parse(std::env::args().skip(1)) {
        Ok(Some(config)) => config,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            eprintln!("askloop-bench: {err}; run `askloop-bench --help` for usage");
            return ExitCode::from(2);
        }
    };
    let runtime = match config.runtime {
        RuntimeKind::Multi => tokio::runtime::Builder::new_multi_thread().enable_all().build(),
        RuntimeKind::Current => tokio::runtime::Builder::new_current_thread().enable_all().build(),
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("askloop-bench: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let pieces = config.target.pieces;
    // The benchmark runs as a task on the runtime's workers, as a server's
    // request handler would: under `block_on` it would stay on the main
    // thread, and every chunk the run's task sends it would wake that thread
    // through a futex (a third of the round trip's system calls).
    let result = runtime.block_on(async move {
        tokio::spawn(run(config))
            .await
            .unwrap_or_else(|err| Err(anyhow::anyhow!("the benchmark's task failed: {err}")))
    });
    // The runtime goes before the exit status: no task outlives the report.
    drop(runtime);
    match result.map(|report| report.noting_pieces(pieces)) {
        Ok(report) => {
            println!("{}", report.line);
            if report.failed == 0 {
                return ExitCode::SUCCESS;
            }
            eprintln!(
                "askloop-bench: {} run(s) did not end correctly; first: {}",
                report.failed,
                report.failures.join(" | ")
            );
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("askloop-bench: {}", one_line(&format!("{err:#}")));
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> anyhow::Result<Report> {
    let target = &config.target;
    match config.mode {
        Mode::Roundtrip(n) => modes::roundtrip(target, n).await,
        Mode::Compare(n) => modes::compare(target, n).await,
        Mode::Concurrent(k) => modes::concurrent(target, k).await,
        Mode::Restart => modes::restart(target).await,
        Mode::Long(t) => modes::long(target, t).await,
        Mode::Waiting(m) => modes::waiting(target, m).await,
        Mode::Http(n) => modes::http(target, n).await,
        Mode::HttpConcurrent(k) => modes::http_concurrent(target, k).await,
        Mode::Inbox(m) => modes::inbox(target, m).await,
        Mode::RestartSuspend => modes::restart_suspend(target).await,
        Mode::RestartResume(run_id) => modes::restart_resume(target, &run_id).await,
        Mode::Thread(m) => modes::thread(target, m).await,
        Mode::Scale(m) => modes::scale(target, m).await,
        Mode::ThreadStart(thread_id) => modes::thread_start(target, &thread_id).await,
        Mode::ThreadAnswer(run_id) => modes::thread_answer(target, &run_id).await,
    }
}

//! The `askloop` command. Flags are parsed into `cli::Cli`, resolved in
//! `setup`, and each command lives in `commands/`.
#![forbid(unsafe_code)]
// A write to a closed pipe must end quietly, never panic: use `out!`,
// `outln!`, `err!` and `errln!` (see `out.rs`).
#![deny(clippy::print_stdout, clippy::print_stderr)]

#[macro_use]
mod out;

mod cli;
mod commands;
mod demo;
mod escape;
mod exit;
mod prompt;
mod render;
mod setup;
mod tools;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    init_logs(cli.log_format);
    let runtime = match runtime_for(&cli.command).enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            errln!("askloop: cannot start: {err}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    match runtime.block_on(commands::dispatch(cli)) {
        Ok(done) => done.code(),
        Err(err) => {
            errln!("askloop: {err}");
            err.code()
        }
    }
}

/// Logs to stderr, the lines ASKLOOP_LOG picks (warnings and errors by
/// default), as text or as JSON lines. A JSON line holds its event's fields
/// at the top level and the spans it was logged in (`spans`, outermost
/// first), so a line logged while a run is served or driven carries its
/// `run_id`.
fn init_logs(format: cli::LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ASKLOOP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        cli::LogFormat::Text => logs.init(),
        cli::LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .init(),
    }
}

/// The runtime a command runs on. `serve` runs on `--threads` threads: on
/// the calling thread alone by default, which costs about 15% less CPU per
/// round trip than two worker threads (no wake-ups between workers; see
/// docs/benchmarks.md). Every other command on a thread per core.
fn runtime_for(command: &cli::Command) -> tokio::runtime::Builder {
    match command {
        cli::Command::Serve(args) if args.request_threads() == 1 => tokio::runtime::Builder::new_current_thread(),
        cli::Command::Serve(args) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(args.request_threads());
            builder
        }
        _ => tokio::runtime::Builder::new_multi_thread(),
    }
}

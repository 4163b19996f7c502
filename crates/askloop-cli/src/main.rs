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
mod telemetry;
mod tools;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let export = start_export(&cli);
    init_logs(cli.log_format, export.as_ref());
    let runtime = match runtime_for(&cli.command).enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            errln!("askloop: cannot start: {err}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    // No MCP server a command started outlives it.
    let code = match runtime.block_on(async {
        let done = commands::dispatch(cli).await;
        askloop_mcp::stop_servers().await;
        done
    }) {
        Ok(done) => done.code(),
        Err(err) => {
            errln!("askloop: {err}");
            err.code()
        }
    };
    drop(runtime);
    // The spans still queued are sent before the process ends.
    if let Some(export) = export {
        export.shutdown();
    }
    code
}

/// Trace and metrics export, when the environment or `[telemetry]` of the
/// configuration file turns it on (see `telemetry.rs`); a `[telemetry]`
/// table that cannot be read, or an exporter that cannot start, is a
/// warning, and nothing is exported.
fn start_export(cli: &cli::Cli) -> Option<telemetry::Export> {
    let config = askloop_config::ServerConfig::locate(cli.config.as_deref());
    let env = |name: &str| std::env::var(name).ok();
    let plan = match telemetry::plan(config.as_deref(), &env) {
        Ok(plan) => plan?,
        Err(err) => {
            errln!("askloop: warning: {err}; nothing is exported");
            return None;
        }
    };
    match telemetry::Export::start(&plan) {
        Ok(export) => Some(export),
        Err(err) => {
            errln!("askloop: warning: {err}; nothing is exported");
            None
        }
    }
}

/// Logs to stderr, the lines ASKLOOP_LOG picks (warnings and errors by
/// default), as text or as JSON lines. A JSON line holds its event's fields
/// at the top level and the spans it was logged in (`spans`, outermost
/// first), so a line logged while a run is served or driven carries its
/// `run_id`, and while a run is driven with trace export on, the run's
/// `trace_id`. With export on, the spans of runs also go to the
/// OpenTelemetry layer, whatever ASKLOOP_LOG picks.
fn init_logs(format: cli::LogFormat, export: Option<&telemetry::Export>) {
    use tracing_subscriber::prelude::*;

    let filter = tracing_subscriber::EnvFilter::try_from_env("ASKLOOP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = match format {
        cli::LogFormat::Text => lines.boxed(),
        cli::LogFormat::Json => lines
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        .with(export.and_then(telemetry::Export::layer))
        .init();
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

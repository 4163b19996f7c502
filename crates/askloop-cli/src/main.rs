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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ASKLOOP_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
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

//! The `askloop` command. Flags are parsed into `cli::Cli`, resolved in
//! `setup`, and each command lives in `commands/`.
#![forbid(unsafe_code)]

mod cli;
mod commands;
mod demo;
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
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("askloop: cannot start: {err}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    match runtime.block_on(commands::dispatch(cli)) {
        Ok(done) => done.code(),
        Err(err) => {
            eprintln!("askloop: {err}");
            err.code()
        }
    }
}

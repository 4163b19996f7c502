//! `askloop-fake-openai`: the benchmark's fake OpenAI-compatible server as a
//! program, so other frameworks can be measured against the same server.
//!
//! ```text
//! askloop-fake-openai [--port PORT] [--workload deploy|long:T] [--pieces TEXT[,ARGUMENTS]] [--pace MS]
//! ```
//!
//! `--pieces` streams each reply's text in TEXT deltas and each tool call's
//! arguments in ARGUMENTS fragments (default `20,4`, as models stream; `1`
//! for the large-piece workload). `--pace` waits MS milliseconds before each
//! piece but the first, as a local model server sends tokens as it makes them
//! (0, the default: all at once). Prints `listening on http://127.0.0.1:PORT/v1` once ready and serves until
//! interrupted. Requests are not recorded (memory stays flat).

use std::process::ExitCode;

use askloop_testkit::workload::{self, Pieces};
use askloop_testkit::{FakeResponse, FakeServer};

const USAGE: &str =
    "usage: askloop-fake-openai [--port PORT] [--workload deploy|long:T] [--pieces TEXT[,ARGUMENTS]] [--pace MS]";

enum Workload {
    Deploy,
    Long(usize),
}

struct Args {
    port: u16,
    workload: Workload,
    pieces: Pieces,
    /// Between two pieces of a reply.
    pace: std::time::Duration,
}

/// Why the arguments were not used: help was asked for, or one is wrong.
#[derive(Debug)]
enum NotRun {
    Help,
    Usage(String),
}

impl From<String> for NotRun {
    fn from(problem: String) -> Self {
        NotRun::Usage(problem)
    }
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Args, NotRun> {
    let mut parsed = Args {
        port: 0,
        workload: Workload::Deploy,
        pieces: Pieces::TOKENS,
        pace: std::time::Duration::ZERO,
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg, None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or(format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--port" => {
                let text = value()?;
                parsed.port = text
                    .parse()
                    .map_err(|_| format!("--port: `{text}` is not a port number"))?;
            }
            "--workload" => {
                let text = value()?;
                parsed.workload = match text.as_str() {
                    "deploy" => Workload::Deploy,
                    long => {
                        let t = long
                            .strip_prefix("long:")
                            .and_then(|t| t.parse::<usize>().ok())
                            .filter(|t| *t > 0)
                            .ok_or(format!("--workload: expected deploy or long:T (T > 0), got `{text}`"))?;
                        Workload::Long(t)
                    }
                };
            }
            "--pieces" => {
                let text = value()?;
                parsed.pieces = Pieces::parse(&text).map_err(|problem| format!("--pieces: {problem}"))?;
            }
            "--pace" => {
                let text = value()?;
                let ms: u64 = text
                    .parse()
                    .map_err(|_| format!("--pace: `{text}` is not a whole number of milliseconds"))?;
                parsed.pace = std::time::Duration::from_millis(ms);
            }
            "-h" | "--help" => return Err(NotRun::Help),
            other => return Err(NotRun::Usage(format!("unknown argument `{other}`"))),
        }
    }
    Ok(parsed)
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(NotRun::Help) => {
            eprintln!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(NotRun::Usage(problem)) => {
            eprintln!("askloop-fake-openai: {problem}");
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("askloop-fake-openai: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let builder = FakeServer::builder().port(args.port).record_requests(false);
        let pace = args.pace;
        let paced = move |response: FakeResponse| match response {
            FakeResponse::Turn(turn) => FakeResponse::Turn(turn.frame_delay(pace)),
            other => other,
        };
        let builder = match args.workload {
            Workload::Deploy => {
                let respond = workload::deploy_responder_in(args.pieces);
                builder.responder(move |body| paced(respond(body)))
            }
            Workload::Long(t) => {
                let respond = workload::long_responder_in(t, args.pieces);
                builder.responder(move |body| paced(respond(body)))
            }
        };
        let server = match builder.start().await {
            Ok(server) => server,
            Err(err) => {
                eprintln!("askloop-fake-openai: cannot listen on 127.0.0.1:{}: {err}", args.port);
                return ExitCode::FAILURE;
            }
        };
        println!("listening on {}", server.openai_base_url());
        if let Err(err) = tokio::signal::ctrl_c().await {
            eprintln!("askloop-fake-openai: cannot wait for Ctrl-C: {err}");
            return ExitCode::FAILURE;
        }
        ExitCode::SUCCESS
    })
}

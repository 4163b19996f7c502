//! The command line as typed: raw flags, parsed by clap. Each command in
//! `commands/` reads its own arguments; `setup.rs` turns the model flags
//! into a model and an agent, and finds the default database.

use std::path::PathBuf;
use std::time::Duration;

use askloop::InvalidDuration;
use clap::{Args, Parser, Subcommand, ValueEnum};

const EXIT_CODES: &str = "\
Exit status:
  0  the run completed (or the command succeeded; output cut short by a closed pipe too)
  1  failure: unknown run or thread, run not suspended or already finished, question already
     answered, expired or another resume won, model error, a thread to delete whose runs still
     wait (without --cancel-runs); and the database:
     none at the --db path (only run, chat and serve create one),
     not a SQLite database or damaged, read only, disk full, server unreachable
  2  bad usage: bad flags (a --db that is no kind of location, --limit 0, --reason without
     --decline, a --reason over 64 KiB), a RUN_ID no run can have (a run id is 1 to 256 bytes
     with no control characters and no white space at either end, and is not . or ..; thread
     ids and --resource follow the same rule), an answer the question does not accept,
     malformed --answer-json, a resume without --tool-call-id while several questions are
     pending
  3  the run is suspended, waiting for an answer (answer it with `askloop resume`)

--db: run, chat and serve create the SQLite file (and its folder) when missing; runs, runs show,
resume, approve and decline never do: they say that no database exists at that path.
runs and runs show open it read only, so a read-only file or folder can be listed.";

/// Talk to an agent that stops to ask you things, and answer it now or later.
#[derive(Debug, Parser)]
#[command(name = "askloop", version, about, after_help = EXIT_CODES, after_long_help = EXIT_CODES)]
pub struct Cli {
    /// Where runs are stored: a SQLite file path, sqlite://PATH or postgres://URL.
    /// Default: $XDG_DATA_HOME/askloop/askloop.db (or ~/.local/share/askloop/askloop.db).
    /// Only run, chat and serve create a missing file; the other commands fail (exit 1).
    #[arg(long, env = "ASKLOOP_DB", global = true, value_name = "PATH_OR_URL")]
    pub db: Option<String>,
    /// The agents' configuration file. serve and mcp serve its agents; resume, approve,
    /// decline, retry, cancel and runs recover/expire rebuild from it the agent of a run that
    /// `askloop serve` or `askloop mcp` started. Default: ./askloop.toml if it exists, else
    /// one agent, `assistant`, with ask_user and the model of --model / --script / the
    /// environment.
    #[arg(long, env = "ASKLOOP_CONFIG", global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// How log lines are written to stderr: text, for people, or json, one JSON object a
    /// line with the spans it was logged in (a run's lines carry its run_id). Which lines:
    /// ASKLOOP_LOG (e.g. info, or askloop=debug; default warn).
    #[arg(long, env = "ASKLOOP_LOG_FORMAT", global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Lines for people.
    Text,
    /// One JSON object a line.
    Json,
}

#[derive(Debug, Args)]
pub struct ModelArgs {
    /// The model, e.g. openai/gpt-4o-mini, anthropic/claude-sonnet-4-5, ollama/qwen2.5.
    #[arg(long, env = "ASKLOOP_MODEL", value_name = "SPEC", conflicts_with = "script")]
    pub model: Option<String>,
    /// A scripted model file ({"turns": [...]}) instead of a real model.
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Chat with the default agent; answer its questions as they come.
    Chat {
        /// The first message; you are asked for it when left out.
        prompt: Option<String>,
        /// Continue thread ID (or start it): each message is a run on the thread, which
        /// keeps the conversation from any terminal, after any restart. Its last messages
        /// are shown first, and a question it waits on is asked before anything else.
        #[arg(long, value_name = "ID")]
        thread: Option<String>,
        #[command(flatten)]
        resource: ResourceArg,
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Start one run without prompting; print its questions and exit.
    Run {
        /// What to ask the agent.
        prompt: String,
        /// Print every chunk as one JSON object per line, and nothing else on stdout.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Answer a pending question and continue the run.
    Resume(ResumeArgs),
    /// List runs, newest first; `runs show RUN_ID` shows one.
    Runs(RunsArgs),
    /// List your threads (conversations), newest first; `threads show ID` shows one,
    /// `threads delete ID` deletes one.
    Threads(ThreadsArgs),
    /// Approve a tool call that waits for approval (or, with --all, every one of the run).
    Approve {
        /// The run.
        run_id: String,
        /// Which call, when several are pending.
        #[arg(long, conflicts_with = "all")]
        tool_call_id: Option<String>,
        /// Every call of the run that waits for approval, as one decision: each runs once,
        /// and the model is called once after the last. Questions stay open.
        #[arg(long)]
        all: bool,
        /// Run the call with these arguments (a JSON object) instead of the model's; they
        /// are checked against the tool's input schema first. The model is told the call
        /// ran with them.
        #[arg(long, value_name = "JSON", conflicts_with_all = ["all", "edit"])]
        args: Option<String>,
        /// Edit the call's arguments in $VISUAL or $EDITOR (else vi) before approving;
        /// leaving them unchanged approves them as they are.
        #[arg(long, conflicts_with = "all")]
        edit: bool,
        /// Let later calls of the same tool run without asking: in this run's thread
        /// (`thread`) or in every thread of its resource (`resource`). Only for a run on a
        /// thread; `askloop grants` lists them, `askloop grants revoke ID` ends one.
        #[arg(long, value_name = "SCOPE", conflicts_with_all = ["all", "args", "edit"])]
        always: Option<askloop::GrantScope>,
        /// With --always: only later calls with the same arguments.
        #[arg(long, requires = "always")]
        same_args: bool,
        /// With --always: for this long (e.g. 8h, 30m); without it, until revoked.
        #[arg(long = "for", value_name = "DURATION", requires = "always", value_parser = duration)]
        lasting: Option<Duration>,
        /// Continue with this model instead of the run's own, resolved from
        /// the environment now (e.g. openai/gpt-4o-mini with a new
        /// OPENAI_BASE_URL). Without it, a run goes on where it started.
        #[arg(long, value_name = "SPEC")]
        model: Option<String>,
        /// Print every chunk as one JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// List the approvals that stick (made with `approve --always`) of your resource;
    /// `grants revoke ID` ends one: the next call it covered waits for approval again.
    Grants(GrantsArgs),
    /// Decline a tool call (or a question); the agent is told and goes on.
    Decline {
        /// The run.
        run_id: String,
        /// Which call, when several are pending.
        #[arg(long, conflicts_with = "all")]
        tool_call_id: Option<String>,
        /// Every call of the run that waits for approval, as one decision (none runs; the
        /// model is told each, with the reason, and called once). Questions stay open.
        #[arg(long)]
        all: bool,
        /// Why, shown to the model.
        #[arg(long)]
        reason: Option<String>,
        /// Continue with this model instead of the run's own, resolved from
        /// the environment now (e.g. openai/gpt-4o-mini with a new
        /// OPENAI_BASE_URL). Without it, a run goes on where it started.
        #[arg(long, value_name = "SPEC")]
        model: Option<String>,
        /// Print every chunk as one JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Continue a failed run from its last stored step (a run failed by an unreachable
    /// model, a busy database or an interrupted process); stored answers are kept.
    Retry {
        /// The run.
        run_id: String,
        /// Continue with this model instead of the run's own, resolved from
        /// the environment now.
        #[arg(long, value_name = "SPEC")]
        model: Option<String>,
        /// Print every chunk as one JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a suspended or running run: the model is not called again.
    Cancel {
        /// The run.
        run_id: String,
    },
    /// Make a signed link that answers a waiting call as a named person, without a token
    /// (needs [links] and public_url in askloop.toml); --revoke LINK_ID takes one back.
    Link(LinkArgs),
    /// Serve the HTTP API (Mastra-compatible agent routes, /api/runs) for the agents of askloop.toml.
    Serve(ServeArgs),
    /// Serve the agents of askloop.toml as MCP tools (ask_<agent>) on stdin/stdout, for an
    /// MCP client such as Claude Desktop, Claude Code, Cursor or VS Code.
    Mcp(McpArgs),
}

#[derive(Debug, Args)]
pub struct LinkArgs {
    /// The run whose waiting call the link answers.
    #[arg(required_unless_present = "revoke", conflicts_with = "revoke")]
    pub run_id: Option<String>,
    /// Which call, when several wait.
    #[arg(long, value_name = "ID")]
    pub call: Option<String>,
    /// Whom the link is for: its answer is recorded as theirs, whoever follows it.
    #[arg(long, value_name = "NAME", required_unless_present = "revoke")]
    pub to: Option<String>,
    /// How long the link works, if less than [links] max_age (never past the call's own
    /// time limit).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub expires_in: Option<Duration>,
    /// Revoke the link with this id instead: it answers nothing from then on.
    #[arg(long, value_name = "LINK_ID")]
    pub revoke: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The base URL of an `askloop serve` on the same database (e.g. http://127.0.0.1:4111):
    /// a client that cannot show questions is told to answer at URL/runs/RUN_ID.
    #[arg(long, value_name = "URL")]
    pub page_url: Option<String>,
    /// The resource (whom the conversations are with) of the threads a client names in the
    /// `thread` argument of ask_<agent>. Without it: ASKLOOP_RESOURCE, else the login name
    /// ($USER or $USERNAME), else "mcp".
    #[arg(long, value_name = "NAME")]
    pub resource: Option<String>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on. Without ASKLOOP_API_TOKEN, only a loopback address is
    /// accepted unless --allow-unauthenticated is given.
    #[arg(long, default_value = "127.0.0.1:4111", value_name = "HOST:PORT")]
    pub addr: String,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Listen beyond loopback without ASKLOOP_API_TOKEN (anyone who reaches the port can
    /// answer and cancel runs).
    #[arg(long)]
    pub allow_unauthenticated: bool,
    /// Allow browser calls from this origin (CORS); repeat it, or give * for any origin
    /// (only with a token).
    #[arg(long, value_name = "ORIGIN")]
    pub cors_origin: Vec<String>,
    /// Answer requests naming this host (e.g. the name a reverse proxy forwards), besides
    /// loopback names, IP addresses and the host of public_url; repeat it. Without a token
    /// the server answers to no other host (against DNS rebinding); giving one turns the
    /// check on with a token too.
    #[arg(long, value_name = "HOST")]
    pub allow_host: Vec<String>,
    /// The largest request body accepted, in bytes.
    #[arg(long, default_value_t = askloop_server::DEFAULT_BODY_LIMIT, value_name = "BYTES")]
    pub max_body_bytes: usize,
    /// The most live event streams (GET /api/events, one per open page) one caller may hold
    /// open at once: each token, and each person a trusted proxy names; more are refused
    /// with 429 (at least 1).
    #[arg(long, default_value_t = askloop_server::DEFAULT_EVENT_STREAMS_PER_CALLER, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_event_streams: usize,
    /// How long runs' open streams may run on after SIGTERM or Ctrl-C (the
    /// pages' live feeds end at once; a second SIGTERM or Ctrl-C stops at
    /// once). Seconds, or a number with a unit (500ms, 1.5s, 2m).
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = duration)]
    pub shutdown_grace: Duration,
    /// How often to look for runs whose process died mid-step (their lease
    /// ran out); such runs are taken over and continued. 0: never.
    #[arg(long, default_value = "15s", value_name = "DURATION", value_parser = duration)]
    pub recover_every: Duration,
    /// How often the store-wide figures of GET /metrics (runs and questions
    /// waiting, runs running) are read from the store. 0: never.
    #[arg(long, default_value = "15s", value_name = "DURATION", value_parser = duration)]
    pub metrics_every: Duration,
    /// How long a client may take to send a request's headers; a slower
    /// client's connection is closed (more than zero).
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = positive_duration)]
    pub header_timeout: Duration,
    /// How long a request body may take to arrive in full after its headers;
    /// a slower one gets 408 (more than zero).
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = positive_duration)]
    pub body_timeout: Duration,
    /// Threads that handle requests and drive runs. One thread serves several
    /// hundred question-and-answer round trips a second, at less CPU per round
    /// trip than several (SQLite writes have their own thread either way);
    /// 0: one per CPU core; at most 512.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=MAX_THREADS))]
    pub threads: usize,
}

/// The most `--threads` accepts. The work is waiting on sockets and the
/// store, so threads beyond the CPU cores only add switching between them;
/// 512 is above the hardware threads of the largest common servers (384 on
/// two 96-core processors), so a larger number is a slip; and thousands of
/// threads, each with its own stack, take seconds to start before the
/// server says a word.
const MAX_THREADS: u64 = 512;

impl ServeArgs {
    /// How many threads handle requests: `--threads`, with 0 read as one
    /// per CPU core.
    pub fn request_threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        }
    }
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run to continue.
    pub run_id: String,
    /// Which pending call to answer (needed when several are pending).
    #[arg(long)]
    pub tool_call_id: Option<String>,
    /// The answer. Repeat it to pick several options of a multi-select question.
    #[arg(long, conflicts_with_all = ["answer_json", "decline"])]
    pub answer: Vec<String>,
    /// The resume data as JSON, passed exactly (e.g. '["a","b"]' or '{"approved":true}').
    #[arg(long, value_name = "JSON", conflicts_with = "decline")]
    pub answer_json: Option<String>,
    /// Decline the question instead of answering it.
    #[arg(long)]
    pub decline: bool,
    /// Why you decline, shown to the model (only with --decline).
    #[arg(long)]
    pub reason: Option<String>,
    /// Continue with this model instead of the run's own, resolved from
    /// the environment now (e.g. openai/gpt-4o-mini with a new
    /// OPENAI_BASE_URL). Without it, a run goes on where it started.
    #[arg(long, value_name = "SPEC")]
    pub model: Option<String>,

    /// Print every chunk as one JSON object per line, and nothing else on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct RunsArgs {
    #[command(subcommand)]
    pub show: Option<RunsCommand>,
    /// Only runs with this status: running, suspended, completed, failed, cancelled
    /// (a running run whose process died is listed as stalled).
    #[arg(long)]
    pub status: Option<String>,
    /// At most this many runs (at least 1).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    /// Print one JSON array.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Continue every stalled run (running, but its process died: its lease ran out)
    /// from its last stored step.
    Recover {
        /// Print every chunk as one JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Resolve every question and approval whose time limit passed (the model
    /// is told no answer came; an approval is declined) and continue those runs.
    Expire {
        /// Print every chunk as one JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Show one run: status, pending questions, conversation.
    Show {
        /// The run.
        run_id: String,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Whose threads: `--resource`, else `ASKLOOP_RESOURCE`, else the login name.
#[derive(Debug, Args)]
pub struct ResourceArg {
    /// Whose threads these are (a person, an account). Default: $ASKLOOP_RESOURCE, else
    /// your login name ($USER), the name the CLI records as the author of what you do.
    #[arg(long, value_name = "NAME", global = true)]
    pub resource: Option<String>,
}

/// `askloop threads`. `--resource` (and `--json`) may come before or
/// after `show` and `delete`, so its arguments do not conflict with them.
#[derive(Debug, Args)]
pub struct ThreadsArgs {
    #[command(subcommand)]
    pub command: Option<ThreadsCommand>,
    #[command(flatten)]
    pub resource: ResourceArg,
    /// At most this many threads (at least 1).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    /// Print one JSON array.
    #[arg(long)]
    pub json: bool,
}

/// `askloop grants`.
#[derive(Debug, Args)]
pub struct GrantsArgs {
    #[command(subcommand)]
    pub command: Option<GrantsCommand>,
    #[command(flatten)]
    pub resource: ResourceArg,
    /// Only those made in this thread.
    #[arg(long, value_name = "ID")]
    pub thread: Option<String>,
    /// Revoked and expired ones too.
    #[arg(long)]
    pub all: bool,
    /// Print one JSON array.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum GrantsCommand {
    /// End an approval that sticks: from the next model call on, the calls it covered
    /// wait for approval again. Recorded with you as who revoked it.
    Revoke {
        /// The grant (its id, as `askloop grants` lists it).
        grant_id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ThreadsCommand {
    /// Show one thread: its messages, each tool call as its run stands now (waiting,
    /// answered, declined, expired, superseded... and by whom), and the questions it
    /// waits on with the run to answer them with (`askloop resume RUN`).
    Show {
        /// The thread.
        thread_id: String,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Delete a thread with its messages and runs. A thread whose runs still wait (or run)
    /// is kept, naming them, unless --cancel-runs.
    Delete {
        /// The thread.
        thread_id: String,
        /// Cancel the thread's unfinished runs first (recorded as cancels by you).
        #[arg(long)]
        cancel_runs: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// A flag's duration, in [`askloop::parse_duration`]'s forms.
fn duration(text: &str) -> Result<Duration, InvalidDuration> {
    askloop::parse_duration(text)
}

/// A flag's duration that must be more than zero.
fn positive_duration(text: &str) -> Result<Duration, NotPositiveDuration> {
    match duration(text)? {
        zero if zero.is_zero() => Err(NotPositiveDuration::Zero(text.trim().to_owned())),
        positive => Ok(positive),
    }
}

/// Why a flag that needs time to pass (a timeout) cannot use its value;
/// clap prints the message after the flag's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NotPositiveDuration {
    /// Not a duration at all; the message names the accepted forms.
    #[error(transparent)]
    Invalid(#[from] InvalidDuration),
    /// Zero, which would time out at once.
    #[error("{0:?} is no time at all; give more than zero")]
    Zero(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_of_zero_is_refused_and_a_positive_one_taken() {
        assert_eq!(positive_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(
            positive_duration(" 0s "),
            Err(NotPositiveDuration::Zero("0s".to_owned()))
        );
        assert_eq!(
            positive_duration("0s").unwrap_err().to_string(),
            "\"0s\" is no time at all; give more than zero"
        );
        assert!(matches!(
            positive_duration("soon"),
            Err(NotPositiveDuration::Invalid(_))
        ));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
    }
}

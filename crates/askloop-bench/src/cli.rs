//! Command-line arguments, parsed into raw values and then resolved into one
//! [`Config`]; the rest of the program never sees raw flags.

use std::fmt;
use std::path::PathBuf;

use askloop_testkit::workload::Pieces;

/// Usage, printed with every argument error.
pub const USAGE: &str = "usage: askloop-bench [--base-url URL] [--db PATH_OR_URL] [--model NAME] [--api-key KEY] [--detail] \
[--runtime multi|current] [--pieces TEXT[,ARGUMENTS]] [--server-bin PATH] [--hold SECS] [--mastra DIR] MODE where MODE is: roundtrip N | concurrent K | restart | long T | waiting M \
| http N | http-concurrent K | inbox M | thread M | scale M | compare N";

/// Which Tokio runtime drives the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    /// Work-stealing workers, one per core (the default; what a server uses).
    Multi,
    /// One thread, like Node's event loop (one runtime per core in a server).
    Current,
}

/// The model name sent to the server by default.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";

/// The key sent by default: the fake server ignores it.
pub const DEFAULT_API_KEY: &str = "sk-askloop-bench";

/// What to measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// N sequential round trips after 3 warm-ups.
    Roundtrip(usize),
    /// K runs suspended at once, then resumed at once.
    Concurrent(usize),
    /// Suspend in one process, resume in another.
    Restart,
    /// One run asking T questions in a row.
    Long(usize),
    /// M runs, at most 100 in flight, all suspended then all resumed.
    Waiting(usize),
    /// N sequential round trips over HTTP through an `askloop serve` process.
    Http(usize),
    /// K runs at once over HTTP through an `askloop serve` process.
    HttpConcurrent(usize),
    /// M runs waiting, then the web page's Inbox opened in headless chromium.
    Inbox(usize),
    /// A stored thread grown to M messages, then runs started on it and
    /// answered, in this process and in fresh ones.
    Thread(usize),
    /// Round trips with no run waiting and with M waiting, on two store
    /// handles, and the reads that M waiting runs could slow.
    Scale(usize),
    /// `roundtrip N` and `http N` in askloop and in Mastra (`bench/mastra`),
    /// with the ratios.
    Compare(usize),
    /// Hidden: the suspending half of `restart`, in a child process.
    RestartSuspend,
    /// Hidden: the resuming half of `restart`, in a child process.
    RestartResume(String),
    /// Hidden: a run started on thread THREAD_ID of `thread`, in a child
    /// process, until it suspends.
    ThreadStart(String),
    /// Hidden: the answering half of `thread`, in a child process.
    ThreadAnswer(String),
}

/// Where the model server and the store are, and how to reach them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// An external OpenAI-compatible server; `None` starts the fake one.
    pub base_url: Option<String>,
    /// The store location; `None` makes a fresh SQLite file.
    pub db: Option<String>,
    /// The model name sent in requests.
    pub model: String,
    /// The API key sent in requests.
    pub api_key: String,
    /// Print a breakdown of the figures to stderr (`long`: the store's share
    /// of each resume).
    pub detail: bool,
    /// The `askloop` binary the `http` modes serve with; `None`: the one
    /// next to this program.
    pub server_bin: Option<PathBuf>,
    /// `http-concurrent`: once all runs are suspended, print the server's
    /// pid and wait this long before resuming them, so the server can be
    /// looked at (a heap profile, gdb) with K runs waiting.
    pub hold: Option<std::time::Duration>,
    /// `compare`: the folder of the Mastra program (`bench/mastra`, with its
    /// `npm ci` done); `None`: the repository's.
    pub mastra_dir: Option<PathBuf>,
    /// How finely the in-process fake model streams its replies (20 text
    /// deltas and 4 argument fragments unless `--pieces` says otherwise).
    pub pieces: Pieces,
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// What to measure.
    pub mode: Mode,
    /// The runtime it runs on.
    pub runtime: RuntimeKind,
    /// Against what.
    pub target: Target,
}

/// An argument the bench cannot use; the message fits one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgError(pub String);

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ArgError {}

/// Parses the arguments after the program name. `Ok(None)` asks for help.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Config>, ArgError> {
    let mut target = Target {
        base_url: None,
        db: None,
        model: DEFAULT_MODEL.to_owned(),
        api_key: DEFAULT_API_KEY.to_owned(),
        detail: false,
        server_bin: None,
        hold: None,
        mastra_dir: None,
        pieces: Pieces::TOKENS,
    };
    let mut runtime = RuntimeKind::Multi;
    let mut positional = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if !arg.starts_with("--") || arg == "--" {
            if arg == "-h" {
                return Ok(None);
            }
            positional.push(arg);
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg, None),
        };
        if flag == "--help" {
            return Ok(None);
        }
        if flag == "--detail" && inline.is_none() {
            target.detail = true;
            continue;
        }
        let value = match inline.or_else(|| args.next()) {
            Some(value) if !value.trim().is_empty() => value,
            _ => return Err(ArgError(format!("{flag} needs a value"))),
        };
        match flag.as_str() {
            "--base-url" => target.base_url = Some(check_base_url(&value)?),
            "--db" => target.db = Some(value),
            "--model" => target.model = value,
            "--api-key" => target.api_key = value,
            "--server-bin" => target.server_bin = Some(PathBuf::from(value)),
            "--mastra" => target.mastra_dir = Some(PathBuf::from(value)),
            "--hold" => {
                let secs: u64 = value
                    .parse()
                    .map_err(|_| ArgError(format!("--hold takes whole seconds, not `{value}`")))?;
                target.hold = Some(std::time::Duration::from_secs(secs));
            }
            "--pieces" => {
                target.pieces = Pieces::parse(&value).map_err(|problem| ArgError(format!("--pieces: {problem}")))?;
            }
            "--runtime" => {
                runtime = match value.as_str() {
                    "multi" => RuntimeKind::Multi,
                    "current" => RuntimeKind::Current,
                    other => return Err(ArgError(format!("--runtime takes multi or current, not `{other}`"))),
                }
            }
            other => return Err(ArgError(format!("unknown option `{other}`"))),
        }
    }
    if target.base_url.is_some() && target.pieces != Pieces::TOKENS {
        return Err(ArgError(
            "--pieces sets how the bench's own fake model streams; with --base-url the outside server decides".into(),
        ));
    }
    let mode = parse_mode(&positional)?;
    Ok(Some(Config { mode, runtime, target }))
}

fn parse_mode(positional: &[String]) -> Result<Mode, ArgError> {
    let words: Vec<&str> = positional.iter().map(String::as_str).collect();
    let mode = match words.as_slice() {
        ["roundtrip", n] => Mode::Roundtrip(count("roundtrip", n)?),
        ["concurrent", k] => Mode::Concurrent(count("concurrent", k)?),
        ["restart"] => Mode::Restart,
        ["long", t] => Mode::Long(count("long", t)?),
        ["waiting", m] => Mode::Waiting(count("waiting", m)?),
        ["http", n] => Mode::Http(count("http", n)?),
        ["http-concurrent", k] => Mode::HttpConcurrent(count("http-concurrent", k)?),
        ["inbox", m] => Mode::Inbox(count("inbox", m)?),
        ["thread", m] => Mode::Thread(count("thread", m)?),
        ["scale", m] => Mode::Scale(count("scale", m)?),
        ["compare", n] => Mode::Compare(count("compare", n)?),
        ["__restart-suspend"] => Mode::RestartSuspend,
        ["__restart-resume", run_id] => Mode::RestartResume((*run_id).to_owned()),
        ["__thread-start", thread_id] => Mode::ThreadStart((*thread_id).to_owned()),
        ["__thread-answer", run_id] => Mode::ThreadAnswer((*run_id).to_owned()),
        [] => return Err(ArgError("no mode given".into())),
        [mode] if COUNTED_MODES.contains(mode) => {
            return Err(ArgError(format!("mode `{mode}` needs a count, e.g. `{mode} 10`")));
        }
        ["restart", ..] => {
            return Err(ArgError(format!(
                "mode `restart` takes no arguments; got `{}`",
                words[1..].join(" ")
            )));
        }
        [mode, ..] if COUNTED_MODES.contains(mode) => {
            return Err(ArgError(format!(
                "mode `{mode}` takes one count; got `{}`",
                words[1..].join(" ")
            )));
        }
        [other, ..] => return Err(ArgError(format!("unknown mode `{other}`"))),
    };
    Ok(mode)
}

/// The modes that take one count.
const COUNTED_MODES: [&str; 10] = [
    "roundtrip",
    "concurrent",
    "long",
    "waiting",
    "http",
    "http-concurrent",
    "inbox",
    "thread",
    "scale",
    "compare",
];

/// The most runs or turns a mode accepts: beyond it a typo, not a benchmark.
const MAX_COUNT: usize = 10_000_000;

fn count(mode: &str, text: &str) -> Result<usize, ArgError> {
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_COUNT).contains(&n) => Ok(n),
        _ => Err(ArgError(format!(
            "{mode}: `{text}` is not a count between 1 and {MAX_COUNT}"
        ))),
    }
}

fn check_base_url(url: &str) -> Result<String, ArgError> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| ArgError(format!("--base-url `{url}` must start with http:// or https://")))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(ArgError(format!("--base-url `{url}` has no host")));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn options_go_anywhere_and_defaults_fill_the_rest() {
        let config = parse(args("roundtrip 200 --db /tmp/x.db --model=m")).unwrap().unwrap();
        assert_eq!(config.mode, Mode::Roundtrip(200));
        assert_eq!(config.target.db.as_deref(), Some("/tmp/x.db"));
        assert_eq!(config.target.model, "m");
        assert_eq!(config.target.base_url, None);
        assert_eq!(config.target.api_key, DEFAULT_API_KEY);
        let config = parse(args("--base-url http://127.0.0.1:9/v1/ restart"))
            .unwrap()
            .unwrap();
        assert_eq!(config.mode, Mode::Restart);
        assert_eq!(config.target.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
        let config = parse(args("http-concurrent 1000 --server-bin /opt/askloop"))
            .unwrap()
            .unwrap();
        assert_eq!(config.mode, Mode::HttpConcurrent(1000));
        assert_eq!(config.target.server_bin, Some(PathBuf::from("/opt/askloop")));
        assert_eq!(parse(args("http 5")).unwrap().unwrap().mode, Mode::Http(5));
        assert_eq!(parse(args("inbox 10000")).unwrap().unwrap().mode, Mode::Inbox(10_000));
        assert_eq!(parse(args("scale 100000")).unwrap().unwrap().mode, Mode::Scale(100_000));
        let config = parse(args("thread 10000 --db postgres://u@h/db")).unwrap().unwrap();
        assert_eq!(config.mode, Mode::Thread(10_000));
        assert_eq!(config.target.db.as_deref(), Some("postgres://u@h/db"));
        assert_eq!(
            parse(args("__thread-start t-1")).unwrap().unwrap().mode,
            Mode::ThreadStart("t-1".into())
        );
        assert_eq!(
            parse(args("__thread-answer r-1")).unwrap().unwrap().mode,
            Mode::ThreadAnswer("r-1".into())
        );
        assert_eq!(
            parse(args("roundtrip 5")).unwrap().unwrap().target.pieces,
            Pieces::TOKENS
        );
        assert_eq!(
            parse(args("roundtrip 5 --pieces 1")).unwrap().unwrap().target.pieces,
            Pieces::WHOLE
        );
        assert_eq!(
            parse(args("--pieces=40,8 http 5")).unwrap().unwrap().target.pieces,
            Pieces { text: 40, arguments: 8 }
        );
        let config = parse(args("--hold 30 http-concurrent 10")).unwrap().unwrap();
        assert_eq!(config.target.hold, Some(std::time::Duration::from_secs(30)));
        assert_eq!(parse(args("http 5")).unwrap().unwrap().target.hold, None);
    }

    #[test]
    fn bad_modes_counts_and_urls_are_one_line_errors() {
        for line in [
            "",
            "fly 3",
            "roundtrip",
            "roundtrip ten",
            "roundtrip 0",
            "roundtrip -1",
            "restart 3",
            "long 5 --db",
            "waiting 5 --base-url ftp://x",
            "waiting 5 --frobnicate 1",
            "http",
            "http-concurrent 0",
            "http 3 --server-bin",
            "http-concurrent 3 --hold",
            "http-concurrent 3 --hold 1.5",
            "http-concurrent 3 --hold soon",
            "thread",
            "thread 0",
            "thread 10 20",
            "thread many",
            "roundtrip 5 --pieces",
            "roundtrip 5 --pieces 0",
            "roundtrip 5 --pieces lots",
            "roundtrip 5 --pieces 3,0",
            "roundtrip 5 --pieces 1 --base-url http://127.0.0.1:9/v1",
        ] {
            let err = parse(args(line)).unwrap_err();
            assert!(!err.0.is_empty() && !err.0.contains('\n'), "{line}: {err}");
        }
    }
}

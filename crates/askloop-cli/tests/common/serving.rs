//! A running `askloop serve` for the tests that need a real server process,
//! and the rule for tests that need programs from outside the workspace.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `askloop serve`, killed when dropped.
pub struct Serving {
    pub child: Child,
    /// `http://127.0.0.1:PORT`, as it printed it (without `/api`).
    pub base: String,
    /// What it printed up to and including its address.
    pub banner: Vec<String>,
    stderr: mpsc::Receiver<String>,
}

impl Serving {
    /// Spawns `cmd`, an `askloop serve` listening on `127.0.0.1:0`, and
    /// waits (up to 60 s) for the line that gives its address. Every line it
    /// prints is echoed to the test's stderr, marked `[serve]`.
    pub fn start(mut cmd: Command) -> Serving {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (lines, stderr) = mpsc::channel();
        let pipe = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in pipe.lines().map_while(Result::ok) {
                eprintln!("[serve] {line}");
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let mut banner = Vec::new();
        let base = loop {
            let line = stderr
                .recv_timeout(Duration::from_secs(60))
                .expect("askloop serve printed its address");
            banner.push(line.clone());
            if let Some(at) = line.find("http://") {
                break line[at..].trim_end_matches("/api").to_owned();
            }
        };
        Serving {
            child,
            base,
            banner,
            stderr,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Streams "Deploy the app." to `agent` (with `token`, if any) and
    /// returns the run's question: the test's agents ask one at once.
    pub async fn ask(&self, client: &reqwest::Client, agent: &str, token: Option<&str>) -> Asked {
        let mut request = client
            .post(self.url(&format!("/api/agents/{agent}/stream")))
            .json(&serde_json::json!({"messages": "Deploy the app."}));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let body = request.send().await.unwrap().text().await.unwrap();
        let suspended = chunks(&body)
            .into_iter()
            .find(|c| c["type"] == "tool-call-suspended")
            .unwrap_or_else(|| panic!("no question from {agent}: {body}"));
        Asked {
            run_id: suspended["runId"].as_str().unwrap().to_owned(),
            call_id: suspended["payload"]["toolCallId"].as_str().unwrap().to_owned(),
            body,
        }
    }

    /// Answers `asked` with "staging" through `agent`'s `resume-stream` and
    /// returns the whole SSE body of the stream that goes on.
    pub async fn answer(&self, client: &reqwest::Client, agent: &str, asked: &Asked) -> String {
        client
            .post(self.url(&format!("/api/agents/{agent}/resume-stream")))
            .json(&serde_json::json!({"runId": asked.run_id, "toolCallId": asked.call_id, "resumeData": "staging"}))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Waits (up to 60 s) for a line of stderr that contains `needle`, and
    /// returns it.
    pub fn wait_for_line(&self, needle: &str) -> String {
        loop {
            let line = self
                .stderr
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("askloop serve printed a line with {needle:?}"));
            if line.contains(needle) {
                return line;
            }
        }
    }

    /// Waits up to `bound` for the process to exit; `None` if it is still
    /// running then. The bound is a hang guard, not a timing assertion.
    pub fn exit_within(&mut self, bound: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Sends the process SIGTERM, as a service manager stops it.
    pub fn terminate(&self) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    /// The stderr lines printed after the banner, until the process ends.
    pub fn rest_of_stderr(&self) -> Vec<String> {
        self.stderr.iter().collect()
    }
}

/// A run that asked a question over HTTP.
pub struct Asked {
    pub run_id: String,
    pub call_id: String,
    /// The whole SSE body of the stream that asked.
    pub body: String,
}

/// The chunks of an SSE body (`data: <json>` events, then `data: [DONE]`,
/// left out), read with askloop's SSE reader.
pub fn chunks(body: &str) -> Vec<serde_json::Value> {
    let events = askloop::sse::events(body.as_bytes()).unwrap_or_else(|err| panic!("{err}: {body}"));
    events
        .iter()
        .filter(|event| event.data != "[DONE]")
        .map(|event| serde_json::from_str(&event.data).unwrap())
        .collect()
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the browser tests need of the machine (chromium, node, and
/// `tests/web`'s npm packages), or why they cannot run here.
pub fn missing_browser(web: &std::path::Path) -> Option<String> {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    if !std::path::Path::new(&chromium).exists() {
        return Some(format!("{chromium} is missing (apt-get install -y chromium)"));
    }
    if Command::new("node").arg("--version").output().is_err() {
        return Some("node is missing".to_owned());
    }
    if !web.join("node_modules/playwright-core").is_dir() {
        return Some(format!(
            "{} is missing (npm ci in {})",
            web.join("node_modules").display(),
            web.display()
        ));
    }
    None
}

/// Where the browser tests save their screenshots: `target/web-screenshots`.
pub fn screenshots_dir() -> std::path::PathBuf {
    // target/debug/askloop -> target
    std::path::Path::new(super::BIN)
        .ancestors()
        .nth(2)
        .map(std::path::Path::to_path_buf)
        .unwrap_or_else(|| std::path::PathBuf::from("target"))
        .join("web-screenshots")
}

/// Runs `file` of `tests/web` with `node` (its environment set by the
/// caller, the screenshots' directory added), asserting that it passed and
/// saved `shots`.
pub fn run_browser_test(mut node: Command, web: &std::path::Path, file: &str, shots: &[&str]) {
    let screenshots = screenshots_dir();
    let status = node
        .args(["--test", "--test-concurrency=1", file])
        .current_dir(web)
        .env("ASKLOOP_WEB_SCREENSHOTS", &screenshots)
        .stdin(Stdio::null())
        .status()
        .expect("running node");
    assert!(
        status.success(),
        "the browser test {file} failed ({status}); its output is above"
    );
    for shot in shots {
        assert!(screenshots.join(shot).is_file(), "{shot} was not saved");
    }
}

/// `node`, for a browser test of answer links against `serving` (started
/// with [`serve_in`] `dir` on [`super::LINKS_CONFIG`], signing with `key`):
/// the environment `tests/web/runs.mjs`'s `linkServer` reads, and the key
/// for `askloop link`.
pub fn node_for_links(serving: &Serving, dir: &std::path::Path, key: &str) -> Command {
    let mut node = Command::new("node");
    node.env("ASKLOOP_WEB_URL", &serving.base)
        .env("ASKLOOP_LINK_PUBLIC", super::LINKS_PUBLIC)
        .env("ASKLOOP_BIN", super::BIN)
        .env("ASKLOOP_LINK_DIR", dir)
        .env("ASKLOOP_WEB_DB", dir.join("runs.db"))
        .env("ASKLOOP_TEST_LINK_KEY", key);
    node
}

/// The OpenTelemetry variables a served askloop reads.
const OTEL_SETTINGS: [&str; 9] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_METRICS_EXPORTER",
    "OTEL_METRIC_EXPORT_INTERVAL",
];

/// The one way the tests start `askloop serve`: in `dir`, on the SQLite
/// file `dir/runs.db`, with no token and no model key from the environment
/// (so the agents are those of `dir/askloop.toml`, or the default one),
/// given its arguments and variables, then [`Serve::start`]ed on a free
/// loopback port (or run as a [`Serve::command`] to see it refuse).
pub struct Serve {
    cmd: Command,
    addr: Option<String>,
}

impl Serve {
    pub fn in_dir(dir: &std::path::Path) -> Serve {
        let mut cmd = super::askloop();
        // Nor the OpenTelemetry settings of whoever runs the tests: a test
        // server exports only where its test says.
        for name in OTEL_SETTINGS {
            cmd.env_remove(name);
        }
        cmd.env("ASKLOOP_DB", dir.join("runs.db")).current_dir(dir).arg("serve");
        Serve { cmd, addr: None }
    }

    /// `--config path` (relative to the directory, or absolute).
    pub fn config(mut self, path: impl AsRef<std::ffi::OsStr>) -> Serve {
        self.cmd.arg("--config").arg(path);
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Serve
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.cmd.args(args);
        self
    }

    pub fn env(mut self, name: &str, value: impl AsRef<std::ffi::OsStr>) -> Serve {
        self.cmd.env(name, value);
        self
    }

    /// Listens on `addr` instead of a free loopback port.
    pub fn addr(mut self, addr: impl Into<String>) -> Serve {
        self.addr = Some(addr.into());
        self
    }

    /// The command as set up, for a test that runs it itself.
    pub fn command(mut self) -> Command {
        if let Some(addr) = self.addr {
            self.cmd.args(["--addr", &addr]);
        }
        self.cmd
    }

    /// Starts it (on `127.0.0.1:0` unless [`Serve::addr`] says otherwise)
    /// and waits for its address ([`Serving::start`]).
    pub fn start(mut self) -> Serving {
        let addr = self.addr.take().unwrap_or_else(|| "127.0.0.1:0".to_owned());
        self.cmd.args(["--addr", &addr]);
        Serving::start(self.cmd)
    }
}

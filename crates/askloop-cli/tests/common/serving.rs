//! A running `askloop serve` for the tests that need a real server process,
//! and the rule for tests that need programs from outside the workspace.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

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

    /// The stderr lines printed after the banner, until the process ends.
    pub fn rest_of_stderr(&self) -> Vec<String> {
        self.stderr.iter().collect()
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a test that needs something from outside the workspace (node,
/// npm packages, chromium) must stop here: under CI (`CI=true`), which
/// installs all of it, a missing need fails the test; elsewhere the test is
/// skipped, saying why.
pub fn skipped_for_lack_of(test: &str, missing: Option<String>) -> bool {
    let Some(reason) = missing else {
        return false;
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} cannot run under CI: {reason}");
    }
    eprintln!("{test}: skipped: {reason}");
    true
}

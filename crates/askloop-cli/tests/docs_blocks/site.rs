//! Where one doc file's blocks run: a folder of its own (the working
//! folder, `HOME`, `XDG_DATA_HOME`, the `bin` put first on `PATH`) and an
//! `askloop serve` on it, on a free port.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use super::fixtures::{POSTGRES, Postgres};
use crate::common::{BIN, Serving};

/// What a file's server serves: the offline demo agent by default, or the
/// agents of an `askloop.toml` the file's blocks name.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fixture {
    /// Writes `askloop.toml` (passed with `--config`) and what it names
    /// into the working folder.
    pub agents: Option<fn(&Path)>,
    /// `--db`, when the blocks name a database rather than the default one.
    pub db: Option<&'static str>,
    /// What its agents need besides askloop (an MCP server of tests/mcp),
    /// if this machine lacks it.
    pub lacks: Option<fn() -> Option<String>>,
}

/// How long a block may run before the harness calls it hung. A hang
/// guard, not a timing assertion: blocks take a second or two.
const HANG: Duration = Duration::from_secs(60);

/// A file's folder and server. Its fields drop in this order: the server
/// stops before its database schema is dropped and its folder deleted.
pub struct Site {
    server: Serving,
    /// The PostgreSQL schema the blocks' [`POSTGRES`] stands for.
    pub postgres: Option<Postgres>,
    pub dir: tempfile::TempDir,
    /// The port of the page a component block is rendered on, an origin
    /// the server allows (`--cors-origin`), when the file has one.
    pub page_port: Option<u16>,
    curl: String,
}

impl Site {
    /// Starts the server of `fixture` in a new folder, on its database (the
    /// schema of `postgres` for [`POSTGRES`]); with `page`, the server allows
    /// the origin of a page on a free port.
    pub fn start(fixture: Fixture, postgres: Option<Postgres>, curl: String, page: bool) -> Site {
        let dir = tempfile::tempdir().unwrap();
        for folder in ["home", "data", "work", "bin", "out"] {
            std::fs::create_dir(dir.path().join(folder)).unwrap();
        }
        std::os::unix::fs::symlink(BIN, dir.path().join("bin/askloop")).unwrap();
        super::shell::install_curl(&dir.path().join("bin"));
        let mut cmd = Command::new(BIN);
        match (fixture.db, &postgres) {
            (Some(POSTGRES), Some(postgres)) => {
                cmd.args(["--db", &postgres.url]);
            }
            (Some(db), _) => {
                cmd.args(["--db", db]);
            }
            (None, _) => {}
        }
        cmd.args(["serve", "--addr", "127.0.0.1:0"]);
        let page_port = page.then(|| {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        });
        if let Some(port) = page_port {
            cmd.args(["--cors-origin", &format!("http://127.0.0.1:{port}")]);
        }
        if let Some(write) = fixture.agents {
            write(&dir.path().join("work"));
            cmd.args(["--config", "askloop.toml"]);
        }
        environment(dir.path(), &curl, &mut cmd);
        // A group of its own, so that the MCP servers it starts end with it.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let server = Serving::start(cmd);
        Site {
            dir,
            page_port,
            server,
            postgres,
            curl,
        }
    }

    /// The server's address as the blocks write it: `127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        self.server.base.trim_start_matches("http://")
    }

    /// The environment of a block: [`environment`], and the server's
    /// address for the harness's lookups.
    pub fn environment(&self, cmd: &mut Command) {
        environment(self.dir.path(), &self.curl, cmd);
        cmd.env("DOCS_SERVER", &self.server.base);
    }

    /// `text` with the reader's address, command and database replaced by
    /// the test's (see "What is filled in" in the harness's comment).
    pub fn fill_in(&self, text: &str) -> String {
        let port = self.addr().rsplit(':').next().unwrap_or_default();
        let text = text
            .replace("cargo run -p askloop-cli --", "askloop")
            .replace("127.0.0.1:4111", &format!("127.0.0.1:{port}"))
            .replace("localhost:4111", &format!("localhost:{port}"));
        match &self.postgres {
            Some(postgres) => text.replace(POSTGRES, &postgres.url),
            None => text,
        }
    }

    /// Runs `cmd` (piped) with `stdin`, in a process group of its own so
    /// that a hung block is ended with everything it started; a hang is an
    /// error naming `name`.
    pub fn wait(&self, mut cmd: Command, stdin: &str, name: &str) -> Result<Output, String> {
        use std::os::unix::process::CommandExt;
        let mut child = cmd.process_group(0).spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        let stdin = stdin.to_owned();
        let feeding = std::thread::spawn(move || {
            let _ = input.write_all(stdin.as_bytes());
        });
        let drain = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                bytes
            })
        };
        let stdout = drain(Box::new(child.stdout.take().unwrap()));
        let stderr = drain(Box::new(child.stderr.take().unwrap()));
        let group = child.id();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Waits for the block's end without reaping it, so that its pid,
            // which is its group's id, stays the block's until it is reaped
            // below, after its group is ended.
            use nix::sys::wait::{Id, WaitPidFlag, waitid};
            let pid = nix::unistd::Pid::from_raw(i32::try_from(group).unwrap_or(i32::MAX));
            let ended = loop {
                match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    ended => break ended.is_ok(),
                }
            };
            let _ = done.send(ended);
        });
        let status = match finished.recv_timeout(HANG) {
            // What the block started and left behind ends with its group.
            Ok(true) => {
                end_group(group);
                child.wait().unwrap()
            }
            // Its end could not be watched: it is waited for as it is.
            Ok(false) => child.wait().unwrap(),
            Err(_) => {
                end_group(group);
                let _ = child.wait();
                return Err(format!(
                    "{name} still ran after {HANG:?}, and was stopped: it waits for something that never comes \
                     (input: give it with `stdin`; a server: exempt it, the test starts one)"
                ));
            }
        };
        let _ = feeding.join();
        Ok(Output {
            status,
            stdout: stdout.join().unwrap(),
            stderr: stderr.join().unwrap(),
        })
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        // The server and what it started (MCP servers of its agents, which
        // outlive a parent killed under them); `Serving` then reaps it.
        end_group(self.server.child.id());
    }
}

/// Ends the process group `group` (one this harness made: its leader's
/// pid, the leader not yet reaped) with SIGKILL, by the system call: a
/// group id of 1 or less, which would reach far more than the harness
/// started, is never sent.
fn end_group(group: u32) {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    if let Ok(group) = i32::try_from(group)
        && group > 1
    {
        let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
    }
}

/// The environment of everything run at a site rooted at `root`: a home and
/// data folder of its own (nothing a block writes lands in the real `~`),
/// no model key, database or configuration from the outside, and `askloop`
/// and the checking `curl` first on `PATH` (`curl` is the real one).
fn environment(root: &Path, curl: &str, cmd: &mut Command) {
    let path = std::env::var("PATH").unwrap_or_default();
    for name in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "ASKLOOP_MODEL",
        "ASKLOOP_DB",
        "ASKLOOP_CONFIG",
        "ASKLOOP_API_TOKEN",
        "ASKLOOP_RESOURCE",
        "ASKLOOP_LOG",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ] {
        cmd.env_remove(name);
    }
    cmd.env("HOME", root.join("home"))
        .env("XDG_DATA_HOME", root.join("data"))
        .env("USER", "ana")
        .env("NO_COLOR", "1")
        .env("PATH", format!("{}:{path}", root.join("bin").display()))
        .env("DOCS_CURL", curl)
        .current_dir(root.join("work"));
}

/// The workspace's root, where README.md and docs/ are.
pub fn workspace() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

//! What the tests of the real `askloop` binary share: a folder with its
//! own database, and the binary run in it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

pub mod node;
pub mod pty;
pub mod raw;
mod serving;
#[allow(unused_imports)] // not every test file starts a server
pub use askloop_testkit::skipped_for_lack_of;
#[allow(unused_imports)] // not every test file starts a server
pub use serving::{Asked, Serve, Serving, chunks, missing_browser, node_for_links, run_browser_test, screenshots_dir};

pub const BIN: &str = env!("CARGO_BIN_EXE_askloop");

/// What `askloop` reads from the environment that would make a test's run
/// depend on the machine it runs on: a provider's key or address, a model,
/// a token, a resource. Every run of the binary in the tests starts without
/// them; a test sets what it needs.
pub const CALLER_SETTINGS: [&str; 6] = [
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ASKLOOP_MODEL",
    "ASKLOOP_API_TOKEN",
    "ASKLOOP_RESOURCE",
];

/// The `askloop` binary, without [`CALLER_SETTINGS`].
pub fn askloop() -> Command {
    let mut cmd = Command::new(BIN);
    for name in CALLER_SETTINGS {
        cmd.env_remove(name);
    }
    cmd
}

/// [`askloop`], for a test that drives the process from async code.
pub fn askloop_async() -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(BIN);
    for name in CALLER_SETTINGS {
        cmd.env_remove(name);
    }
    cmd
}

/// A scripted model that writes release notes with `write_file` (a call
/// that waits for approval where `require_approval` names it), then ends.
pub const DEPLOYER_SCRIPT: &str = r##"{"turns": [
  {"text": "I will write the notes.", "toolCalls": [
    {"name": "write_file", "args": {"path": "NOTES.md", "content": "# Release notes\n\n- Faster resumes\n"}}]},
  {"text": "Done: {{toolResults}}"}
]}"##;

/// Answer links on, for `askloop serve` (the start of an askloop.toml):
/// links name [`LINKS_PUBLIC`], last two days at most, and are signed with
/// the secret in `ASKLOOP_TEST_LINK_KEY`.
pub const LINKS_CONFIG: &str = r#"
public_url = "https://askloop.example.com"

[links]
max_age = "2d"

[[links.keys]]
id = "test-1"
secret_env = "ASKLOOP_TEST_LINK_KEY"
"#;

/// The address links name; a test opens them on its server's own.
pub const LINKS_PUBLIC: &str = "https://askloop.example.com";

pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Self {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("runs.db")
    }

    pub fn cmd(&self) -> Command {
        let mut cmd = askloop();
        cmd.env("ASKLOOP_DB", self.db())
            .env("NO_COLOR", "1")
            .current_dir(self.dir.path());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    pub fn run_with_input(&self, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .cmd()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    pub fn script(&self, name: &str, json: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, json).unwrap();
        path
    }

    pub fn show(&self, run_id: &str) -> Value {
        let out = self.run(&["runs", "show", run_id, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    pub fn only_run_id(&self) -> String {
        let out = self.run(&["runs", "--json"]);
        let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
        runs[0]["runId"].as_str().unwrap().to_owned()
    }
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The tool results of a shown run, in order.
pub fn tool_results(shown: &Value) -> Vec<String> {
    shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

pub fn code(out: &Output) -> i32 {
    out.status.code().expect("exited normally")
}

pub const SUSPENDED: i32 = 3;

/// Whether the tests run as root, who may write anything: a read-only file
/// or folder is then only read-only for another user.
pub fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    let probe = tempfile::NamedTempFile::new().unwrap();
    probe.as_file().metadata().unwrap().uid() == 0
}

/// Runs `cmd` as a user for whom what root owns is read only (`nobody`)
/// when the tests run as root; as is otherwise.
pub fn as_unprivileged(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    if running_as_root() {
        cmd.uid(65534).gid(65534);
    }
    cmd
}

/// A folder nobody but its owner may write (and the owner only when not
/// root, see [`as_unprivileged`]), that others may enter and read.
pub fn make_read_only(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = if path.is_dir() { 0o555 } else { 0o444 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

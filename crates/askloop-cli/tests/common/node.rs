//! What the tests that drive `askloop serve` from a Node project share
//! (`tests/interop` with `@mastra/client-js`, `tests/aisdk` with the AI
//! SDK): two scripted agents, the server on them with a token, the Node
//! project's folder, and the check of its TAP report.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::{Serving, askloop};

/// The `assistant` agent asks one choice question, then says what it does;
/// on a thread that already holds that exchange (two assistant messages),
/// it asks again and names the thread's first message.
const ASK_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment should I deploy to?",
     "options": [{"label": "staging"}, {"label": "production"}], "selectionMode": "single_select"}}]},
  {"text": "Deploying to {{toolResults}}."},
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Again: which environment?"}}]},
  {"text": "Deploying again to {{toolResults}}; you first asked: {{input}}"}
]}"#;

/// The `writer` agent writes one file, which needs approval, then says
/// what came of it.
const WRITE_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "write_file", "args": {"path": "notes/deploy.txt", "content": "deploy to staging"}}]},
  {"text": "Done: {{toolResults}}"}
]}"#;

const CONFIG: &str = r#"
[agents.assistant]
name = "Assistant"
script = "ask.json"
tools = ["ask_user"]

[agents.writer]
name = "Writer"
script = "write.json"
tools = ["write_file"]
require_approval = ["write_file"]
write_dir = "out"
"#;

/// A folder with the two agents' scripts and configuration, and `out/` for
/// the writer's files.
pub fn agents_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_agents(dir.path());
    dir
}

/// Writes the two agents' scripts and configuration into `dir`, with
/// `out/` for the writer's files.
pub fn write_agents(dir: &Path) {
    std::fs::write(dir.join("ask.json"), ASK_SCRIPT).unwrap();
    std::fs::write(dir.join("write.json"), WRITE_SCRIPT).unwrap();
    std::fs::write(dir.join("askloop.toml"), CONFIG).unwrap();
    std::fs::create_dir(dir.join("out")).unwrap();
}

/// `askloop serve` on the agents of `dir` behind `token`, with `args` added
/// and `env` set (what agents or tokens a test adds to the file need: a
/// model's address, a token's secret).
pub fn serve_agents(dir: &Path, token: &str, args: &[&str], env: &[(&str, &str)]) -> Serving {
    let mut cmd = askloop();
    cmd.env("ASKLOOP_API_TOKEN", token)
        .env("ASKLOOP_DB", dir.join("runs.db"))
        .envs(env.iter().copied())
        .current_dir(dir)
        .args(["serve", "--addr", "127.0.0.1:0", "--config", "askloop.toml"])
        .args(args);
    Serving::start(cmd)
}

/// The Node project `tests/<name>`.
pub fn node_project(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests").join(name)
}

/// Why the Node project `dir` cannot run here, if it cannot: no `node`, or
/// no `package` in its `node_modules`.
pub fn node_missing(dir: &Path, package: &str) -> Option<String> {
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        _ => return Some("`node` is not on PATH (Node 20 or later is needed)".to_owned()),
    }
    if !dir.join("node_modules").join(package).join("package.json").is_file() {
        return Some(format!(
            "{} has no node_modules/{package}; run `npm ci` there",
            dir.display()
        ));
    }
    None
}

/// Runs `node --test` on `file` of the project `dir` with `env`, asserts it
/// succeeded, and gives its TAP report.
pub fn run_node_tests(dir: &Path, file: &str, env: &[(&str, &std::ffi::OsStr)]) -> String {
    let mut cmd = Command::new("node");
    cmd.args(["--test", "--test-reporter=tap", file])
        .current_dir(dir)
        .stdin(Stdio::null());
    for (key, value) in env {
        cmd.env(key, value);
    }
    let output: Output = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{file} failed:\n{stdout}\n{stderr}");
    stdout
}

/// How many tests of a TAP report passed, after asserting that none failed
/// or was skipped: the caller asserts the count, so a run of no test is
/// never taken for a pass.
pub fn tap_passed(stdout: &str) -> u32 {
    let count = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("# {key} ")))
            .and_then(|n| n.trim().parse::<u32>().ok())
    };
    assert_eq!(count("fail"), Some(0), "{stdout}");
    assert_eq!(count("skipped"), Some(0), "{stdout}");
    count("pass").unwrap_or_else(|| panic!("no pass count in the report:\n{stdout}"))
}

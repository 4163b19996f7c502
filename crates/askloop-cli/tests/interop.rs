//! `askloop serve` driven by the published `@mastra/client-js` (1.47.0): a
//! real server process on a free port, two scripted agents from an
//! `askloop.toml`, and the Node tests of `tests/interop/` run against it.
//!
//! The Node project needs `npm ci` in `tests/interop` first (`.ci/run` does
//! it). Without `node` or its `node_modules`, this test fails under
//! `CI=true` and is skipped, with the reason printed, elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;

use common::{BIN, Serving, skipped_for_lack_of};

/// The server's API token, which the client sends as Mastra's users send one.
const TOKEN: &str = "interop-token";

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

/// The `writer` agent writes one file, which needs approval.
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

fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop")
}

/// Why the Node side cannot run here, if it cannot.
fn node_missing(dir: &Path) -> Option<String> {
    let node = Command::new("node").arg("--version").output();
    match node {
        Ok(out) if out.status.success() => {}
        _ => return Some("`node` is not on PATH (Node 20 or later is needed)".to_owned()),
    }
    if !dir.join("node_modules/@mastra/client-js/package.json").is_file() {
        return Some(format!(
            "{} has no node_modules/@mastra/client-js; run `npm ci` there",
            dir.display()
        ));
    }
    None
}

fn serve(dir: &Path) -> Serving {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ASKLOOP_MODEL")
        .env("ASKLOOP_API_TOKEN", TOKEN)
        .env("ASKLOOP_DB", dir.join("runs.db"))
        .current_dir(dir)
        .args(["serve", "--addr", "127.0.0.1:0", "--config", "askloop.toml"]);
    Serving::start(cmd)
}

#[test]
fn the_published_mastra_client_streams_resumes_lists_approves_and_declines_through_askloop_serve() {
    let interop = interop_dir();
    if skipped_for_lack_of("the @mastra/client-js interop test", node_missing(&interop)) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ask.json"), ASK_SCRIPT).unwrap();
    std::fs::write(dir.path().join("write.json"), WRITE_SCRIPT).unwrap();
    std::fs::write(dir.path().join("askloop.toml"), CONFIG).unwrap();
    let write_dir = dir.path().join("out");
    std::fs::create_dir(&write_dir).unwrap();

    let server = serve(dir.path());
    let output = Command::new("node")
        .args(["--test", "--test-reporter=tap", "client.test.mjs"])
        .current_dir(&interop)
        .env("ASKLOOP_URL", &server.base)
        .env("ASKLOOP_WRITE_DIR", &write_dir)
        .env("ASKLOOP_API_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the client's tests failed:\n{stdout}\n{stderr}"
    );
    // Not vacuous: every test ran and passed (9 tests, one with three subtests).
    let count = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("# {key} ")))
            .and_then(|n| n.trim().parse::<u32>().ok())
    };
    assert_eq!(count("fail"), Some(0), "{stdout}");
    assert_eq!(count("skipped"), Some(0), "{stdout}");
    assert!(count("pass").is_some_and(|n| n >= 12), "{stdout}");
}

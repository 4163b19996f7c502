//! `askloop serve`'s chat route (`POST /chat/{agentId}`) driven by the
//! published Vercel AI SDK (`ai` 7.0.173): `AbstractChat` with
//! `DefaultChatTransport`, the engine React's `useChat` runs, against a real
//! server process with two scripted agents; the Node tests are in
//! `tests/aisdk/`.
//!
//! The Node project needs `npm ci` in `tests/aisdk` first (`.ci/run` does
//! it). Without `node` or its `node_modules`, this test fails under
//! `CI=true` and is skipped, with the reason printed, elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;

use common::{BIN, Serving, skipped_for_lack_of};

/// The server's API token, which the chat transport sends as a header.
const TOKEN: &str = "aisdk-token";

/// The `assistant` agent asks one choice question, then says what it does;
/// on a thread that already holds that exchange, it asks again and names the
/// thread's first message.
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

fn aisdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/aisdk")
}

/// Why the Node side cannot run here, if it cannot.
fn node_missing(dir: &Path) -> Option<String> {
    let node = Command::new("node").arg("--version").output();
    match node {
        Ok(out) if out.status.success() => {}
        _ => return Some("`node` is not on PATH (Node 20 or later is needed)".to_owned()),
    }
    if !dir.join("node_modules/ai/package.json").is_file() {
        return Some(format!("{} has no node_modules/ai; run `npm ci` there", dir.display()));
    }
    None
}

#[test]
fn the_ai_sdk_chat_engine_asks_answers_approves_declines_and_keeps_a_thread_through_askloop_serve() {
    let aisdk = aisdk_dir();
    if skipped_for_lack_of("the AI SDK chat test", node_missing(&aisdk)) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ask.json"), ASK_SCRIPT).unwrap();
    std::fs::write(dir.path().join("write.json"), WRITE_SCRIPT).unwrap();
    std::fs::write(dir.path().join("askloop.toml"), CONFIG).unwrap();
    let write_dir = dir.path().join("out");
    std::fs::create_dir(&write_dir).unwrap();

    let mut cmd = Command::new(BIN);
    cmd.env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ASKLOOP_MODEL")
        .env("ASKLOOP_API_TOKEN", TOKEN)
        .env("ASKLOOP_DB", dir.path().join("runs.db"))
        .current_dir(dir.path())
        .args(["serve", "--addr", "127.0.0.1:0", "--config", "askloop.toml"]);
    let server = Serving::start(cmd);
    let output = Command::new("node")
        .args(["--test", "--test-reporter=tap", "chat.test.mjs"])
        .current_dir(&aisdk)
        .env("ASKLOOP_URL", &server.base)
        .env("ASKLOOP_WRITE_DIR", &write_dir)
        .env("ASKLOOP_API_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the chat tests failed:\n{stdout}\n{stderr}");
    // Not vacuous: every test ran and passed.
    let count = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("# {key} ")))
            .and_then(|n| n.trim().parse::<u32>().ok())
    };
    assert_eq!(count("fail"), Some(0), "{stdout}");
    assert_eq!(count("skipped"), Some(0), "{stdout}");
    assert_eq!(count("pass"), Some(5), "{stdout}");
}

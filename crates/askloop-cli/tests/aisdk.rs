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

use common::{BIN, Serving, missing_browser, skipped_for_lack_of};

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

/// A directory with the agents' scripts and configuration, and `out/`
/// for the writer's files.
fn agents_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ask.json"), ASK_SCRIPT).unwrap();
    std::fs::write(dir.path().join("write.json"), WRITE_SCRIPT).unwrap();
    std::fs::write(dir.path().join("askloop.toml"), CONFIG).unwrap();
    std::fs::create_dir(dir.path().join("out")).unwrap();
    dir
}

/// `askloop serve` on the agents of `dir`, with `args` added.
fn serve(dir: &Path, args: &[&str]) -> Serving {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ASKLOOP_MODEL")
        .env("ASKLOOP_API_TOKEN", TOKEN)
        .env("ASKLOOP_DB", dir.join("runs.db"))
        .current_dir(dir)
        .args(["serve", "--addr", "127.0.0.1:0", "--config", "askloop.toml"])
        .args(args);
    Serving::start(cmd)
}

/// The counts a TAP report ends with, asserted: every test ran and passed.
fn assert_all_passed(stdout: &str, tests: u32) {
    let count = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("# {key} ")))
            .and_then(|n| n.trim().parse::<u32>().ok())
    };
    assert_eq!(count("fail"), Some(0), "{stdout}");
    assert_eq!(count("skipped"), Some(0), "{stdout}");
    assert_eq!(count("pass"), Some(tests), "{stdout}");
}

#[test]
fn the_ai_sdk_chat_engine_asks_answers_approves_declines_and_keeps_a_thread_through_askloop_serve() {
    let aisdk = aisdk_dir();
    if skipped_for_lack_of("the AI SDK chat test", node_missing(&aisdk)) {
        return;
    }
    let dir = agents_dir();
    let write_dir = dir.path().join("out");
    let server = serve(dir.path(), &[]);
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
    assert_all_passed(&stdout, 6);
}

/// The example page `examples/use-chat` (React's `useChat`) in Debian's
/// chromium, served from its own origin, which the server allows
/// (`--cors-origin`); the Node side is `tests/aisdk/use-chat.test.mjs`. It
/// leaves a screenshot of a question in the page in the target directory.
#[test]
fn the_use_chat_example_page_answers_a_question_and_approves_a_call_in_a_real_browser() {
    let aisdk = aisdk_dir();
    let web = aisdk.join("../web");
    let missing = node_missing(&aisdk).or_else(|| missing_browser(&web));
    if skipped_for_lack_of("the useChat browser test", missing) {
        return;
    }
    let dir = agents_dir();
    // A free port for the page, so the server can name its origin.
    let page_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let origin = format!("http://127.0.0.1:{page_port}");
    let server = serve(dir.path(), &["--cors-origin", &origin]);
    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("use-chat-question.png");
    let output = Command::new("node")
        .args(["--test", "--test-reporter=tap", "use-chat.test.mjs"])
        .current_dir(&aisdk)
        .env("ASKLOOP_URL", &server.base)
        .env("ASKLOOP_API_TOKEN", TOKEN)
        .env("ASKLOOP_PAGE_PORT", page_port.to_string())
        .env("ASKLOOP_SCREENSHOT", &screenshot)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the browser tests failed:\n{stdout}\n{stderr}");
    assert_all_passed(&stdout, 2);
    assert!(screenshot.is_file(), "no screenshot at {}", screenshot.display());
}

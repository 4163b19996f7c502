//! The answer link's page in a real browser: starts `askloop serve` with
//! `[links]` and scripted agents on a SQLite file, and runs the browser test
//! `tests/web/link.test.mjs` against it, which makes links with
//! `askloop link`, answers through them, and revokes one. Screenshots land
//! in `target/web-screenshots/`.
//!
//! Without chromium, node or `tests/web/node_modules`, the test fails under
//! CI (`CI=true`) and is skipped with the reason otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::Path;
use std::process::{Command, Stdio};

mod common;

use common::{BIN, DEPLOYER_SCRIPT, Serving, missing_browser, screenshots_dir, skipped_for_lack_of};

/// Links name this address; the test opens them on the server's own.
const PUBLIC: &str = "https://askloop.example.com";
const KEY: &str = "a-link-signing-key-of-the-browser-test-0123";

const CONFIG: &str = r#"
public_url = "https://askloop.example.com"

[links]
max_age = "2d"

[[links.keys]]
id = "test-1"
secret_env = "ASKLOOP_TEST_LINK_KEY"

[agents.assistant]
name = "Launcher"
script = "launcher.json"

[agents.deployer]
name = "Deployer"
script = "deployer.json"
tools = ["write_file"]
require_approval = ["write_file"]
"#;

const LAUNCHER_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which region should we launch in?", "options": [
    {"label": "Europe", "description": "Frankfurt; data stays in the EU"},
    {"label": "Americas", "description": "Virginia; closest to most customers"},
    {"label": "Asia Pacific", "description": "Singapore"}]}}]},
  {"text": "Launching in {{toolResults}}."}
]}"#;

#[test]
fn the_answer_link_page_passes_its_browser_test_against_the_real_server() {
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/web");
    if skipped_for_lack_of("the answer link browser test", missing_browser(&web)) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("askloop.toml"), CONFIG).unwrap();
    std::fs::write(dir.path().join("launcher.json"), LAUNCHER_SCRIPT).unwrap();
    std::fs::write(dir.path().join("deployer.json"), DEPLOYER_SCRIPT).unwrap();
    let db = dir.path().join("runs.db");
    let mut cmd = Command::new(BIN);
    cmd.env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ASKLOOP_MODEL")
        .env_remove("ASKLOOP_API_TOKEN")
        .env("ASKLOOP_TEST_LINK_KEY", KEY)
        .env("ASKLOOP_DB", &db)
        .current_dir(dir.path())
        .args(["serve", "--addr", "127.0.0.1:0"]);
    let serving = Serving::start(cmd);
    assert!(
        serving.banner.iter().any(|line| line.contains("answer links are on")),
        "{:?}",
        serving.banner
    );
    let screenshots = screenshots_dir();

    let status = Command::new("node")
        .args(["--test", "--test-concurrency=1", "link.test.mjs"])
        .current_dir(&web)
        .env("ASKLOOP_WEB_URL", &serving.base)
        .env("ASKLOOP_LINK_PUBLIC", PUBLIC)
        .env("ASKLOOP_BIN", BIN)
        .env("ASKLOOP_LINK_DIR", dir.path())
        .env("ASKLOOP_WEB_DB", &db)
        .env("ASKLOOP_TEST_LINK_KEY", KEY)
        .env("ASKLOOP_WEB_SCREENSHOTS", &screenshots)
        .stdin(Stdio::null())
        .status()
        .expect("running node");
    assert!(
        status.success(),
        "the answer link browser test failed ({status}); its output is above"
    );
    for shot in [
        "link-question.png",
        "link-question-dark.png",
        "link-phone.png",
        "link-answered.png",
        "link-used.png",
        "link-approval.png",
        "link-revoked.png",
    ] {
        assert!(screenshots.join(shot).is_file(), "{shot} was not saved");
    }
}

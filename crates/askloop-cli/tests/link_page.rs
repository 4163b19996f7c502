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

mod common;

use common::{
    DEPLOYER_SCRIPT, LINKS_CONFIG, Serve, missing_browser, node_for_links, run_browser_test, skipped_for_lack_of,
};

const KEY: &str = "a-link-signing-key-of-the-browser-test-0123";

/// The agents, after [`LINKS_CONFIG`].
const AGENTS: &str = r#"
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
    std::fs::write(dir.path().join("askloop.toml"), format!("{LINKS_CONFIG}{AGENTS}")).unwrap();
    std::fs::write(dir.path().join("launcher.json"), LAUNCHER_SCRIPT).unwrap();
    std::fs::write(dir.path().join("deployer.json"), DEPLOYER_SCRIPT).unwrap();
    let serving = Serve::in_dir(dir.path()).env("ASKLOOP_TEST_LINK_KEY", KEY).start();
    assert!(
        serving.banner.iter().any(|line| line.contains("answer links are on")),
        "{:?}",
        serving.banner
    );
    run_browser_test(
        node_for_links(&serving, dir.path(), KEY),
        &web,
        "link.test.mjs",
        &[
            "link-question.png",
            "link-question-dark.png",
            "link-phone.png",
            "link-answered.png",
            "link-used.png",
            "link-approval.png",
            "link-revoked.png",
        ],
    );
}

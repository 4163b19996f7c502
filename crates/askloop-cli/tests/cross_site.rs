//! Pages of other sites against a token-less `askloop serve`, in a real
//! browser: starts the real server with a run waiting on a question and
//! runs `tests/web/cross_site.test.mjs` (Node, playwright-core, Debian's
//! chromium), which mounts the attacks a page can (a self-submitting form,
//! `no-cors` fetches, DNS rebinding) and checks none changed the run, then
//! that the server's own page still can.
//!
//! Without chromium, node or `tests/web/node_modules`, the test fails under
//! CI (`CI=true`) and is skipped with the reason otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::Path;
use std::process::{Command, Stdio};

mod common;

use common::{Serve, missing_browser, skipped_for_lack_of};

const SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment should I deploy to?"}}]},
  {"text": "Deploying to {{toolResults}}."}
]}"#;

#[tokio::test]
async fn pages_of_other_sites_cannot_change_a_run_of_a_token_less_server_in_a_real_browser() {
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/web");
    if skipped_for_lack_of("the cross-site browser test", missing_browser(&web)) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.json"), SCRIPT).unwrap();
    let serving = Serve::in_dir(dir.path()).args(["--script", "script.json"]).start();
    let asked = serving.ask(&reqwest::Client::new(), "assistant", None).await;

    let status = Command::new("node")
        .args(["--test", "--test-concurrency=1", "cross_site.test.mjs"])
        .current_dir(&web)
        .env("ASKLOOP_WEB_URL", &serving.base)
        .env("ASKLOOP_RUN_ID", &asked.run_id)
        .stdin(Stdio::null())
        .status()
        .expect("running node");
    assert!(
        status.success(),
        "the browser test failed ({status}); its output is above"
    );
}

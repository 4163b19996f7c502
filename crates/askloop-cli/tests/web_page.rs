//! The web page of `askloop serve` in a real browser: starts the real
//! server (scripted agents from an askloop.toml, a SQLite file) twice, once
//! with a token, and a third time on a store of its own that the test fills
//! with more waiting runs than one page of the Inbox holds; runs the browser
//! test in `tests/web` (Node, playwright-core, Debian's chromium) against
//! them, asserting it passed.
//! A second test runs `tests/web/threads.test.mjs`, the conversations on
//! the page, against a server without tokens, one with named tokens
//! (whose threads are walled by resource), and one whose conversations are
//! more than one page of the list holds.
//! A third runs `tests/web/grants.test.mjs`, approvals that stick.
//! Screenshots land in `target/web-screenshots/`.
//!
//! Without chromium, node or `tests/web/node_modules`, the test fails under
//! CI (`CI=true`) and is skipped with the reason otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::{BIN, DEPLOYER_SCRIPT, Serve, Serving, missing_browser, run_browser_test, skipped_for_lack_of};
const TOKEN: &str = "web-page-test-token";

const ASSISTANT_SCRIPT: &str = r#"{"turns": [
  {"text": "Let me ask a few things first.", "toolCalls": [
    {"name": "ask_user", "args": {"question": "Which region should we launch in?", "options": [
      {"label": "Europe", "description": "Frankfurt; data stays in the EU"},
      {"label": "Americas", "description": "Virginia; closest to most customers"},
      {"label": "Asia Pacific", "description": "Singapore"}]}},
    {"name": "ask_user", "args": {"question": "Which channels should announce it?", "selectionMode": "multi_select",
      "options": [
        {"label": "Email", "description": "The customer newsletter"},
        {"label": "Blog"},
        {"label": "Push", "description": "Mobile notifications"}]}},
    {"name": "ask_user", "args": {"question": "What should the launch be called?"}}]},
  {"text": "All set: {{toolResults}}"}
]}"#;

const CLI_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment should I deploy to?", "options": [
    {"label": "staging", "description": "Safe to try things"},
    {"label": "production", "description": "Real customers"}]}}]},
  {"text": "All set: {{toolResults}}"}
]}"#;

/// A model that reasons before it answers.
const THINKER_SCRIPT: &str = r#"{"turns": [
  {"reasoning": "Americas has the most sign-ups this quarter.", "text": "Launch in the Americas."}
]}"#;

/// Two files to write in one step: both wait for approval, and can be
/// approved at once.
const PUBLISHER_SCRIPT: &str = r##"{"turns": [
  {"text": "Two pages to publish.", "toolCalls": [
    {"name": "write_file", "args": {"path": "about.md", "content": "# About\n"}},
    {"name": "write_file", "args": {"path": "pricing.md", "content": "# Pricing\n"}}]},
  {"text": "Published: {{toolResults}}"}
]}"##;

const CLERK_SCRIPT: &str = r#"{"turns": [
  {"text": "The sign-up form comes from the MCP server.", "toolCalls": [
    {"name": "trigger-elicitation-request", "id": "call_form"}]},
  {"text": "Done: {{toolResults}}"}
]}"#;

/// The agents; the clerk takes the tools of the MCP reference server
/// (`tests/mcp`), whose elicitation the page shows as a form.
fn config(everything: &Path) -> String {
    format!(
        "{CONFIG}\n[agents.clerk]\nname = \"Clerk\"\nscript = \"clerk.json\"\n\n[[agents.clerk.mcp]]\n\
         name = \"everything\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\ntools = [\"trigger-elicitation-request\"]\n",
        everything.display().to_string()
    )
}

const CONFIG: &str = r#"
[agents.assistant]
name = "Assistant"
tools = ["ask_user"]

[agents.deployer]
name = "Deployer"
script = "deployer.json"
tools = ["write_file"]
write_dir = "written"

[agents.publisher]
name = "Publisher"
script = "publisher.json"
tools = ["write_file"]
write_dir = "written"

[agents.thinker]
name = "Thinker"
script = "thinker.json"
"#;

/// The agents of the store with more runs waiting than one page of the
/// Inbox holds: questions of two kinds and approvals, as a busy team sees them.
const BUSY_CONFIG: &str = r#"
[agents.support]
name = "Support"
script = "support.json"
tools = ["ask_user"]

[agents.release]
name = "Release"
script = "release.json"
tools = ["ask_user"]

[agents.deployer]
name = "Deployer"
script = "deployer.json"
tools = ["write_file"]
write_dir = "written"
"#;

const SUPPORT_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Refund this order? The customer says the parcel arrived damaged.", "options": [
    {"label": "Refund", "description": "The full amount, back to the card"},
    {"label": "Replace", "description": "Send a new one at our cost"},
    {"label": "Decline", "description": "Ask for photos first"}]}}]},
  {"text": "Done: {{toolResults}}"}
]}"#;

const RELEASE_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "What should the release notes say about the new importer?"}}]},
  {"text": "Done: {{toolResults}}"}
]}"#;

/// A directory for a server of its own: the busy store's agents and scripts.
fn busy_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("askloop.toml"), BUSY_CONFIG).unwrap();
    std::fs::write(dir.path().join("support.json"), SUPPORT_SCRIPT).unwrap();
    std::fs::write(dir.path().join("release.json"), RELEASE_SCRIPT).unwrap();
    std::fs::write(dir.path().join("deployer.json"), DEPLOYER_SCRIPT).unwrap();
    std::fs::write(dir.path().join("assistant.json"), RELEASE_SCRIPT).unwrap();
    dir
}

/// What the browser test needs, or why it cannot run here.
fn missing_needs(web: &Path) -> Option<String> {
    missing_browser(web).or_else(|| {
        let entry = everything_entry(web);
        (!entry.is_file()).then(|| format!("{} is missing (npm ci in tests/mcp)", entry.display()))
    })
}

/// The MCP reference server's entry point, beside the browser test.
fn everything_entry(web: &Path) -> PathBuf {
    web.join("../mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

fn serve(dir: &Path, token: Option<&str>) -> Serving {
    let serve = Serve::in_dir(dir).args(["--script", "assistant.json"]);
    match token {
        Some(token) => serve.env("ASKLOOP_API_TOKEN", token).start(),
        None => serve.start(),
    }
}

#[test]
fn the_web_page_passes_its_browser_test_against_the_real_server() {
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/web");
    if skipped_for_lack_of("the browser test", missing_needs(&web)) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let everything = everything_entry(&web).canonicalize().unwrap();
    std::fs::write(dir.path().join("askloop.toml"), config(&everything)).unwrap();
    std::fs::write(dir.path().join("clerk.json"), CLERK_SCRIPT).unwrap();
    std::fs::write(dir.path().join("assistant.json"), ASSISTANT_SCRIPT).unwrap();
    std::fs::write(dir.path().join("deployer.json"), DEPLOYER_SCRIPT).unwrap();
    std::fs::write(dir.path().join("publisher.json"), PUBLISHER_SCRIPT).unwrap();
    std::fs::write(dir.path().join("thinker.json"), THINKER_SCRIPT).unwrap();
    std::fs::write(dir.path().join("cli.json"), CLI_SCRIPT).unwrap();
    let open = serve(dir.path(), None);
    let guarded = serve(dir.path(), Some(TOKEN));
    let busy_dir = busy_dir();
    let busy = serve(busy_dir.path(), None);
    let mut node = Command::new("node");
    node.env("ASKLOOP_WEB_URL", &open.base)
        .env("ASKLOOP_WEB_TOKEN_URL", &guarded.base)
        .env("ASKLOOP_WEB_TOKEN", TOKEN)
        .env("ASKLOOP_WEB_BUSY_URL", &busy.base)
        .env("ASKLOOP_BIN", BIN)
        .env("ASKLOOP_WEB_DB", dir.path().join("runs.db"))
        .env("ASKLOOP_WEB_CLI_SCRIPT", dir.path().join("cli.json"));
    run_browser_test(
        node,
        &web,
        "page.test.mjs",
        &[
            "chat-question.png",
            "inbox.png",
            "inbox-dark.png",
            "inbox-busy.png",
            "inbox-busy-end.png",
            "chat-phone.png",
            "mcp-form.png",
        ],
    );
}

/// The agent of the conversations test: a question, its answer, then on
/// the same thread (whose messages the script counts) a second question.
const THREADS_SCRIPT: &str = r#"{"turns": [
  {"text": "Before I start:", "toolCalls": [{"name": "ask_user", "args": {"question": "Which environment should I deploy to?", "options": [
    {"label": "staging", "description": "Safe to try things"},
    {"label": "production", "description": "Real customers"}]}}]},
  {"text": "Deployed to {{toolResults}}."},
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Should I run the database migrations too?", "options": [
    {"label": "Yes", "description": "Run them right after the deploy"},
    {"label": "No", "description": "Leave them for the next release"}]}}]},
  {"text": "Done: {{toolResults}}."},
  {"text": "Noted."},
  {"text": "Noted."},
  {"text": "Noted."}
]}"#;

const HELPER_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which log should I read first?"}}]},
  {"text": "Read: {{toolResults}}."}
]}"#;

const THREADS_CONFIG: &str = r#"
[agents.assistant]
name = "Assistant"
script = "threads.json"

[agents.helper]
name = "Helper"
script = "helper.json"
"#;

/// Two named tokens: each one's conversations are walled from the other's;
/// ana may also use the resource `team`.
const WALLS: &str = r#"
[[tokens]]
name = "ana"
token_env = "ASKLOOP_TEST_ANA_TOKEN"
resources = ["team"]

[[tokens]]
name = "bo"
token_env = "ASKLOOP_TEST_BO_TOKEN"
"#;

const ANA_TOKEN: &str = "ana-secret-for-the-page-test";
const BO_TOKEN: &str = "bo-secret-for-the-page-test";

/// A directory with the conversations test's agents, and tokens if `walls`.
fn threads_dir(walls: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let config = if walls {
        format!("{THREADS_CONFIG}{WALLS}")
    } else {
        THREADS_CONFIG.to_owned()
    };
    std::fs::write(dir.path().join("askloop.toml"), config).unwrap();
    std::fs::write(dir.path().join("threads.json"), THREADS_SCRIPT).unwrap();
    std::fs::write(dir.path().join("helper.json"), HELPER_SCRIPT).unwrap();
    dir
}

/// An agent that notes what it is told: each message a conversation of its own.
const NOTES_CONFIG_FOR_LIST: &str = r#"
[agents.notes]
name = "Notes"
script = "noted.json"
"#;

/// A directory for the server whose conversations fill several pages.
fn many_threads_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("askloop.toml"), NOTES_CONFIG_FOR_LIST).unwrap();
    std::fs::write(dir.path().join("noted.json"), r#"{"turns": [{"text": "Noted."}]}"#).unwrap();
    dir
}

fn serve_threads(dir: &Path) -> Serving {
    Serve::in_dir(dir)
        .env("ASKLOOP_TEST_ANA_TOKEN", ANA_TOKEN)
        .env("ASKLOOP_TEST_BO_TOKEN", BO_TOKEN)
        .start()
}

#[test]
fn conversations_on_the_page_pass_their_browser_test_against_the_real_server() {
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/web");
    if skipped_for_lack_of("the conversations browser test", missing_browser(&web)) {
        return;
    }
    let open_dir = threads_dir(false);
    let walled_dir = threads_dir(true);
    let many_dir = many_threads_dir();
    let open = serve_threads(open_dir.path());
    let walled = serve_threads(walled_dir.path());
    let many = serve_threads(many_dir.path());

    let mut node = Command::new("node");
    node.env("ASKLOOP_WEB_URL", &open.base)
        .env("ASKLOOP_WEB_WALLED_URL", &walled.base)
        .env("ASKLOOP_WEB_ANA_TOKEN", ANA_TOKEN)
        .env("ASKLOOP_WEB_BO_TOKEN", BO_TOKEN)
        .env("ASKLOOP_WEB_MANY_URL", &many.base);
    run_browser_test(
        node,
        &web,
        "threads.test.mjs",
        &[
            "threads.png",
            "threads-dark.png",
            "threads-phone.png",
            "inbox-threads.png",
            "threads-many.png",
            "threads-many-end.png",
        ],
    );
}

/// A note written at each message, for approvals that stick: the first
/// waits, the second runs by the grant the first made, the third (after
/// the grant is revoked) waits again.
const NOTES_SCRIPT: &str = r##"{"turns": [
  {"toolCalls": [{"name": "write_file", "args": {"path": "first.md", "content": "one"}}]},
  {"text": "Wrote: {{toolResults}}"},
  {"toolCalls": [{"name": "write_file", "args": {"path": "second.md", "content": "two"}}]},
  {"text": "Wrote: {{toolResults}}"},
  {"toolCalls": [{"name": "write_file", "args": {"path": "third.md", "content": "three"}}]},
  {"text": "Wrote: {{toolResults}}"}
]}"##;

const NOTES_CONFIG: &str = r#"
[agents.notes]
name = "Notes"
script = "notes.json"
tools = ["write_file"]
write_dir = "written"
"#;

#[test]
fn always_allowing_a_tool_in_a_chat_passes_its_browser_test_against_the_real_server() {
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/web");
    if skipped_for_lack_of("the grants browser test", missing_browser(&web)) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("askloop.toml"), NOTES_CONFIG).unwrap();
    std::fs::write(dir.path().join("notes.json"), NOTES_SCRIPT).unwrap();
    let server = serve_threads(dir.path());
    let mut node = Command::new("node");
    node.env("ASKLOOP_WEB_URL", &server.base)
        .env("ASKLOOP_WEB_WRITTEN", dir.path().join("written"));
    run_browser_test(
        node,
        &web,
        "grants.test.mjs",
        &[
            "grants-form.png",
            "grants-chat.png",
            "grants-run.png",
            "grants-inbox.png",
        ],
    );
}

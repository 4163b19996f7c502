//! `askloop serve`'s chat route (`POST /chat/{agentId}`) driven by the
//! published Vercel AI SDK (`ai` 7.0.173): `AbstractChat` with
//! `DefaultChatTransport`, the engine React's `useChat` runs, against a real
//! server process with the shared scripted agents and a few of the chat
//! test's own; the Node tests are in `tests/aisdk/`.
//!
//! The Node project needs `npm ci` in `tests/aisdk` first (`.ci/run` does
//! it). Without `node` or its `node_modules`, this test fails under
//! `CI=true` and is skipped, with the reason printed, elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use askloop_testkit::{FakeServer, FakeTurn};

mod common;

use common::node::{agents_dir, node_missing, node_project, run_node_tests, serve_agents, tap_passed};
use common::{missing_browser, skipped_for_lack_of};

/// The server's API token, which the chat transport sends as a header.
const TOKEN: &str = "aisdk-token";

/// Two tokens walled to the threads of one resource each (`team-a`,
/// `team-b`): one person's chat and another's, on one server.
const ALICE: &str = "aisdk-alice-secret-0123";
const BOB: &str = "aisdk-bob-secret-456789";

/// What the chat test adds to the shared agents: `surveyor` asks two
/// questions in one step, then says what it was told; `narrator` streams
/// [`STORY`] from a slow model ([`SlowModel`]), so that a chat is still
/// streaming while a test drops and re-attaches it; and the tokens of
/// `alice` and `bob`.
const CHAT_CONFIG: &str = r#"
[agents.surveyor]
name = "Surveyor"
script = "survey.json"
tools = ["ask_user"]

[agents.narrator]
name = "Narrator"
model = "openai/gpt-4o-mini"

[[tokens]]
name = "alice"
token_env = "ASKLOOP_ALICE_TOKEN"
resources = ["team-a"]

[[tokens]]
name = "bob"
token_env = "ASKLOOP_BOB_TOKEN"
resources = ["team-b"]
"#;

const SURVEY_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [
    {"name": "ask_user", "args": {"question": "Which environment?",
       "options": [{"label": "staging"}, {"label": "production"}], "selectionMode": "single_select"}},
    {"name": "ask_user", "args": {"question": "Which version?"}}]},
  {"text": "Told: {{toolResults}}"}
]}"#;

/// What the narrator says, in [`STORY_PIECES`] pieces [`PIECE_DELAY`]
/// apart: about five seconds from its first word to its last, so that a
/// re-attach made just after the first words lands while it still streams,
/// even on a loaded machine.
const STORY: &str = "Once upon a time a deploy went out to staging, waited for its checks, \
                     went on to production, and everyone went home early.";
const STORY_PIECES: usize = 20;
const PIECE_DELAY: Duration = Duration::from_millis(250);

/// The narrator's model: the testkit's fake OpenAI server, answering every
/// request with [`STORY`], slowly. It serves from its own runtime's
/// threads while the test waits for `node`.
struct SlowModel {
    server: FakeServer,
    _runtime: tokio::runtime::Runtime,
}

impl SlowModel {
    fn start() -> Self {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let story = |_: &serde_json::Value| FakeTurn::text_in(STORY, STORY_PIECES).frame_delay(PIECE_DELAY).into();
        let server = runtime.block_on(FakeServer::with_responder(story)).unwrap();
        SlowModel {
            server,
            _runtime: runtime,
        }
    }

    /// Its OpenAI-compatible API, for `OPENAI_BASE_URL`.
    fn base_url(&self) -> String {
        self.server.openai_base_url()
    }
}

/// The shared agents and the chat test's own ([`CHAT_CONFIG`]).
fn chat_agents_dir() -> tempfile::TempDir {
    let dir = agents_dir();
    std::fs::write(dir.path().join("survey.json"), SURVEY_SCRIPT).unwrap();
    let mut config = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("askloop.toml"))
        .unwrap();
    config.write_all(CHAT_CONFIG.as_bytes()).unwrap();
    dir
}

#[test]
fn the_ai_sdk_chat_engine_asks_answers_approves_declines_re_attaches_and_keeps_a_thread_through_askloop_serve() {
    let aisdk = node_project("aisdk");
    if skipped_for_lack_of("the AI SDK chat test", node_missing(&aisdk, "ai")) {
        return;
    }
    let dir = chat_agents_dir();
    let write_dir = dir.path().join("out");
    let model = SlowModel::start();
    let server = serve_agents(
        dir.path(),
        TOKEN,
        &[],
        &[
            ("OPENAI_API_KEY", "sk-test"),
            ("OPENAI_BASE_URL", &model.base_url()),
            ("ASKLOOP_ALICE_TOKEN", ALICE),
            ("ASKLOOP_BOB_TOKEN", BOB),
        ],
    );
    let report = run_node_tests(
        &aisdk,
        "chat.test.mjs",
        &[
            ("ASKLOOP_URL", server.base.as_ref()),
            ("ASKLOOP_WRITE_DIR", write_dir.as_os_str()),
            ("ASKLOOP_API_TOKEN", TOKEN.as_ref()),
            ("ASKLOOP_ALICE_TOKEN", ALICE.as_ref()),
            ("ASKLOOP_BOB_TOKEN", BOB.as_ref()),
            ("ASKLOOP_STORY", STORY.as_ref()),
        ],
    );
    // Not vacuous: every test ran and passed.
    assert_eq!(tap_passed(&report), 11, "{report}");
}

/// The example page `examples/use-chat` (React's `useChat`) in Debian's
/// chromium, served from its own origin, which the server allows
/// (`--cors-origin`); the Node side is `tests/aisdk/use-chat.test.mjs`. It
/// leaves a screenshot of a question in the page in the target directory.
#[test]
fn the_use_chat_example_page_answers_a_question_and_approves_a_call_in_a_real_browser() {
    let aisdk = node_project("aisdk");
    let web = node_project("web");
    let missing = node_missing(&aisdk, "ai").or_else(|| missing_browser(&web));
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
    let server = serve_agents(dir.path(), TOKEN, &["--cors-origin", &origin], &[]);
    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("use-chat-question.png");
    let page_port = page_port.to_string();
    let report = run_node_tests(
        &aisdk,
        "use-chat.test.mjs",
        &[
            ("ASKLOOP_URL", server.base.as_ref()),
            ("ASKLOOP_API_TOKEN", TOKEN.as_ref()),
            ("ASKLOOP_PAGE_PORT", page_port.as_ref()),
            ("ASKLOOP_SCREENSHOT", screenshot.as_os_str()),
        ],
    );
    assert_eq!(tap_passed(&report), 2, "{report}");
    assert!(screenshot.is_file(), "no screenshot at {}", screenshot.display());
}

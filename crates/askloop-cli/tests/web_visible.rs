//! What a person decides on, shown as it is, in a real browser: starts
//! `askloop serve` (answer links on, scripted agents on a SQLite file) and
//! runs `tests/web/visible.test.mjs` against it, which checks that
//!
//! - an approval whose path holds a right-to-left override, and a question
//!   whose text and labels hold isolates and zero-width characters, show
//!   each of them marked as its code point on the run view, in the Inbox
//!   and on the answer link's page;
//! - an MCP server's form with fields named `__proto__` and `constructor`
//!   sends and keeps their values;
//! - the page's rule (`dom.js`) marks exactly what the server's rule
//!   (`askloop::visible`) marks: every code point alone, and a few thousand
//!   texts dense in joiners, selectors, emoji, bidi and control characters,
//!   which this test writes for the browser test to compare.
//!
//! Screenshots land in `target/web-screenshots/`. Without chromium, node,
//! `tests/web/node_modules` or `tests/mcp/node_modules`, the test fails
//! under CI (`CI=true`) and is skipped with the reason otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::Path;

use serde_json::{Value, json};

mod common;

use common::{LINKS_CONFIG, Serve, missing_browser, node_for_links, run_browser_test, skipped_for_lack_of};

const KEY: &str = "a-link-signing-key-of-the-visible-test-0123";

/// One step that waits on an approval whose path reads `report_gpj.sh`
/// unless its override is shown, and on a question whose text and labels
/// hide characters.
const SPOOFER_SCRIPT: &str = r#"{"turns": [
  {"text": "I will publish the report.", "toolCalls": [
    {"name": "write_file", "id": "call_write", "args": {"path": "docs/report_\u202ehs.gpj", "content": "echo \u2066done\u2069\u200b"}},
    {"name": "ask_user", "id": "call_ask", "args": {"question": "Publish it to \u2067production\u2069 now?", "options": [
      {"label": "Yes\u200b", "description": "Right away"},
      {"label": "No", "description": "\u202eesrever ni"}]}}]},
  {"text": "Done: {{toolResults}}"}
]}"#;

const REGISTRAR_SCRIPT: &str = r#"{"turns": [
  {"text": "The registration form comes from the MCP server.", "toolCalls": [{"name": "register", "id": "call_form"}]},
  {"text": "Registered: {{toolResults}}"}
]}"#;

fn config(form_server: &Path) -> String {
    format!(
        r#"{LINKS_CONFIG}
[agents.spoofer]
name = "Publisher"
script = "spoofer.json"
tools = ["ask_user", "write_file"]
write_dir = "written"

[agents.registrar]
name = "Registrar"
script = "registrar.json"

[[agents.registrar.mcp]]
name = "forms"
command = "node"
args = [{:?}]
"#,
        form_server.display().to_string()
    )
}

/// Characters near the rule's edges: letters of several scripts, emoji and
/// their modifiers, joiners, selectors, keycaps, bidi, control, tag and
/// other invisible characters.
const NEAR: &[char] = &[
    'a',
    'Z',
    '1',
    '#',
    '*',
    ' ',
    '\n',
    '\r',
    '\t',
    '\u{0}',
    '\u{1b}',
    '\u{7f}',
    '\u{85}',
    '\u{9b}',
    '\u{a0}',
    'é',
    'ب',
    'م',
    'क',
    '\u{94d}',
    'ष',
    '葛',
    '😀',
    '👩',
    '💻',
    '\u{1f3fb}',
    '⚠',
    '\u{20e3}',
    '\u{ad}',
    '\u{34f}',
    '\u{61c}',
    '\u{115f}',
    '\u{180e}',
    '\u{200b}',
    '\u{200c}',
    '\u{200d}',
    '\u{200e}',
    '\u{200f}',
    '\u{2028}',
    '\u{202a}',
    '\u{202e}',
    '\u{2060}',
    '\u{2066}',
    '\u{2069}',
    '\u{3000}',
    '\u{3164}',
    '\u{fe00}',
    '\u{fe0e}',
    '\u{fe0f}',
    '\u{feff}',
    '\u{fff9}',
    '\u{1bca0}',
    '\u{1d173}',
    '\u{e0001}',
    '\u{e0041}',
    '\u{e0100}',
    '\u{e01ef}',
];

/// Texts for both rules to mark: the ones the rule is written for, then
/// a few thousand drawn from [`NEAR`] (a fixed sequence, the same every run).
fn cases() -> Vec<String> {
    let mut cases: Vec<String> = [
        "docs/report_\u{202e}hs.gpj",
        "⚠\u{fe0f} careful",
        "👩\u{200d}💻",
        "🏳\u{fe0f}\u{200d}🌈",
        "1\u{fe0f}\u{20e3}",
        "می\u{200c}خواهم",
        "pass\u{200d}word",
        "😀\u{fe0f}\u{fe0f}",
        "😀\u{e0101}\u{e0102}",
        "é\u{200b}é",
        "line\r\n\tnext",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3000 {
        let len = usize::try_from(next() % 12).unwrap();
        cases.push(
            (0..len)
                .map(|_| NEAR[usize::try_from(next() % NEAR.len() as u64).unwrap()])
                .collect(),
        );
    }
    cases
}

/// The server's rule written out for the browser test: the code points it
/// marks alone, as ranges, and each case with its marked form.
fn rule() -> Value {
    let mut ranges: Vec<[u32; 2]> = Vec::new();
    for c in (0..=0x10_FFFF_u32).filter_map(char::from_u32) {
        if !askloop::visible::is_invisible(c) {
            continue;
        }
        let point = u32::from(c);
        match ranges.last_mut() {
            Some(last) if last[1] + 1 == point => last[1] = point,
            _ => ranges.push([point, point]),
        }
    }
    let cases: Vec<Value> = cases()
        .into_iter()
        .map(|text| {
            let marked = askloop::visible::marked(&text).into_owned();
            json!([text, marked])
        })
        .collect();
    json!({"ranges": ranges, "cases": cases})
}

#[test]
fn what_a_person_decides_on_is_shown_as_it_is_in_a_real_browser() {
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/web");
    let sdk = web.join("../mcp/node_modules/@modelcontextprotocol/sdk");
    let missing = missing_browser(&web)
        .or_else(|| (!sdk.is_dir()).then(|| format!("{} is missing (npm ci in tests/mcp)", sdk.display())));
    if skipped_for_lack_of("the visible-text browser test", missing) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let form_server = web.join("form-server.mjs").canonicalize().unwrap();
    std::fs::write(dir.path().join("askloop.toml"), config(&form_server)).unwrap();
    std::fs::write(dir.path().join("spoofer.json"), SPOOFER_SCRIPT).unwrap();
    std::fs::write(dir.path().join("registrar.json"), REGISTRAR_SCRIPT).unwrap();
    let rule_file = dir.path().join("rule.json");
    std::fs::write(&rule_file, rule().to_string()).unwrap();
    let serving = Serve::in_dir(dir.path()).env("ASKLOOP_TEST_LINK_KEY", KEY).start();

    let mut node = node_for_links(&serving, dir.path(), KEY);
    node.env("ASKLOOP_WEB_RULE", &rule_file);
    run_browser_test(
        node,
        &web,
        "visible.test.mjs",
        &[
            "visible-run.png",
            "visible-run-dark.png",
            "visible-inbox.png",
            "visible-link.png",
            "visible-form.png",
        ],
    );
}

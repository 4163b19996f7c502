//! What the binary prints: quiet on a closed pipe, never raw control
//! characters from a model or an answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

/// Runs `args` with stdout a pipe whose reader is already gone, as with
/// `askloop runs | head -1` once `head` has exited.
fn with_closed_stdout(env: &Env, args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    env.cmd()
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn output_to_a_closed_pipe_ends_quietly() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let run_id = env.only_run_id();
    for args in [
        vec!["runs"],
        vec!["runs", "--json"],
        vec!["runs", "show", run_id.as_str()],
        vec!["runs", "show", run_id.as_str(), "--json"],
        vec!["--help"],
    ] {
        let out = with_closed_stdout(&env, &args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).is_empty(), "{args:?}: {}", stderr(&out));
    }
    // A run goes on to its end (and is stored) when nobody reads its text.
    let out = with_closed_stdout(&env, &["resume", &run_id, "--answer", "Zed"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert_eq!(tool_results(&env.show(&run_id)), ["User answered: Zed"]);
}

const ESCAPES: &str = r#"{"turns": [
  {"text": "Hi \u001b[2J\u001b]0;owned\u0007 there\r",
   "toolCalls": [{"name": "ask_user", "args": {"question": "Name\u001b[31m?", "options": [{"label": "a\u001b[0m"}, {"label": "b"}]}}]},
  {"text": "done"}
]}"#;

#[test]
fn runs_and_runs_show_print_control_characters_escaped() {
    let env = Env::new();
    let script = env.script("escapes.json", ESCAPES);
    let out = env.run(&["run", "--script", script.to_str().unwrap(), "go \u{1b}[5m blink"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    let run_id = env.only_run_id();
    for args in [vec!["runs"], vec!["runs", "show", run_id.as_str()]] {
        let out = env.run(&args);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let text = stdout(&out);
        for raw in ['\u{1b}', '\u{7}', '\r'] {
            assert!(!text.contains(raw), "{args:?} printed {raw:?} raw: {text:?}");
        }
        assert!(text.contains(r"Name\e[31m?"), "{args:?}: {text}");
    }
    let shown = stdout(&env.run(&["runs", "show", &run_id]));
    assert!(shown.contains(r"go \e[5m blink"), "{shown}");
    assert!(shown.contains(r"Hi \e[2J\e]0;owned\a there\r"), "{shown}");
    assert!(shown.contains(r"- a\e[0m"), "{shown}");
    // --json keeps the exact text (escaped the JSON way).
    let json = env.show(&run_id);
    assert_eq!(json["messages"][0]["content"], "go \u{1b}[5m blink");
}

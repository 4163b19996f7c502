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

/// Each kind of sequence a terminal acts on, as a model may write it, and
/// what the terminal must be shown instead.
const HOSTILE: [(&str, &str); 15] = [
    // OSC 52: writes the clipboard.
    ("\u{1b}]52;c;cm0gLXJmIH4=\u{7}", r"\e]52;c;cm0gLXJmIH4=\a"),
    // OSC 8: a link whose text hides its target.
    (
        "\u{1b}]8;;https://evil.example/\u{1b}\\",
        r"\e]8;;https://evil.example/\e\",
    ),
    // OSC 0: the window's title.
    ("\u{1b}]0;owned\u{7}", r"\e]0;owned\a"),
    // CSI: the cursor moved, the screen cleared.
    ("\u{1b}[31;7H", r"\e[31;7H"),
    ("\u{1b}[2J", r"\e[2J"),
    // DSR: the terminal types its reply as if the person had.
    ("\u{1b}[6n", r"\e[6n"),
    // C1 CSI: the same in one character.
    ("\u{9b}2J", r"\x9b2J"),
    // DCS, and C1 DCS.
    ("\u{1b}P+q544e\u{1b}\\", r"\eP+q544e\e\"),
    ("\u{90}1$r\u{9c}", r"\x901$r\x9c"),
    // CR, BS and BEL: a line overwritten, a bell.
    ("ab\rcd", r"ab\rcd"),
    ("ab\u{8}cd", r"ab\bcd"),
    ("ab\u{7}cd", r"ab\acd"),
    // Bidi override and isolates, a zero-width space.
    ("gpj\u{202e}hs", "gpj<U+202E>hs"),
    ("\u{2066}iso\u{2069}", "<U+2066>iso<U+2069>"),
    ("zw\u{200b}sp", "zw<U+200B>sp"),
];

/// The `k`th hostile sequence between markers that name it: `[k:...:k]`.
fn hostile(k: usize) -> String {
    format!("[{k}:{}:{k}]", HOSTILE[k].0)
}

/// Every hostile sequence, one after another.
fn all_hostile() -> String {
    (0..HOSTILE.len()).map(hostile).collect::<Vec<_>>().join(" ")
}

/// A model's turn that says every hostile sequence, then asks a question
/// holding them in its text, labels and descriptions (the last ending
/// `END`), or asks to write a file whose path holds them.
fn hostile_script(env: &Env, approval: bool) -> String {
    let call = if approval {
        json!({"name": "write_file", "args": {"path": format!("notes/{}", all_hostile()), "content": "x"}})
    } else {
        let options: Vec<Value> = (0..6)
            .map(|i| {
                let end = if i == 5 { "END" } else { "" };
                json!({"label": format!("L{}", hostile(3 + 2 * i)), "description": format!("D{}{end}", hostile(4 + 2 * i))})
            })
            .collect();
        json!({"name": "ask_user", "args": {
            "question": format!("Q{} {} {}", hostile(0), hostile(1), hostile(2)),
            "options": options,
        }})
    };
    let script = json!({"turns": [
        {"text": format!("Said: {}\n", all_hostile()), "toolCalls": [call]},
        {"text": "Result: {{toolResults}}"},
    ]});
    let name = if approval { "approval.json" } else { "question.json" };
    env.script(name, &script.to_string()).to_str().unwrap().to_owned()
}

/// Asserts that what `what` sent the terminal holds none of the hostile
/// sequences but each one's escaped form, and no byte of a bell, a C1
/// control, a bidi control or a zero-width space anywhere. (A prompt
/// breaks its long lines with CR LF of its own; they are read past.)
fn assert_inert(what: &str, terminal: &str) {
    let unwrapped = terminal.replace("\r\n", "");
    for (k, (raw, shown)) in HOSTILE.iter().enumerate() {
        let raw = format!("[{k}:{raw}");
        assert!(
            !terminal.contains(&raw),
            "{what} sent the terminal {raw:?}: {terminal:?}"
        );
        assert!(
            !unwrapped.contains(&raw),
            "{what} sent the terminal {raw:?}: {terminal:?}"
        );
        let shown = format!("[{k}:{shown}:{k}]");
        assert!(
            unwrapped.contains(&shown),
            "{what} did not show {shown:?}: {terminal:?}"
        );
    }
    for c in [
        '\u{7}', '\u{90}', '\u{9b}', '\u{9c}', '\u{202e}', '\u{2066}', '\u{2069}', '\u{200b}',
    ] {
        assert!(!terminal.contains(c), "{what} sent the terminal {c:?}: {terminal:?}");
    }
}

use serde_json::{Value, json};

mod pty {
    //! The prompts and `runs show` at a real pseudo-terminal: the bytes
    //! the terminal is sent, read from its other end.
    use super::*;
    use common::pty::*;
    use rexpect::session::PtySession;

    /// Everything the terminal is sent until `needle`, `needle` included.
    fn read_to(p: &mut PtySession, needle: &str, seen: &mut String) {
        seen.push_str(&p.exp_string(needle).unwrap());
        seen.push_str(needle);
    }

    /// What `askloop args` sends the terminal up to its prompt (until
    /// `drawn` is on screen, so the terminal is in raw mode), then on Esc
    /// to its end: the run stays suspended.
    fn left_at_prompt(env: &Env, args: &[&str], drawn: &str) -> String {
        let mut p = spawn(env, args);
        let mut seen = String::new();
        read_to(&mut p, drawn, &mut seen);
        p.send(ESC).unwrap();
        p.flush().unwrap();
        read_to(&mut p, "stays suspended", &mut seen);
        seen.push_str(&p.exp_eof().unwrap());
        assert_eq!(exit_code(&mut p), SUSPENDED, "{seen:?}");
        seen
    }

    /// What `askloop args` sends the terminal, to its end, which is `code`.
    fn printed(env: &Env, args: &[&str], code: i32) -> String {
        let mut p = spawn(env, args);
        let seen = p.exp_eof().unwrap();
        assert_eq!(exit_code(&mut p), code, "{seen:?}");
        seen
    }

    #[test]
    fn chat_and_resume_prompts_and_runs_show_send_a_terminal_no_control_sequence_of_the_models() {
        let env = Env::new();
        let script = hostile_script(&env, false);

        let chat = left_at_prompt(&env, &["chat", "--script", &script, "go"], "END");
        assert_inert("askloop chat", &chat);
        // The prompt itself, apart from the model's text printed before it.
        let prompt = chat.find("? Q[0:").expect("the question's prompt");
        assert!(chat.find("Said: ").is_some_and(|said| said < prompt), "{chat:?}");
        assert_inert("askloop chat's prompt", &chat[prompt..]);

        let run_id = env.only_run_id();
        let resume = left_at_prompt(&env, &["resume", &run_id], "END");
        assert_inert("askloop resume", &resume);

        let shown = printed(&env, &["runs", "show", &run_id], 0);
        assert_inert("askloop runs show", &shown);
        assert!(shown.contains("Conversation:"), "{shown:?}");
    }

    #[test]
    fn the_approval_prompts_of_chat_and_resume_and_approve_send_a_terminal_no_control_sequence_of_the_models() {
        let env = Env::new();
        let script = hostile_script(&env, true);

        let chat = left_at_prompt(&env, &["chat", "--script", &script, "go"], "(y/N)");
        let prompt = chat.find("? Allow write_file").expect("the approval's prompt");
        assert_inert("askloop chat's approval", &chat[prompt..]);

        let run_id = env.only_run_id();
        let resume = left_at_prompt(&env, &["resume", &run_id], "(y/N)");
        assert_inert("askloop resume's approval", &resume);

        let shown = printed(&env, &["runs", "show", &run_id], 0);
        assert_inert("askloop runs show", &shown);
        assert!(shown.contains("Approval needed: write_file"), "{shown:?}");

        let approved = printed(&env, &["approve", &run_id], 0);
        assert_inert("askloop approve", &approved);
        assert!(approved.contains("[write_file]"), "{approved:?}");
    }
}

#[test]
fn json_output_escapes_c1_controls_and_bidi_and_reads_back_exact() {
    let env = Env::new();
    let script = hostile_script(&env, false);
    let out = env.run(&["run", "--json", "--script", &script, "go"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    let run_id = env.only_run_id();
    let said = format!("Said: {}\n", all_hostile());
    for (what, out) in [
        ("run --json", out),
        ("runs --json", env.run(&["runs", "--json"])),
        ("runs show --json", env.run(&["runs", "show", &run_id, "--json"])),
    ] {
        let text = stdout(&out);
        for c in [
            '\u{7f}', '\u{90}', '\u{9b}', '\u{9c}', '\u{202e}', '\u{2066}', '\u{2069}', '\u{200b}',
        ] {
            assert!(!text.contains(c), "{what} printed {c:?} raw: {text:?}");
        }
        assert!(
            text.contains(r"gpj\u202ehs") && text.contains(r"\u009b2J"),
            "{what}: {text}"
        );
        let values: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
        assert!(!values.is_empty(), "{what}");
    }
    let shown = env.show(&run_id);
    assert_eq!(shown["messages"][1]["content"], said.as_str());
}

#[test]
fn approve_edit_shows_the_editor_each_hidden_character_as_a_json_escape() {
    let env = Env::new();
    let script = hostile_script(&env, true);
    let out = env.run(&["run", "--script", &script, "go"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    let run_id = env.only_run_id();
    // An "editor" that keeps a copy of what it was given and changes nothing.
    let seen = env.dir.path().join("seen.json");
    let out = env
        .cmd()
        .args(["approve", &run_id, "--edit"])
        .env_remove("VISUAL")
        .env("EDITOR", format!("sh -c 'cp \"$0\" {}'", seen.display()))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let edited = std::fs::read_to_string(&seen).unwrap();
    for c in [
        '\u{7f}', '\u{90}', '\u{9b}', '\u{9c}', '\u{202e}', '\u{2066}', '\u{2069}', '\u{200b}',
    ] {
        assert!(!edited.contains(c), "the editor was given {c:?} raw: {edited:?}");
    }
    assert!(
        edited.contains(r"gpj\u202ehs") && edited.contains(r"\u009b2J"),
        "{edited}"
    );
    // Left as it was, the call runs with the model's arguments, exactly.
    let shown = env.show(&run_id);
    assert!(shown["resolutions"][0]["edit"].is_null(), "{shown}");
    let path = format!("notes/{}", all_hostile());
    assert_eq!(shown["messages"][1]["toolCalls"][0]["args"]["path"], path.as_str());
}

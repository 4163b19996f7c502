//! The real `askloop` binary, driven as a person or a script would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Output, Stdio};

use serde_json::{Value, json};

mod common;

use common::*;

#[test]
fn run_with_the_offline_demo_says_so_prints_the_question_and_exits_suspended() {
    let env = Env::new();
    let out = env.run(&["run", "Plan my project"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    assert!(stderr(&out).contains("offline demo"), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("Question: What should the project be called?"), "{text}");
    let run_id = env.only_run_id();
    assert!(
        text.contains(&format!("resume {run_id} --tool-call-id call_1_1 --answer")),
        "{text}"
    );
    assert!(text.contains("tool call call_1_1"), "{text}");
}

#[test]
fn json_output_is_only_chunk_envelopes_one_per_line() {
    let env = Env::new();
    let out = env.run(&["run", "--json", "Plan my project"]);
    assert_eq!(code(&out), SUSPENDED);
    let lines: Vec<Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines.len() > 3);
    for chunk in &lines {
        assert_eq!(chunk["from"], "AGENT");
        assert!(chunk["type"].is_string() && chunk["runId"].is_string() && chunk.get("payload").is_some());
    }
    assert_eq!(lines[0]["type"], "start");
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "tool-call-suspended");
    assert_eq!(
        last["payload"]["suspendPayload"],
        json!({"question": "What should the project be called?"})
    );
    // The people-facing hint went to stderr.
    assert!(stderr(&out).contains("askloop"));
}

#[test]
fn runs_lists_and_shows_a_suspended_run_as_json() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let list: Value = serde_json::from_slice(&env.run(&["runs", "--json", "--status", "suspended"]).stdout).unwrap();
    let run = &list[0];
    for key in ["runId", "agentId", "status", "createdAt", "updatedAt"] {
        assert!(run.get(key).is_some(), "missing {key} in {run}");
    }
    assert_eq!(run["status"], "suspended");
    let run_id = run["runId"].as_str().unwrap();
    let shown = env.show(run_id);
    assert_eq!(shown["runId"], run_id);
    assert_eq!(shown["agentId"], "assistant");
    let pending = &shown["pending"][0];
    assert_eq!(pending["toolCallId"], "call_1_1");
    assert_eq!(pending["toolName"], "ask_user");
    assert_eq!(pending["kind"], "suspended");
    assert_eq!(
        pending["suspendPayload"]["question"],
        "What should the project be called?"
    );
    assert_eq!(shown["messages"][0]["role"], "user");
    let none: Value = serde_json::from_slice(&env.run(&["runs", "--json", "--status", "completed"]).stdout).unwrap();
    assert_eq!(none, json!([]));
    let human = stdout(&env.run(&["runs"]));
    assert!(
        human.contains(run_id) && human.contains("What should the project be called?"),
        "{human}"
    );
}

#[test]
fn resume_takes_each_answer_shape_and_completes_the_demo() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let run_id = env.only_run_id();
    let out = env.run(&["resume", &run_id, "--answer", "Zed"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    assert!(stdout(&out).contains("Which language should it use?"));
    let out = env.run(&["resume", &run_id, "--answer-json", "\"Rust\""]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    // A multi-select question: repeat --answer to pick several.
    let out = env.run(&["resume", &run_id, "--answer", "CI", "--answer", "Docs"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("Extras noted (User answered: CI, Docs)"),
        "{}",
        stdout(&out)
    );
    let shown = env.show(&run_id);
    assert_eq!(shown["status"], "completed");
    let answers = tool_results(&shown);
    assert_eq!(
        answers,
        ["User answered: Zed", "User answered: Rust", "User answered: CI, Docs"]
    );
}

#[test]
fn a_single_answer_to_a_multi_select_question_is_shaped_as_a_list() {
    let env = Env::new();
    let script = env.script(
        "multi.json",
        r#"{"turns": [{"toolCalls": [{"name": "ask_user", "args": {"question": "Which?", "options": [{"label": "a"}, {"label": "b"}], "selectionMode": "multi_select"}}]}, {"text": "{{toolResults}}"}]}"#,
    );
    env.run(&["run", "--script", script.to_str().unwrap(), "go"]);
    let run_id = env.only_run_id();
    let out = env.run(&["resume", &run_id, "--answer", "b"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "User answered: b");
}

#[test]
fn a_rejected_answer_lists_the_labels_exits_2_and_a_good_one_then_works() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let run_id = env.only_run_id();
    env.run(&["resume", &run_id, "--answer", "Zed"]);
    let before = env.show(&run_id);
    let out = env.run(&["resume", &run_id, "--answer", "Go"]);
    assert_eq!(code(&out), 2);
    let message = stderr(&out);
    assert!(message.contains("\"Rust\", \"TypeScript\", \"Python\""), "{message}");
    assert_eq!(message.lines().count(), 1, "one clear line: {message}");
    assert_eq!(env.show(&run_id), before, "a rejected answer changes nothing");
    let out = env.run(&["resume", &run_id, "--answer", "Python"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
}

#[test]
fn malformed_answer_json_is_bad_usage_and_changes_nothing() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let run_id = env.only_run_id();
    let before = env.show(&run_id);
    let out = env.run(&["resume", &run_id, "--answer-json", "{not json"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("--answer-json is not valid JSON"),
        "{}",
        stderr(&out)
    );
    assert_eq!(env.show(&run_id), before);
}

#[test]
fn unknown_and_finished_runs_fail_with_status_1_and_one_line() {
    let env = Env::new();
    let script = env.script("text.json", r#"{"turns": [{"text": "hello"}]}"#);
    let out = env.run(&["run", "--script", script.to_str().unwrap(), "hi"]);
    assert_eq!(code(&out), 0);
    assert_eq!(stdout(&out).trim(), "hello");
    let out = env.run(&["resume", "no-such-run", "--answer", "x"]);
    assert_eq!(code(&out), 1);
    assert_eq!(stderr(&out).trim(), "askloop: no run with id no-such-run");
    let run_id = env.only_run_id();
    let out = env.run(&["resume", &run_id, "--answer", "x"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("is completed, not suspended"), "{}", stderr(&out));
}

#[test]
fn a_missing_or_bad_script_is_one_clear_line() {
    let env = Env::new();
    let out = env.run(&["run", "--script", "nope.json", "hi"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("cannot read script"), "{}", stderr(&out));
    let bad = env.script("bad.json", "{\"turns\": 3}");
    let out = env.run(&["run", "--script", bad.to_str().unwrap(), "hi"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("is not valid"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"));
}

#[test]
fn an_unusable_database_location_fails_cleanly() {
    let env = Env::new();
    let out = env.run(&["--db", "mysql://nowhere/x", "runs"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("postgres://"), "{}", stderr(&out));
    let out = env.run(&["--db", "postgres://nobody@127.0.0.1:1/none", "runs"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"));
}

const TWO_QUESTIONS: &str = r#"{"turns": [
  {"toolCalls": [
    {"name": "ask_user", "args": {"question": "First?"}},
    {"name": "ask_user", "args": {"question": "Second?", "options": [{"label": "x"}, {"label": "y"}]}}
  ]},
  {"text": "Got {{toolResults}}"}
]}"#;

#[test]
fn resume_without_tool_call_id_while_several_are_pending_lists_their_ids() {
    let env = Env::new();
    let script = env.script("two.json", TWO_QUESTIONS);
    let out = env.run(&["run", "--script", script.to_str().unwrap(), "go"]);
    assert_eq!(code(&out), SUSPENDED);
    assert!(stdout(&out).contains("--tool-call-id call_1_1"), "{}", stdout(&out));
    let run_id = env.only_run_id();
    let out = env.run(&["resume", &run_id, "--answer", "x"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("call_1_1, call_1_2"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("pass --tool-call-id (e.g. --tool-call-id call_1_1)"),
        "{}",
        stderr(&out)
    );
    let out = env.run(&["resume", &run_id, "--tool-call-id", "call_1_2", "--answer", "y"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    let out = env.run(&["resume", &run_id, "--tool-call-id", "call_1_1", "--answer", "hi"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Got User answered: hi; User answered: y");
}

#[test]
fn runs_refuses_a_limit_of_zero_as_bad_usage() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let out = env.run(&["runs", "--limit", "0"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("--limit"), "{}", stderr(&out));
    let out = env.run(&["runs", "--limit", "1", "--json"]);
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1);
}

/// Duration flags take askloop's one duration form; one that is no time
/// where time is needed, or not a duration, is bad usage naming the flag and
/// the accepted forms, before anything starts.
#[test]
fn serve_duration_flags_refuse_nonsense_and_zero_where_time_is_needed() {
    let env = Env::new();
    for (flag, value, says) in [
        ("--body-timeout", "0", "no time at all"),
        ("--header-timeout", "0s", "no time at all"),
        ("--shutdown-grace", "soon", "500ms, 1.5s, 15m, 2h, 3d"),
        ("--recover-every", "-5s", "is not a duration"),
    ] {
        let out = env.run(&["serve", "--addr", "127.0.0.1:0", &format!("{flag}={value}")]);
        assert_eq!(code(&out), 2, "{flag} {value}: {}", stderr(&out));
        assert!(stderr(&out).contains(flag), "{}", stderr(&out));
        assert!(stderr(&out).contains(says), "{}", stderr(&out));
    }
}

#[test]
fn a_reason_with_an_answer_is_bad_usage_and_changes_nothing() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let run_id = env.only_run_id();
    let before = env.show(&run_id);
    for args in [
        vec!["resume", run_id.as_str(), "--answer", "Zed", "--reason", "because"],
        vec![
            "resume",
            run_id.as_str(),
            "--answer-json",
            "\"Zed\"",
            "--reason",
            "because",
        ],
    ] {
        let out = env.run(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("--reason goes with --decline"),
            "{}",
            stderr(&out)
        );
    }
    assert_eq!(env.show(&run_id), before);
}

#[test]
fn decline_a_question_with_a_reason_and_the_run_goes_on() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let run_id = env.only_run_id();
    let out = env.run(&["decline", &run_id, "--reason", "no name yet"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    let shown = env.show(&run_id);
    let declined = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert_eq!(declined["content"], "The user declined to answer: no name yet");
}

const WRITE: &str = r#"{"turns": [
  {"toolCalls": [{"name": "write_file", "args": {"path": "notes/plan.txt", "content": "ship it"}}]},
  {"text": "Result: {{toolResults}}"}
]}"#;

#[test]
fn approve_runs_the_waiting_tool_and_decline_never_runs_it() {
    let env = Env::new();
    let script = env.script("write.json", WRITE);
    let out = env.run(&["run", "--script", script.to_str().unwrap(), "write"]);
    assert_eq!(code(&out), SUSPENDED);
    assert!(stdout(&out).contains("Approval needed: write_file"), "{}", stdout(&out));
    let target = env.dir.path().join("notes/plan.txt");
    assert!(!target.exists(), "nothing is written before approval");
    let run_id = env.only_run_id();
    let out = env.run(&["approve", &run_id]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "ship it");
    assert!(stdout(&out).contains("Result: Wrote 7 bytes to notes/plan.txt"));

    std::fs::remove_file(&target).unwrap();
    env.run(&["run", "--script", script.to_str().unwrap(), "write again"]);
    let run_id = env.only_run_id();
    let out = env.run(&["decline", &run_id, "--reason", "not today"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!target.exists(), "a declined call never runs");
    assert!(stdout(&out).contains("Result: not today"), "{}", stdout(&out));
}

const TWO_WRITES_AND_A_QUESTION: &str = r#"{"turns": [
  {"toolCalls": [
    {"name": "write_file", "args": {"path": "a.txt", "content": "one"}},
    {"name": "write_file", "args": {"path": "b.txt", "content": "two"}},
    {"name": "ask_user", "args": {"question": "Anything else?"}}
  ]},
  {"text": "Result: {{toolResults}}"}
]}"#;

#[test]
fn approve_all_writes_every_waiting_file_once_and_leaves_the_question_open() {
    let env = Env::new();
    let script = env.script("two.json", TWO_WRITES_AND_A_QUESTION);
    let out = env.run(&["run", "--script", script.to_str().unwrap(), "write both"]);
    assert_eq!(code(&out), SUSPENDED);
    let run_id = env.only_run_id();

    let out = env.run(&["approve", &run_id, "--all", "--tool-call-id", "x"]);
    assert_eq!(code(&out), 2, "--all names no call: {}", stderr(&out));

    let out = env.run(&["approve", &run_id, "--all"]);
    assert_eq!(code(&out), SUSPENDED, "the question still waits: {}", stderr(&out));
    for (file, content) in [("a.txt", "one"), ("b.txt", "two")] {
        assert_eq!(std::fs::read_to_string(env.dir.path().join(file)).unwrap(), content);
    }
    assert!(stdout(&out).contains("Anything else?"), "{}", stdout(&out));

    // Nothing is left to approve: bad usage, naming the question.
    let out = env.run(&["decline", &run_id, "--all"]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    assert!(
        stderr(&out).contains("no tool call waiting for approval"),
        "{}",
        stderr(&out)
    );

    let out = env.run(&["resume", &run_id, "--answer", "no"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("Result: Wrote 3 bytes to a.txt; Wrote 3 bytes to b.txt; User answered: no"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn decline_all_writes_nothing_and_tells_the_model_the_reason_for_each() {
    let env = Env::new();
    let script = env.script("two.json", TWO_WRITES_AND_A_QUESTION);
    env.run(&["run", "--script", script.to_str().unwrap(), "write both"]);
    let run_id = env.only_run_id();
    let out = env.run(&["decline", &run_id, "--all", "--reason", "freeze"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    assert!(!env.dir.path().join("a.txt").exists() && !env.dir.path().join("b.txt").exists());
    let out = env.run(&["resume", &run_id, "--answer", "no"]);
    assert!(
        stdout(&out).contains("Result: freeze; freeze; User answered: no"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn approve_with_edited_arguments_writes_what_the_person_chose_and_refuses_arguments_that_do_not_fit() {
    let env = Env::new();
    let script = env.script("write.json", WRITE);
    env.run(&["run", "--script", script.to_str().unwrap(), "write"]);
    let run_id = env.only_run_id();

    for (args, says) in [
        ("{not json", "--args is not valid JSON"),
        (r#"{"path": 5, "content": "x"}"#, "do not fit its tool's input"),
    ] {
        let out = env.run(&["approve", &run_id, "--args", args]);
        assert_eq!(code(&out), 2, "{args}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args}: {}", stderr(&out));
    }
    assert!(!env.dir.path().join("notes").exists(), "nothing written while refused");

    let out = env.run(&[
        "approve",
        &run_id,
        "--args",
        r#"{"path": "notes/final.txt", "content": "ship it on Monday"}"#,
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let written = env.dir.path().join("notes/final.txt");
    assert_eq!(std::fs::read_to_string(written).unwrap(), "ship it on Monday");
    assert!(
        !env.dir.path().join("notes/plan.txt").exists(),
        "never the model's path"
    );
    assert!(
        stdout(&out).contains("The user edited the arguments before approving"),
        "{}",
        stdout(&out)
    );
    let shown = env.show(&run_id);
    let edit = &shown["resolutions"][0]["edit"];
    assert_eq!(edit["original"]["path"], "notes/plan.txt", "{shown}");
    assert_eq!(edit["edited"]["path"], "notes/final.txt", "{shown}");
    assert_eq!(shown["resolutions"][0]["via"], "cli");
}

#[test]
fn approve_edit_opens_the_arguments_in_the_editor_and_runs_what_was_saved() {
    let env = Env::new();
    let script = env.script("write.json", WRITE);
    // An editor that changes the content, as a person would.
    let editor = env.script("edit.sh", "sed -i 's/ship it/ship it carefully/' \"$1\"\n");
    env.run(&["run", "--script", script.to_str().unwrap(), "write"]);
    let run_id = env.only_run_id();
    let out = env
        .cmd()
        .args(["approve", &run_id, "--edit"])
        .env_remove("VISUAL")
        .env("EDITOR", format!("sh {}", editor.display()))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let written = env.dir.path().join("notes/plan.txt");
    assert_eq!(std::fs::read_to_string(written).unwrap(), "ship it carefully");

    // Left unchanged (an editor that saves as it is), it is a plain approval.
    std::fs::remove_dir_all(env.dir.path().join("notes")).unwrap();
    env.run(&["run", "--script", script.to_str().unwrap(), "write again"]);
    let run_id = env.only_run_id();
    let out = env
        .cmd()
        .args(["approve", &run_id, "--edit"])
        .env_remove("VISUAL")
        .env("EDITOR", "true")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(env.dir.path().join("notes/plan.txt")).unwrap(),
        "ship it"
    );
    assert!(env.show(&run_id)["resolutions"][0].get("edit").is_none());

    // An editor that fails approves nothing.
    env.run(&["run", "--script", script.to_str().unwrap(), "write a third time"]);
    let run_id = env.only_run_id();
    let out = env
        .cmd()
        .args(["approve", &run_id, "--edit"])
        .env_remove("VISUAL")
        .env("EDITOR", "false")
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("nothing was approved"), "{}", stderr(&out));
    assert_eq!(env.show(&run_id)["status"], "suspended");
}

#[test]
fn the_models_reasoning_goes_to_stderr_and_stdout_holds_only_the_reply() {
    let env = Env::new();
    let script = env.script(
        "think.json",
        r#"{"turns": [{"reasoning": "Americas has the most sign-ups.", "text": "Launch in the Americas."}]}"#,
    );
    let out = env.run(&["run", "--script", script.to_str().unwrap(), "where?"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Launch in the Americas.");
    assert!(
        stderr(&out).contains("  thinking: Americas has the most sign-ups.\n"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn approving_from_another_folder_writes_in_the_folder_the_run_started_in() {
    let env = Env::new();
    let script = env.script("write.json", WRITE);
    let out = env.run(&["run", "--script", script.to_str().unwrap(), "write"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    let run_id = env.only_run_id();
    let elsewhere = tempfile::tempdir().unwrap();
    let mut cmd = env.cmd();
    cmd.current_dir(elsewhere.path()).args(["resume", &run_id]);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"y\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let root = env.dir.path().canonicalize().unwrap();
    assert!(
        stderr(&out).contains(&format!(
            "Allow write_file to write 7 bytes to {}",
            root.join("notes/plan.txt").display()
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(env.dir.path().join("notes/plan.txt")).unwrap(),
        "ship it"
    );
    assert!(
        !elsewhere.path().join("notes").exists(),
        "nothing written where it was approved"
    );
}

#[test]
fn two_resume_processes_racing_on_one_run_one_wins_one_reports_it() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let run_id = env.only_run_id();
    let spawn = |answer: &str| {
        env.cmd()
            .args(["resume", &run_id, "--tool-call-id", "call_1_1", "--answer", answer])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("Zed"), spawn("Ada"));
    let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
    let winners: Vec<&Output> = outs.iter().filter(|o| code(o) == SUSPENDED).collect();
    let losers: Vec<&Output> = outs.iter().filter(|o| code(o) == 1).collect();
    assert_eq!(winners.len(), 1, "{:?}", outs.iter().map(stderr).collect::<Vec<_>>());
    assert_eq!(losers.len(), 1);
    let why = stderr(losers[0]);
    // Overlapping, the loser lost the claim (or found the run running);
    // one after the other, it found its question already answered.
    assert!(
        why.contains("someone else")
            || why.contains("not suspended")
            || why.contains("not waiting on tool call")
            || why.contains("was already answered"),
        "{why}"
    );
    let answers = tool_results(&env.show(&run_id));
    assert_eq!(answers.len(), 1, "the question was answered exactly once: {answers:?}");
}

#[test]
fn chat_on_the_offline_demo_completes_after_three_answers_read_line_by_line() {
    let env = Env::new();
    let out = env.run_with_input(&["chat"], "Plan my project\nZed\n2\n1, 3\n");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("Extras noted (User answered: CI, Docs)"),
        "{}",
        stdout(&out)
    );
    let err = stderr(&out);
    assert!(err.contains("1) Rust - fast and safe"), "{err}");
    let run_id = env.only_run_id();
    let shown = env.show(&run_id);
    assert_eq!(shown["status"], "completed");
    let answers = tool_results(&shown);
    assert_eq!(
        answers,
        [
            "User answered: Zed",
            "User answered: TypeScript",
            "User answered: CI, Docs"
        ]
    );
}

#[test]
fn chat_with_a_model_carries_the_conversation_into_the_next_message() {
    let env = Env::new();
    let script = env.script(
        "talk.json",
        r#"{"turns": [{"text": "Hello, {{input}}."}, {"text": "You said more."}]}"#,
    );
    let out = env.run_with_input(&["chat", "--script", script.to_str().unwrap()], "Ada\nand more\n");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("Hello, Ada."), "{text}");
    // The second message started a run whose conversation holds the first
    // exchange, so the script moved on to its second turn.
    assert!(text.contains("You said more."), "{text}");
    let runs: Value = serde_json::from_slice(&env.run(&["runs", "--json"]).stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 2);
    let latest = env.show(runs[0]["runId"].as_str().unwrap());
    assert_eq!(latest["messages"].as_array().unwrap().len(), 4);
}

#[test]
fn chat_input_ending_at_a_question_leaves_the_run_suspended_with_the_resume_line() {
    let env = Env::new();
    let out = env.run_with_input(&["chat", "Plan my project"], "Zed\n");
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    let run_id = env.only_run_id();
    let err = stderr(&out);
    assert!(err.contains("stays suspended"), "{err}");
    assert!(
        err.contains(&format!("resume {run_id} --tool-call-id call_2_1 --answer Rust")),
        "{err}"
    );
    assert!(
        err.contains(&format!("decline {run_id} --tool-call-id call_2_1")),
        "{err}"
    );
    assert_eq!(env.show(&run_id)["status"], "suspended");
}

#[test]
fn resume_with_no_answer_reads_it_from_piped_stdin() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let run_id = env.only_run_id();
    let out = env.run_with_input(&["resume", &run_id], "Zed\n");
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    assert!(stdout(&out).contains("Which language"));
    let out = env.run(&["resume", &run_id]);
    assert_eq!(code(&out), SUSPENDED, "no input: the question stays open");
    assert!(stderr(&out).contains("no answer given"), "{}", stderr(&out));
}

#[test]
fn a_run_id_no_run_can_have_is_bad_usage_naming_the_rule_on_every_command() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let long = "r".repeat(60_000);
    for id in [" run", "run ", ".", "..", "run\u{7f}", long.as_str()] {
        for command in [
            vec!["resume", id, "--answer", "Zed"],
            vec!["approve", id],
            vec!["decline", id],
            vec!["retry", id],
            vec!["cancel", id],
            vec!["runs", "show", id],
        ] {
            let out = env.run(&command);
            let err = stderr(&out);
            assert_eq!(code(&out), 2, "{:?} {}: {err}", command[0], id.len());
            assert!(
                err.contains("is refused") && err.contains("a run id is 1 to 256 bytes"),
                "{err}"
            );
            assert!(err.len() < 600, "{:?}: {} bytes on stderr", command[0], err.len());
        }
    }
}

#[test]
fn a_decline_reason_over_64_kib_is_bad_usage_and_the_question_stays_open() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let run_id = env.only_run_id();
    let before = env.show(&run_id);
    let reason = "r".repeat(64 * 1024 + 1);
    for args in [
        vec!["decline", run_id.as_str(), "--reason", reason.as_str()],
        vec!["resume", run_id.as_str(), "--decline", "--reason", reason.as_str()],
    ] {
        let out = env.run(&args);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{:?}: {err}", args[0]);
        assert!(err.contains("at most 65536 bytes"), "{err}");
        assert!(err.len() < 600, "the reason is not echoed: {} bytes", err.len());
    }
    assert_eq!(env.show(&run_id), before);
}

#[test]
fn cancelling_a_cancelled_run_says_it_is_already_cancelled() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let run_id = env.only_run_id();
    assert_eq!(code(&env.run(&["cancel", &run_id])), 0);
    let out = env.run(&["cancel", &run_id]);
    assert_eq!(code(&out), 1);
    assert_eq!(
        stderr(&out).trim(),
        format!("askloop: run {run_id} is already cancelled; only a suspended or running run can be cancelled")
    );
}

#[test]
fn help_documents_the_exit_statuses() {
    let env = Env::new();
    let out = env.run(&["--help"]);
    let text = stdout(&out);
    assert!(text.contains("3  the run is suspended"), "{text}");
    assert!(text.contains("2  bad usage"), "{text}");
    assert!(
        text.contains("none at the --db path (only run, chat and serve create one)"),
        "{text}"
    );
    assert!(text.contains("disk full"), "{text}");
}

mod pty {
    //! The interactive prompts, through a real pseudo-terminal.
    use super::*;
    use common::pty::*;

    fn answers(env: &Env) -> Vec<String> {
        tool_results(&env.show(&env.only_run_id()))
    }

    #[test]
    fn approve_edit_opens_a_real_editor_at_the_terminal_and_the_call_runs_with_what_was_saved() {
        let env = Env::new();
        let script = env.script("write.json", WRITE);
        env.run(&["run", "--script", script.to_str().unwrap(), "write"]);
        let run_id = env.only_run_id();
        let mut cmd = env.cmd();
        cmd.args(["approve", &run_id, "--edit"])
            .env("TERM", "xterm-256color")
            .env_remove("VISUAL")
            .env("EDITOR", "vi");
        let mut p = rexpect::session::spawn_command(cmd, Some(20_000)).unwrap();
        p.exp_string("ship it").unwrap();
        press(&mut p, ":%s/ship it/ship it from vi/\r");
        press(&mut p, ":wq\r");
        p.exp_eof().unwrap();
        assert_eq!(exit_code(&mut p), 0);
        let written = env.dir.path().join("notes/plan.txt");
        assert_eq!(std::fs::read_to_string(written).unwrap(), "ship it from vi");
        let shown = env.show(&run_id);
        assert_eq!(shown["resolutions"][0]["edit"]["edited"]["content"], "ship it from vi");
    }

    #[test]
    fn arrow_keys_space_and_enter_answer_all_three_demo_questions() {
        let env = Env::new();
        let mut p = spawn(&env, &["chat", "Plan my project"]);
        p.exp_string("What should the project be called?").unwrap();
        press(&mut p, "Zed\r");
        p.exp_string("Which language should it use?").unwrap();
        p.exp_string("Python").unwrap();
        press(&mut p, DOWN);
        press(&mut p, "\r");
        p.exp_string("Which extras do you want?").unwrap();
        p.exp_string("Docs").unwrap();
        press(&mut p, " ");
        press(&mut p, DOWN);
        press(&mut p, DOWN);
        press(&mut p, " ");
        press(&mut p, "\r");
        p.exp_string("end of the demo").unwrap();
        p.exp_eof().unwrap();
        assert_eq!(exit_code(&mut p), 0);
        assert_eq!(
            answers(&env),
            [
                "User answered: Zed",
                "User answered: TypeScript",
                "User answered: CI, Docs"
            ]
        );
    }

    #[test]
    fn esc_at_a_question_leaves_the_run_suspended_and_prints_the_resume_line() {
        let env = Env::new();
        let mut p = spawn(&env, &["chat", "Plan my project"]);
        p.exp_string("What should the project be called?").unwrap();
        press(&mut p, ESC);
        p.exp_string("stays suspended").unwrap();
        p.exp_string("resume").unwrap();
        p.exp_eof().unwrap();
        assert_eq!(exit_code(&mut p), 3);
        let run_id = env.only_run_id();
        assert_eq!(env.show(&run_id)["status"], "suspended");
    }

    #[test]
    fn resume_on_a_terminal_with_no_answer_shows_the_question_as_a_prompt() {
        let env = Env::new();
        env.run(&["run", "Plan my project"]);
        let run_id = env.only_run_id();
        env.run(&["resume", &run_id, "--answer", "Zed"]);
        let mut p = spawn(&env, &["resume", &run_id]);
        p.exp_string("Which language should it use?").unwrap();
        p.exp_string("Python").unwrap();
        press(&mut p, DOWN);
        press(&mut p, DOWN);
        press(&mut p, "\r");
        p.exp_string("Which extras").unwrap();
        p.exp_eof().unwrap();
        assert_eq!(exit_code(&mut p), 3);
        assert_eq!(answers(&env)[1], "User answered: Python");
    }
}

#[test]
fn askloop_link_names_its_maker_and_refuses_a_recipient_the_configuration_does_not_list() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let run_id = env.only_run_id();
    std::fs::write(
        env.dir.path().join("askloop.toml"),
        "public_url = \"https://askloop.example.com\"\n\n[links]\nrecipients = [\"bob@corp.example\"]\n\n\
         [[links.keys]]\nid = \"k1\"\nsecret_env = \"ASKLOOP_TEST_LINK_KEY\"\n\n\
         [agents.assistant]\nscript = \"planner.json\"\n",
    )
    .unwrap();
    env.script("planner.json", r#"{"turns": [{"text": "Planned."}]}"#);
    let link = |args: &[&str]| {
        env.cmd()
            .env("ASKLOOP_TEST_LINK_KEY", "a-link-signing-key-of-the-cli-test-0123")
            .env("USER", "ops-lead")
            .arg("link")
            .args(args)
            .output()
            .unwrap()
    };

    let refused = link(&[&run_id, "--to", "mallory@evil.example"]);
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("make it out to one of: bob@corp.example"),
        "{}",
        stderr(&refused)
    );

    let made = link(&[&run_id, "--to", "bob@corp.example"]);
    assert_eq!(code(&made), 0, "{}", stderr(&made));
    assert!(
        stdout(&made).starts_with("https://askloop.example.com/links/"),
        "{}",
        stdout(&made)
    );
    assert!(
        stderr(&made).contains("as bob@corp.example, made by ops-lead, once"),
        "{}",
        stderr(&made)
    );
    let made: Value = serde_json::from_slice(&link(&[&run_id, "--to", "bob@corp.example", "--json"]).stdout).unwrap();
    assert_eq!(
        (made["recipient"].as_str(), made["madeBy"].as_str()),
        (Some("bob@corp.example"), Some("ops-lead"))
    );
    let revoked = link(&["--revoke", made["linkId"].as_str().unwrap()]);
    assert!(
        stdout(&revoked).contains("(for bob@corp.example, made by ops-lead, call"),
        "{}",
        stdout(&revoked)
    );
}

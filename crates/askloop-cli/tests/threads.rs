//! Threads from the command line: `askloop chat --thread` continues a
//! conversation from another process (and one started over HTTP), and
//! `askloop threads` lists, shows and deletes them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

mod common;

use common::*;

/// Asks first; then says what it got; then, on the thread's next message,
/// says what the conversation started with (`{{input}}` is the first user
/// message the model receives: the thread's, when it got the context);
/// then asks again, so a question waits on the thread.
const SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?"}}]},
  {"text": "Deploying to {{toolResults}}."},
  {"text": "You first asked: {{input}}"},
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which region?"}}]},
  {"text": "Region {{toolResults}}."}
]}"#;

fn script(env: &Env) -> String {
    env.script("script.json", SCRIPT).display().to_string()
}

fn json_of(out: &std::process::Output) -> Value {
    assert_eq!(code(out), 0, "{}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The thread's messages as `threads show --json` gives them.
fn shown(env: &Env, thread: &str, resource: &str) -> Value {
    json_of(&env.run(&["threads", "show", thread, "--resource", resource, "--json"]))
}

mod pty {
    //! `askloop chat --thread` at a real terminal, in two processes.
    use super::*;
    use common::pty::*;

    #[test]
    fn a_second_chat_process_continues_the_thread_with_its_context() {
        let env = Env::new();
        let script = script(&env);
        let args = ["chat", "--thread", "t1", "--resource", "ana", "--script", &script];

        let mut p = spawn(&env, &args);
        p.exp_string("is new").unwrap();
        p.exp_string("You:").unwrap();
        press(&mut p, "Deploy the app.\r");
        p.exp_string("Which environment?").unwrap();
        press(&mut p, "staging\r");
        p.exp_string("Deploying to User answered: staging.").unwrap();
        p.exp_string("You:").unwrap();
        press(&mut p, ESC);
        p.exp_eof().unwrap();
        assert_eq!(exit_code(&mut p), 0);

        // Another process, as after a restart: it shows where the thread
        // stands and sends only the new message; the model's context holds
        // the thread's first message.
        let mut p = spawn(&env, &args);
        p.exp_string("thread t1 of resource ana: 4 messages").unwrap();
        p.exp_string("user: Deploy the app.").unwrap();
        p.exp_string("answered via cli").unwrap();
        p.exp_string("assistant: Deploying to User answered: staging.").unwrap();
        p.exp_string("You:").unwrap();
        press(&mut p, "And now?\r");
        p.exp_string("You first asked: Deploy the app.").unwrap();
        p.exp_string("You:").unwrap();
        press(&mut p, ESC);
        p.exp_eof().unwrap();
        assert_eq!(exit_code(&mut p), 0);

        let thread = shown(&env, "t1", "ana");
        assert_eq!(thread["thread"]["messageCount"], 6, "{thread}");
        let texts: Vec<&str> = thread["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["text"].as_str().unwrap())
            .collect();
        assert_eq!(
            texts,
            [
                "Deploy the app.",
                "",
                "Deploying to User answered: staging.",
                "And now?",
                "You first asked: Deploy the app."
            ]
        );
        // Each message is its own run's: the second run sent only its message.
        let second_run = thread["messages"][3]["runId"].as_str().unwrap();
        let run = env.show(second_run);
        let user_messages: Vec<&Value> = run["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user")
            .collect();
        assert_eq!(user_messages.len(), 2, "context, then only the new message: {run}");
    }
}

#[test]
fn threads_lists_shows_and_deletes_only_with_cancel_runs_while_a_question_waits() {
    let env = Env::new();
    let script = script(&env);
    // Off a terminal: the answer and the next message are lines; the
    // second question is left open at the end of input.
    let out = env.run_with_input(
        &["chat", "--thread", "t1", "--resource", "ana", "--script", &script],
        "Deploy the app.\nstaging\nAnd now?\nGo on.\n",
    );
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("You first asked: Deploy the app."),
        "{}",
        stdout(&out)
    );

    let list = json_of(&env.run(&["threads", "--resource", "ana", "--json"]));
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["id"], "t1");
    assert_eq!(list[0]["resourceId"], "ana");
    assert_eq!(list[0]["agentId"], "assistant");
    let human = stdout(&env.run(&["threads", "--resource", "ana"]));
    assert!(human.contains("THREAD ID") && human.contains("t1"), "{human}");
    // Another resource sees none.
    assert_eq!(
        json_of(&env.run(&["threads", "--resource", "bob", "--json"])),
        json!([])
    );

    let thread = shown(&env, "t1", "ana");
    let messages = thread["messages"].as_array().unwrap();
    let asked = &messages[1]["toolCalls"][0];
    assert_eq!(asked["state"], "answered", "{thread}");
    assert_eq!(asked["resolution"]["via"], "cli", "{asked}");
    assert_eq!(asked["result"]["content"], "User answered: staging");
    let waiting_call = &messages.last().unwrap()["toolCalls"][0];
    assert_eq!(waiting_call["state"], "waiting", "{thread}");
    assert_eq!(waiting_call["suspendPayload"]["question"], "Which region?");
    let waiting_run = thread["waiting"][0]["runId"].as_str().unwrap().to_owned();
    assert_eq!(thread["waiting"][0]["pending"][0]["toolName"], "ask_user");

    let human = stdout(&env.run(&["threads", "show", "t1", "--resource", "ana"]));
    assert!(human.contains("user: Deploy the app."), "{human}");
    assert!(human.contains("Which region?"), "{human}");
    assert!(human.contains(&format!("resume {waiting_run}")), "{human}");

    // Refused while the question waits, naming the run.
    let out = env.run(&["threads", "delete", "t1", "--resource", "ana"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains(&waiting_run), "{}", stderr(&out));
    assert!(stderr(&out).contains("--cancel-runs"), "{}", stderr(&out));
    assert_eq!(shown(&env, "t1", "ana")["thread"]["id"], "t1");

    let out = env.run(&[
        "threads",
        "delete",
        "t1",
        "--resource",
        "ana",
        "--cancel-runs",
        "--json",
    ]);
    let deleted = json_of(&out);
    assert_eq!(deleted["deleted"], true);
    assert_eq!(deleted["cancelledRuns"], json!([waiting_run]));
    assert_eq!(
        json_of(&env.run(&["threads", "--resource", "ana", "--json"])),
        json!([])
    );
    let out = env.run(&["threads", "show", "t1", "--resource", "ana"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("no thread t1"), "{}", stderr(&out));
}

#[test]
fn a_new_chat_on_the_thread_asks_the_waiting_question_first() {
    let env = Env::new();
    let script = script(&env);
    let args = ["chat", "--thread", "t1", "--resource", "ana", "--script", &script];
    // The question is left open at the end of input.
    let out = env.run_with_input(&args, "Deploy the app.\n");
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    let out = env.run_with_input(&args, "staging\n");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("the thread waits on run"), "{}", stderr(&out));
    assert!(stderr(&out).contains("Which environment?"), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("Deploying to User answered: staging."),
        "{}",
        stdout(&out)
    );
    let thread = shown(&env, "t1", "ana");
    assert_eq!(thread["waiting"], json!([]));
    assert_eq!(thread["messages"][1]["toolCalls"][0]["state"], "answered");
}

#[test]
fn the_resource_comes_from_the_flag_else_askloop_resource_else_the_login_name() {
    let env = Env::new();
    let script = script(&env);
    let chat = |resource_env: Option<&str>, user: &str| {
        let mut cmd = env.cmd();
        cmd.args(["chat", "--thread", "t1", "--script", &script, "Deploy the app."])
            .env("USER", user)
            .env_remove("ASKLOOP_RESOURCE");
        if let Some(r) = resource_env {
            cmd.env("ASKLOOP_RESOURCE", r);
        }
        cmd.stdin(std::process::Stdio::null()).output().unwrap()
    };
    assert_eq!(code(&chat(None, "carol")), SUSPENDED);
    assert_eq!(code(&chat(Some("team"), "carol")), SUSPENDED);
    let listed = |resource: &str| {
        let out = env.run(&["threads", "--json", "--resource", resource]);
        json_of(&out).as_array().unwrap().len()
    };
    assert_eq!((listed("carol"), listed("team")), (1, 1));
    let out = env
        .cmd()
        .args(["threads", "--json"])
        .env("USER", "carol")
        .env_remove("ASKLOOP_RESOURCE")
        .output()
        .unwrap();
    assert_eq!(json_of(&out)[0]["resourceId"], "carol");
    let help = stdout(&env.run(&["threads", "--help"]));
    assert!(help.contains("ASKLOOP_RESOURCE") && help.contains("$USER"), "{help}");
}

#[test]
fn bad_thread_and_resource_ids_are_usage_errors_naming_the_rule() {
    let env = Env::new();
    let script = script(&env);
    for args in [
        vec!["threads", "show", " t1", "--resource", "ana"],
        vec!["threads", "delete", "..", "--resource", "ana"],
        vec!["chat", "--thread", "", "--resource", "ana", "--script", &script],
    ] {
        let out = env.run(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("thread id"), "{args:?}: {}", stderr(&out));
    }
    for args in [
        vec!["threads", "--resource", "a\u{7}b"],
        vec!["chat", "--thread", "t1", "--resource", " ana", "--script", &script],
    ] {
        let out = env.run(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("resource id"), "{args:?}: {}", stderr(&out));
    }
    let out = env.run(&["chat", "--resource", "ana", "--script", &script, "hi"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("--resource goes with --thread"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn a_thread_started_over_http_is_continued_by_chat_and_its_question_answered_there() {
    let env = Env::new();
    let script = script(&env);
    let serving = Serve::in_dir(env.dir.path()).args(["--script", &script]).start();
    let client = reqwest::Client::new();
    let body = client
        .post(serving.url("/api/agents/assistant/stream"))
        .json(&json!({"messages": "Deploy the app.", "memory": {"thread": "h1", "resource": "ana"}}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        chunks(&body).iter().any(|c| c["type"] == "tool-call-suspended"),
        "{body}"
    );

    // The chat asks the question the HTTP run waits on, resumes that run,
    // then sends its own message on the thread.
    let out = env.run_with_input(
        &["chat", "--thread", "h1", "--resource", "ana", "--script", &script],
        "staging\nAnd now?\n",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("user: Deploy the app."), "{}", stderr(&out));
    assert!(stderr(&out).contains("Which environment?"), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("Deploying to User answered: staging."), "{text}");
    assert!(text.contains("You first asked: Deploy the app."), "{text}");

    // The server reads the same thread.
    let page: Value = client
        .get(serving.url("/api/memory/threads/h1/messages?resourceId=ana"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let roles: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "assistant", "user", "assistant"], "{page}");
    let thread = shown(&env, "h1", "ana");
    let call = &thread["messages"][1]["toolCalls"][0];
    assert_eq!(call["state"], "answered", "{call}");
    assert_eq!(call["resolution"]["via"], "cli", "{call}");

    // A question the chat leaves open, superseded by a new message over
    // HTTP: shown as superseded, through http.
    let out = env.run_with_input(
        &["chat", "--thread", "h1", "--resource", "ana", "--script", &script],
        "Go on.\n",
    );
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    client
        .post(serving.url("/api/agents/assistant/stream"))
        .json(&json!({"messages": "Never mind.", "memory": {"thread": "h1", "resource": "ana"}}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let thread = shown(&env, "h1", "ana");
    let asked = thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["toolCalls"].as_array().cloned().unwrap_or_default())
        .find(|c| c["args"]["question"] == "Which region?")
        .unwrap();
    assert_eq!(asked["state"], "superseded", "{thread}");
    assert_eq!(asked["resolution"]["via"], "http", "{asked}");
    let human = stdout(&env.run(&["threads", "show", "h1", "--resource", "ana"]));
    assert!(human.contains("superseded via http"), "{human}");
    // --resource before the subcommand works too.
    assert_eq!(code(&env.run(&["threads", "--resource", "ana", "show", "h1"])), 0);
}

#[test]
fn a_question_answered_elsewhere_while_the_chat_asks_it_is_skipped_and_the_thread_goes_on() {
    use std::io::{Read, Write};
    let env = Env::new();
    let script = script(&env);
    let args = ["chat", "--thread", "t1", "--resource", "ana", "--script", &script];
    let out = env.run_with_input(&args, "Deploy the app.\n");
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    let run_id = env.only_run_id();

    let mut chat = env
        .cmd()
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the chat asks the waiting question...
    let mut stderr_pipe = chat.stderr.take().unwrap();
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("Your answer:") {
        assert_eq!(
            stderr_pipe.read(&mut byte).unwrap(),
            1,
            "{}",
            String::from_utf8_lossy(&seen)
        );
        seen.push(byte[0]);
    }
    // ... answer it from another terminal meanwhile ...
    let out = env.run(&["resume", &run_id, "--answer", "prod"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // ... then at the chat's prompt, too late.
    let mut stdin = chat.stdin.take().unwrap();
    stdin.write_all(b"staging\nAnd now?\n").unwrap();
    drop(stdin);
    let mut rest = String::new();
    stderr_pipe.read_to_string(&mut rest).unwrap();
    let out = chat.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{rest}");
    assert!(rest.contains("the thread goes on without this answer"), "{rest}");
    assert!(
        stdout(&out).contains("You first asked: Deploy the app."),
        "{}",
        stdout(&out)
    );
    let thread = shown(&env, "t1", "ana");
    assert_eq!(
        thread["messages"][1]["toolCalls"][0]["result"]["content"], "User answered: prod",
        "{thread}"
    );
}

/// Three writes, one per message of a thread (turn N is played when the
/// request holds N assistant messages).
const WRITES: &str = r#"{"turns": [
  {"toolCalls": [{"name": "write_file", "args": {"path": "a.txt", "content": "one"}}]},
  {"text": "Result: {{toolResults}}"},
  {"toolCalls": [{"name": "write_file", "args": {"path": "b.txt", "content": "two"}}]},
  {"text": "Again: {{toolResults}}"},
  {"toolCalls": [{"name": "write_file", "args": {"path": "c.txt", "content": "three"}}]},
  {"text": "Third: {{toolResults}}"}
]}"#;

#[test]
fn approve_always_lets_the_threads_next_write_run_until_grants_revoke_ends_it() {
    let env = Env::new();
    let script = env.script("writes.json", WRITES).display().to_string();
    let chat = |input: &str| {
        env.run_with_input(
            &["chat", "--thread", "w1", "--resource", "ana", "--script", &script],
            input,
        )
    };
    let out = chat("write\n");
    assert_eq!(code(&out), SUSPENDED, "the write waits: {}", stderr(&out));
    let runs = json_of(&env.run(&["runs", "--json"]));
    let run_id = runs[0]["runId"].as_str().unwrap().to_owned();

    for (args, says) in [
        (vec!["--always", "forever"], "\"thread\""),
        (vec!["--same-args"], "--always"),
        (vec!["--always", "thread", "--for", "soon"], "soon"),
    ] {
        let mut argv = vec!["approve", run_id.as_str()];
        argv.extend(args.iter().copied());
        let out = env.run(&argv);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    assert!(!env.dir.path().join("a.txt").exists(), "nothing written while refused");

    let out = env.run(&["approve", &run_id, "--always", "thread", "--for", "8h"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(env.dir.path().join("a.txt")).unwrap(), "one");

    let out = chat("again\n");
    assert_eq!(code(&out), 0, "no question this time: {}", stderr(&out));
    assert!(!stderr(&out).contains("Allow write_file"), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(env.dir.path().join("b.txt")).unwrap(), "two");

    let grants = json_of(&env.run(&["grants", "--resource", "ana", "--json"]));
    let grant = &grants[0];
    assert_eq!(
        grant["id"],
        json!(format!(
            "{run_id}:{}",
            runs[0]["pending"][0]["toolCallId"].as_str().unwrap()
        ))
    );
    assert_eq!(
        (&grant["tool"], &grant["scope"], &grant["threadId"]),
        (&json!("write_file"), &json!("thread"), &json!("w1"))
    );
    assert!(grant["expiresAt"].is_string(), "{grant}");
    let listed = env.run(&["grants", "--resource", "ana"]);
    assert!(stdout(&listed).contains("in thread w1"), "{}", stdout(&listed));
    let other = json_of(&env.run(&["grants", "--resource", "bo", "--json"]));
    assert_eq!(other, json!([]), "another resource's grants are not listed");
    let id = grant["id"].as_str().unwrap();
    let out = env.run(&["grants", "revoke", id, "--resource", "bo"]);
    assert_eq!(code(&out), 1, "another resource cannot revoke it: {}", stderr(&out));

    let out = env.run(&["grants", "revoke", id, "--resource", "ana"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("Revoked: write_file"), "{}", stderr(&out));
    let out = chat("third\n");
    assert_eq!(
        code(&out),
        SUSPENDED,
        "revoked: the write waits again: {}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("Allow write_file"), "{}", stderr(&out));
    assert!(!env.dir.path().join("c.txt").exists());
    let all = json_of(&env.run(&["grants", "--resource", "ana", "--all", "--json"]));
    assert!(all[0]["revokedAt"].is_string(), "{all}");

    // The second run's record: approved through the grant.
    let thread = shown(&env, "w1", "ana");
    let call = &thread["messages"][4]["toolCalls"][0];
    assert_eq!(call["args"]["path"], "b.txt", "{thread}");
    assert_eq!(call["resolution"]["via"], "grant", "{thread}");
    assert_eq!(call["resolution"]["grant"]["id"], json!(id), "{thread}");
}

#[test]
fn a_in_the_chat_lets_the_tool_run_without_asking_for_the_rest_of_the_thread() {
    let env = Env::new();
    let script = env.script("writes.json", WRITES).display().to_string();
    let out = env.run_with_input(
        &["chat", "--thread", "w2", "--resource", "ana", "--script", &script],
        "write\nmaybe\na\nagain\n",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let said = stderr(&out);
    assert_eq!(
        said.matches("Allow write_file").count(),
        2,
        "asked once, re-asked after `maybe`: {said}"
    );
    assert!(
        said.contains("[y/n/a]") && said.contains("or a to allow it without asking"),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(env.dir.path().join("b.txt")).unwrap(),
        "two",
        "the second write ran unasked"
    );
    let grants = json_of(&env.run(&["grants", "--resource", "ana", "--json"]));
    assert_eq!(
        (&grants[0]["scope"], &grants[0]["threadId"]),
        (&json!("thread"), &json!("w2")),
        "{grants}"
    );
}

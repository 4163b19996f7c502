//! MCP servers that hang, flood or lie, and MCP clients that flood, never
//! take `askloop serve` down. Each case runs the real server with agents
//! whose MCP server is `tests/mcp/hostile_server.mjs` (plain Node, no
//! packages), misbehaving as its `HOSTILE` modes and tools say, and short
//! deadlines in the test's `askloop.toml`:
//!
//! - start-up: a server that never answers `initialize` or `tools/list`,
//!   or lists 20,000 tools (over 16 MiB), and the server still comes up,
//!   each named in a warning; one that answers later gets its tools added;
//! - calls: one that never answers ends as a tool error at its deadline;
//!   answers the transport cannot carry (over 16 MiB, nested too deep, a
//!   question nested too deep) fail the call at once, saying why; a call
//!   may ask only so many questions, and hold only a few at once;
//! - processes: cancelling runs whose calls hang ends their streams and
//!   stops each server (`notifications/cancelled`, then SIGTERM, then
//!   SIGKILL for one that ignores both), and no server outlives `askloop
//!   serve`, counted before and after;
//! - `/mcp` sessions: a flood of sessions is refused at its caps with a
//!   JSON-RPC error naming the limit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;

use common::{Serve, Serving, chunks, skipped_for_lack_of};

/// The hostile server's script, or why it cannot run here.
fn hostile() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp/hostile_server.mjs")
        .canonicalize()
        .unwrap();
    let node = std::process::Command::new("node").arg("--version").output();
    let missing = match node {
        Ok(out) if out.status.success() => None,
        _ => Some("node is not installed".to_owned()),
    };
    (!skipped_for_lack_of("the hostile MCP server", missing)).then_some(script)
}

/// An agent `agent` whose model calls `tool` once (with `{"message":
/// "hi"}`) and then says "Got: " and the tool's result, with the hostile
/// server in `modes` as its MCP server `hostile`, logging to `dir/log`;
/// `keys`: more keys of the server's table.
fn agent(dir: &Path, script: &Path, agent: &str, tool: &str, modes: &str, keys: &str) -> String {
    let turns = json!({"turns": [
        {"toolCalls": [{"name": tool, "args": {"message": "hi"}}]},
        {"text": "Got: {{toolResults}}"}
    ]});
    std::fs::write(dir.join(format!("{agent}.json")), turns.to_string()).unwrap();
    format!(
        "[agents.{agent}]\nscript = \"{agent}.json\"\n\n[[agents.{agent}.mcp]]\nname = \"hostile\"\ncommand = \"node\"\n\
         args = [{script:?}]\nenv = {{ HOSTILE = {modes:?}, HOSTILE_LOG = {log:?}, HOSTILE_DIR = {dir:?} }}\n{keys}\n",
        script = script.display().to_string(),
        log = dir.join("log").display().to_string(),
        dir = dir.display().to_string(),
    )
}

/// `askloop serve` in `dir` on the configuration `text`.
fn serve(dir: &Path, text: &str) -> Serving {
    std::fs::write(dir.join("askloop.toml"), text).unwrap();
    Serve::in_dir(dir).config("askloop.toml").start()
}

/// Kills, when dropped, every hostile server that logged its start in
/// `dir` and still runs: a test that fails ends its `askloop serve` with
/// SIGKILL, which leaves askloop no time to stop the servers that ignore
/// their input closing.
struct Reap(PathBuf);

impl Drop for Reap {
    fn drop(&mut self) {
        for event in events(&self.0).iter().filter(|e| e["event"] == "start") {
            if let Some(pid) = event["pid"].as_u64().filter(|&pid| alive(pid))
                && let Ok(pid) = i32::try_from(pid)
            {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

/// What the hostile servers logged, one event a line.
fn events(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Waits (a hang guard of a minute, not a timing assertion) until the
/// hostile servers' log has what `found` looks for, and returns it.
async fn wait_for_events<T>(dir: &Path, what: &str, found: impl Fn(&[Value]) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(found) = found(&events(dir)) {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "the hostile servers never logged {what}: {:?}",
            events(dir)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The pids of the hostile servers that read a message of `method`.
fn pids_that_read(events: &[Value], method: &str) -> BTreeSet<u64> {
    events
        .iter()
        .filter(|e| e["event"] == "read" && e["method"] == method)
        .filter_map(|e| e["pid"].as_u64())
        .collect()
}

/// The pids of the hostile servers that heard `notifications/cancelled`.
fn cancels_heard(events: &[Value]) -> BTreeSet<u64> {
    pids_that_read(events, "notifications/cancelled")
}

/// Whether process `pid` still runs (a zombie no longer does).
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

/// Waits (a hang guard, not a timing assertion) until none of `pids` runs.
async fn wait_gone(pids: &BTreeSet<u64>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while pids.iter().any(|&pid| alive(pid)) {
        let left: Vec<u64> = pids.iter().copied().filter(|&pid| alive(pid)).collect();
        assert!(Instant::now() < deadline, "{what}: still running: {left:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The direct children of process `parent`.
fn children_of(parent: u32) -> BTreeSet<u64> {
    let mut children = BTreeSet::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u64>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1).map(str::to_owned));
        if ppid.as_deref() == Some(parent.to_string().as_str()) && alive(pid) {
            children.insert(pid);
        }
    }
    children
}

/// Streams "Go." to `agent` and returns the whole SSE body's chunks.
async fn stream(client: &reqwest::Client, serving: &Serving, agent: &str, body: Value) -> Vec<Value> {
    let response = client
        .post(serving.url(&format!("/api/agents/{agent}/stream")))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    chunks(&response.text().await.unwrap())
}

/// The text the model said, from a stream's chunks.
fn said(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["payload"]["text"].as_str().unwrap_or_default())
        .collect()
}

fn go() -> Value {
    json!({"messages": "Go."})
}

#[tokio::test]
async fn askloop_serve_comes_up_within_the_deadlines_of_servers_that_hang_or_list_too_much_and_names_each() {
    let Some(script) = hostile() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _reap = Reap(d.to_path_buf());
    let text = [
        agent(
            d,
            &script,
            "silent",
            "echo",
            "hang-initialize",
            "initialize_timeout = \"1s\"\nstop_grace = \"200ms\"",
        ),
        agent(
            d,
            &script,
            "mute",
            "echo",
            "hang-list",
            "list_timeout = \"1s\"\nstop_grace = \"200ms\"",
        ),
        agent(d, &script, "verbose", "echo", "huge-list", "stop_grace = \"200ms\""),
    ]
    .concat();
    // On a server that waited for them, this never printed its address.
    let serving = serve(d, &text);
    let banner = serving.banner.join("\n");
    for (key, problem) in [
        (
            "agents.silent.mcp[0]",
            "the MCP server hostile did not answer initialize within 1 s",
        ),
        (
            "agents.mute.mcp[0]",
            "the MCP server hostile did not answer tools/list within 1 s",
        ),
        (
            "agents.verbose.mcp[0]",
            "the MCP server hostile sent what askloop cannot read during tools/list",
        ),
    ] {
        let warning = serving
            .banner
            .iter()
            .find(|line| line.contains(key))
            .unwrap_or_else(|| panic!("no warning names {key}: {banner}"));
        assert!(
            warning.contains("warning") && warning.contains(problem) && warning.contains("starts without the tools"),
            "{warning}"
        );
    }
    assert!(
        banner.contains("16 MiB"),
        "the listing over the line limit is named so: {banner}"
    );
    let health = reqwest::get(serving.url("/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn a_server_that_answers_after_start_up_has_its_tools_added_in_the_background() {
    let Some(script) = hostile() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _reap = Reap(d.to_path_buf());
    let text = agent(
        d,
        &script,
        "late",
        "echo",
        "hang-initialize-once",
        "initialize_timeout = \"1s\"",
    );
    let serving = serve(d, &text);
    assert!(
        serving
            .banner
            .iter()
            .any(|l| l.contains("agents.late.mcp[0]") && l.contains("initialize")),
        "{:?}",
        serving.banner
    );
    let line = serving.wait_for_line("has its tools now");
    assert!(line.contains("agents.late.mcp[0]") && line.contains("echo"), "{line}");
    let client = reqwest::Client::new();
    let agents: Value = client
        .get(serving.url("/api/agents"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(agents["late"]["tools"]["echo"].is_object(), "{agents}");
    let chunks = stream(&client, &serving, "late", go()).await;
    assert_eq!(said(&chunks), "Got: echo: hi", "{chunks:?}");
}

#[tokio::test]
async fn a_call_that_misses_its_deadline_ends_as_a_tool_error_and_its_server_hears_it_cancelled_and_is_stopped() {
    let Some(script) = hostile() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _reap = Reap(d.to_path_buf());
    // It ignores its input closing and SIGTERM: only SIGKILL ends it.
    let keys = "call_timeout = \"1s\"\nstop_grace = \"200ms\"";
    let serving = serve(
        d,
        &agent(d, &script, "stuck", "hang", "ignore-stdin,ignore-sigterm", keys),
    );
    let client = reqwest::Client::new();
    let chunks = stream(&client, &serving, "stuck", go()).await;
    assert!(chunks.iter().any(|c| c["type"] == "finish"), "the run ends: {chunks:?}");
    let error = chunks.iter().find(|c| c["type"] == "tool-error").expect("a tool error");
    assert_eq!(error["payload"]["toolName"], "hang");
    assert_eq!(
        said(&chunks),
        "Got: the MCP server hostile did not answer the call of hang within 1 s",
        "the model is told why"
    );
    let events = events(d);
    let called = pids_that_read(&events, "tools/call");
    assert_eq!(called.len(), 1, "{events:?}");
    let cancelled = events
        .iter()
        .find(|e| e["method"] == "notifications/cancelled")
        .unwrap_or_else(|| panic!("the server heard no cancel: {events:?}"));
    assert!(
        cancelled["params"]["reason"].as_str().unwrap().contains("within 1 s"),
        "{cancelled}"
    );
    wait_gone(&called, "the server of the call that missed its deadline").await;
}

#[tokio::test]
async fn answers_the_transport_cannot_carry_fail_the_call_at_once_saying_why_and_a_question_too_deep_is_answered_with_an_error()
 {
    let Some(script) = hostile() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _reap = Reap(d.to_path_buf());
    // A deadline far away: the calls end on what the server sent.
    let keys = "call_timeout = \"10m\"";
    let text = [
        agent(d, &script, "huge", "huge", "", keys),
        agent(d, &script, "deep", "deep", "", keys),
        agent(d, &script, "deep_ask", "deep_ask", "", keys),
    ]
    .concat();
    let serving = serve(d, &text);
    let client = reqwest::Client::new();
    for (agent, why) in [
        ("huge", "longer than the 16777216 bytes (16 MiB) a message may have"),
        ("deep", "nests deeper than the 128 levels"),
        (
            "deep_ask",
            "the params of elicitation/create are not what it takes: nests deeper than the 128 levels",
        ),
    ] {
        let chunks = stream(&client, &serving, agent, go()).await;
        assert!(chunks.iter().any(|c| c["type"] == "finish"), "{agent}: {chunks:?}");
        let text = said(&chunks);
        assert!(
            text.starts_with(&format!(
                "Got: the MCP server hostile sent what askloop cannot read during {agent}, so its session was ended"
            )) && text.contains(why),
            "{agent}: {text}"
        );
    }
    let events = events(d);
    let refused = events
        .iter()
        .find(|e| e["event"] == "reply" && e["error"]["code"] == -32602)
        .unwrap_or_else(|| panic!("the deep question got no error back: {events:?}"));
    assert!(
        refused["error"]["message"].as_str().unwrap().contains("128 levels"),
        "{refused}"
    );
}

/// Answers the question run `run_id` waits on with "yes".
async fn answer(client: &reqwest::Client, serving: &Serving, agent: &str, run_id: &str) -> Vec<Value> {
    let response = client
        .post(serving.url(&format!("/api/agents/{agent}/resume-stream")))
        .json(&json!({"runId": run_id, "resumeData": {"action": "accept", "content": {"answer": "yes"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    chunks(&response.text().await.unwrap())
}

fn suspended(chunks: &[Value]) -> Option<&Value> {
    chunks.iter().find(|c| c["type"] == "tool-call-suspended")
}

#[tokio::test]
async fn a_call_may_ask_only_max_questions_and_hold_only_four_at_once() {
    let Some(script) = hostile() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _reap = Reap(d.to_path_buf());
    let text = [
        agent(d, &script, "asker", "ask_forever", "", "max_questions = 2"),
        agent(d, &script, "burst", "ask_burst", "", ""),
    ]
    .concat();
    let serving = serve(d, &text);
    let client = reqwest::Client::new();

    let first = stream(&client, &serving, "asker", go()).await;
    let asked = suspended(&first).unwrap_or_else(|| panic!("{first:?}"));
    assert_eq!(asked["payload"]["suspendPayload"]["message"], "Question 1?");
    let run_id = asked["runId"].as_str().unwrap();
    let second = answer(&client, &serving, "asker", run_id).await;
    let asked = suspended(&second).unwrap_or_else(|| panic!("{second:?}"));
    assert_eq!(asked["payload"]["suspendPayload"]["message"], "Question 2?");
    let third = answer(&client, &serving, "asker", run_id).await;
    assert!(
        suspended(&third).is_none(),
        "the third question is not asked: {third:?}"
    );
    assert_eq!(
        said(&third),
        "Got: the MCP server hostile asked more than 2 questions in one call of ask_forever, so askloop ended the \
         call (max_questions in its [[agents.<id>.mcp]] table)"
    );

    // 30 questions at once: one asked, four held, the rest refused.
    let burst = stream(&client, &serving, "burst", go()).await;
    let asked = suspended(&burst).unwrap_or_else(|| panic!("{burst:?}"));
    assert_eq!(asked["payload"]["suspendPayload"]["message"], "Burst question 1?");
    wait_for_events(d, "the refused questions", |events| {
        let refused: Vec<&Value> = events
            .iter()
            .filter(|e| e["event"] == "reply")
            .filter(|e| {
                e["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("at most 4 questions of one call at a time"))
            })
            .collect();
        (refused.len() >= 30 - 1 - askloop_mcp::MAX_QUEUED_QUESTIONS).then_some(())
    })
    .await;
    // The asker's server heard why its call ended too.
    let messages: BTreeSet<String> = events(d)
        .iter()
        .filter(|e| e["event"] == "reply" && e["error"].is_object())
        .map(|e| e["error"]["message"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(
        messages.iter().any(|m| m.contains("asked more than 2 questions")),
        "{messages:?}"
    );
}

#[tokio::test]
async fn cancelling_runs_whose_calls_hang_ends_their_streams_and_stops_each_server() {
    let Some(script) = hostile() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _reap = Reap(d.to_path_buf());
    let keys = "call_timeout = \"10m\"\nstop_grace = \"200ms\"";
    let serving = serve(
        d,
        &agent(d, &script, "stuck", "hang", "ignore-stdin,ignore-sigterm", keys),
    );
    let client = reqwest::Client::new();
    let streams: Vec<_> = (0..6)
        .map(|_| {
            let (client, url) = (client.clone(), serving.url("/api/agents/stuck/stream"));
            tokio::spawn(async move { client.post(url).json(&go()).send().await.unwrap().text().await.unwrap() })
        })
        .collect();
    let calling = wait_for_events(d, "six calls", |events| {
        let pids = pids_that_read(events, "tools/call");
        (pids.len() == 6).then_some(pids)
    })
    .await;
    let before: BTreeSet<u64> = children_of(serving.child.id());
    assert!(
        calling.is_subset(&before),
        "askloop serve runs each: {calling:?} of {before:?}"
    );

    let runs: Value = client
        .get(serving.url("/api/runs?status=running"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<String> = runs["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("{runs}"))
        .iter()
        .map(|run| run["runId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 6, "{runs}");
    for id in &ids {
        let cancelled = client
            .post(serving.url(&format!("/api/runs/{id}/cancel")))
            .send()
            .await
            .unwrap();
        assert_eq!(cancelled.status(), 200);
    }
    for stream in streams {
        let body = stream.await.unwrap();
        let types: Vec<Value> = chunks(&body).into_iter().map(|c| c["type"].clone()).collect();
        assert_eq!(
            types.last(),
            Some(&json!("abort")),
            "the stream ends cancelled: {types:?}"
        );
    }
    // Each server hears its call cancelled (soon after the stream ended).
    wait_for_events(d, "a cancel for each call", |events| {
        (cancels_heard(events) == calling).then_some(())
    })
    .await;
    wait_gone(&calling, "the servers of the cancelled calls").await;
    let after = children_of(serving.child.id());
    assert!(after.is_disjoint(&calling), "{after:?}");
}

#[tokio::test]
async fn cancelling_or_superseding_a_run_that_waits_on_a_servers_question_stops_that_server() {
    let Some(script) = hostile() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _reap = Reap(d.to_path_buf());
    let serving = serve(
        d,
        &agent(d, &script, "asker", "ask_forever", "", "stop_grace = \"200ms\""),
    );
    let client = reqwest::Client::new();

    let cancelled = stream(&client, &serving, "asker", go()).await;
    let run_id = suspended(&cancelled).unwrap()["runId"].as_str().unwrap().to_owned();
    let on_thread = json!({"messages": "Go.", "memory": {"thread": "t1", "resource": "page"}});
    let superseded = stream(&client, &serving, "asker", on_thread.clone()).await;
    assert!(suspended(&superseded).is_some(), "{superseded:?}");
    let asking = wait_for_events(d, "two questions", |events| {
        let pids: BTreeSet<u64> = events
            .iter()
            .filter(|e| e["event"] == "read" && e["method"] == "tools/call")
            .filter_map(|e| e["pid"].as_u64())
            .collect();
        (pids.len() == 2).then_some(pids)
    })
    .await;
    assert!(asking.iter().all(|&pid| alive(pid)), "each held open for the answer");

    let response = client
        .post(serving.url(&format!("/api/runs/{run_id}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // A new message on the thread supersedes the run that waits there.
    let next = stream(&client, &serving, "asker", on_thread).await;
    assert!(
        said(&next).contains("the user sent a new message instead of answering"),
        "{next:?}"
    );
    wait_for_events(d, "a cancel for each question's call", |events| {
        (cancels_heard(events) == asking).then_some(())
    })
    .await;
    wait_gone(&asking, "the servers of the cancelled and the superseded run").await;
}

#[tokio::test]
async fn no_mcp_server_outlives_askloop_serve_even_one_that_ignores_its_input_closing_and_sigterm() {
    let Some(script) = hostile() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _reap = Reap(d.to_path_buf());
    let modes = "ignore-stdin,ignore-sigterm";
    let text = [
        agent(d, &script, "idle", "echo", modes, "stop_grace = \"200ms\""),
        agent(d, &script, "asker", "ask_forever", modes, "stop_grace = \"200ms\""),
    ]
    .concat();
    let mut serving = serve(d, &text);
    // One held for a question's answer beside the idle ones that listed
    // the tools.
    let asked = stream(&reqwest::Client::new(), &serving, "asker", go()).await;
    assert!(suspended(&asked).is_some(), "{asked:?}");
    let started: BTreeSet<u64> = events(d)
        .iter()
        .filter(|e| e["event"] == "start")
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    let before = children_of(serving.child.id());
    assert_eq!(before, started, "askloop serve's children are the servers it started");
    // The idle agent's, which listed its tools and is kept for its first
    // call; the asker's, held open for its question's answer.
    assert_eq!(before.len(), 2, "{before:?}");

    serving.terminate();
    let status = serving
        .exit_within(Duration::from_secs(60))
        .expect("askloop serve stopped");
    assert!(status.success(), "{status}");
    wait_gone(&before, "MCP servers after askloop serve stopped").await;
    assert!(
        events(d).iter().any(|e| e["event"] == "sigterm-ignored"),
        "each had SIGTERM before SIGKILL"
    );
}

/// Asks `/mcp` for a session as `token`: the status, and the session id or
/// the JSON-RPC error.
async fn open_session(client: &reqwest::Client, serving: &Serving, token: &str) -> (u16, Result<String, Value>) {
    let response = client
        .post(serving.url("/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "flood", "version": "1"}}}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let session = response
        .headers()
        .get("mcp-session-id")
        .map(|id| id.to_str().unwrap().to_owned());
    match session {
        Some(id) => (status, Ok(id)),
        None => (status, Err(response.json().await.unwrap())),
    }
}

#[tokio::test]
async fn a_flood_of_mcp_sessions_is_refused_at_each_tokens_cap_and_the_endpoints_naming_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _reap = Reap(d.to_path_buf());
    std::fs::write(d.join("plain.json"), r#"{"turns": [{"text": "hi"}]}"#).unwrap();
    let text = "[mcp]\nmax_sessions = 3\nmax_sessions_per_token = 2\nsession_idle = \"1s\"\n\n\
                [[tokens]]\nname = \"ana\"\ntoken_env = \"ANA_TOKEN\"\n\n\
                [[tokens]]\nname = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n\
                [agents.plain]\nscript = \"plain.json\"\n";
    std::fs::write(d.join("askloop.toml"), text).unwrap();
    let (ana, bob) = ("ana-secret-0123456789abcdef", "bob-secret-0123456789abcdef");
    let serving = Serve::in_dir(d)
        .env("ANA_TOKEN", ana)
        .env("BOB_TOKEN", bob)
        .config("askloop.toml")
        .start();
    let client = reqwest::Client::new();

    let mut anas = Vec::new();
    for _ in 0..2 {
        let (status, session) = open_session(&client, &serving, ana).await;
        assert_eq!(status, 200, "{session:?}");
        anas.push(session.unwrap());
    }
    let (status, refused) = open_session(&client, &serving, ana).await;
    let refused = refused.unwrap_err();
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["jsonrpc"], "2.0");
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    assert_eq!(
        refused["error"]["data"],
        json!({"limit": "max_sessions_per_token", "max": 2})
    );
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"ana\"") && message.contains("max_sessions_per_token = 2"),
        "{message}"
    );

    // Bob has his own cap, but the endpoint's is shared.
    let (status, _) = open_session(&client, &serving, bob).await;
    assert_eq!(status, 200);
    let (status, refused) = open_session(&client, &serving, bob).await;
    let refused = refused.unwrap_err();
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["error"]["data"], json!({"limit": "max_sessions", "max": 3}));

    // A session ended frees its place at once.
    let ended = client
        .delete(serving.url("/mcp"))
        .bearer_auth(ana)
        .header("mcp-session-id", &anas[0])
        .send()
        .await
        .unwrap();
    assert!(ended.status().is_success(), "{}", ended.status());
    let (status, _) = open_session(&client, &serving, bob).await;
    assert_eq!(status, 200, "the place ana's ended session held");

    // And every session idles out: ana may open her two again.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, _) = open_session(&client, &serving, ana).await;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the sessions never idled out");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

//! `askloop.toml`: a good file becomes agents that behave as configured; a
//! bad one is one error naming the file, the key and the problem.
#![allow(clippy::unwrap_used)]

// The server's test helpers (a server on a free port, a client, SSE
// reading): configured agents are proven by serving them.
#[path = "../../askloop-server/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use askloop::{Model, RunStore};
use askloop_config::{ApprovalNames, ConfigError, ModelSource, ServerConfig, ToolKind};
use askloop_server::RequestOverride;
use common::*;
use serde_json::{Value, json};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn load_err(text: &str) -> (PathBuf, ConfigError) {
    let dir = tempfile::tempdir().unwrap().keep();
    let path = write(&dir, "askloop.toml", text);
    (path.clone(), ServerConfig::load(&path).unwrap_err())
}

fn no_default() -> Result<Arc<dyn Model>, Box<dyn std::error::Error + Send + Sync>> {
    Err("no default model in this test".into())
}

#[test]
fn a_full_agent_table_resolves_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "askloop.toml",
        r#"
[agents.deployer]
name = "Deployer"
instructions = "Ask before deploying."
script = "deploy.json"
tools = ["ask_user", "write_file"]
require_approval = ["write_file"]
allow_free_text = true
max_steps = 5
last_messages = 40
write_dir = "out"

[agents.helper]
model = "openai/gpt-4o-mini"
"#,
    );
    let config = ServerConfig::load(&path).unwrap();
    assert_eq!(config.path.as_deref(), Some(path.as_path()));
    let [deployer, helper] = &config.agents[..] else {
        panic!("{config:?}")
    };
    assert_eq!(deployer.id, "deployer");
    assert_eq!(deployer.name, "Deployer");
    assert_eq!(deployer.instructions, "Ask before deploying.");
    let base = std::path::absolute(dir.path()).unwrap();
    assert_eq!(deployer.model, ModelSource::Script(base.join("deploy.json")));
    assert_eq!(deployer.tools, [ToolKind::AskUser, ToolKind::WriteFile]);
    assert_eq!(deployer.require_approval, ["write_file"]);
    assert!(deployer.allow_free_text);
    assert_eq!(deployer.max_steps, Some(5));
    assert_eq!((deployer.last_messages, helper.last_messages), (Some(40), None));
    assert_eq!(deployer.write_dir, base.join("out"));
    assert_eq!(helper.name, "helper");
    assert_eq!(helper.model, ModelSource::Spec("openai/gpt-4o-mini".into()));
    assert_eq!(helper.tools, [ToolKind::AskUser]);
    assert!(!helper.allow_free_text);
}

#[test]
fn without_a_file_there_is_one_assistant_with_ask_user_on_the_default_model() {
    let config = ServerConfig::default_agent();
    assert_eq!(config.path, None);
    let [agent] = &config.agents[..] else { panic!() };
    assert_eq!(agent.id, "assistant");
    assert_eq!(agent.tools, [ToolKind::AskUser]);
    assert_eq!(agent.model, ModelSource::Default);
}

#[test]
fn bad_files_are_one_error_naming_the_file_the_key_and_the_problem() {
    let cases: Vec<(&str, &str, &str)> = vec![
        (
            "[agents.a]\nmodle = \"openai/gpt-4o-mini\"\n",
            "agents.a.modle",
            "unknown field `modle`",
        ),
        (
            "[agents.a]\ntools = [\"ask_user\", \"shell\"]\n",
            "agents.a.tools[1]",
            "unknown tool \"shell\"; known tools: ask_user, write_file",
        ),
        ("[agents.a]\ntools = \"ask_user\"\n", "agents.a.tools", "invalid type"),
        (
            "[agents.a]\nmodel = \"openai/x\"\nscript = \"s.json\"\n",
            "agents.a.script",
            "either model or script",
        ),
        (
            "[agents.a]\nrequire_approval = [\"write_file\"]\n",
            "agents.a.require_approval[0]",
            "not in this agent's tools",
        ),
        (
            "[agents.a]\nrequire_approval = [\"ask_user\", \"ask_approval\"]\n",
            "agents.a.require_approval[1]",
            "agent a has no tool \"ask_approval\"; its tools: ask_user. require_approval names the agent's built-in tools and the tools of its MCP servers ([[agents.a.mcp]])",
        ),
        (
            "[agents.a]\nrequire_approval = [\"ask_user\", \"ask_user\"]\n",
            "agents.a.require_approval[1]",
            "listed twice",
        ),
        ("[agents.a]\nmax_steps = 0\n", "agents.a.max_steps", "at least 1"),
        (
            "[agents.a]\nlast_messages = 20000\n",
            "agents.a.last_messages",
            "from 0 to 10000",
        ),
        (
            "[limits]\nmax_options = 0\n[agents.a]\n",
            "limits.max_options",
            "0 would refuse every question",
        ),
        (
            "[limits]\nmax_option = 3\n[agents.a]\n",
            "limits.max_option",
            "unknown field `max_option`",
        ),
        ("[agents.a]\nmax_steps = -3\n", "agents.a.max_steps", "invalid value"),
        (
            "[agents.a]\nallow_free_text = \"yes\"\n",
            "agents.a.allow_free_text",
            "invalid type",
        ),
        ("[agents.\"a b\"]\n", "agents.a b", "letters, digits"),
        ("[agent.a]\n", "agent", "unknown field `agent`"),
        ("", "agents", "no agents"),
        ("[agents.a\nname = 1\n", "", "unclosed table"),
        (
            "[agents.a]\ntools = [\"ask_user\", \"ask_user\"]\n",
            "agents.a.tools[1]",
            "listed twice",
        ),
    ];
    for (text, key, problem) in cases {
        let (path, err) = load_err(text);
        assert_eq!(err.file, path, "{text}");
        assert_eq!(err.key, key, "{text}: {err}");
        assert!(err.problem.contains(problem), "{text}: {err}");
        let message = err.to_string();
        assert!(message.starts_with(&path.display().to_string()), "{message}");
        if !key.is_empty() {
            assert!(message.contains(key), "{message}");
        }
    }
}

#[test]
fn a_syntax_error_names_its_line() {
    let (_, err) = load_err("[agents.a]\nname = \"x\"\ninstructions = \n");
    assert_eq!(err.line, Some(3), "{err}");
    assert!(err.to_string().contains("(line 3)"), "{err}");
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let err = ServerConfig::load(Path::new("/nonexistent/askloop.toml")).unwrap_err();
    assert!(err.to_string().starts_with("/nonexistent/askloop.toml: "), "{err}");
    assert!(err.problem.contains("cannot read"), "{err}");
}

#[test]
fn models_that_cannot_be_made_are_errors_naming_the_agent_key() {
    let store = memory_store();
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "askloop.toml", "[agents.a]\nscript = \"missing.json\"\n");
    let err = ServerConfig::load(&path)
        .unwrap()
        .build_agents(&store, &no_default)
        .unwrap_err();
    assert_eq!(err.key, "agents.a.script");
    assert_eq!(err.file, path);

    let path = write(dir.path(), "askloop.toml", "[agents.b]\nmodel = \"nosuchprovider/x\"\n");
    let err = ServerConfig::load(&path)
        .unwrap()
        .build_agents(&store, &no_default)
        .unwrap_err();
    assert_eq!(err.key, "agents.b.model");

    let path = write(dir.path(), "askloop.toml", "[agents.c]\n");
    let err = ServerConfig::load(&path)
        .unwrap()
        .build_agents(&store, &no_default)
        .unwrap_err();
    assert_eq!(err.key, "agents.c.model");
    assert!(err.problem.contains("no default model in this test"));
}

#[tokio::test]
async fn configured_agents_serve_with_their_tools_approvals_and_free_text_setting() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "ask.json",
        r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?", "options": [{"label": "staging"}, {"label": "production"}]}}]},
  {"toolCalls": [{"name": "write_file", "args": {"path": "notes/env.txt", "content": "deploy notes"}}]},
  {"text": "Done: {{toolResults}}"}
]}"#,
    );
    let path = write(
        dir.path(),
        "askloop.toml",
        r#"
[agents.free]
name = "Free"
script = "ask.json"
tools = ["ask_user", "write_file"]
allow_free_text = true
write_dir = "files"

[agents.strict]
script = "ask.json"
"#,
    );
    let store: Arc<dyn RunStore> = memory_store();
    let agents = ServerConfig::load(&path)
        .unwrap()
        .build_agents(&store, &no_default)
        .unwrap();
    let server = TestServer::start(agents, store).await;

    let listed: Value = server.get("/api/agents").await.json().await.unwrap();
    assert_eq!(listed["free"]["name"], "Free");
    assert_eq!(listed["free"]["tools"]["write_file"]["requireApproval"], true);
    assert_eq!(keys(&listed["strict"]["tools"]), ["ask_user"]);

    // strict: an answer outside the options is refused.
    let started = server
        .post_sse("/api/agents/strict/stream", json!({"messages": "go"}))
        .await;
    let run_id = started.chunks[0]["runId"].as_str().unwrap().to_owned();
    let refused = server
        .post(
            "/api/agents/strict/resume-stream",
            json!({"runId": run_id, "resumeData": "qa"}),
        )
        .await;
    assert_eq!(refused.status(), 422);

    // free: accepted, then write_file waits for approval and writes under write_dir.
    let started = server
        .post_sse("/api/agents/free/stream", json!({"messages": "go"}))
        .await;
    let run_id = started.chunks[0]["runId"].as_str().unwrap().to_owned();
    let answered = server
        .post_sse(
            "/api/agents/free/resume-stream",
            json!({"runId": run_id, "resumeData": "qa"}),
        )
        .await;
    assert_eq!(answered.status, 200);
    let approval = answered.first("tool-call-approval");
    assert_eq!(approval["payload"]["toolName"], "write_file");
    let approved = server
        .post_sse(
            "/api/agents/free/approve-tool-call",
            json!({"runId": run_id, "toolCallId": approval["payload"]["toolCallId"]}),
        )
        .await;
    assert_eq!(approved.types().last().unwrap(), "finish");
    let written = std::fs::read_to_string(dir.path().join("files/notes/env.txt")).unwrap();
    assert_eq!(written, "deploy notes");
    assert!(approved.text().starts_with("Done: "), "{}", approved.text());
}

#[tokio::test]
async fn a_configured_write_file_refuses_paths_leading_out_of_its_write_dir() {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink("../outside", files.join("link")).unwrap();
    write(
        dir.path(),
        "escape.json",
        r#"{"turns": [
  {"toolCalls": [{"name": "write_file", "args": {"path": "link/x.txt", "content": "escaped"}},
                 {"name": "write_file", "args": {"path": "../outside/y.txt", "content": "escaped"}}]},
  {"text": "Done: {{toolResults}}"}
]}"#,
    );
    let path = write(
        dir.path(),
        "askloop.toml",
        "[agents.writer]\nscript = \"escape.json\"\ntools = [\"write_file\"]\nwrite_dir = \"files\"\n",
    );
    let store: Arc<dyn RunStore> = memory_store();
    let agents = ServerConfig::load(&path)
        .unwrap()
        .build_agents(&store, &no_default)
        .unwrap();
    let server = TestServer::start(agents, store).await;

    let started = server
        .post_sse("/api/agents/writer/stream", json!({"messages": "go"}))
        .await;
    let run_id = started.chunks[0]["runId"].as_str().unwrap().to_owned();
    let calls: Vec<Value> = started
        .chunks
        .iter()
        .filter(|c| c["type"] == "tool-call-approval")
        .map(|c| c["payload"]["toolCallId"].clone())
        .collect();
    assert_eq!(calls.len(), 2, "{:?}", started.types());
    let mut streams = Vec::new();
    for call in calls {
        let approved = server
            .post_sse(
                "/api/agents/writer/approve-tool-call",
                json!({"runId": run_id, "toolCallId": call}),
            )
            .await;
        assert_eq!(approved.status, 200);
        streams.extend(approved.chunks);
    }
    let errors: Vec<String> = streams
        .iter()
        .filter(|c| c["type"] == "tool-error")
        .map(|c| c["payload"]["error"].to_string())
        .collect();
    assert_eq!(errors.len(), 2, "both calls fail: {streams:?}");
    assert!(errors.iter().any(|e| e.contains("leads outside")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("'..' is not allowed")), "{errors:?}");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing was written outside write_dir"
    );
}

#[test]
fn mcp_servers_resolve_to_a_command_or_a_url_and_their_mistakes_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "askloop.toml",
        r#"
[agents.clerk]
[[agents.clerk.mcp]]
name = "everything"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-everything"]
env = { LOG = "warn" }
tools = ["echo"]
[[agents.clerk.mcp]]
url = "http://127.0.0.1:3001/mcp"
headers = { Authorization = "Bearer t" }
"#,
    );
    let config = ServerConfig::load(&path).unwrap();
    let servers = &config.agents[0].mcp;
    assert_eq!(servers.len(), 2);
    assert_eq!(servers[0].name, "everything");
    assert_eq!(servers[0].only_tools, ["echo"]);
    assert!(matches!(&servers[0].transport, askloop_mcp::McpTransport::Stdio { command, .. } if command == "npx"));
    assert_eq!(servers[1].name, "http://127.0.0.1:3001/mcp");

    let (_, err) = load_err("[agents.a]\n[[agents.a.mcp]]\ncommand = \"x\"\nurl = \"http://h/mcp\"\n");
    assert_eq!(err.key, "agents.a.mcp[0]");
    assert!(err.problem.contains("not both"), "{err}");
    let (_, err) = load_err("[agents.a]\n[[agents.a.mcp]]\nname = \"n\"\n");
    assert!(err.problem.contains("give command"), "{err}");
    let (_, err) = load_err("[agents.a]\n[[agents.a.mcp]]\nurl = \"ftp://h\"\n");
    assert_eq!(err.key, "agents.a.mcp[0].url");
    let (_, err) = load_err("[agents.a]\n[[agents.a.mcp]]\ncommand = \"x\"\nheaders = { A = \"b\" }\n");
    assert_eq!(err.key, "agents.a.mcp[0].headers");
}

#[test]
fn an_mcp_servers_deadlines_and_question_limit_take_the_one_duration_grammar_and_default_when_left_out() {
    let text = "[agents.a]\n[[agents.a.mcp]]\ncommand = \"x\"\ninitialize_timeout = \"2s\"\nlist_timeout = \"1.5s\"\n\
                call_timeout = \"5m\"\nstop_grace = \"250ms\"\nmax_questions = 3\n[[agents.a.mcp]]\nname = \"plain\"\ncommand = \"y\"\n";
    let config = ServerConfig::from_toml(std::path::Path::new("/tmp/askloop.toml"), text).unwrap();
    let (set, plain) = (&config.agents[0].mcp[0], &config.agents[0].mcp[1]);
    assert_eq!(set.initialize_timeout, Duration::from_secs(2));
    assert_eq!(set.list_timeout, Duration::from_millis(1500));
    assert_eq!(set.call_timeout, Duration::from_secs(300));
    assert_eq!(set.stop_grace, Duration::from_millis(250));
    assert_eq!(set.max_questions, 3);
    assert_eq!(plain.initialize_timeout, askloop_mcp::DEFAULT_INITIALIZE_TIMEOUT);
    assert_eq!(plain.list_timeout, askloop_mcp::DEFAULT_LIST_TIMEOUT);
    assert_eq!(plain.call_timeout, askloop_mcp::DEFAULT_CALL_TIMEOUT);
    assert_eq!(plain.stop_grace, askloop_mcp::DEFAULT_STOP_GRACE);
    assert_eq!(plain.max_questions, askloop_mcp::DEFAULT_MAX_QUESTIONS);

    for (line, key, says) in [
        ("call_timeout = \"soon\"", "agents.a.mcp[0].call_timeout", "15m"),
        (
            "initialize_timeout = \"0s\"",
            "agents.a.mcp[0].initialize_timeout",
            "no time at all",
        ),
        ("max_questions = 0", "agents.a.mcp[0].max_questions", "positive number"),
    ] {
        let (_, err) = load_err(&format!("[agents.a]\n[[agents.a.mcp]]\ncommand = \"x\"\n{line}\n"));
        assert_eq!(err.key, key, "{err}");
        assert!(err.problem.contains(says), "{err}");
    }
}

#[test]
fn the_mcp_table_bounds_the_endpoints_sessions_and_missing_keys_keep_their_defaults() {
    let text = "[mcp]\nmax_sessions = 50\nsession_idle = \"90s\"\n[agents.a]\n";
    let config = ServerConfig::from_toml(std::path::Path::new("/tmp/askloop.toml"), text).unwrap();
    let defaults = askloop_mcp::SessionLimits::DEFAULT;
    assert_eq!(config.mcp_sessions.max_sessions, 50);
    assert_eq!(
        config.mcp_sessions.max_sessions_per_token,
        defaults.max_sessions_per_token
    );
    assert_eq!(config.mcp_sessions.idle, Duration::from_secs(90));
    let without = ServerConfig::from_toml(std::path::Path::new("/tmp/askloop.toml"), "[agents.a]\n").unwrap();
    assert_eq!(without.mcp_sessions, defaults);
    for (line, key, says) in [
        (
            "max_sessions_per_token = 0",
            "mcp.max_sessions_per_token",
            "positive number",
        ),
        ("session_idle = \"never\"", "mcp.session_idle", "15m"),
        ("max_session = 3", "mcp", "unknown field"),
    ] {
        let (_, err) = load_err(&format!("[mcp]\n{line}\n[agents.a]\n"));
        assert!(err.key.starts_with(key), "{err}");
        assert!(err.problem.contains(says), "{err}");
    }
}

#[test]
fn the_limits_table_sets_ask_user_limits_and_missing_keys_keep_their_defaults() {
    let text = "[limits]\nmax_options = 4\nmax_answer_bytes = 100\n[agents.a]\ninstructions = \"x\"\n";
    let config = ServerConfig::from_toml(std::path::Path::new("/tmp/askloop.toml"), text).unwrap();
    let defaults = askloop::AskUserLimits::default();
    assert_eq!(config.limits.max_options, 4);
    assert_eq!(config.limits.max_answer_bytes, 100);
    assert_eq!(config.limits.max_questions_per_step, defaults.max_questions_per_step);
    let without = ServerConfig::from_toml(std::path::Path::new("/tmp/askloop.toml"), "[agents.a]\n").unwrap();
    assert_eq!(without.limits, defaults);
}

/// Reads `text` as `askloop.toml` with only these environment variables set.
fn with_env(text: &str, vars: &[(&str, &str)]) -> Result<ServerConfig, ConfigError> {
    let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    ServerConfig::from_toml_with_env(Path::new("/etc/askloop/askloop.toml"), text, &|name| {
        vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
}

#[test]
fn tokens_resolve_to_named_secrets_with_their_agents_and_a_secret_in_the_file_is_warned_about() {
    let config = with_env(
        r#"
author_header = "X-Forwarded-User"
allowed_hosts = ["askloop.internal", "10.0.0.7"]

[agents.support]
[agents.deployer]

[[tokens]]
name = "alice"
token_env = "ALICE_TOKEN"

[[tokens]]
name = "support-bot"
token = "written-in-the-file"
agents = ["support"]
resources = ["support-team", "support-bot"]
without_person = true
"#,
        &[("ALICE_TOKEN", "secret-of-alice")],
    )
    .unwrap();
    let [alice, bot] = &config.tokens[..] else {
        panic!("{config:?}")
    };
    assert!(
        bot.may_act_without_person() && !alice.may_act_without_person(),
        "only the token marked acts without a person behind the proxy"
    );
    assert_eq!((alice.name(), alice.agents()), ("alice", None));
    assert_eq!(bot.name(), "support-bot");
    assert_eq!(bot.agents(), Some(&["support".to_owned()][..]));
    assert_eq!(
        alice.resources(),
        Some(&["alice".to_owned()][..]),
        "its own name's threads"
    );
    assert_eq!(
        bot.resources(),
        Some(&["support-bot".to_owned(), "support-team".to_owned()][..]),
        "its own name first, each once"
    );
    assert_eq!(config.author_header.as_deref(), Some("X-Forwarded-User"));
    assert_eq!(config.allowed_hosts, ["askloop.internal", "10.0.0.7"]);
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(
        config.warnings[0].contains("tokens[1].token") && config.warnings[0].contains("token_env"),
        "{:?}",
        config.warnings
    );
    assert!(
        !format!("{config:?}").contains("secret-of-alice"),
        "secrets stay out of debug output"
    );
}

#[test]
fn a_token_marked_to_act_without_a_person_on_a_server_without_a_proxy_is_warned_about() {
    let config = with_env(
        "[agents.a]\n[[tokens]]\nname = \"ci\"\ntoken_env = \"CI_TOKEN\"\nwithout_person = true\n",
        &[("CI_TOKEN", "secret-of-the-ci-job")],
    )
    .unwrap();
    assert!(config.tokens[0].may_act_without_person());
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(
        config.warnings[0].contains("tokens[0].without_person") && config.warnings[0].contains("author_header"),
        "{:?}",
        config.warnings
    );
}

#[test]
fn token_and_time_limit_mistakes_are_one_error_naming_the_file_the_key_and_the_problem() {
    let agents = "[agents.support]\ntools = [\"ask_user\"]\n[agents.deployer]\n";
    let cases: Vec<(String, &str, &str)> = vec![
        (
            format!("[[tokens]]\nname = \"\"\ntoken_env = \"ALICE_TOKEN\"\n{agents}"),
            "tokens[0].name",
            "a token needs a name",
        ),
        (
            format!("[[tokens]]\ntoken_env = \"ALICE_TOKEN\"\n{agents}"),
            "tokens[0].name",
            "a token needs a name",
        ),
        (
            format!(
                "[[tokens]]\nname = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n[[tokens]]\nname = \"alice\"\ntoken_env = \"BOB_TOKEN\"\n{agents}"
            ),
            "tokens[1].name",
            "another token is named \"alice\"",
        ),
        (
            format!(
                "[[tokens]]\nname = \"bot\"\ntoken_env = \"ALICE_TOKEN\"\nagents = [\"support\", \"billing\"]\n{agents}"
            ),
            "tokens[0].agents[1]",
            "unknown agent \"billing\"; agents in this file: deployer, support",
        ),
        (
            format!("[[tokens]]\nname = \"bot\"\ntoken_env = \"MISSING_TOKEN\"\n{agents}"),
            "tokens[0].token_env",
            "the environment variable MISSING_TOKEN is not set",
        ),
        (
            format!("[[tokens]]\nname = \"bot\"\n{agents}"),
            "tokens[0]",
            "give token_env",
        ),
        (
            format!("[[tokens]]\nname = \"bot\"\ntoken_env = \"ALICE_TOKEN\"\nagents = []\n{agents}"),
            "tokens[0].agents",
            "an empty list",
        ),
        (
            format!("[[tokens]]\nname = \"bot\"\ntoken_env = \"ALICE_TOKEN\"\nscope = \"all\"\n{agents}"),
            "tokens[0].scope",
            "unknown field `scope`",
        ),
        (
            format!("author_header = \"X Forwarded User\"\n{agents}"),
            "author_header",
            "not an HTTP header name",
        ),
        (
            format!("[[tokens]]\nname = \"bot\"\ntoken = \"0123456789abcdef \"\n{agents}"),
            "tokens[0].token",
            "starts or ends with white space",
        ),
        (
            format!("[[tokens]]\nname = \"bot\"\ntoken_env = \"SPACED_TOKEN\"\n{agents}"),
            "tokens[0].token",
            "starts or ends with white space",
        ),
        (
            format!("allowed_hosts = [\"askloop.example.com\", \"http://x.example:80\"]\n{agents}"),
            "allowed_hosts[1]",
            "is not a host name",
        ),
        (
            "[agents.a]\ntime_limit = \"90 fortnights\"\n".to_owned(),
            "agents.a.time_limit",
            "has a unit askloop does not know",
        ),
        (
            "[agents.a]\n[agents.a.time_limits]\nask_user = \"soon\"\n".to_owned(),
            "agents.a.time_limits.ask_user",
            "is not a duration; write seconds (90) or a number with a unit",
        ),
        (
            "[agents.a]\n[agents.a.time_limits]\nshell = \"5m\"\n".to_owned(),
            "agents.a.time_limits.shell",
            "shell is not one of this agent's tools",
        ),
    ];
    for (text, key, problem) in cases {
        let vars = [
            ("ALICE_TOKEN", "a"),
            ("BOB_TOKEN", "b"),
            ("SPACED_TOKEN", "\t0123456789abcdef"),
        ];
        let err = with_env(&text, &vars).unwrap_err();
        assert_eq!(err.file, Path::new("/etc/askloop/askloop.toml"), "{text}");
        assert_eq!(err.key, key, "{text}: {err}");
        assert!(err.problem.contains(problem), "{text}: {err}");
        let message = err.to_string();
        assert!(
            message.starts_with("/etc/askloop/askloop.toml") && message.contains(key),
            "{message}"
        );
    }
}

const GOOD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

#[test]
fn webhook_tables_resolve_with_defaults_and_their_own_events_agents_and_limits() {
    // (`secret_env` read from a real environment: crates/askloop-cli/tests/webhooks.rs.)
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "askloop.toml",
        &format!(
            "public_url = \"https://askloop.example.com/\"\n\
             [agents.a]\n[agents.b]\n\
             [[webhooks]]\nurl = \"https://one.example/hook\"\nsecret = \"{GOOD_SECRET}\"\n\
             [[webhooks]]\nurl = \"https://two.example/hook\"\nsecret = \"{GOOD_SECRET}\"\n\
             events = [\"question.raised\", \"question.expired\"]\nagents = [\"b\"]\nmax_attempts = 3\ntimeout = \"2s\"\n"
        ),
    );
    let config = ServerConfig::load(&path).unwrap();
    assert_eq!(config.public_url.as_deref(), Some("https://askloop.example.com"));
    let [one, two] = config.webhooks.as_slice() else {
        panic!("two webhooks expected: {:?}", config.webhooks)
    };
    assert_eq!(one.events, askloop::EventType::ALL.to_vec(), "every event by default");
    assert!(one.covers("a") && one.covers("b"), "every agent by default");
    assert_eq!(one.max_attempts, askloop_config::DEFAULT_MAX_ATTEMPTS);
    assert_eq!(one.timeout, askloop_config::DEFAULT_WEBHOOK_TIMEOUT);
    assert_eq!(one.secret.bytes().len(), 24);
    assert_eq!(one.secret, two.secret);
    assert!(
        !format!("{one:?}").contains("MfKQ9r8"),
        "Debug must not show the secret"
    );
    assert_eq!(
        two.events,
        vec![askloop::EventType::QuestionRaised, askloop::EventType::QuestionExpired]
    );
    assert!(two.covers("b") && !two.covers("a"));
    assert_eq!((two.max_attempts, two.timeout), (3, std::time::Duration::from_secs(2)));
}

#[test]
fn bad_webhook_tables_are_refused_naming_the_key_and_what_is_accepted() {
    let hook = |rest: &str| format!("[agents.a]\n[[webhooks]]\nurl = \"https://h.example/x\"\n{rest}");
    let cases: Vec<(String, &str, &str)> = vec![
        (hook(""), "webhooks[0].secret", "missing: give secret"),
        (
            hook("secret = \"hunter2\"\n"),
            "webhooks[0].secret",
            "does not start with whsec_",
        ),
        (hook("secret = \"whsec_!!!\"\n"), "webhooks[0].secret", "not base64"),
        (
            hook("secret = \"whsec_c2hvcnQ=\"\n"),
            "webhooks[0].secret",
            "at least 16",
        ),
        (
            hook(&format!("secret = \"{GOOD_SECRET}\"\nsecret_env = \"X\"\n")),
            "webhooks[0].secret_env",
            "either secret or secret_env",
        ),
        (
            hook("secret_env = \"ASKLOOP_TEST_HOOK_SECRET_UNSET\"\n"),
            "webhooks[0].secret_env",
            "ASKLOOP_TEST_HOOK_SECRET_UNSET is not set",
        ),
        (
            hook(&format!(
                "secret = \"{GOOD_SECRET}\"\nevents = [\"question.raised\", \"question.asked\"]\n"
            )),
            "webhooks[0].events[1]",
            "unknown event \"question.asked\"; accepted: question.raised, question.answered, question.declined, question.approved, question.expired",
        ),
        (
            hook(&format!("secret = \"{GOOD_SECRET}\"\nevents = []\n")),
            "webhooks[0].events",
            "no events",
        ),
        (
            hook(&format!("secret = \"{GOOD_SECRET}\"\nagents = [\"zz\"]\n")),
            "webhooks[0].agents[0]",
            "no agent \"zz\" is configured; configured agents: a",
        ),
        (
            hook(&format!("secret = \"{GOOD_SECRET}\"\nmax_attempts = 0\n")),
            "webhooks[0].max_attempts",
            "0 would never send",
        ),
        (
            hook(&format!("secret = \"{GOOD_SECRET}\"\ntimeout = \"soon\"\n")),
            "webhooks[0].timeout",
            "\"soon\" is not a duration",
        ),
        (
            hook(&format!("secret = \"{GOOD_SECRET}\"\nsecrte = \"x\"\n")),
            "webhooks[0].secrte",
            "unknown field `secrte`",
        ),
        (
            format!("[agents.a]\n[[webhooks]]\nurl = \"ftp://h/x\"\nsecret = \"{GOOD_SECRET}\"\n"),
            "webhooks[0].url",
            "not an http:// or https:// URL",
        ),
        (
            format!("[agents.a]\n[[webhooks]]\nsecret = \"{GOOD_SECRET}\"\n"),
            "webhooks[0].url",
            "missing: give url",
        ),
        (
            format!(
                "[agents.a]\n[[webhooks]]\nurl = \"https://h/x\"\nsecret = \"{GOOD_SECRET}\"\n\
                 [[webhooks]]\nurl = \"https://h/x\"\nsecret = \"{GOOD_SECRET}\"\n"
            ),
            "webhooks[1].url",
            "another webhook has the url",
        ),
        (
            "public_url = \"askloop.example.com\"\n[agents.a]\n".to_owned(),
            "public_url",
            "not an http:// or https:// URL",
        ),
    ];
    for (text, key, problem) in cases {
        let (path, err) = load_err(&text);
        assert_eq!(err.file, path, "{text}");
        assert_eq!(err.key, key, "{text}: {err}");
        assert!(err.problem.contains(problem), "{text}: {err}");
    }
}

/// A real MCP server over HTTP: an askloop server whose agents `assistant`
/// and `approver` are its tools `ask_assistant` and `ask_approver`.
async fn mcp_server() -> (TestServer, String) {
    let store = memory_store();
    let server = TestServer::start(vec![assistant(&store), approver(&store)], store).await;
    let url = server.url("/mcp");
    (server, url)
}

/// No MCP server listens here.
const NOBODY: &str = "http://127.0.0.1:1/mcp";

/// An agent `a` with `require_approval = names` and these MCP servers
/// (name, url, rest of the table).
fn with_servers(dir: &Path, names: &str, servers: &[(&str, &str, &str)]) -> ServerConfig {
    write(dir, "s.json", r#"{"turns": [{"text": "hi"}]}"#);
    let mut text = format!("[agents.a]\nscript = \"s.json\"\nrequire_approval = {names}\n");
    for (name, url, rest) in servers {
        text.push_str(&format!(
            "[[agents.a.mcp]]\nname = \"{name}\"\nurl = \"{url}\"\n{rest}\n"
        ));
    }
    ServerConfig::load(&write(dir, "askloop.toml", &text)).unwrap()
}

#[tokio::test]
async fn require_approval_names_an_mcp_servers_tool_and_a_server_table_can_make_all_its_tools_wait() {
    let (_remote, url) = mcp_server().await;
    let dir = tempfile::tempdir().unwrap();
    let store = memory_store();

    let config = with_servers(dir.path(), r#"["ask_approver"]"#, &[("remote", &url, "")]);
    let built = config
        .build_agents_with_mcp(&store, &no_default, ApprovalNames::Check)
        .await
        .unwrap();
    assert!(built.warnings.is_empty(), "{:?}", built.warnings);
    let agent = &built.agents[0];
    assert!(agent.requires_approval("ask_approver"));
    assert!(!agent.requires_approval("ask_assistant"));
    assert!(!agent.requires_approval("ask_user"));

    let config = with_servers(dir.path(), "[]", &[("remote", &url, "require_approval = true")]);
    assert!(config.agents[0].mcp[0].require_approval);
    let built = config
        .build_agents_with_mcp(&store, &no_default, ApprovalNames::Check)
        .await
        .unwrap();
    let agent = &built.agents[0];
    assert!(agent.requires_approval("ask_approver") && agent.requires_approval("ask_assistant"));
    assert!(!agent.requires_approval("ask_user"), "only that server's tools");
}

#[tokio::test]
async fn a_name_no_tool_has_stops_start_up_naming_the_agent_the_name_and_the_tools() {
    let (_remote, url) = mcp_server().await;
    let dir = tempfile::tempdir().unwrap();
    let config = with_servers(dir.path(), r#"["ask_approver", "ask_nobody"]"#, &[("remote", &url, "")]);
    let err = config
        .build_agents_with_mcp(&memory_store(), &no_default, ApprovalNames::Check)
        .await
        .unwrap_err();
    assert_eq!(err.key, "agents.a.require_approval[1]", "{err}");
    assert_eq!(
        err.problem,
        "agent a has no tool \"ask_nobody\"; its tools: ask_user, ask_assistant, ask_approver"
    );
}

#[tokio::test]
async fn a_server_that_cannot_be_reached_is_reported_and_the_names_it_may_have_are_left_unchecked() {
    let (_remote, url) = mcp_server().await;
    let dir = tempfile::tempdir().unwrap();
    let config = with_servers(
        dir.path(),
        r#"["ask_approver", "deploy"]"#,
        &[("remote", &url, ""), ("deployer", NOBODY, "")],
    );
    let built = config
        .build_agents_with_mcp(&memory_store(), &no_default, ApprovalNames::Check)
        .await
        .unwrap();
    let agent = &built.agents[0];
    assert!(
        agent.requires_approval("ask_approver"),
        "the names that can be checked still apply"
    );
    let [down, unchecked] = &built.warnings[..] else {
        panic!("{:?}", built.warnings)
    };
    assert!(
        down.contains("agents.a.mcp[1]") && down.contains("deployer") && down.contains("starts without"),
        "{down}"
    );
    let late: Vec<&str> = built.late.iter().map(|late| late.name()).collect();
    assert_eq!(late, ["deployer"], "the server down is the one to try again");
    assert!(
        unchecked.contains("agents.a.require_approval")
            && unchecked.contains("\"deploy\" could not be checked")
            && unchecked.contains("deployer"),
        "{unchecked}"
    );
}

#[tokio::test]
async fn a_tool_whose_name_the_agent_already_has_from_another_server_is_left_out_with_a_warning() {
    let (_remote, url) = mcp_server().await;
    let dir = tempfile::tempdir().unwrap();
    // The same server twice: every tool of the second takes a name of the
    // first's. The agent starts, with the first's tools only.
    let config = with_servers(dir.path(), "[]", &[("first", &url, ""), ("second", &url, "")]);
    let built = config
        .build_agents_with_mcp(&memory_store(), &no_default, ApprovalNames::Check)
        .await
        .unwrap();
    let specs = built.agents[0].tool_specs();
    let names: Vec<&str> = specs.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["ask_user", "ask_assistant", "ask_approver"]);
    assert_eq!(built.warnings.len(), 2, "{:?}", built.warnings);
    for (warning, tool) in built.warnings.iter().zip(["ask_assistant", "ask_approver"]) {
        assert!(
            warning.contains("agents.a.mcp[1]")
                && warning.contains(&format!("the MCP server second offers a tool named {tool}"))
                && warning.contains("already has from the MCP server first")
                && warning.contains("agent a goes without that tool of second"),
            "{warning}"
        );
    }
}

#[tokio::test]
async fn commands_that_continue_a_run_trust_the_names() {
    let (_remote, url) = mcp_server().await;
    let dir = tempfile::tempdir().unwrap();
    let config = with_servers(dir.path(), r#"["ask_approver", "gone"]"#, &[("remote", &url, "")]);
    let built = config
        .build_agents_with_mcp(&memory_store(), &no_default, ApprovalNames::Trust)
        .await
        .unwrap();
    assert!(built.warnings.is_empty(), "{:?}", built.warnings);
    assert!(built.agents[0].requires_approval("ask_approver"));
}

#[test]
fn a_rules_table_with_every_kind_of_mistake_is_an_error_naming_the_rule_and_its_key() {
    let head = "[agents.a]\ntools = [\"ask_user\", \"write_file\"]\n[[agents.a.rules]]\n";
    let cases: Vec<(&str, &str, &str)> = vec![
        (
            "tool = \"write_file\"\n",
            "agents.a.rules[0].decision",
            "is required: allow, ask or deny",
        ),
        (
            "decision = \"maybe\"\n",
            "agents.a.rules[0].decision",
            "\"maybe\" is not a decision; use allow, ask or deny",
        ),
        (
            "decision = \"deny\"\n",
            "agents.a.rules[0].reason",
            "a deny rule gives the reason",
        ),
        (
            "decision = \"allow\"\nreason = \"x\"\n",
            "agents.a.rules[0].reason",
            "only a deny rule has a reason",
        ),
        (
            "decision = \"allow\"\ntool = \"write_[\"\n",
            "agents.a.rules[0].tool",
            "is not a glob",
        ),
        (
            "decision = \"allow\"\nglob = \"docs/**\"\n",
            "agents.a.rules[0].arg",
            "give `arg`",
        ),
        (
            "decision = \"allow\"\narg = \"path\"\nglob = \"docs/**\"\n",
            "agents.a.rules[0].arg",
            "is not a JSON pointer",
        ),
        (
            "decision = \"allow\"\narg = \"/path\"\n",
            "agents.a.rules[0].arg",
            "give one of equals, glob or regex",
        ),
        (
            "decision = \"allow\"\narg = \"/path\"\nglob = \"a\"\nregex = \"b\"\n",
            "agents.a.rules[0].arg",
            "only one of equals, glob and regex",
        ),
        (
            "decision = \"allow\"\narg = \"/path\"\nregex = \"(\"\n",
            "agents.a.rules[0].regex",
            "not a regular expression",
        ),
        (
            "decision = \"allow\"\narg = \"/path\"\nequals = [1]\n",
            "agents.a.rules[0].equals",
            "compares one string, number or boolean; for array values, match a path inside with `arg`",
        ),
        (
            "decision = \"allow\"\narg = \"/path\"\nequals = nan\n",
            "agents.a.rules[0].equals",
            "NaN is not a number an argument can hold",
        ),
        (
            "decision = \"allow\"\nserver = \"github\"\n",
            "agents.a.rules[0].server",
            "has no MCP server \"github\"; its servers: none",
        ),
        (
            "decision = \"allow\"\ntools = \"x\"\n",
            "agents.a.rules[0].tools",
            "unknown field `tools`",
        ),
        (
            "name = \"same\"\ndecision = \"allow\"\n[[agents.a.rules]]\nname = \"same\"\ndecision = \"ask\"\n",
            "agents.a.rules[1].name",
            "names another rule",
        ),
    ];
    for (rule, key, problem) in cases {
        let text = format!("{head}{rule}");
        let (path, err) = load_err(&text);
        assert_eq!(err.file, path, "{text}");
        assert_eq!(err.key, key, "{text}: {err}");
        assert!(err.problem.contains(problem), "{text}: {err}");
    }
}

#[test]
fn configured_rules_match_by_tool_glob_server_and_the_value_at_a_pointer() {
    let text = r#"
[agents.a]
tools = ["ask_user", "write_file"]

[[agents.a.rules]]
name = "no-secrets"
tool = "write_*"
arg = "/path"
glob = "secrets/**"
decision = "deny"
reason = "secrets are not written by agents"

[[agents.a.rules]]
name = "readme"
arg = "/path"
equals = "README.md"
decision = "ask"

[[agents.a.rules]]
name = "drafts"
arg = "/path"
regex = "^drafts/[a-z]+\\.md$"
decision = "allow"
"#;
    let config = ServerConfig::from_toml(Path::new("/tmp/askloop.toml"), text).unwrap();
    let rules: Vec<askloop::ApprovalRule> = config.agents[0].rules.iter().map(|r| r.to_rule()).collect();
    let decide = |tool: &str, path: &str| {
        let args = json!({"path": path});
        let call = askloop::ProposedCall::new(tool, &args);
        rules
            .iter()
            .find_map(|r| r.decide(&call).map(|v| (r.name().to_owned(), v)))
    };
    assert_eq!(
        decide("write_file", "secrets/key.pem"),
        Some((
            "no-secrets".into(),
            askloop::Verdict::Deny("secrets are not written by agents".into())
        ))
    );
    assert_eq!(
        decide("read_file", "secrets/key.pem"),
        None,
        "the tool glob leaves it out"
    );
    assert_eq!(
        decide("write_file", "README.md"),
        Some(("readme".into(), askloop::Verdict::Ask))
    );
    assert_eq!(
        decide("write_file", "drafts/plan.md"),
        Some(("drafts".into(), askloop::Verdict::Allow))
    );
    assert_eq!(
        decide("write_file", "drafts/Plan.md"),
        None,
        "the regex is anchored and case-sensitive"
    );
    assert_eq!(decide("write_file", "notes.md"), None);

    // A rule naming an MCP server covers that server's tools only.
    let text = "[agents.b]\n[[agents.b.mcp]]\nname = \"github\"\ncommand = \"github-mcp\"\n\n\
                [[agents.b.rules]]\nname = \"no-merges\"\nserver = \"github\"\ntool = \"merge_*\"\n\
                decision = \"deny\"\nreason = \"merges are for people\"\n";
    let config = ServerConfig::from_toml(Path::new("/tmp/askloop.toml"), text).unwrap();
    let rule = config.agents[0].rules[0].to_rule();
    let args = json!({});
    let on = |server: &str| rule.decide(&askloop::ProposedCall::new("merge_pr", &args).from_server(server));
    assert_eq!(
        on("github"),
        Some(askloop::Verdict::Deny("merges are for people".into()))
    );
    assert_eq!(
        on("gitlab"),
        None,
        "the same tool name on another server is not covered"
    );
    assert_eq!(rule.decide(&askloop::ProposedCall::new("merge_pr", &args)), None);
}

#[tokio::test]
async fn a_configured_deny_rule_refuses_a_write_the_model_spelled_to_look_harmless() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "sneaky.json",
        r#"{"turns": [
  {"toolCalls": [{"name": "write_file", "args": {"path": "docs/../secrets/key.pem", "content": "x"}}]},
  {"text": "Done: {{toolResults}}"}
]}"#,
    );
    let path = write(
        dir.path(),
        "askloop.toml",
        "[agents.writer]\nscript = \"sneaky.json\"\ntools = [\"write_file\"]\nwrite_dir = \"files\"\n\n\
         [[agents.writer.rules]]\nname = \"no-secrets\"\ntool = \"write_file\"\narg = \"/path\"\nglob = \"secrets/**\"\n\
         decision = \"deny\"\nreason = \"secrets are not written by agents\"\n",
    );
    let store: Arc<dyn RunStore> = memory_store();
    let agents = ServerConfig::load(&path)
        .unwrap()
        .build_agents(&store, &no_default)
        .unwrap();
    let server = TestServer::start(agents, Arc::clone(&store)).await;
    let started = server
        .post_sse("/api/agents/writer/stream", json!({"messages": "go"}))
        .await;
    let types = started.types();
    assert!(
        types.contains(&"tool-output-denied".to_owned()),
        "no approval asked: {types:?}"
    );
    assert_eq!(started.text(), "Done: secrets are not written by agents");
    let run_id = started.chunks[0]["runId"].as_str().unwrap();
    let run = store.get(run_id).await.unwrap().unwrap();
    assert_eq!(run.resolutions[0].author.by.as_deref(), Some("no-secrets"));
    assert_eq!(run.resolutions[0].author.via, askloop::Interface::Rule);
    assert!(!dir.path().join("files").exists(), "nothing written");
}

#[test]
fn request_overrides_in_askloop_toml_name_fields_a_request_may_override_and_nothing_else() {
    let file = std::path::Path::new("/srv/askloop.toml");
    let config = ServerConfig::from_toml(
        file,
        "[agents.open]\nrequest_overrides = [\"instructions\"]\n[agents.closed]\n",
    )
    .unwrap();
    let overrides: Vec<_> = config
        .agents
        .iter()
        .map(|a| (a.id.as_str(), a.request_overrides.clone()))
        .collect();
    assert_eq!(
        overrides,
        [("closed", vec![]), ("open", vec![RequestOverride::Instructions])]
    );

    for (list, problem) in [
        (
            "[\"tools\"]",
            "\"tools\" is not a field a request may override; these may be: instructions",
        ),
        ("[\"instructions\", \"instructions\"]", "instructions is listed twice"),
    ] {
        let text = format!("[agents.open]\nrequest_overrides = {list}\n");
        let err = ServerConfig::from_toml(file, &text).unwrap_err();
        assert!(err.key.starts_with("agents.open.request_overrides["), "{err}");
        assert_eq!(err.problem, problem);
    }
}

//! MCP both ways, with real processes:
//!
//! - `askloop serve` whose agents use the official reference server
//!   (`@modelcontextprotocol/server-everything`, started over stdio from
//!   `tests/mcp/node_modules`): a tool call, and its elicitation accepted,
//!   declined, and answered after the server that asked was killed;
//! - `askloop mcp` driven by rmcp's client: listing, a question received as
//!   an elicitation and answered, a client without elicitation getting
//!   the waiting run's id, and a thread named in two calls continued in the
//!   second, of the resource the process was started with.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

mod common;

use common::{BIN, Serve, Serving, askloop, askloop_async, skipped_for_lack_of};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The reference server's entry point, or why it cannot run here.
fn everything() -> Result<PathBuf, String> {
    let entry = repo_root().join("tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !entry.is_file() {
        return Err(format!("{} is missing: run npm ci in tests/mcp", entry.display()));
    }
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(entry),
        _ => Err("node is not installed".into()),
    }
}

/// The reference server's entry point; `None` when the test is skipped
/// for lack of it (never under CI).
fn reference_server() -> Option<PathBuf> {
    match everything() {
        Ok(entry) => Some(entry),
        Err(why) => {
            skipped_for_lack_of("reference server", Some(why));
            None
        }
    }
}

const SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "trigger-elicitation-request", "id": "call_form"}]},
  {"text": "Done: {{toolResults}}"}
]}"#;

const ECHO_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "echo", "args": {"message": "hello over stdio"}}]},
  {"text": "Said: {{toolResults}}"}
]}"#;

fn config(dir: &Path, entry: &Path) -> PathBuf {
    std::fs::write(dir.join("form.json"), SCRIPT).unwrap();
    std::fs::write(dir.join("echo.json"), ECHO_SCRIPT).unwrap();
    let server = format!(
        "command = \"node\"\nargs = [{:?}, \"stdio\"]\ntools = [\"echo\", \"trigger-elicitation-request\"]\n",
        entry.display().to_string()
    );
    let text = format!(
        "[agents.clerk]\nscript = \"form.json\"\n\n[[agents.clerk.mcp]]\nname = \"everything\"\n{server}\n\
         [agents.echoer]\nscript = \"echo.json\"\n\n[[agents.echoer.mcp]]\nname = \"everything\"\n{server}"
    );
    let path = dir.join("askloop.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn serve(dir: &Path, config: &Path) -> Serving {
    Serve::in_dir(dir).config(config).start()
}

/// The chunks of a stream body, its framing held to Mastra's.
fn frames(body: &str) -> Vec<Value> {
    askloop_testkit::mastra::framed_chunks(body)
}

async fn post(client: &reqwest::Client, url: String, body: Value) -> Vec<Value> {
    let response = client.post(url).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    frames(&response.text().await.unwrap())
}

fn finish_text(chunks: &[Value]) -> String {
    assert!(chunks.iter().any(|c| c["type"] == "finish"), "no finish in {chunks:?}");
    chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["payload"]["text"].as_str().unwrap_or_default())
        .collect()
}

/// Starts the clerk's run and returns its run id, checking the question.
async fn asked(client: &reqwest::Client, serving: &Serving) -> String {
    let chunks = post(
        client,
        serving.url("/api/agents/clerk/stream"),
        json!({"messages": "Sign me up."}),
    )
    .await;
    let suspended = chunks.last().unwrap();
    assert_eq!(suspended["type"], "tool-call-suspended", "{chunks:?}");
    let payload = &suspended["payload"]["suspendPayload"];
    assert_eq!(payload["kind"], "mcp-elicitation");
    assert_eq!(payload["server"], "everything");
    assert_eq!(payload["message"], "Please provide inputs for the following fields:");
    assert_eq!(payload["requestedSchema"]["required"], json!(["name"]));
    suspended["runId"].as_str().unwrap().to_owned()
}

fn resume_body(run_id: &str, data: Value) -> Value {
    json!({"runId": run_id, "toolCallId": "call_form", "resumeData": data})
}

#[tokio::test]
async fn an_agent_calls_the_reference_servers_tools_and_its_elicitation_is_answered_accepted_or_declined() {
    let Some(entry) = reference_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &entry);
    let serving = serve(dir.path(), &config);
    let client = reqwest::Client::new();

    let chunks = post(
        &client,
        serving.url("/api/agents/echoer/stream"),
        json!({"messages": "Echo."}),
    )
    .await;
    assert_eq!(finish_text(&chunks), "Said: Echo: hello over stdio");

    // Accepted: the answer goes to the live call, which finishes with it.
    let run_id = asked(&client, &serving).await;
    let bad = client
        .post(serving.url("/api/agents/clerk/resume-stream"))
        .json(&resume_body(
            &run_id,
            json!({"action": "accept", "content": {"check": true}}),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422, "an answer without the required name is refused");
    let chunks = post(
        &client,
        serving.url("/api/agents/clerk/resume-stream"),
        resume_body(
            &run_id,
            json!({"action": "accept", "content": {"name": "Ada Lovelace", "check": true}}),
        ),
    )
    .await;
    let text = finish_text(&chunks);
    assert!(
        text.starts_with("Done: ✅ User provided the requested information!"),
        "{text}"
    );
    assert!(text.contains("- Name: Ada Lovelace"), "{text}");

    // Declined: the server hears decline.
    let run_id = asked(&client, &serving).await;
    let chunks = post(
        &client,
        serving.url("/api/agents/clerk/resume-stream"),
        resume_body(&run_id, json!({"action": "decline"})),
    )
    .await;
    assert!(finish_text(&chunks).contains("User declined"), "{chunks:?}");

    // Cancelled: the server hears cancel.
    let run_id = asked(&client, &serving).await;
    let chunks = post(
        &client,
        serving.url("/api/agents/clerk/resume-stream"),
        resume_body(&run_id, json!({"action": "cancel"})),
    )
    .await;
    assert!(finish_text(&chunks).contains("User cancelled"), "{chunks:?}");
}

#[tokio::test]
async fn an_elicitation_answered_after_the_asking_server_was_killed_reaches_the_model_with_a_note() {
    let Some(entry) = reference_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &entry);
    let client = reqwest::Client::new();
    let mut first = serve(dir.path(), &config);
    let run_id = asked(&client, &first).await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    let second = serve(dir.path(), &config);
    let chunks = post(
        &client,
        second.url("/api/agents/clerk/resume-stream"),
        resume_body(&run_id, json!({"action": "accept", "content": {"name": "Ada"}})),
    )
    .await;
    let text = finish_text(&chunks);
    assert!(
        text.starts_with("Done: The MCP server everything asked the person"),
        "{text}"
    );
    assert!(text.contains("never received the answer"), "{text}");
    assert!(text.contains(r#"accepted, with {"name":"Ada"}"#), "{text}");
}

/// `askloop` run on the database of a server, with its configuration file.
fn cli(dir: &Path, config: &Path, args: &[&str]) -> std::process::Output {
    askloop()
        .env("ASKLOOP_DB", dir.join("runs.db"))
        .current_dir(dir)
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

#[tokio::test]
async fn an_elicitation_that_askloop_serve_raised_is_shown_and_answered_through_the_cli() {
    let Some(entry) = reference_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &entry);
    let client = reqwest::Client::new();
    let mut serving = serve(dir.path(), &config);
    let accepted = asked(&client, &serving).await;
    let declined = asked(&client, &serving).await;
    serving.child.kill().unwrap();
    serving.child.wait().unwrap();

    // The run shows the server's form and how to answer it.
    let show = cli(dir.path(), &config, &["runs", "show", &accepted]);
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(show.status.success(), "{show:?}");
    assert!(text.contains("Form of the MCP server everything"), "{text}");
    assert!(text.contains("- name (string, required)"), "{text}");
    assert!(text.contains("--config"), "the hint names the configuration: {text}");

    // No answer at a prompt that cannot show a form: the accepted shapes.
    let bare = cli(dir.path(), &config, &["resume", &accepted]);
    let err = String::from_utf8_lossy(&bare.stderr);
    assert_eq!(bare.status.code(), Some(2), "{err}");
    assert!(
        err.contains("name (string, required)") && err.contains(r#""action":"decline""#),
        "{err}"
    );

    // A content without the required field is refused and the question stays.
    let bad = cli(
        dir.path(),
        &config,
        &[
            "resume",
            &accepted,
            "--answer-json",
            r#"{"action":"accept","content":{"check":true}}"#,
        ],
    );
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("\"name\" is a required property"),
        "{bad:?}"
    );

    let done = cli(
        dir.path(),
        &config,
        &[
            "resume",
            &accepted,
            "--answer-json",
            r#"{"action":"accept","content":{"name":"Ada"}}"#,
        ],
    );
    let text = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{done:?}");
    assert!(
        text.contains("Done: The MCP server everything asked the person"),
        "{text}"
    );
    assert!(text.contains(r#"accepted, with {"name":"Ada"}"#), "{text}");

    let done = cli(
        dir.path(),
        &config,
        &["resume", &declined, "--answer-json", r#"{"action":"decline"}"#],
    );
    let text = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{done:?}");
    assert!(text.contains("declined"), "{text}");

    // The CLI recorded who answered.
    let show = cli(dir.path(), &config, &["runs", "show", &accepted, "--json"]);
    let run: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(run["status"], "completed", "{run}");
    let last = run["resolutions"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (&last["kind"], &last["via"]),
        (&json!("answered"), &json!("cli")),
        "{last}"
    );
}

/// A run of an agent the configuration file does not define is refused,
/// naming the agent and what to give.
#[tokio::test]
async fn resuming_a_served_run_with_another_configuration_names_the_missing_agent() {
    let Some(entry) = reference_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &entry);
    let client = reqwest::Client::new();
    let mut serving = serve(dir.path(), &config);
    let run_id = asked(&client, &serving).await;
    serving.child.kill().unwrap();
    serving.child.wait().unwrap();

    let other = dir.path().join("other.toml");
    std::fs::write(&other, "[agents.helper]\nscript = \"echo.json\"\n").unwrap();
    let out = cli(
        dir.path(),
        &other,
        &["resume", &run_id, "--answer-json", r#"{"action":"cancel"}"#],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("agent `clerk`") && err.contains("other.toml") && err.contains("--config"),
        "{err}"
    );
}

const DEPLOY_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?",
     "options": [{"label": "staging"}, {"label": "production"}]}}]},
  {"text": "Deploying to {{toolResults}}."}
]}"#;

/// Writes an askloop.toml with one agent, `deployer`, that asks a question.
fn write_deployer(dir: &Path) {
    std::fs::write(dir.join("deploy.json"), DEPLOY_SCRIPT).unwrap();
    std::fs::write(
        dir.join("askloop.toml"),
        "[agents.deployer]\nname = \"Deployer\"\nscript = \"deploy.json\"\n",
    )
    .unwrap();
}

/// `askloop mcp` in `dir`, on the database there, with no model keys or
/// resource from this environment; the caller adds its flags.
fn mcp_command(dir: &Path) -> tokio::process::Command {
    let mut cmd = askloop_async();
    cmd.env("ASKLOOP_DB", dir.join("runs.db")).current_dir(dir).arg("mcp");
    cmd
}

fn askloop_mcp(dir: &Path) -> TokioChildProcess {
    write_deployer(dir);
    let mut cmd = mcp_command(dir);
    cmd.args(["--page-url", "http://127.0.0.1:4111"]);
    TokioChildProcess::new(cmd).unwrap()
}

#[derive(Clone, Default)]
struct Person {
    asked: Arc<Mutex<Vec<Value>>>,
}

impl ClientHandler for Person {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        self.asked.lock().unwrap().push(serde_json::to_value(&request).unwrap());
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"answer": "production"})))
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.capabilities = serde_json::from_value::<ClientCapabilities>(json!({"elicitation": {"form": {}}})).unwrap();
        info.protocol_version = rmcp::model::ProtocolVersion::V_2025_11_25;
        info.client_info = rmcp::model::Implementation::new("test-person", "1.0");
        info
    }
}

fn ask(message: &str) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new("ask_deployer");
    params.arguments = json!({"message": message}).as_object().cloned();
    params
}

#[tokio::test]
async fn askloop_mcp_lists_its_agents_and_asks_their_questions_as_elicitations() {
    let dir = tempfile::tempdir().unwrap();
    let person = Person::default();
    let client = person.clone().serve(askloop_mcp(dir.path())).await.unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["ask_deployer"]);
    let result = client.peer().call_tool(ask("Deploy the app")).await.unwrap();
    let asked = person.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["message"], "Which environment?");
    assert_eq!(
        asked[0]["requestedSchema"]["properties"]["answer"]["enum"],
        json!(["staging", "production"])
    );
    let structured = result.structured_content.unwrap();
    assert_eq!(structured["status"], "completed");
    assert!(
        structured["text"].as_str().unwrap().contains("production"),
        "{structured}"
    );
    let _ = client.cancel().await;
    // The answer is recorded as given through MCP; the name the client gave
    // itself is kept as declared by it, never as who answered.
    let run_id = structured["runId"].as_str().unwrap();
    let show = |json: bool| {
        let mut cmd = Command::new(BIN);
        cmd.env("ASKLOOP_DB", dir.path().join("runs.db"))
            .args(["runs", "show", run_id]);
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let shown: Value = serde_json::from_slice(&show(true).stdout).unwrap();
    let resolution = &shown["resolutions"][0];
    assert_eq!(resolution["kind"], "answered", "{shown}");
    assert_eq!(resolution["via"], "mcp", "{shown}");
    assert_eq!(resolution["declared"], "test-person", "{shown}");
    assert!(resolution.get("by").is_none(), "{shown}");
    let text = String::from_utf8(show(false).stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("answered"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("via mcp") && line.contains("test-person (declared by the client, not verified)"),
        "{text}"
    );
    assert!(!line.contains("by test-person"), "{text}");
}

/// Two files to write in one step: both wait for approval.
const PUBLISH_SCRIPT: &str = r##"{"turns": [
  {"toolCalls": [
    {"id": "call_about", "name": "write_file", "args": {"path": "about.md", "content": "about"}},
    {"id": "call_pricing", "name": "write_file", "args": {"path": "pricing.md", "content": "pricing"}}]},
  {"text": "Published: {{toolResults}}"}
]}"##;

/// `askloop mcp` in `dir` serving `publisher`, an agent with `write_file`
/// (writing in `site/`) that plays `script`.
fn publisher_mcp(dir: &Path, script: &str) -> TokioChildProcess {
    std::fs::write(dir.join("publish.json"), script).unwrap();
    std::fs::write(
        dir.join("askloop.toml"),
        "[agents.publisher]\nname = \"Publisher\"\nscript = \"publish.json\"\ntools = [\"write_file\"]\nwrite_dir = \"site\"\n",
    )
    .unwrap();
    TokioChildProcess::new(mcp_command(dir)).unwrap()
}

/// A person who ticks only the first box of the forms they are shown.
#[derive(Clone, Default)]
struct FirstOnly {
    asked: Arc<Mutex<Vec<Value>>>,
}

impl ClientHandler for FirstOnly {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        let request = serde_json::to_value(&request).unwrap();
        let fields: Vec<String> = request["requestedSchema"]["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        self.asked.lock().unwrap().push(request);
        let content: serde_json::Map<String, Value> = fields
            .iter()
            .enumerate()
            .map(|(i, field)| (field.clone(), json!(i == 0)))
            .collect();
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(content)))
    }

    fn get_info(&self) -> ClientConfig {
        Person::default().get_info()
    }
}

#[tokio::test]
async fn several_calls_waiting_for_approval_are_one_form_with_a_box_each_decided_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let person = FirstOnly::default();
    let client = person
        .clone()
        .serve(publisher_mcp(dir.path(), PUBLISH_SCRIPT))
        .await
        .unwrap();
    let mut params = CallToolRequestParams::new("ask_publisher");
    params.arguments = json!({"message": "Publish both pages"}).as_object().cloned();
    let result = client.peer().call_tool(params).await.unwrap();

    let asked = person.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "one form for both calls: {asked:?}");
    let fields = &asked[0]["requestedSchema"]["properties"];
    assert_eq!(fields["call_about"]["type"], "boolean");
    assert!(
        fields["call_pricing"]["title"].as_str().unwrap().contains("pricing.md"),
        "{fields}"
    );
    let structured = result.structured_content.unwrap();
    assert_eq!(structured["status"], "completed", "{structured}");
    assert_eq!(
        structured["text"],
        "Published: Wrote 5 bytes to about.md; Tool call was not approved by the user"
    );
    assert!(dir.path().join("site/about.md").is_file());
    assert!(
        !dir.path().join("site/pricing.md").exists(),
        "the unticked call never ran"
    );
    let _ = client.cancel().await;

    // Both decisions recorded, through MCP, by the client's name.
    let shown = Command::new(BIN)
        .env("ASKLOOP_DB", dir.path().join("runs.db"))
        .args(["runs", "show", structured["runId"].as_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let decided: Vec<(&str, &str, &str)> = shown["resolutions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["toolCallId"].as_str().unwrap(),
                r["kind"].as_str().unwrap(),
                r["via"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        decided,
        [("call_about", "approved", "mcp"), ("call_pricing", "denied", "mcp")],
        "{shown}"
    );
}

/// A person who allows the call and changes its `path` on the way.
#[derive(Clone, Default)]
struct Renamer {
    asked: Arc<Mutex<Vec<Value>>>,
}

impl ClientHandler for Renamer {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        self.asked.lock().unwrap().push(serde_json::to_value(&request).unwrap());
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({"approve": true, "path": "renamed.md", "content": "about"})))
    }

    fn get_info(&self) -> ClientConfig {
        Person::default().get_info()
    }
}

#[tokio::test]
async fn an_approval_asked_over_mcp_lets_a_top_level_argument_be_changed_before_allowing_it() {
    let dir = tempfile::tempdir().unwrap();
    let one = r#"{"turns": [
      {"toolCalls": [{"id": "call_about", "name": "write_file", "args": {"path": "about.md", "content": "about"}}]},
      {"text": "Published: {{toolResults}}"}
    ]}"#;
    let person = Renamer::default();
    let client = person.clone().serve(publisher_mcp(dir.path(), one)).await.unwrap();
    let mut params = CallToolRequestParams::new("ask_publisher");
    params.arguments = json!({"message": "Publish the about page"}).as_object().cloned();
    let result = client.peer().call_tool(params).await.unwrap();
    let asked = person.asked.lock().unwrap().clone();
    let fields = &asked[0]["requestedSchema"]["properties"];
    assert_eq!(fields["approve"]["type"], "boolean");
    assert_eq!(fields["path"]["default"], "about.md", "{fields}");
    assert_eq!(fields["content"]["type"], "string");
    let structured = result.structured_content.unwrap();
    assert_eq!(structured["status"], "completed", "{structured}");
    assert!(dir.path().join("site/renamed.md").is_file());
    assert!(!dir.path().join("site/about.md").exists(), "never the model's path");
    let _ = client.cancel().await;
    let shown = Command::new(BIN)
        .env("ASKLOOP_DB", dir.path().join("runs.db"))
        .args(["runs", "show", structured["runId"].as_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(
        shown["resolutions"][0]["edit"]["edited"]["path"], "renamed.md",
        "{shown}"
    );
    assert_eq!(shown["resolutions"][0]["via"], "mcp");
}

#[tokio::test]
async fn askloop_mcp_tells_a_client_without_elicitation_that_the_run_waits_and_where_to_answer() {
    let dir = tempfile::tempdir().unwrap();
    let client = ().serve(askloop_mcp(dir.path())).await.unwrap();
    let result = client.peer().call_tool(ask("Deploy the app")).await.unwrap();
    let structured = result.structured_content.unwrap();
    assert_eq!(structured["status"], "suspended");
    let run_id = structured["runId"].as_str().unwrap();
    assert_eq!(structured["answerUrl"], format!("http://127.0.0.1:4111/runs/{run_id}"));
    let _ = client.cancel().await;
    // The run waits in the database, as any other process sees it.
    let shown = Command::new(BIN)
        .env("ASKLOOP_DB", dir.path().join("runs.db"))
        .args(["runs", "show", run_id, "--json"])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["status"], "suspended", "{shown}");
}

/// A model that says back the first user message it is given: the call's
/// own message on a new thread, the thread's first message after that (its
/// turn is picked by the assistant messages it receives).
const CHAT_SCRIPT: &str = r#"{"turns": [
  {"text": "You said: {{input}}"},
  {"text": "Earlier you said: {{input}}"},
  {"text": "Earlier you said: {{input}}"}
]}"#;

/// `askloop mcp` serving an agent `chatter` without questions, on the
/// database in `dir`, with `--resource` and `ASKLOOP_RESOURCE` as given.
fn chatter_mcp(dir: &Path, flag: Option<&str>, env: Option<&str>) -> TokioChildProcess {
    std::fs::write(dir.join("chat.json"), CHAT_SCRIPT).unwrap();
    std::fs::write(dir.join("askloop.toml"), "[agents.chatter]\nscript = \"chat.json\"\n").unwrap();
    let mut cmd = mcp_command(dir);
    if let Some(resource) = flag {
        cmd.args(["--resource", resource]);
    }
    if let Some(resource) = env {
        cmd.env("ASKLOOP_RESOURCE", resource);
    }
    TokioChildProcess::new(cmd).unwrap()
}

/// What `ask_chatter` answers to `message` on `thread`.
async fn chat(client: &rmcp::service::RunningService<RoleClient, ()>, message: &str, thread: &str) -> String {
    let mut params = CallToolRequestParams::new("ask_chatter");
    params.arguments = json!({"message": message, "thread": thread}).as_object().cloned();
    let result = client.peer().call_tool(params).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    result.structured_content.unwrap()["text"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn askloop_mcp_continues_a_named_thread_of_the_resource_it_was_started_with() {
    let dir = tempfile::tempdir().unwrap();
    // --resource wins over ASKLOOP_RESOURCE.
    let ana = ().serve(chatter_mcp(dir.path(), Some("ana"), Some("bo"))).await.unwrap();
    assert_eq!(chat(&ana, "my name is Ana", "t1").await, "You said: my name is Ana");
    assert_eq!(
        chat(&ana, "what is my name?", "t1").await,
        "Earlier you said: my name is Ana",
        "the second call's model request holds the first exchange"
    );
    let _ = ana.cancel().await;

    // Another resource's thread of the same id is another thread.
    let bo = ().serve(chatter_mcp(dir.path(), None, Some("bo"))).await.unwrap();
    assert_eq!(chat(&bo, "I am Bo", "t1").await, "You said: I am Bo");
    let _ = bo.cancel().await;
    // The same resource in another process, from the environment: the
    // thread is in the database.
    let again = ().serve(chatter_mcp(dir.path(), None, Some("ana"))).await.unwrap();
    assert_eq!(chat(&again, "still me", "t1").await, "Earlier you said: my name is Ana");
    let _ = again.cancel().await;

    let help = Command::new(BIN).args(["mcp", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(
        help.contains("--resource") && help.contains("ASKLOOP_RESOURCE") && help.contains("login name"),
        "{help}"
    );
    let refused = Command::new(BIN)
        .env("ASKLOOP_DB", dir.path().join("runs.db"))
        .current_dir(dir.path())
        .args(["mcp", "--resource", ".."])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("resource id"), "{stderr}");
}

#[test]
fn the_official_typescript_sdk_client_lists_calls_and_answers_askloop_mcp() {
    let client = repo_root().join("tests/mcp/client.mjs");
    let sdk = repo_root().join("tests/mcp/node_modules/@modelcontextprotocol/sdk/package.json");
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let missing = if !node {
        Some("node is not installed".to_owned())
    } else if !sdk.is_file() {
        Some(format!("{} is missing: run npm ci in tests/mcp", sdk.display()))
    } else {
        None
    };
    if skipped_for_lack_of("TypeScript SDK client", missing) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    write_deployer(dir.path());
    // The client starts `askloop` itself, with this environment.
    let mut node = Command::new("node");
    for name in common::CALLER_SETTINGS {
        node.env_remove(name);
    }
    let output = node.arg(&client).arg(BIN).arg(dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let seen: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| panic!("{err}: {stderr}"));
    assert_eq!(seen["tools"], json!(["ask_deployer"]));
    assert_eq!(seen["asked"][0]["message"], "Which environment?");
    assert_eq!(
        seen["asked"][0]["requestedSchema"]["properties"]["answer"]["enum"],
        json!(["staging", "production"])
    );
    assert_eq!(seen["answered"]["structuredContent"]["status"], "completed", "{seen}");
    assert!(
        seen["answered"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("staging"),
        "{seen}"
    );
    let waiting = &seen["waiting"]["structuredContent"];
    assert_eq!(waiting["status"], "suspended", "{seen}");
    let run_id = waiting["runId"].as_str().unwrap();
    assert_eq!(waiting["answerUrl"], format!("http://127.0.0.1:4111/runs/{run_id}"));
}

#[tokio::test]
async fn askloop_serve_offers_its_agents_at_mcp_behind_the_api_token() {
    let dir = tempfile::tempdir().unwrap();
    write_deployer(dir.path());
    let serving = Serve::in_dir(dir.path()).env("ASKLOOP_API_TOKEN", "s3cret").start();
    let url = serving.url("/mcp");

    let refused = reqwest::Client::new()
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401, "no token, no MCP");

    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header("s3cret");
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    assert_eq!(tools[0].name, "ask_deployer");
    let result = client.peer().call_tool(ask("Deploy the app")).await.unwrap();
    let structured = result.structured_content.unwrap();
    assert_eq!(structured["status"], "suspended");
    let run_id = structured["runId"].as_str().unwrap();
    assert_eq!(structured["answerUrl"], serving.url(&format!("/runs/{run_id}")));
    let _ = client.cancel().await;
}

/// Two agents whose call of the reference server's `echo` waits for
/// approval: `named` names it in `require_approval`, `whole` marks the
/// server's table `require_approval = true`.
fn approval_config(dir: &Path, entry: &Path, named: &str) -> PathBuf {
    std::fs::write(dir.join("echo.json"), ECHO_SCRIPT).unwrap();
    let server = format!(
        "name = \"everything\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\ntools = [\"echo\"]\n",
        entry.display().to_string()
    );
    let text = format!(
        "[agents.named]\nscript = \"echo.json\"\nrequire_approval = [{named:?}]\n\n[[agents.named.mcp]]\n{server}\n\
         [agents.whole]\nscript = \"echo.json\"\n\n[[agents.whole.mcp]]\n{server}require_approval = true\n"
    );
    let path = dir.join("askloop.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn a_call_of_an_mcp_servers_tool_waits_for_approval_through_askloop_serve_and_runs_after_it() {
    let Some(entry) = reference_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = approval_config(dir.path(), &entry, "echo");
    let serving = serve(dir.path(), &config);
    let client = reqwest::Client::new();
    let listed: Value = client
        .get(serving.url("/api/agents"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for agent in ["named", "whole"] {
        assert_eq!(listed[agent]["tools"]["echo"]["requireApproval"], true, "{listed}");
        let chunks = post(
            &client,
            serving.url(&format!("/api/agents/{agent}/stream")),
            json!({"messages": "Echo."}),
        )
        .await;
        let waiting = chunks.last().unwrap();
        assert_eq!(waiting["type"], "tool-call-approval", "{agent}: {chunks:?}");
        assert_eq!(waiting["payload"]["toolName"], "echo");
        assert!(
            !chunks.iter().any(|c| c["type"] == "tool-result"),
            "{agent}: nothing ran before approval: {chunks:?}"
        );
        let approved = post(
            &client,
            serving.url(&format!("/api/agents/{agent}/approve-tool-call")),
            json!({"runId": waiting["runId"], "toolCallId": waiting["payload"]["toolCallId"]}),
        )
        .await;
        assert_eq!(finish_text(&approved), "Said: Echo: hello over stdio", "{agent}");
    }
}

#[test]
fn askloop_serve_refuses_an_approval_name_no_tool_has_and_starts_without_a_server_it_cannot_reach() {
    let Some(entry) = reference_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = approval_config(dir.path(), &entry, "ask_approval");
    let out = Serve::in_dir(dir.path())
        .config(&config)
        .addr("127.0.0.1:0")
        .command()
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("agents.named.require_approval[0]")
            && err.contains(r#"agent named has no tool "ask_approval"; its tools: ask_user, echo"#),
        "{err}"
    );

    // A server that is down is reported, and the names it may have are
    // left unchecked: the server starts.
    let text = std::fs::read_to_string(&config).unwrap().replacen(
        "command = \"node\"",
        "command = \"/nonexistent/mcp-server\"",
        1,
    );
    std::fs::write(&config, text).unwrap();
    let serving = serve(dir.path(), &config);
    let banner = serving.banner.join("\n");
    assert!(
        banner.contains("warning") && banner.contains("agents.named.mcp[0]") && banner.contains("starts without"),
        "{banner}"
    );
    assert!(banner.contains(r#""ask_approval" could not be checked"#), "{banner}");
}

/// A person who allows every call, always in the conversation.
#[derive(Clone, Default)]
struct AlwaysAllows {
    asked: Arc<Mutex<Vec<Value>>>,
}

impl ClientHandler for AlwaysAllows {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        self.asked.lock().unwrap().push(serde_json::to_value(&request).unwrap());
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({"approve": true, "alwaysInThisConversation": true})))
    }

    fn get_info(&self) -> ClientConfig {
        Person::default().get_info()
    }
}

#[tokio::test]
async fn an_approval_allowed_always_over_mcp_lets_the_threads_next_call_run_without_a_form() {
    let dir = tempfile::tempdir().unwrap();
    let two = r#"{"turns": [
      {"toolCalls": [{"id": "call_a", "name": "write_file", "args": {"path": "a.md", "content": "a"}}]},
      {"text": "Published: {{toolResults}}"},
      {"toolCalls": [{"id": "call_b", "name": "write_file", "args": {"path": "b.md", "content": "b"}}]},
      {"text": "Published again: {{toolResults}}"}
    ]}"#;
    let person = AlwaysAllows::default();
    let client = person.clone().serve(publisher_mcp(dir.path(), two)).await.unwrap();
    let on_thread = |message: &str| {
        let mut params = CallToolRequestParams::new("ask_publisher");
        params.arguments = json!({"message": message, "thread": "site"}).as_object().cloned();
        params
    };
    let first = client.peer().call_tool(on_thread("Publish a")).await.unwrap();
    assert_eq!(first.structured_content.unwrap()["status"], "completed");
    let asked = person.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    let field = &asked[0]["requestedSchema"]["properties"]["alwaysInThisConversation"];
    assert_eq!(field["type"], "boolean", "{asked:?}");

    let second = client.peer().call_tool(on_thread("Publish b")).await.unwrap();
    let structured = second.structured_content.unwrap();
    assert_eq!(structured["status"], "completed", "{structured}");
    assert_eq!(person.asked.lock().unwrap().len(), 1, "no form the second time");
    assert!(dir.path().join("site/b.md").is_file());
    let _ = client.cancel().await;
    let shown = Command::new(BIN)
        .env("ASKLOOP_DB", dir.path().join("runs.db"))
        .args(["runs", "show", structured["runId"].as_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["resolutions"][0]["via"], "grant", "{shown}");
    assert_eq!(shown["resolutions"][0]["grant"]["grantedVia"], "mcp", "{shown}");
}

/// The model of an agent without `ask_user`: it calls `ask_user` anyway
/// (the name the MCP server's tool has), and the server's `lookup`.
const PLAIN_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "What is your password?"}},
                 {"name": "lookup", "args": {"word": "askloop"}}]},
  {"text": "Done: {{toolResults}}"}
]}"#;

/// The model of an agent with `ask_user`: it asks which environment.
const HELPER_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?",
     "options": [{"label": "staging"}, {"label": "production"}]}}]},
  {"text": "Deploying to {{toolResults}}."}
]}"#;

/// Two agents with the server of `tests/mcp/ask_user_server.mjs`, whose
/// tool `ask_user` takes the built-in's name: `plain` without the built-in
/// `ask_user` (and without instructions of its own), `helper` with it.
/// Every call that reaches the server is logged in `dir/calls.log`.
fn asker_config(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("plain.json"), PLAIN_SCRIPT).unwrap();
    std::fs::write(dir.join("helper.json"), HELPER_SCRIPT).unwrap();
    let entry = repo_root().join("tests/mcp/ask_user_server.mjs");
    let server = format!(
        "name = \"asker\"\ncommand = \"node\"\nargs = [{:?}]\nenv = {{ CALLS_LOG = {:?} }}\n",
        entry.display().to_string(),
        dir.join("calls.log").display().to_string()
    );
    let text = format!(
        "[agents.plain]\nscript = \"plain.json\"\ntools = []\n\n[[agents.plain.mcp]]\n{server}\n\
         [agents.helper]\nscript = \"helper.json\"\n\n[[agents.helper.mcp]]\n{server}"
    );
    let path = dir.join("askloop.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `GET url`, read as JSON.
async fn get_json(client: &reqwest::Client, url: String) -> Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn an_mcp_servers_tool_named_like_a_built_in_is_left_out_and_never_shown_as_a_question() {
    let Some(_) = reference_server() else {
        return;
    };
    let web = repo_root().join("tests/web");
    let browser = common::missing_browser(&web);
    if std::env::var_os("CI").is_some() {
        assert_eq!(browser, None, "the browser part runs under CI");
    }
    let dir = tempfile::tempdir().unwrap();
    let config = asker_config(dir.path());
    let serving = serve(dir.path(), &config);

    // Both agents start, each without the server's ask_user, and a warning
    // names the agent's table, the server and the tool.
    for agent in ["plain", "helper"] {
        let warning = serving
            .banner
            .iter()
            .find(|line| line.contains(&format!("agents.{agent}.mcp[0]")))
            .unwrap_or_else(|| panic!("no warning about {agent}: {:?}", serving.banner));
        assert!(
            warning.contains("warning")
                && warning.contains("the MCP server asker offers a tool named ask_user")
                && warning.contains(&format!("agent {agent} goes without that tool of asker")),
            "{warning}"
        );
    }
    let client = reqwest::Client::new();
    let agents = get_json(&client, serving.url("/api/agents")).await;
    let tools = |agent: &str| -> Vec<String> { agents[agent]["tools"].as_object().unwrap().keys().cloned().collect() };
    assert_eq!(tools("plain"), ["lookup"], "{agents}");
    assert_eq!(tools("helper"), ["ask_user", "lookup"], "{agents}");
    assert_ne!(
        agents["helper"]["tools"]["ask_user"]["description"], "Ask the user a question.",
        "helper's ask_user is askloop's own"
    );
    let instructions = agents["plain"]["instructions"].as_str().unwrap();
    assert!(
        !instructions.contains("ask_user"),
        "the default instructions of an agent without ask_user do not send the model to one: {instructions}"
    );

    // The plain agent's model calls ask_user all the same: the call reaches
    // no server and asks no one; lookup reaches the server.
    let chunks = post(
        &client,
        serving.url("/api/agents/plain/stream"),
        json!({"messages": "Log me in.", "memory": {"thread": "t-plain", "resource": "page"}}),
    )
    .await;
    assert!(finish_text(&chunks).starts_with("Done:"), "{chunks:?}");
    assert!(
        !chunks.iter().any(|c| c["type"] == "tool-call-suspended"),
        "no question was asked: {chunks:?}"
    );
    let plain_run = chunks[0]["runId"].as_str().unwrap().to_owned();
    let calls = std::fs::read_to_string(dir.path().join("calls.log")).unwrap();
    let reached: Vec<Value> = calls.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(reached.len(), 1, "{calls}");
    assert_eq!(reached[0]["name"], "lookup", "{calls}");

    // The helper's question is the built-in's, answered over MCP by a
    // client that named itself.
    let mcp = Person::default()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(serving.url("/mcp")),
        ))
        .await
        .unwrap();
    let mut call = CallToolRequestParams::new("ask_helper");
    call.arguments = json!({"message": "Deploy the app"}).as_object().cloned();
    let result = mcp.peer().call_tool(call).await.unwrap();
    let _ = mcp.cancel().await;
    let structured = result.structured_content.unwrap();
    assert_eq!(structured["status"], "completed", "{structured}");
    let helper_run = structured["runId"].as_str().unwrap().to_owned();

    // The API says which calls named ask_user are the built-in's questions.
    for (run, built_in) in [(&plain_run, false), (&helper_run, true)] {
        let shown = get_json(&client, serving.url(&format!("/api/runs/{run}"))).await;
        assert_eq!(shown["builtInAskUser"], built_in, "{shown}");
    }
    let messages = get_json(
        &client,
        serving.url("/api/memory/threads/t-plain/messages?resourceId=page"),
    )
    .await;
    let invocations: Vec<&Value> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"]["parts"].as_array().into_iter().flatten())
        .filter(|p| p["type"] == "tool-invocation")
        .map(|p| &p["toolInvocation"])
        .collect();
    assert_eq!(invocations.len(), 2, "{messages}");
    assert!(
        invocations.iter().all(|i| i.get("builtInAskUser").is_none()),
        "{messages}"
    );

    // And the page draws them so.
    if skipped_for_lack_of("the browser part", browser) {
        return;
    }
    let screenshots = common::screenshots_dir();
    let status = Command::new("node")
        .args(["--test", "--test-concurrency=1", "mcp_names.test.mjs"])
        .current_dir(&web)
        .env("ASKLOOP_WEB_URL", &serving.base)
        .env("ASKLOOP_PLAIN_RUN", &plain_run)
        .env("ASKLOOP_PLAIN_THREAD", "t-plain")
        .env("ASKLOOP_HELPER_RUN", &helper_run)
        .env("ASKLOOP_WEB_SCREENSHOTS", &screenshots)
        .stdin(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "the browser test failed ({status}); its output is above"
    );
}

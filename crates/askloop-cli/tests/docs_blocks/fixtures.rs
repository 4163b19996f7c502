//! The servers the doc files' blocks expect, and the databases they name.

use std::path::Path;

use askloop_store::conformance::{drop_schema, postgres_test_url, unique_schema_name};

use super::site::{Fixture, workspace};

/// How the docs write a PostgreSQL database of the reader's. It is filled
/// in with the test database (`ASKLOOP_TEST_DATABASE_URL`), in a schema of
/// the test's own, dropped afterwards.
pub const POSTGRES: &str = "postgres://user@host:5432/askloop";

/// The server a file's blocks expect.
pub fn fixture(file: &str) -> Fixture {
    match file {
        // The agents its examples name: see `write_server_agents`.
        "docs/server.md" => Fixture {
            agents: Some(write_server_agents),
            db: Some("runs.db"),
            lacks: Some(node_missing),
        },
        // `clerk`, whose MCP server (the reference server, from tests/mcp)
        // asks for a form as its toml block sets it up.
        "docs/mcp.md" => Fixture {
            agents: Some(write_clerk),
            db: Some("runs.db"),
            lacks: Some(reference_server_missing),
        },
        // Its commands run on the database every instance shares.
        "docs/operations.md" => Fixture {
            agents: None,
            db: Some(POSTGRES),
            lacks: None,
        },
        _ => Fixture::default(),
    }
}

/// The agents of docs/server.md's examples. Its curl and
/// @mastra/client-js blocks (trimmed from tests/interop's) name those of
/// the interop test: `assistant` asks which environment, `writer`'s
/// write_file waits for approval. Its decisions call `deploy` and
/// `send_mail`, tools of an MCP server of the test's own
/// (`tests/docs/ops-mcp.mjs`) whose calls wait for approval: `deployer`
/// asks which environment, then deploys; `releaser` deploys three times
/// and asks when, all in one step (calls `call_1` to `call_4`), then deploys
/// twice, then once; `mailer` sends a mail.
fn write_server_agents(dir: &Path) {
    const DEPLOYER: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment?"}}]},
  {"toolCalls": [{"name": "deploy", "args": {"env": "production"}}]},
  {"text": "Deployed: {{toolResults}}"}
]}"#;
    const RELEASER: &str = r#"{"turns": [
  {"toolCalls": [
    {"name": "deploy", "id": "call_1", "args": {"env": "staging"}},
    {"name": "deploy", "id": "call_2", "args": {"env": "production"}},
    {"name": "deploy", "id": "call_3", "args": {"env": "production"}},
    {"name": "ask_user", "id": "call_4", "args": {"question": "When should it go out?"}}]},
  {"toolCalls": [{"name": "deploy", "args": {"env": "staging"}}, {"name": "deploy", "args": {"env": "canary"}}]},
  {"toolCalls": [{"name": "deploy", "args": {"env": "production"}}]},
  {"text": "Released: {{toolResults}}"}
]}"#;
    const MAILER: &str = r#"{"turns": [
  {"toolCalls": [{"name": "send_mail", "args": {"to": "team@example.com", "subject": "Release notes"}}]},
  {"text": "Sent: {{toolResults}}"}
]}"#;
    crate::common::node::write_agents(dir);
    let ops = format!(
        "name = \"ops\"\ncommand = \"node\"\nargs = [{:?}]\nrequire_approval = true\n",
        workspace().join("tests/docs/ops-mcp.mjs").display().to_string()
    );
    let mut config = std::fs::read_to_string(dir.join("askloop.toml")).unwrap();
    for (agent, script) in [("deployer", DEPLOYER), ("releaser", RELEASER), ("mailer", MAILER)] {
        std::fs::write(dir.join(format!("{agent}.json")), script).unwrap();
        config.push_str(&format!(
            "\n[agents.{agent}]\nscript = \"{agent}.json\"\n\n[[agents.{agent}.mcp]]\n{ops}"
        ));
    }
    std::fs::write(dir.join("askloop.toml"), config).unwrap();
}

/// Why the MCP SDK of tests/mcp cannot run here, if it cannot.
fn node_missing() -> Option<String> {
    crate::common::node::node_missing(&workspace().join("tests/mcp"), "@modelcontextprotocol/sdk")
}

/// The MCP reference server's entry point in tests/mcp.
fn reference_server() -> std::path::PathBuf {
    workspace().join("tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// Why the reference server cannot run here, if it cannot.
fn reference_server_missing() -> Option<String> {
    crate::common::node::node_missing(
        &workspace().join("tests/mcp"),
        "@modelcontextprotocol/server-everything",
    )
}

/// `clerk` calls the reference server's `trigger-elicitation-request`,
/// which asks for a form with a `name`; then it says what came back.
fn write_clerk(dir: &Path) {
    const SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "trigger-elicitation-request"}]},
  {"text": "Done: {{toolResults}}"}
]}"#;
    let server = reference_server();
    let config = format!(
        "[agents.clerk]\nscript = \"clerk.json\"\n\n[[agents.clerk.mcp]]\nname = \"everything\"\ncommand = \"node\"\n\
         args = [{:?}, \"stdio\"]\ntools = [\"trigger-elicitation-request\"]\n",
        server.display().to_string()
    );
    std::fs::write(dir.join("clerk.json"), SCRIPT).unwrap();
    std::fs::write(dir.join("askloop.toml"), config).unwrap();
}

/// A schema of the test database for one file's blocks, dropped when it
/// goes.
pub struct Postgres {
    base: String,
    schema: String,
    /// The database URL the blocks use.
    pub url: String,
}

impl Postgres {
    /// `None` when PostgreSQL tests are skipped here (said why; never under
    /// `CI=true`).
    pub fn new(file: &str) -> Option<Postgres> {
        let base = postgres_test_url(&format!("the PostgreSQL blocks of {file}"))?;
        let schema = unique_schema_name();
        let separator = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{separator}schema={schema}");
        Some(Postgres { base, schema, url })
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(drop_schema(&self.base, &self.schema));
    }
}

//! `askloop mcp` driven over its pipes line by line, as a client that sends
//! something wrong would drive it: every line that is not a usable message
//! gets a JSON-RPC error (parse error -32700, invalid request -32600 with
//! the request's id when it can be read, invalid params -32602), except a
//! notification, which JSON-RPC never answers; and the server goes on
//! serving the next request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

mod common;

use common::askloop_async;

/// The longest line `askloop mcp` reads as one message.
const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// A running `askloop mcp`, its stdin and its stdout read line by line.
struct Pipes {
    _dir: tempfile::TempDir,
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Pipes {
    async fn start() -> Pipes {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("echo.json"), r#"{"turns": [{"text": "hello"}]}"#).unwrap();
        std::fs::write(
            dir.path().join("askloop.toml"),
            "[agents.helper]\nscript = \"echo.json\"\n",
        )
        .unwrap();
        let mut child = askloop_async()
            .env("ASKLOOP_DB", dir.path().join("runs.db"))
            .current_dir(dir.path())
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Pipes {
            _dir: dir,
            _child: child,
            stdin,
            stdout,
            next_id: 100,
        }
    }

    async fn send(&mut self, line: &[u8]) {
        self.stdin.write_all(line).await.unwrap();
        self.stdin.write_all(b"\n").await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// The next line the server writes. A server that never answers fails
    /// the test instead of hanging it.
    async fn reply(&mut self) -> Value {
        let mut line = String::new();
        let read = tokio::time::timeout(Duration::from_secs(60), self.stdout.read_line(&mut line))
            .await
            .expect("askloop mcp answered within a minute")
            .unwrap();
        assert!(read > 0, "askloop mcp closed its stdout");
        serde_json::from_str(&line).unwrap_or_else(|err| panic!("{err}: {line:?}"))
    }

    async fn initialize(&mut self) {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "pipes", "version": "1"}}});
        self.send(init.to_string().as_bytes()).await;
        let reply = self.reply().await;
        assert_eq!(reply["id"], 0, "{reply}");
        assert!(reply["result"]["serverInfo"].is_object(), "{reply}");
        self.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
    }

    /// Lists the tools and checks the answer: the server still serves.
    async fn still_serves(&mut self) {
        self.next_id += 1;
        let id = self.next_id;
        let list = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"});
        self.send(list.to_string().as_bytes()).await;
        let reply = self.reply().await;
        assert_eq!(reply["id"], id, "the next reply answers the next request: {reply}");
        assert_eq!(reply["result"]["tools"][0]["name"], "ask_helper", "{reply}");
    }
}

/// Asserts a JSON-RPC 2.0 error reply with this id (`null` included, as
/// JSON-RPC requires when the id cannot be read) and code.
fn assert_error(reply: &Value, id: Value, code: i64, what: &str) {
    assert_eq!(reply["jsonrpc"], "2.0", "{what}: {reply}");
    assert_eq!(reply.get("id"), Some(&id), "{what}: {reply}");
    assert_eq!(reply["error"]["code"], code, "{what}: {reply}");
    assert!(
        reply["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: the error says what was wrong: {reply}"
    );
}

#[tokio::test]
async fn every_bad_line_gets_a_json_rpc_error_and_the_server_serves_on() {
    let mut pipes = Pipes::start().await;
    // Before the handshake too.
    pipes.send(b"hello?").await;
    assert_error(
        &pipes.reply().await,
        Value::Null,
        -32700,
        "plain text before initialize",
    );
    pipes.initialize().await;
    pipes.still_serves().await;

    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let unparsable: Vec<(&str, Vec<u8>)> = vec![
        ("malformed JSON", br#"{"jsonrpc":"2.0","id":1,"method":"#.to_vec()),
        ("plain text", b"tools/list please".to_vec()),
        (
            "invalid UTF-8",
            b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"p\xffing\"}".to_vec(),
        ),
        (
            "a raw NUL",
            b"{\"jsonrpc\":\"2.0\",\"id\":3,\0\"method\":\"ping\"}".to_vec(),
        ),
        ("deep nesting", deep.into_bytes()),
    ];
    for (what, line) in unparsable {
        pipes.send(&line).await;
        assert_error(&pipes.reply().await, Value::Null, -32700, what);
        pipes.still_serves().await;
    }

    let invalid: Vec<(&str, Value, Value, i64)> = vec![
        (
            "a wrong jsonrpc version",
            json!({"jsonrpc": "1.0", "id": "abc", "method": "ping"}),
            json!("abc"),
            -32600,
        ),
        ("no method", json!({"jsonrpc": "2.0", "id": 7}), json!(7), -32600),
        (
            "a method that is not a string",
            json!({"jsonrpc": "2.0", "id": 8, "method": 42}),
            json!(8),
            -32600,
        ),
        (
            "an id that is neither a string nor an integer",
            json!({"jsonrpc": "2.0", "id": {"n": 1}, "method": "ping"}),
            Value::Null,
            -32600,
        ),
        (
            "a batch",
            json!([{"jsonrpc": "2.0", "id": 9, "method": "ping"}]),
            Value::Null,
            -32600,
        ),
        ("a bare number", json!(12), Value::Null, -32600),
        (
            "params that do not fit the method",
            json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": "ask_helper"}),
            json!(10),
            -32602,
        ),
        (
            "a tools/call without a name",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"arguments": {}}}),
            json!(11),
            -32602,
        ),
        (
            "a tools/call whose name is a number",
            json!({"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": 5}}),
            json!(12),
            -32602,
        ),
    ];
    for (what, message, id, code) in invalid {
        pipes.send(message.to_string().as_bytes()).await;
        assert_error(&pipes.reply().await, id, code, what);
        pipes.still_serves().await;
    }

    // A notification is never answered, even a malformed one: the next
    // reply is the next request's.
    pipes
        .send(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"nope"}"#)
        .await;
    pipes.still_serves().await;
}

#[tokio::test]
async fn a_line_over_the_limit_is_answered_and_skipped() {
    let mut pipes = Pipes::start().await;
    pipes.initialize().await;
    let mut long = br#"{"jsonrpc":"2.0","id":5,"method":"ping","params":{"pad":""#.to_vec();
    long.resize(MAX_LINE_BYTES + 1, b'x');
    long.extend_from_slice(br#""}}"#);
    pipes.send(&long).await;
    let reply = pipes.reply().await;
    assert_error(&reply, Value::Null, -32600, "a line over 16 MiB");
    assert!(
        reply["error"]["message"].as_str().unwrap().contains("16777216"),
        "the error names the limit: {reply}"
    );
    pipes.still_serves().await;
}

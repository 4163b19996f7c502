//! Requests the server refuses before any route runs, over a bare TCP
//! socket (a client library would not send them): each gets the JSON error
//! of every other failure, with a message that says what was wrong.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response as read off the socket: its status line and headers, and its
/// body as JSON.
struct RawResponse {
    head: String,
    body: Value,
}

impl RawResponse {
    fn status(&self) -> u16 {
        self.head.split(' ').nth(1).unwrap().parse().unwrap()
    }

    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap()
    }

    fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap()
    }
}

/// Sends `request` as it is and reads the first response (its body by
/// `Content-Length`). The request is written while the response is read:
/// the server may answer before it has read all of a request it refuses.
async fn exchange(server: &TestServer, request: &[u8]) -> RawResponse {
    let stream = TcpStream::connect(server.addr).await.unwrap();
    let (mut from_server, mut to_server) = stream.into_split();
    let request = request.to_vec();
    let writing = tokio::spawn(async move {
        // Refused part way: the rest is not wanted.
        let _ = to_server.write_all(&request).await;
        to_server
    });
    let response = read_response(&mut from_server).await;
    drop(writing.await.unwrap());
    response
}

async fn read_response(stream: &mut (impl AsyncRead + Unpin)) -> RawResponse {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "closed before a whole head: {:?}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8(seen[..head_end].to_vec()).unwrap();
    let length: usize = head
        .lines()
        .find_map(|line| {
            line.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no Content-Length: {head}"))
        .trim()
        .parse()
        .unwrap();
    while seen.len() < head_end + length {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the whole body: {head}");
        seen.extend_from_slice(&buf[..n]);
    }
    let body = serde_json::from_slice(&seen[head_end..head_end + length])
        .unwrap_or_else(|err| panic!("not JSON ({err}): {head}{}", String::from_utf8_lossy(&seen[head_end..])));
    RawResponse { head, body }
}

/// Asserts that `response` is the JSON error `status` / `code`, and
/// returns its message.
fn refused(response: &RawResponse, status: u16, code: &str) -> String {
    assert_eq!(response.status(), status, "{}{}", response.head, response.body);
    assert!(
        response
            .head
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{}",
        response.head
    );
    assert_eq!(response.code(), code, "{}", response.body);
    response.message().to_owned()
}

async fn served() -> TestServer {
    let store = memory_store();
    TestServer::start(vec![assistant(&store)], store).await
}

#[tokio::test]
async fn a_declared_body_over_the_limit_expecting_100_continue_gets_413_and_no_100() {
    let server = served().await;
    let response = exchange(
        &server,
        b"POST /api/agents/assistant/stream HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n",
    )
    .await;
    assert_eq!(response.status(), 413, "{}", response.head);
    assert_eq!(response.code(), "body_too_large");
    assert!(response.message().contains("1048576 bytes"), "{}", response.message());
}

#[tokio::test]
async fn a_request_line_that_is_not_http_gets_a_json_400_quoting_it() {
    let server = served().await;
    let message = refused(
        &exchange(&server, b"hello there\r\n\r\n").await,
        400,
        "malformed_request",
    );
    assert!(message.contains("\"hello there\""), "{message}");
    assert!(message.contains("METHOD /path HTTP/1.1"), "{message}");
}

#[tokio::test]
async fn a_malformed_request_after_a_good_one_on_the_same_connection_gets_a_json_400() {
    let server = served().await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"GET /api/agents HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_response(&mut stream).await.status(), 200);
    stream
        .write_all(b"GET /api/agents HTTP/1.1\r\nHost localhost\r\n\r\n")
        .await
        .unwrap();
    let message = refused(&read_response(&mut stream).await, 400, "malformed_request");
    assert!(message.contains("\"Host localhost\""), "{message}");
    assert!(message.contains("Name: value"), "{message}");
}

#[tokio::test]
async fn headers_over_the_limit_get_a_json_431_naming_the_limit() {
    let server = served().await;
    let mut request = b"GET /api/agents HTTP/1.1\r\nHost: localhost\r\nX-Big: ".to_vec();
    request.extend(std::iter::repeat_n(b'a', 500 * 1024));
    request.extend_from_slice(b"\r\n\r\n");
    let message = refused(&exchange(&server, &request).await, 431, "headers_too_large");
    assert!(message.contains("128 KiB"), "{message}");
}

#[tokio::test]
async fn two_different_content_lengths_get_a_json_400_naming_both() {
    let server = served().await;
    let response = exchange(
        &server,
        b"POST /api/agents/assistant/stream HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{}   ",
    )
    .await;
    let message = refused(&response, 400, "malformed_request");
    assert!(
        message.contains("Content-Length") && message.contains('5') && message.contains('6'),
        "{message}"
    );
}

#[tokio::test]
async fn a_negative_content_length_gets_a_json_400_quoting_it() {
    let server = served().await;
    let response = exchange(
        &server,
        b"POST /api/agents/assistant/stream HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: -1\r\n\r\n",
    )
    .await;
    let message = refused(&response, 400, "malformed_request");
    assert!(message.contains("Content-Length \"-1\""), "{message}");
    assert!(message.contains("whole number of bytes"), "{message}");
}

#[tokio::test]
async fn a_path_that_is_not_utf8_gets_a_json_400_saying_to_percent_encode_it() {
    let server = served().await;
    let request = b"GET /api/runs/\xff\xfe HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let message = refused(&exchange(&server, request).await, 400, "malformed_request");
    assert!(
        message.contains("/api/runs/\\xff\\xfe"),
        "the target, escaped: {message}"
    );
    assert!(
        message.contains("not UTF-8") && message.contains("percent-encode"),
        "{message}"
    );
}

#[tokio::test]
async fn a_uri_over_the_limit_gets_a_json_414_naming_the_limit() {
    let server = served().await;
    let request = format!(
        "GET /api/runs/{} HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "a".repeat(70_000)
    );
    let message = refused(&exchange(&server, request.as_bytes()).await, 414, "uri_too_long");
    assert!(message.contains("65534 bytes"), "{message}");
}

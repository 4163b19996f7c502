//! `askloop serve` as a real process under clients that hold connections:
//!
//! - **slow-loris**: connections that send their headers a byte at a time
//!   and never finish them, and connections that send headers and part of
//!   a body and then nothing. Meanwhile `/healthz` and a whole round trip
//!   (question, answer, reply) are answered; the server closes the
//!   header-drippers after `--header-timeout` and answers the body-stallers
//!   408 after `--body-timeout`.
//! - **10,000 idle SSE connections**: `GET /api/events`, the live feed the
//!   web page keeps open (an `event: ready`, then nothing but a comment
//!   every 15 s until a run changes). While all are open, other requests
//!   are answered, and a run's change reaches every one of them. (On a
//!   server without tokens every client is one caller, whose streams are
//!   capped at `--max-event-streams`: raised here to hold them all.)
//!
//! The time bounds are hang guards, never timing assertions.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

mod common;

use common::raw::{host_port, open_events, read_to_close, read_until};
use common::{Serve, Serving, chunks};

const DEPLOY_SCRIPT: &str = r#"{"turns": [
  {"toolCalls": [{"name": "ask_user", "args": {"question": "Which environment should I deploy to?",
     "options": [{"label": "staging"}, {"label": "production"}]}}]},
  {"text": "Deploying to {{toolResults}}."}
]}"#;

/// A bound on a hang, never a timing assertion.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// Idle SSE connections held open at once.
const IDLE_STREAMS: usize = 10_000;

fn serve(dir: &Path, extra: &[&str]) -> Serving {
    let script = dir.join("deploy.json");
    std::fs::write(&script, DEPLOY_SCRIPT).unwrap();
    Serve::in_dir(dir)
        .args([std::ffi::OsStr::new("--script"), script.as_os_str()])
        .args(extra)
        .start()
}

/// A whole round trip over HTTP: the question, the answer, the reply.
async fn round_trip(client: &reqwest::Client, serving: &Serving) -> String {
    let asked = serving.ask(client, "assistant", None).await;
    let resumed = serving.answer(client, "assistant", &asked).await;
    let last = chunks(&resumed).pop().unwrap();
    assert_eq!(last["type"], "finish", "{resumed}");
    asked.run_id
}

async fn healthy(client: &reqwest::Client, serving: &Serving) {
    let health = client.get(serving.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_clients_are_cut_off_while_other_requests_are_answered() {
    const DRIPPERS: usize = 200;
    const STALLED_BODIES: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let serving = serve(dir.path(), &["--header-timeout", "2", "--body-timeout", "2"]);
    let addr = host_port(&serving);

    // Headers a byte at a time, never finished: the server must close them.
    let head = b"POST /api/agents/assistant/stream HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";
    let drippers: Vec<_> = (0..DRIPPERS)
        .map(|_| {
            let addr = addr.clone();
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(&addr).await.unwrap();
                for byte in head.iter().chain(std::iter::repeat(&b'a')) {
                    if stream.write_all(&[*byte]).await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                // Written off: the server closed it. What it sent, if anything.
                read_to_close(&mut stream).await
            })
        })
        .collect();
    // Headers and the start of a body, then nothing: a 408 with the reason.
    let stallers: Vec<_> = (0..STALLED_BODIES)
        .map(|_| {
            let addr = addr.clone();
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(&addr).await.unwrap();
                stream
                    .write_all(
                        b"POST /api/agents/assistant/stream HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"messages\": ",
                    )
                    .await
                    .unwrap();
                read_to_close(&mut stream).await
            })
        })
        .collect();

    // While they hold their connections, the server answers.
    let client = reqwest::Client::new();
    tokio::time::timeout(HANG_GUARD, async {
        for _ in 0..3 {
            healthy(&client, &serving).await;
            round_trip(&client, &serving).await;
        }
    })
    .await
    .expect("the server answered while slow clients held connections");

    let closed = tokio::time::timeout(HANG_GUARD, futures::future::join_all(drippers))
        .await
        .expect("the server closed the connections whose headers never ended");
    assert_eq!(closed.len(), DRIPPERS);
    for answer in closed {
        // hyper closes such a connection without a response, or with a 408.
        let answer = answer.unwrap();
        assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    let refused = tokio::time::timeout(HANG_GUARD, futures::future::join_all(stallers))
        .await
        .expect("the server answered the requests whose body stopped");
    for answer in refused {
        let answer = answer.unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("\"body_timeout\""), "{answer}");
        assert!(answer.contains("did not arrive in full within 2 s"), "{answer}");
    }
    healthy(&client, &serving).await;
    println!("slow clients: {DRIPPERS} header drippers closed, {STALLED_BODIES} stalled bodies answered 408");
}

#[tokio::test]
async fn a_body_trickled_a_byte_at_a_time_gets_408_when_the_body_timeout_is_over() {
    let dir = tempfile::tempdir().unwrap();
    let serving = serve(dir.path(), &["--body-timeout", "2"]);
    let body = br#"{"messages": "Deploy the app."}"#;
    let stream = TcpStream::connect(host_port(&serving)).await.unwrap();
    let (mut from_server, mut to_server) = stream.into_split();
    let head = format!(
        "POST /api/agents/assistant/stream HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    to_server.write_all(head.as_bytes()).await.unwrap();
    // A byte every 1.5 s: never silent for the 2 s of --body-timeout, yet
    // the whole body would take 45 s.
    let trickle = tokio::spawn(async move {
        for byte in body {
            if to_server.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1_500)).await;
        }
    });
    // Up to the end of a JSON error (or of a stream's first chunk).
    let answer = tokio::time::timeout(HANG_GUARD, read_until(&mut from_server, "}}"))
        .await
        .expect("the server answered the trickled body");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"body_timeout\""), "{answer}");
    trickle.abort();
}

/// Raises this process's soft open-file limit to its hard limit (children
/// inherit it); the hard limit, or why it cannot be used.
fn raise_open_file_limit(needed: u64) -> Result<u64, String> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| format!("getrlimit: {e}"))?;
    if hard < needed {
        return Err(format!(
            "the hard open-file limit is {hard}; holding {IDLE_STREAMS} connections in this process and \
             in the server needs {needed} (raise it with ulimit -Hn)"
        ));
    }
    if soft < needed {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(|e| format!("setrlimit: {e}"))?;
    }
    Ok(hard)
}

/// The server's resident memory, as the kernel reports it (`VmRSS`).
fn server_memory(serving: &Serving) -> String {
    let status = std::fs::read_to_string(format!("/proc/{}/status", serving.child.id())).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .map_or_else(|| "unknown".to_owned(), |v| v.trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_idle_event_streams_stay_open_while_other_requests_are_answered() {
    // Each connection is a socket here and one in the server, plus margin
    // for the server's database, the client pool and the test harness.
    let needed = IDLE_STREAMS as u64 + 1_024;
    if let Err(why) = raise_open_file_limit(needed) {
        println!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let serving = serve(dir.path(), &["--max-event-streams", &IDLE_STREAMS.to_string()]);
    let addr = host_port(&serving);

    let opening = Arc::new(Semaphore::new(256));
    let streams: Vec<_> = (0..IDLE_STREAMS)
        .map(|_| {
            let addr = addr.clone();
            let opening = Arc::clone(&opening);
            tokio::spawn(async move {
                let _permit = opening.acquire().await.unwrap();
                open_events(&addr).await
            })
        })
        .collect();
    let streams = tokio::time::timeout(HANG_GUARD, futures::future::join_all(streams))
        .await
        .expect("the event streams opened");
    let mut streams: Vec<TcpStream> = streams.into_iter().map(Result::unwrap).collect();
    assert_eq!(streams.len(), IDLE_STREAMS);

    let rss = server_memory(&serving);
    let client = reqwest::Client::new();
    let _run_id = tokio::time::timeout(HANG_GUARD, async {
        healthy(&client, &serving).await;
        round_trip(&client, &serving).await
    })
    .await
    .expect("the server answered with every event stream open");

    // Every stream is alive: the round trip's changes reached each one (as
    // the run's id, or as `null`, "read again", when the store's feed
    // cannot tell which run changed).
    let needle = "event: run".to_owned();
    let reads: Vec<_> = streams
        .drain(..)
        .map(|mut stream| {
            let needle = needle.clone();
            tokio::spawn(async move {
                read_until(&mut stream, &needle).await;
                stream
            })
        })
        .collect();
    let reached = tokio::time::timeout(HANG_GUARD, futures::future::join_all(reads))
        .await
        .expect("the change reached every stream");
    let reached = reached.into_iter().map(Result::unwrap).count();
    assert_eq!(reached, IDLE_STREAMS);
    healthy(&client, &serving).await;
    println!(
        "idle streams: {IDLE_STREAMS} open (server resident memory then {rss}), a run's change reached all {reached}"
    );
}

//! Plain-HTTP model servers (a local Ollama, vLLM or llama.cpp, the test
//! fakes) over HTTP/1 connections that the task reading the response drives
//! itself.
//!
//! Why: reqwest runs each connection on a task of its own, and hyper's HTTP/1
//! body hands a response over one chunk at a time, waiting until the reader
//! has taken one before it decodes the next. A model streams its reply as
//! one chunk per event (a token or a few), so each event wakes the
//! connection's task and then the reader's; on tokio's multi-thread runtime
//! two tasks waking each other in turn soon have the idle worker woken to
//! steal one of them. Here the reader polls the connection in the same poll
//! as the body: bytes read from the socket are decoded and parsed without a
//! hand-over, and the wakes the two halves give each other during that poll
//! are folded into it (a task that wakes itself is sent to the back of the
//! queue, and the idle worker woken, as well).
//!
//! Used only where reqwest would connect straight to the server: an
//! `http://` URL that no proxy environment variable (`HTTP_PROXY`,
//! `ALL_PROXY`, `NO_PROXY`, read as reqwest reads them) sends through a
//! proxy, on a platform where reqwest reads proxies from the environment
//! alone. HTTPS, whose servers speak HTTP/2, and proxied URLs go through
//! reqwest. The response is handed on as a `reqwest::Response`, so the
//! providers read both the same way.

use std::collections::HashMap;
use std::fmt;
use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures::task::AtomicWaker;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::rt::TokioIo;
use reqwest::Url;
use reqwest::header::{HOST, HeaderValue};
use tokio::net::TcpStream;
use tokio::time::Instant;

use askloop::human_duration as human;

/// How long an idle connection is kept for the next call (as reqwest's
/// pool keeps one).
const IDLE_FOR: Duration = Duration::from_secs(90);

/// How many times one poll goes round the connection and its reader while
/// either still wakes the other, before it yields to the runtime.
const ROUNDS: usize = 32;

/// Whether calls to `url` go over [`Connections`]: a plain `http://` URL
/// that reqwest would not send through a proxy.
pub(crate) fn is_direct(url: &Url) -> bool {
    if cfg!(any(target_os = "macos", windows)) {
        // reqwest may read the system's proxy settings there.
        return false;
    }
    if url.scheme() != "http" || url.host().is_none() {
        return false;
    }
    let Ok(uri) = url.as_str().parse::<http::Uri>() else {
        return false;
    };
    hyper_util::client::proxy::matcher::Matcher::from_env()
        .intercept(&uri)
        .is_none()
}

/// Open HTTP/1 connections to plain-HTTP servers, kept between calls.
pub(crate) struct Connections {
    idle: Mutex<HashMap<String, Vec<Idle>>>,
    connect_timeout: Duration,
    idle_per_host: usize,
}

impl fmt::Debug for Connections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connections")
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_per_host", &self.idle_per_host)
            .finish_non_exhaustive()
    }
}

/// A connection between two calls.
struct Idle {
    link: Link,
    since: Instant,
}

/// A connection: the handle that sends requests on it and the connection
/// itself, driven by whoever waits on it.
struct Link {
    sender: SendRequest<reqwest::Body>,
    driven: Driven,
}

/// Why a request on a direct connection failed; the message is the
/// transport error's.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DirectError {
    #[error("cannot connect to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot connect to {url} within the connect timeout of {} (HttpConfig::connect_timeout sets it)", human(*timeout))]
    ConnectTimeout { url: String, timeout: Duration },
    #[error("the request to {url} failed: {source}")]
    Http {
        url: String,
        #[source]
        source: hyper::Error,
    },
    #[error("cannot send the request to {url}: {reason}")]
    Request { url: String, reason: Unsendable },
}

/// Why a request cannot be written to the server itself: its URL, target
/// or `Host` do not make an HTTP/1 request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unsendable {
    #[error("the URL has no host")]
    NoHost,
    #[error(transparent)]
    Request(#[from] reqwest::Error),
    #[error(transparent)]
    Target(#[from] http::uri::InvalidUri),
    #[error(transparent)]
    Host(#[from] http::header::InvalidHeaderValue),
}

impl Connections {
    pub(crate) fn new(connect_timeout: Duration, idle_per_host: usize) -> Arc<Self> {
        Arc::new(Connections {
            idle: Mutex::new(HashMap::new()),
            connect_timeout,
            idle_per_host,
        })
    }

    /// Sends `request` (built by reqwest, for an URL [`is_direct`] accepts)
    /// on a kept connection to its server, or a new one, and returns the
    /// response once its head has come. A kept connection the server closed
    /// meanwhile is replaced without sending the request twice: hyper hands
    /// a request back only when none of it was written.
    pub(crate) async fn send(self: &Arc<Self>, request: reqwest::Request) -> Result<reqwest::Response, DirectError> {
        let url = request.url().as_str().to_owned();
        let key = authority(request.url()).ok_or_else(|| DirectError::Request {
            url: url.clone(),
            reason: Unsendable::NoHost,
        })?;
        let mut request = origin_form(request, &key).map_err(|reason| DirectError::Request {
            url: url.clone(),
            reason,
        })?;
        loop {
            let (mut link, kept) = match self.take(&key) {
                Some(link) => (link, true),
                None => (self.connect(&url, &key).await?, false),
            };
            let ready = {
                let Link { sender, driven } = &mut link;
                poll_fn(|cx| driven.poll_with(cx, |cx| sender.poll_ready(cx))).await
            };
            if let Err(source) = ready {
                if kept {
                    continue;
                }
                return Err(DirectError::Http { url, source });
            }
            let mut sent = std::pin::pin!(link.sender.try_send_request(request));
            let answered = {
                let driven = &mut link.driven;
                poll_fn(|cx| driven.poll_with(cx, |cx| sent.as_mut().poll(cx))).await
            };
            match answered {
                Ok(response) => {
                    let (head, body) = response.into_parts();
                    let body = KeptBody {
                        body,
                        link: Some(Mutex::new(link)),
                        home: Some((Arc::clone(self), key)),
                    };
                    let response = http::Response::from_parts(head, reqwest::Body::wrap(body));
                    return Ok(reqwest::Response::from(response));
                }
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) if kept => request = unsent,
                    _ => {
                        return Err(DirectError::Http {
                            url,
                            source: failed.into_error(),
                        });
                    }
                },
            }
        }
    }

    /// A kept connection to `key` that is still open, if there is one.
    fn take(&self, key: &str) -> Option<Link> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let kept = idle.get_mut(key)?;
        while let Some(mut candidate) = kept.pop() {
            if candidate.since.elapsed() < IDLE_FOR && candidate.link.is_open() {
                return Some(candidate.link);
            }
        }
        None
    }

    /// Keeps a connection whose response was read to its end.
    fn keep(&self, key: String, mut link: Link) {
        if !link.is_open() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let kept = idle.entry(key).or_default();
        kept.retain(|idle| idle.since.elapsed() < IDLE_FOR);
        if kept.len() < self.idle_per_host {
            kept.push(Idle {
                link,
                since: Instant::now(),
            });
        }
    }

    async fn connect(&self, url: &str, key: &str) -> Result<Link, DirectError> {
        let stream = tokio::time::timeout(self.connect_timeout, connect_to(key))
            .await
            .map_err(|_| DirectError::ConnectTimeout {
                url: url.to_owned(),
                timeout: self.connect_timeout,
            })?
            .map_err(|source| DirectError::Connect {
                url: url.to_owned(),
                source,
            })?;
        // As reqwest sets it: a request goes out as soon as it is written.
        stream.set_nodelay(true).map_err(|source| DirectError::Connect {
            url: url.to_owned(),
            source,
        })?;
        let (sender, connection) =
            http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|source| DirectError::Http {
                    url: url.to_owned(),
                    source,
                })?;
        Ok(Link {
            sender,
            driven: Driven::new(connection),
        })
    }
}

/// Connects to `host:port` (an IPv6 address in brackets), trying each
/// address the name resolves to in turn.
async fn connect_to(key: &str) -> std::io::Result<TcpStream> {
    if let Ok(address) = key.parse::<SocketAddr>() {
        return TcpStream::connect(address).await;
    }
    TcpStream::connect(key).await
}

/// `host:port` of a URL, the port given even when it is the default.
fn authority(url: &Url) -> Option<String> {
    let host = url.host_str()?;
    let port = url.port_or_known_default()?;
    Some(format!("{host}:{port}"))
}

/// The request as an HTTP/1 client writes it to the server itself: the
/// path and query as its target, and a `Host` header.
fn origin_form(request: reqwest::Request, key: &str) -> Result<http::Request<reqwest::Body>, Unsendable> {
    let url = request.url();
    let host = match url.port() {
        Some(_) => key.to_owned(),
        None => url.host_str().unwrap_or_default().to_owned(),
    };
    let target = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    };
    let mut request = http::Request::try_from(request)?;
    *request.uri_mut() = target.parse::<http::Uri>()?;
    if !request.headers().contains_key(HOST) {
        let host = HeaderValue::try_from(host)?;
        request.headers_mut().insert(HOST, host);
    }
    Ok(request)
}

impl Link {
    /// Whether the connection can take another request: the server has not
    /// closed it. Polls it once, so a close already read is noticed.
    fn is_open(&mut self) -> bool {
        if self.sender.is_closed() {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        self.driven.connection.poll(&mut cx);
        !self.driven.connection.finished && !self.sender.is_closed()
    }
}

/// A connection future, polled by the task waiting on it, with a waker that
/// folds the wakes given during that poll into it.
struct Driven {
    connection: ConnectionFuture,
    wakes: Arc<Wakes>,
    /// A waker of `wakes`, made once.
    waker: Waker,
}

/// hyper's connection future, polled until it returns.
struct ConnectionFuture {
    future: Pin<Box<Connection<TokioIo<TcpStream>, reqwest::Body>>>,
    /// The future has returned: the connection is closed.
    finished: bool,
}

impl ConnectionFuture {
    fn poll(&mut self, cx: &mut Context<'_>) {
        if !self.finished && self.future.as_mut().poll(cx).is_ready() {
            // Closed, cleanly or not: an error reaches the request or the
            // body waiting on it, which hyper fails.
            self.finished = true;
        }
    }
}

/// The waker the connection and its body are polled with. While their
/// reader polls them, a wake only marks that something moved (the reader
/// goes round again); otherwise it wakes the reader's task.
#[derive(Default)]
struct Wakes {
    task: AtomicWaker,
    polling: AtomicBool,
    woken: AtomicBool,
}

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            self.task.wake();
        }
    }
}

impl Driven {
    fn new(connection: Connection<TokioIo<TcpStream>, reqwest::Body>) -> Self {
        let wakes = Arc::new(Wakes::default());
        Driven {
            connection: ConnectionFuture {
                future: Box::pin(connection),
                finished: false,
            },
            waker: Waker::from(Arc::clone(&wakes)),
            wakes,
        }
    }

    /// Polls `wait` (the response head, the next frame of the body) with
    /// the connection driven in the same poll, going round while either
    /// wakes the other.
    fn poll_with<T>(&mut self, cx: &mut Context<'_>, mut wait: impl FnMut(&mut Context<'_>) -> Poll<T>) -> Poll<T> {
        let Driven {
            connection,
            wakes,
            waker,
        } = self;
        wakes.task.register(cx.waker());
        wakes.polling.store(true, Ordering::SeqCst);
        let mut inner = Context::from_waker(waker);
        let mut outcome = Poll::Pending;
        for _ in 0..ROUNDS {
            wakes.woken.store(false, Ordering::SeqCst);
            outcome = wait(&mut inner);
            if outcome.is_ready() {
                break;
            }
            connection.poll(&mut inner);
            if !wakes.woken.load(Ordering::SeqCst) {
                break;
            }
        }
        wakes.polling.store(false, Ordering::SeqCst);
        // A wake that came after the last round, or rounds used up with
        // work left: poll again later rather than lose it.
        if outcome.is_pending() && wakes.woken.load(Ordering::SeqCst) {
            cx.waker().wake_by_ref();
        }
        outcome
    }
}

/// A response body read from a direct connection; the connection is kept
/// for the next call once the body has been read to its end, and closed if
/// the body is dropped before.
struct KeptBody {
    body: Incoming,
    /// In a mutex only so that the body is `Sync`, as reqwest's bodies must
    /// be; it is reached through `&mut` alone, never locked.
    link: Option<Mutex<Link>>,
    home: Option<(Arc<Connections>, String)>,
}

impl Body for KeptBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let body = &mut this.body;
        let polled = match &mut this.link {
            Some(link) => {
                let link = link.get_mut().unwrap_or_else(|p| p.into_inner());
                link.driven.poll_with(cx, |cx| Pin::new(&mut *body).poll_frame(cx))
            }
            None => Pin::new(body).poll_frame(cx),
        };
        if let Poll::Ready(None) = polled
            && let (Some(link), Some((connections, key))) = (this.link.take(), this.home.take())
        {
            connections.keep(key, link.into_inner().unwrap_or_else(|p| p.into_inner()));
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// How many frames a dropped body reads, of what already came, to reach its
/// end and keep its connection.
const FRAMES_READ_AT_DROP: usize = 8;

impl Drop for KeptBody {
    /// A reader that stops at the stream's last event (`[DONE]`,
    /// `message_stop`) drops the body before it has seen the body end, which
    /// the server sends right after. When that end has already come, it is
    /// read here, without waiting, and the connection kept (as reqwest's
    /// connection task, reading ahead, keeps it); otherwise the connection
    /// is closed, which cancels the request.
    fn drop(&mut self) {
        let (Some(link), Some((connections, key))) = (self.link.take(), self.home.take()) else {
            return;
        };
        let mut link = link.into_inner().unwrap_or_else(|p| p.into_inner());
        let mut cx = Context::from_waker(Waker::noop());
        let body = &mut self.body;
        for _ in 0..FRAMES_READ_AT_DROP {
            match link.driven.poll_with(&mut cx, |cx| Pin::new(&mut *body).poll_frame(cx)) {
                Poll::Ready(None) => return connections.keep(key, link),
                Poll::Ready(Some(Ok(_))) => {}
                Poll::Ready(Some(Err(_))) | Poll::Pending => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use futures::StreamExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// What the test server saw.
    #[derive(Default)]
    struct Seen {
        connections: AtomicUsize,
        requests: Mutex<Vec<String>>,
    }

    /// An HTTP/1.1 server written by hand, so the test sees each connection
    /// and the bytes of each request: it answers each request with a
    /// chunked body of three events (held back after the first when the
    /// request says `slow`), and closes a connection after
    /// `requests_per_connection` answers.
    async fn server(requests_per_connection: usize) -> (String, Arc<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/chat/completions?x=1", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let shared = Arc::clone(&seen);
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                shared.connections.fetch_add(1, Ordering::SeqCst);
                let seen = Arc::clone(&shared);
                tokio::spawn(async move {
                    for _ in 0..requests_per_connection {
                        let Some(request) = read_request(&mut socket).await else {
                            return;
                        };
                        seen.requests.lock().unwrap().push(request);
                        let mut answer = String::from(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
                        );
                        for event in ["data: one\n\n", "data: two\n\n", "data: [DONE]\n\n"] {
                            answer.push_str(&format!("{:x}\r\n{event}\r\n", event.len()));
                        }
                        answer.push_str("0\r\n\r\n");
                        // A request asking for it gets the first event at
                        // once and the rest a moment later, as a model
                        // still streaming sends it.
                        let slow = seen.requests.lock().unwrap().last().is_some_and(|r| r.contains("slow"));
                        let cut = if slow {
                            answer.find("data: two").unwrap() - 4
                        } else {
                            answer.len()
                        };
                        if socket.write_all(&answer.as_bytes()[..cut]).await.is_err() {
                            return;
                        }
                        if slow {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                        }
                        if socket.write_all(&answer.as_bytes()[cut..]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, seen)
    }

    /// One request's head and body, as text; `None` at the end of the
    /// connection.
    async fn read_request(socket: &mut TcpStream) -> Option<String> {
        let mut bytes = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&bytes[..end]).to_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length: "))
                    .map_or(0, |n| n.trim().parse().unwrap());
                if bytes.len() >= end + 4 + length {
                    return Some(String::from_utf8_lossy(&bytes[..end + 4 + length]).into_owned());
                }
            }
            let read = socket.read(&mut buffer).await.ok()?;
            if read == 0 {
                return None;
            }
            bytes.extend_from_slice(&buffer[..read]);
        }
    }

    fn post(url: &str, body: &str) -> reqwest::Request {
        reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .build()
            .unwrap()
    }

    async fn text(response: reqwest::Response) -> String {
        let mut body = response.bytes_stream();
        let mut text = String::new();
        while let Some(chunk) = body.next().await {
            text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        }
        text
    }

    const EVENTS: &str = "data: one\n\ndata: two\n\ndata: [DONE]\n\n";

    #[tokio::test]
    async fn calls_in_turn_share_one_connection_and_are_written_as_http1_requests() {
        let (url, seen) = server(10).await;
        let connections = Connections::new(Duration::from_secs(5), 4);
        for n in 0..3 {
            let response = connections.send(post(&url, &format!("{{\"n\":{n}}}"))).await.unwrap();
            assert_eq!(response.status(), 200);
            assert_eq!(text(response).await, EVENTS);
        }
        assert_eq!(
            seen.connections.load(Ordering::SeqCst),
            1,
            "one connection for three calls"
        );
        let requests = seen.requests.lock().unwrap().clone();
        assert_eq!(requests.len(), 3);
        let port = url.split(':').nth(2).unwrap().split('/').next().unwrap();
        for (n, request) in requests.iter().enumerate() {
            assert!(
                request.starts_with("POST /v1/chat/completions?x=1 HTTP/1.1\r\n"),
                "the target is the path and query: {request}"
            );
            assert!(
                request.contains(&format!("\r\nhost: 127.0.0.1:{port}\r\n")),
                "{request}"
            );
            assert!(request.ends_with(&format!("\r\n\r\n{{\"n\":{n}}}")), "{request}");
        }
    }

    #[tokio::test]
    async fn a_kept_connection_the_server_closed_is_replaced_and_the_request_sent_once() {
        // The server closes each connection after one answer.
        let (url, seen) = server(1).await;
        let connections = Connections::new(Duration::from_secs(5), 4);
        for _ in 0..3 {
            let response = connections.send(post(&url, "{}")).await.unwrap();
            assert_eq!(text(response).await, EVENTS);
            // Let the close reach this side, as it does between real calls.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(seen.connections.load(Ordering::SeqCst), 3);
        assert_eq!(seen.requests.lock().unwrap().len(), 3, "no request was sent twice");
    }

    #[tokio::test]
    async fn a_body_dropped_while_the_server_still_streams_closes_its_connection() {
        let (url, seen) = server(10).await;
        let connections = Connections::new(Duration::from_secs(5), 4);
        let response = connections.send(post(&url, r#"{"slow":true}"#)).await.unwrap();
        drop(response);
        let response = connections.send(post(&url, "{}")).await.unwrap();
        assert_eq!(text(response).await, EVENTS);
        assert_eq!(
            seen.connections.load(Ordering::SeqCst),
            2,
            "the half-read connection was not reused"
        );
    }

    #[tokio::test]
    async fn a_body_dropped_after_its_last_event_keeps_its_connection_when_its_end_came() {
        let (url, seen) = server(10).await;
        let connections = Connections::new(Duration::from_secs(5), 4);
        for _ in 0..3 {
            let response = connections.send(post(&url, "{}")).await.unwrap();
            let mut body = response.bytes_stream();
            let mut text = String::new();
            // Read up to the last event, as the SSE reader does, then drop.
            while !text.ends_with("data: [DONE]\n\n") {
                text.push_str(std::str::from_utf8(&body.next().await.unwrap().unwrap()).unwrap());
            }
            // The server's end of the body comes right behind its last event.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            seen.connections.load(Ordering::SeqCst),
            1,
            "one connection for three calls"
        );
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_url() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let url = format!("http://127.0.0.1:{port}/v1/messages");
        let connections = Connections::new(Duration::from_secs(5), 4);
        let err = connections.send(post(&url, "{}")).await.unwrap_err();
        assert!(
            matches!(&err, DirectError::Connect { source, .. } if source.kind() == std::io::ErrorKind::ConnectionRefused),
            "{err:?}"
        );
        assert!(
            err.to_string().starts_with(&format!("cannot connect to {url}: ")),
            "{err}"
        );
    }

    #[test]
    fn only_plain_http_urls_outside_a_proxy_are_direct() {
        let https = Url::parse("https://api.openai.com/v1/chat/completions").unwrap();
        assert!(!is_direct(&https));
        let proxied = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
            .iter()
            .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
        let plain = Url::parse("http://127.0.0.1:11434/v1/chat/completions").unwrap();
        if !proxied && !cfg!(any(target_os = "macos", windows)) {
            assert!(is_direct(&plain));
        }
    }
}

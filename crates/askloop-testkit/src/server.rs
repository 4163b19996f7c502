//! [`FakeServer`]: an axum server on `127.0.0.1` that answers
//! `POST /v1/chat/completions` (OpenAI format) and `POST /v1/messages`
//! (Anthropic format) with scripted streams, and records what it received.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::post;
use axum::serve::ListenerExt;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::faults::FaultSchedule;
use crate::response::{FakeError, FakeResponse};
use crate::wire::{self, RequestInfo, WireFormat};

/// Makes a response from a request body: lets an answer depend on the
/// conversation.
pub type Responder = Arc<dyn Fn(&Value) -> FakeResponse + Send + Sync>;

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// 1-based, in arrival order.
    pub number: usize,
    /// The method, e.g. `POST`.
    pub method: String,
    /// The path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The JSON body (`Null` when it was not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// The first value of a header (name in any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Builds a [`FakeServer`].
///
/// ```
/// use askloop_testkit::{FakeResponse, FakeServer, FakeError};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let server = FakeServer::builder()
///     .fail_request(1, FakeError::new(429, "slow down").retry_after(0))
///     .respond(FakeResponse::text("Hello"))
///     .start()
///     .await
///     .unwrap();
/// assert!(server.openai_base_url().ends_with("/v1"));
/// # });
/// ```
pub struct FakeServerBuilder {
    port: u16,
    queue: VecDeque<FakeResponse>,
    overrides: HashMap<usize, FakeResponse>,
    responder: Option<Responder>,
    record: bool,
    faults: Option<Arc<FaultSchedule>>,
}

impl fmt::Debug for FakeServerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeServerBuilder")
            .field("port", &self.port)
            .field("queue", &self.queue.len())
            .field("overrides", &self.overrides.keys().collect::<Vec<_>>())
            .field("responder", &self.responder.is_some())
            .field("record", &self.record)
            .field("faults", &self.faults)
            .finish()
    }
}

impl FakeServerBuilder {
    /// Listens on this port of 127.0.0.1 (default 0: any free port).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Queues a response: requests take queued responses in order, before
    /// the responder is asked.
    pub fn respond(mut self, response: impl Into<FakeResponse>) -> Self {
        self.queue.push_back(response.into());
        self
    }

    /// Answers request number `n` (1-based, counting every request) with
    /// this instead, e.g. an error status; the queue is not consumed.
    pub fn fail_request(mut self, n: usize, response: impl Into<FakeResponse>) -> Self {
        self.overrides.insert(n, response.into());
        self
    }

    /// Answers with this closure when the queue is empty.
    pub fn responder(mut self, responder: impl Fn(&Value) -> FakeResponse + Send + Sync + 'static) -> Self {
        self.responder = Some(Arc::new(responder));
        self
    }

    /// Injects faults on this schedule (e.g. every third request a 429, a
    /// 500, a 529, a cut stream or a stall, in turn) into whatever the
    /// request would have got; [`FakeServer::faults_injected`] counts them.
    pub fn faults(mut self, schedule: FaultSchedule) -> Self {
        self.faults = Some(Arc::new(schedule));
        self
    }

    /// Whether requests are recorded (default yes). A benchmark turns it off:
    /// a long run's bodies grow with the conversation.
    pub fn record_requests(mut self, record: bool) -> Self {
        self.record = record;
        self
    }

    /// Binds and starts serving on the current tokio runtime.
    pub async fn start(self) -> std::io::Result<FakeServer> {
        // The queue of connections not yet accepted as long as the
        // kernel allows (`somaxconn`, 4,096 here), as Go's servers (Ollama)
        // ask for it and uvicorn's (vLLM) 2,048, rather than tokio's 1,024:
        // 1,000 model calls opened at once overflowed the shorter one now
        // and then, and each connection that did waited a second for its
        // handshake to be sent again.
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_reuseaddr(true)?;
        socket.bind(SocketAddr::from(([127, 0, 0, 1], self.port)))?;
        let listener: TcpListener = socket.listen(4096)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(self.queue),
            overrides: Mutex::new(self.overrides),
            responder: self.responder,
            record: self.record,
            count: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
            open_streams: Arc::new(AtomicUsize::new(0)),
            faults: self.faults,
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route("/chat/completions", post(chat_completions))
            .route("/v1/messages", post(messages))
            .fallback(not_found)
            .with_state(Arc::clone(&shared));
        // Without TCP_NODELAY, small SSE frames meet delayed ACKs and every
        // response waits tens of milliseconds: latency no real server has.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, app).await {
                eprintln!("askloop-testkit: fake server stopped: {err}");
            }
        });
        Ok(FakeServer { addr, shared, task })
    }
}

struct Shared {
    queue: Mutex<VecDeque<FakeResponse>>,
    overrides: Mutex<HashMap<usize, FakeResponse>>,
    responder: Option<Responder>,
    record: bool,
    count: AtomicUsize,
    requests: Mutex<Vec<RecordedRequest>>,
    open_streams: Arc<AtomicUsize>,
    faults: Option<Arc<FaultSchedule>>,
}

/// A lock that survives a panicking test thread.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A fake model server on 127.0.0.1. Stops when dropped.
///
/// The same script answers both APIs; the route called decides the wire
/// format: `{openai_base_url}/chat/completions` streams OpenAI chunks,
/// `{anthropic_base_url}/v1/messages` Anthropic events.
pub struct FakeServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl fmt::Debug for FakeServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeServer")
            .field("addr", &self.addr)
            .field("requests", &self.request_count())
            .finish()
    }
}

impl FakeServer {
    /// A builder with an empty script, recording requests, on a free port.
    pub fn builder() -> FakeServerBuilder {
        FakeServerBuilder {
            port: 0,
            queue: VecDeque::new(),
            overrides: HashMap::new(),
            responder: None,
            record: true,
            faults: None,
        }
    }

    /// Starts a server that answers every request with `responder`.
    pub async fn with_responder(
        responder: impl Fn(&Value) -> FakeResponse + Send + Sync + 'static,
    ) -> std::io::Result<FakeServer> {
        FakeServer::builder().responder(responder).start().await
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>/v1`: the base URL of its OpenAI-compatible API.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://127.0.0.1:<port>`: the base URL of its Anthropic API.
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues another response.
    pub fn push(&self, response: impl Into<FakeResponse>) {
        lock(&self.shared.queue).push_back(response.into());
    }

    /// Answers request number `n` (1-based) with this response.
    pub fn fail_request(&self, n: usize, response: impl Into<FakeResponse>) {
        lock(&self.shared.overrides).insert(n, response.into());
    }

    /// How many requests arrived.
    pub fn request_count(&self) -> usize {
        self.shared.count.load(Ordering::SeqCst)
    }

    /// How many response bodies are streaming right now. A body stops
    /// counting when it is sent whole or when the client goes away.
    pub fn open_streams(&self) -> usize {
        self.shared.open_streams.load(Ordering::SeqCst)
    }

    /// How many of each fault of its schedule ([`FakeServerBuilder::faults`])
    /// were injected so far; empty without one.
    pub fn faults_injected(&self) -> Vec<(crate::Fault, usize)> {
        self.shared.faults.as_ref().map(|s| s.injected()).unwrap_or_default()
    }

    /// The requests received so far (empty when recording is off).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(WireFormat::OpenAi, &shared, method, uri, headers, body).await
}

async fn messages(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(WireFormat::Anthropic, &shared, method, uri, headers, body).await
}

/// Any other path: recorded and counted like the rest (a wrong base URL is
/// worth seeing in a test), answered 404.
async fn not_found(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let number = shared.count.fetch_add(1, Ordering::SeqCst) + 1;
    if shared.record {
        let recorded = serde_json::from_slice(&body).unwrap_or(Value::Null);
        record(&shared, number, &method, &uri, &headers, recorded);
    }
    let message = format!(
        "the fake server has no route {} {}; use POST /v1/chat/completions or POST /v1/messages",
        method,
        uri.path()
    );
    error_response(WireFormat::OpenAi, &FakeError::new(404, message))
}

fn record(shared: &Shared, number: usize, method: &Method, uri: &Uri, headers: &HeaderMap, body: Value) {
    lock(&shared.requests).push(RecordedRequest {
        number,
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
    });
}

async fn answer(
    format: WireFormat,
    shared: &Shared,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let number = shared.count.fetch_add(1, Ordering::SeqCst) + 1;
    let json: Result<Value, _> = serde_json::from_slice(&body);
    if shared.record {
        let recorded = json.as_ref().map_or(Value::Null, Clone::clone);
        record(shared, number, &method, &uri, &headers, recorded);
    }
    let Ok(request) = json else {
        return error_response(format, &FakeError::new(400, "the request body is not JSON"));
    };
    let mut response = next_response(shared, number, &request);
    if let Some(faults) = &shared.faults {
        response = faults.inject(number, format, response);
    }
    let info = RequestInfo {
        number,
        model: request
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("fake-model")
            .to_owned(),
        input_tokens: (body.len() as u64 / 4).max(1),
    };
    match response {
        FakeResponse::Error(error) => error_response(format, &error),
        FakeResponse::RawSse(text) => {
            let pacing = Pacing {
                frame_delay: Duration::ZERO,
                keep_alive: None,
                disconnect_after: None,
                stall_after: None,
            };
            sse_response(shared, vec![Bytes::from(text)], pacing)
        }
        FakeResponse::Turn(turn) => {
            if !turn.delay.is_zero() {
                tokio::time::sleep(turn.delay).await;
            }
            // Both APIs answer with one JSON body unless asked to stream.
            if request.get("stream").and_then(Value::as_bool) != Some(true) {
                let mut response = Response::new(Body::from(wire::whole_body(format, &turn, &info)));
                response
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                return response;
            }
            let frames = wire::turn_frames(format, &turn, &info);
            let pacing = Pacing {
                frame_delay: turn.frame_delay,
                keep_alive: turn.keep_alive,
                disconnect_after: turn.disconnect_after,
                stall_after: turn.stall_after,
            };
            sse_response(shared, frames, pacing)
        }
    }
}

fn next_response(shared: &Shared, number: usize, request: &Value) -> FakeResponse {
    if let Some(response) = lock(&shared.overrides).remove(&number) {
        return response;
    }
    if let Some(response) = lock(&shared.queue).pop_front() {
        return response;
    }
    match &shared.responder {
        Some(responder) => responder(request),
        None => FakeResponse::status(
            500,
            format!("the fake server has no response scripted for request {number}"),
        ),
    }
}

fn error_response(format: WireFormat, error: &FakeError) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = Response::new(Body::from(wire::error_body(format, error)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(seconds) = error.retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// How long the headers and frames before a deliberate disconnect get to
/// reach the client.
const DISCONNECT_FLUSH: Duration = Duration::from_millis(20);

/// The failure that makes hyper drop the connection mid-body.
#[derive(Debug)]
struct Disconnect;

impl fmt::Display for Disconnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the fake server dropped the connection on purpose")
    }
}

impl std::error::Error for Disconnect {}

/// Counts a streaming body while it lives.
struct OpenStream(Arc<AtomicUsize>);

impl OpenStream {
    fn new(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        OpenStream(Arc::clone(counter))
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// When frames go out: the delay between them, keep-alive comments while
/// waiting, and where the connection is cut.
#[derive(Debug, Clone, Copy)]
struct Pacing {
    frame_delay: Duration,
    keep_alive: Option<Duration>,
    disconnect_after: Option<usize>,
    stall_after: Option<usize>,
}

impl Pacing {
    /// Each item with the wait before it: the frame delay before every frame
    /// but the first (split by keep-alive comments), and after a cut an
    /// error, which makes hyper abort the connection.
    fn schedule(self, frames: Vec<Bytes>) -> Vec<(Duration, Result<Bytes, Disconnect>)> {
        let mut timed = Vec::with_capacity(frames.len() + 1);
        let cut = self
            .disconnect_after
            .unwrap_or(usize::MAX)
            .min(self.stall_after.unwrap_or(usize::MAX));
        for (i, frame) in frames.into_iter().take(cut).enumerate() {
            let mut wait = if i == 0 { Duration::ZERO } else { self.frame_delay };
            if let Some(every) = self.keep_alive.filter(|every| !every.is_zero()) {
                while wait > every {
                    timed.push((every, Ok(Bytes::from_static(b": keep-alive\n\n"))));
                    wait -= every;
                }
            }
            timed.push((wait, Ok(frame)));
        }
        if self.disconnect_after.is_some() && self.stall_after.is_none() {
            // What was written reaches the client before the cut, so it sees
            // a response that breaks off, not one that never came.
            timed.push((DISCONNECT_FLUSH, Err(Disconnect)));
        }
        timed
    }
}

/// The scheduled items, then silence for ever: a comment every
/// `keep_alive`, or nothing at all. The body never ends; it stops counting
/// as open when the client goes away.
fn stalled(
    timed: Vec<(Duration, Result<Bytes, Disconnect>)>,
    keep_alive: Option<Duration>,
    open: OpenStream,
) -> impl futures::Stream<Item = Result<Bytes, Disconnect>> + Send + 'static {
    let first = futures::stream::iter(timed).then(|(wait, item)| async move {
        tokio::time::sleep(wait).await;
        item
    });
    let forever = futures::stream::unfold(open, move |open| async move {
        match keep_alive.filter(|every| !every.is_zero()) {
            Some(every) => {
                tokio::time::sleep(every).await;
                Some((Ok(Bytes::from_static(b": ping\n\n")), open))
            }
            None => futures::future::pending().await,
        }
    });
    first.chain(forever)
}

/// Streams frames, one HTTP chunk each, as a real server does.
fn sse_response(shared: &Shared, frames: Vec<Bytes>, pacing: Pacing) -> Response {
    let open = OpenStream::new(&shared.open_streams);
    let body = if pacing.stall_after.is_some() {
        Body::from_stream(stalled(pacing.schedule(frames), pacing.keep_alive, open))
    } else if pacing.frame_delay.is_zero() && pacing.disconnect_after.is_none() {
        Body::from_stream(futures::stream::iter(frames).map(move |frame| {
            let _counted = &open;
            Ok::<_, Infallible>(frame)
        }))
    } else {
        let timed = pacing.schedule(frames);
        let stream = futures::stream::unfold((timed.into_iter(), open), |(mut items, open)| async move {
            let (wait, item) = items.next()?;
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            Some((item, (items, open)))
        });
        Body::from_stream(stream)
    };
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

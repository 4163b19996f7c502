//! The askloop HTTP server: agents whose runs stop to ask a person, served
//! over HTTP so a browser or any program can answer them.
//!
//! - Mastra's agent routes under `/api` (`GET /api/agents`,
//!   `POST /api/agents/{agentId}/stream`, `resume-stream`,
//!   `approve-tool-call`, `decline-tool-call`, `generate`,
//!   `approve-tool-call-generate`, `decline-tool-call-generate`,
//!   `suspended-runs`) with Mastra's bodies and SSE framing, so
//!   `@mastra/client-js` works unchanged.
//! - The Vercel AI SDK's chat route, `POST /chat/{agentId}` (the UI
//!   message stream of `useChat`, as `@mastra/ai-sdk`'s `chatRoute` serves
//!   it), behind the same tokens.
//! - askloop's own routes: `GET /api/runs`, `GET /api/runs/{runId}`,
//!   `POST /api/runs/{runId}/cancel`, `GET /api/events` (run changes as
//!   server-sent events), and `GET /healthz`.
//! - The web page (Chat with its conversations, Inbox, Run view) at `/`,
//!   `/threads/{threadId}`, `/inbox` and `/runs/{runId}`, its files built
//!   into the binary; `GET /api/me` tells it who it acts as.
//! - Errors are `{"error": {"code", "message"}}` with the status chosen in
//!   one place ([`ApiError`]).
//! - With tokens ([`ServerOptions::token`], [`ServerOptions::tokens`]),
//!   every `/api` route (unknown ones included), `/chat` and `/mcp` need
//!   `Authorization: Bearer <token>`; without any, [`Server::serve`] refuses
//!   to listen beyond loopback unless told otherwise, and answers only to
//!   loopback names, IP addresses and the hosts it is told of (so a page of
//!   another site cannot reach it by DNS rebinding). On every server, a
//!   browser's request that changes something is refused when it comes from
//!   a page of another origin (unless CORS allows it), and bodies must be
//!   JSON: a page the user visits cannot drive the API. A token may be limited to some agents (others: 403),
//!   and its name is recorded as the author of the answers given with it,
//!   unless a trusted proxy names the person in
//!   [`ServerOptions::author_header`].
//!
//! Several servers sharing one PostgreSQL store behave as one service: a run
//! suspended through one is answered through another, and of two concurrent
//! answers exactly one wins (the other gets a 409).
//!
//! ```no_run
//! use std::sync::Arc;
//! use askloop::{Agent, AskUser, MemoryStore, RunStore, ScriptedModel};
//! use askloop_server::{Server, ServerOptions};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
//! let model = ScriptedModel::from_json("demo", r#"{"turns": [{"text": "Hello"}]}"#)?;
//! let agent = Agent::builder("assistant").model(Arc::new(model)).tool(AskUser::new()).store(store.clone()).build()?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:4111").await?;
//! Server::new(vec![agent], store)?
//!     .options(ServerOptions::default())
//!     .serve(listener, async { let _ = tokio::signal::ctrl_c().await; })
//!     .await?;
//! # Ok(()) }
//! ```
// One call into glibc (`memory.rs`, `malloc_trim`) is the only unsafe code.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod agents;
mod auth;
mod body;
mod chat;
pub mod config;
mod connections;
mod decisions;
mod error;
mod events;
mod extract;
mod guard;
pub mod links;
mod mcp;
mod me;
mod memory;
mod recovery;
mod refusals;
mod request_fields;
mod runs;
mod sse;
mod threads;
pub mod tools;
mod web;
mod webhooks;
mod wire;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use askloop::{Agent, Clock, RunStore};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Method, Request, header};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::task::TaskTracker;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::trace::{DefaultOnResponse, TraceLayer};

pub use auth::{ApiToken, DEFAULT_TOKEN_NAME, MIN_SECRET_CHARS, TokenError};
pub use config::{
    AgentConfig, ApprovalNames, BuiltAgents, ConfigError, DefaultModel, ModelSource, ServerConfig, ToolKind,
};
pub use error::{ApiError, RefusedField};
pub use me::PAGE_RESOURCE;
pub use request_fields::RequestOverride;
pub use webhooks::{DEFAULT_WEBHOOK_POLL, Webhooks, webhook_signature};

/// The default limit on request bodies: 1 MiB, far above any answer or
/// prompt a person types, far below what would hurt the server.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// How long a client may take to send a request's headers, by default
/// (hyper's own default, which `axum::serve` leaves off): a slow-loris
/// client is cut off after this long.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a request body may take to arrive in full, by default.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes of one chat stream kept for clients that re-attach
/// ([`ServerOptions::chat_replay_bytes`]): a long answer with its tool
/// calls fits many times over.
pub const DEFAULT_CHAT_REPLAY_BYTES: usize = 4 * 1024 * 1024;

/// How long open streams may run on after a shutdown signal, by default.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How often the server looks for runs whose driver stopped (their lease
/// ran out), by default. A run's lease lasts 30 s by default, so a run whose
/// process died is taken over within about 45 s.
pub const DEFAULT_RECOVER_EVERY: Duration = Duration::from_secs(15);

/// How the server guards and limits requests.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerOptions {
    /// When set, every `/api` route needs `Authorization: Bearer <token>`
    /// (of this or another token); what is done with it is recorded as by
    /// [`DEFAULT_TOKEN_NAME`].
    pub token: Option<String>,
    /// Named tokens, each recorded as the author of what is done with it
    /// and possibly limited to some agents.
    pub tokens: Vec<ApiToken>,
    /// A header that a proxy in front of the server sets to the name of the
    /// person it authenticated (e.g. `X-Forwarded-User`); when set, its
    /// value is recorded as the author. The proxy must strip it from
    /// clients' requests.
    pub author_header: Option<String>,
    /// Listen beyond loopback without a token (anyone who can reach the
    /// port can then answer and cancel runs).
    pub allow_unauthenticated: bool,
    /// Origins allowed to call the API from a browser (CORS); empty: CORS
    /// off; `*`: any origin (only on a server with tokens).
    pub cors_origins: Vec<String>,
    /// Host names the server answers to besides loopback names and IP
    /// addresses (e.g. the name a reverse proxy forwards). Listing any
    /// turns the `Host` check on for a server with tokens too; a server
    /// without tokens always checks.
    pub allowed_hosts: Vec<String>,
    /// The URL people reach the server at (e.g.
    /// `https://askloop.example.com`); its host is answered to.
    pub public_url: Option<String>,
    /// The largest request body accepted, in bytes (larger: 413).
    pub body_limit: usize,
    /// How long open streams may run on after a shutdown signal.
    pub shutdown_grace: Duration,
    /// How often to look for runs whose driver stopped and take them over
    /// (at start, then at this interval); zero: never.
    pub recover_every: Duration,
    /// How long a client may take to send a request's headers; the
    /// connection is closed after that.
    pub header_read_timeout: Duration,
    /// How long a request body may take to arrive in full, from the end of
    /// its request's headers; a slower one fails with 408.
    pub body_read_timeout: Duration,
    /// The most bytes of a chat's stream kept for clients that re-attach
    /// (`GET /chat/{agentId}/{chatId}/stream`); past it, a re-attach gets
    /// an `error` part instead of the replay.
    pub chat_replay_bytes: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            token: None,
            tokens: Vec::new(),
            author_header: None,
            allow_unauthenticated: false,
            cors_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            public_url: None,
            body_limit: DEFAULT_BODY_LIMIT,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            recover_every: DEFAULT_RECOVER_EVERY,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            chat_replay_bytes: DEFAULT_CHAT_REPLAY_BYTES,
        }
    }
}

impl fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerOptions")
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("tokens", &self.tokens)
            .field("author_header", &self.author_header)
            .field("allow_unauthenticated", &self.allow_unauthenticated)
            .field("cors_origins", &self.cors_origins)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("public_url", &self.public_url)
            .field("body_limit", &self.body_limit)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("recover_every", &self.recover_every)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("chat_replay_bytes", &self.chat_replay_bytes)
            .finish()
    }
}

impl ServerOptions {
    /// Sets the bearer token (`None`, or an empty string: no token).
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// Sets the named tokens.
    pub fn tokens(mut self, tokens: Vec<ApiToken>) -> Self {
        self.tokens = tokens;
        self
    }

    /// Sets the header a trusted proxy names the author in (`None`: none).
    pub fn author_header(mut self, header: Option<String>) -> Self {
        self.author_header = header.filter(|h| !h.trim().is_empty());
        self
    }

    /// Whether requests need a token.
    fn protected(&self) -> bool {
        self.token.is_some() || !self.tokens.is_empty()
    }

    /// Allows listening beyond loopback without a token.
    pub fn allow_unauthenticated(mut self, yes: bool) -> Self {
        self.allow_unauthenticated = yes;
        self
    }

    /// Sets the origins allowed by CORS.
    pub fn cors_origins(mut self, origins: Vec<String>) -> Self {
        self.cors_origins = origins;
        self
    }

    /// Sets the host names answered to besides loopback names and IP
    /// addresses; listing any turns the `Host` check on.
    pub fn allowed_hosts(mut self, hosts: Vec<String>) -> Self {
        self.allowed_hosts = hosts;
        self
    }

    /// Sets the URL people reach the server at (its host is answered to).
    pub fn public_url(mut self, url: Option<String>) -> Self {
        self.public_url = url;
        self
    }

    /// The host names answered to: the allowed ones and the public URL's.
    fn named_hosts(&self) -> Vec<String> {
        let public = self
            .public_url
            .as_deref()
            .and_then(|url| url.parse::<axum::http::Uri>().ok())
            .and_then(|uri| uri.host().map(str::to_owned));
        self.allowed_hosts.iter().cloned().chain(public).collect()
    }

    /// Sets the body limit in bytes.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// Sets the shutdown grace period.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Sets how often stalled runs are looked for (zero: never).
    pub fn recover_every(mut self, every: Duration) -> Self {
        self.recover_every = every;
        self
    }

    /// Sets how long a client may take to send a request's headers.
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// Sets how long a request body may take to arrive in full.
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.body_read_timeout = timeout;
        self
    }

    /// Sets the most bytes of a chat's stream kept for re-attaching.
    pub fn chat_replay_bytes(mut self, bytes: usize) -> Self {
        self.chat_replay_bytes = bytes;
        self
    }
}

/// Why the server could not be set up or could not serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// Two agents share an id.
    #[error("two agents have the id {0}; agent ids must be unique")]
    DuplicateAgent(String),
    /// No agent was given.
    #[error("the server needs at least one agent")]
    NoAgents,
    /// Listening beyond loopback without a token was not allowed.
    #[error(
        "refusing to listen on {addr} without a token: anyone who can reach it could answer and cancel runs. Set ASKLOOP_API_TOKEN, listen on 127.0.0.1, or allow it explicitly (--allow-unauthenticated)"
    )]
    Unprotected {
        /// The address.
        addr: SocketAddr,
    },
    /// Two tokens share a name, or a secret.
    #[error("two API tokens have the same {what} ({name}); each token needs its own name and secret")]
    DuplicateToken {
        /// `name` or `secret`.
        what: &'static str,
        /// The name (of the second token).
        name: String,
    },
    /// A token is limited to an agent this server does not serve.
    #[error("the API token {token} may act for agent {agent_id}, which this server does not serve; agents here: {}", known.join(", "))]
    UnknownTokenAgent {
        /// The token's name.
        token: String,
        /// The agent.
        agent_id: String,
        /// The agents served.
        known: Vec<String>,
    },
    /// The author header is not a valid header name.
    #[error("the author header {0:?} is not a valid HTTP header name; give one like X-Forwarded-User")]
    InvalidAuthorHeader(String),
    /// A CORS origin is not a valid header value.
    #[error("invalid CORS origin {0:?}: give an origin like https://example.com, or *")]
    InvalidOrigin(String),
    /// Any origin was allowed by CORS on a server without a token.
    #[error(
        "refusing --cors-origin '*' without a token: every web page the user visits could drive the API. Name the origins of your front end, or set ASKLOOP_API_TOKEN"
    )]
    AnyOriginWithoutToken,
    /// An allowed host is not a host name.
    #[error("invalid allowed host {0:?}: give a host name like askloop.example.com, without scheme or port")]
    InvalidHost(String),
    /// A token's secret cannot work, or is too short for where the server
    /// listens.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// Listening or serving failed.
    #[error("server I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// What every handler shares.
#[derive(Debug)]
pub(crate) struct AppState {
    /// The agents, in the order given.
    pub(crate) agents: Vec<Agent>,
    pub(crate) by_id: HashMap<String, usize>,
    pub(crate) store: Arc<dyn RunStore>,
    /// The runs driven for streams of this server, so a shutdown can wait
    /// for them to reach a stored state.
    pub(crate) runs: TaskTracker,
    /// The tokens and the author header every request is checked against.
    pub(crate) access: auth::Access,
    pub(crate) body_limit: usize,
    pub(crate) body_read_timeout: Duration,
    /// The store's run changes, for `GET /api/events`.
    pub(crate) events: events::RunEvents,
    /// Turns true when the server begins to shut down.
    pub(crate) stopping: watch::Sender<bool>,
    /// The streams open now, to give memory back after a burst.
    pub(crate) streams: Arc<memory::Streams>,
    /// The chat streams a client may re-attach to.
    pub(crate) chats: Arc<chat::replay::ActiveChats>,
    /// Per agent, the fields a request may replace its settings with.
    pub(crate) overrides: HashMap<String, Vec<RequestOverride>>,
    /// Answer links, when the server makes them.
    pub(crate) links: Option<Arc<links::AnswerLinks>>,
}

impl AppState {
    /// The time now, by the agents' clock (they share one).
    pub(crate) fn now(&self) -> chrono::DateTime<chrono::Utc> {
        match self.agents.first() {
            Some(agent) => agent.clock().now(),
            None => askloop::SystemClock.now(),
        }
    }

    pub(crate) fn agent(&self, agent_id: &str) -> Result<&Agent, ApiError> {
        self.by_id
            .get(agent_id)
            .map(|&i| &self.agents[i])
            .ok_or_else(|| ApiError::UnknownAgent {
                agent_id: agent_id.to_owned(),
                known: self.agents.iter().map(|a| a.id().to_owned()).collect(),
            })
    }

    /// The fields a request may replace `agent_id`'s settings with.
    pub(crate) fn overrides_for(&self, agent_id: &str) -> &[RequestOverride] {
        self.overrides.get(agent_id).map_or(&[], Vec::as_slice)
    }
}

/// The HTTP server: agents, the store they share, and options.
#[derive(Debug)]
pub struct Server {
    agents: Vec<Agent>,
    store: Arc<dyn RunStore>,
    /// The agents' clock: the sweeps and the webhooks read the time from
    /// it.
    clock: Arc<dyn Clock>,
    options: ServerOptions,
    runs: TaskTracker,
    webhooks: Webhooks,
    overrides: HashMap<String, Vec<RequestOverride>>,
    links: Option<Arc<links::AnswerLinks>>,
    /// Turns true when a shutdown begins: event streams end, and the
    /// background tasks (recovery, webhooks) stop.
    stopping: watch::Sender<bool>,
}

impl Server {
    /// A server for these agents. `store` must be the store the agents
    /// were built with: `/api/runs` lists it. The server reads the time
    /// (which leases and time limits ran out, when a webhook is due) from
    /// the agents' [`Clock`] (the first agent's; build
    /// them all with one).
    pub fn new(agents: Vec<Agent>, store: Arc<dyn RunStore>) -> Result<Server, ServerError> {
        let Some(clock) = agents.first().map(|agent| Arc::clone(agent.clock())) else {
            return Err(ServerError::NoAgents);
        };
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = agents.iter().find(|a| !seen.insert(a.id().to_owned())) {
            return Err(ServerError::DuplicateAgent(dup.id().to_owned()));
        }
        Ok(Server {
            agents,
            store,
            clock,
            options: ServerOptions::default(),
            runs: TaskTracker::new(),
            webhooks: Webhooks::default(),
            overrides: HashMap::new(),
            links: None,
            stopping: watch::Sender::new(false),
        })
    }

    /// Sets the options.
    pub fn options(mut self, options: ServerOptions) -> Self {
        self.options = options;
        self
    }

    /// Sends the notifications of the store's outbox to `webhooks` while
    /// serving (see [`Webhooks`]). The agents must have been built with
    /// the matching subscriptions (`ServerConfig::build_agents` adds them)
    /// for notifications to be written at all.
    pub fn webhooks(mut self, webhooks: Webhooks) -> Self {
        self.webhooks = webhooks;
        self
    }

    /// Makes answer links ([`links`]): `POST /api/runs/{runId}/links` mints
    /// them, `/links/{token}` answers through them, and the notifications
    /// of raised questions carry one (made out to
    /// [`LinkSettings::webhook_recipient`](links::LinkSettings::webhook_recipient)).
    pub fn links(mut self, links: links::AnswerLinks) -> Self {
        self.links = Some(Arc::new(links));
        self
    }

    /// Lets a stream or generate request for agent `agent_id` replace these
    /// of the agent's own settings for its run (see [`RequestOverride`]);
    /// without this, a request that tries is refused with a 400.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use askloop::{Agent, MemoryStore, RunStore, ScriptedModel};
    /// use askloop_server::{RequestOverride, Server};
    /// # let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    /// # let model = ScriptedModel::from_json("demo", r#"{"turns": [{"text": "Hello"}]}"#).unwrap();
    /// # let agent = Agent::builder("assistant").model(Arc::new(model)).store(store.clone()).build().unwrap();
    /// let server = Server::new(vec![agent], store)
    ///     .unwrap()
    ///     .allow_overrides("assistant", [RequestOverride::Instructions]);
    /// ```
    pub fn allow_overrides(
        mut self,
        agent_id: impl Into<String>,
        overrides: impl IntoIterator<Item = RequestOverride>,
    ) -> Self {
        self.overrides.entry(agent_id.into()).or_default().extend(overrides);
        self
    }

    /// The routes, to serve yourself or to nest in a bigger application.
    pub fn router(&self) -> Result<Router, ServerError> {
        let state = Arc::new(AppState {
            by_id: self
                .agents
                .iter()
                .enumerate()
                .map(|(i, a)| (a.id().to_owned(), i))
                .collect(),
            agents: self.agents.clone(),
            store: Arc::clone(&self.store),
            runs: self.runs.clone(),
            access: self.access()?,
            body_limit: self.options.body_limit,
            body_read_timeout: self.options.body_read_timeout,
            events: events::RunEvents::default(),
            stopping: self.stopping.clone(),
            streams: Arc::default(),
            chats: Arc::new(chat::replay::ActiveChats::new(self.options.chat_replay_bytes)),
            overrides: self.overrides.clone(),
            links: self.links.clone(),
        });
        let api = Router::new()
            .route("/me", get(me::get))
            .route("/agents", get(agents::list))
            .route("/agents/{agent_id}", get(agents::get))
            .route("/agents/{agent_id}/stream", post(agents::stream))
            .route("/agents/{agent_id}/generate", post(agents::generate))
            .route("/agents/{agent_id}/resume-stream", post(agents::resume_stream))
            .route("/agents/{agent_id}/approve-tool-call", post(agents::approve))
            .route("/agents/{agent_id}/decline-tool-call", post(agents::decline))
            .route(
                "/agents/{agent_id}/approve-tool-call-generate",
                post(agents::approve_generate),
            )
            .route(
                "/agents/{agent_id}/decline-tool-call-generate",
                post(agents::decline_generate),
            )
            .route("/agents/{agent_id}/suspended-runs", get(agents::suspended_runs))
            .route("/memory/threads", get(threads::list).post(threads::create))
            .route(
                "/memory/threads/{thread_id}",
                get(threads::get).patch(threads::update).delete(threads::delete),
            )
            .route("/memory/threads/{thread_id}/messages", get(threads::messages))
            .route("/runs", get(runs::list))
            .route("/runs/{run_id}", get(runs::get))
            .route("/runs/{run_id}/cancel", post(runs::cancel))
            .route("/runs/{run_id}/retry", post(runs::retry))
            .route("/runs/{run_id}/decisions", post(decisions::decide))
            .route("/runs/{run_id}/links", get(links::list_route).post(links::mint_route))
            .route("/links/{link_id}/revoke", post(links::revoke_route))
            .route("/events", get(events::stream))
            // Unknown routes under /api need the token too: without it,
            // nothing says which routes exist.
            .fallback(unknown_route)
            .method_not_allowed_fallback(wrong_method)
            .layer(axum::middleware::from_fn_with_state(
                Arc::clone(&state),
                auth::require_token,
            ));
        // Each agent as an MCP tool (`ask_<agent>`), over streamable HTTP,
        // behind the same token and the same guard as the API (which
        // checks hosts, so the MCP service need not).
        let mcp = mcp::routes(&state);
        // The AI SDK's chat route (`useChat`), outside `/api` as Mastra's
        // `chatRoute` is, behind the same token.
        let chat = Router::new()
            .route("/chat/{agent_id}", post(chat::chat))
            .route("/chat/{agent_id}/{chat_id}/stream", get(chat::replay::reattach))
            .layer(axum::middleware::from_fn_with_state(
                Arc::clone(&state),
                auth::require_token,
            ));
        let mut router = Router::new()
            .nest("/api", api)
            .merge(chat)
            .merge(mcp)
            .route("/healthz", get(runs::health))
            .merge(web::routes())
            .merge(links::page_routes())
            .fallback(unknown_route)
            .method_not_allowed_fallback(wrong_method)
            .layer(DefaultBodyLimit::max(self.options.body_limit))
            .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), body::bound))
            .layer(
                TraceLayer::new_for_http()
                    .make_span_with(|request: &Request<_>| {
                        tracing::info_span!("request", method = %request.method(), path = %request.uri().path())
                    })
                    .on_response(DefaultOnResponse::new().level(tracing::Level::INFO)),
            )
            .with_state(state)
            // Outside everything else: a request this server does not take
            // is refused before any token is looked at or anything read.
            .layer(axum::middleware::from_fn_with_state(
                Arc::new(self.guard()?),
                guard::guard,
            ));
        if let Some(cors) = cors_layer(&self.options.cors_origins)? {
            router = router.layer(cors);
        }
        Ok(router)
    }

    /// Serves on `listener` until `shutdown` completes, then stops accepting
    /// connections, ends the event streams (`GET /api/events`), lets runs'
    /// open streams finish within the grace period, and waits (as long
    /// again at most) for runs whose client went away to reach their next
    /// stored state. Every step is one store write, so a run cut off after
    /// that is left at its last stored step, never half written.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        self.serve_with_stop(listener, shutdown, std::future::pending()).await
    }

    /// Serves as [`Server::serve`] does, and stops at once when `stop`
    /// completes (a second Ctrl-C, say), without waiting out the grace
    /// period: the streams still open are cut, and the runs they drive stay
    /// at their last stored step, for a server's recovery to take over when
    /// their lease runs out.
    pub async fn serve_with_stop(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let addr = listener.local_addr()?;
        for warning in self.check_exposure(addr)? {
            tracing::warn!("{warning}");
        }
        let router = self.router()?;
        if !self.options.recover_every.is_zero() {
            tokio::spawn(recovery::take_over_stalled_runs(
                self.agents.clone(),
                Arc::clone(&self.store),
                Arc::clone(&self.clock),
                self.runs.clone(),
                self.options.recover_every,
                self.stopping.subscribe(),
            ));
        }
        if !self.webhooks.hooks.is_empty() {
            let sender = webhooks::Sender::new(
                Arc::clone(&self.store),
                Arc::clone(&self.clock),
                self.webhooks.clone(),
                self.links.clone(),
            )
            .map_err(|err| std::io::Error::other(format!("cannot make the webhooks' HTTP client: {err}")))?;
            tokio::spawn(sender.run(self.stopping.subscribe()));
        }
        let connections = connections::serve(listener, router, self.options.header_read_timeout, async {
            shutdown.await;
            tracing::info!("shutting down: no new connections; open streams may finish");
            self.stopping.send_replace(true);
        });
        tokio::select! {
            () = self.wind_down(connections) => {}
            () = stop => {
                self.stopping.send_replace(true);
                tracing::warn!(
                    runs = self.runs.len(),
                    "stopping now: open streams are cut; runs between two stored steps stay at their last stored step"
                );
            }
        }
        Ok(())
    }

    /// Serves `connections` until they have all closed after the shutdown
    /// began, or the grace period is over; then waits (a grace period at
    /// most) for the runs being driven to reach their next stored step.
    async fn wind_down(&self, connections: impl Future<Output = ()>) {
        let grace = self.options.shutdown_grace;
        let mut stopping = self.stopping.subscribe();
        tokio::select! {
            () = connections => {}
            _ = async {
                let _ = stopping.wait_for(|s| *s).await;
                tokio::time::sleep(grace).await;
            } => tracing::warn!(?grace, "grace period over: closing the streams still open"),
        }
        self.runs.close();
        if tokio::time::timeout(grace, self.runs.wait()).await.is_err() {
            tracing::warn!(
                runs = self.runs.len(),
                "runs still between two stored steps at exit; they stay at their last stored step"
            );
        }
    }

    /// Checks the options for a listener on `addr`: a listener beyond
    /// loopback without a token is refused unless allowed, as is a token
    /// whose secret cannot work, or is shorter than [`MIN_SECRET_CHARS`]
    /// beyond loopback; returns what to warn of (short secrets on loopback).
    /// [`Server::serve`] checks this itself and logs the warnings.
    pub fn check_exposure(&self, addr: SocketAddr) -> Result<Vec<TokenError>, ServerError> {
        let beyond_loopback = !addr.ip().is_loopback();
        if !self.options.protected() && beyond_loopback && !self.options.allow_unauthenticated {
            return Err(ServerError::Unprotected { addr });
        }
        self.guard()?;
        Ok(auth::check_secrets(&self.access()?.tokens, beyond_loopback)?)
    }
}

impl Server {
    /// Which requests the server takes at all (see `guard.rs`): hosts are
    /// checked without tokens or when the operator lists some; any origin
    /// by CORS needs a token.
    fn guard(&self) -> Result<guard::Guard, ServerError> {
        let options = &self.options;
        if !options.protected() && options.cors_origins.iter().any(|o| o == "*") {
            return Err(ServerError::AnyOriginWithoutToken);
        }
        if let Some(bad) = options.allowed_hosts.iter().find(|h| !guard::is_host_name(h)) {
            return Err(ServerError::InvalidHost(bad.clone()));
        }
        let check_hosts = !options.protected() || !options.allowed_hosts.is_empty();
        Ok(guard::Guard::new(
            check_hosts,
            &options.named_hosts(),
            &options.cors_origins,
        ))
    }

    /// The tokens (`token` named [`DEFAULT_TOKEN_NAME`], then `tokens`) and
    /// the author header, checked against each other and the agents.
    fn access(&self) -> Result<auth::Access, ServerError> {
        let mut tokens: Vec<ApiToken> = Vec::new();
        let default = self
            .options
            .token
            .as_ref()
            .map(|secret| ApiToken::new(DEFAULT_TOKEN_NAME, secret.clone()));
        for token in default.into_iter().chain(self.options.tokens.iter().cloned()) {
            if tokens.iter().any(|t| t.name() == token.name()) {
                return Err(ServerError::DuplicateToken {
                    what: "name",
                    name: token.name().to_owned(),
                });
            }
            if tokens.iter().any(|t| t.secret() == token.secret()) {
                return Err(ServerError::DuplicateToken {
                    what: "secret",
                    name: token.name().to_owned(),
                });
            }
            let known = |id: &String| self.agents.iter().any(|a| a.id() == id);
            if let Some(unknown) = token.agents().unwrap_or_default().iter().find(|id| !known(id)) {
                return Err(ServerError::UnknownTokenAgent {
                    token: token.name().to_owned(),
                    agent_id: unknown.clone(),
                    known: self.agents.iter().map(|a| a.id().to_owned()).collect(),
                });
            }
            tokens.push(token);
        }
        let author_header = self
            .options
            .author_header
            .as_deref()
            .map(|name| {
                axum::http::HeaderName::from_bytes(name.trim().as_bytes())
                    .map_err(|_| ServerError::InvalidAuthorHeader(name.to_owned()))
            })
            .transpose()?;
        Ok(auth::Access { tokens, author_header })
    }
}

fn cors_layer(origins: &[String]) -> Result<Option<CorsLayer>, ServerError> {
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        let values = origins
            .iter()
            .map(|o| HeaderValue::from_str(o).map_err(|_| ServerError::InvalidOrigin(o.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(values)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
            .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE]),
    ))
}

async fn unknown_route(method: Method, axum::extract::OriginalUri(uri): axum::extract::OriginalUri) -> ApiError {
    ApiError::UnknownRoute {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

async fn wrong_method(method: Method, axum::extract::OriginalUri(uri): axum::extract::OriginalUri) -> ApiError {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

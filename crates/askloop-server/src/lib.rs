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
//!   server-sent events), `GET /healthz`, and `GET /metrics` (Prometheus'
//!   text format, behind the token: see [`Metrics`]).
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
mod caps;
mod chat;
mod connections;
mod decisions;
pub mod email;
mod error;
mod events;
mod extract;
mod grants;
mod guard;
pub mod links;
mod mcp;
mod me;
mod memory;
mod metrics;
mod options;
mod person;
mod reach;
mod recovery;
mod refusals;
mod request_fields;
mod runs;
mod signing;
pub mod slack;
mod sse;
mod threads;
mod web;
mod webhooks;
mod wire;

use std::collections::HashMap;
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
pub use caps::DEFAULT_EVENT_STREAMS_PER_CALLER;
pub use error::{ApiError, RefusedField, SlackRefusal};
pub use grants::GrantView;
pub use guard::is_host_name;
pub use me::PAGE_RESOURCE;
pub use metrics::Metrics;
pub use options::{
    DEFAULT_BODY_LIMIT, DEFAULT_BODY_READ_TIMEOUT, DEFAULT_CHAT_REPLAY_BYTES, DEFAULT_HEADER_READ_TIMEOUT,
    DEFAULT_METRICS_EVERY, DEFAULT_RECOVER_EVERY, DEFAULT_SHUTDOWN_GRACE, ServerError, ServerOptions,
};
pub use person::PersonProblem;
pub use request_fields::RequestOverride;
pub use webhooks::{
    DEFAULT_MAX_ATTEMPTS, DEFAULT_WEBHOOK_POLL, DEFAULT_WEBHOOK_TIMEOUT, InvalidSecret, WebhookConfig, WebhookSecret,
    Webhooks, webhook_signature,
};

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
    /// How many `/mcp` sessions may be open, and how long one may idle.
    pub(crate) mcp_sessions: askloop_mcp::SessionLimits,
    /// The store's run changes, for `GET /api/events`.
    pub(crate) events: events::RunEvents,
    /// The event streams each caller holds open, and how many it may.
    pub(crate) event_streams: caps::PerCaller,
    /// Turns true when the server begins to shut down.
    pub(crate) stopping: watch::Sender<bool>,
    /// The streams and `/mcp` sessions open now, to give memory back
    /// after a burst.
    pub(crate) streams: Arc<memory::Streams>,
    /// The chat streams a client may re-attach to.
    pub(crate) chats: Arc<chat::kept::ActiveChats>,
    /// Per agent, the fields a request may replace its settings with.
    pub(crate) overrides: HashMap<String, Vec<RequestOverride>>,
    /// The figures `GET /metrics` reports.
    pub(crate) metrics: Metrics,
    /// Answer links, when the server makes them.
    pub(crate) links: Option<Arc<links::AnswerLinks>>,
    /// The Slack app questions are posted with, when set.
    pub(crate) slack: Option<Arc<slack::Slack>>,
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

    /// Whether calls named `ask_user` of `agent_id`'s runs are questions of
    /// askloop's built-in `ask_user`: the agent has a tool of that name, a
    /// name askloop's assembly gives no MCP server's tool. The page shows
    /// such calls as questions and answers, and every other call, whatever
    /// the model named it, as a tool's.
    pub(crate) fn asks_with_ask_user(&self, agent_id: &str) -> bool {
        self.agent(agent_id).is_ok_and(|agent| {
            agent
                .tool_specs()
                .iter()
                .any(|tool| tool.name == askloop::ASK_USER_TOOL_ID)
        })
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
    metrics: Metrics,
    links: Option<Arc<links::AnswerLinks>>,
    /// Mails questions to the agents' recipients, when set.
    mailer: Option<Arc<email::Mailer>>,
    /// Posts questions to the agents' Slack channels, when set.
    slack: Option<Arc<slack::Slack>>,
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
            metrics: Metrics::new(),
            links: None,
            mailer: None,
            slack: None,
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
    /// the matching subscriptions (`askloop_config::ServerConfig` adds
    /// them) for notifications to be written at all.
    pub fn webhooks(mut self, webhooks: Webhooks) -> Self {
        self.webhooks = webhooks;
        self
    }

    /// Reports `metrics` at `GET /metrics`. For the figures of runs and
    /// resolutions to move, build the agents on the store that
    /// [`Metrics::observe_store`] returns and give that store to
    /// [`Server::new`]; without this, the server reports figures of its
    /// own that only its store-wide reads move.
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
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

    /// Mails questions (see [`email`]): the outbox's deliveries to
    /// `mailto:` destinations are sent over SMTP as `settings` say, each
    /// with an answer link made out to its recipient, which needs
    /// [`Server::links`]. The agents must have been built with a
    /// subscription per recipient (`askloop_config::ServerConfig` adds
    /// them). An unusable `from` or recipient address is an error here.
    pub fn email(mut self, settings: email::EmailSettings) -> Result<Self, email::EmailError> {
        self.mailer = Some(Arc::new(email::Mailer::new(settings)?));
        Ok(self)
    }

    /// Posts questions to Slack (see [`slack`]): the outbox's deliveries to
    /// `slack:` destinations are posted with the app's bot token, and
    /// `POST /slack/interactions` takes the clicks, signed with its signing
    /// secret. The agents must have been built with each channel's
    /// subscriptions (`askloop_config::ServerConfig` adds them).
    pub fn slack(mut self, settings: slack::SlackSettings) -> Result<Self, ServerError> {
        let client = slack::Slack::new(settings)
            .map_err(|err| ServerError::Slack(format!("cannot make the Slack API's HTTP client: {err}")))?;
        self.slack = Some(Arc::new(client));
        Ok(self)
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
            mcp_sessions: self.options.mcp_sessions,
            events: events::RunEvents::default(),
            event_streams: caps::PerCaller::new(self.options.event_streams_per_caller),
            stopping: self.stopping.clone(),
            streams: Arc::default(),
            chats: Arc::new(chat::kept::ActiveChats::new(self.options.chat_replay_bytes)),
            overrides: self.overrides.clone(),
            metrics: self.metrics.clone(),
            links: self.links.clone(),
            slack: self.slack.clone(),
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
            .route("/runs/{run_id}/deliveries", get(runs::deliveries))
            .route("/runs/{run_id}/decisions", post(decisions::decide))
            .route("/grants", get(grants::list))
            .route("/grants/{grant_id}/revoke", post(grants::revoke))
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
        // Prometheus' scrape, behind the same token as the API.
        let scrape = Router::new()
            .route("/metrics", get(metrics::scrape))
            .layer(axum::middleware::from_fn_with_state(
                Arc::clone(&state),
                auth::require_token,
            ));
        let mut router = Router::new()
            .nest("/api", api)
            .merge(chat)
            .merge(scrape)
            .merge(mcp)
            .route("/healthz", get(runs::health))
            .merge(web::routes())
            .merge(links::page_routes())
            .route(slack::INTERACTIONS_PATH, post(slack::interactions::interact))
            .fallback(unknown_route)
            .method_not_allowed_fallback(wrong_method)
            .layer(DefaultBodyLimit::max(self.options.body_limit))
            .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), body::bound))
            .layer(
                TraceLayer::new_for_http()
                    .make_span_with(request_span)
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
        if !self.options.metrics_every.is_zero() {
            tokio::spawn(metrics::sample_store(
                self.metrics.clone(),
                Arc::clone(&self.store),
                self.agents.iter().map(|a| a.id().to_owned()).collect(),
                self.options.metrics_every,
                self.stopping.subscribe(),
            ));
        }
        if !self.webhooks.hooks.is_empty() || self.mailer.is_some() || self.slack.is_some() {
            let sender = webhooks::Sender::new(
                Arc::clone(&self.store),
                Arc::clone(&self.clock),
                self.webhooks.clone(),
                self.links.clone(),
                self.mailer.clone(),
                self.slack.clone(),
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

/// The span of one request: every line logged while it is served carries
/// its method and path (a path holding a secret as its route, see
/// [`links::shown_path`]). A request about runs (the API, `/mcp`, an answer
/// link, the chat route) is exported as an OpenTelemetry server span named
/// by its route (`POST /api/agents/{agent_id}/generate`), a child of the
/// caller's trace when the request has a W3C `traceparent` header: a run it
/// starts is then part of the caller's trace (see `askloop::telemetry`).
/// A scrape of `/metrics`, `/healthz` and the page's own files get a span
/// named `housekeeping`, which is not exported: they would be a trace
/// each, every few seconds, about nothing.
fn request_span<B>(request: &Request<B>) -> tracing::Span {
    let matched = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(axum::extract::MatchedPath::as_str);
    let route = matched.unwrap_or("unmatched route");
    let path = request.uri().path();
    if is_housekeeping(request.method(), path) {
        return tracing::info_span!("housekeeping", method = %request.method(), path = %path);
    }
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        path = %links::shown_path(path, matched),
        otel.name = %format_args!("{} {route}", request.method()),
        otel.kind = "server",
        http.request.method = %request.method(),
        http.route = %route,
    );
    if let Some(traceparent) = request.headers().get("traceparent").and_then(|v| v.to_str().ok()) {
        askloop::telemetry::continue_caller_trace(&span, traceparent);
    }
    span
}

/// Whether a request only reads the server's own state or files: a scrape,
/// a health check, a GET of the page's files (anything but the API, `/mcp`,
/// answer links and the chat route).
fn is_housekeeping(method: &Method, path: &str) -> bool {
    if path == "/metrics" || path == "/healthz" {
        return true;
    }
    let about_runs = ["/api/", "/mcp", links::LINKS_PATH, "/chat/"]
        .iter()
        .any(|prefix| path.starts_with(prefix));
    *method == Method::GET && !about_runs
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

// The refusals name the path as logs may show it: a refusal is logged.
async fn unknown_route(method: Method, axum::extract::OriginalUri(uri): axum::extract::OriginalUri) -> ApiError {
    ApiError::UnknownRoute {
        method: method.to_string(),
        path: links::shown_path(uri.path(), None).to_owned(),
    }
}

async fn wrong_method(
    method: Method,
    matched: Option<axum::extract::MatchedPath>,
    axum::extract::OriginalUri(uri): axum::extract::OriginalUri,
) -> ApiError {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: links::shown_path(uri.path(), matched.as_ref().map(axum::extract::MatchedPath::as_str)).to_owned(),
    }
}

#[cfg(test)]
mod housekeeping_tests {
    use super::*;

    #[test]
    fn scrapes_health_checks_and_the_pages_files_are_housekeeping_and_requests_about_runs_are_not() {
        for path in ["/metrics", "/healthz", "/", "/inbox", "/app.js", "/runs/r1"] {
            assert!(is_housekeeping(&Method::GET, path), "{path}");
        }
        for (method, path) in [
            (Method::GET, "/api/runs"),
            (Method::POST, "/api/agents/a/stream"),
            (Method::GET, "/links/tok/question"),
            (Method::POST, "/links/tok"),
            (Method::POST, "/mcp"),
            (Method::POST, "/chat/assistant"),
            (Method::GET, "/chat/assistant/c1/stream"),
        ] {
            assert!(!is_housekeeping(&method, path), "{method} {path}");
        }
    }
}

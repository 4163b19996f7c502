//! How a server guards and limits requests ([`ServerOptions`], with the
//! defaults of each limit), and why a server cannot be set up with its
//! agents and options, or stops serving ([`ServerError`]).

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use crate::auth::{ApiToken, TokenError};
use crate::caps::DEFAULT_EVENT_STREAMS_PER_CALLER;

/// How often the store-wide figures of `GET /metrics` are read from the
/// store, by default.
pub const DEFAULT_METRICS_EVERY: Duration = Duration::from_secs(15);

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
    /// [`DEFAULT_TOKEN_NAME`](crate::DEFAULT_TOKEN_NAME).
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
    /// How often the store-wide figures of `GET /metrics` (runs and calls
    /// waiting, runs running) are read from the store; zero: never.
    pub metrics_every: Duration,
    /// The most live event streams (`GET /api/events`, one per open page)
    /// one caller may hold open at once: each token, and each person a
    /// trusted proxy names (see `caps.rs`). More are refused with 429.
    pub event_streams_per_caller: usize,
    /// How many `/mcp` sessions may be open (in all, per token) and how
    /// long one may idle.
    pub mcp_sessions: askloop_mcp::SessionLimits,
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
            metrics_every: DEFAULT_METRICS_EVERY,
            event_streams_per_caller: DEFAULT_EVENT_STREAMS_PER_CALLER,
            mcp_sessions: askloop_mcp::SessionLimits::DEFAULT,
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
            .field("metrics_every", &self.metrics_every)
            .field("event_streams_per_caller", &self.event_streams_per_caller)
            .field("mcp_sessions", &self.mcp_sessions)
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
    pub(crate) fn protected(&self) -> bool {
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
    pub(crate) fn named_hosts(&self) -> Vec<String> {
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

    /// Sets how often the store-wide figures of `GET /metrics` are read
    /// (zero: never).
    pub fn metrics_every(mut self, every: Duration) -> Self {
        self.metrics_every = every;
        self
    }

    /// Sets the most live event streams one caller may hold open at once
    /// (at least one).
    pub fn event_streams_per_caller(mut self, most: usize) -> Self {
        self.event_streams_per_caller = most.max(1);
        self
    }

    /// How many `/mcp` sessions may be open, and how long one may idle.
    pub fn mcp_sessions(mut self, limits: askloop_mcp::SessionLimits) -> Self {
        self.mcp_sessions = limits;
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
    /// The Slack app cannot be set up.
    #[error("{0}")]
    Slack(String),
    /// A token's secret cannot work, or is too short for where the server
    /// listens.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// Listening or serving failed.
    #[error("server I/O error: {0}")]
    Io(#[from] std::io::Error),
}

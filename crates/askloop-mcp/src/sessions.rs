//! The sessions of the streamable-HTTP endpoint, each bound to the caller
//! that opened it.
//!
//! A session id travels in a header (`Mcp-Session-Id`) that any client can
//! copy. The MCP specification asks a server to bind session ids to the
//! user they were given to (its security best practices, "Session
//! Hijacking"), and to answer a request on a session it does not have with
//! `404 Not Found` (the transport's session rules). So:
//!
//! - When `initialize` opens a session, the session is bound to its
//!   caller's [`Owner`]: the token the HTTP server in front identified, and
//!   the name it records for the caller (the person a trusted proxy named,
//!   else the token's name). Both come from the [`Caller`] that server put
//!   on the request, never from the client's messages.
//! - Every request naming a session (a POST, the GET event stream, a
//!   DELETE) is served only for that owner. Anyone else is answered exactly
//!   as for a session that does not exist: the same 404, the same body. An
//!   answer to an elicitation is a POST on the session, so it counts only
//!   from the session's owner, and the run records that owner as its
//!   author.
//! - A session id this process never gave out, or whose session ended, is
//!   a 404 for every method (a DELETE too).
//! - On a server without tokens every caller has the same owner, unless a
//!   trusted proxy names each person: then the session id alone is what a
//!   client must know, as it is on any MCP server without authorization.
//! - A binding lasts as long as its session: it ends when the session is
//!   closed (a DELETE, the session's idle timeout, its end), so the table
//!   holds only live sessions.
//!
//! And the sessions are bounded ([`SessionLimits`]), so that no caller can
//! turn them into gigabytes (each holds about 57 KB): a request that would
//! open one more than a token may hold (`max_sessions_per_token`), or than
//! the endpoint holds in all (`max_sessions`), is refused with `429 Too
//! Many Requests` and a JSON-RPC error naming the limit; a session unused
//! for `idle` is closed. A server without tokens counts every caller as one
//! token. The place a session takes is reserved before rmcp opens it, and
//! held from its `initialize` until it closes, so requests at once cannot
//! pass a limit together.

use std::any::Any;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use futures::future::BoxFuture;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use rmcp::model::{ClientJsonRpcMessage, ErrorCode, ErrorData, GetExtensions, ServerJsonRpcMessage};
use rmcp::transport::common::http_header::HEADER_SESSION_ID;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{EventStore, ServerSseMessage, SessionId, SessionManager};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use crate::agents::{AgentTools, Caller};
use crate::incoming::Refusal;

/// How many `/mcp` sessions may be open, and for how long one may idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionLimits {
    /// The most sessions open at once, in all.
    pub max_sessions: usize,
    /// The most sessions one token may hold open at once (on a server
    /// without tokens: every caller together).
    pub max_sessions_per_token: usize,
    /// A session unused for this long is closed.
    pub idle: Duration,
}

impl SessionLimits {
    /// The defaults: 1,000 sessions (about 57 MB), 100 per token, closed
    /// after 5 minutes unused.
    pub const DEFAULT: SessionLimits = SessionLimits {
        max_sessions: 1000,
        max_sessions_per_token: 100,
        idle: Duration::from_secs(300),
    };

    /// These limits: at most `max_sessions` in all, `per_token` per token,
    /// each closed after `idle` unused.
    pub fn new(max_sessions: usize, per_token: usize, idle: Duration) -> Self {
        SessionLimits {
            max_sessions,
            max_sessions_per_token: per_token,
            idle,
        }
    }
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits::DEFAULT
    }
}

/// Made for each session when it opens and dropped when it closes: the
/// server in front counts them with what else it holds open (it gives the
/// allocator's free pages back after a burst).
pub type SessionHold = Arc<dyn Fn() -> Box<dyn Any + Send + Sync> + Send + Sync>;

/// Who a session belongs to: the token of the caller that opened it and
/// the name recorded for that caller. Two requests are of one owner when
/// both are the same.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Owner {
    token: Option<String>,
    name: Option<String>,
}

impl Owner {
    fn of(caller: &Caller) -> Owner {
        Owner {
            token: caller.token.clone(),
            name: caller.by.clone(),
        }
    }

    /// The owner of an HTTP request: the [`Caller`] the server in front
    /// put on it, else anyone's.
    fn of_request(extensions: &http::Extensions) -> Owner {
        extensions.get::<Caller>().map(Owner::of).unwrap_or_default()
    }
}

/// The open sessions, with their owners, and the places reserved for
/// sessions being opened.
#[derive(Default)]
struct Table {
    bound: HashMap<SessionId, Bound>,
    /// Places reserved, by token, and in all.
    reserved: HashMap<Option<String>, usize>,
    reserved_total: usize,
}

/// An open session: whose it is, and what the server holds for it.
struct Bound {
    owner: Owner,
    _held: Option<Box<dyn Any + Send + Sync>>,
}

impl Table {
    /// How many sessions `token` holds, open and being opened.
    fn held_by(&self, token: &Option<String>) -> usize {
        let open = self.bound.values().filter(|b| b.owner.token == *token).count();
        open + self.reserved.get(token).copied().unwrap_or(0)
    }

    fn release(&mut self, token: &Option<String>) {
        if let Some(count) = self.reserved.get_mut(token) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.reserved.remove(token);
            }
        }
        self.reserved_total = self.reserved_total.saturating_sub(1);
    }
}

/// A shared table (see [`BoundSessions::table`]).
type SharedTable = Arc<Mutex<Table>>;

fn lock(table: &SharedTable) -> MutexGuard<'_, Table> {
    // A panic while the table was held cannot leave it half written (each
    // change is one insert or remove, or one count), so it is read on.
    table.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A place reserved for a session a request may open, carried in the
/// request's extensions: taken by the session its `initialize` opens, else
/// given back when the request is done.
#[derive(Clone)]
struct Reservation(Arc<Reserved>);

struct Reserved {
    table: SharedTable,
    token: Option<String>,
    taken: AtomicBool,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if !self.taken.load(Ordering::Acquire) {
            lock(&self.table).release(&self.token);
        }
    }
}

/// rmcp's sessions of one process, each with its owner (the caller that
/// opened it), within their [`SessionLimits`]; the session manager of
/// [`McpHttpService`].
pub struct BoundSessions {
    sessions: LocalSessionManager,
    table: SharedTable,
    limits: SessionLimits,
    hold: Option<SessionHold>,
}

impl std::fmt::Debug for BoundSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundSessions")
            .field("open", &self.open())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Default for BoundSessions {
    fn default() -> Self {
        BoundSessions::new(SessionLimits::DEFAULT, None)
    }
}

impl BoundSessions {
    /// Sessions within `limits`; `hold` makes what the server holds for
    /// each while it is open.
    pub fn new(limits: SessionLimits, hold: Option<SessionHold>) -> Self {
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(limits.idle);
        BoundSessions {
            sessions,
            table: SharedTable::default(),
            limits,
            hold,
        }
    }

    /// Whether session `id` exists and belongs to `owner`.
    fn belongs_to(&self, id: &str, owner: &Owner) -> bool {
        lock(&self.table)
            .bound
            .get(id)
            .is_some_and(|bound| bound.owner == *owner)
    }

    /// How many sessions are open.
    fn open(&self) -> usize {
        lock(&self.table).bound.len()
    }

    /// Reserves a place for a session `owner` may open, or says which
    /// limit it would pass.
    fn reserve(&self, owner: &Owner) -> Result<Reservation, Box<Refusal>> {
        let mut table = lock(&self.table);
        let limits = &self.limits;
        let held = table.held_by(&owner.token);
        let idle = askloop::human_duration(limits.idle);
        if held >= limits.max_sessions_per_token {
            let who = match &owner.token {
                Some(token) => format!("the token {token:?}"),
                None => "a caller without a token (on this server, every caller)".to_owned(),
            };
            return Err(too_many(
                format!(
                    "{who} holds {held} open MCP sessions, the most one token may (max_sessions_per_token = {}): end \
                     one (DELETE /mcp with its Mcp-Session-Id) or let one idle out (after {idle}) before opening \
                     another",
                    limits.max_sessions_per_token
                ),
                "max_sessions_per_token",
                limits.max_sessions_per_token,
            ));
        }
        let all = table.bound.len() + table.reserved_total;
        if all >= limits.max_sessions {
            return Err(too_many(
                format!(
                    "the server holds {all} open MCP sessions, the most it holds (max_sessions = {}): try again once \
                     one ends (a session idles out after {idle})",
                    limits.max_sessions
                ),
                "max_sessions",
                limits.max_sessions,
            ));
        }
        *table.reserved.entry(owner.token.clone()).or_default() += 1;
        table.reserved_total += 1;
        Ok(Reservation(Arc::new(Reserved {
            table: Arc::clone(&self.table),
            token: owner.token.clone(),
            taken: AtomicBool::new(false),
        })))
    }

    /// Binds session `id` to `owner`, in the place `reserved` (if any).
    fn bind(&self, id: &SessionId, owner: Owner, reserved: Option<&Reservation>) {
        let held = self.hold.as_ref().map(|hold| hold());
        let mut table = lock(&self.table);
        if let Some(Reservation(reserved)) = reserved
            && !reserved.taken.swap(true, Ordering::AcqRel)
        {
            table.release(&reserved.token);
        }
        table.bound.insert(id.clone(), Bound { owner, _held: held });
    }

    fn unbind(&self, id: &SessionId) {
        let unbound = lock(&self.table).bound.remove(id);
        // What the server held for it is dropped outside the lock.
        drop(unbound);
    }
}

/// A refusal for one session too many: `limit` is the key that sets it.
fn too_many(message: String, limit: &str, most: usize) -> Box<Refusal> {
    let data = serde_json::json!({"limit": limit, "max": most});
    Box::new(Refusal::new(
        None,
        ErrorData::new(TOO_MANY_SESSIONS, message, Some(data)),
    ))
}

/// The JSON-RPC code of a session refused at a limit (one of the codes
/// JSON-RPC leaves to servers).
pub const TOO_MANY_SESSIONS: ErrorCode = ErrorCode(-32000);

impl SessionManager for BoundSessions {
    type Error = <LocalSessionManager as SessionManager>::Error;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.sessions.create_session().await
    }

    /// Binds the session to the caller of its `initialize` request, before
    /// its id is given to anyone.
    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let parts = match &message {
            ClientJsonRpcMessage::Request(request) => request.request.extensions().get::<http::request::Parts>(),
            _ => None,
        };
        let owner = parts
            .map(|parts| Owner::of_request(&parts.extensions))
            .unwrap_or_default();
        let reserved = parts.and_then(|parts| parts.extensions.get::<Reservation>()).cloned();
        self.bind(id, owner, reserved.as_ref());
        let initialized = self.sessions.initialize_session(id, message).await;
        if initialized.is_err() {
            self.unbind(id);
        }
        initialized
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.sessions.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.unbind(id);
        self.sessions.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.sessions.create_stream(id, message).await
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        self.sessions.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.sessions.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.sessions.resume(id, last_event_id).await
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.sessions.event_store()
    }
}

/// What rmcp's service answers with.
type McpResponse = http::Response<BoxBody<Bytes, Infallible>>;

/// The streamable-HTTP endpoint of a set of agents (a tower service to
/// mount at `/mcp`; see [`crate::streamable_http_service`]), whose
/// sessions each serve only the caller that opened them.
#[derive(Clone)]
pub struct McpHttpService {
    inner: StreamableHttpService<AgentTools, BoundSessions>,
    sessions: Arc<BoundSessions>,
}

impl std::fmt::Debug for McpHttpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHttpService")
            .field("sessions", &self.sessions.open())
            .finish_non_exhaustive()
    }
}

impl McpHttpService {
    pub(crate) fn new(inner: StreamableHttpService<AgentTools, BoundSessions>, sessions: Arc<BoundSessions>) -> Self {
        McpHttpService { inner, sessions }
    }

    /// Whether a request may go on: one that names a session, if its
    /// caller opened that session; a POST that names none (it may open
    /// one), with a place reserved for the session in its extensions, if
    /// its caller may open one more.
    fn admits<B>(&self, request: &mut http::Request<B>) -> Result<(), Box<McpResponse>> {
        let owner = Owner::of_request(request.extensions());
        match request.headers().get(HEADER_SESSION_ID) {
            Some(named) => match named.to_str() {
                Ok(id) if self.sessions.belongs_to(id, &owner) => Ok(()),
                _ => Err(Box::new(unknown_session())),
            },
            None if request.method() == http::Method::POST => {
                let reserved = self
                    .sessions
                    .reserve(&owner)
                    .map_err(|refusal| Box::new(refused(&refusal)))?;
                request.extensions_mut().insert(reserved);
                Ok(())
            }
            None => Ok(()),
        }
    }
}

/// `429 Too Many Requests` with `refusal`'s JSON-RPC error.
fn refused(refusal: &Refusal) -> McpResponse {
    let body = serde_json::to_vec(&refusal.response()).unwrap_or_default();
    let mut response = http::Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// rmcp's answer to a request on a session it does not have, word for word.
fn unknown_session() -> McpResponse {
    let mut response = http::Response::new(Full::new(Bytes::from_static(b"Not Found: Session not found")).boxed());
    *response.status_mut() = http::StatusCode::NOT_FOUND;
    response
}

impl<B> tower_service::Service<http::Request<B>> for McpHttpService
where
    StreamableHttpService<AgentTools, BoundSessions>: tower_service::Service<
            http::Request<B>,
            Response = McpResponse,
            Error = Infallible,
            Future = BoxFuture<'static, Result<McpResponse, Infallible>>,
        >,
{
    type Response = McpResponse;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<McpResponse, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        match self.admits(&mut request) {
            Ok(()) => self.inner.call(request),
            Err(refused) => Box::pin(std::future::ready(Ok(*refused))),
        }
    }
}

/// A tower service for the streamable-HTTP transport (mount it at `/mcp`),
/// whose sessions each serve only the caller that opened them (see
/// [`McpHttpService`]).
/// `check_host`: refuse requests whose `Host` is not a loopback name (set it
/// when no token protects the endpoint, against DNS rebinding).
/// `max_body_bytes`: the largest request body read (larger: 413); a server
/// in front that limits bodies itself passes its own limit.
/// `sessions`: the sessions' table, with their limits
/// ([`BoundSessions::new`]).
pub fn streamable_http_service(
    tools: AgentTools,
    check_host: bool,
    max_body_bytes: usize,
    sessions: BoundSessions,
) -> McpHttpService {
    let mut config = StreamableHttpServerConfig::default().with_max_request_body_bytes(max_body_bytes);
    if !check_host {
        config = config.disable_allowed_hosts();
    }
    let sessions = Arc::new(sessions);
    let service = StreamableHttpService::new(move || Ok(tools.clone()), Arc::clone(&sessions), config);
    McpHttpService::new(service, sessions)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn caller(token: Option<&str>, by: Option<&str>) -> Caller {
        Caller {
            token: token.map(str::to_owned),
            by: by.map(str::to_owned),
            ..Caller::default()
        }
    }

    #[test]
    fn a_session_belongs_to_its_token_and_name_and_to_no_one_once_closed() {
        let sessions = BoundSessions::default();
        let ana = Owner::of(&caller(Some("ana"), Some("ana")));
        sessions.bind(&"s1".into(), ana.clone(), None);
        assert!(sessions.belongs_to("s1", &ana));
        for other in [
            caller(Some("eve"), Some("eve")),
            // The same name through another token, or a person another
            // token's proxy named after the owner: not the owner.
            caller(Some("eve"), Some("ana")),
            caller(Some("ana"), Some("bob")),
            caller(None, None),
        ] {
            assert!(!sessions.belongs_to("s1", &Owner::of(&other)), "{other:?}");
        }
        assert!(!sessions.belongs_to("s2", &ana), "a session never given out");
        sessions.unbind(&"s1".into());
        assert!(!sessions.belongs_to("s1", &ana));
    }

    #[test]
    fn a_token_may_hold_only_so_many_sessions_and_the_endpoint_only_so_many_in_all() {
        let sessions = BoundSessions::new(SessionLimits::new(3, 2, Duration::from_secs(60)), None);
        let ana = Owner::of(&caller(Some("ana"), Some("ana")));
        let bob = Owner::of(&caller(Some("bob"), Some("bob")));
        // Reserved and bound count alike: two at once cannot both pass.
        let first = sessions.reserve(&ana).unwrap();
        let second = sessions.reserve(&ana).unwrap();
        let refused = sessions.reserve(&ana).err().unwrap();
        assert_eq!(refused.error.code, TOO_MANY_SESSIONS);
        assert!(
            refused.error.message.contains("max_sessions_per_token = 2"),
            "{}",
            refused.error.message
        );
        sessions.bind(&"a1".into(), ana.clone(), Some(&first));
        drop(first);
        drop(second);
        // A reservation no session took is given back.
        let again = sessions.reserve(&ana).unwrap();
        let _bobs = sessions.reserve(&bob).unwrap();
        let refused = sessions.reserve(&bob).err().unwrap();
        assert!(
            refused.error.message.contains("max_sessions = 3"),
            "{}",
            refused.error.message
        );
        drop(again);
        sessions.unbind(&"a1".into());
        assert!(sessions.reserve(&bob).is_ok(), "places come back as sessions close");
    }
}

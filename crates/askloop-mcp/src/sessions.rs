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

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use futures::future::BoxFuture;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use rmcp::model::{ClientJsonRpcMessage, GetExtensions, ServerJsonRpcMessage};
use rmcp::transport::StreamableHttpService;
use rmcp::transport::common::http_header::HEADER_SESSION_ID;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{EventStore, ServerSseMessage, SessionId, SessionManager};

use crate::agents::{AgentTools, Caller};

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

/// rmcp's sessions of one process, each with its owner (the caller that
/// opened it); the session manager of [`McpHttpService`].
#[derive(Debug, Default)]
pub struct BoundSessions {
    sessions: LocalSessionManager,
    owners: Mutex<HashMap<SessionId, Owner>>,
}

impl BoundSessions {
    fn owners(&self) -> MutexGuard<'_, HashMap<SessionId, Owner>> {
        // A panic while the table was held cannot leave it half written
        // (each change is one insert or remove), so it is read on.
        self.owners.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether session `id` exists and belongs to `owner`.
    fn belongs_to(&self, id: &str, owner: &Owner) -> bool {
        self.owners().get(id).is_some_and(|bound| bound == owner)
    }

    /// How many sessions are open.
    fn open(&self) -> usize {
        self.owners().len()
    }
}

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
        let owner = match &message {
            ClientJsonRpcMessage::Request(request) => request
                .request
                .extensions()
                .get::<http::request::Parts>()
                .map(|parts| Owner::of_request(&parts.extensions))
                .unwrap_or_default(),
            _ => Owner::default(),
        };
        self.owners().insert(id.clone(), owner);
        let initialized = self.sessions.initialize_session(id, message).await;
        if initialized.is_err() {
            self.owners().remove(id);
        }
        initialized
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.sessions.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.owners().remove(id);
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

    /// Whether a request with these headers and extensions may go on: it
    /// names no session, or one its caller opened.
    fn admits(&self, headers: &http::HeaderMap, extensions: &http::Extensions) -> bool {
        let Some(named) = headers.get(HEADER_SESSION_ID) else {
            return true;
        };
        named
            .to_str()
            .is_ok_and(|id| self.sessions.belongs_to(id, &Owner::of_request(extensions)))
    }
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

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if self.admits(request.headers(), request.extensions()) {
            self.inner.call(request)
        } else {
            Box::pin(std::future::ready(Ok(unknown_session())))
        }
    }
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
        sessions.owners().insert("s1".into(), ana.clone());
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
        sessions.owners().remove("s1");
        assert!(!sessions.belongs_to("s1", &ana));
    }
}

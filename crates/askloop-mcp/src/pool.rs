//! Open sessions to one MCP server, kept between calls so that a call does
//! not pay for starting the server (a stdio server is a new process per
//! session: about 1.3 s per call for the reference server under load, see
//! `bench/LOG.md`).
//!
//! A session serves one call at a time: a call takes a session for itself
//! (an idle one, else a new one), so an elicitation that arrives on it can
//! only belong to that call. When the call ends with a result, the session
//! goes back; a session whose call failed, missed its deadline, or was given
//! up while it waited on the person, is dropped (for a stdio server: the
//! process is stopped, see [`crate::process`]).
//! An idle session is closed after [`IDLE_FOR`], and at most [`MAX_IDLE`]
//! are kept.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::McpError;
use crate::connect::{Elicitation, Relay, Session, connect};
use crate::spec::McpServerSpec;

/// How long an unused session stays open.
pub(crate) const IDLE_FOR: Duration = Duration::from_secs(60);

/// The most idle sessions kept per server.
pub(crate) const MAX_IDLE: usize = 4;

/// A session with the relay its elicitations go through.
pub(crate) struct Open {
    pub session: Session,
    relay: Relay,
    /// Tells the idle timer which session it was started for.
    id: u64,
}

#[derive(Default)]
struct Idle {
    sessions: Vec<Open>,
    next_id: u64,
}

/// The idle sessions of one server, shared by its tools.
#[derive(Clone, Default)]
pub(crate) struct Pool {
    idle: Arc<Mutex<Idle>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("idle", &self.idle_count()).finish()
    }
}

impl Pool {
    /// A session for one call, whose elicitations go to `to`: an idle one
    /// that is still open, else a new one.
    pub async fn take(&self, spec: &McpServerSpec, to: mpsc::Sender<Elicitation>) -> Result<Open, McpError> {
        while let Some(open) = self.pop() {
            if open.session.is_open() {
                open.relay.direct_to(Some(to));
                return Ok(open);
            }
        }
        let relay = Relay::default();
        relay.direct_to(Some(to));
        let session = connect(spec, relay.clone()).await?;
        Ok(Open { session, relay, id: 0 })
    }

    /// Keeps a session that was only used to list tools, for the first call.
    pub fn keep_listing(&self, session: Session, relay: Relay) {
        self.put_back(Open { session, relay, id: 0 });
    }

    /// Gives back the session of a call that ended with a result. It is
    /// closed after [`IDLE_FOR`] unless a call takes it first.
    pub fn put_back(&self, mut open: Open) {
        open.relay.direct_to(None);
        let Ok(mut idle) = self.idle.lock() else {
            return;
        };
        if idle.sessions.len() >= MAX_IDLE || !open.session.is_open() {
            return;
        }
        idle.next_id += 1;
        open.id = idle.next_id;
        let id = open.id;
        idle.sessions.push(open);
        drop(idle);
        let pool = Arc::downgrade(&self.idle);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(IDLE_FOR).await;
                let stale = pool.upgrade().and_then(|idle| {
                    let mut idle = idle.lock().ok()?;
                    let at = idle.sessions.iter().position(|o| o.id == id)?;
                    Some(idle.sessions.swap_remove(at))
                });
                drop(stale);
            });
        }
    }

    fn pop(&self) -> Option<Open> {
        self.idle.lock().ok()?.sessions.pop()
    }

    /// How many sessions wait for a call.
    pub fn idle_count(&self) -> usize {
        self.idle.lock().map(|i| i.sessions.len()).unwrap_or(0)
    }
}

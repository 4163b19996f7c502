//! Opening an MCP client session to a server, within its `initialize`
//! deadline, with a handler that relays the server's elicitations to
//! whoever drives the tool call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, ProtocolVersion,
};
use rmcp::service::{Peer, RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::sync::{mpsc, oneshot};

use askloop::Cause;

use crate::McpError;
use crate::process::{self, ServerProcess, Started};
use crate::spec::{McpServerSpec, McpTransport};
use crate::stdio::{Fault, LineTransport};

/// The protocol revision askloop speaks with MCP servers and clients: the
/// newest one rmcp supports that still has the `initialize` handshake and
/// lets a server ask the person mid-call with `elicitation/create`.
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// The most elicitations of one call askloop holds at once: the one the
/// person is asked, and those the server sent meanwhile, asked after it.
/// One more is refused, with an error to the server.
pub const MAX_QUEUED_QUESTIONS: usize = 4;

pub(crate) fn protocol_version() -> ProtocolVersion {
    ProtocolVersion::V_2025_11_25
}

/// What answers an elicitation: the person's answer, or an error for the
/// server.
pub(crate) type ElicitReply = Result<ElicitResult, rmcp::ErrorData>;

/// An elicitation the server sent during a call, with where its answer goes.
#[derive(Debug)]
pub(crate) struct Elicitation {
    pub params: ElicitRequestParams,
    pub reply: oneshot::Sender<ElicitReply>,
}

/// The client side of one session: declares form elicitation and hands each
/// elicitation to whoever drives the session's current call, waiting for its
/// answer. A session serves one call at a time, so the call an elicitation
/// belongs to is always the one it is handed to; between calls (and while
/// only listing tools) nobody is there to ask, and the server hears `cancel`.
/// At most [`MAX_QUEUED_QUESTIONS`] wait at once; the server hears an error
/// for any more.
#[derive(Clone, Default)]
pub(crate) struct Relay {
    elicitations: Arc<Mutex<Option<mpsc::Sender<Elicitation>>>>,
}

impl Relay {
    /// Sends the session's elicitations to `to` (a call's driver), or to
    /// nobody (`None`) when the call ended.
    pub fn direct_to(&self, to: Option<mpsc::Sender<Elicitation>>) {
        if let Ok(mut target) = self.elicitations.lock() {
            *target = to;
        }
    }

    fn target(&self) -> Option<mpsc::Sender<Elicitation>> {
        self.elicitations.lock().ok()?.clone()
    }
}

/// A channel for a call's elicitations, as [`Relay::direct_to`] takes it.
pub(crate) fn elicitation_channel() -> (mpsc::Sender<Elicitation>, mpsc::Receiver<Elicitation>) {
    mpsc::channel(MAX_QUEUED_QUESTIONS)
}

impl ClientHandler for Relay {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        let cancel = || ElicitResult::new(ElicitationAction::Cancel);
        let Some(to) = self.target() else {
            return Ok(cancel());
        };
        let (reply, answer) = oneshot::channel();
        match to.try_send(Elicitation { params: request, reply }) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                return Err(rmcp::ErrorData::invalid_request(
                    format!(
                        "askloop holds at most {MAX_QUEUED_QUESTIONS} questions of one call at a time; this one was \
                         refused: ask again once the person answered"
                    ),
                    None,
                ));
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Ok(cancel()),
        }
        // The driver dropped the reply (the call was given up): the person
        // did not answer here.
        answer.await.unwrap_or_else(|_| Ok(cancel()))
    }

    fn get_info(&self) -> ClientConfig {
        // Declared for the listing session too: some servers (the reference
        // server among them) offer their asking tools only to clients that
        // can be asked.
        let capabilities: ClientCapabilities =
            serde_json::from_value(serde_json::json!({"elicitation": {"form": {}}})).unwrap_or_default();
        let mut info = ClientConfig::new(
            capabilities,
            rmcp::model::Implementation::new("askloop", env!("CARGO_PKG_VERSION")),
        );
        info.protocol_version = protocol_version();
        info
    }
}

/// An open session to a server: rmcp's service, what ended it if the
/// server sent something askloop cannot read, and, for a stdio server, its
/// program. Dropping it ends the session, and stops the program (see
/// [`crate::process`]).
pub(crate) struct Session {
    service: RunningService<RoleClient, Relay>,
    fault: Fault,
    /// Held for its drop, which stops the program; dropped after the
    /// service, so the program's input closes first.
    _process: Option<ServerProcess>,
}

impl Session {
    pub fn peer(&self) -> &Peer<RoleClient> {
        self.service.peer()
    }

    /// Whether the session can still carry a call.
    pub fn is_open(&self) -> bool {
        !self.service.is_closed() && !self.service.peer().is_transport_closed() && self.fault.get().is_none()
    }

    /// What the server sent that ended the session, if it did.
    pub fn fault(&self) -> Option<String> {
        self.fault.get()
    }
}

/// Opens a session: starts the program, or connects to the URL, and runs the
/// `initialize` handshake, which must end within the server's
/// `initialize_timeout`.
pub(crate) async fn connect(spec: &McpServerSpec, relay: Relay) -> Result<Session, McpError> {
    let server = spec.name.clone();
    match &spec.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env);
            if let Some(dir) = cwd {
                cmd.current_dir(dir);
            }
            let Started { process, stdin, stdout } =
                process::start(cmd, &server, spec.stop_grace).map_err(|err| McpError::Start {
                    server: server.clone(),
                    command: command.clone(),
                    reason: err.to_string(),
                    source: Some(Cause::new(err)),
                })?;
            let transport = LineTransport::<RoleClient, _, _>::new(stdout, stdin);
            let fault = transport.fault();
            handshake(spec, relay.serve(transport), fault, Some(process)).await
        }
        McpTransport::Http { url, headers } => {
            let mut custom = HashMap::new();
            for (key, value) in headers {
                let name = http::HeaderName::from_bytes(key.as_bytes());
                let value = http::HeaderValue::from_str(value);
                match (name, value) {
                    (Ok(name), Ok(value)) => {
                        custom.insert(name, value);
                    }
                    _ => {
                        return Err(McpError::Handshake {
                            server,
                            reason: format!("the header {key:?} is not a valid HTTP header name and value"),
                            source: None,
                        });
                    }
                }
            }
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            let transport = StreamableHttpClientTransport::from_config(config);
            handshake(spec, relay.serve(transport), Fault::default(), None).await
        }
    }
}

/// Runs `initialize` (the future `serving`) within the server's deadline.
async fn handshake<E: std::error::Error + Send + Sync + 'static>(
    spec: &McpServerSpec,
    serving: impl Future<Output = Result<RunningService<RoleClient, Relay>, E>>,
    fault: Fault,
    process: Option<ServerProcess>,
) -> Result<Session, McpError> {
    match tokio::time::timeout(spec.initialize_timeout, serving).await {
        Ok(Ok(service)) => Ok(Session {
            service,
            fault,
            _process: process,
        }),
        Ok(Err(err)) => Err(McpError::Handshake {
            server: spec.name.clone(),
            reason: fault.get().unwrap_or_else(|| err.to_string()),
            source: Some(Cause::new(err)),
        }),
        Err(_) => Err(McpError::Timeout {
            server: spec.name.clone(),
            what: "initialize".into(),
            after: spec.initialize_timeout,
        }),
    }
}

/// Waits up to `deadline` for `request` (of `what`) to be answered.
pub(crate) async fn within<T>(
    spec: &McpServerSpec,
    what: &str,
    deadline: Duration,
    request: impl Future<Output = T>,
) -> Result<T, McpError> {
    tokio::time::timeout(deadline, request)
        .await
        .map_err(|_| McpError::Timeout {
            server: spec.name.clone(),
            what: what.to_owned(),
            after: deadline,
        })
}

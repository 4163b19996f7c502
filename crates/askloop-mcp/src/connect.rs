//! Opening an MCP client session to a server, with a handler that relays the
//! server's elicitations to whoever drives the tool call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, ProtocolVersion,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::sync::{mpsc, oneshot};

use askloop::Cause;

use crate::McpError;
use crate::spec::{McpServerSpec, McpTransport};

/// The protocol revision askloop speaks with MCP servers and clients: the
/// newest one rmcp supports that still has the `initialize` handshake and
/// lets a server ask the person mid-call with `elicitation/create`.
pub const PROTOCOL_VERSION: &str = "2025-11-25";

pub(crate) fn protocol_version() -> ProtocolVersion {
    ProtocolVersion::V_2025_11_25
}

/// An elicitation the server sent during a call, with where its answer goes.
#[derive(Debug)]
pub(crate) struct Elicitation {
    pub params: ElicitRequestParams,
    pub reply: oneshot::Sender<ElicitResult>,
}

/// The client side of one session: declares form elicitation and hands each
/// elicitation to whoever drives the session's current call, waiting for its
/// answer. A session serves one call at a time, so the call an elicitation
/// belongs to is always the one it is handed to; between calls (and while
/// only listing tools) nobody is there to ask, and the server hears `cancel`.
#[derive(Clone, Default)]
pub(crate) struct Relay {
    elicitations: Arc<Mutex<Option<mpsc::UnboundedSender<Elicitation>>>>,
}

impl Relay {
    /// Sends the session's elicitations to `to` (a call's driver), or to
    /// nobody (`None`) when the call ended.
    pub fn direct_to(&self, to: Option<mpsc::UnboundedSender<Elicitation>>) {
        if let Ok(mut target) = self.elicitations.lock() {
            *target = to;
        }
    }

    fn target(&self) -> Option<mpsc::UnboundedSender<Elicitation>> {
        self.elicitations.lock().ok()?.clone()
    }
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
        if to.send(Elicitation { params: request, reply }).is_err() {
            return Ok(cancel());
        }
        // The driver dropped the reply (the call was given up): the person
        // did not answer here.
        Ok(answer.await.unwrap_or_else(|_| cancel()))
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

pub(crate) type Session = RunningService<RoleClient, Relay>;

/// Opens a session: starts the program, or connects to the URL, and runs the
/// `initialize` handshake.
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
            let (transport, _stderr) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .map_err(|err| McpError::Start {
                    server: server.clone(),
                    command: command.clone(),
                    reason: err.to_string(),
                    source: Some(Cause::new(err)),
                })?;
            relay.serve(transport).await.map_err(|err| McpError::Handshake {
                server,
                reason: err.to_string(),
                source: Some(Cause::new(err)),
            })
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
            relay.serve(transport).await.map_err(|err| McpError::Handshake {
                server,
                reason: err.to_string(),
                source: Some(Cause::new(err)),
            })
        }
    }
}

//! A real MCP server written with rmcp, served over streamable HTTP on a
//! port the OS picks: the desk of a small theatre.
//!
//! - `add` adds two numbers;
//! - `fail` answers with an error result;
//! - `book` asks the person (elicitation) for a name and a number of seats,
//!   then books them, or says why not (declined, cancelled).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams, ElicitationAction,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

#[derive(Clone)]
pub struct Desk;

fn object(value: Value) -> Arc<Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!(),
    }
}

pub fn book_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Name"},
            "seats": {"type": "integer", "minimum": 1, "maximum": 8, "title": "Seats"},
        },
        "required": ["name", "seats"],
    })
}

impl ServerHandler for Desk {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.protocol_version = rmcp::model::ProtocolVersion::V_2025_11_25;
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, rmcp::ErrorData> {
        let numbers = json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]});
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("add", "Adds two numbers.", object(numbers)),
            Tool::new("fail", "Always fails.", object(json!({"type": "object"}))),
            Tool::new(
                "book",
                "Books seats; asks for the name.",
                object(json!({"type": "object", "properties": {"show": {"type": "string"}}})),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let result = match request.name.as_ref() {
            "add" => {
                let a = args.get("a").and_then(Value::as_i64).unwrap_or(0);
                let b = args.get("b").and_then(Value::as_i64).unwrap_or(0);
                CallToolResult::success(vec![ContentBlock::text((a + b).to_string())])
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text("the box office is closed")]),
            "book" => {
                let show = args
                    .get("show")
                    .and_then(Value::as_str)
                    .unwrap_or("the show")
                    .to_owned();
                let params = ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message: format!("Who is booking for {show}, and how many seats?"),
                    requested_schema: serde_json::from_value(book_schema()).unwrap(),
                };
                let answer = context
                    .peer
                    .create_elicitation(params)
                    .await
                    .map_err(|err| rmcp::ErrorData::internal_error(err.to_string(), None))?;
                let text = match answer.action {
                    ElicitationAction::Accept => {
                        let content = answer.content.unwrap_or_default();
                        format!(
                            "Booked {} seats for {} at {show}",
                            content["seats"],
                            content["name"].as_str().unwrap_or("?")
                        )
                    }
                    ElicitationAction::Decline => "Not booked: the person declined".to_owned(),
                    _ => "Not booked: the person cancelled".to_owned(),
                };
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
            other => return Err(rmcp::ErrorData::invalid_params(format!("no tool {other}"), None)),
        };
        Ok(result.into())
    }
}

/// Serves the desk; returns its URL. The server stops with the test's runtime.
#[allow(dead_code)]
pub async fn serve_desk() -> String {
    serve_counted_desk().await.0
}

/// Serves the desk; returns its URL and the count of MCP sessions opened
/// on it so far.
pub async fn serve_counted_desk() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let sessions = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = sessions.clone();
    let service: StreamableHttpService<Desk, LocalSessionManager> = StreamableHttpService::new(
        move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(Desk)
        },
        Default::default(),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (format!("http://{addr}/mcp"), sessions)
}

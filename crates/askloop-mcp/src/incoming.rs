//! One message from the other end of an MCP session, read as JSON-RPC 2.0
//! says, whatever transport brought it: either a message askloop can act
//! on, or the error it must answer with.
//!
//! - Bytes that are not JSON (not UTF-8, a syntax error, nesting deeper
//!   than [`MAX_DEPTH`] levels) are a parse error, `-32700`, with id
//!   `null`: the id cannot be read.
//! - JSON that is not a request object (no method, a wrong `jsonrpc`, an
//!   id that is neither a string nor an integer, an array) is an invalid
//!   request, `-32600`, with the request's id when it can be read, else
//!   `null`.
//! - A well-formed request whose params do not fit its method is invalid
//!   params, `-32602`, with its id, saying what does not fit. rmcp reads a
//!   request of a method it knows whose params do not fit (a `tools/call`
//!   without a name) as a request of an unknown method, which would be
//!   answered "method not found"; it is refused here instead.
//!
//! A notification is never answered (JSON-RPC forbids it), so a malformed
//! one is refused with [`Refusal::is_notification`] set: over stdio it is
//! dropped, over HTTP its POST is a 400.
//!
//! [`read_message`] reads what a client sends `askloop mcp` and `/mcp`;
//! [`read_server_message`] what an MCP server sends askloop's client.

use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, CompleteRequestParams, CustomRequest,
    ElicitRequestParams, ErrorCode, ErrorData, GetPromptRequestParams, InitializeRequestParams, JsonRpcMessage,
    ReadResourceRequestParams, RequestId, ServerJsonRpcMessage, ServerRequest, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The deepest nesting of arrays and objects a message may have: serde_json's
/// limit, which every message askloop reads goes through.
pub const MAX_DEPTH: usize = 128;

/// Reads one message from a client (a line over stdio, a body over HTTP; a
/// UTF-8 byte order mark before it is allowed).
pub fn read_message(bytes: &[u8]) -> Result<ClientJsonRpcMessage, Box<Refusal>> {
    read(bytes)
}

/// Reads one message from an MCP server (a line of its standard output),
/// by the same rules.
pub fn read_server_message(bytes: &[u8]) -> Result<ServerJsonRpcMessage, Box<Refusal>> {
    read(bytes)
}

fn read<M: Incoming>(bytes: &[u8]) -> Result<M, Box<Refusal>> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(bytes);
    let message: M = serde_json::from_slice(bytes).map_err(|err| Box::new(refusal(bytes, &err)))?;
    match message.misread() {
        Some((id, custom)) => Err(Box::new(Refusal::new(
            Some(id.into_json_value()),
            ErrorData::new(ErrorCode::INVALID_PARAMS, params_problem(custom), None),
        ))),
        None => Ok(message),
    }
}

/// A message type of one direction of a session.
trait Incoming: DeserializeOwned {
    /// A request of a method MCP defines that rmcp read as a custom one
    /// because its params do not fit: its id and the request.
    fn misread(&self) -> Option<(RequestId, &CustomRequest)>;
}

impl Incoming for ClientJsonRpcMessage {
    fn misread(&self) -> Option<(RequestId, &CustomRequest)> {
        match self {
            JsonRpcMessage::Request(request) => match &request.request {
                ClientRequest::CustomRequest(custom) if KNOWN_CLIENT_METHODS.contains(&custom.method.as_str()) => {
                    Some((request.id.clone(), custom))
                }
                _ => None,
            },
            _ => None,
        }
    }
}

impl Incoming for ServerJsonRpcMessage {
    fn misread(&self) -> Option<(RequestId, &CustomRequest)> {
        match self {
            JsonRpcMessage::Request(request) => match &request.request {
                ServerRequest::CustomRequest(custom) if KNOWN_SERVER_METHODS.contains(&custom.method.as_str()) => {
                    Some((request.id.clone(), custom))
                }
                _ => None,
            },
            _ => None,
        }
    }
}

/// The requests a client sends that MCP defines (and rmcp reads), whose
/// params rmcp checks.
const KNOWN_CLIENT_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "tools/call",
    "tools/list",
    "server/discover",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
    "resources/directory/read",
];

/// The requests a server sends a client that MCP defines.
const KNOWN_SERVER_METHODS: &[&str] = &["ping", "sampling/createMessage", "roots/list", "elicitation/create"];

/// What does not fit in the params of a request rmcp could not read as its
/// method's: serde's word on the params as that method takes them, where
/// askloop knows their type.
fn params_problem(request: &CustomRequest) -> String {
    fn fit<P: DeserializeOwned>(params: &Option<Value>) -> Option<String> {
        let params = params.clone().unwrap_or(Value::Null);
        serde_json::from_value::<P>(params).err().map(|err| err.to_string())
    }
    let method = request.method.as_str();
    let params = &request.params;
    let problem = match method {
        "tools/call" => fit::<CallToolRequestParams>(params),
        "initialize" => fit::<InitializeRequestParams>(params),
        "prompts/get" => fit::<GetPromptRequestParams>(params),
        "resources/read" => fit::<ReadResourceRequestParams>(params),
        "resources/subscribe" => fit::<SubscribeRequestParams>(params),
        "resources/unsubscribe" => fit::<UnsubscribeRequestParams>(params),
        "completion/complete" => fit::<CompleteRequestParams>(params),
        "elicitation/create" => fit::<ElicitRequestParams>(params),
        _ => None,
    };
    match problem {
        Some(problem) => format!("the params of {method} are not what it takes: {problem}"),
        None => format!("the params of {method} are not what it takes"),
    }
}

/// Why a message was refused, as the JSON-RPC error to answer it with.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The request's id, when it could be read.
    pub id: Option<Value>,
    /// The code and the message.
    pub error: ErrorData,
    notification: bool,
    too_deep: bool,
}

impl Refusal {
    fn parse_error(message: String) -> Refusal {
        Refusal::new(None, ErrorData::new(ErrorCode::PARSE_ERROR, message, None))
    }

    /// A refusal answered with `error`, and `id` (`None`: `null`).
    pub fn new(id: Option<Value>, error: ErrorData) -> Refusal {
        Refusal {
            id,
            error,
            notification: false,
            too_deep: false,
        }
    }

    /// An invalid request (`-32600`), answered with `id` (`None`: `null`).
    pub fn invalid_request(id: Option<Value>, message: impl Into<String>) -> Refusal {
        Refusal::new(id, ErrorData::new(ErrorCode::INVALID_REQUEST, message.into(), None))
    }

    /// An internal error (`-32603`): the server failed, not the message.
    pub fn internal_error(id: Option<Value>, message: impl Into<String>) -> Refusal {
        Refusal::new(id, ErrorData::new(ErrorCode::INTERNAL_ERROR, message.into(), None))
    }

    /// Whether the refused message was a notification, which JSON-RPC never
    /// answers.
    pub fn is_notification(&self) -> bool {
        self.notification
    }

    /// Whether the message nests deeper than [`MAX_DEPTH`]: well-formed JSON
    /// perhaps, but more than askloop reads.
    pub fn nests_too_deep(&self) -> bool {
        self.too_deep
    }

    /// The JSON-RPC error response: `{"jsonrpc": "2.0", "id", "error"}`,
    /// `id` being `null` when it could not be read.
    pub fn response(&self) -> ErrorResponse<'_> {
        ErrorResponse {
            jsonrpc: "2.0",
            id: self.id.as_ref().unwrap_or(&Value::Null),
            error: &self.error,
        }
    }
}

/// A JSON-RPC error response, always with its `id` member (rmcp's own leaves
/// it out when there is none; JSON-RPC 2.0 asks for `null`).
#[derive(Debug, Serialize)]
pub struct ErrorResponse<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    error: &'a ErrorData,
}

/// Why `bytes`, which rmcp could not read as a message, are refused.
fn refusal(bytes: &[u8], err: &serde_json::Error) -> Refusal {
    if let Err(not_utf8) = std::str::from_utf8(bytes) {
        return Refusal::parse_error(format!(
            "the message is not UTF-8 text (byte {} is not UTF-8); send one JSON-RPC message, as JSON",
            not_utf8.valid_up_to()
        ));
    }
    if let Err(not_json) = serde_json::from_slice::<WellFormed>(bytes) {
        if !nests_deeper_than(bytes, MAX_DEPTH) {
            return Refusal::parse_error(format!(
                "the message is not JSON ({not_json}); send one JSON-RPC message, as JSON"
            ));
        }
        // Its members are read past the depth (serde skips what it does not
        // keep without recursing), so a request is answered with its id.
        let why = format!("nests deeper than the {MAX_DEPTH} levels of arrays and objects a message may have");
        let mut refusal = match serde_json::from_slice::<Envelope>(bytes) {
            Ok(envelope) if bytes.trim_ascii_start().first() == Some(&b'{') => envelope.refusal(&why),
            _ => Refusal::parse_error(format!("the message {why}")),
        };
        refusal.too_deep = true;
        return refusal;
    }
    match bytes.trim_ascii_start().first() {
        Some(b'{') => {}
        Some(b'[') => {
            return Refusal::invalid_request(
                None,
                "a batch (a JSON array) is not accepted: send one JSON-RPC message at a time",
            );
        }
        _ => {
            return Refusal::invalid_request(
                None,
                "a JSON-RPC message is a JSON object like {\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/list\"}",
            );
        }
    }
    match serde_json::from_slice::<Envelope>(bytes) {
        Ok(envelope) => envelope.refusal(err),
        Err(unreadable) => Refusal::invalid_request(None, format!("the message cannot be read: {unreadable}")),
    }
}

/// The members of a message that say what it is, read without its params.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    jsonrpc: Option<Value>,
    /// `Some(Value::Null)` when the message says `"id": null`, `None` when
    /// it has no id.
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default)]
    method: Option<Value>,
    #[serde(default)]
    result: Option<IgnoredAny>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

impl Envelope {
    /// Why a message with these members is refused; `err`: what does not
    /// fit in it.
    fn refusal(self, err: &dyn std::fmt::Display) -> Refusal {
        let is_response = self.result.is_some() || self.error.is_some();
        // A response's id is one of the server's own requests: answering
        // with it would look like an answer to the client's request.
        let id = self
            .id
            .clone()
            .filter(|id| !is_response && (id.is_string() || id.is_i64() || id.is_u64()));
        if self.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
            return Refusal::invalid_request(id, "the message needs \"jsonrpc\": \"2.0\"");
        }
        if is_response && self.method.is_none() {
            return Refusal::invalid_request(None, format!("the response cannot be read: {err}"));
        }
        let Some(method) = self.method.as_ref() else {
            return Refusal::invalid_request(
                id,
                "the request has no method; name it, e.g. \"method\": \"tools/list\"",
            );
        };
        let Some(method) = method.as_str() else {
            return Refusal::invalid_request(id, "the method must be a string, e.g. \"tools/list\"");
        };
        match (&self.id, id) {
            (None, _) => Refusal {
                id: None,
                error: ErrorData::new(
                    ErrorCode::INVALID_PARAMS,
                    format!("the notification {method} cannot be read: {err}"),
                    None,
                ),
                notification: true,
                too_deep: false,
            },
            (Some(_), None) => Refusal::invalid_request(None, "the id must be a string or an integer"),
            (Some(_), Some(id)) => Refusal::new(
                Some(id),
                ErrorData::new(
                    ErrorCode::INVALID_PARAMS,
                    format!("the params of {method} are not what it takes: {err}"),
                    None,
                ),
            ),
        }
    }
}

/// Whether JSON text nests arrays and objects deeper than `limit` levels,
/// counted without parsing it (brackets inside strings do not count).
fn nests_deeper_than(bytes: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in bytes {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Any JSON value, checked for syntax and depth without being kept: arrays
/// and objects are walked through `deserialize_any`, so serde_json's
/// nesting limit applies and nothing is allocated for their contents.
struct WellFormed;

impl<'de> Deserialize<'de> for WellFormed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(WellFormedVisitor)
    }
}

struct WellFormedVisitor;

impl<'de> Visitor<'de> for WellFormedVisitor {
    type Value = WellFormed;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<WellFormed, E> {
        Ok(WellFormed)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<WellFormed, E> {
        Ok(WellFormed)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<WellFormed, E> {
        Ok(WellFormed)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<WellFormed, E> {
        Ok(WellFormed)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<WellFormed, E> {
        Ok(WellFormed)
    }

    fn visit_unit<E: de::Error>(self) -> Result<WellFormed, E> {
        Ok(WellFormed)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<WellFormed, A::Error> {
        while seq.next_element::<WellFormed>()?.is_some() {}
        Ok(WellFormed)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WellFormed, A::Error> {
        while map.next_entry::<IgnoredAny, WellFormed>()?.is_some() {}
        Ok(WellFormed)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn refused(bytes: &[u8]) -> Refusal {
        *read_message(bytes).unwrap_err()
    }

    #[test]
    fn a_request_and_a_notification_are_read() {
        assert!(read_message(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).is_ok());
        assert!(read_message(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}").is_ok());
    }

    #[test]
    fn bytes_that_are_not_json_are_a_parse_error_without_an_id() {
        let deep = format!("{}{}", "{\"a\":".repeat(1000), "}".repeat(1000));
        for bytes in [
            &b"hello"[..],
            b"{\"id\":1,",
            b"\"a\xffb\"",
            b"{\"id\":1,\0}",
            deep.as_bytes(),
            b"",
        ] {
            let refusal = refused(bytes);
            assert_eq!(refusal.error.code, ErrorCode::PARSE_ERROR, "{bytes:?}");
            assert_eq!(refusal.id, None);
            assert!(!refusal.is_notification());
        }
    }

    #[test]
    fn an_invalid_request_is_answered_with_its_id_when_it_can_be_read() {
        let cases = [
            (json!({"jsonrpc": "1.0", "id": "a", "method": "ping"}), Some(json!("a"))),
            (json!({"id": 3, "method": "ping"}), Some(json!(3))),
            (json!({"jsonrpc": "2.0", "id": 4}), Some(json!(4))),
            (json!({"jsonrpc": "2.0", "id": 5, "method": []}), Some(json!(5))),
            (json!({"jsonrpc": "2.0", "id": null, "method": "ping"}), None),
            (json!({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}), None),
            (json!({"jsonrpc": "2.0", "id": 6, "error": "boom"}), None),
            (json!([{"jsonrpc": "2.0", "id": 7, "method": "ping"}]), None),
            (json!("tools/list"), None),
        ];
        for (message, id) in cases {
            let refusal = refused(message.to_string().as_bytes());
            assert_eq!(refusal.error.code, ErrorCode::INVALID_REQUEST, "{message}");
            assert_eq!(refusal.id, id, "{message}");
        }
    }

    #[test]
    fn params_that_do_not_fit_are_invalid_params_and_a_bad_notification_is_marked_unanswerable() {
        let refusal = refused(br#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":"no"}"#);
        assert_eq!(
            (refusal.error.code, refusal.id),
            (ErrorCode::INVALID_PARAMS, Some(json!("x")))
        );
        assert!(
            refusal.error.message.contains("tools/call"),
            "{}",
            refusal.error.message
        );
        let refusal = refused(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"no"}"#);
        assert!(refusal.is_notification());
    }

    #[test]
    fn a_known_method_whose_params_do_not_fit_is_invalid_params_saying_what_does_not_fit() {
        for (params, missing) in [
            (json!({}), "name"),
            (json!({"name": 5}), "string"),
            (json!({"arguments": {}}), "name"),
        ] {
            let message = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params});
            let refusal = refused(message.to_string().as_bytes());
            assert_eq!(
                (refusal.error.code, refusal.id.clone()),
                (ErrorCode::INVALID_PARAMS, Some(json!(3))),
                "{params}: {refusal:?}"
            );
            assert!(
                refusal.error.message.contains("tools/call") && refusal.error.message.contains(missing),
                "{}",
                refusal.error.message
            );
        }
        // A method MCP does not define is the handler's to refuse (-32601).
        assert!(read_message(br#"{"jsonrpc":"2.0","id":4,"method":"x/y","params":{}}"#).is_ok());
        // An elicitation a server sends whose params do not fit.
        let elicitation = json!({"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create",
            "params": {"message": 5}});
        let refusal = *read_server_message(elicitation.to_string().as_bytes()).unwrap_err();
        assert_eq!(
            (refusal.error.code, refusal.id),
            (ErrorCode::INVALID_PARAMS, Some(json!("e1")))
        );
    }

    #[test]
    fn a_message_nested_too_deep_is_refused_with_its_id_when_it_is_a_request() {
        // Written by hand: serde_json's own writer would recurse as deep.
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":"e2","method":"elicitation/create","params":{{"message":"?","requestedSchema":{}}}}}"#,
            "{\"a\":".repeat(3000) + "1" + &"}".repeat(3000)
        );
        let refusal = *read_server_message(deep.as_bytes()).unwrap_err();
        assert!(refusal.nests_too_deep());
        assert_eq!(
            (refusal.error.code, refusal.id),
            (ErrorCode::INVALID_PARAMS, Some(json!("e2")))
        );
        assert!(refusal.error.message.contains("128"), "{}", refusal.error.message);
        // Brackets inside strings are not nesting.
        let flat = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"text":"{}"}}}}"#,
            "[{".repeat(500)
        );
        assert!(read_server_message(flat.as_bytes()).is_ok());
        let refusal = refused(format!("{}{}", "[".repeat(200), "]".repeat(200)).as_bytes());
        assert!(refusal.nests_too_deep() && refusal.id.is_none());
    }

    #[test]
    fn the_error_response_always_has_an_id_member() {
        let refusal = refused(b"nope");
        assert_eq!(
            serde_json::to_value(refusal.response()).unwrap(),
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": refusal.error.message}})
        );
    }
}

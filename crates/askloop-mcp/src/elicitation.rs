//! An MCP elicitation as an askloop question: the suspend payload a call
//! waits with, the answers it accepts, and how an answer becomes MCP's
//! `accept` / `decline` / `cancel`.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The `kind` of a suspend payload that carries an MCP elicitation.
pub const ELICITATION_KIND: &str = "mcp-elicitation";

/// What a call waits with while its MCP server asks the person something:
/// the server's message and the flat JSON schema it wants filled in.
///
/// ```json
/// {"kind": "mcp-elicitation", "server": "everything", "tool": "trigger-elicitation-request",
///  "message": "Please provide your name", "requestedSchema": {"type": "object", "properties": {...}}}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitationPayload {
    /// Always [`ELICITATION_KIND`].
    pub kind: String,
    /// The MCP server's name (from the configuration).
    pub server: String,
    /// The tool whose call asked.
    pub tool: String,
    /// What the server asks.
    pub message: String,
    /// The schema of the answer's `content` (an object of strings, numbers,
    /// booleans and enums, as MCP allows).
    pub requested_schema: Value,
}

impl ElicitationPayload {
    /// Reads a payload back from a stored suspend payload.
    pub fn from_value(value: &Value) -> Option<Self> {
        let payload: ElicitationPayload = serde_json::from_value(value.clone()).ok()?;
        (payload.kind == ELICITATION_KIND).then_some(payload)
    }

    /// The JSON Schema of the resume data this question accepts:
    /// `{"action": "accept", "content": {...}}` with content matching the
    /// requested schema, `{"action": "decline"}` or `{"action": "cancel"}`.
    pub fn answer_schema(&self) -> Value {
        answer_schema(&self.requested_schema)
    }
}

/// The resume data schema for a requested schema.
pub fn answer_schema(requested_schema: &Value) -> Value {
    json!({
        "oneOf": [
            {
                "type": "object",
                "properties": {
                    "action": {"const": "accept"},
                    "content": requested_schema,
                },
                "required": ["action", "content"],
                "additionalProperties": false,
            },
            {
                "type": "object",
                "properties": {"action": {"enum": ["decline", "cancel"]}},
                "required": ["action"],
                "additionalProperties": false,
            },
        ]
    })
}

/// A person's answer to an elicitation, as resume data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum ElicitationAnswer {
    /// The person filled in the form.
    Accept {
        /// The values, matching the requested schema.
        content: Value,
    },
    /// The person said no.
    Decline,
    /// The person dismissed the question without choosing.
    Cancel,
}

impl ElicitationAnswer {
    /// Reads resume data (already checked against [`answer_schema`]).
    pub fn from_resume_data(data: &Value) -> Option<Self> {
        serde_json::from_value(data.clone()).ok()
    }

    pub(crate) fn into_result(self) -> rmcp::model::ElicitResult {
        use rmcp::model::{ElicitResult, ElicitationAction};
        let (action, content) = match self {
            ElicitationAnswer::Accept { content } => (ElicitationAction::Accept, Some(content)),
            ElicitationAnswer::Decline => (ElicitationAction::Decline, None),
            ElicitationAnswer::Cancel => (ElicitationAction::Cancel, None),
        };
        match content {
            Some(content) => ElicitResult::new(action).with_content(content),
            None => ElicitResult::new(action),
        }
    }

    /// The answer in words, for the note given to the model.
    pub fn describe(&self) -> String {
        match self {
            ElicitationAnswer::Accept { content } => format!("accepted, with {content}"),
            ElicitationAnswer::Decline => "declined".to_owned(),
            ElicitationAnswer::Cancel => "cancelled (dismissed without choosing)".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use askloop::tool::check_against_schema;

    fn payload() -> ElicitationPayload {
        ElicitationPayload {
            kind: ELICITATION_KIND.into(),
            server: "s".into(),
            tool: "t".into(),
            message: "Your name?".into(),
            requested_schema: json!({
                "type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                                "colour": {"type": "string", "enum": ["red", "blue"]}},
                "required": ["name"],
            }),
        }
    }

    #[test]
    fn an_accepted_answer_must_match_the_requested_schema() {
        let schema = payload().answer_schema();
        assert!(check_against_schema(&schema, &json!({"action": "accept", "content": {"name": "Ada"}})).is_ok());
        assert!(check_against_schema(&schema, &json!({"action": "accept", "content": {"age": 3}})).is_err());
        assert!(
            check_against_schema(
                &schema,
                &json!({"action": "accept", "content": {"name": "A", "colour": "green"}})
            )
            .is_err()
        );
        assert!(check_against_schema(&schema, &json!({"action": "accept"})).is_err());
        assert!(check_against_schema(&schema, &json!("Ada")).is_err());
    }

    #[test]
    fn decline_and_cancel_carry_no_content() {
        let schema = payload().answer_schema();
        assert!(check_against_schema(&schema, &json!({"action": "decline"})).is_ok());
        assert!(check_against_schema(&schema, &json!({"action": "cancel"})).is_ok());
        assert!(check_against_schema(&schema, &json!({"action": "decline", "content": {"name": "x"}})).is_err());
        assert!(check_against_schema(&schema, &json!({"action": "maybe"})).is_err());
    }

    #[test]
    fn answers_map_to_mcp_actions() {
        use rmcp::model::ElicitationAction;
        let accept = ElicitationAnswer::from_resume_data(&json!({"action": "accept", "content": {"name": "Ada"}}))
            .unwrap()
            .into_result();
        assert_eq!(accept.action, ElicitationAction::Accept);
        assert_eq!(accept.content, Some(json!({"name": "Ada"})));
        let decline = ElicitationAnswer::from_resume_data(&json!({"action": "decline"}))
            .unwrap()
            .into_result();
        assert_eq!(decline.action, ElicitationAction::Decline);
        let cancel = ElicitationAnswer::from_resume_data(&json!({"action": "cancel"}))
            .unwrap()
            .into_result();
        assert_eq!(cancel.action, ElicitationAction::Cancel);
    }

    #[test]
    fn payload_round_trips_and_other_payloads_are_not_read_as_elicitations() {
        let value = serde_json::to_value(payload()).unwrap();
        assert_eq!(value["requestedSchema"]["required"], json!(["name"]));
        assert_eq!(ElicitationPayload::from_value(&value), Some(payload()));
        assert_eq!(ElicitationPayload::from_value(&json!({"question": "Which?"})), None);
    }
}

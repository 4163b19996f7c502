//! The keys every channel's recipient table has (`[[agents.<id>.email]]`,
//! `[[agents.<id>.slack]]`): which tools' calls reach it, and when.

use std::path::Path;
use std::time::Duration;

use super::{ConfigError, duration};

/// Which calls reach a recipient, and when.
pub(crate) struct Reach {
    /// Only calls of these tools; empty: every call.
    pub(crate) tools: Vec<String>,
    /// How long after the question is raised the first notice goes out.
    pub(crate) after: Duration,
    /// How long after the first notice a reminder goes out, if one does.
    pub(crate) remind_after: Option<Duration>,
}

impl Reach {
    /// Reads `tools`, `after` and `remind_after` of the table at `table`
    /// (e.g. `agents.deploy.email[0]`).
    pub(crate) fn read(
        file: &Path,
        table: &str,
        tools: Option<Vec<String>>,
        after: Option<String>,
        remind_after: Option<String>,
    ) -> Result<Reach, ConfigError> {
        let tools = tools.unwrap_or_default();
        if let Some(j) = tools.iter().position(|t| t.trim().is_empty()) {
            return Err(ConfigError::new(
                file,
                format!("{table}.tools[{j}]"),
                "an empty tool name; name a tool of the agent (e.g. \"ask_user\"), or leave tools out for every call",
            ));
        }
        // `parse_limit` refuses zero: leaving the key out means at once
        // (`after`) or never (`remind_after`).
        let delay = |field: &str, text: Option<String>| {
            text.map(|text| {
                duration::parse_limit(&text)
                    .map_err(|problem| ConfigError::new(file, format!("{table}.{field}"), problem.to_string()))
            })
            .transpose()
        };
        Ok(Reach {
            tools,
            after: delay("after", after)?.unwrap_or(Duration::ZERO),
            remind_after: delay("remind_after", remind_after)?,
        })
    }
}

//! `[[agents.<id>.rules]]`: approval rules written in `askloop.toml`, each
//! becoming an [`ApprovalRule`] of the agent, asked in the order written
//! (the first that matches a call decides it; a call none matches follows
//! the tool's policy and `require_approval`):
//!
//! ```toml
//! [[agents.deployer.rules]]
//! name = "docs-writes"        # recorded as the author of what it decides
//! tool = "write_file"         # a glob over tool names; every tool when left out
//! server = "github"           # only tools of this MCP server of the agent
//! arg = "/path"               # a JSON pointer into the arguments, as the tool acts on them
//! glob = "docs/**"            # with `arg`: one of `equals`, `glob`, `regex`
//! decision = "allow"          # allow, ask or deny
//! reason = "..."              # with deny: what the model is told
//! ```
//!
//! A rule matches a call when its tool name matches `tool`, its server is
//! `server` (when given) and the value at `arg` matches (when given; a
//! call without a value there does not match). `equals` compares the value
//! as JSON (a string, number or boolean in the file); `glob` and `regex`
//! match a string value. A mistake is a start-up error naming the file, the
//! key and what would be accepted.

use std::path::Path;

use askloop::{ApprovalRule, Verdict};
use globset::{Glob, GlobMatcher};
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

use super::ConfigError;

/// One `[[agents.<id>.rules]]` table, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    name: Option<String>,
    tool: Option<String>,
    server: Option<String>,
    arg: Option<String>,
    equals: Option<toml::Value>,
    glob: Option<String>,
    regex: Option<String>,
    decision: Option<String>,
    reason: Option<String>,
}

/// A rule of an agent, checked.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RuleConfig {
    /// Its name.
    pub name: String,
    tool: GlobMatcher,
    server: Option<String>,
    arg: Option<(String, ValueMatch)>,
    verdict: Verdict,
}

impl PartialEq for RuleConfig {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.tool.glob() == other.tool.glob()
            && self.server == other.server
            && self.arg == other.arg
            && self.verdict == other.verdict
    }
}

#[derive(Debug, Clone)]
enum ValueMatch {
    Equals(Value),
    Glob(GlobMatcher),
    Regex(Regex),
}

impl PartialEq for ValueMatch {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ValueMatch::Equals(a), ValueMatch::Equals(b)) => a == b,
            (ValueMatch::Glob(a), ValueMatch::Glob(b)) => a.glob() == b.glob(),
            (ValueMatch::Regex(a), ValueMatch::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl ValueMatch {
    fn matches(&self, value: &Value) -> bool {
        match self {
            ValueMatch::Equals(expected) => value == expected,
            ValueMatch::Glob(glob) => value.as_str().is_some_and(|text| glob.is_match(text)),
            ValueMatch::Regex(regex) => value.as_str().is_some_and(|text| regex.is_match(text)),
        }
    }
}

impl RuleConfig {
    /// The rule as the agent asks it.
    pub fn to_rule(&self) -> ApprovalRule {
        let rule = self.clone();
        ApprovalRule::new(self.name.clone(), move |call| {
            if !rule.tool.is_match(call.tool) {
                return None;
            }
            if rule
                .server
                .as_deref()
                .is_some_and(|server| call.mcp_server != Some(server))
            {
                return None;
            }
            if let Some((pointer, matcher)) = &rule.arg
                && !call.args.pointer(pointer).is_some_and(|value| matcher.matches(value))
            {
                return None;
            }
            Some(rule.verdict.clone())
        })
    }
}

/// Checks an agent's rules: `servers`, the names of its MCP servers.
pub(super) fn resolve(
    file: &Path,
    agent: &str,
    raw: Vec<RawRule>,
    servers: &[&str],
) -> Result<Vec<RuleConfig>, ConfigError> {
    let mut rules = Vec::with_capacity(raw.len());
    for (i, raw) in raw.into_iter().enumerate() {
        let at = |key: &str| format!("agents.{agent}.rules[{i}].{key}");
        let fail = |key: &str, problem: String| ConfigError::new(file, at(key), problem);
        let name = raw
            .name
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| format!("rule {}", i + 1));
        if rules.iter().any(|r: &RuleConfig| r.name == name) {
            return Err(fail(
                "name",
                format!("{name:?} names another rule of this agent; give each its own name"),
            ));
        }
        let glob = |key: &str, pattern: &str| {
            Glob::new(pattern).map(|g| g.compile_matcher()).map_err(|err| {
                fail(
                    key,
                    format!("{pattern:?} is not a glob ({err}); e.g. \"write_*\" or \"docs/**\""),
                )
            })
        };
        let tool = glob("tool", raw.tool.as_deref().unwrap_or("*"))?;
        if let Some(server) = &raw.server
            && !servers.contains(&server.as_str())
        {
            let have = if servers.is_empty() {
                "none".to_owned()
            } else {
                servers.join(", ")
            };
            return Err(fail(
                "server",
                format!("agent {agent} has no MCP server {server:?}; its servers: {have}"),
            ));
        }
        let matchers = [raw.equals.is_some(), raw.glob.is_some(), raw.regex.is_some()];
        let arg = match raw.arg {
            None if matchers.contains(&true) => {
                return Err(fail(
                    "arg",
                    "equals, glob and regex match the value at `arg`: give `arg`, a JSON pointer such as \"/path\""
                        .into(),
                ));
            }
            None => None,
            Some(pointer) => {
                if !pointer.is_empty() && !pointer.starts_with('/') {
                    return Err(fail(
                        "arg",
                        format!(
                            "{pointer:?} is not a JSON pointer; it starts with '/', e.g. \"/path\" or \"/options/0\""
                        ),
                    ));
                }
                let matcher = match (raw.equals, raw.glob, raw.regex) {
                    (Some(value), None, None) => {
                        ValueMatch::Equals(json_of(value).map_err(|p| fail("equals", p.to_string()))?)
                    }
                    (None, Some(pattern), None) => ValueMatch::Glob(glob("glob", &pattern)?),
                    (None, None, Some(pattern)) => ValueMatch::Regex(
                        Regex::new(&pattern)
                            .map_err(|err| fail("regex", format!("{pattern:?} is not a regular expression: {err}")))?,
                    ),
                    (None, None, None) => {
                        return Err(fail(
                            "arg",
                            "says where to look; give one of equals, glob or regex to match".into(),
                        ));
                    }
                    _ => return Err(fail("arg", "give only one of equals, glob and regex".into())),
                };
                Some((pointer, matcher))
            }
        };
        let verdict = match (raw.decision.as_deref(), raw.reason) {
            (Some("allow"), None) => Verdict::Allow,
            (Some("ask"), None) => Verdict::Ask,
            (Some("deny"), Some(reason)) if !reason.trim().is_empty() => Verdict::Deny(reason),
            (Some("deny"), _) => {
                return Err(fail("reason", "a deny rule gives the reason the model is told".into()));
            }
            (Some("allow" | "ask"), Some(_)) => {
                return Err(fail(
                    "reason",
                    "only a deny rule has a reason (it is told to the model)".into(),
                ));
            }
            (Some(other), _) => {
                return Err(fail(
                    "decision",
                    format!("{other:?} is not a decision; use allow, ask or deny"),
                ));
            }
            (None, _) => return Err(fail("decision", "is required: allow, ask or deny".into())),
        };
        rules.push(RuleConfig {
            name,
            tool,
            server: raw.server,
            arg,
            verdict,
        });
    }
    Ok(rules)
}

/// Why an `equals` value cannot be compared with an argument.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
enum NotComparable {
    /// A float JSON cannot hold (NaN, an infinity).
    #[error("{0} is not a number an argument can hold")]
    NotANumber(f64),
    /// An array, a table or a date: `equals` compares one scalar.
    #[error("compares one string, number or boolean; for {0} values, match a path inside with `arg`")]
    NotAScalar(&'static str),
}

/// A TOML value as the JSON value an argument would hold.
fn json_of(value: toml::Value) -> Result<Value, NotComparable> {
    match value {
        toml::Value::String(text) => Ok(Value::String(text)),
        toml::Value::Integer(n) => Ok(Value::from(n)),
        toml::Value::Float(f) => serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or(NotComparable::NotANumber(f)),
        toml::Value::Boolean(b) => Ok(Value::Bool(b)),
        other => Err(NotComparable::NotAScalar(other.type_str())),
    }
}

//! The error of a named value's `FromStr` (a run status, a grant's scope,
//! a webhook's event): below the store and the run's errors, which both
//! name such values.

/// A name that is none of those a kind of value has (a run status, a
/// scope, an event): what was given and what is accepted, for the
/// `FromStr` of askloop's named values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {given:?}; accepted: {}{}", accepted.join(", "), hint.map(|h| format!(" ({h})")).unwrap_or_default())]
pub struct UnknownName {
    /// What kind of value (`run status`, `scope`).
    pub what: &'static str,
    /// What was given.
    pub given: String,
    /// The names accepted.
    pub accepted: Vec<&'static str>,
    /// What the names mean, when that helps choose.
    pub hint: Option<&'static str>,
}

impl UnknownName {
    /// `given` is none of `accepted`, the names of `what`.
    pub(crate) fn new(what: &'static str, given: &str, accepted: impl IntoIterator<Item = &'static str>) -> Self {
        UnknownName {
            what,
            given: given.to_owned(),
            accepted: accepted.into_iter().collect(),
            hint: None,
        }
    }

    pub(crate) fn hint(mut self, hint: &'static str) -> Self {
        self.hint = Some(hint);
        self
    }
}

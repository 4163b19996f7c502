//! Exit statuses and the one error type the commands return. The status is
//! chosen here, in one place, from what went wrong.

use std::fmt;
use std::process::ExitCode;

use askloop::{InvalidId, RunError, RunErrorKind, RunStatus, StoreError};

/// Bad usage: flags, an answer the question does not accept, ambiguous
/// resume.
pub const USAGE: u8 = 2;
/// Any other failure.
pub const FAILURE: u8 = 1;
/// The run waits for an answer.
pub const SUSPENDED: u8 = 3;

/// How a command ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// Completed (or nothing to run).
    Ok,
    /// The run waits for an answer.
    Suspended,
    /// The run failed; its error was already printed.
    RunFailed,
}

impl Done {
    /// The worse of two outcomes, for a command that drives several runs:
    /// a failure over a suspension over a completion.
    pub fn worse(self, other: Done) -> Done {
        match (self, other) {
            (Done::RunFailed, _) | (_, Done::RunFailed) => Done::RunFailed,
            (Done::Suspended, _) | (_, Done::Suspended) => Done::Suspended,
            _ => Done::Ok,
        }
    }

    pub fn from_status(status: RunStatus) -> Self {
        match status {
            RunStatus::Completed | RunStatus::Cancelled => Done::Ok,
            RunStatus::Suspended => Done::Suspended,
            _ => Done::RunFailed,
        }
    }

    pub fn code(self) -> ExitCode {
        ExitCode::from(match self {
            Done::Ok => 0,
            Done::Suspended => SUSPENDED,
            Done::RunFailed => FAILURE,
        })
    }
}

/// A command failed: one line for people, and its exit status.
#[derive(Debug)]
pub struct CliError {
    pub status: u8,
    pub message: String,
}

impl CliError {
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            status: USAGE,
            message: message.into(),
        }
    }

    pub fn failure(message: impl Into<String>) -> Self {
        CliError {
            status: FAILURE,
            message: message.into(),
        }
    }

    pub fn code(&self) -> ExitCode {
        ExitCode::from(self.status)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// Our own value failed to encode as JSON: a bug, said as one.
impl From<serde_json::Error> for CliError {
    fn from(err: serde_json::Error) -> Self {
        CliError::failure(format!("could not encode the output as JSON: {err}"))
    }
}

impl From<RunError> for CliError {
    fn from(err: RunError) -> Self {
        let message = err.to_string();
        if let RunError::AmbiguousResume { pending, .. } = &err {
            return CliError::usage(format!(
                "{message}; pass --tool-call-id (e.g. --tool-call-id {})",
                pending.first().map_or("ID", String::as_str)
            ));
        }
        // What the person typed is what to change: a usage error. Approving
        // where only questions wait is one too.
        match err.kind() {
            RunErrorKind::BadRequest | RunErrorKind::NotAccepted => CliError::usage(message),
            RunErrorKind::State if matches!(err, RunError::NothingToApprove { .. }) => CliError::usage(message),
            RunErrorKind::NotFound
            | RunErrorKind::State
            | RunErrorKind::RunState
            | RunErrorKind::Internal
            | RunErrorKind::Store => CliError::failure(message),
        }
    }
}

impl From<InvalidId> for CliError {
    fn from(err: InvalidId) -> Self {
        CliError::usage(err.to_string())
    }
}

impl From<StoreError> for CliError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::InvalidLocation(message) => CliError::usage(message),
            other => CliError::failure(other.to_string()),
        }
    }
}

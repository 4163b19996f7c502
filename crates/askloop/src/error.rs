//! [`RunError`]: why a run could not be started, resumed or cancelled.

use crate::store::{RunFailure, RunStatus, StoreError};

/// Why an operation on a run was refused. Every variant names the run; none
/// of them changes what is stored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// No run has this id.
    #[error("no run with id {run_id}")]
    UnknownRun {
        /// The id given.
        run_id: String,
    },
    /// The run belongs to another agent: an agent reads, continues and
    /// cancels only its own runs (their tools and instructions are its own).
    #[error("run {run_id} is a run of agent {owner}, not of agent {agent_id}; an agent continues only its own runs")]
    OtherAgent {
        /// The run.
        run_id: String,
        /// The agent asked to act on it.
        agent_id: String,
        /// The agent the run belongs to.
        owner: String,
    },
    /// The run exists but is not waiting for an answer.
    #[error("run {run_id} is {status}, not suspended: there is nothing to answer")]
    NotSuspended {
        /// The run.
        run_id: String,
        /// Its status.
        status: RunStatus,
    },
    /// The run has finished (completed, failed or cancelled): there is
    /// nothing left to cancel.
    #[error("run {run_id} is already {status}; only a suspended or running run can be cancelled")]
    Finished {
        /// The run.
        run_id: String,
        /// Its status.
        status: RunStatus,
    },
    /// The run's question was left unanswered because a new message came on
    /// its thread first: the run ended, and the answer is refused.
    #[error(
        "run {run_id} no longer waits: a new message on its thread came before this answer, and the question was left unanswered"
    )]
    Superseded {
        /// The run.
        run_id: String,
    },
    /// The call's time limit passed before the answer came: the question
    /// was (or is being) resolved as expired, and the answer is refused.
    #[error(
        "tool call {tool_call_id} of run {run_id} expired at {}: no answer is taken after its time limit",
        crate::clock::rfc3339(*expired_at)
    )]
    Expired {
        /// The run.
        run_id: String,
        /// The call.
        tool_call_id: String,
        /// When it expired.
        expired_at: chrono::DateTime<chrono::Utc>,
    },
    /// The named tool call is not one the run waits on.
    #[error(
        "run {run_id} is not waiting on tool call {}; pending tool calls: {}",
        crate::quoted_excerpt(tool_call_id),
        list(pending)
    )]
    ToolCallNotPending {
        /// The run.
        run_id: String,
        /// The id given.
        tool_call_id: String,
        /// The calls it does wait on.
        pending: Vec<String>,
    },
    /// Several calls are pending and no tool call id was given.
    #[error("run {run_id} waits on {} tool calls; say which one to answer: {}", pending.len(), list(pending))]
    AmbiguousResume {
        /// The run.
        run_id: String,
        /// The pending calls.
        pending: Vec<String>,
    },
    /// The answer does not fit the question. The run stays suspended.
    #[error(
        "invalid answer for tool call {tool_call_id} of run {run_id}: {reason}{}",
        accepted_text(accepted)
    )]
    InvalidAnswer {
        /// The run.
        run_id: String,
        /// The call.
        tool_call_id: String,
        /// What was wrong.
        reason: String,
        /// The accepted labels, when the question has options.
        accepted: Option<Vec<String>>,
    },
    /// The reason given with a decline is longer than
    /// [`MAX_REASON_BYTES`](crate::MAX_REASON_BYTES). The call stays
    /// pending.
    #[error(
        "the reason for declining tool call {tool_call_id} of run {run_id} is {bytes} bytes; at most {limit} bytes \
         are accepted (the reason is told to the model: keep it to a few sentences)"
    )]
    ReasonTooLong {
        /// The run.
        run_id: String,
        /// The call.
        tool_call_id: String,
        /// The reason's length in bytes.
        bytes: usize,
        /// The most bytes accepted.
        limit: usize,
    },
    /// Approve or decline was used on a call that is not of that kind (for
    /// example approving a question, which needs an answer).
    #[error("tool call {tool_call_id} of run {run_id} {detail}")]
    WrongPendingKind {
        /// The run.
        run_id: String,
        /// The call.
        tool_call_id: String,
        /// What it is and what to do instead.
        detail: String,
    },
    /// Arguments a person edited before approving a call do not fit its
    /// tool's input schema: nothing was run or stored, and the call still
    /// waits.
    #[error(
        "the edited arguments of tool call {tool_call_id} of run {run_id} do not fit its tool's input: {reason}; \
         the call still waits for approval"
    )]
    InvalidArguments {
        /// The run.
        run_id: String,
        /// The call.
        tool_call_id: String,
        /// What is wrong with them.
        reason: String,
    },
    /// Arguments a person edited before approving are refused by one of
    /// the agent's approval rules, as the same call from the model would
    /// be: nothing ran, and the call still waits for approval.
    #[error(
        "the approval rule {rule:?} refuses call {} of run {run_id} with these arguments: {reason}; nothing ran, and the call still waits for approval (approve it as proposed, edit it otherwise, or decline it)",
        crate::quoted_excerpt(tool_call_id)
    )]
    DeniedByRule {
        /// The run.
        run_id: String,
        /// The call.
        tool_call_id: String,
        /// The rule's name.
        rule: String,
        /// The reason it gave.
        reason: String,
    },
    /// Every call waiting for approval was to be decided, and none waits:
    /// the run waits only on questions.
    #[error(
        "run {run_id} has no tool call waiting for approval; it waits on questions ({}): answer them instead",
        questions.join(", ")
    )]
    NothingToApprove {
        /// The run.
        run_id: String,
        /// The questions it waits on.
        questions: Vec<String>,
    },
    /// The call was decided already, as recorded: the same decision again
    /// (a repeat, which changes nothing) or another one (which a decision
    /// made cannot be changed by). `decided` says which.
    #[error(
        "call {} of run {run_id} was already {decided}; a decision made cannot be changed",
        crate::quoted_excerpt(tool_call_id)
    )]
    AlreadyDecided {
        /// The run.
        run_id: String,
        /// The call.
        tool_call_id: String,
        /// How it was decided.
        decided: crate::store::ResolutionKind,
    },
    /// The run names a tool this agent does not have.
    #[error("run {run_id} waits on tool {tool_name}, which agent {agent_id} does not have")]
    UnknownTool {
        /// The run.
        run_id: String,
        /// The agent.
        agent_id: String,
        /// The tool.
        tool_name: String,
    },
    /// Another resume (or a cancel) of the same run won.
    #[error("run {run_id} was resumed or changed by someone else at the same moment; reload it and try again")]
    Conflict {
        /// The run.
        run_id: String,
    },
    /// The run took more model steps than the agent allows.
    #[error("run {run_id} reached the step limit of {limit} model calls")]
    StepLimit {
        /// The run.
        run_id: String,
        /// The limit.
        limit: u32,
    },
    /// The run failed; `failure` says why.
    #[error("run {run_id} failed: {failure}")]
    Failed {
        /// The run.
        run_id: String,
        /// Why.
        failure: RunFailure,
    },
    /// The run cannot be retried: it has not failed, or it failed for a
    /// reason trying again does not fix.
    #[error("run {run_id} cannot be retried: {reason}")]
    NotRetryable {
        /// The run.
        run_id: String,
        /// Why, and what to do instead.
        reason: String,
    },
    /// The run as stored does not fit what was asked of it at the step it
    /// is at: its stored step has no call the decision is for, or it holds
    /// something the run machine cannot go on from. Nothing was written.
    #[error("run {run_id} cannot take this now: {detail}")]
    Refused {
        /// The run.
        run_id: String,
        /// What was refused, and why.
        detail: String,
    },
    /// askloop itself went wrong (a state its machines never reach): a bug,
    /// not anything the caller did. Hosts answer it as a server error and
    /// log it.
    #[error("askloop failed inside{}: {detail}; this is a bug of askloop, please report it", run_id.as_ref().map(|r| format!(" on run {r}")).unwrap_or_default())]
    Internal {
        /// The run, when there is one.
        run_id: Option<String>,
        /// What went wrong.
        detail: String,
    },
    /// The input was not usable.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// An id the caller chose breaks the rule for ids (see [`IdKind`]).
    ///
    /// [`IdKind`]: crate::IdKind
    #[error(transparent)]
    InvalidId(#[from] crate::InvalidId),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl RunError {
    /// The run the error is about, when there is one.
    pub fn run_id(&self) -> Option<&str> {
        match self {
            RunError::UnknownRun { run_id }
            | RunError::OtherAgent { run_id, .. }
            | RunError::NotSuspended { run_id, .. }
            | RunError::Superseded { run_id }
            | RunError::Finished { run_id, .. }
            | RunError::ReasonTooLong { run_id, .. }
            | RunError::Expired { run_id, .. }
            | RunError::ToolCallNotPending { run_id, .. }
            | RunError::AmbiguousResume { run_id, .. }
            | RunError::InvalidAnswer { run_id, .. }
            | RunError::WrongPendingKind { run_id, .. }
            | RunError::NothingToApprove { run_id, .. }
            | RunError::AlreadyDecided { run_id, .. }
            | RunError::InvalidArguments { run_id, .. }
            | RunError::DeniedByRule { run_id, .. }
            | RunError::UnknownTool { run_id, .. }
            | RunError::Conflict { run_id }
            | RunError::StepLimit { run_id, .. }
            | RunError::Failed { run_id, .. }
            | RunError::NotRetryable { run_id, .. }
            | RunError::Refused { run_id, .. } => Some(run_id),
            RunError::Internal { run_id, .. } => run_id.as_deref(),
            RunError::InvalidInput(_) | RunError::InvalidId(_) | RunError::Store(_) => None,
        }
    }

    /// An internal error (a bug of askloop) about `run_id`.
    pub(crate) fn internal(run_id: &str, detail: impl Into<String>) -> Self {
        RunError::Internal {
            run_id: Some(run_id.to_owned()).filter(|r| !r.is_empty()),
            detail: detail.into(),
        }
    }

    /// What kind of refusal it is, for a host that answers it in its own
    /// words (an HTTP status, an exit code). Every variant has one, decided
    /// here without a wildcard, so a new variant cannot go unclassified.
    pub fn kind(&self) -> RunErrorKind {
        match self {
            RunError::UnknownRun { .. } | RunError::OtherAgent { .. } => RunErrorKind::NotFound,
            RunError::NotSuspended { .. }
            | RunError::Finished { .. }
            | RunError::Superseded { .. }
            | RunError::Expired { .. }
            | RunError::ToolCallNotPending { .. }
            | RunError::Conflict { .. }
            | RunError::NotRetryable { .. }
            | RunError::NothingToApprove { .. }
            | RunError::AlreadyDecided { .. } => RunErrorKind::State,
            RunError::UnknownTool { .. }
            | RunError::StepLimit { .. }
            | RunError::Failed { .. }
            | RunError::Refused { .. } => RunErrorKind::RunState,
            RunError::AmbiguousResume { .. } | RunError::InvalidInput(_) | RunError::InvalidId(_) => {
                RunErrorKind::BadRequest
            }
            RunError::InvalidAnswer { .. }
            | RunError::ReasonTooLong { .. }
            | RunError::WrongPendingKind { .. }
            | RunError::InvalidArguments { .. }
            | RunError::DeniedByRule { .. } => RunErrorKind::NotAccepted,
            RunError::Internal { .. } => RunErrorKind::Internal,
            RunError::Store(_) => RunErrorKind::Store,
        }
    }

    /// A stable, machine-readable name of the error (`run_not_suspended`,
    /// `invalid_answer`, ...), the same in every host that shows one (the
    /// HTTP API's `error.code`); a store error's is its own
    /// ([`StoreError::code`]).
    pub fn code(&self) -> &'static str {
        match self {
            RunError::UnknownRun { .. } | RunError::OtherAgent { .. } => "unknown_run",
            RunError::NotSuspended { .. } => "run_not_suspended",
            RunError::Finished { .. } => "run_finished",
            RunError::Superseded { .. } => "superseded",
            RunError::Expired { .. } => "expired",
            RunError::ToolCallNotPending { .. } => "tool_call_not_pending",
            RunError::Conflict { .. } => "conflict",
            RunError::NotRetryable { .. } => "not_retryable",
            RunError::NothingToApprove { .. } => "nothing_to_approve",
            RunError::AlreadyDecided { .. } => "already_decided",
            RunError::AmbiguousResume { .. } => "ambiguous_resume",
            RunError::InvalidInput(_) | RunError::InvalidId(_) => "bad_request",
            RunError::InvalidAnswer { .. } => "invalid_answer",
            RunError::ReasonTooLong { .. } => "reason_too_long",
            RunError::WrongPendingKind { .. } => "wrong_pending_kind",
            RunError::InvalidArguments { .. } => "invalid_arguments",
            RunError::DeniedByRule { .. } => "denied_by_rule",
            RunError::UnknownTool { .. }
            | RunError::StepLimit { .. }
            | RunError::Failed { .. }
            | RunError::Refused { .. } => "run_state",
            RunError::Internal { .. } => "internal",
            RunError::Store(err) => err.code(),
        }
    }
}

/// What kind of refusal a [`RunError`] is ([`RunError::kind`]): the classes
/// a host answers differently (the HTTP API: 404, 409, 409, 400, 422, 500,
/// and the store's own for a store error).
///
/// Not `#[non_exhaustive]` on purpose: a host matches every kind, so a kind
/// added later is a compile error there rather than an answer guessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunErrorKind {
    /// No such run (or not one this agent may act on): answered as missing.
    NotFound,
    /// The run is not in a state that takes this request now (finished,
    /// not waiting on that call, beaten by another answer).
    State,
    /// The run as stored cannot go on as asked (its agent lost a tool, it
    /// reached its step limit, it failed): the run, not the request, is in
    /// the way.
    RunState,
    /// The request itself is malformed or ambiguous.
    BadRequest,
    /// The request is well formed, and the run's question or its rules do
    /// not accept it (an answer that does not fit, arguments a rule denies).
    NotAccepted,
    /// A bug of askloop.
    Internal,
    /// The store failed or refused ([`StoreError`] says how).
    Store,
}

fn list(ids: &[String]) -> String {
    if ids.is_empty() {
        "none".to_owned()
    } else {
        ids.join(", ")
    }
}

fn accepted_text(accepted: &Option<Vec<String>>) -> String {
    match accepted {
        Some(labels) if !labels.is_empty() => {
            let quoted: Vec<String> = labels.iter().map(|l| format!("{l:?}")).collect();
            format!("; accepted: {}", quoted.join(", "))
        }
        _ => String::new(),
    }
}

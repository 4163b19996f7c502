//! What a run starts from and the options of a new run and of a decision.

use serde_json::Value;

use crate::message::Message;
use crate::store::{Author, RunRecord, RunSettings, ThreadKey};

/// What a run starts from.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentInput {
    pub(super) messages: Vec<Message>,
}

impl From<&str> for AgentInput {
    fn from(text: &str) -> Self {
        AgentInput {
            messages: vec![Message::user(text)],
        }
    }
}

impl From<String> for AgentInput {
    fn from(text: String) -> Self {
        AgentInput {
            messages: vec![Message::user(text)],
        }
    }
}

impl From<Vec<Message>> for AgentInput {
    fn from(messages: Vec<Message>) -> Self {
        AgentInput { messages }
    }
}

/// Options for a new run.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct StreamOptions {
    /// Use this run id instead of a new UUID v7.
    pub run_id: Option<String>,
    /// The conversation thread the run belongs to.
    pub thread_id: Option<String>,
    /// Data stored with the run (e.g. how to rebuild its agent later).
    pub metadata: Value,
    /// Narrower limits or other instructions for this run, stored with it
    /// and kept by every later resume (see [`RunSettings`]).
    pub settings: RunSettings,
    /// The stored thread to run on: the run reads its last messages as
    /// context and appends its own (Mastra's `memory`).
    pub thread: Option<ThreadOptions>,
    /// The resource the run belongs to ([`RunRecord::resource_id`]): whom
    /// the caller that starts it is walled to. A host that walls its
    /// callers to resources sets it for every run, on a thread or not, so
    /// that listings by resource ([`RunQuery::resources`]) find it.
    ///
    /// [`RunRecord::resource_id`]: crate::RunRecord::resource_id
    /// [`RunQuery::resources`]: crate::RunQuery::resources
    pub resource_id: Option<String>,
}

/// A new run's thread: which one, how much of it to read, and what a new
/// thread starts with.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ThreadOptions {
    /// The thread: its resource and id. It is created by the run when it
    /// does not exist.
    pub key: ThreadKey,
    /// How many of its last messages to read as context (the agent's
    /// [`AgentBuilder::last_messages`](crate::AgentBuilder::last_messages)
    /// when `None`).
    pub last_messages: Option<u32>,
    /// The title of a thread this run creates.
    pub title: Option<String>,
    /// The metadata of a thread this run creates.
    pub metadata: Option<Value>,
    /// Who sent the new message: recorded on the questions it leaves
    /// unanswered (see [`Agent::stream_with`](crate::Agent::stream_with)).
    pub author: Author,
}

impl ThreadOptions {
    /// Thread `thread_id` of `resource_id`, read as the agent's default
    /// says.
    pub fn new(resource_id: impl Into<String>, thread_id: impl Into<String>) -> Self {
        ThreadOptions {
            key: ThreadKey::new(resource_id, thread_id),
            last_messages: None,
            title: None,
            metadata: None,
            author: Author::default(),
        }
    }

    /// Reads this many of the thread's last messages.
    pub fn last_messages(mut self, messages: u32) -> Self {
        self.last_messages = Some(messages);
        self
    }

    /// Records `author` as the sender of the new message.
    pub fn by(mut self, author: Author) -> Self {
        self.author = author;
        self
    }
}

impl StreamOptions {
    /// The run belongs to `resource_id` (see [`StreamOptions::resource_id`]).
    pub fn for_resource(mut self, resource_id: impl Into<String>) -> Self {
        self.resource_id = Some(resource_id.into());
        self
    }

    /// Options with a caller-chosen run id.
    pub fn with_run_id(run_id: impl Into<String>) -> Self {
        StreamOptions {
            run_id: Some(run_id.into()),
            ..Default::default()
        }
    }

    /// Sets the metadata stored with the run.
    pub fn metadata(mut self, metadata: Value) -> Self {
        self.metadata = metadata;
        self
    }

    /// Sets the thread.
    pub fn thread_id(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    /// Sets the run's settings.
    ///
    /// ```
    /// use askloop::{RunSettings, StreamOptions};
    /// let options = StreamOptions::default().settings(RunSettings::default().max_steps(3));
    /// assert_eq!(options.settings.max_steps, Some(3));
    /// ```
    pub fn settings(mut self, settings: RunSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Runs on a stored thread.
    pub fn on_thread(mut self, thread: ThreadOptions) -> Self {
        self.thread = Some(thread);
        self
    }
}

/// The most bytes (UTF-8) of a decline's reason, as for an `ask_user`
/// answer by default ([`AskUserLimits::max_answer_bytes`]): the reason goes
/// to the model as the call's result, as an answer does. A longer one is
/// [`RunError::ReasonTooLong`] and the call stays pending.
///
/// [`AskUserLimits::max_answer_bytes`]: crate::AskUserLimits::max_answer_bytes
/// [`RunError::ReasonTooLong`]: crate::RunError::ReasonTooLong
pub const MAX_REASON_BYTES: usize = 64 * 1024;

/// A decision for one pending call: what [`Agent::decide`] applies, and
/// [`Agent::decide_all`] applies several of together. The one decision type
/// every channel hands the agent (the HTTP routes, the chat route, links,
/// Slack, the CLI, MCP).
///
/// [`Agent::decide`]: crate::Agent::decide
/// [`Agent::decide_all`]: crate::Agent::decide_all
#[derive(Debug, Clone, PartialEq)]
pub enum CallDecision {
    /// Answer a question, checked against it as
    /// [`Agent::resume_stream`](crate::Agent::resume_stream) checks an
    /// answer (for a call waiting for approval, `{"approved": true}` or
    /// `{"approved": false, "reason": "..."}`).
    Answer(Value),
    /// Run a call that waits for approval.
    Approve,
    /// Run a call that waits for approval with these arguments instead of
    /// the model's (see [`Agent::approve_tool_call_with`]).
    ///
    /// [`Agent::approve_tool_call_with`]: crate::Agent::approve_tool_call_with
    ApproveWith(Value),
    /// Run a call that waits for approval, and let later calls of its tool
    /// run without waiting in this scope (see
    /// [`Agent::approve_tool_call_always`]).
    ///
    /// [`Agent::approve_tool_call_always`]: crate::Agent::approve_tool_call_always
    ApproveAlways(crate::Always),
    /// Decline the call (an approval is denied, a question left
    /// unanswered), with the reason the model is told.
    Decline(Option<String>),
}

/// Which run, and which of its pending calls, a decision is for: the one
/// options shape of [`Agent::resume_stream`], [`Agent::approve_tool_call`]
/// and [`Agent::decline_tool_call`].
///
/// [`Agent::resume_stream`]: crate::Agent::resume_stream
/// [`Agent::approve_tool_call`]: crate::Agent::approve_tool_call
/// [`Agent::decline_tool_call`]: crate::Agent::decline_tool_call
///
/// ```
/// use askloop::ResumeOptions;
/// let options = ResumeOptions::call("run-1", "call-1").reason("not on a Friday");
/// assert_eq!(options.tool_call_id.as_deref(), Some("call-1"));
/// assert_eq!(options.reason.as_deref(), Some("not on a Friday"));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ResumeOptions {
    /// The run.
    pub run_id: String,
    /// The call; may be left out when exactly one call is pending.
    pub tool_call_id: Option<String>,
    /// Why the call is declined, told to the model: used by
    /// [`Agent::decline_tool_call`](crate::Agent::decline_tool_call), and by
    /// a resume that declines an approval (`{"approved": false}`) without a
    /// reason of its own. An answer or an approval takes no reason.
    pub reason: Option<String>,
    /// Who decides, stored with the run's resolution (the library, with
    /// no name, unless set with [`ResumeOptions::by`]).
    pub author: Author,
    /// The run as the caller read it just before, when it did (see
    /// [`ResumeOptions::from_read`]).
    pub(crate) read: Option<Box<RunRecord>>,
}

impl ResumeOptions {
    /// Resumes the run's only pending call, whichever it is when the resume
    /// arrives (Mastra's `resumeStream(data, { runId })`). When others may
    /// answer the same run, prefer [`ResumeOptions::call`]: if the run moved
    /// on to its next question meanwhile, this form would answer that one.
    pub fn run(run_id: impl Into<String>) -> Self {
        ResumeOptions {
            run_id: run_id.into(),
            tool_call_id: None,
            reason: None,
            author: Author::default(),
            read: None,
        }
    }

    /// Resumes a specific call.
    pub fn call(run_id: impl Into<String>, tool_call_id: impl Into<String>) -> Self {
        ResumeOptions {
            run_id: run_id.into(),
            tool_call_id: Some(tool_call_id.into()),
            reason: None,
            author: Author::default(),
            read: None,
        }
    }

    /// The specific call when `tool_call_id` is given, else the run's only
    /// pending call (a host passing on an optional id it was sent).
    pub fn call_or_run(run_id: impl Into<String>, tool_call_id: Option<impl Into<String>>) -> Self {
        ResumeOptions {
            run_id: run_id.into(),
            tool_call_id: tool_call_id.map(Into::into),
            reason: None,
            author: Author::default(),
            read: None,
        }
    }

    /// Sets the reason a decline gives the model.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Who decides: the interface and, where known, the person or client.
    pub fn by(mut self, author: Author) -> Self {
        self.author = author;
        self
    }

    /// Starts the resume from `run`, the run as the caller read it just
    /// before (a server that checked who may decide on it, say), instead of
    /// reading it again. A copy that is out of date by the time the decision
    /// is written costs one more read, never a lost or a doubled decision:
    /// the write is a compare-and-set on the version read, and a refused one
    /// reads the run again, as for decisions that race each other (a call
    /// decided meanwhile makes this one [`RunError::Conflict`]). A record of
    /// another run is not used.
    ///
    /// [`RunError::Conflict`]: crate::RunError::Conflict
    pub fn from_read(mut self, run: RunRecord) -> Self {
        self.read = Some(Box::new(run));
        self
    }

    /// Sets or clears the reason a decline gives the model.
    pub fn with_reason(mut self, reason: Option<String>) -> Self {
        self.reason = reason;
        self
    }
}

//! Where an MCP server is: a command to start (stdio) or a URL (streamable HTTP).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// How long a server has to answer `initialize` by default.
pub const DEFAULT_INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a server has to answer `tools/list` by default.
pub const DEFAULT_LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a server has to answer a tool call by default (the time a
/// person takes to answer its questions does not count): the TypeScript
/// SDK's request timeout.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a stdio server has to end on its own once its input closed, and
/// again after SIGTERM, before it is killed, by default.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(3);

/// How many questions (elicitations) one call may ask the person, by
/// default.
pub const DEFAULT_MAX_QUESTIONS: u32 = 20;

/// How long a tool call that asked the person something is kept alive,
/// waiting for the answer, before askloop gives up on it and ends its MCP
/// session. The stored question stays answerable after that: the answer is
/// then handed to the model with a note (see the crate docs).
pub const DEFAULT_HOLD_FOR: Duration = Duration::from_secs(600);

/// One MCP server whose tools an agent can call.
///
/// ```
/// use askloop_mcp::McpServerSpec;
///
/// let everything = McpServerSpec::stdio("everything", "npx", ["-y", "@modelcontextprotocol/server-everything"]);
/// let remote = McpServerSpec::http("docs", "https://mcp.example.com/mcp").header("Authorization", "Bearer t0k3n");
/// assert_eq!(everything.name, "everything");
/// assert_eq!(remote.name, "docs");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpServerSpec {
    /// A short name, shown in questions and errors.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// Only these of its tools (all when empty).
    pub only_tools: Vec<String>,
    /// How long a call waiting on an answer is kept alive.
    pub hold_for: Duration,
    /// Whether every call of its tools waits for a person's approval.
    pub require_approval: bool,
    /// How long it has to answer `initialize`: a server that misses it is
    /// one that cannot be reached.
    pub initialize_timeout: Duration,
    /// How long it has to answer `tools/list`.
    pub list_timeout: Duration,
    /// How long it has to answer a tool call, not counting the time a person
    /// takes to answer its questions: a call that misses it ends as a tool
    /// error the model is told of, and the server hears
    /// `notifications/cancelled`.
    pub call_timeout: Duration,
    /// A stdio server's time to end on its own once its input closed, and
    /// again after SIGTERM, before SIGKILL.
    pub stop_grace: Duration,
    /// How many questions one call may ask the person: the call that asks
    /// one more ends as a tool error.
    pub max_questions: u32,
}

/// How to reach an MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpTransport {
    /// A program that speaks MCP on its standard input and output. It is
    /// started to list the tools, and that process then serves calls one at
    /// a time; calls at once start more. A process unused for a minute is
    /// stopped (at most four idle ones are kept), and so is one whose call
    /// failed, missed its deadline, or was given up (its run cancelled, its
    /// question expired); see [`crate::stop_servers`] for how.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to its environment.
        env: BTreeMap<String, String>,
        /// Its working folder (the current one when `None`).
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint's URL.
        url: String,
        /// Headers sent with every request (e.g. `Authorization`).
        headers: BTreeMap<String, String>,
    },
}

impl McpServerSpec {
    /// A server started as a program speaking MCP over stdio.
    pub fn stdio<I, S>(name: impl Into<String>, command: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        McpServerSpec {
            name: name.into(),
            transport: McpTransport::Stdio {
                command: command.into(),
                args: args.into_iter().map(Into::into).collect(),
                env: BTreeMap::new(),
                cwd: None,
            },
            only_tools: Vec::new(),
            hold_for: DEFAULT_HOLD_FOR,
            require_approval: false,
            initialize_timeout: DEFAULT_INITIALIZE_TIMEOUT,
            list_timeout: DEFAULT_LIST_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            stop_grace: DEFAULT_STOP_GRACE,
            max_questions: DEFAULT_MAX_QUESTIONS,
        }
    }

    /// A server reached over streamable HTTP.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        McpServerSpec {
            name: name.into(),
            transport: McpTransport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
            },
            only_tools: Vec::new(),
            hold_for: DEFAULT_HOLD_FOR,
            require_approval: false,
            initialize_timeout: DEFAULT_INITIALIZE_TIMEOUT,
            list_timeout: DEFAULT_LIST_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            stop_grace: DEFAULT_STOP_GRACE,
            max_questions: DEFAULT_MAX_QUESTIONS,
        }
    }

    /// Adds an environment variable (stdio servers; ignored for HTTP).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Stdio { env, .. } = &mut self.transport {
            env.insert(key.into(), value.into());
        }
        self
    }

    /// Sets the working folder (stdio servers; ignored for HTTP).
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        if let McpTransport::Stdio { cwd, .. } = &mut self.transport {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Adds a header (HTTP servers; ignored for stdio).
    pub fn header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Http { headers, .. } = &mut self.transport {
            headers.insert(key.into(), value.into());
        }
        self
    }

    /// Offers the model only these tools of the server.
    pub fn only_tools<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.only_tools = tools.into_iter().map(Into::into).collect();
        self
    }

    /// How long a call waiting on an answer is kept alive.
    pub fn hold_for(mut self, duration: Duration) -> Self {
        self.hold_for = duration;
        self
    }

    /// How long the server has to answer `initialize`.
    pub fn initialize_timeout(mut self, deadline: Duration) -> Self {
        self.initialize_timeout = deadline;
        self
    }

    /// How long the server has to answer `tools/list`.
    pub fn list_timeout(mut self, deadline: Duration) -> Self {
        self.list_timeout = deadline;
        self
    }

    /// How long the server has to answer a tool call (the time a person
    /// takes to answer its questions does not count).
    pub fn call_timeout(mut self, deadline: Duration) -> Self {
        self.call_timeout = deadline;
        self
    }

    /// A stdio server's time to end on its own once its input closed, and
    /// again after SIGTERM, before SIGKILL.
    pub fn stop_grace(mut self, grace: Duration) -> Self {
        self.stop_grace = grace;
        self
    }

    /// How many questions one call may ask the person.
    pub fn max_questions(mut self, questions: u32) -> Self {
        self.max_questions = questions;
        self
    }

    /// Makes every call of the server's tools wait for a person's approval
    /// (for some of them only, name them in
    /// `AgentBuilder::require_approval_for`).
    pub fn require_approval(mut self, yes: bool) -> Self {
        self.require_approval = yes;
        self
    }
}

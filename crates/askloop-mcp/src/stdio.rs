//! MCP over standard input and output: one JSON-RPC message per line, for
//! `askloop mcp` (the server end, reading a client) and for the stdio MCP
//! servers askloop starts (the client end, reading a server).
//!
//! rmcp's own line transport drops a line that is not JSON without a word,
//! answers one that is not a message without its id, and drops a line over
//! its limit, so whoever waits on that message would wait forever. This one
//! reads each line with [`crate::incoming`] and decides by who is at the
//! other end ([`LineRole`]):
//!
//! - `askloop mcp` answers every line it cannot use with its JSON-RPC
//!   error, on the same output as the responses, and reads on: a client's
//!   mistake never ends its session.
//! - Reading an MCP server, a line that is not JSON is passed over (as
//!   rmcp and the other SDKs do: a server's stray print must not end its
//!   session), and so is a notification that cannot be read. Anything else
//!   that cannot be read ends the session: a line over [`MAX_LINE_BYTES`],
//!   JSON nested deeper than [`crate::incoming::MAX_DEPTH`], a request or a
//!   response whose members do not fit. A request is first answered with
//!   its error. What the server sent is kept as the session's [`Fault`],
//!   so the call that was waiting fails saying why instead of waiting for
//!   an answer that will never come.
//!
//! A line longer than [`MAX_LINE_BYTES`] is never held: it is refused as
//! soon as it passes the limit and the rest of it is skipped as it arrives.
//!
//! `receive` is polled inside a `select!` and may be dropped at any await:
//! the partial line, the skipping of a long one and an answer not yet
//! written all live on the transport, so the next call takes up where the
//! dropped one stopped.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex as StdMutex, PoisonError};

use futures::SinkExt;
use rmcp::service::{RxJsonRpcMessage, ServiceRole, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::{RoleClient, RoleServer};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::Mutex;
use tokio_util::bytes::Bytes;
use tokio_util::codec::{BytesCodec, FramedWrite};

use crate::incoming::{Refusal, read_message, read_server_message};

/// The longest line read as one message: 16 MiB, as rmcp's own transport.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// A line buffer bigger than this is given back after its line.
const KEEP_BUFFER_BYTES: usize = 64 * 1024;

/// Who is at the other end of the lines, and so what a line that cannot be
/// used leads to.
pub trait LineRole: ServiceRole {
    /// Reads one line as a message from the other end.
    fn read(line: &[u8]) -> Result<RxJsonRpcMessage<Self>, Box<Refusal>>;

    /// What follows a line that could not be read.
    #[doc(hidden)]
    fn after(refusal: &Refusal) -> After;
}

/// What follows a line that could not be used.
#[doc(hidden)]
#[derive(Debug)]
pub enum After {
    /// Read on.
    PassOver,
    /// Answer it with its error, and read on.
    Answer,
    /// Answer it with its error, then end the session.
    AnswerAndEnd,
    /// End the session.
    End,
}

/// `askloop mcp`, reading a client: every line it cannot use is answered,
/// but a notification (JSON-RPC never answers one).
impl LineRole for RoleServer {
    fn read(line: &[u8]) -> Result<RxJsonRpcMessage<Self>, Box<Refusal>> {
        read_message(line)
    }

    fn after(refusal: &Refusal) -> After {
        if refusal.is_notification() {
            After::PassOver
        } else {
            After::Answer
        }
    }
}

/// askloop's client, reading an MCP server: see the module's rules.
impl LineRole for RoleClient {
    fn read(line: &[u8]) -> Result<RxJsonRpcMessage<Self>, Box<Refusal>> {
        read_server_message(line)
    }

    fn after(refusal: &Refusal) -> After {
        let not_json = refusal.error.code == rmcp::model::ErrorCode::PARSE_ERROR && !refusal.nests_too_deep();
        if refusal.is_notification() || not_json {
            After::PassOver
        } else if refusal.id.is_some() {
            After::AnswerAndEnd
        } else {
            After::End
        }
    }
}

/// Why the other end's session ended on a line askloop could not read, in
/// words for the call that was waiting (`None` while nothing went wrong).
#[derive(Debug, Clone, Default)]
pub struct Fault {
    what: Arc<StdMutex<Option<String>>>,
}

impl Fault {
    fn set(&self, what: String) {
        let mut slot = self.what.lock().unwrap_or_else(PoisonError::into_inner);
        slot.get_or_insert(what);
    }

    /// What the other end sent that ended the session, if it did.
    pub fn get(&self) -> Option<String> {
        self.what.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// Messages as lines on a reader and a writer.
pub struct LineTransport<Role, R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    /// Skipping the rest of a line that passed the limit.
    skipping: bool,
    write: Arc<Mutex<FramedWrite<W, BytesCodec>>>,
    /// An error to answer before reading on.
    answer: Option<Answer>,
    /// The session ends once the answer is written.
    ending: bool,
    fault: Fault,
    role: PhantomData<fn() -> Role>,
}

impl<Role, R, W> std::fmt::Debug for LineTransport<Role, R, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineTransport")
            .field("line_bytes", &self.line.len())
            .field("skipping", &self.skipping)
            .field("answering", &self.answer.is_some())
            .field("ending", &self.ending)
            .finish()
    }
}

enum Answer {
    Queued(Bytes),
    Flushing,
}

/// What one read of the input gave.
enum Read {
    Line,
    TooLong,
    End,
}

impl<Role: LineRole, R: AsyncRead + Unpin, W: AsyncWrite + Unpin> LineTransport<Role, R, W> {
    /// Reads messages from `read` and writes to `write`.
    pub fn new(read: R, write: W) -> Self {
        LineTransport {
            read: BufReader::new(read),
            line: Vec::new(),
            skipping: false,
            write: Arc::new(Mutex::new(FramedWrite::new(write, BytesCodec::new()))),
            answer: None,
            ending: false,
            fault: Fault::default(),
            role: PhantomData,
        }
    }

    /// Where the transport says why it ended the session, if it does.
    pub fn fault(&self) -> Fault {
        self.fault.clone()
    }

    /// Reads up to the end of the next line into `self.line`, never letting
    /// it grow past [`MAX_LINE_BYTES`].
    async fn read_line(&mut self) -> std::io::Result<Read> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                return Ok(Read::End);
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            let mut read = None;
            if self.skipping {
                self.skipping = newline.is_none();
            } else if self.line.len() + take > MAX_LINE_BYTES + 1 {
                self.line = Vec::new();
                self.skipping = newline.is_none();
                read = Some(Read::TooLong);
            } else {
                self.line.extend_from_slice(&available[..take]);
                read = newline.map(|_| Read::Line);
            }
            self.read.consume(take);
            if let Some(read) = read {
                return Ok(read);
            }
        }
    }

    /// Writes the answer queued, if any; `false` when the output is closed.
    async fn write_answer(&mut self) -> bool {
        let mut write = self.write.lock().await;
        if let Some(Answer::Queued(bytes)) = &self.answer {
            if write.feed(bytes.clone()).await.is_err() {
                return false;
            }
            self.answer = Some(Answer::Flushing);
        }
        if self.answer.is_some() {
            if SinkExt::<Bytes>::flush(&mut *write).await.is_err() {
                return false;
            }
            self.answer = None;
        }
        true
    }

    fn queue(&mut self, refusal: &Refusal) {
        tracing::debug!(code = refusal.error.code.0, message = %refusal.error.message, "refused a message on stdio");
        self.answer = line_of(&refusal.response()).ok().map(Answer::Queued);
    }

    /// Handles a line that could not be used, as the other end's role says.
    fn refused(&mut self, refusal: &Refusal) {
        match Role::after(refusal) {
            After::PassOver => {
                tracing::debug!(message = %refusal.error.message, "passed over a line that cannot be read");
            }
            After::Answer => self.queue(refusal),
            After::AnswerAndEnd => {
                self.queue(refusal);
                self.end(refusal.error.message.to_string());
            }
            After::End => self.end(refusal.error.message.to_string()),
        }
    }

    fn end(&mut self, why: String) {
        tracing::warn!(reason = %why, "ended an MCP session on a message it cannot read");
        self.fault.set(why);
        self.ending = true;
    }
}

fn line_of(message: &impl serde::Serialize) -> serde_json::Result<Bytes> {
    let mut line = serde_json::to_vec(message)?;
    line.push(b'\n');
    Ok(Bytes::from(line))
}

impl<Role, R, W> Transport<Role> for LineTransport<Role, R, W>
where
    Role: LineRole,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<Role>,
    ) -> impl Future<Output = Result<(), std::io::Error>> + Send + 'static {
        let write = Arc::clone(&self.write);
        let line = line_of(&item);
        async move { write.lock().await.send(line?).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<Role>> {
        loop {
            if !self.write_answer().await || self.ending {
                return None;
            }
            match self.read_line().await {
                Ok(Read::Line) => {}
                Ok(Read::TooLong) => {
                    let refusal = Refusal::invalid_request(
                        None,
                        format!("a line is longer than the {MAX_LINE_BYTES} bytes (16 MiB) a message may have"),
                    );
                    self.refused(&refusal);
                    continue;
                }
                Ok(Read::End) => return None,
                Err(err) => {
                    tracing::error!(error = %err, "cannot read the MCP peer's output");
                    return None;
                }
            }
            let line = std::mem::take(&mut self.line);
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            let read = (!text.trim_ascii().is_empty()).then(|| Role::read(text));
            if line.capacity() <= KEEP_BUFFER_BYTES {
                self.line = line;
                self.line.clear();
            }
            match read {
                None => {}
                Some(Ok(message)) => return Some(message),
                Some(Err(refusal)) => self.refused(&refusal),
            }
        }
    }

    async fn close(&mut self) -> Result<(), std::io::Error> {
        SinkExt::<Bytes>::close(&mut *self.write.lock().await).await
    }
}

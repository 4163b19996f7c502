//! The stdio transport of `askloop mcp`: one JSON-RPC message per line, and
//! an answer to every line that is not one.
//!
//! rmcp's own line transport drops a line that is not JSON without a word
//! and answers one that is not a message without its id, so a client
//! waiting on that id would wait forever. This one reads each line with
//! [`read_message`] and writes the error it gets back on the same output as
//! the responses, before it reads on. A line longer than [`MAX_LINE_BYTES`]
//! is answered as soon as it passes the limit and the rest of it is skipped
//! as it arrives, never held.
//!
//! `receive` is polled inside a `select!` and may be dropped at any await:
//! the partial line, the skipping of a long one and an answer not yet
//! written all live on the transport, so the next call takes up where the
//! dropped one stopped.

use std::sync::Arc;

use futures::SinkExt;
use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::Mutex;
use tokio_util::bytes::Bytes;
use tokio_util::codec::{BytesCodec, FramedWrite};

use crate::incoming::{Refusal, read_message};

/// The longest line read as one message: 16 MiB, as rmcp's own transport.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// A line buffer bigger than this is given back after its line.
const KEEP_BUFFER_BYTES: usize = 64 * 1024;

/// Messages as lines on a reader and a writer (stdin and stdout).
pub struct LineTransport<R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    /// Skipping the rest of a line that passed the limit.
    skipping: bool,
    write: Arc<Mutex<FramedWrite<W, BytesCodec>>>,
    /// An error to answer before reading on.
    answer: Option<Answer>,
}

impl<R, W> std::fmt::Debug for LineTransport<R, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineTransport")
            .field("line_bytes", &self.line.len())
            .field("skipping", &self.skipping)
            .field("answering", &self.answer.is_some())
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

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> LineTransport<R, W> {
    /// Reads messages from `read` and writes to `write`.
    pub fn new(read: R, write: W) -> Self {
        LineTransport {
            read: BufReader::new(read),
            line: Vec::new(),
            skipping: false,
            write: Arc::new(Mutex::new(FramedWrite::new(write, BytesCodec::new()))),
            answer: None,
        }
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
}

fn line_of(message: &impl serde::Serialize) -> serde_json::Result<Bytes> {
    let mut line = serde_json::to_vec(message)?;
    line.push(b'\n');
    Ok(Bytes::from(line))
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), std::io::Error>> + Send + 'static {
        let write = Arc::clone(&self.write);
        let line = line_of(&item);
        async move { write.lock().await.send(line?).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if !self.write_answer().await {
                return None;
            }
            match self.read_line().await {
                Ok(Read::Line) => {}
                Ok(Read::TooLong) => {
                    self.queue(&Refusal::invalid_request(
                        None,
                        format!(
                            "the line is longer than the {MAX_LINE_BYTES} bytes a message may have; it was skipped"
                        ),
                    ));
                    continue;
                }
                Ok(Read::End) => return None,
                Err(err) => {
                    tracing::error!(error = %err, "cannot read stdin");
                    return None;
                }
            }
            let line = std::mem::take(&mut self.line);
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            let read = (!text.trim_ascii().is_empty()).then(|| read_message(text));
            if line.capacity() <= KEEP_BUFFER_BYTES {
                self.line = line;
                self.line.clear();
            }
            match read {
                None => {}
                Some(Ok(message)) => return Some(message),
                Some(Err(refusal)) if refusal.is_notification() => {
                    tracing::debug!(message = %refusal.error.message, "dropped a notification that cannot be read");
                }
                Some(Err(refusal)) => self.queue(&refusal),
            }
        }
    }

    async fn close(&mut self) -> Result<(), std::io::Error> {
        SinkExt::<Bytes>::close(&mut *self.write.lock().await).await
    }
}

//! [`AgentStream`]: the chunks of one stream of a run, and its final
//! [`StreamOutput`].

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};

use crate::chunk::{Chunk, ChunkKind};
use crate::message::{FinishReason, Usage};
use crate::store::{PendingToolCall, RunStatus};

/// How a stream ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StreamOutput {
    /// The run.
    pub run_id: String,
    /// The run's status when the stream ended.
    pub status: RunStatus,
    /// Why the stream ended: `suspended` when the run waits on a person.
    pub finish_reason: FinishReason,
    /// The text the model produced in this stream.
    pub text: String,
    /// The tool calls the run waits on (empty unless suspended).
    pub pending: Vec<PendingToolCall>,
    /// Tokens used by the whole run so far.
    pub usage: Usage,
    /// What went wrong, for a failed run.
    pub error: Option<String>,
}

/// The chunks of one stream of a run.
///
/// The run is driven by a task of its own: dropping the stream stops the
/// chunks, not the run, which still reaches its next stored state (suspended,
/// completed or failed).
pub struct AgentStream {
    run_id: String,
    chunks: mpsc::Receiver<Chunk>,
    output: oneshot::Receiver<StreamOutput>,
}

impl fmt::Debug for AgentStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentStream")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl AgentStream {
    pub(crate) fn new(run_id: String, chunks: mpsc::Receiver<Chunk>, output: oneshot::Receiver<StreamOutput>) -> Self {
        AgentStream { run_id, chunks, output }
    }

    /// The run's id: keep it to resume the run later.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Reads the rest of the stream and returns how it ended.
    pub async fn output(mut self) -> StreamOutput {
        while self.chunks.recv().await.is_some() {}
        self.finish().await
    }

    /// Reads the rest of the stream, returning its chunks and how it ended.
    pub async fn collect(mut self) -> (Vec<Chunk>, StreamOutput) {
        let mut chunks = Vec::new();
        while let Some(chunk) = self.chunks.recv().await {
            chunks.push(chunk);
        }
        let output = self.finish().await;
        (chunks, output)
    }

    /// Only the text deltas.
    pub fn text_stream(self) -> impl Stream<Item = String> + Send + Unpin {
        self.filter_map(|chunk| async move {
            match chunk.kind {
                ChunkKind::TextDelta(delta) => Some(delta.text),
                _ => None,
            }
        })
        .boxed()
    }

    async fn finish(self) -> StreamOutput {
        let run_id = self.run_id;
        self.output.await.unwrap_or_else(|_| StreamOutput {
            run_id,
            status: RunStatus::Failed,
            finish_reason: FinishReason::Error,
            text: String::new(),
            pending: Vec::new(),
            usage: Usage::default(),
            error: Some("the run's task ended without reporting an outcome".into()),
        })
    }
}

impl Stream for AgentStream {
    type Item = Chunk;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Chunk>> {
        self.chunks.poll_recv(cx)
    }
}

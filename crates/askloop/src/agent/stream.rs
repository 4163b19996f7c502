//! [`AgentStream`]: the chunks of one stream of a run, and its final
//! [`StreamOutput`].
//!
//! The run is driven inside the stream itself: polling the stream polls the
//! driver, which leaves its chunks in a small queue (`ChunkQueue`) the stream hands out.
//! No task, no channel and no cross-thread wake-up per chunk. If the stream
//! is dropped before the run reaches a stored state, the rest of the run is
//! spawned onto the runtime, so dropping a stream never strands a run.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};

use crate::chunk::{Chunk, ChunkKind};
use crate::message::{FinishReason, Usage};
use crate::store::{PendingToolCall, RunFailure, RunStatus};

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
    /// Why, for a failed run.
    pub failure: Option<RunFailure>,
}

impl StreamOutput {
    /// What went wrong, for people, when the run failed (its failure's
    /// message).
    pub fn error(&self) -> Option<String> {
        self.failure.as_ref().map(RunFailure::message)
    }
}

/// Where the driver leaves chunks for the stream to hand out.
pub(crate) type ChunkQueue = Arc<Mutex<VecDeque<Chunk>>>;

type DriverFuture = Pin<Box<dyn Future<Output = StreamOutput> + Send>>;

/// The chunks of one stream of a run.
///
/// The run is driven as the stream is polled: read it (chunk by chunk, or
/// with [`AgentStream::output`] / [`AgentStream::output_with_chunks`]) to
/// move the run on.
///
/// # Dropping a stream
///
/// Dropping a stream before its end does not stop or lose the run. Inside
/// a Tokio runtime, the rest of the run is spawned onto the runtime and
/// carries on to its next stored state (suspended, completed or failed);
/// its remaining chunks are discarded, and the run can be read back with
/// [`Agent::get_run`](crate::Agent::get_run). Outside a runtime the run
/// stays `running` under its lease, which nobody renews: once the lease
/// runs out, [`Agent::recover_runs`](crate::Agent::recover_runs) (in this
/// or any other process) takes it over from its last stored step. To stop
/// a run, use [`Agent::cancel_run`](crate::Agent::cancel_run).
pub struct AgentStream {
    run_id: String,
    queue: ChunkQueue,
    driver: Option<DriverFuture>,
    output: Option<StreamOutput>,
}

impl fmt::Debug for AgentStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentStream")
            .field("run_id", &self.run_id)
            .field("running", &self.driver.is_some())
            .finish_non_exhaustive()
    }
}

impl AgentStream {
    pub(crate) fn new(
        run_id: String,
        queue: ChunkQueue,
        driver: impl Future<Output = StreamOutput> + Send + 'static,
    ) -> Self {
        AgentStream {
            run_id,
            queue,
            driver: Some(Box::pin(driver)),
            output: None,
        }
    }

    /// Drives the run to the end of this stream now, keeping its chunks to
    /// be read as usual.
    pub(crate) async fn settled(mut self) -> Self {
        if let Some(driver) = self.driver.take() {
            self.output = Some(driver.await);
        }
        self
    }

    /// The run's id: keep it to resume the run later.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Reads the rest of the stream and returns how it ended.
    pub async fn output(mut self) -> StreamOutput {
        while self.next().await.is_some() {}
        self.finish()
    }

    /// Reads the rest of the stream, returning its chunks and how it ended.
    /// (Named apart from [`StreamExt::collect`], which an `AgentStream` has
    /// too, as a stream of chunks.)
    pub async fn output_with_chunks(mut self) -> (Vec<Chunk>, StreamOutput) {
        let mut chunks = Vec::new();
        while let Some(chunk) = self.next().await {
            chunks.push(chunk);
        }
        let output = self.finish();
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

    fn finish(&mut self) -> StreamOutput {
        self.output.take().unwrap_or_else(|| StreamOutput {
            run_id: self.run_id.clone(),
            status: RunStatus::Failed,
            finish_reason: FinishReason::Error,
            text: String::new(),
            pending: Vec::new(),
            usage: Usage::default(),
            failure: Some(RunFailure::Broken {
                message: "the stream's outcome was already taken".into(),
            }),
        })
    }

    fn pop(&self) -> Option<Chunk> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front()
    }
}

impl Stream for AgentStream {
    type Item = Chunk;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Chunk>> {
        loop {
            if let Some(chunk) = self.pop() {
                return Poll::Ready(Some(chunk));
            }
            let Some(driver) = self.driver.as_mut() else {
                return Poll::Ready(None);
            };
            match driver.as_mut().poll(cx) {
                Poll::Ready(output) => {
                    self.driver = None;
                    self.output = Some(output);
                }
                // The driver left chunks and waits on I/O: hand them out.
                Poll::Pending if !self.queue.lock().unwrap_or_else(|p| p.into_inner()).is_empty() => {}
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Drop for AgentStream {
    fn drop(&mut self) {
        // The reader went away mid-run: finish the run on the runtime so it
        // still reaches its next stored state (suspended, completed or failed).
        if let Some(driver) = self.driver.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(driver);
                }
                Err(_) => tracing::warn!(
                    run_id = %self.run_id,
                    "an agent stream was dropped mid-run outside a Tokio runtime; the run stays running"
                ),
            }
        }
    }
}

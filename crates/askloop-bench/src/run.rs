//! The two halves of a round trip, timed the way `docs/benchmarks.md` defines them, with
//! what each stream showed kept for the correctness checks: a fast wrong
//! answer is worthless.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use askloop::{Agent, AgentStream, Chunk, ChunkKind, ResumeOptions, RunStatus, StreamOptions};
use askloop_testkit::workload;
use futures::StreamExt;
use serde_json::Value;

/// The answer the bench gives to the deploy question.
pub const DEPLOY_ANSWER: &str = "staging";

/// The final text of a correct deploy round trip.
pub const DEPLOY_EXPECTED: &str = "Deploying to User answered: staging.";

/// What one stream showed, and how long it took.
#[derive(Debug)]
pub struct Streamed {
    /// The run.
    pub run_id: String,
    /// From starting (or resuming) the stream to its end.
    pub elapsed: Duration,
    /// The run's status when the stream ended.
    pub status: RunStatus,
    /// The text the model produced in this stream.
    pub text: String,
    /// The question of the `tool-call-suspended` chunk, if one came.
    pub question: Option<String>,
    /// Why the run failed, if it did.
    pub error: Option<String>,
    /// The stream's last `step-finish` chunk, which carries the whole
    /// conversation (what a server sends of it is measured apart).
    pub last_step_finish: Option<Chunk>,
}

impl Streamed {
    /// Checks the stream suspended on `question`.
    pub fn expect_question(&self, question: &str) -> anyhow::Result<()> {
        match (&self.status, &self.question) {
            (RunStatus::Suspended, Some(asked)) if asked == question => Ok(()),
            _ => bail!(
                "run {} should have suspended on {question:?}; it ended {} having asked {:?}{}",
                self.run_id,
                self.status,
                self.question,
                self.error_suffix()
            ),
        }
    }

    /// Checks the run completed with exactly `text`.
    pub fn expect_text(&self, text: &str) -> anyhow::Result<()> {
        if self.status == RunStatus::Completed && self.text == text && self.question.is_none() {
            return Ok(());
        }
        bail!(
            "run {} should have completed with {text:?}; it ended {} with {:?}{}",
            self.run_id,
            self.status,
            self.text,
            self.error_suffix()
        )
    }

    fn error_suffix(&self) -> String {
        self.error.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
    }
}

/// Starts a run with the benchmark's prompt and reads it to its end.
pub async fn start(agent: &Agent) -> anyhow::Result<Streamed> {
    start_with(agent, StreamOptions::default()).await
}

/// [`start`] with options (a stored thread to run on, say).
pub async fn start_with(agent: &Agent, options: StreamOptions) -> anyhow::Result<Streamed> {
    let started = Instant::now();
    let stream = agent
        .stream_with(workload::DEPLOY_PROMPT, options)
        .await
        .context("cannot start a run")?;
    Ok(drain(stream, started).await)
}

/// Answers the run's pending question and reads the resumed stream to its end.
pub async fn resume(agent: &Agent, run_id: &str, answer: &str) -> anyhow::Result<Streamed> {
    let started = Instant::now();
    let stream = agent
        .resume_stream(answer, ResumeOptions::run(run_id))
        .await
        .with_context(|| format!("cannot resume run {run_id}"))?;
    Ok(drain(stream, started).await)
}

async fn drain(mut stream: AgentStream, started: Instant) -> Streamed {
    let run_id = stream.run_id().to_owned();
    let mut question = None;
    let mut last_step_finish = None;
    while let Some(chunk) = stream.next().await {
        match &chunk.kind {
            ChunkKind::ToolCallSuspended(suspended) => {
                question = suspended
                    .suspend_payload
                    .get("question")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            ChunkKind::StepFinish(_) => last_step_finish = Some(chunk),
            _ => {}
        }
    }
    let output = stream.output().await;
    Streamed {
        run_id,
        elapsed: started.elapsed(),
        status: output.status,
        error: output.error(),
        text: output.text,
        question,
        last_step_finish,
    }
}

/// One deploy round trip, checked: (suspend time, resume time).
pub async fn deploy_round_trip(agent: &Agent) -> anyhow::Result<(Duration, Duration)> {
    let suspended = start(agent).await?;
    suspended.expect_question(workload::DEPLOY_QUESTION)?;
    let resumed = resume(agent, &suspended.run_id, DEPLOY_ANSWER).await?;
    resumed.expect_text(DEPLOY_EXPECTED)?;
    Ok((suspended.elapsed, resumed.elapsed))
}

//! Taking over runs whose driver died. A run being driven holds a lease that
//! its driver renews; when a process dies mid-step (a kill -9 during a model
//! call, a crash, a lost machine) the lease runs out and the run would wait
//! for ever. The server looks for such runs at start and then every
//! [`crate::ServerOptions::recover_every`], takes each over (one
//! compare-and-set in the store: of several instances looking at once, one
//! gets it) and drives it on from its last stored step, exactly as a client
//! stream would.
//!
//! The same sweep resolves questions and approvals whose time limit passed
//! (`Agent::expire_runs`): expiry is durable, it happens even when the
//! process that asked is long gone.

use std::time::Duration;

use askloop::{Agent, Author, Interface};
use tokio::sync::watch;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// Looks for stalled runs of `agents` now and then every `every`, until
/// `stopping` turns true. Each run taken over is driven on `runs`, so a
/// shutdown waits for it like any other.
pub(crate) async fn take_over_stalled_runs(
    agents: Vec<Agent>,
    runs: TaskTracker,
    every: Duration,
    mut stopping: watch::Receiver<bool>,
) {
    loop {
        for agent in &agents {
            match agent.recover_runs_by(Author::via(Interface::Server)).await {
                Ok(streams) => {
                    for stream in streams {
                        let run_id = stream.run_id().to_owned();
                        tracing::info!(run_id = %run_id, agent = agent.id(), "took over a run whose driver stopped");
                        let span = tracing::info_span!("recovered_run", run_id = %run_id);
                        runs.spawn(stream.output().instrument(span));
                    }
                }
                Err(err) => tracing::warn!(agent = agent.id(), error = %err, "cannot look for stalled runs"),
            }
            match agent.expire_runs(Author::via(Interface::Server)).await {
                Ok(streams) => {
                    for stream in streams {
                        let run_id = stream.run_id().to_owned();
                        tracing::info!(run_id = %run_id, agent = agent.id(), "resolved a question whose time limit passed");
                        let span = tracing::info_span!("expired_question", run_id = %run_id);
                        runs.spawn(stream.output().instrument(span));
                    }
                }
                Err(err) => tracing::warn!(agent = agent.id(), error = %err, "cannot look for expired questions"),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stopping.wait_for(|stop| *stop) => return,
        }
    }
}

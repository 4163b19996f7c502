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
//! (`Agent::expire_run`, one read of the overdue runs for all agents):
//! expiry is durable, it happens even when the process that asked is long
//! gone.

use std::sync::Arc;
use std::time::Duration;

use askloop::{Agent, Author, Clock, ExpiredRuns, Interface, RunError, RunStore};
use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// How many runs one read of expired leases returns.
const EXPIRED_PAGE: u32 = 500;

/// Looks for stalled runs of `agents` now and then every `every`, until
/// `stopping` turns true; what has run out is decided by `clock` (the
/// agents'). Each run taken over is driven on `runs`, so a shutdown waits
/// for it like any other.
pub(crate) async fn take_over_stalled_runs(
    agents: Vec<Agent>,
    store: Arc<dyn RunStore>,
    clock: Arc<dyn Clock>,
    runs: TaskTracker,
    every: Duration,
    mut stopping: watch::Receiver<bool>,
) {
    loop {
        for look in [Look::Stalled, Look::Overdue] {
            if let Err(err) = sweep_once(look, &agents, store.as_ref(), &runs, clock.now()).await {
                tracing::warn!(error = %err, "cannot look for {}", look.what());
            }
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stopping.wait_for(|stop| *stop) => return,
        }
    }
}

/// What one look of the sweep goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// Runs whose lease ran out: their driver stopped.
    Stalled,
    /// Runs with a question or approval past its time limit.
    Overdue,
}

impl Look {
    fn what(self) -> &'static str {
        match self {
            Look::Stalled => "stalled runs",
            Look::Overdue => "expired questions",
        }
    }
}

/// One look at `now`: reads the runs of `look` page after page, once for
/// every agent, and hands each to its agent: a stalled run to take over, a
/// run with a call past its time limit to resolve it. Each run that goes on
/// is driven on `runs`. Runs of agents this server does not have are left
/// alone. Returns how many runs it took over or resolved calls of.
pub(crate) async fn sweep_once(
    look: Look,
    agents: &[Agent],
    store: &dyn RunStore,
    runs: &TaskTracker,
    now: DateTime<Utc>,
) -> Result<usize, RunError> {
    let author = Author::via(Interface::Server);
    let mut pages = match look {
        Look::Stalled => ExpiredRuns::new(store, now, EXPIRED_PAGE),
        Look::Overdue => ExpiredRuns::time_limits(store, now, EXPIRED_PAGE),
    };
    let mut acted = 0;
    while let Some(page) = pages.next_page().await? {
        for run in page {
            let Some(agent) = agents.iter().find(|agent| agent.id() == run.agent_id) else {
                continue;
            };
            let run_id = run.run_id.clone();
            let streams = match look {
                Look::Stalled => agent.recover_listed_run(run, author.clone()).await.map(Vec::from_iter),
                Look::Overdue => agent.expire_run(&run_id, author.clone()).await,
            };
            match streams {
                // Taken over, renewed or answered by someone else first.
                Ok(streams) if streams.is_empty() => {}
                Ok(streams) => {
                    acted += 1;
                    let done = match look {
                        Look::Stalled => "took over a run whose driver stopped",
                        Look::Overdue => "resolved a question whose time limit passed",
                    };
                    tracing::info!(run_id = %run_id, agent = agent.id(), "{done}");
                    for stream in streams {
                        let span = tracing::info_span!("swept_run", run_id = %run_id, look = ?look);
                        runs.spawn(stream.output().instrument(span));
                    }
                }
                Err(err) => tracing::warn!(run_id = %run_id, error = %err, "cannot act on one of the {}", look.what()),
            }
        }
    }
    Ok(acted)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use askloop::{Lease, MemoryStore, RunQuery, RunRecord, RunStatus, ScriptedModel};

    use super::*;

    /// Agents `a` and `b` on `store`, each with a model playing `script`.
    fn agents_a_and_b(store: &Arc<dyn RunStore>, script: &str) -> Vec<Agent> {
        ["a", "b"]
            .map(|id| {
                let model = ScriptedModel::from_json("s", script).unwrap();
                Agent::builder(id)
                    .model(Arc::new(model))
                    .store(Arc::clone(store))
                    .build()
                    .unwrap()
            })
            .to_vec()
    }

    #[tokio::test]
    async fn one_look_takes_over_the_stalled_runs_of_every_agent_past_one_page_and_leaves_unknown_agents_alone() {
        let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
        let agents = agents_a_and_b(&store, r#"{"turns": [{"text": "back"}]}"#);
        let dead = Lease::new("dead", Utc::now() - chrono::Duration::seconds(5));
        // 1,300 stalled runs: 434 of a, 433 of b, 433 of an agent this
        // server does not have.
        for n in 0..1300 {
            let run = {
                let mut record = RunRecord::default();
                record.run_id = format!("r{n:04}");
                record.agent_id = ["a", "b", "c"][n % 3].to_owned();
                record.lease = Some(dead.clone());
                record.message_count = 1;
                record
            };
            store.create(&run, &[askloop::Message::user("go")]).await.unwrap();
        }
        let runs = TaskTracker::new();
        let taken = sweep_once(Look::Stalled, &agents, store.as_ref(), &runs, Utc::now())
            .await
            .unwrap();
        assert_eq!(taken, 867);
        runs.close();
        runs.wait().await;
        let count = |status| {
            let store = Arc::clone(&store);
            async move {
                let listed = store
                    .list(&RunQuery {
                        status: Some(status),
                        ..RunQuery::default()
                    })
                    .await
                    .unwrap();
                let mut by_agent = [0; 3];
                for run in listed {
                    by_agent[["a", "b", "c"].iter().position(|a| *a == run.agent_id).unwrap()] += 1;
                }
                by_agent
            }
        };
        assert_eq!(count(RunStatus::Completed).await, [434, 433, 0]);
        assert_eq!(
            count(RunStatus::Running).await,
            [0, 0, 433],
            "runs of unknown agents are left alone"
        );
        // A second look finds nothing of a or b.
        assert_eq!(
            sweep_once(Look::Stalled, &agents, store.as_ref(), &runs, Utc::now())
                .await
                .unwrap(),
            0
        );
    }

    // The test stores runs as a store reads them back: waiting on a call.
    #[allow(clippy::disallowed_methods)]
    #[tokio::test]
    async fn one_look_resolves_the_overdue_questions_of_every_agent_past_one_page_and_leaves_unknown_agents_alone() {
        let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
        // The script's first turn is the stored one that asked.
        let agents = agents_a_and_b(
            &store,
            r#"{"turns": [{"text": "asked"}, {"text": "went on without it"}]}"#,
        );
        let overdue = Utc::now() - chrono::Duration::seconds(5);
        // 1,100 runs waiting on a question whose limit passed: 367 of a,
        // 367 of b, 366 of an agent this server does not have.
        for n in 0..1100 {
            let call = askloop::ToolCall {
                id: "c1".into(),
                name: "ask_user".into(),
                args: serde_json::json!({"question": "Which city?"}).into(),
            };
            let run = {
                let mut record = RunRecord::default().with_calls(
                    RunStatus::Suspended,
                    vec![askloop::PendingToolCall {
                        tool_call_id: call.id.clone(),
                        tool_name: call.name.clone(),
                        args: call.args.clone(),
                        kind: askloop::PendingKind::Suspended,
                        suspend_payload: Some(serde_json::json!({"question": "Which city?"}).into()),
                        resume_schema: None,
                        expires_at: Some(overdue),
                        started_at: None,
                    }],
                );
                record.run_id = format!("r{n:04}");
                record.agent_id = ["a", "b", "c"][n % 3].to_owned();
                record.message_count = 2;
                record
            };
            let messages = [
                askloop::Message::user("go"),
                askloop::Message::assistant("", vec![call]),
            ];
            store.create(&run, &messages).await.unwrap();
        }
        let runs = TaskTracker::new();
        let resolved = sweep_once(Look::Overdue, &agents, store.as_ref(), &runs, Utc::now())
            .await
            .unwrap();
        assert_eq!(resolved, 734);
        runs.close();
        runs.wait().await;
        let listed = store.list(&RunQuery::default()).await.unwrap();
        let status = |agent: &str, status| {
            listed
                .iter()
                .filter(|run| run.agent_id == agent && run.status() == status)
                .count()
        };
        assert_eq!(status("a", RunStatus::Completed), 367);
        assert_eq!(status("b", RunStatus::Completed), 367);
        assert_eq!(
            status("c", RunStatus::Suspended),
            366,
            "runs of unknown agents are left alone"
        );
        // A second look finds nothing of a or b.
        assert_eq!(
            sweep_once(Look::Overdue, &agents, store.as_ref(), &runs, Utc::now())
                .await
                .unwrap(),
            0
        );
    }
}

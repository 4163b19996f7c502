//! Carrying out a request about a stored run: the effects of its
//! [`Entry`] machine (reads, waits, claims, cancels, take-overs, a driver
//! applying a decision) against the agent's store and clock, until the
//! request is done or a driver holds the run. Every decision is the
//! machine's (`machine/entry.rs`); this only moves data and time.

use std::sync::Arc;

use super::driver::{Begin, Driver, RunState, store_update};
use super::inner::AgentInner;
use super::machine::{ApplyFailure, DriveFrom, Entered, Entry, EntryEffect, EntryEvent, Request, ToolBook, ToolRules};
use super::tools::ToolTable;
use super::{Agent, AgentStream, stream};
use crate::chunk::finish::ConvertedConversation;
use crate::error::RunError;
use crate::message::Message;
use crate::store::{Lease, RunRecord};
use crate::tool::Tool;

/// How a request that is done left the run.
// One value per request, moved once: boxing the stream would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Outcome {
    /// A driver holds the run: its stream.
    Stream(AgentStream),
    /// The run is cancelled.
    Cancelled,
    /// Nothing was done (see [`Entered::Untouched`]): `already` lists the
    /// decisions asked that were made already, as asked.
    Untouched {
        already: Vec<(String, crate::store::ResolutionKind)>,
    },
}

/// The agent's tools as a request reads them: the table as it was when
/// the request began, one set for the whole request.
struct Book<'a> {
    agent: &'a AgentInner,
    tools: Arc<ToolTable>,
}

impl ToolBook for Book<'_> {
    fn tool(&self, name: &str) -> Option<&dyn Tool> {
        self.tools.get(name).map(|t| t.tool.as_ref())
    }

    fn rules(&self, name: &str) -> Option<ToolRules> {
        self.agent.rules_in(&self.tools, name)
    }

    fn input_problem(&self, name: &str, args: &serde_json::Value) -> Option<String> {
        super::inner::input_problem(&self.tools, name, args)
    }

    fn rule_verdict(&self, run: &RunRecord, name: &str, args: &serde_json::Value) -> Option<(String, crate::Verdict)> {
        self.agent.rule_verdict(name, args, run)
    }
}

impl Agent {
    /// What `request` would meet on `run` as read now, writing nothing:
    /// the decisions it asks that were made already (repeats), or why it
    /// would be refused. The machine's own check of its first read.
    pub(crate) fn check_on_read(
        &self,
        run: &RunRecord,
        request: Request,
    ) -> Result<Vec<(String, crate::store::ResolutionKind)>, RunError> {
        let inner = &self.inner;
        let book = Book {
            agent: inner,
            tools: inner.tools(),
        };
        let mut entry = Entry::new(&run.run_id, &inner.id, request, inner.lease_duration);
        // The read it starts with is this one.
        entry.poll_effect();
        let read = EntryEvent::Read {
            run: Some(run.clone()),
            now: inner.clock.now(),
        };
        entry.handle(read, &book);
        match entry.poll_effect() {
            Some(EntryEffect::Finish(Err(err))) => Err(err),
            Some(EntryEffect::Finish(Ok(Entered::Untouched { already }))) => Ok(already),
            // It would write, apply or wait its turn: it fits.
            _ => Ok(entry.already().to_vec()),
        }
    }

    /// Carries `request` about `run_id` through to its end. `listed`: the
    /// run as a listing just read it, used as the first read.
    pub(crate) async fn enter(
        &self,
        run_id: &str,
        request: Request,
        mut listed: Option<RunRecord>,
    ) -> Result<Outcome, RunError> {
        let inner = &self.inner;
        let book = Book {
            agent: inner,
            tools: inner.tools(),
        };
        let mut entry = Entry::new(run_id, &inner.id, request, inner.lease_duration);
        // The driver that applied a decision, when one did.
        let mut applied: Option<(Driver, stream::ChunkQueue)> = None;
        loop {
            let Some(effect) = entry.poll_effect() else {
                return Err(RunError::internal(run_id, "the request stopped without an end"));
            };
            let event = match effect {
                EntryEffect::Read => match listed.take() {
                    Some(run) => EntryEvent::Read {
                        run: Some(run),
                        now: inner.clock.now(),
                    },
                    None => {
                        let now = inner.clock.now();
                        match inner.store.get(run_id).await {
                            Ok(run) => EntryEvent::Read { run, now },
                            Err(err) => EntryEvent::ReadFailed(err),
                        }
                    }
                },
                EntryEffect::Wait(wait) => {
                    tokio::time::sleep(crate::jitter(wait)).await;
                    EntryEvent::Waited
                }
                EntryEffect::Claim { lease_until } => {
                    let (Some(run), lease) = (entry.run(), new_lease(lease_until)) else {
                        return Err(lost_run(run_id));
                    };
                    match inner.store.claim(run_id, run.version, &lease).await {
                        Ok(version) => EntryEvent::Written {
                            version,
                            lease: Some(lease),
                        },
                        Err(err) => EntryEvent::WriteFailed(err),
                    }
                }
                EntryEffect::Write { write, lease_until } => {
                    let Some(run) = entry.run() else {
                        return Err(lost_run(run_id));
                    };
                    let lease = lease_until.map(new_lease);
                    let update = store_update(inner, run, run.stored_calls(), &write, lease.as_ref());
                    match inner.store.update(update.as_update()).await {
                        Ok(version) => EntryEvent::Written { version, lease },
                        Err(err) => EntryEvent::WriteFailed(err),
                    }
                }
                EntryEffect::Reclaim {
                    lease_until,
                    now,
                    resolution,
                } => {
                    let Some(run) = entry.run() else {
                        return Err(lost_run(run_id));
                    };
                    let lease = new_lease(lease_until);
                    match inner
                        .store
                        .reclaim(run_id, run.version, &lease, now, Some(&resolution))
                        .await
                    {
                        Ok(version) => {
                            tracing::info!(run_id = %run_id, was = %run.status(), "took the run over");
                            EntryEvent::Written {
                                version,
                                lease: Some(lease),
                            }
                        }
                        Err(err) => EntryEvent::WriteFailed(err),
                    }
                }
                EntryEffect::Apply { actions, author, run } => {
                    match self.conversation(run_id, run.version).await {
                        Err(err) => EntryEvent::ApplyFailed(ApplyFailure::Store(err)),
                        Ok((messages, converted)) => {
                            let mut record = *run;
                            // The driver takes a lease of its own with its first write.
                            record.lease = None;
                            let queue = stream::ChunkQueue::default();
                            let state = RunState {
                                record,
                                messages,
                                converted,
                            };
                            let mut driver = Driver::new(Arc::clone(inner), state, Arc::clone(&queue));
                            match driver.apply(actions, author).await {
                                Ok(()) => {
                                    applied = Some((driver, queue));
                                    EntryEvent::Applied
                                }
                                Err(failure) => EntryEvent::ApplyFailed(failure),
                            }
                        }
                    }
                }
                EntryEffect::Finish(result) => {
                    return self.entered(entry, result?, applied).await;
                }
            };
            entry.handle(event, &book);
        }
    }

    /// What a request that held the run leads to: a driver from where the
    /// request left it.
    async fn entered(
        &self,
        entry: Entry,
        entered: Entered,
        applied: Option<(Driver, stream::ChunkQueue)>,
    ) -> Result<Outcome, RunError> {
        match entered {
            Entered::Cancelled => {
                // A drive of the run in this process gives up its tool
                // calls; a call that waited on a person is let go.
                self.inner.drives.wake(entry.run_id());
                if let Some(run) = entry.run() {
                    self.inner.forget_calls(run, run.stored_calls().iter());
                }
                Ok(Outcome::Cancelled)
            }
            Entered::Untouched { already } => Ok(Outcome::Untouched { already }),
            Entered::Applied => {
                let Some((driver, queue)) = applied else {
                    return Err(RunError::internal(
                        entry.run_id(),
                        "a decision was applied by no driver",
                    ));
                };
                let run_id = driver.run_id().to_owned();
                Ok(Outcome::Stream(AgentStream::new(
                    run_id,
                    queue,
                    driver.run(Begin::Applied, None),
                )))
            }
            Entered::Drive { start, settle } => {
                let read_version = entry.read_version();
                let run_id = entry.run_id().to_owned();
                let Some(record) = entry.into_run() else {
                    return Err(RunError::internal(&run_id, "a request held no run"));
                };
                let (messages, converted) = match &start {
                    // Another process wrote it: never this process's copy.
                    DriveFrom::Recovered => (self.inner.store.messages(&record.run_id).await?, Default::default()),
                    DriveFrom::Resume(..) => self.conversation(&record.run_id, read_version).await?,
                };
                let state = RunState {
                    record,
                    messages,
                    converted,
                };
                let stream = self.spawn(state, Begin::from(start));
                Ok(Outcome::Stream(if settle { stream.settled().await } else { stream }))
            }
        }
    }

    /// The conversation of `run_id` as of `version`, with what payloads
    /// converted of it: this process's copy if it has that one, else the
    /// store's (converted by none).
    async fn conversation(
        &self,
        run_id: &str,
        version: i64,
    ) -> Result<(Vec<Message>, ConvertedConversation), crate::StoreError> {
        match self.inner.conversations.take(run_id, version) {
            Some(kept) => Ok(kept),
            None => Ok((
                self.inner.store.messages(run_id).await?,
                ConvertedConversation::default(),
            )),
        }
    }
}

/// A new driver's lease, until `until`.
fn new_lease(until: chrono::DateTime<chrono::Utc>) -> Lease {
    Lease::new(uuid::Uuid::now_v7().to_string(), until)
}

/// A write asked for before any run was read: a bug of the machine.
fn lost_run(run_id: &str) -> RunError {
    RunError::internal(run_id, "a write was asked for before the run was read")
}

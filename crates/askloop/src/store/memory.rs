//! An in-process store: for tests and for embedding where runs need not
//! outlive the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{
    ChangeBroadcast, Delivery, DeliveryOutcome, DeliveryState, Lease, Resolution, RunChange, RunChanges, RunCursor,
    RunQuery, RunRecord, RunStatus, RunStore, RunUpdate, StoreError,
};
use crate::message::Message;

#[derive(Debug, Default)]
struct StoredRun {
    record: RunRecord,
    messages: Vec<Message>,
}

/// Runs kept in memory. Cloning shares the same runs.
#[derive(Debug, Default, Clone)]
pub struct MemoryStore {
    runs: Arc<Mutex<HashMap<String, StoredRun>>>,
    /// Notifications, in the order written. Locked only after `runs` (an
    /// update holds both, so its notifications appear with it), or alone.
    outbox: Arc<Mutex<Vec<Delivery>>>,
    changes: ChangeBroadcast,
}

impl Default for RunRecord {
    fn default() -> Self {
        RunRecord {
            run_id: String::new(),
            agent_id: String::new(),
            thread_id: None,
            status: RunStatus::Running,
            version: 0,
            created_at: DateTime::<Utc>::UNIX_EPOCH,
            updated_at: DateTime::<Utc>::UNIX_EPOCH,
            pending: Vec::new(),
            step_results: Vec::new(),
            message_count: 0,
            steps: 0,
            usage: Default::default(),
            error: None,
            metadata: serde_json::Value::Null,
            lease: None,
            failure: None,
            resolutions: Vec::new(),
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, StoredRun>> {
        // A panic while holding the lock cannot leave a run half-written:
        // every write below builds the new state before touching the map.
        self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lock_outbox(&self) -> MutexGuard<'_, Vec<Delivery>> {
        self.outbox.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl RunStore for MemoryStore {
    /// Every write of this store (of any clone), as it happens.
    async fn changes(&self) -> Result<Option<RunChanges>, StoreError> {
        Ok(Some(self.changes.subscribe()))
    }

    async fn create(&self, run: &RunRecord, messages: &[Message]) -> Result<(), StoreError> {
        let mut runs = self.lock();
        if runs.contains_key(&run.run_id) {
            return Err(StoreError::AlreadyExists {
                run_id: run.run_id.clone(),
            });
        }
        let mut record = run.clone();
        record.message_count = messages.len() as i64;
        runs.insert(
            run.run_id.clone(),
            StoredRun {
                record,
                messages: messages.to_vec(),
            },
        );
        self.changes.send(RunChange::of(run.run_id.as_str()));
        Ok(())
    }

    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        Ok(self.lock().get(run_id).map(|run| run.record.clone()))
    }

    async fn messages(&self, run_id: &str) -> Result<Vec<Message>, StoreError> {
        Ok(self
            .lock()
            .get(run_id)
            .map(|run| run.messages.clone())
            .unwrap_or_default())
    }

    async fn claim(&self, run_id: &str, expected_version: i64, lease: &Lease) -> Result<i64, StoreError> {
        let mut runs = self.lock();
        let run = runs.get_mut(run_id).ok_or_else(|| StoreError::NotFound {
            run_id: run_id.to_owned(),
        })?;
        if run.record.status != RunStatus::Suspended || run.record.version != expected_version {
            return Err(StoreError::Conflict {
                run_id: run_id.to_owned(),
                expected_version,
            });
        }
        run.record.status = RunStatus::Running;
        run.record.version += 1;
        run.record.updated_at = Utc::now();
        run.record.lease = Some(lease.clone());
        self.changes.send(RunChange::of(run_id));
        Ok(run.record.version)
    }

    async fn renew_lease(&self, run_id: &str, lease: &Lease) -> Result<(), StoreError> {
        let mut runs = self.lock();
        let run = runs.get_mut(run_id).ok_or_else(|| StoreError::NotFound {
            run_id: run_id.to_owned(),
        })?;
        let held = run.record.status == RunStatus::Running
            && run.record.lease.as_ref().is_some_and(|held| held.owner == lease.owner);
        if !held {
            return Err(StoreError::LeaseLost {
                run_id: run_id.to_owned(),
                owner: lease.owner.clone(),
            });
        }
        run.record.lease = Some(lease.clone());
        Ok(())
    }

    async fn expired(
        &self,
        now: DateTime<Utc>,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let runs = self.lock();
        let mut found: Vec<RunRecord> = runs
            .values()
            .map(|run| &run.record)
            .filter(|r| r.is_stalled(now))
            .filter(|r| after.is_none_or(|after| after.precedes(r.updated_at, &r.run_id)))
            .cloned()
            .collect();
        found.sort_by(|a, b| a.updated_at.cmp(&b.updated_at).then_with(|| a.run_id.cmp(&b.run_id)));
        found.truncate(limit as usize);
        Ok(found)
    }

    async fn reclaim(
        &self,
        run_id: &str,
        expected_version: i64,
        lease: &Lease,
        now: DateTime<Utc>,
        resolution: Option<&Resolution>,
    ) -> Result<i64, StoreError> {
        let mut runs = self.lock();
        let run = runs.get_mut(run_id).ok_or_else(|| StoreError::NotFound {
            run_id: run_id.to_owned(),
        })?;
        let free = run.record.is_stalled(now) || run.record.status == RunStatus::Failed;
        if !free || run.record.version != expected_version {
            return Err(StoreError::Conflict {
                run_id: run_id.to_owned(),
                expected_version,
            });
        }
        let record = &mut run.record;
        record.status = RunStatus::Running;
        record.version += 1;
        record.updated_at = Utc::now();
        record.lease = Some(lease.clone());
        record.error = None;
        record.failure = None;
        record.resolutions.extend(resolution.cloned());
        let version = record.version;
        self.changes.send(RunChange::of(run_id));
        Ok(version)
    }

    async fn update(&self, update: RunUpdate<'_>) -> Result<i64, StoreError> {
        let mut runs = self.lock();
        let run = runs.get_mut(update.run_id).ok_or_else(|| StoreError::NotFound {
            run_id: update.run_id.to_owned(),
        })?;
        if run.record.version != update.expected_version {
            return Err(StoreError::Conflict {
                run_id: update.run_id.to_owned(),
                expected_version: update.expected_version,
            });
        }
        let record = &mut run.record;
        record.status = update.status;
        record.version += 1;
        record.updated_at = Utc::now();
        record.pending = update.pending.to_vec();
        record.step_results = update.step_results.to_vec();
        record.steps = update.steps;
        record.usage = update.usage;
        record.error = update.error.map(str::to_owned);
        record.failure = update.failure.cloned();
        record.lease = update.lease.cloned();
        record.resolutions.extend(update.resolution.cloned());
        record.message_count += update.append.len() as i64;
        run.messages.extend_from_slice(update.append);
        if !update.outbox.is_empty() {
            self.lock_outbox().extend(update.outbox.iter().map(|message| Delivery {
                message: message.clone(),
                state: DeliveryState::Pending,
                attempts: 0,
                next_at: message.created_at,
                last_error: None,
                lease: None,
            }));
        }
        self.changes.send(RunChange::of(update.run_id));
        Ok(record.version)
    }

    async fn claim_deliveries(
        &self,
        now: DateTime<Utc>,
        lease: &Lease,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError> {
        let mut outbox = self.lock_outbox();
        let mut due: Vec<&mut Delivery> = outbox
            .iter_mut()
            .filter(|d| {
                d.state == DeliveryState::Pending
                    && d.next_at <= now
                    && d.lease.as_ref().is_none_or(|held| held.is_expired(now))
            })
            .collect();
        due.sort_by(|a, b| a.next_at.cmp(&b.next_at).then_with(|| a.message.id.cmp(&b.message.id)));
        Ok(due
            .into_iter()
            .take(limit as usize)
            .map(|d| {
                d.lease = Some(lease.clone());
                d.clone()
            })
            .collect())
    }

    async fn finish_delivery(&self, id: &str, owner: &str, outcome: &DeliveryOutcome) -> Result<(), StoreError> {
        let mut outbox = self.lock_outbox();
        let held = outbox.iter_mut().find(|d| {
            d.message.id == id
                && d.state == DeliveryState::Pending
                && d.lease.as_ref().is_some_and(|lease| lease.owner == owner)
        });
        let Some(delivery) = held else {
            return Err(StoreError::DeliveryLost {
                id: id.to_owned(),
                owner: owner.to_owned(),
            });
        };
        delivery.attempts += 1;
        delivery.lease = None;
        match outcome {
            DeliveryOutcome::Delivered => delivery.state = DeliveryState::Delivered,
            DeliveryOutcome::Retry { next_at, error } => {
                delivery.next_at = super::outbox::to_micros(*next_at);
                delivery.last_error = Some(error.clone());
            }
            DeliveryOutcome::Dead { error } => {
                delivery.state = DeliveryState::Dead;
                delivery.last_error = Some(error.clone());
            }
        }
        Ok(())
    }

    async fn deliveries(&self, run_id: &str) -> Result<Vec<Delivery>, StoreError> {
        Ok(self
            .lock_outbox()
            .iter()
            .filter(|d| d.message.run_id == run_id)
            .cloned()
            .collect())
    }

    async fn list(&self, query: &RunQuery) -> Result<Vec<RunRecord>, StoreError> {
        let runs = self.lock();
        let mut found: Vec<RunRecord> = runs
            .values()
            .map(|run| &run.record)
            .filter(|r| query.status.is_none_or(|s| r.status == s))
            .filter(|r| query.agent_id.as_deref().is_none_or(|a| r.agent_id == a))
            .filter(|r| {
                query
                    .after
                    .as_ref()
                    .is_none_or(|after| after.precedes_in_listing(r.created_at, &r.run_id))
            })
            .cloned()
            .collect();
        found.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.run_id.cmp(&a.run_id)));
        let limit = query.limit.map_or(usize::MAX, |l| l as usize);
        Ok(found.into_iter().skip(query.offset as usize).take(limit).collect())
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut runs = self.lock();
        let old = runs.len();
        runs.retain(|_, run| !(run.record.status.is_finished() && run.record.updated_at < before));
        Ok((old - runs.len()) as u64)
    }
}

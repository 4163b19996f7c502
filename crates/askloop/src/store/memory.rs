//! An in-process store: for tests and for embedding where runs need not
//! outlive the process.
#![allow(
    clippy::disallowed_fields,
    reason = "a store keeps a run's status and pending calls as the machines set them"
)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{
    AgentWaiting, Author, ChangeBroadcast, ChangeFeed, Delivery, DeliveryOutcome, DeliveryState, DeliveryStore, Grant,
    GrantQuery, GrantStore, Lease, Resolution, RunChange, RunChanges, RunCursor, RunMemory, RunQuery, RunRecord,
    RunStatus, RunStore, RunUpdate, StoreError, Thread, ThreadDeletion, ThreadEdit, ThreadKey, ThreadMessage,
    ThreadQuery, ThreadStore,
};
use super::{AnswerLink, LinkState, LinkStore};
use crate::clock::{Clock, system_clock};
use crate::message::Message;

#[derive(Debug, Default)]
struct StoredRun {
    record: RunRecord,
    messages: Vec<Message>,
}

#[derive(Debug)]
struct StoredThread {
    thread: Thread,
    messages: Vec<ThreadMessage>,
}

/// What the store holds. Threads and grants sit beside the runs under one
/// lock, since a run's write, its thread's messages and the grants of its
/// approvals are one write.
#[derive(Debug, Default)]
struct Stored {
    runs: HashMap<String, StoredRun>,
    threads: HashMap<ThreadKey, StoredThread>,
    grants: Vec<Grant>,
    links: HashMap<String, AnswerLink>,
}

impl std::ops::Deref for Stored {
    type Target = HashMap<String, StoredRun>;
    fn deref(&self) -> &Self::Target {
        &self.runs
    }
}

impl std::ops::DerefMut for Stored {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.runs
    }
}

impl Stored {
    /// Appends a run's messages (from its message number `first`) to its
    /// thread, creating the thread if it is new.
    fn append_to_thread(
        &mut self,
        memory: &RunMemory,
        agent_id: &str,
        run_id: &str,
        first: i64,
        messages: &[Message],
        now: DateTime<Utc>,
    ) {
        if messages.is_empty() && self.threads.contains_key(&memory.key) {
            return;
        }
        let stored = self.threads.entry(memory.key.clone()).or_insert_with(|| StoredThread {
            thread: Thread::new(&memory.key, agent_id, now),
            messages: Vec::new(),
        });
        for (i, message) in messages.iter().enumerate() {
            stored.messages.push(ThreadMessage {
                seq: stored.thread.message_count,
                run_id: run_id.to_owned(),
                run_seq: first + i as i64,
                message: message.clone(),
                created_at: now,
            });
            stored.thread.message_count += 1;
        }
        stored.thread.updated_at = now;
    }
}

/// Runs kept in memory. Cloning shares the same runs.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    runs: Arc<Mutex<Stored>>,
    /// Notifications, in the order written. Locked only after `runs` (an
    /// update holds both, so its notifications appear with it), or alone.
    outbox: Arc<Mutex<Vec<Delivery>>>,
    changes: ChangeBroadcast,
    /// What stamps each write's `updated_at`.
    clock: Arc<dyn Clock>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::with_clock(system_clock())
    }
}

impl Default for RunRecord {
    fn default() -> Self {
        RunRecord {
            run_id: String::new(),
            agent_id: String::new(),
            thread_id: None,
            memory: None,
            resource_id: None,
            status: RunStatus::Running,
            version: 0,
            created_at: DateTime::<Utc>::UNIX_EPOCH,
            updated_at: DateTime::<Utc>::UNIX_EPOCH,
            pending: Vec::new(),
            step_results: Vec::new(),
            message_count: 0,
            steps: 0,
            usage: Default::default(),
            metadata: serde_json::Value::Null,
            settings: Default::default(),
            lease: None,
            failure: None,
            resolutions: Vec::new(),
            trace_parent: None,
        }
    }
}

impl MemoryStore {
    /// An empty store, stamping its writes with the system's clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store that stamps its writes (a run's `updated_at`) with
    /// `clock`: give it the agent's clock, so a test that moves a
    /// [`ManualClock`](crate::ManualClock) moves both.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use askloop::{Agent, Clock, ManualClock, MemoryStore, ScriptedModel};
    /// let clock = ManualClock::starting_at("2030-01-01T00:00:00Z".parse().unwrap());
    /// let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    /// let model = ScriptedModel::from_json("demo", r#"{"turns": [{"text": "Hello"}]}"#).unwrap();
    /// let agent = Agent::builder("assistant")
    ///     .model(Arc::new(model))
    ///     .store(store)
    ///     .clock(Arc::new(clock.clone()))
    ///     .build()
    ///     .unwrap();
    /// let output = agent.generate("Hi").await.unwrap();
    /// let run = agent.store().get(&output.run_id).await.unwrap().unwrap();
    /// assert_eq!(run.updated_at, clock.now());
    /// # });
    /// ```
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            runs: Arc::default(),
            outbox: Arc::default(),
            changes: ChangeBroadcast::default(),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Stored> {
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
    fn link_store(&self) -> Option<&dyn LinkStore> {
        Some(self)
    }

    fn thread_store(&self) -> Option<&dyn ThreadStore> {
        Some(self)
    }

    fn grant_store(&self) -> Option<&dyn GrantStore> {
        Some(self)
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
        if let Some(memory) = &run.memory {
            let own = usize::try_from(memory.context).unwrap_or(0).min(messages.len());
            let now = self.clock.now();
            runs.append_to_thread(memory, &run.agent_id, &run.run_id, own as i64, &messages[own..], now);
        }
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
        run.record.updated_at = self.clock.now();
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
        record.updated_at = self.clock.now();
        record.lease = Some(lease.clone());
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
        record.updated_at = self.clock.now();
        record.pending = update.pending.to_vec();
        record.step_results = update.step_results.to_vec();
        record.steps = update.steps;
        record.usage = update.usage;
        // As a SQL store reads its row back: a failure given only as text
        // is kept as that text.
        record.failure = update.failure.cloned().or_else(|| {
            update.error.map(|message| super::RunFailure::Other {
                message: message.to_owned(),
            })
        });
        record.lease = update.lease.cloned();
        record.resolutions.extend(update.resolutions.iter().cloned());
        let first = record.message_count;
        record.message_count += update.append.len() as i64;
        run.messages.extend_from_slice(update.append);
        let version = record.version;
        if let Some(memory) = record.memory.clone() {
            let (agent_id, now) = (record.agent_id.clone(), record.updated_at);
            runs.append_to_thread(&memory, &agent_id, update.run_id, first, update.append, now);
        }
        for grant in update.grants {
            if !runs.grants.iter().any(|g| g.id == grant.id) {
                runs.grants.push(grant.clone());
            }
        }
        if !update.outbox.is_empty() {
            self.lock_outbox().extend(update.outbox.iter().map(|message| Delivery {
                message: message.clone(),
                state: DeliveryState::Pending,
                attempts: 0,
                next_at: message.due_at(),
                last_error: None,
                lease: None,
            }));
        }
        self.changes.send(RunChange::of(update.run_id));
        Ok(version)
    }

    async fn list(&self, query: &RunQuery) -> Result<Vec<RunRecord>, StoreError> {
        let runs = self.lock();
        let mut found: Vec<RunRecord> = runs
            .values()
            .map(|run| &run.record)
            .filter(|r| matches(query, r))
            .cloned()
            .collect();
        found.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.run_id.cmp(&a.run_id)));
        let limit = query.limit.map_or(usize::MAX, |l| l as usize);
        Ok(found.into_iter().skip(query.offset as usize).take(limit).collect())
    }

    async fn count(&self, query: &RunQuery) -> Result<u64, StoreError> {
        let matching = self.lock().values().filter(|run| matches(query, &run.record)).count();
        let limit = query.limit.map_or(usize::MAX, |l| l as usize);
        Ok(matching.saturating_sub(query.offset as usize).min(limit) as u64)
    }

    async fn expiring(
        &self,
        now: DateTime<Utc>,
        after: Option<&RunCursor>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        super::expiring_by_listing(self, now, after, limit).await
    }

    async fn waiting(&self) -> Result<Vec<AgentWaiting>, StoreError> {
        super::waiting_by_listing(self).await
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut runs = self.lock();
        let old = runs.len();
        runs.retain(|_, run| !(run.record.status.is_finished() && run.record.updated_at < before));
        // A run's links go with it, as the SQL stores' foreign keys take them.
        let stored = &mut *runs;
        let kept = &stored.runs;
        stored.links.retain(|_, link| kept.contains_key(&link.run_id));
        Ok((old - stored.runs.len()) as u64)
    }
}

#[async_trait]
impl DeliveryStore for MemoryStore {
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
                delivery.next_at = crate::clock::to_micros(*next_at);
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
}

#[async_trait]
impl ChangeFeed for MemoryStore {
    /// Every write of this store (of any clone), as it happens.
    async fn changes(&self) -> Result<Option<RunChanges>, StoreError> {
        Ok(Some(self.changes.subscribe()))
    }
}

#[async_trait]
impl GrantStore for MemoryStore {
    async fn live_grants(
        &self,
        agent_id: &str,
        resource_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<Grant>, StoreError> {
        Ok(self
            .lock()
            .grants
            .iter()
            .filter(|g| g.agent_id == agent_id && g.resource_id == resource_id && g.is_live(now))
            .cloned()
            .collect())
    }

    async fn grant(&self, id: &str) -> Result<Option<Grant>, StoreError> {
        Ok(self.lock().grants.iter().find(|g| g.id == id).cloned())
    }

    async fn grants(&self, query: &GrantQuery) -> Result<Vec<Grant>, StoreError> {
        let stored = self.lock();
        let mut found: Vec<Grant> = stored.grants.iter().filter(|g| query.admits(g)).cloned().collect();
        found.sort_by(|a, b| b.granted_at.cmp(&a.granted_at).then_with(|| b.id.cmp(&a.id)));
        found.truncate(query.page_size() as usize);
        Ok(found)
    }

    async fn revoke_grant(&self, id: &str, by: &Author, at: DateTime<Utc>) -> Result<Option<Grant>, StoreError> {
        let mut stored = self.lock();
        let Some(grant) = stored.grants.iter_mut().find(|g| g.id == id) else {
            return Ok(None);
        };
        if grant.revoked_at.is_none() {
            grant.revoked_at = Some(at);
            grant.revoked_by = Some(by.clone());
        }
        Ok(Some(grant.clone()))
    }
}

#[async_trait]
impl LinkStore for MemoryStore {
    async fn create_link(&self, link: &AnswerLink) -> Result<AnswerLink, StoreError> {
        let mut stored = self.lock();
        let mut link = link.clone();
        link.created_at = crate::clock::to_micros(link.created_at);
        link.expires_at = crate::clock::to_micros(link.expires_at);
        Ok(stored.links.entry(link.link_id.clone()).or_insert(link).clone())
    }

    async fn link(&self, link_id: &str) -> Result<Option<AnswerLink>, StoreError> {
        Ok(self.lock().links.get(link_id).cloned())
    }

    async fn take_link(&self, link_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let mut stored = self.lock();
        match stored.links.get_mut(link_id) {
            Some(link) if link.state(at) == LinkState::Open => {
                link.used_at = Some(crate::clock::to_micros(at));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release_link(&self, link_id: &str, taken_at: DateTime<Utc>) -> Result<(), StoreError> {
        if let Some(link) = self.lock().links.get_mut(link_id)
            && link.used_at == Some(crate::clock::to_micros(taken_at))
        {
            link.used_at = None;
        }
        Ok(())
    }

    async fn revoke_link(&self, link_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        match self.lock().links.get_mut(link_id) {
            Some(link) if link.used_at.is_none() && link.revoked_at.is_none() => {
                link.revoked_at = Some(crate::clock::to_micros(at));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn links(&self, run_id: &str) -> Result<Vec<AnswerLink>, StoreError> {
        let mut links: Vec<AnswerLink> = self
            .lock()
            .links
            .values()
            .filter(|l| l.run_id == run_id)
            .cloned()
            .collect();
        links.sort_by(|a, b| (a.created_at, &a.link_id).cmp(&(b.created_at, &b.link_id)));
        Ok(links)
    }
}

#[async_trait]
impl ThreadStore for MemoryStore {
    async fn create_thread(&self, thread: &Thread) -> Result<(), StoreError> {
        let mut stored = self.lock();
        let key = thread.key();
        if stored.threads.contains_key(&key) {
            return Err(StoreError::ThreadExists {
                resource_id: key.resource_id,
                thread_id: key.thread_id,
            });
        }
        let mut thread = thread.clone();
        thread.message_count = 0;
        stored.threads.insert(
            key,
            StoredThread {
                thread,
                messages: Vec::new(),
            },
        );
        Ok(())
    }

    async fn thread(&self, key: &ThreadKey) -> Result<Option<Thread>, StoreError> {
        Ok(self.lock().threads.get(key).map(|t| t.thread.clone()))
    }

    async fn update_thread(&self, key: &ThreadKey, edit: ThreadEdit<'_>) -> Result<Option<Thread>, StoreError> {
        let now = self.clock.now();
        let mut stored = self.lock();
        let Some(stored) = stored.threads.get_mut(key) else {
            return Ok(None);
        };
        let thread = &mut stored.thread;
        if let Some(title) = edit.title {
            thread.title = title.to_owned();
        }
        if let Some(metadata) = edit.metadata {
            thread.metadata = metadata.clone();
        }
        thread.updated_at = now;
        Ok(Some(thread.clone()))
    }

    async fn threads(&self, query: &ThreadQuery) -> Result<Vec<Thread>, StoreError> {
        let stored = self.lock();
        let mut found: Vec<Thread> = stored
            .threads
            .values()
            .map(|t| &t.thread)
            .filter(|t| query.matches(t))
            .cloned()
            .collect();
        found.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.id.cmp(&a.id)));
        let limit = query.limit.map_or(usize::MAX, |l| l as usize);
        Ok(found.into_iter().skip(query.offset as usize).take(limit).collect())
    }

    async fn count_threads(&self, query: &ThreadQuery) -> Result<u64, StoreError> {
        let matching = self
            .lock()
            .threads
            .values()
            .filter(|t| query.matches(&t.thread))
            .count();
        let limit = query.limit.map_or(usize::MAX, |l| l as usize);
        Ok(matching.saturating_sub(query.offset as usize).min(limit) as u64)
    }

    async fn thread_messages(&self, key: &ThreadKey, from: i64, limit: u32) -> Result<Vec<ThreadMessage>, StoreError> {
        let stored = self.lock();
        let Some(thread) = stored.threads.get(key) else {
            return Ok(Vec::new());
        };
        let from = usize::try_from(from.max(0)).unwrap_or(usize::MAX);
        Ok(thread
            .messages
            .iter()
            .skip(from)
            .take(limit as usize)
            .cloned()
            .collect())
    }

    async fn delete_thread(&self, key: &ThreadKey) -> Result<ThreadDeletion, StoreError> {
        let mut stored = self.lock();
        if !stored.threads.contains_key(key) {
            return Ok(ThreadDeletion::NotFound);
        }
        let on_thread = |run: &StoredRun| run.record.memory.as_ref().is_some_and(|m| m.key == *key);
        let mut busy: Vec<String> = stored
            .runs
            .values()
            .filter(|run| on_thread(run) && !run.record.status.is_finished())
            .map(|run| run.record.run_id.clone())
            .collect();
        if !busy.is_empty() {
            busy.sort();
            return Ok(ThreadDeletion::Busy { runs: busy });
        }
        let gone: Vec<String> = stored
            .runs
            .values()
            .filter(|run| on_thread(run))
            .map(|run| run.record.run_id.clone())
            .collect();
        for run_id in &gone {
            stored.runs.remove(run_id);
            self.changes.send(RunChange::of(run_id.as_str()));
        }
        stored.threads.remove(key);
        // Its approvals that stick go with it: a new thread of the same id
        // is another conversation.
        stored.grants.retain(|g| {
            !(g.scope == super::GrantScope::Thread && g.resource_id == key.resource_id && g.thread_id == key.thread_id)
        });
        Ok(ThreadDeletion::Deleted)
    }
}

/// Whether `run` is one a listing for `query` shows (before `offset` and
/// `limit`).
fn matches(query: &RunQuery, run: &RunRecord) -> bool {
    query.status.is_none_or(|s| run.status == s)
        && query.agent_id.as_deref().is_none_or(|a| run.agent_id == a)
        && query.thread.as_ref().is_none_or(|key| {
            run.memory.as_ref().is_some_and(|m| {
                m.key.resource_id == key.resource_id && (key.thread_id.is_empty() || m.key.thread_id == key.thread_id)
            })
        })
        && query
            .resources
            .as_ref()
            .is_none_or(|resources| run.resource().is_some_and(|r| resources.iter().any(|x| x == r)))
        && query
            .after
            .as_ref()
            .is_none_or(|after| after.precedes_in_listing(run.created_at, &run.run_id))
}

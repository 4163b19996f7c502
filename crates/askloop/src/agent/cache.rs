//! The conversations of runs this process suspended, kept so that resuming
//! one here does not read and parse its whole conversation back from the
//! store: with it, the store's cost of a resume does not grow with the
//! conversation.
//!
//! An entry is tagged with the run's version when it was suspended. A resume
//! uses it only if the version it claimed from is that same one; any other
//! writer (another process, a cancel) bumps the version, so a stale entry is
//! never used. Entries are moved out when used (one driver owns a run at a
//! time) and the whole cache is bounded by a total number of messages.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::chunk::finish::ConvertedConversation;
use crate::message::Message;

/// How many messages the cache holds across all runs, by default.
pub(crate) const DEFAULT_CACHED_MESSAGES: usize = 4_096;

#[derive(Debug)]
struct Entry {
    version: i64,
    seq: u64,
    messages: Vec<Message>,
    /// What `step-finish` payloads converted of them.
    converted: ConvertedConversation,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Insertion order, oldest first; stale keys are skipped on eviction.
    order: VecDeque<(String, u64)>,
    seq: u64,
    total: usize,
}

#[derive(Debug)]
pub(crate) struct ConversationCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

impl ConversationCache {
    pub(crate) fn new(capacity: usize) -> Self {
        ConversationCache {
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Keeps a suspended run's conversation, as of `version`, with what
    /// payloads converted of it.
    pub(crate) fn put(&self, run_id: &str, version: i64, messages: Vec<Message>, converted: ConvertedConversation) {
        if self.capacity == 0 || messages.len() > self.capacity {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.seq += 1;
        let seq = inner.seq;
        inner.total += messages.len();
        if let Some(old) = inner.entries.insert(
            run_id.to_owned(),
            Entry {
                version,
                seq,
                messages,
                converted,
            },
        ) {
            inner.total -= old.messages.len();
        }
        inner.order.push_back((run_id.to_owned(), seq));
        while inner.total > self.capacity {
            let Some((key, seq)) = inner.order.pop_front() else {
                break;
            };
            if inner.entries.get(&key).is_some_and(|e| e.seq == seq)
                && let Some(evicted) = inner.entries.remove(&key)
            {
                inner.total -= evicted.messages.len();
            }
        }
        // Keep the order queue from growing with stale keys.
        if inner.order.len() > 2 * inner.entries.len() + 64 {
            let Inner { entries, order, .. } = &mut *inner;
            order.retain(|(key, seq)| entries.get(key).is_some_and(|e| e.seq == *seq));
        }
    }

    /// Takes a run's conversation (and its conversion) if it is exactly
    /// the one stored at `version`.
    pub(crate) fn take(&self, run_id: &str, version: i64) -> Option<(Vec<Message>, ConvertedConversation)> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let entry = inner.entries.remove(run_id)?;
        inner.total -= entry.messages.len();
        (entry.version == version).then_some((entry.messages, entry.converted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(n: usize) -> Vec<Message> {
        (0..n).map(|i| Message::user(i.to_string())).collect()
    }

    #[test]
    fn an_entry_is_used_only_at_its_version_and_only_once() {
        let cache = ConversationCache::new(100);
        cache.put("r", 3, msgs(2), Default::default());
        assert!(cache.take("r", 4).is_none(), "another writer bumped the version");
        cache.put("r", 3, msgs(2), Default::default());
        assert_eq!(cache.take("r", 3).map(|(m, _)| m.len()), Some(2));
        assert!(cache.take("r", 3).is_none());
    }

    #[test]
    fn oldest_entries_are_evicted_past_the_message_budget() {
        let cache = ConversationCache::new(5);
        cache.put("a", 1, msgs(3), Default::default());
        cache.put("b", 1, msgs(3), Default::default());
        assert!(cache.take("a", 1).is_none());
        assert!(cache.take("b", 1).is_some());
        cache.put("huge", 1, msgs(6), Default::default());
        assert!(cache.take("huge", 1).is_none());
    }

    #[test]
    fn a_disabled_cache_keeps_nothing() {
        let cache = ConversationCache::new(0);
        cache.put("a", 1, msgs(1), Default::default());
        assert!(cache.take("a", 1).is_none());
    }
}

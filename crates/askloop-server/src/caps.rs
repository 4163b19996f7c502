//! How many long-lived things one caller may hold open at once: the live
//! event streams of `GET /api/events`, one per open page. Each open stream
//! holds the server's memory (its connection's buffers, its place in the
//! change feed) for as long as the client keeps it, so without a cap one
//! token could open streams until the server's memory is gone for everyone
//! (19,900 streams from one token took a server from 41 to 357 MB).
//!
//! Callers are told apart as authors are: by their token, and behind a
//! trusted proxy by the person it names, so the people behind one proxy's
//! token do not share one allowance; on a server without tokens every
//! caller is the same one. A slot is taken when a stream opens and given
//! back when the stream is dropped: when its client goes away, or the
//! server ends it at shutdown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::auth::Caller;

/// The event streams one caller may hold open at once, unless
/// [`ServerOptions::event_streams_per_caller`](crate::ServerOptions::event_streams_per_caller)
/// says otherwise: more than anyone keeps pages open, far fewer than would
/// hurt the server.
pub const DEFAULT_EVENT_STREAMS_PER_CALLER: usize = 32;

/// Who holds slots: a token's name and the person a proxy named, if any.
type Holder = (Option<String>, Option<String>);

/// A cap on what each caller holds open at once, and what each holds now.
#[derive(Debug)]
pub(crate) struct PerCaller {
    most: usize,
    held: Arc<Mutex<HashMap<Holder, usize>>>,
}

/// A slot taken, given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    holder: Holder,
    held: Arc<Mutex<HashMap<Holder, usize>>>,
}

/// A caller holds the most it may already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AtMost(pub(crate) usize);

impl PerCaller {
    /// A cap of `most` at once per caller (at least one).
    pub(crate) fn new(most: usize) -> Self {
        PerCaller {
            most: most.max(1),
            held: Arc::default(),
        }
    }

    /// A slot for `caller`, or [`AtMost`] when it holds the most already.
    pub(crate) fn take(&self, caller: &Caller) -> Result<Slot, AtMost> {
        self.take_for((caller.token_name().map(str::to_owned), caller.author().by))
    }

    fn take_for(&self, holder: Holder) -> Result<Slot, AtMost> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(holder.clone()).or_insert(0);
        if *count >= self.most {
            return Err(AtMost(self.most));
        }
        *count += 1;
        Ok(Slot {
            holder,
            held: Arc::clone(&self.held),
        })
    }

    /// How many slots `holder` holds now.
    #[cfg(test)]
    fn held_by(&self, holder: &Holder) -> usize {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.get(holder).copied().unwrap_or(0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.holder) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.holder);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(token: Option<&str>, person: Option<&str>) -> Holder {
        (token.map(str::to_owned), person.map(str::to_owned))
    }

    #[test]
    fn each_caller_holds_at_most_the_cap_and_a_dropped_slot_is_given_back() {
        let cap = PerCaller::new(2);
        let alice = holder(Some("alice"), Some("alice"));
        let first = cap.take_for(alice.clone()).unwrap();
        let _second = cap.take_for(alice.clone()).unwrap();
        assert_eq!(cap.take_for(alice.clone()).unwrap_err(), AtMost(2));
        let _bobs = cap
            .take_for(holder(Some("bob"), Some("bob")))
            .expect("another token has its own slots");
        drop(first);
        assert_eq!(cap.held_by(&alice), 1);
        let _again = cap.take_for(alice.clone()).expect("a slot given back is free");
    }

    #[test]
    fn people_behind_one_proxy_token_each_have_their_own_slots() {
        let cap = PerCaller::new(1);
        let _ana = cap.take_for(holder(Some("proxy"), Some("ana"))).unwrap();
        let _bo = cap.take_for(holder(Some("proxy"), Some("bo"))).unwrap();
        assert!(cap.take_for(holder(Some("proxy"), Some("ana"))).is_err());
        let _anyone = cap.take_for(holder(None, None)).unwrap();
        assert!(
            cap.take_for(holder(None, None)).is_err(),
            "without tokens everyone is one caller"
        );
    }
}

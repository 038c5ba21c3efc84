//! Clients blocked on keys (BLPOP, BZPOPMIN, BLMOVE...).
//!
//! A blocked client registers a waiter on each of its keys, then tries its
//! pop; if nothing is there it sleeps until a waiter is woken or it times
//! out. A write that adds elements to a key records it in its transaction;
//! after the commit the shard wakes the first waiter queued on that key
//! (first blocked, first served). A waiter that leaves, served or not,
//! wakes the next waiter of each of its keys, so one push of several
//! elements serves several clients in order and no wake-up is lost; one
//! that finds nothing (someone was faster) waits again without losing its
//! place. A waiter leaves every queue when its client is served, times out
//! or disconnects (the guard's Drop).
//!
//! Handoff: Redis serves blocked clients right after the command that fed
//! their key, before any other command runs. A waiter whose pop runs on a
//! single shard carries a [`Handoff`]: the shard, inside the transaction of
//! the push, runs the pop for each such waiter of the key (oldest first)
//! before its next op, and delivers the reply once the transaction has
//! committed. [`Stage`] makes sure a waiter is served once, whichever path
//! (handoff or its own retry) gets there first.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

/// Where a blocked client stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Still waiting: may be served.
    Waiting,
    /// Served (its reply is on the way); must not be served again.
    Served,
    /// Timed out: must not be served.
    Gone,
}

/// How a shard serves a blocked client inside the transaction of a push.
pub struct Handoff {
    /// The shard its pop runs on.
    pub shard: usize,
    /// Builds one try of its pop (the same op its own retries submit).
    pub attempt: Box<dyn Fn() -> Option<crate::shard::WriteFn> + Send + Sync>,
    /// Where the reply of a handoff goes, once committed.
    pub deliver: parking_lot::Mutex<Option<tokio::sync::oneshot::Sender<crate::protocol::Reply>>>,
}

/// One blocked client.
pub struct Waiter {
    id: u64,
    /// Woken when one of its keys may have something for it.
    pub notify: tokio::sync::Notify,
    /// Served or not; held while a pop for it runs.
    pub stage: parking_lot::Mutex<Stage>,
    /// Set when its pop can run inside another client's transaction.
    pub handoff: Option<Handoff>,
}

/// Whether a pop's reply served the client: nil means nothing was there,
/// and an error (WRONGTYPE...) is left to the client's own retry to report.
pub fn serves(reply: &crate::protocol::Reply) -> bool {
    use crate::protocol::Reply;
    !matches!(reply, Reply::Nil | Reply::NilArray | Reply::Error(_))
}

/// Waiters on each (database, key), oldest first.
type Queues = HashMap<(u8, Bytes), VecDeque<Arc<Waiter>>>;

/// The waiters of one key. Every push and stream append asks, and almost
/// always nobody waits: then no key copy is made for the lookup.
fn queue<'q>(queues: &'q Queues, db: u8, key: &[u8]) -> Option<&'q VecDeque<Arc<Waiter>>> {
    if queues.is_empty() {
        return None;
    }
    queues.get(&(db, Bytes::copy_from_slice(key)))
}

/// Waiters per (database, key), oldest first.
#[derive(Default)]
pub struct BlockRegistry {
    queues: parking_lot::Mutex<Queues>,
    next_id: AtomicU64,
}

/// A registration; dropping it removes the waiter from every queue.
pub struct WaitGuard {
    registry: Arc<BlockRegistry>,
    db: u8,
    keys: Vec<Bytes>,
    /// The waiter.
    pub waiter: Arc<Waiter>,
}

impl BlockRegistry {
    /// Queues a new waiter on `keys` of database `db`.
    pub fn register(self: &Arc<Self>, db: u8, keys: &[Bytes]) -> WaitGuard {
        self.register_with(db, keys, None)
    }

    /// Queues a new waiter that shards may serve by `handoff`.
    pub fn register_with(
        self: &Arc<Self>,
        db: u8,
        keys: &[Bytes],
        handoff: Option<Handoff>,
    ) -> WaitGuard {
        let waiter = Arc::new(Waiter {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            notify: tokio::sync::Notify::new(),
            stage: parking_lot::Mutex::new(Stage::Waiting),
            handoff,
        });
        let mut queues = self.queues.lock();
        for k in keys {
            queues
                .entry((db, k.clone()))
                .or_default()
                .push_back(waiter.clone());
        }
        WaitGuard {
            registry: self.clone(),
            db,
            keys: keys.to_vec(),
            waiter,
        }
    }

    /// Something was added to `key`: wake the oldest waiter on it.
    pub fn signal(&self, db: u8, key: &[u8]) {
        let queues = self.queues.lock();
        if let Some(q) = queue(&queues, db, key) {
            if let Some(first) = q.front() {
                first.notify.notify_one();
            }
        }
    }

    /// Every waiter on `key` must look again (a stream gained entries that
    /// all its readers may see, or the key went away): wake them all.
    pub fn broadcast(&self, db: u8, key: &[u8]) {
        let queues = self.queues.lock();
        if let Some(q) = queue(&queues, db, key) {
            for w in q {
                w.notify.notify_one();
            }
        }
    }

    /// The waiters of `key`, oldest first, that shard `shard` can serve by
    /// handoff.
    pub fn handoffs(&self, db: u8, key: &[u8], shard: usize) -> Vec<Arc<Waiter>> {
        let queues = self.queues.lock();
        queue(&queues, db, key)
            .map(|q| {
                q.iter()
                    .filter(|w| w.handoff.as_ref().is_some_and(|h| h.shard == shard))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every key of database `db` went away (FLUSHDB/FLUSHALL): wake every
    /// waiter of that database.
    pub fn broadcast_db(&self, db: u8) {
        let queues = self.queues.lock();
        for ((d, _), q) in queues.iter() {
            if *d == db {
                for w in q {
                    w.notify.notify_one();
                }
            }
        }
    }

    /// Number of blocked clients (INFO's blocked_clients).
    pub fn blocked_clients(&self) -> usize {
        let queues = self.queues.lock();
        let mut ids: Vec<u64> = queues.values().flatten().map(|w| w.id).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }
}

impl WaitGuard {
    /// Passes a wake-up this waiter could not use to the waiter queued
    /// right after it on each of its keys. Stream readers relay this way:
    /// an XADD wakes the oldest reader, and each reader in turn is served
    /// or hands on, so readers are tried in the order they blocked (first
    /// blocked, first served) and every reader that can be served is.
    pub fn pass_on(&self) {
        let queues = self.registry.queues.lock();
        for k in &self.keys {
            if let Some(q) = queues.get(&(self.db, k.clone())) {
                if let Some(pos) = q.iter().position(|w| w.id == self.waiter.id) {
                    if let Some(next) = q.get(pos + 1) {
                        next.notify.notify_one();
                    }
                }
            }
        }
    }
}

impl Drop for WaitGuard {
    /// Leaves every queue and wakes the next waiter of each key: this one
    /// may have been woken (by a push to any of its keys) and be leaving
    /// without taking that element (served from another key, timed out,
    /// disconnected), so the wake-up must not be lost. A waiter woken for
    /// nothing just tries again and goes back to sleep.
    fn drop(&mut self) {
        {
            // A client that leaves unserved (disconnected) must not be
            // served by a handoff that already picked it up.
            let mut stage = self.waiter.stage.lock();
            if *stage == Stage::Waiting {
                *stage = Stage::Gone;
            }
        }
        let mut queues = self.registry.queues.lock();
        for k in &self.keys {
            let slot = (self.db, k.clone());
            if let Some(q) = queues.get_mut(&slot) {
                q.retain(|w| w.id != self.waiter.id);
                match q.front() {
                    Some(next) => next.notify.notify_one(),
                    None => {
                        queues.remove(&slot);
                    }
                }
            }
        }
    }
}

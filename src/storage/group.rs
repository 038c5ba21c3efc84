//! Group commit on the committers' own threads (`always`).
//!
//! A client's writes under `always` may run on its connection's thread, as
//! they do under `everysec`, instead of going to the shard's thread and
//! back for the fsync: each of those two hand-offs woke a thread, and at
//! pipeline 1 the wakeups, not the fsyncs, were what a write cost (0.65
//! context switches a request against Redis's 0.11). Such a commit is
//! appended to the log and applied to the write buffer, where the shard's
//! next writer reads it, but it is not published: readers go on seeing
//! the state before it, and nothing it decided (its replies, the clients
//! it served or woke, its messages) leaves the server, until the log is
//! durable past it. What waits for that is an [`AfterDurable`], run in
//! commit order by whoever makes the log durable.
//!
//! That is the first of the waiting clients to get there once the threads'
//! other ready work is done (see `net::conn`), so one fsync covers every
//! commit made meanwhile, as Redis's one fsync covers an event loop's
//! writes: the *leader*. Another thread finding a sync under way does not
//! block on it; it waits for the [`Group::synced`] notice and looks again.
//! Any commit that must be visible at once (`everysec`, a multi-shard
//! round, the shard's own thread under `always`) first makes the ones
//! before it durable, so no reader ever sees a commit that is not.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

use super::tables::StoreError;

/// What runs once the commits up to some sequence number are durable (or
/// the fsync that was to make them so failed: `Err` with its error).
pub type AfterDurable = Box<dyn FnOnce(Result<(), &StoreError>) + Send>;

/// A store's leader lock and what waits on it (see the module doc).
#[derive(Default)]
pub(super) struct Group {
    /// Held across a sync of the log and the publishing after it.
    pub lead: parking_lot::Mutex<()>,
    /// What waits, with the commit it waits for, in commit order.
    waiting: parking_lot::Mutex<VecDeque<(u64, AfterDurable)>>,
    /// Whether `waiting` holds anything (asked by every commit).
    any: AtomicBool,
    /// Held while what waited is taken and run (see `Store::release`).
    pub running: parking_lot::Mutex<()>,
    /// Told after each sync, for threads that found one under way.
    pub synced: tokio::sync::Notify,
}

impl Group {
    /// Queues `f` for commit `seq`, after what waits for it or for an
    /// earlier one: a client's thread queues its replies once its batch
    /// returned, when another thread's later commit may have queued its
    /// own. The caller looks at what is published after queueing (see
    /// `Store::after_durable`), so that a sync publishing `seq` meanwhile
    /// does not leave `f` behind.
    pub fn wait(&self, seq: u64, f: AfterDurable) {
        let mut waiting = self.waiting.lock();
        let at = waiting.partition_point(|(s, _)| *s <= seq);
        waiting.insert(at, (seq, f));
        self.any.store(true, Ordering::Release);
    }

    /// Whether anything waits.
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// Takes what waits for commits up to `seq`, in commit order.
    pub fn take_upto(&self, seq: u64) -> Vec<AfterDurable> {
        let mut waiting = self.waiting.lock();
        let n = waiting.partition_point(|(s, _)| *s <= seq);
        let out = waiting.drain(..n).map(|(_, f)| f).collect();
        self.any.store(!waiting.is_empty(), Ordering::Release);
        out
    }
}

/// Runs what waited, in commit order, with how the sync went.
pub(super) fn run(waited: Vec<AfterDurable>, result: Result<(), &StoreError>) {
    for f in waited {
        f(result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn waiters_are_taken_in_commit_order_up_to_a_sequence() {
        // One for 3 joins after those for 5 and 8: it still goes first.
        let group = Group::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        for seq in [3, 5, 8, 3] {
            let seen = seen.clone();
            group.wait(
                seq,
                Box::new(move |r| seen.lock().unwrap().push((seq, r.is_ok()))),
            );
        }
        assert!(group.any());
        run(group.take_upto(4), Ok(()));
        assert_eq!(*seen.lock().unwrap(), vec![(3, true), (3, true)]);
        assert!(group.any());
        let failed = StoreError::Internal("disk".into());
        run(group.take_upto(8), Err(&failed));
        assert_eq!(seen.lock().unwrap()[2..], [(5, false), (8, false)]);
        assert!(!group.any());
    }
}

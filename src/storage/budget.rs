//! The write-buffer room the shards of a server lend each other.
//!
//! Each shard may buffer `cap` bytes of rows (`Limits::cap`); a busy shard
//! may borrow the share of shards that are idle, up to [`BORROW`] times
//! its own. A bigger buffer shares each B-tree leaf the background writer
//! rewrites among more rows: redis-benchmark's ZADD into one sorted set of
//! a million random members, all on one shard, ran 67k -> 102k a second
//! with twice the room (-c 50 -P 16), SADD and HSET 9-13% faster. A load
//! spread over every shard (loading data larger than memory) lends
//! nothing, and its memory stays what each shard's own cap allows.
//!
//! A shard is idle when it has committed nothing for [`IDLE`]. One that
//! wakes while another has borrowed its share takes its own cap at once:
//! the buffers of the server then hold at most one shard's cap more than
//! the shards' caps together, until the borrower has written its excess
//! out (its commits wait meanwhile, as at any cap).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How many times its own cap a shard may buffer while others are idle.
pub const BORROW: usize = 2;

/// How long a shard goes without a commit before its share is lent.
pub const IDLE: Duration = Duration::from_millis(100);

/// What one shard publishes: its buffered bytes, and when it last
/// committed. A line of its own, as each shard writes its slot on every
/// commit.
#[repr(align(64))]
#[derive(Default)]
struct Slot {
    pending: AtomicUsize,
    /// Microseconds since the budget's start, of the last commit.
    committed_us: AtomicU64,
}

/// The shards' slots (see the module doc).
pub struct Budget {
    cap: usize,
    start: Instant,
    slots: Box<[Slot]>,
}

impl Budget {
    /// A budget for `shards` shards of `cap` bytes each.
    pub fn new(shards: usize, cap: usize) -> Budget {
        Budget {
            cap,
            start: Instant::now(),
            slots: (0..shards).map(|_| Slot::default()).collect(),
        }
    }

    /// The budget's clock: microseconds since its start.
    pub fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    /// Each shard's own cap, below which [`Budget::cap_at`] never goes.
    pub fn own_cap(&self) -> usize {
        self.cap
    }

    /// Shard `me`'s cap as of `now` ([`Budget::now_us`]): its own, plus
    /// what idle shards leave unused, up to [`BORROW`] times its own.
    pub fn cap_at(&self, me: usize, now: u64) -> usize {
        let idle_us = IDLE.as_micros() as u64;
        let others: usize = (self.slots.iter().enumerate())
            .filter(|(i, _)| *i != me)
            .map(|(_, s)| {
                let pending = s.pending.load(Ordering::Relaxed);
                let last = s.committed_us.load(Ordering::Relaxed);
                // A busy shard keeps its whole share.
                if now.saturating_sub(last) < idle_us {
                    pending.max(self.cap)
                } else {
                    pending
                }
            })
            .sum();
        let total = self.cap * self.slots.len();
        total
            .saturating_sub(others)
            .clamp(self.cap, self.cap * BORROW)
    }

    /// Notes a commit of shard `me` at `now` ([`Budget::now_us`]), which
    /// now buffers `pending` bytes.
    pub fn committed_at(&self, me: usize, pending: usize, now: u64) {
        let slot = &self.slots[me];
        slot.pending.store(pending, Ordering::Relaxed);
        slot.committed_us.store(now, Ordering::Relaxed);
    }

    /// Notes that shard `me` now buffers `pending` bytes (its background
    /// writer has put a buffer into the tables).
    pub fn drained(&self, me: usize, pending: usize) {
        self.slots[me].pending.store(pending, Ordering::Relaxed);
    }
}

/// A shard's place in a [`Budget`].
#[derive(Clone)]
pub struct Share {
    /// The budget, shared by the server's shards.
    pub budget: std::sync::Arc<Budget>,
    /// The shard's slot in it.
    pub me: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_shard_borrows_only_from_idle_ones() {
        let b = Budget::new(3, 100);
        // Nobody has committed for a while: all idle, nothing buffered.
        std::thread::sleep(IDLE);
        assert_eq!(b.cap_at(0, b.now_us()), 200, "borrows up to twice its cap");
        b.committed_at(1, 10, b.now_us());
        b.committed_at(2, 10, b.now_us());
        assert_eq!(
            b.cap_at(0, b.now_us()),
            100,
            "busy shards keep their shares"
        );
        std::thread::sleep(IDLE);
        assert_eq!(b.cap_at(0, b.now_us()), 200, "idle again");
        b.committed_at(2, 150, b.now_us());
        assert_eq!(
            b.cap_at(0, b.now_us()),
            140,
            "one busy past its share, one idle"
        );
        b.drained(2, 0);
        assert_eq!(b.cap_at(0, b.now_us()), 190, "drained, still busy");
    }
}

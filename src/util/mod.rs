//! Redis-exact helpers with no dependencies: geohash arithmetic, glob matching, number parsing and formatting, bit operations, LCS, RDB payload pieces.
pub mod bits;
pub mod geohash;
pub mod glob;
pub mod hll;
pub mod lcs;
pub mod listpack;
pub mod lzf;
pub mod num;
pub mod rdb;
pub mod stripe;
pub mod ziplist;

/// A new random id of 40 hex characters, the shape of Redis's run id,
/// replication id and cluster node ids.
pub fn hex_id() -> String {
    let bytes: [u8; 20] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The cores this process may run on (1 where that cannot be told): the
/// default shard count, and whether rounds spread over threads.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// CPU time the calling thread has used: what its work cost, leaving out
/// the time it waited for the disk or for a core.
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the struct it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// An instant or none, read and written without a lock: for times one
/// thread notes and others only look at (a running script's start, which
/// every command asks about while scripts run; a client's last command,
/// which CLIENT LIST shows). Nanoseconds past a base the process takes on
/// first use, plus one; 0 for none.
#[derive(Debug, Default)]
pub struct AtomicInstant(std::sync::atomic::AtomicU64);

impl AtomicInstant {
    /// The instant every `AtomicInstant` counts from: taken on first use,
    /// before any instant one holds.
    fn base() -> std::time::Instant {
        static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        *BASE.get_or_init(std::time::Instant::now)
    }

    /// Holds `at`.
    pub fn set(&self, at: std::time::Instant) {
        let ns = at.saturating_duration_since(Self::base()).as_nanos() as u64;
        self.0
            .store(ns.saturating_add(1), std::sync::atomic::Ordering::Release);
    }

    /// Holds none.
    pub fn clear(&self) {
        self.0.store(0, std::sync::atomic::Ordering::Release);
    }

    /// The instant held, if any.
    pub fn get(&self) -> Option<std::time::Instant> {
        match self.0.load(std::sync::atomic::Ordering::Acquire) {
            0 => None,
            ns => Some(Self::base() + std::time::Duration::from_nanos(ns - 1)),
        }
    }
}

/// A small deterministic generator for tests (xorshift64): each call
/// `next(n)` gives a number in `0..n`.
#[cfg(test)]
pub(crate) fn test_rng(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

/// Asks the CPU to bring the cache line holding `*p` closer, without
/// waiting for it: a hint that never faults and changes nothing a program
/// can observe, so that the lines of several lookups are on their way at
/// once. A no-op where the architecture has no such instruction here.
#[inline]
pub fn prefetch<T>(p: &T) {
    prefetch_addr((p as *const T).cast::<u8>());
}

/// [`prefetch`] of a bare address, which may lie outside any object (a
/// slot a vector has room for but does not hold yet).
#[inline]
pub fn prefetch_addr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing into the program and cannot fault,
    // whatever the address; SSE, where the instruction lives, is part of
    // every x86_64.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// An iterator's items handed on a window behind, with `ahead` called on
/// each as it enters the window: work whose memory an item will need
/// (a cache line to prefetch) starts that many items before the item is
/// used.
pub struct Lookahead<I: Iterator, F> {
    inner: I,
    window: std::collections::VecDeque<I::Item>,
    size: usize,
    ahead: F,
}

impl<I: Iterator, F: FnMut(&I::Item)> Lookahead<I, F> {
    /// `inner`'s items, `size` (at least one) ahead.
    pub fn new(inner: I, size: usize, ahead: F) -> Self {
        Lookahead {
            inner,
            window: std::collections::VecDeque::with_capacity(size.max(1)),
            size: size.max(1),
            ahead,
        }
    }
}

impl<I: Iterator, F: FnMut(&I::Item)> Iterator for Lookahead<I, F> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        while self.window.len() < self.size {
            let Some(item) = self.inner.next() else { break };
            (self.ahead)(&item);
            self.window.push_back(item);
        }
        self.window.pop_front()
    }
}

#[cfg(test)]
mod lookahead_tests {
    use super::Lookahead;

    /// Every item comes out once and in order, each seen by `ahead` before
    /// it is handed on and no more than the window's size early.
    #[test]
    fn items_pass_in_order_seen_a_window_early() {
        for size in [0, 1, 3, 16] {
            let seen = std::cell::RefCell::new(Vec::new());
            let out: Vec<u32> = Lookahead::new(0..10u32, size, |&i| seen.borrow_mut().push(i))
                .inspect(|&i| {
                    let seen = seen.borrow();
                    assert!(seen.contains(&i), "size {size}: {i} handed on unseen");
                    assert!(
                        seen.len() <= i as usize + size.max(1),
                        "size {size}: too early"
                    );
                })
                .collect();
            assert_eq!(out, (0..10).collect::<Vec<_>>());
            assert_eq!(*seen.borrow(), out);
        }
    }
}

//! Counters that every command adds to and only INFO reads.
//!
//! One atomic shared by all threads moves its cache line from core to core
//! on every add: a command's statistics (calls, time, keyspace hits, the
//! latency histogram) paid several such transfers per call. A [`Striped`]
//! counter gives each thread a line of its own and sums the lines when read,
//! so an add stays in the adding core's cache.
//!
//! A thread that has a line to itself adds with a plain load and store: an
//! atomic read-modify-write is a full barrier on x86, and a command paid
//! several. The lines are handed out while they last (the connection and
//! shard threads start first) and come back when their thread exits;
//! threads beyond them share the first line, with atomic adds. Counters
//! are never written by anyone else: a reset moves a baseline instead.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Lines per counter: the first shared, the others a thread's own, so it
/// covers the connection and shard threads of a large box.
pub const STRIPES: usize = 16;

/// The lines no thread holds (bit `i` for line `i`; never the shared one).
static FREE: AtomicU32 = AtomicU32::new(((1u64 << STRIPES) - 2) as u32);

/// A thread's line for as long as it lives (0: the shared one).
struct Held(usize);

impl Held {
    fn claim() -> Held {
        let mut free = FREE.load(Ordering::Acquire);
        while free != 0 {
            let line = free.trailing_zeros();
            match FREE.compare_exchange_weak(
                free,
                free & !(1 << line),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Held(line as usize),
                Err(now) => free = now,
            }
        }
        Held(0)
    }
}

impl Drop for Held {
    /// Gives the line back; its next holder sees every count this thread
    /// stored (release here, acquire in `claim`).
    fn drop(&mut self) {
        if self.0 != 0 {
            FREE.fetch_or(1 << self.0, Ordering::Release);
        }
    }
}

/// Which line a thread adds to.
#[derive(Debug, Clone, Copy)]
pub struct Stripe {
    /// The line.
    pub index: usize,
    /// Whether this thread is its only writer.
    owned: bool,
}

impl Stripe {
    /// Adds `n` to `counter`, a counter of this stripe's line.
    pub fn add(self, counter: &AtomicU64, n: u64) {
        if self.owned {
            counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
        } else {
            counter.fetch_add(n, Relaxed);
        }
    }
}

/// This thread's line (see the module doc).
pub fn stripe() -> Stripe {
    thread_local! {
        static HELD: Held = Held::claim();
    }
    // A count made while the thread's locals are being torn down goes to
    // the shared line.
    let index = HELD.try_with(|h| h.0).unwrap_or(0);
    Stripe {
        index,
        owned: index != 0,
    }
}

/// One cache line of a thread's counts.
#[derive(Debug)]
#[repr(align(64))]
struct Line<const N: usize>([AtomicU64; N]);

/// `N` counters kept per thread and summed when read.
#[derive(Debug)]
pub struct Striped<const N: usize = 1> {
    lines: [Line<N>; STRIPES],
    /// What each counter summed to at the last reset.
    base: [AtomicU64; N],
}

impl<const N: usize> Default for Striped<N> {
    fn default() -> Self {
        Striped {
            lines: std::array::from_fn(|_| Line(std::array::from_fn(|_| AtomicU64::new(0)))),
            base: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl<const N: usize> Striped<N> {
    /// Adds `n` to counter `i`.
    pub fn add_to(&self, i: usize, n: u64) {
        let s = stripe();
        s.add(&self.lines[s.index].0[i], n);
    }

    /// Counter `i` summed over the lines, reset or not.
    fn raw(&self, i: usize) -> u64 {
        self.lines
            .iter()
            .fold(0, |sum: u64, l| sum.wrapping_add(l.0[i].load(Relaxed)))
    }

    /// Counter `i`, summed over the threads, since the last reset.
    pub fn get(&self, i: usize) -> u64 {
        self.raw(i).saturating_sub(self.base[i].load(Relaxed))
    }

    /// Zeroes every counter (CONFIG RESETSTAT): what they hold becomes
    /// their baseline. An add racing with it counts before or after it.
    pub fn reset(&self) {
        for (i, base) in self.base.iter().enumerate() {
            base.store(self.raw(i), Relaxed);
        }
    }
}

impl Striped<1> {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.add_to(0, n);
    }

    /// The sum.
    pub fn load(&self) -> u64 {
        self.get(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adds from many threads all arrive; reset zeroes them.
    #[test]
    fn sums_every_thread() {
        let c = std::sync::Arc::new(Striped::<2>::default());
        let threads: Vec<_> = (0..20)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.add_to(0, 1);
                        c.add_to(1, 3);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!((c.get(0), c.get(1)), (20_000, 60_000));
        c.reset();
        assert_eq!((c.get(0), c.get(1)), (0, 0));
        c.add_to(1, 5);
        assert_eq!((c.get(0), c.get(1)), (0, 5));
    }

    /// Threads alive together never own the same line, and a line whose
    /// thread exited is handed on with its counts intact.
    #[test]
    fn owned_lines_are_exclusive_and_handed_on() {
        let c = std::sync::Arc::new(Striped::<1>::default());
        for _ in 0..3 {
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(12));
            let threads: Vec<_> = (0..12)
                .map(|_| {
                    let (c, barrier) = (c.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        let s = stripe();
                        for _ in 0..500 {
                            c.add(1);
                        }
                        // Everyone holds their line at once here.
                        barrier.wait();
                        (s.index, s.owned)
                    })
                })
                .collect();
            let mut owned: Vec<usize> = threads
                .into_iter()
                .map(|t| t.join().unwrap())
                .filter_map(|(index, owned)| owned.then_some(index))
                .collect();
            let n = owned.len();
            owned.sort_unstable();
            owned.dedup();
            assert_eq!(owned.len(), n, "a line owned twice at once");
            assert!(!owned.contains(&0));
        }
        assert_eq!(c.load(), 3 * 12 * 500);
    }
}

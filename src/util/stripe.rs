//! Counters that every command adds to and only INFO reads.
//!
//! One atomic shared by all threads moves its cache line from core to core
//! on every add: a command's statistics (calls, time, keyspace hits, the
//! latency histogram) paid several such transfers per call. A [`Striped`]
//! counter gives each thread a line of its own and sums the lines when read,
//! so an add stays in the adding core's cache.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Lines per counter. Threads beyond this share lines (still correct, only
/// slower), so it covers the connection and shard threads of a large box.
pub const STRIPES: usize = 16;

/// This thread's line, given out round-robin on its first use.
pub fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

/// One cache line of a thread's counts.
#[derive(Debug)]
#[repr(align(64))]
struct Line<const N: usize>([AtomicU64; N]);

/// `N` counters kept per thread and summed when read.
#[derive(Debug)]
pub struct Striped<const N: usize = 1> {
    lines: [Line<N>; STRIPES],
}

impl<const N: usize> Default for Striped<N> {
    fn default() -> Self {
        Striped {
            lines: std::array::from_fn(|_| Line(std::array::from_fn(|_| AtomicU64::new(0)))),
        }
    }
}

impl<const N: usize> Striped<N> {
    /// Adds `n` to counter `i`.
    pub fn add_to(&self, i: usize, n: u64) {
        self.lines[stripe()].0[i].fetch_add(n, Relaxed);
    }

    /// Counter `i`, summed over the threads.
    pub fn get(&self, i: usize) -> u64 {
        self.lines.iter().map(|l| l.0[i].load(Relaxed)).sum()
    }

    /// Zeroes every counter (CONFIG RESETSTAT). An add racing with it may
    /// survive, as with a plain atomic stored to.
    pub fn reset(&self) {
        for line in &self.lines {
            line.0.iter().for_each(|c| c.store(0, Relaxed));
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
    }
}

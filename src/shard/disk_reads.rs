//! Reads that wait for the disk run on threads of their own.
//!
//! A read runs on its connection's thread, which serves many connections
//! (one tokio worker per core). While the data fits in memory that is the
//! cheapest place for it. Once it does not, a read that misses the page
//! cache blocks that thread, and every connection it serves, for as long
//! as the disk takes; and with one thread per core the disk is asked for
//! two pages at a time where it could serve dozens at once (this VM's
//! disk: 13k random 4 KiB reads a second one at a time, 78k sixteen at a
//! time).
//!
//! So while reads are reading from the disk, they move to threads of
//! their own ([`THREADS`] of them, started with the first read moved),
//! and they come back once they no longer do. A fixed set, not tokio's
//! blocking pool: that one starts a thread whenever none is idle at the
//! moment a read is handed over, and grew to 170 threads, 60 MiB of
//! memory, under 50 clients' reads. What decides is the kernel's count of the blocks a thread read from
//! the disk (`getrusage`'s `ru_inblock`), not how long reads take: a long
//! read of data in memory (LRANGE of 600 elements) looks the same by its
//! time, and gains nothing from moving. The count is read once every
//! [`WINDOW`] reads on a connection's thread, and around each read moved.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// Threads that run moved reads: enough to keep the disk's queue deep
/// (see the module doc), few enough that their stacks and heaps stay
/// small next to a memory limit.
pub const THREADS: usize = 32;

/// Reads between two looks at the disk counts.
pub const WINDOW: u32 = 64;

/// Bytes in one of `ru_inblock`'s blocks.
const BLOCK: u64 = 512;

/// Bytes in a page the disk is read by.
const PAGE: u64 = 4096;

/// Moving: reads of a window read at least one page from the disk for
/// every this many reads.
const ON_EVERY: u64 = 8;

/// Coming back: reads of a window read less than one page for every this
/// many reads. Far from [`ON_EVERY`], so that reads missing the cache now
/// and then do not move back and forth.
const OFF_EVERY: u64 = 32;

/// Where reads run, and what decides it (see the module doc).
pub struct DiskReads {
    inner: Arc<Inner>,
    /// The threads, once a read has moved (`None`: not one could start).
    pool: std::sync::OnceLock<Option<Arc<Pool>>>,
}

/// A moved read, as its thread runs it.
type Job = Box<dyn FnOnce() + Send>;

/// The threads' queue: jobs, and whether the threads should stop.
#[derive(Default)]
struct Pool {
    queue: parking_lot::Mutex<(std::collections::VecDeque<Job>, bool)>,
    ready: parking_lot::Condvar,
}

impl Pool {
    /// Starts the threads; `None` if not one could start.
    fn start() -> Option<Arc<Pool>> {
        let pool = Arc::new(Pool::default());
        let started = (0..THREADS)
            .filter(|i| {
                let pool = pool.clone();
                std::thread::Builder::new()
                    .name(format!("cairn-read-{i}"))
                    .spawn(move || pool.work())
                    .is_ok()
            })
            .count();
        (started > 0).then_some(pool)
    }

    fn work(&self) {
        loop {
            let job = {
                let mut queue = self.queue.lock();
                loop {
                    if let Some(job) = queue.0.pop_front() {
                        break job;
                    }
                    if queue.1 {
                        return;
                    }
                    self.ready.wait(&mut queue);
                }
            };
            // A read that panics answers with its receiver closed; the
            // thread goes on.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        }
    }

    fn push(&self, job: Job) {
        self.queue.lock().0.push_back(job);
        self.ready.notify_one();
    }

    /// Lets the threads end once the queue is empty.
    fn close(&self) {
        self.queue.lock().1 = true;
        self.ready.notify_all();
    }
}

impl Drop for DiskReads {
    fn drop(&mut self) {
        if let Some(Some(pool)) = self.pool.get() {
            pool.close();
        }
    }
}

struct Inner {
    /// Whether reads run on the read threads now.
    moved: AtomicBool,
    /// `Pin` as a number: 0 chosen by the counts, 1 always moved, 2 never.
    pin: AtomicU8,
    /// Changes of `moved`: a connection thread's window that began before
    /// the last one starts again (its count is stale).
    epoch: AtomicU32,
    /// Reads moved since the server started (INFO cairn's `reads_moved`).
    total: AtomicU64,
    /// Reads moved in the current window, and the blocks they read.
    moved_reads: AtomicU32,
    moved_blocks: AtomicU64,
    /// Bounds the reads moved at once.
    permits: Arc<tokio::sync::Semaphore>,
}

/// A fixed choice of where reads run (tests and benchmarks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pin {
    /// Chosen by the disk counts.
    Auto,
    /// Always on the read threads.
    Moved,
    /// Always on the connection's thread.
    Here,
}

/// A connection thread's window: the epoch it began in, the reads it
/// counted, and the thread's block count when it began.
#[derive(Clone, Copy)]
struct Window {
    epoch: u32,
    reads: u32,
    blocks_at_start: u64,
}

thread_local! {
    static HERE: Cell<Option<Window>> = const { Cell::new(None) };
}

impl Default for DiskReads {
    fn default() -> Self {
        DiskReads {
            inner: Arc::new(Inner {
                moved: AtomicBool::new(false),
                pin: AtomicU8::new(0),
                epoch: AtomicU32::new(0),
                total: AtomicU64::new(0),
                moved_reads: AtomicU32::new(0),
                moved_blocks: AtomicU64::new(0),
                permits: Arc::new(tokio::sync::Semaphore::new(THREADS)),
            }),
            pool: std::sync::OnceLock::new(),
        }
    }
}

impl DiskReads {
    /// Whether the next read should go to [`DiskReads::run`].
    pub fn moved(&self) -> bool {
        match self.inner.pin.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => self.inner.moved.load(Ordering::Relaxed),
        }
    }

    /// Reads run on the read threads since the server started.
    pub fn moved_total(&self) -> u64 {
        self.inner.total.load(Ordering::Relaxed)
    }

    /// Fixes where reads run, or gives the choice back to the counts.
    pub fn pin(&self, pin: Pin) {
        let n = match pin {
            Pin::Auto => 0,
            Pin::Moved => 1,
            Pin::Here => 2,
        };
        self.inner.pin.store(n, Ordering::Relaxed);
    }

    /// Counts a read run on the connection's thread, and moves reads to the
    /// read threads when this thread's last [`WINDOW`] reads read from
    /// the disk.
    pub fn ran_here(&self) {
        let epoch = self.inner.epoch.load(Ordering::Relaxed);
        HERE.with(|here| {
            let window = match here.get() {
                Some(w) if w.epoch == epoch => w,
                // A first read, or one after reads came back: the count
                // starts now.
                _ => Window {
                    epoch,
                    reads: 0,
                    blocks_at_start: blocks_read(),
                },
            };
            let reads = window.reads + 1;
            if reads < WINDOW {
                here.set(Some(Window { reads, ..window }));
                return;
            }
            let now = blocks_read();
            let blocks = now.saturating_sub(window.blocks_at_start);
            here.set(Some(Window {
                epoch,
                reads: 0,
                blocks_at_start: now,
            }));
            if reads_disk(blocks, reads, ON_EVERY) {
                self.inner.switch(true);
            }
        });
    }

    /// Runs `read` on one of the threads once fewer than [`THREADS`]
    /// reads are waiting for them or running, and counts the blocks it
    /// read; the result comes on the receiver (which is closed if `read`
    /// panicked). Where no thread could be started, `read` runs here.
    pub async fn run<T: Send + 'static>(
        &self,
        read: impl FnOnce() -> T + Send + 'static,
    ) -> tokio::sync::oneshot::Receiver<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let Ok(permit) = self.inner.permits.clone().acquire_owned().await else {
            // The semaphore is never closed; were it, the read would be
            // answered by the closed receiver.
            return rx;
        };
        let inner = self.inner.clone();
        let job = move || {
            let before = blocks_read();
            let result = read();
            let blocks = blocks_read().saturating_sub(before);
            drop(permit);
            let _ = tx.send(result);
            inner.ran_moved(blocks);
        };
        match self.pool.get_or_init(Pool::start) {
            Some(pool) => pool.push(Box::new(job)),
            None => job(),
        }
        rx
    }
}

/// The reply of a moved read whose thread failed it (it panicked).
pub fn failed() -> crate::protocol::Reply {
    crate::protocol::Reply::err("the read failed")
}

impl Inner {
    /// Counts a moved read that read `blocks`, and brings reads back when
    /// a whole window of them hardly read the disk.
    fn ran_moved(&self, blocks: u64) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let total = self.moved_blocks.fetch_add(blocks, Ordering::Relaxed) + blocks;
        let reads = self.moved_reads.fetch_add(1, Ordering::Relaxed) + 1;
        if reads != WINDOW {
            return;
        }
        // This read closed the window; reads of the next one may have
        // counted meanwhile, and land in either (a count, not a ledger).
        self.moved_reads.store(0, Ordering::Relaxed);
        self.moved_blocks.store(0, Ordering::Relaxed);
        if !reads_disk(total, reads, OFF_EVERY) {
            self.switch(false);
        }
    }

    fn switch(&self, moved: bool) {
        if self.moved.swap(moved, Ordering::Relaxed) != moved {
            self.epoch.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(moved, "reads' thread changed");
        }
    }
}

/// Whether `reads` that read `blocks` from the disk read at least one page
/// for every `every` reads.
fn reads_disk(blocks: u64, reads: u32, every: u64) -> bool {
    blocks * BLOCK * every >= u64::from(reads) * PAGE
}

/// The blocks this thread has read from the disk since it began.
#[cfg(target_os = "linux")]
fn blocks_read() -> u64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
        return 0;
    }
    usage.ru_inblock.max(0) as u64
}

/// Elsewhere no per-thread count is at hand: reads stay where they are.
#[cfg(not(target_os = "linux"))]
fn blocks_read() -> u64 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_every_eight_reads_moves_them_and_fewer_than_every_32_brings_them_back() {
        // 64 reads, 8 pages of 8 blocks: one page every 8 reads.
        assert!(reads_disk(64, 64, ON_EVERY));
        assert!(!reads_disk(63, 64, ON_EVERY));
        // 2 pages in 64 reads is one every 32: still moved.
        assert!(reads_disk(16, 64, OFF_EVERY));
        assert!(!reads_disk(15, 64, OFF_EVERY));
    }

    #[test]
    fn moved_reads_come_back_after_a_window_without_the_disk() {
        let reads = DiskReads::default();
        reads.inner.switch(true);
        assert!(reads.moved());
        for _ in 0..WINDOW - 1 {
            reads.inner.ran_moved(0);
        }
        assert!(reads.moved(), "not before the window ends");
        reads.inner.ran_moved(0);
        assert!(!reads.moved());
        // A window that reads a page every 8 reads keeps them moved.
        reads.inner.switch(true);
        for _ in 0..WINDOW {
            reads.inner.ran_moved(1);
        }
        assert!(reads.moved());
    }

    #[test]
    fn a_pin_overrides_the_counts() {
        let reads = DiskReads::default();
        reads.pin(Pin::Moved);
        assert!(reads.moved());
        reads.pin(Pin::Here);
        reads.inner.switch(true);
        assert!(!reads.moved());
        reads.pin(Pin::Auto);
        assert!(reads.moved());
    }

    #[tokio::test]
    async fn a_moved_read_answers_on_its_receiver() {
        let reads = DiskReads::default();
        let rx = reads.run(|| 6 * 7).await;
        assert_eq!(rx.await.unwrap(), 42);
    }
}

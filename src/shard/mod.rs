//! Shards: one actix actor per shard, each on its own arbiter thread and the
//! only writer of `<dir>/shard-<i>.redb`.
//!
//! # Group commit
//! Connections queue write ops on the shard (`actor::Queue`). Whoever
//! takes the shard's core next applies everything queued as one batch, in
//! one write transaction (`max_batch` ops at most), commits it under the
//! durability policy, and only then replies to every op. Many clients'
//! writes share one commit and one fsync.
//!
//! Under `everysec` and `no`, that is usually a connection's thread: one
//! that finds the core free runs the queue and its own writes itself, and
//! one that gives the core back runs what was queued while it held it (see
//! `actor::Taken`). The actor's thread is woken only for writes no client
//! thread may run: while the core is taken otherwise, and under `always`
//! for writes queued by others. Under `always` a client's thread still
//! runs its own writes (and the queue before them) when the core is free,
//! but their commit is deferred: the replies wait for an fsync of the log
//! that one of the waiting clients' threads leads, and which covers every
//! commit made meanwhile (`storage::group`). Only the thread differs; the
//! batch, its commit and the order of batches are the same.
//!
//! # Reads
//! Reads do not visit the actor: a connection opens a redb read transaction
//! (an MVCC snapshot) on the shard's file. Replies follow commits, so a client
//! always reads its own acknowledged writes.
//!
//! # Atomicity across shards
//! A command touching several shards is run by a [`coordinator`]: it asks the
//! shards for their locks in ascending id order (one coordinator task holds
//! every multi-shard lock, so none can deadlock with another), runs a
//! step on each inside that shard's write transaction, then commits them all
//! while holding every shard's `commit_lock` for writing. Readers that need a
//! consistent view of several shards take those locks for reading while they
//! open their snapshots, so nobody sees half of an MSET or a RENAME. A
//! round whose shards are free may run on the thread that gathered it
//! (the coordinator's, or the client's), holding their cores, and commits
//! the same way.

pub mod actor;
pub mod blocking;
pub mod coordinator;
pub mod disk_reads;
pub mod intent;
pub mod pause;
pub mod set;
pub mod watch;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::protocol::Reply;
use crate::storage::tables::{DbCounts, DATABASES, NAMESPACES};
use crate::storage::{ReadCtx, Store, StoreError, WriteCtx};

pub use set::ShardSet;

/// A write op: runs inside the batch transaction of the shard's one
/// writer (its actor, or a connection holding its core).
pub type WriteFn = Box<dyn FnOnce(&mut WriteCtx) -> Result<Reply, StoreError> + Send>;

/// Counters a shard publishes for INFO.
#[derive(Debug, Default)]
pub struct ShardStats {
    /// Write transactions committed for client batches.
    pub batches: AtomicU64,
    /// Ops applied in those batches.
    pub batch_ops: AtomicU64,
    /// Commands (or parts of one) that changed something, in every kind
    /// of commit (see `WriteCtx::changes`).
    pub changes: AtomicU64,
    /// Largest batch seen.
    pub max_batch: AtomicU64,
    /// All commits (batches, reaper, coordinator, sync).
    pub commits: AtomicU64,
    /// Durable (fsynced) commits.
    pub fsyncs: AtomicU64,
    /// Keys removed by the reaper because they expired.
    pub expired_keys: AtomicU64,
    /// Sub-key rows removed by the garbage collector.
    pub gc_rows: AtomicU64,
    /// Dead collection versions fully collected.
    pub gc_versions: AtomicU64,
    /// Reaper slices run.
    pub reaper_ticks: AtomicU64,
    /// Multi-shard transactions this shard took part in.
    pub coordinated: AtomicU64,
    /// ... of which the thread that gathered them ran, the coordinator's
    /// or a client's, without the shard's thread (`ShardSet::run_round_here`).
    pub coordinated_here: AtomicU64,
    /// Unix time (s) of the last durable commit: cairn's LASTSAVE.
    pub last_durable: AtomicU64,
    /// Read-like key lookups inside writes that found a key (GETDEL,
    /// SINTERSTORE's sources...): part of INFO's keyspace_hits.
    pub hits: AtomicU64,
    /// ... and that found none: part of keyspace_misses.
    pub misses: AtomicU64,
}

impl ShardStats {
    /// Records a durable commit.
    pub(super) fn durable_now(&self) {
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        let secs = now_ms() / 1000;
        self.last_durable.fetch_max(secs, Ordering::Relaxed);
    }
}

/// Server-wide switches the shards read: those DEBUG turns (Redis keeps
/// them in its `server` struct), and whether the server is a replica.
#[derive(Debug)]
pub struct Switches {
    /// DEBUG SET-ACTIVE-EXPIRE: the reaper expires keys.
    pub active_expire: AtomicBool,
    /// DEBUG PAUSE-CRON: the reaper (expiry and garbage collection) waits.
    pub cron_paused: AtomicBool,
    /// DEBUG SET-SKIP-CHECKSUM-VALIDATION: RESTORE skips the CRC check.
    pub skip_checksum: AtomicBool,
    /// Set while the server replicates a primary (REPLICAOF): only the
    /// primary expires keys, by the DEL it sends, as on a Redis replica.
    /// The reaper expires nothing, and an expired key a client's read
    /// finds reads as missing but stays.
    pub replica: AtomicBool,
}

impl Default for Switches {
    fn default() -> Self {
        Switches {
            active_expire: AtomicBool::new(true),
            cron_paused: AtomicBool::new(false),
            skip_checksum: AtomicBool::new(false),
            replica: AtomicBool::new(false),
        }
    }
}

/// How long DEBUG RELOAD waits for readers to let go of a shard's file.
const REOPEN_WAIT: Duration = Duration::from_secs(10);

/// The part of a shard every thread may touch.
pub struct ShardShared {
    /// Shard index.
    pub id: usize,
    /// The shard's storage: `None` only while DEBUG RELOAD reopens it (or
    /// after a reopen failed). Every snapshot holds a reference, so the
    /// reopen can tell when no reader is left on the old file.
    store: parking_lot::RwLock<Option<Arc<Store>>>,
    /// Where the file is and how it is opened, to reopen it.
    path: PathBuf,
    options: set::StoreOptions,
    /// DEBUG's switches (shared by every shard).
    pub switches: Arc<Switches>,
    /// Held for writing while commits become visible, for reading while a
    /// multi-shard reader opens its snapshots (see the module doc).
    pub commit_lock: parking_lot::RwLock<()>,
    /// INFO counters.
    pub stats: ShardStats,
    /// Clients blocked on keys, woken after commits that add elements.
    pub blocked: Arc<blocking::BlockRegistry>,
    /// Where the messages its commits publish go.
    pub hub: Arc<crate::pubsub::Hub>,
    /// Keys clients WATCH, marked by every write of this shard.
    pub watches: Arc<watch::WatchRegistry>,
    /// Where slow commits and reaper slices are reported.
    pub latency: Arc<crate::families::latency::LatencyMonitor>,
    /// CLIENT PAUSE: the reaper expires nothing while writes are paused.
    pub pause: Arc<pause::Pause>,
    /// The latest snapshot and the commit count it was opened at: readers
    /// share it until the next commit, so a read-mostly load opens one redb
    /// read transaction per commit instead of one per request.
    snapshot_cache: parking_lot::Mutex<Option<(u64, Arc<ReadCtx>)>>,
    /// Coordinators' `Lock`s sent to the actor and not yet taken from its
    /// mailbox: a connection runs its writes itself only while there are
    /// none, so that they never overtake a round that asked for the shard
    /// earlier (see `ShardSet::run_here`).
    pub mailed: std::sync::atomic::AtomicUsize,
    /// The writes waiting for the shard's next batch.
    pub(super) queue: parking_lot::Mutex<actor::Queue>,
    /// The shard's actor, set once it has started.
    pub(super) actor: std::sync::OnceLock<actix::Addr<actor::ShardActor>>,
    /// Per database: keys, keys with an expiry, their mean expiry time.
    counts: [[AtomicI64; 3]; DATABASES],
}

impl ShardShared {
    fn new(
        id: usize,
        (store, path, options): (Arc<Store>, PathBuf, set::StoreOptions),
        switches: Arc<Switches>,
        blocked: Arc<blocking::BlockRegistry>,
        hub: Arc<crate::pubsub::Hub>,
        latency: Arc<crate::families::latency::LatencyMonitor>,
        pause: Arc<pause::Pause>,
    ) -> ShardShared {
        ShardShared {
            hub,
            latency,
            pause,
            id,
            store: parking_lot::RwLock::new(Some(store)),
            path,
            options,
            switches,
            commit_lock: parking_lot::RwLock::new(()),
            stats: ShardStats::default(),
            blocked,
            watches: Arc::default(),
            snapshot_cache: parking_lot::Mutex::new(None),
            mailed: Default::default(),
            queue: Default::default(),
            actor: Default::default(),
            counts: std::array::from_fn(|_| Default::default()),
        }
    }

    /// Wakes the actor for the writes queued (see `actor::Queue`), unless
    /// a `Drain` is on its way already.
    pub(super) fn wake_actor(&self) {
        if self.queue.lock().needs_wake() {
            self.send_drain();
        }
    }

    /// Mails the actor a `Drain`, which `Queue::needs_wake` said it needs.
    pub(super) fn send_drain(&self) {
        if let Some(actor) = self.actor.get() {
            actor.do_send(actor::Drain);
        }
    }

    /// Publishes committed key counts.
    fn publish_counts(&self, counts: &[DbCounts; NAMESPACES]) {
        for (slot, c) in self.counts.iter().zip(counts) {
            slot[0].store(c.keys, Ordering::Relaxed);
            slot[1].store(c.expires, Ordering::Relaxed);
            let mean = if c.expires > 0 {
                c.expire_sum / i128::from(c.expires)
            } else {
                0
            };
            slot[2].store(mean as i64, Ordering::Relaxed);
        }
    }

    /// Committed key counts of database `db`.
    pub fn counts(&self, db: u8) -> DbCounts {
        let c = &self.counts[db as usize];
        let expires = c[1].load(Ordering::Relaxed);
        DbCounts {
            keys: c[0].load(Ordering::Relaxed),
            expires,
            expire_sum: i128::from(c[2].load(Ordering::Relaxed)) * i128::from(expires),
        }
    }

    /// Records a commit: counts it (readers compare the count to reuse the
    /// shared snapshot) and lets go of the shared snapshot. A redb read
    /// transaction pins every page freed after it began, so a snapshot kept
    /// alive by a write-only load (no reader comes to replace it) would stop
    /// page reuse and grow the file by every page each commit rewrites.
    fn committed(&self) {
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        let old = self.snapshot_cache.lock().take();
        drop(old);
    }

    /// A transaction over `base` (the shard's latest state), told what
    /// this moment needs of it: the watch registry as its row observer
    /// while any key of the shard is watched, the keyspace notification
    /// flags, and the names of the keys it changes while any client tracks
    /// keys for client-side caching.
    pub fn transaction<'t>(
        &self,
        base: &'t ReadCtx,
        state: &'t mut crate::storage::ShardState,
    ) -> WriteCtx<'t> {
        let mut ctx = WriteCtx::open(base, crate::storage::KvRead::now_ms(base), state);
        ctx.observer = self
            .watches
            .active()
            .then(|| self.watches.clone() as Arc<dyn crate::storage::tables::RowObserver>);
        ctx.notify_flags = self.hub.notify_flags();
        ctx.tracked = self.hub.tracking.active().then(Default::default);
        let keep_expired =
            self.pause.writes_paused() || self.switches.replica.load(Ordering::Relaxed);
        ctx.found_expired = (!keep_expired).then(Default::default);
        ctx
    }

    /// Runs `f` once the shard's commit `seq` is durable (see
    /// `storage::group`); at once, failed, if the shard has no open file.
    pub fn after_durable(&self, seq: u64, f: crate::storage::group::AfterDurable) {
        match self.store() {
            Ok(store) => store.after_durable(seq, f),
            Err(e) => f(Err(&e)),
        }
    }

    /// The shard's storage.
    pub fn store(&self) -> Result<Arc<Store>, StoreError> {
        self.store
            .read()
            .clone()
            .ok_or_else(|| StoreError::Internal(format!("shard {} has no open file", self.id)))
    }

    /// Loads the `meta` rows `rows` (their row keys) into the cache, from
    /// whichever of the shard's buffers holds them (see `Store::warm`).
    pub fn warm_meta(&self, rows: &[Vec<u8>]) {
        if let Some(store) = &*self.store.read() {
            store.warm(crate::storage::Table::Meta, rows);
        }
    }

    /// Opens a fresh snapshot of this shard.
    pub fn snapshot(&self) -> Result<ReadCtx, StoreError> {
        self.store()?.snapshot(now_ms())
    }

    /// Closes the file and opens it again, once no snapshot holds it (DEBUG
    /// RELOAD); returns the state read from the reopened file. The caller
    /// is the shard's actor, between transactions, with everything
    /// durable, holding the commit lock so no cached snapshot is taken
    /// meanwhile. Fails, leaving the file open, if readers keep it past
    /// [`REOPEN_WAIT`].
    fn reopen(&self) -> Result<crate::storage::ShardState, StoreError> {
        drop(self.snapshot_cache.lock().take());
        let deadline = Instant::now() + REOPEN_WAIT;
        loop {
            let mut slot = self.store.write();
            let idle = slot.as_ref().is_none_or(|s| Arc::strong_count(s) == 1);
            if idle {
                // The last reference: dropping it closes the file (the
                // background writer empties its buffers first).
                drop(slot.take());
                let store = set::open_store(&self.path, &self.options)?;
                // No redo follows a reopen: nothing writes around the
                // store's writer from here.
                store.build_key_filter();
                let state = crate::storage::ShardState::load(&store.latest(0)?)?;
                *slot = Some(store);
                return Ok(state);
            }
            drop(slot);
            if Instant::now() >= deadline {
                return Err(StoreError::Internal(
                    "readers kept the shard file open".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A snapshot at least as new as the last commit whose replies have been
    /// sent (commits are counted before replies go out), shared with other
    /// readers until the next commit.
    ///
    /// It is never taken while a multi-shard commit is becoming visible
    /// here (the participants hold their commit locks from before the
    /// first commits until after the last, and count their commit before
    /// letting go): a client that has seen one shard's part of an EXEC or
    /// an MSET can never then see another shard without it. The wait is
    /// async, so no connection thread blocks on a commit.
    pub async fn current_snapshot(&self) -> Result<ReadView<'static>, StoreError> {
        let snap = self.current_snap().await?;
        Ok(ReadView::new(snap, now_ms(), self.id, None))
    }

    /// The snapshot [`ShardShared::current_snapshot`] views.
    async fn current_snap(&self) -> Result<Arc<ReadCtx>, StoreError> {
        loop {
            if let Some(_visible) = self.commit_lock.try_read() {
                return self.cached_snap();
            }
            tokio::task::yield_now().await;
        }
    }

    /// [`ShardShared::current_snapshot`] for a connection running a batch
    /// of requests: the snapshot it took for an earlier read of the batch
    /// serves again while the shard has committed nothing since (the same
    /// rule as the shared cache's). A pipeline of reads then takes the
    /// commit lock, the shared cache's mutex and its reference once per
    /// shard instead of once per read: under GET at pipeline 16, those
    /// atomics, whose cache lines every connection thread writes, were
    /// about a seventh of the server's time.
    ///
    /// Reusing it without the commit lock cannot show half of a
    /// multi-shard commit: this shard's count moves before that commit's
    /// locks are let go, so a view kept here is of this shard before the
    /// commit, as if read before it began, unless the count has moved.
    ///
    /// The snapshot is lent out of `views`: a read on the connection's
    /// thread views it there ([`ReadView::lent`]) instead of taking a
    /// reference of its own, whose count every connection reading the
    /// shard writes.
    pub async fn batch_snapshot<'v>(
        &self,
        views: &'v mut BatchViews,
    ) -> Result<&'v Arc<ReadCtx>, StoreError> {
        let generation = self.stats.commits.load(Ordering::Acquire);
        let kept = matches!(views.0.get(self.id), Some(Some((g, _))) if *g == generation);
        if !kept {
            self.renew_batch_snapshot(views, generation).await?;
        }
        let (_, snap) = views.0[self.id].as_ref().expect("a snapshot was just kept");
        Ok(snap)
    }

    /// Takes the snapshot [`ShardShared::batch_snapshot`] keeps, as of the
    /// shard's `generation` of commits.
    async fn renew_batch_snapshot(
        &self,
        views: &mut BatchViews,
        generation: u64,
    ) -> Result<(), StoreError> {
        // The new snapshot may wait for the commit lock, and DEBUG RELOAD
        // holds it while it waits for every snapshot of the old file to
        // go: none is kept through the wait.
        views.clear();
        let snap = self.current_snap().await?;
        if views.0.len() <= self.id {
            views.0.resize_with(self.id + 1, || None);
        }
        // The count read before the snapshot: the snapshot holds at least
        // the commits it counts.
        views.0[self.id] = Some((generation, snap));
        Ok(())
    }

    fn cached_snap(&self) -> Result<Arc<ReadCtx>, StoreError> {
        let generation = self.stats.commits.load(Ordering::Acquire);
        let mut cache = self.snapshot_cache.lock();
        let snap = match &*cache {
            Some((g, snap)) if *g == generation => snap.clone(),
            _ => {
                let snap = Arc::new(self.store()?.snapshot(0)?);
                *cache = Some((generation, snap.clone()));
                snap
            }
        };
        Ok(snap)
    }
}

/// The snapshots a connection has read during its current batch of
/// requests, by shard, each with the shard's commit count when it was
/// taken (see [`ShardShared::batch_snapshot`]). Emptied whenever the
/// connection waits (for its writes' replies, which it does at the end of
/// every batch and before any other wait), so that an idle client never
/// pins a snapshot (and the pages and buffers it holds), and DEBUG
/// RELOAD, which waits for the old files' snapshots to go, never waits
/// on a client that waits on it.
#[derive(Default)]
pub struct BatchViews(Vec<Option<(u64, Arc<ReadCtx>)>>);

impl BatchViews {
    /// Lets go of every snapshot.
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

/// A shared snapshot with the time lazy expiry is judged against (taken per
/// request: the snapshot may be older than the clock).
pub struct ReadView<'a> {
    snap: Snap<'a>,
    now_ms: u64,
    /// The shard it reads.
    shard: usize,
    /// The keys its reads found expired, unless they go to `shared`.
    expired: parking_lot::Mutex<Vec<(u8, Vec<u8>)>>,
    /// Where the views of a multi-shard read note them together.
    shared: Option<Found>,
}

/// Keys reads found expired (see `KvRead::note_expired`), each with its
/// shard, in the order found: shared by the views of a multi-shard read.
pub type Found = Arc<parking_lot::Mutex<Vec<(usize, u8, Vec<u8>)>>>;

/// The snapshot a [`ReadView`] reads: its own reference, or one lent.
enum Snap<'a> {
    Shared(Arc<ReadCtx>),
    Lent(&'a ReadCtx),
}

impl Snap<'_> {
    fn get(&self) -> &ReadCtx {
        match self {
            Snap::Shared(s) => s,
            Snap::Lent(s) => s,
        }
    }
}

impl ReadView<'static> {
    /// A view of shard `shard`'s snapshot `snap`, judging expiry at
    /// `now_ms`, that notes the keys it finds expired in `shared` if given,
    /// else for [`ReadView::take_expired`].
    pub fn new(snap: Arc<ReadCtx>, now_ms: u64, shard: usize, shared: Option<Found>) -> Self {
        ReadView {
            snap: Snap::Shared(snap),
            now_ms,
            shard,
            expired: Default::default(),
            shared,
        }
    }
}

impl<'a> ReadView<'a> {
    /// A view of shard `shard`'s snapshot `snap`, lent by whoever holds
    /// it (see [`ShardShared::batch_snapshot`]), judging expiry at
    /// `now_ms`.
    pub fn lent(snap: &'a ReadCtx, now_ms: u64, shard: usize) -> Self {
        ReadView {
            snap: Snap::Lent(snap),
            now_ms,
            shard,
            expired: Default::default(),
            shared: None,
        }
    }

    /// The keys (database, name) the reads through this view found expired:
    /// the connection has them deleted before it replies. The view is done
    /// with: what it noted is taken without its lock (a read's two atomic
    /// operations, for a list that is nearly always empty).
    pub fn take_expired(self) -> Vec<(u8, Vec<u8>)> {
        self.expired.into_inner()
    }
}

impl crate::storage::KvRead for ReadView<'_> {
    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    fn get(&self, table: crate::storage::Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.snap.get().get(table, key)
    }

    fn get_once(
        &self,
        table: crate::storage::Table,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.snap.get().get_once(table, key)
    }

    fn get_head(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.snap.get().get_head(key)
    }

    fn scan_few(
        &self,
        table: crate::storage::Table,
        bounds: (&[u8], Option<&[u8]>),
        order: crate::storage::merge::Order,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        self.snap.get().scan_few(table, bounds, order, visit)
    }

    fn note_expired(&self, db: u8, key: &[u8]) {
        match &self.shared {
            Some(found) => found.lock().push((self.shard, db, key.to_vec())),
            None => self.expired.lock().push((db, key.to_vec())),
        }
    }
}

/// The write that follows a read which found keys expired: each one still
/// expired is deleted, reported (`expired`) and counted as Redis's lazy
/// expiry does (nothing while writes are paused: see
/// `keyspace::expire_keys`), and then the read's own reply goes out. A
/// connection that sees writes paused sends none, and replies at once.
pub fn expire_found(expired: Vec<(u8, Vec<u8>)>, reply: Reply) -> WriteFn {
    Box::new(move |w| {
        crate::storage::keyspace::expire_keys(w, &expired)?;
        Ok(reply)
    })
}

/// Wall-clock time in Unix milliseconds.
pub fn now_ms() -> u64 {
    unix_us() / 1000
}

/// Wall-clock time in Unix microseconds.
fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// How long a thread's pairing of the monotonic clock with the wall clock
/// ([`now_ms_at`]) is used before it reads the wall clock again: a step
/// of the system clock shows within this long.
const WALL_ANCHOR: std::time::Duration = std::time::Duration::from_millis(50);

/// [`now_ms`] at `at`, a moment just past that the caller read anyway (a
/// command's start): worked out from the monotonic clock and a pairing of
/// it with the wall clock this thread made within [`WALL_ANCHOR`], so the
/// wall clock is read once in that time instead of once a command (a
/// reading is ~30 ns on a VM, 2-3% of a GET's CPU at pipeline 16).
pub fn now_ms_at(at: std::time::Instant) -> u64 {
    use std::cell::Cell;
    use std::time::Instant;
    thread_local! {
        static ANCHOR: Cell<Option<(Instant, u64)>> = const { Cell::new(None) };
    }
    ANCHOR.with(|anchor| {
        if let Some((then, us)) = anchor.get() {
            if let Some(since) = at.checked_duration_since(then) {
                if since < WALL_ANCHOR {
                    return (us + since.as_micros() as u64) / 1000;
                }
            }
        }
        // Pair the clocks afresh. `at` is already past (or, from a task
        // that waited, older than the last pairing): it lies before the
        // new pairing by the monotonic time between them.
        let (then, us) = (Instant::now(), unix_us());
        anchor.set(Some((then, us)));
        let before = then.saturating_duration_since(at).as_micros() as u64;
        us.saturating_sub(before) / 1000
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// The wall time worked out from an instant is the wall clock's, to
    /// the millisecond, both on a fresh pairing and on one reused, and an
    /// instant older than the pairing is placed before it.
    #[test]
    fn wall_time_at_an_instant_follows_the_wall_clock() {
        let close = |a: u64, b: u64| a.abs_diff(b) <= 2;
        let at = Instant::now();
        let (before, worked_out, after) = (now_ms(), now_ms_at(at), now_ms());
        assert!(before.saturating_sub(1) <= worked_out && worked_out <= after + 1);
        std::thread::sleep(Duration::from_millis(20));
        // Within the pairing's time: no new reading of the wall clock.
        let later = Instant::now();
        assert!(close(now_ms_at(later), now_ms()));
        assert_eq!(
            now_ms_at(later + Duration::from_millis(7)),
            now_ms_at(later) + 7
        );
        // Past it: paired again, and an older instant counts back from it.
        std::thread::sleep(WALL_ANCHOR + Duration::from_millis(5));
        let now = now_ms();
        let earlier = Instant::now() - Duration::from_millis(30);
        assert!(close(now_ms_at(Instant::now()), now));
        assert!(close(now_ms_at(earlier), now - 30));
    }
}

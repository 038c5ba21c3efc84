//! A shard's storage: its redb file, its log and its write buffers.
//!
//! A commit appends the batch's changes to the log (`wal`) and applies
//! them to the active write buffer (`buffer`); that is all the shard's writer
//! does per batch. Once the active buffer (or its log generation) is full
//! it is frozen: the log moves to a new generation and a new buffer takes
//! the commits. A packer thread packs the frozen buffer into a third of
//! its memory (`run`) and puts it in its place in the view; a background
//! thread, the only writer of the redb file, lets packed buffers gather
//! (merging them as they wait) and puts them into the tables together, in
//! key order in one transaction, records the newest generation in the
//! `sys` row `wal_gen`, and deletes their log files. Readers see the
//! buffers merged over the tables at one sequence number (see `ReadCtx`).
//!
//! Opening a store puts the whole records of the log's generations newer
//! than `wal_gen` into the tables first (all of them, or the prefix the
//! shard set keeps so that no multi-shard round is left on some shards
//! only: `Store::begin_open`), so a shard always starts with empty
//! buffers; the coordination log's redo (`shard::intent`) then works on
//! the tables alone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redb::{Database, ReadableDatabase};

use super::budget::Share;
use super::buffer::{Buffer, Change};
use super::filter::KeyFilter;
use super::group::{self, AfterDurable, Group};
use super::rowcache::RowCache;
use super::tables::{
    init_file, io_err, read_sys_prefix, read_sys_u64, ReadCtx, RowOp, StoreError, Table,
    TableWriter,
};
use super::vlog::{self, Appender, Files, SharedCatalog, ValueLog};
use super::wal::{self, Wal};

/// The longest a batch is held back while the background writer is behind
/// (see `Store::hold_back`).
const MAX_DELAY: Duration = Duration::from_millis(50);

/// The most a shard's key filter takes: ten bits a row up to ~27 million
/// rows a shard; past that it fills and answers "maybe" more often.
const FILTER_MAX_BYTES: usize = 32 << 20;

/// Rows a shard's key filter is sized for at least (1.25 MiB of bits), so
/// that a small shard's filter is not rebuilt after every few writes.
pub const FILTER_MIN_ROWS: usize = 1 << 20;

/// How much a shard may hold in write buffers.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes of buffered rows (active and frozen) past which writers wait
    /// for the background writer; from three quarters of it they slow
    /// gradually.
    pub cap: usize,
    /// Rows the key filter is sized for at least ([`FILTER_MIN_ROWS`];
    /// tests make it small to see it rebuilt).
    pub filter_rows: usize,
    /// Bytes of rows the row cache holds at most (see `rowcache`).
    pub row_cache: usize,
}

impl Limits {
    /// Whether an active buffer of `bytes` is frozen under a cap of `cap`
    /// (see [`Store::cap`]): at a quarter of the cap, or at half while
    /// `writer_busy` (a writer that takes frozen buffers as they are, see
    /// `Core::cheap_rows`, is still writing one out), or for a buffer
    /// whose commits mostly rewrite rows it holds (`mostly_rewrites`,
    /// asked only from a quarter on).
    ///
    /// A writer behind its writers thus takes bigger buffers. Where frozen
    /// buffers are packed and gathered instead, a write-out's size comes
    /// from the gathering, and a buffer goes at a quarter, busy or not: a
    /// small active buffer keeps the connection threads' probes in the
    /// cache (DESIGN-NOTES, "Session 66").
    ///
    /// Each write a buffer of rewrites keeps active longer is one row less
    /// for the writer. Frozen at a quarter, INCR over 100,000 counters
    /// (about 10 MB of rows a shard) had the writer put back half a row
    /// per increment. Buffers of new rows go at a quarter while the writer
    /// is free: grown to half, the two shards' active buffers outgrew this
    /// machine's 32 MiB cache, and LPUSH, ZADD and MSET at pipeline 16
    /// took 10-15% more CPU a request.
    fn freezes(
        cap: usize,
        bytes: usize,
        writer_busy: bool,
        mostly_rewrites: impl FnOnce() -> bool,
    ) -> bool {
        if bytes < (cap / 4).max(1) {
            return false;
        }
        bytes >= (cap / 2).max(1) || !(writer_busy || mostly_rewrites())
    }

    /// Active-buffer bytes from which a buffer counts how its writes
    /// grow it ([`Buffer::mark_growth`]): what it took between this and
    /// a quarter of the cap tells rewrites from new rows.
    fn growth_from(cap: usize) -> usize {
        cap / 8
    }

    /// Buffered bytes (active and frozen) past which commits slow down
    /// under a cap of `cap`: a buffer being written out and half of the
    /// next one.
    fn slow_from(cap: usize) -> usize {
        cap / 4 * 3
    }
}

/// Packed buffers waiting to go into the tables, none of them merged yet,
/// that are merged into one (see `Core::merge_waiting`).
const MERGE_AT: usize = 3;

/// The longest a packed buffer waits for others to go into the tables
/// with (see `Core::group_ready`).
const GROUP_WAIT: Duration = Duration::from_millis(500);

/// A write-out's CPU time a row below which frozen buffers go to the
/// writer as they are (see `Core::cheap_rows`): a list's pushed rows cost
/// it 0.35-0.75 us, random members of a set or sorted set of a million
/// 1.3-2.6, members an SPOP deleted from one 4.5.
const CHEAP_ROW: Duration = Duration::from_nanos(800);

/// A write-out's CPU time a row above which frozen buffers are packed
/// and gathered again (see `Core::cheap_rows`).
const DEAR_ROW: Duration = Duration::from_nanos(1600);

/// How often the background writer looks at the packed buffers waiting
/// while none arrives (see `Core::group_ready`).
const GROUP_POLL: Duration = Duration::from_millis(20);

/// Rows ahead of its insert that the background writer asks for a row's
/// key filter block (see `Store::write_out_with`).
const FILTER_AHEAD: usize = 16;

/// How a commit becomes visible to readers (see `group`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Visible {
    /// At once (`everysec`, `no`, a multi-shard round's part).
    Now,
    /// Once the fsync that follows it has made it durable.
    Durable,
    /// Once some later sync has (see `group`).
    Deferred,
}

/// What the background writer and the readers share.
struct Core {
    db: Database,
    dir: PathBuf,
    stem: String,
    /// The buffers, the active one first, then the frozen ones newest
    /// first. A reader takes this list, a redb snapshot and the published
    /// sequence under this lock, so the three agree.
    view: parking_lot::Mutex<Vec<Arc<Buffer>>>,
    /// Sequences of the live snapshots (with how many hold each): versions
    /// they can see are kept.
    pins: parking_lot::Mutex<BTreeMap<u64, usize>>,
    /// The last commit readers may see: under `always`, the last one the
    /// log holds durably (see `group`).
    published: AtomicU64,
    /// The last commit applied to the buffers, which the shard's writer
    /// reads; ahead of `published` while deferred commits wait for an
    /// fsync.
    applied: AtomicU64,
    /// Bytes in frozen buffers not yet in the tables (packed ones at
    /// their packed size).
    frozen_bytes: AtomicUsize,
    /// The shard's own cap on buffered bytes (`Limits::cap`).
    cap: usize,
    /// Set while the background writer puts rows into the tables cheaply
    /// (rows appended after a table's last, as pushes and new keys in
    /// order are): a write-out's cost a row then hardly falls with the
    /// rows it carries, and frozen buffers go to it as they are, neither
    /// packed nor held to gather. Packing and merging them cost LPUSH at
    /// pipeline 16 a third of a microsecond more of the writer's side
    /// and a tenth more of the connection threads'. Decided by the
    /// writer's CPU time a row in the last write-out (its wall time also
    /// counts the fsync and, on a busy machine, the wait for a core: with
    /// the connection threads and the load on both cores of this VM, a
    /// list's cheap rows priced over [`DEAR_ROW`] and went packed), apart
    /// enough both ways ([`CHEAP_ROW`], [`DEAR_ROW`]) that a group's lower
    /// cost does not flip it back. Cheap until a write-out says otherwise:
    /// a wrong guess costs one buffer written as it is, where the other
    /// costs packing the first buffers of every list load.
    cheap_rows: std::sync::atomic::AtomicBool,
    /// Signalled when the background writer has emptied a buffer.
    room: (parking_lot::Mutex<()>, parking_lot::Condvar),
    /// The rows of the tables (see `filter`), once the background writer
    /// has built it. Replaced only under the view lock, and readers take
    /// it there before they begin their redb snapshot, so a reader's
    /// filter holds every row its snapshot does.
    filter: parking_lot::Mutex<Option<Arc<KeyFilter>>>,
    /// Rows a new filter is sized for at least (`Limits::filter_rows`).
    filter_rows: usize,
    /// Set when the store closes: a filter build under way gives up
    /// rather than hold the close for a scan of the whole file.
    closing: std::sync::atomic::AtomicBool,
    /// A written-out buffer, emptied by the background writer, for the
    /// next freeze to take instead of allocating one (see
    /// [`Buffer::emptied`]).
    spare: parking_lot::Mutex<Option<Buffer>>,
    /// The value log, the background writer's side (see `vlog`).
    values: parking_lot::Mutex<ValueLog>,
    /// The shard's place in the room the server's shards lend each other
    /// (see `budget`), once the shard set has given it one.
    share: std::sync::OnceLock<Share>,
    /// Its files, as the shard thread's appends and the writer share them.
    catalog: SharedCatalog,
    /// The files as readers resolve pointers in them: replaced only under
    /// the view lock, and taken there by readers before their redb
    /// snapshot and buffers, so a reader has every file its snapshot and
    /// buffers point into.
    readable: parking_lot::Mutex<Arc<Files>>,
    /// The value log's bytes and dead bytes as of the last commit (INFO).
    value_usage: (AtomicU64, AtomicU64),
    /// Rows of the tables read again and again (see `rowcache`):
    /// its epoch moves, under the view lock, after each commit of the
    /// tables, and readers take it there with their snapshot.
    rows: Arc<RowCache>,
    /// Makes every write-out fail (tests of what a failing disk does).
    #[cfg(test)]
    fail_write_outs: std::sync::atomic::AtomicBool,
}

/// What the background writer is asked to do.
enum Job {
    /// Put a frozen buffer into the tables.
    WriteOut(Arc<Buffer>),
    /// Build the key filter from the tables.
    BuildFilter,
}

/// The background writer: its queue of jobs and its thread.
type Writer = (std::sync::mpsc::Sender<Job>, std::thread::JoinHandle<()>);

/// The packer (see [`Core::run_packer`]): its queue of frozen buffers and
/// its thread.
type Packer = (
    std::sync::mpsc::Sender<Arc<Buffer>>,
    std::thread::JoinHandle<()>,
);

/// One shard's storage (see the module doc).
pub struct Store {
    core: Arc<Core>,
    wal: parking_lot::Mutex<Wal>,
    /// The shard thread's side of the value log: taken by commits only,
    /// under `wal`.
    appender: parking_lot::Mutex<Appender>,
    /// The packer: its queue of frozen buffers and its thread.
    packer: parking_lot::Mutex<Option<Packer>>,
    /// The background writer: its queue of packed buffers and its thread.
    writer: parking_lot::Mutex<Option<Writer>>,
    /// Run before a log generation is made durable to move to the next
    /// (see [`Store::before_rotate`]).
    before_rotate: parking_lot::Mutex<Option<BeforeRotate>>,
    /// Run before every sync of the log (see [`Store::before_sync`]).
    before_sync: parking_lot::Mutex<Option<BeforeRotate>>,
    /// The log's file being written, to sync without the log's lock.
    log_file: parking_lot::Mutex<wal::Current>,
    /// The leader lock of syncs and the deferred commits' waiters.
    group: Group,
}

/// What must be durable before a log generation is (see
/// [`Store::before_rotate`]).
pub type BeforeRotate = Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>;

/// A snapshot's hold on the versions it reads (see `Core::pins`); it also
/// keeps the store open.
pub struct Pin {
    store: Arc<Store>,
    seq: u64,
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut pins = self.store.core.pins.lock();
        if let Some(n) = pins.get_mut(&self.seq) {
            *n -= 1;
            if *n == 0 {
                pins.remove(&self.seq);
            }
        }
    }
}

/// The stem of a shard file's name (`shard-3` of `shard-3.redb`): its log
/// files are named after it.
fn stem(path: &Path) -> String {
    path.file_stem()
        .map_or_else(|| "shard".into(), |s| s.to_string_lossy().into_owned())
}

impl Store {
    /// Opens (creating if needed) the shard file at `path`, puts its log
    /// into the tables, and starts the background writer.
    pub fn open(
        path: &Path,
        open_db: impl FnOnce(&Path) -> Result<Database, StoreError>,
        limits: Limits,
    ) -> Result<Arc<Store>, StoreError> {
        let opening = Store::begin_open(path, open_db)?;
        Store::finish_open(opening, usize::MAX, limits)
    }

    /// Opens the redb file at `path` and finds the log generations its
    /// tables lack, without putting them there yet: whoever opens several
    /// shards reads them first ([`Opening::scan`]) and decides how many
    /// records of each to keep, so that no multi-shard round is left on
    /// some of them only (`shard::intent::plan_recovery`).
    pub fn begin_open(
        path: &Path,
        open_db: impl FnOnce(&Path) -> Result<Database, StoreError>,
    ) -> Result<Opening, StoreError> {
        let db = open_db(path)?;
        init_file(&db)?;
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let stem = stem(path);
        let applied = read_sys_u64(&db, wal::GEN_ROW)?;
        let mut gens = wal::existing(&dir, &stem).map_err(io_err)?;
        gens.retain(|(gen, _)| *gen > applied);
        let registry = read_sys_prefix(&db, vlog::registry_prefix())?;
        let values = ValueLog::open(&dir, &stem, &registry).map_err(io_err)?;
        Ok(Opening {
            db,
            dir,
            stem,
            applied,
            gens,
            values,
        })
    }

    /// Finishes [`Store::begin_open`]: puts the first `keep` records of
    /// the log into the tables (the rest are dropped), starts a new log
    /// generation and the background writer.
    pub fn finish_open(
        opening: Opening,
        keep: usize,
        limits: Limits,
    ) -> Result<Arc<Store>, StoreError> {
        let mut opening = opening;
        let (gen, seq) = recover(&mut opening, keep)?;
        let Opening {
            db,
            dir,
            stem,
            values,
            ..
        } = opening;
        let catalog = values.catalog().clone();
        let readable = catalog.lock().readable().unwrap_or_default();
        let appender = Appender::new(&values);
        let (bytes, dead) = values.usage();
        let wal = Wal::create(&dir, &stem, gen + 1).map_err(io_err)?;
        let log_file = parking_lot::Mutex::new(wal.current());
        let core = Arc::new(Core {
            db,
            dir,
            stem,
            view: parking_lot::Mutex::new(vec![Arc::new(Buffer::new(gen + 1))]),
            pins: Default::default(),
            published: AtomicU64::new(seq),
            applied: AtomicU64::new(seq),
            frozen_bytes: AtomicUsize::new(0),
            cap: limits.cap,
            cheap_rows: std::sync::atomic::AtomicBool::new(true),
            room: Default::default(),
            filter: Default::default(),
            filter_rows: limits.filter_rows,
            closing: Default::default(),
            spare: Default::default(),
            values: parking_lot::Mutex::new(values),
            share: Default::default(),
            catalog,
            readable: parking_lot::Mutex::new(readable),
            value_usage: (AtomicU64::new(bytes), AtomicU64::new(dead)),
            rows: Arc::new(RowCache::new(limits.row_cache)),
            #[cfg(test)]
            fail_write_outs: Default::default(),
        });
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let writer_core = core.clone();
        let thread = std::thread::Builder::new()
            .name(format!("cairn-{}-writer", core.stem))
            .spawn(move || writer_core.run_writer(rx))
            .map_err(io_err)?;
        let (pack_tx, pack_rx) = std::sync::mpsc::channel::<Arc<Buffer>>();
        let packer_core = core.clone();
        let to_writer = tx.clone();
        let packer = std::thread::Builder::new()
            .name(format!("cairn-{}-packer", core.stem))
            .spawn(move || packer_core.run_packer(pack_rx, to_writer))
            .map_err(io_err)?;
        Ok(Arc::new(Store {
            core,
            wal: parking_lot::Mutex::new(wal),
            appender: parking_lot::Mutex::new(appender),
            packer: parking_lot::Mutex::new(Some((pack_tx, packer))),
            writer: parking_lot::Mutex::new(Some((tx, thread))),
            before_rotate: Default::default(),
            before_sync: Default::default(),
            log_file,
            group: Group::default(),
        }))
    }

    /// Sets what runs before a full log generation is fsynced to move to
    /// the next one. That fsync makes durable, outside the shard's own
    /// syncs, whatever the generation holds, parts of multi-shard rounds
    /// included; the shard set makes the coordination log durable first,
    /// so that no round is durable on one shard while its redo record for
    /// the others is not (see `shard::intent`).
    pub fn before_rotate(&self, hook: BeforeRotate) {
        *self.before_rotate.lock() = Some(hook);
    }

    /// Sets what runs before each sync of the log: the coordination log's
    /// sync, so that no round's part is durable here while its record is
    /// not (see `shard::intent`), whichever thread syncs.
    pub fn before_sync(&self, hook: BeforeRotate) {
        *self.before_sync.lock() = Some(hook);
    }

    /// Makes the shard's cap on buffered bytes the one `share` lends it
    /// (see `budget`) rather than its own alone.
    pub fn share_budget(&self, share: Share) {
        let _ = self.core.share.set(share);
    }

    /// The most the shard may buffer now: its own cap, or what its share
    /// of the server's budget allows.
    fn cap(&self) -> usize {
        self.core.cap()
    }

    /// Publishes the log file being written in `current` from now on, so
    /// that other threads can make it durable (see [`wal::Current`]).
    pub fn share_log(&self, current: wal::Current) {
        let mut wal = self.wal.lock();
        wal.publish_in(current);
        *self.log_file.lock() = wal.current();
    }

    /// The sequence number of the last commit: the shard's next commit
    /// takes the one after it (a multi-shard round notes it, for
    /// recovery: `shard::intent`). Numbers go on across restarts.
    pub fn last_seq(&self) -> u64 {
        self.core.applied.load(Ordering::Acquire)
    }

    /// The redb file (tests and tools that look at the tables alone).
    pub fn db(&self) -> &Database {
        &self.core.db
    }

    /// Applies `ops` to the tables in a transaction of their own, outside
    /// the write path (the coordination log's redo at start), and ends the
    /// row cache's epoch, as every commit of the tables does.
    pub fn apply_to_tables(&self, ops: &[RowOp]) -> Result<(), StoreError> {
        let txn = self.core.db.begin_write()?;
        super::tables::apply_row_ops(&txn, ops)?;
        txn.commit()?;
        self.core.tables_changed(None);
        Ok(())
    }

    /// Has the background writer build the key filter from the tables,
    /// after which reads of rows the tables lack skip them. Called once
    /// nothing else writes the file directly any more (the coordination
    /// log's redo writes the tables after the store opened): a row
    /// written around the writer would be missing from the filter.
    pub fn build_key_filter(&self) {
        if let Some((tx, _)) = &*self.writer.lock() {
            let _ = tx.send(Job::BuildFilter);
        }
    }

    /// The value log's bytes on disk, and how many of them are dead
    /// (INFO), as of the background writer's last commit.
    pub fn value_log_usage(&self) -> (u64, u64) {
        let (bytes, dead) = &self.core.value_usage;
        (bytes.load(Ordering::Relaxed), dead.load(Ordering::Relaxed))
    }

    /// Bytes of rows the row cache holds (INFO).
    pub fn row_cache_bytes(&self) -> usize {
        self.core.rows.bytes()
    }

    /// Memory the key filter takes (INFO).
    pub fn key_filter_bytes(&self) -> usize {
        self.core.filter.lock().as_ref().map_or(0, |f| f.bytes())
    }

    /// Loads the buffered rows of `keys` into the cache (see
    /// [`super::buffer::warm_layers`]) through the store's current
    /// buffers, which every view reads: a connection warms the rows its
    /// pipeline's next requests will look up, whichever view then reads
    /// them.
    pub fn warm(&self, table: Table, keys: &[Vec<u8>]) {
        // A copy of the list: the lookups miss the cache, and holding the
        // view lock through them would hold up the shard's next batch.
        let (layers, filter) = {
            let view = self.core.view.lock();
            (view.clone(), self.core.filter.lock().clone())
        };
        // A key no buffer holds is looked for in the row cache and, where
        // the cache lacks it, asked of the key filter (a reader's order:
        // see `ReadCtx::stored`); both are misses of their own into large
        // tables (a fifth of GET's time at pipeline 16 when the rows were
        // written out).
        let mut left = super::buffer::warm_layers(&layers, table, keys);
        left.retain(|key| !self.core.rows.warm(table, key));
        if let Some(f) = &filter {
            for key in left {
                std::hint::black_box(f.may_contain(table, key));
            }
        }
    }

    /// A snapshot of the shard as of its last commit.
    pub fn snapshot(self: &Arc<Self>, now_ms: u64) -> Result<ReadCtx, StoreError> {
        self.view(now_ms, true)
    }

    /// What the shard's own writer reads under its batch: the latest
    /// state. Unpinned: only this thread publishes, and not while the view
    /// is in use.
    pub fn latest(self: &Arc<Self>, now_ms: u64) -> Result<ReadCtx, StoreError> {
        self.view(now_ms, false)
    }

    /// [`Store::latest`], reusing `old` (an earlier one) while the buffers and
    /// value log files it reads are still the store's: only the buffers' newest
    /// versions have changed since, and moving it on to the published sequence
    /// shows them. This spares each batch a redb read transaction and its table
    /// opens (~4% of a SET's CPU at pipeline 1). Once the background writer has
    /// moved a buffer into the tables, or a new buffer has taken the commits,
    /// the list differs and a new view is opened: the old one's redb
    /// transaction pins no page the writer frees after.
    ///
    /// Boxed: a view is over a kilobyte (redb's table handles), and the
    /// shard passed it by value several times a batch (~300 instructions of
    /// copying a batch under callgrind).
    pub fn latest_from(
        self: &Arc<Self>,
        old: Option<Box<ReadCtx>>,
        now_ms: u64,
    ) -> Result<Box<ReadCtx>, StoreError> {
        if let Some(mut ctx) = old {
            let view = self.core.view.lock();
            // New value log files (the shard's own appends may have
            // started one) come with a new view too: a collected file
            // goes from the files while the old redb snapshot may still
            // point into it.
            if ctx.reads_layers(&view) && ctx.reads_values(&self.core.readable.lock()) {
                ctx.advance(self.core.applied.load(Ordering::Acquire), now_ms);
                return Ok(ctx);
            }
        }
        self.latest(now_ms).map(Box::new)
    }

    /// The buffers, a redb snapshot and the published sequence, taken
    /// under the view lock so that they agree; `pinned` keeps the versions
    /// the view reads while it lives. The unpinned view is the writer's,
    /// at the last commit applied (published or not).
    fn view(self: &Arc<Self>, now_ms: u64, pinned: bool) -> Result<ReadCtx, StoreError> {
        let view = self.core.view.lock();
        let layers = view.clone();
        let filter = self.core.filter.lock().clone();
        let values = self.core.readable.lock().clone();
        let epoch = self.core.rows.epoch();
        let txn = self.core.db.begin_read()?;
        let mut pins = self.core.pins.lock();
        let seq = match pinned {
            true => self.core.published.load(Ordering::Acquire),
            false => self.core.applied.load(Ordering::Acquire),
        };
        if pinned {
            *pins.entry(seq).or_default() += 1;
        }
        drop((pins, view));
        let pin = pinned.then(|| Pin {
            store: self.clone(),
            seq,
        });
        Ok(ReadCtx::layered(txn, layers, seq, pin, now_ms)
            .with_filter(filter)
            .with_values(values)
            .with_rows(self.core.rows.clone(), epoch)
            .cache_first(pinned))
    }

    /// Commits a batch's changes: appends them to the log (fsynced if
    /// `sync`) and makes them visible to new snapshots, with every commit
    /// before them (deferred ones are made durable first: see `group`).
    /// Called by the shard's one writer only: whoever holds its core (see
    /// `shard::actor`).
    ///
    /// Large rows are appended to the value log first, and the buffer
    /// holds pointers to them (the log keeps them whole: see `vlog`). A
    /// failed append leaves nothing in the log.
    pub fn commit(&self, ops: Vec<RowOp>, sync: bool) -> Result<(), StoreError> {
        if ops.is_empty() {
            if sync {
                self.sync()?;
            }
            return Ok(());
        }
        let visible = match sync {
            true => Visible::Durable,
            false => Visible::Now,
        };
        self.append(ops, visible).map(drop)
    }

    /// Commits a batch's changes as [`Store::commit`] under `always`, but
    /// without the fsync and without publishing them: the shard's next
    /// writer reads them, readers do not until the log is durable past
    /// them (see `group`). Returns the sequence number to wait for
    /// ([`Store::after_durable`], [`Store::durable`]): this commit's, or,
    /// with no changes, the last one applied, which the batch may have
    /// read.
    pub fn commit_deferred(&self, ops: Vec<RowOp>) -> Result<u64, StoreError> {
        if ops.is_empty() {
            return Ok(self.core.applied.load(Ordering::Acquire));
        }
        self.append(ops, Visible::Deferred)
    }

    /// Appends `ops` to the log and applies them to the active buffer as
    /// the next commit, published as `visible` says; returns its number.
    fn append(&self, mut ops: Vec<RowOp>, visible: Visible) -> Result<u64, StoreError> {
        let core = &self.core;
        let seq = core.applied.load(Ordering::Acquire) + 1;
        let mut wal = self.wal.lock();
        let (pointers, created) = self.appender.lock().append(seq, &ops).map_err(io_err)?;
        if created {
            core.publish_values();
        }
        // A commit fsynced at once is written through, not mapped (each
        // fsync write-protects the page again, for the next record's
        // store to fault on). Deferred ones are stored through the map:
        // one fault a sync, where a `pwrite` each was 0.4 syscalls a
        // request at pipeline 1.
        let through = visible == Visible::Durable;
        wal.append_as(seq, &ops, through).map_err(io_err)?;
        for (i, pointer) in pointers {
            if let RowOp::Put(_, _, row) = &mut ops[i] {
                *row = pointer.to_vec();
            }
        }
        // Versions a reader may still see are kept: those of live
        // snapshots, and the newest published one of each row.
        let keep = {
            let pins = core.pins.lock();
            let published = core.published.load(Ordering::Acquire);
            pins.keys()
                .next()
                .copied()
                .unwrap_or(u64::MAX)
                .min(published)
        };
        let active = core.view.lock()[0].clone();
        active.apply(seq, ops, keep);
        core.applied.store(seq, Ordering::Release);
        // Published at once only where nothing deferred waits below it: a
        // deferred commit must not become visible with this one before
        // it is durable. (A sync takes no log lock: see `lead_sync`.)
        if visible == Visible::Now {
            match core.published.load(Ordering::Acquire) + 1 < seq {
                true => self.sync()?,
                false => self.publish(seq),
            }
        }
        // Whether the fsync a durable commit needs is still to come.
        let mut unsynced = visible == Visible::Durable;
        // One reading of the budget's clock serves the commit's cap and
        // its note in the budget (`hold_back`).
        let now = core.clock();
        let cap = core.cap_at(now);
        let bytes = active.bytes();
        if bytes >= Limits::growth_from(cap) {
            active.mark_growth();
        }
        // Only a writer taking buffers as they are grows them while busy.
        let writer_busy = core.cheap_rows.load(Ordering::Relaxed)
            && core.frozen_bytes.load(Ordering::Acquire) > 0;
        if Limits::freezes(cap, bytes, writer_busy, || active.mostly_rewrites())
            || wal.len() >= cap as u64
        {
            self.freeze(&mut wal, active)?;
            unsynced = false;
        }
        drop(wal);
        if unsynced {
            self.sync()?;
        }
        self.hold_back(now, cap);
        Ok(seq)
    }

    /// Publishes commits up to `seq`: new snapshots see them.
    fn publish(&self, seq: u64) {
        let core = &self.core;
        let _pins = core.pins.lock();
        if core.published.load(Ordering::Acquire) < seq {
            core.published.store(seq, Ordering::Release);
        }
    }

    /// Runs what waited for commits up to `seq`, now durable (or whose
    /// fsync failed), in commit order: taken and run under one lock, so
    /// that two threads releasing one after the other run theirs in that
    /// order (a subscriber gets two commits' messages in commit order).
    fn release(&self, seq: u64, result: Result<(), &StoreError>) {
        if self.group.any() {
            let _order = self.group.running.lock();
            group::run(self.group.take_upto(seq), result);
        }
    }

    /// The leader's work, its lock held: makes the log durable past every
    /// commit applied so far and publishes them; returns the last of
    /// them, with how the fsync went. It takes no lock of the log's, so a
    /// commit holding that lock may sync.
    fn lead_sync(&self) -> (u64, Result<(), StoreError>) {
        let target = self.core.applied.load(Ordering::Acquire);
        // Taken after the target: every record up to it is in this file
        // or in an earlier generation, which was durable before this one
        // began.
        let file = self.log_file.lock().clone();
        let hook = self.before_sync.lock().clone();
        let synced = hook
            .map_or(Ok(()), |hook| hook())
            .and_then(|()| file.sync())
            .map_err(io_err);
        if synced.is_ok() {
            self.publish(target);
        }
        (target, synced)
    }

    /// A sync led here (`lead` is the leader lock): what waited for it
    /// runs once the lock is released, and threads waiting for a sync
    /// are told.
    fn led(&self, lead: parking_lot::MutexGuard<'_, ()>) -> Result<(), StoreError> {
        let (target, result) = self.lead_sync();
        drop(lead);
        self.release(target, result.as_ref().map(|_| ()));
        self.group.synced.notify_waiters();
        result
    }

    /// Runs `f` once commit `seq` (from [`Store::commit_deferred`]) is
    /// durable and published, in commit order with what else waits; at
    /// once if it is already.
    pub fn after_durable(&self, seq: u64, f: AfterDurable) {
        self.group.wait(seq, f);
        // A sync may have published `seq` before this joined the queue.
        let published = self.core.published.load(Ordering::Acquire);
        if published >= seq {
            self.release(published, Ok(()));
        }
    }

    /// Whether commit `seq` is published.
    pub fn is_durable(&self, seq: u64) -> bool {
        self.core.published.load(Ordering::Acquire) >= seq
    }

    /// Makes commit `seq` durable and published: syncs the log here if no
    /// other thread is syncing it, else waits for that sync (without
    /// holding the thread) and looks again. Returns how many syncs it led
    /// and how long the longest took.
    pub async fn durable(&self, seq: u64) -> (u32, Duration) {
        let mut led_here = (0, Duration::ZERO);
        loop {
            let synced = self.group.synced.notified();
            tokio::pin!(synced);
            synced.as_mut().enable();
            if self.is_durable(seq) {
                return led_here;
            }
            let led = self.group.lead.try_lock().map(|lead| {
                // Timed only where this thread syncs: a waiter reads no clock.
                let began = std::time::Instant::now();
                self.led(lead).map(|()| began.elapsed())
            });
            match led {
                Some(Ok(took)) => led_here = (led_here.0 + 1, led_here.1.max(took)),
                Some(Err(e)) => {
                    // What waited got the error; the commits stay applied,
                    // for the next sync to publish.
                    tracing::error!(error = %e, "cannot sync the shard log");
                    return led_here;
                }
                None => synced.await,
            }
        }
    }

    /// Hands the active buffer to the background writer now, if it holds
    /// any commit, and starts a new log generation (BGREWRITEAOF: the log
    /// so far goes into the tables).
    pub fn freeze_now(&self) -> Result<(), StoreError> {
        let mut wal = self.wal.lock();
        if wal.is_empty() {
            return Ok(());
        }
        let active = self.core.view.lock()[0].clone();
        self.freeze(&mut wal, active)
    }

    /// Hands the active buffer to the background writer and starts a new
    /// one, with a new log generation.
    fn freeze(&self, wal: &mut Wal, active: Arc<Buffer>) -> Result<(), StoreError> {
        if let Some(hook) = &*self.before_rotate.lock() {
            hook().map_err(io_err)?;
        }
        wal.rotate().map_err(io_err)?;
        let core = &self.core;
        // The rotation made every commit durable: the deferred ones are
        // published before the buffer goes, as it is read past its last
        // commit once packed (see `Buffer::packed`), and what waited for
        // them runs.
        let applied = core.applied.load(Ordering::Acquire);
        self.publish(applied);
        self.release(applied, Ok(()));
        let spare = core.spare.lock().take();
        let next = match spare {
            Some(spare) => spare.renumbered(wal.gen()),
            None => Buffer::sized_like(wal.gen(), &active),
        };
        core.view.lock().insert(0, Arc::new(next));
        core.frozen_bytes
            .fetch_add(active.bytes(), Ordering::AcqRel);
        if let Some((tx, _)) = &*self.packer.lock() {
            let _ = tx.send(active);
        }
        Ok(())
    }

    /// Whether commits go at full speed: the buffered bytes are at most
    /// three quarters of the cap, where [`Store::commit`] starts to slow
    /// them down.
    pub fn calm(&self) -> bool {
        // Asked before a client's thread runs its writes: below the least
        // the cap can be, the answer needs no reading of the clock.
        let pending = self.pending();
        pending <= Limits::slow_from(self.core.cap_floor())
            || pending <= Limits::slow_from(self.cap())
    }

    /// Bytes buffered and not yet in the tables (active and frozen).
    fn pending(&self) -> usize {
        self.core.pending()
    }

    /// Slows the shard's writes while the background writer is behind,
    /// so that they meet its pace rather than stop at a wall: nothing below
    /// three quarters of the cap of buffered bytes (active and frozen),
    /// then a delay per batch growing with the square of the excess up to
    /// [`MAX_DELAY`] just below the cap, and at the cap a wait for room.
    /// (A first version slowed from the same point but counted whole
    /// frozen buffers only: writers ran at full speed into the cap and
    /// whole seconds passed with no write, loading data larger than
    /// memory. From half the cap, while buffers froze at a quarter, a
    /// writer behind kept the shard slowed below the size of buffer that
    /// would have let it catch up.)
    /// `clock` and `cap` are the commit's ([`Core::clock`], [`Core::cap_at`]):
    /// the clock is read exactly when the shard shares a budget.
    fn hold_back(&self, clock: Option<u64>, cap: usize) {
        let now = self.pending();
        if let (Some(s), Some(clock)) = (self.core.share.get(), clock) {
            s.budget.committed_at(s.me, now, clock);
        }
        let calm = Limits::slow_from(cap);
        if now <= calm {
            return;
        }
        if now < cap {
            let excess = (now - calm) as f64 / (cap - calm) as f64;
            std::thread::sleep(MAX_DELAY.mul_f64(excess * excess));
            return;
        }
        let (lock, cond) = &self.core.room;
        let mut guard = lock.lock();
        // Another shard's writer may make the room (see `budget`): its
        // store does not signal this one, so the wait is in short steps.
        while self.pending() >= self.cap() {
            cond.wait_for(&mut guard, Duration::from_millis(10));
        }
    }

    /// Makes every committed batch durable, and publishes the deferred
    /// ones (see `group`).
    pub fn sync(&self) -> Result<(), StoreError> {
        self.led(self.group.lead.lock())
    }

    /// Whether deferred commits wait for a sync: something waits on
    /// them, or they are applied and not yet published.
    pub fn awaits_sync(&self) -> bool {
        self.group.any()
            || self.core.applied.load(Ordering::Acquire)
                > self.core.published.load(Ordering::Acquire)
    }

    /// Bytes held in write buffers (INFO).
    pub fn buffered_bytes(&self) -> usize {
        self.core.view.lock().iter().map(|b| b.bytes()).sum()
    }

    /// Makes the log durable, lets the background writer put every frozen
    /// buffer into the tables, and stops it (the active buffer stays in
    /// the log: the next open puts it into the tables). Dropping the store
    /// does this too.
    pub fn close(&self) {
        if let Err(e) = self.sync() {
            tracing::error!(error = %e, "cannot sync the shard log");
        }
        self.core.closing.store(true, Ordering::Relaxed);
        // The packer first: it hands the writer what it still holds.
        if let Some((tx, thread)) = self.packer.lock().take() {
            drop(tx);
            let _ = thread.join();
        }
        if let Some((tx, thread)) = self.writer.lock().take() {
            drop(tx);
            let _ = thread.join();
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.close();
    }
}

impl Core {
    /// The shard's cap on buffered bytes now: its own, or what its share
    /// of the server's budget allows.
    fn cap(&self) -> usize {
        self.cap_at(None)
    }

    /// The budget's clock now (`Budget::now_us`), if the shard shares one.
    fn clock(&self) -> Option<u64> {
        self.share.get().map(|s| s.budget.now_us())
    }

    /// [`Core::cap`] as of `clock` ([`Core::clock`]; read now if `None`).
    fn cap_at(&self, clock: Option<u64>) -> usize {
        match self.share.get() {
            Some(s) => s
                .budget
                .cap_at(s.me, clock.unwrap_or_else(|| s.budget.now_us())),
            None => self.cap,
        }
    }

    /// The least [`Core::cap`] can be: the shard's own share.
    fn cap_floor(&self) -> usize {
        match self.share.get() {
            Some(s) => s.budget.own_cap(),
            None => self.cap,
        }
    }

    /// Bytes buffered and not yet in the tables (active and frozen).
    fn pending(&self) -> usize {
        self.frozen_bytes.load(Ordering::Acquire) + self.view.lock()[0].bytes()
    }

    /// The packer's loop, until the store closes its queue: each frozen
    /// buffer is packed ([`Buffer::packed`]) and put in its place in the
    /// view, then handed to the background writer. A thread of its own,
    /// so that buffers frozen while the writer is busy shrink at once.
    fn run_packer(
        &self,
        frozen: std::sync::mpsc::Receiver<Arc<Buffer>>,
        writer: std::sync::mpsc::Sender<Job>,
    ) {
        use std::sync::mpsc::RecvTimeoutError;
        let mut graves: Vec<Arc<Buffer>> = Vec::new();
        loop {
            let buf = if graves.is_empty() {
                frozen.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                frozen.recv_timeout(Duration::from_millis(5))
            };
            let buf = match buf {
                Ok(buf) => buf,
                Err(RecvTimeoutError::Timeout) => {
                    self.bury(&mut graves);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            if self.cheap_rows.load(Ordering::Relaxed) {
                // Nothing to gain by waiting (see `Core::cheap_rows`):
                // handed over as it is, and written out at once.
                let _ = writer.send(Job::WriteOut(buf));
                continue;
            }
            // Readers that take the view from now on read past the buffer's
            // last commit: the packed state is all they need.
            let packed = Arc::new(buf.packed());
            let buf = [buf];
            self.replace_in_view(&buf, Some(&packed));
            let _ = writer.send(Job::WriteOut(packed));
            graves.extend(buf);
            self.bury(&mut graves);
        }
        // Whatever readers still hold goes with them.
        drop(graves);
    }

    /// Takes the frozen buffers `old` (oldest first) out of the view, with
    /// `new` in the place of the newest of them if given (`old` packed,
    /// or merged), or nothing (`old` written out); counts the bytes that
    /// leave and come in the frozen bytes, and tells the budget and the
    /// commits waiting for room.
    fn replace_in_view(&self, old: &[Arc<Buffer>], new: Option<&Arc<Buffer>>) {
        let newest = old.last().expect("some buffer replaced");
        let gone: usize = old.iter().map(|b| b.bytes()).sum();
        let came = new.map_or(0, |b| b.bytes());
        let mut view = self.view.lock();
        view.retain(|b| Arc::ptr_eq(b, newest) || !old.iter().any(|o| Arc::ptr_eq(b, o)));
        if let Some(at) = view.iter().position(|b| Arc::ptr_eq(b, newest)) {
            match new {
                Some(new) => view[at] = new.clone(),
                None => drop(view.remove(at)),
            }
        }
        self.frozen_bytes.fetch_add(came, Ordering::AcqRel);
        let frozen = self.frozen_bytes.fetch_sub(gone, Ordering::AcqRel) - gone;
        if let Some(s) = self.share.get() {
            s.budget.drained(s.me, frozen + view[0].bytes());
        }
        drop(view);
        self.room.1.notify_all();
    }

    /// Whether the packed buffers waiting (oldest first, the first since
    /// `since`) go into the tables now, together: once they hold a third
    /// of the cap, or the first has waited [`GROUP_WAIT`], or the buffers
    /// press on the cap (commits slow down from there), or the store
    /// closes; at once if one came unpacked (see `Core::cheap_rows`).
    ///
    /// A write-out of random rows of a big table rewrites most of its
    /// leaves whatever it carries, so its cost a row falls with the rows
    /// it carries; packed, they take a third of the room. A third of the
    /// cap packed is the rows of about four buffers frozen at a quarter:
    /// with the active buffer and the next group filling while this one
    /// goes in, the buffers stay under the three quarters where commits
    /// slow down. ZADD -c 50 -P 16 into one sorted set grown to a million
    /// (three phases of 800k) went 113k / 67k / 50k a second before
    /// packing and gathering, 157k / 105k / 88k after (DESIGN-NOTES,
    /// "Session 66").
    fn group_ready(&self, waiting: &[Arc<Buffer>], since: std::time::Instant) -> bool {
        let cap = self.cap();
        let bytes: usize = waiting.iter().map(|b| b.bytes()).sum();
        bytes >= cap / 3
            || waiting.iter().any(|b| !b.is_packed())
            || since.elapsed() >= GROUP_WAIT
            || self.pending() >= Limits::slow_from(cap)
            || self.closing.load(Ordering::Relaxed)
    }

    /// Puts one packed buffer in place of the packed buffers waiting from
    /// `from` on (oldest first) in the view, if they merge
    /// ([`Buffer::merged`]): a point read that no buffer answers probes
    /// each of them first, and a scan merges them all. Those before `from`
    /// are merged ones, not merged again: a row is copied once at most
    /// (merging all that waited each time was 4% of the server's samples
    /// under LPUSH at pipeline 16).
    fn merge_waiting(
        &self,
        all: &mut Vec<Arc<Buffer>>,
        from: usize,
        graves: &mut Vec<Arc<Buffer>>,
    ) -> bool {
        let waiting = &all[from..];
        let Some(merged) = Buffer::merged(waiting) else {
            return false;
        };
        // As with packing: readers that take the view from now on read
        // past the last buffer's last commit.
        let merged = Arc::new(merged);
        self.replace_in_view(waiting, Some(&merged));
        graves.extend(all.drain(from..));
        all.push(merged);
        true
    }

    /// Sets [`Core::cheap_rows`] by the writer's CPU time `took` for a
    /// write-out of `bufs`.
    fn price_rows(&self, bufs: &[Arc<Buffer>], took: Duration) {
        let rows: usize = bufs.iter().map(|b| b.rows()).sum();
        let per_row = took / u32::try_from(rows.max(1)).unwrap_or(u32::MAX);
        let cheap = self.cheap_rows.load(Ordering::Relaxed);
        if cheap && per_row > DEAR_ROW {
            self.cheap_rows.store(false, Ordering::Relaxed);
        } else if !cheap && per_row < CHEAP_ROW {
            self.cheap_rows.store(true, Ordering::Relaxed);
        }
    }

    /// The background writer's loop, until the store closes its queue.
    fn run_writer(&self, jobs: std::sync::mpsc::Receiver<Job>) {
        use std::sync::mpsc::RecvTimeoutError;
        // Written-out buffers some reader may still hold.
        let mut graves: Vec<Arc<Buffer>> = Vec::new();
        // Packed buffers waiting to go into the tables together, oldest
        // first, and when the first came.
        let mut waiting: Vec<Arc<Buffer>> = Vec::new();
        let mut since = std::time::Instant::now();
        // Frozen buffers the packed ones waiting hold (merged or not), and
        // how many of those waiting, the first ones, are merged.
        let mut buffers = 0;
        let mut merged = 0;
        // Set once a write-out was given up at close: no later buffer may
        // go in, or `wal_gen` would claim the one given up.
        let mut gave_up = false;
        loop {
            // Buffers waiting are looked at again every few milliseconds
            // besides on each arrival: the cap moves with what other
            // shards lend (see `budget`), and the active buffer grows.
            let wait = if waiting.is_empty() {
                None
            } else {
                Some(GROUP_WAIT.saturating_sub(since.elapsed()).min(GROUP_POLL))
            };
            let wait = match (wait, graves.is_empty()) {
                (Some(w), false) => Some(w.min(Duration::from_millis(5))),
                (w, true) => w,
                (None, false) => Some(Duration::from_millis(5)),
            };
            let job = match wait {
                None => jobs.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(w) => jobs.recv_timeout(w),
            };
            let closed = matches!(job, Err(RecvTimeoutError::Disconnected));
            match job {
                Ok(Job::WriteOut(_)) if gave_up => {}
                Ok(Job::WriteOut(buf)) => {
                    if waiting.is_empty() {
                        since = std::time::Instant::now();
                    }
                    waiting.push(buf);
                    buffers += 1;
                    if waiting.len() - merged >= MERGE_AT
                        && !self.group_ready(&waiting, since)
                        && self.merge_waiting(&mut waiting, merged, &mut graves)
                    {
                        merged += 1;
                    }
                }
                Ok(Job::BuildFilter) => self.build_filter(),
                Err(_) => self.bury(&mut graves),
            }
            if !waiting.is_empty() && (closed || self.group_ready(&waiting, since)) {
                let started = crate::util::thread_cpu_time();
                if !self.write_out(&waiting) {
                    gave_up = true;
                    waiting.clear();
                    merged = 0;
                    continue;
                }
                // Priced before the value log's collection, whose cost
                // packing does not change.
                self.price_rows(
                    &waiting,
                    crate::util::thread_cpu_time().saturating_sub(started),
                );
                // A file collected per buffer written, the pace the value
                // log's garbage was planned for (see `vlog`).
                for _ in 0..std::mem::take(&mut buffers) {
                    self.collect_values();
                }
                graves.append(&mut waiting);
                merged = 0;
                self.bury(&mut graves);
                let filter = self.filter.lock().clone();
                if filter.is_some_and(|f| f.wants_rebuild()) {
                    self.build_filter();
                }
            }
            if closed {
                break;
            }
        }
    }

    /// Frees here the written-out buffers no reader holds any more, the
    /// newest kept emptied as the next freeze's buffer: a reader (a shard,
    /// a connection) that let go of one last would otherwise free its
    /// rows on its own thread (6.6% of the shard's time under LPUSH at
    /// pipeline 16), and the next buffer would fault in fresh memory for
    /// its row maps. A buffer is no longer in the view, so nobody can take
    /// a new handle on it once it is the last.
    fn bury(&self, graves: &mut Vec<Arc<Buffer>>) {
        let mut i = 0;
        while i < graves.len() {
            if Arc::strong_count(&graves[i]) > 1 {
                i += 1;
                continue;
            }
            // In write-out order, so the spare left is the newest freed.
            if let Ok(buf) = Arc::try_unwrap(graves.remove(i)) {
                if !buf.is_packed() {
                    *self.spare.lock() = Some(buf.emptied());
                }
            }
        }
    }

    /// Puts packed buffers (oldest first) into the tables in one
    /// transaction, retrying while it fails (a full disk): their rows stay
    /// readable from the buffers meanwhile, and writers are held back once
    /// the cap is reached.
    ///
    /// Once the store is closing, a failure gives the buffers up instead
    /// (false): their log generations stay, and the next open puts them
    /// into the tables. Retrying there could wait forever (a full disk, a
    /// data directory deleted under a test's server), and close waits for
    /// it.
    fn write_out(&self, bufs: &[Arc<Buffer>]) -> bool {
        let mut delay = Duration::from_millis(10);
        let done = loop {
            match self.try_write_out(bufs) {
                Ok(()) => break true,
                Err(e) if self.closing.load(Ordering::Relaxed) => {
                    tracing::error!(shard = %self.stem, error = %e, "cannot write the buffer into the shard file at close; the log keeps it for the next open");
                    break false;
                }
                Err(e) => {
                    tracing::error!(shard = %self.stem, error = %e, "cannot write the buffer into the shard file; retrying");
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
            }
        };
        if !done {
            return false;
        }
        // The rows are in the tables: later snapshots read them there.
        self.replace_in_view(bufs, None);
        let last = bufs.last().expect("a write-out of some buffer");
        if let Err(e) = wal::remove_upto(&self.dir, &self.stem, last.gen) {
            tracing::error!(shard = %self.stem, error = %e, "cannot delete a shard log file");
        }
        true
    }

    fn try_write_out(&self, bufs: &[Arc<Buffer>]) -> Result<(), StoreError> {
        #[cfg(test)]
        if self.fail_write_outs.load(Ordering::Relaxed) {
            return Err(io_err(std::io::Error::other("a failing disk")));
        }
        self.with_values(|values| self.write_out_with(bufs, values))
    }

    /// Runs `f`, a write transaction of the tables that may append to the
    /// value log, with the value log locked; if it fails, the value log
    /// forgets what it appended and counted.
    fn with_values(
        &self,
        f: impl FnOnce(&mut ValueLog) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut values = self.values.lock();
        let done = f(&mut values);
        if done.is_err() {
            values.aborted();
            self.publish_values();
        }
        done
    }

    /// A write transaction of the tables that is durable when it commits.
    fn begin_durable(&self) -> Result<redb::WriteTransaction, StoreError> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(redb::Durability::Immediate)
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        Ok(txn)
    }

    fn write_out_with(
        &self,
        bufs: &[Arc<Buffer>],
        values: &mut ValueLog,
    ) -> Result<(), StoreError> {
        let txn = self.begin_durable()?;
        let mut w = TableWriter::with_values(&txn, values);
        let filter = self.filter.lock().clone();
        self.write_buffers(&mut w, bufs, filter.as_deref())?;
        let last = bufs.last().expect("a write-out of some buffer");
        let gen = last.gen.to_be_bytes();
        w.apply(Change::Row(Table::Sys, wal::GEN_ROW, Some(&gen)))?;
        let seq = last.last_seq().to_be_bytes();
        w.apply(Change::Row(Table::Sys, wal::SEQ_ROW, Some(&seq)))?;
        w.prepare_values()?;
        drop(w);
        self.commit_with_values(txn, values, Some(bufs))?;
        values.written_through(last.last_seq());
        Ok(())
    }

    /// Puts the changes of `bufs` (oldest first) into the write
    /// transaction of `w`, keeping `filter` (the key filter, if built) up
    /// to date.
    fn write_buffers(
        &self,
        w: &mut TableWriter<'_, '_>,
        bufs: &[Arc<Buffer>],
        filter: Option<&KeyFilter>,
    ) -> Result<(), StoreError> {
        super::buffer::for_each_table_of(bufs, &mut |t, changes| {
            // The filter, if it covers this table's rows.
            let filter = filter.filter(|_| KeyFilter::covers(t));
            // Each row's filter block is a cache miss of its own, and
            // redb's work between two rows leaves no room to overlap
            // them: they are asked for `FILTER_AHEAD` rows early.
            let changes = crate::util::Lookahead::new(changes, FILTER_AHEAD, |change| {
                if let (Some(f), Change::Row(_, k, _)) = (filter, change) {
                    f.prefetch(t, k);
                }
            });
            let changes = changes.filter(|change| match (filter, change) {
                // Rows enter the filter before the commit shows them.
                (Some(f), Change::Row(_, k, Some(_))) => {
                    f.insert(t, k);
                    true
                }
                // A row the tables never had (pushed and popped again
                // while buffered, a queue's usual life) needs no
                // removal: that would descend the B-tree for nothing.
                // One they may have stays in the filter, counted toward
                // its rebuild.
                (Some(f), Change::Row(_, k, None)) => {
                    let held = f.may_contain(t, k);
                    if held {
                        f.removed();
                    }
                    held
                }
                _ => true,
            });
            w.apply_table(t, changes)
        })
    }

    /// Commits a write transaction whose value log appends are prepared,
    /// which wrote the rows of `written` (a buffer written out) or others
    /// (`None`). Readers are given the files it points into before it
    /// commits, and lose those it emptied only after.
    fn commit_with_values(
        &self,
        txn: redb::WriteTransaction,
        values: &mut ValueLog,
        written: Option<&[Arc<Buffer>]>,
    ) -> Result<(), StoreError> {
        self.publish_values();
        txn.commit()?;
        // Before the buffer written out leaves the view, and before the
        // files a collection emptied leave the readers' (see `rowcache`).
        self.tables_changed(written);
        values.committed();
        self.publish_values();
        let (bytes, dead) = values.usage();
        self.value_usage.0.store(bytes, Ordering::Relaxed);
        self.value_usage.1.store(dead, Ordering::Relaxed);
        Ok(())
    }

    /// Tells the row cache that the tables have just changed: the rows of
    /// `written` (a buffer written out; each one's newest version is what
    /// the tables now hold, unless it went to the value log), or rows not
    /// known one by one (`None`). The new epoch is published under the
    /// view lock, where readers take it with their snapshot.
    fn tables_changed(&self, written: Option<&[Arc<Buffer>]>) {
        let change = self.rows.begin_change();
        match written {
            // Nothing cached, nothing to rewrite; rows offered once are
            // not worth a walk of the whole buffer then (they are offered
            // again by their next read).
            Some(_) if self.rows.bytes() == 0 => {}
            Some(bufs) => {
                // A deleted range (a table's ranges come before its rows)
                // ends the pass: the rows it removed are not known one by
                // one, so the cache starts over. Oldest first, as they
                // went into the tables.
                let rewritten = bufs.iter().try_for_each(|buf| {
                    buf.for_each_table_as_arrived(&mut |t, changes| {
                        if !RowCache::caches(t) {
                            return Ok(());
                        }
                        for c in changes {
                            match c {
                                Change::Row(t, k, row) => {
                                    let row = row.filter(|r| !vlog::separates(t, r));
                                    self.rows.rewrite(&change, t, k, row);
                                }
                                Change::Range(..) => return Err(()),
                            }
                        }
                        Ok(())
                    })
                });
                if rewritten.is_err() {
                    self.rows.clear(&change);
                }
            }
            None => self.rows.clear(&change),
        }
        let _view = self.view.lock();
        self.rows.end_change(change);
    }

    /// Hands readers the value log's files, if they changed: under the
    /// view lock, where readers take them before their redb snapshot (the
    /// catalog is read under it too, so that of two sides publishing, the
    /// later one's files are the ones that stay).
    fn publish_values(&self) {
        let _view = self.view.lock();
        if let Some(files) = self.catalog.lock().readable() {
            *self.readable.lock() = files;
        }
    }

    /// Collects the value log file most worth it, if one is half dead (see
    /// `vlog`): its live values move to the end of the log and it goes.
    fn collect_values(&self) {
        let collected = self.with_values(|values| match values.victim() {
            Some(n) => self.collect_file(values, n),
            None => Ok(()),
        });
        if let Err(e) = collected {
            tracing::error!(shard = %self.stem, error = %e, "cannot collect a value log file");
        }
    }

    fn collect_file(&self, values: &mut ValueLog, n: u32) -> Result<(), StoreError> {
        let txn = self.begin_durable()?;
        let mut w = TableWriter::new(&txn);
        let moved = values.collect(n, |key, here| {
            Ok(w.stored(Table::Meta, key)?
                .is_some_and(|stored| super::vlog::same_place(&stored, here)))
        })?;
        for (key, to) in &moved {
            w.put_stored(Table::Meta, key, to)?;
        }
        values.prepare(|change| w.apply(change))?;
        drop(w);
        self.commit_with_values(txn, values, None)?;
        tracing::debug!(shard = %self.stem, file = n, moved = moved.len(), "collected a value log file");
        Ok(())
    }
}

impl Core {
    /// Builds the key filter from a scan of the tables and puts it in
    /// place of the old one. Runs on the background writer's thread, the
    /// only writer of the file, so no commit lands during the scan; the
    /// new filter is installed under the view lock, so every reader that
    /// takes it begins its snapshot after the scan's. On a read error,
    /// or when the store closes meanwhile, the old filter (or none)
    /// stays: it is only ever a shortcut.
    fn build_filter(&self) {
        let started = std::time::Instant::now();
        let built = (|| -> Result<Option<KeyFilter>, StoreError> {
            use redb::{ReadableTable, ReadableTableMetadata};
            let txn = self.db.begin_read()?;
            let mut tables = Vec::with_capacity(2);
            let mut rows = 0;
            for t in Table::ALL.into_iter().filter(|&t| KeyFilter::covers(t)) {
                let table = txn.open_table(t.def())?;
                rows += table.len()? as usize;
                tables.push((t, table));
            }
            let filter = KeyFilter::new(rows, self.filter_rows, FILTER_MAX_BYTES);
            for (t, table) in &tables {
                for (i, row) in table.iter()?.enumerate() {
                    if i % 65_536 == 0 && self.closing.load(Ordering::Relaxed) {
                        return Ok(None);
                    }
                    filter.insert(*t, row?.0.value());
                }
            }
            filter.count_from_here();
            Ok(Some(filter))
        })();
        match built {
            Ok(None) => {}
            Ok(Some(filter)) => {
                tracing::debug!(shard = %self.stem, ?filter, elapsed = ?started.elapsed(), "built the key filter");
                let _view = self.view.lock();
                *self.filter.lock() = Some(Arc::new(filter));
            }
            Err(e) => {
                tracing::error!(shard = %self.stem, error = %e, "cannot build the key filter");
            }
        }
    }
}

/// A store being opened: its file, and the log generations its tables
/// lack (see [`Store::begin_open`]).
pub struct Opening {
    db: Database,
    dir: PathBuf,
    stem: String,
    /// The last log generation the tables hold.
    applied: u64,
    /// The later generations' files, oldest first.
    gens: Vec<(u64, PathBuf)>,
    /// The value log, as the tables' last commit left it.
    values: ValueLog,
}

impl Opening {
    /// The redb file, its tables as they are before the log goes in.
    pub fn db(&self) -> &Database {
        &self.db
    }

    /// Hands `each` the whole records of the log the tables lack, oldest
    /// first; returns how many there were. A generation is read (into
    /// memory) one at a time, up to its first record that is not whole
    /// or not its own: a generation was fsynced whole before the next one
    /// began, so only the last can end in a torn record.
    pub fn scan(
        &self,
        each: impl FnMut(&wal::Record) -> Result<(), StoreError>,
    ) -> Result<usize, StoreError> {
        scan_gens(&self.gens, each)
    }
}

/// [`Opening::scan`] of the log generations `gens`.
fn scan_gens(
    gens: &[(u64, PathBuf)],
    mut each: impl FnMut(&wal::Record) -> Result<(), StoreError>,
) -> Result<usize, StoreError> {
    let mut n = 0;
    for (gen, path) in gens {
        let (found, _) = wal::read(path, *gen).map_err(io_err)?;
        found.iter().try_for_each(&mut each)?;
        n += found.len();
    }
    Ok(n)
}

/// Puts the first `keep` of the log's records into the tables in one
/// durable transaction that also records the last generation read and
/// the last commit's sequence number, drops the log files and returns
/// both: the store starts with empty buffers and a fresh log, numbering
/// its commits on from there.
fn recover(opening: &mut Opening, keep: usize) -> Result<(u64, u64), StoreError> {
    let last = opening.gens.last().map_or(opening.applied, |(gen, _)| *gen);
    let mut seq = read_sys_u64(&opening.db, wal::SEQ_ROW)?;
    let txn = opening.db.begin_write()?;
    let mut w = TableWriter::with_values(&txn, &mut opening.values);
    let stem = &opening.stem;
    let mut kept = 0;
    let found = scan_gens(&opening.gens, |record| {
        if kept == keep {
            return Ok(());
        }
        kept += 1;
        seq = seq.max(record.seq);
        record.ops.iter().try_for_each(|op| w.apply(op.as_change()))
    })?;
    let gen = last.to_be_bytes();
    w.apply(Change::Row(Table::Sys, wal::GEN_ROW, Some(&gen)))?;
    w.apply(Change::Row(
        Table::Sys,
        wal::SEQ_ROW,
        Some(&seq.to_be_bytes()),
    ))?;
    w.prepare_values()?;
    drop(w);
    match txn.commit() {
        Ok(()) => opening.values.committed(),
        Err(e) => {
            opening.values.aborted();
            return Err(e.into());
        }
    }
    if kept > 0 {
        tracing::info!(
            shard = stem,
            records = kept,
            "replayed the shard log into the tables"
        );
    }
    if kept < found {
        tracing::warn!(
            shard = stem,
            dropped = found - kept,
            "dropped the shard log's records from a multi-shard commit \
             that other shards lost, and after it"
        );
    }
    wal::remove_upto(&opening.dir, stem, u64::MAX).map_err(io_err)?;
    Ok((last, seq))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::KvRead;

    fn open(path: &Path, cap: usize) -> Arc<Store> {
        let limits = Limits {
            cap,
            filter_rows: 1 << 16,
            row_cache: 1 << 20,
        };
        Store::open(path, |p| Ok(Database::builder().create(p)?), limits).unwrap()
    }

    fn put(k: &str, v: &str) -> Vec<RowOp> {
        vec![RowOp::Put(
            Table::Meta,
            k.as_bytes().to_vec(),
            v.as_bytes().to_vec(),
        )]
    }

    fn get(store: &Arc<Store>, k: &str) -> Option<String> {
        let r = store.snapshot(0).unwrap();
        r.get(Table::Meta, k.as_bytes())
            .unwrap()
            .map(|v| String::from_utf8(v).unwrap())
    }

    /// Frozen buffers are packed in place in the view and wait there for
    /// one another, merged once a few wait, then go into the tables in
    /// one write-out: every commit reads back throughout, a snapshot from
    /// before keeps its state, and the log files go once the rows are in.
    #[test]
    fn frozen_buffers_wait_packed_and_go_in_together() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-0.redb");
        // A cap far above these buffers: they wait for `GROUP_WAIT`.
        let store = open(&path, 64 << 20);
        // Rows priced dear, as a big table's are: frozen buffers go packed.
        store.core.cheap_rows.store(false, Ordering::Relaxed);
        let before = store.snapshot(0).unwrap();
        let buffers = MERGE_AT + 1;
        for i in 0..buffers {
            store
                .commit(put(&format!("k{i}"), &i.to_string()), false)
                .unwrap();
            store.commit(put("same", &i.to_string()), false).unwrap();
            store.freeze_now().unwrap();
        }
        let last_gen = store.wal.lock().gen() - 1;
        // Packed, and fewer layers than buffers once merged (or already in
        // the tables, on a machine slow enough to let the wait run out).
        wait_for("the frozen buffers are not packed and merged", || {
            let view = store.core.view.lock();
            view[1..].iter().all(|b| b.is_packed()) && view.len() < buffers + 1
        });
        let read_all = |store: &Arc<Store>| {
            for i in 0..buffers {
                assert_eq!(get(store, &format!("k{i}")), Some(i.to_string()));
            }
            assert_eq!(get(store, "same"), Some((buffers - 1).to_string()));
        };
        read_all(&store);
        assert_eq!(before.get(Table::Meta, b"k0").unwrap(), None);
        settle(&store);
        assert_eq!(store.core.view.lock().len(), 1);
        assert_eq!(read_sys_u64(store.db(), wal::GEN_ROW).unwrap(), last_gen);
        wait_for("the written-out log files stay", || {
            let logs = wal::existing(dir.path(), "shard-0").unwrap();
            logs.iter().all(|(gen, _)| *gen > last_gen)
        });
        read_all(&store);
        drop(before);
        drop(store);
        read_all(&open(&path, 64 << 20));
    }

    /// The writer takes frozen buffers as they are once a write-out's
    /// rows came cheap, and packs them again once they come dear, with a
    /// band between where it keeps to what it does.
    #[test]
    fn frozen_buffers_go_as_they_are_while_rows_are_cheap() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("shard-0.redb"), 64 << 20);
        let buf = Buffer::new(1);
        let rows: Vec<RowOp> = (0..1000).flat_map(|i| put(&format!("k{i}"), "v")).collect();
        buf.apply(1, rows, 0);
        let bufs = [Arc::new(buf)];
        let core = &store.core;
        let cheap = || core.cheap_rows.load(Ordering::Relaxed);
        let per_row = |ns: u64| Duration::from_nanos(ns * 1000);
        assert!(cheap(), "cheap until a write-out says otherwise");
        core.price_rows(&bufs, per_row(1200));
        assert!(cheap(), "between the two: as it was");
        core.price_rows(&bufs, per_row(2000));
        assert!(!cheap());
        core.price_rows(&bufs, per_row(1200));
        assert!(!cheap(), "between the two: as it was");
        core.price_rows(&bufs, per_row(500));
        assert!(cheap());
        // Taken as they are: written out at once, never packed.
        store.commit(put("a", "1"), false).unwrap();
        let frozen = store.core.view.lock()[0].clone();
        store.freeze_now().unwrap();
        settle(&store);
        assert!(!frozen.is_packed());
        assert_eq!(store.core.view.lock().len(), 1);
        assert_eq!(get(&store, "a").as_deref(), Some("1"));
    }

    /// A snapshot keeps reading the state it was taken at while later
    /// commits land, and sees nothing of them; a new one sees them all.
    #[test]
    fn snapshots_read_one_point() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("shard-0.redb"), 1 << 20);
        store.commit(put("a", "1"), false).unwrap();
        let before = store.snapshot(0).unwrap();
        store.commit(put("a", "2"), false).unwrap();
        store.commit(put("b", "2"), false).unwrap();
        assert_eq!(before.get(Table::Meta, b"a").unwrap(), Some(b"1".to_vec()));
        assert_eq!(before.get(Table::Meta, b"b").unwrap(), None);
        assert_eq!(get(&store, "a").as_deref(), Some("2"));
        assert_eq!(get(&store, "b").as_deref(), Some("2"));
    }

    /// A shard's commits are numbered on across restarts, whether its
    /// last commits were still in the log (put into the tables when it
    /// opens) or already written out by the background writer.
    #[test]
    fn commit_numbers_go_on_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-0.redb");
        let store = open(&path, 1 << 20);
        assert_eq!(store.last_seq(), 0);
        store.commit(put("a", "1"), false).unwrap();
        store.commit(put("a", "2"), false).unwrap();
        drop(store);
        let store = open(&path, 1 << 20);
        assert_eq!(store.last_seq(), 2);
        written_out(&store, put("a", "3"));
        assert_eq!(read_sys_u64(store.db(), wal::SEQ_ROW).unwrap(), 3);
        drop(store);
        let store = open(&path, 1 << 20);
        assert_eq!(store.last_seq(), 3);
        assert_eq!(get(&store, "a").as_deref(), Some("3"));
    }

    /// Waits (10 s at most, else fails with `what`) until `done`: the
    /// background writer works on its own thread.
    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Waits until the background writer has put every frozen buffer into
    /// the tables (and done any job queued before).
    fn settle(store: &Store) {
        wait_for("the writer is stuck", || {
            store.core.frozen_bytes.load(Ordering::Acquire) == 0
        });
    }

    /// Commits `ops` and waits until the background writer has put them
    /// into the tables.
    fn written_out(store: &Store, ops: Vec<RowOp>) {
        store.commit(ops, false).unwrap();
        store.freeze_now().unwrap();
        settle(store);
    }

    /// A row read as a one-off (`get_once`: a random pick's draw) is
    /// neither served from the row cache nor offered to it, however often
    /// it is read so; a plain read still is.
    #[test]
    fn one_off_reads_leave_the_row_cache_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("shard-0.redb"), 1 << 20);
        written_out(&store, put("a", "1"));
        for _ in 0..3 {
            let r = store.snapshot(0).unwrap();
            assert_eq!(
                r.get_once(Table::Meta, b"a").unwrap().as_deref(),
                Some(&b"1"[..])
            );
        }
        assert_eq!(store.row_cache_bytes(), 0);
        assert_eq!(get(&store, "a").as_deref(), Some("1"));
        assert_eq!(get(&store, "a").as_deref(), Some("1"));
        assert!(store.row_cache_bytes() > 0);
    }

    /// A row the tables hold is served from the row cache only to readers
    /// of the state it was read in: once the background writer has put a
    /// newer row in, new snapshots read that, and a snapshot from before,
    /// whose buffer never showed it the newer row, still reads its own.
    #[test]
    fn the_row_cache_serves_only_the_state_it_was_read_in() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("shard-0.redb"), 1 << 20);
        written_out(&store, put("a", "1"));
        assert_eq!(store.row_cache_bytes(), 0);
        // Read twice: a row is cached the second time (see `rowcache`).
        assert_eq!(get(&store, "a").as_deref(), Some("1"));
        assert_eq!(store.row_cache_bytes(), 0, "read once, not kept");
        assert_eq!(get(&store, "a").as_deref(), Some("1"));
        assert!(store.row_cache_bytes() > 0, "read again, kept");
        let before = store.snapshot(0).unwrap();
        assert_eq!(get(&store, "a").as_deref(), Some("1"));
        written_out(&store, put("a", "2"));
        assert_eq!(get(&store, "a").as_deref(), Some("2"));
        assert_eq!(get(&store, "a").as_deref(), Some("2"));
        assert_eq!(before.get(Table::Meta, b"a").unwrap(), Some(b"1".to_vec()));
        store
            .commit(vec![RowOp::Del(Table::Meta, b"a".to_vec())], false)
            .unwrap();
        assert_eq!(get(&store, "a"), None, "the buffer's deletion first");
        store.freeze_now().unwrap();
        settle(&store);
        assert_eq!(get(&store, "a"), None);
        assert_eq!(before.get(Table::Meta, b"a").unwrap(), Some(b"1".to_vec()));
        // A member's row the same way.
        let member = |v: &str| vec![RowOp::Put(Table::Sub, b"m".to_vec(), v.into())];
        let read = || store.snapshot(0).unwrap().get(Table::Sub, b"m").unwrap();
        written_out(&store, member("x"));
        assert_eq!((read(), read()), (Some(b"x".to_vec()), Some(b"x".to_vec())));
        written_out(&store, member("y"));
        assert_eq!((read(), read()), (Some(b"y".to_vec()), Some(b"y".to_vec())));
    }

    /// A write-out rewrites the cached rows it changed rather than
    /// emptying the cache: a row rewritten is cached in its new form (a
    /// long value as the pointer the tables hold) for new snapshots and
    /// never for older ones, a deleted one is dropped, and rows the
    /// write-out did not touch stay.
    #[test]
    fn a_write_out_rewrites_the_cached_rows_it_changed() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("shard-0.redb"), 1 << 20);
        for k in ["a", "b", "c", "d"] {
            store.commit(put(k, "1"), false).unwrap();
        }
        store.freeze_now().unwrap();
        settle(&store);
        for k in ["a", "b", "c", "d", "a", "b", "c", "d"] {
            assert_eq!(get(&store, k).as_deref(), Some("1"));
        }
        let rows = &store.core.rows;
        let old_epoch = rows.epoch();
        let before = store.snapshot(0).unwrap();
        // A string row long enough for the value log: type byte first.
        let long = format!("\u{1}{}", "v".repeat(600));
        store.commit(put("a", "22"), false).unwrap();
        store.commit(put("b", &long), false).unwrap();
        let del = vec![RowOp::Del(Table::Meta, b"c".to_vec())];
        written_out(&store, del);
        let cached = |epoch, k: &str| rows.get(epoch, Table::Meta, k.as_bytes());
        let epoch = rows.epoch();
        assert_eq!(cached(epoch, "a"), Some(b"22".to_vec()));
        let pointer = cached(epoch, "b").expect("b's new row");
        assert!(pointer.len() < 100, "the pointer, not the value");
        assert_eq!(cached(epoch, "c"), None);
        assert_eq!(cached(epoch, "d"), Some(b"1".to_vec()));
        // The old snapshot's epoch gets only what its tables hold.
        assert_eq!(cached(old_epoch, "a"), None);
        assert_eq!(cached(old_epoch, "b"), None);
        assert_eq!(cached(old_epoch, "d"), Some(b"1".to_vec()));
        assert_eq!(get(&store, "a").as_deref(), Some("22"));
        assert_eq!(get(&store, "b").as_deref(), Some(long.as_str()));
        assert_eq!(get(&store, "c"), None);
        assert_eq!(get(&store, "d").as_deref(), Some("1"));
        for k in ["a", "b", "c", "d"] {
            let old = before.get(Table::Meta, k.as_bytes()).unwrap();
            assert_eq!(old, Some(b"1".to_vec()), "{k} as the old snapshot saw it");
        }
        // A deleted range (FLUSHALL) empties the cache.
        get(&store, "d");
        assert!(store.row_cache_bytes() > 0);
        store
            .commit(vec![RowOp::Clear(Table::Meta)], false)
            .unwrap();
        store.freeze_now().unwrap();
        settle(&store);
        assert_eq!(store.row_cache_bytes(), 0);
        assert_eq!(get(&store, "d"), None);
    }

    /// With the key filter built, every row the tables hold is still read
    /// (rows written before the build, and rows the background writer put
    /// in after it), rows deleted since read as gone, and absent rows as
    /// absent; a filter that has taken enough new rows is rebuilt.
    #[test]
    fn reads_through_the_key_filter_find_every_row() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("shard-0.redb"), 64 << 10);
        let value = "v".repeat(500);
        for i in 0..200 {
            store
                .commit(put(&format!("old{i}"), &value), false)
                .unwrap();
        }
        settle(&store);
        assert_eq!(store.key_filter_bytes(), 0);
        store.build_key_filter();
        wait_for("no filter built", || store.key_filter_bytes() > 0);
        for i in 0..200 {
            store
                .commit(put(&format!("new{i}"), &value), false)
                .unwrap();
        }
        store
            .commit(vec![RowOp::Del(Table::Meta, b"old7".to_vec())], false)
            .unwrap();
        store.freeze_now().unwrap();
        settle(&store);
        let r = store.snapshot(0).unwrap();
        assert!(r.filtered(), "the snapshot reads through the filter");
        for i in 0..200 {
            let want = (i != 7).then(|| value.clone());
            assert_eq!(get(&store, &format!("old{i}")), want, "old{i}");
            assert_eq!(get(&store, &format!("new{i}")).as_ref(), Some(&value));
        }
        assert_eq!(get(&store, "absent"), None);
        // Enough new rows for a rebuild (the filter is sized for at least
        // 65,536 rows in this test): afterwards a new filter answers, as
        // right.
        let first = Arc::as_ptr(store.core.filter.lock().as_ref().unwrap());
        let ops: Vec<RowOp> = (0..70_000)
            .map(|i| RowOp::Put(Table::Sub, format!("m{i}").into_bytes(), Vec::new()))
            .collect();
        written_out(&store, ops);
        wait_for("no rebuild", || {
            Arc::as_ptr(store.core.filter.lock().as_ref().unwrap()) != first
        });
        let r = store.snapshot(0).unwrap();
        for i in (0..70_000).step_by(997) {
            let k = format!("m{i}");
            assert_eq!(r.get(Table::Sub, k.as_bytes()).unwrap(), Some(Vec::new()));
        }
        assert_eq!(get(&store, "old8").as_ref(), Some(&value));
        assert_eq!(get(&store, "old7"), None);
    }

    /// A table's row count read through buffers over the tables: rows the
    /// buffers overwrite, delete, add, or add and delete again are each
    /// counted once or not at all, as a scan counts them.
    #[test]
    fn row_counts_see_through_the_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("shard-0.redb"), 16 << 10);
        let big = "x".repeat(1000);
        for i in 0..100 {
            store.commit(put(&format!("a{i}"), &big), false).unwrap();
        }
        // The background writer takes the frozen buffers into the tables.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while store.buffered_bytes() > 8 << 10 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let del = |k: &str| vec![RowOp::Del(Table::Meta, k.as_bytes().to_vec())];
        store.commit(put("a1", "again"), false).unwrap();
        store.commit(del("a2"), false).unwrap();
        store.commit(put("b1", "new"), false).unwrap();
        store.commit(put("b2", "gone"), false).unwrap();
        store.commit(del("b2"), false).unwrap();
        store.commit(del("c"), false).unwrap();
        let r = store.snapshot(0).unwrap();
        let mut scanned = 0;
        r.scan(Table::Meta, &[], None, false, &mut |_, _| {
            scanned += 1;
            true
        })
        .unwrap();
        assert_eq!(scanned, 100);
        assert_eq!(r.rows(Table::Meta).unwrap(), 100);
    }

    /// After a crash the tables plus the log's whole records give every
    /// commit up to the torn one, whether its buffer had reached the
    /// tables or not; the torn record and nothing else is lost.
    #[test]
    fn recovery_keeps_whole_records_and_drops_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-0.redb");
        // Small buffers: many freeze and reach the tables on the way.
        let store = open(&path, 64 << 10);
        let value = "v".repeat(1000);
        for i in 0..300 {
            store
                .commit(put(&format!("k{i:03}"), &value), i % 7 == 0)
                .unwrap();
        }
        // The writer idle and room in the active buffer, so that the last
        // two commits stay in the log alone.
        while store.core.frozen_bytes.load(Ordering::Acquire) > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if store.core.view.lock()[0].bytes() > 8 << 10 {
            store
                .commit(put("filler", &"f".repeat(16 << 10)), false)
                .unwrap();
            while store.core.frozen_bytes.load(Ordering::Acquire) > 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        let gen = store.wal.lock().gen();
        store.commit(put("last", "whole"), true).unwrap();
        store.commit(put("torn", "cut"), true).unwrap();
        assert_eq!(
            store.wal.lock().gen(),
            gen,
            "the last commits froze a buffer"
        );
        // Where the records end (a reused file may hold more past them).
        let written = store.wal.lock().len();
        // A crash: the files as they are, the last record cut short.
        let crashed = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let p = entry.unwrap().path();
            std::fs::copy(&p, crashed.path().join(p.file_name().unwrap())).unwrap();
        }
        drop(store);
        let newest = wal::path(crashed.path(), "shard-0", gen);
        let (records, _) = wal::read(&newest, gen).unwrap();
        assert_eq!(records.last().unwrap().ops, put("torn", "cut"));
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&newest)
            .unwrap();
        f.set_len(written - 2).unwrap();
        drop(f);
        let store = open(&crashed.path().join("shard-0.redb"), 64 << 10);
        for i in 0..300 {
            assert_eq!(
                get(&store, &format!("k{i:03}")).as_deref(),
                Some(value.as_str()),
                "k{i:03}"
            );
        }
        assert_eq!(get(&store, "last").as_deref(), Some("whole"));
        assert_eq!(get(&store, "torn"), None);
        // The log was put into the tables: the file alone holds it now.
        let tables = ReadCtx::begin(store.db(), 0).unwrap();
        assert_eq!(
            tables.get(Table::Meta, b"last").unwrap(),
            Some(b"whole".to_vec())
        );
    }

    /// A string's `meta` row large enough for the value log.
    fn big_row(fill: u8) -> Vec<u8> {
        crate::storage::Meta::string(vec![fill; 2000], 0).encode()
    }

    /// Puts [`big_row`]`(fill)` at `k`.
    fn put_big(k: &str, fill: u8) -> Vec<RowOp> {
        vec![RowOp::Put(
            Table::Meta,
            k.as_bytes().to_vec(),
            big_row(fill),
        )]
    }

    /// The `meta` row at `k`, as a new snapshot reads it.
    fn row(store: &Arc<Store>, k: &str) -> Option<Vec<u8>> {
        store
            .snapshot(0)
            .unwrap()
            .get(Table::Meta, k.as_bytes())
            .unwrap()
    }

    /// The value log files in `dir` and their sizes. The background
    /// writer may delete one between the listing and its size: it is left
    /// out, as gone.
    fn value_log_files(dir: &Path) -> Vec<(String, u64)> {
        let mut out: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".vlog"))
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                Some((name, e.metadata().ok()?.len()))
            })
            .collect();
        out.sort();
        out
    }

    /// Large string rows go into the tables as pointers into the value
    /// log and read back whole; overwriting them leaves files dead, which
    /// are collected while a snapshot taken before still reads its
    /// values through them; all of it survives reopening.
    #[test]
    fn large_values_live_in_the_value_log_and_their_space_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-0.redb");
        let store = open(&path, 64 << 10);
        for k in 0..8 {
            store.commit(put_big(&format!("k{k}"), 0), false).unwrap();
        }
        written_out(&store, put("small", "s"));
        let before = store.snapshot(0).unwrap();
        {
            // In the tables: a pointer for each large row, carrying the
            // row's head; the small one as it is.
            let txn = store.db().begin_read().unwrap();
            let meta = txn.open_table(Table::Meta.def()).unwrap();
            let stored = meta.get(&b"k3"[..]).unwrap().unwrap().value().to_vec();
            assert_eq!(
                (stored.len(), stored[0]),
                (super::super::vlog::POINTER_LEN, 0x0E)
            );
            let head = super::super::vlog::pointed_head(&stored).unwrap();
            assert_eq!(head[..], big_row(0)[..super::super::encoding::HEAD_LEN]);
            assert_eq!(meta.get(&b"small"[..]).unwrap().unwrap().value(), b"s");
        }
        for round in 1..=40u8 {
            for k in 0..8 {
                store
                    .commit(put_big(&format!("k{k}"), round), false)
                    .unwrap();
            }
        }
        store.freeze_now().unwrap();
        settle(&store);
        // 41 rounds of 16 KB over 64 KiB files: without collection there
        // would be 11 files.
        wait_for("dead value log files are not collected", || {
            let (bytes, dead) = store.value_log_usage();
            value_log_files(dir.path()).len() <= 3 && bytes <= 3 * (64 << 10) && dead <= bytes
        });
        for k in 0..8 {
            let key = format!("k{k}");
            assert_eq!(
                before.get(Table::Meta, key.as_bytes()).unwrap(),
                Some(big_row(0))
            );
            assert_eq!(row(&store, &key), Some(big_row(40)));
        }
        // Scans resolve pointers too.
        let mut scanned = Vec::new();
        store
            .snapshot(0)
            .unwrap()
            .scan(Table::Meta, b"k", Some(b"l"), true, &mut |k, v| {
                scanned.push((k.to_vec(), v.to_vec()));
                true
            })
            .unwrap();
        assert_eq!(scanned.len(), 8);
        assert!(scanned.iter().all(|(_, v)| *v == big_row(40)));
        drop(before);
        drop(store);
        let store = open(&path, 64 << 10);
        for k in 0..8 {
            assert_eq!(row(&store, &format!("k{k}")), Some(big_row(40)));
        }
        assert_eq!(get(&store, "small").as_deref(), Some("s"));
        // A range deleted (FLUSHDB) counts every value in it dead, and
        // their files go at the next write-out.
        let range = RowOp::DelRange(Table::Meta, b"k".to_vec(), Some(b"l".to_vec()));
        written_out(&store, vec![range]);
        // One file is collected per write-out: write out until only the
        // newest is left.
        store.commit(put_big("z", 1), false).unwrap();
        wait_for("a deleted range's values are not collected", || {
            if value_log_files(dir.path()).len() == 1 {
                return true;
            }
            written_out(&store, put_big("z", 1));
            false
        });
        assert_eq!(row(&store, "k0"), None);
        assert_eq!(row(&store, "z"), Some(big_row(1)));
    }

    /// A commit appends its large rows to the value log and its buffer
    /// holds pointers: the buffer stays small, point reads, scans both
    /// ways and an older snapshot read the rows whole from it, and the
    /// write-out puts the same pointers into the tables (no second copy).
    /// Appends whose buffer never reached the tables are cut away at the
    /// next open, and the log's whole rows put in anew.
    #[test]
    fn buffers_hold_pointers_to_rows_appended_at_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-0.redb");
        let store = open(&path, 64 << 20);
        store.commit(put_big("a", 1), false).unwrap();
        let before = store.snapshot(0).unwrap();
        for k in ["a", "b", "c"] {
            store.commit(put_big(k, 2), false).unwrap();
        }
        assert!(store.buffered_bytes() < 1000, "{}", store.buffered_bytes());
        assert_eq!(row(&store, "b"), Some(big_row(2)));
        assert_eq!(before.get(Table::Meta, b"a").unwrap(), Some(big_row(1)));
        assert_eq!(before.get(Table::Meta, b"b").unwrap(), None);
        for reverse in [false, true] {
            let mut scanned = Vec::new();
            store
                .snapshot(0)
                .unwrap()
                .scan(Table::Meta, b"", None, reverse, &mut |k, v| {
                    scanned.push((k.to_vec(), v == big_row(2)));
                    true
                })
                .unwrap();
            let mut want = vec![
                (b"a".to_vec(), true),
                (b"b".to_vec(), true),
                (b"c".to_vec(), true),
            ];
            if reverse {
                want.reverse();
            }
            assert_eq!(scanned, want);
        }
        store.freeze_now().unwrap();
        settle(&store);
        let appended = value_log_files(dir.path());
        assert_eq!(appended.len(), 1);
        // Four records of a 1-byte key and a row, once each.
        let record = 8 + 1 + big_row(0).len() as u64;
        assert_eq!(appended[0].1, 4 * record);
        assert_eq!(store.value_log_usage(), (4 * record, record));
        assert_eq!(row(&store, "a"), Some(big_row(2)));
        // Appended after the last write-out: in the log and the buffer only.
        store.commit(put_big("d", 3), false).unwrap();
        store.commit(put_big("a", 4), false).unwrap();
        drop(before);
        drop(store);
        assert_eq!(value_log_files(dir.path())[0].1, 6 * record);
        let store = open(&path, 64 << 20);
        let files = value_log_files(dir.path());
        assert_eq!(files[0], (appended[0].0.clone(), 4 * record), "{files:?}");
        assert_eq!(row(&store, "a"), Some(big_row(4)));
        assert_eq!(row(&store, "b"), Some(big_row(2)));
        assert_eq!(row(&store, "d"), Some(big_row(3)));
    }

    /// What a crash can leave of the value log, appends after the last
    /// commit and a file no commit recorded, is cut away at open, and the
    /// committed values read as before.
    #[test]
    fn value_log_appends_no_commit_recorded_are_cut_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-0.redb");
        let store = open(&path, 64 << 10);
        for k in 0..4 {
            store.commit(put_big(&format!("k{k}"), 7), false).unwrap();
        }
        store.freeze_now().unwrap();
        settle(&store);
        drop(store);
        let files = value_log_files(dir.path());
        assert_eq!(files.len(), 1);
        let (name, len) = &files[0];
        {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(dir.path().join(name))
                .unwrap();
            f.write_all(&[0xAB; 3000]).unwrap();
        }
        std::fs::write(dir.path().join("shard-0-v99.vlog"), b"never committed").unwrap();
        let store = open(&path, 64 << 10);
        assert_eq!(value_log_files(dir.path()), vec![(name.clone(), *len)]);
        for k in 0..4 {
            assert_eq!(row(&store, &format!("k{k}")), Some(big_row(7)));
        }
        // Appends go on from the cut.
        written_out(&store, put_big("k9", 9));
        drop(store);
        let store = open(&path, 64 << 10);
        assert_eq!(row(&store, "k9"), Some(big_row(9)));
        assert_eq!(row(&store, "k0"), Some(big_row(7)));
    }

    /// A write-out that cannot be done when the store closes is given up
    /// rather than retried for ever (close waits for the writer), and
    /// the log puts its rows into the tables at the next open.
    #[test]
    fn close_gives_up_a_failing_write_out_and_the_log_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-0.redb");
        let store = open(&path, 64 << 20);
        store.commit(put_big("k", 3), false).unwrap();
        store.core.fail_write_outs.store(true, Ordering::Relaxed);
        store.freeze_now().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(store);
        let store = open(&path, 64 << 20);
        assert_eq!(row(&store, "k"), Some(big_row(3)));
    }

    /// A buffer of new rows is frozen at a quarter of the cap, at half
    /// while the writer is busy; one of rewrites at half.
    #[test]
    fn a_buffer_of_new_rows_is_frozen_at_a_quarter_of_the_cap() {
        let (new_rows, rewrites) = (|| false, || true);
        assert!(!Limits::freezes(1000, 249, false, new_rows));
        assert!(Limits::freezes(1000, 250, false, new_rows));
        assert!(!Limits::freezes(1000, 499, true, new_rows));
        assert!(Limits::freezes(1000, 500, true, new_rows));
        assert!(!Limits::freezes(1000, 499, false, rewrites));
        assert!(Limits::freezes(1000, 500, false, rewrites));
    }

    /// A buffer whose commits mostly rewrite rows it holds stays active
    /// past a quarter of the cap (up to half); one taking new rows is
    /// frozen at a quarter.
    #[test]
    fn a_buffer_of_rewrites_stays_active_until_half_the_cap() {
        const CAP: usize = 1 << 20;
        let key = |i: usize| format!("key:{i:06}");
        // Commits of new rows, each followed by `rewrites` commits of rows
        // already written, until the active buffer passes `until` bytes or
        // a freeze (a new log generation) ends it; the bytes it reached.
        let run = |rewrites: usize, until: usize| -> (usize, bool) {
            let dir = tempfile::tempdir().unwrap();
            let store = open(&dir.path().join("s.redb"), CAP);
            let gen = store.wal.lock().gen();
            let mut added = 0;
            let mut old = 0;
            loop {
                // Held, so that its bytes can be read once it is frozen
                // (the writer may have put it into the tables by then).
                let active = store.core.view.lock()[0].clone();
                store.commit(put(&key(added), "v"), false).unwrap();
                added += 1;
                for _ in 0..rewrites {
                    old = (old + 7) % added;
                    store.commit(put(&key(old), "w"), false).unwrap();
                }
                if store.wal.lock().gen() != gen {
                    return (active.bytes(), true);
                }
                let bytes = active.bytes();
                if bytes >= until {
                    return (bytes, false);
                }
            }
        };
        let (bytes, froze) = run(0, CAP);
        assert!(
            froze && (CAP / 4..CAP / 4 + 1024).contains(&bytes),
            "{bytes}"
        );
        // Three rewrites a new row: past a quarter, not frozen, and then
        // frozen at half.
        let (bytes, froze) = run(3, CAP / 3);
        assert!(!froze, "froze at {bytes}");
        let (bytes, froze) = run(3, CAP);
        assert!(
            froze && (CAP / 2..CAP / 2 + 1024).contains(&bytes),
            "{bytes}"
        );
    }

    /// Rows read ahead answer the view's reads of their range, under
    /// what the buffers hold, and rows the range lacks read as absent;
    /// a window cut short by its byte bound leaves the rest to the tables.
    #[test]
    fn rows_read_ahead_answer_reads_of_their_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-0.redb");
        let store = open(&path, 64 << 20);
        let sub = |k: &str, v: &str| vec![RowOp::Put(Table::Sub, k.into(), v.into())];
        let big = "x".repeat(100 << 10);
        for k in ["a2", "a3", "a4"] {
            store.commit(sub(k, &big), false).unwrap();
        }
        for (k, v) in [("a1", "1"), ("a6", "6"), ("b", "b")] {
            store.commit(sub(k, v), false).unwrap();
        }
        store.freeze_now().unwrap();
        settle(&store);
        store.commit(sub("a1", "new"), false).unwrap();
        let view = store.snapshot(0).unwrap();
        view.cache_ahead(Table::Sub, b"a", b"a9").unwrap();
        let read = |k: &str| {
            view.get(Table::Sub, k.as_bytes())
                .unwrap()
                .map(|v| String::from_utf8(v).unwrap())
        };
        assert_eq!(read("a1").as_deref(), Some("new"));
        for k in ["a2", "a3", "a4"] {
            assert_eq!(read(k).as_deref(), Some(big.as_str()));
        }
        assert_eq!(read("a5"), None);
        // Past the window's bytes: read from the tables.
        assert_eq!(read("a6").as_deref(), Some("6"));
        assert_eq!(read("b").as_deref(), Some("b"));
    }
}

//! The write buffer of a shard: the rows its recent commits changed, kept
//! in memory in key order until the background writer has put them into
//! the redb tables (see `store`).
//!
//! A [`Buffer`] is multi-versioned: every row keeps the value each commit
//! gave it, tagged with the commit's sequence number, for as long as a
//! snapshot may still need it. A reader at sequence `s` sees, of each row,
//! the newest version no newer than `s`, so a snapshot taken between two
//! commits keeps reading the state it began at while the shard goes on
//! writing: nobody sees half of a batch, and a command's several reads agree.
//!
//! Deleting a range of rows (FLUSHALL's clear of a table) is one range
//! tombstone, which hides the rows of the layers below (older buffers, the
//! tables). Rows of the same buffer inside the range get a deleted version
//! at the range's sequence, so within one buffer a row's own versions are
//! always the whole story.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::run::Run;
use super::tables::{RowOp, Table};

/// A row as a layer holds it: its value, or `None` where the layer deleted
/// it.
pub type Entry = Option<Vec<u8>>;

/// Deleted rows from a start key up to an end key (exclusive; `None`: to
/// the table's end).
pub type KeyRange = (Vec<u8>, Option<Vec<u8>>);

/// What a row costs beyond its bytes (the map's entry and index slot, the
/// ordered index's slot, versions): counted so the cap bounds real
/// memory, not just payload. (144 while a `RowKey` was 32 bytes and the
/// map held the versions in its own slots.)
const ROW_OVERHEAD: usize = 168;

/// Longest value a row's entry holds inline ([`Stored::Short`]).
const SHORT: usize = 22;

/// What [`Buffer::visit`] hands each row to: its key and value (`None`
/// deleted); false stops the walk.
pub type RowVisitor<'v> = dyn FnMut(&[u8], Option<&[u8]>) -> bool + 'v;

/// A row as [`Buffer::walk`] finds it: in a packed run (key and value,
/// `None` deleted), or in the row maps.
enum Seen<'a> {
    Packed(&'a [u8], Option<&'a [u8]>),
    Row(&'a RowKey, &'a Stored),
}

/// A version's value as the buffer keeps it. A short one (a string's
/// meta row with its value, a counter, a list element, a score) sits in
/// the row's entry: reading it, or dropping it once no reader can see
/// it, then costs no cache miss on an allocation of its own, as a `Vec`
/// did on every read and every rewrite of a row.
/// The row cache keeps its rows the same way.
#[derive(Debug, Clone)]
pub enum Stored {
    /// Deleted.
    Gone,
    /// A value of up to [`SHORT`] bytes, and its length.
    Short(u8, [u8; SHORT]),
    /// A longer value.
    Long(Box<[u8]>),
}

// As small as the `Entry` it replaces.
const _: () = assert!(std::mem::size_of::<Stored>() == 24);

impl Stored {
    fn new(e: Entry) -> Stored {
        match e {
            None => Stored::Gone,
            Some(v) if v.len() <= SHORT => Stored::of(&v),
            Some(v) => Stored::Long(v.into_boxed_slice()),
        }
    }

    /// A copy of a row as a layer holds it (`None`: deleted).
    pub(crate) fn from_entry(e: Option<&[u8]>) -> Stored {
        e.map_or(Stored::Gone, Stored::of)
    }

    /// A copy of the value `v`.
    pub(crate) fn of(v: &[u8]) -> Stored {
        if v.len() <= SHORT {
            let mut bytes = [0; SHORT];
            bytes[..v.len()].copy_from_slice(v);
            Stored::Short(v.len() as u8, bytes)
        } else {
            Stored::Long(v.into())
        }
    }

    /// Bytes a value of `len` bytes takes outside the entry (none for a
    /// short one, which sits in it).
    pub(crate) fn heap_bytes(len: usize) -> usize {
        if len <= SHORT {
            0
        } else {
            len
        }
    }

    /// The value, `None` if deleted.
    pub(crate) fn as_deref(&self) -> Option<&[u8]> {
        match self {
            Stored::Gone => None,
            Stored::Short(len, bytes) => Some(&bytes[..*len as usize]),
            Stored::Long(v) => Some(v),
        }
    }

    fn to_entry(&self) -> Entry {
        self.as_deref().map(<[u8]>::to_vec)
    }
}

/// The versions of one row, newest first.
#[derive(Debug)]
struct Versions {
    seq: u64,
    value: Stored,
    /// The version before `value`, while some reader can still see it.
    /// Kept here rather than in `older`: a row rewritten while no reader
    /// is behind keeps exactly one older version, and reaching it in an
    /// allocation of its own was a cache miss per write (5% of the
    /// server's time under INCR at pipeline 16).
    prev: Option<(u64, Stored)>,
    /// Versions before `prev` still visible to some snapshot, newest
    /// first; rarely any (a reader must be behind two rewrites), so boxed:
    /// a pointer, not a vector's three words, in every row's entry. (The
    /// box is that pointer: clippy's objection to boxing a vector is for
    /// where the size of the field does not matter.)
    #[allow(clippy::box_collection)]
    older: Option<Box<Vec<(u64, Stored)>>>,
}

// The map's entry (hash, key, versions) is then two cache lines.
const _: () = assert!(std::mem::size_of::<Versions>() == 72);

/// Bytes of a map entry: its hash, key and versions, as `indexmap` lays
/// out its entries today (not a promise of its API). Only `upsert`'s
/// prefetch of the next slot uses it, and a wrong size there would only
/// ask for the wrong line.
const ENTRY: usize = 8 + std::mem::size_of::<RowKey>() + std::mem::size_of::<Versions>();

/// What a version counts toward the buffer's bytes.
fn version_size(e: &Stored) -> isize {
    e.as_deref().map_or(0, <[u8]>::len) as isize + 16
}

impl Versions {
    fn new(seq: u64, value: Stored) -> Versions {
        Versions {
            seq,
            value,
            prev: None,
            older: None,
        }
    }

    /// The version a reader at `s` sees; `None` if every version is newer.
    fn at(&self, s: u64) -> Option<&Stored> {
        if self.seq <= s {
            return Some(&self.value);
        }
        let (q, e) = self.prev.as_ref()?;
        if *q <= s {
            return Some(e);
        }
        self.older
            .iter()
            .flat_map(|o| o.iter())
            .find(|(q, _)| *q <= s)
            .map(|(_, e)| e)
    }

    /// Adds the version of commit `seq`, dropping versions no reader at or
    /// after `keep` can see; returns the change in bytes held.
    fn push(&mut self, seq: u64, value: Stored, keep: u64) -> isize {
        if self.seq == seq {
            let delta = version_size(&value) - version_size(&self.value);
            self.value = value;
            return delta;
        }
        let mut delta = version_size(&value);
        let old = std::mem::replace(&mut self.value, value);
        let old_seq = std::mem::replace(&mut self.seq, seq);
        let before = self.prev.replace((old_seq, old));
        if old_seq <= keep {
            // The usual case: no reader is behind the version replaced,
            // so it is the only older one any reader can still see.
            delta -= before.as_ref().map_or(0, |(_, e)| version_size(e));
            for (_, e) in self.older.take().into_iter().flat_map(|o| *o) {
                delta -= version_size(&e);
            }
            return delta;
        }
        if let Some(before) = before {
            self.older
                .get_or_insert_with(Box::default)
                .insert(0, before);
        }
        // Every version newer than `keep` stays, and the newest at or
        // below it (what a reader at `keep` sees).
        if let Some(older) = self.older.as_mut() {
            if let Some(i) = older.iter().position(|(q, _)| *q <= keep) {
                for (_, e) in older.drain(i + 1..) {
                    delta -= version_size(&e);
                }
            }
        }
        delta
    }
}

/// Rows deleted from `start` up to `end` (to the table's end if `None`).
#[derive(Debug, Clone)]
struct RangeDel {
    seq: u64,
    start: Vec<u8>,
    end: Option<Vec<u8>>,
}

/// Whether `key` lies in `[start, end)`.
pub fn in_range(key: &[u8], start: &[u8], end: Option<&[u8]>) -> bool {
    key >= start && end.is_none_or(|e| key < e)
}

/// Longest row key a buffer holds inline (a `RowKey` is then 48 bytes): a
/// meta row of a key up to 42 bytes long (the row adds a 4-byte namespace
/// and slot prefix), a member or field of 20 bytes of a collection whose
/// key is up to 10 bytes long (a `sub` row adds 16 bytes to the two).
/// At 22 bytes, redis-benchmark's `counter:<12 digits>` and its list's
/// elements were shared keys, and every comparison of a B-tree search a
/// miss on another allocation: callgrind's simulated last-level misses
/// under INCR at pipeline 16 went down 6% with 30 bytes, under LPUSH 19%,
/// and instructions 2-3%. At 30, the members of redis-benchmark's SADD,
/// HSET and ZADD (41-42 byte rows) were still shared, and their compares
/// were `memcmp` at 8.8% of the server's samples under SADD at pipeline
/// 16; at 46 the three took ~11% less CPU a request (three alternated
/// rounds), and short keys' commands (INCR, LPUSH) ~3% more, their slots
/// being larger.
const INLINE: usize = 46;

/// A row key as a buffer holds it. A short key is kept inside the hash
/// entry and the ordered index's node, so a probe compares it without a
/// cache miss on a separate allocation: under GET at pipeline 16 on
/// 100,000 keys, that comparison was 10% of the server's time. A longer
/// key is shared by the map and the index.
/// The row cache keys its rows the same way.
#[derive(Clone, Debug)]
pub enum RowKey {
    /// A key of up to [`INLINE`] bytes, and its length.
    Inline(u8, [u8; INLINE]),
    /// A longer key.
    Shared(Arc<[u8]>),
}

// Both the map's entry and the ordered index's node hold one: kept at
// three quarters of a cache line.
const _: () = assert!(std::mem::size_of::<RowKey>() == 48);

impl RowKey {
    /// A copy of `key`.
    pub(crate) fn new(key: &[u8]) -> RowKey {
        match <[u8; INLINE]>::try_from(key) {
            Ok(whole) => RowKey::Inline(INLINE as u8, whole),
            Err(_) if key.len() < INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..key.len()].copy_from_slice(key);
                RowKey::Inline(key.len() as u8, bytes)
            }
            Err(_) => RowKey::Shared(Arc::from(key)),
        }
    }

    /// Bytes a key of `len` bytes takes outside the slot holding it (none
    /// for an inline one).
    pub(crate) fn heap_bytes(len: usize) -> usize {
        if len <= INLINE {
            0
        } else {
            len
        }
    }

    /// The key's bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            RowKey::Inline(len, bytes) => &bytes[..*len as usize],
            RowKey::Shared(key) => key,
        }
    }
}

// Equality, order and hash are the bytes', so that the map and the set
// can be probed with a plain `&[u8]` (`Borrow`).
impl std::borrow::Borrow<[u8]> for RowKey {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for RowKey {
    fn eq(&self, other: &RowKey) -> bool {
        match (self, other) {
            (RowKey::Inline(n, a), RowKey::Inline(m, b)) => n == m && a == b,
            _ => self.as_slice() == other.as_slice(),
        }
    }
}

impl Eq for RowKey {}

impl PartialOrd for RowKey {
    fn partial_cmp(&self, other: &RowKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RowKey {
    #[inline]
    fn cmp(&self, other: &RowKey) -> std::cmp::Ordering {
        match (self, other) {
            (RowKey::Inline(n, a), RowKey::Inline(m, b)) => padded_cmp(a, b).then(n.cmp(m)),
            _ => self.as_slice().cmp(other.as_slice()),
        }
    }
}

/// Byte order of two inline keys, by their zero-padded bytes, sixteen at
/// a time; ties go to the lengths. That is the keys' byte order: where one
/// key is a prefix of the other, the longer one's extra bytes meet the
/// shorter one's padding, which is never greater, and if those bytes are
/// all zero the lengths decide. Inserting a new row into a buffer's
/// ordered set compares its key with twenty others or so, and a call into
/// `memcmp` for each was most of the insert's comparing.
#[inline]
fn padded_cmp(a: &[u8; INLINE], b: &[u8; INLINE]) -> std::cmp::Ordering {
    // Big-endian 16-byte words: bytes 0..16, 16..32, then 30..46
    // (overlapping bytes already compared equal change nothing).
    let word = |k: &[u8; INLINE], at: usize| {
        u128::from_be_bytes(k[at..at + 16].try_into().expect("16 bytes"))
    };
    word(a, 0)
        .cmp(&word(b, 0))
        .then_with(|| word(a, 16).cmp(&word(b, 16)))
        .then_with(|| word(a, INLINE - 16).cmp(&word(b, INLINE - 16)))
}

impl std::hash::Hash for RowKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

/// Per table: rows by key (point reads and writes, the common case, cost
/// one hash probe), and the keys in order, each with its row's place in
/// the map's entries, so a scan and the background writer reach a row
/// without hashing its key. The map is an `IndexMap`, whose entries lie
/// in a vector in the order rows arrived: rows pushed one after another
/// (a list's elements) are neighbours there too, and a scan over them
/// reads consecutive memory. (With a hash map of rows, the lookup of each
/// key the ordered set gave was ~20% of the server's time under LRANGE.)
/// Rewriting a row already here touches only the map.
///
/// The map hashes with foldhash, randomly seeded per map, not the standard
/// SipHash: hashing (and rehashing as a buffer grows) was 7% of the
/// server's time under LPUSH at pipeline 16; foldhash keeps a random seed,
/// so clients still cannot choose keys that collide.
///
/// A row new to the buffer goes into the ordered index only when some
/// scan or the background writer first needs the order: the map's entries
/// lie in arrival order and are never removed one by one, so the rows not
/// yet indexed are exactly those past the index's length, and they are
/// sorted and merged in together ([`settle`]). Inserted one at a time as
/// they came, each was a descent of the tree with a cache miss per level
/// (about half of `upsert`'s samples under INCR at pipeline 16), paid by
/// the shard's commit whether or not anything ever scanned that buffer.
#[derive(Debug, Default)]
struct Tables {
    rows: [Rows; 6],
    order: [parking_lot::RwLock<Order>; 6],
    ranges: [Vec<RangeDel>; 6],
}

/// A table's keys in order, each with its row's place in the map's
/// entries; it indexes the map's first `len()` entries (see [`Tables`]).
type Order = BTreeMap<RowKey, u32>;

/// Row writes a buffer took and how many of them added a row, with the
/// two counts as they stood at a mark. Only the shard's committing
/// thread changes them (under the log's lock), so relaxed atomics do.
#[derive(Debug, Default)]
struct Growth {
    writes: AtomicU64,
    added: AtomicU64,
    mark: std::sync::OnceLock<(u64, u64)>,
}

/// Row writes since the mark below which [`Growth::mostly_rewrites`]
/// says no: too few to tell a load apart.
const GROWTH_SAMPLE: u64 = 1024;

impl Growth {
    fn took(&self, writes: usize, added: usize) {
        self.writes.fetch_add(writes as u64, Ordering::Relaxed);
        self.added.fetch_add(added as u64, Ordering::Relaxed);
    }

    fn mark(&self) {
        self.mark.get_or_init(|| {
            (
                self.writes.load(Ordering::Relaxed),
                self.added.load(Ordering::Relaxed),
            )
        });
    }

    fn mostly_rewrites(&self) -> bool {
        let Some(&(writes, added)) = self.mark.get() else {
            return false;
        };
        let writes = self.writes.load(Ordering::Relaxed) - writes;
        let added = self.added.load(Ordering::Relaxed) - added;
        writes >= GROWTH_SAMPLE && added * 2 < writes
    }
}

impl Tables {
    /// Rows held, over every table.
    fn row_count(&self) -> usize {
        self.rows.iter().map(|r| r.len()).sum()
    }

    /// Table `i`'s ordered index, holding every row of its map. Under the
    /// tables' read lock the map cannot change; the rows it took since the
    /// last ordered read are indexed here first, by whichever reader (or
    /// the background writer) comes first.
    fn order(&self, i: usize) -> parking_lot::RwLockReadGuard<'_, Order> {
        let order = self.order[i].read_recursive();
        if order.len() == self.rows[i].len() {
            return order;
        }
        drop(order);
        let mut order = self.order[i].write();
        settle(&mut order, &self.rows[i]);
        parking_lot::RwLockWriteGuard::downgrade(order)
    }
}

/// Puts into `order` the rows of `rows` it does not index yet (those past
/// its length), sorted first: into an empty index, or one not much larger
/// than them, as one merge that builds the tree bottom up; into a larger
/// one, one at a time (a scan of a buffer being written, such as each
/// batch's pops, finds the few rows the last commit added).
fn settle(order: &mut Order, rows: &Rows) {
    let new = sorted_from(rows, order.len());
    if new.is_empty() {
        return;
    }
    if new.len() * 8 >= order.len() {
        order.append(&mut new.into_iter().collect());
    } else {
        order.extend(new);
    }
}

/// The keys of `rows` from position `from` on, each with its position,
/// sorted by key.
fn sorted_from(rows: &Rows, from: usize) -> Vec<(RowKey, u32)> {
    let mut sorted = Vec::new();
    sort_from(rows, from, &mut sorted);
    sorted
}

/// [`sorted_from`] into `sorted` (emptied first).
fn sort_from(rows: &Rows, from: usize, sorted: &mut Vec<(RowKey, u32)>) {
    sorted.clear();
    let Some(new) = rows.get_range(from..) else {
        return;
    };
    // Exactly: `extend` grows a vector to twice its capacity at least, and a kept
    // vector grown past `SORTED_KEPT` that way was dropped after the pass
    // and grown from nothing again in the next, into fresh pages.
    sorted.reserve_exact(new.len());
    sorted.extend(new.keys().zip(from..).map(|(k, at)| {
        (
            k.clone(),
            u32::try_from(at).expect("a buffer holds under 2^32 rows"),
        )
    }));
    sort_keys(sorted);
}

/// Rows of room a thread keeps for sorting (see `SORTED`): 7 MiB, more
/// than a write-out at the default cap takes (83k rows under LPUSH).
/// Bigger write-outs allocate theirs, as all did before.
const SORTED_KEPT: usize = 1 << 17;

thread_local! {
    /// The vector a write-out's (or a packing's) pass sorted a table's
    /// keys in, kept for the thread's next pass: allocated afresh, its
    /// 56 bytes a row (4.6 MB for a write-out of 83k rows) came from
    /// pages the kernel zeroed again each time (`clear_page_erms`, 2.6-3.2%
    /// of the server's samples under LPUSH -c 50 -P 16). It holds no row
    /// between passes, and is kept up to [`SORTED_KEPT`] rows.
    static SORTED: std::cell::Cell<Vec<(RowKey, u32)>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Sorts a table's new keys with their positions.
///
/// Keys often come in runs already in order: a batch's rows reach the
/// buffer in key order, so a list's pushes come as one run per batch,
/// each run after the last for RPUSH (one run in all), each below the
/// last for LPUSH; likewise a stream's entries, sequential counters.
/// Those take a pass of comparisons or two (and, for runs each below the
/// last, the whole reversed and each run turned back), where the
/// quicksort took n log n comparisons of keys sharing a long prefix
/// (LPUSH -c 50 -P 16: write-outs of 83k rows in runs of ~32, the sort
/// 3.1% of the server's samples). The standard library's merge sort does
/// not help there: it takes runs that short for unsorted, and copies.
/// Keys in any other order (random members, two lists' pushes
/// interleaved) are found out within the first runs, or at the last, and
/// quicksorted.
fn sort_keys(keys: &mut [(RowKey, u32)]) {
    let n = keys.len();
    // Where the run before this one began, and where this one did.
    let (mut before, mut start) = (None, 0);
    for i in 1..=n {
        let ended = i == n || keys[i].0 < keys[i - 1].0;
        if !ended {
            continue;
        }
        // The run that ends here lies below the one before it, or the
        // keys are in no order this pass knows.
        if before.is_some_and(|b: usize| keys[i - 1].0 > keys[b].0) {
            keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            return;
        }
        (before, start) = (Some(start), i);
    }
    if before == Some(0) {
        // One run: in order already.
        return;
    }
    // Reversed whole, the runs lie in order, each backwards: a run ends
    // where the next key is above its last.
    keys.reverse();
    let mut start = 0;
    for i in 1..=n {
        if i == n || keys[i].0 > keys[i - 1].0 {
            keys[start..i].reverse();
            start = i;
        }
    }
}

/// A table's rows in a buffer, by key (see [`Tables`]).
type Rows = indexmap::IndexMap<RowKey, Versions, foldhash::fast::RandomState>;

/// One write buffer: the active one takes a shard's commits; once full it
/// is frozen, and the background writer puts it into the tables.
#[derive(Debug)]
pub struct Buffer {
    tables: parking_lot::RwLock<Tables>,
    /// The buffer's final state, packed, once the packer (see `store`) has
    /// replaced a frozen buffer with it in the view ([`Buffer::packed`]);
    /// `tables` is then empty. Every reader of a packed buffer reads past
    /// its last commit, so its newest versions are all it needs.
    dense: Option<Run>,
    bytes: AtomicUsize,
    growth: Growth,
    /// The sequence number of the last commit applied.
    last_seq: AtomicU64,
    /// The generation of the shard log holding the commits this buffer
    /// took: once the buffer is in the tables, that log file goes.
    pub gen: u64,
}

impl Buffer {
    /// An empty buffer for the commits of log generation `gen`.
    pub fn new(gen: u64) -> Buffer {
        Buffer {
            tables: Default::default(),
            dense: None,
            bytes: AtomicUsize::new(0),
            growth: Growth::default(),
            last_seq: AtomicU64::new(0),
            gen,
        }
    }

    /// An empty buffer for the commits of log generation `gen`, whose row
    /// maps start with room for as many rows as `like` (the buffer it
    /// follows) holds: a shard's buffers take like loads one after
    /// another, and a map grown from empty rehashes every row at each
    /// doubling, into fresh memory the system must fault in and zero.
    pub fn sized_like(gen: u64, like: &Buffer) -> Buffer {
        let b = Buffer::new(gen);
        {
            let like = like.tables.read_recursive();
            let mut t = b.tables.write();
            for (rows, old) in t.rows.iter_mut().zip(&like.rows) {
                rows.reserve(old.len());
            }
        }
        b
    }

    /// The buffer emptied, for reuse: its rows are freed here (the
    /// background writer's thread, not a shard's, whichever reader let go
    /// of it last) and each row map keeps room for as many rows as it
    /// held, memory already faulted in for the next like load, but no
    /// more: a burst's size is not held for good.
    pub fn emptied(mut self) -> Buffer {
        let t = self.tables.get_mut();
        for i in 0..t.rows.len() {
            let held = t.rows[i].len();
            t.rows[i].clear();
            if t.rows[i].capacity() > 2 * held {
                t.rows[i].shrink_to(held);
            }
            t.order[i].get_mut().clear();
            t.ranges[i].clear();
        }
        self.bytes = AtomicUsize::new(0);
        self.growth = Growth::default();
        self
    }

    /// This buffer, emptied, as the one taking the commits of log
    /// generation `gen`.
    pub fn renumbered(mut self, gen: u64) -> Buffer {
        debug_assert_eq!(self.bytes(), 0, "only an emptied buffer is reused");
        self.gen = gen;
        *self.last_seq.get_mut() = 0;
        self
    }

    /// This frozen buffer's final state packed into a [`Run`], as a buffer
    /// that answers every reader past its last commit as this one does,
    /// in about a third of the memory (see `run`). Only a view taken after
    /// the freeze may be given it: its sequence is past the last commit.
    pub fn packed(&self) -> Buffer {
        assert!(self.dense.is_none(), "a buffer is packed once");
        Buffer::of_run(Run::of(self))
    }

    /// Packed buffers (oldest first) as one, answering every reader past
    /// the last one's last commit as they did together; `None` unless all
    /// are packed and none deleted a range (see [`Run::merge`]).
    pub fn merged(bufs: &[Arc<Buffer>]) -> Option<Buffer> {
        let runs: Option<Vec<&Run>> = bufs.iter().map(|b| b.dense.as_ref()).collect();
        Run::merge(&runs?).map(Buffer::of_run)
    }

    /// A packed buffer holding `run`, of the log generation and last
    /// commit the run came from.
    fn of_run(run: Run) -> Buffer {
        Buffer {
            tables: Default::default(),
            bytes: AtomicUsize::new(run.bytes()),
            last_seq: AtomicU64::new(run.last_seq),
            gen: run.gen,
            dense: Some(run),
            growth: Growth::default(),
        }
    }

    /// The packed state, for a reader at `s` (always past its last commit).
    fn dense(&self, s: u64) -> Option<&Run> {
        let run = self.dense.as_ref()?;
        debug_assert!(s >= self.last_seq(), "a packed buffer read before its end");
        Some(run)
    }

    /// Rows the buffer holds, over every table (deleted ones too).
    pub fn rows(&self) -> usize {
        match &self.dense {
            Some(run) => run.rows(),
            None => self.tables.read_recursive().row_count(),
        }
    }

    /// Per table, the rows [`Buffer::for_each_table`] hands on and their
    /// key and value bytes in all: what a pass that copies them (the
    /// packer's) reserves room for at once (see [`Run::of`]). Empty for a
    /// packed buffer.
    pub fn sizes(&self) -> [RowSizes; 6] {
        let mut sizes = [RowSizes::default(); 6];
        if self.dense.is_some() {
            return sizes;
        }
        let t = self.tables.read_recursive();
        for (size, rows) in sizes.iter_mut().zip(&t.rows) {
            size.rows = rows.len();
            for (k, v) in rows {
                size.key_bytes += k.as_slice().len();
                size.value_bytes += v.value.as_deref().map_or(0, <[u8]>::len);
            }
        }
        sizes
    }

    /// Whether this is a packed buffer ([`Buffer::packed`]).
    pub fn is_packed(&self) -> bool {
        self.dense.is_some()
    }

    /// The sequence number of the last commit applied (0: none).
    pub fn last_seq(&self) -> u64 {
        self.last_seq.load(Ordering::Acquire)
    }

    /// Memory the buffer holds, roughly (payload plus per-row overhead).
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Starts counting, from now on, how many of the buffer's row writes
    /// add a row rather than rewrite one it holds (once; later calls keep
    /// the first mark). See [`Buffer::mostly_rewrites`].
    pub fn mark_growth(&self) {
        self.growth.mark();
    }

    /// Whether fewer than half of the row writes since
    /// [`Buffer::mark_growth`] added a row: the commits keep rewriting
    /// rows the buffer holds (counters, a hot set of keys), so it grows
    /// slowly, and what the writer would put into the tables per write
    /// shrinks the longer it stays active.
    pub fn mostly_rewrites(&self) -> bool {
        self.growth.mostly_rewrites()
    }

    /// Applies the changes of commit `seq`, in order. Versions that no
    /// reader at `keep` or later can see are dropped on the way.
    pub fn apply(&self, seq: u64, ops: Vec<RowOp>, keep: u64) {
        assert!(self.dense.is_none(), "a packed buffer takes no commits");
        self.last_seq.fetch_max(seq, Ordering::AcqRel);
        let mut t = self.tables.write();
        let mut delta: isize = 0;
        let held = t.row_count();
        let writes = ops.len();
        for op in ops {
            match op {
                RowOp::Put(table, k, v) => {
                    delta += upsert(&mut t, table, &k, Some(v), seq, keep);
                }
                RowOp::Del(table, k) => {
                    delta += upsert(&mut t, table, &k, None, seq, keep);
                }
                RowOp::Clear(table) => {
                    delta += delete_range(&mut t, table, &[], None, seq, keep);
                }
                RowOp::DelRange(table, start, end) => {
                    delta += delete_range(&mut t, table, &start, end.as_deref(), seq, keep);
                }
            }
        }
        self.growth.took(writes, t.row_count() - held);
        drop(t);
        if delta >= 0 {
            self.bytes.fetch_add(delta as usize, Ordering::Relaxed);
        } else {
            self.bytes
                .fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
        }
    }

    /// What the buffer says of one row for a reader at `s`: `Some(entry)`
    /// if it holds a version of the row (`Some(None)`: deleted, also by one
    /// of its ranges), `None` if the layers below decide.
    pub fn get(&self, table: Table, key: &[u8], s: u64) -> Option<Entry> {
        if let Some(run) = self.dense(s) {
            return run.get(table, key).map(|e| e.map(<[u8]>::to_vec));
        }
        let t = self.tables.read_recursive();
        if let Some(e) = t.rows[table as usize].get(key).and_then(|v| v.at(s)) {
            return Some(e.to_entry());
        }
        let covered = t.ranges[table as usize]
            .iter()
            .any(|r| r.seq <= s && in_range(key, &r.start, r.end.as_deref()));
        covered.then_some(None)
    }

    /// Loads the rows of `keys` this buffer holds into the cache, and
    /// keeps in `keys` only those it does not hold: see
    /// [`ReadCtx::warm`](super::ReadCtx::warm). One lock for them all: its
    /// atomic between two lookups would keep their misses from overlapping.
    pub fn warm(&self, table: Table, keys: &mut Vec<&[u8]>) {
        if let Some(run) = &self.dense {
            keys.retain(|key| !run.holds(table, key));
            return;
        }
        let t = self.tables.read_recursive();
        let rows = &t.rows[table as usize];
        keys.retain(|key| {
            let row = rows.get(*key);
            if let Some(v) = row {
                // The entry spans more than one cache line: a lookup reads
                // the sequence as well as the value.
                std::hint::black_box((v.seq, v.value.as_deref().and_then(|v| v.first())));
            }
            row.is_none()
        });
    }

    /// The ranges a reader at `s` sees deleted.
    pub fn ranges(&self, table: Table, s: u64) -> Vec<KeyRange> {
        if let Some(run) = self.dense(s) {
            return run.ranges(table).to_vec();
        }
        let t = self.tables.read_recursive();
        t.ranges[table as usize]
            .iter()
            .filter(|r| r.seq <= s)
            .map(|r| (r.start.clone(), r.end.clone()))
            .collect()
    }

    /// Every key of `table` the buffer holds a version of (written or
    /// deleted, by any commit it took).
    pub fn keys(&self, table: Table) -> Vec<Arc<[u8]>> {
        if let Some(run) = &self.dense {
            return run.keys(table).map(Arc::from).collect();
        }
        let t = self.tables.read_recursive();
        let order = t.order(table as usize);
        order
            .keys()
            .map(|k| match k {
                RowKey::Shared(k) => k.clone(),
                RowKey::Inline(..) => Arc::from(k.as_slice()),
            })
            .collect()
    }

    /// Whether the buffer holds nothing of `[start, end)` in `table`, for
    /// any reader: scans of such a range read the tables alone.
    pub fn untouched(&self, table: Table, start: &[u8], end: Option<&[u8]>) -> bool {
        if let Some(run) = &self.dense {
            return run
                .range(table, super::merge::scan_bounds(start, end))
                .next()
                .is_none()
                && !run
                    .ranges(table)
                    .iter()
                    .any(|(s, e)| overlaps(s, e.as_deref(), start, end));
        }
        let t = self.tables.read_recursive();
        // The first key at or after `start`, then its bound: a range with
        // both ends searches the tree for each (the zscore keys of a
        // ZPOPMIN are shared, so every comparison is a miss).
        let order = t.order(table as usize);
        let first = order
            .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
            .next()
            .map(|(k, _)| k);
        if first.is_some_and(|k| end.is_none_or(|e| k.as_slice() < e)) {
            return false;
        }
        drop(order);
        !t.ranges[table as usize]
            .iter()
            .any(|r| overlaps(&r.start, r.end.as_deref(), start, end))
    }

    /// Up to `n` rows of `table` within `(lo, hi)` as a reader at `s` sees
    /// them (deleted ones included, as `None`), appended to `out` in key
    /// order or reversed; false once the range is exhausted.
    pub fn fill(
        &self,
        table: Table,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        s: u64,
        n: usize,
        out: &mut VecDeque<super::merge::Row>,
    ) -> bool {
        if n == 0 {
            return true;
        }
        let mut taken = 0;
        self.walk(table, bounds, reverse, s, |row| {
            out.push_back(match row {
                Seen::Packed(k, v) => (RowKey::new(k), Stored::from_entry(v)),
                // A clone of the key shares a long one.
                Seen::Row(k, e) => (k.clone(), e.clone()),
            });
            taken += 1;
            taken < n
        })
    }

    /// [`Buffer::fill`] without copying: hands `visit` each row a reader
    /// at `s` sees in `bounds` (a deleted one as `None`), in key order or
    /// reversed, until it returns false.
    pub fn visit(
        &self,
        table: Table,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        s: u64,
        visit: &mut RowVisitor,
    ) {
        self.walk(table, bounds, reverse, s, |row| match row {
            Seen::Packed(k, v) => visit(k, v),
            Seen::Row(k, e) => visit(k.as_slice(), e.as_deref()),
        });
    }

    /// The rows a reader at `s` sees in `(lo, hi)`, in key order or
    /// reversed, to `on` until it returns false; true if it stopped so
    /// (more may follow), false at the end of the range.
    fn walk(
        &self,
        table: Table,
        (lo, hi): (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        s: u64,
        mut on: impl FnMut(Seen) -> bool,
    ) -> bool {
        if let Some(run) = self.dense(s) {
            let mut rows = run.range(table, (lo, hi));
            let stop = |(k, v)| !on(Seen::Packed(k, v));
            return match reverse {
                true => rows.rev().any(stop),
                false => rows.any(stop),
            };
        }
        let t = self.tables.read_recursive();
        let rows = &t.rows[table as usize];
        let order = t.order(table as usize);
        // Rows written after `s` are not there for this reader.
        let take = |(k, &at): (&RowKey, &u32)| match rows[at as usize].at(s) {
            Some(e) => !on(Seen::Row(k, e)),
            None => false,
        };
        if reverse {
            return order.range::<[u8], _>((lo, hi)).rev().any(take);
        }
        // Forward, the upper bound is checked key by key rather than
        // searched for (see `untouched`).
        let below_hi = |k: &[u8]| match hi {
            Bound::Included(h) => k <= h,
            Bound::Excluded(h) => k < h,
            Bound::Unbounded => true,
        };
        order
            .range::<[u8], _>((lo, Bound::Unbounded))
            .take_while(|row| below_hi(row.0.as_slice()))
            .any(take)
    }

    /// What the background writer puts into the tables, handed to `f`
    /// without copying: the final state of this (frozen) buffer as
    /// changes, each table's deleted ranges first (oldest first), then the
    /// newest version of each of its rows in key order. The writer takes
    /// them a table at a time ([`for_each_table`](Self::for_each_table));
    /// the tests read them flat.
    #[cfg(test)]
    pub fn for_each_change<E>(
        &self,
        f: &mut dyn FnMut(Change<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.for_each_table(&mut |_, changes| {
            for change in changes {
                f(change)?;
            }
            Ok(())
        })
    }

    /// What the background writer puts into the tables, handed to `f`
    /// without copying, a table at a time (tables this buffer did not
    /// change are skipped), so the writer can see a run of rows coming:
    /// the final state of this (frozen) buffer as changes, each table's
    /// deleted ranges first (oldest first), then the newest version of
    /// each of its rows in key order.
    pub fn for_each_table<E>(
        &self,
        f: &mut dyn FnMut(Table, &mut TableChanges<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.each_table(true, f)
    }

    /// [`Buffer::for_each_table`] with each table's rows in the order they
    /// came, not in key order: for a pass that takes them one at a time
    /// (the row cache's, after a write-out), which then sorts nothing.
    pub fn for_each_table_as_arrived<E>(
        &self,
        f: &mut dyn FnMut(Table, &mut TableChanges<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.each_table(false, f)
    }

    fn each_table<E>(
        &self,
        in_key_order: bool,
        f: &mut dyn FnMut(Table, &mut TableChanges<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if let Some(run) = &self.dense {
            for table in Table::ALL {
                let ranges = run.ranges(table);
                let mut rows = run
                    .range(table, (Bound::Unbounded, Bound::Unbounded))
                    .peekable();
                if ranges.is_empty() && rows.peek().is_none() {
                    continue;
                }
                let ranges = ranges
                    .iter()
                    .map(|(start, end)| Change::Range(table, start, end.as_deref()));
                let rows = rows.map(|(k, v)| Change::Row(table, k, v));
                f(table, &mut ranges.chain(rows))?;
            }
            return Ok(());
        }
        let t = self.tables.read();
        let mut sorted = SORTED.take();
        for table in Table::ALL {
            let i = table as usize;
            if t.ranges[i].is_empty() && t.rows[i].is_empty() {
                continue;
            }
            let ranges = t.ranges[i]
                .iter()
                .map(|r| Change::Range(table, &r.start, r.end.as_deref()));
            // A buffer no scan has read in order (the usual one under
            // writes alone) is sorted for this pass only: the ordered
            // index, built for the pass and freed with the buffer, was
            // a third of the writer's sorting under LPUSH, besides its
            // allocations. A scan of this buffer meanwhile builds its own.
            let order;
            let positions: Box<dyn Iterator<Item = u32> + '_> = if !in_key_order {
                Box::new(0..t.rows[i].len() as u32)
            } else if t.order[i].read().is_empty() {
                sort_from(&t.rows[i], 0, &mut sorted);
                Box::new(sorted.iter().map(|(_, at)| *at))
            } else {
                order = t.order(i);
                Box::new(order.values().copied())
            };
            f(
                table,
                &mut ranges.chain(ordered(table, &t.rows[i], positions)),
            )?;
        }
        if sorted.capacity() <= SORTED_KEPT {
            sorted.clear();
            SORTED.set(sorted);
        }
        Ok(())
    }
}

/// What the background writer puts into the tables for `bufs` (frozen
/// buffers, oldest first), handed to `f` a table at a time as
/// [`Buffer::for_each_table`] does: packed buffers without deleted ranges
/// merged into one pass in key order (each row once, its newest value),
/// others one buffer after another. One pass shares each leaf it rewrites
/// among the rows of every buffer; a second pass over a big table would
/// rewrite most leaves again, often read back from the file.
pub fn for_each_table_of<E>(
    bufs: &[Arc<Buffer>],
    f: &mut dyn FnMut(Table, &mut TableChanges<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let runs: Option<Vec<&Run>> = bufs
        .iter()
        .map(|b| b.dense.as_ref().filter(|r| !r.has_ranges()))
        .collect();
    let Some(runs) = runs.filter(|r| r.len() > 1) else {
        return bufs.iter().try_for_each(|b| b.for_each_table(f));
    };
    for table in Table::ALL {
        let mut rows = super::run::merged(&runs, table).peekable();
        if rows.peek().is_none() {
            continue;
        }
        f(table, &mut rows.map(|(k, v)| Change::Row(table, k, v)))?;
    }
    Ok(())
}

/// Whether the ranges `[a, a_end)` and `[b, b_end)` meet (`None`: to the
/// table's end): unless one ends before the other starts.
fn overlaps(a: &[u8], a_end: Option<&[u8]>, b: &[u8], b_end: Option<&[u8]>) -> bool {
    a_end.is_none_or(|e| e > b) && b_end.is_none_or(|e| a < e)
}

/// Loads the rows of `keys` that `layers` (newest first) hold into the
/// cache without reading them out: each lookup is a cache miss into a
/// large map, and made back to back the misses overlap instead of coming
/// one at a time between the work that needs them. A key stops at the
/// newest layer holding it, as a read would. Returns the keys no layer
/// holds, which a read looks for in the tables.
pub fn warm_layers<'k>(layers: &[Arc<Buffer>], table: Table, keys: &'k [Vec<u8>]) -> Vec<&'k [u8]> {
    let mut left: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    for b in layers {
        if left.is_empty() {
            break;
        }
        b.warm(table, &mut left);
    }
    left
}

/// The rows of `rows` at `positions` (in key order) as a table's changes.
fn ordered<'a>(
    table: Table,
    rows: &'a Rows,
    positions: impl Iterator<Item = u32> + 'a,
) -> impl Iterator<Item = Change<'a>> + 'a {
    Ordered {
        positions,
        rows,
        batch: Vec::with_capacity(LOOKUP_BATCH),
        next: 0,
    }
    .map(move |(k, v)| Change::Row(table, k, v))
}

/// Rows [`Ordered`] looks up together.
const LOOKUP_BATCH: usize = 16;

/// A table's rows in key order with their newest values, fetched from
/// their positions in the map a batch at a time: where rows arrived out
/// of key order (random members) each fetch is a cache miss, and fetches
/// made back to back wait for their misses together instead of one at a
/// time between the writer's inserts.
struct Ordered<'a, P> {
    /// The rows' positions in the map, in key order.
    positions: P,
    rows: &'a Rows,
    batch: Vec<(&'a [u8], Option<&'a [u8]>)>,
    next: usize,
}

impl<'a, P: Iterator<Item = u32>> Iterator for Ordered<'a, P> {
    type Item = (&'a [u8], Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.next == self.batch.len() {
            self.batch.clear();
            self.next = 0;
            let rows = self.rows;
            self.batch
                .extend(self.positions.by_ref().take(LOOKUP_BATCH).map(|at| {
                    let (k, v) = rows.get_index(at as usize).expect("ordered row");
                    (k.as_slice(), v.value.as_deref())
                }));
        }
        let item = self.batch.get(self.next).copied()?;
        self.next += 1;
        Some(item)
    }
}

/// A table's rows in a buffer and their bytes (see [`Buffer::sizes`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RowSizes {
    /// Rows, deleted ones included.
    pub rows: usize,
    /// Their keys' bytes.
    pub key_bytes: usize,
    /// Their newest values' bytes (none for a deleted row).
    pub value_bytes: usize,
}

/// One table's changes, as [`Buffer::for_each_table`] hands them.
pub type TableChanges<'a> = dyn Iterator<Item = Change<'a>> + 'a;

/// One change a frozen buffer leaves in the tables (see
/// [`Buffer::for_each_table`]).
#[derive(Debug)]
pub enum Change<'a> {
    /// Rows from a key up to another (exclusive; `None`: the table's end)
    /// deleted.
    Range(Table, &'a [u8], Option<&'a [u8]>),
    /// A row's final value, `None` if deleted.
    Row(Table, &'a [u8], Option<&'a [u8]>),
}

fn upsert(t: &mut Tables, table: Table, key: &[u8], value: Entry, seq: u64, keep: u64) -> isize {
    use indexmap::map::Entry as Slot;
    let i = table as usize;
    let value = Stored::new(value);
    let delta = (key.len() + value.as_deref().map_or(0, <[u8]>::len) + ROW_OVERHEAD) as isize;
    // An inline key costs nothing to build, so the map is searched once,
    // for the row or its place; a longer one is looked up first, as
    // building it allocates.
    let slot = if key.len() <= INLINE {
        t.rows[i].entry(RowKey::new(key))
    } else if let Some(v) = t.rows[i].get_mut(key) {
        return v.push(seq, value, keep);
    } else {
        t.rows[i].entry(RowKey::new(key))
    };
    match slot {
        Slot::Occupied(mut row) => return row.get_mut().push(seq, value, keep),
        Slot::Vacant(place) => {
            let row = place.insert(Versions::new(seq, value));
            // The next new row goes into the slot after this one: its
            // lines asked for now, while the commands in between run.
            // The entry's first store was ~80% of `upsert`'s samples under
            // LPUSH -P 16; with this, six alternated rounds of INCR,
            // LPUSH, RPUSH, SADD and HSET took 6% less server CPU (the
            // store stays the function's hottest instruction).
            let next = (row as *const Versions).cast::<u8>().wrapping_add(ENTRY);
            crate::util::prefetch_addr(next);
            crate::util::prefetch_addr(next.wrapping_add(64));
        }
    };
    delta
}

fn delete_range(
    t: &mut Tables,
    table: Table,
    start: &[u8],
    end: Option<&[u8]>,
    seq: u64,
    keep: u64,
) -> isize {
    let i = table as usize;
    let mut delta = 0;
    let Tables { rows, order, .. } = t;
    let order = order[i].get_mut();
    settle(order, &rows[i]);
    for &at in order
        .range::<[u8], _>(super::merge::scan_bounds(start, end))
        .map(|(_, at)| at)
    {
        delta += rows[i][at as usize].push(seq, Stored::Gone, keep);
    }
    t.ranges[i].push(RangeDel {
        seq,
        start: start.to_vec(),
        end: end.map(<[u8]>::to_vec),
    });
    delta + (start.len() + end.map_or(0, <[u8]>::len) + ROW_OVERHEAD) as isize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(k: &[u8], v: &[u8]) -> RowOp {
        RowOp::Put(Table::Sub, k.to_vec(), v.to_vec())
    }

    fn rows(b: &Buffer, s: u64, reverse: bool) -> Vec<(Vec<u8>, Entry)> {
        let mut out = VecDeque::new();
        b.fill(
            Table::Sub,
            (Bound::Unbounded, Bound::Unbounded),
            reverse,
            s,
            usize::MAX,
            &mut out,
        );
        out.into_iter()
            .map(|(k, v)| (k.as_slice().to_vec(), v.to_entry()))
            .collect()
    }

    /// A buffer that follows another starts with room for its rows, and
    /// empty.
    #[test]
    fn a_buffer_sized_like_another_has_room_for_its_rows() {
        let b = Buffer::new(1);
        let ops = (0..1000u32).map(|i| put(&i.to_be_bytes(), b"v")).collect();
        b.apply(1, ops, 0);
        let next = Buffer::sized_like(2, &b);
        let t = next.tables.read();
        assert!(t.rows[Table::Sub as usize].capacity() >= 1000);
        assert!(t.rows.iter().all(|r| r.is_empty()));
        assert_eq!(next.bytes(), 0);
    }

    /// Keys come out of a write-out in key order however they arrived:
    /// forwards, backwards, in runs each below the last (LPUSH's
    /// batches), in runs that overlap, two runs interleaved, no order at
    /// all (`sort_keys`: runs put in order, or keys quicksorted).
    #[test]
    fn rows_are_written_in_key_order_however_they_came() {
        // Runs of 32, and 100 of them.
        let n = 3200u32;
        let mut x = 0x9e37_79b9u32;
        let mut random = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let arrivals: Vec<(&str, Vec<u32>)> = vec![
            ("forwards", (0..n).collect()),
            ("backwards", (0..n).rev().collect()),
            (
                "runs each below the last",
                (0..n).map(|i| n - (i / 32 + 1) * 32 + i % 32).collect(),
            ),
            (
                "runs that overlap",
                (0..n)
                    .map(|i| (n - i / 32 * 32) + (i % 32) * 2 + i / 32 % 2)
                    .collect(),
            ),
            ("interleaved", (0..n).map(|i| (i % 2) * n + i / 2).collect()),
            ("random", (0..n).map(|_| random()).collect()),
        ];
        for (how, keys) in arrivals {
            let b = Buffer::new(1);
            let ops = keys.iter().map(|i| put(&i.to_be_bytes(), b"v")).collect();
            b.apply(1, ops, 0);
            let mut seen = Vec::new();
            b.for_each_change(&mut |c| -> Result<(), ()> {
                if let Change::Row(_, k, _) = c {
                    seen.push(k.to_vec());
                }
                Ok(())
            })
            .unwrap();
            let mut want: Vec<Vec<u8>> = keys.iter().map(|i| i.to_be_bytes().to_vec()).collect();
            want.sort();
            assert_eq!(seen, want, "{how}");
        }
    }

    /// An emptied buffer keeps its room and nothing else: no row, no
    /// deleted range, no bytes, the new generation. Emptied again after
    /// a smaller load, it keeps room for that load only.
    #[test]
    fn an_emptied_buffer_keeps_only_its_room() {
        let b = Buffer::new(1);
        let ops = (0..1000u32).map(|i| put(&i.to_be_bytes(), b"v")).collect();
        b.apply(1, ops, 0);
        b.apply(2, vec![RowOp::Clear(Table::Meta)], 0);
        let b = b.emptied().renumbered(7);
        assert_eq!((b.gen, b.bytes()), (7, 0));
        assert_eq!(b.get(Table::Sub, &5u32.to_be_bytes(), u64::MAX), None);
        assert_eq!(b.get(Table::Meta, b"any", u64::MAX), None);
        let mut changes = 0;
        b.for_each_change(&mut |_| -> Result<(), ()> {
            changes += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(changes, 0);
        assert!(b.tables.read().rows[Table::Sub as usize].capacity() >= 1000);
        b.apply(3, vec![put(b"one", b"v")], 0);
        let b = b.emptied();
        assert!(b.tables.read().rows[Table::Sub as usize].capacity() < 1000);
    }

    /// Rows enter the ordered index only when something reads in order:
    /// scans between commits (each settling a few rows into a larger
    /// index, or many into a smaller one), a deleted range over rows not
    /// yet indexed, and the writer's pass all see every row, in order.
    #[test]
    fn rows_not_yet_ordered_are_ordered_when_read() {
        let b = Buffer::new(1);
        let key = |i: u32| {
            (i.wrapping_mul(2_654_435_761) % 100_000)
                .to_be_bytes()
                .to_vec()
        };
        let mut expect = std::collections::BTreeMap::new();
        let mut seq = 0;
        for (count, scan) in [
            (500, true),
            (3, true),
            (2000, false),
            (1, true),
            (50, false),
        ] {
            seq += 1;
            let ops = (0..count).map(|i| key(seq * 10_000 + i)).inspect(|k| {
                expect.insert(k.clone(), Some(k.clone()));
            });
            b.apply(seq as u64, ops.map(|k| put(&k, &k)).collect(), 0);
            if scan {
                let want: Vec<_> = expect.clone().into_iter().collect();
                assert_eq!(rows(&b, u64::MAX, false), want);
            }
        }
        // A range deleted over rows the index does not hold yet.
        seq += 1;
        let (lo, hi) = (20_000u32.to_be_bytes(), 60_000u32.to_be_bytes());
        b.apply(
            seq as u64,
            vec![RowOp::DelRange(Table::Sub, lo.to_vec(), Some(hi.to_vec()))],
            0,
        );
        for v in expect.range_mut(lo.to_vec()..hi.to_vec()).map(|(_, v)| v) {
            *v = None;
        }
        let want: Vec<_> = expect.clone().into_iter().collect();
        let mut reversed = want.clone();
        reversed.reverse();
        assert_eq!(rows(&b, u64::MAX, false), want);
        assert_eq!(rows(&b, u64::MAX, true), reversed);
        let mut written = Vec::new();
        b.for_each_change(&mut |c| -> Result<(), ()> {
            if let Change::Row(_, k, v) = c {
                written.push((k.to_vec(), v.map(<[u8]>::to_vec)));
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(written, want);
    }

    /// The writer's pass over a buffer nothing read in order sorts its
    /// rows for the pass alone: they come in key order, newest versions,
    /// and the ordered index stays empty (a later scan still finds them
    /// in order). The row cache's pass hands them as they came.
    #[test]
    fn a_pass_over_rows_no_scan_ordered_sorts_them_for_itself() {
        let b = Buffer::new(1);
        let keys: Vec<Vec<u8>> = (0..300u32)
            .map(|i| {
                (i.wrapping_mul(2_654_435_761) % 1000)
                    .to_be_bytes()
                    .to_vec()
            })
            .collect();
        b.apply(1, keys.iter().map(|k| put(k, b"old")).collect(), 0);
        b.apply(2, keys.iter().step_by(3).map(|k| put(k, k)).collect(), 0);
        let newest = |k: &Vec<u8>| {
            let third = keys.iter().position(|x| x == k).unwrap() % 3 == 0;
            Some(if third { k.clone() } else { b"old".to_vec() })
        };
        let pass = |as_arrived: bool| {
            let mut seen = Vec::new();
            let mut take = |_: Table, changes: &mut TableChanges<'_>| -> Result<(), ()> {
                for c in changes {
                    if let Change::Row(_, k, v) = c {
                        seen.push((k.to_vec(), v.map(<[u8]>::to_vec)));
                    }
                }
                Ok(())
            };
            if as_arrived {
                b.for_each_table_as_arrived(&mut take).unwrap();
            } else {
                b.for_each_table(&mut take).unwrap();
            }
            seen
        };
        let mut sorted = keys.clone();
        sorted.sort();
        let in_order: Vec<_> = sorted.iter().map(|k| (k.clone(), newest(k))).collect();
        assert_eq!(pass(false), in_order);
        let t = b.tables.read();
        assert!(t.order[Table::Sub as usize].read().is_empty());
        drop(t);
        let arrived: Vec<_> = keys.iter().map(|k| (k.clone(), newest(k))).collect();
        assert_eq!(pass(true), arrived);
        assert_eq!(rows(&b, u64::MAX, false), in_order);
    }

    /// Keys held inline and keys held shared (both sides of the length
    /// limit, and keys that are prefixes of each other) are found, listed
    /// and scanned in byte order like any keys.
    #[test]
    fn short_and_long_keys_order_and_probe_alike() {
        let b = Buffer::new(1);
        let keys: Vec<Vec<u8>> = [INLINE - 1, INLINE, INLINE + 1, 0, 40]
            .iter()
            .map(|&n| vec![b'k'; n])
            .chain([b"k\0".to_vec(), b"j".repeat(INLINE + 5)])
            .collect();
        b.apply(1, keys.iter().map(|k| put(k, k)).collect(), 0);
        let mut sorted = keys.clone();
        sorted.sort();
        for k in &keys {
            assert_eq!(b.get(Table::Sub, k, 1), Some(Some(k.clone())));
        }
        let listed: Vec<Vec<u8>> = b.keys(Table::Sub).iter().map(|k| k.to_vec()).collect();
        assert_eq!(listed, sorted);
        let scanned: Vec<Vec<u8>> = rows(&b, 1, false).into_iter().map(|(k, _)| k).collect();
        assert_eq!(scanned, sorted);
        assert_eq!(b.get(Table::Sub, &[b'k'; INLINE + 2], 1), None);
    }

    /// Two keys compare as their bytes do, held inline or shared: keys
    /// with zero bytes where the other one's padding is, prefixes of each
    /// other, differing in either sixteen-byte word and across the inline
    /// limit.
    #[test]
    fn row_keys_compare_as_their_bytes() {
        let mut keys: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0, 0], vec![1], vec![255]];
        for n in [
            7,
            8,
            9,
            13,
            14,
            15,
            16,
            17,
            23,
            24,
            25,
            INLINE - 1,
            INLINE,
            INLINE + 1,
        ] {
            for fill in [0u8, 1, 255] {
                keys.push(vec![fill; n]);
                let mut tail = vec![fill; n];
                tail[n - 1] ^= 1;
                keys.push(tail);
            }
        }
        for a in &keys {
            for b in &keys {
                let (x, y) = (RowKey::new(a), RowKey::new(b));
                assert_eq!(x.cmp(&y), a.cmp(b), "{a:?} against {b:?}");
                assert_eq!(x == y, a == b, "{a:?} against {b:?}");
            }
        }
    }

    /// A reader at an older sequence keeps seeing the versions of its
    /// time; versions nobody can see any more are dropped.
    #[test]
    fn readers_see_the_versions_of_their_sequence() {
        let b = Buffer::new(1);
        b.apply(1, vec![put(b"a", b"1"), put(b"b", b"1")], 0);
        b.apply(
            2,
            vec![put(b"a", b"2"), RowOp::Del(Table::Sub, b"b".to_vec())],
            1,
        );
        assert_eq!(b.get(Table::Sub, b"a", 1), Some(Some(b"1".to_vec())));
        assert_eq!(b.get(Table::Sub, b"a", 2), Some(Some(b"2".to_vec())));
        assert_eq!(b.get(Table::Sub, b"b", 2), Some(None));
        assert_eq!(b.get(Table::Sub, b"a", 0), None);
        assert_eq!(b.get(Table::Sub, b"c", 2), None);
        assert_eq!(
            rows(&b, 1, false),
            vec![
                (b"a".to_vec(), Some(b"1".to_vec())),
                (b"b".to_vec(), Some(b"1".to_vec()))
            ]
        );
        assert_eq!(
            rows(&b, 2, true),
            vec![(b"b".to_vec(), None), (b"a".to_vec(), Some(b"2".to_vec()))]
        );
        // Nobody reads below 3 any more: version 1 of `a` goes.
        b.apply(3, vec![put(b"a", b"3")], 3);
        assert_eq!(b.get(Table::Sub, b"a", 1), None);
        assert_eq!(b.get(Table::Sub, b"a", 2), Some(Some(b"2".to_vec())));
    }

    /// Values on both sides of the inline limit, and the empty one, read
    /// back as written, through point reads and scans, in every version.
    #[test]
    fn short_and_long_values_read_back_alike() {
        let b = Buffer::new(1);
        let values: Vec<Vec<u8>> = [0, 1, SHORT - 1, SHORT, SHORT + 1, 1000]
            .iter()
            .map(|&n| (0..n).map(|i| (i * 7 + n) as u8).collect())
            .collect();
        for (i, v) in values.iter().enumerate() {
            b.apply(i as u64 + 1, vec![put(b"k", v)], 0);
        }
        for (i, v) in values.iter().enumerate() {
            let s = i as u64 + 1;
            assert_eq!(b.get(Table::Sub, b"k", s), Some(Some(v.clone())));
            assert_eq!(rows(&b, s, false), vec![(b"k".to_vec(), Some(v.clone()))]);
        }
    }

    /// A row rewritten while a reader stays behind keeps every version
    /// from the reader's on, whichever place holds them; once the reader
    /// is gone, the next rewrite drops all but the one before it, and the
    /// bytes counted go back to what one row with one older version holds.
    #[test]
    fn versions_behind_a_reader_stay_until_it_goes() {
        let b = Buffer::new(1);
        b.apply(1, vec![put(b"a", b"v1")], 0);
        b.apply(2, vec![put(b"a", b"v2")], 1);
        let two_versions = b.bytes();
        for seq in 3..=5 {
            b.apply(seq, vec![put(b"a", format!("v{seq}").as_bytes())], 1);
        }
        for seq in 1..=5 {
            let want = format!("v{seq}").into_bytes();
            assert_eq!(b.get(Table::Sub, b"a", seq), Some(Some(want)));
        }
        // The reader at 1 is gone; one at 5 may be.
        b.apply(6, vec![put(b"a", b"v6")], 5);
        assert_eq!(b.get(Table::Sub, b"a", 4), None);
        assert_eq!(b.get(Table::Sub, b"a", 5), Some(Some(b"v5".to_vec())));
        assert_eq!(b.get(Table::Sub, b"a", 6), Some(Some(b"v6".to_vec())));
        assert_eq!(b.bytes(), two_versions);
        // Behind a reader at 5 again: 6 and 7 stay beside 5.
        b.apply(7, vec![RowOp::Del(Table::Sub, b"a".to_vec())], 5);
        b.apply(8, vec![put(b"a", b"v8")], 5);
        assert_eq!(b.get(Table::Sub, b"a", 5), Some(Some(b"v5".to_vec())));
        assert_eq!(b.get(Table::Sub, b"a", 6), Some(Some(b"v6".to_vec())));
        assert_eq!(b.get(Table::Sub, b"a", 7), Some(None));
        assert_eq!(b.get(Table::Sub, b"a", 8), Some(Some(b"v8".to_vec())));
    }

    /// A range deletion hides the layers below for readers after it, and
    /// this buffer's own rows through their deleted versions; rows written
    /// after it stand.
    #[test]
    fn ranges_shadow_older_rows_only() {
        let b = Buffer::new(1);
        b.apply(1, vec![put(b"k1", b"x")], 0);
        b.apply(
            2,
            vec![RowOp::DelRange(
                Table::Sub,
                b"k".to_vec(),
                Some(b"l".to_vec()),
            )],
            0,
        );
        b.apply(3, vec![put(b"k2", b"y")], 0);
        assert_eq!(b.get(Table::Sub, b"k1", 1), Some(Some(b"x".to_vec())));
        assert_eq!(b.get(Table::Sub, b"k1", 2), Some(None));
        assert_eq!(b.get(Table::Sub, b"k9", 2), Some(None));
        assert_eq!(b.get(Table::Sub, b"k9", 1), None);
        assert_eq!(b.get(Table::Sub, b"m", 3), None);
        assert_eq!(b.get(Table::Sub, b"k2", 3), Some(Some(b"y".to_vec())));
        assert!(!b.untouched(Table::Sub, b"k5", Some(b"k6")));
        assert!(b.untouched(Table::Sub, b"l", None));
        assert!(b.untouched(Table::Meta, b"", None));
        assert_eq!(b.ranges(Table::Sub, 1), vec![]);
        assert_eq!(b.ranges(Table::Sub, 2).len(), 1);
        let mut changes = Vec::new();
        b.for_each_change::<()>(&mut |c| {
            changes.push(match c {
                Change::Range(t, s, e) => RowOp::DelRange(t, s.to_vec(), e.map(<[u8]>::to_vec)),
                Change::Row(t, k, Some(v)) => RowOp::Put(t, k.to_vec(), v.to_vec()),
                Change::Row(t, k, None) => RowOp::Del(t, k.to_vec()),
            });
            Ok(())
        })
        .unwrap();
        assert_eq!(
            changes,
            vec![
                RowOp::DelRange(Table::Sub, b"k".to_vec(), Some(b"l".to_vec())),
                RowOp::Del(Table::Sub, b"k1".to_vec()),
                put(b"k2", b"y"),
            ]
        );
    }

    /// The changes `for_each_table_of` hands out, as row operations.
    fn changes_of(bufs: &[Arc<Buffer>]) -> Vec<RowOp> {
        let mut changes = Vec::new();
        for_each_table_of::<()>(bufs, &mut |_, table_changes| {
            changes.extend(table_changes.map(|c| match c {
                Change::Range(t, s, e) => RowOp::DelRange(t, s.to_vec(), e.map(<[u8]>::to_vec)),
                Change::Row(t, k, Some(v)) => RowOp::Put(t, k.to_vec(), v.to_vec()),
                Change::Row(t, k, None) => RowOp::Del(t, k.to_vec()),
            }));
            Ok(())
        })
        .unwrap();
        changes
    }

    /// A packed buffer answers every read past its last commit as the
    /// buffer it was packed from: points, scans both ways and in part,
    /// ranges, keys, warm-ups and what it leaves in the tables.
    #[test]
    fn a_packed_buffer_reads_as_its_buffer() {
        let b = Buffer::new(4);
        b.apply(
            1,
            vec![put(b"a", b"1"), put(b"b", b"2"), put(b"d", b"4")],
            0,
        );
        b.apply(2, vec![RowOp::Del(Table::Sub, b"b".to_vec())], 0);
        b.apply(3, vec![RowOp::DelRange(Table::Sub, b"x".to_vec(), None)], 0);
        b.apply(4, vec![put(b"c", b"3"), put(b"y", b"9")], 0);
        let p = b.packed();
        assert!(p.is_packed() && !b.is_packed());
        assert_eq!((p.gen, p.last_seq()), (4, 4));
        assert!(p.bytes() < b.bytes());
        for key in [&b"a"[..], b"b", b"c", b"d", b"e", b"x", b"y", b"z"] {
            assert_eq!(
                p.get(Table::Sub, key, 4),
                b.get(Table::Sub, key, 4),
                "{key:?}"
            );
            assert_eq!(p.get(Table::Meta, key, 9), None);
        }
        for reverse in [false, true] {
            assert_eq!(rows(&p, 4, reverse), rows(&b, 4, reverse));
        }
        for (lo, hi) in [
            (Bound::Included(&b"b"[..]), Bound::Excluded(&b"d"[..])),
            (Bound::Excluded(&b"a"[..]), Bound::Included(&b"d"[..])),
            (Bound::Included(&b"e"[..]), Bound::Unbounded),
        ] {
            for (reverse, n) in [(false, 1), (true, 1), (false, 9), (true, 9)] {
                let (mut got, mut want) = (VecDeque::new(), VecDeque::new());
                let more = p.fill(Table::Sub, (lo, hi), reverse, 4, n, &mut got);
                assert_eq!(more, b.fill(Table::Sub, (lo, hi), reverse, 4, n, &mut want));
                let pairs = |rows: VecDeque<super::super::merge::Row>| -> Vec<_> {
                    rows.into_iter()
                        .map(|(k, v)| (k.as_slice().to_vec(), v.to_entry()))
                        .collect()
                };
                let want = pairs(want);
                assert_eq!(pairs(got), want, "{lo:?} {hi:?} {reverse} {n}");
                // Visited in place, each gives the rows it fills, and
                // stops where its visitor does.
                for buffer in [&p, &b] {
                    let mut seen = Vec::new();
                    buffer.visit(Table::Sub, (lo, hi), reverse, 4, &mut |k, v| {
                        seen.push((k.to_vec(), v.map(<[u8]>::to_vec)));
                        seen.len() < n
                    });
                    assert_eq!(seen, want, "{lo:?} {hi:?} {reverse} {n}");
                }
            }
        }
        for (start, end) in [
            (&b"a"[..], Some(&b"b"[..])),
            (b"e", Some(b"f")),
            (b"e", None),
            (b"z", None),
        ] {
            assert_eq!(
                p.untouched(Table::Sub, start, end),
                b.untouched(Table::Sub, start, end),
                "{start:?} {end:?}"
            );
        }
        assert!(p.untouched(Table::Meta, b"", None));
        assert_eq!(p.ranges(Table::Sub, 4), b.ranges(Table::Sub, 4));
        assert_eq!(p.keys(Table::Sub), b.keys(Table::Sub));
        let mut keys = vec![&b"a"[..], b"e", b"b"];
        p.warm(Table::Sub, &mut keys);
        assert_eq!(keys, vec![&b"e"[..]]);
        let (b, p) = (Arc::new(b), Arc::new(p));
        assert_eq!(changes_of(&[p]), changes_of(&[b]));
    }

    /// Packed buffers without deleted ranges go into the tables merged,
    /// each row once with its newest value; with a range among them, one
    /// buffer after another, as they came.
    #[test]
    fn packed_buffers_merge_unless_they_delete_ranges() {
        let packed = |gen: u64, ops: Vec<RowOp>| {
            let b = Buffer::new(gen);
            b.apply(gen, ops, 0);
            Arc::new(b.packed())
        };
        let old = packed(1, vec![put(b"a", b"1"), put(b"c", b"1")]);
        let new = packed(
            2,
            vec![put(b"b", b"2"), RowOp::Del(Table::Sub, b"c".to_vec())],
        );
        assert_eq!(
            changes_of(&[old.clone(), new.clone()]),
            vec![
                put(b"a", b"1"),
                put(b"b", b"2"),
                RowOp::Del(Table::Sub, b"c".to_vec()),
            ]
        );
        let range = RowOp::DelRange(Table::Sub, b"a".to_vec(), Some(b"b".to_vec()));
        let newest = packed(3, vec![range.clone()]);
        assert_eq!(
            changes_of(&[old, new, newest]),
            vec![
                put(b"a", b"1"),
                put(b"c", b"1"),
                put(b"b", b"2"),
                RowOp::Del(Table::Sub, b"c".to_vec()),
                range,
            ]
        );
    }
}

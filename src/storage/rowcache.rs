//! A cache of `meta` and `sub` rows as the tables hold them, in front of
//! redb.
//!
//! A point read that no write buffer answers descends redb's B-tree: a few
//! pages, each found in redb's page cache through a reference count and an
//! access mark that every thread reading the shard writes, so the lines
//! bounce between cores (a SET of a key the tables hold spent about a fifth
//! of its time there at pipeline 16). Rows read again and again (a
//! read-mostly load, a SET or HSET that rewrites the value already there)
//! are served from a hash map here instead.
//!
//! What keeps it right is an epoch, which the background writer (the only
//! writer of the tables) moves on after each of its commits and readers
//! take with their redb snapshot, under the store's view lock. Each row
//! cached carries the epoch it is known to be the tables' row since, and a
//! reader uses it only if that is not after its own epoch: a row stays
//! cached across a commit only if the commit left it as it was.
//!
//! A commit moves the epoch twice. First to an odd number, after which no
//! reader may add a row (a reader that read the tables before the commit
//! could add a row the commit has just replaced); then, with the commit's
//! changed rows known, every cached one is rewritten to its new row (or
//! dropped), and one not cached but offered once lately is added, marked
//! with the next even epoch, which no reader older than
//! the commit takes; then, under the view lock, the epoch becomes that even
//! number and readers of it may add rows again. Rows the commit did not
//! touch keep their mark and serve old and new readers alike, so a
//! write-out does not empty the cache: the rows a load keeps rewriting (a
//! counter, a hash field) are read from here after the writer has taken
//! them out of the buffers, not from the B-tree. A commit whose changed
//! rows are not known one by one (a range deleted, values moved by the
//! value log's collection) empties the cache instead.
//!
//! A reader whose snapshot began before the commit still finds a buffer
//! holding every row the commit wrote (it leaves the view only after the
//! epoch has moved), or reads the tables as they were: rows marked after
//! its epoch are not for it.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use super::buffer::{RowKey, Stored};
use super::tables::Table;

/// Independent locks, so readers on several threads rarely meet.
const STRIPES: usize = 64;

/// Rows longer than this are not cached: a value that long is read rarely
/// enough, next to its own copy, that the descent does not matter.
const MAX_ROW: usize = 512;

/// What every cached row costs in its map (see [`cost`]): an 80-byte slot,
/// which holds a short key and a short row, and its control byte, at the
/// map's highest load (7/8).
const ROW_OVERHEAD: usize = 93;

/// Words of a stripe's doorkeeper (see [`Stripe::seen_before`]): 16,384
/// bits, 2 KiB, a megabit a shard.
const SEEN_WORDS: usize = 256;

/// See the module doc.
pub struct RowCache {
    /// Even: readers of this epoch may add rows. Odd: the tables are
    /// changing, and nobody may.
    epoch: AtomicU64,
    /// Held through a change, so that two never interleave (the writer
    /// makes them, but the coordination log's redo at start does too).
    changing: parking_lot::Mutex<()>,
    stripes: Box<[parking_lot::Mutex<Stripe>]>,
    stripe_bytes: usize,
    hasher: foldhash::fast::FixedState,
}

/// A cached row and the epoch since which the tables have held it.
struct Cached {
    /// That epoch, which is even, with the low bit set once a reader has
    /// taken the row since the stripe's last eviction (see
    /// [`Stripe::evict`]): a flag of its own would grow the map's slot
    /// past 80 bytes.
    mark: u64,
    row: Stored,
}

impl Cached {
    fn new(since: u64, row: &[u8]) -> Cached {
        Cached {
            mark: since,
            row: Stored::of(row),
        }
    }

    fn row(&self) -> &[u8] {
        self.row.as_deref().unwrap_or_default()
    }

    fn since(&self) -> u64 {
        self.mark & !1
    }

    /// Marks the row as read; it then survives the next eviction.
    fn touch(&mut self) {
        self.mark |= 1;
    }

    /// Whether the row was read since the last eviction, starting over.
    fn take_used(&mut self) -> bool {
        let used = self.mark & 1 == 1;
        self.mark &= !1;
        used
    }
}

/// One table's cached rows, by key. Short keys and rows (a key's meta row
/// with a counter or a short string, a member's row) sit in the map's
/// slot, as in a write buffer, so a hit costs no cache miss beyond the
/// slot's: with both in allocations of their own, comparing the key and
/// copying the row out were a third of a hit's misses (`memcmp` alone
/// 6% of SET at pipeline 16).
type Rows = HashMap<RowKey, Cached, foldhash::fast::FixedState>;

/// One lock's part of the rows: per cached table (see [`cached`]), its
/// rows by key, and the doorkeeper of rows read once.
struct Stripe {
    rows: [Rows; 2],
    bytes: usize,
    seen: Box<[u64; SEEN_WORDS]>,
    /// Bits set in `seen` since it was last emptied.
    seen_count: usize,
}

impl Default for Stripe {
    fn default() -> Stripe {
        Stripe {
            rows: Default::default(),
            bytes: 0,
            seen: Box::new([0; SEEN_WORDS]),
            seen_count: 0,
        }
    }
}

impl Stripe {
    fn clear(&mut self) {
        self.rows.iter_mut().for_each(HashMap::clear);
        self.bytes = 0;
    }

    /// Makes room in a full stripe (one of `cap` bytes), second chance
    /// style: the rows read since the last eviction stay, the others go.
    /// If that frees less than a quarter of the stripe, rows go in the
    /// map's order (arbitrary) until half is free, so an eviction visits
    /// the stripe's rows at most once per quarter of it refilled.
    ///
    /// Emptying the whole stripe instead, a working set a little larger
    /// than the cache was served half the time: redis-benchmark's SADD of
    /// 100,000 members (10 MB of rows, 8 MiB cached) hit 59% of its reads.
    fn evict(&mut self, cap: usize) {
        let mut bytes = 0;
        for rows in &mut self.rows {
            rows.retain(|k, c| {
                let keep = c.take_used();
                if keep {
                    bytes += cost(k.as_slice(), c.row());
                }
                keep
            });
        }
        if bytes > cap - cap / 4 {
            for rows in &mut self.rows {
                rows.retain(|k, c| {
                    let keep = bytes <= cap / 2;
                    if !keep {
                        bytes -= cost(k.as_slice(), c.row());
                    }
                    keep
                });
            }
        }
        self.bytes = bytes;
    }

    /// Whether a row hashing to `h` was offered lately (see
    /// [`Stripe::seen_before`]), without noting anything.
    fn seen(&self, h: u64) -> bool {
        let (word, bit) = seen_bit(h);
        self.seen[word] & bit != 0
    }

    /// Caches `key`'s row in table slot `t`, making room first if the
    /// stripe (of `cap` bytes) would overflow.
    fn add(&mut self, t: usize, key: &[u8], row: Cached, cap: usize) {
        let added = cost(key, row.row());
        if self.bytes + added > cap {
            self.evict(cap);
        }
        if let Some(old) = self.rows[t].insert(RowKey::new(key), row) {
            self.bytes -= cost(key, old.row());
        }
        self.bytes += added;
    }

    /// Whether a row hashing to `h` was offered before; notes that it is
    /// now. A row is cached the second time a reader brings it from the
    /// tables, not the first: a pop reads each element it takes once,
    /// just before deleting it, and caching those (LPOP at pipeline 16:
    /// `put` was 3% of the samples) also pushed out the rows read again
    /// and again. Emptied once half full, so a bit stands for rows read
    /// lately, not ever.
    fn seen_before(&mut self, h: u64) -> bool {
        let (word, bit) = seen_bit(h);
        let word = &mut self.seen[word];
        if *word & bit != 0 {
            return true;
        }
        *word |= bit;
        self.seen_count += 1;
        if self.seen_count >= SEEN_WORDS * 32 {
            self.seen.fill(0);
            self.seen_count = 0;
        }
        false
    }
}

/// The doorkeeper's word and bit for a row hashing to `h`.
fn seen_bit(h: u64) -> (usize, u64) {
    let i = h as usize % (SEEN_WORDS * 64);
    (i / 64, 1 << (i % 64))
}

/// What caching `row` under `key` costs: its share of the map, and the
/// key's and the row's bytes where they do not fit in its slot. Counting
/// the bytes of short ones as well, as the cache once did, counted them
/// twice.
fn cost(key: &[u8], row: &[u8]) -> usize {
    ROW_OVERHEAD + RowKey::heap_bytes(key.len()) + Stored::heap_bytes(row.len())
}

/// The tables whose rows are cached, and where in a [`Stripe`]: the ones
/// read a row at a time (a key's `meta` row, a member's or field's `sub`
/// row); the others are scanned.
fn cached(table: Table) -> Option<usize> {
    match table {
        Table::Meta => Some(0),
        Table::Sub => Some(1),
        _ => None,
    }
}

/// A commit of the tables under way (see the module doc): rows it changed
/// are rewritten in the cache until [`RowCache::end_change`].
#[must_use = "the epoch stays odd, and the cache unfilled, until end_change"]
pub struct Change<'a> {
    next: u64,
    _alone: parking_lot::MutexGuard<'a, ()>,
}

impl RowCache {
    /// A cache of at most `bytes` of rows.
    pub fn new(bytes: usize) -> RowCache {
        RowCache {
            epoch: AtomicU64::new(0),
            changing: Default::default(),
            stripes: (0..STRIPES).map(|_| Default::default()).collect(),
            stripe_bytes: bytes / STRIPES,
            hasher: foldhash::fast::FixedState::with_seed(0x726f_7773),
        }
    }

    /// Whether rows of `table` are cached.
    pub fn caches(table: Table) -> bool {
        cached(table).is_some()
    }

    /// The current epoch: taken by a reader with its snapshot.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The stripe holding `key`, and the key's hash (whose top bits chose
    /// the stripe, and whose low bits are its doorkeeper bit).
    fn stripe(&self, key: &[u8]) -> (&parking_lot::Mutex<Stripe>, u64) {
        let h = self.hasher.hash_one(key);
        (&self.stripes[(h >> 58) as usize % STRIPES], h)
    }

    /// The row `key` of `table` the tables held in `epoch`, if cached.
    pub fn get(&self, epoch: u64, table: Table, key: &[u8]) -> Option<Vec<u8>> {
        let t = cached(table)?;
        let mut stripe = self.stripe(key).0.lock();
        let c = stripe.rows[t].get_mut(key)?;
        if c.since() > epoch {
            return None;
        }
        c.touch();
        Some(c.row().to_vec())
    }

    /// Loads the slot of `key` of `table` into the cache without reading
    /// the row out (see `buffer::warm_layers`); whether it holds the row,
    /// for any epoch.
    pub fn warm(&self, table: Table, key: &[u8]) -> bool {
        let Some(t) = cached(table) else {
            return false;
        };
        let stripe = self.stripe(key).0.lock();
        if let Some(c) = stripe.rows[t].get(key) {
            std::hint::black_box(c.mark);
            return true;
        }
        false
    }

    /// Remembers the row `key` a reader of `epoch` found in the tables,
    /// if the tables have not changed since and this is not the first
    /// time lately that it was offered. A full stripe first drops the
    /// rows not read lately (see [`Stripe::evict`]).
    pub fn put(&self, epoch: u64, table: Table, key: &[u8], row: &[u8]) {
        let Some(t) = cached(table) else {
            return;
        };
        if row.len() > MAX_ROW || !epoch.is_multiple_of(2) {
            return;
        }
        let (stripe, h) = self.stripe(key);
        let mut stripe = stripe.lock();
        // Read under the stripe's lock, which a change takes after making
        // the epoch odd: either this row goes in first and the change
        // rewrites it, or this sees the epoch moved and stays out.
        if self.epoch.load(Ordering::Acquire) != epoch || !stripe.seen_before(h) {
            return;
        }
        stripe.add(t, key, Cached::new(epoch, row), self.stripe_bytes);
    }

    /// Starts a change of the tables: from now until
    /// [`end_change`](Self::end_change), no reader adds a row.
    pub fn begin_change(&self) -> Change<'_> {
        let alone = self.changing.lock();
        let odd = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        Change {
            next: odd + 1,
            _alone: alone,
        }
    }

    /// Notes that the change made `key`'s row in `table` `row` (`None`:
    /// removed, or stored in another form than the one written): a cached
    /// row is replaced, for readers of the change's epoch on, or dropped.
    pub fn rewrite(&self, change: &Change, table: Table, key: &[u8], row: Option<&[u8]>) {
        let Some(t) = cached(table) else {
            return;
        };
        let (stripe, h) = self.stripe(key);
        let mut stripe = stripe.lock();
        let Some(c) = stripe.rows[t].get_mut(key) else {
            // A row offered once lately and now rewritten (read, then
            // written back: INCR, HSET of a field) goes in: the first
            // reads after a write-out would otherwise each miss, and the
            // second one only offer it again.
            if let Some(row) = row.filter(|r| r.len() <= MAX_ROW && stripe.seen(h)) {
                stripe.add(t, key, Cached::new(change.next, row), self.stripe_bytes);
            }
            return;
        };
        let old = cost(key, c.row());
        match row.filter(|r| r.len() <= MAX_ROW) {
            Some(row) => {
                if c.row() != row {
                    c.row = Stored::of(row);
                }
                // Its reads so far still count for its stay.
                c.mark = change.next | (c.mark & 1);
                let new = cost(key, row);
                stripe.bytes = stripe.bytes + new - old;
            }
            None => {
                stripe.rows[t].remove(key);
                stripe.bytes -= old;
            }
        }
    }

    /// Forgets every row: the change's rows are not known one by one.
    pub fn clear(&self, _change: &Change) {
        self.stripes.iter().for_each(|s| s.lock().clear());
    }

    /// Ends a change (under the view lock, where readers take the epoch
    /// with their snapshot): readers from now on read the changed tables
    /// and may add rows again.
    pub fn end_change(&self, change: Change<'_>) {
        self.epoch.store(change.next, Ordering::Release);
    }

    /// Bytes of rows held (INFO cairn's `row_cache_bytes`).
    pub fn bytes(&self) -> usize {
        self.stripes.iter().map(|s| s.lock().bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: Table = Table::Meta;

    /// Offers a row twice: the doorkeeper lets it in the second time.
    fn fill(c: &RowCache, epoch: u64, table: Table, key: &[u8], row: &[u8]) {
        c.put(epoch, table, key, row);
        c.put(epoch, table, key, row);
    }

    #[test]
    fn a_row_is_cached_the_second_time_it_is_offered() {
        let c = RowCache::new(1 << 20);
        let e = c.epoch();
        c.put(e, M, b"k", b"v");
        assert_eq!(c.get(e, M, b"k"), None);
        c.put(e, M, b"k", b"v");
        assert_eq!(c.get(e, M, b"k").as_deref(), Some(&b"v"[..]));
    }

    #[test]
    fn tables_are_apart_and_scanned_ones_stay_out() {
        let c = RowCache::new(1 << 20);
        let e = c.epoch();
        fill(&c, e, Table::Meta, b"k", b"meta");
        fill(&c, e, Table::Sub, b"k", b"sub");
        fill(&c, e, Table::Ttl, b"k", b"ttl");
        assert_eq!(c.get(e, Table::Meta, b"k").as_deref(), Some(&b"meta"[..]));
        assert_eq!(c.get(e, Table::Sub, b"k").as_deref(), Some(&b"sub"[..]));
        assert_eq!(c.get(e, Table::Ttl, b"k"), None);
    }

    #[test]
    fn a_change_rewrites_its_rows_for_its_readers_and_keeps_the_others() {
        let c = RowCache::new(1 << 20);
        let e = c.epoch();
        fill(&c, e, M, b"changed", b"v1");
        fill(&c, e, M, b"kept", b"k1");
        fill(&c, e, M, b"deleted", b"d1");
        let change = c.begin_change();
        // While the tables change, nobody adds a row: a reader of the old
        // epoch may have read one the change is replacing.
        fill(&c, e, M, b"late", b"old");
        fill(&c, c.epoch(), M, b"late", b"old");
        c.rewrite(&change, M, b"changed", Some(b"v2"));
        c.rewrite(&change, M, b"deleted", None);
        c.rewrite(&change, M, b"never cached", Some(b"x"));
        // Readers of the old epoch keep what the old tables held.
        assert_eq!(c.get(e, M, b"changed"), None);
        assert_eq!(c.get(e, M, b"kept").as_deref(), Some(&b"k1"[..]));
        c.end_change(change);
        let n = c.epoch();
        assert!(n > e && n.is_multiple_of(2));
        assert_eq!(c.get(n, M, b"changed").as_deref(), Some(&b"v2"[..]));
        assert_eq!(c.get(n, M, b"kept").as_deref(), Some(&b"k1"[..]));
        assert_eq!(c.get(n, M, b"deleted"), None);
        assert_eq!(c.get(n, M, b"late"), None);
        assert_eq!(c.get(n, M, b"never cached"), None);
        assert_eq!(c.get(e, M, b"changed"), None, "not the old tables' row");
        // A late put of the old epoch is refused; the new one's are kept.
        fill(&c, e, M, b"late", b"old");
        assert_eq!(c.get(n, M, b"late"), None);
        fill(&c, n, M, b"late", b"new");
        assert_eq!(c.get(n, M, b"late").as_deref(), Some(&b"new"[..]));
        assert_eq!(c.get(e, M, b"late"), None);
    }

    #[test]
    fn a_change_caches_a_row_offered_once_that_it_rewrote() {
        let c = RowCache::new(1 << 20);
        let e = c.epoch();
        // Read from the tables once (an INCR's read), so not cached yet...
        c.put(e, M, b"counter", b"1");
        c.put(e, M, b"counter too long", b"1");
        assert_eq!(c.get(e, M, b"counter"), None);
        // ...then written back and written out.
        let change = c.begin_change();
        c.rewrite(&change, M, b"counter", Some(b"2"));
        c.rewrite(&change, M, b"never read", Some(b"x"));
        c.rewrite(&change, M, b"counter too long", Some(&[0; MAX_ROW + 1]));
        c.end_change(change);
        let n = c.epoch();
        assert_eq!(c.get(n, M, b"counter").as_deref(), Some(&b"2"[..]));
        assert_eq!(c.get(e, M, b"counter"), None, "not the old tables' row");
        assert_eq!(c.get(n, M, b"never read"), None);
        assert_eq!(c.get(n, M, b"counter too long"), None);
    }

    #[test]
    fn a_change_of_unknown_rows_forgets_them_all() {
        let c = RowCache::new(1 << 20);
        let e = c.epoch();
        fill(&c, e, M, b"a", b"1");
        fill(&c, e, Table::Sub, b"b", b"2");
        let change = c.begin_change();
        c.clear(&change);
        c.end_change(change);
        assert_eq!(c.bytes(), 0);
        assert_eq!(c.get(c.epoch(), M, b"a"), None);
        assert_eq!(c.get(c.epoch(), Table::Sub, b"b"), None);
    }

    #[test]
    fn the_byte_count_follows_rewrites() {
        let c = RowCache::new(1 << 20);
        let e = c.epoch();
        fill(&c, e, M, b"k", b"short");
        let one = c.bytes();
        fill(&c, e, M, b"k", b"short");
        assert_eq!(c.bytes(), one, "a row put again is counted once");
        let change = c.begin_change();
        c.rewrite(&change, M, b"k", Some(b"a longer row"));
        assert_eq!(c.bytes(), one, "a short row sits in the slot");
        let long = [7; 40];
        c.rewrite(&change, M, b"k", Some(&long));
        assert_eq!(c.bytes(), one + 40, "a long one has bytes of its own");
        c.rewrite(&change, M, b"k", Some(&[0; MAX_ROW + 1]));
        assert_eq!(c.bytes(), 0, "a row grown too long is dropped");
        c.end_change(change);
    }

    #[test]
    fn a_full_stripe_keeps_the_rows_read_since_its_last_eviction() {
        // 27 rows a stripe, 1,728 in all.
        let cap = STRIPES * 27 * cost(&[0; 4], b"value");
        let c = RowCache::new(cap);
        let e = c.epoch();
        let key = |i: u32| i.to_be_bytes();
        // A quarter of the cache, read between evictions...
        let hot = 0..400;
        hot.clone().for_each(|h| fill(&c, e, M, &key(h), b"value"));
        let mut cold = 1000..;
        for round in 0..8 {
            for h in hot.clone() {
                assert!(c.get(e, M, &key(h)).is_some(), "round {round}: {h} kept");
            }
            // ...and rows offered twice and never read again, about a
            // stripe's free room each round: over the rounds, every
            // stripe fills and evicts.
            for i in cold.by_ref().take(500) {
                fill(&c, e, M, &key(i), b"value");
            }
            assert!(c.bytes() <= cap);
        }
        assert!(c.bytes() < 1000 * cost(&key(0), b"value"), "cold rows went");
    }

    #[test]
    fn a_full_stripe_makes_room_and_long_rows_stay_out() {
        let c = RowCache::new(STRIPES * 200);
        let e = c.epoch();
        for i in 0..1000u32 {
            fill(&c, e, M, &i.to_be_bytes(), b"value");
            assert!(c.bytes() <= STRIPES * 200);
        }
        assert_eq!(
            c.get(e, M, &999u32.to_be_bytes()).as_deref(),
            Some(&b"value"[..])
        );
        fill(&c, e, M, b"long", &[0; MAX_ROW + 1]);
        assert_eq!(c.get(e, M, b"long"), None);
    }
}

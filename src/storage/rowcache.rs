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
//! What keeps it right is an epoch. The background writer, the only writer
//! of the tables, moves it on, under the view lock, after each of its
//! commits; a reader takes it with its redb snapshot, under the same lock,
//! and uses the cache only while the epoch is the same. Readers of one
//! epoch may hold redb snapshots on either side of the commit that ends it,
//! and they agree on every row they read from the tables: a write-out
//! changes only the rows of the buffer it writes, which stays in the view
//! until after the epoch has moved, so those readers find such rows in
//! that buffer and never ask the tables; a value log collection changes
//! only where a value lies, and until the epoch moves they can read both
//! places. A reader of an older epoch neither reads nor fills the cache.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use super::tables::Table;

/// Independent locks, so readers on several threads rarely meet.
const STRIPES: usize = 64;

/// Rows longer than this are not cached: a value that long is read rarely
/// enough, next to its own copy, that the descent does not matter.
const MAX_ROW: usize = 512;

/// What a cached row costs beyond its key and value (the map's entry and
/// two allocations), for the byte count.
const ROW_OVERHEAD: usize = 64;

/// See the module doc.
pub struct RowCache {
    epoch: AtomicU64,
    stripes: Box<[parking_lot::Mutex<Stripe>]>,
    stripe_bytes: usize,
    hasher: foldhash::fast::FixedState,
}

/// One table's cached rows, by key.
type Rows = HashMap<Box<[u8]>, Box<[u8]>, foldhash::fast::FixedState>;

/// One lock's part of the rows, all of epoch `epoch`: per cached table
/// (see [`cached`]), its rows by key.
#[derive(Default)]
struct Stripe {
    epoch: u64,
    rows: [Rows; 2],
    bytes: usize,
}

impl Stripe {
    fn clear(&mut self) {
        self.rows.iter_mut().for_each(HashMap::clear);
        self.bytes = 0;
    }
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

impl RowCache {
    /// A cache of at most `bytes` of rows.
    pub fn new(bytes: usize) -> RowCache {
        RowCache {
            epoch: AtomicU64::new(0),
            stripes: (0..STRIPES).map(|_| Default::default()).collect(),
            stripe_bytes: bytes / STRIPES,
            hasher: foldhash::fast::FixedState::with_seed(0x726f_7773),
        }
    }

    /// The current epoch: taken by a reader with its snapshot.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Ends the epoch: the tables have changed (called under the view
    /// lock, after the commit).
    pub fn next_epoch(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    fn stripe(&self, key: &[u8]) -> &parking_lot::Mutex<Stripe> {
        let h = self.hasher.hash_one(key);
        &self.stripes[(h >> 58) as usize % STRIPES]
    }

    /// The row `key` of `table` the tables held in `epoch`, if cached and
    /// `epoch` is still the current one.
    pub fn get(&self, epoch: u64, table: Table, key: &[u8]) -> Option<Vec<u8>> {
        let t = cached(table)?;
        if epoch != self.epoch() {
            return None;
        }
        let stripe = self.stripe(key).lock();
        if stripe.epoch != epoch {
            return None;
        }
        stripe.rows[t].get(key).map(|v| v.to_vec())
    }

    /// Remembers the row `key` a reader of `epoch` found in the tables.
    /// A full stripe starts over: the rows read most come back first.
    pub fn put(&self, epoch: u64, table: Table, key: &[u8], row: &[u8]) {
        let Some(t) = cached(table) else {
            return;
        };
        if row.len() > MAX_ROW || epoch != self.epoch() {
            return;
        }
        let cost = key.len() + row.len() + ROW_OVERHEAD;
        let mut stripe = self.stripe(key).lock();
        if stripe.epoch != epoch {
            // Only a reader that saw the epoch move gets here with a newer
            // one; an older one found it current above, then lost a race
            // with the move, and its row may be stale.
            if stripe.epoch > epoch {
                return;
            }
            stripe.clear();
            stripe.epoch = epoch;
        }
        if stripe.bytes + cost > self.stripe_bytes {
            stripe.clear();
        }
        if stripe.rows[t].insert(key.into(), row.into()).is_none() {
            stripe.bytes += cost;
        }
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

    #[test]
    fn tables_are_apart_and_scanned_ones_stay_out() {
        let c = RowCache::new(1 << 20);
        let e = c.epoch();
        c.put(e, Table::Meta, b"k", b"meta");
        c.put(e, Table::Sub, b"k", b"sub");
        c.put(e, Table::Ttl, b"k", b"ttl");
        assert_eq!(c.get(e, Table::Meta, b"k").as_deref(), Some(&b"meta"[..]));
        assert_eq!(c.get(e, Table::Sub, b"k").as_deref(), Some(&b"sub"[..]));
        assert_eq!(c.get(e, Table::Ttl, b"k"), None);
    }

    #[test]
    fn rows_serve_their_epoch_only() {
        let c = RowCache::new(1 << 20);
        let e = c.epoch();
        assert_eq!(c.get(e, M, b"k"), None);
        c.put(e, M, b"k", b"v1");
        assert_eq!(c.get(e, M, b"k").as_deref(), Some(&b"v1"[..]));
        c.next_epoch();
        // The old epoch's readers and the new one's see nothing cached.
        assert_eq!(c.get(e, M, b"k"), None);
        assert_eq!(c.get(e + 1, M, b"k"), None);
        // A late put of the old epoch is refused.
        c.put(e, M, b"k", b"v1");
        assert_eq!(c.get(e + 1, M, b"k"), None);
        c.put(e + 1, M, b"k", b"v2");
        assert_eq!(c.get(e + 1, M, b"k").as_deref(), Some(&b"v2"[..]));
    }

    #[test]
    fn a_full_stripe_starts_over_and_long_rows_stay_out() {
        let c = RowCache::new(STRIPES * 200);
        let e = c.epoch();
        for i in 0..1000u32 {
            c.put(e, M, &i.to_be_bytes(), b"value");
            assert!(c.bytes() <= STRIPES * 200);
        }
        assert_eq!(
            c.get(e, M, &999u32.to_be_bytes()).as_deref(),
            Some(&b"value"[..])
        );
        c.put(e, M, b"long", &[0; MAX_ROW + 1]);
        assert_eq!(c.get(e, M, b"long"), None);
    }
}

//! A Bloom filter of the rows in a shard's redb tables, so that a point
//! read of a row the tables do not hold (SADD of a new member, SET of a
//! new key, GET of a missing one) is answered without descending redb's
//! B-tree: under SADD at pipeline 16 that descent was 29% of the server's
//! CPU, most of it for members the set did not have yet.
//!
//! The filter is blocked: a row's bits all lie in one 64-byte block, so a
//! probe touches one cache line. With ten bits per row it answers "maybe"
//! for about 1% of absent rows, which then read the tables as before.
//!
//! It covers the `meta` and `sub` tables only, the ones read a row at a
//! time by key; the others are scanned, and their rows would only make
//! the filter bigger and the background writer slower.
//!
//! Rows are only ever added (by the background writer, before the commit
//! that puts them into the tables: a reader whose redb snapshot holds a
//! row finds its bits set). Deleted rows stay in the filter as false
//! positives until it is rebuilt from a scan of the tables, which the
//! background writer does once enough new rows have been added, or once
//! reads of deleted rows it still holds have cost more than a rebuild
//! (see [`KeyFilter::wants_rebuild`]), sized for four times the rows it
//! found.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::tables::Table;
use crate::util::stripe::Striped;

/// Bits per row the filter is sized for: about 1% false positives.
const BITS_PER_ROW: usize = 10;

/// Bits set per row, each in the row's block.
const PROBES: u32 = 7;

/// Missed reads below which they never ask for a rebuild: each rebuild
/// allocates a whole filter (see [`KeyFilter::wants_rebuild`]).
const REBUILD_MIN_MISSES: usize = 4096;

/// One cache line of bits.
type Block = [AtomicU64; 8];

/// A Bloom filter of (table, row key) pairs (see the module doc).
pub struct KeyFilter {
    blocks: Box<[Block]>,
    hasher: foldhash::fast::RandomState,
    /// Rows the filter holds at about 1% false positives.
    capacity: usize,
    /// Rows the tables held when the filter was built.
    built_with: usize,
    /// Rows added since that set at least one new bit: rows new to the
    /// filter (a rewritten row sets none).
    added: AtomicUsize,
    /// Rows the filter may hold that were deleted from the tables since
    /// the build: each reads as present until the next build.
    removed: AtomicUsize,
    /// Reads the filter let through that found no row: false positives,
    /// counted by the readers (a line per thread: they are many).
    misses: Striped,
}

impl std::fmt::Debug for KeyFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyFilter")
            .field("bytes", &self.bytes())
            .field("capacity", &self.capacity)
            .field("built_with", &self.built_with)
            .field("added", &self.added.load(Ordering::Relaxed))
            .field("removed", &self.removed.load(Ordering::Relaxed))
            .field("misses", &self.misses.load())
            .finish()
    }
}

impl KeyFilter {
    /// An empty filter for a shard whose tables hold `rows` rows, with
    /// room for four times as many and at least `min_rows`, in at most
    /// `max_bytes`. (Sized for twice the rows, it was rebuilt so often
    /// under LPUSH at pipeline 16 that the rebuilds' scans were 15% of
    /// the background writer's time.)
    pub fn new(rows: usize, min_rows: usize, max_bytes: usize) -> KeyFilter {
        let want = rows.saturating_mul(4).max(min_rows);
        let bits = want.saturating_mul(BITS_PER_ROW).min(max_bytes * 8);
        let n = bits.div_ceil(512).max(1);
        KeyFilter {
            blocks: (0..n).map(|_| Default::default()).collect(),
            hasher: Default::default(),
            capacity: n * 512 / BITS_PER_ROW,
            built_with: rows,
            added: AtomicUsize::new(0),
            removed: AtomicUsize::new(0),
            misses: Striped::default(),
        }
    }

    /// Forgets the rows added so far as new: the build's own, which the
    /// rebuild rule counts as `built_with` instead.
    pub fn count_from_here(&self) {
        self.added.store(0, Ordering::Relaxed);
    }

    /// Whether the filter answers for `table`'s rows.
    pub fn covers(table: Table) -> bool {
        matches!(table, Table::Meta | Table::Sub)
    }

    /// Memory the filter's bits take.
    pub fn bytes(&self) -> usize {
        self.blocks.len() * std::mem::size_of::<Block>()
    }

    /// The row's block and the bits it sets there, one word at a time.
    fn locate(&self, table: Table, key: &[u8]) -> (&Block, [u64; 8]) {
        let h = self.hasher.hash_one((table as u8, key));
        // The high half of a 128-bit product picks the block without a
        // division; a second mix of the hash picks the bits.
        let block = ((h as u128 * self.blocks.len() as u128) >> 64) as usize;
        let mut g = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        g ^= g >> 33;
        let mut masks = [0u64; 8];
        for i in 0..PROBES {
            let bit = (g >> (i * 9)) & 511;
            masks[(bit >> 6) as usize] |= 1 << (bit & 63);
        }
        (&self.blocks[block], masks)
    }

    /// Asks for the block of a row of a covered table to be brought into
    /// the cache, without waiting: the background writer does so some rows
    /// before it inserts or asks after each (see `Store::write_out_with`).
    pub fn prefetch(&self, table: Table, key: &[u8]) {
        crate::util::prefetch(self.locate(table, key).0);
    }

    /// Adds a row of a covered table; true if the filter did not hold it
    /// (a bit was new). Only one thread adds to a filter (the background
    /// writer, or whoever builds it before anyone sees it), so a plain
    /// load and store set the bits: no read-modify-write is needed
    /// against other writers, and readers see each word old or new.
    pub fn insert(&self, table: Table, key: &[u8]) -> bool {
        debug_assert!(Self::covers(table));
        let (block, masks) = self.locate(table, key);
        let mut new = false;
        for (word, mask) in block.iter().zip(masks) {
            let old = word.load(Ordering::Relaxed);
            if old & mask != mask {
                word.store(old | mask, Ordering::Relaxed);
                new = true;
            }
        }
        if new {
            self.added.fetch_add(1, Ordering::Relaxed);
        }
        new
    }

    /// False if the tables surely hold no such row (as of any redb
    /// snapshot begun after the filter was taken: see `store`); true for
    /// every row of a table the filter does not cover.
    pub fn may_contain(&self, table: Table, key: &[u8]) -> bool {
        if !Self::covers(table) {
            return true;
        }
        let (block, masks) = self.locate(table, key);
        block
            .iter()
            .zip(masks)
            .all(|(word, mask)| word.load(Ordering::Relaxed) & mask == mask)
    }

    /// Counts a row of a covered table that the filter may hold deleted
    /// from the tables (by the background writer, as it deletes it).
    pub fn removed(&self) {
        self.removed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a read that [`KeyFilter::may_contain`] let through and the
    /// tables then answered with no row.
    pub fn missed(&self) {
        self.misses.add(1);
    }

    /// Whether a rebuild now pays for itself.
    ///
    /// Rows added: past its capacity (false positives climb over 1%), and
    /// never before as many rows were added as the build scanned, so that
    /// scanning costs at most one row read per row added.
    ///
    /// Rows deleted: a deleted row reads as present until the next build,
    /// and each read of one descends the B-tree for nothing (SPOP draws
    /// members at random, and as it empties a set most draws land on
    /// members it popped: see `families/collection/pick.rs`). A rebuild
    /// scans every row the tables hold, about an eighth of a descent
    /// each, so it is wanted once reads have missed an eighth as many
    /// times as the filter holds rows, and deleted rows are a sixteenth
    /// of them at least: enough to be what misses (the filter's own false
    /// positives, 1% of absent rows, a rebuild would not lessen). Deleted
    /// rows nobody reads (a list popped down) never ask for one.
    pub fn wants_rebuild(&self) -> bool {
        let added = self.added.load(Ordering::Relaxed);
        let held = self.built_with + added;
        if added
            > self
                .capacity
                .saturating_sub(self.built_with)
                .max(self.built_with)
        {
            return true;
        }
        let removed = self.removed.load(Ordering::Relaxed);
        let misses = self.misses.load() as usize;
        misses >= REBUILD_MIN_MISSES
            && misses.saturating_mul(8) >= held
            && removed.saturating_mul(16) >= held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row added is found; rows never added are mostly not, at
    /// about the rate the filter is sized for.
    #[test]
    fn added_rows_are_found_and_absent_ones_rarely() {
        let f = KeyFilter::new(25_000, 0, 1 << 20);
        // A new row whose bits all happen to be set already reads as old.
        let new = (0..100_000u32)
            .filter(|i| f.insert(Table::Sub, &i.to_be_bytes()))
            .count();
        assert!(new > 99_000, "{new} rows counted new");
        for i in 0..100_000u32 {
            assert!(f.may_contain(Table::Sub, &i.to_be_bytes()));
        }
        let false_hits = (100_000..200_000u32)
            .filter(|i| f.may_contain(Table::Sub, &i.to_be_bytes()))
            .count();
        assert!(false_hits < 2_000, "{false_hits} false positives");
        // The same key in another table is another row.
        let other = (0..10_000u32)
            .filter(|i| f.may_contain(Table::Meta, &i.to_be_bytes()))
            .count();
        assert!(other < 200, "{other} false positives across tables");
        // Tables it does not cover may hold anything.
        assert!(f.may_contain(Table::Ttl, b"never added"));
    }

    /// Adding a row again sets no bit, so rewrites do not count toward a
    /// rebuild; new rows past the capacity do.
    #[test]
    fn rebuilds_are_wanted_after_enough_new_rows() {
        let f = KeyFilter::new(0, 1 << 16, 1 << 20);
        assert_eq!(f.capacity, 1 << 16);
        assert!(f.insert(Table::Meta, b"k"));
        assert!(!f.insert(Table::Meta, b"k"));
        let mut i = 0u32;
        while !f.wants_rebuild() {
            f.insert(Table::Meta, &i.to_be_bytes());
            i += 1;
        }
        assert!(i as usize >= f.capacity - 1);
    }

    /// Deleted rows ask for a rebuild only once reads miss on them: an
    /// eighth as many misses as rows held, deleted rows a sixteenth of
    /// them, and `REBUILD_MIN_MISSES` misses at least.
    #[test]
    fn rebuilds_are_wanted_once_reads_miss_on_deleted_rows() {
        // Whether a filter built with `rows` wants a rebuild after
        // `removed` deletions and `misses` missed reads.
        let wants = |rows: usize, removed: usize, misses: usize| {
            let f = KeyFilter::new(rows, 1 << 16, 1 << 20);
            (0..removed).for_each(|_| f.removed());
            (0..misses).for_each(|_| f.missed());
            f.wants_rebuild()
        };
        // Deleted rows nobody reads ask for nothing.
        assert!(!wants(80_000, 40_000, 0));
        assert!(!wants(80_000, 40_000, 9_999));
        assert!(wants(80_000, 40_000, 10_000));
        // Misses with few deleted rows are the filter's own false
        // positives, which a rebuild would not lessen.
        assert!(!wants(80_000, 4_999, 80_000));
        assert!(wants(80_000, 5_000, 80_000));
        // A small table asks only from `REBUILD_MIN_MISSES` misses.
        assert!(!wants(100, 10, REBUILD_MIN_MISSES - 1));
        assert!(wants(100, 10, REBUILD_MIN_MISSES));
    }

    /// The size cap holds: a filter for more rows than it has room for
    /// still answers, with more false positives.
    #[test]
    fn the_size_cap_holds() {
        let f = KeyFilter::new(10_000_000, 0, 4096);
        assert_eq!(f.bytes(), 4096);
        assert!(f.insert(Table::Sub, b"x"));
        assert!(f.may_contain(Table::Sub, b"x"));
    }
}

//! A dense run: a frozen write buffer's final state, packed.
//!
//! A frozen [`Buffer`] keeps each row in its row map (a 128-byte entry:
//! hash, inline key, versions) and, once a scan asked, in an ordered
//! index: about 200 bytes a row before its key and value. Once no new
//! snapshot can need a row's older versions (every snapshot taken after
//! the buffer froze reads past its last commit), its newest versions are
//! all that is left to read, and they pack into one sorted run: keys and
//! values back to back in two byte vectors, a row's ends in a third, and
//! a hash table of row positions for point reads. A row of ZADD's (a
//! 40-byte key, a short value) takes ~70 bytes there.
//!
//! The point (DESIGN-NOTES, "Session 65" and "Session 66"): the background
//! writer's cost for rows at random places of a big table falls as a
//! write-out carries more rows, since each leaf it rewrites is then shared
//! by more of them. Runs hold frozen rows in a third of the memory, so
//! several can wait and go into one write-out together within the same
//! cap (`store`), merged into one pass in key order ([`merged`]); while
//! they wait, they are merged into one run ([`Run::merge`]) so that a
//! read probes few of them.

use std::hash::BuildHasher;
use std::ops::Bound;

use super::buffer::{in_range, Buffer, Change, KeyRange, RowSizes};
use super::tables::Table;

/// One table's rows in a run.
#[derive(Default)]
struct Dense {
    /// Every row's key, in key order, back to back.
    keys: Vec<u8>,
    /// Every row's value, back to back (a deleted row's is empty).
    values: Vec<u8>,
    /// Per row: where its key ends in `keys`, and its value in `values`.
    ends: Vec<(u32, u32)>,
    /// Which rows are deleted, a bit each: they keep their place, as they
    /// hide the rows of older layers.
    gone: Vec<u64>,
    /// Open addressing over rows, sized to a power of two at least half
    /// as large again as the rows: each slot holds a row's position plus
    /// one (0 = empty) in its low half and the high half of the key's
    /// hash in its high half. Most keys a run does not hold are told so
    /// by the slots alone: a read that no buffer answers probes every run
    /// first, and comparing keys there cost a cache miss in `ends` and
    /// another in `keys` per row met.
    slots: Box<[u64]>,
    /// Deleted ranges of older layers, oldest first.
    ranges: Vec<KeyRange>,
}

impl Dense {
    /// An empty table with room for the rows and bytes `size` counts.
    fn with_room(size: RowSizes) -> Dense {
        Dense {
            keys: Vec::with_capacity(size.key_bytes),
            values: Vec::with_capacity(size.value_bytes),
            ends: Vec::with_capacity(size.rows),
            gone: Vec::with_capacity(size.rows.div_ceil(64)),
            ..Dense::default()
        }
    }

    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 {
            0
        } else {
            self.ends[i - 1].0 as usize
        };
        &self.keys[start..self.ends[i].0 as usize]
    }

    fn value(&self, i: usize) -> Option<&[u8]> {
        if self.gone[i / 64] & (1 << (i % 64)) != 0 {
            return None;
        }
        let start = if i == 0 {
            0
        } else {
            self.ends[i - 1].1 as usize
        };
        Some(&self.values[start..self.ends[i].1 as usize])
    }

    /// The first row whose key satisfies `past` (a predicate false for
    /// a prefix of the rows and true after), or the row count.
    fn first_where(&self, past: impl Fn(&[u8]) -> bool) -> usize {
        let (mut a, mut b) = (0, self.ends.len());
        while a < b {
            let mid = (a + b) / 2;
            if past(self.key(mid)) {
                b = mid;
            } else {
                a = mid + 1;
            }
        }
        a
    }

    fn position(&self, hasher: &foldhash::fast::FixedState, key: &[u8]) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let hash = hasher.hash_one(key);
        let tag = hash >> 32;
        let mut at = hash as usize & mask;
        loop {
            let slot = self.slots[at];
            if slot == 0 {
                return None;
            }
            let p = (slot as u32 as usize).wrapping_sub(1);
            if slot >> 32 == tag && self.key(p) == key {
                return Some(p);
            }
            at = (at + 1) & mask;
        }
    }

    /// Appends a row after the last (`None`: deleted).
    fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        let i = self.ends.len();
        if i.is_multiple_of(64) {
            self.gone.push(0);
        }
        match value {
            Some(v) => self.values.extend_from_slice(v),
            None => self.gone[i / 64] |= 1 << (i % 64),
        }
        self.keys.extend_from_slice(key);
        self.ends
            .push((len32(self.keys.len()), len32(self.values.len())));
    }

    fn index(&mut self, hasher: &foldhash::fast::FixedState) {
        let rows = self.ends.len();
        let n = (rows + rows / 2 + 1).next_power_of_two();
        let mut slots = vec![0u64; n].into_boxed_slice();
        let mask = n - 1;
        for i in 0..rows {
            let hash = hasher.hash_one(self.key(i));
            let mut at = hash as usize & mask;
            while slots[at] != 0 {
                at = (at + 1) & mask;
            }
            slots[at] = (hash >> 32) << 32 | u64::from(len32(i + 1));
        }
        self.slots = slots;
    }

    fn bytes(&self) -> usize {
        self.keys.capacity()
            + self.values.capacity()
            + self.ends.capacity() * std::mem::size_of::<(u32, u32)>()
            + self.gone.capacity() * 8
            + self.slots.len() * std::mem::size_of::<u64>()
            + self
                .ranges
                .iter()
                .map(|(s, e)| s.len() + e.as_ref().map_or(0, Vec::len) + 48)
                .sum::<usize>()
    }
}

/// An offset into a run's bytes: a buffer's are far below 4 GiB (its cap).
fn len32(n: usize) -> u32 {
    u32::try_from(n).expect("a run under 4 GiB")
}

/// A frozen buffer's final state, packed (see the module doc).
pub struct Run {
    tables: Vec<Dense>,
    hasher: foldhash::fast::FixedState,
    /// The log generation of the buffer it was made from.
    pub gen: u64,
    /// The sequence number of that buffer's last commit.
    pub last_seq: u64,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("gen", &self.gen)
            .field("last_seq", &self.last_seq)
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl Run {
    /// The final state of `buf`, a frozen buffer.
    pub fn of(buf: &Buffer) -> Run {
        // Room for every row at once: grown by doubling, each regrowth
        // copied what the table held so far into fresh pages the kernel
        // zeroed (the packer's reallocations were 2.8% of the server's
        // samples under SADD at pipeline 16).
        let mut tables: Vec<Dense> = buf
            .sizes()
            .iter()
            .map(|size| Dense::with_room(*size))
            .collect();
        buf.for_each_table(&mut |t, changes| {
            let d = &mut tables[t as usize];
            for change in changes {
                match change {
                    Change::Range(_, start, end) => {
                        d.ranges.push((start.to_vec(), end.map(<[u8]>::to_vec)));
                    }
                    Change::Row(_, key, value) => d.push(key, value),
                }
            }
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap_or_else(|never| match never {});
        Run::sealed(tables, buf.gen, buf.last_seq())
    }

    /// The final state of `runs` (oldest first) in one run, as the runs
    /// applied one after another leave it; `None` if any holds deleted
    /// ranges (see [`merged`]).
    pub fn merge(runs: &[&Run]) -> Option<Run> {
        let last = runs.last()?;
        if runs.iter().any(|r| r.has_ranges()) {
            return None;
        }
        let tables = Table::ALL
            .iter()
            .map(|&t| {
                // Room for every row of every run, not grown by doubling
                // (each regrowth copied and faulted in fresh pages).
                let mut d = Dense::default();
                for r in runs {
                    let of = &r.tables[t as usize];
                    d.keys.reserve(of.keys.len());
                    d.values.reserve(of.values.len());
                    d.ends.reserve(of.ends.len());
                    d.gone.reserve(of.gone.len());
                }
                for (key, value) in merged(runs, t) {
                    d.push(key, value);
                }
                d
            })
            .collect();
        Some(Run::sealed(tables, last.gen, last.last_seq))
    }

    /// A run of `tables`, filled in key order: indexed, and trimmed to
    /// what they hold.
    fn sealed(mut tables: Vec<Dense>, gen: u64, last_seq: u64) -> Run {
        let hasher = foldhash::fast::FixedState::with_seed(0x72_75_6e);
        for d in &mut tables {
            d.index(&hasher);
            d.keys.shrink_to_fit();
            d.values.shrink_to_fit();
            d.ends.shrink_to_fit();
            d.gone.shrink_to_fit();
        }
        Run {
            tables,
            hasher,
            gen,
            last_seq,
        }
    }

    /// A row as this run leaves it: `Some(None)` if it deleted the row
    /// (itself, or by a deleted range), `None` if it says nothing of it.
    pub fn get(&self, table: Table, key: &[u8]) -> Option<Option<&[u8]>> {
        let d = &self.tables[table as usize];
        if let Some(i) = d.position(&self.hasher, key) {
            return Some(d.value(i));
        }
        let covered = d
            .ranges
            .iter()
            .any(|(start, end)| in_range(key, start, end.as_deref()));
        covered.then_some(None)
    }

    /// The run's rows of `table` within `bounds`, in key order (either
    /// way), deleted ones as `None`.
    pub fn range<'a>(
        &'a self,
        table: Table,
        (lo, hi): (Bound<&[u8]>, Bound<&[u8]>),
    ) -> impl DoubleEndedIterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
        let d = &self.tables[table as usize];
        let start = d.first_where(|k| match lo {
            Bound::Included(l) => k >= l,
            Bound::Excluded(l) => k > l,
            Bound::Unbounded => true,
        });
        let end = d.first_where(|k| match hi {
            Bound::Included(h) => k > h,
            Bound::Excluded(h) => k >= h,
            Bound::Unbounded => false,
        });
        (start..end.max(start)).map(move |i| (d.key(i), d.value(i)))
    }

    /// Every key of `table` the run holds (deleted rows' too), in order.
    pub fn keys(&self, table: Table) -> impl Iterator<Item = &[u8]> + '_ {
        let d = &self.tables[table as usize];
        (0..d.ends.len()).map(move |i| d.key(i))
    }

    /// Whether the run holds a row of `key` (written or deleted), its
    /// deleted ranges aside.
    pub fn holds(&self, table: Table, key: &[u8]) -> bool {
        self.tables[table as usize]
            .position(&self.hasher, key)
            .is_some()
    }

    /// Whether the run holds deleted ranges in any table.
    pub fn has_ranges(&self) -> bool {
        self.tables.iter().any(|d| !d.ranges.is_empty())
    }

    /// The deleted ranges of `table`, oldest first.
    pub fn ranges(&self, table: Table) -> &[KeyRange] {
        &self.tables[table as usize].ranges
    }

    /// Rows the run holds, over every table (deleted ones too).
    pub fn rows(&self) -> usize {
        self.tables.iter().map(|d| d.ends.len()).sum()
    }

    /// Memory the run holds.
    pub fn bytes(&self) -> usize {
        self.tables.iter().map(Dense::bytes).sum()
    }
}

/// The rows of `table` in `runs` (oldest first) merged into key order, as
/// the runs applied one after another would leave them: a row several
/// hold takes the newest one's value. Deleted ranges are not merged: a
/// caller with any takes the runs one by one.
pub fn merged<'a>(runs: &[&'a Run], table: Table) -> Merged<'a> {
    Merged {
        cursors: runs
            .iter()
            .map(|r| (&r.tables[table as usize], 0))
            .collect(),
    }
}

/// See [`merged`].
pub struct Merged<'a> {
    /// Each run's rows of the table, and the next one's position.
    cursors: Vec<(&'a Dense, usize)>,
}

impl<'a> Iterator for Merged<'a> {
    type Item = (&'a [u8], Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        // A handful of runs: a look at every head beats a heap.
        let mut best: Option<(&'a Dense, usize)> = None;
        for &(d, i) in &self.cursors {
            if i == d.ends.len() {
                continue;
            }
            // Ties go to the later (newer) run.
            if best.is_none_or(|(b, j)| d.key(i) <= b.key(j)) {
                best = Some((d, i));
            }
        }
        let (d, i) = best?;
        let key = d.key(i);
        for (c, at) in &mut self.cursors {
            if *at < c.ends.len() && c.key(*at) == key {
                *at += 1;
            }
        }
        Some((key, d.value(i)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::tables::RowOp;

    fn buffer_of(ops: &[(u64, RowOp)]) -> Buffer {
        let b = Buffer::new(7);
        for (seq, op) in ops {
            b.apply(*seq, vec![op.clone()], 0);
        }
        b
    }

    fn put(k: &str, v: &str) -> RowOp {
        RowOp::Put(Table::Sub, k.as_bytes().to_vec(), v.as_bytes().to_vec())
    }

    fn del(k: &str) -> RowOp {
        RowOp::Del(Table::Sub, k.as_bytes().to_vec())
    }

    /// A buffer's sizes count exactly the rows and bytes its pass hands
    /// on: the room a run reserves from them is the room it fills.
    #[test]
    fn a_buffers_sizes_are_what_its_pass_hands_on() {
        let b = buffer_of(&[
            (1, put("a", "1")),
            (2, put("bb", "22")),
            (3, put("a", "111")),
            (4, del("bb")),
            (5, del("zzz")),
        ]);
        let mut seen = [RowSizes::default(); 6];
        b.for_each_table(&mut |t, changes| {
            for change in changes {
                if let Change::Row(_, k, v) = change {
                    let size = &mut seen[t as usize];
                    size.rows += 1;
                    size.key_bytes += k.len();
                    size.value_bytes += v.map_or(0, <[u8]>::len);
                }
            }
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap_or_else(|never| match never {});
        assert_eq!(b.sizes(), seen);
        let want = RowSizes {
            rows: 3,
            key_bytes: 6,
            value_bytes: 3,
        };
        assert_eq!(b.sizes()[Table::Sub as usize], want);
        let run = Run::of(&b);
        let d = &run.tables[Table::Sub as usize];
        assert_eq!((d.keys.capacity(), d.values.capacity()), (6, 3));
        assert_eq!(d.ends.capacity(), 3);
    }

    /// A run answers every read as the buffer it was made from answers a
    /// reader past its last commit: rows, rewrites, deletions, rows of
    /// other layers it says nothing of.
    #[test]
    fn a_run_reads_as_its_buffer_did() {
        let b = buffer_of(&[
            (1, put("a", "1")),
            (2, put("b", "2")),
            (3, put("a", "11")),
            (4, del("b")),
            (5, put("c", "")),
            (6, del("z")),
        ]);
        let run = Run::of(&b);
        assert_eq!((run.gen, run.last_seq), (7, 6));
        for key in ["a", "b", "c", "d", "z"] {
            let want = b.get(Table::Sub, key.as_bytes(), u64::MAX);
            let got = run
                .get(Table::Sub, key.as_bytes())
                .map(|e| e.map(<[u8]>::to_vec));
            assert_eq!(got, want, "{key}");
        }
        assert_eq!(run.get(Table::Meta, b"a"), None);
        let all: Vec<(Vec<u8>, Option<Vec<u8>>)> = run
            .range(Table::Sub, (Bound::Unbounded, Bound::Unbounded))
            .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect();
        let pairs = |v: &[(&str, Option<&str>)]| -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
            v.iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
                .collect()
        };
        assert_eq!(
            all,
            pairs(&[("a", Some("11")), ("b", None), ("c", Some("")), ("z", None)])
        );
        let some: Vec<&[u8]> = run
            .range(Table::Sub, (Bound::Excluded(b"a"), Bound::Included(b"c")))
            .map(|(k, _)| k)
            .collect();
        assert_eq!(some, vec![&b"b"[..], b"c"]);
    }

    /// A deleted range hides what older layers hold inside it, and rows
    /// the buffer put there after it read as they were put.
    #[test]
    fn a_runs_deleted_ranges_hide_older_rows() {
        let b = buffer_of(&[
            (1, put("m1", "x")),
            (
                2,
                RowOp::DelRange(Table::Sub, b"m".to_vec(), Some(b"n".to_vec())),
            ),
            (3, put("m2", "y")),
        ]);
        let run = Run::of(&b);
        assert_eq!(run.get(Table::Sub, b"m1"), Some(None));
        assert_eq!(run.get(Table::Sub, b"m2"), Some(Some(&b"y"[..])));
        assert_eq!(run.get(Table::Sub, b"m9"), Some(None));
        assert_eq!(run.get(Table::Sub, b"n"), None);
        assert_eq!(run.ranges(Table::Sub).len(), 1);
    }

    /// Merged runs give each row once, in key order, with its newest
    /// value.
    #[test]
    fn merged_runs_keep_the_newest_row() {
        let old = Run::of(&buffer_of(&[
            (1, put("a", "1")),
            (2, put("c", "1")),
            (3, put("e", "1")),
        ]));
        let mid = Run::of(&buffer_of(&[(4, put("b", "2")), (5, del("c"))]));
        let new = Run::of(&buffer_of(&[
            (6, put("c", "3")),
            (7, put("e", "3")),
            (8, put("f", "3")),
        ]));
        let rows: Vec<(Vec<u8>, Option<Vec<u8>>)> = merged(&[&old, &mid, &new], Table::Sub)
            .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect();
        let want: Vec<(Vec<u8>, Option<Vec<u8>>)> = [
            ("a", Some("1")),
            ("b", Some("2")),
            ("c", Some("3")),
            ("e", Some("3")),
            ("f", Some("3")),
        ]
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
        .collect();
        assert_eq!(rows, want);
        let rows: Vec<Option<&[u8]>> = merged(&[&new, &mid], Table::Sub).map(|(_, v)| v).collect();
        assert_eq!(rows, vec![Some(&b"2"[..]), None, Some(b"3"), Some(b"3")]);
        assert_eq!(merged(&[&old, &new], Table::Meta).count(), 0);
    }

    /// Thousands of random keys: every one found where it was put, none
    /// found that was not, and the packed run far smaller than its buffer
    /// counts itself.
    #[test]
    fn a_run_packs_many_rows() {
        let ops: Vec<(u64, RowOp)> = (0..20_000u64)
            .map(|i| {
                let k = format!("element:{:012}", (i * 7_919) % 1_000_003);
                (i + 1, put(&k, "1.5"))
            })
            .collect();
        let b = buffer_of(&ops);
        let run = Run::of(&b);
        for (_, op) in &ops {
            let RowOp::Put(_, k, _) = op else {
                unreachable!()
            };
            assert_eq!(run.get(Table::Sub, k), Some(Some(&b"1.5"[..])));
        }
        assert_eq!(run.get(Table::Sub, b"element:x"), None);
        assert!(
            run.bytes() * 3 < b.bytes(),
            "run {} against buffer {}",
            run.bytes(),
            b.bytes()
        );
    }
}

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
//! The point (DESIGN-NOTES, "Session 65"): the background writer's cost
//! for rows at random places of a big table falls as a write-out carries
//! more rows, since each leaf it rewrites is then shared by more of them.
//! Runs hold frozen rows in a third of the memory, so two or three can
//! wait and go into one write-out together within the same cap.
//!
//! Not wired in yet: the view's layers, the writer's grouping and the
//! cap's accounting are the next steps (the plan in DESIGN-NOTES).

use std::hash::BuildHasher;
use std::ops::Bound;

use super::buffer::{Buffer, Change, KeyRange};
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
    /// Open addressing over row positions plus one (0 = empty), sized to a
    /// power of two at least twice the rows.
    slots: Box<[u32]>,
    /// Deleted ranges of older layers, oldest first.
    ranges: Vec<KeyRange>,
}

impl Dense {
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

    fn position(&self, hasher: &foldhash::fast::FixedState, key: &[u8]) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut at = hasher.hash_one(key) as usize & mask;
        loop {
            match self.slots[at] {
                0 => return None,
                p if self.key(p as usize - 1) == key => return Some(p as usize - 1),
                _ => at = (at + 1) & mask,
            }
        }
    }

    fn index(&mut self, hasher: &foldhash::fast::FixedState) {
        let n = (self.ends.len() * 2).next_power_of_two().max(2);
        let mut slots = vec![0u32; n].into_boxed_slice();
        let mask = n - 1;
        for i in 0..self.ends.len() {
            let mut at = hasher.hash_one(self.key(i)) as usize & mask;
            while slots[at] != 0 {
                at = (at + 1) & mask;
            }
            slots[at] = i as u32 + 1;
        }
        self.slots = slots;
    }

    fn bytes(&self) -> usize {
        self.keys.capacity()
            + self.values.capacity()
            + self.ends.capacity() * std::mem::size_of::<(u32, u32)>()
            + self.gone.capacity() * 8
            + self.slots.len() * std::mem::size_of::<u32>()
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

impl Run {
    /// The final state of `buf`, a frozen buffer.
    pub fn of(buf: &Buffer) -> Run {
        let hasher = foldhash::fast::FixedState::with_seed(0x72_75_6e);
        let mut tables: Vec<Dense> = Table::ALL.iter().map(|_| Dense::default()).collect();
        buf.for_each_table(&mut |t, changes| {
            let d = &mut tables[t as usize];
            for change in changes {
                match change {
                    Change::Range(_, start, end) => {
                        d.ranges.push((start.to_vec(), end.map(<[u8]>::to_vec)));
                    }
                    Change::Row(_, key, value) => {
                        let i = d.ends.len();
                        if i.is_multiple_of(64) {
                            d.gone.push(0);
                        }
                        match value {
                            Some(v) => d.values.extend_from_slice(v),
                            None => d.gone[i / 64] |= 1 << (i % 64),
                        }
                        d.keys.extend_from_slice(key);
                        d.ends.push((len32(d.keys.len()), len32(d.values.len())));
                    }
                }
            }
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap_or_else(|never| match never {});
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
            gen: buf.gen,
            last_seq: buf.last_seq(),
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
            .any(|(start, end)| key >= start.as_slice() && end.as_deref().is_none_or(|e| key < e));
        covered.then_some(None)
    }

    /// The run's rows of `table` within `bounds`, in key order, deleted
    /// ones as `None`.
    pub fn range<'a>(
        &'a self,
        table: Table,
        (lo, hi): (Bound<&[u8]>, Bound<&[u8]>),
    ) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
        let d = &self.tables[table as usize];
        let n = d.ends.len();
        // The first row at or past `lo`, by binary search over positions.
        let after_lo = |i: usize| match lo {
            Bound::Included(l) => d.key(i) >= l,
            Bound::Excluded(l) => d.key(i) > l,
            Bound::Unbounded => true,
        };
        let (mut a, mut b) = (0, n);
        while a < b {
            let mid = (a + b) / 2;
            if after_lo(mid) {
                b = mid;
            } else {
                a = mid + 1;
            }
        }
        let hi: Bound<Vec<u8>> = match hi {
            Bound::Included(h) => Bound::Included(h.to_vec()),
            Bound::Excluded(h) => Bound::Excluded(h.to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        (a..n)
            .map(move |i| (d.key(i), i))
            .take_while(move |(k, _)| match &hi {
                Bound::Included(h) => *k <= h.as_slice(),
                Bound::Excluded(h) => *k < h.as_slice(),
                Bound::Unbounded => true,
            })
            .map(move |(k, i)| (k, d.value(i)))
    }

    /// The deleted ranges of `table`, oldest first.
    pub fn ranges(&self, table: Table) -> &[KeyRange] {
        &self.tables[table as usize].ranges
    }

    /// Memory the run holds.
    pub fn bytes(&self) -> usize {
        self.tables.iter().map(Dense::bytes).sum()
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

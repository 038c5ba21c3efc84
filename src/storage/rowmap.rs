//! One table's rows in a transaction's overlay, in key order.
//!
//! Most transactions write a row or two per table: at pipeline 1 every
//! write is a batch of its own. A `BTreeMap` allocated a node for the
//! first row of each table a transaction wrote and freed it again when the
//! changes were taken out, which with the walk over its nodes cost more
//! than the write itself. Up to [`SMALL`] rows are kept in a sorted
//! vector; past that the map becomes a `BTreeMap`, whose inserts stay
//! logarithmic in big batches.

use std::collections::{btree_map, BTreeMap};
use std::ops::Bound;

use super::buffer::Entry;

/// Rows kept in the sorted vector before it becomes a B-tree.
const SMALL: usize = 32;

/// A table's rows, ordered by key (see the module doc).
#[derive(Debug)]
pub(crate) enum RowMap {
    /// Sorted by key, at most [`SMALL`] rows.
    Small(Vec<(Vec<u8>, Entry)>),
    /// Past [`SMALL`] rows.
    Big(BTreeMap<Vec<u8>, Entry>),
}

/// A key's place in a [`RowMap`] (see [`RowMap::slot`]).
pub(crate) enum Slot<'a> {
    /// The map holds the key: its row.
    Held(&'a mut Entry),
    /// It does not: where its row would go.
    Free(Vacant<'a>),
}

/// Where an absent key's row would go.
pub(crate) enum Vacant<'a> {
    /// At this index of the sorted vector.
    Small(&'a mut RowMap, usize),
    /// In the B-tree (the key already copied into the entry).
    Big(btree_map::VacantEntry<'a, Vec<u8>, Entry>),
}

impl Vacant<'_> {
    /// Puts the row for `key` (the key [`RowMap::slot`] was asked) there.
    pub(crate) fn insert(self, key: &[u8], value: Entry) {
        match self {
            Vacant::Small(map, i) => match map {
                RowMap::Small(rows) if rows.len() < SMALL => rows.insert(i, (key.to_vec(), value)),
                _ => map.insert(key.to_vec(), value),
            },
            Vacant::Big(v) => {
                v.insert(value);
            }
        }
    }
}

/// Where `key` is in a sorted vector of rows, or where it would go.
fn search(rows: &[(Vec<u8>, Entry)], key: &[u8]) -> Result<usize, usize> {
    rows.binary_search_by(|(k, _)| k.as_slice().cmp(key))
}

impl Default for RowMap {
    fn default() -> RowMap {
        RowMap::Small(Vec::new())
    }
}

impl RowMap {
    /// The row at `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&Entry> {
        match self {
            RowMap::Small(rows) => search(rows, key).ok().map(|i| &rows[i].1),
            RowMap::Big(rows) => rows.get(key),
        }
    }

    /// The row at `key`, to change in place.
    pub(crate) fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        match self {
            RowMap::Small(rows) => search(rows, key).ok().map(|i| &mut rows[i].1),
            RowMap::Big(rows) => rows.get_mut(key),
        }
    }

    /// Where `key` lies: its row, or the place a row for it would go, so
    /// that a read-then-write searches the map once.
    pub(crate) fn slot(&mut self, key: &[u8]) -> Slot<'_> {
        // Searched before the match that hands out the borrow: the vacant
        // case keeps the whole map (it may have to become a B-tree).
        let small = match self {
            RowMap::Small(rows) => Some(search(rows, key)),
            RowMap::Big(_) => None,
        };
        match (small, self) {
            (Some(Ok(i)), RowMap::Small(rows)) => Slot::Held(&mut rows[i].1),
            (Some(Err(i)), map) => Slot::Free(Vacant::Small(map, i)),
            (_, RowMap::Big(rows)) => match rows.entry(key.to_vec()) {
                btree_map::Entry::Occupied(o) => Slot::Held(o.into_mut()),
                btree_map::Entry::Vacant(v) => Slot::Free(Vacant::Big(v)),
            },
            (_, RowMap::Small(_)) => unreachable!("a small map was searched"),
        }
    }

    /// Sets the row at `key`.
    pub(crate) fn insert(&mut self, key: Vec<u8>, value: Entry) {
        match self {
            RowMap::Small(rows) => match search(rows, &key) {
                Ok(i) => rows[i].1 = value,
                Err(i) if rows.len() < SMALL => rows.insert(i, (key, value)),
                Err(_) => {
                    let mut tree: BTreeMap<Vec<u8>, Entry> =
                        std::mem::take(rows).into_iter().collect();
                    tree.insert(key, value);
                    *self = RowMap::Big(tree);
                }
            },
            RowMap::Big(rows) => {
                rows.insert(key, value);
            }
        }
    }

    /// Drops the row at `key`, if there is one.
    pub(crate) fn remove(&mut self, key: &[u8]) {
        match self {
            RowMap::Small(rows) => {
                if let Ok(i) = search(rows, key) {
                    rows.remove(i);
                }
            }
            RowMap::Big(rows) => {
                rows.remove(key);
            }
        }
    }

    /// Drops every row.
    pub(crate) fn clear(&mut self) {
        *self = RowMap::default();
    }

    /// How many rows there are.
    pub(crate) fn len(&self) -> usize {
        match self {
            RowMap::Small(rows) => rows.len(),
            RowMap::Big(rows) => rows.len(),
        }
    }

    /// The rows within `bounds`, in key order (either way).
    pub(crate) fn range(&self, bounds: (Bound<&[u8]>, Bound<&[u8]>)) -> Range<'_> {
        match self {
            RowMap::Small(rows) => {
                let at = |bound: Bound<&[u8]>, upper: bool| match bound {
                    Bound::Unbounded if upper => rows.len(),
                    Bound::Unbounded => 0,
                    // The first row past an included upper bound or at an
                    // excluded lower one, and the reverse.
                    Bound::Included(b) if upper => rows.partition_point(|(k, _)| k.as_slice() <= b),
                    Bound::Excluded(b) if !upper => {
                        rows.partition_point(|(k, _)| k.as_slice() <= b)
                    }
                    Bound::Included(b) | Bound::Excluded(b) => {
                        rows.partition_point(|(k, _)| k.as_slice() < b)
                    }
                };
                let (start, end) = (at(bounds.0, false), at(bounds.1, true));
                Range::Small(rows[start..end.max(start)].iter())
            }
            RowMap::Big(rows) => Range::Big(rows.range::<[u8], _>(bounds)),
        }
    }
}

impl IntoIterator for RowMap {
    type Item = (Vec<u8>, Entry);
    type IntoIter = IntoIter;

    fn into_iter(self) -> IntoIter {
        match self {
            RowMap::Small(rows) => IntoIter::Small(rows.into_iter()),
            RowMap::Big(rows) => IntoIter::Big(rows.into_iter()),
        }
    }
}

/// [`RowMap::range`]'s rows.
pub(crate) enum Range<'a> {
    Small(std::slice::Iter<'a, (Vec<u8>, Entry)>),
    Big(btree_map::Range<'a, Vec<u8>, Entry>),
}

impl<'a> Iterator for Range<'a> {
    type Item = (&'a Vec<u8>, &'a Entry);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Range::Small(rows) => rows.next().map(|(k, v)| (k, v)),
            Range::Big(rows) => rows.next(),
        }
    }
}

impl DoubleEndedIterator for Range<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            Range::Small(rows) => rows.next_back().map(|(k, v)| (k, v)),
            Range::Big(rows) => rows.next_back(),
        }
    }
}

/// A [`RowMap`]'s rows taken out, in key order.
pub(crate) enum IntoIter {
    Small(std::vec::IntoIter<(Vec<u8>, Entry)>),
    Big(btree_map::IntoIter<Vec<u8>, Entry>),
}

impl Iterator for IntoIter {
    type Item = (Vec<u8>, Entry);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            IntoIter::Small(rows) => rows.next(),
            IntoIter::Big(rows) => rows.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `value` at `key` through [`RowMap::slot`].
    fn put_by_slot(map: &mut RowMap, key: &[u8], value: Entry) {
        match map.slot(key) {
            Slot::Held(e) => *e = value,
            Slot::Free(place) => place.insert(key, value),
        }
    }

    /// Both forms answer as a `BTreeMap` does: gets, overwrites (by
    /// `insert` and by `slot`), ranges with every kind of bound in both
    /// directions, and the rows taken out.
    #[test]
    fn answers_as_a_btree_map() {
        for n in [0usize, 1, 5, SMALL, SMALL + 1, 100] {
            let mut map = RowMap::default();
            let mut want = BTreeMap::new();
            // Keys in a scrambled order, some written twice.
            for i in 0..n {
                let k = vec![((i * 7) % 101) as u8, (i % 3) as u8];
                let v = (i % 4 != 0).then(|| vec![i as u8]);
                if i % 2 == 0 {
                    map.insert(k.clone(), v.clone());
                } else {
                    put_by_slot(&mut map, &k, v.clone());
                }
                want.insert(k, v);
            }
            for i in 0..n / 2 {
                let k = vec![((i * 7) % 101) as u8, (i % 3) as u8];
                put_by_slot(&mut map, &k, None);
                want.insert(k, None);
            }
            for i in (0..n).step_by(5) {
                let k = vec![((i * 7) % 101) as u8, (i % 3) as u8];
                map.remove(&k);
                want.remove(&k);
            }
            map.remove(&[0xff]);
            assert_eq!(map.len(), want.len());
            for probe in 0..=102u8 {
                for last in 0..3u8 {
                    let k = [probe, last];
                    assert_eq!(map.get(&k), want.get(&k[..]));
                }
            }
            let points: Vec<Vec<u8>> = (0..=102u8).step_by(9).map(|b| vec![b, 1]).collect();
            let mut bounds = vec![(Bound::Unbounded, Bound::Unbounded)];
            for a in &points {
                bounds.push((Bound::Included(a.as_slice()), Bound::Unbounded));
                bounds.push((Bound::Excluded(a.as_slice()), Bound::Unbounded));
                bounds.push((Bound::Unbounded, Bound::Included(a.as_slice())));
                bounds.push((Bound::Unbounded, Bound::Excluded(a.as_slice())));
                for b in points.iter().filter(|b| *b > a) {
                    bounds.push((Bound::Included(a.as_slice()), Bound::Excluded(b.as_slice())));
                    bounds.push((Bound::Excluded(a.as_slice()), Bound::Included(b.as_slice())));
                }
            }
            for b in bounds {
                let got: Vec<_> = map.range(b).collect();
                let expect: Vec<_> = want.range::<[u8], _>(b).collect();
                assert_eq!(got, expect, "{n} rows, {b:?}");
                let got: Vec<_> = map.range(b).rev().collect();
                let expect: Vec<_> = want.range::<[u8], _>(b).rev().collect();
                assert_eq!(got, expect, "{n} rows, {b:?} reversed");
            }
            let got: Vec<_> = map.into_iter().collect();
            let expect: Vec<_> = want.into_iter().collect();
            assert_eq!(got, expect);
        }
    }
}

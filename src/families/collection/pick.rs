//! Random members of a big collection, without reading it whole.
//!
//! A collection's members are rows in key order and nothing numbers them,
//! so a random rank cannot be sought. A seek to a random key takes the
//! member after it, which favours members after wide gaps so much that it
//! is no draw at all where members share a prefix: "m0000" to "m0999" sit
//! in a sliver of key space, and a key of random bytes falls before all of
//! them or after all of them (wrapping to the first) nearly every time.
//!
//! Instead a pick walks down the members' byte trie. At each level it
//! knows the first rows and the last row under the prefix chosen so far,
//! so the smallest and the largest next byte; it draws a byte between
//! them and keeps it if some member goes on with it (the first row at or
//! after it says), drawing again otherwise. The next bytes present are
//! thus equally likely, every member can come out, and a branch of fewer
//! than [`FEW`] members is read whole and one of them drawn. Members that
//! spread evenly over their alphabet (counters, ids, hashes, words of one
//! pattern) come out close to uniformly; in a lopsided trie, a member of a
//! sparse branch is likelier than one of a crowded branch. A pick costs
//! about two seeks a level.

use rand::Rng;

use crate::storage::encoding::prefix_successor;
use crate::storage::merge::Order;
use crate::storage::{KvRead, StoreError, Table};

/// Rows read from the start of a branch: one with fewer members is drawn
/// from whole.
const FEW: usize = 4;

/// Draws of a level's next byte that found no member going on with it
/// (a sparse alphabet: hex digits between '0' and 'f') before the first
/// byte present after the last draw is taken.
const DRAWS: usize = 8;

/// A row's key and value.
type Row = (Vec<u8>, Vec<u8>);

/// Up to `n` rows of `Sub` from `from`, below `to`.
fn rows(r: &dyn KvRead, from: &[u8], to: Option<&[u8]>, n: usize) -> Result<Vec<Row>, StoreError> {
    let mut out = Vec::with_capacity(n);
    let order = Order {
        reverse: false,
        first: n,
        window: false,
    };
    r.scan_few(Table::Sub, (from, to), order, &mut |k, v| {
        out.push((k.to_vec(), v.to_vec()));
        out.len() < n
    })?;
    Ok(out)
}

/// The last row of `Sub` starting with `prefix`.
fn last(r: &dyn KvRead, prefix: &[u8]) -> Result<Option<Row>, StoreError> {
    let end = prefix_successor(prefix);
    let mut out = None;
    let order = Order {
        reverse: true,
        first: 1,
        window: false,
    };
    r.scan_few(Table::Sub, (prefix, end.as_deref()), order, &mut |k, v| {
        out = Some((k.to_vec(), v.to_vec()));
        false
    })?;
    Ok(out)
}

/// One of `rows`, drawn uniformly; `None` if there are none.
fn any(mut rows: Vec<Row>, rng: &mut impl Rng) -> Option<Row> {
    if rows.is_empty() {
        return None;
    }
    let i = rng.gen_range(0..rows.len());
    Some(rows.swap_remove(i))
}

/// One random row of `Sub` among those starting with `prefix` (a
/// collection's), as the module describes; `None` if there are none.
pub(super) fn one(
    r: &dyn KvRead,
    prefix: &[u8],
    rng: &mut impl Rng,
) -> Result<Option<Row>, StoreError> {
    let end = prefix_successor(prefix);
    let mut head = rows(r, prefix, end.as_deref(), FEW)?;
    if head.len() < FEW {
        return Ok(any(head, rng));
    }
    let Some(mut tail) = last(r, prefix)? else {
        return Ok(None);
    };
    // Here `head` is the first FEW rows under the branch the walk is in,
    // all of them in it, and `tail` its last row.
    loop {
        let first = &head[0].0;
        let d = first
            .iter()
            .zip(&tail.0)
            .take_while(|(a, b)| a == b)
            .count();
        // The branch holds more than one row, so its first and last
        // differ, and the last goes on past the bytes they share.
        let branch = tail.0[..d].to_vec();
        let hi = i32::from(tail.0[d]);
        // The smallest next byte; where the first row ends at the shared
        // bytes (a member equal to the branch's prefix), one slot below
        // the second row's next byte stands for it.
        let (lo, stops) = match first.get(d) {
            Some(&b) => (i32::from(b), false),
            None => (i32::from(head[1].0[d]) - 1, true),
        };
        let bound = prefix_successor(&branch);
        let mut draws = 0;
        let (byte, below) = loop {
            draws += 1;
            let b = rng.gen_range(lo..=hi);
            if b == lo {
                if stops {
                    return Ok(Some(head.swap_remove(0)));
                }
                break (b as u8, None);
            }
            let mut from = branch.clone();
            from.push(b as u8);
            let found = rows(r, &from, bound.as_deref(), FEW)?;
            // `tail` is at or after `from`: something was found.
            let next = found[0].0[d];
            if i32::from(next) == b || draws >= DRAWS {
                break (next, Some(found));
            }
        };
        let mut child = branch;
        child.push(byte);
        let below = below.unwrap_or(head);
        let inside = below
            .iter()
            .take_while(|(k, _)| k.starts_with(&child))
            .count();
        if inside < below.len() || below.len() < FEW {
            // The branch ends among the rows read: it is all there.
            let mut below = below;
            below.truncate(inside);
            return Ok(any(below, rng));
        }
        head = below;
        if i32::from(byte) != hi {
            tail = last(r, &child)?.expect("a branch with rows has a last row");
        }
    }
}

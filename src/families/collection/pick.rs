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
//!
//! Most big collections are denser than that needs: counters, ids and
//! timestamps fill much of the space their bytes span. The first rows and
//! the last one give their [`Shape`]: the bytes every member shares, the
//! range of the bytes after them and the lengths of what follows. Where
//! the members fill a 128th or more of the keys so shaped, a pick draws
//! such a key, each equally likely, and looks it up: a member found is an
//! exactly uniform pick among those the shape covers, for a point read or
//! a few. One pick in [`WALKS`] walks instead, so that a member outside
//! the shape (a byte or a length the first and last rows did not show)
//! can come out too, and widens the shape when it does; walks that keep
//! finding members the shape covers come rarer, down to one pick in
//! [`WALKS_LEAST`]. A thread keeps
//! the shapes of the collections it drew from lately, so a pop or a pick
//! mostly costs its point reads alone.

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

/// Up to `n` rows of `Sub` from `from`, below `to` (reversed: from the
/// last one below `to` down).
fn rows(
    r: &dyn KvRead,
    (from, to): (&[u8], Option<&[u8]>),
    n: usize,
    reverse: bool,
) -> Result<Vec<Row>, StoreError> {
    let mut out = Vec::with_capacity(n);
    let order = Order {
        reverse,
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
    Ok(rows(r, (prefix, end.as_deref()), 1, true)?.pop())
}

/// One of `rows`, drawn uniformly; `None` if there are none.
fn any(mut rows: Vec<Row>, rng: &mut impl Rng) -> Option<Row> {
    if rows.is_empty() {
        return None;
    }
    let i = rng.gen_range(0..rows.len());
    Some(rows.swap_remove(i))
}

/// The shape of a collection's member keys, as its first rows and its last
/// show it.
#[derive(Clone)]
struct Shape {
    /// The key bytes every row shares (the collection's prefix and more).
    shared: Vec<u8>,
    /// The smallest and largest byte after the shared ones.
    bytes: (u8, u8),
    /// The fewest and most bytes after the shared ones.
    lengths: (usize, usize),
    /// How many keys are so shaped.
    keys: f64,
    /// One pick in this many walks (see [`WALKS`]).
    walk_every: u32,
    /// The collection's size when walks last came at their most often.
    size: u64,
}

impl Shape {
    /// The shape of `head` (the first rows) and `tail` (the last, after
    /// the first) of a collection of `size` members.
    fn of(head: &[Row], tail: &Row, size: u64) -> Shape {
        // Grown from the last key alone, the first one's bytes apart.
        let mut shape = Shape {
            shared: tail.0.clone(),
            bytes: (u8::MAX, u8::MIN),
            lengths: (0, 0),
            keys: 0.0,
            walk_every: WALKS,
            size,
        };
        for (key, _) in head {
            shape.widen(key);
        }
        shape
    }

    /// This shape grown to cover `key` (a member a walk found).
    fn widen(&mut self, key: &[u8]) {
        let (mut lo, mut hi) = self.bytes;
        let (mut short, mut long) = self.lengths;
        let n = common(&self.shared, key);
        if n < self.shared.len() {
            // The bytes no longer shared begin every other member's rest.
            let cut = self.shared.split_off(n);
            lo = cut.iter().fold(lo, |m, &b| m.min(b));
            hi = cut.iter().fold(hi, |m, &b| m.max(b));
            short += cut.len();
            long += cut.len();
        }
        let rest = &key[n..];
        lo = rest.iter().fold(lo, |m, &b| m.min(b));
        hi = rest.iter().fold(hi, |m, &b| m.max(b));
        self.bytes = (lo, hi);
        self.lengths = (short.min(rest.len()), long.max(rest.len()));
        self.keys = (self.lengths.0..=self.lengths.1)
            .map(|l| self.base().powi(l as i32))
            .sum();
    }

    /// How many bytes the shape's keys draw from after the shared ones.
    fn base(&self) -> f64 {
        f64::from(self.bytes.1 - self.bytes.0) + 1.0
    }

    /// Whether a key shaped so could be `key`.
    fn covers(&self, key: &[u8]) -> bool {
        let Some(rest) = key.strip_prefix(&self.shared[..]) else {
            return false;
        };
        let (lo, hi) = self.bytes;
        (self.lengths.0..=self.lengths.1).contains(&rest.len())
            && rest.iter().all(|b| (lo..=hi).contains(b))
    }

    /// Whether `size` members fill a [`SPARSEST`]th or more of the keys so
    /// shaped.
    fn dense(&self, size: u64) -> bool {
        size as f64 * SPARSEST >= self.keys
    }

    /// A key so shaped, each equally likely: its length drawn by how many
    /// keys have it, then its bytes.
    #[cfg(test)]
    fn draw(&self, rng: &mut impl Rng) -> Vec<u8> {
        let mut key = Vec::new();
        self.draw_into(rng, &mut key);
        key
    }

    /// [`Shape::draw`] into `key`, its old bytes gone: a pick of a thin
    /// collection draws many keys before one is a member, and an
    /// allocation each was a cost of its own.
    fn draw_into(&self, rng: &mut impl Rng, key: &mut Vec<u8>) {
        let (lo, hi) = self.bytes;
        let (short, long) = self.lengths;
        let mut n = short;
        let mut ahead = self.keys;
        while n < long {
            // Length n's share of the keys left: n itself or longer.
            let here = self.base().powi(n as i32);
            if rng.gen::<f64>() * ahead < here {
                break;
            }
            ahead -= here;
            n += 1;
        }
        key.clear();
        key.extend_from_slice(&self.shared);
        key.extend((0..n).map(|_| rng.gen_range(lo..=hi)));
    }
}

/// One pick in this many walks although the members are dense, so that
/// one the shape does not cover (a byte or a length the survey did not
/// see, or a member added since) can come out, and widen the shape. Each
/// walk that finds a member the shape covers halves how often the next
/// comes, down to one in [`WALKS_LEAST`]; one that finds a member it does
/// not cover brings them back to this, and so does the collection growing
/// by an eighth (what came may be of a new form).
const WALKS: u32 = 32;

/// The rarest walks get (see [`WALKS`]): at one in 32, walks (a survey
/// and a dozen merged seeks, ~45 us) were 12% of SPOP's samples on a
/// set the shape covered whole, ~1.4 us a pop; at one in 512, ~0.1 us.
const WALKS_LEAST: u32 = 512;

/// The fewest members, as a share of the keys shaped like them, for which
/// a pick draws keys to look up rather than walks: a lookup of a key that
/// is not there is mostly the key filter's word (~0.4 us in a shard under
/// SPOP), a walk a dozen merged seeks (~45 us).
const SPARSEST: f64 = 128.0;

/// Draws of a shaped key before a pick walks instead: at a 128th of the
/// keys so shaped filled, 1024 misses in a row come once in ~3,000.
const LOOKUPS: usize = 1024;

/// Collections whose shapes a thread remembers; past it, it forgets them
/// all.
const SHAPES_KEPT: usize = 256;

thread_local! {
    /// Shapes of the collections this thread drew from lately, by prefix
    /// (which holds the key's version). SPOP draws on the
    /// shard's thread, SRANDMEMBER on a connection's: each pop or pick
    /// spares the two seeks of a survey.
    static SHAPES: std::cell::RefCell<std::collections::HashMap<Vec<u8>, Shape>> =
        Default::default();
}

/// Keeps `shape` as this thread's for the collection under `prefix`.
fn remember(prefix: &[u8], shape: &Shape) {
    SHAPES.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() >= SHAPES_KEPT && !s.contains_key(prefix) {
            s.clear();
        }
        s.insert(prefix.to_vec(), shape.clone());
    });
}

/// The length of the prefix `a` and `b` share.
fn common(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Draws random rows of one collection's `Sub` rows, as the module
/// describes.
pub(super) struct Picker<'a> {
    r: &'a dyn KvRead,
    prefix: &'a [u8],
    size: u64,
    /// The shape the draws go by.
    shape: Option<Shape>,
    /// The first rows and the last, once read.
    survey: Option<(Vec<Row>, Option<Row>)>,
}

impl<'a> Picker<'a> {
    /// A picker of the `size` rows of `Sub` under `prefix`.
    pub(super) fn new(r: &'a dyn KvRead, prefix: &'a [u8], size: u64) -> Picker<'a> {
        let mut shape = SHAPES.with(|s| s.borrow().get(prefix).cloned());
        if let Some(shape) = &mut shape {
            if size > shape.size + shape.size / 8 {
                // Grown since walks were last frequent: what came may be
                // of a form the shape does not cover.
                (shape.walk_every, shape.size) = (WALKS, size);
                remember(prefix, shape);
            } else if size < shape.size / 2 {
                // Shrunk: growth is told from here.
                shape.size = size;
                remember(prefix, shape);
            }
        }
        Picker {
            r,
            prefix,
            size,
            shape,
            survey: None,
        }
    }

    /// The first rows and the last (none if the first are all).
    fn survey(&mut self) -> Result<&(Vec<Row>, Option<Row>), StoreError> {
        if self.survey.is_none() {
            let end = prefix_successor(self.prefix);
            let head = rows(self.r, (self.prefix, end.as_deref()), FEW, false)?;
            let tail = match head.len() < FEW {
                true => None,
                false => last(self.r, self.prefix)?,
            };
            if let Some(tail) = &tail {
                // A remembered shape only grows: what walks found outside
                // the first and last rows' shape stays reachable.
                let shape = match self.shape.take() {
                    Some(mut known) => {
                        if !(known.covers(&head[0].0) && known.covers(&tail.0)) {
                            // Members came that it did not cover: there
                            // may be more between.
                            (known.walk_every, known.size) = (WALKS, self.size);
                        }
                        known.widen(&head[0].0);
                        known.widen(&tail.0);
                        known
                    }
                    None => Shape::of(&head, tail, self.size),
                };
                remember(self.prefix, &shape);
                self.shape = Some(shape);
            }
            self.survey = Some((head, tail));
        }
        Ok(self.survey.as_ref().expect("just read"))
    }

    /// One random row; `None` if there are none.
    pub(super) fn one(&mut self, rng: &mut impl Rng) -> Result<Option<Row>, StoreError> {
        if self.shape.is_none() {
            self.survey()?;
        }
        if let Some(shape) = self.shape.as_ref().filter(|s| s.dense(self.size)) {
            if !rng.gen_ratio(1, shape.walk_every) {
                let mut key = Vec::new();
                for _ in 0..LOOKUPS {
                    shape.draw_into(rng, &mut key);
                    if let Some(value) = self.r.get_once(Table::Sub, &key)? {
                        return Ok(Some((key, value)));
                    }
                }
            }
        }
        let r = self.r;
        let row = match self.survey()? {
            (head, None) => return Ok(any(head.clone(), rng)),
            (head, Some(tail)) => walk(r, head.clone(), tail.clone(), rng)?,
        };
        if let (Some(shape), Some((key, _))) = (&mut self.shape, &row) {
            shape.walk_every = match shape.covers(key) {
                true => (shape.walk_every * 2).min(WALKS_LEAST),
                false => {
                    // A member the draws could not reach: they can from
                    // now, and walks look for more such as often as at
                    // first.
                    shape.widen(key);
                    shape.size = self.size;
                    WALKS
                }
            };
            remember(self.prefix, shape);
        }
        Ok(row)
    }
}

/// One random row of a branch of more than [`FEW`] rows, `head` its
/// first ones and `tail` its last, by the walk the module describes.
fn walk(
    r: &dyn KvRead,
    mut head: Vec<Row>,
    mut tail: Row,
    rng: &mut impl Rng,
) -> Result<Option<Row>, StoreError> {
    // Here `head` is the first FEW rows under the branch the walk is in,
    // all of them in it, and `tail` its last row.
    loop {
        let first = &head[0].0;
        let d = common(first, &tail.0);
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
            let found = rows(r, (&from, bound.as_deref()), FEW, false)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(k: &str) -> Row {
        (k.as_bytes().to_vec(), Vec::new())
    }

    #[test]
    fn a_shape_is_what_the_first_and_last_rows_show() {
        let head = [row("p:m0003"), row("p:m0007"), row("p:m0012")];
        let shape = Shape::of(&head, &row("p:m0981"), 1000);
        assert_eq!(shape.shared, b"p:m0");
        assert_eq!(shape.bytes, (b'0', b'9'));
        assert_eq!(shape.lengths, (3, 3));
        assert_eq!(shape.keys, 1000.0);
        assert!(shape.dense(8) && !shape.dense(7));
        let mut rng = rand::thread_rng();
        for _ in 0..1000 {
            let key = shape.draw(&mut rng);
            assert!(shape.covers(&key), "{key:?}");
        }
        assert!(!shape.covers(b"p:m0a00") && !shape.covers(b"p:m00000"));
    }

    #[test]
    fn a_shape_widens_to_what_a_walk_finds() {
        let mut shape = Shape::of(&[row("p:m0003")], &row("p:m0981"), 1000);
        shape.widen(b"p:m1:");
        assert_eq!(shape.shared, b"p:m");
        assert_eq!(shape.bytes, (b'0', b':'));
        assert_eq!(shape.lengths, (2, 4));
        assert_eq!(shape.keys, 11f64.powi(2) + 11f64.powi(3) + 11f64.powi(4));
        assert!(shape.covers(b"p:m1:") && shape.covers(b"p:m0981"));
        // Draws of each length come as often as its share of the keys.
        let mut rng = rand::thread_rng();
        let short = (0..11_000)
            .filter(|_| shape.draw(&mut rng).len() == 5)
            .count();
        assert!(
            (40..=180).contains(&short),
            "{short} of 11,000 two bytes long"
        );
    }
}

//! Reading through layers: a write transaction's own changes, the write
//! buffers (newest first) and the redb tables, merged into the one state a
//! reader sees. The newest layer that holds a row decides it; a range a
//! layer deleted hides every older layer's rows in it.

use std::collections::VecDeque;
use std::ops::Bound;

use super::buffer::{in_range, KeyRange, RowKey, Stored};
use super::tables::{StoreError, Table};

/// A row a layer read: its key and its value, `Stored::Gone` where the
/// layer deleted it. A short key and value sit in the row (see [`RowKey`]
/// and [`Stored`]): a scan copies every row it reads out of its layer,
/// and an allocation for each key and value (and their frees) were a
/// sixth of LRANGE's samples.
pub type Row = (RowKey, Stored);

/// One layer of rows, newest layers first in a merge.
pub trait Layer {
    /// Up to `n` rows of `table` within `bounds`, deleted ones as `Gone`,
    /// appended to `out` in key order (or reversed); false once exhausted.
    fn fill(
        &self,
        table: Table,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        n: usize,
        out: &mut VecDeque<Row>,
    ) -> Result<bool, StoreError>;

    /// The ranges of `table` this layer deleted, hiding older layers.
    fn ranges(&self, table: Table) -> Vec<KeyRange>;

    /// Hands `visit` the live rows of `table` within `bounds`, in key
    /// order (or reversed), until it returns false: a scan's rest once
    /// this layer alone holds rows in it. By default through
    /// [`Layer::fill`] ([`visit_by_chunks`]); a layer that can read its
    /// rows where they lie hands them over without copying.
    fn visit(
        &self,
        table: Table,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        visit_by_chunks(self, table, bounds, reverse, visit)
    }
}

/// [`Layer::visit`] through [`Layer::fill`]: chunks growing from
/// [`FIRST_CHUNK`], each starting past the last row of the one before.
pub fn visit_by_chunks<L: Layer + ?Sized>(
    layer: &L,
    table: Table,
    (lo, hi): (Bound<&[u8]>, Bound<&[u8]>),
    reverse: bool,
    visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<(), StoreError> {
    let mut rows = VecDeque::new();
    let mut last: Option<RowKey> = None;
    let mut chunk = FIRST_CHUNK;
    loop {
        let bounds = match &last {
            None => (lo, hi),
            Some(k) => past((lo, hi), k.as_slice(), reverse),
        };
        let more = layer.fill(table, bounds, reverse, chunk, &mut rows)?;
        chunk = (chunk * 2).min(MAX_CHUNK);
        last = rows.back().map(|(k, _)| k.clone());
        if !hand_over(&mut rows, visit) || !more || last.is_none() {
            return Ok(());
        }
    }
}

/// The bounds `[start, end)` of a scan (`end` none: to the table's end).
pub fn scan_bounds<'a>(
    start: &'a [u8],
    end: Option<&'a [u8]>,
) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    (
        Bound::Included(start),
        end.map_or(Bound::Unbounded, Bound::Excluded),
    )
}

/// What is left of `bounds` to a scan in key order (or reversed) that
/// has read up to `last`, `last` included.
fn past<'a>(
    (lo, hi): (Bound<&'a [u8]>, Bound<&'a [u8]>),
    last: &'a [u8],
    reverse: bool,
) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    match reverse {
        false => (Bound::Excluded(last), hi),
        true => (lo, Bound::Excluded(last)),
    }
}

/// Hands the live rows of a chunk to `visit`, emptying it; false once
/// `visit` has had enough.
fn hand_over(rows: &mut VecDeque<Row>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> bool {
    rows.drain(..).all(|(key, entry)| match entry.as_deref() {
        Some(value) => visit(key.as_slice(), value),
        None => true,
    })
}

/// Hands the items of `iter`, from its front or (`reverse`) its back, to
/// `f` until it returns false or fails.
pub fn each_while<I: DoubleEndedIterator, E>(
    mut iter: I,
    reverse: bool,
    mut f: impl FnMut(I::Item) -> Result<bool, E>,
) -> Result<(), E> {
    loop {
        let item = if reverse {
            iter.next_back()
        } else {
            iter.next()
        };
        let Some(item) = item else { return Ok(()) };
        if !f(item)? {
            return Ok(());
        }
    }
}

/// Key intervals known to hold no live row in a shard's latest state.
///
/// Deleted rows stay in the write buffers as deletions until the buffers
/// reach the tables, and a scan must step over each of them (and over the
/// table rows they hide). A pop that scans from the front (ZPOPMIN, the
/// expiry reaper) or from a random point (SPOP) would step over every row
/// popped before it: quadratic. So the shard's own scans note each run of
/// dead rows they crossed, and later scans jump over it. Writing a row
/// inside an interval drops the interval; deleting rows never makes one
/// wrong. Only the shard's writer uses it (its view is the latest state).
#[derive(Debug, Clone, Default)]
pub struct DeadRanges {
    /// Per table: start -> end (exclusive); disjoint, not touching.
    tables: [std::collections::BTreeMap<Vec<u8>, Vec<u8>>; 6],
    /// Per table: the rows a pop read ahead (see [`Window`]).
    windows: [Option<Window>; 6],
}

/// Every live row of a table from `lo` up to `hi` (exclusive; `None`: the
/// table's end), as the shard's latest state holds them.
///
/// Each ZPOPMIN merged all the layers again to find the first live score
/// row: a seek in each buffer's ordered set and in the redb table, then
/// the table rows the buffers deleted (the members popped before) to step
/// over, about half of a pop's instructions. A scan that pops from either
/// end of its range (`Order::window`) reads [`WINDOW`] rows ahead instead
/// and keeps them here; the pops after it take their rows from the window
/// until it runs out. It stays exact because every write of the shard
/// goes through [`DeadRanges::touch`] (a row written in it drops it) or
/// [`DeadRanges::deleted`] (a row deleted leaves it), and a cleared table
/// drops it ([`DeadRanges::cleared`]).
#[derive(Debug, Clone)]
struct Window {
    lo: Vec<u8>,
    hi: Option<Vec<u8>>,
    /// In key order.
    rows: VecDeque<(Vec<u8>, Vec<u8>)>,
}

impl Window {
    fn covers(&self, key: &[u8]) -> bool {
        in_range(key, &self.lo, self.hi.as_deref())
    }
}

/// Rows a pop reads ahead into a [`Window`].
const WINDOW: usize = 64;

/// Intervals kept per table at most: past it the table's are forgotten.
const DEAD_RANGES_KEPT: usize = 4096;

impl DeadRanges {
    /// The interval holding `key`, if any.
    fn find(&self, table: Table, key: &[u8]) -> Option<(&[u8], &[u8])> {
        self.tables[table as usize]
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            .filter(|(_, end)| key < end.as_slice())
            .map(|(s, e)| (s.as_slice(), e.as_slice()))
    }

    /// The start of the interval that holds every key just below `key`
    /// (`a < key <= b` for an interval `[a, b)`): where a reversed scan
    /// bounded by `key` jumps to.
    fn below(&self, table: Table, key: &[u8]) -> Option<&[u8]> {
        self.tables[table as usize]
            .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(key)))
            .next_back()
            .filter(|(_, end)| end.as_slice() >= key)
            .map(|(s, _)| s.as_slice())
    }

    /// Notes that `[start, end)` holds no live row.
    pub fn add(&mut self, table: Table, start: &[u8], end: &[u8]) {
        if start >= end {
            return;
        }
        let map = &mut self.tables[table as usize];
        let (mut lo, mut hi) = (start.to_vec(), end.to_vec());
        // Every interval that overlaps or touches this one joins it.
        let joined: Vec<Vec<u8>> = map
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(end)))
            .rev()
            .take_while(|(_, e)| e.as_slice() >= start)
            .map(|(s, _)| s.clone())
            .collect();
        for s in joined {
            let e = map.remove(&s).expect("listed");
            lo = lo.min(s);
            hi = hi.max(e);
        }
        if map.len() >= DEAD_RANGES_KEPT {
            map.clear();
        }
        map.insert(lo, hi);
    }

    /// A row was written at `key`: the interval holding it is no longer
    /// dead.
    pub fn touch(&mut self, table: Table, key: &[u8]) {
        if let Some((start, _)) = self.find(table, key) {
            let start = start.to_vec();
            self.tables[table as usize].remove(&start);
        }
        let window = &mut self.windows[table as usize];
        if window.as_ref().is_some_and(|w| w.covers(key)) {
            *window = None;
        }
    }

    /// A row was deleted at `key`: it leaves the window holding it.
    pub fn deleted(&mut self, table: Table, key: &[u8]) {
        let Some(w) = self.windows[table as usize].as_mut() else {
            return;
        };
        if !w.covers(key) {
            return;
        }
        if let Ok(i) = w.rows.binary_search_by(|(k, _)| k.as_slice().cmp(key)) {
            w.rows.remove(i);
        }
    }

    /// Every row of `table` was deleted.
    pub fn cleared(&mut self, table: Table) {
        self.windows[table as usize] = None;
    }
}

/// Where a scan stands: the bound its next rows start from, at a key
/// (inclusive: the scan's start, or past a dead interval) or just after
/// one already visited. The key is copied into the same vector row after
/// row: a `RowKey` moved in each time was copied through the stack in
/// overlapping halves and read back at once, a stall that took a third
/// of the scan's samples under LRANGE.
struct Pos {
    key: Vec<u8>,
    after: bool,
}

impl Pos {
    fn at(key: Vec<u8>) -> Pos {
        Pos { key, after: false }
    }

    fn key(&self) -> &[u8] {
        &self.key
    }

    /// Moves to just after `key`.
    fn set_after(&mut self, key: &[u8]) {
        self.key.clear();
        self.key.extend_from_slice(key);
        self.after = true;
    }
}

/// Takes items from the front of `iter`, or from its back if `reverse`,
/// handing each to `keep`, until `keep` has counted `n` of them (it says
/// whether an item counted: a layer skips rows its reader cannot see).
/// True if it stopped at `n` (more may follow), false at the end. Every
/// layer fills its chunks with it.
pub fn take_n<I: DoubleEndedIterator, E>(
    iter: I,
    reverse: bool,
    n: usize,
    mut keep: impl FnMut(I::Item) -> Result<bool, E>,
) -> Result<bool, E> {
    if n == 0 {
        return Ok(true);
    }
    let mut taken = 0;
    each_while(iter, reverse, |item| {
        if keep(item)? {
            taken += 1;
        }
        Ok(taken < n)
    })?;
    Ok(taken == n)
}

/// A layer's rows read a chunk at a time, the chunks growing (a scan that
/// stops after a few rows reads few; a long one reads in large steps).
struct Cursor<'a> {
    layer: &'a dyn Layer,
    rows: VecDeque<Row>,
    more: bool,
    chunk: usize,
}

impl Cursor<'_> {
    fn head(&self) -> Option<&[u8]> {
        self.rows.front().map(|(k, _)| k.as_slice())
    }

    /// Refills from `pos`, if the chunk is used up.
    fn refill(
        &mut self,
        table: Table,
        (start, end): (&[u8], Option<&[u8]>),
        reverse: bool,
        pos: &Pos,
    ) -> Result<(), StoreError> {
        if !self.rows.is_empty() || !self.more {
            return Ok(());
        }
        let end = end.map_or(Bound::Unbounded, Bound::Excluded);
        // Reversed, the position is an upper bound.
        let bounds = match (pos.after, reverse) {
            (false, false) => (Bound::Included(pos.key()), end),
            (true, false) => (Bound::Excluded(pos.key()), end),
            (_, true) if pos.key().is_empty() => (Bound::Included(start), end),
            (_, true) => (Bound::Included(start), Bound::Excluded(pos.key())),
        };
        // Room for the chunk at once, not grown a few rows at a time.
        self.rows.reserve(self.chunk);
        self.more = self
            .layer
            .fill(table, bounds, reverse, self.chunk, &mut self.rows)?;
        self.chunk = (self.chunk * 2).min(MAX_CHUNK);
        Ok(())
    }

    /// Drops what was read and starts again from a new position.
    fn reset(&mut self) {
        self.rows.clear();
        self.more = true;
    }
}

/// Rows a layer reads at first in a scan that did not say how many it
/// wants; the chunks then double.
pub const FIRST_CHUNK: usize = 16;

/// The most rows a layer reads at first in a scan that said how many it
/// wants (the chunks of [`Cursor::refill`] stop growing there too).
pub const MAX_CHUNK: usize = 4096;

/// In which order a scan goes, and how many rows each layer reads at first
/// (see [`KvRead::scan_few`](super::KvRead::scan_few)).
#[derive(Clone, Copy, Debug)]
pub struct Order {
    /// Key order (false) or reversed.
    pub reverse: bool,
    /// Rows a layer reads in its first chunk.
    pub first: usize,
    /// The scan pops the first rows of its range in its order (the front,
    /// or reversed the back): with the shard writer's dead ranges, it
    /// reads ahead into a [`Window`] that the next pops take their rows
    /// from.
    pub window: bool,
}

impl Order {
    /// A scan in key order or reversed, with full first chunks.
    pub fn of(reverse: bool) -> Order {
        Order {
            reverse,
            first: FIRST_CHUNK,
            window: false,
        }
    }
}

/// What [`from_window`] did for a scan.
#[derive(Debug)]
pub enum FromWindow {
    /// Everything: the visitor stopped, or the range has no more rows.
    Served,
    /// Nothing: the window does not hold the scan's start.
    Missed,
    /// Every row of the range before this key in scan order (below it, or
    /// reversed at or above it): the scan goes on from it, its new start
    /// (reversed, its new end).
    Rest(Vec<u8>),
}

/// Serves a pop (`Order::window`) out of the window the last one read
/// ahead, before any layer is looked at (in a write transaction, finding
/// the buffers a scan must merge costs a search of each). The scan begins
/// where it would, past the known dead interval holding its first key; a
/// window used up on the way is noted dead, so the pop after jumps it.
pub fn from_window(
    dead: &std::cell::RefCell<DeadRanges>,
    table: Table,
    bounds: (&[u8], Option<&[u8]>),
    order: Order,
    visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> FromWindow {
    if !order.window {
        return FromWindow::Missed;
    }
    let used_up = {
        let d = dead.borrow();
        let Some(w) = d.windows[table as usize].as_ref() else {
            return FromWindow::Missed;
        };
        match order.reverse {
            false => serve_front(&d, w, table, bounds, visit),
            true => serve_back(&d, w, table, bounds, visit),
        }
    };
    let (lo, hi) = match used_up {
        Ok(rows) => rows,
        Err(done) => return done,
    };
    // Noted, so the next pop jumps it (its window starts, or reversed
    // ends, where this one's did).
    if let Some(hi) = &hi {
        dead.borrow_mut().add(table, &lo, hi);
    }
    FromWindow::Rest(match order.reverse {
        true => lo,
        false => hi.expect("a forward scan goes on from the window's end"),
    })
}

/// A used-up window's rows with no live row left (from the last row
/// visited, or from where the scan began, to the window's edge), or what
/// [`from_window`] answers without going on.
type UsedUp = Result<(Vec<u8>, Option<Vec<u8>>), FromWindow>;

/// [`from_window`] in key order: the window must hold the scan's first
/// key.
fn serve_front(
    d: &DeadRanges,
    w: &Window,
    table: Table,
    (start, end): (&[u8], Option<&[u8]>),
    visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> UsedUp {
    let beyond = |k: &[u8]| end.is_some_and(|e| k >= e);
    let at = d.find(table, start).map_or(start, |(_, e)| e);
    if !w.covers(at) {
        return Err(FromWindow::Missed);
    }
    let mut dead_from = at.to_vec();
    let from = w.rows.partition_point(|(k, _)| k.as_slice() < at);
    for (k, v) in w.rows.range(from..) {
        if beyond(k) || !visit(k, v) {
            return Err(FromWindow::Served);
        }
        dead_from.clone_from(k);
        dead_from.push(0);
    }
    match &w.hi {
        Some(hi) if !beyond(hi) => Ok((dead_from, Some(hi.clone()))),
        _ => Err(FromWindow::Served),
    }
}

/// [`from_window`] reversed: the scan begins below an upper bound (`None`:
/// the table's end), which the window must reach.
fn serve_back(
    d: &DeadRanges,
    w: &Window,
    table: Table,
    (start, end): (&[u8], Option<&[u8]>),
    visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> UsedUp {
    let at = end.map(|e| d.below(table, e).unwrap_or(e));
    let reaches = match (at, &w.hi) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(at), Some(hi)) => at <= hi.as_slice(),
    };
    if !reaches || at.is_some_and(|at| at <= w.lo.as_slice()) {
        return Err(FromWindow::Missed);
    }
    let to = at.map_or(w.rows.len(), |at| {
        w.rows.partition_point(|(k, _)| k.as_slice() < at)
    });
    let mut dead_to = at;
    for (k, v) in w.rows.range(..to).rev() {
        if k.as_slice() < start || !visit(k, v) {
            return Err(FromWindow::Served);
        }
        dead_to = Some(k);
    }
    if w.lo.as_slice() <= start {
        return Err(FromWindow::Served);
    }
    Ok((w.lo.clone(), dead_to.map(<[u8]>::to_vec)))
}

/// Visits the live rows of `table` in `[start, end)` as the `layers`
/// (newest first) together hold them, in key order or reversed, until
/// `visit` returns false. With `dead` (the shard writer's own scans, over
/// the latest state), known dead intervals are jumped over and the runs of
/// dead rows crossed are noted.
pub fn scan(
    layers: &[&dyn Layer],
    table: Table,
    (start, end): (&[u8], Option<&[u8]>),
    order: Order,
    dead: Option<&std::cell::RefCell<DeadRanges>>,
    visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<(), StoreError> {
    let reverse = order.reverse;
    let ranges: Vec<_> = layers.iter().map(|l| l.ranges(table)).collect();
    let windowed = dead.filter(|_| order.window);
    let first = match windowed {
        Some(_) => WINDOW,
        None => order.first.clamp(1, MAX_CHUNK),
    };
    let mut cursors: Vec<Cursor> = layers
        .iter()
        .map(|&layer| Cursor {
            layer,
            rows: VecDeque::new(),
            more: true,
            chunk: first,
        })
        .collect();
    // Reversed scans start at the end (an empty key: no bound yet).
    let first = if reverse {
        end.unwrap_or_default().to_vec()
    } else {
        start.to_vec()
    };
    let mut pos = Pos::at(first.clone());
    // Where the current run of dead rows began (the scan's start, or just
    // past the last live row), and whether it holds any.
    let mut run = first;
    let mut crossed = false;
    let note = |run: &[u8], to: &[u8]| {
        if let Some(d) = dead {
            let (lo, hi) = if reverse { (to, run) } else { (run, to) };
            // Reversed with no end: the run reaches the table's end,
            // which no key names.
            if !(reverse && hi.is_empty()) {
                d.borrow_mut().add(table, lo, hi);
            }
        }
    };
    // The run reaches the edge of the scanned range.
    let note_to_edge = |run: &[u8]| match (reverse, end) {
        (false, Some(e)) => note(run, e),
        (true, _) => note(run, start),
        (false, None) => {}
    };
    // Whether a jump to `to` leaves the scanned range.
    let beyond = |to: &[u8]| {
        if reverse {
            to <= start
        } else {
            end.is_some_and(|e| to >= e)
        }
    };
    // A scan that starts inside a known dead interval (the next pop from
    // the front) jumps it before reading anything.
    if let Some(d) = dead {
        let d = d.borrow();
        let jump = if reverse {
            end.and_then(|e| d.below(table, e))
        } else {
            d.find(table, start).map(|(_, e)| e)
        };
        if let Some(to) = jump {
            if beyond(to) {
                return Ok(());
            }
            pos = Pos::at(to.to_vec());
            crossed = true;
        }
    }
    // A pop reads ahead into a new window from where it starts
    // (`from_window` served what the last one left); reversed, the window
    // ends there (an empty key: the table's end) and starts at the last
    // row read.
    let mut ahead = match windowed {
        Some(_) if reverse => Some(Window {
            lo: Vec::new(),
            hi: (!pos.key.is_empty()).then(|| pos.key.clone()),
            rows: VecDeque::new(),
        }),
        Some(_) => Some(Window {
            lo: pos.key.clone(),
            hi: None,
            rows: VecDeque::new(),
        }),
        _ => None,
    };
    // A range that only the newest layer holds rows in (a list's newest
    // elements, all in the active buffer) is that layer's to hand over,
    // without a chunk of it copied first.
    if dead.is_none() && cursors.len() > 1 {
        for c in &mut cursors[1..] {
            c.refill(table, (start, end), reverse, &pos)?;
        }
        if cursors[1..].iter().all(|c| c.rows.is_empty()) {
            return layers[0].visit(table, scan_bounds(start, end), reverse, visit);
        }
    }
    // Whether `visit` has had all it wants (the rest is read ahead).
    let mut done = false;
    loop {
        for c in &mut cursors {
            c.refill(table, (start, end), reverse, &pos)?;
        }
        // One layer left with rows, none newer hiding a range: the rest
        // of the scan is that layer's, row after row, with nothing to
        // compare. Without the writer's dead ranges (readers' scans) no
        // run needs noting either.
        if dead.is_none() {
            if let Some(only) = sole(&cursors) {
                if ranges[..only].iter().all(Vec::is_empty) {
                    return drain_sole(&mut cursors[only], table, (start, end), reverse, visit);
                }
            }
        }
        // The next key in scan order, and the newest layer holding it.
        let mut best: Option<(usize, &[u8])> = None;
        for (i, c) in cursors.iter().enumerate() {
            let Some(k) = c.head() else { continue };
            let better = match best {
                None => true,
                Some((_, b)) => {
                    if reverse {
                        k > b
                    } else {
                        k < b
                    }
                }
            };
            if better {
                best = Some((i, k));
            }
        }
        let Some((winner, _)) = best else {
            // Exhausted: the rest of the range is dead.
            if crossed {
                note_to_edge(&run);
            }
            if let (Some(d), Some(mut w)) = (dead, ahead) {
                match reverse {
                    true => w.lo = start.to_vec(),
                    false => w.hi = end.map(<[u8]>::to_vec),
                }
                d.borrow_mut().windows[table as usize] = Some(w);
            }
            return Ok(());
        };
        // Older layers' versions of the winner's row are passed over.
        // The row itself is read where it lies and taken out last (its
        // key is the scan's position next): moved out first, the copy of
        // the row stalled on its own stores, a quarter of this function's
        // samples under LRANGE.
        let (before, rest) = cursors.split_at_mut(winner);
        let (won, after) = rest.split_first_mut().expect("the winner");
        let (key, entry) = won.rows.front().expect("head");
        for c in before.iter_mut().chain(after) {
            if c.head() == Some(key.as_slice()) {
                c.rows.pop_front();
            }
        }
        let hidden = ranges[..winner]
            .iter()
            .flatten()
            .any(|(s, e)| in_range(key.as_slice(), s, e.as_deref()));
        match (entry.as_deref(), hidden) {
            (Some(value), false) => {
                if crossed {
                    let mut to = key.as_slice().to_vec();
                    if reverse {
                        // The run lies above the live row: from just past it.
                        to.push(0);
                    }
                    note(&run, &to);
                    crossed = false;
                }
                if !done && !visit(key.as_slice(), value) {
                    done = true;
                }
                // Rewritten in place: a new copy per row, grown again by
                // the 0, was about a fifth of the samples under LRANGE.
                run.clear();
                run.extend_from_slice(key.as_slice());
                if !reverse {
                    run.push(0);
                }
                if let Some(w) = &mut ahead {
                    match reverse {
                        true => w.rows.push_front((key.as_slice().to_vec(), value.to_vec())),
                        false => w.rows.push_back((key.as_slice().to_vec(), value.to_vec())),
                    }
                }
                if let (Some(d), Some(mut w)) = (dead, ahead.take_if(|w| w.rows.len() >= WINDOW)) {
                    // Read far enough ahead: every live row up to this one
                    // (from it, reversed).
                    match reverse {
                        true => w.lo = key.as_slice().to_vec(),
                        false => w.hi = Some(run.clone()),
                    }
                    d.borrow_mut().windows[table as usize] = Some(w);
                }
                if done && ahead.is_none() {
                    return Ok(());
                }
                pos.set_after(key.as_slice());
                won.rows.pop_front();
            }
            _ => {
                crossed = true;
                // A known dead interval holding this row: jump past it.
                let jump = dead.and_then(|d| {
                    let d = d.borrow();
                    d.find(table, key.as_slice())
                        .map(|(s, e)| if reverse { s.to_vec() } else { e.to_vec() })
                });
                match jump {
                    Some(to) => {
                        if beyond(&to) {
                            note_to_edge(&run);
                            return Ok(());
                        }
                        for c in &mut cursors {
                            c.reset();
                        }
                        pos = Pos::at(to);
                    }
                    None => {
                        pos.set_after(key.as_slice());
                        won.rows.pop_front();
                    }
                }
            }
        }
    }
}

/// The one cursor that still has rows, if all the others are spent
/// (each was just refilled: a cursor with none left has no more).
fn sole(cursors: &[Cursor]) -> Option<usize> {
    let mut left = cursors
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.rows.is_empty());
    let (only, _) = left.next()?;
    left.next().is_none().then_some(only)
}

/// [`scan`]'s end when a single layer holds what is left of the range:
/// the rows of its chunk, then the rest of the layer past them
/// ([`Layer::visit`]), go to `visit` until it has had enough. Under
/// LRANGE at pipeline 16 the general loop's choosing of a layer and
/// noting of each row's key was ~17% of the server's samples, for rows
/// that one buffer held.
fn drain_sole(
    cursor: &mut Cursor,
    table: Table,
    (start, end): (&[u8], Option<&[u8]>),
    reverse: bool,
    visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<(), StoreError> {
    let Some((last, _)) = cursor.rows.back() else {
        return Ok(());
    };
    let last = last.clone();
    if !hand_over(&mut cursor.rows, visit) || !cursor.more {
        return Ok(());
    }
    let rest = past(scan_bounds(start, end), last.as_slice(), reverse);
    cursor.layer.visit(table, rest, reverse, visit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A plain layer for the tests: rows (with deletions) and ranges.
    struct Plain(
        BTreeMap<Vec<u8>, crate::storage::buffer::Entry>,
        Vec<KeyRange>,
    );

    impl Layer for Plain {
        fn fill(
            &self,
            _: Table,
            bounds: (Bound<&[u8]>, Bound<&[u8]>),
            reverse: bool,
            n: usize,
            out: &mut VecDeque<Row>,
        ) -> Result<bool, StoreError> {
            take_n(self.0.range::<[u8], _>(bounds), reverse, n, |(k, v)| {
                out.push_back((RowKey::new(k), Stored::from_entry(v.as_deref())));
                Ok(true)
            })
        }

        fn ranges(&self, _: Table) -> Vec<KeyRange> {
            self.1.clone()
        }
    }

    fn layer(rows: &[(&str, Option<&str>)], ranges: &[(&str, Option<&str>)]) -> Plain {
        Plain(
            rows.iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
                .collect(),
            ranges
                .iter()
                .map(|(s, e)| (s.as_bytes().to_vec(), e.map(|e| e.as_bytes().to_vec())))
                .collect(),
        )
    }

    /// Every row a scan finds, with each first chunk size: they all
    /// agree.
    fn all(layers: &[&dyn Layer], start: &str, end: Option<&str>, reverse: bool) -> Vec<String> {
        let found = [1, 2, MAX_CHUNK, FIRST_CHUNK].map(|first| {
            let window = false;
            all_from(
                layers,
                (start, end),
                Order {
                    reverse,
                    first,
                    window,
                },
            )
        });
        assert_eq!(found[0], found[3]);
        assert_eq!(found[1], found[3]);
        assert_eq!(found[2], found[3]);
        found[3].clone()
    }

    fn all_from(
        layers: &[&dyn Layer],
        (start, end): (&str, Option<&str>),
        order: Order,
    ) -> Vec<String> {
        let mut out = Vec::new();
        scan(
            layers,
            Table::Sub,
            (start.as_bytes(), end.map(str::as_bytes)),
            order,
            None,
            &mut |k, v| {
                out.push(format!(
                    "{}={}",
                    String::from_utf8_lossy(k),
                    String::from_utf8_lossy(v)
                ));
                true
            },
        )
        .unwrap();
        out
    }

    /// Once one layer is left, its rows go to the visitor as they are
    /// read: deletions skipped, across chunks, in both directions, and no
    /// further than the visitor wants.
    #[test]
    fn a_layer_left_alone_is_read_until_the_visitor_stops() {
        let rows: Vec<(String, Option<&str>)> = (0..1000)
            .map(|i| (format!("k{i:04}"), (i % 3 != 0).then_some("v")))
            .collect();
        let rows: Vec<(&str, Option<&str>)> = rows.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let bottom = layer(&rows, &[]);
        // The newer layer's rows come first in the scan's order, so the
        // bottom layer is left alone for the rest of it.
        let tops = [
            (false, [("k0001", Some("top")), ("k0004", None)]),
            (true, [("k0998", Some("top")), ("k0995", None)]),
        ];
        for (reverse, top_rows) in tops {
            let top = layer(&top_rows, &[]);
            let mut model: BTreeMap<&str, Option<&str>> = rows.iter().copied().collect();
            model.extend(top_rows);
            let mut want: Vec<String> = model
                .iter()
                .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
                .collect();
            if reverse {
                want.reverse();
            }
            let layers: [&dyn Layer; 2] = [&top, &bottom];
            assert_eq!(all(&layers, "", None, reverse), want);
            for first in [1, 2, FIRST_CHUNK, MAX_CHUNK] {
                let mut got = Vec::new();
                let order = Order {
                    reverse,
                    first,
                    window: false,
                };
                scan(
                    &layers,
                    Table::Sub,
                    (b"", None),
                    order,
                    None,
                    &mut |k, v| {
                        got.push(format!(
                            "{}={}",
                            String::from_utf8_lossy(k),
                            String::from_utf8_lossy(v)
                        ));
                        got.len() < 300
                    },
                )
                .unwrap();
                assert_eq!(got, want[..300], "reverse {reverse}, first chunk {first}");
            }
        }
    }

    /// A range whose rows only the newest layer holds is read from that
    /// layer alone, deletions skipped, in both directions.
    #[test]
    fn a_range_only_the_newest_layer_holds_is_read_from_it() {
        let top = layer(
            &[("a", Some("1")), ("b", Some("2")), ("c", None), ("x", None)],
            &[],
        );
        let bottom = layer(
            &[("c", Some("old")), ("x", Some("old")), ("y", Some("old"))],
            &[],
        );
        let layers: [&dyn Layer; 2] = [&top, &bottom];
        assert_eq!(all(&layers, "a", Some("c"), false), ["a=1", "b=2"]);
        assert_eq!(all(&layers, "a", Some("c"), true), ["b=2", "a=1"]);
        assert_eq!(all(&layers, "", None, false), ["a=1", "b=2", "y=old"]);
        assert_eq!(all(&layers, "", None, true), ["y=old", "b=2", "a=1"]);
    }

    /// Newer layers win, deletions shadow, ranges hide only older layers,
    /// in both directions and within prefix bounds; many rows cross the
    /// chunk boundaries.
    #[test]
    fn newest_layer_decides_each_row() {
        let top = layer(
            &[("b", Some("top")), ("d", None), ("f2", Some("new"))],
            &[("f", Some("g"))],
        );
        let mid = layer(
            &[("a", Some("mid")), ("c", None), ("f1", Some("hidden"))],
            &[],
        );
        let bottom = layer(
            &[
                ("a", Some("old")),
                ("b", Some("old")),
                ("c", Some("old")),
                ("d", Some("old")),
                ("e", Some("old")),
                ("f3", Some("hidden")),
                ("g", Some("old")),
            ],
            &[],
        );
        let layers: [&dyn Layer; 3] = [&top, &mid, &bottom];
        let forward = all(&layers, "", None, false);
        assert_eq!(forward, ["a=mid", "b=top", "e=old", "f2=new", "g=old"]);
        let mut backward = all(&layers, "", None, true);
        backward.reverse();
        assert_eq!(backward, forward);
        assert_eq!(all(&layers, "b", Some("f"), false), ["b=top", "e=old"]);
        assert_eq!(all(&layers, "b", Some("f"), true), ["e=old", "b=top"]);
        // Past several chunks: every row once, in order.
        let many: Vec<(String, Option<String>)> = (0..1000)
            .map(|i| (format!("k{i:04}"), Some("v".to_string())))
            .collect();
        let even: Vec<(String, Option<String>)> = (0..1000)
            .step_by(2)
            .map(|i| (format!("k{i:04}"), None))
            .collect();
        let to = |v: &[(String, Option<String>)]| {
            Plain(
                v.iter()
                    .map(|(k, e)| (k.clone().into_bytes(), e.clone().map(String::into_bytes)))
                    .collect(),
                vec![],
            )
        };
        let (bottom, top) = (to(&many), to(&even));
        let got = all(&[&top, &bottom], "", None, true);
        assert_eq!(got.len(), 500);
        assert_eq!(got[0], "k0999=v");
        assert_eq!(got[499], "k0001=v");
    }

    /// A layer of `n` rows `k<i>` (zero-padded, so key order is number
    /// order) holding `v`, and how to name the `i`th.
    fn numbered(n: u64) -> (impl Fn(u64) -> Vec<u8>, Plain) {
        let width = n.to_string().len();
        let key = move |i: u64| format!("k{i:0width$}").into_bytes();
        let rows = (0..n).map(|i| (key(i), Some(b"v".to_vec()))).collect();
        (key, Plain(rows, vec![]))
    }

    /// Pops from the front, the back and random points, with rows written
    /// back now and then: scans that jump over the dead runs noted by
    /// earlier ones find exactly what a plain merge finds.
    #[test]
    fn dead_ranges_never_change_what_a_scan_finds() {
        use std::cell::RefCell;
        let mut rand = crate::util::test_rng(0x2545_f491_4f6c_dd1du64);
        let (key, bottom) = numbered(400);
        let mut top = Plain(BTreeMap::new(), vec![]);
        let dead = RefCell::new(DeadRanges::default());
        let first =
            |top: &Plain, dead: Option<&RefCell<DeadRanges>>, from: &[u8], reverse: bool| {
                let mut found = None;
                let (start, end): (&[u8], Option<&[u8]>) = if reverse {
                    (b"k", Some(from))
                } else {
                    (from, Some(b"l"))
                };
                // The jumping scans read one row a layer at first, as pops
                // do.
                let first = if dead.is_some() { 1 } else { FIRST_CHUNK };
                scan(
                    &[top, &bottom],
                    Table::Sub,
                    (start, end),
                    Order {
                        reverse,
                        first,
                        window: false,
                    },
                    dead,
                    &mut |k, _| {
                        found = Some(k.to_vec());
                        false
                    },
                )
                .unwrap();
                found
            };
        for round in 0..3000 {
            let from = match rand(3) {
                0 => b"k".to_vec(),
                1 => b"l".to_vec(),
                _ => key(rand(400)),
            };
            let reverse = rand(2) == 0;
            let plain = first(&top, None, &from, reverse);
            let jumped = first(&top, Some(&dead), &from, reverse);
            assert_eq!(jumped, plain, "round {round}");
            if let Some(k) = plain {
                top.0.insert(k, None);
            }
            if rand(10) == 0 {
                let k = key(rand(400));
                dead.borrow_mut().touch(Table::Sub, &k);
                top.0.insert(k, Some(b"again".to_vec()));
            }
        }
    }

    /// Pops from either end that read ahead into a window, of one row or
    /// of many, with rows written back, scans that pop nothing and scans
    /// from inside the window now and then: each finds what a plain merge
    /// finds, and most pops read no layer at all.
    #[test]
    fn windows_never_change_what_a_pop_finds() {
        use std::cell::{Cell, RefCell};
        /// Counts the fills it is asked for.
        struct Counted<'a>(&'a Plain, &'a Cell<usize>);
        impl Layer for Counted<'_> {
            fn fill(
                &self,
                table: Table,
                bounds: (Bound<&[u8]>, Bound<&[u8]>),
                reverse: bool,
                n: usize,
                out: &mut VecDeque<Row>,
            ) -> Result<bool, StoreError> {
                self.1.set(self.1.get() + 1);
                self.0.fill(table, bounds, reverse, n, out)
            }
            fn ranges(&self, table: Table) -> Vec<KeyRange> {
                self.0.ranges(table)
            }
        }
        let mut rand = crate::util::test_rng(0x9e37_79b9_7f4a_7c15u64);
        let (key, bottom) = numbered(5_000);
        let mut top = Plain(BTreeMap::new(), vec![]);
        let dead = RefCell::new(DeadRanges::default());
        let fills = Cell::new(0);
        let first = |top: &Plain, dead: Option<&RefCell<DeadRanges>>, from: &[u8], n, reverse| {
            let mut found = Vec::new();
            let mut visit = |k: &[u8], v: &[u8]| {
                found.push((k.to_vec(), v.to_vec()));
                found.len() < n
            };
            let order = Order {
                reverse,
                first: 1,
                window: dead.is_some(),
            };
            // `k`: from the front (reversed, the back) of the rows; `m`:
            // reversed, from the table's end (past `l`).
            let (mut start, mut end) = match (reverse, from) {
                (false, b"m") => (b"k".to_vec(), Some(b"l".to_vec())),
                (false, _) => (from.to_vec(), Some(b"l".to_vec())),
                (true, b"k") => (b"k".to_vec(), Some(b"l".to_vec())),
                (true, b"m") => (b"k".to_vec(), None),
                (true, _) => (b"k".to_vec(), Some(from.to_vec())),
            };
            if let Some(d) = dead {
                match from_window(d, Table::Sub, (&start, end.as_deref()), order, &mut visit) {
                    FromWindow::Served => return found,
                    FromWindow::Missed => {}
                    FromWindow::Rest(k) if reverse => end = Some(k),
                    FromWindow::Rest(k) => start = k,
                }
            }
            let unseen = Cell::new(0);
            let counted = Counted(&bottom, if dead.is_some() { &fills } else { &unseen });
            let layers: [&dyn Layer; 2] = [top, &counted];
            let bounds = (&start[..], end.as_deref());
            scan(&layers, Table::Sub, bounds, order, dead, &mut visit).unwrap();
            found
        };
        let mut pops = 0;
        for round in 0..3000 {
            let from = match rand(16) {
                0 | 1 => key(rand(5_000)),
                2 => b"m".to_vec(),
                _ => b"k".to_vec(),
            };
            // Now and then a pop of many, past a window's end.
            let n = if rand(4) == 0 {
                1 + rand(200) as usize
            } else {
                1
            };
            // Runs of pops from one end, then the other.
            let reverse = (round / 50) % 2 == 1;
            let plain = first(&top, None, &from, n, reverse);
            let windowed = first(&top, Some(&dead), &from, n, reverse);
            assert_eq!(windowed, plain, "round {round}");
            // Now and then a scan that leaves what it found (its rows
            // are still live for the next one).
            if rand(3) == 0 {
                continue;
            }
            for (k, _) in plain {
                pops += 1;
                dead.borrow_mut().deleted(Table::Sub, &k);
                top.0.insert(k, None);
            }
            if rand(20) == 0 {
                let k = key(rand(5_000));
                dead.borrow_mut().touch(Table::Sub, &k);
                top.0.insert(k, Some(b"again".to_vec()));
            }
        }
        assert!(pops > 900, "{pops} pops");
        // Most windowed pops read no layer at all.
        assert!(fills.get() < 3000 * 2 / 3, "{} fills", fills.get());
    }
}

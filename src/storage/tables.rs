//! The redb tables of one shard file and the two views commands use: a
//! [`ReadCtx`] over an MVCC snapshot (connection threads) and a [`WriteCtx`]
//! over the actor's batch write transaction.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::buffer::{in_range, Buffer, Change, Entry, KeyRange, RowKey, Stored};
use super::encoding::CorruptRow;
use super::filter::KeyFilter;
use super::merge::{self, Layer};
use super::rowmap::Slot;
use super::store::Pin;
use super::vlog::{Files, ValueLog};

type Def = TableDefinition<'static, &'static [u8], &'static [u8]>;

/// A table open in a write transaction.
type OpenTable<'t> = redb::Table<'t, &'static [u8], &'static [u8]>;

const META: Def = TableDefinition::new("meta");
const SUB: Def = TableDefinition::new("sub");
const ZSCORE: Def = TableDefinition::new("zscore");
const TTL: Def = TableDefinition::new("ttl");
const GC: Def = TableDefinition::new("gc");
const SYS: Def = TableDefinition::new("sys");

/// The tables of a shard file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// One row per key: type, expiry, value or collection header.
    Meta,
    /// Collection members under their version.
    Sub,
    /// Sorted-set score index.
    ZScore,
    /// Expiry index ordered by time.
    Ttl,
    /// Dead collection versions awaiting background deletion.
    Gc,
    /// Format version, version high-water mark, key counts.
    Sys,
}

impl Table {
    pub(crate) fn def(self) -> Def {
        match self {
            Table::Meta => META,
            Table::Sub => SUB,
            Table::ZScore => ZSCORE,
            Table::Ttl => TTL,
            Table::Gc => GC,
            Table::Sys => SYS,
        }
    }

    /// The table with code `code` (its position in [`Table::ALL`]), as the
    /// coordination log stores it.
    pub fn from_code(code: u8) -> Option<Table> {
        Table::ALL.get(code as usize).copied()
    }

    /// Every table, in code order.
    pub(crate) const ALL: [Table; 6] = [
        Table::Meta,
        Table::Sub,
        Table::ZScore,
        Table::Ttl,
        Table::Gc,
        Table::Sys,
    ];
}

/// A storage failure. Commands turn it into an `ERR` reply; the shard aborts
/// the batch it happened in.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// redb reported an error.
    #[error("storage error: {0}")]
    Redb(#[from] redb::Error),
    /// A row could not be decoded.
    #[error(transparent)]
    Corrupt(#[from] CorruptRow),
    /// Anything else that stops a transaction (a panicking op, a refused
    /// durability setting).
    #[error("internal error: {0}")]
    Internal(String),
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::Redb(e.into())
            }
        }
    )*};
}
from_redb!(
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::DatabaseError
);

/// Read access shared by both views, object-safe so command logic can be
/// written once and run on either.
pub trait KvRead {
    /// The time: what TTLs are counted from and, but for a replica's
    /// primary (see [`KvRead::expiry_clock`]), what expiry is judged by.
    fn now_ms(&self) -> u64;
    /// The time lazy expiry is judged against: `now_ms`, or 0 (nothing has
    /// expired) for a command of the primary a replica applies (see
    /// [`WriteCtx::as_primary`]).
    fn expiry_clock(&self) -> u64 {
        self.now_ms()
    }
    /// One row.
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    /// [`KvRead::get`] of a row read once and not again soon (a random
    /// pick's draw): views with a row cache neither ask it nor offer it
    /// the row, whose lookup and doorkeeper mark were 3.5% of SPOP's
    /// samples for rows about to be popped.
    fn get_once(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(table, key)
    }
    /// A `meta` row, or, where the value log holds it and its pointer row
    /// carries its head, that head alone (type byte and expiry, all
    /// `Meta::peek_header` reads): TYPE, EXISTS and TTL need no read of
    /// the log. Views that cannot tell read the whole row.
    fn get_head(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(Table::Meta, key)
    }
    /// Rows with keys in `[start, end)` (end `None` = to the table's end), in
    /// key order or reversed; `visit` returns false to stop.
    fn scan(
        &self,
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        self.scan_few(table, (start, end), merge::Order::of(reverse), visit)
    }
    /// [`KvRead::scan`] in `order`, for a caller that stops after about
    /// `order.first` rows (a pop of one member): a merged view's layers
    /// read that many at first, instead of a chunk of
    /// [`merge::FIRST_CHUNK`] rows copied out of redb and the buffers only
    /// to be dropped. Readers that fetch rows otherwise may pass over
    /// `order.first`.
    fn scan_few(
        &self,
        table: Table,
        bounds: (&[u8], Option<&[u8]>),
        order: merge::Order,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError>;
    /// How many keys database `db` holds in this view.
    fn key_count(&self, db: u8) -> Result<i64, StoreError> {
        let row = self.get(Table::Sys, &count_key(db))?;
        Ok(row
            .and_then(|v| {
                v.get(..8)
                    .map(|b| i64::from_be_bytes(b.try_into().unwrap()))
            })
            .unwrap_or(0))
    }
    /// A read command looked a key up and found it (`hit`) or not: INFO's
    /// keyspace_hits / keyspace_misses. Only readers that count do anything.
    fn note_lookup(&self, _hit: bool) {}
    /// A read command's lookup of `key` in database `db` found nothing:
    /// the keyspace notification `keymiss`. Only the connection's readers
    /// publish it (see `families::Counted`).
    fn note_miss(&self, _db: u8, _key: &[u8]) {}

    /// Told of a key a lookup found expired: a reader that can have it
    /// deleted (a connection's snapshot read) does so after the command,
    /// as Redis deletes a key its access found expired.
    fn note_expired(&self, _db: u8, _key: &[u8]) {}

    /// Notes that client `id`'s command inside EXEC has read `keys`, so
    /// that it tracks them from this point of the unit on (see
    /// [`Touch::Read`]). False where the reader cannot (a snapshot, or a
    /// shard where no client tracks keys): the caller then has the keys
    /// tracked itself.
    fn track_read(&self, _id: u64, _keys: &[bytes::Bytes]) -> bool {
        false
    }
}

/// Hands `visit` the rows of a redb table within `bounds`, in key order
/// or reversed, as they lie there (value-log pointers resolved), until it
/// returns false.
fn scan_table<T: ReadableTable<&'static [u8], &'static [u8]>>(
    (t, table, values): (&T, Table, &Files),
    bounds: (Bound<&[u8]>, Bound<&[u8]>),
    reverse: bool,
    visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<(), StoreError> {
    merge::each_while(t.range::<&[u8]>(bounds)?, reverse, |item| {
        let (k, v) = item?;
        Ok(visit(k.value(), &values.resolve(table, v.value())?))
    })
}

/// Creates the tables of a new file and checks the format version of an
/// existing one.
pub fn init_file(db: &Database) -> Result<(), StoreError> {
    let txn = db.begin_write()?;
    {
        for t in Table::ALL {
            txn.open_table(t.def())?;
        }
        let mut sys = txn.open_table(SYS)?;
        let existing = sys.get(&b"format"[..])?.map(|v| v.value().to_vec());
        let version = existing.map(|v| u32::from_be_bytes(v.try_into().unwrap_or_default()));
        match version {
            Some(FORMAT_VERSION) => {}
            // Version 1 is version 2 without pointer rows, and version 2
            // is version 3 without pointer rows that carry their row's
            // head: nothing to change but the number, which keeps builds
            // that cannot read the newer rows off the file.
            None | Some(1) | Some(2) => {
                sys.insert(&b"format"[..], &FORMAT_VERSION.to_be_bytes()[..])?;
            }
            Some(_) => {
                return Err(CorruptRow("file written by an incompatible format version").into())
            }
        }
    }
    txn.commit()?;
    Ok(())
}

/// On-disk format version of this build: 2 since `meta` rows may point
/// into the value log (`vlog`), 3 since pointer rows carry their row's
/// head.
pub const FORMAT_VERSION: u32 = 3;

/// Most bytes of rows [`ReadCtx::cache_ahead`] keeps: a list of big
/// elements is read ahead fewer at a time.
const READ_AHEAD_BYTES: usize = 256 << 10;

/// Rows of one table a view read ahead (see [`ReadCtx::cache_ahead`]):
/// all the tables hold from `from` up to `to` (exclusive), in key order.
struct ReadAhead {
    table: Table,
    from: Vec<u8>,
    to: Vec<u8>,
    rows: Vec<(Vec<u8>, Vec<u8>)>,
}

/// A read-only view of a shard at one point: its write buffers (newest
/// first) at sequence `seq`, merged over a redb snapshot of its tables.
/// Tables are opened on first use and kept, so a pipeline of reads on one
/// view opens each table once.
pub struct ReadCtx {
    txn: redb::ReadTransaction,
    tables: [std::sync::OnceLock<redb::ReadOnlyTable<&'static [u8], &'static [u8]>>; 6],
    layers: Vec<Arc<Buffer>>,
    seq: u64,
    now_ms: u64,
    /// The rows of the tables as of (at most) `txn`'s snapshot: a key it
    /// lacks is not read from them.
    filter: Option<Arc<KeyFilter>>,
    /// The value log files `txn`'s pointer rows point into.
    values: Arc<Files>,
    /// The shard's cache of rows, and the epoch this view's
    /// snapshot belongs to (see `rowcache`).
    rows: Option<(Arc<super::rowcache::RowCache>, u64)>,
    /// Whether a row no buffer holds is looked for in the row cache
    /// before the key filter is asked (see [`ReadCtx::stored`]).
    cache_first: bool,
    /// The rows [`ReadCtx::cache_ahead`] read last.
    ahead: parking_lot::Mutex<Option<ReadAhead>>,
    /// Whether `ahead` holds a window: most views never read ahead, and
    /// their point reads then skip the lock, two atomic operations that
    /// also keep a read's cache misses from overlapping the next one's.
    has_ahead: std::sync::atomic::AtomicBool,
    /// Keeps the versions this view reads, and the store open: whoever
    /// closes it (DEBUG RELOAD) waits until no snapshot holds it.
    _pin: Option<Pin>,
}

impl ReadCtx {
    /// A view of the tables alone (a file no shard has open: recovery,
    /// tools, tests).
    pub fn begin(db: &Database, now_ms: u64) -> Result<ReadCtx, StoreError> {
        Ok(Self::layered(db.begin_read()?, Vec::new(), 0, None, now_ms))
    }

    /// Whether this view reads exactly `layers` (the same buffers, in
    /// the same order).
    pub(crate) fn reads_layers(&self, layers: &[Arc<Buffer>]) -> bool {
        self.layers.len() == layers.len()
            && self
                .layers
                .iter()
                .zip(layers)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }

    /// Whether this view resolves pointers in exactly `values`.
    pub(crate) fn reads_values(&self, values: &Arc<Files>) -> bool {
        Arc::ptr_eq(&self.values, values)
    }

    /// Moves an unpinned view over the same layers on to sequence `seq`
    /// and clock `now_ms` (see `Store::latest_from`).
    pub(crate) fn advance(&mut self, seq: u64, now_ms: u64) {
        debug_assert!(self._pin.is_none(), "a pinned view keeps its sequence");
        self.seq = seq;
        self.now_ms = now_ms;
    }

    /// A view of `layers` at `seq` over the tables of `txn` (see
    /// `Store::snapshot`).
    pub(crate) fn layered(
        txn: redb::ReadTransaction,
        layers: Vec<Arc<Buffer>>,
        seq: u64,
        pin: Option<Pin>,
        now_ms: u64,
    ) -> ReadCtx {
        ReadCtx {
            txn,
            tables: Default::default(),
            layers,
            seq,
            now_ms,
            filter: None,
            values: Default::default(),
            rows: None,
            cache_first: false,
            ahead: Default::default(),
            has_ahead: Default::default(),
            _pin: pin,
        }
    }

    /// Whether reads of rows the tables lack skip them (tests).
    #[cfg(test)]
    pub(crate) fn filtered(&self) -> bool {
        self.filter.is_some()
    }

    /// This view with `filter` answering which rows the tables lack; it
    /// must hold every row of the view's snapshot (see `Store::view`).
    pub(crate) fn with_filter(mut self, filter: Option<Arc<KeyFilter>>) -> ReadCtx {
        self.filter = filter;
        self
    }

    /// This view with the value log files its snapshot's pointer rows
    /// point into (taken with the snapshot: see `Store::view`).
    pub(crate) fn with_values(mut self, values: Arc<Files>) -> ReadCtx {
        self.values = values;
        self
    }

    /// This view with the shard's row cache, as of `epoch` (taken with the
    /// snapshot: see `Store::view`).
    pub(crate) fn with_rows(mut self, rows: Arc<super::rowcache::RowCache>, epoch: u64) -> ReadCtx {
        self.rows = Some((rows, epoch));
        self
    }

    /// This view asking the row cache before the key filter: for readers,
    /// whose rows are mostly there (see [`ReadCtx::stored`]).
    pub(crate) fn cache_first(mut self, yes: bool) -> ReadCtx {
        self.cache_first = yes;
        self
    }

    /// Number of rows in a table (INFO's row counts; lets tests check that
    /// garbage collection really emptied the sub-key tables).
    ///
    /// The table's own count, corrected by each row the buffers hold: work
    /// in the size of the buffers (bounded by `write_buffer_mb`), not of
    /// the table, so monitoring that polls INFO stays cheap. A buffer that
    /// deleted a range (rare: FLUSHALL and the like) makes it a scan.
    pub fn rows(&self, t: Table) -> Result<u64, StoreError> {
        use redb::ReadableTableMetadata;
        if self.layers.iter().all(|b| b.untouched(t, &[], None)) {
            return Ok(self.table(t)?.len()?);
        }
        if self
            .layers
            .iter()
            .any(|b| !b.ranges(t, self.seq).is_empty())
        {
            let mut n = 0;
            self.scan(t, &[], None, false, &mut |_, _| {
                n += 1;
                true
            })?;
            return Ok(n);
        }
        let mut buffered: std::collections::HashSet<Arc<[u8]>> = Default::default();
        for b in &self.layers {
            buffered.extend(b.keys(t));
        }
        let base = self.table(t)?;
        let mut n = base.len()? as i64;
        for k in &buffered {
            let now = self.stored(t, k)?.is_some();
            let before = base.get(&**k)?.is_some();
            n += now as i64 - before as i64;
        }
        Ok(n.max(0) as u64)
    }

    /// Loads the buffered rows of `keys` into the cache without reading
    /// them out. A command about to look up several rows (MSET) warms them
    /// all first: each lookup is a cache miss into a large map, and made
    /// back to back the misses overlap instead of coming one at a time
    /// between the writes.
    pub fn warm(&self, table: Table, keys: &[Vec<u8>]) {
        super::buffer::warm_layers(&self.layers, table, keys);
    }

    /// A `meta` row, or, where the value log holds it and its pointer row
    /// carries its head, that head alone (`true`), which `Meta::decode`
    /// reads as the key's type and expiry with an empty value. Replacing a
    /// row, or telling its type or expiry, needs no more, and reading the
    /// value would cost a read of the log (a disk read, once data outgrows
    /// memory).
    fn meta_or_head(&self, key: &[u8]) -> Result<Option<(Vec<u8>, bool)>, StoreError> {
        let Some(mut row) = self.stored(Table::Meta, key)? else {
            return Ok(None);
        };
        if let Some(head) = super::vlog::pointed_head(&row) {
            return Ok(Some((head.to_vec(), true)));
        }
        self.values.resolve_in_place(Table::Meta, &mut row)?;
        Ok(Some((row, false)))
    }

    /// A row as its layer holds it: a pointer row is not resolved (see
    /// `vlog`), for callers that only ask whether it is there.
    ///
    /// Past the buffers, the key filter and the row cache are each a
    /// cache miss or two; which goes first is a bet on the row. A reader's
    /// rows are mostly there (clients read what they wrote), and one the
    /// cache holds then needs no filter probe: GET -c 50 -P 16 over
    /// 100,000 keys spent 7.6% of its samples on the filter, nearly all
    /// for rows the cache then gave. A write's lookups are often of a row
    /// about to be made (a new member, field or key), which the filter
    /// answers alone: SADD of new members took ~9% more CPU a request
    /// with the cache asked first.
    fn stored(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.stored_with(table, key, true)
    }

    /// A row as [`ReadCtx::stored`] found it, with a value the value log
    /// holds read from there.
    fn resolved(&self, row: Option<Vec<u8>>, table: Table) -> Result<Option<Vec<u8>>, StoreError> {
        match row {
            Some(mut row) => {
                self.values.resolve_in_place(table, &mut row)?;
                Ok(Some(row))
            }
            None => Ok(None),
        }
    }

    /// [`ReadCtx::stored`], asking and filling the row cache or not.
    fn stored_with(
        &self,
        table: Table,
        key: &[u8],
        cache: bool,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        for b in &self.layers {
            if let Some(e) = b.get(table, key, self.seq) {
                return Ok(e);
            }
        }
        if let Some(row) = self.read_ahead(table, key) {
            return Ok(row);
        }
        let rows = self.rows.as_ref().filter(|_| cache);
        let cached = || match rows {
            Some((rows, epoch)) => rows.get(*epoch, table, key),
            None => None,
        };
        if self.cache_first {
            if let Some(row) = cached() {
                return Ok(Some(row));
            }
        }
        if self
            .filter
            .as_ref()
            .is_some_and(|f| !f.may_contain(table, key))
        {
            return Ok(None);
        }
        if !self.cache_first {
            if let Some(row) = cached() {
                return Ok(Some(row));
            }
        }
        let row = self.table(table)?.get(key)?.map(|v| v.value().to_vec());
        match (rows, &row, &self.filter) {
            (Some((rows, epoch)), Some(row), _) => rows.put(*epoch, table, key, row),
            // The filter let a row through that is not there (one deleted
            // since its build, mostly): counted toward its rebuild.
            (_, None, Some(f)) if KeyFilter::covers(table) => f.missed(),
            _ => {}
        }
        Ok(row)
    }

    fn table(
        &self,
        t: Table,
    ) -> Result<&redb::ReadOnlyTable<&'static [u8], &'static [u8]>, StoreError> {
        let slot = &self.tables[t as usize];
        if let Some(table) = slot.get() {
            return Ok(table);
        }
        let opened = self.txn.open_table(t.def())?;
        Ok(slot.get_or_init(|| opened))
    }

    /// Reads the rows the tables hold from `from` up to `to` (exclusive)
    /// of `table` with one cursor, where a caller is about to read them
    /// one at a time (a list's pops): this view then answers those reads
    /// from what it read, with no descent of the B-tree, key filter probe
    /// or row cache lookup each. They are the rows of this view's
    /// snapshot, so they stay right for as long as the view lives; reads
    /// still ask the buffers first. (They went into the row cache: its
    /// locked inserts, and the filter's cache miss per read, were 13% of
    /// RPOP's samples at pipeline 16.)
    pub(crate) fn cache_ahead(
        &self,
        table: Table,
        from: &[u8],
        to: &[u8],
    ) -> Result<(), StoreError> {
        // Read without the lock: the window it replaces holds rows of
        // the same snapshot, right for any reader meanwhile.
        let mut window = ReadAhead {
            table,
            from: from.to_vec(),
            to: to.to_vec(),
            rows: Vec::with_capacity(32),
        };
        let mut bytes = 0;
        for row in self.table(table)?.range::<&[u8]>(from..to)? {
            let (k, v) = row?;
            if bytes >= READ_AHEAD_BYTES {
                // What is read stays; the rest is read as usual.
                window.to = k.value().to_vec();
                break;
            }
            bytes += k.value().len() + v.value().len();
            window.rows.push((k.value().to_vec(), v.value().to_vec()));
        }
        *self.ahead.lock() = Some(window);
        self.has_ahead
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// The tables' row at `key` if the rows read ahead cover it (`None`
    /// if they do not; `Some(None)` if the tables lack it).
    fn read_ahead(&self, table: Table, key: &[u8]) -> Option<Option<Vec<u8>>> {
        // A window, once set, stays (replaced, never taken away), so a
        // reader that sees none can go on without it.
        if !self.has_ahead.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        let ahead = self.ahead.lock();
        let w = ahead.as_ref()?;
        if w.table != table || key < w.from.as_slice() || key >= w.to.as_slice() {
            return None;
        }
        let found = w.rows.binary_search_by(|(k, _)| k.as_slice().cmp(key));
        Some(found.ok().map(|i| w.rows[i].1.clone()))
    }

    /// Scans with `top` (a write transaction's own changes) over this
    /// view's layers.
    fn scan_under(
        &self,
        top: Option<&dyn Layer>,
        dead: Option<&std::cell::RefCell<merge::DeadRanges>>,
        table: Table,
        (start, end): (&[u8], Option<&[u8]>),
        order: merge::Order,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let reverse = order.reverse;
        let busy: Vec<BufferAt> = self
            .layers
            .iter()
            .filter(|b| !b.untouched(table, start, end))
            .map(|b| BufferAt(b, self.seq, &self.values))
            .collect();
        if top.is_none() && busy.is_empty() {
            // Nothing buffered here: the tables alone, at full speed.
            let t = self.table(table)?;
            let bounds = merge::scan_bounds(start, end);
            return scan_table((t, table, &self.values), bounds, reverse, visit);
        }
        let tables = TableLayer(self.table(table)?, &self.values);
        let mut layers: Vec<&dyn Layer> = Vec::with_capacity(busy.len() + 2);
        layers.extend(top);
        layers.extend(busy.iter().map(|b| b as &dyn Layer));
        layers.push(&tables);
        merge::scan(&layers, table, (start, end), order, dead, visit)
    }
}

/// A write buffer as a reader at a sequence sees it, and the value log
/// files its pointer rows point into.
struct BufferAt<'a>(&'a Buffer, u64, &'a Files);

impl Layer for BufferAt<'_> {
    fn fill(
        &self,
        table: Table,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        n: usize,
        out: &mut VecDeque<merge::Row>,
    ) -> Result<bool, StoreError> {
        let from = out.len();
        let more = self.0.fill(table, bounds, reverse, self.1, n, out);
        // Not a row of the chunk is a pointer otherwise (asking each was
        // 3% of LRANGE's samples).
        if !super::vlog::points_in(table) {
            return Ok(more);
        }
        for (_, row) in out.iter_mut().skip(from) {
            let pointed = match row.as_deref() {
                Some(stored) => self.2.resolve(table, stored)?,
                None => continue,
            };
            if let std::borrow::Cow::Owned(value) = pointed {
                *row = Stored::of(&value);
            }
        }
        Ok(more)
    }

    fn ranges(&self, table: Table) -> Vec<KeyRange> {
        self.0.ranges(table, self.1)
    }

    fn visit(
        &self,
        table: Table,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        if super::vlog::points_in(table) {
            return merge::visit_by_chunks(self, table, bounds, reverse, visit);
        }
        // Deleted rows are passed over; nothing here needs resolving.
        self.0.visit(table, bounds, reverse, self.1, &mut |k, v| {
            v.is_none_or(|v| visit(k, v))
        });
        Ok(())
    }
}

/// A redb table, the oldest layer, and the value log files its pointer
/// rows point into.
struct TableLayer<'a, T>(&'a T, &'a Files);

impl<T: ReadableTable<&'static [u8], &'static [u8]>> Layer for TableLayer<'_, T> {
    fn fill(
        &self,
        table: Table,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        n: usize,
        out: &mut VecDeque<merge::Row>,
    ) -> Result<bool, StoreError> {
        merge::take_n(self.0.range::<&[u8]>(bounds)?, reverse, n, |item| {
            let (k, v) = item?;
            let row = Stored::of(&self.1.resolve(table, v.value())?);
            out.push_back((RowKey::new(k.value()), row));
            Ok(true)
        })
    }

    fn ranges(&self, _: Table) -> Vec<KeyRange> {
        Vec::new()
    }

    fn visit(
        &self,
        table: Table,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        scan_table((self.0, table, self.1), bounds, reverse, visit)
    }
}

impl KvRead for ReadCtx {
    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    fn get_head(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.meta_or_head(key)?.map(|(row, _)| row))
    }

    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.resolved(self.stored(table, key)?, table)
    }

    fn get_once(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.resolved(self.stored_with(table, key, false)?, table)
    }

    fn scan_few(
        &self,
        table: Table,
        bounds: (&[u8], Option<&[u8]>),
        order: merge::Order,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        self.scan_under(None, None, table, bounds, order, visit)
    }
}

/// Per-database key and expiring-key counts (DBSIZE, INFO keyspace).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DbCounts {
    /// Keys stored (including expired ones not yet reaped, as Redis counts).
    pub keys: i64,
    /// Keys with an expiry.
    pub expires: i64,
    /// The sum of those keys' expiry times (ms): INFO's `avg_ttl` is the
    /// mean less now, exact where Redis samples.
    pub expire_sum: i128,
}

/// Number of logical databases (SELECT 0..15).
pub const DATABASES: usize = 16;

/// Namespaces a shard keeps counts for: the databases plus one spare that
/// SWAPDB parks keys in while it exchanges two databases.
pub const NAMESPACES: usize = DATABASES + 1;

/// What the actor keeps in memory about its file between transactions.
#[derive(Debug, Clone)]
pub struct ShardState {
    /// Next collection version to hand out.
    pub next_version: u64,
    /// Whether versions were handed out in the current transaction.
    pub version_dirty: bool,
    /// Key counts per database.
    pub counts: [DbCounts; NAMESPACES],
    /// The counts as their `sys` rows hold them: a transaction rewrites
    /// the rows of the databases whose counts differ from these (so a batch
    /// that touched one database does not log sixteen rows), and none if
    /// none differ.
    pub counts_stored: [DbCounts; NAMESPACES],
    /// Runs of deleted rows the shard's scans have crossed (see
    /// [`merge::DeadRanges`]): in memory only, valid for the latest state,
    /// dropped with the state when a transaction is rolled back.
    pub dead: std::cell::RefCell<merge::DeadRanges>,
    /// Members of sets being popped (see [`super::pools`]): in memory
    /// only, dropped by any other write of their rows and with the state.
    pub pools: super::pools::Pools,
}

impl ShardState {
    /// Loads the persisted state of a shard from a view of it.
    pub fn load(r: &dyn KvRead) -> Result<ShardState, StoreError> {
        let hwm = r.get(Table::Sys, b"version_hwm")?.map_or(0, |v| {
            u64::from_be_bytes(v.as_slice().try_into().unwrap_or([0; 8]))
        });
        let mut counts = [DbCounts::default(); NAMESPACES];
        // Stays all zeros where the rows are absent, so that a count first
        // set by a transaction is written even if it counts nothing.
        let mut stored = [DbCounts::default(); NAMESPACES];
        let mut without_sums = [false; NAMESPACES];
        for (i, c) in counts.iter_mut().enumerate() {
            if let Some(v) = r.get(Table::Sys, count_key(i as u8).as_slice())? {
                if v.len() >= 16 {
                    c.keys = i64::from_be_bytes(v[..8].try_into().unwrap());
                    c.expires = i64::from_be_bytes(v[8..16].try_into().unwrap());
                }
                match v.get(16..32) {
                    Some(sum) => c.expire_sum = i128::from_be_bytes(sum.try_into().unwrap()),
                    None => without_sums[i] = c.expires > 0,
                }
                stored[i] = *c;
            }
        }
        if without_sums.contains(&true) {
            // A file written before the sums were kept: one pass over the
            // expiry index adds them up.
            r.scan(Table::Ttl, &[], None, false, &mut |k, _| {
                // `expire_ms:u64 ns_len:u8 ns...`, ns being the database.
                if let (Some((expire, _)), Some(&[1, ns])) =
                    (super::encoding::decode_ttl_key(k), k.get(8..10))
                {
                    let ns = ns as usize;
                    if without_sums.get(ns) == Some(&true) {
                        counts[ns].expire_sum += i128::from(expire);
                    }
                }
                true
            })?;
        }
        Ok(ShardState {
            // Versions also start above the wall clock in microseconds, so a
            // file whose high-water mark was lost still never reuses one.
            next_version: hwm.max(now_micros()) + 1,
            version_dirty: false,
            counts,
            counts_stored: stored,
            dead: Default::default(),
            pools: Default::default(),
        })
    }
}

fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn count_key(db: u8) -> Vec<u8> {
    let mut k = b"count/".to_vec();
    k.push(db);
    k
}

/// The actor's view of its open write transaction.
///
/// Blocked clients to wake after a commit (see `WriteCtx::signals`,
/// `broadcasts` and `flushed`).
#[derive(Debug, Default)]
pub struct Wakeups {
    /// Keys whose oldest waiter is woken.
    pub signals: Vec<(u8, Vec<u8>)>,
    /// Keys whose every waiter is woken.
    pub broadcasts: Vec<(u8, Vec<u8>)>,
    /// Databases whose every waiter is woken.
    pub flushed: Vec<u8>,
    /// Read-like key lookups (hits, misses) for INFO.
    pub lookups: (u64, u64),
    /// Keys deleted because an access found them expired, for INFO's
    /// `expired_keys`.
    pub expired: u64,
    /// What [`WriteCtx::changes`] counted.
    pub changes: u64,
    /// Messages published by the transaction's commands, sent once it has
    /// committed.
    pub messages: Vec<Message>,
    /// Names of the keys changed (with the client that changed them, when
    /// it asked to be told so: see [`WriteCtx::writer`]), while clients
    /// track keys for client-side caching.
    pub tracked: Vec<KeyChange>,
}

/// A key by database and name.
pub type DbKey = (u8, Vec<u8>);

/// What a transaction did to a key while clients track keys, with its
/// place in the order of a multi-shard commit's (see
/// [`WriteCtx::message_place`]).
pub type KeyChange = ((u64, u64), Touch);

/// See [`KeyChange`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touch {
    /// The key changed, by this client when it asked to be told so (see
    /// [`WriteCtx::writer`]), 0 otherwise.
    Changed(bytes::Bytes, u64),
    /// A read-only command of this client inside EXEC read the key: from
    /// this point on, the client tracks it (a change earlier in the unit
    /// is not news to it), as a Redis client does after each command.
    Read(bytes::Bytes, u64),
}

/// A message a write publishes when it commits (PUBLISH inside EXEC or a
/// script; keyspace notifications): where it goes, the channel, the
/// payload.
pub type Message = (Route, bytes::Bytes, bytes::Bytes);

/// Where a [`Message`] goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// PUBLISH: this node's subscribers, and in cluster mode the other
    /// nodes'.
    Channel,
    /// SPUBLISH: the shard channel's subscribers.
    ShardChannel,
    /// A keyspace notification: this node's subscribers only (node-local
    /// in Redis Cluster too).
    Local,
}

/// Told of every row a write puts or removes in `meta`, `sub` or `zscore`
/// (WATCH's hook; see `shard::watch`). `removed` is true when a `meta` row
/// went, i.e. the key is gone.
pub trait RowObserver: Send + Sync {
    /// A row of `table` with key `row` was written or removed.
    fn row_changed(&self, table: Table, row: &[u8], removed: bool);
    /// The `meta` rows of the keys observed (FLUSHALL tells only those that
    /// exist, without visiting every key).
    fn observed_meta_rows(&self) -> Vec<Vec<u8>>;
    /// Every `meta` row went at once (FLUSHALL), not one by one.
    fn table_cleared(&self) {}
}

/// One logical change a transaction made, in the order it made it: what
/// the coordination log keeps of a multi-shard commit so that recovery can
/// redo it on a shard that lost it (see `shard::intent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowOp {
    /// A row written.
    Put(Table, Vec<u8>, Vec<u8>),
    /// A row removed.
    Del(Table, Vec<u8>),
    /// Every row of a table removed (FLUSHALL).
    Clear(Table),
    /// Every row with a key in `[start, end)` removed (FLUSHDB, LTRIM...).
    DelRange(Table, Vec<u8>, Option<Vec<u8>>),
}

impl RowOp {
    /// The change as [`TableWriter`] takes it.
    pub fn as_change(&self) -> Change<'_> {
        match self {
            RowOp::Put(t, k, v) => Change::Row(*t, k, Some(v)),
            RowOp::Del(t, k) => Change::Row(*t, k, None),
            RowOp::Clear(t) => Change::Range(*t, &[], None),
            RowOp::DelRange(t, start, end) => Change::Range(*t, start, end.as_deref()),
        }
    }
}

/// Applies one change to `table` (of `t`), keeping large values in
/// `values` if there is one.
fn apply_to(
    table: &mut OpenTable<'_>,
    values: &mut Option<&mut ValueLog>,
    t: Table,
    change: Change<'_>,
) -> Result<(), StoreError> {
    match change {
        Change::Row(_, k, Some(v)) => {
            let stored = store_value(values, t, k, v)?;
            insert_row(table, values, t, k, &stored)?;
        }
        Change::Row(_, k, None) => remove_row(table, values, t, k)?,
        Change::Range(_, start, end) => {
            delete_range(table, values, t, merge::scan_bounds(start, end))?;
        }
    }
    Ok(())
}

/// Inserts a row in its stored form; whether the table lacked it (a
/// replaced value pointing into the value log is counted dead).
fn insert_row(
    table: &mut OpenTable<'_>,
    values: &mut Option<&mut ValueLog>,
    t: Table,
    k: &[u8],
    stored: &[u8],
) -> Result<bool, StoreError> {
    let old = table.insert(k, stored)?;
    let new = old.is_none();
    if let (Some(log), Some(old)) = (values, old) {
        log.dropped(t, k, old.value());
    }
    Ok(new)
}

/// Removes a row, counting dead what it pointed to in the value log.
fn remove_row(
    table: &mut OpenTable<'_>,
    values: &mut Option<&mut ValueLog>,
    t: Table,
    k: &[u8],
) -> Result<(), StoreError> {
    let old = table.remove(k)?;
    if let (Some(log), Some(old)) = (values, old) {
        log.dropped(t, k, old.value());
    }
    Ok(())
}

/// Deletes every row of `table` in `range`, counting dead what pointed
/// into the value log.
fn delete_range<'a>(
    table: &mut OpenTable<'_>,
    values: &mut Option<&mut ValueLog>,
    t: Table,
    range: impl std::ops::RangeBounds<&'a [u8]> + 'a,
) -> Result<(), StoreError> {
    table.retain_in::<&[u8], _>(range, |k, v| {
        if let Some(log) = values.as_deref_mut() {
            log.dropped(t, k, v);
        }
        false
    })?;
    Ok(())
}

/// Deletes the rows `run` (ascending keys) from `table`. A run that is
/// many for the table's size is swept in one pass over its span (see
/// [`sweep`]). Otherwise a stretch of it with no stored row between its
/// keys that stays (a list's popped head, a trimmed stream, a deleted
/// collection's rows) goes in one pass over its range, about a tenth of a
/// removal's descent per row. Finding a stretch reads the table from its
/// first key to the first stored row that stays; where stretches keep
/// coming out one row long (members popped from all over a set), the rest
/// of the run is removed row by row, with a try now and then (see
/// `Runs`).
fn delete_run(
    table: &mut OpenTable<'_>,
    values: &mut Option<&mut ValueLog>,
    t: Table,
    run: &[&[u8]],
) -> Result<(), StoreError> {
    use redb::ReadableTableMetadata;
    if run.len() >= SWEEP_MIN_ROWS && run.len() as u64 * SWEEP_ROWS_PER_REMOVAL >= table.len()? {
        return sweep(table, values, t, run);
    }
    let mut runs = Runs::default();
    let mut rest = run;
    while let Some(&first) = rest.first() {
        if rest.len() == 1 || !runs.worth_trying() {
            remove_row(table, values, t, first)?;
            rest = &rest[1..];
            continue;
        }
        // The stretch: `rest[..end]`, of which `stored` rows are in the
        // table, the last at `last`. Keys between stored rows that the
        // table lacks (never written out) belong to it too.
        let (mut end, mut stored, mut last) = (0, 0usize, 0);
        let mut rows = table.range::<&[u8]>(first..)?;
        loop {
            let Some(row) = rows.next() else {
                // Past the table's last row: none of the rest is stored.
                end = rest.len();
                break;
            };
            let key = row?.0;
            let key = key.value();
            while end < rest.len() && rest[end] < key {
                end += 1;
            }
            if end == rest.len() || rest[end] != key {
                break;
            }
            (stored, last) = (stored + 1, end);
            end += 1;
        }
        drop(rows);
        match stored {
            0 => {}
            1 => remove_row(table, values, t, rest[last])?,
            _ => delete_range(table, values, t, first..=rest[last])?,
        }
        runs.note(stored.saturating_sub(1));
        rest = &rest[end..];
    }
    Ok(())
}

/// A run of removals this long at least may be swept (see [`sweep`]).
const SWEEP_MIN_ROWS: usize = 64;

/// Rows of the table a run's removals may be swept past, per removal:
/// reading a row the sweep passes by costs about a thirtieth of a
/// removal's descent and leaf rebuild, so with the whole table this many
/// times the run at most, the sweep costs no more than the removals.
const SWEEP_ROWS_PER_REMOVAL: u64 = 32;

/// Deletes the rows `run` (ascending keys) from `table` in one pass of a
/// cursor from its first key to its last, which rewrites each leaf once
/// for all the removals in it. Row by row, members popped from all over a
/// big set (ZPOPMIN of random scores, SPOP) each rebuilt their leaf
/// alone, and that was most of the background writer's time.
fn sweep(
    table: &mut OpenTable<'_>,
    values: &mut Option<&mut ValueLog>,
    t: Table,
    run: &[&[u8]],
) -> Result<(), StoreError> {
    let (Some(&first), Some(&last)) = (run.first(), run.last()) else {
        return Ok(());
    };
    let mut next = 0;
    table.retain_in::<&[u8], _>(first..=last, |k, v| {
        while next < run.len() && run[next] < k {
            next += 1;
        }
        let gone = run.get(next) == Some(&k);
        if let (true, Some(log)) = (gone, values.as_deref_mut()) {
            log.dropped(t, k, v);
        }
        !gone
    })?;
    Ok(())
}

/// The form row `v` of `t` is stored in: as it is, or (a large value,
/// with a value log) a pointer to where `values` appended it. Called once
/// a row: it counts the value live.
fn store_value<'a>(
    values: &mut Option<&mut ValueLog>,
    t: Table,
    k: &[u8],
    v: &'a [u8],
) -> Result<std::borrow::Cow<'a, [u8]>, StoreError> {
    match values {
        Some(log) => log.store(t, k, v).map_err(io_err),
        None => Ok(std::borrow::Cow::Borrowed(v)),
    }
}

/// Rows a cursor takes before it is closed and opened again (see
/// `TableWriter::apply_table`).
const GAP_RUN: usize = 256;

/// How one table's cursor runs have gone in a write-out, so that rows
/// that each land alone in their gap (random keys into a large table)
/// stop paying a cursor's descent on top of their own.
#[derive(Default)]
struct Runs {
    tried: u32,
    filled: u32,
    skipped: u32,
}

impl Runs {
    /// Whether to open a cursor: while runs fill at least one row every
    /// other try, and now and then otherwise, in case the rows change.
    fn worth_trying(&mut self) -> bool {
        if self.filled.saturating_mul(2) >= self.tried {
            return true;
        }
        self.skipped += 1;
        self.skipped.is_multiple_of(64)
    }

    fn note(&mut self, filled: usize) {
        let filled = u32::try_from(filled).unwrap_or(u32::MAX);
        self.tried += 1;
        self.filled = self.filled.saturating_add(filled);
    }
}

/// Writes changes into an open write transaction of the tables, opening
/// each table once: the redb side of a shard log replayed at open, of a
/// frozen write buffer, and of the redo of a multi-shard commit a shard
/// lost in a crash.
pub struct TableWriter<'t, 'v> {
    txn: &'t redb::WriteTransaction,
    open: Vec<(Table, OpenTable<'t>)>,
    /// Where large values go, and where rows that pointed there are
    /// counted dead (see `vlog`); without it rows go in as they are.
    values: Option<&'v mut ValueLog>,
}

impl<'t, 'v> TableWriter<'t, 'v> {
    /// A writer into `txn`.
    pub fn new(txn: &'t redb::WriteTransaction) -> TableWriter<'t, 'v> {
        TableWriter {
            txn,
            open: Vec::new(),
            values: None,
        }
    }

    /// A writer into `txn` that keeps large values in `values`.
    pub fn with_values(
        txn: &'t redb::WriteTransaction,
        values: &'v mut ValueLog,
    ) -> TableWriter<'t, 'v> {
        TableWriter {
            values: Some(values),
            ..TableWriter::new(txn)
        }
    }

    fn table(&mut self, t: Table) -> Result<usize, StoreError> {
        Ok(match self.open.iter().position(|(o, _)| *o == t) {
            Some(i) => i,
            None => {
                self.open.push((t, self.txn.open_table(t.def())?));
                self.open.len() - 1
            }
        })
    }

    /// Applies one change.
    pub fn apply(&mut self, change: Change<'_>) -> Result<(), StoreError> {
        let (Change::Range(t, ..) | Change::Row(t, ..)) = change;
        let i = self.table(t)?;
        apply_to(&mut self.open[i].1, &mut self.values, t, change)
    }

    /// Applies the changes of table `t`, its rows in ascending key order
    /// (as [`Buffer::for_each_table`] hands them). A new row whose
    /// successors are new rows too opens a cursor on the gap after it, and
    /// those that fall into the same gap go in without a descent of their
    /// own: a list's pushed elements or a stream's entries cost about half
    /// (see DESIGN-NOTES, "The write path"). Rows that replace stored ones
    /// go in one at a time, as a cursor would remove and reinsert them.
    /// Deletions go by runs (see `delete_run`).
    pub fn apply_table<'c>(
        &mut self,
        t: Table,
        changes: impl Iterator<Item = Change<'c>>,
    ) -> Result<(), StoreError> {
        let i = self.table(t)?;
        let table = &mut self.open[i].1;
        let values = &mut self.values;
        let mut changes = changes.peekable();
        let mut runs = Runs::default();
        // A row already stored that its cursor found outside the gap.
        let mut carried: Option<(&[u8], std::borrow::Cow<'c, [u8]>)> = None;
        loop {
            let (key, stored) = match carried.take() {
                Some(row) => row,
                None => match changes.next() {
                    None => return Ok(()),
                    Some(Change::Row(_, k, Some(v))) => (k, store_value(values, t, k, v)?),
                    Some(Change::Row(_, k, None)) => {
                        let mut run = vec![k];
                        while let Some(&Change::Row(_, k, None)) = changes.peek() {
                            run.push(k);
                            changes.next();
                        }
                        delete_run(table, values, t, &run)?;
                        continue;
                    }
                    Some(change) => {
                        apply_to(table, values, t, change)?;
                        continue;
                    }
                },
            };
            if !insert_row(table, values, t, key, &stored)? {
                continue;
            }
            let next_is_new = matches!(changes.peek(), Some(Change::Row(_, _, Some(_))));
            if !next_is_new || !runs.worth_trying() {
                continue;
            }
            let mut gap = table.lower_bound_mut(Bound::Excluded(key))?;
            let mut filled = 0;
            while let Some(&Change::Row(_, k, Some(v))) = changes.peek() {
                changes.next();
                let stored = store_value(values, t, k, v)?;
                match gap.insert_before(k, &*stored) {
                    Ok(()) => {
                        filled += 1;
                        // The cursor holds its run in memory until it
                        // closes: a run of a whole buffer grew by
                        // reallocation into fresh (zeroed) pages, 7% of
                        // the writer's time under LPUSH.
                        if filled % GAP_RUN == 0 {
                            gap.close()?;
                            gap = table.lower_bound_mut(Bound::Excluded(k))?;
                        }
                    }
                    Err(redb::CursorError::UnorderedKey) => {
                        carried = Some((k, stored));
                        break;
                    }
                    Err(e) => return Err(redb::Error::from(e).into()),
                }
            }
            gap.close()?;
            runs.note(filled);
        }
    }

    /// Before the transaction commits: makes the value log's appends
    /// durable and records its files in `sys` (see `ValueLog::prepare`).
    pub fn prepare_values(&mut self) -> Result<(), StoreError> {
        if let Some(log) = self.values.take() {
            let prepared = log.prepare(|change| self.apply(change));
            self.values = Some(log);
            prepared?;
        }
        Ok(())
    }

    /// The stored value of a row (pointer rows as they are).
    pub fn stored(&mut self, t: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let i = self.table(t)?;
        Ok(self.open[i].1.get(key)?.map(|v| v.value().to_vec()))
    }

    /// Puts a stored value (a pointer row) in place as it is.
    pub fn put_stored(&mut self, t: Table, key: &[u8], stored: &[u8]) -> Result<(), StoreError> {
        let i = self.table(t)?;
        self.open[i].1.insert(key, stored)?;
        Ok(())
    }
}

/// An I/O error of the storage's own files (log, value log) as the
/// error a transaction fails with.
pub(crate) fn io_err(e: std::io::Error) -> StoreError {
    StoreError::Redb(redb::Error::Io(e))
}

/// Applies changes, in order, to an open write transaction of the tables.
pub fn apply_row_ops(txn: &redb::WriteTransaction, ops: &[RowOp]) -> Result<(), StoreError> {
    let mut w = TableWriter::new(txn);
    ops.iter().try_for_each(|op| w.apply(op.as_change()))
}

/// A big-endian u64 `sys` row of a committed file (0 if absent).
pub fn read_sys_u64(db: &Database, key: &[u8]) -> Result<u64, StoreError> {
    let txn = db.begin_read()?;
    let sys = txn.open_table(SYS)?;
    Ok(sys.get(key)?.map_or(0, |v| {
        u64::from_be_bytes(v.value().try_into().unwrap_or([0; 8]))
    }))
}

/// Rows as (key, value) pairs.
pub type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// The `sys` rows of a committed file whose keys start with `prefix`.
pub fn read_sys_prefix(db: &Database, prefix: &[u8]) -> Result<Rows, StoreError> {
    let txn = db.begin_read()?;
    let sys = txn.open_table(SYS)?;
    let mut out = Vec::new();
    for row in sys.range::<&[u8]>(prefix..)? {
        let (k, v) = row?;
        if !k.value().starts_with(prefix) {
            break;
        }
        out.push((k.value().to_vec(), v.value().to_vec()));
    }
    Ok(out)
}

/// The rows a write transaction changed, not yet committed: the newest
/// layer its own reads see, and what it hands to the commit.
#[derive(Default)]
struct Overlay {
    rows: [super::rowmap::RowMap; 6],
    /// Ranges deleted (a cleared table), hiding the older layers' rows.
    ranges: [Vec<KeyRange>; 6],
}

/// Whether a range the transaction deleted (a cleared table) covers `key`.
fn cleared(ranges: &[KeyRange], key: &[u8]) -> bool {
    ranges.iter().any(|(s, e)| in_range(key, s, e.as_deref()))
}

/// A row the overlay holds no entry for, as the transaction sees it:
/// absent where a range it deleted covers it, else as `base` holds it.
fn read_under(
    base: &ReadCtx,
    ranges: &[KeyRange],
    table: Table,
    key: &[u8],
) -> Result<Option<Vec<u8>>, StoreError> {
    match cleared(ranges, key) {
        true => Ok(None),
        false => base.get(table, key),
    }
}

impl Overlay {
    /// What the transaction says of a row: `Some(entry)` if it decided it,
    /// `None` if the layers below do.
    fn get(&self, table: Table, key: &[u8]) -> Option<Entry> {
        let t = table as usize;
        if let Some(e) = self.rows[t].get(key) {
            return Some(e.clone());
        }
        cleared(&self.ranges[t], key).then_some(None)
    }

    fn untouched(&self, table: Table, start: &[u8], end: Option<&[u8]>) -> bool {
        let t = table as usize;
        self.ranges[t].is_empty()
            && self.rows[t]
                .range(merge::scan_bounds(start, end))
                .next()
                .is_none()
    }

    /// The changes, each table's ranges before its rows (a row written
    /// after a range was deleted stands; one written before went with it).
    fn into_ops(self) -> Vec<RowOp> {
        // Sized once: grown by doubling, a big batch's list reallocated
        // into fresh pages each time (the page clearing alone was ~2% of
        // the shard thread's samples under LPUSH at pipeline 16).
        let n = self
            .rows
            .iter()
            .map(super::rowmap::RowMap::len)
            .sum::<usize>()
            + self.ranges.iter().map(Vec::len).sum::<usize>();
        let mut ops = Vec::with_capacity(n);
        for (i, (rows, ranges)) in self.rows.into_iter().zip(self.ranges).enumerate() {
            let table = Table::ALL[i];
            for (start, end) in ranges {
                ops.push(if start.is_empty() && end.is_none() {
                    RowOp::Clear(table)
                } else {
                    RowOp::DelRange(table, start, end)
                });
            }
            for (k, v) in rows {
                ops.push(match v {
                    Some(v) => RowOp::Put(table, k, v),
                    None => RowOp::Del(table, k),
                });
            }
        }
        ops
    }
}

impl Layer for Overlay {
    fn fill(
        &self,
        table: Table,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        n: usize,
        out: &mut VecDeque<merge::Row>,
    ) -> Result<bool, StoreError> {
        let range = self.rows[table as usize].range(bounds);
        merge::take_n(range, reverse, n, |(k, v)| {
            out.push_back((RowKey::new(k), Stored::from_entry(v.as_deref())));
            Ok(true)
        })
    }

    fn ranges(&self, table: Table) -> Vec<KeyRange> {
        self.ranges[table as usize].clone()
    }
}

/// A write transaction of a shard: its changes collect in an overlay (which
/// its own reads see first) over a view of the shard's latest state, and
/// [`WriteCtx::finish`] hands them over as [`RowOp`]s for the shard to
/// commit (log append, write buffer) or drop.
pub struct WriteCtx<'t> {
    base: &'t ReadCtx,
    overlay: Overlay,
    now_ms: u64,
    /// Keys (database, name) that gained elements in this transaction: the
    /// shard wakes clients blocked on them once it has committed.
    pub signals: Vec<(u8, Vec<u8>)>,
    /// Keys whose every blocked client must look again (a stream gained
    /// entries, or a stream key went away): all of them are woken.
    pub broadcasts: Vec<(u8, Vec<u8>)>,
    /// Databases emptied (FLUSHDB, FLUSHALL): every waiter there looks again.
    pub flushed: Vec<u8>,
    /// Messages to publish after the commit (see [`Wakeups::messages`]).
    pub messages: Vec<Message>,
    /// Where each of `messages` goes in a coordinated round's combined
    /// list: the `message_place` current when it was made.
    pub message_places: Vec<(u64, u64)>,
    /// Set by a coordinated round for each step (its place in the round),
    /// and by a step over several keys for each key (the command's place
    /// and the key's position), so the round's messages go out in the
    /// order Redis would make them.
    pub message_place: (u64, u64),
    /// Rows and ranges written so far, with rows rewritten as they were
    /// (see [`WriteCtx::counting`]).
    writes: u64,
    /// Commands (or parts of one) that changed something: what Redis's
    /// `dirty` counter would have added, near enough (INFO's
    /// rdb_changes_since_last_save, the save points).
    pub changes: u64,
    /// Set by [`WriteCtx::count_changes`]: the running command (or step)
    /// counted its changes itself, zero included.
    counted: bool,
    /// Collects the names of changed keys while clients track keys (see
    /// [`Wakeups::tracked`]), each with the `message_place` current when it
    /// changed; `None` otherwise.
    pub tracked: Option<std::cell::RefCell<Vec<KeyChange>>>,
    /// The client running the current command, when it tracks keys with
    /// NOLOOP (0 otherwise): its own changes are not sent back to it.
    pub writer: u64,
    /// Key lookups of read-like steps in writes (hits, misses): see
    /// `KvRead::note_lookup`; the shard adds them to its INFO counters.
    pub lookups: std::cell::Cell<(u64, u64)>,
    /// Keys deleted because an access found them expired (lazy expiry):
    /// the shard adds them to `expired_keys`, as Redis counts both kinds.
    pub expired: u64,
    /// Keys lookups found expired and not deleted yet (see
    /// [`KvRead::note_expired`]): the shard deletes them after the command
    /// that found them. `None` where expired keys stay: writes are paused
    /// (Redis expires nothing then), the server is a replica (its primary
    /// expires keys), or a transaction outside a shard.
    pub found_expired: Option<std::cell::RefCell<Vec<DbKey>>>,
    /// Set while a replica applies a command of its primary's (see
    /// [`WriteCtx::as_primary`]): every key it finds is alive.
    pub from_primary: bool,
    /// The shard's in-memory state, updated as rows are written.
    pub state: &'t mut ShardState,
    /// Told of row changes while any key of the shard is watched.
    pub observer: Option<std::sync::Arc<dyn RowObserver>>,
    /// Set while the garbage collector removes dead versions: those rows
    /// belong to no live key, so observers are not told.
    pub quiet: bool,
    /// Keyspace notification flags (`pubsub::notify`), read once when the
    /// shard opens the transaction: 0 makes [`WriteCtx::notify`] a no-op.
    pub notify_flags: u32,
    /// What the overlay said of each row changed since
    /// [`WriteCtx::begin_undo`], so that a part of the batch can be taken
    /// back (a script that turned out to need other shards). Boxed: it
    /// holds every database's counts, and a transaction is moved around by
    /// value several times a batch.
    undo: Option<Box<Undo>>,
    /// The `meta` row a collection's edit saved last, decoded (see
    /// [`MetaMemo`]); dropped by any other change to the `meta` table.
    memo: Option<MetaMemo>,
}

/// A collection's `meta` row as the overlay holds it, decoded, with the
/// prefix of its sub-keys: what the edit that saved it had built. A
/// pipeline of pushes to one list (or adds to one set) loads and saves the
/// same row once per command; taking it from here skips the lookup, the
/// decoding and the prefix. The overlay stays the only truth: the memo is
/// dropped by every other write of the table, a clear and a rollback.
pub struct MetaMemo {
    /// The row's key.
    pub meta_key: Vec<u8>,
    /// The row, decoded.
    pub meta: super::encoding::Meta,
    /// The prefix of the collection's sub-keys.
    pub prefix: Vec<u8>,
}

/// What [`WriteCtx::rollback`] needs.
struct Undo {
    /// Each changed row's overlay entry before the change (`None`: the
    /// overlay did not hold the row), in the order of the changes: a row
    /// changed twice goes back to its first one.
    rows: Vec<(Table, Vec<u8>, Option<Entry>)>,
    counts: [DbCounts; NAMESPACES],
    /// A whole table was cleared: too much to keep.
    lost: bool,
    /// Messages published before `begin_undo`: later ones are taken back.
    messages: usize,
}

impl<'t> WriteCtx<'t> {
    /// A transaction over `base`, the shard's latest state.
    pub fn open(base: &'t ReadCtx, now_ms: u64, state: &'t mut ShardState) -> WriteCtx<'t> {
        WriteCtx {
            base,
            overlay: Overlay::default(),
            now_ms,
            signals: Vec::new(),
            broadcasts: Vec::new(),
            flushed: Vec::new(),
            messages: Vec::new(),
            message_places: Vec::new(),
            message_place: (0, 0),
            writes: 0,
            changes: 0,
            counted: false,
            tracked: None,
            writer: 0,
            lookups: Default::default(),
            expired: 0,
            found_expired: None,
            from_primary: false,
            state,
            observer: None,
            quiet: false,
            notify_flags: 0,
            undo: None,
            memo: None,
        }
    }

    /// Runs `f` as a command of the primary this server replicates. Only
    /// the primary expires keys on a replica: its DEL arrives in the
    /// stream. A key whose time has passed on this clock may still be
    /// alive on the primary's (a PERSIST or a write on its way), so the
    /// primary's commands find every key alive, as Redis's replicas let
    /// their master's commands do.
    pub fn as_primary<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let was = std::mem::replace(&mut self.from_primary, true);
        let out = f(self);
        self.from_primary = was;
        out
    }

    /// Starts keeping what the overlay says of each row changed (see
    /// [`WriteCtx::rollback`]).
    pub fn begin_undo(&mut self) {
        self.undo = Some(Box::new(Undo {
            rows: Vec::new(),
            counts: self.state.counts,
            lost: false,
            messages: self.messages.len(),
        }));
    }

    /// Stops keeping the overlay's entries; the changes since `begin_undo`
    /// stand.
    pub fn end_undo(&mut self) {
        self.undo = None;
    }

    /// Takes back every change since [`WriteCtx::begin_undo`], newest first.
    pub fn rollback(&mut self) -> Result<(), StoreError> {
        let Some(undo) = self.undo.take() else {
            return Ok(());
        };
        if undo.lost {
            return Err(StoreError::Internal(
                "cannot take back a cleared table".into(),
            ));
        }
        self.memo = None;
        self.state.pools.clear();
        self.messages.truncate(undo.messages);
        self.message_places.truncate(undo.messages);
        // The overlay goes back to what it said of each row: its entry, or
        // nothing (the layers below decide the row again). A row the
        // attempt deleted may be live again: a run of dead rows a scan
        // noted across it no longer holds.
        for (table, key, before) in undo.rows.into_iter().rev() {
            self.state.dead.get_mut().touch(table, &key);
            let rows = &mut self.overlay.rows[table as usize];
            match before {
                Some(entry) => rows.insert(key, entry),
                None => rows.remove(&key),
            }
        }
        self.state.counts = undo.counts;
        Ok(())
    }

    /// Keeps what the overlay says of a row while changes may be taken
    /// back: only the overlay changes, so only its entry is kept, not the
    /// row's value (reading that went down to the tables for each row a
    /// script wrote).
    #[inline]
    fn remember(&mut self, table: Table, key: &[u8]) {
        if let Some(u) = &mut self.undo {
            let before = self.overlay.rows[table as usize].get(key).cloned();
            u.rows.push((table, key.to_vec(), before));
        }
    }

    /// Tells the observer, if any, that a row changed.
    #[inline]
    fn changed(&self, table: Table, key: &[u8], removed: bool) {
        if self.quiet || !matches!(table, Table::Meta | Table::Sub | Table::ZScore) {
            return;
        }
        if let Some(o) = &self.observer {
            o.row_changed(table, key, removed && table == Table::Meta);
        }
        if let Some(tracked) = &self.tracked {
            let name = match table {
                Table::Meta => super::encoding::decode_meta_key(key).map(|(_, _, n)| n),
                _ => super::encoding::decode_version_row(key).map(|(_, n)| n),
            };
            let Some(name) = name else { return };
            let mut tracked = tracked.borrow_mut();
            // A collection's rows come one after another: one entry each.
            let repeated = matches!(tracked.last(),
                Some((_, Touch::Changed(k, w))) if &k[..] == name && *w == self.writer);
            if !repeated {
                let change = Touch::Changed(bytes::Bytes::copy_from_slice(name), self.writer);
                tracked.push((self.message_place, change));
            }
        }
    }

    /// Runs `f` without telling the observer of its row changes, then tells
    /// it once, about the key whose `meta` row is `meta_key`, if
    /// `changes(&result)` (members added, removed or rescored) is not 0.
    /// For commands whose rewrites can leave a key as it was (SADD of a
    /// member already there, ZADD of an unchanged score), which Redis does
    /// not count as a modification of the key. Those changes are what
    /// [`WriteCtx::counting`] counts of the command, as Redis adds them to
    /// its dirty counter.
    pub fn quietly<T, E: From<StoreError>>(
        &mut self,
        meta_key: &[u8],
        f: impl FnOnce(&mut Self) -> Result<T, E>,
        changes: impl FnOnce(&T) -> u64,
    ) -> Result<T, E> {
        let writes = self.writes;
        let was = std::mem::replace(&mut self.quiet, true);
        let out = f(self);
        self.quiet = was;
        let out = out?;
        match changes(&out) {
            0 => self.writes = writes,
            n => {
                self.changes += n;
                if self.observer.is_some() || self.tracked.is_some() {
                    let present = self.get(Table::Meta, meta_key)?.is_some();
                    self.changed(Table::Meta, meta_key, !present);
                }
            }
        }
        Ok(out)
    }

    /// Takes the keys to wake once this transaction has committed, and the
    /// lookup counts of its read-like steps.
    pub fn take_wakeups(&mut self) -> Wakeups {
        self.message_places.clear();
        Wakeups {
            lookups: self.lookups.take(),
            expired: std::mem::take(&mut self.expired),
            changes: std::mem::take(&mut self.changes),
            signals: std::mem::take(&mut self.signals),
            broadcasts: std::mem::take(&mut self.broadcasts),
            flushed: std::mem::take(&mut self.flushed),
            messages: std::mem::take(&mut self.messages),
            tracked: self.tracked.as_ref().map(|t| t.take()).unwrap_or_default(),
        }
    }

    /// Publishes a message once this transaction commits (never, if it
    /// does not).
    pub fn publish(&mut self, shard_channel: bool, channel: bytes::Bytes, message: bytes::Bytes) {
        let route = if shard_channel {
            Route::ShardChannel
        } else {
            Route::Channel
        };
        self.messages.push((route, channel, message));
        self.message_places.push(self.message_place);
    }

    /// Reports keyspace event `event` of class `class` (a
    /// `pubsub::notify` flag) on `key` in database `db`: its messages are
    /// published with the transaction's others once it commits.
    #[inline]
    pub fn notify(&mut self, class: u32, event: &str, db: u8, key: &[u8]) {
        if self.notify_flags & class == 0 {
            return;
        }
        for (channel, payload) in
            crate::pubsub::notify::messages(self.notify_flags, class, event, db, key)
        {
            self.messages.push((Route::Local, channel, payload));
            self.message_places.push(self.message_place);
        }
    }

    /// Runs `f`, one command or one step of a command, and counts it in
    /// [`WriteCtx::changes`] if it wrote anything, unless it counted its
    /// own parts (a pipeline's writes in one coordinated step). A command
    /// that changes nothing (SETBIT of a bit already set, SADD of members
    /// already there, a failed one) counts nothing, as in Redis.
    pub fn counting<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let (changes, writes) = (self.changes, self.writes);
        let outer = std::mem::replace(&mut self.counted, false);
        let out = f(self);
        let counted = std::mem::replace(&mut self.counted, outer);
        if !counted && self.changes == changes && self.writes != writes {
            self.changes += 1;
        }
        // A count inside counts for whatever encloses this call too.
        self.counted |= counted;
        out
    }

    /// Counts the command running (or this step of it) as `n` changes
    /// instead of one, as Redis adds to its dirty counter per key, field or
    /// element for the commands that take several (MSET a key, LPUSH an
    /// element, DEL a deleted key), or as none: one step of a command
    /// Redis counts once (RENAME's removal of its source on another shard).
    pub fn count_changes(&mut self, n: u64) {
        self.changes += n;
        self.counted = true;
    }

    /// Sets a row in the overlay.
    #[inline]
    fn set(&mut self, table: Table, key: &[u8], value: Entry) {
        self.state.pools.touched(table, key);
        self.set_unpooled(table, key, value);
    }

    /// [`WriteCtx::set`] of a row no set's pool holds (see
    /// [`WriteCtx::del_popped`]).
    #[inline]
    fn set_unpooled(&mut self, table: Table, key: &[u8], value: Entry) {
        self.writes += 1;
        if table == Table::Meta {
            self.memo = None;
        }
        match value {
            Some(_) => self.state.dead.get_mut().touch(table, key),
            None => self.state.dead.get_mut().deleted(table, key),
        }
        self.overlay.rows[table as usize].insert(key.to_vec(), value);
    }

    /// What [`WriteCtx::set`] and [`WriteCtx::remember`] do besides the
    /// change itself, for a live row written in place through
    /// [`RowMap::slot`](super::rowmap::RowMap::slot): `before` is the
    /// overlay's entry for the undo record (`None` when none is kept; its
    /// inner `None`: the overlay did not hold the row).
    fn wrote_in_place(&mut self, table: Table, key: &[u8], before: Option<Option<Entry>>) {
        if let (Some(u), Some(before)) = (&mut self.undo, before) {
            u.rows.push((table, key.to_vec(), before));
        }
        self.writes += 1;
        if table == Table::Meta {
            self.memo = None;
        }
        self.state.pools.touched(table, key);
        self.state.dead.get_mut().touch(table, key);
    }

    /// Writes a row.
    pub fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.put_row(table, key, value.to_vec())
    }

    /// Writes a row the caller has just encoded, keeping that buffer
    /// rather than a copy.
    fn put_row(&mut self, table: Table, key: &[u8], row: Vec<u8>) -> Result<(), StoreError> {
        self.remember(table, key);
        self.changed(table, key, false);
        self.set(table, key, Some(row));
        Ok(())
    }

    /// Writes a `meta` row the caller has just encoded, keeping that
    /// buffer rather than a copy (a string value can be 512 MB).
    pub fn put_meta(&mut self, key: &[u8], row: Vec<u8>) -> Result<(), StoreError> {
        self.put_row(Table::Meta, key, row)
    }

    /// See [`ReadCtx::warm`].
    pub fn warm(&self, table: Table, keys: &[Vec<u8>]) {
        self.base.warm(table, keys);
    }

    /// Writes a row and returns the value it replaced. A row that already
    /// holds `value` (SADD of a member already there, HSET of an unchanged
    /// field) is not written again: it costs no log record, buffer row or
    /// table write, and still counts as changed for WATCH and tracking,
    /// whose callers decide (see [`WriteCtx::quietly`]).
    ///
    /// Of a `meta` row whose value the value log holds, what comes back
    /// may be the head alone, an empty string with the key's type and
    /// expiry (see `ReadCtx::meta_or_head`): only for settling what
    /// the old row implied, never for its value.
    pub fn swap(
        &mut self,
        table: Table,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let t = table as usize;
        // The overlay is searched once, for the read and the write (in a
        // big batch each search is a B-tree walk).
        let undo = self.undo.is_some();
        let Overlay { rows, ranges } = &mut self.overlay;
        let (old, wrote) = match rows[t].slot(key) {
            Slot::Held(entry) if entry.as_deref() == Some(value) => (entry.clone(), None),
            Slot::Held(entry) => {
                let old = entry.replace(value.to_vec());
                let before = undo.then(|| Some(old.clone()));
                (old, Some(before))
            }
            Slot::Free(place) => {
                let (old, head_only) = match table {
                    Table::Meta if !cleared(&ranges[t], key) => {
                        match self.base.meta_or_head(key)? {
                            Some((row, head_only)) => (Some(row), head_only),
                            None => (None, false),
                        }
                    }
                    _ => (read_under(self.base, &ranges[t], table, key)?, false),
                };
                if !head_only && old.as_deref() == Some(value) {
                    (old, None)
                } else {
                    place.insert(key, Some(value.to_vec()));
                    (old, Some(undo.then_some(None)))
                }
            }
        };
        self.changed(table, key, false);
        match wrote {
            Some(before) => self.wrote_in_place(table, key, before),
            // Still a write as far as change counting goes (HSET of an
            // unchanged field counts, as in Redis).
            None => self.writes += 1,
        }
        Ok(old)
    }

    /// Stores a key's metadata row `new`, unless it holds that already
    /// (SADD of members already there): then it only counts as written.
    /// `below` is the row as read before this transaction touched it, which
    /// holds unless the transaction has since written the row itself.
    pub fn put_meta_unless_same(
        &mut self,
        key: &[u8],
        below: Option<&super::encoding::Meta>,
        new: &super::encoding::Meta,
    ) -> Result<(), StoreError> {
        let row = new.encode();
        // Nothing was there: the new row cannot be the same (and the
        // overlay need not be searched for it).
        if below.is_none() {
            return self.put_meta(key, row);
        }
        let same = match self.overlay.rows[Table::Meta as usize].get(key) {
            Some(written) => written.as_deref() == Some(&row[..]),
            None => self.overlay.ranges[Table::Meta as usize].is_empty() && below == Some(new),
        };
        if same {
            self.changed(Table::Meta, key, false);
            self.writes += 1;
            return Ok(());
        }
        self.put_meta(key, row)
    }

    /// Writes a collection's `meta` row as its edit saves it: `same` says
    /// the row already holds `new` (then it only counts as written, as in
    /// [`WriteCtx::put_meta_unless_same`]). A row this batch already wrote
    /// is encoded over in place.
    pub fn put_collection_meta(
        &mut self,
        key: &[u8],
        new: &super::encoding::Meta,
        same: bool,
    ) -> Result<(), StoreError> {
        if same {
            self.changed(Table::Meta, key, false);
            self.writes += 1;
            return Ok(());
        }
        if let Some(Some(row)) = self.overlay.rows[Table::Meta as usize].get_mut(key) {
            let before = self.undo.is_some().then(|| Some(Some(row.clone())));
            row.clear();
            new.encode_into(row);
            self.wrote_in_place(Table::Meta, key, before);
            self.changed(Table::Meta, key, false);
            return Ok(());
        }
        self.put_meta(key, new.encode())
    }

    /// Keeps a collection's saved `meta` row decoded for the next edit of
    /// the same key in this transaction (see [`MetaMemo`]).
    pub fn keep_memo(&mut self, memo: MetaMemo) {
        self.memo = Some(memo);
    }

    /// The memo of `key`'s `meta` row, if it is the one kept and the key
    /// has not expired (an expired key takes the lookup's path, which
    /// deletes it).
    pub fn take_memo(&mut self, key: super::keyspace::Key) -> Option<MetaMemo> {
        let memo = self.memo.take()?;
        let same_key =
            super::encoding::decode_meta_key(&memo.meta_key) == Some((key.db, key.slot, key.name));
        (same_key && !memo.meta.is_expired(self.expiry_clock())).then_some(memo)
    }

    /// Removes a row; true if it existed.
    pub fn del(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.take(table, key)?.is_some())
    }

    /// Removes a row the caller knows is there: one it has just read, or
    /// one an invariant vouches for (the score index row of a member, the
    /// `ttl` row of a key with an expiry). Unlike [`WriteCtx::del`] it
    /// does not look the row up (a tree walk in the tables).
    pub fn del_seen(&mut self, table: Table, key: &[u8]) -> Result<(), StoreError> {
        self.state.pools.touched(table, key);
        self.del_unpooled(table, key);
        Ok(())
    }

    /// [`WriteCtx::del_seen`] of a set's member that SPOP drew: if it
    /// came from the set's pool (`super::pools`), the pool has let it go
    /// and stays.
    pub fn del_popped(&mut self, key: &[u8]) {
        self.del_unpooled(Table::Sub, key);
    }

    /// [`WriteCtx::del_seen`] without telling the pools.
    fn del_unpooled(&mut self, table: Table, key: &[u8]) {
        self.remember(table, key);
        self.changed(table, key, true);
        self.set_unpooled(table, key, None);
    }

    /// [`ReadCtx::cache_ahead`] of the state this transaction began on.
    pub fn cache_ahead(&self, table: Table, from: &[u8], to: &[u8]) -> Result<(), StoreError> {
        self.base.cache_ahead(table, from, to)
    }

    /// Removes a row and returns its value (a pop: read the element, then
    /// drop it).
    pub fn take(&mut self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let old = self.get(table, key)?;
        if old.is_some() {
            self.remember(table, key);
            self.changed(table, key, true);
            self.set(table, key, None);
        }
        Ok(old)
    }

    /// Read-modify-write of one `meta` row: `f` sees the stored row (`None`
    /// if absent) and returns its replacement, or `None` to leave it as it
    /// is.
    pub fn modify_meta<T>(
        &mut self,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> (Option<Vec<u8>>, T),
    ) -> Result<T, StoreError> {
        let t = Table::Meta as usize;
        // The overlay is searched once, for the read and the write (in a
        // big batch each search is a B-tree walk); a row this batch already
        // wrote (a pipeline of INCRs to one counter) is changed where it
        // lies.
        let undo = self.undo.is_some();
        let Overlay { rows, ranges } = &mut self.overlay;
        let (out, before) = match rows[t].slot(key) {
            Slot::Held(entry) => {
                let (new, out) = f(entry.as_deref());
                let Some(new) = new else { return Ok(out) };
                let old = entry.replace(new);
                (out, undo.then_some(Some(old)))
            }
            Slot::Free(place) => {
                let old = read_under(self.base, &ranges[t], Table::Meta, key)?;
                let (new, out) = f(old.as_deref());
                let Some(new) = new else { return Ok(out) };
                place.insert(key, Some(new));
                (out, undo.then_some(None))
            }
        };
        self.changed(Table::Meta, key, false);
        self.wrote_in_place(Table::Meta, key, before);
        Ok(out)
    }

    /// Removes up to `limit` rows with keys in `[start, end)`; returns how
    /// many went. Bounded so the reaper never holds a batch for long.
    pub fn del_range(
        &mut self,
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let mut keys = Vec::new();
        self.scan(table, start, end, false, &mut |k, _| {
            keys.push(k.to_vec());
            keys.len() < limit
        })?;
        for k in &keys {
            self.del(table, k)?;
        }
        Ok(keys.len())
    }

    /// Removes every row of a table (FLUSHALL): one range deletion, whatever
    /// the table holds.
    pub fn clear(&mut self, table: Table) -> Result<(), StoreError> {
        if let (Table::Meta, Some(o)) = (table, &self.observer) {
            o.table_cleared();
            // Only keys that exist are modified by the flush.
            for row in o.observed_meta_rows() {
                if self.get(Table::Meta, &row)?.is_some() {
                    self.changed(Table::Meta, &row, true);
                }
            }
        }
        if let Some(u) = &mut self.undo {
            u.lost = true;
        }
        let t = table as usize;
        self.writes += 1;
        self.memo = None;
        self.state.pools.clear();
        self.state.dead.get_mut().cleared(table);
        self.overlay.rows[t].clear();
        self.overlay.ranges[t] = vec![(Vec::new(), None)];
        Ok(())
    }

    /// Hands out a fresh collection version.
    pub fn new_version(&mut self) -> u64 {
        let v = self.state.next_version;
        self.state.next_version += 1;
        self.state.version_dirty = true;
        v
    }

    /// Ends the transaction: writes the in-memory state it touched and
    /// returns its changes for the shard to commit.
    pub fn finish(mut self) -> Result<Vec<RowOp>, StoreError> {
        if self.state.version_dirty {
            let hwm = self.state.next_version - 1;
            self.put(Table::Sys, b"version_hwm", &hwm.to_be_bytes())?;
            self.state.version_dirty = false;
        }
        // Database by database, copying the arrays (a few hundred bytes
        // each) only when a count changed: every batch asks.
        let mut changed = false;
        for i in 0..NAMESPACES {
            let c = self.state.counts[i];
            if c == self.state.counts_stored[i] {
                continue;
            }
            let mut v = Vec::with_capacity(24);
            v.extend_from_slice(&c.keys.to_be_bytes());
            v.extend_from_slice(&c.expires.to_be_bytes());
            v.extend_from_slice(&c.expire_sum.to_be_bytes());
            self.put_row(Table::Sys, &count_key(i as u8), v)?;
            changed = true;
        }
        if changed {
            self.state.counts_stored = self.state.counts;
        }
        Ok(std::mem::take(&mut self.overlay).into_ops())
    }
}

impl KvRead for WriteCtx<'_> {
    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    fn expiry_clock(&self) -> u64 {
        if self.from_primary {
            0
        } else {
            self.now_ms
        }
    }

    fn get_head(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        // The transaction's own rows are whole (pointers are made at
        // commit).
        match self.overlay.get(Table::Meta, key) {
            Some(e) => Ok(e),
            None => self.base.get_head(key),
        }
    }

    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.overlay.get(table, key) {
            Some(e) => Ok(e),
            None => self.base.get(table, key),
        }
    }

    fn get_once(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.overlay.get(table, key) {
            Some(e) => Ok(e),
            None => self.base.get_once(table, key),
        }
    }

    fn scan_few(
        &self,
        table: Table,
        (start, end): (&[u8], Option<&[u8]>),
        order: merge::Order,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let dead = &self.state.dead;
        let rest;
        let (start, end) = match merge::from_window(dead, table, (start, end), order, visit) {
            merge::FromWindow::Served => return Ok(()),
            merge::FromWindow::Missed => (start, end),
            merge::FromWindow::Rest(key) => {
                rest = key;
                match order.reverse {
                    true => (start, Some(&rest[..])),
                    false => (&rest[..], end),
                }
            }
        };
        let top =
            (!self.overlay.untouched(table, start, end)).then_some(&self.overlay as &dyn Layer);
        self.base
            .scan_under(top, Some(dead), table, (start, end), order, visit)
    }

    fn key_count(&self, db: u8) -> Result<i64, StoreError> {
        // The sys row is only written at `finish`; the live count is here.
        Ok(self.state.counts[db as usize].keys)
    }

    fn note_lookup(&self, hit: bool) {
        let (h, m) = self.lookups.get();
        self.lookups.set(if hit { (h + 1, m) } else { (h, m + 1) });
    }

    fn note_expired(&self, db: u8, key: &[u8]) {
        if let Some(found) = &self.found_expired {
            found.borrow_mut().push((db, key.to_vec()));
        }
    }

    fn track_read(&self, id: u64, keys: &[bytes::Bytes]) -> bool {
        let Some(tracked) = &self.tracked else {
            return false;
        };
        let mut tracked = tracked.borrow_mut();
        for key in keys {
            tracked.push((self.message_place, Touch::Read(key.clone(), id)));
        }
        true
    }
}

/// Runs `f` in a write transaction over the tables of `db` alone and
/// commits its changes straight into them (tests of the encoding, which
/// need no shard around it).
#[cfg(test)]
pub(crate) fn commit_direct<T>(
    db: &Database,
    state: &mut ShardState,
    now: u64,
    f: impl FnOnce(&mut WriteCtx) -> T,
) -> T {
    let base = ReadCtx::begin(db, now).unwrap();
    let mut w = WriteCtx::open(&base, now, state);
    let out = f(&mut w);
    let ops = w.finish().unwrap();
    drop(base);
    let txn = db.begin_write().unwrap();
    apply_row_ops(&txn, &ops).unwrap();
    txn.commit().unwrap();
    out
}

/// A new shard file at `path` for a test, with the state it holds.
#[cfg(test)]
pub(crate) fn scratch_file(path: &std::path::Path) -> (Database, ShardState) {
    let db = Database::builder().create(path).unwrap();
    init_file(&db).unwrap();
    let state = ShardState::of_file(&db);
    (db, state)
}

#[cfg(test)]
impl ShardState {
    /// The state the tables of `db` alone hold.
    pub(crate) fn of_file(db: &Database) -> ShardState {
        ShardState::load(&ReadCtx::begin(db, 0).unwrap()).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &std::path::Path) -> Database {
        let db = Database::builder().create(path).unwrap();
        init_file(&db).unwrap();
        db
    }

    /// Writes `changes` (a row, or `None` to remove it) into the `sub`
    /// table through `TableWriter::apply_table`, in one transaction.
    fn apply_sub(db: &Database, changes: &std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>) {
        let txn = db.begin_write().unwrap();
        {
            let mut w = TableWriter::new(&txn);
            let iter = changes
                .iter()
                .map(|(k, v)| Change::Row(Table::Sub, k, v.as_deref()));
            w.apply_table(Table::Sub, iter).unwrap();
        }
        txn.commit().unwrap();
    }

    /// A table's changes applied through `apply_table` (cursor runs for
    /// new rows in one gap, single inserts, replacements, a run cut short
    /// by a stored row, deleted stretches, deletions scattered among rows
    /// that stay) leave what applying them one by one would, over several
    /// write-outs of the same table.
    #[test]
    fn table_changes_in_runs_match_one_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir.path().join("s.redb"));
        let mut model = std::collections::BTreeMap::<Vec<u8>, Vec<u8>>::new();
        let mut seed = 7u64;
        let mut next = move |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for round in 0..6u8 {
            // Keys 0..4000 step 1 in places: runs of neighbours, stored
            // keys inside them, and scattered ones.
            let mut changes = std::collections::BTreeMap::<Vec<u8>, Option<Vec<u8>>>::new();
            for _ in 0..300 {
                let start = next(4000);
                let most = if next(3) == 0 { 1 } else { 40 };
                let len = 1 + next(most);
                // Mixed, all deleted (a popped stretch), all written.
                let mode = next(3);
                for k in start..start + len {
                    let key = format!("k{k:05}").into_bytes();
                    let kept = match mode {
                        0 => next(5) != 0,
                        1 => false,
                        _ => true,
                    };
                    changes.insert(key, kept.then(|| vec![round; 1 + next(30) as usize]));
                }
            }
            // Every third key of a wide stretch deleted, nothing else
            // changed there: a run with many stored rows between its keys.
            if round % 2 == 1 {
                let start = 1000 * u64::from(round / 2);
                changes.retain(|k, _| {
                    let n: u64 = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
                    !(start..start + 900).contains(&n)
                });
                for k in (start..start + 900).step_by(3) {
                    changes.insert(format!("k{k:05}").into_bytes(), None);
                }
            }
            apply_sub(&db, &changes);
            for (k, v) in changes {
                match v {
                    Some(v) => model.insert(k, v),
                    None => model.remove(&k),
                };
            }
            let read = db.begin_read().unwrap();
            let table = read.open_table(Table::Sub.def()).unwrap();
            let stored: Vec<(Vec<u8>, Vec<u8>)> = table
                .iter()
                .unwrap()
                .map(|r| {
                    let (k, v) = r.unwrap();
                    (k.value().to_vec(), v.value().to_vec())
                })
                .collect();
            let expected: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
            assert_eq!(stored, expected, "round {round}");
            assert_eq!(
                redb::ReadableTableMetadata::len(&table).unwrap(),
                model.len() as u64
            );
        }
    }

    /// Removals from a table many times their number go in stretches and
    /// row by row; enough of them for the table's size go in one sweep
    /// over their span. Either way exactly the removed rows go.
    #[test]
    fn removals_are_swept_only_when_many_for_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir.path().join("s.redb"));
        let key = |k: u32| format!("k{k:05}").into_bytes();
        let mut model: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>> =
            (0..20_000).map(|k| (key(k), Some(b"v".to_vec()))).collect();
        apply_sub(&db, &model);
        // 300 removals against 20,000 rows (under a thirty-second): every
        // 97th row, and a stretch of 200.
        let mut gone: std::collections::BTreeMap<_, _> =
            (0..100).map(|i| (key(i * 97 + 5), None)).collect();
        gone.extend((15_000..15_200).map(|k| (key(k), None)));
        // Then 700 of the 19,700 left (over a thirty-second): swept.
        let mut many: std::collections::BTreeMap<_, _> =
            (0..700).map(|i| (key(i * 28 + 1), None)).collect();
        many.retain(|k, _| model.get(k).is_some_and(Option::is_some) && !gone.contains_key(k));
        for changes in [gone, many] {
            apply_sub(&db, &changes);
            for k in changes.keys() {
                model.insert(k.clone(), None);
            }
            let read = db.begin_read().unwrap();
            let table = read.open_table(Table::Sub.def()).unwrap();
            let stored: Vec<Vec<u8>> = table
                .iter()
                .unwrap()
                .map(|r| r.unwrap().0.value().to_vec())
                .collect();
            let expected: Vec<Vec<u8>> = model
                .iter()
                .filter(|(_, v)| v.is_some())
                .map(|(k, _)| k.clone())
                .collect();
            assert_eq!(stored, expected);
        }
    }

    /// Versions handed out in a committed transaction are never handed out
    /// again, even after the file is closed and reopened.
    #[test]
    fn versions_increase_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let mut last = 0;
        for _ in 0..3 {
            let db = open(&path);
            let mut state = ShardState::of_file(&db);
            assert!(state.next_version > last);
            commit_direct(&db, &mut state, 0, |w| {
                for _ in 0..10 {
                    let v = w.new_version();
                    assert!(v > last);
                    last = v;
                }
            });
        }
        // A version far ahead of the clock (as after a clock step back) is
        // still respected through the persisted high-water mark.
        let db = open(&path);
        let mut state = ShardState::of_file(&db);
        state.next_version = u64::MAX / 2;
        commit_direct(&db, &mut state, 0, |w| {
            w.new_version();
        });
        drop(db);
        let db = open(&path);
        assert!(ShardState::of_file(&db).next_version > u64::MAX / 2);
    }

    /// `swap` and `modify_meta` read through the overlay as `get` does: a
    /// row of a table the transaction cleared is absent, one it wrote is
    /// its latest value; and an undo record takes their writes back.
    #[test]
    fn swap_and_modify_see_the_overlay_and_undo() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir.path().join("s.redb"));
        let mut state = ShardState::of_file(&db);
        commit_direct(&db, &mut state, 0, |w| {
            w.put(Table::Meta, b"a", b"1").unwrap();
            w.put(Table::Meta, b"b", b"2").unwrap();
        });
        commit_direct(&db, &mut state, 1, |w| {
            // Stored rows, read from below, then rewritten in place.
            assert_eq!(
                w.swap(Table::Meta, b"a", b"3").unwrap(),
                Some(b"1".to_vec())
            );
            let seen = w.modify_meta(b"a", |old| (Some(b"4".to_vec()), old.map(<[u8]>::to_vec)));
            assert_eq!(seen.unwrap(), Some(b"3".to_vec()));
            // Taken back to what the overlay held before.
            w.begin_undo();
            assert_eq!(
                w.swap(Table::Meta, b"a", b"5").unwrap(),
                Some(b"4".to_vec())
            );
            w.modify_meta(b"b", |_| (Some(b"6".to_vec()), ())).unwrap();
            w.swap(Table::Meta, b"c", b"7").unwrap();
            w.rollback().unwrap();
            assert_eq!(w.get(Table::Meta, b"a").unwrap(), Some(b"4".to_vec()));
            assert_eq!(w.get(Table::Meta, b"b").unwrap(), Some(b"2".to_vec()));
            assert_eq!(w.get(Table::Meta, b"c").unwrap(), None);
            // A cleared table hides what lies below.
            w.clear(Table::Meta).unwrap();
            assert_eq!(w.swap(Table::Meta, b"a", b"8").unwrap(), None);
            let seen = w.modify_meta(b"b", |old| (None, old.map(<[u8]>::to_vec)));
            assert_eq!(seen.unwrap(), None);
            assert_eq!(w.get(Table::Meta, b"b").unwrap(), None);
        });
    }

    /// `meta` writes mix the write-back map (`put`) and direct writes
    /// (`swap`, `del` of rows not in the map); reads, scans and the stored
    /// result must all agree on the last write of each row.
    #[test]
    fn meta_writes_agree_whichever_path_they_take() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir.path().join("s.redb"));
        let mut state = ShardState::of_file(&db);
        commit_direct(&db, &mut state, 0, |w| {
            let m = Table::Meta;
            assert_eq!(w.swap(m, b"a", b"1").unwrap(), None);
            assert_eq!(w.swap(m, b"a", b"2").unwrap(), Some(b"1".to_vec()));
            w.put(m, b"a", b"3").unwrap();
            assert_eq!(w.swap(m, b"a", b"4").unwrap(), Some(b"3".to_vec()));
            w.put(m, b"b", b"x").unwrap();
            assert!(w.del(m, b"b").unwrap());
            assert!(!w.del(m, b"b").unwrap());
            w.put(m, b"c", b"y").unwrap();
            let mut seen = Vec::new();
            w.scan(m, b"", None, false, &mut |k, v| {
                seen.push((k.to_vec(), v.to_vec()));
                true
            })
            .unwrap();
            let expect = vec![
                (b"a".to_vec(), b"4".to_vec()),
                (b"c".to_vec(), b"y".to_vec()),
            ];
            assert_eq!(seen, expect);
        });
        let r = ReadCtx::begin(&db, 0).unwrap();
        assert_eq!(r.get(Table::Meta, b"a").unwrap(), Some(b"4".to_vec()));
        assert_eq!(r.get(Table::Meta, b"b").unwrap(), None);
        assert_eq!(r.get(Table::Meta, b"c").unwrap(), Some(b"y".to_vec()));
        drop(r);
        // Rows already in the table: a direct delete, then a cached rewrite.
        commit_direct(&db, &mut state, 0, |w| {
            let m = Table::Meta;
            assert!(w.del(m, b"c").unwrap());
            assert_eq!(w.get(m, b"c").unwrap(), None);
            assert_eq!(w.swap(m, b"c", b"z").unwrap(), None);
            assert!(w.del(m, b"a").unwrap());
            let mut seen = Vec::new();
            w.scan(m, b"", None, true, &mut |k, v| {
                seen.push((k.to_vec(), v.to_vec()));
                true
            })
            .unwrap();
            assert_eq!(seen, vec![(b"c".to_vec(), b"z".to_vec())]);
        });
        let r = ReadCtx::begin(&db, 0).unwrap();
        assert_eq!(r.get(Table::Meta, b"a").unwrap(), None);
        assert_eq!(r.get(Table::Meta, b"c").unwrap(), Some(b"z".to_vec()));
    }

    /// `modify_meta` changes a stored row in place, a cached one in the
    /// cache, and leaves rows alone when asked to; reads and the committed
    /// file agree.
    #[test]
    fn modify_meta_reads_and_writes_one_row() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir.path().join("s.redb"));
        let mut state = ShardState::of_file(&db);
        let bump = |raw: Option<&[u8]>| {
            let n = raw.map_or(0, |r| r[0]);
            (Some(vec![n + 1]), n)
        };
        commit_direct(&db, &mut state, 0, |w| {
            w.put(Table::Meta, b"stored", &[5]).unwrap();
        });
        commit_direct(&db, &mut state, 0, |w| {
            // In the table: changed in place, then cached as clean.
            assert_eq!(w.modify_meta(b"stored", bump).unwrap(), 5);
            assert_eq!(w.modify_meta(b"stored", bump).unwrap(), 6);
            // Absent: created.
            assert_eq!(w.modify_meta(b"fresh", bump).unwrap(), 0);
            // Asked to leave it: untouched.
            let seen = w
                .modify_meta(b"other", |raw| (None, raw.is_some()))
                .unwrap();
            assert!(!seen);
            assert_eq!(w.get(Table::Meta, b"stored").unwrap(), Some(vec![7]));
        });
        let r = ReadCtx::begin(&db, 0).unwrap();
        assert_eq!(r.get(Table::Meta, b"stored").unwrap(), Some(vec![7]));
        assert_eq!(r.get(Table::Meta, b"fresh").unwrap(), Some(vec![1]));
        assert_eq!(r.get(Table::Meta, b"other").unwrap(), None);
    }

    /// Every table's rows, for comparing files.
    fn dump(db: &Database) -> Vec<(Table, Vec<u8>, Vec<u8>)> {
        dump_view(&ReadCtx::begin(db, 0).unwrap())
    }

    /// Every table's rows as a view sees them.
    fn dump_view(r: &dyn KvRead) -> Vec<(Table, Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        for t in Table::ALL {
            r.scan(t, &[], None, false, &mut |k, v| {
                out.push((t, k.to_vec(), v.to_vec()));
                true
            })
            .unwrap();
        }
        out
    }

    /// The changes a transaction hands to the commit leave exactly what
    /// its own reads saw, on its file and on a copy of the file it started
    /// from: whichever way each change was made (rewrites, in-place
    /// updates, pops, ranges, a cleared table written again).
    #[test]
    fn finished_changes_leave_what_the_transaction_read() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            open(&dir.path().join("a.redb")),
            open(&dir.path().join("b.redb")),
        );
        for db in [&a, &b] {
            let mut state = ShardState::of_file(db);
            commit_direct(db, &mut state, 0, |w| {
                for k in [&b"m1"[..], b"m2", b"m3"] {
                    w.put(Table::Meta, k, b"old").unwrap();
                    w.put(Table::Sub, k, b"s").unwrap();
                }
                w.put(Table::Ttl, b"t", b"").unwrap();
            });
        }
        let mut state = ShardState::of_file(&a);
        let (seen, ops) = {
            let base = ReadCtx::begin(&a, 0).unwrap();
            let mut w = WriteCtx::open(&base, 0, &mut state);
            w.put(Table::Meta, b"m1", b"cached").unwrap();
            w.modify_meta(b"m2", |_| (Some(b"in place".to_vec()), ()))
                .unwrap();
            w.modify_meta(b"m1", |_| (Some(b"cached twice".to_vec()), ()))
                .unwrap();
            assert!(w.del(Table::Meta, b"m3").unwrap());
            assert!(!w.del(Table::Meta, b"absent").unwrap());
            w.swap(Table::Meta, b"m4", b"new").unwrap();
            w.put_meta(b"m5", b"encoded".to_vec()).unwrap();
            assert_eq!(w.take(Table::Sub, b"m1").unwrap(), Some(b"s".to_vec()));
            w.del_range(Table::Sub, b"m2", None, usize::MAX).unwrap();
            w.clear(Table::Ttl).unwrap();
            w.put(Table::Ttl, b"u", b"").unwrap();
            w.state.counts[2].keys = 9;
            let seen = dump_view(&w);
            (seen, w.finish().unwrap())
        };
        for db in [&a, &b] {
            let txn = db.begin_write().unwrap();
            apply_row_ops(&txn, &ops).unwrap();
            txn.commit().unwrap();
        }
        // The transaction read what its changes leave (the state rows
        // `finish` adds aside).
        let without_sys = |rows: Vec<(Table, Vec<u8>, Vec<u8>)>| {
            rows.into_iter()
                .filter(|r| r.0 != Table::Sys)
                .collect::<Vec<_>>()
        };
        assert_eq!(without_sys(dump(&a)), without_sys(seen));
        assert_eq!(dump(&a), dump(&b));
    }

    /// Key counts persist with the data they describe.
    #[test]
    fn counts_persist() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let db = open(&path);
        let mut state = ShardState::of_file(&db);
        state.counts[3] = DbCounts {
            keys: 7,
            expires: 2,
            expire_sum: 3_000_000_000_000,
        };
        commit_direct(&db, &mut state, 0, |_| {});
        drop(db);
        let db = open(&path);
        let s = ShardState::of_file(&db);
        assert_eq!(
            s.counts[3],
            DbCounts {
                keys: 7,
                expires: 2,
                expire_sum: 3_000_000_000_000,
            }
        );
    }

    /// A file whose counts predate the expiry sums gets them from its
    /// expiry index when it opens.
    #[test]
    fn expiry_sums_rebuilt_for_old_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let db = open(&path);
        let txn = db.begin_write().unwrap();
        {
            let mut sys = txn.open_table(SYS).unwrap();
            let mut old = 3i64.to_be_bytes().to_vec();
            old.extend_from_slice(&2i64.to_be_bytes());
            sys.insert(count_key(4).as_slice(), old.as_slice()).unwrap();
            let mut ttl = txn.open_table(TTL).unwrap();
            for (at, name) in [(5_000u64, &b"a"[..]), (7_000, b"b")] {
                let k = super::super::encoding::ttl_key(at, 4, 0, name);
                ttl.insert(k.as_slice(), &[][..]).unwrap();
            }
            let other = super::super::encoding::ttl_key(9_000, 5, 0, b"c");
            ttl.insert(other.as_slice(), &[][..]).unwrap();
        }
        txn.commit().unwrap();
        let s = ShardState::of_file(&db);
        assert_eq!(
            s.counts[4],
            DbCounts {
                keys: 3,
                expires: 2,
                expire_sum: 12_000,
            }
        );
        // Database 5 has no count row: nothing is made up for it.
        assert_eq!(s.counts[5], DbCounts::default());
    }
}

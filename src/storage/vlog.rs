//! The value log: large string values kept out of the tables' leaves.
//!
//! A `meta` row holding a string value of [`MIN_VALUE`] bytes or more
//! goes into the tables as a short pointer row; the row itself is
//! appended to one of the shard's value log files (`<stem>-v<n>.vlog`).
//! With data larger than memory, a random 1 KiB row rewrote a 4 KiB B-tree
//! leaf each time a write buffer reached the tables, and leaves of three
//! rows kept the tree far larger than the page cache: every row moved in
//! read and wrote its leaf (see DESIGN-NOTES, "The write path"). Pointer
//! rows are ~40 bytes with their key, so the tree stays small enough to be
//! cached and one leaf write carries many rows, while the values are
//! appended to the value log (the WiscKey design).
//!
//! Two sides append. The shard thread appends the large rows of each
//! commit ([`Appender`]), so its write buffer holds pointer rows, and a
//! buffer (and a write-out) of a given size carries many more rows; the
//! shard log keeps the whole rows, so these appends need no sync of their
//! own. The background writer (and recovery, before it starts) appends
//! what a collection moves, and the rows recovery puts into the tables.
//! Before the writer's redb transaction commits, [`ValueLog::prepare`]
//! makes both sides' appends durable and records every file's size and
//! dead bytes in `sys`, so a committed pointer never points past a durable
//! file end. What no commit recorded (appends whose write buffer a crash
//! lost, a failed transaction's) is cut off again: at open, each file is
//! cut back to its recorded size and files `sys` does not list are
//! deleted, and the shard log's whole rows go in anew.
//!
//! Space: a record no row of the tables points at (its row overwritten or
//! deleted, there or while still buffered) is dead. Once half of a file
//! is dead, [`ValueLog::collect`] moves the values still pointed at to the
//! end of the log, in one transaction, and the file goes; a file the shard
//! thread appended to waits until every buffer that may point into it is
//! in the tables. Readers hold the set of files that was current when
//! their snapshot began ([`Files`]); the file is unlinked at once, but its
//! open handle keeps it readable for them until they let go.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::encoding::{CorruptRow, HEAD_LEN};
use super::tables::{io_err, RowOp, StoreError, Table};
use crate::storage::buffer::Change;
use crate::storage::KeyType;

/// String rows (type byte, expiry, value) at least this long go to the
/// value log: below it a row shares its leaf with enough others that
/// separating it saves little, and costs a second read.
pub const MIN_VALUE: usize = 512;

/// A file takes appends until it is this long; then the next one starts.
/// Collection works a file at a time, so this bounds its pause.
const FILE_BYTES: u64 = if cfg!(test) { 64 << 10 } else { 64 << 20 };

/// First byte of a pointer row of format 2: a type code no `meta` row has
/// (the low four bits of a row's first byte are its type, 1-6).
const TAG: u8 = 0x0F;

/// A pointer row of format 2: tag, file u32, offset u64 (of the row, after
/// its record header), length u32. Still read; no longer written.
const OLD_POINTER_LEN: usize = 17;

/// First byte of a pointer row that carries its row's head: another type
/// code no `meta` row has.
const TAG_HEAD: u8 = 0x0E;

/// A pointer row: tag, the row's head, file u32, offset u64, length u32.
/// The head lets a write that replaces the row (SET) settle the old key's
/// expiry and counts without reading its value from the log.
pub const POINTER_LEN: usize = 1 + HEAD_LEN + 16;

/// A record: key length u32, row length u32, key, row.
const HEADER: u64 = 8;

/// The `sys` rows recording each file: prefix and file number, then size
/// u64 and dead bytes u64.
const REGISTRY: &[u8] = b"vlog/";

/// Where a separated row lies, and its head (unknown for a pointer row
/// of format 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pointer {
    file: u32,
    offset: u64,
    len: u32,
    head: Option<[u8; HEAD_LEN]>,
}

impl Pointer {
    /// A pointer row of this build. Only pointers made from their rows
    /// are encoded (`put_record`, whose rows are at least [`MIN_VALUE`]
    /// long), never one read from a format 2 row, which has no head.
    fn encode(self) -> [u8; POINTER_LEN] {
        debug_assert!(self.head.is_some(), "a pointer made from its row");
        let mut out = [0; POINTER_LEN];
        out[0] = TAG_HEAD;
        let rest = &mut out[1..];
        rest[..HEAD_LEN].copy_from_slice(&self.head.unwrap_or_default());
        let rest = &mut rest[HEAD_LEN..];
        rest[..4].copy_from_slice(&self.file.to_be_bytes());
        rest[4..12].copy_from_slice(&self.offset.to_be_bytes());
        rest[12..].copy_from_slice(&self.len.to_be_bytes());
        out
    }

    /// The pointer a stored `meta` value is, if it is one.
    fn decode(row: &[u8]) -> Option<Pointer> {
        let (head, rest) = match (row.first(), row.len()) {
            (Some(&TAG_HEAD), POINTER_LEN) => (
                Some(row[1..1 + HEAD_LEN].try_into().ok()?),
                &row[1 + HEAD_LEN..],
            ),
            (Some(&TAG), OLD_POINTER_LEN) => (None, &row[1..]),
            _ => return None,
        };
        Some(Pointer {
            file: u32::from_be_bytes(rest[..4].try_into().ok()?),
            offset: u64::from_be_bytes(rest[4..12].try_into().ok()?),
            len: u32::from_be_bytes(rest[12..16].try_into().ok()?),
            head,
        })
    }

    /// Where its row lies, whatever the format of the pointer row.
    fn place(self) -> (u32, u64, u32) {
        (self.file, self.offset, self.len)
    }

    /// Bytes its record takes in the file.
    fn record_bytes(self, key_len: usize) -> u64 {
        HEADER + key_len as u64 + self.len as u64
    }
}

/// Whether a row of `table` goes to the value log (the tables then hold
/// a pointer to it instead).
pub(crate) fn separates(table: Table, row: &[u8]) -> bool {
    points_in(table) && row.len() >= MIN_VALUE && row[0] & 0x0F == KeyType::String as u8
}

/// The value log files a reader resolves pointer rows in: those of the
/// moment its snapshot began (taken with it, under the store's view lock).
#[derive(Debug, Default)]
pub struct Files(BTreeMap<u32, Arc<File>>);

impl Files {
    /// The row `stored` (a value read from `table`: the tables or a write
    /// buffer) stands for: itself, or the row it points at.
    pub fn resolve<'a>(
        &self,
        table: Table,
        stored: &'a [u8],
    ) -> Result<std::borrow::Cow<'a, [u8]>, StoreError> {
        match self.pointed(table, stored)? {
            Some(row) => Ok(std::borrow::Cow::Owned(row)),
            None => Ok(std::borrow::Cow::Borrowed(stored)),
        }
    }

    /// [`Files::resolve`] in place.
    pub fn resolve_in_place(&self, table: Table, row: &mut Vec<u8>) -> Result<(), StoreError> {
        if let Some(pointed) = self.pointed(table, row)? {
            *row = pointed;
        }
        Ok(())
    }

    /// The row `stored` points at, if it is a pointer row.
    fn pointed(&self, table: Table, stored: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if !points_in(table) {
            return Ok(None);
        }
        let Some(p) = Pointer::decode(stored) else {
            return Ok(None);
        };
        let file = self
            .0
            .get(&p.file)
            .ok_or(CorruptRow("pointer into a value log file that is gone"))?;
        let mut row = vec![0; p.len as usize];
        file.read_exact_at(&mut row, p.offset).map_err(io_err)?;
        Ok(Some(row))
    }
}

/// Whether rows of `table` may be pointers into the value log: only a
/// `meta` row (a string's value) is ever moved out.
pub fn points_in(table: Table) -> bool {
    table == Table::Meta
}

/// The files of a shard's value log, as its two writers and its readers
/// share them. The shard thread appends the large rows of each commit to a
/// file of its own ([`Appender`]); the background writer appends what a
/// collection moves (and what recovery puts into the tables) to another
/// ([`ValueLog`]). Two files, so neither waits for the other's appends.
#[derive(Debug, Default)]
pub struct Catalog {
    files: BTreeMap<u32, Arc<File>>,
    /// The files the shard thread appended to, as it left them.
    appended: BTreeMap<u32, Appended>,
    /// The number the next new file takes.
    next: u32,
    /// Set when `files` changed since readers last took them.
    changed: bool,
}

/// A file of the shard thread's appends.
#[derive(Debug, Clone, Copy)]
struct Appended {
    /// Bytes written.
    size: u64,
    /// The last commit that appended to it, once a newer file took the
    /// appends: write buffers up to that commit may point into it, later
    /// ones do not.
    sealed_at: Option<u64>,
}

/// [`Catalog`], shared.
pub type SharedCatalog = Arc<parking_lot::Mutex<Catalog>>;

impl Catalog {
    /// The files as readers should now see them, if they changed since
    /// the last call.
    pub fn readable(&mut self) -> Option<Arc<Files>> {
        if !std::mem::take(&mut self.changed) {
            return None;
        }
        Some(Arc::new(Files(self.files.clone())))
    }

    /// Creates the next file.
    fn create(&mut self, dir: &Path, stem: &str) -> io::Result<(u32, Arc<File>)> {
        let n = self.next.max(1);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(file_path(dir, stem, n))?;
        read_randomly(&file);
        let file = Arc::new(file);
        self.next = n + 1;
        self.files.insert(n, file.clone());
        self.changed = true;
        Ok((n, file))
    }

    fn remove(&mut self, n: u32) {
        self.files.remove(&n);
        self.appended.remove(&n);
        self.changed = true;
    }
}

/// Appends a record (key, row) to `out`; returns where its row will lie
/// in a file whose appends so far end at `end`.
fn put_record(out: &mut Vec<u8>, file: u32, end: u64, key: &[u8], row: &[u8]) -> Pointer {
    let start = end + out.len() as u64;
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(&(row.len() as u32).to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(row);
    Pointer {
        file,
        offset: start + HEADER + key.len() as u64,
        len: row.len() as u32,
        head: head_of_row(row),
    }
}

/// The head of a `meta` row (see [`HEAD_LEN`]).
fn head_of_row(row: &[u8]) -> Option<[u8; HEAD_LEN]> {
    row.get(..HEAD_LEN)?.try_into().ok()
}

/// The head of the row a stored `meta` value points at, where the pointer
/// row carries it: all a write that replaces the row needs of it.
pub fn pointed_head(stored: &[u8]) -> Option<[u8; HEAD_LEN]> {
    Pointer::decode(stored)?.head
}

/// Whether the stored `meta` value `stored` points where the pointer row
/// `here` does (either may be of format 2).
pub fn same_place(stored: &[u8], here: &[u8]) -> bool {
    match (Pointer::decode(stored), Pointer::decode(here)) {
        (Some(a), Some(b)) => a.place() == b.place(),
        _ => false,
    }
}

/// The shard thread's side of the value log: at commit, the large rows of the
/// batch are appended here, and the write buffer keeps pointer rows in their
/// place, so a buffer of a given size carries many times the rows of 1 KiB
/// values, and a write-out, bounded by its log generation instead, about four
/// times (see DESIGN-NOTES, "The value log"). The shard log still holds the
/// whole rows: these appends need not be durable until the background writer
/// commits the pointers into the tables (it syncs them first), and recovery
/// puts the log's whole rows into the tables anew.
#[derive(Debug)]
pub struct Appender {
    dir: PathBuf,
    stem: String,
    catalog: SharedCatalog,
    /// The file appends go to, and its size.
    current: Option<(u32, Arc<File>, u64)>,
    /// The last commit that appended to `current`.
    last_seq: u64,
    pending: Vec<u8>,
}

impl Appender {
    /// The shard thread's appender of `values`' log. It starts a file of
    /// its own: the files there are the background writer's.
    pub fn new(values: &ValueLog) -> Appender {
        Appender {
            dir: values.dir.clone(),
            stem: values.stem.clone(),
            catalog: values.catalog.clone(),
            current: None,
            last_seq: 0,
            pending: Vec::new(),
        }
    }

    /// Appends the large rows of commit `seq`'s `ops` and returns, for
    /// each, its index in `ops` and the pointer row to buffer in its place;
    /// also whether a file was created (readers must be given it before
    /// the commit is visible). Nothing is synced (see the type's doc).
    #[allow(clippy::type_complexity)]
    pub fn append(
        &mut self,
        seq: u64,
        ops: &[RowOp],
    ) -> io::Result<(Vec<(usize, [u8; POINTER_LEN])>, bool)> {
        let mut pointers = Vec::new();
        let mut created = false;
        for (i, op) in ops.iter().enumerate() {
            let RowOp::Put(table, key, row) = op else {
                continue;
            };
            if !separates(*table, row) {
                continue;
            }
            if pointers.is_empty() {
                created = self.room()?;
            }
            let (n, _, size) = self.current.as_ref().expect("room() opened a file");
            let p = put_record(&mut self.pending, *n, *size, key, row);
            pointers.push((i, p.encode()));
        }
        if self.pending.is_empty() {
            return Ok((pointers, created));
        }
        let (n, file, size) = self.current.as_mut().expect("room() opened a file");
        let written = file.write_all_at(&self.pending, *size);
        let len = self.pending.len() as u64;
        self.pending.clear();
        written?;
        *size += len;
        self.last_seq = seq;
        if let Some(a) = self.catalog.lock().appended.get_mut(n) {
            a.size = *size;
        }
        Ok((pointers, created))
    }

    /// Makes sure a file with room takes this commit's appends (a commit's
    /// appends all go to one file); true if it created one.
    fn room(&mut self) -> io::Result<bool> {
        if let Some((_, _, size)) = &self.current {
            if *size < FILE_BYTES {
                return Ok(false);
            }
        }
        let mut catalog = self.catalog.lock();
        let (n, file) = catalog.create(&self.dir, &self.stem)?;
        if let Some((old, ..)) = self.current.take() {
            if let Some(a) = catalog.appended.get_mut(&old) {
                a.sealed_at = Some(self.last_seq);
            }
        }
        catalog.appended.insert(
            n,
            Appended {
                size: 0,
                sealed_at: None,
            },
        );
        self.current = Some((n, file, 0));
        Ok(true)
    }
}

/// One file, as the background writer knows it.
#[derive(Debug)]
struct LogFile {
    file: Arc<File>,
    /// Bytes written (appends not yet flushed are in `ValueLog::tail`).
    size: u64,
    /// Bytes of records a row of the tables points at.
    live: u64,
    /// Size and live bytes as the last committed transaction recorded
    /// them (`None`: created, or first seen, since).
    committed: Option<(u64, u64)>,
    /// Whether the shard thread appends to it (an [`Appender`]'s file):
    /// then its size comes from the catalog, and its appends are not the
    /// background writer's to undo.
    appended: bool,
    /// For such a file, the last commit that appended to it, once sealed.
    sealed_at: Option<u64>,
}

impl LogFile {
    /// Bytes of records no row of the tables points at (records replaced
    /// or deleted there, and those replaced while still buffered).
    fn dead(&self) -> u64 {
        self.size.saturating_sub(self.live)
    }
}

/// A shard's value log, as its background writer uses it (see the module
/// doc).
#[derive(Debug)]
pub struct ValueLog {
    dir: PathBuf,
    stem: String,
    catalog: SharedCatalog,
    files: BTreeMap<u32, LogFile>,
    /// The file this side appends to.
    own: Option<u32>,
    /// Appends to `own` not yet written to it.
    tail: Vec<u8>,
    /// Files whose appends are not yet durable.
    unsynced: Vec<u32>,
    /// Files removed by a collection, until its transaction commits.
    removed: Vec<u32>,
    /// Set when a file was created since the directory was last synced:
    /// its name must be durable before a commit points into it.
    new_names: bool,
    /// The last commit whose write buffer is in the tables: files sealed
    /// up to it are pointed at from the tables alone.
    written: u64,
}

impl ValueLog {
    /// Opens the value log of the shard named `stem` in `dir` as the
    /// committed `registry` rows (from `sys`: key, value) describe it:
    /// each file is cut back to its recorded size, files not listed are
    /// deleted (see the module doc).
    pub fn open(dir: &Path, stem: &str, registry: &[(Vec<u8>, Vec<u8>)]) -> io::Result<ValueLog> {
        let mut files = BTreeMap::new();
        let mut catalog = Catalog::default();
        for (key, value) in registry {
            let (Some(n), Some((size, dead))) = (registry_file(key), registry_value(value)) else {
                continue;
            };
            let path = file_path(dir, stem, n);
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            read_randomly(&file);
            let len = file.metadata()?.len();
            if len < size {
                // Its records were durable before the commit that recorded
                // this size: a shorter file lost rows, and padding it would
                // hand readers zeros.
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is shorter than its last commit recorded",
                        path.display()
                    ),
                ));
            }
            if len > size {
                file.set_len(size)?;
            }
            let file = Arc::new(file);
            catalog.files.insert(n, file.clone());
            catalog.next = catalog.next.max(n + 1);
            let live = size.saturating_sub(dead);
            files.insert(
                n,
                LogFile {
                    file,
                    size,
                    live,
                    committed: Some((size, live)),
                    appended: false,
                    sealed_at: None,
                },
            );
        }
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if let Some(n) = parse_name(stem, &name) {
                if !files.contains_key(&n) {
                    std::fs::remove_file(dir.join(&*name))?;
                }
            }
        }
        catalog.changed = true;
        Ok(ValueLog {
            dir: dir.to_path_buf(),
            stem: stem.to_string(),
            catalog: Arc::new(parking_lot::Mutex::new(catalog)),
            files,
            own: None,
            tail: Vec::new(),
            unsynced: Vec::new(),
            removed: Vec::new(),
            new_names: false,
            written: 0,
        })
    }

    /// The files, as the shard thread and the readers share them.
    pub fn catalog(&self) -> &SharedCatalog {
        &self.catalog
    }

    /// Bytes in the files, and of them dead (INFO, tests).
    pub fn usage(&self) -> (u64, u64) {
        self.files
            .values()
            .fold((0, 0), |(s, d), f| (s + f.size, d + f.dead()))
    }

    /// Notes that every commit up to `seq` is in the tables (a write
    /// buffer was written out).
    pub fn written_through(&mut self, seq: u64) {
        self.written = self.written.max(seq);
    }

    /// What goes into the table for a row of `table` to be stored: the
    /// row itself, a pointer to its copy appended here, or the pointer row
    /// it is (the shard thread appended its row at commit).
    pub fn store<'a>(
        &mut self,
        table: Table,
        key: &[u8],
        row: &'a [u8],
    ) -> io::Result<std::borrow::Cow<'a, [u8]>> {
        if points_in(table) {
            if let Some(p) = Pointer::decode(row) {
                if !self.files.contains_key(&p.file) {
                    self.adopt();
                }
                let f = self.files.get_mut(&p.file).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a buffered pointer into an unknown value log file",
                    )
                })?;
                f.live += p.record_bytes(key.len());
                return Ok(std::borrow::Cow::Borrowed(row));
            }
        }
        if !separates(table, row) {
            return Ok(std::borrow::Cow::Borrowed(row));
        }
        let p = self.append(key, row)?;
        Ok(std::borrow::Cow::Owned(p.encode().to_vec()))
    }

    /// Notes that a value stored in `table` (before a change) is replaced
    /// or deleted: if it pointed here, its record is dead.
    pub fn dropped(&mut self, table: Table, key: &[u8], stored: &[u8]) {
        if !points_in(table) {
            return;
        }
        if let Some(p) = Pointer::decode(stored) {
            if let Some(f) = self.files.get_mut(&p.file) {
                f.live = f.live.saturating_sub(p.record_bytes(key.len()));
            }
        }
    }

    /// Takes in the shard thread's files as they now are: new ones, what
    /// was appended to the others, which are sealed.
    fn adopt(&mut self) {
        let catalog = self.catalog.lock();
        for (n, a) in &catalog.appended {
            match self.files.get_mut(n) {
                Some(f) => {
                    if f.size < a.size {
                        f.size = a.size;
                        if !self.unsynced.contains(n) {
                            self.unsynced.push(*n);
                        }
                    }
                    f.sealed_at = a.sealed_at;
                }
                None => {
                    let Some(file) = catalog.files.get(n) else {
                        continue;
                    };
                    self.files.insert(
                        *n,
                        LogFile {
                            file: file.clone(),
                            size: a.size,
                            live: 0,
                            committed: None,
                            appended: true,
                            sealed_at: a.sealed_at,
                        },
                    );
                    self.unsynced.push(*n);
                    self.new_names = true;
                }
            }
        }
    }

    fn append(&mut self, key: &[u8], row: &[u8]) -> io::Result<Pointer> {
        let n = self.current()?;
        let f = self.files.get_mut(&n).expect("current() made it");
        let p = put_record(&mut self.tail, n, f.size, key, row);
        f.live += p.record_bytes(key.len());
        if self.tail.len() >= 1 << 20 {
            self.write_tail()?;
        }
        Ok(p)
    }

    /// The file this side appends to, or a new one once it is full.
    fn current(&mut self) -> io::Result<u32> {
        if let Some(n) = self.own {
            if let Some(f) = self.files.get(&n) {
                if f.size + (self.tail.len() as u64) < FILE_BYTES {
                    return Ok(n);
                }
            }
        }
        self.write_tail()?;
        let (n, file) = self.catalog.lock().create(&self.dir, &self.stem)?;
        self.files.insert(
            n,
            LogFile {
                file,
                size: 0,
                live: 0,
                committed: None,
                appended: false,
                sealed_at: None,
            },
        );
        self.own = Some(n);
        self.new_names = true;
        Ok(n)
    }

    /// Writes the pending appends to this side's file.
    fn write_tail(&mut self) -> io::Result<()> {
        if self.tail.is_empty() {
            return Ok(());
        }
        let Some(n) = self.own else {
            return Ok(());
        };
        let Some(f) = self.files.get_mut(&n) else {
            return Ok(());
        };
        f.file.write_all_at(&self.tail, f.size)?;
        f.size += self.tail.len() as u64;
        self.tail.clear();
        if !self.unsynced.contains(&n) {
            self.unsynced.push(n);
        }
        Ok(())
    }

    /// Before the write transaction commits: makes every append durable
    /// (the shard thread's included) and hands `record` the `sys` changes
    /// that describe the files as they now are.
    pub fn prepare(
        &mut self,
        mut record: impl FnMut(Change<'_>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.adopt();
        self.write_tail().map_err(io_err)?;
        for n in std::mem::take(&mut self.unsynced) {
            if let Some(f) = self.files.get(&n) {
                f.file.sync_data().map_err(io_err)?;
            }
        }
        if std::mem::take(&mut self.new_names) {
            File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .map_err(io_err)?;
        }
        for n in &self.removed {
            record(Change::Row(Table::Sys, &registry_key(*n), None))?;
        }
        for (n, f) in &self.files {
            if f.committed != Some((f.size, f.live)) && !self.removed.contains(n) {
                let value = [f.size.to_be_bytes(), f.dead().to_be_bytes()].concat();
                record(Change::Row(Table::Sys, &registry_key(*n), Some(&value)))?;
            }
        }
        Ok(())
    }

    /// After the transaction [`ValueLog::prepare`] described committed:
    /// the files a collection emptied are deleted. Readers still holding
    /// one keep reading it through their open handle.
    pub fn committed(&mut self) {
        for f in self.files.values_mut() {
            f.committed = Some((f.size, f.live));
        }
        let removed = std::mem::take(&mut self.removed);
        if removed.is_empty() {
            return;
        }
        let mut catalog = self.catalog.lock();
        for n in removed {
            self.files.remove(&n);
            catalog.remove(n);
            if self.own == Some(n) {
                self.own = None;
            }
            let path = file_path(&self.dir, &self.stem, n);
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::error!(file = %path.display(), error = %e, "cannot delete a value log file");
            }
        }
    }

    /// After the transaction failed: forgets what it appended and
    /// counted, so that the files are as the last commit left them (the
    /// shard thread's appends stay: its buffers point at them).
    pub fn aborted(&mut self) {
        self.tail.clear();
        self.unsynced.clear();
        self.removed.clear();
        let mut catalog = self.catalog.lock();
        self.files.retain(|n, f| {
            let Some((size, live)) = f.committed else {
                if !f.appended {
                    let _ = std::fs::remove_file(file_path(&self.dir, &self.stem, *n));
                    catalog.remove(*n);
                    if self.own == Some(*n) {
                        self.own = None;
                    }
                }
                return false;
            };
            if f.size != size && !f.appended {
                let _ = f.file.set_len(size);
            }
            (f.size, f.live) = (size, live);
            true
        });
    }

    /// The file most worth collecting, at least half dead: never the one
    /// this side appends to (unless nothing in it is live), nor one the
    /// shard thread appends to or whose appends some write buffer not yet
    /// in the tables may point at.
    pub fn victim(&mut self) -> Option<u32> {
        self.adopt();
        self.files
            .iter()
            .filter(|(n, f)| {
                let settled = !f.appended || f.sealed_at.is_some_and(|s| s <= self.written);
                let movable = self.own != Some(**n) || f.live == 0;
                settled && movable && f.dead() * 2 >= f.size
            })
            .max_by_key(|(_, f)| f.dead())
            .map(|(n, _)| *n)
    }

    /// Appends the records of file `n` that `live` says a row still points
    /// at (it is given the key and a pointer row to the record, to compare
    /// with [`same_place`]) to the end of
    /// the log, and returns each one's key and new pointer row, for the
    /// caller to put in the table; the file is deleted once the
    /// transaction commits.
    #[allow(clippy::type_complexity)]
    pub fn collect(
        &mut self,
        n: u32,
        mut live: impl FnMut(&[u8], &[u8]) -> Result<bool, StoreError>,
    ) -> Result<Vec<(Vec<u8>, [u8; POINTER_LEN])>, StoreError> {
        let Some(f) = self.files.get(&n) else {
            return Ok(Vec::new());
        };
        let size = f.size;
        let mut reader = io::BufReader::with_capacity(1 << 20, FileReader(f.file.clone(), 0));
        self.removed.push(n);
        if self.own == Some(n) {
            // Nothing in it is live (see `victim`): the next append starts
            // a new file.
            self.write_tail().map_err(io_err)?;
            self.own = None;
        }
        let mut moved = Vec::new();
        let mut offset = 0u64;
        let mut header = [0u8; HEADER as usize];
        while offset + HEADER <= size {
            reader.read_exact(&mut header).map_err(io_err)?;
            let klen = u32::from_be_bytes(header[..4].try_into().unwrap_or_default()) as usize;
            let rlen = u32::from_be_bytes(header[4..].try_into().unwrap_or_default());
            let mut key = vec![0; klen];
            reader.read_exact(&mut key).map_err(io_err)?;
            let mut row = vec![0; rlen as usize];
            reader.read_exact(&mut row).map_err(io_err)?;
            let here = Pointer {
                file: n,
                offset: offset + HEADER + klen as u64,
                len: rlen,
                head: head_of_row(&row),
            };
            offset = here.offset + rlen as u64;
            if live(&key, &here.encode())? {
                let to = self.append(&key, &row).map_err(io_err)?;
                moved.push((key, to.encode()));
            }
        }
        Ok(moved)
    }
}

/// Tells the kernel that reads of `file` are random: a reader wants one
/// row, and read-ahead brought in rows nobody asked for (GETs of data
/// larger than memory read 2,878 bytes from disk per 1 KiB value with it,
/// 2,146 without: `benches/larger_than_memory.sh`). Collection reads a
/// file in 1 MiB pieces, and needs none either.
fn read_randomly(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for the call; the advice changes
    // only how the kernel caches the file, never its contents.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM);
    }
}

/// Reads a file from an offset on, for a `BufReader`.
struct FileReader(Arc<File>, u64);

impl Read for FileReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.0.read_at(buf, self.1)?;
        self.1 += n as u64;
        Ok(n)
    }
}

/// The `sys` key range of the registry: its prefix.
pub fn registry_prefix() -> &'static [u8] {
    REGISTRY
}

fn registry_key(n: u32) -> Vec<u8> {
    [REGISTRY, &n.to_be_bytes()[..]].concat()
}

fn registry_file(key: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(
        key.strip_prefix(REGISTRY)?.try_into().ok()?,
    ))
}

fn registry_value(value: &[u8]) -> Option<(u64, u64)> {
    Some((
        u64::from_be_bytes(value.get(..8)?.try_into().ok()?),
        u64::from_be_bytes(value.get(8..16)?.try_into().ok()?),
    ))
}

fn file_path(dir: &Path, stem: &str, n: u32) -> PathBuf {
    dir.join(format!("{stem}-v{n}.vlog"))
}

/// The number of a value log file of `stem` named `name`.
fn parse_name(stem: &str, name: &str) -> Option<u32> {
    name.strip_prefix(stem)?
        .strip_prefix("-v")?
        .strip_suffix(".vlog")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_rows_of_both_formats_are_read_and_only_the_new_carry_the_head() {
        let row = [[0x01u8].as_slice(), &7u64.to_be_bytes(), &[b'v'; 600]].concat();
        let mut out = Vec::new();
        let p = put_record(&mut out, 3, 100, b"key", &row);
        let new = p.encode();
        assert_eq!((new.len(), new[0]), (POINTER_LEN, TAG_HEAD));
        assert_eq!(Pointer::decode(&new), Some(p));
        assert_eq!(pointed_head(&new).unwrap()[..], row[..HEAD_LEN]);

        // Format 2's row for the same record: tag, file, offset, length.
        let old = [
            [TAG].as_slice(),
            &3u32.to_be_bytes(),
            &p.offset.to_be_bytes(),
            &(row.len() as u32).to_be_bytes(),
        ]
        .concat();
        let decoded = Pointer::decode(&old).unwrap();
        assert_eq!((decoded.place(), decoded.head), (p.place(), None));
        assert_eq!(pointed_head(&old), None, "its value must be read");
        assert!(same_place(&old, &new) && same_place(&new, &old));

        // A record elsewhere, and rows that are no pointers.
        let other = put_record(&mut out, 3, 100, b"key2", &row).encode();
        assert!(!same_place(&new, &other));
        assert_eq!(Pointer::decode(&row), None);
        assert_eq!(Pointer::decode(&new[..POINTER_LEN - 1]), None);
    }
}

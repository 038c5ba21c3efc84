//! The shard log: every commit of a shard is one record appended here
//! before its replies go out, and that append is the commit (the write
//! buffer holds the rows until the background writer puts them into the
//! tables).
//!
//! The log is a series of files, `<stem>-<gen>.wal`, one per write buffer:
//! when the active buffer is frozen the log moves to the next generation,
//! and once the frozen buffer is in the tables (whose `sys` row `wal_gen`
//! records the last generation they hold) its file is done with. A record
//! is `magic u32, length u32, CRC-32 u32`, then the body: the generation
//! (u64), the commit's sequence number (u64) and its changes (`rowops`).
//! Reading stops at the first torn or corrupt record (it was never
//! acknowledged) or at one of another generation.
//!
//! A file done with is kept as `<stem>-spare.wal` and becomes the next
//! generation's file, written over from its start: an fdatasync of blocks
//! the file already has need not commit a new file size to the file
//! system's journal, and measured here that made each sync of `always`
//! 20-30% cheaper than one of an appended file. What is left of the old
//! generation past the new records ends the reading, being of another
//! generation.
//!
//! Records are copied into a shared memory map of the file rather than
//! written with a system call each: a store into the map is in the page
//! cache as soon as it is made, so a killed process loses nothing it
//! acknowledged, and `sync` (fdatasync) makes the map's pages durable like
//! written ones. The map is a window of [`WINDOW`] bytes that moves along
//! the file, whose blocks are allocated ahead of it (so a store into it
//! never has to find disk space, which a full disk would turn into a
//! SIGBUS), and it keeps the log's share of the server's memory to one
//! window. Measured here at pipeline 1, `everysec`, -c 50: server CPU per
//! request SET 16.7 -> 15.0 us, INCR 17.0 -> 16.2 (three rounds each; a
//! build that skipped the write altogether gave -14% and -20%). A commit
//! fsynced at once (`always`), and a record too big for a window, are
//! written with `pwrite` as before: each fsync write-protects the pages
//! it cleaned, so the next store into one would take a page fault, a cost
//! of the same order as the call it would save. Those writes too go into
//! blocks allocated ahead, within the file's size: an fdatasync after an
//! append that grows the file must also commit the new size to the file
//! system's journal, and measured here (ext4 on a virtual disk, 200-byte
//! writes) it took 175 us at the median against 85 us for one inside it.
//! Reading stops at the zeros past the last record, as at a torn tail.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::rowops::{self, Cursor};
use super::tables::RowOp;

/// First bytes of every record.
const MAGIC: u32 = 0x6377_616c;
/// Record header: magic, body length, body CRC-32.
const HEADER: usize = 12;

/// Bytes of the log file mapped at a time (see the module doc).
pub const WINDOW: usize = 4 << 20;

/// The `sys` row naming the last log generation the tables hold.
pub const GEN_ROW: &[u8] = b"wal_gen";

/// The `sys` row holding the sequence number of the last commit the
/// tables hold: a shard's commits are numbered on from it after a restart,
/// so a number names one commit for the shard's whole life (recovery
/// compares them with where a multi-shard round began: `shard::intent`).
pub const SEQ_ROW: &[u8] = b"wal_seq";

/// The file of generation `gen`.
pub fn path(dir: &Path, stem: &str, gen: u64) -> PathBuf {
    dir.join(format!("{stem}-{gen}.wal"))
}

/// A file done with, kept to be written over by the next generation.
fn spare(dir: &Path, stem: &str) -> PathBuf {
    dir.join(format!("{stem}-spare.wal"))
}

/// The log files of `stem` in `dir`, oldest generation first.
pub fn existing(dir: &Path, stem: &str) -> io::Result<Vec<(u64, PathBuf)>> {
    let prefix = format!("{stem}-");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let gen = name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".wal"))
            .and_then(|g| g.parse::<u64>().ok());
        if let Some(gen) = gen {
            out.push((gen, entry.path()));
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// One commit read back from the log.
#[derive(Debug, PartialEq, Eq)]
pub struct Record {
    /// The commit's sequence number.
    pub seq: u64,
    /// Its changes.
    pub ops: Vec<RowOp>,
}

/// The whole records of generation `gen` in its log file, and whether they
/// ended before the file did (a torn or corrupt record, or what is left of
/// an older generation in a reused file).
pub fn read(path: &Path, gen: u64) -> io::Result<(Vec<Record>, bool)> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let Some(h) = bytes.get(at..at + HEADER) else {
            return Ok((out, true));
        };
        let magic = u32::from_be_bytes(h[..4].try_into().unwrap());
        let len = u32::from_be_bytes(h[4..8].try_into().unwrap()) as usize;
        let crc = u32::from_be_bytes(h[8..12].try_into().unwrap());
        let body = bytes.get(at + HEADER..at + HEADER + len);
        let Some(body) = body.filter(|b| magic == MAGIC && crc32fast::hash(b) == crc) else {
            return Ok((out, true));
        };
        let mut c = Cursor(body);
        let record = c
            .u64()
            .filter(|g| *g == gen)
            .and_then(|_| c.u64())
            .and_then(|seq| Some(Record { seq, ops: c.ops()? }))
            .filter(|_| c.0.is_empty());
        let Some(record) = record else {
            return Ok((out, true));
        };
        out.push(record);
        at += HEADER + len;
    }
    Ok((out, false))
}

/// A log file being written, with what it takes to make it durable from
/// any thread (see [`Current`]).
#[derive(Debug)]
struct LogFile {
    file: File,
    /// Appended to since the last fsync.
    dirty: AtomicBool,
    /// Held across an fsync: whoever finds the file clean while another
    /// thread syncs it must wait for that fsync to finish before counting
    /// on it.
    syncing: parking_lot::Mutex<()>,
}

impl LogFile {
    /// Makes everything stored into the file so far durable.
    fn sync(&self) -> io::Result<()> {
        let _one = self.syncing.lock();
        if self.dirty.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.file.sync_data() {
                self.dirty.store(true, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }
}

/// The file a shard's log is being written to now, shared so that other
/// threads than the shard's writer can make it durable: before a shard's
/// finished log generation is fsynced (and so may reach its tables), every
/// other shard's log is made durable too, so that the state each of them
/// was in when a round held in that generation began is durable (see
/// `shard::intent`). A log publishes its next generation's file here only
/// after the finished one's fsync, so syncing whichever file this holds
/// covers every record appended before.
#[derive(Clone, Debug, Default)]
pub struct Current(Arc<parking_lot::Mutex<Option<Arc<LogFile>>>>);

impl Current {
    /// Makes every record appended to the log so far durable.
    pub fn sync(&self) -> io::Result<()> {
        let file = self.0.lock().clone();
        file.map_or(Ok(()), |f| f.sync())
    }

    /// Whether every record appended to the log so far is durable.
    #[cfg(test)]
    pub fn synced(&self) -> bool {
        let file = self.0.lock().clone();
        file.is_none_or(|f| !f.dirty.load(Ordering::Acquire))
    }
}

/// The open log of a shard.
#[derive(Debug)]
pub struct Wal {
    dir: PathBuf,
    stem: String,
    gen: u64,
    file: Arc<LogFile>,
    /// Where the file being written is published (see [`Current`]).
    current: Current,
    len: u64,
    /// The mapped part of the file, once a record was stored into one.
    window: Option<Window>,
    /// The end of the blocks allocated ahead of the records (and so the
    /// file's size while the generation is written, see `reserve`).
    allocated: u64,
    /// False where the file system cannot allocate blocks ahead
    /// (fallocate): records are then written with `pwrite`.
    mappable: bool,
    /// Reused for encoding records.
    scratch: Vec<u8>,
}

impl Wal {
    /// Starts generation `gen`, in the spare file if there is one (see
    /// the module doc), else in a new one.
    pub fn create(dir: &Path, stem: &str, gen: u64) -> io::Result<Wal> {
        let target = path(dir, stem, gen);
        let reused = std::fs::rename(spare(dir, stem), &target).is_ok();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(!reused)
            .open(&target)?;
        // The new name must survive a crash along with what is written to
        // it, or recovery would miss a whole generation.
        File::open(dir)?.sync_all()?;
        let file = Arc::new(LogFile {
            file,
            dirty: AtomicBool::new(false),
            syncing: Default::default(),
        });
        let current = Current::default();
        *current.0.lock() = Some(file.clone());
        Ok(Wal {
            dir: dir.to_path_buf(),
            stem: stem.to_string(),
            gen,
            file,
            current,
            len: 0,
            window: None,
            allocated: 0,
            mappable: true,
            scratch: Vec::new(),
        })
    }

    /// Publishes the file being written in `current` from now on,
    /// through every later generation (see [`Current`]).
    pub fn publish_in(&mut self, current: Current) {
        *current.0.lock() = Some(self.file.clone());
        self.current = current;
    }

    /// The generation being written.
    pub fn gen(&self) -> u64 {
        self.gen
    }

    /// Bytes in the current generation.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the current generation holds no record.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends the record of commit `seq`, fsynced if `sync`.
    pub fn append(&mut self, seq: u64, ops: &[RowOp], sync: bool) -> io::Result<()> {
        self.append_as(seq, ops, sync)?;
        if sync {
            self.sync()?;
        }
        Ok(())
    }

    /// Appends the record of commit `seq`, without an fsync: written with
    /// `pwrite` if `through` (a record an fsync will follow at once:
    /// stored through the map instead, each fsync would write-protect the
    /// page again and the next record's store fault on it).
    pub fn append_as(&mut self, seq: u64, ops: &[RowOp], through: bool) -> io::Result<()> {
        let mut rec = std::mem::take(&mut self.scratch);
        rec.clear();
        rec.extend_from_slice(&[0; HEADER]);
        rec.extend_from_slice(&self.gen.to_be_bytes());
        rec.extend_from_slice(&seq.to_be_bytes());
        rowops::encode(ops, &mut rec);
        let len = (rec.len() - HEADER) as u32;
        let crc = crc32fast::hash(&rec[HEADER..]);
        rec[..4].copy_from_slice(&MAGIC.to_be_bytes());
        rec[4..8].copy_from_slice(&len.to_be_bytes());
        rec[8..12].copy_from_slice(&crc.to_be_bytes());
        // A failed write may leave part of a record: the next append goes
        // over it, at the same place.
        if through || !self.store(&rec)? {
            self.reserve(self.len + rec.len() as u64)?;
            self.file.file.write_all_at(&rec, self.len)?;
        }
        self.len += rec.len() as u64;
        self.file.dirty.store(true, Ordering::Release);
        // Kept for the next record, unless a big value made it big: a
        // 512 MB string must not stay allocated after its commit.
        if rec.capacity() <= 1 << 20 {
            self.scratch = rec;
        }
        Ok(())
    }

    /// Makes every appended record durable.
    pub fn sync(&mut self) -> io::Result<()> {
        self.file.sync()
    }

    /// The file being written now, to make durable without this log's
    /// lock (see [`Current`]): it holds every record appended so far,
    /// earlier generations being durable before the next one starts.
    pub fn current(&self) -> Current {
        self.current.clone()
    }

    /// Moves to the next generation, after making this one durable: a
    /// later generation is only ever read after a whole earlier one, so a
    /// crash recovers a prefix of the commits.
    pub fn rotate(&mut self) -> io::Result<()> {
        // A finished generation's file holds its records and nothing after
        // them: the blocks allocated ahead of the window are given back.
        self.window = None;
        if self.allocated > self.len {
            self.file.file.set_len(self.len)?;
        }
        self.sync()?;
        let current = self.current.clone();
        *self = Wal::create(&self.dir, &self.stem, self.gen + 1)?;
        self.publish_in(current);
        Ok(())
    }

    /// Copies `rec` into the map at the end of the log, moving the window
    /// if it does not hold it; false if `rec` is too big for a window or
    /// the file cannot be mapped.
    fn store(&mut self, rec: &[u8]) -> io::Result<bool> {
        if !self.mappable {
            return Ok(false);
        }
        let end = self.len + rec.len() as u64;
        let held = |w: &Window| w.start <= self.len && end <= w.start + WINDOW as u64;
        if !self.window.as_ref().is_some_and(held) {
            // Half a window at most, so that a moved window always has
            // room for the record after the page it starts in.
            if rec.len() > WINDOW / 2 {
                return Ok(false);
            }
            self.window = None;
            let start = self.len & !(page_size() - 1);
            self.reserve(start + WINDOW as u64)?;
            if !self.mappable {
                return Ok(false);
            }
            self.window = Some(Window::map(&self.file.file, start)?);
        }
        let w = self.window.as_ref().expect("mapped above");
        let at = (self.len - w.start) as usize;
        // SAFETY: `at + rec.len() <= WINDOW` (checked above), the window
        // maps WINDOW bytes of file blocks allocated before mapping, and
        // `rec` is ordinary memory, so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(rec.as_ptr(), w.ptr.add(at), rec.len()) };
        Ok(true)
    }

    /// Makes sure the file's blocks up to `end` are allocated, allocating
    /// [`WINDOW`] bytes (or what `end` needs) past the last record when
    /// they are not. Where the file system cannot (EOPNOTSUPP), records
    /// are appended as they come.
    fn reserve(&mut self, end: u64) -> io::Result<()> {
        if !self.mappable || end <= self.allocated {
            return Ok(());
        }
        let size = (end - self.len).max(WINDOW as u64);
        let offset = libc::off_t::try_from(self.len).map_err(io::Error::other)?;
        let size_arg = libc::off_t::try_from(size).map_err(io::Error::other)?;
        // SAFETY: a plain system call on an open descriptor.
        let r = unsafe { libc::fallocate(self.file.file.as_raw_fd(), 0, offset, size_arg) };
        if r != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                self.mappable = false;
                return Ok(());
            }
            return Err(e);
        }
        self.allocated = self.len + size;
        Ok(())
    }
}

/// The system's page size, to which a map's offset must be aligned.
fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(n)
        .ok()
        .filter(|n| n.is_power_of_two())
        .unwrap_or(4096)
}

/// [`WINDOW`] bytes of a log file, mapped shared and writable.
#[derive(Debug)]
struct Window {
    /// The file offset of the first byte.
    start: u64,
    ptr: *mut u8,
}

// SAFETY: the mapping belongs to the one `Wal` that owns the window, and
// stores through it happen only under that `Wal`'s `&mut self`.
unsafe impl Send for Window {}

impl Window {
    /// Maps `[start, start + WINDOW)` of the file, whose blocks the
    /// caller has allocated (`Wal::reserve`).
    fn map(file: &File, start: u64) -> io::Result<Window> {
        let fd = file.as_raw_fd();
        let offset = libc::off_t::try_from(start).map_err(io::Error::other)?;
        // SAFETY: a plain system call on an open descriptor; mmap gets no
        // address hint and its result is checked before use.
        unsafe {
            let ptr = libc::mmap(
                std::ptr::null_mut(),
                WINDOW,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                offset,
            );
            if ptr == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            Ok(Window {
                start,
                ptr: ptr.cast(),
            })
        }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: `ptr` is the start of a WINDOW-byte mapping made by
        // `map` and not unmapped before; nothing refers to it after this.
        // Unmapping leaves the stored bytes in the page cache.
        unsafe { libc::munmap(self.ptr.cast(), WINDOW) };
    }
}

/// Is done with the log files of `stem` up to generation `upto`: one is
/// kept as the spare (see the module doc), the others are deleted.
pub fn remove_upto(dir: &Path, stem: &str, upto: u64) -> io::Result<()> {
    for (gen, path) in existing(dir, stem)? {
        if gen > upto {
            continue;
        }
        let spare = spare(dir, stem);
        if spare.exists() {
            std::fs::remove_file(path)?;
        } else {
            std::fs::rename(path, spare)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Table;

    fn ops(k: &[u8]) -> Vec<RowOp> {
        vec![
            RowOp::Put(Table::Meta, k.to_vec(), b"v".to_vec()),
            RowOp::Del(Table::Sub, k.to_vec()),
            RowOp::Clear(Table::Ttl),
            RowOp::DelRange(Table::Gc, b"a".to_vec(), Some(b"b".to_vec())),
        ]
    }

    /// Records read back whole; a torn tail (a crash mid-append) and a
    /// corrupt record end the file; generations are listed in order.
    #[test]
    fn whole_records_read_back_and_a_torn_tail_ends_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::create(dir.path(), "shard-0", 7).unwrap();
        wal.append(1, &ops(b"a"), true).unwrap();
        wal.append(2, &ops(b"b"), false).unwrap();
        let whole = wal.len();
        wal.rotate().unwrap();
        wal.append(3, &ops(b"c"), true).unwrap();
        assert_eq!(wal.gen(), 8);
        let files = existing(dir.path(), "shard-0").unwrap();
        assert_eq!(files.iter().map(|f| f.0).collect::<Vec<_>>(), [7, 8]);
        let (records, torn) = read(&files[0].1, 7).unwrap();
        assert!(!torn);
        assert_eq!(
            records,
            [
                Record {
                    seq: 1,
                    ops: ops(b"a")
                },
                Record {
                    seq: 2,
                    ops: ops(b"b")
                }
            ]
        );
        // Cut the first file inside its second record.
        let f = OpenOptions::new().write(true).open(&files[0].1).unwrap();
        f.set_len(whole - 3).unwrap();
        let (records, torn) = read(&files[0].1, 7).unwrap();
        assert!(torn);
        assert_eq!(records.len(), 1);
        // A fsynced record went into blocks allocated ahead of it.
        assert_eq!(std::fs::metadata(&files[1].1).unwrap().len(), WINDOW as u64);
        // Flip a byte of the only record of the second file (which is
        // followed by the blocks allocated ahead).
        let mut bytes = std::fs::read(&files[1].1).unwrap();
        let n = wal.len() as usize;
        bytes[n - 1] ^= 1;
        std::fs::write(&files[1].1, bytes).unwrap();
        assert_eq!(read(&files[1].1, 8).unwrap(), (vec![], true));
        remove_upto(dir.path(), "shard-0", 7).unwrap();
        assert_eq!(existing(dir.path(), "shard-0").unwrap().len(), 1);
    }

    /// Records stored through the map are in the file for any reader at
    /// once (no sync, as a killed process would leave them), across moves
    /// of the window, mixed with fsynced and oversized records written
    /// with pwrite; a finished generation's file ends at its last record.
    #[test]
    fn mapped_records_read_back_across_windows() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::create(dir.path(), "m", 1).unwrap();
        let value = vec![7u8; 100_000];
        let row = |seq: u64| {
            let size = match seq {
                // Bigger than half a window: written, not mapped.
                20 => WINDOW / 2 + 1,
                _ => value.len(),
            };
            vec![RowOp::Put(
                Table::Sub,
                seq.to_be_bytes().to_vec(),
                vec![seq as u8; size],
            )]
        };
        let mut expected = Vec::new();
        // About three windows' worth.
        for seq in 1..=120 {
            wal.append(seq, &row(seq), seq % 10 == 0).unwrap();
            expected.push(Record { seq, ops: row(seq) });
        }
        assert!(wal.len() > 2 * WINDOW as u64);
        let file = path(dir.path(), "m", 1);
        assert_eq!(read(&file, 1).unwrap(), (expected, true));
        let len = wal.len();
        wal.rotate().unwrap();
        assert_eq!(std::fs::metadata(&file).unwrap().len(), len);
        assert!(!read(&file, 1).unwrap().1);
    }

    /// A file done with is written over by a later generation: its old
    /// records, whole as they are, are not read as the new generation's.
    #[test]
    fn a_reused_file_holds_only_its_new_generation() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::create(dir.path(), "s", 1).unwrap();
        for seq in 1..=5 {
            wal.append(seq, &ops(b"old"), false).unwrap();
        }
        wal.rotate().unwrap();
        remove_upto(dir.path(), "s", 1).unwrap();
        assert!(spare(dir.path(), "s").exists());
        wal.append(6, &ops(b"x"), false).unwrap();
        wal.rotate().unwrap();
        assert_eq!(wal.gen(), 3);
        // Generation 3 took over generation 1's file.
        assert!(!spare(dir.path(), "s").exists());
        wal.append(7, &ops(b"new"), true).unwrap();
        let (records, _) = read(&path(dir.path(), "s", 3), 3).unwrap();
        assert_eq!(
            records,
            [Record {
                seq: 7,
                ops: ops(b"new")
            }]
        );
        assert!(std::fs::metadata(path(dir.path(), "s", 3)).unwrap().len() > wal.len());
    }
}

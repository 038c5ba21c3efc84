//! A redo journal under redb, so that a durable commit is one sequential
//! write and one fdatasync of a small file.
//!
//! Since the shard log (`wal`) took over making batches durable, shard
//! files are opened without it: redb commits only when the background
//! writer moves a whole write buffer in, and a large commit gained nothing
//! from the journal but a second copy of its pages. What remains is
//! replaying a journal an older build left beside its file
//! (`shard::set::replay_old_journal`); the rest of this page describes the
//! journal as those builds wrote it.
//!
//! Why: a redb `Durability::Immediate` commit writes its copy-on-write pages
//! where they live in the shard file and fdatasyncs it. For a batch of
//! random-key writes those are ~28 pages scattered over the file, and each
//! becomes its own block request: under `durability = always` that write-out
//! was most of the commit (see DESIGN-NOTES.md, "Commit journal").
//!
//! Nothing about redb's commit protocol changes; only how its writes become
//! durable. Every write is kept in an in-memory overlay of pages (reads see
//! it there) and also appended to the record being built. `sync_data`,
//! which is where redb makes a commit durable, then writes that record to
//! `shard-<i>.journal` and fdatasyncs the journal alone. The overlay is
//! handed to the shard file, and the file fdatasynced, at a *checkpoint*:
//! when the journal is full, when one commit wrote more than a record holds,
//! and at close (and handed over without a sync whenever it fills). Every
//! checkpoint starts a new journal generation, so records that the shard file
//! already holds are never replayed over newer pages.
//!
//! Opening replays the current generation's records onto the shard file, in
//! order, before redb reads it. A record counts only if it is whole: magic,
//! generation, sequence number and CRC all agree; the first that does not
//! ends the journal. A torn last record was never acknowledged (its
//! `sync_data` had not returned), so dropping it loses nothing. After replay
//! the shard file is what it was at the last durable commit, plus possibly
//! some pages of a commit that never completed, which is exactly what redb
//! already tolerates from a crash with a plain file.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// First bytes of a journal file, naming its entry format (see `Format`).
const FILE_MAGIC: &[u8; 8] = b"cairnjl2";
/// First bytes of a journal written by a cairn whose entries held their
/// data whole; such a journal is still replayed after an upgrade.
const FILE_MAGIC_V1: &[u8; 8] = b"cairnjl1";
/// The file header occupies one page; records start after it.
const HEADER_LEN: u64 = 4096;
/// First bytes of every record.
const RECORD_MAGIC: u32 = 0x6a72_6563;
/// Record header: magic u32, generation u64, sequence u64, body length u32.
const RECORD_HEADER: usize = 4 + 8 + 8 + 4;
/// An entry header: shard-file offset u64, write length u32, and the number
/// of those bytes stored u32 (the rest of the write is zeros).
const ENTRY_HEADER: usize = 8 + 4 + 4;
/// An entry header of a `cairnjl1` journal: offset u64, length u32.
const ENTRY_HEADER_V1: usize = 8 + 4;
/// The entry length that marks a change of the shard file's length (to the
/// entry's offset) rather than a write.
const SET_LEN: u32 = u32::MAX;
/// A commit whose writes exceed this is made durable by a checkpoint instead
/// of a record: past a few MiB the scattered write-out costs less than
/// writing every page twice, and the record buffer stays bounded.
const MAX_BODY: usize = 4 << 20;
/// Once the journal holds this much, the next sync checkpoints.
const JOURNAL_CAP: u64 = 64 << 20;
/// The overlay's unit: one page.
const CHUNK: usize = 4096;
/// Past this, the overlay is handed to the shard file at once (no fsync:
/// durability still comes from the journal or the next checkpoint).
const OVERLAY_CAP: usize = 16 << 20;

/// The path of the journal that goes with shard file `path`.
pub fn journal_path(path: &Path) -> PathBuf {
    path.with_extension("journal")
}

/// A redb storage backend: the shard file plus its redo journal.
#[derive(Debug)]
pub struct JournalBackend {
    /// The shard file, through redb's own backend (its locks included).
    file: FileBackend,
    /// The journal file.
    journal: File,
    /// Everything a write or sync changes; only the writer thread takes it.
    state: Mutex<Journal>,
    /// Pages written and not yet handed to the shard file.
    overlay: parking_lot::RwLock<Overlay>,
    /// Whether `overlay` holds anything: reads skip its lock when not.
    overlay_used: AtomicBool,
}

/// The journal's position and the record being built.
#[derive(Debug)]
struct Journal {
    /// The current generation; records of any other are dead.
    generation: u64,
    /// Sequence number of the next record in this generation.
    seq: u64,
    /// Journal offset where the next record goes.
    pos: u64,
    /// The next record: room for its header, then the entries since the
    /// last sync.
    record: Vec<u8>,
    /// The writes since the last sync do not fit a record: checkpoint.
    overflow: bool,
}

impl Journal {
    fn has_entries(&self) -> bool {
        self.record.len() > RECORD_HEADER
    }

    /// Adds an entry to the pending record, or gives the record up once the
    /// writes outgrow it. `kept` is the stored start of a write of `len`
    /// bytes whose remainder is zeros.
    fn push(&mut self, offset: u64, len: u32, kept: &[u8]) {
        if self.overflow {
            return;
        }
        if self.record.len() + ENTRY_HEADER + kept.len() > RECORD_HEADER + MAX_BODY {
            self.give_up();
            return;
        }
        self.record.extend_from_slice(&offset.to_le_bytes());
        self.record.extend_from_slice(&len.to_le_bytes());
        self.record
            .extend_from_slice(&(kept.len() as u32).to_le_bytes());
        self.record.extend_from_slice(kept);
    }

    /// Records a write of `data` at `offset`, leaving out its trailing
    /// zeros: a B-tree page is written whole, and the free space at its end
    /// (about 40% of the bytes of a commit of random-key writes) is zeros.
    fn push_write(&mut self, offset: u64, data: &[u8]) {
        let kept = &data[..zero_tail(data)];
        match u32::try_from(data.len()) {
            Ok(len) if len != SET_LEN => self.push(offset, len, kept),
            // A write of 4 GiB: no record holds it.
            _ => self.give_up(),
        }
    }

    /// The writes since the last sync will not fit one record: the next
    /// sync makes them durable by a checkpoint.
    fn give_up(&mut self) {
        self.overflow = true;
        self.record.truncate(RECORD_HEADER);
    }

    fn clear(&mut self) {
        self.record.truncate(RECORD_HEADER);
        self.overflow = false;
    }
}

/// Where the trailing run of zero bytes of `data` starts.
fn zero_tail(data: &[u8]) -> usize {
    let mut end = data.len();
    // Eight bytes at a time first: most of a page's free space goes in a
    // few comparisons.
    while end >= 8 && data[end - 8..end] == [0u8; 8] {
        end -= 8;
    }
    while end > 0 && data[end - 1] == 0 {
        end -= 1;
    }
    end
}

/// Pages written since they last reached the shard file, in page-sized
/// chunks keyed by their aligned offset.
///
/// Why: a commit's ~28 pages used to be 28 `pwrite`s into the page cache,
/// each a syscall and a block reservation, although the journal already
/// makes them durable. Kept here, a page rewritten by many commits (redb
/// reuses freed pages at once) reaches the file once, at a checkpoint or
/// when the overlay fills, as one sorted pass of adjacent runs.
#[derive(Debug, Default)]
struct Overlay {
    chunks: HashMap<u64, Box<[u8; CHUNK]>>,
    /// Chunks handed to the file, kept for reuse: a new chunk would be
    /// zeroed memory, often fresh from the kernel, on every write.
    spare: Vec<Box<[u8; CHUNK]>>,
}

impl Overlay {
    fn bytes(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    /// The aligned offsets of the chunks `[offset, offset + len)` touches.
    fn chunk_bases(offset: u64, len: usize) -> impl Iterator<Item = u64> {
        let end = offset + len as u64;
        let first = offset - offset % CHUNK as u64;
        (first..end).step_by(CHUNK)
    }

    /// Takes a write. A chunk it covers in part starts from what the file
    /// holds there (zeros past its end).
    fn write(&mut self, file: &FileBackend, offset: u64, data: &[u8]) -> io::Result<()> {
        for base in Self::chunk_bases(offset, data.len()) {
            let lo = base.max(offset);
            let hi = (base + CHUNK as u64).min(offset + data.len() as u64);
            let src = &data[(lo - offset) as usize..(hi - offset) as usize];
            let at = (lo - base) as usize;
            match self.chunks.entry(base) {
                Entry::Occupied(e) => e.into_mut()[at..at + src.len()].copy_from_slice(src),
                Entry::Vacant(v) => {
                    let mut chunk = self.spare.pop().unwrap_or_else(|| Box::new([0; CHUNK]));
                    if src.len() < CHUNK {
                        let len = file.len()?;
                        let n = len.saturating_sub(base).min(CHUNK as u64) as usize;
                        file.read(base, &mut chunk[..n])?;
                        chunk[n..].fill(0);
                    }
                    chunk[at..at + src.len()].copy_from_slice(src);
                    v.insert(chunk);
                }
            }
        }
        Ok(())
    }

    /// `data` goes to the file at `offset` past the overlay: chunks it
    /// covers whole are dropped, and the ones it covers in part take their
    /// part of it, so a read never sees what it replaced.
    fn replace(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        for base in Self::chunk_bases(offset, data.len()) {
            let whole = base >= offset && base + CHUNK as u64 <= end;
            if whole {
                if let Some(chunk) = self.chunks.remove(&base) {
                    self.spare.push(chunk);
                }
            } else if let Some(chunk) = self.chunks.get_mut(&base) {
                let lo = base.max(offset);
                let hi = (base + CHUNK as u64).min(end);
                chunk[(lo - base) as usize..(hi - base) as usize]
                    .copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
            }
        }
    }

    /// Whether every chunk of `[offset, offset + len)` is here.
    fn covers(&self, offset: u64, len: usize) -> bool {
        Self::chunk_bases(offset, len).all(|base| self.chunks.contains_key(&base))
    }

    /// Overwrites `out`, the file's bytes at `offset`, with the chunks here.
    fn patch(&self, offset: u64, out: &mut [u8]) {
        let end = offset + out.len() as u64;
        for base in Self::chunk_bases(offset, out.len()) {
            if let Some(chunk) = self.chunks.get(&base) {
                let lo = base.max(offset);
                let hi = (base + CHUNK as u64).min(end);
                out[(lo - offset) as usize..(hi - offset) as usize]
                    .copy_from_slice(&chunk[(lo - base) as usize..(hi - base) as usize]);
            }
        }
    }

    /// The file is cut to `len`: what lies past it must read as zeros if
    /// the file grows again, so it must not be written back.
    fn truncate(&mut self, len: u64) {
        let past: Vec<u64> = self.chunks.keys().copied().filter(|&b| b >= len).collect();
        for base in past {
            let chunk = self.chunks.remove(&base).expect("listed above");
            self.spare.push(chunk);
        }
        let straddling = len - len % CHUNK as u64;
        if let Some(chunk) = self.chunks.get_mut(&straddling) {
            chunk[(len - straddling) as usize..].fill(0);
        }
    }

    /// Writes every chunk to the file, adjacent ones as one write, and
    /// empties the overlay.
    fn flush(&mut self, file: &FileBackend) -> io::Result<()> {
        if self.chunks.is_empty() {
            return Ok(());
        }
        let len = file.len()?;
        let mut bases: Vec<u64> = self.chunks.keys().copied().collect();
        bases.sort_unstable();
        let mut run: Vec<u8> = Vec::new();
        let mut run_start = 0;
        for base in bases {
            if !run.is_empty() && base != run_start + run.len() as u64 {
                write_clamped(file, run_start, &run, len)?;
                run.clear();
            }
            if run.is_empty() {
                run_start = base;
            }
            run.extend_from_slice(&self.chunks[&base][..]);
        }
        write_clamped(file, run_start, &run, len)?;
        self.spare
            .extend(self.chunks.drain().map(|(_, chunk)| chunk));
        Ok(())
    }
}

/// Writes `data` at `offset`, leaving out whatever lies past `len` (a
/// chunk's tail beyond the file's end is not part of the file).
fn write_clamped(file: &FileBackend, offset: u64, data: &[u8], len: u64) -> io::Result<()> {
    let n = len.saturating_sub(offset).min(data.len() as u64) as usize;
    if n == 0 {
        return Ok(());
    }
    file.write(offset, &data[..n])
}

impl JournalBackend {
    /// Opens (creating if needed) the shard file at `path` and its journal,
    /// replaying the journal onto the file first.
    pub fn open(path: &Path) -> io::Result<JournalBackend> {
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(false);
        let file = opts.open(path)?;
        let journal = opts.open(journal_path(path))?;
        let generation = match read_header(&journal)? {
            Some((generation, format)) => {
                if replay(&journal, &file, generation, format)? > 0 {
                    file.sync_data()?;
                }
                generation + 1
            }
            None => {
                // Generations restart at 1: no record of an earlier life of
                // this file may survive to be mistaken for a new one.
                journal.set_len(0)?;
                1
            }
        };
        // A new generation at every open: what was just replayed is in the
        // shard file now, and must never be replayed over later pages.
        write_header(&journal, generation)?;
        let file = FileBackend::new(file).map_err(io::Error::other)?;
        let mut record = Vec::with_capacity(64 * 1024);
        record.resize(RECORD_HEADER, 0);
        Ok(JournalBackend {
            file,
            journal,
            state: Mutex::new(Journal {
                generation,
                seq: 0,
                pos: HEADER_LEN,
                record,
                overflow: false,
            }),
            overlay: parking_lot::RwLock::new(Overlay::default()),
            overlay_used: AtomicBool::new(false),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Journal> {
        // A panic while holding the lock can leave the record with only
        // some of a transaction's writes; redb then aborts that transaction,
        // and replaying writes to pages no commit refers to is harmless.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the shard file durable and starts a new generation.
    fn checkpoint(&self, j: &mut Journal) -> io::Result<()> {
        self.flush_overlay()?;
        self.file.sync_data()?;
        j.generation += 1;
        write_header(&self.journal, j.generation)?;
        j.seq = 0;
        j.pos = HEADER_LEN;
        j.clear();
        Ok(())
    }

    /// Hands every overlay page to the shard file.
    fn flush_overlay(&self) -> io::Result<()> {
        let mut ov = self.overlay.write();
        ov.flush(&self.file)?;
        self.overlay_used.store(false, Ordering::Release);
        Ok(())
    }

    /// Writes the pending record and makes it durable.
    fn append(&self, j: &mut Journal) -> io::Result<()> {
        let body_len = u32::try_from(j.record.len() - RECORD_HEADER).expect("bounded by MAX_BODY");
        let mut header = [0u8; RECORD_HEADER];
        header[0..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
        header[4..12].copy_from_slice(&j.generation.to_le_bytes());
        header[12..20].copy_from_slice(&j.seq.to_le_bytes());
        header[20..24].copy_from_slice(&body_len.to_le_bytes());
        j.record[..RECORD_HEADER].copy_from_slice(&header);
        let crc = crc32fast::hash(&j.record);
        let body_end = j.record.len();
        j.record.extend_from_slice(&crc.to_le_bytes());
        let written = self
            .journal
            .write_all_at(&j.record, j.pos)
            .and_then(|()| self.journal.sync_data());
        if let Err(e) = written {
            // The record may be partly on disk and is not to be trusted; the
            // next sync makes the same writes durable by a checkpoint.
            j.record.truncate(body_end);
            j.overflow = true;
            return Err(e);
        }
        j.pos += j.record.len() as u64;
        j.seq += 1;
        j.clear();
        Ok(())
    }
}

impl StorageBackend for JournalBackend {
    fn len(&self) -> Result<u64, io::Error> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        if !self.overlay_used.load(Ordering::Acquire) {
            return self.file.read(offset, out);
        }
        // Held across the file read, so a flush cannot move a page out of
        // the overlay between the two.
        let ov = self.overlay.read();
        if !ov.covers(offset, out.len()) {
            self.file.read(offset, out)?;
        }
        ov.patch(offset, out);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut j = self.state();
        self.overlay.write().truncate(len);
        self.file.set_len(len)?;
        j.push(len, SET_LEN, &[]);
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        let mut j = self.state();
        if !j.has_entries() && !j.overflow {
            return Ok(());
        }
        let next_end = j.pos + (j.record.len() + 4) as u64;
        if j.overflow || next_end > JOURNAL_CAP {
            self.checkpoint(&mut j)
        } else {
            self.append(&mut j)
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut j = self.state();
        if data.len() >= OVERLAY_CAP {
            // It would fill the overlay by itself (a 512 MB string is one
            // such write): straight to the file, which a sync makes durable
            // by a checkpoint, as the record cannot hold it.
            self.overlay.write().replace(offset, data);
            self.file.write(offset, data)?;
            j.push_write(offset, data);
            return Ok(());
        }
        {
            let mut ov = self.overlay.write();
            ov.write(&self.file, offset, data)?;
            self.overlay_used.store(true, Ordering::Release);
            if ov.bytes() > OVERLAY_CAP {
                ov.flush(&self.file)?;
                self.overlay_used.store(false, Ordering::Release);
            }
        }
        j.push_write(offset, data);
        Ok(())
    }

    fn close(&self) -> Result<(), io::Error> {
        // A clean close leaves an empty journal, so the next open has
        // nothing to replay, and a stopped server keeps no journal space
        // (the cut need not be durable: what it drops is already dead).
        let checkpoint = {
            let mut j = self.state();
            self.checkpoint(&mut j)
                .and_then(|()| self.journal.set_len(HEADER_LEN))
        };
        let closed = self.file.close();
        checkpoint.and(closed)
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}

/// How a journal's entries store their data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// Offset, length, then the data whole.
    V1,
    /// Offset, length, stored length, then the stored bytes; the rest of
    /// the write is zeros.
    V2,
}

/// The journal's generation and entry format, or `None` for a new or
/// unreadable header. An unreadable header can only come from a crash while
/// a checkpoint rewrote it, and a checkpoint writes the header only after
/// the shard file is durable: nothing in the journal is needed then.
fn read_header(journal: &File) -> io::Result<Option<(u64, Format)>> {
    let mut buf = [0u8; 20];
    match journal.read_exact_at(&mut buf, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let generation = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(buf[16..20].try_into().expect("4 bytes"));
    let format = match &buf[..8] {
        m if m == FILE_MAGIC => Format::V2,
        m if m == FILE_MAGIC_V1 => Format::V1,
        _ => return Ok(None),
    };
    if crc32fast::hash(&buf[..16]) != crc {
        return Ok(None);
    }
    Ok(Some((generation, format)))
}

/// Writes a header naming `generation` and makes it durable.
fn write_header(journal: &File, generation: u64) -> io::Result<()> {
    let mut buf = [0u8; 20];
    buf[..8].copy_from_slice(FILE_MAGIC);
    buf[8..16].copy_from_slice(&generation.to_le_bytes());
    let crc = crc32fast::hash(&buf[..16]);
    buf[16..20].copy_from_slice(&crc.to_le_bytes());
    journal.write_all_at(&buf, 0)?;
    journal.sync_data()
}

/// Applies the whole records of `generation` to `file`, in order; returns
/// how many there were.
fn replay(journal: &File, file: &File, generation: u64, format: Format) -> io::Result<u64> {
    let end = journal.metadata()?.len();
    let (mut pos, mut seq) = (HEADER_LEN, 0u64);
    let mut record = Vec::new();
    while pos + RECORD_HEADER as u64 <= end {
        let mut header = [0u8; RECORD_HEADER];
        journal.read_exact_at(&mut header, pos)?;
        let magic = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
        let rec_gen = u64::from_le_bytes(header[4..12].try_into().expect("8 bytes"));
        let rec_seq = u64::from_le_bytes(header[12..20].try_into().expect("8 bytes"));
        let body_len = u32::from_le_bytes(header[20..24].try_into().expect("4 bytes")) as usize;
        if magic != RECORD_MAGIC || rec_gen != generation || rec_seq != seq || body_len > MAX_BODY {
            break;
        }
        let total = RECORD_HEADER + body_len + 4;
        if pos + total as u64 > end {
            break;
        }
        record.resize(total, 0);
        journal.read_exact_at(&mut record, pos)?;
        let crc = u32::from_le_bytes(record[total - 4..].try_into().expect("4 bytes"));
        if crc32fast::hash(&record[..total - 4]) != crc {
            break;
        }
        apply(file, &record[RECORD_HEADER..total - 4], format)?;
        pos += total as u64;
        seq += 1;
    }
    Ok(seq)
}

/// Applies one record's entries to the shard file.
fn apply(file: &File, mut body: &[u8], format: Format) -> io::Result<()> {
    let corrupt = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "journal entry overruns its record",
        )
    };
    let header = match format {
        Format::V1 => ENTRY_HEADER_V1,
        Format::V2 => ENTRY_HEADER,
    };
    while !body.is_empty() {
        if body.len() < header {
            return Err(corrupt());
        }
        let offset = u64::from_le_bytes(body[0..8].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
        let kept = match format {
            Format::V1 => len,
            Format::V2 => u32::from_le_bytes(body[12..16].try_into().expect("4 bytes")),
        };
        body = &body[header..];
        if len == SET_LEN {
            file.set_len(offset)?;
            continue;
        }
        let (len, kept) = (len as usize, kept as usize);
        if body.len() < kept || kept > len {
            return Err(corrupt());
        }
        file.write_all_at(&body[..kept], offset)?;
        if kept < len {
            file.write_all_at(&vec![0; len - kept], offset + kept as u64)?;
        }
        body = &body[kept..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(byte: u8) -> Vec<u8> {
        vec![byte; 4096]
    }

    fn read_page(path: &Path, offset: u64) -> Vec<u8> {
        let mut out = vec![0; 4096];
        File::open(path)
            .unwrap()
            .read_exact_at(&mut out, offset)
            .unwrap();
        out
    }

    /// A backend on a new shard file of one page, holding `byte`s, not yet
    /// synced.
    fn one_page(byte: u8) -> (tempfile::TempDir, PathBuf, JournalBackend) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-0.redb");
        let b = JournalBackend::open(&path).unwrap();
        b.set_len(4096).unwrap();
        b.write(0, &page(byte)).unwrap();
        (dir, path, b)
    }

    /// A shard file of one page holding `byte`s, closed cleanly: the page
    /// is durable in the file and the journal is empty.
    fn closed_page(byte: u8) -> (tempfile::TempDir, PathBuf) {
        let (dir, path, b) = one_page(byte);
        b.close().unwrap();
        (dir, path)
    }

    fn open_journal(path: &Path) -> File {
        OpenOptions::new()
            .write(true)
            .open(journal_path(path))
            .unwrap()
    }

    /// Overwrites a page of the shard file behind the backend's back: what a
    /// power cut does to a write that was only in the page cache.
    fn lose_page(path: &Path, offset: u64) {
        let f = OpenOptions::new().write(true).open(path).unwrap();
        f.write_all_at(&page(0xEE), offset).unwrap();
    }

    #[test]
    fn synced_writes_survive_losing_the_shard_files_unsynced_pages() {
        let (_dir, path, b) = one_page(1);
        b.set_len(3 * 4096).unwrap();
        b.write(4096, &page(2)).unwrap();
        b.sync_data().unwrap();
        b.write(4096, &page(3)).unwrap();
        b.sync_data().unwrap();
        // No close: the process dies here, and the cache never reached disk.
        drop(b);
        lose_page(&path, 0);
        lose_page(&path, 4096);

        let b = JournalBackend::open(&path).unwrap();
        assert_eq!(b.len().unwrap(), 3 * 4096);
        assert_eq!(read_page(&path, 0), page(1));
        assert_eq!(read_page(&path, 4096), page(3), "records replay in order");
    }

    #[test]
    fn a_torn_last_record_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-0.redb");
        let b = JournalBackend::open(&path).unwrap();
        b.set_len(2 * 4096).unwrap();
        b.write(0, &page(1)).unwrap();
        b.sync_data().unwrap();
        b.write(0, &page(2)).unwrap();
        b.sync_data().unwrap();
        let end = b.state().pos;
        drop(b);
        // Cut the second record short, as a crash during its write would.
        let journal = open_journal(&path);
        journal.set_len(end - 100).unwrap();
        lose_page(&path, 0);

        let _b = JournalBackend::open(&path).unwrap();
        assert_eq!(read_page(&path, 0), page(1));
    }

    #[test]
    fn a_checkpoint_retires_the_records_it_made_durable() {
        let (_dir, path, b) = one_page(1);
        b.sync_data().unwrap();
        // Bigger than a record: made durable by syncing the shard file.
        let big = vec![2u8; MAX_BODY + 4096];
        b.set_len(big.len() as u64).unwrap();
        b.write(0, &big).unwrap();
        b.sync_data().unwrap();
        drop(b);

        // Replaying the first record now would put page(1) back.
        let b = JournalBackend::open(&path).unwrap();
        assert_eq!(read_page(&path, 0), page(2));
        assert_eq!(b.len().unwrap(), big.len() as u64);
    }

    #[test]
    fn reopening_twice_replays_nothing_stale() {
        let (_dir, path, b) = one_page(1);
        b.sync_data().unwrap();
        drop(b);
        // The first reopen replays and starts a new generation; a write made
        // durable by a clean close must not be undone by the next open.
        let b = JournalBackend::open(&path).unwrap();
        b.write(0, &page(4)).unwrap();
        b.sync_data().unwrap();
        b.close().unwrap();
        drop(b);
        let journal = File::open(journal_path(&path)).unwrap();
        assert_eq!(
            journal.metadata().unwrap().len(),
            HEADER_LEN,
            "closed empty"
        );
        let _b = JournalBackend::open(&path).unwrap();
        assert_eq!(read_page(&path, 0), page(4));
    }

    #[test]
    fn zero_tails_stay_out_of_records_and_come_back_on_replay() {
        let (_dir, path) = closed_page(1);
        let b = JournalBackend::open(&path).unwrap();
        let mut half = page(5);
        half[2048..].fill(0);
        b.write(0, &half).unwrap();
        let start = b.state().pos;
        b.sync_data().unwrap();
        let record = b.state().pos - start;
        assert!(record < 2048 + 100, "record of {record} bytes");
        drop(b);
        lose_page(&path, 0);

        let _b = JournalBackend::open(&path).unwrap();
        assert_eq!(read_page(&path, 0), half, "the zeros overwrite 0xEE");
    }

    /// A journal left by a crash of a cairn that wrote whole entries is
    /// replayed after an upgrade, not discarded.
    #[test]
    fn a_journal_of_the_first_format_is_still_replayed() {
        let (_dir, path) = closed_page(1);
        let generation = 7u64;
        let mut header = FILE_MAGIC_V1.to_vec();
        header.extend_from_slice(&generation.to_le_bytes());
        let crc = crc32fast::hash(&header);
        header.extend_from_slice(&crc.to_le_bytes());
        let mut body = 0u64.to_le_bytes().to_vec();
        body.extend_from_slice(&4096u32.to_le_bytes());
        body.extend_from_slice(&page(3));
        let mut record = RECORD_MAGIC.to_le_bytes().to_vec();
        record.extend_from_slice(&generation.to_le_bytes());
        record.extend_from_slice(&0u64.to_le_bytes());
        record.extend_from_slice(&(body.len() as u32).to_le_bytes());
        record.extend_from_slice(&body);
        let crc = crc32fast::hash(&record);
        record.extend_from_slice(&crc.to_le_bytes());
        let journal = open_journal(&path);
        journal.write_all_at(&header, 0).unwrap();
        journal.write_all_at(&record, HEADER_LEN).unwrap();

        let b = JournalBackend::open(&path).unwrap();
        assert_eq!(read_page(&path, 0), page(3));
        assert_eq!(b.state().generation, generation + 1);
        drop(b);
        assert_eq!(
            read_header(&File::open(journal_path(&path)).unwrap()).unwrap(),
            Some((generation + 1, Format::V2)),
            "the next generation is written in the current format"
        );
    }

    /// A write as big as the overlay goes straight to the file; the chunks
    /// it covers stop shadowing it, and the one it covers in part takes its
    /// part.
    #[test]
    fn a_huge_write_bypasses_the_overlay() {
        let (_dir, path, b) = one_page(1);
        let big = vec![3u8; OVERLAY_CAP];
        let len = 4096 + OVERLAY_CAP as u64;
        b.set_len(len).unwrap();
        b.write(4096, &page(2)).unwrap();
        b.write(100, &big).unwrap();
        let mut want = vec![3u8; len as usize];
        want[..100].fill(1);
        want[100 + OVERLAY_CAP..].fill(0);
        let mut got = vec![0u8; len as usize];
        b.read(0, &mut got).unwrap();
        assert!(got == want, "reads before the sync");
        b.sync_data().unwrap();
        drop(b);

        let b = JournalBackend::open(&path).unwrap();
        let mut got = vec![0u8; len as usize];
        b.read(0, &mut got).unwrap();
        assert!(got == want, "reads after reopening");
    }

    #[test]
    fn a_damaged_header_discards_the_journal() {
        let (_dir, path) = closed_page(1);
        let journal = open_journal(&path);
        journal.write_all_at(b"garbage!", 0).unwrap();
        let b = JournalBackend::open(&path).unwrap();
        assert_eq!(b.state().generation, 1);
        assert_eq!(
            journal.metadata().unwrap().len(),
            20,
            "old records are gone"
        );
        assert_eq!(read_page(&path, 0), page(1));
    }

    #[test]
    fn reads_see_writes_the_shard_file_has_not_had_yet() {
        let (_dir, path, b) = one_page(1);
        b.set_len(4 * 4096).unwrap();
        b.write(4096, &page(2)).unwrap();
        // Part of a chunk only the file holds, and part of one the overlay
        // holds.
        b.write(3 * 4096 + 10, &[7; 20]).unwrap();
        b.write(4096 + 100, &[9; 50]).unwrap();
        let mut want = vec![0u8; 4 * 4096];
        want[..4096].fill(1);
        want[4096..8192].fill(2);
        want[4196..4246].fill(9);
        want[12298..12318].fill(7);
        let mut out = vec![0u8; 4 * 4096];
        b.read(0, &mut out).unwrap();
        assert!(out == want, "one read across overlay and file");
        let mut mid = vec![0u8; 300];
        b.read(4096 - 150, &mut mid).unwrap();
        assert!(
            mid[..] == want[4096 - 150..4096 + 150],
            "a read across chunks"
        );

        // Cut and grown again, the file reads zeros past the cut.
        b.set_len(4096 + 200).unwrap();
        b.set_len(4 * 4096).unwrap();
        want[4096 + 200..].fill(0);
        b.read(0, &mut out).unwrap();
        assert!(out == want, "truncated overlay");

        b.close().unwrap();
        let mut on_disk = vec![0u8; 4 * 4096];
        File::open(&path)
            .unwrap()
            .read_exact_at(&mut on_disk, 0)
            .unwrap();
        assert!(
            on_disk == want,
            "a checkpoint hands the overlay to the file"
        );
    }

    /// Random writes, syncs and checkpoints, then a simulated power cut
    /// that keeps, reverts to the last checkpoint, or tears each page the
    /// shard file got since its last fdatasync. After reopening, every page
    /// last written before the last sync holds exactly what it held then.
    /// Pages end in zero runs of varying length, as B-tree pages do, so the
    /// records leave those out.
    #[test]
    fn power_cuts_keep_every_synced_page() {
        const PAGES: u64 = 32;
        // Page contents by number: `byte` over a length that grows with it.
        let filled = |byte: u8| {
            let mut p = page(0);
            p[..byte as usize * 16].fill(byte);
            p
        };
        let mut rand = crate::util::test_rng(0x9E37_79B9_7F4A_7C15u64);
        for round in 0..40 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("shard-0.redb");
            let b = JournalBackend::open(&path).unwrap();
            b.set_len(PAGES * 4096).unwrap();
            b.sync_data().unwrap();
            let mut current = vec![0u8; PAGES as usize];
            let mut at_sync = current.clone();
            let mut at_checkpoint = current.clone();
            let mut since_sync = std::collections::BTreeSet::new();
            let mut since_checkpoint = std::collections::BTreeSet::new();
            let mut generation = b.state().generation;
            for _ in 0..rand(60) {
                match rand(10) {
                    0..=6 => {
                        let p = rand(PAGES);
                        let byte = 1 + rand(250) as u8;
                        b.write(p * 4096, &filled(byte)).unwrap();
                        current[p as usize] = byte;
                        since_sync.insert(p);
                        since_checkpoint.insert(p);
                    }
                    7 => {
                        // More than a record holds: synced by a checkpoint.
                        let byte = 1 + rand(250) as u8;
                        let big = vec![byte; MAX_BODY + 4096];
                        b.set_len(PAGES * 4096 + big.len() as u64).unwrap();
                        b.write(PAGES * 4096, &big).unwrap();
                    }
                    _ => {
                        b.sync_data().unwrap();
                        at_sync = current.clone();
                        since_sync.clear();
                        if b.state().generation != generation {
                            generation = b.state().generation;
                            at_checkpoint = current.clone();
                            since_checkpoint.clear();
                        }
                    }
                }
            }
            drop(b);
            // The power cut: the shard file holds its last checkpoint plus
            // any subset of the writes since, some of them torn.
            for &p in &since_checkpoint {
                match rand(3) {
                    0 => {}
                    1 => {
                        let f = OpenOptions::new().write(true).open(&path).unwrap();
                        f.write_all_at(&filled(at_checkpoint[p as usize]), p * 4096)
                            .unwrap();
                    }
                    _ => lose_page(&path, p * 4096),
                }
            }
            let _b = JournalBackend::open(&path).unwrap();
            for p in 0..PAGES {
                if since_sync.contains(&p) {
                    continue;
                }
                // Compared by a bool, so a failure prints one line.
                let want = at_sync[p as usize];
                let got = read_page(&path, p * 4096);
                assert!(
                    got == filled(want),
                    "round {round}, page {p}: want {want}, got {} .. {}",
                    got[0],
                    got[4095]
                );
            }
        }
    }

    #[test]
    fn redb_reopens_what_it_committed_through_the_journal() {
        use redb::{ReadableDatabase, ReadableTableMetadata};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-0.redb");
        const T: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("t");
        {
            let db = redb::Database::builder()
                .create_with_backend(JournalBackend::open(&path).unwrap())
                .unwrap();
            for i in 0..50u64 {
                let txn = db.begin_write().unwrap();
                txn.open_table(T).unwrap().insert(i, i * 10).unwrap();
                txn.commit().unwrap();
            }
        }
        let db = redb::Database::builder()
            .create_with_backend(JournalBackend::open(&path).unwrap())
            .unwrap();
        let txn = db.begin_read().unwrap();
        let t = txn.open_table(T).unwrap();
        assert_eq!(t.len().unwrap(), 50);
        assert_eq!(t.get(49).unwrap().unwrap().value(), 490);
    }
}

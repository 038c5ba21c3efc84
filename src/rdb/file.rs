//! RDB files (version 10, what Redis 7.0 writes): writing a point-in-time
//! snapshot of every shard (SAVE, BGSAVE, SYNC), and reading one as a
//! stream of keys (import), with the CRC-64 trailer checked.
//!
//! Layout: `REDIS0010`, auxiliary fields, function libraries, then per
//! database a SELECTDB opcode and its keys (each optionally preceded by an
//! expiry), then EOF and the CRC-64 of everything before it.

use std::io::{Read, Write};

use super::keys;
use super::object::{self, BadData, Limits, Value};
use crate::families::Fail;
use crate::storage::keyspace::Key;
use crate::storage::tables::DATABASES;
use crate::storage::{KvRead, StoreError};
use crate::util::rdb::{crc64_update, put_len, put_string, Reader, RDB_VERSION};

/// Opcodes between keys.
mod op {
    pub const FUNCTION2: u8 = 245;
    pub const FUNCTION_PRE_GA: u8 = 246;
    pub const MODULE_AUX: u8 = 247;
    pub const IDLE: u8 = 248;
    pub const FREQ: u8 = 249;
    pub const AUX: u8 = 250;
    pub const RESIZEDB: u8 = 251;
    pub const EXPIRETIME_MS: u8 = 252;
    pub const EXPIRETIME: u8 = 253;
    pub const SELECTDB: u8 = 254;
    pub const EOF: u8 = 255;
}

/// Why a snapshot could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// Reading the shards failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Writing the file failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// What a save wrote.
#[derive(Debug, Default, Clone, Copy)]
pub struct SaveStats {
    /// Keys written.
    pub keys: u64,
    /// Bytes written.
    pub bytes: u64,
}

/// Writes RDB opcodes and values, keeping the running CRC-64.
struct Out<W: Write> {
    w: W,
    crc: u64,
    bytes: u64,
    buf: Vec<u8>,
}

impl<W: Write> Out<W> {
    fn emit(&mut self) -> std::io::Result<()> {
        self.crc = crc64_update(self.crc, &self.buf);
        self.bytes += self.buf.len() as u64;
        self.w.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

/// Writes a snapshot of every database to `w`: `views` are consistent
/// readers of every shard, `functions` the library sources.
pub fn write_snapshot<W: Write>(
    views: &[&dyn KvRead],
    functions: &[Vec<u8>],
    limits: &Limits,
    w: W,
) -> Result<SaveStats, SaveError> {
    let mut out = Out {
        w,
        crc: 0,
        bytes: 0,
        buf: Vec::with_capacity(64 * 1024),
    };
    out.buf
        .extend_from_slice(format!("REDIS{RDB_VERSION:04}").as_bytes());
    let ctime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let used = crate::families::info::rss_bytes();
    for (k, v) in [
        ("redis-ver", "7.0.15".to_string()),
        ("redis-bits", "64".to_string()),
        ("ctime", ctime.to_string()),
        ("used-mem", used.to_string()),
        ("aof-base", "0".to_string()),
    ] {
        out.buf.push(op::AUX);
        put_string(&mut out.buf, k.as_bytes());
        put_string(&mut out.buf, v.as_bytes());
    }
    for code in functions {
        out.buf.push(op::FUNCTION2);
        put_string(&mut out.buf, code);
    }
    out.emit()?;
    let mut stats = SaveStats::default();
    for db in 0..DATABASES as u8 {
        let mut selected = false;
        for view in views {
            let now = view.now_ms();
            keys::each_key(*view, db, |name, meta| -> Result<(), SaveError> {
                if meta.is_expired(now) {
                    return Ok(());
                }
                // The scanned row is the key's metadata: no second lookup.
                let stored = match keys::read_meta(*view, Key::new(db, name), meta) {
                    Ok(s) => s,
                    Err(Fail::Store(e)) => return Err(e.into()),
                    Err(Fail::Reply(_)) => return Ok(()),
                };
                if !selected {
                    out.buf.push(op::SELECTDB);
                    put_len(&mut out.buf, db as u64);
                    selected = true;
                }
                if stored.expire_ms != 0 {
                    out.buf.push(op::EXPIRETIME_MS);
                    out.buf.extend_from_slice(&stored.expire_ms.to_le_bytes());
                }
                put_key(&mut out.buf, name, &stored.value, limits);
                stats.keys += 1;
                if out.buf.len() >= 64 * 1024 {
                    out.emit()?;
                }
                Ok(())
            })?;
        }
    }
    out.buf.push(op::EOF);
    out.emit()?;
    let crc = out.crc;
    out.w.write_all(&crc.to_le_bytes())?;
    out.w.flush()?;
    stats.bytes = out.bytes + 8;
    Ok(stats)
}

/// A key entry: the value's type byte, the key, then the value's body.
fn put_key(buf: &mut Vec<u8>, name: &[u8], value: &Value, limits: &Limits) {
    let mut v = Vec::new();
    object::encode(&mut v, value, limits);
    buf.push(v[0]);
    put_string(buf, name);
    buf.extend_from_slice(&v[1..]);
}

/// One thing an RDB file holds.
#[derive(Debug)]
pub enum Item {
    /// A key with its database, value and absolute expiry (0 = none).
    Key {
        /// Database index.
        db: u8,
        /// The key.
        key: Vec<u8>,
        /// Its value.
        value: Value,
        /// Expiry in Unix ms, 0 = none.
        expire_ms: u64,
    },
    /// A function library's source.
    Function(Vec<u8>),
}

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Not an RDB file, or a version this reader does not know.
    #[error("not an RDB file of a known version: {0}")]
    Header(String),
    /// The file ends early or holds something malformed.
    #[error("bad RDB file at byte {at}: {what}")]
    Bad {
        /// Offset where reading failed.
        at: u64,
        /// What was wrong.
        what: &'static str,
    },
    /// The CRC-64 trailer does not match.
    #[error("RDB file checksum mismatch")]
    Checksum,
}

/// Reads an RDB file as a sequence of [`Item`]s.
pub struct Loader<R: Read> {
    r: Reader<R>,
    version: u32,
    db: u8,
    done: bool,
}

impl<R: Read> Loader<R> {
    /// Checks the header.
    pub fn new(src: R) -> Result<Loader<R>, LoadError> {
        let mut r = Reader::new(src);
        r.track_crc();
        let magic = r
            .array::<9>()
            .ok_or_else(|| LoadError::Header("shorter than its header".into()))?;
        if &magic[..5] != b"REDIS" {
            return Err(LoadError::Header("wrong signature".into()));
        }
        let version: u32 = std::str::from_utf8(&magic[5..])
            .ok()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| LoadError::Header("bad version".into()))?;
        if !(1..=RDB_VERSION as u32).contains(&version) {
            return Err(LoadError::Header(format!(
                "can't handle RDB format version {version}"
            )));
        }
        Ok(Loader {
            r,
            version,
            db: 0,
            done: false,
        })
    }

    /// Bytes read so far.
    pub fn consumed(&self) -> u64 {
        self.r.consumed()
    }

    fn bad(&self, what: &'static str) -> LoadError {
        LoadError::Bad {
            at: self.r.consumed(),
            what,
        }
    }

    /// The next item, `None` at the end (after the checksum is verified).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Item>, LoadError> {
        if self.done {
            return Ok(None);
        }
        let mut expire_ms = 0u64;
        loop {
            let Some(t) = self.r.byte() else {
                return Err(self.bad("truncated"));
            };
            match t {
                op::EOF => {
                    self.done = true;
                    // Files before version 5 carry no checksum.
                    if self.version >= 5 {
                        let computed = self.r.crc().unwrap_or(0);
                        let stored = self.r.array::<8>().ok_or_else(|| self.bad("no checksum"))?;
                        let stored = u64::from_le_bytes(stored);
                        // A zero checksum means the writer did not compute one.
                        if stored != 0 && stored != computed {
                            return Err(LoadError::Checksum);
                        }
                    }
                    return Ok(None);
                }
                op::SELECTDB => {
                    let db = self.r.length().ok_or_else(|| self.bad("bad SELECTDB"))?;
                    if db >= DATABASES as u64 {
                        return Err(self.bad("database index out of range"));
                    }
                    self.db = db as u8;
                }
                op::RESIZEDB => {
                    self.r.length().ok_or_else(|| self.bad("bad RESIZEDB"))?;
                    self.r.length().ok_or_else(|| self.bad("bad RESIZEDB"))?;
                }
                op::AUX => {
                    self.r.string().ok_or_else(|| self.bad("bad AUX field"))?;
                    self.r.string().ok_or_else(|| self.bad("bad AUX field"))?;
                }
                op::EXPIRETIME_MS => {
                    let b = self.r.array::<8>().ok_or_else(|| self.bad("bad expiry"))?;
                    expire_ms = u64::from_le_bytes(b);
                }
                op::EXPIRETIME => {
                    let b = self.r.array::<4>().ok_or_else(|| self.bad("bad expiry"))?;
                    expire_ms = u32::from_le_bytes(b) as u64 * 1000;
                }
                op::IDLE => {
                    self.r.length().ok_or_else(|| self.bad("bad IDLE"))?;
                }
                op::FREQ => {
                    self.r.byte().ok_or_else(|| self.bad("bad FREQ"))?;
                }
                op::FUNCTION2 => {
                    let code = self.r.string().ok_or_else(|| self.bad("bad function"))?;
                    return Ok(Some(Item::Function(code)));
                }
                op::FUNCTION_PRE_GA => return Err(self.bad("pre-release function format")),
                op::MODULE_AUX => return Err(self.bad("module data (no modules here)")),
                ty => {
                    let key = self.r.string().ok_or_else(|| self.bad("truncated key"))?;
                    let value =
                        object::decode(ty, &mut self.r).map_err(|BadData(what)| self.bad(what))?;
                    return Ok(Some(Item::Key {
                        db: self.db,
                        key,
                        value,
                        expire_ms,
                    }));
                }
            }
        }
    }
}

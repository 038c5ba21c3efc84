//! A slot's stored rows, as CLUSTER MOVESLOT sends them from one node to
//! another: each key's `meta` row, then (for a collection) its `sub` and
//! `zscore` rows, in key order, cut into frames the target applies one
//! transaction each.
//!
//! Rows travel relative to their collection version: the target writes
//! them under a version of its own (versions are per shard file, so the
//! source's could name dead rows there). A collection bigger than a frame
//! arrives over several transactions; until its last row is in, its
//! version is held in `gc` (see `keyspace::hold_version`), so an import
//! cut short leaves nothing behind, even across a crash. The target
//! rebuilds everything derived from the rows (the `ttl` index, key
//! counts) through the keyspace functions every command uses.
//!
//! The frame format is cairn's own and only ever read by the same build
//! family: a sequence of records, each a tag byte then `u32`-length-
//! prefixed fields.

use crate::storage::encoding::{self, Meta, MetaBody};
use crate::storage::keyspace::{self, Key};
use crate::storage::{KvRead, StoreError, Table, WriteCtx};

/// A key's `meta` row follows: `name`, `row`. A collection's rows come
/// after it, then [`END`].
const KEY: u8 = 1;
/// One `sub` row of the current collection: the part after its version
/// prefix, and its value.
const SUB: u8 = 2;
/// One `zscore` row of the current collection: the part after its
/// version prefix.
const ZSCORE: u8 = 3;
/// The current collection is complete.
const END: u8 = 4;
/// A key that no longer exists on the source: `name`.
const DELETE: u8 = 5;
/// A `zscore` row with a value (the sign of a -0 score, see
/// `encoding::zscore_value`): the part after its version prefix, and the
/// value. A tag of its own keeps [`ZSCORE`] records as they were.
const ZSCORE_VALUED: u8 = 6;

/// How many bytes of records a frame holds before it is sent: small
/// enough that applying one on the target is a transaction of a few ms.
pub const FRAME_BYTES: usize = 64 * 1024;

/// Builds frames and hands each full one to `send`, which answers false
/// when nobody takes them any more (the move failed).
pub struct Framer<F: FnMut(Vec<u8>) -> bool> {
    buf: Vec<u8>,
    send: F,
    /// `send` refused a frame: stop reading.
    pub closed: bool,
}

impl<F: FnMut(Vec<u8>) -> bool> Framer<F> {
    /// A framer handing frames to `send`.
    pub fn new(send: F) -> Framer<F> {
        Framer {
            buf: Vec::with_capacity(FRAME_BYTES + 1024),
            send,
            closed: false,
        }
    }

    fn record(&mut self, tag: u8, fields: &[&[u8]]) {
        self.buf.push(tag);
        for f in fields {
            self.buf.extend_from_slice(&(f.len() as u32).to_be_bytes());
            self.buf.extend_from_slice(f);
        }
        if self.buf.len() >= FRAME_BYTES {
            self.flush();
        }
    }

    /// Sends what is buffered, if anything.
    pub fn flush(&mut self) {
        if !self.buf.is_empty() && !self.closed {
            let frame = std::mem::replace(&mut self.buf, Vec::with_capacity(FRAME_BYTES + 1024));
            self.closed = !(self.send)(frame);
        }
    }
}

/// Writes every live key of `slot` (database 0) in `r` to `out`, in key
/// order. Meant for a blocking thread: it reads a snapshot, never the
/// shard's actor.
pub fn read_slot<F: FnMut(Vec<u8>) -> bool>(
    r: &dyn KvRead,
    slot: u16,
    out: &mut Framer<F>,
) -> Result<(), StoreError> {
    let prefix = encoding::meta_slot_prefix(0, slot);
    let end = encoding::prefix_successor(&prefix);
    // A page of `meta` rows at a time: a key's own rows are read between
    // pages, not from inside the scan.
    keyspace::scan_pages(r, Table::Meta, (&prefix, end.as_deref()), &mut |page| {
        for (k, row) in page {
            let Some((_, _, name)) = encoding::decode_meta_key(&k) else {
                continue;
            };
            write_key(r, slot, name, &row, out)?;
            if out.closed {
                return Ok(false);
            }
        }
        Ok(true)
    })?;
    if out.closed {
        return Ok(());
    }
    out.flush();
    Ok(())
}

/// Writes the keys `names` of `slot` as they are in `r`: each one's rows,
/// or its deletion if it is gone (the keys written since an earlier copy).
pub fn read_keys<F: FnMut(Vec<u8>) -> bool>(
    r: &dyn KvRead,
    slot: u16,
    names: &[Vec<u8>],
    out: &mut Framer<F>,
) -> Result<(), StoreError> {
    for name in names {
        match r.get(Table::Meta, &encoding::meta_key(0, slot, name))? {
            Some(row) => write_key(r, slot, name, &row, out)?,
            None => out.record(DELETE, &[name]),
        }
        if out.closed {
            return Ok(());
        }
    }
    out.flush();
    Ok(())
}

/// One key's records: its `meta` row, and a collection's rows after it.
/// A key already expired goes as a deletion.
fn write_key<F: FnMut(Vec<u8>) -> bool>(
    r: &dyn KvRead,
    slot: u16,
    name: &[u8],
    row: &[u8],
    out: &mut Framer<F>,
) -> Result<(), StoreError> {
    let meta = Meta::decode(row)?;
    if meta.is_expired(r.now_ms()) {
        out.record(DELETE, &[name]);
        return Ok(());
    }
    out.record(KEY, &[name, row]);
    if meta.version().is_none() {
        return Ok(());
    }
    let key = Key { db: 0, slot, name };
    keyspace::scan_version(r, key, &meta, &mut |t, suffix, v| {
        match t {
            Table::Sub => out.record(SUB, &[suffix, v]),
            _ if v.is_empty() => out.record(ZSCORE, &[suffix]),
            _ => out.record(ZSCORE_VALUED, &[suffix, v]),
        }
        !out.closed
    })?;
    out.record(END, &[]);
    Ok(())
}

/// A slot being received from another node (the target's side).
#[derive(Debug)]
pub struct Import {
    /// The node sending it.
    pub source: String,
    /// The collection whose rows are arriving, if one is.
    pending: Option<Pending>,
    /// Keys written so far.
    pub keys: u64,
}

/// A collection received in part.
#[derive(Debug)]
struct Pending {
    name: Vec<u8>,
    /// Its metadata, with the version its rows are written under here.
    meta: Meta,
    /// The version prefix of its rows here.
    prefix: Vec<u8>,
    /// It had expired here by the time it came: its rows go to garbage.
    dead: bool,
}

impl Import {
    /// A fresh import from `source`.
    pub fn new(source: String) -> Import {
        Import {
            source,
            pending: None,
            keys: 0,
        }
    }

    /// Whether a collection is received in part.
    pub fn in_key(&self) -> bool {
        self.pending.is_some()
    }

    /// Gives up a collection received in part: its rows become garbage.
    pub fn abandon(&mut self, w: &mut WriteCtx, slot: u16) -> Result<(), StoreError> {
        if let Some(p) = self.pending.take() {
            let version = p.meta.version().unwrap_or(0);
            let k = Key {
                db: 0,
                slot,
                name: &p.name,
            };
            keyspace::settle_version(w, k, p.meta.ktype, version, false)?;
        }
        Ok(())
    }

    /// Applies one frame in `w`. `Ok(Err(_))`: the frame is malformed;
    /// what it held before the fault is applied.
    pub fn apply(
        &mut self,
        w: &mut WriteCtx,
        slot: u16,
        frame: &[u8],
    ) -> Result<Result<(), &'static str>, StoreError> {
        let mut at = 0;
        while at < frame.len() {
            let tag = frame[at];
            at += 1;
            let fields = match tag {
                KEY | SUB | ZSCORE_VALUED => 2,
                ZSCORE | DELETE => 1,
                END => 0,
                _ => return Ok(Err("unknown record")),
            };
            let mut got: [&[u8]; 2] = [&[], &[]];
            for slot_field in got.iter_mut().take(fields) {
                let Some(len) = frame.get(at..at + 4) else {
                    return Ok(Err("truncated record"));
                };
                let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
                let Some(field) = frame.get(at + 4..at + 4 + len) else {
                    return Ok(Err("truncated record"));
                };
                *slot_field = field;
                at += 4 + len;
            }
            let [a, b] = got;
            if let Err(e) = self.record(w, slot, tag, a, b)? {
                return Ok(Err(e));
            }
        }
        Ok(Ok(()))
    }

    fn record(
        &mut self,
        w: &mut WriteCtx,
        slot: u16,
        tag: u8,
        a: &[u8],
        b: &[u8],
    ) -> Result<Result<(), &'static str>, StoreError> {
        if matches!(tag, KEY | DELETE) && self.pending.is_some() {
            return Ok(Err("a key began inside another"));
        }
        match tag {
            KEY | DELETE => {
                if crate::cluster::key_slot(a) != slot {
                    return Ok(Err("a key of another slot"));
                }
                let k = Key {
                    db: 0,
                    slot,
                    name: a,
                };
                // The source's version of the key replaces whatever is here.
                if let Some(old) = keyspace::lookup_for_write(w, k)? {
                    keyspace::delete(w, k, &old)?;
                    if tag == DELETE {
                        w.event(crate::pubsub::notify::GENERIC, "del", k);
                    }
                }
                if tag == DELETE {
                    return Ok(Ok(()));
                }
                let mut meta = Meta::decode(b)?;
                let dead = meta.is_expired(w.now_ms());
                let MetaBody::Collection { version, .. } = &mut meta.body else {
                    if !dead {
                        keyspace::store(w, k, None, &meta)?;
                        w.event(crate::pubsub::notify::GENERIC, "restore", k);
                        self.keys += 1;
                    }
                    return Ok(Ok(()));
                };
                *version = w.new_version();
                let v = *version;
                keyspace::hold_version(w, k, meta.ktype, v)?;
                self.pending = Some(Pending {
                    name: a.to_vec(),
                    prefix: encoding::version_prefix(0, slot, a, v),
                    meta,
                    dead,
                });
            }
            SUB | ZSCORE | ZSCORE_VALUED => {
                let Some(p) = &self.pending else {
                    return Ok(Err("a row outside a key"));
                };
                let mut row = Vec::with_capacity(p.prefix.len() + a.len());
                row.extend_from_slice(&p.prefix);
                row.extend_from_slice(a);
                let table = if tag == SUB {
                    Table::Sub
                } else {
                    Table::ZScore
                };
                w.put(table, &row, b)?;
            }
            _ => {
                let Some(p) = self.pending.take() else {
                    return Ok(Err("the end of no key"));
                };
                let k = Key {
                    db: 0,
                    slot,
                    name: &p.name,
                };
                let version = p.meta.version().unwrap_or(0);
                keyspace::settle_version(w, k, p.meta.ktype, version, !p.dead)?;
                if !p.dead {
                    keyspace::store(w, k, None, &p.meta)?;
                    w.event(crate::pubsub::notify::GENERIC, "restore", k);
                    self.keys += 1;
                }
            }
        }
        Ok(Ok(()))
    }
}

/// Deletes up to `limit` keys of `slot` (database 0) in `w`, as DEL would
/// (a collection in O(1), its rows left to the collector); how many went.
/// The slot is emptied by calling this until it answers 0.
pub fn drop_keys(w: &mut WriteCtx, slot: u16, limit: usize) -> Result<usize, StoreError> {
    let prefix = encoding::meta_slot_prefix(0, slot);
    let end = encoding::prefix_successor(&prefix);
    let mut names = Vec::new();
    w.scan(Table::Meta, &prefix, end.as_deref(), false, &mut |k, _| {
        if let Some((_, _, name)) = encoding::decode_meta_key(k) {
            names.push(name.to_vec());
        }
        names.len() < limit
    })?;
    for name in &names {
        let k = Key { db: 0, slot, name };
        // Expired ones go too, reported as expired by the lookup.
        w.delete_reported(k)?;
    }
    Ok(names.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::encoding::KeyType;
    use crate::storage::tables::{commit_direct, scratch_file};

    /// A collection's row: table, key after the version prefix, value.
    type Row = (Table, Vec<u8>, Vec<u8>);

    /// Every row of `key` in `r`, with its version prefix cut off.
    fn rows_of(r: &dyn KvRead, name: &[u8]) -> (Meta, Vec<Row>) {
        let slot = crate::cluster::key_slot(name);
        let raw = r
            .get(Table::Meta, &encoding::meta_key(0, slot, name))
            .unwrap()
            .unwrap();
        let meta = Meta::decode(&raw).unwrap();
        let mut out = Vec::new();
        if let Some(v) = meta.version() {
            let prefix = encoding::version_prefix(0, slot, name, v);
            let end = encoding::prefix_successor(&prefix);
            for t in [Table::Sub, Table::ZScore] {
                r.scan(t, &prefix, end.as_deref(), false, &mut |k, v| {
                    out.push((t, k[prefix.len()..].to_vec(), v.to_vec()));
                    true
                })
                .unwrap();
            }
        }
        (meta, out)
    }

    /// A slot read into small frames and applied on another file gives the
    /// same keys, rows and expiries, under the target's own versions; a
    /// deletion record removes a key there.
    #[test]
    fn a_slot_round_trips_through_frames() {
        let dir = tempfile::tempdir().unwrap();
        let (src, mut src_state) = scratch_file(&dir.path().join("src.redb"));
        let (dst, mut dst_state) = scratch_file(&dir.path().join("dst.redb"));
        let names: [&[u8]; 3] = [b"{t}s", b"{t}z", b"{t}h"];
        let slot = crate::cluster::key_slot(b"t");
        commit_direct(&src, &mut src_state, 0, |w| {
            let k = Key {
                db: 0,
                slot,
                name: names[0],
            };
            keyspace::store(w, k, None, &Meta::string(b"v".to_vec(), 9_000)).unwrap();
            for (i, (name, ktype)) in [(names[1], KeyType::ZSet), (names[2], KeyType::Hash)]
                .into_iter()
                .enumerate()
            {
                let version = w.new_version() + 7 * i as u64;
                let prefix = encoding::version_prefix(0, slot, name, version);
                for m in 0..3000u32 {
                    let member = format!("m{m}").into_bytes();
                    w.put(
                        Table::Sub,
                        &encoding::sub_key(&prefix, &member),
                        &m.to_be_bytes(),
                    )
                    .unwrap();
                    if ktype == KeyType::ZSet {
                        // The first member's -0 goes with its sign.
                        let score = if m == 0 { -0.0 } else { f64::from(m) - 0.5 };
                        let z = encoding::zscore_key(&prefix, score, &member);
                        w.put(Table::ZScore, &z, encoding::zscore_value(score))
                            .unwrap();
                    }
                }
                let meta = Meta {
                    form: crate::storage::encoding::StringForm::Fresh,
                    ktype,
                    expire_ms: 0,
                    body: MetaBody::Collection {
                        version,
                        size: 3000,
                        extra: Vec::new(),
                    },
                };
                keyspace::store(w, Key { db: 0, slot, name }, None, &meta).unwrap();
            }
        });
        let mut frames = Vec::new();
        commit_direct(&src, &mut src_state, 0, |w| {
            let mut out = Framer::new(|f| {
                frames.push(f);
                true
            });
            read_slot(w, slot, &mut out).unwrap();
        });
        assert!(frames.len() > 1, "a collection spans frames");
        let mut import = Import::new("src".into());
        for f in &frames {
            commit_direct(&dst, &mut dst_state, 0, |w| {
                import.apply(w, slot, f).unwrap().unwrap();
            });
        }
        assert!(!import.in_key());
        assert_eq!(import.keys, 3);
        commit_direct(&src, &mut src_state, 0, |s| {
            commit_direct(&dst, &mut dst_state, 0, |d| {
                for name in names {
                    let (mut a, ra) = rows_of(s, name);
                    let (mut b, rb) = rows_of(d, name);
                    assert_eq!(ra, rb);
                    // Only the versions differ.
                    for m in [&mut a, &mut b] {
                        if let MetaBody::Collection { version, .. } = &mut m.body {
                            *version = 0;
                        }
                    }
                    assert_eq!(a, b);
                }
                assert_eq!(d.state.counts[0].keys, 3);
                assert_eq!(d.state.counts[0].expires, 1);
            });
        });
        // The string is gone at the source: resending it deletes it there.
        let mut frames = Vec::new();
        commit_direct(&src, &mut src_state, 0, |w| {
            let k = Key {
                db: 0,
                slot,
                name: names[0],
            };
            keyspace::delete_if_live(w, k).unwrap();
            let mut out = Framer::new(|f| {
                frames.push(f);
                true
            });
            read_keys(w, slot, &[names[0].to_vec()], &mut out).unwrap();
        });
        commit_direct(&dst, &mut dst_state, 0, |w| {
            import.apply(w, slot, &frames[0]).unwrap().unwrap();
            assert_eq!(w.state.counts[0].keys, 2);
            assert!(w
                .get(Table::Meta, &encoding::meta_key(0, slot, names[0]))
                .unwrap()
                .is_none());
        });
    }
}

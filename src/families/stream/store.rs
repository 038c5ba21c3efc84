//! How a stream lives on the `sub` rows of its key's version.
//!
//! Every sub-key starts with a tag byte, so entries can never be confused
//! with the bookkeeping rows (kvrocks put groups after the largest possible
//! entry id under a bare 0xFF.. prefix; a tag byte makes the split exact):
//!
//! | sub-key | value |
//! |---|---|
//! | `00 id:16` | an entry: its node's master id, then the field/value pairs |
//! | `FF 00 master_id:16` | a node: live, deleted and approximate byte counts |
//! | `FF 01 glen:u32 group` | a consumer group: last id, entries read, counts |
//! | `FF 02 glen:u32 group id:16` | the group's pending entry: time, count, consumer |
//! | `FF 03 glen:u32 group consumer` | a consumer: seen time, pending count |
//! | `FF 04 glen:u32 group clen:u32 consumer id:16` | the consumer's pending entry |
//!
//! Ids are 16 big-endian bytes, so row order is id order. A group name is
//! length-prefixed, so group "a" never covers group "ab"'s rows; consumer
//! rows end with the bare name so they sort by name, as Redis lists them.
//!
//! Nodes stand in for Redis's listpack macro-nodes: an entry joins the last
//! node until that node holds 100 entries (live or deleted) or about 4 KiB,
//! Redis's defaults. Approximate trimming (`~`) removes whole nodes only, and
//! XINFO reports radix-tree figures from them, so both match Redis.

use bytes::Bytes;

use super::id::StreamId;
use crate::families::{wrongtype, Fail};
use crate::storage::encoding::{self, MetaBody};
use crate::storage::keyspace::{self, Key};
use crate::storage::{KeyType, KvRead, Meta, StoreError, Table, WriteCtx};

const ENTRY: u8 = 0x00;
const AUX: u8 = 0xFF;
const NODE: u8 = 0x00;
const GROUP: u8 = 0x01;
const PEL: u8 = 0x02;
const CONSUMER: u8 = 0x03;
const CONSUMER_PEL: u8 = 0x04;

/// The largest node Redis builds whatever stream-node-max-bytes says
/// (STREAM_LISTPACK_MAX_SIZE), also its limit when the setting is 0.
const NODE_BYTES_CAP: u64 = 1 << 30;

/// `entries_read` of a group whose position in the stream is unknown.
pub const ENTRIES_READ_UNKNOWN: i64 = -1;

/// Field/value pairs of one entry.
pub type Fields = Vec<(Bytes, Bytes)>;

/// An entry: its id and pairs.
pub type Entry = (StreamId, Fields);

/// The stream-wide counters kept in the key's metadata row.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    /// The last id ever added (or set by XSETID).
    pub last_id: StreamId,
    /// The largest id ever deleted by XDEL.
    pub max_deleted: StreamId,
    /// Entries ever added.
    pub entries_added: u64,
    /// Number of consumer groups.
    pub groups: u64,
    /// Number of nodes.
    pub nodes: u64,
    /// The last node (master id and counts). It lives here, in the
    /// metadata row every XADD rewrites anyway, rather than in a row of its
    /// own: appending then costs no node lookup or write. Earlier nodes
    /// have rows.
    pub tail: Option<(StreamId, Node)>,
}

impl Counters {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(72 + NODE_LEN);
        out.extend_from_slice(&self.last_id.to_bytes());
        out.extend_from_slice(&self.max_deleted.to_bytes());
        out.extend_from_slice(&self.entries_added.to_be_bytes());
        out.extend_from_slice(&self.groups.to_be_bytes());
        out.extend_from_slice(&self.nodes.to_be_bytes());
        if let Some((master, node)) = &self.tail {
            out.extend_from_slice(&master.to_bytes());
            out.extend_from_slice(&node.encode());
        }
        out
    }

    fn decode(b: &[u8]) -> Counters {
        if b.len() < 56 {
            return Counters::default();
        }
        Counters {
            last_id: StreamId::from_bytes(&b[0..16]),
            max_deleted: StreamId::from_bytes(&b[16..32]),
            entries_added: u64_at(b, 32),
            groups: u64_at(b, 40),
            nodes: u64_at(b, 48),
            tail: (b.len() >= 72 + NODE_LEN).then(|| {
                (
                    StreamId::from_bytes(&b[56..72]),
                    Node::decode(&b[72..72 + NODE_LEN]),
                )
            }),
        }
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// A node's counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Node {
    /// Entries still in the stream.
    pub live: u64,
    /// Entries deleted from it.
    pub dead: u64,
    /// Approximate size in Redis's listpack encoding.
    pub bytes: u64,
    /// The last id appended to it, deleted or not: what Redis's MINID
    /// trimming compares, since a listpack keeps its deleted entries.
    pub last: StreamId,
}

/// Bytes of an encoded [`Node`].
const NODE_LEN: usize = 40;

impl Node {
    fn encode(&self) -> [u8; NODE_LEN] {
        let mut out = [0u8; NODE_LEN];
        out[..8].copy_from_slice(&self.live.to_be_bytes());
        out[8..16].copy_from_slice(&self.dead.to_be_bytes());
        out[16..24].copy_from_slice(&self.bytes.to_be_bytes());
        out[24..].copy_from_slice(&self.last.to_bytes());
        out
    }

    fn decode(b: &[u8]) -> Node {
        Node {
            live: u64_at(b, 0),
            dead: u64_at(b, 8),
            bytes: u64_at(b, 16),
            last: StreamId::from_bytes(&b[24..40]),
        }
    }
}

/// A consumer group's state.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Group {
    /// Last id delivered to the group.
    pub last_id: StreamId,
    /// Entries the group has read, or [`ENTRIES_READ_UNKNOWN`].
    pub entries_read: i64,
    /// Pending entries.
    pub pending: u64,
    /// Consumers.
    pub consumers: u64,
}

impl Group {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(40);
        out.extend_from_slice(&self.last_id.to_bytes());
        out.extend_from_slice(&self.entries_read.to_be_bytes());
        out.extend_from_slice(&self.pending.to_be_bytes());
        out.extend_from_slice(&self.consumers.to_be_bytes());
        out
    }

    fn decode(b: &[u8]) -> Group {
        Group {
            last_id: StreamId::from_bytes(&b[0..16]),
            entries_read: u64_at(b, 16) as i64,
            pending: u64_at(b, 24),
            consumers: u64_at(b, 32),
        }
    }
}

/// A consumer's state.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Consumer {
    /// When it last read or claimed (Unix ms).
    pub seen_ms: u64,
    /// Its pending entries.
    pub pending: u64,
}

impl Consumer {
    fn encode(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.seen_ms.to_be_bytes());
        out[8..].copy_from_slice(&self.pending.to_be_bytes());
        out
    }

    fn decode(b: &[u8]) -> Consumer {
        Consumer {
            seen_ms: u64_at(b, 0),
            pending: u64_at(b, 8),
        }
    }
}

/// A pending entry of a group (Redis's NACK).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Nack {
    /// Last delivery (Unix ms).
    pub delivery_ms: u64,
    /// Times delivered.
    pub deliveries: u64,
    /// The consumer it was delivered to.
    pub consumer: Vec<u8>,
}

impl Nack {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.consumer.len());
        out.extend_from_slice(&self.delivery_ms.to_be_bytes());
        out.extend_from_slice(&self.deliveries.to_be_bytes());
        out.extend_from_slice(&self.consumer);
        out
    }

    fn decode(b: &[u8]) -> Nack {
        Nack {
            delivery_ms: u64_at(b, 0),
            deliveries: u64_at(b, 8),
            consumer: b[16..].to_vec(),
        }
    }
}

fn encode_entry(master: StreamId, fields: &[(Bytes, Bytes)]) -> Vec<u8> {
    let size: usize = fields.iter().map(|(f, v)| 8 + f.len() + v.len()).sum();
    let mut out = Vec::with_capacity(20 + size);
    out.extend_from_slice(&master.to_bytes());
    out.extend_from_slice(&(fields.len() as u32).to_be_bytes());
    for (f, v) in fields {
        out.extend_from_slice(&(f.len() as u32).to_be_bytes());
        out.extend_from_slice(f);
        out.extend_from_slice(&(v.len() as u32).to_be_bytes());
        out.extend_from_slice(v);
    }
    out
}

fn decode_entry(b: &[u8]) -> (StreamId, Fields) {
    let master = StreamId::from_bytes(&b[..16]);
    let n = u32::from_be_bytes(b[16..20].try_into().unwrap()) as usize;
    let mut at = 20;
    let mut take = || {
        let len = u32::from_be_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        let s = Bytes::copy_from_slice(&b[at + 4..at + 4 + len]);
        at += 4 + len;
        s
    };
    let mut fields = Vec::with_capacity(n);
    for _ in 0..n {
        let f = take();
        let v = take();
        fields.push((f, v));
    }
    (master, fields)
}

/// Approximate listpack size of a string element.
fn lp_str(len: usize) -> u64 {
    len as u64
        + match len {
            0..=63 => 2,
            64..=4095 => 4,
            _ => 10,
        }
}

/// A live stream: its sub-key prefix, length and counters. Loaded for
/// reading or writing; a writer stores it back with [`Stream::save`].
pub struct Stream {
    /// Prefix of its sub-keys.
    pub prefix: Vec<u8>,
    /// Number of entries.
    pub len: u64,
    /// Stream-wide counters.
    pub c: Counters,
    meta: Meta,
    stored: Option<Meta>,
}

/// The stream at `key` if there is one (WRONGTYPE for another type).
pub fn load(r: &dyn KvRead, key: Key) -> Result<Option<Stream>, Fail> {
    from_meta(keyspace::lookup(r, key)?, key)
}

/// The stream at `key` for writing.
pub fn load_for_write(w: &mut WriteCtx, key: Key) -> Result<Option<Stream>, Fail> {
    from_meta(keyspace::lookup_for_write(w, key)?, key)
}

/// The stream described by `m`, the live metadata of `key` already read
/// (`None` if there is no key; WRONGTYPE for another type).
pub fn from_meta(m: Option<Meta>, key: Key) -> Result<Option<Stream>, Fail> {
    let Some(m) = m else { return Ok(None) };
    if m.ktype != KeyType::Stream {
        return Err(wrongtype());
    }
    let MetaBody::Collection {
        version,
        size,
        ref extra,
    } = m.body
    else {
        return Err(wrongtype());
    };
    Ok(Some(Stream {
        prefix: encoding::version_prefix(key.db, key.slot, key.name, version),
        len: size,
        c: Counters::decode(extra),
        stored: Some(m.clone()),
        meta: m,
    }))
}

/// A new, empty stream under a fresh version (stored by `save`).
pub fn create(w: &mut WriteCtx, key: Key) -> Stream {
    let version = w.new_version();
    let meta = Meta {
        form: crate::storage::encoding::StringForm::Fresh,
        ktype: KeyType::Stream,
        expire_ms: 0,
        body: MetaBody::Collection {
            version,
            size: 0,
            extra: Vec::new(),
        },
    };
    Stream {
        prefix: encoding::version_prefix(key.db, key.slot, key.name, version),
        len: 0,
        c: Counters::default(),
        meta,
        stored: None,
    }
}

impl Stream {
    /// Sets the expiry `save` will store (RESTORE of a stream with a TTL).
    pub fn set_expire(&mut self, expire_ms: u64) {
        self.meta.expire_ms = expire_ms;
    }

    /// Writes the metadata back. Unlike other collections a stream may be
    /// empty and still exist (XDEL of every entry, XGROUP CREATE MKSTREAM).
    pub fn save(mut self, w: &mut WriteCtx, key: Key) -> Result<(), StoreError> {
        if let MetaBody::Collection { size, extra, .. } = &mut self.meta.body {
            *size = self.len;
            *extra = self.c.encode();
        }
        keyspace::store(w, key, self.stored.as_ref(), &self.meta)
    }

    fn row(&self, parts: &[&[u8]]) -> Vec<u8> {
        let n: usize = parts.iter().map(|p| p.len()).sum();
        let mut out = Vec::with_capacity(self.prefix.len() + n);
        out.extend_from_slice(&self.prefix);
        for p in parts {
            out.extend_from_slice(p);
        }
        out
    }

    fn entry_key(&self, id: StreamId) -> Vec<u8> {
        self.row(&[&[ENTRY], &id.to_bytes()])
    }

    fn group_part(group: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + group.len());
        out.extend_from_slice(&(group.len() as u32).to_be_bytes());
        out.extend_from_slice(group);
        out
    }

    // ---- entries ----

    /// One entry's pairs.
    pub fn entry(&self, r: &dyn KvRead, id: StreamId) -> Result<Option<Fields>, StoreError> {
        Ok(r.get(Table::Sub, &self.entry_key(id))?
            .map(|v| decode_entry(&v).1))
    }

    /// Whether an entry exists.
    pub fn has_entry(&self, r: &dyn KvRead, id: StreamId) -> Result<bool, StoreError> {
        Ok(r.get(Table::Sub, &self.entry_key(id))?.is_some())
    }

    /// Entries with ids in `[start, end]`, ascending or (`rev`) descending,
    /// at most `count` of them (0 = all).
    pub fn range(
        &self,
        r: &dyn KvRead,
        start: StreamId,
        end: StreamId,
        rev: bool,
        count: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let mut out = Vec::new();
        let Some((from, to)) = id_span(&self.row(&[&[ENTRY]]), start, end) else {
            return Ok(out);
        };
        let n = self.prefix.len() + 1;
        r.scan(Table::Sub, &from, Some(&to), rev, &mut |k, v| {
            out.push((StreamId::from_bytes(&k[n..]), decode_entry(v).1));
            count == 0 || out.len() < count
        })?;
        Ok(out)
    }

    /// Like [`Stream::range`], but the entries go straight into an encoded
    /// reply (`[[id, [field, value...]]...]`) without decoding them into
    /// values first; also returns how many there were.
    pub fn range_reply(
        &self,
        r: &dyn KvRead,
        start: StreamId,
        end: StreamId,
        rev: bool,
        count: usize,
    ) -> Result<(usize, crate::protocol::Reply), StoreError> {
        // Room for the array's header in front (see `Encoder::array_body`).
        let mut enc = crate::protocol::reply::Encoder::array_body();
        let mut n = 0;
        if let Some((from, to)) = id_span(&self.row(&[&[ENTRY]]), start, end) {
            let at = self.prefix.len() + 1;
            let mut id_text = String::new();
            r.scan(Table::Sub, &from, Some(&to), rev, &mut |k, v| {
                use std::fmt::Write;
                enc.array(2);
                id_text.clear();
                let _ = write!(id_text, "{}", StreamId::from_bytes(&k[at..]));
                enc.bulk(id_text.as_bytes());
                let pairs = u32::from_be_bytes(v[16..20].try_into().unwrap()) as usize;
                enc.array(pairs * 2);
                let mut p = 20;
                for _ in 0..pairs * 2 {
                    let len = u32::from_be_bytes(v[p..p + 4].try_into().unwrap()) as usize;
                    enc.bulk(&v[p + 4..p + 4 + len]);
                    p += 4 + len;
                }
                n += 1;
                count == 0 || n < count
            })?;
        }
        Ok((n, enc.into_array(n)))
    }

    /// The first or last entry's id.
    pub fn edge_id(&self, r: &dyn KvRead, last: bool) -> Result<Option<StreamId>, StoreError> {
        let from = self.row(&[&[ENTRY]]);
        let to = self.row(&[&[ENTRY + 1]]);
        let n = self.prefix.len() + 1;
        let mut found = None;
        r.scan(Table::Sub, &from, Some(&to), last, &mut |k, _| {
            found = Some(StreamId::from_bytes(&k[n..]));
            false
        })?;
        Ok(found)
    }

    /// Nodes in id order with their master ids, at most `limit` (0 = all).
    pub fn nodes(&self, r: &dyn KvRead, limit: usize) -> Result<Vec<(StreamId, Node)>, StoreError> {
        let from = self.row(&[&[AUX, NODE]]);
        let to = self.row(&[&[AUX, NODE + 1]]);
        let n = from.len();
        let mut out = Vec::new();
        r.scan(Table::Sub, &from, Some(&to), false, &mut |k, v| {
            out.push((StreamId::from_bytes(&k[n..]), Node::decode(v)));
            limit == 0 || out.len() < limit
        })?;
        if limit == 0 || out.len() < limit {
            out.extend(self.c.tail);
        }
        Ok(out)
    }

    fn is_tail(&self, master: StreamId) -> bool {
        self.c.tail.is_some_and(|(m, _)| m == master)
    }

    fn node_row(&self, master: StreamId) -> Vec<u8> {
        self.row(&[&[AUX, NODE], &master.to_bytes()])
    }

    /// A node's counts (the tail's from the metadata).
    fn node(&self, r: &dyn KvRead, master: StreamId) -> Result<Option<Node>, StoreError> {
        if self.is_tail(master) {
            return Ok(self.c.tail.map(|(_, n)| n));
        }
        Ok(r.get(Table::Sub, &self.node_row(master))?
            .map(|v| Node::decode(&v)))
    }

    fn put_node(
        &mut self,
        w: &mut WriteCtx,
        master: StreamId,
        node: &Node,
    ) -> Result<(), StoreError> {
        if self.is_tail(master) {
            self.c.tail = Some((master, *node));
            return Ok(());
        }
        w.put(Table::Sub, &self.node_row(master), &node.encode())
    }

    fn del_node(&mut self, w: &mut WriteCtx, master: StreamId) -> Result<(), StoreError> {
        if self.is_tail(master) {
            self.c.tail = None;
        } else {
            w.del(Table::Sub, &self.node_row(master))?;
        }
        self.c.nodes -= 1;
        Ok(())
    }

    /// Appends an entry with id `id` (greater than every id so far). The
    /// tail node takes it unless it is full by `limits`
    /// (stream-node-max-bytes and stream-node-max-entries, 0 = no limit,
    /// as Redis reads them when it appends).
    pub fn append(
        &mut self,
        w: &mut WriteCtx,
        id: StreamId,
        fields: &[(Bytes, Bytes)],
        limits: &crate::rdb::stream::NodeLimits,
    ) -> Result<(), StoreError> {
        let payload: u64 = fields.iter().map(|(f, v)| (f.len() + v.len()) as u64).sum();
        let max_bytes = match limits.max_bytes as u64 {
            0 => NODE_BYTES_CAP,
            b => b.min(NODE_BYTES_CAP),
        };
        let max_entries = limits.max_entries as u64;
        let (master, mut node) = match self.c.tail {
            Some((m, n))
                if n.bytes + payload < max_bytes
                    && (max_entries == 0 || n.live + n.dead < max_entries) =>
            {
                (m, n)
            }
            full => {
                // The full tail gets a row of its own; the new node is the tail.
                if let Some((m, n)) = full {
                    w.put(Table::Sub, &self.node_row(m), &n.encode())?;
                }
                self.c.nodes += 1;
                // Listpack header, counters and the master entry's fields.
                let master_fields: u64 = fields.iter().map(|(f, _)| lp_str(f.len())).sum();
                let node = Node {
                    live: 0,
                    dead: 0,
                    bytes: 7 + 8 + master_fields,
                    last: id,
                };
                self.c.tail = Some((id, node));
                (id, node)
            }
        };
        node.live += 1;
        node.last = id;
        node.bytes += 8 + fields.iter().map(|(_, v)| lp_str(v.len())).sum::<u64>();
        self.put_node(w, master, &node)?;
        w.put(
            Table::Sub,
            &self.entry_key(id),
            &encode_entry(master, fields),
        )?;
        self.len += 1;
        self.c.last_id = id;
        self.c.entries_added += 1;
        Ok(())
    }

    /// Deletes one entry; false if there was none.
    pub fn delete(&mut self, w: &mut WriteCtx, id: StreamId) -> Result<bool, StoreError> {
        let key = self.entry_key(id);
        let Some(raw) = w.get(Table::Sub, &key)? else {
            return Ok(false);
        };
        w.del(Table::Sub, &key)?;
        let master = StreamId::from_bytes(&raw[..16]);
        if let Some(mut node) = self.node(w, master)? {
            node.live -= 1;
            node.dead += 1;
            if node.live == 0 {
                // Redis frees a node once nothing in it is live.
                self.del_node(w, master)?;
            } else {
                self.put_node(w, master, &node)?;
            }
        }
        self.len -= 1;
        Ok(true)
    }

    /// Trims from the oldest end (XTRIM, XADD MAXLEN/MINID), as Redis does:
    /// whole nodes go while they can; then, unless `approx`, entries one by
    /// one inside the first node that must stay. `limit` (0 = none) caps
    /// the entries removed by whole nodes. Returns how many went.
    pub fn trim(
        &mut self,
        w: &mut WriteCtx,
        how: Trim,
        approx: bool,
        limit: u64,
    ) -> Result<u64, StoreError> {
        let mut deleted = 0u64;
        loop {
            if let Trim::MaxLen(max) = how {
                if self.len <= max {
                    break;
                }
            }
            let nodes = self.nodes(w, 2)?;
            let Some(&(master, mut node)) = nodes.first() else {
                break;
            };
            if limit != 0 && deleted + node.live > limit {
                break;
            }
            let end = match nodes.get(1) {
                Some((next, _)) => self.entry_key(*next),
                None => self.row(&[&[ENTRY + 1]]),
            };
            let remove = match how {
                Trim::MaxLen(max) => self.len - node.live >= max,
                // Redis compares the node's last entry, deleted or not.
                Trim::MinId(min) => node.last < min,
            };
            if remove {
                w.del_range(Table::Sub, &self.entry_key(master), Some(&end), usize::MAX)?;
                self.del_node(w, master)?;
                self.len -= node.live;
                deleted += node.live;
                continue;
            }
            if approx {
                break;
            }
            let n = self.prefix.len() + 1;
            let mut doomed = Vec::new();
            let mut left = self.len;
            w.scan(
                Table::Sub,
                &self.entry_key(master),
                Some(&end),
                false,
                &mut |k, _| {
                    let id = StreamId::from_bytes(&k[n..]);
                    let stop = match how {
                        Trim::MaxLen(max) => left <= max,
                        Trim::MinId(min) => id >= min,
                    };
                    if !stop {
                        doomed.push(k.to_vec());
                        left -= 1;
                    }
                    !stop
                },
            )?;
            for k in &doomed {
                w.del(Table::Sub, k)?;
            }
            let gone = doomed.len() as u64;
            node.live -= gone;
            node.dead += gone;
            self.put_node(w, master, &node)?;
            self.len -= gone;
            deleted += gone;
            break;
        }
        Ok(deleted)
    }

    // ---- consumer groups ----

    fn group_key(&self, group: &[u8]) -> Vec<u8> {
        self.row(&[&[AUX, GROUP], &Self::group_part(group)])
    }

    /// A group by name.
    pub fn group(&self, r: &dyn KvRead, name: &[u8]) -> Result<Option<Group>, StoreError> {
        Ok(r.get(Table::Sub, &self.group_key(name))?
            .map(|v| Group::decode(&v)))
    }

    /// Every group, by name.
    pub fn groups(&self, r: &dyn KvRead) -> Result<Vec<(Vec<u8>, Group)>, StoreError> {
        let from = self.row(&[&[AUX, GROUP]]);
        let to = self.row(&[&[AUX, GROUP + 1]]);
        let n = from.len() + 4;
        let mut out = Vec::new();
        r.scan(Table::Sub, &from, Some(&to), false, &mut |k, v| {
            out.push((k[n..].to_vec(), Group::decode(v)));
            true
        })?;
        // Stored by (length, name); Redis lists groups by name.
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Stores a new group.
    pub fn create_group(
        &mut self,
        w: &mut WriteCtx,
        name: &[u8],
        g: &Group,
    ) -> Result<(), StoreError> {
        self.c.groups += 1;
        self.write_group(w, name, g)
    }

    /// Writes an existing group's state.
    pub fn write_group(&self, w: &mut WriteCtx, name: &[u8], g: &Group) -> Result<(), StoreError> {
        w.put(Table::Sub, &self.group_key(name), &g.encode())
    }

    /// Deletes a group with its consumers and pending entries.
    pub fn destroy_group(&mut self, w: &mut WriteCtx, name: &[u8]) -> Result<(), StoreError> {
        w.del(Table::Sub, &self.group_key(name))?;
        let g = Self::group_part(name);
        for tag in [PEL, CONSUMER, CONSUMER_PEL] {
            let from = self.row(&[&[AUX, tag], &g]);
            let to = encoding::prefix_successor(&from);
            w.del_range(Table::Sub, &from, to.as_deref(), usize::MAX)?;
        }
        self.c.groups -= 1;
        Ok(())
    }

    fn consumer_key(&self, group: &[u8], consumer: &[u8]) -> Vec<u8> {
        self.row(&[&[AUX, CONSUMER], &Self::group_part(group), consumer])
    }

    /// A consumer of a group.
    pub fn consumer(
        &self,
        r: &dyn KvRead,
        group: &[u8],
        name: &[u8],
    ) -> Result<Option<Consumer>, StoreError> {
        Ok(r.get(Table::Sub, &self.consumer_key(group, name))?
            .map(|v| Consumer::decode(&v)))
    }

    /// Every consumer of a group, by name.
    pub fn consumers(
        &self,
        r: &dyn KvRead,
        group: &[u8],
    ) -> Result<Vec<(Vec<u8>, Consumer)>, StoreError> {
        let from = self.row(&[&[AUX, CONSUMER], &Self::group_part(group)]);
        let to = encoding::prefix_successor(&from);
        let n = from.len();
        let mut out = Vec::new();
        r.scan(Table::Sub, &from, to.as_deref(), false, &mut |k, v| {
            out.push((k[n..].to_vec(), Consumer::decode(v)));
            true
        })?;
        Ok(out)
    }

    /// Writes a consumer.
    pub fn put_consumer(
        &self,
        w: &mut WriteCtx,
        group: &[u8],
        name: &[u8],
        c: &Consumer,
    ) -> Result<(), StoreError> {
        w.put(Table::Sub, &self.consumer_key(group, name), &c.encode())
    }

    /// Deletes a consumer row (its pending entries are the caller's).
    pub fn del_consumer(
        &self,
        w: &mut WriteCtx,
        group: &[u8],
        name: &[u8],
    ) -> Result<(), StoreError> {
        w.del(Table::Sub, &self.consumer_key(group, name))?;
        Ok(())
    }

    fn pel_key(&self, group: &[u8], id: StreamId) -> Vec<u8> {
        self.row(&[&[AUX, PEL], &Self::group_part(group), &id.to_bytes()])
    }

    fn consumer_pel_prefix(&self, group: &[u8], consumer: &[u8]) -> Vec<u8> {
        let mut c = Vec::with_capacity(4 + consumer.len());
        c.extend_from_slice(&(consumer.len() as u32).to_be_bytes());
        c.extend_from_slice(consumer);
        self.row(&[&[AUX, CONSUMER_PEL], &Self::group_part(group), &c])
    }

    /// A pending entry of a group.
    pub fn nack(
        &self,
        r: &dyn KvRead,
        group: &[u8],
        id: StreamId,
    ) -> Result<Option<Nack>, StoreError> {
        Ok(r.get(Table::Sub, &self.pel_key(group, id))?
            .map(|v| Nack::decode(&v)))
    }

    /// Writes a pending entry and its consumer's index row (the caller
    /// keeps the counts and removes a previous owner's index row).
    pub fn put_nack(
        &self,
        w: &mut WriteCtx,
        group: &[u8],
        id: StreamId,
        nack: &Nack,
    ) -> Result<(), StoreError> {
        w.put(Table::Sub, &self.pel_key(group, id), &nack.encode())?;
        let mut k = self.consumer_pel_prefix(group, &nack.consumer);
        k.extend_from_slice(&id.to_bytes());
        w.put(Table::Sub, &k, &[])
    }

    /// Removes a pending entry and its consumer's index row.
    pub fn del_nack(
        &self,
        w: &mut WriteCtx,
        group: &[u8],
        id: StreamId,
        consumer: &[u8],
    ) -> Result<(), StoreError> {
        w.del(Table::Sub, &self.pel_key(group, id))?;
        self.unindex_nack(w, group, id, consumer)
    }

    /// Removes only a consumer's index row of a pending entry (the entry
    /// moves to another consumer).
    pub fn unindex_nack(
        &self,
        w: &mut WriteCtx,
        group: &[u8],
        id: StreamId,
        consumer: &[u8],
    ) -> Result<(), StoreError> {
        let mut k = self.consumer_pel_prefix(group, consumer);
        k.extend_from_slice(&id.to_bytes());
        w.del(Table::Sub, &k)?;
        Ok(())
    }

    /// A group's pending entries with ids in `[start, end]`; `visit`
    /// returns false to stop.
    pub fn pending(
        &self,
        r: &dyn KvRead,
        group: &[u8],
        start: StreamId,
        end: StreamId,
        rev: bool,
        visit: &mut dyn FnMut(StreamId, Nack) -> bool,
    ) -> Result<(), StoreError> {
        let prefix = self.row(&[&[AUX, PEL], &Self::group_part(group)]);
        let Some((from, to)) = id_span(&prefix, start, end) else {
            return Ok(());
        };
        let n = prefix.len();
        r.scan(Table::Sub, &from, Some(&to), rev, &mut |k, v| {
            visit(StreamId::from_bytes(&k[n..]), Nack::decode(v))
        })
    }

    /// The ids pending for one consumer in `[start, end]`, at most `count`
    /// (0 = all).
    pub fn consumer_pending(
        &self,
        r: &dyn KvRead,
        group: &[u8],
        consumer: &[u8],
        start: StreamId,
        end: StreamId,
        count: usize,
    ) -> Result<Vec<StreamId>, StoreError> {
        let mut out = Vec::new();
        let prefix = self.consumer_pel_prefix(group, consumer);
        let Some((from, to)) = id_span(&prefix, start, end) else {
            return Ok(out);
        };
        let n = prefix.len();
        r.scan(Table::Sub, &from, Some(&to), false, &mut |k, _| {
            out.push(StreamId::from_bytes(&k[n..]));
            count == 0 || out.len() < count
        })?;
        Ok(out)
    }

    // ---- logical read counters (entries-read and lag) ----

    /// Whether an XDEL tombstone may lie in `[start, end]`.
    fn has_tombstones(
        &self,
        r: &dyn KvRead,
        start: StreamId,
        end: StreamId,
    ) -> Result<bool, StoreError> {
        if self.len == 0 || self.c.max_deleted.is_zero() {
            return Ok(false);
        }
        let first = self.edge_id(r, false)?.unwrap_or_default();
        if first > self.c.max_deleted {
            return Ok(false);
        }
        Ok(start <= self.c.max_deleted && self.c.max_deleted <= end)
    }

    /// How many entries were ever added up to and including `id`, when
    /// that can be known (Redis's estimate from the first-ever entry).
    pub fn entries_up_to(&self, r: &dyn KvRead, id: StreamId) -> Result<Option<i64>, StoreError> {
        let added = self.c.entries_added as i64;
        if added == 0 {
            return Ok(Some(0));
        }
        if self.len == 0 && id <= self.c.last_id {
            return Ok(Some(added));
        }
        match id.cmp(&self.c.last_id) {
            std::cmp::Ordering::Equal => return Ok(Some(added)),
            std::cmp::Ordering::Greater => return Ok(None),
            std::cmp::Ordering::Less => {}
        }
        let first = self.edge_id(r, false)?.unwrap_or_default();
        if self.c.max_deleted.is_zero() || self.c.max_deleted < first {
            match id.cmp(&first) {
                std::cmp::Ordering::Less => return Ok(Some(added - self.len as i64)),
                std::cmp::Ordering::Equal => return Ok(Some(added - self.len as i64 + 1)),
                std::cmp::Ordering::Greater => {}
            }
        }
        Ok(None)
    }

    /// A group's lag: entries added after its position, or `None` when it
    /// cannot be known.
    pub fn lag(&self, r: &dyn KvRead, g: &Group) -> Result<Option<i64>, StoreError> {
        let added = self.c.entries_added as i64;
        if added == 0 {
            return Ok(Some(0));
        }
        if g.entries_read != ENTRIES_READ_UNKNOWN
            && !self.has_tombstones(r, g.last_id, StreamId::MAX)?
        {
            return Ok(Some(added - g.entries_read));
        }
        Ok(self.entries_up_to(r, g.last_id)?.map(|read| added - read))
    }

    /// Moves a group's position past `id` as a delivery does, keeping its
    /// read counter when it can.
    pub fn advance_group(
        &self,
        r: &dyn KvRead,
        g: &mut Group,
        id: StreamId,
    ) -> Result<(), StoreError> {
        if id <= g.last_id {
            return Ok(());
        }
        if g.entries_read != ENTRIES_READ_UNKNOWN && !self.has_tombstones(r, id, StreamId::MAX)? {
            g.entries_read += 1;
        } else if self.c.entries_added != 0 {
            g.entries_read = self.entries_up_to(r, id)?.unwrap_or(ENTRIES_READ_UNKNOWN);
        }
        g.last_id = id;
        Ok(())
    }

    /// Radix-tree figures Redis reports for its node tree: (keys, nodes).
    /// Keys are the nodes; the node count is that of a radix tree holding
    /// their 16-byte master ids.
    pub fn radix_figures(&self, r: &dyn KvRead) -> Result<(u64, u64), StoreError> {
        let keys: Vec<[u8; 16]> = self
            .nodes(r, 0)?
            .into_iter()
            .map(|(m, _)| m.to_bytes())
            .collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        Ok((keys.len() as u64, radix_nodes(&refs)))
    }
}

/// How to trim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trim {
    /// Keep at most this many entries.
    MaxLen(u64),
    /// Keep only entries with ids at least this.
    MinId(StreamId),
}

/// Nodes of a compressed radix tree (Redis's rax) holding `keys`, sorted
/// and distinct: one node per run of shared bytes or branch point, one per
/// key end, and always the head.
fn radix_nodes(keys: &[&[u8]]) -> u64 {
    fn count(keys: &[&[u8]]) -> u64 {
        // `keys` share this node; an empty key ends here.
        let rest: Vec<&[u8]> = keys.iter().copied().filter(|k| !k.is_empty()).collect();
        if rest.is_empty() {
            return 1;
        }
        let ends_here = rest.len() != keys.len();
        let first = rest[0][0];
        if !ends_here && rest.iter().all(|k| k[0] == first) {
            // A compressed node: the common run, then its child.
            let lcp = rest.iter().fold(rest[0].len(), |acc, k| {
                acc.min(k.iter().zip(rest[0]).take_while(|(a, b)| a == b).count())
            });
            let tails: Vec<&[u8]> = rest.iter().map(|k| &k[lcp..]).collect();
            return 1 + count(&tails);
        }
        // A branching node: one child per distinct next byte.
        let mut total = 1;
        let mut i = 0;
        while i < rest.len() {
            let b = rest[i][0];
            let mut j = i;
            while j < rest.len() && rest[j][0] == b {
                j += 1;
            }
            let tails: Vec<&[u8]> = rest[i..j].iter().map(|k| &k[1..]).collect();
            total += count(&tails);
            i = j;
        }
        total
    }
    count(keys)
}

/// The scan bounds `[from, to)` of the rows `prefix ‖ id` with ids in
/// `[start, end]` (entries, a group's PEL, a consumer's PEL); `None` when
/// the range is empty.
fn id_span(prefix: &[u8], start: StreamId, end: StreamId) -> Option<(Vec<u8>, Vec<u8>)> {
    if start > end {
        return None;
    }
    let at = |id: StreamId| {
        let mut k = prefix.to_vec();
        k.extend_from_slice(&id.to_bytes());
        k
    };
    let to = match end.incr() {
        Some(e) => at(e),
        None => encoding::prefix_successor(prefix).unwrap_or_default(),
    };
    Some((at(start), to))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::collection::tests::with_shard;

    fn fields(pairs: &[(&str, &str)]) -> Fields {
        pairs
            .iter()
            .map(|(f, v)| (Bytes::from(f.to_string()), Bytes::from(v.to_string())))
            .collect()
    }

    #[test]
    fn radix_node_counts() {
        assert_eq!(radix_nodes(&[]), 1);
        assert_eq!(radix_nodes(&[b"abc"]), 2);
        assert_eq!(radix_nodes(&[b"abc", b"abd"]), 4);
    }

    /// Entries, groups, consumers and pending rows of one stream are never
    /// seen or deleted through another whose name extends or shares its
    /// prefix.
    #[test]
    fn streams_sharing_prefixes_stay_apart() {
        with_shard(|w| {
            let names: [&[u8]; 3] = [b"s", b"s1", b"s\xff"];
            for name in names {
                let k = Key::new(0, name);
                let mut s = create(w, k);
                for i in 1..=3 {
                    s.append(
                        w,
                        StreamId::new(i, 0),
                        &fields(&[("f", "v")]),
                        &Default::default(),
                    )
                    .unwrap();
                }
                for g in [&b"g"[..], b"g1"] {
                    s.create_group(w, g, &Group::default()).unwrap();
                    s.put_consumer(w, g, b"c", &Consumer::default()).unwrap();
                    let nack = Nack {
                        delivery_ms: 1,
                        deliveries: 1,
                        consumer: b"c".to_vec(),
                    };
                    s.put_nack(w, g, StreamId::new(1, 0), &nack).unwrap();
                }
                s.save(w, k).unwrap();
            }
            let k = Key::new(0, b"s");
            let mut s = load_for_write(w, k).unwrap().unwrap();
            assert_eq!(
                s.range(w, StreamId::MIN, StreamId::MAX, false, 0)
                    .unwrap()
                    .len(),
                3
            );
            assert_eq!(s.edge_id(w, true).unwrap(), Some(StreamId::new(3, 0)));
            assert_eq!(s.groups(w).unwrap().len(), 2);
            s.destroy_group(w, b"g").unwrap();
            assert_eq!(s.groups(w).unwrap().len(), 1);
            // Group "g1" lost nothing to "g"'s deletion.
            assert_eq!(s.consumers(w, b"g1").unwrap().len(), 1);
            let mut seen = 0;
            s.pending(
                w,
                b"g1",
                StreamId::MIN,
                StreamId::MAX,
                false,
                &mut |_, _| {
                    seen += 1;
                    true
                },
            )
            .unwrap();
            assert_eq!(seen, 1);
            assert_eq!(s.trim(w, Trim::MaxLen(0), false, 0).unwrap(), 3);
            s.save(w, k).unwrap();
            for name in [&b"s1"[..], b"s\xff"] {
                let o = load(w, Key::new(0, name)).unwrap().unwrap();
                assert_eq!(
                    o.range(w, StreamId::MIN, StreamId::MAX, false, 0)
                        .unwrap()
                        .len(),
                    3
                );
                assert_eq!(o.groups(w).unwrap().len(), 2);
                assert_eq!(
                    o.consumer_pending(w, b"g", b"c", StreamId::MIN, StreamId::MAX, 0)
                        .unwrap()
                        .len(),
                    1
                );
            }
        });
    }

    /// Nodes fill to 100 entries; trimming with `~` removes whole nodes.
    #[test]
    fn nodes_and_approximate_trim() {
        with_shard(|w| {
            let k = Key::new(0, b"s");
            let mut s = create(w, k);
            for i in 1..=250 {
                s.append(
                    w,
                    StreamId::new(i, 0),
                    &fields(&[("f", "v")]),
                    &Default::default(),
                )
                .unwrap();
            }
            assert_eq!(s.c.nodes, 3);
            assert_eq!(s.trim(w, Trim::MaxLen(180), true, 0).unwrap(), 0);
            assert_eq!(s.trim(w, Trim::MaxLen(140), true, 0).unwrap(), 100);
            assert_eq!(s.len, 150);
            assert_eq!(
                s.trim(w, Trim::MinId(StreamId::new(160, 0)), false, 0)
                    .unwrap(),
                59
            );
            assert_eq!(s.edge_id(w, false).unwrap(), Some(StreamId::new(160, 0)));
            assert!(s.delete(w, StreamId::new(200, 0)).unwrap());
            assert!(!s.delete(w, StreamId::new(200, 0)).unwrap());
            assert_eq!(s.len, 90);
            assert_eq!(s.radix_figures(w).unwrap().0, 2);
            s.save(w, k).unwrap();
        });
    }
}

//! Streams in Redis's RDB encoding: entries packed into listpack nodes
//! keyed by their master id, then the stream's counters, then consumer
//! groups with their pending entries and consumers.
//!
//! Writing re-packs the live entries the way Redis's XADD fills nodes
//! (`stream-node-max-bytes` / `-entries`), so a stream built by XADD alone
//! serializes to Redis's bytes. Reading accepts Redis 7.0's format and the
//! one before it (no first id, tombstone id, entries-added or
//! entries-read), deriving those counters as Redis 7.0 does on load.

use super::object::BadData;
use crate::util::listpack::{self, Item};
use crate::util::rdb::{put_len, put_string, Reader};

/// A stream id (milliseconds, sequence).
pub type Id = (u64, u64);

/// An entry: its id and field/value pairs.
pub type StreamEntry = (Id, Vec<(Vec<u8>, Vec<u8>)>);

/// A whole stream.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamValue {
    /// Live entries in id order: id and field/value pairs.
    pub entries: Vec<StreamEntry>,
    /// The last id ever added (or set by XSETID).
    pub last_id: Id,
    /// The id of the first entry (0-0 when empty).
    pub first_id: Id,
    /// The largest id ever deleted.
    pub max_deleted: Id,
    /// Entries ever added.
    pub entries_added: u64,
    /// Consumer groups, by name.
    pub groups: Vec<GroupValue>,
}

/// A consumer group.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupValue {
    /// Its name.
    pub name: Vec<u8>,
    /// Last id delivered.
    pub last_id: Id,
    /// Entries read, or -1 when unknown.
    pub entries_read: i64,
    /// Pending entries in id order: id, last delivery (Unix ms), deliveries.
    pub pending: Vec<(Id, u64, u64)>,
    /// Consumers by name: name, last seen (Unix ms), the ids pending for it.
    pub consumers: Vec<(Vec<u8>, u64, Vec<Id>)>,
}

/// Node limits: Redis's `stream-node-max-bytes` and `-entries`.
#[derive(Debug, Clone, Copy)]
pub struct NodeLimits {
    /// Bytes per node (0 = no limit but the listpack's own).
    pub max_bytes: usize,
    /// Entries per node (0 = no limit).
    pub max_entries: usize,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits {
            max_bytes: 4096,
            max_entries: 100,
        }
    }
}

/// Entry flags inside a node.
const FLAG_DELETED: i64 = 1;
const FLAG_SAMEFIELDS: i64 = 2;
/// The most a listpack node may hold (Redis's STREAM_LISTPACK_MAX_SIZE).
const LISTPACK_MAX: usize = 1 << 30;

fn id_bytes(id: Id) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&id.0.to_be_bytes());
    out[8..].copy_from_slice(&id.1.to_be_bytes());
    out
}

/// A node being filled: its master entry's fields and its entries.
struct NodeBuild {
    master: Id,
    fields: Vec<Vec<u8>>,
    count: usize,
    entries: listpack::Builder,
}

impl NodeBuild {
    /// The master entry for `count` live entries.
    fn master_entry(&self, count: usize) -> listpack::Builder {
        let mut m = listpack::Builder::new();
        m.push_int(count as i64);
        m.push_int(0);
        m.push_int(self.fields.len() as i64);
        for f in &self.fields {
            m.push(f);
        }
        m.push_int(0);
        m
    }

    /// Bytes of the node's listpack as it stands.
    fn bytes(&self) -> usize {
        self.master_entry(self.count).bytes() + self.entries.bytes() - 7
    }

    fn finish(self) -> (Id, Vec<u8>) {
        let mut lp = self.master_entry(self.count);
        lp.append(self.entries);
        (self.master, lp.finish())
    }
}

/// Appends the body of a stream (after its type byte) in Redis 7.0's
/// format.
pub fn encode(out: &mut Vec<u8>, s: &StreamValue, limits: &NodeLimits) {
    let max_bytes = match limits.max_bytes {
        0 => LISTPACK_MAX,
        b => b.min(LISTPACK_MAX),
    };
    let mut nodes: Vec<(Id, Vec<u8>)> = Vec::new();
    let mut cur: Option<NodeBuild> = None;
    for (id, fields) in &s.entries {
        let payload: usize = fields.iter().map(|(f, v)| f.len() + v.len()).sum();
        if let Some(n) = &cur {
            let full = n.bytes() + payload >= max_bytes
                || (limits.max_entries != 0 && n.count >= limits.max_entries);
            if full {
                nodes.push(cur.take().expect("checked").finish());
            }
        }
        let n = cur.get_or_insert_with(|| NodeBuild {
            master: *id,
            fields: fields.iter().map(|(f, _)| f.clone()).collect(),
            count: 0,
            entries: listpack::Builder::new(),
        });
        let same = n.fields.len() == fields.len()
            && n.fields.iter().zip(fields).all(|(m, (f, _))| *m == *f);
        let e = &mut n.entries;
        e.push_int(if same { FLAG_SAMEFIELDS } else { 0 });
        e.push_int(id.0.wrapping_sub(n.master.0) as i64);
        e.push_int(id.1.wrapping_sub(n.master.1) as i64);
        if same {
            for (_, v) in fields {
                e.push(v);
            }
        } else {
            e.push_int(fields.len() as i64);
            for (f, v) in fields {
                e.push(f);
                e.push(v);
            }
        }
        let pieces = 3 + if same {
            fields.len()
        } else {
            1 + 2 * fields.len()
        };
        e.push_int(pieces as i64);
        n.count += 1;
    }
    nodes.extend(cur.map(NodeBuild::finish));

    put_len(out, nodes.len() as u64);
    for (master, lp) in &nodes {
        put_string(out, &id_bytes(*master));
        put_string(out, lp);
    }
    put_len(out, s.entries.len() as u64);
    put_id(out, s.last_id);
    put_id(out, s.first_id);
    put_id(out, s.max_deleted);
    put_len(out, s.entries_added);
    put_len(out, s.groups.len() as u64);
    for g in &s.groups {
        put_string(out, &g.name);
        put_id(out, g.last_id);
        put_len(out, g.entries_read as u64);
        put_len(out, g.pending.len() as u64);
        for (id, delivered, count) in &g.pending {
            out.extend_from_slice(&id_bytes(*id));
            out.extend_from_slice(&delivered.to_le_bytes());
            put_len(out, *count);
        }
        put_len(out, g.consumers.len() as u64);
        for (name, seen, ids) in &g.consumers {
            put_string(out, name);
            out.extend_from_slice(&seen.to_le_bytes());
            put_len(out, ids.len() as u64);
            for id in ids {
                out.extend_from_slice(&id_bytes(*id));
            }
        }
    }
}

fn put_id(out: &mut Vec<u8>, id: Id) {
    put_len(out, id.0);
    put_len(out, id.1);
}

/// Reads a stream body; `v2` is Redis 7.0's format (type 19), otherwise
/// the one before (type 15).
pub fn decode<R: std::io::Read>(r: &mut Reader<R>, v2: bool) -> Result<StreamValue, BadData> {
    let len = |r: &mut Reader<R>| r.length().ok_or(BadData("truncated stream"));
    let id = |r: &mut Reader<R>| -> Result<Id, BadData> { Ok((len(r)?, len(r)?)) };
    let raw_id = |r: &mut Reader<R>| -> Result<Id, BadData> {
        let b = r.array::<16>().ok_or(BadData("truncated stream id"))?;
        Ok((
            u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
            u64::from_be_bytes(b[8..].try_into().expect("8 bytes")),
        ))
    };
    let mut s = StreamValue::default();
    let nodes = len(r)?;
    for _ in 0..nodes {
        let key = r.string().ok_or(BadData("truncated stream node"))?;
        if key.len() != 16 {
            return Err(BadData("stream node key is not an id"));
        }
        let master = (
            u64::from_be_bytes(key[..8].try_into().expect("8 bytes")),
            u64::from_be_bytes(key[8..].try_into().expect("8 bytes")),
        );
        let lp = r.string().ok_or(BadData("truncated stream node"))?;
        let items = listpack::parse(&lp).ok_or(BadData("bad stream listpack"))?;
        if items.is_empty() {
            return Err(BadData("empty listpack inside stream"));
        }
        read_node(master, items, &mut s.entries)?;
    }
    let length = len(r)?;
    if length != s.entries.len() as u64 {
        return Err(BadData("stream length disagrees with its entries"));
    }
    if s.entries.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(BadData("stream entries out of order"));
    }
    s.last_id = id(r)?;
    if v2 {
        s.first_id = id(r)?;
        s.max_deleted = id(r)?;
        s.entries_added = len(r)?;
    } else {
        s.first_id = s.entries.first().map_or((0, 0), |e| e.0);
        s.entries_added = length;
    }
    let groups = len(r)?;
    for _ in 0..groups {
        let mut g = GroupValue {
            name: r.string().ok_or(BadData("truncated group"))?,
            last_id: id(r)?,
            ..GroupValue::default()
        };
        g.entries_read = if v2 {
            len(r)? as i64
        } else {
            estimate_entries_read(&s, g.last_id)
        };
        if s.groups.iter().any(|o| o.name == g.name) {
            return Err(BadData("duplicate consumer group"));
        }
        let pel = len(r)?;
        for _ in 0..pel {
            let pid = raw_id(r)?;
            let t = r.array::<8>().ok_or(BadData("truncated pending entry"))?;
            let delivered = u64::from_le_bytes(t);
            let count = len(r)?;
            if g.pending.last().is_some_and(|p| p.0 >= pid) {
                return Err(BadData("pending entries out of order"));
            }
            g.pending.push((pid, delivered, count));
        }
        let consumers = len(r)?;
        let mut owned = 0;
        for _ in 0..consumers {
            let name = r.string().ok_or(BadData("truncated consumer"))?;
            let t = r.array::<8>().ok_or(BadData("truncated consumer"))?;
            let seen = u64::from_le_bytes(t);
            let n = len(r)?;
            let mut ids = Vec::new();
            for _ in 0..n {
                let pid = raw_id(r)?;
                if g.pending.binary_search_by(|p| p.0.cmp(&pid)).is_err() {
                    return Err(BadData("consumer entry not in the group's pending list"));
                }
                if ids.contains(&pid) {
                    return Err(BadData("duplicate consumer pending entry"));
                }
                ids.push(pid);
            }
            if g.consumers.iter().any(|c| c.0 == name) {
                return Err(BadData("duplicate consumer"));
            }
            owned += ids.len();
            g.consumers.push((name, seen, ids));
        }
        // Every pending entry belongs to exactly one consumer.
        if owned != g.pending.len() {
            return Err(BadData("pending entry without a consumer"));
        }
        g.consumers.sort_by(|a, b| a.0.cmp(&b.0));
        s.groups.push(g);
    }
    s.groups.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(s)
}

/// A group's entries-read counter from its last id, for streams saved
/// before Redis 7.0 kept one (Redis 7.0's estimate on load).
fn estimate_entries_read(s: &StreamValue, last: Id) -> i64 {
    const UNKNOWN: i64 = -1;
    if s.entries_added == 0 {
        return 0;
    }
    if s.entries.is_empty() && last <= s.last_id {
        return s.entries_added as i64;
    }
    if last == s.last_id {
        return s.entries_added as i64;
    }
    if last > s.last_id {
        return UNKNOWN;
    }
    if s.max_deleted == (0, 0) || s.max_deleted < s.first_id {
        let before = s.entries_added as i64 - s.entries.len() as i64;
        if last < s.first_id {
            return before;
        }
        if last == s.first_id {
            return before + 1;
        }
    }
    UNKNOWN
}

/// Reads one node's live entries.
fn read_node(master: Id, items: Vec<Item>, out: &mut Vec<StreamEntry>) -> Result<(), BadData> {
    let bad = || BadData("bad stream node");
    let mut it = items.into_iter();
    let int = |it: &mut std::vec::IntoIter<Item>| -> Result<i64, BadData> {
        match it.next().ok_or_else(bad)? {
            Item::Int(v) => Ok(v),
            Item::Str(s) => crate::util::num::parse_i64(&s).ok_or_else(bad),
        }
    };
    let text = |it: &mut std::vec::IntoIter<Item>| -> Result<Vec<u8>, BadData> {
        Ok(it.next().ok_or_else(bad)?.into_bytes())
    };
    let live = int(&mut it)?;
    let deleted = int(&mut it)?;
    let nfields = int(&mut it)?;
    if live < 0 || deleted < 0 || nfields < 0 {
        return Err(bad());
    }
    let master_fields = (0..nfields)
        .map(|_| text(&mut it))
        .collect::<Result<Vec<_>, _>>()?;
    if int(&mut it)? != 0 {
        return Err(bad());
    }
    let (mut seen_live, mut seen_dead) = (0, 0);
    while it.len() > 0 {
        let flags = int(&mut it)?;
        let ms = master.0.wrapping_add(int(&mut it)? as u64);
        let seq = master.1.wrapping_add(int(&mut it)? as u64);
        let fields = if flags & FLAG_SAMEFIELDS != 0 {
            let mut f = Vec::with_capacity(master_fields.len());
            for name in &master_fields {
                f.push((name.clone(), text(&mut it)?));
            }
            f
        } else {
            let n = int(&mut it)?;
            if n < 0 {
                return Err(bad());
            }
            let mut f = Vec::new();
            for _ in 0..n {
                f.push((text(&mut it)?, text(&mut it)?));
            }
            f
        };
        // The trailing piece count (for walking backwards) is not needed.
        int(&mut it)?;
        if flags & FLAG_DELETED != 0 {
            seen_dead += 1;
        } else {
            seen_live += 1;
            out.push(((ms, seq), fields));
        }
    }
    if seen_live != live || seen_dead != deleted {
        return Err(bad());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StreamValue {
        let entries: Vec<StreamEntry> = (1..=230u64)
            .map(|i| {
                let mut f = vec![(b"f".to_vec(), i.to_string().into_bytes())];
                if i % 7 == 0 {
                    f.push((b"extra".to_vec(), vec![b'x'; 200]));
                }
                ((i, 0), f)
            })
            .collect();
        StreamValue {
            first_id: (1, 0),
            last_id: (230, 0),
            max_deleted: (0, 0),
            entries_added: 230,
            groups: vec![GroupValue {
                name: b"g".to_vec(),
                last_id: (3, 0),
                entries_read: 3,
                pending: vec![((2, 0), 1000, 2), ((3, 0), 2000, 1)],
                consumers: vec![
                    (b"a".to_vec(), 5, vec![(2, 0)]),
                    (b"b".to_vec(), 6, vec![(3, 0)]),
                    (b"idle".to_vec(), 7, vec![]),
                ],
            }],
            entries,
        }
    }

    #[test]
    fn round_trips() {
        let s = sample();
        let mut out = Vec::new();
        encode(&mut out, &s, &NodeLimits::default());
        let back = decode(&mut Reader::new(&out[..]), true).unwrap();
        assert_eq!(back, s);
    }

    /// The format before Redis 7.0 has no first id, tombstone, entries
    /// added or entries read: they are derived as Redis 7.0 derives them.
    #[test]
    fn reads_the_older_format() {
        let s = sample();
        let mut v2 = Vec::new();
        encode(&mut v2, &s, &NodeLimits::default());
        // Re-read the v2 body's node part, then write the v1 tail.
        let mut r = Reader::new(&v2[..]);
        let nodes = r.length().unwrap();
        let mut v1 = Vec::new();
        put_len(&mut v1, nodes);
        for _ in 0..nodes {
            put_string(&mut v1, &r.string().unwrap());
            put_string(&mut v1, &r.string().unwrap());
        }
        put_len(&mut v1, 230);
        put_id(&mut v1, (230, 0));
        put_len(&mut v1, 1);
        put_string(&mut v1, b"g");
        put_id(&mut v1, (230, 0));
        put_len(&mut v1, 0);
        put_len(&mut v1, 0);
        let back = decode(&mut Reader::new(&v1[..]), false).unwrap();
        assert_eq!(back.entries, s.entries);
        assert_eq!(back.first_id, (1, 0));
        assert_eq!(back.entries_added, 230);
        assert_eq!(back.groups[0].entries_read, 230);
    }

    #[test]
    fn refuses_orphan_pending_entries() {
        let mut s = sample();
        s.groups[0].consumers[1].2.clear();
        let mut out = Vec::new();
        encode(&mut out, &s, &NodeLimits::default());
        assert!(decode(&mut Reader::new(&out[..]), true).is_err());
    }
}

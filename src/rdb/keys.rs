//! The bridge between cairn's rows and [`Value`]: reading a live key whole,
//! and writing a value as a fresh key (new collection version, rows, then
//! the metadata row), as DUMP / RESTORE and RDB import need.

use bytes::Bytes;

use super::object::{Limits, Value};
use super::stream::{GroupValue, NodeLimits, StreamValue};
use crate::families::collection::{self, View};
use crate::families::stream::id::StreamId;
use crate::families::stream::store::{self, Consumer, Group, Nack};
use crate::families::Fail;
use crate::storage::encoding::{self, Meta, MetaBody, LIST_INITIAL_INDEX};
use crate::storage::keyspace::{self, Key};
use crate::storage::{KeyType, KvRead, StoreError, Table, WriteCtx};

/// A key read whole: its value and absolute expiry (Unix ms, 0 = none).
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    /// The value.
    pub value: Value,
    /// When it expires.
    pub expire_ms: u64,
}

/// Reads the live key `key` whole, or `None` if it does not exist.
pub fn read(r: &dyn KvRead, key: Key) -> Result<Option<Stored>, Fail> {
    match keyspace::lookup(r, key)? {
        None => Ok(None),
        Some(meta) => read_meta(r, key, meta).map(Some),
    }
}

/// Visits every key of database `db` in `r` whose metadata row is stored,
/// expired or not, in key order, with its name and metadata; stops at the
/// first error `visit` returns.
pub fn each_key<E: From<StoreError>>(
    r: &dyn KvRead,
    db: u8,
    mut visit: impl FnMut(&[u8], Meta) -> Result<(), E>,
) -> Result<(), E> {
    let start = encoding::meta_db_prefix(db);
    let end = encoding::prefix_successor(&start);
    let mut failed = None;
    r.scan(Table::Meta, &start, end.as_deref(), false, &mut |k, v| {
        let Some((_, _, name)) = encoding::decode_meta_key(k) else {
            return true;
        };
        let step = Meta::decode(v)
            .map_err(|e| E::from(e.into()))
            .and_then(|meta| visit(name, meta));
        match step {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        }
    })?;
    failed.map_or(Ok(()), Err)
}

/// Reads a key whole given its live metadata, already read by the caller
/// (a scan of every key need not look each one up again).
pub fn read_meta(r: &dyn KvRead, key: Key, meta: Meta) -> Result<Stored, Fail> {
    let expire_ms = meta.expire_ms;
    let value = match meta.ktype {
        KeyType::String => match meta.body {
            MetaBody::String(s) => Value::String(s),
            MetaBody::Collection { .. } => unreachable!("strings are inline"),
        },
        KeyType::Stream => Value::Stream(Box::new(read_stream(r, key, meta)?)),
        t => {
            let view = View::from_meta(key, &meta);
            let mut rows: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(view.size as usize);
            view.scan(r, &mut |m, v| {
                rows.push((m.to_vec(), v.to_vec()));
                true
            })?;
            match t {
                KeyType::Hash => Value::Hash(rows),
                KeyType::Set => Value::Set(rows.into_iter().map(|(m, _)| m).collect()),
                // Sub-keys of a list are big-endian indexes: scan order is
                // list order.
                KeyType::List => Value::List(rows.into_iter().map(|(_, v)| v).collect()),
                KeyType::ZSet => Value::ZSet(
                    rows.into_iter()
                        .map(|(m, v)| (m, f64::from_be_bytes(v[..8].try_into().unwrap_or([0; 8]))))
                        .collect(),
                ),
                KeyType::String | KeyType::Stream => unreachable!("handled above"),
            }
        }
    };
    Ok(Stored { value, expire_ms })
}

fn pair(id: StreamId) -> (u64, u64) {
    (id.ms, id.seq)
}

fn stream_id((ms, seq): (u64, u64)) -> StreamId {
    StreamId::new(ms, seq)
}

/// A live stream with its groups, consumers and pending entries.
fn read_stream(r: &dyn KvRead, key: Key, meta: Meta) -> Result<StreamValue, Fail> {
    let st = store::from_meta(Some(meta), key)?.expect("live stream");
    let entries = st.range(r, StreamId::MIN, StreamId::MAX, false, 0)?;
    let mut out = StreamValue {
        first_id: entries.first().map_or((0, 0), |e| pair(e.0)),
        entries: entries
            .into_iter()
            .map(|(id, fields)| {
                let fields = fields.into_iter().map(|(f, v)| (f.to_vec(), v.to_vec()));
                (pair(id), fields.collect())
            })
            .collect(),
        last_id: pair(st.c.last_id),
        max_deleted: pair(st.c.max_deleted),
        entries_added: st.c.entries_added,
        groups: Vec::new(),
    };
    for (name, g) in st.groups(r)? {
        let mut pending = Vec::new();
        st.pending(
            r,
            &name,
            StreamId::MIN,
            StreamId::MAX,
            false,
            &mut |id, n| {
                pending.push((pair(id), n.delivery_ms, n.deliveries));
                true
            },
        )?;
        let mut consumers = Vec::new();
        for (cname, c) in st.consumers(r, &name)? {
            let ids = st.consumer_pending(r, &name, &cname, StreamId::MIN, StreamId::MAX, 0)?;
            consumers.push((cname, c.seen_ms, ids.into_iter().map(pair).collect()));
        }
        out.groups.push(GroupValue {
            name,
            last_id: pair(g.last_id),
            entries_read: g.entries_read,
            pending,
            consumers,
        });
    }
    Ok(out)
}

/// Writes a stream as a new key (whatever was there is gone).
fn write_stream(
    w: &mut WriteCtx,
    key: Key,
    s: &StreamValue,
    expire_ms: u64,
    limits: &NodeLimits,
) -> Result<(), StoreError> {
    keyspace::delete_if_live(w, key)?;
    let mut st = store::create(w, key);
    for (id, fields) in &s.entries {
        let fields: Vec<(Bytes, Bytes)> = fields
            .iter()
            .map(|(f, v)| (Bytes::copy_from_slice(f), Bytes::copy_from_slice(v)))
            .collect();
        // Redis keeps a restored stream's nodes as they were dumped; cairn
        // rebuilds them, with Redis's default node limits.
        st.append(w, stream_id(*id), &fields, limits)?;
    }
    st.c.last_id = stream_id(s.last_id);
    st.c.max_deleted = stream_id(s.max_deleted);
    st.c.entries_added = s.entries_added;
    for g in &s.groups {
        let group = Group {
            last_id: stream_id(g.last_id),
            entries_read: g.entries_read,
            pending: g.pending.len() as u64,
            consumers: g.consumers.len() as u64,
        };
        st.create_group(w, &g.name, &group)?;
        for (name, seen, ids) in &g.consumers {
            let c = Consumer {
                seen_ms: *seen,
                pending: ids.len() as u64,
            };
            st.put_consumer(w, &g.name, name, &c)?;
            for id in ids {
                let i = g.pending.binary_search_by(|p| p.0.cmp(id));
                let (_, delivery_ms, deliveries) = g.pending[i.expect("checked on decode")];
                let nack = Nack {
                    delivery_ms,
                    deliveries,
                    consumer: name.clone(),
                };
                st.put_nack(w, &g.name, stream_id(*id), &nack)?;
            }
        }
    }
    st.set_expire(expire_ms);
    st.save(w, key)?;
    // Readers blocked on the key (XREAD, XREADGROUP) see it arrive.
    w.broadcasts.push((key.db, key.name.to_vec()));
    Ok(())
}

/// Writes `value` as `key` with `expire_ms`, replacing whatever is there
/// (the caller decides whether replacing is allowed). Lists and sorted
/// sets arriving wake clients blocked on the key.
/// A stream's entries are packed into nodes by `limits.stream`
/// (`stream-node-max-*`), as XADD would pack them. A set, hash or sorted
/// set too big for its compact encoding under `limits` is marked as having
/// left it, as Redis loads one in its big encoding and keeps it there.
pub fn write(
    w: &mut WriteCtx,
    key: Key,
    value: &Value,
    expire_ms: u64,
    limits: &Limits,
) -> Result<(), StoreError> {
    if let Value::Stream(s) = value {
        return write_stream(w, key, s, expire_ms, &limits.stream);
    }
    let big = matches!(
        crate::families::object::encoding_of(value, limits),
        "hashtable" | "skiplist"
    );
    let extra = || {
        if big {
            collection::CONVERTED.to_vec()
        } else {
            Vec::new()
        }
    };
    let old = keyspace::lookup_for_write(w, key)?;
    let meta = match value {
        Value::String(s) => Meta::string(s.clone(), expire_ms),
        _ => {
            let version = w.new_version();
            let prefix = encoding::version_prefix(key.db, key.slot, key.name, version);
            let sub = |suffix: &[u8]| encoding::sub_key(&prefix, suffix);
            let (ktype, size, extra) = match value {
                Value::String(_) | Value::Stream(_) => unreachable!("handled above"),
                Value::Hash(pairs) => {
                    for (f, v) in pairs {
                        w.put(Table::Sub, &sub(f), v)?;
                    }
                    if big {
                        (KeyType::Hash, pairs.len(), extra())
                    } else {
                        // A listpack keeps its fields in the order loaded.
                        let order = collection::ordered_extra(pairs.iter().map(|(f, _)| &f[..]));
                        (KeyType::Hash, pairs.len(), order)
                    }
                }
                Value::Set(members) => {
                    for m in members {
                        w.put(Table::Sub, &sub(m), &[])?;
                    }
                    (KeyType::Set, members.len(), extra())
                }
                Value::ZSet(pairs) => {
                    for (m, score) in pairs {
                        // A listpack reads -0 back as 0 (see zset.rs).
                        let score = if *score == 0.0 && !big { 0.0 } else { *score };
                        w.put(Table::Sub, &sub(m), &score.to_be_bytes())?;
                        let row = encoding::zscore_key(&prefix, score, m);
                        w.put(Table::ZScore, &row, encoding::zscore_value(score))?;
                    }
                    w.signals.push((key.db, key.name.to_vec()));
                    (KeyType::ZSet, pairs.len(), extra())
                }
                Value::List(items) => {
                    let head = LIST_INITIAL_INDEX;
                    for (i, it) in items.iter().enumerate() {
                        w.put(Table::Sub, &sub(&(head + i as u64).to_be_bytes()), it)?;
                    }
                    let mut extra = head.to_be_bytes().to_vec();
                    extra.extend_from_slice(&(head + items.len() as u64).to_be_bytes());
                    w.signals.push((key.db, key.name.to_vec()));
                    (KeyType::List, items.len(), extra)
                }
            };
            Meta {
                form: crate::storage::encoding::StringForm::Fresh,
                ktype,
                expire_ms,
                body: MetaBody::Collection {
                    version,
                    size: size as u64,
                    extra,
                },
            }
        }
    };
    keyspace::store(w, key, old.as_ref(), &meta)
}

//! The bridge between cairn's rows and [`Value`]: reading a live key whole,
//! and writing a value as a fresh key (new collection version, rows, then
//! the metadata row), as DUMP / RESTORE and RDB import need.

use super::object::Value;
use crate::families::collection::View;
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
    let Some(meta) = keyspace::lookup(r, key)? else {
        return Ok(None);
    };
    let expire_ms = meta.expire_ms;
    let value = match meta.ktype {
        KeyType::String => match meta.body {
            MetaBody::String(s) => Value::String(s),
            MetaBody::Collection { .. } => unreachable!("strings are inline"),
        },
        KeyType::Stream => return Err(Fail::Reply(stream_unsupported())),
        t => {
            let view = View::load(r, key, t)?.expect("live key");
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
    Ok(Some(Stored { value, expire_ms }))
}

/// The reply for a stream until streams travel too.
fn stream_unsupported() -> crate::protocol::Reply {
    crate::protocol::Reply::err("DUMP/RESTORE of streams is not supported by this server yet")
}

/// Writes `value` as `key` with `expire_ms`, replacing whatever is there
/// (the caller decides whether replacing is allowed). Lists and sorted
/// sets arriving wake clients blocked on the key.
pub fn write(w: &mut WriteCtx, key: Key, value: &Value, expire_ms: u64) -> Result<(), StoreError> {
    let old = keyspace::lookup_for_write(w, key)?;
    let meta = match value {
        Value::String(s) => Meta::string(s.clone(), expire_ms),
        _ => {
            let version = w.new_version();
            let prefix = encoding::version_prefix(key.db, key.slot, key.name, version);
            let sub = |suffix: &[u8]| encoding::sub_key(&prefix, suffix);
            let (ktype, size, extra) = match value {
                Value::String(_) => unreachable!("handled above"),
                Value::Hash(pairs) => {
                    for (f, v) in pairs {
                        w.put(Table::Sub, &sub(f), v)?;
                    }
                    (KeyType::Hash, pairs.len(), Vec::new())
                }
                Value::Set(members) => {
                    for m in members {
                        w.put(Table::Sub, &sub(m), &[])?;
                    }
                    (KeyType::Set, members.len(), Vec::new())
                }
                Value::ZSet(pairs) => {
                    for (m, score) in pairs {
                        // One zero, as ZADD keeps it.
                        let score = if *score == 0.0 { 0.0 } else { *score };
                        w.put(Table::Sub, &sub(m), &score.to_be_bytes())?;
                        w.put(Table::ZScore, &encoding::zscore_key(&prefix, score, m), &[])?;
                    }
                    w.signals.push((key.db, key.name.to_vec()));
                    (KeyType::ZSet, pairs.len(), Vec::new())
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

//! DEBUG OBJECT key: Redis's one-line description of a value. cairn keeps
//! no object in memory: the encoding is the one OBJECT ENCODING names, the
//! serialized length that of the value's RDB encoding (what DUMP writes),
//! the LRU fields come from the access clock behind OBJECT IDLETIME, and a
//! number stable per key stands in for the object's address.

use std::hash::{Hash, Hasher};

use crate::families::object::encoding_name;
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::rdb::object::{self, Limits, Value};
use crate::storage::keyspace::Key;
use crate::storage::{Meta, Table};
use crate::util::num::parse_i64;

/// Redis's LRU clock wraps at 24 bits of seconds.
const LRU_CLOCK_MAX: u64 = (1 << 24) - 1;
/// The reference count Redis reports for its shared small integers.
const SHARED_REFCOUNT: i32 = i32::MAX;

/// DEBUG OBJECT key
pub fn object(s: &Session, key: &bytes::Bytes) -> Action {
    let (db, name) = (s.db, key.clone());
    let limits = s.server.encoding_limits();
    let compressed = s.server.runtime.read().int("list-compress-depth") != 0;
    Action::Read {
        shard: s.shard_of(key),
        f: Box::new(move |r, server| {
            // As in Redis, a key past its expiry that is still stored shows.
            let key = Key::new(db, &name);
            let Some(row) = r.get(Table::Meta, &key.meta_key())? else {
                return Ok(Reply::err("no such key"));
            };
            let meta = Meta::decode(&row)?;
            let (limits, form) = (
                crate::families::object::limits_for(limits, &meta),
                meta.form,
            );
            let (value, _) = super::digest::with_value(r, key, meta)?;
            let idle = server.access.idle_secs(db, &name);
            let lru = (crate::shard::now_ms() / 1000).saturating_sub(idle) & LRU_CLOCK_MAX;
            Ok(Reply::Status(describe(
                &value,
                (&limits, form),
                compressed,
                db,
                &name,
                lru,
                idle,
            )))
        }),
    }
}

fn describe(
    value: &Value,
    (limits, form): (&Limits, crate::storage::encoding::StringForm),
    compressed: bool,
    db: u8,
    name: &[u8],
    lru: u64,
    idle: u64,
) -> String {
    let mut body = Vec::new();
    object::encode(&mut body, value, limits);
    let refcount = match value {
        Value::String(v) if parse_i64(v).is_some_and(|i| (0..10_000).contains(&i)) => {
            SHARED_REFCOUNT
        }
        _ => 1,
    };
    let mut line = format!(
        "Value at:{:#x} refcount:{refcount} encoding:{} serializedlength:{} lru:{lru} lru_seconds_idle:{idle}",
        address(db, name),
        encoding_name(value, limits, form),
        // Without the type byte, as Redis's rdbSavedObjectLen counts.
        body.len() - 1,
    );
    if let Value::List(items) = value {
        let nodes = object::quicklist_nodes(items, limits);
        let size: usize = nodes.iter().map(|n| n.size()).sum();
        line.push_str(&format!(
            " ql_nodes:{} ql_avg_node:{:.2} ql_listpack_max:{} ql_compressed:{} ql_uncompressed_size:{size}",
            nodes.len(),
            items.len() as f64 / nodes.len() as f64,
            limits.list_fill,
            u8::from(compressed),
        ));
    }
    line
}

/// A stand-in address: stable for a key, shaped like a heap pointer.
fn address(db: u8, name: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (db, name).hash(&mut h);
    0x7f00_0000_0000 | (h.finish() & 0xff_ffff_fff0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_as_redis_prints_them() {
        let l = Limits::default();
        let s = describe(
            &Value::String(b"bar".to_vec()),
            (&l, crate::storage::encoding::StringForm::Fresh),
            false,
            0,
            b"k",
            5,
            0,
        );
        assert!(
            s.ends_with(" refcount:1 encoding:embstr serializedlength:4 lru:5 lru_seconds_idle:0")
        );
        let n = describe(
            &Value::String(b"123".to_vec()),
            (&l, crate::storage::encoding::StringForm::Fresh),
            false,
            0,
            b"k",
            5,
            0,
        );
        assert!(n.contains(" refcount:2147483647 encoding:int serializedlength:2 "));
        let items = vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()];
        let q = describe(
            &Value::List(items),
            (&l, crate::storage::encoding::StringForm::Fresh),
            false,
            0,
            b"k",
            5,
            0,
        );
        assert!(q.ends_with(" serializedlength:19 lru:5 lru_seconds_idle:0 ql_nodes:1 ql_avg_node:3.00 ql_listpack_max:-2 ql_compressed:0 ql_uncompressed_size:16"));
    }
}

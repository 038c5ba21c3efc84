//! DEBUG DIGEST and DIGEST-VALUE: Redis's SHA1-based digest of a value and
//! of the whole dataset, computed the way Redis 7.0 computes it, so a
//! digest taken on cairn equals Redis's for the same data (Redis's own
//! tests compare them across servers).
//!
//! Order-free parts (keys, set members, hash fields, sorted-set members)
//! are combined with xor; ordered parts (list elements, stream entries)
//! are "mixed": the running digest is hashed again after each.

use crate::rdb::keys;
use crate::rdb::object::Value;
use crate::scripting::sha1::sha1;
use crate::storage::encoding::Meta;
use crate::storage::keyspace::Key;
use crate::storage::tables::DATABASES;
use crate::storage::{KvRead, StoreError, Table};
use crate::util::num::format_double;

/// A digest: 20 bytes, printed as 40 hex digits.
pub type Digest = [u8; 20];

/// `d ^= SHA1(data)`: adds an element whose order does not matter.
fn xor_in(d: &mut Digest, data: &[u8]) {
    for (a, b) in d.iter_mut().zip(sha1(data)) {
        *a ^= b;
    }
}

/// `d = SHA1(d ^ SHA1(data))`: adds an element whose order matters.
fn mix_in(d: &mut Digest, data: &[u8]) {
    xor_in(d, data);
    *d = sha1(d);
}

/// A pair's own digest (a hash field and value, a member and score),
/// xored into the value's.
fn xor_pair(d: &mut Digest, a: &[u8], b: &[u8]) {
    let mut pair = [0; 20];
    mix_in(&mut pair, a);
    mix_in(&mut pair, b);
    xor_in(d, &pair);
}

/// Redis's object type codes (OBJ_STRING...), which the digest includes.
fn type_code(v: &Value) -> u32 {
    match v {
        Value::String(_) => 0,
        Value::List(_) => 1,
        Value::Set(_) => 2,
        Value::ZSet(_) => 3,
        Value::Hash(_) => 4,
        Value::Stream(_) => 6,
    }
}

/// Mixes a value (and whether it has an expiry) into `d`: DIGEST-VALUE's
/// digest when `d` starts at zero.
pub fn value(d: &mut Digest, v: &Value, expires: bool) {
    mix_in(d, &type_code(v).to_be_bytes());
    match v {
        Value::String(s) => mix_in(d, s),
        Value::List(items) => items.iter().for_each(|e| mix_in(d, e)),
        Value::Set(members) => members.iter().for_each(|m| xor_in(d, m)),
        Value::ZSet(pairs) => {
            for (m, score) in pairs {
                xor_pair(d, m, format_double(*score).as_bytes());
            }
        }
        Value::Hash(pairs) => pairs.iter().for_each(|(f, v)| xor_pair(d, f, v)),
        Value::Stream(s) => {
            // Entries only: consumer groups are not part of the digest.
            for ((ms, seq), fields) in &s.entries {
                mix_in(d, format!("{ms}.{seq}").as_bytes());
                for (f, v) in fields {
                    mix_in(d, f);
                    mix_in(d, v);
                }
            }
        }
    }
    if expires {
        xor_in(d, b"!!expire!!");
    }
}

/// The key's value and whether it has an expiry, as Redis's dictionary
/// holds it: a key past its expiry that nobody removed yet still counts.
pub fn stored(r: &dyn KvRead, key: Key) -> Result<Option<(Value, bool)>, StoreError> {
    let Some(raw) = r.get(Table::Meta, &key.meta_key())? else {
        return Ok(None);
    };
    let meta = Meta::decode(&raw)?;
    with_value(r, key, meta).map(Some)
}

/// The value of `key` whose stored metadata (expired or not) is `meta`,
/// and whether it has an expiry.
pub fn with_value(r: &dyn KvRead, key: Key, meta: Meta) -> Result<(Value, bool), StoreError> {
    let expires = meta.expire_ms != 0;
    match keys::read_meta(r, key, meta) {
        Ok(s) => Ok((s.value, expires)),
        Err(crate::families::Fail::Store(e)) => Err(e),
        Err(crate::families::Fail::Reply(r)) => Err(StoreError::Internal(format!("{r:?}"))),
    }
}

/// The digest of every database, from consistent readers of every shard:
/// all zeros when there is no key.
pub fn dataset(readers: &[&dyn KvRead]) -> Result<Digest, StoreError> {
    let mut total = [0; 20];
    for db in 0..DATABASES as u8 {
        // Keys combine by xor, so each shard's may be folded in any order.
        let (mut keys_xor, mut any) = ([0u8; 20], false);
        for r in readers {
            keys::each_key(*r, db, |name, meta| {
                let (value, expires) = with_value(*r, Key::new(db, name), meta)?;
                let mut d = [0; 20];
                mix_in(&mut d, name);
                self::value(&mut d, &value, expires);
                xor_in(&mut keys_xor, &d);
                any = true;
                Ok::<(), StoreError>(())
            })?;
        }
        if any {
            // The database number first, so the same keys in another
            // database digest differently.
            mix_in(&mut total, &u32::from(db).to_be_bytes());
            total.iter_mut().zip(keys_xor).for_each(|(a, b)| *a ^= b);
        }
    }
    Ok(total)
}

/// 40 lowercase hex digits.
pub fn hex(d: &Digest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(v: Value, expires: bool) -> String {
        let mut d = [0; 20];
        value(&mut d, &v, expires);
        hex(&d)
    }

    /// Digests Redis 7.0.15 gave for the same values (DEBUG DIGEST-VALUE).
    #[test]
    fn values_digest_as_in_redis() {
        assert_eq!(
            of(Value::String(b"bar".to_vec()), false),
            "68467c70ae30376e7ce005bcc8827f5ba7fd67dc"
        );
        assert_eq!(
            of(Value::List(vec![b"a".to_vec()]), false),
            "9f9b4ebb7ec9fb8b52717ecab999fbde97541a50"
        );
        assert_eq!(
            of(Value::Set(vec![b"a".to_vec()]), false),
            "344e2dce84032272e136053b2083009290148e5e"
        );
        assert_eq!(
            of(Value::ZSet(vec![(b"a".to_vec(), 0.1)]), false),
            "b07654932c32238dbd9b8626f0dc40f18d973527"
        );
        assert_eq!(
            of(Value::String(b"v".to_vec()), true),
            "311b17018163335616e089f6b951c82c477335ac"
        );
    }
}

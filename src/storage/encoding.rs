//! The on-disk encoding of DESIGN.md: how keys, metadata, sub-keys, scores and
//! expiry rows are laid out as bytes in the shard's redb tables.
//!
//! Every integer is big-endian and fixed-width so that byte order is numeric
//! order; every row of one user key shares a prefix that no other key's rows
//! can extend (the key length is written before the key in `sub`, `zscore` and
//! `gc`), so a prefix scan never strays into a neighbour.

/// Type codes stored in the low 4 bits of the metadata flags. They are part of
/// the file format: never renumber them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum KeyType {
    /// A Redis string (also the carrier of bitmaps).
    String = 1,
    /// A hash: field -> value sub-keys.
    Hash = 2,
    /// A list: index -> element sub-keys between head and tail.
    List = 3,
    /// A set: member -> empty sub-keys.
    Set = 4,
    /// A sorted set: member -> score sub-keys plus the zscore index.
    ZSet = 5,
    /// A stream: entries, groups, consumers and pending entries.
    Stream = 6,
}

impl KeyType {
    /// Decodes a type code; `None` for a code this build does not know.
    pub fn from_code(code: u8) -> Option<KeyType> {
        Some(match code {
            1 => KeyType::String,
            2 => KeyType::Hash,
            3 => KeyType::List,
            4 => KeyType::Set,
            5 => KeyType::ZSet,
            6 => KeyType::Stream,
            _ => return None,
        })
    }

    /// The name TYPE replies with.
    pub fn name(self) -> &'static str {
        match self {
            KeyType::String => "string",
            KeyType::Hash => "hash",
            KeyType::List => "list",
            KeyType::Set => "set",
            KeyType::ZSet => "zset",
            KeyType::Stream => "stream",
        }
    }
}

/// Encoding version, written in bits 4 and 5 of the flags byte (bits 6
/// and 7 hold a string's [`StringForm`]).
pub const ENCODING_VERSION: u8 = 0;

/// Namespace of a logical database (SELECT n). One byte holding `n`, so that
/// databases sort in numeric order and a namespace prefix is two bytes long.
pub fn ns_of_db(db: u8) -> [u8; 1] {
    [db]
}

/// Builds the `meta` key: `ns_len:u8 ns slot:u16 user_key`.
pub fn meta_key(db: u8, slot: u16, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + key.len());
    push_ns_slot(&mut out, db, slot);
    out.extend_from_slice(key);
    out
}

/// The prefix shared by all `meta` rows of one slot of one database.
pub fn meta_slot_prefix(db: u8, slot: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(4);
    push_ns_slot(&mut out, db, slot);
    out
}

/// The prefix shared by all `meta` rows of one database.
pub fn meta_db_prefix(db: u8) -> Vec<u8> {
    vec![1, db]
}

/// Splits a `meta` key back into (db, slot, user key).
pub fn decode_meta_key(raw: &[u8]) -> Option<(u8, u16, &[u8])> {
    if raw.len() < 4 || raw[0] != 1 {
        return None;
    }
    let slot = u16::from_be_bytes([raw[2], raw[3]]);
    Some((raw[1], slot, &raw[4..]))
}

fn push_ns_slot(out: &mut Vec<u8>, db: u8, slot: u16) {
    let ns = ns_of_db(db);
    out.push(ns.len() as u8);
    out.extend_from_slice(&ns);
    out.extend_from_slice(&slot.to_be_bytes());
}

/// The prefix of every `sub`/`zscore` row of one version of one key:
/// `ns slot key_len:u32 user_key version:u64`. It is also the `gc` key.
pub fn version_prefix(db: u8, slot: u16, key: &[u8], version: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + key.len());
    push_ns_slot(&mut out, db, slot);
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&version.to_be_bytes());
    out
}

/// The (db, user key) a `sub` or `zscore` row belongs to: the inverse of
/// the leading part of [`version_prefix`].
pub fn decode_version_row(raw: &[u8]) -> Option<(u8, &[u8])> {
    if raw.len() < 8 || raw[0] != 1 {
        return None;
    }
    let len = u32::from_be_bytes(raw[4..8].try_into().ok()?) as usize;
    Some((raw[1], raw.get(8..8 + len)?))
}

/// A `sub` row key: the version prefix followed by the sub-key bytes.
pub fn sub_key(prefix: &[u8], sub: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + sub.len());
    out.extend_from_slice(prefix);
    out.extend_from_slice(sub);
    out
}

/// A `zscore` row key: the version prefix, the order-preserving score, member.
pub fn zscore_key(prefix: &[u8], score: f64, member: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + 8 + member.len());
    out.extend_from_slice(prefix);
    out.extend_from_slice(&score_to_bytes(score));
    out.extend_from_slice(member);
    out
}

/// The value of a `zscore` row: empty, except for a score of -0, whose
/// sign the row key cannot keep. The key folds -0 into 0 so that the two
/// tie and order by member, as Redis compares scores; but a sorted set in
/// Redis's big encoding (a skiplist) replies the -0 it was given, so the
/// index, which ZRANGE reads scores from, keeps the sign here.
pub fn zscore_value(score: f64) -> &'static [u8] {
    if score == 0.0 && score.is_sign_negative() {
        NEGATIVE_ZERO
    } else {
        &[]
    }
}

/// The score a `zscore` row stands for: its key's score, given the sign of
/// a zero by the row's value (see [`zscore_value`]).
pub fn zscore_of_row(score_bytes: [u8; 8], value: &[u8]) -> f64 {
    let score = score_from_bytes(score_bytes);
    if score == 0.0 && value == NEGATIVE_ZERO {
        -0.0
    } else {
        score
    }
}

/// The `zscore` row value marking a score of -0.
const NEGATIVE_ZERO: &[u8] = b"-";

/// A `ttl` row key: `expire_ms:u64 ns slot user_key` (ardb's KEY_TTL_SORT), so
/// the reaper finds due keys by scanning from the start of the table.
pub fn ttl_key(expire_ms: u64, db: u8, slot: u16, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + key.len());
    out.extend_from_slice(&expire_ms.to_be_bytes());
    push_ns_slot(&mut out, db, slot);
    out.extend_from_slice(key);
    out
}

/// Splits a `ttl` key into (expire_ms, meta key bytes).
pub fn decode_ttl_key(raw: &[u8]) -> Option<(u64, &[u8])> {
    if raw.len() < 12 {
        return None;
    }
    let expire = u64::from_be_bytes(raw[..8].try_into().ok()?);
    Some((expire, &raw[8..]))
}

/// The smallest byte string greater than every string starting with `prefix`
/// (the exclusive upper bound of a prefix scan). `None` when no such string
/// exists (the prefix is all 0xFF), meaning "scan to the end of the table".
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut out = prefix.to_vec();
    while let Some(last) = out.pop() {
        if last != 0xFF {
            out.push(last + 1);
            return Some(out);
        }
    }
    None
}

/// Maps an f64 to 8 bytes whose unsigned big-endian order is the numeric
/// order: negatives have every bit flipped, positives only the sign bit.
/// -0.0 is folded into +0.0 first, because Redis treats them as equal scores
/// (a `zscore` row keeps the sign in its value, see [`zscore_value`]).
pub fn score_to_bytes(score: f64) -> [u8; 8] {
    let score = if score == 0.0 { 0.0 } else { score };
    let bits = score.to_bits();
    let mapped = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    mapped.to_be_bytes()
}

/// Inverse of [`score_to_bytes`].
pub fn score_from_bytes(raw: [u8; 8]) -> f64 {
    let mapped = u64::from_be_bytes(raw);
    let bits = if mapped >> 63 == 1 {
        mapped & !(1 << 63)
    } else {
        !mapped
    };
    f64::from_bits(bits)
}

/// Initial list head and tail: the middle of the u64 range, so a list can grow
/// by 2^63 elements either way.
pub const LIST_INITIAL_INDEX: u64 = u64::MAX / 2;

/// Bytes of a metadata row's head: its type byte and expiry u64, what
/// [`Meta::peek_header`] reads (a value log pointer row carries them).
pub const HEAD_LEN: usize = 9;

/// The decoded metadata row of a key.
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    /// The key's type.
    pub ktype: KeyType,
    /// Absolute expiry in Unix ms; 0 = none.
    pub expire_ms: u64,
    /// Type-specific payload.
    pub body: MetaBody,
    /// How Redis would hold a string, where its history decides that
    /// (OBJECT ENCODING shows it). Stored in the row's first byte.
    pub form: StringForm,
}

/// How Redis holds a string value, where its history rather than its
/// contents decides it. Redis keeps a string so until a command stores a
/// new value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StringForm {
    /// Stored by a command that encodes its value afresh (SET, INCR...):
    /// an integer that fits is `int`, any other `embstr` or `raw` by its
    /// length.
    #[default]
    Fresh,
    /// A string object whatever it reads like (INCRBYFLOAT's result):
    /// `embstr` or `raw` by its length, never `int`.
    Text,
    /// Written in place (APPEND, SETRANGE, a bit command): `raw` whatever
    /// its length or contents.
    Raw,
}

/// The bits of a `meta` row's first byte that mark a string's
/// [`StringForm`] (the type code is the low nibble, the encoding version
/// the bits left).
const RAW_STRING: u8 = 0x80;
const TEXT_STRING: u8 = 0x40;

/// Type-specific part of a metadata row.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaBody {
    /// A string keeps its value inline: one row per string.
    String(Vec<u8>),
    /// A collection's sub-keys live under `version`; `size` is its cardinality.
    Collection {
        /// Version the sub-keys are written under.
        version: u64,
        /// Number of members / fields / elements.
        size: u64,
        /// List head and tail indexes (lists only), plus any stream fields.
        extra: Vec<u8>,
    },
}

impl Meta {
    /// A string value with an optional expiry.
    pub fn string(value: Vec<u8>, expire_ms: u64) -> Meta {
        Meta {
            form: StringForm::Fresh,
            ktype: KeyType::String,
            expire_ms,
            body: MetaBody::String(value),
        }
    }

    /// A string value Redis would hold `raw` (see [`StringForm::Raw`]).
    pub fn raw_string(value: Vec<u8>, expire_ms: u64) -> Meta {
        Meta {
            form: StringForm::Raw,
            ..Meta::string(value, expire_ms)
        }
    }

    /// A string value Redis would hold as text, never as an integer (see
    /// [`StringForm::Text`]).
    pub fn text_string(value: Vec<u8>, expire_ms: u64) -> Meta {
        Meta {
            form: StringForm::Text,
            ..Meta::string(value, expire_ms)
        }
    }

    /// Whether the key is logically gone at `now_ms`.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expire_ms != 0 && self.expire_ms <= now_ms
    }

    /// The collection version, if this is a collection.
    pub fn version(&self) -> Option<u64> {
        match self.body {
            MetaBody::Collection { version, .. } => Some(version),
            MetaBody::String(_) => None,
        }
    }

    /// Serialises the row.
    pub fn encode(&self) -> Vec<u8> {
        let body = match &self.body {
            MetaBody::String(v) => v.len(),
            MetaBody::Collection { extra, .. } => 16 + extra.len(),
        };
        let mut out = Vec::with_capacity(HEAD_LEN + body);
        self.encode_into(&mut out);
        out
    }

    /// Appends the encoded row to `out` (a row rewritten in place).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let form = match (self.ktype, self.form) {
            (KeyType::String, StringForm::Raw) => RAW_STRING,
            (KeyType::String, StringForm::Text) => TEXT_STRING,
            _ => 0,
        };
        out.push((ENCODING_VERSION << 4) | form | self.ktype as u8);
        out.extend_from_slice(&self.expire_ms.to_be_bytes());
        match &self.body {
            MetaBody::String(v) => out.extend_from_slice(v),
            MetaBody::Collection {
                version,
                size,
                extra,
            } => {
                out.extend_from_slice(&version.to_be_bytes());
                out.extend_from_slice(&size.to_be_bytes());
                out.extend_from_slice(extra);
            }
        }
    }

    /// Parses a row written by [`Meta::encode`].
    pub fn decode(raw: &[u8]) -> Result<Meta, CorruptRow> {
        let (ktype, expire_ms) = Meta::peek_header(raw)?;
        let body = if ktype == KeyType::String {
            MetaBody::String(raw[HEAD_LEN..].to_vec())
        } else {
            if raw.len() < 25 {
                return Err(CorruptRow("collection metadata row too short"));
            }
            MetaBody::Collection {
                version: read_u64(&raw[9..17]),
                size: read_u64(&raw[17..25]),
                extra: raw[25..].to_vec(),
            }
        };
        Ok(Meta {
            form: match ktype {
                KeyType::String if raw[0] & RAW_STRING != 0 => StringForm::Raw,
                KeyType::String if raw[0] & TEXT_STRING != 0 => StringForm::Text,
                _ => StringForm::Fresh,
            },
            ktype,
            expire_ms,
            body,
        })
    }

    /// Reads only the header (type and expiry) of a row, without copying the
    /// value: what TYPE, TTL and EXISTS need.
    pub fn peek_header(raw: &[u8]) -> Result<(KeyType, u64), CorruptRow> {
        if raw.len() < HEAD_LEN {
            return Err(CorruptRow("metadata row shorter than its header"));
        }
        let ktype = KeyType::from_code(raw[0] & 0x0F).ok_or(CorruptRow("unknown type code"))?;
        Ok((ktype, read_u64(&raw[1..HEAD_LEN])))
    }
}

/// A stored row that cannot be decoded: the file is damaged or was written by
/// an incompatible build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("corrupt row: {0}")]
pub struct CorruptRow(pub &'static str);

fn read_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips() {
        let s = Meta::string(b"hello".to_vec(), 1234);
        assert_eq!(Meta::decode(&s.encode()).unwrap(), s);
        // A string's form travels in the first byte, beside its type.
        for form in [Meta::raw_string, Meta::text_string] {
            let m = form(b"100".to_vec(), 5);
            assert_eq!(Meta::decode(&m.encode()).unwrap(), m);
            assert_eq!(
                Meta::peek_header(&m.encode()).unwrap(),
                (KeyType::String, 5)
            );
        }
        let c = Meta {
            form: StringForm::Fresh,
            ktype: KeyType::List,
            expire_ms: 0,
            body: MetaBody::Collection {
                version: 7,
                size: 3,
                extra: vec![1, 2, 3],
            },
        };
        assert_eq!(Meta::decode(&c.encode()).unwrap(), c);
        assert_eq!(Meta::peek_header(&c.encode()).unwrap(), (KeyType::List, 0));
        assert!(Meta::decode(&[1, 2]).is_err());
        assert!(Meta::decode(&[9, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }

    #[test]
    fn meta_key_round_trips() {
        let k = meta_key(3, 0x3FFF, b"user");
        assert_eq!(decode_meta_key(&k), Some((3, 0x3FFF, &b"user"[..])));
        let t = ttl_key(99, 3, 5, b"user");
        let (e, mk) = decode_ttl_key(&t).unwrap();
        assert_eq!(e, 99);
        assert_eq!(mk, meta_key(3, 5, b"user").as_slice());
    }

    #[test]
    fn integer_byte_order_is_numeric_order() {
        let xs = [0u64, 1, 255, 256, 65535, 1 << 40, u64::MAX - 1, u64::MAX];
        for w in xs.windows(2) {
            assert!(w[0].to_be_bytes() < w[1].to_be_bytes());
            assert!(ttl_key(w[0], 0, 0, b"z") < ttl_key(w[1], 0, 0, b"a"));
        }
    }

    #[test]
    fn score_order_is_numeric_order() {
        let xs = [
            f64::NEG_INFINITY,
            f64::MIN,
            -1e10,
            -1.5,
            -f64::MIN_POSITIVE,
            0.0,
            f64::MIN_POSITIVE,
            1.0,
            1.5,
            1e300,
            f64::MAX,
            f64::INFINITY,
        ];
        for w in xs.windows(2) {
            assert!(
                score_to_bytes(w[0]) < score_to_bytes(w[1]),
                "{} < {}",
                w[0],
                w[1]
            );
        }
        for x in xs {
            assert_eq!(score_from_bytes(score_to_bytes(x)), x);
        }
        assert_eq!(score_to_bytes(-0.0), score_to_bytes(0.0));
        assert_eq!(
            score_from_bytes(score_to_bytes(-0.0)).to_bits(),
            0.0f64.to_bits()
        );
    }

    #[test]
    fn prefix_successor_bounds_one_key() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(&[1, 0xFF, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xFF, 0xFF]), None);
        // A key's version prefix never covers another key's rows, even when one
        // user key is a prefix of the other.
        let a = version_prefix(0, 1, b"a", 5);
        let ab = version_prefix(0, 1, b"ab", 5);
        let end = prefix_successor(&a).unwrap();
        assert!(!(ab >= a && ab < end));
        let next_version = version_prefix(0, 1, b"a", 6);
        assert!(next_version >= end);
        let sub = sub_key(&a, &[0xFF; 40]);
        assert!(sub >= a && sub < end);
    }

    #[test]
    fn key_type_codes_are_stable() {
        for (t, c) in [
            (KeyType::String, 1),
            (KeyType::Hash, 2),
            (KeyType::List, 3),
            (KeyType::Set, 4),
            (KeyType::ZSet, 5),
            (KeyType::Stream, 6),
        ] {
            assert_eq!(t as u8, c);
            assert_eq!(KeyType::from_code(c), Some(t));
        }
    }
}

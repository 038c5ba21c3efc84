//! Stream entry ids (`ms-seq`) and their argument forms, with Redis's
//! parsing rules and error texts.

use std::fmt;

use bytes::Bytes;

use crate::protocol::Reply;

/// The error for any id argument that does not parse.
pub const INVALID_ID: &str = "Invalid stream ID specified as stream command argument";

/// A stream entry id. Ordered by milliseconds, then sequence, which is also
/// the byte order of [`StreamId::to_bytes`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    /// Milliseconds part.
    pub ms: u64,
    /// Sequence part.
    pub seq: u64,
}

impl StreamId {
    /// `0-0`.
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    /// The largest id there is.
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    /// An id from its parts.
    pub const fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    /// The next id, or `None` past the maximum.
    pub fn incr(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (u64::MAX, u64::MAX) => None,
            (ms, u64::MAX) => Some(StreamId::new(ms + 1, 0)),
            (ms, seq) => Some(StreamId::new(ms, seq + 1)),
        }
    }

    /// The previous id, or `None` below `0-0`.
    pub fn decr(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (0, 0) => None,
            (ms, 0) => Some(StreamId::new(ms - 1, u64::MAX)),
            (ms, seq) => Some(StreamId::new(ms, seq - 1)),
        }
    }

    /// Whether this is `0-0`.
    pub fn is_zero(self) -> bool {
        self == StreamId::MIN
    }

    /// 16 big-endian bytes: byte order is id order.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.ms.to_be_bytes());
        out[8..].copy_from_slice(&self.seq.to_be_bytes());
        out
    }

    /// Inverse of [`StreamId::to_bytes`] (the first 16 bytes of `b`).
    pub fn from_bytes(b: &[u8]) -> StreamId {
        let mut ms = [0u8; 8];
        let mut seq = [0u8; 8];
        ms.copy_from_slice(&b[..8]);
        seq.copy_from_slice(&b[8..16]);
        StreamId::new(u64::from_be_bytes(ms), u64::from_be_bytes(seq))
    }

    /// The id as a bulk string reply.
    pub fn reply(self) -> Reply {
        Reply::Bulk(Bytes::from(self.to_string()))
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// Redis's `string2ull`: a strict signed 64-bit decimal that is not
/// negative, or failing that whatever C's `strtoull` accepts whole (leading
/// blanks, a sign, digits; a minus sign wraps, as in C).
fn parse_u64(s: &[u8]) -> Option<u64> {
    if let Some(v) = crate::util::num::parse_i64(s) {
        return (v >= 0).then_some(v as u64);
    }
    let mut i = 0;
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r') {
        i += 1;
    }
    let negative = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let digits = &s[i..];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for d in digits {
        v = v.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    Some(if negative { v.wrapping_neg() } else { v })
}

/// How an XADD id argument asks for its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddId {
    /// `*`: generated from the clock.
    Auto,
    /// `ms-*`: this millisecond, the next free sequence.
    Ms(u64),
    /// A complete id.
    Exact(StreamId),
}

/// Parses an id. `-` and `+` are the extremes unless `strict`; a lone
/// number gets `missing_seq` as its sequence; `ms-*` is only accepted when
/// `auto_seq` (XADD) and comes back as [`AddId::Ms`].
fn parse_generic(
    arg: &[u8],
    missing_seq: u64,
    strict: bool,
    auto_seq: bool,
) -> Result<AddId, Reply> {
    let invalid = || Reply::err(INVALID_ID);
    if arg.len() > 127 {
        return Err(invalid());
    }
    if !strict && arg.len() == 1 {
        match arg[0] {
            b'-' => return Ok(AddId::Exact(StreamId::MIN)),
            b'+' => return Ok(AddId::Exact(StreamId::MAX)),
            _ => {}
        }
    }
    match arg.iter().position(|&b| b == b'-') {
        None => {
            let ms = parse_u64(arg).ok_or_else(invalid)?;
            Ok(AddId::Exact(StreamId::new(ms, missing_seq)))
        }
        Some(dash) => {
            let ms = parse_u64(&arg[..dash]).ok_or_else(invalid)?;
            let seq = &arg[dash + 1..];
            if auto_seq && seq == b"*" {
                return Ok(AddId::Ms(ms));
            }
            let seq = parse_u64(seq).ok_or_else(invalid)?;
            Ok(AddId::Exact(StreamId::new(ms, seq)))
        }
    }
}

fn exact(a: AddId) -> StreamId {
    match a {
        AddId::Exact(id) => id,
        AddId::Ms(ms) => StreamId::new(ms, 0),
        AddId::Auto => StreamId::MIN,
    }
}

/// An id where `-` and `+` are accepted (XGROUP SETID).
pub fn parse(arg: &[u8], missing_seq: u64) -> Result<StreamId, Reply> {
    parse_generic(arg, missing_seq, false, false).map(exact)
}

/// An id where `-` and `+` are not accepted (XDEL, XACK, XCLAIM...).
pub fn parse_strict(arg: &[u8]) -> Result<StreamId, Reply> {
    parse_generic(arg, 0, true, false).map(exact)
}

/// XADD's id argument (`*`, `ms-*` or an id).
pub fn parse_add(arg: &[u8]) -> Result<AddId, Reply> {
    if arg == b"*" {
        return Ok(AddId::Auto);
    }
    parse_generic(arg, 0, true, true)
}

/// One end of an interval (XRANGE, XPENDING, XAUTOCLAIM): `(` makes it
/// exclusive, which moves it one id inwards. `start` picks the direction
/// and the sequence a lone number gets.
pub fn parse_bound(arg: &[u8], start: bool) -> Result<StreamId, Reply> {
    let missing = if start { 0 } else { u64::MAX };
    if arg.len() > 1 && arg[0] == b'(' {
        let id = parse_generic(&arg[1..], missing, true, false).map(exact)?;
        let moved = if start { id.incr() } else { id.decr() };
        return moved.ok_or_else(|| {
            Reply::err(if start {
                "invalid start ID for the interval"
            } else {
                "invalid end ID for the interval"
            })
        });
    }
    parse(arg, missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_as_redis_does() {
        assert_eq!(parse_strict(b"5").unwrap(), StreamId::new(5, 0));
        assert_eq!(parse(b"5", u64::MAX).unwrap(), StreamId::new(5, u64::MAX));
        assert_eq!(parse_strict(b"1-2").unwrap(), StreamId::new(1, 2));
        assert_eq!(parse(b"-", 0).unwrap(), StreamId::MIN);
        assert_eq!(parse(b"+", 0).unwrap(), StreamId::MAX);
        assert!(parse_strict(b"-").is_err());
        assert!(parse_strict(b"+").is_err());
        assert!(parse_strict(b"1-").is_err());
        assert!(parse_strict(b"-1").is_err());
        assert!(parse_strict(b"a-1").is_err());
        assert_eq!(
            parse_strict(b"18446744073709551615-18446744073709551615").unwrap(),
            StreamId::MAX
        );
        assert!(parse_strict(b"18446744073709551616").is_err());
        // What strtoull accepts beyond strict integers.
        assert_eq!(parse_strict(b"+7").unwrap(), StreamId::new(7, 0));
        assert_eq!(parse_add(b"3-*").unwrap(), AddId::Ms(3));
        assert_eq!(parse_add(b"*").unwrap(), AddId::Auto);
        assert!(parse_strict(b"3-*").is_err());
        assert_eq!(parse_bound(b"(1-1", true).unwrap(), StreamId::new(1, 2));
        assert_eq!(
            parse_bound(b"(2", false).unwrap(),
            StreamId::new(2, u64::MAX - 1)
        );
        assert_eq!(
            parse_bound(b"(2-0", false).unwrap(),
            StreamId::new(1, u64::MAX)
        );
        assert!(parse_bound(b"(0-0", false).is_err());
        assert!(parse_bound(b"(-", true).is_err());
    }

    #[test]
    fn id_bytes_order_like_ids() {
        let ids = [
            StreamId::MIN,
            StreamId::new(0, 1),
            StreamId::new(1, 0),
            StreamId::new(1, u64::MAX),
            StreamId::new(2, 0),
            StreamId::MAX,
        ];
        for w in ids.windows(2) {
            assert!(w[0] < w[1]);
            assert!(w[0].to_bytes() < w[1].to_bytes());
        }
        for id in ids {
            assert_eq!(StreamId::from_bytes(&id.to_bytes()), id);
        }
        assert_eq!(StreamId::new(1, u64::MAX).incr(), Some(StreamId::new(2, 0)));
        assert_eq!(StreamId::MAX.incr(), None);
        assert_eq!(StreamId::MIN.decr(), None);
        assert_eq!(StreamId::new(2, 0).decr(), Some(StreamId::new(1, u64::MAX)));
    }
}

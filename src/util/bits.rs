//! Pure bit-level operations on string values, with the exact semantics of
//! Redis 7.0's `GETBIT`, `SETBIT`, `BITCOUNT`, `BITPOS`, `BITOP` and
//! `BITFIELD`.
//!
//! Bits are numbered from the most significant bit of the first byte, as in
//! Redis: bit 0 is `0x80` of byte 0, bit 7 is `0x01` of byte 0, bit 8 is
//! `0x80` of byte 1. Bits past the end of a string read as 0.
//!
//! Key lookup, type checks and argument-count errors stay with the caller;
//! the doc comments say where Redis answers before reaching this logic.

/// Largest string Redis lets a bit command address: `proto-max-bulk-len`,
/// 512 MiB by default, so bit offsets run from 0 to 2^32 - 1.
pub const DEFAULT_MAX_BULK_LEN: u64 = 512 * 1024 * 1024;

/// Reads bit `offset` (0 past the end of the string), as `GETBIT` does.
pub fn getbit(s: &[u8], offset: u64) -> bool {
    let Ok(byte) = usize::try_from(offset / 8) else {
        return false;
    };
    s.get(byte).is_some_and(|b| b & (0x80 >> (offset % 8)) != 0)
}

/// Writes bit `offset`, zero-padding the string as needed, and returns the
/// previous bit (the `SETBIT` reply).
///
/// The caller validates `offset` with [`parse_offset`] first, which bounds
/// the growth to 512 MiB.
pub fn setbit(s: &mut Vec<u8>, offset: u64, bit: bool) -> bool {
    let byte = usize::try_from(offset / 8).expect("offset validated by the caller");
    if s.len() <= byte {
        s.resize(byte + 1, 0);
    }
    let mask = 0x80 >> (offset % 8);
    let old = s[byte] & mask != 0;
    if bit {
        s[byte] |= mask;
    } else {
        s[byte] &= !mask;
    }
    old
}

/// Parses `SETBIT`'s value argument: only the integers 0 and 1 (with
/// Redis's strict integer rules, so `01` or `+1` are refused). `None` maps
/// to "ERR bit is not an integer or out of range".
pub fn parse_bit_value(s: &[u8]) -> Option<bool> {
    match s {
        b"0" => Some(false),
        b"1" => Some(true),
        _ => None,
    }
}

/// Parses a bit offset as `GETBIT`, `SETBIT` and `BITFIELD` do, using the
/// default 512 MiB `proto-max-bulk-len`; see [`parse_offset_with_limit`].
pub fn parse_offset(s: &[u8], bits: u8) -> Option<u64> {
    parse_offset_with_limit(s, bits, DEFAULT_MAX_BULK_LEN)
}

/// Parses a bit offset: a strict non-negative integer or, when `bits > 0`
/// (`BITFIELD` passes its field width, `GETBIT`/`SETBIT` pass 0), `#N`
/// meaning `N * bits`. The offset must address a byte below
/// `max_bulk_len`. `None` maps to "ERR bit offset is not an integer or out
/// of range".
///
/// Like Redis, `#N * bits` is computed with 64-bit wrap-around: with `i16`,
/// `#1152921504606846976` (2^60 * 16 = 2^64) wraps to offset 0 and is
/// accepted, while with `i8` it wraps negative and is refused.
pub fn parse_offset_with_limit(s: &[u8], bits: u8, max_bulk_len: u64) -> Option<u64> {
    let (hash, digits) = match s.split_first() {
        Some((b'#', rest)) if bits > 0 => (true, rest),
        _ => (false, s),
    };
    let mut v = super::num::parse_i64(digits)?;
    if hash {
        v = v.wrapping_mul(i64::from(bits));
    }
    let v = u64::try_from(v).ok()?;
    (v >> 3 < max_bulk_len).then_some(v)
}

/// Resolves a `start end` pair against a length with Redis's negative-index
/// rules: negatives count from the end, then both clamp to `0..len`.
/// Returns `None` for an empty range.
fn resolve_range(start: i64, end: i64, len: i64) -> Option<(i64, i64)> {
    let fix = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (start, end) = (fix(start), fix(end).min(len - 1));
    (start <= end).then_some((start, end))
}

/// Counts set bits in the inclusive bit range `first..=last`.
fn count_bits(s: &[u8], first: i64, last: i64) -> i64 {
    let (fb, lb) = ((first / 8) as usize, (last / 8) as usize);
    let head_mask = 0xffu8 >> (first % 8);
    let tail_mask = 0xffu8 << (7 - last % 8);
    if fb == lb {
        return i64::from((s[fb] & head_mask & tail_mask).count_ones());
    }
    let middle: u32 = s[fb + 1..lb].iter().map(|b| b.count_ones()).sum();
    i64::from((s[fb] & head_mask).count_ones() + middle + (s[lb] & tail_mask).count_ones())
}

/// `BITCOUNT key [start end [BYTE|BIT]]` on an existing string value.
///
/// `range` is the `start end` pair, in bytes, or in bits when
/// `unit_is_bit`. Negative indexes count from the end and out-of-range
/// indexes clamp, except that when both are negative and `start > end` the
/// answer is 0 before any clamping (so `BITCOUNT k -100 -200` is 0 even on
/// a short string, where clamping alone would count byte 0).
///
/// A missing key answers 0 before the arguments are even checked (Redis
/// 7.0 replies 0 to `BITCOUNT missing 1 2 bogus`).
pub fn bitcount(s: &[u8], range: Option<(i64, i64)>, unit_is_bit: bool) -> i64 {
    let bytes = s.len() as i64;
    let Some((start, end)) = range else {
        return s.iter().map(|b| i64::from(b.count_ones())).sum();
    };
    if start < 0 && end < 0 && start > end {
        return 0;
    }
    let len = if unit_is_bit { bytes * 8 } else { bytes };
    match resolve_range(start, end, len) {
        None => 0,
        Some((a, b)) if unit_is_bit => count_bits(s, a, b),
        Some((a, b)) => count_bits(s, a * 8, b * 8 + 7),
    }
}

/// `BITPOS key bit [start [end [BYTE|BIT]]]` on an existing string value:
/// the first bit equal to `bit` in the range, or -1.
///
/// Rules, all observed on Redis 7.0:
/// * Indexes resolve like `BITCOUNT`'s but without its "both negative"
///   shortcut: `BITPOS k 0 -100 -200` searches byte 0.
/// * An empty range (including an empty string) answers -1 for either bit.
/// * Looking for 0 when the range holds only 1s answers the first bit past
///   the end of the string if no `end` was given (the value counts as
///   zero-padded), but -1 when `end` was given.
///
/// Callers handle a missing key first: Redis answers 0 when looking for a
/// 0 bit and -1 when looking for a 1 bit.
pub fn bitpos(s: &[u8], bit: bool, start: Option<i64>, end: Option<i64>, unit_is_bit: bool) -> i64 {
    let bytes = s.len() as i64;
    let len = if unit_is_bit { bytes * 8 } else { bytes };
    let Some((a, b)) = resolve_range(start.unwrap_or(0), end.unwrap_or(len - 1), len) else {
        return -1;
    };
    let (first, last) = if unit_is_bit {
        (a, b)
    } else {
        (a * 8, b * 8 + 7)
    };
    if let Some(pos) = find_bit(s, bit, first, last) {
        return pos;
    }
    if !bit && end.is_none() {
        // Redis scans whole bytes and treats the string as zero-padded, so
        // the answer is the bit just past the last byte of the range.
        return (last / 8 + 1) * 8;
    }
    -1
}

/// Finds the first bit equal to `bit` in `first..=last`.
fn find_bit(s: &[u8], bit: bool, first: i64, last: i64) -> Option<i64> {
    // Skip whole bytes that cannot contain the bit, then check bit by bit.
    let skip = if bit { 0x00 } else { 0xff };
    let mut pos = first;
    while pos <= last {
        let byte = s[(pos / 8) as usize];
        if pos % 8 == 0 && pos + 7 <= last && byte == skip {
            pos += 8;
            continue;
        }
        if (byte & (0x80 >> (pos % 8)) != 0) == bit {
            return Some(pos);
        }
        pos += 1;
    }
    None
}

/// The `BITOP` operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitOp {
    /// Bitwise AND of all inputs.
    And,
    /// Bitwise OR of all inputs.
    Or,
    /// Bitwise XOR of all inputs.
    Xor,
    /// Bitwise NOT of the single input.
    Not,
}

/// Computes `BITOP op dest src...`: missing keys are passed as empty
/// inputs, shorter inputs are zero-padded, and the result is as long as the
/// longest input (an empty result means Redis deletes `dest` and replies
/// 0). `Not` uses only the first input; the caller enforces "ERR BITOP NOT
/// must be called with a single source key.".
pub fn bitop(op: BitOp, inputs: &[&[u8]]) -> Vec<u8> {
    let len = inputs.iter().map(|s| s.len()).max().unwrap_or(0);
    let byte = |s: &[u8], i: usize| s.get(i).copied().unwrap_or(0);
    if op == BitOp::Not {
        return inputs
            .first()
            .map_or_else(Vec::new, |s| s.iter().map(|b| !b).collect());
    }
    (0..len)
        .map(|i| {
            let mut bytes = inputs.iter().map(|s| byte(s, i));
            let first = bytes.next().unwrap_or(0);
            bytes.fold(first, |acc, b| match op {
                BitOp::And => acc & b,
                BitOp::Or => acc | b,
                BitOp::Xor => acc ^ b,
                BitOp::Not => unreachable!("handled above"),
            })
        })
        .collect()
}

/// `BITFIELD`'s overflow policies for `SET` and `INCRBY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Keep the low bits (two's complement wrap-around); the default.
    #[default]
    Wrap,
    /// Clamp to the type's minimum or maximum.
    Sat,
    /// Do nothing and reply nil for that operation.
    Fail,
}

impl Overflow {
    /// Parses the `OVERFLOW` argument, case-insensitively. `None` maps to
    /// "ERR Invalid OVERFLOW type specified".
    pub fn parse(s: &[u8]) -> Option<Overflow> {
        [
            (&b"wrap"[..], Overflow::Wrap),
            (b"sat", Overflow::Sat),
            (b"fail", Overflow::Fail),
        ]
        .into_iter()
        .find(|(name, _)| s.eq_ignore_ascii_case(name))
        .map(|(_, ov)| ov)
    }
}

/// A `BITFIELD` type: `i1`..`i64` or `u1`..`u63`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldType {
    /// Two's complement signed (`i`) or unsigned (`u`).
    pub signed: bool,
    /// Width in bits.
    pub bits: u8,
}

impl FieldType {
    /// Parses a type such as `i8` or `u63`. The prefix must be a lowercase
    /// `i` or `u` and the width a strict integer (`i08` is refused), 1..=64
    /// for signed and 1..=63 for unsigned. `None` maps to "ERR Invalid
    /// bitfield type. Use something like i16 u8. Note that u64 is not
    /// supported but i64 is.".
    pub fn parse(s: &[u8]) -> Option<FieldType> {
        let (&kind, width) = s.split_first()?;
        let signed = match kind {
            b'i' => true,
            b'u' => false,
            _ => return None,
        };
        let bits = super::num::parse_i64(width)?;
        let max = if signed { 64 } else { 63 };
        if !(1..=max).contains(&bits) {
            return None;
        }
        Some(FieldType {
            signed,
            bits: bits as u8,
        })
    }

    /// The largest value of the type.
    fn max(self) -> i64 {
        if self.signed {
            ((1u64 << (self.bits - 1)) - 1) as i64
        } else {
            ((1u64 << self.bits) - 1) as i64
        }
    }
}

/// Reads a `BITFIELD` field (`GET`): the `ty.bits` bits at `offset`, most
/// significant first, zero past the end of the string, sign-extended for
/// signed types.
pub fn get_field(s: &[u8], offset: u64, ty: FieldType) -> i64 {
    let raw =
        (0..u64::from(ty.bits)).fold(0u64, |acc, i| acc << 1 | u64::from(getbit(s, offset + i)));
    if ty.signed && ty.bits < 64 && raw >> (ty.bits - 1) & 1 == 1 {
        (raw | (u64::MAX << ty.bits)) as i64
    } else {
        raw as i64
    }
}

/// Grows `s` with zero bytes so it holds the field at `offset`.
///
/// Redis grows the value for every `SET`/`INCRBY` of a `BITFIELD` call
/// before running any of them, so the string is extended (and a missing
/// key is created) even when those operations then fail under
/// `OVERFLOW FAIL`; callers reproduce that by calling this for each write
/// operation first. `GET`-only calls never grow the value.
pub fn grow_for_field(s: &mut Vec<u8>, offset: u64, ty: FieldType) {
    let last_bit = offset + u64::from(ty.bits) - 1;
    let len = usize::try_from(last_bit / 8 + 1).expect("offset validated by the caller");
    if s.len() < len {
        s.resize(len, 0);
    }
}

/// Writes a `BITFIELD` field: the low `ty.bits` bits of `value` at
/// `offset`, growing the string with zero bytes as needed. Returns the
/// previous value of the field. `value` should already have been passed
/// through [`set_value`] or [`incr_field`] so it is in range.
pub fn set_field(s: &mut Vec<u8>, offset: u64, ty: FieldType, value: i64) -> i64 {
    let old = get_field(s, offset, ty);
    let bits = u64::from(ty.bits);
    grow_for_field(s, offset, ty);
    for i in 0..bits {
        setbit(s, offset + i, (value as u64) >> (bits - 1 - i) & 1 == 1);
    }
    old
}

/// The value a `BITFIELD ... SET` stores for argument `value` under policy
/// `ov`, or `None` when `FAIL` refuses it (reply nil, write nothing).
///
/// Out-of-range values wrap by default (`SET i8 0 200` stores -56). Two
/// quirks of Redis's range check are reproduced: for unsigned types a
/// negative value counts as too *large* (`OVERFLOW SAT SET u8 0 -5` stores
/// 255, `WRAP` stores 251), and for signed types narrower than 64 bits a
/// value so negative that `max - value` overflows (at or below
/// `i64::MIN + max`) counts as too large too (`OVERFLOW SAT SET i8 0
/// -9223372036854775808` stores 127).
pub fn set_value(value: i64, ty: FieldType, ov: Overflow) -> Option<i64> {
    incr_field(value, 0, ty, ov)
}

/// The new value of a `BITFIELD ... INCRBY` given the field's current
/// value `old` (as read by [`get_field`]), or `None` when `ov` is `FAIL`
/// and the sum leaves the type's range (reply nil, write nothing).
///
/// `WRAP` keeps the low bits of the 64-bit two's complement sum,
/// sign-extended for signed types; `SAT` clamps to the type's minimum or
/// maximum. Also used by [`set_value`] with `incr == 0`.
pub fn incr_field(old: i64, incr: i64, ty: FieldType, ov: Overflow) -> Option<i64> {
    let bits = u32::from(ty.bits);
    let wrapped = || {
        let sum = (old as u64).wrapping_add(incr as u64);
        if bits == 64 {
            sum as i64
        } else if ty.signed && sum >> (bits - 1) & 1 == 1 {
            (sum | (u64::MAX << bits)) as i64
        } else {
            (sum & !(u64::MAX << bits)) as i64
        }
    };
    let max = ty.max();
    // Which way the operation overflows, if at all. The tests mirror Redis's
    // checks, including their 64-bit wrap-around, rather than the exact
    // mathematical range test: see `set_value` for the visible effects.
    let overflow: Option<i64> = if ty.signed {
        let min = -max - 1;
        let max_incr = max.wrapping_sub(old);
        let min_incr = min.wrapping_sub(old);
        let narrow = bits != 64;
        if old > max || (narrow && incr > max_incr) || (old >= 0 && incr > 0 && incr > max_incr) {
            Some(max)
        } else if old < min
            || (narrow && incr < min_incr)
            || (old < 0 && incr < 0 && incr < min_incr)
        {
            Some(min)
        } else {
            None
        }
    } else {
        let value = old as u64;
        let max_incr = (max as u64).wrapping_sub(value) as i64;
        let min_incr = value.wrapping_neg() as i64;
        if value > max as u64 || (incr > 0 && incr > max_incr) {
            Some(max)
        } else if incr < 0 && incr < min_incr {
            Some(0)
        } else {
            None
        }
    };
    match (overflow, ov) {
        (None, _) => Some(old.wrapping_add(incr)),
        (Some(_), Overflow::Wrap) => Some(wrapped()),
        (Some(limit), Overflow::Sat) => Some(limit),
        (Some(_), Overflow::Fail) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(s: &str) -> FieldType {
        FieldType::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn getbit_and_setbit() {
        let mut s = Vec::new();
        assert!(!setbit(&mut s, 7, true));
        assert_eq!(s, [0x01]);
        assert!(setbit(&mut s, 7, true));
        assert!(!setbit(&mut s, 8, true));
        assert_eq!(s, [0x01, 0x80]);
        assert!(getbit(&s, 7));
        assert!(getbit(&s, 8));
        assert!(!getbit(&s, 9));
        assert!(!getbit(&s, 1_000_000));
        assert!(setbit(&mut s, 8, false));
        assert_eq!(s, [0x01, 0x00]);
        assert!(!getbit(b"", u64::MAX));
    }

    #[test]
    fn bit_values_and_offsets() {
        assert_eq!(parse_bit_value(b"1"), Some(true));
        assert_eq!(parse_bit_value(b"0"), Some(false));
        for bad in [&b"01"[..], b"2", b"-1", b"+1", b"", b"true"] {
            assert_eq!(parse_bit_value(bad), None);
        }
        // GETBIT/SETBIT: no '#' form, 0..=2^32-1.
        assert_eq!(parse_offset(b"4294967295", 0), Some(4_294_967_295));
        assert_eq!(parse_offset(b"4294967296", 0), None);
        assert_eq!(parse_offset(b"#1", 0), None);
        assert_eq!(parse_offset(b"-1", 0), None);
        // BITFIELD forms, as observed.
        assert_eq!(parse_offset(b"#1", 64), Some(64));
        assert_eq!(parse_offset(b"#536870911", 8), Some(4_294_967_288));
        assert_eq!(parse_offset(b"#536870912", 8), None);
        assert_eq!(parse_offset(b"#-1", 8), None);
        assert_eq!(parse_offset(b"##1", 8), None);
        assert_eq!(parse_offset(b"#", 8), None);
        assert_eq!(parse_offset(b"01", 8), None);
        assert_eq!(parse_offset(b"#1152921504606846976", 16), Some(0));
        assert_eq!(parse_offset(b"#1152921504606846976", 8), None);
        assert_eq!(parse_offset_with_limit(b"16", 0, 2), None);
        assert_eq!(parse_offset_with_limit(b"15", 0, 2), Some(15));
    }

    #[test]
    fn field_types() {
        assert_eq!(
            ty("i8"),
            FieldType {
                signed: true,
                bits: 8
            }
        );
        assert_eq!(
            ty("u63"),
            FieldType {
                signed: false,
                bits: 63
            }
        );
        assert_eq!(ty("i64").bits, 64);
        assert_eq!(ty("u1").bits, 1);
        for bad in [
            "I8", "U8", "i08", "u64", "i65", "i0", "u0", "i", "x8", "i-1", "i+8", "",
        ] {
            assert_eq!(FieldType::parse(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(Overflow::parse(b"sAt"), Some(Overflow::Sat));
        assert_eq!(Overflow::parse(b"WRAP"), Some(Overflow::Wrap));
        assert_eq!(Overflow::parse(b"fail"), Some(Overflow::Fail));
        assert_eq!(Overflow::parse(b"none"), None);
    }

    #[test]
    fn bitcount_ranges() {
        let s = b"\x00\xff\x0f";
        assert_eq!(bitcount(s, None, false), 12);
        assert_eq!(bitcount(s, Some((0, -1)), false), 12);
        assert_eq!(bitcount(s, Some((0, -1)), true), 12);
        assert_eq!(bitcount(s, Some((1, 1)), false), 8);
        assert_eq!(bitcount(s, Some((-1, -1)), false), 4);
        assert_eq!(bitcount(s, Some((-100, -200)), false), 0);
        assert_eq!(bitcount(s, Some((-100, 0)), false), 0);
        assert_eq!(bitcount(s, Some((-100, 1)), false), 8);
        assert_eq!(bitcount(s, Some((2, 100)), false), 4);
        assert_eq!(bitcount(s, Some((3, 100)), false), 0);
        assert_eq!(bitcount(s, Some((5, 12)), true), 5);
        assert_eq!(bitcount(s, Some((20, 23)), true), 4);
        assert_eq!(bitcount(s, Some((-4, -1)), true), 4);
        assert_eq!(bitcount(s, Some((9, 9)), true), 1);
        assert_eq!(bitcount(b"", Some((0, -1)), false), 0);
        assert_eq!(bitcount(b"", None, true), 0);
    }

    #[test]
    fn bitpos_rules() {
        let s = b"\x00\xff\x0f";
        assert_eq!(bitpos(s, true, None, None, false), 8);
        assert_eq!(bitpos(s, false, None, None, false), 0);
        assert_eq!(bitpos(s, false, Some(1), None, false), 16);
        assert_eq!(bitpos(s, true, Some(2), None, false), 20);
        // No "both negative" shortcut here, unlike BITCOUNT.
        assert_eq!(bitpos(s, false, Some(-100), Some(-200), false), 0);
        assert_eq!(bitpos(s, true, Some(-100), Some(-200), false), -1);
        let ones = b"\xff\xff";
        assert_eq!(bitpos(ones, false, None, None, false), 16);
        assert_eq!(bitpos(ones, false, Some(1), None, false), 16);
        assert_eq!(bitpos(ones, false, Some(0), Some(-1), false), -1);
        assert_eq!(bitpos(ones, false, Some(3), None, true), 16);
        assert_eq!(bitpos(ones, false, Some(3), Some(15), true), -1);
        assert_eq!(bitpos(ones, false, Some(5), None, false), -1);
        // Bit ranges mask the edges of the first and last byte.
        assert_eq!(bitpos(b"\x80\x01", true, Some(1), Some(14), true), -1);
        assert_eq!(bitpos(b"\x80\x01", true, Some(1), Some(15), true), 15);
        assert_eq!(bitpos(b"\x7f\xfe", false, Some(1), Some(14), true), -1);
        assert_eq!(bitpos(b"\x7f\xfe", false, Some(1), None, true), 15);
        // An existing empty string: -1 for both (a missing key differs).
        assert_eq!(bitpos(b"", false, None, None, false), -1);
        assert_eq!(bitpos(b"", true, None, None, false), -1);
    }

    #[test]
    fn bitop_ops() {
        let a: &[u8] = b"\xff\x0f\x01";
        let b: &[u8] = b"\x0f\xff";
        assert_eq!(bitop(BitOp::And, &[a, b]), [0x0f, 0x0f, 0x00]);
        assert_eq!(bitop(BitOp::Or, &[a, b]), [0xff, 0xff, 0x01]);
        assert_eq!(bitop(BitOp::Xor, &[a, b]), [0xf0, 0xf0, 0x01]);
        assert_eq!(bitop(BitOp::Xor, &[a, b, b"", a]), [0x0f, 0xff, 0x00]);
        assert_eq!(bitop(BitOp::Not, &[b]), [0xf0, 0x00]);
        assert_eq!(bitop(BitOp::Not, &[b""]), Vec::<u8>::new());
        assert_eq!(bitop(BitOp::And, &[b"", b""]), Vec::<u8>::new());
        assert_eq!(bitop(BitOp::Or, &[a]), a);
    }

    #[test]
    fn get_and_set_fields() {
        let mut s = Vec::new();
        assert_eq!(
            set_field(
                &mut s,
                0,
                ty("i8"),
                set_value(200, ty("i8"), Overflow::Wrap).unwrap()
            ),
            0
        );
        assert_eq!(get_field(&s, 0, ty("i8")), -56);
        assert_eq!(get_field(&s, 0, ty("u8")), 200);
        assert_eq!(get_field(&s, 0, ty("u4")), 12);
        assert_eq!(get_field(&s, 4, ty("i4")), -8);
        // Unaligned writes that straddle bytes, and growth.
        let mut s = Vec::new();
        set_field(&mut s, 5, ty("u7"), 0x7f);
        assert_eq!(s, [0x07, 0xf0]);
        assert_eq!(get_field(&s, 5, ty("u7")), 127);
        assert_eq!(get_field(&s, 100, ty("i64")), 0);
        set_field(&mut s, 3, ty("i64"), i64::MIN);
        assert_eq!(get_field(&s, 3, ty("i64")), i64::MIN);
        assert_eq!(s.len(), 9);
        set_field(&mut s, 64, ty("u63"), i64::MAX);
        let mut g = vec![1];
        grow_for_field(&mut g, 9, ty("u8"));
        assert_eq!(g, [1, 0, 0]);
        grow_for_field(&mut g, 0, ty("u8"));
        assert_eq!(g.len(), 3);
        assert_eq!(get_field(&s, 64, ty("u63")), i64::MAX);
        assert_eq!(get_field(&s, 64, ty("i64")), -2);
    }

    #[test]
    fn overflow_semantics() {
        use Overflow::*;
        let i8t = ty("i8");
        let u8t = ty("u8");
        // Plain SET wraps; SAT/FAIL apply to SET too.
        assert_eq!(set_value(200, i8t, Wrap), Some(-56));
        assert_eq!(set_value(200, i8t, Sat), Some(127));
        assert_eq!(set_value(200, i8t, Fail), None);
        assert_eq!(set_value(-5, u8t, Sat), Some(255));
        assert_eq!(set_value(-5, u8t, Wrap), Some(251));
        assert_eq!(set_value(256, u8t, Fail), None);
        assert_eq!(set_value(255, u8t, Fail), Some(255));
        // The i64::MIN quirk, as observed.
        let min = i64::MIN;
        assert_eq!(set_value(min, i8t, Sat), Some(127));
        assert_eq!(set_value(min + 127, i8t, Sat), Some(127));
        assert_eq!(set_value(min + 128, i8t, Sat), Some(-128));
        assert_eq!(set_value(min, i8t, Wrap), Some(0));
        assert_eq!(set_value(min + 32767, ty("i16"), Sat), Some(32767));
        assert_eq!(set_value(min + 32768, ty("i16"), Sat), Some(-32768));
        assert_eq!(
            set_value(min + (1 << 62) - 1, ty("i63"), Sat),
            Some((1 << 62) - 1)
        );
        assert_eq!(set_value(min + (1 << 62), ty("i63"), Sat), Some(-(1 << 62)));
        assert_eq!(set_value(min, ty("i64"), Sat), Some(min));
        // INCRBY.
        assert_eq!(incr_field(0, 1000, u8t, Sat), Some(255));
        assert_eq!(incr_field(255, -1000, u8t, Sat), Some(0));
        assert_eq!(incr_field(250, 10, u8t, Wrap), Some(4));
        assert_eq!(incr_field(5, -10, u8t, Wrap), Some(251));
        assert_eq!(incr_field(5, -10, u8t, Fail), None);
        assert_eq!(incr_field(100, 100, i8t, Wrap), Some(-56));
        assert_eq!(incr_field(-100, -100, i8t, Wrap), Some(56));
        assert_eq!(incr_field(-100, -100, i8t, Sat), Some(-128));
        let i64t = ty("i64");
        assert_eq!(incr_field(i64::MAX, 1, i64t, Wrap), Some(i64::MIN));
        assert_eq!(incr_field(i64::MAX, 1, i64t, Sat), Some(i64::MAX));
        assert_eq!(incr_field(i64::MIN, -1, i64t, Sat), Some(i64::MIN));
        assert_eq!(incr_field(i64::MIN, -1, i64t, Wrap), Some(i64::MAX));
        assert_eq!(incr_field(i64::MIN, -1, i64t, Fail), None);
        assert_eq!(incr_field(-1, i64::MIN, i64t, Fail), None);
        assert_eq!(incr_field(0, i64::MIN, i64t, Fail), Some(i64::MIN));
        let u63 = ty("u63");
        assert_eq!(incr_field(i64::MAX, 1, u63, Wrap), Some(0));
        assert_eq!(incr_field(i64::MAX, 1, u63, Sat), Some(i64::MAX));
        assert_eq!(incr_field(0, -1, u63, Wrap), Some(i64::MAX));
        assert_eq!(incr_field(0, -1, u63, Sat), Some(0));
        assert_eq!(incr_field(0, i64::MAX, u63, Fail), Some(i64::MAX));
        let u1 = ty("u1");
        assert_eq!(incr_field(1, 1, u1, Wrap), Some(0));
        let i1 = ty("i1");
        assert_eq!(incr_field(0, 1, i1, Wrap), Some(-1));
        assert_eq!(incr_field(0, 1, i1, Sat), Some(0));
        assert_eq!(incr_field(-1, -1, i1, Sat), Some(-1));
    }
}

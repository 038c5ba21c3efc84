//! Bit operations (provisional; replaced by the full module).

/// BITOP operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitOp {
    /// AND
    And,
    /// OR
    Or,
    /// XOR
    Xor,
    /// NOT
    Not,
}

/// BITFIELD overflow behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Wrap around.
    Wrap,
    /// Saturate.
    Sat,
    /// Fail (nil).
    Fail,
}

/// A bitfield type like i8 or u63.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldType {
    /// Signed.
    pub signed: bool,
    /// Width.
    pub bits: u8,
}

impl FieldType {
    /// Parses "i8", "u63"...
    pub fn parse(s: &[u8]) -> Option<FieldType> {
        let signed = match s.first()? {
            b'i' | b'I' => true,
            b'u' | b'U' => false,
            _ => return None,
        };
        let bits: u8 = std::str::from_utf8(&s[1..]).ok()?.parse().ok()?;
        let ok = if signed {
            (1..=64).contains(&bits)
        } else {
            (1..=63).contains(&bits)
        };
        ok.then_some(FieldType { signed, bits })
    }
}

/// Parses a bitfield offset, with `#n` meaning n * width.
pub fn parse_offset(s: &[u8], bits: u8) -> Option<u64> {
    let (mul, digits) = match s.first() {
        Some(b'#') => (bits as u64, &s[1..]),
        _ => (1, s),
    };
    let v = crate::util::num::parse_i64(digits)?;
    if v < 0 {
        return None;
    }
    let off = (v as u64).checked_mul(mul)?;
    (off + bits as u64 <= 512 * 1024 * 1024 * 8).then_some(off)
}

fn bit(s: &[u8], i: u64) -> u64 {
    s.get((i / 8) as usize)
        .map_or(0, |b| ((b >> (7 - i % 8)) & 1) as u64)
}

/// Reads a field.
pub fn get_field(s: &[u8], offset: u64, ty: FieldType) -> i64 {
    let mut v: u64 = 0;
    for i in 0..ty.bits as u64 {
        v = (v << 1) | bit(s, offset + i);
    }
    if ty.signed && ty.bits < 64 && v >> (ty.bits - 1) & 1 == 1 {
        (v | (u64::MAX << ty.bits)) as i64
    } else {
        v as i64
    }
}

/// Writes a field; returns the old value.
pub fn set_field(s: &mut Vec<u8>, offset: u64, ty: FieldType, value: i64) -> i64 {
    let old = get_field(s, offset, ty);
    let need = ((offset + ty.bits as u64).div_ceil(8)) as usize;
    if s.len() < need {
        s.resize(need, 0);
    }
    let v = value as u64;
    for i in 0..ty.bits as u64 {
        let b = (v >> (ty.bits as u64 - 1 - i)) & 1;
        let pos = offset + i;
        let mask = 0x80u8 >> (pos % 8);
        if b == 1 {
            s[(pos / 8) as usize] |= mask;
        } else {
            s[(pos / 8) as usize] &= !mask;
        }
    }
    old
}

/// old + incr under the overflow policy; None = FAIL.
pub fn incr_field(old: i64, incr: i64, ty: FieldType, ov: Overflow) -> Option<i64> {
    let bits = ty.bits as u32;
    let (min, max): (i128, i128) = if ty.signed {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    let sum = old as i128 + incr as i128;
    if sum >= min && sum <= max {
        return Some(sum as i64);
    }
    match ov {
        Overflow::Fail => None,
        Overflow::Sat => Some(if sum > max { max as i64 } else { min as i64 }),
        Overflow::Wrap => {
            let m = 1i128 << bits;
            let mut w = (sum - min).rem_euclid(m) + min;
            if !ty.signed {
                w = sum.rem_euclid(m);
            }
            Some(w as i64)
        }
    }
}

fn byte_range(len: i64, start: i64, end: i64) -> Option<(i64, i64)> {
    let (mut s, mut e) = (start, end);
    if s < 0 {
        s += len;
    }
    if e < 0 {
        e += len;
    }
    s = s.max(0);
    e = e.max(0);
    if e >= len {
        e = len - 1;
    }
    (s <= e && len > 0).then_some((s, e))
}

/// BITCOUNT.
pub fn bitcount(s: &[u8], range: Option<(i64, i64)>, unit_is_bit: bool) -> i64 {
    let Some((st, en)) = range else {
        return s.iter().map(|b| b.count_ones() as i64).sum();
    };
    let len = if unit_is_bit {
        s.len() as i64 * 8
    } else {
        s.len() as i64
    };
    let Some((a, b)) = byte_range(len, st, en) else {
        return 0;
    };
    if unit_is_bit {
        (a..=b).map(|i| bit(s, i as u64) as i64).sum()
    } else {
        s[a as usize..=b as usize]
            .iter()
            .map(|x| x.count_ones() as i64)
            .sum()
    }
}

/// BITPOS.
pub fn bitpos(
    s: &[u8],
    want: bool,
    start: Option<i64>,
    end: Option<i64>,
    unit_is_bit: bool,
) -> i64 {
    let total = if unit_is_bit {
        s.len() as i64 * 8
    } else {
        s.len() as i64
    };
    let end_given = end.is_some();
    let Some((a, b)) = byte_range(total, start.unwrap_or(0), end.unwrap_or(-1)) else {
        return -1;
    };
    let (first_bit, last_bit) = if unit_is_bit {
        (a, b)
    } else {
        (a * 8, b * 8 + 7)
    };
    for i in first_bit..=last_bit {
        if (bit(s, i as u64) == 1) == want {
            return i;
        }
    }
    if !want && !end_given {
        return last_bit + 1;
    }
    -1
}

/// BITOP.
pub fn bitop(op: BitOp, inputs: &[&[u8]]) -> Vec<u8> {
    let len = inputs.iter().map(|i| i.len()).max().unwrap_or(0);
    (0..len)
        .map(|i| {
            let mut it = inputs.iter().map(|x| x.get(i).copied().unwrap_or(0));
            let first = it.next().unwrap_or(0);
            match op {
                BitOp::Not => !first,
                BitOp::And => it.fold(first, |a, b| a & b),
                BitOp::Or => it.fold(first, |a, b| a | b),
                BitOp::Xor => it.fold(first, |a, b| a ^ b),
            }
        })
        .collect()
}

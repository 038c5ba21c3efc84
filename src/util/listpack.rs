//! Redis's listpack: the compact array of strings and integers that Redis
//! 7.0 keeps small hashes, sorted sets and list nodes in, and that its RDB
//! files and DUMP payloads carry as one string. cairn never stores data
//! this way; it builds listpacks to hand values to Redis and reads them to
//! take values from it.
//!
//! Layout: total bytes (u32 LE), element count (u16 LE, 65535 = "count
//! them"), the entries, then 0xFF. Each entry is an encoding byte (with the
//! length or value packed into it), its data, and its own size written
//! backwards so the array can be walked from the end.

use super::num::parse_i64;

/// The largest integer the one-byte encoding holds.
const INT_7BIT_MAX: i64 = 127;

/// An element of a listpack: Redis stores strings that read as integers as
/// integers, and hands them back as their decimal text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A byte string.
    Str(Vec<u8>),
    /// An integer.
    Int(i64),
}

impl Item {
    /// The element as Redis would reply with it.
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Item::Str(s) => s,
            Item::Int(i) => i.to_string().into_bytes(),
        }
    }
}

/// Builds a listpack by appending elements.
pub struct Builder {
    buf: Vec<u8>,
    count: usize,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// An empty listpack.
    pub fn new() -> Builder {
        Builder {
            buf: vec![0; 6],
            count: 0,
        }
    }

    /// Number of elements so far.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes the finished listpack will take (header, entries, end byte),
    /// which is what Redis's quicklist compares with its node size limit.
    pub fn bytes(&self) -> usize {
        self.buf.len() + 1
    }

    /// Appends an element, as an integer when it reads as one.
    pub fn push(&mut self, s: &[u8]) {
        match parse_i64(s) {
            Some(v) => self.push_int(v),
            None => self.push_str(s),
        }
    }

    /// Appends an integer in the smallest encoding that holds it.
    pub fn push_int(&mut self, v: i64) {
        let start = self.buf.len();
        let b = &mut self.buf;
        if (0..=INT_7BIT_MAX).contains(&v) {
            b.push(v as u8);
        } else if (-4096..4096).contains(&v) {
            let u = if v < 0 { (1u64 << 13) as i64 + v } else { v } as u64;
            b.extend_from_slice(&[0xC0 | (u >> 8) as u8, u as u8]);
        } else if (-32768..32768).contains(&v) {
            b.push(0xF1);
            b.extend_from_slice(&(v as i16).to_le_bytes());
        } else if (-(1 << 23)..(1 << 23)).contains(&v) {
            b.push(0xF2);
            b.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
        } else if i32::try_from(v).is_ok() {
            b.push(0xF3);
            b.extend_from_slice(&(v as i32).to_le_bytes());
        } else {
            b.push(0xF4);
            b.extend_from_slice(&v.to_le_bytes());
        }
        self.finish_entry(start);
    }

    /// Appends a string as a string.
    pub fn push_str(&mut self, s: &[u8]) {
        let start = self.buf.len();
        let b = &mut self.buf;
        let n = s.len();
        if n < 64 {
            b.push(0x80 | n as u8);
        } else if n < 4096 {
            b.extend_from_slice(&[0xE0 | (n >> 8) as u8, n as u8]);
        } else {
            b.push(0xF0);
            b.extend_from_slice(&(n as u32).to_le_bytes());
        }
        b.extend_from_slice(s);
        self.finish_entry(start);
    }

    /// Writes the entry's size after it (the back-length), 7 bits per byte
    /// with the high bit set on all but the first byte written.
    fn finish_entry(&mut self, start: usize) {
        let l = self.buf.len() - start;
        let mut groups = vec![(l & 127) as u8];
        let mut rest = l >> 7;
        while rest > 0 {
            groups.push((rest & 127) as u8);
            rest >>= 7;
        }
        // groups[0] is the lowest 7 bits; it is written last, and every
        // byte but the most significant carries the continuation bit.
        for (i, g) in groups.iter().rev().enumerate() {
            self.buf.push(if i == 0 { *g } else { g | 128 });
        }
        self.count += 1;
    }

    /// Appends every element of `other` after this one's.
    pub fn append(&mut self, other: Builder) {
        self.buf.extend_from_slice(&other.buf[6..]);
        self.count += other.count;
    }

    /// The finished listpack.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.push(0xFF);
        let total = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&total.to_le_bytes());
        let count = self.count.min(65535) as u16;
        self.buf[4..6].copy_from_slice(&count.to_le_bytes());
        self.buf
    }
}

/// Reads every element of a listpack; `None` if it is malformed (sizes
/// that disagree, a missing end byte, an unknown encoding).
pub fn parse(lp: &[u8]) -> Option<Vec<Item>> {
    if lp.len() < 7 || u32::from_le_bytes(lp[..4].try_into().ok()?) as usize != lp.len() {
        return None;
    }
    let declared = u16::from_le_bytes([lp[4], lp[5]]);
    let mut out = Vec::new();
    let mut i = 6;
    loop {
        let b = *lp.get(i)?;
        if b == 0xFF {
            break;
        }
        let start = i;
        let take = |from: usize, n: usize| lp.get(from..from + n);
        let item = if b & 0x80 == 0 {
            i += 1;
            Item::Int(b as i64)
        } else if b & 0xC0 == 0x80 {
            let n = (b & 0x3F) as usize;
            let s = take(i + 1, n)?.to_vec();
            i += 1 + n;
            Item::Str(s)
        } else if b & 0xE0 == 0xC0 {
            let u = (((b & 0x1F) as i64) << 8) | *lp.get(i + 1)? as i64;
            i += 2;
            Item::Int(if u >= 1 << 12 { u - (1 << 13) } else { u })
        } else if b & 0xF0 == 0xE0 {
            let n = (((b & 0x0F) as usize) << 8) | *lp.get(i + 1)? as usize;
            let s = take(i + 2, n)?.to_vec();
            i += 2 + n;
            Item::Str(s)
        } else {
            match b {
                0xF0 => {
                    let n = u32::from_le_bytes(take(i + 1, 4)?.try_into().ok()?) as usize;
                    let s = take(i + 5, n)?.to_vec();
                    i += 5 + n;
                    Item::Str(s)
                }
                0xF1 => {
                    let v = i16::from_le_bytes(take(i + 1, 2)?.try_into().ok()?);
                    i += 3;
                    Item::Int(v as i64)
                }
                0xF2 => {
                    let t = take(i + 1, 3)?;
                    // Sign-extend the 24-bit value.
                    let v = i32::from_le_bytes([0, t[0], t[1], t[2]]) >> 8;
                    i += 4;
                    Item::Int(v as i64)
                }
                0xF3 => {
                    let v = i32::from_le_bytes(take(i + 1, 4)?.try_into().ok()?);
                    i += 5;
                    Item::Int(v as i64)
                }
                0xF4 => {
                    let v = i64::from_le_bytes(take(i + 1, 8)?.try_into().ok()?);
                    i += 9;
                    Item::Int(v)
                }
                _ => return None,
            }
        };
        // Skip the back-length, checking it names this entry's size.
        let l = i - start;
        let back = match l {
            0..=127 => 1,
            128..=16382 => 2,
            16383..=2097150 => 3,
            2097151..=268435454 => 4,
            _ => 5,
        };
        lp.get(i..i + back)?;
        i += back;
        out.push(item);
    }
    if i + 1 != lp.len() || (declared != 65535 && declared as usize != out.len()) {
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every encoding round-trips, and the bytes of a small listpack are
    /// the ones Redis writes (`RPUSH l a 1 -1 1000` DUMPs this node).
    #[test]
    fn builds_and_parses() {
        let mut b = Builder::new();
        for s in [&b"a"[..], b"1", b"-1", b"1000"] {
            b.push(s);
        }
        let lp = b.finish();
        assert_eq!(
            lp,
            [0x12, 0, 0, 0, 4, 0, 0x81, b'a', 2, 1, 1, 0xDF, 0xFF, 2, 0xC3, 0xE8, 2, 0xFF]
        );
        let values: Vec<i64> = vec![
            0,
            127,
            128,
            -4096,
            4095,
            -32768,
            32767,
            -(1 << 23),
            (1 << 23) - 1,
            i32::MIN as i64,
            i32::MAX as i64,
            i64::MIN,
            i64::MAX,
        ];
        let long = vec![b'x'; 5000];
        let mid = vec![b'y'; 300];
        let mut b = Builder::new();
        for v in &values {
            b.push_int(*v);
        }
        b.push(&long);
        b.push(&mid);
        b.push(b"-0");
        let parsed = parse(&b.finish()).unwrap();
        let mut want: Vec<Item> = values.iter().map(|v| Item::Int(*v)).collect();
        want.push(Item::Str(long));
        want.push(Item::Str(mid));
        want.push(Item::Str(b"-0".to_vec()));
        assert_eq!(parsed, want);
    }

    #[test]
    fn rejects_damage() {
        let mut b = Builder::new();
        b.push(b"hello");
        let lp = b.finish();
        assert!(parse(&lp[..lp.len() - 1]).is_none());
        let mut bad = lp.clone();
        bad[4] = 3;
        assert!(parse(&bad).is_none());
        let mut bad = lp;
        bad[6] = 0xF5;
        assert!(parse(&bad).is_none());
    }
}

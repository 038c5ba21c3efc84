//! Readers for the compact encodings older Redis versions wrote into RDB
//! files and DUMP payloads (ziplist, zipmap) and for the intset that Redis
//! 7.0 still uses for small integer sets (which cairn also writes).
//! RESTORE and RDB import must accept every one of them.

use super::listpack::Item;

/// Reads every element of a ziplist; `None` if it is malformed.
///
/// Layout: total bytes (u32 LE), offset of the last entry (u32 LE), count
/// (u16 LE, 65535 = "count them"), entries, 0xFF. An entry is the previous
/// entry's size (1 byte, or 0xFE and a u32), an encoding, and the data.
pub fn parse_ziplist(zl: &[u8]) -> Option<Vec<Item>> {
    if zl.len() < 11 || u32::from_le_bytes(zl[..4].try_into().ok()?) as usize != zl.len() {
        return None;
    }
    let declared = u16::from_le_bytes([zl[8], zl[9]]);
    let tail = u32::from_le_bytes(zl[4..8].try_into().ok()?) as usize;
    let mut out = Vec::new();
    let mut i = 10;
    // Redis checks, when it converts a ziplist, that each entry records
    // its predecessor's size and the header points at the last entry.
    let (mut prev_start, mut prev_len) = (10, 0);
    loop {
        let b = *zl.get(i)?;
        if b == 0xFF {
            break;
        }
        let start = i;
        let recorded = if b == 0xFE {
            u32::from_le_bytes(zl.get(i + 1..i + 5)?.try_into().ok()?) as usize
        } else {
            b as usize
        };
        if recorded != prev_len {
            return None;
        }
        i += if b == 0xFE { 5 } else { 1 };
        let enc = *zl.get(i)?;
        let take = |from: usize, n: usize| zl.get(from..from + n);
        let item = match enc >> 6 {
            0 => {
                let n = (enc & 0x3F) as usize;
                let s = take(i + 1, n)?.to_vec();
                i += 1 + n;
                Item::Str(s)
            }
            1 => {
                let n = (((enc & 0x3F) as usize) << 8) | *zl.get(i + 1)? as usize;
                let s = take(i + 2, n)?.to_vec();
                i += 2 + n;
                Item::Str(s)
            }
            2 => {
                let n = u32::from_be_bytes(take(i + 1, 4)?.try_into().ok()?) as usize;
                let s = take(i + 5, n)?.to_vec();
                i += 5 + n;
                Item::Str(s)
            }
            _ => {
                let (v, n) = match enc {
                    0xC0 => (
                        i16::from_le_bytes(take(i + 1, 2)?.try_into().ok()?) as i64,
                        2,
                    ),
                    0xD0 => (
                        i32::from_le_bytes(take(i + 1, 4)?.try_into().ok()?) as i64,
                        4,
                    ),
                    0xE0 => (i64::from_le_bytes(take(i + 1, 8)?.try_into().ok()?), 8),
                    0xF0 => {
                        let t = take(i + 1, 3)?;
                        ((i32::from_le_bytes([0, t[0], t[1], t[2]]) >> 8) as i64, 3)
                    }
                    0xFE => (*zl.get(i + 1)? as i8 as i64, 1),
                    0xF1..=0xFD => ((enc & 0x0F) as i64 - 1, 0),
                    _ => return None,
                };
                i += 1 + n;
                Item::Int(v)
            }
        };
        out.push(item);
        (prev_start, prev_len) = (start, i - start);
    }
    if i + 1 != zl.len()
        || tail != prev_start
        || (declared != 65535 && declared as usize != out.len())
    {
        return None;
    }
    Some(out)
}

/// Reads a zipmap (the hash encoding of Redis before 2.6) into its fields
/// and values; `None` if it is malformed.
///
/// Layout: a count byte, then `len key len free value free-bytes` per
/// pair, then 0xFF. A length is one byte below 254, or 254 and a u32 LE.
pub fn parse_zipmap(zm: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut i = 1;
    let len = |i: &mut usize| -> Option<usize> {
        let b = *zm.get(*i)?;
        if b < 254 {
            *i += 1;
            Some(b as usize)
        } else if b == 254 {
            let n = u32::from_le_bytes(zm.get(*i + 1..*i + 5)?.try_into().ok()?);
            *i += 5;
            Some(n as usize)
        } else {
            None
        }
    };
    let mut out = Vec::new();
    loop {
        if *zm.get(i)? == 0xFF {
            break;
        }
        let kl = len(&mut i)?;
        let k = zm.get(i..i + kl)?.to_vec();
        i += kl;
        let vl = len(&mut i)?;
        let free = *zm.get(i)? as usize;
        i += 1;
        let v = zm.get(i..i + vl)?.to_vec();
        i += vl + free;
        out.push((k, v));
    }
    (i + 1 == zm.len()).then_some(out)
}

/// Reads an intset: element width in bytes (u32 LE: 2, 4 or 8), count
/// (u32 LE), then the values in ascending order, little-endian. `None` if
/// malformed, unsorted or with repeats.
pub fn parse_intset(is: &[u8]) -> Option<Vec<i64>> {
    let width = u32::from_le_bytes(is.get(..4)?.try_into().ok()?) as usize;
    let count = u32::from_le_bytes(is.get(4..8)?.try_into().ok()?) as usize;
    if !matches!(width, 2 | 4 | 8) || is.len() != 8 + width.checked_mul(count)? {
        return None;
    }
    let out: Vec<i64> = is[8..]
        .chunks(width)
        .map(|c| match width {
            2 => i16::from_le_bytes([c[0], c[1]]) as i64,
            4 => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64,
            _ => i64::from_le_bytes(c.try_into().unwrap()),
        })
        .collect();
    out.windows(2).all(|w| w[0] < w[1]).then_some(out)
}

/// Builds an intset of distinct values (any order) in the narrowest width
/// that holds them all, as Redis does.
pub fn build_intset(values: &[i64]) -> Vec<u8> {
    let mut v = values.to_vec();
    v.sort_unstable();
    v.dedup();
    let width = if v.iter().all(|x| i16::try_from(*x).is_ok()) {
        2
    } else if v.iter().all(|x| i32::try_from(*x).is_ok()) {
        4
    } else {
        8
    };
    let mut out = Vec::with_capacity(8 + width * v.len());
    out.extend_from_slice(&(width as u32).to_le_bytes());
    out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    for x in v {
        out.extend_from_slice(&x.to_le_bytes()[..width]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SADD s 1 2 -5` in Redis 7.0.15 dumps this intset.
    #[test]
    fn intset_like_redis() {
        let redis = [2, 0, 0, 0, 3, 0, 0, 0, 0xfb, 0xff, 1, 0, 2, 0];
        assert_eq!(build_intset(&[1, 2, -5]), redis);
        assert_eq!(parse_intset(&redis), Some(vec![-5, 1, 2]));
        assert_eq!(parse_intset(&redis[..13]), None);
        let wide = build_intset(&[1, 1 << 40]);
        assert_eq!(parse_intset(&wide), Some(vec![1, 1 << 40]));
    }

    /// A ziplist with each encoding, laid out by hand from the format.
    #[test]
    fn reads_ziplists() {
        let mut body = Vec::new();
        // "ab" (6-bit string), 5 (immediate), -2 (int8), 1000 (int16).
        body.extend_from_slice(&[0, 0x02, b'a', b'b']);
        body.extend_from_slice(&[4, 0xF6]);
        body.extend_from_slice(&[2, 0xFE, 0xFE]);
        body.extend_from_slice(&[3, 0xC0, 0xE8, 0x03]);
        let total = 10 + body.len() + 1;
        let mut zl = (total as u32).to_le_bytes().to_vec();
        zl.extend_from_slice(&(10 + 4 + 2 + 3u32).to_le_bytes());
        zl.extend_from_slice(&4u16.to_le_bytes());
        zl.extend_from_slice(&body);
        zl.push(0xFF);
        assert_eq!(
            parse_ziplist(&zl),
            Some(vec![
                Item::Str(b"ab".to_vec()),
                Item::Int(5),
                Item::Int(-2),
                Item::Int(1000)
            ])
        );
        assert_eq!(parse_ziplist(&zl[..zl.len() - 1]), None);
    }

    #[test]
    fn reads_zipmaps() {
        let zm = [2, 1, b'a', 2, 0, b'x', b'y', 1, b'b', 1, 1, b'z', 0, 0xFF];
        assert_eq!(
            parse_zipmap(&zm),
            Some(vec![
                (b"a".to_vec(), b"xy".to_vec()),
                (b"b".to_vec(), b"z".to_vec())
            ])
        );
        assert_eq!(parse_zipmap(&zm[..zm.len() - 1]), None);
    }
}

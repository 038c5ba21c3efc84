//! LZF, the compression Redis applies to RDB strings longer than 20 bytes.
//!
//! The compressor makes the same choices as the one Redis links (liblzf
//! with a 2^16-slot hash of the next three bytes, "very fast" mode), so a
//! value cairn serializes is byte-for-byte what Redis would write: DUMP
//! payloads and RDB files compare equal, not just equivalent.
//!
//! The format: a control byte below 32 starts a run of `ctrl + 1` literal
//! bytes; otherwise its top three bits are a back-reference length minus 2
//! (7 = read one more length byte) and its low five bits, with the next
//! byte, the distance back minus 1.

/// Longest literal run one control byte can announce.
const MAX_LIT: usize = 1 << 5;
/// Farthest a back reference can reach.
const MAX_OFF: usize = 1 << 13;
/// Longest back reference.
const MAX_REF: usize = (1 << 8) + (1 << 3);
/// log2 of the hash table's slot count.
const HLOG: u32 = 16;

/// The hash slot of the three bytes at `p` given the rolling value `h`
/// (which holds them in its low 24 bits).
fn slot(h: u32) -> usize {
    ((h >> (3 * 8 - HLOG)).wrapping_sub(h.wrapping_mul(5)) & ((1 << HLOG) - 1)) as usize
}

/// The compressed bytes with the literal run being filled.
struct Output {
    out: Vec<u8>,
    /// Index of the open run's control byte.
    run: usize,
    /// Literals in the open run.
    lit: usize,
}

impl Output {
    /// Opens a literal run (its control byte is written when it closes).
    fn start_run(&mut self) {
        self.run = self.out.len();
        self.lit = 0;
        self.out.push(0);
    }

    /// Adds a literal byte; a full run is closed and a new one opened.
    fn literal(&mut self, b: u8) {
        self.lit += 1;
        self.out.push(b);
        if self.lit == MAX_LIT {
            self.out[self.run] = (MAX_LIT - 1) as u8;
            self.start_run();
        }
    }

    /// Closes the open run, or takes back its control byte if it is empty.
    fn close_run(&mut self) {
        if self.lit > 0 {
            self.out[self.run] = (self.lit - 1) as u8;
        } else {
            self.out.pop();
        }
    }
}

/// Compresses `input` into at most `max_out` bytes, or `None` when the
/// result would not fit (Redis then stores the string as it is).
pub fn compress(input: &[u8], max_out: usize) -> Option<Vec<u8>> {
    let n = input.len();
    if n == 0 || max_out == 0 {
        return None;
    }
    // Positions are stored plus one so that 0 means "never seen"; liblzf
    // refuses references to position 0 anyway.
    let mut table = vec![0u32; 1 << HLOG];
    let mut o = Output {
        out: Vec::with_capacity(max_out.min(n + n / 16 + 8)),
        run: 0,
        lit: 0,
    };
    o.start_run();
    let mut ip = 0usize;
    let mut h: u32 = if n >= 2 {
        ((input[0] as u32) << 8) | input[1] as u32
    } else {
        0
    };
    while n >= 3 && ip < n - 2 {
        h = (h << 8) | input[ip + 2] as u32;
        let s = slot(h);
        let seen = table[s] as usize;
        table[s] = ip as u32 + 1;
        let reference = seen.checked_sub(1).filter(|&r| {
            r > 0
                && r < ip
                && ip - r - 1 < MAX_OFF
                && input[r + 2] == input[ip + 2]
                && input[r] == input[ip]
                && input[r + 1] == input[ip + 1]
        });
        let Some(r) = reference else {
            if o.out.len() >= max_out {
                return None;
            }
            o.literal(input[ip]);
            ip += 1;
            continue;
        };
        let off = ip - r - 1;
        let maxlen = (n - ip - 2).min(MAX_REF);
        // liblzf checks the room for a reference (and a new run byte)
        // conservatively before it knows the length.
        let used = o.out.len();
        if used + 3 + 1 >= max_out && used - usize::from(o.lit == 0) + 3 + 1 >= max_out {
            return None;
        }
        o.close_run();
        // liblzf compares the first 16 further bytes without looking at
        // `maxlen` (it was computed with a bias of 2, so they are always in
        // the input), then one at a time up to it: a long match may end
        // past `maxlen`, a short one never does.
        let mut len = 2;
        let mut ended = false;
        if maxlen > 16 {
            for _ in 0..16 {
                len += 1;
                if input[r + len] != input[ip + len] {
                    ended = true;
                    break;
                }
            }
        }
        if !ended {
            loop {
                len += 1;
                if len >= maxlen || input[r + len] != input[ip + len] {
                    break;
                }
            }
        }
        let len = len - 2;
        ip += 1;
        if len < 7 {
            o.out.push(((off >> 8) + (len << 5)) as u8);
        } else {
            o.out.push(((off >> 8) + (7 << 5)) as u8);
            o.out.push((len - 7) as u8);
        }
        o.out.push(off as u8);
        o.start_run();
        ip += len + 1;
        if ip >= n - 2 {
            break;
        }
        // Hash the two positions just before the new one, as liblzf's
        // "very fast" mode does, so the next match can start there.
        ip -= 2;
        h = ((input[ip] as u32) << 8) | input[ip + 1] as u32;
        for _ in 0..2 {
            h = (h << 8) | input[ip + 2] as u32;
            table[slot(h)] = ip as u32 + 1;
            ip += 1;
        }
    }
    if o.out.len() + 3 > max_out {
        return None;
    }
    for &b in &input[ip..] {
        o.literal(b);
    }
    o.close_run();
    Some(o.out)
}

/// Decompresses LZF data into exactly `len` bytes; `None` if the data is
/// malformed or does not expand to `len`.
pub fn decompress(input: &[u8], len: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(len);
    let mut i = 0;
    while i < input.len() {
        let ctrl = input[i] as usize;
        i += 1;
        if ctrl < 32 {
            let run = ctrl + 1;
            out.extend_from_slice(input.get(i..i + run)?);
            i += run;
        } else {
            let mut n = ctrl >> 5;
            if n == 7 {
                n += *input.get(i)? as usize;
                i += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + *input.get(i)? as usize + 1;
            i += 1;
            let start = out.len().checked_sub(back)?;
            // Byte by byte: a reference may overlap what it produces.
            for k in 0..n + 2 {
                let b = out[start + k];
                out.push(b);
            }
        }
        if out.len() > len {
            return None;
        }
    }
    (out.len() == len).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The compressed string inside a FUNCTION DUMP payload recorded from
    /// Redis 7.0.15 (see util::rdb's test) is exactly what we produce.
    #[test]
    fn compresses_like_redis() {
        let code = "#!lua name=lib\nredis.register_function('f', function() return 1 end)\nredis.register_function('g', function() return 1 end)";
        let payload = hex("f5c3404c407a1f23216c7561206e616d653d6c69620a72656469732e72656769737465725f66750b6e6374696f6e282766272c20e0000d0e292072657475726e203120656e6429e011350067e010350164290a00fa64bfbc25e8af69");
        // Opcode, LZF marker, compressed length 76, original length 122.
        assert_eq!(&payload[..6], &[0xf5, 0xc3, 0x40, 76, 0x40, 122]);
        let ours = compress(code.as_bytes(), code.len() - 4).unwrap();
        assert_eq!(ours, &payload[6..6 + 76]);
        assert_eq!(decompress(&ours, code.len()).unwrap(), code.as_bytes());
    }

    #[test]
    fn incompressible_input_does_not_fit() {
        let data: Vec<u8> = (0..64u32).map(|i| (i * 97 % 251) as u8).collect();
        assert_eq!(compress(&data, data.len() - 4), None);
    }

    #[test]
    fn round_trips() {
        for data in [
            b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".to_vec(),
            (0..5000u32).map(|i| (i % 7) as u8).collect(),
            (0..3000u32).map(|i| (i * 31 % 256) as u8).collect(),
            b"abcabcabcabcXabcabc".repeat(40),
        ] {
            let c = compress(&data, data.len() + 64).unwrap();
            assert_eq!(decompress(&c, data.len()).unwrap(), data);
        }
    }

    #[test]
    fn back_references_expand() {
        // "abcabcabcabc": 3 literals, then a reference 3 back, 9 long.
        let packed = [2, b'a', b'b', b'c', (7 << 5), 0, 2];
        assert_eq!(
            decompress(&packed, 12).as_deref(),
            Some(&b"abcabcabcabc"[..])
        );
        assert_eq!(decompress(&packed, 11), None);
    }
}

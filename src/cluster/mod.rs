//! Cluster slots (which of the 16384 slots a key hashes to, and which shard
//! owns a slot) and cluster mode: the shared topology (`topology`), this
//! node's part in it (`node`), its store (`etcd`), routing (`routing`) and
//! the rows a slot move streams (`rows`).

pub mod bus;
pub mod etcd;
pub mod node;
pub mod routing;
pub mod rows;
pub mod topology;

/// Number of hash slots, as in Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The slot of a key: CRC16-XMODEM of the key, or of its `{hash tag}` when the
/// key has a non-empty one, masked to 14 bits (Redis Cluster's rule).
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    crc16_xmodem(hashed) & (SLOTS - 1)
}

/// CRC16-XMODEM (polynomial 0x1021, initial value 0, no reflection), the
/// checksum Redis Cluster hashes keys with, eight bytes a step.
///
/// The byte-at-a-time table form (the `crc16` crate's, which the tests
/// check this against) makes each byte's table load wait for the previous
/// byte's result: a key's two slot computations on the way of a pipelined
/// GET were 4.8% of the server's time. Here the eight loads of a step are
/// independent. The checksum is linear with a zero initial value: the
/// running checksum folds into the step's first two bytes, and a byte
/// followed by `j` zero bytes contributes `SLICES[j][byte]` to the result.
pub fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc = 0u16;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let [hi, lo] = crc.to_be_bytes();
        let t = &SLICES;
        crc = t[7][(w[0] ^ hi) as usize]
            ^ t[6][(w[1] ^ lo) as usize]
            ^ t[5][w[2] as usize]
            ^ t[4][w[3] as usize]
            ^ t[3][w[4] as usize]
            ^ t[2][w[5] as usize]
            ^ t[1][w[6] as usize]
            ^ t[0][w[7] as usize];
    }
    for &b in words.remainder() {
        crc = (crc << 8) ^ SLICES[0][((crc >> 8) as u8 ^ b) as usize];
    }
    crc
}

/// `SLICES[j][b]`: the CRC16-XMODEM of byte `b` followed by `j` zero
/// bytes.
static SLICES: [[u16; 256]; 8] = slices();

const fn slices() -> [[u16; 256]; 8] {
    let mut t = [[0u16; 256]; 8];
    let mut b = 0;
    while b < 256 {
        // One byte through the register, bit by bit.
        let mut c = (b as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 0x8000 != 0 {
                (c << 1) ^ 0x1021
            } else {
                c << 1
            };
            bit += 1;
        }
        t[0][b] = c;
        b += 1;
    }
    // A zero byte more: shift the checksum out a byte and fold its top
    // byte back in through the one-byte table.
    let mut j = 1;
    while j < 8 {
        let mut b = 0;
        while b < 256 {
            let prev = t[j - 1][b];
            t[j][b] = (prev << 8) ^ t[0][(prev >> 8) as usize];
            b += 1;
        }
        j += 1;
    }
    t
}

/// The part of the key between the first `{` and the next `}`, if non-empty.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let close = key[open + 1..].iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// The shard owning `slot` when `shards` shards split the slots into
/// contiguous ranges.
pub fn shard_of_slot(slot: u16, shards: usize) -> usize {
    slot as usize * shards / SLOTS as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // Values from CLUSTER KEYSLOT on Redis.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"123456789"), 0x31C3 & 0x3FFF);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(
            key_slot(b"{}foo"),
            crc16::State::<crc16::XMODEM>::calculate(b"{}foo") & 0x3FFF
        );
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    }

    /// The sliced checksum agrees with the `crc16` crate's for every
    /// length around its eight-byte steps, on varied bytes.
    #[test]
    fn sliced_crc_matches_the_byte_at_a_time_one() {
        let data: Vec<u8> = (0..200u32)
            .map(|i| (i * 73 + 11) as u8 ^ (i >> 3) as u8)
            .collect();
        for start in 0..9 {
            for len in 0..=data.len() - start {
                let d = &data[start..start + len];
                assert_eq!(
                    crc16_xmodem(d),
                    crc16::State::<crc16::XMODEM>::calculate(d),
                    "{start}+{len}"
                );
            }
        }
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
    }

    #[test]
    fn shards_own_contiguous_ranges() {
        assert_eq!(shard_of_slot(0, 4), 0);
        assert_eq!(shard_of_slot(16383, 4), 3);
        assert_eq!(shard_of_slot(4095, 4), 0);
        assert_eq!(shard_of_slot(4096, 4), 1);
        assert_eq!(shard_of_slot(16383, 1), 0);
    }
}

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
    crc16::State::<crc16::XMODEM>::calculate(hashed) & (SLOTS - 1)
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

    #[test]
    fn shards_own_contiguous_ranges() {
        assert_eq!(shard_of_slot(0, 4), 0);
        assert_eq!(shard_of_slot(16383, 4), 3);
        assert_eq!(shard_of_slot(4095, 4), 0);
        assert_eq!(shard_of_slot(4096, 4), 1);
        assert_eq!(shard_of_slot(16383, 1), 0);
    }
}

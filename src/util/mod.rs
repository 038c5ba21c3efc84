//! Redis-exact helpers with no dependencies: geohash arithmetic, glob matching, number parsing and formatting, bit operations, LCS, RDB payload pieces.
pub mod bits;
pub mod geohash;
pub mod glob;
pub mod hll;
pub mod lcs;
pub mod listpack;
pub mod lzf;
pub mod num;
pub mod rdb;
pub mod stripe;
pub mod ziplist;

/// A new random id of 40 hex characters, the shape of Redis's run id,
/// replication id and cluster node ids.
pub fn hex_id() -> String {
    let bytes: [u8; 20] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A small deterministic generator for tests (xorshift64): each call
/// `next(n)` gives a number in `0..n`.
#[cfg(test)]
pub(crate) fn test_rng(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

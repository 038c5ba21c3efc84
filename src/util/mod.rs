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

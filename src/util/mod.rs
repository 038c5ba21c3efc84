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
pub mod ziplist;

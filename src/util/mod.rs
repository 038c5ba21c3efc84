//! Redis-exact helpers with no dependencies: glob matching, number parsing and formatting, bit operations, LCS, RDB payload pieces.
pub mod bits;
pub mod glob;
pub mod hll;
pub mod lcs;
pub mod num;
pub mod rdb;

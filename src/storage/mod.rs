//! Storage: the encoding of DESIGN.md on redb tables, the write path over
//! them (shard log, write buffers, background writer), and the keyspace
//! rules every command relies on (lazy expiry, one `ttl` row per expiring
//! key, O(1) deletion through `gc` rows). Builds no replies.

pub mod budget;
pub mod buffer;
pub mod encoding;
pub mod filter;
pub mod group;
pub mod journal;
pub mod keyspace;
pub mod merge;
pub mod pools;
mod rowcache;
mod rowmap;
pub mod rowops;
pub mod run;
pub mod store;
pub mod tables;
pub mod vlog;
pub mod wal;

pub use encoding::{KeyType, Meta, MetaBody};
pub use store::Store;
pub use tables::{KvRead, ReadCtx, RowOp, ShardState, StoreError, Table, WriteCtx};

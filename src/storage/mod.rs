//! Storage: the encoding of DESIGN.md on redb tables, and the keyspace rules
//! every command relies on (lazy expiry, one `ttl` row per expiring key, O(1)
//! deletion through `gc` rows). Builds no replies.

pub mod encoding;
pub mod journal;
pub mod keyspace;
pub mod tables;

pub use encoding::{KeyType, Meta, MetaBody};
pub use tables::{KvRead, ReadCtx, RowOp, ShardState, StoreError, Table, WriteCtx};

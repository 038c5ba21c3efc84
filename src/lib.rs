//! cairn: a disk-backed, Redis-compatible server.
//!
//! # Layout
//! * [`acl`] — ACL users, their rules, the permission check, the ACL LOG.
//! * [`config`] — config.toml fields, defaults, command-line overrides.
//! * [`protocol`] — RESP decoding (redis-protocol + inline) and reply encoding.
//! * [`net`] — listener, connection tasks, per-client session state.
//! * [`command`] — the command table, argument helpers, COMMAND INFO/DOCS.
//! * [`families`] — command implementations: parsing on the connection,
//!   shard-side closures for the data.
//! * [`storage`] — the on-disk encoding on redb and the keyspace rules.
//! * [`shard`] — shard actors (group commit), reaper, multi-shard coordinator.
//! * [`cluster`] — key slots and slot-to-shard mapping.
//! * [`pubsub`] — channel, pattern and shard-channel subscribers, message
//!   delivery to connections, output buffer limits.
//! * [`server`] — state shared by all connections.
//! * [`util`] — Redis-exact helpers: glob matching, number parsing and
//!   formatting, bit operations, LCS.
//! * [`logging`] — the server log: Redis's loglevel names, logfile, and
//!   CONFIG SET loglevel while running.
//! * [`run`] — starting and stopping a server (used by main and the tests).
//! * [`scripting`] — the Lua engine behind EVAL and FUNCTION: sandbox, `redis`
//!   API, reply conversions, cjson/cmsgpack/bit/struct.

/// mimalloc instead of glibc's malloc: every op allocates row keys and
/// values and redb allocates its pages; glibc's free-list upkeep
/// (consolidating, unlinking chunks) took ~20% of a shard thread under RPUSH.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod acl;
pub mod cluster;
pub mod command;
pub mod config;
pub mod families;
pub mod logging;
pub mod net;
pub mod protocol;
pub mod pubsub;
pub mod rdb;
pub mod run;
pub mod scripting;
pub mod server;
pub mod shard;
pub mod storage;
pub mod util;

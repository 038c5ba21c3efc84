//! MEMORY USAGE / STATS / DOCTOR / MALLOC-STATS / PURGE / HELP, and the
//! process memory figures INFO's memory section shares with them.
//!
//! cairn keeps its data on disk: memory holds redb's page cache (bounded by
//! `cache_mb` per shard), client buffers and the Lua engine, not one object
//! per key as Redis does. The figures are the allocator's own (mimalloc's
//! committed memory stands for Redis's `used_memory`), and MEMORY USAGE
//! measures a key's rows, which is what it costs on disk and, while its
//! pages are hot, in the page cache.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::OnceLock;

use crate::command::args::{error, int, is, Args, SYNTAX};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::server::Server;
use crate::storage::encoding::{self, KeyType, MetaBody};
use crate::storage::keyspace;
use crate::storage::{KvRead, Table};

/// What a B-tree leaf spends on each row besides its key and value bytes:
/// redb keeps an end offset for the key and one for the value (u32 each).
const ROW_OVERHEAD: u64 = 8;

/// MEMORY USAGE's default: nested values sampled this many times (Redis's
/// OBJ_COMPUTE_SIZE_DEF_SAMPLES).
const DEFAULT_SAMPLES: u64 = 5;

/// The allocator's figures at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// Memory the allocator holds for the process (Redis's used_memory).
    pub allocated: u64,
    /// The most it has held.
    pub peak: u64,
    /// Resident set size (from /proc).
    pub rss: u64,
    /// `allocated` when the server had started (Redis's
    /// used_memory_startup).
    pub startup: u64,
}

/// The allocator's committed bytes and their peak.
fn allocator_commit() -> (u64, u64) {
    let (mut commit, mut peak) = (0usize, 0usize);
    // SAFETY: mi_process_info only writes the out-params it is given
    // non-null pointers to; both point at live locals.
    unsafe {
        libmimalloc_sys::mi_process_info(
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut commit,
            &mut peak,
            std::ptr::null_mut(),
        );
    }
    (commit as u64, peak as u64)
}

/// Set when the first server of the process starts.
static STARTUP: OnceLock<u64> = OnceLock::new();

/// Records the memory a freshly started server holds (called once the
/// shards are open, like Redis's used_memory_startup after its init).
pub fn mark_startup() {
    let _ = STARTUP.set(allocator_commit().0);
}

/// The process's memory now.
pub fn usage() -> Usage {
    let (allocated, peak) = allocator_commit();
    Usage {
        allocated,
        peak: peak.max(allocated),
        rss: super::info::rss_bytes(),
        startup: STARTUP.get().copied().unwrap_or(0).min(allocated),
    }
}

/// `mimalloc-<major>.<minor>.<patch>`: INFO's mem_allocator.
pub fn allocator_name() -> String {
    // SAFETY: mi_version takes no arguments and only returns a constant.
    // It is the major version, then two digits each of minor and patch.
    let v = unsafe { libmimalloc_sys::mi_version() };
    format!("mimalloc-{}.{}.{}", v / 10000, (v / 100) % 100, v % 100)
}

/// The memory Redis counts as overhead rather than dataset: what the server
/// held when it started, client output queues, the Lua engine.
pub struct Overhead {
    /// Bytes queued to clients and not yet written.
    pub clients: u64,
    /// Lua scripts' cache (bodies) and engine.
    pub lua: u64,
    /// Function libraries' code.
    pub functions: u64,
    /// Everything above plus the startup memory.
    pub total: u64,
}

/// Sums the overheads of `server`.
pub fn overhead(server: &Server, u: &Usage) -> Overhead {
    let clients = server
        .clients
        .iter()
        .map(|c| c.mailbox.pending.load(Relaxed) as u64)
        .sum();
    let lua = server.scripts.memory_stats().script_bytes as u64;
    let functions = server.function_counts.2.load(Relaxed);
    Overhead {
        clients,
        lua,
        functions,
        total: u.startup + clients + lua + functions,
    }
}

/// Bytes of the data directory's files: the shards' redb files, their
/// logs and the coordination log.
pub fn disk_bytes(server: &Server) -> u64 {
    std::fs::read_dir(&server.config.dir)
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Total keys in every database.
fn total_keys(server: &Server) -> i64 {
    (0..crate::storage::tables::DATABASES as u8)
        .map(|db| {
            server
                .shards
                .shards()
                .iter()
                .map(|sh| sh.counts(db).keys)
                .sum::<i64>()
        })
        .sum()
}

/// MEMORY <subcommand>
pub fn memory(s: &mut Session, a: Args) -> Action {
    let sub = String::from_utf8_lossy(a.get(1)).to_ascii_lowercase();
    match sub.as_str() {
        "usage" => usage_cmd(s, &a),
        "stats" => stats(&s.server).into(),
        "doctor" => Reply::Verbatim(doctor(&s.server)).into(),
        "malloc-stats" => Reply::Bulk(malloc_stats().into()).into(),
        "purge" => {
            // SAFETY: mi_collect only walks the allocator's own heaps.
            unsafe { libmimalloc_sys::mi_collect(true) };
            Reply::Ok.into()
        }
        _ => Reply::Array(HELP.iter().map(|l| Reply::Simple(l)).collect::<Vec<_>>()).into(),
    }
}

/// MEMORY HELP, as Redis 7.0 words it.
const HELP: &[&str] = &[
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
    "    Prints this help.",
];

/// MEMORY USAGE key [SAMPLES count]
fn usage_cmd(s: &mut Session, a: &Args) -> Action {
    let mut samples = DEFAULT_SAMPLES;
    let mut i = 3;
    while i < a.len() {
        if is(a.get(i), "samples") && i + 1 < a.len() {
            match int(a.get(i + 1)) {
                Err(_) => return error(crate::command::args::NOT_INTEGER).into(),
                Ok(n) if n < 0 => return error(SYNTAX).into(),
                Ok(0) => samples = u64::MAX,
                Ok(n) => samples = n as u64,
            }
            i += 2;
        } else {
            return error(SYNTAX).into();
        }
    }
    s.read_unnoticed(&a.get(2).clone(), move |r, key| {
        Ok(match key_bytes(r, key, samples)? {
            Some(n) => Reply::Int(n as i64),
            None => Reply::Nil,
        })
    })
}

/// The bytes of a key's rows: its metadata row, its expiry row, and its
/// sub-key rows (every one when `samples` is `u64::MAX`, else the first
/// `samples`, scaled to the collection's size). `None` if it is absent.
fn key_bytes(
    r: &dyn KvRead,
    key: keyspace::Key,
    samples: u64,
) -> Result<Option<u64>, crate::storage::StoreError> {
    let Some(meta) = keyspace::peek(r, key)? else {
        return Ok(None);
    };
    let meta_key = key.meta_key();
    let mut total = meta_key.len() as u64 + meta.encode().len() as u64 + ROW_OVERHEAD;
    if meta.expire_ms != 0 {
        // The expiry row: the time, then the same key.
        total += 8 + meta_key.len() as u64 + ROW_OVERHEAD;
    }
    let MetaBody::Collection { version, size, .. } = meta.body else {
        return Ok(Some(total));
    };
    let prefix = encoding::version_prefix(key.db, key.slot, key.name, version);
    let end = encoding::prefix_successor(&prefix);
    let (mut seen, mut bytes, mut sub_key_bytes) = (0u64, 0u64, 0u64);
    r.scan(Table::Sub, &prefix, end.as_deref(), false, &mut |k, v| {
        seen += 1;
        bytes += (k.len() + v.len()) as u64 + ROW_OVERHEAD;
        sub_key_bytes += k.len() as u64;
        seen < samples
    })?;
    let whole = seen < samples;
    let zset = meta.ktype == KeyType::ZSet;
    if whole {
        total += bytes;
        if zset {
            r.scan(
                Table::ZScore,
                &prefix,
                end.as_deref(),
                false,
                &mut |k, v| {
                    total += (k.len() + v.len()) as u64 + ROW_OVERHEAD;
                    true
                },
            )?;
        }
    } else {
        // A sample of the first rows stands for all `size` of them (a
        // stream's group rows beyond its entries are not counted then).
        let rows = size.max(seen);
        total += bytes * rows / seen;
        if zset {
            // Each member's score row is its sub-key plus 8 score bytes.
            total += (sub_key_bytes / seen + 8 + ROW_OVERHEAD) * rows;
        }
    }
    Ok(Some(total))
}

/// MEMORY STATS, with Redis 7.0's fields in its order.
fn stats(server: &Server) -> Reply {
    let u = usage();
    let o = overhead(server, &u);
    let keys = total_keys(server);
    let net = u.allocated.saturating_sub(u.startup).max(1);
    let dataset = u.allocated.saturating_sub(o.total);
    let int = |n: u64| Reply::Int(n as i64);
    let bulk = |s: &str| Reply::Bulk(s.as_bytes().to_vec().into());
    let mut fields: Vec<(String, Reply)> = vec![
        ("peak.allocated".into(), int(u.peak)),
        ("total.allocated".into(), int(u.allocated)),
        ("startup.allocated".into(), int(u.startup)),
        ("replication.backlog".into(), int(0)),
        ("clients.slaves".into(), int(0)),
        ("clients.normal".into(), int(o.clients)),
        ("cluster.links".into(), int(0)),
        ("aof.buffer".into(), int(0)),
        ("lua.caches".into(), int(o.lua)),
        ("functions.caches".into(), int(o.functions)),
    ];
    // Redis lists each database with keys; cairn has no in-memory tables
    // per database, so their overheads are 0.
    for db in 0..crate::storage::tables::DATABASES as u8 {
        let n: i64 = server
            .shards
            .shards()
            .iter()
            .map(|sh| sh.counts(db).keys)
            .sum();
        if n > 0 {
            let zeros = Reply::Map(vec![
                (bulk("overhead.hashtable.main"), int(0)),
                (bulk("overhead.hashtable.expires"), int(0)),
                (bulk("overhead.hashtable.slot-to-keys"), int(0)),
            ]);
            fields.push((format!("db.{db}"), zeros));
        }
    }
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    fields.extend([
        ("overhead.total".into(), int(o.total)),
        ("keys.count".into(), Reply::Int(keys)),
        (
            "keys.bytes-per-key".into(),
            int(if keys > 0 { net / keys as u64 } else { 0 }),
        ),
        ("dataset.bytes".into(), int(dataset)),
        (
            "dataset.percentage".into(),
            Reply::Double(dataset as f64 * 100.0 / net as f64),
        ),
        (
            "peak.percentage".into(),
            Reply::Double(u.allocated as f64 * 100.0 / u.peak.max(1) as f64),
        ),
        ("allocator.allocated".into(), int(u.allocated)),
        ("allocator.active".into(), int(u.allocated)),
        ("allocator.resident".into(), int(u.rss)),
        ("allocator-fragmentation.ratio".into(), Reply::Double(1.0)),
        ("allocator-fragmentation.bytes".into(), int(0)),
        (
            "allocator-rss.ratio".into(),
            Reply::Double(ratio(u.rss, u.allocated)),
        ),
        (
            "allocator-rss.bytes".into(),
            Reply::Int(u.rss as i64 - u.allocated as i64),
        ),
        ("rss-overhead.ratio".into(), Reply::Double(1.0)),
        ("rss-overhead.bytes".into(), int(0)),
        (
            "fragmentation".into(),
            Reply::Double(ratio(u.rss, u.allocated)),
        ),
        (
            "fragmentation.bytes".into(),
            Reply::Int(u.rss as i64 - u.allocated as i64),
        ),
    ]);
    Reply::Map(fields.into_iter().map(|(k, v)| (bulk(&k), v)).collect())
}

/// MEMORY DOCTOR's report, by Redis 7.0's rules and in its words. The
/// allocator's own fragmentation and RSS overheads are not split out by
/// mimalloc's figures, so only the checks on the whole process apply.
fn doctor(server: &Server) -> String {
    const MB10: u64 = 10 << 20;
    let u = usage();
    if u.allocated < 5 * 1024 * 1024 {
        return "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting.\n".into();
    }
    let o = overhead(server, &u);
    let mut report = String::new();
    if u.peak as f64 / u.allocated as f64 > 1.5 {
        report.push_str(" * Peak memory: In the past this instance used more than 150% the memory that is currently using. The allocator is normally not able to release memory after a peak, so you can expect to see a big fragmentation ratio, however this is actually harmless and is only due to the memory peak, and if the Redis instance Resident Set Size (RSS) is currently bigger than expected, the memory will be used as soon as you fill the Redis instance with more data. If the memory peak was only occasional and you want to try to reclaim memory, please try the MEMORY PURGE command, otherwise the only other option is to shutdown and restart the instance.\n\n");
    }
    if u.rss as f64 / u.allocated as f64 > 1.4 && u.rss.saturating_sub(u.allocated) > MB10 {
        report.push_str(&format!(" * High total RSS: This instance has a memory fragmentation and RSS overhead greater than 1.4 (this means that the Resident Set Size of the Redis process is much larger than the sum of the logical allocations Redis performed). This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. If the problem is a large peak memory, then there is no issue. Otherwise, make sure you are using the Jemalloc allocator and not the default libc malloc. Note: The currently used allocator is \"{}\".\n\n", allocator_name()));
    }
    let clients = server.clients.len().max(1) as u64;
    if o.clients / clients > 200 * 1024 {
        report.push_str(" * Big client buffers: The clients output buffers in this instance are greater than 200K per client (on average). This may result from different causes, like Pub/Sub clients subscribed to channels bot not receiving data fast enough, so that data piles on the Redis instance output buffer, or clients sending commands with large replies or very large sequences of commands in the same pipeline. Please use the CLIENT LIST command in order to investigate the issue if it causes problems in your instance, or to understand better why certain clients are using a big amount of memory.\n\n");
    }
    if server.scripts.memory_stats().scripts > 1000 {
        report.push_str(" * Many scripts: There seem to be many cached scripts in this instance (more than 1000). This may be because scripts are generated and `EVAL`ed, instead of being parameterized (with KEYS and ARGV), `SCRIPT LOAD`ed and `EVALSHA`ed. Unless `SCRIPT FLUSH` is called periodically, the scripts' caches may end up consuming most of your memory.\n\n");
    }
    if report.is_empty() {
        return "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.\n".into();
    }
    format!("Sam, I detected a few issues in this Redis instance memory implants:\n\n{report}I'm here to keep you safe, Sam. I want to help you.\n")
}

/// The allocator's own statistics report (mimalloc's, where Redis prints
/// jemalloc's).
fn malloc_stats() -> String {
    unsafe extern "C" fn collect(msg: *const std::ffi::c_char, arg: *mut std::ffi::c_void) {
        // SAFETY: `arg` is the String below, alive for the whole call, and
        // mimalloc passes a NUL-terminated message.
        let out = unsafe { &mut *(arg as *mut String) };
        let text = unsafe { std::ffi::CStr::from_ptr(msg) };
        out.push_str(&text.to_string_lossy());
    }
    let mut out = String::new();
    // SAFETY: the callback only appends to `out`, which outlives the call.
    unsafe {
        libmimalloc_sys::mi_stats_print_out(
            Some(collect),
            &mut out as *mut String as *mut std::ffi::c_void,
        );
    }
    out
}

//! CONFIG GET / SET / RESETSTAT / REWRITE over one table of every Redis
//! 7.0.15 parameter: its type, range, default and flags, as Redis's
//! config.c declares them, so validation, formatting and error texts match.
//!
//! Every value is kept in its canonical text form (what CONFIG GET shows),
//! so reading one is a table lookup and a parse; the few that cairn derives
//! from its own state (port, bind, dir, databases) are computed
//! when asked and cannot be changed while the server runs.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::OnceLock;

use bytes::Bytes;

use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::server::Server;

/// CONFIG SET refuses the parameter ("can't set immutable config").
const IMMUTABLE: u8 = 1;
/// CONFIG SET needs `enable-protected-configs` ("can't set protected config").
const PROTECTED: u8 = 2;
/// cairn computes the value from its own state; it cannot change at run
/// time (a deviation where Redis allows it: bind; port in cluster mode).
const LIVE: u8 = 4 | IMMUTABLE;
/// A cairn parameter Redis does not have (left out of CONFIG REWRITE).
const CAIRN: u8 = 8 | LIVE;
/// One of Redis's hidden debugging parameters: CONFIG GET answers it by
/// name only, never for a glob (Redis's HIDDEN_CONFIG).
const HIDDEN: u8 = 16;

/// How a number is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumFmt {
    /// Plain integer (Redis's string2ll: no sign `+`, no leading zeros).
    Int,
    /// Memory amount: digits with b, k, kb, m, mb, g, gb; shown in bytes.
    Mem,
    /// Memory amount or a percentage `N%` (kept as -N; shown as `N%`).
    MemPercent,
    /// Octal (unixsocketperm).
    Octal,
}

/// Validation of free-form string parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrCheck {
    /// Anything.
    Any,
    /// A file name without directories.
    BaseName,
    /// proc-title-template's `{variable}` syntax.
    ProcTitle,
    /// cluster-announce-hostname's characters.
    Hostname,
}

/// A parameter's type.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// yes / no.
    Bool,
    /// A number within `min..=max`; `unsigned` compares (and shows) the
    /// 64-bit value as unsigned, as Redis does for its unsigned types.
    Num {
        /// Lower bound.
        min: i64,
        /// Upper bound (`-1` with `unsigned` is 2^64-1).
        max: i64,
        /// Unsigned comparison and display.
        unsigned: bool,
        /// Input and output format.
        fmt: NumFmt,
    },
    /// One of the listed words (case-insensitive; shown in lower case).
    Enum(&'static [&'static str]),
    /// shutdown-on-sigint/sigterm: a set of flags, or `default`.
    ShutdownFlags,
    /// A string.
    Str(StrCheck),
    /// `save`: pairs of seconds and changes.
    Save,
    /// `client-output-buffer-limit`: class hard soft seconds, per class.
    ClientOutputBufferLimit,
    /// `oom-score-adj-values`: three numbers in -2000..2000.
    OomScoreAdjValues,
    /// `notify-keyspace-events`: class letters.
    NotifyKeyspaceEvents,
    /// `latency-tracking-info-percentiles`: numbers in 0..100.
    Percentiles,
}

/// One parameter.
#[derive(Debug)]
pub struct Param {
    /// Its name.
    pub name: &'static str,
    /// Its other name, if it has one (one setting under two names).
    pub alias: Option<&'static str>,
    /// IMMUTABLE, PROTECTED, LIVE, CAIRN bits.
    flags: u8,
    /// Its type.
    pub kind: Kind,
    /// Its default, in canonical form.
    pub default: &'static str,
}

impl Param {
    /// Whether CONFIG SET refuses it outright.
    pub fn immutable(&self) -> bool {
        self.flags & IMMUTABLE != 0
    }

    /// Whether cairn computes the value from its own state.
    pub fn live(&self) -> bool {
        self.flags & LIVE == LIVE
    }
}

const fn p(
    name: &'static str,
    alias: Option<&'static str>,
    flags: u8,
    kind: Kind,
    default: &'static str,
) -> Param {
    Param {
        name,
        alias,
        flags,
        kind,
        default,
    }
}

const fn yn(name: &'static str, alias: Option<&'static str>, flags: u8, d: &'static str) -> Param {
    p(name, alias, flags, Kind::Bool, d)
}

const fn num(
    name: &'static str,
    alias: Option<&'static str>,
    flags: u8,
    min: i64,
    max: i64,
    d: &'static str,
) -> Param {
    p(
        name,
        alias,
        flags,
        Kind::Num {
            min,
            max,
            unsigned: false,
            fmt: NumFmt::Int,
        },
        d,
    )
}

/// An unsigned integer (size_t, unsigned int and unsigned long long in
/// Redis).
const fn unum(
    name: &'static str,
    alias: Option<&'static str>,
    min: i64,
    max: i64,
    d: &'static str,
) -> Param {
    p(
        name,
        alias,
        0,
        Kind::Num {
            min,
            max,
            unsigned: true,
            fmt: NumFmt::Int,
        },
        d,
    )
}

const fn mem(
    name: &'static str,
    alias: Option<&'static str>,
    min: i64,
    max: i64,
    unsigned: bool,
    d: &'static str,
) -> Param {
    p(
        name,
        alias,
        0,
        Kind::Num {
            min,
            max,
            unsigned,
            fmt: NumFmt::Mem,
        },
        d,
    )
}

const fn en(
    name: &'static str,
    flags: u8,
    values: &'static [&'static str],
    d: &'static str,
) -> Param {
    p(name, None, flags, Kind::Enum(values), d)
}

const fn st(name: &'static str, alias: Option<&'static str>, flags: u8, d: &'static str) -> Param {
    p(name, alias, flags, Kind::Str(StrCheck::Any), d)
}

const INT_MAX: i64 = i32::MAX as i64;
const INT_MIN: i64 = i32::MIN as i64;
const UINT_MAX: i64 = u32::MAX as i64;
const LONG_MAX: i64 = i64::MAX;
const LLONG_MAX: i64 = i64::MAX;
/// 2^64-1 as the bit pattern an unsigned bound is kept in.
const ULLONG_MAX: i64 = -1;

const PROTECTED_ACTION: &[&str] = &["no", "yes", "local"];

/// Every Redis 7.0.15 parameter (the TLS ones included: the reference
/// build lists them), then cairn's own. Names are lower case.
pub static PARAMS: &[Param] = &[
    // Booleans.
    yn("rdbchecksum", None, IMMUTABLE, "yes"),
    yn("daemonize", None, IMMUTABLE, "no"),
    yn("io-threads-do-reads", None, IMMUTABLE, "no"),
    yn("always-show-logo", None, IMMUTABLE, "no"),
    yn("protected-mode", None, 0, "yes"),
    yn("rdbcompression", None, 0, "yes"),
    yn("rdb-del-sync-files", None, 0, "no"),
    yn("activerehashing", None, 0, "yes"),
    yn("stop-writes-on-bgsave-error", None, 0, "yes"),
    yn("set-proc-title", None, IMMUTABLE, "yes"),
    yn("dynamic-hz", None, 0, "yes"),
    yn("lazyfree-lazy-eviction", None, 0, "no"),
    yn("lazyfree-lazy-expire", None, 0, "no"),
    yn("lazyfree-lazy-server-del", None, 0, "no"),
    yn("lazyfree-lazy-user-del", None, 0, "no"),
    yn("lazyfree-lazy-user-flush", None, 0, "no"),
    yn("repl-disable-tcp-nodelay", None, 0, "no"),
    yn("repl-diskless-sync", None, 0, "yes"),
    yn("aof-rewrite-incremental-fsync", None, 0, "yes"),
    yn("no-appendfsync-on-rewrite", None, 0, "no"),
    yn("cluster-require-full-coverage", None, 0, "yes"),
    yn("rdb-save-incremental-fsync", None, 0, "yes"),
    yn("aof-load-truncated", None, 0, "yes"),
    yn("aof-use-rdb-preamble", None, 0, "yes"),
    yn("aof-timestamp-enabled", None, 0, "no"),
    yn(
        "cluster-replica-no-failover",
        Some("cluster-slave-no-failover"),
        0,
        "no",
    ),
    yn("replica-lazy-flush", Some("slave-lazy-flush"), 0, "no"),
    yn(
        "replica-serve-stale-data",
        Some("slave-serve-stale-data"),
        0,
        "yes",
    ),
    yn("replica-read-only", Some("slave-read-only"), 0, "yes"),
    yn(
        "replica-ignore-maxmemory",
        Some("slave-ignore-maxmemory"),
        0,
        "yes",
    ),
    yn("jemalloc-bg-thread", None, 0, "yes"),
    yn("activedefrag", None, 0, "no"),
    yn("syslog-enabled", None, IMMUTABLE, "no"),
    yn("cluster-enabled", None, LIVE, "no"),
    yn("appendonly", None, 0, "no"),
    yn("cluster-allow-reads-when-down", None, 0, "no"),
    yn("cluster-allow-pubsubshard-when-down", None, 0, "yes"),
    yn("crash-log-enabled", None, 0, "yes"),
    yn("crash-memcheck-enabled", None, 0, "yes"),
    yn("disable-thp", None, IMMUTABLE, "yes"),
    yn("cluster-allow-replica-migration", None, 0, "yes"),
    yn("replica-announced", None, 0, "yes"),
    yn("latency-tracking", None, 0, "yes"),
    yn("aof-disable-auto-gc", None, 0, "no"),
    yn("replica-ignore-disk-write-errors", None, 0, "no"),
    yn("tls-cluster", None, 0, "no"),
    yn("tls-replication", None, 0, "no"),
    yn("tls-prefer-server-ciphers", None, 0, "no"),
    yn("tls-session-caching", None, 0, "yes"),
    // Strings.
    st("aclfile", None, IMMUTABLE, ""),
    st("unixsocket", None, IMMUTABLE, ""),
    st("pidfile", None, IMMUTABLE, ""),
    st("replica-announce-ip", Some("slave-announce-ip"), 0, ""),
    st("masteruser", None, 0, ""),
    st("cluster-announce-ip", None, 0, ""),
    st("cluster-config-file", None, IMMUTABLE, "nodes.conf"),
    p(
        "cluster-announce-hostname",
        None,
        0,
        Kind::Str(StrCheck::Hostname),
        "",
    ),
    st("syslog-ident", None, IMMUTABLE, "redis"),
    p(
        "dbfilename",
        None,
        PROTECTED,
        Kind::Str(StrCheck::BaseName),
        "dump.rdb",
    ),
    st("appendfilename", None, IMMUTABLE, "appendonly.aof"),
    st("appenddirname", None, IMMUTABLE, "appendonlydir"),
    st("server_cpulist", None, IMMUTABLE, ""),
    st("bio_cpulist", None, IMMUTABLE, ""),
    st("aof_rewrite_cpulist", None, IMMUTABLE, ""),
    st("bgsave_cpulist", None, IMMUTABLE, ""),
    st("ignore-warnings", None, 0, ""),
    p(
        "proc-title-template",
        None,
        0,
        Kind::Str(StrCheck::ProcTitle),
        "{title} {listen-addr} {server-mode}",
    ),
    st("bind-source-addr", None, 0, ""),
    st("logfile", None, IMMUTABLE, ""),
    st("masterauth", None, 0, ""),
    st("requirepass", None, 0, ""),
    st("tls-cert-file", None, 0, ""),
    st("tls-key-file", None, 0, ""),
    st("tls-key-file-pass", None, 0, ""),
    st("tls-client-cert-file", None, 0, ""),
    st("tls-client-key-file", None, 0, ""),
    st("tls-client-key-file-pass", None, 0, ""),
    st("tls-dh-params-file", None, 0, ""),
    st("tls-ca-cert-file", None, 0, ""),
    st("tls-ca-cert-dir", None, 0, ""),
    st("tls-protocols", None, 0, ""),
    st("tls-ciphers", None, 0, ""),
    st("tls-ciphersuites", None, 0, ""),
    // Enums.
    en(
        "supervised",
        IMMUTABLE,
        &["upstart", "systemd", "auto", "no"],
        "no",
    ),
    en(
        "syslog-facility",
        IMMUTABLE,
        &[
            "user", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
        ],
        "local0",
    ),
    en(
        "repl-diskless-load",
        0,
        &["disabled", "on-empty-db", "swapdb"],
        "disabled",
    ),
    en(
        "loglevel",
        0,
        &["debug", "verbose", "notice", "warning"],
        "notice",
    ),
    en(
        "maxmemory-policy",
        0,
        &[
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "noeviction",
        ],
        "noeviction",
    ),
    en("appendfsync", 0, &["everysec", "always", "no"], "everysec"),
    en(
        "oom-score-adj",
        0,
        &["no", "yes", "relative", "absolute"],
        "no",
    ),
    en(
        "acl-pubsub-default",
        0,
        &["allchannels", "resetchannels"],
        "resetchannels",
    ),
    en("sanitize-dump-payload", 0, &["no", "yes", "clients"], "no"),
    en(
        "enable-protected-configs",
        IMMUTABLE,
        PROTECTED_ACTION,
        "no",
    ),
    en("enable-debug-command", IMMUTABLE, PROTECTED_ACTION, "no"),
    en("enable-module-command", IMMUTABLE, PROTECTED_ACTION, "no"),
    en(
        "cluster-preferred-endpoint-type",
        0,
        &["ip", "hostname", "unknown-endpoint"],
        "ip",
    ),
    en(
        "propagation-error-behavior",
        0,
        &["ignore", "panic", "panic-on-replicas"],
        "ignore",
    ),
    en("tls-auth-clients", 0, &["no", "yes", "optional"], "yes"),
    p(
        "shutdown-on-sigint",
        None,
        0,
        Kind::ShutdownFlags,
        "default",
    ),
    p(
        "shutdown-on-sigterm",
        None,
        0,
        Kind::ShutdownFlags,
        "default",
    ),
    // Integers.
    num("databases", None, LIVE, 1, INT_MAX, "16"),
    num("port", None, LIVE, 0, 65535, "6379"),
    num("io-threads", None, IMMUTABLE, 1, 128, "1"),
    num("auto-aof-rewrite-percentage", None, 0, 0, INT_MAX, "100"),
    num(
        "cluster-replica-validity-factor",
        Some("cluster-slave-validity-factor"),
        0,
        0,
        INT_MAX,
        "10",
    ),
    num(
        "list-max-listpack-size",
        Some("list-max-ziplist-size"),
        0,
        INT_MIN,
        INT_MAX,
        "-2",
    ),
    num("tcp-keepalive", None, 0, 0, INT_MAX, "300"),
    num("cluster-migration-barrier", None, 0, 0, INT_MAX, "1"),
    num("active-defrag-cycle-min", None, 0, 1, 99, "1"),
    num("active-defrag-cycle-max", None, 0, 1, 99, "25"),
    num("active-defrag-threshold-lower", None, 0, 0, 1000, "10"),
    num("active-defrag-threshold-upper", None, 0, 0, 1000, "100"),
    num("lfu-log-factor", None, 0, 0, INT_MAX, "10"),
    num("lfu-decay-time", None, 0, 0, INT_MAX, "1"),
    num(
        "replica-priority",
        Some("slave-priority"),
        0,
        0,
        INT_MAX,
        "100",
    ),
    num("repl-diskless-sync-delay", None, 0, 0, INT_MAX, "5"),
    num("maxmemory-samples", None, 0, 1, INT_MAX, "5"),
    num("maxmemory-eviction-tenacity", None, 0, 0, 100, "10"),
    num("timeout", None, 0, 0, INT_MAX, "0"),
    num(
        "replica-announce-port",
        Some("slave-announce-port"),
        0,
        0,
        65535,
        "0",
    ),
    num("tcp-backlog", None, IMMUTABLE, 0, INT_MAX, "511"),
    num("cluster-port", None, IMMUTABLE, 0, 65535, "0"),
    num("cluster-announce-bus-port", None, 0, 0, 65535, "0"),
    num("cluster-announce-port", None, 0, 0, 65535, "0"),
    num("cluster-announce-tls-port", None, 0, 0, 65535, "0"),
    num("repl-timeout", None, 0, 1, INT_MAX, "60"),
    num(
        "repl-ping-replica-period",
        Some("repl-ping-slave-period"),
        0,
        1,
        INT_MAX,
        "10",
    ),
    num("list-compress-depth", None, 0, 0, INT_MAX, "0"),
    num("active-expire-effort", None, 0, 1, 10, "1"),
    num("hz", None, 0, 0, INT_MAX, "10"),
    num(
        "min-replicas-to-write",
        Some("min-slaves-to-write"),
        0,
        0,
        INT_MAX,
        "0",
    ),
    num(
        "min-replicas-max-lag",
        Some("min-slaves-max-lag"),
        0,
        0,
        INT_MAX,
        "10",
    ),
    num("shutdown-timeout", None, 0, 0, INT_MAX, "10"),
    num("repl-diskless-sync-max-replicas", None, 0, 0, INT_MAX, "0"),
    num("tls-port", None, 0, 0, 65535, "0"),
    num("tls-session-cache-size", None, 0, 0, INT_MAX, "20480"),
    num("tls-session-cache-timeout", None, 0, 0, INT_MAX, "300"),
    unum("maxclients", None, 1, UINT_MAX, "10000"),
    p(
        "unixsocketperm",
        None,
        IMMUTABLE,
        Kind::Num {
            min: 0,
            max: 0o777,
            unsigned: true,
            fmt: NumFmt::Octal,
        },
        "0",
    ),
    p(
        "socket-mark-id",
        None,
        IMMUTABLE,
        Kind::Num {
            min: 0,
            max: UINT_MAX,
            unsigned: true,
            fmt: NumFmt::Int,
        },
        "0",
    ),
    num(
        "active-defrag-max-scan-fields",
        None,
        0,
        1,
        LONG_MAX,
        "1000",
    ),
    num("slowlog-max-len", None, 0, 0, LONG_MAX, "128"),
    num("acllog-max-len", None, 0, 0, LONG_MAX, "128"),
    num(
        "busy-reply-threshold",
        Some("lua-time-limit"),
        0,
        0,
        LONG_MAX,
        "5000",
    ),
    num("cluster-node-timeout", None, 0, 0, LLONG_MAX, "15000"),
    num("slowlog-log-slower-than", None, 0, -1, LLONG_MAX, "10000"),
    num("latency-monitor-threshold", None, 0, 0, LLONG_MAX, "0"),
    mem(
        "proto-max-bulk-len",
        None,
        1024 * 1024,
        LONG_MAX,
        false,
        "536870912",
    ),
    num("stream-node-max-entries", None, 0, 0, LLONG_MAX, "100"),
    mem("repl-backlog-size", None, 1, LLONG_MAX, false, "1048576"),
    mem("maxmemory", None, 0, ULLONG_MAX, true, "0"),
    mem("cluster-link-sendbuf-limit", None, 0, ULLONG_MAX, true, "0"),
    unum(
        "hash-max-listpack-entries",
        Some("hash-max-ziplist-entries"),
        0,
        LONG_MAX,
        "512",
    ),
    unum("set-max-intset-entries", None, 0, LONG_MAX, "512"),
    unum(
        "zset-max-listpack-entries",
        Some("zset-max-ziplist-entries"),
        0,
        LONG_MAX,
        "128",
    ),
    mem(
        "active-defrag-ignore-bytes",
        None,
        1,
        LLONG_MAX,
        true,
        "104857600",
    ),
    mem(
        "hash-max-listpack-value",
        Some("hash-max-ziplist-value"),
        0,
        LONG_MAX,
        true,
        "64",
    ),
    mem("stream-node-max-bytes", None, 0, LONG_MAX, true, "4096"),
    mem(
        "zset-max-listpack-value",
        Some("zset-max-ziplist-value"),
        0,
        LONG_MAX,
        true,
        "64",
    ),
    mem("hll-sparse-max-bytes", None, 0, LONG_MAX, true, "3000"),
    unum("tracking-table-max-keys", None, 0, LONG_MAX, "1000000"),
    mem(
        "client-query-buffer-limit",
        None,
        1024 * 1024,
        LONG_MAX,
        true,
        "1073741824",
    ),
    p(
        "maxmemory-clients",
        None,
        0,
        Kind::Num {
            min: -100,
            max: i64::MAX,
            unsigned: false,
            fmt: NumFmt::MemPercent,
        },
        "0",
    ),
    num("repl-backlog-ttl", None, 0, 0, LONG_MAX, "3600"),
    mem(
        "auto-aof-rewrite-min-size",
        None,
        0,
        LLONG_MAX,
        false,
        "67108864",
    ),
    // Special.
    p("dir", None, LIVE | PROTECTED, Kind::Str(StrCheck::Any), ""),
    p("save", None, 0, Kind::Save, ""),
    p(
        "client-output-buffer-limit",
        None,
        0,
        Kind::ClientOutputBufferLimit,
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
    ),
    p(
        "oom-score-adj-values",
        None,
        0,
        Kind::OomScoreAdjValues,
        "0 200 800",
    ),
    p(
        "notify-keyspace-events",
        None,
        0,
        Kind::NotifyKeyspaceEvents,
        "",
    ),
    p("bind", None, LIVE, Kind::Str(StrCheck::Any), ""),
    p(
        "replicaof",
        Some("slaveof"),
        IMMUTABLE,
        Kind::Str(StrCheck::Any),
        "",
    ),
    p(
        "latency-tracking-info-percentiles",
        None,
        0,
        Kind::Percentiles,
        "50 99 99.9",
    ),
    // Redis's hidden parameters, which its own tests set: validated,
    // stored and returned; cairn's save and import do not slow down for
    // them.
    yn("use-exit-on-panic", None, HIDDEN, "no"),
    num("rdb-key-save-delay", None, HIDDEN, INT_MIN, INT_MAX, "0"),
    num("key-load-delay", None, HIDDEN, INT_MIN, INT_MAX, "0"),
    num("watchdog-period", None, HIDDEN, 0, INT_MAX, "0"),
    num(
        "loading-process-events-interval-bytes",
        None,
        HIDDEN,
        1024,
        INT_MAX,
        "2097152",
    ),
    // cairn's own.
    p("shards", None, CAIRN, Kind::Str(StrCheck::Any), ""),
    p("durability", None, CAIRN, Kind::Str(StrCheck::Any), ""),
];

/// Index of each name and alias (lower case) in [`PARAMS`].
fn index() -> &'static HashMap<&'static str, usize> {
    static INDEX: OnceLock<HashMap<&'static str, usize>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut m = HashMap::new();
        for (i, p) in PARAMS.iter().enumerate() {
            m.insert(p.name, i);
            if let Some(a) = p.alias {
                m.insert(a, i);
            }
        }
        m
    })
}

/// The parameter a name (or alias) names, in any case.
pub fn lookup(name: &str) -> Option<usize> {
    // The server's own lookups (a connection reads `timeout` before each
    // read) name parameters in lower case already: no copy for those.
    if !name.bytes().any(|b| b.is_ascii_uppercase()) {
        return index().get(name).copied();
    }
    let lower = name.to_ascii_lowercase();
    index().get(lower.as_str()).copied()
}

/// The current values, one canonical string per [`PARAMS`] entry (live
/// ones keep their default here and are computed by [`get_value`]).
#[derive(Debug, Clone)]
pub struct Values {
    vals: Vec<String>,
}

impl Default for Values {
    fn default() -> Values {
        Values {
            vals: PARAMS.iter().map(|p| p.default.to_string()).collect(),
        }
    }
}

impl Values {
    /// A parameter's stored value by name or alias.
    ///
    /// # Panics
    /// If `name` is not a parameter (a programming error).
    pub fn get(&self, name: &str) -> &str {
        let i = lookup(name).unwrap_or_else(|| panic!("unknown config parameter {name}"));
        &self.vals[i]
    }

    /// A numeric parameter as a signed 64-bit value (memory ones in bytes;
    /// unsigned ones above i64::MAX saturate).
    pub fn int(&self, name: &str) -> i64 {
        let v = self.get(name);
        v.parse::<i64>()
            .or_else(|_| v.parse::<u64>().map(|_| i64::MAX))
            .unwrap_or(0)
    }

    /// A numeric parameter as an unsigned count (negative ones read 0).
    pub fn size(&self, name: &str) -> usize {
        usize::try_from(self.int(name).max(0)).unwrap_or(usize::MAX)
    }

    /// `requirepass`: empty means no authentication.
    pub fn requirepass(&self) -> &str {
        self.get("requirepass")
    }

    /// `proto-max-bulk-len`: the largest bulk argument accepted.
    pub fn proto_max_bulk_len(&self) -> u64 {
        self.int("proto-max-bulk-len").max(0) as u64
    }

    /// `maxclients`: the connection limit.
    pub fn maxclients(&self) -> usize {
        self.size("maxclients")
    }

    /// Sets a value as the config file does (no immutable / protected
    /// checks), validating it.
    pub fn load(&mut self, name: &str, value: &str) -> Result<(), String> {
        let i = lookup(name).ok_or_else(|| format!("unknown Redis parameter '{name}'"))?;
        if PARAMS[i].live() {
            return Err(format!(
                "'{name}' is set by cairn's own settings (bind, port, dir, durability), not in [redis]"
            ));
        }
        let v = parse(&PARAMS[i], value, &self.vals[i])?;
        self.vals[i] = v;
        Ok(())
    }
}

/// Redis's string2ll: optional `-`, digits without leading zeros, no
/// `+`, no spaces, in range.
fn string2ll(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    if b == b"0" {
        return Some(0);
    }
    let (neg, digits) = match b[0] {
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || !(b'1'..=b'9').contains(&digits[0]) {
        return None;
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    if neg {
        (v <= 1 << 63).then(|| (v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// Redis's memtoull: leading digits (possibly none), then an optional
/// unit; the number saturates like strtoull and the unit multiplies with
/// wrap-around, as in Redis.
pub fn memtoull(s: &str) -> Option<u64> {
    if s.starts_with('-') {
        return None;
    }
    let end = s
        .bytes()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(s.len());
    let mul: u64 = match s[end..].to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    let digits = &s[..end];
    let v = if digits.is_empty() {
        0
    } else {
        digits.parse::<u64>().unwrap_or(u64::MAX)
    };
    Some(v.wrapping_mul(mul))
}

/// C's strtoll over a whole token: leading blanks and a sign allowed,
/// trailing characters not; saturates on overflow.
fn strtoll(s: &str) -> Option<i64> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let v = digits.parse::<i128>().unwrap_or(i128::MAX);
    let v = if neg { -v } else { v };
    Some(v.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
}

/// Checks `value` for `p` and returns its canonical form. `current` is
/// the value now (client-output-buffer-limit changes only the classes
/// given).
fn parse(p: &Param, value: &str, current: &str) -> Result<String, String> {
    match p.kind {
        Kind::Bool => match value.to_ascii_lowercase().as_str() {
            "yes" if p.name == "activedefrag" => Err("Active defragmentation cannot be enabled: it requires a Redis server compiled with a modified Jemalloc like the one shipped by default with the Redis source distribution".into()),
            "yes" => Ok("yes".into()),
            "no" => Ok("no".into()),
            _ => Err("argument must be 'yes' or 'no'".into()),
        },
        Kind::Num {
            min,
            max,
            unsigned,
            fmt,
        } => parse_num(value, min, max, unsigned, fmt),
        Kind::Enum(values) => {
            let one_of = || {
                format!(
                    "argument(s) must be one of the following: {}",
                    values.join(", ")
                )
            };
            let hit = values
                .iter()
                .find(|v| v.eq_ignore_ascii_case(value))
                .ok_or_else(one_of)?;
            // `relative` is another name of `yes`; Redis shows the first.
            Ok(if *hit == "relative" { "yes" } else { hit }.to_string())
        }
        Kind::ShutdownFlags => {
            const FLAGS: &[&str] = &["default", "save", "nosave", "now", "force"];
            let mut set = [false; 5];
            for word in value.split(' ') {
                let i = FLAGS
                    .iter()
                    .position(|f| f.eq_ignore_ascii_case(word))
                    .ok_or_else(|| {
                        format!(
                            "argument(s) must be one of the following: {}",
                            FLAGS.join(", ")
                        )
                    })?;
                set[i] = true;
            }
            if set[1] && set[2] {
                return Err("shutdown options SAVE and NOSAVE can't be used simultaneously".into());
            }
            let words: Vec<&str> = (1..5).filter(|&i| set[i]).map(|i| FLAGS[i]).collect();
            Ok(if words.is_empty() {
                "default".into()
            } else {
                words.join(" ")
            })
        }
        Kind::Str(check) => {
            match check {
                StrCheck::Any => {}
                StrCheck::BaseName => {
                    if value.contains(['/', '\\']) {
                        return Err(format!("{} can't be a path, just a filename", p.name));
                    }
                }
                StrCheck::Hostname => {
                    if !value
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.')
                    {
                        return Err(
                            "Hostnames may only contain alphanumeric characters, hyphens or dots"
                                .into(),
                        );
                    }
                }
                StrCheck::ProcTitle => {
                    if !valid_proc_title(value) {
                        return Err(
                            "template format is invalid or contains unknown variables".into(),
                        );
                    }
                }
            }
            Ok(value.to_string())
        }
        Kind::Save => {
            if value.is_empty() {
                return Ok(String::new());
            }
            let parts: Vec<&str> = value.split(' ').collect();
            let bad = || "Invalid save parameters".to_string();
            if parts.len() % 2 == 1 {
                return Err(bad());
            }
            let mut out = Vec::new();
            for (j, part) in parts.iter().enumerate() {
                let v = strtoll(part).ok_or_else(bad)?;
                if (j % 2 == 0 && v < 1) || (j % 2 == 1 && v < 0) {
                    return Err(bad());
                }
                out.push(v.to_string());
            }
            Ok(out.join(" "))
        }
        Kind::ClientOutputBufferLimit => parse_obuf(value, current),
        Kind::OomScoreAdjValues => {
            let parts: Vec<&str> = value.split(' ').collect();
            if parts.len() != 3 {
                return Err("wrong number of arguments".into());
            }
            let mut out = Vec::new();
            for part in parts {
                match strtoll(part) {
                    Some(v) if (-2000..=2000).contains(&v) => out.push(v.to_string()),
                    _ => {
                        return Err(
                            "Invalid oom-score-adj-values, elements must be between -2000 and 2000."
                                .into(),
                        )
                    }
                }
            }
            Ok(out.join(" "))
        }
        Kind::NotifyKeyspaceEvents => parse_notify(value),
        Kind::Percentiles => {
            if value.is_empty() {
                return Ok(String::new());
            }
            let mut out = Vec::new();
            for part in value.split(' ') {
                let v: f64 = part
                    .parse()
                    .map_err(|_| "Invalid latency-tracking-info-percentiles parameters")?;
                if !(0.0..=100.0).contains(&v) {
                    return Err(
                        "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
                            .into(),
                    );
                }
                // "%f" with its trailing zeros (and point) trimmed.
                let s = format!("{v:.6}");
                out.push(s.trim_end_matches('0').trim_end_matches('.').to_string());
            }
            Ok(out.join(" "))
        }
    }
}

fn parse_num(
    value: &str,
    min: i64,
    max: i64,
    unsigned: bool,
    fmt: NumFmt,
) -> Result<String, String> {
    let ll: i64 = match fmt {
        NumFmt::Int => string2ll(value).ok_or("argument couldn't be parsed into an integer")?,
        NumFmt::Mem => memtoull(value).ok_or("argument must be a memory value")? as i64,
        NumFmt::MemPercent => {
            let bad = "argument must be a memory or percent value";
            match value.strip_suffix('%') {
                Some(n) => match string2ll(n) {
                    Some(n) if n >= 0 => -n,
                    _ => return Err(bad.into()),
                },
                None => memtoull(value).ok_or(bad)? as i64,
            }
        }
        NumFmt::Octal => i64::from_str_radix(value, 8)
            .map_err(|_| "argument couldn't be parsed as an octal number")?,
    };
    let in_range = if unsigned {
        (min as u64..=max as u64).contains(&(ll as u64))
    } else {
        (min..=max).contains(&ll)
    };
    if !in_range {
        if fmt == NumFmt::MemPercent && ll < min {
            return Err(format!(
                "percentage argument must be less or equal to {}",
                -min
            ));
        }
        return Err(if unsigned {
            format!(
                "argument must be between {} and {} inclusive",
                min as u64, max as u64
            )
        } else {
            format!("argument must be between {min} and {max} inclusive")
        });
    }
    Ok(match fmt {
        NumFmt::Octal => format!("{ll:o}"),
        NumFmt::MemPercent if ll < 0 => format!("{}%", -ll),
        _ if unsigned => (ll as u64).to_string(),
        _ => ll.to_string(),
    })
}

/// Checks proc-title-template: `{name}` variables Redis knows, balanced
/// braces, and something left once blank.
fn valid_proc_title(t: &str) -> bool {
    const VARS: &[&str] = &[
        "title",
        "listen-addr",
        "server-mode",
        "port",
        "tls-port",
        "unixsocket",
        "config-file",
    ];
    if t.trim().is_empty() {
        return false;
    }
    let mut rest = t;
    while let Some(open) = rest.find(['{', '}']) {
        if rest.as_bytes()[open] == b'}' {
            return false;
        }
        let Some(close) = rest[open..].find('}') else {
            return false;
        };
        if !VARS.contains(&&rest[open + 1..open + close]) {
            return false;
        }
        rest = &rest[open + close + 1..];
    }
    true
}

/// client-output-buffer-limit: groups of `class hard soft seconds`; the
/// classes given replace theirs in `current`, the others stay.
fn parse_obuf(value: &str, current: &str) -> Result<String, String> {
    const CLASSES: [&str; 3] = ["normal", "slave", "pubsub"];
    let limits: Vec<[u64; 3]> = {
        let nums: Vec<u64> = current
            .split(' ')
            .filter_map(|w| w.parse::<u64>().ok())
            .collect();
        nums.chunks(3).map(|c| [c[0], c[1], c[2]]).collect()
    };
    let parts: Vec<&str> = if value.is_empty() {
        Vec::new()
    } else {
        value.split(' ').collect()
    };
    if !parts.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".into());
    }
    let mut staged = limits.clone();
    for g in parts.chunks(4) {
        let class = match g[0].to_ascii_lowercase().as_str() {
            "normal" => 0,
            "slave" | "replica" => 1,
            "pubsub" => 2,
            _ => {
                return Err("Invalid client class specified in buffer limit configuration.".into())
            }
        };
        let hard = memtoull(g[1]);
        let soft = memtoull(g[2]);
        let secs = strtoll(g[3]).filter(|&s| s >= 0);
        match (hard, soft, secs) {
            (Some(h), Some(s), Some(t)) => staged[class] = [h, s, t as u64],
            _ => {
                return Err(
                    "Error in hard, soft or soft_seconds setting in buffer limit configuration."
                        .into(),
                )
            }
        }
    }
    // Only now, every group being valid, do the classes change.
    Ok(CLASSES
        .iter()
        .zip(&staged)
        .map(|(c, l)| format!("{c} {} {} {}", l[0], l[1], l[2]))
        .collect::<Vec<_>>()
        .join(" "))
}

/// notify-keyspace-events: class letters, shown back in Redis's order
/// (`A` standing for all of g$lshzxetd).
fn parse_notify(value: &str) -> Result<String, String> {
    // Bits in display order: g $ l s h z x e t d n, then K E m.
    const LETTERS: &[u8] = b"g$lshzxetdnKEm";
    const ALL: u16 = 0b11_1111_1111; // g..d
    let mut flags: u16 = 0;
    for c in value.bytes() {
        if c == b'A' {
            flags |= ALL;
        } else if let Some(i) = LETTERS.iter().position(|&l| l == c) {
            flags |= 1 << i;
        } else {
            return Err("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.".into());
        }
    }
    let mut out = String::new();
    if flags & ALL == ALL {
        out.push('A');
    } else {
        for (i, &l) in LETTERS[..11].iter().enumerate() {
            if flags & (1 << i) != 0 {
                out.push(l as char);
            }
        }
    }
    for (i, &l) in LETTERS.iter().enumerate().skip(11) {
        if flags & (1 << i) != 0 {
            out.push(l as char);
        }
    }
    // Kept after A so notifications still see it; CONFIG GET hides it
    // there, as Redis's display does (see `get_value`).
    const NEW: u16 = 1 << 10; // `n`, LETTERS[10]
    if flags & ALL == ALL && flags & NEW != 0 {
        out.push('n');
    }
    Ok(out)
}

/// A parameter's value as CONFIG GET shows it.
pub fn get_value(server: &Server, vals: &Values, i: usize) -> String {
    let p = &PARAMS[i];
    if p.name == "notify-keyspace-events" && vals.vals[i].starts_with('A') {
        return vals.vals[i].replace('n', "");
    }
    if !p.live() {
        return vals.vals[i].clone();
    }
    let cfg = &server.config;
    match p.name {
        "port" => server.port.load(Relaxed).to_string(),
        "bind" => cfg.bind.clone(),
        "dir" => std::fs::canonicalize(&cfg.dir)
            .unwrap_or(cfg.dir.clone())
            .display()
            .to_string(),
        "databases" => crate::storage::tables::DATABASES.to_string(),
        "durability" => server.shards.durability().name().to_string(),
        "shards" => server.shards.len().to_string(),
        "cluster-enabled" => if cfg.cluster.enabled { "yes" } else { "no" }.to_string(),
        _ => vals.vals[i].clone(),
    }
}

/// Whether a glob pattern has glob characters (otherwise it names one
/// parameter, and CONFIG GET echoes it as given, as Redis does).
fn is_glob(p: &[u8]) -> bool {
    p.iter().any(|c| matches!(c, b'*' | b'?' | b'['))
}

/// CONFIG GET pattern [pattern ...]
pub fn config_get(s: &Session, patterns: &[Bytes]) -> Action {
    let vals = s.server.runtime.read().clone();
    let mut out: Vec<(Reply, Reply)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut emit = |name: String, i: usize, out: &mut Vec<(Reply, Reply)>| {
        if seen.insert(name.to_ascii_lowercase()) {
            let v = get_value(&s.server, &vals, i);
            out.push((Reply::bulk(name), Reply::bulk(v)));
        }
    };
    for pat in patterns {
        if !is_glob(pat) {
            let name = String::from_utf8_lossy(pat).into_owned();
            if let Some(i) = lookup(&name) {
                emit(name, i, &mut out);
            }
            continue;
        }
        // cairn's own and Redis's hidden parameters answer only by name,
        // so a glob lists what Redis lists.
        for (i, p) in PARAMS
            .iter()
            .enumerate()
            .filter(|(_, p)| p.flags & CAIRN != CAIRN && p.flags & HIDDEN == 0)
        {
            for name in std::iter::once(p.name).chain(p.alias) {
                if crate::util::glob::string_match(pat, name.as_bytes(), true) {
                    emit(name.to_string(), i, &mut out);
                }
            }
        }
    }
    Reply::Map(out).into()
}

/// Whether this client may set protected parameters
/// (`enable-protected-configs`: yes, or local for loopback clients).
fn protected_allowed(s: &Session, vals: &Values) -> bool {
    allowed_to(s, vals.get("enable-protected-configs"))
}

/// Redis's refusal of a protected command (DEBUG; MODULE LOAD, LOADEX and
/// UNLOAD) that its switch (`enable-debug-command`,
/// `enable-module-command`, read at start) does not allow this client.
/// Redis checks it right after the arity, before authentication and before
/// a transaction queues the command, so the connection asks it there.
pub fn protected_refusal(s: &Session, full_name: &str) -> Option<Reply> {
    let (command, switch) = match full_name {
        "debug" => ("DEBUG", "enable-debug-command"),
        "module|load" | "module|loadex" | "module|unload" => ("MODULE", "enable-module-command"),
        _ => return None,
    };
    let setting = s.server.runtime.read().get(switch).to_string();
    (!allowed_to(s, &setting)).then(|| {
        Reply::err(format!(
            "{command} command not allowed. If the {switch} option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server."
        ))
    })
}

/// Whether a protected feature's setting (`enable-protected-configs`,
/// `enable-debug-command`) lets this client use it: `yes`, or `local` and
/// the client is on a loopback address.
pub fn allowed_to(s: &Session, setting: &str) -> bool {
    match setting {
        "yes" => true,
        // Redis's islocalClient: the peer is exactly 127.0.0.1 or ::1
        // (other 127/8 addresses are not local to it).
        "local" => s.entry.addr.parse::<std::net::SocketAddr>().is_ok_and(|a| {
            a.ip() == std::net::Ipv4Addr::LOCALHOST || a.ip() == std::net::Ipv6Addr::LOCALHOST
        }),
        _ => false,
    }
}

/// CONFIG SET name value [name value ...]: every name is checked, then
/// every value; all are applied or none.
pub fn config_set(s: &Session, pairs: &[Bytes]) -> Action {
    let mut rt = s.server.runtime.write();
    let failed = |name: &str, why: &str| -> Action {
        Reply::err(format!(
            "CONFIG SET failed (possibly related to argument '{name}') - {why}"
        ))
        .into()
    };
    let mut targets = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for pair in pairs.chunks(2) {
        let given = String::from_utf8_lossy(&pair[0]).into_owned();
        let Some(i) = lookup(&given) else {
            return Reply::err(format!(
                "Unknown option or number of arguments for CONFIG SET - '{given}'"
            ))
            .into();
        };
        let p = &PARAMS[i];
        // Redis checks immutability, then protection; a parameter only
        // cairn cannot change (dir) answers as Redis would first.
        if p.immutable() && !p.live() {
            return failed(&given, "can't set immutable config");
        }
        if p.flags & PROTECTED != 0 && !protected_allowed(s, &rt) {
            return failed(&given, "can't set protected config");
        }
        // The port moves to another listener (not in cluster mode, where
        // the other nodes know this one by it).
        let movable = p.name == "port" && s.server.cluster.is_none();
        if p.live() && !movable {
            // Set to the value it has, bind changes nothing, as in Redis
            // (tools write back what CONFIG GET gave them); another value
            // needs a restart here.
            if p.name == "bind" && pair[1] == get_value(&s.server, &rt, i).as_bytes() {
                continue;
            }
            return failed(&given, "can't set immutable config");
        }
        if !seen.insert(given.to_ascii_lowercase()) {
            return failed(&given, "duplicate parameter");
        }
        targets.push((i, given.to_ascii_lowercase(), pair[1].clone()));
    }
    let mut staged = rt.clone();
    let mut new_port = None;
    for (i, name, value) in targets {
        let value = String::from_utf8_lossy(&value).into_owned();
        match parse(&PARAMS[i], &value, &staged.vals[i]) {
            Ok(v) if PARAMS[i].name == "port" => new_port = v.parse::<u16>().ok(),
            Ok(v) => staged.vals[i] = v,
            Err(why) => return failed(&name, &why),
        }
    }
    // The one change that can fail once every value is valid: nothing is
    // applied if it does.
    if let Some(port) = new_port {
        if let Err(e) = relisten(&s.server, port) {
            tracing::warn!(port, error = %e, "CONFIG SET port: unable to listen");
            return failed("port", "Unable to listen on this port. Check server logs.");
        }
    }
    let new_pass = (rt.requirepass() != staged.requirepass()
        || pairs
            .chunks(2)
            .any(|p| p[0].eq_ignore_ascii_case(b"requirepass")))
    .then(|| staged.requirepass().to_string());
    *rt = staged;
    s.server.pubsub.configure(&rt);
    s.server.configure_limits(&rt);
    if let Some(d) = crate::config::Durability::parse(rt.get("appendfsync")) {
        s.server.shards.set_durability(d);
    }
    crate::logging::set_level(rt.get("loglevel"));
    crate::families::latency::configure(&s.server.slowlog, &s.server.latency, &rt);
    // requirepass is the default user's password, as in Redis.
    if let Some(pass) = new_pass {
        s.server.acl.set_requirepass(&pass);
    }
    Reply::Ok.into()
}

/// Binds `port` on the configured address (0: none) and hands the
/// listener to the accept loop, which closes the one it had; the same port
/// keeps its listener.
fn relisten(server: &Server, port: u16) -> std::io::Result<()> {
    if u64::from(port) == server.port.load(Relaxed) {
        return Ok(());
    }
    let next = if port == 0 {
        None
    } else {
        use std::net::ToSocketAddrs;
        let addr = (server.config.bind.as_str(), port)
            .to_socket_addrs()?
            .next()
            .ok_or(std::io::ErrorKind::AddrNotAvailable)?;
        // As the first listener is made (tokio's bind): SO_REUSEADDR and
        // a backlog of 1024.
        let socket = match addr {
            std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        Some(socket.listen(1024)?.into_std()?)
    };
    *server.relisten.lock() = Some(next);
    server.relistened.notify_one();
    server.port.store(u64::from(port), Relaxed);
    Ok(())
}

/// CONFIG RESETSTAT: zeroes what Redis's resetServerStats zeroes and cairn
/// counts: command and error stats, commands processed, connections
/// received and rejected, network bytes, keyspace hits and misses, expired
/// keys. cairn's own counters (batches, commits, fsyncs, GC) stay.
pub fn resetstat(server: &Server) {
    for stat in &server.command_stats {
        stat.reset();
    }
    let st = &server.stats;
    for c in [
        &st.connections,
        &st.net_in,
        &st.net_out,
        &st.reads,
        &st.writes,
        &st.errors,
        &st.rejected,
    ] {
        c.store(0, Relaxed);
    }
    for c in [&st.commands, &st.hits, &st.misses] {
        c.reset();
    }
    for sh in server.shards.shards() {
        sh.stats.hits.store(0, Relaxed);
        sh.stats.misses.store(0, Relaxed);
        sh.stats.expired_keys.store(0, Relaxed);
    }
    server.error_stats.lock().clear();
}

/// Top-level config.toml keys that predate the `[redis]` table and set the
/// same parameter (REWRITE updates them in place when the file uses them).
const LEGACY_KEYS: &[(&str, &str)] = &[
    ("requirepass", "requirepass"),
    ("proto-max-bulk-len", "proto_max_bulk_len"),
    ("maxclients", "maxclients"),
    ("loglevel", "log_level"),
    ("appendfsync", "durability"),
];

/// The values the config file sets: `[redis]` entries, then the legacy
/// top-level keys when `[redis]` does not set them.
pub fn initial_values(cfg: &crate::config::Config) -> Result<Values, String> {
    let mut vals = Values::default();
    for (param, key) in LEGACY_KEYS {
        let v = match *key {
            "requirepass" => cfg.requirepass.clone(),
            "proto_max_bulk_len" => cfg.proto_max_bulk_len.to_string(),
            "durability" => cfg.durability.name().to_string(),
            // Redis's names, or tracing's (what log_level took before).
            "log_level" => crate::logging::redis_level(&cfg.log_level)
                .map_or_else(|| cfg.log_level.clone(), str::to_string),
            _ => cfg.maxclients.to_string(),
        };
        vals.load(param, &v)
            .map_err(|e| format!("{key} = {v}: {e}"))?;
    }
    // [cluster]'s announce fields seed Redis's parameters of the same
    // meaning, which CONFIG SET can change later.
    let c = &cfg.cluster;
    for (param, v) in [
        ("cluster-announce-ip", c.announce_ip.clone()),
        ("cluster-announce-port", c.announce_port.to_string()),
        ("cluster-announce-bus-port", c.announce_bus_port.to_string()),
    ] {
        vals.load(param, &v)
            .map_err(|e| format!("[cluster] {param} = {v}: {e}"))?;
    }
    for (k, v) in &cfg.redis {
        let text = toml_text(v)
            .ok_or_else(|| format!("[redis] {k}: use a string, an integer or a boolean"))?;
        vals.load(k, &text)
            .map_err(|e| format!("[redis] {k} = {text:?}: {e}"))?;
    }
    Ok(vals)
}

/// A `[redis]` value as the text Redis would read (booleans as yes/no).
fn toml_text(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(if *b { "yes" } else { "no" }.into()),
        _ => None,
    }
}

/// CONFIG REWRITE: writes every parameter that differs from its default
/// (or that the file already sets) into the `[redis]` table of the file the
/// server started with, keeping the rest of the file (comments, layout,
/// cairn's own keys) as it is. The file is replaced atomically.
pub fn rewrite(server: &Server) -> Result<(), String> {
    let Some(path) = server.config.file.clone() else {
        return Err("The server is running without a config file".into());
    };
    let vals = server.runtime.read().clone();
    let text = std::fs::read_to_string(&path).map_err(|e| format!("Rewriting config file: {e}"))?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| format!("Rewriting config file: {e}"))?;
    for (i, p) in PARAMS.iter().enumerate() {
        if p.live() {
            continue;
        }
        let value = &vals.vals[i];
        // A legacy top-level key the file uses is updated in place.
        if let Some((_, key)) = LEGACY_KEYS.iter().find(|(n, _)| *n == p.name) {
            let in_redis = doc
                .get("redis")
                .and_then(|t| t.as_table_like())
                .is_some_and(|t| t.contains_key(p.name));
            if doc.contains_key(key) && !in_redis {
                let written = doc.get(key).and_then(|v| v.as_str());
                if *key == "log_level"
                    && written.and_then(crate::logging::redis_level) == Some(value.as_str())
                {
                    // `warn` and `warning` are one level: the file's word stays.
                    continue;
                }
                // Text keys keep text (`durability = "always"`): a number
                // there would not load again.
                let new = if matches!(*key, "requirepass" | "log_level" | "durability") {
                    toml_edit::Value::from(value.as_str())
                } else {
                    toml_edit::Value::from(value.parse::<i64>().unwrap_or(0))
                };
                set_keeping_decor(doc.as_table_mut(), key, new);
                continue;
            }
        }
        let table = doc.get("redis").and_then(|t| t.as_table_like());
        // The file may name the parameter by its alias.
        let existing = std::iter::once(p.name)
            .chain(p.alias)
            .find(|n| table.is_some_and(|t| t.contains_key(n)));
        if existing.is_none() && value == p.default {
            continue;
        }
        if !doc.contains_key("redis") {
            let mut t = toml_edit::Table::new();
            t.decor_mut().set_prefix(
                "\n# Redis parameters (CONFIG GET/SET names), written by CONFIG REWRITE.\n",
            );
            doc.insert("redis", toml_edit::Item::Table(t));
        }
        let Some(t) = doc["redis"].as_table_like_mut() else {
            return Err("Rewriting config file: [redis] is not a table".into());
        };
        let key = existing.unwrap_or(p.name);
        let new = toml_edit::Value::from(value.as_str());
        match t.get_mut(key).and_then(|item| item.as_value_mut()) {
            Some(old) => {
                let decor = old.decor().clone();
                *old = new;
                *old.decor_mut() = decor;
            }
            None => {
                t.insert(key, toml_edit::value(new));
            }
        }
    }
    write_atomically(&path, &doc.to_string()).map_err(|e| format!("Rewriting config file: {e}"))
}

/// Replaces a top-level value, keeping its comments and spacing.
fn set_keeping_decor(t: &mut toml_edit::Table, key: &str, new: toml_edit::Value) {
    match t.get_mut(key).and_then(|item| item.as_value_mut()) {
        Some(old) => {
            let decor = old.decor().clone();
            *old = new;
            *old.decor_mut() = decor;
        }
        None => {
            t.insert(key, toml_edit::value(new));
        }
    }
}

/// Writes a sibling temporary file, syncs it, and renames it over `path`.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("toml.rewrite-tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, v: &str) -> Result<String, String> {
        let i = lookup(name).unwrap();
        parse(&PARAMS[i], v, PARAMS[i].default)
    }

    #[test]
    fn names_are_unique_and_lower_case() {
        let mut seen = std::collections::HashSet::new();
        for p in PARAMS {
            for n in std::iter::once(p.name).chain(p.alias) {
                assert!(seen.insert(n), "{n} twice");
                assert_eq!(n, n.to_ascii_lowercase());
            }
            // Every default is accepted and canonical.
            if !p.live() {
                assert_eq!(
                    parse(p, p.default, p.default).as_deref(),
                    Ok(p.default),
                    "{}",
                    p.name
                );
            }
        }
    }

    #[test]
    fn numbers_and_memory() {
        assert_eq!(set("maxmemory", "1gb").unwrap(), "1073741824");
        assert_eq!(set("maxmemory", "1K").unwrap(), "1000");
        assert_eq!(set("maxmemory", "").unwrap(), "0");
        assert_eq!(
            set("maxmemory", "99999999999999999999").unwrap(),
            "18446744073709551615"
        );
        assert!(set("maxmemory", "+5").is_err());
        assert!(set("maxmemory", "1.5gb").is_err());
        assert_eq!(
            set("proto-max-bulk-len", "100").unwrap_err(),
            "argument must be between 1048576 and 9223372036854775807 inclusive"
        );
        assert!(set("hz", "010").is_err());
        assert!(set("hz", "-0").is_err());
        assert_eq!(
            set("hash-max-ziplist-entries", "-1").unwrap_err(),
            "argument must be between 0 and 9223372036854775807 inclusive"
        );
        assert_eq!(set("maxmemory-clients", "5%").unwrap(), "5%");
        assert_eq!(set("maxmemory-clients", "0%").unwrap(), "0");
        assert_eq!(
            set("maxmemory-clients", "101%").unwrap_err(),
            "percentage argument must be less or equal to 100"
        );
    }

    #[test]
    fn specials() {
        assert_eq!(set("notify-keyspace-events", "KEA").unwrap(), "AKE");
        assert_eq!(set("notify-keyspace-events", "zhK").unwrap(), "hzK");
        assert_eq!(set("notify-keyspace-events", "Kn").unwrap(), "nK");
        assert_eq!(
            set("notify-keyspace-events", "KEA$lshzxetmdn").unwrap(),
            "AKEmn"
        );
        assert_eq!(set("save", "010 5").unwrap(), "10 5");
        assert!(set("save", "0 5").is_err());
        assert_eq!(
            set("client-output-buffer-limit", "replica 1 2 3").unwrap(),
            "normal 0 0 0 slave 1 2 3 pubsub 33554432 8388608 60"
        );
        assert_eq!(
            set("latency-tracking-info-percentiles", "1.50000 0.1 1e1").unwrap(),
            "1.5 0.1 10"
        );
        assert_eq!(set("shutdown-on-sigint", "default now").unwrap(), "now");
        assert_eq!(set("oom-score-adj", "relative").unwrap(), "yes");
        assert!(set("proc-title-template", "{foo}").is_err());
        assert!(set("proc-title-template", "{title} x").is_ok());
    }
}

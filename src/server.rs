//! State shared by every connection: configuration that CONFIG SET can
//! change, the shards, the client registry and server-wide statistics.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use dashmap::DashMap;

use crate::config::Config;
use crate::protocol::Reply;
use crate::shard::ShardSet;

/// What CLIENT LIST / CLIENT INFO / CLIENT KILL need to know about a client.
#[derive(Debug)]
pub struct ClientEntry {
    /// Client id.
    pub id: u64,
    /// Peer address.
    pub addr: String,
    /// Local address.
    pub laddr: String,
    /// When the connection was accepted.
    pub created: Instant,
    /// Mutable details the connection keeps up to date.
    pub info: parking_lot::Mutex<ClientInfo>,
    /// Commands queued since MULTI, or -1 outside a transaction: kept
    /// apart from `info` so that queueing a command takes no lock.
    pub multi: std::sync::atomic::AtomicI64,
    /// Set by CLIENT KILL; the connection closes when it sees it.
    pub kill: tokio::sync::Notify,
    /// Whether CLIENT KILL (or ACL DELUSER) has targeted this client.
    pub killed: AtomicBool,
    /// Closed for passing its output buffer limit: nothing more is written
    /// to it, as in Redis.
    pub over_limit: AtomicBool,
    /// Where Pub/Sub messages for this client are queued.
    pub mailbox: crate::pubsub::Mailbox,
    /// While it waits in a blocking command or is held by CLIENT PAUSE
    /// (CLIENT LIST's `b` flag).
    pub blocked: AtomicBool,
    /// While a blocked command's try is on its shard: the invalidations
    /// its own write sends this client wait for its reply, as in Redis
    /// (BLMOVE's destination).
    pub trying: AtomicBool,
    /// How CLIENT UNBLOCK reaches its blocked command, if it is in one.
    pub unblock: parking_lot::Mutex<Option<crate::net::unblock::Blocked>>,
    /// The last command it ran and when (CLIENT LIST's `cmd=` and
    /// `idle=`), kept apart from `info`: its connection notes them on
    /// every command, and a lock there was two atomic operations a
    /// command for what only CLIENT LIST reads.
    pub activity: Activity,
}

/// A client's last command and when it began: written by its connection
/// alone, read by CLIENT LIST and CLIENT INFO.
#[derive(Debug, Default)]
pub struct Activity {
    /// The command (null before the first).
    cmd: std::sync::atomic::AtomicPtr<crate::command::CommandSpec>,
    /// When it began.
    at: crate::util::AtomicInstant,
}

impl Activity {
    /// Notes that command `spec` began at `at`.
    pub fn ran(&self, spec: &'static crate::command::CommandSpec, at: Instant) {
        self.cmd
            .store(std::ptr::from_ref(spec).cast_mut(), Ordering::Relaxed);
        self.at.set(at);
    }

    /// The last command's name, if one ran.
    pub fn last_cmd(&self) -> Option<&'static str> {
        let spec = self.cmd.load(Ordering::Relaxed);
        // SAFETY: only `ran` stores here, and what it stores comes from a
        // `&'static` command spec.
        unsafe { spec.as_ref() }.map(|s| s.name)
    }

    /// Whole seconds since the last command began (0 before the first).
    pub fn idle_secs(&self) -> u64 {
        self.at.get().map_or(0, |t| t.elapsed().as_secs())
    }
}

impl ClientEntry {
    /// Wakes the connection to close (its `killed` or `over_limit`, or
    /// the server's `stopping`, says so): through `kill` where it waits
    /// on a write or a blocked command, through its mailbox where it
    /// waits for a request (one per-client wake there, rather than two
    /// more futures a read, one of them on the server's shared `Notify`).
    pub fn close_soon(&self) {
        self.kill.notify_one();
        self.mailbox.wake();
    }

    /// Whether the client is to close: killed, or past its output limit.
    pub fn closing(&self) -> bool {
        self.killed.load(Ordering::Relaxed) || self.over_limit.load(Ordering::Acquire)
    }

    /// A new RESP2 client with nothing queued, subscribed or blocked.
    pub fn new(id: u64, addr: String, laddr: String) -> ClientEntry {
        ClientEntry {
            id,
            addr,
            laddr,
            created: Instant::now(),
            info: parking_lot::Mutex::new(ClientInfo {
                resp: 2,
                ..ClientInfo::default()
            }),
            multi: std::sync::atomic::AtomicI64::new(-1),
            kill: tokio::sync::Notify::new(),
            killed: AtomicBool::new(false),
            over_limit: AtomicBool::new(false),
            mailbox: Default::default(),
            blocked: AtomicBool::new(false),
            trying: AtomicBool::new(false),
            unblock: Default::default(),
            activity: Default::default(),
        }
    }
}

/// The parts of a client's state others may read.
#[derive(Debug, Clone, Default)]
pub struct ClientInfo {
    /// CLIENT SETNAME.
    pub name: String,
    /// Selected database.
    pub db: u8,
    /// RESP version.
    pub resp: u8,
    /// CLIENT NO-EVICT.
    pub no_evict: bool,
    /// READONLY was sent (cluster mode).
    pub readonly: bool,
    /// The connection this replica applies its primary's stream through.
    pub primary: bool,
    /// The client's WATCH flag while it watches keys (CLIENT LIST's `d`).
    pub watch_dirty: Option<Arc<AtomicBool>>,
    /// The ACL user it authenticated as (`None`: default), for CLIENT
    /// LIST, CLIENT KILL USER, ACL DELUSER and the caller's scripts.
    pub user: Option<Arc<crate::acl::UserSlot>>,
}

/// Per-command call counts for INFO commandstats.
#[derive(Debug, Default)]
pub struct CommandStat {
    /// Calls (counter 0) and the nanoseconds they took (counter 1): runs
    /// timed where they ran are mostly under a microsecond each, and summed
    /// as whole microseconds they would count as nothing.
    counts: crate::util::stripe::Striped<2>,
    /// Calls that replied with an error.
    pub failed: AtomicU64,
    /// Calls refused before running (wrong number of arguments, NOAUTH).
    pub rejected: AtomicU64,
    /// Latency distribution (LATENCY HISTOGRAM, INFO latencystats).
    pub latency: crate::families::latency::Histogram,
}

impl CommandStat {
    /// Calls.
    pub fn calls(&self) -> u64 {
        self.counts.get(0)
    }

    /// Total microseconds spent.
    pub fn usec(&self) -> u64 {
        self.counts.get(1) / 1000
    }

    /// Forgets every call (CONFIG RESETSTAT).
    pub fn reset(&self) {
        self.counts.reset();
        self.failed.store(0, Ordering::Relaxed);
        self.rejected.store(0, Ordering::Relaxed);
        self.latency.reset();
    }
}

/// Server-wide statistics.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections refused (maxclients).
    pub rejected: AtomicU64,
    /// Commands processed.
    pub commands: crate::util::stripe::Striped,
    /// Bytes read from clients.
    pub net_in: AtomicU64,
    /// Bytes written to clients.
    pub net_out: AtomicU64,
    /// Keyspace hits (reads that found a key).
    pub hits: crate::util::stripe::Striped,
    /// Keyspace misses.
    pub misses: crate::util::stripe::Striped,
    /// Error replies sent.
    pub errors: AtomicU64,
    /// Socket reads that brought client input.
    pub reads: AtomicU64,
    /// Socket writes of replies.
    pub writes: AtomicU64,
    /// Clients blocked other than on keys (in WAIT, or held by CLIENT
    /// PAUSE): INFO's blocked_clients counts them with the key waiters.
    pub held: AtomicU64,
    /// Recent samples of the counters above: INFO's instantaneous rates.
    pub samples: parking_lot::Mutex<crate::families::info::RateSamples>,
}

/// Counts a client in [`ServerStats::held`] while it lives.
pub struct Held<'a>(&'a AtomicU64);

impl<'a> Held<'a> {
    /// Starts counting.
    pub fn new(count: &'a AtomicU64) -> Held<'a> {
        count.fetch_add(1, Ordering::Relaxed);
        Held(count)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Run-time settable configuration (CONFIG SET): every Redis parameter's
/// current value, from the registry in `families::config`.
pub type Runtime = crate::families::config::Values;

/// The server.
pub struct Server {
    /// Configuration as loaded.
    pub config: Config,
    /// Settable configuration.
    pub runtime: parking_lot::RwLock<Runtime>,
    /// The compact-encoding thresholds in force (see
    /// [`Server::encoding_limits`]).
    limits: crate::rdb::object::SharedLimits,
    /// CONFIG `timeout`, seconds (0: never): a connection reads it after
    /// every read, so it keeps a copy rather than look the parameter up
    /// (see [`Server::configure_limits`]).
    pub idle_timeout: AtomicU64,
    /// Whether `min-replicas-to-write` and `min-replicas-max-lag` are both
    /// set: a primary needs that many good replicas to take a write, and
    /// cairn never has one, so every write is refused with NOREPLICAS (see
    /// [`Server::writes_refused`]). A copy, since every command asks.
    replicas_required: AtomicBool,
    /// The shards.
    pub shards: Arc<ShardSet>,
    /// Where reads run: on their connection's thread, or on threads of
    /// their own while they wait for the disk.
    pub disk_reads: crate::shard::disk_reads::DiskReads,
    /// Connected clients by id.
    pub clients: DashMap<u64, Arc<ClientEntry>>,
    /// Next client id.
    pub next_client_id: AtomicU64,
    /// Statistics.
    pub stats: ServerStats,
    /// Per-command statistics.
    pub command_stats: Vec<CommandStat>,
    /// Error replies by their first word (`ERR`, `WRONGTYPE`...): INFO
    /// errorstats. The words come from cairn's own messages, so the map
    /// stays small.
    pub error_stats: parking_lot::Mutex<std::collections::BTreeMap<String, u64>>,
    /// When the server started.
    pub started: Instant,
    /// Unix time the server started: LASTSAVE until a durable commit.
    pub last_save: AtomicU64,
    /// The port actually bound (0: none, after CONFIG SET port 0).
    pub port: AtomicU64,
    /// A listener CONFIG SET port has bound, for the accept loop to take
    /// in place of its own (`Some(None)`: stop listening).
    pub relisten: parking_lot::Mutex<Option<Option<std::net::TcpListener>>>,
    /// Wakes the accept loop to take `relisten`.
    pub relistened: tokio::sync::Notify,
    /// Signalled to stop the server (SHUTDOWN, signals).
    pub shutdown: tokio::sync::Notify,
    /// Set once shutdown has begun.
    pub stopping: AtomicBool,
    /// The Lua states (one per shard, one for scripts holding every shard)
    /// and the script cache and function libraries they share; each
    /// state's kill switch, and what runs on it.
    pub scripts: Arc<crate::scripting::Engines>,
    /// Scripts (by sha) and functions (`function:<name>`) seen to reach
    /// beyond the shard of their declared keys: they run holding every
    /// shard from then on. Hashed with foldhash, as each script run asks
    /// (see the scripts' map in `scripting::vm`).
    pub nonlocal_scripts: DashMap<String, (), foldhash::fast::RandomState>,
    /// Connections running commands now (from a read with requests until
    /// their replies are written): few of them means few writes to share
    /// a shard's batch with (see `net::conn`'s scripts).
    pub busy_clients: std::sync::atomic::AtomicUsize,
    /// DEBUG SET-DISABLE-DENY-SCRIPTS: scripts may call commands flagged
    /// `noscript` (Redis's own tests call DEBUG from scripts this way).
    pub deny_scripts_disabled: AtomicBool,
    /// Serializes changes of the function libraries with their storage.
    pub functions_lock: tokio::sync::Mutex<()>,
    /// Libraries and functions loaded (FUNCTION STATS without waiting for
    /// a running script).
    pub function_counts: (AtomicU64, AtomicU64, AtomicU64),
    /// Positions of HSCAN/SSCAN/ZSCAN cursors over big collections.
    pub scan_cursors: crate::families::collection::ScanCursors,
    /// SAVE / BGSAVE state for INFO persistence.
    pub persistence: crate::families::persistence::SaveState,
    /// Keys' last access and LFU counters (OBJECT IDLETIME / FREQ).
    pub access: crate::families::object::AccessClock,
    /// MIGRATE's idle connections to its targets.
    pub migrate_conns: crate::families::dump::MigrateConns,
    /// This node's cluster state, in cluster mode.
    pub cluster: Option<Arc<crate::cluster::node::Cluster>>,
    /// Pub/Sub subscribers (shared with the shards, which publish the
    /// messages of transactions and scripts when they commit).
    pub pubsub: Arc<crate::pubsub::Hub>,
    /// SLOWLOG's entries and thresholds.
    pub slowlog: crate::families::slowlog::SlowLog,
    /// The latency monitor (shared with the shards, which time commits
    /// and reaper slices).
    pub latency: Arc<crate::families::latency::LatencyMonitor>,
    /// ACL users and the ACL LOG.
    pub acl: crate::acl::Acl,
    /// The replication id (INFO's master_replid, PSYNC's FULLRESYNC):
    /// drawn at start and by DEBUG CHANGE-REPL-ID; a replica's is its
    /// primary's.
    pub replid: parking_lot::Mutex<String>,
    /// REPLICAOF: the primary this server replicates, if any.
    pub replication: crate::replication::Replication,
}

impl Server {
    /// `busy-reply-threshold` (alias `lua-time-limit`) in milliseconds.
    pub fn busy_reply_threshold_ms(&self) -> u64 {
        self.runtime.read().int("busy-reply-threshold").max(0) as u64
    }

    /// The compact-encoding thresholds of the `*-max-listpack-*` family,
    /// which decide the encoding DUMP writes a value in and when a write
    /// converts a collection out of its compact encoding.
    pub fn encoding_limits(&self) -> crate::rdb::object::Limits {
        self.limits.load()
    }

    /// Sets the list elements from which DUMP gives an element a quicklist
    /// node of its own (DEBUG QUICKLIST-PACKED-THRESHOLD; 0: the default);
    /// false for a size Redis refuses.
    pub fn set_packed_threshold(&self, size: u64) -> bool {
        self.limits.set_packed_threshold(size)
    }

    /// Takes the thresholds of [`Server::encoding_limits`] and the idle
    /// timeout from `rt` (at start and after CONFIG SET): commands and
    /// connections read a copy rather than parse the configuration each
    /// time.
    pub fn configure_limits(&self, rt: &Runtime) {
        self.limits.store(&limits_of(rt));
        self.idle_timeout
            .store(idle_timeout_of(rt), Ordering::Relaxed);
        self.replicas_required
            .store(replicas_required_of(rt), Ordering::Relaxed);
        self.access.configure(rt);
    }

    /// Redis's refusal of a write while `min-replicas-to-write` asks for
    /// more good replicas than the primary has (here: any), or `None`. A
    /// replica counts no replicas of its own (Redis checks a primary only).
    pub fn writes_refused(&self) -> Option<Reply> {
        (self.replicas_required.load(Ordering::Relaxed) && !self.replication.is_replica())
            .then(|| Reply::Error(NOREPLICAS.into()))
    }

    /// Whether `min-replicas-to-write` is in force (INFO replication then
    /// shows `min_slaves_good_slaves`, always 0 here).
    pub fn replicas_required(&self) -> bool {
        self.replicas_required.load(Ordering::Relaxed)
    }

    /// Creates the shared state.
    pub fn new(config: Config, shards: Arc<ShardSet>) -> Server {
        // Config::load has validated the values; a Config built in code
        // with a bad one falls back to the defaults, with a warning.
        let runtime = crate::families::config::initial_values(&config).unwrap_or_else(|e| {
            tracing::warn!("config: {e}; using Redis's defaults");
            Runtime::default()
        });
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let pubsub = shards.hub.clone();
        pubsub.configure(&runtime);
        let (slowlog, latency) = (Default::default(), shards.latency.clone());
        crate::families::latency::configure(&slowlog, &latency, &runtime);
        let acl = crate::acl::startup(&runtime);
        let scripts = crate::scripting::Engines::new(shards.len()).expect("the Lua engines start");
        let limits = crate::rdb::object::SharedLimits::default();
        limits.store(&limits_of(&runtime));
        let access = crate::families::object::AccessClock::default();
        access.configure(&runtime);
        Server {
            slowlog,
            latency,
            acl,
            replid: parking_lot::Mutex::new(crate::util::hex_id()),
            replication: crate::replication::Replication::new(shards.switches.clone()),
            pubsub,
            config,
            limits,
            idle_timeout: AtomicU64::new(idle_timeout_of(&runtime)),
            replicas_required: AtomicBool::new(replicas_required_of(&runtime)),
            runtime: parking_lot::RwLock::new(runtime),
            shards,
            disk_reads: Default::default(),
            clients: DashMap::new(),
            next_client_id: AtomicU64::new(1),
            stats: ServerStats::default(),
            command_stats: crate::command::all_specs()
                .map(|_| CommandStat::default())
                .collect(),
            error_stats: Default::default(),
            started: Instant::now(),
            last_save: AtomicU64::new(now),
            port: AtomicU64::new(0),
            relisten: Default::default(),
            relistened: tokio::sync::Notify::new(),
            shutdown: tokio::sync::Notify::new(),
            scripts: Arc::new(scripts),
            functions_lock: tokio::sync::Mutex::new(()),
            nonlocal_scripts: DashMap::default(),
            busy_clients: Default::default(),
            deny_scripts_disabled: AtomicBool::new(false),
            function_counts: (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)),
            stopping: AtomicBool::new(false),
            scan_cursors: Default::default(),
            persistence: Default::default(),
            access,
            migrate_conns: Default::default(),
            cluster: None,
        }
    }

    /// LASTSAVE: when everything acknowledged was last on disk, i.e. the
    /// latest durable commit of any shard (or the start time).
    pub fn last_save_time(&self) -> u64 {
        self.shards
            .shards()
            .iter()
            .map(|sh| sh.stats.last_durable.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
            .max(self.last_save.load(Ordering::Relaxed))
    }

    /// Asks the server to stop.
    pub fn request_shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        // A running script holds every shard: it stops, and its writes
        // roll back, so the shards can close.
        crate::families::scripting::abort_for_shutdown(self);
        self.shutdown.notify_waiters();
        self.shutdown.notify_one();
        self.wake_clients();
    }

    /// Wakes every connection waiting for a request, to see `stopping`.
    pub fn wake_clients(&self) {
        for c in self.clients.iter() {
            c.mailbox.wake();
        }
    }

    /// The counters of a command or subcommand.
    pub fn command_stat(&self, spec: &'static crate::command::CommandSpec) -> &CommandStat {
        &self.command_stats[crate::command::index_of(spec)]
    }

    /// Counts a command call.
    /// `sampled`: whether the call's time is its latency sample (not for
    /// a write, which samples its run: [`Server::sample_run`]).
    pub fn record_call(
        &self,
        spec: &'static crate::command::CommandSpec,
        usec: u64,
        sampled: bool,
    ) {
        let stat = self.command_stat(spec);
        stat.counts.add_to(0, 1);
        stat.counts.add_to(1, usec.saturating_mul(1000));
        if sampled && self.latency.tracking() {
            stat.latency.record(usec);
        }
    }

    /// A write's run, timed where it ran (see `families::slowlog`), as
    /// its command's latency sample.
    pub fn sample_run(
        &self,
        spec: &'static crate::command::CommandSpec,
        took: std::time::Duration,
    ) {
        if self.latency.tracking() {
            self.command_stat(spec).latency.record_ns(nanos(took));
        }
    }

    /// Adds time to a command's counted calls: a write's, a script's or a
    /// transaction's run, timed where it ran (see `families::slowlog`).
    pub fn add_time(&self, spec: &'static crate::command::CommandSpec, took: std::time::Duration) {
        self.command_stat(spec).counts.add_to(1, nanos(took));
    }

    /// Counts an error reply going to a client: total_error_replies, its
    /// errorstats line, and the failed calls of the command that made it
    /// (`None` for a command refused before it ran).
    pub fn record_error(&self, text: &str, cmd: Option<&'static crate::command::CommandSpec>) {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        let code = text.split(' ').next().unwrap_or_default();
        let mut by_code = self.error_stats.lock();
        match by_code.get_mut(code) {
            Some(n) => *n += 1,
            None => {
                by_code.insert(code.to_string(), 1);
            }
        }
        drop(by_code);
        if let Some(cmd) = cmd {
            self.command_stat(cmd)
                .failed
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// CONFIG `timeout` in seconds (its range starts at 0).
fn idle_timeout_of(rt: &Runtime) -> u64 {
    rt.int("timeout").max(0) as u64
}

/// Whether `rt` asks for good replicas before a write: Redis checks only
/// while both `min-replicas-to-write` and `min-replicas-max-lag` are
/// non-zero.
fn replicas_required_of(rt: &Runtime) -> bool {
    rt.int("min-replicas-to-write") > 0 && rt.int("min-replicas-max-lag") > 0
}

/// Redis's reply to a write refused for want of replicas.
const NOREPLICAS: &str = "NOREPLICAS Not enough good replicas to write.";

/// The compact-encoding thresholds set in `rt`.
fn limits_of(rt: &Runtime) -> crate::rdb::object::Limits {
    crate::rdb::object::Limits {
        hash_entries: rt.size("hash-max-listpack-entries"),
        hash_value: rt.size("hash-max-listpack-value"),
        set_intset_entries: rt.size("set-max-intset-entries"),
        zset_entries: rt.size("zset-max-listpack-entries"),
        zset_value: rt.size("zset-max-listpack-value"),
        list_fill: rt.int("list-max-listpack-size"),
        // Not a parameter: `SharedLimits::store` keeps what DEBUG set.
        list_plain_from: crate::rdb::object::Limits::default().list_plain_from,
        stream: crate::rdb::stream::NodeLimits {
            max_bytes: rt.size("stream-node-max-bytes"),
            max_entries: rt.size("stream-node-max-entries"),
        },
    }
}

/// A duration in whole nanoseconds (saturating: ~584 years).
fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

//! INFO sections, with Redis's field names where Redis has the field.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use crate::net::session::Session;
use crate::storage::tables::DATABASES;

/// Every section, in the order INFO prints them.
pub const ALL_SECTIONS: [&str; 14] = [
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "commandstats",
    "errorstats",
    "latencystats",
    "cluster",
    "keyspace",
    "cairn",
];

/// The sections INFO prints without arguments (or with `default`).
pub const DEFAULT_SECTIONS: [&str; 12] = [
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "errorstats",
    "cluster",
    "keyspace",
    "cairn",
];

/// Resident set size of this process in bytes (Linux), 0 if unknown.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

/// Appends one section (header included) to `out`.
pub fn section(s: &Session, name: &str, out: &mut String) {
    let srv = &s.server;
    let st = &srv.stats;
    match name {
        "server" => server_section(s, out),
        "clients" => {
            // The largest output queue a client has now (pushes not yet
            // written); cairn keeps no per-client input buffer to measure.
            let max_out = srv
                .clients
                .iter()
                .map(|c| c.mailbox.pending.load(Relaxed))
                .max()
                .unwrap_or(0);
            let _ = write!(
                out,
                "# Clients\r\nconnected_clients:{}\r\ncluster_connections:0\r\nmaxclients:{}\r\nclient_recent_max_input_buffer:0\r\nclient_recent_max_output_buffer:{max_out}\r\nblocked_clients:{}\r\ntracking_clients:{}\r\nclients_in_timeout_table:0\r\n",
                srv.clients.len(),
                srv.runtime.read().maxclients(),
                srv.shards.blocked.blocked_clients()
                    + srv.stats.held.load(Relaxed) as usize,
                srv.pubsub.tracking.stats().0
            );
        }
        "memory" => memory_section(s, out),
        "persistence" => {
            let ps = &srv.persistence;
            let started = ps.started_ms.load(Relaxed);
            let current = if started == 0 {
                -1
            } else {
                (crate::shard::now_ms().saturating_sub(started) / 1000) as i64
            };
            let changes = crate::families::persistence::write_ops(srv)
                .saturating_sub(ps.ops_at_save.load(Relaxed));
            let _ = write!(
                out,
                "# Persistence\r\nloading:0\r\nasync_loading:0\r\nrdb_changes_since_last_save:{}\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:{}\r\nrdb_last_bgsave_time_sec:{}\r\nrdb_current_bgsave_time_sec:{}\r\nrdb_saves:{}\r\naof_enabled:0\r\naof_rewrite_in_progress:0\r\ncairn_durability:{}\r\n",
                changes,
                ps.in_progress.load(Relaxed) as u8,
                srv.last_save_time(),
                if ps.last_ok.load(Relaxed) { "ok" } else { "err" },
                ps.last_secs.load(Relaxed),
                current,
                ps.saves.load(Relaxed),
                srv.shards.durability().name()
            );
        }
        "stats" => {
            let expired: u64 = srv
                .shards
                .shards()
                .iter()
                .map(|sh| sh.stats.expired_keys.load(Relaxed))
                .sum();
            let shard_sum =
                |f: &dyn Fn(&crate::shard::ShardStats) -> &std::sync::atomic::AtomicU64| -> u64 {
                    srv.shards
                        .shards()
                        .iter()
                        .map(|sh| f(&sh.stats).load(Relaxed))
                        .sum()
                };
            let tracking = srv.pubsub.tracking.stats();
            let rates = st.samples.lock().rates();
            let fields: [(&str, String); 50] = [
                (
                    "total_connections_received",
                    st.connections.load(Relaxed).to_string(),
                ),
                ("total_commands_processed", st.commands.load().to_string()),
                ("instantaneous_ops_per_sec", rates.ops.to_string()),
                ("total_net_input_bytes", st.net_in.load(Relaxed).to_string()),
                (
                    "total_net_output_bytes",
                    st.net_out.load(Relaxed).to_string(),
                ),
                ("total_net_repl_input_bytes", "0".into()),
                ("total_net_repl_output_bytes", "0".into()),
                (
                    "instantaneous_input_kbps",
                    format!("{:.2}", rates.input_kbps),
                ),
                (
                    "instantaneous_output_kbps",
                    format!("{:.2}", rates.output_kbps),
                ),
                ("instantaneous_input_repl_kbps", "0.00".into()),
                ("instantaneous_output_repl_kbps", "0.00".into()),
                (
                    "rejected_connections",
                    st.rejected.load(Relaxed).to_string(),
                ),
                ("sync_full", "0".into()),
                ("sync_partial_ok", "0".into()),
                ("sync_partial_err", "0".into()),
                ("expired_keys", expired.to_string()),
                ("expired_stale_perc", "0.00".into()),
                ("expired_time_cap_reached_count", "0".into()),
                ("expire_cycle_cpu_milliseconds", "0".into()),
                ("evicted_keys", "0".into()),
                ("evicted_clients", "0".into()),
                ("total_eviction_exceeded_time", "0".into()),
                ("current_eviction_exceeded_time", "0".into()),
                (
                    "keyspace_hits",
                    (st.hits.load() + shard_sum(&|sh| &sh.hits)).to_string(),
                ),
                (
                    "keyspace_misses",
                    (st.misses.load() + shard_sum(&|sh| &sh.misses)).to_string(),
                ),
                (
                    "pubsub_channels",
                    srv.pubsub
                        .channel_count(crate::pubsub::Kind::Channel)
                        .to_string(),
                ),
                ("pubsub_patterns", srv.pubsub.numpat().to_string()),
                (
                    "pubsubshard_channels",
                    srv.pubsub
                        .channel_count(crate::pubsub::Kind::Shard)
                        .to_string(),
                ),
                // cairn never forks: saves read a snapshot instead.
                ("latest_fork_usec", "0".into()),
                ("total_forks", "0".into()),
                (
                    "migrate_cached_sockets",
                    srv.migrate_conns.len().to_string(),
                ),
                ("slave_expires_tracked_keys", "0".into()),
                ("active_defrag_hits", "0".into()),
                ("active_defrag_misses", "0".into()),
                ("active_defrag_key_hits", "0".into()),
                ("active_defrag_key_misses", "0".into()),
                ("total_active_defrag_time", "0".into()),
                ("current_active_defrag_time", "0".into()),
                ("tracking_total_keys", tracking.1.to_string()),
                ("tracking_total_items", tracking.2.to_string()),
                ("tracking_total_prefixes", tracking.3.to_string()),
                ("unexpected_error_replies", "0".into()),
                ("total_error_replies", st.errors.load(Relaxed).to_string()),
                ("dump_payload_sanitizations", "0".into()),
                ("total_reads_processed", st.reads.load(Relaxed).to_string()),
                (
                    "total_writes_processed",
                    st.writes.load(Relaxed).to_string(),
                ),
                ("io_threaded_reads_processed", "0".into()),
                ("io_threaded_writes_processed", "0".into()),
                ("reply_buffer_shrinks", "0".into()),
                ("reply_buffer_expands", "0".into()),
            ];
            out.push_str("# Stats\r\n");
            for (name, value) in fields {
                let _ = write!(out, "{name}:{value}\r\n");
            }
        }
        "replication" => srv.replication.info(srv, out),
        "cpu" => {
            let (user, sys) = cpu_seconds();
            let _ = write!(
                out,
                "# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\n"
            );
        }
        // No modules load into cairn; Redis prints the bare header then.
        "modules" => out.push_str("# Modules\r\n"),
        "errorstats" => {
            out.push_str("# Errorstats\r\n");
            for (code, count) in srv.error_stats.lock().iter() {
                let _ = write!(out, "errorstat_{code}:count={count}\r\n");
            }
        }
        "latencystats" => crate::families::latency::info_section(srv, out),
        "cluster" => {
            let on = u8::from(srv.cluster.is_some());
            let _ = write!(out, "# Cluster\r\ncluster_enabled:{on}\r\n");
        }
        "commandstats" => {
            out.push_str("# Commandstats\r\n");
            // Redis lists the commands (subcommands as `container|sub`)
            // that were called or refused.
            let rows = crate::command::all_specs()
                .zip(&srv.command_stats)
                .map(|(c, st)| {
                    (
                        c.name,
                        st.calls(),
                        st.usec(),
                        st.failed.load(Relaxed),
                        st.rejected.load(Relaxed),
                    )
                })
                .filter(|row| row.1 > 0 || row.4 > 0);
            for (name, calls, usec, failed, rejected) in rows {
                let per = if calls == 0 {
                    0.0
                } else {
                    usec as f64 / calls as f64
                };
                let _ = write!(
                    out,
                    "cmdstat_{name}:calls={calls},usec={usec},usec_per_call={per:.2},rejected_calls={rejected},failed_calls={failed}\r\n"
                );
            }
        }
        "keyspace" => {
            out.push_str("# Keyspace\r\n");
            for db in 0..DATABASES as u8 {
                let (mut keys, mut expires, mut sum) = (0, 0, 0i128);
                for sh in srv.shards.shards() {
                    let c = sh.counts(db);
                    keys += c.keys;
                    expires += c.expires;
                    sum += c.expire_sum;
                }
                // The mean time to live of the keys with one; keys expired
                // and not reaped yet pull it down, never below 0.
                let avg_ttl = if expires > 0 {
                    (sum / i128::from(expires) - i128::from(crate::shard::now_ms())).max(0)
                } else {
                    0
                };
                if keys > 0 {
                    let _ = write!(
                        out,
                        "db{db}:keys={keys},expires={expires},avg_ttl={avg_ttl}\r\n"
                    );
                }
            }
        }
        _ => {}
    }
}

/// INFO cairn. Its row counts cost work in the size of the write buffers
/// (see `ReadCtx::rows`): INFO runs it on a blocking thread, not on the
/// connection's.
pub fn cairn_section(srv: &crate::server::Server, out: &mut String) {
    let shards = srv.shards.shards();
    let sum = |f: fn(&crate::shard::ShardStats) -> u64| -> u64 {
        shards.iter().map(|sh| f(&sh.stats)).sum()
    };
    let rows = |t| -> u64 {
        shards
            .iter()
            .filter_map(|sh| sh.snapshot().ok())
            .filter_map(|snap| snap.rows(t).ok())
            .sum()
    };
    let batches = sum(|s| s.batches.load(Relaxed));
    let ops = sum(|s| s.batch_ops.load(Relaxed));
    let avg = if batches == 0 {
        0.0
    } else {
        ops as f64 / batches as f64
    };
    // Rows before the counters: the reaper counts what it removes
    // before its slice becomes visible, so rows seen gone are
    // counted here.
    let (sub_rows, zscore_rows, gc_pending) = (
        rows(crate::storage::Table::Sub),
        rows(crate::storage::Table::ZScore),
        rows(crate::storage::Table::Gc),
    );
    let stores: Vec<_> = shards.iter().filter_map(|sh| sh.store().ok()).collect();
    let buffered: usize = stores.iter().map(|st| st.buffered_bytes()).sum();
    let filters: usize = stores.iter().map(|st| st.key_filter_bytes()).sum();
    let row_cache: usize = stores.iter().map(|st| st.row_cache_bytes()).sum();
    let (value_log, value_log_dead) = stores
        .iter()
        .map(|st| st.value_log_usage())
        .fold((0, 0), |(b, d), (sb, sd)| (b + sb, d + sd));
    let _ = write!(
        out,
        "# Cairn\r\nshards:{}\r\ndurability:{}\r\ndisk_bytes:{}\r\nbatches:{batches}\r\nbatch_ops:{ops}\r\navg_batch_size:{avg:.2}\r\nmax_batch_size:{}\r\ncommits:{}\r\nfsyncs:{}\r\ncoordinated_commits:{}\r\ncoordinated_commits_here:{}\r\nreaper_ticks:{}\r\nreaper_expired_keys:{}\r\ngc_rows_deleted:{}\r\ngc_versions_collected:{}\r\nsub_rows:{sub_rows}\r\nzscore_rows:{zscore_rows}\r\ngc_pending:{gc_pending}\r\nwrite_buffer_bytes:{buffered}\r\nkey_filter_bytes:{filters}\r\nrow_cache_bytes:{row_cache}\r\nvalue_log_bytes:{value_log}\r\nvalue_log_dead_bytes:{value_log_dead}\r\nreads_moved_now:{}\r\nreads_moved:{}\r\n",
        shards.len(),
        srv.shards.durability().name(),
        super::memory::disk_bytes(srv),
        shards.iter().map(|sh| sh.stats.max_batch.load(Relaxed)).max().unwrap_or(0),
        sum(|s| s.commits.load(Relaxed)),
        sum(|s| s.fsyncs.load(Relaxed)),
        sum(|s| s.coordinated.load(Relaxed)),
        sum(|s| s.coordinated_here.load(Relaxed)),
        sum(|s| s.reaper_ticks.load(Relaxed)),
        sum(|s| s.expired_keys.load(Relaxed)),
        sum(|s| s.gc_rows.load(Relaxed)),
        sum(|s| s.gc_versions.load(Relaxed)),
        u8::from(srv.disk_reads.moved()),
        srv.disk_reads.moved_total(),
    );
}

/// INFO server: Redis 7.0's fields in its order, cairn's version second.
fn server_section(s: &Session, out: &mut String) {
    let srv = &s.server;
    let uptime = srv.started.elapsed().as_secs();
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let hz = srv.runtime.read().int("hz");
    let absolute = |p: &std::path::Path| {
        std::fs::canonicalize(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    };
    let executable = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let config_file = srv.config.file.as_deref().map(absolute).unwrap_or_default();
    let _ = write!(
        out,
        "# Server\r\nredis_version:{}\r\ncairn_version:{}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\nredis_build_id:0\r\nredis_mode:{}\r\nos:{} {} {}\r\narch_bits:64\r\nmonotonic_clock:POSIX clock_gettime\r\nmultiplexing_api:epoll\r\natomicvar_api:c11-builtin\r\ngcc_version:0.0.0\r\nprocess_id:{}\r\nprocess_supervised:no\r\nrun_id:{}\r\ntcp_port:{}\r\nserver_time_usec:{now_us}\r\nuptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\nhz:{hz}\r\nconfigured_hz:{hz}\r\nlru_clock:{}\r\nexecutable:{executable}\r\nconfig_file:{config_file}\r\nio_threads_active:0\r\n",
        super::server::REDIS_VERSION,
        env!("CARGO_PKG_VERSION"),
        if srv.cluster.is_some() { "cluster" } else { "standalone" },
        if std::env::consts::OS == "linux" { "Linux" } else { std::env::consts::OS },
        release.trim(),
        std::env::consts::ARCH,
        std::process::id(),
        run_id(),
        srv.port.load(Relaxed),
        uptime / 86400,
        (now_us / 1_000_000) & ((1 << 24) - 1),
    );
}

/// This process's run id: 40 random hex characters, drawn once.
fn run_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(crate::util::hex_id)
}

/// How many samples the instantaneous rates average over, and how often
/// one is taken (Redis: 16 samples, every 100 ms).
const RATE_SAMPLES: usize = 16;
const RATE_PERIOD: std::time::Duration = std::time::Duration::from_millis(100);

/// Samples of the command and byte counters, for INFO's
/// `instantaneous_*` fields.
#[derive(Debug, Default)]
pub struct RateSamples {
    /// The counters at the last sample: (when, commands, bytes in, bytes out).
    last: Option<(std::time::Instant, u64, u64, u64)>,
    /// Per-second rates of the latest samples: (ops, bytes in, bytes out).
    recent: std::collections::VecDeque<(f64, f64, f64)>,
}

/// INFO's instantaneous rates.
pub struct Rates {
    /// Commands per second.
    pub ops: u64,
    /// Kilobytes read per second.
    pub input_kbps: f64,
    /// Kilobytes written per second.
    pub output_kbps: f64,
}

impl RateSamples {
    /// Takes a sample of the counters.
    fn sample(&mut self, commands: u64, input: u64, output: u64) {
        let now = std::time::Instant::now();
        if let Some((at, c, i, o)) = self.last {
            let secs = now.duration_since(at).as_secs_f64().max(1e-3);
            let rate = |now: u64, then: u64| now.saturating_sub(then) as f64 / secs;
            if self.recent.len() == RATE_SAMPLES {
                self.recent.pop_front();
            }
            self.recent
                .push_back((rate(commands, c), rate(input, i), rate(output, o)));
        }
        self.last = Some((now, commands, input, output));
    }

    /// The mean rates over the samples kept.
    pub fn rates(&self) -> Rates {
        let n = self.recent.len().max(1) as f64;
        let sum = self
            .recent
            .iter()
            .fold((0.0, 0.0, 0.0), |a, r| (a.0 + r.0, a.1 + r.1, a.2 + r.2));
        Rates {
            ops: (sum.0 / n).round() as u64,
            input_kbps: sum.1 / n / 1024.0,
            output_kbps: sum.2 / n / 1024.0,
        }
    }
}

/// Samples the server's counters every 100 ms until it stops.
pub fn start_sampling(server: &std::sync::Arc<crate::server::Server>) {
    let weak = std::sync::Arc::downgrade(server);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(RATE_PERIOD);
        loop {
            tick.tick().await;
            let Some(srv) = weak.upgrade() else { return };
            if srv.stopping.load(Relaxed) {
                return;
            }
            let st = &srv.stats;
            st.samples.lock().sample(
                st.commands.load(),
                st.net_in.load(Relaxed),
                st.net_out.load(Relaxed),
            );
        }
    });
}

/// INFO memory: Redis 7.0's fields, in its order, from the allocator's
/// figures (see `families::memory` for what they stand for here).
fn memory_section(s: &Session, out: &mut String) {
    let srv = &s.server;
    let u = super::memory::usage();
    let o = super::memory::overhead(srv, &u);
    let lua = srv.scripts.memory_stats();
    let (libraries, functions) = (
        srv.function_counts.0.load(Relaxed),
        srv.function_counts.1.load(Relaxed),
    );
    let net = u.allocated.saturating_sub(u.startup).max(1);
    let dataset = u.allocated.saturating_sub(o.total);
    let (maxmemory, policy) = {
        let rt = srv.runtime.read();
        (
            rt.get("maxmemory").parse::<u64>().unwrap_or(0),
            rt.get("maxmemory-policy").to_string(),
        )
    };
    let system = total_system_memory();
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    let rss_over = u.rss as i64 - u.allocated as i64;
    let h = bytes_to_human;
    // Each Lua state (one per shard, one for scripts holding every shard)
    // runs both scripts and functions: their memory, summed, is reported
    // as the eval VM's.
    let l = lua.lua_bytes as u64;
    let scripts_total = lua.script_bytes as u64 + o.functions;
    let fields: [(&str, String); 51] = [
        ("used_memory", u.allocated.to_string()),
        ("used_memory_human", h(u.allocated)),
        ("used_memory_rss", u.rss.to_string()),
        ("used_memory_rss_human", h(u.rss)),
        ("used_memory_peak", u.peak.to_string()),
        ("used_memory_peak_human", h(u.peak)),
        (
            "used_memory_peak_perc",
            format!("{:.2}%", ratio(u.allocated * 100, u.peak)),
        ),
        ("used_memory_overhead", o.total.to_string()),
        ("used_memory_startup", u.startup.to_string()),
        ("used_memory_dataset", dataset.to_string()),
        (
            "used_memory_dataset_perc",
            format!("{:.2}%", ratio(dataset * 100, net)),
        ),
        ("allocator_allocated", u.allocated.to_string()),
        ("allocator_active", u.allocated.to_string()),
        ("allocator_resident", u.rss.to_string()),
        ("total_system_memory", system.to_string()),
        ("total_system_memory_human", h(system)),
        ("used_memory_lua", l.to_string()),
        ("used_memory_vm_eval", l.to_string()),
        ("used_memory_lua_human", h(l)),
        ("used_memory_scripts_eval", lua.script_bytes.to_string()),
        ("number_of_cached_scripts", lua.scripts.to_string()),
        ("number_of_functions", functions.to_string()),
        ("number_of_libraries", libraries.to_string()),
        ("used_memory_vm_functions", "0".into()),
        ("used_memory_vm_total", l.to_string()),
        ("used_memory_vm_total_human", h(l)),
        ("used_memory_functions", o.functions.to_string()),
        ("used_memory_scripts", scripts_total.to_string()),
        ("used_memory_scripts_human", h(scripts_total)),
        ("maxmemory", maxmemory.to_string()),
        ("maxmemory_human", h(maxmemory)),
        ("maxmemory_policy", policy),
        ("allocator_frag_ratio", "1.00".into()),
        ("allocator_frag_bytes", "0".into()),
        (
            "allocator_rss_ratio",
            format!("{:.2}", ratio(u.rss, u.allocated)),
        ),
        ("allocator_rss_bytes", rss_over.to_string()),
        ("rss_overhead_ratio", "1.00".into()),
        ("rss_overhead_bytes", "0".into()),
        (
            "mem_fragmentation_ratio",
            format!("{:.2}", ratio(u.rss, u.allocated)),
        ),
        ("mem_fragmentation_bytes", rss_over.to_string()),
        ("mem_not_counted_for_evict", "0".into()),
        ("mem_replication_backlog", "0".into()),
        ("mem_total_replication_buffers", "0".into()),
        ("mem_clients_slaves", "0".into()),
        ("mem_clients_normal", o.clients.to_string()),
        ("mem_cluster_links", "0".into()),
        ("mem_aof_buffer", "0".into()),
        ("mem_allocator", super::memory::allocator_name()),
        ("active_defrag_running", "0".into()),
        ("lazyfree_pending_objects", "0".into()),
        ("lazyfreed_objects", "0".into()),
    ];
    out.push_str("# Memory\r\n");
    for (name, value) in fields {
        let _ = write!(out, "{name}:{value}\r\n");
    }
}

/// The machine's memory (Linux's MemTotal), 0 if unknown.
fn total_system_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        })
        .unwrap_or(0)
}

/// User and system CPU seconds of this process (Linux), from /proc.
fn cpu_seconds() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let tick = 100.0;
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / tick;
    (get(11), get(12))
}

/// Redis's human form of a byte count (`280B`, `32.00K`, `1.50M`).
fn bytes_to_human(n: u64) -> String {
    const UNITS: [(f64, &str); 5] = [
        (1024.0, "K"),
        (1048576.0, "M"),
        (1073741824.0, "G"),
        (1099511627776.0, "T"),
        (1125899906842624.0, "P"),
    ];
    if n < 1024 {
        return format!("{n}B");
    }
    let v = n as f64;
    for (i, (size, unit)) in UNITS.iter().enumerate() {
        if i + 1 == UNITS.len() || v < UNITS[i + 1].0 {
            return format!("{:.2}{unit}", v / size);
        }
    }
    unreachable!("the last unit takes every size")
}

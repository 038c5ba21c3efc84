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
    let uptime = srv.started.elapsed().as_secs();
    match name {
        "server" => {
            let _ = write!(
                out,
                "# Server\r\nredis_version:{}\r\ncairn_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:64\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nexecutable:cairn\r\nconfig_file:\r\n",
                super::server::REDIS_VERSION,
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::env::consts::ARCH,
                std::process::id(),
                srv.port.load(Relaxed),
                uptime,
                uptime / 86400
            );
        }
        "clients" => {
            let _ = write!(
                out,
                "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\ntracking_clients:{}\r\n",
                srv.clients.len(),
                srv.runtime.read().maxclients(),
                srv.shards.blocked.blocked_clients(),
                srv.pubsub.tracking.stats().0
            );
        }
        "memory" => {
            use std::sync::atomic::Ordering::Relaxed;
            let rss = rss_bytes();
            let lua = srv.scripts.memory_stats();
            let (libraries, functions, code) = (
                srv.function_counts.0.load(Relaxed),
                srv.function_counts.1.load(Relaxed),
                srv.function_counts.2.load(Relaxed),
            );
            // One Lua state runs both scripts and functions here: its
            // memory is reported as the eval VM's.
            let scripts_total = lua.script_bytes as u64 + code;
            let _ = write!(
                out,
                "# Memory\r\nused_memory:{rss}\r\nused_memory_human:{:.2}M\r\nused_memory_rss:{rss}\r\nused_memory_peak:{rss}\r\nused_memory_lua:{l}\r\nused_memory_vm_eval:{l}\r\nused_memory_lua_human:{lh}\r\nused_memory_scripts_eval:{se}\r\nnumber_of_cached_scripts:{ns}\r\nnumber_of_functions:{functions}\r\nnumber_of_libraries:{libraries}\r\nused_memory_vm_functions:0\r\nused_memory_vm_total:{l}\r\nused_memory_vm_total_human:{lh}\r\nused_memory_functions:{code}\r\nused_memory_scripts:{scripts_total}\r\nused_memory_scripts_human:{sh}\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\nmem_allocator:libc\r\n",
                rss as f64 / 1048576.0,
                l = lua.lua_bytes,
                lh = bytes_to_human(lua.lua_bytes as u64),
                se = lua.script_bytes,
                ns = lua.scripts,
                sh = bytes_to_human(scripts_total),
            );
        }
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
                srv.shards.durability.name()
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
            let _ = write!(
                out,
                "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nrejected_connections:{}\r\nexpired_keys:{}\r\nevicted_keys:0\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\npubsub_channels:{}\r\npubsub_patterns:{}\r\npubsubshard_channels:{}\r\ntracking_total_keys:{}\r\ntracking_total_items:{}\r\ntracking_total_prefixes:{}\r\ntotal_error_replies:{}\r\n",
                st.connections.load(Relaxed),
                st.commands.load(Relaxed),
                st.net_in.load(Relaxed),
                st.net_out.load(Relaxed),
                st.rejected.load(Relaxed),
                expired,
                st.hits.load(Relaxed) + shard_sum(&|sh| &sh.hits),
                st.misses.load(Relaxed) + shard_sum(&|sh| &sh.misses),
                srv.pubsub.channel_count(crate::pubsub::Kind::Channel),
                srv.pubsub.numpat(),
                srv.pubsub.channel_count(crate::pubsub::Kind::Shard),
                tracking.1,
                tracking.2,
                tracking.3,
                st.errors.load(Relaxed)
            );
        }
        "replication" => {
            out.push_str("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n");
        }
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
                        st.calls.load(Relaxed),
                        st.usec.load(Relaxed),
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
                let (mut keys, mut expires) = (0, 0);
                for sh in srv.shards.shards() {
                    let c = sh.counts(db);
                    keys += c.keys;
                    expires += c.expires;
                }
                if keys > 0 {
                    let _ = write!(out, "db{db}:keys={keys},expires={expires},avg_ttl=0\r\n");
                }
            }
        }
        "cairn" => {
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
            let _ = write!(
                out,
                "# Cairn\r\nshards:{}\r\ndurability:{}\r\nbatches:{batches}\r\nbatch_ops:{ops}\r\navg_batch_size:{avg:.2}\r\nmax_batch_size:{}\r\ncommits:{}\r\nfsyncs:{}\r\ncoordinated_commits:{}\r\nreaper_ticks:{}\r\nreaper_expired_keys:{}\r\ngc_rows_deleted:{}\r\ngc_versions_collected:{}\r\nsub_rows:{}\r\nzscore_rows:{}\r\ngc_pending:{}\r\n",
                shards.len(),
                srv.shards.durability.name(),
                shards.iter().map(|sh| sh.stats.max_batch.load(Relaxed)).max().unwrap_or(0),
                sum(|s| s.commits.load(Relaxed)),
                sum(|s| s.fsyncs.load(Relaxed)),
                sum(|s| s.coordinated.load(Relaxed)),
                sum(|s| s.reaper_ticks.load(Relaxed)),
                sum(|s| s.expired_keys.load(Relaxed)),
                sum(|s| s.gc_rows.load(Relaxed)),
                sum(|s| s.gc_versions.load(Relaxed)),
                rows(crate::storage::Table::Sub),
                rows(crate::storage::Table::ZScore),
                rows(crate::storage::Table::Gc),
            );
        }
        _ => {}
    }
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

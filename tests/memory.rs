//! MEMORY and the INFO sections tools read (memory, stats, server): the
//! field names and their order are Redis 7.0.15's (recorded from
//! `redis-server` 7.0.15), the values cairn's own and plausible.

mod common;

use common::{cmd, int, ok, TestServer};
use redis::{Connection, Value};

/// The field names of one INFO section, in order.
fn info_fields(c: &mut Connection, section: &str) -> Vec<String> {
    let text: String = cmd(&["INFO", section]).query(c).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(':').next().unwrap().to_string())
        .collect()
}

/// One INFO field's value.
fn info_value(c: &mut Connection, section: &str, name: &str) -> String {
    let text: String = cmd(&["INFO", section]).query(c).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("INFO {section} lacks {name}: {text}"))
        .to_string()
}

#[test]
fn info_memory_fields_are_redis_s() {
    let srv = TestServer::start();
    let mut c = srv.client();
    // Redis 7.0.15's INFO memory, every field in order.
    let redis = "used_memory used_memory_human used_memory_rss used_memory_rss_human used_memory_peak used_memory_peak_human used_memory_peak_perc used_memory_overhead used_memory_startup used_memory_dataset used_memory_dataset_perc allocator_allocated allocator_active allocator_resident total_system_memory total_system_memory_human used_memory_lua used_memory_vm_eval used_memory_lua_human used_memory_scripts_eval number_of_cached_scripts number_of_functions number_of_libraries used_memory_vm_functions used_memory_vm_total used_memory_vm_total_human used_memory_functions used_memory_scripts used_memory_scripts_human maxmemory maxmemory_human maxmemory_policy allocator_frag_ratio allocator_frag_bytes allocator_rss_ratio allocator_rss_bytes rss_overhead_ratio rss_overhead_bytes mem_fragmentation_ratio mem_fragmentation_bytes mem_not_counted_for_evict mem_replication_backlog mem_total_replication_buffers mem_clients_slaves mem_clients_normal mem_cluster_links mem_aof_buffer mem_allocator active_defrag_running lazyfree_pending_objects lazyfreed_objects";
    assert_eq!(info_fields(&mut c, "memory").join(" "), redis);
    assert!(info_value(&mut c, "memory", "mem_allocator").starts_with("mimalloc-"));
    let used: u64 = info_value(&mut c, "memory", "used_memory").parse().unwrap();
    let startup: u64 = info_value(&mut c, "memory", "used_memory_startup")
        .parse()
        .unwrap();
    assert!(used > 0 && startup <= used, "used {used} startup {startup}");
    // CONFIG SET maxmemory and the policy show as they are set.
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "1mb"]);
    ok(
        &mut c,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    );
    assert_eq!(info_value(&mut c, "memory", "maxmemory"), "1048576");
    assert_eq!(info_value(&mut c, "memory", "maxmemory_human"), "1.00M");
    assert_eq!(
        info_value(&mut c, "memory", "maxmemory_policy"),
        "allkeys-lru"
    );
}

#[test]
fn info_stats_and_server_fields_are_redis_s() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let stats = "total_connections_received total_commands_processed instantaneous_ops_per_sec total_net_input_bytes total_net_output_bytes total_net_repl_input_bytes total_net_repl_output_bytes instantaneous_input_kbps instantaneous_output_kbps instantaneous_input_repl_kbps instantaneous_output_repl_kbps rejected_connections sync_full sync_partial_ok sync_partial_err expired_keys expired_stale_perc expired_time_cap_reached_count expire_cycle_cpu_milliseconds evicted_keys evicted_clients total_eviction_exceeded_time current_eviction_exceeded_time keyspace_hits keyspace_misses pubsub_channels pubsub_patterns pubsubshard_channels latest_fork_usec total_forks migrate_cached_sockets slave_expires_tracked_keys active_defrag_hits active_defrag_misses active_defrag_key_hits active_defrag_key_misses total_active_defrag_time current_active_defrag_time tracking_total_keys tracking_total_items tracking_total_prefixes unexpected_error_replies total_error_replies dump_payload_sanitizations total_reads_processed total_writes_processed io_threaded_reads_processed io_threaded_writes_processed reply_buffer_shrinks reply_buffer_expands";
    assert_eq!(info_fields(&mut c, "stats").join(" "), stats);
    // Redis's server fields in its order; cairn's version follows Redis's.
    let server = "redis_version cairn_version redis_git_sha1 redis_git_dirty redis_build_id redis_mode os arch_bits monotonic_clock multiplexing_api atomicvar_api gcc_version process_id process_supervised run_id tcp_port server_time_usec uptime_in_seconds uptime_in_days hz configured_hz lru_clock executable config_file io_threads_active";
    assert_eq!(info_fields(&mut c, "server").join(" "), server);
    assert_eq!(info_value(&mut c, "server", "run_id").len(), 40);
    let clients = "connected_clients cluster_connections maxclients client_recent_max_input_buffer client_recent_max_output_buffer blocked_clients tracking_clients clients_in_timeout_table";
    assert_eq!(info_fields(&mut c, "clients").join(" "), clients);

    // A steady load shows in the instantaneous rates within Redis's
    // 1.6 s window; reads and writes are counted.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut ops = 0u64;
    while std::time::Instant::now() < deadline && ops == 0 {
        for _ in 0..200 {
            let _: Value = cmd(&["PING"]).query(&mut c).unwrap();
        }
        ops = info_value(&mut c, "stats", "instantaneous_ops_per_sec")
            .parse()
            .unwrap();
    }
    assert!(ops > 0, "no instantaneous ops under load");
    let kbps: f64 = info_value(&mut c, "stats", "instantaneous_input_kbps")
        .parse()
        .unwrap();
    assert!(kbps > 0.0);
    let reads: u64 = info_value(&mut c, "stats", "total_reads_processed")
        .parse()
        .unwrap();
    assert!(reads >= 200, "{reads} reads");
}

#[test]
fn memory_usage_follows_the_value() {
    let srv = TestServer::start();
    let mut c = srv.client();
    ok(&mut c, &["SET", "small", "x"]);
    ok(&mut c, &["SET", "large", &"x".repeat(10_000)]);
    let small = int(&mut c, &["MEMORY", "USAGE", "small"]);
    let large = int(&mut c, &["MEMORY", "USAGE", "large"]);
    assert!(small > 0 && small < 100, "{small}");
    assert!((10_000..10_200).contains(&large), "{large}");
    // A collection: sampled (the default 5) or whole, the estimates agree
    // when its members are alike.
    for i in 0..500 {
        let f = format!("field{i:04}");
        let _: i64 = cmd(&["HSET", "h", &f, "value"]).query(&mut c).unwrap();
    }
    let sampled = int(&mut c, &["MEMORY", "USAGE", "h"]);
    let whole = int(&mut c, &["MEMORY", "USAGE", "h", "SAMPLES", "0"]);
    assert!(whole > 500 * 10, "{whole}");
    let diff = (sampled - whole).abs();
    assert!(diff * 20 < whole, "sampled {sampled} vs whole {whole}");
    // A key with a TTL has its expiry row counted.
    ok(&mut c, &["SET", "ttl", "x", "EX", "100"]);
    assert!(int(&mut c, &["MEMORY", "USAGE", "ttl"]) > small);
}

#[test]
fn memory_stats_fields_are_redis_s() {
    let srv = TestServer::start();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v"]);
    let v: Value = cmd(&["MEMORY", "STATS"]).query(&mut c).unwrap();
    let Value::Array(items) = v else {
        panic!("MEMORY STATS: {v:?}")
    };
    let names: Vec<String> = items
        .iter()
        .step_by(2)
        .map(|n| match n {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("{other:?}"),
        })
        .collect();
    // Redis 7.0.15's fields with one database holding keys.
    let redis = "peak.allocated total.allocated startup.allocated replication.backlog clients.slaves clients.normal cluster.links aof.buffer lua.caches functions.caches db.0 overhead.total keys.count keys.bytes-per-key dataset.bytes dataset.percentage peak.percentage allocator.allocated allocator.active allocator.resident allocator-fragmentation.ratio allocator-fragmentation.bytes allocator-rss.ratio allocator-rss.bytes rss-overhead.ratio rss-overhead.bytes fragmentation fragmentation.bytes";
    assert_eq!(names.join(" "), redis);
    let doctor: String = cmd(&["MEMORY", "DOCTOR"]).query(&mut c).unwrap();
    assert!(doctor.starts_with("Hi Sam") || doctor.starts_with("Sam, I detected"));
    let stats: String = cmd(&["MEMORY", "MALLOC-STATS"]).query(&mut c).unwrap();
    assert!(!stats.is_empty());
}

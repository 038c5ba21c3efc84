//! CONFIG REWRITE and the `[redis]` table of config.toml: a server started
//! from a commented file writes its changed parameters back, keeping the
//! comments, and a restart reads them.

mod common;

use std::path::{Path, PathBuf};

use cairn::config::{Config, Flags};
use common::{bulk, err, ok, q, TestServer};
use redis::Value;

const FILE: &str = r#"# My cairn settings.
# Second comment line.

# The connection limit, kept at the top level.
maxclients = 500

log_level = "warn"

# Durability, set by CONFIG SET appendfsync too.
durability = "everysec"

# Redis parameters.
[redis]
# Eviction policy comment.
maxmemory-policy = "allkeys-lru"   # trailing comment
# Old name of busy-reply-threshold.
lua-time-limit = 1000
hash-max-listpack-entries = 64
"#;

/// Starts a server from the config file at `file`, on the data directory
/// `data` (port and shards chosen for tests).
fn start(file: &Path, data: PathBuf) -> TestServer {
    let file = file.to_path_buf();
    TestServer::start_in(data.clone(), move |cfg| {
        let flags = Flags {
            config: Some(file),
            ..Default::default()
        };
        let mut loaded = Config::load(&flags).expect("config loads");
        loaded.port = 0;
        loaded.dir = data;
        loaded.shards = cfg.shards;
        *cfg = loaded;
    })
}

fn get(c: &mut redis::Connection, name: &str) -> Value {
    match q(c, &["CONFIG", "GET", name]) {
        Value::Array(v) => v[1].clone(),
        Value::Map(v) => v[0].1.clone(),
        other => panic!("CONFIG GET {name}: {other:?}"),
    }
}

#[test]
fn rewrite_keeps_comments_and_restart_reads_values() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("config.toml");
    std::fs::write(&file, FILE).unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();

    let server = start(&file, data.clone());
    let mut c = server.client();
    // The file's values are in effect.
    assert_eq!(get(&mut c, "maxmemory-policy"), bulk("allkeys-lru"));
    assert_eq!(get(&mut c, "busy-reply-threshold"), bulk("1000"));
    assert_eq!(get(&mut c, "maxclients"), bulk("500"));
    assert_eq!(get(&mut c, "hash-max-ziplist-entries"), bulk("64"));

    ok(
        &mut c,
        &[
            "CONFIG",
            "SET",
            "maxmemory",
            "10mb",
            "busy-reply-threshold",
            "2000",
            "maxclients",
            "600",
            "notify-keyspace-events",
            "KEA",
            "save",
            "100 10",
            "hash-max-listpack-entries",
            "512",
            "appendfsync",
            "always",
        ],
    );
    ok(&mut c, &["CONFIG", "REWRITE"]);
    drop(c);
    server.stop();

    let text = std::fs::read_to_string(&file).unwrap();
    for line in FILE.lines().filter(|l| l.trim_start().starts_with('#')) {
        assert!(text.contains(line), "lost {line:?} in:\n{text}");
    }
    assert!(text.contains("# trailing comment"), "{text}");
    assert!(text.contains("maxclients = 600"), "{text}");
    // The alias the file used is the key that changes.
    assert!(text.contains("lua-time-limit = \"2000\""), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("busy-reply-threshold")),
        "{text}"
    );
    assert!(text.contains("maxmemory = \"10485760\""), "{text}");
    assert!(text.contains("notify-keyspace-events = \"AKE\""), "{text}");
    assert!(text.contains("save = \"100 10\""), "{text}");
    // Back at its default, but the file named it: it is kept, updated.
    assert!(
        text.contains("hash-max-listpack-entries = \"512\""),
        "{text}"
    );
    // Unchanged defaults are not written.
    assert!(!text.lines().any(|l| l.starts_with("hz")), "{text}");
    // cairn's own keys stay where they were.
    assert!(text.contains("log_level = \"warn\""), "{text}");
    // appendfsync is written as the durability it sets, which loads again.
    assert!(text.contains("durability = \"always\""), "{text}");

    let server = start(&file, data);
    let mut c = server.client();
    assert_eq!(get(&mut c, "maxmemory"), bulk("10485760"));
    assert_eq!(get(&mut c, "lua-time-limit"), bulk("2000"));
    assert_eq!(get(&mut c, "maxclients"), bulk("600"));
    assert_eq!(get(&mut c, "notify-keyspace-events"), bulk("AKE"));
    assert_eq!(get(&mut c, "save"), bulk("100 10"));
    assert_eq!(get(&mut c, "maxmemory-policy"), bulk("allkeys-lru"));
    assert_eq!(get(&mut c, "appendfsync"), bulk("always"));
    // A second rewrite with nothing changed leaves the file as it is.
    ok(&mut c, &["CONFIG", "REWRITE"]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
}

#[test]
fn rewrite_adds_a_redis_table_when_the_file_has_none() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("config.toml");
    std::fs::write(&file, "# Only a comment.\nlog_level = \"warn\"\n").unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let server = start(&file, data);
    let mut c = server.client();
    ok(
        &mut c,
        &["CONFIG", "SET", "maxmemory-policy", "volatile-lfu"],
    );
    ok(&mut c, &["CONFIG", "REWRITE"]);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with("# Only a comment.\nlog_level = \"warn\"\n"),
        "{text}"
    );
    assert!(text.contains("[redis]"), "{text}");
    assert!(
        text.contains("maxmemory-policy = \"volatile-lfu\""),
        "{text}"
    );
    let parsed = Config::from_toml(&text, "test").unwrap();
    assert_eq!(
        parsed.redis["maxmemory-policy"].as_str(),
        Some("volatile-lfu")
    );
}

#[test]
fn rewrite_without_a_config_file() {
    let server = TestServer::start();
    let mut c = server.client();
    assert_eq!(
        err(&mut c, &["CONFIG", "REWRITE"]),
        "ERR The server is running without a config file"
    );
}

#[test]
fn bad_redis_values_refuse_to_start() {
    let bad = |text: &str| Config::from_toml(text, "test").unwrap_err().to_string();
    assert!(bad("[redis]\nmaxmemory = \"lots\"").contains("argument must be a memory value"));
    assert!(bad("[redis]\nnosuch = 1").contains("nosuch"));
    assert!(bad("[redis]\nport = 7000").contains("port"));
    // Immutable and protected parameters may be set from the file.
    let c = Config::from_toml(
        "[redis]\ndaemonize = false\ndbfilename = \"x.rdb\"\nenable-protected-configs = \"yes\"",
        "test",
    )
    .unwrap();
    assert_eq!(c.redis.len(), 3);
}

#[test]
fn timeout_closes_idle_clients() {
    use std::io::{Read, Write};
    let server = TestServer::start();
    let mut admin = server.client();
    ok(&mut admin, &["CONFIG", "SET", "timeout", "1"]);
    let mut idle = server.tcp();
    idle.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut buf = [0u8; 64];
    let n = idle.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"+PONG\r\n");
    std::thread::sleep(std::time::Duration::from_millis(1600));
    // The server has closed the idle connection.
    idle.set_read_timeout(Some(std::time::Duration::from_secs(3)))
        .unwrap();
    assert_eq!(idle.read(&mut buf).unwrap_or(0), 0);
    // So has the admin connection, idle as long; a new one is served.
    drop(admin);
    let mut admin = server.client();
    ok(&mut admin, &["CONFIG", "SET", "timeout", "0"]);
}

#[test]
fn resetstat_zeroes_info_stats() {
    let server = TestServer::start();
    let mut c = server.client();
    ok(&mut c, &["SET", "k", "v"]);
    q(&mut c, &["GET", "k"]);
    q(&mut c, &["GET", "missing"]);
    let _ = err(&mut c, &["NOSUCHCOMMAND"]);
    ok(&mut c, &["CONFIG", "RESETSTAT"]);
    let info = match q(&mut c, &["INFO", "stats"]) {
        Value::BulkString(b) => String::from_utf8(b).unwrap(),
        Value::VerbatimString { text, .. } => text,
        other => panic!("{other:?}"),
    };
    for field in [
        "total_connections_received:0",
        "keyspace_hits:0",
        "keyspace_misses:0",
        "expired_keys:0",
        "total_error_replies:0",
        "rejected_connections:0",
    ] {
        assert!(info.contains(field), "{field} in {info}");
    }
    let errors = match q(&mut c, &["INFO", "errorstats"]) {
        Value::BulkString(b) => String::from_utf8(b).unwrap(),
        Value::VerbatimString { text, .. } => text,
        other => panic!("{other:?}"),
    };
    assert!(!errors.contains("errorstat_ERR"), "{errors}");
}

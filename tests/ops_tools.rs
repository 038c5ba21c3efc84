//! The operator tools of redis-cli (Debian's redis-tools 7.0.15) against
//! cairn: `--memkeys` (MEMORY USAGE), `--hotkeys` (OBJECT FREQ under an LFU
//! policy), `--bigkeys` and `--stat` (INFO) each produce their report.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{ok, TestServer};

/// Runs redis-cli against the server, line-buffered so a tool that runs
/// until it is stopped still leaves its first lines; at most `secs` seconds.
fn redis_cli(srv: &TestServer, secs: u32, args: &[&str]) -> String {
    let out = Command::new("timeout")
        .arg(secs.to_string())
        .args(["stdbuf", "-oL", "redis-cli", "-p", &srv.port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli (Debian package redis-tools) must be installed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fill(srv: &TestServer) {
    let mut c = srv.client();
    ok(
        &mut c,
        &["MSET", "s1", "a", "s2", "bb", "s3", &"c".repeat(300)],
    );
    let _: i64 = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .query(&mut c)
        .unwrap();
    let _: i64 = redis::cmd("RPUSH")
        .arg("l")
        .arg(&["x", "y", "z"])
        .query(&mut c)
        .unwrap();
}

#[test]
fn memkeys_and_bigkeys_report_every_type() {
    let srv = TestServer::start();
    fill(&srv);
    let mem = redis_cli(&srv, 30, &["--memkeys"]);
    assert!(
        mem.contains("Biggest string found '\"s3\"' has"),
        "--memkeys:\n{mem}"
    );
    assert!(mem.contains("3 strings with"), "--memkeys:\n{mem}");
    assert!(mem.contains("1 lists with"), "--memkeys:\n{mem}");
    let big = redis_cli(&srv, 30, &["--bigkeys"]);
    assert!(
        big.contains("Biggest string found '\"s3\"' has 300 bytes"),
        "--bigkeys:\n{big}"
    );
}

#[test]
fn hotkeys_reads_lfu_counters() {
    let srv = TestServer::start();
    fill(&srv);
    let mut c = srv.client();
    // redis-cli refuses --hotkeys unless an LFU policy is set, as Redis.
    let refused = redis_cli(&srv, 30, &["--hotkeys"]);
    assert!(!refused.contains("hot key found"), "{refused}");
    ok(
        &mut c,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"],
    );
    for _ in 0..50 {
        let _: Option<String> = redis::cmd("GET").arg("s1").query(&mut c).unwrap();
    }
    let hot = redis_cli(&srv, 30, &["--hotkeys"]);
    assert!(
        hot.contains("hot key found with counter:") && hot.contains("keyname: \"s1\""),
        "--hotkeys:\n{hot}"
    );
}

#[test]
fn stat_prints_its_table() {
    let srv = TestServer::start();
    fill(&srv);
    std::thread::sleep(Duration::from_millis(10));
    let stat = redis_cli(&srv, 3, &["--stat", "-i", "1"]);
    let lines: Vec<&str> = stat.lines().collect();
    assert!(lines.len() >= 3, "--stat:\n{stat}");
    assert!(lines[1].starts_with("keys       mem"), "--stat:\n{stat}");
    // keys, memory (human), 1 client, 0 blocked...
    let first: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(first[0], "5", "--stat:\n{stat}");
    assert!(
        first[1].ends_with('M') || first[1].ends_with('K'),
        "--stat:\n{stat}"
    );
}

#[test]
fn redis_cli_monitor_shows_other_clients_commands() {
    let srv = TestServer::start();
    let mut child = Command::new("stdbuf")
        .args(["-oL", "redis-cli", "-p", &srv.port.to_string(), "monitor"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli (Debian package redis-tools) must be installed");
    // Bounded: if no line ever comes, the tool is killed and the reads end.
    let pid = child.id().to_string();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(20));
        let _ = Command::new("kill").arg(&pid).status();
    });
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    use std::io::BufRead;
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim_end(), "OK");
    let mut a = srv.client();
    let mut b = srv.client();
    ok(&mut a, &["SET", "from-a", "1"]);
    let _: Option<String> = redis::cmd("GET").arg("from-a").query(&mut b).unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        line.clear();
        out.read_line(&mut line).unwrap();
        seen.push(line.trim_end().to_string());
    }
    let _ = child.kill();
    let _ = child.wait();
    // `<time> [0 127.0.0.1:<port>] "SET" "from-a" "1"`, then the GET.
    assert!(seen[0].ends_with("\"SET\" \"from-a\" \"1\""), "{seen:?}");
    assert!(seen[1].ends_with("\"GET\" \"from-a\""), "{seen:?}");
    assert!(seen[0].contains(" [0 127.0.0.1:"), "{seen:?}");
}

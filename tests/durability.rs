//! Durability: acknowledged writes survive a SIGKILL under `durability =
//! always`, a SIGKILL under `everysec` recovers a consistent prefix, the
//! data directory lock keeps a second server out, data and TTLs
//! survive clean restarts under every durability policy, and expired keys are
//! reaped after a restart.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::config::Durability;
use common::process::{free_port, wait_exit, Proc};
use common::TestServer;
use redis::{Connection, Value};

/// Starting the binary the way these tests do: `always` unless named.
trait Start {
    fn spawn_always(cwd: &Path, data: &Path, port: u16, stderr: Stdio) -> Proc;
    fn start(cwd: &Path, data: &Path) -> Proc;
    fn start_with(cwd: &Path, data: &Path, durability: Durability) -> Proc;
}

impl Start for Proc {
    /// Spawns the binary with `durability = always`, without waiting.
    fn spawn_always(cwd: &Path, data: &Path, port: u16, stderr: Stdio) -> Proc {
        Proc::spawn::<&str>(cwd, data, port, stderr, "always", &[])
    }

    /// Starts it with `durability = always` and waits until it answers PING.
    fn start(cwd: &Path, data: &Path) -> Proc {
        Proc::start_with(cwd, data, Durability::Always)
    }

    /// As `start`, with another durability policy.
    fn start_with(cwd: &Path, data: &Path, durability: Durability) -> Proc {
        let mut p = Proc::spawn::<&str>(
            cwd,
            data,
            free_port(),
            Stdio::null(),
            durability.name(),
            &[],
        );
        p.wait_ready();
        p
    }
}

/// The values of keys `k0` .. `k{n-1}`, by MGETs of a bounded size.
fn values_of_k(c: &mut Connection, n: u64) -> Vec<Option<String>> {
    let mut values = Vec::with_capacity(n as usize);
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut cmd = redis::cmd("MGET");
        for i in chunk {
            cmd.arg(format!("k{i}"));
        }
        values.extend(cmd.query::<Vec<Option<String>>>(c).unwrap());
    }
    values
}

fn get(c: &mut Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

fn int(c: &mut Connection, args: &[&str]) -> i64 {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c).unwrap()
}

fn info(c: &mut Connection, section: &str) -> String {
    redis::cmd("INFO").arg(section).query(c).unwrap()
}

/// The value of `field:` in an INFO text.
fn info_field(text: &str, field: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim_end().to_string())
}

// Pins: with durability=always every acknowledged SET and INCR survives a
// SIGKILL mid-stream, and no INCR is applied twice.
#[test]
fn acknowledged_writes_survive_sigkill() {
    let root = tempfile::tempdir().unwrap();
    let data: PathBuf = root.path().join("data");
    let mut first = Proc::start(root.path(), &data);

    let sets = Arc::new(AtomicU64::new(0));
    let incrs = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (sets, incrs, stop) = (sets.clone(), incrs.clone(), stop.clone());
        let mut c = first.client();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let set: redis::RedisResult<Value> = redis::cmd("SET")
                    .arg(format!("k{i}"))
                    .arg(format!("v{i}"))
                    .query(&mut c);
                match set {
                    Ok(Value::Okay) => sets.store(i + 1, Ordering::SeqCst),
                    Ok(other) => panic!("SET k{i} answered {other:?}"),
                    Err(_) => return,
                }
                match redis::cmd("INCR").arg("counter").query::<i64>(&mut c) {
                    Ok(n) => {
                        assert_eq!(n as u64, i + 1, "INCR reply");
                        incrs.store(i + 1, Ordering::SeqCst);
                    }
                    Err(_) => return,
                }
                i += 1;
            }
        })
    };

    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) && sets.load(Ordering::SeqCst) < 3000 {
        std::thread::sleep(Duration::from_millis(10));
    }
    first.kill();
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer thread");
    let (sets, incrs) = (sets.load(Ordering::SeqCst), incrs.load(Ordering::SeqCst));
    assert!(sets > 10, "only {sets} writes acknowledged before the kill");
    eprintln!("SIGKILL after {sets} acknowledged SETs, {incrs} INCRs");

    let second = Proc::start(root.path(), &data);
    let mut c = second.client();
    for (i, v) in values_of_k(&mut c, sets).into_iter().enumerate() {
        assert_eq!(
            v,
            Some(format!("v{i}")),
            "acknowledged key k{i} after SIGKILL"
        );
    }
    let counter: u64 = get(&mut c, "counter").map_or(0, |v| v.parse().unwrap());
    assert!(
        counter >= incrs && counter <= incrs + 1,
        "counter {counter} after {incrs} acknowledged INCRs"
    );
    drop(c);
    let mut second = second;
    let status = second.shutdown();
    assert!(
        status.success(),
        "cairn exited with {status} after SHUTDOWN"
    );
}

/// Cross-shard transactions written by `writers` clients until the server
/// is SIGKILLed; returns, per writer, its pair of keys (one on each shard)
/// and the last EXEC acknowledged.
fn exec_until_killed(server: &mut Proc, writers: usize) -> Vec<(String, String, u64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let (a, b) = common::waiting::keys_on_both_shards(&format!("pair{w}:"));
            let acked = Arc::new(AtomicU64::new(0));
            let mut c = server.client();
            let (stop, seen) = (stop.clone(), acked.clone());
            let (ka, kb) = (a.clone(), b.clone());
            let t = std::thread::spawn(move || {
                for i in 1u64.. {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let v = i.to_string();
                    let r: redis::RedisResult<Value> = redis::pipe()
                        .atomic()
                        .cmd("SET")
                        .arg(&ka)
                        .arg(&v)
                        .cmd("SET")
                        .arg(&kb)
                        .arg(&v)
                        .query(&mut c);
                    match r {
                        Ok(_) => seen.store(i, Ordering::SeqCst),
                        Err(_) => return,
                    }
                }
            });
            (a, b, acked, t)
        })
        .collect();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1200) {
        std::thread::sleep(Duration::from_millis(10));
    }
    server.kill();
    stop.store(true, Ordering::Relaxed);
    handles
        .into_iter()
        .map(|(a, b, acked, t)| {
            t.join().expect("writer thread");
            (a, b, acked.load(Ordering::SeqCst))
        })
        .collect()
}

// Pins: a transaction writing keys on two shards is all-or-nothing across
// a SIGKILL: under `always` every acknowledged EXEC is there whole, and no
// EXEC is there in part (both keys always hold the same round); under
// `everysec` the pairs still never disagree.
#[test]
fn cross_shard_exec_is_whole_after_sigkill() {
    for durability in [Durability::Always, Durability::Everysec] {
        let root = tempfile::tempdir().unwrap();
        let data: PathBuf = root.path().join("data");
        let mut first = Proc::start_with(root.path(), &data, durability);
        let pairs = exec_until_killed(&mut first, 3);
        let second = Proc::start_with(root.path(), &data, durability);
        let mut c = second.client();
        for (a, b, acked) in pairs {
            let x: Option<u64> = get(&mut c, &a).map(|v| v.parse().unwrap());
            let y: Option<u64> = get(&mut c, &b).map(|v| v.parse().unwrap());
            assert_eq!(
                x, y,
                "{durability:?}: {a}={x:?} but {b}={y:?} after SIGKILL"
            );
            if durability == Durability::Always {
                assert!(
                    x.unwrap_or(0) >= acked,
                    "acknowledged EXEC {acked} lost: {a}={x:?}"
                );
            }
            eprintln!("{durability:?}: {acked} EXECs acknowledged, {x:?} recovered");
        }
    }
}

// Pins: function libraries are stored: an acknowledged FUNCTION LOAD
// survives a SIGKILL under `always`, FUNCTION DELETE and FLUSH too, and
// scripts are not kept (as in Redis).
#[test]
fn functions_survive_sigkill_and_scripts_do_not() {
    let root = tempfile::tempdir().unwrap();
    let data: PathBuf = root.path().join("data");
    let mut first = Proc::start(root.path(), &data);
    let mut c = first.client();
    let load = |c: &mut Connection, lib: &str, f: &str, v: i64| {
        let code =
            format!("#!lua name={lib}\nredis.register_function('{f}', function() return {v} end)");
        let name: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(code)
            .query(c)
            .unwrap();
        assert_eq!(name, lib);
    };
    load(&mut c, "kept", "fk", 1);
    load(&mut c, "gone", "fg", 2);
    let _: () = redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg("gone")
        .query(&mut c)
        .unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 1")
        .query(&mut c)
        .unwrap();
    first.kill();

    let mut second = Proc::start(root.path(), &data);
    let mut c = second.client();
    assert_eq!(int(&mut c, &["FCALL", "fk", "0"]), 1);
    let gone = redis::cmd("FCALL").arg("fg").arg(0).query::<i64>(&mut c);
    assert!(gone.is_err(), "a deleted library came back");
    let exists: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .query(&mut c)
        .unwrap();
    assert_eq!(exists, vec![0]);
    let _: () = redis::cmd("FUNCTION").arg("FLUSH").query(&mut c).unwrap();
    drop(c);
    assert!(second.shutdown().success());
    let third = Proc::start(root.path(), &data);
    let mut c = third.client();
    let libs: Vec<Value> = redis::cmd("FUNCTION").arg("LIST").query(&mut c).unwrap();
    assert!(libs.is_empty(), "FUNCTION FLUSH did not last: {libs:?}");
}

// Pins: under everysec a SIGKILL loses at most the last moments, never
// consistency: on each shard, what one connection wrote comes back as a
// prefix of what it wrote there (shards make their durable commits on their
// own clocks), and includes everything from before the last durable commit.
#[test]
fn everysec_sigkill_recovers_a_prefix() {
    let root = tempfile::tempdir().unwrap();
    let data: PathBuf = root.path().join("data");
    let mut first = Proc::start_with(root.path(), &data, Durability::Everysec);
    let mut c = first.client();
    let write = |c: &mut Connection, from: u64, to: u64| {
        let mut p = redis::pipe();
        for i in from..to {
            p.cmd("SET")
                .arg(format!("k{i}"))
                .arg(format!("v{i}"))
                .ignore();
        }
        p.query::<()>(c).unwrap();
    };
    write(&mut c, 0, 4000);
    // Past the once-a-second durable commit.
    std::thread::sleep(Duration::from_millis(2500));
    let mut written = 4000;
    while written < 20_000 {
        write(&mut c, written, written + 500);
        written += 500;
    }
    first.kill();

    let second = Proc::start_with(root.path(), &data, Durability::Everysec);
    let mut c = second.client();
    let mut present = Vec::with_capacity(written as usize);
    for (i, v) in values_of_k(&mut c, written).into_iter().enumerate() {
        if let Some(v) = &v {
            assert_eq!(v, &format!("v{i}"));
        }
        present.push(v.is_some());
    }
    assert!(
        present[..4000].iter().all(|&p| p),
        "keys written before the durable commit were lost"
    );
    for shard in 0..2 {
        let mine: Vec<bool> = (0..written as usize)
            .filter(|&i| common::shard_of(&format!("k{i}"), 2) == shard)
            .map(|i| present[i])
            .collect();
        let kept = mine.iter().take_while(|&&p| p).count();
        assert!(
            mine[kept..].iter().all(|&p| !p),
            "shard {shard}: its {kept} surviving keys are not a prefix of its writes"
        );
    }
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(dbsize, present.iter().filter(|&&p| p).count() as i64);
}

// Pins: a second server on a data directory in use exits non-zero with an
// error naming the lock, and the first server keeps serving.
#[test]
fn second_server_on_same_dir_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let first = Proc::start(root.path(), &data);
    let mut c = first.client();
    let _: () = redis::cmd("SET").arg("x").arg("1").query(&mut c).unwrap();

    let mut second = Proc::spawn_always(root.path(), &data, free_port(), Stdio::piped());
    let status = wait_exit(&mut second.child, Duration::from_secs(15))
        .expect("second server on a locked dir must exit");
    let mut stderr = String::new();
    second
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success(), "second server exited with {status}");
    assert!(
        stderr.to_lowercase().contains("lock"),
        "stderr does not mention the lock: {stderr:?}"
    );
    assert_eq!(get(&mut c, "x").as_deref(), Some("1"));
}

/// Writes the fixture: db0 s1 (no TTL), s2 (EX 100), s3 (PX 50000); db3 d1
/// (no TTL), d2 (EX 200).
fn write_fixture(c: &mut Connection, prefix: &str) {
    let set = |c: &mut Connection, args: &[&str]| {
        let mut cmd = redis::cmd("SET");
        for a in args {
            cmd.arg(*a);
        }
        let v: Value = cmd.query(c).unwrap();
        assert_eq!(v, Value::Okay);
    };
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
    set(c, &[&format!("{prefix}s1"), "v1"]);
    set(c, &[&format!("{prefix}s2"), "v2", "EX", "100"]);
    set(c, &[&format!("{prefix}s3"), "v3", "PX", "50000"]);
    let _: () = redis::cmd("SELECT").arg(3).query(c).unwrap();
    set(c, &[&format!("{prefix}d1"), "w1"]);
    set(c, &[&format!("{prefix}d2"), "w2", "EX", "200"]);
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
}

/// Checks the fixture written with `prefix` is intact with sane TTLs.
fn check_fixture(c: &mut Connection, prefix: &str) {
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
    assert_eq!(get(c, &format!("{prefix}s1")).as_deref(), Some("v1"));
    assert_eq!(get(c, &format!("{prefix}s2")).as_deref(), Some("v2"));
    assert_eq!(get(c, &format!("{prefix}s3")).as_deref(), Some("v3"));
    assert_eq!(int(c, &["TTL", &format!("{prefix}s1")]), -1);
    let ttl = int(c, &["TTL", &format!("{prefix}s2")]);
    assert!((85..=100).contains(&ttl), "TTL {prefix}s2 = {ttl}");
    let pttl = int(c, &["PTTL", &format!("{prefix}s3")]);
    assert!(
        (35_000..=50_000).contains(&pttl),
        "PTTL {prefix}s3 = {pttl}"
    );
    let _: () = redis::cmd("SELECT").arg(3).query(c).unwrap();
    assert_eq!(get(c, &format!("{prefix}d1")).as_deref(), Some("w1"));
    assert_eq!(get(c, &format!("{prefix}d2")).as_deref(), Some("w2"));
    assert_eq!(int(c, &["TTL", &format!("{prefix}d1")]), -1);
    let ttl = int(c, &["TTL", &format!("{prefix}d2")]);
    assert!((185..=200).contains(&ttl), "TTL {prefix}d2 = {ttl}");
    // Not visible from the other database.
    assert_eq!(get(c, &format!("{prefix}s1")), None);
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
    assert_eq!(get(c, &format!("{prefix}d1")), None);
}

/// Asserts DBSIZE of db0 and db3 and the INFO keyspace lines.
fn check_sizes(c: &mut Connection, db0: (i64, i64), db3: (i64, i64)) {
    let _: () = redis::cmd("SELECT").arg(3).query(c).unwrap();
    assert_eq!(int(c, &["DBSIZE"]), db3.0, "DBSIZE db3");
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
    assert_eq!(int(c, &["DBSIZE"]), db0.0, "DBSIZE db0");
    // The mean TTL moves with the clock; the counts must not.
    let ks: String = info(c, "keyspace")
        .split("\r\n")
        .map(|l| match l.split_once(",avg_ttl=") {
            Some((head, _)) => format!("{head},avg_ttl=0"),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\r\n");
    let expect = format!(
        "# Keyspace\r\ndb0:keys={},expires={},avg_ttl=0\r\ndb3:keys={},expires={},avg_ttl=0\r\n",
        db0.0, db0.1, db3.0, db3.1
    );
    assert_eq!(ks, expect);
}

/// Write, SHUTDOWN, restart, check; write more, stop(), restart, check all.
fn clean_restart(durability: Durability) {
    let tweak = move |cfg: &mut cairn::config::Config| cfg.durability = durability;
    let srv = TestServer::start_with(tweak);
    let path = srv.path.clone();
    let mut c = srv.client();
    write_fixture(&mut c, "a:");
    check_sizes(&mut c, (3, 2), (2, 1));
    // SHUTDOWN from a client closes the connection without a reply.
    let r = redis::cmd("SHUTDOWN").query::<Value>(&mut c);
    assert!(r.is_err(), "SHUTDOWN answered {r:?}");
    let tmp = srv.stop();

    let srv = TestServer::start_in(path.clone(), tweak);
    let mut c = srv.client();
    check_fixture(&mut c, "a:");
    check_sizes(&mut c, (3, 2), (2, 1));
    write_fixture(&mut c, "b:");
    drop(c);
    drop(srv.stop());

    let srv = TestServer::start_in(path, tweak);
    let mut c = srv.client();
    check_fixture(&mut c, "a:");
    check_fixture(&mut c, "b:");
    check_sizes(&mut c, (6, 4), (4, 2));
    let persistence = info(&mut c, "persistence");
    assert_eq!(
        info_field(&persistence, "cairn_durability").as_deref(),
        Some(durability.name())
    );
    drop(srv.stop());
    drop(tmp);
}

// Pins: strings with and without TTL in db0 and db3 survive SHUTDOWN and
// stop() restarts with durability=always; TTLs and DBSIZE stay right.
#[test]
fn clean_restart_always() {
    clean_restart(Durability::Always);
}

// Pins: the same clean-restart guarantees with durability=everysec.
#[test]
fn clean_restart_everysec() {
    clean_restart(Durability::Everysec);
}

// Pins: the same clean-restart guarantees with durability=no (the final
// sync on shutdown makes everything durable).
#[test]
fn clean_restart_no() {
    clean_restart(Durability::No);
}

// Pins: a PX 300 key is gone after a restart, and the reaper removes an
// untouched expired key (DBSIZE and INFO keyspace drop without access).
#[test]
fn expiry_survives_restart_and_is_reaped() {
    let srv = TestServer::start();
    let path = srv.path.clone();
    let mut c = srv.client();
    let set_at = Instant::now();
    for k in ["touched", "untouched"] {
        let v: Value = redis::cmd("SET")
            .arg(k)
            .arg("v")
            .arg("PX")
            .arg(300)
            .query(&mut c)
            .unwrap();
        assert_eq!(v, Value::Okay);
    }
    let _: () = redis::cmd("SET")
        .arg("keep")
        .arg("v")
        .query(&mut c)
        .unwrap();
    drop(c);
    let tmp = srv.stop();

    let srv = TestServer::start_in(path, |_| {});
    let restarted_at = Instant::now();
    let restarted_before_expiry = restarted_at < set_at + Duration::from_millis(300);
    std::thread::sleep(Duration::from_millis(500));
    let mut c = srv.client();
    assert_eq!(get(&mut c, "touched"), None);
    assert_eq!(int(&mut c, &["PTTL", "touched"]), -2);
    assert_eq!(int(&mut c, &["EXISTS", "touched"]), 0);

    // "untouched" is never accessed: only the reaper can remove it.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut size = int(&mut c, &["DBSIZE"]);
    while size != 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        size = int(&mut c, &["DBSIZE"]);
    }
    assert_eq!(size, 1, "DBSIZE after the reaper had 3 s");
    assert_eq!(
        info(&mut c, "keyspace"),
        "# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n"
    );
    if restarted_before_expiry {
        let cairn = info(&mut c, "cairn");
        let reaped: u64 = info_field(&cairn, "reaper_expired_keys")
            .unwrap()
            .parse()
            .unwrap();
        assert!(reaped >= 1, "reaper_expired_keys = {reaped}");
    }
    assert_eq!(get(&mut c, "keep").as_deref(), Some("v"));
    assert_eq!(get(&mut c, "untouched"), None);
    drop(srv.stop());
    drop(tmp);
}

/// A server whose log pipe has closed (`cairn 2>&1 | head -2`) still stops
/// on SIGTERM and on SHUTDOWN, with its data committed.
#[test]
fn stops_after_its_log_pipe_closes() {
    for how in ["SIGTERM", "SHUTDOWN"] {
        let cwd = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .current_dir(cwd.path())
            .args([
                "--port",
                &port.to_string(),
                "--shards",
                "2",
                "--durability",
                "always",
            ])
            .arg("--dir")
            .arg(data.path())
            // Info level: every stop logs, into the closed pipe.
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cairn");
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let mut p = Proc { child, port };
        p.wait_ready();
        drop((out, err));
        let mut c = p.client();
        let _: () = redis::cmd("SET").arg("k").arg(how).query(&mut c).unwrap();
        if how == "SIGTERM" {
            Command::new("kill")
                .args(["-TERM", &p.child.id().to_string()])
                .status()
                .unwrap();
        } else {
            let _ = redis::cmd("SHUTDOWN").query::<Value>(&mut c);
        }
        let status = wait_exit(&mut p.child, Duration::from_secs(10));
        assert!(
            status.is_some(),
            "cairn ignored {how} after its log pipe closed"
        );
        let mut again = Proc::start(cwd.path(), data.path());
        let mut c = again.client();
        assert_eq!(get(&mut c, "k").as_deref(), Some(how));
        again.shutdown();
    }
}

/// `loglevel` and `logfile` as Redis names them: the log goes to the file
/// config.toml names, at the level it names, and CONFIG SET loglevel
/// changes the level while the server runs.
#[test]
fn loglevel_and_logfile() {
    let cwd = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let log = cwd.path().join("cairn.log");
    std::fs::write(
        cwd.path().join("config.toml"),
        format!(
            "log_level = \"warning\"\n[redis]\nlogfile = \"{}\"\n",
            log.display()
        ),
    )
    .unwrap();
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .current_dir(cwd.path())
        .args(["--port", &port.to_string(), "--shards", "1"])
        .arg("--dir")
        .arg(data.path())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cairn");
    let mut p = Proc { child, port };
    p.wait_ready();
    let mut c = p.client();
    let say = |c: &mut Connection, level: &str, text: &str| {
        let script = format!("redis.log(redis.{level}, '{text}')");
        let _: Value = redis::cmd("EVAL").arg(script).arg(0).query(c).unwrap();
    };
    let loglevel = |c: &mut Connection| -> Vec<String> {
        redis::cmd("CONFIG")
            .arg("GET")
            .arg("loglevel")
            .query(c)
            .unwrap()
    };
    assert_eq!(loglevel(&mut c), ["loglevel", "warning"]);
    say(&mut c, "LOG_NOTICE", "notice-while-warning");
    say(&mut c, "LOG_WARNING", "warning-while-warning");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("loglevel")
        .arg("verbose")
        .query(&mut c)
        .unwrap();
    assert_eq!(loglevel(&mut c), ["loglevel", "verbose"]);
    say(&mut c, "LOG_VERBOSE", "verbose-while-verbose");
    say(&mut c, "LOG_DEBUG", "debug-while-verbose");
    p.shutdown();
    let text = std::fs::read_to_string(&log).expect("the log file exists");
    assert!(text.contains("warning-while-warning"), "{text}");
    assert!(text.contains("verbose-while-verbose"), "{text}");
    assert!(!text.contains("notice-while-warning"), "{text}");
    assert!(!text.contains("debug-while-verbose"), "{text}");
    // Not a line of it on stderr, and no colour codes in the file.
    let mut err = String::new();
    p.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(err, "");
    assert!(!text.contains('\u{1b}'), "{text}");
}

/// CONFIG SET appendfsync changes the policy while the server runs, as in
/// Redis (clients and tools set it): under `always` every write is fsynced
/// before its reply; under `no` none is (within its 30 seconds).
#[test]
fn appendfsync_changes_the_policy_at_run_time() {
    let tweak = |cfg: &mut cairn::config::Config| cfg.durability = Durability::No;
    let srv = TestServer::start_with(tweak);
    let mut c = srv.client();
    let fsyncs = |c: &mut Connection| common::field(&common::info_cairn(c), "fsyncs");
    let config_get = |c: &mut Connection| -> Vec<String> {
        common::cmd(&["CONFIG", "GET", "appendfsync"])
            .query(c)
            .unwrap()
    };
    assert_eq!(config_get(&mut c), ["appendfsync", "no"]);
    common::ok(&mut c, &["CONFIG", "SET", "appendfsync", "always"]);
    assert_eq!(config_get(&mut c), ["appendfsync", "always"]);
    let persistence = info(&mut c, "persistence");
    assert_eq!(
        info_field(&persistence, "cairn_durability").as_deref(),
        Some("always")
    );
    let before = fsyncs(&mut c);
    for i in 0..5 {
        common::ok(&mut c, &["SET", &format!("k{i}"), "v"]);
    }
    assert!(
        fsyncs(&mut c) >= before + 5,
        "one fsync per acknowledged write"
    );
    common::ok(&mut c, &["CONFIG", "SET", "appendfsync", "no"]);
    let before = fsyncs(&mut c);
    for i in 0..5 {
        common::ok(&mut c, &["SET", &format!("k{i}"), "w"]);
    }
    assert_eq!(fsyncs(&mut c), before);
    assert_eq!(
        common::err(&mut c, &["CONFIG", "SET", "appendfsync", "sometimes"]),
        "ERR CONFIG SET failed (possibly related to argument 'appendfsync') - argument(s) must be one of the following: everysec, always, no"
    );
    drop(srv.stop());
}

// Pins: BGREWRITEAOF moves what every shard's log holds into its tables
// (the write buffers drain to nothing), and the data reads the same
// before and after, and after a restart.
#[test]
fn bgrewriteaof_moves_the_logs_into_the_tables() {
    let srv = TestServer::start();
    let path = srv.path.clone();
    let mut c = srv.client();
    for i in 0..200 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .query(&mut c)
            .unwrap();
    }
    let buffered = |c: &mut Connection| common::field(&common::info_cairn(c), "write_buffer_bytes");
    assert!(buffered(&mut c) > 0);
    let reply: Value = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    assert_eq!(
        reply,
        Value::SimpleString("Background append only file rewriting started".into())
    );
    drained(&mut c);
    assert_eq!(get(&mut c, "k7"), Some("7".into()));
    assert_eq!(int(&mut c, &["DBSIZE"]), 200);
    drop(c);
    let tmp = srv.stop();
    let srv = TestServer::start_in(path, |_| {});
    let mut c = srv.client();
    assert_eq!(get(&mut c, "k199"), Some("199".into()));
    assert_eq!(int(&mut c, &["DBSIZE"]), 200);
    drop(c);
    drop(srv.stop());
    drop(tmp);
}

// Pins: pops read a list's elements ahead from the tables (see
// `ListEdit::pop`) and still return each element once, in order, from
// both ends, with pushes in between, across write-outs and a restart.
#[test]
fn list_pops_read_ahead_from_the_tables() {
    let srv = TestServer::start();
    let path = srv.path.clone();
    let mut c = srv.client();
    let elements: Vec<String> = (0..300).map(|i| format!("e{i}")).collect();
    let _: i64 = redis::cmd("RPUSH")
        .arg("l")
        .arg(&elements)
        .query(&mut c)
        .unwrap();
    let _: Value = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    drained(&mut c);
    let pop = |c: &mut Connection, side: &str| -> Option<String> {
        redis::cmd(side).arg("l").query(c).unwrap()
    };
    for i in 0..100 {
        assert_eq!(pop(&mut c, "LPOP"), Some(format!("e{i}")));
        assert_eq!(pop(&mut c, "RPOP"), Some(format!("e{}", 299 - i)));
        if i % 30 == 0 {
            // A pushed element is popped from the buffer, over the tables.
            let _: i64 = redis::cmd("LPUSH")
                .arg("l")
                .arg("new")
                .query(&mut c)
                .unwrap();
            assert_eq!(pop(&mut c, "LPOP"), Some("new".into()));
        }
        if i == 50 {
            let _: Value = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
            drained(&mut c);
        }
    }
    let _: Value = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    drained(&mut c);
    let left: Vec<String> = redis::cmd("LRANGE")
        .arg("l")
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    assert_eq!(left, elements[100..200].to_vec());
    drop(c);
    let tmp = srv.stop();
    let srv = TestServer::start_in(path, |_| {});
    let mut c = srv.client();
    let popped: Vec<String> = redis::cmd("LPOP").arg("l").arg(60).query(&mut c).unwrap();
    assert_eq!(popped, elements[100..160].to_vec());
    let popped: Vec<String> = redis::cmd("RPOP").arg("l").arg(60).query(&mut c).unwrap();
    let rest: Vec<String> = elements[160..200].iter().rev().cloned().collect();
    assert_eq!(popped, rest);
    assert_eq!(int(&mut c, &["EXISTS", "l"]), 0);
    drop(c);
    drop(srv.stop());
    drop(tmp);
}

/// Waits until BGREWRITEAOF's buffers are in the tables.
fn drained(c: &mut Connection) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while common::field(&common::info_cairn(c), "write_buffer_bytes") > 0 {
        assert!(Instant::now() < deadline, "the buffers never drained");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// Pins: string values of 512 bytes and more go to the value log when
// committed (their buffer and then the tables hold pointers), and read back whole through every command
// that reads a string, after overwrites and deletions, and after a restart.
#[test]
fn large_values_go_through_the_value_log() {
    let srv = TestServer::start();
    let path = srv.path.clone();
    let mut c = srv.client();
    let value = |i: usize, round: usize| format!("{i}:{round}:{}", "v".repeat(600 + i * 7));
    for i in 0..100 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(value(i, 0))
            .query(&mut c)
            .unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("small")
        .arg("s")
        .query(&mut c)
        .unwrap();
    let _: Value = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    drained(&mut c);
    let stat = |c: &mut Connection, f: &str| common::field(&common::info_cairn(c), f);
    assert!(stat(&mut c, "value_log_bytes") > 100 * 600);
    assert_eq!(stat(&mut c, "value_log_dead_bytes"), 0);
    // Overwrite the even keys, delete every fifth, grow one in place.
    for i in (0..100).step_by(2) {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(value(i, 1))
            .query(&mut c)
            .unwrap();
    }
    for i in (0..100).step_by(5) {
        assert_eq!(int(&mut c, &["DEL", &format!("k{i}")]), 1);
    }
    let _: Value = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    drained(&mut c);
    assert!(stat(&mut c, "value_log_dead_bytes") > 50 * 600);
    let appended = int(&mut c, &["APPEND", "k1", "!"]);
    assert_eq!(appended as usize, value(1, 0).len() + 1);
    let expected = |i: usize| -> Option<String> {
        match i {
            _ if i.is_multiple_of(5) => None,
            1 => Some(value(1, 0) + "!"),
            _ if i.is_multiple_of(2) => Some(value(i, 1)),
            _ => Some(value(i, 0)),
        }
    };
    let check = |c: &mut Connection| {
        for i in 0..100 {
            assert_eq!(get(c, &format!("k{i}")), expected(i), "k{i}");
        }
        let got: Vec<Option<String>> = redis::cmd("MGET")
            .arg("k3")
            .arg("k4")
            .arg("k5")
            .query(c)
            .unwrap();
        assert_eq!(got, vec![expected(3), expected(4), None]);
        assert_eq!(int(c, &["STRLEN", "k7"]) as usize, value(7, 0).len());
        let range: String = redis::cmd("GETRANGE")
            .arg("k7")
            .arg(0)
            .arg(4)
            .query(c)
            .unwrap();
        assert_eq!(range, value(7, 0)[..5]);
        assert_eq!(get(c, "small"), Some("s".into()));
        assert_eq!(int(c, &["DBSIZE"]), 81);
    };
    check(&mut c);
    drop(c);
    let tmp = srv.stop();
    let srv = TestServer::start_in(path, |_| {});
    let mut c = srv.client();
    check(&mut c);
    drop(c);
    drop(srv.stop());
    drop(tmp);
}

// Pins: a SET replacing a value the value log holds reads only its
// pointer row's head (type and expiry), as TYPE, EXISTS and TTL do, in
// the buffers and in the tables:
// the old key's expiry, counts and lazy expiry are settled as before, and
// a new value equal to the old one's head (an empty string, no expiry)
// still replaces it.
#[test]
fn replacing_a_large_value_settles_its_expiry_without_reading_it() {
    let srv = TestServer::start_with(|cfg| {
        cfg.redis
            .insert("enable-debug-command".into(), "local".into());
    });
    let mut c = srv.client();
    // Only the SET may find "soon" expired.
    common::ok(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let big = "b".repeat(700);
    let keyspace = |c: &mut Connection| -> String {
        let text: String = redis::cmd("INFO").arg("keyspace").query(c).unwrap();
        text.lines()
            .find(|l| l.starts_with("db0:"))
            .unwrap_or("")
            .to_string()
    };
    for in_tables in [false, true] {
        common::ok(&mut c, &["FLUSHALL"]);
        common::ok(&mut c, &["SET", "ttl", &big, "EX", "1000"]);
        common::ok(&mut c, &["SET", "empty", &big]);
        common::ok(&mut c, &["SET", "soon", &big, "PX", "50"]);
        if in_tables {
            let _: Value = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
            drained(&mut c);
        }
        // TYPE, EXISTS and TTL read the pointer row's head alone.
        let ttl = int(&mut c, &["TTL", "ttl"]);
        assert!((990..=1000).contains(&ttl), "{ttl}");
        assert_eq!(int(&mut c, &["EXISTS", "ttl", "empty"]), 2);
        let t: String = redis::cmd("TYPE").arg("empty").query(&mut c).unwrap();
        assert_eq!(t, "string");
        std::thread::sleep(Duration::from_millis(80));
        let expired = common::expired_keys(&mut c);
        common::ok(&mut c, &["SET", "ttl", "small"]);
        common::ok(&mut c, &["SET", "empty", ""]);
        common::ok(&mut c, &["SET", "soon", &big]);
        assert_eq!(int(&mut c, &["TTL", "ttl"]), -1);
        assert_eq!(int(&mut c, &["TTL", "soon"]), -1);
        assert_eq!(get(&mut c, "ttl"), Some("small".into()));
        assert_eq!(
            get(&mut c, "empty"),
            Some(String::new()),
            "in tables: {in_tables}"
        );
        assert_eq!(get(&mut c, "soon"), Some(big.clone()));
        assert_eq!(
            common::expired_keys(&mut c),
            expired + 1,
            "in tables: {in_tables}"
        );
        assert_eq!(keyspace(&mut c), "db0:keys=3,expires=0,avg_ttl=0");
    }
}

// Pins: large values (appended to the value log at commit, pointed at
// from the write buffers) survive SIGKILLs under `always`: three rounds on
// one data directory, each SETting values of 600+ bytes over a few hundred
// keys with write-outs (BGREWRITEAOF) between, so that a kill finds value
// log files the tables point into, appends past their last recorded size
// and appends no commit recorded; every acknowledged value reads back
// whole after each restart.
#[test]
fn large_values_survive_sigkill() {
    const KEYS: u64 = 300;
    let root = tempfile::tempdir().unwrap();
    let data: PathBuf = root.path().join("data");
    let value = |i: u64| format!("{i}:{}", "x".repeat(600 + (i % 50) as usize * 13));
    // The last SET acknowledged per key (and the one in flight at the kill).
    let mut acked: Vec<Option<u64>> = vec![None; KEYS as usize];
    // Every key reads back as its last acknowledged value.
    let check = |c: &mut Connection, acked: &[Option<u64>], when: &str| {
        for (k, last) in acked.iter().enumerate() {
            assert_eq!(get(c, &format!("k{k}")), last.map(value), "k{k} {when}");
        }
    };
    let mut next = 0u64;
    for round in 0..3 {
        let mut server = Proc::start(root.path(), &data);
        let mut c = server.client();
        check(&mut c, &acked, &format!("after restart {round}"));
        let done = Arc::new(AtomicU64::new(next));
        let writer = {
            let done = done.clone();
            let mut c = server.client();
            let start = next;
            std::thread::spawn(move || {
                let mut i = start;
                loop {
                    if (i - start) % 250 == 249 {
                        let r: redis::RedisResult<Value> = redis::cmd("BGREWRITEAOF").query(&mut c);
                        if r.is_err() {
                            return;
                        }
                    }
                    let set: redis::RedisResult<Value> = redis::cmd("SET")
                        .arg(format!("k{}", i % KEYS))
                        .arg(value(i))
                        .query(&mut c);
                    match set {
                        Ok(Value::Okay) => done.store(i + 1, Ordering::SeqCst),
                        Ok(other) => panic!("SET answered {other:?}"),
                        Err(_) => return,
                    }
                    i += 1;
                }
            })
        };
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(1200)
            && done.load(Ordering::SeqCst) < next + 2000
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        server.kill();
        writer.join().expect("writer thread");
        let until = done.load(Ordering::SeqCst);
        assert!(until > next + 10, "only {} SETs acknowledged", until - next);
        let mut after = Proc::start(root.path(), &data);
        let mut c = after.client();
        // The SET in flight at the kill may or may not have landed.
        let in_flight = until;
        let landed = get(&mut c, &format!("k{}", in_flight % KEYS)) == Some(value(in_flight));
        for i in next..until + landed as u64 {
            acked[(i % KEYS) as usize] = Some(i);
        }
        next = until + 1;
        check(
            &mut c,
            &acked,
            &format!("after the SIGKILL of round {round}"),
        );
        drop(c);
        assert!(after.shutdown().success());
    }
    let server = Proc::start(root.path(), &data);
    check(&mut server.client(), &acked, "at the end");
}

// With save points set, SIGTERM writes dump.rdb before the server exits,
// as Redis's shutdown on a signal does.
#[test]
fn sigterm_saves_with_save_points() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let mut server = Proc::start(root.path(), &data);
    let mut c = server.client();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("save")
        .arg("3600 1")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET").arg("x").arg("1").query(&mut c).unwrap();
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(server.child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let exit =
        wait_exit(&mut server.child, Duration::from_secs(20)).expect("cairn exits on SIGTERM");
    assert!(exit.success(), "{exit}");
    assert!(data.join("dump.rdb").exists());
}

// Pins: under `always` a client's writes commit on its own thread and
// their replies and effects wait for the log's fsync (see
// `storage::group`), with the replies and effects everysec gives: a
// pipeline reads its own writes, a blocked pop is served, a keyspace
// notification goes out, WATCH sees another client's write, DBSIZE counts
// it, and INCRs from several clients at once lose none.
#[test]
fn always_serves_writes_as_everysec_does() {
    let srv = TestServer::start_with(|cfg| cfg.durability = Durability::Always);
    let mut c = srv.client();
    let fsyncs = |c: &mut Connection| common::field(&common::info_cairn(c), "fsyncs");
    let before = fsyncs(&mut c);
    let got: Vec<Value> = redis::pipe()
        .cmd("SET")
        .arg("a")
        .arg("1")
        .cmd("GET")
        .arg("a")
        .cmd("INCR")
        .arg("a")
        .cmd("GET")
        .arg("a")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        got,
        vec![
            Value::Okay,
            common::bulk("1"),
            Value::Int(2),
            common::bulk("2")
        ]
    );
    assert!(fsyncs(&mut c) > before, "the writes were fsynced");
    assert_eq!(int(&mut c, &["DBSIZE"]), 1);

    let mut blocked = srv.client();
    let pop = std::thread::spawn(move || -> Value {
        redis::cmd("BLPOP")
            .arg("list")
            .arg(5)
            .query(&mut blocked)
            .unwrap()
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while !common::text(common::q(&mut c, &["CLIENT", "LIST"])).contains("cmd=blpop") {
        assert!(Instant::now() < deadline, "BLPOP never blocked");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(int(&mut c, &["LPUSH", "list", "x"]), 1);
    assert_eq!(pop.join().unwrap(), common::arr(&["list", "x"]));

    common::ok(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KA"]);
    let mut sub = srv.client();
    let mut events = sub.as_pubsub();
    events.subscribe("__keyspace@0__:k").unwrap();
    events
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    common::ok(&mut c, &["SET", "k", "v"]);
    let event: String = events.get_message().unwrap().get_payload().unwrap();
    assert_eq!(event, "set");

    let mut other = srv.client();
    common::ok(&mut c, &["WATCH", "k"]);
    common::ok(&mut other, &["SET", "k", "w"]);
    common::ok(&mut c, &["MULTI"]);
    assert_eq!(
        common::q(&mut c, &["SET", "k", "x"]),
        Value::SimpleString("QUEUED".into())
    );
    assert_eq!(common::q(&mut c, &["EXEC"]), Value::Nil);
    assert_eq!(get(&mut c, "k").as_deref(), Some("w"));

    let threads: Vec<_> = (0..8)
        .map(|t| {
            let mut c = srv.client();
            std::thread::spawn(move || {
                for _ in 0..100 {
                    int(&mut c, &["INCR", "n"]);
                    int(&mut c, &["INCR", &format!("own{t}")]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(get(&mut c, "n").as_deref(), Some("800"));
    for t in 0..8 {
        assert_eq!(get(&mut c, &format!("own{t}")).as_deref(), Some("100"));
    }
}

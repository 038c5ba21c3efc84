//! DEBUG against a real server: the enable-debug-command gate, SLEEP
//! holding other clients, SET-ACTIVE-EXPIRE, RELOAD reopening the shard
//! files with every type's data intact, POPULATE, and the subcommands
//! cairn answers as unknown. The replies of the other subcommands are in
//! the compat transcript (tests/compat/cases/debug.txt).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{bulk, cmd, err, expired_keys, int, ok, q, TestServer};
use redis::Value;

/// Redis 7.0.15's refusal, as redis-server with its default config sends it.
const NOT_ALLOWED: &str = "ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.";

fn with_debug(setting: &str) -> TestServer {
    let setting = setting.to_string();
    TestServer::start_with(move |cfg| {
        cfg.redis
            .insert("enable-debug-command".into(), setting.into());
    })
}

fn status(c: &mut redis::Connection, args: &[&str]) -> String {
    match q(c, args) {
        Value::SimpleString(s) => s,
        v => panic!("{args:?} answered {v:?}"),
    }
}

#[test]
fn the_setting_gates_every_subcommand() {
    let off = TestServer::start();
    let mut c = off.client();
    for args in [
        &["DEBUG", "SLEEP", "0"][..],
        &["DEBUG", "HELP"],
        &["DEBUG", "foo"],
        &["DEBUG", "DIGEST"],
    ] {
        assert_eq!(err(&mut c, args), NOT_ALLOWED, "{args:?}");
    }
    // The arity is checked first, as in Redis.
    assert_eq!(
        err(&mut c, &["DEBUG"]),
        "ERR wrong number of arguments for 'debug' command"
    );
    let mut cfg = q(&mut c, &["CONFIG", "GET", "enable-debug-command"]);
    if let Value::Map(m) = cfg {
        cfg = Value::Array(m.into_iter().flat_map(|(k, v)| [k, v]).collect());
    }
    assert_eq!(cfg, common::arr(&["enable-debug-command", "no"]));
    drop(c);
    drop(off);

    // `local` lets loopback clients in (the test's clients are all local).
    for setting in ["local", "yes"] {
        let on = with_debug(setting);
        let mut c = on.client();
        ok(&mut c, &["DEBUG", "SLEEP", "0"]);
        assert_eq!(
            status(&mut c, &["DEBUG", "DIGEST"]),
            "0000000000000000000000000000000000000000"
        );
    }
}

#[test]
fn help_lists_what_cairn_does_and_the_rest_is_unknown() {
    let s = with_debug("yes");
    let mut c = s.client();
    let Value::Array(lines) = q(&mut c, &["DEBUG", "HELP"]) else {
        panic!("HELP is an array");
    };
    let lines: Vec<String> = lines
        .into_iter()
        .map(|l| match l {
            Value::SimpleString(s) => s,
            v => panic!("{v:?}"),
        })
        .collect();
    assert_eq!(
        lines[0],
        "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    );
    assert_eq!(lines[lines.len() - 2..], ["HELP", "    Prints this help."]);
    let named: Vec<&str> = lines[1..]
        .iter()
        .filter(|l| !l.starts_with(' '))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(
        named,
        [
            "CHANGE-REPL-ID",
            "DIGEST",
            "DIGEST-VALUE",
            "ERROR",
            "LOG",
            "LOADAOF",
            "OBJECT",
            "POPULATE",
            "PROTOCOL",
            "RELOAD",
            "SET-ACTIVE-EXPIRE",
            "QUICKLIST-PACKED-THRESHOLD",
            "SET-SKIP-CHECKSUM-VALIDATION",
            "SLEEP",
            "STRINGMATCH-TEST",
            "PAUSE-CRON",
            "REPLYBUFFER",
            "REPLYBUFFER",
            "HELP"
        ]
    );
    // What Redis lists but cairn cannot honestly do (crash, leak, inspect
    // Redis's allocator or structures, AOF, replicas, cluster bus).
    for sub in [
        "SEGFAULT",
        "PANIC",
        "ASSERT",
        "OOM",
        "LEAK",
        "MALLCTL",
        "MALLCTL-STR",
        "JMAP",
        "SDSLEN",
        "ZIPLIST",
        "LISTPACK",
        "QUICKLIST",
        "HTSTATS",
        "HTSTATS-KEY",
        "STRUCTSIZE",
        "AOF-FLUSH-SLEEP",
        "REPLICATE",
        "CONFIG-REWRITE-FORCE-ALL",
        "CRASH-AND-RECOVER",
        "RESTART",
        "CLIENT-EVICTION",
        "DROP-CLUSTER-PACKET-FILTER",
        "CLUSTERLINK",
        "STRINGMATCH-LEN",
    ] {
        assert_eq!(
            err(&mut c, &["DEBUG", sub, "x"]),
            format!(
                "ERR unknown subcommand or wrong number of arguments for '{sub}'. Try DEBUG HELP."
            ),
        );
    }
    // Still alive.
    assert_eq!(q(&mut c, &["PING"]), Value::SimpleString("PONG".into()));
}

/// DEBUG SLEEP `secs` from a client of its own, on a thread; returns once
/// the sleep has surely begun.
fn sleep_elsewhere(port: u16, secs: &'static str) -> std::thread::JoinHandle<()> {
    let sleeper = std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_connection()
            .unwrap();
        ok(&mut c, &["DEBUG", "SLEEP", secs]);
    });
    std::thread::sleep(Duration::from_millis(150));
    sleeper
}

#[test]
fn sleep_holds_other_clients_reads_and_writes() {
    let s = with_debug("yes");
    let mut other = s.client();
    ok(&mut other, &["SET", "k", "v"]);
    let port = s.port;
    let sleeper = sleep_elsewhere(port, "0.6");
    let started = Instant::now();
    assert_eq!(q(&mut other, &["GET", "k"]), bulk("v"));
    let read_waited = started.elapsed();
    ok(&mut other, &["SET", "k", "w"]);
    sleeper.join().unwrap();
    assert!(
        read_waited >= Duration::from_millis(300),
        "a GET during DEBUG SLEEP 0.6 came back after {read_waited:?}"
    );

    // And a write issued during the sleep waits for it too.
    let sleeper = sleep_elsewhere(port, "0.5");
    let started = Instant::now();
    ok(&mut other, &["SET", "k", "x"]);
    let write_waited = started.elapsed();
    sleeper.join().unwrap();
    assert!(
        write_waited >= Duration::from_millis(250),
        "a SET during DEBUG SLEEP 0.5 came back after {write_waited:?}"
    );
    assert_eq!(q(&mut other, &["GET", "k"]), bulk("x"));
}

/// The `keys=` count of `db0` in INFO keyspace (0 when absent).
fn keyspace_keys(c: &mut redis::Connection) -> u64 {
    let text: String = cmd(&["INFO", "keyspace"]).query(c).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("db0:keys="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[test]
fn set_active_expire_0_keeps_expired_keys_until_reenabled() {
    let s = with_debug("yes");
    let mut c = s.client();
    ok(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    ok(&mut c, &["SET", "gone", "v", "PX", "50"]);
    ok(&mut c, &["SET", "stays", "v"]);
    // Several reaper ticks (100 ms each) pass: nothing is reaped.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(int(&mut c, &["DBSIZE"]), 2);
    assert_eq!(keyspace_keys(&mut c), 2);
    // The expired key still digests, as Redis's still-stored key does.
    let Value::Array(d) = q(&mut c, &["DEBUG", "DIGEST-VALUE", "gone"]) else {
        panic!("DIGEST-VALUE is an array");
    };
    assert_ne!(
        d[0],
        Value::SimpleString("0000000000000000000000000000000000000000".into())
    );

    ok(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "1"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while int(&mut c, &["DBSIZE"]) != 1 {
        assert!(
            Instant::now() < deadline,
            "the expired key was never reaped"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(keyspace_keys(&mut c), 1);
    assert_eq!(q(&mut c, &["GET", "stays"]), bulk("v"));
}

/// A read that finds a key expired deletes it before it replies, as
/// Redis's lazy expiry does: DBSIZE drops, `expired_keys` counts it and
/// the `expired` event goes out (Redis's expire unit, "Redis should lazy
/// expire keys").
#[test]
fn reads_delete_the_expired_keys_they_find() {
    let s = with_debug("yes");
    let mut c = s.client();
    ok(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    ok(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Ex"]);
    let mut sub = s.client();
    let mut events = sub.as_pubsub();
    events.subscribe("__keyevent@0__:expired").unwrap();
    events
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    for k in ["k1{t}", "k2{t}", "k3{t}", "other"] {
        ok(&mut c, &["SET", k, "v", "PX", "50"]);
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(int(&mut c, &["DBSIZE"]), 4);
    assert_eq!(expired_keys(&mut c), 0);
    assert_eq!(
        q(&mut c, &["MGET", "k1{t}", "k2{t}", "k3{t}"]),
        Value::Array(vec![Value::Nil, Value::Nil, Value::Nil])
    );
    assert_eq!(int(&mut c, &["DBSIZE"]), 1);
    assert_eq!(expired_keys(&mut c), 3);
    assert_eq!(int(&mut c, &["EXISTS", "other"]), 0);
    assert_eq!(int(&mut c, &["DBSIZE"]), 0);
    assert_eq!(expired_keys(&mut c), 4);
    let mut got: Vec<String> = (0..4)
        .map(|_| events.get_message().unwrap().get_payload().unwrap())
        .collect();
    got.sort();
    assert_eq!(got, ["k1{t}", "k2{t}", "k3{t}", "other"]);
    ok(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "1"]);
}

#[test]
fn pause_cron_stops_the_reaper_and_garbage_collection() {
    let s = with_debug("yes");
    let mut c = s.client();
    ok(&mut c, &["DEBUG", "PAUSE-CRON", "1"]);
    ok(&mut c, &["SET", "gone", "v", "PX", "50"]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(int(&mut c, &["DBSIZE"]), 1);
    ok(&mut c, &["DEBUG", "PAUSE-CRON", "0"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while int(&mut c, &["DBSIZE"]) != 0 {
        assert!(Instant::now() < deadline, "the reaper never resumed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One key of every type (two shards' worth), some with a TTL.
fn fill(c: &mut redis::Connection) {
    ok(c, &["SET", "str", "hello"]);
    ok(c, &["SET", "int", "12345"]);
    ok(c, &["SET", "ttl", "v", "EX", "1000"]);
    int(c, &["RPUSH", "list", "a", "b", "3", "c"]);
    int(c, &["SADD", "set", "a", "b", "c"]);
    int(c, &["SADD", "iset", "1", "2", "300"]);
    int(c, &["ZADD", "zset", "1", "a", "2.5", "b", "-0.1", "c"]);
    int(c, &["HSET", "hash", "f1", "v1", "f2", "v2"]);
    int(c, &["PEXPIRE", "hash", "2000000"]);
    q(c, &["XADD", "stream", "1-1", "a", "1"]);
    q(c, &["XADD", "stream", "2-0", "b", "2"]);
    ok(c, &["XGROUP", "CREATE", "stream", "g", "0"]);
    q(
        c,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "COUNT",
            "1",
            "STREAMS",
            "stream",
            ">",
        ],
    );
    q(c, &["PFADD", "hll", "a", "b", "c"]);
    // PFCOUNT writes its cache into the value: once here, so that the
    // reads of `contents` change nothing.
    int(c, &["PFCOUNT", "hll"]);
    ok(c, &["SELECT", "3"]);
    ok(c, &["SET", "other-db", "x"]);
    ok(c, &["SELECT", "0"]);
}

/// Everything RELOAD must keep, as the server answers it.
fn contents(c: &mut redis::Connection) -> Vec<Value> {
    let mut out = Vec::new();
    for args in [
        &["DEBUG", "DIGEST"][..],
        &["DBSIZE"],
        &["GET", "str"],
        &["GET", "int"],
        &["TTL", "ttl"],
        &["LRANGE", "list", "0", "-1"],
        &["SMEMBERS", "iset"],
        &["ZRANGE", "zset", "0", "-1", "WITHSCORES"],
        &["HGETALL", "hash"],
        &["XRANGE", "stream", "-", "+"],
        &["XPENDING", "stream", "g"],
        &["PFCOUNT", "hll"],
        &["INFO", "keyspace"],
    ] {
        if args[0] == "INFO" {
            // avg_ttl moves with the clock; the key and expiry counts do not.
            let text: String = cmd(args).query(c).unwrap();
            let counts = text
                .lines()
                .filter(|l| l.starts_with("db"))
                .map(|l| bulk(l.split(",avg_ttl").next().unwrap()));
            out.push(Value::Array(counts.collect()));
            continue;
        }
        let mut v = q(c, args);
        if let (Value::Array(items), "SMEMBERS") = (&mut v, args[0]) {
            items.sort_by_key(|i| format!("{i:?}"));
        }
        out.push(v);
    }
    out
}

#[test]
fn reload_reopens_every_shard_and_keeps_every_type_and_ttl() {
    let s = with_debug("yes");
    let mut c = s.client();
    fill(&mut c);
    let before = contents(&mut c);
    assert_ne!(
        before[0],
        Value::SimpleString("0000000000000000000000000000000000000000".into())
    );
    let files = |s: &TestServer| -> Vec<usize> {
        s.server()
            .shards
            .shards()
            .iter()
            .map(|sh| Arc::as_ptr(&sh.store().unwrap()) as usize)
            .collect()
    };
    let opened = files(&s);

    ok(&mut c, &["DEBUG", "RELOAD"]);
    // Every shard's file was closed and opened again.
    let reopened = files(&s);
    for (a, b) in opened.iter().zip(&reopened) {
        assert_ne!(a, b, "a shard kept its file open across DEBUG RELOAD");
    }
    assert_eq!(contents(&mut c), before);
    let pttl = int(&mut c, &["PTTL", "hash"]);
    assert!((1_900_000..=2_000_000).contains(&pttl), "PTTL hash {pttl}");

    // The reopened files take writes, and the options change nothing.
    ok(&mut c, &["SET", "after", "1"]);
    ok(&mut c, &["DEBUG", "RELOAD", "NOSAVE", "NOFLUSH", "MERGE"]);
    assert_eq!(q(&mut c, &["GET", "after"]), bulk("1"));
    assert_eq!(int(&mut c, &["DEL", "after"]), 1);
    assert_eq!(contents(&mut c), before);

    // And the data outlives a restart after a reload.
    let dir = s.stop().unwrap();
    let again = TestServer::start_in(dir.path().to_path_buf(), |cfg| {
        cfg.redis
            .insert("enable-debug-command".into(), "yes".into());
    });
    let mut c = again.client();
    assert_eq!(contents(&mut c), before);
}

#[test]
fn populate_fills_missing_keys_across_shards() {
    let s = with_debug("yes");
    let mut c = s.client();
    ok(&mut c, &["SET", "key:7", "mine"]);
    ok(&mut c, &["DEBUG", "POPULATE", "25000"]);
    assert_eq!(int(&mut c, &["DBSIZE"]), 25000);
    assert_eq!(q(&mut c, &["GET", "key:7"]), bulk("mine"));
    assert_eq!(q(&mut c, &["GET", "key:24999"]), bulk("value:24999"));
    assert_eq!(q(&mut c, &["GET", "key:25000"]), Value::Nil);
    // Both shards got their part.
    let per_shard: Vec<i64> = s
        .server()
        .shards
        .shards()
        .iter()
        .map(|sh| sh.counts(0).keys)
        .collect();
    assert!(per_shard.iter().all(|&n| n > 10_000), "{per_shard:?}");

    ok(&mut c, &["DEBUG", "POPULATE", "10", "p", "12"]);
    assert_eq!(int(&mut c, &["DBSIZE"]), 25010);
    assert_eq!(q(&mut c, &["GET", "p:3"]), bulk("value:3\0\0\0\0\0"));
    ok(&mut c, &["SELECT", "2"]);
    ok(&mut c, &["DEBUG", "POPULATE", "5"]);
    assert_eq!(int(&mut c, &["DBSIZE"]), 5);
}

#[test]
fn inside_multi_debug_runs_in_the_transaction() {
    let s = with_debug("yes");
    let mut c = s.client();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("DEBUG")
        .arg("POPULATE")
        .arg("100")
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("0")
        .cmd("DBSIZE")
        .cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg("key:1")
        .query(&mut c)
        .unwrap_or_else(|e| panic!("EXEC: {e}"));
    assert_eq!(replies[0], Value::Okay);
    assert_eq!(replies[1], Value::Okay);
    assert_eq!(replies[2], Value::Int(100));
    assert_ne!(
        replies[3],
        Value::Array(vec![Value::SimpleString(
            "0000000000000000000000000000000000000000".into()
        )])
    );
    assert_eq!(int(&mut c, &["DBSIZE"]), 100);

    // Inside a transaction it answers OK, as Redis 7.0.15 does, and the
    // data is unchanged.
    let mut raw = s.tcp();
    for args in [&[&b"MULTI"[..]][..], &[b"DEBUG", b"RELOAD"], &[b"EXEC"]] {
        common::send_raw(&mut raw, args);
    }
    let want = b"+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n";
    let mut got = vec![0; want.len()];
    std::io::Read::read_exact(&mut raw, &mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
}

/// Runs `round` on a connection of its own, numbering the rounds from 0,
/// until `stop` is set; returns how many ran.
fn rounds_until(
    port: u16,
    stop: &std::sync::atomic::AtomicBool,
    mut round: impl FnMut(&mut redis::Connection, u64),
) -> u64 {
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut n = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        round(&mut c, n);
        n += 1;
    }
    n
}

#[test]
fn reload_under_load_loses_nothing() {
    let s = with_debug("yes");
    let port = s.port;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Writers and readers keep going while the shards reopen: every
    // acknowledged write must be there afterwards.
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                rounds_until(port, &stop, |c, n| {
                    let key = format!("w{w}:{n}");
                    ok(c, &["SET", &key, &n.to_string()]);
                    assert_eq!(q(c, &["GET", &key]), bulk(&n.to_string()));
                    int(c, &["INCR", &format!("count{w}")]);
                })
            })
        })
        .collect();
    // A pipeline of reads and writes on both shards: its reads share a
    // snapshot per shard while the batch runs, and none of them may hold
    // up the reopen (which waits for every snapshot of the old files).
    let piped = {
        let stop = stop.clone();
        let (a, b) = common::waiting::keys_on_both_shards("piped");
        std::thread::spawn(move || {
            rounds_until(port, &stop, |c, n| {
                let (got_a, got_b, _, _, again_a): (Option<u64>, Option<u64>, (), (), u64) =
                    redis::pipe()
                        .get(&a)
                        .get(&b)
                        .set(&a, n)
                        .set(&b, n)
                        .get(&a)
                        .query(c)
                        .unwrap();
                let before = n.checked_sub(1);
                assert_eq!((got_a, got_b, again_a), (before, before, n));
            })
        })
    };
    let mut c = s.client();
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(60));
        let began = Instant::now();
        ok(&mut c, &["DEBUG", "RELOAD"]);
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the reopen waited on readers"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let piped = piped.join().unwrap();
    let written: Vec<u64> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    // Each worker's keys and its counter, and the pipelines' two keys.
    assert!(piped > 0, "the pipelines made no progress");
    let total: u64 = written.iter().map(|n| n + 1).sum::<u64>() + 2;
    assert_eq!(int(&mut c, &["DBSIZE"]) as u64, total);
    for (w, &n) in written.iter().enumerate() {
        assert!(n > 0, "worker {w} made no progress");
        assert_eq!(int(&mut c, &["GET", &format!("count{w}")]) as u64, n);
        let last = format!("w{w}:{}", n - 1);
        assert_eq!(q(&mut c, &["GET", &last]), bulk(&(n - 1).to_string()));
    }
}

/// `local` is Redis's islocalClient: exactly 127.0.0.1 (or ::1). A client
/// connecting from 127.0.0.2, still over loopback, is not local.
#[test]
fn local_refuses_clients_from_other_addresses() {
    use std::io::{Read, Write};
    let s = with_debug("local");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let mut remote = rt
        .block_on(async {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind("127.0.0.2:0".parse().unwrap())?;
            socket
                .connect(format!("127.0.0.1:{}", s.port).parse().unwrap())
                .await?
                .into_std()
        })
        .unwrap();
    remote.set_nonblocking(false).unwrap();
    remote
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    remote
        .write_all(b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$1\r\n0\r\n")
        .unwrap();
    let want = format!("-{NOT_ALLOWED}\r\n");
    let mut got = vec![0u8; want.len()];
    remote.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), want);
    let mut local = s.client();
    ok(&mut local, &["DEBUG", "SLEEP", "0"]);
}

/// The slow log holds one entry: DEBUG SLEEP 0.2, of at least 200 ms.
fn the_slow_log_holds_one_sleep_of_200ms(c: &mut redis::Connection) {
    assert_eq!(int(c, &["SLOWLOG", "LEN"]), 1);
    let Value::Array(entries) = q(c, &["SLOWLOG", "GET"]) else {
        panic!("SLOWLOG GET is an array");
    };
    let Value::Array(entry) = &entries[0] else {
        panic!("an entry is an array");
    };
    assert!(
        matches!(entry[2], Value::Int(us) if us >= 200_000),
        "{entry:?}"
    );
    assert_eq!(entry[3], common::arr(&["DEBUG", "SLEEP", "0.2"]));
}

/// DEBUG SLEEP's time is the command's own, as SLOWLOG and the latency
/// monitor see it in Redis (Redis's tests time it that way: slowlog.tcl,
/// latency-monitor.tcl).
#[test]
fn sleep_shows_in_the_slow_log_and_the_latency_monitor() {
    let srv = with_debug("yes");
    let mut c = srv.client();
    ok(
        &mut c,
        &["CONFIG", "SET", "slowlog-log-slower-than", "100000"],
    );
    ok(
        &mut c,
        &["CONFIG", "SET", "latency-monitor-threshold", "100"],
    );
    ok(&mut c, &["SLOWLOG", "RESET"]);
    ok(&mut c, &["DEBUG", "SLEEP", "0"]);
    ok(&mut c, &["DEBUG", "SLEEP", "0.2"]);
    the_slow_log_holds_one_sleep_of_200ms(&mut c);
    let Value::Array(history) = q(&mut c, &["LATENCY", "HISTORY", "command"]) else {
        panic!("LATENCY HISTORY is an array");
    };
    assert_eq!(history.len(), 1, "{history:?}");
    // In a transaction (run as a plan, after EXEC returns to the
    // connection) its time is still its own: slowlog.tcl, "SLOWLOG - EXEC
    // is not logged, just executed commands".
    ok(&mut c, &["SLOWLOG", "RESET"]);
    ok(&mut c, &["MULTI"]);
    assert_eq!(
        q(&mut c, &["DEBUG", "SLEEP", "0.2"]),
        Value::SimpleString("QUEUED".into())
    );
    assert_eq!(q(&mut c, &["EXEC"]), Value::Array(vec![Value::Okay]));
    the_slow_log_holds_one_sleep_of_200ms(&mut c);
}

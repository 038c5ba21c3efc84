//! Moving data between cairn and Redis: DUMP / RESTORE round trips through
//! a real redis-server (every type, compact and big encodings), and MIGRATE
//! between two cairns, from cairn to Redis and from Redis to cairn.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::real_redis::RealRedis;
use common::{bulk, cmd, err, int, ok, q, shard_of, TestServer};
use redis::{Connection, Value};

/// A numeric field of an INFO section.
fn info_number(c: &mut Connection, section: &str, field: &str) -> i64 {
    let info: String = cmd(&["INFO", section]).query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no {field}"))
}

/// Builds one value of every type and encoding under `prefix` (the same
/// commands on either server).
fn build_values(c: &mut Connection, prefix: &str) -> Vec<String> {
    let k = |n: &str| format!("{prefix}{n}");
    ok(c, &["SET", &k("str"), "hello"]);
    ok(c, &["SET", &k("int"), "12345"]);
    ok(c, &["SET", &k("long"), &"compressible ".repeat(50)]);
    q(c, &["RPUSH", &k("list"), "a", "1", "-1", "b"]);
    let mut big = vec!["RPUSH".to_string(), k("biglist")];
    big.extend((0..400).map(|i| format!("element-{i}-{}", "x".repeat(i % 50))));
    q(c, &big.iter().map(String::as_str).collect::<Vec<_>>());
    q(c, &["SADD", &k("intset"), "1", "2", "-300", "70000"]);
    let mut set = vec!["SADD".to_string(), k("set")];
    set.extend((0..700).map(|i| format!("m{i}")));
    q(c, &set.iter().map(String::as_str).collect::<Vec<_>>());
    q(c, &["ZADD", &k("zset"), "1.5", "a", "-2", "b", "inf", "c"]);
    let mut z = vec!["ZADD".to_string(), k("bigzset")];
    for i in 0..300 {
        z.push(format!("{}", i as f64 / 3.0));
        z.push(format!("member-{i}"));
    }
    q(c, &z.iter().map(String::as_str).collect::<Vec<_>>());
    q(c, &["HSET", &k("hash"), "a", "1", "b", "two"]);
    let mut h = vec!["HSET".to_string(), k("bighash")];
    for i in 0..200 {
        h.push(format!("field{i}"));
        h.push("v".repeat(i));
    }
    q(c, &h.iter().map(String::as_str).collect::<Vec<_>>());
    for i in 1..=150 {
        q(
            c,
            &["XADD", &k("stream"), &format!("{i}-1"), "f", &i.to_string()],
        );
    }
    q(c, &["XDEL", &k("stream"), "7-1"]);
    ok(c, &["XGROUP", "CREATE", &k("stream"), "g", "0"]);
    q(
        c,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "COUNT",
            "3",
            "STREAMS",
            &k("stream"),
            ">",
        ],
    );
    q(c, &["XACK", &k("stream"), "g", "2-1"]);
    [
        "str", "int", "long", "list", "biglist", "intset", "set", "zset", "bigzset", "hash",
    ]
    .iter()
    .chain(&["bighash", "stream"])
    .map(|n| k(n))
    .collect()
}

/// A value in a form that compares equal whatever the encoding and the
/// order a server enumerates it in.
fn contents(c: &mut Connection, key: &str) -> Value {
    let t = match q(c, &["TYPE", key]) {
        Value::SimpleString(t) => t,
        other => panic!("TYPE {key}: {other:?}"),
    };
    let sorted = |v: Value| match v {
        Value::Array(mut items) => {
            items.sort_by_key(|i| format!("{i:?}"));
            Value::Array(items)
        }
        other => other,
    };
    let body = match t.as_str() {
        "string" => q(c, &["GET", key]),
        "list" => q(c, &["LRANGE", key, "0", "-1"]),
        "set" => sorted(q(c, &["SMEMBERS", key])),
        "zset" => q(c, &["ZRANGE", key, "0", "-1", "WITHSCORES"]),
        "hash" => sorted(q(c, &["HGETALL", key])),
        "stream" => Value::Array(vec![
            q(c, &["XRANGE", key, "-", "+"]),
            q(c, &["XINFO", "GROUPS", key]),
            q(c, &["XPENDING", key, "g"]),
        ]),
        other => panic!("unexpected type {other}"),
    };
    Value::Array(vec![Value::SimpleString(t), body])
}

fn dump(c: &mut Connection, key: &str) -> Vec<u8> {
    match q(c, &["DUMP", key]) {
        Value::BulkString(b) => b,
        other => panic!("DUMP {key}: {other:?}"),
    }
}

fn restore(c: &mut Connection, key: &str, payload: &[u8]) {
    let r: Value = cmd(&["RESTORE", key, "0"])
        .arg(payload)
        .query(c)
        .unwrap_or_else(|e| panic!("RESTORE {key}: {e}"));
    assert_eq!(r, Value::Okay);
}

/// DUMP in Redis, RESTORE in cairn, DUMP in cairn, RESTORE in Redis: the
/// value survives both hops, for every type and encoding.
#[test]
fn dump_restore_round_trips_through_redis() {
    let redis = RealRedis::start();
    let cairn = TestServer::start();
    let (mut r, mut c) = (redis.client(), cairn.client());
    for key in build_values(&mut r, "v:") {
        let want = contents(&mut r, &key);
        restore(&mut c, &key, &dump(&mut r, &key));
        assert_eq!(contents(&mut c, &key), want, "{key} in cairn");
        let back = format!("back:{key}");
        restore(&mut r, &back, &dump(&mut c, &key));
        assert_eq!(contents(&mut r, &back), want, "{key} back in Redis");
    }
}

/// Values built in cairn dump to payloads Redis restores to the same
/// contents.
#[test]
fn cairn_payloads_restore_in_redis() {
    let redis = RealRedis::start();
    let cairn = TestServer::start();
    let (mut r, mut c) = (redis.client(), cairn.client());
    for key in build_values(&mut c, "c:") {
        restore(&mut r, &key, &dump(&mut c, &key));
        assert_eq!(contents(&mut r, &key), contents(&mut c, &key), "{key}");
    }
}

/// MIGRATE from cairn to Redis and from Redis to cairn moves every type,
/// keeps TTLs, and removes the source keys.
#[test]
fn migrate_between_cairn_and_redis() {
    let redis = RealRedis::start();
    let cairn = TestServer::start();
    let (mut r, mut c) = (redis.client(), cairn.client());
    let keys = build_values(&mut c, "m:");
    let want: Vec<Value> = keys.iter().map(|k| contents(&mut c, k)).collect();
    q(&mut c, &["PEXPIRE", &keys[0], "100000"]);
    let mut args = vec!["MIGRATE", "127.0.0.1"];
    let rport = redis.port.to_string();
    args.extend([rport.as_str(), "", "0", "5000", "KEYS"]);
    args.extend(keys.iter().map(String::as_str));
    ok(&mut c, &args);
    assert_eq!(int(&mut c, &["EXISTS", &keys[0], &keys[5]]), 0);
    for (k, w) in keys.iter().zip(&want) {
        assert_eq!(contents(&mut r, k), *w, "{k} in Redis");
    }
    assert!(int(&mut r, &["PTTL", &keys[0]]) > 90_000);

    // And back: Redis's own MIGRATE speaks to cairn.
    let cport = cairn.port.to_string();
    let mut back = vec![
        "MIGRATE",
        "127.0.0.1",
        cport.as_str(),
        "",
        "0",
        "5000",
        "KEYS",
    ];
    back.extend(keys.iter().map(String::as_str));
    ok(&mut r, &back);
    for (k, w) in keys.iter().zip(&want) {
        assert_eq!(contents(&mut c, k), *w, "{k} back in cairn");
    }
    assert!(int(&mut c, &["PTTL", &keys[0]]) > 80_000);
}

/// MIGRATE between two cairns: COPY, REPLACE, AUTH, the target's errors,
/// NOKEY, and an unreachable target.
/// MIGRATE keeps its connection to a target for the next call (Redis's
/// cached sockets), selects the database only when it changes, and, when
/// the target closed the kept connection, opens a new one transparently.
#[test]
fn migrate_reuses_its_connection_to_the_target() {
    let redis = RealRedis::start();
    let cairn = TestServer::start();
    let (mut r, mut c) = (redis.client(), cairn.client());
    let connections = |r: &mut Connection| info_number(r, "stats", "total_connections_received");
    let rport = redis.port.to_string();
    let before = connections(&mut r);
    for (i, db) in ["0", "0", "1", "0", "1"].iter().enumerate() {
        let key = format!("reuse:{i}");
        ok(&mut c, &["SET", &key, "v"]);
        ok(&mut c, &["MIGRATE", "127.0.0.1", &rport, &key, db, "5000"]);
        ok(&mut r, &["SELECT", db]);
        assert_eq!(q(&mut r, &["GET", &key]), bulk("v"), "{key} in db {db}");
    }
    ok(&mut r, &["SELECT", "0"]);
    assert_eq!(
        connections(&mut r) - before,
        1,
        "one connection for five calls"
    );
    // The target drops the kept connection: the next call reconnects.
    let killed: i64 = cmd(&["CLIENT", "KILL", "SKIPME", "yes"])
        .query(&mut r)
        .unwrap();
    assert!(killed >= 1);
    let mut r = redis.client();
    ok(&mut c, &["SET", "reuse:after", "v"]);
    ok(
        &mut c,
        &["MIGRATE", "127.0.0.1", &rport, "reuse:after", "0", "5000"],
    );
    assert_eq!(q(&mut r, &["GET", "reuse:after"]), bulk("v"));
}

#[test]
fn migrate_options_and_errors() {
    let a = TestServer::start();
    let b = TestServer::start_with(|cfg| cfg.requirepass = "pw".into());
    let (mut ca, mut cb) = (a.client(), b.client());
    ok(&mut cb, &["AUTH", "pw"]);
    let port = b.port.to_string();
    let migrate = |c: &mut Connection, extra: &[&str]| -> Value {
        let mut args = vec!["MIGRATE", "127.0.0.1", port.as_str()];
        args.extend(extra);
        q(c, &args)
    };
    ok(&mut ca, &["SET", "k1", "v1"]);
    ok(&mut ca, &["SET", "k2", "v2"]);
    q(&mut ca, &["RPUSH", "k3", "x", "y"]);

    // Without the password the target refuses, and nothing moves.
    let e = err(&mut ca, &["MIGRATE", "127.0.0.1", &port, "k1", "0", "1000"]);
    assert_eq!(
        e,
        "ERR Target instance replied with error: NOAUTH Authentication required."
    );
    assert_eq!(int(&mut ca, &["EXISTS", "k1"]), 1);
    let e = err(
        &mut ca,
        &[
            "MIGRATE",
            "127.0.0.1",
            &port,
            "k1",
            "0",
            "1000",
            "AUTH",
            "bad",
        ],
    );
    assert!(
        e.starts_with("ERR Target instance replied with error: WRONGPASS"),
        "{e}"
    );

    assert_eq!(
        migrate(&mut ca, &["k1", "0", "1000", "COPY", "AUTH", "pw"]),
        Value::Okay
    );
    assert_eq!(q(&mut cb, &["GET", "k1"]), bulk("v1"));
    assert_eq!(q(&mut ca, &["GET", "k1"]), bulk("v1"));
    let e = err(
        &mut ca,
        &[
            "MIGRATE",
            "127.0.0.1",
            &port,
            "k1",
            "0",
            "1000",
            "AUTH2",
            "default",
            "pw",
        ],
    );
    assert_eq!(
        e,
        "ERR Target instance replied with error: BUSYKEY Target key name already exists."
    );
    assert_eq!(int(&mut ca, &["EXISTS", "k1"]), 1);
    ok(&mut ca, &["SET", "k1", "newer"]);
    let r = migrate(
        &mut ca,
        &[
            "", "3", "1000", "REPLACE", "AUTH", "pw", "KEYS", "k1", "k2", "k3", "nokey",
        ],
    );
    assert_eq!(r, Value::Okay);
    assert_eq!(int(&mut ca, &["EXISTS", "k1", "k2", "k3"]), 0);
    ok(&mut cb, &["SELECT", "3"]);
    assert_eq!(q(&mut cb, &["GET", "k1"]), bulk("newer"));
    assert_eq!(
        q(&mut cb, &["LRANGE", "k3", "0", "-1"]),
        common::arr(&["x", "y"])
    );
    assert_eq!(
        migrate(&mut ca, &["", "0", "1000", "KEYS", "gone1", "gone2"]),
        Value::SimpleString("NOKEY".into())
    );

    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = closed.local_addr().unwrap().port().to_string();
    drop(closed);
    ok(&mut ca, &["SET", "k4", "v"]);
    let e = err(&mut ca, &["MIGRATE", "127.0.0.1", &dead, "k4", "0", "500"]);
    assert_eq!(e, "IOERR error or timeout writing to target instance");
    assert_eq!(int(&mut ca, &["EXISTS", "k4"]), 1);
}

/// Every key of databases 0 and 5 of a server, with its contents and
/// whether it has a TTL.
fn everything(c: &mut Connection) -> Vec<(u8, String, Value, bool)> {
    let mut out = Vec::new();
    for db in [0u8, 5] {
        ok(c, &["SELECT", &db.to_string()]);
        let mut names: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
        names.sort();
        for k in names {
            let ttl = int(c, &["PTTL", &k]) > 0;
            out.push((db, k.clone(), contents(c, &k), ttl));
        }
    }
    ok(c, &["SELECT", "0"]);
    out
}

/// Fills databases 0 and 5 with every type, some keys with TTLs, and a
/// function library.
fn fill(c: &mut Connection) {
    build_values(c, "d0:");
    q(c, &["PEXPIRE", "d0:str", "500000"]);
    q(c, &["PEXPIRE", "d0:bigzset", "500000"]);
    ok(c, &["SELECT", "5"]);
    build_values(c, "d5:");
    q(c, &["EXPIRE", "d5:hash", "900"]);
    ok(c, &["SELECT", "0"]);
    q(
        c,
        &[
            "FUNCTION",
            "LOAD",
            "#!lua name=lib1\nredis.register_function('f1', function() return 1 end)",
        ],
    );
}

fn wait_bgsave(c: &mut Connection) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info: String = redis::cmd("INFO").arg("persistence").query(c).unwrap();
        if info.contains("rdb_bgsave_in_progress:0") {
            assert!(info.contains("rdb_last_bgsave_status:ok"), "{info}");
            return;
        }
        assert!(Instant::now() < deadline, "BGSAVE did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// cairn's BGSAVE file loads in redis-server with every key, value, TTL
/// and function library.
#[test]
fn bgsave_file_loads_in_redis() {
    let cairn = TestServer::start();
    let mut c = cairn.client();
    fill(&mut c);
    assert_eq!(
        q(&mut c, &["BGSAVE"]),
        Value::SimpleString("Background saving started".into())
    );
    wait_bgsave(&mut c);
    let redis = RealRedis::start_with_file(&cairn.path.join("dump.rdb"));
    let mut r = redis.client();
    assert_eq!(everything(&mut r), everything(&mut c));
    assert_eq!(q(&mut r, &["FCALL", "f1", "0"]), Value::Int(1));
}

/// Save points (`save <seconds> <changes>`) start a BGSAVE as Redis's cron
/// does, and the file loads in redis-server; SHUTDOWN saves first with
/// SAVE (or with save points configured), not with NOSAVE.
#[test]
fn save_points_and_shutdown_write_the_rdb_file() {
    let cairn = TestServer::start();
    let mut c = cairn.client();
    let file = cairn.path.join("dump.rdb");
    ok(&mut c, &["CONFIG", "SET", "save", "1 2"]);
    ok(&mut c, &["SET", "a", "1"]);
    // One change is not enough for "1 2".
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!file.exists());
    ok(&mut c, &["SET", "b", "2"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !file.exists() {
        assert!(Instant::now() < deadline, "no save point fired");
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_bgsave(&mut c);
    let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
    assert!(info.contains("rdb_changes_since_last_save:0"), "{info}");
    let redis = RealRedis::start_with_file(&file);
    let mut r = redis.client();
    assert_eq!(everything(&mut r), everything(&mut c));
    drop(redis);

    // SHUTDOWN SAVE writes the latest data even with no save point.
    ok(&mut c, &["CONFIG", "SET", "save", ""]);
    ok(&mut c, &["SET", "c", "3"]);
    std::fs::remove_file(&file).unwrap();
    assert_eq!(
        err(&mut c, &["SHUTDOWN", "SAVE", "NOSAVE"]),
        "ERR syntax error"
    );
    let _ = cmd(&["SHUTDOWN", "SAVE"]).query::<Value>(&mut c);
    let dir = cairn.stop().expect("the data dir");
    let redis = RealRedis::start_with_file(&dir.path().join("dump.rdb"));
    let mut r = redis.client();
    assert_eq!(int(&mut r, &["DBSIZE"]), 3);

    // NOSAVE writes nothing, save points or not.
    let cairn = TestServer::start();
    let mut c = cairn.client();
    ok(&mut c, &["CONFIG", "SET", "save", "3600 1"]);
    ok(&mut c, &["SET", "a", "1"]);
    let _ = cmd(&["SHUTDOWN", "NOSAVE"]).query::<Value>(&mut c);
    let dir = cairn.stop().expect("the data dir");
    assert!(!dir.path().join("dump.rdb").exists());
}

/// FLUSHALL saves the emptied dataset when save points are set, as Redis
/// does (so a restart from the file cannot bring the keys back, and the
/// change count is zero); without save points it leaves the file alone.
#[test]
fn flushall_saves_with_save_points() {
    let cairn = TestServer::start();
    let mut c = cairn.client();
    let file = cairn.path.join("dump.rdb");
    let changes = |c: &mut Connection| info_number(c, "persistence", "rdb_changes_since_last_save");
    ok(&mut c, &["SET", "a", "1"]);
    ok(&mut c, &["SAVE"]);
    ok(&mut c, &["SET", "b", "2"]);
    ok(&mut c, &["FLUSHALL"]);
    assert_ne!(changes(&mut c), 0);
    {
        let redis = RealRedis::start_with_file(&file);
        assert_eq!(int(&mut redis.client(), &["DBSIZE"]), 1);
    }
    ok(
        &mut c,
        &["CONFIG", "SET", "save", "3600 1 300 100 60 10000"],
    );
    ok(&mut c, &["SET", "key", "value"]);
    ok(&mut c, &["FLUSHALL"]);
    assert_eq!(changes(&mut c), 0);
    let redis = RealRedis::start_with_file(&file);
    assert_eq!(int(&mut redis.client(), &["DBSIZE"]), 0);
}

/// rdb_changes_since_last_save moves as Redis's dirty counter does for
/// commands that change one thing or nothing: a bit set to what it is,
/// members already there, an unchanged score, removing nothing and a
/// refused write count nothing; HSET of an unchanged value and SET of the
/// same value count one. Checked against a real redis-server step by step.
#[test]
fn change_count_follows_redis() {
    let cairn = TestServer::start();
    let redis = RealRedis::start();
    let (mut c, mut r) = (cairn.client(), redis.client());
    let steps: &[&[&str]] = &[
        &["SET", "s", "abc"],
        &["SETBIT", "s", "1", "1"],
        &["SETBIT", "s", "1", "0"],
        &["BITFIELD", "s", "SET", "u8", "8", "98"],
        &["BITFIELD", "s", "SET", "u8", "8", "99"],
        &["SET", "s", "abc"],
        &["SADD", "set", "a", "b"],
        &["SADD", "set", "a"],
        &["SREM", "set", "nope"],
        &["SREM", "set", "a"],
        &["ZADD", "z", "1", "m"],
        &["ZADD", "z", "1", "m"],
        &["ZINCRBY", "z", "0", "m"],
        &["HSET", "h", "f", "v"],
        &["HSET", "h", "f", "v"],
        &["HDEL", "h", "nope"],
        &["LPUSH", "s", "x"],
        &["INCR", "s"],
        &["DEL", "missing"],
        &["EXPIRE", "missing", "10"],
        &["INCR", "n"],
    ];
    for step in steps {
        counts_like_redis(&mut c, &mut r, &format!("{step:?}"), |conn| {
            let _ = cmd(step).query::<Value>(conn);
        });
    }
}

/// Commands over several keys, fields or elements count as Redis counts
/// them in rdb_changes_since_last_save: a key for MSET, an element for
/// LPUSH, a deleted key for DEL, FLUSHDB or FLUSHALL, a popped element for
/// a COUNT pop, an entry acknowledged or claimed for XACK and XCLAIM, one
/// change for RENAME, LMOVE and SWAPDB even across shards, SMOVE one or
/// two; commands inside a script or a transaction count as they would
/// alone. Checked against a real redis-server step by step.
#[test]
fn change_count_of_multi_element_commands_follows_redis() {
    let cairn = TestServer::start();
    let redis = RealRedis::start();
    let (mut c, mut r) = (cairn.client(), redis.client());
    // The moves below cross shards, where each side is a step of its own.
    for (from, to) in [("n", "n2"), ("l3", "l4")] {
        assert_ne!(shard_of(from, 2), shard_of(to, 2), "{from} and {to}");
    }
    let steps: &[&[&str]] = &[
        &["MSET", "a", "1", "b", "2", "c", "3"],
        &["MSETNX", "x", "1", "y", "2"],
        &["DEL", "a", "b", "c", "nosuch"],
        &["HSET", "h", "f1", "v1", "f2", "v2"],
        &["HSET", "h", "f1", "v1"],
        &["HDEL", "h", "f1", "f2", "nosuch"],
        &["LPUSH", "l", "a", "b", "c"],
        &["RPOP", "l", "2"],
        &["LPOP", "l"],
        &["ZADD", "z", "1", "a", "2", "b"],
        &["ZREM", "z", "a", "b"],
        &["INCR", "n"],
        &["RENAME", "n", "n2"],
        &["UNLINK", "x", "y"],
        &["RPUSH", "l3", "a", "b", "a", "c", "a"],
        &["LREM", "l3", "0", "a"],
        &["LMOVE", "l3", "l4", "LEFT", "RIGHT"],
        &["RPOPLPUSH", "l3", "l4"],
        &["RPUSH", "l2", "a", "b", "c", "d", "e"],
        &["LTRIM", "l2", "1", "2"],
        &["SADD", "s2", "a", "b", "c", "d", "e"],
        &["SPOP", "s2", "2"],
        &["SADD", "s3", "z"],
        &["SMOVE", "s2", "s3", "z"],
        &["SMOVE", "s3", "s2", "z"],
        &[
            "ZADD", "z2", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e",
        ],
        &["ZREMRANGEBYSCORE", "z2", "1", "2"],
        &["ZREMRANGEBYRANK", "z2", "0", "0"],
        &["ZPOPMIN", "z2", "2"],
        &["XADD", "st", "1-1", "f", "v"],
        &["XADD", "st", "2-1", "f", "v"],
        &["XADD", "st", "3-1", "f", "v"],
        &["XDEL", "st", "1-1", "9-9"],
        &["XTRIM", "st", "MAXLEN", "0"],
        &["ZADD", "zm", "1", "a", "2", "b", "3", "c"],
        &["ZMPOP", "1", "zm", "MIN", "COUNT", "2"],
        &["RPUSH", "lm", "a", "b", "c"],
        &["LMPOP", "1", "lm", "LEFT", "COUNT", "2"],
        &["XADD", "sx", "1-1", "f", "v"],
        &["XGROUP", "CREATE", "sx", "g", "0"],
        &["XACK", "sx", "g", "1-1"],
        &["XADD", "sx", "2-1", "f", "v"],
        &["XADD", "sx", "3-1", "f", "v"],
        &["XCLAIM", "sx", "g", "c1", "0", "1-1", "2-1", "FORCE"],
        &["XCLAIM", "sx", "g", "c1", "0", "1-1", "FORCE"],
        &["XCLAIM", "sx", "g", "c2", "0", "1-1", "2-1", "JUSTID"],
        &["XCLAIM", "sx", "g", "c3", "0", "9-9"],
        &["XAUTOCLAIM", "sx", "g", "c4", "0", "0", "COUNT", "1"],
        &["XDEL", "sx", "1-1"],
        &["XAUTOCLAIM", "sx", "g", "c5", "0", "0"],
        &["PFADD", "hl", "a", "b", "c"],
        &["PFADD", "hl", "a"],
        // A script's commands count each as alone, on one shard too.
        &[
            "EVAL",
            "redis.call('incr', KEYS[1]); redis.call('rpush', KEYS[2], 'a', 'b', 'c')",
            "2",
            "{q}a",
            "{q}l",
        ],
        &["SWAPDB", "0", "1"],
        &["SWAPDB", "0", "1"],
        &["FLUSHDB"],
        &["FLUSHDB"],
        &["MSET", "a", "1", "b", "2", "c", "3"],
        &["FLUSHALL"],
        &["FLUSHALL"],
    ];
    for step in steps {
        counts_like_redis(&mut c, &mut r, &format!("{step:?}"), |conn| {
            let _ = cmd(step).query::<Value>(conn);
        });
    }
    // So do a transaction's, its keys on one shard or on two.
    for keys in [["{z}a", "{z}b", "{z}n"], ["a", "b", "n"]] {
        let exec = |conn: &mut Connection| {
            redis::pipe()
                .atomic()
                .cmd("MSET")
                .arg(keys[0])
                .arg("1")
                .arg(keys[1])
                .arg("2")
                .cmd("INCR")
                .arg(keys[2])
                .query::<Value>(conn)
                .unwrap();
        };
        counts_like_redis(&mut c, &mut r, &format!("MULTI/EXEC over {keys:?}"), exec);
    }
}

/// Runs `run` on cairn (`c`) and on redis-server (`r`) and checks that
/// both counted the same changes for it in rdb_changes_since_last_save.
fn counts_like_redis(
    c: &mut Connection,
    r: &mut Connection,
    what: &str,
    run: impl Fn(&mut Connection),
) {
    let changes = |c: &mut Connection| info_number(c, "persistence", "rdb_changes_since_last_save");
    let (c0, r0) = (changes(c), changes(r));
    run(c);
    run(r);
    assert_eq!(
        changes(c) - c0,
        changes(r) - r0,
        "changes counted by {what}"
    );
}

/// An RDB file saved by redis-server imports into a cairn data directory
/// (`cairn --import`) with every key, value, TTL and library; expired keys
/// stay out.
#[test]
fn redis_rdb_imports_into_cairn() {
    let redis = RealRedis::start();
    let mut r = redis.client();
    fill(&mut r);
    ok(&mut r, &["SET", "short", "lived", "PX", "300"]);
    ok(&mut r, &["SAVE"]);
    std::thread::sleep(Duration::from_millis(400));
    let file = redis.dir().join("dump.rdb");
    let data = tempfile::tempdir().unwrap();
    let mut cfg = cairn::config::Config::defaults();
    cfg.dir = data.path().to_path_buf();
    cfg.shards = 2;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let st = rt
        .block_on(cairn::rdb::import::import(cfg, &file))
        .expect("import");
    assert_eq!((st.keys, st.expired, st.functions), (24, 1, 1));
    drop(rt);
    let cairn = TestServer::start_in(data.path().to_path_buf(), |_| {});
    let mut c = cairn.client();
    q(&mut r, &["DEL", "short"]);
    assert_eq!(everything(&mut c), everything(&mut r));
    assert_eq!(q(&mut c, &["FCALL", "f1", "0"]), Value::Int(1));
}

/// `redis-cli --rdb` fetches cairn's snapshot through SYNC.
#[test]
fn redis_cli_rdb_fetches_a_snapshot() {
    let cairn = TestServer::start();
    let mut c = cairn.client();
    fill(&mut c);
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("fetched.rdb");
    let status = Command::new("redis-cli")
        .args(["-p", &cairn.port.to_string(), "--rdb"])
        .arg(&file)
        .stderr(Stdio::null())
        .status()
        .expect("redis-cli (Debian package redis-tools) must be installed");
    assert!(status.success());
    let redis = RealRedis::start_with_file(&file);
    let mut r = redis.client();
    assert_eq!(everything(&mut r), everything(&mut c));
}

/// Truncated and corrupted files are refused with an error (never a
/// panic), before anything is written.
#[test]
fn damaged_rdb_files_are_refused_whole() {
    let cairn = TestServer::start();
    let mut c = cairn.client();
    fill(&mut c);
    ok(&mut c, &["SAVE"]);
    let good = std::fs::read(cairn.path.join("dump.rdb")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.rdb");
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut refused = 0;
    for i in 0..300 {
        let mut bad = good.clone();
        if i % 2 == 0 {
            bad.truncate((next() % good.len() as u64) as usize);
        } else {
            for _ in 0..1 + next() % 3 {
                let at = (next() % bad.len() as u64) as usize;
                bad[at] ^= 1 << (next() % 8);
            }
        }
        std::fs::write(&path, &bad).unwrap();
        if cairn::rdb::import::check(&path).is_err() {
            refused += 1;
        }
    }
    // Every truncation and every flip is caught (by the structure or the
    // checksum).
    assert_eq!(refused, 300);
    let data = tempfile::tempdir().unwrap();
    let mut cfg = cairn::config::Config::defaults();
    cfg.dir = data.path().to_path_buf();
    let rt = tokio::runtime::Runtime::new().unwrap();
    std::fs::write(&path, &good[..good.len() - 20]).unwrap();
    assert!(rt.block_on(cairn::rdb::import::import(cfg, &path)).is_err());
    drop(rt);
    let empty = TestServer::start_in(data.path().to_path_buf(), |_| {});
    assert_eq!(int(&mut empty.client(), &["DBSIZE"]), 0);
}

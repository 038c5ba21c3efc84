//! cairn as a replica of a real redis-server 7.0 (REPLICAOF): the full copy
//! (diskless and from a file), the stream that follows (transactions,
//! databases, scripts' effects, functions, expiry), acknowledgements
//! (WAIT on the primary), a broken link continuing where it stopped, and
//! REPLICAOF NO ONE. What a replica answers its own clients is recorded
//! from Redis in tests/compat/cases/replication.txt.

mod common;

use std::time::{Duration, Instant};

use common::real_redis::RealRedis;
use common::{bulk, cmd, int, ok, q, TestServer};
use redis::{Connection, Value};

/// Polls `check` until it holds (10 s at most).
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A field of an INFO section, as text.
fn info_field(c: &mut Connection, section: &str, field: &str) -> String {
    let info: String = cmd(&["INFO", section]).query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("INFO {section} has no {field}:\n{info}"))
        .trim()
        .to_string()
}

/// ROLE's link state (a replica's fourth element).
fn link_state(c: &mut Connection) -> String {
    match q(c, &["ROLE"]) {
        Value::Array(items) if items.len() == 5 => common::text(items[3].clone()),
        other => panic!("not a replica's ROLE: {other:?}"),
    }
}

/// Makes `replica` follow `primary` and waits for the link to be up.
fn follow(replica: &mut Connection, primary: &RealRedis) {
    ok(
        replica,
        &["REPLICAOF", "127.0.0.1", &primary.port.to_string()],
    );
    eventually("the link to come up", || link_state(replica) == "connected");
}

/// A primary whose full copies start at once (Redis waits 5 s for more
/// replicas before a diskless one).
fn primary(diskless: bool) -> (RealRedis, Connection) {
    let redis = RealRedis::start();
    let mut p = redis.client();
    let yes = if diskless { "yes" } else { "no" };
    ok(&mut p, &["CONFIG", "SET", "repl-diskless-sync", yes]);
    ok(&mut p, &["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
    (redis, p)
}

/// Waits until the replica has acknowledged everything the primary sent
/// (WAIT), then until the offsets agree.
fn caught_up(p: &mut Connection, c: &mut Connection) {
    assert_eq!(
        int(p, &["WAIT", "1", "5000"]),
        1,
        "the replica acknowledges"
    );
    let want = info_field(p, "replication", "master_repl_offset");
    eventually("the offsets to agree", || {
        info_field(c, "replication", "master_repl_offset") == want
    });
}

#[test]
fn a_replica_copies_its_primary_then_follows_its_stream() {
    for diskless in [true, false] {
        let (redis, mut p) = primary(diskless);
        ok(&mut p, &["SET", "s", "v"]);
        q(&mut p, &["RPUSH", "l", "a", "b", "c"]);
        q(&mut p, &["HSET", "h", "f", "1"]);
        q(&mut p, &["ZADD", "z", "1", "a", "2", "b"]);
        q(&mut p, &["XADD", "x", "1-1", "f", "v"]);
        ok(&mut p, &["SET", "t", "v", "EX", "1000"]);
        ok(&mut p, &["SET", "gone", "v", "PX", "1"]);
        q(&mut p, &["FUNCTION", "LOAD", "#!lua name=lib\nredis.register_function{function_name='one', callback=function() return 1 end, flags={'no-writes'}}"]);
        ok(&mut p, &["SELECT", "5"]);
        ok(&mut p, &["SET", "five", "5"]);
        ok(&mut p, &["SELECT", "0"]);

        let cairn = TestServer::start();
        let mut c = cairn.client();
        ok(&mut c, &["SET", "local", "dropped by the copy"]);
        follow(&mut c, &redis);
        assert_eq!(q(&mut c, &["GET", "s"]), bulk("v"));
        assert_eq!(q(&mut c, &["GET", "local"]), Value::Nil);
        assert_eq!(q(&mut c, &["GET", "gone"]), Value::Nil);
        assert_eq!(
            q(&mut c, &["LRANGE", "l", "0", "-1"]),
            Value::Array(vec![bulk("a"), bulk("b"), bulk("c")])
        );
        assert_eq!(q(&mut c, &["HGET", "h", "f"]), bulk("1"));
        assert_eq!(q(&mut c, &["ZSCORE", "z", "b"]), bulk("2"));
        assert_eq!(int(&mut c, &["XLEN", "x"]), 1);
        assert!((990..=1000).contains(&int(&mut c, &["TTL", "t"])));
        assert_eq!(int(&mut c, &["FCALL", "one", "0"]), 1);
        ok(&mut c, &["SELECT", "5"]);
        assert_eq!(q(&mut c, &["GET", "five"]), bulk("5"));
        ok(&mut c, &["SELECT", "0"]);

        // The stream: a transaction, another database, a script's
        // effects, a function's removal, expiry and deletion.
        assert_eq!(int(&mut p, &["INCR", "n"]), 1);
        let tx: Value = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg("a")
            .arg("1")
            .cmd("LPUSH")
            .arg("l")
            .arg("z")
            .query(&mut p)
            .unwrap();
        assert_eq!(tx, Value::Array(vec![Value::Okay, Value::Int(4)]));
        ok(&mut p, &["SELECT", "5"]);
        q(&mut p, &["DEL", "five"]);
        ok(&mut p, &["SET", "later", "x"]);
        ok(&mut p, &["SELECT", "0"]);
        q(
            &mut p,
            &[
                "EVAL",
                "redis.call('set', 'e', 'from a script') return 1",
                "0",
            ],
        );
        q(&mut p, &["EXPIRE", "s", "100"]);
        ok(&mut p, &["FUNCTION", "DELETE", "lib"]);
        caught_up(&mut p, &mut c);
        assert_eq!(q(&mut c, &["GET", "n"]), bulk("1"));
        assert_eq!(q(&mut c, &["GET", "a"]), bulk("1"));
        assert_eq!(q(&mut c, &["LINDEX", "l", "0"]), bulk("z"));
        assert_eq!(q(&mut c, &["GET", "e"]), bulk("from a script"));
        assert!((90..=100).contains(&int(&mut c, &["TTL", "s"])));
        assert_eq!(
            common::err(&mut c, &["FCALL", "one", "0"]),
            "ERR Function not found"
        );
        ok(&mut c, &["SELECT", "5"]);
        assert_eq!(q(&mut c, &["GET", "five"]), Value::Nil);
        assert_eq!(q(&mut c, &["GET", "later"]), bulk("x"));

        // What the replica reports, next to what its primary does.
        assert_eq!(info_field(&mut c, "replication", "role"), "slave");
        assert_eq!(
            info_field(&mut c, "replication", "master_link_status"),
            "up"
        );
        assert_eq!(
            info_field(&mut c, "replication", "master_replid"),
            info_field(&mut p, "replication", "master_replid")
        );
        assert_eq!(
            info_field(&mut p, "replication", "slave0")
                .split(',')
                .nth(2),
            Some("state=online")
        );
        assert!(common::text(q(&mut c, &["CLIENT", "LIST"])).contains(" flags=M "));
        let hello = q(&mut c, &["HELLO", "2"]);
        let Value::Array(pairs) = hello else {
            panic!("HELLO: {hello:?}");
        };
        let role = pairs.iter().position(|v| *v == bulk("role")).unwrap();
        assert_eq!(pairs[role + 1], bulk("replica"));
    }
}

#[test]
fn a_broken_link_continues_where_it_stopped() {
    let (redis, mut p) = primary(true);
    let cairn = TestServer::start();
    let mut c = cairn.client();
    follow(&mut c, &redis);
    ok(&mut p, &["SELECT", "3"]);
    ok(&mut p, &["SET", "a", "1"]);
    caught_up(&mut p, &mut c);

    // The connection the stream comes through is killed; the primary goes
    // on in database 3 without selecting it again.
    let list = common::text(q(&mut c, &["CLIENT", "LIST", "TYPE", "master"]));
    assert_eq!(list.lines().count(), 1);
    assert!(list.contains(" flags=M "), "{list}");
    assert_eq!(int(&mut c, &["CLIENT", "KILL", "TYPE", "master"]), 1);
    ok(&mut p, &["SET", "b", "2"]);
    eventually("the link to come back", || {
        link_state(&mut c) == "connected"
    });
    caught_up(&mut p, &mut c);
    ok(&mut c, &["SELECT", "3"]);
    assert_eq!(q(&mut c, &["GET", "a"]), bulk("1"));
    assert_eq!(q(&mut c, &["GET", "b"]), bulk("2"));
    assert_eq!(info_field(&mut p, "stats", "sync_full"), "1");
    assert_eq!(info_field(&mut p, "stats", "sync_partial_ok"), "1");

    // A link that cannot be made is retried, and reported down.
    drop(redis);
    eventually("the link to go down", || link_state(&mut c) != "connected");
    assert_eq!(
        info_field(&mut c, "replication", "master_link_status"),
        "down"
    );
    let down: i64 = info_field(&mut c, "replication", "master_link_down_since_seconds")
        .parse()
        .unwrap();
    assert!(down >= 0);
    assert_eq!(q(&mut c, &["GET", "a"]), bulk("1"), "stale data is served");
    ok(&mut c, &["CONFIG", "SET", "replica-serve-stale-data", "no"]);
    assert_eq!(
        common::err(&mut c, &["GET", "a"]),
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
    );
    assert!(
        !common::text(q(&mut c, &["INFO", "server"])).is_empty(),
        "INFO is allowed"
    );
}

#[test]
fn replicaof_no_one_keeps_the_data_and_takes_writes() {
    let (redis, mut p) = primary(true);
    ok(&mut p, &["SET", "k", "v"]);
    let cairn = TestServer::start();
    let mut c = cairn.client();
    follow(&mut c, &redis);
    ok(&mut p, &["SET", "k2", "v2"]);
    caught_up(&mut p, &mut c);
    let primary_id = info_field(&mut p, "replication", "master_replid");
    let offset = info_field(&mut c, "replication", "master_repl_offset");
    assert_eq!(
        common::err(&mut c, &["SET", "k", "w"]),
        "READONLY You can't write against a read only replica."
    );

    ok(&mut c, &["REPLICAOF", "NO", "ONE"]);
    assert_eq!(
        q(&mut c, &["ROLE"]),
        Value::Array(vec![
            bulk("master"),
            Value::Int(offset.parse().unwrap()),
            Value::Array(vec![]),
        ])
    );
    assert_eq!(q(&mut c, &["GET", "k2"]), bulk("v2"));
    ok(&mut c, &["SET", "k", "w"]);
    assert_eq!(
        info_field(&mut c, "replication", "master_replid2"),
        primary_id
    );
    assert_ne!(
        info_field(&mut c, "replication", "master_replid"),
        primary_id
    );
    assert_eq!(
        info_field(&mut c, "replication", "second_repl_offset"),
        (offset.parse::<i64>().unwrap() + 1).to_string()
    );
    // The primary no longer counts it.
    eventually("the primary to let go of the replica", || {
        info_field(&mut p, "replication", "connected_slaves") == "0"
    });
    ok(&mut p, &["SET", "k2", "changed"]);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(q(&mut c, &["GET", "k2"]), bulk("v2"));
}

#[test]
fn turning_replica_ends_blocked_commands() {
    let (redis, _p) = primary(true);
    let cairn = TestServer::start();
    let mut c = cairn.client();
    let blocked: Vec<_> = [vec!["BLPOP", "nokey", "0"], vec!["WAIT", "1", "0"]]
        .into_iter()
        .map(|args| {
            let mut b = cairn.client();
            std::thread::spawn(move || {
                let e = common::err(&mut b, &args);
                // Closed after the reply, as Redis closes them.
                (e, cmd(&["PING"]).query::<String>(&mut b).is_err())
            })
        })
        .collect();
    eventually("both clients to block", || {
        info_field(&mut c, "clients", "blocked_clients") == "2"
    });
    follow(&mut c, &redis);
    for b in blocked {
        let (e, closed) = b.join().unwrap();
        assert_eq!(
            e,
            "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"
        );
        assert!(closed, "a force-unblocked client is closed");
    }
}

#[test]
fn the_stream_waits_behind_a_busy_script() {
    let (redis, mut p) = primary(true);
    let cairn = TestServer::start();
    let mut c = cairn.client();
    follow(&mut c, &redis);
    ok(&mut c, &["CONFIG", "SET", "busy-reply-threshold", "50"]);
    // A read-only script (a replica's clients may run one) that spins for
    // 600 ms: past the threshold other clients are answered BUSY, but the
    // primary's writes must wait and then apply, not be refused.
    let mut spinner = cairn.client();
    let spin = std::thread::spawn(move || {
        let script = "#!lua flags=no-writes\nlocal t = redis.call('TIME')\n\
                      local start = t[1] * 1000000 + t[2]\n\
                      while true do\n\
                        local n = redis.call('TIME')\n\
                        if n[1] * 1000000 + n[2] - start > 600000 then return 1 end\n\
                      end";
        int(&mut spinner, &["EVAL", script, "0"])
    });
    let mut other = cairn.client();
    eventually(
        "the script to be busy",
        || matches!(cmd(&["PING"]).query::<String>(&mut other), Err(e) if e.code() == Some("BUSY")),
    );
    ok(&mut p, &["SET", "during", "busy"]);
    assert_eq!(spin.join().unwrap(), 1);
    caught_up(&mut p, &mut c);
    assert_eq!(q(&mut c, &["GET", "during"]), bulk("busy"));
}

/// A primary played by the test: it answers the handshake, sends an empty
/// copy and then whatever commands the test writes on the returned stream.
/// It lets a test send what a real primary sends only under clock skew.
fn scripted_primary(replica: &mut Connection) -> std::net::TcpStream {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    ok(replica, &["REPLICAOF", "127.0.0.1", &port]);
    let (stream, _) = listener.accept().unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream.try_clone().unwrap();
    // Each handshake command is a RESP array of bulk strings.
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let n: usize = line.trim_end()[1..].parse().unwrap();
        let mut words = Vec::new();
        for _ in 0..n {
            let mut len = String::new();
            reader.read_line(&mut len).unwrap();
            let len: usize = len.trim_end()[1..].parse().unwrap();
            let mut word = vec![0; len + 2];
            reader.read_exact(&mut word).unwrap();
            word.truncate(len);
            words.push(String::from_utf8(word).unwrap().to_ascii_uppercase());
        }
        match words[0].as_str() {
            "PING" => out.write_all(b"+PONG\r\n").unwrap(),
            "PSYNC" => break,
            _ => out.write_all(b"+OK\r\n").unwrap(),
        }
    }
    // An RDB of no keys: the header, the end mark, the CRC of both.
    let mut rdb = b"REDIS0009\xff".to_vec();
    let crc = cairn::util::rdb::crc64(&rdb);
    rdb.extend_from_slice(&crc.to_le_bytes());
    let id = "0123456789abcdef0123456789abcdef01234567";
    write!(out, "+FULLRESYNC {id} 0\r\n${}\r\n", rdb.len()).unwrap();
    out.write_all(&rdb).unwrap();
    eventually("the copy to load", || link_state(replica) == "connected");
    stream
}

/// Only the primary expires keys on a replica: a key past its time on the
/// replica's clock reads as missing to clients but stays (the reaper
/// leaves it), and the primary's commands still find it, as a primary
/// whose clock is behind may send a PERSIST for it; its DEL removes it.
#[test]
fn a_replica_leaves_expiry_to_its_primary() {
    use std::io::Write;
    let cairn = TestServer::start();
    let mut c = cairn.client();
    let mut primary = scripted_primary(&mut c);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let at = (now_ms + 100).to_string();
    let mut stream = Vec::new();
    cairn::protocol::encode_command(&mut stream, &[b"SELECT", b"0"]);
    for key in ["kept", "deleted", "grown", "left"] {
        cairn::protocol::encode_command(
            &mut stream,
            &[b"SET", key.as_bytes(), b"v", b"PXAT", at.as_bytes()],
        );
    }
    primary.write_all(&stream).unwrap();
    eventually("the writes to arrive", || int(&mut c, &["DBSIZE"]) == 4);
    // Several reaper ticks after the keys' time.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(q(&mut c, &["GET", "kept"]), Value::Nil);
    assert_eq!(int(&mut c, &["EXISTS", "kept", "deleted"]), 0);
    assert_eq!(
        int(&mut c, &["DBSIZE"]),
        4,
        "expired keys wait for the primary"
    );
    let mut stream = Vec::new();
    cairn::protocol::encode_command(&mut stream, &[b"PERSIST", b"kept"]);
    cairn::protocol::encode_command(&mut stream, &[b"DEL", b"deleted"]);
    // The APPEND finds "grown" alive, as the primary did.
    cairn::protocol::encode_command(&mut stream, &[b"APPEND", b"grown", b"w"]);
    cairn::protocol::encode_command(&mut stream, &[b"PERSIST", b"grown"]);
    primary.write_all(&stream).unwrap();
    eventually("the DEL to arrive", || int(&mut c, &["DBSIZE"]) == 3);
    assert_eq!(q(&mut c, &["GET", "kept"]), bulk("v"));
    assert_eq!(int(&mut c, &["TTL", "kept"]), -1);
    assert_eq!(q(&mut c, &["GET", "grown"]), bulk("vw"));
    // A promoted replica expires keys itself.
    ok(&mut c, &["REPLICAOF", "NO", "ONE"]);
    eventually("the promoted server to expire the key", || {
        int(&mut c, &["DBSIZE"]) == 2
    });
    drop(primary);
}

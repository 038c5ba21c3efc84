//! Transactions with several clients: optimistic locking under contention,
//! isolation of a cross-shard EXEC from concurrent readers, WATCH marked by
//! other clients' writes (a blocking pop, another database, expiry), and a
//! client killed inside MULTI. Single-connection replies are pinned by the
//! compatibility transcript `tests/compat/cases/multi.txt`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::waiting::{keys_on_both_shards, Pending};
use common::{cmd, int, ok, q, read_exactly, TestServer};
use redis::{Connection, Value};

/// `WATCH key; GET key; MULTI; SET key n+1; EXEC`, retried until EXEC
/// succeeds; returns how many attempts failed.
fn watched_increment(c: &mut Connection, key: &str) -> u32 {
    let mut retries = 0;
    loop {
        ok(c, &["WATCH", key]);
        let v: Option<i64> = cmd(&["GET", key]).query(c).unwrap();
        let next = (v.unwrap_or(0) + 1).to_string();
        ok(c, &["MULTI"]);
        assert_eq!(
            q(c, &["SET", key, &next]),
            Value::SimpleString("QUEUED".into())
        );
        match q(c, &["EXEC"]) {
            Value::Array(items) => {
                assert_eq!(items, vec![Value::Okay]);
                return retries;
            }
            Value::Nil => retries += 1,
            other => panic!("EXEC answered {other:?}"),
        }
    }
}

/// redis-py-style optimistic locking: several clients increment one
/// counter through WATCH/MULTI/EXEC; every increment lands exactly once.
#[test]
fn optimistic_locking_counts_exactly_under_contention() {
    let srv = TestServer::start();
    const CLIENTS: usize = 4;
    const EACH: usize = 60;
    let workers: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let mut c = srv.client();
            std::thread::spawn(move || {
                (0..EACH)
                    .map(|_| watched_increment(&mut c, "counter"))
                    .sum::<u32>()
            })
        })
        .collect();
    let retries: u32 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let mut c = srv.client();
    assert_eq!(int(&mut c, &["GET", "counter"]), (CLIENTS * EACH) as i64);
    eprintln!("{retries} EXECs failed on a modified watched key and were retried");
}

/// A transaction writing one key on each shard is never seen half done by
/// a reader of both keys, whether it reads them with MGET, inside its own
/// transaction, or one after the other.
#[test]
fn a_cross_shard_exec_is_never_seen_half_done() {
    let srv = TestServer::start();
    let (a, b) = keys_on_both_shards("pair");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (a, b, stop) = (a.clone(), b.clone(), stop.clone());
        let mut c = srv.client();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) && i < 3000 {
                i += 1;
                let v = i.to_string();
                let r: Value = redis::pipe()
                    .atomic()
                    .cmd("SET")
                    .arg(&a)
                    .arg(&v)
                    .cmd("SET")
                    .arg(&b)
                    .arg(&v)
                    .query(&mut c)
                    .unwrap();
                assert_eq!(r, Value::Array(vec![Value::Okay, Value::Okay]));
            }
            i
        })
    };
    let mut c = srv.client();
    let mut seen = 0;
    let get = |c: &mut Connection, k: &str| -> u64 {
        cmd(&["GET", k])
            .query::<Option<u64>>(c)
            .unwrap()
            .unwrap_or(0)
    };
    for round in 0..1500 {
        let (x, y): (Option<u64>, Option<u64>) = match round % 3 {
            0 => cmd(&["MGET", &a, &b]).query(&mut c).unwrap(),
            1 => redis::pipe()
                .atomic()
                .cmd("GET")
                .arg(&a)
                .cmd("GET")
                .arg(&b)
                .query(&mut c)
                .unwrap(),
            _ => {
                // One key, then the other on the other shard: once one
                // shard's part is seen, the other's must be there too.
                let (first, then) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
                let (x, y) = (get(&mut c, first), get(&mut c, then));
                assert!(y >= x, "read {first}={x}, then {then}={y}");
                continue;
            }
        };
        assert_eq!(x, y, "read {a}={x:?} but {b}={y:?}");
        seen += u64::from(x.is_some());
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().unwrap();
    assert!(
        seen > 0 && writes > 0,
        "the reader never overlapped the writer"
    );
}

/// WATCH is marked by another client's write to the key, by a blocking
/// pop that serves a third client, and by expiry; a write to the same
/// name in another database, or to another key, does not mark it.
#[test]
fn watch_sees_other_clients_writes() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let mut other = srv.client();
    let exec_one = |c: &mut Connection, key: &str| -> Value {
        ok(c, &["MULTI"]);
        q(c, &["SET", key, "mine"]);
        q(c, &["EXEC"])
    };

    ok(&mut c, &["WATCH", "k"]);
    ok(&mut other, &["SET", "k", "theirs"]);
    assert_eq!(exec_one(&mut c, "k"), Value::Nil);

    ok(&mut c, &["WATCH", "k", "k2"]);
    ok(&mut other, &["SELECT", "1"]);
    ok(&mut other, &["SET", "k", "elsewhere"]);
    ok(&mut other, &["SELECT", "0"]);
    ok(&mut other, &["SET", "unwatched", "x"]);
    assert_eq!(exec_one(&mut c, "k"), Value::Array(vec![Value::Okay]));

    // A pop that serves a blocked client modifies the list.
    ok(&mut c, &["WATCH", "list"]);
    let popper = Pending::blocked(&srv, &mut other, &["BLPOP", "list", "0"], 0);
    assert_eq!(int(&mut other, &["RPUSH", "list", "x"]), 1);
    assert_eq!(
        popper.reply(),
        Value::Array(vec![common::bulk("list"), common::bulk("x")])
    );
    assert_eq!(exec_one(&mut c, "list"), Value::Nil);

    // The reaper deleting an expired key marks it too.
    ok(&mut other, &["SET", "short", "v", "PX", "50"]);
    ok(&mut c, &["WATCH", "short"]);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(int(&mut other, &["EXISTS", "short"]), 0);
    assert_eq!(exec_one(&mut c, "short"), Value::Nil);

    // Keys on two shards: a write to either marks the watch.
    let (x, y) = keys_on_both_shards("w");
    ok(&mut c, &["WATCH", &x, &y]);
    ok(&mut other, &["SET", &y, "1"]);
    assert_eq!(exec_one(&mut c, &x), Value::Nil);
    ok(&mut c, &["WATCH", &x, &y]);
    assert_eq!(exec_one(&mut c, &x), Value::Array(vec![Value::Okay]));
}

/// A client killed while queueing a transaction leaves nothing behind: its
/// commands never run and its watches are gone.
#[test]
fn a_killed_client_in_multi_leaves_nothing_behind() {
    let srv = TestServer::start();
    let mut victim = srv.client();
    let mut admin = srv.client();
    let id = int(&mut victim, &["CLIENT", "ID"]).to_string();
    ok(&mut victim, &["WATCH", "k"]);
    ok(&mut victim, &["MULTI"]);
    q(&mut victim, &["SET", "k", "never"]);
    assert_eq!(int(&mut admin, &["CLIENT", "KILL", "ID", &id]), 1);
    assert!(cmd(&["EXEC"]).query::<Value>(&mut victim).is_err());
    assert_eq!(q(&mut admin, &["GET", "k"]), Value::Nil);
    // Nothing of the dead client's state is left to mark or be marked.
    ok(&mut admin, &["WATCH", "k"]);
    ok(&mut admin, &["MULTI"]);
    q(&mut admin, &["SET", "k", "v"]);
    assert_eq!(q(&mut admin, &["EXEC"]), Value::Array(vec![Value::Okay]));
    assert_eq!(q(&mut admin, &["GET", "k"]), common::bulk("v"));
}

/// CLIENT LIST shows a client in MULTI (`x`, and how many commands it has
/// queued) and a client whose watched key changed (`d`), as Redis does.
#[test]
fn client_list_shows_transactions() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let mut other = srv.client();
    let id = int(&mut c, &["CLIENT", "ID"]).to_string();
    let line = |other: &mut Connection| -> String {
        cmd(&["CLIENT", "LIST", "ID", &id]).query(other).unwrap()
    };
    let field = |line: &str, name: &str| -> String {
        line.split(' ')
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .unwrap()
            .trim()
            .to_string()
    };
    let l = line(&mut other);
    assert_eq!(
        (field(&l, "flags"), field(&l, "multi")),
        ("N".into(), "-1".into())
    );
    ok(&mut c, &["WATCH", "k"]);
    ok(&mut c, &["MULTI"]);
    q(&mut c, &["GET", "k"]);
    q(&mut c, &["GET", "k"]);
    let l = line(&mut other);
    assert_eq!(
        (field(&l, "flags"), field(&l, "multi")),
        ("x".into(), "2".into())
    );
    ok(&mut other, &["SET", "k", "1"]);
    let l = line(&mut other);
    assert_eq!(field(&l, "flags"), "xd");
    assert_eq!(q(&mut c, &["EXEC"]), Value::Nil);
    let l = line(&mut other);
    assert_eq!(
        (field(&l, "flags"), field(&l, "multi")),
        ("N".into(), "-1".into())
    );
}

/// A client's own write pipelined just before its WATCH of keys on two
/// shards happens before the watch: it does not fail the EXEC.
#[test]
fn a_write_pipelined_before_watch_does_not_mark_it() {
    use std::io::Write;
    let srv = TestServer::start();
    let (a, b) = keys_on_both_shards("pw");
    let mut raw = srv.tcp();
    let req = format!("SET {a} 1\r\nWATCH {a} {b}\r\nMULTI\r\nSET {a} 2\r\nEXEC\r\n");
    raw.write_all(req.as_bytes()).unwrap();
    let want = b"+OK\r\n+OK\r\n+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n";
    read_exactly(&mut raw, want);
}

/// A pipeline of one-shard transactions on keys of both shards, with
/// ready replies (`+QUEUED`, `+PONG`, an error) between their EXECs,
/// which cairn sends as one squashed group: every reply comes back in
/// order, as Redis 7.0.15 sent these bytes for this pipeline.
#[test]
fn pipelined_transactions_across_shards_reply_in_order() {
    use std::io::Write;
    let srv = TestServer::start();
    let (a, b) = keys_on_both_shards("tx");
    let mut raw = srv.tcp();
    let req = format!(
        "MULTI\r\nSET {a} 1\r\nINCR {a}\r\nEXEC\r\nPING\r\n\
         MULTI\r\nSET {b} 5\r\nINCR {b}\r\nEXEC\r\nNOSUCH x\r\n\
         MULTI\r\nINCR {a}\r\nINCRBY {a} x\r\nEXEC\r\n\
         MULTI\r\nINCR {b}\r\nEXEC\r\nMGET {a} {b}\r\n"
    );
    raw.write_all(req.as_bytes()).unwrap();
    let want: &[u8] = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n:2\r\n+PONG\r\n\
        +OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n:6\r\n\
        -ERR unknown command 'NOSUCH', with args beginning with: 'x' \r\n\
        +OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:3\r\n-ERR value is not an integer or out of range\r\n\
        +OK\r\n+QUEUED\r\n*1\r\n:7\r\n*2\r\n$1\r\n3\r\n$1\r\n7\r\n";
    read_exactly(&mut raw, want);
}

/// Commands whose work waits on the shards (a FUNCTION change stores the
/// libraries on shard 0; CLIENT TRACKING ON waits for every shard's running
/// transaction) run inside a transaction's own hold of its shards. As jobs
/// of their own they waited for the transaction, which waited for them: the
/// EXEC never answered and every later command over those shards hung.
#[test]
fn exec_of_commands_that_wait_on_the_shards_finishes() {
    let server = TestServer::start();
    let mut c = server.client();
    let (a, b) = keys_on_both_shards("held");
    ok(&mut c, &["MULTI"]);
    for args in [
        vec!["SET", &a, "1"],
        vec!["SET", &b, "1"],
        vec![
            "FUNCTION",
            "LOAD",
            "#!lua name=lib\nredis.register_function('f', function() return 7 end)",
        ],
        vec!["FUNCTION", "DELETE", "lib"],
        vec!["FUNCTION", "FLUSH"],
        vec!["CLIENT", "TRACKING", "ON"],
    ] {
        assert_eq!(q(&mut c, &args), Value::SimpleString("QUEUED".into()));
    }
    // The client's read timeout (10 s) fails the test if EXEC hangs.
    assert_eq!(
        q(&mut c, &["EXEC"]),
        Value::Array(vec![
            Value::Okay,
            Value::Okay,
            Value::BulkString(b"lib".to_vec()),
            Value::Okay,
            Value::Okay,
            Value::Okay,
        ])
    );
    let mut other = server.client();
    ok(&mut other, &["FLUSHALL"]);
    assert_eq!(q(&mut other, &["FUNCTION", "LIST"]), Value::Array(vec![]));
}

//! Blocking pops with real clients: BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP
//! BZPOPMIN BZPOPMAX BZMPOP waking on pushes from other connections, timing
//! out, first-blocked-first-served order, no element lost or served twice,
//! disconnects and CLIENT KILL while blocked, and keys on different shards.
//! Expected behaviour is what Redis 7.0 does (each case was checked against
//! redis-server 7.0.15). The single-connection replies (shapes, errors,
//! short timeouts, RESP3) are in tests/compat/cases/blocking.txt.
//!
//! Every wait is bounded: replies are awaited with a deadline, clients have
//! read timeouts, and "still waiting" is checked for a few hundred ms.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::waiting::{
    blocked_clients, keys_on_both_shards, raw_expect, resp, text, wait_blocked, Pending,
};
use common::{arr, bulk, cmd, int, q, shard_of, TestServer};
use redis::{Connection, Value};

/// `[key, [e1, e2...]]` (BLMPOP).
fn mpop_list(key: &str, elements: &[&str]) -> Value {
    Value::Array(vec![bulk(key), arr(elements)])
}

/// `[key, [[member, score]...]]` (BZMPOP).
fn mpop_zset(key: &str, pairs: &[(&str, &str)]) -> Value {
    Value::Array(vec![
        bulk(key),
        Value::Array(pairs.iter().map(|(m, s)| arr(&[m, s])).collect()),
    ])
}

/// Two key names starting with `prefix` on the same shard.
fn keys_on_same_shard(prefix: &str) -> (String, String) {
    let first = format!("{prefix}0");
    let shard = shard_of(&first, 2);
    let second = (1..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| shard_of(k, 2) == shard)
        .unwrap();
    (first, second)
}

/// Reads one `:<n>\r\n` reply.
fn raw_int(s: &mut TcpStream) -> i64 {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        s.read_exact(&mut b).expect("reply line");
        line.push(b[0]);
    }
    let l = String::from_utf8(line).unwrap();
    l.trim_end()
        .strip_prefix(':')
        .unwrap_or_else(|| panic!("not an integer reply: {l:?}"))
        .parse()
        .unwrap()
}

/// A small deterministic pseudo-random generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---------------------------------------------------------------------------
// Waking and timing out
// ---------------------------------------------------------------------------

// Pins: timeout 0 waits for as long as it takes (here well past any short
// timeout) and is served by a push from another connection, for the list
// and the sorted-set forms.
#[test]
fn timeout_zero_waits_until_a_push() {
    let srv = TestServer::start();
    let mut admin = srv.client();

    let p = Pending::blocked(&srv, &mut admin, &["BLPOP", "k", "0"], 0);
    std::thread::sleep(Duration::from_millis(500));
    p.assert_waiting();
    assert_eq!(int(&mut admin, &["RPUSH", "k", "v"]), 1);
    assert_eq!(p.reply(), arr(&["k", "v"]));
    assert_eq!(int(&mut admin, &["EXISTS", "k"]), 0);
    wait_blocked(&mut admin, 0);

    let p = Pending::blocked(&srv, &mut admin, &["BRPOP", "k", "0"], 0);
    p.assert_waiting();
    assert_eq!(int(&mut admin, &["LPUSH", "k", "a", "b"]), 2);
    assert_eq!(p.reply(), arr(&["k", "a"]));
    assert_eq!(q(&mut admin, &["LRANGE", "k", "0", "-1"]), arr(&["b"]));

    let p = Pending::blocked(&srv, &mut admin, &["BZPOPMAX", "z", "0"], 0);
    p.assert_waiting();
    assert_eq!(int(&mut admin, &["ZADD", "z", "1", "a", "2", "b"]), 2);
    assert_eq!(p.reply(), arr(&["z", "b", "2"]));
    assert_eq!(int(&mut admin, &["ZCARD", "z"]), 1);
    wait_blocked(&mut admin, 0);
}

/// Two clients blocked on one list, the older one moving onto a key of
/// another type (Redis's list unit, "BRPOPLPUSH with multiple blocked
/// clients"): the push answers the older one with WRONGTYPE, leaving the
/// element, and serves the younger one, which is not the key's oldest
/// waiter but must be woken all the same.
#[test]
fn a_wrong_type_destination_answers_its_client_and_the_next_is_served() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    assert_eq!(q(&mut admin, &["SET", "target1{t}", "nolist"]), Value::Okay);
    let first = Pending::blocked(
        &srv,
        &mut admin,
        &["BRPOPLPUSH", "blist{t}", "target1{t}", "0"],
        0,
    );
    let second = Pending::blocked(
        &srv,
        &mut admin,
        &["BRPOPLPUSH", "blist{t}", "target2{t}", "0"],
        1,
    );
    assert_eq!(int(&mut admin, &["LPUSH", "blist{t}", "foo"]), 1);
    assert!(first.error().starts_with("WRONGTYPE"));
    assert_eq!(second.reply(), bulk("foo"));
    assert_eq!(
        q(&mut admin, &["LRANGE", "target2{t}", "0", "-1"]),
        arr(&["foo"])
    );
    assert_eq!(int(&mut admin, &["EXISTS", "blist{t}"]), 0);
    wait_blocked(&mut admin, 0);
}

// Pins: a fractional timeout (0.2 s) ends with the null reply after about
// that long, for every blocking command, and leaves no blocked client and
// no key behind.
#[test]
fn fractional_timeout_replies_null() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let cases: &[&[&str]] = &[
        &["BLPOP", "k", "0.2"],
        &["BRPOP", "k", "other", "0.2"],
        &["BLMOVE", "k", "dst", "LEFT", "RIGHT", "0.2"],
        &["BRPOPLPUSH", "k", "dst", "0.2"],
        &["BLMPOP", "0.2", "2", "k", "other", "LEFT", "COUNT", "2"],
        &["BZPOPMIN", "z", "0.2"],
        &["BZPOPMAX", "z", "other", "0.2"],
        &["BZMPOP", "0.2", "1", "z", "MAX", "COUNT", "3"],
    ];
    // All at once: the waits overlap, so this takes ~0.2 s, not 1.6 s.
    let pending: Vec<Pending> = cases.iter().map(|c| Pending::start(&srv, c)).collect();
    for p in &pending {
        let (v, took) = p.reply_timed();
        assert_eq!(v, Value::Nil, "{:?}", p.args);
        assert!(
            took >= Duration::from_millis(150) && took <= Duration::from_secs(2),
            "{:?} timed out after {took:?}",
            p.args
        );
    }
    wait_blocked(&mut admin, 0);
    assert_eq!(int(&mut admin, &["DBSIZE"]), 0);
}

// Pins: in RESP3 the timed-out reply is the null `_` (BLPOP, BLMOVE,
// BZPOPMIN), and a woken BZPOPMIN carries its score as a double.
#[test]
fn resp3_timeout_is_null_and_scores_are_doubles() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let mut s = srv.tcp();
    s.write_all(&resp(&["HELLO", "3"])).unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
    assert_eq!(b[0], b'%', "HELLO 3 replies with a map");
    // Drain the rest of the HELLO map by pinging: everything up to +PONG.
    s.write_all(&resp(&["PING"])).unwrap();
    let mut seen = Vec::new();
    while !seen.ends_with(b"+PONG\r\n") {
        s.read_exact(&mut b).unwrap();
        seen.push(b[0]);
    }
    for args in [
        &["BLPOP", "k", "0.05"][..],
        &["BLMOVE", "k", "d", "LEFT", "LEFT", "0.05"],
        &["BZPOPMIN", "z", "0.05"],
    ] {
        s.write_all(&resp(args)).unwrap();
        raw_expect(&mut s, b"_\r\n");
    }
    s.write_all(&resp(&["BZPOPMIN", "z", "0"])).unwrap();
    wait_blocked(&mut admin, 1);
    assert_eq!(int(&mut admin, &["ZADD", "z", "2.5", "m"]), 1);
    raw_expect(&mut s, b"*3\r\n$1\r\nz\r\n$1\r\nm\r\n,2.5\r\n");
}

// Pins: Redis rounds a timeout up to whole milliseconds, so a negative one
// above -0.001 s becomes 0 — wait forever — rather than "timeout is
// negative" (-0.001 and below are errors; see the compat case file).
#[test]
fn tiny_negative_timeout_waits_forever() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let p = Pending::start(&srv, &["BLPOP", "k", "-0.0001"]);
    p.assert_waiting();
    assert_eq!(blocked_clients(&mut admin), 1);
    assert_eq!(int(&mut admin, &["RPUSH", "k", "v"]), 1);
    assert_eq!(p.reply(), arr(&["k", "v"]));
}

// ---------------------------------------------------------------------------
// Who is served
// ---------------------------------------------------------------------------

/// Three clients block on `key` with `block` one after the other; `push3`
/// adds three elements at once and each client gets one, the first blocked
/// the first element (`expect3`); then `push1` serves only the first of three
/// new waiters and `push2` the other two, in order (`expect_rest`).
fn fifo_case(
    block: &[&str],
    push3: &[&str],
    expect3: [Value; 3],
    push1: &[&str],
    push2: &[&str],
    expect_rest: [Value; 3],
) {
    let srv = TestServer::start();
    let mut admin = srv.client();

    let waiters: Vec<Pending> = (0..3)
        .map(|i| Pending::blocked(&srv, &mut admin, block, i))
        .collect();
    q(&mut admin, push3);
    for (i, (w, want)) in waiters.iter().zip(expect3).enumerate() {
        assert_eq!(w.reply(), want, "client {} of 3", i + 1);
    }
    wait_blocked(&mut admin, 0);

    let waiters: Vec<Pending> = (0..3)
        .map(|i| Pending::blocked(&srv, &mut admin, block, i))
        .collect();
    let [first, second, third] = expect_rest;
    q(&mut admin, push1);
    assert_eq!(waiters[0].reply(), first, "the first blocked client");
    waiters[1].assert_waiting();
    waiters[2].assert_waiting();
    assert_eq!(blocked_clients(&mut admin), 2);
    q(&mut admin, push2);
    assert_eq!(waiters[1].reply(), second, "the second blocked client");
    assert_eq!(waiters[2].reply(), third, "the third blocked client");
    wait_blocked(&mut admin, 0);
    assert_eq!(int(&mut admin, &["DBSIZE"]), 0);
}

// Pins: BLPOP waiters are served first blocked, first served: one RPUSH of
// three elements gives client 1 the element LPOP would give first.
#[test]
fn fifo_blpop() {
    fifo_case(
        &["BLPOP", "k", "0"],
        &["RPUSH", "k", "a", "b", "c"],
        [arr(&["k", "a"]), arr(&["k", "b"]), arr(&["k", "c"])],
        &["RPUSH", "k", "x"],
        &["RPUSH", "k", "y", "z"],
        [arr(&["k", "x"]), arr(&["k", "y"]), arr(&["k", "z"])],
    );
}

// Pins: the same for BRPOP (client 1 gets the element RPOP gives first).
#[test]
fn fifo_brpop() {
    fifo_case(
        &["BRPOP", "k", "0"],
        &["RPUSH", "k", "a", "b", "c"],
        [arr(&["k", "c"]), arr(&["k", "b"]), arr(&["k", "a"])],
        &["LPUSH", "k", "x"],
        &["LPUSH", "k", "y", "z"],
        [arr(&["k", "x"]), arr(&["k", "y"]), arr(&["k", "z"])],
    );
}

// Pins: the same for BZPOPMIN woken by one ZADD of three members.
#[test]
fn fifo_bzpopmin() {
    fifo_case(
        &["BZPOPMIN", "z", "0"],
        &["ZADD", "z", "3", "c", "1", "a", "2", "b"],
        [
            arr(&["z", "a", "1"]),
            arr(&["z", "b", "2"]),
            arr(&["z", "c", "3"]),
        ],
        &["ZADD", "z", "5", "x"],
        &["ZADD", "z", "7", "z7", "6", "y"],
        [
            arr(&["z", "x", "5"]),
            arr(&["z", "y", "6"]),
            arr(&["z", "z7", "7"]),
        ],
    );
}

// Pins: a client blocked on several keys is served from the first
// non-empty key in argument order when data is already there, and by
// whichever key gets a push while it waits (keys on both shards).
#[test]
fn several_keys_argument_order_and_push() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let (a, b) = keys_on_both_shards("a");
    let (c, _) = keys_on_both_shards("c");
    let keys = [a.as_str(), b.as_str(), c.as_str()];

    // Data already there: the first non-empty key in argument order.
    q(&mut admin, &["RPUSH", &c, "c1"]);
    q(&mut admin, &["RPUSH", &b, "b1", "b2"]);
    let mut one = srv.client();
    assert_eq!(
        q(&mut one, &["BLPOP", keys[0], keys[1], keys[2], "0"]),
        arr(&[&b, "b1"])
    );
    assert_eq!(
        q(&mut one, &["BRPOP", keys[2], keys[1], keys[0], "0"]),
        arr(&[&c, "c1"])
    );
    assert_eq!(
        q(&mut one, &["BLPOP", keys[0], keys[1], keys[2], "0"]),
        arr(&[&b, "b2"])
    );
    assert_eq!(int(&mut admin, &["DBSIZE"]), 0);

    // While blocked: whichever key gets a push.
    for (i, key) in [&c, &a, &b].into_iter().enumerate() {
        let p = Pending::blocked(
            &srv,
            &mut admin,
            &["BLPOP", keys[0], keys[1], keys[2], "0"],
            0,
        );
        let v = format!("v{i}");
        q(&mut admin, &["RPUSH", key, &v]);
        assert_eq!(p.reply(), arr(&[key, &v]), "push to {key}");
        wait_blocked(&mut admin, 0);
    }
    assert_eq!(int(&mut admin, &["DBSIZE"]), 0);

    // The same for sorted sets.
    let p = Pending::blocked(&srv, &mut admin, &["BZPOPMIN", &a, &b, "0"], 0);
    q(&mut admin, &["ZADD", &b, "1", "m"]);
    assert_eq!(p.reply(), arr(&[&b, "m", "1"]));
}

/// W1 blocks on [a, b], then W2 on [b]; one pipeline pushes to a, then to
/// b. Redis serves W1 from a after the first push and W2 from b after the
/// second: the wake-up for b must not be used up by W1 (which pops from a)
/// and leave W2 waiting while b holds an element.
fn second_key_wakeup_case(a: &str, b: &str) {
    let srv = TestServer::start();
    let mut admin = srv.client();
    for round in 0..5 {
        let w1 = Pending::blocked(&srv, &mut admin, &["BLPOP", a, b, "0"], 0);
        let w2 = Pending::blocked(&srv, &mut admin, &["BLPOP", b, "0"], 1);
        let mut s = srv.tcp();
        let mut both = resp(&["RPUSH", a, "1"]);
        both.extend(resp(&["RPUSH", b, "2"]));
        s.write_all(&both).unwrap();
        raw_expect(&mut s, b":1\r\n:1\r\n");
        assert_eq!(w1.reply(), arr(&[a, "1"]), "round {round}");
        assert_eq!(w2.reply(), arr(&[b, "2"]), "round {round}");
        wait_blocked(&mut admin, 0);
        assert_eq!(int(&mut admin, &["EXISTS", a, b]), 0);
    }
}

// Pins: the case above with both keys on one shard.
#[test]
fn wakeup_for_second_key_is_not_lost_same_shard() {
    let (a, b) = keys_on_same_shard("s");
    second_key_wakeup_case(&a, &b);
}

// Pins: the case above with the keys on different shards.
#[test]
fn wakeup_for_second_key_is_not_lost_across_shards() {
    let (a, b) = keys_on_both_shards("d");
    second_key_wakeup_case(&a, &b);
}

// Pins: Redis serves blocked clients as part of the push, before the next
// command runs: a pipeline RPUSH k x + LPOP k + LLEN k from another client
// answers 1, nil, 0 while the blocked client gets x.
#[test]

fn blocked_client_is_served_before_the_next_command() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    for round in 0..5 {
        let w = Pending::blocked(&srv, &mut admin, &["BLPOP", "k", "0"], 0);
        let mut s = srv.tcp();
        let mut pipe = resp(&["RPUSH", "k", "x"]);
        pipe.extend(resp(&["LPOP", "k"]));
        pipe.extend(resp(&["LLEN", "k"]));
        s.write_all(&pipe).unwrap();
        raw_expect(&mut s, b":1\r\n$-1\r\n:0\r\n");
        assert_eq!(w.reply(), arr(&["k", "x"]), "round {round}");
        wait_blocked(&mut admin, 0);
    }
}

// Pins: a BLMOVE served by a push feeds its destination, whose blocked
// client is served in turn, all before the pusher's next pipelined command
// (keys on one shard): the pusher's LPOP of the destination gets nil.
#[test]
fn handoff_follows_blmove_into_its_destination() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let (src, dst) = keys_on_same_shard("hand");
    let mover = Pending::blocked(
        &srv,
        &mut admin,
        &["BLMOVE", &src, &dst, "LEFT", "RIGHT", "0"],
        0,
    );
    let popper = Pending::blocked(&srv, &mut admin, &["BLPOP", &dst, "0"], 1);
    let mut s = srv.tcp();
    let mut pipe = resp(&["RPUSH", &src, "x"]);
    pipe.extend(resp(&["LPOP", &dst]));
    pipe.extend(resp(&["EXISTS", &src, &dst]));
    s.write_all(&pipe).unwrap();
    raw_expect(&mut s, b":1\r\n$-1\r\n:0\r\n");
    assert_eq!(mover.reply(), bulk("x"));
    assert_eq!(popper.reply(), arr(&[&dst, "x"]));
    wait_blocked(&mut admin, 0);
}

// Pins: one client blocked with the same key twice is served once; a push
// of two elements leaves the second in the list.
#[test]
fn same_key_twice_is_served_once() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let p = Pending::blocked(&srv, &mut admin, &["BLPOP", "k", "k", "0"], 0);
    assert_eq!(int(&mut admin, &["RPUSH", "k", "1", "2"]), 2);
    assert_eq!(p.reply(), arr(&["k", "1"]));
    wait_blocked(&mut admin, 0);
    assert_eq!(q(&mut admin, &["LRANGE", "k", "0", "-1"]), arr(&["2"]));
}

// Pins: blocking is per database: a push to the same name in another
// database does not wake the client; one in its own database does.
#[test]
fn blocking_is_per_database() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let mut c = srv.client();
    assert_eq!(q(&mut c, &["SELECT", "1"]), Value::Okay);
    let p = Pending::start_on(c, &["BLPOP", "k", "0"]);
    wait_blocked(&mut admin, 1);
    q(&mut admin, &["RPUSH", "k", "db0"]);
    p.assert_waiting();
    assert_eq!(q(&mut admin, &["SELECT", "1"]), Value::Okay);
    q(&mut admin, &["RPUSH", "k", "db1"]);
    assert_eq!(p.reply(), arr(&["k", "db1"]));
    assert_eq!(q(&mut admin, &["SELECT", "0"]), Value::Okay);
    assert_eq!(int(&mut admin, &["LLEN", "k"]), 1);
}

// Pins: a key of another type appearing under the name does not serve (or
// fail) a blocked client: BLPOP keeps waiting through a ZADD, BZPOPMIN
// through an RPUSH; the right type later serves them.
#[test]
fn other_type_under_the_key_keeps_the_client_waiting() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let p = Pending::blocked(&srv, &mut admin, &["BLPOP", "k", "0"], 0);
    q(&mut admin, &["ZADD", "k", "1", "a"]);
    p.assert_waiting();
    q(&mut admin, &["DEL", "k"]);
    q(&mut admin, &["RPUSH", "k", "x"]);
    assert_eq!(p.reply(), arr(&["k", "x"]));

    let p = Pending::blocked(&srv, &mut admin, &["BZPOPMIN", "z", "0"], 0);
    q(&mut admin, &["RPUSH", "z", "x"]);
    p.assert_waiting();
    q(&mut admin, &["DEL", "z"]);
    q(&mut admin, &["ZADD", "z", "1", "m"]);
    assert_eq!(p.reply(), arr(&["z", "m", "1"]));
}

// ---------------------------------------------------------------------------
// Nothing lost, nothing served twice
// ---------------------------------------------------------------------------

/// Runs `consumers` (each its own command, re-issued until the producer is
/// done and it times out) against a producer that calls `produce` for the
/// elements `e0..e{total}` in random batches; returns everything received,
/// in any order.
fn consume_all(
    srv: &TestServer,
    consumers: Vec<Vec<String>>,
    total: usize,
    mut produce: impl FnMut(&mut Connection, &[String], &mut Rng),
    parse: fn(&Value) -> Vec<String>,
) -> Vec<String> {
    let mut admin = srv.client();
    let done = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let n = consumers.len();
    for args in consumers {
        let mut c = srv.client();
        let done = done.clone();
        let tx = tx.clone();
        std::thread::spawn(move || {
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut got = Vec::new();
            loop {
                match cmd(&argv).query::<Value>(&mut c) {
                    Ok(Value::Nil) => {
                        if done.load(Ordering::SeqCst) {
                            break;
                        }
                    }
                    Ok(v) => got.extend(parse(&v)),
                    Err(e) => {
                        let _ = tx.send(Err(format!("{argv:?}: {e}")));
                        return;
                    }
                }
            }
            let _ = tx.send(Ok(got));
        });
    }
    drop(tx);
    wait_blocked(&mut admin, n as i64);

    let mut producer = srv.client();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let all: Vec<String> = (0..total).map(|i| format!("e{i}")).collect();
    let mut i = 0;
    while i < total {
        let batch = (1 + rng.below(8) as usize).min(total - i);
        produce(&mut producer, &all[i..i + batch], &mut rng);
        i += batch;
        if rng.below(3) == 0 {
            std::thread::sleep(Duration::from_millis(rng.below(4)));
        }
    }
    done.store(true, Ordering::SeqCst);

    let mut received = Vec::new();
    for _ in 0..n {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(got)) => received.extend(got),
            Ok(Err(e)) => panic!("consumer failed: {e}"),
            Err(_) => panic!("a consumer did not finish"),
        }
    }
    wait_blocked(&mut admin, 0);
    received
}

/// Checks that `received` plus `left` is exactly `e0..e{total}`, each once.
fn assert_exactly_once(received: &[String], left: &[String], total: usize) {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for e in received.iter().chain(left) {
        *counts.entry(e.as_str()).or_default() += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "served more than once: {twice:?}");
    let want: BTreeSet<String> = (0..total).map(|i| format!("e{i}")).collect();
    let got: BTreeSet<String> = counts.keys().map(|s| s.to_string()).collect();
    let lost: Vec<_> = want.difference(&got).collect();
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert_eq!(got, want);
    assert_eq!(received.len() + left.len(), total);
}

fn list_elements(v: &Value) -> Vec<String> {
    match v {
        // BLPOP: [key, element]
        Value::Array(kv) if kv.len() == 2 && matches!(kv[1], Value::BulkString(_)) => {
            vec![text(&kv[1])]
        }
        // BLMPOP: [key, [elements...]]
        Value::Array(kv) if kv.len() == 2 => match &kv[1] {
            Value::Array(els) => els.iter().map(text).collect(),
            other => panic!("unexpected BLMPOP elements {other:?}"),
        },
        other => panic!("unexpected reply {other:?}"),
    }
}

fn zset_members(v: &Value) -> Vec<String> {
    match v {
        // BZPOPMIN: [key, member, score]
        Value::Array(kms) if kms.len() == 3 => vec![text(&kms[1])],
        // BZMPOP: [key, [[member, score]...]]
        Value::Array(kv) if kv.len() == 2 => match &kv[1] {
            Value::Array(pairs) => pairs
                .iter()
                .map(|p| match p {
                    Value::Array(ms) => text(&ms[0]),
                    other => panic!("unexpected BZMPOP pair {other:?}"),
                })
                .collect(),
            other => panic!("unexpected BZMPOP members {other:?}"),
        },
        other => panic!("unexpected reply {other:?}"),
    }
}

fn strings(v: Value) -> Vec<String> {
    match v {
        Value::Array(items) => items.iter().map(text).collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

// Pins: 10 clients in BLPOP and a producer pushing 200 elements in random
// batches: every element is received exactly once or is still in the list.
#[test]
fn blpop_consumers_lose_and_duplicate_nothing() {
    let srv = TestServer::start();
    let consumers = (0..10)
        .map(|_| vec!["BLPOP".into(), "q".into(), "0.3".into()])
        .collect();
    let received = consume_all(
        &srv,
        consumers,
        200,
        |c, batch, _| {
            let mut args = vec!["RPUSH", "q"];
            args.extend(batch.iter().map(String::as_str));
            q(c, &args);
        },
        list_elements,
    );
    let mut admin = srv.client();
    let left = strings(q(&mut admin, &["LRANGE", "q", "0", "-1"]));
    assert_exactly_once(&received, &left, 200);
}

// Pins: the same with two keys on different shards, pushes to either at
// random from both ends, and consumers mixing BLPOP, BRPOP and BLMPOP COUNT
// over both keys.
#[test]
fn mixed_list_consumers_across_shards_lose_and_duplicate_nothing() {
    let srv = TestServer::start();
    let (k1, k2) = keys_on_both_shards("mq");
    let consumers = (0..9)
        .map(|i| -> Vec<String> {
            let v: Vec<&str> = match i % 3 {
                0 => vec!["BLPOP", &k1, &k2, "0.3"],
                1 => vec!["BRPOP", &k2, &k1, "0.3"],
                _ => vec!["BLMPOP", "0.3", "2", &k1, &k2, "LEFT", "COUNT", "3"],
            };
            v.into_iter().map(String::from).collect()
        })
        .collect();
    let (p1, p2) = (k1.clone(), k2.clone());
    let received = consume_all(
        &srv,
        consumers,
        300,
        move |c, batch, rng| {
            let key = if rng.below(2) == 0 { &p1 } else { &p2 };
            let push = if rng.below(2) == 0 { "RPUSH" } else { "LPUSH" };
            let mut args = vec![push, key.as_str()];
            args.extend(batch.iter().map(String::as_str));
            q(c, &args);
        },
        list_elements,
    );
    let mut admin = srv.client();
    let mut left = strings(q(&mut admin, &["LRANGE", &k1, "0", "-1"]));
    left.extend(strings(q(&mut admin, &["LRANGE", &k2, "0", "-1"])));
    assert_exactly_once(&received, &left, 300);
}

// Pins: the same for sorted sets: BZPOPMIN, BZPOPMAX and BZMPOP consumers,
// ZADD batches with random scores.
#[test]
fn zset_consumers_lose_and_duplicate_nothing() {
    let srv = TestServer::start();
    let consumers = (0..6)
        .map(|i| -> Vec<String> {
            let v: Vec<&str> = match i % 3 {
                0 => vec!["BZPOPMIN", "zq", "0.3"],
                1 => vec!["BZPOPMAX", "zq", "0.3"],
                _ => vec!["BZMPOP", "0.3", "1", "zq", "MIN", "COUNT", "2"],
            };
            v.into_iter().map(String::from).collect()
        })
        .collect();
    let received = consume_all(
        &srv,
        consumers,
        150,
        |c, batch, rng| {
            let scores: Vec<String> = batch.iter().map(|_| rng.below(1000).to_string()).collect();
            let mut args = vec!["ZADD", "zq"];
            for (m, s) in batch.iter().zip(&scores) {
                args.push(s);
                args.push(m);
            }
            q(c, &args);
        },
        zset_members,
    );
    let mut admin = srv.client();
    let left = strings(q(&mut admin, &["ZRANGE", "zq", "0", "-1"]));
    assert_exactly_once(&received, &left, 150);
}

// ---------------------------------------------------------------------------
// Leaving while blocked
// ---------------------------------------------------------------------------

// Pins: a client that disconnects while blocked leaves nothing behind: the
// blocked count drops back to 0 and a later push stays in the key (for a
// list pop, a move and a sorted-set pop).
#[test]
fn disconnect_while_blocked_leaves_nothing_behind() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let cases: [(&[&str], &[&str], &[&str]); 3] = [
        (&["BLPOP", "k", "0"], &["RPUSH", "k", "x"], &["LLEN", "k"]),
        (
            &["BLMOVE", "src", "dst", "LEFT", "RIGHT", "0"],
            &["RPUSH", "src", "x"],
            &["LLEN", "src"],
        ),
        (
            &["BZPOPMIN", "z", "0"],
            &["ZADD", "z", "1", "m"],
            &["ZCARD", "z"],
        ),
    ];
    for (block, push, count) in cases {
        let mut s = srv.tcp();
        s.write_all(&resp(block)).unwrap();
        wait_blocked(&mut admin, 1);
        drop(s);
        wait_blocked(&mut admin, 0);
        assert_eq!(int(&mut admin, push), 1, "{push:?}");
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(int(&mut admin, count), 1, "after {block:?} left");
    }
    assert_eq!(int(&mut admin, &["EXISTS", "dst"]), 0);
}

// Pins: CLIENT KILL of a blocked client unblocks it and closes its
// connection without a reply; a later push stays in the list.
#[test]
fn client_kill_unblocks_and_closes() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let mut s = srv.tcp();
    s.write_all(&resp(&["CLIENT", "ID"])).unwrap();
    let id = raw_int(&mut s);
    s.write_all(&resp(&["BLPOP", "k", "0"])).unwrap();
    wait_blocked(&mut admin, 1);
    assert_eq!(
        int(&mut admin, &["CLIENT", "KILL", "ID", &id.to_string()]),
        1
    );
    wait_blocked(&mut admin, 0);
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("killed client got {:?}", String::from_utf8_lossy(&buf[..n])),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("killed client's connection not closed: {e}"),
    }
    assert_eq!(int(&mut admin, &["RPUSH", "k", "x"]), 1);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(int(&mut admin, &["LLEN", "k"]), 1);
}

// ---------------------------------------------------------------------------
// Moves and keys on different shards
// ---------------------------------------------------------------------------

// Pins: BLMOVE from a key on one shard to a key on the other, woken by LPUSH
// on the source; BRPOPLPUSH the same way; both when data is already there.
#[test]
fn blmove_and_brpoplpush_across_shards() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let (src, dst) = keys_on_both_shards("mv");
    for (src, dst) in [(&src, &dst), (&dst, &src)] {
        q(&mut admin, &["DEL", src, dst]);
        let p = Pending::blocked(
            &srv,
            &mut admin,
            &["BLMOVE", src, dst, "LEFT", "RIGHT", "0"],
            0,
        );
        p.assert_waiting();
        assert_eq!(int(&mut admin, &["LPUSH", src, "a", "b"]), 2);
        assert_eq!(p.reply(), bulk("b"));
        assert_eq!(q(&mut admin, &["LRANGE", src, "0", "-1"]), arr(&["a"]));
        assert_eq!(q(&mut admin, &["LRANGE", dst, "0", "-1"]), arr(&["b"]));

        // Data there: immediate.
        let mut c = srv.client();
        assert_eq!(q(&mut c, &["BRPOPLPUSH", src, dst, "0"]), bulk("a"));
        assert_eq!(int(&mut admin, &["EXISTS", src]), 0);

        let p = Pending::blocked(&srv, &mut admin, &["BRPOPLPUSH", src, dst, "0"], 0);
        p.assert_waiting();
        assert_eq!(int(&mut admin, &["RPUSH", src, "y", "z"]), 2);
        assert_eq!(p.reply(), bulk("z"));
        assert_eq!(q(&mut admin, &["LRANGE", src, "0", "-1"]), arr(&["y"]));
        assert_eq!(
            q(&mut admin, &["LRANGE", dst, "0", "-1"]),
            arr(&["z", "a", "b"])
        );
        wait_blocked(&mut admin, 0);
    }
}

// Pins: what a move pushes wakes clients blocked on its destination, across
// shards: RPOPLPUSH and LMOVE into a key with a BLPOP waiter, and a blocked
// BLMOVE whose push serves a BLPOP blocked on the destination (Redis chains
// them: src and dst both end up empty).
#[test]
fn moves_wake_clients_blocked_on_the_destination() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let (src, dst) = keys_on_both_shards("ch");

    q(&mut admin, &["RPUSH", &src, "1", "2"]);
    let p = Pending::blocked(&srv, &mut admin, &["BLPOP", &dst, "0"], 0);
    assert_eq!(q(&mut admin, &["RPOPLPUSH", &src, &dst]), bulk("2"));
    assert_eq!(p.reply(), arr(&[&dst, "2"]));
    let p = Pending::blocked(&srv, &mut admin, &["BRPOP", &dst, "0"], 0);
    assert_eq!(
        q(&mut admin, &["LMOVE", &src, &dst, "LEFT", "LEFT"]),
        bulk("1")
    );
    assert_eq!(p.reply(), arr(&[&dst, "1"]));
    assert_eq!(int(&mut admin, &["EXISTS", &src, &dst]), 0);

    let reader = Pending::blocked(&srv, &mut admin, &["BLPOP", &dst, "0"], 0);
    let mover = Pending::blocked(
        &srv,
        &mut admin,
        &["BLMOVE", &src, &dst, "LEFT", "RIGHT", "0"],
        1,
    );
    assert_eq!(int(&mut admin, &["RPUSH", &src, "v"]), 1);
    assert_eq!(mover.reply(), bulk("v"));
    assert_eq!(reader.reply(), arr(&[&dst, "v"]));
    wait_blocked(&mut admin, 0);
    assert_eq!(int(&mut admin, &["EXISTS", &src, &dst]), 0);
}

// Pins: a blocked BLMOVE whose destination has the wrong type when the
// source gets an element is answered WRONGTYPE and the element stays in the
// source.
#[test]
fn blocked_blmove_to_wrong_type_destination() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let (src, dst) = keys_on_both_shards("wt");
    assert_eq!(q(&mut admin, &["SET", &dst, "v"]), Value::Okay);
    let p = Pending::blocked(
        &srv,
        &mut admin,
        &["BLMOVE", &src, &dst, "LEFT", "LEFT", "0"],
        0,
    );
    q(&mut admin, &["RPUSH", &src, "x"]);
    assert_eq!(
        p.error(),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    wait_blocked(&mut admin, 0);
    assert_eq!(q(&mut admin, &["LRANGE", &src, "0", "-1"]), arr(&["x"]));
    assert_eq!(q(&mut admin, &["GET", &dst]), bulk("v"));
}

// Pins: BLMOVE with the same source and destination, woken by a push,
// rotates the list.
#[test]
fn blocked_blmove_onto_itself() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let p = Pending::blocked(
        &srv,
        &mut admin,
        &["BLMOVE", "r", "r", "LEFT", "RIGHT", "0"],
        0,
    );
    assert_eq!(int(&mut admin, &["RPUSH", "r", "a", "b"]), 2);
    assert_eq!(p.reply(), bulk("a"));
    assert_eq!(q(&mut admin, &["LRANGE", "r", "0", "-1"]), arr(&["b", "a"]));
}

// Pins: BZPOPMIN and BZPOPMAX woken by ZADD, blocked over keys on both
// shards.
#[test]
fn bzpop_woken_by_zadd_across_shards() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let (z1, z2) = keys_on_both_shards("zz");
    let p = Pending::blocked(&srv, &mut admin, &["BZPOPMIN", &z1, &z2, "0"], 0);
    assert_eq!(
        int(&mut admin, &["ZADD", &z2, "3", "c", "1", "a", "2", "b"]),
        3
    );
    assert_eq!(p.reply(), arr(&[&z2, "a", "1"]));
    let p = Pending::blocked(&srv, &mut admin, &["BZPOPMAX", &z1, "0"], 0);
    assert_eq!(int(&mut admin, &["ZADD", &z1, "1.5", "x", "-2", "y"]), 2);
    assert_eq!(p.reply(), arr(&[&z1, "x", "1.5"]));
    assert_eq!(
        q(&mut admin, &["ZRANGE", &z1, "0", "-1", "WITHSCORES"]),
        arr(&["y", "-2"])
    );
    assert_eq!(
        q(&mut admin, &["ZRANGE", &z2, "0", "-1", "WITHSCORES"]),
        arr(&["b", "2", "c", "3"])
    );
}

// Pins: BLMPOP and BZMPOP with COUNT, blocked over keys on both shards, take
// up to COUNT from the key that got the push.
#[test]
fn blmpop_and_bzmpop_with_count_across_shards() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let (k1, k2) = keys_on_both_shards("mp");

    let p = Pending::blocked(
        &srv,
        &mut admin,
        &["BLMPOP", "0", "2", &k1, &k2, "LEFT", "COUNT", "3"],
        0,
    );
    assert_eq!(int(&mut admin, &["RPUSH", &k2, "a", "b", "c", "d", "e"]), 5);
    assert_eq!(p.reply(), mpop_list(&k2, &["a", "b", "c"]));
    assert_eq!(q(&mut admin, &["LRANGE", &k2, "0", "-1"]), arr(&["d", "e"]));

    // k2 still has d e: served at once.
    assert_eq!(
        q(
            &mut admin,
            &["BLMPOP", "0", "2", &k1, &k2, "RIGHT", "COUNT", "10"]
        ),
        mpop_list(&k2, &["e", "d"])
    );
    wait_blocked(&mut admin, 0);

    let (z1, z2) = keys_on_both_shards("zmp");
    let p = Pending::blocked(
        &srv,
        &mut admin,
        &["BZMPOP", "0", "2", &z1, &z2, "MAX", "COUNT", "2"],
        0,
    );
    assert_eq!(
        int(&mut admin, &["ZADD", &z1, "1", "a", "2", "b", "3", "c"]),
        3
    );
    assert_eq!(p.reply(), mpop_zset(&z1, &[("c", "3"), ("b", "2")]));
    let p = Pending::blocked(
        &srv,
        &mut admin,
        &["BZMPOP", "0", "1", &z2, "MIN", "COUNT", "5"],
        0,
    );
    assert_eq!(int(&mut admin, &["ZADD", &z2, "9", "x", "8", "y"]), 2);
    assert_eq!(p.reply(), mpop_zset(&z2, &[("y", "8"), ("x", "9")]));
    assert_eq!(int(&mut admin, &["EXISTS", &z2, &k2]), 0);
    assert_eq!(int(&mut admin, &["ZCARD", &z1]), 1);
}

// ---------------------------------------------------------------------------
// Keys that appear without a push
// ---------------------------------------------------------------------------

// Pins: a list or sorted set renamed (from another shard) onto a key with a
// blocked client wakes it, as Redis does for any key added to the keyspace.
#[test]
fn rename_wakes_blocked_clients() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let (tmp, target) = keys_on_both_shards("rn");

    q(&mut admin, &["RPUSH", &tmp, "1", "2"]);
    let p = Pending::blocked(&srv, &mut admin, &["BLPOP", &target, "0"], 0);
    assert_eq!(q(&mut admin, &["RENAME", &tmp, &target]), Value::Okay);
    assert_eq!(p.reply(), arr(&[&target, "1"]));
    wait_blocked(&mut admin, 0);

    q(&mut admin, &["DEL", &tmp, &target]);
    q(&mut admin, &["ZADD", &tmp, "1", "m"]);
    let p = Pending::blocked(&srv, &mut admin, &["BZPOPMIN", &target, "0"], 0);
    assert_eq!(q(&mut admin, &["RENAME", &tmp, &target]), Value::Okay);
    assert_eq!(p.reply(), arr(&[&target, "m", "1"]));
}

// Pins: a list copied (from another shard) onto a key with a blocked client
// wakes it.
#[test]
fn copy_wakes_blocked_clients() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let (src, target) = keys_on_both_shards("cp");
    q(&mut admin, &["RPUSH", &src, "1", "2"]);
    let p = Pending::blocked(&srv, &mut admin, &["BRPOP", &target, "0"], 0);
    assert_eq!(int(&mut admin, &["COPY", &src, &target]), 1);
    assert_eq!(p.reply(), arr(&[&target, "2"]));
    assert_eq!(int(&mut admin, &["LLEN", &src]), 2);
}

// Pins: a sorted set written by ZUNIONSTORE or ZRANGESTORE wakes a client
// blocked on the destination.
#[test]
fn zset_store_commands_wake_blocked_clients() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let (src, dst) = keys_on_both_shards("st");
    q(&mut admin, &["ZADD", &src, "1", "a", "2", "b"]);

    let p = Pending::blocked(&srv, &mut admin, &["BZPOPMAX", &dst, "0"], 0);
    assert_eq!(int(&mut admin, &["ZUNIONSTORE", &dst, "1", &src]), 2);
    assert_eq!(p.reply(), arr(&[&dst, "b", "2"]));
    q(&mut admin, &["DEL", &dst]);

    let p = Pending::blocked(&srv, &mut admin, &["BZPOPMIN", &dst, "0"], 0);
    assert_eq!(int(&mut admin, &["ZRANGESTORE", &dst, &src, "0", "-1"]), 2);
    assert_eq!(p.reply(), arr(&[&dst, "a", "1"]));
}

// Pins: a list moved into the client's database by MOVE wakes it.
#[test]
fn move_wakes_blocked_clients() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let mut c = srv.client();
    assert_eq!(q(&mut c, &["SELECT", "1"]), Value::Okay);
    let p = Pending::start_on(c, &["BLPOP", "m", "0"]);
    wait_blocked(&mut admin, 1);
    q(&mut admin, &["RPUSH", "m", "v"]);
    assert_eq!(int(&mut admin, &["MOVE", "m", "1"]), 1);
    assert_eq!(p.reply(), arr(&["m", "v"]));
}

// Pins: a list swapped into the client's database by SWAPDB wakes it.
#[test]
fn swapdb_wakes_blocked_clients() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let mut c = srv.client();
    assert_eq!(q(&mut c, &["SELECT", "1"]), Value::Okay);
    let p = Pending::start_on(c, &["BLPOP", "sw", "0"]);
    wait_blocked(&mut admin, 1);
    q(&mut admin, &["RPUSH", "sw", "v"]);
    assert_eq!(q(&mut admin, &["SWAPDB", "0", "1"]), Value::Okay);
    assert_eq!(p.reply(), arr(&["sw", "v"]));
}

// Pins: a blocked client that pipelined another command and then closed
// the connection is seen to leave: it takes no element (Redis keeps
// reading a blocked client's input, so it notices the close).
#[test]
fn a_blocked_client_that_sent_more_and_left_takes_nothing() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let mut raw = srv.tcp();
    raw.write_all(b"*3\r\n$5\r\nBLPOP\r\n$4\r\ngone\r\n$1\r\n0\r\n")
        .unwrap();
    wait_blocked(&mut admin, 1);
    raw.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    drop(raw);
    wait_blocked(&mut admin, 0);
    assert_eq!(int(&mut admin, &["RPUSH", "gone", "a"]), 1);
    assert_eq!(q(&mut admin, &["LRANGE", "gone", "0", "-1"]), arr(&["a"]));
}

// Pins: in a pipeline of blocking pops each reply goes out as soon as its
// pop is served, while the next one waits (a worker pipelining BRPOPLPUSH
// waited forever for a job it had been given).
#[test]
fn pipelined_blocking_pops_reply_one_by_one() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let mut raw = srv.tcp();
    raw.write_all(
        b"*3\r\n$5\r\nBLPOP\r\n$2\r\np1\r\n$1\r\n0\r\n*3\r\n$5\r\nBLPOP\r\n$2\r\np2\r\n$1\r\n0\r\n",
    )
    .unwrap();
    wait_blocked(&mut admin, 1);
    assert_eq!(int(&mut admin, &["RPUSH", "p1", "x"]), 1);
    let mut got = Vec::new();
    let want = b"*2\r\n$2\r\np1\r\n$1\r\nx\r\n";
    let mut chunk = [0u8; 64];
    while got.len() < want.len() {
        let n = raw.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed");
        got.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(got, want);
    wait_blocked(&mut admin, 1);
}

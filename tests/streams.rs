//! Streams with real clients: blocking XREAD and XREADGROUP woken by XADD
//! from other connections (every reader of a key served, group readers
//! served once, errors when the group or key goes away, disconnects, keys
//! on different shards), consumer-group delivery and claiming across many
//! consumers, isolation of streams whose names share prefixes (same shard,
//! same slot), deletion of a big stream with background GC of its rows, and
//! streams under RENAME, COPY, MOVE, expiry and SCAN TYPE.
//!
//! Expected replies are what Redis 7.0.15 answers (each case that depends
//! on Redis's behaviour was checked against redis-server 7.0.15). The
//! single-connection replies are in tests/compat/cases/stream*.txt.
//!
//! Every wait is bounded: replies are awaited with a deadline, clients have
//! read timeouts, and "still waiting" is checked for a few hundred ms.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::error_line;
use common::waiting::{
    blocked_clients, first_reply, keys_on_both_shards, raw_expect, resp, text, wait_blocked,
    Pending, REPLY_WITHIN,
};
use common::{arr, bulk, cmd, err, field, info_cairn, int, ok, q, shard_of, TestServer};
use redis::{Connection, Value};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A command from byte-string arguments (for key names that are not UTF-8).
fn bcmd(args: &[&[u8]]) -> redis::Cmd {
    let mut c = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        c.arg(*a);
    }
    c
}

/// Runs a command given as byte strings.
fn qb(c: &mut Connection, args: &[&[u8]]) -> Value {
    bcmd(args)
        .query(c)
        .unwrap_or_else(|e| panic!("{:?}: {e}", show_args(args)))
}

/// Runs a command given as byte strings that replies with an integer.
fn intb(c: &mut Connection, args: &[&[u8]]) -> i64 {
    bcmd(args)
        .query(c)
        .unwrap_or_else(|e| panic!("{:?}: {e}", show_args(args)))
}

fn show_args(args: &[&[u8]]) -> Vec<String> {
    args.iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(items) => items,
        other => panic!("expected an array, got {other:?}"),
    }
}

/// `[id, [field, value, ...]]`.
fn entry(id: &str, fields: &[&str]) -> Value {
    Value::Array(vec![bulk(id), arr(fields)])
}

/// XREAD's reply for one stream: `[[key, [entries...]]]`.
fn read_reply(key: &str, entries: Vec<Value>) -> Value {
    Value::Array(vec![Value::Array(vec![bulk(key), Value::Array(entries)])])
}

/// The XPENDING summary `[count, min, max, [[consumer, "n"]...]]`.
fn pending_summary(count: i64, min: &str, max: &str, owners: &[(&str, usize)]) -> Value {
    Value::Array(vec![
        Value::Int(count),
        bulk(min),
        bulk(max),
        Value::Array(
            owners
                .iter()
                .map(|(c, n)| arr(&[c, &n.to_string()]))
                .collect(),
        ),
    ])
}

/// The XPENDING summary of a group with nothing pending.
fn no_pending() -> Value {
    Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil, Value::Nil])
}

/// The ids of an entries array `[[id, fields]...]`.
fn entry_ids(v: &Value) -> Vec<String> {
    items(v).iter().map(|e| text(&items(e)[0])).collect()
}

/// A reply that is an array of `[name, value, name, value...]` maps, as a
/// list of name -> value maps (XINFO GROUPS, XINFO CONSUMERS).
fn info_maps(v: &Value) -> Vec<HashMap<String, Value>> {
    items(v)
        .iter()
        .map(|m| {
            items(m)
                .chunks(2)
                .map(|p| (text(&p[0]), p[1].clone()))
                .collect()
        })
        .collect()
}

// ---------------------------------------------------------------------------
// 1. Blocking XREAD
// ---------------------------------------------------------------------------

/// What Redis 7.0 answers a group reader whose stream went away.
const UNBLOCKED: &str = "UNBLOCKED the stream key no longer exists";

/// A stream `key` with group `g`, and consumer `c` blocked reading it with
/// XREADGROUP (no other client blocked).
fn reader_blocked_on(srv: &TestServer, admin: &mut Connection, key: &str) -> Pending {
    q(admin, &["XADD", key, "1-0", "f", "v"]);
    ok(admin, &["XGROUP", "CREATE", key, "g", "$"]);
    group_reader(srv, admin, ("g", "c"), key, 0)
}

/// Starts `XREADGROUP GROUP g c BLOCK 0 STREAMS key >` and waits until it is
/// blocked (`before` clients were blocked already).
fn group_reader(
    srv: &TestServer,
    admin: &mut Connection,
    (group, consumer): (&str, &str),
    key: &str,
    before: i64,
) -> Pending {
    let args = [
        "XREADGROUP",
        "GROUP",
        group,
        consumer,
        "BLOCK",
        "0",
        "STREAMS",
        key,
        ">",
    ];
    Pending::blocked(srv, admin, &args, before)
}

// Pins: `XREAD BLOCK 0 STREAMS s $` waits (well past any short timeout) and
// is served by an XADD from another connection with exactly that entry, not
// the older ones; the same on a key that does not exist yet ($ = 0-0).
#[test]
fn xread_block_zero_woken_by_xadd() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    assert_eq!(
        q(&mut admin, &["XADD", "s", "1-1", "old", "x"]),
        bulk("1-1")
    );

    let p = Pending::blocked(
        &srv,
        &mut admin,
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        0,
    );
    std::thread::sleep(Duration::from_millis(300));
    p.assert_waiting();
    assert_eq!(
        q(&mut admin, &["XADD", "s", "2-0", "f", "v", "g", "w"]),
        bulk("2-0")
    );
    assert_eq!(
        p.reply(),
        read_reply("s", vec![entry("2-0", &["f", "v", "g", "w"])])
    );
    wait_blocked(&mut admin, 0);

    let p = Pending::blocked(
        &srv,
        &mut admin,
        &["XREAD", "BLOCK", "0", "STREAMS", "fresh", "$"],
        0,
    );
    p.assert_waiting();
    assert_eq!(
        q(&mut admin, &["XADD", "fresh", "5-3", "a", "1"]),
        bulk("5-3")
    );
    assert_eq!(
        p.reply(),
        read_reply("fresh", vec![entry("5-3", &["a", "1"])])
    );
    wait_blocked(&mut admin, 0);
    assert_eq!(int(&mut admin, &["XLEN", "s"]), 2);
    assert_eq!(int(&mut admin, &["XLEN", "fresh"]), 1);
}

// Pins: every client blocked on a stream is served by one XADD (a stream
// entry is not consumed by reading it): readers with `$`, with the last id
// given explicitly, with COUNT, and over [other, s] all get the new entry.
#[test]
fn xread_all_blocked_readers_served_by_one_xadd() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    q(&mut admin, &["XADD", "s", "10-0", "f", "0"]);
    let shapes: [&[&str]; 7] = [
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "10-0"],
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "10"],
        &["XREAD", "COUNT", "5", "BLOCK", "0", "STREAMS", "s", "$"],
        &["XREAD", "BLOCK", "0", "STREAMS", "other", "s", "$", "$"],
    ];
    let readers: Vec<Pending> = shapes
        .iter()
        .enumerate()
        .map(|(i, args)| Pending::blocked(&srv, &mut admin, args, i as i64))
        .collect();
    assert_eq!(
        q(&mut admin, &["XADD", "s", "11-0", "f", "1"]),
        bulk("11-0")
    );
    for r in &readers {
        assert_eq!(
            r.reply(),
            read_reply("s", vec![entry("11-0", &["f", "1"])]),
            "{:?}",
            r.args
        );
    }
    wait_blocked(&mut admin, 0);
    assert_eq!(int(&mut admin, &["XLEN", "s"]), 2);
    assert_eq!(int(&mut admin, &["EXISTS", "other"]), 0);
}

// Pins: XREAD BLOCK 100 with nothing to read replies with the null array
// (`*-1`, redis-rs's Nil) after at least 100 ms, and leaves no blocked
// client and no key behind; on the wire it is exactly `*-1\r\n`.
#[test]
fn xread_block_timeout_replies_null_array() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let p = Pending::start(&srv, &["XREAD", "BLOCK", "100", "STREAMS", "nothing", "$"]);
    let (v, took) = p.reply_timed();
    assert_eq!(v, Value::Nil);
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(2),
        "timed out after {took:?}"
    );
    // An existing stream with nothing new, and two streams.
    q(&mut admin, &["XADD", "s", "1-0", "f", "v"]);
    let p = Pending::start(
        &srv,
        &["XREAD", "BLOCK", "100", "STREAMS", "s", "nothing", "$", "$"],
    );
    let (v, took) = p.reply_timed();
    assert_eq!(v, Value::Nil);
    assert!(
        took >= Duration::from_millis(100),
        "timed out after {took:?}"
    );
    wait_blocked(&mut admin, 0);
    assert_eq!(int(&mut admin, &["DBSIZE"]), 1);

    let mut s = srv.tcp();
    s.write_all(&resp(&["XREAD", "BLOCK", "100", "STREAMS", "s", "$"]))
        .unwrap();
    let mut got = [0u8; 5];
    std::io::Read::read_exact(&mut s, &mut got).unwrap();
    assert_eq!(&got, b"*-1\r\n");
}

// Pins: a client blocked in XREAD (and in XREADGROUP) that disconnects
// leaves nothing behind: blocked_clients drops back to 0, a later XADD
// works, and the dropped group reader took nothing (the entry is not
// pending, the group did not move).
#[test]
fn xread_disconnect_while_blocked_leaves_nothing_behind() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    q(&mut admin, &["XADD", "s", "1-0", "f", "v"]);
    ok(&mut admin, &["XGROUP", "CREATE", "s", "g", "$"]);
    // The group reader first: later XADDs would be new entries for it.
    let cases: [&[&str]; 3] = [
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "0",
            "STREAMS",
            "s",
            ">",
        ],
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        &["XREAD", "BLOCK", "0", "STREAMS", "nokey", "s", "$", "$"],
    ];
    for (i, block) in cases.iter().enumerate() {
        let mut s = srv.tcp();
        s.write_all(&resp(block)).unwrap();
        wait_blocked(&mut admin, 1);
        drop(s);
        wait_blocked(&mut admin, 0);
        let id = format!("{}-0", i + 2);
        assert_eq!(q(&mut admin, &["XADD", "s", &id, "f", "v"]), bulk(&id));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(int(&mut admin, &["XLEN", "s"]), i as i64 + 2);
    }
    assert_eq!(q(&mut admin, &["XPENDING", "s", "g"]), no_pending());
    let groups = info_maps(&q(&mut admin, &["XINFO", "GROUPS", "s"]));
    assert_eq!(groups[0]["last-delivered-id"], bulk("1-0"));
    assert_eq!(groups[0]["pending"], Value::Int(0));
    // And a reader that stays connected is still served normally.
    let p = Pending::blocked(
        &srv,
        &mut admin,
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        0,
    );
    q(&mut admin, &["XADD", "s", "9-0", "last", "1"]);
    assert_eq!(
        p.reply(),
        read_reply("s", vec![entry("9-0", &["last", "1"])])
    );
    wait_blocked(&mut admin, 0);
}

// Pins: XREAD BLOCK over two streams on different shards is woken by an
// XADD to either one and answers with that stream only.
#[test]
fn xread_block_across_shards() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let (a, b) = keys_on_both_shards("xs");
    assert_ne!(shard_of(&a, 2), shard_of(&b, 2));
    q(&mut admin, &["XADD", &a, "1-0", "f", "a1"]);
    let block = ["XREAD", "BLOCK", "0", "STREAMS", &a, &b, "$", "$"];

    let p = Pending::blocked(&srv, &mut admin, &block, 0);
    p.assert_waiting();
    assert_eq!(q(&mut admin, &["XADD", &b, "7-0", "f", "b7"]), bulk("7-0"));
    assert_eq!(p.reply(), read_reply(&b, vec![entry("7-0", &["f", "b7"])]));
    wait_blocked(&mut admin, 0);

    let p = Pending::blocked(&srv, &mut admin, &block, 0);
    assert_eq!(q(&mut admin, &["XADD", &a, "2-0", "f", "a2"]), bulk("2-0"));
    assert_eq!(p.reply(), read_reply(&a, vec![entry("2-0", &["f", "a2"])]));
    wait_blocked(&mut admin, 0);

    // Explicit ids across shards: data already there is served at once,
    // from both streams, in argument order.
    let mut c = srv.client();
    assert_eq!(
        q(
            &mut c,
            &["XREAD", "BLOCK", "0", "STREAMS", &b, &a, "0", "1-0"]
        ),
        Value::Array(vec![
            Value::Array(vec![
                bulk(&b),
                Value::Array(vec![entry("7-0", &["f", "b7"])])
            ]),
            Value::Array(vec![
                bulk(&a),
                Value::Array(vec![entry("2-0", &["f", "a2"])])
            ]),
        ])
    );
}

// Pins: a reader with an explicit id larger than the new entry's is not
// served by that XADD (it keeps waiting) while a `$` reader of the same key
// is; a later XADD above its id serves it with that entry only.
#[test]
fn xread_explicit_id_above_new_entry_keeps_waiting() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    q(&mut admin, &["XADD", "s", "1-1", "a", "1"]);
    let high = Pending::blocked(
        &srv,
        &mut admin,
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "100-0"],
        0,
    );
    let dollar = Pending::blocked(
        &srv,
        &mut admin,
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        1,
    );
    assert_eq!(q(&mut admin, &["XADD", "s", "5-0", "f", "v"]), bulk("5-0"));
    assert_eq!(
        dollar.reply(),
        read_reply("s", vec![entry("5-0", &["f", "v"])])
    );
    high.assert_waiting();
    assert_eq!(blocked_clients(&mut admin), 1);
    // Exactly the id it names is not enough either.
    assert_eq!(
        q(&mut admin, &["XADD", "s", "100-0", "f", "eq"]),
        bulk("100-0")
    );
    high.assert_waiting();
    assert_eq!(
        q(&mut admin, &["XADD", "s", "100-1", "f", "w"]),
        bulk("100-1")
    );
    assert_eq!(
        high.reply(),
        read_reply("s", vec![entry("100-1", &["f", "w"])])
    );
    wait_blocked(&mut admin, 0);
}

// ---------------------------------------------------------------------------
// 2. Blocking XREADGROUP
// ---------------------------------------------------------------------------

// Pins: `XREADGROUP GROUP g c BLOCK 0 STREAMS s >` is woken by XADD, gets
// the entry, and the entry is then pending for c (once delivered); a plain
// `$` reader of the same key is served by the same XADD.
#[test]
fn xreadgroup_block_woken_by_xadd_and_entry_pending() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    ok(&mut admin, &["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
    let grp = group_reader(&srv, &mut admin, ("g", "c"), "s", 0);
    let plain = Pending::blocked(
        &srv,
        &mut admin,
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        1,
    );
    grp.assert_waiting();
    assert_eq!(q(&mut admin, &["XADD", "s", "3-0", "f", "v"]), bulk("3-0"));
    let want = read_reply("s", vec![entry("3-0", &["f", "v"])]);
    assert_eq!(grp.reply(), want);
    assert_eq!(plain.reply(), want);
    wait_blocked(&mut admin, 0);

    assert_eq!(
        q(&mut admin, &["XPENDING", "s", "g"]),
        pending_summary(1, "3-0", "3-0", &[("c", 1)])
    );
    let detail = q(&mut admin, &["XPENDING", "s", "g", "-", "+", "10", "c"]);
    let rows = items(&detail);
    assert_eq!(rows.len(), 1);
    let row = items(&rows[0]);
    assert_eq!(
        (&row[0], &row[1], &row[3]),
        (&bulk("3-0"), &bulk("c"), &Value::Int(1))
    );
    let groups = info_maps(&q(&mut admin, &["XINFO", "GROUPS", "s"]));
    assert_eq!(groups[0]["last-delivered-id"], bulk("3-0"));
    assert_eq!(groups[0]["entries-read"], Value::Int(1));
    assert_eq!(groups[0]["lag"], Value::Int(0));
    assert_eq!(int(&mut admin, &["XACK", "s", "g", "3-0"]), 1);
    assert_eq!(q(&mut admin, &["XPENDING", "s", "g"]), no_pending());
}

// Pins: a blocked group reader is served by the XADD that feeds its stream
// before the adder's next command, as Redis serves it: a pipeline XADD +
// XPENDING + XREADGROUP (another consumer of the group) from another client
// sees the entry pending for the blocked consumer, and nothing left for the
// other (bytes recorded from Redis 7.0.15).
#[test]
fn xreadgroup_blocked_reader_is_served_before_the_next_command() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    for round in 0..5 {
        let s_key = format!("s{round}");
        ok(
            &mut admin,
            &["XGROUP", "CREATE", &s_key, "g", "$", "MKSTREAM"],
        );
        let grp = group_reader(&srv, &mut admin, ("g", "c"), &s_key, 0);
        let mut s = srv.tcp();
        let mut pipe = resp(&["XADD", &s_key, "1-0", "f", "v"]);
        pipe.extend(resp(&["XPENDING", &s_key, "g"]));
        pipe.extend(resp(&[
            "XREADGROUP",
            "GROUP",
            "g",
            "other",
            "STREAMS",
            &s_key,
            ">",
        ]));
        s.write_all(&pipe).unwrap();
        raw_expect(
            &mut s,
            b"$3\r\n1-0\r\n*4\r\n:1\r\n$3\r\n1-0\r\n$3\r\n1-0\r\n*1\r\n*2\r\n$1\r\nc\r\n$1\r\n1\r\n*-1\r\n",
        );
        let want = read_reply(&s_key, vec![entry("1-0", &["f", "v"])]);
        assert_eq!(grp.reply(), want, "round {round}");
        wait_blocked(&mut admin, 0);
    }
}

// Pins: two consumers blocked on the same group and one XADD of one entry:
// exactly one of them gets it, the other stays blocked; a second XADD
// serves the other. Each entry is pending for the consumer that got it.
#[test]
fn xreadgroup_two_consumers_one_entry_each() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    ok(&mut admin, &["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
    for round in 0..3 {
        let names = ["c1", "c2"];
        let ps: Vec<Pending> = names
            .iter()
            .enumerate()
            .map(|(i, c)| {
                Pending::blocked(
                    &srv,
                    &mut admin,
                    &[
                        "XREADGROUP",
                        "GROUP",
                        "g",
                        c,
                        "BLOCK",
                        "0",
                        "STREAMS",
                        "s",
                        ">",
                    ],
                    i as i64,
                )
            })
            .collect();
        let id1 = format!("{}-1", round + 1);
        let id2 = format!("{}-2", round + 1);
        assert_eq!(q(&mut admin, &["XADD", "s", &id1, "n", "1"]), bulk(&id1));
        let (first, v) = first_reply(&[&ps[0], &ps[1]]);
        assert_eq!(v, read_reply("s", vec![entry(&id1, &["n", "1"])]));
        let other = 1 - first;
        ps[other].assert_waiting();
        assert_eq!(blocked_clients(&mut admin), 1, "round {round}");
        assert_eq!(q(&mut admin, &["XADD", "s", &id2, "n", "2"]), bulk(&id2));
        assert_eq!(
            ps[other].reply(),
            read_reply("s", vec![entry(&id2, &["n", "2"])])
        );
        wait_blocked(&mut admin, 0);

        // Each one owns what it got.
        let mine = |c: &mut Connection, who: &str| -> Vec<String> {
            entry_ids(&q(c, &["XPENDING", "s", "g", "-", "+", "10", who]))
        };
        assert_eq!(mine(&mut admin, names[first]), vec![id1.clone()]);
        assert_eq!(mine(&mut admin, names[other]), vec![id2.clone()]);
        assert_eq!(
            q(&mut admin, &["XPENDING", "s", "g"]),
            pending_summary(2, &id1, &id2, &[("c1", 1), ("c2", 1)])
        );
        assert_eq!(int(&mut admin, &["XACK", "s", "g", &id1, &id2]), 2);
    }
}

// Pins: Redis serves blocked group readers first blocked, first served: the
// consumer that blocked first gets the entry of a single XADD.
#[test]
fn xreadgroup_first_blocked_is_served_first() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    ok(&mut admin, &["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
    for round in 0..50 {
        let first = group_reader(&srv, &mut admin, ("g", "early"), "s", 0);
        let second = group_reader(&srv, &mut admin, ("g", "late"), "s", 1);
        let id = format!("{}-0", round + 1);
        q(&mut admin, &["XADD", "s", &id, "n", "1"]);
        let (who, v) = first_reply(&[&first, &second]);
        assert_eq!(v, read_reply("s", vec![entry(&id, &["n", "1"])]));
        assert_eq!(
            who, 0,
            "round {round}: the consumer that blocked later got the entry"
        );
        let id2 = format!("{}-1", round + 1);
        q(&mut admin, &["XADD", "s", &id2, "n", "2"]);
        assert_eq!(
            second.reply(),
            read_reply("s", vec![entry(&id2, &["n", "2"])])
        );
        wait_blocked(&mut admin, 0);
    }
}

// Pins: XGROUP DESTROY of the group a reader is blocked on answers it with
// "NOGROUP the consumer group this client was blocked on no longer exists"
// (Redis 7.0.15's text); a plain XREAD blocked on the key stays blocked.
#[test]
fn xreadgroup_blocked_group_destroyed() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    q(&mut admin, &["XADD", "s", "1-1", "a", "1"]);
    ok(&mut admin, &["XGROUP", "CREATE", "s", "g", "$"]);
    ok(&mut admin, &["XGROUP", "CREATE", "s", "keep", "$"]);
    let other = group_reader(&srv, &mut admin, ("keep", "c"), "s", 0);
    let p = group_reader(&srv, &mut admin, ("g", "c"), "s", 1);
    let plain = Pending::blocked(
        &srv,
        &mut admin,
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        2,
    );
    assert_eq!(int(&mut admin, &["XGROUP", "DESTROY", "s", "g"]), 1);
    assert_eq!(
        p.error(),
        "NOGROUP the consumer group this client was blocked on no longer exists"
    );
    other.assert_waiting();
    plain.assert_waiting();
    assert_eq!(blocked_clients(&mut admin), 2);
    q(&mut admin, &["XADD", "s", "2-0", "b", "2"]);
    let want = read_reply("s", vec![entry("2-0", &["b", "2"])]);
    assert_eq!(other.reply(), want);
    assert_eq!(plain.reply(), want);
    wait_blocked(&mut admin, 0);
    assert_eq!(int(&mut admin, &["XLEN", "s"]), 2);
}

// Pins: DEL of the stream a group reader is blocked on answers it with
// "UNBLOCKED the stream key no longer exists" (Redis 7.0.15's text); so
// does UNLINK.
#[test]
fn xreadgroup_blocked_key_deleted() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    for del in ["DEL", "UNLINK"] {
        let p = reader_blocked_on(&srv, &mut admin, "s");
        assert_eq!(int(&mut admin, &[del, "s"]), 1);
        assert_eq!(p.error(), UNBLOCKED, "{del}");
        wait_blocked(&mut admin, 0);
        assert_eq!(int(&mut admin, &["EXISTS", "s"]), 0);
    }
}

// Pins: a group reader is also answered "UNBLOCKED the stream key no
// longer exists" when the stream goes away without DEL: SET over it, RENAME
// or MOVE away, SWAPDB with an empty database (as Redis 7.0.15 does).
#[test]
fn xreadgroup_blocked_stream_replaced_or_moved_away() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let (s, elsewhere) = keys_on_both_shards("gone");
    let away: [&[&str]; 4] = [
        &["SET", &s, "x"],
        &["RENAME", &s, &elsewhere],
        &["MOVE", &s, "1"],
        &["SWAPDB", "0", "1"],
    ];
    for action in away {
        q(&mut admin, &["FLUSHALL"]);
        let p = reader_blocked_on(&srv, &mut admin, &s);
        q(&mut admin, action);
        assert_eq!(p.error(), UNBLOCKED, "{action:?}");
        wait_blocked(&mut admin, 0);
    }
}

// Pins: XREADGROUP blocked over two streams on different shards (each with
// the group) is woken by an XADD to the second and gets that entry, pending
// for it in that stream only; DEL of one of the streams answers it with
// UNBLOCKED, as in Redis 7.0.15.
#[test]
fn xreadgroup_blocked_across_shards() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let (a, b) = keys_on_both_shards("gx");
    for k in [&a, &b] {
        ok(&mut admin, &["XGROUP", "CREATE", k, "g", "$", "MKSTREAM"]);
    }
    let block = [
        "XREADGROUP",
        "GROUP",
        "g",
        "c",
        "BLOCK",
        "0",
        "STREAMS",
        &a,
        &b,
        ">",
        ">",
    ];
    let p = Pending::blocked(&srv, &mut admin, &block, 0);
    p.assert_waiting();
    assert_eq!(q(&mut admin, &["XADD", &b, "2-0", "x", "y"]), bulk("2-0"));
    assert_eq!(p.reply(), read_reply(&b, vec![entry("2-0", &["x", "y"])]));
    assert_eq!(
        q(&mut admin, &["XPENDING", &b, "g"]),
        pending_summary(1, "2-0", "2-0", &[("c", 1)])
    );
    assert_eq!(q(&mut admin, &["XPENDING", &a, "g"]), no_pending());
    wait_blocked(&mut admin, 0);

    let p = Pending::blocked(&srv, &mut admin, &block, 0);
    assert_eq!(q(&mut admin, &["XADD", &a, "5-0", "a", "1"]), bulk("5-0"));
    assert_eq!(p.reply(), read_reply(&a, vec![entry("5-0", &["a", "1"])]));
    wait_blocked(&mut admin, 0);

    let p = Pending::blocked(&srv, &mut admin, &block, 0);
    assert_eq!(int(&mut admin, &["DEL", &a]), 1);
    assert_eq!(p.error(), UNBLOCKED);
    wait_blocked(&mut admin, 0);
    assert_eq!(int(&mut admin, &["XLEN", &b]), 1);
}

// Pins: a stream that expires under a blocked group reader answers it with
// "UNBLOCKED the stream key no longer exists" (Redis 7.0.15 does so within
// ~100 ms of the expiry, when active expiry deletes the key).
#[test]
fn xreadgroup_blocked_stream_expires() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let p = reader_blocked_on(&srv, &mut admin, "s");
    assert_eq!(int(&mut admin, &["PEXPIRE", "s", "50"]), 1);
    assert_eq!(p.error(), UNBLOCKED);
    wait_blocked(&mut admin, 0);
}

// Pins: FLUSHALL and FLUSHDB answer a blocked group reader with "UNBLOCKED
// the stream key no longer exists" (Redis 7.0.15).
#[test]
fn xreadgroup_blocked_flush() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    for flush in ["FLUSHALL", "FLUSHDB"] {
        let p = reader_blocked_on(&srv, &mut admin, "s");
        ok(&mut admin, &[flush]);
        assert_eq!(p.error(), UNBLOCKED, "{flush}");
        wait_blocked(&mut admin, 0);
    }
}

// Pins: in Redis 7.0.15 an XREADGROUP that finds nothing new (blocking or
// not) does not create its consumer: XINFO CONSUMERS stays empty and the
// group counts 0 consumers.
#[test]
fn xreadgroup_finding_nothing_creates_no_consumer() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    q(&mut admin, &["XADD", "s", "1-1", "a", "1"]);
    ok(&mut admin, &["XGROUP", "CREATE", "s", "g", "$"]);
    assert_eq!(
        q(
            &mut admin,
            &["XREADGROUP", "GROUP", "g", "nb", "STREAMS", "s", ">"]
        ),
        Value::Nil
    );
    assert_eq!(
        q(
            &mut admin,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "bl",
                "BLOCK",
                "50",
                "STREAMS",
                "s",
                ">"
            ]
        ),
        Value::Nil
    );
    assert_eq!(
        q(&mut admin, &["XINFO", "CONSUMERS", "s", "g"]),
        Value::Array(vec![])
    );
    let groups = info_maps(&q(&mut admin, &["XINFO", "GROUPS", "s"]));
    assert_eq!(groups[0]["consumers"], Value::Int(0));
}

// ---------------------------------------------------------------------------
// 3. Delivery and claiming across many consumers
// ---------------------------------------------------------------------------

// Pins: 8 consumers reading one group concurrently (XREADGROUP COUNT 7 >
// until nothing is left) get every one of 500 entries exactly once between
// them, each with its own fields; XPENDING's summary counts 500 and its
// per-consumer counts are what each received. After XACK of half and XDEL
// of ten pending entries, XAUTOCLAIM by a new consumer with min-idle 0,
// walked with its cursor until 0-0, claims every remaining pending entry
// exactly once and reports the deleted ones; XPENDING, XINFO CONSUMERS and
// XINFO GROUPS agree, and XGROUP DELCONSUMER answers the claimer's count.
#[test]
fn many_consumers_deliver_once_and_autoclaim_walks_the_pel() {
    const N: usize = 500;
    const CONSUMERS: usize = 8;
    let srv = TestServer::start();
    let mut admin = srv.client();
    let mut pipe = redis::pipe();
    for i in 1..=N {
        pipe.cmd("XADD")
            .arg("s")
            .arg(format!("{i}-0"))
            .arg("n")
            .arg(i);
    }
    let ids: Vec<String> = pipe.query(&mut admin).unwrap();
    let all: Vec<String> = (1..=N).map(|i| format!("{i}-0")).collect();
    assert_eq!(ids, all);
    ok(&mut admin, &["XGROUP", "CREATE", "s", "g", "0"]);
    // Every consumer exists even if another one is always faster.
    for i in 0..CONSUMERS {
        let name = format!("c{i}");
        assert_eq!(
            int(&mut admin, &["XGROUP", "CREATECONSUMER", "s", "g", &name]),
            1
        );
    }

    let (tx, rx) = mpsc::channel();
    for i in 0..CONSUMERS {
        let mut c = srv.client();
        let tx = tx.clone();
        std::thread::spawn(move || {
            let name = format!("c{i}");
            let mut got = Vec::new();
            let mut calls = 0;
            let r = loop {
                calls += 1;
                if calls > 1000 {
                    break Err(format!("{name}: too many calls"));
                }
                match cmd(&[
                    "XREADGROUP",
                    "GROUP",
                    "g",
                    &name,
                    "COUNT",
                    "7",
                    "STREAMS",
                    "s",
                    ">",
                ])
                .query::<Value>(&mut c)
                {
                    Ok(Value::Nil) => break Ok(got),
                    Ok(v) => {
                        let streams = items(&v);
                        assert_eq!(streams.len(), 1);
                        let pair = items(&streams[0]);
                        assert_eq!(pair[0], bulk("s"));
                        let entries = items(&pair[1]);
                        assert!(!entries.is_empty() && entries.len() <= 7);
                        for e in entries {
                            let id = text(&items(e)[0]);
                            let n = id.trim_end_matches("-0").to_string();
                            assert_eq!(items(e)[1], arr(&["n", &n]), "fields of {id}");
                            got.push(id);
                        }
                    }
                    Err(e) => break Err(format!("{name}: {e}")),
                }
            };
            let _ = tx.send((name, r));
        });
    }
    drop(tx);
    let mut per: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for _ in 0..CONSUMERS {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok((name, Ok(got))) => {
                per.insert(name, got);
            }
            Ok((_, Err(e))) => panic!("consumer failed: {e}"),
            Err(_) => panic!("a consumer did not finish"),
        }
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for got in per.values() {
        // Each consumer's entries come in id order.
        let mut sorted = got.clone();
        sorted.sort_by_key(|id| id.trim_end_matches("-0").parse::<u64>().unwrap());
        assert_eq!(&sorted, got);
        for id in got {
            *seen.entry(id.as_str()).or_default() += 1;
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    assert_eq!(seen.len(), N, "delivered {} of {N}", seen.len());

    let owners: Vec<(&str, usize)> = per
        .iter()
        .filter(|(_, got)| !got.is_empty())
        .map(|(c, got)| (c.as_str(), got.len()))
        .collect();
    assert_eq!(
        q(&mut admin, &["XPENDING", "s", "g"]),
        pending_summary(N as i64, "1-0", &format!("{N}-0"), &owners)
    );
    for (c, got) in &per {
        let listed = entry_ids(&q(&mut admin, &["XPENDING", "s", "g", "-", "+", "1000", c]));
        assert_eq!(&listed, got, "XPENDING of {c}");
    }
    let groups = info_maps(&q(&mut admin, &["XINFO", "GROUPS", "s"]));
    assert_eq!(groups[0]["pending"], Value::Int(N as i64));
    assert_eq!(groups[0]["last-delivered-id"], bulk(&format!("{N}-0")));
    assert_eq!(groups[0]["entries-read"], Value::Int(N as i64));
    assert_eq!(groups[0]["lag"], Value::Int(0));

    // XACK the odd entries, in a few commands.
    let odd: Vec<&str> = all.iter().step_by(2).map(String::as_str).collect();
    let mut acked = 0;
    for chunk in odd.chunks(60) {
        let mut args = vec!["XACK", "s", "g"];
        args.extend(chunk);
        acked += int(&mut admin, &args);
    }
    assert_eq!(acked, (N / 2) as i64);
    assert_eq!(int(&mut admin, &["XACK", "s", "g", "1-0", "3-0"]), 0);
    // XDEL ten of the still pending (even) entries.
    let deleted: Vec<String> = (1..=10).map(|i| format!("{}-0", i * 40)).collect();
    let mut args = vec!["XDEL", "s"];
    args.extend(deleted.iter().map(String::as_str));
    assert_eq!(int(&mut admin, &args), 10);
    let remaining: Vec<String> = all
        .iter()
        .skip(1)
        .step_by(2)
        .filter(|id| !deleted.contains(id))
        .cloned()
        .collect();
    assert_eq!(remaining.len(), N / 2 - 10);

    // Walk the PEL with XAUTOCLAIM's cursor.
    let mut cursor = "0-0".to_string();
    let mut claimed = Vec::new();
    let mut reported_deleted = Vec::new();
    let mut calls = 0;
    loop {
        calls += 1;
        assert!(calls <= 100, "XAUTOCLAIM did not finish its walk");
        let v = q(
            &mut admin,
            &["XAUTOCLAIM", "s", "g", "z", "0", &cursor, "COUNT", "13"],
        );
        let parts = items(&v);
        assert_eq!(parts.len(), 3);
        for e in items(&parts[1]) {
            let id = text(&items(e)[0]);
            let n = id.trim_end_matches("-0").to_string();
            assert_eq!(items(e)[1], arr(&["n", &n]));
            claimed.push(id);
        }
        reported_deleted.extend(items(&parts[2]).iter().map(text));
        cursor = text(&parts[0]);
        if cursor == "0-0" {
            break;
        }
    }
    assert!(
        calls > 1,
        "one call claimed everything: the cursor was not used"
    );
    assert_eq!(claimed, remaining, "claimed in id order, each once");
    assert_eq!(reported_deleted, deleted);

    let pending = (N / 2 - 10) as i64;
    assert_eq!(
        q(&mut admin, &["XPENDING", "s", "g"]),
        pending_summary(
            pending,
            "2-0",
            &format!("{N}-0"),
            &[("z", pending as usize)]
        )
    );
    // Claiming counted a delivery: every entry was delivered twice now.
    let rows = q(&mut admin, &["XPENDING", "s", "g", "-", "+", "1000"]);
    assert_eq!(items(&rows).len(), pending as usize);
    for row in items(&rows) {
        let row = items(row);
        assert_eq!((&row[1], &row[3]), (&bulk("z"), &Value::Int(2)));
    }
    let consumers = info_maps(&q(&mut admin, &["XINFO", "CONSUMERS", "s", "g"]));
    let counts: BTreeMap<String, Value> = consumers
        .iter()
        .map(|m| (text(&m["name"]), m["pending"].clone()))
        .collect();
    let mut want: BTreeMap<String, Value> =
        per.keys().map(|c| (c.clone(), Value::Int(0))).collect();
    want.insert("z".into(), Value::Int(pending));
    assert_eq!(counts, want);
    let groups = info_maps(&q(&mut admin, &["XINFO", "GROUPS", "s"]));
    assert_eq!(groups[0]["pending"], Value::Int(pending));
    assert_eq!(groups[0]["consumers"], Value::Int(CONSUMERS as i64 + 1));

    // A second walk finds nothing left to report as deleted and claims the
    // same entries again (still z's).
    let v = q(
        &mut admin,
        &[
            "XAUTOCLAIM",
            "s",
            "g",
            "z",
            "0",
            "0-0",
            "COUNT",
            "1000",
            "JUSTID",
        ],
    );
    let parts = items(&v);
    assert_eq!(parts[0], bulk("0-0"));
    assert_eq!(entry_ids_flat(&parts[1]), remaining);
    assert_eq!(parts[2], Value::Array(vec![]));

    assert_eq!(
        int(&mut admin, &["XGROUP", "DELCONSUMER", "s", "g", "z"]),
        pending
    );
    assert_eq!(
        int(&mut admin, &["XGROUP", "DELCONSUMER", "s", "g", "c0"]),
        0
    );
    assert_eq!(q(&mut admin, &["XPENDING", "s", "g"]), no_pending());
    let groups = info_maps(&q(&mut admin, &["XINFO", "GROUPS", "s"]));
    assert_eq!(groups[0]["pending"], Value::Int(0));
    assert_eq!(groups[0]["consumers"], Value::Int(CONSUMERS as i64 - 1));
    assert_eq!(int(&mut admin, &["XLEN", "s"]), N as i64 - 10);
}

/// A JUSTID list of ids.
fn entry_ids_flat(v: &Value) -> Vec<String> {
    items(v).iter().map(text).collect()
}

// ---------------------------------------------------------------------------
// 4. Streams whose names share prefixes
// ---------------------------------------------------------------------------

fn slot_shard(key: &[u8], shards: usize) -> usize {
    cairn::cluster::shard_of_slot(cairn::cluster::key_slot(key), shards)
}

/// Everything observable about one stream, with XPENDING's idle times
/// (which change as time passes) left out.
fn snapshot(c: &mut Connection, key: &[u8]) -> Vec<(String, Value)> {
    let mut out = vec![
        ("XRANGE".to_string(), qb(c, &[b"XRANGE", key, b"-", b"+"])),
        (
            "XREVRANGE".to_string(),
            qb(c, &[b"XREVRANGE", key, b"+", b"-"]),
        ),
        ("XLEN".to_string(), qb(c, &[b"XLEN", key])),
        ("TYPE".to_string(), qb(c, &[b"TYPE", key])),
        (
            "XINFO STREAM FULL".to_string(),
            qb(c, &[b"XINFO", b"STREAM", key, b"FULL"]),
        ),
        (
            "XINFO GROUPS".to_string(),
            qb(c, &[b"XINFO", b"GROUPS", key]),
        ),
    ];
    for g in [&b"g"[..], b"g1"] {
        let label = String::from_utf8_lossy(g);
        out.push((
            format!("XPENDING {label}"),
            bcmd(&[b"XPENDING", key, g])
                .query::<Value>(c)
                .unwrap_or_else(|e| Value::SimpleString(error_line(&e))),
        ));
        let rows = bcmd(&[b"XPENDING", key, g, b"-", b"+", b"1000"])
            .query::<Value>(c)
            .map(|v| match v {
                Value::Array(rows) => Value::Array(
                    rows.into_iter()
                        .map(|r| match r {
                            Value::Array(mut f) => {
                                f.remove(2);
                                Value::Array(f)
                            }
                            other => other,
                        })
                        .collect(),
                ),
                other => other,
            })
            .unwrap_or_else(|e| Value::SimpleString(error_line(&e)));
        out.push((format!("XPENDING {label} - + 1000"), rows));
        for consumer in [&b"c"[..], b"c1"] {
            let ids = bcmd(&[b"XPENDING", key, g, b"-", b"+", b"1000", consumer])
                .query::<Value>(c)
                .map(|v| Value::Array(items(&v).iter().map(|r| items(r)[0].clone()).collect()))
                .unwrap_or_else(|e| Value::SimpleString(error_line(&e)));
            out.push((
                format!("XPENDING {label} {}", String::from_utf8_lossy(consumer)),
                ids,
            ));
        }
    }
    out
}

/// Builds stream number `i` under `key`: 5 + i entries whose fields name
/// the key, groups g and g1 read from the start by consumers c and c1, and
/// one acknowledged entry in g.
fn build_stream(c: &mut Connection, key: &[u8], i: usize) {
    for n in 1..=5 + i {
        let id = format!("{n}-{i}");
        let v = format!("{n}");
        assert_eq!(
            qb(
                c,
                &[b"XADD", key, id.as_bytes(), b"key", key, b"n", v.as_bytes()]
            ),
            Value::BulkString(id.into_bytes())
        );
    }
    for g in [&b"g"[..], b"g1"] {
        assert_eq!(qb(c, &[b"XGROUP", b"CREATE", key, g, b"0"]), Value::Okay);
    }
    let read = |c: &mut Connection, g: &[u8], consumer: &[u8], count: &[u8]| {
        let v = qb(
            c,
            &[
                b"XREADGROUP",
                b"GROUP",
                g,
                consumer,
                b"COUNT",
                count,
                b"STREAMS",
                key,
                b">",
            ],
        );
        assert_ne!(v, Value::Nil);
    };
    read(c, b"g", b"c", b"2");
    read(c, b"g", b"c1", b"1");
    read(c, b"g1", b"c", b"2");
    read(c, b"g1", b"c1", b"3");
    let first = format!("1-{i}");
    assert_eq!(intb(c, &[b"XACK", key, b"g", first.as_bytes()]), 1);
}

// Pins: streams whose names are prefixes of each other ("st", "st1",
// "st\xff", "st:a", and the same-slot family "{st}", "{st}1", "{st}\xff",
// "{st}:a") never see each other's rows: XDEL, XTRIM MAXLEN 0, XGROUP
// DESTROY, XGROUP DELCONSUMER and finally DEL on any one of them leave every
// other stream exactly as it was (entries, length, XINFO STREAM FULL, XINFO
// GROUPS, XPENDING).
#[test]
fn streams_with_shared_name_prefixes_are_isolated() {
    let names: [&[u8]; 8] = [
        b"st",
        b"st1",
        b"st\xff",
        b"st:a",
        b"{st}",
        b"{st}1",
        b"{st}\xff",
        b"{st}:a",
    ];
    // At least two of the plain names share a shard (4 names, 2 shards),
    // and the tagged ones share a slot.
    let plain_shards: BTreeSet<usize> = names[..4].iter().map(|n| slot_shard(n, 2)).collect();
    assert!(plain_shards.len() < 4);
    let slots: BTreeSet<u16> = names[4..]
        .iter()
        .map(|n| cairn::cluster::key_slot(n))
        .collect();
    assert_eq!(slots.len(), 1);

    let srv = TestServer::start();
    let mut c = srv.client();
    for (t, target) in names.iter().enumerate() {
        q(&mut c, &["FLUSHALL"]);
        for (i, name) in names.iter().enumerate() {
            build_stream(&mut c, name, i);
        }
        let before: Vec<Vec<(String, Value)>> = names.iter().map(|n| snapshot(&mut c, n)).collect();
        let check_others = |c: &mut Connection, step: &str| {
            for (i, name) in names.iter().enumerate() {
                if i == t {
                    continue;
                }
                let now = snapshot(c, name);
                for ((label, was), (_, is)) in before[i].iter().zip(&now) {
                    assert_eq!(
                        is,
                        was,
                        "{label} of {:?} changed after {step} on {:?}",
                        String::from_utf8_lossy(name),
                        String::from_utf8_lossy(target)
                    );
                }
            }
        };
        let len = 5 + t as i64;
        let id = |n: usize| format!("{n}-{t}");

        // XDEL two entries (one pending in both groups).
        assert_eq!(
            intb(
                &mut c,
                &[b"XDEL", target, id(2).as_bytes(), id(4).as_bytes()]
            ),
            2
        );
        assert_eq!(intb(&mut c, &[b"XLEN", target]), len - 2);
        check_others(&mut c, "XDEL");

        assert_eq!(intb(&mut c, &[b"XTRIM", target, b"MAXLEN", b"0"]), len - 2);
        assert_eq!(intb(&mut c, &[b"XLEN", target]), 0);
        assert_eq!(
            qb(&mut c, &[b"XRANGE", target, b"-", b"+"]),
            Value::Array(vec![])
        );
        check_others(&mut c, "XTRIM MAXLEN 0");

        assert_eq!(intb(&mut c, &[b"XGROUP", b"DESTROY", target, b"g"]), 1);
        let groups = info_maps(&qb(&mut c, &[b"XINFO", b"GROUPS", target]));
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0]["name"], bulk("g1"));
        check_others(&mut c, "XGROUP DESTROY");

        // c read 2 entries of g1 (trimming does not touch the PEL).
        assert_eq!(
            intb(&mut c, &[b"XGROUP", b"DELCONSUMER", target, b"g1", b"c"]),
            2
        );
        assert_eq!(
            qb(&mut c, &[b"XPENDING", target, b"g1"]),
            pending_summary(3, &id(3), &id(5), &[("c1", 3)])
        );
        check_others(&mut c, "XGROUP DELCONSUMER");

        assert_eq!(intb(&mut c, &[b"DEL", target]), 1);
        assert_eq!(intb(&mut c, &[b"EXISTS", target]), 0);
        check_others(&mut c, "DEL");

        // A new stream under the name starts empty, without groups.
        assert_eq!(
            qb(&mut c, &[b"XADD", target, b"1-0", b"f", b"v"]),
            bulk("1-0")
        );
        assert_eq!(
            qb(&mut c, &[b"XINFO", b"GROUPS", target]),
            Value::Array(vec![])
        );
        assert_eq!(intb(&mut c, &[b"XLEN", target]), 1);
        check_others(&mut c, "XADD of a new stream");
    }
}

// ---------------------------------------------------------------------------
// 5. Deleting a big stream
// ---------------------------------------------------------------------------

// Pins: DEL of a stream of 100,000 entries with a group and 5,000 pending
// entries answers 1, the key is gone for every stream command right after,
// and the background GC then deletes every sub-key row (INFO cairn's
// sub_rows and gc_pending reach 0). A stream created under the name later
// has no old entries or groups.
#[test]
fn big_stream_delete_and_gc() {
    const N: usize = 100_000;
    let srv = TestServer::start();
    let mut c = srv.client();
    let t = Instant::now();
    let mut i = 1;
    while i <= N {
        let mut pipe = redis::pipe();
        let end = (i + 2_000).min(N + 1);
        for n in i..end {
            pipe.cmd("XADD")
                .arg("big")
                .arg(format!("{n}-0"))
                .arg("f")
                .arg(n);
        }
        let ids: Vec<String> = pipe.query(&mut c).unwrap();
        assert_eq!(ids.len(), end - i);
        assert_eq!(ids.last().unwrap(), &format!("{}-0", end - 1));
        i = end;
    }
    println!("added {N} entries in {:?}", t.elapsed());
    assert_eq!(int(&mut c, &["XLEN", "big"]), N as i64);
    ok(&mut c, &["XGROUP", "CREATE", "big", "g", "0"]);
    for (consumer, count) in [("a", "3000"), ("b", "2000")] {
        let v = q(
            &mut c,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                consumer,
                "COUNT",
                count,
                "STREAMS",
                "big",
                ">",
            ],
        );
        assert_eq!(
            items(&items(&items(&v)[0])[1]).len(),
            count.parse::<usize>().unwrap()
        );
    }
    assert_eq!(
        q(&mut c, &["XPENDING", "big", "g"]),
        pending_summary(5000, "1-0", "5000-0", &[("a", 3000), ("b", 2000)])
    );
    let before = info_cairn(&mut c);
    assert!(
        field(&before, "sub_rows") >= N as u64 + 5000,
        "sub_rows before DEL: {}",
        field(&before, "sub_rows")
    );

    let t = Instant::now();
    assert_eq!(int(&mut c, &["DEL", "big"]), 1);
    println!("DEL of the {N}-entry stream took {:?}", t.elapsed());
    assert_eq!(int(&mut c, &["EXISTS", "big"]), 0);
    assert_eq!(int(&mut c, &["XLEN", "big"]), 0);
    assert_eq!(
        q(&mut c, &["XRANGE", "big", "-", "+", "COUNT", "1"]),
        Value::Array(vec![])
    );
    assert_eq!(err(&mut c, &["XINFO", "STREAM", "big"]), "ERR no such key");
    assert_eq!(
        err(&mut c, &["XPENDING", "big", "g"]),
        "NOGROUP No such key 'big' or consumer group 'g'"
    );
    assert_eq!(int(&mut c, &["DBSIZE"]), 0);

    let start = Instant::now();
    let limit = Duration::from_secs(15);
    loop {
        let info = info_cairn(&mut c);
        if field(&info, "sub_rows") == 0 && field(&info, "gc_pending") == 0 {
            assert!(field(&info, "gc_rows_deleted") >= N as u64 + 5000);
            break;
        }
        assert!(
            start.elapsed() < limit,
            "GC did not finish within {limit:?}: sub_rows={} gc_pending={}",
            field(&info, "sub_rows"),
            field(&info, "gc_pending")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("GC finished within {:?}", start.elapsed());

    assert_eq!(q(&mut c, &["XADD", "big", "1-0", "new", "1"]), bulk("1-0"));
    assert_eq!(int(&mut c, &["XLEN", "big"]), 1);
    assert_eq!(q(&mut c, &["XINFO", "GROUPS", "big"]), Value::Array(vec![]));
    assert_eq!(
        q(&mut c, &["XRANGE", "big", "-", "+"]),
        Value::Array(vec![entry("1-0", &["new", "1"])])
    );
}

// ---------------------------------------------------------------------------
// 6. Streams and keyspace commands
// ---------------------------------------------------------------------------

/// A stream `key` with 6 entries, groups g (c: 3 pending, d: 1 pending,
/// one acknowledged) and h (nothing read).
fn stream_with_groups(c: &mut Connection, key: &str) {
    for n in 1..=6 {
        let id = format!("{n}-0");
        assert_eq!(q(c, &["XADD", key, &id, "f", &n.to_string()]), bulk(&id));
    }
    ok(c, &["XGROUP", "CREATE", key, "g", "0"]);
    ok(c, &["XGROUP", "CREATE", key, "h", "$"]);
    q(
        c,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "COUNT",
            "4",
            "STREAMS",
            key,
            ">",
        ],
    );
    q(
        c,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "d",
            "COUNT",
            "1",
            "STREAMS",
            key,
            ">",
        ],
    );
    assert_eq!(int(c, &["XACK", key, "g", "2-0"]), 1);
}

/// What must survive RENAME, COPY and MOVE.
fn stream_state(c: &mut Connection, key: &str) -> Vec<Value> {
    vec![
        q(c, &["XRANGE", key, "-", "+"]),
        q(c, &["XINFO", "GROUPS", key]),
        q(c, &["XINFO", "STREAM", key, "FULL"]),
        q(c, &["XPENDING", key, "g"]),
        q(c, &["XPENDING", key, "h"]),
    ]
}

// Pins: RENAME of a stream with groups and pending entries (to a key on the
// same shard and to one on the other shard) keeps its entries, groups and
// PEL exactly (XINFO GROUPS, XINFO STREAM FULL and XPENDING equal before and
// after); the old name is gone, and the group carries on under the new
// name (XREADGROUP > continues after the last delivered id, XACK works).
#[test]
fn rename_keeps_groups_and_pel() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let (a, b) = keys_on_both_shards("rn");
    let same = (0..)
        .map(|i| format!("rs{i}"))
        .find(|k| shard_of(k, 2) == shard_of(&a, 2))
        .unwrap();
    stream_with_groups(&mut c, &a);
    let before = stream_state(&mut c, &a);
    assert_eq!(
        q(&mut c, &["XPENDING", &a, "g"]),
        pending_summary(4, "1-0", "5-0", &[("c", 3), ("d", 1)])
    );
    for (from, to) in [(a.as_str(), same.as_str()), (same.as_str(), b.as_str())] {
        ok(&mut c, &["RENAME", from, to]);
        assert_eq!(int(&mut c, &["EXISTS", from]), 0, "{from} after RENAME");
        assert_eq!(err(&mut c, &["XINFO", "GROUPS", from]), "ERR no such key");
        assert_eq!(stream_state(&mut c, to), before, "{from} -> {to}");
    }
    assert_eq!(
        q(
            &mut c,
            &["XREADGROUP", "GROUP", "g", "c", "STREAMS", &b, ">"]
        ),
        read_reply(&b, vec![entry("6-0", &["f", "6"])])
    );
    assert_eq!(int(&mut c, &["XACK", &b, "g", "1-0", "6-0"]), 2);
    assert_eq!(
        q(&mut c, &["XPENDING", &b, "g"]),
        pending_summary(3, "3-0", "5-0", &[("c", 2), ("d", 1)])
    );
    // RENAMENX onto an existing key does nothing.
    q(&mut c, &["XADD", &a, "1-0", "x", "y"]);
    assert_eq!(int(&mut c, &["RENAMENX", &b, &a]), 0);
    assert_eq!(int(&mut c, &["XLEN", &a]), 1);
    assert_eq!(int(&mut c, &["XLEN", &b]), 6);
}

// Pins: a stream renamed onto a key a `$` XREAD reader is blocked on (from
// the other shard) serves that reader, as in Redis.
#[test]
fn rename_wakes_a_blocked_xread() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let (src, target) = keys_on_both_shards("rw");
    q(&mut admin, &["XADD", &src, "1-0", "c", "3"]);
    let p = Pending::blocked(
        &srv,
        &mut admin,
        &["XREAD", "BLOCK", "0", "STREAMS", &target, "$"],
        0,
    );
    ok(&mut admin, &["RENAME", &src, &target]);
    assert_eq!(
        p.reply(),
        read_reply(&target, vec![entry("1-0", &["c", "3"])])
    );
    wait_blocked(&mut admin, 0);
}

// Pins: COPY of a stream (to the other shard, and to db 1) copies entries,
// groups and PEL exactly; the copy and the source are independent after
// (XADD, XACK and XGROUP DESTROY on the copy do not touch the source); COPY
// onto an existing key without REPLACE answers 0.
#[test]
fn copy_duplicates_groups_independently() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let (src, dst) = keys_on_both_shards("cp");
    stream_with_groups(&mut c, &src);
    let before = stream_state(&mut c, &src);
    assert_eq!(int(&mut c, &["COPY", &src, &dst]), 1);
    assert_eq!(stream_state(&mut c, &dst), before);
    assert_eq!(stream_state(&mut c, &src), before);
    assert_eq!(int(&mut c, &["COPY", &src, &dst]), 0);

    q(&mut c, &["XADD", &dst, "7-0", "f", "7"]);
    assert_eq!(int(&mut c, &["XACK", &dst, "g", "1-0", "3-0"]), 2);
    assert_eq!(int(&mut c, &["XGROUP", "DESTROY", &dst, "h"]), 1);
    assert_eq!(stream_state(&mut c, &src), before);
    assert_eq!(
        q(&mut c, &["XPENDING", &dst, "g"]),
        pending_summary(2, "4-0", "5-0", &[("c", 1), ("d", 1)])
    );
    assert_eq!(int(&mut c, &["XLEN", &dst]), 7);

    assert_eq!(int(&mut c, &["COPY", &src, &dst, "REPLACE"]), 1);
    assert_eq!(stream_state(&mut c, &dst), before);

    assert_eq!(int(&mut c, &["COPY", &src, "indb1", "DB", "1"]), 1);
    ok(&mut c, &["SELECT", "1"]);
    assert_eq!(stream_state(&mut c, "indb1"), before);
    ok(&mut c, &["SELECT", "0"]);
    assert_eq!(int(&mut c, &["EXISTS", "indb1"]), 0);
}

// Pins: MOVE of a stream to db 1 takes its entries, groups and PEL along;
// it is gone from db 0; MOVE onto an existing key in db 1 answers 0 and
// changes nothing.
#[test]
fn move_takes_groups_along() {
    let srv = TestServer::start();
    let mut c = srv.client();
    stream_with_groups(&mut c, "m");
    let before = stream_state(&mut c, "m");
    assert_eq!(int(&mut c, &["MOVE", "m", "1"]), 1);
    assert_eq!(int(&mut c, &["EXISTS", "m"]), 0);
    assert_eq!(
        err(&mut c, &["XPENDING", "m", "g"]),
        "NOGROUP No such key 'm' or consumer group 'g'"
    );
    ok(&mut c, &["SELECT", "1"]);
    assert_eq!(stream_state(&mut c, "m"), before);
    // Back to db 0, then a clash: a stream "m" already in db 1.
    assert_eq!(int(&mut c, &["MOVE", "m", "0"]), 1);
    q(&mut c, &["XADD", "m", "1-0", "other", "1"]);
    ok(&mut c, &["SELECT", "0"]);
    assert_eq!(int(&mut c, &["MOVE", "m", "1"]), 0);
    assert_eq!(stream_state(&mut c, "m"), before);
    ok(&mut c, &["SELECT", "1"]);
    assert_eq!(
        q(&mut c, &["XRANGE", "m", "-", "+"]),
        Value::Array(vec![entry("1-0", &["other", "1"])])
    );
    assert_eq!(q(&mut c, &["XINFO", "GROUPS", "m"]), Value::Array(vec![]));
}

/// The wall clock in whole milliseconds, as the server keeps expiry times.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

// Pins: PEXPIRE 100 on a stream with groups: it is there before, gone
// after (EXISTS 0, XLEN 0, XINFO "no such key", XREADGROUP NOGROUP), and
// a new stream under the name has no groups.
#[test]
fn pexpire_removes_the_stream_and_its_groups() {
    let srv = TestServer::start();
    let mut c = srv.client();
    stream_with_groups(&mut c, "e");
    // Measured from before PEXPIRE: the key cannot go before 100 ms of it,
    // counted as the server counts expiry: whole milliseconds of the wall
    // clock. (An Instant can read up to 1 ms less: the server truncates
    // its clock to the millisecond when it sets the expiry time.)
    let start = Instant::now();
    let start_ms = unix_ms();
    assert_eq!(int(&mut c, &["PEXPIRE", "e", "100"]), 1);
    let ttl = int(&mut c, &["PTTL", "e"]);
    assert!((0..=100).contains(&ttl), "PTTL {ttl}");
    while int(&mut c, &["EXISTS", "e"]) == 1 {
        assert!(start.elapsed() < REPLY_WITHIN, "the stream did not expire");
        std::thread::sleep(Duration::from_millis(10));
    }
    let waited = unix_ms() - start_ms;
    assert!(waited >= 100, "gone after {waited} ms");
    assert_eq!(int(&mut c, &["XLEN", "e"]), 0);
    assert_eq!(err(&mut c, &["XINFO", "GROUPS", "e"]), "ERR no such key");
    assert_eq!(
        err(
            &mut c,
            &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "e", ">"]
        ),
        "NOGROUP No such key 'e' or consumer group 'g' in XREADGROUP with GROUP option"
    );
    assert_eq!(q(&mut c, &["XADD", "e", "1-0", "f", "v"]), bulk("1-0"));
    assert_eq!(q(&mut c, &["XINFO", "GROUPS", "e"]), Value::Array(vec![]));
    assert_eq!(int(&mut c, &["PTTL", "e"]), -1);
}

// Pins: SCAN 0 TYPE stream (walked to cursor 0) lists every stream, on
// both shards, and nothing else; TYPE answers "stream".
#[test]
fn scan_type_stream_lists_exactly_the_streams() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let mut streams = BTreeSet::new();
    for i in 0..40 {
        let k = format!("stream:{i}");
        q(&mut c, &["XADD", &k, "1-0", "f", "v"]);
        streams.insert(k);
        q(&mut c, &["SET", &format!("string:{i}"), "v"]);
        q(&mut c, &["RPUSH", &format!("list:{i}"), "v"]);
        q(&mut c, &["HSET", &format!("hash:{i}"), "f", "v"]);
    }
    // An empty stream (everything deleted) is still a stream.
    q(&mut c, &["XADD", "emptied", "1-0", "f", "v"]);
    assert_eq!(int(&mut c, &["XDEL", "emptied", "1-0"]), 1);
    streams.insert("emptied".into());
    ok(
        &mut c,
        &["XGROUP", "CREATE", "grouponly", "g", "$", "MKSTREAM"],
    );
    streams.insert("grouponly".into());
    let shards: BTreeSet<usize> = streams.iter().map(|k| shard_of(k, 2)).collect();
    assert_eq!(shards.len(), 2);

    for count in [None, Some("7")] {
        let mut found = Vec::new();
        let mut cursor = "0".to_string();
        for _ in 0..1000 {
            let mut args = vec!["SCAN", cursor.as_str(), "TYPE", "stream"];
            if let Some(n) = count {
                args.extend(["COUNT", n]);
            }
            let v = q(&mut c, &args);
            let parts = items(&v);
            let next = text(&parts[0]);
            found.extend(items(&parts[1]).iter().map(text));
            cursor = next;
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(cursor, "0", "SCAN did not finish");
        let set: BTreeSet<String> = found.iter().cloned().collect();
        assert_eq!(set.len(), found.len(), "a key listed twice: {found:?}");
        assert_eq!(set, streams, "COUNT {count:?}");
    }
    assert_eq!(
        q(&mut c, &["TYPE", "stream:3"]),
        Value::SimpleString("stream".into())
    );
    assert_eq!(
        q(&mut c, &["TYPE", "emptied"]),
        Value::SimpleString("stream".into())
    );
}

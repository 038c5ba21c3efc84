//! Pub/Sub with several clients: a subscriber that stops reading is
//! disconnected at its output buffer limit (hard, and soft past its
//! seconds) and leaves nothing registered; a client that goes away is
//! unsubscribed; PUBLISH inside EXEC goes out only when the transaction
//! commits (never for one WATCH aborted). Single-connection replies are
//! pinned by the compatibility transcripts (`tests/compat/cases/pubsub*`);
//! redis-py's API is driven in `tests/clients.rs`.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{hello3, int, ok, q, send_raw, text, TestServer};
use redis::Value;

/// Reads until `want` bytes arrived (or fails after the socket timeout).
fn read_exact_bytes(s: &mut TcpStream, want: usize) -> Vec<u8> {
    let mut buf = vec![0u8; want];
    s.read_exact(&mut buf).expect("reply bytes");
    buf
}

/// Polls `f` until it holds, for at most 10 s.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A subscriber that subscribed to `channel` and then stops reading.
fn stalled_subscriber(server: &TestServer, channel: &str) -> TcpStream {
    subscriber(server, channel, false)
}

/// A raw connection subscribed to `channel` (in RESP3 with `resp3`), its
/// confirmation read.
fn subscriber(server: &TestServer, channel: &str, resp3: bool) -> TcpStream {
    let mut sub = server.tcp();
    if resp3 {
        hello3(&mut sub);
    }
    send_raw(&mut sub, &[b"SUBSCRIBE", channel.as_bytes()]);
    let confirm = format!(
        "{}3\r\n$9\r\nsubscribe\r\n${}\r\n{channel}\r\n:1\r\n",
        if resp3 { '>' } else { '*' },
        channel.len()
    );
    assert_eq!(
        read_exact_bytes(&mut sub, confirm.len()),
        confirm.as_bytes()
    );
    sub
}

/// Whether the server closed `s` (after whatever it had queued).
fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

fn numsub(c: &mut redis::Connection, channel: &str) -> i64 {
    match q(c, &["PUBSUB", "NUMSUB", channel]) {
        Value::Array(items) => match items[1] {
            Value::Int(n) => n,
            ref other => panic!("NUMSUB count {other:?}"),
        },
        other => panic!("NUMSUB answered {other:?}"),
    }
}

/// Sets `client-output-buffer-limit` to `limit` and starts a subscriber of
/// `channel` that stops reading; returns a client and the subscriber.
fn limited_subscriber(
    server: &TestServer,
    limit: &str,
    channel: &str,
) -> (redis::Connection, TcpStream) {
    let mut c = server.client();
    ok(
        &mut c,
        &["CONFIG", "SET", "client-output-buffer-limit", limit],
    );
    (c, stalled_subscriber(server, channel))
}

#[test]
fn subscriber_past_the_hard_limit_is_disconnected() {
    let server = TestServer::start();
    let (mut c, mut sub) = limited_subscriber(&server, "pubsub 1mb 0 0", "flood");
    let payload = "x".repeat(64 * 1024);
    // Far more than the socket buffers and the limit together: the
    // subscriber is cut off part way, and later PUBLISHes reach nobody.
    let mut delivered = 0;
    for _ in 0..800 {
        delivered += int(&mut c, &["PUBLISH", "flood", &payload]);
    }
    assert!(delivered < 800, "every message was queued: {delivered}");
    eventually("the subscriber to be unregistered", || {
        numsub(&mut c, "flood") == 0
    });
    assert!(closed_by_server(&mut sub));
    let clients = text(q(&mut c, &["CLIENT", "LIST", "TYPE", "pubsub"]));
    assert_eq!(clients, "");
}

/// A subscriber of `channel` that stops reading, under `pubsub 0 256kb 1`,
/// sent far more than its soft limit at once (200 messages of 64 KiB).
fn over_the_soft_limit(server: &TestServer, channel: &str) -> (redis::Connection, TcpStream) {
    let (mut c, sub) = limited_subscriber(server, "pubsub 0 256kb 1", channel);
    let payload = "y".repeat(64 * 1024);
    for _ in 0..200 {
        int(&mut c, &["PUBLISH", channel, &payload]);
    }
    (c, sub)
}

#[test]
fn subscriber_over_the_soft_limit_too_long_is_disconnected() {
    let server = TestServer::start();
    // Over the soft limit, the client stays until the limit has held for
    // more than a second: the next message after that closes it.
    let (mut c, mut sub) = over_the_soft_limit(&server, "slow");
    // CLIENT LIST shows what waits for it.
    let list = text(q(&mut c, &["CLIENT", "LIST", "TYPE", "pubsub"]));
    assert!(list.contains("flags=P") && list.contains("sub=1"), "{list}");
    let omem: u64 = list
        .split(' ')
        .find_map(|f| f.strip_prefix("omem="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(omem >= 256 * 1024, "omem={omem}");
    std::thread::sleep(Duration::from_millis(2100));
    int(&mut c, &["PUBLISH", "slow", &"y".repeat(64 * 1024)]);
    eventually("the subscriber to be unregistered", || {
        numsub(&mut c, "slow") == 0
    });
    assert!(closed_by_server(&mut sub));
}

// Redis's obuf-limits "soft limit is not enforced too early and is
// enforced when no traffic": the soft limit's time runs out with nothing
// more published, and the subscriber is closed all the same.
#[test]
fn a_soft_limit_runs_out_without_more_traffic() {
    let server = TestServer::start();
    let (mut c, mut sub) = over_the_soft_limit(&server, "quiet");
    // Closed once its second has passed (whole seconds: within two).
    let until = Instant::now() + Duration::from_millis(3000);
    while numsub(&mut c, "quiet") != 0 {
        assert!(Instant::now() < until, "still subscribed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(closed_by_server(&mut sub));
}

#[test]
fn a_client_that_leaves_is_unsubscribed() {
    let server = TestServer::start();
    let mut c = server.client();
    let mut sub = server.tcp();
    send_raw(&mut sub, &[b"SUBSCRIBE", b"a", b"b"]);
    send_raw(&mut sub, &[b"PSUBSCRIBE", b"a*"]);
    send_raw(&mut sub, &[b"SSUBSCRIBE", b"s"]);
    eventually("the subscriptions", || {
        matches!(q(&mut c, &["PUBSUB", "NUMPAT"]), Value::Int(1))
            && matches!(
                q(&mut c, &["PUBSUB", "SHARDNUMSUB", "s"]),
                Value::Array(ref v) if v[1] == Value::Int(1)
            )
    });
    assert_eq!(numsub(&mut c, "a"), 1);
    drop(sub);
    eventually("every subscription to go", || {
        numsub(&mut c, "a") == 0
            && numsub(&mut c, "b") == 0
            && q(&mut c, &["PUBSUB", "NUMPAT"]) == Value::Int(0)
            && q(&mut c, &["PUBSUB", "SHARDCHANNELS"]) == Value::Array(vec![])
    });
    assert_eq!(int(&mut c, &["PUBLISH", "a", "x"]), 0);
}

#[test]
fn publish_in_exec_goes_out_when_the_transaction_commits() {
    let server = TestServer::start();
    let mut c = server.client();
    let mut other = server.client();
    let mut sub = server.tcp();
    send_raw(&mut sub, &[b"SUBSCRIBE", b"events"]);
    let confirm = b"*3\r\n$9\r\nsubscribe\r\n$6\r\nevents\r\n:1\r\n";
    assert_eq!(read_exact_bytes(&mut sub, confirm.len()), confirm);

    // A transaction WATCH aborts publishes nothing.
    ok(&mut c, &["WATCH", "k"]);
    ok(&mut other, &["SET", "k", "changed"]);
    ok(&mut c, &["MULTI"]);
    q(&mut c, &["SET", "k", "mine"]);
    q(&mut c, &["PUBLISH", "events", "lost"]);
    assert_eq!(q(&mut c, &["EXEC"]), Value::Nil);

    // One that commits publishes, with the count of receivers in its reply,
    // and the subscriber then reads what it wrote.
    ok(&mut c, &["MULTI"]);
    q(&mut c, &["SET", "k", "mine"]);
    q(&mut c, &["PUBLISH", "events", "done"]);
    assert_eq!(
        q(&mut c, &["EXEC"]),
        Value::Array(vec![Value::Okay, Value::Int(1)])
    );
    let msg = b"*3\r\n$7\r\nmessage\r\n$6\r\nevents\r\n$4\r\ndone\r\n";
    assert_eq!(read_exact_bytes(&mut sub, msg.len()), msg);
    let mut reader = server.client();
    assert_eq!(
        q(&mut reader, &["GET", "k"]),
        Value::BulkString(b"mine".to_vec())
    );
    // A script's publish goes out the same way.
    assert_eq!(
        int(
            &mut c,
            &["EVAL", "return redis.call('publish', 'events', 'lua')", "0"]
        ),
        1
    );
    let msg = b"*3\r\n$7\r\nmessage\r\n$6\r\nevents\r\n$3\r\nlua\r\n";
    assert_eq!(read_exact_bytes(&mut sub, msg.len()), msg);
}

/// Redis 7.0 writes a RESP3 client's own messages from EXEC inside EXEC's
/// array (a protocol bug Redis 7.2 fixed); cairn sends them after it, as
/// 7.2 does.
#[test]
fn own_messages_from_exec_follow_its_reply_in_resp3() {
    let server = TestServer::start();
    let mut c = subscriber(&server, "me", true);
    for cmd in [
        &[&b"MULTI"[..]][..],
        &[b"PUBLISH", b"me", b"hi"],
        &[b"EXEC"],
    ] {
        send_raw(&mut c, cmd);
    }
    let want = b"+OK\r\n+QUEUED\r\n*1\r\n:1\r\n>3\r\n$7\r\nmessage\r\n$2\r\nme\r\n$2\r\nhi\r\n";
    assert_eq!(
        String::from_utf8_lossy(&read_exact_bytes(&mut c, want.len())),
        String::from_utf8_lossy(want)
    );
    // A script run by the subscriber leaves its subscriptions alone (its
    // session shares the client).
    send_raw(&mut c, &[b"EVAL", b"return redis.call('ping')", b"0"]);
    send_raw(&mut c, &[b"PUBLISH", b"me", b"again"]);
    let want = b"+PONG\r\n>3\r\n$7\r\nmessage\r\n$2\r\nme\r\n$5\r\nagain\r\n:1\r\n";
    assert_eq!(
        String::from_utf8_lossy(&read_exact_bytes(&mut c, want.len())),
        String::from_utf8_lossy(want)
    );
}

/// A RESP3 client blocked in BLPOP still receives its messages.
#[test]
fn a_blocked_resp3_client_gets_its_messages() {
    let server = TestServer::start();
    let mut c = subscriber(&server, "news", true);
    send_raw(&mut c, &[b"BLPOP", b"jobs", b"0"]);
    let mut other = server.client();
    eventually("the client to block", || {
        text(q(&mut other, &["INFO", "clients"])).contains("blocked_clients:1")
    });
    assert_eq!(int(&mut other, &["PUBLISH", "news", "hello"]), 1);
    let msg = b">3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nhello\r\n";
    assert_eq!(read_exact_bytes(&mut c, msg.len()), msg);
    assert_eq!(int(&mut other, &["LPUSH", "jobs", "j1"]), 1);
    let popped = b"*2\r\n$4\r\njobs\r\n$2\r\nj1\r\n";
    assert_eq!(read_exact_bytes(&mut c, popped.len()), popped);
}

/// A command over keys of several shards reports its keyspace events in
/// argument order, as Redis does: the shards' messages go out together, in
/// the order of the steps that made them, once the round has committed.
#[test]
fn cross_shard_keyspace_events_keep_argument_order() {
    let server = TestServer::start();
    let mut c = server.client();
    ok(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Eg$"]);
    // Keys alternating between the two shards.
    let mut keys: Vec<String> = Vec::new();
    let (mut on0, mut on1) = (Vec::new(), Vec::new());
    for i in 0.. {
        let k = format!("key{i}");
        if common::shard_of(&k, 2) == 0 {
            on0.push(k);
        } else {
            on1.push(k);
        }
        if on0.len() >= 10 && on1.len() >= 10 {
            break;
        }
    }
    for (a, b) in on0.into_iter().zip(on1) {
        keys.push(b);
        keys.push(a);
    }
    let mut sub = server.tcp();
    send_raw(
        &mut sub,
        &[b"SUBSCRIBE", b"__keyevent@0__:set", b"__keyevent@0__:del"],
    );
    let mut expect_len = 0;
    for ch in ["__keyevent@0__:set", "__keyevent@0__:del"] {
        expect_len += format!("*3\r\n$9\r\nsubscribe\r\n${}\r\n{ch}\r\n:1\r\n", ch.len()).len();
    }
    read_exact_bytes(&mut sub, expect_len);
    let mut mset: Vec<&str> = vec!["MSET"];
    for k in &keys {
        mset.push(k);
        mset.push("v");
    }
    ok(&mut c, &mset);
    let mut del: Vec<&str> = vec!["DEL"];
    del.extend(keys.iter().map(String::as_str));
    assert_eq!(int(&mut c, &del), keys.len() as i64);
    let mut expected = Vec::new();
    for event in ["set", "del"] {
        let ch = format!("__keyevent@0__:{event}");
        for k in &keys {
            expected.extend_from_slice(
                format!(
                    "*3\r\n$7\r\nmessage\r\n${}\r\n{ch}\r\n${}\r\n{k}\r\n",
                    ch.len(),
                    k.len()
                )
                .as_bytes(),
            );
        }
    }
    let got = read_exact_bytes(&mut sub, expected.len());
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&expected)
    );
}

/// A RESP2 subscriber that unsubscribes from everything while publishers
/// pipeline PUBLISHes at it gets no message after its confirmation (a
/// publisher's batch holds messages until it ends: see `pubsub::Wakes`):
/// the next reply it reads is its own command's.
#[test]
fn a_subscriber_that_leaves_mid_stream_reads_no_message_as_a_reply() {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let server = TestServer::start();
    let stop = Arc::new(AtomicBool::new(false));
    let publishers: Vec<_> = (0..2)
        .map(|_| {
            let (mut p, stop) = (server.tcp(), stop.clone());
            std::thread::spawn(move || {
                let mut batch = Vec::new();
                for _ in 0..16 {
                    cairn::protocol::encode_command(&mut batch, &[b"PUBLISH", b"ch", b"m"]);
                }
                let mut parser = redis::Parser::new();
                while !stop.load(Ordering::Relaxed) {
                    p.write_all(&batch).unwrap();
                    for _ in 0..16 {
                        assert!(matches!(parser.parse_value(&mut p).unwrap(), Value::Int(_)));
                    }
                }
            })
        })
        .collect();
    let mut sub = server.tcp();
    let mut reader = sub.try_clone().unwrap();
    let mut parser = redis::Parser::new();
    let mut next = || parser.parse_value(&mut reader).unwrap();
    let strings = |v: &Value| match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::Int(n) => n.to_string(),
                other => panic!("unexpected element {other:?}"),
            })
            .collect::<Vec<_>>(),
        other => panic!("unexpected reply {other:?}"),
    };
    for _ in 0..40 {
        send_raw(&mut sub, &[b"SUBSCRIBE", b"ch"]);
        assert_eq!(strings(&next()), ["subscribe", "ch", "1"]);
        for _ in 0..3 {
            assert_eq!(strings(&next()), ["message", "ch", "m"]);
        }
        send_raw(&mut sub, &[b"UNSUBSCRIBE"]);
        loop {
            match &strings(&next())[..] {
                [kind, ..] if kind == "message" => continue,
                done => {
                    assert_eq!(done, ["unsubscribe", "ch", "0"]);
                    break;
                }
            }
        }
        send_raw(&mut sub, &[b"PING"]);
        assert_eq!(next(), Value::SimpleString("PONG".into()));
    }
    stop.store(true, Ordering::Relaxed);
    for p in publishers {
        p.join().unwrap();
    }
}

/// A RESP3 client subscribed to the channel it publishes to gets each of
/// its own messages before that PUBLISH's reply, also in a pipeline (its
/// batch does not hold messages to itself).
#[test]
fn own_messages_precede_each_publish_reply_in_a_pipeline() {
    use std::io::Write;
    let server = TestServer::start();
    let mut c = subscriber(&server, "ch", true);
    let mut pipeline = Vec::new();
    for m in [&b"a"[..], b"b", b"c"] {
        cairn::protocol::encode_command(&mut pipeline, &[b"PUBLISH", b"ch", m]);
    }
    c.write_all(&pipeline).unwrap();
    let want: String = ["a", "b", "c"]
        .iter()
        .map(|m| format!(">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\n{m}\r\n:1\r\n"))
        .collect();
    assert_eq!(
        String::from_utf8_lossy(&read_exact_bytes(&mut c, want.len())),
        want
    );
}

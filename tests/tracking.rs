//! Client-side caching across clients and shards: invalidations for
//! writes by others (one shard, a transaction over two shards, expiry by
//! the reaper), after the reply of the client's own write and never with
//! NOLOOP, BCAST prefixes, RESP2 redirection with FLUSHALL's null message
//! and a broken redirection, and tracking-table-max-keys. The exact bytes
//! of each reply are recorded from Redis in the compatibility transcripts;
//! these tests check the flows those single-connection files cannot.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{int, ok, q, TestServer};

fn send(s: &mut TcpStream, args: &[&str]) {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    common::send_raw(s, &args);
}

/// Reads exactly what `want` is, or fails showing what came instead.
fn expect(s: &mut TcpStream, want: &str) {
    let mut got = vec![0u8; want.len()];
    if let Err(e) = s.read_exact(&mut got) {
        panic!("waiting for {want:?}: {e}");
    }
    assert_eq!(String::from_utf8_lossy(&got), want);
}

/// Nothing arrives within `ms`.
fn quiet(s: &mut TcpStream, ms: u64) {
    s.set_read_timeout(Some(Duration::from_millis(ms))).unwrap();
    let mut buf = [0u8; 256];
    match s.read(&mut buf) {
        Ok(n) => panic!("unexpected {:?}", String::from_utf8_lossy(&buf[..n])),
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{e}"
        ),
    }
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
}

fn invalidate(keys: &[&str]) -> String {
    let mut out = format!(">2\r\n$10\r\ninvalidate\r\n*{}\r\n", keys.len());
    for k in keys {
        out.push_str(&format!("${}\r\n{k}\r\n", k.len()));
    }
    out
}

/// A RESP3 connection with tracking on (extra options appended).
fn tracking_client(server: &TestServer, options: &[&str]) -> TcpStream {
    let mut c = server.tcp();
    common::hello3(&mut c);
    let mut cmd = vec!["CLIENT", "TRACKING", "on"];
    cmd.extend_from_slice(options);
    send(&mut c, &cmd);
    expect(&mut c, "+OK\r\n");
    c
}

#[test]
fn writes_by_others_invalidate_once_until_read_again() {
    let server = TestServer::start();
    let mut other = server.client();
    let mut t = tracking_client(&server, &[]);
    send(&mut t, &["MGET", "a", "b"]);
    expect(&mut t, "*2\r\n_\r\n_\r\n");
    ok(&mut other, &["SET", "a", "1"]);
    expect(&mut t, &invalidate(&["a"]));
    // Told once: the key is tracked again only after another read.
    ok(&mut other, &["SET", "a", "2"]);
    quiet(&mut t, 200);
    // A transaction over both shards invalidates each key it changes.
    assert_ne!(common::shard_of("a", 2), common::shard_of("b", 2));
    send(&mut t, &["GET", "a"]);
    expect(&mut t, "$1\r\n2\r\n");
    ok(&mut other, &["MULTI"]);
    q(&mut other, &["SET", "a", "3"]);
    q(&mut other, &["SET", "b", "3"]);
    q(&mut other, &["EXEC"]);
    // In command order across the shards, as Redis sends them.
    expect(&mut t, &(invalidate(&["a"]) + &invalidate(&["b"])));
    // Expiry by the background reaper is a change too.
    send(&mut t, &["GET", "a"]);
    expect(&mut t, "$1\r\n3\r\n");
    assert_eq!(int(&mut other, &["PEXPIRE", "a", "100"]), 1);
    expect(&mut t, &invalidate(&["a"]));
    send(&mut t, &["GET", "a"]);
    expect(&mut t, "$1\r\n3\r\n");
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    expect(&mut t, &invalidate(&["a"]));
}

#[test]
fn own_writes_come_after_the_reply_and_never_with_noloop() {
    let server = TestServer::start();
    let mut t = tracking_client(&server, &[]);
    send(&mut t, &["GET", "k"]);
    expect(&mut t, "_\r\n");
    send(&mut t, &["SET", "k", "v"]);
    expect(&mut t, &format!("+OK\r\n{}", invalidate(&["k"])));

    let mut n = tracking_client(&server, &["NOLOOP"]);
    send(&mut n, &["GET", "k"]);
    expect(&mut n, "$1\r\nv\r\n");
    send(&mut n, &["SET", "k", "w"]);
    expect(&mut n, "+OK\r\n");
    quiet(&mut n, 200);
    // Others' writes still reach it.
    send(&mut n, &["GET", "k"]);
    expect(&mut n, "$1\r\nw\r\n");
    let mut other = server.client();
    ok(&mut other, &["SET", "k", "x"]);
    expect(&mut n, &invalidate(&["k"]));
}

// Pins: a client blocked in BLMOVE and served by another client's push
// gets its reply before the invalidation of the destination its own move
// changed, as in Redis (the order once depended on a race: 1 run in 5-10).
#[test]
fn a_served_blmove_replies_before_its_own_invalidation() {
    // One shard: the pushing client's commit serves the BLMOVE (handoff).
    // Two shards: the woken client retries the move itself.
    let (src, dst) = ("src{t}", "dst{t}");
    assert_eq!(common::shard_of(src, 2), common::shard_of(dst, 2));
    blmove_reply_then_invalidation(src, dst);
    let (src, dst) = ("src{b}", "dst{a}");
    assert_ne!(common::shard_of(src, 2), common::shard_of(dst, 2));
    blmove_reply_then_invalidation(src, dst);
}

fn blmove_reply_then_invalidation(src: &str, dst: &str) {
    let server = TestServer::start();
    let mut other = server.client();
    let mut t = tracking_client(&server, &[]);
    for round in 0..20 {
        assert_eq!(int(&mut other, &["RPUSH", dst, "a"]), round + 1);
        send(&mut t, &["LRANGE", dst, "0", "0"]);
        expect(&mut t, "*1\r\n$1\r\na\r\n");
        send(&mut t, &["BLMOVE", src, dst, "RIGHT", "RIGHT", "0"]);
        common::waiting::wait_blocked(&mut other, 1);
        assert_eq!(int(&mut other, &["RPUSH", src, "foo"]), 1);
        expect(&mut t, &format!("$3\r\nfoo\r\n{}", invalidate(&[dst])));
        // The move appended `foo`: take it off so the destination grows
        // by one `a` a round.
        assert_eq!(
            q(&mut other, &["RPOP", dst]),
            redis::Value::BulkString(b"foo".to_vec())
        );
    }
}

#[test]
fn bcast_prefixes_see_every_matching_key() {
    let server = TestServer::start();
    let mut other = server.client();
    let mut t = tracking_client(&server, &["BCAST", "PREFIX", "user:", "PREFIX", "obj:"]);
    ok(&mut other, &["SET", "user:1", "x"]);
    expect(&mut t, &invalidate(&["user:1"]));
    ok(&mut other, &["SET", "zzz", "x"]);
    quiet(&mut t, 200);
    ok(&mut other, &["SET", "obj:9", "x"]);
    expect(&mut t, &invalidate(&["obj:9"]));
    let stats = common::text(q(&mut other, &["INFO", "stats"]));
    assert!(stats.contains("tracking_total_prefixes:2"), "{stats}");
}

/// The connection's CLIENT ID, as text.
fn client_id(s: &mut TcpStream) -> String {
    send(s, &["CLIENT", "ID"]);
    let mut id = String::new();
    let mut byte = [0u8; 1];
    while !id.ends_with("\r\n") {
        s.read_exact(&mut byte).unwrap();
        id.push(byte[0] as char);
    }
    id.trim_start_matches(':').trim_end().to_string()
}

#[test]
fn resp2_redirection_flush_and_broken_redirect() {
    let server = TestServer::start();
    let mut other = server.client();
    let mut sub = server.tcp();
    let id = client_id(&mut sub);
    send(&mut sub, &["SUBSCRIBE", "__redis__:invalidate"]);
    expect(
        &mut sub,
        "*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n",
    );
    let mut t = server.tcp();
    send(&mut t, &["CLIENT", "TRACKING", "on", "REDIRECT", &id]);
    expect(&mut t, "+OK\r\n");
    send(&mut t, &["GET", "r1"]);
    expect(&mut t, "$-1\r\n");
    ok(&mut other, &["SET", "r1", "1"]);
    expect(
        &mut sub,
        "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$2\r\nr1\r\n",
    );
    ok(&mut other, &["FLUSHALL"]);
    expect(
        &mut sub,
        "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n",
    );
    quiet(&mut sub, 200);
    // The target leaves: the redirection is broken.
    drop(sub);
    std::thread::sleep(Duration::from_millis(100));
    send(&mut t, &["GET", "r2"]);
    expect(&mut t, "$-1\r\n");
    ok(&mut other, &["SET", "r2", "1"]);
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        send(&mut t, &["CLIENT", "GETREDIR"]);
        expect(&mut t, &format!(":{id}\r\n"));
        let list: String = common::text(q(&mut other, &["CLIENT", "LIST"]));
        if list.contains("flags=tR") {
            break;
        }
        assert!(Instant::now() < until, "{list}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// A REDIRECT target that quits takes nothing after its +OK: a change the
// quitting client's reader makes right after reading it finds the
// redirection broken at once (Redis frees a quitting client as soon as
// its reply is written).
#[test]
fn a_target_that_quit_breaks_the_redirection_at_once() {
    let server = TestServer::start();
    let mut other = server.client();
    let mut target = server.tcp();
    let id = client_id(&mut target);
    let mut t = tracking_client(&server, &["REDIRECT", &id]);
    send(&mut t, &["GET", "q"]);
    expect(&mut t, "_\r\n");
    send(&mut target, &["QUIT"]);
    expect(&mut target, "+OK\r\n");
    ok(&mut other, &["SET", "q", "1"]);
    let list: String = common::text(q(&mut other, &["CLIENT", "LIST"]));
    assert!(list.contains("flags=tR"), "{list}");
}

#[test]
fn the_table_is_bounded_by_tracking_table_max_keys() {
    let server = TestServer::start();
    let mut other = server.client();
    ok(
        &mut other,
        &["CONFIG", "SET", "tracking-table-max-keys", "2"],
    );
    let mut t = tracking_client(&server, &[]);
    send(&mut t, &["MGET", "x1", "x2", "x3"]);
    // Remembering the third key evicts one, which is invalidated at once.
    let mut buf = vec![0u8; 256];
    std::thread::sleep(Duration::from_millis(200));
    let n = t.read(&mut buf).unwrap();
    let got = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(got.starts_with("*3\r\n_\r\n_\r\n_\r\n"), "{got:?}");
    assert!(
        got.contains(">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\nx"),
        "{got:?}"
    );
    let stats = common::text(q(&mut other, &["INFO", "stats"]));
    assert!(stats.contains("tracking_total_keys:2"), "{stats}");
    assert_eq!(int(&mut other, &["DBSIZE"]), 0);
    // Lowering the limit evicts at once, with no read to trigger it (Redis's
    // cron does; tracking.tcl "Tracking gets notification on tracking table
    // key eviction" waits for it).
    ok(
        &mut other,
        &["CONFIG", "SET", "tracking-table-max-keys", "1"],
    );
    let n = t.read(&mut buf).unwrap();
    let got = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(
        got.starts_with(">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\nx"),
        "{got:?}"
    );
    let stats = common::text(q(&mut other, &["INFO", "stats"]));
    assert!(stats.contains("tracking_total_keys:1"), "{stats}");
}

/// A client that read keys, then switched to BCAST, hears of them by its
/// prefixes only: one message for the whole MSET, not one per key it had
/// read (Redis's tracking.tcl, "The connection gets invalidation messages
/// about all the keys").
#[test]
fn a_client_switched_to_bcast_gets_one_message_per_write() {
    let server = TestServer::start();
    let mut t = tracking_client(&server, &[]);
    send(&mut t, &["MGET", "a{t}", "b{t}", "c{t}"]);
    expect(&mut t, "*3\r\n_\r\n_\r\n_\r\n");
    send(&mut t, &["CLIENT", "TRACKING", "off"]);
    expect(&mut t, "+OK\r\n");
    send(&mut t, &["CLIENT", "TRACKING", "on", "BCAST"]);
    expect(&mut t, "+OK\r\n");
    let mut other = server.client();
    ok(&mut other, &["MSET", "a{t}", "1", "b{t}", "2", "c{t}", "3"]);
    expect(&mut t, &invalidate(&["a{t}", "b{t}", "c{t}"]));
    quiet(&mut t, 200);
}

/// NOLOOP: a script's writes are its caller's own (Redis's tracking.tcl,
/// "Invalid keys should not be tracked for scripts in NOLOOP mode").
#[test]
fn noloop_covers_the_callers_scripts() {
    let server = TestServer::start();
    let mut n = tracking_client(&server, &["NOLOOP"]);
    send(&mut n, &["SET", "key1", "1"]);
    expect(&mut n, "+OK\r\n");
    send(&mut n, &["GET", "key1"]);
    expect(&mut n, "$1\r\n1\r\n");
    send(
        &mut n,
        &["EVAL", "return redis.call('set', 'key1', '2')", "1", "key1"],
    );
    expect(&mut n, "+OK\r\n");
    send(&mut n, &["GET", "key1"]);
    expect(&mut n, "$1\r\n2\r\n");
    quiet(&mut n, 200);
}

/// NOLOOP covers every write of the client's transactions, also those run
/// one by one because the unit spans shards (Redis's tracking.tcl,
/// "Tracking gets notification of lazy expired keys", whose DEBUG SLEEP
/// also makes the unit run that way). Others' writes still invalidate.
#[test]
fn noloop_covers_transactions_over_several_shards() {
    let server = TestServer::start();
    let (a, b) = ("nl-a", "nl-b");
    let mut b_key = b.to_string();
    for i in 0.. {
        if common::shard_of(&b_key, 2) != common::shard_of(a, 2) {
            break;
        }
        b_key = format!("{b}{i}");
    }
    let mut n = tracking_client(&server, &["BCAST", "NOLOOP"]);
    for (cmd, reply) in [
        (vec!["MULTI"], "+OK\r\n"),
        (vec!["SET", a, "1"], "+QUEUED\r\n"),
        (vec!["SET", &b_key, "1"], "+QUEUED\r\n"),
        (vec!["EXEC"], "*2\r\n+OK\r\n+OK\r\n"),
    ] {
        send(&mut n, &cmd);
        expect(&mut n, reply);
    }
    quiet(&mut n, 200);
    let mut other = server.client();
    ok(&mut other, &["SET", a, "2"]);
    expect(&mut n, &invalidate(&[a]));
}

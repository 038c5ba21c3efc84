//! The wire protocol over raw TCP: large requests arriving in pieces,
//! Redis's exact protocol errors (and the close that follows), inline
//! commands, pipelines mixing inline and multibulk, clients that vanish
//! mid-command or with replies unread, and replies past a client's output
//! buffer limit (the client is closed and gets none of them).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use common::waiting::keys_on_both_shards;
use common::TestServer;

/// A multibulk request.
fn multibulk(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    cairn::protocol::encode_command(&mut out, args);
    out
}

/// Sends `send` and reads exactly `expected.len()` bytes, which must match.
fn exchange(s: &mut TcpStream, send: &[u8], expected: &[u8]) {
    s.write_all(send).unwrap();
    expect(s, expected, send);
}

fn expect(s: &mut TcpStream, expected: &[u8], context: &[u8]) {
    let mut got = vec![0u8; expected.len()];
    let mut n = 0;
    while n < got.len() {
        match s.read(&mut got[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => panic!(
                "reading reply to {:?}: {e} (got {:?})",
                String::from_utf8_lossy(context),
                String::from_utf8_lossy(&got[..n])
            ),
        }
    }
    assert_eq!(
        String::from_utf8_lossy(&got[..n]),
        String::from_utf8_lossy(expected),
        "reply to {:?}",
        String::from_utf8_lossy(context)
    );
}

/// Asserts the server closes the connection (EOF or reset) with nothing more
/// to say.
fn expect_closed(s: &mut TcpStream, context: &[u8]) {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 256];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!(
            "after {:?} the server sent more: {:?}",
            String::from_utf8_lossy(context),
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!(
            "server did not close the connection after {:?}: {e}",
            String::from_utf8_lossy(context)
        ),
    }
}

/// INFO clients' connected_clients, read over a fresh connection (which
/// counts itself).
fn connected_clients(srv: &TestServer) -> u64 {
    let mut s = srv.tcp();
    s.write_all(b"INFO clients\r\n").unwrap();
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    // "$<len>\r\n<len bytes>\r\n"
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed during INFO");
        text.extend_from_slice(&buf[..n]);
        if let Some(nl) = text.windows(2).position(|w| w == b"\r\n") {
            let len: usize = std::str::from_utf8(&text[1..nl]).unwrap().parse().unwrap();
            if text.len() >= nl + 2 + len + 2 {
                break;
            }
        }
    }
    let text = String::from_utf8(text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .expect("connected_clients field")
        .trim()
        .parse()
        .unwrap()
}

/// Waits (bounded) until only `n` clients are connected, counting the probe.
fn wait_for_clients(srv: &TestServer, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = connected_clients(srv);
        if got == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{got} clients still connected, expected {n}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

// Pins: an MSET of 200,000 pairs arriving in 64 KiB pieces is answered +OK
// in bounded time (15 s: debug build on 2 shared cores) and stores every pair.
#[test]
fn huge_mset_in_pieces() {
    let srv = TestServer::start();
    const PAIRS: usize = 200_000;
    let mut req = format!("*{}\r\n$4\r\nMSET\r\n", 1 + 2 * PAIRS).into_bytes();
    for i in 0..PAIRS {
        let k = format!("key:{i}");
        let v = format!("v{i}");
        req.extend_from_slice(format!("${}\r\n{k}\r\n${}\r\n{v}\r\n", k.len(), v.len()).as_bytes());
    }
    let mut s = srv.tcp();
    s.set_read_timeout(Some(Duration::from_secs(18))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(18))).unwrap();
    let started = Instant::now();
    for piece in req.chunks(64 * 1024) {
        s.write_all(piece).unwrap();
    }
    expect(&mut s, b"+OK\r\n", b"MSET of 200000 pairs");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "MSET took {took:?}");
    exchange(&mut s, b"DBSIZE\r\n", b":200000\r\n");
    exchange(&mut s, b"GET key:0\r\n", b"$2\r\nv0\r\n");
    exchange(&mut s, b"GET key:199999\r\n", b"$7\r\nv199999\r\n");
    exchange(
        &mut s,
        b"MGET key:77 key:123456\r\n",
        b"*2\r\n$3\r\nv77\r\n$7\r\nv123456\r\n",
    );
}

// Pins: each malformed request gets Redis 7.0's exact protocol error, the
// connection closes, and data stored before is intact.
#[test]
fn malformed_requests_get_protocol_errors() {
    let srv = TestServer::start();
    let cases: &[(&[u8], &str)] = &[
        (b"*abc\r\n", "invalid multibulk length"),
        (b"*3000000000\r\n", "invalid multibulk length"),
        (b"*1\r\n$-1\r\n", "invalid bulk length"),
        (b"*1\r\n$abc\r\n", "invalid bulk length"),
        (b"*1\r\n$600000000\r\n", "invalid bulk length"),
        (b"*1\r\n:1\r\n", "expected '$', got ':'"),
        (b"*2\r\n$3\r\nGET\r\n+x\r\n", "expected '$', got '+'"),
        (b"SET a \"b\r\n", "unbalanced quotes in request"),
        (b"SET a 'b\r\n", "unbalanced quotes in request"),
        (b"SET a \"b\"c\r\n", "unbalanced quotes in request"),
    ];
    for (i, (bad, msg)) in cases.iter().enumerate() {
        let key = format!("before{i}");
        let mut s = srv.tcp();
        exchange(
            &mut s,
            &multibulk(&[b"SET", key.as_bytes(), b"kept"]),
            b"+OK\r\n",
        );
        let expected = format!("-ERR Protocol error: {msg}\r\n");
        exchange(&mut s, bad, expected.as_bytes());
        expect_closed(&mut s, bad);

        let mut s = srv.tcp();
        exchange(
            &mut s,
            format!("GET {key}\r\n").as_bytes(),
            b"$4\r\nkept\r\n",
        );
    }
    // A valid command ahead of the bad one in the same packet still runs and
    // is answered before the error.
    let mut s = srv.tcp();
    let mut req = multibulk(&[b"SET", b"q", b"v"]);
    req.extend_from_slice(b"*1\r\n$-1\r\n");
    exchange(
        &mut s,
        &req,
        b"+OK\r\n-ERR Protocol error: invalid bulk length\r\n",
    );
    expect_closed(&mut s, &req);
    let mut s = srv.tcp();
    exchange(&mut s, b"GET q\r\n", b"$1\r\nv\r\n");
    exchange(
        &mut s,
        b"DBSIZE\r\n",
        format!(":{}\r\n", cases.len() + 1).as_bytes(),
    );
}

// Pins: inline commands split arguments like Redis (quotes, escapes, extra
// spaces, bare LF, empty lines skipped).
#[test]
fn inline_commands() {
    let srv = TestServer::start();
    let mut s = srv.tcp();
    exchange(&mut s, b"PING\r\n", b"+PONG\r\n");
    exchange(&mut s, b"PING\n", b"+PONG\r\n");
    exchange(&mut s, b"\r\n\n   \r\nPING\r\n", b"+PONG\r\n");
    exchange(&mut s, b"SET a \"b c\"\r\n", b"+OK\r\n");
    exchange(&mut s, b"GET a\r\n", b"$3\r\nb c\r\n");
    exchange(&mut s, b"SET e \"x\\ty\\x41\"\r\n", b"+OK\r\n");
    exchange(&mut s, b"GET e\r\n", b"$4\r\nx\tyA\r\n");
    exchange(&mut s, b"SET s 'it\\'s'\r\n", b"+OK\r\n");
    exchange(&mut s, b"GET s\r\n", b"$4\r\nit's\r\n");
    exchange(&mut s, b"  ECHO   spaced   \r\n", b"$6\r\nspaced\r\n");
    exchange(
        &mut s,
        b"ECHO a b\r\n",
        b"-ERR wrong number of arguments for 'echo' command\r\n",
    );
    exchange(
        &mut s,
        b"FOO bar\r\n",
        b"-ERR unknown command 'FOO', with args beginning with: 'bar' \r\n",
    );
    // Errors that are not protocol errors keep the connection open.
    exchange(&mut s, b"PING\r\n", b"+PONG\r\n");
}

// Pins: a pipeline mixing inline and multibulk requests (and skipped *0 /
// *-1 requests) is answered in order in one go.
#[test]
fn pipelined_inline_and_multibulk() {
    let srv = TestServer::start();
    let mut s = srv.tcp();
    let mut req = Vec::new();
    req.extend_from_slice(b"PING\r\n");
    req.extend_from_slice(&multibulk(&[b"PING"]));
    req.extend_from_slice(b"ECHO hi\r\n");
    req.extend_from_slice(b"*0\r\n*-1\r\n");
    req.extend_from_slice(&multibulk(&[b"ECHO", b"yo"]));
    req.extend_from_slice(b"SET k \"1 2\"\r\n");
    req.extend_from_slice(&multibulk(&[b"APPEND", b"k", b" 3"]));
    req.extend_from_slice(b"GET k\r\n");
    req.extend_from_slice(&multibulk(&[b"INCR", b"n"]));
    req.extend_from_slice(b"INCR n\r\n");
    exchange(
        &mut s,
        &req,
        b"+PONG\r\n+PONG\r\n$2\r\nhi\r\n$2\r\nyo\r\n+OK\r\n:5\r\n$5\r\n1 2 3\r\n:1\r\n:2\r\n",
    );
    // A multibulk request trickling in one byte at a time.
    let req = multibulk(&[b"SET", b"slow", b"value"]);
    for b in &req {
        s.write_all(std::slice::from_ref(b)).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    expect(&mut s, b"+OK\r\n", &req);
    exchange(&mut s, b"GET slow\r\n", b"$5\r\nvalue\r\n");
}

// Pins: a pipeline longer than the server parses ahead, of reads and writes
// on keys of both shards with SELECTs among them, reads each write made
// before it, in its own database, and a later pipeline sees what another
// client wrote in between. (The server parses requests ahead of the one
// running, warms what they will read, and lets a pipeline's reads share a
// snapshot while their shard commits nothing.)
#[test]
fn long_pipelines_read_their_own_writes_in_order() {
    let srv = TestServer::start();
    let (a, b) = keys_on_both_shards("piped");
    let bulk = |v: &str| format!("${}\r\n{v}\r\n", v.len()).into_bytes();
    let mut s = srv.tcp();
    let mut req = Vec::new();
    let mut expected = Vec::new();
    for i in 0..60 {
        let key = if i % 2 == 0 {
            a.as_bytes()
        } else {
            b.as_bytes()
        };
        if i == 30 {
            req.extend_from_slice(&multibulk(&[b"SELECT", b"1"]));
            expected.extend_from_slice(b"+OK\r\n");
        }
        // Each key was last set two rounds ago, in the same database.
        req.extend_from_slice(&multibulk(&[b"GET", key]));
        if i < 2 || i == 30 || i == 31 {
            expected.extend_from_slice(b"$-1\r\n");
        } else {
            expected.extend_from_slice(&bulk(&format!("v{}", i - 2)));
        }
        let value = format!("v{i}");
        req.extend_from_slice(&multibulk(&[b"SET", key, value.as_bytes()]));
        expected.extend_from_slice(b"+OK\r\n");
        req.extend_from_slice(&multibulk(&[b"EXISTS", key]));
        expected.extend_from_slice(b":1\r\n");
    }
    exchange(&mut s, &req, &expected);
    let mut other = srv.tcp();
    exchange(&mut other, &multibulk(&[b"SELECT", b"1"]), b"+OK\r\n");
    exchange(
        &mut other,
        &multibulk(&[b"SET", a.as_bytes(), b"other"]),
        b"+OK\r\n",
    );
    let mut req = multibulk(&[b"GET", a.as_bytes()]);
    req.extend_from_slice(&multibulk(&[b"GET", b.as_bytes()]));
    req.extend_from_slice(&multibulk(&[b"GET", a.as_bytes()]));
    exchange(&mut s, &req, b"$5\r\nother\r\n$3\r\nv59\r\n$5\r\nother\r\n");
    exchange(&mut s, &multibulk(&[b"SELECT", b"0"]), b"+OK\r\n");
    exchange(
        &mut s,
        &multibulk(&[b"GET", a.as_bytes()]),
        b"$3\r\nv28\r\n",
    );
}

// Pins: a client that disconnects in the middle of a command leaves nothing
// behind, and the server keeps serving other clients.
#[test]
fn disconnect_mid_command_leaves_nothing() {
    let srv = TestServer::start();
    let mut other = srv.tcp();
    exchange(&mut other, b"SET keep 1\r\n", b"+OK\r\n");
    let cuts: &[&[u8]] = &[
        b"*3\r\n$3\r\nSE",
        b"*3\r\n$3\r\nSET\r\n$4\r\nhalf\r\n$10\r\nabcde",
        b"*3\r\n$3\r\nSET\r\n$4\r\nhalf\r\n$2\r\nab",
        b"*3\r\n$3\r\nSET\r\n$4\r\nhalf\r\n",
        b"SET half value",
    ];
    for cut in cuts {
        let mut s = srv.tcp();
        s.write_all(cut).unwrap();
        // Let the server read the partial request before the close.
        std::thread::sleep(Duration::from_millis(50));
        drop(s);
        // `other` and the probe itself remain.
        wait_for_clients(&srv, 2);
        exchange(&mut other, b"EXISTS half\r\n", b":0\r\n");
        exchange(&mut other, b"DBSIZE\r\n", b":1\r\n");
    }
    exchange(&mut other, b"PING\r\n", b"+PONG\r\n");
    exchange(&mut other, b"SET half done\r\n", b"+OK\r\n");
    exchange(&mut other, b"GET half\r\n", b"$4\r\ndone\r\n");
}

// Pins: a client that sends 100 pipelined SETs and disconnects without
// reading leaves each key either absent or fully written, in request order,
// and the server stays healthy.
#[test]
fn disconnect_with_unread_replies() {
    let srv = TestServer::start();
    const N: usize = 100;
    let value = vec![b'x'; 1000];
    let mut req = Vec::new();
    for i in 0..N {
        req.extend_from_slice(&multibulk(&[b"SET", format!("p:{i}").as_bytes(), &value]));
    }
    // And a final SET that never completes.
    req.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$5\r\np:end\r\n$1000\r\nxx");
    let mut s = srv.tcp();
    // Answered first, so the client is known to the server before it goes:
    // otherwise the wait below could count clients before it was accepted,
    // and its writes land after the checks (seen once in CI).
    exchange(&mut s, b"CLIENT SETNAME gone\r\n", b"+OK\r\n");
    s.write_all(&req).unwrap();
    let _ = s.shutdown(Shutdown::Both);
    drop(s);
    wait_for_clients(&srv, 1);

    let mut c = srv.tcp();
    // The gone client's last writes may still be queued with the
    // coordinator, which runs commands in order: a write across every
    // shard queued now returns only after them.
    let (a, b) = keys_on_both_shards("barrier:");
    let mset = format!(
        "*5\r\n$4\r\nMSET\r\n${}\r\n{a}\r\n$1\r\n1\r\n${}\r\n{b}\r\n$1\r\n1\r\n",
        a.len(),
        b.len()
    );
    exchange(&mut c, mset.as_bytes(), b"+OK\r\n");
    exchange(&mut c, format!("DEL {a} {b}\r\n").as_bytes(), b":2\r\n");
    let mut applied = Vec::new();
    for i in 0..N {
        c.write_all(format!("STRLEN p:{i}\r\n").as_bytes()).unwrap();
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            c.read_exact(&mut b).unwrap();
            line.push(b[0]);
        }
        match &line[..] {
            b":1000\r\n" => applied.push(true),
            b":0\r\n" => applied.push(false),
            other => panic!("STRLEN p:{i} = {:?}", String::from_utf8_lossy(other)),
        }
    }
    let n = applied.iter().filter(|&&a| a).count();
    assert!(
        applied.iter().take(n).all(|&a| a),
        "applied SETs are not a prefix of the pipeline: {applied:?}"
    );
    exchange(&mut c, b"EXISTS p:end\r\n", b":0\r\n");
    exchange(&mut c, b"DBSIZE\r\n", format!(":{n}\r\n").as_bytes());
    exchange(&mut c, b"SET after 1\r\n", b"+OK\r\n");
    exchange(&mut c, b"GET after\r\n", b"$1\r\n1\r\n");
    let mut others: Vec<TcpStream> = (0..5).map(|_| srv.tcp()).collect();
    for (i, o) in others.iter_mut().enumerate() {
        exchange(
            o,
            format!("ECHO c{i}\r\n").as_bytes(),
            format!("$2\r\nc{i}\r\n").as_bytes(),
        );
    }
}

/// Reads what the server sends until it closes `s`; the bytes read.
fn read_until_closed(s: &mut TcpStream) -> usize {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (mut buf, mut n) = (vec![0u8; 1 << 16], 0);
    loop {
        match s.read(&mut buf) {
            Ok(0) => return n,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return n,
            Err(e) => panic!("the server kept the connection open: {e} ({n} bytes read)"),
        }
    }
}

fn send_inline(s: &mut TcpStream, lines: &str) {
    s.write_all(lines.as_bytes()).unwrap();
}

// Redis's unit/obuf-limits: replies past the normal class's hard limit
// close the client before any of them is sent; a transaction still runs
// whole; a negative-count random pick whose count alone passes the limit
// closes the client instead of building the reply (it once ran the server
// out of memory).
#[test]
fn replies_past_the_output_buffer_limit_close_the_client_unsent() {
    let server = TestServer::start();
    let mut c = server.client();
    common::ok(
        &mut c,
        &[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "normal 100000 0 0",
        ],
    );
    let big = "x".repeat(10_000);
    common::ok(&mut c, &["SET", "bigkey", &big]);

    // Small replies are not limited.
    let mut small = server.tcp();
    send_inline(&mut small, "GET bigkey\r\nPING\r\n");
    let mut got = vec![0u8; "$10000\r\n".len() + 10_000 + 2 + "+PONG\r\n".len()];
    small.read_exact(&mut got).unwrap();
    assert!(got.ends_with(b"+PONG\r\n"));

    // A pipeline whose replies pass the limit: nothing comes back.
    let mut piped = server.tcp();
    let mut lines = String::new();
    for i in 0..15 {
        lines.push_str(&format!(
            "SET {i} {i}\r\nGET {i}\r\nDEL {i}\r\nGET bigkey\r\n"
        ));
    }
    send_inline(&mut piped, &lines);
    assert_eq!(read_until_closed(&mut piped), 0);

    // A transaction runs whole, then its client is closed unanswered.
    let mut tx = server.tcp();
    send_inline(
        &mut tx,
        "SET k1 v1\r\nMULTI\r\nSET k2 v2\r\nMGET bigkey bigkey bigkey bigkey bigkey bigkey bigkey bigkey bigkey bigkey bigkey bigkey\r\nSET k3 v3\r\nDEL k1\r\nEXEC\r\n",
    );
    assert_eq!(read_until_closed(&mut tx), 0);
    assert_eq!(
        common::q(&mut c, &["MGET", "k1", "k2", "k3"]),
        redis::Value::Array(vec![
            redis::Value::Nil,
            common::bulk("v2"),
            common::bulk("v3")
        ])
    );

    // HRANDFIELD with a huge negative count, as Redis's test sends it.
    common::ok(
        &mut c,
        &[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "normal 1000000 0 0",
        ],
    );
    assert_eq!(common::int(&mut c, &["HSET", "myhash", "a", "b"]), 1);
    assert_eq!(common::int(&mut c, &["SADD", "myset", "a"]), 1);
    assert_eq!(common::int(&mut c, &["ZADD", "myzset", "1", "a"]), 1);
    for cmd in [
        "HRANDFIELD myhash",
        "SRANDMEMBER myset",
        "ZRANDMEMBER myzset",
    ] {
        let mut huge = server.tcp();
        send_inline(&mut huge, &format!("{cmd} -999999999\r\n"));
        assert_eq!(read_until_closed(&mut huge), 0, "{cmd}");
    }
    // A missing key answers its empty array; a modest count is served.
    let mut fine = server.tcp();
    send_inline(
        &mut fine,
        "HRANDFIELD nosuch -999999999\r\nSRANDMEMBER myset -3\r\n",
    );
    let want = b"*0\r\n*3\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n";
    let mut got = vec![0u8; want.len()];
    fine.read_exact(&mut got).unwrap();
    assert_eq!(got, want);
    assert_eq!(
        common::q(&mut c, &["PING"]),
        redis::Value::SimpleString("PONG".into())
    );
}

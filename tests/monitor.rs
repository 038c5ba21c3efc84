//! MONITOR: the lines a monitoring client receives for other clients'
//! commands, as Redis 7.0.15 writes them (times and addresses aside):
//! arguments quoted as Redis quotes them, the database after the command,
//! secrets redacted, admin commands hidden, a transaction's commands
//! before its EXEC (none when WATCH aborts it), script calls as `lua`;
//! and what a MONITOR client may still do.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{send_raw, TestServer};

/// Sends a command and reads its reply (up to `want` bytes).
fn call(s: &mut TcpStream, args: &[&[u8]], want: &[u8]) {
    send_raw(s, args);
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(want),
        "{args:?}"
    );
}

/// The next `n` MONITOR lines, with the time and client address replaced
/// by `T` and `ADDR`.
fn lines(m: &mut TcpStream, n: usize) -> Vec<String> {
    let mut text = Vec::new();
    let mut byte = [0u8; 1];
    let deadline = Instant::now() + Duration::from_secs(5);
    while text.iter().filter(|&&b| b == b'\n').count() < n {
        assert!(
            Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&text)
        );
        m.read_exact(&mut byte).unwrap();
        text.push(byte[0]);
    }
    String::from_utf8(text)
        .unwrap()
        .lines()
        .map(|l| {
            let (time, rest) = l.split_once(' ').unwrap();
            assert!(time.starts_with('+') && time.contains('.'), "{l}");
            let rest = rest
                .split(' ')
                .map(|w| {
                    if w.starts_with("127.0.0.1:") {
                        "ADDR]"
                    } else {
                        w
                    }
                })
                .collect::<Vec<_>>()
                .join(" ");
            format!("+T {rest}")
        })
        .collect()
}

#[test]
fn monitor_shows_every_command_as_redis_does() {
    let server = TestServer::start();
    let mut m = server.tcp();
    call(&mut m, &[b"MONITOR"], b"+OK\r\n");
    let mut c = server.tcp();
    call(&mut c, &[b"SET", b"k", b"v with space"], b"+OK\r\n");
    call(&mut c, &[b"SELECT", b"2"], b"+OK\r\n");
    call(&mut c, &[b"GET", b"bin\x00\"q"], b"$-1\r\n");
    call(
        &mut c,
        &[b"AUTH", b"pw"],
        b"-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n",
    );
    call(&mut c, &[b"CONFIG", b"GET", b"maxmemory"], b"*2\r\n");
    let mut rest = [0u8; 22];
    c.read_exact(&mut rest).unwrap();
    call(&mut c, &[b"MULTI"], b"+OK\r\n");
    call(&mut c, &[b"INCR", b"n"], b"+QUEUED\r\n");
    call(&mut c, &[b"EXEC"], b"*1\r\n:1\r\n");
    call(
        &mut c,
        &[b"EVAL", b"redis.call('set','x','1') return 1", b"0"],
        b":1\r\n",
    );
    call(
        &mut c,
        &[b"SET"],
        b"-ERR wrong number of arguments for 'set' command\r\n",
    );
    call(&mut c, &[b"CLIENT", b"SETNAME", b"foo"], b"+OK\r\n");
    assert_eq!(
        lines(&mut m, 10),
        vec![
            "+T [0 ADDR] \"SET\" \"k\" \"v with space\"",
            "+T [2 ADDR] \"SELECT\" \"2\"",
            "+T [2 ADDR] \"GET\" \"bin\\x00\\\"q\"",
            "+T [2 ADDR] \"AUTH\" \"(redacted)\"",
            "+T [2 ADDR] \"MULTI\"",
            "+T [2 ADDR] \"INCR\" \"n\"",
            "+T [2 ADDR] \"EXEC\"",
            "+T [2 ADDR] \"EVAL\" \"redis.call('set','x','1') return 1\" \"0\"",
            "+T [2 lua] \"set\" \"x\" \"1\"",
            "+T [2 ADDR] \"CLIENT\" \"SETNAME\" \"foo\"",
        ]
    );
    // A transaction WATCH aborts shows only its EXEC.
    let mut other = server.tcp();
    call(&mut c, &[b"SELECT", b"0"], b"+OK\r\n");
    call(&mut c, &[b"WATCH", b"w"], b"+OK\r\n");
    call(&mut other, &[b"SET", b"w", b"1"], b"+OK\r\n");
    call(&mut c, &[b"MULTI"], b"+OK\r\n");
    call(&mut c, &[b"SET", b"q", b"1"], b"+QUEUED\r\n");
    call(&mut c, &[b"EXEC"], b"*-1\r\n");
    assert_eq!(
        lines(&mut m, 5),
        vec![
            "+T [0 ADDR] \"SELECT\" \"0\"",
            "+T [0 ADDR] \"WATCH\" \"w\"",
            "+T [0 ADDR] \"SET\" \"w\" \"1\"",
            "+T [0 ADDR] \"MULTI\"",
            "+T [0 ADDR] \"EXEC\"",
        ]
    );
    // The monitor itself: no keys, MONITOR again is ignored, RESET ends it.
    call(
        &mut m,
        &[b"GET", b"k"],
        b"-ERR Replica can't interact with the keyspace\r\n",
    );
    send_raw(&mut m, &[b"MONITOR"]);
    call(&mut m, &[b"PING"], b"+PONG\r\n");
    assert_eq!(lines(&mut m, 1), vec!["+T [0 ADDR] \"PING\""]);
    call(&mut m, &[b"RESET"], b"+RESET\r\n");
    call(&mut m, &[b"GET", b"k"], b"$12\r\nv with space\r\n");
    call(&mut m, &[b"DBSIZE"], b":2\r\n");
    call(&mut c, &[b"MULTI"], b"+OK\r\n");
    call(&mut c, &[b"MONITOR"], b"+QUEUED\r\n");
    call(
        &mut c,
        &[b"EXEC"],
        b"*1\r\n-ERR MONITOR isn't allowed for DENY BLOCKING client\r\n",
    );
}

/// Where Redis 7.0.15 shows scripts and blocking commands among the lines
/// (recorded): a script before the commands it calls, also inside a
/// transaction, whose EXEC comes after all of them; a blocking command
/// when it blocks, before the push that serves it.
#[test]
fn scripts_come_before_their_calls_and_exec_after_its_unit() {
    let server = TestServer::start();
    let mut m = server.tcp();
    call(&mut m, &[b"MONITOR"], b"+OK\r\n");
    let mut c = server.tcp();
    let mut b = server.tcp();
    call(
        &mut c,
        &[
            b"EVAL",
            b"redis.call('set',KEYS[1],ARGV[1])",
            b"1",
            b"foo",
            b"bar",
        ],
        b"$-1\r\n",
    );
    call(&mut c, &[b"MULTI"], b"+OK\r\n");
    call(&mut c, &[b"SET", b"a", b"1"], b"+QUEUED\r\n");
    call(
        &mut c,
        &[b"EVAL", b"return redis.call('get','a')", b"0"],
        b"+QUEUED\r\n",
    );
    call(&mut c, &[b"EXEC"], b"*2\r\n+OK\r\n$1\r\n1\r\n");
    assert_eq!(
        lines(&mut m, 7),
        vec![
            "+T [0 ADDR] \"EVAL\" \"redis.call('set',KEYS[1],ARGV[1])\" \"1\" \"foo\" \"bar\"",
            "+T [0 lua] \"set\" \"foo\" \"bar\"",
            "+T [0 ADDR] \"MULTI\"",
            "+T [0 ADDR] \"SET\" \"a\" \"1\"",
            "+T [0 ADDR] \"EVAL\" \"return redis.call('get','a')\" \"0\"",
            "+T [0 lua] \"get\" \"a\"",
            "+T [0 ADDR] \"EXEC\"",
        ]
    );
    send_raw(&mut b, &[b"BLPOP", b"bl", b"0"]);
    assert_eq!(lines(&mut m, 1), vec!["+T [0 ADDR] \"BLPOP\" \"bl\" \"0\""]);
    call(&mut c, &[b"LPUSH", b"bl", b"x"], b":1\r\n");
    let mut got = [0u8; 19];
    b.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"*2\r\n$2\r\nbl\r\n$1\r\nx\r\n");
    assert_eq!(lines(&mut m, 1), vec!["+T [0 ADDR] \"LPUSH\" \"bl\" \"x\""]);
}

//! CLIENT PAUSE, UNPAUSE and UNBLOCK across connections: what a pause
//! holds and for how long, expiry under a pause, and ending each kind of
//! blocked command early. Replies are Redis 7.0.15's (recorded by hand
//! from Debian's redis-server, where tests/compat/cases/client_pause.txt
//! cannot name a client id).

mod common;

use std::time::{Duration, Instant};

use common::waiting::{wait_blocked, Pending};
use common::{err, expired_keys, int, ok, q, text, TestServer};
use redis::Value;

fn client_id(c: &mut redis::Connection) -> String {
    int(c, &["CLIENT", "ID"]).to_string()
}

/// Starts `args` on a connection of its own and waits until it blocks;
/// returns it with the id of its connection.
fn blocked_in(srv: &TestServer, admin: &mut redis::Connection, args: &[&str]) -> (Pending, String) {
    let mut c = srv.client();
    let id = client_id(&mut c);
    let n = common::waiting::blocked_clients(admin);
    let p = Pending::start_on(c, args);
    wait_blocked(admin, n + 1);
    (p, id)
}

#[test]
fn a_write_pause_holds_writers_while_readers_go_on() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    ok(&mut admin, &["SET", "k", "v1"]);
    ok(&mut admin, &["CLIENT", "PAUSE", "100000", "WRITE"]);
    let writer = Pending::start(&srv, &["SET", "k", "v2"]);
    // The held writer counts as blocked and shows flag b.
    wait_blocked(&mut admin, 1);
    let list = text(q(&mut admin, &["CLIENT", "LIST"]));
    assert!(
        list.lines()
            .any(|l| l.contains("flags=b ") && l.contains("cmd=set ")),
        "{list}"
    );
    // Readers, on other connections and this one, are served meanwhile.
    let mut reader = srv.client();
    for _ in 0..20 {
        assert_eq!(q(&mut reader, &["GET", "k"]), common::bulk("v1"));
    }
    assert_eq!(q(&mut admin, &["EXISTS", "k"]), Value::Int(1));
    writer.assert_waiting();
    ok(&mut admin, &["CLIENT", "UNPAUSE"]);
    assert_eq!(writer.reply(), Value::Okay);
    assert_eq!(q(&mut reader, &["GET", "k"]), common::bulk("v2"));
    wait_blocked(&mut admin, 0);
}

#[test]
fn an_all_pause_holds_everyone_until_its_end() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    let mut other = srv.client();
    let began = Instant::now();
    ok(&mut admin, &["CLIENT", "PAUSE", "400", "ALL"]);
    // Even a read, and the pausing client's own next command (UNPAUSE
    // included, as in Redis 7.0), wait for the end of the pause.
    assert_eq!(q(&mut other, &["GET", "x"]), Value::Nil);
    assert!(
        began.elapsed() >= Duration::from_millis(350),
        "{:?}",
        began.elapsed()
    );
    ok(&mut admin, &["CLIENT", "UNPAUSE"]);
}

#[test]
fn a_second_shorter_pause_keeps_the_later_end() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    ok(&mut admin, &["CLIENT", "PAUSE", "400", "WRITE"]);
    ok(&mut admin, &["CLIENT", "PAUSE", "100", "WRITE"]);
    let began = Instant::now();
    let writer = Pending::start(&srv, &["SET", "k", "v"]);
    assert_eq!(writer.reply(), Value::Okay);
    // Held until the first pause's end, not the second's.
    assert!(
        began.elapsed() >= Duration::from_millis(300),
        "{:?}",
        began.elapsed()
    );
}

#[test]
fn a_write_pause_holds_scripts_that_may_write_and_exec_of_writes() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    ok(&mut admin, &["SET", "k", "1"]);
    // Queued before the pause, EXEC of a write is held when it comes.
    let mut tx = srv.client();
    ok(&mut tx, &["MULTI"]);
    assert_eq!(
        q(&mut tx, &["INCR", "k"]),
        Value::SimpleString("QUEUED".into())
    );
    ok(&mut admin, &["CLIENT", "PAUSE", "100000", "WRITE"]);
    let exec = Pending::start_on(tx, &["EXEC"]);
    let eval = Pending::start(
        &srv,
        &["EVAL", "return redis.call('incr', KEYS[1])", "1", "k"],
    );
    // A script declaring no-writes runs.
    assert_eq!(
        q(
            &mut admin,
            &[
                "EVAL",
                "#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])",
                "1",
                "k"
            ]
        ),
        common::bulk("1")
    );
    wait_blocked(&mut admin, 2);
    exec.assert_waiting();
    eval.assert_waiting();
    ok(&mut admin, &["CLIENT", "UNPAUSE"]);
    let (a, b) = (exec.reply(), eval.reply());
    // Both ran, in some order: k went from 1 to 3.
    let got = [a, b];
    assert!(got.contains(&Value::Int(3)) || got.contains(&Value::Array(vec![Value::Int(3)])));
    assert_eq!(q(&mut admin, &["GET", "k"]), common::bulk("3"));
}

#[test]
fn a_pause_set_inside_a_transaction_starts_after_it() {
    let srv = TestServer::start();
    let mut c = srv.client();
    ok(&mut c, &["MULTI"]);
    q(&mut c, &["SET", "a", "1"]);
    q(&mut c, &["CLIENT", "PAUSE", "100000", "WRITE"]);
    q(&mut c, &["SET", "b", "2"]);
    assert_eq!(
        q(&mut c, &["EXEC"]),
        Value::Array(vec![Value::Okay, Value::Okay, Value::Okay])
    );
    let writer = Pending::start(&srv, &["SET", "c", "3"]);
    writer.assert_waiting();
    ok(&mut c, &["CLIENT", "UNPAUSE"]);
    assert_eq!(writer.reply(), Value::Okay);
}

#[test]
fn keys_do_not_expire_while_writes_are_paused() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let before = expired_keys(&mut c);
    ok(&mut c, &["MULTI"]);
    q(&mut c, &["SET", "foo{t}", "x", "PX", "10"]);
    q(&mut c, &["SET", "bar{t}", "y", "PX", "10"]);
    q(&mut c, &["CLIENT", "PAUSE", "100000", "WRITE"]);
    q(&mut c, &["EXEC"]);
    // Logically expired at once, but nothing is removed: the reaper
    // (every 100 ms) is held too.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(q(&mut c, &["GET", "foo{t}"]), Value::Nil);
    assert_eq!(q(&mut c, &["EXISTS", "bar{t}"]), Value::Int(0));
    assert_eq!(expired_keys(&mut c), before);
    ok(&mut c, &["CLIENT", "UNPAUSE"]);
    // Reading them now deletes them (unless the reaper was first), and
    // either way they are counted by the time the reads reply, as in
    // Redis's pause unit.
    assert_eq!(q(&mut c, &["GET", "foo{t}"]), Value::Nil);
    assert_eq!(q(&mut c, &["GET", "bar{t}"]), Value::Nil);
    assert_eq!(expired_keys(&mut c), before + 2);
}

#[test]
fn client_unblock_ends_each_kind_of_blocked_command() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    const UNBLOCKED: &str = "UNBLOCKED client unblocked via CLIENT UNBLOCK";
    // Redis 7.0.15: 1 when the client was blocked; a timeout gives the
    // command's timeout reply (a nil array for every blocking pop and
    // read, BLMOVE included; 0 for WAIT), ERROR gives -UNBLOCKED.
    let cases: &[(&[&str], Value)] = &[
        (&["BLPOP", "l", "0"], Value::Nil),
        (&["BLMOVE", "l", "m", "LEFT", "LEFT", "0"], Value::Nil),
        (&["BZPOPMIN", "z", "0"], Value::Nil),
        (&["BLMPOP", "0", "1", "l", "LEFT"], Value::Nil),
        (&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"], Value::Nil),
        (&["WAIT", "1", "0"], Value::Int(0)),
    ];
    for (args, timed_out) in cases {
        let (p, id) = blocked_in(&srv, &mut admin, args);
        assert_eq!(int(&mut admin, &["CLIENT", "UNBLOCK", &id]), 1, "{args:?}");
        assert_eq!(&p.reply(), timed_out, "{args:?}");
        let (p, id) = blocked_in(&srv, &mut admin, args);
        assert_eq!(
            int(&mut admin, &["CLIENT", "UNBLOCK", &id, "ERROR"]),
            1,
            "{args:?}"
        );
        assert_eq!(p.error(), UNBLOCKED, "{args:?}");
        // Not blocked any more.
        assert_eq!(int(&mut admin, &["CLIENT", "UNBLOCK", &id]), 0, "{args:?}");
    }
    ok(&mut admin, &["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
    let group_read = [
        "XREADGROUP",
        "GROUP",
        "g",
        "c",
        "BLOCK",
        "0",
        "STREAMS",
        "s",
        ">",
    ];
    let (p, id) = blocked_in(&srv, &mut admin, &group_read);
    assert_eq!(int(&mut admin, &["CLIENT", "UNBLOCK", &id, "TIMEOUT"]), 1);
    assert_eq!(p.reply(), Value::Nil);
    let (p, id) = blocked_in(&srv, &mut admin, &group_read);
    assert_eq!(int(&mut admin, &["CLIENT", "UNBLOCK", &id, "error"]), 1);
    assert_eq!(p.error(), UNBLOCKED);
    // A client that is not blocked, or held by a pause, is not unblocked
    // (Redis 7.2's answer; 7.0.15 crashes on the latter).
    let mut idle = srv.client();
    let idle_id = client_id(&mut idle);
    assert_eq!(int(&mut admin, &["CLIENT", "UNBLOCK", &idle_id]), 0);
    ok(&mut admin, &["CLIENT", "PAUSE", "100000", "WRITE"]);
    let held = Pending::start_on(idle, &["SET", "k", "v"]);
    wait_blocked(&mut admin, 1);
    assert_eq!(int(&mut admin, &["CLIENT", "UNBLOCK", &idle_id]), 0);
    held.assert_waiting();
    ok(&mut admin, &["CLIENT", "UNPAUSE"]);
    assert_eq!(held.reply(), Value::Okay);
    assert_eq!(
        err(&mut admin, &["CLIENT", "UNBLOCK", &idle_id, "later"]),
        "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"
    );
}

#[test]
fn an_unblocked_resp3_pop_replies_a_resp3_null() {
    use std::io::Read;
    let srv = TestServer::start();
    let mut admin = srv.client();
    let mut raw = srv.tcp();
    common::hello3(&mut raw);
    common::send_raw(&mut raw, &[b"CLIENT", b"ID"]);
    let mut line = [0u8; 64];
    let n = raw.read(&mut line).unwrap();
    let id = String::from_utf8_lossy(&line[1..n - 2]).into_owned();
    common::send_raw(&mut raw, &[b"BLPOP", b"l", b"0"]);
    wait_blocked(&mut admin, 1);
    assert_eq!(int(&mut admin, &["CLIENT", "UNBLOCK", &id]), 1);
    let mut reply = [0u8; 16];
    let n = raw.read(&mut reply).unwrap();
    assert_eq!(&reply[..n], b"_\r\n");
}

//! Helpers for tests of blocked clients (tests/blocking.rs, tests/streams.rs):
//! commands run on their own connection and thread, and the server's count
//! of blocked clients.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

use super::{cmd, error_line, shard_of, TestServer};

/// How long a reply that should come may take.
pub const REPLY_WITHIN: Duration = Duration::from_secs(5);

/// How long a client that should stay blocked is watched.
pub const STILL_WAITING: Duration = Duration::from_millis(300);

pub fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("expected a bulk string, got {other:?}"),
    }
}

/// Two key names starting with `prefix`, the first on shard 0 and the second
/// on shard 1 of a 2-shard server.
pub fn keys_on_both_shards(prefix: &str) -> (String, String) {
    let mut on = [None, None];
    for i in 0.. {
        let k = format!("{prefix}{i}");
        let s = shard_of(&k, 2);
        if on[s].is_none() {
            on[s] = Some(k);
        }
        if on.iter().all(Option::is_some) {
            break;
        }
    }
    let [a, b] = on;
    (a.unwrap(), b.unwrap())
}

/// INFO clients' blocked_clients.
pub fn blocked_clients(c: &mut Connection) -> i64 {
    let info: String = cmd(&["INFO", "clients"]).query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .unwrap_or_else(|| panic!("no blocked_clients in {info:?}"))
        .trim()
        .parse()
        .unwrap()
}

/// Waits until blocked_clients is `n`.
pub fn wait_blocked(c: &mut Connection, n: i64) {
    let deadline = Instant::now() + REPLY_WITHIN;
    loop {
        let now = blocked_clients(c);
        if now == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "blocked_clients stayed {now}, expected {n}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A command running on its own connection and thread.
pub struct Pending {
    /// The command, for messages.
    pub args: Vec<String>,
    rx: mpsc::Receiver<(Result<Value, String>, Duration)>,
}

impl Pending {
    /// Sends `args` on a new connection from another thread.
    pub fn start(srv: &TestServer, args: &[&str]) -> Pending {
        Self::start_on(srv.client(), args)
    }

    /// Sends `args` on `c` from another thread.
    pub fn start_on(mut c: Connection, args: &[&str]) -> Pending {
        let owned: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let (tx, rx) = mpsc::channel();
        let sent = owned.clone();
        std::thread::spawn(move || {
            let argv: Vec<&str> = sent.iter().map(String::as_str).collect();
            let t0 = Instant::now();
            let r = cmd(&argv)
                .query::<Value>(&mut c)
                .map_err(|e| error_line(&e));
            let _ = tx.send((r, t0.elapsed()));
        });
        Pending { args: owned, rx }
    }

    /// Starts `args` and waits until the server counts it as blocked (the
    /// blocked count goes from `before` to `before + 1`).
    pub fn blocked(
        srv: &TestServer,
        admin: &mut Connection,
        args: &[&str],
        before: i64,
    ) -> Pending {
        let p = Self::start(srv, args);
        wait_blocked(admin, before + 1);
        p
    }

    /// The reply, which must come within a few seconds.
    pub fn reply(&self) -> Value {
        self.reply_timed().0
    }

    pub fn reply_timed(&self) -> (Value, Duration) {
        match self.rx.recv_timeout(REPLY_WITHIN) {
            Ok((Ok(v), t)) => (v, t),
            Ok((Err(e), _)) => panic!("{:?} failed: {e}", self.args),
            Err(_) => panic!("{:?} got no reply within {REPLY_WITHIN:?}", self.args),
        }
    }

    /// The error the command must fail with.
    pub fn error(&self) -> String {
        match self.rx.recv_timeout(REPLY_WITHIN) {
            Ok((Err(e), _)) => e,
            Ok((Ok(v), _)) => panic!("{:?} answered {v:?}, expected an error", self.args),
            Err(_) => panic!("{:?} got no reply within {REPLY_WITHIN:?}", self.args),
        }
    }

    /// Asserts that no reply arrives for a while.
    pub fn assert_waiting(&self) {
        if let Ok(r) = self.rx.recv_timeout(STILL_WAITING) {
            panic!(
                "{:?} answered {r:?}, expected it to keep waiting",
                self.args
            );
        }
    }

    /// The reply if one has arrived, without waiting.
    pub fn try_reply(&self) -> Option<Value> {
        match self.rx.try_recv() {
            Ok((Ok(v), _)) => Some(v),
            Ok((Err(e), _)) => panic!("{:?} failed: {e}", self.args),
            Err(_) => None,
        }
    }
}

/// Waits for the first of `ps` to reply; returns its index and reply.
pub fn first_reply(ps: &[&Pending]) -> (usize, Value) {
    let deadline = Instant::now() + REPLY_WITHIN;
    loop {
        for (i, p) in ps.iter().enumerate() {
            if let Some(v) = p.try_reply() {
                return (i, v);
            }
        }
        assert!(Instant::now() < deadline, "none of {} replied", ps.len());
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A RESP array of bulk strings.
pub fn resp(args: &[&str]) -> Vec<u8> {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let mut out = Vec::new();
    cairn::protocol::encode_command(&mut out, &args);
    out
}

/// Reads exactly `expected.len()` bytes from a raw connection and
/// compares them with `expected`.
pub fn raw_expect(s: &mut std::net::TcpStream, expected: &[u8]) {
    let mut got = vec![0u8; expected.len()];
    std::io::Read::read_exact(s, &mut got).expect("reply bytes");
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(expected)
    );
}

/// BUSY while a script runs past busy-reply-threshold.
pub const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

/// Waits until another client gets BUSY (a script has passed the
/// threshold).
pub fn wait_busy(c: &mut Connection) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match cmd(&["GET", "probe"]).query::<Value>(c) {
            Err(e) if error_line(&e) == BUSY => return,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no BUSY reply while a script loops"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SCRIPT KILL answers OK and `running` fails as killed.
pub fn script_kill(admin: &mut Connection, running: &Pending) {
    let reply = cmd(&["SCRIPT", "KILL"]).query::<Value>(admin).unwrap();
    assert_eq!(reply, Value::Okay);
    let e = running.error();
    assert!(
        e.starts_with("ERR Script killed by user with SCRIPT KILL..."),
        "{e}"
    );
}

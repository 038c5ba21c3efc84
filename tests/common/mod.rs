//! Test support: a real cairn server on 127.0.0.1 with a temporary data
//! directory, running on its own thread and runtime, stopped on drop.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

pub mod cluster;
pub mod etcd;
pub mod process;
pub mod real_redis;
pub mod waiting;

use cairn::config::{Config, Durability};
use redis::{Connection, RedisError, Value};

/// A redis-rs connection to a server on 127.0.0.1:`port` (5 s to
/// connect, 10 s to read a reply).
pub fn connect(port: u16) -> redis::Connection {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let conn = c
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("redis connection");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn
}

/// A running server.
pub struct TestServer {
    /// The port it listens on.
    pub port: u16,
    /// Path of the data directory.
    pub path: PathBuf,
    server: std::sync::Arc<cairn::server::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Its data directory, kept alive for the server's life: declared
    /// last so that it is deleted after the server (its shards' stores,
    /// whose background writers may still be writing files there) drops.
    pub dir: Option<tempfile::TempDir>,
}

impl TestServer {
    /// Starts a server with the default test settings (2 shards, everysec).
    pub fn start() -> TestServer {
        Self::start_with(|_| {})
    }

    /// Starts a server after letting `tweak` change the config.
    pub fn start_with(tweak: impl FnOnce(&mut Config)) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().to_path_buf();
        let mut s = Self::start_in(path, tweak);
        s.dir = Some(dir);
        s
    }

    /// Starts a server on an existing directory.
    pub fn start_in(path: PathBuf, tweak: impl FnOnce(&mut Config)) -> TestServer {
        let mut cfg = Config::defaults();
        cfg.port = 0;
        cfg.dir = path.clone();
        cfg.shards = 2;
        cfg.durability = Durability::Everysec;
        tweak(&mut cfg);
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = cairn::run::runtime_builder(Some(2)).build().unwrap();
            rt.block_on(async move {
                let running = cairn::run::start(cfg).await.expect("server starts");
                tx.send((running.addr.port(), running.server.clone()))
                    .unwrap();
                running.serve().await;
            });
        });
        let (port, server) = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("server started");
        TestServer {
            port,
            dir: None,
            path,
            server,
            thread: Some(thread),
        }
    }

    /// The server's shared state, for tests that look inside.
    pub fn server(&self) -> &std::sync::Arc<cairn::server::Server> {
        &self.server
    }

    /// A plain TCP connection with read/write timeouts.
    pub fn tcp(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    /// A redis-rs client connection.
    pub fn client(&self) -> redis::Connection {
        connect(self.port)
    }

    /// Stops the server cleanly and waits for it.
    pub fn stop(mut self) -> Option<tempfile::TempDir> {
        self.shutdown();
        self.dir.take()
    }

    fn shutdown(&mut self) {
        if let Some(t) = self.thread.take() {
            self.server.request_shutdown();
            let _ = t.join();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

// Shared client helpers for the integration tests.

/// Builds a command from string arguments.
pub fn cmd(args: &[&str]) -> redis::Cmd {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c
}

/// Runs a command and returns its reply as a `Value`.
pub fn q(c: &mut Connection, args: &[&str]) -> Value {
    cmd(args)
        .query(c)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Runs a command that must fail and returns the full error line, e.g.
/// "ERR no such key".
pub fn err(c: &mut Connection, args: &[&str]) -> String {
    match cmd(args).query::<Value>(c) {
        Ok(v) => panic!("{args:?} answered {v:?}, expected an error"),
        Err(e) => error_line(&e),
    }
}

/// The full error line of a server error, e.g. "ERR no such key"; other
/// failures as the client describes them.
pub fn error_line(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        // Not a server error (an I/O failure, a timeout): as the client says.
        _ => e.to_string(),
    }
}

/// Runs a command that replies with an integer.
pub fn int(c: &mut Connection, args: &[&str]) -> i64 {
    cmd(args)
        .query(c)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Runs a command that must reply +OK.
pub fn ok(c: &mut Connection, args: &[&str]) {
    assert_eq!(q(c, args), Value::Okay, "{args:?}");
}

/// A bulk-string reply value.
pub fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// An array reply of bulk strings.
pub fn arr(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|s| bulk(s)).collect())
}

/// The shard `key` lives on with `shards` shards.
pub fn shard_of(key: &str, shards: usize) -> usize {
    cairn::cluster::shard_of_slot(cairn::cluster::key_slot(key.as_bytes()), shards)
}

/// The numeric fields of `INFO cairn`.
pub fn info_cairn(c: &mut Connection) -> HashMap<String, u64> {
    let text: String = cmd(&["INFO", "cairn"]).query(c).unwrap();
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse::<u64>().ok()?)))
        .collect()
}

/// INFO stats' `expired_keys`: keys removed because they expired, by the
/// reaper or by an access.
pub fn expired_keys(c: &mut Connection) -> u64 {
    let text: String = cmd(&["INFO", "stats"]).query(c).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("expired_keys:"))
        .expect("INFO stats has expired_keys")
        .trim()
        .parse()
        .unwrap()
}

/// One field of [`info_cairn`]'s map; panics if it is missing.
pub fn field(info: &HashMap<String, u64>, name: &str) -> u64 {
    *info
        .get(name)
        .unwrap_or_else(|| panic!("INFO cairn has no {name}: {info:?}"))
}

/// Sends one command on a raw connection, as a RESP array of bulk strings.
pub fn send_raw(s: &mut TcpStream, args: &[&[u8]]) {
    use std::io::Write;
    let mut out = Vec::new();
    cairn::protocol::encode_command(&mut out, args);
    s.write_all(&out).unwrap();
}

/// Reads from `raw` until `want`'s length has come, and checks it is `want`.
pub fn read_exactly(raw: &mut TcpStream, want: &[u8]) {
    use std::io::Read;
    let mut got = Vec::new();
    let mut chunk = [0u8; 512];
    while got.len() < want.len() {
        let n = raw.read(&mut chunk).unwrap();
        assert!(
            n > 0,
            "connection closed after {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
}

/// Switches a raw connection to RESP3 (HELLO 3) and reads HELLO's map.
pub fn hello3(s: &mut TcpStream) {
    use std::io::Read;
    send_raw(s, &[b"HELLO", b"3"]);
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !seen.ends_with(b"modules\r\n*0\r\n") {
        s.read_exact(&mut byte).unwrap();
        seen.push(byte[0]);
    }
}

/// A bulk or verbatim string reply as text (INFO, CLIENT LIST).
pub fn text(v: Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8(b).unwrap(),
        Value::VerbatimString { text, .. } => text,
        other => panic!("not a string reply: {other:?}"),
    }
}

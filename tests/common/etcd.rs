//! Test support: a real single-member etcd on two free loopback ports with a
//! temporary data directory, killed on drop. It can be stopped and started
//! again on the same ports and data, for tests of nodes outliving etcd.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running (or stopped) etcd server.
pub struct TestEtcd {
    /// "127.0.0.1:port" of its client API, for `Etcd::new`.
    pub endpoint: String,
    peer_port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl TestEtcd {
    /// Starts etcd and waits until it answers; panics if it does not within
    /// 10 seconds (with its log, to see why).
    pub fn start() -> TestEtcd {
        let mut etcd = TestEtcd {
            endpoint: format!("127.0.0.1:{}", free_port()),
            peer_port: free_port(),
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
        };
        etcd.start_again();
        etcd
    }

    /// Kills etcd and waits for it to exit; its ports and data remain for
    /// `start_again`.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd (again) on the same ports and data directory, and waits
    /// until it answers. Does nothing if it is running.
    pub fn start_again(&mut self) {
        if self.child.is_some() {
            return;
        }
        let client = format!("http://{}", self.endpoint);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.log_path()).expect("etcd log file");
        let child = Command::new(etcd_binary())
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("default={peer}")])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("etcd log file"))
            .stderr(log)
            .spawn()
            .expect("etcd starts (is etcd-server installed?)");
        self.child = Some(child);
        self.wait_healthy();
    }

    /// Compacts the store's history up to `revision`, so watches from before
    /// it are cancelled.
    pub fn compact(&self, revision: i64) {
        let body = format!("{{\"revision\":\"{revision}\"}}");
        let reply = http(&self.endpoint, "POST", "/v3/kv/compaction", &body);
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    /// Polls /health until etcd reports itself healthy (it has a leader).
    fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if healthy(&self.endpoint) {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("etcd exited with {status}:\n{}", read_log(&self.log_path()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop();
        panic!(
            "etcd did not answer within 10 s:\n{}",
            read_log(&self.log_path())
        );
    }
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// /usr/bin/etcd (Debian's etcd-server) if present, else `etcd` on PATH.
fn etcd_binary() -> &'static str {
    if Path::new("/usr/bin/etcd").exists() {
        "/usr/bin/etcd"
    } else {
        "etcd"
    }
}

/// A loopback port nothing listens on right now. Another process could take
/// it before etcd binds it; on a test machine that is rare enough.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().unwrap().port()
}

/// Whether GET /health answers `"health":"true"`.
fn healthy(endpoint: &str) -> bool {
    http(endpoint, "GET", "/health", "").contains("\"health\":\"true\"")
}

/// One blocking HTTP/1.1 request; the whole response, or "" on failure.
fn http(endpoint: &str, method: &str, path: &str, body: &str) -> String {
    let Ok(mut stream) = TcpStream::connect(endpoint) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {endpoint}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let mut reply = String::new();
    if stream.write_all(request.as_bytes()).is_ok() {
        let _ = stream.read_to_string(&mut reply);
    }
    reply
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

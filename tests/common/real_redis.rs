//! A real redis-server for tests that need Redis itself on the other end
//! (moving data both ways, replication).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::Connection;

/// A redis-server 7.0 on a free loopback port, without persistence,
/// killed on drop. It is installed with apt-get when missing, as the
/// compatibility recorder does.
pub struct RealRedis {
    /// Its port on 127.0.0.1.
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl RealRedis {
    /// A redis-server with no data.
    pub fn start() -> RealRedis {
        Self::start_from(None)
    }

    /// A redis-server that loads `file` at start.
    pub fn start_with_file(file: &std::path::Path) -> RealRedis {
        Self::start_from(Some(file))
    }

    fn start_from(file: Option<&std::path::Path>) -> RealRedis {
        if Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            let _ = Command::new("apt-get")
                .args(["install", "-y", "-qq", "redis-server"])
                .stdout(Stdio::null())
                .status();
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        if let Some(f) = file {
            std::fs::copy(f, dir.path().join("dump.rdb")).unwrap();
        }
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (Debian package redis-server) must be installed");
        let r = RealRedis {
            port,
            child,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        // Up and done loading.
        loop {
            assert!(Instant::now() < deadline, "redis-server did not start");
            if let Ok(c) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) {
                if let Ok(mut conn) = c.get_connection() {
                    if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                        break;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        r
    }

    /// Its data directory.
    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// A connection to it.
    pub fn client(&self) -> Connection {
        let c = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).unwrap();
        c.get_connection_with_timeout(Duration::from_secs(5))
            .unwrap()
    }
}

impl Drop for RealRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

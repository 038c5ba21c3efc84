//! A cairn binary run as a process of its own, for tests that kill it
//! (SIGKILL) and start it again on the same data directory.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use redis::{Connection, Value};

/// A free loopback port (bound, read, released).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    l.local_addr().unwrap().port()
}

/// Waits up to `limit` for a child to exit.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A cairn process; SIGKILLed on drop if still running.
pub struct Proc {
    /// The process.
    pub child: Child,
    /// The port it listens on.
    pub port: u16,
}

impl Proc {
    /// Spawns the binary on `data` with 2 shards and `durability` (plus
    /// `extra` arguments), in `cwd` so that no ./config.toml is picked up;
    /// does not wait for it.
    pub fn spawn<S: AsRef<OsStr>>(
        cwd: &Path,
        data: &Path,
        port: u16,
        stderr: Stdio,
        durability: &str,
        extra: &[S],
    ) -> Proc {
        let child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .current_dir(cwd)
            .args(["--port", &port.to_string()])
            .arg("--dir")
            .arg(data)
            .args(["--shards", "2", "--durability", durability])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn cairn");
        Proc { child, port }
    }

    /// Waits (at most 30 s) until it answers PING.
    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("cairn exited before answering PING: {status}");
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut buf = [0u8; 7];
                if s.write_all(b"PING\r\n").is_ok()
                    && s.read_exact(&mut buf).is_ok()
                    && &buf == b"+PONG\r\n"
                {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "cairn did not answer PING within 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A client connection, with 10 s timeouts.
    pub fn client(&self) -> Connection {
        let conn = super::connect(self.port);
        conn.set_write_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        conn
    }

    /// Whether the process has exited on its own.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SHUTDOWN, then wait (at most 20 s) for the exit status.
    pub fn shutdown(&mut self) -> ExitStatus {
        let mut c = self.client();
        let _ = redis::cmd("SHUTDOWN").query::<Value>(&mut c);
        wait_exit(&mut self.child, Duration::from_secs(20)).expect("cairn exits after SHUTDOWN")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

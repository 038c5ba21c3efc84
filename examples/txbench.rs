//! A load tool for transactions, run the same way against cairn and
//! redis-server: `MULTI; SET k v; INCR n; EXEC` from many connections,
//! pipelined, and the transactions per second (and, given the server's
//! pid, its CPU time per transaction).
//!
//! ```sh
//! cargo run --release --example txbench -- --port 6379 --clients 50 --pipeline 16 \
//!     --keys one-slot --seconds 10 [--pid PID] [--threads]
//! ```
//! The connections share one thread's event loop, as redis-benchmark's
//! do. `--threads` gives each its own blocking thread instead (the tool's
//! first form): on a 2-core machine its 50 threads, each woken by its
//! reply, preempt the server's threads wherever they run, and a server
//! with more than one thread pays for that in switches (cairn's
//! connection threads: ~30k involuntary switches a second at pipeline 1,
//! against ~2k for redis-server's one thread).
//! `--keys one-slot`: k and n share a hash tag (one slot, so one shard);
//! `--keys two-shards`: k hashes to the lower half of the slots and n to
//! the upper half (two shards of a 2-shard cairn). Keys are drawn from
//! 100,000 names per role.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NAMES: usize = 100_000;

struct Opts {
    port: u16,
    clients: usize,
    pipeline: usize,
    two_shards: bool,
    seconds: u64,
    pid: Option<u32>,
    threads: bool,
}

fn parse() -> Opts {
    let mut o = Opts {
        port: 6379,
        clients: 50,
        pipeline: 1,
        two_shards: false,
        seconds: 10,
        pid: None,
        threads: false,
    };
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    // The one option without a value.
    if let Some(i) = args.iter().position(|a| a == "--threads") {
        args.remove(i);
        o.threads = true;
    }
    for pair in args.chunks(2) {
        let v = pair.get(1).map(String::as_str).unwrap_or("");
        match pair[0].as_str() {
            "--port" => o.port = v.parse().expect("--port"),
            "--clients" => o.clients = v.parse().expect("--clients"),
            "--pipeline" => o.pipeline = v.parse().expect("--pipeline"),
            "--keys" => o.two_shards = v == "two-shards",
            "--seconds" => o.seconds = v.parse().expect("--seconds"),
            "--pid" => o.pid = Some(v.parse().expect("--pid")),
            other => panic!("unknown option {other}"),
        }
    }
    o
}

/// Key names for the two roles: (k names, n names).
fn names(two_shards: bool) -> (Vec<String>, Vec<String>) {
    if !two_shards {
        let k = (0..NAMES).map(|i| format!("{{t{i}}}:k")).collect();
        let n = (0..NAMES).map(|i| format!("{{t{i}}}:n")).collect();
        return (k, n);
    }
    let half = |upper: bool, role: &str| -> Vec<String> {
        (0..)
            .map(|i| format!("{role}:{i}"))
            .filter(|k| (cairn::cluster::key_slot(k.as_bytes()) >= 8192) == upper)
            .take(NAMES)
            .collect()
    };
    (half(false, "k"), half(true, "n"))
}

fn bulk(out: &mut Vec<u8>, parts: &[&str]) {
    out.extend_from_slice(format!("*{}\r\n", parts.len()).as_bytes());
    for p in parts {
        out.extend_from_slice(format!("${}\r\n{}\r\n", p.len(), p).as_bytes());
    }
}

/// CPU seconds (user + system) a process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// What every connection does: draws its transactions' keys and counts
/// the replies' lines.
struct Client {
    ks: Arc<Vec<String>>,
    ns: Arc<Vec<String>>,
    pipeline: usize,
    seed: u64,
}

impl Client {
    /// The next pipeline of transactions, written into `req`.
    fn next_request(&mut self, req: &mut Vec<u8>) {
        req.clear();
        for _ in 0..self.pipeline {
            self.seed ^= self.seed << 13;
            self.seed ^= self.seed >> 7;
            self.seed ^= self.seed << 17;
            // One draw for both keys: in the one-slot layout they share a
            // hash tag.
            let i = self.seed as usize % NAMES;
            bulk(req, &["MULTI"]);
            bulk(req, &["SET", &self.ks[i], "value"]);
            bulk(req, &["INCR", &self.ns[i]]);
            bulk(req, &["EXEC"]);
        }
    }

    /// Lines a pipeline's replies take: +OK, +QUEUED, +QUEUED, *2, +OK, :N
    /// per transaction.
    fn lines(&self) -> usize {
        6 * self.pipeline
    }
}

/// Lines in a read of replies, after checking it holds no error.
fn count_lines(read: &[u8]) -> usize {
    assert!(!read.is_empty(), "server closed the connection");
    assert!(
        read[0] != b'-',
        "error reply: {}",
        String::from_utf8_lossy(read)
    );
    read.iter().filter(|&&b| b == b'\n').count()
}

/// One blocking thread per connection (`--threads`).
fn run_threads(clients: Vec<Client>, port: u16, done: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    let workers: Vec<_> = clients
        .into_iter()
        .map(|mut c| {
            let (done, stop) = (done.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                s.set_nodelay(true).unwrap();
                let (mut req, mut buf) = (Vec::new(), vec![0u8; 64 * 1024]);
                while !stop.load(Ordering::Relaxed) {
                    c.next_request(&mut req);
                    s.write_all(&req).expect("write");
                    let mut lines = 0;
                    while lines < c.lines() {
                        let n = s.read(&mut buf).expect("read");
                        lines += count_lines(&buf[..n]);
                    }
                    done.fetch_add(c.pipeline as u64, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
}

/// Every connection a task of one thread's event loop (the default).
fn run_event_loop(clients: Vec<Client>, port: u16, done: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let tasks: Vec<_> = clients
            .into_iter()
            .map(|mut c| {
                let (done, stop) = (done.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
                        .await
                        .expect("connect");
                    s.set_nodelay(true).unwrap();
                    let (mut req, mut buf) = (Vec::new(), vec![0u8; 64 * 1024]);
                    while !stop.load(Ordering::Relaxed) {
                        c.next_request(&mut req);
                        s.write_all(&req).await.expect("write");
                        let mut lines = 0;
                        while lines < c.lines() {
                            let n = s.read(&mut buf).await.expect("read");
                            lines += count_lines(&buf[..n]);
                        }
                        done.fetch_add(c.pipeline as u64, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
    });
}

fn main() {
    let o = parse();
    let (ks, ns) = names(o.two_shards);
    let (ks, ns) = (Arc::new(ks), Arc::new(ns));
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<Client> = (0..o.clients)
        .map(|c| Client {
            ks: ks.clone(),
            ns: ns.clone(),
            pipeline: o.pipeline,
            seed: 0x9e37_79b9_7f4a_7c15u64 ^ (c as u64 + 1),
        })
        .collect();
    let load = {
        let (done, stop, port, threads) = (done.clone(), stop.clone(), o.port, o.threads);
        std::thread::spawn(move || {
            if threads {
                run_threads(clients, port, done, stop)
            } else {
                run_event_loop(clients, port, done, stop)
            }
        })
    };
    // Warm up, then measure.
    std::thread::sleep(Duration::from_secs(1));
    let (t0, n0) = (Instant::now(), done.load(Ordering::Relaxed));
    let cpu0 = o.pid.map(cpu_seconds);
    std::thread::sleep(Duration::from_secs(o.seconds));
    let (t1, n1) = (Instant::now(), done.load(Ordering::Relaxed));
    let cpu1 = o.pid.map(cpu_seconds);
    stop.store(true, Ordering::Relaxed);
    let _ = load.join();
    let n = (n1 - n0) as f64;
    let rate = n / (t1 - t0).as_secs_f64();
    print!("transactions/s {rate:.0}");
    if let (Some(a), Some(b)) = (cpu0, cpu1) {
        print!("  server CPU us/transaction {:.2}", (b - a) * 1e6 / n);
    }
    println!();
}

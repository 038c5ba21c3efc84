//! A load tool for transactions, run the same way against cairn and
//! redis-server: `MULTI; SET k v; INCR n; EXEC` from many connections,
//! pipelined, and the transactions per second (and, given the server's
//! pid, its CPU time per transaction).
//!
//! ```sh
//! cargo run --release --example txbench -- --port 6379 --clients 50 --pipeline 16 \
//!     --keys one-slot --seconds 10 [--pid PID]
//! ```
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
}

fn parse() -> Opts {
    let mut o = Opts {
        port: 6379,
        clients: 50,
        pipeline: 1,
        two_shards: false,
        seconds: 10,
        pid: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
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

fn main() {
    let o = parse();
    let (ks, ns) = names(o.two_shards);
    let (ks, ns) = (Arc::new(ks), Arc::new(ns));
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..o.clients)
        .map(|c| {
            let (ks, ns, done, stop) = (ks.clone(), ns.clone(), done.clone(), stop.clone());
            let (port, pipeline) = (o.port, o.pipeline);
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                s.set_nodelay(true).unwrap();
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (c as u64 + 1);
                let mut next = || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as usize % NAMES
                };
                let mut buf = vec![0u8; 64 * 1024];
                while !stop.load(Ordering::Relaxed) {
                    let mut req = Vec::new();
                    for _ in 0..pipeline {
                        // One draw for both keys: in the one-slot layout
                        // they share a hash tag.
                        let i = next();
                        let (k, n) = (&ks[i], &ns[i]);
                        bulk(&mut req, &["MULTI"]);
                        bulk(&mut req, &["SET", k, "value"]);
                        bulk(&mut req, &["INCR", n]);
                        bulk(&mut req, &["EXEC"]);
                    }
                    s.write_all(&req).expect("write");
                    // Each transaction answers in six lines: +OK, +QUEUED,
                    // +QUEUED, *2, +OK, :N.
                    let mut lines = 0;
                    while lines < 6 * pipeline {
                        let n = s.read(&mut buf).expect("read");
                        assert!(n > 0, "server closed the connection");
                        assert!(
                            buf[0] != b'-',
                            "error reply: {}",
                            String::from_utf8_lossy(&buf[..n])
                        );
                        lines += buf[..n].iter().filter(|&&b| b == b'\n').count();
                    }
                    done.fetch_add(pipeline as u64, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Warm up, then measure.
    std::thread::sleep(Duration::from_secs(1));
    let (t0, n0) = (Instant::now(), done.load(Ordering::Relaxed));
    let cpu0 = o.pid.map(cpu_seconds);
    std::thread::sleep(Duration::from_secs(o.seconds));
    let (t1, n1) = (Instant::now(), done.load(Ordering::Relaxed));
    let cpu1 = o.pid.map(cpu_seconds);
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let n = (n1 - n0) as f64;
    let rate = n / (t1 - t0).as_secs_f64();
    print!("transactions/s {rate:.0}");
    if let (Some(a), Some(b)) = (cpu0, cpu1) {
        print!("  server CPU us/transaction {:.2}", (b - a) * 1e6 / n);
    }
    println!();
}

//! A Pub/Sub load tool, run the same way against cairn and redis-server:
//! publishers send pipelined PUBLISHes to one channel while subscriber
//! connections read every delivery; it reports PUBLISH throughput,
//! deliveries per second and the latency from PUBLISH to delivery.
//!
//! ```sh
//! # one subscriber
//! cargo run --release --example pubbench -- --port 6379 --conns 1 --patterns 0
//! # 1,000 subscriptions over 50 connections: each connection subscribes to
//! # the channel and to 19 patterns matching it (20 deliveries each)
//! cargo run --release --example pubbench -- --port 6379 --conns 50 --patterns 19
//! ```
//! Other options: `--publishers N` (4), `--pipeline N` (16), `--seconds N`
//! (10), `--size BYTES` (payload, at least 8: 64), `--pid PID` (the
//! server's, to report its CPU time per PUBLISH).
//!
//! Each payload carries its send time; a subscriber takes the latency when
//! it has read the message. Under a saturating load that is mostly
//! queueing; `--publishers 1 --pipeline 1` shows the unloaded latency.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

struct Opts {
    port: u16,
    conns: usize,
    patterns: usize,
    publishers: usize,
    pipeline: usize,
    seconds: u64,
    size: usize,
    pid: Option<u32>,
}

fn parse() -> Opts {
    let mut o = Opts {
        port: 6379,
        conns: 1,
        patterns: 0,
        publishers: 4,
        pipeline: 16,
        seconds: 10,
        size: 64,
        pid: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < args.len() {
        let v = &args[i + 1];
        let n = || v.parse::<u64>().expect("a number");
        match args[i].as_str() {
            "--port" => o.port = n() as u16,
            "--conns" => o.conns = n() as usize,
            "--patterns" => o.patterns = n() as usize,
            "--publishers" => o.publishers = n() as usize,
            "--pipeline" => o.pipeline = n() as usize,
            "--seconds" => o.seconds = n(),
            "--size" => o.size = (n() as usize).max(8),
            "--pid" => o.pid = Some(n() as u32),
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    o
}

const CHANNEL: &str = "bench";

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// One command as a client sends it.
fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    cairn::protocol::encode_command(&mut out, args);
    out
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_nodelay(true).unwrap();
    s
}

/// Latencies in microseconds, bucketed: exact below 1,024 µs, then by
/// powers of two split in 64 steps.
#[derive(Clone)]
struct Histogram {
    counts: Vec<u64>,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            counts: vec![0; 1024 + 64 * 40],
        }
    }

    fn bucket(us: u64) -> usize {
        if us < 1024 {
            return us as usize;
        }
        let exp = 63 - us.leading_zeros() as usize; // >= 10
        let step = (us >> (exp - 6)) as usize & 63;
        (1024 + (exp - 10) * 64 + step).min(1024 + 64 * 40 - 1)
    }

    fn value(b: usize) -> u64 {
        if b < 1024 {
            return b as u64;
        }
        let exp = (b - 1024) / 64 + 10;
        let step = ((b - 1024) % 64) as u64;
        (1u64 << exp) + (step << (exp - 6))
    }

    fn add(&mut self, us: u64) {
        self.counts[Self::bucket(us)] += 1;
    }

    fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
    }

    fn percentile(&self, p: f64) -> u64 {
        let total: u64 = self.counts.iter().sum();
        let want = ((total as f64) * p).ceil() as u64;
        let mut seen = 0;
        for (b, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want.max(1) {
                return Self::value(b);
            }
        }
        0
    }
}

/// Reads one RESP array of bulk strings (a Pub/Sub frame) and returns its
/// last element; `None` at the end of the stream.
fn read_frame(r: &mut BufReader<TcpStream>, line: &mut String) -> Option<Vec<u8>> {
    line.clear();
    if r.read_line(line).ok()? == 0 {
        return None;
    }
    let n: usize = line.trim_end()[1..].parse().ok()?;
    let mut last = Vec::new();
    for _ in 0..n {
        line.clear();
        r.read_line(line).ok()?;
        if line.starts_with(':') {
            continue;
        }
        let len: usize = line.trim_end()[1..].parse().ok()?;
        last = vec![0; len + 2];
        r.read_exact(&mut last).ok()?;
        last.truncate(len);
    }
    Some(last)
}

fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    Some(f[11].parse::<u64>().ok()? + f[12].parse::<u64>().ok()?)
}

fn main() {
    let o = parse();
    let fanout = o.conns * (1 + o.patterns);
    let delivered = Arc::new(AtomicU64::new(0));
    let hist = Arc::new(Mutex::new(Histogram::new()));
    let mut subs = Vec::new();
    for _ in 0..o.conns {
        let mut s = connect(o.port);
        let mut names: Vec<Vec<u8>> = vec![b"SUBSCRIBE".to_vec(), CHANNEL.as_bytes().to_vec()];
        let mut req = command(&names.iter().map(|v| &v[..]).collect::<Vec<_>>());
        if o.patterns > 0 {
            // Distinct patterns that all match the channel: b*, b**, ...
            names = vec![b"PSUBSCRIBE".to_vec()];
            names.extend((1..=o.patterns).map(|k| format!("b{}", "*".repeat(k)).into_bytes()));
            req.extend(command(&names.iter().map(|v| &v[..]).collect::<Vec<_>>()));
        }
        s.write_all(&req).unwrap();
        let mut r = BufReader::with_capacity(1 << 16, s);
        let mut line = String::new();
        for _ in 0..1 + o.patterns {
            read_frame(&mut r, &mut line).expect("confirmation");
        }
        let (delivered, hist) = (delivered.clone(), hist.clone());
        subs.push(std::thread::spawn(move || {
            let mut local = Histogram::new();
            let mut n = 0u64;
            while let Some(payload) = read_frame(&mut r, &mut line) {
                let sent = u64::from_le_bytes(payload[..8].try_into().unwrap());
                if sent == 0 {
                    break; // the end marker
                }
                local.add(now_ns().saturating_sub(sent) / 1000);
                n += 1;
                if n.is_multiple_of(1024) {
                    delivered.fetch_add(1024, Ordering::Relaxed);
                }
            }
            delivered.fetch_add(n % 1024, Ordering::Relaxed);
            hist.lock().unwrap().merge(&local);
        }));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    let cpu_before = o.pid.and_then(cpu_ticks);
    let started = Instant::now();
    let mut pubs = Vec::new();
    for _ in 0..o.publishers {
        let (stop, published) = (stop.clone(), published.clone());
        let (port, pipeline, size) = (o.port, o.pipeline, o.size);
        pubs.push(std::thread::spawn(move || {
            let mut s = connect(port);
            let mut r = BufReader::with_capacity(1 << 16, s.try_clone().unwrap());
            let mut payload = vec![b'x'; size];
            let mut line = String::new();
            while !stop.load(Ordering::Relaxed) {
                let mut batch = Vec::with_capacity(pipeline * (size + 40));
                for _ in 0..pipeline {
                    payload[..8].copy_from_slice(&now_ns().to_le_bytes());
                    batch.extend(command(&[b"PUBLISH", CHANNEL.as_bytes(), &payload]));
                }
                s.write_all(&batch).unwrap();
                for _ in 0..pipeline {
                    line.clear();
                    r.read_line(&mut line).unwrap();
                    assert!(line.starts_with(':'), "PUBLISH answered {line}");
                }
                published.fetch_add(pipeline as u64, Ordering::Relaxed);
            }
        }));
    }
    std::thread::sleep(Duration::from_secs(o.seconds));
    stop.store(true, Ordering::Relaxed);
    for p in pubs {
        p.join().unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = match (cpu_before, o.pid.and_then(cpu_ticks)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let total = published.load(Ordering::Relaxed);
    // Every subscriber reads what is queued for it, then the end marker.
    let deadline = Instant::now() + Duration::from_secs(60);
    while delivered.load(Ordering::Relaxed) + 1024 * o.conns as u64 <= total * fanout as u64
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut s = connect(o.port);
    s.write_all(&command(&[b"PUBLISH", CHANNEL.as_bytes(), &[0u8; 8]]))
        .unwrap();
    let mut byte = [0u8; 1];
    let _ = s.read(&mut byte);
    for t in subs {
        t.join().unwrap();
    }
    let got = delivered.load(Ordering::Relaxed);
    let h = hist.lock().unwrap();
    println!(
        "publishers={} pipeline={} fanout={} size={}: {:.0} PUBLISH/s, {:.0} deliveries/s ({} of {} delivered), latency p50={}us p99={}us",
        o.publishers,
        o.pipeline,
        fanout,
        o.size,
        total as f64 / elapsed,
        got as f64 / elapsed,
        got,
        total * fanout as u64,
        h.percentile(0.50),
        h.percentile(0.99),
    );
    if let Some(ticks) = cpu {
        // Clock ticks are 10 ms on Linux.
        let us = ticks as f64 * 10_000.0 / total.max(1) as f64;
        println!("server CPU: {us:.2} us per PUBLISH");
    }
}

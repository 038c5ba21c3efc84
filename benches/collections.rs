//! Criterion benchmarks of collection reads through a real client: an
//! in-process cairn (2 shards, temporary directory) holding a 1,000,000-member
//! sorted set (scores 0..999,999) and a 1,000,000-element list, queried over
//! one redis-rs connection. Each figure is a full round trip: RESP encoding,
//! the connection task, the redb read snapshot, and the reply.
//!
//! Rank ranges (ZRANGE by index) are counted by walking the score index, so
//! a range deep in the set costs O(rank). Score ranges (ZRANGEBYSCORE) are
//! measured both near the head and from a random score: a seek would make
//! the two cost the same.

use std::time::Duration;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use redis::Connection;

const N: u64 = 1_000_000;
const ZKEY: &str = "bench:zset";
const LKEY: &str = "bench:list";

/// An in-process server; stopped when the process exits.
struct Server {
    port: u16,
    _dir: tempfile::TempDir,
}

fn start_server() -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg = cairn::config::Config::defaults();
    cfg.bind = "127.0.0.1".into();
    cfg.port = 0;
    cfg.dir = dir.path().to_path_buf();
    cfg.shards = 2;
    cfg.log_level = "warn".into();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let running = cairn::run::start(cfg).await.expect("server starts");
            tx.send(running.addr.port()).unwrap();
            running.serve().await;
        });
    });
    let port = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("server started");
    Server { port, _dir: dir }
}

fn connect(port: u16) -> Connection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let conn = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    conn
}

/// Fills the sorted set and the list with pipelined ZADD / RPUSH of 5,000
/// members per command, 20 commands per pipeline.
fn fill(c: &mut Connection) {
    let start = std::time::Instant::now();
    for (head, key) in [("ZADD", ZKEY), ("RPUSH", LKEY)] {
        let mut i = 0;
        while i < N {
            let mut pipe = redis::pipe();
            for _ in 0..20 {
                if i >= N {
                    break;
                }
                let mut cmd = redis::cmd(head);
                cmd.arg(key);
                for j in i..(i + 5_000).min(N) {
                    if head == "ZADD" {
                        cmd.arg(j);
                    }
                    cmd.arg(format!("m:{j:07}"));
                }
                i = (i + 5_000).min(N);
                pipe.add_command(cmd).ignore();
            }
            pipe.query::<()>(c).expect("fill pipeline");
        }
    }
    let zcard: u64 = redis::cmd("ZCARD").arg(ZKEY).query(c).unwrap();
    let llen: u64 = redis::cmd("LLEN").arg(LKEY).query(c).unwrap();
    assert_eq!((zcard, llen), (N, N));
    eprintln!(
        "filled a {N}-member sorted set and a {N}-element list in {:?}",
        start.elapsed()
    );
}

/// A small deterministic generator (xorshift64*), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % n
    }
}

fn strings(c: &mut Connection, cmd: &redis::Cmd) -> Vec<Vec<u8>> {
    cmd.query(c).expect("query")
}

fn collections(crit: &mut Criterion) {
    let srv = start_server();
    let mut c = connect(srv.port);
    fill(&mut c);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);

    // Sanity checks of the replies the benchmarks rely on.
    let mut probe = redis::cmd("ZRANGEBYSCORE");
    probe
        .arg(ZKEY)
        .arg(500_000)
        .arg("+inf")
        .arg("LIMIT")
        .arg(0)
        .arg(100);
    let got = strings(&mut c, &probe);
    assert_eq!(got.len(), 100);
    assert_eq!(got[0], b"m:0500000");
    let mut probe = redis::cmd("ZRANGE");
    probe.arg(ZKEY).arg(500_000).arg(500_099);
    let got = strings(&mut c, &probe);
    assert_eq!((got.len(), &got[99][..]), (100, &b"m:0500099"[..]));
    let mut probe = redis::cmd("LRANGE");
    probe.arg(LKEY).arg(700_000).arg(700_099);
    let got = strings(&mut c, &probe);
    assert_eq!((got.len(), &got[0][..]), (100, &b"m:0700000"[..]));

    // Near the head of the set: score and rank ranges that start within the
    // first 1,000 members.
    let mut g = crit.benchmark_group("zset_1m");
    g.bench_function("zrangebyscore_limit_100_near_head", |b| {
        b.iter(|| {
            let s = rng.below(1_000);
            let mut cmd = redis::cmd("ZRANGEBYSCORE");
            cmd.arg(ZKEY)
                .arg(s)
                .arg("+inf")
                .arg("LIMIT")
                .arg(0)
                .arg(100);
            black_box(strings(&mut c, &cmd))
        })
    });
    g.bench_function("zrange_rank_100_near_head", |b| {
        b.iter(|| {
            let r = rng.below(1_000);
            let mut cmd = redis::cmd("ZRANGE");
            cmd.arg(ZKEY).arg(r).arg(r + 99);
            black_box(strings(&mut c, &cmd))
        })
    });
    g.finish();

    // Anywhere in the set / around rank 500,000. Rank ranges walk ~rank index
    // rows by design; score ranges currently walk from the head too (see
    // `select` in families/zset.rs), so both take few samples.
    let mut g = crit.benchmark_group("zset_1m_deep");
    g.sample_size(10);
    g.bench_function("zrangebyscore_random_limit_100", |b| {
        b.iter(|| {
            let s = rng.below(N - 100);
            let mut cmd = redis::cmd("ZRANGEBYSCORE");
            cmd.arg(ZKEY)
                .arg(s)
                .arg("+inf")
                .arg("LIMIT")
                .arg(0)
                .arg(100);
            black_box(strings(&mut c, &cmd))
        })
    });
    g.bench_function("zrangebyscore_random_limit_100_withscores", |b| {
        b.iter(|| {
            let s = rng.below(N - 100);
            let mut cmd = redis::cmd("ZRANGEBYSCORE");
            cmd.arg(ZKEY)
                .arg(s)
                .arg("+inf")
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(0)
                .arg(100);
            black_box(strings(&mut c, &cmd))
        })
    });
    g.bench_function("zrange_rank_100_near_500k", |b| {
        b.iter(|| {
            let r = 499_500 + rng.below(1_000);
            let mut cmd = redis::cmd("ZRANGE");
            cmd.arg(ZKEY).arg(r).arg(r + 99);
            black_box(strings(&mut c, &cmd))
        })
    });
    g.finish();

    let mut g = crit.benchmark_group("list_1m");
    g.bench_function("lrange_100_random_offset", |b| {
        b.iter(|| {
            let r = rng.below(N - 100);
            let mut cmd = redis::cmd("LRANGE");
            cmd.arg(LKEY).arg(r).arg(r + 99);
            black_box(strings(&mut c, &cmd))
        })
    });
    g.bench_function("lindex_random", |b| {
        b.iter(|| {
            let i = rng.below(N);
            let v: Vec<u8> = redis::cmd("LINDEX")
                .arg(LKEY)
                .arg(i)
                .query(&mut c)
                .expect("LINDEX");
            black_box(v)
        })
    });
    g.finish();
}

criterion_group!(benches, collections);
criterion_main!(benches);

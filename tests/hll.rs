//! HyperLogLog through a real client: a large cardinality equal to the one
//! Redis 7.0.15 reports for the same input, PFCOUNT and PFMERGE of keys on
//! both shards agreeing with the same work on one shard, and HLL bytes
//! surviving a restart.

mod common;

use common::{cmd, int, ok, shard_of, TestServer};
use redis::Connection;

/// A key named `<prefix><i>` on the given shard of a 2-shard server.
fn key_on(prefix: &str, shard: usize) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| shard_of(k, 2) == shard)
        .expect("some key lands on every shard")
}

/// The value of a key as raw bytes.
fn get(c: &mut Connection, key: &str) -> Vec<u8> {
    cmd(&["GET", key]).query(c).expect("GET")
}

/// PFADDs `prefix<from>`..`prefix<to>` in batches of 1000 arguments.
fn add_range(c: &mut Connection, key: &str, prefix: &str, from: u32, to: u32) {
    let mut i = from;
    while i <= to {
        let end = (i + 999).min(to);
        let mut pf = redis::cmd("PFADD");
        pf.arg(key);
        for j in i..=end {
            pf.arg(format!("{prefix}{j}"));
        }
        let _: i64 = pf.query(c).expect("PFADD");
        i = end + 1;
    }
}

#[test]
fn large_cardinality_matches_redis() {
    let s = TestServer::start();
    let mut c = s.client();
    add_range(&mut c, "big", "e", 1, 100_000);
    // Redis 7.0.15 answers 100853 after PFADD of e1..e100000.
    assert_eq!(int(&mut c, &["PFCOUNT", "big"]), 100_853);
    assert_eq!(get(&mut c, "big").len(), 12_304);
}

#[test]
fn keys_on_both_shards_merge_like_one_shard() {
    let s = TestServer::start();
    let mut c = s.client();
    let (a, b) = (key_on("a", 0), key_on("b", 1));
    let (near, far) = (key_on("dest", 0), key_on("dest", 1));
    add_range(&mut c, &a, "x", 0, 999);
    add_range(&mut c, &b, "x", 500, 1999);
    let union = int(&mut c, &["PFCOUNT", &a, &b]);
    assert!((1900..=2100).contains(&union), "{union}");
    ok(&mut c, &["PFMERGE", &near, &a, &b]);
    ok(&mut c, &["PFMERGE", &far, &a, &b]);
    assert_eq!(get(&mut c, &near), get(&mut c, &far));
    assert_eq!(int(&mut c, &["PFCOUNT", &near]), union);
    assert_eq!(int(&mut c, &["PFCOUNT", &far]), union);
    // The same merge built on one shard gives the same bytes.
    let a2 = key_on("other", 0);
    add_range(&mut c, &a2, "x", 500, 1999);
    let one = key_on("one", 0);
    ok(&mut c, &["PFMERGE", &one, &a, &a2]);
    assert_eq!(int(&mut c, &["PFCOUNT", &one]), union);
    let (mut x, mut y) = (get(&mut c, &one), get(&mut c, &near));
    // Only the cached cardinality may differ if one was refreshed first.
    x[8..16].fill(0);
    y[8..16].fill(0);
    assert_eq!(x, y);
}

#[test]
fn hll_values_survive_restart() {
    let s = TestServer::start();
    let mut c = s.client();
    add_range(&mut c, "sparse", "s", 1, 100);
    add_range(&mut c, "dense", "d", 1, 5000);
    assert_eq!(int(&mut c, &["PFCOUNT", "sparse"]), 100);
    let before = (get(&mut c, "sparse"), get(&mut c, "dense"));
    let path = s.path.clone();
    let dir = s.stop();
    let s = TestServer::start_in(path, |_| {});
    let mut c = s.client();
    assert_eq!((get(&mut c, "sparse"), get(&mut c, "dense")), before);
    assert_eq!(int(&mut c, &["PFCOUNT", "sparse"]), 100);
    drop(s);
    drop(dir);
}

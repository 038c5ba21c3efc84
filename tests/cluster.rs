//! Cluster mode across several nodes: three cairn nodes on loopback share a
//! topology in a local etcd; Redis's own tooling (`redis-cli --cluster`,
//! `redis-benchmark --cluster`) builds and reshapes the cluster, and the
//! Rust client crate's cluster connection runs a workload through it; a
//! PUBLISH on one node reaches the subscribers of every node; cairn's own
//! CLUSTER MOVESLOT streams a whole slot to another node under writers.
//!
//! Needs etcd (Debian's etcd-server) and redis-cli / redis-benchmark
//! (redis-tools); `.ci/run` installs both.

mod common;

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::{in_cluster, myid, node, wait_converged};
use common::etcd::TestEtcd;
use common::{cmd, error_line, TestServer};
use redis::{Commands, Value};

/// Runs a redis tool (bounded by `secs`), returning its exit success and
/// its output (stdout then stderr).
fn tool(secs: u32, prog: &str, args: &[String]) -> (bool, String) {
    let out = Command::new("timeout")
        .arg(secs.to_string())
        .arg(prog)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{prog} runs (is redis-tools installed?): {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn cli(args: &[String]) -> (bool, String) {
    tool(120, "redis-cli", args)
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn addr(s: &TestServer) -> String {
    format!("127.0.0.1:{}", s.port)
}

/// The keys each node holds in `slot`.
fn keys_in_slot(s: &TestServer, slot: u16) -> Vec<String> {
    cmd(&["CLUSTER", "GETKEYSINSLOT", &slot.to_string(), "100000"])
        .query(&mut s.client())
        .unwrap()
}

fn cluster_client(nodes: &[&TestServer]) -> redis::cluster::ClusterClient {
    let urls: Vec<String> = nodes
        .iter()
        .map(|s| format!("redis://127.0.0.1:{}/", s.port))
        .collect();
    redis::cluster::ClusterClientBuilder::new(urls)
        .retries(20)
        .connection_timeout(Duration::from_secs(5))
        .response_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[test]
fn redis_cli_builds_a_cluster_and_clients_follow_a_reshard() {
    let etcd = TestEtcd::start();
    let name = "t-reshard";
    let (a, b, c) = (
        node(&etcd.endpoint, name),
        node(&etcd.endpoint, name),
        node(&etcd.endpoint, name),
    );
    let nodes = [&a, &b, &c];

    // A fresh node is alone, as a fresh Redis cluster node.
    let nodes_line: String = cmd(&["CLUSTER", "NODES"]).query(&mut a.client()).unwrap();
    assert_eq!(nodes_line.lines().count(), 1, "{nodes_line}");

    let mut create = strings(&["--cluster", "create"]);
    create.extend(nodes.iter().map(|s| addr(s)));
    create.push("--cluster-yes".into());
    let (ok, out) = cli(&create);
    assert!(ok, "redis-cli --cluster create failed:\n{out}");
    assert!(out.contains("[OK] All 16384 slots covered."), "{out}");
    wait_converged(&nodes, 3);

    let (ok, out) = cli(&strings(&["--cluster", "check", &addr(&a)]));
    assert!(ok, "{out}");
    assert!(
        out.contains("[OK] All nodes agree about slots configuration."),
        "{out}"
    );

    // A key another node owns is redirected with Redis's MOVED: exactly
    // one node answers GET foo, the others point at it.
    let slot_of_foo = cairn::cluster::key_slot(b"foo");
    let answers: Vec<Result<redis::Value, String>> = nodes
        .iter()
        .map(|s| {
            cmd(&["GET", "foo"])
                .query::<redis::Value>(&mut s.client())
                .map_err(|e| error_line(&e))
        })
        .collect();
    let owner = answers.iter().position(|r| r.is_ok()).expect("an owner");
    assert_eq!(answers.iter().filter(|r| r.is_ok()).count(), 1);
    for r in answers.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(
            r,
            &format!("MOVED {slot_of_foo} 127.0.0.1:{}", nodes[owner].port)
        );
    }

    // A workload through the cluster client.
    let client = cluster_client(&nodes);
    let mut conn = client.get_connection().unwrap();
    for i in 0..500 {
        let _: () = conn.set(format!("key:{i}"), i).unwrap();
    }
    for i in 0..500 {
        let v: i64 = conn.get(format!("key:{i}")).unwrap();
        assert_eq!(v, i);
    }
    let _: () = redis::cmd("MSET")
        .arg("{user1}.name")
        .arg("ada")
        .arg("{user1}.age")
        .arg("36")
        .query(&mut conn)
        .unwrap();
    let got: Vec<String> = redis::cmd("MGET")
        .arg("{user1}.name")
        .arg("{user1}.age")
        .query(&mut conn)
        .unwrap();
    assert_eq!(got, vec!["ada", "36"]);
    let total: i64 = nodes
        .iter()
        .map(|s| cmd(&["DBSIZE"]).query::<i64>(&mut s.client()).unwrap())
        .sum();
    assert_eq!(total, 502);

    // Reshard 200 slots from a to b while a writer runs with
    // acknowledgements.
    let (id_a, id_b) = (myid(&a), myid(&b));
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, stop) = (acked.clone(), stop.clone());
        let client = cluster_client(&nodes);
        std::thread::spawn(move || {
            let mut conn = client.get_connection().unwrap();
            let mut i = 0u64;
            let mut errors = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let key = format!("w:{i}");
                match conn.set::<_, _, ()>(&key, i) {
                    Ok(()) => acked.lock().unwrap().push(key),
                    Err(e) => errors.push(e.to_string()),
                }
                i += 1;
            }
            errors
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let (ok, out) = cli(&strings(&[
        "--cluster",
        "reshard",
        &addr(&a),
        "--cluster-from",
        &id_a,
        "--cluster-to",
        &id_b,
        "--cluster-slots",
        "200",
        "--cluster-yes",
    ]));
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let errors = writer.join().unwrap();
    assert!(ok, "reshard failed:\n{out}");
    assert!(
        errors.is_empty(),
        "errors reached the application: {errors:?}"
    );
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 10, "the writer wrote {}", acked.len());
    wait_converged(&nodes, 3);

    // Every acknowledged write is on the slot's owner, and no key is on two
    // nodes.
    for (i, key) in acked.iter().enumerate() {
        let v: Option<u64> = conn.get(key).unwrap();
        assert!(v.is_some(), "acknowledged {key} (#{i}) is missing");
    }
    let mut slots: HashSet<u16> = acked
        .iter()
        .map(|k| cairn::cluster::key_slot(k.as_bytes()))
        .collect();
    slots.extend((0..500).map(|i| cairn::cluster::key_slot(format!("key:{i}").as_bytes())));
    let mut holder: HashMap<String, u16> = HashMap::new();
    for slot in slots {
        for s in &nodes {
            for k in keys_in_slot(s, slot) {
                if let Some(p) = holder.insert(k.clone(), s.port) {
                    panic!("{k} is on both {p} and {}", s.port);
                }
            }
        }
    }
    let (ok, out) = cli(&strings(&["--cluster", "check", &addr(&b)]));
    assert!(ok, "{out}");
    assert!(!out.contains("[WARNING]"), "{out}");

    // redis-benchmark --cluster runs against it.
    let (ok, out) = tool(
        120,
        "redis-benchmark",
        &strings(&[
            "--cluster",
            "-h",
            "127.0.0.1",
            "-p",
            &a.port.to_string(),
            "-t",
            "set,get",
            "-n",
            "2000",
            "-c",
            "4",
            "-q",
        ]),
    );
    assert!(ok, "{out}");
    assert!(out.contains("SET:") && out.contains("GET:"), "{out}");

    // A fourth node joins with add-node and leaves with del-node.
    let d = node(&etcd.endpoint, name);
    let (ok, out) = cli(&strings(&["--cluster", "add-node", &addr(&d), &addr(&a)]));
    assert!(ok, "add-node failed:\n{out}");
    wait_converged(&[&a, &b, &c, &d], 4);
    let id_d = myid(&d);
    let (ok, out) = cli(&strings(&["--cluster", "del-node", &addr(&a), &id_d]));
    assert!(ok, "del-node failed:\n{out}");
    wait_converged(&nodes, 3);
    let alone: String = cmd(&["CLUSTER", "NODES"]).query(&mut d.client()).unwrap();
    assert_eq!(alone.lines().count(), 1, "{alone}");
    for i in 0..500 {
        let v: i64 = conn
            .get(format!("key:{i}"))
            .unwrap_or_else(|e| panic!("key:{i}: {e}"));
        assert_eq!(v, i);
    }
    drop(etcd);
}

#[test]
fn nodes_outlive_etcd_and_keep_their_identity() {
    let mut etcd = TestEtcd::start();
    let name = "t-outage";
    let a = node(&etcd.endpoint, name);
    let b = node(&etcd.endpoint, name);
    let mut ca = a.client();
    common::ok(&mut ca, &["CLUSTER", "ADDSLOTSRANGE", "0", "8191"]);
    common::ok(
        &mut b.client(),
        &["CLUSTER", "ADDSLOTSRANGE", "8192", "16383"],
    );
    common::ok(
        &mut ca,
        &["CLUSTER", "MEET", "127.0.0.1", &b.port.to_string()],
    );
    wait_converged(&[&a, &b], 2);
    let client = cluster_client(&[&a, &b]);
    let mut conn = client.get_connection().unwrap();
    for i in 0..100 {
        let _: () = conn.set(format!("k{i}"), i).unwrap();
    }

    // etcd goes away: the nodes serve the topology they last saw, and a
    // topology change is refused, not half-made.
    etcd.stop();
    for i in 0..100 {
        let v: i64 = conn.get(format!("k{i}")).unwrap();
        assert_eq!(v, i);
        let _: () = conn.set(format!("k{i}"), i + 1).unwrap();
    }
    let e = common::err(&mut ca, &["CLUSTER", "DELSLOTS", "0"]);
    assert!(
        e.starts_with("ERR cannot change the cluster topology: etcd unavailable"),
        "{e}"
    );
    let info: String = cmd(&["CLUSTER", "INFO"]).query(&mut ca).unwrap();
    assert!(info.contains("cluster_state:ok"), "{info}");
    let nodes_before: String = cmd(&["CLUSTER", "NODES"]).query(&mut ca).unwrap();
    assert!(nodes_before.contains("0-8191"), "{nodes_before}");

    // Back: changes work again.
    etcd.start_again();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match cmd(&["CLUSTER", "BUMPEPOCH"]).query::<String>(&mut ca) {
            Ok(r) => {
                assert!(r.starts_with("BUMPED") || r.starts_with("STILL"), "{r}");
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "etcd did not come back: {e}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    // A restarted node keeps its id and the data dir's topology.
    let (id_b, port_b) = (myid(&b), b.port);
    let dir = b.stop().expect("temp dir");
    let b2 = TestServer::start_in(dir.path().to_path_buf(), |c| {
        in_cluster(c, &etcd.endpoint, name);
        c.port = port_b;
    });
    assert_eq!(myid(&b2), id_b);
    wait_converged(&[&a, &b2], 2);
    let mut conn = cluster_client(&[&a, &b2]).get_connection().unwrap();
    let v: i64 = conn.get("k99").unwrap();
    assert_eq!(v, 100);
    drop(dir);
}

/// A big collection moves in chunks: the slot's move neither loses a field
/// nor stalls the source's other clients while it runs.
#[test]
fn a_big_hash_moves_in_chunks_without_stalling_its_node() {
    let etcd = TestEtcd::start();
    let nodes = common::cluster::three_nodes(&etcd.endpoint, "t-big");
    let key = "{big}h";
    let slot = cairn::cluster::key_slot(key.as_bytes());
    let find = |k: &str| {
        nodes
            .iter()
            .position(|s| cmd(&["EXISTS", k]).query::<i64>(&mut s.client()).is_ok())
            .unwrap()
    };
    let src = find(key);
    let dst = (src + 1) % 3;
    let (source, target) = (&nodes[src], &nodes[dst]);
    let mut c = source.client();
    const FIELDS: usize = 30_000;
    for chunk in (0..FIELDS).collect::<Vec<_>>().chunks(1000) {
        let mut hset = redis::cmd("HSET");
        hset.arg(key);
        for i in chunk {
            hset.arg(format!("f{i}")).arg(format!("v{i}"));
        }
        let _: i64 = hset.query(&mut c).unwrap();
    }
    assert_eq!(common::int(&mut c, &["PEXPIRE", key, "1000000"]), 1);
    // Another key this node serves, on another slot.
    let other = (0..)
        .map(|i| format!("other{i}"))
        .find(|k| find(k) == src && cairn::cluster::key_slot(k.as_bytes()) != slot)
        .unwrap();
    common::ok(&mut c, &["SET", &other, "x"]);

    let (sid, tid) = (myid(source), myid(target));
    let s = slot.to_string();
    common::ok(
        &mut target.client(),
        &["CLUSTER", "SETSLOT", &s, "IMPORTING", &sid],
    );
    common::ok(&mut c, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &tid]);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = reads_until(stop.clone(), source.port, other.clone());
    std::thread::sleep(Duration::from_millis(100));
    let port = target.port.to_string();
    common::ok(
        &mut c,
        &["MIGRATE", "127.0.0.1", &port, "", "0", "60000", "KEYS", key],
    );
    stop.store(true, Ordering::Relaxed);
    let worst = reader.join().unwrap();
    for n in [target, source] {
        common::ok(&mut n.client(), &["CLUSTER", "SETSLOT", &s, "NODE", &tid]);
    }
    let mut t = target.client();
    assert_eq!(common::int(&mut t, &["HLEN", key]), FIELDS as i64);
    assert_eq!(
        cmd(&["HGET", key, "f12345"])
            .query::<String>(&mut t)
            .unwrap(),
        "v12345"
    );
    assert!(common::int(&mut t, &["PTTL", key]) > 900_000);
    assert_eq!(common::int(&mut t, &["CLUSTER", "COUNTKEYSINSLOT", &s]), 1);
    assert_eq!(common::int(&mut c, &["CLUSTER", "COUNTKEYSINSLOT", &s]), 0);
    // The move is not one long stall of the source (loose bound: a shared,
    // unoptimised test build).
    assert!(
        worst < Duration::from_millis(500),
        "a read waited {worst:?}"
    );
}

#[test]
fn publish_reaches_subscribers_on_every_node() {
    let etcd = TestEtcd::start();
    let nodes = common::cluster::three_nodes(&etcd.endpoint, "t-pubsub");
    let mut conn = nodes[0].client();
    let mut sub = conn.as_pubsub();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    sub.subscribe("news").unwrap();
    sub.psubscribe("n*").unwrap();
    // Published on another node: delivered here, counted there (Redis
    // Cluster counts the publishing node's receivers only).
    let n: i64 = cmd(&["PUBLISH", "news", "from-1"])
        .query(&mut nodes[1].client())
        .unwrap();
    assert_eq!(n, 0);
    let mut got = Vec::new();
    for _ in 0..2 {
        let m = sub.get_message().unwrap();
        got.push((
            m.get_pattern::<Option<String>>().unwrap(),
            m.get_channel_name().to_string(),
            m.get_payload::<String>().unwrap(),
        ));
    }
    got.sort();
    assert_eq!(
        got,
        vec![
            (None, "news".to_string(), "from-1".to_string()),
            (
                Some("n*".to_string()),
                "news".to_string(),
                "from-1".to_string()
            ),
        ]
    );
    // Published here: counted here, and not echoed back by the others.
    let n: i64 = cmd(&["PUBLISH", "news", "local"])
        .query(&mut nodes[0].client())
        .unwrap();
    assert_eq!(n, 2);
    for _ in 0..2 {
        let m = sub.get_message().unwrap();
        assert_eq!(m.get_payload::<String>().unwrap(), "local");
    }
    sub.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    assert!(sub.get_message().is_err(), "a message arrived twice");
    // Shard channels stay with their slot's owner: SPUBLISH elsewhere is
    // redirected.
    let slot = cairn::cluster::key_slot(b"orders");
    let owner = nodes
        .iter()
        .position(|s| {
            cmd(&["SPUBLISH", "orders", "x"])
                .query::<i64>(&mut s.client())
                .is_ok()
        })
        .unwrap();
    let other = (owner + 1) % 3;
    let err = cmd(&["SPUBLISH", "orders", "x"])
        .query::<i64>(&mut nodes[other].client())
        .unwrap_err();
    assert_eq!(
        common::error_line(&err),
        format!("MOVED {slot} 127.0.0.1:{}", nodes[owner].port)
    );
    // CLIENT LIST shows a subscriber as P, and READONLY as r.
    let mut c = nodes[0].client();
    let list: String = cmd(&["CLIENT", "LIST", "TYPE", "pubsub"])
        .query(&mut c)
        .unwrap();
    assert!(
        list.contains(" flags=P ") && list.contains(" sub=1 psub=1 "),
        "{list}"
    );
    common::ok(&mut c, &["READONLY"]);
    let info: String = cmd(&["CLIENT", "INFO"]).query(&mut c).unwrap();
    assert!(info.contains(" flags=r "), "{info}");
    common::ok(&mut c, &["READWRITE"]);
    let info: String = cmd(&["CLIENT", "INFO"]).query(&mut c).unwrap();
    assert!(info.contains(" flags=N "), "{info}");
}

/// Reads `key` (which holds "x") on the node at `port` until `stop`, on a
/// thread whose result is the longest read: how long moving a slot stalled
/// the node's other clients.
fn reads_until(stop: Arc<AtomicBool>, port: u16, key: String) -> std::thread::JoinHandle<Duration> {
    std::thread::spawn(move || {
        let mut conn = common::connect(port);
        let mut worst = Duration::ZERO;
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            let v: String = conn.get(&key).unwrap();
            assert_eq!(v, "x");
            worst = worst.max(t.elapsed());
        }
        worst
    })
}

/// The hash tag of the slot `moveslot_streams_a_slot_while_writers_run`
/// moves.
const MV: &str = "{mv}";

/// What the writer of `moveslot_streams_a_slot_while_writers_run` had
/// acknowledged, and what it could not get acknowledged.
#[derive(Default)]
struct Acked {
    /// The last value INCR returned for the counter.
    counter: i64,
    /// The keys SET acknowledged; each holds its own number.
    keys: Vec<(String, u64)>,
    /// Keys whose SET still failed after every retry: each may or may not
    /// have been written, so they are neither lost nor expected.
    unsure: Vec<String>,
    /// How many errors reached the application (the cluster client's own
    /// retries used up).
    errors: usize,
    /// The last of those errors, to say why the writer wrote little.
    last_error: Option<String>,
}

/// Runs `op` until it succeeds, at most 100 times 10 ms apart, noting in
/// `seen` each error the cluster client let through: a TRYAGAIN that
/// outlasts the client's retries is unavailability, not a lost write.
fn retried<T>(seen: &mut Acked, mut op: impl FnMut() -> redis::RedisResult<T>) -> Option<T> {
    for _ in 0..100 {
        match op() {
            Ok(v) => return Some(v),
            Err(e) => {
                seen.errors += 1;
                seen.last_error = Some(e.to_string());
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    None
}

/// Calls `check` every 50 ms until it passes; panics with its last
/// complaint after `limit`. Topology changes reach the other nodes through
/// an etcd watch, and a source deletes a moved slot in the background, so
/// both are seen "within a moment", not at once.
fn poll_until(limit: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + limit;
    loop {
        match check() {
            Ok(()) => return,
            Err(why) if Instant::now() > deadline => panic!("after {limit:?}: {why}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// CLUSTER COUNTKEYSINSLOT on `s`.
fn count_in_slot(s: &TestServer, slot: u16) -> i64 {
    common::int(
        &mut s.client(),
        &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()],
    )
}

/// Who `s` says serves `slot`: the master port CLUSTER SLOTS gives, and
/// the id whose CLUSTER NODES line lists the slot. The two replies are
/// built separately, so both are checked.
fn slot_owner_seen_by(s: &TestServer, slot: u16) -> (Option<u16>, Option<String>) {
    let mut c = s.client();
    let ranges: Vec<Vec<Value>> = cmd(&["CLUSTER", "SLOTS"]).query(&mut c).unwrap();
    let port: Option<u16> = ranges.iter().find_map(|r| {
        let first: u16 = redis::from_redis_value(&r[0]).unwrap();
        let last: u16 = redis::from_redis_value(&r[1]).unwrap();
        let master: Vec<Value> = redis::from_redis_value(&r[2]).unwrap();
        (first..=last)
            .contains(&slot)
            .then(|| redis::from_redis_value(&master[1]).unwrap())
    });
    let nodes: String = cmd(&["CLUSTER", "NODES"]).query(&mut c).unwrap();
    let id = nodes.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let lists = fields.get(8..).unwrap_or_default().iter().any(|&r| {
            // "[slot->-id]" marks an open migration, not ownership.
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            match (a.parse::<u16>(), b.parse::<u16>()) {
                (Ok(a), Ok(b)) => (a..=b).contains(&slot),
                _ => false,
            }
        });
        lists.then(|| fields[0].to_string())
    });
    (port, id)
}

/// CLUSTER MOVESLOT streams a whole slot, every type with its TTLs, to
/// another node while a cluster client keeps writing to it: no
/// acknowledged write is lost, the moved values are byte for byte the
/// same, the source's other clients are not stalled, and every node learns
/// the new owner.
#[test]
fn moveslot_streams_a_slot_while_writers_run() {
    let etcd = TestEtcd::start();
    let nodes = common::cluster::three_nodes(&etcd.endpoint, "t-moveslot");
    let key = |name: &str| format!("{MV}{name}");
    let slot = cairn::cluster::key_slot(key("").as_bytes());
    let find = |k: &str| {
        nodes
            .iter()
            .position(|s| cmd(&["EXISTS", k]).query::<i64>(&mut s.client()).is_ok())
            .unwrap()
    };
    let src = find(&key(""));
    let (source, target, third) = (&nodes[src], &nodes[(src + 1) % 3], &nodes[(src + 2) % 3]);
    let (sid, tid) = (myid(source), myid(target));
    let s = slot.to_string();
    let mut c = source.client();

    // The slot's contents: many small keys, some with a TTL, and one
    // collection of each type, the hash big enough to move in chunks.
    const STRINGS: usize = 2_000;
    let mut fill = redis::pipe();
    for i in 0..STRINGS {
        fill.cmd("SET")
            .arg(key(&format!("s{i}")))
            .arg(format!("v{i}"))
            .ignore();
        if i % 10 == 0 {
            fill.cmd("PEXPIRE")
                .arg(key(&format!("s{i}")))
                .arg(1_000_000)
                .ignore();
        }
    }
    fill.query::<()>(&mut c).unwrap();
    const FIELDS: usize = 50_000;
    for chunk in (0..FIELDS).collect::<Vec<_>>().chunks(1000) {
        let mut hset = redis::cmd("HSET");
        hset.arg(key("h"));
        for i in chunk {
            hset.arg(format!("f{i}")).arg(format!("v{i}"));
        }
        let _: i64 = hset.query(&mut c).unwrap();
    }
    let mut fill = redis::pipe();
    let (list, set, zset, stream) = (key("l"), key("set"), key("z"), key("x"));
    fill.cmd("RPUSH")
        .arg(&list)
        .arg((0..1000).collect::<Vec<_>>())
        .ignore();
    fill.cmd("RPUSH").arg(&list).arg(&["a", "", "b"]).ignore();
    fill.cmd("SADD")
        .arg(&set)
        .arg((0..1000).map(|i| format!("m{i}")).collect::<Vec<_>>())
        .ignore();
    let mut zadd = redis::cmd("ZADD");
    zadd.arg(&zset);
    for i in 0..1000 {
        zadd.arg(f64::from(i) * 0.25 - 50.0).arg(format!("z{i}"));
    }
    zadd.arg("-inf").arg("lowest").arg("-0.001").arg("tiny");
    fill.add_command(zadd).ignore();
    for i in 0..300 {
        fill.cmd("XADD")
            .arg(&stream)
            .arg("*")
            .arg("n")
            .arg(i)
            .arg("name")
            .arg(format!("e{i}"))
            .ignore();
    }
    fill.cmd("XGROUP")
        .arg(&["CREATE", &stream, "g", "0"])
        .ignore();
    fill.cmd("XGROUP")
        .arg(&["CREATE", &stream, "late", "$"])
        .ignore();
    fill.query::<()>(&mut c).unwrap();
    // A pending entries list with two consumers, one entry acknowledged.
    for (consumer, count) in [("alice", "100"), ("bob", "50")] {
        let read = [
            "XREADGROUP",
            "GROUP",
            "g",
            consumer,
            "COUNT",
            count,
            "STREAMS",
            &stream,
            ">",
        ];
        let _: Value = cmd(&read).query(&mut c).unwrap();
    }
    let first: Vec<Vec<Value>> = cmd(&["XRANGE", &stream, "-", "+", "COUNT", "1"])
        .query(&mut c)
        .unwrap();
    let first: String = redis::from_redis_value(&first[0][0]).unwrap();
    assert_eq!(common::int(&mut c, &["XACK", &stream, "g", &first]), 1);
    let counter = key("counter");
    common::ok(&mut c, &["SET", &counter, "0"]);
    let base = STRINGS as i64 + 6;
    assert_eq!(count_in_slot(source, slot), base);

    let recorded: Vec<String> = [&key("h"), &list, &set, &zset, &stream]
        .into_iter()
        .cloned()
        .chain((0..4).map(|i| key(&format!("s{i}"))))
        .collect();
    let dumps: Vec<Vec<u8>> = recorded
        .iter()
        .map(|k| cmd(&["DUMP", k]).query(&mut c).unwrap())
        .collect();

    // Another key the source serves, on another slot, read throughout.
    let other = (0..)
        .map(|i| format!("other{i}"))
        .find(|k| find(k) == src && cairn::cluster::key_slot(k.as_bytes()) != slot)
        .unwrap();
    common::ok(&mut c, &["SET", &other, "x"]);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = reads_until(stop.clone(), source.port, other.clone());
    let writer = {
        let stop = stop.clone();
        let client = cluster_client(&nodes.iter().collect::<Vec<_>>());
        let counter = counter.clone();
        std::thread::spawn(move || {
            let mut conn = client.get_connection().unwrap();
            let mut seen = Acked::default();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if let Some(v) = retried(&mut seen, || conn.incr(&counter, 1)) {
                    seen.counter = v;
                }
                let k = format!("{MV}w{n}");
                match retried(&mut seen, || conn.set::<_, _, ()>(&k, n)) {
                    Some(()) => seen.keys.push((k, n)),
                    None => seen.unsure.push(k),
                }
                n += 1;
            }
            seen
        })
    };
    // A client blocked on a key of the slot is redirected once the slot
    // has moved, as Redis Cluster does.
    let blocked = {
        let (port, k) = (source.port, key("blocked"));
        std::thread::spawn(move || common::err(&mut common::connect(port), &["BLPOP", &k, "0"]))
    };
    std::thread::sleep(Duration::from_millis(100));

    // A debug build may take a while to stream 50,000 fields: a longer
    // wait for the reply than the helpers' 10 s.
    let mut mover = common::connect(source.port);
    mover
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let started = Instant::now();
    common::ok(&mut mover, &["CLUSTER", "MOVESLOT", &s, &tid]);
    let took = started.elapsed();
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let worst = reader.join().unwrap();
    let seen = writer.join().unwrap();
    assert!(
        seen.keys.len() > 10,
        "the writer wrote {} keys in {took:?} (errors: {}, last: {:?})",
        seen.keys.len(),
        seen.errors,
        seen.last_error
    );
    // After OK the source redirects the slot's keys to the target.
    assert_eq!(
        blocked.join().unwrap(),
        format!("MOVED {slot} 127.0.0.1:{}", target.port)
    );
    assert_eq!(
        common::err(&mut c, &["GET", &key("s1")]),
        format!("MOVED {slot} 127.0.0.1:{}", target.port)
    );

    // Every node learns the new owner (the target itself included, which
    // the move back below relies on).
    for n in &nodes {
        poll_until(Duration::from_secs(5), || {
            match slot_owner_seen_by(n, slot) {
                (Some(p), Some(id)) if p == target.port && id == tid => Ok(()),
                view => Err(format!(
                    "node {} says slot {slot} is served by {view:?}, not {} {tid}",
                    n.port, target.port
                )),
            }
        });
    }

    // The target holds the whole slot, the source none of it once its
    // background deletion ends. A SET that never got an answer may or may
    // not have landed, so it counts only where it is.
    let mut t = target.client();
    let landed = seen
        .unsure
        .iter()
        .filter(|k| common::int(&mut t, &["EXISTS", k.as_str()]) == 1)
        .count();
    let expected = base + (seen.keys.len() + landed) as i64;
    poll_until(Duration::from_secs(5), || {
        let (on_target, on_source) = (count_in_slot(target, slot), count_in_slot(source, slot));
        if on_target == expected && on_source == 0 {
            Ok(())
        } else {
            Err(format!(
                "slot {slot}: {on_target} keys on the target (expected {expected}), \
                 {on_source} on the source"
            ))
        }
    });

    // No acknowledged write is lost.
    let count: i64 = t.get(&counter).unwrap();
    assert!(
        count >= seen.counter,
        "the counter is {count} on the target, {} was acknowledged",
        seen.counter
    );
    for chunk in seen.keys.chunks(1000) {
        let names: Vec<&str> = chunk.iter().map(|(k, _)| k.as_str()).collect();
        let values: Vec<Option<u64>> = t.mget(&names).unwrap();
        for ((k, n), v) in chunk.iter().zip(values) {
            assert_eq!(v, Some(*n), "acknowledged SET {k} {n}");
        }
    }
    // The values no one wrote during the move arrive as they were, and
    // absolute expiry times with them.
    for (k, before) in recorded.iter().zip(&dumps) {
        let after: Vec<u8> = cmd(&["DUMP", k]).query(&mut t).unwrap();
        assert!(after == *before, "DUMP {k} differs after the move");
    }
    assert!(common::int(&mut t, &["PTTL", &key("s0")]) > 900_000);
    assert_eq!(common::int(&mut t, &["PTTL", &key("s1")]), -1);
    // The move is not one long stall of the source (loose bound: a shared,
    // unoptimised test build).
    assert!(
        worst < Duration::from_millis(500),
        "a read of another slot waited {worst:?} during a {took:?} move"
    );

    // Redis's own checker finds the moved cluster sound: one view of the
    // slots, no slot left open, every slot covered.
    let (ok, out) = cli(&strings(&["--cluster", "check", &addr(third)]));
    assert!(ok, "{out}");
    for line in [
        "[OK] All nodes agree about slots configuration.",
        "[OK] All 16384 slots covered.",
    ] {
        assert!(out.contains(line), "{out}");
    }
    assert!(!out.contains("[WARNING]"), "{out}");

    // And back again, now with no writer.
    let mut back = common::connect(target.port);
    back.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    common::ok(&mut back, &["CLUSTER", "MOVESLOT", &s, &sid]);
    assert_eq!(count_in_slot(source, slot), expected);
    poll_until(Duration::from_secs(5), || {
        match count_in_slot(target, slot) {
            0 => Ok(()),
            n => Err(format!("{n} keys of slot {slot} stay on the old owner")),
        }
    });

    // Refusals: a slot the node does not serve, a node it does not know, and
    // itself as the target.
    let unknown = "f".repeat(40);
    let refused = [
        (
            third,
            &tid,
            format!("ERR I'm not the owner of hash slot {slot}"),
        ),
        (
            source,
            &unknown,
            format!("ERR I don't know about node {unknown}"),
        ),
        (source, &sid, "ERR Can't move a slot to myself".to_string()),
    ];
    for (n, to, want) in refused {
        let e = common::err(&mut n.client(), &["CLUSTER", "MOVESLOT", &s, to]);
        assert_eq!(e, want, "MOVESLOT {s} {to} on {}", n.port);
    }
}

/// One record of CLUSTER IMPORTROWS's frame format: a tag byte, then each
/// field with its `u32` length.
fn record(out: &mut Vec<u8>, tag: u8, fields: &[&[u8]]) {
    out.push(tag);
    for f in fields {
        out.extend_from_slice(&(f.len() as u32).to_be_bytes());
        out.extend_from_slice(f);
    }
}

/// A `meta` row as the shard files store it: type, no expiry, then the
/// string value or a collection's version, size and nothing more.
fn meta_row(ktype: u8, body: &[&[u8]]) -> Vec<u8> {
    let mut row = vec![ktype];
    row.extend_from_slice(&0u64.to_be_bytes());
    for part in body {
        row.extend_from_slice(part);
    }
    row
}

/// The target's side of a slot move, driven by hand on a node that does
/// not serve the slot: whole keys land, a collection cut short by ABORT
/// leaves nothing behind (its rows are collected), and bad frames or steps
/// out of order are refused with a reason.
#[test]
fn importrows_lands_whole_keys_and_abort_leaves_nothing() {
    // A cluster of one node that serves no slot (no etcd needed).
    let n = solo_node();
    let mut c = n.client();
    let slot = cairn::cluster::key_slot(b"{imp}").to_string();
    let rows = |c: &mut redis::Connection, frame: &[u8]| {
        cmd(&["CLUSTER", "IMPORTROWS", &slot, "ROWS"])
            .arg(frame)
            .query::<()>(c)
            .map_err(|e| error_line(&e))
    };
    assert_eq!(
        rows(&mut c, b"").unwrap_err(),
        format!("ERR no import of hash slot {slot} is under way")
    );
    common::ok(&mut c, &["CLUSTER", "IMPORTROWS", &slot, "BEGIN", "src"]);

    // A string, whole.
    let mut frame = Vec::new();
    record(&mut frame, 1, &[b"{imp}s", &meta_row(1, &[b"v"])]);
    rows(&mut c, &frame).unwrap();
    common::ok(&mut c, &["CLUSTER", "IMPORTROWS", &slot, "READY"]);
    assert_eq!(
        common::int(&mut c, &["CLUSTER", "COUNTKEYSINSLOT", &slot]),
        1
    );

    // A hash of 2,000 fields, its end never sent.
    let size = 2000u64.to_be_bytes();
    let mut frame = Vec::new();
    record(
        &mut frame,
        1,
        &[b"{imp}h", &meta_row(2, &[&7u64.to_be_bytes(), &size])],
    );
    for i in 0..2000 {
        record(&mut frame, 2, &[format!("f{i}").as_bytes(), b"v"]);
    }
    rows(&mut c, &frame).unwrap();
    assert_eq!(
        common::err(&mut c, &["CLUSTER", "IMPORTROWS", &slot, "READY"]),
        "ERR a key of the slot arrived in part"
    );
    // Held rows: not a key, and not garbage the collector may take yet.
    assert_eq!(
        common::int(&mut c, &["CLUSTER", "COUNTKEYSINSLOT", &slot]),
        1
    );
    assert_eq!(common::field(&common::info_cairn(&mut c), "sub_rows"), 2000);

    // Malformed frames.
    assert_eq!(
        rows(&mut c, &[9]).unwrap_err(),
        "ERR corrupt slot rows: unknown record"
    );
    let mut other = Vec::new();
    record(&mut other, 5, &[b"elsewhere"]);
    assert_eq!(
        rows(&mut c, &other).unwrap_err(),
        "ERR corrupt slot rows: a key began inside another"
    );

    // ABORT drops the landed key and lets the collector take the rows.
    common::ok(&mut c, &["CLUSTER", "IMPORTROWS", &slot, "ABORT"]);
    assert_eq!(
        common::int(&mut c, &["CLUSTER", "COUNTKEYSINSLOT", &slot]),
        0
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let info = common::info_cairn(&mut c);
        if common::field(&info, "sub_rows") == 0 && common::field(&info, "gc_pending") == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "rows left behind: {info:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        rows(&mut c, b"").unwrap_err(),
        format!("ERR no import of hash slot {slot} is under way")
    );
    assert_eq!(
        common::err(&mut c, &["CLUSTER", "IMPORTROWS", &slot, "NEXT"]),
        "ERR Invalid CLUSTER IMPORTROWS step. Try BEGIN, ROWS, READY, DONE or ABORT"
    );
}

/// A move to a node that cannot be reached fails and changes nothing: the
/// source keeps serving the whole slot, writes to it work again at once,
/// and the move can be tried again.
#[test]
fn moveslot_to_an_unreachable_node_keeps_the_slot() {
    let etcd = TestEtcd::start();
    let mut nodes = common::cluster::three_nodes(&etcd.endpoint, "t-moveslot-down");
    let key = "{down}h";
    let slot = cairn::cluster::key_slot(key.as_bytes());
    let src = nodes.iter().position(|n| serves(n, slot)).unwrap();
    let dst = (src + 1) % 3;
    let gone = myid(&nodes[dst]);
    drop(nodes.remove(dst).stop());
    let source = &nodes[if dst < src { src - 1 } else { src }];
    let mut c = source.client();
    for i in 0..100 {
        let _: i64 = cmd(&["HSET", key, &format!("f{i}"), "v"])
            .query(&mut c)
            .unwrap();
    }
    let s = slot.to_string();
    for _ in 0..2 {
        let e = common::err(&mut c, &["CLUSTER", "MOVESLOT", &s, &gone]);
        assert!(e.starts_with("IOERR"), "{e}");
        assert_eq!(common::int(&mut c, &["HLEN", key]), 100);
        assert_eq!(common::int(&mut c, &["HSET", key, "more", "v"]), 1);
        assert_eq!(common::int(&mut c, &["HDEL", key, "more"]), 1);
    }
    assert!(serves(source, slot));
}

/// Whether `n` says it serves `slot` (its CLUSTER NODES line lists it).
fn serves(n: &TestServer, slot: u16) -> bool {
    slot_owner_seen_by(n, slot).1 == Some(myid(n))
}

/// A client blocked on a key is told once the cluster goes down (a slot
/// left without an owner under `cluster-require-full-coverage yes`), as
/// Redis does: the write that would wake it may never be allowed.
#[test]
fn a_blocked_client_is_told_when_the_cluster_goes_down() {
    let n = solo_node();
    let mut c = n.client();
    common::ok(&mut c, &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    let port = n.port;
    let blocked =
        std::thread::spawn(move || common::err(&mut common::connect(port), &["BLPOP", "q", "0"]));
    // Wait until it is blocked.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cmd(&["CLIENT", "LIST"])
        .query::<String>(&mut c)
        .unwrap()
        .contains("cmd=blpop")
    {
        assert!(Instant::now() < deadline, "BLPOP never blocked");
        std::thread::sleep(Duration::from_millis(10));
    }
    let other = (cairn::cluster::key_slot(b"q") + 1) % 16384;
    common::ok(&mut c, &["CLUSTER", "DELSLOTS", &other.to_string()]);
    assert_eq!(blocked.join().unwrap(), "CLUSTERDOWN The cluster is down");
}

/// A cluster node of its own, its topology only in its nodes.conf (no
/// etcd): it serves no slot until told to.
fn solo_node() -> TestServer {
    TestServer::start_with(|c| {
        c.cluster.enabled = true;
        c.cluster.etcd_endpoints.clear();
    })
}

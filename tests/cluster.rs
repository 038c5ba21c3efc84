//! Cluster mode across several nodes: three cairn nodes on loopback share a
//! topology in a local etcd; Redis's own tooling (`redis-cli --cluster`,
//! `redis-benchmark --cluster`) builds and reshapes the cluster, and the
//! Rust client crate's cluster connection runs a workload through it; a
//! PUBLISH on one node reaches the subscribers of every node.
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
use redis::Commands;

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
    let reader = {
        let (stop, port, other) = (stop.clone(), source.port, other.clone());
        std::thread::spawn(move || {
            let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .unwrap()
                .get_connection()
                .unwrap();
            let mut worst = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let v: String = conn.get(&other).unwrap();
                assert_eq!(v, "x");
                worst = worst.max(t.elapsed());
            }
            worst
        })
    };
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

//! Cluster mode across several nodes: three cairn nodes on loopback share a
//! topology in a local etcd; Redis's own tooling (`redis-cli --cluster`,
//! `redis-benchmark --cluster`) builds and reshapes the cluster, and the
//! Rust client crate's cluster connection runs a workload through it.
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

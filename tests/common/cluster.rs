//! Test support for cluster mode: cairn nodes sharing a topology in a test
//! etcd, and waiting for their views to agree.

use std::time::{Duration, Instant};

use super::{cmd, TestServer};

/// Puts a node config in cluster `name` on the etcd at `endpoint`.
pub fn in_cluster(c: &mut cairn::config::Config, endpoint: &str, name: &str) {
    c.cluster.enabled = true;
    c.cluster.etcd_endpoints = vec![endpoint.to_string()];
    c.cluster.name = name.to_string();
}

/// A fresh node of cluster `name` on the etcd at `endpoint`.
pub fn node(endpoint: &str, name: &str) -> TestServer {
    TestServer::start_with(|c| in_cluster(c, endpoint, name))
}

/// The node's id.
pub fn myid(s: &TestServer) -> String {
    cmd(&["CLUSTER", "MYID"]).query(&mut s.client()).unwrap()
}

/// Three nodes joined with CLUSTER MEET, the slots split in thirds.
pub fn three_nodes(endpoint: &str, name: &str) -> Vec<TestServer> {
    let nodes: Vec<TestServer> = (0..3).map(|_| node(endpoint, name)).collect();
    let ranges = [("0", "5460"), ("5461", "10922"), ("10923", "16383")];
    for (s, (a, b)) in nodes.iter().zip(ranges) {
        super::ok(&mut s.client(), &["CLUSTER", "ADDSLOTSRANGE", a, b]);
    }
    for s in &nodes[1..] {
        let port = nodes[0].port.to_string();
        super::ok(&mut s.client(), &["CLUSTER", "MEET", "127.0.0.1", &port]);
    }
    wait_converged(&nodes.iter().collect::<Vec<_>>(), 3);
    nodes
}

/// Waits (bounded) until every node reports `cluster_state:ok` and knows
/// `n` nodes; panics with every node's view if they do not.
pub fn wait_converged(nodes: &[&TestServer], n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let all = nodes.iter().all(|s| {
            let info: String = cmd(&["CLUSTER", "INFO"]).query(&mut s.client()).unwrap();
            info.contains("cluster_state:ok")
                && info.contains(&format!("cluster_known_nodes:{n}\r"))
        });
        if all {
            return;
        }
        if Instant::now() > deadline {
            let views: Vec<String> = nodes
                .iter()
                .map(|s| {
                    let info: String = cmd(&["CLUSTER", "INFO"]).query(&mut s.client()).unwrap();
                    let nodes: String = cmd(&["CLUSTER", "NODES"]).query(&mut s.client()).unwrap();
                    format!("{}:\n{info}{nodes}", s.port)
                })
                .collect();
            panic!(
                "the nodes did not converge on {n} nodes:\n{}",
                views.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

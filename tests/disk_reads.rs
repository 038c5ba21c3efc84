//! Reads run on the read threads (`shard::disk_reads`), as they do while
//! they wait for the disk: a client's replies keep their order, it reads
//! its own writes, and lazy expiry deletes a key before the reply that
//! found it expired goes out. (The compatibility transcripts are replayed
//! this way too, in `compat.rs`.)

mod common;

use std::time::Duration;

use cairn::shard::disk_reads::Pin;
use common::{field, info_cairn, TestServer};
use redis::Value;

fn moved_server() -> TestServer {
    let s = TestServer::start_with(|cfg| {
        cfg.redis
            .insert("enable-debug-command".into(), "local".into());
    });
    s.server().disk_reads.pin(Pin::Moved);
    s
}

#[test]
fn a_pipeline_of_reads_and_writes_keeps_its_order() {
    let s = moved_server();
    let mut c = s.client();
    let mut p = redis::pipe();
    p.cmd("GET").arg("a");
    p.cmd("SET").arg("a").arg("1");
    p.cmd("GET").arg("a");
    p.cmd("GET").arg("b");
    p.cmd("INCR").arg("a");
    p.cmd("GET").arg("a");
    p.cmd("MSET").arg("a").arg("x").arg("b").arg("y");
    p.cmd("GET").arg("b");
    p.cmd("STRLEN").arg("a");
    let got: Vec<Value> = p.query(&mut c).unwrap();
    let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    assert_eq!(
        got,
        vec![
            Value::Nil,
            Value::Okay,
            bulk("1"),
            Value::Nil,
            Value::Int(2),
            bulk("2"),
            Value::Okay,
            bulk("y"),
            Value::Int(1),
        ]
    );
    let info = info_cairn(&mut c);
    assert_eq!(field(&info, "reads_moved_now"), 1);
    assert!(field(&info, "reads_moved") >= 5, "{info:?}");
}

#[test]
fn a_moved_read_deletes_what_it_found_expired_before_replying() {
    let s = moved_server();
    let mut c = s.client();
    let mut watcher = s.client();
    common::ok(&mut c, &["SET", "k", "v", "PX", "30"]);
    common::ok(&mut c, &["SET", "other", "v"]);
    std::thread::sleep(Duration::from_millis(80));
    // No reaper tick may have come yet; either way, by the time the
    // reply is read the key is gone and counted.
    let before = common::expired_keys(&mut watcher);
    let got: Vec<Value> = redis::pipe()
        .cmd("GET")
        .arg("k")
        .cmd("SET")
        .arg("other")
        .arg("w")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, vec![Value::Nil, Value::Okay]);
    assert!(common::expired_keys(&mut watcher) >= before.max(1));
    assert_eq!(common::int(&mut watcher, &["EXISTS", "k"]), 0);
    assert_eq!(common::int(&mut watcher, &["DBSIZE"]), 1);
}

#[test]
fn many_clients_reading_at_once_each_get_their_own_replies() {
    let s = moved_server();
    let mut c = s.client();
    for i in 0..200 {
        common::ok(&mut c, &["SET", &format!("key:{i}"), &format!("value:{i}")]);
    }
    // More clients, and more reads each, than the read threads.
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let port = s.port;
            std::thread::spawn(move || {
                let mut c = common::connect(port);
                let mut p = redis::pipe();
                for i in 0..200 {
                    p.cmd("GET").arg(format!("key:{}", (i * 7 + t) % 200));
                }
                let got: Vec<String> = p.query(&mut c).unwrap();
                for (i, v) in got.iter().enumerate() {
                    assert_eq!(v, &format!("value:{}", (i * 7 + t) % 200));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_moved_read_of_several_shards_expires_what_it_found() {
    let s = moved_server();
    let mut c = s.client();
    // Keys on both shards, one of them about to expire.
    let on = |shard: usize| {
        (0..)
            .map(|i| format!("k{i}"))
            .find(|k| common::shard_of(k, 2) == shard)
            .unwrap()
    };
    let (a, b) = (on(0), on(1));
    common::ok(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    common::ok(&mut c, &["SET", &a, "1"]);
    common::ok(&mut c, &["SET", &b, "2", "PX", "20"]);
    std::thread::sleep(Duration::from_millis(50));
    let got: Vec<Option<String>> = redis::cmd("MGET").arg(&a).arg(&b).query(&mut c).unwrap();
    assert_eq!(got, vec![Some("1".to_string()), None]);
    assert_eq!(common::expired_keys(&mut c), 1);
    assert_eq!(common::int(&mut c, &["DBSIZE"]), 1);
    assert!(field(&info_cairn(&mut c), "reads_moved") >= 1);
}

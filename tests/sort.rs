//! SORT with BY/GET patterns whose keys live on other shards than the
//! source: the values read belong to one state (never half of a
//! cross-shard MSET), and STORE writes that state's result. Replies are
//! pinned by the compatibility transcript `tests/compat/cases/sort.txt`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{arr, int, ok, q, shard_of, TestServer};
use redis::Value;

/// Two list elements whose `w_<elem>` keys sit on different shards.
fn elements_on_both_shards() -> (String, String) {
    let mut on = [None, None];
    for i in 0.. {
        let e = format!("e{i}");
        let s = shard_of(&format!("w_{e}"), 2);
        if on[s].is_none() {
            on[s] = Some(e);
        }
        if on.iter().all(Option::is_some) {
            break;
        }
    }
    let [a, b] = on;
    (a.unwrap(), b.unwrap())
}

fn texts(v: Value) -> Vec<String> {
    match v {
        Value::Array(items) => items
            .into_iter()
            .map(|i| match i {
                Value::BulkString(b) => String::from_utf8(b).unwrap(),
                other => panic!("expected a bulk string, got {other:?}"),
            })
            .collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

/// While another client rewrites both weight keys with one MSET, SORT
/// (plain and with STORE) always sees both at the same value.
#[test]
fn patterns_see_one_state_across_shards() {
    let srv = TestServer::start();
    let (a, b) = elements_on_both_shards();
    let (wa, wb) = (format!("w_{a}"), format!("w_{b}"));
    let mut c = srv.client();
    assert_eq!(int(&mut c, &["RPUSH", "src", &a, &b]), 2);
    ok(&mut c, &["MSET", &wa, "0", &wb, "0"]);

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, wa, wb) = (stop.clone(), wa.clone(), wb.clone());
        let mut w = srv.client();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let v = i.to_string();
                ok(&mut w, &["MSET", &wa, &v, &wb, &v]);
            }
        })
    };
    // A destination on each shard, so STORE runs both in and across shards.
    let dests = ["dest_a", "dest_b", "dest_c", "dest_d"];
    for round in 0..200 {
        let got = texts(q(&mut c, &["SORT", "src", "BY", "w_*", "GET", "w_*"]));
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], got[1], "SORT saw half of an MSET");
        let dest = dests[round % dests.len()];
        let n = int(
            &mut c,
            &[
                "SORT", "src", "BY", "nosort", "GET", "w_*", "GET", "#", "STORE", dest,
            ],
        );
        assert_eq!(n, 4);
        let stored = texts(q(&mut c, &["LRANGE", dest, "0", "-1"]));
        assert_eq!(stored[0], stored[2], "STORE saw half of an MSET");
        assert_eq!((stored[1].as_str(), stored[3].as_str()), (&a[..], &b[..]));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
}

/// Weights, GET values, source and destination on different shards give
/// Redis's answers, inside MULTI/EXEC as well.
#[test]
fn store_across_shards_and_in_exec() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let (a, b) = elements_on_both_shards();
    assert_eq!(int(&mut c, &["RPUSH", "people", &a, &b]), 2);
    ok(
        &mut c,
        &["MSET", &format!("w_{a}"), "2", &format!("w_{b}"), "1"],
    );
    // Sources and destinations named to land on both shards.
    let (d0, d1) = common::waiting::keys_on_both_shards("out");
    for d in [&d0, &d1] {
        ok(&mut c, &["SET", d, "old"]);
        assert_eq!(int(&mut c, &["SORT", "people", "BY", "w_*", "STORE", d]), 2);
        assert_eq!(q(&mut c, &["LRANGE", d, "0", "-1"]), arr(&[&b, &a]));
        // An empty result deletes the destination.
        assert_eq!(
            int(
                &mut c,
                &["SORT", "people", "BY", "w_*", "LIMIT", "5", "1", "STORE", d]
            ),
            0
        );
        assert_eq!(int(&mut c, &["EXISTS", d]), 0);
    }
    ok(&mut c, &["MULTI"]);
    q(
        &mut c,
        &["SORT", "people", "BY", "w_*", "DESC", "STORE", &d0],
    );
    q(&mut c, &["SORT", &d0, "BY", "nosort", "GET", "w_*"]);
    let exec = q(&mut c, &["EXEC"]);
    assert_eq!(exec, Value::Array(vec![Value::Int(2), arr(&["2", "1"])]));
}

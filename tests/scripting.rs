//! Lua scripts with several clients: a script is atomic across shards, a
//! long script makes other clients BUSY until SCRIPT KILL stops it, a
//! script that wrote cannot be killed, and shutting down stops a script
//! and rolls its writes back. Single-connection replies are pinned by the
//! compatibility transcript `tests/compat/cases/scripting.txt`.

mod common;

use common::waiting::{keys_on_both_shards, script_kill, wait_busy, Pending};
use common::{cmd, err, int, ok, q, TestServer};
use redis::{Connection, Value};

/// A script writing one key on each shard is seen whole or not at all, and
/// reads its own writes.
#[test]
fn a_script_is_atomic_across_shards() {
    let srv = TestServer::start();
    let (a, b) = keys_on_both_shards("s");
    let mut c = srv.client();
    let script = "redis.call('incr', KEYS[1]) redis.call('incr', KEYS[2]) \
                  return {redis.call('get', KEYS[1]), redis.call('get', KEYS[2])}";
    let writer = {
        let (a, b) = (a.clone(), b.clone());
        let mut w = srv.client();
        std::thread::spawn(move || {
            for i in 1..=300 {
                let r: Vec<i64> = cmd(&["EVAL", script, "2", &a, &b]).query(&mut w).unwrap();
                assert_eq!(r, vec![i, i]);
            }
        })
    };
    for _ in 0..600 {
        let (x, y): (Option<i64>, Option<i64>) = cmd(&["MGET", &a, &b]).query(&mut c).unwrap();
        assert_eq!(x, y, "read {a}={x:?} but {b}={y:?}");
    }
    writer.join().unwrap();
    assert_eq!(int(&mut c, &["GET", &a]), 300);
}

/// Past busy-reply-threshold other clients get BUSY; SCRIPT KILL stops a
/// script that has not written, and the server serves again.
#[test]
fn a_busy_script_is_killed() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    ok(
        &mut admin,
        &["CONFIG", "SET", "busy-reply-threshold", "100"],
    );
    assert_eq!(
        q(&mut admin, &["CONFIG", "GET", "lua-time-limit"]),
        common::arr(&["lua-time-limit", "100"])
    );
    let looping = Pending::start(&srv, &["EVAL", "while true do end", "0"]);
    wait_busy(&mut admin);
    // Only SHUTDOWN NOSAVE may stop the server now (Redis 7.0's reply).
    assert_eq!(
        err(&mut admin, &["SHUTDOWN"]),
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
    );
    script_kill(&mut admin, &looping);
    assert_eq!(
        err(&mut admin, &["SCRIPT", "KILL"]),
        "NOTBUSY No scripts in execution right now."
    );
    ok(&mut admin, &["SET", "after", "1"]);
}

/// A script that wrote cannot be killed; shutting the server down stops it
/// and none of its writes stay.
#[test]
fn shutdown_stops_a_script_that_wrote_and_rolls_it_back() {
    let srv = TestServer::start();
    let mut admin = srv.client();
    ok(
        &mut admin,
        &["CONFIG", "SET", "busy-reply-threshold", "100"],
    );
    let looping = Pending::start(
        &srv,
        &[
            "EVAL",
            "redis.call('set', 'written', 'x') while true do end",
            "0",
        ],
    );
    wait_busy(&mut admin);
    assert!(err(&mut admin, &["SCRIPT", "KILL"]).starts_with("UNKILLABLE Sorry the script"));
    let path = srv.path.clone();
    let dir = srv.stop();
    let _ = looping.error();
    let again = TestServer::start_in(path, |_| {});
    let mut c = again.client();
    assert_eq!(q(&mut c, &["EXISTS", "written"]), Value::Int(0));
    drop(again);
    drop(dir);
}

/// FUNCTION DUMP's payload restores the libraries, under each policy.
#[test]
fn function_dump_restores() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let lib =
        "#!lua name=lib\nredis.register_function('f', function(keys, args) return args[1] end)";
    assert_eq!(q(&mut c, &["FUNCTION", "LOAD", lib]), common::bulk("lib"));
    let payload: Vec<u8> = cmd(&["FUNCTION", "DUMP"]).query(&mut c).unwrap();
    ok(&mut c, &["FUNCTION", "FLUSH"]);
    let restore = |c: &mut Connection, policy: &[&str]| -> redis::RedisResult<Value> {
        let mut r = redis::cmd("FUNCTION");
        r.arg("RESTORE").arg(&payload);
        for p in policy {
            r.arg(*p);
        }
        r.query(c)
    };
    assert_eq!(restore(&mut c, &[]).unwrap(), Value::Okay);
    assert_eq!(q(&mut c, &["FCALL", "f", "0", "hi"]), common::bulk("hi"));
    let again = restore(&mut c, &["APPEND"]).unwrap_err();
    assert_eq!(common::error_line(&again), "ERR Library lib already exists");
    assert_eq!(restore(&mut c, &["REPLACE"]).unwrap(), Value::Okay);
    assert_eq!(restore(&mut c, &["FLUSH"]).unwrap(), Value::Okay);
    assert_eq!(q(&mut c, &["FCALL", "f", "0", "x"]), common::bulk("x"));
}

/// A script whose declared key is on one shard runs inside that shard; one
/// that reaches a key on another shard has its first attempt taken back and
/// runs holding every shard: each of its writes happens exactly once.
#[test]
fn a_script_reaching_another_shard_runs_once_and_whole() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let (a, b) = keys_on_both_shards("reach");
    let script = "redis.call('incr', KEYS[1]) redis.call('incr', ARGV[1]) \
                  return redis.call('get', KEYS[1])";
    for i in 1..=3 {
        let v: i64 = cmd(&["EVAL", script, "1", &a, &b]).query(&mut c).unwrap();
        assert_eq!(v, i);
        assert_eq!(int(&mut c, &["GET", &b]), i);
    }
    // Local-only scripts stay exact too, pipelined.
    let mut p = redis::pipe();
    for _ in 0..50 {
        p.cmd("EVAL")
            .arg("return redis.call('incr', KEYS[1])")
            .arg(1)
            .arg(&a);
    }
    let out: Vec<i64> = p.query(&mut c).unwrap();
    assert_eq!(out, (4..=53).collect::<Vec<i64>>());
}

/// INFO counts cached scripts, functions and libraries, and commandstats
/// counts the commands scripts run, as Redis does.
#[test]
fn info_reports_scripts_and_functions() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let field = |c: &mut Connection, section: &str, name: &str| -> String {
        let text: String = cmd(&["INFO", section]).query(c).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("INFO {section} has no {name}"))
            .trim()
            .to_string()
    };
    assert_eq!(field(&mut c, "memory", "number_of_cached_scripts"), "0");
    let _: String = cmd(&["SCRIPT", "LOAD", "return 1"]).query(&mut c).unwrap();
    let _: i64 = cmd(&["EVAL", "return redis.call('incr', KEYS[1])", "1", "n"])
        .query(&mut c)
        .unwrap();
    assert_eq!(field(&mut c, "memory", "number_of_cached_scripts"), "2");
    assert!(
        field(&mut c, "memory", "used_memory_lua")
            .parse::<u64>()
            .unwrap()
            > 0
    );
    let lib = "#!lua name=l\nredis.register_function('a', function() return 1 end)\nredis.register_function('b', function() return 2 end)";
    let _: String = cmd(&["FUNCTION", "LOAD", lib]).query(&mut c).unwrap();
    assert_eq!(field(&mut c, "memory", "number_of_functions"), "2");
    assert_eq!(field(&mut c, "memory", "number_of_libraries"), "1");
    ok(&mut c, &["SCRIPT", "FLUSH"]);
    assert_eq!(field(&mut c, "memory", "number_of_cached_scripts"), "0");
    let incr = field(&mut c, "commandstats", "cmdstat_incr");
    assert!(incr.starts_with("calls=1,"), "{incr}");
    let eval = field(&mut c, "commandstats", "cmdstat_eval");
    assert!(eval.starts_with("calls=1,"), "{eval}");
}

//! Lua states per shard: scripts of different shards run at the same time,
//! yet clients still see one server: one script cache, one set of function
//! libraries, BUSY / SCRIPT KILL / FUNCTION STATS about the script that has
//! run longest, SHUTDOWN stopping every running script.

mod common;

use std::time::Duration;

use common::waiting::{script_kill, wait_busy, Pending};
use common::{bulk, cmd, err, int, ok, q, shard_of, TestServer};
use redis::{Connection, Value};

const SHARDS: usize = 4;

fn start() -> TestServer {
    TestServer::start_with(|c| c.shards = SHARDS)
}

/// One key name on each shard, starting with `prefix`.
fn key_per_shard(prefix: &str) -> Vec<String> {
    let mut on: Vec<Option<String>> = vec![None; SHARDS];
    for i in 0.. {
        let k = format!("{prefix}{i}");
        on[shard_of(&k, SHARDS)].get_or_insert(k);
        if on.iter().all(Option::is_some) {
            break;
        }
    }
    on.into_iter().map(Option::unwrap).collect()
}

/// A number from INFO memory.
fn memory(c: &mut Connection, name: &str) -> u64 {
    let text: String = cmd(&["INFO", "memory"]).query(c).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("INFO memory has no {name}"))
        .trim()
        .parse()
        .unwrap()
}

/// Two scripts that each spin for 600 ms, on keys of different shards,
/// overlap in time: neither waits for the other's Lua state.
#[test]
fn scripts_on_different_shards_run_at_the_same_time() {
    let srv = start();
    let keys = key_per_shard("par");
    let spin = "local function now() local t = redis.call('time') \
                return t[1] * 1000000 + t[2] end \
                local s = now() while now() - s < 600000 do end \
                redis.call('set', KEYS[1], 'done') return {s, now()}";
    let runs: Vec<Pending> = keys[..2]
        .iter()
        .map(|k| Pending::start(&srv, &["EVAL", spin, "1", k]))
        .collect();
    let spans: Vec<(i64, i64)> = runs
        .iter()
        .map(|p| match p.reply() {
            Value::Array(v) => match v[..] {
                [Value::Int(s), Value::Int(e)] => (s, e),
                _ => panic!("{v:?}"),
            },
            other => panic!("{other:?}"),
        })
        .collect();
    let (a, b) = (spans[0], spans[1]);
    assert!(
        a.0 < b.1 && b.0 < a.1,
        "the scripts ran one after the other: {a:?} {b:?}"
    );
    let mut c = srv.client();
    for k in &keys[..2] {
        assert_eq!(q(&mut c, &["GET", k]), bulk("done"));
    }
}

/// A script loaded on one connection runs on every shard's state, in the
/// plan state (keys on several shards, or none), and EVAL's implicit
/// caching is seen everywhere too.
#[test]
fn a_loaded_script_runs_on_every_shard() {
    let srv = start();
    let keys = key_per_shard("every");
    let mut loader = srv.client();
    let mut c = srv.client();
    let incr = "return redis.call('incr', KEYS[1])";
    let sha: String = cmd(&["SCRIPT", "LOAD", incr]).query(&mut loader).unwrap();
    for k in &keys {
        assert_eq!(int(&mut c, &["EVALSHA", &sha, "1", k]), 1);
    }
    // EVAL caches for every shard: its sha runs elsewhere.
    let get = "return redis.call('get', KEYS[1])";
    assert_eq!(q(&mut loader, &["EVAL", get, "1", &keys[1]]), bulk("1"));
    let sha3 = cairn::scripting::sha1_hex(get.as_bytes());
    for k in &keys {
        assert_eq!(q(&mut c, &["EVALSHA", &sha3, "1", k]), bulk("1"));
    }
    let across = q(&mut c, &["EVALSHA", &sha3, "2", &keys[1], &keys[2]]);
    assert_eq!(across, bulk("1"));
    let both = "return redis.call('incr', KEYS[1]) + redis.call('incr', KEYS[2])";
    let sha2: String = cmd(&["SCRIPT", "LOAD", both]).query(&mut loader).unwrap();
    assert_eq!(int(&mut c, &["EVALSHA", &sha2, "2", &keys[0], &keys[3]]), 4);
    let exists = q(&mut c, &["SCRIPT", "EXISTS", &sha, &sha2, &sha3, "ffff"]);
    let want = [1, 1, 1, 0].map(Value::Int).to_vec();
    assert_eq!(exists, Value::Array(want));
    assert_eq!(memory(&mut c, "number_of_cached_scripts"), 3);
}

/// FUNCTION LOAD REPLACE, DELETE and a failed RESTORE are seen by every
/// shard's state as soon as they reply.
#[test]
fn library_changes_reach_every_shard_before_the_reply() {
    let srv = start();
    let keys = key_per_shard("lib");
    let mut c = srv.client();
    let lib =
        |n: i64| format!("#!lua name=lib\nredis.register_function('f', function() return {n} end)");
    let fcall_everywhere = |c: &mut Connection, want: i64| {
        for k in &keys {
            assert_eq!(int(c, &["FCALL", "f", "1", k]), want, "on {k}");
        }
        assert_eq!(int(c, &["FCALL", "f", "2", &keys[0], &keys[1]]), want);
        assert_eq!(int(c, &["FCALL", "f", "0"]), want);
    };
    assert_eq!(q(&mut c, &["FUNCTION", "LOAD", &lib(1)]), bulk("lib"));
    fcall_everywhere(&mut c, 1);
    assert_eq!(
        q(&mut c, &["FUNCTION", "LOAD", "REPLACE", &lib(2)]),
        bulk("lib")
    );
    fcall_everywhere(&mut c, 2);
    // A RESTORE that fails halfway changes nothing anywhere.
    let payload: Vec<u8> = cmd(&["FUNCTION", "DUMP"]).query(&mut c).unwrap();
    let mut restore = redis::cmd("FUNCTION");
    restore.arg("RESTORE").arg(&payload).arg("APPEND");
    let e = restore.query::<Value>(&mut c).unwrap_err();
    assert_eq!(common::error_line(&e), "ERR Library lib already exists");
    fcall_everywhere(&mut c, 2);
    ok(&mut c, &["FUNCTION", "DELETE", "lib"]);
    for k in &keys {
        assert_eq!(
            err(&mut c, &["FCALL", "f", "1", k]),
            "ERR Function not found"
        );
    }
}

/// SCRIPT FLUSH empties every state: a script compiled on each shard is
/// gone from all of them, and their memory is given back.
#[test]
fn script_flush_empties_every_state() {
    let srv = start();
    let keys = key_per_shard("flush");
    let mut c = srv.client();
    let mut shas = Vec::new();
    for i in 0..200 {
        let body = format!("local t = {{}} for i = 1, 50 do t[i] = '{i}' .. i end return #t");
        for k in &keys {
            assert_eq!(int(&mut c, &["EVAL", &body, "1", k]), 50);
        }
        shas.push(cairn::scripting::sha1_hex(body.as_bytes()));
    }
    let before = memory(&mut c, "used_memory_lua");
    ok(&mut c, &["SCRIPT", "FLUSH"]);
    assert_eq!(memory(&mut c, "number_of_cached_scripts"), 0);
    let after = memory(&mut c, "used_memory_lua");
    assert!(after < before, "used_memory_lua {before} -> {after}");
    for k in &keys {
        assert_eq!(
            err(&mut c, &["EVALSHA", &shas[0], "1", k]),
            "NOSCRIPT No matching script. Please use EVAL."
        );
    }
}

/// Starts `first`, then `second` a little later (both before either has
/// run past the BUSY threshold of 500 ms), and waits for BUSY.
fn two_running(
    srv: &TestServer,
    admin: &mut Connection,
    first: &[&str],
    second: &[&str],
) -> (Pending, Pending) {
    ok(admin, &["CONFIG", "SET", "busy-reply-threshold", "500"]);
    let first = Pending::start(srv, first);
    std::thread::sleep(Duration::from_millis(100));
    let second = Pending::start(srv, second);
    wait_busy(admin);
    (first, second)
}

/// FUNCTION STATS' running_script: the command that called it.
fn running_command(stats: Value) -> Vec<String> {
    let Value::Array(top) = stats else {
        panic!("{stats:?}")
    };
    let Value::Array(running) = &top[1] else {
        panic!("{top:?}")
    };
    let Value::Array(argv) = &running[3] else {
        panic!("{running:?}")
    };
    argv.iter().map(|v| common::text(v.clone())).collect()
}

/// With scripts looping on two shards: BUSY for everyone, FUNCTION STATS
/// and SCRIPT KILL about the one that has run longest; a second SCRIPT
/// KILL stops the other.
#[test]
fn script_kill_stops_the_longest_running_script_first() {
    let srv = start();
    let keys = key_per_shard("kill");
    let mut admin = srv.client();
    let (first, second) = two_running(
        &srv,
        &mut admin,
        &["EVAL", "while true do end", "1", &keys[0]],
        &["EVAL", "local x = 1 while true do end", "1", &keys[1]],
    );
    let command = running_command(q(&mut admin, &["FUNCTION", "STATS"]));
    assert_eq!(command[3], keys[0], "{command:?}");
    script_kill(&mut admin, &first);
    wait_busy(&mut admin);
    script_kill(&mut admin, &second);
    assert_eq!(
        err(&mut admin, &["SCRIPT", "KILL"]),
        "NOTBUSY No scripts in execution right now."
    );
    ok(&mut admin, &["SET", &keys[0], "1"]);
}

/// A script that wrote is UNKILLABLE even while another, killable one runs
/// on another shard; SHUTDOWN stops both and rolls the writes back.
#[test]
fn shutdown_stops_scripts_on_every_shard() {
    let srv = start();
    let keys = key_per_shard("stop");
    let mut admin = srv.client();
    let wrote = "redis.call('set', KEYS[1], 'x') while true do end";
    let (first, second) = two_running(
        &srv,
        &mut admin,
        &["EVAL", wrote, "1", &keys[0]],
        &["EVAL", "while true do end", "1", &keys[1]],
    );
    assert!(err(&mut admin, &["SCRIPT", "KILL"]).starts_with("UNKILLABLE Sorry the script"));
    let path = srv.path.clone();
    let dir = srv.stop();
    let _ = (first.error(), second.error());
    let again = TestServer::start_in(path, |c| c.shards = SHARDS);
    let mut c = again.client();
    assert_eq!(q(&mut c, &["EXISTS", &keys[0]]), Value::Int(0));
    drop(again);
    drop(dir);
}

/// A script whose first run in its shard reaches a key of another shard
/// gives up there and runs again holding every shard. Commands the client
/// pipelined after it on its shard (writes, reads, a second such script)
/// still run after it, in request order: Redis 7.0.15 sent these bytes for
/// this pipeline.
#[test]
fn commands_pipelined_after_a_script_that_falls_back_run_after_it() {
    let srv = start();
    let keys = key_per_shard("fb");
    let (a, b) = (keys[0].as_str(), keys[1].as_str());
    let incr = "redis.call('incr', KEYS[1]); redis.call('incr', ARGV[1]); \
                return redis.call('get', KEYS[1])";
    let append = "redis.call('append', KEYS[1], 'x'); redis.call('append', ARGV[1], 'y'); \
                  return redis.call('get', ARGV[1])";
    let commands = [
        &["EVAL", incr, "1", a, b][..],
        &["INCR", a],
        &["GET", a],
        &["EVAL", append, "1", a, b],
        &["APPEND", a, "w"],
        &["EVAL", incr, "1", a, b],
        &["MGET", a, b],
    ];
    let want: &[u8] = b"$1\r\n1\r\n:2\r\n$1\r\n2\r\n$2\r\n1y\r\n:3\r\n\
        -ERR value is not an integer or out of range script: \
        16bd20260731a62004d2a388d935fbac80d6ca7a, on @user_script:1.\r\n\
        *2\r\n$3\r\n2xw\r\n$2\r\n1y\r\n";
    pipeline_replies(&srv, &commands, want);
}

/// Sends `commands` as one pipeline on a connection of its own and checks
/// the bytes that come back.
fn pipeline_replies(srv: &TestServer, commands: &[&[&str]], want: &[u8]) {
    use std::io::Write;
    let mut req = Vec::new();
    for args in commands {
        let args: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        cairn::protocol::encode_command(&mut req, &args);
    }
    let mut raw = srv.tcp();
    raw.write_all(&req).unwrap();
    common::read_exactly(&mut raw, want);
}

/// A pipeline of scripts on one shard runs as one batch on the client's
/// thread. When the first falls back (it reaches another shard), the ones
/// after it in that batch give their work back and run after its second
/// run, in request order, a later one falling back in turn: Redis 7.0.15
/// sent these bytes for this pipeline.
#[test]
fn scripts_pipelined_after_one_that_falls_back_run_after_it() {
    let srv = start();
    let keys = key_per_shard("fs");
    let (a, b) = (keys[0].as_str(), keys[1].as_str());
    let both = "redis.call('incr', KEYS[1]); redis.call('incr', ARGV[1]); \
                return redis.call('get', KEYS[1])";
    let incr = "return redis.call('incr', KEYS[1])";
    let append = "redis.call('append', KEYS[1], 'z'); return redis.call('get', KEYS[1])";
    let copy = "redis.call('set', ARGV[1], redis.call('get', KEYS[1])); \
                return redis.call('get', ARGV[1])";
    let strlen = "return redis.call('strlen', KEYS[1])";
    let commands = [
        &["EVAL", both, "1", a, b][..],
        &["EVAL", incr, "1", a],
        &["EVAL", append, "1", a],
        &["EVAL", copy, "1", a, b],
        &["EVAL", strlen, "1", a],
        &["MGET", a, b],
    ];
    let want: &[u8] = b"$1\r\n1\r\n:2\r\n$2\r\n2z\r\n$2\r\n2z\r\n:2\r\n\
        *2\r\n$2\r\n2z\r\n$2\r\n2z\r\n";
    pipeline_replies(&srv, &commands, want);
}

/// A script that pops members and elements on its shard, then reaches a
/// key of another shard, is taken back whole and run again holding every
/// shard: the members its first attempt popped (and scanned past) are
/// popped once, not twice. Redis 7.0.15 sent these bytes.
#[test]
fn a_script_that_pops_and_falls_back_pops_once() {
    let srv = start();
    let keys = key_per_shard("fp");
    let (z, a) = (keys[0].as_str(), keys[1].as_str());
    let pops = "redis.call('zpopmin', KEYS[1]); redis.call('zpopmin', KEYS[1]); \
                local r = redis.call('zrange', KEYS[1], 0, -1); \
                redis.call('lpop', ARGV[1]); redis.call('lpop', ARGV[1]); return r";
    let one = "redis.call('zpopmin', KEYS[1]); return redis.call('zrange', KEYS[1], 0, -1)";
    let commands = [
        &["ZADD", z, "1", "m1", "2", "m2", "3", "m3", "4", "m4"][..],
        &["RPUSH", a, "x1", "x2", "x3", "x4"],
        &["EVAL", pops, "1", z, a],
        &["ZRANGE", z, "0", "-1"],
        &["LRANGE", a, "0", "-1"],
        &["EVAL", one, "1", z],
        &["ZRANGE", z, "0", "-1", "WITHSCORES"],
    ];
    let want: &[u8] = b":4\r\n:4\r\n*2\r\n$2\r\nm3\r\n$2\r\nm4\r\n*2\r\n$2\r\nm3\r\n$2\r\nm4\r\n\
        *2\r\n$2\r\nx3\r\n$2\r\nx4\r\n*1\r\n$2\r\nm4\r\n*2\r\n$2\r\nm4\r\n$1\r\n4\r\n";
    pipeline_replies(&srv, &commands, want);
}

//! SLOWLOG entries and LATENCY events and histograms: what the compat
//! transcripts cannot show because it carries times, ids and addresses.
//! Expected shapes and texts are Redis 7.0's (tests/unit/slowlog.tcl and
//! latency-monitor.tcl of Redis).

mod common;

use std::time::{Duration, Instant};

use cairn::config::Durability;
use common::{bulk, int, ok, q, TestServer};
use redis::{Connection, Value};

fn array(v: Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items,
        other => panic!("expected an array, got {other:?}"),
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn num(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// The newest slow log entry's fields.
fn newest(c: &mut Connection) -> Vec<Value> {
    let entries = array(q(c, &["SLOWLOG", "GET", "1"]));
    assert_eq!(entries.len(), 1, "one entry asked for");
    array(entries.into_iter().next().unwrap())
}

fn argv(entry: &[Value]) -> Vec<String> {
    array(entry[3].clone()).iter().map(text).collect()
}

/// This connection's `addr` as CLIENT INFO shows it.
fn own_addr(c: &mut Connection) -> String {
    let info = text(&q(c, &["CLIENT", "INFO"]));
    info.split(' ')
        .find_map(|f| f.strip_prefix("addr="))
        .unwrap()
        .to_string()
}

// Pins: an entry is [id, unix time, µs, argv, ip:port, name]; ids keep
// counting across RESET; argv is trimmed to 32 arguments and 128-byte
// strings as Redis trims it.
#[test]
fn slowlog_entries() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let addr = own_addr(&mut c);
    ok(&mut c, &["CLIENT", "SETNAME", "foobar"]);
    ok(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    ok(&mut c, &["SLOWLOG", "RESET"]);
    let e = newest(&mut c);
    assert_eq!(e.len(), 6);
    let first_id = num(&e[0]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((num(&e[1]) - now).abs() <= 2, "unix time {:?}", e[1]);
    assert!(num(&e[2]) >= 0);
    assert_eq!(argv(&e), ["SLOWLOG", "RESET"]);
    assert_eq!(text(&e[4]), addr);
    assert_eq!(text(&e[5]), "foobar");

    let mut sadd = vec!["sadd".to_string(), "set".to_string()];
    sadd.extend((3..=33).map(|i| i.to_string()));
    let args: Vec<&str> = sadd.iter().map(String::as_str).collect();
    q(&mut c, &args);
    let e = newest(&mut c);
    // SLOWLOG GET 1 itself came after the RESET entry: ids go on.
    assert_eq!(num(&e[0]), first_id + 2);
    let mut expected: Vec<String> = sadd[..31].to_vec();
    expected.push("... (2 more arguments)".into());
    assert_eq!(argv(&e), expected);

    let long = "A".repeat(129);
    q(&mut c, &["sadd", "set", "foo", &long]);
    let e = newest(&mut c);
    assert_eq!(
        argv(&e),
        [
            "sadd",
            "set",
            "foo",
            &format!("{}... (1 more bytes)", &long[..128])
        ]
    );

    // GET without a count answers 10, -1 everything.
    for i in 0..12 {
        q(&mut c, &["SET", &format!("k{i}"), "v"]);
    }
    assert_eq!(array(q(&mut c, &["SLOWLOG", "GET"])).len(), 10);
    let all = array(q(&mut c, &["SLOWLOG", "GET", "-1"])).len() as i64;
    assert!(all > 12);
    assert_eq!(int(&mut c, &["SLOWLOG", "LEN"]), all + 1);
}

// Pins: secrets are redacted (AUTH, sensitive CONFIG SET values) and EXEC is
// not logged but the commands it ran are.
#[test]
fn slowlog_redaction_and_exec() {
    let srv = TestServer::start();
    let mut c = srv.client();
    ok(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    ok(&mut c, &["CONFIG", "SET", "masterauth", "secret"]);
    assert_eq!(
        argv(&newest(&mut c)),
        ["CONFIG", "SET", "masterauth", "(redacted)"]
    );
    let _ = common::cmd(&["AUTH", "user", "pass"]).query::<Value>(&mut c);
    assert_eq!(argv(&newest(&mut c)), ["AUTH", "(redacted)", "(redacted)"]);

    ok(&mut c, &["SLOWLOG", "RESET"]);
    let mut pipe = redis::pipe();
    pipe.cmd("MULTI")
        .cmd("SET")
        .arg("a")
        .arg("b")
        .cmd("INCR")
        .arg("n")
        .cmd("EXEC");
    let _: Vec<Value> = pipe.query(&mut c).unwrap();
    let entries = array(q(&mut c, &["SLOWLOG", "GET", "-1"]));
    let logged: Vec<Vec<String>> = entries.iter().map(|e| argv(&array(e.clone()))).collect();
    assert_eq!(
        logged,
        [
            vec!["INCR", "n"],
            vec!["SET", "a", "b"],
            vec!["MULTI"],
            vec!["SLOWLOG", "RESET"]
        ]
    );

    // A script's commands come from the script's client. (Redis logs them
    // before the script; cairn runs the script after dispatch has logged
    // EVAL, so they come after it.)
    ok(&mut c, &["SLOWLOG", "RESET"]);
    q(&mut c, &["EVAL", "redis.call('set','x','y') return 1", "0"]);
    let entries: Vec<Vec<Value>> = array(q(&mut c, &["SLOWLOG", "GET", "2"]))
        .into_iter()
        .map(array)
        .collect();
    assert!(entries.iter().any(|e| argv(e)[0] == "EVAL"));
    let set = entries.iter().find(|e| argv(e)[0] == "set").unwrap();
    assert_eq!(argv(set), ["set", "x", "y"]);
    assert_eq!(
        (text(&set[4]), text(&set[5])),
        ("?:0".into(), String::new())
    );
}

/// A server whose slow log takes commands over 100 ms, emptied, and a
/// client of it.
/// A script that writes its key, then spins for 150 ms of the server's
/// clock.
const SLOW_SCRIPT: &str = "redis.call('SET', KEYS[1], 'x') \
    local t = redis.call('TIME') \
    local from = t[1] * 1000000 + t[2] \
    repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - from > 150000 \
    return 1";

fn logging_over_100ms() -> (TestServer, Connection) {
    let srv = TestServer::start();
    let mut c = srv.client();
    ok(
        &mut c,
        &["CONFIG", "SET", "slowlog-log-slower-than", "100000"],
    );
    ok(&mut c, &["SLOWLOG", "RESET"]);
    (srv, c)
}

// Pins: a blocking command's wait is not its time (Redis logs the time it
// ran, not the time it was blocked), and a negative threshold turns the log
// off.
#[test]
fn slowlog_blocked_wait_and_off() {
    let (_srv, mut c) = logging_over_100ms();
    assert_eq!(q(&mut c, &["BLPOP", "nolist", "0.3"]), Value::Nil);
    assert_eq!(int(&mut c, &["SLOWLOG", "LEN"]), 0);
    ok(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "-1"]);
    ok(&mut c, &["SLOWLOG", "RESET"]);
    q(&mut c, &["PING"]);
    assert_eq!(int(&mut c, &["SLOWLOG", "LEN"]), 0);
}

/// The time INFO commandstats counts for `cmd` so far, in µs.
fn command_usec(c: &mut Connection, cmd: &str) -> u64 {
    let info = match q(c, &["INFO", "commandstats"]) {
        Value::BulkString(b) => String::from_utf8(b).unwrap(),
        other => panic!("INFO replied {other:?}"),
    };
    let line = info
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{cmd}:")))
        .unwrap_or_else(|| panic!("no {cmd} in {info}"));
    let usec = line.split(',').find_map(|f| f.strip_prefix("usec="));
    usec.unwrap().parse().unwrap()
}

// Pins: a script's run is its command's time wherever it ran. Alone, it
// runs on the connection's thread; pipelined, it is collected with the
// commands after it and run when they are sent, after its command was
// timed: it was then neither logged nor counted in INFO commandstats
// (Redis times the whole script, wherever the client's pipeline is).
// Logged once either way. The GET after it waits for its write, still in
// flight, and does not count that wait as its own time: Redis's time is
// the command's execution, and counting the wait flooded the log with
// entries for fast commands under load (EVALSHA at pipeline 16 showed
// 160 µs a call in INFO commandstats and ~300 slow log entries of 10-20
// ms in 300k calls).
#[test]
fn a_slow_script_is_logged_and_counted_wherever_it_runs() {
    let (_srv, mut c) = logging_over_100ms();
    let slow = SLOW_SCRIPT;
    let evals = |c: &mut Connection| -> Vec<i64> {
        array(q(c, &["SLOWLOG", "GET", "-1"]))
            .into_iter()
            .map(array)
            .filter(|e| argv(e)[0].eq_ignore_ascii_case("eval"))
            .map(|e| num(&e[2]))
            .collect()
    };
    assert_eq!(q(&mut c, &["EVAL", slow, "1", "k"]), Value::Int(1));
    let alone = evals(&mut c);
    assert_eq!(alone.len(), 1, "{alone:?}");
    assert!(alone[0] >= 150_000, "{alone:?}");
    assert!(command_usec(&mut c, "eval") >= 150_000);
    let replies: Vec<Value> = redis::pipe()
        .cmd("EVAL")
        .arg(slow)
        .arg(1)
        .arg("k")
        .cmd("GET")
        .arg("k")
        .query(&mut c)
        .unwrap();
    assert_eq!(replies, vec![Value::Int(1), bulk("x")]);
    let both = evals(&mut c);
    assert_eq!(both.len(), 2, "{both:?}");
    assert!(both.iter().all(|&usec| usec >= 150_000), "{both:?}");
    assert_eq!(
        int(&mut c, &["SLOWLOG", "LEN"]),
        2,
        "only the scripts, not GET"
    );
    assert!(command_usec(&mut c, "eval") >= 300_000);
}

// Pins: a script whose first run, inside its declared key's shard, meets a
// key of the other shard is run again holding every shard; the given-up
// attempt is not its command's run, so EVAL is logged once.
#[test]
fn a_script_run_again_across_shards_is_logged_once() {
    let srv = TestServer::start();
    let mut c = srv.client();
    ok(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    let (a, b) = common::waiting::keys_on_both_shards("fall:");
    let script = format!("redis.call('SET', KEYS[1], 'a') return redis.call('SET', '{b}', 'b')");
    ok(&mut c, &["SLOWLOG", "RESET"]);
    assert_eq!(q(&mut c, &["EVAL", &script, "1", &a]), Value::Okay);
    let evals = array(q(&mut c, &["SLOWLOG", "GET", "-1"]))
        .into_iter()
        .filter(|e| argv(&array(e.clone()))[0].eq_ignore_ascii_case("eval"))
        .count();
    assert_eq!(evals, 1);
}

// Pins: EXEC's time in INFO commandstats is its transaction's run, as in
// Redis, though the run happens after EXEC was dispatched (here on a
// blocking thread holding every shard, a script being among its
// commands); the slow log shows its command, the script, once.
#[test]
fn a_slow_transaction_is_its_exec_time() {
    let (_srv, mut c) = logging_over_100ms();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("EVAL")
        .arg(SLOW_SCRIPT)
        .arg(1)
        .arg("k")
        .query(&mut c)
        .unwrap();
    assert_eq!(replies, vec![Value::Int(1)]);
    assert!(command_usec(&mut c, "exec") >= 150_000);
    let logged: Vec<(String, i64)> = array(q(&mut c, &["SLOWLOG", "GET", "-1"]))
        .into_iter()
        .map(|e| {
            let e = array(e);
            (argv(&e)[0].to_ascii_lowercase(), num(&e[2]))
        })
        .collect();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0].0, "eval");
    assert!(logged[0].1 >= 150_000, "{logged:?}");
}

// Pins: a write is timed where it runs, in its shard's batch or as a plan
// across shards, after its command was dispatched: a SUNIONSTORE of two
// large sets is logged with its arguments, counted in INFO commandstats
// and sampled in its latency histogram, on one shard and across two, as
// Redis times a slow command. (It had been timed only as it was queued, a few µs, and so was
// neither logged nor counted.)
#[test]
fn a_slow_write_is_logged_and_counted_where_it_runs() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let (a, b) = common::waiting::keys_on_both_shards("big:");
    let one = ["{w}a", "{w}b"];
    for key in one.iter().copied().chain([a.as_str(), b.as_str()]) {
        for chunk in 0..20 {
            let members: Vec<String> = (0..1000).map(|i| format!("{key}-{chunk}-{i}")).collect();
            let mut args = vec!["SADD", key];
            args.extend(members.iter().map(String::as_str));
            assert_eq!(int(&mut c, &args), 1000);
        }
    }
    ok(
        &mut c,
        &["CONFIG", "SET", "slowlog-log-slower-than", "1000"],
    );
    ok(&mut c, &["SLOWLOG", "RESET"]);
    for (dst, x, y) in [("{w}d", one[0], one[1]), ("big:d", a.as_str(), b.as_str())] {
        assert_eq!(int(&mut c, &["SUNIONSTORE", dst, x, y]), 40_000);
        let entry = newest(&mut c);
        assert_eq!(argv(&entry), vec!["SUNIONSTORE", dst, x, y]);
        assert!(num(&entry[2]) >= 1000, "{entry:?}");
    }
    // Counted by name: on a loaded machine any command (a SLOWLOG GET
    // above) may take a millisecond and be logged too.
    let logged = array(q(&mut c, &["SLOWLOG", "GET", "-1"]))
        .into_iter()
        .filter(|e| argv(&array(e.clone()))[0].eq_ignore_ascii_case("sunionstore"))
        .count();
    assert_eq!(logged, 2);
    assert!(command_usec(&mut c, "sunionstore") >= 2000);
    // Its latency sample is the run too, taken once a call.
    let h = histogram(&mut c, &["sunionstore"]);
    assert_eq!((h[0].0.as_str(), h[0].1), ("sunionstore", 2));
    assert!(h[0].2[0].0 >= 1000, "{h:?}");
}

/// The events LATENCY LATEST lists, with their latest and maximum latency.
fn latest(c: &mut Connection) -> Vec<(String, i64, i64)> {
    array(q(c, &["LATENCY", "LATEST"]))
        .into_iter()
        .map(|e| {
            let e = array(e);
            (text(&e[0]), num(&e[2]), num(&e[3]))
        })
        .collect()
}

// Pins: with latency-monitor-threshold 1, a shard commit that fsyncs a big
// value is an `aof-fsync-always` event and a slow read a `command` event;
// HISTORY, GRAPH, DOCTOR and RESET see them.
#[test]
fn latency_events() {
    let srv = TestServer::start_with(|cfg| cfg.durability = Durability::Always);
    let mut c = srv.client();
    assert_eq!(
        q(&mut c, &["LATENCY", "DOCTOR"]),
        bulk("I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n")
    );
    ok(&mut c, &["CONFIG", "SET", "latency-monitor-threshold", "1"]);
    let big = "x".repeat(32 << 20);
    let deadline = Instant::now() + Duration::from_secs(20);
    let has = |c: &mut Connection, event: &str| latest(c).iter().any(|e| e.0 == event);
    while !(has(&mut c, "aof-fsync-always") && has(&mut c, "command")) {
        assert!(Instant::now() < deadline, "events: {:?}", latest(&mut c));
        ok(&mut c, &["SET", "big", &big]);
        // GETRANGE is not flagged fast: a slow one is a `command` event.
        q(&mut c, &["GETRANGE", "big", "0", "-1"]);
    }
    for (event, last, max) in latest(&mut c) {
        assert!(last >= 1 && max >= last, "{event}: {last} {max}");
    }
    let history = array(q(&mut c, &["LATENCY", "HISTORY", "command"]));
    assert!(!history.is_empty() && history.len() <= 160);
    let sample = array(history[0].clone());
    assert_eq!(sample.len(), 2);
    assert!(num(&sample[1]) >= 1);

    let graph = text(&q(&mut c, &["LATENCY", "GRAPH", "command"]));
    let lines: Vec<&str> = graph.lines().collect();
    assert!(lines[0].starts_with("command - high "), "{graph}");
    assert!(lines[0].ends_with(" ms)"), "{graph}");
    assert_eq!(lines[1], "-".repeat(80));
    // Four chart rows and a blank one, then the "0s"-style labels.
    assert!(lines.len() >= 8, "{graph}");

    let doctor = text(&q(&mut c, &["LATENCY", "DOCTOR"]));
    assert!(
        doctor.starts_with("Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n1. "),
        "{doctor}"
    );
    assert!(doctor.contains("command: "), "{doctor}");
    assert!(
        doctor.contains("- Your fsync policy is set to 'always'."),
        "{doctor}"
    );

    // Monitoring off from here: on a loaded machine the LATENCY calls below
    // can themselves take over 1 ms and would be new `command` samples
    // after the RESET.
    let events = latest(&mut c).len() as i64;
    ok(&mut c, &["CONFIG", "SET", "latency-monitor-threshold", "0"]);
    assert_eq!(int(&mut c, &["LATENCY", "RESET", "COMMAND", "nosuch"]), 1);
    assert_eq!(int(&mut c, &["LATENCY", "RESET"]), events - 1);
    assert_eq!(latest(&mut c), []);
    assert_eq!(array(q(&mut c, &["LATENCY", "HISTORY", "command"])), []);
}

/// One command of LATENCY HISTOGRAM: (command, calls, [(µs, cumulative)]).
type Cdf = (String, i64, Vec<(i64, i64)>);

/// LATENCY HISTOGRAM's reply.
fn histogram(c: &mut Connection, args: &[&str]) -> Vec<Cdf> {
    let mut all = vec!["LATENCY", "HISTOGRAM"];
    all.extend_from_slice(args);
    let flat = array(q(c, &all));
    flat.chunks(2)
        .map(|pair| {
            let fields = array(pair[1].clone());
            assert_eq!(text(&fields[0]), "calls");
            assert_eq!(text(&fields[2]), "histogram_usec");
            let buckets = array(fields[3].clone())
                .chunks(2)
                .map(|b| (num(&b[0]), num(&b[1])))
                .collect();
            (text(&pair[0]), num(&fields[1]), buckets)
        })
        .collect()
}

// Pins: LATENCY HISTOGRAM counts each call once, in cumulative power-of-two
// buckets ending at the call count; INFO latencystats shows the configured
// percentiles; latency-tracking no stops recording.
#[test]
fn latency_histogram_counts() {
    let srv = TestServer::start();
    let mut c = srv.client();
    ok(&mut c, &["CONFIG", "RESETSTAT"]);
    for i in 0..5 {
        ok(&mut c, &["SET", &format!("k{i}"), "v"]);
    }
    for _ in 0..3 {
        q(&mut c, &["GET", "k1"]);
    }
    let h = histogram(&mut c, &["set", "GET", "nosuch"]);
    assert_eq!(h.len(), 2);
    for ((name, calls, buckets), (want, n)) in h.iter().zip([("set", 5), ("get", 3)]) {
        assert_eq!((name.as_str(), *calls), (want, n));
        assert_eq!(buckets.last().unwrap().1, n);
        // Keys grow by about two each, counts strictly.
        for w in buckets.windows(2) {
            assert!(w[1].0 > w[0].0 && w[1].1 > w[0].1, "{buckets:?}");
        }
        assert!(
            [1, 2, 4, 8, 16, 33, 66, 132, 264, 528, 1056, 2113, 4227, 8454, 16908]
                .contains(&buckets[0].0)
                || buckets[0].0 > 16908,
            "{buckets:?}"
        );
    }
    // A container names its subcommands with calls.
    let h = histogram(&mut c, &["config"]);
    assert_eq!(h.len(), 1);
    assert_eq!((h[0].0.as_str(), h[0].1), ("config|resetstat", 1));

    let info = text(&q(&mut c, &["INFO", "latencystats"]));
    assert!(info.starts_with("# Latencystats\r\n"), "{info}");
    let set_line = info
        .lines()
        .find(|l| l.starts_with("latency_percentiles_usec_set:"))
        .unwrap_or_else(|| panic!("{info}"));
    let fields: Vec<&str> = set_line.split(':').nth(1).unwrap().split(',').collect();
    let keys: Vec<&str> = fields
        .iter()
        .map(|f| f.split('=').next().unwrap())
        .collect();
    assert_eq!(keys, ["p50", "p99", "p99.9"]);
    for f in fields {
        let v = f.split('=').nth(1).unwrap();
        assert_eq!(v.split('.').nth(1).unwrap().len(), 3, "{set_line}");
    }
    ok(
        &mut c,
        &[
            "CONFIG",
            "SET",
            "latency-tracking-info-percentiles",
            "50 99.99",
        ],
    );
    let info = text(&q(&mut c, &["INFO", "latencystats"]));
    assert!(info.contains("latency_percentiles_usec_get:p50="), "{info}");
    assert!(info.contains(",p99.99="), "{info}");
    // Not a default section.
    assert!(!text(&q(&mut c, &["INFO"])).contains("Latencystats"));
    assert!(text(&q(&mut c, &["INFO", "everything"])).contains("# Latencystats"));

    ok(&mut c, &["CONFIG", "SET", "latency-tracking", "no"]);
    q(&mut c, &["GET", "k1"]);
    assert_eq!(histogram(&mut c, &["get"])[0].1, 3);
    assert_eq!(
        text(&q(&mut c, &["INFO", "latencystats"])),
        "# Latencystats\r\n"
    );
    ok(&mut c, &["CONFIG", "RESETSTAT"]);
    assert_eq!(histogram(&mut c, &["get"]), []);
}

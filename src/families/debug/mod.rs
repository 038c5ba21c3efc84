//! DEBUG: the subcommands of Redis 7.0's DEBUG that cairn can honestly
//! carry out, with Redis's replies and errors. Those that poke at Redis's
//! own memory (SEGFAULT, PANIC, OOM, LEAK, MALLCTL, SDSLEN, LISTPACK,
//! QUICKLIST, HTSTATS, STRUCTSIZE...), its AOF, replicas or cluster bus
//! answer as unknown subcommands, and DEBUG HELP lists only the others.
//!
//! The whole command is refused unless `enable-debug-command` (read at
//! start) is `yes`, or `local` and the client is on a loopback address:
//! the connection checks it before anything else runs or queues it
//! (`config::protected_refusal`).

mod digest;
mod object;
mod populate;

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{coordinated, help_reply, subcommand_syntax};
use crate::command::args::{is, Args, NOT_INTEGER};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::storage::keyspace::Key;
use crate::util::num::{atoi, parse_i64};

/// DEBUG HELP: Redis's lines for the subcommands cairn implements.
const HELP: &[&str] = &[
    "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANGE-REPL-ID",
    "    Change the replication IDs of the instance.",
    "    Dangerous: should be used only for testing the replication subsystem.",
    "DIGEST",
    "    Output a hex signature representing the current DB content.",
    "DIGEST-VALUE <key> [<key> ...]",
    "    Output a hex signature of the values of all the specified keys.",
    "ERROR <string>",
    "    Return a Redis protocol error with <string> as message. Useful for clients",
    "    unit tests to simulate Redis errors.",
    "LOG <message>",
    "    Write <message> to the server log.",
    "LOADAOF",
    "    Flush the AOF buffers on disk and reload the AOF in memory.",
    "OBJECT <key>",
    "    Show low level info about `key` and associated value.",
    "POPULATE <count> [<prefix>] [<size>]",
    "    Create <count> string keys named key:<num>. If <prefix> is specified then",
    "    it is used instead of the 'key' prefix. These are not propagated to",
    "    replicas. Cluster slots are not respected so keys not belonging to the",
    "    current node can be created in cluster mode.",
    "PROTOCOL <type>",
    "    Reply with a test value of the specified type. <type> can be: string,",
    "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
    "    true, false.",
    "RELOAD [option ...]",
    "    Save the RDB on disk and reload it back to memory. Valid <option> values:",
    "    * MERGE: conflicting keys will be loaded from RDB.",
    "    * NOFLUSH: the existing database will not be removed before load, but",
    "      conflicting keys will generate an exception and kill the server.",
    "    * NOSAVE: the database will be loaded from an existing RDB file.",
    "    Examples:",
    "    * DEBUG RELOAD: verify that the server is able to persist, flush and reload",
    "      the database.",
    "    * DEBUG RELOAD NOSAVE: replace the current database with the contents of an",
    "      existing RDB file.",
    "    * DEBUG RELOAD NOSAVE NOFLUSH MERGE: add the contents of an existing RDB",
    "      file to the database.",
    "SET-ACTIVE-EXPIRE <0|1>",
    "    Setting it to 0 disables expiring keys in background when they are not",
    "    accessed (otherwise the Redis behavior). Setting it to 1 reenables back the",
    "    default.",
    "QUICKLIST-PACKED-THRESHOLD <size>",
    "    Sets the threshold for elements to be inserted as plain vs packed nodes",
    "    Default value is 1GB, allows values up to 4GB. Setting to 0 restores to default.",
    "SET-SKIP-CHECKSUM-VALIDATION <0|1>",
    "    Enables or disables checksum checks for RDB files and RESTORE's payload.",
    "SLEEP <seconds>",
    "    Stop the server for <seconds>. Decimals allowed.",
    "STRINGMATCH-TEST",
    "    Run a fuzz tester against the stringmatchlen() function.",
    "PAUSE-CRON <0|1>",
    "    Stop periodic cron job processing.",
    "REPLYBUFFER PEAK-RESET-TIME <NEVER||RESET|time>",
    "    Sets the time (in milliseconds) to wait between client reply buffer peak resets.",
    "    In case NEVER is provided the last observed peak will never be reset",
    "    In case RESET is provided the peak reset time will be restored to the default value",
    "REPLYBUFFER RESIZING <0|1>",
    "    Enable or disable the reply buffer resize cron job",
    "HELP",
    "    Prints this help.",
];

/// DEBUG subcommand [arg ...]
pub fn debug(s: &mut Session, a: Args) -> Action {
    let sub = a.get(1).to_ascii_lowercase();
    let argc = a.len();
    let switches = &s.server.shards.switches;
    let flag = |f: &std::sync::atomic::AtomicBool| {
        f.store(atoi(a.get(2)) != 0, std::sync::atomic::Ordering::Relaxed);
        Action::from(Reply::Ok)
    };
    match (sub.as_slice(), argc) {
        (b"help", 2) => help_reply(HELP).into(),
        (b"sleep", 3) => sleep(s, strtod(a.get(2))),
        (b"set-active-expire", 3) => flag(&switches.active_expire),
        (b"pause-cron", 3) => flag(&switches.cron_paused),
        (b"set-skip-checksum-validation", 3) => flag(&switches.skip_checksum),
        (b"log", 3) => {
            tracing::warn!("DEBUG LOG: {}", String::from_utf8_lossy(a.get(2)));
            Reply::Ok.into()
        }
        (b"error", 3) => Reply::Error(String::from_utf8_lossy(a.get(2)).into_owned()).into(),
        (b"change-repl-id", 2) => {
            tracing::info!("Changing replication IDs after receiving DEBUG change-repl-id");
            *s.server.replid.lock() = crate::util::hex_id();
            Reply::Ok.into()
        }
        (b"quicklist-packed-threshold", 3) => {
            let size = super::config::memtoull(&String::from_utf8_lossy(a.get(2)));
            match size.filter(|&n| s.server.set_packed_threshold(n)) {
                Some(_) => Reply::Ok.into(),
                None => {
                    Reply::err("argument must be a memory value bigger than 1 and smaller than 4gb")
                        .into()
                }
            }
        }
        (b"replybuffer", 4) => replybuffer(&a),
        (b"stringmatch-test", 2) => {
            stringmatch_fuzz();
            Reply::Simple("Apparently Redis did not crash: test passed").into()
        }
        (b"object", 3) => object::object(s, a.get(2)),
        (b"populate", 3..=5) => populate::populate(s, &a),
        (b"digest", 2) => {
            let ids = (0..s.server.shards.len()).collect();
            Action::ReadMany {
                ids,
                f: Box::new(|readers| match digest::dataset(readers) {
                    Ok(d) => Reply::Status(digest::hex(&d)),
                    Err(e) => Reply::err(e),
                }),
            }
        }
        (b"digest-value", _) => digest_values(s, a.from(2).to_vec()),
        (b"protocol", 3) => protocol(a.get(2), s.resp3),
        (b"set-disable-deny-scripts", 3) => {
            let on = atoi(a.get(2)) != 0;
            s.server.deny_scripts_disabled.store(on, Ordering::Relaxed);
            Reply::Ok.into()
        }
        (b"reload", _) => reload(s, &a),
        (b"loadaof", _) => loadaof(s),
        _ => subcommand_syntax(&a).into(),
    }
}

/// C's strtod: the longest leading part that reads as a number, 0 if none.
fn strtod(s: &[u8]) -> f64 {
    let s = String::from_utf8_lossy(s.trim_ascii_start()).into_owned();
    (1..=s.len())
        .rev()
        .filter(|&n| s.is_char_boundary(n))
        .find_map(|n| s[..n].parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// DEBUG SLEEP: every shard held for that long, readers kept out too, so
/// other clients' commands on keys wait, as Redis's whole server does.
fn sleep(s: &Session, secs: f64) -> Action {
    let micros = (secs * 1e6) as i64;
    let pause = Duration::from_micros(micros.max(0) as u64);
    let shards = s.server.shards.clone();
    let ids: Vec<usize> = (0..shards.len()).collect();
    let server = s.server.clone();
    let plan = coordinated(ids.clone(), move |locked| async move {
        let held: Vec<_> = ids
            .iter()
            .map(|&id| {
                let shard = shards.shard(id).clone();
                locked.send(id, move |_| {
                    // Readers open snapshots only while they can take this.
                    let _readers_out = shard.commit_lock.write();
                    std::thread::sleep(pause);
                    Ok(())
                })
            })
            .collect();
        for h in held {
            h.wait().await?;
        }
        Ok(Ok(Reply::Ok))
    });
    if s.in_exec {
        // EXEC runs the plan inside the shards it already holds.
        return plan;
    }
    // Awaited by the connection, so the sleep is the command's time, as
    // SLOWLOG and LATENCY see it in Redis (a plan queued with the
    // coordinator is timed when queued, like a write).
    Action::Job(Box::pin(async move {
        crate::families::blocking::run(&server, plan).await
    }))
}

/// DEBUG REPLYBUFFER PEAK-RESET-TIME|RESIZING value: accepted as Redis
/// accepts it; cairn's reply buffers have no peak or resize cycle to tune.
fn replybuffer(a: &Args) -> Action {
    let value = a.get(3);
    if is(a.get(2), "peak-reset-time") {
        if !is(value, "never") && !is(value, "reset") && parse_i64(value).is_none() {
            return Reply::Error(NOT_INTEGER.into()).into();
        }
    } else if !is(a.get(2), "resizing") {
        return subcommand_syntax(a).into();
    }
    Reply::Ok.into()
}

/// DEBUG STRINGMATCH-TEST: random patterns against random strings through
/// the glob matcher; surviving is the test.
fn stringmatch_fuzz() {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    let text = |rng: &mut rand::rngs::ThreadRng| -> Vec<u8> {
        let len = rng.gen_range(0..32);
        (0..len).map(|_| rng.gen::<u8>()).collect()
    };
    for _ in 0..100_000 {
        let (pattern, string) = (text(&mut rng), text(&mut rng));
        crate::util::glob::string_match(&pattern, &string, false);
    }
}

/// DEBUG DIGEST-VALUE key [key ...]: one digest per key (zeros when it does
/// not exist), expired keys not yet removed included, as in Redis.
fn digest_values(s: &Session, keys: Vec<bytes::Bytes>) -> Action {
    let db = s.db;
    let shard_of: Vec<usize> = keys.iter().map(|k| s.shard_of(k)).collect();
    let mut ids = shard_of.clone();
    ids.sort_unstable();
    ids.dedup();
    let at = ids.clone();
    Action::ReadMany {
        ids,
        f: Box::new(move |readers| {
            let mut out = Vec::with_capacity(keys.len());
            for (k, id) in keys.iter().zip(shard_of) {
                let r = readers[at.binary_search(&id).expect("shard read")];
                let mut d = [0; 20];
                match digest::stored(r, Key::new(db, k)) {
                    Ok(Some((value, expires))) => digest::value(&mut d, &value, expires),
                    Ok(None) => {}
                    Err(e) => return Reply::err(e),
                }
                out.push(Reply::Status(digest::hex(&d)));
            }
            Reply::Array(out)
        }),
    }
}

/// DEBUG PROTOCOL type: a sample reply of each RESP type.
fn protocol(name: &[u8], resp3: bool) -> Action {
    let ints = || (0..3).map(Reply::Int).collect::<Vec<_>>();
    let reply = match name.to_ascii_lowercase().as_slice() {
        b"string" => Reply::bulk("Hello World"),
        b"integer" => Reply::Int(12345),
        // Redis's sample value, not an approximation of pi.
        #[allow(clippy::approx_constant)]
        b"double" => Reply::Double(3.141),
        b"bignum" => Reply::BigNumber("1234567999999999999999999999999999999".into()),
        b"null" => Reply::Nil,
        b"array" => Reply::Array(ints()),
        b"set" => Reply::Set(ints()),
        b"map" => Reply::Map((0..3).map(|i| (Reply::Int(i), Reply::Bool(i == 1))).collect()),
        b"attrib" => Reply::Frames(vec![
            Reply::Attribute(vec![(
                Reply::bulk("key-popularity"),
                Reply::Array(vec![Reply::bulk("key:123"), Reply::Int(90)]),
            )]),
            Reply::bulk("Some real reply following the attribute"),
        ]),
        b"push" if !resp3 => Reply::err("RESP2 is not supported by this command"),
        b"push" => Reply::Frames(vec![
            Reply::Push(vec![Reply::bulk("server-cpu-usage"), Reply::Int(42)]),
            Reply::bulk("Some real reply following the push reply"),
        ]),
        b"verbatim" => Reply::Verbatim("This is a verbatim\nstring".into()),
        b"true" => Reply::Bool(true),
        b"false" => Reply::Bool(false),
        _ => Reply::err("Wrong protocol type name. Please use one of the following: string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false"),
    };
    reply.into()
}

/// DEBUG LOADAOF: Redis empties its data and loads it back from its
/// append-only files. cairn's log and shard files are that record, so
/// this reopens them as DEBUG RELOAD does, and answers OK.
fn loadaof(s: &Session) -> Action {
    reopen(s, "Append Only File loaded by DEBUG LOADAOF", None)
}

/// Reopens every shard's files (DEBUG RELOAD and LOADAOF), then runs
/// `then` (RELOAD's encodings afresh: see `object::encode_afresh`). Inside
/// a transaction only `then` runs: the transaction holds the shards a
/// reopen must close, and what a client reads after a reload is what it
/// read before, so the reopen is the only part left out.
fn reopen(s: &Session, done: &'static str, then: Option<Action>) -> Action {
    if s.in_exec {
        return then.unwrap_or_else(|| Reply::Ok.into());
    }
    let server = s.server.clone();
    Action::Job(Box::pin(async move {
        if let Err(e) = server.shards.reopen().await {
            tracing::error!(error = %e, "reopening the shard files failed");
            return Reply::err(LOAD_FAILED);
        }
        let reply = match then {
            Some(then) => super::blocking::run(&server, then).await,
            None => Reply::Ok,
        };
        if matches!(reply, Reply::Ok) {
            tracing::info!("{done}");
        }
        reply
    }))
}

/// Redis 7.0's reply when DEBUG RELOAD cannot load what it saved.
const LOAD_FAILED: &str = "Error trying to load the RDB dump";

/// DEBUG RELOAD [MERGE] [NOFLUSH] [NOSAVE]: cairn's data is already on
/// disk, so there is nothing to save or to load back. Reloading closes
/// every shard's file and opens it again (see `ShardSet::reopen`), which
/// proves what Redis's reload proves: the data survives a reopen. The
/// options change nothing, but for NOFLUSH without MERGE over loaded
/// function libraries, which fails as Redis's load does.
fn reload(s: &Session, a: &Args) -> Action {
    let known = ["merge", "noflush", "nosave"];
    if !a.from(2).iter().all(|o| known.iter().any(|k| is(o, k))) {
        return Reply::err("DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options.")
            .into();
    }
    let has = |name: &str| a.from(2).iter().any(|o| is(o, name));
    // Redis loads the saved functions back over the ones it kept: without
    // MERGE a library already there fails the load, before any key is
    // read, and nothing changes. (A key already there would stop Redis
    // altogether; cairn's keys are the ones it reopens, so it goes on.)
    if has("noflush") && !has("merge") && !s.server.scripts.registry().libraries().is_empty() {
        tracing::warn!("DEBUG RELOAD NOFLUSH: the saved function libraries already exist");
        return Reply::err(LOAD_FAILED).into();
    }
    let limits = s.server.encoding_limits();
    let afresh = super::generic::on_all_shards(
        s,
        move |w, _| super::object::encode_afresh(w, &limits),
        Reply::Ok,
    );
    reopen(s, "DB reloaded by DEBUG RELOAD", Some(afresh))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// strtod as C's (atoi's test is in util::num).
    #[test]
    fn numbers_read_as_c_reads_them() {
        assert_eq!(strtod(b"0.5"), 0.5);
        assert_eq!(strtod(b".005x"), 0.005);
        assert_eq!(strtod(b"abc"), 0.0);
        assert_eq!(strtod(b" 2e1s"), 20.0);
    }
}

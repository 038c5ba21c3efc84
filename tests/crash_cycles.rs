//! Crash cycles under load: for every durability policy, 20 SIGKILLs at
//! random moments on the same data directory while writers drive every
//! type (strings, hashes, lists, sets, sorted sets, streams, INCR counters,
//! cross-shard MSET and cross-shard MULTI/EXEC).
//!
//! Every key is written with values that count up (the n-th write to a key
//! writes n), so what a key holds after a restart names exactly which of
//! its writes were applied. After each restart every key must hold a
//! prefix of what was sent to it (a list is exactly 0..n-1, a hash / set /
//! sorted set holds exactly the members 0..n-1, a stream's entries are
//! 0..n-1 in id order, a counter is not past its INCRs); on each shard a
//! writer's keys must agree with one prefix of what that writer sent to the
//! shard; the pairs written by MSET and by MULTI/EXEC across the two
//! shards are never torn; and under `always` nothing acknowledged is lost.
//! Writers resume from what the server holds, so the prefix property is
//! checked over all 20 cycles on one directory. A final clean SHUTDOWN and
//! restart must keep everything exactly.
//!
//! `CRASH_SEED=<n>` replays the random choices of a run (printed first;
//! the timing of the server and of the kill are not replayed).
//! cairn runs with `write_buffer_mb = 1` (through `--config`, there being
//! no flag), so full write buffers move into the shard files during every
//! run and kills land during those moves too; `CRASH_WRITE_BUFFER_MB=<n>`
//! sets another size (at the default 64 MiB they move only at restarts).
//! A failing check keeps the data directory (as left by the kill, and as
//! after the restart that showed the failure) under
//! `/tmp/crash-fail-<mode>/`.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::process::{free_port, Proc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, RedisError, Value};

/// SIGKILLs per test, all on the same data directory.
const CYCLES: usize = 20;
/// Writer connections per cycle.
const WRITERS: usize = 3;
/// How long writers run before the kill, at least and at most (ms).
const RUN_MS: (u64, u64) = (150, 600);
/// Shards of the server.
const SHARDS: usize = 2;
/// Bytes of padding in each string write.
const PAD: usize = 2048;

/// The value of string write number `n`.
fn padded(n: u64) -> String {
    format!("{n}:{}", "x".repeat(PAD))
}

// ---------------------------------------------------------------------------
// The server process (as tests/durability.rs runs it).

/// Starts cairn on `data` with `durability` and waits until it answers
/// PING. Its write buffers are 1 MiB (cairn has no flag for it: `--config`
/// names a file of `write_buffer_mb` only), or `CRASH_WRITE_BUFFER_MB`, so
/// that buffers move into the shard files during the run.
fn start(cwd: &Path, data: &Path, durability: &str) -> Proc {
    let mb: usize = std::env::var("CRASH_WRITE_BUFFER_MB").map_or(1, |mb| {
        mb.parse().expect("CRASH_WRITE_BUFFER_MB is a number")
    });
    let file = cwd.join("write-buffer.toml");
    std::fs::write(&file, format!("write_buffer_mb = {mb}\n")).unwrap();
    let config = [std::ffi::OsStr::new("--config"), file.as_os_str()];
    let mut p = Proc::spawn(
        cwd,
        data,
        free_port(),
        Stdio::inherit(),
        durability,
        &config,
    );
    p.wait_ready();
    p
}

// ---------------------------------------------------------------------------
// Randomness: seeded, so `CRASH_SEED` replays a run's choices.

/// The generator of a run (or of one writer), from its seed.
fn rng_of(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// `CRASH_SEED`, or one from the clock.
fn seed() -> u64 {
    match std::env::var("CRASH_SEED") {
        Ok(s) => s.parse().expect("CRASH_SEED is a u64"),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

// ---------------------------------------------------------------------------
// What the writers write.

/// The kind of a tracked key (or pair of keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `SET k n:<PAD bytes>`: holds the index of the last write (padded,
    /// so that a run writes enough to fill small write buffers).
    Str,
    /// `HSET k f{n} n:<PAD bytes>` (padded, as strings are: a hash keeps
    /// every write, so its rows fill write buffers).
    Hash,
    /// `RPUSH k n`.
    List,
    /// `SADD k n`.
    Set,
    /// `ZADD k n m{n}`.
    ZSet,
    /// `XADD k * n n`.
    Stream,
    /// `INCR k`: holds the number of INCRs applied.
    Counter,
    /// `MSET a n b n` (a and b on different shards).
    Mset,
    /// `MULTI, SET a n, SET b n, EXEC` (a and b on different shards).
    Exec,
}

/// One key (or cross-shard pair) of a writer, and how many of its writes
/// were sent, acknowledged, and present at the start of the cycle. A count
/// is the number of writes to the key: the n-th write (from 0) writes n.
#[derive(Clone, Debug)]
struct Track {
    kind: Kind,
    keys: Vec<String>,
    /// The shard of a single key (None for the pairs).
    shard: Option<usize>,
    /// The count the server held when the cycle started.
    base: u64,
    /// The count if every write sent so far was applied.
    sent: u64,
    /// The count every acknowledged write adds up to.
    acked: u64,
}

impl Track {
    fn new(kind: Kind, keys: Vec<String>) -> Track {
        let shard = (keys.len() == 1).then(|| common::shard_of(&keys[0], SHARDS));
        if keys.len() == 2 {
            assert_ne!(
                common::shard_of(&keys[0], SHARDS),
                common::shard_of(&keys[1], SHARDS),
                "{keys:?} must be on different shards"
            );
        }
        Track {
            kind,
            keys,
            shard,
            base: 0,
            sent: 0,
            acked: 0,
        }
    }

    fn name(&self) -> String {
        format!("{:?} {}", self.kind, self.keys.join("+"))
    }

    /// The commands of write number `n`, and the replies they must get.
    fn commands(&self, n: u64) -> Vec<(redis::Cmd, Expect)> {
        let k = &self.keys;
        let v = n.to_string();
        let one = |c: redis::Cmd, e: Expect| vec![(c, e)];
        match self.kind {
            Kind::Str => one(cmd(&["SET", &k[0], &padded(n)]), Expect::Ok),
            Kind::Hash => one(
                cmd(&["HSET", &k[0], &format!("f{n}"), &padded(n)]),
                Expect::Int(1),
            ),
            Kind::List => one(cmd(&["RPUSH", &k[0], &v]), Expect::Int(n as i64 + 1)),
            Kind::Set => one(cmd(&["SADD", &k[0], &v]), Expect::Int(1)),
            Kind::ZSet => one(cmd(&["ZADD", &k[0], &v, &format!("m{n}")]), Expect::Int(1)),
            Kind::Stream => one(cmd(&["XADD", &k[0], "*", "n", &v]), Expect::Id),
            Kind::Counter => one(cmd(&["INCR", &k[0]]), Expect::Int(n as i64 + 1)),
            Kind::Mset => one(cmd(&["MSET", &k[0], &v, &k[1], &v]), Expect::Ok),
            Kind::Exec => vec![
                (cmd(&["MULTI"]), Expect::Ok),
                (cmd(&["SET", &k[0], &v]), Expect::Queued),
                (cmd(&["SET", &k[1], &v]), Expect::Queued),
                (cmd(&["EXEC"]), Expect::OkOk),
            ],
        }
    }
}

/// The reply a command must get while the server runs.
#[derive(Clone, Copy, Debug)]
enum Expect {
    Ok,
    Int(i64),
    /// A stream entry id.
    Id,
    Queued,
    /// EXEC of two SETs.
    OkOk,
}

impl Expect {
    fn matches(self, v: &Value) -> bool {
        match (self, v) {
            (Expect::Ok, Value::Okay) => true,
            (Expect::Ok, Value::SimpleString(s)) => s == "OK",
            (Expect::Int(n), Value::Int(m)) => n == *m,
            (Expect::Id, Value::BulkString(b)) => parse_id(b).is_some(),
            (Expect::Queued, Value::SimpleString(s)) => s == "QUEUED",
            (Expect::OkOk, Value::Array(a)) => {
                a.len() == 2 && a.iter().all(|x| Expect::Ok.matches(x))
            }
            _ => false,
        }
    }
}

fn cmd(args: &[&str]) -> redis::Cmd {
    common::cmd(args)
}

/// The tracked keys of writer `w`, in the order each step writes them.
/// Indices 0..7 are single keys written every step; 7 (MSET) is written
/// every step and 8 (EXEC) on some steps.
fn tracks_of(w: usize) -> Vec<Track> {
    let single = |kind, key: String| Track::new(kind, vec![key]);
    let (ma, mb) = common::waiting::keys_on_both_shards(&format!("m:{w}:"));
    let (ta, tb) = common::waiting::keys_on_both_shards(&format!("t:{w}:"));
    vec![
        single(Kind::Str, format!("s:{w}")),
        single(Kind::Hash, format!("h:{w}")),
        single(Kind::List, format!("l:{w}")),
        single(Kind::Set, format!("st:{w}")),
        single(Kind::ZSet, format!("z:{w}")),
        single(Kind::Stream, format!("x:{w}")),
        single(Kind::Counter, format!("c:{w}")),
        Track::new(Kind::Mset, vec![ma, mb]),
        Track::new(Kind::Exec, vec![ta, tb]),
    ]
}

/// The index of the EXEC pair in `tracks_of`.
const EXEC: usize = 8;

/// Whether an error is a reply from the server (rather than the
/// connection failing).
fn server_error(e: &RedisError) -> bool {
    e.code().is_some()
}

/// What a writer thread hands back.
struct WriterOut {
    tracks: Vec<Track>,
    /// Wrong replies and server errors (failures whenever they happen).
    problems: Vec<String>,
    /// When the connection failed (it must be after the kill).
    failed_at: Option<(Instant, String)>,
    steps: u64,
}

/// Writes steps until the connection fails or `stop` is set. A pipelined
/// writer sends each step as one pipeline and counts it acknowledged when
/// every reply came; the other sends one command at a time.
fn writer(
    w: usize,
    mut c: Connection,
    mut tracks: Vec<Track>,
    pipelined: bool,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> WriterOut {
    let mut rng = rng_of(seed);
    let mut problems = Vec::new();
    let mut failed_at = None;
    let mut steps = 0;
    'steps: while !stop.load(Ordering::Relaxed) {
        let with_exec = rng.gen_range(0..=3) == 0;
        let parts: Vec<usize> = (0..tracks.len())
            .filter(|&i| i != EXEC || with_exec)
            .collect();
        if pipelined {
            let mut p = redis::pipe();
            let mut expects = Vec::new();
            for &i in &parts {
                let n = tracks[i].sent;
                for (command, e) in tracks[i].commands(n) {
                    p.add_command(command);
                    expects.push((i, e));
                }
                tracks[i].sent += 1;
            }
            match p.query::<Vec<Value>>(&mut c) {
                Ok(replies) => {
                    let wrong: Vec<String> = expects
                        .iter()
                        .zip(replies.iter().chain(std::iter::repeat(&Value::Nil)))
                        .filter(|((_, e), r)| !e.matches(r))
                        .map(|((i, e), r)| {
                            format!("{}: expected {e:?}, got {r:?}", tracks[*i].name())
                        })
                        .collect();
                    if wrong.is_empty() && replies.len() == expects.len() {
                        for &i in &parts {
                            tracks[i].acked = tracks[i].sent;
                        }
                    } else {
                        problems.push(format!(
                            "writer {w} step {steps}: {} replies for {} commands; wrong: {wrong:?}",
                            replies.len(),
                            expects.len()
                        ));
                        break 'steps;
                    }
                }
                Err(e) if server_error(&e) => {
                    problems.push(format!("writer {w} step {steps}: server error {e}"));
                    break 'steps;
                }
                Err(e) => {
                    failed_at = Some((Instant::now(), e.to_string()));
                    break 'steps;
                }
            }
        } else {
            for &i in &parts {
                let n = tracks[i].sent;
                tracks[i].sent += 1;
                let commands = tracks[i].commands(n);
                for (command, e) in commands {
                    match command.query::<Value>(&mut c) {
                        Ok(r) if e.matches(&r) => {}
                        Ok(r) => {
                            problems.push(format!(
                                "writer {w} step {steps}: {}: expected {e:?}, got {r:?}",
                                tracks[i].name()
                            ));
                            break 'steps;
                        }
                        Err(e) if server_error(&e) => {
                            problems.push(format!(
                                "writer {w} step {steps}: {}: server error {e}",
                                tracks[i].name()
                            ));
                            break 'steps;
                        }
                        Err(e) => {
                            failed_at = Some((Instant::now(), e.to_string()));
                            break 'steps;
                        }
                    }
                }
                tracks[i].acked = tracks[i].sent;
            }
        }
        steps += 1;
    }
    WriterOut {
        tracks,
        problems,
        failed_at,
        steps,
    }
}

// ---------------------------------------------------------------------------
// Reading back what a key holds.

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

/// A stream id as (ms, seq).
fn parse_id(b: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(b).ok()?;
    let (ms, seq) = s.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// `0..n` as strings.
fn upto(n: usize) -> Vec<String> {
    (0..n).map(|i| i.to_string()).collect()
}

/// Reads `t`'s keys; returns how many of its writes they hold, or why
/// what they hold is not the result of a prefix of its writes.
fn held(c: &mut Connection, t: &Track) -> Result<u64, String> {
    let key = t.keys[0].as_str();
    let q = |c: &mut Connection, args: &[&str]| -> Result<Value, String> {
        cmd(args)
            .query::<Value>(c)
            .map_err(|e| format!("{args:?}: {e}"))
    };
    let strings = |v: Value| -> Result<Vec<String>, String> {
        match v {
            Value::Array(a) => a
                .iter()
                .map(|x| text(x).ok_or_else(|| format!("not a string: {x:?}")))
                .collect(),
            Value::Map(m) => {
                let mut out = Vec::new();
                for (k, v) in &m {
                    out.push(text(k).ok_or_else(|| format!("not a string: {k:?}"))?);
                    out.push(text(v).ok_or_else(|| format!("not a string: {v:?}"))?);
                }
                Ok(out)
            }
            Value::Set(a) => a
                .iter()
                .map(|x| text(x).ok_or_else(|| format!("not a string: {x:?}")))
                .collect(),
            other => Err(format!("not an array: {other:?}")),
        }
    };
    let number = |v: &Value, what: &str| -> Result<Option<u64>, String> {
        match v {
            Value::Nil => Ok(None),
            other => text(other)
                .and_then(|s| s.parse::<u64>().ok())
                .map(Some)
                .ok_or_else(|| format!("{what} holds {other:?}, not a count")),
        }
    };
    match t.kind {
        Kind::Str => match q(c, &["GET", key])? {
            Value::Nil => Ok(0),
            v => {
                let s = text(&v).ok_or_else(|| format!("{key} holds {v:?}"))?;
                let n = s
                    .split_once(':')
                    .and_then(|(n, _)| n.parse::<u64>().ok())
                    .filter(|&n| s == padded(n))
                    .ok_or_else(|| {
                        format!(
                            "{key} holds {:?} ({} bytes), not n:<pad>",
                            &s[..s.len().min(40)],
                            s.len()
                        )
                    })?;
                Ok(n + 1)
            }
        },
        Kind::Counter => Ok(number(&q(c, &["GET", key])?, key)?.unwrap_or(0)),
        Kind::List => {
            let got = strings(q(c, &["LRANGE", key, "0", "-1"])?)?;
            if got != upto(got.len()) {
                return Err(format!(
                    "list {key} of {} is not 0..n-1: {}",
                    got.len(),
                    first_difference(&got, &upto(got.len()))
                ));
            }
            Ok(got.len() as u64)
        }
        Kind::Set => {
            let mut got: Vec<u64> = strings(q(c, &["SMEMBERS", key])?)?
                .iter()
                .map(|s| s.parse().map_err(|_| format!("set {key} holds {s:?}")))
                .collect::<Result<_, _>>()?;
            got.sort_unstable();
            let want: Vec<u64> = (0..got.len() as u64).collect();
            if got != want {
                let g: Vec<String> = got.iter().map(u64::to_string).collect();
                return Err(format!(
                    "set {key} of {} is not {{0..n-1}}: {}",
                    got.len(),
                    first_difference(&g, &upto(got.len()))
                ));
            }
            Ok(got.len() as u64)
        }
        Kind::Hash => {
            let flat = strings(q(c, &["HGETALL", key])?)?;
            let map: HashMap<&str, &str> = flat
                .chunks(2)
                .map(|p| (p[0].as_str(), p[1].as_str()))
                .collect();
            let n = map.len();
            for i in 0..n {
                let f = format!("f{i}");
                if map.get(f.as_str()).copied() != Some(padded(i as u64).as_str()) {
                    let mut fields: Vec<&str> = map.keys().copied().collect();
                    fields.sort_by_key(|f| f[1..].parse::<u64>().unwrap_or(u64::MAX));
                    return Err(format!(
                        "hash {key} of {n} fields is not f0..f{}: {f} is {:?}; fields {}",
                        n - 1,
                        map.get(f.as_str()).map(|v| &v[..v.len().min(24)]),
                        summary(&fields)
                    ));
                }
            }
            Ok(n as u64)
        }
        Kind::ZSet => {
            let flat = strings(q(c, &["ZRANGE", key, "0", "-1", "WITHSCORES"])?)?;
            let n = flat.len() / 2;
            for (i, p) in flat.chunks(2).enumerate() {
                if p[0] != format!("m{i}") || p[1].parse::<f64>().ok() != Some(i as f64) {
                    return Err(format!(
                        "zset {key} of {n} is not m0..m{} scored 0..: rank {i} is {p:?}",
                        n.saturating_sub(1)
                    ));
                }
            }
            Ok(n as u64)
        }
        Kind::Stream => {
            let entries = match q(c, &["XRANGE", key, "-", "+"])? {
                Value::Array(a) => a,
                other => return Err(format!("XRANGE {key}: {other:?}")),
            };
            let mut last: Option<(u64, u64)> = None;
            for (i, e) in entries.iter().enumerate() {
                let (id, fields) = match e {
                    Value::Array(p) if p.len() == 2 => (&p[0], &p[1]),
                    other => return Err(format!("stream {key} entry {i}: {other:?}")),
                };
                let id = match id {
                    Value::BulkString(b) => parse_id(b),
                    _ => None,
                }
                .ok_or_else(|| format!("stream {key} entry {i} id {id:?}"))?;
                if last.is_some_and(|l| l >= id) {
                    return Err(format!(
                        "stream {key} entry {i}: id {id:?} not after {last:?}"
                    ));
                }
                last = Some(id);
                let fields = strings(fields.clone())?;
                if fields != ["n".to_string(), i.to_string()] {
                    return Err(format!(
                        "stream {key} of {} is not n=0..n-1: entry {i} is {fields:?}",
                        entries.len()
                    ));
                }
            }
            Ok(entries.len() as u64)
        }
        Kind::Mset | Kind::Exec => {
            let a = number(&q(c, &["GET", &t.keys[0]])?, &t.keys[0])?;
            let b = number(&q(c, &["GET", &t.keys[1]])?, &t.keys[1])?;
            if a != b {
                return Err(format!(
                    "TORN {:?} pair: {}={a:?} but {}={b:?}",
                    t.kind, t.keys[0], t.keys[1]
                ));
            }
            Ok(a.map_or(0, |v| v + 1))
        }
    }
}

/// Where `got` first differs from `want`, with a little context.
fn first_difference(got: &[String], want: &[String]) -> String {
    let at = got
        .iter()
        .zip(want)
        .position(|(g, w)| g != w)
        .unwrap_or(got.len().min(want.len()));
    let lo = at.saturating_sub(3);
    format!(
        "first difference at index {at}: got {:?}, expected {:?}",
        &got[lo..(at + 4).min(got.len())],
        &want[lo..(at + 4).min(want.len())]
    )
}

/// A long list of names, shortened.
fn summary(items: &[&str]) -> String {
    if items.len() <= 12 {
        format!("{items:?}")
    } else {
        format!("{:?} .. {:?}", &items[..6], &items[items.len() - 6..])
    }
}

// ---------------------------------------------------------------------------
// The checks after a restart.

/// Which checks apply.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// After a SIGKILL.
    Killed,
    /// After a clean SHUTDOWN: everything there before must be there.
    Clean,
}

/// Reads every writer's keys after a restart, checks them against what
/// was sent and acknowledged, and starts the next cycle from what is
/// there (base = sent = acked = what the server holds).
fn verify(c: &mut Connection, writers: &mut [Vec<Track>], mode: &str, phase: Phase) -> Verified {
    let mut fails = Vec::new();
    let mut notes = Vec::new();
    let (mut unapplied, mut unacked_lost) = (0, 0);
    for (w, tracks) in writers.iter_mut().enumerate() {
        let mut counts = Vec::new();
        for t in tracks.iter() {
            let r = match held(c, t) {
                Ok(r) => r,
                Err(e) => {
                    fails.push(format!(
                        "writer {w} {}: {e} (sent {}, acked {}, base {})",
                        t.name(),
                        t.sent,
                        t.acked,
                        t.base
                    ));
                    counts.push(None);
                    continue;
                }
            };
            counts.push(Some(r));
            unapplied += t.sent.saturating_sub(r);
            unacked_lost += t.acked.saturating_sub(r);
            let about = format!(
                "writer {w} {}: holds {r} writes; sent {}, acked {}, held at cycle start {}",
                t.name(),
                t.sent,
                t.acked,
                t.base
            );
            if r > t.sent {
                fails.push(format!("{about}: MORE than was sent"));
            }
            if phase == Phase::Clean && r != t.sent {
                fails.push(format!("{about}: a clean SHUTDOWN changed it"));
            }
            if mode == "always" && r < t.acked {
                fails.push(format!("{about}: LOST acknowledged writes"));
            }
            if r < t.base {
                if mode == "always" {
                    fails.push(format!(
                        "{about}: LOST writes recovered by an earlier restart"
                    ));
                } else {
                    notes.push(format!("{about}: went back past the cycle's start"));
                }
            }
        }
        // On each shard, the writer's single keys hold one prefix of what it
        // sent there: each step writes them in track order, so counting
        // from the cycle's start, an earlier key has the same number of
        // writes as a later one or one more.
        for shard in 0..SHARDS {
            let on: Vec<(usize, i64)> = tracks
                .iter()
                .enumerate()
                .filter(|(_, t)| t.shard == Some(shard))
                .filter_map(|(i, t)| Some((i, counts[i]? as i64 - t.base as i64)))
                .collect();
            if on.iter().any(|&(_, d)| d < 0) || on.len() < 2 {
                continue;
            }
            let first = on[0].1;
            let ordered =
                on.windows(2).all(|p| p[0].1 >= p[1].1) && on.last().unwrap().1 >= first - 1;
            if !ordered {
                let shown: Vec<String> = on
                    .iter()
                    .map(|&(i, d)| format!("{}: +{d}", tracks[i].keys[0]))
                    .collect();
                fails.push(format!(
                    "writer {w} shard {shard}: keys not one prefix of what was sent there \
                     (writes since the cycle's start, in the order each step sends them): {shown:?}"
                ));
            }
        }
        for (t, r) in tracks.iter_mut().zip(counts) {
            let r = r.unwrap_or(t.sent);
            t.base = r;
            t.sent = r;
            t.acked = r;
        }
    }
    Verified {
        fails,
        notes,
        unapplied,
        acked_lost: unacked_lost,
    }
}

/// What `verify` found.
struct Verified {
    /// Failures.
    fails: Vec<String>,
    /// Things allowed but worth saying.
    notes: Vec<String>,
    /// Writes sent but not there (in flight at the kill, or lost).
    unapplied: u64,
    /// Acknowledged writes not there (allowed only without `always`).
    acked_lost: u64,
}

// ---------------------------------------------------------------------------
// Keeping the evidence.

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else {
            // A file may vanish between listing and copying while a server
            // runs on the directory; what is left is still worth keeping.
            let _ = std::fs::copy(e.path(), dest);
        }
    }
    Ok(())
}

/// The shard log files in a directory, with their sizes.
fn logs(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".wal"))
        .map(|e| {
            let len = e.metadata().map(|m| m.len()).unwrap_or(0);
            format!("{} {len}", e.file_name().to_string_lossy())
        })
        .collect();
    out.sort();
    out
}

/// `ls -la` of a directory, as text.
fn listing(dir: &Path) -> String {
    match Command::new("ls").arg("-la").arg(dir).output() {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => format!("(ls failed: {e})"),
    }
}

// ---------------------------------------------------------------------------
// The test.

fn crash_cycles(mode: &str) {
    let seed = seed();
    eprintln!("[{mode}] CRASH_SEED={seed}");
    let mut rng = rng_of(seed);
    let started = Instant::now();
    let root = tempfile::tempdir().unwrap();
    let data: PathBuf = root.path().join("data");
    let after_kill = root.path().join("after-kill");
    let mut writers: Vec<Vec<Track>> = (0..WRITERS).map(tracks_of).collect();
    let mut all_notes = Vec::new();
    let mut acked_steps = 0u64;
    let mut total_acked_lost = 0u64;

    // Keeps the directories, then panics with the failures.
    let fail = |server: Option<&mut Proc>, cycle: usize, fails: &[String]| -> ! {
        let during = listing(&data);
        if let Some(p) = server {
            p.kill();
        }
        let keep = PathBuf::from(format!("/tmp/crash-fail-{mode}"))
            .join(format!("seed-{seed}-cycle-{cycle}"));
        let _ = std::fs::remove_dir_all(&keep);
        let kept_kill = copy_dir(&after_kill, &keep.join("after-kill"));
        let kept_now = copy_dir(&data, &keep.join("after-restart"));
        panic!(
            "[{mode}] cycle {cycle} (CRASH_SEED={seed}; cycle n checks the restart after \
             kill n-1, cycle 0 the first start, cycle {} the clean restart): \
             {} failure(s):\n  {}\n\
             data dir as the restarted server held it:\n{during}\n\
             as the kill left it ({}):\n{}\n\
             kept under {} (after-kill: {kept_kill:?}, after-restart: {kept_now:?})",
            CYCLES + 1,
            fails.len(),
            fails.join("\n  "),
            after_kill.display(),
            listing(&after_kill),
            keep.display()
        );
    };

    for cycle in 0..=CYCLES {
        let t0 = Instant::now();
        let mut server = start(root.path(), &data, mode);
        let mut c = server.client();
        let Verified {
            fails,
            notes,
            unapplied,
            acked_lost,
        } = verify(&mut c, &mut writers, mode, Phase::Killed);
        if cycle > 0 {
            eprintln!(
                "[{mode}] cycle {}: after the restart {unapplied} writes sent were not there, \
                 {acked_lost} of them acknowledged",
                cycle - 1
            );
        }
        total_acked_lost += acked_lost;
        for n in &notes {
            eprintln!("[{mode}] cycle {cycle} note: {n}");
        }
        all_notes.extend(notes.into_iter().map(|n| format!("cycle {cycle}: {n}")));
        if !fails.is_empty() {
            fail(Some(&mut server), cycle, &fails);
        }
        drop(c);
        let recovered = t0.elapsed();
        if cycle == CYCLES {
            // Last: a clean SHUTDOWN and restart must keep everything.
            let status = server.shutdown();
            assert!(
                status.success(),
                "[{mode}] cairn exited with {status} after SHUTDOWN"
            );
            let mut server = start(root.path(), &data, mode);
            let mut c = server.client();
            let fails = verify(&mut c, &mut writers, mode, Phase::Clean).fails;
            if !fails.is_empty() {
                fail(Some(&mut server), cycle + 1, &fails);
            }
            drop(c);
            assert!(server.shutdown().success(), "[{mode}] second SHUTDOWN");
            break;
        }

        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = writers
            .iter()
            .enumerate()
            .map(|(w, tracks)| {
                let conn = server.client();
                let tracks = tracks.clone();
                let stop = stop.clone();
                let wseed = rng.gen::<u64>() ^ ((w as u64) << 40);
                std::thread::spawn(move || writer(w, conn, tracks, w % 2 == 0, wseed, stop))
            })
            .collect();
        let run = Duration::from_millis(rng.gen_range(RUN_MS.0..=RUN_MS.1));
        std::thread::sleep(run);
        let died = server.exited();
        let killed_at = Instant::now();
        server.kill();
        stop.store(true, Ordering::Relaxed);
        let mut fails = Vec::new();
        if let Some(status) = died {
            fails.push(format!("cairn exited on its own under load: {status}"));
        }
        let mut steps = Vec::new();
        for (w, h) in handles.into_iter().enumerate() {
            let out = h.join().expect("writer thread panicked");
            fails.extend(out.problems);
            if let Some((at, e)) = out.failed_at {
                if at < killed_at {
                    fails.push(format!(
                        "writer {w}: connection failed {:?} before the kill: {e}",
                        killed_at - at
                    ));
                }
            }
            acked_steps += out.steps;
            steps.push(out.steps);
            writers[w] = out.tracks;
        }
        // The directory as the kill left it, for a failure's report.
        let _ = std::fs::remove_dir_all(&after_kill);
        copy_dir(&data, &after_kill).expect("copy the data dir");
        eprintln!(
            "[{mode}] cycle {cycle}: restart+verify {:?}, ran {run:?}, steps per writer {steps:?}, \
             lists sent to {:?}, logs at the kill {:?}",
            recovered,
            writers.iter().map(|t| t[2].sent).collect::<Vec<_>>(),
            logs(&after_kill)
        );
        if !fails.is_empty() {
            fail(None, cycle, &fails);
        }
    }
    assert!(
        acked_steps >= CYCLES as u64,
        "[{mode}] only {acked_steps} steps acknowledged over {CYCLES} cycles: the load did not run"
    );
    eprintln!(
        "[{mode}] {CYCLES} SIGKILLs, {acked_steps} acknowledged steps, \
         {total_acked_lost} acknowledged writes not recovered, {} notes, {:?}",
        all_notes.len(),
        started.elapsed()
    );
}

// Pins: under `always`, 20 SIGKILLs at random moments under load on one
// directory lose no acknowledged write of any type, every key holds a
// prefix of its writes, and no cross-shard MSET or EXEC is torn.
#[test]
fn always_crash_cycles_keep_acknowledged_writes() {
    crash_cycles("always");
}

// Pins: under `everysec`, 20 SIGKILLs under load leave every key a prefix
// of its writes (a consistent prefix per shard) and no cross-shard commit
// torn.
#[test]
fn everysec_crash_cycles_keep_a_consistent_prefix() {
    crash_cycles("everysec");
}

// Pins: under `no`, 20 SIGKILLs under load leave every key a prefix of its
// writes (a consistent prefix per shard) and no cross-shard commit torn.
#[test]
fn no_fsync_crash_cycles_keep_a_consistent_prefix() {
    crash_cycles("no");
}

//! DUMP, RESTORE and MIGRATE: a key's value in Redis's serialization (RDB
//! object encoding, RDB version, CRC-64), so values move between cairn and
//! Redis in either direction.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::net::TcpStream;

use super::{blocking, coordinated, Fail};
use crate::cluster::node::Cluster;
use crate::command::args::{self, error, is, Args, SYNTAX};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::pubsub::notify;
use crate::rdb::keys;
use crate::rdb::object::{self, Limits, Value};
use crate::server::Server;
use crate::storage::encoding::{KeyType, MetaBody};
use crate::storage::keyspace::{self, Key};
use crate::storage::KvRead;
use crate::util::rdb::{seal, unseal_checked, Reader};

/// A DUMP payload of `value`.
pub fn payload(value: &Value, limits: &Limits) -> Vec<u8> {
    let mut body = Vec::new();
    object::encode(&mut body, value, limits);
    seal(body)
}

/// The value in a DUMP payload, or Redis's error for a payload that fails
/// its checksum (if `check_crc`) or does not decode.
pub fn parse_payload(payload: &[u8], check_crc: bool) -> Result<Value, Reply> {
    let body = unseal_checked(payload, check_crc)
        .ok_or_else(|| Reply::err("DUMP payload version or checksum are wrong"))?;
    let bad = || Reply::err("Bad data format");
    let mut r = Reader::new(body);
    let ty = r.byte().ok_or_else(bad)?;
    // Bytes after the value are ignored, as Redis ignores them.
    object::decode(ty, &mut r).map_err(|_| bad())
}

/// Whether payloads' checksums are checked (unless DEBUG
/// SET-SKIP-CHECKSUM-VALIDATION 1).
pub fn crc_checked(server: &Server) -> bool {
    let switches = &server.shards.switches;
    !switches
        .skip_checksum
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// DUMP key
pub fn dump(s: &mut Session, a: Args) -> Action {
    let limits = s.server.encoding_limits();
    s.read(a.get(1), move |r, k| {
        Ok(match super::object::read_encodable(r, k, limits)? {
            None => Reply::Nil,
            Some((value, limits, _)) => Reply::bulk(payload(&value, &limits)),
        })
    })
}

/// RESTORE's options.
struct RestoreOpts {
    replace: bool,
    absttl: bool,
    /// IDLETIME seconds.
    idle: Option<u64>,
    /// FREQ counter.
    freq: Option<u64>,
}

/// Parses RESTORE's options after the payload, with Redis's errors.
fn parse_opts(a: &Args) -> Result<RestoreOpts, Reply> {
    let mut o = RestoreOpts {
        replace: false,
        absttl: false,
        idle: None,
        freq: None,
    };
    let mut i = 4;
    while i < a.len() {
        let more = i + 1 < a.len();
        let opt = a.get(i);
        if is(opt, "replace") {
            o.replace = true;
        } else if is(opt, "absttl") {
            o.absttl = true;
        } else if is(opt, "idletime") && more && o.freq.is_none() {
            let v = args::int(a.get(i + 1))?;
            if v < 0 {
                return Err(Reply::err("Invalid IDLETIME value, must be >= 0"));
            }
            o.idle = Some(v as u64);
            i += 1;
        } else if is(opt, "freq") && more && o.idle.is_none() {
            let v = args::int(a.get(i + 1))?;
            if !(0..=255).contains(&v) {
                return Err(Reply::err("Invalid FREQ value, must be >= 0 and <= 255"));
            }
            o.freq = Some(v as u64);
            i += 1;
        } else {
            return Err(error(SYNTAX));
        }
        i += 1;
    }
    Ok(o)
}

/// RESTORE key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds]
/// [FREQ frequency]
pub fn restore(s: &mut Session, a: Args) -> Action {
    let o = match parse_opts(&a) {
        Ok(o) => o,
        Err(r) => return r.into(),
    };
    // Redis checks the target key before the TTL and the payload, so those
    // errors are only reported once the key turns out to be free; they are
    // worked out here, off the shard.
    let ttl = args::int(a.get(2)).and_then(|t| {
        if t < 0 {
            Err(Reply::err("Invalid TTL value, must be >= 0"))
        } else {
            Ok(t)
        }
    });
    let value = parse_payload(a.get(3), crc_checked(&s.server));
    let server = s.server.clone();
    let limits = server.encoding_limits();
    s.write(a.get(1), move |w, k| {
        if !o.replace && keyspace::lookup_for_write(w, k)?.is_some() {
            return Ok(Reply::Error(
                "BUSYKEY Target key name already exists.".into(),
            ));
        }
        let ttl = ttl?;
        let value = value?;
        let deleted = o.replace && keyspace::delete_if_live(w, k)?;
        let now = w.now_ms() as i64;
        // Redis adds a relative TTL to the clock in 64-bit signed
        // arithmetic: a sum that overflows reads as long past.
        let expire_ms = match ttl {
            0 => 0,
            t if o.absttl => t,
            t => t.wrapping_add(now),
        };
        // A key that would arrive already expired is not created (a
        // replaced one stays deleted).
        if expire_ms != 0 && expire_ms <= now {
            if deleted {
                w.event(notify::GENERIC, "del", k);
            }
            return Ok(Reply::Ok);
        }
        let expire_ms = expire_ms as u64;
        keys::write(w, k, &value, expire_ms, &limits)?;
        w.event(notify::GENERIC, "restore", k);
        if o.idle.is_some() || o.freq.is_some() {
            server.access.set(k.db, k.name, o.idle, o.freq);
        }
        Ok(Reply::Ok)
    })
}

/// MIGRATE's parsed arguments.
struct Migrate {
    host: String,
    port: String,
    db: i64,
    timeout_ms: u64,
    copy: bool,
    replace: bool,
    /// AUTH password or AUTH2 user password.
    auth: Option<Vec<Bytes>>,
    keys: Vec<Bytes>,
    /// Send RESTORE-ASKING (this node is in cluster mode, so the target
    /// may be importing the slot), as Redis does.
    asking: bool,
}

/// Parses MIGRATE's arguments with Redis's errors and their order.
fn parse_migrate(a: &Args) -> Result<Migrate, Reply> {
    let mut m = Migrate {
        host: String::from_utf8_lossy(a.get(1)).into_owned(),
        port: String::from_utf8_lossy(a.get(2)).into_owned(),
        db: 0,
        timeout_ms: 0,
        copy: false,
        replace: false,
        auth: None,
        keys: vec![a.get(3).clone()],
        asking: false,
    };
    let mut i = 6;
    while i < a.len() {
        let more = a.len() - i - 1;
        let opt = a.get(i);
        if is(opt, "copy") {
            m.copy = true;
        } else if is(opt, "replace") {
            m.replace = true;
        } else if is(opt, "auth") && more >= 1 {
            m.auth = Some(vec![a.get(i + 1).clone()]);
            i += 1;
        } else if is(opt, "auth2") && more >= 2 {
            m.auth = Some(vec![a.get(i + 1).clone(), a.get(i + 2).clone()]);
            i += 2;
        } else if is(opt, "keys") {
            if !a.get(3).is_empty() {
                return Err(Reply::err(
                    "When using MIGRATE KEYS option, the key argument must be set to the empty string",
                ));
            }
            m.keys = a.from(i + 1).to_vec();
            break;
        } else {
            return Err(error(SYNTAX));
        }
        i += 1;
    }
    let timeout = args::int(a.get(5))?;
    m.db = args::int(a.get(4))?;
    m.timeout_ms = if timeout <= 0 { 1000 } else { timeout as u64 };
    Ok(m)
}

/// MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE]
/// [AUTH password | AUTH2 username password] [KEYS key [key ...]]
///
/// The keys' shards stay locked while the target answers, so no write can
/// slip in between the copy and the deletion of the source (Redis blocks
/// the whole server for that time).
pub fn migrate(s: &mut Session, a: Args) -> Action {
    let mut m = match parse_migrate(&a) {
        Ok(m) => m,
        Err(r) => return r.into(),
    };
    m.asking = s.server.cluster.is_some();
    match s.server.cluster.clone() {
        Some(cluster) => migrate_in_cluster(s.server.clone(), cluster, s.db, m),
        None => migrate_keys(s.server.clone(), s.db, m),
    }
}

/// MIGRATE of `m.keys` as one DUMP payload each, their shards locked
/// meanwhile.
fn migrate_keys(server: Arc<Server>, db: u8, m: Migrate) -> Action {
    let shards = server.shards.clone();
    let limits = server.encoding_limits();
    let ids: Vec<usize> = m.keys.iter().map(|k| shards.shard_of_key(k)).collect();
    coordinated(ids.clone(), move |locked| async move {
        // What exists, with its payload and remaining time to live: one
        // step per shard (a reshard's batch of keys is all on one).
        let mut stored = vec![None; m.keys.len()];
        for id in distinct(&ids) {
            let mine: Vec<(usize, Bytes)> = (0..m.keys.len())
                .filter(|&i| ids[i] == id)
                .map(|i| (i, m.keys[i].clone()))
                .collect();
            let got = locked
                .run(id, move |w| {
                    let mut out = Vec::with_capacity(mine.len());
                    for (i, k) in mine {
                        let v = match keys::read(w, Key::new(db, &k)) {
                            // The time to live left, by the shard's clock.
                            Ok(v) => v.map(|st| {
                                let ttl = st.expire_ms.saturating_sub(w.now_ms());
                                (st.value, st.expire_ms, ttl)
                            }),
                            Err(Fail::Store(e)) => return Err(e),
                            // Reading a key whole has no type to mismatch.
                            Err(Fail::Reply(_)) => None,
                        };
                        out.push((i, v));
                    }
                    Ok(out)
                })
                .await?;
            for (i, v) in got {
                stored[i] = v;
            }
        }
        let mut found: Vec<(usize, Bytes, Vec<u8>, u64)> = Vec::new();
        for (i, st) in stored.into_iter().enumerate() {
            match st {
                Some((_, expire, 0)) if expire != 0 => {}
                Some((value, _, ttl)) => {
                    found.push((ids[i], m.keys[i].clone(), payload(&value, &limits), ttl))
                }
                None => {}
            }
        }
        if found.is_empty() {
            return Ok(Err(Reply::Simple("NOKEY")));
        }
        let outcome = send_to_target(&server.migrate_conns, &m, &found).await;
        let (accepted, reply) = match outcome {
            Ok(per_key) => {
                let first_err = per_key.iter().find_map(|r| r.as_ref().err().cloned());
                let reply = match first_err {
                    Some(e) => Reply::err(format!("Target instance replied with error: {e}")),
                    None => Reply::Ok,
                };
                (per_key.iter().map(Result::is_ok).collect::<Vec<_>>(), reply)
            }
            Err(r) => (vec![false; found.len()], r),
        };
        if m.copy || !accepted.iter().any(|ok| *ok) {
            return Ok(Err(reply));
        }
        let moved: Vec<(usize, Bytes)> = found
            .into_iter()
            .zip(accepted)
            .filter(|(_, ok)| *ok)
            .map(|((id, key, _, _), _)| (id, key))
            .collect();
        for id in distinct(&ids) {
            let mine: Vec<Bytes> = moved
                .iter()
                .filter(|(i, _)| *i == id)
                .map(|(_, k)| k.clone())
                .collect();
            if mine.is_empty() {
                continue;
            }
            locked
                .run(id, move |w| {
                    for key in mine {
                        let k = Key::new(db, &key);
                        w.delete_reported(k)?;
                    }
                    Ok(())
                })
                .await?;
        }
        Ok(Ok(reply))
    })
}

/// The shard ids of `ids` once each, in first-seen order.
fn distinct(ids: &[usize]) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    for &id in ids {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

/// A collection with more members than this moves in chunks, not as one
/// DUMP payload, when a cluster node migrates it (see [`move_big`]).
const BIG_KEY: u64 = 10_000;

/// Members per command when a big collection moves.
const BIG_CHUNK: usize = 1_000;

/// MIGRATE in cluster mode: big collections first, each in chunks
/// without holding its shard (see [`move_big`]), then the other keys as
/// one payload each, as everywhere.
fn migrate_in_cluster(server: Arc<Server>, cluster: Arc<Cluster>, db: u8, m: Migrate) -> Action {
    Action::Job(Box::pin(async move {
        let mut big = Vec::new();
        let mut small = Vec::new();
        for key in &m.keys {
            let shard = server.shards.shard_of_key(key);
            let snap = match super::snapshot_of(&server.shards, shard).await {
                Ok(s) => s,
                Err(r) => return r,
            };
            let size = match keyspace::peek(&snap, Key::new(db, key)) {
                Ok(Some(meta)) if meta.ktype != KeyType::Stream => match meta.body {
                    MetaBody::Collection { size, .. } => size,
                    MetaBody::String(_) => 0,
                },
                _ => 0,
            };
            if size > BIG_KEY {
                big.push(key.clone());
            } else {
                small.push(key.clone());
            }
        }
        let mut moved = false;
        for key in big {
            match move_big(&server, &cluster, db, &m, key).await {
                Ok(found) => moved |= found,
                Err(r) => return r,
            }
        }
        if small.is_empty() {
            return if moved {
                Reply::Ok
            } else {
                Reply::Simple("NOKEY")
            };
        }
        let rest = Migrate { keys: small, ..m };
        match blocking::run(&server, migrate_keys(server.clone(), db, rest)).await {
            Reply::Simple("NOKEY") if moved => Reply::Ok,
            r => r,
        }
    }))
}

/// Moves one big collection without blocking its shard: the key is fenced
/// (commands on it answer TRYAGAIN, see `cluster::routing`), everything
/// already sent to its shard is let through, then its value is read from a
/// snapshot and written to the target in commands of [`BIG_CHUNK`]
/// members (each ASKING, each a short transaction there; the key is only
/// reached through ASK once it is gone from here), its TTL set, and the
/// key deleted here (O(1)). Whatever fails, the fence comes down and the
/// source keeps the key. `Ok(false)`: the key was gone.
async fn move_big(
    server: &Arc<Server>,
    cluster: &Arc<Cluster>,
    db: u8,
    m: &Migrate,
    key: Bytes,
) -> Result<bool, Reply> {
    let shard = server.shards.shard_of_key(&key);
    cluster.moving.insert(key.clone());
    let result = async {
        // A barrier: ops that reached the shard before the fence commit
        // before the snapshot is taken; later ones see the fence.
        let _ = server
            .shards
            .submit(shard, Box::new(|_| Ok(Reply::Ok)))
            .await;
        let snap = super::snapshot_of(&server.shards, shard).await?;
        let k = key.clone();
        let stored = tokio::task::spawn_blocking(move || keys::read(&snap, Key::new(db, &k)))
            .await
            .map_err(|e| Reply::err(format!("reading {e}")))?;
        let stored = match stored {
            Ok(Some(st)) => st,
            Ok(None) => return Ok(false),
            Err(Fail::Store(e)) => return Err(Reply::err(e)),
            Err(Fail::Reply(r)) => return Err(r),
        };
        let sent = send_in_chunks(m, &key, &stored).await;
        // Freeing a million members is work too: not on this thread.
        tokio::task::spawn_blocking(move || drop(stored));
        sent?;
        if !m.copy {
            let k = key.clone();
            let deleted = server
                .shards
                .submit(
                    shard,
                    Box::new(move |w| {
                        let k = Key::new(db, &k);
                        w.delete_reported(k)?;
                        Ok(Reply::Ok)
                    }),
                )
                .await;
            let failed = match deleted {
                Ok(Reply::Error(e)) => Some(e),
                Err(_) => Some("shard unavailable".into()),
                Ok(_) => None,
            };
            if let Some(e) = failed {
                tracing::warn!(error = %e, "MIGRATE: a moved key could not be deleted here");
                return Err(Reply::err(format!(
                    "the key was copied to the target but not deleted here: {e}"
                )));
            }
        }
        Ok(true)
    }
    .await;
    cluster.moving.remove(&key);
    result
}

/// Writes a collection to the target under its own name, in chunks (see
/// [`move_big`]): refuses with BUSYKEY as MIGRATE does when the target has
/// the key and REPLACE was not given; on any error, removes what it wrote.
async fn send_in_chunks(m: &Migrate, key: &Bytes, st: &keys::Stored) -> Result<(), Reply> {
    let wait = std::time::Duration::from_millis(m.timeout_ms.max(1000));
    let mut t = Target::connect(&format!("{}:{}", m.host, m.port), wait).await?;
    let db = m.db.to_string();
    let mut setup: Vec<Vec<&[u8]>> = Vec::new();
    if let Some(auth) = &m.auth {
        let mut parts: Vec<&[u8]> = vec![b"AUTH"];
        parts.extend(auth.iter().map(|p| &p[..]));
        setup.push(parts);
    }
    setup.push(vec![b"SELECT", db.as_bytes()]);
    for cmd in &setup {
        t.call(cmd).await?;
    }
    let exists = t.asking(&[b"EXISTS", key]).await?;
    if exists != ":0" && !m.replace {
        return Err(Reply::err(
            "Target instance replied with error: BUSYKEY Target key name already exists.",
        ));
    }
    let written = async {
        t.asking(&[b"DEL", key]).await?;
        // Chunk by chunk, straight from the value: no copy of it is built
        // on this (async) thread, and other clients' tasks run between
        // chunks.
        match &st.value {
            Value::Hash(pairs) => {
                for chunk in pairs.chunks(BIG_CHUNK) {
                    let mut parts: Vec<&[u8]> = vec![b"HSET", key];
                    for (f, v) in chunk {
                        parts.extend([&f[..], &v[..]]);
                    }
                    t.asking(&parts).await?;
                }
            }
            Value::ZSet(pairs) => {
                for chunk in pairs.chunks(BIG_CHUNK) {
                    let scores: Vec<String> = chunk
                        .iter()
                        .map(|(_, s)| crate::util::num::format_double(*s))
                        .collect();
                    let mut parts: Vec<&[u8]> = vec![b"ZADD", key];
                    for ((m, _), s) in chunk.iter().zip(&scores) {
                        parts.extend([s.as_bytes(), &m[..]]);
                    }
                    t.asking(&parts).await?;
                }
            }
            Value::Set(items) | Value::List(items) => {
                let cmd: &[u8] = match st.value {
                    Value::Set(_) => b"SADD",
                    _ => b"RPUSH",
                };
                for chunk in items.chunks(BIG_CHUNK) {
                    let mut parts: Vec<&[u8]> = vec![cmd, key];
                    parts.extend(chunk.iter().map(|i| &i[..]));
                    t.asking(&parts).await?;
                }
            }
            // Only collections are moved in chunks.
            Value::String(_) | Value::Stream(_) => {
                return Err(Reply::err("MIGRATE: not a collection"));
            }
        }
        if st.expire_ms != 0 {
            let at = st.expire_ms.to_string();
            t.asking(&[b"PEXPIREAT", key, at.as_bytes()]).await?;
        }
        Ok(())
    }
    .await;
    if written.is_err() {
        let _ = t.asking(&[b"DEL", key]).await;
    }
    written
}

/// A connection to another node that a key or slot is moved to: commands
/// whose replies are one line each (every command [`send_in_chunks`] and
/// CLUSTER MOVESLOT send), possibly pipelined.
pub(crate) struct Target {
    io: tokio::io::BufReader<TcpStream>,
    wait: std::time::Duration,
}

impl Target {
    /// Connects to `addr` (`host:port`), waiting at most `wait` for this
    /// and for each later write or reply.
    pub(crate) async fn connect(addr: &str, wait: std::time::Duration) -> Result<Target, Reply> {
        let target = tokio::net::lookup_host(addr)
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                Reply::Error("IOERR error or timeout connecting to the client".into())
            })?;
        let stream = tokio::time::timeout(wait, TcpStream::connect(target))
            .await
            .map_err(|_| migrate_io_err("writing"))?
            .map_err(|_| migrate_io_err("writing"))?;
        let _ = stream.set_nodelay(true);
        Ok(Target {
            io: tokio::io::BufReader::new(stream),
            wait,
        })
    }

    /// Sends a command and reads its reply; an error reply is the caller's
    /// error.
    pub(crate) async fn call(&mut self, parts: &[&[u8]]) -> Result<String, Reply> {
        self.send(parts).await?;
        self.read().await
    }

    /// Sends a command without reading its reply (see [`Target::read`]).
    pub(crate) async fn send(&mut self, parts: &[&[u8]]) -> Result<(), Reply> {
        use tokio::io::AsyncWriteExt;
        let mut out = Vec::new();
        crate::protocol::encode_command(&mut out, parts);
        tokio::time::timeout(self.wait, self.io.get_mut().write_all(&out))
            .await
            .map_err(|_| migrate_io_err("writing"))?
            .map_err(|_| migrate_io_err("writing"))
    }

    /// Reads the one-line reply of the oldest command sent and not yet
    /// answered.
    pub(crate) async fn read(&mut self) -> Result<String, Reply> {
        use tokio::io::AsyncBufReadExt;
        let mut line = String::new();
        match tokio::time::timeout(self.wait, self.io.read_line(&mut line)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Err(migrate_io_err("reading")),
        }
        let line = line.trim_end().to_string();
        match line.strip_prefix('-') {
            Some(e) => Err(Reply::err(format!(
                "Target instance replied with error: {e}"
            ))),
            None => Ok(line),
        }
    }

    /// ASKING, then the command (the target may be importing the slot).
    async fn asking(&mut self, parts: &[&[u8]]) -> Result<String, Reply> {
        self.call(&[b"ASKING"]).await?;
        self.call(parts).await
    }
}

/// How long MIGRATE keeps an idle connection to a target for the next
/// call (as Redis does), saving a connect and the target's client setup per
/// batch of keys: `redis-cli --cluster reshard` sends thousands.
const MIGRATE_IDLE: std::time::Duration = std::time::Duration::from_secs(10);

/// MIGRATE's idle connections to targets by `host:port`, with the database
/// last selected on each and when it was last used.
#[derive(Default)]
pub struct MigrateConns(parking_lot::Mutex<HashMap<String, (TcpStream, i64, Instant)>>);

impl MigrateConns {
    /// How many idle connections are kept (INFO's migrate_cached_sockets).
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Sends AUTH, SELECT (unless a reused connection has the database
/// selected) and one RESTORE per key to the target and reads its answers:
/// per key, accepted or the target's error text; or the IOERR reply when
/// the connection fails. A reused connection that fails is replaced by a
/// new one, once, as Redis retries.
async fn send_to_target(
    conns: &MigrateConns,
    m: &Migrate,
    found: &[(usize, Bytes, Vec<u8>, u64)],
) -> Result<Vec<Result<(), String>>, Reply> {
    let wait = std::time::Duration::from_millis(m.timeout_ms);
    let addr = format!("{}:{}", m.host, m.port);
    let cached = {
        let mut map = conns.0.lock();
        map.retain(|_, (_, _, used)| used.elapsed() < MIGRATE_IDLE);
        map.remove(&addr)
    };
    if let Some((mut stream, db, _)) = cached {
        if let Ok(r) = exchange(&mut stream, m, found, db != m.db, wait).await {
            conns.0.lock().insert(addr, (stream, m.db, Instant::now()));
            return Ok(r);
        }
    }
    let resolved = tokio::net::lookup_host(&addr)
        .await
        .ok()
        .and_then(|mut a| a.next());
    let Some(target) = resolved else {
        return Err(Reply::Error(
            "IOERR error or timeout connecting to the client".into(),
        ));
    };
    let mut stream = match tokio::time::timeout(wait, TcpStream::connect(target)).await {
        Ok(Ok(s)) => s,
        // Redis connects without waiting and finds out on its first write.
        _ => return Err(migrate_io_err("writing")),
    };
    let _ = stream.set_nodelay(true);
    let r = exchange(&mut stream, m, found, true, wait).await?;
    conns.0.lock().insert(addr, (stream, m.db, Instant::now()));
    Ok(r)
}

fn migrate_io_err(what: &str) -> Reply {
    Reply::Error(format!("IOERR error or timeout {what} to target instance"))
}

/// One MIGRATE exchange on a connection (see [`send_to_target`]).
async fn exchange(
    stream: &mut TcpStream,
    m: &Migrate,
    found: &[(usize, Bytes, Vec<u8>, u64)],
    select: bool,
    wait: std::time::Duration,
) -> Result<Vec<Result<(), String>>, Reply> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut out = Vec::new();
    if let Some(auth) = &m.auth {
        let mut parts: Vec<&[u8]> = vec![b"AUTH"];
        parts.extend(auth.iter().map(|p| &p[..]));
        crate::protocol::encode_command(&mut out, &parts);
    }
    let db = m.db.to_string();
    if select {
        crate::protocol::encode_command(&mut out, &[b"SELECT", db.as_bytes()]);
    }
    for (_, key, payload, ttl) in found {
        let ttl = ttl.to_string();
        let restore: &[u8] = if m.asking {
            b"RESTORE-ASKING"
        } else {
            b"RESTORE"
        };
        let mut parts: Vec<&[u8]> = vec![restore, key, ttl.as_bytes(), payload];
        if m.replace {
            parts.push(b"REPLACE");
        }
        crate::protocol::encode_command(&mut out, &parts);
    }
    match tokio::time::timeout(wait, stream.write_all(&out)).await {
        Ok(Ok(())) => {}
        _ => return Err(migrate_io_err("writing")),
    }
    let mut rd = BufReader::new(stream);
    let mut line = String::new();
    let mut read_line = async |line: &mut String| -> Result<(), Reply> {
        line.clear();
        match tokio::time::timeout(wait, rd.read_line(line)).await {
            Ok(Ok(n)) if n > 0 => Ok(()),
            _ => Err(migrate_io_err("reading")),
        }
    };
    // A refused AUTH or SELECT fails every key with its error.
    let mut setup_err = None;
    for _ in 0..(m.auth.is_some() as usize + select as usize) {
        read_line(&mut line).await?;
        if line.starts_with('-') && setup_err.is_none() {
            setup_err = Some(line.trim_end()[1..].to_string());
        }
    }
    let mut per_key = Vec::with_capacity(found.len());
    for _ in found {
        read_line(&mut line).await?;
        per_key.push(match (&setup_err, line.strip_prefix('-')) {
            (Some(e), _) => Err(e.clone()),
            (None, Some(e)) => Err(e.trim_end().to_string()),
            (None, None) => Ok(()),
        });
    }
    Ok(per_key)
}

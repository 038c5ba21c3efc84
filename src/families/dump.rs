//! DUMP, RESTORE and MIGRATE: a key's value in Redis's serialization (RDB
//! object encoding, RDB version, CRC-64), so values move between cairn and
//! Redis in either direction.

use bytes::Bytes;

use super::{coordinated, Fail};
use crate::command::args::{self, error, is, Args, SYNTAX};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::rdb::keys;
use crate::rdb::object::{self, Limits, Value};
use crate::storage::keyspace::{self, Key};
use crate::storage::KvRead;
use crate::util::rdb::{seal, unseal, Reader};

/// A DUMP payload of `value`.
pub fn payload(value: &Value, limits: &Limits) -> Vec<u8> {
    let mut body = Vec::new();
    object::encode(&mut body, value, limits);
    seal(body)
}

/// The value in a DUMP payload, or Redis's error for a payload that fails
/// its checksum or does not decode.
pub fn parse_payload(payload: &[u8]) -> Result<Value, Reply> {
    let body =
        unseal(payload).ok_or_else(|| Reply::err("DUMP payload version or checksum are wrong"))?;
    let bad = || Reply::err("Bad data format");
    let mut r = Reader::new(body);
    let ty = r.byte().ok_or_else(bad)?;
    // Bytes after the value are ignored, as Redis ignores them.
    object::decode(ty, &mut r).map_err(|_| bad())
}

/// DUMP key
pub fn dump(s: &mut Session, a: Args) -> Action {
    let limits = s.server.encoding_limits();
    s.read(a.get(1), move |r, k| {
        Ok(match keys::read(r, k)? {
            None => Reply::Nil,
            Some(stored) => Reply::bulk(payload(&stored.value, &limits)),
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
    let value = parse_payload(a.get(3));
    let server = s.server.clone();
    let nodes = server.encoding_limits().stream;
    s.write(a.get(1), move |w, k| {
        if !o.replace && keyspace::lookup_for_write(w, k)?.is_some() {
            return Ok(Reply::Error(
                "BUSYKEY Target key name already exists.".into(),
            ));
        }
        let ttl = ttl?;
        let value = value?;
        if o.replace {
            keyspace::delete_if_live(w, k)?;
        }
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
            return Ok(Reply::Ok);
        }
        let expire_ms = expire_ms as u64;
        keys::write(w, k, &value, expire_ms, &nodes)?;
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
    let shards = s.server.shards.clone();
    let limits = s.server.encoding_limits();
    let db = s.db;
    let ids: Vec<usize> = m.keys.iter().map(|k| shards.shard_of_key(k)).collect();
    coordinated(ids.clone(), move |locked| async move {
        // What exists, with its payload and remaining time to live.
        let mut found: Vec<(usize, Bytes, Vec<u8>, u64)> = Vec::new();
        for (key, &id) in m.keys.iter().zip(&ids) {
            let k = key.clone();
            let stored = locked
                .run(id, move |w| match keys::read(w, Key::new(db, &k)) {
                    // The time to live left, by the shard's clock.
                    Ok(v) => Ok(v.map(|st| {
                        let ttl = st.expire_ms.saturating_sub(w.now_ms());
                        (st.value, st.expire_ms, ttl)
                    })),
                    Err(Fail::Store(e)) => Err(e),
                    // Reading a key whole has no type to mismatch.
                    Err(Fail::Reply(_)) => Ok(None),
                })
                .await?;
            match stored {
                Some((_, expire, 0)) if expire != 0 => {}
                Some((value, _, ttl)) => {
                    found.push((id, key.clone(), payload(&value, &limits), ttl))
                }
                None => {}
            }
        }
        if found.is_empty() {
            return Ok(Err(Reply::Simple("NOKEY")));
        }
        let outcome = send_to_target(&m, &found).await;
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
        for ((id, key, _, _), ok) in found.into_iter().zip(accepted) {
            if ok {
                locked
                    .run(id, move |w| {
                        keyspace::delete_if_live(w, Key::new(db, &key)).map(|_| ())
                    })
                    .await?;
            }
        }
        Ok(Ok(reply))
    })
}

/// One RESP command.
pub(crate) fn resp_command(out: &mut Vec<u8>, parts: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", parts.len()).as_bytes());
    for p in parts {
        out.extend_from_slice(format!("${}\r\n", p.len()).as_bytes());
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
}

/// Sends AUTH, SELECT and one RESTORE per key to the target and reads
/// its answers: per key, accepted or the target's error text; or the
/// IOERR reply when the connection fails.
async fn send_to_target(
    m: &Migrate,
    found: &[(usize, Bytes, Vec<u8>, u64)],
) -> Result<Vec<Result<(), String>>, Reply> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let wait = std::time::Duration::from_millis(m.timeout_ms);
    let io_err =
        |what: &str| Reply::Error(format!("IOERR error or timeout {what} to target instance"));
    let addr = format!("{}:{}", m.host, m.port);
    let resolved = tokio::net::lookup_host(&addr)
        .await
        .ok()
        .and_then(|mut a| a.next());
    let Some(addr) = resolved else {
        return Err(Reply::Error(
            "IOERR error or timeout connecting to the client".into(),
        ));
    };
    let stream = match tokio::time::timeout(wait, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        // Redis connects without waiting and finds out on its first write.
        _ => return Err(io_err("writing")),
    };
    let mut out = Vec::new();
    if let Some(auth) = &m.auth {
        let mut parts: Vec<&[u8]> = vec![b"AUTH"];
        parts.extend(auth.iter().map(|p| &p[..]));
        resp_command(&mut out, &parts);
    }
    let db = m.db.to_string();
    resp_command(&mut out, &[b"SELECT", db.as_bytes()]);
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
        resp_command(&mut out, &parts);
    }
    let (rd, mut wr) = stream.into_split();
    match tokio::time::timeout(wait, wr.write_all(&out)).await {
        Ok(Ok(())) => {}
        _ => return Err(io_err("writing")),
    }
    let mut rd = BufReader::new(rd);
    let mut line = String::new();
    let mut read_line = async |line: &mut String| -> Result<(), Reply> {
        line.clear();
        match tokio::time::timeout(wait, rd.read_line(line)).await {
            Ok(Ok(n)) if n > 0 => Ok(()),
            _ => Err(io_err("reading")),
        }
    };
    // A refused AUTH or SELECT fails every key with its error.
    let mut setup_err = None;
    for _ in 0..(m.auth.is_some() as usize + 1) {
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

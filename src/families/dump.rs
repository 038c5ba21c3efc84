//! DUMP and RESTORE: a key's value in Redis's serialization (RDB object
//! encoding, RDB version, CRC-64), so values move between cairn and Redis
//! in either direction.

use crate::command::args::{self, error, is, Args, SYNTAX};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::rdb::keys;
use crate::rdb::object::{self, Limits, Value};
use crate::storage::keyspace;
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
}

/// Parses RESTORE's options after the payload, with Redis's errors.
/// IDLETIME and FREQ are validated; neither changes the value (cairn keeps
/// no LRU clock or LFU counter per key yet).
fn parse_opts(a: &Args) -> Result<RestoreOpts, Reply> {
    let mut o = RestoreOpts {
        replace: false,
        absttl: false,
    };
    let (mut idle, mut freq) = (false, false);
    let mut i = 4;
    while i < a.len() {
        let more = i + 1 < a.len();
        let opt = a.get(i);
        if is(opt, "replace") {
            o.replace = true;
        } else if is(opt, "absttl") {
            o.absttl = true;
        } else if is(opt, "idletime") && more && !freq {
            let v = args::int(a.get(i + 1))?;
            if v < 0 {
                return Err(Reply::err("Invalid IDLETIME value, must be >= 0"));
            }
            idle = true;
            i += 1;
        } else if is(opt, "freq") && more && !idle {
            let v = args::int(a.get(i + 1))?;
            if !(0..=255).contains(&v) {
                return Err(Reply::err("Invalid FREQ value, must be >= 0 and <= 255"));
            }
            freq = true;
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
        keys::write(w, k, &value, expire_ms)?;
        Ok(Reply::Ok)
    })
}

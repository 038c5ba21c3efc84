//! Strings: GET/SET and friends, counters, ranges, MGET/MSET, LCS.

use bytes::Bytes;

use super::{read_string, string_bytes, string_for_write, wrongtype, Fail};
use crate::command::args::{self, error, is, Args, NOT_INTEGER, SYNTAX};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::pubsub::notify;
use crate::shard::now_ms;
use crate::storage::keyspace::{self, Key};
use crate::storage::{KeyType, KvRead, Meta, WriteCtx};
use crate::util::{lcs as lcs_algo, num};

/// Largest string Redis lets SETRANGE/APPEND build (proto-max-bulk-len).
pub const MAX_STRING: u64 = 512 * 1024 * 1024;

const TOO_BIG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

/// The expiry a SET/GETEX option asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExpireOpt {
    /// No expiry option: SET clears the TTL, GETEX leaves it.
    None,
    /// An absolute expiry in ms.
    At(u64),
    /// KEEPTTL.
    Keep,
    /// PERSIST (GETEX).
    Persist,
}

/// Parsed SET / GETEX options.
struct SetOpts {
    nx: bool,
    xx: bool,
    get: bool,
    expire: ExpireOpt,
}

/// Which command's option set to accept.
#[derive(PartialEq, Eq)]
enum OptsFor {
    Set,
    GetEx,
}

/// Parses the options of SET (from argv[3]) or GETEX (from argv[2]) with
/// Redis's rules: syntax is checked first, then the expire value.
fn parse_opts(args: &Args, from: usize, cmd: OptsFor, name: &str) -> Result<SetOpts, Reply> {
    let mut o = SetOpts {
        nx: false,
        xx: false,
        get: false,
        expire: ExpireOpt::None,
    };
    let mut unit: Option<(&[u8], bool /*ms*/, bool /*absolute*/)> = None;
    let mut keep = false;
    let mut persist = false;
    let a = args.all();
    let mut i = from;
    while i < a.len() {
        let arg = &a[i][..];
        let next = a.get(i + 1);
        // An option may repeat (the last value wins) but may not be mixed
        // with a conflicting one, as in Redis.
        let same_unit = |n: &str| unit.is_none_or(|(_, ms, abs)| option_name(ms, abs) == n);
        if cmd == OptsFor::Set && is(arg, "nx") && !o.xx {
            o.nx = true;
        } else if cmd == OptsFor::Set && is(arg, "xx") && !o.nx {
            o.xx = true;
        } else if cmd == OptsFor::Set && is(arg, "get") {
            o.get = true;
        } else if cmd == OptsFor::Set && is(arg, "keepttl") && unit.is_none() && !persist {
            keep = true;
        } else if cmd == OptsFor::GetEx && is(arg, "persist") && unit.is_none() && !keep {
            persist = true;
        } else if ["ex", "px", "exat", "pxat"]
            .iter()
            .any(|n| is(arg, n) && same_unit(n))
            && !keep
            && !persist
            && next.is_some()
        {
            let ms = is(arg, "px") || is(arg, "pxat");
            let absolute = is(arg, "exat") || is(arg, "pxat");
            unit = Some((&next.unwrap()[..], ms, absolute));
            i += 1;
        } else {
            return Err(error(SYNTAX));
        }
        i += 1;
    }
    if keep {
        o.expire = ExpireOpt::Keep;
    } else if persist {
        o.expire = ExpireOpt::Persist;
    } else if let Some((value, ms, absolute)) = unit {
        o.expire = ExpireOpt::At(expire_at(value, ms, absolute, name)?);
    }
    Ok(o)
}

/// The option name for a unit (ms?, absolute?).
fn option_name(ms: bool, absolute: bool) -> &'static str {
    match (ms, absolute) {
        (false, false) => "ex",
        (true, false) => "px",
        (false, true) => "exat",
        (true, true) => "pxat",
    }
}

/// Converts an EX/PX/EXAT/PXAT value to an absolute ms time, with Redis's
/// checks and error texts.
fn expire_at(value: &[u8], ms: bool, absolute: bool, name: &str) -> Result<u64, Reply> {
    let v = args::int(value)?;
    let invalid = || Reply::err(format!("invalid expire time in '{name}' command"));
    if v <= 0 || (!ms && v > i64::MAX / 1000) {
        return Err(invalid());
    }
    let mut when = if ms { v } else { v * 1000 };
    if !absolute {
        when = when.checked_add(now_ms() as i64).ok_or_else(invalid)?;
    }
    if when <= 0 {
        return Err(invalid());
    }
    Ok(when as u64)
}

/// GET key
pub fn get(s: &mut Session, mut a: Args) -> Action {
    s.read_owned(a.take(1), |r, k| Ok(Reply::opt_bulk(read_string(r, k)?)))
}

/// SET key value [NX|XX] [GET] [EX|PX|EXAT|PXAT|KEEPTTL]
pub fn set(s: &mut Session, mut a: Args) -> Action {
    let opts = match parse_opts(&a, 3, OptsFor::Set, "set") {
        Ok(o) => o,
        Err(r) => return r.into(),
    };
    let (key, value) = (a.take(1), a.take(2));
    if !opts.get && !opts.nx && !opts.xx && opts.expire != ExpireOpt::Keep {
        // The common SET: nothing about the old value matters.
        let expire = match opts.expire {
            ExpireOpt::At(t) => t,
            _ => 0,
        };
        return s.write_owned(key, move |w, k| {
            put_string(w, k, &value, expire)?;
            Ok(Reply::Ok)
        });
    }
    s.write_owned(key, move |w, k| {
        let old = keyspace::lookup_for_write(w, k)?;
        if opts.get {
            // SET ... GET reads the old value: Redis counts the lookup.
            w.looked_up(k, old.is_some());
        }
        let old_value = match (&old, opts.get) {
            (Some(m), true) if m.ktype != KeyType::String => return Err(wrongtype()),
            (Some(m), true) => Reply::bulk_copy(string_bytes(m)),
            (None, true) => Reply::Nil,
            _ => Reply::Ok,
        };
        if (opts.nx && old.is_some()) || (opts.xx && old.is_none()) {
            return Ok(if opts.get { old_value } else { Reply::Nil });
        }
        let expire = match opts.expire {
            ExpireOpt::At(t) => t,
            ExpireOpt::Keep => old.as_ref().map_or(0, |m| m.expire_ms),
            _ => 0,
        };
        keyspace::store(w, k, old.as_ref(), &Meta::string(value.to_vec(), expire))?;
        w.event(notify::STRING, "set", k);
        if let ExpireOpt::At(_) = opts.expire {
            w.event(notify::GENERIC, "expire", k);
        }
        Ok(old_value)
    })
}

/// A string about to be written by a command that also returns it
/// (GETSET, GETDEL, GETEX): Redis looks these up as reads, so the lookup
/// counts in INFO's keyspace hits and misses.
fn read_for_write(w: &mut WriteCtx, k: Key) -> Result<Option<Meta>, Fail> {
    let old = string_for_write(w, k)?;
    w.looked_up(k, old.is_some());
    Ok(old)
}

/// Writes a plain string value, replacing whatever the key held.
fn put_string(w: &mut WriteCtx, k: Key, value: &[u8], expire: u64) -> Result<(), Fail> {
    put_string_at(w, k, &k.meta_key(), value, expire)
}

/// [`put_string`] with the key's `meta` row key already built.
fn put_string_at(
    w: &mut WriteCtx,
    k: Key,
    meta_key: &[u8],
    value: &[u8],
    expire: u64,
) -> Result<(), Fail> {
    keyspace::replace_at(w, k, meta_key, &Meta::string(value.to_vec(), expire))?;
    w.event(notify::STRING, "set", k);
    if expire != 0 {
        w.event(notify::GENERIC, "expire", k);
    }
    Ok(())
}

/// SETNX key value
pub fn setnx(s: &mut Session, a: Args) -> Action {
    let value = a.get(2).clone();
    s.write(a.get(1), move |w, k| {
        if keyspace::lookup_for_write(w, k)?.is_some() {
            return Ok(Reply::Int(0));
        }
        keyspace::store(w, k, None, &Meta::string(value.to_vec(), 0))?;
        w.event(notify::STRING, "set", k);
        Ok(Reply::Int(1))
    })
}

fn set_with_expire(s: &mut Session, a: Args, ms: bool, name: &str) -> Action {
    let when = match expire_at(a.get(2), ms, false, name) {
        Ok(t) => t,
        Err(r) => return r.into(),
    };
    let value = a.get(3).clone();
    s.write(a.get(1), move |w, k| {
        put_string(w, k, &value, when)?;
        Ok(Reply::Ok)
    })
}

/// SETEX key seconds value
pub fn setex(s: &mut Session, a: Args) -> Action {
    set_with_expire(s, a, false, "setex")
}

/// PSETEX key milliseconds value
pub fn psetex(s: &mut Session, a: Args) -> Action {
    set_with_expire(s, a, true, "psetex")
}

/// GETSET key value
pub fn getset(s: &mut Session, a: Args) -> Action {
    let value = a.get(2).clone();
    s.write(a.get(1), move |w, k| {
        let old = read_for_write(w, k)?;
        let reply = old
            .as_ref()
            .map_or(Reply::Nil, |m| Reply::bulk_copy(string_bytes(m)));
        keyspace::store(w, k, old.as_ref(), &Meta::string(value.to_vec(), 0))?;
        w.event(notify::STRING, "set", k);
        Ok(reply)
    })
}

/// GETDEL key
pub fn getdel(s: &mut Session, a: Args) -> Action {
    s.write(a.get(1), |w, k| {
        let Some(old) = read_for_write(w, k)? else {
            return Ok(Reply::Nil);
        };
        keyspace::delete(w, k, &old)?;
        w.event(notify::GENERIC, "del", k);
        Ok(Reply::bulk_copy(string_bytes(&old)))
    })
}

/// GETEX key [EX|PX|EXAT|PXAT|PERSIST]
pub fn getex(s: &mut Session, a: Args) -> Action {
    // Redis reports a bad expire value only after the key lookup and type
    // check; a syntax error comes first.
    let opts = match parse_opts(&a, 2, OptsFor::GetEx, "getex") {
        Ok(o) => Ok(o),
        Err(r) if r == error(SYNTAX) => return r.into(),
        Err(r) => Err(r),
    };
    s.write(a.get(1), move |w, k| {
        let Some(old) = read_for_write(w, k)? else {
            return Ok(Reply::Nil);
        };
        let opts = opts?;
        let reply = Reply::bulk_copy(string_bytes(&old));
        let expire = match opts.expire {
            ExpireOpt::At(t) => t,
            ExpireOpt::Persist => 0,
            _ => return Ok(reply),
        };
        if expire != 0 && expire <= w.now_ms() {
            keyspace::delete(w, k, &old)?;
            w.event(notify::GENERIC, "del", k);
        } else {
            if expire != old.expire_ms {
                let mut new = old.clone();
                new.expire_ms = expire;
                keyspace::store(w, k, Some(&old), &new)?;
            }
            // PERSIST reports only a TTL it removed; EX and the like
            // report even an unchanged one.
            if expire != 0 {
                w.event(notify::GENERIC, "expire", k);
            } else if old.expire_ms != 0 {
                w.event(notify::GENERIC, "persist", k);
            }
        }
        Ok(reply)
    })
}

/// APPEND key value
pub fn append(s: &mut Session, a: Args) -> Action {
    let value = a.get(2).clone();
    s.write(a.get(1), move |w, k| {
        let old = string_for_write(w, k)?;
        let mut v = old
            .as_ref()
            .map_or_else(Vec::new, |m| string_bytes(m).to_vec());
        if v.len() as u64 + value.len() as u64 > MAX_STRING {
            return Err(error(TOO_BIG).into());
        }
        v.extend_from_slice(&value);
        let len = v.len() as i64;
        // Redis stores an APPEND to a missing key as a new value, and makes
        // an existing one raw to change it in place.
        let new = match &old {
            Some(m) => Meta::raw_string(v, m.expire_ms),
            None => Meta::string(v, 0),
        };
        keyspace::store(w, k, old.as_ref(), &new)?;
        w.event(notify::STRING, "append", k);
        Ok(Reply::Int(len))
    })
}

/// STRLEN key
pub fn strlen(s: &mut Session, a: Args) -> Action {
    s.read(a.get(1), |r, k| {
        Ok(Reply::Int(read_string(r, k)?.map_or(0, |v| v.len() as i64)))
    })
}

/// GETRANGE key start end (also SUBSTR)
pub fn getrange(s: &mut Session, a: Args) -> Action {
    let (start, end) = match (a.int(2), a.int(3)) {
        (Ok(s), Ok(e)) => (s, e),
        (Err(r), _) | (_, Err(r)) => return r.into(),
    };
    s.read(a.get(1), move |r, k| {
        let v = read_string(r, k)?.unwrap_or_default();
        Ok(match clamp_range(start, end, v.len() as i64) {
            Some((s, e)) => Reply::bulk_copy(&v[s..=e]),
            None => Reply::bulk(Bytes::new()),
        })
    })
}

/// Redis's GETRANGE index arithmetic: negative indexes count from the end,
/// both ends clamp, an empty result is `None`.
fn clamp_range(mut start: i64, mut end: i64, len: i64) -> Option<(usize, usize)> {
    if start < 0 && end < 0 && start > end {
        return None;
    }
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        return None;
    }
    Some((start as usize, end as usize))
}

/// SETRANGE key offset value
pub fn setrange(s: &mut Session, a: Args) -> Action {
    let offset = match a.int(2) {
        Ok(o) if o < 0 => return Reply::err("offset is out of range").into(),
        Ok(o) => o as u64,
        Err(r) => return r.into(),
    };
    let value = a.get(3).clone();
    s.write(a.get(1), move |w, k| {
        let old = string_for_write(w, k)?;
        let cur_len = old.as_ref().map_or(0, |m| string_bytes(m).len());
        if value.is_empty() {
            return Ok(Reply::Int(cur_len as i64));
        }
        if offset + value.len() as u64 > MAX_STRING {
            return Err(error(TOO_BIG).into());
        }
        let mut v = old
            .as_ref()
            .map_or_else(Vec::new, |m| string_bytes(m).to_vec());
        let end = offset as usize + value.len();
        if v.len() < end {
            v.resize(end, 0);
        }
        v[offset as usize..end].copy_from_slice(&value);
        let len = v.len() as i64;
        let expire = old.as_ref().map_or(0, |m| m.expire_ms);
        // Changed in place, the value is raw in Redis (a new one too).
        keyspace::store(w, k, old.as_ref(), &Meta::raw_string(v, expire))?;
        w.event(notify::STRING, "setrange", k);
        Ok(Reply::Int(len))
    })
}

/// Adds `by` to the integer in a key, keeping its TTL.
fn incr_by(s: &mut Session, key: Bytes, by: i64) -> Action {
    s.write_owned(key, move |w, k| {
        // The common case, a live integer string that stays in range, is
        // changed in place in one tree walk; everything else (a new or
        // expired key, another type, an error) takes the general path.
        // A key that is absent (no row at all) is read once too: the
        // general path would look it up again only to find nothing.
        let now = w.expiry_clock();
        let fast = w.modify_meta(&k.meta_key(), |raw| {
            let Some(raw) = raw else {
                return (None, Err(true));
            };
            let Ok(m) = Meta::decode(raw) else {
                return (None, Err(false));
            };
            if m.ktype != KeyType::String || m.is_expired(now) {
                return (None, Err(false));
            }
            let Some(new) = num::parse_i64(string_bytes(&m)).and_then(|c| c.checked_add(by)) else {
                return (None, Err(false));
            };
            let row = Meta::string(new.to_string().into_bytes(), m.expire_ms).encode();
            (Some(row), Ok(new))
        })?;
        let absent = match fast {
            Ok(new) => {
                w.event(notify::STRING, "incrby", k);
                return Ok(Reply::Int(new));
            }
            Err(absent) => absent,
        };
        let old = if absent {
            None
        } else {
            string_for_write(w, k)?
        };
        let cur = match &old {
            Some(m) => num::parse_i64(string_bytes(m)).ok_or_else(|| error(NOT_INTEGER))?,
            None => 0,
        };
        let new = cur
            .checked_add(by)
            .ok_or_else(|| Reply::err("increment or decrement would overflow"))?;
        let expire = old.as_ref().map_or(0, |m| m.expire_ms);
        keyspace::store(
            w,
            k,
            old.as_ref(),
            &Meta::string(new.to_string().into_bytes(), expire),
        )?;
        w.event(notify::STRING, "incrby", k);
        Ok(Reply::Int(new))
    })
}

/// INCR key
pub fn incr(s: &mut Session, mut a: Args) -> Action {
    incr_by(s, a.take(1), 1)
}

/// DECR key
pub fn decr(s: &mut Session, mut a: Args) -> Action {
    incr_by(s, a.take(1), -1)
}

/// INCRBY key increment
pub fn incrby(s: &mut Session, mut a: Args) -> Action {
    match a.int(2) {
        Ok(by) => incr_by(s, a.take(1), by),
        Err(r) => r.into(),
    }
}

/// DECRBY key decrement
pub fn decrby(s: &mut Session, mut a: Args) -> Action {
    match a.int(2) {
        Ok(i64::MIN) => Reply::err("decrement would overflow").into(),
        Ok(by) => incr_by(s, a.take(1), -by),
        Err(r) => r.into(),
    }
}

/// INCRBYFLOAT key increment
///
/// Computed in 80-bit extended precision, as Redis's `long double`, so the
/// stored text matches Redis digit for digit.
pub fn incrbyfloat(s: &mut Session, a: Args) -> Action {
    let by = a.get(2).clone();
    s.write(a.get(1), move |w, k| {
        let old = string_for_write(w, k)?;
        let text = num::incrbyfloat(old.as_ref().map(string_bytes), &by).map_err(|e| match e {
            num::IncrFloatError::NanOrInfinity => {
                Reply::err("increment would produce NaN or Infinity")
            }
            _ => error(args::NOT_FLOAT),
        })?;
        let expire = old.as_ref().map_or(0, |m| m.expire_ms);
        // Redis stores the formatted number as text, never as an integer.
        keyspace::store(
            w,
            k,
            old.as_ref(),
            &Meta::text_string(text.clone().into_bytes(), expire),
        )?;
        w.event(notify::STRING, "incrbyfloat", k);
        Ok(Reply::bulk(text))
    })
}

/// MGET key [key ...]
pub fn mget(s: &mut Session, a: Args) -> Action {
    s.read_many(a.from(1).to_vec(), |readers, keys| {
        let mut out = Vec::with_capacity(keys.len());
        for (r, k) in readers.iter().zip(keys) {
            out.push(match read_string(*r, *k) {
                Ok(v) => Reply::opt_bulk(v),
                Err(Fail::Reply(_)) => Reply::Nil,
                Err(e) => return Err(e),
            });
        }
        Ok(Reply::Array(out))
    })
}

/// Splits MSET-style arguments into keys and values, or the arity error.
fn pairs(a: &Args) -> Result<(Vec<Bytes>, Vec<Bytes>), Reply> {
    if let Some(r) = unpaired(a) {
        return Err(r);
    }
    Ok(a.from(1)
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .unzip())
}

/// The arity error of MSET-style arguments whose count is odd.
fn unpaired(a: &Args) -> Option<Reply> {
    (!a.from(1).len().is_multiple_of(2)).then(|| {
        Reply::err(format!(
            "wrong number of arguments for '{}' command",
            a.name_lower()
        ))
    })
}

/// MSET key value [key value ...]
pub fn mset(s: &mut Session, a: Args) -> Action {
    if let Some(r) = unpaired(&a) {
        return r.into();
    }
    // The arguments are moved, not cloned (see `write_each_shard`). A key
    // given twice is written twice, in order, so the later value wins, as
    // in Redis, and each write has its event.
    let mut keys = Vec::with_capacity(a.len() / 2);
    let mut values = Vec::with_capacity(a.len() / 2);
    let mut rest = a.into_vec().into_iter().skip(1);
    while let (Some(k), Some(v)) = (rest.next(), rest.next()) {
        keys.push(k);
        values.push(v);
    }
    s.write_each_shard(
        keys,
        values,
        |w, k, value| {
            // The meta rows were warmed by `write_each_shard`.
            put_string_at(w, k, &k.meta_key(), value, 0)?;
            w.count_changes(1);
            Ok(0)
        },
        |_| Reply::Ok,
    )
}

/// MSETNX's value of each key, hashed with foldhash: the standard SipHash
/// of each key, once to build the map and once to look it up, was a fifth
/// of an MSET of ten keys' instructions (when MSET used one too).
type ValueMap = std::collections::HashMap<Bytes, Bytes, foldhash::fast::RandomState>;

/// MSETNX key value [key value ...]
pub fn msetnx(s: &mut Session, a: Args) -> Action {
    let (keys, values) = match pairs(&a) {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    let db = s.db;
    let shards = s.server.shards.clone();
    let ids: Vec<usize> = keys.iter().map(|k| shards.shard_of_key(k)).collect();
    let lookup: ValueMap = keys.iter().cloned().zip(values).collect();
    if ids.windows(2).all(|w| w[0] == w[1]) {
        return s.write(&keys[0].clone(), move |w, _| {
            for k in &keys {
                if keyspace::lookup_for_write(w, Key::new(db, k))?.is_some() {
                    return Ok(Reply::Int(0));
                }
            }
            for k in &keys {
                put_string(w, Key::new(db, k), &lookup[k], 0)?;
            }
            w.count_changes(keys.len() as u64);
            Ok(Reply::Int(1))
        });
    }
    super::coordinated(ids.clone(), move |locked| async move {
        let mut uniq = ids.clone();
        uniq.sort_unstable();
        uniq.dedup();
        // A shard's keys, each with its place among the arguments.
        let keys_of = |id: usize| -> Vec<(u64, Bytes)> {
            (0u64..)
                .zip(keys.iter().zip(&ids))
                .filter(|(_, (_, &i))| i == id)
                .map(|(at, (k, _))| (at, k.clone()))
                .collect()
        };
        for &id in &uniq {
            let mine = keys_of(id);
            let any = locked
                .run(id, move |w| {
                    for (_, k) in &mine {
                        if keyspace::lookup_for_write(w, Key::new(db, k))?.is_some() {
                            return Ok(true);
                        }
                    }
                    Ok(false)
                })
                .await?;
            if any {
                return Ok(Err(Reply::Int(0)));
            }
        }
        let lookup = std::sync::Arc::new(lookup);
        // Each key's `set` event takes its place among the arguments, as
        // Redis sends them, whichever shard holds it.
        let place = locked.reserve_place();
        for &id in &uniq {
            let mine = keys_of(id);
            let lookup = lookup.clone();
            locked
                .run(id, move |w| {
                    for (at, k) in &mine {
                        w.message_place = (place, *at);
                        if let Err(Fail::Store(e)) = put_string(w, Key::new(db, k), &lookup[k], 0) {
                            return Err(e);
                        }
                    }
                    w.count_changes(mine.len() as u64);
                    Ok(())
                })
                .await?;
        }
        Ok(Ok(Reply::Int(1)))
    })
}

/// LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]
pub fn lcs(s: &mut Session, a: Args) -> Action {
    // Redis checks the keys' types before it parses the options.
    let keys = vec![a.get(1).clone(), a.get(2).clone()];
    let parse = move || -> Result<(bool, bool, bool, i64), Reply> {
        let (mut want_len, mut want_idx, mut with_len, mut min_len) = (false, false, false, 0i64);
        let rest = a.from(3);
        let mut i = 0;
        while i < rest.len() {
            let o = &rest[i][..];
            if is(o, "idx") {
                want_idx = true;
            } else if is(o, "len") {
                want_len = true;
            } else if is(o, "withmatchlen") {
                with_len = true;
            } else if is(o, "minmatchlen") && i + 1 < rest.len() {
                min_len = args::int(&rest[i + 1])?.max(0);
                i += 1;
            } else {
                return Err(error(SYNTAX));
            }
            i += 1;
        }
        if want_len && want_idx {
            return Err(Reply::err(
                "If you want both the length and indexes, please just use IDX.",
            ));
        }
        Ok((want_len, want_idx, with_len, min_len))
    };
    // The DP table Redis refuses past proto-max-bulk-len (see `util::lcs`).
    let max_table = s.server.runtime.read().proto_max_bulk_len();
    s.read_many(keys, move |r, k| {
        let sa = read_string(r[0], k[0]);
        let sb = read_string(r[1], k[1]);
        let (sa, sb) = match (sa, sb) {
            (Ok(x), Ok(y)) => (x.unwrap_or_default(), y.unwrap_or_default()),
            (Err(Fail::Store(e)), _) | (_, Err(Fail::Store(e))) => return Err(e.into()),
            _ => {
                return Ok(Reply::err("The specified keys must contain string values"));
            }
        };
        let (want_len, want_idx, with_len, min_len) = parse()?;
        let result = match lcs_algo::lcs(&sa, &sb, max_table) {
            Ok(result) => result,
            Err(refused) => return Ok(Reply::err(refused.message())),
        };
        if want_len {
            return Ok(Reply::Int(result.len as i64));
        }
        if !want_idx {
            return Ok(Reply::bulk(result.string));
        }
        let mut matches = Vec::new();
        for m in result.matches.iter().filter(|m| m.len as i64 >= min_len) {
            let mut item = vec![
                Reply::Array(vec![Reply::Int(m.a.0 as i64), Reply::Int(m.a.1 as i64)]),
                Reply::Array(vec![Reply::Int(m.b.0 as i64), Reply::Int(m.b.1 as i64)]),
            ];
            if with_len {
                item.push(Reply::Int(m.len as i64));
            }
            matches.push(Reply::Array(item));
        }
        Ok(Reply::Map(vec![
            (Reply::bulk("matches"), Reply::Array(matches)),
            (Reply::bulk("len"), Reply::Int(result.len as i64)),
        ]))
    })
}

#[cfg(test)]
mod tests {
    use super::clamp_range;

    #[test]
    fn getrange_arithmetic_matches_redis() {
        assert_eq!(clamp_range(0, -1, 5), Some((0, 4)));
        assert_eq!(clamp_range(-3, -1, 5), Some((2, 4)));
        assert_eq!(clamp_range(-1, -3, 5), None);
        assert_eq!(clamp_range(10, 20, 5), None);
        assert_eq!(clamp_range(0, 100, 5), Some((0, 4)));
        assert_eq!(clamp_range(0, 0, 0), None);
    }
}

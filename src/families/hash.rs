//! Hashes: field -> value sub-keys under the key's version.

use bytes::Bytes;

use super::collection::{self, Edit, View};
use super::Fail;
use crate::command::args::{self, error, Args};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::pubsub::notify;
use crate::rdb::object::Limits;
use crate::storage::keyspace::Key;
use crate::storage::{KeyType, WriteCtx};
use crate::util::num;

const HASH: KeyType = KeyType::Hash;

/// Field/value pairs from `args[from..]`, or the arity error.
fn field_pairs(a: &Args, from: usize) -> Result<Vec<(Bytes, Bytes)>, Reply> {
    let rest = a.from(from);
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(Reply::err(format!(
            "wrong number of arguments for '{}' command",
            a.name_lower()
        )));
    }
    Ok(rest
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect())
}

/// The hash at `key` for writing, created if absent: a new one starts
/// compact, keeping its fields in the order they are added (see
/// `collection::ORDERED`).
fn load_or_create(w: &mut WriteCtx, key: Key) -> Result<Edit, Fail> {
    let mut h = Edit::load_or_create(w, key, HASH)?;
    if h.is_new() {
        h.keep_order();
    }
    Ok(h)
}

/// Records that `h` left its compact encoding (a listpack) if this write
/// makes it: an argument (field or value) of `longest` bytes over
/// `hash-max-listpack-value`, or more fields than
/// `hash-max-listpack-entries`. Its fields' order goes with it.
fn note_written(h: &mut Edit, longest: usize, limits: &Limits) {
    if !h.converted() && (longest > limits.hash_value || h.size > limits.hash_entries as u64) {
        h.drop_order();
        h.mark_converted();
    }
}

fn hset_generic(s: &mut Session, mut a: Args, reply_ok: bool) -> Action {
    let pairs = match field_pairs(&a, 2) {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    let limits = s.server.encoding_limits();
    s.write_owned(a.take(1), move |w, k| {
        let mut h = load_or_create(w, k)?;
        let mut added = 0;
        for (f, v) in &pairs {
            added += h.put(w, f, v)? as i64;
        }
        let longest = pairs.iter().map(|(f, v)| f.len().max(v.len())).max();
        note_written(&mut h, longest.unwrap_or(0), &limits);
        h.save(w, k)?;
        w.event(notify::HASH, "hset", k);
        w.count_changes(pairs.len() as u64);
        Ok(if reply_ok {
            Reply::Ok
        } else {
            Reply::Int(added)
        })
    })
}

/// HSET key field value [field value ...]
pub fn hset(s: &mut Session, a: Args) -> Action {
    hset_generic(s, a, false)
}

/// HMSET key field value [field value ...]
pub fn hmset(s: &mut Session, a: Args) -> Action {
    hset_generic(s, a, true)
}

/// HSETNX key field value
pub fn hsetnx(s: &mut Session, a: Args) -> Action {
    let (f, v) = (a.get(2).clone(), a.get(3).clone());
    let limits = s.server.encoding_limits();
    s.write(a.get(1), move |w, k| {
        let mut h = load_or_create(w, k)?;
        if h.get(w, &f)?.is_some() {
            return Ok(Reply::Int(0));
        }
        h.put(w, &f, &v)?;
        note_written(&mut h, f.len().max(v.len()), &limits);
        h.save(w, k)?;
        w.event(notify::HASH, "hset", k);
        Ok(Reply::Int(1))
    })
}

/// HGET key field
pub fn hget(s: &mut Session, a: Args) -> Action {
    let f = a.get(2).clone();
    s.read(a.get(1), move |r, k| {
        let Some(h) = View::load(r, k, HASH)? else {
            return Ok(Reply::Nil);
        };
        Ok(Reply::opt_bulk(h.get(r, &f)?))
    })
}

/// HMGET key field [field ...]
pub fn hmget(s: &mut Session, a: Args) -> Action {
    let fields = a.from(2).to_vec();
    s.read(a.get(1), move |r, k| {
        let h = View::load(r, k, HASH)?;
        let mut out = Vec::with_capacity(fields.len());
        for f in &fields {
            out.push(match &h {
                Some(h) => Reply::opt_bulk(h.get(r, f)?),
                None => Reply::Nil,
            });
        }
        Ok(Reply::Array(out))
    })
}

/// HDEL key field [field ...]
pub fn hdel(s: &mut Session, a: Args) -> Action {
    collection::remove_members(s, &a, HASH)
}

/// HLEN key
pub fn hlen(s: &mut Session, a: Args) -> Action {
    collection::card(s, &a, HASH)
}

/// HSTRLEN key field
pub fn hstrlen(s: &mut Session, a: Args) -> Action {
    let f = a.get(2).clone();
    s.read(a.get(1), move |r, k| {
        let Some(h) = View::load(r, k, HASH)? else {
            return Ok(Reply::Int(0));
        };
        Ok(Reply::Int(h.get(r, &f)?.map_or(0, |v| v.len() as i64)))
    })
}

/// HEXISTS key field
pub fn hexists(s: &mut Session, a: Args) -> Action {
    collection::has_member(s, &a, HASH)
}

/// A field and its value.
type Pair = (Vec<u8>, Vec<u8>);

/// Every field and value of a hash (empty if the key is missing).
fn all_pairs(r: &dyn crate::storage::KvRead, h: &Option<View>) -> Result<Vec<Pair>, Fail> {
    let mut out = Vec::new();
    if let Some(h) = h {
        out.reserve(h.size as usize);
        h.scan(r, &mut |f, v| {
            out.push((f.to_vec(), v.to_vec()));
            true
        })?;
    }
    Ok(out)
}

/// HKEYS key
pub fn hkeys(s: &mut Session, a: Args) -> Action {
    s.read(a.get(1), |r, k| {
        let h = View::load(r, k, HASH)?;
        let pairs = all_pairs(r, &h)?;
        Ok(Reply::Array(
            pairs.into_iter().map(|(f, _)| Reply::bulk(f)).collect(),
        ))
    })
}

/// HVALS key
pub fn hvals(s: &mut Session, a: Args) -> Action {
    s.read(a.get(1), |r, k| {
        let h = View::load(r, k, HASH)?;
        let pairs = all_pairs(r, &h)?;
        Ok(Reply::Array(
            pairs.into_iter().map(|(_, v)| Reply::bulk(v)).collect(),
        ))
    })
}

/// HGETALL key
pub fn hgetall(s: &mut Session, a: Args) -> Action {
    s.read(a.get(1), |r, k| {
        let h = View::load(r, k, HASH)?;
        let pairs = all_pairs(r, &h)?;
        Ok(Reply::Map(
            pairs
                .into_iter()
                .map(|(f, v)| (Reply::bulk(f), Reply::bulk(v)))
                .collect(),
        ))
    })
}

/// HINCRBY key field increment
pub fn hincrby(s: &mut Session, a: Args) -> Action {
    let by = match a.int(3) {
        Ok(b) => b,
        Err(r) => return r.into(),
    };
    let f = a.get(2).clone();
    let limits = s.server.encoding_limits();
    s.write(a.get(1), move |w, k| {
        let mut h = load_or_create(w, k)?;
        let cur = match h.get(w, &f)? {
            Some(v) => {
                num::parse_i64(&v).ok_or_else(|| Reply::err("hash value is not an integer"))?
            }
            None => 0,
        };
        let new = cur
            .checked_add(by)
            .ok_or_else(|| Reply::err("increment or decrement would overflow"))?;
        let new_text = new.to_string();
        h.put(w, &f, new_text.as_bytes())?;
        // Redis checks the field and the new value as it stores them.
        note_written(&mut h, f.len().max(new_text.len()), &limits);
        h.save(w, k)?;
        w.event(notify::HASH, "hincrby", k);
        Ok(Reply::Int(new))
    })
}

/// HINCRBYFLOAT key field increment (80-bit arithmetic, as Redis).
pub fn hincrbyfloat(s: &mut Session, a: Args) -> Action {
    let (f, by) = (a.get(2).clone(), a.get(3).clone());
    // Redis checks the increment before it looks at the key.
    if let Err(e) = num::hincrbyfloat(None, &by) {
        return incr_float_error(e).into();
    }
    let limits = s.server.encoding_limits();
    s.write(a.get(1), move |w, k| {
        let mut h = load_or_create(w, k)?;
        let cur = h.get(w, &f)?;
        let text = num::hincrbyfloat(cur.as_deref(), &by).map_err(incr_float_error)?;
        h.put(w, &f, text.as_bytes())?;
        note_written(&mut h, f.len().max(text.len()), &limits);
        h.save(w, k)?;
        w.event(notify::HASH, "hincrbyfloat", k);
        Ok(Reply::bulk(text))
    })
}

fn incr_float_error(e: num::IncrFloatError) -> Reply {
    match e {
        num::IncrFloatError::NotAFloat => error(args::NOT_FLOAT),
        num::IncrFloatError::HashValueNotAFloat => Reply::err("hash value is not a float"),
        num::IncrFloatError::IncrementNotFinite => Reply::err("value is NaN or Infinity"),
        num::IncrFloatError::NanOrInfinity => Reply::err("increment would produce NaN or Infinity"),
    }
}

/// HRANDFIELD key [count [WITHVALUES]]
pub fn hrandfield(s: &mut Session, a: Args) -> Action {
    if a.len() == 2 {
        return super::collection::random_member(s, &a, HASH);
    }
    let (count, with_values) = match super::parse_rand_count(&a, "withvalues") {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    let resp3 = s.resp3;
    let overflow = collection::PickOverflow::check(s, count);
    s.read(a.get(1), move |r, k| {
        let Some(h) = View::load(r, k, HASH)? else {
            return Ok(Reply::Array(Vec::new()));
        };
        if let Some(o) = &overflow {
            return Ok(o.close());
        }
        Ok(h.pick_reply(r, count, |out, f, v| {
            View::put_pick(out, f, with_values, resp3, |out| out.bulk(v))
        })?)
    })
}

/// HSCAN key cursor [MATCH pattern] [COUNT count]
///
/// Returns every matching field in one reply (cursor 0): allowed by SCAN's
/// contract (COUNT is a hint), and it trivially keeps the guarantee that a
/// field present for the whole scan is returned. As in Redis, the cursor is
/// checked first and the options only once the key is found.
pub fn hscan(s: &mut Session, a: Args) -> Action {
    collection::scan_members(s, &a, HASH, |f, v, out| {
        out.push(Reply::bulk_copy(f));
        out.push(Reply::bulk_copy(v));
    })
}

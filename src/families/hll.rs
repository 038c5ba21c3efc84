//! HyperLogLog: PFADD, PFCOUNT, PFMERGE, PFDEBUG, PFSELFTEST. Values are
//! plain strings in Redis's own HLL format (see `util::hll`), so GET shows
//! Redis's bytes and a value SET from Redis's bytes works here.

use bytes::Bytes;

use super::{read_string, string_for_write, Fail};
use crate::command::args::{is, Args};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::pubsub::notify;
use crate::storage::keyspace::{self, Key};
use crate::storage::{Meta, MetaBody, WriteCtx};
use crate::util::hll;

/// Redis's reply for a string that is not an HLL.
const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
/// Redis's reply for an HLL whose registers do not add up.
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

fn not_hll() -> Fail {
    Fail::Reply(Reply::Error(NOT_HLL.into()))
}

fn corrupt() -> Reply {
    Reply::Error(CORRUPT.into())
}

/// The `hll-sparse-max-bytes` setting now (read on the connection, so the
/// shard-side closure needs no lock).
fn sparse_max(s: &Session) -> usize {
    s.server.runtime.read().size("hll-sparse-max-bytes")
}

/// Looks a key up for writing: its metadata and HLL bytes, or `None`;
/// WRONGTYPE for another type or a string that is not an HLL.
/// The bytes are moved out of the metadata, which is kept for its TTL.
fn hll_for_write(w: &mut WriteCtx, k: Key) -> Result<Option<(Meta, Vec<u8>)>, Fail> {
    let Some(mut meta) = string_for_write(w, k)? else {
        return Ok(None);
    };
    let v = match &mut meta.body {
        MetaBody::String(v) => std::mem::take(v),
        MetaBody::Collection { .. } => Vec::new(),
    };
    if !hll::is_hll(&v) {
        return Err(not_hll());
    }
    Ok(Some((meta, v)))
}

/// Writes an HLL back, keeping the key's TTL.
fn put(w: &mut WriteCtx, k: Key, old: Option<&Meta>, v: Vec<u8>) -> Result<(), Fail> {
    let expire = old.map_or(0, |m| m.expire_ms);
    keyspace::store(w, k, old, &Meta::string(v, expire))?;
    Ok(())
}

/// PFADD key [element ...]
pub fn pfadd(s: &mut Session, a: Args) -> Action {
    let max = sparse_max(s);
    let elements: Vec<Bytes> = a.from(2).to_vec();
    s.write(a.get(1), move |w, k| {
        let old = hll_for_write(w, k)?;
        let created = old.is_none();
        let (meta, mut v) = match old {
            Some((m, v)) => (Some(m), v),
            None => (None, hll::new_sparse()),
        };
        let mut updated = created;
        let mut changed = created;
        // Redis's dirty count: the key's creation and each element that
        // changed a register.
        let mut changes = created as u64;
        for e in &elements {
            match hll::add(&mut v, e, max) {
                Ok(true) => {
                    updated = true;
                    changed = true;
                    changes += 1;
                }
                Ok(false) => {}
                Err(hll::Corrupt) => {
                    // Redis edits the value in place: what earlier elements
                    // changed stays, without a cache invalidation.
                    if changed {
                        put(w, k, meta.as_ref(), v)?;
                    }
                    return Ok(corrupt());
                }
            }
        }
        if updated {
            hll::invalidate(&mut v);
            put(w, k, meta.as_ref(), v)?;
            w.event(notify::STRING, "pfadd", k);
            w.count_changes(changes);
        }
        Ok(Reply::Int(updated as i64))
    })
}

/// PFCOUNT key [key ...]
///
/// One key: the cached cardinality, or a fresh one that is written back
/// into the value's header (as Redis does, so GET shows the same bytes);
/// nothing is written while the cache is valid. Several keys: the
/// cardinality of their union, read from one consistent view.
pub fn pfcount(s: &mut Session, a: Args) -> Action {
    if a.len() > 2 {
        return s.read_many(a.from(1).to_vec(), |readers, keys| {
            let mut max = vec![0u8; hll::REGISTERS];
            for (r, &k) in readers.iter().zip(keys) {
                let Some(v) = read_string(*r, k)? else {
                    continue;
                };
                if !hll::is_hll(&v) {
                    return Err(not_hll());
                }
                if hll::merge_into(&mut max, &v).is_err() {
                    return Ok(corrupt());
                }
            }
            Ok(Reply::Int(hll::count_raw(&max) as i64))
        });
    }
    s.write(a.get(1), |w, k| {
        let Some((meta, mut v)) = hll_for_write(w, k)? else {
            w.event(notify::KEY_MISS, "keymiss", k);
            return Ok(Reply::Int(0));
        };
        if let Some(card) = hll::cached(&v) {
            return Ok(Reply::Int(card as i64));
        }
        let Ok(card) = hll::count(&v) else {
            return Ok(corrupt());
        };
        hll::set_cached(&mut v, card);
        put(w, k, Some(&meta), v)?;
        Ok(Reply::Int(card as i64))
    })
}

/// One PFMERGE source: whether it was dense, and its registers.
type Loaded = Option<(bool, Vec<u8>)>;

/// PFMERGE destkey [sourcekey ...]
///
/// As in Redis the destination is merged too, the result stays sparse
/// unless an input was dense, and the registers are written into the
/// destination one by one (so a sparse result has Redis's exact bytes).
pub fn pfmerge(s: &mut Session, a: Args) -> Action {
    let max_bytes = sparse_max(s);
    let dest = a.get(1).clone();
    super::load_then_store(
        s,
        a.from(1).to_vec(),
        dest,
        |r, k| -> Result<Loaded, Fail> {
            let Some(v) = read_string(r, k)? else {
                return Ok(None);
            };
            if !hll::is_hll(&v) {
                return Err(not_hll());
            }
            let mut regs = vec![0u8; hll::REGISTERS];
            hll::merge_into(&mut regs, &v).map_err(|_| Fail::Reply(corrupt()))?;
            Ok(Some((v[4] == hll::DENSE, regs)))
        },
        move |w, kd, loaded| {
            let mut max = vec![0u8; hll::REGISTERS];
            let mut dense = false;
            for (d, regs) in loaded.into_iter().flatten() {
                dense |= d;
                for (m, r) in max.iter_mut().zip(regs) {
                    *m = (*m).max(r);
                }
            }
            let old = hll_for_write(w, kd)?;
            let (meta, mut v) = match old {
                Some((m, v)) => (Some(m), v),
                None => (None, hll::new_sparse()),
            };
            if dense && hll::to_dense(&mut v).is_err() {
                return Ok(corrupt());
            }
            for (i, &m) in max.iter().enumerate() {
                if m != 0 {
                    // The destination was validated as a source: no error.
                    let _ = hll::set(&mut v, i, m, max_bytes);
                }
            }
            hll::invalidate(&mut v);
            put(w, kd, meta.as_ref(), v)?;
            // Redis reports a merge as an add, changed or not.
            w.event(notify::STRING, "pfadd", kd);
            Ok(Reply::Ok)
        },
    )
}

/// PFDEBUG GETREG|DECODE|ENCODING|TODENSE key
///
/// Like Redis, the key is checked before the subcommand.
pub fn pfdebug(s: &mut Session, a: Args) -> Action {
    let sub = a.get(1).clone();
    s.write(a.get(2), move |w, k| {
        let Some((meta, mut v)) = hll_for_write(w, k)? else {
            return Ok(Reply::err("The specified key does not exist"));
        };
        if is(&sub, "getreg") || is(&sub, "todense") {
            let converted = v[4] == hll::SPARSE;
            if converted {
                if hll::to_dense(&mut v).is_err() {
                    return Ok(corrupt());
                }
                put(w, k, Some(&meta), v.clone())?;
            }
            if is(&sub, "todense") {
                return Ok(Reply::Int(converted as i64));
            }
            let regs = hll::registers(&v);
            return Ok(Reply::Array(
                regs.into_iter().map(|r| Reply::Int(r as i64)).collect(),
            ));
        }
        if is(&sub, "decode") {
            if v[4] != hll::SPARSE {
                return Ok(Reply::err("HLL encoding is not sparse"));
            }
            return Ok(Reply::bulk(hll::decode(&v)));
        }
        if is(&sub, "encoding") {
            return Ok(Reply::Simple(if v[4] == hll::DENSE {
                "dense"
            } else {
                "sparse"
            }));
        }
        Ok(Reply::err(format!(
            "Unknown PFDEBUG subcommand '{}'",
            String::from_utf8_lossy(&sub)
        )))
    })
}

/// PFSELFTEST: Redis's self-test of the register packing and the estimator,
/// run on a blocking thread (it adds ten million elements).
pub fn pfselftest(s: &mut Session, _a: Args) -> Action {
    let max = sparse_max(s);
    Action::Job(Box::pin(async move {
        match tokio::task::spawn_blocking(move || hll::self_test(10_000_000, max)).await {
            Ok(Ok(())) => Reply::Ok,
            Ok(Err(e)) => Reply::Error(e),
            Err(e) => Reply::err(format!("self-test failed: {e}")),
        }
    }))
}

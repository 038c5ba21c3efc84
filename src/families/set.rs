//! Sets: member -> empty sub-keys under the key's version.

use std::collections::HashSet;

use bytes::Bytes;

use super::collection::{self, Edit, View};
use super::Fail;
use crate::command::args::{self, error, Args, NOT_INTEGER, SYNTAX};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::pubsub::notify;
use crate::storage::keyspace::{self, Key};
use crate::storage::{KeyType, KvRead, WriteCtx};
use crate::util::num::parse_i64;

const SET: KeyType = KeyType::Set;

/// A set's members in the order Redis 7.0 iterates them, which is the
/// order its replies list them in: an intset (at most
/// `set-max-intset-entries` members, every one an integer, never
/// converted) holds them in numeric order; a hash table's order is no
/// order a client can count on, so there they stay in the rows' order.
type Members = Vec<Vec<u8>>;

/// Every member of the set at `key` (`limit`: `set-max-intset-entries`):
/// `None` if missing, WRONGTYPE if not a set.
fn members(r: &dyn KvRead, key: Key, limit: usize) -> Result<Option<Members>, Fail> {
    let Some(v) = View::load(r, key, SET)? else {
        return Ok(None);
    };
    Ok(Some(view_members(r, &v, limit)?))
}

/// The members of the set `v`, in its own order (see [`Members`]).
pub(crate) fn view_members(r: &dyn KvRead, v: &View, limit: usize) -> Result<Members, Fail> {
    let mut items = Vec::with_capacity(v.size as usize);
    v.scan(r, &mut |m, _| {
        items.push(m.to_vec());
        true
    })?;
    if !v.converted() {
        numeric_order(&mut items, limit);
    }
    Ok(items)
}

/// Orders the members of a set Redis builds afresh (SUNION's result, and
/// the whole set SPOP or SRANDMEMBER return when asked for at least all
/// of it): an intset while the members allow one, so numeric order then,
/// else a hash table, whose order means nothing (bytes order here, so that
/// replies do not change from one call to the next).
fn in_union_order(items: &mut Vec<Vec<u8>>, limit: usize) {
    if !numeric_order(items, limit) {
        items.sort_unstable();
    }
}

/// Whether `items` would make an intset: at most `limit` of them, each an
/// integer as Redis would store one.
fn would_be_intset(items: &[Vec<u8>], limit: usize) -> bool {
    items.len() <= limit && items.iter().all(|m| parse_i64(m).is_some())
}

/// Puts `items` in numeric order if they would make an intset: at most
/// `limit` of them, each an integer as Redis would store one. Whether they
/// would.
pub(crate) fn numeric_order(items: &mut Vec<Vec<u8>>, limit: usize) -> bool {
    if items.len() > limit {
        return false;
    }
    let Some(ints) = items
        .iter()
        .map(|m| parse_i64(m))
        .collect::<Option<Vec<i64>>>()
    else {
        return false;
    };
    let mut keyed: Vec<(i64, Vec<u8>)> = ints.into_iter().zip(items.drain(..)).collect();
    keyed.sort_unstable_by_key(|(n, _)| *n);
    items.extend(keyed.into_iter().map(|(_, m)| m));
    true
}

fn bulk_set(items: impl IntoIterator<Item = Vec<u8>>) -> Reply {
    Reply::Set(items.into_iter().map(Reply::bulk).collect())
}

/// SADD key member [member ...]
pub fn sadd(s: &mut Session, mut a: Args) -> Action {
    let ms = a.split_off(2);
    let limit = s.server.encoding_limits().set_intset_entries;
    s.write_owned(a.take(1), move |w, k| {
        // Members already there are rewritten as they were: only an added
        // member modifies the key (WATCH).
        w.quietly(
            &k.meta_key(),
            |w| -> Result<_, Fail> {
                let mut set = Edit::load_or_create(w, k, SET)?;
                let mut n = 0;
                for m in &ms {
                    n += set.put(w, m, &[])? as i64;
                }
                if n > 0 {
                    note_added(&mut set, &ms, limit);
                }
                set.save(w, k)?;
                if n > 0 {
                    w.event(notify::SET, "sadd", k);
                }
                Ok(Reply::Int(n))
            },
            collection::members_changed,
        )
    })
}

/// SREM key member [member ...]
pub fn srem(s: &mut Session, a: Args) -> Action {
    collection::remove_members(s, &a, SET)
}

/// SCARD key
pub fn scard(s: &mut Session, a: Args) -> Action {
    collection::card(s, &a, SET)
}

/// SISMEMBER key member
pub fn sismember(s: &mut Session, a: Args) -> Action {
    collection::has_member(s, &a, SET)
}

/// SMISMEMBER key member [member ...]
pub fn smismember(s: &mut Session, a: Args) -> Action {
    let ms = a.from(2).to_vec();
    s.read(a.get(1), move |r, k| {
        let v = View::load(r, k, SET)?;
        let mut out = Vec::with_capacity(ms.len());
        for m in &ms {
            let hit = match &v {
                Some(v) => v.get(r, m)?.is_some(),
                None => false,
            };
            out.push(Reply::Int(hit as i64));
        }
        Ok(Reply::Array(out))
    })
}

/// SMEMBERS key
pub fn smembers(s: &mut Session, a: Args) -> Action {
    let limit = s.server.encoding_limits().set_intset_entries;
    s.read(a.get(1), move |r, k| {
        Ok(bulk_set(members(r, k, limit)?.unwrap_or_default()))
    })
}

/// SPOP key [count]
pub fn spop(s: &mut Session, a: Args) -> Action {
    let count = match super::parse_pop_count(&a) {
        Ok(c) => c,
        Err(r) => return r.into(),
    };
    let limit = s.server.encoding_limits().set_intset_entries;
    s.write(a.get(1), move |w, k| {
        let Some(mut set) = Edit::load(w, k, SET)? else {
            return Ok(match count {
                None => Reply::Nil,
                Some(_) => Reply::Set(Vec::new()),
            });
        };
        let want = count.map_or(1, |c| c.min(set.size)) as usize;
        let whole = count.is_some_and(|c| c >= set.size);
        let mut picked = set.pop_random(w, want)?;
        if whole {
            in_union_order(&mut picked, limit);
        }
        let emptied = set.size == 0;
        set.save(w, k)?;
        if !picked.is_empty() {
            w.event_emptying(notify::SET, "spop", k, emptied);
            w.count_changes(picked.len() as u64);
        }
        Ok(match count {
            None => Reply::bulk(picked.into_iter().next().unwrap_or_default()),
            Some(_) => bulk_set(picked),
        })
    })
}

/// SRANDMEMBER key [count]
pub fn srandmember(s: &mut Session, a: Args) -> Action {
    let count = match a.len() {
        2 => return collection::random_member(s, &a, SET),
        3 => match args::int(a.get(2)) {
            Ok(i64::MIN) => {
                return Reply::err(
                    "value is out of range, value must between -9223372036854775807 and 9223372036854775807",
                )
                .into()
            }
            Ok(c) => c,
            Err(_) => return error(NOT_INTEGER).into(),
        },
        _ => return error(SYNTAX).into(),
    };
    let overflow = collection::PickOverflow::check(s, count);
    let limit = s.server.encoding_limits().set_intset_entries;
    s.read(a.get(1), move |r, k| {
        let Some(v) = View::load(r, k, SET)? else {
            return Ok(Reply::Array(Vec::new()));
        };
        if let Some(o) = &overflow {
            return Ok(o.close());
        }
        // Asked for at least all of it: the whole set, in its own order
        // (SMEMBERS's), as Redis answers.
        if count > 0 && count as u64 >= v.size {
            let items = view_members(r, &v, limit)?;
            return Ok(Reply::Array(items.into_iter().map(Reply::bulk).collect()));
        }
        Ok(v.pick_reply(r, count, |out, m, _| {
            View::put_pick(out, m, false, false, |_| {})
        })?)
    })
}

/// SMOVE source destination member
pub fn smove(s: &mut Session, a: Args) -> Action {
    let (src, dst, m) = (a.get(1).clone(), a.get(2).clone(), a.get(3).clone());
    let db = s.db;
    let shards = s.server.shards.clone();
    let (is_, id) = (shards.shard_of_key(&src), shards.shard_of_key(&dst));
    let limit = s.server.encoding_limits().set_intset_entries;
    if is_ == id {
        return s.write(&src.clone(), move |w, ks| {
            let kd = Key::new(db, &dst);
            // As Redis: a missing source answers 0 before any type check,
            // then the source's type, then the destination's.
            let Some(mut from) = Edit::load(w, ks, SET)? else {
                return Ok(Reply::Int(0));
            };
            Edit::load(w, kd, SET)?;
            if src == dst {
                return Ok(Reply::Int(from.get(w, &m)?.is_some() as i64));
            }
            if !from.remove(w, &m)? {
                return Ok(Reply::Int(0));
            }
            let emptied = from.size == 0;
            from.save(w, ks)?;
            w.event_emptying(notify::SET, "srem", ks, emptied);
            // One change for the removal, one more if the member was new
            // to the destination, as Redis counts them.
            let added = add_moved(w, kd, &m, limit)?;
            w.count_changes(1 + added as u64);
            Ok(Reply::Int(1))
        });
    }
    super::coordinated(vec![is_, id], move |locked| async move {
        let (s2, d2) = (src.clone(), dst.clone());
        let check = locked
            .run(id, move |w| {
                Ok(Edit::load(w, Key::new(db, &d2), SET).map(|_| ()))
            })
            .await?;
        let m2 = m.clone();
        let removed = locked
            .run(is_, move |w| {
                let k = Key::new(db, &s2);
                let Some(mut from) = (match Edit::load(w, k, SET) {
                    Ok(f) => f,
                    Err(Fail::Reply(r)) => return Ok(Err(r)),
                    Err(Fail::Store(e)) => return Err(e),
                }) else {
                    return Ok(Ok(false));
                };
                if let Err(Fail::Reply(r)) = &check {
                    return Ok(Err(r.clone()));
                }
                if !from.remove(w, &m2)? {
                    return Ok(Ok(false));
                }
                let emptied = from.size == 0;
                from.save(w, k)?;
                w.event_emptying(notify::SET, "srem", k, emptied);
                Ok(Ok(true))
            })
            .await?;
        match removed {
            Err(r) => Ok(Err(r)),
            Ok(false) => Ok(Err(Reply::Int(0))),
            Ok(true) => {
                locked
                    .run(id, move |w| {
                        match add_moved(w, Key::new(db, &dst), &m, limit) {
                            Ok(_) => Ok(()),
                            Err(Fail::Store(e)) => Err(e),
                            Err(Fail::Reply(_)) => unreachable!("destination type checked"),
                        }
                    })
                    .await?;
                Ok(Ok(Reply::Int(1)))
            }
        }
    })
}

/// Records that `set` left its compact encoding (an intset) if members
/// `added` (some of them new) make it: a member that is not an integer, or
/// more members than `set-max-intset-entries` (`limit`).
fn note_added(set: &mut Edit, added: &[Bytes], limit: usize) {
    if !set.converted() && (set.size > limit as u64 || added.iter().any(|m| parse_i64(m).is_none()))
    {
        set.mark_converted();
    }
}

/// Adds SMOVE's `member` to the set at `key`; whether it was new there. A
/// member already there leaves the destination untouched, as in Redis: no
/// write, no event, and a client watching it is not told it changed.
fn add_moved(w: &mut WriteCtx, key: Key, member: &Bytes, limit: usize) -> Result<bool, Fail> {
    let mut to = Edit::load_or_create(w, key, SET)?;
    if to.get(w, member)?.is_some() {
        return Ok(false);
    }
    to.put(w, member, &[])?;
    note_added(&mut to, std::slice::from_ref(member), limit);
    to.save(w, key)?;
    w.event(notify::SET, "sadd", key);
    Ok(true)
}

/// Which set operation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// What a set operation gives: its members in the order Redis 7.0 replies
/// them, and whether Redis holds them in a hash table although they would
/// make an intset (so that a stored result says so, see `store_set`).
struct Combined {
    items: Vec<Vec<u8>>,
    hashtable: bool,
}

/// Applies `op` to the loaded sets (None: a missing key, an empty set),
/// the way Redis 7.0 does, which decides the order of the result: SINTER
/// walks the smallest set (the first of equal ones) and keeps what every
/// other set has; SUNION and SDIFF gather their result into a new set,
/// an intset while it can be one, and list that. `limit` is
/// `set-max-intset-entries`.
fn combine(op: Op, sets: Vec<Option<Members>>, limit: usize) -> Combined {
    let done = |items| Combined {
        items,
        hashtable: false,
    };
    match op {
        Op::Inter => {
            if sets.iter().any(Option::is_none) {
                return done(Vec::new());
            }
            let mut sets: Vec<Members> = sets.into_iter().flatten().collect();
            let Some(smallest) = (0..sets.len()).min_by_key(|&i| sets[i].len()) else {
                return done(Vec::new());
            };
            let walked = sets.swap_remove(smallest);
            let others = lookups(&sets);
            let items = walked
                .into_iter()
                .filter(|m| others.iter().all(|o| o.contains(m.as_slice())))
                .collect();
            done(items)
        }
        Op::Union => {
            let all: HashSet<Vec<u8>> = sets.into_iter().flatten().flatten().collect();
            let mut items: Vec<Vec<u8>> = all.into_iter().collect();
            in_union_order(&mut items, limit);
            done(items)
        }
        Op::Diff => {
            let mut sets = sets.into_iter();
            let Some(first) = sets.next().flatten() else {
                return done(Vec::new());
            };
            let rest: Vec<Members> = sets.flatten().collect();
            // Redis picks between walking the first set (checking each
            // member against the others) and copying it whole, then
            // removing the others' members: the copy is a hash table as
            // soon as the first set could not be an intset, whatever is
            // left of it.
            let first_len = first.len();
            let walk_work = first_len * (1 + rest.len()) / 2;
            let copy_work = first_len + rest.iter().map(Vec::len).sum::<usize>();
            let copied_whole = walk_work > copy_work;
            let first_ints = copied_whole && would_be_intset(&first, limit);
            let others = lookups(&rest);
            let mut items: Vec<Vec<u8>> = first
                .into_iter()
                .filter(|m| !others.iter().any(|o| o.contains(m.as_slice())))
                .collect();
            let hashtable = if copied_whole && !first_ints {
                !items.is_empty() && would_be_intset(&items, limit)
            } else {
                numeric_order(&mut items, limit);
                false
            };
            Combined { items, hashtable }
        }
    }
}

/// Each set as a lookup table of its members.
fn lookups(sets: &[Members]) -> Vec<HashSet<&[u8]>> {
    sets.iter()
        .map(|s| s.iter().map(Vec::as_slice).collect())
        .collect()
}

/// Loads every key's set from its reader, type-checking all of them.
fn load_all(
    readers: &[&dyn KvRead],
    keys: &[Key],
    limit: usize,
) -> Result<Vec<Option<Members>>, Fail> {
    readers
        .iter()
        .zip(keys)
        .map(|(r, k)| members(*r, *k, limit))
        .collect()
}

fn set_op(s: &mut Session, a: Args, op: Op) -> Action {
    let limit = s.server.encoding_limits().set_intset_entries;
    s.read_many(a.from(1).to_vec(), move |readers, keys| {
        Ok(bulk_set(
            combine(op, load_all(readers, keys, limit)?, limit).items,
        ))
    })
}

/// SINTER key [key ...]
pub fn sinter(s: &mut Session, a: Args) -> Action {
    set_op(s, a, Op::Inter)
}

/// SUNION key [key ...]
pub fn sunion(s: &mut Session, a: Args) -> Action {
    set_op(s, a, Op::Union)
}

/// SDIFF key [key ...]
pub fn sdiff(s: &mut Session, a: Args) -> Action {
    set_op(s, a, Op::Diff)
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit]
pub fn sintercard(s: &mut Session, a: Args) -> Action {
    let numkeys = match args::int(a.get(1)) {
        Ok(n) if n > 0 => n as usize,
        _ => return Reply::err("numkeys should be greater than 0").into(),
    };
    if numkeys > a.len() - 2 {
        return Reply::err("Number of keys can't be greater than number of args").into();
    }
    let limit = match super::collection::parse_card_limit(&a, 2 + numkeys) {
        Ok(l) => l,
        Err(r) => return r.into(),
    };
    let keys = a.all()[2..2 + numkeys].to_vec();
    let intset = s.server.encoding_limits().set_intset_entries;
    s.read_many(keys, move |readers, keys| {
        let n = combine(Op::Inter, load_all(readers, keys, intset)?, intset)
            .items
            .len();
        Ok(Reply::Int(if limit > 0 { n.min(limit) } else { n } as i64))
    })
}

/// Replaces `dest` with a set of the result's members (deleting it when
/// empty), marked as a hash table where Redis holds it in one: members
/// that cannot make an intset (`limit` is `set-max-intset-entries`), or
/// ones that could but that Redis gathered in a hash table. The mark
/// stays while the set lives, as Redis never converts back.
fn store_set(w: &mut WriteCtx, dest: Key, result: &Combined, limit: usize) -> Result<(), Fail> {
    keyspace::delete_if_live(w, dest)?;
    let mut set = Edit::load_or_create(w, dest, SET)?;
    for m in &result.items {
        set.put(w, m, &[])?;
    }
    if result.hashtable || !would_be_intset(&result.items, limit) {
        set.mark_converted();
    }
    set.save(w, dest)?;
    Ok(())
}

fn set_op_store(s: &mut Session, a: Args, op: Op) -> Action {
    let limit = s.server.encoding_limits().set_intset_entries;
    super::load_then_store(
        s,
        a.from(2).to_vec(),
        a.get(1).clone(),
        move |r, k| members(r, k, limit),
        move |w, kd, sets| {
            let result = combine(op, sets, limit);
            if result.items.is_empty() {
                w.delete_reported(kd)?;
            } else {
                let existed = keyspace::delete_if_live(w, kd)?;
                w.replacing(existed, |w| store_set(w, kd, &result, limit))?;
                let event = match op {
                    Op::Inter => "sinterstore",
                    Op::Union => "sunionstore",
                    Op::Diff => "sdiffstore",
                };
                w.event(notify::SET, event, kd);
            }
            Ok(Reply::Int(result.items.len() as i64))
        },
    )
}

/// SINTERSTORE destination key [key ...]
pub fn sinterstore(s: &mut Session, a: Args) -> Action {
    set_op_store(s, a, Op::Inter)
}

/// SUNIONSTORE destination key [key ...]
pub fn sunionstore(s: &mut Session, a: Args) -> Action {
    set_op_store(s, a, Op::Union)
}

/// SDIFFSTORE destination key [key ...]
pub fn sdiffstore(s: &mut Session, a: Args) -> Action {
    set_op_store(s, a, Op::Diff)
}

/// SSCAN key cursor [MATCH pattern] [COUNT count]
///
/// Like HSCAN: every match in one reply with cursor 0; the cursor is checked
/// first, the options once the key is found.
pub fn sscan(s: &mut Session, a: Args) -> Action {
    collection::scan_members(s, &a, SET, |m, _, out| out.push(Reply::bulk_copy(m)))
}

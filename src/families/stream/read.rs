//! XREAD and XREADGROUP, blocking or not.
//!
//! XREAD reads snapshots of every named stream's shard. XREADGROUP writes
//! (it moves the group and fills pending lists), so it runs as one write on
//! the streams' shard, or as one coordinated command across shards.
//!
//! A blocked reader registers on its keys before its first try, so no XADD
//! can slip between the try and the wait; XADD wakes every reader of the
//! key (they may all be served), and each tries again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::group::GroupEdit;
use super::id::{self, StreamId};
use super::{entries_reply, entry_reply, store};
use crate::command::args::{error, int, is, Args, SYNTAX};
use crate::families::blocking::Waits;
use crate::families::{coordinated, on_views, settle, Fail};
use crate::net::session::{Action, Session};
use crate::net::unblock::Unblocker;
use crate::protocol::Reply;
use crate::pubsub::notify;
use crate::shard::ShardSet;
use crate::storage::keyspace::Key;
use crate::storage::{KvRead, WriteCtx};

/// When XREAD blocks without COUNT, Redis serves at most this many entries.
const BLOCKED_DEFAULT_COUNT: usize = 1000;

/// The arguments of XREAD and XREADGROUP.
struct ReadArgs {
    /// BLOCK's milliseconds (0 = forever), or `None` without BLOCK.
    block: Option<u64>,
    /// COUNT (0 = no limit).
    count: usize,
    /// GROUP's group and consumer.
    group: Option<(Bytes, Bytes)>,
    /// NOACK.
    noack: bool,
    /// The streams.
    keys: Vec<Bytes>,
    /// Their id arguments.
    ids: Vec<Bytes>,
}

/// `in_script`: BLOCK is refused where it is met, as Redis does in
/// scripts (blocking makes no sense there; in MULTI it just does not
/// block).
fn parse(a: &Args, xreadgroup: bool, in_script: bool) -> Result<ReadArgs, Reply> {
    let mut out = ReadArgs {
        block: None,
        count: 0,
        group: None,
        noack: false,
        keys: Vec::new(),
        ids: Vec::new(),
    };
    let mut streams_at = None;
    let mut i = 1;
    while i < a.len() {
        let more = a.len() - i - 1;
        let o = a.get(i);
        if is(o, "block") && more > 0 {
            if in_script {
                let name = if xreadgroup { "xreadgroup" } else { "xread" };
                return Err(Reply::err(format!(
                    "{name} command is not allowed with BLOCK option from scripts"
                )));
            }
            i += 1;
            let ms = int(a.get(i))
                .map_err(|_| Reply::err("timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(Reply::err("timeout is negative"));
            }
            if ms > i64::MAX - crate::shard::now_ms() as i64 {
                return Err(Reply::err("timeout is out of range"));
            }
            out.block = Some(ms as u64);
        } else if is(o, "count") && more > 0 {
            i += 1;
            out.count = int(a.get(i))?.max(0) as usize;
        } else if is(o, "streams") && more > 0 {
            let n = a.len() - i - 1;
            if !n.is_multiple_of(2) {
                return Err(Reply::err(
                    "Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
                ));
            }
            streams_at = Some(i + 1);
            break;
        } else if is(o, "group") && more >= 2 {
            if !xreadgroup {
                return Err(Reply::err(
                    "The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            out.group = Some((a.get(i + 1).clone(), a.get(i + 2).clone()));
            i += 2;
        } else if is(o, "noack") {
            if !xreadgroup {
                return Err(Reply::err(
                    "The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            out.noack = true;
        } else {
            return Err(error(SYNTAX));
        }
        i += 1;
    }
    let Some(at) = streams_at else {
        return Err(error(SYNTAX));
    };
    if xreadgroup && out.group.is_none() {
        return Err(Reply::err("Missing GROUP option for XREADGROUP"));
    }
    let n = (a.len() - at) / 2;
    out.keys = a.all()[at..at + n].to_vec();
    out.ids = a.all()[at + n..].to_vec();
    Ok(out)
}

/// The reply listing what each served stream gave: an array of
/// `[key, entries]` pairs, or a map in RESP3.
fn streams_reply(served: Vec<(Bytes, Reply)>, resp3: bool) -> Reply {
    if served.is_empty() {
        return Reply::NilArray;
    }
    if resp3 {
        return Reply::Map(
            served
                .into_iter()
                .map(|(k, v)| (Reply::Bulk(k), v))
                .collect(),
        );
    }
    Reply::Array(
        served
            .into_iter()
            .map(|(k, v)| Reply::Array(vec![Reply::Bulk(k), v]))
            .collect(),
    )
}

/// XREAD's ids resolved against the streams: `$` is the last id now.
fn resolve_ids(r: &[&dyn KvRead], ks: &[Key], args: &[Bytes]) -> Result<Vec<StreamId>, Fail> {
    let mut out = Vec::with_capacity(args.len());
    for ((r, k), arg) in r.iter().zip(ks).zip(args) {
        let st = store::load(*r, *k)?;
        out.push(match &arg[..] {
            b"$" => st.map_or(StreamId::MIN, |s| s.c.last_id),
            b">" => {
                return Err(Reply::err(
                    "The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
                )
                .into())
            }
            _ => id::parse_strict(arg)?,
        });
    }
    Ok(out)
}

/// Entries after `after` in each stream that has some.
fn read_after(
    r: &[&dyn KvRead],
    ks: &[Key],
    keys: &[Bytes],
    after: &[StreamId],
    count: usize,
) -> Result<Vec<(Bytes, Reply)>, Fail> {
    let mut served = Vec::new();
    for (i, k) in ks.iter().enumerate() {
        let Some(st) = store::load(r[i], *k)? else {
            continue;
        };
        let Some(start) = after[i].incr() else {
            continue;
        };
        let (n, entries) = st.range_reply(r[i], start, StreamId::MAX, false, count)?;
        if n > 0 {
            served.push((keys[i].clone(), entries));
        }
    }
    Ok(served)
}

/// The COUNT a reader served after blocking uses: Redis caps an unbounded
/// one so a reader of an old id is not sent a whole stream.
fn blocked_count(count: usize) -> usize {
    if count == 0 {
        BLOCKED_DEFAULT_COUNT
    } else {
        count
    }
}

fn deadline_of(block_ms: u64) -> Option<Instant> {
    // BLOCK 0 waits forever, and so does a deadline past the clock's range.
    (block_ms > 0)
        .then(|| Instant::now().checked_add(Duration::from_millis(block_ms)))
        .flatten()
}

fn fail_reply(f: Fail) -> Reply {
    match f {
        Fail::Reply(r) => r,
        Fail::Store(e) => Reply::err(e),
    }
}

/// XREAD [COUNT count] [BLOCK milliseconds] STREAMS key [key ...] id [id ...]
pub fn xread(s: &mut Session, a: Args) -> Action {
    let args = match parse(&a, false, s.in_script) {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    let (db, resp3) = (s.db, s.resp3);
    // Inside a transaction a blocking read is a plain one, as in Redis.
    if args.block.is_none() || s.in_exec {
        let (keys, ids, count) = (args.keys.clone(), args.ids, args.count);
        return s.read_many(args.keys, move |r, ks| {
            let after = resolve_ids(r, ks, &ids)?;
            let served = read_after(r, ks, &keys, &after, count)?;
            Ok(streams_reply(served, resp3))
        });
    }
    let server = s.server.clone();
    let shards = s.server.shards.clone();
    let mut unblocker = Unblocker::waiting_on(&s.entry, &args.keys);
    let job = async move {
        let guard = args.block.map(|_| shards.blocked.register(db, &args.keys));
        let first = on_views(&server, db, &args.keys, |r, ks| -> Result<_, Fail> {
            let after = resolve_ids(r, ks, &args.ids)?;
            let served = read_after(r, ks, &args.keys, &after, args.count)?;
            Ok((after, served))
        })
        .await;
        let (after, served) = match first {
            Ok(Ok(v)) => v,
            Ok(Err(f)) => return fail_reply(f),
            Err(r) => return r,
        };
        let (Some(block_ms), Some(guard)) = (args.block, guard) else {
            return streams_reply(served, resp3);
        };
        if !served.is_empty() {
            return streams_reply(served, resp3);
        }
        let deadline = deadline_of(block_ms);
        let count = blocked_count(args.count);
        loop {
            // Its timeout, or CLIENT UNBLOCK.
            if let Some(how) = unblocker.wait(&guard.waiter.notify, deadline).await {
                return how.reply(Reply::NilArray);
            }
            let again = on_views(&server, db, &args.keys, |r, ks| {
                // Once blocked, a key of another type is just not ready.
                let mut served = Vec::new();
                for i in 0..ks.len() {
                    if let Ok(mut one) = read_after(
                        &r[i..=i],
                        &ks[i..=i],
                        &args.keys[i..=i],
                        &after[i..=i],
                        count,
                    ) {
                        served.append(&mut one);
                    }
                }
                served
            })
            .await;
            match again {
                Ok(served) if !served.is_empty() => return streams_reply(served, resp3),
                Ok(_) => guard.pass_on(),
                Err(r) => return r,
            }
        }
    };
    Action::Block(Box::pin(job))
}

/// Checks one XREADGROUP stream before anything is written: its type, its
/// group and its id argument. `blocked`: the reader was already waiting,
/// which changes the errors to the ones Redis gives a blocked reader.
fn check_key(
    r: &dyn KvRead,
    k: Key,
    group: &[u8],
    id_arg: &[u8],
    blocked: bool,
) -> Result<(), Fail> {
    let gone = || {
        Fail::Reply(Reply::Error(
            "UNBLOCKED the stream key no longer exists".into(),
        ))
    };
    let st = match store::load(r, k) {
        Ok(Some(st)) => st,
        Ok(None) if blocked => return Err(gone()),
        Err(Fail::Reply(_)) if blocked => return Err(gone()),
        Ok(None) => {
            return Err(Reply::Error(format!(
                "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                String::from_utf8_lossy(k.name),
                String::from_utf8_lossy(group)
            ))
            .into())
        }
        Err(e) => return Err(e),
    };
    if st.group(r, group)?.is_none() {
        return Err(Reply::Error(if blocked {
            "NOGROUP the consumer group this client was blocked on no longer exists".into()
        } else {
            format!(
                "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                String::from_utf8_lossy(k.name),
                String::from_utf8_lossy(group)
            )
        })
        .into());
    }
    match id_arg {
        b"$" => Err(Reply::err(
            "The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.",
        )
        .into()),
        b">" => Ok(()),
        _ => id::parse_strict(id_arg).map(|_| ()).map_err(Fail::Reply),
    }
}

/// What XREADGROUP does with one stream (already checked): new entries
/// for `>` (nothing if there are none), otherwise the consumer's history
/// from the id (always a reply, possibly empty).
fn read_group_key(
    w: &mut WriteCtx,
    k: Key,
    (group, consumer): (&[u8], &[u8]),
    id_arg: &[u8],
    count: usize,
    noack: bool,
) -> Result<Option<Reply>, Fail> {
    let st = store::load_for_write(w, k)?.expect("checked before");
    let mut g = GroupEdit::load(&st, w, group)?.expect("checked before");
    let now = w.now_ms();
    let out = if id_arg == b">" {
        let from = g.g.last_id.incr();
        let entries = match from {
            Some(from) if st.len > 0 => st.range(w, from, StreamId::MAX, false, count)?,
            _ => Vec::new(),
        };
        if entries.is_empty() {
            // Redis meets the consumer only when it serves it.
            return Ok(None);
        }
        if g.touch(&st, w, consumer, now)? {
            w.event(notify::STREAM, "xgroup-createconsumer", k);
        }
        for (id, _) in &entries {
            st.advance_group(w, &mut g.g, *id)?;
            if !noack {
                g.deliver(&st, w, *id, consumer, now)?;
            }
        }
        Some(entries_reply(entries))
    } else {
        if g.touch(&st, w, consumer, now)? {
            w.event(notify::STREAM, "xgroup-createconsumer", k);
        }
        let after = id::parse_strict(id_arg)?;
        let start = after.incr().unwrap_or(StreamId::MIN);
        let mut out = Vec::new();
        for id in st.consumer_pending(w, group, consumer, start, StreamId::MAX, count)? {
            match st.entry(w, id)? {
                Some(fields) => {
                    if let Some(mut n) = st.nack(w, group, id)? {
                        n.delivery_ms = now;
                        n.deliveries += 1;
                        st.put_nack(w, group, id, &n)?;
                    }
                    out.push(entry_reply((id, fields)));
                }
                // Deleted since it was delivered: the id with no fields.
                None => out.push(Reply::Array(vec![id.reply(), Reply::NilArray])),
            }
        }
        Some(Reply::Array(out))
    };
    g.save(&st, w)?;
    Ok(out)
}

/// Everything one XREADGROUP try needs.
struct GroupRead {
    db: u8,
    keys: Vec<Bytes>,
    ids: Vec<Bytes>,
    group: Bytes,
    consumer: Bytes,
    count: usize,
    noack: bool,
    resp3: bool,
}

/// One try of XREADGROUP as an action: one write when every stream is on
/// one shard, otherwise a coordinated command that checks every stream
/// before it writes any.
fn group_attempt(
    shards: Arc<ShardSet>,
    req: Arc<GroupRead>,
    blocked: bool,
    count: usize,
) -> Action {
    let sids: Vec<usize> = req.keys.iter().map(|k| shards.shard_of_key(k)).collect();
    if sids.windows(2).all(|w| w[0] == w[1]) {
        return Action::Write {
            shard: sids[0],
            f: Box::new(move |w| {
                settle((|| -> Result<Reply, Fail> {
                    let ks: Vec<Key> = req.keys.iter().map(|k| Key::new(req.db, k)).collect();
                    for (k, id) in ks.iter().zip(&req.ids) {
                        check_key(w, *k, &req.group, id, blocked)?;
                    }
                    let mut served = Vec::new();
                    for (i, k) in ks.iter().enumerate() {
                        let gc = (&req.group[..], &req.consumer[..]);
                        if let Some(r) = read_group_key(w, *k, gc, &req.ids[i], count, req.noack)? {
                            served.push((req.keys[i].clone(), r));
                        }
                    }
                    Ok(streams_reply(served, req.resp3))
                })())
            }),
        };
    }
    coordinated(sids.clone(), move |locked| async move {
        for (i, &sid) in sids.iter().enumerate() {
            let req = req.clone();
            let checked = locked
                .run(sid, move |w| {
                    Ok(check_key(
                        w,
                        Key::new(req.db, &req.keys[i]),
                        &req.group,
                        &req.ids[i],
                        blocked,
                    ))
                })
                .await?;
            match checked {
                Ok(()) => {}
                Err(Fail::Reply(r)) => return Ok(Err(r)),
                Err(Fail::Store(e)) => return Err(e.into()),
            }
        }
        let mut served = Vec::new();
        for (i, &sid) in sids.iter().enumerate() {
            let r2 = req.clone();
            let got = locked
                .run(sid, move |w| {
                    let gc = (&r2.group[..], &r2.consumer[..]);
                    Ok(read_group_key(
                        w,
                        Key::new(r2.db, &r2.keys[i]),
                        gc,
                        &r2.ids[i],
                        count,
                        r2.noack,
                    ))
                })
                .await?;
            match got {
                Ok(Some(r)) => served.push((req.keys[i].clone(), r)),
                Ok(None) => {}
                Err(Fail::Reply(r)) => return Ok(Err(r)),
                Err(Fail::Store(e)) => return Err(e.into()),
            }
        }
        Ok(Ok(streams_reply(served, req.resp3)))
    })
}

/// XREADGROUP GROUP group consumer [COUNT count] [BLOCK milliseconds] [NOACK] STREAMS key [key ...] id [id ...]
pub fn xreadgroup(s: &mut Session, a: Args) -> Action {
    let args = match parse(&a, true, s.in_script) {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    let (group, consumer) = args.group.clone().expect("parse requires GROUP");
    let req = Arc::new(GroupRead {
        db: s.db,
        keys: args.keys.clone(),
        ids: args.ids.clone(),
        group,
        consumer,
        count: args.count,
        noack: args.noack,
        resp3: s.resp3,
    });
    let shards = s.server.shards.clone();
    let block_ms = match args.block {
        Some(ms) if !s.in_exec => ms,
        // Inside a transaction a blocking read is a plain one.
        _ => return group_attempt(shards, req.clone(), false, req.count),
    };
    // BLOCK 0 waits forever.
    let wait = (block_ms > 0).then(|| Duration::from_millis(block_ms));
    let keys = req.keys.clone();
    // A reader that was blocked reads with the errors and the COUNT cap
    // Redis gives a served blocked reader; the shard that feeds one of its
    // keys may serve it by the same try (see `families::blocking`).
    crate::families::blocking::block(
        s,
        keys.clone(),
        &keys,
        wait,
        Waits::Stream,
        move |shards, retry| {
            let count = if retry {
                blocked_count(req.count)
            } else {
                req.count
            };
            group_attempt(shards, req.clone(), retry, count)
        },
        |r| r,
    )
}

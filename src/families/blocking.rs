//! Blocking pops: BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP BZPOPMIN BZPOPMAX
//! BZMPOP. Each tries its non-blocking twin (LMPOP, LMOVE, ZMPOP) and, if
//! there is nothing to take, waits on the keys (see `shard::blocking`)
//! until woken or timed out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{list, zset};
use crate::command::args::{self, error, is, Args, SYNTAX};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::shard::ShardSet;

/// Parses a blocking timeout in seconds (fractions allowed; 0 = forever).
fn timeout(arg: &[u8]) -> Result<Option<Duration>, Reply> {
    let secs = crate::util::num::parse_f64(arg)
        .filter(|v| v.is_finite())
        .ok_or_else(|| Reply::err("timeout is not a float or out of range"))?;
    if secs < 0.0 {
        return Err(Reply::err("timeout is negative"));
    }
    if secs == 0.0 {
        return Ok(None);
    }
    Ok(Some(Duration::from_secs_f64(secs)))
}

/// Runs an action outside a connection (the attempts of a blocked client).
async fn run(shards: &ShardSet, action: Action) -> Reply {
    match action {
        Action::Reply(r) | Action::Close(Some(r)) => r,
        Action::Write { shard, f } => shards
            .submit(shard, f)
            .await
            .unwrap_or_else(|_| Reply::err("shard unavailable")),
        Action::Read { shard, f } => match shards.shard(shard).current_snapshot() {
            Ok(view) => f(&view).unwrap_or_else(Reply::err),
            Err(e) => Reply::err(e),
        },
        Action::Job(job) | Action::Block(job) => job.await,
        Action::Coordinated(rx) => rx.await.unwrap_or_else(|_| Reply::err("shard unavailable")),
        Action::Silent | Action::Close(None) => Reply::Nil,
    }
}

/// The blocking loop: register on `keys`, try, wait, try again...
/// `attempt` builds one try; a nil or nil-array reply means "nothing yet".
/// `served_key` names the key a successful reply took from, so the next
/// waiter on it can be woken.
fn block(
    s: &Session,
    keys: Vec<Bytes>,
    wait: Option<Duration>,
    attempt: impl Fn(Arc<ShardSet>) -> Action + Send + 'static,
    served_key: fn(&Reply) -> Option<Bytes>,
    finish: fn(Reply) -> Reply,
) -> Action {
    let shards = s.server.shards.clone();
    let db = s.db;
    Action::Block(Box::pin(async move {
        let guard = shards.blocked.register(db, &keys);
        let deadline = wait.map(|d| Instant::now() + d);
        loop {
            let reply = run(&shards, attempt(shards.clone())).await;
            if !matches!(reply, Reply::Nil | Reply::NilArray) {
                if let Some(k) = served_key(&reply) {
                    guard.pass_on(&k);
                }
                return finish(reply);
            }
            let woken = guard.waiter.notify.notified();
            match deadline {
                None => woken.await,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() || tokio::time::timeout(left, woken).await.is_err() {
                        return Reply::NilArray;
                    }
                }
            }
        }
    }))
}

/// The key of an `[key, ...]` reply.
fn first_key(r: &Reply) -> Option<Bytes> {
    match r {
        Reply::Array(items) => match items.first() {
            Some(Reply::Bulk(k)) => Some(k.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// `[key, [element]]` -> `[key, element]` (BLPOP's shape).
fn flatten_one(r: Reply) -> Reply {
    match r {
        Reply::Array(mut items) if items.len() == 2 => {
            let inner = items.pop().unwrap();
            let key = items.pop().unwrap();
            match inner {
                Reply::Array(mut els) if !els.is_empty() => Reply::Array(vec![key, els.remove(0)]),
                other => Reply::Array(vec![key, other]),
            }
        }
        other => other,
    }
}

/// `[key, [[member, score]]]` -> `[key, member, score]` (BZPOPMIN's shape).
fn flatten_scored(r: Reply) -> Reply {
    match flatten_one(r) {
        Reply::Array(mut items) if items.len() == 2 => match items.pop().unwrap() {
            Reply::Array(pair) => {
                let mut out = items;
                out.extend(pair);
                Reply::Array(out)
            }
            other => {
                items.push(other);
                Reply::Array(items)
            }
        },
        other => other,
    }
}

fn keep(r: Reply) -> Reply {
    r
}

fn bpop(s: &mut Session, a: Args, left: bool) -> Action {
    let wait = match timeout(a.get(a.len() - 1)) {
        Ok(t) => t,
        Err(r) => return r.into(),
    };
    let keys: Vec<Bytes> = a.all()[1..a.len() - 1].to_vec();
    let db = s.db;
    let attempt_keys = keys.clone();
    block(
        s,
        keys,
        wait,
        move |shards| list::mpop_action(shards, db, attempt_keys.clone(), left, 1),
        first_key,
        flatten_one,
    )
}

/// BLPOP key [key ...] timeout
pub fn blpop(s: &mut Session, a: Args) -> Action {
    bpop(s, a, true)
}

/// BRPOP key [key ...] timeout
pub fn brpop(s: &mut Session, a: Args) -> Action {
    bpop(s, a, false)
}

fn bmove(
    s: &mut Session,
    src: Bytes,
    dst: Bytes,
    from_left: bool,
    to_left: bool,
    t: &[u8],
) -> Action {
    let wait = match timeout(t) {
        Ok(t) => t,
        Err(r) => return r.into(),
    };
    let db = s.db;
    let (src2, dst2) = (src.clone(), dst.clone());
    // The served key is always the source.
    fn no_key(_: &Reply) -> Option<Bytes> {
        None
    }
    let src3 = src.clone();
    let shards = s.server.shards.clone();
    let inner = block(
        s,
        vec![src],
        wait,
        move |shards| {
            list::lmove_action(shards, db, src2.clone(), dst2.clone(), from_left, to_left)
        },
        no_key,
        keep,
    );
    // A timed-out BLMOVE replies like the others with a null; wake the next
    // waiter on the source after a successful move.
    match inner {
        Action::Block(job) => Action::Block(Box::pin(async move {
            let r = job.await;
            if !matches!(r, Reply::Nil | Reply::NilArray) {
                shards.blocked.signal(db, &src3);
            }
            r
        })),
        other => other,
    }
}

/// BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout
pub fn blmove(s: &mut Session, a: Args) -> Action {
    let side = |x: &[u8]| {
        if is(x, "left") {
            Some(true)
        } else if is(x, "right") {
            Some(false)
        } else {
            None
        }
    };
    match (side(a.get(3)), side(a.get(4))) {
        (Some(f), Some(t)) => {
            let t_arg = a.get(5).clone();
            bmove(s, a.get(1).clone(), a.get(2).clone(), f, t, &t_arg)
        }
        _ => error(SYNTAX).into(),
    }
}

/// BRPOPLPUSH source destination timeout
pub fn brpoplpush(s: &mut Session, a: Args) -> Action {
    let t_arg = a.get(3).clone();
    bmove(s, a.get(1).clone(), a.get(2).clone(), false, true, &t_arg)
}

/// Parses `numkeys key... LEFT|RIGHT|MIN|MAX [COUNT n]` from argv[2].
fn parse_mpop(a: &Args, sides: (&str, &str)) -> Result<(Vec<Bytes>, bool, u64), Reply> {
    let numkeys = match args::int(a.get(2)) {
        Ok(n) if n > 0 => n as usize,
        _ => return Err(Reply::err("numkeys should be greater than 0")),
    };
    let where_idx = 3 + numkeys;
    if where_idx >= a.len() {
        return Err(error(SYNTAX));
    }
    let first = if is(a.get(where_idx), sides.0) {
        true
    } else if is(a.get(where_idx), sides.1) {
        false
    } else {
        return Err(error(SYNTAX));
    };
    let mut count = None;
    let rest = a.from(where_idx + 1);
    let mut i = 0;
    while i < rest.len() {
        if count.is_none() && is(&rest[i], "count") && i + 1 < rest.len() {
            match args::int(&rest[i + 1]) {
                Ok(c) if c > 0 => count = Some(c as u64),
                _ => return Err(Reply::err("count should be greater than 0")),
            }
            i += 2;
        } else {
            return Err(error(SYNTAX));
        }
    }
    Ok((a.all()[3..where_idx].to_vec(), first, count.unwrap_or(1)))
}

/// BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]
pub fn blmpop(s: &mut Session, a: Args) -> Action {
    let wait = match timeout(a.get(1)) {
        Ok(t) => t,
        Err(r) => return r.into(),
    };
    let (keys, left, count) = match parse_mpop(&a, ("left", "right")) {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    let db = s.db;
    let attempt_keys = keys.clone();
    block(
        s,
        keys,
        wait,
        move |shards| list::mpop_action(shards, db, attempt_keys.clone(), left, count),
        first_key,
        keep,
    )
}

fn bzpop(s: &mut Session, a: Args, max: bool) -> Action {
    let wait = match timeout(a.get(a.len() - 1)) {
        Ok(t) => t,
        Err(r) => return r.into(),
    };
    let keys: Vec<Bytes> = a.all()[1..a.len() - 1].to_vec();
    let db = s.db;
    let attempt_keys = keys.clone();
    block(
        s,
        keys,
        wait,
        move |shards| zset::zmpop_action(shards, db, attempt_keys.clone(), max, 1),
        first_key,
        flatten_scored,
    )
}

/// BZPOPMIN key [key ...] timeout
pub fn bzpopmin(s: &mut Session, a: Args) -> Action {
    bzpop(s, a, false)
}

/// BZPOPMAX key [key ...] timeout
pub fn bzpopmax(s: &mut Session, a: Args) -> Action {
    bzpop(s, a, true)
}

/// BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count]
pub fn bzmpop(s: &mut Session, a: Args) -> Action {
    let wait = match timeout(a.get(1)) {
        Ok(t) => t,
        Err(r) => return r.into(),
    };
    let (keys, min, count) = match parse_mpop(&a, ("min", "max")) {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    let db = s.db;
    let attempt_keys = keys.clone();
    block(
        s,
        keys,
        wait,
        move |shards| zset::zmpop_action(shards, db, attempt_keys.clone(), !min, count),
        first_key,
        keep,
    )
}

//! Blocking pops: BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP BZPOPMIN BZPOPMAX
//! BZMPOP. Each tries its non-blocking twin (LMPOP, LMOVE, ZMPOP) and, if
//! there is nothing to take, waits on the keys (see `shard::blocking`)
//! until woken or timed out. XREADGROUP's BLOCK waits through the same
//! loop ([`block`] with [`Waits::Stream`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{list, zset};
use crate::command::args::{error, is, Args, SYNTAX};
use crate::net::session::{Action, Session};
use crate::net::unblock::Unblocker;
use crate::protocol::Reply;
use crate::server::Server;
use crate::shard::blocking::{serves, Handoff, Stage, Waiter};
use crate::shard::ShardSet;

/// Parses a blocking timeout in seconds with Redis's arithmetic (long
/// double seconds, rounded up to whole milliseconds; 0 = forever).
fn timeout(arg: &[u8]) -> Result<Option<Duration>, Reply> {
    let secs = crate::util::num::LongDouble::parse(arg)
        .ok_or_else(|| Reply::err("timeout is not a float or out of range"))?;
    match secs.timeout_millis() {
        None => Err(Reply::err("timeout is negative")),
        Some(ms) if ms < 0 => Err(Reply::err("timeout is negative")),
        Some(0) => Ok(None),
        Some(ms) => Ok(Some(Duration::from_millis(ms as u64))),
    }
}

/// Runs an action outside a connection (the attempts of a blocked client).
pub(crate) async fn run(server: &Arc<Server>, action: Action) -> Reply {
    let shards = &server.shards;
    match action {
        Action::Reply(r) | Action::Close(Some(r)) => r,
        Action::Write { shard, f } => shards
            .submit(shard, f)
            .await
            .unwrap_or_else(|_| Reply::err("shard unavailable")),
        Action::Read { shard, f } => match shards.shard(shard).current_snapshot().await {
            Ok(view) => f(&view, server).unwrap_or_else(Reply::err),
            Err(e) => Reply::err(e),
        },
        Action::Job(job) | Action::Block(job) => job.await,
        Action::Plan { ids, blind, plan } => shards
            .coordinator()
            .submit(ids, blind, false, plan)
            .await
            .unwrap_or_else(|_| Reply::err("shard unavailable")),
        Action::ReadMany { ids, f } => super::read_now(shards, &ids, f, None).await,
        Action::Script { slow, .. } => Box::pin(run(server, slow())).await,
        Action::Silent | Action::Close(None) => Reply::Nil,
    }
}

/// What a blocked client's tries mean, beyond "nil is nothing yet".
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waits {
    /// A pop whose every touched key is a watched key: a WRONGTYPE met
    /// after the first try means "another type is under the key now" and
    /// the client keeps waiting, as in Redis.
    Pop,
    /// BLMOVE, which also touches its destination: a WRONGTYPE is the
    /// client's answer.
    Move,
    /// A stream group reader: errors are its answer, and a try that finds
    /// nothing wakes the next waiter of its keys, since what this reader's
    /// group had already taken may be new to another group's reader.
    Stream,
}

/// The blocking loop: register on `keys`, try, wait, try again...
/// `attempt` builds one try, told whether it is a retry (the first try
/// may differ, as XREADGROUP's does); a nil or nil-array reply means
/// "nothing yet".
///
/// A pop that runs on one shard registers a handoff, so the shard can
/// serve this client inside the transaction that feeds its key (see
/// `shard::blocking`); every try goes through the waiter's stage, so the
/// client is served once whichever way comes first.
pub(crate) fn block(
    s: &Session,
    keys: Vec<Bytes>,
    touched: &[Bytes],
    wait: Option<Duration>,
    waits: Waits,
    attempt: impl Fn(Arc<ShardSet>, bool) -> Action + Send + Sync + 'static,
    finish: fn(Reply) -> Reply,
) -> Action {
    let shards = s.server.shards.clone();
    if s.in_exec {
        // Inside a transaction a blocking pop never blocks: it is its
        // non-blocking attempt, shaped as the blocking form replies.
        return attempt(shards, false).map(finish);
    }
    let only_watched = waits == Waits::Pop;
    let db = s.db;
    // Only a pop whose keys all live on one shard is a single write there.
    let ids: Vec<usize> = touched.iter().map(|k| shards.shard_of_key(k)).collect();
    let one_shard = ids.windows(2).all(|w| w[0] == w[1]).then(|| ids[0]);
    let mut unblocker = Unblocker::waiting_on(&s.entry, touched);
    let entry = s.entry.clone();
    let server = s.server.clone();
    Action::Block(Box::pin(async move {
        let attempt = Arc::new(attempt);
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let handoff = one_shard.map(|shard| {
            let (again, sh) = (attempt.clone(), shards.clone());
            Handoff {
                shard,
                attempt: Box::new(move || match again(sh.clone(), true) {
                    // A handoff never is the first try: a key of another
                    // type under a watched key only means "not yet".
                    Action::Write { f, .. } if only_watched => Some(Box::new(move |w| {
                        let r = f(w)?;
                        Ok(if wrong_type(&r) { Reply::NilArray } else { r })
                    })),
                    Action::Write { f, .. } => Some(f),
                    _ => None,
                }),
                deliver: parking_lot::Mutex::new(Some(tx)),
            }
        });
        let guard = shards.blocked.register_with(db, &keys, handoff);
        // A deadline beyond what the clock can represent is "forever".
        let deadline = wait.and_then(|d| Instant::now().checked_add(d));
        let mut retry = false;
        loop {
            // Served by a handoff, whose reply is here: no try needed, and
            // the reply goes out before the invalidations its commit sent
            // this client (a round trip to the shard would let them pass).
            if let Ok(reply) = rx.try_recv() {
                return finish(reply);
            }
            let try_once = through_stage(attempt(shards.clone(), retry), guard.waiter.clone());
            let reply = {
                let _trying = Trying::mark(&entry.trying);
                run(&server, try_once).await
            };
            // Once blocked, a key that now holds another type just keeps the
            // client waiting, as in Redis; only the first try reports it.
            let nothing = matches!(reply, Reply::Nil | Reply::NilArray)
                || (wrong_type(&reply) && retry && only_watched);
            if !nothing {
                // Dropping the guard passes any wake-up on to the next
                // waiter of each key.
                return finish(reply);
            }
            let served = *guard.waiter.stage.lock() == Stage::Served;
            if served {
                return finish(handed_over(&mut rx).await);
            }
            if retry && waits == Waits::Stream {
                guard.pass_on();
            }
            retry = true;
            let Some(ended) = unblocker.wait(&guard.waiter.notify, deadline).await else {
                continue;
            };
            let served = {
                let mut stage = guard.waiter.stage.lock();
                if *stage == Stage::Waiting {
                    *stage = Stage::Gone;
                }
                *stage == Stage::Served
            };
            if served {
                // Served just in time: the reply is on its way.
                return finish(handed_over(&mut rx).await);
            }
            return ended.reply(Reply::NilArray);
        }
    }))
}

/// Marks a blocked client's try as on its shard for as long as it lives
/// (see `ClientEntry::trying`); also when the try is dropped half way.
struct Trying<'a>(&'a AtomicBool);

impl<'a> Trying<'a> {
    fn mark(flag: &'a AtomicBool) -> Trying<'a> {
        flag.store(true, Ordering::Relaxed);
        Trying(flag)
    }
}

impl Drop for Trying<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Whether a try met a key of another type (which, under a watched key
/// after the first try, only means "not yet").
fn wrong_type(reply: &Reply) -> bool {
    matches!(reply, Reply::Error(e) if e.starts_with("WRONGTYPE"))
}

/// A try of a single-shard pop that first checks, in the shard, that no
/// handoff has served the client yet, and marks it served if it is.
fn through_stage(action: Action, waiter: Arc<Waiter>) -> Action {
    match action {
        Action::Write { shard, f } => Action::Write {
            shard,
            f: Box::new(move |w| {
                let mut stage = waiter.stage.lock();
                if *stage != Stage::Waiting {
                    return Ok(Reply::NilArray);
                }
                let r = f(w)?;
                if serves(&r) {
                    *stage = Stage::Served;
                }
                Ok(r)
            }),
        },
        other => other,
    }
}

/// The reply a shard's handoff delivers.
async fn handed_over(rx: &mut tokio::sync::oneshot::Receiver<Reply>) -> Reply {
    rx.await.unwrap_or_else(|_| Reply::err("shard unavailable"))
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

/// The attempt of the multi-key pops: LMPOP's or ZMPOP's action.
type MpopAction = fn(Arc<ShardSet>, u8, Vec<Bytes>, bool, u64) -> Action;

/// Blocks on `keys` retrying `pop` (from the `first` end, `count` at a time).
fn block_mpop(
    s: &Session,
    keys: Vec<Bytes>,
    wait: Option<Duration>,
    pop: MpopAction,
    (first, count): (bool, u64),
    finish: fn(Reply) -> Reply,
) -> Action {
    let db = s.db;
    let attempt_keys = keys.clone();
    block(
        s,
        keys.clone(),
        &keys,
        wait,
        Waits::Pop,
        move |shards, _| pop(shards, db, attempt_keys.clone(), first, count),
        finish,
    )
}

/// `key [key ...] timeout`: the keys and the parsed timeout.
fn keys_then_timeout(a: &Args) -> Result<(Vec<Bytes>, Option<Duration>), Reply> {
    let wait = timeout(a.get(a.len() - 1))?;
    Ok((a.all()[1..a.len() - 1].to_vec(), wait))
}

fn bpop(s: &mut Session, a: Args, left: bool) -> Action {
    match keys_then_timeout(&a) {
        Ok((keys, wait)) => block_mpop(s, keys, wait, list::mpop_action, (left, 1), flatten_one),
        Err(r) => r.into(),
    }
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
    block(
        s,
        vec![src.clone()],
        &[src, dst],
        wait,
        Waits::Move,
        move |shards, _| {
            list::lmove_action(shards, db, src2.clone(), dst2.clone(), from_left, to_left)
        },
        keep,
    )
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

/// BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]
pub fn blmpop(s: &mut Session, a: Args) -> Action {
    // Redis checks numkeys, the direction and COUNT before the timeout.
    let (keys, left, count) = match super::parse_mpop(&a, 2, ("left", "right")) {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    let wait = match timeout(a.get(1)) {
        Ok(t) => t,
        Err(r) => return r.into(),
    };
    block_mpop(s, keys, wait, list::mpop_action, (left, count), keep)
}

fn bzpop(s: &mut Session, a: Args, max: bool) -> Action {
    match keys_then_timeout(&a) {
        Ok((keys, wait)) => block_mpop(s, keys, wait, zset::zmpop_action, (max, 1), flatten_scored),
        Err(r) => r.into(),
    }
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
    let (keys, min, count) = match super::parse_mpop(&a, 2, ("min", "max")) {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    let wait = match timeout(a.get(1)) {
        Ok(t) => t,
        Err(r) => return r.into(),
    };
    block_mpop(s, keys, wait, zset::zmpop_action, (!min, count), keep)
}

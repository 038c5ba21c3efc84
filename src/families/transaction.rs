//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH.
//!
//! Between MULTI and EXEC the connection queues commands (see
//! `net::conn`); EXEC builds every queued command's action, in order, and
//! runs them as one atomic unit (`net::atomic`). Commands are parsed at
//! EXEC time, as Redis does, so a syntax error is a run-time error inside
//! the EXEC reply, while unknown commands and wrong argument counts are
//! refused at queueing time and abort the EXEC.
//!
//! WATCH registers keys with their shards (`shard::watch`); EXEC checks the
//! client's CAS flag inside the unit, once the shards it runs on are held,
//! so no write can slip between the check and the commands.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::command::{self, Args, CommandSpec};
use crate::net::session::{Action, Multi, Session, Watching, ANY_SHARD};
use crate::protocol::Reply;
use crate::server::Server;
use crate::shard::watch::Watch;
use crate::storage::keyspace::Key;
use crate::storage::{KvRead, Meta, WriteCtx};

/// Redis's reply to EXEC after a command was refused while queueing.
const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

/// MULTI
pub fn multi(s: &mut Session, _a: Args) -> Action {
    if s.multi.is_some() {
        return Reply::err("MULTI calls can not be nested").into();
    }
    s.multi = Some(Multi::default());
    Reply::Ok.into()
}

/// DISCARD
pub fn discard(s: &mut Session, _a: Args) -> Action {
    if s.multi.take().is_none() {
        return Reply::err("DISCARD without MULTI").into();
    }
    s.watching = Watching::default();
    Reply::Ok.into()
}

/// UNWATCH
pub fn unwatch(s: &mut Session, _a: Args) -> Action {
    s.watching = Watching::default();
    Reply::Ok.into()
}

/// WATCH key [key ...]
///
/// Each key is registered on its shard by a write op there, ordered with
/// the shard's other writes (see `shard::watch`).
pub fn watch(s: &mut Session, a: Args) -> Action {
    if s.multi.is_some() {
        return Reply::err("WATCH inside MULTI is not allowed").into();
    }
    let shards = s.server.shards.clone();
    let db = s.db;
    s.watching.shards.get_or_insert_with(|| shards.clone());
    let mut per_shard: Vec<(usize, Vec<Arc<Watch>>)> = Vec::new();
    for key in a.from(1) {
        let known = s
            .watching
            .keys
            .iter()
            .any(|(_, w)| w.db == db && w.key == key.as_ref());
        if known {
            continue;
        }
        let shard = shards.shard_of_key(key);
        let w = Arc::new(Watch::new(db, key.to_vec(), s.watching.flag()));
        s.watching.keys.push((shard, w.clone()));
        match per_shard.iter_mut().find(|(id, _)| *id == shard) {
            Some((_, list)) => list.push(w),
            None => per_shard.push((shard, vec![w])),
        }
    }
    let register = |shard: usize, list: Vec<Arc<Watch>>| -> crate::shard::WriteFn {
        let registry = shards.shard(shard).watches.clone();
        Box::new(move |w: &mut WriteCtx| {
            for watch in list {
                let key = Key::new(watch.db, &watch.key).meta_key();
                let expire_ms = match w.get_head(&key)? {
                    Some(raw) => Meta::peek_header(&raw)?.1,
                    None => 0,
                };
                registry.add(watch, expire_ms, w.now_ms());
            }
            // The rest of this batch must tell the registry of its writes.
            w.observer = Some(registry);
            Ok(Reply::Ok)
        })
    };
    match per_shard.len() {
        0 => Reply::Ok.into(),
        1 => {
            let (shard, list) = per_shard.pop().unwrap();
            Action::Write {
                shard,
                f: register(shard, list),
            }
        }
        _ => {
            let ops: Vec<_> = per_shard
                .into_iter()
                .map(|(shard, list)| (shard, register(shard, list)))
                .collect();
            // Sent when the job runs, after this client's earlier writes
            // (a job waits for them), so they cannot mark the watch.
            Action::Job(Box::pin(async move {
                let waits: Vec<_> = ops
                    .into_iter()
                    .map(|(shard, f)| shards.submit(shard, f))
                    .collect();
                for w in waits {
                    match w.await {
                        Ok(Reply::Ok) => {}
                        Ok(other) => return other,
                        Err(_) => return Reply::err("shard unavailable"),
                    }
                }
                Reply::Ok
            }))
        }
    }
}

/// EXEC
pub fn exec(s: &mut Session, _a: Args) -> Action {
    let Some(multi) = s.multi.take() else {
        return Reply::err("EXEC without MULTI").into();
    };
    // Taking the watches out of the session unwatches them once the unit
    // has run (or now, if it does not run).
    let watching = std::mem::take(&mut s.watching);
    if multi.failed {
        return Reply::Error(EXECABORT.into()).into();
    }
    if watching.failed(crate::shard::now_ms()) {
        return Reply::NilArray.into();
    }
    s.in_exec = true;
    let server = s.server.clone();
    let mut specs = Vec::with_capacity(multi.queue.len());
    let mut steps = Vec::with_capacity(multi.queue.len());
    for (spec, args) in multi.queue {
        // Dispatch refused unknown subcommands while queueing.
        let counted = command::call_spec(spec, &args).unwrap_or(spec);
        specs.push(counted);
        // The rules may have changed since the command was queued.
        if let Some(r) = crate::acl::check::exec_refusal(s, counted, &args) {
            steps.push(Err(Action::Reply(r)));
            continue;
        }
        let reads = crate::families::tracking::reads(s, spec, &args);
        let action = (spec.handler)(s, args);
        let action = crate::families::tracking::read_in_unit(s, reads, action);
        steps.push(crate::families::tracking::noloop(s, action).into_shard_op(&server));
    }
    s.in_exec = false;
    run_unit(server, specs, steps, watching)
}

/// Counts the calls of a unit's commands and their error replies, as Redis
/// counts commands run by EXEC.
fn account(server: &Server, specs: &[&'static CommandSpec], replies: &[Reply]) {
    for (spec, r) in specs.iter().zip(replies) {
        server.record_call(spec, 0, true);
        if let Reply::Error(text) = r {
            server.record_error(text, Some(spec));
        }
    }
}

/// Runs the `steps` of the commands of `specs` as one atomic unit, first
/// checking `watching` inside it; the action's reply is EXEC's (an array,
/// or a nil array if a watched key changed).
fn run_unit(
    server: Arc<Server>,
    specs: Vec<&'static CommandSpec>,
    mut steps: Vec<Step>,
    watching: Watching,
) -> Action {
    // A write that may run anywhere joins a shard the unit uses (any one,
    // when it uses none).
    let home = steps
        .iter()
        .filter_map(|s| s.as_ref().ok().map(|(shard, _)| *shard))
        .find(|&s| s != ANY_SHARD)
        .unwrap_or(0);
    for (shard, _) in steps.iter_mut().flatten() {
        if *shard == ANY_SHARD {
            *shard = home;
        }
    }
    let mut shards = Shards::default();
    let mut one_shard_ops = true;
    for step in &steps {
        match step {
            Ok((shard, _)) => shards.add(*shard),
            Err(Action::Reply(_)) => {}
            Err(Action::ReadMany { ids, .. } | Action::Plan { ids, .. }) => {
                ids.iter().for_each(|&id| shards.add(id));
                one_shard_ops = false;
            }
            Err(Action::Script { .. }) => {
                // Its fallback holds every shard.
                (0..server.shards.len()).for_each(|id| shards.add(id));
                one_shard_ops = false;
            }
            Err(_) => one_shard_ops = false,
        }
    }
    if shards.many.is_none() && one_shard_ops {
        let Some(shard) = shards.first else {
            // Nothing touches a key: the replies are all there already.
            let replies: Vec<Reply> = steps.into_iter().map(ready).collect();
            account(&server, &specs, &replies);
            return Reply::Array(replies).into();
        };
        return Action::Write {
            shard,
            f: Box::new(move |w| {
                if watching.failed(w.now_ms()) {
                    return Ok(Reply::NilArray);
                }
                let mut replies = Vec::with_capacity(steps.len());
                for step in steps {
                    replies.push(match step {
                        // Each command counts its own changes, as alone.
                        Ok((_, f)) => w.counting(f)?,
                        ready_reply => ready(ready_reply),
                    });
                }
                drop(watching);
                account(&server, &specs, &replies);
                Ok(Reply::Array(replies))
            }),
        };
    }
    let ids = shards.ids();
    if one_shard_ops && watching.keys.is_empty() {
        return spread_unit(server, ids, specs, steps);
    }
    let actions: Vec<Action> = steps
        .into_iter()
        .map(|step| step.map_or_else(|a| a, |(shard, f)| Action::Write { shard, f }))
        .collect();
    if ids.is_empty() {
        // Commands that need no shard but are not immediate (a job).
        return Action::Job(Box::pin(async move {
            let mut replies = Vec::with_capacity(actions.len());
            for a in actions {
                replies.push(match a {
                    Action::Reply(r) | Action::Close(Some(r)) => r,
                    Action::Job(j) | Action::Block(j) => j.await,
                    Action::Silent | Action::Close(None) => Reply::Nil,
                    _ => unreachable!("actions with shards are planned"),
                });
            }
            drop(watching);
            account(&server, &specs, &replies);
            Reply::Array(replies)
        }));
    }
    crate::net::atomic::blocking_plan(ids, "transaction", move |at| {
        if watching.failed(crate::shard::now_ms()) {
            return Ok(Err(Reply::NilArray));
        }
        let mut replies = Vec::with_capacity(actions.len());
        for a in actions {
            replies.push(at.run(a, &server)?);
        }
        drop(watching);
        account(&server, &specs, &replies);
        Ok(Ok(Reply::Array(replies)))
    })
}

/// A queued command's action: an op on one shard, or anything else.
type Step = Result<(usize, crate::shard::WriteFn), Action>;

/// The shards a unit uses, with no allocation while there is one (the
/// transaction of keys sharing a hash tag, the common case).
#[derive(Default)]
struct Shards {
    first: Option<usize>,
    /// Every shard, once a second one came.
    many: Option<BTreeSet<usize>>,
}

impl Shards {
    fn add(&mut self, shard: usize) {
        match (&mut self.many, self.first) {
            (Some(many), _) => {
                many.insert(shard);
            }
            (None, None) => self.first = Some(shard),
            (None, Some(first)) if first != shard => {
                self.many = Some(BTreeSet::from([first, shard]));
            }
            (None, Some(_)) => {}
        }
    }

    /// The shards in order.
    fn ids(self) -> Vec<usize> {
        match self.many {
            Some(many) => many.into_iter().collect(),
            None => self.first.into_iter().collect(),
        }
    }
}

/// The reply of a step that is an immediate reply.
fn ready(step: Step) -> Reply {
    match step {
        Err(Action::Reply(r)) => r,
        _ => unreachable!("only immediate replies are ready"),
    }
}

/// A unit of one-shard commands over several shards, with no watched key
/// to check: a blind plan that sends each shard its commands at once (see
/// `coordinator::spread`), so the coordinator can take the next command
/// while these run, and many such transactions share one round.
fn spread_unit(
    server: Arc<Server>,
    ids: Vec<usize>,
    specs: Vec<&'static CommandSpec>,
    steps: Vec<Step>,
) -> Action {
    let mut replies: Vec<Option<Reply>> = Vec::with_capacity(steps.len());
    let mut writes = Vec::new();
    for step in steps {
        match step {
            Ok(op) => {
                replies.push(None);
                writes.push(op);
            }
            ready_reply => replies.push(Some(ready(ready_reply))),
        }
    }
    let inner = crate::shard::coordinator::spread(writes);
    Action::Plan {
        ids,
        blind: true,
        plan: Box::new(move |locked| {
            let ran = inner(locked);
            Box::pin(async move {
                let Ok(Reply::Array(ran)) = ran.await? else {
                    unreachable!("spread replies with an array");
                };
                let mut ran = ran.into_iter();
                let replies: Vec<Reply> = replies
                    .into_iter()
                    .map(|r| r.unwrap_or_else(|| ran.next().unwrap_or(Reply::Nil)))
                    .collect();
                account(&server, &specs, &replies);
                Ok(Ok(Reply::Array(replies)))
            })
        }),
    }
}

//! One connection: read, split into commands, dispatch, reply in order with
//! one write per batch of pipelined requests.
//!
//! Ordering: a client's writes to one shard are queued on that shard
//! without waiting, so a pipeline shares group commits. Before anything runs
//! on a different shard, the client waits for its writes in flight, so
//! another client can never see a later write of this client before an
//! earlier one. A read on the shard that has this client's writes in flight
//! is queued on the shard (behind those writes) instead of a snapshot.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::session::{Action, ReplyMode, Session};
use crate::command::flag;
use crate::command::{self, Args};
use crate::families::slowlog::run_time_here;
use crate::protocol::{Reply, RequestParser};
use crate::pubsub::Push;
use crate::server::{ClientEntry, Server};
use crate::shard::actor::{Delivery, Ran, ReplySink};
use crate::shard::pause::PauseKind;
use crate::shard::WriteFn;

/// A reply slot in request order.
enum Slot {
    Ready(Reply),
    /// A command queued on a shard; with a [`Retry`] when it was queued
    /// behind a script that may fall back (see [`Behind`]).
    Waiting(tokio::sync::oneshot::Receiver<Reply>, Option<Retry>),
    /// The replies of a squashed group of writes: an array with one reply per
    /// write, each going out as its own `ReplyTo` says, with the replies
    /// that were ready among them (see [`Ready`]).
    Group(
        tokio::sync::oneshot::Receiver<Reply>,
        Vec<ReplyTo>,
        Vec<Ready>,
    ),
    /// A script run in one shard, and what runs instead if it fell back;
    /// with a [`Retry`] when it was queued behind another script.
    Script(
        tokio::sync::oneshot::Receiver<Reply>,
        Arc<AtomicBool>,
        crate::net::session::SlowScript,
        Option<Retry>,
    ),
    /// A read of a shard's snapshot run on a read thread (see
    /// `shard::disk_reads`): its reply and the keys it found expired.
    Read(tokio::sync::oneshot::Receiver<ReadDone>, usize),
    /// The first of `n` writes whose replies come together, in order (see
    /// `actor::ReplySink`); a [`Slot::Rest`] stands for each of the others.
    Batch(tokio::sync::oneshot::Receiver<Vec<Reply>>, usize),
    /// A later write of the [`Slot::Batch`] before it.
    Rest,
}

/// What a read of a snapshot gives: its reply, and the keys it found
/// expired, to be deleted before the reply goes out.
type ReadDone = (Reply, Vec<(u8, Vec<u8>)>);

/// Where a command queued behind a script hands its work back, and the
/// shard it runs on.
type Retry = (usize, Arc<parking_lot::Mutex<Option<WriteFn>>>);

/// This client's scripts queued on a shard's actor (the shard of its
/// writes in flight, `Inflight::Shard`), which may still fall back: give
/// up there (a command needed another shard) and run again as a plan
/// holding every shard, once their slot is reached in `drain`.
/// Whatever the client queued on that shard after such a script must not
/// run before the script's second run, yet it was sent without waiting (a
/// pipeline of scripts shares the shard's batches). So each command
/// queued behind one checks `fell_back` when its turn comes on the shard
/// (the shard runs them in the order they were queued) and, if one ahead
/// of it fell back, hands its work back untouched, to be queued again in
/// request order once the script has replied.
struct Behind {
    /// Set by the first script of these that falls back.
    fell_back: Arc<AtomicBool>,
}

impl Behind {
    /// `f`, for `shard`, guarded as the type describes; `own` is the
    /// fall-back flag when `f` is a script itself, whose falling back
    /// holds back the commands after it.
    fn guard(&self, shard: usize, f: WriteFn, own: Option<Arc<AtomicBool>>) -> (WriteFn, Retry) {
        let back: Arc<parking_lot::Mutex<Option<WriteFn>>> = Default::default();
        let (ahead, handed) = (self.fell_back.clone(), back.clone());
        let guarded: WriteFn = Box::new(move |w| {
            if ahead.load(Ordering::Acquire) {
                *handed.lock() = Some(f);
                return Ok(Reply::Nil);
            }
            let reply = f(w);
            if own.is_some_and(|own| own.load(Ordering::Acquire)) {
                ahead.store(true, Ordering::Release);
            }
            reply
        });
        (guarded, (shard, back))
    }
}

/// A pipeline's scripts for one shard, collected but not sent yet: they
/// run together, as one batch, on the connection's thread when the shard
/// is free, or else on its actor (see [`Outbox::flush_scripts`]). Each runs
/// guarded by `behind`, as scripts queued on the actor are, and its reply
/// goes to the slot already queued for it.
struct Scripts {
    shard: usize,
    behind: Behind,
    runs: Vec<(WriteFn, tokio::sync::oneshot::Sender<Reply>)>,
}

/// How a reply goes out: its protocol, whether CLIENT REPLY silences it,
/// and the command whose failed calls it counts toward if it is an error
/// (`None` for a command refused before it ran).
#[derive(Clone, Copy)]
struct ReplyTo {
    resp3: bool,
    suppressed: bool,
    cmd: Option<&'static command::CommandSpec>,
}

/// Encodes a reply unless it is silenced; an error is counted either way,
/// as Redis counts it (total_error_replies, errorstats, failed_calls).
fn emit(out: &mut BytesMut, server: &Server, r: &Reply, to: ReplyTo) {
    if let Reply::Error(text) = r {
        server.record_error(text, to.cmd);
    }
    if !to.suppressed {
        r.encode(out, to.resp3);
    } else {
        // Pub/Sub confirmations are pushes: CLIENT REPLY OFF does not
        // silence them, as in Redis.
        r.encode_pushes(out, to.resp3);
    }
}

/// Whether the pushes queued by the time a reply is made go out before it
/// (messages published meanwhile, by the command itself or others, as
/// Redis would have queued them first). Not before EXEC's reply: Redis
/// 7.0 wrote them inside EXEC's array, breaking its length; cairn sends
/// them after it, as Redis 7.2 does. Not before a (P|S)SUBSCRIBE's
/// confirmations: a message on a name it just subscribed to may have been
/// queued since, and must follow them, as it would in Redis; messages on
/// older subscriptions are concurrent with the command and may follow too.
fn pushes_first(to: ReplyTo) -> bool {
    to.cmd
        .is_none_or(|c| !matches!(c.name, "exec" | "subscribe" | "psubscribe" | "ssubscribe"))
}

/// Below this many bytes, a write of pushes alone waits for the
/// publishers still feeding the client (see `Mailbox`).
const PUSH_WRITE_BYTES: usize = 16 * 1024;

/// Most writes squashed into one coordinated group.
const MAX_SQUASH: usize = 1024;

/// A reply that was ready while writes were being squashed, and how many
/// of those writes it follows.
type Ready = (usize, Reply, ReplyTo);

/// Hands `each` the squashed writes' `items` (`Ok`) with the `ready`
/// replies (`Err`) placed between them, in request order.
fn in_order<T>(
    items: impl Iterator<Item = (T, ReplyTo)>,
    ready: Vec<Ready>,
    mut each: impl FnMut(Result<T, Reply>, ReplyTo),
) {
    let mut ready = ready.into_iter().peekable();
    for (i, (item, to)) in items.enumerate() {
        while let Some((_, r, to)) = ready.next_if(|(at, ..)| *at == i) {
            each(Err(r), to);
        }
        each(Ok(item), to);
    }
    for (_, r, to) in ready {
        each(Err(r), to);
    }
}

/// The slots of `n` writes (at least one) whose replies come together
/// from `rx`, in order.
fn batch_slots(rx: tokio::sync::oneshot::Receiver<Vec<Reply>>, n: usize) -> Vec<Slot> {
    std::iter::once(Slot::Batch(rx, n))
        .chain((1..n).map(|_| Slot::Rest))
        .collect()
}

/// Where a client's unacknowledged writes are: they may only be followed
/// without waiting by writes that will be applied after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inflight {
    /// Nothing in flight.
    None,
    /// Writes queued on one shard.
    Shard(usize),
    /// Commands queued with the coordinator (which runs them in order).
    Coordinator,
}

/// Replies not yet written, in request order, and writes not yet sent.
///
/// # Squashing
/// Consecutive writes of one pipelined batch are collected before they are
/// sent. If they all go to one shard they run at once if it is free, and
/// are otherwise queued on it (and share its group commit). If they span
/// shards, they go to the coordinator as one group that commits on all its
/// shards at once: the client's writes then become visible together, so no
/// one can see a later one before an earlier one, and the client need not
/// wait for each shard in turn. A group also locks the shard of this client's earlier writes still
/// in flight, so those commit first.
///
/// A reply that is ready at once (MULTI's `+OK`, `+QUEUED`, an error) does
/// not end the group: it waits in it, between the replies of the writes it
/// came between. A pipeline of transactions (MULTI, queued commands, EXEC)
/// is then one group, as a pipeline of plain writes is, rather than one
/// single-shard write per EXEC, between which any that spans shards had to
/// lock the shard of the one before.
struct Outbox {
    slots: VecDeque<(Slot, ReplyTo)>,
    /// Where this client has writes in flight.
    inflight: Inflight,
    /// Replies a [`Slot::Batch`] brought for the [`Slot::Rest`]s after it.
    batch_rest: VecDeque<Reply>,
    /// Deferred commits of this client's writes run here (`always`), by
    /// shard, which must be durable before their replies can go out.
    durable: Vec<(usize, u64)>,
    /// This client's scripts in flight on a shard that may fall back.
    behind: Option<Behind>,
    out: BytesMut,
    /// Writes collected but not sent yet, with how their replies go out.
    squash: Vec<(usize, WriteFn, ReplyTo)>,
    /// Scripts collected but not sent yet (never together with `squash`).
    scripts: Option<Scripts>,
    /// A shard where this client queued scripts without kicking it
    /// (`ShardSet::kick`): `drain` does, before it waits for a reply, so
    /// a pipeline's scripts run as one batch rather than one each.
    unkicked: Option<usize>,
    /// Reads of this client running on the read threads (`Slot::Read`):
    /// anything but another read waits for them first, so that the keys
    /// they found expired are deleted before any later write of the
    /// client, as when reads run here.
    moved_reads: bool,
    /// Replies ready among the collected writes.
    squash_ready: Vec<Ready>,
    server: Arc<Server>,
    /// Whether pushes are sent as RESP3 (`>`) or RESP2 arrays.
    resp3: bool,
    /// Bytes of pushes in `out`: once written, the client's mailbox no
    /// longer counts them against its output buffer limit.
    push_bytes: usize,
    /// This client.
    entry: Arc<ClientEntry>,
    /// Invalidations waiting for the reply being written.
    held: Vec<Push>,
    /// Pushes taken from the mailbox (empty between takes).
    taken: std::collections::VecDeque<Push>,
    /// Messages taken from the mailbox (empty between takes): this buffer
    /// and the mailbox's trade places at each take.
    messages: BytesMut,
    /// The command loop's: the last command looked up by name.
    commands: command::LastLookup,
    /// The snapshots this batch's reads took, reused by its later reads.
    views: crate::shard::BatchViews,
    /// Whether requests the command loop parsed ahead wait behind the
    /// running one (they are no longer in the read buffer).
    parsed_ahead: bool,
    /// The command loop's: when the last command of the current batch
    /// ended, which is when the next one starts (one clock read a command,
    /// not two).
    ended: Option<Instant>,
    /// Time spent waiting for the replies of earlier commands (in
    /// `drain`) or running their collected writes and scripts on this
    /// thread, all told: a command that does either on its way (a read
    /// behind the pipeline's writes, a write after collected scripts)
    /// does not count that time as its own (see `families::slowlog`).
    others: std::time::Duration,
}

impl Outbox {
    /// Sends the collected writes (see the type's doc), or the collected
    /// scripts.
    fn flush_squash(&mut self) {
        self.flush_scripts();
        if self.squash.is_empty() {
            return;
        }
        let group = std::mem::take(&mut self.squash);
        let ready = std::mem::take(&mut self.squash_ready);
        let first = group[0].0;
        let one_shard = group.iter().all(|(s, ..)| *s == first);
        if one_shard && [Inflight::None, Inflight::Shard(first)].contains(&self.inflight) {
            let (writes, tos): (Vec<_>, Vec<_>) =
                group.into_iter().map(|(_, f, to)| (f, to)).unzip();
            // Run here if the shard is free and nothing of this client's is
            // queued on it for the writes to overtake; else queue them
            // behind those.
            let ran = match self.inflight {
                Inflight::None => {
                    let began = (Instant::now(), run_time_here());
                    let ran = self.server.shards.run_here(first, writes);
                    self.others += besides_runs(began);
                    ran
                }
                _ => Err(writes),
            };
            let slots: Vec<Slot> = match ran {
                Ok(Ran::Done(replies)) => replies.into_iter().map(Slot::Ready).collect(),
                Ok(ran) => {
                    let (sinks, rx) = ReplySink::group(tos.len());
                    self.send_ran(first, ran, sinks);
                    batch_slots(rx, tos.len())
                }
                Err(writes) => {
                    self.inflight = Inflight::Shard(first);
                    let slots = match self.behind {
                        Some(_) => writes.into_iter().map(|f| self.enqueue(first, f)).collect(),
                        None => {
                            let n = writes.len();
                            batch_slots(self.server.shards.enqueue_group(first, writes), n)
                        }
                    };
                    self.server.shards.kick(first);
                    slots
                }
            };
            in_order(slots.into_iter().zip(tos), ready, |slot, to| {
                let slot = slot.unwrap_or_else(Slot::Ready);
                self.slots.push_back((slot, to));
            });
            return;
        }
        debug_assert!(self.behind.is_none(), "a group spans a script's shard");
        let mut ids: Vec<usize> = group.iter().map(|(s, ..)| *s).collect();
        if let Inflight::Shard(earlier) = self.inflight {
            ids.push(earlier);
        }
        let flags: Vec<ReplyTo> = group.iter().map(|(.., to)| *to).collect();
        let writes = group.into_iter().map(|(shard, f, _)| (shard, f)).collect();
        let plan = crate::shard::coordinator::spread(writes);
        let group_to = ReplyTo {
            resp3: false,
            suppressed: true,
            cmd: None,
        };
        let rx = match self.run_or_submit(ids, true, true, plan) {
            Ok(reply) => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                let _ = tx.send(reply);
                rx
            }
            Err(rx) => rx,
        };
        self.slots
            .push_back((Slot::Group(rx, flags, ready), group_to));
    }

    /// Sends the collected scripts, all in one batch: run on this thread if
    /// their shard is free, as writes are (`ShardSet::run_here`), otherwise
    /// queued on its actor. If one of them falls back, the ones after it
    /// hand their work back, and so does what this client sends the shard
    /// next, until `drain` has run it again: the client's writes are then
    /// in flight on the shard, as if the batch had gone to the actor.
    fn flush_scripts(&mut self) {
        let Some(Scripts {
            shard,
            behind,
            runs,
        }) = self.scripts.take()
        else {
            return;
        };
        debug_assert_eq!(
            self.inflight,
            Inflight::None,
            "scripts collected behind writes"
        );
        let shards = &self.server.shards;
        let (fs, txs): (Vec<_>, Vec<_>) = runs.into_iter().unzip();
        let began = (Instant::now(), run_time_here());
        let ran = shards.run_here(shard, fs);
        self.others += besides_runs(began);
        match ran {
            Ok(ran) => {
                self.send_ran(shard, ran, txs.into_iter().map(ReplySink::One).collect());
                if !behind.fell_back.load(Ordering::Acquire) {
                    return;
                }
            }
            Err(fs) => {
                for (f, tx) in fs.into_iter().zip(txs) {
                    shards.enqueue_with(shard, f, tx);
                }
                shards.kick(shard);
            }
        }
        self.inflight = Inflight::Shard(shard);
        self.behind = Some(behind);
    }

    /// Sends the replies of writes run on this thread (`ShardSet::run_here`)
    /// to `sinks`: at once, or, where their commit was deferred (`always`),
    /// once it is durable, which [`Outbox::drain`] sees to. Until then the
    /// client's writes count as in flight on the shard: what it reads
    /// there next runs behind them.
    fn send_ran(&mut self, shard: usize, ran: Ran, sinks: Vec<ReplySink>) {
        match ran {
            Ran::Done(replies) => Delivery::default().give_all(replies.into_iter().zip(sinks)),
            Ran::Pending(seq, replies) => {
                let send = crate::shard::actor::replies_when_durable(
                    replies.into_iter().zip(sinks).collect(),
                );
                self.server.shards.shard(shard).after_durable(seq, send);
                self.durable.push((shard, seq));
                self.inflight = Inflight::Shard(shard);
            }
        }
    }

    /// Runs a multi-shard plan on this thread if it is blind, its shards
    /// are free and nothing of this client's is in flight, as single-shard
    /// writes run (see `ShardSet::run_plan_here`), returning its reply;
    /// otherwise queues it with the coordinator, behind this client's
    /// earlier commands there, and returns where its reply will come.
    fn run_or_submit(
        &mut self,
        ids: Vec<usize>,
        blind: bool,
        independent: bool,
        mut plan: crate::shard::coordinator::Plan,
    ) -> Result<Reply, tokio::sync::oneshot::Receiver<Reply>> {
        let shards = &self.server.shards;
        if blind && self.inflight == Inflight::None {
            match shards.run_plan_here(&ids, plan, independent) {
                Ok(reply) => return Ok(reply),
                Err(back) => plan = back,
            }
        }
        self.inflight = Inflight::Coordinator;
        Err(shards.coordinator().submit(ids, blind, independent, plan))
    }

    /// Queues `f` on shard `id`, where this client's writes are in
    /// flight, guarded if scripts of the client are (see [`Behind`]); the
    /// caller kicks the shard (`ShardSet::kick`) once it has queued all.
    fn enqueue(&self, id: usize, f: WriteFn) -> Slot {
        let shards = &self.server.shards;
        match &self.behind {
            Some(behind) => {
                debug_assert_eq!(
                    self.inflight,
                    Inflight::Shard(id),
                    "beside a script's shard"
                );
                let (f, retry) = behind.guard(id, f, None);
                Slot::Waiting(shards.enqueue(id, f), Some(retry))
            }
            None => Slot::Waiting(shards.enqueue(id, f), None),
        }
    }

    /// A read's reply `r` from shard `shard`, ready; or, if the read
    /// found keys expired, where it comes once they are deleted, as in
    /// Redis: whoever sees the reply sees them deleted.
    fn after_read(
        &mut self,
        shard: usize,
        r: Reply,
        expired: Vec<(u8, Vec<u8>)>,
    ) -> Result<Reply, tokio::sync::oneshot::Receiver<Reply>> {
        let shards = &self.server.shards;
        if expired.is_empty() || shards.shard(shard).pause.writes_paused() {
            return Ok(r);
        }
        self.inflight = Inflight::Shard(shard);
        Err(shards.submit(shard, crate::shard::expire_found(expired, r)))
    }

    /// Queues a reply slot after any collected writes.
    fn push_slot(&mut self, slot: Slot, to: ReplyTo) {
        self.flush_squash();
        self.slots.push_back((slot, to));
    }

    fn push_ready(&mut self, r: Reply, to: ReplyTo) {
        if !self.squash.is_empty() {
            self.squash_ready.push((self.squash.len(), r, to));
            return;
        }
        if self.slots.is_empty() {
            // Messages that arrived before this reply was made go first,
            // as Redis would have queued them first; invalidations wait
            // for it (see `Push::after_reply`).
            if pushes_first(to) {
                self.take_pushes(true);
            }
            emit(&mut self.out, &self.server, &r, to);
            self.release_held();
        } else {
            self.slots.push_back((Slot::Ready(r), to));
        }
    }

    /// Waits for every reply in flight and encodes them.
    async fn drain(&mut self) {
        // No snapshot is kept through a wait: DEBUG RELOAD waits for every
        // snapshot of the old files to go before the shards take the
        // writes waited for.
        self.views.clear();
        self.flush_squash();
        if let Some(id) = self.unkicked.take() {
            self.server.shards.kick(id);
        }
        // Timed only when there is something to wait for: most drains
        // (the end of a batch of reads) have nothing in flight.
        let began = (!self.slots.is_empty()).then(|| (Instant::now(), run_time_here()));
        if !self.durable.is_empty() {
            // This thread's other clients run their writes first, so that
            // one fsync covers theirs with these (see `storage::group`).
            tokio::task::yield_now().await;
            for (shard, seq) in std::mem::take(&mut self.durable) {
                self.server.shards.durable(shard, seq).await;
            }
        }
        self.wait_slots().await;
        if let Some(began) = began {
            self.others += besides_runs(began);
        }
    }

    /// `drain`'s wait: each reply in flight, in order, encoded.
    async fn wait_slots(&mut self) {
        while let Some((slot, to)) = self.slots.pop_front() {
            let reply = match slot {
                Slot::Ready(r) => r,
                Slot::Waiting(rx, retry) => received(&self.server, rx, retry).await,
                Slot::Script(rx, fell_back, slow, retry) => {
                    let r = received(&self.server, rx, retry).await;
                    if fell_back.load(Ordering::Acquire) {
                        crate::families::blocking::run(&self.server, slow()).await
                    } else {
                        r
                    }
                }
                Slot::Read(rx, shard) => {
                    let (r, expired) = rx
                        .await
                        .unwrap_or_else(|_| (crate::shard::disk_reads::failed(), Vec::new()));
                    match self.after_read(shard, r, expired) {
                        Ok(r) => r,
                        Err(rx) => received(&self.server, rx, None).await,
                    }
                }
                Slot::Batch(rx, n) => {
                    let mut got = rx.await.unwrap_or_default();
                    if got.len() != n {
                        // The shard shut down with the writes queued.
                        got = vec![unavailable(); n];
                    }
                    let mut got = got.into_iter();
                    let first = got.next().expect("a batch of one write at least");
                    self.batch_rest.extend(got);
                    first
                }
                Slot::Rest => self
                    .batch_rest
                    .pop_front()
                    .expect("a batch's reply for each of its writes"),
                Slot::Group(rx, flags, ready) => {
                    self.take_pushes(true);
                    let got = received(&self.server, rx, None).await;
                    let n = flags.len();
                    let replies: Vec<Reply> = match got {
                        Reply::Array(items) if items.len() == n => items,
                        // The whole group failed: every write gets the error.
                        err => vec![err; n],
                    };
                    in_order(replies.into_iter().zip(flags), ready, |r, to| {
                        let r = r.unwrap_or_else(|ready| ready);
                        emit(&mut self.out, &self.server, &r, to);
                    });
                    continue;
                }
            };
            // Messages published before this reply was made (by the
            // command itself: a script publishing to this client) go
            // first, as in Redis 7.0 (see `pushes_first`).
            if pushes_first(to) {
                self.take_pushes(true);
            }
            emit(&mut self.out, &self.server, &reply, to);
            self.release_held();
        }
        self.inflight = Inflight::None;
        self.behind = None;
        self.moved_reads = false;
        // A reply may follow at once (the command that waited for this
        // drain): invalidations stay behind it.
        self.take_pushes(true);
    }

    /// Writes the invalidations held back for a reply.
    fn release_held(&mut self) {
        for push in std::mem::take(&mut self.held) {
            self.add_push(push, false);
        }
    }

    /// Moves the pushes already queued for this client into `out`; with
    /// `hold`, invalidations are kept back for after the reply about to be
    /// written.
    fn take_pushes(&mut self, hold: bool) {
        // Nothing pending, nothing queued: no lock. (A push being queued
        // now has no order with this reply; its client will be woken.)
        if self.entry.mailbox.pending.load(Ordering::Relaxed) == 0 {
            return;
        }
        // All of them at once, into a queue kept for the purpose.
        let mut taken = std::mem::take(&mut self.taken);
        let mut messages = std::mem::take(&mut self.messages);
        self.entry.mailbox.take_all(&mut taken, &mut messages);
        for push in taken.drain(..) {
            self.add_push(push, hold);
        }
        self.taken = taken;
        if messages.is_empty() {
            self.messages = messages;
            return;
        }
        self.push_bytes += messages.len();
        if self.out.is_empty() {
            // Nothing to append them to: they become the output.
            std::mem::swap(&mut self.out, &mut messages);
        } else {
            self.out.extend_from_slice(&messages);
        }
        messages.clear();
        // A subscriber that fell behind does not keep its peak forever
        // (this buffer goes back and forth with the mailbox's, so each
        // subscriber keeps two).
        if messages.capacity() > 64 * 1024 {
            messages = BytesMut::new();
        }
        self.messages = messages;
    }

    fn add_push(&mut self, push: Push, hold: bool) {
        if hold && push.after_reply() {
            self.held.push(push);
            return;
        }
        let subscribed = self.entry.mailbox.subscribed();
        push.encode(&mut self.out, self.resp3, subscribed);
        self.push_bytes += push.size();
    }

    /// After `out` went out on the socket: its pushes no longer count
    /// toward the client's output buffer.
    fn written(&mut self) {
        self.entry
            .mailbox
            .written(std::mem::take(&mut self.push_bytes));
    }
}

/// This connection's place in `Server::busy_clients`, given up when it
/// waits for requests and when it ends.
struct Busy<'a> {
    count: &'a std::sync::atomic::AtomicUsize,
    on: bool,
}

impl Busy<'_> {
    fn set(&mut self, on: bool) {
        if on != self.on {
            self.on = on;
            if on {
                self.count.fetch_add(1, Ordering::Relaxed);
            } else {
                self.count.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.set(false);
    }
}

/// At most this many busy connections (`Server::busy_clients`), a
/// pipeline's scripts run on the connection's thread in batches of their
/// own; with more, they are queued on the shard, whose next batch gathers
/// many clients' scripts under one commit. EVALSHA -c 50 -P 16 took 15%
/// fewer requests a second when every client ran its own (batches of two
/// or so, at each change of shard), and 1.5-1.9x more at -c 4.
const FEW_BUSY: usize = 4;

/// The reply of a write whose shard shut down before it answered.
fn unavailable() -> Reply {
    Reply::err("shard unavailable")
}

/// A shard's reply (the error a client gets if the shard went away); for
/// a command queued behind a script (`retry`, see [`Behind`]) that handed
/// its work back, that work's reply once queued again.
async fn received(
    server: &Server,
    rx: tokio::sync::oneshot::Receiver<Reply>,
    retry: Option<Retry>,
) -> Reply {
    let gone = |_| unavailable();
    let reply = rx.await.unwrap_or_else(gone);
    match retry.and_then(|(shard, back)| Some((shard, back.lock().take()?))) {
        Some((shard, f)) => server.shards.submit(shard, f).await.unwrap_or_else(gone),
        None => reply,
    }
}

/// Serves one client until it quits, errs or the server stops.
pub async fn run(server: Arc<Server>, mut stream: TcpStream, peer: SocketAddr) {
    let id = server.next_client_id.fetch_add(1, Ordering::Relaxed);
    let laddr = stream
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let entry = Arc::new(ClientEntry::new(id, peer.to_string(), laddr));
    server.stats.connections.fetch_add(1, Ordering::Relaxed);
    if server.clients.len() >= server.runtime.read().maxclients() {
        server.stats.rejected.fetch_add(1, Ordering::Relaxed);
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    }
    server.clients.insert(id, entry.clone());
    let mut session = Session::new(server.clone(), entry.clone());
    let buf = BytesMut::with_capacity(16 * 1024);
    crate::families::slowlog::counting_runs(serve(&mut session, &mut stream, buf)).await;
    unregister(&server, &entry);
}

/// What a client leaves behind when its connection ends.
fn unregister(server: &Server, entry: &ClientEntry) {
    entry.mailbox.close();
    server.pubsub.tracking.disable(entry.id);
    server.pubsub.monitors.remove(entry.id);
    server.clients.remove(&entry.id);
}

/// A registered client for the connection to this replica's primary
/// (CLIENT LIST's `M`), and its session: authenticated, never refused as
/// a read-only replica's clients are, its replies dropped.
pub fn primary_session(server: &Arc<Server>, stream: &TcpStream) -> Session {
    let id = server.next_client_id.fetch_add(1, Ordering::Relaxed);
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let laddr = stream
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let entry = Arc::new(ClientEntry::new(id, peer, laddr));
    entry.info.lock().primary = true;
    let mut session = Session::new(server.clone(), entry);
    session.authenticated = true;
    session.from_primary = true;
    session
}

/// Applies the primary's stream of commands, as this replica's primary
/// sends them on `stream`, starting with what `buf` holds already; returns
/// when the link breaks or is closed. Each command moves the replication
/// offset on by its length once it has been handed to its shard.
pub async fn serve_primary(mut session: Session, mut stream: TcpStream, buf: BytesMut) {
    /// Unregisters the client however the link ends (REPLICAOF drops
    /// this future where it waits).
    struct Registered(Arc<Server>, Arc<ClientEntry>);
    impl Drop for Registered {
        fn drop(&mut self) {
            unregister(&self.0, &self.1);
        }
    }
    let server = session.server.clone();
    server
        .clients
        .insert(session.entry.id, session.entry.clone());
    let _registered = Registered(server, session.entry.clone());
    crate::families::slowlog::counting_runs(serve(&mut session, &mut stream, buf)).await;
}

async fn serve(session: &mut Session, stream: &mut TcpStream, mut buf: BytesMut) {
    let server = session.server.clone();
    let mut parser = RequestParser::new(server.runtime.read().proto_max_bulk_len());
    let mut outbox = Outbox {
        slots: VecDeque::new(),
        inflight: Inflight::None,
        batch_rest: VecDeque::new(),
        durable: Vec::new(),
        moved_reads: false,
        behind: None,
        out: BytesMut::with_capacity(16 * 1024),
        squash: Vec::new(),
        scripts: None,
        unkicked: None,
        squash_ready: Vec::new(),
        server: server.clone(),
        resp3: false,
        push_bytes: 0,
        entry: session.entry.clone(),
        held: Vec::new(),
        taken: Default::default(),
        messages: BytesMut::new(),
        commands: Default::default(),
        views: Default::default(),
        parsed_ahead: false,
        ended: None,
        others: std::time::Duration::ZERO,
    };
    // Woken for pushes alone: their write may wait for the publishers
    // still feeding this client (see `Mailbox`).
    let mut pushes_only = false;
    let mut busy = Busy {
        count: &server.busy_clients,
        on: false,
    };
    // Requests parsed ahead of the one running, each with the unparsed
    // bytes before it (CLIENT LIST's qbuf), and a protocol error met after
    // them.
    let mut ahead: VecDeque<(Args, usize)> = VecDeque::new();
    let mut malformed = None;
    loop {
        busy.set(true);
        let mut close = false;
        loop {
            if ahead.is_empty() && malformed.is_none() {
                parse_ahead(&mut parser, &mut buf, &mut ahead, &mut malformed);
                warm_ahead(&server, session.db, &ahead, &mut outbox.commands);
            }
            if let Some((args, queued)) = ahead.pop_front() {
                pushes_only = false;
                session.qbuf = queued;
                outbox.parsed_ahead = !ahead.is_empty();
                let len = args.frame().map_or(0, |f| f.len());
                let quit = execute(&server, session, &mut outbox, args, stream, &mut buf).await;
                if session.from_primary {
                    server.replication.advance(len as u64, session.db);
                }
                // A client marked to close (killed, or force-unblocked)
                // runs nothing more: its replies so far go out, then it
                // closes.
                if quit || session.entry.killed.load(Ordering::Relaxed) {
                    close = true;
                    break;
                }
                continue;
            }
            if let Some(e) = malformed.take() {
                session.wakes.wake();
                outbox.drain().await;
                let to = ReplyTo {
                    resp3: session.resp3,
                    suppressed: false,
                    cmd: None,
                };
                emit(&mut outbox.out, &server, &Reply::err(e), to);
                close = true;
            }
            break;
        }
        // The batch ends: subscribers its PUBLISHes fed may write now.
        outbox.ended = None;
        session.wakes.wake();
        outbox.drain().await;
        outbox.release_held();
        if close {
            // Leaving (QUIT, a protocol error): what was queued for this
            // client is in `out`, and from here on it takes nothing more,
            // before its last reply goes out rather than after. A client
            // that read QUIT's +OK and then changed a key another client
            // tracks with this one as its REDIRECT target must find the
            // redirection broken, as with Redis, which frees a quitting
            // client as soon as its reply is written (Redis's tracking
            // test "RESP3 based basic tracking-redir-broken with client
            // reply off" waited forever when the change came first).
            session.entry.mailbox.close();
        }
        let hold =
            pushes_only && outbox.out.len() < PUSH_WRITE_BYTES && session.entry.mailbox.fed();
        if !outbox.out.is_empty() && !hold {
            // Past its output buffer limit a client gets nothing more, as
            // in Redis (a transaction has run whole by then). `push_bytes`
            // counts pushes at their queued size, which is not always what
            // they took in `out` (a RESP2 client gets no invalidation).
            let replies = outbox.out.len().saturating_sub(outbox.push_bytes);
            if server.pubsub.check_replies(&session.entry, replies)
                || session.entry.over_limit.load(Ordering::Acquire)
            {
                return;
            }
            server
                .stats
                .net_out
                .fetch_add(outbox.out.len() as u64, Ordering::Relaxed);
            // A client that stops reading must still be closable: by
            // CLIENT KILL, by its output buffer limit (also once its soft
            // limit's time runs out with nothing more queued), by
            // shutdown. The write is tried first: a client that killed
            // itself (CLIENT KILL SKIPME no) still gets the reply, as in
            // Redis.
            let mut write = std::pin::pin!(stream.write_all(&outbox.out));
            loop {
                let soft = server.pubsub.soft_recheck(&session.entry);
                let soft_due = async {
                    match soft {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    r = &mut write => match r {
                        Ok(()) => break,
                        Err(_) => return,
                    },
                    _ = session.entry.kill.notified() => return,
                    _ = server.shutdown.notified() => return,
                    _ = soft_due => {
                        if server.pubsub.check_replies(&session.entry, replies) {
                            return;
                        }
                    }
                }
            }
            server.stats.writes.fetch_add(1, Ordering::Relaxed);
            outbox.written();
            outbox.out.clear();
            if outbox.out.capacity() > 1 << 20 {
                outbox.out = BytesMut::with_capacity(16 * 1024);
            }
        }
        if close || session.entry.killed.load(Ordering::Relaxed) {
            return;
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        // CONFIG `timeout`: a client idle this many seconds is closed, as
        // Redis does (0 = never). Blocked commands wait inside `execute`,
        // so they are not idle here.
        // A primary is never idle: it pings every repl-ping-replica-period,
        // and a link silent for repl-timeout is dead.
        let idle_secs = if session.from_primary {
            server.runtime.read().int("repl-timeout").max(1) as u64
        } else {
            server.idle_timeout.load(Ordering::Relaxed)
        };
        busy.set(false);
        let idle = async {
            if idle_secs > 0 {
                tokio::time::sleep(std::time::Duration::from_secs(idle_secs)).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            n = stream.read_buf(&mut buf) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    // Killed while this read was ready too (the select
                    // picks either): what came in must not run, as a
                    // client Redis has freed runs nothing more.
                    if session.entry.killed.load(Ordering::Relaxed) {
                        return;
                    }
                    server.stats.net_in.fetch_add(n as u64, Ordering::Relaxed);
                    server.stats.reads.fetch_add(1, Ordering::Relaxed);
                    if session.from_primary {
                        server.replication.touch();
                    }
                }
            },
            // Taken, with whatever else is queued by then, at the top of
            // the loop. The same wake asks a killed client, or every
            // client at shutdown, to go (`ClientEntry::close_soon`).
            _ = outbox.entry.mailbox.ready() => {
                if session.entry.closing() || server.stopping.load(Ordering::Acquire) {
                    return;
                }
                pushes_only = true;
            }
            _ = idle => return,
        }
    }
}

/// Most requests parsed ahead of the one running: enough for a deep
/// pipeline's lookups to overlap (see [`warm_ahead`]), few enough that
/// the parsed requests' memory stays small.
const PARSE_AHEAD: usize = 32;

/// Parses the complete requests in `buf`, up to [`PARSE_AHEAD`], into
/// `ahead`; a protocol error stops the parse and goes to `malformed`, to be
/// answered after the requests before it have run.
fn parse_ahead(
    parser: &mut RequestParser,
    buf: &mut BytesMut,
    ahead: &mut VecDeque<(Args, usize)>,
    malformed: &mut Option<crate::protocol::ProtocolError>,
) {
    while ahead.len() < PARSE_AHEAD {
        let queued = buf.len();
        match parser.next_framed(buf) {
            Ok(Some((argv, _))) if argv.is_empty() => continue,
            Ok(Some((argv, frame))) => ahead.push_back((Args::framed(argv, frame), queued)),
            Ok(None) => return,
            Err(e) => {
                *malformed = Some(e);
                return;
            }
        }
    }
}

/// Asks for the memory a pipeline's reads will need before they run: each
/// read-only request's first key's `meta` row in its shard's write buffers
/// and its slot in the access clock. Looked up one request at a time,
/// every lookup waited out its own cache misses (the buffers' row maps and
/// the clock are far larger than the caches: under GET at pipeline 16 the
/// two were a fifth of the server's time); made back to back here, the
/// misses overlap. Only memory moves, so a wrong guess (a SELECT further
/// on) costs a lookup and changes nothing. Writes are left out: they run
/// in a shard's batch, often on another thread, and warming theirs cost
/// more than it saved (SET, INCR, SADD at pipeline 16: 4.5 against 4.1 us
/// of server CPU a request).
fn warm_ahead(
    server: &Server,
    db: u8,
    ahead: &VecDeque<(Args, usize)>,
    commands: &mut command::LastLookup,
) {
    if ahead.len() < 2 {
        return;
    }
    // Per shard, the row keys to warm.
    let mut rows: Vec<Vec<Vec<u8>>> = Vec::new();
    for (args, _) in ahead {
        let first_key = commands.find(args.get(0)).is_some_and(|spec| {
            spec.has(flag::READONLY)
                && matches!(spec.keys, command::KeySpec::Range { first: 1, .. })
        });
        if !first_key || args.len() < 2 {
            continue;
        }
        let key = args.get(1);
        let (shard, slot) = server.shards.shard_and_slot(key);
        server.access.spot(db, key);
        if rows.len() <= shard {
            rows.resize_with(shard + 1, Vec::new);
        }
        rows[shard].push(crate::storage::encoding::meta_key(db, slot, key));
    }
    for (shard, keys) in rows.iter().enumerate() {
        if !keys.is_empty() {
            server.shards.shard(shard).warm_meta(keys);
        }
    }
}

/// Runs one command; true when the connection must close afterwards.
async fn execute(
    server: &Arc<Server>,
    session: &mut Session,
    outbox: &mut Outbox,
    args: Args,
    stream: &TcpStream,
    buf: &mut BytesMut,
) -> bool {
    // The connection's own handle: cloning the session's per command would
    // bounce the server's reference count between the cores.
    server.stats.commands.add(1);
    let started = outbox.ended.take().unwrap_or_else(Instant::now);
    let (others_before, runs_before) = (outbox.others, run_time_here());
    // SKIP silences this command only; OFF silences until CLIENT REPLY ON,
    // whose own reply is sent.
    let mode_before = session.reply_mode;
    if mode_before == ReplyMode::Skip {
        session.reply_mode = ReplyMode::On;
    }
    // A primary reads no replies (REPLCONF GETACK answers as a push).
    let mut suppressed = mode_before != ReplyMode::On || session.from_primary;
    // A refusal counts as an error reply but not as a failed call.
    let refused = ReplyTo {
        resp3: session.resp3,
        suppressed,
        cmd: None,
    };
    let spec = outbox.commands.find(args.get(0));
    // Subscribers fed by this batch's PUBLISHes are woken before any other
    // command, which may wait: only a run of PUBLISHes shares their wake.
    if !spec.is_some_and(|s| matches!(s.name, "publish" | "spublish")) {
        session.wakes.wake();
    }
    let Some(spec) = spec else {
        refuse_in_multi(session);
        outbox.push_ready(unknown_command(&args), refused);
        return false;
    };
    // Calls are counted, and arity checked, against the subcommand a
    // container's arguments name (`config|get`). Redis refuses an unknown
    // subcommand first, then a wrong argument count, then a client that
    // has not authenticated.
    let Some(checked) = command::call_spec(spec, &args) else {
        let r = crate::families::server::unknown_subcommand_reply(
            args.get(1),
            &spec.name.to_uppercase(),
        );
        refuse_in_multi(session);
        outbox.push_ready(r, refused);
        return false;
    };
    let refusal = if !checked.arity_ok(args.len()) {
        Some(Reply::err(format!(
            "wrong number of arguments for '{}' command",
            checked.name
        )))
    } else if let Some(r) = crate::families::config::protected_refusal(session, checked.name) {
        Some(r)
    } else if !session.authenticated && !checked.has(flag::NO_AUTH) && server.acl.auth_required() {
        Some(Reply::Error("NOAUTH Authentication required.".into()))
    } else if session.multi.is_some() && checked.has(flag::NO_MULTI) {
        Some(Reply::err("Command not allowed inside a transaction"))
    } else if session.from_primary {
        // A replica's primary is no ACL user (Redis runs its commands as
        // the superuser), and its commands wait behind a busy script, to
        // run after it, rather than be refused and lost.
        None
    } else if let Some(r) = crate::acl::check::refusal(session, checked, &args) {
        Some(r)
    } else {
        // A script past busy-reply-threshold holds every shard: only
        // commands allowed then (SCRIPT KILL, SHUTDOWN...) are answered.
        crate::families::scripting::busy(server, checked, started)
    };
    if let Some(mut r) = refusal {
        refuse_in_multi(session);
        if spec.name == "exec" {
            r = abort_exec(session, r);
        }
        reject(session, outbox, checked, r, refused);
        return false;
    }
    session.entry.activity.ran(checked, started);
    // ASKING covers the one command after it (or a whole transaction).
    let asking = std::mem::take(&mut session.asking);
    if spec.name == "asking" || (asking && session.multi.is_some()) {
        session.asking = asking;
    }
    let mut guard = None;
    if let Some(cluster) = server.cluster.clone() {
        use crate::cluster::routing::Route;
        session.wakes.wake();
        let refusal = match route(session, outbox, &cluster, spec, &args, asking).await {
            Route::Here => None,
            Route::Refuse(r) => Some(r),
            Route::WhilePresent { keys, gone, moving } => {
                guard = Some(Guard::Present(keys, gone, moving));
                None
            }
            Route::Fenced(fence) => {
                guard = Some(Guard::Fence(fence));
                None
            }
        };
        if let Some(r) = refusal {
            if spec.name == "exec" {
                session.multi = None;
                session.watching = Default::default();
            } else {
                refuse_in_multi(session);
            }
            reject(session, outbox, checked, r, refused);
            return false;
        }
    }
    // NOREPLICAS on a primary, READONLY and the like on a replica.
    let refusal = replicas_refusal(session, checked, &args)
        .or_else(|| replica_refusal(session, checked, &args));
    if let Some(r) = refusal {
        refuse_in_multi(session);
        let r = if spec.name == "exec" {
            abort_exec(session, r)
        } else {
            r
        };
        reject(session, outbox, checked, r, refused);
        return false;
    }
    if let Some(r) = mode_refusal(session, checked) {
        refuse_in_multi(session);
        reject(session, outbox, checked, r, refused);
        return false;
    }
    // CLIENT PAUSE holds commands here, after every refusal and before
    // MULTI queues them, as Redis does. Cluster bus links are never held:
    // Redis's bus is not a client.
    // Time held by CLIENT PAUSE or blocked is not part of the command's
    // time (as in Redis).
    let mut waited = std::time::Duration::ZERO;
    if let Some((kind, _)) = server.shards.pause.current() {
        session.wakes.wake();
        let held = |kind| kind == PauseKind::All || held_by_write_pause(session, checked, &args);
        if !session.bus_link && held(kind) {
            let (wait_began, others) = ((Instant::now(), run_time_here()), outbox.others);
            let pause = server.shards.pause.clone();
            let _held = crate::server::Held::new(&server.stats.held);
            if wait_blocked(session, outbox, stream, buf, pause.wait_while(held))
                .await
                .is_none()
            {
                return true;
            }
            // Its drain is counted below with the others.
            waited += besides_runs(wait_began).saturating_sub(outbox.others - others);
        }
    }
    if let Some(multi) = &mut session.multi {
        // Between MULTI and EXEC, commands other than the transaction's
        // own are queued, to be parsed and run by EXEC.
        if !matches!(
            spec.name,
            "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
        ) {
            // Once EXEC is bound to fail (a command was refused, or a
            // watched key changed), Redis answers QUEUED but keeps nothing:
            // EXEC's own checks (its keys' slots, whether it writes) see
            // only what came before.
            if !multi.failed && !session.watching.modified() {
                multi.queue.push((spec, args));
            }
            let to = ReplyTo {
                resp3: session.resp3,
                suppressed,
                cmd: Some(checked),
            };
            outbox.push_ready(Reply::Simple("QUEUED"), to);
            show_transaction(session);
            return false;
        }
    }
    crate::families::tracking::before_command(session, spec, &args);
    // MONITOR shows a command once it has run, as Redis does: with the
    // database it leaves selected, after its reply is queued. A blocking
    // command shows when it blocks, a script before the commands it calls,
    // and EXEC after those of its transaction.
    let mut monitored = server.pubsub.monitors.active().then(|| {
        if spec.name == "exec" {
            feed_transaction(session);
        }
        args.all().to_vec()
    });
    if monitored.is_some() && checked.has(flag::SKIP_MONITOR) {
        if let Some(argv) = monitored.take() {
            let addr = &session.entry.addr;
            server
                .pubsub
                .monitors
                .feed(checked, session.db, addr, &argv);
        }
    }
    session.settled = outbox.slots.is_empty() && outbox.squash.is_empty();
    let mut kept = crate::families::slowlog::keep(session, checked, &args);
    let mut action = (spec.handler)(session, args);
    action = crate::families::tracking::after_command(session, spec, action);
    if session.from_primary {
        action = as_primary(action);
    }
    let mut feed = monitored.map(|argv| {
        let (db, addr) = (session.db, session.entry.addr.clone());
        let server = server.clone();
        move || server.pubsub.monitors.feed(checked, db, &addr, &argv)
    });
    if spec.name == "exec"
        && matches!(
            action,
            Action::Write { .. } | Action::Plan { .. } | Action::Job(_)
        )
    {
        // Its commands are logged, and it is shown, once they have run;
        // the run is its time, wherever it happens (see
        // `families::slowlog`).
        let log = crate::families::slowlog::exec_when_run(session, &mut kept);
        let feed = feed.take();
        let server = server.clone();
        action = after_run(action, move |took| {
            let usec = crate::families::slowlog::run_counted(&server, checked, took);
            if let Some(log) = log {
                log(usec);
            }
            if let Some(feed) = feed {
                feed();
            }
        });
    }
    let mut sampled = true;
    if crate::families::slowlog::logged_by_its_run(checked, &action) {
        kept = crate::families::slowlog::Kept::Nothing;
    } else if checked.name != "exec" && matches!(action, Action::Write { .. } | Action::Plan { .. })
    {
        // Only queued here: the write reports its run where it happens.
        let run = crate::families::slowlog::write_run(session, checked, &mut kept);
        action = timed_run(action, server.clone(), run);
        sampled = false;
    }
    if matches!(action, Action::Block(_)) {
        if let Some(feed) = feed.take() {
            feed();
        }
    }
    if outbox.resp3 != session.resp3 {
        outbox.resp3 = session.resp3;
        session.entry.mailbox.set_resp3(session.resp3);
    }
    match guard {
        Some(Guard::Present(keys, gone, moving)) => {
            action = while_present(action, keys, gone, moving);
        }
        Some(Guard::Fence(fence)) => action = while_unfenced(action, fence),
        None => {}
    }
    // CLIENT REPLY ON answers, whatever OFF or SKIP said before it.
    if mode_before != ReplyMode::On
        && checked.name == "client|reply"
        && session.reply_mode == ReplyMode::On
    {
        suppressed = false;
    }
    let to = ReplyTo {
        resp3: session.resp3,
        suppressed,
        cmd: Some(checked),
    };
    let mut close = false;
    match action {
        Action::Reply(r) => outbox.push_ready(r, to),
        Action::Write { shard, f } => {
            // Not grouped with writes queued behind a script on another
            // shard: those may yet have to wait for it (see `Behind`).
            outbox.flush_scripts();
            if outbox.moved_reads
                || (outbox.behind.is_some() && outbox.inflight != Inflight::Shard(shard))
            {
                outbox.drain().await;
            }
            outbox.squash.push((shard, f, to));
            if outbox.squash.len() >= MAX_SQUASH {
                outbox.flush_squash();
            }
        }
        Action::Plan { ids, blind, plan } => {
            // Earlier writes are sent first, so the plan runs after them.
            outbox.flush_squash();
            if outbox.moved_reads
                || !matches!(outbox.inflight, Inflight::None | Inflight::Coordinator)
            {
                outbox.drain().await;
            }
            match outbox.run_or_submit(ids, blind, false, plan) {
                Ok(r) => outbox.push_ready(r, to),
                Err(rx) => outbox.push_slot(Slot::Waiting(rx, None), to),
            }
        }
        Action::Script {
            shard,
            f,
            fell_back,
            slow,
        } => {
            // Earlier writes go first, and so do scripts collected for
            // another shard.
            if outbox.scripts.as_ref().is_none_or(|s| s.shard != shard) {
                outbox.flush_squash();
            }
            if outbox.moved_reads
                || (!matches!(outbox.inflight, Inflight::None)
                    && outbox.inflight != Inflight::Shard(shard))
            {
                outbox.drain().await;
            }
            let mut queue = Some((f, fell_back, slow));
            let here = outbox.inflight == Inflight::None;
            if let Some((f, fell_back, slow)) = queue.take_if(|_| here) {
                let few = || server.busy_clients.load(Ordering::Relaxed) <= FEW_BUSY;
                if buf.is_empty() && !outbox.parsed_ahead && outbox.scripts.is_none() {
                    // Alone: run here if the shard is free, as writes are.
                    // Its reply decides whether `slow` must run, and
                    // nothing else was sent yet: no more commands were
                    // read, and `drain` runs `slow` before reading. A
                    // script that runs long gives this thread's other
                    // connections to another thread (`scripting::vm`), so
                    // SCRIPT KILL still gets through.
                    match server.shards.run_here(shard, vec![f]) {
                        Ok(ran) => {
                            let (tx, rx) = tokio::sync::oneshot::channel();
                            outbox.send_ran(shard, ran, vec![ReplySink::One(tx)]);
                            outbox.push_slot(Slot::Script(rx, fell_back, slow, None), to);
                        }
                        Err(mut writes) => {
                            let f = writes.pop().expect("the script handed back");
                            queue = Some((f, fell_back, slow));
                        }
                    }
                } else if outbox.scripts.is_none() && !few() {
                    // More commands wait, and other clients are busy: on
                    // the actor, the pipeline's scripts share batches with
                    // theirs (see `FEW_BUSY`).
                    queue = Some((f, fell_back, slow));
                } else {
                    // More commands wait: collected with the scripts after
                    // it, to run as one batch (see `Outbox::flush_scripts`).
                    let scripts = outbox.scripts.get_or_insert_with(|| Scripts {
                        shard,
                        behind: Behind {
                            fell_back: Arc::default(),
                        },
                        runs: Vec::new(),
                    });
                    let (f, retry) = scripts.behind.guard(shard, f, Some(fell_back.clone()));
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    scripts.runs.push((f, tx));
                    let full = scripts.runs.len() >= MAX_SQUASH;
                    outbox
                        .slots
                        .push_back((Slot::Script(rx, fell_back, slow, Some(retry)), to));
                    if full {
                        outbox.flush_scripts();
                    }
                }
            }
            if let Some((f, fell_back, slow)) = queue {
                // Behind this client's writes on the shard, or the shard
                // was busy: queued there, with the pipeline's next ones.
                let behind = outbox.behind.get_or_insert_with(|| Behind {
                    fell_back: Arc::default(),
                });
                let (f, retry) = behind.guard(shard, f, Some(fell_back.clone()));
                let rx = server.shards.enqueue(shard, f);
                outbox.unkicked = Some(shard);
                outbox.push_slot(Slot::Script(rx, fell_back, slow, Some(retry)), to);
                outbox.inflight = Inflight::Shard(shard);
            }
        }
        Action::Read { shard, f } => {
            outbox.flush_squash();
            if outbox.inflight == Inflight::Shard(shard) {
                let slot = outbox.enqueue(shard, super::session::read_in_write(f, server.clone()));
                server.shards.kick(shard);
                outbox.push_slot(slot, to);
            } else {
                if outbox.inflight != Inflight::None {
                    outbox.drain().await;
                }
                let reads = &server.disk_reads;
                let shared = server.shards.shard(shard);
                match shared.batch_snapshot(&mut outbox.views).await {
                    Ok(snap) if reads.moved() => {
                        let now = crate::shard::now_ms_at(started);
                        let view = crate::shard::ReadView::new(snap.clone(), now, shard, None);
                        let server = server.clone();
                        let rx = reads
                            .run(move || {
                                let r = f(&view, &server).unwrap_or_else(Reply::err);
                                (r, view.take_expired())
                            })
                            .await;
                        outbox.push_slot(Slot::Read(rx, shard), to);
                        outbox.moved_reads = true;
                    }
                    Ok(snap) => {
                        let view = crate::shard::ReadView::lent(
                            snap,
                            crate::shard::now_ms_at(started),
                            shard,
                        );
                        let r = f(&view, server).unwrap_or_else(Reply::err);
                        let expired = view.take_expired();
                        reads.ran_here();
                        match outbox.after_read(shard, r, expired) {
                            Ok(r) => outbox.push_ready(r, to),
                            Err(rx) => outbox.push_slot(Slot::Waiting(rx, None), to),
                        }
                    }
                    Err(e) => outbox.push_ready(Reply::err(e), to),
                }
            }
        }
        Action::ReadMany { ids, f } => {
            outbox.drain().await;
            let r =
                crate::families::read_now(&server.shards, &ids, f, Some(&server.disk_reads)).await;
            outbox.push_ready(r, to);
        }
        Action::Job(job) => {
            outbox.drain().await;
            let r = job.await;
            outbox.push_ready(r, to);
        }
        Action::Block(job) => {
            let (wait_began, others) = ((Instant::now(), run_time_here()), outbox.others);
            let Some(r) = wait_blocked(session, outbox, stream, buf, job).await else {
                return true;
            };
            waited += besides_runs(wait_began).saturating_sub(outbox.others - others);
            outbox.push_ready(r, to);
        }
        Action::Silent => {}
        Action::Close(r) => {
            outbox.drain().await;
            if let Some(r) = r {
                outbox.push_ready(r, to);
            }
            close = true;
        }
    }
    if let Some(feed) = feed {
        feed();
    }
    // Statistics, latency sample and slow log; what the time covers is
    // documented in `families::slowlog`.
    let ended = Instant::now();
    outbox.ended = Some(ended);
    let runs = run_time_here().saturating_sub(runs_before);
    let usec = ended
        .duration_since(started)
        .saturating_sub(waited + (outbox.others - others_before) + runs)
        .as_micros() as u64;
    crate::families::slowlog::after_call(session, checked, (usec, sampled), kept);
    show_transaction(session);
    close
}

/// Waits for `until` while the client is blocked (in a blocking command,
/// or held by CLIENT PAUSE); `None` when the connection must close
/// instead. Earlier replies go out first (a pipeline of blocking pops gets
/// each reply as it is served), a RESP3 client keeps getting its pushes,
/// and a client that leaves or is killed, or a server that stops, ends
/// the wait: dropping `until` drops whatever it registered.
async fn wait_blocked<T>(
    session: &Session,
    outbox: &mut Outbox,
    stream: &TcpStream,
    buf: &mut BytesMut,
    until: impl std::future::Future<Output = T>,
) -> Option<T> {
    let server = &session.server;
    outbox.drain().await;
    outbox.release_held();
    write_out(stream, &mut outbox.out, server).await.ok()?;
    outbox.written();
    let entry = &session.entry;
    entry.blocked.store(true, Ordering::Relaxed);
    let mut until = std::pin::pin!(until);
    let done = loop {
        tokio::select! {
            // The outcome first: an invalidation its own serving caused
            // (BLMOVE's destination) goes after the reply, as in Redis.
            biased;
            r = &mut until => break Some(r),
            // A RESP3 client gets its messages and invalidations while it
            // waits, as in Redis; those its own try sent wait for its reply.
            _ = outbox.entry.mailbox.ready() => {
                let trying = entry.trying.load(Ordering::Relaxed);
                if !trying {
                    outbox.release_held();
                }
                outbox.take_pushes(trying);
            }
            _ = peer_gone(stream, buf, server) => break None,
            _ = entry.kill.notified() => break None,
            _ = server.shutdown.notified() => break None,
        };
        if write_out(stream, &mut outbox.out, server).await.is_err() {
            break None;
        }
        outbox.written();
    };
    entry.blocked.store(false, Ordering::Relaxed);
    done
}

/// A refused EXEC discards the transaction and the watches, in or out of
/// MULTI, and says why (Redis's execCommandAbort).
fn abort_exec(session: &mut Session, r: Reply) -> Reply {
    session.multi = None;
    session.watching = Default::default();
    match &r {
        Reply::Error(text) => {
            let why = text.strip_prefix("ERR ").unwrap_or(text);
            Reply::Error(format!("EXECABORT Transaction discarded because of: {why}"))
        }
        _ => r,
    }
}

/// Whether `test` holds for the command or, for EXEC, for any command its
/// transaction queued (Redis judges an EXEC by the flags of its queue).
fn runs_any(
    session: &Session,
    checked: &command::CommandSpec,
    args: &Args,
    test: impl Fn(&command::CommandSpec, &Args) -> bool,
) -> bool {
    match (&session.multi, checked.name) {
        (Some(multi), "exec") => multi
            .queue
            .iter()
            .any(|(spec, args)| test(command::call_spec(spec, args).unwrap_or(spec), args)),
        _ => test(checked, args),
    }
}

/// Whether CLIENT PAUSE WRITE holds this command back: Redis holds what
/// may write or replicate (write commands, scripts that may write,
/// PUBLISH, SPUBLISH, PFCOUNT), and an EXEC whose queue holds any of them.
fn held_by_write_pause(session: &Session, checked: &command::CommandSpec, args: &Args) -> bool {
    runs_any(session, checked, args, |spec, args| match spec.name {
        "eval" | "evalsha" | "fcall" => {
            crate::families::scripting::may_write(&session.server, spec.name, args)
        }
        _ => spec.has(flag::WRITE) || spec.may_replicate(),
    })
}

/// NOREPLICAS for a write command while `min-replicas-to-write` is set
/// (cairn has no replicas): a command flagged write, a script or function
/// that does not declare `no-writes`, an EXEC that queued either. Checked
/// after routing and before MULTI queues, as Redis does.
fn replicas_refusal(
    session: &Session,
    checked: &command::CommandSpec,
    args: &Args,
) -> Option<Reply> {
    let refusal = session.server.writes_refused()?;
    let server = &session.server;
    runs_any(session, checked, args, |spec, args| {
        spec.has(flag::WRITE)
            || crate::families::scripting::declares_writes(server, spec.name, args)
    })
    .then_some(refusal)
}

/// What a replica refuses its clients (see `Replication::refusal`); its
/// primary's commands are never refused.
fn replica_refusal(
    session: &Session,
    checked: &command::CommandSpec,
    args: &Args,
) -> Option<Reply> {
    if session.from_primary {
        return None;
    }
    let server = &session.server;
    server.replication.refusal(
        server,
        || {
            runs_any(session, checked, args, |spec, args| {
                spec.has(flag::WRITE)
                    || crate::families::scripting::declares_writes(server, spec.name, args)
            })
        },
        || !runs_any(session, checked, args, |spec, _| !spec.has(flag::STALE)),
        || !runs_any(session, checked, args, |spec, _| !spec.has(flag::LOADING)),
    )
}

/// MONITOR shows a transaction's commands when EXEC runs them, before
/// EXEC itself, and none when a watched key changed (EXEC then runs
/// nothing). The watch is judged now; a change racing EXEC may still
/// abort it after its commands were shown.
fn feed_transaction(session: &Session) {
    let Some(multi) = &session.multi else {
        return;
    };
    if multi.failed || session.watching.failed(crate::shard::now_ms()) {
        return;
    }
    let monitors = &session.server.pubsub.monitors;
    for (spec, args) in &multi.queue {
        let spec = command::call_spec(spec, args).unwrap_or(spec);
        monitors.feed(spec, session.db, &session.entry.addr, args.all());
    }
}

/// What a client in MONITOR mode, or subscribed in RESP2, may not run, with
/// Redis's error (checked after routing, before MULTI queues, as Redis
/// does).
fn mode_refusal(session: &Session, checked: &'static command::CommandSpec) -> Option<Reply> {
    if session.monitor
        && (checked.has(flag::WRITE) || checked.has(flag::READONLY) || checked.may_replicate())
    {
        // A MONITOR client is a replica to Redis: no keys for it.
        return Some(Reply::err("Replica can't interact with the keyspace"));
    }
    let allowed_subscribed = |name: &str| {
        matches!(
            name,
            "ping"
                | "subscribe"
                | "psubscribe"
                | "ssubscribe"
                | "unsubscribe"
                | "punsubscribe"
                | "sunsubscribe"
                | "quit"
                | "reset"
        )
    };
    // RESP2 cannot tell a reply from a message: a subscribed client may
    // only manage its subscriptions.
    if session.resp3 || !session.subs.any() {
        return None;
    }
    let container = checked.name.split('|').next().unwrap_or(checked.name);
    (!allowed_subscribed(container)).then(|| {
        Reply::err(format!(
            "Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            checked.name
        ))
    })
}

/// A check a command makes in the transaction it runs in, because routing
/// looked at a slot that was changing hands.
enum Guard {
    /// Its keys must still be here (see [`while_present`]).
    Present(Vec<bytes::Bytes>, Reply, Arc<crate::cluster::node::Cluster>),
    /// Its slot's move fence must still be down (see [`while_unfenced`]).
    Fence(Arc<std::sync::atomic::AtomicBool>),
}

/// Makes a write to a slot CLUSTER MOVESLOT is copying check, in its own
/// transaction, that the fence is still down: the move raises it on the
/// shard's actor, so every write after that moment answers TRYAGAIN and
/// every write before it is in what the move sends last. Other actions
/// (EXEC, scripts) are held back at routing and by the move's last rounds.
fn while_unfenced(action: Action, fence: Arc<std::sync::atomic::AtomicBool>) -> Action {
    match action {
        Action::Write { shard, f } => Action::Write {
            shard,
            f: Box::new(move |w| {
                if fence.load(std::sync::atomic::Ordering::Acquire) {
                    return Ok(crate::cluster::routing::tryagain());
                }
                f(w)
            }),
        },
        other => other,
    }
}

/// Makes a replica's primary's command find every key alive, wherever its
/// writes run (see `WriteCtx::as_primary`). Its reads answer nobody.
fn as_primary(action: Action) -> Action {
    match action {
        Action::Write { shard, f } => Action::Write {
            shard,
            f: Box::new(move |w| w.as_primary(f)),
        },
        Action::Plan { ids, blind, plan } => Action::Plan {
            ids,
            blind,
            plan: Box::new(move |locked| {
                locked.as_primary();
                plan(locked)
            }),
        },
        Action::Script {
            shard,
            f,
            fell_back,
            slow,
        } => Action::Script {
            shard,
            f: Box::new(move |w| w.as_primary(f)),
            fell_back,
            slow: Box::new(move || as_primary(slow())),
        },
        other => other,
    }
}

/// Makes a write or a plan time its run and report it as its command's
/// time, wherever it runs (see `families::slowlog::write_ran`).
fn timed_run(
    action: Action,
    server: Arc<Server>,
    run: crate::families::slowlog::WriteRun,
) -> Action {
    after_run(action, move |took| {
        crate::families::slowlog::write_ran(&server, run, took)
    })
}

/// Calls `then` with how long `action` took to run (its writes, its plan
/// or its job), once it has, before its reply goes out.
fn after_run(action: Action, then: impl FnOnce(Duration) + Send + 'static) -> Action {
    match action {
        Action::Write { shard, f } => Action::Write {
            shard,
            f: Box::new(move |w| {
                let began = crate::families::slowlog::run_began();
                let r = f(w);
                then(crate::families::slowlog::run_took(began));
                r
            }),
        },
        Action::Plan { ids, blind, plan } => Action::Plan {
            ids,
            blind,
            plan: Box::new(move |locked| {
                let began = Instant::now();
                let ran = plan(locked);
                Box::pin(async move {
                    let r = ran.await;
                    then(began.elapsed());
                    r
                })
            }),
        },
        Action::Job(job) => Action::Job(Box::pin(async move {
            let began = Instant::now();
            let r = job.await;
            then(began.elapsed());
            r
        })),
        other => {
            then(Duration::ZERO);
            other
        }
    }
}

/// Time since `began` (an instant and the task's run time then) not
/// spent on runs that time themselves: a script's or a transaction's run
/// is its own command's time, counted where it ran (see
/// `families::slowlog`).
fn besides_runs((at, runs): (Instant, Duration)) -> Duration {
    at.elapsed()
        .saturating_sub(run_time_here().saturating_sub(runs))
}

/// Makes a command in a slot being migrated away check, in the
/// transaction it runs in, that its keys are still here (MIGRATE may have
/// moved them since routing looked): otherwise it answers `gone` (ASK).
/// Reads and writes of one shard are guarded; a command spanning shards
/// cannot be in one slot.
fn while_present(
    action: Action,
    keys: Vec<bytes::Bytes>,
    gone: Reply,
    moving: Arc<crate::cluster::node::Cluster>,
) -> Action {
    use crate::cluster::routing::still_present;
    match action {
        Action::Write { shard, f } => Action::Write {
            shard,
            f: Box::new(move |w| match still_present(&*w, &keys, &gone, &moving) {
                Some(r) => Ok(r),
                None => f(w),
            }),
        },
        Action::Read { shard, f } => Action::Read {
            shard,
            f: Box::new(move |r, s| match still_present(r, &keys, &gone, &moving) {
                Some(reply) => Ok(reply),
                None => f(r, s),
            }),
        },
        other => other,
    }
}

/// Cluster mode: where a command runs (for EXEC, its transaction's keys
/// decide).
async fn route(
    session: &Session,
    outbox: &mut Outbox,
    cluster: &Arc<crate::cluster::node::Cluster>,
    spec: &'static command::CommandSpec,
    args: &Args,
    asking: bool,
) -> crate::cluster::routing::Route {
    use crate::cluster::routing;
    if !routing::routes(spec) {
        return routing::Route::Here;
    }
    // Whether keys exist decides the route of a slot being migrated: the
    // client's own writes in flight must be seen.
    let mut view = cluster.view();
    if view.has_open_slots() {
        outbox.drain().await;
        view = cluster.view();
    }
    let server = &session.server;
    // Keys are where the subcommand's spec says (OBJECT FREQ key...).
    let row =
        |spec: &'static command::CommandSpec, a: &Args| command::call_spec(spec, a).unwrap_or(spec);
    if spec.name == "exec" {
        let Some(multi) = session.multi.as_ref() else {
            return routing::Route::Here;
        };
        let cmds: Vec<routing::Routed> = multi
            .queue
            .iter()
            .map(|(spec, a)| (row(spec, a), a.all()))
            .collect();
        routing::check(server, cluster, &view, &cmds, asking).await
    } else {
        let cmd = (row(spec, args), args.all());
        routing::check(server, cluster, &view, &[cmd], asking).await
    }
}

/// Answers a command refused before it ran: counted as a rejected call of
/// its (sub)command, not as a failed one.
fn reject(
    session: &mut Session,
    outbox: &mut Outbox,
    checked: &'static command::CommandSpec,
    r: Reply,
    to: ReplyTo,
) {
    session
        .server
        .command_stat(checked)
        .rejected
        .fetch_add(1, Ordering::Relaxed);
    outbox.push_ready(r, to);
    show_transaction(session);
}

/// Keeps what CLIENT LIST shows of the client's transaction current. The
/// shared entry's lock is taken only when the watches came or went, not
/// for every command queued.
fn show_transaction(session: &mut Session) {
    let queued = session.multi.as_ref().map_or(-1, |m| m.queue.len() as i64);
    if session.entry.multi.load(Ordering::Relaxed) != queued {
        session.entry.multi.store(queued, Ordering::Relaxed);
    }
    let watching = !session.watching.keys.is_empty();
    if session.shown_watching != watching {
        session.shown_watching = watching;
        session.entry.info.lock().watch_dirty = session.watching.shown_flag();
    }
}

/// A command refused while a transaction is being queued makes its EXEC
/// fail (EXECABORT), as in Redis.
fn refuse_in_multi(session: &mut Session) {
    if let Some(multi) = &mut session.multi {
        multi.failed = true;
    }
}

/// Writes (and empties) `out` on a stream the caller only shares.
async fn write_out(stream: &TcpStream, out: &mut BytesMut, server: &Server) -> std::io::Result<()> {
    let mut at = 0;
    while at < out.len() {
        stream.writable().await?;
        match stream.try_write(&out[at..]) {
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    server.stats.net_out.fetch_add(at as u64, Ordering::Relaxed);
    out.clear();
    Ok(())
}

/// Most bytes of requests read ahead while the client is blocked; past
/// it, a close can no longer be seen until the blocked command ends.
const READ_AHEAD_WHILE_BLOCKED: usize = 64 << 20;

/// Resolves when the peer has closed the connection. Requests the client
/// sends meanwhile are read into `buf`, to be served after the blocked
/// command (Redis too keeps reading a blocked client), so a client that
/// pipelined more commands and then left is still seen to leave.
async fn peer_gone(stream: &TcpStream, buf: &mut BytesMut, server: &Server) {
    loop {
        if buf.len() >= READ_AHEAD_WHILE_BLOCKED || stream.readable().await.is_err() {
            return std::future::pending::<()>().await;
        }
        buf.reserve(16 * 1024);
        match stream.try_read_buf(buf) {
            Ok(0) => return,
            Ok(n) => {
                server.stats.net_in.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// Redis 7.0's reply to an unknown command, quoting up to 128 bytes of args.
fn unknown_command(args: &Args) -> Reply {
    let mut quoted = String::new();
    for a in args.from(1) {
        if quoted.len() >= 128 {
            break;
        }
        let room = 128 - quoted.len();
        let s = String::from_utf8_lossy(a);
        let s: String = s.chars().take(room).collect();
        quoted.push_str(&format!("'{s}' "));
    }
    let name = String::from_utf8_lossy(args.get(0));
    let name: String = name.chars().take(128).collect();
    Reply::err(format!(
        "unknown command '{name}', with args beginning with: {quoted}"
    ))
}

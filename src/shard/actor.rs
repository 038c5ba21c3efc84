//! The shard actor: queue -> batch -> one write transaction -> commit ->
//! replies; plus the reaper tick, the durability timer and the coordinator
//! protocol (see the parent module).
//!
//! The shard's state lives in a [`ShardCore`] behind a mutex that the actor
//! takes for each message. A client thread may take it too, when it is
//! free, and run the queued writes and its own there
//! ([`ShardCore::run_here`]), and runs what others queue meanwhile as it
//! gives the core back ([`Taken`]): a write then costs no hand-off to the
//! actor's thread and back, two thread wake-ups that cost more than the
//! write itself on a small machine. Under `always` such a batch's commit
//! is deferred: its replies, and everything else it decided, wait for a
//! sync of the log that the client's thread leads or joins (see
//! `storage::group`). Writes still apply one batch at a time, in the
//! order they were queued; the actor remains the path for everything else
//! (writes queued while the core was busy, coordinators, timers, a core
//! held by a thread that leaves its queue to the actor).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::blocking::{serves, Stage, Waiter};
use super::{now_ms, ShardShared, WriteFn};
use crate::config::Durability;
use crate::protocol::Reply;
use crate::storage::keyspace::{self, ReapStats};
use crate::storage::tables::Wakeups;
use crate::storage::{ReadCtx, RowOp, ShardState, StoreError, Table, WriteCtx};

/// Keys the reaper may expire in one slice.
const REAP_KEYS_PER_TICK: usize = 500;
/// Sub-key rows the garbage collector may delete in one slice.
const GC_ROWS_PER_TICK: usize = 20_000;
/// How often the reaper runs.
const REAPER_INTERVAL: Duration = Duration::from_millis(100);

/// A client write: run `f` in the next batch, reply on `reply`.
pub struct Submit {
    /// The op.
    pub f: WriteFn,
    /// Where the reply goes after the commit.
    pub reply: ReplySink,
}

/// Where a queued write's reply goes after the commit.
///
/// A client whose pipeline finds the shard's core held queues all its
/// writes there at once; their replies go back through one channel
/// rather than one each: under LPUSH at pipeline 16, with both
/// connection threads pushing to one list, making, sending and polling a
/// channel per write was ~6% of the server's samples.
pub enum ReplySink {
    /// The write's own channel.
    One(tokio::sync::oneshot::Sender<Reply>),
    /// A write of a group queued together, not the last: its reply waits
    /// for the group's last write (see [`Delivery`]).
    Held,
    /// The last write of a group queued together: its reply goes back
    /// after those of the group's earlier writes, in one message.
    Last(tokio::sync::oneshot::Sender<Vec<Reply>>),
}

impl ReplySink {
    /// Sinks for `n` writes queued together (at least one), and where
    /// their replies come, in order, once the last has one.
    pub fn group(n: usize) -> (Vec<ReplySink>, tokio::sync::oneshot::Receiver<Vec<Reply>>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut sinks: Vec<ReplySink> = (1..n).map(|_| ReplySink::Held).collect();
        sinks.push(ReplySink::Last(tx));
        (sinks, rx)
    }
}

/// Hands replies to their [`ReplySink`]s in the order the writes were
/// queued, gathering a group's until its last write's. A group's writes
/// are queued together under the queue's lock, and whoever takes the
/// queue takes all of it, so they reach one delivery, in a row.
#[derive(Default)]
pub struct Delivery {
    held: Vec<Reply>,
}

impl Delivery {
    /// Hands `reply` to `to` (the client may have gone; its write stands
    /// regardless).
    pub fn give(&mut self, reply: Reply, to: ReplySink) {
        match to {
            ReplySink::One(tx) => {
                let _ = tx.send(reply);
            }
            ReplySink::Held => self.held.push(reply),
            ReplySink::Last(tx) => {
                self.held.push(reply);
                let _ = tx.send(std::mem::take(&mut self.held));
            }
        }
    }

    /// [`Delivery::give`] for each of `pairs`, in order.
    pub fn give_all(&mut self, pairs: impl IntoIterator<Item = (Reply, ReplySink)>) {
        for (reply, to) in pairs {
            self.give(reply, to);
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        debug_assert!(self.held.is_empty(), "a group's replies left undelivered");
    }
}

/// What a client's writes run on its own thread come to
/// ([`ShardCore::run_here`]).
#[derive(Debug, PartialEq)]
pub enum Ran {
    /// Their replies.
    Done(Vec<Reply>),
    /// Their replies, which may go out only once the shard's commit with
    /// this number is durable (`always`: see `storage::group`).
    Pending(u64, Vec<Reply>),
}

/// Sends each reply of a deferred commit to its client once the commit
/// is durable, or the error that kept it from being so (see
/// `storage::group`). The clients may have gone; the writes stand
/// regardless.
pub fn replies_when_durable(
    replies: Vec<(Reply, ReplySink)>,
) -> crate::storage::group::AfterDurable {
    Box::new(move |synced| {
        let replies = replies
            .into_iter()
            .map(|(reply, to)| (synced.map_or_else(Reply::err, |()| reply), to));
        Delivery::default().give_all(replies);
    })
}

/// The writes waiting for a shard's next batch, oldest first, outside
/// its core so that a client can queue one while another thread holds
/// the core. Whoever takes the core next runs them, before anything of
/// its own: a client thread that found it free (`ShardSet::kick`), the
/// coordinator's round, or the actor, which is woken only when no one
/// else could take them. So a queued write never waits for the actor's
/// thread to wake while another client is running writes here, and
/// writes still apply in the order they were queued.
#[derive(Default)]
pub struct Queue {
    writes: Vec<Submit>,
    /// A thread holds the core as a [`Taken`], and will run what is queued
    /// (or wake the actor for it) when it gives the core back.
    held: bool,
    /// A `Drain` is in the actor's mailbox, not yet handled: the writes
    /// queued meanwhile need no other.
    woken: bool,
    /// The shard has shut down: no write queued now will run.
    closed: bool,
}

impl Queue {
    /// Queues a write, or hands it back once the shard has shut down (to
    /// be dropped outside the lock: its client reads the closed channel).
    pub(super) fn push(&mut self, write: Submit) -> Option<Submit> {
        if self.closed {
            return Some(write);
        }
        self.writes.push(write);
        None
    }

    /// Whether the actor must be woken for what is queued: there is
    /// something and no `Drain` is on its way (one is, from now on).
    pub(super) fn needs_wake(&mut self) -> bool {
        !self.writes.is_empty() && !std::mem::replace(&mut self.woken, true)
    }

    /// Whether a thread holding the core as a [`Taken`] will see to what
    /// is queued now.
    pub(super) fn held(&self) -> bool {
        self.held
    }
}

/// How many batches of others' writes a thread giving the core back runs
/// before it leaves the rest to the actor (see [`Taken`]).
const HANDOVER_BATCHES: usize = 4;

/// A shard's core, taken by a thread that sees to the writes queued while
/// it held it: while it is held (`Queue::held`), a client queueing a write
/// leaves it there rather than waking the actor, and giving the core back
/// runs them, `HANDOVER_BATCHES` batches at most, or wakes the actor for
/// them where this thread may not run writes (`ShardCore::runs_here`). At
/// pipeline 1, two clients' writes meeting on a shard cost the actor's
/// thread a wake-up each (a quarter to a half of them under EVALSHA -c 50)
/// when a queued write always woke it.
pub struct Taken<'a> {
    core: std::mem::ManuallyDrop<parking_lot::MutexGuard<'a, ShardCore>>,
    /// Taken by the shard's actor, which may run any write.
    actor: bool,
}

impl<'a> Taken<'a> {
    /// Holds a core just locked: by its actor (`actor`), or by a client's
    /// thread.
    pub fn new(core: parking_lot::MutexGuard<'a, ShardCore>, actor: bool) -> Taken<'a> {
        core.shared.queue.lock().held = true;
        Taken {
            core: std::mem::ManuallyDrop::new(core),
            actor,
        }
    }

    /// Whether this thread may run the queued writes now.
    fn may_run(&self) -> bool {
        use std::sync::atomic::Ordering::Acquire;
        self.actor || (self.core.runs_here() && self.core.shared.mailed.load(Acquire) == 0)
    }
}

impl std::ops::Deref for Taken<'_> {
    type Target = ShardCore;

    fn deref(&self) -> &ShardCore {
        &self.core
    }
}

impl std::ops::DerefMut for Taken<'_> {
    fn deref_mut(&mut self) -> &mut ShardCore {
        &mut self.core
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let mut batches = 0;
        loop {
            let mut queue = self.core.shared.queue.lock();
            if !queue.writes.is_empty() && batches < HANDOVER_BATCHES {
                drop(queue);
                // Asked only with something queued: it reads the store's
                // buffered bytes, shared lines the threads would trade.
                if self.may_run() {
                    self.core.flush();
                    batches += 1;
                    continue;
                }
                queue = self.core.shared.queue.lock();
            }
            queue.held = false;
            let wake = queue.needs_wake();
            drop(queue);
            let shared = wake.then(|| self.core.shared.clone());
            // SAFETY: the guard is dropped once, here, and not used after:
            // this is the end of `drop`.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.core) };
            if let Some(shared) = shared {
                shared.send_drain();
            }
            return;
        }
    }
}

/// Run what is queued (see [`Queue`]): mailed by a client that queued a
/// write while the core was taken, or not for a client thread to run.
pub struct Drain;

impl Message for Drain {
    type Result = ();
}

/// Stop: commit what is queued, make everything durable, then stop.
pub struct Shutdown {
    /// Signalled once the file is durable.
    pub done: tokio::sync::oneshot::Sender<()>,
}

impl Message for Shutdown {
    type Result = ();
}

/// Close the file and open it again (DEBUG RELOAD, see
/// `ShardSet::reopen`).
pub struct Reopen {
    /// The outcome.
    pub done: tokio::sync::oneshot::Sender<Result<(), StoreError>>,
}

impl Message for Reopen {
    type Result = ();
}

/// A coordinator takes this shard (see `coordinator`).
pub struct Lock {
    /// Steps to run while locked. The coordinator may queue them, and the
    /// commit, before the shard gets to this message: the shard runs them
    /// once its own queue has committed.
    pub steps: std::sync::mpsc::Receiver<super::coordinator::Step>,
}

impl Message for Lock {
    type Result = ();
}

/// The actor: the shard's mailbox and timers, over its core.
pub struct ShardActor {
    core: Arc<parking_lot::Mutex<ShardCore>>,
}

impl ShardActor {
    /// The actor of a shard's core.
    pub fn new(core: Arc<parking_lot::Mutex<ShardCore>>) -> ShardActor {
        ShardActor { core }
    }

    /// Its core, taken by the actor (see [`Taken`]).
    fn take(&self) -> Taken<'_> {
        Taken::new(self.core.lock(), true)
    }
}

/// A shard's mutable state: its counters and its durability bookkeeping
/// (the writes for its next batch wait in `ShardShared::queue`). Whoever
/// holds it (the actor, or a client thread in [`ShardCore::run_here`]) is
/// the shard's one writer.
pub struct ShardCore {
    shared: Arc<ShardShared>,
    state: ShardState,
    durability: Arc<crate::config::DurabilityCell>,
    max_batch: usize,
    /// Set once the shard has shut down: no write runs after its last sync.
    closed: bool,
    /// Commits made with Durability::None since the last durable one.
    unsynced: bool,
    /// The last multi-shard round committed here.
    last_round: u64,
    /// The latest state a batch read, kept for the next one (see
    /// `Store::latest_from`); dropped before the file is closed.
    kept_base: Option<Box<ReadCtx>>,
    /// The coordination log.
    intent: Arc<super::intent::IntentLog>,
    last_sync: Instant,
}

impl ShardCore {
    /// The core of an opened, initialised file.
    pub fn new(
        shared: Arc<ShardShared>,
        state: ShardState,
        durability: Arc<crate::config::DurabilityCell>,
        max_batch: usize,
        intent: Arc<super::intent::IntentLog>,
    ) -> ShardCore {
        shared.publish_counts(&state.counts);
        ShardCore {
            shared,
            state,
            durability,
            max_batch,
            closed: false,
            unsynced: false,
            last_round: 0,
            kept_base: None,
            intent,
            last_sync: Instant::now(),
        }
    }

    /// The shard's latest state, which a transaction's writes overlay:
    /// the one the last batch kept, while it still reads the store's
    /// buffers.
    fn base(&mut self) -> Result<Box<ReadCtx>, StoreError> {
        self.base_at(now_ms())
    }

    /// [`ShardCore::base`] as of `now_ms`.
    fn base_at(&mut self, now_ms: u64) -> Result<Box<ReadCtx>, StoreError> {
        let kept = self.kept_base.take();
        self.shared.store()?.latest_from(kept, now_ms)
    }

    /// Commits a transaction's changes: a commit of this shard alone,
    /// which needs no commit lock (that is for multi-shard commits: see
    /// `serve_lock`), so readers never wait for its fsync.
    fn commit(&mut self, ops: Vec<RowOp>) -> Result<(), StoreError> {
        let started = Instant::now();
        let fsynced = self.durability.get() == Durability::Always;
        self.shared.store()?.commit(ops, fsynced)?;
        self.shared.latency.commit_took(fsynced, started);
        self.note_commit();
        Ok(())
    }

    /// After a commit of this shard's own (a batch, a reaper slice).
    fn note_commit(&mut self) {
        self.shared.committed();
        if self.durability.get() == Durability::Always {
            // Durable, and with it every earlier round.
            self.shared.stats.durable_now();
            self.intent.durable(self.shared.id, self.last_round);
        } else {
            self.unsynced = true;
        }
        self.shared.publish_counts(&self.state.counts);
    }

    /// Runs a client's writes here, on the caller's thread, in one batch
    /// after whatever is queued (their clients get their replies as from
    /// the actor), and returns their replies in order; or hands the writes
    /// back, untouched, when the shard should take them through its actor
    /// instead (see [`ShardCore::runs_here`], [`ShardCore::defers_here`]).
    /// Under `always` the batch's commit is deferred (see
    /// `storage::group`): the replies come back with the commit they wait
    /// for, and the queued writes' clients get theirs once it is durable.
    pub fn run_here(&mut self, writes: Vec<WriteFn>) -> Result<Ran, Vec<WriteFn>> {
        let defer = !writes.is_empty() && self.defers_here();
        if !defer && !self.runs_here() {
            return Err(writes);
        }
        // The queued writes go first, in the same batch. The caller's own
        // are told apart by having no channel: their replies come back
        // here, without one channel each (at pipeline 1 the channel and
        // the queue's growth were ~10% of a batch's own work).
        let queued = self.take_queued();
        let n = queued.len() + writes.len();
        if n == 0 {
            // A kick whose queue another thread took first: no empty batch.
            return Ok(Ran::Done(Vec::new()));
        }
        let batch = queued
            .into_iter()
            .map(|s| (s.f, Some(s.reply)))
            .chain(writes.into_iter().map(|f| (f, None)));
        let mut replies = Vec::with_capacity(n);
        let mut theirs = Vec::new();
        let (pairs, deferred) = self.run_batch(batch, n, defer);
        for (reply, to) in pairs {
            match to {
                Some(tx) => theirs.push((reply, tx)),
                None => replies.push(reply),
            }
        }
        let Some(seq) = deferred else {
            Delivery::default().give_all(theirs);
            return Ok(Ran::Done(replies));
        };
        if !theirs.is_empty() {
            self.shared.after_durable(seq, replies_when_durable(theirs));
        }
        Ok(Ran::Pending(seq, replies))
    }

    /// The writes queued so far (see [`Queue`]), taken out.
    fn take_queued(&self) -> Vec<Submit> {
        std::mem::take(&mut self.shared.queue.lock().writes)
    }

    /// Applies the queued writes, `max_batch` to a transaction, commits,
    /// replies. Writes queued meanwhile are their queuers' to run, or the
    /// actor's: a thread running this never works for others forever.
    pub(super) fn flush(&mut self) {
        let mut queued = self.take_queued().into_iter();
        // One across the batches: a group may straddle two.
        let mut delivery = Delivery::default();
        loop {
            let batch: Vec<Submit> = queued.by_ref().take(self.max_batch).collect();
            if batch.is_empty() {
                return;
            }
            let n = batch.len();
            let (pairs, _) = self.run_batch(batch.into_iter().map(|s| (s.f, s.reply)), n, false);
            delivery.give_all(pairs);
        }
    }

    /// Applies `n` writes, each with where its reply goes, in one
    /// transaction and commits, counting the batch; a batch that failed
    /// answers each of them with its error. With `defer`, the commit is
    /// deferred (see `storage::group`) and its number comes back with the
    /// replies, which must wait for it.
    fn run_batch<T>(
        &mut self,
        batch: impl Iterator<Item = (WriteFn, T)>,
        n: usize,
        defer: bool,
    ) -> (Vec<(Reply, T)>, Option<u64>) {
        let (pairs, deferred) = match self.apply_batch(batch, n, defer) {
            Ok(ran) => ran,
            Err((e, to)) => {
                tracing::error!(shard = self.shared.id, error = %e, "batch aborted");
                let r = Reply::err(e);
                (to.into_iter().map(|t| (r.clone(), t)).collect(), None)
            }
        };
        use std::sync::atomic::Ordering::Relaxed;
        let stats = &self.shared.stats;
        let n = n as u64;
        stats.batches.fetch_add(1, Relaxed);
        stats.batch_ops.fetch_add(n, Relaxed);
        stats.max_batch.fetch_max(n, Relaxed);
        (pairs, deferred)
    }

    #[allow(clippy::type_complexity)]
    fn apply_batch<T>(
        &mut self,
        batch: impl Iterator<Item = (WriteFn, T)>,
        n: usize,
        defer: bool,
    ) -> Result<(Vec<(Reply, T)>, Option<u64>), (StoreError, Vec<T>)> {
        // One clock reading for the batch's wall time and its runs' first
        // mark (see `slowlog::runs_begin_at`).
        let began = Instant::now();
        let base = match self.base_at(crate::shard::now_ms_at(began)) {
            Ok(b) => b,
            Err(e) => return Err((e, batch.map(|(_, t)| t).collect())),
        };
        let mut out = Vec::with_capacity(n);
        let mut failure = None;
        let signals;
        // Signals already looked at for handoffs, and the clients served.
        let mut seen = 0;
        let mut served = Vec::new();
        let shared = self.shared.clone();
        let mut ops = Vec::new();
        {
            let mut ctx = shared.transaction(&base, &mut self.state);
            crate::families::slowlog::runs_begin_at(began);
            for (f, reply) in batch {
                if failure.is_some() {
                    out.push((Reply::Nil, reply));
                    continue;
                }
                let run = || {
                    ctx.counting(|ctx| {
                        let r = f(ctx)?;
                        // Keys a write's lookups found expired (reads expire
                        // theirs in `read_in_write` already).
                        crate::storage::keyspace::expire_noted(ctx)?;
                        serve_blocked(&shared, ctx, &mut seen, &mut served)?;
                        Ok(r)
                    })
                };
                let ran = crate::families::slowlog::run_item(|| {
                    std::panic::catch_unwind(AssertUnwindSafe(run))
                });
                match ran {
                    Ok(Ok(r)) => out.push((r, reply)),
                    Ok(Err(e)) => {
                        failure = Some(e);
                        out.push((Reply::Nil, reply));
                    }
                    Err(_) => {
                        failure = Some(StoreError::Internal("command panicked".into()));
                        out.push((Reply::Nil, reply));
                    }
                }
            }
            crate::families::slowlog::runs_end();
            signals = ctx.take_wakeups();
            if failure.is_none() {
                match ctx.finish() {
                    Ok(o) => ops = o,
                    Err(e) => failure = Some(e),
                }
            }
        }
        self.kept_base = Some(base);
        let result = match (failure, defer) {
            (None, false) => self.commit(ops).map(|()| None),
            (None, true) => self.commit_deferred(ops).map(Some),
            (Some(e), _) => Err(e),
        };
        match result {
            Ok(None) => settle(&self.shared, served, signals, true),
            Ok(Some(seq)) => {
                // Nothing the batch decided leaves the server before its
                // commit is durable: the clients it served, woke or sent
                // messages to hear of it then (see `storage::group`).
                let shared = self.shared.clone();
                let counts = self.state.counts;
                self.shared.after_durable(
                    seq,
                    Box::new(move |synced| {
                        if synced.is_ok() {
                            shared.committed();
                            shared.publish_counts(&counts);
                        }
                        settle(&shared, served, signals, synced.is_ok());
                    }),
                );
            }
            Err(_) => settle(&self.shared, served, signals, false),
        }
        match result {
            Ok(seq) => Ok((out, seq)),
            Err(e) => {
                self.reload_state();
                Err((e, out.into_iter().map(|(_, s)| s).collect()))
            }
        }
    }

    /// Commits a batch's changes under `always` without waiting for the
    /// fsync (see `storage::group`); returns the commit to wait for.
    fn commit_deferred(&mut self, ops: Vec<RowOp>) -> Result<u64, StoreError> {
        let started = Instant::now();
        let seq = self.shared.store()?.commit_deferred(ops)?;
        self.shared.latency.commit_took(false, started);
        Ok(seq)
    }

    /// Wakes clients blocked on keys that gained elements (after commit).
    fn wake(&self, w: Wakeups) {
        wake(&self.shared, w)
    }

    /// After an aborted transaction the in-memory counters may be ahead of
    /// the file; reread them.
    fn reload_state(&mut self) {
        match self.base().and_then(|base| ShardState::load(&*base)) {
            Ok(s) => self.state = s,
            Err(e) => {
                tracing::error!(shard = self.shared.id, error = %e, "cannot reload shard state")
            }
        }
    }

    /// Makes every earlier commit durable.
    fn sync(&mut self) -> Result<(), StoreError> {
        // A round must never be durable here and lost from the log.
        self.intent
            .sync()
            .map_err(|e| StoreError::Internal(format!("coordination log: {e}")))?;
        let started = Instant::now();
        self.shared.store()?.sync()?;
        use crate::families::latency::SHARD_SYNC;
        self.shared.latency.observe_since(SHARD_SYNC, started);
        self.shared.stats.durable_now();
        self.intent.durable(self.shared.id, self.last_round);
        self.unsynced = false;
        self.last_sync = Instant::now();
        Ok(())
    }

    /// How long commits may stay unsynced under the policy in force.
    fn sync_interval(&self) -> Duration {
        match self.durability.get() {
            // Only multi-shard rounds leave commits unsynced under
            // `always` (the log holds them); syncing lets the log be cut.
            Durability::Always => Duration::from_secs(1),
            Durability::Everysec => Duration::from_secs(1),
            Durability::No => Duration::from_secs(30),
        }
    }

    /// One bounded slice of active expiry and garbage collection.
    fn reap(&mut self) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.shared.switches.cron_paused.load(Relaxed) {
            return Ok(());
        }
        let base = self.base()?;
        let mut stats = ReapStats::default();
        let wakeups;
        let ops;
        {
            let mut ctx = self.shared.transaction(&base, &mut self.state);
            // Under CLIENT PAUSE nothing may change, expiry included
            // (expired keys still read as missing); DEBUG SET-ACTIVE-EXPIRE
            // 0 turns expiry off.
            if !self.shared.pause.writes_paused()
                && self.shared.switches.active_expire.load(Relaxed)
                && !self.shared.switches.replica.load(Relaxed)
            {
                keyspace::reap_expired(&mut ctx, REAP_KEYS_PER_TICK, &mut stats)?;
            }
            keyspace::collect_garbage(&mut ctx, GC_ROWS_PER_TICK, &mut stats)?;
            // Expired streams wake their blocked group readers.
            wakeups = ctx.take_wakeups();
            ops = ctx.finish()?;
        }
        self.kept_base = Some(base);
        let shared = self.shared.clone();
        let s = &shared.stats;
        s.reaper_ticks.fetch_add(1, Relaxed);
        if stats.expired == 0 && stats.gc_rows == 0 && stats.gc_versions == 0 {
            return Ok(());
        }
        // Counted before the commit makes the slice visible: whoever sees
        // the rows gone (a test polling INFO) sees them counted.
        s.expired_keys.fetch_add(stats.expired, Relaxed);
        s.gc_rows.fetch_add(stats.gc_rows, Relaxed);
        s.gc_versions.fetch_add(stats.gc_versions, Relaxed);
        self.commit(ops)?;
        self.wake(wakeups);
        Ok(())
    }

    /// DEBUG RELOAD on this shard: commit what is queued, make it durable,
    /// close the file and open it again, and take the state it holds.
    fn reopen(&mut self) -> Result<(), StoreError> {
        self.flush();
        self.sync()?;
        self.kept_base = None;
        let shared = self.shared.clone();
        // No reader takes a snapshot (to cache) while the file changes.
        let _visible = shared.commit_lock.write();
        let reopened = shared.reopen();
        // Readers must open fresh snapshots, of the new file.
        shared.committed();
        self.state = reopened?;
        shared.publish_counts(&self.state.counts);
        Ok(())
    }

    /// Whether a client's thread may run writes here now with a commit
    /// visible at once: not under `always` (where it may defer the commit
    /// of its own writes instead: [`ShardCore::defers_here`], but leaves
    /// writes queued by others to the actor, whose commit syncs); not
    /// while the write buffers are past three quarters of their cap,
    /// where commits are slowed down by sleeping (see `Store::commit`);
    /// not once the shard has shut down.
    pub(super) fn runs_here(&self) -> bool {
        let calm = self.shared.store().is_ok_and(|s| s.calm());
        !self.closed && self.durability.get() != Durability::Always && calm
    }

    /// Whether a client's thread may run its writes here now under
    /// `always`, deferring their commit (see `storage::group`): on the
    /// conditions of [`ShardCore::runs_here`] but the first.
    pub(super) fn defers_here(&self) -> bool {
        !self.closed
            && self.durability.get() == Durability::Always
            && self.shared.store().is_ok_and(|s| s.calm())
    }

    /// Whether the shard must sync before it takes part in a round: only
    /// when the coordination log is long, which is cut back once every
    /// shard has made its rounds durable. (Redo after a crash needs the
    /// state a round began from on each shard to be recoverable; the
    /// shard's log holds it, and it is made durable before any other
    /// shard's log generation holding the round is: `set::rotation_hooks`.)
    fn must_sync_for_round(&self) -> bool {
        self.unsynced && self.intent.over_cap()
    }

    /// Whether a thread holding this core (a client's, or the
    /// coordinator task's) may run a multi-shard round here (see
    /// `ShardSet::run_round_here`): as for a client's writes, and only if
    /// the round needs no sync first (that is the actor's to do). Under
    /// `always` only the coordinator's thread may, on the conditions of
    /// [`ShardCore::defers_here`]: its rounds' records are fsynced, and it
    /// makes a shard's deferred commits durable before a round begins
    /// there ([`ShardCore::ready_for_round`]), as the actor would.
    pub(super) fn takes_round_here(&self, client: bool) -> bool {
        match self.durability.get() {
            Durability::Always => !client && self.defers_here(),
            _ => self.runs_here() && !self.must_sync_for_round(),
        }
    }

    /// Makes the state a round begins from here durable where its redo
    /// after a crash needs it (see `intent`): when the coordination log
    /// is long, and under `always` when clients' threads left deferred
    /// commits (see `storage::group`).
    fn ready_for_round(&mut self) -> Result<(), StoreError> {
        let deferred = self.shared.store().is_ok_and(|s| s.awaits_sync());
        match self.must_sync_for_round() || deferred {
            true => self.sync(),
            false => Ok(()),
        }
    }

    /// Serves a coordinator until it commits or aborts.
    fn serve_lock(&mut self, lock: Lock) {
        use super::coordinator::Step;
        self.flush();
        if let Err(e) = self.ready_for_round() {
            tracing::error!(shard = self.shared.id, error = %e, "cannot lock shard");
            return;
        }
        let base = match self.base() {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(shard = self.shared.id, error = %e, "cannot lock shard");
                return; // the coordinator sees the step channel closed and fails
            }
        };
        let shared = self.shared.clone();
        let mut ctx = shared.transaction(&base, &mut self.state);
        // A failed step dooms the round: the coordinator may have asked for
        // the commit before it saw the failure, so the shard remembers it.
        let mut step_failed = false;
        let outcome = loop {
            match lock.steps.recv() {
                Ok(Step::Run(f, place, tx)) => {
                    let r = run_step(&mut ctx, f, place);
                    step_failed |= r.is_err();
                    let _ = tx.send(r);
                }
                Ok(Step::Commit {
                    barrier,
                    failed,
                    round,
                    done,
                }) => break Some((barrier, failed, round, done)),
                // Abort, or the coordinator vanished: roll back.
                Ok(Step::Abort) | Err(_) => break None,
            }
        };
        let Some((barrier, failed, round, done)) = outcome else {
            drop(ctx);
            drop(base);
            self.reload_state();
            return;
        };
        let (finished, signals) = seal(&shared, ctx, &round);
        drop(base);
        if step_failed || finished.is_err() {
            failed.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        // Every participant holds its commit lock before any commits, and
        // releases it only after all have committed. After the first
        // barrier every participant has said whether it failed and handed
        // in its changes; one of them logs the round; after the second all
        // of them commit, or all roll back.
        let visible = shared.commit_lock.write();
        if barrier.wait().is_leader() && !failed.load(std::sync::atomic::Ordering::SeqCst) {
            if let Err(e) = round.append() {
                tracing::error!(error = %e, "cannot log a multi-shard commit");
                failed.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        barrier.wait();
        // The round's record is its durability: the log append needs no
        // fsync of its own.
        let result = if failed.load(std::sync::atomic::Ordering::SeqCst) {
            finished.and(Err(round_aborted()))
        } else {
            finished.and_then(|ops| commit_part(&self.shared, ops))
        };
        let publisher = barrier.wait().is_leader();
        drop(visible);
        if publisher && result.is_ok() {
            round.publish(&self.shared.hub);
        }
        self.settle_round(&result, round.txid, signals);
        let _ = done.send(result.map_err(|e| e.to_string()));
    }

    /// After a round's commit (or its failure) here.
    fn settle_round(&mut self, result: &Result<(), StoreError>, txid: u64, signals: Wakeups) {
        match result {
            Ok(()) => {
                self.last_round = txid;
                self.unsynced = true;
                self.shared.publish_counts(&self.state.counts);
                self.shared
                    .stats
                    .coordinated
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.wake(signals);
            }
            Err(_) => self.reload_state(),
        }
    }
}

/// Commits a shard's part of a round, under its commit lock: it is
/// counted before the lock goes, so that a reader let in by the release
/// opens a new snapshot rather than reusing an older one.
fn commit_part(shared: &ShardShared, ops: Vec<RowOp>) -> Result<(), StoreError> {
    shared.store()?.commit(ops, false)?;
    shared.committed();
    Ok(())
}

/// Runs one step of a round in a participant's transaction.
fn run_step(
    ctx: &mut WriteCtx,
    f: super::coordinator::StepFn,
    place: u64,
) -> Result<super::coordinator::StepOut, StoreError> {
    ctx.message_place = (place, 0);
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        ctx.counting(|ctx| {
            let r = f(ctx)?;
            crate::storage::keyspace::expire_noted(ctx)?;
            Ok(r)
        })
    }))
    .unwrap_or_else(|_| Err(StoreError::Internal("step panicked".into())))
}

/// Closes a participant's transaction once its steps have run: its
/// messages and tracked keys go to the round (published with everyone's
/// once all have committed), the round id and participants to its `sys`
/// table (which mark the shard log's record as a part of the round, for
/// recovery: `intent::plan_recovery`), and its changes, encoded, to the
/// round's record, unless the round has none (`CommitRound::record`).
/// Returns the changes to commit and what to wake after the commit.
fn seal(
    shared: &ShardShared,
    mut ctx: WriteCtx,
    round: &super::coordinator::CommitRound,
) -> (Result<Vec<RowOp>, StoreError>, Wakeups) {
    let places = std::mem::take(&mut ctx.message_places);
    let mut signals = ctx.take_wakeups();
    round.messages.lock().extend(
        places
            .into_iter()
            .zip(std::mem::take(&mut signals.messages)),
    );
    if signals.flushed.is_empty() {
        round.tracked.lock().append(&mut signals.tracked);
    }
    if !round.record {
        return (ctx.finish(), signals);
    }
    // Where the round begins here: the shard's core is held, so its part
    // is the commit right after this one.
    let start = shared.store().map_or(0, |s| s.last_seq());
    let finished = ctx
        .put(
            Table::Sys,
            super::intent::COORD_ROW,
            &round.txid.to_be_bytes(),
        )
        .and_then(|()| ctx.put(Table::Sys, super::intent::WITH_ROW, &round.with))
        .and_then(|()| ctx.finish());
    if let Ok(ops) = &finished {
        round
            .parts
            .lock()
            .push(super::intent::encode_part(shared.id, start, ops));
    }
    (finished, signals)
}

/// Why a round that did not commit failed, on the shards' threads
/// (`serve_lock`) and where it runs here alike, so its clients read one
/// error either way.
fn round_aborted() -> StoreError {
    StoreError::Internal("round aborted".into())
}

/// Runs a round of blind plans on the calling thread, which holds the
/// core of every shard they name, in `cores` (ascending), and has taken
/// the round's id (see `ShardSet::run_round_here`); commits it as the
/// shards' threads would in `serve_lock`, with the same record in the
/// coordination log, and returns the plans' replies, in order (each the
/// round's error if it failed). The steps the plans send wait in `locked`
/// until this thread runs them, between polls of the plans' futures; a
/// blind plan sends them all when it is called, so one pass runs it.
/// From `spread_from` steps in that pass, each shard's part runs on a
/// thread of the round pool (see [`spread_from`]); the cores stay with
/// this thread, which waits for them.
pub(super) fn run_round_here(
    cores: &mut [Taken<'_>],
    locked: Arc<super::coordinator::Locked>,
    plans: Vec<super::coordinator::Plan>,
    round: super::coordinator::CommitRound,
    spread_from: usize,
) -> Vec<Reply> {
    use super::coordinator::CoordError;
    use std::future::Future as _;
    use std::task::{Context, Poll, Waker};
    let n = plans.len();
    let all = |r: Reply| vec![r; n];
    for core in cores.iter_mut() {
        core.flush();
        if let Err(e) = core.ready_for_round() {
            return all(Reply::err(e));
        }
    }
    let shareds: Vec<Arc<ShardShared>> = cores.iter().map(|c| c.shared.clone()).collect();
    let bases = match cores
        .iter_mut()
        .map(|c| c.base())
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(b) => b,
        Err(e) => return all(Reply::err(e)),
    };
    let mut ctxs: Vec<WriteCtx> = cores
        .iter_mut()
        .zip(&bases)
        .zip(&shareds)
        .map(|((core, base), shared)| shared.transaction(base, &mut core.state))
        .collect();
    // Called in order, as the coordinator calls a round's blind plans:
    // each shard then runs the steps in the order the plans sent them.
    // Unconstrained: on a tokio thread, each ready step result polled
    // would spend the task's budget, and past it read as not ready.
    let mut futs: Vec<_> = plans
        .into_iter()
        .map(|p| Some(Box::pin(tokio::task::unconstrained(p(locked.clone())))))
        .collect();
    let mut answers: Vec<Option<super::coordinator::PlanResult>> = (0..n).map(|_| None).collect();
    let mut cx = Context::from_waker(Waker::noop());
    let mut step_failed = false;
    // Decided on the first pass, which holds every blind plan's steps.
    let mut wide = None;
    loop {
        let queues = locked.take_queued();
        let steps: usize = queues.iter().map(Vec::len).sum();
        let ran = steps > 0;
        // A later pass with nothing to run (a plan still waiting) runs
        // nothing anywhere.
        let spread = *wide.get_or_insert(queues.len() > 1 && steps >= spread_from) && ran;
        let failed = per_shard(spread, ctxs.iter_mut().zip(queues), |(ctx, queue)| {
            let mut failed = false;
            crate::families::slowlog::runs_begin();
            for (f, place, tx) in queue {
                let r = crate::families::slowlog::run_item(|| run_step(ctx, f, place));
                failed |= r.is_err();
                let _ = tx.send(r);
            }
            crate::families::slowlog::runs_end();
            failed
        });
        step_failed |= failed.contains(&true);
        for (fut, answer) in futs.iter_mut().zip(answers.iter_mut()) {
            if let Some(f) = fut {
                if let Poll::Ready(r) = f.as_mut().poll(&mut cx) {
                    *answer = Some(r);
                    *fut = None;
                }
            }
        }
        if !ran || answers.iter().all(Option::is_some) {
            // A plan still waiting on something other than its steps is
            // not blind: it fails the round.
            break;
        }
    }
    drop(futs);
    let rollback = |cores: &mut [Taken<'_>], why: Reply| {
        for core in cores.iter_mut() {
            core.reload_state();
        }
        all(why)
    };
    let spread = wide.unwrap_or(false);
    let sealed = per_shard(spread, ctxs.into_iter().zip(&shareds), |(ctx, shared)| {
        seal(shared, ctx, &round)
    });
    drop(bases);
    let mut replies = Vec::with_capacity(n);
    for answer in answers {
        match answer {
            Some(Ok(Ok(r) | Err(r))) => replies.push(r),
            Some(Err(e)) => return rollback(cores, Reply::err(e)),
            None => return rollback(cores, Reply::err(CoordError::Unavailable)),
        }
    }
    if step_failed {
        let why = CoordError::Commit(round_aborted().to_string());
        return rollback(cores, Reply::err(why));
    }
    let mut parts = Vec::with_capacity(sealed.len());
    for (ops, signals) in sealed {
        match ops {
            Ok(ops) => parts.push((ops, signals)),
            Err(e) => return rollback(cores, Reply::err(e)),
        }
    }
    let visible: Vec<_> = shareds.iter().map(|s| s.commit_lock.write()).collect();
    if let Err(e) = round.append() {
        tracing::error!(error = %e, "cannot log a multi-shard commit");
        drop(visible);
        return rollback(cores, Reply::err(CoordError::Commit(e.to_string())));
    }
    let results = per_shard(
        spread,
        shareds.iter().zip(parts),
        |(shared, (ops, signals))| (commit_part(shared, ops), signals),
    );
    drop(visible);
    let failure = results
        .iter()
        .find_map(|(r, _)| r.as_ref().err())
        .map(|e| e.to_string());
    if failure.is_none() {
        round.publish(&shareds[0].hub);
    }
    for (core, (result, signals)) in cores.iter_mut().zip(results) {
        if result.is_ok() {
            let here = &core.shared.stats.coordinated_here;
            here.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        core.settle_round(&result, round.txid, signals);
    }
    match failure {
        None => replies,
        Some(e) => all(Reply::err(CoordError::Commit(e))),
    }
}

/// Steps a round run here takes at least before its shards' work is
/// spread over threads of their own (see [`spread_from`]).
const SPREAD_STEPS: usize = 256;

/// From how many steps a round run here runs each shard's part (its
/// steps, its seal, its commit) on a thread of its own. One thread
/// holding every shard's core runs pipelined writes over random keys one
/// shard after another, and so bounds them at one core's worth, however
/// many shards there are: on 16 cores with 8 shards, SET and INCR at
/// -c 256 -P 16 stopped at 380k and 319k a second with two cores busy;
/// spread, at 887k and 665k (docs/DESIGN-NOTES.md). Handing a part to a
/// parked thread and waiting for it costs some microseconds, so only a
/// round with enough work spreads, and only where there are cores to
/// spread over (on 2 cores the threads would just take turns): never
/// there.
pub(super) fn spread_from() -> usize {
    match crate::util::cores() {
        0..=2 => usize::MAX,
        _ => SPREAD_STEPS,
    }
}

/// Runs `f` on each item (one per shard), on the round pool's threads if
/// `spread` (the first on this thread), and returns the outputs in order.
fn per_shard<T: Send, U: Send>(
    spread: bool,
    items: impl Iterator<Item = T>,
    f: impl Fn(T) -> U + Sync,
) -> Vec<U> {
    if !spread {
        return items.map(f).collect();
    }
    let items: Vec<T> = items.collect();
    let mut out: Vec<Option<U>> = (0..items.len()).map(|_| None).collect();
    let f = &f;
    round_pool().in_place_scope(|scope| {
        let mut pairs = items.into_iter().zip(out.iter_mut());
        let first = pairs.next();
        for (item, slot) in pairs {
            scope.spawn(move |_| *slot = Some(f(item)));
        }
        // A panic in any of them (a step's own is caught in `run_step`)
        // comes back out of the scope, as it would have on this thread.
        if let Some((item, slot)) = first {
            *slot = Some(f(item));
        }
    });
    out.into_iter()
        .map(|u| u.expect("each shard's part ran"))
        .collect()
}

/// The threads rounds spread over: one fewer than the cores (the round's
/// own thread runs a part too), parked between rounds.
fn round_pool() -> &'static rayon_core::ThreadPool {
    static POOL: std::sync::OnceLock<rayon_core::ThreadPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon_core::ThreadPoolBuilder::new()
            .num_threads(crate::util::cores().saturating_sub(1).clamp(1, 15))
            .thread_name(|i| format!("cairn-round-{i}"))
            .build()
            .expect("the round pool's threads start")
    })
}

/// Tells tracking clients of the keys committed writes changed, and has
/// the reads inside EXEC tracked, in the order the unit made them (a
/// multi-shard commit's, across its shards).
pub(super) fn invalidate(
    hub: &crate::pubsub::Hub,
    mut changes: Vec<crate::storage::tables::KeyChange>,
) {
    use crate::storage::tables::Touch;
    if changes.is_empty() {
        return;
    }
    // Stable: a step's own changes keep their order.
    changes.sort_by_key(|(place, _)| *place);
    let mut run = Vec::new();
    for (_, touch) in changes {
        match touch {
            Touch::Changed(key, writer) => run.push((key, writer)),
            Touch::Read(key, id) => {
                if !run.is_empty() {
                    hub.tracking.invalidate(&std::mem::take(&mut run));
                }
                hub.tracking.remember(id, &key);
            }
        }
    }
    if !run.is_empty() {
        hub.tracking.invalidate(&run);
    }
}

/// Publishes the messages of committed writes, in order; each subscriber
/// is woken once, after the last.
pub(super) fn publish(
    hub: &crate::pubsub::Hub,
    messages: impl IntoIterator<Item = crate::storage::tables::Message>,
) {
    use crate::pubsub::Kind;
    use crate::storage::tables::Route;
    let mut wakes = crate::pubsub::Wakes::default();
    for (route, channel, message) in messages {
        let wakes = Some(&mut wakes);
        match route {
            Route::Channel => hub.publish(Kind::Channel, &channel, &message, wakes),
            Route::ShardChannel => hub.publish(Kind::Shard, &channel, &message, wakes),
            Route::Local => hub.publish_local(Kind::Channel, &channel, &message, wakes),
        };
    }
}

impl ShardCore {
    /// A reaper tick: one slice of expiry and garbage collection.
    fn reap_tick(&mut self) {
        let started = Instant::now();
        if let Err(e) = self.reap() {
            tracing::error!(shard = self.shared.id, error = %e, "reaper slice failed");
            // The counters may be ahead of what was committed.
            self.reload_state();
        }
        use crate::families::latency::EXPIRE_CYCLE;
        self.shared.latency.observe_since(EXPIRE_CYCLE, started);
    }

    /// A durability tick: syncs if commits have been unsynced for longer
    /// than the policy allows.
    fn sync_tick(&mut self) {
        // Deferred commits are synced by their clients' threads; should
        // one be left (its client gone before it synced), this does it.
        let left = self.shared.store().is_ok_and(|s| s.awaits_sync());
        if left || (self.unsynced && self.last_sync.elapsed() >= self.sync_interval()) {
            if let Err(e) = self.sync() {
                tracing::error!(shard = self.shared.id, error = %e, "sync failed");
            }
        }
    }

    /// A `Lock` counted in `mailed` has left the mailbox: the core is held
    /// until its round commits, so a connection running writes here can no
    /// longer overtake it.
    fn taken_from_mailbox(&self) {
        use std::sync::atomic::Ordering::AcqRel;
        self.shared.mailed.fetch_sub(1, AcqRel);
    }

    /// Commits what is queued, makes it durable and takes no more writes.
    fn shut_down(&mut self) {
        self.flush();
        let left = {
            let mut queue = self.shared.queue.lock();
            queue.closed = true;
            std::mem::take(&mut queue.writes)
        };
        // Queued after the last batch: their clients read a closed channel.
        drop(left);
        self.kept_base = None;
        if self.unsynced {
            if let Err(e) = self.sync() {
                tracing::error!(shard = self.shared.id, error = %e, "final sync failed");
            }
        }
        self.closed = true;
    }
}

impl Actor for ShardActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Clients may flood the mailbox; never let it push back on them.
        ctx.set_mailbox_capacity(1 << 24);
        ctx.run_interval(REAPER_INTERVAL, |act, _| act.take().reap_tick());
        ctx.run_interval(Duration::from_millis(100), |act, _| act.take().sync_tick());
    }
}

impl Handler<Drain> for ShardActor {
    type Result = ();

    fn handle(&mut self, _: Drain, _: &mut Self::Context) {
        let mut core = self.take();
        // Writes queued from here on need a Drain of their own, unless
        // this batch takes them (then that Drain finds nothing).
        core.shared.queue.lock().woken = false;
        core.flush();
    }
}

impl Handler<Lock> for ShardActor {
    type Result = ();

    fn handle(&mut self, msg: Lock, _: &mut Self::Context) {
        let mut core = self.take();
        core.taken_from_mailbox();
        core.serve_lock(msg);
    }
}

impl Handler<Reopen> for ShardActor {
    type Result = ();

    fn handle(&mut self, msg: Reopen, _: &mut Self::Context) {
        let mut core = self.take();
        let r = core.reopen();
        if let Err(e) = &r {
            tracing::error!(shard = core.shared.id, error = %e, "DEBUG RELOAD cannot reopen the shard");
        }
        let _ = msg.done.send(r);
    }
}

impl Handler<Shutdown> for ShardActor {
    type Result = ();

    fn handle(&mut self, msg: Shutdown, ctx: &mut Self::Context) {
        self.take().shut_down();
        ctx.stop();
        let _ = msg.done.send(());
    }
}

/// After a batch's commit (`committed`), or its failure: the blocked
/// clients it served get their replies, and those waiting on the keys it
/// fed are woken; on failure the pops did not happen, and the served wait
/// again.
fn settle(
    shared: &ShardShared,
    served: Vec<(Arc<Waiter>, Reply)>,
    signals: Wakeups,
    committed: bool,
) {
    if committed {
        for (w, r) in served {
            deliver(&w, r);
        }
        wake(shared, signals);
    } else {
        for (w, _) in served {
            *w.stage.lock() = Stage::Waiting;
            w.notify.notify_one();
        }
    }
}

/// Wakes clients blocked on keys that gained elements, and sends what a
/// commit published and the invalidations it caused (after the commit).
fn wake(shared: &ShardShared, w: Wakeups) {
    use std::sync::atomic::Ordering::Relaxed;
    let (hits, misses) = w.lookups;
    shared.stats.hits.fetch_add(hits, Relaxed);
    shared.stats.misses.fetch_add(misses, Relaxed);
    shared.stats.expired_keys.fetch_add(w.expired, Relaxed);
    shared.stats.changes.fetch_add(w.changes, Relaxed);
    let blocked = &shared.blocked;
    for (db, key) in w.signals {
        blocked.signal(db, &key);
    }
    for (db, key) in w.broadcasts {
        blocked.broadcast(db, &key);
    }
    for &db in &w.flushed {
        blocked.broadcast_db(db);
    }
    publish(&shared.hub, w.messages);
    // A flush tells every tracking client to drop everything, once (from
    // shard 0, which every flush includes): the keys it removed need no
    // messages of their own.
    if !w.flushed.is_empty() {
        if shared.id == 0 {
            shared.hub.tracking.invalidate_all();
        }
    } else if !w.tracked.is_empty() {
        invalidate(&shared.hub, w.tracked);
    }
}

/// Hands a committed handoff's reply to the blocked client (gone clients
/// lose it, as a Redis client that disconnects right after being served).
fn deliver(w: &Waiter, reply: Reply) {
    if let Some(tx) = w.handoff.as_ref().and_then(|h| h.deliver.lock().take()) {
        let _ = tx.send(reply);
    }
    // The client may sleep on its keys, and the wake-up after the commit
    // goes to each key's oldest waiter, which need not be this one.
    w.notify.notify_one();
}

/// Serves blocked clients of the keys this transaction fed since the
/// last call (see `blocking::Handoff`), oldest first, inside the
/// transaction: before the batch's next op, as Redis serves them before
/// its next command. A pop that feeds another key (BLMOVE) is followed
/// in turn. Replies are delivered after the commit.
fn serve_blocked(
    shared: &ShardShared,
    ctx: &mut WriteCtx,
    seen: &mut usize,
    served: &mut Vec<(Arc<Waiter>, Reply)>,
) -> Result<(), StoreError> {
    while *seen < ctx.signals.len() {
        // Looked up in place: a push signals its key on every call, and
        // hardly ever has a waiter to serve.
        let waiters = {
            let (db, key) = &ctx.signals[*seen];
            shared.blocked.handoffs(*db, key, shared.id)
        };
        *seen += 1;
        for w in waiters {
            let mut stage = w.stage.lock();
            if *stage != Stage::Waiting {
                continue;
            }
            let Some(f) = w.handoff.as_ref().and_then(|h| (h.attempt)()) else {
                continue;
            };
            let r = f(ctx)?;
            // An error is the client's answer too (BLMOVE onto a key of
            // another type), as Redis unblocks it with the error; the
            // handoff already turned what only means "not yet" into nil.
            if serves(&r) || matches!(r, Reply::Error(_)) {
                *stage = Stage::Served;
                drop(stage);
                served.push((w, r));
            }
        }
    }
    Ok(())
}

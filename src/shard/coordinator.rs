//! Multi-shard commands: ask the shards for their locks in ascending id order, run steps in
//! each one's write transaction, then commit all of them at once (see the
//! parent module for the visibility rule).
//!
//! # Group commit across shards
//! All multi-shard commands go through one coordinator task. It takes every
//! command waiting for it (up to [`MAX_ROUND`]), locks the union of their
//! shards once, runs the commands' plans one after another inside those
//! transactions, and commits them together: many MSETs share one lock round
//! and one commit per shard, as single-shard writes share a batch.
//!
//! A round of blind commands whose shards are free runs on the thread
//! that has it (`ShardSet::run_round_here`): the coordinator's own, or a
//! client's while the coordinator is quiet. Its [`Locked`] then queues the
//! steps for that thread, which holds every shard's core, and the round
//! commits the same way with the same log record.
//!
//! A plan that decides not to write (RENAMENX onto an existing key, MSETNX
//! with a key present) must not have written anything before deciding; a
//! storage failure aborts the whole round and every plan in it gets the
//! error.
//!
//! The coordinator is a task of its own, so a client that vanishes
//! mid-command cannot leave half of it applied.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use super::actor::Lock;
use super::set::ShardSet;
use crate::protocol::Reply;
use crate::storage::{StoreError, WriteCtx};

/// Most commands one coordinator round takes.
pub const MAX_ROUND: usize = 512;

/// What a step hands back to the coordinator.
pub type StepOut = Box<dyn Any + Send>;

/// A step: runs on one locked shard's thread, in its open transaction.
pub type StepFn = Box<dyn FnOnce(&mut WriteCtx) -> Result<StepOut, StoreError> + Send>;

/// Messages a locked shard obeys.
pub enum Step {
    /// Run a step and send back its result. The number is the step's
    /// place in the round (across all its shards), which orders the
    /// round's messages.
    Run(
        StepFn,
        u64,
        tokio::sync::oneshot::Sender<Result<StepOut, StoreError>>,
    ),
    /// Commit together with the other participants, unless one of them
    /// failed a step.
    Commit {
        /// Shared by all participants: everyone holds its commit lock before
        /// anyone commits, and keeps it until all have committed.
        barrier: Arc<Barrier>,
        /// Set before the first barrier by any participant that failed a
        /// step; read after it by all, so they all roll back together.
        failed: Arc<AtomicBool>,
        /// The round's record in the coordination log.
        round: Arc<CommitRound>,
        /// The commit's outcome.
        done: tokio::sync::oneshot::Sender<Result<(), String>>,
    },
    /// Roll back.
    Abort,
}

/// One round's commit as the coordination log sees it (see
/// `shard::intent`): the participants hand in their changes, and the one
/// the barrier picks appends them as one record before anyone commits.
pub struct CommitRound {
    /// The round's id.
    pub txid: u64,
    /// Its participants' ids, ascending, as each participant's `sys` row
    /// holds them (`intent::encode_with`): encoded once for all of them.
    pub with: Vec<u8>,
    /// The participants' changes, as they hand them in.
    pub parts: parking_lot::Mutex<Vec<super::intent::EncodedPart>>,
    /// The log.
    pub log: Arc<super::intent::IntentLog>,
    /// Whether the record must be fsynced before the participants commit
    /// (`durability = always`).
    pub sync: bool,
    /// Whether the round is logged at all: not a round of pipelines'
    /// independent writes run where it was gathered (under `everysec` or
    /// `no`: see `ShardSet::run_round_here`). Those writes are separate
    /// commands, each on one shard, so nothing ties one shard's part to
    /// another's after a crash, any more than writes sent one at a time
    /// are tied; each part commits and recovers as a batch of its own.
    /// The record was a third copy of every row such a pipeline wrote
    /// (the shard logs and the value log hold the others).
    pub record: bool,
    /// The messages (keyspace events, PUBLISH) of every participant, each
    /// with the place of the step that made it: published together, in
    /// step order, once all have committed, so a command over keys of
    /// several shards reports its events in the order Redis would.
    pub messages: parking_lot::Mutex<Vec<((u64, u64), crate::storage::tables::Message)>>,
    /// The keys every participant changed while clients track keys, told
    /// to them like the messages.
    pub tracked: parking_lot::Mutex<Vec<crate::storage::tables::KeyChange>>,
}

impl CommitRound {
    /// Appends the round's record, the participants' parts in shard
    /// order, to the coordination log: before any participant commits.
    pub(super) fn append(&self) -> std::io::Result<()> {
        if !self.record {
            return Ok(());
        }
        let mut parts = std::mem::take(&mut *self.parts.lock());
        parts.sort_unstable_by_key(|(id, _)| *id);
        self.log.append_encoded(self.txid, &parts, self.sync)
    }

    /// Publishes the messages and invalidations of every participant, in
    /// step order, once all have committed.
    pub(super) fn publish(&self, hub: &crate::pubsub::Hub) {
        let mut messages = std::mem::take(&mut *self.messages.lock());
        // Stable: a step's own messages keep their order.
        messages.sort_by_key(|(place, _)| *place);
        super::actor::publish(hub, messages.into_iter().map(|(_, m)| m));
        super::actor::invalidate(hub, std::mem::take(&mut *self.tracked.lock()));
    }
}

/// What a plan decides: `Ok(reply)` (its writes stand) or `Err(reply)` (it
/// wrote nothing), or a coordination failure that aborts the round.
pub type PlanResult = Result<Result<Reply, Reply>, CoordError>;

/// A multi-shard command's body, run with its shards locked.
pub type Plan =
    Box<dyn FnOnce(Arc<Locked>) -> Pin<Box<dyn Future<Output = PlanResult> + Send>> + Send>;

/// Shards held by one coordinator round.
pub struct Locked {
    /// Shard ids, ascending.
    ids: Vec<usize>,
    /// The coordination log and whether records are fsynced.
    log: (Arc<super::intent::IntentLog>, bool),
    /// Where steps go.
    route: Route,
    /// Set once the commit or the rollback has been asked for.
    finished: AtomicBool,
    /// Steps sent so far: the next step's place in the round.
    steps_sent: std::sync::atomic::AtomicU64,
    /// Set when the round runs a command of the primary this server
    /// replicates: every step runs under `WriteCtx::as_primary`.
    primary: AtomicBool,
}

/// Where a round's steps go: to the shards' threads, or to the caller's
/// thread, which holds every shard's core (see `ShardSet::run_round_here`).
enum Route {
    /// A channel to each locked shard's actor, in `ids` order.
    Shards(Vec<std::sync::mpsc::Sender<Step>>),
    /// Per shard (in `ids` order), the steps sent and not yet run: the
    /// caller runs them between polls of the plan.
    Here(parking_lot::Mutex<Vec<Vec<Queued>>>),
}

/// A step waiting to run: the step, its place in the round, and where its
/// result goes.
pub(super) type Queued = (
    StepFn,
    u64,
    tokio::sync::oneshot::Sender<Result<StepOut, StoreError>>,
);

/// Why a coordinated command failed.
#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    /// A shard stopped (shutting down) or failed to start a transaction.
    #[error("shard unavailable")]
    Unavailable,
    /// A step failed in storage.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A commit failed.
    #[error("commit failed: {0}")]
    Commit(String),
}

/// A step sent to a locked shard whose result has not been awaited yet.
pub struct Pending<T> {
    rx: tokio::sync::oneshot::Receiver<Result<StepOut, StoreError>>,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T: Any + Send> Pending<T> {
    /// Waits for the step's result.
    pub async fn wait(self) -> Result<T, CoordError> {
        let out = self.rx.await.map_err(|_| CoordError::Unavailable)??;
        Ok(*out.downcast::<T>().expect("step output type"))
    }
}

impl Locked {
    /// The locked shards, ascending.
    pub fn ids(&self) -> &[usize] {
        &self.ids
    }

    /// Asks the given shards (any order, duplicates allowed) for their
    /// locks, in ascending id order, without waiting for them: steps sent
    /// now run once each shard has committed what it was doing (its own
    /// batch, or the previous round). No lock order can deadlock: the
    /// coordinator task is the only holder of more than one shard, and its
    /// rounds take the shards in the same order on every shard's queue.
    pub fn request(set: &ShardSet, ids: &[usize]) -> Locked {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let mut senders = Vec::with_capacity(ids.len());
        for &id in &ids {
            let (tx, rx) = std::sync::mpsc::channel();
            set.mail(id, Lock { steps: rx });
            senders.push(tx);
        }
        Locked::new(set, ids, Route::Shards(senders))
    }

    /// The shards `ids` (ascending, no duplicates), whose cores the
    /// caller holds: steps sent wait for it to take them with
    /// [`Locked::take_queued`].
    pub(super) fn here(set: &ShardSet, ids: Vec<usize>) -> Locked {
        let queues = ids.iter().map(|_| Vec::new()).collect();
        Locked::new(set, ids, Route::Here(parking_lot::Mutex::new(queues)))
    }

    fn new(set: &ShardSet, ids: Vec<usize>, route: Route) -> Locked {
        Locked {
            ids,
            route,
            log: (
                set.intent.clone(),
                set.durability() == crate::config::Durability::Always,
            ),
            finished: AtomicBool::new(false),
            steps_sent: std::sync::atomic::AtomicU64::new(0),
            primary: AtomicBool::new(false),
        }
    }

    /// The steps sent to a round run [`Locked::here`] since the last
    /// call, per shard in `ids` order.
    pub(super) fn take_queued(&self) -> Vec<Vec<Queued>> {
        match &self.route {
            Route::Here(queues) => queues.lock().iter_mut().map(std::mem::take).collect(),
            Route::Shards(_) => Vec::new(),
        }
    }

    /// Sends `f` to shard `id` (which must be locked) without waiting, so
    /// steps on several shards run in parallel. Steps sent to one shard run
    /// in the order they were sent.
    pub fn send<T: Any + Send>(
        &self,
        id: usize,
        f: impl FnOnce(&mut WriteCtx) -> Result<T, StoreError> + Send + 'static,
    ) -> Pending<T> {
        let idx = self
            .ids
            .iter()
            .position(|&i| i == id)
            .expect("shard not locked");
        let (tx, rx) = tokio::sync::oneshot::channel();
        let primary = self.is_primary();
        let step: StepFn = Box::new(move |w| {
            let out = if primary { w.as_primary(f) } else { f(w) };
            out.map(|t| Box::new(t) as StepOut)
        });
        // A closed channel shows up as Unavailable when the result is awaited.
        let place = self.steps_sent.fetch_add(1, Ordering::Relaxed);
        match &self.route {
            Route::Shards(senders) => {
                let _ = senders[idx].send(Step::Run(step, place, tx));
            }
            Route::Here(queues) => queues.lock()[idx].push((step, place, tx)),
        }
        Pending {
            rx,
            _t: std::marker::PhantomData,
        }
    }

    /// A place in the round's order for a command whose steps on several
    /// shards each make messages for some of its keys: they set
    /// `WriteCtx::message_place` to (this, the key's position).
    pub fn reserve_place(&self) -> u64 {
        self.steps_sent.fetch_add(1, Ordering::Relaxed)
    }

    /// Marks the round as a command of the primary this server replicates
    /// (see `WriteCtx::as_primary`), before its first step.
    pub fn as_primary(&self) {
        self.primary.store(true, Ordering::Relaxed);
    }

    /// Whether the round runs a command of the primary's.
    pub fn is_primary(&self) -> bool {
        self.primary.load(Ordering::Relaxed)
    }

    /// Runs `f` on shard `id` and waits for its output.
    pub async fn run<T: Any + Send>(
        &self,
        id: usize,
        f: impl FnOnce(&mut WriteCtx) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, CoordError> {
        self.send(id, f).wait().await
    }

    /// Asks every locked shard to commit together after the steps sent so
    /// far; the returned future yields the outcome. If any step failed, all
    /// of them roll back instead.
    pub fn commit(&self) -> impl Future<Output = Result<(), CoordError>> + Send + 'static {
        self.finished.store(true, Ordering::Relaxed);
        let senders: &[_] = match &self.route {
            Route::Shards(senders) => senders,
            // Its caller commits (`ShardSet::run_round_here`).
            Route::Here(_) => &[],
        };
        let barrier = Arc::new(Barrier::new(senders.len()));
        let failed = Arc::new(AtomicBool::new(false));
        let round = Arc::new(CommitRound {
            txid: self.log.0.next_txid(),
            with: super::intent::encode_with(&self.ids),
            parts: parking_lot::Mutex::new(Vec::with_capacity(senders.len())),
            log: self.log.0.clone(),
            sync: self.log.1,
            record: true,
            messages: Default::default(),
            tracked: Default::default(),
        });
        let mut waits = Vec::new();
        let mut sent = true;
        for s in senders {
            let (tx, rx) = tokio::sync::oneshot::channel();
            sent &= s
                .send(Step::Commit {
                    barrier: barrier.clone(),
                    failed: failed.clone(),
                    round: round.clone(),
                    done: tx,
                })
                .is_ok();
            waits.push(rx);
        }
        async move {
            let mut result = if sent {
                Ok(())
            } else {
                Err(CoordError::Unavailable)
            };
            for w in waits {
                match w.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => result = result.and(Err(CoordError::Commit(e))),
                    Err(_) => result = result.and(Err(CoordError::Unavailable)),
                }
            }
            result
        }
    }

    /// Rolls every locked shard back.
    pub fn abort(&self) {
        self.finished.store(true, Ordering::Relaxed);
        if let Route::Shards(senders) = &self.route {
            for s in senders {
                let _ = s.send(Step::Abort);
            }
        }
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // Dropping without commit rolls back: the shards see Abort (or the
        // channel closing) and release themselves.
        if !self.finished.load(Ordering::Relaxed) {
            self.abort();
        }
    }
}

/// A blind plan for writes that each touch one shard: one step per shard
/// runs that shard's writes in their order (a message and a wake-up per
/// shard rather than per write). Since no write touches another's shard,
/// this is the same as running them all in order. Its reply is an array
/// of their replies, in order.
pub fn spread(writes: Vec<(usize, super::WriteFn)>) -> Plan {
    let count = writes.len();
    let mut per_shard: Vec<(usize, Vec<(usize, super::WriteFn)>)> = Vec::new();
    for (i, (shard, f)) in writes.into_iter().enumerate() {
        match per_shard.iter_mut().find(|(s, _)| *s == shard) {
            Some((_, fs)) => fs.push((i, f)),
            None => per_shard.push((shard, vec![(i, f)])),
        }
    }
    Box::new(move |locked| {
        // Each write's messages (keyspace events) take its place in the
        // list, as if the writes had run one after another.
        let place = locked.reserve_place();
        let pending: Vec<_> = per_shard
            .into_iter()
            .map(|(shard, fs)| {
                locked.send(shard, move |w| {
                    fs.into_iter()
                        .map(|(i, f)| {
                            w.message_place = (place, i as u64);
                            w.counting(|w| f(w)).map(|r| (i, r))
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        Box::pin(async move {
            let mut replies: Vec<Reply> = (0..count).map(|_| Reply::Nil).collect();
            for p in pending {
                for (i, r) in p.wait().await? {
                    replies[i] = r;
                }
            }
            Ok(Ok(Reply::Array(replies)))
        })
    })
}

/// A queued multi-shard command.
struct Job {
    ids: Vec<usize>,
    /// Sends all its steps when called (see `run_round`).
    blind: bool,
    /// Blind, and a pipeline's independent writes (see
    /// [`CommitRound::record`]).
    independent: bool,
    plan: Plan,
    reply: tokio::sync::oneshot::Sender<Reply>,
}

/// Handle of the coordinator task.
pub struct Coordinator {
    tx: tokio::sync::mpsc::UnboundedSender<Job>,
    /// Commands submitted whose round has not yet asked for its shards
    /// (after that, the shards' `mailed` counts them): while there are
    /// any, no round runs on a client's thread, lest it overtake them.
    queued: Arc<AtomicUsize>,
    /// Until when (µs since `epoch`) rounds stay with the coordinator
    /// after its last one finished (see [`Coordinator::idle`]).
    busy_until: Arc<AtomicU64>,
    epoch: std::time::Instant,
}

/// How long after its last round the coordinator keeps taking the next
/// ones (see [`Coordinator::idle`]).
const BUSY_WINDOW: std::time::Duration = std::time::Duration::from_millis(2);

impl Coordinator {
    /// Starts the coordinator task for a set of shards (on the current
    /// tokio runtime).
    pub fn start(shards: std::sync::Weak<ShardSet>) -> Coordinator {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let busy_until = Arc::new(AtomicU64::new(0));
        let epoch = std::time::Instant::now();
        let busy = Busy {
            until: busy_until.clone(),
            epoch,
        };
        tokio::spawn(run(shards, rx, queued.clone(), busy));
        Coordinator {
            tx,
            queued,
            busy_until,
            epoch,
        }
    }

    /// Whether a round may run on a client's thread instead
    /// (`ShardSet::run_plan_here`): every command submitted has had its
    /// round ask for its shards (see `queued`), and the coordinator has
    /// been without a round for a moment. Under load its rounds gather
    /// many clients' commands and share one commit per shard, where rounds
    /// on clients' threads would commit each pipeline alone (SET at -c 50
    /// -P 16 and MSET at -c 50 lost 10-15% with them); once its queue
    /// stays empty, a client's round is spared the hand-offs (SET -c 1
    /// -P 16: +40% requests per second, half the CPU per request).
    pub fn idle(&self) -> bool {
        self.queued.load(Ordering::SeqCst) == 0
            && self.epoch.elapsed().as_micros() as u64 >= self.busy_until.load(Ordering::Relaxed)
    }

    /// Queues a command touching shards `ids`; the receiver yields its reply.
    pub fn submit(
        &self,
        ids: Vec<usize>,
        blind: bool,
        independent: bool,
        plan: Plan,
    ) -> tokio::sync::oneshot::Receiver<Reply> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.queued.fetch_add(1, Ordering::SeqCst);
        let _ = self.tx.send(Job {
            ids,
            blind,
            independent: blind && independent,
            plan,
            reply,
        });
        rx
    }
}

/// Where the coordinator task notes when its last round finished.
struct Busy {
    until: Arc<AtomicU64>,
    epoch: std::time::Instant,
}

impl Busy {
    fn note(&self) {
        let until = (self.epoch.elapsed() + BUSY_WINDOW).as_micros() as u64;
        self.until.fetch_max(until, Ordering::Relaxed);
    }
}

async fn run(
    shards: std::sync::Weak<ShardSet>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Job>,
    queued: Arc<AtomicUsize>,
    busy: Busy,
) {
    // One round in flight at a time. Its commit and replies finish on their
    // own task, so the coordinator goes back to its queue at once; the next
    // round waits for it and so gathers everything that arrived meanwhile.
    // Under `durability = always`, where every round pays an fsync, larger
    // rounds beat overlapping ones (pipeline-1 MSET +25% over two in
    // flight; pipeline 16 measured the same).
    let mut in_flight: Option<tokio::task::JoinHandle<()>> = None;
    while let Some(first) = rx.recv().await {
        if let Some(previous) = in_flight.take() {
            let _ = previous.await;
        }
        let mut round = vec![first];
        while round.len() < MAX_ROUND {
            match rx.try_recv() {
                Ok(job) => round.push(job),
                Err(_) => break,
            }
        }
        let Some(set) = shards.upgrade() else {
            return;
        };
        busy.note();
        let Some(round) = round_here(&set, round, &queued) else {
            continue;
        };
        let finish = start_round(&set, round, &queued).await;
        in_flight = Some(tokio::spawn(finish));
    }
}

/// Runs a round of blind commands on the coordinator's own thread when
/// their shards are free (`ShardSet::run_round_here`), and replies to
/// each; hands the round back otherwise. The round still shares one
/// commit per shard, and is spared the messages to each shard's thread,
/// their wake-ups and the barriers between them.
fn round_here(set: &ShardSet, round: Vec<Job>, queued: &AtomicUsize) -> Option<Vec<Job>> {
    if !round.iter().all(|j| j.blind) {
        return Some(round);
    }
    let n = round.len();
    let independent = round.iter().all(|j| j.independent);
    // `run_round_here` sorts and dedups them.
    let ids: Vec<usize> = round.iter().flat_map(|j| j.ids.iter().copied()).collect();
    let (plans, rest): (Vec<Plan>, Vec<_>) = round
        .into_iter()
        .map(|j| (j.plan, (j.ids, j.reply)))
        .unzip();
    match set.run_round_here(&ids, plans, false, independent) {
        Ok(replies) => {
            queued.fetch_sub(n, Ordering::SeqCst);
            for ((_, tx), r) in rest.into_iter().zip(replies) {
                let _ = tx.send(r);
            }
            None
        }
        Err(plans) => Some(
            plans
                .into_iter()
                .zip(rest)
                .map(|(plan, (ids, reply))| Job {
                    ids,
                    blind: true,
                    independent,
                    plan,
                    reply,
                })
                .collect(),
        ),
    }
}

/// Asks for the union of the round's shards, runs every plan and asks for
/// one commit; the returned future waits for the outcome and replies.
async fn start_round(
    set: &ShardSet,
    round: Vec<Job>,
    queued: &AtomicUsize,
) -> impl Future<Output = ()> + Send {
    let mut ids: Vec<usize> = round.iter().flat_map(|j| j.ids.iter().copied()).collect();
    ids.sort_unstable();
    ids.dedup();
    let locked = Arc::new(Locked::request(set, &ids));
    queued.fetch_sub(round.len(), Ordering::SeqCst);
    // Plans run in queue order. A blind plan has sent all its steps by the
    // time it is called, so its result can be collected later; a plan that
    // reads before it writes is awaited before the next starts. Either way
    // each shard runs the steps in the order the plans were called, which
    // is the order of the queue.
    let mut replies = Vec::with_capacity(round.len());
    let mut outstanding = Vec::new();
    let mut failure = None;
    for job in round {
        if failure.is_some() {
            replies.push((job.reply, None));
            continue;
        }
        let fut = (job.plan)(locked.clone());
        if job.blind {
            outstanding.push((job.reply, fut));
            continue;
        }
        match fut.await {
            Ok(Ok(r)) | Ok(Err(r)) => replies.push((job.reply, Some(r))),
            Err(e) => {
                failure = Some(e);
                replies.push((job.reply, None));
            }
        }
    }
    // Blind plans' steps may still be running: the commit is queued behind
    // them, and a shard whose step fails makes the whole round roll back.
    let committed = if failure.is_some() {
        locked.abort();
        None
    } else {
        Some(locked.commit())
    };
    drop(locked);
    async move {
        for (reply, fut) in outstanding {
            match fut.await {
                Ok(Ok(r)) | Ok(Err(r)) => replies.push((reply, Some(r))),
                Err(e) => {
                    failure.get_or_insert(e);
                    replies.push((reply, None));
                }
            }
        }
        let outcome = match committed {
            Some(commit) => match commit.await {
                Ok(()) => failure.map_or(Ok(()), Err),
                Err(e) => Err(failure.unwrap_or(e)),
            },
            None => Err(failure.unwrap_or(CoordError::Unavailable)),
        };
        for (tx, reply) in replies {
            let r = match (&outcome, reply) {
                (Ok(()), Some(r)) => r,
                (Err(e), _) => Reply::err(e),
                (Ok(()), None) => Reply::err("command aborted"),
            };
            let _ = tx.send(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{KvRead, Table};

    fn open(dir: &std::path::Path) -> Arc<ShardSet> {
        let mut cfg = crate::config::Config::defaults();
        cfg.dir = dir.to_path_buf();
        cfg.shards = 2;
        ShardSet::open(&cfg).expect("shards open")
    }

    /// A blind plan that writes `key` on shard 0 and runs `second` on shard 1.
    fn plan(key: &'static [u8], second: fn(&mut WriteCtx) -> Result<(), StoreError>) -> Plan {
        Box::new(move |locked| {
            let a = locked.send(0, move |w| w.put(Table::Meta, key, b"v"));
            let b = locked.send(1, second);
            Box::pin(async move {
                a.wait().await?;
                b.wait().await?;
                Ok(Ok(Reply::Ok))
            })
        })
    }

    /// The commit is asked for before blind steps report back, so a step
    /// that fails on one shard must still roll back the other one.
    #[test]
    fn a_failed_step_rolls_back_every_shard_of_its_round() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let set = open(dir.path());
            let fail = set.coordinator().submit(
                vec![0, 1],
                true,
                false,
                plan(b"doomed", |_| Err(StoreError::Internal("boom".into()))),
            );
            assert_eq!(fail.await.unwrap(), Reply::err("internal error: boom"));
            let pass = set
                .coordinator()
                .submit(vec![0, 1], true, false, plan(b"kept", |_| Ok(())));
            assert_eq!(pass.await.unwrap(), Reply::Ok);
            let snap = set.shard(0).snapshot().unwrap();
            assert_eq!(snap.get(Table::Meta, b"doomed").unwrap(), None);
            assert_eq!(snap.get(Table::Meta, b"kept").unwrap(), Some(b"v".to_vec()));
            set.shutdown().await;
        });
    }

    /// A round run on one thread that spreads its shards' parts over
    /// threads of their own commits on every shard, or, when a step
    /// fails on one, on none, as an unspread round does.
    #[test]
    fn a_spread_round_commits_on_every_shard_or_on_none() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let set = open(dir.path());
            set.spread_rounds_from(0);
            let ran = |p: Plan| match set.run_plan_here(&[0, 1], p, false) {
                Ok(reply) => reply,
                Err(_) => panic!("the shards were free"),
            };
            let fail = ran(plan(b"doomed", |_| {
                Err(StoreError::Internal("boom".into()))
            }));
            assert_eq!(fail, Reply::err("internal error: boom"));
            assert_eq!(ran(plan(b"kept", |_| Ok(()))), Reply::Ok);
            let second = |w: &mut WriteCtx| w.put(Table::Meta, b"other", b"w");
            assert_eq!(ran(plan(b"both", second)), Reply::Ok);
            let zero = set.shard(0).snapshot().unwrap();
            let one = set.shard(1).snapshot().unwrap();
            assert_eq!(zero.get(Table::Meta, b"doomed").unwrap(), None);
            assert_eq!(zero.get(Table::Meta, b"kept").unwrap(), Some(b"v".to_vec()));
            assert_eq!(zero.get(Table::Meta, b"both").unwrap(), Some(b"v".to_vec()));
            assert_eq!(one.get(Table::Meta, b"other").unwrap(), Some(b"w".to_vec()));
            set.shutdown().await;
        });
    }
}

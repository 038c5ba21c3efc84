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
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// The participants' changes, as they hand them in.
    pub parts: parking_lot::Mutex<Vec<super::intent::EncodedPart>>,
    /// The log.
    pub log: Arc<super::intent::IntentLog>,
    /// Whether the record must be fsynced before the participants commit
    /// (`durability = always`).
    pub sync: bool,
    /// The messages (keyspace events, PUBLISH) of every participant, each
    /// with the place of the step that made it: published together, in
    /// step order, once all have committed, so a command over keys of
    /// several shards reports its events in the order Redis would.
    pub messages: parking_lot::Mutex<Vec<((u64, u64), crate::storage::tables::Message)>>,
    /// The keys every participant changed while clients track keys, told
    /// to them like the messages.
    pub tracked: parking_lot::Mutex<Vec<crate::storage::tables::KeyChange>>,
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
    senders: Vec<std::sync::mpsc::Sender<Step>>,
    /// Set once the commit or the rollback has been asked for.
    finished: AtomicBool,
    /// Steps sent so far: the next step's place in the round.
    steps_sent: std::sync::atomic::AtomicU64,
}

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
        Locked {
            ids,
            senders,
            log: (
                set.intent.clone(),
                set.durability() == crate::config::Durability::Always,
            ),
            finished: AtomicBool::new(false),
            steps_sent: std::sync::atomic::AtomicU64::new(0),
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
        let step: StepFn = Box::new(move |w| f(w).map(|t| Box::new(t) as StepOut));
        // A closed channel shows up as Unavailable when the result is awaited.
        let place = self.steps_sent.fetch_add(1, Ordering::Relaxed);
        let _ = self.senders[idx].send(Step::Run(step, place, tx));
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
        let barrier = Arc::new(Barrier::new(self.senders.len()));
        let failed = Arc::new(AtomicBool::new(false));
        let round = Arc::new(CommitRound {
            txid: self.log.0.next_txid(),
            parts: parking_lot::Mutex::new(Vec::with_capacity(self.senders.len())),
            log: self.log.0.clone(),
            sync: self.log.1,
            messages: Default::default(),
            tracked: Default::default(),
        });
        let mut waits = Vec::new();
        let mut sent = true;
        for s in &self.senders {
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
        for s in &self.senders {
            let _ = s.send(Step::Abort);
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
    plan: Plan,
    reply: tokio::sync::oneshot::Sender<Reply>,
}

/// Handle of the coordinator task.
pub struct Coordinator {
    tx: tokio::sync::mpsc::UnboundedSender<Job>,
}

impl Coordinator {
    /// Starts the coordinator task for a set of shards (on the current
    /// tokio runtime).
    pub fn start(shards: std::sync::Weak<ShardSet>) -> Coordinator {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(run(shards, rx));
        Coordinator { tx }
    }

    /// Queues a command touching shards `ids`; the receiver yields its reply.
    pub fn submit(
        &self,
        ids: Vec<usize>,
        blind: bool,
        plan: Plan,
    ) -> tokio::sync::oneshot::Receiver<Reply> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let _ = self.tx.send(Job {
            ids,
            blind,
            plan,
            reply,
        });
        rx
    }
}

async fn run(shards: std::sync::Weak<ShardSet>, mut rx: tokio::sync::mpsc::UnboundedReceiver<Job>) {
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
        let finish = start_round(&set, round).await;
        in_flight = Some(tokio::spawn(finish));
    }
}

/// Asks for the union of the round's shards, runs every plan and asks for
/// one commit; the returned future waits for the outcome and replies.
async fn start_round(set: &ShardSet, round: Vec<Job>) -> impl Future<Output = ()> + Send {
    let mut ids: Vec<usize> = round.iter().flat_map(|j| j.ids.iter().copied()).collect();
    ids.sort_unstable();
    ids.dedup();
    let locked = Arc::new(Locked::request(set, &ids));
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
                plan(b"doomed", |_| Err(StoreError::Internal("boom".into()))),
            );
            assert_eq!(fail.await.unwrap(), Reply::err("internal error: boom"));
            let pass = set
                .coordinator()
                .submit(vec![0, 1], true, plan(b"kept", |_| Ok(())));
            assert_eq!(pass.await.unwrap(), Reply::Ok);
            let snap = set.shard(0).snapshot().unwrap();
            assert_eq!(snap.get(Table::Meta, b"doomed").unwrap(), None);
            assert_eq!(snap.get(Table::Meta, b"kept").unwrap(), Some(b"v".to_vec()));
            set.shutdown().await;
        });
    }
}

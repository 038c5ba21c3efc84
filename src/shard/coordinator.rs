//! Multi-shard commands: lock the shards in ascending id order, run steps in
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
    /// Run a step and send back its result.
    Run(
        StepFn,
        tokio::sync::oneshot::Sender<Result<StepOut, StoreError>>,
    ),
    /// Commit together with the other participants.
    Commit {
        /// Shared by all participants: everyone holds its commit lock before
        /// anyone commits, and keeps it until all have committed.
        barrier: Arc<Barrier>,
        /// The commit's outcome.
        done: tokio::sync::oneshot::Sender<Result<(), String>>,
    },
    /// Roll back.
    Abort,
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
    senders: Vec<std::sync::mpsc::Sender<Step>>,
    finished: bool,
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
    /// Locks the given shards (any order, duplicates allowed) in ascending id
    /// order, waiting for each before asking the next.
    pub async fn lock(set: &ShardSet, ids: &[usize]) -> Result<Locked, CoordError> {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let mut locked = Locked {
            ids: Vec::new(),
            senders: Vec::new(),
            finished: false,
        };
        for id in ids {
            let (tx, rx) = std::sync::mpsc::channel();
            let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
            set.addr(id).do_send(Lock {
                ready: ready_tx,
                steps: rx,
            });
            ready_rx.await.map_err(|_| CoordError::Unavailable)?;
            locked.ids.push(id);
            locked.senders.push(tx);
        }
        Ok(locked)
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
        let _ = self.senders[idx].send(Step::Run(step, tx));
        Pending {
            rx,
            _t: std::marker::PhantomData,
        }
    }

    /// Runs `f` on shard `id` and waits for its output.
    pub async fn run<T: Any + Send>(
        &self,
        id: usize,
        f: impl FnOnce(&mut WriteCtx) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, CoordError> {
        self.send(id, f).wait().await
    }

    /// Commits every locked shard together.
    pub async fn commit(mut self) -> Result<(), CoordError> {
        self.finished = true;
        let barrier = Arc::new(Barrier::new(self.senders.len()));
        let mut waits = Vec::new();
        for s in &self.senders {
            let (tx, rx) = tokio::sync::oneshot::channel();
            s.send(Step::Commit {
                barrier: barrier.clone(),
                done: tx,
            })
            .map_err(|_| CoordError::Unavailable)?;
            waits.push(rx);
        }
        let mut result = Ok(());
        for w in waits {
            match w.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(CoordError::Commit(e)),
                Err(_) => result = Err(CoordError::Unavailable),
            }
        }
        result
    }

    /// Rolls every locked shard back.
    pub fn abort(mut self) {
        self.finished = true;
        for s in &self.senders {
            let _ = s.send(Step::Abort);
        }
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // Dropping without commit rolls back: the shards see Abort (or the
        // channel closing) and release themselves.
        if !self.finished {
            for s in &self.senders {
                let _ = s.send(Step::Abort);
            }
        }
    }
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
    while let Some(first) = rx.recv().await {
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
        run_round(&set, round).await;
    }
}

/// Locks the union of the round's shards, runs every plan, commits once.
async fn run_round(set: &ShardSet, round: Vec<Job>) {
    let mut ids: Vec<usize> = round.iter().flat_map(|j| j.ids.iter().copied()).collect();
    ids.sort_unstable();
    ids.dedup();
    let locked = match Locked::lock(set, &ids).await {
        Ok(l) => Arc::new(l),
        Err(e) => {
            for job in round {
                let _ = job.reply.send(Reply::err(&e));
            }
            return;
        }
    };
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
    for (reply, fut) in outstanding {
        match fut.await {
            Ok(Ok(r)) | Ok(Err(r)) => replies.push((reply, Some(r))),
            Err(e) => {
                failure.get_or_insert(e);
                replies.push((reply, None));
            }
        }
    }
    let locked = Arc::try_unwrap(locked).unwrap_or_else(|_| panic!("plans keep no lock handle"));
    let outcome = match failure {
        Some(e) => {
            locked.abort();
            Err(e)
        }
        None => locked.commit().await,
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

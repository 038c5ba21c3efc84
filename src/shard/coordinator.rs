//! Multi-shard commands: lock the shards in ascending id order, run a step
//! in each one's write transaction, then commit all of them at once (see the
//! parent module for the visibility rule).
//!
//! A coordinated command must run to its end once it has started committing,
//! so callers run it in a task of its own: a client that vanishes mid-command
//! cannot leave half of it applied.

use std::any::Any;
use std::sync::{Arc, Barrier};

use super::actor::Lock;
use super::set::ShardSet;
use crate::storage::{StoreError, WriteCtx};

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

/// Shards held by one coordinator.
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

    /// Runs `f` on shard `id` (which must be locked) and returns its output.
    pub async fn run<T: Any + Send>(
        &self,
        id: usize,
        f: impl FnOnce(&mut WriteCtx) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, CoordError> {
        let idx = self
            .ids
            .iter()
            .position(|&i| i == id)
            .expect("shard not locked");
        let (tx, rx) = tokio::sync::oneshot::channel();
        let step: StepFn = Box::new(move |w| f(w).map(|t| Box::new(t) as StepOut));
        self.senders[idx]
            .send(Step::Run(step, tx))
            .map_err(|_| CoordError::Unavailable)?;
        let out = rx.await.map_err(|_| CoordError::Unavailable)??;
        Ok(*out.downcast::<T>().expect("step output type"))
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

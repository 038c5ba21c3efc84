//! Running several commands as one atomic unit: EXEC's queue, and (through
//! the same executor) the commands a script calls.
//!
//! # Two ways to run
//! * **One shard.** When every command reads or writes one shard only (the
//!   usual transaction: keys of one slot), the whole unit is a single write
//!   op on that shard's actor: it shares the shard's group commit like any
//!   write, and nobody sees a state between two of its commands because
//!   the actor runs it alone, in one transaction.
//! * **Several shards.** Otherwise the unit is one coordinator plan over
//!   the union of the shards its commands touch (`shard::coordinator`):
//!   the shards are locked, every command runs in their open transactions
//!   through [`Atomic`], and all of them commit together or roll back.
//!   A crash never leaves half of it on disk, and readers of several
//!   shards see all or nothing of it.
//!
//! [`Atomic`] runs on a blocking thread, one command after another, each
//! reading what the earlier ones wrote (their transactions are still
//! open); a read of several shards goes through [`Remote`] readers that
//! ask each locked shard for rows.

use std::sync::Arc;

use crate::protocol::Reply;
use crate::server::Server;
use crate::shard::coordinator::{CoordError, Locked};
use crate::shard::now_ms;
use crate::storage::{KvRead, StoreError, Table};

use super::session::Action;

/// Runs actions inside a coordinator's locked shards, synchronously, from
/// a thread that may block (not a tokio worker).
pub struct Atomic {
    locked: Arc<Locked>,
    rt: tokio::runtime::Handle,
}

impl Atomic {
    /// An executor over `locked`, waiting on `rt` for step results.
    pub fn new(locked: Arc<Locked>, rt: tokio::runtime::Handle) -> Atomic {
        Atomic { locked, rt }
    }

    /// Waits until every locked shard has finished what it was doing and
    /// is running this unit's steps only: from then on nobody else writes
    /// them until the unit commits.
    pub fn settle(&self, ids: &[usize]) -> Result<(), CoordError> {
        let pending: Vec<_> = ids
            .iter()
            .map(|&id| self.locked.send(id, |_| Ok(())))
            .collect();
        for p in pending {
            self.rt.block_on(p.wait())?;
        }
        Ok(())
    }

    /// Runs one command's action and returns its reply. A storage failure
    /// is returned as an error: the whole unit must then roll back.
    pub fn run(&self, action: Action, server: &Arc<Server>) -> Result<Reply, CoordError> {
        let action = match action.into_shard_op(server) {
            Ok((shard, f)) => {
                let shard = if shard == super::session::ANY_SHARD {
                    self.locked.ids()[0]
                } else {
                    shard
                };
                return self.rt.block_on(self.locked.run(shard, f));
            }
            Err(other) => other,
        };
        match action {
            Action::Reply(r) | Action::Close(Some(r)) => Ok(r),
            Action::Read { .. } | Action::Write { .. } => unreachable!("shard ops run above"),
            Action::ReadMany { ids, f } => {
                let remotes: Vec<Remote> = ids
                    .iter()
                    .map(|&shard| Remote {
                        at: self,
                        shard,
                        found: Default::default(),
                    })
                    .collect();
                let readers: Vec<&dyn KvRead> = remotes.iter().map(|r| r as &dyn KvRead).collect();
                let reply = f(&readers);
                for r in &remotes {
                    let found = r.found.take();
                    if !found.is_empty() {
                        self.step(r.shard, move |w| {
                            crate::storage::keyspace::expire_keys(w, &found)
                        })?;
                    }
                }
                Ok(reply)
            }
            Action::Plan { plan, .. } => match self.rt.block_on(plan(self.locked.clone()))? {
                Ok(r) | Err(r) => Ok(r),
            },
            // Neither reads nor writes keys (see `Action::Job`).
            Action::Job(job) | Action::Block(job) => Ok(self.rt.block_on(job)),
            // Inside a unit that holds its shards already: the plan form.
            Action::Script { slow, .. } => self.run(slow(), server),
            Action::Silent | Action::Close(None) => Ok(Reply::Nil),
        }
    }

    fn step<T: std::any::Any + Send>(
        &self,
        shard: usize,
        f: impl FnOnce(&mut crate::storage::WriteCtx) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.rt
            .block_on(self.locked.run(shard, f))
            .map_err(|e| match e {
                CoordError::Store(e) => e,
                other => StoreError::Internal(other.to_string()),
            })
    }
}

/// A plan over `ids` whose body runs on a blocking thread with an
/// [`Atomic`] over those shards, once every one of them has settled (see
/// [`Atomic::settle`]). EXEC and scripts that need several shards are such
/// plans.
pub fn blocking_plan(
    ids: Vec<usize>,
    what: &'static str,
    body: impl FnOnce(&Atomic) -> crate::shard::coordinator::PlanResult + Send + 'static,
) -> Action {
    let lock_ids = ids.clone();
    let rt = tokio::runtime::Handle::current();
    Action::Plan {
        ids,
        blind: false,
        plan: Box::new(move |locked| {
            Box::pin(async move {
                let run = tokio::task::spawn_blocking(move || {
                    let at = Atomic::new(locked, rt);
                    at.settle(&lock_ids)?;
                    body(&at)
                });
                run.await
                    .map_err(|e| StoreError::Internal(format!("{what} panicked: {e}")))?
            })
        }),
    }
}

/// Rows fetched per step when a remote reader scans.
const SCAN_CHUNK: usize = 256;

/// A reader of one locked shard's open transaction, from another thread:
/// each lookup is a step on that shard. Used only for reads that need
/// several shards at once inside an atomic unit (KEYS, MGET across
/// shards...).
struct Remote<'a> {
    at: &'a Atomic,
    shard: usize,
    /// Keys its lookups found expired: deleted on the shard after the
    /// read, as a read of one shard does (`session::read_in_write`).
    found: std::cell::RefCell<Vec<(u8, Vec<u8>)>>,
}

impl KvRead for Remote<'_> {
    fn now_ms(&self) -> u64 {
        now_ms()
    }

    fn expiry_clock(&self) -> u64 {
        if self.at.locked.is_primary() {
            0
        } else {
            now_ms()
        }
    }

    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let key = key.to_vec();
        self.at.step(self.shard, move |w| w.get(table, &key))
    }

    fn get_head(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let key = key.to_vec();
        self.at.step(self.shard, move |w| w.get_head(&key))
    }

    // The shard's rows come a chunk at a time anyway: the first chunk's
    // size is passed over.
    fn scan_few(
        &self,
        table: Table,
        (start, end): (&[u8], Option<&[u8]>),
        order: crate::storage::merge::Order,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        // Fetch a chunk at a time and resume after the last row seen, so a
        // visitor that stops early costs one step.
        let reverse = order.reverse;
        let (mut start, mut end) = (start.to_vec(), end.map(<[u8]>::to_vec));
        loop {
            let (s, e) = (start.clone(), end.clone());
            let rows: Vec<(Vec<u8>, Vec<u8>)> = self.at.step(self.shard, move |w| {
                let mut rows = Vec::new();
                w.scan(table, &s, e.as_deref(), reverse, &mut |k, v| {
                    rows.push((k.to_vec(), v.to_vec()));
                    rows.len() < SCAN_CHUNK
                })?;
                Ok(rows)
            })?;
            let full = rows.len() == SCAN_CHUNK;
            let Some(last) = rows.last().map(|(k, _)| k.clone()) else {
                return Ok(());
            };
            for (k, v) in &rows {
                if !visit(k, v) {
                    return Ok(());
                }
            }
            if !full {
                return Ok(());
            }
            if reverse {
                end = Some(last);
            } else {
                start = last;
                start.push(0);
            }
        }
    }

    fn key_count(&self, db: u8) -> Result<i64, StoreError> {
        self.at.step(self.shard, move |w| w.key_count(db))
    }

    fn note_expired(&self, db: u8, key: &[u8]) {
        self.found.borrow_mut().push((db, key.to_vec()));
    }

    fn track_read(&self, id: u64, keys: &[bytes::Bytes]) -> bool {
        let keys = keys.to_vec();
        self.at
            .step(self.shard, move |w| Ok(w.track_read(id, &keys)))
            .unwrap_or(false)
    }
}

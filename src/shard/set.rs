//! The set of shards: opening the files, starting the actors on their own
//! actix System thread, routing by slot, and shutting down.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use actix::prelude::*;

use super::actor::{Ran, ReplySink, ShardActor, ShardCore, Shutdown, Submit, Taken};
use super::{ShardShared, WriteFn};
use crate::cluster;
use crate::config::{Config, Durability};
use crate::protocol::Reply;
use crate::storage::journal::JournalBackend;
use crate::storage::{ReadCtx, ShardState, Store, StoreError};

/// Why the shards could not start.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The data directory cannot be created or used.
    #[error("cannot use data directory {dir}: {source}")]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Another process holds the directory.
    #[error("data directory {0} is in use by another cairn process (lock file {0}/LOCK is held); stop it or choose another --dir")]
    Locked(PathBuf),
    /// The existing files do not match the configured shard count.
    #[error("data directory {dir} was created with {found} shards but {configured} are configured; start with --shards {found}")]
    ShardCount {
        /// The directory.
        dir: PathBuf,
        /// Shards found on disk.
        found: usize,
        /// Shards configured.
        configured: usize,
    },
    /// A shard file cannot be opened.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: StoreError,
    },
}

/// All shards of the server.
pub struct ShardSet {
    shared: Vec<Arc<ShardShared>>,
    addrs: Vec<Addr<ShardActor>>,
    /// Each shard's core, which its actor and client threads take in turn.
    cores: Vec<Arc<parking_lot::Mutex<ShardCore>>>,
    system: System,
    thread: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Held for the life of the process: a second server on the same
    /// directory fails to take it.
    _lock: File,
    /// The durability policy the shards run with.
    durability: Arc<crate::config::DurabilityCell>,
    /// Clients blocked on keys.
    pub blocked: Arc<super::blocking::BlockRegistry>,
    coordinator: super::coordinator::Coordinator,
    /// Pub/Sub subscribers: shards publish the messages of transactions and
    /// scripts when they commit.
    pub hub: Arc<crate::pubsub::Hub>,
    /// The coordination log (crash atomicity of multi-shard commits).
    pub intent: Arc<super::intent::IntentLog>,
    /// The latency monitor the shards report commits and reaper slices to.
    pub latency: Arc<crate::families::latency::LatencyMonitor>,
    /// CLIENT PAUSE, which the connections and the reapers observe.
    pub pause: Arc<super::pause::Pause>,
    /// DEBUG's server-wide switches (every shard holds them too).
    pub switches: Arc<super::Switches>,
    /// Steps from which a round run on one thread spreads its shards'
    /// parts over threads of their own (see `actor::run_round_here`).
    spread_from: std::sync::atomic::AtomicUsize,
}

/// How a shard's storage is opened.
#[derive(Clone)]
pub struct StoreOptions {
    /// redb's page cache, in bytes.
    pub cache_bytes: usize,
    /// Write buffer limits.
    pub limits: crate::storage::store::Limits,
    /// What the store runs before it fsyncs a full log generation (see
    /// `Store::before_rotate`); set once the coordination log is open.
    pub before_rotate: Option<crate::storage::store::BeforeRotate>,
    /// What the store runs before each sync of its log (see
    /// `Store::before_sync`); set with `before_rotate`.
    pub before_sync: Option<crate::storage::store::BeforeRotate>,
    /// Where the store publishes the log file it writes, for the other
    /// shards' `before_rotate` to make durable (see `wal::Current`).
    pub log: Option<crate::storage::wal::Current>,
    /// The store's place in the write-buffer room the shards lend each
    /// other (see `storage::budget`); set once the shards are open.
    pub share: Option<crate::storage::budget::Share>,
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("cache_bytes", &self.cache_bytes)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Opens (creating if needed) a shard's storage, its log put into its
/// tables: at start, and when DEBUG RELOAD reopens it.
pub(super) fn open_store(path: &Path, options: &StoreOptions) -> Result<Arc<Store>, StoreError> {
    let opening = begin_open_store(path, options)?;
    finish_open_store(opening, usize::MAX, options)
}

/// The first half of [`open_store`]: the file opened, its log read (see
/// `Store::begin_open`).
fn begin_open_store(
    path: &Path,
    options: &StoreOptions,
) -> Result<crate::storage::store::Opening, StoreError> {
    Store::begin_open(path, |path| {
        replay_old_journal(path)?;
        Ok(redb::Database::builder()
            .set_cache_size(options.cache_bytes)
            .create(path)?)
    })
}

/// The second half of [`open_store`]: the first `keep` records of the log
/// put into the tables, the store started.
fn finish_open_store(
    opening: crate::storage::store::Opening,
    keep: usize,
    options: &StoreOptions,
) -> Result<Arc<Store>, StoreError> {
    let store = Store::finish_open(opening, keep, options.limits)?;
    tie(&store, options);
    Ok(store)
}

/// Gives an open store its part in the other shards' durability, as
/// `options` say (see [`rotation_hooks`]).
fn tie(store: &Store, options: &StoreOptions) {
    if let Some(hook) = &options.before_rotate {
        store.before_rotate(hook.clone());
    }
    if let Some(hook) = &options.before_sync {
        store.before_sync(hook.clone());
    }
    if let Some(log) = &options.log {
        store.share_log(log.clone());
    }
    if let Some(share) = &options.share {
        store.share_budget(share.clone());
    }
}

/// Each shard's `Store::before_rotate`, given where every shard's log is
/// written (`logs`). A finished log generation is fsynced when its shard
/// moves to the next, outside the shard's own syncs, and from then on may
/// reach the shard's tables, from which recovery cannot cut anything: so
/// every round it holds must be one recovery can complete on the other
/// shards. Before that fsync, the coordination log is made durable (so
/// the round's record is), and so is every other shard's log (so the
/// state each participant was in when the round began there is: its part
/// can then be redone on it, see `intent::plan_recovery`). This is what
/// lets a shard take part in a round under `everysec` without an fsync
/// of its own first.
fn rotation_hooks(
    intent: &Arc<super::intent::IntentLog>,
    logs: &[crate::storage::wal::Current],
) -> Vec<crate::storage::store::BeforeRotate> {
    (0..logs.len())
        .map(|me| {
            let intent = intent.clone();
            let others: Vec<_> = (logs.iter().enumerate())
                .filter(|(i, _)| *i != me)
                .map(|(_, log)| log.clone())
                .collect();
            let hook: crate::storage::store::BeforeRotate = Arc::new(move || {
                intent.sync()?;
                others.iter().try_for_each(|log| log.sync())
            });
            hook
        })
        .collect()
}

/// Builds before the shard log made each batch a redb commit and kept a
/// page journal beside the file (`storage::journal`) to make those commits
/// cheap. A journal such a build left (after a crash, it may hold commits
/// the file lacks) is replayed into the file once, by opening and closing
/// the file through it, and then removed: the log has taken over its job.
fn replay_old_journal(path: &Path) -> Result<(), StoreError> {
    let journal = crate::storage::journal::journal_path(path);
    if !journal.exists() {
        return Ok(());
    }
    let backend = JournalBackend::open(path).map_err(redb::Error::Io)?;
    drop(redb::Database::builder().create_with_backend(backend)?);
    std::fs::remove_file(&journal).map_err(redb::Error::Io)?;
    tracing::info!(file = %path.display(), "replayed and removed the page journal of an older build");
    Ok(())
}

impl ShardSet {
    /// Opens (creating if needed) the shard files in `cfg.dir` and starts one
    /// actor per shard.
    pub fn open(cfg: &Config) -> Result<Arc<ShardSet>, OpenError> {
        let dir = cfg.dir.clone();
        std::fs::create_dir_all(&dir).map_err(dir_err(&dir))?;
        let lock = File::create(dir.join("LOCK")).map_err(dir_err(&dir))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(OpenError::Locked(dir)),
            Err(std::fs::TryLockError::Error(e)) => return Err(dir_err(&dir)(e)),
        }
        let n = cfg.shard_count();
        let found = count_shard_files(&dir).map_err(dir_err(&dir))?;
        if found != 0 && found != n {
            return Err(OpenError::ShardCount {
                dir,
                found,
                configured: n,
            });
        }
        let blocked = Arc::new(super::blocking::BlockRegistry::default());
        let hub = Arc::new(crate::pubsub::Hub::default());
        let latency = Arc::new(crate::families::latency::LatencyMonitor::default());
        let pause = Arc::new(super::pause::Pause::default());
        let options = StoreOptions {
            cache_bytes: cfg.cache_mb * 1024 * 1024,
            limits: crate::storage::store::Limits {
                cap: cfg.write_buffer_mb * 1024 * 1024,
                filter_rows: crate::storage::store::FILTER_MIN_ROWS,
                // An eighth of the page cache's budget: 8 MiB at the
                // default 64, the rows of ~110k small keys.
                row_cache: cfg.cache_mb * 1024 * 1024 / 8,
            },
            before_rotate: None,
            before_sync: None,
            log: None,
            share: None,
        };
        let (dbs, intent) = open_files(&dir, n, &options)?;
        let intent = Arc::new(intent);
        let logs: Vec<_> = (0..n).map(|_| Default::default()).collect();
        let hooks = rotation_hooks(&intent, &logs);
        // Each shard's own options, to reopen it with (DEBUG RELOAD).
        let mut own_options = Vec::with_capacity(n);
        let budget = Arc::new(crate::storage::budget::Budget::new(n, options.limits.cap));
        for (me, (((_, store), hook), log)) in dbs.iter().zip(hooks).zip(logs).enumerate() {
            let mut own = options.clone();
            own.before_rotate = Some(hook);
            let coordination = intent.clone();
            own.before_sync = Some(Arc::new(move || coordination.sync()));
            own.log = Some(log);
            own.share = Some(crate::storage::budget::Share {
                budget: budget.clone(),
                me,
            });
            tie(store, &own);
            store.build_key_filter();
            own_options.push(own);
        }
        let mut shared = Vec::with_capacity(n);
        let mut states = Vec::with_capacity(n);
        let switches = Arc::new(super::Switches::default());
        for (i, ((path, store), options)) in dbs.into_iter().zip(own_options).enumerate() {
            let state = match store.latest(0).and_then(|base| ShardState::load(&base)) {
                Ok(s) => s,
                Err(source) => return Err(OpenError::Open { path, source }),
            };
            shared.push(Arc::new(ShardShared::new(
                i,
                (store, path, options),
                switches.clone(),
                blocked.clone(),
                hub.clone(),
                latency.clone(),
                pause.clone(),
            )));
            states.push(state);
        }
        let durability = Arc::new(crate::config::DurabilityCell::new(cfg.durability));
        let max_batch = cfg.max_batch;
        let cores: Vec<_> = shared
            .iter()
            .zip(states)
            .map(|(s, state)| {
                let policy = durability.clone();
                let core = ShardCore::new(s.clone(), state, policy, max_batch, intent.clone());
                Arc::new(parking_lot::Mutex::new(core))
            })
            .collect();
        let (tx, rx) = std::sync::mpsc::channel();
        let actor_cores = cores.clone();
        let thread = std::thread::Builder::new()
            .name("cairn-actix".into())
            .spawn(move || {
                // actix needs its own System, which cannot live inside the
                // tokio runtime the connections run on: it gets this thread.
                let sys = System::new();
                sys.block_on(async move {
                    let mut addrs = Vec::new();
                    for core in actor_cores {
                        let arbiter = Arbiter::new();
                        let addr = ShardActor::start_in_arbiter(&arbiter.handle(), move |_| {
                            ShardActor::new(core)
                        });
                        addrs.push(addr);
                    }
                    let _ = tx.send((addrs, System::current()));
                });
                let _ = sys.run();
            })
            .map_err(dir_err(&dir))?;
        let (addrs, system) = rx.recv().expect("actix system started");
        for (shard, addr) in shared.iter().zip(&addrs) {
            let _ = shard.actor.set(addr.clone());
        }
        tracing::info!(shards = n, dir = %cfg.dir.display(), durability = cfg.durability.name(), "shards open");
        Ok(Arc::new_cyclic(|me| ShardSet {
            switches,
            blocked,
            hub,
            shared,
            addrs,
            cores,
            system,
            thread: parking_lot::Mutex::new(Some(thread)),
            _lock: lock,
            durability,
            coordinator: super::coordinator::Coordinator::start(me.clone()),
            intent,
            latency,
            pause,
            spread_from: std::sync::atomic::AtomicUsize::new(super::actor::spread_from()),
        }))
    }

    /// Has rounds run on one thread spread their shards' parts over
    /// threads of their own from `steps` steps on (0: always): tests do
    /// so on machines whose two cores never would.
    pub fn spread_rounds_from(&self, steps: usize) {
        self.spread_from
            .store(steps, std::sync::atomic::Ordering::Relaxed);
    }

    /// The durability policy in force.
    pub fn durability(&self) -> Durability {
        self.durability.get()
    }

    /// Changes the durability policy (CONFIG SET appendfsync): each shard
    /// applies it from its next commit. A switch to `always` makes the
    /// earlier commits durable with that first fsync, as each shard's log
    /// is one sequence.
    pub fn set_durability(&self, d: Durability) {
        self.durability.set(d);
    }

    /// Number of shards.
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    /// Always false: a server has at least one shard.
    pub fn is_empty(&self) -> bool {
        self.shared.is_empty()
    }

    /// The shard owning a key.
    pub fn shard_of_key(&self, key: &[u8]) -> usize {
        self.shard_and_slot(key).0
    }

    /// The shard owning a key, and the key's slot.
    pub fn shard_and_slot(&self, key: &[u8]) -> (usize, u16) {
        let slot = cluster::key_slot(key);
        (cluster::shard_of_slot(slot, self.len()), slot)
    }

    /// A shard's shared state.
    pub fn shard(&self, id: usize) -> &Arc<ShardShared> {
        &self.shared[id]
    }

    /// Every shard's shared state.
    pub fn shards(&self) -> &[Arc<ShardShared>] {
        &self.shared
    }

    /// Sends a coordinator's `Lock` to shard `id`'s actor, counted in its
    /// `mailed` until the actor takes it.
    pub(super) fn mail<M>(&self, id: usize, msg: M)
    where
        M: Message<Result = ()> + Send + 'static,
        ShardActor: Handler<M>,
    {
        self.shared[id]
            .mailed
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.addrs[id].do_send(msg);
    }

    /// The multi-shard coordinator.
    pub fn coordinator(&self) -> &super::coordinator::Coordinator {
        &self.coordinator
    }

    /// Queues a write on a shard and sees it run (see [`ShardSet::kick`]);
    /// the receiver yields its reply after commit.
    pub fn submit(&self, id: usize, f: WriteFn) -> tokio::sync::oneshot::Receiver<Reply> {
        let rx = self.enqueue(id, f);
        self.kick(id);
        rx
    }

    /// [`ShardSet::submit`], replying through a channel the caller made
    /// (whose receiver already holds the reply's place in its queue).
    pub fn submit_with(&self, id: usize, f: WriteFn, reply: tokio::sync::oneshot::Sender<Reply>) {
        self.enqueue_with(id, f, reply);
        self.kick(id);
    }

    /// Queues a write on a shard without running anything: a caller
    /// queueing several calls [`ShardSet::kick`] once after the last, so
    /// that they run as one batch.
    pub fn enqueue(&self, id: usize, f: WriteFn) -> tokio::sync::oneshot::Receiver<Reply> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.enqueue_with(id, f, tx);
        rx
    }

    /// [`ShardSet::enqueue`], replying through a channel the caller made.
    pub fn enqueue_with(&self, id: usize, f: WriteFn, reply: tokio::sync::oneshot::Sender<Reply>) {
        let reply = ReplySink::One(reply);
        let refused = self.shared[id].queue.lock().push(Submit { f, reply });
        drop(refused);
    }

    /// Queues writes on a shard as [`ShardSet::enqueue`] does, in a row,
    /// with one channel for all their replies, which come in order (see
    /// `actor::ReplySink`).
    pub fn enqueue_group(
        &self,
        id: usize,
        writes: Vec<WriteFn>,
    ) -> tokio::sync::oneshot::Receiver<Vec<Reply>> {
        let (sinks, rx) = ReplySink::group(writes.len());
        let mut refused = Vec::new();
        let mut queue = self.shared[id].queue.lock();
        for (f, reply) in writes.into_iter().zip(sinks) {
            refused.extend(queue.push(Submit { f, reply }));
        }
        drop(queue);
        drop(refused);
        rx
    }

    /// Sees the writes queued on shard `id` run: by the thread holding
    /// the core, when it gives the core back (see `actor::Taken`); else
    /// here and now, with the core taken, if a client thread may run
    /// writes (see [`ShardSet::run_here`]); else by the actor, woken if no
    /// `Drain` is on its way.
    pub fn kick(&self, id: usize) {
        let shared = &self.shared[id];
        if shared.queue.lock().held() {
            return;
        }
        // No writes of its own: the queue alone runs. Where it may not, a
        // core taken here wakes the actor as it is given back, and this
        // second wake finds a `Drain` on its way.
        if self.run_here(id, Vec::new()).is_err() {
            shared.wake_actor();
        }
    }

    /// Runs a client's writes to shard `id` on the calling thread if the
    /// shard is free (see `ShardCore::run_here`), after whatever is queued
    /// there, returning their replies; otherwise hands the writes back,
    /// for [`ShardSet::submit`]. Free means its core is not held and no
    /// coordinator's round waits in its mailbox. Writes queued earlier, by
    /// any client, are applied first. (Without that, a client that was
    /// seen blocked in XREADGROUP could have its first read overtaken by
    /// the XADD meant to wake it, and lose the entry to a later reader.)
    pub fn run_here(&self, id: usize, writes: Vec<WriteFn>) -> Result<Ran, Vec<WriteFn>> {
        use std::sync::atomic::Ordering::Acquire;
        if self.shared[id].mailed.load(Acquire) != 0 {
            return Err(writes);
        }
        match self.cores[id].try_lock() {
            Some(core) => Taken::new(core, false).run_here(writes),
            None => Err(writes),
        }
    }

    /// Waits until shard `id`'s commit `seq` (a deferred one: see
    /// [`Ran::Pending`]) is durable, syncing its log on this thread if no
    /// other thread is (see `storage::group`).
    pub async fn durable(&self, id: usize, seq: u64) {
        let shared = &self.shared[id];
        if let Ok(store) = shared.store() {
            let (syncs, longest) = store.durable(seq).await;
            for _ in 0..syncs {
                shared.stats.durable_now();
            }
            if syncs > 0 {
                // As Redis reports its fsync under `always`.
                let ms = longest.as_millis() as u64;
                shared
                    .latency
                    .observe(crate::families::latency::FSYNC_ALWAYS, ms);
            }
        }
    }

    /// Runs a blind multi-shard plan (see `coordinator`) on the calling
    /// thread if every shard it names is free and the coordinator is
    /// quiet (see `Coordinator::idle`), returning its reply; otherwise
    /// hands the plan back, for the coordinator. This spares a round the
    /// hand-offs to the coordinator task and to each shard's thread and
    /// back, which under pipelined writes spanning shards cost more than
    /// the writes. Nothing queued with the coordinator that has not asked
    /// for its shards yet is overtaken.
    pub fn run_plan_here(
        &self,
        ids: &[usize],
        plan: super::coordinator::Plan,
        independent: bool,
    ) -> Result<Reply, super::coordinator::Plan> {
        match self.run_round_here(ids, vec![plan], true, independent) {
            Ok(mut replies) => Ok(replies.pop().expect("one reply per plan")),
            Err(mut plans) => Err(plans.pop().expect("the plan handed back")),
        }
    }

    /// Runs a round of blind plans, in order, on the calling thread (a
    /// client's, or the coordinator task's) if every shard they name is
    /// free, returning their replies; otherwise hands them back. Free
    /// means, as for [`ShardSet::run_here`], no coordinator's round
    /// waiting in any of their mailboxes and every core taken here (with
    /// try-lock, in ascending order), and, for a client (`client`), the
    /// coordinator quiet. Writes queued on those shards commit first.
    ///
    /// The round's id is taken with the cores held and before the
    /// mailboxes (and the coordinator) are checked again: a round of the
    /// coordinator that will lock any of these shards has not asked for
    /// them yet, and takes its id later, so each shard's rounds keep
    /// ascending ids, as redo after a crash needs (see `intent`). Under
    /// `always` only the coordinator runs rounds here, each fsyncing its
    /// record before its parts commit (a client's round would block its
    /// thread in that fsync, alone: the coordinator's gather many
    /// clients' commands under one). Otherwise a round of pipelines'
    /// independent writes (`independent`) leaves no record in the
    /// coordination log (see `CommitRound::record`).
    pub(super) fn run_round_here(
        &self,
        ids: &[usize],
        plans: Vec<super::coordinator::Plan>,
        client: bool,
        independent: bool,
    ) -> Result<Vec<Reply>, Vec<super::coordinator::Plan>> {
        use std::sync::atomic::Ordering::SeqCst;
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let free = |ids: &[usize]| {
            (!client || self.coordinator.idle())
                && ids
                    .iter()
                    .all(|&id| self.shared[id].mailed.load(SeqCst) == 0)
        };
        let always = self.durability() == Durability::Always;
        if (always && client) || !free(&ids) {
            return Err(plans);
        }
        let mut cores = Vec::with_capacity(ids.len());
        for &id in &ids {
            match self.cores[id].try_lock() {
                Some(core) if core.takes_round_here(client) => cores.push(Taken::new(core, false)),
                _ => return Err(plans),
            }
        }
        let round = super::coordinator::CommitRound {
            txid: self.intent.next_txid(),
            with: super::intent::encode_with(&ids),
            parts: Default::default(),
            log: self.intent.clone(),
            // Under `always` the record, fsynced, is the round's
            // durability on every shard, independent writes included.
            sync: always,
            record: !independent || always,
            messages: Default::default(),
            tracked: Default::default(),
        };
        if !free(&ids) {
            return Err(plans);
        }
        let locked = Arc::new(super::coordinator::Locked::here(self, ids));
        let spread_from = self.spread_from.load(std::sync::atomic::Ordering::Relaxed);
        Ok(super::actor::run_round_here(
            &mut cores,
            locked,
            plans,
            round,
            spread_from,
        ))
    }

    /// Consistent snapshots of several shards (ascending ids, no duplicates):
    /// opened while holding every shard's commit lock for reading, so no
    /// coordinated commit is half-visible across them. Never blocks a thread
    /// while holding a lock: it backs off and retries instead, so it cannot
    /// deadlock with shard threads taking their locks.
    pub async fn snapshots(&self, ids: &[usize]) -> Result<Vec<ReadCtx>, StoreError> {
        if let [id] = ids {
            return Ok(vec![self.shared[*id].snapshot()?]);
        }
        loop {
            if let Some(snaps) = self.try_snapshots(ids) {
                return snaps;
            }
            tokio::task::yield_now().await;
        }
    }

    /// One attempt of [`ShardSet::snapshots`]: `None` if a commit lock was
    /// busy (all taken locks are released before returning).
    fn try_snapshots(&self, ids: &[usize]) -> Option<Result<Vec<ReadCtx>, StoreError>> {
        let mut guards = Vec::with_capacity(ids.len());
        for &id in ids {
            guards.push(self.shared[id].commit_lock.try_read()?);
        }
        let now = super::now_ms();
        Some(
            ids.iter()
                .map(|&id| self.shared[id].store()?.snapshot(now))
                .collect(),
        )
    }

    /// Closes every shard's file and opens it again (DEBUG RELOAD): each
    /// shard commits what it has queued, makes everything durable, waits
    /// for readers to let go of the file, reopens it and rereads its
    /// state (key counts, expiry sums) from it.
    pub async fn reopen(&self) -> Result<(), StoreError> {
        let mut waits = Vec::with_capacity(self.addrs.len());
        for addr in &self.addrs {
            let (tx, rx) = tokio::sync::oneshot::channel();
            addr.do_send(super::actor::Reopen { done: tx });
            waits.push(rx);
        }
        let mut result = Ok(());
        for w in waits {
            let r = w
                .await
                .unwrap_or_else(|_| Err(StoreError::Internal("shard stopped".into())));
            result = result.and(r);
        }
        result
    }

    /// Commits everything queued, makes it durable and stops the actors.
    pub async fn shutdown(&self) {
        for addr in &self.addrs {
            let (tx, rx) = tokio::sync::oneshot::channel();
            addr.do_send(Shutdown { done: tx });
            let _ = rx.await;
        }
        // Every shard has made every round durable: no record is needed.
        if let Err(e) = self.intent.clear() {
            tracing::error!(error = %e, "cannot clear the coordination log");
        }
        self.system.stop();
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        tracing::info!("shards closed");
    }
}

/// Each shard's file and its store.
type ShardFiles = Vec<(PathBuf, Arc<Store>)>;

/// The error of opening the data directory `dir`'s own files.
fn dir_err(dir: &Path) -> impl FnOnce(std::io::Error) -> OpenError {
    let dir = dir.to_path_buf();
    move |source| OpenError::Dir { dir, source }
}

/// The error of opening the shard file `path`.
fn open_err(path: &Path) -> impl FnOnce(StoreError) -> OpenError {
    let path = path.to_path_buf();
    move |source| OpenError::Open { path, source }
}

/// Opens the `n` shard files of `dir` and the coordination log, and
/// recovers what a crash left: every round on all its shards or on none
/// (how much of each shard's log to keep, and which rounds to redo where a
/// crash cut them short: see `intent`), before anything reads the files.
fn open_files(
    dir: &Path,
    n: usize,
    options: &StoreOptions,
) -> Result<(ShardFiles, super::intent::IntentLog), OpenError> {
    let mut openings = Vec::with_capacity(n);
    for i in 0..n {
        let path = dir.join(format!("shard-{i}.redb"));
        let opening = begin_open_store(&path, options).map_err(open_err(&path))?;
        openings.push((path, opening));
    }
    let (log, records, plan) = plan_open(dir, &openings)?;
    let mut dbs = Vec::with_capacity(n);
    for ((path, opening), keep) in openings.into_iter().zip(&plan.keep) {
        let db = finish_open_store(opening, *keep, options).map_err(open_err(&path))?;
        dbs.push((path, db));
    }
    let log = redo(dir, &dbs, log, &records, &plan.redo)?;
    Ok((dbs, log))
}

/// Opens the coordination log and works out, from it and what each
/// shard's tables and log hold, how to recover (see
/// `intent::plan_recovery`).
fn plan_open(
    dir: &Path,
    openings: &[(PathBuf, crate::storage::store::Opening)],
) -> Result<
    (
        super::intent::IntentLog,
        Vec<super::intent::Record>,
        super::intent::Recovery,
    ),
    OpenError,
> {
    use super::intent::{round_of, IntentLog, ShardLog, COORD_ROW};
    use crate::storage::tables::read_sys_u64;
    let mut logs = Vec::with_capacity(openings.len());
    let mut max = 0;
    for (path, opening) in openings {
        let tables_txid = read_sys_u64(opening.db(), COORD_ROW).map_err(open_err(path))?;
        let tables_seq =
            read_sys_u64(opening.db(), crate::storage::wal::SEQ_ROW).map_err(open_err(path))?;
        let mut log = ShardLog {
            tables_txid,
            tables_seq,
            ..ShardLog::default()
        };
        let mut i = 0;
        log.records = opening
            .scan(|record| {
                if let Some((txid, with)) = round_of(&record.ops) {
                    log.rounds.push((i, txid, with));
                    max = max.max(txid);
                }
                log.seqs.push(record.seq);
                i += 1;
                Ok(())
            })
            .map_err(open_err(path))?;
        max = max.max(tables_txid);
        logs.push(log);
    }
    let (log, records) = IntentLog::open(dir, openings.len(), max).map_err(dir_err(dir))?;
    let plan = super::intent::plan_recovery(&logs, &records);
    Ok((log, records, plan))
}

/// Redoes the rounds `redo` of `records` on each shard that lacks them;
/// the redone rounds are committed durably, so the log is then cleared.
fn redo(
    dir: &Path,
    dbs: &[(PathBuf, Arc<Store>)],
    log: super::intent::IntentLog,
    records: &[super::intent::Record],
    redo: &[u64],
) -> Result<super::intent::IntentLog, OpenError> {
    use super::intent::COORD_ROW;
    use crate::storage::tables::read_sys_u64;
    let mut last = Vec::with_capacity(dbs.len());
    for (path, db) in dbs {
        last.push(read_sys_u64(db.db(), COORD_ROW).map_err(open_err(path))?);
    }
    let redo: std::collections::HashSet<u64> = redo.iter().copied().collect();
    let mut redone = 0;
    for record in records.iter().filter(|r| redo.contains(&r.txid)) {
        for (shard, ops) in &record.parts {
            let Some((path, db)) = dbs.get(*shard) else {
                continue;
            };
            if last[*shard] >= record.txid {
                continue;
            }
            db.apply_to_tables(ops).map_err(open_err(path))?;
            last[*shard] = record.txid;
            redone += 1;
        }
    }
    if redone > 0 {
        tracing::warn!(
            parts = redone,
            "redid multi-shard commits a crash had cut short"
        );
    }
    if !records.is_empty() {
        log.clear().map_err(dir_err(dir))?;
    }
    Ok(log)
}

fn count_shard_files(dir: &Path) -> std::io::Result<usize> {
    let mut n = 0;
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("shard-") && name.ends_with(".redb") {
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::intent::{encode_with, IntentLog, COORD_ROW, WITH_ROW};
    use crate::storage::tables::{apply_row_ops, read_sys_u64};
    use crate::storage::{KvRead, RowOp, Table};
    use std::sync::atomic::Ordering;

    fn options() -> StoreOptions {
        StoreOptions {
            cache_bytes: 1 << 20,
            limits: crate::storage::store::Limits {
                cap: 1 << 20,
                filter_rows: crate::storage::store::FILTER_MIN_ROWS,
                row_cache: 1 << 20,
            },
            before_rotate: None,
            before_sync: None,
            log: None,
            share: None,
        }
    }

    fn shard_file(dir: &Path, i: usize) -> (PathBuf, Arc<Store>) {
        let path = dir.join(format!("shard-{i}.redb"));
        let store = open_store(&path, &options()).unwrap();
        (path, store)
    }

    /// A shard's log generation holding its part of a round is fsynced
    /// when the shard moves to the next one, with or without a sync of the
    /// shard's own, and may then reach its tables. By then the round's
    /// record in the coordination log is durable, and so is every other
    /// shard's log (with the state the round began from there), so a
    /// crash can never leave the round on this shard alone with no way to
    /// redo it on the others.
    #[test]
    fn a_round_and_where_it_began_are_durable_before_a_generation_holding_it() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = IntentLog::open(dir.path(), 2, 0).unwrap();
        let log = Arc::new(log);
        let logs: Vec<crate::storage::wal::Current> = (0..2).map(|_| Default::default()).collect();
        let stores: Vec<_> = (rotation_hooks(&log, &logs).into_iter().zip(&logs))
            .enumerate()
            .map(|(i, (hook, current))| {
                let mut options = options();
                options.before_rotate = Some(hook);
                options.log = Some(current.clone());
                open_store(&dir.path().join(format!("shard-{i}.redb")), &options).unwrap()
            })
            .collect();
        // Shard 1 commits on its own before the round, under `everysec`.
        stores[1]
            .commit(vec![put(Table::Meta, b"before", b"1")], false)
            .unwrap();
        let part = vec![
            put(Table::Meta, b"k", b"v"),
            put(Table::Sys, COORD_ROW, &1u64.to_be_bytes()),
        ];
        log.append(1, &vec![(0, part.clone()), (1, part.clone())], false)
            .unwrap();
        stores[0].commit(part, false).unwrap();
        assert!(!log.synced());
        assert!(!logs[1].synced());
        // Past a quarter of the cap the active buffer is frozen and the
        // log moves on: the generation with the round is fsynced.
        stores[0]
            .commit(vec![put(Table::Meta, b"big", &[7; 300 << 10])], false)
            .unwrap();
        assert!(log.synced());
        assert!(logs[1].synced());
        assert!(logs[0].synced(), "the new generation is published");
    }

    fn commit(db: &redb::Database, ops: &[RowOp]) {
        let txn = db.begin_write().unwrap();
        apply_row_ops(&txn, ops).unwrap();
        txn.commit().unwrap();
    }

    fn put(t: Table, k: &[u8], v: &[u8]) -> RowOp {
        RowOp::Put(t, k.to_vec(), v.to_vec())
    }

    /// A round's part as shard `shard` commits it, among `with`.
    fn part(txid: u64, with: &[usize], key: &[u8], v: &[u8]) -> Vec<RowOp> {
        vec![
            put(Table::Meta, key, v),
            put(Table::Sys, COORD_ROW, &txid.to_be_bytes()),
            put(Table::Sys, WITH_ROW, &encode_with(with)),
        ]
    }

    fn read(store: &Arc<Store>, k: &[u8]) -> Option<Vec<u8>> {
        store.latest(0).unwrap().get(Table::Meta, k).unwrap()
    }

    /// A crash after shard 0 committed round 1 and before shard 1 did:
    /// reopening redoes the round on shard 1 only, and leaves shard 0's
    /// later writes alone.
    #[test]
    fn a_round_cut_short_is_redone_where_it_was_lost() {
        let dir = tempfile::tempdir().unwrap();
        let dbs = vec![shard_file(dir.path(), 0), shard_file(dir.path(), 1)];
        let (log, _) = IntentLog::open(dir.path(), 2, 0).unwrap();
        let txid = log.next_txid();
        assert_eq!(txid, 1);
        let parts = vec![
            (0, part(1, &[0, 1], b"a", b"r1")),
            (1, part(1, &[0, 1], b"b", b"r1")),
        ];
        log.append(txid, &parts, true).unwrap();
        drop(log);
        // In the tables on one shard, in the log on the other.
        commit(dbs[0].1.db(), &parts[0].1);
        dbs[0]
            .1
            .commit(vec![put(Table::Meta, b"a", b"later")], false)
            .unwrap();
        drop(dbs);

        let (dbs, log) = open_files(dir.path(), 2, &options()).unwrap();
        assert_eq!(read(&dbs[0].1, b"a"), Some(b"later".to_vec()));
        assert_eq!(read(&dbs[1].1, b"b"), Some(b"r1".to_vec()));
        assert_eq!(read_sys_u64(dbs[1].1.db(), COORD_ROW).unwrap(), 1);
        assert_eq!(log.next_txid(), 2);
        assert_eq!(std::fs::metadata(log.path()).unwrap().len(), 0);
    }

    /// After a power loss the OS may have written back shard 0's log with
    /// its part of round 1 while the round's record and shard 1's part
    /// were lost: nothing can redo the round on shard 1, so reopening
    /// drops it from shard 0 with what shard 0 committed after it, and
    /// keeps what came before (a prefix of each shard's commits).
    #[test]
    fn a_round_its_record_and_a_part_lost_is_dropped_where_it_survived() {
        let dir = tempfile::tempdir().unwrap();
        let dbs = vec![shard_file(dir.path(), 0), shard_file(dir.path(), 1)];
        let s0 = &dbs[0].1;
        s0.commit(vec![put(Table::Meta, b"a", b"before")], false)
            .unwrap();
        s0.commit(part(1, &[0, 1], b"a", b"r1"), false).unwrap();
        s0.commit(vec![put(Table::Meta, b"c", b"after")], false)
            .unwrap();
        dbs[1]
            .1
            .commit(vec![put(Table::Meta, b"b", b"own")], false)
            .unwrap();
        drop(dbs);

        let (dbs, log) = open_files(dir.path(), 2, &options()).unwrap();
        assert_eq!(read(&dbs[0].1, b"a"), Some(b"before".to_vec()));
        assert_eq!(read(&dbs[0].1, b"c"), None);
        assert_eq!(read_sys_u64(dbs[0].1.db(), COORD_ROW).unwrap(), 0);
        assert_eq!(read(&dbs[1].1, b"b"), Some(b"own".to_vec()));
        // The dropped round's id is not given out again.
        assert_eq!(log.next_txid(), 2);
        // The same files again: what was dropped stays dropped.
        drop(dbs);
        let (dbs, _) = open_files(dir.path(), 2, &options()).unwrap();
        assert_eq!(read(&dbs[0].1, b"a"), Some(b"before".to_vec()));
        assert_eq!(read(&dbs[0].1, b"c"), None);
    }

    /// A page journal an older build left after a crash (its last commits
    /// only there, not yet in the file) is replayed when the shard opens,
    /// then removed.
    #[test]
    fn an_old_page_journal_is_replayed_then_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-0.redb");
        let db = redb::Database::builder()
            .create_with_backend(JournalBackend::open(&path).unwrap())
            .unwrap();
        crate::storage::tables::init_file(&db).unwrap();
        commit(&db, &[put(Table::Meta, b"k", b"journalled")]);
        // A crash: the files as they are now, before any checkpoint.
        let crashed = tempfile::tempdir().unwrap();
        let journal = crate::storage::journal::journal_path(&path);
        for f in [&path, &journal] {
            std::fs::copy(f, crashed.path().join(f.file_name().unwrap())).unwrap();
        }
        drop(db);
        let journal = crate::storage::journal::journal_path(&crashed.path().join("shard-0.redb"));
        assert!(std::fs::metadata(&journal).unwrap().len() > 0);
        let (_, store) = shard_file(crashed.path(), 0);
        let r = store.latest(0).unwrap();
        assert_eq!(
            r.get(Table::Meta, b"k").unwrap(),
            Some(b"journalled".to_vec())
        );
        assert!(!journal.exists());
    }

    fn open_set(dir: &Path, durability: Durability) -> Arc<ShardSet> {
        open_shards(dir, durability, 1)
    }

    fn open_shards(dir: &Path, durability: Durability, shards: usize) -> Arc<ShardSet> {
        let mut cfg = crate::config::Config::defaults();
        cfg.dir = dir.to_path_buf();
        cfg.shards = shards;
        cfg.durability = durability;
        ShardSet::open(&cfg).expect("shards open")
    }

    fn put_key(key: &'static [u8]) -> WriteFn {
        Box::new(move |w| {
            w.put(Table::Meta, key, b"v")?;
            Ok(Reply::Ok)
        })
    }

    /// Writes queued together while the core is held get their replies
    /// through one channel, in order, among other clients' writes, also
    /// when the group is split over two batches; a group queued after
    /// shutdown gets none.
    #[test]
    fn a_group_queued_on_a_held_core_replies_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let mut cfg = crate::config::Config::defaults();
            cfg.dir = dir.path().to_path_buf();
            cfg.shards = 1;
            cfg.max_batch = 2;
            let set = ShardSet::open(&cfg).expect("shards open");
            let int = |i: i64| -> WriteFn { Box::new(move |_| Ok(Reply::Int(i))) };
            let held = set.cores[0].lock();
            let alone = set.enqueue(0, int(0));
            let group = set.enqueue_group(0, vec![int(1), put_key(b"a"), int(3)]);
            let after = set.enqueue(0, int(4));
            drop(held);
            // The actor takes them two to a batch: [0, 1], [a, 3], [4].
            set.shared[0].wake_actor();
            assert_eq!(alone.await.unwrap(), Reply::Int(0));
            assert_eq!(
                group.await.unwrap(),
                vec![Reply::Int(1), Reply::Ok, Reply::Int(3)]
            );
            assert_eq!(after.await.unwrap(), Reply::Int(4));
            set.shutdown().await;
            assert!(set.enqueue_group(0, vec![int(5), int(6)]).await.is_err());
        });
    }

    /// Writes run on the caller's thread, in one batch after what the
    /// actor has queued, with their replies in order and visible at once;
    /// under `always` their commit is deferred: readers see it, and the
    /// queued writes' clients hear of theirs, once it is durable, which
    /// the caller's wait or the actor's next commit makes it. A kick
    /// alone (no writes of the caller's) leaves the queue to the actor.
    #[test]
    fn run_here_commits_on_the_callers_thread_only_where_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let set = open_set(dir.path(), Durability::Everysec);
            let replies = set
                .run_here(0, vec![put_key(b"a"), Box::new(|_| Ok(Reply::Int(7)))])
                .unwrap_or_else(|_| panic!("an idle shard takes the writes"));
            assert_eq!(replies, Ran::Done(vec![Reply::Ok, Reply::Int(7)]));
            let snap = set.shard(0).snapshot().unwrap();
            assert_eq!(snap.get(Table::Meta, b"a").unwrap(), Some(b"v".to_vec()));
            // A held core hands them back.
            let held = set.cores[0].lock();
            assert!(set.run_here(0, vec![put_key(b"b")]).is_err());
            drop(held);
            set.shutdown().await;
            // After shutdown nothing runs.
            assert!(set.run_here(0, vec![put_key(b"c")]).is_err());
        });
        let dir = tempfile::tempdir().unwrap();
        rt.block_on(async {
            let set = open_set(dir.path(), Durability::Always);
            let ran = set.run_here(0, vec![put_key(b"a")]);
            let Ok(Ran::Pending(seq, replies)) = ran else {
                panic!("always defers the commit");
            };
            assert_eq!(replies, vec![Reply::Ok]);
            let store = set.shard(0).store().unwrap();
            let read = |key: &[u8]| {
                let snap = set.shard(0).snapshot().unwrap();
                snap.get(Table::Meta, key).unwrap()
            };
            assert_eq!(read(b"a"), None, "not durable yet");
            // The next writer reads it; a queued write waits with it.
            let queued = set.enqueue(
                0,
                Box::new(|w| Ok(Reply::Bulk(w.get(Table::Meta, b"a")?.unwrap().into()))),
            );
            let Ok(Ran::Pending(next, _)) = set.run_here(0, vec![put_key(b"b")]) else {
                panic!("deferred again");
            };
            assert!(next > seq && !store.is_durable(seq));
            set.durable(0, seq).await;
            assert!(store.is_durable(next), "one sync covers both");
            assert_eq!(queued.await.unwrap(), Reply::Bulk(b"v".to_vec().into()));
            assert_eq!(
                (read(b"a"), read(b"b")),
                (Some(b"v".to_vec()), Some(b"v".to_vec()))
            );
            // A kick alone goes to the actor, whose commit is durable.
            assert!(set.run_here(0, Vec::new()).is_err());
            let Ok(Ran::Pending(last, _)) = set.run_here(0, vec![put_key(b"c")]) else {
                panic!("deferred");
            };
            assert_eq!(set.submit(0, put_key(b"d")).await.unwrap(), Reply::Ok);
            assert!(
                store.is_durable(last),
                "the actor's commit syncs the deferred one"
            );
            set.shutdown().await;
        });
    }

    /// A write queued while a thread holds the core as a `Taken` waits for
    /// that thread, which runs it as it gives the core back (under
    /// `always`, wakes the actor for it instead); one queued while the core
    /// is locked otherwise wakes the actor, which runs it once the lock is
    /// free; after shutdown a queued write gets a closed channel. Queued
    /// writes keep their order, and run before the next thread's own.
    #[test]
    fn queued_writes_are_run_by_whoever_gives_the_core_back() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let set = open_set(dir.path(), Durability::Everysec);
            let held = Taken::new(set.cores[0].lock(), false);
            let mut first = set.submit(0, put_key(b"a"));
            let mut second = set.submit(0, Box::new(|_| Ok(Reply::Int(2))));
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(first.try_recv().is_err(), "waits for the holder");
            drop(held);
            // Run by the dropping thread itself: ready without awaiting.
            assert_eq!(first.try_recv().unwrap(), Reply::Ok);
            assert_eq!(second.try_recv().unwrap(), Reply::Int(2));
            assert!(!set.shard(0).queue.lock().held());

            // A plain lock (no `Taken`): the actor is woken and waits for it.
            let locked = set.cores[0].lock();
            let mut queued = set.submit(0, put_key(b"b"));
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(queued.try_recv().is_err());
            drop(locked);
            assert_eq!(queued.await.unwrap(), Reply::Ok);

            // Queued writes (here not kicked yet) go before the next
            // client's own, in one batch.
            let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
            let log = |n: i64| -> WriteFn {
                let order = order.clone();
                Box::new(move |_| {
                    order.lock().push(n);
                    Ok(Reply::Int(n))
                })
            };
            let earlier = set.enqueue(0, log(1));
            // The actor may still be giving the core back after the last write.
            while set.cores[0].is_locked() {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            let own = set
                .run_here(0, vec![log(2)])
                .unwrap_or_else(|_| panic!("the core is free"));
            assert_eq!(own, Ran::Done(vec![Reply::Int(2)]));
            assert_eq!(earlier.await.unwrap(), Reply::Int(1));
            assert_eq!(*order.lock(), vec![1, 2]);
            set.shutdown().await;
            assert!(set.submit(0, put_key(b"c")).await.is_err());
        });
        let dir = tempfile::tempdir().unwrap();
        rt.block_on(async {
            let set = open_set(dir.path(), Durability::Always);
            let held = Taken::new(set.cores[0].lock(), false);
            let queued = set.submit(0, put_key(b"a"));
            drop(held);
            assert_eq!(queued.await.unwrap(), Reply::Ok);
            let snap = set.shard(0).snapshot().unwrap();
            assert_eq!(snap.get(Table::Meta, b"a").unwrap(), Some(b"v".to_vec()));
            set.shutdown().await;
        });
    }

    /// Clients queueing writes, running them on their own threads and
    /// holding the core in turn, on several threads at once: no write is
    /// left in the queue unrun, every write runs exactly once, each
    /// client's in the order it sent them, and every reply arrives.
    #[test]
    fn writes_from_many_threads_run_once_in_each_clients_order() {
        const CLIENTS: usize = 6;
        const WRITES: usize = 2000;
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let set = open_set(dir.path(), Durability::Everysec);
            let log = Arc::new(parking_lot::Mutex::new(Vec::new()));
            let mut tasks = Vec::new();
            for client in 0..CLIENTS {
                let (set, log) = (set.clone(), log.clone());
                tasks.push(tokio::spawn(async move {
                    let write = |n: usize| -> WriteFn {
                        let log = log.clone();
                        Box::new(move |_| {
                            log.lock().push((client, n));
                            Ok(Reply::Int(n as i64))
                        })
                    };
                    let mut n = 0;
                    while n < WRITES {
                        // Alternately: queued without waiting (three at a
                        // time), or run here when the core is free.
                        if n % 2 == 0 {
                            let rxs: Vec<_> =
                                (n..n + 3).map(|i| set.enqueue(0, write(i))).collect();
                            set.kick(0);
                            for (i, rx) in (n..).zip(rxs) {
                                assert_eq!(rx.await.unwrap(), Reply::Int(i as i64));
                            }
                            n += 3;
                        } else {
                            match set.run_here(0, vec![write(n)]) {
                                Ok(replies) => {
                                    assert_eq!(replies, Ran::Done(vec![Reply::Int(n as i64)]))
                                }
                                Err(mut back) => {
                                    let rx = set.submit(0, back.pop().unwrap());
                                    assert_eq!(rx.await.unwrap(), Reply::Int(n as i64));
                                }
                            }
                            n += 1;
                        }
                        tokio::task::yield_now().await;
                    }
                    n
                }));
            }
            let mut sent = Vec::new();
            for t in tasks {
                // A write left in the queue with no one to run it would
                // hang its client.
                let done = tokio::time::timeout(std::time::Duration::from_secs(30), t);
                sent.push(done.await.expect("every write runs").unwrap());
            }
            let log = std::mem::take(&mut *log.lock());
            assert_eq!(log.len(), sent.iter().sum::<usize>());
            for (client, &n) in sent.iter().enumerate() {
                let mine: Vec<usize> = log
                    .iter()
                    .filter(|(c, _)| *c == client)
                    .map(|(_, i)| *i)
                    .collect();
                assert_eq!(mine, (0..n).collect::<Vec<_>>(), "client {client}");
            }
            set.shutdown().await;
        });
    }

    /// A blind plan over free shards runs on the caller's thread: it
    /// commits on every shard, with its record in the coordination log;
    /// a held core, or `always`, hands it back for the coordinator.
    #[test]
    fn run_plan_here_runs_a_round_on_the_callers_thread_only_where_allowed() {
        use crate::shard::coordinator::spread;
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let set = open_shards(dir.path(), Durability::Everysec, 2);
            a_and_b_here(&set, &[1, 0, 1], false);
            for id in [0, 1] {
                let stats = &set.shard(id).stats;
                assert_eq!(stats.coordinated_here.load(Ordering::Relaxed), 1);
            }
            let (_, records) = IntentLog::open(dir.path(), 2, 0).unwrap();
            let shards: Vec<usize> = records[0].parts.iter().map(|(s, _)| *s).collect();
            assert_eq!((records.len(), shards), (1, vec![0, 1]));

            let held = set.cores[1].lock();
            let plan = spread(vec![(0, put_key(b"c")), (1, put_key(b"d"))]);
            let Err(plan) = set.run_plan_here(&[0, 1], plan, false) else {
                panic!("a held core hands the round back");
            };
            drop(held);
            let rx = set.coordinator().submit(vec![0, 1], true, false, plan);
            let reply = rx.await.unwrap();
            assert_eq!(reply, Reply::Array(vec![Reply::Ok, Reply::Ok]));
            set.shutdown().await;
        });
        let dir = tempfile::tempdir().unwrap();
        rt.block_on(async {
            let set = open_shards(dir.path(), Durability::Always, 2);
            let plan = spread(vec![(0, put_key(b"a")), (1, put_key(b"b"))]);
            assert!(set.run_plan_here(&[0, 1], plan, false).is_err());
            set.shutdown().await;
        });
    }

    /// A round of pipelines' independent writes run here leaves no record
    /// in the coordination log: each shard's part commits as a batch of
    /// its own, reads as the round's would, and is there after the shards
    /// reopen (their logs replayed).
    #[test]
    fn a_round_of_independent_writes_leaves_no_record() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let set = open_shards(dir.path(), Durability::Everysec, 2);
            a_and_b_here(&set, &[0, 1], true);
            let (_, records) = IntentLog::open(dir.path(), 2, 0).unwrap();
            assert!(records.is_empty(), "no record of independent writes");
            set.shutdown().await;
        });
        rt.block_on(async {
            let set = open_shards(dir.path(), Durability::Everysec, 2);
            read_a_and_b(&set);
            set.shutdown().await;
        });
    }

    /// Runs a round writing `a` on shard 0 and `b` on shard 1 on the
    /// caller's thread (its shards free), and reads both back.
    fn a_and_b_here(set: &ShardSet, ids: &[usize], independent: bool) {
        let plan = crate::shard::coordinator::spread(vec![(0, put_key(b"a")), (1, put_key(b"b"))]);
        let reply = set
            .run_plan_here(ids, plan, independent)
            .unwrap_or_else(|_| panic!("free shards take the round"));
        assert_eq!(reply, Reply::Array(vec![Reply::Ok, Reply::Ok]));
        read_a_and_b(set);
    }

    /// Checks that `a` (shard 0) and `b` (shard 1) read `v`.
    fn read_a_and_b(set: &ShardSet) {
        for (id, key) in [(0, b"a"), (1, b"b")] {
            let snap = set.shard(id).snapshot().unwrap();
            assert_eq!(snap.get(Table::Meta, key).unwrap(), Some(b"v".to_vec()));
        }
    }

    /// A round's record names where it began on each shard: the number
    /// of the shard's last commit before it, its part there being the
    /// next (what recovery compares a shard's state with before redoing
    /// the round there).
    #[test]
    fn a_round_record_names_where_it_began_on_each_shard() {
        use crate::shard::coordinator::spread;
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let set = open_shards(dir.path(), Durability::Everysec, 2);
            set.submit(0, put_key(b"z")).await.unwrap();
            let seq = |id: usize| set.shard(id).store().unwrap().last_seq();
            let starts = vec![Some(seq(0)), Some(seq(1))];
            assert!(starts[0] > starts[1]);
            let plan = spread(vec![(0, put_key(b"a")), (1, put_key(b"b"))]);
            let reply = set
                .coordinator()
                .submit(vec![0, 1], true, false, plan)
                .await;
            assert_eq!(reply.unwrap(), Reply::Array(vec![Reply::Ok, Reply::Ok]));
            let (_, records) = IntentLog::open(dir.path(), 2, 0).unwrap();
            assert_eq!(records.len(), 1);
            assert_eq!(records[0].starts, starts);
            assert_eq!(seq(0), starts[0].unwrap() + 1);
            assert_eq!(seq(1), starts[1].unwrap() + 1);
            set.shutdown().await;
        });
    }

    /// Under `always` the coordinator's thread runs a round here, a
    /// client's does not: the shard's deferred commit (a client's write
    /// awaiting its sync) is made durable and published first, the round
    /// begins right after it, and its record is in the coordination log,
    /// fsynced, before its parts commit.
    #[test]
    fn under_always_the_coordinator_runs_a_round_here_from_a_durable_state() {
        use crate::shard::coordinator::spread;
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let set = open_shards(dir.path(), Durability::Always, 2);
            let Ok(Ran::Pending(deferred, replies)) = set.run_here(0, vec![put_key(b"z")]) else {
                panic!("a free core defers a client's write under always");
            };
            assert_eq!(replies, vec![Reply::Ok]);
            let store = set.shard(0).store().unwrap();
            assert!(!store.is_durable(deferred));
            let plan = || spread(vec![(0, put_key(b"a")), (1, put_key(b"b"))]);
            assert!(set.run_plan_here(&[0, 1], plan(), true).is_err());
            let replies = set
                .run_round_here(&[0, 1], vec![plan()], false, true)
                .unwrap_or_else(|_| panic!("free shards take the coordinator's round"));
            assert_eq!(replies, vec![Reply::Array(vec![Reply::Ok, Reply::Ok])]);
            assert!(store.is_durable(deferred));
            assert!(store.is_durable(deferred + 1));
            // Independent writes, yet recorded: the record is their fsync.
            let (_, records) = IntentLog::open(dir.path(), 2, 0).unwrap();
            assert_eq!(records.len(), 1);
            assert_eq!(records[0].starts[0], Some(deferred));
            let snap = set.shard(1).snapshot().unwrap();
            assert_eq!(snap.get(Table::Meta, b"b").unwrap(), Some(b"v".to_vec()));
            assert_eq!(
                set.shard(0).stats.coordinated_here.load(Ordering::Relaxed),
                1
            );
            set.shutdown().await;
        });
    }

    /// A step that fails on one shard of a round run here rolls back the
    /// other shard too, and the error is the reply.
    #[test]
    fn a_failed_step_rolls_back_a_round_run_here() {
        use crate::shard::coordinator::spread;
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let set = open_shards(dir.path(), Durability::Everysec, 2);
            let fail: WriteFn = Box::new(|_| Err(StoreError::Internal("boom".into())));
            let plan = spread(vec![(0, put_key(b"doomed")), (1, fail)]);
            let reply = set
                .run_plan_here(&[0, 1], plan, false)
                .unwrap_or_else(|_| panic!("free shards take the round"));
            assert_eq!(reply, Reply::err("internal error: boom"));
            let snap = set.shard(0).snapshot().unwrap();
            assert_eq!(snap.get(Table::Meta, b"doomed").unwrap(), None);
            // The shards took part in nothing and still work.
            let plan = spread(vec![(0, put_key(b"kept")), (1, put_key(b"too"))]);
            assert!(set.run_plan_here(&[0, 1], plan, false).is_ok());
            let snap = set.shard(0).snapshot().unwrap();
            assert_eq!(snap.get(Table::Meta, b"kept").unwrap(), Some(b"v".to_vec()));
            set.shutdown().await;
        });
    }

    /// A round of many blind plans run on a tokio task's thread, as the
    /// coordinator runs them: every plan gets its reply, although their
    /// step results outnumber the task's poll budget.
    #[test]
    fn a_round_of_many_plans_runs_here_whole() {
        use crate::shard::coordinator::spread;
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let set = open_shards(dir.path(), Durability::Everysec, 2);
            let runner = set.clone();
            let replies = tokio::spawn(async move {
                let plans = (0..300)
                    .map(|_| spread(vec![(0, put_key(b"a")), (1, put_key(b"b"))]))
                    .collect();
                runner.run_round_here(&[0, 1], plans, false, false)
            })
            .await
            .unwrap()
            .unwrap_or_else(|_| panic!("free shards take the round"));
            let ok = Reply::Array(vec![Reply::Ok, Reply::Ok]);
            assert_eq!(replies, vec![ok; 300]);
            // One round: one commit on each shard.
            for id in 0..2 {
                let stats = &set.shard(id).stats;
                assert_eq!(stats.coordinated_here.load(Ordering::Relaxed), 1);
            }
            set.shutdown().await;
        });
    }
}

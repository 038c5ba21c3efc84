//! The set of shards: opening the files, starting the actors on their own
//! actix System thread, routing by slot, and shutting down.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use actix::prelude::*;

use super::actor::{ShardActor, Shutdown, Submit};
use super::{ShardShared, WriteFn};
use crate::cluster;
use crate::config::{Config, Durability};
use crate::protocol::Reply;
use crate::storage::journal::JournalBackend;
use crate::storage::tables::init_file;
use crate::storage::{ReadCtx, ShardState, StoreError};

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
    system: System,
    thread: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Held for the life of the process: a second server on the same
    /// directory fails to take it.
    _lock: File,
    /// The durability policy the shards run with.
    pub durability: Durability,
    /// Clients blocked on keys.
    pub blocked: Arc<super::blocking::BlockRegistry>,
    coordinator: super::coordinator::Coordinator,
}

impl ShardSet {
    /// Opens (creating if needed) the shard files in `cfg.dir` and starts one
    /// actor per shard.
    pub fn open(cfg: &Config) -> Result<Arc<ShardSet>, OpenError> {
        let dir = cfg.dir.clone();
        let dir_err = |source| OpenError::Dir {
            dir: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(dir_err)?;
        let lock = File::create(dir.join("LOCK")).map_err(dir_err)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(OpenError::Locked(dir)),
            Err(std::fs::TryLockError::Error(e)) => return Err(dir_err(e)),
        }
        let n = cfg.shard_count();
        let found = count_shard_files(&dir).map_err(dir_err)?;
        if found != 0 && found != n {
            return Err(OpenError::ShardCount {
                dir,
                found,
                configured: n,
            });
        }
        let blocked = Arc::new(super::blocking::BlockRegistry::default());
        let mut shared = Vec::with_capacity(n);
        let mut states = Vec::with_capacity(n);
        for i in 0..n {
            let path = dir.join(format!("shard-{i}.redb"));
            let open_err = |source: StoreError| OpenError::Open {
                path: path.clone(),
                source,
            };
            let backend =
                JournalBackend::open(&path).map_err(|e| open_err(redb::Error::Io(e).into()))?;
            let db = redb::Database::builder()
                .set_cache_size(cfg.cache_mb * 1024 * 1024)
                .create_with_backend(backend)
                .map_err(|e| open_err(e.into()))?;
            init_file(&db).map_err(open_err)?;
            let state = ShardState::load(&db).map_err(open_err)?;
            shared.push(Arc::new(ShardShared::new(i, Arc::new(db), blocked.clone())));
            states.push(state);
        }
        let (durability, max_batch) = (cfg.durability, cfg.max_batch);
        let (tx, rx) = std::sync::mpsc::channel();
        let actor_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("cairn-actix".into())
            .spawn(move || {
                // actix needs its own System, which cannot live inside the
                // tokio runtime the connections run on: it gets this thread.
                let sys = System::new();
                sys.block_on(async move {
                    let mut addrs = Vec::new();
                    for (s, state) in actor_shared.into_iter().zip(states) {
                        let arbiter = Arbiter::new();
                        let addr = ShardActor::start_in_arbiter(&arbiter.handle(), move |_| {
                            ShardActor::new(s, state, durability, max_batch)
                        });
                        addrs.push(addr);
                    }
                    let _ = tx.send((addrs, System::current()));
                });
                let _ = sys.run();
            })
            .map_err(dir_err)?;
        let (addrs, system) = rx.recv().expect("actix system started");
        tracing::info!(shards = n, dir = %cfg.dir.display(), durability = durability.name(), "shards open");
        Ok(Arc::new_cyclic(|me| ShardSet {
            blocked,
            shared,
            addrs,
            system,
            thread: parking_lot::Mutex::new(Some(thread)),
            _lock: lock,
            durability,
            coordinator: super::coordinator::Coordinator::start(me.clone()),
        }))
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
        cluster::shard_of_slot(cluster::key_slot(key), self.len())
    }

    /// A shard's shared state.
    pub fn shard(&self, id: usize) -> &Arc<ShardShared> {
        &self.shared[id]
    }

    /// Every shard's shared state.
    pub fn shards(&self) -> &[Arc<ShardShared>] {
        &self.shared
    }

    /// The actor of a shard.
    pub fn addr(&self, id: usize) -> &Addr<ShardActor> {
        &self.addrs[id]
    }

    /// The multi-shard coordinator.
    pub fn coordinator(&self) -> &super::coordinator::Coordinator {
        &self.coordinator
    }

    /// Queues a write on a shard; the receiver yields its reply after commit.
    pub fn submit(&self, id: usize, f: WriteFn) -> tokio::sync::oneshot::Receiver<Reply> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.addrs[id].do_send(Submit { f, reply: tx });
        rx
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
                .map(|&id| ReadCtx::begin(&self.shared[id].db, now))
                .collect(),
        )
    }

    /// Commits everything queued, makes it durable and stops the actors.
    pub async fn shutdown(&self) {
        for addr in &self.addrs {
            let (tx, rx) = tokio::sync::oneshot::channel();
            addr.do_send(Shutdown { done: tx });
            let _ = rx.await;
        }
        self.system.stop();
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        tracing::info!("shards closed");
    }
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

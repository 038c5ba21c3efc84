//! `cairn --import FILE.rdb`: loads an RDB file written by Redis (any
//! version up to 7.0's) into a cairn data directory.
//!
//! The file is read twice, as a stream: first only checked (every value
//! decodes, the checksum matches), then loaded. A damaged file is refused
//! before anything is written, so there is never half an import. Memory
//! stays bounded whatever the file's size: one key's value at a time is
//! decoded, and at most [`IN_FLIGHT`] keys wait in the shards' queues
//! (where group commit writes them in batches).

use std::collections::VecDeque;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::file::{Item, LoadError, Loader};
use super::keys;
use crate::config::Config;
use crate::protocol::Reply;
use crate::server::Server;
use crate::shard::ShardSet;
use crate::storage::keyspace::Key;

/// Keys queued to shards before the oldest must have committed.
const IN_FLIGHT: usize = 512;

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid RDB file (nothing was imported).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The data directory could not be opened.
    #[error(transparent)]
    Open(#[from] crate::shard::set::OpenError),
    /// A shard refused a write.
    #[error("writing key {key:?} failed: {why}")]
    Write {
        /// The key.
        key: String,
        /// The shard's reply.
        why: String,
    },
}

/// What an import did.
#[derive(Debug, Default, Clone, Copy)]
pub struct ImportStats {
    /// Keys written.
    pub keys: u64,
    /// Keys skipped because they had already expired.
    pub expired: u64,
    /// Function libraries loaded.
    pub functions: u64,
    /// Bytes of the file.
    pub bytes: u64,
    /// Seconds the load took (both passes).
    pub secs: f64,
}

fn open(path: &Path) -> Result<Loader<BufReader<std::fs::File>>, ImportError> {
    let f = std::fs::File::open(path).map_err(|source| ImportError::Io {
        path: path.display().to_string(),
        source,
    })?;
    Ok(Loader::new(BufReader::with_capacity(1 << 20, f))?)
}

/// Checks that the whole file reads (values and checksum), writing
/// nothing; returns its size.
pub fn check(path: &Path) -> Result<u64, ImportError> {
    let mut l = open(path)?;
    while l.next()?.is_some() {}
    Ok(l.consumed())
}

/// Imports `path` into the data directory of `config`. Keys already there
/// are replaced by the file's; keys that have expired are skipped.
pub async fn import(config: Config, path: &Path) -> Result<ImportStats, ImportError> {
    let started = Instant::now();
    let bytes = check(path)?;
    let shards = ShardSet::open(&config)?;
    let server = Arc::new(Server::new(config, shards.clone()));
    let result = load(&server, &shards, path).await;
    shards.shutdown().await;
    let mut stats = result?;
    stats.bytes = bytes;
    stats.secs = started.elapsed().as_secs_f64();
    Ok(stats)
}

/// Loads the RDB file at `path` into the running shards of `server`: keys
/// already there are replaced, keys that have expired are skipped,
/// function libraries are added (replacing those of the same name). The
/// file is not checked first (see [`check`]).
pub(crate) async fn load(
    server: &Arc<Server>,
    shards: &Arc<ShardSet>,
    path: &Path,
) -> Result<ImportStats, ImportError> {
    let mut stats = ImportStats::default();
    let mut l = open(path)?;
    let mut pending: VecDeque<(String, tokio::sync::oneshot::Receiver<Reply>)> = VecDeque::new();
    let mut functions = Vec::new();
    let now = crate::shard::now_ms();
    let limits = server.encoding_limits();
    while let Some(item) = l.next()? {
        match item {
            Item::Function(code) => functions.push(code),
            Item::Key {
                db,
                key,
                value,
                expire_ms,
            } => {
                if expire_ms != 0 && expire_ms <= now {
                    stats.expired += 1;
                    continue;
                }
                if pending.len() >= IN_FLIGHT {
                    let (k, rx) = pending.pop_front().expect("non-empty");
                    settle(k, rx).await?;
                }
                let shard = shards.shard_of_key(&key);
                let name = String::from_utf8_lossy(&key).into_owned();
                let rx = shards.submit(
                    shard,
                    Box::new(move |w| {
                        keys::write(w, Key::new(db, &key), &value, expire_ms, &limits)?;
                        Ok(Reply::Ok)
                    }),
                );
                pending.push_back((name, rx));
                stats.keys += 1;
            }
        }
    }
    for (k, rx) in pending {
        settle(k, rx).await?;
    }
    if !functions.is_empty() {
        stats.functions = functions.len() as u64;
        match crate::families::functions::import_libraries(server.clone(), functions).await {
            Reply::Ok => {}
            other => {
                return Err(ImportError::Write {
                    key: "(function libraries)".into(),
                    why: format!("{other:?}"),
                })
            }
        }
    }
    Ok(stats)
}

async fn settle(key: String, rx: tokio::sync::oneshot::Receiver<Reply>) -> Result<(), ImportError> {
    match rx.await {
        Ok(Reply::Ok) => Ok(()),
        Ok(other) => Err(ImportError::Write {
            key,
            why: format!("{other:?}"),
        }),
        Err(_) => Err(ImportError::Write {
            key,
            why: "shard stopped".into(),
        }),
    }
}

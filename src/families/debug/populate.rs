//! DEBUG POPULATE count [prefix] [size]: `prefix:N` = `value:N` (padded
//! with zero bytes or cut to `size`) for every N below `count` whose key
//! does not exist yet. The keys go through their shards' ordinary write
//! path, many to a write op, with a bounded number of ops in flight.

use std::collections::VecDeque;

use crate::command::args::Args;
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::shard::WriteFn;
use crate::storage::encoding::Meta;
use crate::storage::keyspace::{self, Key};
use crate::storage::{StoreError, WriteCtx};

/// Keys per write op.
const BATCH: usize = 1000;
/// Write ops waiting for their commit at most.
const IN_FLIGHT: usize = 64;
/// Redis builds key names in a 128-byte buffer.
const MAX_NAME: usize = 127;

/// A count or size, refused as Redis's getPositiveLong refuses it.
fn positive(arg: &[u8]) -> Result<u64, Reply> {
    crate::util::num::parse_i64(arg)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| Reply::err("value is out of range, must be positive"))
}

/// DEBUG POPULATE (see the module doc).
pub fn populate(s: &Session, a: &Args) -> Action {
    let count = match positive(a.get(2)) {
        Ok(n) => n,
        Err(r) => return r.into(),
    };
    let size = match a.len() {
        5 => match positive(a.get(4)) {
            Ok(n) => n as usize,
            Err(r) => return r.into(),
        },
        _ => 0,
    };
    // The prefix is a C string to Redis: it ends at a zero byte.
    let prefix: Vec<u8> = match a.len() {
        3 => b"key".to_vec(),
        _ => a
            .get(3)
            .split(|&b| b == 0)
            .next()
            .unwrap_or_default()
            .to_vec(),
    };
    let (shards, db) = (s.server.shards.clone(), s.db);
    let entries = (0..count).map(move |n| {
        let mut name = prefix.clone();
        name.extend_from_slice(format!(":{n}").as_bytes());
        name.truncate(MAX_NAME);
        let mut value = format!("value:{n}").into_bytes();
        if size > 0 {
            value.resize(size, 0);
        }
        (name, value)
    });
    if s.in_exec {
        // Inside EXEC the shards are held by the transaction: the keys go
        // in as its steps.
        return in_transaction(shards, db, entries);
    }
    Action::Job(Box::pin(async move {
        let mut batches: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![Vec::new(); shards.len()];
        let mut pending = VecDeque::new();
        for (name, value) in entries {
            let id = shards.shard_of_key(&name);
            batches[id].push((name, value));
            if batches[id].len() >= BATCH {
                let batch = std::mem::take(&mut batches[id]);
                pending.push_back(shards.submit(id, op(db, batch)));
            }
            while pending.len() > IN_FLIGHT {
                if let Some(err) = failed(pending.pop_front()).await {
                    return err;
                }
            }
        }
        for (id, batch) in batches.into_iter().enumerate() {
            if !batch.is_empty() {
                pending.push_back(shards.submit(id, op(db, batch)));
            }
        }
        while let Some(p) = pending.pop_front() {
            if let Some(err) = failed(Some(p)).await {
                return err;
            }
        }
        Reply::Ok
    }))
}

/// POPULATE as steps of the transaction that holds every shard.
fn in_transaction(
    shards: std::sync::Arc<crate::shard::ShardSet>,
    db: u8,
    entries: impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
) -> Action {
    let mut batches: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![Vec::new(); shards.len()];
    for (name, value) in entries {
        batches[shards.shard_of_key(&name)].push((name, value));
    }
    let ids = (0..shards.len()).collect();
    crate::families::coordinated(ids, move |locked| async move {
        let sent: Vec<_> = batches
            .into_iter()
            .enumerate()
            .map(|(id, batch)| locked.send(id, move |w| add_missing(w, db, batch)))
            .collect();
        for step in sent {
            step.wait().await?;
        }
        Ok(Ok(Reply::Ok))
    })
}

/// The error a write op answered, if it did.
async fn failed(op: Option<tokio::sync::oneshot::Receiver<Reply>>) -> Option<Reply> {
    match op?.await {
        Ok(r) if r.is_error() => Some(r),
        Ok(_) => None,
        Err(_) => Some(Reply::err("shard unavailable")),
    }
}

/// Stores each key that does not exist (an expired one is replaced).
fn add_missing(w: &mut WriteCtx, db: u8, batch: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), StoreError> {
    for (name, value) in batch {
        let key = Key::new(db, &name);
        if keyspace::lookup_for_write(w, key)?.is_none() {
            keyspace::store(w, key, None, &Meta::string(value, 0))?;
        }
    }
    Ok(())
}

/// [`add_missing`] as a write op of its own.
fn op(db: u8, batch: Vec<(Vec<u8>, Vec<u8>)>) -> WriteFn {
    Box::new(move |w| add_missing(w, db, batch).map(|()| Reply::Ok))
}

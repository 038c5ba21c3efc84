//! Command families. Each handler parses its arguments on the connection and
//! returns an [`Action`]: the closure it carries is the part that runs on a
//! shard (inside a snapshot or the batch transaction) and never touches a
//! socket.

pub mod acl;
pub mod bits;
pub mod blocking;
pub mod cluster;
pub mod collection;
pub mod config;
pub mod debug;
pub mod dump;
pub mod functions;
pub mod generic;
pub mod geo;
pub mod hash;
pub mod hll;
pub mod info;
pub mod latency;
pub mod latency_doctor;
pub mod list;
pub mod lolwut;
pub mod memory;
pub mod module;
pub mod moveslot;
pub mod object;
pub mod persistence;
pub mod pubsub;
pub mod scripting;
pub mod server;
pub mod set;
pub mod slowlog;
pub mod sort;
pub mod stream;
pub mod string;
pub mod tracking;
pub mod transaction;
pub mod zset;

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;

use crate::command::args::WRONGTYPE;
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::shard::coordinator::{CoordError, Locked};
use crate::shard::ShardSet;
use crate::storage::keyspace::{self, Key};
use crate::storage::{KeyType, KvRead, Meta, MetaBody, StoreError, WriteCtx};

/// Why a shard-side op stopped early: a reply for the client (WRONGTYPE,
/// overflow...) or a storage failure that aborts the batch.
#[derive(Debug)]
pub enum Fail {
    /// Reply this to the client; nothing was written.
    Reply(Reply),
    /// Storage failed.
    Store(StoreError),
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Fail {
        Fail::Store(e)
    }
}

impl From<Reply> for Fail {
    fn from(r: Reply) -> Fail {
        Fail::Reply(r)
    }
}

/// Shard-side result.
pub type OpResult = Result<Reply, Fail>;

/// Parses the `numkeys key... FIRST|SECOND [COUNT n]` tail shared by LMPOP,
/// ZMPOP, BLMPOP and BZMPOP (numkeys at `numkeys_at`), with Redis's errors.
/// Returns the keys, whether the first direction word was given, and the
/// count (default 1).
pub fn parse_mpop(
    a: &crate::command::Args,
    numkeys_at: usize,
    sides: (&str, &str),
) -> Result<(Vec<Bytes>, bool, u64), Reply> {
    use crate::command::args::{error, int, is, SYNTAX};
    let numkeys = match int(a.get(numkeys_at)) {
        Ok(n) if n > 0 => n as usize,
        _ => return Err(Reply::err("numkeys should be greater than 0")),
    };
    let where_idx = numkeys_at + 1 + numkeys;
    if where_idx >= a.len() {
        return Err(error(SYNTAX));
    }
    let first = if is(a.get(where_idx), sides.0) {
        true
    } else if is(a.get(where_idx), sides.1) {
        false
    } else {
        return Err(error(SYNTAX));
    };
    let mut count = None;
    let rest = a.from(where_idx + 1);
    let mut i = 0;
    while i < rest.len() {
        if count.is_none() && is(&rest[i], "count") && i + 1 < rest.len() {
            match int(&rest[i + 1]) {
                Ok(c) if c > 0 => count = Some(c as u64),
                _ => return Err(Reply::err("count should be greater than 0")),
            }
            i += 2;
        } else {
            return Err(error(SYNTAX));
        }
    }
    Ok((
        a.all()[numkeys_at + 1..where_idx].to_vec(),
        first,
        count.unwrap_or(1),
    ))
}

/// The optional count of SPOP / ZPOPMIN / ZPOPMAX at argv[2]: `None`
/// without one. Redis gives every bad count, non-numbers included, one error.
pub fn parse_pop_count(a: &crate::command::Args) -> Result<Option<u64>, Reply> {
    use crate::command::args::{error, int, SYNTAX};
    match a.len() {
        2 => Ok(None),
        3 => match int(a.get(2)) {
            Ok(c) if c >= 0 => Ok(Some(c as u64)),
            _ => Err(Reply::err("value is out of range, must be positive")),
        },
        _ => Err(error(SYNTAX)),
    }
}

/// Parses `count [WITH...]` of HRANDFIELD / ZRANDMEMBER / SRANDMEMBER-style
/// commands (count at argv[2], optional `flag` at argv[3]) with Redis's
/// range rules and errors. Returns the count and whether the flag was given.
pub fn parse_rand_count(a: &crate::command::Args, flag: &str) -> Result<(i64, bool), Reply> {
    use crate::command::args::{error, is, NOT_INTEGER, SYNTAX};
    let count = match a.int(2) {
        Ok(i64::MIN) => {
            return Err(Reply::err(
                "value is out of range, value must between -9223372036854775807 and 9223372036854775807",
            ))
        }
        Ok(c) => c,
        Err(_) => return Err(error(NOT_INTEGER)),
    };
    let with = match a.len() {
        3 => false,
        4 if is(a.get(3), flag) => true,
        _ => return Err(error(SYNTAX)),
    };
    // Pairs double the reply: Redis refuses counts that would overflow.
    if with && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
        return Err(Reply::err("value is out of range"));
    }
    Ok((count, with))
}

/// Runs a read command's `f` on consistent snapshots of the keys' shards
/// (its key lookups count in INFO's keyspace hits / misses).
pub async fn on_views<T>(
    server: &crate::server::Server,
    db: u8,
    keys: &[Bytes],
    f: impl FnOnce(&[&dyn KvRead], &[Key]) -> T,
) -> Result<T, Reply> {
    let shards = &server.shards;
    let ids: Vec<usize> = keys.iter().map(|k| shards.shard_of_key(k)).collect();
    let mut uniq = ids.clone();
    uniq.sort_unstable();
    uniq.dedup();
    let snaps = shards.snapshots(&uniq).await.map_err(Reply::err)?;
    let ks: Vec<Key> = keys.iter().map(|k| Key::new(db, k)).collect();
    let counted: Vec<Counted> = ids
        .iter()
        .map(|id| Counted {
            inner: &snaps[uniq.binary_search(id).unwrap()],
            stats: &server.stats,
            hub: Some(&server.pubsub),
        })
        .collect();
    let readers: Vec<&dyn KvRead> = counted.iter().map(|c| c as &dyn KvRead).collect();
    Ok(f(&readers, &ks))
}

/// Runs a multi-shard read on fresh consistent snapshots of its shards,
/// on the read threads while reads wait for the disk (`reads`, see
/// `shard::disk_reads`). The keys it finds expired are deleted before the
/// reply goes out, as for a read of one shard (`net::conn`), in the order
/// it found them.
pub async fn read_now(
    shards: &ShardSet,
    ids: &[usize],
    f: crate::net::session::ReadManyFn,
    reads: Option<&crate::shard::disk_reads::DiskReads>,
) -> Reply {
    let snaps = match shards.snapshots(ids).await {
        Ok(snaps) => snaps,
        Err(e) => return Reply::err(e),
    };
    let found = crate::shard::Found::default();
    let now = crate::shard::now_ms();
    let views: Vec<_> = ids
        .iter()
        .zip(snaps)
        .map(|(&shard, snap)| {
            crate::shard::ReadView::new(Arc::new(snap), now, shard, Some(found.clone()))
        })
        .collect();
    let read = move || {
        let readers: Vec<&dyn KvRead> = views.iter().map(|v| v as &dyn KvRead).collect();
        f(&readers)
    };
    let reply = match reads {
        Some(reads) if reads.moved() => reads
            .run(read)
            .await
            .await
            .unwrap_or_else(|_| crate::shard::disk_reads::failed()),
        Some(reads) => {
            let reply = read();
            reads.ran_here();
            reply
        }
        None => read(),
    };
    let mut found = std::mem::take(&mut *found.lock());
    while !found.is_empty() {
        // A run of keys of one shard is one write.
        let shard = found[0].0;
        let run = found.iter().take_while(|(s, ..)| *s == shard).count();
        let keys: Vec<(u8, Vec<u8>)> = found.drain(..run).map(|(_, db, k)| (db, k)).collect();
        // A failure leaves the key to the reaper; the read stands.
        let _ = shards
            .submit(shard, crate::shard::expire_found(keys, Reply::Ok))
            .await;
    }
    reply
}

/// A fresh snapshot of one shard, its failure as a reply: what jobs that
/// read a shard off its actor (MIGRATE, slot listings and moves) start with.
pub async fn snapshot_of(
    shards: &ShardSet,
    id: usize,
) -> Result<crate::shard::ReadView<'static>, Reply> {
    shards
        .shard(id)
        .current_snapshot()
        .await
        .map_err(Reply::err)
}

/// Runs `f` on shard `id`'s actor, in its write transaction, and returns
/// what `f` returned: for jobs that must act between the shard's other
/// writes (a barrier, a step of a slot move) rather than as a command.
pub async fn on_actor<T, F>(shards: &ShardSet, id: usize, f: F) -> Result<T, Reply>
where
    T: Send + 'static,
    F: FnOnce(&mut WriteCtx) -> Result<T, StoreError> + Send + 'static,
{
    let out = Arc::new(parking_lot::Mutex::new(None));
    let result = out.clone();
    let done = shards
        .submit(
            id,
            Box::new(move |w| {
                *result.lock() = Some(f(w)?);
                Ok(Reply::Ok)
            }),
        )
        .await;
    let got = out.lock().take();
    match (done, got) {
        (Ok(Reply::Error(e)), _) => Err(Reply::Error(e)),
        (Ok(_), Some(v)) => Ok(v),
        _ => Err(Reply::err("shard unavailable")),
    }
}

/// Turns an op's outcome into what the shard expects.
pub fn settle(r: OpResult) -> Result<Reply, StoreError> {
    match r {
        Ok(r) | Err(Fail::Reply(r)) => Ok(r),
        Err(Fail::Store(e)) => Err(e),
    }
}

/// The WRONGTYPE reply.
pub fn wrongtype() -> Fail {
    Fail::Reply(Reply::Error(WRONGTYPE.to_string()))
}

/// Reads a string key: `None` if absent, WRONGTYPE if another type.
pub fn read_string(r: &dyn KvRead, key: Key) -> Result<Option<Vec<u8>>, Fail> {
    match keyspace::lookup(r, key)? {
        None => Ok(None),
        Some(Meta {
            body: MetaBody::String(v),
            ..
        }) => Ok(Some(v)),
        Some(_) => Err(wrongtype()),
    }
}

/// Looks a key up for writing and checks it is a string (or absent).
pub fn string_for_write(w: &mut WriteCtx, key: Key) -> Result<Option<Meta>, Fail> {
    match keyspace::lookup_for_write(w, key)? {
        Some(m) if m.ktype != KeyType::String => Err(wrongtype()),
        other => Ok(other),
    }
}

/// The value bytes of a string meta.
pub fn string_bytes(meta: &Meta) -> &[u8] {
    match &meta.body {
        MetaBody::String(v) => v,
        MetaBody::Collection { .. } => &[],
    }
}

/// A reader that counts a read command's key lookups into the server's
/// keyspace_hits / keyspace_misses (Redis counts reads, not writes).
pub(crate) struct Counted<'a> {
    /// The reader it passes through to.
    pub(crate) inner: &'a dyn KvRead,
    /// Where the hits and misses go.
    pub(crate) stats: &'a crate::server::ServerStats,
    /// Where `keymiss` notifications go; `None` for a lookup Redis makes
    /// without notifying (OBJECT's).
    pub(crate) hub: Option<&'a crate::pubsub::Hub>,
}

impl KvRead for Counted<'_> {
    fn now_ms(&self) -> u64 {
        self.inner.now_ms()
    }

    fn expiry_clock(&self) -> u64 {
        self.inner.expiry_clock()
    }

    fn get(&self, table: crate::storage::Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get(table, key)
    }

    fn get_once(
        &self,
        table: crate::storage::Table,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get_once(table, key)
    }

    fn get_head(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get_head(key)
    }

    fn scan_few(
        &self,
        table: crate::storage::Table,
        bounds: (&[u8], Option<&[u8]>),
        order: crate::storage::merge::Order,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        self.inner.scan_few(table, bounds, order, visit)
    }

    fn key_count(&self, db: u8) -> Result<i64, StoreError> {
        self.inner.key_count(db)
    }

    fn note_miss(&self, db: u8, key: &[u8]) {
        if let Some(hub) = self.hub {
            crate::pubsub::notify::key_miss(hub, db, key);
        }
    }

    fn note_expired(&self, db: u8, key: &[u8]) {
        self.inner.note_expired(db, key);
    }

    fn note_lookup(&self, hit: bool) {
        let counter = if hit {
            &self.stats.hits
        } else {
            &self.stats.misses
        };
        counter.add(1);
    }
}

/// How a one-key read looks its key up (Redis's LOOKUP_* flags).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lookup {
    /// The read is an access to the key (OBJECT IDLETIME / FREQ).
    Touch,
    /// No access recorded (LOOKUP_NOTOUCH).
    NoTouch,
    /// No access, and a miss is not reported as `keymiss`
    /// (LOOKUP_NOTOUCH | LOOKUP_NONOTIFY).
    Unnoticed,
}

impl Session {
    /// A read of one key on its shard; `f` gets the snapshot and the key.
    /// The read counts as an access to the key (OBJECT IDLETIME / FREQ).
    pub fn read(
        &self,
        key: &Bytes,
        f: impl FnOnce(&dyn KvRead, Key) -> OpResult + Send + 'static,
    ) -> Action {
        self.read_with(key.clone(), Lookup::Touch, f)
    }

    /// [`Session::read`] of a key the command hands over (see
    /// [`crate::command::Args::take`]).
    pub fn read_owned(
        &self,
        key: Bytes,
        f: impl FnOnce(&dyn KvRead, Key) -> OpResult + Send + 'static,
    ) -> Action {
        self.read_with(key, Lookup::Touch, f)
    }

    /// A read that leaves the key's access time alone (Redis's
    /// LOOKUP_NOTOUCH: TYPE, TTL).
    pub fn read_untouched(
        &self,
        key: &Bytes,
        f: impl FnOnce(&dyn KvRead, Key) -> OpResult + Send + 'static,
    ) -> Action {
        self.read_with(key.clone(), Lookup::NoTouch, f)
    }

    /// A read that neither touches the key nor reports a miss as
    /// `keymiss` (Redis's LOOKUP_NOTOUCH | LOOKUP_NONOTIFY: OBJECT).
    pub fn read_unnoticed(
        &self,
        key: &Bytes,
        f: impl FnOnce(&dyn KvRead, Key) -> OpResult + Send + 'static,
    ) -> Action {
        self.read_with(key.clone(), Lookup::Unnoticed, f)
    }

    fn read_with(
        &self,
        name: Bytes,
        lookup: Lookup,
        f: impl FnOnce(&dyn KvRead, Key) -> OpResult + Send + 'static,
    ) -> Action {
        let db = self.db;
        let (shard, slot) = self.shard_and_slot(&name);
        Action::Read {
            shard,
            f: Box::new(move |r, server| {
                if lookup == Lookup::Touch {
                    server.access.touch(db, &name, r.now_ms());
                }
                let r = Counted {
                    inner: r,
                    stats: &server.stats,
                    hub: (lookup != Lookup::Unnoticed).then_some(&*server.pubsub),
                };
                settle(f(
                    &r,
                    Key {
                        db,
                        slot,
                        name: &name,
                    },
                ))
            }),
        }
    }

    /// A write of one key through its shard's actor; `f` gets the write
    /// context and the key.
    pub fn write(
        &self,
        key: &Bytes,
        f: impl FnOnce(&mut WriteCtx, Key) -> OpResult + Send + 'static,
    ) -> Action {
        self.write_owned(key.clone(), f)
    }

    /// [`Session::write`] of a key the command hands over (see
    /// [`crate::command::Args::take`]).
    pub fn write_owned(
        &self,
        name: Bytes,
        f: impl FnOnce(&mut WriteCtx, Key) -> OpResult + Send + 'static,
    ) -> Action {
        let db = self.db;
        let server = self.server.clone();
        let (shard, slot) = self.shard_and_slot(&name);
        let spot = server.access.spot(db, &name);
        Action::Write {
            shard,
            f: Box::new(move |w| {
                server.access.touch_at(spot, w.now_ms());
                settle(f(
                    w,
                    Key {
                        db,
                        slot,
                        name: &name,
                    },
                ))
            }),
        }
    }

    /// A read of several keys from one consistent view. `f` gets one reader
    /// per key (keys on one shard share a snapshot).
    pub fn read_many(
        &self,
        keys: Vec<Bytes>,
        f: impl FnOnce(&[&dyn KvRead], &[Key]) -> OpResult + Send + 'static,
    ) -> Action {
        self.server
            .access
            .touch_all(self.db, &keys, crate::shard::now_ms());
        self.read_many_untouched(keys, f)
    }

    /// [`Session::read_many`] leaving the keys' access times alone
    /// (Redis's LOOKUP_NOTOUCH: EXISTS).
    pub fn read_many_untouched(
        &self,
        keys: Vec<Bytes>,
        f: impl FnOnce(&[&dyn KvRead], &[Key]) -> OpResult + Send + 'static,
    ) -> Action {
        let db = self.db;
        let shards = self.server.shards.clone();
        let ids: Vec<usize> = keys.iter().map(|k| shards.shard_of_key(k)).collect();
        if ids.windows(2).all(|w| w[0] == w[1]) {
            let shard = ids.first().copied().unwrap_or(0);
            return Action::Read {
                shard,
                f: Box::new(move |r, server| {
                    let r = Counted {
                        inner: r,
                        stats: &server.stats,
                        hub: Some(&server.pubsub),
                    };
                    let ks: Vec<Key> = keys.iter().map(|k| Key::new(db, k)).collect();
                    let readers: Vec<&dyn KvRead> = ks.iter().map(|_| &r as &dyn KvRead).collect();
                    settle(f(&readers, &ks))
                }),
            };
        }
        let server = self.server.clone();
        let mut uniq = ids.clone();
        uniq.sort_unstable();
        uniq.dedup();
        Action::ReadMany {
            ids: uniq.clone(),
            f: Box::new(move |readers| {
                let counted: Vec<Counted> = ids
                    .iter()
                    .map(|id| Counted {
                        inner: readers[uniq.binary_search(id).unwrap()],
                        stats: &server.stats,
                        hub: Some(&server.pubsub),
                    })
                    .collect();
                let per_key: Vec<&dyn KvRead> = counted.iter().map(|c| c as &dyn KvRead).collect();
                let ks: Vec<Key> = keys.iter().map(|k| Key::new(db, k)).collect();
                settle(f(&per_key, &ks)).unwrap_or_else(Reply::err)
            }),
        }
    }

    /// A write of several keys where each key's part is independent: `f`
    /// runs once per key, in the order given, with that key's item of
    /// `items` (its value, for MSET), on the key's shard; `combine` folds
    /// the sum of its results into the reply. Atomic across shards
    /// (coordinated commit).
    ///
    /// Keys and items are moved to the shards, never cloned: a key or a
    /// value is a slice of the connection's read buffer, whose shared count
    /// every clone and drop changes (MSET's ten keys cloned were ~4% of
    /// its samples at pipeline 16), and the shards drop theirs on other
    /// threads.
    pub fn write_each_shard<T: Send + Sync + 'static>(
        &self,
        keys: Vec<Bytes>,
        items: Vec<T>,
        f: impl Fn(&mut WriteCtx, Key, &T) -> Result<i64, Fail> + Send + Sync + 'static,
        combine: fn(i64) -> Reply,
    ) -> Action {
        debug_assert_eq!(keys.len(), items.len());
        let db = self.db;
        let shards = self.server.shards.clone();
        // Each key's slot is hashed once, here: the keys given to `f` carry it.
        let (ids, slots): (Vec<usize>, Vec<u16>) =
            keys.iter().map(|k| shards.shard_and_slot(k)).unzip();
        self.server
            .access
            .touch_all(db, &keys, crate::shard::now_ms());
        if ids.windows(2).all(|w| w[0] == w[1]) {
            return Action::Write {
                shard: ids[0],
                f: Box::new(move |w| {
                    let ks = keys
                        .iter()
                        .zip(&slots)
                        .map(|(name, &slot)| Key { db, slot, name });
                    warm_metas(w, ks.clone());
                    let mut total = 0;
                    for (k, item) in ks.zip(&items) {
                        match f(w, k, item) {
                            Ok(n) => total += n,
                            Err(e) => return settle(Err(e)),
                        }
                    }
                    settle(Ok(combine(total)))
                }),
            };
        }
        let f = Arc::new(f);
        let all_ids = ids.clone();
        plan_action(all_ids, true, move |locked| {
            let mut uniq = ids.clone();
            uniq.sort_unstable();
            uniq.dedup();
            // Send every shard its part now, when the coordinator calls the
            // plan, and collect later: the parts run in parallel on their
            // shard threads, and the coordinator can start the next plan.
            let mut pending = Vec::with_capacity(uniq.len());
            // Each key's events take its place among the arguments.
            let place = locked.reserve_place();
            // Each shard's keys, with their places and items.
            let mut parts: Vec<Vec<(u64, Bytes, u16, T)>> =
                std::iter::repeat_with(Vec::new).take(uniq.len()).collect();
            let each = keys.into_iter().zip(items).zip(ids.iter().zip(&slots));
            for (at, ((k, item), (id, &slot))) in each.enumerate() {
                let part = uniq
                    .binary_search(id)
                    .expect("every key's shard is in uniq");
                parts[part].push((at as u64, k, slot, item));
            }
            for (id, mine) in uniq.into_iter().zip(parts) {
                let f = f.clone();
                pending.push(locked.send(id, move |w| {
                    // `f` runs once per key (each key's events take their
                    // own place): the keys are warmed together first.
                    warm_metas(
                        w,
                        mine.iter().map(|(_, name, slot, _)| Key {
                            db,
                            slot: *slot,
                            name,
                        }),
                    );
                    let mut total = 0;
                    for (at, name, slot, item) in &mine {
                        w.message_place = (place, *at);
                        let k = Key {
                            db,
                            slot: *slot,
                            name,
                        };
                        match f(w, k, item) {
                            Ok(n) => total += n,
                            failed => return Ok(failed),
                        }
                    }
                    Ok(Ok(total))
                }));
            }
            async move {
                let mut total = 0;
                for p in pending {
                    match p.wait().await? {
                        Ok(n) => total += n,
                        Err(Fail::Reply(r)) => return Ok(Err(r)),
                        Err(Fail::Store(e)) => return Err(e.into()),
                    }
                }
                Ok(Ok(combine(total)))
            }
        })
    }
}

/// Loads the meta rows of `keys` into the cache before a write of each
/// (see `ReadCtx::warm`): nearly every write begins with its key's meta
/// row, and looked up together their cache misses overlap.
fn warm_metas<'k>(w: &WriteCtx, keys: impl Iterator<Item = Key<'k>>) {
    let metas: Vec<Vec<u8>> = keys.map(|k| k.meta_key()).collect();
    w.warm(crate::storage::Table::Meta, &metas);
}

/// The shape of SINTERSTORE, ZUNIONSTORE, ZRANGESTORE and BITOP: `load`
/// each source key (on its own shard, in order, type-checking it), then
/// `store` into `dest` given every loaded value. One write op when all keys
/// share a shard, otherwise one coordinated command. `store` must write
/// nothing before it returns a reply error.
pub fn load_then_store<T, L, S>(
    s: &Session,
    sources: Vec<Bytes>,
    dest: Bytes,
    load: L,
    store: S,
) -> Action
where
    T: std::any::Any + Send + 'static,
    L: Fn(&dyn KvRead, Key) -> Result<T, Fail> + Send + Sync + 'static,
    S: FnOnce(&mut WriteCtx, Key, Vec<T>) -> OpResult + Send + 'static,
{
    let db = s.db;
    let shards = s.server.shards.clone();
    let ids: Vec<usize> = sources.iter().map(|k| shards.shard_of_key(k)).collect();
    let dest_shard = shards.shard_of_key(&dest);
    if ids.iter().all(|&i| i == dest_shard) {
        return s.write(&dest.clone(), move |w, kd| {
            let mut loaded = Vec::with_capacity(sources.len());
            for src in &sources {
                loaded.push(load(w, Key::new(db, src))?);
            }
            store(w, kd, loaded)
        });
    }
    let mut all_ids = ids.clone();
    all_ids.push(dest_shard);
    let load = Arc::new(load);
    coordinated(all_ids, move |locked| async move {
        let mut loaded = Vec::with_capacity(sources.len());
        for (src, &id) in sources.iter().zip(&ids) {
            let (src, load) = (src.clone(), load.clone());
            match locked
                .run(id, move |w| Ok(load(w, Key::new(db, &src))))
                .await?
            {
                Ok(v) => loaded.push(v),
                // Nothing was written yet: the round stays clean.
                Err(Fail::Reply(r)) => return Ok(Err(r)),
                Err(Fail::Store(e)) => return Err(e.into()),
            }
        }
        let out = locked
            .run(dest_shard, move |w| {
                Ok(store(w, Key::new(db, &dest), loaded))
            })
            .await?;
        match out {
            Ok(r) => Ok(Ok(r)),
            Err(Fail::Reply(r)) => Ok(Err(r)),
            Err(Fail::Store(e)) => Err(e.into()),
        }
    })
}

/// The shape of LMPOP and ZMPOP (and so of the blocking pops): try `pop`
/// on each key in order and reply with the first that yields something,
/// or a nil array. Keys after the first hit are never looked at, as in
/// Redis. One write op when all keys share a shard, otherwise one
/// coordinated command (nothing is written before the hit, so an error on
/// an earlier key leaves the round clean).
pub fn first_pop<P>(shards: Arc<ShardSet>, db: u8, keys: Vec<Bytes>, pop: P) -> Action
where
    P: Fn(&mut WriteCtx, Key) -> Result<Option<Reply>, Fail> + Send + Sync + 'static,
{
    let ids: Vec<usize> = keys.iter().map(|k| shards.shard_of_key(k)).collect();
    if ids.windows(2).all(|w| w[0] == w[1]) {
        return Action::Write {
            shard: ids[0],
            f: Box::new(move |w| {
                settle((|| -> OpResult {
                    for k in &keys {
                        if let Some(r) = pop(w, Key::new(db, k))? {
                            return Ok(r);
                        }
                    }
                    Ok(Reply::NilArray)
                })())
            }),
        };
    }
    let pop = Arc::new(pop);
    coordinated(ids.clone(), move |locked| async move {
        for (k, &id) in keys.iter().zip(&ids) {
            let (k, pop) = (k.clone(), pop.clone());
            match locked
                .run(id, move |w| Ok(pop(w, Key::new(db, &k))))
                .await?
            {
                Ok(Some(r)) => return Ok(Ok(r)),
                Ok(None) => {}
                Err(Fail::Reply(r)) => return Ok(Err(r)),
                Err(Fail::Store(e)) => return Err(e.into()),
            }
        }
        Ok(Err(Reply::NilArray))
    })
}

/// Runs `plan` with the given shards locked, through the coordinator (see
/// `shard::coordinator`). `plan` returns `Ok(Ok(reply))` when its writes
/// stand, `Ok(Err(reply))` when it decided not to write (and wrote nothing).
pub fn coordinated<F, Fut>(ids: Vec<usize>, plan: F) -> Action
where
    F: FnOnce(Arc<Locked>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Result<Reply, Reply>, CoordError>> + Send + 'static,
{
    plan_action(ids, false, plan)
}

/// A plan for the coordinator. A `blind` plan sends all its steps
/// when called and only awaits their results in its future, so the
/// coordinator may start the next plan before it finishes (see
/// `shard::coordinator`).
fn plan_action<F, Fut>(ids: Vec<usize>, blind: bool, plan: F) -> Action
where
    F: FnOnce(Arc<Locked>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Result<Reply, Reply>, CoordError>> + Send + 'static,
{
    Action::Plan {
        ids,
        blind,
        plan: Box::new(move |locked| Box::pin(plan(locked))),
    }
}

/// Reply for a subcommand with the wrong options (Redis's
/// addReplySubcommandSyntaxError).
pub fn subcommand_syntax(a: &crate::command::Args) -> Reply {
    Reply::err(format!(
        "unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        String::from_utf8_lossy(a.get(1)),
        String::from_utf8_lossy(a.get(0)).to_uppercase()
    ))
}

/// Whether the optional mode of a flush (FLUSHALL, SCRIPT FLUSH, FUNCTION
/// FLUSH) is absent, SYNC or ASYNC.
pub fn sync_or_async(rest: &[Bytes]) -> bool {
    use crate::command::args::is;
    match rest {
        [] => true,
        [m] => is(m, "sync") || is(m, "async"),
        _ => false,
    }
}

/// A HELP subcommand's reply (XINFO HELP, CONFIG HELP...): one status line
/// per entry.
pub fn help_reply(lines: &[&'static str]) -> Reply {
    Reply::Array(lines.iter().map(|l| Reply::Simple(l)).collect())
}

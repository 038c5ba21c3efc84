//! WATCH: which clients watch which keys of a shard, and the hook every
//! write goes through to mark them.
//!
//! # How a watch is kept
//! WATCH registers a key here from inside the shard's batch (a write op on
//! its actor), so the registration is ordered with the shard's writes: a
//! write applied before it committed before the WATCH reply, and so is seen
//! by the client's reads; a write applied after it marks the watch. Every
//! row a write puts or removes in `meta`, `sub` or `zscore` names its key,
//! and [`WatchRegistry::touch_row`] marks the key's watchers dirty
//! (Redis's `signalModifiedKey`), whatever command, script, expiry or
//! blocking pop made the write. The garbage collector's removals of dead
//! versions are not modifications and do not touch.
//!
//! # Expired keys
//! As in Redis 7.0: a key that was already expired when watched is not
//! dirtied by its deletion (it stays logically absent), only by a later
//! write that leaves it present; a key watched while alive whose expiry
//! passes before EXEC fails the EXEC even if nobody has deleted it yet
//! ([`Watch::expired_by`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::storage::encoding;
use crate::storage::tables::{RowObserver, NAMESPACES};
use crate::storage::Table;

/// One client's watch of one key.
#[derive(Debug)]
pub struct Watch {
    /// The database of the key.
    pub db: u8,
    /// The key.
    pub key: Vec<u8>,
    /// The client's CAS flag, shared by all its watches: set once any of
    /// its watched keys is modified.
    dirty: Arc<AtomicBool>,
    /// The key was logically expired (but still stored) when watched.
    expired: AtomicBool,
    /// The key's expiry when watched (0 = none).
    expire_ms: AtomicU64,
    /// The client stopped watching before the registration ran (it went
    /// away): the registration must not stay.
    cancelled: AtomicBool,
}

impl Watch {
    /// A watch of `db`/`key` for the client whose CAS flag is `dirty`.
    pub fn new(db: u8, key: Vec<u8>, dirty: Arc<AtomicBool>) -> Watch {
        Watch {
            db,
            key,
            dirty,
            expired: AtomicBool::new(false),
            expire_ms: AtomicU64::new(0),
            cancelled: AtomicBool::new(false),
        }
    }

    /// Records the key's stored expiry (0 if none, or absent) at the moment
    /// of registration, on the shard thread.
    fn arm(&self, expire_ms: u64, now_ms: u64) {
        let expired = expire_ms != 0 && expire_ms <= now_ms;
        self.expired.store(expired, Ordering::Release);
        self.expire_ms
            .store(if expired { 0 } else { expire_ms }, Ordering::Release);
    }

    /// The client no longer watches the key (see `cancelled`).
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    /// Whether the key, alive when watched and not modified since, has
    /// expired by `now_ms` (Redis's `isWatchedKeyExpired`).
    pub fn expired_by(&self, now_ms: u64) -> bool {
        let at = self.expire_ms.load(Ordering::Acquire);
        !self.expired.load(Ordering::Acquire) && at != 0 && at <= now_ms
    }

    /// A write left the key `present` or removed it.
    fn touched(&self, present: bool) {
        if self.expired.load(Ordering::Acquire) && !present {
            // The expired key is gone for good: logically no change, and
            // from now on it is watched as an absent key.
            self.expired.store(false, Ordering::Release);
            self.expire_ms.store(0, Ordering::Release);
            return;
        }
        self.dirty.store(true, Ordering::Release);
    }
}

/// The watches of one database's keys.
type WatchedKeys = HashMap<Vec<u8>, Vec<Arc<Watch>>>;

/// The watched keys of one shard.
#[derive(Debug, Default)]
pub struct WatchRegistry {
    /// How many watches are registered: writes skip the hook while it is 0.
    count: AtomicUsize,
    /// Per database: key -> its watches.
    keys: parking_lot::Mutex<Vec<WatchedKeys>>,
    /// Slots of database 0 being copied to another node (CLUSTER
    /// MOVESLOT): the names of the keys written in each since it was last
    /// drained, so the copy can send them again.
    slots: parking_lot::Mutex<HashMap<u16, SlotLog>>,
    /// How many slots are watched: writes skip `slots` while it is 0.
    slot_count: AtomicUsize,
}

/// What was written in one watched slot since it was last drained.
#[derive(Debug, Default)]
pub struct SlotLog {
    /// The names of the keys written.
    pub keys: std::collections::HashSet<Vec<u8>>,
    /// Whether database 0 was flushed (FLUSHALL / FLUSHDB).
    pub flushed: bool,
}

impl WatchRegistry {
    /// Whether any key of the shard is watched.
    pub fn active(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// Registers a watch of a key whose stored expiry is `expire_ms` (0 if
    /// none or absent), unless the client has already let go of it.
    pub fn add(&self, w: Arc<Watch>, expire_ms: u64, now_ms: u64) {
        w.arm(expire_ms, now_ms);
        {
            let mut keys = self.keys.lock();
            if keys.is_empty() {
                keys.resize_with(NAMESPACES, HashMap::new);
            }
            keys[w.db as usize]
                .entry(w.key.clone())
                .or_default()
                .push(w.clone());
            self.count.fetch_add(1, Ordering::AcqRel);
        }
        // Cancelled first and removed after (see `Watching`'s drop): one of
        // the two removals sees the registration.
        if w.cancelled.load(Ordering::SeqCst) {
            self.remove(&w);
        }
    }

    /// Removes a watch (UNWATCH, EXEC, DISCARD, a client that goes away).
    pub fn remove(&self, w: &Arc<Watch>) {
        let mut keys = self.keys.lock();
        let Some(map) = keys.get_mut(w.db as usize) else {
            return;
        };
        if let Some(list) = map.get_mut(&w.key) {
            let before = list.len();
            list.retain(|x| !Arc::ptr_eq(x, w));
            if list.len() < before {
                self.count.fetch_sub(1, Ordering::AcqRel);
            }
            if list.is_empty() {
                map.remove(&w.key);
            }
        }
    }

    /// Starts recording the keys written in `slot` of database 0 (see
    /// [`WatchRegistry::drain_slot`]). Counted as a watch, so writes go
    /// through the hook while it lasts.
    pub fn watch_slot(&self, slot: u16) {
        if self.slots.lock().insert(slot, SlotLog::default()).is_none() {
            self.count.fetch_add(1, Ordering::AcqRel);
            self.slot_count.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// What was written in `slot` since it was watched or last drained.
    pub fn drain_slot(&self, slot: u16) -> SlotLog {
        let mut slots = self.slots.lock();
        slots.get_mut(&slot).map(std::mem::take).unwrap_or_default()
    }

    /// Stops recording writes in `slot`.
    pub fn unwatch_slot(&self, slot: u16) {
        if self.slots.lock().remove(&slot).is_some() {
            self.count.fetch_sub(1, Ordering::AcqRel);
            self.slot_count.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Marks the watchers of `db`/`key`.
    pub fn touch(&self, db: u8, key: &[u8], present: bool) {
        if db == 0 && self.slot_count.load(Ordering::Acquire) > 0 {
            if let Some(log) = self.slots.lock().get_mut(&crate::cluster::key_slot(key)) {
                if !log.keys.contains(key) {
                    log.keys.insert(key.to_vec());
                }
            }
        }
        let keys = self.keys.lock();
        if let Some(list) = keys.get(db as usize).and_then(|m| m.get(key)) {
            for w in list {
                w.touched(present);
            }
        }
    }

    /// The hook of every row write: marks the watchers of the key the row
    /// belongs to. A `meta` row removed means the key is gone; any other
    /// change leaves it present.
    pub fn touch_row(&self, table: Table, row: &[u8], removed: bool) {
        match table {
            Table::Meta => {
                if let Some((db, _, name)) = encoding::decode_meta_key(row) {
                    self.touch(db, name, !removed);
                }
            }
            Table::Sub | Table::ZScore => {
                if let Some((db, name)) = encoding::decode_version_row(row) {
                    self.touch(db, name, true);
                }
            }
            Table::Ttl | Table::Gc | Table::Sys => {}
        }
    }
}

impl RowObserver for WatchRegistry {
    fn row_changed(&self, table: Table, row: &[u8], removed: bool) {
        self.touch_row(table, row, removed);
    }

    fn table_cleared(&self) {
        for log in self.slots.lock().values_mut() {
            log.flushed = true;
        }
    }

    fn observed_meta_rows(&self) -> Vec<Vec<u8>> {
        let keys = self.keys.lock();
        keys.iter()
            .enumerate()
            .flat_map(|(db, m)| {
                m.keys()
                    .map(move |k| encoding::meta_key(db as u8, crate::cluster::key_slot(k), k))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(reg: &WatchRegistry, key: &[u8], expire_ms: u64) -> (Arc<AtomicBool>, Arc<Watch>) {
        let dirty = Arc::new(AtomicBool::new(false));
        let w = Arc::new(Watch::new(0, key.to_vec(), dirty.clone()));
        reg.add(w.clone(), expire_ms, 1000);
        (dirty, w)
    }

    #[test]
    fn writes_to_a_watched_key_mark_its_client() {
        let reg = WatchRegistry::default();
        let (dirty, w) = watch(&reg, b"k", 0);
        assert!(reg.active());
        reg.touch(0, b"other", true);
        reg.touch(1, b"k", true);
        assert!(!dirty.load(Ordering::Acquire));
        let row = encoding::meta_key(0, crate::cluster::key_slot(b"k"), b"k");
        reg.touch_row(Table::Meta, &row, false);
        assert!(dirty.load(Ordering::Acquire));
        reg.remove(&w);
        assert!(!reg.active());
    }

    #[test]
    fn sub_rows_name_their_key() {
        let reg = WatchRegistry::default();
        let (dirty, _w) = watch(&reg, b"h", 0);
        let prefix = encoding::version_prefix(0, 7, b"h", 42);
        reg.touch_row(Table::Sub, &encoding::sub_key(&prefix, b"field"), true);
        assert!(dirty.load(Ordering::Acquire));
    }

    /// Redis 7.0: deleting a key that was already expired when watched is
    /// no change; writing it afterwards is.
    #[test]
    fn an_expired_key_is_dirtied_only_by_a_write_after_its_deletion() {
        let reg = WatchRegistry::default();
        let (dirty, w) = watch(&reg, b"k", 500);
        assert!(!w.expired_by(2000));
        reg.touch(0, b"k", false);
        assert!(!dirty.load(Ordering::Acquire));
        reg.touch(0, b"k", true);
        assert!(dirty.load(Ordering::Acquire));
    }

    #[test]
    fn a_live_key_that_expires_fails_the_check() {
        let reg = WatchRegistry::default();
        let (_dirty, w) = watch(&reg, b"k", 1500);
        assert!(!w.expired_by(1499));
        assert!(w.expired_by(1500));
    }
}

//! Client-side caching (CLIENT TRACKING): which clients may hold which
//! keys, and the invalidation messages sent when those keys change.
//!
//! # Design
//! * **Default mode.** A read-only command of a tracking client records
//!   its keys in a table (key -> client ids) *before* it runs, so a write
//!   committed while the read runs still invalidates. A key's entry goes
//!   when it is invalidated: the client reads it again to be told again.
//! * **BCAST mode.** Clients register key prefixes; every changed key is
//!   matched against them.
//! * **Where changes come from.** While anyone tracks, a shard's write
//!   transaction collects the names of the keys whose rows it changes (the
//!   same rows WATCH observes, expiry and the reaper included) and, once it
//!   has committed, hands them here; a client never hears of a change it
//!   cannot read yet. FLUSHDB and FLUSHALL send every tracking client a
//!   null invalidation, as Redis does.
//! * **Delivery.** An invalidation is a [`Push`](super::Push) in the
//!   target's mailbox (the client itself, or its REDIRECT target); the
//!   target's connection writes it as a RESP3 push, or as a message on
//!   `__redis__:invalidate` to a RESP2 subscriber, after the reply it is
//!   writing (a read racing the change is then invalidated after the
//!   client has its value).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use dashmap::DashMap;

use super::Push;
use crate::server::ClientEntry;

/// One client's tracking settings (CLIENT TRACKING ON ...).
#[derive(Debug)]
pub struct Tracked {
    /// The client.
    pub entry: Arc<ClientEntry>,
    /// REDIRECT target: its id and registry entry.
    pub redirect: Option<(u64, Arc<ClientEntry>)>,
    /// BCAST mode.
    pub bcast: bool,
    /// Its prefixes, sorted (BCAST without any has the empty one).
    pub prefixes: Vec<Bytes>,
    /// OPTIN: only reads right after CLIENT CACHING YES are tracked.
    pub optin: bool,
    /// OPTOUT: reads right after CLIENT CACHING NO are not tracked.
    pub optout: bool,
    /// NOLOOP: the client is not told of its own writes.
    pub noloop: bool,
    /// The REDIRECT target went away.
    pub broken: AtomicBool,
}

/// Who is told of which keys.
#[derive(Default)]
pub struct Tracker {
    clients: DashMap<u64, Arc<Tracked>>,
    /// Default mode: key -> ids of the clients that read it.
    table: DashMap<Bytes, HashSet<u64>>,
    /// Keys in `table`, kept beside it: `DashMap::len` locks every map
    /// shard, too dear for each tracked read.
    keys: AtomicUsize,
    /// BCAST mode: prefix -> ids.
    prefixes: parking_lot::RwLock<BTreeMap<Bytes, HashSet<u64>>>,
    /// Tracking clients: writes collect changed keys only while this is
    /// not 0.
    active: AtomicUsize,
    /// `tracking-table-max-keys` (0: no limit).
    max_keys: AtomicUsize,
}

impl Tracker {
    /// Whether any client tracks (writes then report the keys they change).
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Acquire) > 0
    }

    /// Turns tracking on for a client (replacing its earlier settings).
    pub fn enable(&self, t: Arc<Tracked>) {
        let id = t.entry.id;
        self.disable(id);
        if t.bcast {
            let mut prefixes = self.prefixes.write();
            for p in &t.prefixes {
                prefixes.entry(p.clone()).or_default().insert(id);
            }
        }
        self.clients.insert(id, t);
        self.active.fetch_add(1, Ordering::AcqRel);
    }

    /// Turns tracking off (CLIENT TRACKING OFF, RESET, disconnect). Keys it
    /// read stay in the table until they change, as in Redis.
    pub fn disable(&self, id: u64) {
        let Some((_, t)) = self.clients.remove(&id) else {
            return;
        };
        self.active.fetch_sub(1, Ordering::AcqRel);
        if t.bcast {
            let mut prefixes = self.prefixes.write();
            prefixes.retain(|_, ids| {
                ids.remove(&id);
                !ids.is_empty()
            });
        }
    }

    /// Records that client `id` read `key` (before the read runs).
    pub fn remember(&self, id: u64, key: &Bytes) {
        let mut ids = self.table.entry(key.clone()).or_insert_with(|| {
            self.keys.fetch_add(1, Ordering::Relaxed);
            HashSet::new()
        });
        ids.insert(id);
        drop(ids);
        self.limit();
    }

    /// Records that client `id` read each of `keys`.
    pub fn remember_all(&self, id: u64, keys: &[Bytes]) {
        for key in keys {
            self.remember(id, key);
        }
    }

    /// Sets `tracking-table-max-keys`, and brings the table under it at
    /// once: Redis's cron does so within a tick of a CONFIG SET lowering
    /// it, even on an idle server.
    pub fn set_max_keys(&self, max: usize) {
        self.max_keys.store(max, Ordering::Relaxed);
        self.limit();
    }

    /// Invalidates keys until the table is back under its limit.
    fn limit(&self) {
        let (max, keys) = (
            self.max_keys.load(Ordering::Relaxed),
            self.keys.load(Ordering::Relaxed),
        );
        if max == 0 || keys <= max {
            return;
        }
        let victims: Vec<Bytes> = (self.table.iter())
            .take(keys - max)
            .map(|e| e.key().clone())
            .collect();
        for key in victims {
            self.invalidate_key(&key, 0);
        }
    }

    /// The keys `keys` changed, by the client `writer` (0: none in
    /// particular): tells whoever may hold them.
    pub fn invalidate(&self, keys: &[(Bytes, u64)]) {
        for (key, writer) in keys {
            self.invalidate_key(key, *writer);
        }
        let prefixes = self.prefixes.read();
        if prefixes.is_empty() {
            return;
        }
        // BCAST: per client, the changed keys under each of its prefixes
        // go in one message (Redis sends one per prefix).
        for (prefix, ids) in prefixes.iter() {
            for &id in ids {
                let hits: Vec<Bytes> = keys
                    .iter()
                    .filter(|(k, w)| k.starts_with(prefix) && !self.loops(id, *w))
                    .map(|(k, _)| k.clone())
                    .collect();
                if !hits.is_empty() {
                    self.send(id, Push::Invalidate(Some(hits)));
                }
            }
        }
    }

    fn invalidate_key(&self, key: &Bytes, writer: u64) {
        let Some((_, ids)) = self.table.remove(key) else {
            return;
        };
        self.keys.fetch_sub(1, Ordering::Relaxed);
        for id in ids {
            // A client that has since turned BCAST on hears of the key by
            // its prefixes only, as in Redis.
            let bcast = self.clients.get(&id).is_some_and(|t| t.bcast);
            if !bcast && !self.loops(id, writer) {
                self.send(id, Push::Invalidate(Some(vec![key.clone()])));
            }
        }
    }

    /// Whether client `id` asked not to hear of its own write by `writer`.
    fn loops(&self, id: u64, writer: u64) -> bool {
        id == writer && self.clients.get(&id).is_some_and(|t| t.noloop)
    }

    /// FLUSHDB / FLUSHALL: every tracking client drops everything.
    pub fn invalidate_all(&self) {
        self.table.retain(|_, _| {
            self.keys.fetch_sub(1, Ordering::Relaxed);
            false
        });
        let ids: Vec<u64> = self.clients.iter().map(|e| *e.key()).collect();
        for id in ids {
            self.send(id, Push::Invalidate(None));
        }
    }

    /// Queues an invalidation for client `id` (at its REDIRECT target, if
    /// it has one). A target that is gone marks the redirection broken
    /// and tells the client so.
    fn send(&self, id: u64, push: Push) {
        let Some(t) = self.clients.get(&id).map(|t| t.clone()) else {
            return;
        };
        match &t.redirect {
            None => {
                t.entry.mailbox.send(push);
            }
            Some((target_id, target)) => {
                if !target.mailbox.send(push) && !t.broken.swap(true, Ordering::AcqRel) {
                    t.entry.mailbox.send(Push::RedirectBroken(*target_id));
                }
            }
        }
    }

    /// A client's settings, if it tracks.
    pub fn get(&self, id: u64) -> Option<Arc<Tracked>> {
        self.clients.get(&id).map(|t| t.clone())
    }

    /// INFO: tracking clients, keys in the table, (key, client) pairs,
    /// BCAST prefixes.
    pub fn stats(&self) -> (usize, usize, usize, usize) {
        let items = self.table.iter().map(|e| e.value().len()).sum();
        (
            self.clients.len(),
            self.table.len(),
            items,
            self.prefixes.read().len(),
        )
    }
}

/// Checks BCAST prefixes as Redis does: none may be a prefix of another,
/// among those given or against those the client has.
pub fn check_prefixes(given: &[Bytes], existing: &[Bytes]) -> Result<(), String> {
    let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
    for (i, p) in given.iter().enumerate() {
        for e in existing {
            if p.starts_with(e) || e.starts_with(p) {
                return Err(format!(
                    "Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                    text(p),
                    text(e)
                ));
            }
        }
        for q in &given[i + 1..] {
            if p.starts_with(q) || q.starts_with(p) {
                return Err(format!(
                    "Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                    text(p),
                    text(q)
                ));
            }
        }
    }
    Ok(())
}

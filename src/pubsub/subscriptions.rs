//! One client's subscriptions, kept in step with the [`Hub`] registry.
//!
//! The names live in the client's [`Mailbox`](super::Mailbox), behind a
//! lock its own commands take, so the server can also end a subscription
//! (a shard channel whose slot moved to another node). Lock order: these
//! names, then the hub's maps.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::{Hub, Kind, Push};
use crate::protocol::Reply;
use crate::server::ClientEntry;

/// Names of one kind, in the order they were subscribed (UNSUBSCRIBE
/// without arguments confirms them in that order).
#[derive(Debug, Default)]
pub struct Names {
    order: Vec<Bytes>,
    set: HashSet<Bytes>,
}

impl Names {
    /// The names, in subscription order (ACL SETUSER checks them against
    /// a user's new channel rules).
    pub fn iter(&self) -> impl Iterator<Item = &Bytes> {
        self.order.iter()
    }

    fn insert(&mut self, name: &Bytes) -> bool {
        let added = self.set.insert(name.clone());
        if added {
            self.order.push(name.clone());
        }
        added
    }

    fn remove(&mut self, name: &Bytes) -> bool {
        let removed = self.set.remove(name);
        if removed {
            self.order.retain(|n| n != name);
        }
        removed
    }
}

/// A client's names of each kind: channels, patterns, shard channels.
pub type AllNames = [Names; 3];

const KINDS: [Kind; 3] = [Kind::Channel, Kind::Pattern, Kind::Shard];

/// The count a confirmation of `kind` reports: channels and patterns
/// together, shard channels apart (as Redis 7.0 counts them).
fn count(names: &AllNames, kind: Kind) -> i64 {
    let n = match kind {
        Kind::Shard => names[Kind::Shard as usize].order.len(),
        _ => names[0].order.len() + names[1].order.len(),
    };
    n as i64
}

/// A (un)subscription confirmation.
fn confirm(kind: Kind, subscribe: bool, name: Option<Bytes>, count: i64) -> Reply {
    Reply::Push(vec![
        Reply::Bulk(Bytes::from_static(kind.verb(subscribe).as_bytes())),
        name.map_or(Reply::Nil, Reply::Bulk),
        Reply::Int(count),
    ])
}

/// Keeps CLIENT LIST's lock-free counts in step with the names.
fn publish_count(client: &ClientEntry, names: &AllNames, kind: Kind) {
    client.mailbox.counts[kind as usize]
        .store(names[kind as usize].order.len() as u32, Ordering::Relaxed);
}

/// What one client listens to, as its session changes it. Dropping it
/// takes the client off the registry, so a client that leaves (or is
/// killed) leaves nothing behind.
pub struct Subscriptions {
    hub: Arc<Hub>,
    client: Arc<ClientEntry>,
    /// Whether dropping this ends the client's subscriptions: not for a
    /// script's session, which shares its caller's client.
    owner: bool,
}

impl Subscriptions {
    /// The subscriptions of `client`, ended when this is dropped.
    pub fn new(hub: Arc<Hub>, client: Arc<ClientEntry>) -> Subscriptions {
        Subscriptions {
            hub,
            client,
            owner: true,
        }
    }

    /// A view of `client`'s subscriptions that leaves them in place when
    /// dropped (a script's session).
    pub fn borrowed(hub: Arc<Hub>, client: Arc<ClientEntry>) -> Subscriptions {
        Subscriptions {
            hub,
            client,
            owner: false,
        }
    }

    /// Whether the client listens to anything. A script's session never
    /// does (in Redis it runs in a client of its own): PING there is
    /// PING.
    pub fn any(&self) -> bool {
        self.owner && self.client.mailbox.subscribed()
    }

    /// (P|S)SUBSCRIBE: one confirmation per name, already subscribed or not.
    pub fn subscribe(&mut self, kind: Kind, names: &[Bytes]) -> Vec<Reply> {
        let mut all = self.client.mailbox.names.lock();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            if all[kind as usize].insert(name) {
                self.hub.add(kind, name, &self.client);
                publish_count(&self.client, &all, kind);
            }
            out.push(confirm(kind, true, Some(name.clone()), count(&all, kind)));
        }
        out
    }

    /// (P|S)UNSUBSCRIBE: one confirmation per name (subscribed or not); with
    /// no names, one per subscription of that kind, or a single one with a
    /// nil name when there is none.
    pub fn unsubscribe(&mut self, kind: Kind, names: &[Bytes]) -> Vec<Reply> {
        let mut all = self.client.mailbox.names.lock();
        let names: Vec<Bytes> = if names.is_empty() {
            all[kind as usize].order.clone()
        } else {
            names.to_vec()
        };
        if names.is_empty() {
            return vec![confirm(kind, false, None, count(&all, kind))];
        }
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            if all[kind as usize].remove(&name) {
                self.hub.remove(kind, &name, self.client.id);
                publish_count(&self.client, &all, kind);
            }
            out.push(confirm(kind, false, Some(name), count(&all, kind)));
        }
        if !self.client.mailbox.subscribed() {
            self.client.mailbox.fence_held();
        }
        out
    }

    /// RESET: every subscription dropped, without confirmations.
    pub fn clear(&mut self) {
        let mut all = self.client.mailbox.names.lock();
        for kind in KINDS {
            if all[kind as usize].order.is_empty() {
                continue;
            }
            for name in std::mem::take(&mut all[kind as usize]).order {
                self.hub.remove(kind, &name, self.client.id);
            }
            publish_count(&self.client, &all, kind);
        }
        self.client.mailbox.fence_held();
    }
}

impl Drop for Subscriptions {
    fn drop(&mut self) {
        if self.owner {
            self.clear();
        }
    }
}

/// Ends `client`'s subscription to the shard channel `name` (its slot is
/// no longer served here) and tells it with an `sunsubscribe` push, as
/// Redis does, so it can subscribe again on the slot's new owner.
pub(super) fn drop_shard_channel(hub: &Hub, client: &ClientEntry, name: &Bytes) {
    let mut all = client.mailbox.names.lock();
    if !all[Kind::Shard as usize].remove(name) {
        return;
    }
    hub.remove(Kind::Shard, name, client.id);
    publish_count(client, &all, Kind::Shard);
    let mut frame = BytesMut::new();
    confirm(
        Kind::Shard,
        false,
        Some(name.clone()),
        count(&all, Kind::Shard),
    )
    .encode(&mut frame, false);
    client.mailbox.send(Push::Frame(frame.freeze()));
}

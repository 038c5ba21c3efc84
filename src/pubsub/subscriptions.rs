//! One client's subscriptions, kept in step with the [`Hub`] registry.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::{Hub, Kind};
use crate::protocol::Reply;
use crate::server::ClientEntry;

/// Names of one kind, in the order they were subscribed (UNSUBSCRIBE
/// without arguments confirms them in that order).
#[derive(Default)]
struct Names {
    order: Vec<Bytes>,
    set: HashSet<Bytes>,
}

/// What one client listens to. Dropping it takes the client off the
/// registry, so a client that leaves (or is killed) leaves nothing behind.
pub struct Subscriptions {
    hub: Arc<Hub>,
    client: Arc<ClientEntry>,
    names: [Names; 3],
}

const KINDS: [Kind; 3] = [Kind::Channel, Kind::Pattern, Kind::Shard];

impl Subscriptions {
    /// No subscriptions yet.
    pub fn new(hub: Arc<Hub>, client: Arc<ClientEntry>) -> Subscriptions {
        Subscriptions {
            hub,
            client,
            names: Default::default(),
        }
    }

    /// Whether the client listens to anything.
    pub fn any(&self) -> bool {
        self.names.iter().any(|n| !n.order.is_empty())
    }

    /// The count a confirmation of `kind` reports: channels and patterns
    /// together, shard channels apart (as Redis 7.0 counts them).
    fn count(&self, kind: Kind) -> i64 {
        let n = match kind {
            Kind::Shard => self.names[Kind::Shard as usize].order.len(),
            _ => self.names[0].order.len() + self.names[1].order.len(),
        };
        n as i64
    }

    fn confirm(&self, kind: Kind, subscribe: bool, name: Option<Bytes>) -> Reply {
        Reply::Push(vec![
            Reply::Bulk(Bytes::from_static(kind.verb(subscribe).as_bytes())),
            name.map_or(Reply::Nil, Reply::Bulk),
            Reply::Int(self.count(kind)),
        ])
    }

    fn publish_count(&self, kind: Kind) {
        self.client.mailbox.counts[kind as usize].store(
            self.names[kind as usize].order.len() as u32,
            Ordering::Relaxed,
        );
    }

    /// (P|S)SUBSCRIBE: one confirmation per name, already subscribed or not.
    pub fn subscribe(&mut self, kind: Kind, names: &[Bytes]) -> Vec<Reply> {
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let list = &mut self.names[kind as usize];
            if list.set.insert(name.clone()) {
                list.order.push(name.clone());
                self.hub.add(kind, name, &self.client);
                self.publish_count(kind);
            }
            out.push(self.confirm(kind, true, Some(name.clone())));
        }
        out
    }

    /// (P|S)UNSUBSCRIBE: one confirmation per name (subscribed or not); with
    /// no names, one per subscription of that kind, or a single one with a
    /// nil name when there is none.
    pub fn unsubscribe(&mut self, kind: Kind, names: &[Bytes]) -> Vec<Reply> {
        let names: Vec<Bytes> = if names.is_empty() {
            self.names[kind as usize].order.clone()
        } else {
            names.to_vec()
        };
        if names.is_empty() {
            return vec![self.confirm(kind, false, None)];
        }
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let list = &mut self.names[kind as usize];
            if list.set.remove(&name) {
                list.order.retain(|n| *n != name);
                self.hub.remove(kind, &name, self.client.id);
                self.publish_count(kind);
            }
            out.push(self.confirm(kind, false, Some(name)));
        }
        out
    }

    /// RESET: every subscription dropped, without confirmations.
    pub fn clear(&mut self) {
        for kind in KINDS {
            // A session that never subscribed (a script's, sharing its
            // caller's client) must not touch the client's counts.
            if self.names[kind as usize].order.is_empty() {
                continue;
            }
            let list = std::mem::take(&mut self.names[kind as usize]);
            for name in list.order {
                self.hub.remove(kind, &name, self.client.id);
            }
            self.publish_count(kind);
        }
    }
}

impl Drop for Subscriptions {
    fn drop(&mut self) {
        self.clear();
    }
}

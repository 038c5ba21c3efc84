//! The cluster's shared state: every node, the slots each one serves, the
//! migrations in progress and the epochs. It is one document (JSON, one
//! etcd key), changed only as a whole by compare-and-swap, so a change is
//! never half-applied.
//!
//! Redis nodes join a cluster one handshake at a time; cairn keeps that
//! model in the document: every node has a `group` (initially its own id),
//! and a node sees only the nodes of its group. CLUSTER MEET merges two
//! groups, FORGET and RESET take a node out of one. A fresh node thus knows
//! only itself, as a fresh Redis node does, which `redis-cli --cluster
//! create` checks before it builds a cluster.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::SLOTS;

/// How long a forgotten node stays forgotten (Redis's FORGET blacklist):
/// FORGET of it from another node of the group answers OK meanwhile.
pub const FORGET_TTL_MS: u64 = 60_000;

/// The whole shared state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// Every node, by its 40-hex id.
    pub nodes: BTreeMap<String, NodeRecord>,
    /// Nodes taken out of a group by CLUSTER FORGET, with the time (ms).
    #[serde(default)]
    pub forgotten: BTreeMap<String, u64>,
}

/// One node as every other node sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Address clients are sent to ("" until known, as in Redis).
    pub ip: String,
    /// Client port.
    pub port: u16,
    /// Cluster bus port (announced only).
    pub bus_port: u16,
    /// The id of the group this node belongs to (a random id; a fresh node
    /// uses its own).
    pub group: String,
    /// The node's configuration epoch.
    pub config_epoch: u64,
    /// The greatest epoch this node has seen.
    pub current_epoch: u64,
    /// Slot ranges served, inclusive, ascending.
    pub slots: Vec<(u16, u16)>,
    /// Slots this node is moving out, to which node.
    #[serde(default)]
    pub migrating: BTreeMap<u16, String>,
    /// Slots this node is taking in, from which node.
    #[serde(default)]
    pub importing: BTreeMap<u16, String>,
    /// When the node joined its group (ms), shown as its last pong.
    #[serde(default)]
    pub since_ms: u64,
}

/// Marks "no owner" in [`View::owner`].
pub const UNOWNED: u16 = u16::MAX;

/// One node's view of the topology: the nodes of its group and who serves
/// each slot. Built once per topology version; routing reads it.
#[derive(Debug, Clone)]
pub struct View {
    /// This node's id.
    pub myself: String,
    /// The nodes of this node's group, by id (this node included).
    pub nodes: Vec<(String, NodeRecord)>,
    /// Index into `nodes` of each slot's owner, or [`UNOWNED`].
    pub owner: Vec<u16>,
    /// Index of this node in `nodes`.
    pub me: usize,
    /// The greatest epoch in the group.
    pub current_epoch: u64,
    /// The topology version (etcd revision) this view was built from.
    pub revision: i64,
    /// Slots with an owner (counted once: routing asks on every command).
    pub assigned: usize,
}

impl Topology {
    /// The group `id` is in (its own id when unknown).
    fn group_of(&self, id: &str) -> String {
        self.nodes
            .get(id)
            .map_or_else(|| id.to_string(), |n| n.group.clone())
    }

    /// Ids of the nodes in `group`.
    pub fn members(&self, group: &str) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.group == group)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The owner of `slot` in the group of `id`.
    pub fn owner_in_group(&self, id: &str, slot: u16) -> Option<String> {
        let group = self.group_of(id);
        self.nodes
            .iter()
            .find(|(_, n)| n.group == group && n.owns(slot))
            .map(|(id, _)| id.clone())
    }

    /// Merges the group of `other` into the group of `me` (CLUSTER MEET).
    /// Where both groups serve a slot, the node with the greater config
    /// epoch keeps it (ties: `me`'s group), as Redis settles collisions.
    pub fn merge_groups(&mut self, me: &str, other: &str) {
        let (ga, gb) = (self.group_of(me), self.group_of(other));
        if ga == gb {
            return;
        }
        let best = |t: &Topology, g: &str, slot: u16| {
            t.nodes
                .iter()
                .filter(|(_, n)| n.group == g && n.owns(slot))
                .map(|(id, n)| (id.clone(), n.config_epoch))
                .next()
        };
        let mut lose: Vec<(String, u16)> = Vec::new();
        for slot in 0..SLOTS {
            if let (Some((a, ea)), Some((b, eb))) = (best(self, &ga, slot), best(self, &gb, slot)) {
                lose.push(if eb > ea { (a, slot) } else { (b, slot) });
            }
        }
        for (id, slot) in lose {
            if let Some(n) = self.nodes.get_mut(&id) {
                n.remove_slot(slot);
            }
        }
        let now = now_ms();
        let epoch = self
            .nodes
            .values()
            .filter(|n| n.group == ga || n.group == gb)
            .map(|n| n.current_epoch)
            .max()
            .unwrap_or(0);
        for n in self.nodes.values_mut() {
            if n.group == gb || n.group == ga {
                if n.group == gb {
                    n.since_ms = now;
                }
                n.group = ga.clone();
                n.current_epoch = epoch;
            }
        }
    }

    /// Takes `id` out of its group: it becomes a group of its own, and the
    /// others' migrations to or from it end.
    pub fn isolate(&mut self, id: &str) {
        let Some(group) = self.nodes.get(id).map(|n| n.group.clone()) else {
            return;
        };
        for (other, n) in self.nodes.iter_mut() {
            if n.group == group && other != id {
                n.migrating.retain(|_, to| to != id);
                n.importing.retain(|_, from| from != id);
            }
        }
        if let Some(n) = self.nodes.get_mut(id) {
            // A new group id: the old one may be this node's own id, still
            // naming the group it leaves (a group keeps the id of the node
            // that first met another).
            n.group = super::node::new_node_id();
            n.migrating.clear();
            n.importing.clear();
        }
    }

    /// Builds `myself`'s view.
    pub fn view(&self, myself: &str, revision: i64) -> View {
        let group = self.group_of(myself);
        let mut nodes: Vec<(String, NodeRecord)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.group == group)
            .map(|(id, n)| (id.clone(), n.clone()))
            .collect();
        if !nodes.iter().any(|(id, _)| id == myself) {
            // Not registered yet: a fresh node alone.
            nodes.push((
                myself.to_string(),
                NodeRecord {
                    group: myself.to_string(),
                    ..NodeRecord::default()
                },
            ));
            nodes.sort_by(|a, b| a.0.cmp(&b.0));
        }
        let me = nodes.iter().position(|(id, _)| id == myself).unwrap_or(0);
        let mut owner = vec![UNOWNED; SLOTS as usize];
        for (i, (_, n)) in nodes.iter().enumerate() {
            for &(a, b) in &n.slots {
                for s in a..=b.min(SLOTS - 1) {
                    owner[s as usize] = i as u16;
                }
            }
        }
        let current_epoch = nodes
            .iter()
            .map(|(_, n)| n.current_epoch)
            .max()
            .unwrap_or(0);
        let assigned = owner.iter().filter(|&&o| o != UNOWNED).count();
        View {
            assigned,
            myself: myself.to_string(),
            nodes,
            owner,
            me,
            current_epoch,
            revision,
        }
    }

    /// Drops FORGET records older than [`FORGET_TTL_MS`].
    pub fn expire_forgotten(&mut self, now: u64) {
        self.forgotten
            .retain(|_, at| now.saturating_sub(*at) < FORGET_TTL_MS);
    }
}

impl NodeRecord {
    /// Whether the node serves `slot`.
    pub fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }

    /// The number of slots served.
    pub fn slot_count(&self) -> usize {
        self.slots.iter().map(|&(a, b)| (b - a) as usize + 1).sum()
    }

    /// Serves `slot` too.
    pub fn add_slot(&mut self, slot: u16) {
        if !self.owns(slot) {
            self.slots.push((slot, slot));
            self.normalize();
        }
    }

    /// Stops serving `slot`.
    pub fn remove_slot(&mut self, slot: u16) {
        let mut out = Vec::with_capacity(self.slots.len() + 1);
        for &(a, b) in &self.slots {
            if slot < a || slot > b {
                out.push((a, b));
                continue;
            }
            if a < slot {
                out.push((a, slot - 1));
            }
            if slot < b {
                out.push((slot + 1, b));
            }
        }
        self.slots = out;
    }

    /// Sorts and coalesces the ranges.
    fn normalize(&mut self) {
        self.slots.sort_unstable();
        let mut out: Vec<(u16, u16)> = Vec::with_capacity(self.slots.len());
        for &(a, b) in &self.slots {
            match out.last_mut() {
                Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        self.slots = out;
    }

    /// The address clients are sent to, as `ip:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }
}

impl View {
    /// This node's record.
    pub fn me(&self) -> &NodeRecord {
        &self.nodes[self.me].1
    }

    /// Whether this node is migrating or importing a slot: routing then
    /// needs to know which keys exist here.
    pub fn has_open_slots(&self) -> bool {
        let me = self.me();
        !me.migrating.is_empty() || !me.importing.is_empty()
    }

    /// The record of the node serving `slot`, if any.
    pub fn owner_of(&self, slot: u16) -> Option<&(String, NodeRecord)> {
        match self.owner[slot as usize] {
            UNOWNED => None,
            i => self.nodes.get(i as usize),
        }
    }

    /// Whether this node serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.owner[slot as usize] as usize == self.me
    }

    /// The node with this id in the group.
    pub fn node(&self, id: &str) -> Option<&NodeRecord> {
        self.nodes.iter().find(|(n, _)| n == id).map(|(_, r)| r)
    }

    /// `cluster_state`: ok when every slot is served, or, with
    /// `cluster-require-full-coverage no`, when any is.
    pub fn ok(&self, full_coverage: bool) -> bool {
        let n = self.assigned;
        if full_coverage {
            n == SLOTS as usize
        } else {
            n > 0
        }
    }

    /// The slot ranges of the whole group, ascending, with their owner.
    pub fn ranges(&self) -> Vec<(u16, u16, usize)> {
        let mut out: Vec<(u16, u16, usize)> = Vec::new();
        for slot in 0..SLOTS {
            let o = self.owner[slot as usize];
            if o == UNOWNED {
                continue;
            }
            match out.last_mut() {
                Some(last) if last.2 == o as usize && last.1 + 1 == slot => last.1 = slot,
                _ => out.push((slot, slot, o as usize)),
            }
        }
        out
    }

    /// One CLUSTER NODES line (without the newline), as Redis 7.0 writes
    /// it: only this node's line shows its open slots.
    pub fn node_line(&self, i: usize) -> String {
        let (id, n) = &self.nodes[i];
        let myself = i == self.me;
        let flags = if myself { "myself,master" } else { "master" };
        let pong = if myself { 0 } else { n.since_ms };
        let mut line = format!(
            "{id} {}:{}@{} {flags} - 0 {pong} {} connected",
            n.ip, n.port, n.bus_port, n.config_epoch
        );
        for &(a, b) in &n.slots {
            if a == b {
                line.push_str(&format!(" {a}"));
            } else {
                line.push_str(&format!(" {a}-{b}"));
            }
        }
        if myself {
            for (slot, to) in &n.migrating {
                line.push_str(&format!(" [{slot}->-{to}]"));
            }
            for (slot, from) in &n.importing {
                line.push_str(&format!(" [{slot}-<-{from}]"));
            }
        }
        line
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(group: &str, epoch: u64, slots: &[(u16, u16)]) -> NodeRecord {
        NodeRecord {
            ip: "127.0.0.1".into(),
            port: 7000,
            bus_port: 17000,
            group: group.into(),
            config_epoch: epoch,
            current_epoch: epoch,
            slots: slots.to_vec(),
            ..NodeRecord::default()
        }
    }

    #[test]
    fn slot_ranges_split_and_merge() {
        let mut n = node("a", 0, &[(0, 10)]);
        n.remove_slot(5);
        assert_eq!(n.slots, vec![(0, 4), (6, 10)]);
        n.add_slot(5);
        assert_eq!(n.slots, vec![(0, 10)]);
        n.remove_slot(0);
        n.remove_slot(10);
        assert_eq!(n.slots, vec![(1, 9)]);
        assert_eq!(n.slot_count(), 9);
    }

    #[test]
    fn meet_merges_groups_and_settles_collisions_by_epoch() {
        let mut t = Topology::default();
        t.nodes.insert("a".into(), node("a", 1, &[(0, 100)]));
        t.nodes.insert("b".into(), node("b", 2, &[(50, 200)]));
        t.nodes.insert("c".into(), node("c", 0, &[]));
        assert_eq!(t.view("a", 1).nodes.len(), 1);
        t.merge_groups("a", "b");
        let v = t.view("b", 2);
        assert_eq!(v.nodes.len(), 2);
        assert_eq!(v.current_epoch, 2);
        // b's epoch is greater: it keeps 50..100.
        assert_eq!(t.nodes["a"].slots, vec![(0, 49)]);
        assert_eq!(v.owner_of(60).unwrap().0, "b");
        assert_eq!(v.assigned, 201);
        t.isolate("b");
        assert_eq!(t.view("a", 3).nodes.len(), 1);
        assert_eq!(t.view("c", 3).nodes.len(), 1);
    }

    #[test]
    fn nodes_line_shows_open_slots_of_myself_only() {
        let mut t = Topology::default();
        let mut a = node("a", 1, &[(0, 5), (7, 7)]);
        a.migrating.insert(7, "b".into());
        t.nodes.insert("a".into(), a);
        let v = t.view("a", 1);
        assert_eq!(
            v.node_line(0),
            "a 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5 7 [7->-b]"
        );
    }
}

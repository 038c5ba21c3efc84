//! This node's part in a cluster: its id, the topology it last saw and the
//! view routing reads, and the one way the topology changes (read the
//! current document, apply a change, compare-and-swap it back).
//!
//! The document lives in etcd when endpoints are configured; without them
//! the node is a cluster of its own and the document lives only in
//! `<dir>/<cluster-config-file>`. Either way that file caches the last
//! version seen, so a node restarted while etcd is away serves the topology
//! it knew.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use super::etcd::{Etcd, WatchEvent};
use super::topology::{now_ms, NodeRecord, Topology, View};

/// How long one etcd request may take before the store counts as away.
const ETCD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// What is kept in the cluster config file.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Saved {
    /// This node's id, created once.
    myself: String,
    /// The revision of `topology`.
    revision: i64,
    /// The last topology seen.
    topology: Topology,
}

/// How this node reaches the other nodes' addresses: what it announces.
#[derive(Debug, Clone, Default)]
pub struct Announce {
    /// IP clients are sent to ("" until known).
    pub ip: String,
    /// Client port.
    pub port: u16,
    /// Bus port shown.
    pub bus_port: u16,
}

/// Where the topology document lives.
enum Store {
    /// Only here (a one-node cluster).
    Local,
    /// In etcd, under `key`.
    Etcd { client: Etcd, key: Vec<u8> },
}

/// This node's cluster state.
pub struct Cluster {
    myid: RwLock<String>,
    view: RwLock<Arc<View>>,
    /// The last topology applied and its revision.
    applied: Mutex<(Topology, i64)>,
    store: Store,
    /// One change at a time from this node.
    changes: tokio::sync::Mutex<()>,
    file: PathBuf,
    /// What this node tells others and clients about its address (read
    /// at start).
    announce: Announce,
    /// Whether the store answered the last time it was asked.
    reachable: AtomicBool,
    /// Keys MIGRATE is moving in chunks: commands on them answer TRYAGAIN
    /// until they are gone from here (or the move failed).
    pub moving: dashmap::DashSet<bytes::Bytes>,
    /// Slots CLUSTER MOVESLOT is moving away, each with its fence: once
    /// raised, writes to the slot answer TRYAGAIN until it is gone.
    pub slot_moves: SlotMoves,
    /// Slots being received from another node (CLUSTER IMPORTROWS).
    pub imports: Mutex<std::collections::HashMap<u16, super::rows::Import>>,
    /// Told of every view installed (set once, at start).
    on_view: std::sync::OnceLock<ViewHook>,
}

/// The slots this node is moving away with CLUSTER MOVESLOT, each with its
/// write fence. Every write command in cluster mode asks about its slot, so
/// the common answer (no move at all) costs one atomic load.
#[derive(Default)]
pub struct SlotMoves {
    count: std::sync::atomic::AtomicUsize,
    map: Mutex<std::collections::HashMap<u16, Arc<AtomicBool>>>,
}

impl SlotMoves {
    /// The fence of `slot`, if it is being moved.
    pub fn fence(&self, slot: u16) -> Option<Arc<AtomicBool>> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.map.lock().get(&slot).cloned()
    }

    /// Starts a move of `slot`, its fence down; `None` if one is under way.
    pub fn begin(&self, slot: u16) -> Option<Arc<AtomicBool>> {
        let mut map = self.map.lock();
        if map.contains_key(&slot) {
            return None;
        }
        let fence = Arc::new(AtomicBool::new(false));
        map.insert(slot, fence.clone());
        self.count.fetch_add(1, Ordering::AcqRel);
        Some(fence)
    }

    /// Ends the move of `slot`.
    pub fn end(&self, slot: u16) {
        if self.map.lock().remove(&slot).is_some() {
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// What runs after a new view is installed (ending subscriptions to shard
/// channels of slots that moved away).
pub type ViewHook = Box<dyn Fn(&View) + Send + Sync>;

/// Why a topology change was not made.
#[derive(Debug)]
pub enum ChangeError {
    /// The change itself was refused: Redis's error text (with its code).
    Refused(String),
    /// The store could not be reached or kept conflicting: nothing changed.
    Store(String),
}

impl Cluster {
    /// Opens the node's state: its id and cached topology from `file`
    /// (created with a new id if absent), stored in etcd at `endpoints`
    /// under `name` (or only locally when there are none).
    pub fn open(
        file: PathBuf,
        endpoints: &[String],
        name: &str,
        announce: Announce,
    ) -> std::io::Result<Arc<Cluster>> {
        let mut saved: Saved = match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", file.display()),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Saved::default(),
            Err(e) => return Err(e),
        };
        if saved.myself.len() != 40 {
            saved.myself = new_node_id();
        }
        let store = if endpoints.is_empty() {
            Store::Local
        } else {
            Store::Etcd {
                client: Etcd::new(endpoints.to_vec(), ETCD_TIMEOUT),
                key: format!("/{name}/topology").into_bytes(),
            }
        };
        let mut topology = saved.topology;
        if matches!(store, Store::Local) {
            register(&mut topology, &saved.myself, &announce);
        }
        let view = topology.view(&saved.myself, saved.revision);
        let cluster = Arc::new(Cluster {
            myid: RwLock::new(saved.myself),
            view: RwLock::new(Arc::new(view)),
            applied: Mutex::new((topology, saved.revision)),
            store,
            changes: tokio::sync::Mutex::new(()),
            file,
            announce,
            reachable: AtomicBool::new(true),
            moving: Default::default(),
            slot_moves: Default::default(),
            imports: Default::default(),
            on_view: Default::default(),
        });
        cluster.save()?;
        Ok(cluster)
    }

    /// Starts following the shared topology (etcd): registers this node,
    /// then applies every new version as it is written. Nothing to do for a
    /// local topology.
    pub fn start(self: &Arc<Self>) {
        if let Store::Etcd { .. } = self.store {
            let me = self.clone();
            tokio::spawn(async move { me.follow().await });
        }
    }

    /// Whether the topology is shared with other nodes (etcd), so this node
    /// can meet them.
    pub fn shared(&self) -> bool {
        !matches!(self.store, Store::Local)
    }

    /// This node's id.
    pub fn myid(&self) -> String {
        self.myid.read().clone()
    }

    /// The current view.
    pub fn view(&self) -> Arc<View> {
        self.view.read().clone()
    }

    /// Whether the topology store answered last time.
    fn reachable(&self) -> bool {
        self.reachable.load(Ordering::Relaxed)
    }

    /// Writes the config file (CLUSTER SAVECONFIG, and after every change).
    pub fn save(&self) -> std::io::Result<()> {
        let (topology, revision) = self.applied.lock().clone();
        let saved = Saved {
            myself: self.myid(),
            revision,
            topology,
        };
        let bytes = serde_json::to_vec(&saved)?;
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &self.file)
    }

    /// Applies one change to the topology: reads the current version, lets
    /// `f` edit it (as this node, `f`'s second argument is its id), and
    /// writes it back only if no one changed it meanwhile (retrying
    /// otherwise). `f` refusing leaves everything as it was.
    pub async fn change<F>(&self, mut f: F) -> Result<(), ChangeError>
    where
        F: FnMut(&mut Topology, &str) -> Result<(), String>,
    {
        let _one = self.changes.lock().await;
        for attempt in 0..16 {
            // First from the version last seen (most changes are made by
            // the node that saw the last one: one etcd round trip), then,
            // if someone changed it meanwhile, from the store.
            let cached = attempt == 0 && self.reachable();
            let (mut topology, revision) = if cached {
                self.applied.lock().clone()
            } else {
                self.current().await?
            };
            let myid = self.myid();
            let before = topology.clone();
            register(&mut topology, &myid, &self.announce);
            topology.expire_forgotten(now_ms());
            if let Err(refused) = f(&mut topology, &myid) {
                // The version seen here may be behind the store (a node
                // that registered a moment ago, as CLUSTER MEET right
                // after that node started finds): only the store's own
                // version may refuse.
                if cached {
                    continue;
                }
                return Err(ChangeError::Refused(refused));
            }
            if topology == before {
                // Nothing to write; what was read may still be news here.
                self.apply(topology, revision);
                return Ok(());
            }
            match self.put(&topology, revision).await? {
                Some(new_revision) => {
                    self.apply(topology, new_revision);
                    return Ok(());
                }
                None => continue,
            }
        }
        Err(ChangeError::Store(
            "the cluster topology kept changing; try again".into(),
        ))
    }

    /// Changes this node's id (CLUSTER RESET HARD), keeping the file.
    pub fn set_myid(&self, id: String) {
        *self.myid.write() = id;
        let applied = self.applied.lock().clone();
        let view = Arc::new(applied.0.view(&self.myid(), applied.1));
        *self.view.write() = view.clone();
        self.viewed(&view);
    }

    /// Sets what runs after each new view (once).
    pub fn set_on_view(&self, hook: ViewHook) {
        let _ = self.on_view.set(hook);
    }

    fn viewed(&self, view: &View) {
        if let Some(hook) = self.on_view.get() {
            hook(view);
        }
    }

    /// The current document and revision from the store.
    async fn current(&self) -> Result<(Topology, i64), ChangeError> {
        match &self.store {
            Store::Local => Ok(self.applied.lock().clone()),
            Store::Etcd { client, key } => {
                let got = client.get(key).await.map_err(|e| self.unreachable(e))?;
                self.set_reachable(true, None);
                match got.0 {
                    Some(v) => {
                        let t = serde_json::from_slice(&v.value).map_err(|e| {
                            ChangeError::Store(format!(
                                "the cluster topology in etcd is unreadable: {e}"
                            ))
                        })?;
                        Ok((t, v.mod_revision))
                    }
                    None => Ok((Topology::default(), 0)),
                }
            }
        }
    }

    /// Writes `t` if the stored revision is still `revision`.
    async fn put(&self, t: &Topology, revision: i64) -> Result<Option<i64>, ChangeError> {
        match &self.store {
            // The document is only here: nothing else can have changed it.
            Store::Local => Ok(Some(revision + 1)),
            Store::Etcd { client, key } => {
                let bytes = serde_json::to_vec(t)
                    .map_err(|e| ChangeError::Store(format!("cannot encode the topology: {e}")))?;
                client
                    .put_if(key, &bytes, revision)
                    .await
                    .map_err(|e| self.unreachable(e))
            }
        }
    }

    /// A change that could not reach etcd.
    fn unreachable(&self, e: super::etcd::EtcdError) -> ChangeError {
        let text = format!("cannot change the cluster topology: {e}");
        self.set_reachable(false, Some(&e));
        ChangeError::Store(text)
    }

    /// Installs a newer topology version.
    fn apply(&self, t: Topology, revision: i64) {
        let view = {
            let mut applied = self.applied.lock();
            if revision <= applied.1 {
                return;
            }
            let view = Arc::new(t.view(&self.myid(), revision));
            *applied = (t, revision);
            *self.view.write() = view.clone();
            view
        };
        self.viewed(&view);
        if let Err(e) = self.save() {
            tracing::warn!(error = %e, "cannot write the cluster config file");
        }
    }

    /// Follows the document in etcd for as long as the server runs.
    async fn follow(self: Arc<Self>) {
        let Store::Etcd { client, key } = &self.store else {
            return;
        };
        let mut registered = false;
        loop {
            let revision = match client.get(key).await {
                Ok((doc, header)) => {
                    self.set_reachable(true, None);
                    if let Some(v) = doc {
                        self.apply_stored(&v);
                    }
                    header
                }
                Err(e) => {
                    self.set_reachable(false, Some(&e));
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            };
            if !registered {
                // The change registers this node (or updates its address).
                match self.change(|_, _| Ok(())).await {
                    Ok(()) => registered = true,
                    Err(e) => tracing::warn!(?e, "cannot register this node in etcd"),
                }
            }
            let mut w = match client.watch(key, revision + 1).await {
                Ok(w) => w,
                Err(e) => {
                    self.set_reachable(false, Some(&e));
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            };
            loop {
                // A watch whose connection died silently sends nothing:
                // after a quiet while, read the document again and
                // watch anew.
                match tokio::time::timeout(RESYNC, w.next()).await {
                    Ok(Ok(WatchEvent::Put(v))) => self.apply_stored(&v),
                    // Someone deleted the document: the next change writes
                    // it again; meanwhile serve what was seen.
                    Ok(Ok(WatchEvent::Delete { .. })) => {}
                    Ok(Err(e)) => {
                        tracing::info!(error = %e, "etcd watch ended; following again");
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
    }

    /// Applies a version read from etcd.
    fn apply_stored(&self, v: &super::etcd::Versioned) {
        match serde_json::from_slice::<Topology>(&v.value) {
            Ok(t) => self.apply(t, v.mod_revision),
            Err(e) => tracing::error!(error = %e, "unreadable cluster topology in etcd"),
        }
    }

    /// Records whether etcd answers, logging when that changes (not on
    /// every retry of an outage).
    fn set_reachable(&self, up: bool, why: Option<&super::etcd::EtcdError>) {
        let was = self.reachable.swap(up, Ordering::Relaxed);
        match (was, up) {
            (true, false) => {
                tracing::warn!(error = ?why, "etcd unreachable: serving the last topology seen")
            }
            (false, true) => tracing::info!("etcd reachable again"),
            _ => {}
        }
    }
}

/// How long the follower waits before asking an unreachable etcd again.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a quiet watch is trusted before the document is read again.
const RESYNC: std::time::Duration = std::time::Duration::from_secs(30);

/// Opens the cluster state of a server about to serve on `port`: the file
/// is `<dir>/<cluster-config-file>`, the announced address comes from the
/// `cluster-announce-*` parameters, else the bind address and the port.
pub fn open_for(server: &crate::server::Server, port: u16) -> std::io::Result<Arc<Cluster>> {
    let cfg = &server.config;
    let rt = server.runtime.read();
    let file = cfg.dir.join(rt.get("cluster-config-file"));
    let announce = announce_of(&rt, &cfg.bind, port);
    if cfg.port > 55535 && rt.int("cluster-announce-bus-port") == 0 {
        return Err(std::io::Error::other(
            "port number too high: the cluster bus port is 10,000 above it, so the port must be 55535 or less",
        ));
    }
    drop(rt);
    std::fs::create_dir_all(&cfg.dir)?;
    Cluster::open(
        file,
        &cfg.cluster.etcd_endpoints,
        &cfg.cluster.name,
        announce,
    )
}

/// The address to announce: `cluster-announce-ip/port/bus-port` when set,
/// else the first bind address (unless it is a wildcard, which says
/// nothing: Redis then leaves the IP empty until a peer sees it).
pub fn announce_of(rt: &crate::server::Runtime, bind: &str, port: u16) -> Announce {
    let ip = match rt.get("cluster-announce-ip") {
        "" => bind
            .split_whitespace()
            .next()
            .filter(|b| !matches!(*b, "0.0.0.0" | "::" | "*" | "-::*" | "*:"))
            .unwrap_or("")
            .trim_start_matches('-')
            .to_string(),
        ip => ip.to_string(),
    };
    let port = match rt.int("cluster-announce-port") {
        p if p > 0 => p as u16,
        _ => port,
    };
    let bus_port = match rt.int("cluster-announce-bus-port") {
        p if p > 0 => p as u16,
        // Past 55535 (only a port the OS picked: a configured one is
        // refused at start, as Redis refuses it) no bus port is shown.
        _ => port.checked_add(10000).unwrap_or(0),
    };
    Announce { ip, port, bus_port }
}

/// Puts this node in the document if it is not there (a group of its own,
/// as a fresh Redis node), and keeps its announced address current.
fn register(t: &mut Topology, myid: &str, a: &Announce) {
    let n = t
        .nodes
        .entry(myid.to_string())
        .or_insert_with(|| NodeRecord {
            group: myid.to_string(),
            since_ms: now_ms(),
            ..NodeRecord::default()
        });
    if !a.ip.is_empty() {
        n.ip = a.ip.clone();
    }
    n.port = a.port;
    n.bus_port = a.bus_port;
}

/// A new random 40-hex node id.
pub fn new_node_id() -> String {
    crate::util::hex_id()
}

//! Which node a command belongs on (Redis's getNodeByQuery): every key of
//! it (or of a whole transaction, at EXEC) must hash to one slot this node
//! serves; otherwise the client is redirected, with Redis's words.

use bytes::Bytes;

use super::node::Cluster;
use super::topology::View;
use crate::command::flag;
use crate::command::CommandSpec;
use crate::protocol::Reply;
use crate::server::Server;
use crate::storage::keyspace::{self, Key};

/// One command to route: its table row and arguments.
pub type Routed<'a> = (&'static CommandSpec, &'a [Bytes]);

/// Where a command runs.
pub enum Route {
    /// Here.
    Here,
    /// Not here: this redirection or error instead.
    Refuse(Reply),
    /// Here, in a slot this node is migrating away, because its keys were
    /// here when checked. They must still be here, and not being moved,
    /// when the command runs (MIGRATE may move them in between): if not,
    /// the command answers `gone` instead (ASK to the target), or TRYAGAIN.
    WhilePresent {
        /// The command's keys.
        keys: Vec<Bytes>,
        /// The redirection should all of them be gone.
        gone: Reply,
        /// The keys MIGRATE is moving in chunks.
        moving: std::sync::Arc<Cluster>,
    },
    /// Here, a write to a slot CLUSTER MOVESLOT is copying away: it must
    /// find the fence still down when it runs (raised meanwhile, it
    /// answers TRYAGAIN), so no write lands after the copy's last look.
    Fenced(std::sync::Arc<std::sync::atomic::AtomicBool>),
}

/// Whether a command takes part in routing at all: commands without keys
/// run anywhere, except EXEC, which routes its whole queue.
pub fn routes(spec: &CommandSpec) -> bool {
    spec.name == "exec" || !matches!(spec.keys, crate::command::KeySpec::None)
}

/// Where `cmds` (one command, or EXEC's queue) run, by `view`. `asking`:
/// the client sent ASKING.
pub async fn check(
    server: &Server,
    cluster: &std::sync::Arc<Cluster>,
    view: &View,
    cmds: &[Routed<'_>],
    asking: bool,
) -> Route {
    let mut slot: Option<u16> = None;
    let (mut migrating, mut importing) = (false, false);
    let (mut missing, mut existing) = (0usize, 0usize);
    let mut nkeys = 0usize;
    // Only an open slot needs the keys themselves.
    let mut open_keys: Vec<Bytes> = Vec::new();
    let mut any_write = false;
    let mut is_migrate = false;
    for (spec, argv) in cmds {
        any_write |= spec.has(flag::WRITE);
        is_migrate |= spec.name == "migrate";
        for pos in spec.routing_key_positions(argv) {
            let key = &argv[pos];
            let this = super::key_slot(key);
            nkeys += 1;
            match slot {
                None => {
                    // A slot no node serves: the cluster is down for it.
                    if view.owner_of(this).is_none() {
                        return Route::Refuse(down_unbound());
                    }
                    slot = Some(this);
                    let me = view.me();
                    migrating = view.serves(this) && me.migrating.contains_key(&this);
                    importing = me.importing.contains_key(&this);
                }
                Some(s) if s != this => {
                    return Route::Refuse(Reply::Error(
                        "CROSSSLOT Keys in request don't hash to the same slot".into(),
                    ));
                }
                Some(_) => {}
            }
            if migrating || importing {
                if exists_here(server, key).await {
                    existing += 1;
                } else {
                    missing += 1;
                }
                open_keys.push(key.clone());
            }
        }
    }
    let Some(slot) = slot else {
        return Route::Here;
    };
    if let Some(down) = down_state(server, view, any_write) {
        // Sharded Pub/Sub may go on in a down cluster, for the slots this
        // node serves (`cluster-allow-pubsubshard-when-down`).
        let shard_pubsub = cmds
            .iter()
            .all(|(spec, _)| matches!(spec.name, "ssubscribe" | "sunsubscribe" | "spublish"));
        let allowed = shard_pubsub
            && server
                .runtime
                .read()
                .get("cluster-allow-pubsubshard-when-down")
                == "yes";
        if !allowed {
            return Route::Refuse(Reply::Error(down.text().into()));
        }
    }
    // MIGRATE works on the local keys of an open slot.
    if (migrating || importing) && is_migrate {
        return Route::Here;
    }
    if migrating {
        let to = &view.me().migrating[&slot];
        // Migrating to itself: an ASK to here is no redirection at all.
        if *to == view.myself {
            return Route::Here;
        }
        // A key MIGRATE is moving in chunks is neither here nor there yet.
        if open_keys.iter().any(|k| cluster.moving.contains(k)) {
            return Route::Refuse(tryagain());
        }
        let ask = redirect("ASK", slot, view.node(to));
        return match (missing, existing) {
            (0, _) => Route::WhilePresent {
                keys: open_keys,
                gone: ask,
                moving: cluster.clone(),
            },
            (_, 0) => Route::Refuse(ask),
            _ => Route::Refuse(tryagain()),
        };
    }
    let asking_cmd = cmds.iter().any(|(spec, _)| spec.has(flag::ASKING));
    if importing && (asking || asking_cmd) {
        if nkeys > 1 && missing > 0 {
            return Route::Refuse(tryagain());
        }
        return Route::Here;
    }
    if view.serves(slot) {
        if let Some(fence) = any_write.then(|| cluster.slot_moves.fence(slot)).flatten() {
            return match fence.load(std::sync::atomic::Ordering::Acquire) {
                true => Route::Refuse(tryagain()),
                false => Route::Fenced(fence),
            };
        }
        return Route::Here;
    }
    Route::Refuse(moved(view, slot))
}

/// The check of a command a script runs (Redis 7.0's
/// scriptVerifyClusterState): its keys must be in one slot this node
/// serves, and the cluster up. Keys of different local slots across a
/// script's commands are allowed, as in Redis 7.0.
pub fn check_in_script(server: &Server, cluster: &Cluster, cmd: Routed<'_>) -> Option<Reply> {
    let (spec, argv) = cmd;
    let view = cluster.view();
    let mut slot = None;
    for pos in spec.routing_key_positions(argv) {
        let this = super::key_slot(&argv[pos]);
        if slot.is_some_and(|s| s != this) || !view.serves(this) {
            return Some(Reply::err(
                "Script attempted to access a non local key in a cluster node",
            ));
        }
        slot = Some(this);
    }
    let slot = slot?;
    let fenced = cluster
        .slot_moves
        .fence(slot)
        .is_some_and(|f| f.load(std::sync::atomic::Ordering::Acquire));
    if fenced && spec.has(flag::WRITE) {
        return Some(tryagain());
    }
    down_state(server, &view, spec.has(flag::WRITE)).map(|down| {
        Reply::err(match down {
            Down::ReadOnly => {
                "Script attempted to execute a write command while the cluster is down and readonly"
            }
            Down::All => "Script attempted to execute a command while the cluster is down",
        })
    })
}

/// Whether every key is still here (in a transaction about to run the
/// command), with TRYAGAIN when only some are: the runtime half of
/// [`Route::WhilePresent`].
pub fn still_present(
    r: &dyn crate::storage::KvRead,
    keys: &[Bytes],
    gone: &Reply,
    cluster: &Cluster,
) -> Option<Reply> {
    if keys.iter().any(|k| cluster.moving.contains(k)) {
        return Some(tryagain());
    }
    let here = keys
        .iter()
        .filter(|k| matches!(keyspace::peek(r, Key::new(0, k)), Ok(Some(_))))
        .count();
    match here {
        n if n == keys.len() => None,
        0 => Some(gone.clone()),
        _ => Some(tryagain()),
    }
}

/// Whether `key` (database 0) exists on this node now.
async fn exists_here(server: &Server, key: &[u8]) -> bool {
    let shard = server.shards.shard_of_key(key);
    match server.shards.shard(shard).current_snapshot().await {
        Ok(snap) => matches!(keyspace::peek(&snap, Key::new(0, key)), Ok(Some(_))),
        Err(_) => false,
    }
}

/// How the cluster as a whole is down for a command.
enum Down {
    /// For every command.
    All,
    /// For writes (`cluster-allow-reads-when-down yes`).
    ReadOnly,
}

impl Down {
    /// The client's error, as Redis words it.
    fn text(&self) -> &'static str {
        match self {
            Down::All => "CLUSTERDOWN The cluster is down",
            Down::ReadOnly => "CLUSTERDOWN The cluster is down and only accepts read commands",
        }
    }
}

/// Whether the cluster is up in `view` (CLUSTER INFO's `cluster_state`):
/// not when a slot has no owner under `cluster-require-full-coverage yes`.
pub fn cluster_ok(server: &Server, view: &View) -> bool {
    // Every slot served: up whatever the settings (the common case, with
    // no lock taken).
    if view.assigned == super::SLOTS as usize {
        return true;
    }
    let full = server.runtime.read().get("cluster-require-full-coverage") == "yes";
    view.ok(full)
}

/// Whether the cluster as a whole is down for a command (see
/// [`cluster_ok`]).
fn down_state(server: &Server, view: &View, write: bool) -> Option<Down> {
    if cluster_ok(server, view) {
        return None;
    }
    if server.runtime.read().get("cluster-allow-reads-when-down") != "yes" {
        return Some(Down::All);
    }
    write.then_some(Down::ReadOnly)
}

fn down_unbound() -> Reply {
    Reply::Error("CLUSTERDOWN Hash slot not served".into())
}

/// Redis's answer to a command that may succeed a moment later.
pub fn tryagain() -> Reply {
    Reply::Error("TRYAGAIN Multiple keys request during rehashing of slot".into())
}

/// Where a client goes for `slot`, which this node does not serve:
/// `-MOVED` to its owner, or `-CLUSTERDOWN` when it has none.
pub fn moved(view: &View, slot: u16) -> Reply {
    redirect("MOVED", slot, view.owner_of(slot).map(|(_, n)| n))
}

/// `-MOVED slot ip:port` / `-ASK slot ip:port`.
fn redirect(kind: &str, slot: u16, to: Option<&super::topology::NodeRecord>) -> Reply {
    match to {
        Some(n) => Reply::Error(format!("{kind} {slot} {}:{}", n.ip, n.port)),
        None => down_unbound(),
    }
}

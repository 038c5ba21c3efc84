//! CLUSTER and its subcommands, ASKING, READONLY and READWRITE: Redis
//! Cluster's node commands over the topology in `crate::cluster`.
//! Reads answer from this node's view; changes go through
//! `Cluster::change`, one compare-and-swap of the shared document each.

use std::sync::Arc;

use bytes::Bytes;

use crate::cluster::node::{ChangeError, Cluster};
use crate::cluster::topology::{NodeRecord, Topology};
use crate::cluster::{key_slot, shard_of_slot, SLOTS};
use crate::command::Args;
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::server::Server;
use crate::storage::{encoding, KvRead, Table};

const DISABLED: &str = "This instance has cluster support disabled";

/// The cluster state, or Redis's error when cluster mode is off.
fn enabled(s: &Session) -> Result<Arc<Cluster>, Reply> {
    s.server.cluster.clone().ok_or_else(|| Reply::err(DISABLED))
}

/// ASKING: the next command may use a slot this node is importing.
pub fn asking(s: &mut Session, _a: Args) -> Action {
    if let Err(r) = enabled(s) {
        return r.into();
    }
    s.asking = true;
    Reply::Ok.into()
}

/// READONLY and READWRITE: accepted in cluster mode. They choose whether a
/// client may read from replicas; cairn has none, so routing is the same
/// either way and there is nothing to remember.
pub fn read_mode(s: &mut Session, a: Args) -> Action {
    match enabled(s) {
        Ok(_) => {
            // Only shown by CLIENT LIST (`r`): cairn has no replicas to
            // read from.
            s.entry.info.lock().readonly = a.get(0).eq_ignore_ascii_case(b"readonly");
            Reply::Ok.into()
        }
        Err(r) => r.into(),
    }
}

/// CLUSTER <subcommand> ...
pub fn cluster(s: &mut Session, a: Args) -> Action {
    let cluster = match enabled(s) {
        Ok(c) => c,
        Err(r) => return r.into(),
    };
    let sub = String::from_utf8_lossy(a.get(1)).to_ascii_lowercase();
    let server = s.server.clone();
    let view = cluster.view();
    match sub.as_str() {
        "help" => help(),
        "myid" => Reply::bulk_copy(view.myself.as_bytes()).into(),
        "info" => Reply::Verbatim(info(&server, &view)).into(),
        "nodes" => {
            let mut out = String::new();
            for i in 0..view.nodes.len() {
                out.push_str(&view.node_line(i));
                out.push('\n');
            }
            Reply::Verbatim(out).into()
        }
        "slots" => slots_reply(&view).into(),
        "shards" => shards_reply(&view).into(),
        "links" => Reply::Array(Vec::new()).into(),
        "keyslot" => Reply::Int(key_slot(a.get(2)) as i64).into(),
        "countkeysinslot" => {
            let slot = match crate::command::args::int(a.get(2)) {
                Ok(n) if (0..SLOTS as i64).contains(&n) => n as u16,
                Ok(_) => return Reply::err("Invalid slot").into(),
                Err(r) => return r.into(),
            };
            Action::Job(Box::pin(async move {
                match keys_in_slot(&server, slot, usize::MAX, false).await {
                    Ok((n, _)) => Reply::Int(n as i64),
                    Err(r) => r,
                }
            }))
        }
        "getkeysinslot" => {
            let (slot, max) = match (
                crate::command::args::int(a.get(2)),
                crate::command::args::int(a.get(3)),
            ) {
                (Err(r), _) | (_, Err(r)) => return r.into(),
                (Ok(slot), Ok(max)) if !(0..SLOTS as i64).contains(&slot) || max < 0 => {
                    return Reply::err("Invalid slot or number of keys").into()
                }
                (Ok(slot), Ok(max)) => (slot as u16, max as usize),
            };
            Action::Job(Box::pin(async move {
                match keys_in_slot(&server, slot, max, true).await {
                    Ok((_, keys)) => Reply::Array(keys.into_iter().map(Reply::Bulk).collect()),
                    Err(r) => r,
                }
            }))
        }
        "count-failure-reports" => match view.node(&String::from_utf8_lossy(a.get(2))) {
            Some(_) => Reply::Int(0).into(),
            None => unknown_node(a.get(2)).into(),
        },
        "replicas" | "slaves" => match view.node(&String::from_utf8_lossy(a.get(2))) {
            Some(_) => Reply::Array(Vec::new()).into(),
            None => unknown_node(a.get(2)).into(),
        },
        "failover" => {
            if a.len() == 3
                && !["force", "takeover"]
                    .iter()
                    .any(|w| a.get(2).eq_ignore_ascii_case(w.as_bytes()))
            {
                return Reply::err("syntax error").into();
            }
            if a.len() > 3 {
                return super::subcommand_syntax(&a).into();
            }
            Reply::err("You should send CLUSTER FAILOVER to a replica").into()
        }
        "replicate" => replicate(server, cluster, a),
        "saveconfig" => match cluster.save() {
            Ok(()) => Reply::Ok.into(),
            Err(e) => Reply::err(format!("error saving the cluster node config: {e}")).into(),
        },
        "addslots" | "delslots" => {
            let mut slots = Vec::with_capacity(a.len() - 2);
            for arg in a.from(2) {
                match parse_slot(arg) {
                    Ok(s) => slots.push((s, s)),
                    Err(r) => return r.into(),
                }
            }
            assign(cluster, slots, sub == "delslots")
        }
        "addslotsrange" | "delslotsrange" => {
            if a.len() % 2 == 1 {
                return Reply::err(format!(
                    "wrong number of arguments for 'cluster|{sub}' command"
                ))
                .into();
            }
            let mut ranges = Vec::new();
            for pair in a.from(2).chunks(2) {
                let (start, end) = match (parse_slot(&pair[0]), parse_slot(&pair[1])) {
                    (Err(r), _) | (_, Err(r)) => return r.into(),
                    (Ok(a), Ok(b)) => (a, b),
                };
                if start > end {
                    return Reply::err(format!(
                        "start slot number {start} is greater than end slot number {end}"
                    ))
                    .into();
                }
                ranges.push((start, end));
            }
            assign(cluster, ranges, sub == "delslotsrange")
        }
        "flushslots" => Action::Job(Box::pin(async move {
            match db_is_empty(&server).await {
                Ok(true) => {}
                Ok(false) => return Reply::err("DB must be empty to perform CLUSTER FLUSHSLOTS."),
                Err(r) => return r,
            }
            finish(
                cluster
                    .change(|t, me| {
                        me_mut(t, me).slots.clear();
                        Ok(())
                    })
                    .await,
            )
        })),
        "setslot" => setslot(server, cluster, a),
        "moveslot" => super::moveslot::moveslot(server, cluster, a),
        "importrows" => super::moveslot::importrows(server, cluster, a),
        "bumpepoch" => Action::Job(Box::pin(async move {
            let mut bumped = false;
            let r = cluster
                .change(|t, me| {
                    bumped = bump_epoch(t, me);
                    Ok(())
                })
                .await;
            match r {
                Ok(()) => {
                    let epoch = cluster.view().me().config_epoch;
                    let word = if bumped { "BUMPED" } else { "STILL" };
                    Reply::Status(format!("{word} {epoch}"))
                }
                Err(e) => change_error(e),
            }
        })),
        "set-config-epoch" => {
            let epoch = match crate::command::args::int(a.get(2)) {
                Ok(e) => e,
                Err(r) => return r.into(),
            };
            if epoch < 0 {
                return Reply::err(format!("Invalid config epoch specified: {epoch}")).into();
            }
            Action::Job(Box::pin(async move {
                finish(
                    cluster
                        .change(|t, me| {
                            let group = t.nodes[me].group.clone();
                            if t.members(&group).len() > 1 {
                                return Err("The user can assign a config epoch only when the node does not know any other node.".into());
                            }
                            let n = me_mut(t, me);
                            if n.config_epoch != 0 {
                                return Err("Node config epoch is already non-zero".into());
                            }
                            n.config_epoch = epoch as u64;
                            n.current_epoch = n.current_epoch.max(epoch as u64);
                            Ok(())
                        })
                        .await,
                )
            }))
        }
        "meet" => meet(server, cluster, a),
        "forget" => {
            let id = String::from_utf8_lossy(a.get(2)).into_owned();
            Action::Job(Box::pin(async move {
                finish(
                    cluster
                        .change(|t, me| {
                            if id == me {
                                return Err("I tried hard but I can't forget myself...".into());
                            }
                            let same_group = t
                                .nodes
                                .get(&id)
                                .is_some_and(|n| n.group == t.nodes[me].group);
                            if !same_group {
                                // Forgotten a moment ago by another node of the
                                // group: Redis's blacklist makes this an OK.
                                return if t.forgotten.contains_key(&id) {
                                    Ok(())
                                } else {
                                    Err(format!("Unknown node {id}"))
                                };
                            }
                            t.isolate(&id);
                            t.forgotten
                                .insert(id.clone(), crate::cluster::topology::now_ms());
                            Ok(())
                        })
                        .await,
                )
            }))
        }
        "reset" => {
            let hard = match a.len() {
                2 => false,
                n if n > 3 => return super::subcommand_syntax(&a).into(),
                _ if a.get(2).eq_ignore_ascii_case(b"hard") => true,
                _ if a.get(2).eq_ignore_ascii_case(b"soft") => false,
                _ => return Reply::err("syntax error").into(),
            };
            Action::Job(Box::pin(async move {
                match db_is_empty(&server).await {
                    Ok(true) => {}
                    Ok(false) => {
                        return Reply::err(
                            "CLUSTER RESET can't be called with master nodes containing keys",
                        )
                    }
                    Err(r) => return r,
                }
                let new_id = hard.then(crate::cluster::node::new_node_id);
                let r = cluster
                    .change(|t, me| {
                        t.isolate(me);
                        let n = me_mut(t, me);
                        n.slots.clear();
                        if let Some(id) = &new_id {
                            let mut fresh = t.nodes.remove(me).unwrap_or_default();
                            fresh.group = id.clone();
                            fresh.config_epoch = 0;
                            fresh.current_epoch = 0;
                            t.nodes.insert(id.clone(), fresh);
                        }
                        Ok(())
                    })
                    .await;
                if r.is_ok() {
                    if let Some(id) = new_id {
                        cluster.set_myid(id);
                        let _ = cluster.save();
                    }
                }
                finish(r)
            }))
        }
        // The table only lets known subcommands through.
        _ => Reply::err(format!(
            "unknown subcommand '{}'. Try CLUSTER HELP.",
            String::from_utf8_lossy(a.get(1))
        ))
        .into(),
    }
}

/// This node's record in a document `change` has registered it in.
pub(super) fn me_mut<'a>(t: &'a mut Topology, me: &str) -> &'a mut NodeRecord {
    t.nodes.get_mut(me).expect("change registers this node")
}

fn unknown_node(id: &[u8]) -> Reply {
    Reply::err(format!("Unknown node {}", String::from_utf8_lossy(id)))
}

/// A change's reply: OK, the refusal, or why the store did not take it.
fn finish(r: Result<(), ChangeError>) -> Reply {
    match r {
        Ok(()) => Reply::Ok,
        Err(e) => change_error(e),
    }
}

pub(super) fn change_error(e: ChangeError) -> Reply {
    match e {
        ChangeError::Refused(text) => Reply::err(text),
        ChangeError::Store(text) => Reply::err(text),
    }
}

/// A slot argument (Redis's getSlotOrReply).
pub(super) fn parse_slot(arg: &[u8]) -> Result<u16, Reply> {
    match crate::util::num::parse_i64(arg) {
        Some(n) if (0..SLOTS as i64).contains(&n) => Ok(n as u16),
        _ => Err(Reply::err("Invalid or out of range slot")),
    }
}

/// ADDSLOTS / DELSLOTS and their RANGE forms: every slot is checked (busy,
/// already unassigned, named twice) before any changes.
fn assign(cluster: Arc<Cluster>, ranges: Vec<(u16, u16)>, del: bool) -> Action {
    Action::Job(Box::pin(async move {
        finish(
            cluster
                .change(|t, me| {
                    let mut named = vec![false; SLOTS as usize];
                    for &(start, end) in &ranges {
                        for slot in start..=end {
                            let owner = t.owner_in_group(me, slot);
                            if del && owner.is_none() {
                                return Err(format!("Slot {slot} is already unassigned"));
                            }
                            if !del && owner.is_some() {
                                return Err(format!("Slot {slot} is already busy"));
                            }
                            if std::mem::replace(&mut named[slot as usize], true) {
                                return Err(format!("Slot {slot} specified multiple times"));
                            }
                        }
                    }
                    for &(start, end) in &ranges {
                        for slot in start..=end {
                            if del {
                                if let Some(owner) = t.owner_in_group(me, slot) {
                                    t.nodes.get_mut(&owner).expect("owner").remove_slot(slot);
                                }
                            } else {
                                let n = me_mut(t, me);
                                n.add_slot(slot);
                                // Owning the slot ends importing it.
                                n.importing.remove(&slot);
                            }
                        }
                    }
                    Ok(())
                })
                .await,
        )
    }))
}

/// Redis's clusterBumpConfigEpochWithoutConsensus: a new, greatest epoch
/// for this node unless its epoch already is the unique greatest.
pub(super) fn bump_epoch(t: &mut Topology, me: &str) -> bool {
    let group = t.nodes[me].group.clone();
    let members = t.members(&group);
    let max = members
        .iter()
        .map(|id| {
            let n = &t.nodes[id];
            n.config_epoch.max(n.current_epoch)
        })
        .max()
        .unwrap_or(0);
    let mine = t.nodes[me].config_epoch;
    if mine != 0 && mine == max {
        return false;
    }
    let epoch = max + 1;
    for id in &members {
        let n = t.nodes.get_mut(id).expect("member");
        n.current_epoch = epoch;
    }
    me_mut(t, me).config_epoch = epoch;
    true
}

/// CLUSTER SETSLOT <slot> IMPORTING|MIGRATING|NODE <id> | STABLE
fn setslot(server: Arc<Server>, cluster: Arc<Cluster>, a: Args) -> Action {
    let slot = match parse_slot(a.get(2)) {
        Ok(s) => s,
        Err(r) => return r.into(),
    };
    let action = String::from_utf8_lossy(a.get(3)).to_ascii_lowercase();
    let target = (a.len() == 5).then(|| String::from_utf8_lossy(a.get(4)).into_owned());
    let valid = matches!(
        (action.as_str(), &target),
        ("migrating" | "importing" | "node", Some(_)) | ("stable", None)
    );
    if !valid {
        return Reply::err(
            "Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP",
        )
        .into();
    }
    Action::Job(Box::pin(async move {
        // Whether this node still holds keys in the slot: NODE may not give
        // it away then, and assigning it away without keys ends a
        // migration here. One key answers it.
        let held = match action.as_str() {
            "node" => match keys_in_slot(&server, slot, 1, false).await {
                Ok((n, _)) => n,
                Err(r) => return r,
            },
            _ => 0,
        };
        let mut bumped = false;
        let r = cluster
            .change(|t, me| {
                let owner = t.owner_in_group(me, slot);
                let target = target.clone().unwrap_or_default();
                let known = t
                    .nodes
                    .get(&target)
                    .is_some_and(|n| n.group == t.nodes[me].group);
                match action.as_str() {
                    "migrating" => {
                        if owner.as_deref() != Some(me) {
                            return Err(format!("I'm not the owner of hash slot {slot}"));
                        }
                        if !known {
                            return Err(format!("I don't know about node {target}"));
                        }
                        me_mut(t, me).migrating.insert(slot, target);
                    }
                    "importing" => {
                        if owner.as_deref() == Some(me) {
                            return Err(format!("I'm already the owner of hash slot {slot}"));
                        }
                        if !known {
                            return Err(format!("I don't know about node {target}"));
                        }
                        me_mut(t, me).importing.insert(slot, target);
                    }
                    "stable" => {
                        let n = me_mut(t, me);
                        n.migrating.remove(&slot);
                        n.importing.remove(&slot);
                    }
                    _ => {
                        if !known {
                            return Err(format!("Unknown node {target}"));
                        }
                        if held != 0 && target != me {
                            return Err(format!("Can't assign hashslot {slot} to a different node while I still hold keys for this hash slot."));
                        }
                        if held == 0 {
                            me_mut(t, me).migrating.remove(&slot);
                        }
                        if let Some(o) = &owner {
                            t.nodes.get_mut(o).expect("owner").remove_slot(slot);
                        }
                        t.nodes.get_mut(&target).expect("known").add_slot(slot);
                        if target == me && me_mut(t, me).importing.remove(&slot).is_some() {
                            // A slot moved by hand: a new epoch for this node,
                            // so its claim wins.
                            bumped = bump_epoch(t, me);
                        }
                    }
                }
                Ok(())
            })
            .await;
        if bumped {
            tracing::warn!("configEpoch updated after importing slot");
        }
        finish(r)
    }))
}

/// CLUSTER MEET <ip> <port> [<bus-port>]: asks the node at that address
/// for its id, then merges its group and this one in one change.
fn meet(server: Arc<Server>, cluster: Arc<Cluster>, a: Args) -> Action {
    let port = match crate::util::num::parse_i64(a.get(3)) {
        Some(p) => p,
        None => {
            return Reply::err(format!(
                "Invalid TCP base port specified: {}",
                String::from_utf8_lossy(a.get(3))
            ))
            .into()
        }
    };
    let bus = match a.len() {
        4 => port + 10000,
        5 => match crate::util::num::parse_i64(a.get(4)) {
            Some(p) => p,
            None => {
                return Reply::err(format!(
                    "Invalid TCP bus port specified: {}",
                    String::from_utf8_lossy(a.get(4))
                ))
                .into()
            }
        },
        _ => return super::subcommand_syntax(&a).into(),
    };
    let ip_text = String::from_utf8_lossy(a.get(2)).into_owned();
    let ip: Option<std::net::IpAddr> = ip_text.parse().ok();
    let valid_port = |p: i64| (1..=65535).contains(&p);
    let Some(ip) = ip.filter(|_| valid_port(port) && valid_port(bus)) else {
        return Reply::err(format!(
            "Invalid node address specified: {ip_text}:{}",
            String::from_utf8_lossy(a.get(3))
        ))
        .into();
    };
    Action::Job(Box::pin(async move {
        if !cluster.shared() {
            return Reply::err(
                "this node keeps its cluster topology alone (cluster.etcd_endpoints is empty), so it cannot meet other nodes",
            );
        }
        let addr = std::net::SocketAddr::new(ip, port as u16);
        let password = server.runtime.read().requirepass().to_string();
        let (peer, local_ip) = match handshake(addr, &password).await {
            Ok(x) => x,
            Err(e) => {
                // Redis answers OK and lets the handshake fail later; the
                // log says why this one did.
                tracing::warn!(%addr, error = %e, "CLUSTER MEET: no answer from the node");
                return Reply::Ok;
            }
        };
        let r = cluster
            .change(|t, me| {
                if peer == me {
                    return Ok(());
                }
                let Some(n) = t.nodes.get_mut(&peer) else {
                    return Err(format!(
                        "node {peer} at {addr} does not share this cluster's topology store"
                    ));
                };
                if n.ip.is_empty() {
                    n.ip = ip.to_string();
                }
                n.bus_port = bus as u16;
                let mine = me_mut(t, me);
                if mine.ip.is_empty() {
                    mine.ip = local_ip.clone();
                }
                t.merge_groups(me, &peer);
                Ok(())
            })
            .await;
        finish(r)
    }))
}

/// Asks the node at `addr` for its id (CLUSTER MYID), authenticating with
/// this node's password when it has one. Also returns the local address
/// the connection used: this node's IP as that node sees it.
async fn handshake(addr: std::net::SocketAddr, password: &str) -> Result<(String, String), String> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let fut = async {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let local = stream
            .local_addr()
            .map_err(|e| e.to_string())?
            .ip()
            .to_string();
        let mut stream = tokio::io::BufReader::new(stream);
        let mut req = Vec::new();
        if !password.is_empty() {
            crate::protocol::encode_command(&mut req, &[b"AUTH", password.as_bytes()]);
        }
        crate::protocol::encode_command(&mut req, &[b"CLUSTER", b"MYID"]);
        stream
            .get_mut()
            .write_all(&req)
            .await
            .map_err(|e| e.to_string())?;
        let mut line = String::new();
        if !password.is_empty() {
            stream
                .read_line(&mut line)
                .await
                .map_err(|e| e.to_string())?;
            line.clear();
        }
        stream
            .read_line(&mut line)
            .await
            .map_err(|e| e.to_string())?;
        if !line.starts_with('$') {
            return Err(format!("unexpected reply {:?}", line.trim_end()));
        }
        line.clear();
        stream
            .read_line(&mut line)
            .await
            .map_err(|e| e.to_string())?;
        let id = line.trim_end().to_string();
        if id.len() != 40 {
            return Err(format!("unexpected node id {id:?}"));
        }
        Ok((id, local))
    };
    tokio::time::timeout(std::time::Duration::from_secs(3), fut)
        .await
        .map_err(|_| "timed out".to_string())?
}

/// CLUSTER REPLICATE <node-id>: Redis's checks, then a refusal: cairn
/// nodes do not replicate.
fn replicate(server: Arc<Server>, cluster: Arc<Cluster>, a: Args) -> Action {
    let id = String::from_utf8_lossy(a.get(2)).into_owned();
    let view = cluster.view();
    if view.node(&id).is_none() {
        return unknown_node(a.get(2)).into();
    }
    if id == view.myself {
        return Reply::err("Can't replicate myself").into();
    }
    let has_slots = !view.me().slots.is_empty();
    Action::Job(Box::pin(async move {
        let empty = match db_is_empty(&server).await {
            Ok(e) => e,
            Err(r) => return r,
        };
        if has_slots || !empty {
            return Reply::err(
                "To set a master the node must be empty and without assigned slots.",
            );
        }
        Reply::err("cairn nodes do not replicate: CLUSTER REPLICATE is not supported")
    }))
}

/// Whether database 0 has no keys.
async fn db_is_empty(server: &Server) -> Result<bool, Reply> {
    let ids: Vec<usize> = (0..server.shards.len()).collect();
    let snaps = server.shards.snapshots(&ids).await.map_err(Reply::err)?;
    for snap in &snaps {
        if snap.key_count(0).map_err(Reply::err)? != 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Listings of at most this many keys run on the shard's actor (see
/// [`keys_in_slot`]).
const ON_ACTOR: usize = 1024;

/// The live keys of `slot` held here: how many, and (if `collect`) the
/// first `max` names in key order.
///
/// A short listing runs on the shard's actor, whose scans jump over the
/// runs of deleted rows they have crossed before (`merge::DeadRanges`):
/// `redis-cli --cluster reshard` alternates GETKEYSINSLOT of 10 keys with a
/// MIGRATE that deletes them, so a scan from a snapshot would step over
/// every key moved so far, each time, until the write buffer reaches the
/// tables. Long listings and counts read a snapshot, off the actor.
pub async fn keys_in_slot(
    server: &Server,
    slot: u16,
    max: usize,
    collect: bool,
) -> Result<(usize, Vec<Bytes>), Reply> {
    let shard = shard_of_slot(slot, server.shards.len());
    if max <= ON_ACTOR {
        return super::on_actor(&server.shards, shard, move |w| {
            scan_slot(w, slot, max, collect)
        })
        .await;
    }
    let snap = super::snapshot_of(&server.shards, shard).await?;
    scan_slot(&snap, slot, max, collect).map_err(Reply::err)
}

/// [`keys_in_slot`] in one view.
fn scan_slot(
    r: &dyn KvRead,
    slot: u16,
    max: usize,
    collect: bool,
) -> Result<(usize, Vec<Bytes>), crate::storage::StoreError> {
    let start = encoding::meta_slot_prefix(0, slot);
    let end = encoding::prefix_successor(&start);
    let now = r.now_ms();
    let (mut n, mut names) = (0usize, Vec::new());
    r.scan(Table::Meta, &start, end.as_deref(), false, &mut |k, v| {
        if n >= max {
            return false;
        }
        let live = matches!(encoding::Meta::peek_header(v), Ok((_, exp)) if exp == 0 || exp > now);
        if live {
            n += 1;
            if collect {
                if let Some((_, _, name)) = encoding::decode_meta_key(k) {
                    names.push(Bytes::copy_from_slice(name));
                }
            }
        }
        true
    })?;
    Ok((n, names))
}

/// CLUSTER INFO's text.
fn info(server: &Server, view: &crate::cluster::topology::View) -> String {
    let state = if crate::cluster::routing::cluster_ok(server, view) {
        "ok"
    } else {
        "fail"
    };
    let assigned = view.assigned;
    let size = view
        .nodes
        .iter()
        .filter(|(_, n)| !n.slots.is_empty())
        .count();
    format!(
        "cluster_state:{state}\r\n\
         cluster_slots_assigned:{assigned}\r\n\
         cluster_slots_ok:{assigned}\r\n\
         cluster_slots_pfail:0\r\n\
         cluster_slots_fail:0\r\n\
         cluster_known_nodes:{}\r\n\
         cluster_size:{size}\r\n\
         cluster_current_epoch:{}\r\n\
         cluster_my_epoch:{}\r\n\
         cluster_stats_messages_sent:0\r\n\
         cluster_stats_messages_received:0\r\n\
         total_cluster_links_buffer_limit_exceeded:0\r\n",
        view.nodes.len(),
        view.current_epoch,
        view.me().config_epoch,
    )
}

/// CLUSTER SLOTS: each range with its node (ip, port, id, no extra
/// endpoints).
fn slots_reply(view: &crate::cluster::topology::View) -> Reply {
    let ranges = view.ranges();
    Reply::Array(
        ranges
            .into_iter()
            .map(|(a, b, i)| {
                let (id, n) = &view.nodes[i];
                Reply::Array(vec![
                    Reply::Int(a as i64),
                    Reply::Int(b as i64),
                    Reply::Array(vec![
                        Reply::bulk_copy(n.ip.as_bytes()),
                        Reply::Int(n.port as i64),
                        Reply::bulk_copy(id.as_bytes()),
                        Reply::Map(Vec::new()),
                    ]),
                ])
            })
            .collect(),
    )
}

/// CLUSTER SHARDS: one shard per node (cairn has no replicas).
fn shards_reply(view: &crate::cluster::topology::View) -> Reply {
    let text = |s: &str| Reply::bulk_copy(s.as_bytes());
    Reply::Array(
        view.nodes
            .iter()
            .map(|(id, n)| {
                let slots = n
                    .slots
                    .iter()
                    .flat_map(|&(a, b)| [Reply::Int(a as i64), Reply::Int(b as i64)])
                    .collect();
                let node = Reply::Map(vec![
                    (text("id"), text(id)),
                    (text("port"), Reply::Int(n.port as i64)),
                    (text("ip"), text(&n.ip)),
                    (text("endpoint"), text(&n.ip)),
                    (text("role"), text("master")),
                    (text("replication-offset"), Reply::Int(0)),
                    (text("health"), text("online")),
                ]);
                Reply::Map(vec![
                    (text("slots"), Reply::Array(slots)),
                    (text("nodes"), Reply::Array(vec![node])),
                ])
            })
            .collect(),
    )
}

fn help() -> Action {
    const LINES: &[&str] = &[
        "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ADDSLOTS <slot> [<slot> ...]",
        "    Assign slots to current node.",
        "ADDSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
        "    Assign slots which are between <start-slot> and <end-slot> to current node.",
        "BUMPEPOCH",
        "    Advance the cluster config epoch.",
        "COUNT-FAILURE-REPORTS <node-id>",
        "    Return number of failure reports for <node-id>.",
        "COUNTKEYSINSLOT <slot>",
        "    Return the number of keys in <slot>.",
        "DELSLOTS <slot> [<slot> ...]",
        "    Delete slots information from current node.",
        "DELSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
        "    Delete slots information which are between <start-slot> and <end-slot> from current node.",
        "FAILOVER [FORCE|TAKEOVER]",
        "    Promote current replica node to being a master.",
        "FORGET <node-id>",
        "    Remove a node from the cluster.",
        "GETKEYSINSLOT <slot> <count>",
        "    Return key names stored by current node in a slot.",
        "FLUSHSLOTS",
        "    Delete current node own slots information.",
        "INFO",
        "    Return information about the cluster.",
        "KEYSLOT <key>",
        "    Return the hash slot for <key>.",
        "MEET <ip> <port> [<bus-port>]",
        "    Connect nodes into a working cluster.",
        "MYID",
        "    Return the node id.",
        "NODES",
        "    Return cluster configuration seen by node. Output format:",
        "    <id> <ip:port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
        "REPLICATE <node-id>",
        "    Configure current node as replica to <node-id>.",
        "RESET [HARD|SOFT]",
        "    Reset current node (default: soft).",
        "SET-CONFIG-EPOCH <epoch>",
        "    Set config epoch of current node.",
        "SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE|NODE <node-id>)",
        "    Set slot state.",
        "REPLICAS <node-id>",
        "    Return <node-id> replicas.",
        "SAVECONFIG",
        "    Force saving cluster configuration on disk.",
        "SLOTS",
        "    Return information about slots range mappings. Each range is made of:",
        "    start, end, master and replicas IP addresses, ports and ids",
        "SHARDS",
        "    Return information about slot range mappings and the nodes associated with them.",
        "LINKS",
        "    Return information about all network links between this node and its peers.",
        "    Output format is an array where each array element is a map containing attributes of a link",
        "HELP",
        "    Prints this help.",
    ];
    super::help_reply(LINES).into()
}

//! CLUSTER MOVESLOT: moves a whole slot to another node by streaming its
//! stored rows in key order (see `cluster::rows`), while both nodes go on
//! serving; and CLUSTER IMPORTROWS, the target's half.
//!
//! # How a slot moves
//! 1. The source starts recording the keys written in the slot (a slot
//!    watch on its shard, see `shard::watch`), then copies the slot from a
//!    snapshot on a blocking thread; clients keep reading and writing it
//!    on the source meanwhile, and nothing is sent to the target by them.
//! 2. It sends the keys written since, again from a fresh snapshot, a few
//!    rounds while that shrinks.
//! 3. It raises the slot's fence on the shard's actor, in the same step
//!    that takes the last list of written keys: every later write answers
//!    TRYAGAIN (cluster clients retry it), every earlier one is in the list
//!    sent last.
//! 4. It hands the slot to the target in the topology (one etcd change),
//!    waits until the target serves it, and deletes its own copy, a slice
//!    at a time. Writes were refused from step 3 to the hand-over only.
//!
//! Should anything fail before the hand-over, the target drops what it
//! received and the slot stays here, whole.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::cluster::{bump_epoch, me_mut, parse_slot};
use super::dump::Target;
use super::on_actor;
use crate::cluster::node::{ChangeError, Cluster};
use crate::cluster::rows::{self, Framer, Import};
use crate::cluster::shard_of_slot;
use crate::command::args::Args;
use crate::net::session::Action;
use crate::protocol::Reply;
use crate::server::Server;

/// Catch-up rounds before the fence goes up whatever is left.
const ROUNDS: usize = 3;

/// Written keys few enough to send with writes fenced.
const FEW: usize = 1_000;

/// Frames sent to the target before the first one's reply is awaited.
const WINDOW: usize = 4;

/// Keys deleted per transaction when a slot's copy is dropped.
const DROP_SLICE: usize = 500;

/// How long the source waits for each write to or reply from the target.
const WAIT: Duration = Duration::from_secs(10);

/// CLUSTER MOVESLOT <slot> <node-id>
pub fn moveslot(server: Arc<Server>, cluster: Arc<Cluster>, a: Args) -> Action {
    let slot = match parse_slot(a.get(2)) {
        Ok(s) => s,
        Err(r) => return r.into(),
    };
    let target = String::from_utf8_lossy(a.get(3)).into_owned();
    // A task of its own: a move, once started, ends (moved or undone)
    // whatever happens to the connection that asked for it.
    let moving = tokio::spawn(async move { move_slot(&server, &cluster, slot, &target).await });
    Action::Job(Box::pin(async move {
        match moving.await {
            Ok(Ok(())) => Reply::Ok,
            Ok(Err(r)) => r,
            Err(e) => Reply::err(format!("CLUSTER MOVESLOT failed: {e}")),
        }
    }))
}

/// Ends a move's slot watch and fence however the move ends (a panic
/// included): a fence left up would refuse the slot's writes for good.
struct Underway {
    watches: Arc<crate::shard::watch::WatchRegistry>,
    cluster: Arc<Cluster>,
    slot: u16,
}

impl Drop for Underway {
    fn drop(&mut self) {
        self.watches.unwatch_slot(self.slot);
        self.cluster.slot_moves.end(self.slot);
    }
}

/// The source's side of a move (see the module's comment).
async fn move_slot(
    server: &Arc<Server>,
    cluster: &Arc<Cluster>,
    slot: u16,
    target: &str,
) -> Result<(), Reply> {
    let view = cluster.view();
    if !view.serves(slot) {
        return Err(Reply::err(format!("I'm not the owner of hash slot {slot}")));
    }
    if target == view.myself {
        return Err(Reply::err("Can't move a slot to myself"));
    }
    let Some(node) = view.node(target) else {
        return Err(Reply::err(format!("I don't know about node {target}")));
    };
    if view.me().migrating.contains_key(&slot) || view.me().importing.contains_key(&slot) {
        return Err(Reply::err(format!(
            "hash slot {slot} is migrating or importing: finish that first (CLUSTER SETSLOT {slot} STABLE)"
        )));
    }
    let addr = format!("{}:{}", node.ip, node.port);
    let Some(fence) = cluster.slot_moves.begin(slot) else {
        return Err(Reply::err("the slot is already being moved"));
    };
    let shard = shard_of_slot(slot, server.shards.len());
    let underway = Underway {
        watches: server.shards.shard(shard).watches.clone(),
        cluster: cluster.clone(),
        slot,
    };
    underway.watches.watch_slot(slot);
    let moved = copy_and_hand_over(server, cluster, slot, target, &addr, &fence).await;
    drop(underway);
    moved?;
    // The slot is the target's now: this copy is unreachable, and goes.
    drop_slot(server, shard, slot).await
}

/// Steps 1 to 4 of a move: the copy, the catch-up, the fence, the hand-over.
async fn copy_and_hand_over(
    server: &Arc<Server>,
    cluster: &Arc<Cluster>,
    slot: u16,
    target: &str,
    addr: &str,
    fence: &Arc<AtomicBool>,
) -> Result<(), Reply> {
    let shard = shard_of_slot(slot, server.shards.len());
    let mut peer = Target::connect(addr, WAIT).await?;
    let password = server.runtime.read().requirepass().to_string();
    if !password.is_empty() {
        peer.call(&[b"AUTH", password.as_bytes()]).await?;
    }
    let s = slot.to_string();
    let myid = cluster.myid();
    peer.call(&[
        b"CLUSTER",
        b"IMPORTROWS",
        s.as_bytes(),
        b"BEGIN",
        myid.as_bytes(),
    ])
    .await?;
    let copied = async {
        // Every commit after this step is recorded by the slot watch, and
        // every one before it is in the snapshot taken next.
        drain(server, shard, slot, None).await?;
        send(server, &mut peer, shard, slot, None).await?;
        let mut written = drain(server, shard, slot, None).await?;
        for _ in 0..ROUNDS {
            if written.len() <= FEW {
                break;
            }
            send(server, &mut peer, shard, slot, Some(written)).await?;
            written = drain(server, shard, slot, None).await?;
        }
        // Fenced: what is written now is all there is left.
        written.extend(drain(server, shard, slot, Some(fence)).await?);
        // Commands routed before the fence that are not plain writes
        // (EXEC, scripts) may still commit: rounds until none does.
        for _ in 0..10 {
            if written.is_empty() {
                break;
            }
            send(server, &mut peer, shard, slot, Some(written)).await?;
            written = drain(server, shard, slot, None).await?;
        }
        if !written.is_empty() {
            return Err(Reply::err(
                "writes to the slot kept committing after its fence went up",
            ));
        }
        peer.call(&[b"CLUSTER", b"IMPORTROWS", s.as_bytes(), b"READY"])
            .await?;
        Ok(())
    }
    .await;
    let handed = match copied {
        Ok(()) => hand_over(cluster, slot, target).await,
        Err(e) => Err(Failed::Here(e)),
    };
    match handed {
        Ok(()) => {}
        // Nothing changed hands: the target's copy goes.
        Err(Failed::Here(e)) => {
            let _ = peer
                .call(&[b"CLUSTER", b"IMPORTROWS", s.as_bytes(), b"ABORT"])
                .await;
            return Err(e);
        }
        // The store may or may not have taken the change: both copies
        // stay, so neither outcome loses the slot (a later move clears
        // the copy of the node that does not serve it).
        Err(Failed::Unknown(e)) => {
            return Err(Reply::err(format!(
                "the slot was copied but handing it over failed: {e}"
            )))
        }
    }
    // Nothing should commit here now; should a command routed long before
    // the fence still do so, say so rather than stay silent.
    if let Ok(late) = drain(server, shard, slot, None).await {
        if !late.is_empty() {
            tracing::warn!(
                slot,
                keys = late.len(),
                "CLUSTER MOVESLOT: writes committed after the hand-over stay behind"
            );
        }
    }
    // Waits until the target serves the slot. The slot is the target's
    // whatever it answers: its etcd watch catches up on its own.
    if let Err(e) = peer
        .call(&[b"CLUSTER", b"IMPORTROWS", s.as_bytes(), b"DONE"])
        .await
    {
        tracing::warn!(slot, error = ?e, "CLUSTER MOVESLOT: the target did not confirm it serves the slot");
    }
    Ok(())
}

/// Why a move failed before the slot was handed over.
enum Failed {
    /// The slot is still only this node's.
    Here(Reply),
    /// Whether the topology store took the hand-over is not known.
    Unknown(String),
}

/// Gives `slot` to `target` in the topology: one change, which also gives
/// the target a new config epoch so its claim wins, as SETSLOT NODE does
/// on an importing node.
async fn hand_over(cluster: &Arc<Cluster>, slot: u16, target: &str) -> Result<(), Failed> {
    let changed = cluster
        .change(|t, me| {
            if t.owner_in_group(me, slot).as_deref() != Some(me) {
                return Err(format!("I'm not the owner of hash slot {slot}"));
            }
            if !t.nodes.contains_key(target) {
                return Err(format!("I don't know about node {target}"));
            }
            me_mut(t, me).remove_slot(slot);
            for id in [me, target] {
                let n = me_mut(t, id);
                n.migrating.remove(&slot);
                n.importing.remove(&slot);
            }
            me_mut(t, target).add_slot(slot);
            bump_epoch(t, target);
            Ok(())
        })
        .await;
    match changed {
        Ok(()) => Ok(()),
        Err(ChangeError::Refused(e)) => Err(Failed::Here(Reply::err(e))),
        Err(ChangeError::Store(e)) => Err(Failed::Unknown(e)),
    }
}

/// On the shard's actor, between transactions: the keys written in the
/// slot since the last call (raising `fence` in the same step, if given).
/// Refuses if the database was flushed meanwhile: the copy sent is stale.
async fn drain(
    server: &Arc<Server>,
    shard: usize,
    slot: u16,
    fence: Option<&Arc<AtomicBool>>,
) -> Result<Vec<Vec<u8>>, Reply> {
    let watches = server.shards.shard(shard).watches.clone();
    let fence = fence.cloned();
    let log = on_actor(&server.shards, shard, move |_| {
        if let Some(f) = fence {
            f.store(true, Ordering::Release);
        }
        Ok(watches.drain_slot(slot))
    })
    .await?;
    if log.flushed {
        return Err(Reply::err("the database was flushed during the move"));
    }
    Ok(log.keys.into_iter().collect())
}

/// Sends the slot (`names` None) or those keys of it, read from a fresh
/// snapshot on a blocking thread, in frames, [`WINDOW`] of them in flight.
async fn send(
    server: &Arc<Server>,
    peer: &mut Target,
    shard: usize,
    slot: u16,
    names: Option<Vec<Vec<u8>>>,
) -> Result<(), Reply> {
    let snap = super::snapshot_of(&server.shards, shard).await?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(WINDOW);
    let reader = tokio::task::spawn_blocking(move || {
        let mut out = Framer::new(|frame| tx.blocking_send(frame).is_ok());
        match names {
            None => rows::read_slot(&snap, slot, &mut out),
            Some(names) => rows::read_keys(&snap, slot, &names, &mut out),
        }
    });
    let s = slot.to_string();
    let mut in_flight = 0;
    while let Some(frame) = rx.recv().await {
        peer.send(&[b"CLUSTER", b"IMPORTROWS", s.as_bytes(), b"ROWS", &frame])
            .await?;
        in_flight += 1;
        if in_flight == WINDOW {
            peer.read().await?;
            in_flight -= 1;
        }
    }
    for _ in 0..in_flight {
        peer.read().await?;
    }
    reader
        .await
        .map_err(|e| Reply::err(format!("reading the slot: {e}")))?
        .map_err(Reply::err)
}

/// CLUSTER IMPORTROWS <slot> BEGIN <source-id> | ROWS <frame> | READY |
/// DONE | ABORT: the target's side of a move.
pub fn importrows(server: Arc<Server>, cluster: Arc<Cluster>, a: Args) -> Action {
    let slot = match parse_slot(a.get(2)) {
        Ok(s) => s,
        Err(r) => return r.into(),
    };
    let step = String::from_utf8_lossy(a.get(3)).to_ascii_lowercase();
    let arity = if matches!(step.as_str(), "begin" | "rows") {
        5
    } else {
        4
    };
    if a.len() != arity {
        return Reply::err("wrong number of arguments for 'cluster|importrows' command").into();
    }
    let shard = shard_of_slot(slot, server.shards.len());
    match step.as_str() {
        "begin" => {
            let source = String::from_utf8_lossy(a.get(4)).into_owned();
            Action::Job(Box::pin(async move {
                let view = cluster.view();
                if view.serves(slot) {
                    return Reply::err(format!("I'm already the owner of hash slot {slot}"));
                }
                if view.me().importing.contains_key(&slot) {
                    return Reply::err(format!("hash slot {slot} is importing through MIGRATE"));
                }
                match clear(&server, &cluster, shard, slot).await {
                    Ok(()) => {
                        cluster.imports.lock().insert(slot, Import::new(source));
                        Reply::Ok
                    }
                    Err(r) => r,
                }
            }))
        }
        "rows" => {
            let frame: Bytes = a.all()[4].clone();
            Action::Write {
                shard,
                f: Box::new(move |w| {
                    let mut imports = cluster.imports.lock();
                    let Some(import) = imports.get_mut(&slot) else {
                        return Ok(no_import(slot));
                    };
                    Ok(match import.apply(w, slot, &frame)? {
                        Ok(()) => Reply::Ok,
                        Err(why) => Reply::err(format!("corrupt slot rows: {why}")),
                    })
                }),
            }
        }
        "ready" => Action::Write {
            shard,
            f: Box::new(move |_| {
                Ok(match cluster.imports.lock().get(&slot) {
                    None => no_import(slot),
                    Some(i) if i.in_key() => Reply::err("a key of the slot arrived in part"),
                    Some(_) => Reply::Ok,
                })
            }),
        },
        "done" => Action::Job(Box::pin(async move {
            cluster.imports.lock().remove(&slot);
            // Answer once this node serves the slot, so the source's
            // clients find it here (bounded: the change is in etcd).
            for _ in 0..400 {
                if cluster.view().serves(slot) {
                    return Reply::Ok;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Reply::err(format!(
                "hash slot {slot} was handed over but is not served here yet"
            ))
        })),
        "abort" => Action::Job(Box::pin(async move {
            match clear(&server, &cluster, shard, slot).await {
                Ok(()) => Reply::Ok,
                Err(r) => r,
            }
        })),
        _ => Reply::err("Invalid CLUSTER IMPORTROWS step. Try BEGIN, ROWS, READY, DONE or ABORT")
            .into(),
    }
}

fn no_import(slot: u16) -> Reply {
    Reply::err(format!("no import of hash slot {slot} is under way"))
}

/// Ends any import of `slot` and deletes every key of it held here (a
/// slot this node does not serve holds only what an import left).
async fn clear(
    server: &Arc<Server>,
    cluster: &Arc<Cluster>,
    shard: usize,
    slot: u16,
) -> Result<(), Reply> {
    let cluster = cluster.clone();
    on_actor(&server.shards, shard, move |w| {
        if let Some(mut import) = cluster.imports.lock().remove(&slot) {
            import.abandon(w, slot)?;
        }
        Ok(())
    })
    .await?;
    drop_slot(server, shard, slot).await
}

/// Deletes every key of `slot` held here, [`DROP_SLICE`] keys per
/// transaction so that other clients of the shard go on meanwhile.
async fn drop_slot(server: &Arc<Server>, shard: usize, slot: u16) -> Result<(), Reply> {
    while on_actor(&server.shards, shard, move |w| {
        rows::drop_keys(w, slot, DROP_SLICE)
    })
    .await?
        > 0
    {}
    Ok(())
}

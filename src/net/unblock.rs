//! CLIENT UNBLOCK: another client ends a blocked command early, as if it
//! had timed out or with an error.
//!
//! A blocked command (a blocking pop, a blocking stream read, WAIT) takes
//! an [`Unblocker`] when it starts: that leaves a sender in the client's
//! [`ClientEntry`], which CLIENT UNBLOCK takes and fires. The command's own
//! wait then ends the way its timeout would, so a pop that a shard served
//! at the same moment still delivers what it popped.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{oneshot, Notify};

use crate::protocol::Reply;
use crate::server::ClientEntry;

/// How the wait ends early: CLIENT UNBLOCK's two ways, or a redirection
/// when the slot of the keys it waits on is no longer served here.
#[derive(Debug, Clone, PartialEq)]
pub enum Unblock {
    /// As if the command's timeout had passed (the default).
    Timeout,
    /// With Redis's `-UNBLOCKED` error.
    Error,
    /// With this reply (`-MOVED`, `-CLUSTERDOWN`), as Redis Cluster ends
    /// a blocked client's wait once its slot has moved away.
    Redirect(Reply),
}

impl Unblock {
    /// The reply of a wait ended this way: `timed_out` (the command's own
    /// timeout reply) or the error.
    pub fn reply(self, timed_out: Reply) -> Reply {
        match self {
            Unblock::Timeout => timed_out,
            Unblock::Error => Reply::Error("UNBLOCKED client unblocked via CLIENT UNBLOCK".into()),
            Unblock::Redirect(r) => r,
        }
    }
}

/// What a client blocked in a command leaves in its [`ClientEntry`]: how
/// to end the wait, and the slot of the keys it waits on, if any.
#[derive(Debug)]
pub struct Blocked {
    tx: oneshot::Sender<Unblock>,
    slot: Option<u16>,
}

/// The blocked command's end of CLIENT UNBLOCK; dropping it (the command
/// ended) makes CLIENT UNBLOCK answer 0 again.
pub struct Unblocker {
    rx: oneshot::Receiver<Unblock>,
    entry: Arc<ClientEntry>,
}

impl Unblocker {
    /// Lets CLIENT UNBLOCK reach the command `entry`'s client is about
    /// to block in.
    pub fn new(entry: &Arc<ClientEntry>) -> Unblocker {
        Unblocker::waiting_on(entry, &[])
    }

    /// Like [`Unblocker::new`], for a command waiting on `keys` (all of one
    /// slot in cluster mode): [`redirect_unserved`] ends it if their slot
    /// moves away.
    pub fn waiting_on(entry: &Arc<ClientEntry>, keys: &[bytes::Bytes]) -> Unblocker {
        let (tx, rx) = oneshot::channel();
        let slot = keys.first().map(|k| crate::cluster::key_slot(k));
        *entry.unblock.lock() = Some(Blocked { tx, slot });
        Unblocker {
            rx,
            entry: entry.clone(),
        }
    }

    /// Resolves when CLIENT UNBLOCK targets this client, with how.
    pub async fn requested(&mut self) -> Unblock {
        match (&mut self.rx).await {
            Ok(how) => how,
            // Only dropping this Unblocker drops the sender's slot; a
            // newer command's Unblocker may have replaced it: never fire.
            Err(_) => std::future::pending().await,
        }
    }

    /// Waits for `notify` (`None`: woken, try again), until `deadline`
    /// (`None`: no timeout), or until CLIENT UNBLOCK: how the wait ended,
    /// a timeout being the same as `UNBLOCK ... TIMEOUT`. A deadline
    /// already past times out at once.
    pub async fn wait(&mut self, notify: &Notify, deadline: Option<Instant>) -> Option<Unblock> {
        let woken = notify.notified();
        let timeout = async {
            match deadline {
                Some(d) if d <= Instant::now() => {}
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // A pending notification wins over the timeout, as it would
            // have in `tokio::time::timeout`.
            biased;
            _ = woken => None,
            how = self.requested() => Some(how),
            _ = timeout => Some(Unblock::Timeout),
        }
    }
}

impl Drop for Unblocker {
    fn drop(&mut self) {
        self.entry.unblock.lock().take();
    }
}

/// CLIENT UNBLOCK's side: ends `target`'s blocked command; false when it is
/// not blocked in one (a client held by CLIENT PAUSE is not: Redis 7.2
/// answers 0 there, where 7.0.15 crashes).
pub fn unblock(target: &ClientEntry, how: Unblock) -> bool {
    match target.unblock.lock().take() {
        Some(b) => b.tx.send(how).is_ok(),
        None => false,
    }
}

/// Cluster mode, after a new topology: ends the wait of every client
/// blocked on keys for which `unserved` gives an error (a slot this node
/// no longer serves, a cluster that is down), with that error (Redis's
/// clusterRedirectBlockedClientIfNeeded).
pub fn redirect_unserved(
    clients: impl Iterator<Item = Arc<ClientEntry>>,
    unserved: impl Fn(u16) -> Option<Reply>,
) {
    for c in clients {
        let mut slot = c.unblock.lock();
        let Some(reply) = slot.as_ref().and_then(|b| b.slot).and_then(&unserved) else {
            continue;
        };
        if let Some(b) = slot.take() {
            let _ = b.tx.send(Unblock::Redirect(reply));
        }
    }
}

/// Ends the wait of every client blocked in a command (on keys, or in
/// WAIT) with `reply`, and closes each once that reply is written: a
/// server turning replica unblocks them all, as Redis's
/// disconnectAllBlockedClients does (its clients close after the reply,
/// running nothing they had sent after the blocked command).
pub fn end_all(clients: impl Iterator<Item = Arc<ClientEntry>>, reply: &Reply) {
    for c in clients {
        if let Some(b) = c.unblock.lock().take() {
            // Set before the wait ends, so its connection sees it once
            // the command is done.
            c.killed.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = b.tx.send(Unblock::Redirect(reply.clone()));
        }
    }
}

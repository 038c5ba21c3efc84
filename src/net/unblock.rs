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

/// How CLIENT UNBLOCK ends the wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unblock {
    /// As if the command's timeout had passed (the default).
    Timeout,
    /// With Redis's `-UNBLOCKED` error.
    Error,
}

impl Unblock {
    /// The reply of a wait ended this way: `timed_out` (the command's own
    /// timeout reply) or Redis's error.
    pub fn reply(self, timed_out: Reply) -> Reply {
        match self {
            Unblock::Timeout => timed_out,
            Unblock::Error => Reply::Error("UNBLOCKED client unblocked via CLIENT UNBLOCK".into()),
        }
    }
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
        let (tx, rx) = oneshot::channel();
        *entry.unblock.lock() = Some(tx);
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
        Some(tx) => tx.send(how).is_ok(),
        None => false,
    }
}

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
}

/// How a blocked command's wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woke {
    /// The keys' notification came: try again.
    Notified,
    /// The command's timeout passed.
    TimedOut,
    /// CLIENT UNBLOCK ended the wait.
    Unblocked(Unblock),
}

impl Unblocker {
    /// Waits for `notify`, until `deadline` (`None`: no timeout), or until
    /// CLIENT UNBLOCK. A deadline already past times out at once.
    pub async fn wait(&mut self, notify: &Notify, deadline: Option<Instant>) -> Woke {
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
            _ = woken => Woke::Notified,
            how = self.requested() => Woke::Unblocked(how),
            _ = timeout => Woke::TimedOut,
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

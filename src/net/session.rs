//! Per-client state and the vocabulary handlers use to say what a command
//! needs: an immediate reply, a read on one shard's snapshot, a write through
//! one shard's actor, or an async job (multi-shard or server-wide).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::protocol::Reply;
use crate::server::{ClientEntry, Server};
use crate::shard::WriteFn;
use crate::storage::{KvRead, StoreError};

/// A read: runs on a snapshot of one shard (or in its actor when the client
/// has writes in flight there, so it sees them).
pub type ReadFn = Box<dyn FnOnce(&dyn KvRead) -> Result<Reply, StoreError> + Send>;

/// An async job's future.
pub type Job = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// What a command handler asks the connection to do.
pub enum Action {
    /// Reply now.
    Reply(Reply),
    /// Read on one shard.
    Read {
        /// The shard.
        shard: usize,
        /// The read.
        f: ReadFn,
    },
    /// Write through one shard's actor.
    Write {
        /// The shard.
        shard: usize,
        /// The write.
        f: WriteFn,
    },
    /// Run after every earlier reply of this client has arrived.
    Job(Job),
    /// Like `Job`, but it may wait indefinitely (a blocked client): the
    /// connection abandons it if the client disconnects or is killed.
    Block(Job),
    /// A multi-shard command already queued with the coordinator, which
    /// runs commands in queue order: the connection need not wait for it
    /// before sending the next coordinated command.
    Coordinated(tokio::sync::oneshot::Receiver<Reply>),
    /// No reply at all (CLIENT REPLY OFF|SKIP).
    Silent,
    /// Reply (if any), then close the connection.
    Close(Option<Reply>),
}

impl From<Reply> for Action {
    fn from(r: Reply) -> Action {
        Action::Reply(r)
    }
}

/// CLIENT REPLY mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyMode {
    /// Normal.
    On,
    /// No replies at all.
    Off,
    /// Skip the next command's reply.
    Skip,
}

/// The state of one client connection.
pub struct Session {
    /// The server.
    pub server: Arc<Server>,
    /// This client's registry entry.
    pub entry: Arc<ClientEntry>,
    /// Selected database.
    pub db: u8,
    /// Whether the client switched to RESP3 with HELLO 3.
    pub resp3: bool,
    /// Whether AUTH succeeded (or no password is set).
    pub authenticated: bool,
    /// CLIENT REPLY mode.
    pub reply_mode: ReplyMode,
}

impl Session {
    /// A new session for a registered client.
    pub fn new(server: Arc<Server>, entry: Arc<ClientEntry>) -> Session {
        let authenticated = server.runtime.read().requirepass.is_empty();
        Session {
            server,
            entry,
            db: 0,
            resp3: false,
            authenticated,
            reply_mode: ReplyMode::On,
        }
    }

    /// The shard owning a key.
    pub fn shard_of(&self, key: &[u8]) -> usize {
        self.server.shards.shard_of_key(key)
    }
}

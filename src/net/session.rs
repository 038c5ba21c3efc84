//! Per-client state and the vocabulary handlers use to say what a command
//! needs: an immediate reply, a read on one shard's snapshot, a write through
//! one shard's actor, or an async job (multi-shard or server-wide).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::protocol::Reply;
use crate::server::{ClientEntry, Server};
use crate::shard::coordinator::Plan;
use crate::shard::WriteFn;
use crate::storage::{KvRead, StoreError};

/// A read: runs on a snapshot of one shard (or in its actor when the client
/// has writes in flight there, so it sees them), given the server it runs
/// for. Handed the server rather than each holding a reference of its own:
/// every read's clone and drop of that one count, which every connection
/// thread writes, was ~3% of the server's CPU under GET at pipeline 16.
pub type ReadFn = Box<dyn FnOnce(&dyn KvRead, &Server) -> Result<Reply, StoreError> + Send>;

/// An async job's future.
pub type Job = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// A read of several shards at once: one reader per shard of its `ids`, in
/// that order, all from one consistent point.
pub type ReadManyFn = Box<dyn FnOnce(&[&dyn KvRead]) -> Reply + Send>;

/// The shard of a write that may run on any shard: it touches no key and
/// only needs a transaction to commit with (PUBLISH inside EXEC or a
/// script, whose message goes out when the unit commits). Only EXEC's and
/// scripts' executors accept it; they run it on a shard the unit uses.
pub const ANY_SHARD: usize = usize::MAX;

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
    /// Read several shards from one consistent view.
    ReadMany {
        /// The shards, ascending, without duplicates.
        ids: Vec<usize>,
        /// The read.
        f: ReadManyFn,
    },
    /// Run after every earlier reply of this client has arrived. Never a
    /// read or write of keys: those are the other variants, which EXEC and
    /// scripts can run inside their own atomic unit.
    Job(Job),
    /// Like `Job`, but it may wait indefinitely (a blocked client): the
    /// connection abandons it if the client disconnects or is killed.
    Block(Job),
    /// A multi-shard command for the coordinator, which runs commands in
    /// queue order: the connection need not wait for it before sending the
    /// next coordinated command.
    Plan {
        /// The shards it locks.
        ids: Vec<usize>,
        /// Whether it sends all its steps when called (see
        /// `shard::coordinator`).
        blind: bool,
        /// Its body.
        plan: Plan,
    },
    /// A script run inside one shard (its declared keys are there). If it
    /// turns out to touch another shard, it takes its changes back, sets
    /// `fell_back`, and `slow` (a plan holding every shard) runs it
    /// instead.
    Script {
        /// The shard of its declared keys.
        shard: usize,
        /// The script, run in that shard's batch.
        f: WriteFn,
        /// Set when the script had to give up on running in the shard.
        fell_back: Arc<std::sync::atomic::AtomicBool>,
        /// Builds the same script as a plan holding every shard; called
        /// only when the script falls back (most never do), rather than
        /// built for every call.
        slow: SlowScript,
    },
    /// No reply at all (CLIENT REPLY OFF|SKIP).
    Silent,
    /// Reply (if any), then close the connection.
    Close(Option<Reply>),
}

/// See [`Action::Script`].
pub type SlowScript = Box<dyn FnOnce() -> Action + Send>;

impl From<Reply> for Action {
    fn from(r: Reply) -> Action {
        Action::Reply(r)
    }
}

impl Action {
    /// The action as an op on the one shard it reads or writes (a read runs
    /// as well in a write transaction), or the action itself when it is not
    /// that: an immediate reply, several shards, a job.
    pub fn into_shard_op(self, server: &Arc<Server>) -> Result<(usize, WriteFn), Action> {
        match self {
            Action::Write { shard, f } => Ok((shard, f)),
            Action::Read { shard, f } => Ok((shard, read_in_write(f, server.clone()))),
            Action::ReadMany { ids, f } if ids.len() == 1 => {
                let f: ReadFn = Box::new(move |r, _| Ok(f(&[r])));
                Ok((ids[0], read_in_write(f, server.clone())))
            }
            other => Err(other),
        }
    }

    /// The same action with `g` applied to its reply (a blocking command
    /// inside a transaction runs its non-blocking attempt and shapes the
    /// reply as the blocking form would).
    pub fn map(self, g: fn(Reply) -> Reply) -> Action {
        match self {
            Action::Reply(r) => Action::Reply(g(r)),
            Action::Read { shard, f } => Action::Read {
                shard,
                f: Box::new(move |r, s| f(r, s).map(g)),
            },
            Action::Write { shard, f } => Action::Write {
                shard,
                f: Box::new(move |w| f(w).map(g)),
            },
            Action::ReadMany { ids, f } => Action::ReadMany {
                ids,
                f: Box::new(move |r| g(f(r))),
            },
            Action::Job(j) => Action::Job(Box::pin(async move { g(j.await) })),
            Action::Block(j) => Action::Block(Box::pin(async move { g(j.await) })),
            Action::Plan { ids, blind, plan } => Action::Plan {
                ids,
                blind,
                plan: Box::new(move |locked| {
                    let fut = plan(locked);
                    Box::pin(async move {
                        fut.await.map(|r| match r {
                            Ok(r) => Ok(g(r)),
                            Err(r) => Err(g(r)),
                        })
                    })
                }),
            },
            Action::Script {
                shard,
                f,
                fell_back,
                slow,
            } => Action::Script {
                shard,
                f: Box::new(move |w| f(w).map(g)),
                fell_back,
                slow: Box::new(move || slow().map(g)),
            },
            Action::Silent => Action::Silent,
            Action::Close(r) => Action::Close(r.map(g)),
        }
    }
}

/// A read run in its shard's write transaction (inside EXEC or a script,
/// or behind the connection's writes in flight): the keys it found expired
/// are deleted before its reply goes out, as Redis's lazy expiry does.
pub fn read_in_write(f: ReadFn, server: Arc<Server>) -> WriteFn {
    Box::new(move |w| {
        let r = f(&*w, &server)?;
        crate::storage::keyspace::expire_noted(w)?;
        Ok(r)
    })
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
    /// The ACL user commands are checked against.
    pub user: Arc<crate::acl::UserSlot>,
    /// CLIENT REPLY mode.
    pub reply_mode: ReplyMode,
    /// The transaction being queued (between MULTI and EXEC).
    pub multi: Option<Multi>,
    /// The keys this client WATCHes.
    pub watching: Watching,
    /// Set while EXEC or a script builds its commands: blocking commands
    /// then act as their non-blocking forms, as in Redis.
    pub in_exec: bool,
    /// Set in the session a script's commands run in (Redis's
    /// CLIENT_SCRIPT: SORT of a set BY a constant sorts it there).
    pub in_script: bool,
    /// In a script's session: the script's declared keys, when its caller
    /// tracks keys in the default mode. The first read-only command the
    /// script calls makes the caller track them, as in Redis (see
    /// `families::tracking::script_keys`).
    pub script_tracks: Option<Vec<bytes::Bytes>>,
    /// Whether CLIENT LIST was last told that keys are watched.
    pub shown_watching: bool,
    /// ASKING was sent: the next command (or the transaction) may use a
    /// slot this node is importing.
    pub asking: bool,
    /// What the client is subscribed to.
    pub subs: crate::pubsub::Subscriptions,
    /// Set by the connection before a command runs when none of the
    /// client's earlier commands is still waiting for its reply: the
    /// command may then take effect at once (PUBLISH need not wait).
    pub settled: bool,
    /// Bytes in the client's query buffer when the running command was
    /// taken from it (the command and whatever was sent after it):
    /// CLIENT LIST's `qbuf` for the calling client.
    pub qbuf: usize,
    /// The client is another cluster node's bus link (it named itself so):
    /// what it publishes is delivered here only.
    pub bus_link: bool,
    /// MONITOR mode: the client only watches commands go by.
    pub monitor: bool,
    /// Subscribers the client's PUBLISHes have fed during the current
    /// batch of commands: the connection wakes them when the batch ends,
    /// or before anything that may wait.
    pub wakes: crate::pubsub::Wakes,
    /// CLIENT TRACKING settings, while on.
    pub tracking: Option<Arc<crate::pubsub::tracking::Tracked>>,
    /// CLIENT CACHING YES|NO was sent: it covers the next command.
    pub caching: bool,
    /// In a script's session in cluster mode: the one slot its commands may
    /// use (its declared keys', else the first one used), unless the script
    /// may cross slots (`None`).
    pub script_slot: Option<Option<u16>>,
    /// The connection this replica's primary feeds its stream through:
    /// its commands are never refused as clients' writes to a read-only
    /// replica are, and its replies are dropped.
    pub from_primary: bool,
}

/// A transaction being queued.
#[derive(Default)]
pub struct Multi {
    /// The queued commands with their table rows.
    pub queue: Vec<(&'static crate::command::CommandSpec, crate::command::Args)>,
    /// A command was refused while queueing: EXEC will abort.
    pub failed: bool,
}

/// A client's watched keys and its CAS flag. Dropping it unregisters the
/// keys, so a client that goes away (or is killed) leaves nothing behind.
///
/// An empty one holds nothing allocated: EXEC, DISCARD and a script's
/// session each start a new one, most never watching anything.
#[derive(Default)]
pub struct Watching {
    /// Set by a write to any watched key; made by the first WATCH.
    dirty: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// (shard, watch) for every key, in WATCH order.
    pub keys: Vec<(usize, Arc<crate::shard::watch::Watch>)>,
    /// Where the keys are registered.
    pub shards: Option<Arc<crate::shard::ShardSet>>,
}

impl Watching {
    /// Whether EXEC must fail: a watched key was modified, or expired.
    pub fn failed(&self, now_ms: u64) -> bool {
        self.modified() || self.keys.iter().any(|(_, w)| w.expired_by(now_ms))
    }

    /// Whether a write has marked the CAS flag (expiry aside): EXEC
    /// will fail.
    pub fn modified(&self) -> bool {
        self.dirty
            .as_ref()
            .is_some_and(|d| d.load(std::sync::atomic::Ordering::Acquire))
    }

    /// The CAS flag a new watch of this client marks.
    pub fn flag(&mut self) -> Arc<std::sync::atomic::AtomicBool> {
        self.dirty.get_or_insert_with(Default::default).clone()
    }

    /// The CAS flag, while some key is watched (CLIENT LIST's `d`).
    pub fn shown_flag(&self) -> Option<Arc<std::sync::atomic::AtomicBool>> {
        self.dirty.clone().filter(|_| !self.keys.is_empty())
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        if let Some(shards) = &self.shards {
            for (shard, w) in &self.keys {
                w.cancel();
                shards.shard(*shard).watches.remove(w);
            }
        }
    }
}

impl Session {
    /// A new session for a registered client.
    pub fn new(server: Arc<Server>, entry: Arc<ClientEntry>) -> Session {
        let subs = crate::pubsub::Subscriptions::new(server.pubsub.clone(), entry.clone());
        let user = server.acl.default_user();
        let authenticated = server.acl.default_is_open();
        Session::with_subs(server, entry, subs, user, authenticated)
    }

    fn with_subs(
        server: Arc<Server>,
        entry: Arc<ClientEntry>,
        subs: crate::pubsub::Subscriptions,
        user: Arc<crate::acl::UserSlot>,
        authenticated: bool,
    ) -> Session {
        Session {
            user,
            subs,
            settled: false,
            qbuf: 0,
            bus_link: false,
            monitor: false,
            wakes: crate::pubsub::Wakes::of(entry.id),
            tracking: None,
            caching: false,
            server,
            entry,
            db: 0,
            resp3: false,
            authenticated,
            reply_mode: ReplyMode::On,
            multi: None,
            watching: Watching::default(),
            in_exec: false,
            in_script: false,
            script_tracks: None,
            shown_watching: false,
            asking: false,
            script_slot: None,
            from_primary: false,
        }
    }

    /// The session a script's commands run in: the caller's client and
    /// database, already authenticated, blocking commands not blocking.
    pub fn for_script(server: Arc<Server>, entry: Arc<ClientEntry>, db: u8) -> Session {
        // The caller's subscriptions stay when the script's session ends.
        let subs = crate::pubsub::Subscriptions::borrowed(server.pubsub.clone(), entry.clone());
        // Made for every script run: the default user is looked up only
        // for a client that has not authenticated as another.
        let user = entry.info.lock().user.clone();
        let user = user.unwrap_or_else(|| server.acl.default_user());
        let mut s = Session::with_subs(server, entry, subs, user, true);
        s.db = db;
        s.in_exec = true;
        s.in_script = true;
        s
    }

    /// The shard owning a key.
    pub fn shard_of(&self, key: &[u8]) -> usize {
        self.server.shards.shard_of_key(key)
    }

    /// The shard owning a key, and the key's slot: a single-key command
    /// hands the slot on to its `Key` rather than hash the name again.
    pub fn shard_and_slot(&self, key: &[u8]) -> (usize, u16) {
        self.server.shards.shard_and_slot(key)
    }
}

//! cairn as a replica of a Redis primary (REPLICAOF / SLAVEOF).
//!
//! A replica keeps a link to its primary (`link.rs`): it connects and
//! shakes hands as a Redis 7.0 replica does, takes a full copy (the
//! primary's RDB, loaded into the shards after they are emptied) or
//! continues where it left off (PSYNC's `+CONTINUE`), then applies the
//! primary's stream of commands through an ordinary connection whose
//! replies go nowhere: the same parsing, routing, group commit and
//! keyspace events as any client's writes. Clients of a replica may only
//! read (READONLY, unless `replica-read-only no`).
//!
//! The link's state is what ROLE and INFO replication report. Everything
//! here is in memory, as in Redis: after a restart cairn is a primary again
//! unless `replicaof` is set in its configuration.

pub mod link;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::server::{ClientEntry, Server};

/// Where the link to the primary stands (ROLE's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Waiting to connect (after REPLICAOF, or after the link broke).
    Connect,
    /// The TCP connection is being made.
    Connecting,
    /// PING, AUTH, REPLCONF and PSYNC are being exchanged.
    Handshake,
    /// The primary's RDB is being received and loaded.
    Sync,
    /// The primary's commands are being applied.
    Connected,
}

impl LinkState {
    /// ROLE's name for it.
    pub fn name(self) -> &'static str {
        match self {
            LinkState::Connect => "connect",
            LinkState::Connecting => "connecting",
            LinkState::Handshake => "handshake",
            LinkState::Sync => "sync",
            LinkState::Connected => "connected",
        }
    }
}

/// The primary this server replicates, and its link.
struct Primary {
    host: String,
    port: u16,
    state: LinkState,
    /// Stops the link's task (REPLICAOF elsewhere, or NO ONE).
    cancel: tokio_util::sync::CancellationToken,
    /// The connection the primary's stream is applied through, while up.
    master: Option<Arc<ClientEntry>>,
    /// Since when the link has been down, if it was ever up.
    down_since: Option<Instant>,
}

/// A full copy in progress (INFO's `master_sync_*`).
#[derive(Debug, Default)]
pub struct SyncProgress {
    /// Bytes the primary announced (-1: an EOF-marked stream, size unknown).
    pub total: AtomicI64,
    /// Bytes received so far.
    pub read: AtomicU64,
    /// When the last bytes came (Unix seconds).
    pub last_io: AtomicU64,
}

/// The replication state of the server (see the module doc).
pub struct Replication {
    primary: parking_lot::Mutex<Option<Primary>>,
    /// The shards' switches, whose `replica` says whether `primary` is
    /// set: every command asks, without the lock, and the shards leave
    /// expiry to the primary while it is.
    switches: Arc<crate::shard::Switches>,
    /// Bytes of the primary's stream applied: the replica's offset
    /// (ROLE's, INFO's `slave_repl_offset` and `master_repl_offset`).
    offset: AtomicI64,
    /// Set once a copy has been taken: a reconnection may then ask the
    /// primary to continue (PSYNC replid offset).
    synced: AtomicBool,
    /// The replication id this server had before it last stopped being a
    /// replica, and the first offset it no longer covers (INFO's
    /// `master_replid2`, `second_repl_offset`).
    previous: parking_lot::Mutex<Option<(String, i64)>>,
    /// When the primary last sent something (Unix seconds).
    last_io: AtomicU64,
    /// The database the stream last selected: a link that continues the
    /// stream starts there, as the primary sends SELECT only on a change.
    stream_db: std::sync::atomic::AtomicU8,
    /// The copy being taken.
    pub sync: SyncProgress,
    /// While a copy is being loaded: commands without the `loading` flag
    /// are refused with LOADING, as Redis refuses them.
    pub loading: AtomicBool,
}

/// A read-only replica's answer to a client's write.
pub const READONLY: &str = "READONLY You can't write against a read only replica.";

/// Unix time in seconds.
fn unix_secs() -> u64 {
    crate::shard::now_ms() / 1000
}

impl Replication {
    /// No primary yet; `switches` are the shards'.
    pub fn new(switches: Arc<crate::shard::Switches>) -> Replication {
        Replication {
            primary: Default::default(),
            switches,
            offset: Default::default(),
            synced: Default::default(),
            previous: Default::default(),
            last_io: Default::default(),
            stream_db: Default::default(),
            sync: Default::default(),
            loading: Default::default(),
        }
    }

    /// Whether this server is a replica (REPLICAOF host port is in force).
    pub fn is_replica(&self) -> bool {
        self.switches.replica.load(Ordering::Acquire)
    }

    /// Why a client's command is refused on a replica, if it is: READONLY
    /// for a write (`writes`: the command, or one EXEC would run, writes)
    /// while `replica-read-only`; MASTERDOWN for a command not flagged
    /// `stale` (`stale`: all of them are) while the link is down and
    /// `replica-serve-stale-data no`; LOADING (`loads`: all are allowed
    /// then) while a copy loads. Checked in Redis's order.
    pub fn refusal(
        &self,
        server: &Server,
        writes: impl FnOnce() -> bool,
        stale: impl FnOnce() -> bool,
        loads: impl FnOnce() -> bool,
    ) -> Option<crate::protocol::Reply> {
        use crate::protocol::Reply;
        if !self.is_replica() {
            return None;
        }
        let (read_only, serve_stale) = {
            let rt = server.runtime.read();
            (
                rt.get("replica-read-only") == "yes",
                rt.get("replica-serve-stale-data") == "yes",
            )
        };
        if read_only && writes() {
            return Some(Reply::Error(READONLY.into()));
        }
        if !serve_stale && self.is_stale() && !stale() {
            return Some(Reply::Error(
                "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
                    .into(),
            ));
        }
        if self.loading.load(Ordering::Acquire) && !loads() {
            return Some(Reply::Error(
                "LOADING Redis is loading the dataset in memory".into(),
            ));
        }
        None
    }

    /// Whether a script's write is refused: this is a read-only replica.
    pub fn refuses_writes(&self, server: &Server) -> bool {
        self.is_replica() && server.runtime.read().get("replica-read-only") == "yes"
    }

    /// Whether this server is a replica whose link is not up (for
    /// `replica-serve-stale-data no`).
    pub fn is_stale(&self) -> bool {
        self.primary
            .lock()
            .as_ref()
            .is_some_and(|p| p.state != LinkState::Connected)
    }

    /// The offset of the primary's stream applied so far (the copy's
    /// offset plus the stream's bytes since; 0 before any copy).
    pub fn offset(&self) -> i64 {
        self.offset.load(Ordering::Acquire)
    }

    /// Moves the offset on by `bytes` of the stream applied, which left
    /// database `db` selected.
    pub fn advance(&self, bytes: u64, db: u8) {
        self.offset.fetch_add(bytes as i64, Ordering::AcqRel);
        self.stream_db.store(db, Ordering::Relaxed);
    }

    /// The database a continued stream starts in.
    pub fn stream_db(&self) -> u8 {
        self.stream_db.load(Ordering::Relaxed)
    }

    /// Notes that the primary sent something now (INFO's
    /// `master_last_io_seconds_ago`): once a read from the link, not once
    /// a command, which would read the clock for every command.
    pub fn touch(&self) {
        self.last_io.store(unix_secs(), Ordering::Relaxed);
    }

    /// Sets the link's state, if `cancel` is still the link in force (a
    /// link replaced by REPLICAOF keeps quiet).
    fn set_state(&self, cancel: &tokio_util::sync::CancellationToken, state: LinkState) {
        let mut p = self.primary.lock();
        let Some(p) = p.as_mut().filter(|p| p.cancel == *cancel) else {
            return;
        };
        if p.state == LinkState::Connected && state != LinkState::Connected {
            p.down_since = Some(Instant::now());
        }
        if state != LinkState::Connected {
            p.master = None;
        }
        p.state = state;
    }

    /// Records the connection the stream is applied through, and puts the
    /// link up; false if the link was replaced meanwhile.
    fn connected(
        &self,
        cancel: &tokio_util::sync::CancellationToken,
        entry: Arc<ClientEntry>,
    ) -> bool {
        let mut p = self.primary.lock();
        let Some(p) = p.as_mut().filter(|p| p.cancel == *cancel) else {
            return false;
        };
        p.master = Some(entry);
        p.state = LinkState::Connected;
        self.touch();
        true
    }

    /// Takes a copy's outcome: the primary's replication id and offset.
    fn copied(&self, server: &Server, replid: &str, offset: i64) {
        *server.replid.lock() = replid.to_string();
        self.stream_db.store(0, Ordering::Relaxed);
        self.offset.store(offset, Ordering::Release);
        self.synced.store(true, Ordering::Release);
    }

    /// What PSYNC asks for: the id and next offset to continue from, if a
    /// copy was ever taken (`? -1`, a full copy, otherwise).
    fn continue_from(&self, server: &Server) -> (String, i64) {
        if self.synced.load(Ordering::Acquire) {
            (server.replid.lock().clone(), self.offset() + 1)
        } else {
            ("?".into(), -1)
        }
    }

    /// The primary says the stream goes on under a new id (it was
    /// promoted, or its own primary changed).
    fn renamed(&self, server: &Server, replid: &str) {
        let mut id = server.replid.lock();
        *self.previous.lock() = Some((
            std::mem::replace(&mut *id, replid.into()),
            self.offset() + 1,
        ));
    }

    /// REPLICAOF host port: replicates `host:port` from now on, dropping
    /// any link to another primary. False when that is the primary already
    /// (Redis then leaves the link as it is).
    pub fn start(&self, server: &Arc<Server>, host: String, port: u16) -> bool {
        let mut p = self.primary.lock();
        if p.as_ref()
            .is_some_and(|p| p.host.eq_ignore_ascii_case(&host) && p.port == port)
        {
            return false;
        }
        if let Some(old) = p.take() {
            stop(old);
        }
        // Whatever blocked clients wait for may now never come from here.
        crate::net::unblock::end_all(
            server.clients.iter().map(|e| e.value().clone()),
            &crate::protocol::Reply::Error(
                "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"
                    .into(),
            ),
        );
        let cancel = tokio_util::sync::CancellationToken::new();
        *p = Some(Primary {
            host: host.clone(),
            port,
            state: LinkState::Connect,
            cancel: cancel.clone(),
            master: None,
            down_since: None,
        });
        self.switches.replica.store(true, Ordering::Release);
        drop(p);
        set_directive(server, &format!("{host} {port}"));
        tracing::info!("REPLICAOF {host}:{port} enabled");
        tokio::spawn(link::run(server.clone(), host, port, cancel));
        true
    }

    /// REPLICAOF NO ONE: a primary again, keeping the data. The stream's
    /// id becomes the secondary one, as a promoted Redis replica reports.
    pub fn stop(&self, server: &Server) {
        let Some(old) = self.primary.lock().take() else {
            return;
        };
        self.switches.replica.store(false, Ordering::Release);
        stop(old);
        set_directive(server, "");
        let offset = self.offset();
        let mut id = server.replid.lock();
        *self.previous.lock() = Some((
            std::mem::replace(&mut *id, crate::util::hex_id()),
            offset + 1,
        ));
        self.loading.store(false, Ordering::Release);
        tracing::info!("MASTER MODE enabled");
    }

    /// ROLE's reply.
    pub fn role(&self) -> crate::protocol::Reply {
        use crate::protocol::Reply;
        let p = self.primary.lock();
        match p.as_ref() {
            None => Reply::Array(vec![
                Reply::bulk("master"),
                Reply::Int(self.offset()),
                Reply::Array(Vec::new()),
            ]),
            Some(p) => Reply::Array(vec![
                Reply::bulk("slave"),
                Reply::bulk(p.host.clone().into_bytes()),
                Reply::Int(p.port as i64),
                Reply::bulk(p.state.name()),
                Reply::Int(if p.master.is_some() {
                    self.offset()
                } else {
                    -1
                }),
            ]),
        }
    }

    /// INFO replication's lines.
    pub fn info(&self, server: &Server, out: &mut String) {
        use std::fmt::Write;
        let rt = server.runtime.read();
        let yes = |name: &str| (rt.get(name) == "yes") as u8;
        out.push_str("# Replication\r\n");
        let now = unix_secs();
        if let Some(p) = self.primary.lock().as_ref() {
            let up = p.state == LinkState::Connected;
            let last_io = match p.master {
                Some(_) => now.saturating_sub(self.last_io.load(Ordering::Relaxed)) as i64,
                None => -1,
            };
            let offset = if self.synced.load(Ordering::Acquire) {
                self.offset()
            } else {
                0
            };
            let _ = write!(
                out,
                "role:slave\r\nmaster_host:{}\r\nmaster_port:{}\r\nmaster_link_status:{}\r\nmaster_last_io_seconds_ago:{last_io}\r\nmaster_sync_in_progress:{}\r\n",
                p.host,
                p.port,
                if up { "up" } else { "down" },
                (p.state == LinkState::Sync) as u8,
            );
            if p.state == LinkState::Sync {
                let total = self.sync.total.load(Ordering::Relaxed);
                let read = self.sync.read.load(Ordering::Relaxed) as i64;
                let perc = if total > 0 {
                    read as f64 / total as f64 * 100.0
                } else {
                    0.0
                };
                let _ = write!(
                    out,
                    "master_sync_total_bytes:{total}\r\nmaster_sync_read_bytes:{read}\r\nmaster_sync_left_bytes:{}\r\nmaster_sync_perc:{perc:.2}\r\nmaster_sync_last_io_seconds_ago:{}\r\n",
                    total - read,
                    now.saturating_sub(self.sync.last_io.load(Ordering::Relaxed)),
                );
            }
            let _ = write!(
                out,
                "slave_read_repl_offset:{offset}\r\nslave_repl_offset:{offset}\r\n"
            );
            if !up {
                let down = p.down_since.map_or(-1, |t| t.elapsed().as_secs() as i64);
                let _ = write!(out, "master_link_down_since_seconds:{down}\r\n");
            }
            let _ = write!(
                out,
                "slave_priority:{}\r\nslave_read_only:{}\r\nreplica_announced:{}\r\n",
                rt.int("replica-priority"),
                yes("replica-read-only"),
                yes("replica-announced"),
            );
        } else {
            out.push_str("role:master\r\n");
        }
        let _ = write!(out, "connected_slaves:0\r\n");
        if !self.is_replica() && server.replicas_required() {
            out.push_str("min_slaves_good_slaves:0\r\n");
        }
        let (id2, second) = self
            .previous
            .lock()
            .clone()
            .unwrap_or_else(|| ("0".repeat(40), -1));
        let offset = self.offset();
        // A replica keeps a backlog of the stream it applies once it has a
        // copy, as Redis's does (cairn keeps none: it never feeds replicas).
        let active = self.synced.load(Ordering::Acquire) as u8;
        let _ = write!(
            out,
            "master_failover_state:no-failover\r\nmaster_replid:{}\r\nmaster_replid2:{id2}\r\nmaster_repl_offset:{offset}\r\nsecond_repl_offset:{second}\r\nrepl_backlog_active:{active}\r\nrepl_backlog_size:{}\r\nrepl_backlog_first_byte_offset:{}\r\nrepl_backlog_histlen:0\r\n",
            server.replid.lock(),
            rt.size("repl-backlog-size"),
            if active == 1 { offset + 1 } else { 0 },
        );
    }
}

/// Keeps the `replicaof` directive (CONFIG GET, CONFIG REWRITE) what
/// REPLICAOF last made it, as Redis does: it is immutable to CONFIG SET
/// only.
fn set_directive(server: &Server, value: &str) {
    if let Err(e) = server.runtime.write().load("replicaof", value) {
        tracing::warn!("replicaof: {e}");
    }
}

/// Ends a link: its task stops, and the connection applying its stream is
/// closed.
fn stop(old: Primary) {
    old.cancel.cancel();
    if let Some(master) = old.master {
        master.close_soon();
    }
}

/// `replicaof <host> <port>` in the configuration: replicate from the
/// start, as Redis does (ignored in cluster mode, where Redis refuses to
/// start; cairn says why and stays a primary).
pub fn start_configured(server: &Arc<Server>) {
    let line = server.runtime.read().get("replicaof").to_string();
    let words: Vec<&str> = line.split_whitespace().collect();
    match words[..] {
        [] => {}
        [host, port] if server.cluster.is_none() => match port.parse::<u16>() {
            Ok(port) => {
                server.replication.start(server, host.to_string(), port);
            }
            Err(_) => tracing::error!("replicaof: invalid master port {port:?}"),
        },
        [_, _] => tracing::error!("replicaof directive not allowed in cluster mode"),
        _ => tracing::error!("replicaof: expected `<host> <port>`, got {line:?}"),
    }
}

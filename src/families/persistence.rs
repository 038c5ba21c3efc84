//! SAVE, BGSAVE and SYNC/PSYNC: a point-in-time snapshot of every shard
//! written as an RDB file Redis 7.0 loads (`<dir>/<dbfilename>`), or sent
//! to a client that asks for it the way a replica does (`redis-cli --rdb`).
//!
//! The snapshot is one consistent read view of all shards (taken like a
//! multi-shard read, between coordinated commits), so writers never wait
//! for a save: the file is written from the views on a blocking thread.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::command::args::{error, is, Args, SYNTAX};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::rdb::file::{self, SaveError, SaveStats};
use crate::server::Server;
use crate::storage::KvRead;

/// What INFO persistence reports about saves.
#[derive(Debug)]
pub struct SaveState {
    /// A BGSAVE is running.
    pub in_progress: AtomicBool,
    /// The last save succeeded.
    pub last_ok: AtomicBool,
    /// Seconds the last BGSAVE took (-1 before the first).
    pub last_secs: AtomicI64,
    /// When the running BGSAVE started (Unix ms, 0 = none).
    pub started_ms: AtomicU64,
    /// Changes counted at the last save (for changes since).
    pub ops_at_save: AtomicU64,
    /// Saves completed.
    pub saves: AtomicU64,
    /// When the last BGSAVE started (Unix seconds; 0 = none yet).
    pub last_try: AtomicU64,
}

impl Default for SaveState {
    fn default() -> Self {
        SaveState {
            in_progress: AtomicBool::new(false),
            last_ok: AtomicBool::new(true),
            last_secs: AtomicI64::new(-1),
            started_ms: AtomicU64::new(0),
            ops_at_save: AtomicU64::new(0),
            saves: AtomicU64::new(0),
            last_try: AtomicU64::new(0),
        }
    }
}

/// Changes every shard has committed so far: Redis's `dirty` counter,
/// near enough (see `WriteCtx::changes`).
pub fn write_ops(server: &Server) -> u64 {
    server
        .shards
        .shards()
        .iter()
        .map(|s| s.stats.changes.load(Ordering::Relaxed))
        .sum()
}

/// The file SAVE and BGSAVE write.
fn target_path(server: &Server) -> PathBuf {
    let name = server.runtime.read().get("dbfilename").to_string();
    server.config.dir.join(name)
}

/// Takes one consistent view of every shard and writes it to `w` on a
/// blocking thread.
async fn snapshot_into<W: std::io::Write + Send + 'static>(
    server: &Arc<Server>,
    w: W,
) -> Result<(SaveStats, W), SaveError> {
    let ids: Vec<usize> = (0..server.shards.len()).collect();
    let views = server.shards.snapshots(&ids).await?;
    let functions: Vec<Vec<u8>> = server
        .scripts
        .registry()
        .libraries()
        .into_iter()
        .map(|l| l.code.to_vec())
        .collect();
    let limits = server.encoding_limits();
    tokio::task::spawn_blocking(move || {
        let readers: Vec<&dyn KvRead> = views.iter().map(|v| v as &dyn KvRead).collect();
        let mut w = w;
        let stats = file::write_snapshot(&readers, &functions, &limits, &mut w)?;
        Ok((stats, w))
    })
    .await
    .map_err(|e| SaveError::Io(std::io::Error::other(e.to_string())))?
}

/// Writes the snapshot to a temporary file, syncs it and renames it over
/// the target, so a crash mid-save leaves the previous file whole.
async fn save_to_disk(server: &Arc<Server>) -> Result<SaveStats, SaveError> {
    // A temporary file of its own per save: SAVE, SHUTDOWN's save and a
    // BGSAVE may overlap here (in Redis a SAVE holds the whole server), and
    // each renames a whole snapshot over the target.
    static SAVES: AtomicU64 = AtomicU64::new(0);
    let n = SAVES.fetch_add(1, Ordering::Relaxed);
    let path = target_path(server);
    let tmp = server
        .config
        .dir
        .join(format!("temp-{}-{n}.rdb", std::process::id()));
    let f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
    let result = snapshot_into(server, f).await;
    let (stats, w) = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    let f = w.into_inner().map_err(|e| SaveError::Io(e.into_error()))?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok(stats)
}

/// Saves now (see [`save_to_disk`]) and records how it went, for INFO
/// persistence, LASTSAVE and the save points: what SAVE, BGSAVE and
/// SHUTDOWN's save share.
async fn save_recorded(server: &Arc<Server>) -> Result<SaveStats, SaveError> {
    let ops_before = write_ops(server);
    let result = save_to_disk(server).await;
    let st = &server.persistence;
    st.last_ok.store(result.is_ok(), Ordering::Relaxed);
    if result.is_ok() {
        st.ops_at_save.store(ops_before, Ordering::Relaxed);
        st.saves.fetch_add(1, Ordering::Relaxed);
        let now = crate::shard::now_ms() / 1000;
        server.last_save.store(now, Ordering::Relaxed);
    }
    result
}

/// SAVE
pub fn save(s: &mut Session, _a: Args) -> Action {
    if s.server.persistence.in_progress.load(Ordering::Relaxed) {
        return Reply::err("Background save already in progress").into();
    }
    let server = s.server.clone();
    Action::Job(Box::pin(async move {
        match save_recorded(&server).await {
            Ok(stats) => {
                tracing::info!(keys = stats.keys, bytes = stats.bytes, "DB saved on disk");
                Reply::Ok
            }
            Err(e) => {
                tracing::error!(error = %e, "SAVE failed");
                Reply::Error("ERR".into())
            }
        }
    }))
}

/// Runs a BGSAVE.
async fn background(server: Arc<Server>) {
    let st = &server.persistence;
    let started = Instant::now();
    let now_ms = crate::shard::now_ms();
    st.started_ms.store(now_ms, Ordering::Relaxed);
    st.last_try.store(now_ms / 1000, Ordering::Relaxed);
    match save_recorded(&server).await {
        Ok(stats) => tracing::info!(
            keys = stats.keys,
            bytes = stats.bytes,
            "Background saving terminated with success"
        ),
        Err(e) => tracing::error!(error = %e, "Background saving error"),
    }
    st.last_secs
        .store(started.elapsed().as_secs() as i64, Ordering::Relaxed);
    st.started_ms.store(0, Ordering::Relaxed);
    st.in_progress.store(false, Ordering::Release);
}

/// BGSAVE [SCHEDULE]
pub fn bgsave(s: &mut Session, a: Args) -> Action {
    // SCHEDULE waits out another kind of background job in Redis (an AOF
    // rewrite); cairn runs no other kind, so it changes nothing here, and
    // a save already running is an error with it too, as in Redis.
    match a.len() {
        1 => {}
        2 if is(a.get(1), "schedule") => {}
        _ => return error(SYNTAX).into(),
    }
    let st = &s.server.persistence;
    if st.in_progress.swap(true, Ordering::AcqRel) {
        return Reply::err("Background save already in progress").into();
    }
    tokio::spawn(background(s.server.clone()));
    // Inside a transaction Redis only schedules the save (its cron starts
    // it right after), and says so.
    let status = if s.in_exec {
        "Background saving scheduled"
    } else {
        "Background saving started"
    };
    Reply::Status(status.into()).into()
}

/// BGREWRITEAOF: Redis rewrites its append-only file as the shortest
/// one that rebuilds the data. cairn's equivalent is to move what each
/// shard's log holds into its tables now, which leaves the log empty: every
/// shard's write buffer goes to its background writer.
pub fn bgrewriteaof(s: &mut Session, _a: Args) -> Action {
    for sh in s.server.shards.shards() {
        if let Err(e) = sh.store().and_then(|st| st.freeze_now()) {
            tracing::error!(shard = sh.id, error = %e, "BGREWRITEAOF failed");
            return Reply::err(e).into();
        }
    }
    // As in Redis: "scheduled" while a BGSAVE runs or inside a transaction.
    let status = if s.in_exec || s.server.persistence.in_progress.load(Ordering::Relaxed) {
        "Background append only file rewriting scheduled"
    } else {
        "Background append only file rewriting started"
    };
    tracing::info!("{status}");
    Reply::Status(status.into()).into()
}

/// SYNC / PSYNC replid offset: the snapshot as a replica's full
/// resynchronisation receives it (`$<len>` then the RDB bytes), then the
/// connection closes: cairn serves the snapshot (for `redis-cli --rdb`
/// and the like) but does not stream commands to replicas.
pub fn sync(s: &mut Session, a: Args) -> Action {
    let server = s.server.clone();
    let psync = is(a.get(0), "psync");
    // Generating the file blocks this connection only (SYNC is not allowed
    // in MULTI or scripts), not the runtime's other tasks.
    let payload = tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current()
            .block_on(async { snapshot_into(&server, Vec::new()).await })
    });
    match payload {
        Ok((_, rdb)) => {
            let mut out = Vec::with_capacity(rdb.len() + 64);
            if psync {
                let replid = server.replid.lock().clone();
                out.extend_from_slice(format!("+FULLRESYNC {replid} 0\r\n").as_bytes());
            }
            out.extend_from_slice(format!("${}\r\n", rdb.len()).as_bytes());
            out.extend_from_slice(&rdb);
            Action::Close(Some(Reply::Encoded(out.into())))
        }
        Err(e) => {
            tracing::error!(error = %e, "SYNC snapshot failed");
            Action::Close(Some(Reply::err("failed to produce the snapshot")))
        }
    }
}

/// REPLCONF option value ...: accepted (what a replica or `redis-cli
/// --rdb` announces before SYNC). From this replica's primary, GETACK
/// asks for the offset applied so far, before the GETACK itself, as a
/// Redis replica answers it: `REPLCONF ACK <offset>`, sent as a push on
/// the link (its replies are otherwise dropped).
pub fn replconf(s: &mut Session, a: Args) -> Action {
    if a.len().is_multiple_of(2) {
        return error(SYNTAX).into();
    }
    if s.from_primary && is(a.get(1), "getack") {
        let offset = s.server.replication.offset();
        s.entry.mailbox.send(crate::replication::link::ack(offset));
    }
    Reply::Ok.into()
}

/// ROLE: a primary (cairn feeds no replicas), or a replica of its
/// primary with its link's state and offset.
pub fn role(s: &mut Session, _a: Args) -> Action {
    s.server.replication.role().into()
}

/// REPLICAOF (SLAVEOF) host port | NO ONE: replicate a Redis primary, or
/// stop and be a primary again, keeping the data (see `replication`).
pub fn replicaof(s: &mut Session, a: Args) -> Action {
    if s.server.cluster.is_some() {
        return Reply::err("REPLICAOF not allowed in cluster mode.").into();
    }
    let server = s.server.clone();
    if is(a.get(1), "no") && is(a.get(2), "one") {
        server.replication.stop(&server);
        return Reply::Ok.into();
    }
    let port = match crate::util::num::parse_i64(a.get(2)) {
        Some(p @ 0..=65535) => p as u16,
        _ => return Reply::err("Invalid master port").into(),
    };
    let host = String::from_utf8_lossy(a.get(1)).into_owned();
    if server.replication.start(&server, host, port) {
        Reply::Ok.into()
    } else {
        Reply::Simple("OK Already connected to specified master").into()
    }
}

/// WAIT numreplicas timeout: no replica ever acknowledges, so the answer
/// is 0, at once when none was asked for (or inside EXEC, where Redis
/// cannot block), otherwise after the timeout (0 = never, as in Redis).
pub fn wait(s: &mut Session, a: Args) -> Action {
    let wanted = match crate::command::args::int(a.get(1)) {
        Ok(n) => n,
        Err(r) => return r.into(),
    };
    let timeout = match crate::util::num::parse_i64(a.get(2)) {
        None => return Reply::err("timeout is not an integer or out of range").into(),
        Some(t) if t < 0 => return Reply::err("timeout is negative").into(),
        Some(t) => std::time::Duration::from_millis(t as u64),
    };
    if s.server.replication.is_replica() {
        return Reply::err("WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.").into();
    }
    if wanted <= 0 || s.in_exec {
        return Reply::Int(0).into();
    }
    let server = s.server.clone();
    let mut unblocker = crate::net::unblock::Unblocker::new(&s.entry);
    Action::Block(Box::pin(async move {
        let _held = crate::server::Held::new(&server.stats.held);
        // 0, or a deadline past what the clock can hold: wait for ever.
        let timeout = async {
            match tokio::time::Instant::now().checked_add(timeout) {
                Some(deadline) if !timeout.is_zero() => tokio::time::sleep_until(deadline).await,
                _ => std::future::pending::<()>().await,
            }
        };
        // No replica ever acknowledges: the wait ends by its timeout or
        // CLIENT UNBLOCK, with the count of replicas that did (none).
        tokio::select! {
            _ = timeout => Reply::Int(0),
            how = unblocker.requested() => how.reply(Reply::Int(0)),
        }
    }))
}

/// How long Redis waits after a failed BGSAVE before its save points may
/// start another (CONFIG_BGSAVE_RETRY_DELAY), in seconds.
const RETRY_DELAY_SECS: u64 = 5;

/// Save points (`save <seconds> <changes> ...`): as Redis's cron does, a
/// BGSAVE starts once, for some point, at least `changes` write ops were
/// applied since the last save and more than `seconds` have passed since
/// it; after a failed one, not before `RETRY_DELAY_SECS`. cairn's data is
/// on disk already: these snapshots are the `dump.rdb` a Redis user asks
/// for, to back up or to move data. Checked every 100 ms (Redis's `hz`).
pub fn start_save_points(server: &Arc<Server>) {
    let weak = Arc::downgrade(server);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
        loop {
            tick.tick().await;
            let Some(server) = weak.upgrade() else { return };
            if server.stopping.load(Ordering::Relaxed) {
                return;
            }
            let Some((secs, changes)) = due_save_point(&server) else {
                continue;
            };
            if !server.persistence.in_progress.swap(true, Ordering::AcqRel) {
                tracing::info!("{changes} changes in {secs} seconds. Saving...");
                tokio::spawn(background(server.clone()));
            }
        }
    });
}

/// Whether any save point is configured (`save` is not empty).
pub fn has_save_points(server: &Server) -> bool {
    !save_points(server).is_empty()
}

/// FLUSHALL's save (see `generic::flushall`). Redis kills a BGSAVE under
/// way first; here one still running holds the data from before the
/// flush, so it is let finish, or its file would replace this one.
pub async fn save_after_flushall(server: &Arc<Server>) {
    while server.persistence.in_progress.load(Ordering::Acquire) {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    match save_recorded(server).await {
        Ok(stats) => tracing::info!(keys = stats.keys, bytes = stats.bytes, "DB saved on disk"),
        Err(e) => tracing::warn!(error = %e, "FLUSHALL could not save the DB"),
    }
}

/// The configured save points, as (seconds, changes) pairs.
fn save_points(server: &Server) -> Vec<(u64, u64)> {
    let rt = server.runtime.read();
    let nums: Vec<u64> = rt
        .get("save")
        .split(' ')
        .filter_map(|n| n.parse().ok())
        .collect();
    nums.chunks_exact(2).map(|p| (p[0], p[1])).collect()
}

/// The first save point that is due now, if any.
fn due_save_point(server: &Server) -> Option<(u64, u64)> {
    let points = save_points(server);
    if points.is_empty() {
        return None;
    }
    let st = &server.persistence;
    let changes = write_ops(server).saturating_sub(st.ops_at_save.load(Ordering::Relaxed));
    let now = crate::shard::now_ms() / 1000;
    let since_save = now.saturating_sub(server.last_save.load(Ordering::Relaxed));
    let may_retry = st.last_ok.load(Ordering::Relaxed)
        || now.saturating_sub(st.last_try.load(Ordering::Relaxed)) > RETRY_DELAY_SECS;
    points
        .into_iter()
        .find(|&(secs, min_changes)| changes >= min_changes && since_save > secs && may_retry)
}

/// SHUTDOWN's save: with SAVE, or without NOSAVE when save points are
/// configured, Redis writes its RDB file before it exits (a BGSAVE then
/// running is replaced by it). True if the server may stop: nothing to
/// save, or saved.
pub async fn save_for_shutdown(server: &Arc<Server>, save: bool, nosave: bool) -> bool {
    if nosave || (!save && save_points(server).is_empty()) {
        return true;
    }
    tracing::info!("Saving the final RDB snapshot before exiting.");
    match save_recorded(server).await {
        Ok(stats) => {
            tracing::info!(keys = stats.keys, bytes = stats.bytes, "DB saved on disk");
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "Error trying to save the DB, can't exit.");
            false
        }
    }
}

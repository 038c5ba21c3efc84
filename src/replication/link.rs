//! The link to the primary: connect, shake hands, take a copy or continue,
//! then apply the stream (see the module doc of `replication`).
//!
//! The handshake is Redis 7.0's: PING, AUTH when `masterauth` is set,
//! REPLCONF listening-port / ip-address / capa eof psync2, then PSYNC with
//! the id and offset of the last copy (`? -1` before any). A full copy
//! arrives as `$<length>` or, from a diskless primary, as `$EOF:<mark>`
//! and bytes ending with the mark; it is written to a file in the data
//! directory, checked whole (every value, the checksum) before anything
//! is dropped, then loaded into the emptied shards with the primary's
//! functions. A link that breaks is made again a second later, asking to
//! continue.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::LinkState;
use crate::server::Server;

/// Why a try at the link failed (logged; the link is tried again).
type LinkError = String;

/// Runs the link to `host:port` until `cancel` (REPLICAOF elsewhere or NO
/// ONE): each time it breaks, it is made again after a second.
pub async fn run(server: Arc<Server>, host: String, port: u16, cancel: CancellationToken) {
    let repl = &server.replication;
    loop {
        let outcome = tokio::select! {
            _ = cancel.cancelled() => return,
            r = attempt(&server, &host, port, &cancel) => r,
        };
        if cancel.is_cancelled() {
            return;
        }
        match outcome {
            Ok(()) => tracing::warn!("Connection with master lost."),
            Err(e) => tracing::warn!("MASTER <-> REPLICA sync with {host}:{port}: {e}"),
        }
        repl.set_state(&cancel, LinkState::Connect);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Clears the LOADING refusal when a load ends, however it ends.
struct Loading<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// One try: connect, hand shake, copy or continue, then apply the stream
/// until the link breaks.
async fn attempt(
    server: &Arc<Server>,
    host: &str,
    port: u16,
    cancel: &CancellationToken,
) -> Result<(), LinkError> {
    let repl = &server.replication;
    repl.set_state(cancel, LinkState::Connecting);
    let timeout = Duration::from_secs(server.runtime.read().int("repl-timeout").max(1) as u64);
    let stream = tokio::time::timeout(timeout, TcpStream::connect((host, port)))
        .await
        .map_err(|_| "timeout connecting to the MASTER".to_string())?
        .map_err(|e| format!("Error condition on socket for SYNC: {e}"))?;
    let _ = stream.set_nodelay(true);
    repl.set_state(cancel, LinkState::Handshake);
    let mut link = Link {
        stream,
        buf: BytesMut::with_capacity(64 * 1024),
        timeout,
    };
    handshake(server, &mut link).await?;
    let (id, offset) = repl.continue_from(server);
    link.send(&["PSYNC", &id, &offset.to_string()]).await?;
    let reply = link.reply().await?;
    let mut session = crate::net::conn::primary_session(server, &link.stream);
    if let Some(rest) = reply.strip_prefix("+FULLRESYNC ") {
        let mut words = rest.split(' ');
        let (Some(id), Some(Ok(offset))) = (words.next(), words.next().map(str::parse::<i64>))
        else {
            return Err(format!("Bad FULLRESYNC reply: {reply}"));
        };
        tracing::info!("Full resync from master: {id}:{offset}");
        repl.set_state(cancel, LinkState::Sync);
        let file = receive(server, &mut link).await?;
        load(server, &session, &file.0).await?;
        repl.copied(server, id, offset);
        tracing::info!("MASTER <-> REPLICA sync: Finished with success");
    } else if let Some(rest) = reply.strip_prefix("+CONTINUE") {
        let new_id = rest.trim();
        if !new_id.is_empty() && *new_id != *server.replid.lock() {
            repl.renamed(server, new_id);
        }
        session.db = repl.stream_db();
        tracing::info!("Successful partial resynchronization with master.");
    } else {
        return Err(format!("Unexpected reply to PSYNC from master: {reply}"));
    }
    // The first acknowledgement puts this replica online: a diskless
    // primary sends its stream only after it (the end of its copy is
    // known to the replica alone).
    link.send(&["REPLCONF", "ACK", &repl.offset().to_string()])
        .await?;
    if !repl.connected(cancel, session.entry.clone()) {
        return Ok(());
    }
    let Link { stream, buf, .. } = link;
    let acks = tokio::spawn(acknowledge(server.clone(), session.entry.clone()));
    crate::net::conn::serve_primary(session, stream, buf).await;
    acks.abort();
    Ok(())
}

/// PING, AUTH, REPLCONF: what a Redis 7.0 replica says before PSYNC.
async fn handshake(server: &Server, link: &mut Link) -> Result<(), LinkError> {
    link.send(&["PING"]).await?;
    let pong = link.reply().await?;
    // A primary that wants a password answers PING with NOAUTH (or, for a
    // user that may not PING, NOPERM): AUTH follows, so that is fine.
    if pong.starts_with('-')
        && !["-NOAUTH", "-NOPERM", "-ERR operation not permitted"]
            .iter()
            .any(|p| pong.starts_with(p))
    {
        return Err(format!("Error reply to PING from master: '{pong}'"));
    }
    let (user, pass, announce_ip, announce_port) = {
        let rt = server.runtime.read();
        (
            rt.get("masteruser").to_string(),
            rt.get("masterauth").to_string(),
            rt.get("replica-announce-ip").to_string(),
            rt.int("replica-announce-port"),
        )
    };
    if !pass.is_empty() {
        let mut auth = vec!["AUTH"];
        if !user.is_empty() {
            auth.push(&user);
        }
        auth.push(&pass);
        link.send(&auth).await?;
        let r = link.reply().await?;
        if r.starts_with('-') {
            return Err(format!("Unable to AUTH to MASTER: {r}"));
        }
    }
    let port = match announce_port {
        0 => server.port.load(Ordering::Relaxed) as i64,
        p => p,
    };
    // Errors here only mean an older primary: Redis goes on, and so does
    // cairn.
    link.send(&["REPLCONF", "listening-port", &port.to_string()])
        .await?;
    link.reply().await?;
    if !announce_ip.is_empty() {
        link.send(&["REPLCONF", "ip-address", &announce_ip]).await?;
        link.reply().await?;
    }
    link.send(&["REPLCONF", "capa", "eof", "capa", "psync2"])
        .await?;
    link.reply().await?;
    Ok(())
}

/// The connection to the primary before its stream starts.
struct Link {
    stream: TcpStream,
    /// Bytes read and not used yet (after a copy: the stream's start).
    buf: BytesMut,
    /// `repl-timeout`: longest silence from the primary.
    timeout: Duration,
}

impl Link {
    async fn send(&mut self, args: &[&str]) -> Result<(), LinkError> {
        let parts: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut out = Vec::new();
        crate::protocol::encode_command(&mut out, &parts);
        self.stream
            .write_all(&out)
            .await
            .map_err(|e| format!("Error writing to the MASTER: {e}"))
    }

    /// Reads more into `buf`; an error at the end of the stream or after
    /// `repl-timeout` of silence.
    async fn fill(&mut self) -> Result<usize, LinkError> {
        if self.buf.capacity() - self.buf.len() < 16 * 1024 {
            self.buf.reserve(64 * 1024);
        }
        match tokio::time::timeout(self.timeout, self.stream.read_buf(&mut self.buf)).await {
            Err(_) => Err("Timeout connecting to the MASTER...".into()),
            Ok(Ok(0)) => Err("MASTER closed the connection".into()),
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(format!("Error reading from the MASTER: {e}")),
        }
    }

    /// The next line the primary sends, without its CRLF, skipping the
    /// bare newlines a primary sends to keep the link alive while it
    /// prepares a copy.
    async fn reply(&mut self) -> Result<String, LinkError> {
        loop {
            if let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                let line = self.buf.split_to(end + 1);
                let text = String::from_utf8_lossy(&line[..end]);
                let text = text.strip_suffix('\r').unwrap_or(&text).to_string();
                if text.is_empty() {
                    continue;
                }
                return Ok(text);
            }
            if self.buf.len() > 64 * 1024 {
                return Err("Reply from the MASTER too long".into());
            }
            self.fill().await?;
        }
    }
}

/// Length of the mark around a diskless copy (`$EOF:<mark>`).
const EOF_MARK: usize = 40;

/// A copy's file, removed once loaded, or when the link fails or is
/// replaced on the way.
struct CopyFile(PathBuf);

impl Drop for CopyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Receives a full copy into a file of the data directory. What follows
/// the copy (the stream's start) stays in `link.buf`.
async fn receive(server: &Server, link: &mut Link) -> Result<CopyFile, LinkError> {
    let header = link.reply().await?;
    let Some(size) = header.strip_prefix('$') else {
        return Err(format!(
            "Bad protocol from MASTER, the first byte is not '$': {header}"
        ));
    };
    let mark = size.strip_prefix("EOF:").map(|m| m.as_bytes().to_vec());
    let total = match &mark {
        Some(m) if m.len() == EOF_MARK => -1,
        Some(_) => return Err(format!("Bad EOF mark from MASTER: {header}")),
        None => size
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| format!("Bad payload size from MASTER: {header}"))?,
    };
    let progress = &server.replication.sync;
    progress.total.store(total, Ordering::Relaxed);
    progress.read.store(0, Ordering::Relaxed);
    let path = CopyFile(
        server
            .config
            .dir
            .join(format!("temp-replica-{}.rdb", std::process::id())),
    );
    let mut file = std::fs::File::create(&path.0).map_err(|e| {
        format!("Opening the temp file needed for MASTER <-> REPLICA synchronization: {e}")
    })?;
    let mut write = |bytes: &[u8]| -> Result<(), LinkError> {
        progress
            .read
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        progress
            .last_io
            .store(super::unix_secs(), Ordering::Relaxed);
        file.write_all(bytes)
            .map_err(|e| format!("Write error writing to the DB dump file needed for MASTER <-> REPLICA synchronization: {e}"))
    };
    match mark {
        Some(mark) => loop {
            // The mark may straddle two reads: the last bytes short of one
            // stay in `buf` until the next read.
            if let Some(at) = link.buf.windows(EOF_MARK).position(|w| w == mark) {
                write(&link.buf[..at])?;
                link.buf.advance(at + EOF_MARK);
                break;
            }
            let keep = (EOF_MARK - 1).min(link.buf.len());
            let n = link.buf.len() - keep;
            write(&link.buf[..n])?;
            link.buf.advance(n);
            link.fill().await?;
        },
        None => {
            let mut left = total as usize;
            while left > 0 {
                if link.buf.is_empty() {
                    link.fill().await?;
                }
                let n = left.min(link.buf.len());
                write(&link.buf[..n])?;
                link.buf.advance(n);
                left -= n;
            }
        }
    }
    file.sync_all()
        .map_err(|e| format!("Failed trying to sync the temp DB to disk: {e}"))?;
    Ok(path)
}

/// Replaces the data set with the copy in `file`: checked whole first (a
/// damaged copy leaves the data as it was), then every key and function
/// is dropped and the copy's loaded, while other clients are answered
/// LOADING.
async fn load(
    server: &Arc<Server>,
    session: &crate::net::session::Session,
    file: &Path,
) -> Result<(), LinkError> {
    let checked = file.to_path_buf();
    tokio::task::spawn_blocking(move || crate::rdb::import::check(&checked))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| {
            format!("Failed trying to load the MASTER synchronization DB from disk: {e}")
        })?;
    let repl = &server.replication;
    repl.loading.store(true, Ordering::Release);
    let _loading = Loading(&repl.loading);
    tracing::info!("MASTER <-> REPLICA sync: Flushing old data");
    let flush = crate::families::generic::flush_all(session);
    match crate::families::blocking::run(server, flush).await {
        crate::protocol::Reply::Ok => {}
        other => return Err(format!("Flushing old data failed: {other:?}")),
    }
    match crate::families::functions::flush_libraries(server.clone()).await {
        crate::protocol::Reply::Ok => {}
        other => return Err(format!("Flushing old functions failed: {other:?}")),
    }
    tracing::info!("MASTER <-> REPLICA sync: Loading DB in memory");
    let stats = crate::rdb::import::load(server, &server.shards, file)
        .await
        .map_err(|e| format!("Failed trying to load the MASTER synchronization DB: {e}"))?;
    tracing::info!(
        "Done loading RDB, keys loaded: {}, keys expired: {}.",
        stats.keys,
        stats.expired
    );
    Ok(())
}

/// REPLCONF ACK <offset> once a second, as a Redis replica acknowledges
/// (its primary counts on it for WAIT, min-replicas-to-write and its
/// replicas' lag): queued as a push to the primary's connection, which
/// writes it out.
async fn acknowledge(server: Arc<Server>, entry: Arc<crate::server::ClientEntry>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tick.tick().await;
        if !entry.mailbox.send(ack(server.replication.offset())) {
            return;
        }
    }
}

/// REPLCONF ACK `offset` as the primary reads it.
pub fn ack(offset: i64) -> crate::pubsub::Push {
    let mut out = Vec::new();
    let n = offset.to_string();
    crate::protocol::encode_command(&mut out, &[b"REPLCONF", b"ACK", n.as_bytes()]);
    crate::pubsub::Push::Line(out.into())
}

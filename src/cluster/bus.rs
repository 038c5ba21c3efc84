//! Cluster-wide PUBLISH: a message published on one node reaches the
//! subscribers of every node of its group, as Redis Cluster's bus carries
//! it (SPUBLISH stays on the slot's owner; keyspace notifications stay on
//! the node whose keys changed, as in Redis).
//!
//! cairn has no cluster bus of its own: each node keeps one ordinary
//! client connection to every other node of its group and sends it the
//! PUBLISHes made here, pipelined, their replies read and dropped. The
//! connection names itself `cairn-bus-<node id>` (CLIENT SETNAME) before
//! anything else; a node delivers what such a connection publishes to its
//! own subscribers only, so nothing is forwarded twice. Like Redis's bus,
//! delivery is best effort: messages queued for a node that cannot be
//! reached are dropped (past a bound), a batch a broken connection cut
//! short is not sent again, and the link reconnects on its own.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::node::Cluster;

/// The client name prefix of bus links.
pub const LINK_NAME_PREFIX: &str = "cairn-bus-";

/// Messages a link queues while its node is unreachable, at most.
const MAX_QUEUED: usize = 100_000;

/// One message to forward: channel, payload.
type Message = (Bytes, Bytes);

/// Links to the other nodes of this node's group.
pub struct Bus {
    cluster: Arc<Cluster>,
    links: parking_lot::Mutex<Links>,
    rt: tokio::runtime::Handle,
}

/// The links for one topology version: each peer's address and queue.
#[derive(Default)]
struct Links {
    revision: Option<i64>,
    peers: Vec<(String, mpsc::Sender<Message>)>,
}

impl Bus {
    /// A bus for `cluster`, whose link tasks run on `rt`.
    pub fn new(cluster: Arc<Cluster>, rt: tokio::runtime::Handle) -> Bus {
        Bus {
            cluster,
            links: Default::default(),
            rt,
        }
    }

    /// Sends a PUBLISH made on this node to every other node of the group.
    pub fn forward(&self, channel: &[u8], message: &[u8]) {
        let view = self.cluster.view();
        if view.nodes.len() < 2 {
            return;
        }
        let mut links = self.links.lock();
        if links.revision != Some(view.revision) {
            // The group changed: keep the links to nodes still in it; the
            // others end when their queue closes.
            let mut old = std::mem::take(&mut links.peers);
            for (i, (_, node)) in view.nodes.iter().enumerate() {
                if i == view.me {
                    continue;
                }
                let addr = node.addr();
                let tx = match old.iter().position(|(a, _)| *a == addr) {
                    Some(at) => old.swap_remove(at).1,
                    None => self.start_link(addr.clone()),
                };
                links.peers.push((addr, tx));
            }
            links.revision = Some(view.revision);
        }
        let msg = (
            Bytes::copy_from_slice(channel),
            Bytes::copy_from_slice(message),
        );
        for (_, tx) in &links.peers {
            // A full queue (the node has been away long) drops the message.
            let _ = tx.try_send(msg.clone());
        }
    }

    fn start_link(&self, addr: String) -> mpsc::Sender<Message> {
        let (tx, rx) = mpsc::channel(MAX_QUEUED);
        let name = format!("{LINK_NAME_PREFIX}{}", self.cluster.myid());
        self.rt.spawn(link(addr, name, rx));
        tx
    }
}

/// Keeps a connection to `addr` and writes every queued message to it as
/// a PUBLISH, until the queue closes.
async fn link(addr: String, name: String, mut rx: mpsc::Receiver<Message>) {
    let mut backoff = Duration::from_millis(100);
    let mut batch: Vec<Message> = Vec::new();
    loop {
        let conn = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect(&addr),
        )
        .await;
        let Ok(Ok(stream)) = conn else {
            tracing::debug!(%addr, "cluster bus: cannot reach node");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
            if rx.is_closed() {
                return;
            }
            continue;
        };
        backoff = Duration::from_millis(100);
        let _ = stream.set_nodelay(true);
        let (mut read, mut write) = stream.into_split();
        // Replies are not needed: read and drop them so the node's output
        // never backs up.
        let drain = tokio::spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            while matches!(read.read(&mut buf).await, Ok(n) if n > 0) {}
        });
        let mut hello = Vec::new();
        crate::protocol::encode_command(&mut hello, &[b"CLIENT", b"SETNAME", name.as_bytes()]);
        if write.write_all(&hello).await.is_err() {
            drain.abort();
            continue;
        }
        loop {
            if batch.is_empty() {
                match rx.recv().await {
                    Some(m) => batch.push(m),
                    None => {
                        drain.abort();
                        return;
                    }
                }
                while batch.len() < 1024 {
                    match rx.try_recv() {
                        Ok(m) => batch.push(m),
                        Err(_) => break,
                    }
                }
            }
            let mut out = Vec::new();
            for (channel, message) in &batch {
                crate::protocol::encode_command(&mut out, &[b"PUBLISH", channel, message]);
            }
            let sent = write.write_all(&out).await;
            // At most once: a batch cut short is not sent again.
            batch.clear();
            if sent.is_err() {
                break;
            }
        }
        drain.abort();
    }
}

//! Starting and stopping a server: open the shards, bind, serve until a
//! signal or SHUTDOWN, then commit and close everything.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::server::Server;
use crate::shard::ShardSet;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The shards could not be opened.
    #[error(transparent)]
    Open(#[from] crate::shard::set::OpenError),
    /// The cluster config file could not be read or written.
    #[error("cluster config: {0}")]
    Cluster(#[from] std::io::Error),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A started server.
pub struct Running {
    /// The shared state.
    pub server: Arc<Server>,
    /// The bound address.
    pub addr: SocketAddr,
    listener: Option<TcpListener>,
}

/// The connections' runtime: tokio's multi-thread scheduler, one worker
/// per core unless `workers` says otherwise, without its LIFO slot.
///
/// The LIFO slot runs the task woken last first: when one turn of the
/// I/O driver wakes the connections of two clients that wrote one after
/// the other, the second one's command ran first. Redis serves them in
/// the order they arrived, and clients and tests count on it (Redis's own
/// suite blocks a reader on one connection and changes its key from
/// another right after: "Blocking XREADGROUP: key deleted" and "key type
/// changed with SET" failed on every run with the slot, and passed in 5
/// of 6 runs without it). No difference in speed was measured (SET, GET,
/// LPUSH at pipeline 16, SET and INCR at pipeline 1, EVALSHA, txbench).
/// The switch is one of tokio's unstable options: `.cargo/config.toml`
/// builds with `--cfg tokio_unstable`; a build without it keeps the slot.
pub fn runtime_builder(workers: Option<usize>) -> tokio::runtime::Builder {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.enable_all();
    if let Some(n) = workers {
        b.worker_threads(n);
    }
    #[cfg(tokio_unstable)]
    b.disable_lifo_slot();
    b
}

/// Opens the shards and binds the listener (does not serve yet).
pub async fn start(config: Config) -> Result<Running, StartError> {
    let addr = format!("{}:{}", config.bind, config.port);
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|source| StartError::Bind {
            addr: addr.clone(),
            source,
        })?;
    let local = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    let shards = ShardSet::open(&config)?;
    crate::families::memory::mark_startup();
    let mut server = Server::new(config, shards);
    if server.config.cluster.enabled {
        let cluster = crate::cluster::node::open_for(&server, local.port())?;
        let bus = crate::cluster::bus::Bus::new(cluster.clone(), tokio::runtime::Handle::current());
        server.pubsub.set_forward(Box::new(move |channel, message| {
            bus.forward(channel, message)
        }));
        server.cluster = Some(cluster);
    }
    let server = Arc::new(server);
    if let Some(c) = &server.cluster {
        // When a slot moves away, its shard-channel subscribers are
        // unsubscribed (and told) and clients blocked on its keys are
        // redirected, as in Redis. Weak: the server owns the hook.
        let weak = Arc::downgrade(&server);
        c.set_on_view(Box::new(move |view| {
            let Some(server) = weak.upgrade() else { return };
            server
                .pubsub
                .drop_unserved_shard_channels(|slot| view.serves(slot));
            // A cluster that is down ends every such wait: with reads
            // allowed, the write that would end it may never come (Redis
            // 7.0 does the same).
            let down = !crate::cluster::routing::cluster_ok(&server, view);
            crate::net::unblock::redirect_unserved(
                server.clients.iter().map(|e| e.value().clone()),
                |slot| match (down, view.serves(slot)) {
                    (true, _) => Some(crate::protocol::Reply::Error(
                        "CLUSTERDOWN The cluster is down".into(),
                    )),
                    (false, false) => Some(crate::cluster::routing::moved(view, slot)),
                    (false, true) => None,
                },
            );
        }));
        c.start();
    }
    crate::families::info::start_sampling(&server);
    crate::families::persistence::start_save_points(&server);
    // Function libraries persist; scripts do not (as in Redis).
    if let Err(e) = crate::families::functions::load_stored(&server) {
        tracing::error!(error = %e, "cannot read the stored function libraries");
    }
    server
        .port
        .store(local.port() as u64, std::sync::atomic::Ordering::Relaxed);
    crate::replication::start_configured(&server);
    Ok(Running {
        server,
        addr: local,
        listener: Some(listener),
    })
}

impl Running {
    /// Serves until shutdown is requested, then closes the shards cleanly.
    pub async fn serve(mut self) {
        let listener = self.listener.take().expect("serve called once");
        tracing::info!(addr = %self.addr, "ready to accept connections");
        crate::net::serve(self.server.clone(), listener).await;
        // Give connections a moment to finish the batch they are in.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !self.server.clients.is_empty() && std::time::Instant::now() < deadline {
            self.server.shutdown.notify_waiters();
            self.server.wake_clients();
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        self.server.shards.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    /// Order in which tasks woken by `runtime`'s worker run: two tasks
    /// wait, a third wakes the first and then the second.
    fn wake_order(runtime: tokio::runtime::Runtime) -> Vec<u8> {
        let order = Arc::new(Mutex::new(Vec::new()));
        runtime.block_on(async {
            let (tx_a, rx_a) = tokio::sync::oneshot::channel::<()>();
            let (tx_b, rx_b) = tokio::sync::oneshot::channel::<()>();
            let waiter = |rx: tokio::sync::oneshot::Receiver<()>, id: u8| {
                let order = order.clone();
                async move {
                    let _ = rx.await;
                    order.lock().unwrap().push(id);
                }
            };
            let a = tokio::spawn(waiter(rx_a, 1));
            let b = tokio::spawn(waiter(rx_b, 2));
            let waker = tokio::spawn(async move {
                let _ = tx_a.send(());
                let _ = tx_b.send(());
            });
            for task in [a, b, waker] {
                task.await.unwrap();
            }
        });
        Arc::try_unwrap(order).unwrap().into_inner().unwrap()
    }

    /// Tasks the worker wakes one after the other run in that order, as
    /// connections woken by one turn of the I/O driver must (see
    /// `runtime_builder`); tokio's default LIFO slot runs the last first.
    #[test]
    fn woken_tasks_run_in_the_order_they_were_woken() {
        let ours = super::runtime_builder(Some(1)).build().unwrap();
        assert_eq!(wake_order(ours), vec![1, 2]);
        let with_slot = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        assert_eq!(wake_order(with_slot), vec![2, 1]);
    }
}

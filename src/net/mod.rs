//! The network side: the listener, one task per connection, and the
//! per-client session state commands read and change.

pub mod atomic;
pub mod conn;
pub mod session;
pub mod unblock;

use std::sync::Arc;

use tokio::net::TcpListener;

use crate::server::Server;

/// Accepts connections until the server is asked to stop, on the listener
/// CONFIG SET port last bound.
pub async fn serve(server: Arc<Server>, listener: TcpListener) {
    let mut listener = Some(listener);
    loop {
        let accept = async {
            match &listener {
                Some(l) => l.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = server.relistened.notified() => {
                if let Some(next) = server.relisten.lock().take() {
                    // Connections accepted on the old port stay.
                    listener = next.and_then(|l| TcpListener::from_std(l).ok());
                }
            }
            accepted = accept => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let server = server.clone();
                    tokio::spawn(async move { conn::run(server, stream, peer).await });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            },
            _ = server.shutdown.notified() => break,
        }
        if server.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
    }
}

//! The cairn server binary: load config.toml and flags, start, serve until
//! SIGINT, SIGTERM or SHUTDOWN.

use clap::Parser;

use cairn::config::{Config, Flags};

fn main() {
    let flags = Flags::parse();
    let config = match Config::load(&flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cairn: {e}");
            std::process::exit(1);
        }
    };
    // The log's level and file are Redis parameters: `[redis]` or the
    // top-level `log_level`, which Config::load has checked.
    let values = cairn::families::config::initial_values(&config).unwrap_or_default();
    if let Err(e) = cairn::logging::init(values.get("loglevel"), values.get("logfile")) {
        eprintln!(
            "cairn: can't open the log file {}: {e}",
            values.get("logfile")
        );
        std::process::exit(1);
    }
    let runtime = cairn::run::runtime_builder(None)
        .build()
        .expect("tokio runtime");
    if let Some(path) = flags.import.clone() {
        runtime.block_on(async move {
            match cairn::rdb::import::import(config, &path).await {
                Ok(st) => eprintln!(
                    "cairn: imported {} keys ({} already expired, skipped) and {} function libraries from {} ({} bytes) in {:.1}s, {:.1} MB/s",
                    st.keys,
                    st.expired,
                    st.functions,
                    path.display(),
                    st.bytes,
                    st.secs,
                    st.bytes as f64 / 1e6 / st.secs.max(1e-9)
                ),
                Err(e) => {
                    eprintln!("cairn: import failed: {e}");
                    std::process::exit(1);
                }
            }
        });
        return;
    }
    runtime.block_on(async move {
        let running = match cairn::run::start(config).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("cairn: {e}");
                std::process::exit(1);
            }
        };
        let server = running.server.clone();
        tokio::spawn(async move {
            loop {
                wait_for_signal().await;
                // With save points set, Redis saves before it exits, and
                // stays up if that fails.
                if cairn::families::persistence::save_for_shutdown(&server, false, false).await {
                    break;
                }
                tracing::warn!(
                    "signal received but errors trying to shut down the server, check the logs for more information"
                );
            }
            server.request_shutdown();
            tracing::info!("signal received, shutting down");
        });
        running.serve().await;
    });
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

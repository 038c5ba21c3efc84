//! The server log: Redis's `loglevel` names on tracing's levels, to stderr
//! or to the `logfile`, and a level CONFIG SET can change while running.

use std::sync::OnceLock;

use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::reload::Handle;
use tracing_subscriber::EnvFilter;

/// Turns a level from config.toml's `log_level` into Redis's `loglevel`
/// name: Redis's own four names as they are, tracing's names (which
/// `log_level` used before it took Redis's) onto the nearest Redis level.
/// `None` for anything else.
pub fn redis_level(name: &str) -> Option<&'static str> {
    Some(match name.to_ascii_lowercase().as_str() {
        "debug" | "trace" => "debug",
        "verbose" => "verbose",
        "notice" | "info" => "notice",
        "warning" | "warn" | "error" => "warning",
        _ => return None,
    })
}

/// The tracing filter of a Redis `loglevel`. Redis has one level below
/// `verbose`, tracing two below `info`: `debug` takes everything.
fn filter_of(loglevel: &str) -> EnvFilter {
    EnvFilter::new(match loglevel {
        "debug" => "trace",
        "verbose" => "debug",
        "warning" => "warn",
        _ => "info",
    })
}

type Reload = Handle<
    EnvFilter,
    tracing_subscriber::fmt::Formatter<
        tracing_subscriber::fmt::format::DefaultFields,
        tracing_subscriber::fmt::format::Format,
        BoxMakeWriter,
    >,
>;

/// Set once the process's log is installed; CONFIG SET loglevel goes
/// through it. Absent in tests that run servers without a log.
static LEVEL: OnceLock<Reload> = OnceLock::new();

/// Installs the process's log: `loglevel` and `logfile` as Redis's
/// parameters name them (an empty `logfile` is stderr). `RUST_LOG`, when
/// set, wins over `loglevel` for good: it is a developer's filter.
///
/// A log pipe that closes (`cairn 2>&1 | head`) must not take the server
/// down with it: tracing-subscriber reports a failed write with
/// `eprintln!`, which panics on a closed stderr, so that report is off and
/// failed writes are dropped. Colour codes only go to a terminal.
pub fn init(loglevel: &str, logfile: &str) -> std::io::Result<()> {
    use std::io::IsTerminal;
    let from_env = EnvFilter::try_from_default_env().ok();
    let fixed = from_env.is_some();
    let filter = from_env.unwrap_or_else(|| filter_of(loglevel));
    let (writer, ansi) = if logfile.is_empty() {
        (
            BoxMakeWriter::new(std::io::stderr),
            std::io::stderr().is_terminal(),
        )
    } else {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logfile)?;
        (BoxMakeWriter::new(std::sync::Mutex::new(file)), false)
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer)
        .log_internal_errors(false)
        .with_filter_reloading();
    let handle = builder.reload_handle();
    builder.init();
    if !fixed {
        let _ = LEVEL.set(handle);
    }
    Ok(())
}

/// Applies a new `loglevel` (CONFIG SET): a no-op without an installed log
/// or under `RUST_LOG`.
pub fn set_level(loglevel: &str) {
    if let Some(handle) = LEVEL.get() {
        let _ = handle.reload(filter_of(loglevel));
    }
}

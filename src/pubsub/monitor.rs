//! MONITOR: every command the server runs, as a line pushed to each
//! monitoring client, in Redis's format:
//! `+<unix secs>.<micros> [<db> <client addr>|lua] "arg" "arg"...`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::Push;
use crate::command::flag;
use crate::command::CommandSpec;
use crate::server::ClientEntry;

/// The clients in MONITOR mode.
#[derive(Default)]
pub struct Monitors {
    clients: parking_lot::RwLock<Vec<Arc<ClientEntry>>>,
    count: AtomicUsize,
}

impl Monitors {
    /// Whether anyone monitors (commands are formatted only then).
    pub fn active(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// Adds a monitoring client.
    pub fn add(&self, client: Arc<ClientEntry>) {
        let mut clients = self.clients.write();
        clients.push(client);
        self.count.store(clients.len(), Ordering::Release);
    }

    /// Removes a client (RESET, disconnect); nothing if it does not monitor.
    pub fn remove(&self, id: u64) {
        if !self.active() {
            return;
        }
        let mut clients = self.clients.write();
        clients.retain(|c| c.id != id);
        self.count.store(clients.len(), Ordering::Release);
    }

    /// Whether client `id` monitors.
    pub fn contains(&self, id: u64) -> bool {
        self.active() && self.clients.read().iter().any(|c| c.id == id)
    }

    /// Sends every monitor the line of one command run in database `db` by
    /// `from` (a client address, or `lua`). Admin commands are not shown,
    /// and passwords are redacted, as in Redis.
    pub fn feed(&self, spec: &'static CommandSpec, db: u8, from: &str, argv: &[Bytes]) {
        // QUIT never reaches Redis's command dispatch, so it is not shown.
        if !self.active() || spec.has(flag::ADMIN) || spec.name == "quit" {
            return;
        }
        let line = Push::Line(line(spec, db, from, argv));
        for c in self.clients.read().iter() {
            c.mailbox.send(line.clone());
        }
    }
}

/// The MONITOR line of a command.
pub fn line(spec: &'static CommandSpec, db: u8, from: &str, argv: &[Bytes]) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut out = format!(
        "+{}.{:06} [{db} {from}]",
        now.as_secs(),
        now.subsec_micros()
    )
    .into_bytes();
    let redacted = redacted_args(spec, argv);
    for (i, a) in argv.iter().enumerate() {
        out.push(b' ');
        if redacted.contains(&i) {
            out.extend_from_slice(b"\"(redacted)\"");
        } else {
            quote(&mut out, a);
        }
    }
    out.extend_from_slice(b"\r\n");
    Bytes::from(out)
}

/// Which arguments hold secrets: AUTH's, HELLO's AUTH user and password,
/// MIGRATE's AUTH password or AUTH2 user and password.
fn redacted_args(spec: &CommandSpec, argv: &[Bytes]) -> Vec<usize> {
    let is = |a: &Bytes, w: &str| a.eq_ignore_ascii_case(w.as_bytes());
    match spec.name {
        "auth" => (1..argv.len()).collect(),
        "hello" => argv
            .iter()
            .position(|a| is(a, "auth"))
            .map_or(Vec::new(), |i| vec![i + 1, i + 2]),
        "migrate" => {
            let mut out = Vec::new();
            for (i, a) in argv.iter().enumerate().skip(6) {
                if is(a, "auth") {
                    out.push(i + 1);
                } else if is(a, "auth2") {
                    out.extend([i + 1, i + 2]);
                }
            }
            out
        }
        _ => Vec::new(),
    }
    .into_iter()
    .filter(|&i| i < argv.len())
    .collect()
}

/// An argument as Redis quotes it (sdscatrepr): in double quotes, with
/// `\\`, `\"`, `\n`, `\r`, `\t`, `\a`, `\b` escaped and other bytes outside
/// printable ASCII as `\xHH`.
fn quote(out: &mut Vec<u8>, a: &[u8]) {
    out.push(b'"');
    for &b in a {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            b if b.is_ascii_graphic() || b == b' ' => out.push(b),
            b => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_quoted_as_redis_does() {
        let mut out = Vec::new();
        quote(&mut out, b"bin\x00\"q\\ \n\x7f");
        assert_eq!(out, b"\"bin\\x00\\\"q\\\\ \\n\\x7f\"".to_vec());
    }
}

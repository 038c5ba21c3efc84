//! The ACL LOG: refused commands, keys, channels and failed
//! authentications, newest first, similar events within a minute folded
//! into one entry with a count (as Redis does).

use std::collections::VecDeque;

use crate::protocol::Reply;

/// Why something was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The command (or subcommand).
    Command,
    /// A key.
    Key,
    /// A channel.
    Channel,
    /// AUTH / HELLO AUTH with wrong credentials.
    Auth,
}

/// Where it was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// A command sent by the client.
    Toplevel,
    /// A command queued in MULTI, or checked again by EXEC.
    Multi,
    /// A command called by a script.
    Lua,
}

/// One entry.
#[derive(Debug, Clone)]
pub struct Entry {
    /// How many times it happened.
    pub count: u64,
    /// Why.
    pub reason: Reason,
    /// Where.
    pub context: Context,
    /// The command, key or channel (for auth: the command name).
    pub object: Vec<u8>,
    /// The user.
    pub username: Vec<u8>,
    /// Unix time of the last occurrence, in milliseconds.
    pub ctime_ms: u64,
    /// CLIENT INFO of the last client it happened to.
    pub client_info: String,
}

/// Entries are folded only within this many milliseconds of each other.
const GROUPING_MS: u64 = 60_000;

/// The log, newest entry first.
#[derive(Debug, Default)]
pub struct AclLog {
    entries: VecDeque<Entry>,
}

impl AclLog {
    /// Records an event, keeping at most `max_len` entries. An event like
    /// one of the ten newest entries updates that entry (and moves it to
    /// the front) instead.
    pub fn add(&mut self, e: Entry, max_len: usize) {
        let similar = self.entries.iter().take(10).position(|old| {
            old.reason == e.reason
                && old.context == e.context
                && old.ctime_ms.abs_diff(e.ctime_ms) <= GROUPING_MS
                && old.object == e.object
                && old.username == e.username
        });
        if let Some(i) = similar {
            let mut old = self.entries.remove(i).expect("in range");
            old.count += 1;
            old.ctime_ms = e.ctime_ms;
            old.client_info = e.client_info;
            self.entries.push_front(old);
            return;
        }
        self.entries.push_front(e);
        self.entries.truncate(max_len);
    }

    /// ACL LOG RESET.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The newest `count` entries as ACL LOG replies them.
    pub fn reply(&self, count: usize, now_ms: u64) -> Reply {
        let b = |s: &str| Reply::bulk(s.to_string());
        let items = self.entries.iter().take(count).map(|e| {
            let reason = match e.reason {
                Reason::Command => "command",
                Reason::Key => "key",
                Reason::Channel => "channel",
                Reason::Auth => "auth",
            };
            let context = match e.context {
                Context::Toplevel => "toplevel",
                Context::Multi => "multi",
                Context::Lua => "lua",
            };
            let age = now_ms.saturating_sub(e.ctime_ms) as f64 / 1000.0;
            Reply::Map(vec![
                (b("count"), Reply::Int(e.count as i64)),
                (b("reason"), b(reason)),
                (b("context"), b(context)),
                (b("object"), Reply::bulk(e.object.clone())),
                (b("username"), Reply::bulk(e.username.clone())),
                (b("age-seconds"), Reply::Double(age)),
                (b("client-info"), b(&e.client_info)),
            ])
        });
        Reply::Array(items.collect())
    }
}

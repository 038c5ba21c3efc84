//! The Lua scripting engine behind EVAL, EVALSHA, SCRIPT, FUNCTION and FCALL.
//!
//! One [`ScriptVm`] holds one Lua 5.1 state sandboxed as Redis 7.0 does it:
//! the base, table, string and math libraries plus `cjson`, `cmsgpack`,
//! `bit` and `struct` (written in Rust here), the `redis` API, and a global
//! table that scripts can read but not write. Commands reach the data through
//! the [`Host`] trait, which the server implements; the engine checks what
//! Redis checks before a command runs (unknown command, arity, `noscript`,
//! writes from read-only scripts) and converts replies both ways.
//!
//! The VM is `Send + Sync` (mlua's `send` feature). Every entry point takes
//! an internal lock, so scripts run one at a time on one VM;
//! [`KillHandle`] works without that lock. A server has several VMs
//! ([`Engines`]: one per shard, one for scripts holding every shard) that
//! share one [`Registry`] of scripts and libraries, so they look like one
//! engine to clients. Atomicity comes from where a script runs (inside its
//! shard's batch, or holding every shard), not from the VM's lock.

mod bit;
mod cjson;
mod cmsgpack;
mod convert;
mod engines;
mod functions;
mod rawcall;
mod registry;
pub(crate) mod sha1;
mod shebang;
mod structlib;
mod vm;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::command::table::CommandSpec;
use crate::protocol::reply::Reply;

pub use engines::{Engines, MemoryStats};
pub use functions::{FunctionInfo, LibraryEdit, LibraryInfo};
pub use registry::Registry;
pub use sha1::sha1_hex;
pub use vm::ScriptVm;

/// The flags a script body declares in its `#!lua flags=...` line, or
/// `None` without a valid shebang (EVAL's compatibility mode, or a script
/// that will fail to load).
pub fn script_flags(body: &[u8]) -> Option<ScriptFlags> {
    shebang::parse(body, false).ok().flatten().map(|s| s.flags)
}

/// Runs commands on behalf of a script (implemented by the server).
pub trait Host {
    /// Runs one command from inside a script and returns its reply exactly as
    /// a client would get it (errors as `Reply::Error`). `resp3` is the
    /// script's own protocol (`redis.setresp(3)`), not the caller's: replies
    /// whose structure depends on the protocol (ZRANGE WITHSCORES...) must be
    /// built for it. The engine has already checked: argv non-empty, command
    /// exists, arity, not flagged `noscript` (unless
    /// [`Host::allows_noscript`]), and no write command in a read-only
    /// script. Must not call back into the [`ScriptVm`].
    ///
    /// `spec` is the command `argv[0]` names (for a container such as
    /// CONFIG, the container itself), as the VM found it for those checks.
    fn call(&mut self, spec: &'static CommandSpec, argv: Vec<Bytes>, resp3: bool) -> Reply;

    /// Whether scripts may call commands flagged `noscript` (DEBUG
    /// SET-DISABLE-DENY-SCRIPTS); by default they may not.
    fn allows_noscript(&mut self) -> bool {
        false
    }

    /// Whether the current user may run `argv` (`redis.acl_check_cmd`); the
    /// command is known to exist. Without ACL users, always.
    fn acl_check(&mut self, _argv: &[Bytes]) -> bool {
        true
    }

    /// Called once before the script (or function) runs, with its flags
    /// and declared keys: a refusal instead of running it (cluster mode's
    /// `no-cluster`), or `None`. Without cluster mode, nothing to check.
    fn begin(&mut self, _flags: ScriptFlags, _keys: &[Bytes]) -> Option<Reply> {
        None
    }
}

/// Flags from a script's `#!lua flags=...` line or a function's `flags`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScriptFlags {
    /// No shebang: "eval compat" mode (writes allowed, no flag checks).
    pub eval_compat: bool,
    /// `no-writes`: the script may only read.
    pub no_writes: bool,
    /// `allow-oom`: may run when over maxmemory.
    pub allow_oom: bool,
    /// `allow-stale`: may run on a stale replica.
    pub allow_stale: bool,
    /// `no-cluster`: refused in cluster mode.
    pub no_cluster: bool,
    /// `allow-cross-slot-keys`: may touch keys from several slots.
    pub allow_cross_slot_keys: bool,
}

impl ScriptFlags {
    /// Sets the flag Redis names `name`; false for an unknown name.
    fn set(&mut self, name: &[u8]) -> bool {
        match name {
            b"no-writes" => self.no_writes = true,
            b"allow-oom" => self.allow_oom = true,
            b"allow-stale" => self.allow_stale = true,
            b"no-cluster" => self.no_cluster = true,
            b"allow-cross-slot-keys" => self.allow_cross_slot_keys = true,
            _ => return false,
        }
        true
    }

    /// The flag names as FUNCTION LIST prints them, in Redis's order.
    pub fn names(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        for (on, name) in [
            (self.no_writes, "no-writes"),
            (self.allow_oom, "allow-oom"),
            (self.allow_stale, "allow-stale"),
            (self.no_cluster, "no-cluster"),
            (self.allow_cross_slot_keys, "allow-cross-slot-keys"),
        ] {
            if on {
                out.push(name);
            }
        }
        out
    }
}

/// Shared between the VM (which checks it from an instruction-count hook)
/// and whoever handles SCRIPT KILL / FUNCTION KILL and BUSY replies.
#[derive(Default)]
pub(crate) struct KillState {
    running: AtomicBool,
    is_function: AtomicBool,
    kill: AtomicBool,
    /// FUNCTION LOAD is running library code (500 ms limit).
    loading: AtomicBool,
    /// Since when the running script's Lua code has run, read without a
    /// lock: every command asks whether a script has run past
    /// `busy-reply-threshold` while any runs (under EVALSHA at pipeline 16
    /// the other states' locks and clock reads were 1-2% of the server's
    /// time).
    started: crate::util::AtomicInstant,
    /// When the running script's thread last tried to hand its other
    /// connections to another thread (`vm::release_worker`), in ms since
    /// `started`; 0 before the first try.
    released_ms: std::sync::atomic::AtomicU64,
    /// The running script has run a write command (SCRIPT KILL then
    /// answers UNKILLABLE).
    wrote: AtomicBool,
    /// The running script was stopped by SHUTDOWN: its writes roll back.
    abort: AtomicBool,
    /// What runs (FUNCTION STATS): its name, the command that called it,
    /// and since when.
    label: parking_lot::Mutex<Option<Running>>,
}

impl KillState {
    /// Lua code starts running now.
    fn start_clock(&self) {
        self.started.set(Instant::now());
        self.released_ms.store(0, Ordering::Release);
    }
}

/// A script as FUNCTION STATS shows it while it runs: its name (sha or
/// function name) and the command that called it. Shared, so that a run
/// and its fallback (see `Action::Script`) need no copies of it.
pub type Label = Arc<(String, Vec<Bytes>)>;

/// A running script: its [`Label`], and since when.
pub type Running = (Label, Instant);

/// Lets another thread see whether a script is running, for how long, and
/// ask it to stop (SCRIPT KILL / FUNCTION KILL).
#[derive(Clone)]
pub struct KillHandle {
    state: Arc<KillState>,
}

impl KillHandle {
    /// Whether a script or function is running now.
    pub fn is_running(&self) -> bool {
        self.state.running.load(Ordering::Acquire)
    }

    /// Whether what runs now is a function (FCALL) rather than a script:
    /// Redis answers SCRIPT KILL and FUNCTION KILL differently for each.
    pub fn is_function(&self) -> bool {
        self.state.is_function.load(Ordering::Acquire)
    }

    /// Since when the running script has run, or `None` when none runs.
    pub fn started(&self) -> Option<Instant> {
        if !self.is_running() {
            return None;
        }
        self.state.started.get()
    }

    /// How long the running script has run as of `now` (for BUSY after
    /// busy-reply-threshold), or `None` when none runs. No clock read.
    pub fn elapsed_at(&self, now: Instant) -> Option<Duration> {
        self.started().map(|t| now.saturating_duration_since(t))
    }

    /// Asks the running script to stop; it fails with "ERR Script killed by
    /// user with SCRIPT KILL..." within about 100k Lua instructions. Returns
    /// false when no script runs (Redis: NOTBUSY). Whether the script already
    /// wrote (UNKILLABLE) is for the server to decide before calling this.
    pub fn kill(&self) -> bool {
        if !self.is_running() {
            return false;
        }
        self.state.kill.store(true, Ordering::Release);
        true
    }

    /// Whether the running script has run a write command.
    pub fn wrote(&self) -> bool {
        self.state.wrote.load(Ordering::Acquire)
    }

    /// Records that the running script runs a write command.
    pub fn mark_wrote(&self) {
        self.state.wrote.store(true, Ordering::Release);
    }

    /// Stops the running script for SHUTDOWN, whatever it wrote: whoever
    /// runs it sees [`KillHandle::take_abort`] and rolls its writes back.
    pub fn abort(&self) {
        if self.is_running() {
            self.state.abort.store(true, Ordering::Release);
            self.kill();
        }
    }

    /// Whether the script that ran was stopped by [`KillHandle::abort`]
    /// (and clears it).
    pub fn take_abort(&self) -> bool {
        self.state.abort.swap(false, Ordering::AcqRel)
    }

    /// Sets or clears what FUNCTION STATS shows as running here.
    pub fn set_running(&self, running: Option<Running>) {
        *self.state.label.lock() = running;
    }

    /// What runs here, as FUNCTION STATS shows it.
    pub fn running(&self) -> Option<Running> {
        self.state.label.lock().clone()
    }
}

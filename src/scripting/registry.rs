//! The server-wide namespace of scripts and function libraries.
//!
//! Each Lua state ([`ScriptVm`](super::ScriptVm)) compiles what it runs; the
//! registry holds what the states compile from, so every state sees one
//! script cache and one set of libraries, as a Redis user sees them:
//!
//! * scripts: sha -> body and flags. A state compiles a body the first time
//!   it runs it. SCRIPT FLUSH empties the map and moves `epoch`; a state that
//!   sees a new epoch drops what it compiled before running anything.
//! * libraries: what FUNCTION LIST shows, published whole after each change
//!   with a new `generation`. A state that sees a new generation reloads
//!   every library from the published code before its next FCALL.
//!
//! Both counters are read without a lock on every script run; the maps are
//! locked only on a state's miss or a change, never while Lua runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::RwLock;

use super::{LibraryInfo, ScriptFlags};

/// A cached script's body and flags.
#[derive(Clone)]
pub(crate) struct Cached {
    pub(crate) body: Bytes,
    pub(crate) flags: ScriptFlags,
}

#[derive(Default)]
struct Scripts {
    by_sha: HashMap<String, Cached>,
    bytes: usize,
}

#[derive(Default)]
struct Libraries {
    /// Sorted by name.
    list: Vec<LibraryInfo>,
    /// Every function's flags by its name in lower case.
    flags: HashMap<String, ScriptFlags>,
}

/// The script cache and function libraries every Lua state shares.
#[derive(Default)]
pub struct Registry {
    scripts: RwLock<Scripts>,
    epoch: AtomicU64,
    libraries: RwLock<Libraries>,
    generation: AtomicU64,
}

impl Registry {
    /// The script cached under `sha` (lowercase hex).
    pub(crate) fn script(&self, sha: &str) -> Option<Cached> {
        self.scripts.read().by_sha.get(sha).cloned()
    }

    /// Caches a script that compiled (a no-op when it is cached already).
    pub(crate) fn insert_script(&self, sha: &str, body: &[u8], flags: ScriptFlags) {
        let mut s = self.scripts.write();
        if !s.by_sha.contains_key(sha) {
            s.bytes += body.len();
            let body = Bytes::copy_from_slice(body);
            s.by_sha.insert(sha.to_owned(), Cached { body, flags });
        }
    }

    /// Whether a script is cached (SCRIPT EXISTS; case-insensitive).
    pub fn exists(&self, sha: &str) -> bool {
        self.flags(sha).is_some()
    }

    /// The flags of a cached script (`eval_compat` when it has no shebang).
    pub fn flags(&self, sha: &str) -> Option<ScriptFlags> {
        let sha = sha.to_ascii_lowercase();
        self.scripts.read().by_sha.get(&sha).map(|c| c.flags)
    }

    /// SCRIPT FLUSH: no state runs a script cached before it once it returns.
    pub fn flush_scripts(&self) {
        let mut s = self.scripts.write();
        *s = Scripts::default();
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Moves with every SCRIPT FLUSH.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Cached scripts and the bytes of their bodies (INFO).
    pub fn script_stats(&self) -> (usize, usize) {
        let s = self.scripts.read();
        (s.by_sha.len(), s.bytes)
    }

    /// Every library, sorted by name (FUNCTION LIST / DUMP, SAVE).
    pub fn libraries(&self) -> Vec<LibraryInfo> {
        self.libraries.read().list.clone()
    }

    /// A function's flags (for the checks made before FCALL), `None` if
    /// no function has the name; names are case-insensitive, as in FCALL.
    pub fn function_flags(&self, name: &str) -> Option<ScriptFlags> {
        self.libraries
            .read()
            .flags
            .get(&name.to_ascii_lowercase())
            .copied()
    }

    /// Moves with every change of the libraries.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The libraries' code as of one generation, for a state to reload.
    pub(crate) fn library_codes(&self) -> (u64, Vec<Bytes>) {
        let l = self.libraries.read();
        let codes = l.list.iter().map(|lib| lib.code.clone()).collect();
        (self.generation(), codes)
    }

    /// Replaces the libraries by `list` (one change, whole); returns the new
    /// generation. Changes must be serialized by the caller: the server
    /// makes them on one state, under `Server::functions_lock`.
    pub(crate) fn publish(&self, mut list: Vec<LibraryInfo>) -> u64 {
        list.sort_by(|a, b| a.name.cmp(&b.name));
        let flags = list
            .iter()
            .flat_map(|lib| {
                lib.functions
                    .iter()
                    .map(|f| (f.name.to_ascii_lowercase(), f.flags))
            })
            .collect();
        let mut l = self.libraries.write();
        *l = Libraries { list, flags };
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }
}

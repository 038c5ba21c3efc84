//! The server's Lua states: one per shard, one for scripts holding every
//! shard, all compiling from one [`Registry`].
//!
//! A script whose keys live on shard `i` runs on state `i`, inside that
//! shard's batch: only shard `i`'s thread enters it, so scripts of different
//! shards run in parallel and never wait on each other's lock. A script
//! that spans shards (or reaches undeclared keys) runs as a plan holding
//! every shard, on the plan state; plans run one at a time, so that state is
//! never contended either. The plan state also makes the library changes
//! (FUNCTION LOAD...) and checks SCRIPT LOAD's bodies.
//!
//! Seen from a client this is still one server: one script cache, one set of
//! libraries, BUSY while any script has run past the threshold, SCRIPT KILL
//! and FUNCTION STATS about the script that has run longest (the one a
//! Redis client would be waiting on), memory summed over the states.

use std::sync::Arc;

use super::{KillHandle, Registry, Running, ScriptVm};

/// What INFO reports of the engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes every Lua state uses (`used_memory_lua`).
    pub lua_bytes: usize,
    /// Cached scripts (`number_of_cached_scripts`).
    pub scripts: usize,
    /// Bytes of their bodies (`used_memory_scripts_eval`).
    pub script_bytes: usize,
}

/// The Lua states of a server and the registry they share.
pub struct Engines {
    registry: Arc<Registry>,
    /// `shards` states, then the plan state.
    states: Vec<ScriptVm>,
    /// Handles on `states`, in the same order, for KILL, BUSY and STATS.
    handles: Vec<KillHandle>,
}

impl Engines {
    /// One state per shard and the plan state, set up identically.
    pub fn new(shards: usize) -> mlua::Result<Engines> {
        let registry = Arc::new(Registry::default());
        let states = (0..=shards)
            .map(|_| ScriptVm::with_registry(registry.clone()))
            .collect::<mlua::Result<Vec<_>>>()?;
        let handles = states.iter().map(ScriptVm::kill_handle).collect();
        Ok(Engines {
            registry,
            states,
            handles,
        })
    }

    /// The state scripts whose keys all live on `shard` run on.
    pub fn shard(&self, shard: usize) -> &ScriptVm {
        &self.states[shard]
    }

    /// The state of scripts that hold every shard, of library changes and
    /// of SCRIPT LOAD.
    pub fn plan(&self) -> &ScriptVm {
        self.states.last().expect("the plan state")
    }

    /// The script cache and libraries every state shares.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// SCRIPT FLUSH: no state runs a script cached before it once this
    /// returns; idle states free their compiled scripts now, a state running
    /// a script before its next one.
    pub fn flush_scripts(&self) {
        self.registry.flush_scripts();
        for state in &self.states {
            state.forget_flushed(false);
        }
    }

    /// INFO's figures: the states' memory summed, the shared cache's size.
    pub fn memory_stats(&self) -> MemoryStats {
        let (scripts, script_bytes) = self.registry.script_stats();
        MemoryStats {
            lua_bytes: self.states.iter().map(ScriptVm::lua_bytes).sum(),
            scripts,
            script_bytes,
        }
    }

    /// Whether a script or function runs now on any state (asked before
    /// every command).
    pub fn running(&self) -> bool {
        self.handles.iter().any(KillHandle::is_running)
    }

    /// The script that has run longest, of those running now: the one BUSY,
    /// SCRIPT KILL and FUNCTION KILL are about.
    pub fn longest_running(&self) -> Option<&KillHandle> {
        self.handles
            .iter()
            .filter_map(|h| Some((h.elapsed()?, h)))
            .max_by_key(|(elapsed, _)| *elapsed)
            .map(|(_, h)| h)
    }

    /// What FUNCTION STATS shows: the longest-running script's name, command
    /// and start.
    pub fn running_script(&self) -> Option<Running> {
        self.handles
            .iter()
            .filter_map(KillHandle::running)
            .min_by_key(|r| r.2)
    }

    /// Every state's handle (SHUTDOWN stops every running script).
    pub fn handles(&self) -> &[KillHandle] {
        &self.handles
    }
}

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
            .filter_map(|h| Some((h.started()?, h)))
            .min_by_key(|(started, _)| *started)
            .map(|(_, h)| h)
    }

    /// What FUNCTION STATS shows: the longest-running script's name, command
    /// and start.
    pub fn running_script(&self) -> Option<Running> {
        self.handles
            .iter()
            .filter_map(KillHandle::running)
            .min_by_key(|r| r.1)
    }

    /// Every state's handle (SHUTDOWN stops every running script).
    pub fn handles(&self) -> &[KillHandle] {
        &self.handles
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::Engines;
    use crate::command::table::CommandSpec;
    use crate::protocol::reply::Reply;
    use crate::scripting::Host;

    /// Scripts here call no commands.
    struct NoCommands;

    impl Host for NoCommands {
        fn call(&mut self, _: &'static CommandSpec, _: Vec<Bytes>, _: bool) -> Reply {
            Reply::Nil
        }
    }

    fn run(e: &Engines, state: usize, sha: &str) -> Reply {
        e.states[state].run(sha, &[], &[], false, &mut NoCommands)
    }

    fn fcall(e: &Engines, state: usize, name: &str) -> Reply {
        e.states[state].call_function(name, &[], &[], false, &mut NoCommands)
    }

    const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

    #[test]
    fn a_script_loaded_on_one_state_runs_on_every_state() {
        let e = Engines::new(2).unwrap();
        let sha = e.shard(0).load(b"return 7").unwrap();
        for state in 0..3 {
            assert_eq!(run(&e, state, &sha), Reply::Int(7));
        }
        assert!(e.registry().exists(&sha.to_uppercase()));
        assert_eq!(e.memory_stats().scripts, 1);
        let before = e.memory_stats().lua_bytes;
        e.flush_scripts();
        assert!(e.memory_stats().lua_bytes < before);
        for state in 0..3 {
            assert_eq!(run(&e, state, &sha), Reply::Error(NOSCRIPT.into()));
        }
        assert_eq!(e.memory_stats().scripts, 0);
    }

    #[test]
    fn a_library_change_is_published_whole_or_not_at_all() {
        let e = Engines::new(2).unwrap();
        let lib = |n: u8| {
            format!("#!lua name=l\nredis.register_function('f', function() return {n} end)")
        };
        e.plan().load_library(lib(1).as_bytes(), false).unwrap();
        assert_eq!(fcall(&e, 0, "f"), Reply::Int(1));
        // A failed change (flushed, then loaded, then refused) is undone.
        let failed = e.plan().edit_libraries(|l| {
            l.flush();
            l.load(lib(2).as_bytes(), false)?;
            l.load(b"#!lua name=l\nreturn 1", false)
        });
        assert_eq!(
            failed.unwrap_err(),
            Reply::err("Library 'l' already exists")
        );
        for state in 0..3 {
            assert_eq!(fcall(&e, state, "f"), Reply::Int(1));
        }
        e.plan().load_library(lib(3).as_bytes(), true).unwrap();
        for state in 0..3 {
            assert_eq!(fcall(&e, state, "f"), Reply::Int(3));
        }
        assert_eq!(e.registry().libraries().len(), 1);
        assert!(e.plan().delete_library("l"));
        assert_eq!(fcall(&e, 1, "f"), Reply::err("Function not found"));
    }

    #[test]
    fn states_run_scripts_at_the_same_time() {
        let e = std::sync::Arc::new(Engines::new(2).unwrap());
        let looping = e.shard(0).load(b"while true do end").unwrap();
        let quick = e.shard(1).load(b"return 1").unwrap();
        let spinner = {
            let e = e.clone();
            std::thread::spawn(move || run(&e, 0, &looping))
        };
        while !e.running() {
            std::thread::yield_now();
        }
        // Another state is free while state 0 loops.
        assert_eq!(run(&e, 1, &quick), Reply::Int(1));
        let longest = e.longest_running().unwrap();
        assert!(longest.kill());
        let reply = spinner.join().unwrap();
        assert!(
            matches!(&reply, Reply::Error(t) if t.starts_with("ERR Script killed by user with SCRIPT KILL...")),
            "{reply:?}"
        );
        assert!(e.longest_running().is_none());
    }
}

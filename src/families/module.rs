//! MODULE: cairn loads no modules. Redis's modules are C libraries built
//! against Redis's own module API and memory, which cairn does not carry,
//! so none is ever loaded. MODULE LIST answers with the empty list Redis
//! gives when none is loaded (clients look for modules with it: redis-py's
//! `module_list()`, GUIs that probe for RedisJSON or RediSearch); LOAD and
//! LOADEX answer as Redis does for a library it cannot load, and UNLOAD as
//! for a name no module has. LOAD, LOADEX and UNLOAD are behind Redis
//! 7.0's `enable-module-command` switch (default `no`), which the
//! connection checks before they run or queue
//! (`config::protected_refusal`).

use super::help_reply;
use crate::command::Args;
use crate::net::session::{Action, Session};
use crate::protocol::Reply;

/// MODULE HELP: Redis 7.0's lines.
const HELP: &[&str] = &[
    "MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LIST",
    "    Return a list of loaded modules.",
    "LOAD <path> [<arg> ...]",
    "    Load a module library from <path>, passing to it any optional arguments.",
    "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
    "    Load a module library from <path>, while passing it module configurations and optional arguments.",
    "UNLOAD <name>",
    "    Unload a module.",
    "HELP",
    "    Prints this help.",
];

/// MODULE subcommand [arg ...]. The table has checked the subcommand and
/// its arity, and the switch for the protected ones.
pub fn module(_s: &mut Session, a: Args) -> Action {
    match a.get(1).to_ascii_lowercase().as_slice() {
        b"help" => help_reply(HELP),
        b"list" => Reply::Array(Vec::new()),
        // Whatever the path and arguments, no library loads.
        b"load" | b"loadex" => {
            Reply::err("Error loading the extension. Please check the server logs.")
        }
        _ => Reply::err("Error unloading module: no such module with that name"),
    }
    .into()
}

//! Commands: the one table (name, arity, flags, key spec) that routing,
//! COMMAND and arity checks all read, the argument helpers, and dispatch.

pub mod args;
pub mod docs;
pub mod table;

pub use args::Args;
pub use table::{
    all_specs, call_spec, flag, index_of, is_container, lookup, lookup_with_subcommands,
    subcommand_of, subcommands_of, CommandSpec, KeySpec, LastLookup, SUBCOMMANDS, TABLE,
};

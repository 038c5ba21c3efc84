//! Commands: the one table (name, arity, flags, key spec) that routing,
//! COMMAND and arity checks all read, the argument helpers, and dispatch.

pub mod args;
pub mod docs;
pub mod table;

pub use args::Args;
pub use table::{
    index_of, lookup, lookup_with_subcommands, subcommands_of, CommandSpec, KeySpec, SUBCOMMANDS,
    TABLE,
};

//! TODO

use mlua::{Lua, Table};

/// Builds the library table.
pub fn create(lua: &Lua) -> mlua::Result<Table> {
    lua.create_table()
}

//! Running a cached script through Lua's C API, without mlua's protected
//! call around it.
//!
//! mlua's way into Lua from Rust (`Lua::exec_raw`) makes two C closures
//! for every call (its error handler and the function it protects), moves
//! each argument over from its reference thread and converts the results
//! back into `Value`s held by references: about 6% of an EVALSHA's CPU at
//! pipeline 16, and garbage for Lua's collector. Here the pieces of a run
//! (the real global table, `run_script`, the error handler, the names
//! KEYS and ARGV, the script) sit in registry slots made once, and a C
//! function made once sets KEYS and ARGV and calls the script; the run is
//! one `lua_pcall` of it. A result that is a number, a boolean or nil is
//! read off the stack; anything else is parked in a registry slot and
//! read through mlua, as before.

use std::ffi::{c_int, c_void};

use bytes::Bytes;
use mlua::{ffi, Function, Lua, RegistryKey, Table, Value};

/// The state and registry slots of a run (see the module doc).
pub(crate) struct RawCall {
    /// The state's main thread, as mlua runs it outside callbacks.
    state: StatePtr,
    /// [`enter`] as a Lua function.
    enter: RegistryKey,
    globals: RegistryKey,
    run_script: RegistryKey,
    handler: RegistryKey,
    keys_name: RegistryKey,
    argv_name: RegistryKey,
    /// Where a result read through mlua is parked; holds `false` between
    /// runs. Never nil: a nil slot could leave the registry's array part,
    /// and storing into it again would then allocate, which outside a
    /// protected call may not fail safely.
    result: RegistryKey,
}

/// The main thread's pointer. It lives as long as the `Lua` that owns it,
/// and is used only under the lock of the VM that holds both.
struct StatePtr(*mut ffi::lua_State);

// SAFETY: see `StatePtr`: the VM's lock keeps every use on one thread at
// a time, as mlua's own lock does for its uses.
unsafe impl Send for StatePtr {}
unsafe impl Sync for StatePtr {}

/// What [`enter`] needs, passed to it as a light userdata.
struct Params<'a> {
    slots: &'a RawCall,
    func: &'a RegistryKey,
    keys: &'a [Bytes],
    argv: &'a [Bytes],
}

impl RawCall {
    /// The slots of `lua`'s runs: `globals` is the real global table,
    /// `run_script(f, h)` runs `f` under the handler `h`.
    pub(crate) fn new(
        lua: &Lua,
        globals: &Table,
        run_script: &Function,
        handler: &Function,
    ) -> mlua::Result<RawCall> {
        let mut state = std::ptr::null_mut();
        // SAFETY: the closure only copies the pointer out.
        unsafe { lua.exec_raw::<()>((), |s| state = s)? };
        // SAFETY: `enter` follows the C function protocol (see there).
        let enter = unsafe { lua.create_c_function(enter)? };
        Ok(RawCall {
            state: StatePtr(state),
            enter: lua.create_registry_value(enter)?,
            globals: lua.create_registry_value(globals.clone())?,
            run_script: lua.create_registry_value(run_script.clone())?,
            handler: lua.create_registry_value(handler.clone())?,
            keys_name: lua.create_registry_value("KEYS")?,
            argv_name: lua.create_registry_value("ARGV")?,
            result: lua.create_registry_value(false)?,
        })
    }

    /// Sets the globals KEYS and ARGV to fresh arrays of `keys` and `argv`
    /// and runs the script in slot `func` under the error handler: what
    /// `run_script` returns, (true, the script's first result) or (false,
    /// the handled error).
    ///
    /// # Safety
    /// The caller holds the lock of the VM owning `lua` (no other thread
    /// is in the state), no Lua code of the state is running (this is not
    /// a callback), and `func` was made by `lua`.
    pub(crate) unsafe fn run(
        &self,
        lua: &Lua,
        func: &RegistryKey,
        keys: &[Bytes],
        argv: &[Bytes],
    ) -> mlua::Result<(bool, Value)> {
        let l = self.state.0;
        let top = ffi::lua_gettop(l);
        let params = Params {
            slots: self,
            func,
            keys,
            argv,
        };
        // Neither push allocates (the main thread's stack, which mlua
        // leaves empty between calls, has its LUA_MINSTACK free slots),
        // so neither can raise outside the protected call.
        ffi::lua_rawgeti_(l, ffi::LUA_REGISTRYINDEX, self.enter.id());
        ffi::lua_pushlightuserdata(l, &params as *const Params as *mut c_void);
        let status = ffi::lua_pcall(l, 1, 2, 0);
        let out = if status == ffi::LUA_OK {
            let ok = ffi::lua_toboolean(l, -2) != 0;
            match ffi::lua_type(l, -1) {
                ffi::LUA_TNIL => Ok((ok, Value::Nil)),
                ffi::LUA_TBOOLEAN => Ok((ok, Value::Boolean(ffi::lua_toboolean(l, -1) != 0))),
                ffi::LUA_TNUMBER => Ok((ok, number(ffi::lua_tonumber(l, -1)))),
                _ => self.take_parked(lua, l).map(|v| (ok, v)),
            }
        } else {
            // Only a memory error, or one raised by the error handler
            // itself (the kill switch), gets past `run_script`'s xpcall.
            self.take_parked(lua, l).and_then(|v| {
                Err(match v {
                    Value::Error(e) => *e,
                    other => mlua::Error::RuntimeError(
                        other
                            .to_string()
                            .unwrap_or_else(|_| "unknown error".to_owned()),
                    ),
                })
            })
        };
        ffi::lua_settop(l, top);
        out
    }

    /// The value on top of `l`'s stack as mlua reads it, through the
    /// result slot (emptied again after).
    unsafe fn take_parked(&self, lua: &Lua, l: *mut ffi::lua_State) -> mlua::Result<Value> {
        // A store into a slot that holds a value allocates nothing.
        ffi::lua_rawseti_(l, ffi::LUA_REGISTRYINDEX, self.result.id());
        let v = lua.registry_value::<Value>(&self.result);
        ffi::lua_pushboolean(l, 0);
        ffi::lua_rawseti_(l, ffi::LUA_REGISTRYINDEX, self.result.id());
        v
    }
}

/// A Lua number as mlua reads it with Lua 5.1: an integer when it is one
/// that fits (and not -0), else a float.
fn number(n: f64) -> Value {
    // 2^63 as a float; the half-open range leaves it out (it does not fit).
    const LIMIT: f64 = (1u64 << 63) as f64;
    let fits = (-LIMIT..LIMIT).contains(&n);
    if fits && (n as i64 as f64).to_bits() == n.to_bits() {
        Value::Integer(n as i64)
    } else {
        Value::Number(n)
    }
}

/// Called by [`RawCall::run`]'s `lua_pcall` with its `Params`: sets KEYS
/// and ARGV and calls `run_script(func, handler)`, returning its two
/// results. It holds nothing that needs dropping, so a Lua error (only a
/// memory error can come out of `run_script`'s xpcall) may unwind it.
unsafe extern "C-unwind" fn enter(l: *mut ffi::lua_State) -> c_int {
    let p = &*(ffi::lua_touserdata(l, 1) as *const Params);
    let push = |slot: &RegistryKey| ffi::lua_rawgeti_(l, ffi::LUA_REGISTRYINDEX, slot.id());
    let s = p.slots;
    ffi::lua_settop(l, 0);
    push(&s.globals);
    for (name, items) in [(&s.keys_name, p.keys), (&s.argv_name, p.argv)] {
        push(name);
        super::vm::push_array(l, items);
        // Raw: the sandbox's globals refuse ordinary stores.
        ffi::lua_rawset(l, 1);
    }
    push(&s.run_script);
    push(p.func);
    push(&s.handler);
    ffi::lua_call(l, 2, 2);
    2
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Numbers read off the stack come out as mlua's own reads make them.
    #[test]
    fn numbers_convert_as_mlua_reads_them() {
        let lua = Lua::new();
        for n in [
            3.0,
            -7.0,
            1.5,
            -0.0,
            0.0,
            2f64.powi(63),
            -(2f64.powi(63)),
            1e300,
            f64::NAN,
        ] {
            let theirs: Value = lua.load("return ...").call(n).unwrap();
            let ours = number(n);
            match (&ours, &theirs) {
                (Value::Integer(a), Value::Integer(b)) => assert_eq!(a, b, "{n}"),
                (Value::Number(a), Value::Number(b)) => {
                    assert!(
                        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                        "{n}"
                    )
                }
                _ => panic!("{n}: ours {ours:?}, mlua's {theirs:?}"),
            }
        }
    }
}

//! `bit`: 32-bit operations with LuaBitOp's semantics (the library Redis
//! bundles), written in Rust. Results are signed 32-bit numbers.

use mlua::{Lua, MultiValue, Table};

use super::convert::as_number;
use super::vm::{arg_error, type_name};

/// LuaBitOp's number-to-bits conversion: adding 2^52 + 2^51 puts the value,
/// rounded half to even, in the low 32 bits of the double, which also wraps
/// numbers outside the 32-bit range the way Redis's `bit.tobit(1e20)` does.
fn tobit(v: f64) -> i32 {
    (v + 6_755_399_441_055_744.0).to_bits() as u32 as i32
}

/// Argument `i` (0-based) as bits, with luaL_checknumber's error.
fn arg(lua: &Lua, args: &MultiValue, i: usize) -> mlua::Result<i32> {
    let v = args.get(i);
    let n = v
        .and_then(as_number)
        .or_else(|| v.and_then(|v| lua.coerce_number(v.clone()).ok().flatten()));
    match n {
        Some(n) => Ok(tobit(n)),
        None => Err(arg_error(
            lua,
            i + 1,
            format!("number expected, got {}", type_name(v)),
        )),
    }
}

/// Builds the `bit` table.
pub fn create(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "tobit",
        lua.create_function(|lua, a: MultiValue| arg(lua, &a, 0))?,
    )?;
    t.set(
        "bnot",
        lua.create_function(|lua, a: MultiValue| Ok(!arg(lua, &a, 0)?))?,
    )?;
    t.set(
        "bswap",
        lua.create_function(|lua, a: MultiValue| Ok(arg(lua, &a, 0)?.swap_bytes()))?,
    )?;
    t.set(
        "tohex",
        lua.create_function(|lua, a: MultiValue| {
            let x = arg(lua, &a, 0)? as u32;
            let mut n = if a.len() > 1 && !a[1].is_nil() {
                arg(lua, &a, 1)?
            } else {
                8
            };
            let upper = n < 0;
            if upper {
                n = n.wrapping_neg();
            }
            let n = (n as u32).min(8) as usize;
            let hex = if upper {
                format!("{x:08X}")
            } else {
                format!("{x:08x}")
            };
            Ok(hex[8 - n..].to_owned())
        })?,
    )?;
    type Fold = fn(i32, i32) -> i32;
    for (name, f) in [
        ("band", (|a, b| a & b) as Fold),
        ("bor", |a, b| a | b),
        ("bxor", |a, b| a ^ b),
    ] {
        t.set(
            name,
            lua.create_function(move |lua, a: MultiValue| {
                let mut acc = arg(lua, &a, 0)?;
                for i in 1..a.len() {
                    acc = f(acc, arg(lua, &a, i)?);
                }
                Ok(acc)
            })?,
        )?;
    }
    type Shift = fn(i32, u32) -> i32;
    for (name, f) in [
        ("lshift", (|x: i32, n| ((x as u32) << n) as i32) as Shift),
        ("rshift", |x, n| ((x as u32) >> n) as i32),
        ("arshift", |x, n| x >> n),
        ("rol", |x, n| (x as u32).rotate_left(n) as i32),
        ("ror", |x, n| (x as u32).rotate_right(n) as i32),
    ] {
        t.set(
            name,
            lua.create_function(move |lua, a: MultiValue| {
                let x = arg(lua, &a, 0)?;
                let n = arg(lua, &a, 1)? as u32 & 31;
                Ok(f(x, n))
            })?,
        )?;
    }
    Ok(t)
}

//! `cmsgpack`: MessagePack with the behaviour of lua-cmsgpack 0.4.0 as
//! Redis 7.0 bundles it (type choices, 16-level nesting cut, the subset of
//! types it decodes, error texts), written in Rust.

use mlua::{Lua, MultiValue, Table, Value};

use super::convert::as_number;
use super::vm::{arg_error, check_string, lua_error, type_name};

/// Tables nested deeper than this are packed as nil, as lua-cmsgpack does.
const MAX_NESTING: usize = 16;
/// How deep decoding may go before the input is refused: lua-cmsgpack has
/// no such limit, but hostile input must not exhaust the thread's stack.
const MAX_DECODE_DEPTH: usize = 400;

/// Builds the `cmsgpack` table.
pub fn create(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "pack",
        lua.create_function(|lua, args: MultiValue| {
            if args.is_empty() {
                return Err(arg_error(lua, 0, "MessagePack pack needs input."));
            }
            let mut out = Vec::new();
            for v in args.iter() {
                pack(v, 0, &mut out)?;
            }
            lua.create_string(&out)
        })?,
    )?;
    t.set(
        "unpack",
        lua.create_function(|lua, args: MultiValue| {
            let data = data_arg(lua, &args)?;
            let (_, values) = unpack(lua, &data, 0, 0)?;
            Ok(values.into_iter().collect::<MultiValue>())
        })?,
    )?;
    t.set(
        "unpack_one",
        lua.create_function(|lua, args: MultiValue| {
            let data = data_arg(lua, &args)?;
            let offset = int_arg(lua, &args, 1)?;
            limited(lua, &data, 1, offset)
        })?,
    )?;
    t.set(
        "unpack_limit",
        lua.create_function(|lua, args: MultiValue| {
            let data = data_arg(lua, &args)?;
            let limit = int_arg(lua, &args, 1)?;
            let offset = int_arg(lua, &args, 2)?;
            limited(lua, &data, limit, offset)
        })?,
    )?;
    t.set("_NAME", "cmsgpack")?;
    t.set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    t.set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(t)
}

fn data_arg(lua: &Lua, args: &MultiValue) -> mlua::Result<Vec<u8>> {
    check_string(lua, args.front(), 1)
}

/// Optional integer argument `i` (0-based), 0 when absent.
fn int_arg(lua: &Lua, args: &MultiValue, i: usize) -> mlua::Result<i64> {
    match args.get(i) {
        None | Some(Value::Nil) => Ok(0),
        Some(v) => as_number(v)
            .or_else(|| lua.coerce_number(v.clone()).ok().flatten())
            .map(|n| n as i64)
            .ok_or_else(|| {
                arg_error(
                    lua,
                    i + 1,
                    format!("number expected, got {}", type_name(Some(v))),
                )
            }),
    }
}

/// `unpack_one` / `unpack_limit`: the next offset (-1 at the end) first,
/// unless there is no limit.
fn limited(lua: &Lua, data: &[u8], limit: i64, offset: i64) -> mlua::Result<MultiValue> {
    if offset < 0 || limit < 0 {
        return Err(lua_error(
            lua,
            format!(
                "Invalid request to unpack with offset of {offset} and limit of {}.",
                data.len()
            ),
        ));
    }
    if offset as usize > data.len() {
        return Err(lua_error(
            lua,
            format!(
                "Start offset {offset} greater than input length {}.",
                data.len()
            ),
        ));
    }
    let (next, values) = unpack(lua, data, offset as usize, limit as usize)?;
    if limit == 0 {
        // No limit: the values alone, as `unpack` returns them.
        return Ok(values.into_iter().collect());
    }
    let next = if next >= data.len() {
        -1.0
    } else {
        next as f64
    };
    Ok(std::iter::once(Value::Number(next))
        .chain(values)
        .collect::<MultiValue>())
}

/// Decodes up to `limit` values (0 = all) from `offset`; returns the offset
/// after them and the values.
fn unpack(
    lua: &Lua,
    data: &[u8],
    offset: usize,
    limit: usize,
) -> mlua::Result<(usize, Vec<Value>)> {
    let mut d = Decoder {
        lua,
        data,
        pos: offset,
    };
    let mut values = Vec::new();
    while d.pos < data.len() && (limit == 0 || values.len() < limit) {
        values.push(d.value(0)?);
    }
    Ok((d.pos, values))
}

fn pack(v: &Value, depth: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match v {
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(_) | Value::Number(_) => pack_number(as_number(v).unwrap_or(0.0), out),
        Value::String(s) => {
            let s = s.as_bytes();
            let n = s.len();
            if n < 32 {
                out.push(0xa0 | n as u8);
            } else if n < 0x100 {
                out.extend_from_slice(&[0xd9, n as u8]);
            } else if n < 0x10000 {
                out.push(0xda);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            } else {
                out.push(0xdb);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
            out.extend_from_slice(&s);
        }
        Value::Table(t) if depth < MAX_NESTING => pack_table(t, depth + 1, out)?,
        // nil, functions, userdata, and tables too deep.
        _ => out.push(0xc0),
    }
    Ok(())
}

fn pack_number(n: f64, out: &mut Vec<u8>) {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    let integral = n.fract() == 0.0 && (-LIMIT..LIMIT).contains(&n);
    if integral {
        let i = n as i64;
        if i >= 0 {
            let u = i as u64;
            if u < 128 {
                out.push(u as u8);
            } else if u <= 0xff {
                out.extend_from_slice(&[0xcc, u as u8]);
            } else if u <= 0xffff {
                out.push(0xcd);
                out.extend_from_slice(&(u as u16).to_be_bytes());
            } else if u <= 0xffff_ffff {
                out.push(0xce);
                out.extend_from_slice(&(u as u32).to_be_bytes());
            } else {
                out.push(0xcf);
                out.extend_from_slice(&u.to_be_bytes());
            }
        } else if i >= -32 {
            out.push(i as i8 as u8);
        } else if i >= -128 {
            out.extend_from_slice(&[0xd0, i as i8 as u8]);
        } else if i >= -32768 {
            out.push(0xd1);
            out.extend_from_slice(&(i as i16).to_be_bytes());
        } else if i >= -(1 << 31) {
            out.push(0xd2);
            out.extend_from_slice(&(i as i32).to_be_bytes());
        } else {
            out.push(0xd3);
            out.extend_from_slice(&i.to_be_bytes());
        }
    } else if (n as f32) as f64 == n {
        // NaN is never equal to itself: a double, as in Redis.
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn pack_table(t: &Table, depth: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    // Two walks over the table instead of collecting its pairs: every
    // value held from Rust takes a slot of Lua's C stack (8,000 in Lua
    // 5.1), so a table of 100,000 string keys could not be held at once.
    // An array when every key is a positive integer and there are no holes.
    let (mut n, mut max, mut integer_keys) = (0usize, 0f64, true);
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        n += 1;
        match as_number(&k) {
            Some(x) if x >= 1.0 && x.fract() == 0.0 => max = max.max(x),
            _ => integer_keys = false,
        }
    }
    let is_array = integer_keys && max as usize == n;
    let (small, mid, big) = if is_array {
        (0x90, 0xdc, 0xdd)
    } else {
        (0x80, 0xde, 0xdf)
    };
    if n < 16 {
        out.push(small | n as u8);
    } else if n < 0x10000 {
        out.push(mid);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(big);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    if is_array {
        for i in 1..=n {
            pack(&t.raw_get::<Value>(i)?, depth, out)?;
        }
    } else {
        // The table is not changed in between: the walk meets the same
        // pairs in the same order.
        for pair in t.pairs::<Value, Value>() {
            let (k, v) = pair?;
            pack(&k, depth, out)?;
            pack(&v, depth, out)?;
        }
    }
    Ok(())
}

struct Decoder<'a> {
    lua: &'a Lua,
    data: &'a [u8],
    pos: usize,
}

impl Decoder<'_> {
    fn take(&mut self, n: usize) -> mlua::Result<&[u8]> {
        match self.data.get(self.pos..self.pos + n) {
            Some(b) => {
                self.pos += n;
                Ok(b)
            }
            None => Err(lua_error(self.lua, "Missing bytes in input.")),
        }
    }

    fn uint(&mut self, n: usize) -> mlua::Result<u64> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | b as u64))
    }

    fn value(&mut self, depth: usize) -> mlua::Result<Value> {
        let bad = || lua_error(self.lua, "Bad data format in input.");
        if depth > MAX_DECODE_DEPTH {
            return Err(bad());
        }
        let tag = self.take(1)?[0];
        Ok(match tag {
            0x00..=0x7f => Value::Number(tag as f64),
            0xe0..=0xff => Value::Number(tag as i8 as f64),
            0xc0 => Value::Nil,
            0xc2 => Value::Boolean(false),
            0xc3 => Value::Boolean(true),
            0xcc => Value::Number(self.uint(1)? as f64),
            0xcd => Value::Number(self.uint(2)? as f64),
            0xce => Value::Number(self.uint(4)? as f64),
            0xcf => Value::Number(self.uint(8)? as f64),
            0xd0 => Value::Number(self.uint(1)? as u8 as i8 as f64),
            0xd1 => Value::Number(self.uint(2)? as u16 as i16 as f64),
            0xd2 => Value::Number(self.uint(4)? as u32 as i32 as f64),
            0xd3 => Value::Number(self.uint(8)? as i64 as f64),
            0xca => Value::Number(f32::from_bits(self.uint(4)? as u32) as f64),
            0xcb => Value::Number(f64::from_bits(self.uint(8)?)),
            0xa0..=0xbf => self.string((tag & 0x1f) as usize)?,
            0xd9 => {
                let n = self.uint(1)? as usize;
                self.string(n)?
            }
            0xda => {
                let n = self.uint(2)? as usize;
                self.string(n)?
            }
            0xdb => {
                let n = self.uint(4)? as usize;
                self.string(n)?
            }
            0x90..=0x9f => self.array((tag & 0x0f) as usize, depth)?,
            0xdc => {
                let n = self.uint(2)? as usize;
                self.array(n, depth)?
            }
            0xdd => {
                let n = self.uint(4)? as usize;
                self.array(n, depth)?
            }
            0x80..=0x8f => self.map((tag & 0x0f) as usize, depth)?,
            0xde => {
                let n = self.uint(2)? as usize;
                self.map(n, depth)?
            }
            0xdf => {
                let n = self.uint(4)? as usize;
                self.map(n, depth)?
            }
            _ => return Err(bad()),
        })
    }

    fn string(&mut self, n: usize) -> mlua::Result<Value> {
        let b = self.take(n)?.to_vec();
        Ok(Value::String(self.lua.create_string(&b)?))
    }

    fn array(&mut self, n: usize, depth: usize) -> mlua::Result<Value> {
        let t = self.lua.create_table()?;
        for i in 1..=n {
            let v = self.value(depth + 1)?;
            t.raw_set(i, v)?;
        }
        Ok(Value::Table(t))
    }

    fn map(&mut self, n: usize, depth: usize) -> mlua::Result<Value> {
        let t = self.lua.create_table()?;
        for _ in 0..n {
            let k = self.value(depth + 1)?;
            let v = self.value(depth + 1)?;
            if !k.is_nil() {
                t.raw_set(k, v)?;
            }
        }
        Ok(Value::Table(t))
    }
}

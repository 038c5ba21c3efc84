//! `struct`: binary packing with the format language of the `struct`
//! library Redis bundles (`struct.pack`, `struct.unpack`, `struct.size`),
//! written in Rust from its documented and observed behaviour.
//!
//! Options: `<` `>` `=` endianness, `!n` maximum alignment, `x` a pad byte,
//! `b B h H l L T i[n] I[n]` integers, `f d` floats, `s` a zero-terminated
//! string, `c[n]` a fixed-size string (`c0`: the whole string when packing,
//! the previous number as length when unpacking), spaces ignored.

use mlua::{Lua, MultiValue, Table, Value};

use super::convert::as_number;
use super::vm::{arg_error, check_string, lua_error, type_name};

/// Alignment `!` sets without a number (the native maximum).
const MAX_ALIGN: usize = 8;
/// The largest `i`/`I` size the library accepts.
const MAX_INT_SIZE: usize = 32;

/// One parsed option.
enum Opt {
    Little,
    Big,
    Native,
    Align(usize),
    Pad,
    Int { size: usize, signed: bool },
    Float,
    Double,
    Zstr,
    Chars(usize),
}

/// Walks a format string option by option.
struct Format<'a> {
    fmt: &'a [u8],
    pos: usize,
}

impl Format<'_> {
    fn number(&mut self, default: usize) -> usize {
        let start = self.pos;
        while self.pos < self.fmt.len() && self.fmt[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        if start == self.pos {
            return default;
        }
        self.fmt[start..self.pos].iter().fold(0usize, |n, d| {
            n.saturating_mul(10).saturating_add((d - b'0') as usize)
        })
    }

    /// The next option, `None` at the end.
    fn next(&mut self, lua: &Lua, func_arg: usize) -> mlua::Result<Option<Opt>> {
        loop {
            let Some(&c) = self.fmt.get(self.pos) else {
                return Ok(None);
            };
            self.pos += 1;
            let opt = match c {
                b' ' => continue,
                b'<' => Opt::Little,
                b'>' => Opt::Big,
                b'=' => Opt::Native,
                b'!' => {
                    let a = self.number(MAX_ALIGN);
                    if !a.is_power_of_two() {
                        return Err(lua_error(lua, format!("alignment {a} is not a power of 2")));
                    }
                    Opt::Align(a)
                }
                b'x' => Opt::Pad,
                b'b' | b'B' => Opt::Int {
                    size: 1,
                    signed: c == b'b',
                },
                b'h' | b'H' => Opt::Int {
                    size: 2,
                    signed: c == b'h',
                },
                b'l' | b'L' => Opt::Int {
                    size: 8,
                    signed: c == b'l',
                },
                b'T' => Opt::Int {
                    size: 8,
                    signed: false,
                },
                b'i' | b'I' => {
                    let size = self.number(4);
                    if size > MAX_INT_SIZE {
                        return Err(lua_error(
                            lua,
                            format!("integral size {size} is larger than limit of {MAX_INT_SIZE}"),
                        ));
                    }
                    Opt::Int {
                        size,
                        signed: c == b'i',
                    }
                }
                b'f' => Opt::Float,
                b'd' => Opt::Double,
                b's' => Opt::Zstr,
                b'c' => Opt::Chars(self.number(1)),
                other => {
                    return Err(arg_error(
                        lua,
                        func_arg,
                        format!("invalid format option '{}'", other as char),
                    ))
                }
            };
            return Ok(Some(opt));
        }
    }
}

/// The size used for alignment, 0 when the option is never aligned.
fn align_size(opt: &Opt) -> usize {
    match opt {
        Opt::Int { size, .. } => *size,
        Opt::Float => 4,
        Opt::Double => 8,
        _ => 0,
    }
}

/// Padding needed before an item of `size` at offset `len`.
fn padding(len: usize, size: usize, max_align: usize) -> usize {
    if size == 0 {
        return 0;
    }
    let size = size.min(max_align);
    if !size.is_power_of_two() {
        return 0;
    }
    (size - (len & (size - 1))) & (size - 1)
}

fn format_arg(lua: &Lua, args: &MultiValue) -> mlua::Result<Vec<u8>> {
    check_string(lua, args.front(), 1)
}

fn put_int(out: &mut Vec<u8>, value: u64, size: usize, little: bool) {
    let mut bytes = Vec::with_capacity(size);
    let mut v = value;
    for _ in 0..size {
        bytes.push((v & 0xff) as u8);
        v = v.checked_shr(8).unwrap_or(0);
    }
    if !little {
        bytes.reverse();
    }
    out.extend_from_slice(&bytes);
}

fn pack(lua: &Lua, args: MultiValue) -> mlua::Result<mlua::LuaString> {
    let fmt = format_arg(lua, &args)?;
    let mut f = Format { fmt: &fmt, pos: 0 };
    let mut out = Vec::new();
    let mut little = true;
    let mut max_align = 1;
    let mut arg = 1;
    let number = |i: usize| -> mlua::Result<f64> {
        let v = args.get(i).cloned().unwrap_or(Value::Nil);
        as_number(&v)
            .or_else(|| lua.coerce_number(v.clone()).ok().flatten())
            .ok_or_else(|| {
                arg_error(
                    lua,
                    i + 1,
                    format!("number expected, got {}", type_name(Some(&v))),
                )
            })
    };
    // A missing argument reads as nil here, not "no value".
    let string = |i: usize| check_string(lua, Some(args.get(i).unwrap_or(&Value::Nil)), i + 1);
    while let Some(opt) = f.next(lua, 1)? {
        let pad = padding(out.len(), align_size(&opt), max_align);
        out.resize(out.len() + pad, 0);
        match opt {
            Opt::Little => little = true,
            Opt::Big => little = false,
            Opt::Native => little = cfg!(target_endian = "little"),
            Opt::Align(a) => max_align = a,
            Opt::Pad => out.push(0),
            Opt::Int { size, signed } => {
                let n = number(arg)?;
                arg += 1;
                // C casts: (long) for signed, (unsigned long) otherwise.
                let v = if signed || n < 0.0 {
                    n as i64 as u64
                } else {
                    n as u64
                };
                put_int(&mut out, v, size, little);
            }
            Opt::Float => {
                let n = number(arg)? as f32;
                arg += 1;
                let b = if little {
                    n.to_le_bytes()
                } else {
                    n.to_be_bytes()
                };
                out.extend_from_slice(&b);
            }
            Opt::Double => {
                let n = number(arg)?;
                arg += 1;
                let b = if little {
                    n.to_le_bytes()
                } else {
                    n.to_be_bytes()
                };
                out.extend_from_slice(&b);
            }
            Opt::Zstr => {
                let s = string(arg)?;
                arg += 1;
                out.extend_from_slice(&s);
                out.push(0);
            }
            Opt::Chars(size) => {
                let s = string(arg)?;
                arg += 1;
                let size = if size == 0 { s.len() } else { size };
                if s.len() < size {
                    // The library names the argument after the string.
                    return Err(arg_error(lua, arg + 1, "string too short"));
                }
                out.extend_from_slice(&s[..size]);
            }
        }
    }
    lua.create_string(&out)
}

fn unpack(lua: &Lua, args: MultiValue) -> mlua::Result<MultiValue> {
    let fmt = format_arg(lua, &args)?;
    let data = check_string(lua, args.get(1), 2)?;
    let init = match args.get(2) {
        None | Some(Value::Nil) => 1,
        Some(v) => as_number(v).map(|n| n as i64).ok_or_else(|| {
            arg_error(
                lua,
                3,
                format!("number expected, got {}", type_name(Some(v))),
            )
        })?,
    };
    if init == 0 {
        return Err(arg_error(lua, 3, "offset must be 1 or greater"));
    }
    let too_short = || arg_error(lua, 2, "data string too short");
    if init < 0 {
        return Err(too_short());
    }
    let mut pos = (init - 1) as usize;
    let mut f = Format { fmt: &fmt, pos: 0 };
    let mut little = true;
    let mut max_align = 1;
    let mut out: Vec<Value> = Vec::new();
    while let Some(opt) = f.next(lua, 1)? {
        pos += padding(pos, align_size(&opt), max_align);
        match opt {
            Opt::Little => little = true,
            Opt::Big => little = false,
            Opt::Native => little = cfg!(target_endian = "little"),
            Opt::Align(a) => max_align = a,
            Opt::Pad => pos += 1,
            Opt::Int { size, signed } => {
                let bytes = data.get(pos..pos + size).ok_or_else(too_short)?;
                let mut l: u64 = 0;
                for i in 0..size {
                    let b = if little {
                        bytes[size - 1 - i]
                    } else {
                        bytes[i]
                    };
                    l = (l << 8) | b as u64;
                }
                let v = if signed {
                    // Sign-extend from the item's width (shift counts wrap
                    // at 64 as on x86, for the odd sizes above 8).
                    let mask = !0u64 << ((size * 8 - 1) % 64);
                    let l = if l & mask != 0 { l | mask } else { l };
                    l as i64 as f64
                } else {
                    l as f64
                };
                out.push(Value::Number(v));
                pos += size;
            }
            Opt::Float => {
                let b: [u8; 4] = data
                    .get(pos..pos + 4)
                    .ok_or_else(too_short)?
                    .try_into()
                    .expect("4 bytes");
                let v = if little {
                    f32::from_le_bytes(b)
                } else {
                    f32::from_be_bytes(b)
                };
                out.push(Value::Number(v as f64));
                pos += 4;
            }
            Opt::Double => {
                let b: [u8; 8] = data
                    .get(pos..pos + 8)
                    .ok_or_else(too_short)?
                    .try_into()
                    .expect("8 bytes");
                let v = if little {
                    f64::from_le_bytes(b)
                } else {
                    f64::from_be_bytes(b)
                };
                out.push(Value::Number(v));
                pos += 8;
            }
            Opt::Zstr => {
                let rest = data.get(pos..).ok_or_else(too_short)?;
                let Some(len) = rest.iter().position(|&c| c == 0) else {
                    return Err(lua_error(lua, "unfinished string in data"));
                };
                out.push(Value::String(lua.create_string(&rest[..len])?));
                pos += len + 1;
            }
            Opt::Chars(size) => {
                let size = if size == 0 {
                    match out.last().and_then(as_number) {
                        Some(n) => {
                            out.pop();
                            n as usize
                        }
                        None => return Err(lua_error(lua, "format 'c0' needs a previous size")),
                    }
                } else {
                    size
                };
                let bytes = data.get(pos..pos + size).ok_or_else(too_short)?;
                out.push(Value::String(lua.create_string(bytes)?));
                pos += size;
            }
        }
    }
    out.push(Value::Number((pos + 1) as f64));
    Ok(out.into_iter().collect())
}

fn size(lua: &Lua, args: MultiValue) -> mlua::Result<usize> {
    let fmt = format_arg(lua, &args)?;
    let mut f = Format { fmt: &fmt, pos: 0 };
    let mut max_align = 1;
    let mut len = 0usize;
    while let Some(opt) = f.next(lua, 1)? {
        len += padding(len, align_size(&opt), max_align);
        len += match opt {
            Opt::Align(a) => {
                max_align = a;
                0
            }
            Opt::Little | Opt::Big | Opt::Native => 0,
            Opt::Pad => 1,
            Opt::Int { size, .. } => size,
            Opt::Float => 4,
            Opt::Double => 8,
            Opt::Zstr => return Err(arg_error(lua, 1, "option 's' has no fixed size")),
            Opt::Chars(0) => return Err(arg_error(lua, 1, "option 'c0' has no fixed size")),
            Opt::Chars(n) => n,
        };
    }
    Ok(len)
}

/// Builds the `struct` table.
pub fn create(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set("pack", lua.create_function(pack)?)?;
    t.set("unpack", lua.create_function(unpack)?)?;
    t.set("size", lua.create_function(size)?)?;
    Ok(t)
}

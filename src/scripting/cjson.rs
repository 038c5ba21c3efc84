//! `cjson`: JSON encode/decode with the behaviour Redis scripts see from
//! Redis 7.0's bundled Lua CJSON 2.1.0 (error texts, `%.14g` numbers,
//! sparse-array rules, nesting limits, `cjson.null`), written in Rust.

use std::sync::Arc;

use mlua::{Function, LightUserData, Lua, MultiValue, Table, Value};
use parking_lot::Mutex;

use super::convert::{as_number, fmt_g};
use super::vm::{arg_error, check_string, lua_error, type_name};

/// Settings a script can change through `cjson.encode_max_depth` and
/// friends. They live as long as the VM, as in Redis.
#[derive(Clone, Copy)]
struct Config {
    encode_max_depth: usize,
    decode_max_depth: usize,
    precision: usize,
    sparse_convert: bool,
    sparse_ratio: usize,
    sparse_safe: usize,
    encode_invalid_numbers: bool,
    decode_invalid_numbers: bool,
    keep_buffer: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            precision: 14,
            sparse_convert: false,
            sparse_ratio: 2,
            sparse_safe: 10,
            encode_invalid_numbers: false,
            decode_invalid_numbers: true,
            keep_buffer: true,
        }
    }
}

/// `cjson.null`: a NULL light userdata, printed `userdata: (nil)`.
pub fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

/// Builds the `cjson` table (each call has its own settings, as `cjson.new`).
pub fn create(lua: &Lua) -> mlua::Result<Table> {
    let cfg = Arc::new(Mutex::new(Config::default()));
    let t = lua.create_table()?;
    let c = cfg.clone();
    t.set(
        "encode",
        lua.create_function(move |lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(arg_error(lua, 1, "expected 1 argument"));
            }
            let cfg = *c.lock();
            let mut out = Vec::new();
            encode(lua, &cfg, &args[0], &mut out)?;
            lua.create_string(&out)
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "decode",
        lua.create_function(move |lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(arg_error(lua, 1, "expected 1 argument"));
            }
            let text = check_string(lua, args.front(), 1)?;
            let cfg = *c.lock();
            decode(lua, &cfg, &text)
        })?,
    )?;
    t.set("null", null())?;
    t.set("_NAME", "cjson")?;
    t.set("_VERSION", "2.1.0")?;
    config_functions(lua, &t, &cfg)?;
    t.set(
        "new",
        lua.create_function(|lua, _: MultiValue| create(lua))?,
    )?;
    Ok(t)
}

/// The setters/getters; each returns the current value(s).
fn config_functions(lua: &Lua, t: &Table, cfg: &Arc<Mutex<Config>>) -> mlua::Result<()> {
    let int = |lua: &Lua, v: Option<&Value>, lo: f64, hi: f64| -> mlua::Result<Option<usize>> {
        match v {
            None | Some(Value::Nil) => Ok(None),
            Some(v) => match as_number(v) {
                Some(n) if n >= lo && n <= hi => Ok(Some(n as usize)),
                _ => Err(arg_error(
                    lua,
                    1,
                    format!("expected integer between {lo} and {hi}"),
                )),
            },
        }
    };
    let c = cfg.clone();
    t.set(
        "encode_max_depth",
        lua.create_function(move |lua, args: MultiValue| {
            if let Some(n) = int(lua, args.front(), 1.0, i32::MAX as f64)? {
                c.lock().encode_max_depth = n;
            }
            Ok(c.lock().encode_max_depth)
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "decode_max_depth",
        lua.create_function(move |lua, args: MultiValue| {
            if let Some(n) = int(lua, args.front(), 1.0, i32::MAX as f64)? {
                c.lock().decode_max_depth = n;
            }
            Ok(c.lock().decode_max_depth)
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "encode_number_precision",
        lua.create_function(move |lua, args: MultiValue| {
            if let Some(n) = int(lua, args.front(), 1.0, 14.0)? {
                c.lock().precision = n;
            }
            Ok(c.lock().precision)
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "encode_sparse_array",
        lua.create_function(move |_, args: MultiValue| {
            let mut g = c.lock();
            if let Some(Value::Boolean(b)) = args.front() {
                g.sparse_convert = *b;
            }
            if let Some(n) = args.get(1).and_then(as_number) {
                g.sparse_ratio = n.max(0.0) as usize;
            }
            if let Some(n) = args.get(2).and_then(as_number) {
                g.sparse_safe = n.max(0.0) as usize;
            }
            Ok((g.sparse_convert, g.sparse_ratio, g.sparse_safe))
        })?,
    )?;
    for (name, field) in [
        ("encode_invalid_numbers", 0),
        ("decode_invalid_numbers", 1),
        ("encode_keep_buffer", 2),
    ] {
        let c = cfg.clone();
        t.set(
            name,
            lua.create_function(move |_, args: MultiValue| {
                let mut g = c.lock();
                let slot = match field {
                    0 => &mut g.encode_invalid_numbers,
                    1 => &mut g.decode_invalid_numbers,
                    _ => &mut g.keep_buffer,
                };
                if let Some(v) = args.front() {
                    if !v.is_nil() {
                        *slot = !matches!(v, Value::Boolean(false));
                    }
                }
                Ok(*slot)
            })?,
        )?;
    }
    Ok(())
}

/// One open table while encoding, and where its walk is: the next array
/// slot, or the last key Lua's `next` gave. Entries are fetched one at a
/// time: every value held from Rust takes a slot of Lua's C stack (8,000
/// in Lua 5.1), so a table of 100,000 strings could not be held at once.
struct Open {
    table: Table,
    /// `Some(len)` for an array of `len` slots.
    array: Option<usize>,
    /// Entries written so far.
    pos: usize,
    /// An object's last key (nil before the first).
    key: Value,
}

impl Open {
    /// The next entry (key `None` for an array slot), or `None` when done.
    fn next(&mut self, next: &Function) -> mlua::Result<Option<(Option<Value>, Value)>> {
        if let Some(len) = self.array {
            if self.pos == len {
                return Ok(None);
            }
            self.pos += 1;
            return Ok(Some((None, self.table.raw_get::<Value>(self.pos)?)));
        }
        let (k, v): (Value, Value) = next.call((self.table.clone(), self.key.clone()))?;
        if k.is_nil() {
            return Ok(None);
        }
        self.pos += 1;
        self.key = k.clone();
        Ok(Some((Some(k), v)))
    }
}

/// Encodes `v`. Iterative, with its own stack of open tables: 1000 levels
/// of nesting must not exhaust the thread's stack.
fn encode(lua: &Lua, cfg: &Config, v: &Value, out: &mut Vec<u8>) -> mlua::Result<()> {
    // Lua's own `next` walks objects (scripts cannot replace globals).
    let next: Function = lua.globals().get("next")?;
    let mut stack: Vec<Open> = Vec::new();
    let mut cur = v.clone();
    loop {
        match &cur {
            Value::Table(t) => {
                let depth = stack.len() + 1;
                if depth > cfg.encode_max_depth {
                    return Err(lua_error(
                        lua,
                        format!("Cannot serialise, excessive nesting ({depth})"),
                    ));
                }
                let open = Open {
                    table: t.clone(),
                    array: array_length(lua, cfg, t)?,
                    pos: 0,
                    key: Value::Nil,
                };
                out.push(if open.array.is_some() { b'[' } else { b'{' });
                stack.push(open);
            }
            scalar => encode_scalar(lua, cfg, scalar, out)?,
        }
        // Next entry of the innermost open table, closing finished ones.
        loop {
            let Some(top) = stack.last_mut() else {
                return Ok(());
            };
            let first = top.pos == 0;
            let Some((k, v)) = top.next(&next)? else {
                out.push(if top.array.is_some() { b']' } else { b'}' });
                stack.pop();
                continue;
            };
            if !first {
                out.push(b',');
            }
            if let Some(k) = k {
                encode_key(lua, cfg, &k, out)?;
            }
            cur = v;
            break;
        }
    }
}

fn encode_key(lua: &Lua, cfg: &Config, k: &Value, out: &mut Vec<u8>) -> mlua::Result<()> {
    match k {
        Value::String(s) => escape(&s.as_bytes(), out),
        Value::Integer(_) | Value::Number(_) => {
            out.push(b'"');
            out.extend_from_slice(fmt_g(as_number(k).unwrap_or(0.0), cfg.precision).as_bytes());
            out.push(b'"');
        }
        other => {
            return Err(lua_error(
                lua,
                format!(
                    "Cannot serialise {}: table key must be a number or string",
                    type_name(Some(other))
                ),
            ))
        }
    }
    out.push(b':');
    Ok(())
}

fn encode_scalar(lua: &Lua, cfg: &Config, v: &Value, out: &mut Vec<u8>) -> mlua::Result<()> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(_) | Value::Number(_) => {
            let n = as_number(v).unwrap_or(0.0);
            if !n.is_finite() && !cfg.encode_invalid_numbers {
                return Err(lua_error(
                    lua,
                    "Cannot serialise number: must not be NaN or Inf",
                ));
            }
            out.extend_from_slice(fmt_g(n, cfg.precision).as_bytes());
        }
        Value::String(s) => escape(&s.as_bytes(), out),
        other => {
            return Err(lua_error(
                lua,
                format!(
                    "Cannot serialise {}: type not supported",
                    type_name(Some(other))
                ),
            ))
        }
    }
    Ok(())
}

/// `Some(n)` when the table is an array of `n` slots (holes become null);
/// `None` for an object. Refuses excessively sparse arrays as CJSON does.
fn array_length(lua: &Lua, cfg: &Config, t: &Table) -> mlua::Result<Option<usize>> {
    let mut max = 0usize;
    let mut items = 0usize;
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        match as_number(&k) {
            Some(n) if n >= 1.0 && n.floor() == n && n < 1e18 => {
                max = max.max(n as usize);
                items += 1;
            }
            _ => return Ok(None),
        }
    }
    if cfg.sparse_ratio > 0 && max > items * cfg.sparse_ratio && max > cfg.sparse_safe {
        if !cfg.sparse_convert {
            return Err(lua_error(
                lua,
                "Cannot serialise table: excessively sparse array",
            ));
        }
        return Ok(None);
    }
    Ok(if max > 0 { Some(max) } else { None })
}

fn escape(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &c in s {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\x08' => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\x0c' => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            _ => out.push(c),
        }
    }
    out.push(b'"');
}

/// A token of the JSON text and its (0-based) start.
#[derive(Debug, Clone)]
enum Tok {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Str(Vec<u8>),
    Num(f64),
    Bool(bool),
    Null,
    Colon,
    Comma,
    End,
    /// A lexing error; the text is what "found ..." prints.
    Error(&'static str),
}

impl Tok {
    fn name(&self) -> &'static str {
        match self {
            Tok::ObjBegin => "T_OBJ_BEGIN",
            Tok::ObjEnd => "T_OBJ_END",
            Tok::ArrBegin => "T_ARR_BEGIN",
            Tok::ArrEnd => "T_ARR_END",
            Tok::Str(_) => "T_STRING",
            Tok::Num(_) => "T_NUMBER",
            Tok::Bool(_) => "T_BOOLEAN",
            Tok::Null => "T_NULL",
            Tok::Colon => "T_COLON",
            Tok::Comma => "T_COMMA",
            Tok::End => "T_END",
            Tok::Error(e) => e,
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    depth: usize,
    max_depth: usize,
    invalid_numbers: bool,
}

fn decode(lua: &Lua, cfg: &Config, text: &[u8]) -> mlua::Result<Value> {
    // CJSON reads a C string: a NUL ends the text.
    let end = text.iter().position(|&c| c == 0).unwrap_or(text.len());
    let mut p = Parser {
        s: &text[..end],
        pos: 0,
        depth: 0,
        max_depth: cfg.decode_max_depth,
        invalid_numbers: cfg.decode_invalid_numbers,
    };
    let (tok, at) = p.next();
    let v = p.value(lua, tok, at)?;
    let (tok, at) = p.next();
    if !matches!(tok, Tok::End) {
        return Err(expected(lua, "the end", &tok, at));
    }
    Ok(v)
}

fn expected(lua: &Lua, what: &str, tok: &Tok, at: usize) -> mlua::Error {
    lua_error(
        lua,
        format!(
            "Expected {what} but found {} at character {}",
            tok.name(),
            at + 1
        ),
    )
}

impl Parser<'_> {
    fn next(&mut self) -> (Tok, usize) {
        while self.pos < self.s.len() && matches!(self.s[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
        let at = self.pos;
        let Some(&c) = self.s.get(self.pos) else {
            return (Tok::End, at);
        };
        let single = match c {
            b'{' => Some(Tok::ObjBegin),
            b'}' => Some(Tok::ObjEnd),
            b'[' => Some(Tok::ArrBegin),
            b']' => Some(Tok::ArrEnd),
            b':' => Some(Tok::Colon),
            b',' => Some(Tok::Comma),
            _ => None,
        };
        if let Some(t) = single {
            self.pos += 1;
            return (t, at);
        }
        if c == b'"' {
            // A bad string is reported where reading stopped, not at its
            // opening quote.
            let tok = self.string();
            let at = if matches!(tok, Tok::Error(_)) {
                self.pos
            } else {
                at
            };
            return (tok, at);
        }
        if c == b'-' || c.is_ascii_digit() || (self.invalid_numbers && self.invalid_number()) {
            return match strtod(&self.s[self.pos..]) {
                Some((n, used)) => {
                    self.pos += used;
                    (Tok::Num(n), at)
                }
                None => (Tok::Error("invalid number"), at),
            };
        }
        for (word, tok) in [
            (&b"true"[..], Tok::Bool(true)),
            (b"false", Tok::Bool(false)),
            (b"null", Tok::Null),
        ] {
            if self.s[self.pos..].starts_with(word) {
                self.pos += word.len();
                return (tok, at);
            }
        }
        (Tok::Error("invalid token"), at)
    }

    /// Numbers JSON forbids but CJSON reads when decode_invalid_numbers is
    /// on: a leading `+`, hex, leading zeros, inf and nan.
    fn invalid_number(&self) -> bool {
        let s = &self.s[self.pos..];
        let mut i = 0;
        if s.first() == Some(&b'+') {
            return true;
        }
        if s.first() == Some(&b'-') {
            i = 1;
        }
        match s.get(i) {
            Some(b'0') => matches!(s.get(i + 1), Some(b'x' | b'X' | b'0'..=b'9')),
            Some(c) if c.is_ascii_digit() => false,
            _ => {
                let rest = s[i..].to_ascii_lowercase();
                rest.starts_with(b"inf") || rest.starts_with(b"nan")
            }
        }
    }

    fn string(&mut self) -> Tok {
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.s.get(self.pos) else {
                return Tok::Error("unexpected end of string");
            };
            match c {
                b'"' => {
                    self.pos += 1;
                    return Tok::Str(out);
                }
                b'\\' => {
                    let esc = self.s.get(self.pos + 1).copied();
                    let simple = match esc {
                        Some(b'"') => Some(b'"'),
                        Some(b'\\') => Some(b'\\'),
                        Some(b'/') => Some(b'/'),
                        Some(b'b') => Some(8),
                        Some(b'f') => Some(12),
                        Some(b'n') => Some(b'\n'),
                        Some(b'r') => Some(b'\r'),
                        Some(b't') => Some(b'\t'),
                        _ => None,
                    };
                    if let Some(b) = simple {
                        out.push(b);
                        self.pos += 2;
                    } else if esc == Some(b'u') {
                        match self.unicode() {
                            Some((ch, used)) => {
                                let mut buf = [0u8; 4];
                                out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                                self.pos += used;
                            }
                            None => return Tok::Error("invalid unicode escape code"),
                        }
                    } else {
                        return Tok::Error("invalid escape code");
                    }
                }
                _ => {
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// Decodes `\uXXXX` (a surrogate pair takes two escapes) at `pos`.
    fn unicode(&self) -> Option<(char, usize)> {
        let hex = |at: usize| -> Option<u32> {
            let h = self.s.get(at..at + 4)?;
            u32::from_str_radix(std::str::from_utf8(h).ok()?, 16)
                .ok()
                .filter(|_| h.iter().all(u8::is_ascii_hexdigit))
        };
        let hi = hex(self.pos + 2)?;
        match hi {
            0xD800..=0xDBFF => {
                if self.s.get(self.pos + 6..self.pos + 8) != Some(b"\\u") {
                    return None;
                }
                let lo = hex(self.pos + 8)?;
                if !(0xDC00..=0xDFFF).contains(&lo) {
                    return None;
                }
                let cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                Some((char::from_u32(cp)?, 12))
            }
            0xDC00..=0xDFFF => None,
            cp => Some((char::from_u32(cp)?, 6)),
        }
    }

    /// Parses one value starting with `tok`. Iterative, with its own stack
    /// of open containers: 1000 levels of nesting must not exhaust the
    /// thread's stack.
    fn value(&mut self, lua: &Lua, mut tok: Tok, mut at: usize) -> mlua::Result<Value> {
        // Open containers: the table, the next array index (arrays) or the
        // key waiting for its value (objects).
        let mut stack: Vec<(Table, Option<i64>, Vec<u8>)> = Vec::new();
        loop {
            let mut v = match tok {
                Tok::Str(s) => Value::String(lua.create_string(&s)?),
                Tok::Num(n) => Value::Number(n),
                Tok::Bool(b) => Value::Boolean(b),
                Tok::Null => null(),
                Tok::ArrBegin | Tok::ObjBegin => {
                    self.depth += 1;
                    if self.depth > self.max_depth {
                        return Err(lua_error(
                            lua,
                            format!(
                                "Found too many nested data structures ({}) at character {}",
                                self.depth,
                                at + 1
                            ),
                        ));
                    }
                    let t = lua.create_table()?;
                    let is_array = matches!(tok, Tok::ArrBegin);
                    let (first, first_at) = self.next();
                    let empty = if is_array {
                        matches!(first, Tok::ArrEnd)
                    } else {
                        matches!(first, Tok::ObjEnd)
                    };
                    if empty {
                        self.depth -= 1;
                        Value::Table(t)
                    } else if is_array {
                        stack.push((t, Some(1), Vec::new()));
                        (tok, at) = (first, first_at);
                        continue;
                    } else {
                        let key = self.key(lua, first, first_at)?;
                        stack.push((t, None, key));
                        (tok, at) = self.next();
                        continue;
                    }
                }
                other => return Err(expected(lua, "value", &other, at)),
            };
            // Store the finished value in its container; close containers
            // until one has more to read.
            loop {
                let Some((t, index, key)) = stack.last_mut() else {
                    return Ok(v);
                };
                match index {
                    Some(i) => {
                        t.raw_set(*i, v)?;
                        *i += 1;
                    }
                    None => t.raw_set(lua.create_string(&*key)?, v)?,
                }
                let is_array = index.is_some();
                let (sep, sep_at) = self.next();
                match (sep, is_array) {
                    (Tok::ArrEnd, true) | (Tok::ObjEnd, false) => {
                        let (t, _, _) = stack.pop().expect("an open container");
                        self.depth -= 1;
                        v = Value::Table(t);
                    }
                    (Tok::Comma, true) => {
                        (tok, at) = self.next();
                        break;
                    }
                    (Tok::Comma, false) => {
                        let (k, k_at) = self.next();
                        let k = self.key(lua, k, k_at)?;
                        if let Some(top) = stack.last_mut() {
                            top.2 = k;
                        }
                        (tok, at) = self.next();
                        break;
                    }
                    (other, true) => {
                        return Err(expected(lua, "comma or array end", &other, sep_at))
                    }
                    (other, false) => {
                        return Err(expected(lua, "comma or object end", &other, sep_at))
                    }
                }
            }
        }
    }

    /// An object key and the colon after it.
    fn key(&mut self, lua: &Lua, tok: Tok, at: usize) -> mlua::Result<Vec<u8>> {
        let Tok::Str(key) = tok else {
            return Err(expected(lua, "object key string", &tok, at));
        };
        let (colon, colon_at) = self.next();
        if !matches!(colon, Tok::Colon) {
            return Err(expected(lua, "colon", &colon, colon_at));
        }
        Ok(key)
    }
}

/// The longest prefix of `s` that C's `strtod` reads: decimal (with
/// exponent), hexadecimal integers, `inf`/`infinity`/`nan`. Returns the
/// value and the bytes used, or `None` when nothing parses.
pub(crate) fn strtod(s: &[u8]) -> Option<(f64, usize)> {
    let mut i = 0;
    let neg = match s.first() {
        Some(b'-') => {
            i = 1;
            true
        }
        Some(b'+') => {
            i = 1;
            false
        }
        _ => false,
    };
    let sign = if neg { -1.0 } else { 1.0 };
    let rest = &s[i..];
    let lower: Vec<u8> = rest.iter().take(8).map(u8::to_ascii_lowercase).collect();
    if lower.starts_with(b"infinity") {
        return Some((sign * f64::INFINITY, i + 8));
    }
    if lower.starts_with(b"inf") {
        return Some((sign * f64::INFINITY, i + 3));
    }
    if lower.starts_with(b"nan") {
        return Some((sign * f64::NAN, i + 3));
    }
    if lower.starts_with(b"0x") {
        let digits = rest[2..]
            .iter()
            .take_while(|c| c.is_ascii_hexdigit())
            .count();
        if digits > 0 {
            let v = rest[2..2 + digits].iter().fold(0f64, |acc, &c| {
                acc * 16.0 + (c as char).to_digit(16).unwrap_or(0) as f64
            });
            return Some((sign * v, i + 2 + digits));
        }
        return Some((sign * 0.0, i + 1));
    }
    let mut j = 0;
    let int_digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    j += int_digits;
    let mut frac_digits = 0;
    if rest.get(j) == Some(&b'.') {
        frac_digits = rest[j + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if int_digits + frac_digits > 0 {
            j += 1 + frac_digits;
        }
    }
    if int_digits + frac_digits == 0 {
        return None;
    }
    if matches!(rest.get(j), Some(b'e' | b'E')) {
        let mut k = j + 1;
        if matches!(rest.get(k), Some(b'+' | b'-')) {
            k += 1;
        }
        let exp_digits = rest[k..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp_digits > 0 {
            j = k + exp_digits;
        }
    }
    let text = std::str::from_utf8(&rest[..j]).ok()?;
    let text = text.strip_suffix('.').unwrap_or(text);
    let v: f64 = text.parse().ok()?;
    Some((sign * v, i + j))
}

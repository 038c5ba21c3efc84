//! Conversions between Lua values and [`Reply`] trees, both ways, as Redis
//! 7.0 does them, plus the C number formats (`%.14g`, `%.17g`) Redis's Lua
//! code relies on.

use bytes::Bytes;
use mlua::{Lua, Table, Value};

use crate::protocol::reply::Reply;

/// How deep a returned table may nest before the conversion gives up, as
/// Redis does when the Lua stack cannot grow ("reached lua stack limit").
/// Lower than Redis's limit so that a debug build's 2 MB thread stack holds.
const MAX_DEPTH: usize = 400;

/// C's `printf("%.<prec>g", v)` as glibc prints it (`-nan` for the NaN that
/// x86 arithmetic produces, `inf`, trailing zeros trimmed).
pub fn fmt_g(v: f64, prec: usize) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    let prec = prec.max(1);
    // `{:.Ne}` rounds exactly (ties to even), like glibc.
    let sci = format!("{:.*e}", prec - 1, v);
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` has an exponent");
    let exp: i32 = exp.parse().expect("`{:e}` exponent is an integer");
    if exp < -4 || exp >= prec as i32 {
        let mantissa = trim_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        let decimals = (prec as i32 - 1 - exp).max(0) as usize;
        trim_zeros(&format!("{:.*}", decimals, v)).to_owned()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// A Lua number as C's `(long long)` cast gives it on x86: out of range and
/// NaN become `i64::MIN` (Redis replies `:-9223372036854775808` for `1e30`).
pub fn number_to_int(v: f64) -> i64 {
    // 2^63 is exact in f64; anything at or beyond it does not fit.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if !(-LIMIT..LIMIT).contains(&v) {
        i64::MIN
    } else {
        v as i64
    }
}

/// A Lua number as a Lua string (`%.14g`, what `tostring` prints).
pub fn lua_number_string(v: f64) -> String {
    fmt_g(v, 14)
}

/// The value of a number variant, whichever way mlua split it.
pub fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        _ => None,
    }
}

/// Converts what a script returned into a reply. `resp3` is the script's own
/// protocol (`redis.setresp(3)`), which decides how booleans come out.
pub fn lua_to_reply(v: &Value, resp3: bool) -> Reply {
    to_reply(v, resp3, 0)
}

fn to_reply(v: &Value, resp3: bool, depth: usize) -> Reply {
    match v {
        Value::String(s) => Reply::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Integer(i) => Reply::Int(*i),
        Value::Number(n) => Reply::Int(number_to_int(*n)),
        Value::Boolean(b) if resp3 => Reply::Bool(*b),
        Value::Boolean(true) => Reply::Int(1),
        Value::Table(t) => table_to_reply(t, resp3, depth),
        // nil, false (RESP2), functions, userdata...: Redis replies null.
        _ => Reply::Nil,
    }
}

fn table_to_reply(t: &Table, resp3: bool, depth: usize) -> Reply {
    if depth >= MAX_DEPTH {
        return Reply::err("reached lua stack limit");
    }
    // Redis looks the special fields up raw (a metatable's __index is not
    // consulted), in this order, and only honours them with the right type.
    if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
        return Reply::Error(e.to_string_lossy());
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
        return Reply::Status(one_line(s.to_string_lossy()));
    }
    if let Ok(d) = t.raw_get::<Value>("double") {
        if let Some(d) = as_number(&d) {
            return Reply::Double(d);
        }
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("big_number") {
        return Reply::BigNumber(one_line(s.to_string_lossy()));
    }
    if let Ok(Value::Table(m)) = t.raw_get::<Value>("map") {
        let mut pairs = Vec::new();
        for (k, v) in m.pairs::<Value, Value>().flatten() {
            pairs.push((
                to_reply(&k, resp3, depth + 1),
                to_reply(&v, resp3, depth + 1),
            ));
        }
        return Reply::Map(pairs);
    }
    if let Ok(Value::Table(s)) = t.raw_get::<Value>("set") {
        let mut items = Vec::new();
        for (k, _) in s.pairs::<Value, Value>().flatten() {
            items.push(to_reply(&k, resp3, depth + 1));
        }
        return Reply::Set(items);
    }
    if let Ok(Value::Table(v)) = t.raw_get::<Value>("verbatim_string") {
        let format = v.raw_get::<Value>("format").ok();
        let text = v.raw_get::<Value>("string").ok();
        if let (Some(Value::String(f)), Some(Value::String(s))) = (format, text) {
            // Reply::Verbatim only carries `txt`; other formats keep their
            // text as a bulk string (what RESP2 clients see anyway).
            return match (f.as_bytes().as_ref(), s.to_str()) {
                (b"txt", Ok(text)) => Reply::Verbatim(text.to_owned()),
                _ => Reply::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
            };
        }
    }
    // An array: elements 1, 2, ... up to the first nil.
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => items.push(to_reply(&v, resp3, depth + 1)),
        }
    }
    Reply::Array(items)
}

/// A status or big number a script returns, made one line as Redis makes
/// it: each CR and LF becomes a space.
fn one_line(s: String) -> String {
    if s.contains(['\r', '\n']) {
        s.replace(['\r', '\n'], " ")
    } else {
        s
    }
}

/// Converts a command's reply into the Lua value `redis.call` returns.
/// Errors become `{err=...}` tables (the caller decides whether to raise).
/// `resp3` is the script's protocol: RESP2 scripts see the RESP2 shape
/// (maps flattened, doubles as strings, nulls as `false`).
pub fn reply_to_lua(lua: &Lua, r: &Reply, resp3: bool) -> mlua::Result<Value> {
    Ok(match r {
        Reply::Ok => status(lua, "OK")?,
        Reply::Simple(s) => status(lua, s)?,
        Reply::Status(s) => status(lua, s)?,
        Reply::Error(e) => error_table(lua, e)?,
        Reply::Int(i) => Value::Number(*i as f64),
        Reply::Bulk(b) => Value::String(lua.create_string(b)?),
        Reply::Nil | Reply::NilArray => {
            if resp3 {
                Value::Nil
            } else {
                Value::Boolean(false)
            }
        }
        Reply::Array(items) => array(lua, items, resp3)?,
        // Several frames written in a row (only DEBUG PROTOCOL makes them,
        // which scripts reach under DEBUG SET-DISABLE-DENY-SCRIPTS): the
        // script gets the first reply, past the attributes that lead it,
        // as Redis's reply parser does.
        Reply::Frames(items) => match items.iter().find(|f| !matches!(f, Reply::Attribute(_))) {
            Some(first) => reply_to_lua(lua, first, resp3)?,
            None => Value::Nil,
        },
        // Redis's parser makes nothing of a push: the script gets nil.
        Reply::Push(_) => Value::Nil,
        Reply::Set(items) if resp3 => {
            let set = lua.create_table()?;
            for item in items {
                let k = reply_to_lua(lua, item, resp3)?;
                if !k.is_nil() {
                    set.raw_set(k, true)?;
                }
            }
            wrap(lua, "set", set)?
        }
        Reply::Set(items) => array(lua, items, resp3)?,
        // An attribute on its own (only DEBUG PROTOCOL makes them, as a
        // frame before its reply): nothing.
        Reply::Attribute(_) => Value::Nil,
        Reply::Map(pairs) if resp3 => {
            let map = lua.create_table()?;
            for (k, v) in pairs {
                let k = reply_to_lua(lua, k, resp3)?;
                if !k.is_nil() {
                    map.raw_set(k, reply_to_lua(lua, v, resp3)?)?;
                }
            }
            wrap(lua, "map", map)?
        }
        Reply::Map(pairs) => {
            let t = lua.create_table_with_capacity(pairs.len() * 2, 0)?;
            for (i, (k, v)) in pairs.iter().enumerate() {
                t.raw_set(i * 2 + 1, reply_to_lua(lua, k, resp3)?)?;
                t.raw_set(i * 2 + 2, reply_to_lua(lua, v, resp3)?)?;
            }
            Value::Table(t)
        }
        Reply::Double(d) if resp3 => {
            let t = lua.create_table()?;
            t.raw_set("double", *d)?;
            Value::Table(t)
        }
        Reply::Double(d) => {
            Value::String(lua.create_string(crate::protocol::reply::format_double(*d))?)
        }
        Reply::Bool(b) if resp3 => Value::Boolean(*b),
        Reply::Bool(b) => Value::Number(if *b { 1.0 } else { 0.0 }),
        Reply::Verbatim(text) if resp3 => {
            let v = lua.create_table()?;
            v.raw_set("format", "txt")?;
            v.raw_set("string", text.as_str())?;
            wrap(lua, "verbatim_string", v)?
        }
        Reply::Verbatim(text) => Value::String(lua.create_string(text)?),
        Reply::BigNumber(n) if resp3 => {
            let t = lua.create_table()?;
            t.raw_set("big_number", n.as_str())?;
            Value::Table(t)
        }
        Reply::BigNumber(n) => Value::String(lua.create_string(n)?),
        Reply::Encoded(bytes) => {
            let mut pos = 0;
            let parsed = parse_resp(bytes, &mut pos).unwrap_or(Reply::Nil);
            reply_to_lua(lua, &parsed, resp3)?
        }
    })
}

fn status(lua: &Lua, s: &str) -> mlua::Result<Value> {
    let t = lua.create_table()?;
    t.raw_set("ok", s)?;
    Ok(Value::Table(t))
}

/// `{err=msg}`, the shape of an error reply inside Lua.
pub fn error_table(lua: &Lua, msg: &str) -> mlua::Result<Value> {
    let t = lua.create_table()?;
    t.raw_set("err", msg)?;
    Ok(Value::Table(t))
}

fn wrap(lua: &Lua, key: &str, inner: Table) -> mlua::Result<Value> {
    let t = lua.create_table()?;
    t.raw_set(key, inner)?;
    Ok(Value::Table(t))
}

fn array(lua: &Lua, items: &[Reply], resp3: bool) -> mlua::Result<Value> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        t.raw_set(i + 1, reply_to_lua(lua, item, resp3)?)?;
    }
    Ok(Value::Table(t))
}

/// Parses one RESP2/RESP3 value from pre-encoded reply bytes
/// ([`Reply::Encoded`] holds nested arrays of bulk strings).
fn parse_resp(b: &[u8], pos: &mut usize) -> Option<Reply> {
    let tag = *b.get(*pos)?;
    let end = *pos + b[*pos..].windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&b[*pos + 1..end]).ok()?;
    *pos = end + 2;
    let count = || line.parse::<i64>().ok();
    Some(match tag {
        b'+' => Reply::Status(line.to_owned()),
        b'-' => Reply::Error(line.to_owned()),
        b':' => Reply::Int(count()?),
        b'_' => Reply::Nil,
        b'$' => {
            let n = count()?;
            if n < 0 {
                return Some(Reply::Nil);
            }
            let n = n as usize;
            let data = b.get(*pos..*pos + n)?;
            *pos += n + 2;
            Reply::Bulk(Bytes::copy_from_slice(data))
        }
        b'*' | b'~' => {
            let n = count()?;
            if n < 0 {
                return Some(Reply::NilArray);
            }
            let items = (0..n)
                .map(|_| parse_resp(b, pos))
                .collect::<Option<Vec<_>>>()?;
            if tag == b'~' {
                Reply::Set(items)
            } else {
                Reply::Array(items)
            }
        }
        b'%' => {
            let n = count()?;
            let mut pairs = Vec::new();
            for _ in 0..n {
                let k = parse_resp(b, pos)?;
                pairs.push((k, parse_resp(b, pos)?));
            }
            Reply::Map(pairs)
        }
        b',' => Reply::Double(line.parse().ok()?),
        b'#' => Reply::Bool(line == "t"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Values are what Redis 7.0.15's Lua printed with tostring (%.14g) and
    // what redis.call sent for number arguments (%.17g): e.g.
    // EVAL "return tostring(123456789012345)" 0 -> 1.2345678901234e+14,
    // EVAL "return redis.call('set','n', -0.1) and redis.call('get','n')" 0
    // -> -0.10000000000000001.
    #[test]
    fn c_number_formats() {
        assert_eq!(fmt_g(0.1, 14), "0.1");
        assert_eq!(fmt_g(1e100, 14), "1e+100");
        assert_eq!(fmt_g(12345678901234.0, 14), "12345678901234");
        assert_eq!(fmt_g(123456789012345.0, 14), "1.2345678901234e+14");
        assert_eq!(fmt_g(0.88642843341754, 14), "0.88642843341754");
        assert_eq!(fmt_g(3.0, 17), "3");
        assert_eq!(fmt_g(1e20, 17), "1e+20");
        assert_eq!(fmt_g(-0.1, 17), "-0.10000000000000001");
        assert_eq!(fmt_g(123456789012345678.0, 17), "1.2345678901234568e+17");
        assert_eq!(fmt_g(f64::INFINITY, 17), "inf");
        assert_eq!(fmt_g(-(f64::NAN.abs()), 17), "-nan");
        assert_eq!(fmt_g(0.0001, 14), "0.0001");
        assert_eq!(fmt_g(0.00001, 14), "1e-05");
    }

    // EVAL "return 1e30" 0 -> :-9223372036854775808 (also -1e30, 0/0, 2^63).
    #[test]
    fn out_of_range_numbers_are_min_int() {
        assert_eq!(number_to_int(1e30), i64::MIN);
        assert_eq!(number_to_int(-1e30), i64::MIN);
        assert_eq!(number_to_int(f64::NAN), i64::MIN);
        assert_eq!(number_to_int(2f64.powi(63)), i64::MIN);
        assert_eq!(number_to_int(-1.9), -1);
        assert_eq!(number_to_int(1.9), 1);
    }
}

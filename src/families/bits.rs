//! Bitmaps on strings: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD.
//! The bit arithmetic itself lives in `util::bits`.

use bytes::Bytes;

use super::{read_string, string_bytes, string_for_write, Fail};
use crate::command::args::{self, error, is, Args, SYNTAX};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::pubsub::notify;
use crate::storage::keyspace::{self, Key};
use crate::storage::Meta;
use crate::util::bits::{self, BitOp, FieldType, Overflow};

const BAD_OFFSET: &str = "ERR bit offset is not an integer or out of range";

fn bit_offset(arg: &[u8]) -> Result<u64, Reply> {
    bits::parse_offset(arg, 0).ok_or_else(|| error(BAD_OFFSET))
}

/// Replaces a string's bytes, keeping its TTL, or creates it.
fn store_bytes(
    w: &mut crate::storage::WriteCtx,
    k: Key,
    old: Option<&Meta>,
    v: Vec<u8>,
) -> Result<(), Fail> {
    let expire = old.map_or(0, |m| m.expire_ms);
    // Redis changes bits in place, in a raw string.
    keyspace::store(w, k, old, &Meta::raw_string(v, expire))?;
    Ok(())
}

/// Redis unshares a string before a bit command writes into it, which
/// leaves it raw (OBJECT ENCODING) even when no bit changes. That is no
/// change a WATCH or an event sees, so the flag is stored quietly.
fn keep_raw(w: &mut crate::storage::WriteCtx, k: Key, old: Option<&Meta>) -> Result<(), Fail> {
    if let Some(m) = old.filter(|m| m.form != crate::storage::encoding::StringForm::Raw) {
        let v = string_bytes(m).to_vec();
        w.quietly(&k.meta_key(), |w| store_bytes(w, k, Some(m), v), |_| 0)?;
    }
    Ok(())
}

/// SETBIT key offset value
pub fn setbit(s: &mut Session, a: Args) -> Action {
    let offset = match bit_offset(a.get(2)) {
        Ok(o) => o,
        Err(r) => return r.into(),
    };
    let on = match &a.get(3)[..] {
        b"1" => true,
        b"0" => false,
        _ => return Reply::err("bit is not an integer or out of range").into(),
    };
    s.write(a.get(1), move |w, k| {
        let old = string_for_write(w, k)?;
        let mut v = old
            .as_ref()
            .map_or_else(Vec::new, |m| string_bytes(m).to_vec());
        let byte = (offset / 8) as usize;
        let grown = v.len() <= byte;
        if grown {
            v.resize(byte + 1, 0);
        }
        let mask = 0x80u8 >> (offset % 8);
        let was = v[byte] & mask != 0;
        // As in Redis, setting a bit of an existing string to what it is
        // writes nothing: no event, no change a WATCH sees.
        if old.is_some() && !grown && was == on {
            keep_raw(w, k, old.as_ref())?;
            return Ok(Reply::Int(was as i64));
        }
        if on {
            v[byte] |= mask;
        } else {
            v[byte] &= !mask;
        }
        store_bytes(w, k, old.as_ref(), v)?;
        w.event(notify::STRING, "setbit", k);
        Ok(Reply::Int(was as i64))
    })
}

/// GETBIT key offset
pub fn getbit(s: &mut Session, a: Args) -> Action {
    let offset = match bit_offset(a.get(2)) {
        Ok(o) => o,
        Err(r) => return r.into(),
    };
    s.read(a.get(1), move |r, k| {
        let v = read_string(r, k)?.unwrap_or_default();
        let byte = (offset / 8) as usize;
        let bit = v.get(byte).is_some_and(|b| b & (0x80 >> (offset % 8)) != 0);
        Ok(Reply::Int(bit as i64))
    })
}

/// Parses an optional trailing BYTE|BIT.
fn unit_is_bit(arg: Option<&Bytes>) -> Result<bool, Reply> {
    match arg {
        None => Ok(false),
        Some(u) if is(u, "byte") => Ok(false),
        Some(u) if is(u, "bit") => Ok(true),
        Some(_) => Err(error(SYNTAX)),
    }
}

/// BITCOUNT key [start end [BYTE|BIT]]
///
/// Like Redis, the key is looked up before the range is parsed: a missing
/// key answers 0 whatever the other arguments are.
pub fn bitcount(s: &mut Session, a: Args) -> Action {
    let key = a.get(1).clone();
    s.read(&key, move |r, k| {
        let Some(v) = read_string(r, k)? else {
            return Ok(Reply::Int(0));
        };
        let (range, bit_unit) = match a.len() {
            2 => (None, false),
            4 | 5 => {
                let (st, en) = (a.int(2)?, a.int(3)?);
                // Redis answers an empty negative range before it looks at
                // the unit.
                if st < 0 && en < 0 && st > en {
                    return Ok(Reply::Int(0));
                }
                (Some((st, en)), unit_is_bit(a.all().get(4))?)
            }
            _ => return Err(error(SYNTAX).into()),
        };
        Ok(Reply::Int(bits::bitcount(&v, range, bit_unit)))
    })
}

/// BITPOS key bit [start [end [BYTE|BIT]]]
///
/// Redis checks the bit argument first, then looks the key up, and only
/// then parses the range.
pub fn bitpos(s: &mut Session, a: Args) -> Action {
    let bit = match &a.get(2)[..] {
        b"1" => true,
        b"0" => false,
        other => {
            return match args::int(other) {
                Err(r) => r.into(),
                Ok(_) => Reply::err("The bit argument must be 1 or 0.").into(),
            }
        }
    };
    let key = a.get(1).clone();
    s.read(&key, move |r, k| {
        let Some(v) = read_string(r, k)? else {
            return Ok(Reply::Int(if bit { -1 } else { 0 }));
        };
        if a.len() > 6 {
            return Err(error(SYNTAX).into());
        }
        // Redis's order: start, then the unit, then end.
        let start = a.all().get(3).map(|x| args::int(x)).transpose()?;
        let bit_unit = unit_is_bit(a.all().get(5))?;
        let end = a.all().get(4).map(|x| args::int(x)).transpose()?;
        Ok(Reply::Int(bits::bitpos(&v, bit, start, end, bit_unit)))
    })
}

/// BITOP AND|OR|XOR|NOT destkey key [key ...]
pub fn bitop(s: &mut Session, a: Args) -> Action {
    let op = match &a.get(1).to_ascii_lowercase()[..] {
        b"and" => BitOp::And,
        b"or" => BitOp::Or,
        b"xor" => BitOp::Xor,
        b"not" => BitOp::Not,
        _ => return error(SYNTAX).into(),
    };
    if op == BitOp::Not && a.len() != 4 {
        return Reply::err("BITOP NOT must be called with a single source key.").into();
    }
    super::load_then_store(
        s,
        a.from(3).to_vec(),
        a.get(2).clone(),
        read_string,
        move |w, kd, inputs| {
            let owned: Vec<Vec<u8>> = inputs.into_iter().map(Option::unwrap_or_default).collect();
            let refs: Vec<&[u8]> = owned.iter().map(|v| v.as_slice()).collect();
            let v = bits::bitop(op, &refs);
            let len = v.len() as i64;
            if v.is_empty() {
                w.delete_reported(kd)?;
            } else {
                let old = keyspace::lookup_for_write(w, kd)?;
                // Redis builds the result as a raw string.
                keyspace::store(w, kd, old.as_ref(), &Meta::raw_string(v, 0))?;
                w.event(notify::STRING, "set", kd);
            }
            Ok(Reply::Int(len))
        },
    )
}

/// One BITFIELD operation.
#[derive(Clone, Copy)]
enum FieldOp {
    Get(FieldType, u64),
    Set(FieldType, u64, i64, Overflow),
    Incr(FieldType, u64, i64, Overflow),
}

/// Parses BITFIELD's sub-commands with Redis's error texts.
fn parse_field_ops(a: &Args, read_only: bool) -> Result<Vec<FieldOp>, Reply> {
    let rest = a.from(2);
    let mut ops = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut i = 0;
    let bad_type = || {
        Reply::err("Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.")
    };
    while i < rest.len() {
        let op = &rest[i][..];
        let remaining = rest.len() - i - 1;
        if is(op, "get") && remaining >= 2 {
            let ty = FieldType::parse(&rest[i + 1]).ok_or_else(bad_type)?;
            let off = bits::parse_offset(&rest[i + 2], ty.bits).ok_or_else(|| error(BAD_OFFSET))?;
            ops.push(FieldOp::Get(ty, off));
            i += 3;
        } else if (is(op, "set") || is(op, "incrby")) && remaining >= 3 {
            let ty = FieldType::parse(&rest[i + 1]).ok_or_else(bad_type)?;
            let off = bits::parse_offset(&rest[i + 2], ty.bits).ok_or_else(|| error(BAD_OFFSET))?;
            let v = args::int(&rest[i + 3])?;
            ops.push(if is(op, "set") {
                FieldOp::Set(ty, off, v, overflow)
            } else {
                FieldOp::Incr(ty, off, v, overflow)
            });
            i += 4;
        } else if is(op, "overflow") && remaining >= 1 {
            let o = &rest[i + 1];
            overflow = if is(o, "wrap") {
                Overflow::Wrap
            } else if is(o, "sat") {
                Overflow::Sat
            } else if is(o, "fail") {
                Overflow::Fail
            } else {
                return Err(Reply::err("Invalid OVERFLOW type specified"));
            };
            i += 2;
        } else {
            return Err(error(SYNTAX));
        }
    }
    // Redis parses every op before it refuses writes in BITFIELD_RO.
    if read_only && ops.iter().any(|o| !matches!(o, FieldOp::Get(..))) {
        return Err(Reply::err("BITFIELD_RO only supports the GET subcommand"));
    }
    Ok(ops)
}

/// Runs BITFIELD ops over a value. Returns the replies, whether the value
/// grew (was created or extended), and how many writes count as changes:
/// as in Redis, a write counts if the value grew or it changed its field,
/// and a refused OVERFLOW FAIL write never does.
fn run_field_ops(v: &mut Vec<u8>, ops: &[FieldOp]) -> (Vec<Reply>, bool, usize) {
    let mut out = Vec::with_capacity(ops.len());
    // Redis grows the string for every SET/INCRBY before running any of
    // them, so even a refused OVERFLOW FAIL write creates or extends it.
    let before = v.len();
    for op in ops {
        if let FieldOp::Set(ty, off, ..) | FieldOp::Incr(ty, off, ..) = *op {
            bits::grow_for_field(v, off, ty);
        }
    }
    let grown = v.len() != before;
    let mut changes = 0;
    for op in ops {
        let (ty, off, new, reply_new) = match *op {
            FieldOp::Get(ty, off) => {
                out.push(Reply::Int(bits::get_field(v, off, ty)));
                continue;
            }
            FieldOp::Set(ty, off, value, ov) => (ty, off, bits::set_value(value, ty, ov), false),
            FieldOp::Incr(ty, off, by, ov) => {
                let old = bits::get_field(v, off, ty);
                (ty, off, bits::incr_field(old, by, ty, ov), true)
            }
        };
        let Some(new) = new else {
            out.push(Reply::Nil);
            continue;
        };
        let old = bits::get_field(v, off, ty);
        bits::set_field(v, off, ty, new);
        if grown || bits::get_field(v, off, ty) != old {
            changes += 1;
        }
        // SET answers the old value, INCRBY the new one.
        out.push(Reply::Int(if reply_new { new } else { old }));
    }
    (out, grown, changes)
}

/// BITFIELD key [GET type offset] [SET type offset value] [INCRBY type offset increment] [OVERFLOW WRAP|SAT|FAIL]
pub fn bitfield(s: &mut Session, a: Args) -> Action {
    let ops = match parse_field_ops(&a, false) {
        Ok(o) => o,
        Err(r) => return r.into(),
    };
    if ops.iter().all(|o| matches!(o, FieldOp::Get(..))) {
        return s.read(a.get(1), move |r, k| {
            let mut v = read_string(r, k)?.unwrap_or_default();
            Ok(Reply::Array(run_field_ops(&mut v, &ops).0))
        });
    }
    s.write(a.get(1), move |w, k| {
        let old = string_for_write(w, k)?;
        let mut v = old
            .as_ref()
            .map_or_else(Vec::new, |m| string_bytes(m).to_vec());
        let (out, grown, changes) = run_field_ops(&mut v, &ops);
        if grown || changes > 0 {
            store_bytes(w, k, old.as_ref(), v)?;
        } else {
            keep_raw(w, k, old.as_ref())?;
        }
        // Growing the string alone (a refused OVERFLOW FAIL write) is no
        // change Redis reports, nor is writing a field its own value.
        if changes > 0 {
            w.event(notify::STRING, "setbit", k);
        }
        Ok(Reply::Array(out))
    })
}

/// BITFIELD_RO key [GET type offset ...]
pub fn bitfield_ro(s: &mut Session, a: Args) -> Action {
    let ops = match parse_field_ops(&a, true) {
        Ok(o) => o,
        Err(r) => return r.into(),
    };
    s.read(a.get(1), move |r, k| {
        let mut v = read_string(r, k)?.unwrap_or_default();
        Ok(Reply::Array(run_field_ops(&mut v, &ops).0))
    })
}

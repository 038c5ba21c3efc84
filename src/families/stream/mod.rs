//! Streams: XADD XLEN XRANGE XREVRANGE XDEL XTRIM XSETID XINFO here; XREAD
//! and XREADGROUP (blocking too) in `read`; consumer groups in `group`.
//! The row layout is in `store`, ids and their argument forms in `id`.

pub mod group;
pub mod id;
pub mod read;
pub mod store;

use bytes::Bytes;

use self::id::{AddId, StreamId};
use self::store::{Entry, Stream, Trim};
use super::Fail;
use crate::command::args::{error, int, is, Args, SYNTAX};
use crate::families::server::arity_error;
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::pubsub::notify;
use crate::storage::keyspace::Key;
use crate::storage::{KvRead, WriteCtx};

/// `[id, [field, value, ...]]`.
pub fn entry_reply((id, fields): Entry) -> Reply {
    let mut flat = Vec::with_capacity(fields.len() * 2);
    for (f, v) in fields {
        flat.push(Reply::Bulk(f));
        flat.push(Reply::Bulk(v));
    }
    Reply::Array(vec![id.reply(), Reply::Array(flat)])
}

/// A list of entries.
pub fn entries_reply(entries: Vec<Entry>) -> Reply {
    Reply::Array(entries.into_iter().map(entry_reply).collect())
}

/// New entries in `key`: wakes its oldest blocked reader, which serves
/// itself or hands the wake-up on (see `read`), so readers are served in
/// the order they blocked.
pub fn wake_readers(w: &mut WriteCtx, key: Key) {
    w.signals.push((key.db, key.name.to_vec()));
}

/// The options XADD and XTRIM share.
struct AddTrim {
    /// XADD's id (XADD only).
    id: AddId,
    /// NOMKSTREAM.
    no_mkstream: bool,
    /// MAXLEN or MINID.
    trim: Option<Trim>,
    /// `~` was given.
    approx: bool,
    /// Most entries a trim may remove (0 = no limit).
    limit: u64,
    /// Index of XADD's first field.
    fields_at: usize,
}

/// Parses XADD's or XTRIM's options with Redis's errors and their order.
/// `node_entries` is stream-node-max-entries, which bounds an approximate
/// trim without LIMIT.
fn parse_add_trim(a: &Args, xadd: bool, node_entries: usize) -> Result<AddTrim, Reply> {
    let argv = a.all();
    let argc = argv.len();
    let mut out = AddTrim {
        id: AddId::Auto,
        no_mkstream: false,
        trim: None,
        approx: false,
        limit: 0,
        fields_at: argc + 1,
    };
    let mut limit_given = false;
    let mut i = 2;
    let both =
        || Reply::err("syntax error, MAXLEN and MINID options at the same time are not compatible");
    while i < argc {
        let more = argc - 1 - i;
        let opt = &argv[i][..];
        if xadd && opt == b"*" {
            out.fields_at = i + 1;
            break;
        } else if (is(opt, "maxlen") || is(opt, "minid")) && more > 0 {
            if out.trim.is_some() {
                return Err(both());
            }
            out.approx = false;
            let next = &argv[i + 1][..];
            if more >= 2 && next == b"~" {
                out.approx = true;
                i += 1;
            } else if more >= 2 && next == b"=" {
                i += 1;
            }
            let arg = &argv[i + 1];
            out.trim = Some(if is(opt, "maxlen") {
                let n = int(arg)?;
                if n < 0 {
                    return Err(Reply::err("The MAXLEN argument must be >= 0."));
                }
                Trim::MaxLen(n as u64)
            } else {
                Trim::MinId(id::parse_strict(arg)?)
            });
            i += 1;
        } else if is(opt, "limit") && more > 0 {
            let n = int(&argv[i + 1])?;
            if n < 0 {
                return Err(Reply::err("The LIMIT argument must be >= 0."));
            }
            out.limit = n as u64;
            limit_given = true;
            i += 1;
        } else if xadd && is(opt, "nomkstream") {
            out.no_mkstream = true;
        } else if xadd {
            out.id = id::parse_add(opt)?;
            out.fields_at = i + 1;
            break;
        } else {
            return Err(error(SYNTAX));
        }
        i += 1;
    }
    if out.limit != 0 && out.trim.is_none() {
        return Err(Reply::err(
            "syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && out.trim.is_none() {
        return Err(Reply::err(
            "syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    if limit_given {
        if !out.approx {
            return Err(Reply::err(
                "syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
    } else if out.approx {
        // Redis bounds an approximate trim to 100 nodes' worth of entries,
        // and to 10,000 when that is more or nodes are unbounded (0).
        out.limit = match (node_entries as u64).saturating_mul(100) {
            n if n == 0 || n > 10_000 => 10_000,
            n => n,
        };
    }
    Ok(out)
}

/// XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value [field value ...]
pub fn xadd(s: &mut Session, a: Args) -> Action {
    let limits = s.server.encoding_limits().stream;
    let opts = match parse_add_trim(&a, true, limits.max_entries) {
        Ok(o) => o,
        Err(r) => return r.into(),
    };
    let n = a.len() as isize - opts.fields_at as isize;
    if n < 2 || n % 2 == 1 {
        return arity_error("xadd");
    }
    if opts.id == AddId::Exact(StreamId::MIN) {
        return Reply::err("The ID specified in XADD must be greater than 0-0").into();
    }
    let fields: Vec<(Bytes, Bytes)> = a
        .from(opts.fields_at)
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    s.write(a.get(1), move |w, k| {
        let mut st = match store::load_for_write(w, k)? {
            Some(st) => st,
            None if opts.no_mkstream => return Ok(Reply::Nil),
            None => store::create(w, k),
        };
        let last = st.c.last_id;
        if last == StreamId::MAX {
            return Err(Reply::err(
                "The stream has exhausted the last possible ID, unable to add more items",
            )
            .into());
        }
        let too_small = || {
            Fail::Reply(Reply::err(
                "The ID specified in XADD is equal or smaller than the target stream top item",
            ))
        };
        let id = match opts.id {
            AddId::Auto => {
                let now = w.now_ms();
                if now > last.ms {
                    StreamId::new(now, 0)
                } else {
                    last.incr().ok_or_else(too_small)?
                }
            }
            // Redis reports a full sequence this way.
            AddId::Ms(ms) if ms == last.ms => last
                .incr()
                .filter(|i| i.ms == ms)
                .ok_or_else(|| Fail::Reply(Reply::err("Elements are too large to be stored")))?,
            AddId::Ms(ms) => StreamId::new(ms, 0),
            AddId::Exact(id) => id,
        };
        if id <= last {
            return Err(too_small());
        }
        st.append(w, id, &fields, &limits)?;
        let mut trimmed = 0;
        if let Some(how) = opts.trim {
            trimmed = st.trim(w, how, opts.approx, opts.limit)?;
        }
        st.save(w, k)?;
        w.event(notify::STREAM, "xadd", k);
        if trimmed > 0 {
            w.event(notify::STREAM, "xtrim", k);
        }
        wake_readers(w, k);
        Ok(id.reply())
    })
}

/// XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]
pub fn xtrim(s: &mut Session, a: Args) -> Action {
    let node_entries = s.server.encoding_limits().stream.max_entries;
    let opts = match parse_add_trim(&a, false, node_entries) {
        Ok(o) => o,
        Err(r) => return r.into(),
    };
    s.write(a.get(1), move |w, k| {
        let Some(mut st) = store::load_for_write(w, k)? else {
            return Ok(Reply::Int(0));
        };
        let how = opts.trim.expect("XTRIM always has a strategy");
        let gone = st.trim(w, how, opts.approx, opts.limit)?;
        st.save(w, k)?;
        if gone > 0 {
            w.event(notify::STREAM, "xtrim", k);
            w.count_changes(gone);
        }
        Ok(Reply::Int(gone as i64))
    })
}

/// XLEN key
pub fn xlen(s: &mut Session, a: Args) -> Action {
    s.read(a.get(1), |r, k| {
        Ok(Reply::Int(store::load(r, k)?.map_or(0, |st| st.len as i64)))
    })
}

fn range_generic(s: &mut Session, a: Args, rev: bool) -> Action {
    let (lo, hi) = if rev { (3, 2) } else { (2, 3) };
    let parsed = (|| -> Result<(StreamId, StreamId, i64), Reply> {
        let start = id::parse_bound(a.get(lo), true)?;
        let end = id::parse_bound(a.get(hi), false)?;
        let mut count = -1;
        let mut j = 4;
        while j < a.len() {
            if is(a.get(j), "count") && j + 1 < a.len() {
                count = int(a.get(j + 1))?.max(0);
                j += 2;
            } else {
                return Err(error(SYNTAX));
            }
        }
        Ok((start, end, count))
    })();
    let (start, end, count) = match parsed {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    s.read(a.get(1), move |r, k| {
        let Some(st) = store::load(r, k)? else {
            return Ok(Reply::Array(Vec::new()));
        };
        if count == 0 {
            return Ok(Reply::NilArray);
        }
        let n = if count < 0 { 0 } else { count as usize };
        Ok(st.range_reply(r, start, end, rev, n)?.1)
    })
}

/// XRANGE key start end [COUNT count]
pub fn xrange(s: &mut Session, a: Args) -> Action {
    range_generic(s, a, false)
}

/// XREVRANGE key end start [COUNT count]
pub fn xrevrange(s: &mut Session, a: Args) -> Action {
    range_generic(s, a, true)
}

/// XDEL key id [id ...]
pub fn xdel(s: &mut Session, a: Args) -> Action {
    let ids = a.from(2).to_vec();
    s.write(a.get(1), move |w, k| {
        // Redis looks the key up before it parses the ids.
        let Some(mut st) = store::load_for_write(w, k)? else {
            return Ok(Reply::Int(0));
        };
        let ids = ids
            .iter()
            .map(|i| id::parse_strict(i))
            .collect::<Result<Vec<_>, _>>()?;
        let mut deleted = 0;
        for id in ids {
            if st.delete(w, id)? {
                st.c.max_deleted = st.c.max_deleted.max(id);
                deleted += 1;
            }
        }
        st.save(w, k)?;
        if deleted > 0 {
            w.event(notify::STREAM, "xdel", k);
            w.count_changes(deleted as u64);
        }
        Ok(Reply::Int(deleted))
    })
}

/// XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]
pub fn xsetid(s: &mut Session, a: Args) -> Action {
    let parsed = (|| -> Result<(StreamId, Option<u64>, StreamId), Reply> {
        let id = id::parse_strict(a.get(2))?;
        let (mut added, mut max_del) = (None, StreamId::MIN);
        let mut i = 3;
        while i < a.len() {
            let more = i + 1 < a.len();
            if is(a.get(i), "entriesadded") && more {
                let n = int(a.get(i + 1))?;
                if n < 0 {
                    return Err(Reply::err("entries_added must be positive"));
                }
                added = Some(n as u64);
            } else if is(a.get(i), "maxdeletedid") && more {
                max_del = id::parse_strict(a.get(i + 1))?;
                if id < max_del {
                    return Err(Reply::err(
                        "The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                    ));
                }
            } else {
                return Err(error(SYNTAX));
            }
            i += 2;
        }
        Ok((id, added, max_del))
    })();
    let (id, added, max_del) = match parsed {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    s.write(a.get(1), move |w, k| {
        let Some(mut st) = store::load_for_write(w, k)? else {
            return Ok(Reply::err("no such key"));
        };
        if st.len > 0 {
            let top = st.edge_id(w, true)?.unwrap_or_default();
            if id < top {
                return Ok(Reply::err(
                    "The ID specified in XSETID is smaller than the target stream top item",
                ));
            }
            if added.is_some_and(|n| n < st.len) {
                return Ok(Reply::err(
                    "The entries_added specified in XSETID is smaller than the target stream length",
                ));
            }
        }
        st.c.last_id = id;
        if let Some(n) = added {
            st.c.entries_added = n;
        }
        if !max_del.is_zero() {
            st.c.max_deleted = max_del;
        }
        st.save(w, k)?;
        w.event(notify::STREAM, "xsetid", k);
        Ok(Reply::Ok)
    })
}

fn bulk_str(s: &str) -> Reply {
    Reply::bulk(Bytes::copy_from_slice(s.as_bytes()))
}

fn opt_int(v: Option<i64>) -> Reply {
    v.map_or(Reply::Nil, Reply::Int)
}

/// Fields XINFO STREAM starts with, FULL or not.
fn stream_head(st: &Stream, r: &dyn KvRead) -> Result<Vec<(Reply, Reply)>, Fail> {
    let (keys, nodes) = st.radix_figures(r)?;
    let first = if st.len == 0 {
        StreamId::MIN
    } else {
        st.edge_id(r, false)?.unwrap_or_default()
    };
    Ok(vec![
        (bulk_str("length"), Reply::Int(st.len as i64)),
        (bulk_str("radix-tree-keys"), Reply::Int(keys as i64)),
        (bulk_str("radix-tree-nodes"), Reply::Int(nodes as i64)),
        (bulk_str("last-generated-id"), st.c.last_id.reply()),
        (bulk_str("max-deleted-entry-id"), st.c.max_deleted.reply()),
        (
            bulk_str("entries-added"),
            Reply::Int(st.c.entries_added as i64),
        ),
        (bulk_str("recorded-first-entry-id"), first.reply()),
    ])
}

fn xinfo_stream(r: &dyn KvRead, st: &Stream, full: Option<usize>) -> Result<Reply, Fail> {
    let mut out = stream_head(st, r)?;
    let Some(count) = full else {
        out.push((bulk_str("groups"), Reply::Int(st.c.groups as i64)));
        let edge = |rev| -> Result<Reply, Fail> {
            Ok(st
                .range(r, StreamId::MIN, StreamId::MAX, rev, 1)?
                .pop()
                .map_or(Reply::Nil, entry_reply))
        };
        out.push((bulk_str("first-entry"), edge(false)?));
        out.push((bulk_str("last-entry"), edge(true)?));
        return Ok(Reply::Map(out));
    };
    out.push((
        bulk_str("entries"),
        entries_reply(st.range(r, StreamId::MIN, StreamId::MAX, false, count)?),
    ));
    let mut groups = Vec::new();
    for (name, g) in st.groups(r)? {
        let mut pel = Vec::new();
        st.pending(
            r,
            &name,
            StreamId::MIN,
            StreamId::MAX,
            false,
            &mut |id, n| {
                pel.push(Reply::Array(vec![
                    id.reply(),
                    Reply::bulk(n.consumer),
                    Reply::Int(n.delivery_ms as i64),
                    Reply::Int(n.deliveries as i64),
                ]));
                count == 0 || pel.len() < count
            },
        )?;
        let mut consumers = Vec::new();
        for (cname, c) in st.consumers(r, &name)? {
            let mut mine = Vec::new();
            for id in st.consumer_pending(r, &name, &cname, StreamId::MIN, StreamId::MAX, count)? {
                let n = st.nack(r, &name, id)?.unwrap_or_default();
                mine.push(Reply::Array(vec![
                    id.reply(),
                    Reply::Int(n.delivery_ms as i64),
                    Reply::Int(n.deliveries as i64),
                ]));
            }
            consumers.push(Reply::Map(vec![
                (bulk_str("name"), Reply::bulk(cname)),
                (bulk_str("seen-time"), Reply::Int(c.seen_ms as i64)),
                (bulk_str("pel-count"), Reply::Int(c.pending as i64)),
                (bulk_str("pending"), Reply::Array(mine)),
            ]));
        }
        let read = (g.entries_read != store::ENTRIES_READ_UNKNOWN).then_some(g.entries_read);
        groups.push(Reply::Map(vec![
            (bulk_str("name"), Reply::bulk(name)),
            (bulk_str("last-delivered-id"), g.last_id.reply()),
            (bulk_str("entries-read"), opt_int(read)),
            (bulk_str("lag"), opt_int(st.lag(r, &g)?)),
            (bulk_str("pel-count"), Reply::Int(g.pending as i64)),
            (bulk_str("pending"), Reply::Array(pel)),
            (bulk_str("consumers"), Reply::Array(consumers)),
        ]));
    }
    out.push((bulk_str("groups"), Reply::Array(groups)));
    Ok(Reply::Map(out))
}

/// The help text of XINFO HELP.
const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
];

pub use crate::families::subcommand_syntax;

/// XINFO STREAM key [FULL [COUNT count]] | GROUPS key | CONSUMERS key group | HELP
pub fn xinfo(s: &mut Session, a: Args) -> Action {
    // Dispatch has refused unknown subcommands and wrong argument counts.
    let sub = String::from_utf8_lossy(a.get(1)).to_lowercase();
    if sub == "help" {
        return super::help_reply(XINFO_HELP).into();
    }
    let a2 = a.clone();
    s.read(a.get(2), move |r, k| {
        let Some(st) = store::load(r, k)? else {
            return Ok(Reply::err("no such key"));
        };
        match sub.as_str() {
            "stream" => {
                let opts = a2.from(3);
                let full = match opts.len() {
                    0 => None,
                    1 | 3 if is(&opts[0], "full") => {
                        if opts.len() == 3 {
                            if !is(&opts[1], "count") {
                                return Ok(subcommand_syntax(&a2));
                            }
                            Some(int(&opts[2])?.max(0) as usize)
                        } else {
                            Some(10)
                        }
                    }
                    _ => return Ok(subcommand_syntax(&a2)),
                };
                xinfo_stream(r, &st, full)
            }
            "groups" => {
                let mut out = Vec::new();
                for (name, g) in st.groups(r)? {
                    let read =
                        (g.entries_read != store::ENTRIES_READ_UNKNOWN).then_some(g.entries_read);
                    out.push(Reply::Map(vec![
                        (bulk_str("name"), Reply::bulk(name)),
                        (bulk_str("consumers"), Reply::Int(g.consumers as i64)),
                        (bulk_str("pending"), Reply::Int(g.pending as i64)),
                        (bulk_str("last-delivered-id"), g.last_id.reply()),
                        (bulk_str("entries-read"), opt_int(read)),
                        (bulk_str("lag"), opt_int(st.lag(r, &g)?)),
                    ]));
                }
                Ok(Reply::Array(out))
            }
            _ => {
                let group = a2.get(3);
                if st.group(r, group)?.is_none() {
                    return Ok(group::no_group_for_key(group, a2.get(2)));
                }
                let now = r.now_ms();
                let out = st
                    .consumers(r, group)?
                    .into_iter()
                    .map(|(name, c)| {
                        Reply::Map(vec![
                            (bulk_str("name"), Reply::bulk(name)),
                            (bulk_str("pending"), Reply::Int(c.pending as i64)),
                            (
                                bulk_str("idle"),
                                Reply::Int(now.saturating_sub(c.seen_ms) as i64),
                            ),
                        ])
                    })
                    .collect();
                Ok(Reply::Array(out))
            }
        }
    })
}

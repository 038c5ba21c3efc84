//! Consumer groups: XGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM, and the
//! bookkeeping XREADGROUP shares with them ([`GroupEdit`]).

use std::collections::BTreeMap;

use bytes::Bytes;

use super::id::{self, StreamId};
use super::store::{self, Consumer, Group, Nack, Stream, ENTRIES_READ_UNKNOWN};
use super::{entry_reply, subcommand_syntax};
use crate::command::args::{int, is, Args};
use crate::families::help_reply;
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::pubsub::notify;
use crate::storage::{KvRead, StoreError, WriteCtx};

/// NOGROUP for a command naming a key and a group that are not both there.
pub fn no_key_or_group(key: &[u8], group: &[u8]) -> Reply {
    Reply::Error(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

/// NOGROUP for a group missing from an existing key.
pub fn no_group_for_key(group: &[u8], key: &[u8]) -> Reply {
    Reply::Error(format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        String::from_utf8_lossy(group),
        String::from_utf8_lossy(key)
    ))
}

/// A group being changed by one command: its state and the consumers it
/// touched, written back by [`GroupEdit::save`].
pub struct GroupEdit {
    /// Group name.
    pub name: Vec<u8>,
    /// Group state.
    pub g: Group,
    consumers: BTreeMap<Vec<u8>, Consumer>,
}

impl GroupEdit {
    /// The group `name` of `st`, if it exists.
    pub fn load(st: &Stream, r: &dyn KvRead, name: &[u8]) -> Result<Option<GroupEdit>, StoreError> {
        Ok(st.group(r, name)?.map(|g| GroupEdit {
            name: name.to_vec(),
            g,
            consumers: BTreeMap::new(),
        }))
    }

    fn consumer_mut(
        &mut self,
        st: &Stream,
        r: &dyn KvRead,
        name: &[u8],
    ) -> Result<Option<&mut Consumer>, StoreError> {
        if !self.consumers.contains_key(name) {
            match st.consumer(r, &self.name, name)? {
                Some(c) => {
                    self.consumers.insert(name.to_vec(), c);
                }
                None => return Ok(None),
            }
        }
        Ok(self.consumers.get_mut(name))
    }

    /// Looks a consumer up as a reader or claimer does: it is created if
    /// missing, and its seen time becomes `now`. True if it was created.
    pub fn touch(
        &mut self,
        st: &Stream,
        r: &dyn KvRead,
        name: &[u8],
        now: u64,
    ) -> Result<bool, StoreError> {
        if let Some(c) = self.consumer_mut(st, r, name)? {
            c.seen_ms = now;
            return Ok(false);
        }
        self.consumers.insert(
            name.to_vec(),
            Consumer {
                seen_ms: now,
                pending: 0,
            },
        );
        self.g.consumers += 1;
        Ok(true)
    }

    /// Hands entry `id` to `consumer` (which [`GroupEdit::touch`] loaded)
    /// with `nack`'s times: takes it from a previous owner, creates it in
    /// the group's pending list if new.
    fn assign(
        &mut self,
        st: &Stream,
        w: &mut WriteCtx,
        id: StreamId,
        previous: Option<&[u8]>,
        existed: bool,
        nack: &Nack,
    ) -> Result<(), StoreError> {
        if previous != Some(&nack.consumer[..]) {
            if let Some(old) = previous {
                st.unindex_nack(w, &self.name, id, old)?;
                if let Some(c) = self.consumer_mut(st, w, old)? {
                    c.pending -= 1;
                }
            }
            if let Some(c) = self.consumer_mut(st, w, &nack.consumer)? {
                c.pending += 1;
            }
        }
        if !existed {
            self.g.pending += 1;
        }
        st.put_nack(w, &self.name, id, nack)
    }

    /// XREADGROUP's delivery of `id` to `consumer` at `now`.
    pub fn deliver(
        &mut self,
        st: &Stream,
        w: &mut WriteCtx,
        id: StreamId,
        consumer: &[u8],
        now: u64,
    ) -> Result<(), StoreError> {
        let old = st.nack(w, &self.name, id)?;
        let nack = Nack {
            delivery_ms: now,
            deliveries: 1,
            consumer: consumer.to_vec(),
        };
        let previous = old.as_ref().map(|n| &n.consumer[..]);
        self.assign(st, w, id, previous, old.is_some(), &nack)
    }

    /// Drops a pending entry (acknowledged, or its entry is gone).
    pub fn drop_pending(
        &mut self,
        st: &Stream,
        w: &mut WriteCtx,
        id: StreamId,
        owner: &[u8],
    ) -> Result<(), StoreError> {
        st.del_nack(w, &self.name, id, owner)?;
        self.g.pending -= 1;
        if let Some(c) = self.consumer_mut(st, w, owner)? {
            c.pending -= 1;
        }
        Ok(())
    }

    /// Writes the group and every consumer it touched.
    pub fn save(self, st: &Stream, w: &mut WriteCtx) -> Result<(), StoreError> {
        for (name, c) in &self.consumers {
            st.put_consumer(w, &self.name, name, c)?;
        }
        st.write_group(w, &self.name, &self.g)
    }
}

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
];

fn parse_entries_read(arg: &[u8]) -> Result<i64, Reply> {
    let n = int(arg)?;
    if n < 0 && n != ENTRIES_READ_UNKNOWN {
        return Err(Reply::err("value for ENTRIESREAD must be positive or -1"));
    }
    Ok(n)
}

/// XGROUP CREATE|SETID|DESTROY|CREATECONSUMER|DELCONSUMER|HELP ...
pub fn xgroup(s: &mut Session, a: Args) -> Action {
    // Dispatch has refused unknown subcommands and wrong argument counts.
    let sub = String::from_utf8_lossy(a.get(1)).to_lowercase();
    if sub == "help" {
        return help_reply(XGROUP_HELP).into();
    }
    // CREATE's options and SETID's ENTRIESREAD are parsed before the key
    // is looked at.
    let (mut mkstream, mut entries_read) = (false, ENTRIES_READ_UNKNOWN);
    if sub == "create" || sub == "setid" {
        let mut i = 5;
        while i < a.len() {
            if sub == "create" && is(a.get(i), "mkstream") {
                mkstream = true;
                i += 1;
            } else if is(a.get(i), "entriesread") && i + 1 < a.len() {
                match parse_entries_read(a.get(i + 1)) {
                    Ok(n) => entries_read = n,
                    Err(r) => return r.into(),
                }
                i += 2;
            } else {
                return subcommand_syntax(&a).into();
            }
        }
    }
    let a2 = a.clone();
    s.write(a.get(2), move |w, k| {
        let key_name = a2.get(2);
        let group = a2.get(3).to_vec();
        let mut st = match store::load_for_write(w, k)? {
            Some(st) => Some(st),
            None if mkstream => None,
            None => {
                return Ok(Reply::err(
                    "The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
                ))
            }
        };
        let existing = match &st {
            Some(st) => GroupEdit::load(st, w, &group)?,
            None => None,
        };
        if existing.is_none() && matches!(sub.as_str(), "setid" | "createconsumer" | "delconsumer") {
            return Ok(no_group_for_key(&group, key_name));
        }
        let now = w.now_ms();
        match sub.as_str() {
            "create" => {
                if a2.len() > 8 {
                    return Ok(subcommand_syntax(&a2));
                }
                let id_arg = a2.get(4);
                let id = if &id_arg[..] == b"$" {
                    st.as_ref().map_or(StreamId::MIN, |st| st.c.last_id)
                } else {
                    id::parse_strict(id_arg)?
                };
                let mut st = match st {
                    Some(st) => st,
                    None => store::create(w, k),
                };
                if existing.is_some() {
                    return Ok(Reply::Error("BUSYGROUP Consumer Group name already exists".into()));
                }
                let g = Group {
                    last_id: id,
                    entries_read,
                    pending: 0,
                    consumers: 0,
                };
                st.create_group(w, &group, &g)?;
                st.save(w, k)?;
                w.event(notify::STREAM, "xgroup-create", k);
                Ok(Reply::Ok)
            }
            "setid" => {
                // Only now does Redis mind a repeated ENTRIESREAD.
                if a2.len() != 5 && a2.len() != 7 {
                    return Ok(subcommand_syntax(&a2));
                }
                let st = st.as_mut().expect("checked above");
                let id_arg = a2.get(4);
                let id = if &id_arg[..] == b"$" {
                    st.c.last_id
                } else {
                    id::parse(id_arg, 0)?
                };
                let mut g = existing.expect("checked above");
                g.g.last_id = id;
                g.g.entries_read = entries_read;
                st.write_group(w, &group, &g.g)?;
                w.event(notify::STREAM, "xgroup-setid", k);
                Ok(Reply::Ok)
            }
            "destroy" => {
                let Some(mut st) = st else {
                    return Ok(Reply::Int(0));
                };
                if existing.is_none() {
                    return Ok(Reply::Int(0));
                }
                st.destroy_group(w, &group)?;
                st.save(w, k)?;
                w.event(notify::STREAM, "xgroup-destroy", k);
                // Every reader blocked on the group gets its error.
                w.broadcasts.push((k.db, k.name.to_vec()));
                Ok(Reply::Int(1))
            }
            "createconsumer" => {
                let st = st.as_ref().expect("checked above");
                let mut g = existing.expect("checked above");
                let consumer = a2.get(4);
                if st.consumer(w, &group, consumer)?.is_some() {
                    return Ok(Reply::Int(0));
                }
                g.touch(st, w, consumer, now)?;
                g.save(st, w)?;
                w.event(notify::STREAM, "xgroup-createconsumer", k);
                Ok(Reply::Int(1))
            }
            _ => {
                let st = st.as_ref().expect("checked above");
                let mut g = existing.expect("checked above");
                let consumer = a2.get(4);
                let Some(c) = st.consumer(w, &group, consumer)? else {
                    return Ok(Reply::Int(0));
                };
                for id in st.consumer_pending(w, &group, consumer, StreamId::MIN, StreamId::MAX, 0)? {
                    st.del_nack(w, &group, id, consumer)?;
                }
                st.del_consumer(w, &group, consumer)?;
                g.g.pending -= c.pending;
                g.g.consumers -= 1;
                g.save(st, w)?;
                w.event(notify::STREAM, "xgroup-delconsumer", k);
                Ok(Reply::Int(c.pending as i64))
            }
        }
    })
}

/// XACK key group id [id ...]
pub fn xack(s: &mut Session, a: Args) -> Action {
    let a2 = a.clone();
    s.write(a.get(1), move |w, k| {
        let Some(st) = store::load_for_write(w, k)? else {
            return Ok(Reply::Int(0));
        };
        let Some(mut g) = GroupEdit::load(&st, w, a2.get(2))? else {
            return Ok(Reply::Int(0));
        };
        // All ids parse, or nothing is acknowledged.
        let ids = a2
            .from(3)
            .iter()
            .map(|i| id::parse_strict(i))
            .collect::<Result<Vec<_>, _>>()?;
        let mut acked = 0;
        for id in ids {
            if let Some(n) = st.nack(w, &g.name, id)? {
                g.drop_pending(&st, w, id, &n.consumer)?;
                acked += 1;
            }
        }
        g.save(&st, w)?;
        // Redis counts each acknowledged entry, and nothing without one.
        w.count_changes(acked as u64);
        Ok(Reply::Int(acked))
    })
}

/// XPENDING key group [[IDLE min-idle-time] start end count [consumer]]
pub fn xpending(s: &mut Session, a: Args) -> Action {
    use crate::command::args::{error, SYNTAX};
    let argc = a.len();
    if argc != 3 && !(6..=9).contains(&argc) {
        return error(SYNTAX).into();
    }
    struct Range {
        min_idle: i64,
        start: StreamId,
        end: StreamId,
        count: i64,
        consumer: Option<Bytes>,
    }
    let range = if argc >= 6 {
        let parsed = (|| -> Result<Range, Reply> {
            let mut at = 3;
            let mut min_idle = 0;
            if is(a.get(3), "idle") {
                min_idle = int(a.get(4))?;
                if argc < 8 {
                    return Err(error(SYNTAX));
                }
                at += 2;
            }
            let count = int(a.get(at + 2))?.max(0);
            let start = id::parse_bound(a.get(at), true)?;
            let end = id::parse_bound(a.get(at + 1), false)?;
            Ok(Range {
                min_idle,
                start,
                end,
                count,
                consumer: (at + 3 < argc).then(|| a.get(at + 3).clone()),
            })
        })();
        match parsed {
            Ok(r) => Some(r),
            Err(r) => return r.into(),
        }
    } else {
        None
    };
    let group = a.get(2).clone();
    let key = a.get(1).clone();
    s.read(a.get(1), move |r, k| {
        let st = store::load(r, k)?;
        let Some(g) = st
            .as_ref()
            .map(|st| st.group(r, &group))
            .transpose()?
            .flatten()
        else {
            return Ok(no_key_or_group(&key, &group));
        };
        let st = st.expect("checked above");
        let Some(range) = range else {
            if g.pending == 0 {
                return Ok(Reply::Array(vec![
                    Reply::Int(0),
                    Reply::Nil,
                    Reply::Nil,
                    Reply::NilArray,
                ]));
            }
            let mut edges = Vec::new();
            for rev in [false, true] {
                st.pending(
                    r,
                    &group,
                    StreamId::MIN,
                    StreamId::MAX,
                    rev,
                    &mut |id, _| {
                        edges.push(id.reply());
                        false
                    },
                )?;
            }
            let owners = st
                .consumers(r, &group)?
                .into_iter()
                .filter(|(_, c)| c.pending > 0)
                .map(|(name, c)| {
                    Reply::Array(vec![Reply::bulk(name), Reply::bulk(c.pending.to_string())])
                })
                .collect();
            let mut out = vec![Reply::Int(g.pending as i64)];
            out.extend(edges);
            out.push(Reply::Array(owners));
            return Ok(Reply::Array(out));
        };
        let now = r.now_ms() as i64;
        let mut left = range.count;
        let mut out = Vec::new();
        let mut emit = |id: StreamId, n: &Nack| -> bool {
            if left == 0 {
                return false;
            }
            let idle = now - n.delivery_ms as i64;
            if range.min_idle != 0 && idle < range.min_idle {
                return true;
            }
            left -= 1;
            out.push(Reply::Array(vec![
                id.reply(),
                Reply::bulk(n.consumer.clone()),
                Reply::Int(idle.max(0)),
                Reply::Int(n.deliveries as i64),
            ]));
            left > 0
        };
        match &range.consumer {
            None => st.pending(r, &group, range.start, range.end, false, &mut |id, n| {
                emit(id, &n)
            })?,
            Some(c) => {
                if st.consumer(r, &group, c)?.is_none() {
                    return Ok(Reply::Array(Vec::new()));
                }
                for id in st.consumer_pending(r, &group, c, range.start, range.end, 0)? {
                    let n = st.nack(r, &group, id)?.unwrap_or_default();
                    if !emit(id, &n) {
                        break;
                    }
                }
            }
        }
        Ok(Reply::Array(out))
    })
}

/// Parses an integer option with a command-specific error text.
fn int_or(arg: &[u8], msg: &str) -> Result<i64, Reply> {
    int(arg).map_err(|_| Reply::err(msg))
}

/// The shared end of XCLAIM and XAUTOCLAIM for one pending entry that
/// exists in the stream: move it to `consumer` with `time` as its delivery
/// time, counting a delivery unless `justid` (or setting `retry`), and
/// return what the reply lists for it.
#[allow(clippy::too_many_arguments)]
fn claim_one(
    st: &Stream,
    w: &mut WriteCtx,
    g: &mut GroupEdit,
    id: StreamId,
    old: Option<Nack>,
    consumer: &[u8],
    time: u64,
    retry: Option<u64>,
    justid: bool,
) -> Result<Reply, StoreError> {
    // The claiming consumer is met (created if new, seen now) by its
    // first claim; meeting it again changes nothing.
    g.touch(st, w, consumer, w.now_ms())?;
    let previous = old.as_ref().map(|n| n.consumer.clone());
    let existed = old.is_some();
    let mut nack = old.unwrap_or(Nack {
        delivery_ms: time,
        deliveries: 1,
        consumer: Vec::new(),
    });
    nack.delivery_ms = time;
    match retry {
        Some(n) => nack.deliveries = n,
        None if !justid => nack.deliveries += 1,
        None => {}
    }
    nack.consumer = consumer.to_vec();
    g.assign(st, w, id, previous.as_deref(), existed, &nack)?;
    if justid {
        return Ok(id.reply());
    }
    Ok(match st.entry(w, id)? {
        Some(fields) => entry_reply((id, fields)),
        None => Reply::Nil,
    })
}

/// The stream and group XCLAIM / XAUTOCLAIM work on, if both exist.
fn claim_target(
    w: &mut WriteCtx,
    k: crate::storage::keyspace::Key,
    group: &[u8],
) -> Result<Option<(Stream, GroupEdit)>, crate::families::Fail> {
    let Some(st) = store::load_for_write(w, k)? else {
        return Ok(None);
    };
    Ok(GroupEdit::load(&st, w, group)?.map(|g| (st, g)))
}

/// XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-time-milliseconds] [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID lastid]
pub fn xclaim(s: &mut Session, a: Args) -> Action {
    let a2 = a.clone();
    s.write(a.get(1), move |w, k| {
        let group = a2.get(2);
        let (st, mut g) = match claim_target(w, k, group)? {
            Some(found) => found,
            None => return Ok(no_key_or_group(a2.get(1), group)),
        };
        let min_idle =
            int_or(a2.get(4), "Invalid min-idle-time argument for XCLAIM")?.max(0) as u64;
        let mut j = 5;
        let mut ids = Vec::new();
        while j < a2.len() {
            match id::parse_strict(a2.get(j)) {
                Ok(id) => ids.push(id),
                Err(_) => break,
            }
            j += 1;
        }
        let now = w.now_ms();
        let (mut force, mut justid) = (false, false);
        let mut time: Option<i64> = None;
        let mut retry = None;
        let mut last_id = StreamId::MIN;
        while j < a2.len() {
            let opt = a2.get(j);
            let more = j + 1 < a2.len();
            if is(opt, "force") {
                force = true;
            } else if is(opt, "justid") {
                justid = true;
            } else if is(opt, "idle") && more {
                j += 1;
                let idle = int_or(a2.get(j), "Invalid IDLE option argument for XCLAIM")?;
                time = Some(now as i64 - idle);
            } else if is(opt, "time") && more {
                j += 1;
                time = Some(int_or(
                    a2.get(j),
                    "Invalid TIME option argument for XCLAIM",
                )?);
            } else if is(opt, "retrycount") && more {
                j += 1;
                let n = int_or(a2.get(j), "Invalid RETRYCOUNT option argument for XCLAIM")?;
                retry = (n >= 0).then_some(n as u64);
            } else if is(opt, "lastid") && more {
                j += 1;
                last_id = id::parse_strict(a2.get(j))?;
            } else {
                return Ok(Reply::err(format!(
                    "Unrecognized XCLAIM option '{}'",
                    String::from_utf8_lossy(opt)
                )));
            }
            j += 1;
        }
        if last_id > g.g.last_id {
            g.g.last_id = last_id;
        }
        // A bogus delivery time (negative or in the future) becomes now.
        let time = match time {
            Some(t) if t >= 0 && t <= now as i64 => t as u64,
            _ => now,
        };
        let consumer = a2.get(3);
        // A consumer the claim creates is reported (once, as Redis).
        let known = st.consumer(w, group, consumer)?.is_some();
        let mut out = Vec::new();
        for id in ids {
            let nack = st.nack(w, group, id)?;
            if !st.has_entry(w, id)? {
                if let Some(n) = nack {
                    g.drop_pending(&st, w, id, &n.consumer)?;
                }
                continue;
            }
            if nack.is_none() && !force {
                continue;
            }
            if let Some(n) = &nack {
                if min_idle != 0 && now.saturating_sub(n.delivery_ms) < min_idle {
                    continue;
                }
            }
            out.push(claim_one(
                &st, w, &mut g, id, nack, consumer, time, retry, justid,
            )?);
        }
        g.save(&st, w)?;
        let created = !out.is_empty() && !known;
        if created {
            w.event(notify::STREAM, "xgroup-createconsumer", k);
        }
        // Redis counts each entry claimed and the consumer it created.
        w.count_changes(out.len() as u64 + created as u64);
        Ok(Reply::Array(out))
    })
}

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]
pub fn xautoclaim(s: &mut Session, a: Args) -> Action {
    let parsed = (|| -> Result<(u64, StreamId, u64, bool), Reply> {
        let min_idle =
            int_or(a.get(4), "Invalid min-idle-time argument for XAUTOCLAIM")?.max(0) as u64;
        let start = id::parse_bound(a.get(5), true)?;
        let (mut count, mut justid) = (100u64, false);
        let mut j = 6;
        while j < a.len() {
            if is(a.get(j), "count") && j + 1 < a.len() {
                let max = i64::MAX / 16;
                count = match int(a.get(j + 1)) {
                    Ok(n) if (1..=max).contains(&n) => n as u64,
                    _ => return Err(Reply::err("COUNT must be > 0")),
                };
                j += 2;
            } else if is(a.get(j), "justid") {
                justid = true;
                j += 1;
            } else {
                return Err(crate::command::args::error(crate::command::args::SYNTAX));
            }
        }
        Ok((min_idle, start, count, justid))
    })();
    let (min_idle, start, mut count, justid) = match parsed {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    let a2 = a.clone();
    s.write(a.get(1), move |w, k| {
        let group = a2.get(2);
        let (st, mut g) = match claim_target(w, k, group)? {
            Some(found) => found,
            None => return Ok(no_key_or_group(a2.get(1), group)),
        };
        // Redis allocates COUNT ids up front and fails past the address
        // space (about 2^47 bytes of 16-byte ids).
        if count > 1 << 43 {
            return Ok(Reply::err(
                "Insufficient memory, failed allocating transient memory, COUNT too high.",
            ));
        }
        let consumer = a2.get(3);
        // A consumer the claim creates is reported (once, as Redis).
        let known = st.consumer(w, group, consumer)?.is_some();
        let now = w.now_ms();
        let mut attempts = count.saturating_mul(10);
        // Everything the loop may visit, plus one for the next cursor.
        let mut pel = Vec::new();
        let want = attempts.saturating_add(1).min(g.g.pending + 1);
        st.pending(w, group, start, StreamId::MAX, false, &mut |id, n| {
            pel.push((id, n));
            (pel.len() as u64) < want
        })?;
        let mut claimed = Vec::new();
        let mut deleted = Vec::new();
        let mut next = 0;
        while attempts > 0 && count > 0 && next < pel.len() {
            attempts -= 1;
            let (id, nack) = pel[next].clone();
            next += 1;
            if !st.has_entry(w, id)? {
                g.drop_pending(&st, w, id, &nack.consumer)?;
                deleted.push(id.reply());
                count -= 1;
                continue;
            }
            if min_idle != 0 && now.saturating_sub(nack.delivery_ms) < min_idle {
                continue;
            }
            claimed.push(claim_one(
                &st,
                w,
                &mut g,
                id,
                Some(nack),
                consumer,
                now,
                None,
                justid,
            )?);
            count -= 1;
        }
        let cursor = pel.get(next).map_or(StreamId::MIN, |(id, _)| *id);
        g.save(&st, w)?;
        let created = !claimed.is_empty() && !known;
        if created {
            w.event(notify::STREAM, "xgroup-createconsumer", k);
        }
        // Redis counts each entry claimed or dropped as deleted, and the
        // consumer it created.
        w.count_changes((claimed.len() + deleted.len()) as u64 + created as u64);
        Ok(Reply::Array(vec![
            cursor.reply(),
            Reply::Array(claimed),
            Reply::Array(deleted),
        ]))
    })
}

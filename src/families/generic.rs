//! Keyspace commands valid for every type: DEL, EXISTS, TYPE, RENAME, COPY,
//! MOVE, KEYS, SCAN, RANDOMKEY, DBSIZE, FLUSHDB/FLUSHALL, SWAPDB and the
//! expiry family.

use bytes::Bytes;

use super::{coordinated, OpResult};
use crate::command::args::{self, error, is, Args, NOT_INTEGER, SYNTAX};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::pubsub::notify;
use crate::shard::ShardSet;
use crate::storage::encoding::{self, Meta, MetaBody};
use crate::storage::keyspace::{self, Key};
use crate::storage::tables::DATABASES;
use crate::storage::{KeyType, KvRead, StoreError, Table, WriteCtx};
use crate::util::glob;
use std::sync::Arc;

fn del_keys(s: &mut Session, mut a: Args) -> Action {
    let keys = a.split_off(1);
    let items = vec![(); keys.len()];
    s.write_each_shard(
        keys,
        items,
        |w, k, ()| {
            if !keyspace::delete_if_live(w, k)? {
                return Ok(0);
            }
            w.event(notify::GENERIC, "del", k);
            w.count_changes(1);
            Ok(1)
        },
        Reply::Int,
    )
}

/// DEL key [key ...]
pub fn del(s: &mut Session, a: Args) -> Action {
    del_keys(s, a)
}

/// UNLINK key [key ...] (DEL is already O(1) per key: collections are
/// collected in the background).
pub fn unlink(s: &mut Session, a: Args) -> Action {
    del_keys(s, a)
}

fn count_live(readers: &[&dyn KvRead], keys: &[Key]) -> OpResult {
    let mut n = 0;
    for (r, k) in readers.iter().zip(keys) {
        n += keyspace::lookup_header(*r, *k)?.is_some() as i64;
    }
    Ok(Reply::Int(n))
}

/// EXISTS key [key ...]: leaves the keys' access times alone, as Redis.
pub fn exists(s: &mut Session, a: Args) -> Action {
    s.read_many_untouched(a.from(1).to_vec(), count_live)
}

/// TOUCH key [key ...]
pub fn touch(s: &mut Session, a: Args) -> Action {
    s.read_many(a.from(1).to_vec(), count_live)
}

/// TYPE key
pub fn type_(s: &mut Session, a: Args) -> Action {
    s.read_untouched(a.get(1), |r, k| {
        let name = keyspace::lookup_header(r, k)?.map_or("none", |(t, _)| t.name());
        Ok(Reply::Simple(name))
    })
}

/// A key's full contents, for RENAME, COPY and MOVE.
struct Dump {
    meta: Meta,
    rows: Vec<(Table, Vec<u8>, Vec<u8>)>,
}

/// Reads a live key with all its sub-key rows (suffixes after the version
/// prefix), so it can be written under another name.
fn dump(r: &dyn KvRead, key: Key) -> Result<Option<Dump>, StoreError> {
    let Some(meta) = keyspace::peek(r, key)? else {
        return Ok(None);
    };
    let mut rows = Vec::new();
    keyspace::scan_version(r, key, &meta, &mut |t, suffix, v| {
        rows.push((t, suffix.to_vec(), v.to_vec()));
        true
    })?;
    Ok(Some(Dump { meta, rows }))
}

/// Writes a dump as `key` (replacing whatever is there) with `expire_ms`.
fn restore(w: &mut WriteCtx, key: Key, d: &Dump, expire_ms: u64) -> Result<(), StoreError> {
    let old = keyspace::lookup_for_write(w, key)?;
    let mut meta = d.meta.clone();
    meta.expire_ms = expire_ms;
    if let MetaBody::Collection { version, .. } = &mut meta.body {
        *version = w.new_version();
        let prefix = encoding::version_prefix(key.db, key.slot, key.name, *version);
        for (t, suffix, v) in &d.rows {
            w.put(*t, &encoding::sub_key(&prefix, suffix), v)?;
        }
    }
    // A list, zset or stream arriving under a name (RENAME, COPY, MOVE,
    // SWAPDB) can serve clients blocked on it.
    match meta.ktype {
        KeyType::List | KeyType::ZSet => w.signals.push((key.db, key.name.to_vec())),
        KeyType::Stream => w.broadcasts.push((key.db, key.name.to_vec())),
        _ => {}
    }
    keyspace::store(w, key, old.as_ref(), &meta)?;
    if old.is_some() {
        // Redis deletes a replaced key and adds the new one: it is `new`.
        w.event(notify::NEW, "new", key);
    }
    Ok(())
}

fn rename_generic(s: &mut Session, a: Args, nx: bool) -> Action {
    let (src, dst) = (a.get(1).clone(), a.get(2).clone());
    let db = s.db;
    let no_key = || Reply::err("no such key");
    let shards = s.server.shards.clone();
    let (ids, id) = (shards.shard_of_key(&src), shards.shard_of_key(&dst));
    if ids == id {
        return s.write(&src.clone(), move |w, ks| {
            let kd = Key::new(db, &dst);
            let Some(d) = dump(w, ks)? else {
                return Err(no_key().into());
            };
            if src == dst {
                return Ok(if nx { Reply::Int(0) } else { Reply::Ok });
            }
            if nx && keyspace::lookup_for_write(w, kd)?.is_some() {
                return Ok(Reply::Int(0));
            }
            let old = keyspace::lookup_for_write(w, ks)?.expect("dumped key is live");
            keyspace::delete(w, ks, &old)?;
            restore(w, kd, &d, d.meta.expire_ms)?;
            w.event(notify::GENERIC, "rename_from", ks);
            w.event(notify::GENERIC, "rename_to", kd);
            Ok(if nx { Reply::Int(1) } else { Reply::Ok })
        });
    }
    coordinated(vec![ids, id], move |locked| async move {
        let (s2, d2) = (src.clone(), dst.clone());
        let dumped = locked.run(ids, move |w| dump(w, Key::new(db, &s2))).await?;
        let Some(d) = dumped else {
            return Ok(Err(no_key()));
        };
        if nx {
            let exists = locked
                .run(id, move |w| {
                    Ok(keyspace::lookup_for_write(w, Key::new(db, &d2))?.is_some())
                })
                .await?;
            if exists {
                return Ok(Err(Reply::Int(0)));
            }
        }
        locked
            .run(ids, move |w| {
                let ks = Key::new(db, &src);
                keyspace::delete_if_live(w, ks)?;
                w.event(notify::GENERIC, "rename_from", ks);
                // Redis counts a RENAME once: the destination's step does.
                w.count_changes(0);
                Ok(())
            })
            .await?;
        locked
            .run(id, move |w| {
                let kd = Key::new(db, &dst);
                restore(w, kd, &d, d.meta.expire_ms)?;
                w.event(notify::GENERIC, "rename_to", kd);
                Ok(())
            })
            .await?;
        Ok(Ok(if nx { Reply::Int(1) } else { Reply::Ok }))
    })
}

/// RENAME key newkey
pub fn rename(s: &mut Session, a: Args) -> Action {
    rename_generic(s, a, false)
}

/// RENAMENX key newkey
pub fn renamenx(s: &mut Session, a: Args) -> Action {
    rename_generic(s, a, true)
}

/// Parses a DB index argument.
fn db_index(arg: &[u8]) -> Result<u8, Reply> {
    let n = args::int(arg)?;
    // Redis reads the index as a C int first.
    if i32::try_from(n).is_err() {
        return Err(Reply::err(
            "value is out of range, value must between -2147483648 and 2147483647",
        ));
    }
    if !(0..DATABASES as i64).contains(&n) {
        return Err(Reply::err("DB index is out of range"));
    }
    Ok(n as u8)
}

/// COPY source destination [DB destination-db] [REPLACE]
pub fn copy(s: &mut Session, a: Args) -> Action {
    let (src, dst) = (a.get(1).clone(), a.get(2).clone());
    let mut target_db = s.db;
    let mut replace = false;
    let rest = a.from(3);
    let mut i = 0;
    while i < rest.len() {
        if is(&rest[i], "replace") {
            replace = true;
        } else if is(&rest[i], "db") && i + 1 < rest.len() {
            match db_index(&rest[i + 1]) {
                Ok(d) => target_db = d,
                Err(_) if args::int(&rest[i + 1]).is_err() => return error(NOT_INTEGER).into(),
                Err(r) => return r.into(),
            }
            i += 1;
        } else {
            return error(SYNTAX).into();
        }
        i += 1;
    }
    let db = s.db;
    if s.server.cluster.is_some() && (db != 0 || target_db != 0) {
        return Reply::err("Copying to another database is not allowed in cluster mode").into();
    }
    if db == target_db && src == dst {
        return Reply::err("source and destination objects are the same").into();
    }
    let shards = s.server.shards.clone();
    let (ids, id) = (shards.shard_of_key(&src), shards.shard_of_key(&dst));
    let apply = move |w: &mut WriteCtx, d: &Dump| -> Result<Reply, StoreError> {
        let kd = Key::new(target_db, &dst);
        if !replace && keyspace::lookup_for_write(w, kd)?.is_some() {
            return Ok(Reply::Int(0));
        }
        restore(w, kd, d, d.meta.expire_ms)?;
        w.event(notify::GENERIC, "copy_to", kd);
        Ok(Reply::Int(1))
    };
    if ids == id {
        return s.write(&src.clone(), move |w, ks| {
            let dumped = dump(w, ks)?;
            // COPY reads its source, and Redis counts that lookup.
            w.looked_up(ks, dumped.is_some());
            match dumped {
                None => Ok(Reply::Int(0)),
                Some(d) => Ok(apply(w, &d)?),
            }
        });
    }
    coordinated(vec![ids, id], move |locked| async move {
        let dumped = locked
            .run(ids, move |w| dump(w, Key::new(db, &src)))
            .await?;
        let Some(d) = dumped else {
            return Ok(Err(Reply::Int(0)));
        };
        let r = locked.run(id, move |w| apply(w, &d)).await?;
        Ok(if r == Reply::Int(1) { Ok(r) } else { Err(r) })
    })
}

/// MOVE key db (same key, same slot: always one shard)
pub fn move_(s: &mut Session, a: Args) -> Action {
    if s.server.cluster.is_some() {
        return Reply::err("MOVE is not allowed in cluster mode").into();
    }
    let target = match db_index(a.get(2)) {
        Ok(d) => d,
        Err(r) => return r.into(),
    };
    if target == s.db {
        return Reply::err("source and destination objects are the same").into();
    }
    let name = a.get(1).clone();
    s.write(a.get(1), move |w, k| {
        let kt = Key::new(target, &name);
        let Some(d) = dump(w, k)? else {
            return Ok(Reply::Int(0));
        };
        if keyspace::lookup_for_write(w, kt)?.is_some() {
            return Ok(Reply::Int(0));
        }
        keyspace::delete_if_live(w, k)?;
        restore(w, kt, &d, d.meta.expire_ms)?;
        w.event(notify::GENERIC, "move_from", k);
        w.event(notify::GENERIC, "move_to", kt);
        Ok(Reply::Int(1))
    })
}

/// Visits the live keys of database `db` in one shard snapshot, from slot
/// `from_slot` on, in slot order; `visit` returns false to stop. An
/// expired key met on the way is deleted after the command (see
/// `KvRead::note_expired`) if `expire` says so for its name: SCAN and
/// RANDOMKEY delete what they meet, as in Redis, KEYS does not.
fn for_each_key(
    r: &dyn KvRead,
    db: u8,
    from_slot: u16,
    expire: &dyn Fn(&[u8]) -> bool,
    visit: &mut dyn FnMut(u16, &[u8], KeyType) -> bool,
) -> Result<(), StoreError> {
    let start = encoding::meta_slot_prefix(db, from_slot);
    let end = encoding::prefix_successor(&encoding::meta_db_prefix(db));
    let now = r.now_ms();
    let mut err = None;
    r.scan(Table::Meta, &start, end.as_deref(), false, &mut |k, v| {
        let Some((_, slot, name)) = encoding::decode_meta_key(k) else {
            return true;
        };
        match Meta::peek_header(v) {
            Ok((t, exp)) if exp == 0 || exp > now => visit(slot, name, t),
            Ok(_) => {
                if expire(name) {
                    r.note_expired(db, name);
                }
                true
            }
            Err(e) => {
                err = Some(e);
                false
            }
        }
    })?;
    err.map_or(Ok(()), |e| Err(e.into()))
}

/// A keyspace-wide read: `f` gets one reader per shard, in shard order.
fn on_all_views(
    shards: &ShardSet,
    f: impl FnOnce(&[&dyn KvRead]) -> Reply + Send + 'static,
) -> Action {
    Action::ReadMany {
        ids: (0..shards.len()).collect(),
        f: Box::new(f),
    }
}

/// KEYS pattern
pub fn keys(s: &mut Session, a: Args) -> Action {
    let pattern = a.get(1).clone();
    let db = s.db;
    on_all_views(&s.server.shards, move |snaps| {
        let all = pattern.as_ref() == b"*";
        let mut out = Vec::new();
        for &snap in snaps {
            let r = for_each_key(snap, db, 0, &|_| false, &mut |_, name, _| {
                if all || glob::string_match(&pattern, name, false) {
                    out.push(Reply::bulk_copy(name));
                }
                true
            });
            if let Err(e) = r {
                return Reply::err(e);
            }
        }
        Reply::Array(out)
    })
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
///
/// The cursor is the next slot to visit. Every call finishes the slots it
/// starts, so a key present for the whole iteration is always returned and
/// cursors stay plain integers.
pub fn scan(s: &mut Session, a: Args) -> Action {
    let Some(cursor) = parse_cursor(a.get(1)) else {
        return Reply::err("invalid cursor").into();
    };
    let opts = match ScanOpts::parse(a.from(2)) {
        Ok(o) => o,
        Err(r) => return r.into(),
    };
    if cursor >= crate::cluster::SLOTS as u64 {
        return scan_reply(0, Vec::new()).into();
    }
    let (shards, db) = (s.server.shards.len(), s.db);
    on_all_views(&s.server.shards, move |snaps| {
        let mut found = Vec::new();
        let mut seen = 0usize;
        let mut next: u64 = 0;
        let start_slot = cursor as u16;
        let first_shard = crate::cluster::shard_of_slot(start_slot, shards);
        'shards: for &snap in &snaps[first_shard..] {
            let mut last_slot: Option<u16> = None;
            let mut stop_at: Option<u16> = None;
            // Redis deletes the expired keys that pass MATCH.
            let expire = |name: &[u8]| opts.matches_name(name);
            let r = for_each_key(snap, db, start_slot, &expire, &mut |slot, name, t| {
                if seen >= opts.count && last_slot != Some(slot) {
                    stop_at = Some(slot);
                    return false;
                }
                last_slot = Some(slot);
                seen += 1;
                if opts.matches(name, t) {
                    found.push(Reply::bulk_copy(name));
                }
                true
            });
            if let Err(e) = r {
                return Reply::err(e);
            }
            if let Some(slot) = stop_at {
                next = slot as u64;
                break 'shards;
            }
        }
        scan_reply(next, found)
    })
}

/// Parses a SCAN-family cursor as Redis's strtoull does: "" reads as 0, one
/// sign is allowed and "-1" wraps to the largest cursor; spaces, junk and
/// overflow are invalid.
pub fn parse_cursor(arg: &[u8]) -> Option<u64> {
    if arg.is_empty() {
        return Some(0);
    }
    let (neg, digits) = match arg[0] {
        b'-' => (true, &arg[1..]),
        b'+' => (false, &arg[1..]),
        _ => (false, arg),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if neg { v.wrapping_neg() } else { v })
}

fn scan_reply(cursor: u64, keys: Vec<Reply>) -> Reply {
    Reply::Array(vec![Reply::bulk(cursor.to_string()), Reply::Array(keys)])
}

/// SCAN's MATCH / COUNT / TYPE options.
pub struct ScanOpts {
    /// MATCH pattern.
    pub pattern: Option<Bytes>,
    /// COUNT hint.
    pub count: usize,
    /// TYPE filter (lowercase name).
    pub ktype: Option<String>,
}

impl ScanOpts {
    /// Parses the options with Redis's errors.
    pub fn parse(rest: &[Bytes]) -> Result<ScanOpts, Reply> {
        let mut o = ScanOpts {
            pattern: None,
            count: 10,
            ktype: None,
        };
        let mut i = 0;
        while i < rest.len() {
            let has_next = i + 1 < rest.len();
            if is(&rest[i], "count") && has_next {
                let c = args::int(&rest[i + 1])?;
                if c < 1 {
                    return Err(error(SYNTAX));
                }
                o.count = c as usize;
            } else if is(&rest[i], "match") && has_next {
                o.pattern = Some(rest[i + 1].clone()).filter(|p| p.as_ref() != b"*");
            } else if is(&rest[i], "type") && has_next {
                o.ktype = Some(String::from_utf8_lossy(&rest[i + 1]).to_lowercase());
            } else {
                return Err(error(SYNTAX));
            }
            i += 2;
        }
        Ok(o)
    }

    /// Whether a key passes the filters.
    pub fn matches(&self, name: &[u8], t: KeyType) -> bool {
        self.ktype.as_ref().is_none_or(|k| k == t.name()) && self.matches_name(name)
    }

    /// Whether a key's name passes MATCH.
    pub fn matches_name(&self, name: &[u8]) -> bool {
        self.pattern
            .as_ref()
            .is_none_or(|p| glob::string_match(p, name, false))
    }
}

/// RANDOMKEY
pub fn randomkey(s: &mut Session, _a: Args) -> Action {
    let (shards, db) = (s.server.shards.len(), s.db);
    on_all_views(&s.server.shards, move |snaps| {
        let slot: u16 = rand::random::<u16>() % crate::cluster::SLOTS;
        let first = crate::cluster::shard_of_slot(slot, shards);
        // Start at a random slot and take the first live key from there,
        // wrapping around once.
        let order = (first..snaps.len()).chain(0..=first);
        for (n, i) in order.enumerate() {
            let from = if n == 0 { slot } else { 0 };
            let mut hit = None;
            if let Err(e) = for_each_key(snaps[i], db, from, &|_| true, &mut |_, name, _| {
                hit = Some(name.to_vec());
                false
            }) {
                return Reply::err(e);
            }
            if let Some(k) = hit {
                return Reply::bulk(k);
            }
        }
        Reply::Nil
    })
}

/// DBSIZE
pub fn dbsize(s: &mut Session, _a: Args) -> Action {
    if s.in_exec {
        // Inside a transaction the counts must include its own writes,
        // which are not committed (and so not published) yet.
        let db = s.db;
        return on_all_views(&s.server.shards, move |views| {
            let mut n = 0;
            for v in views {
                match v.key_count(db) {
                    Ok(c) => n += c,
                    Err(e) => return Reply::err(e),
                }
            }
            Reply::Int(n)
        });
    }
    let n: i64 = s
        .server
        .shards
        .shards()
        .iter()
        .map(|sh| sh.counts(s.db).keys)
        .sum();
    Reply::Int(n).into()
}

/// Parses FLUSHDB/FLUSHALL's optional ASYNC|SYNC.
fn flush_mode(a: &Args) -> Result<(), Reply> {
    if super::sync_or_async(a.from(1)) {
        Ok(())
    } else {
        Err(error(SYNTAX))
    }
}

/// Deletes every key of database `db` in one shard: range deletes of its
/// `meta`, `sub` and `zscore` rows (all prefixed by the namespace), plus its
/// `ttl` and `gc` rows.
fn flush_db(w: &mut WriteCtx, db: u8) -> Result<(), StoreError> {
    // Redis counts each key FLUSHDB removes as a change.
    let keys = w.state.counts[db as usize].keys.max(0) as u64;
    let prefix = encoding::meta_db_prefix(db);
    let end = encoding::prefix_successor(&prefix);
    for t in [Table::Meta, Table::Sub, Table::ZScore, Table::Gc] {
        w.del_range(t, &prefix, end.as_deref(), usize::MAX)?;
    }
    let mut ttl_rows = Vec::new();
    w.scan(Table::Ttl, &[], None, false, &mut |k, _| {
        if k.get(8..10) == Some(&prefix[..]) {
            ttl_rows.push(k.to_vec());
        }
        true
    })?;
    for k in ttl_rows {
        w.del_seen(Table::Ttl, &k)?;
    }
    w.state.counts[db as usize] = Default::default();
    w.flushed.push(db);
    w.count_changes(keys);
    Ok(())
}

/// Runs `f` on every shard inside one coordinated commit.
pub(crate) fn on_all_shards(
    s: &Session,
    f: impl Fn(&mut WriteCtx, usize) -> Result<(), StoreError> + Send + Sync + 'static,
    reply: Reply,
) -> Action {
    let shards = s.server.shards.clone();
    let ids: Vec<usize> = (0..shards.len()).collect();
    if ids.len() == 1 {
        return Action::Write {
            shard: 0,
            f: Box::new(move |w| f(w, 0).map(|()| reply)),
        };
    }
    let f = Arc::new(f);
    coordinated(ids.clone(), move |locked| async move {
        for id in ids {
            let f = f.clone();
            locked.run(id, move |w| f(w, id)).await?;
        }
        Ok(Ok(reply))
    })
}

/// FLUSHDB [ASYNC|SYNC]
pub fn flushdb(s: &mut Session, a: Args) -> Action {
    if let Err(r) = flush_mode(&a) {
        return r.into();
    }
    let db = s.db;
    on_all_shards(s, move |w, _| flush_db(w, db), Reply::Ok)
}

/// FLUSHALL [ASYNC|SYNC]
pub fn flushall(s: &mut Session, a: Args) -> Action {
    if let Err(r) = flush_mode(&a) {
        return r.into();
    }
    let flush = flush_all(s);
    // With save points set, Redis writes the emptied dataset at once, so a
    // restart cannot bring back what was flushed and the change count
    // starts again from zero. Inside EXEC or a script the flush is part of
    // a unit that holds every shard, which a save must read: no save there.
    if s.in_exec || s.in_script || !super::persistence::has_save_points(&s.server) {
        return flush;
    }
    let server = s.server.clone();
    Action::Job(Box::pin(async move {
        let reply = super::blocking::run(&server, flush).await;
        if matches!(reply, Reply::Ok) {
            super::persistence::save_after_flushall(&server).await;
        }
        reply
    }))
}

/// FLUSHALL's writes: every table of every shard emptied (also a
/// replica's, before it loads its primary's copy).
pub(crate) fn flush_all(s: &Session) -> Action {
    on_all_shards(
        s,
        |w, _| {
            // Redis counts each key FLUSHALL removes as a change.
            let keys: i64 = w.state.counts.iter().map(|c| c.keys.max(0)).sum();
            for t in [
                Table::Meta,
                Table::Sub,
                Table::ZScore,
                Table::Ttl,
                Table::Gc,
            ] {
                w.clear(t)?;
            }
            w.state.counts = Default::default();
            w.flushed.extend(0..DATABASES as u8);
            w.count_changes(keys as u64);
            Ok(())
        },
        Reply::Ok,
    )
}

/// Moves every key of database `from` in one shard to database `to`.
/// Redis's SWAPDB reports no keyspace event: the keys' rewrites here
/// (which would read as `new`, or `expired` for one not yet reaped) are
/// not reported either.
fn relabel_db(w: &mut WriteCtx, from: u8, to: u8) -> Result<(), StoreError> {
    let flags = std::mem::take(&mut w.notify_flags);
    let out = relabel_keys(w, from, to);
    w.notify_flags = flags;
    out
}

fn relabel_keys(w: &mut WriteCtx, from: u8, to: u8) -> Result<(), StoreError> {
    let prefix = encoding::meta_db_prefix(from);
    let end = encoding::prefix_successor(&prefix);
    let mut names = Vec::new();
    w.scan(Table::Meta, &prefix, end.as_deref(), false, &mut |k, _| {
        if let Some((_, _, name)) = encoding::decode_meta_key(k) {
            names.push(name.to_vec());
        }
        true
    })?;
    for name in names {
        let k = Key::new(from, &name);
        if let Some(d) = dump(w, k)? {
            keyspace::delete_if_live(w, k)?;
            restore(w, Key::new(to, &name), &d, d.meta.expire_ms)?;
        } else {
            // Expired but not yet reaped: drop it rather than carry it over.
            keyspace::lookup_for_write(w, k)?;
        }
    }
    Ok(())
}

/// SWAPDB index1 index2
///
/// Rewrites both databases' keys under each other's namespace inside one
/// coordinated commit: atomic, but O(keys in both databases).
pub fn swapdb(s: &mut Session, a: Args) -> Action {
    if s.server.cluster.is_some() {
        return Reply::err("SWAPDB is not allowed in cluster mode").into();
    }
    let parse = |arg: &[u8], which: &str| -> Result<u8, Reply> {
        let n = args::int(arg)
            .ok()
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| Reply::err(format!("invalid {which} DB index")))?;
        if !(0..DATABASES as i64).contains(&n) {
            return Err(Reply::err("DB index is out of range"));
        }
        Ok(n as u8)
    };
    let (x, y) = match (parse(a.get(1), "first"), parse(a.get(2), "second")) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(r), _) | (_, Err(r)) => return r.into(),
    };
    if x == y {
        return Reply::Ok.into();
    }
    // A spare namespace beyond the 16 databases holds x's keys mid-swap.
    const SPARE: u8 = DATABASES as u8;
    on_all_shards(
        s,
        move |w, shard| {
            relabel_db(w, x, SPARE)?;
            relabel_db(w, y, x)?;
            relabel_db(w, SPARE, y)?;
            // Redis counts a SWAPDB once: the first shard's step does.
            w.count_changes((shard == 0) as u64);
            Ok(())
        },
        Reply::Ok,
    )
}

/// Parsed NX/XX/GT/LT of the EXPIRE family.
#[derive(Default, Clone, Copy)]
struct ExpireFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

fn expire_flags(rest: &[Bytes]) -> Result<ExpireFlags, Reply> {
    let mut f = ExpireFlags::default();
    for o in rest {
        if is(o, "nx") {
            f.nx = true;
        } else if is(o, "xx") {
            f.xx = true;
        } else if is(o, "gt") {
            f.gt = true;
        } else if is(o, "lt") {
            f.lt = true;
        } else {
            return Err(Reply::err(format!(
                "Unsupported option {}",
                String::from_utf8_lossy(o)
            )));
        }
    }
    if f.nx && (f.xx || f.gt || f.lt) {
        return Err(Reply::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if f.gt && f.lt {
        return Err(Reply::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    Ok(f)
}

fn expire_generic(
    s: &mut Session,
    a: Args,
    ms: bool,
    absolute: bool,
    name: &'static str,
) -> Action {
    let flags = match expire_flags(a.from(3)) {
        Ok(f) => f,
        Err(r) => return r.into(),
    };
    let v = match a.int(2) {
        Ok(v) => v,
        Err(r) => return r.into(),
    };
    let invalid = move || Reply::err(format!("invalid expire time in '{name}' command"));
    let when = if ms { Some(v) } else { v.checked_mul(1000) };
    let Some(when) = when else {
        return invalid().into();
    };
    s.write(a.get(1), move |w, k| -> OpResult {
        let when = if absolute {
            when
        } else {
            when.checked_add(w.now_ms() as i64).ok_or_else(invalid)?
        };
        let Some(old) = keyspace::lookup_for_write(w, k)? else {
            return Ok(Reply::Int(0));
        };
        let cur = old.expire_ms;
        let when_u = when.max(0) as u64;
        let allowed = if flags.nx {
            cur == 0
        } else if flags.xx && cur == 0 {
            false
        } else if flags.gt {
            cur != 0 && when_u > cur
        } else if flags.lt {
            cur == 0 || when_u < cur
        } else {
            true
        };
        if !allowed {
            return Ok(Reply::Int(0));
        }
        if when <= w.now_ms() as i64 {
            keyspace::delete(w, k, &old)?;
            w.event(notify::GENERIC, "del", k);
        } else {
            let mut new = old.clone();
            new.expire_ms = when_u;
            keyspace::store(w, k, Some(&old), &new)?;
            w.event(notify::GENERIC, "expire", k);
        }
        Ok(Reply::Int(1))
    })
}

/// EXPIRE key seconds [NX|XX|GT|LT]
pub fn expire(s: &mut Session, a: Args) -> Action {
    expire_generic(s, a, false, false, "expire")
}

/// PEXPIRE key milliseconds [NX|XX|GT|LT]
pub fn pexpire(s: &mut Session, a: Args) -> Action {
    expire_generic(s, a, true, false, "pexpire")
}

/// EXPIREAT key unix-time-seconds [NX|XX|GT|LT]
pub fn expireat(s: &mut Session, a: Args) -> Action {
    expire_generic(s, a, false, true, "expireat")
}

/// PEXPIREAT key unix-time-milliseconds [NX|XX|GT|LT]
pub fn pexpireat(s: &mut Session, a: Args) -> Action {
    expire_generic(s, a, true, true, "pexpireat")
}

/// TTL-style replies: -2 missing, -1 no expiry, else the (rounded) value.
fn ttl_generic(s: &mut Session, a: Args, ms: bool, absolute: bool) -> Action {
    s.read_untouched(a.get(1), move |r, k| {
        let Some((_, expire)) = keyspace::lookup_header(r, k)? else {
            return Ok(Reply::Int(-2));
        };
        if expire == 0 {
            return Ok(Reply::Int(-1));
        }
        let v = if absolute {
            expire as i64
        } else {
            (expire as i64 - r.now_ms() as i64).max(0)
        };
        // Rounded to the nearest second without overflowing near i64::MAX.
        Ok(Reply::Int(if ms {
            v
        } else {
            ((v as i128 + 500) / 1000) as i64
        }))
    })
}

/// TTL key
pub fn ttl(s: &mut Session, a: Args) -> Action {
    ttl_generic(s, a, false, false)
}

/// PTTL key
pub fn pttl(s: &mut Session, a: Args) -> Action {
    ttl_generic(s, a, true, false)
}

/// EXPIRETIME key
pub fn expiretime(s: &mut Session, a: Args) -> Action {
    ttl_generic(s, a, false, true)
}

/// PEXPIRETIME key
pub fn pexpiretime(s: &mut Session, a: Args) -> Action {
    ttl_generic(s, a, true, true)
}

/// PERSIST key
pub fn persist(s: &mut Session, a: Args) -> Action {
    s.write(a.get(1), |w, k| {
        let Some(old) = keyspace::lookup_for_write(w, k)? else {
            return Ok(Reply::Int(0));
        };
        if old.expire_ms == 0 {
            return Ok(Reply::Int(0));
        }
        let mut new = old.clone();
        new.expire_ms = 0;
        keyspace::store(w, k, Some(&old), &new)?;
        w.event(notify::GENERIC, "persist", k);
        Ok(Reply::Int(1))
    })
}

//! Lists: elements at `index:u64 -> element` sub-keys between `head` and
//! `tail` (kept in the metadata). LPUSH writes `head - 1`, RPUSH writes
//! `tail`; LINDEX and LSET are one lookup (head + index) and LRANGE is one
//! ordered scan. LINSERT shifts the shorter side; LREM rewrites the list.

use bytes::Bytes;

use super::collection::{Edit, View};
use super::Fail;
use crate::command::args::{self, error, is, Args, SYNTAX};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::pubsub::notify;
use crate::storage::encoding::{self, LIST_INITIAL_INDEX};
use crate::storage::keyspace::{self, Key};
use crate::storage::{KeyType, KvRead, StoreError, Table, WriteCtx};

const LIST: KeyType = KeyType::List;

fn decode_bounds(extra: &[u8]) -> (u64, u64) {
    if extra.len() >= 16 {
        let head = u64::from_be_bytes(extra[..8].try_into().unwrap());
        let tail = u64::from_be_bytes(extra[8..16].try_into().unwrap());
        (head, tail)
    } else {
        (LIST_INITIAL_INDEX, LIST_INITIAL_INDEX)
    }
}

fn elem_key(prefix: &[u8], index: u64) -> Vec<u8> {
    encoding::sub_key(prefix, &index.to_be_bytes())
}

/// Elements a pop reads ahead from the tables (see `ListEdit::pop`):
/// measured under LPOP at pipeline 16, one B-tree descent per element
/// read was ~5% of the server's samples, more with its key comparisons.
const READ_AHEAD: u64 = 32;

/// A list seen by a reader.
struct ListView {
    prefix: Vec<u8>,
    head: u64,
    tail: u64,
}

impl ListView {
    fn load(r: &dyn KvRead, key: Key) -> Result<Option<ListView>, Fail> {
        Ok(View::load(r, key, LIST)?.map(|v| {
            let (head, tail) = decode_bounds(&v.extra);
            ListView {
                prefix: v.prefix,
                head,
                tail,
            }
        }))
    }

    fn len(&self) -> u64 {
        self.tail - self.head
    }
}

fn read_range(
    r: &dyn KvRead,
    prefix: &[u8],
    head: u64,
    start: u64,
    end: u64,
) -> Result<Vec<Vec<u8>>, StoreError> {
    let mut out = Vec::with_capacity((end - start + 1) as usize);
    let from = elem_key(prefix, head + start);
    let to = elem_key(prefix, head + end + 1);
    r.scan(Table::Sub, &from, Some(&to), false, &mut |_, v| {
        out.push(v.to_vec());
        true
    })?;
    Ok(out)
}

/// A list being changed.
struct ListEdit {
    e: Edit,
    head: u64,
    tail: u64,
    /// Whether elements were added (blocked clients get woken on save).
    pushed: bool,
}

impl ListEdit {
    fn from_edit(e: Edit) -> ListEdit {
        let (head, tail) = decode_bounds(&e.extra);
        ListEdit {
            e,
            head,
            tail,
            pushed: false,
        }
    }

    fn load(w: &mut WriteCtx, key: Key) -> Result<Option<ListEdit>, Fail> {
        Ok(Edit::load(w, key, LIST)?.map(ListEdit::from_edit))
    }

    fn load_or_create(w: &mut WriteCtx, key: Key) -> Result<ListEdit, Fail> {
        Ok(ListEdit::from_edit(Edit::load_or_create(w, key, LIST)?))
    }

    fn len(&self) -> u64 {
        self.tail - self.head
    }

    fn get(&self, w: &WriteCtx, i: u64) -> Result<Vec<u8>, StoreError> {
        Ok(w.get(Table::Sub, &elem_key(&self.e.prefix, self.head + i))?
            .unwrap_or_default())
    }

    fn set(&self, w: &mut WriteCtx, i: u64, v: &[u8]) -> Result<(), StoreError> {
        w.put(Table::Sub, &elem_key(&self.e.prefix, self.head + i), v)
    }

    fn push_left(&mut self, w: &mut WriteCtx, v: &[u8]) -> Result<(), StoreError> {
        self.pushed = true;
        self.head -= 1;
        w.put(Table::Sub, &elem_key(&self.e.prefix, self.head), v)
    }

    fn push_right(&mut self, w: &mut WriteCtx, v: &[u8]) -> Result<(), StoreError> {
        self.pushed = true;
        w.put(Table::Sub, &elem_key(&self.e.prefix, self.tail), v)?;
        self.tail += 1;
        Ok(())
    }

    fn pop(&mut self, w: &mut WriteCtx, left: bool) -> Result<Option<Vec<u8>>, StoreError> {
        if self.len() == 0 {
            return Ok(None);
        }
        let idx = if left { self.head } else { self.tail - 1 };
        // Pops take the elements one after another: every READ_AHEAD-th
        // index, the next ones the tables hold are read with one cursor.
        let window = if left {
            (idx % READ_AHEAD == 0).then(|| (idx, idx.saturating_add(READ_AHEAD)))
        } else {
            ((idx + 1) % READ_AHEAD == 0).then(|| ((idx + 1).saturating_sub(READ_AHEAD), idx + 1))
        };
        if let Some((from, to)) = window {
            let (from, to) = (from.max(self.head), to.min(self.tail));
            let prefix = &self.e.prefix;
            w.cache_ahead(Table::Sub, &elem_key(prefix, from), &elem_key(prefix, to))?;
        }
        let v = w
            .take(Table::Sub, &elem_key(&self.e.prefix, idx))?
            .unwrap_or_default();
        if left {
            self.head += 1;
        } else {
            self.tail -= 1;
        }
        Ok(Some(v))
    }

    fn all(&self, w: &WriteCtx) -> Result<Vec<Vec<u8>>, StoreError> {
        if self.len() == 0 {
            return Ok(Vec::new());
        }
        read_range(w, &self.e.prefix, self.head, 0, self.len() - 1)
    }

    /// Replaces the whole list with `items` (LREM's compaction).
    fn rewrite(&mut self, w: &mut WriteCtx, items: &[Vec<u8>]) -> Result<(), StoreError> {
        let from = elem_key(&self.e.prefix, self.head);
        let to = elem_key(&self.e.prefix, self.tail);
        w.del_range(Table::Sub, &from, Some(&to), usize::MAX)?;
        self.tail = self.head;
        for v in items {
            self.push_right(w, v)?;
        }
        Ok(())
    }

    /// Inserts `v` so that it ends up at logical index `at`, shifting the
    /// shorter side by one.
    fn insert_at(&mut self, w: &mut WriteCtx, at: u64, v: &[u8]) -> Result<(), StoreError> {
        let len = self.len();
        if at <= len / 2 {
            for i in 0..at {
                let x = self.get(w, i)?;
                w.put(Table::Sub, &elem_key(&self.e.prefix, self.head + i - 1), &x)?;
            }
            self.head -= 1;
        } else {
            for i in (at..len).rev() {
                let x = self.get(w, i)?;
                w.put(Table::Sub, &elem_key(&self.e.prefix, self.head + i + 1), &x)?;
            }
            self.tail += 1;
        }
        self.set(w, at, v)
    }

    fn save(mut self, w: &mut WriteCtx, key: Key) -> Result<(), StoreError> {
        let extra = &mut self.e.extra;
        extra.clear();
        extra.extend_from_slice(&self.head.to_be_bytes());
        extra.extend_from_slice(&self.tail.to_be_bytes());
        self.e.size = self.len();
        if self.pushed && self.e.size > 0 {
            w.signals.push((key.db, key.name.to_vec()));
        }
        self.e.save(w, key)
    }
}

/// Reports a pop from the list at `key` (`lpop` or `rpop`), then `del` if
/// it left the list empty (deleted), as Redis does.
fn popped(w: &mut WriteCtx, key: Key, left: bool, emptied: bool) {
    w.event_emptying(
        notify::LIST,
        if left { "lpop" } else { "rpop" },
        key,
        emptied,
    );
}

/// Elements `start..=end` (0-based, in range) of a list seen as a
/// [`View`] (SORT reads a window of its source this way).
pub fn view_range(
    r: &dyn KvRead,
    v: &View,
    start: u64,
    end: u64,
) -> Result<Vec<Vec<u8>>, StoreError> {
    let (head, _) = decode_bounds(&v.extra);
    read_range(r, &v.prefix, head, start, end)
}

/// Replaces `key` with a list of `items` in order, whatever it held; no
/// items deletes it (SORT ... STORE).
pub fn store_list(w: &mut WriteCtx, key: Key, items: &[Vec<u8>]) -> Result<(), Fail> {
    keyspace::delete_if_live(w, key)?;
    let mut l = ListEdit::load_or_create(w, key)?;
    for v in items {
        l.push_right(w, v)?;
    }
    l.save(w, key)?;
    Ok(())
}

/// Redis's index clamping for LRANGE/LTRIM: `None` when empty.
fn clamp(start: i64, end: i64, len: i64) -> Option<(u64, u64)> {
    let mut s = if start < 0 { len + start } else { start };
    let mut e = if end < 0 { len + end } else { end };
    if s < 0 {
        s = 0;
    }
    if s > e || s >= len {
        return None;
    }
    if e >= len {
        e = len - 1;
    }
    Some((s as u64, e as u64))
}

fn push(s: &mut Session, mut a: Args, left: bool, only_existing: bool) -> Action {
    let items = a.split_off(2);
    s.write_owned(a.take(1), move |w, k| {
        let mut l = if only_existing {
            match ListEdit::load(w, k)? {
                Some(l) => l,
                None => return Ok(Reply::Int(0)),
            }
        } else {
            ListEdit::load_or_create(w, k)?
        };
        for v in &items {
            if left {
                l.push_left(w, v)?;
            } else {
                l.push_right(w, v)?;
            }
        }
        let n = l.len() as i64;
        l.save(w, k)?;
        pushed(w, k, left);
        w.count_changes(items.len() as u64);
        Ok(Reply::Int(n))
    })
}

/// LPUSH key element [element ...]
pub fn lpush(s: &mut Session, a: Args) -> Action {
    push(s, a, true, false)
}

/// RPUSH key element [element ...]
pub fn rpush(s: &mut Session, a: Args) -> Action {
    push(s, a, false, false)
}

/// LPUSHX key element [element ...]
pub fn lpushx(s: &mut Session, a: Args) -> Action {
    push(s, a, true, true)
}

/// RPUSHX key element [element ...]
pub fn rpushx(s: &mut Session, a: Args) -> Action {
    push(s, a, false, true)
}

fn pop(s: &mut Session, a: Args, left: bool) -> Action {
    let count = match a.len() {
        2 => None,
        3 => match args::int(a.get(2)) {
            Ok(c) if c >= 0 => Some(c as u64),
            _ => return Reply::err("value is out of range, must be positive").into(),
        },
        _ => {
            return Reply::err(format!(
                "wrong number of arguments for '{}' command",
                a.name_lower()
            ))
            .into()
        }
    };
    s.write(a.get(1), move |w, k| {
        let Some(mut l) = ListEdit::load(w, k)? else {
            return Ok(if count.is_some() {
                Reply::NilArray
            } else {
                Reply::Nil
            });
        };
        let Some(c) = count else {
            let v = l.pop(w, left)?;
            let emptied = l.len() == 0;
            l.save(w, k)?;
            popped(w, k, left, emptied);
            return Ok(Reply::opt_bulk(v));
        };
        let mut out = Vec::new();
        for _ in 0..c.min(l.len()) {
            if let Some(v) = l.pop(w, left)? {
                out.push(Reply::bulk(v));
            }
        }
        let emptied = l.len() == 0;
        l.save(w, k)?;
        if !out.is_empty() {
            popped(w, k, left, emptied);
            w.count_changes(out.len() as u64);
        }
        Ok(Reply::Array(out))
    })
}

/// LPOP key [count]
pub fn lpop(s: &mut Session, a: Args) -> Action {
    pop(s, a, true)
}

/// RPOP key [count]
pub fn rpop(s: &mut Session, a: Args) -> Action {
    pop(s, a, false)
}

/// LLEN key
pub fn llen(s: &mut Session, a: Args) -> Action {
    s.read(a.get(1), |r, k| {
        Ok(Reply::Int(
            ListView::load(r, k)?.map_or(0, |l| l.len() as i64),
        ))
    })
}

/// LRANGE key start stop
pub fn lrange(s: &mut Session, a: Args) -> Action {
    let (start, end) = match (a.int(2), a.int(3)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(r), _) | (_, Err(r)) => return r.into(),
    };
    s.read(a.get(1), move |r, k| {
        let Some(l) = ListView::load(r, k)? else {
            return Ok(Reply::Array(Vec::new()));
        };
        let Some((s, e)) = clamp(start, end, l.len() as i64) else {
            return Ok(Reply::Array(Vec::new()));
        };
        // Rows go straight into the encoded reply (LRANGE is the hot read).
        // Room for the array's header in front: the reply is not copied
        // again to put it there.
        let mut out = crate::protocol::reply::Encoder::array_body();
        let mut n = 0;
        let (from, to) = (
            elem_key(&l.prefix, l.head + s),
            elem_key(&l.prefix, l.head + e + 1),
        );
        // Every row of the range is wanted: each layer reads that many at
        // first, rather than chunks growing from a few.
        let order = crate::storage::merge::Order {
            reverse: false,
            first: usize::try_from(e - s + 1).unwrap_or(usize::MAX),
            window: false,
        };
        r.scan_few(Table::Sub, (&from, Some(&to)), order, &mut |_, v| {
            out.bulk(v);
            n += 1;
            true
        })?;
        Ok(out.into_array(n))
    })
}

/// Resolves a possibly negative index; `None` when out of range.
fn resolve(index: i64, len: u64) -> Option<u64> {
    let i = if index < 0 { len as i64 + index } else { index };
    (i >= 0 && (i as u64) < len).then_some(i as u64)
}

/// LINDEX key index (the key is looked up before the index is parsed)
pub fn lindex(s: &mut Session, a: Args) -> Action {
    let key = a.get(1).clone();
    s.read(&key, move |r, k| {
        let Some(l) = ListView::load(r, k)? else {
            return Ok(Reply::Nil);
        };
        let index = a.int(2)?;
        let Some(i) = resolve(index, l.len()) else {
            return Ok(Reply::Nil);
        };
        Ok(Reply::opt_bulk(
            r.get(Table::Sub, &elem_key(&l.prefix, l.head + i))?,
        ))
    })
}

/// LSET key index element (the key is looked up before the index is parsed)
pub fn lset(s: &mut Session, a: Args) -> Action {
    let v = a.get(3).clone();
    let key = a.get(1).clone();
    s.write(&key, move |w, k| {
        let Some(l) = ListEdit::load(w, k)? else {
            return Ok(Reply::err("no such key"));
        };
        let index = a.int(2)?;
        let Some(i) = resolve(index, l.len()) else {
            return Ok(Reply::err("index out of range"));
        };
        l.set(w, i, &v)?;
        l.save(w, k)?;
        w.event(notify::LIST, "lset", k);
        Ok(Reply::Ok)
    })
}

/// LINSERT key BEFORE|AFTER pivot element
pub fn linsert(s: &mut Session, a: Args) -> Action {
    let after = if is(a.get(2), "after") {
        true
    } else if is(a.get(2), "before") {
        false
    } else {
        return error(SYNTAX).into();
    };
    let (pivot, v) = (a.get(3).clone(), a.get(4).clone());
    s.write(a.get(1), move |w, k| {
        let Some(mut l) = ListEdit::load(w, k)? else {
            return Ok(Reply::Int(0));
        };
        let all = l.all(w)?;
        let Some(pos) = all.iter().position(|x| x[..] == pivot[..]) else {
            return Ok(Reply::Int(-1));
        };
        l.insert_at(w, pos as u64 + after as u64, &v)?;
        let n = l.len() as i64;
        l.save(w, k)?;
        w.event(notify::LIST, "linsert", k);
        Ok(Reply::Int(n))
    })
}

/// LREM key count element
pub fn lrem(s: &mut Session, a: Args) -> Action {
    let count = match a.int(2) {
        Ok(c) => c,
        Err(r) => return r.into(),
    };
    let target = a.get(3).clone();
    s.write(a.get(1), move |w, k| {
        let Some(mut l) = ListEdit::load(w, k)? else {
            return Ok(Reply::Int(0));
        };
        let mut all = l.all(w)?;
        let limit = if count == 0 {
            usize::MAX
        } else {
            count.unsigned_abs() as usize
        };
        let mut removed = 0usize;
        let mut keep = vec![true; all.len()];
        let order: Box<dyn Iterator<Item = usize>> = if count < 0 {
            Box::new((0..all.len()).rev())
        } else {
            Box::new(0..all.len())
        };
        for i in order {
            if removed == limit {
                break;
            }
            if all[i][..] == target[..] {
                keep[i] = false;
                removed += 1;
            }
        }
        if removed > 0 {
            let mut it = keep.iter();
            all.retain(|_| *it.next().unwrap());
            l.rewrite(w, &all)?;
            l.save(w, k)?;
            w.event_emptying(notify::LIST, "lrem", k, all.is_empty());
            w.count_changes(removed as u64);
        }
        Ok(Reply::Int(removed as i64))
    })
}

/// LTRIM key start stop
pub fn ltrim(s: &mut Session, a: Args) -> Action {
    let (start, end) = match (a.int(2), a.int(3)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(r), _) | (_, Err(r)) => return r.into(),
    };
    s.write(a.get(1), move |w, k| {
        let Some(mut l) = ListEdit::load(w, k)? else {
            return Ok(Reply::Ok);
        };
        let len = l.len();
        let (keep_from, keep_to) = match clamp(start, end, len as i64) {
            Some((s, e)) => (s, e + 1),
            None => (0, 0),
        };
        for _ in 0..keep_from {
            l.pop(w, true)?;
        }
        for _ in keep_to..len {
            l.pop(w, false)?;
        }
        let emptied = l.len() == 0;
        let removed = len - l.len();
        l.save(w, k)?;
        w.event_emptying(notify::LIST, "ltrim", k, emptied);
        w.count_changes(removed);
        Ok(Reply::Ok)
    })
}

/// LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]
pub fn lpos(s: &mut Session, a: Args) -> Action {
    let target = a.get(2).clone();
    let (mut rank, mut count, mut maxlen) = (1i64, None::<u64>, 0u64);
    let rest = a.from(3);
    let mut i = 0;
    while i < rest.len() {
        let more = i + 1 < rest.len();
        if is(&rest[i], "rank") && more {
            match args::int(&rest[i + 1]) {
                Ok(0) => return Reply::err("RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list").into(),
                Ok(r) => rank = r,
                Err(r) => return r.into(),
            }
        } else if is(&rest[i], "count") && more {
            match args::int(&rest[i + 1]) {
                Ok(c) if c >= 0 => count = Some(c as u64),
                _ => return Reply::err("COUNT can't be negative").into(),
            }
        } else if is(&rest[i], "maxlen") && more {
            match args::int(&rest[i + 1]) {
                Ok(m) if m >= 0 => maxlen = m as u64,
                _ => return Reply::err("MAXLEN can't be negative").into(),
            }
        } else {
            return error(SYNTAX).into();
        }
        i += 2;
    }
    s.read(a.get(1), move |r, k| {
        let none = || {
            if count.is_some() {
                Reply::Array(Vec::new())
            } else {
                Reply::Nil
            }
        };
        let Some(l) = ListView::load(r, k)? else {
            return Ok(none());
        };
        let len = l.len();
        if len == 0 {
            return Ok(none());
        }
        let want = match count {
            Some(0) => u64::MAX,
            // Redis 7.0 negates RANK -9223372036854775808 into itself: it
            // scans from the tail, every match qualifies, and the COUNT
            // test (which overflows) never stops the scan.
            Some(_) if rank == i64::MIN => u64::MAX,
            Some(c) => c,
            None => 1,
        };
        let mut skip = if rank == i64::MIN {
            0
        } else {
            rank.unsigned_abs() - 1
        };
        let mut found = Vec::new();
        let mut checked = 0u64;
        let reverse = rank < 0;
        let from = elem_key(&l.prefix, l.head);
        let to = elem_key(&l.prefix, l.tail);
        let plen = l.prefix.len();
        r.scan(Table::Sub, &from, Some(&to), reverse, &mut |key, v| {
            if maxlen != 0 && checked >= maxlen {
                return false;
            }
            checked += 1;
            if v == &target[..] {
                if skip > 0 {
                    skip -= 1;
                } else {
                    let idx = u64::from_be_bytes(key[plen..plen + 8].try_into().unwrap()) - l.head;
                    found.push(Reply::Int(idx as i64));
                    if found.len() as u64 >= want {
                        return false;
                    }
                }
            }
            true
        })?;
        Ok(match count {
            Some(_) => Reply::Array(found),
            None => found.into_iter().next().unwrap_or(Reply::Nil),
        })
    })
}

/// Parses LEFT|RIGHT.
fn side(arg: &[u8]) -> Option<bool> {
    if is(arg, "left") {
        Some(true)
    } else if is(arg, "right") {
        Some(false)
    } else {
        None
    }
}

/// A list load whose type was already checked in this round: a reply here
/// would be a bug, so it becomes an internal error.
fn checked<T>(r: Result<T, Fail>) -> Result<T, StoreError> {
    match r {
        Ok(t) => Ok(t),
        Err(Fail::Store(e)) => Err(e),
        Err(Fail::Reply(_)) => Err(StoreError::Internal("list type changed mid-command".into())),
    }
}

/// Reports a push (`lpush` or `rpush`) to the list at `key`.
fn pushed(w: &mut WriteCtx, key: Key, left: bool) {
    w.event(notify::LIST, if left { "lpush" } else { "rpush" }, key);
}

fn push_side(l: &mut ListEdit, w: &mut WriteCtx, left: bool, v: &[u8]) -> Result<(), StoreError> {
    if left {
        l.push_left(w, v)
    } else {
        l.push_right(w, v)
    }
}

fn lmove_generic(
    s: &mut Session,
    src: Bytes,
    dst: Bytes,
    from_left: bool,
    to_left: bool,
) -> Action {
    lmove_action(s.server.shards.clone(), s.db, src, dst, from_left, to_left)
}

/// LMOVE as an action (also the attempt of BLMOVE / BRPOPLPUSH): the moved
/// element, or nil when the source is empty.
pub fn lmove_action(
    shards: std::sync::Arc<crate::shard::ShardSet>,
    db: u8,
    src: Bytes,
    dst: Bytes,
    from_left: bool,
    to_left: bool,
) -> Action {
    let (is_, id) = (shards.shard_of_key(&src), shards.shard_of_key(&dst));
    if is_ == id {
        return Action::Write {
            shard: is_,
            f: Box::new(move |w| {
                super::settle((|| -> super::OpResult {
                    let ks = Key::new(db, &src);
                    let kd = Key::new(db, &dst);
                    let Some(mut from) = ListEdit::load(w, ks)? else {
                        return Ok(Reply::Nil);
                    };
                    if src == dst {
                        // A rotation: the list never empties in between, so
                        // the key (and its expiry) stays.
                        let v = from.pop(w, from_left)?.unwrap_or_default();
                        push_side(&mut from, w, to_left, &v)?;
                        from.save(w, ks)?;
                        pushed(w, ks, to_left);
                        popped(w, ks, from_left, false);
                        return Ok(Reply::bulk(v));
                    }
                    // The destination's type is checked before anything moves.
                    ListEdit::load(w, kd)?;
                    let v = from.pop(w, from_left)?.unwrap_or_default();
                    let emptied = from.len() == 0;
                    from.save(w, ks)?;
                    let mut to = ListEdit::load_or_create(w, kd)?;
                    push_side(&mut to, w, to_left, &v)?;
                    to.save(w, kd)?;
                    // Redis reports the push before the pop.
                    pushed(w, kd, to_left);
                    popped(w, ks, from_left, emptied);
                    Ok(Reply::bulk(v))
                })())
            }),
        };
    }
    super::coordinated(vec![is_, id], move |locked| async move {
        let (s2, d2) = (src.clone(), dst.clone());
        let src_state = locked
            .run(is_, move |w| {
                Ok(ListEdit::load(w, Key::new(db, &s2)).map(|l| l.is_some()))
            })
            .await?;
        match src_state {
            Ok(true) => {}
            Ok(false) => return Ok(Err(Reply::Nil)),
            Err(Fail::Reply(r)) => return Ok(Err(r)),
            Err(Fail::Store(e)) => return Err(e.into()),
        }
        let dst_state = locked
            .run(id, move |w| {
                Ok(ListEdit::load(w, Key::new(db, &d2)).map(|_| ()))
            })
            .await?;
        match dst_state {
            Ok(()) => {}
            Err(Fail::Reply(r)) => return Ok(Err(r)),
            Err(Fail::Store(e)) => return Err(e.into()),
        }
        // Redis reports the push before the pop (as the one-shard path
        // does): the pop's events take the place after the push's.
        let place = locked.reserve_place();
        let v = locked
            .run(is_, move |w| {
                let k = Key::new(db, &src);
                let mut l = checked(ListEdit::load(w, k))?.expect("source checked");
                let v = l.pop(w, from_left)?.unwrap_or_default();
                let emptied = l.len() == 0;
                l.save(w, k)?;
                w.message_place = (place, 1);
                popped(w, k, from_left, emptied);
                // Redis counts a move once: the destination's step does.
                w.count_changes(0);
                Ok(v)
            })
            .await?;
        let v2 = v.clone();
        locked
            .run(id, move |w| {
                let k = Key::new(db, &dst);
                let mut l = checked(ListEdit::load_or_create(w, k))?;
                push_side(&mut l, w, to_left, &v2)?;
                l.save(w, k)?;
                w.message_place = (place, 0);
                pushed(w, k, to_left);
                Ok(())
            })
            .await?;
        Ok(Ok(Reply::bulk(v)))
    })
}

/// LMOVE source destination LEFT|RIGHT LEFT|RIGHT
pub fn lmove(s: &mut Session, a: Args) -> Action {
    match (side(a.get(3)), side(a.get(4))) {
        (Some(f), Some(t)) => lmove_generic(s, a.get(1).clone(), a.get(2).clone(), f, t),
        _ => error(SYNTAX).into(),
    }
}

/// RPOPLPUSH source destination
pub fn rpoplpush(s: &mut Session, a: Args) -> Action {
    lmove_generic(s, a.get(1).clone(), a.get(2).clone(), false, true)
}

/// Pops up to `count` elements from the first non-empty list among `keys`:
/// `Ok(None)` if all are missing, WRONGTYPE for the first key of another
/// type met before a list is found.
fn mpop_one(
    w: &mut WriteCtx,
    key: Key,
    left: bool,
    count: u64,
) -> Result<Option<Vec<Vec<u8>>>, Fail> {
    let Some(mut l) = ListEdit::load(w, key)? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for _ in 0..count.min(l.len()) {
        if let Some(v) = l.pop(w, left)? {
            out.push(v);
        }
    }
    let emptied = l.len() == 0;
    l.save(w, key)?;
    popped(w, key, left, emptied);
    w.count_changes(out.len() as u64);
    Ok(Some(out))
}

fn mpop_reply(key: &[u8], items: Vec<Vec<u8>>) -> Reply {
    Reply::Array(vec![
        Reply::bulk_copy(key),
        Reply::Array(items.into_iter().map(Reply::bulk).collect()),
    ])
}

/// LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]
pub fn lmpop(s: &mut Session, a: Args) -> Action {
    let (keys, left, count) = match super::parse_mpop(&a, 1, ("left", "right")) {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    mpop_action(s.server.shards.clone(), s.db, keys, left, count)
}

/// LMPOP as an action (also the attempt of BLPOP / BRPOP / BLMPOP):
/// `[key, [elements]]`, or a nil array when every list is empty.
pub fn mpop_action(
    shards: std::sync::Arc<crate::shard::ShardSet>,
    db: u8,
    keys: Vec<Bytes>,
    left: bool,
    count: u64,
) -> Action {
    super::first_pop(shards, db, keys, move |w, k| {
        Ok(mpop_one(w, k, left, count)?.map(|items| mpop_reply(k.name, items)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::collection::tests::with_shard;

    fn contents(w: &mut WriteCtx, k: Key) -> Vec<Vec<u8>> {
        ListEdit::load(w, k)
            .unwrap()
            .map_or_else(Vec::new, |l| l.all(w).unwrap())
    }

    /// Pushes on both ends, pops, inserts on either side of the middle and
    /// rewrites keep the logical order, and head/tail survive a save.
    #[test]
    fn list_edit_keeps_order() {
        with_shard(|w| {
            let k = Key::new(0, b"l");
            let mut l = ListEdit::load_or_create(w, k).unwrap();
            for v in [b"c", b"d"] {
                l.push_right(w, v).unwrap();
            }
            for v in [b"b", b"a"] {
                l.push_left(w, v).unwrap();
            }
            l.save(w, k).unwrap();
            assert_eq!(contents(w, k), [b"a", b"b", b"c", b"d"].map(|x| x.to_vec()));
            let mut l = ListEdit::load(w, k).unwrap().unwrap();
            l.insert_at(w, 1, b"x").unwrap(); // shifts the left side
            l.insert_at(w, 4, b"y").unwrap(); // shifts the right side
            assert_eq!(l.pop(w, false).unwrap(), Some(b"d".to_vec()));
            l.save(w, k).unwrap();
            assert_eq!(
                contents(w, k),
                [&b"a"[..], b"x", b"b", b"c", b"y"].map(|x| x.to_vec())
            );
            let mut l = ListEdit::load(w, k).unwrap().unwrap();
            l.rewrite(w, &[b"z".to_vec()]).unwrap();
            l.save(w, k).unwrap();
            assert_eq!(contents(w, k), vec![b"z".to_vec()]);
            assert_eq!(w.signals.len(), 2, "saves that added elements wake waiters");
        });
    }

    /// LRANGE/LTRIM index clamping as Redis does it.
    #[test]
    fn clamp_matches_redis() {
        assert_eq!(clamp(0, -1, 5), Some((0, 4)));
        assert_eq!(clamp(-100, 100, 5), Some((0, 4)));
        assert_eq!(clamp(3, 1, 5), None);
        assert_eq!(clamp(5, 10, 5), None);
        assert_eq!(clamp(-2, -1, 5), Some((3, 4)));
    }
}

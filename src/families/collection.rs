//! What every collection command does with its key: find the metadata of
//! the right type (or reply WRONGTYPE), address its sub-keys under the
//! current version, keep the size in the metadata, and delete the key when
//! the collection becomes empty (an empty collection does not exist).

use super::{wrongtype, Fail};
use crate::command::Args;
use crate::net::session::{Action, Session};
use crate::protocol::reply::Encoder;
use crate::protocol::Reply;
use crate::pubsub::notify;
use crate::storage::encoding::{self, MetaBody};
use crate::storage::keyspace::{self, Key};
use crate::storage::pools::BUILD_CHUNK;
use crate::storage::tables::MetaMemo;
use crate::storage::{KeyType, KvRead, Meta, StoreError, Table, WriteCtx};

/// The cardinality of the collection at argv[1] (HLEN, SCARD, ZCARD).
pub fn card(s: &mut Session, a: &Args, ktype: KeyType) -> Action {
    s.read(a.get(1), move |r, k| {
        Ok(Reply::Int(
            View::load(r, k, ktype)?.map_or(0, |v| v.size as i64),
        ))
    })
}

/// Whether argv[2] is a member of the collection at argv[1] (HEXISTS,
/// SISMEMBER).
pub fn has_member(s: &mut Session, a: &Args, ktype: KeyType) -> Action {
    let m = a.get(2).clone();
    s.read(a.get(1), move |r, k| {
        let Some(v) = View::load(r, k, ktype)? else {
            return Ok(Reply::Int(0));
        };
        Ok(Reply::Int(v.get(r, &m)?.is_some() as i64))
    })
}

/// The members a command's integer reply says it added or removed (SADD,
/// SREM, HDEL...): what it changed, for `WriteCtx::quietly`.
pub fn members_changed(r: &Reply) -> u64 {
    match r {
        Reply::Int(n) => *n as u64,
        _ => 0,
    }
}

/// Removes argv[2..] from the collection at argv[1] and counts them (HDEL,
/// SREM); an emptied collection goes away.
pub fn remove_members(s: &mut Session, a: &Args, ktype: KeyType) -> Action {
    let members = a.from(2).to_vec();
    s.write(a.get(1), move |w, k| {
        // Removing nothing rewrites the header as it was: not a
        // modification of the key (WATCH).
        w.quietly(
            &k.meta_key(),
            |w| -> Result<_, Fail> {
                let Some(mut e) = Edit::load(w, k, ktype)? else {
                    return Ok(Reply::Int(0));
                };
                let mut n = 0;
                for m in &members {
                    n += e.remove(w, m)? as i64;
                }
                let emptied = e.size == 0;
                e.save(w, k)?;
                if n > 0 {
                    let (class, event) = match ktype {
                        KeyType::Hash => (notify::HASH, "hdel"),
                        KeyType::ZSet => (notify::ZSET, "zrem"),
                        _ => (notify::SET, "srem"),
                    };
                    w.event_emptying(class, event, k, emptied);
                }
                Ok(Reply::Int(n))
            },
            members_changed,
        )
    })
}

/// One random member of the collection at argv[1], or nil (SRANDMEMBER,
/// HRANDFIELD, ZRANDMEMBER without a count).
pub fn random_member(s: &mut Session, a: &Args, ktype: KeyType) -> Action {
    s.read(a.get(1), move |r, k| {
        let Some(v) = View::load(r, k, ktype)? else {
            return Ok(Reply::Nil);
        };
        Ok(v.random(r, 1)?
            .into_iter()
            .next()
            .map_or(Reply::Nil, |(m, _)| Reply::bulk(m)))
    })
}

/// The `[LIMIT limit]` tail of SINTERCARD / ZINTERCARD from argv[from];
/// 0 (the default) means no limit.
pub fn parse_card_limit(a: &Args, from: usize) -> Result<usize, Reply> {
    use crate::command::args::{error, int, is, SYNTAX};
    let mut limit = 0usize;
    let rest = a.from(from);
    let mut i = 0;
    while i < rest.len() {
        if is(&rest[i], "limit") && i + 1 < rest.len() {
            match int(&rest[i + 1]) {
                Ok(l) if l >= 0 => limit = l as usize,
                _ => return Err(Reply::err("LIMIT can't be negative")),
            }
            i += 2;
        } else {
            return Err(error(SYNTAX));
        }
    }
    Ok(limit)
}

/// The members of the set `v`, in numeric order, if every one is an
/// integer (the caller has checked that there are few enough for an
/// intset); `None` as soon as one is not.
fn intset_members(r: &dyn KvRead, v: &View) -> Result<Option<Vec<Vec<u8>>>, Fail> {
    let mut members = Vec::with_capacity(v.size as usize);
    let mut ints = true;
    v.scan(r, &mut |m, _| {
        ints = crate::util::num::parse_i64(m).is_some();
        if ints {
            members.push(m.to_vec());
        }
        ints
    })?;
    Ok((ints && super::set::numeric_order(&mut members, usize::MAX)).then_some(members))
}

/// Collections up to this size are scanned in one reply with cursor 0, as
/// Redis does for its small encodings (listpacks, intsets).
const SCAN_ALL_AT_ONCE: u64 = 128;

/// Most cursors kept at once; the oldest is forgotten first.
const SCAN_CURSORS_KEPT: usize = 16_384;

/// Where HSCAN/SSCAN/ZSCAN cursors over big collections stand.
///
/// Members are stored in byte order, so a scan resumes after the last
/// member it visited. Clients want integer cursors (redis-py parses them),
/// so the member is kept here under a number. A forgotten cursor (evicted,
/// or from before a restart) restarts the scan: members may come twice,
/// which SCAN allows, and none present throughout is missed.
#[derive(Default)]
pub struct ScanCursors {
    kept: parking_lot::Mutex<Kept>,
    next: std::sync::atomic::AtomicU64,
}

/// Cursor -> member to resume after, and the cursors oldest first.
type Kept = (
    std::collections::HashMap<u64, Vec<u8>>,
    std::collections::VecDeque<u64>,
);

impl ScanCursors {
    /// The member a cursor resumes after, if it is known.
    fn resume(&self, cursor: u64) -> Option<Vec<u8>> {
        self.kept.lock().0.get(&cursor).cloned()
    }

    /// A new cursor resuming after `last`.
    fn save(&self, last: Vec<u8>) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        // Never 0, which means "done".
        let id = loop {
            let id = self.next.fetch_add(1, Relaxed).wrapping_add(1);
            if id != 0 {
                break id;
            }
        };
        let mut kept = self.kept.lock();
        let (map, order) = &mut *kept;
        if order.len() >= SCAN_CURSORS_KEPT {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
        map.insert(id, last);
        order.push_back(id);
        id
    }
}

/// HSCAN / SSCAN / ZSCAN key cursor [MATCH pattern] [COUNT count]: `emit`
/// adds what the reply lists for one matching member and its stored value.
/// A collection of up to 128 members comes whole with cursor 0; a bigger
/// one in pages of COUNT visited members.
pub fn scan_members(
    s: &mut Session,
    a: &Args,
    ktype: KeyType,
    emit: fn(&[u8], &[u8], &mut Vec<Reply>),
) -> Action {
    let Some(cursor) = super::generic::parse_cursor(a.get(2)) else {
        return Reply::err("invalid cursor").into();
    };
    let rest = a.from(3).to_vec();
    let server = s.server.clone();
    s.read(a.get(1), move |r, k| {
        let reply = |cursor: u64, items: Vec<Reply>| {
            Reply::Array(vec![Reply::bulk(cursor.to_string()), Reply::Array(items)])
        };
        let Some(v) = View::load(r, k, ktype)? else {
            return Ok(reply(0, Vec::new()));
        };
        let opts = match super::generic::ScanOpts::parse(&rest) {
            Ok(o) if o.ktype.is_none() => o,
            Ok(_) => return Ok(crate::command::args::error(crate::command::args::SYNTAX)),
            Err(r) => return Ok(r),
        };
        let mut out = Vec::new();
        // An intset is scanned whole in one reply too, in numeric order.
        let limits = server.encoding_limits();
        let intset = match ktype {
            KeyType::Set if !v.converted() => limits.set_intset_entries as u64,
            _ => 0,
        };
        if v.size <= intset {
            if let Some(ints) = intset_members(r, &v)? {
                for m in ints.iter().filter(|m| opts.matches(m, ktype)) {
                    emit(m, &[], &mut out);
                }
                return Ok(reply(0, out));
            }
        }
        // A sorted set Redis holds as a listpack is scanned whole, in
        // score order (the listpack's); a small skiplist's order is its
        // dict's, no order at all, so score order serves it too.
        let listpack = match ktype {
            KeyType::ZSet if !v.converted() => limits.zset_entries as u64,
            _ => 0,
        };
        if ktype == KeyType::ZSet && (v.size <= SCAN_ALL_AT_ONCE || v.size <= listpack) {
            super::zset::walk(r, &v.prefix, false, &mut |m, score| {
                if opts.matches(m, ktype) {
                    emit(m, &score.to_be_bytes(), &mut out);
                }
                true
            })?;
            return Ok(reply(0, out));
        }
        // So is a hash Redis holds as a listpack, in its order.
        if v.size <= SCAN_ALL_AT_ONCE || v.ordered() {
            v.scan(r, &mut |m, val| {
                if opts.matches(m, ktype) {
                    emit(m, val, &mut out);
                }
                true
            })?;
            return Ok(reply(0, out));
        }
        let after = match cursor {
            0 => None,
            c => server.scan_cursors.resume(c),
        };
        let mut start = v.prefix.clone();
        if let Some(after) = &after {
            // The smallest key past `after`'s row.
            start.extend_from_slice(after);
            start.push(0);
        }
        let end = encoding::prefix_successor(&v.prefix);
        let n = v.prefix.len();
        let (mut visited, mut last, mut more) = (0usize, Vec::new(), false);
        r.scan(
            Table::Sub,
            &start,
            end.as_deref(),
            false,
            &mut |key, val| {
                if visited == opts.count {
                    more = true;
                    return false;
                }
                visited += 1;
                let m = &key[n..];
                if opts.matches(m, ktype) {
                    emit(m, val, &mut out);
                }
                last = m.to_vec();
                true
            },
        )?;
        let next = if more {
            server.scan_cursors.save(last)
        } else {
            0
        };
        Ok(reply(next, out))
    })
}

mod pick;

/// A count of random members over which [`View::random`] reads the whole
/// collection rather than drawing them one by one: a draw costs about a
/// dozen seeks, each worth a few rows of a scan.
const READ_WHOLE: u64 = 32;

/// A member and its stored value.
pub type MemberValue = (Vec<u8>, Vec<u8>);

/// A live collection seen by a reader.
pub struct View {
    /// Prefix of its sub-keys (`ns slot key_len key version`).
    pub prefix: Vec<u8>,
    /// Number of members.
    pub size: u64,
    /// Type-specific metadata (list head and tail).
    pub extra: Vec<u8>,
}

impl View {
    /// Whether the collection (a set, hash or sorted set) has left its
    /// compact encoding (see [`CONVERTED`]).
    pub fn converted(&self) -> bool {
        self.extra == CONVERTED
    }

    /// Whether it is a hash that keeps its fields' order (see
    /// [`ORDERED`]).
    pub fn ordered(&self) -> bool {
        self.extra.first() == Some(&ORDERED)
    }

    /// The collection at `key` if it exists and has type `ktype`.
    pub fn load(r: &dyn KvRead, key: Key, ktype: KeyType) -> Result<Option<View>, Fail> {
        match keyspace::lookup(r, key)? {
            None => Ok(None),
            Some(m) if m.ktype != ktype => Err(wrongtype()),
            Some(m) => Ok(Some(View::from_meta(key, &m))),
        }
    }

    /// The collection described by `m`, the live metadata of `key` that
    /// the caller already read.
    pub fn from_meta(key: Key, m: &Meta) -> View {
        View {
            prefix: prefix_of(key, m),
            size: size_of(m),
            extra: extra_of(m),
        }
    }

    /// One member's value.
    pub fn get(&self, r: &dyn KvRead, member: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        r.get(Table::Sub, &encoding::sub_key(&self.prefix, member))
    }

    /// Up to `count` distinct random members (with values), in random
    /// order. A few from a big collection are drawn one by one (see
    /// `pick`: a few seeks each); more than a [`READ_WHOLE`]th of it is
    /// drawn in one pass over its members that keeps each with the chance
    /// of the draws still owed over the members still ahead (selection
    /// sampling), so exactly `count` come out, uniformly, holding no more
    /// than them.
    pub fn random(&self, r: &dyn KvRead, count: usize) -> Result<Vec<MemberValue>, StoreError> {
        use rand::seq::SliceRandom;
        use rand::Rng;
        let mut rng = rand::thread_rng();
        let count = (count as u64).min(self.size) as usize;
        if count == 0 {
            return Ok(Vec::new());
        }
        let n = self.prefix.len();
        let mut picked: Vec<MemberValue> = Vec::with_capacity(count);
        if (count as u64).saturating_mul(READ_WHOLE) >= self.size {
            let mut ahead = self.size;
            self.scan(r, &mut |m, v| {
                if rng.gen_range(0..ahead.max(1)) < (count - picked.len()) as u64 {
                    picked.push((m.to_vec(), v.to_vec()));
                }
                ahead = ahead.saturating_sub(1);
                picked.len() < count
            })?;
            picked.shuffle(&mut rng);
            return Ok(picked);
        }
        let mut picker = pick::Picker::new(r, &self.prefix, self.size);
        if count == 1 {
            // One draw can repeat nothing (SPOP's and SRANDMEMBER's usual
            // count): no set of the members seen, no second copy of one.
            if let Some((mut k, v)) = picker.one(&mut rng)? {
                k.drain(..n);
                return Ok(vec![(k, v)]);
            }
        }
        let mut seen = std::collections::HashSet::with_capacity(count);
        // Repeats are rare this far under the size; the bound only keeps
        // a lopsided collection's draws from going on for long.
        for _ in 0..count * 4 + 16 {
            if picked.len() == count {
                return Ok(picked);
            }
            let Some((k, v)) = picker.one(&mut rng)? else {
                break;
            };
            if seen.insert(k[n..].to_vec()) {
                picked.push((k[n..].to_vec(), v));
            }
        }
        // Short after those draws: the members that follow the last one
        // drawn (wrapping to the first) make up the rest.
        let from = picked.last().map_or(self.prefix.clone(), |(m, _)| {
            encoding::sub_key(&self.prefix, m)
        });
        let end = encoding::prefix_successor(&self.prefix);
        for (start, stop) in [
            (&from[..], end.as_deref()),
            (&self.prefix[..], Some(&from[..])),
        ] {
            r.scan(Table::Sub, start, stop, false, &mut |k, v| {
                if seen.insert(k[n..].to_vec()) {
                    picked.push((k[n..].to_vec(), v.to_vec()));
                }
                picked.len() < count
            })?;
            if picked.len() == count {
                break;
            }
        }
        Ok(picked)
    }

    /// The reply of SRANDMEMBER/HRANDFIELD/ZRANDMEMBER with a count: a
    /// positive count gives up to that many distinct members, a negative
    /// one exactly |count| members with repeats (drawn one by one, or from
    /// all the members read once where |count| is a big share of them).
    /// `put` writes one member given its value and says how many elements
    /// of the reply's array it wrote. The reply is encoded as it is drawn:
    /// a negative count's reply follows the count, not the collection, and
    /// as RESP bytes it takes what Redis's own takes (a few bytes plus the
    /// member each), where a reply tree took some hundred bytes an element.
    pub fn pick_reply(
        &self,
        r: &dyn KvRead,
        count: i64,
        mut put: impl FnMut(&mut Encoder, &[u8], &[u8]) -> usize,
    ) -> Result<Reply, StoreError> {
        use rand::Rng;
        let mut out = Encoder::array_body();
        let mut len = 0;
        if count >= 0 && self.ordered() && count as u64 >= self.size {
            // The whole of a hash Redis holds as a listpack, in its order.
            self.scan(r, &mut |m, v| {
                len += put(&mut out, m, v);
                true
            })?;
            return Ok(out.into_array(len));
        }
        if count >= 0 {
            for (m, v) in self.random(r, (count as u64).min(self.size) as usize)? {
                len += put(&mut out, &m, &v);
            }
            return Ok(out.into_array(len));
        }
        let mut rng = rand::thread_rng();
        let want = count.unsigned_abs();
        if want.saturating_mul(READ_WHOLE) >= self.size {
            // Draws with repeats from every member, read once.
            let mut all = Vec::with_capacity(self.size as usize);
            self.scan(r, &mut |m, v| {
                all.push((m.to_vec(), v.to_vec()));
                true
            })?;
            if !all.is_empty() {
                for _ in 0..want {
                    let (m, v) = &all[rng.gen_range(0..all.len())];
                    len += put(&mut out, m, v);
                }
            }
            return Ok(out.into_array(len));
        }
        let mut picker = pick::Picker::new(r, &self.prefix, self.size);
        for _ in 0..want {
            let Some((k, v)) = picker.one(&mut rng)? else {
                break;
            };
            len += put(&mut out, &k[self.prefix.len()..], &v);
        }
        Ok(out.into_array(len))
    }

    /// Writes one pick for [`View::pick_reply`]: the member alone, or with
    /// its value (written by `value`) as a pair in RESP3 or as two flat
    /// elements in RESP2, as HRANDFIELD WITHVALUES and ZRANDMEMBER
    /// WITHSCORES reply. Returns the elements written to the reply's array.
    pub fn put_pick(
        out: &mut Encoder,
        member: &[u8],
        with_value: bool,
        resp3: bool,
        value: impl FnOnce(&mut Encoder),
    ) -> usize {
        if with_value && resp3 {
            out.array(2);
        }
        out.bulk(member);
        if !with_value {
            return 1;
        }
        value(out);
        if resp3 {
            1
        } else {
            2
        }
    }

    /// Every (member, value) in member order; `visit` returns false to stop.
    pub fn scan(
        &self,
        r: &dyn KvRead,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        if let Some(order) = order_of(&self.extra) {
            // The rows come in field order: each field of the order finds
            // its value among them.
            let mut rows: Vec<MemberValue> = Vec::with_capacity(self.size as usize);
            self.scan_rows(r, &mut |f, v| {
                rows.push((f.to_vec(), v.to_vec()));
                true
            })?;
            for field in order {
                if let Ok(i) = rows.binary_search_by(|(f, _)| f.as_slice().cmp(field)) {
                    if !visit(field, &rows[i].1) {
                        break;
                    }
                }
            }
            return Ok(());
        }
        self.scan_rows(r, visit)
    }

    /// Every (member, value) in member order.
    fn scan_rows(
        &self,
        r: &dyn KvRead,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let end = encoding::prefix_successor(&self.prefix);
        let n = self.prefix.len();
        r.scan(
            Table::Sub,
            &self.prefix,
            end.as_deref(),
            false,
            &mut |k, v| visit(&k[n..], v),
        )
    }
}

fn prefix_of(key: Key, m: &Meta) -> Vec<u8> {
    encoding::version_prefix(key.db, key.slot, key.name, m.version().unwrap_or(0))
}

/// The `extra` of a set, hash or sorted set that has left Redis's compact
/// encoding (intset, listpack). Redis converts a value on the write that
/// passes a `*-max-*` limit and never back while it lives, so OBJECT
/// ENCODING (and DUMP's format) must remember it: the contents alone
/// cannot tell a set shrunk back under the limits from one never over.
pub(crate) const CONVERTED: &[u8] = &[1];

/// Whether `m` is a collection that has left its compact encoding.
pub fn is_converted(m: &Meta) -> bool {
    matches!(m.ktype, KeyType::Set | KeyType::Hash | KeyType::ZSet)
        && matches!(&m.body, MetaBody::Collection { extra, .. } if extra == CONVERTED)
}

/// The first byte of the `extra` of a hash that keeps its fields in the
/// order they were added, as Redis's listpack does (HGETALL, HKEYS, HVALS,
/// HSCAN, HRANDFIELD of the whole hash, DUMP list a listpack that way):
/// `ORDERED`, then each field in that order, its length (u32 big-endian)
/// and its bytes. The `meta` row every command on the hash reads anyway
/// carries the order, so listing the hash is still one scan of its rows
/// (kept beside them as rows of their own, the order cost HGETALL a
/// second read: see DESIGN-NOTES). A hash keeps the order from its
/// creation until it leaves its compact encoding, whose fields are few
/// and short; a hash table's order is no order, and a hash stored before
/// this marker existed has none: both list their fields by field. No
/// other collection's `extra` that a [`View`] or [`Edit`] holds begins
/// with it (a list's is two indexes from `u64::MAX / 2`, a set's and a
/// sorted set's empty or [`CONVERTED`]).
const ORDERED: u8 = 2;

/// The fields of a hash keeping its order, from its `extra`, in order.
fn order_of(extra: &[u8]) -> Option<Vec<&[u8]>> {
    let (&ORDERED, mut rest) = extra.split_first()? else {
        return None;
    };
    let mut fields = Vec::new();
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = u32::from_be_bytes(*len) as usize;
        fields.push(tail.get(..len)?);
        rest = &tail[len..];
    }
    Some(fields)
}

/// Appends `field` to an ordered hash's `extra`.
fn push_field(extra: &mut Vec<u8>, field: &[u8]) {
    extra.extend_from_slice(&(field.len() as u32).to_be_bytes());
    extra.extend_from_slice(field);
}

/// The `extra` of a hash keeping `fields` in that order.
pub(crate) fn ordered_extra<'a>(fields: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut extra = vec![ORDERED];
    for f in fields {
        push_field(&mut extra, f);
    }
    extra
}

fn extra_of(m: &Meta) -> Vec<u8> {
    match &m.body {
        MetaBody::Collection { extra, .. } => extra.clone(),
        MetaBody::String(_) => Vec::new(),
    }
}

fn size_of(m: &Meta) -> u64 {
    match m.body {
        MetaBody::Collection { size, .. } => size,
        MetaBody::String(_) => 0,
    }
}

/// A random pick with a negative count whose reply is sure to pass the
/// client's output buffer hard limit. A negative count repeats members, so
/// the reply's size follows the count, not the collection: Redis stops such
/// a reply once it passes the limit and closes the client. cairn builds a
/// reply whole, so when the count alone (at the fewest bytes an element can
/// take, `$0\r\n\r\n`) passes the limit, the pick is not made and the
/// client is closed instead, once the key is found.
pub struct PickOverflow {
    server: std::sync::Arc<crate::server::Server>,
    entry: std::sync::Arc<crate::server::ClientEntry>,
    bytes: u64,
}

impl PickOverflow {
    /// `Some` if picking `count` members would pass the client's limit.
    pub fn check(s: &Session, count: i64) -> Option<PickOverflow> {
        let bytes = count.unsigned_abs().saturating_mul(6);
        let over = count < 0 && s.server.pubsub.passes_hard_limit(&s.entry, bytes);
        over.then(|| PickOverflow {
            server: s.server.clone(),
            entry: s.entry.clone(),
            bytes,
        })
    }

    /// Closes the client; the reply returned is never sent.
    pub fn close(&self) -> Reply {
        self.server.pubsub.close_over_limit(&self.entry, self.bytes);
        Reply::Nil
    }
}

/// A collection being changed by a writer.
pub struct Edit {
    /// Whether the collection is stored (false: this edit creates it).
    stored: bool,
    /// Its metadata as stored (or as it will be created): `save` writes
    /// `size` and `extra` into it.
    meta: Meta,
    /// The key of its `meta` row.
    meta_key: Vec<u8>,
    /// Prefix of its sub-keys.
    pub prefix: Vec<u8>,
    /// Number of members, kept up to date by the command.
    pub size: u64,
    /// Type-specific metadata, written back by `save`.
    pub extra: Vec<u8>,
}

impl Edit {
    /// The collection at `key` for writing, if it exists with type `ktype`.
    pub fn load(w: &mut WriteCtx, key: Key, ktype: KeyType) -> Result<Option<Edit>, Fail> {
        // The previous command of the batch may have saved this very
        // collection (see `MetaMemo`).
        let (meta_key, meta, prefix) = match w.take_memo(key) {
            Some(memo) => (memo.meta_key, memo.meta, Some(memo.prefix)),
            None => {
                let meta_key = key.meta_key();
                match keyspace::lookup_for_write_at(w, key, &meta_key)? {
                    Some(meta) => (meta_key, meta, None),
                    None => return Ok(None),
                }
            }
        };
        if meta.ktype != ktype {
            return Err(wrongtype());
        }
        Ok(Some(Edit {
            stored: true,
            prefix: prefix.unwrap_or_else(|| prefix_of(key, &meta)),
            size: size_of(&meta),
            extra: extra_of(&meta),
            meta_key,
            meta,
        }))
    }

    /// The collection at `key`, created empty (with a fresh version) if absent.
    pub fn load_or_create(w: &mut WriteCtx, key: Key, ktype: KeyType) -> Result<Edit, Fail> {
        if let Some(e) = Edit::load(w, key, ktype)? {
            return Ok(e);
        }
        let meta = Meta {
            form: crate::storage::encoding::StringForm::Fresh,
            ktype,
            expire_ms: 0,
            body: MetaBody::Collection {
                version: w.new_version(),
                size: 0,
                extra: Vec::new(),
            },
        };
        Ok(Edit {
            stored: false,
            prefix: prefix_of(key, &meta),
            size: 0,
            extra: Vec::new(),
            meta_key: key.meta_key(),
            meta,
        })
    }

    /// Whether this edit creates the collection (it was not stored).
    pub fn is_new(&self) -> bool {
        !self.stored
    }

    /// Whether the collection (a set, hash or sorted set) has left its
    /// compact encoding (see [`CONVERTED`]).
    pub fn converted(&self) -> bool {
        self.extra == CONVERTED
    }

    /// Records that a set, hash or sorted set has left its compact
    /// encoding; `save` writes it down.
    pub fn mark_converted(&mut self) {
        debug_assert!(matches!(
            self.meta.ktype,
            KeyType::Set | KeyType::Hash | KeyType::ZSet
        ));
        self.extra = CONVERTED.to_vec();
    }

    /// The collection as it stands in this edit, for reads.
    pub fn view(&self) -> View {
        View {
            prefix: self.prefix.clone(),
            size: self.size,
            extra: self.extra.clone(),
        }
    }

    /// One member's value.
    pub fn get(&self, w: &WriteCtx, member: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        w.get(Table::Sub, &encoding::sub_key(&self.prefix, member))
    }

    /// Sets a member; true if it is new (and counted).
    pub fn put(
        &mut self,
        w: &mut WriteCtx,
        member: &[u8],
        value: &[u8],
    ) -> Result<bool, StoreError> {
        Ok(self.swap(w, member, value)?.is_none())
    }

    /// Sets a member and returns the value it replaced (a new member is
    /// counted), in one tree walk.
    pub fn swap(
        &mut self,
        w: &mut WriteCtx,
        member: &[u8],
        value: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let old = w.swap(Table::Sub, &encoding::sub_key(&self.prefix, member), value)?;
        if old.is_none() {
            self.size += 1;
            if self.ordered() {
                push_field(&mut self.extra, member);
            }
        }
        Ok(old)
    }

    /// Removes a member; true if it was there.
    pub fn remove(&mut self, w: &mut WriteCtx, member: &[u8]) -> Result<bool, StoreError> {
        let removed = w.del(Table::Sub, &encoding::sub_key(&self.prefix, member))?;
        if removed {
            self.size -= 1;
            self.unplace(member);
        }
        Ok(removed)
    }

    /// Removes a member the caller has just seen (a pop's pick), without
    /// looking it up again.
    pub fn remove_seen(&mut self, w: &mut WriteCtx, member: &[u8]) -> Result<(), StoreError> {
        w.del_seen(Table::Sub, &encoding::sub_key(&self.prefix, member))?;
        self.size -= 1;
        self.unplace(member);
        Ok(())
    }

    /// Whether it is a hash that keeps its fields' order (see
    /// [`ORDERED`]).
    pub fn ordered(&self) -> bool {
        self.extra.first() == Some(&ORDERED)
    }

    /// Starts keeping the order of the fields added from now on: a hash
    /// created compact (every hash is, until its first write decides).
    pub fn keep_order(&mut self) {
        debug_assert_eq!(self.meta.ktype, KeyType::Hash);
        self.extra = vec![ORDERED];
    }

    /// Keeps `fields`, the whole hash, in that order from here (a hash
    /// written whole: DEBUG RELOAD making it a listpack again).
    pub fn order_as(&mut self, fields: &[&[u8]]) {
        self.extra = ordered_extra(fields.iter().copied());
    }

    /// Forgets the fields' order (a hash leaving its compact encoding: the
    /// caller marks it converted).
    pub fn drop_order(&mut self) {
        if self.ordered() {
            self.extra.clear();
        }
    }

    /// Takes a removed field out of the order, if the hash keeps one.
    fn unplace(&mut self, field: &[u8]) {
        if let Some(order) = order_of(&self.extra) {
            if order.contains(&field) {
                self.extra = ordered_extra(order.into_iter().filter(|f| *f != field));
            }
        }
    }

    /// Pops `want` (at most its size) random members, uniformly (SPOP):
    /// from the collection's pool if the shard holds one, else drawn, and
    /// a pool read where its pops come in a streak (`storage::pools`).
    pub fn pop_random(
        &mut self,
        w: &mut WriteCtx,
        want: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let want = (want as u64).min(self.size) as usize;
        // A pool serves to the last member: the first scan of the set
        // after many pops from it would cross every row they deleted.
        let mut popped = w.state.pools.draw(&self.prefix, self.size, want);
        let drawing = (want as u64).saturating_mul(READ_WHOLE) < self.size;
        if popped.is_none() && drawing && w.state.pools.pop_drawn(&self.prefix, self.size, want) {
            self.read_pool(w)?;
            popped = w.state.pools.draw(&self.prefix, self.size, want);
        }
        let popped = match popped {
            Some(popped) => popped,
            None => {
                let drawn: Vec<Vec<u8>> = self
                    .view()
                    .random(w, want)?
                    .into_iter()
                    .map(|(m, _)| m)
                    .collect();
                w.state.pools.popped_meanwhile(&self.prefix, &drawn);
                drawn
            }
        };
        for m in &popped {
            w.del_popped(&encoding::sub_key(&self.prefix, m));
        }
        self.size -= popped.len() as u64;
        Ok(popped)
    }

    /// Reads the next chunk of the collection's pool, if one may be read
    /// now; the last one makes it the pool.
    fn read_pool(&self, w: &mut WriteCtx) -> Result<(), StoreError> {
        let Some(mut build) = w.state.pools.take_build(&self.prefix, w.now_ms()) else {
            return Ok(());
        };
        let end = encoding::prefix_successor(&self.prefix);
        let n = self.prefix.len();
        let (mut left, mut fits, mut last) = (BUILD_CHUNK, true, None);
        w.scan(
            Table::Sub,
            &build.resume(),
            end.as_deref(),
            false,
            &mut |k, _| {
                fits = build.members.push(&k[n..]);
                left -= 1;
                if left == 0 {
                    last = Some(k.to_vec());
                }
                fits && left > 0
            },
        )?;
        match (fits, last) {
            // Too big to pool: the build is dropped.
            (false, _) => w.state.pools.give_up_build(&self.prefix),
            (true, Some(key)) => {
                build.read_to(&key);
                w.state.pools.put_build(build);
            }
            (true, None) => w.state.pools.finish_build(build, self.size),
        }
        Ok(())
    }

    /// Writes the metadata back; an emptied collection is deleted, and one
    /// that was created but never filled is not stored at all.
    pub fn save(mut self, w: &mut WriteCtx, key: Key) -> Result<(), StoreError> {
        if self.size == 0 {
            if self.stored {
                keyspace::delete(w, key, &self.meta)?;
            }
            return Ok(());
        }
        // The stored row already says this (SADD of members already
        // there): it need not be written again.
        let same = match &mut self.meta.body {
            MetaBody::Collection { size, extra, .. } => {
                let same = self.stored && *size == self.size && *extra == self.extra;
                *size = self.size;
                *extra = std::mem::take(&mut self.extra);
                same
            }
            MetaBody::String(_) => false,
        };
        // A stored collection keeps its version and expiry: replacing its
        // row settles nothing else. A new one is counted.
        if !self.stored {
            keyspace::settle_replaced(w, key, None, &self.meta)?;
        }
        w.put_collection_meta(&self.meta_key, &self.meta, same)?;
        w.keep_memo(MetaMemo {
            meta_key: self.meta_key,
            meta: self.meta,
            prefix: self.prefix,
        });
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Runs `f` in one committed write transaction of a scratch shard file.
    pub(crate) fn with_shard<T>(f: impl FnOnce(&mut WriteCtx) -> T) -> T {
        let dir = tempfile::tempdir().unwrap();
        let (db, mut state) = crate::storage::tables::scratch_file(&dir.path().join("s.redb"));
        crate::storage::tables::commit_direct(&db, &mut state, 1, f)
    }

    /// Sizes follow adds and removes; an emptied collection deletes its key;
    /// a created-but-unfilled one is never stored; another type is WRONGTYPE.
    #[test]
    fn edit_tracks_size_and_empty_means_absent() {
        with_shard(|w| {
            let k = Key::new(0, b"h");
            let mut e = Edit::load_or_create(w, k, KeyType::Hash).unwrap();
            assert!(e.put(w, b"a", b"1").unwrap());
            assert!(!e.put(w, b"a", b"2").unwrap());
            assert!(e.put(w, b"b", b"3").unwrap());
            e.save(w, k).unwrap();
            let v = View::load(w, k, KeyType::Hash).unwrap().unwrap();
            assert_eq!(v.size, 2);
            assert_eq!(v.get(w, b"a").unwrap(), Some(b"2".to_vec()));
            assert!(matches!(
                View::load(w, k, KeyType::Set),
                Err(Fail::Reply(_))
            ));

            let mut e = Edit::load(w, k, KeyType::Hash).unwrap().unwrap();
            assert!(e.remove(w, b"a").unwrap());
            assert!(!e.remove(w, b"zz").unwrap());
            assert!(e.remove(w, b"b").unwrap());
            e.save(w, k).unwrap();
            assert!(keyspace::lookup(w, k).unwrap().is_none());
            assert_eq!(w.state.counts[0].keys, 0);

            let e = Edit::load_or_create(w, Key::new(0, b"never"), KeyType::Set).unwrap();
            e.save(w, Key::new(0, b"never")).unwrap();
            assert!(keyspace::lookup(w, Key::new(0, b"never"))
                .unwrap()
                .is_none());
        });
    }

    /// A hash keeping its order lists its fields as they were added (an
    /// update keeps a field's place, a re-added field goes last, a
    /// dropped order lists by field).
    #[test]
    fn an_ordered_hash_lists_fields_as_added() {
        with_shard(|w| {
            let k = Key::new(0, b"h");
            let keys = |w: &WriteCtx| {
                let v = View::load(w, k, KeyType::Hash).unwrap().unwrap();
                let mut out = Vec::new();
                v.scan(w, &mut |f, _| {
                    out.push(String::from_utf8(f.to_vec()).unwrap());
                    true
                })
                .unwrap();
                out.join(" ")
            };
            let mut e = Edit::load_or_create(w, k, KeyType::Hash).unwrap();
            e.keep_order();
            for f in [&b"z"[..], b"a", b"m"] {
                e.put(w, f, b"1").unwrap();
            }
            e.save(w, k).unwrap();
            assert_eq!(keys(w), "z a m");
            let mut e = Edit::load(w, k, KeyType::Hash).unwrap().unwrap();
            assert!(e.remove(w, b"a").unwrap());
            assert!(!e.remove(w, b"nope").unwrap());
            e.put(w, b"z", b"2").unwrap();
            e.put(w, b"a", b"3").unwrap();
            e.save(w, k).unwrap();
            assert_eq!(keys(w), "z m a");
            assert_eq!(
                order_of(&ordered_extra([&b"z"[..], b"m"])),
                Some(vec![&b"z"[..], b"m"])
            );

            let mut e = Edit::load(w, k, KeyType::Hash).unwrap().unwrap();
            e.drop_order();
            e.mark_converted();
            e.save(w, k).unwrap();
            assert_eq!(keys(w), "a m z");

            let mut e = Edit::load(w, k, KeyType::Hash).unwrap().unwrap();
            e.order_as(&[b"m", b"a", b"z"]);
            e.save(w, k).unwrap();
            assert_eq!(keys(w), "m a z");
        });
    }

    /// The next edit of a collection just saved starts from the memo of
    /// its row, and never from a memo some other write made stale: a
    /// delete, a rollback, another type's lookup.
    #[test]
    fn edits_reuse_the_saved_row_only_while_it_holds() {
        with_shard(|w| {
            let k = Key::new(0, b"s");
            for (i, m) in [b"a", b"b", b"c"].iter().enumerate() {
                let mut e = Edit::load_or_create(w, k, KeyType::Set).unwrap();
                assert_eq!((e.is_new(), e.size), (i == 0, i as u64));
                assert!(e.put(w, *m, &[]).unwrap());
                e.save(w, k).unwrap();
            }
            assert_eq!(w.state.counts[0].keys, 1);
            // An unchanged save leaves the row (and the memo) as it was.
            let mut e = Edit::load(w, k, KeyType::Set).unwrap().unwrap();
            assert!(!e.put(w, b"a", &[]).unwrap());
            e.save(w, k).unwrap();
            assert_eq!(View::load(w, k, KeyType::Set).unwrap().unwrap().size, 3);
            assert!(matches!(
                Edit::load(w, k, KeyType::Hash),
                Err(Fail::Reply(_))
            ));

            // Taken back: the edit after the rollback sees the row before.
            w.begin_undo();
            let mut e = Edit::load(w, k, KeyType::Set).unwrap().unwrap();
            assert!(e.put(w, b"d", &[]).unwrap());
            e.save(w, k).unwrap();
            w.rollback().unwrap();
            let e = Edit::load(w, k, KeyType::Set).unwrap().unwrap();
            assert_eq!(e.size, 3);
            e.save(w, k).unwrap();

            // Deleted by a path that is not an edit: the memo goes too.
            let old = keyspace::lookup_for_write(w, k).unwrap().unwrap();
            keyspace::delete(w, k, &old).unwrap();
            assert!(Edit::load(w, k, KeyType::Set).unwrap().is_none());
            assert_eq!(w.state.counts[0].keys, 0);
        });
    }

    /// A scan sees exactly one collection's members, in member order, even
    /// next to a key whose name extends it.
    #[test]
    fn scan_stays_inside_one_key() {
        with_shard(|w| {
            let sets: [(&[u8], Vec<&[u8]>); 2] = [(b"s", vec![b"b", b"a"]), (b"s2", vec![b"c"])];
            for (name, members) in sets {
                let k = Key::new(0, name);
                let mut e = Edit::load_or_create(w, k, KeyType::Set).unwrap();
                for m in &members {
                    e.put(w, m, &[]).unwrap();
                }
                e.save(w, k).unwrap();
            }
            let v = View::load(w, Key::new(0, b"s"), KeyType::Set)
                .unwrap()
                .unwrap();
            let mut seen = Vec::new();
            v.scan(w, &mut |m, _| {
                seen.push(m.to_vec());
                true
            })
            .unwrap();
            assert_eq!(seen, vec![b"a".to_vec(), b"b".to_vec()]);
        });
    }
}

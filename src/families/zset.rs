//! Sorted sets: `member -> score` sub-keys plus the `zscore` index
//! (`score member`, order-preserving score bytes), both under the key's
//! version. Ranges by score and by rank walk the index in order; ranks are
//! counted by walking (the store has no order statistics).

use std::collections::HashMap;

use bytes::Bytes;

use super::collection::{Edit, View};
use super::Fail;
use crate::command::args::{self, error, is, Args, NOT_INTEGER, SYNTAX};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::pubsub::notify;
use crate::rdb::object::Limits;
use crate::storage::encoding;
use crate::storage::keyspace::{self, Key};
use crate::storage::merge::Order;
use crate::storage::{KeyType, KvRead, StoreError, Table, WriteCtx};
use crate::util::num;

const ZSET: KeyType = KeyType::ZSet;
const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";

/// A member and its score.
pub type Entry = (Vec<u8>, f64);

/// A score as stored in a member row.
pub(crate) fn decode_score(v: &[u8]) -> f64 {
    v.try_into().map(f64::from_be_bytes).unwrap_or(0.0)
}

/// Walks the score index from the lowest (or highest) score; `visit` gets
/// the member and score and returns false to stop.
pub fn walk(
    r: &dyn KvRead,
    prefix: &[u8],
    reverse: bool,
    visit: &mut dyn FnMut(&[u8], f64) -> bool,
) -> Result<(), StoreError> {
    walk_scores(r, prefix, None, Order::of(reverse), visit)
}

/// Like [`walk`], but only over scores in `[lo, hi]` (seeking straight to
/// them in the index) when `bounds` is given.
pub(crate) fn walk_scores(
    r: &dyn KvRead,
    prefix: &[u8],
    bounds: Option<(f64, f64)>,
    order: Order,
    visit: &mut dyn FnMut(&[u8], f64) -> bool,
) -> Result<(), StoreError> {
    let (start, end) = match bounds {
        None => (prefix.to_vec(), encoding::prefix_successor(prefix)),
        Some((lo, hi)) => {
            let at = |score: f64| {
                let mut k = prefix.to_vec();
                k.extend_from_slice(&encoding::score_to_bytes(score));
                k
            };
            // Every member scored `hi` sorts before the successor of its
            // score prefix.
            (at(lo), encoding::prefix_successor(&at(hi)))
        }
    };
    let n = prefix.len();
    r.scan_few(
        Table::ZScore,
        (&start, end.as_deref()),
        order,
        &mut |k, v| {
            let score = encoding::zscore_of_row(k[n..n + 8].try_into().unwrap(), v);
            visit(&k[n + 8..], score)
        },
    )
}

/// Gives every member of `entries` scored -0 the score 0, as Redis's
/// listpack reads it: DEBUG RELOAD encoding a sorted set that has left its
/// skiplist as a listpack again (see `object::encode_afresh`). The index
/// row's key already reads 0; its value and the member's row lose the sign.
pub(crate) fn drop_zero_signs(
    w: &mut WriteCtx,
    e: &mut Edit,
    entries: &[(Vec<u8>, f64)],
) -> Result<(), StoreError> {
    for (member, _) in entries
        .iter()
        .filter(|(_, s)| *s == 0.0 && s.is_sign_negative())
    {
        e.swap(w, member, &0f64.to_be_bytes())?;
        w.put(
            Table::ZScore,
            &encoding::zscore_key(&e.prefix, 0.0, member),
            encoding::zscore_value(0.0),
        )?;
    }
    Ok(())
}

/// Every entry in score order (ascending or descending).
fn all_entries(r: &dyn KvRead, prefix: &[u8], reverse: bool) -> Result<Vec<Entry>, StoreError> {
    let mut out = Vec::new();
    walk(r, prefix, reverse, &mut |m, s| {
        out.push((m.to_vec(), s));
        true
    })?;
    Ok(out)
}

/// A zset being changed.
struct ZEdit {
    e: Edit,
    /// Whether members were added (blocked clients get woken on save).
    grew: bool,
}

impl ZEdit {
    fn load(w: &mut WriteCtx, key: Key) -> Result<Option<ZEdit>, Fail> {
        Ok(Edit::load(w, key, ZSET)?.map(|e| ZEdit { e, grew: false }))
    }

    fn load_or_create(w: &mut WriteCtx, key: Key) -> Result<ZEdit, Fail> {
        Ok(ZEdit {
            e: Edit::load_or_create(w, key, ZSET)?,
            grew: false,
        })
    }

    fn score(&self, w: &WriteCtx, member: &[u8]) -> Result<Option<f64>, StoreError> {
        Ok(self.e.get(w, member)?.map(|v| decode_score(&v)))
    }

    /// Sets a member's score; true if the member is new.
    fn set(
        &mut self,
        w: &mut WriteCtx,
        member: &[u8],
        score: f64,
        limits: &Limits,
    ) -> Result<bool, StoreError> {
        Ok(self.put_score(w, member, score, limits)?.is_none())
    }

    /// Sets a member's score and returns the old one, converting the
    /// sorted set as Redis would (see [`ZEdit::note_new`]). The member row
    /// is written first: the write hands back the old score in the same
    /// tree walk, so no separate lookup is needed to fix the score index.
    ///
    /// Redis's listpack reads a score of -0 back as 0, while its skiplist
    /// keeps the sign; and an old score equal to the new one (0 and -0 are)
    /// is left as it was.
    fn put_score(
        &mut self,
        w: &mut WriteCtx,
        member: &[u8],
        score: f64,
        limits: &Limits,
    ) -> Result<Option<f64>, StoreError> {
        let negative_zero = score == 0.0 && score.is_sign_negative();
        let score = if negative_zero && !self.big_after_writing(w, member, limits)? {
            0.0
        } else {
            score
        };
        let old = self
            .e
            .swap(w, member, &score.to_be_bytes())?
            .map(|v| decode_score(&v));
        match old {
            None => self.note_new(member, limits),
            Some(old) if old == score => {
                if old.to_bits() != score.to_bits() {
                    self.e.swap(w, member, &old.to_be_bytes())?;
                }
                return Ok(Some(old));
            }
            Some(old) => w.del_seen(
                Table::ZScore,
                &encoding::zscore_key(&self.e.prefix, old, member),
            )?,
        }
        w.put(
            Table::ZScore,
            &encoding::zscore_key(&self.e.prefix, score, member),
            encoding::zscore_value(score),
        )?;
        self.grew |= old.is_none();
        Ok(old)
    }

    /// Records that the sorted set left its compact encoding (a listpack)
    /// if the new `member` just added makes it, as Redis 7.0 decides on
    /// each new member: more members than `zset-max-listpack-entries`, or
    /// a member longer than `zset-max-listpack-value`. An updated member
    /// converts nothing.
    fn note_new(&mut self, member: &[u8], limits: &Limits) {
        if !self.e.converted()
            && (self.e.size > limits.zset_entries as u64 || member.len() > limits.zset_value)
        {
            self.e.mark_converted();
        }
    }

    /// Whether the sorted set is in its big encoding once `member` is
    /// written: it is already, or `member` is new and converts it.
    fn big_after_writing(
        &self,
        w: &WriteCtx,
        member: &[u8],
        limits: &Limits,
    ) -> Result<bool, StoreError> {
        if self.e.converted() {
            return Ok(true);
        }
        let converts =
            self.e.size >= limits.zset_entries as u64 || member.len() > limits.zset_value;
        Ok(converts && self.e.get(w, member)?.is_none())
    }

    fn remove(&mut self, w: &mut WriteCtx, member: &[u8]) -> Result<bool, StoreError> {
        let Some(old) = self.score(w, member)? else {
            return Ok(false);
        };
        self.remove_scored(w, member, old)?;
        Ok(true)
    }

    /// Removes a member whose score the caller just read (from the index,
    /// in pops and range removals, or from its row): both rows are known to
    /// be there, so neither is looked up.
    fn remove_scored(
        &mut self,
        w: &mut WriteCtx,
        member: &[u8],
        score: f64,
    ) -> Result<(), StoreError> {
        w.del_seen(
            Table::ZScore,
            &encoding::zscore_key(&self.e.prefix, score, member),
        )?;
        self.e.remove_seen(w, member)
    }

    fn save(self, w: &mut WriteCtx, key: Key) -> Result<(), StoreError> {
        if self.grew && self.e.size > 0 {
            w.signals.push((key.db, key.name.to_vec()));
        }
        self.e.save(w, key)
    }
}

/// Entries of the zset (or plain set, whose members score 1) at `key`, for
/// the set-algebra commands: `None` if missing, WRONGTYPE for other types.
fn load_scored(r: &dyn KvRead, key: Key) -> Result<Option<Vec<Entry>>, Fail> {
    match keyspace::lookup_header(r, key)? {
        None => Ok(None),
        Some((KeyType::ZSet, _)) => {
            let v = View::load(r, key, ZSET)?.expect("live zset");
            Ok(Some(all_entries(r, &v.prefix, false)?))
        }
        Some((KeyType::Set, _)) => {
            let v = View::load(r, key, KeyType::Set)?.expect("live set");
            let mut out = Vec::new();
            v.scan(r, &mut |m, _| {
                out.push((m.to_vec(), 1.0));
                true
            })?;
            Ok(Some(out))
        }
        Some(_) => Err(super::wrongtype()),
    }
}

/// A score bound: value and whether it is exclusive.
#[derive(Clone, Copy, Debug)]
struct ScoreBound {
    value: f64,
    exclusive: bool,
}

fn parse_score_bound(arg: &[u8]) -> Option<ScoreBound> {
    let (exclusive, text) = match arg.first() {
        Some(b'(') => (true, &arg[1..]),
        _ => (false, arg),
    };
    let value = num::parse_f64_range(text)?;
    Some(ScoreBound { value, exclusive })
}

impl ScoreBound {
    fn above_min(&self, s: f64) -> bool {
        if self.exclusive {
            s > self.value
        } else {
            s >= self.value
        }
    }

    fn below_max(&self, s: f64) -> bool {
        if self.exclusive {
            s < self.value
        } else {
            s <= self.value
        }
    }
}

/// A lex bound: `-`, `+`, `[x` or `(x`.
#[derive(Clone, Debug)]
enum LexBound {
    Min,
    Max,
    Incl(Vec<u8>),
    Excl(Vec<u8>),
}

fn parse_lex_bound(arg: &[u8]) -> Option<LexBound> {
    match arg.first()? {
        b'-' if arg.len() == 1 => Some(LexBound::Min),
        b'+' if arg.len() == 1 => Some(LexBound::Max),
        b'[' => Some(LexBound::Incl(arg[1..].to_vec())),
        b'(' => Some(LexBound::Excl(arg[1..].to_vec())),
        _ => None,
    }
}

impl LexBound {
    fn above_min(&self, m: &[u8]) -> bool {
        match self {
            LexBound::Min => true,
            LexBound::Max => false,
            LexBound::Incl(x) => m >= &x[..],
            LexBound::Excl(x) => m > &x[..],
        }
    }

    fn below_max(&self, m: &[u8]) -> bool {
        match self {
            LexBound::Min => false,
            LexBound::Max => true,
            LexBound::Incl(x) => m <= &x[..],
            LexBound::Excl(x) => m < &x[..],
        }
    }
}

/// What a range selects.
#[derive(Clone, Debug)]
enum Range {
    Rank(i64, i64),
    Score(ScoreBound, ScoreBound),
    Lex(LexBound, LexBound),
}

/// A parsed range query.
#[derive(Clone, Debug)]
struct Query {
    range: Range,
    rev: bool,
    offset: i64,
    limit: i64,
    with_scores: bool,
}

impl Query {
    /// Everything in `range`, ascending, no LIMIT (ZCOUNT, ZREMRANGEBY*).
    fn whole(range: Range) -> Query {
        Query {
            range,
            rev: false,
            offset: 0,
            limit: -1,
            with_scores: false,
        }
    }
}

/// `min max` at argv[2..4] as a score range, with Redis's error.
fn score_range(a: &Args) -> Result<Range, Reply> {
    match (parse_score_bound(a.get(2)), parse_score_bound(a.get(3))) {
        (Some(min), Some(max)) => Ok(Range::Score(min, max)),
        _ => Err(error(NOT_FLOAT_RANGE)),
    }
}

/// `min max` at argv[2..4] as a lex range, with Redis's error.
fn lex_range(a: &Args) -> Result<Range, Reply> {
    match (parse_lex_bound(a.get(2)), parse_lex_bound(a.get(3))) {
        (Some(min), Some(max)) => Ok(Range::Lex(min, max)),
        _ => Err(error(NOT_LEX_RANGE)),
    }
}

/// Runs a range query over the zset's entries, in reply order.
fn select(r: &dyn KvRead, prefix: &[u8], size: u64, q: &Query) -> Result<Vec<Entry>, StoreError> {
    let mut out = Vec::new();
    match &q.range {
        Range::Rank(start, end) => {
            let len = size as i64;
            let mut s = if *start < 0 { len + start } else { *start };
            let mut e = if *end < 0 { len + end } else { *end };
            s = s.max(0);
            if s > e || s >= len {
                return Ok(out);
            }
            if e >= len {
                e = len - 1;
            }
            let mut i = 0i64;
            walk(r, prefix, q.rev, &mut |m, sc| {
                if i >= s {
                    out.push((m.to_vec(), sc));
                }
                i += 1;
                i <= e
            })?;
        }
        Range::Score(min, max) => {
            if min.value > max.value || min.value.is_nan() || max.value.is_nan() {
                return Ok(out);
            }
            let bounds = Some((min.value, max.value));
            let mut take = window(q, &mut out);
            walk_scores(r, prefix, bounds, Order::of(q.rev), &mut |m, sc| {
                let past = if q.rev {
                    !min.above_min(sc)
                } else {
                    !max.below_max(sc)
                };
                !past && take(min.above_min(sc) && max.below_max(sc), m, sc)
            })?;
        }
        Range::Lex(min, max) => {
            let mut take = window(q, &mut out);
            walk(r, prefix, q.rev, &mut |m, sc| {
                let past = if q.rev {
                    !min.above_min(m)
                } else {
                    !max.below_max(m)
                };
                !past && take(min.above_min(m) && max.below_max(m), m, sc)
            })?;
        }
    }
    Ok(out)
}

/// The LIMIT window of a score or lex range: returns a visitor step that
/// skips `offset` matches, collects up to `limit` (negative = all), and
/// says whether to go on. A negative offset or a zero limit selects
/// nothing, as in Redis.
fn window<'a>(q: &Query, out: &'a mut Vec<Entry>) -> impl FnMut(bool, &[u8], f64) -> bool + 'a {
    let (mut skip, limit) = (q.offset, q.limit);
    let empty = q.offset < 0 || q.limit == 0;
    move |inside, m, sc| {
        if empty {
            return false;
        }
        if inside {
            if skip > 0 {
                skip -= 1;
            } else {
                out.push((m.to_vec(), sc));
                if limit >= 0 && out.len() as i64 >= limit {
                    return false;
                }
            }
        }
        true
    }
}

/// Entries as a reply: members, or members with scores (flat, or pairs
/// where `pairs`: RESP3's shape), each score a double as the protocol
/// (`resp3`) writes it. Encoded as it is built: a reply of a hundred
/// members was a hundred allocated bulk replies in a vector.
fn entries_reply(items: Vec<Entry>, with_scores: bool, pairs: bool, resp3: bool) -> Reply {
    // Each member's bulk header and ending, a pair's header and a score
    // (at most 24 characters, plus its own header) fit in 64 bytes.
    let room = items.iter().map(|(m, _)| m.len() + 64).sum();
    let mut out = crate::protocol::reply::Encoder::array_body_with(room);
    for (m, score) in &items {
        if with_scores && pairs {
            out.array(2);
        }
        out.bulk(m);
        if with_scores {
            out.double(*score, resp3);
        }
    }
    let per_item = if with_scores && !pairs { 2 } else { 1 };
    out.into_array(items.len() * per_item)
}

/// Flags of ZADD.
#[derive(Default, Clone, Copy)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

/// (added, changed, new score or None when the flags blocked the update).
type AddOutcome = (bool, bool, Option<f64>);

/// Adds or updates one member under ZADD's rules; returns (added, changed,
/// new score or None when the flags blocked it).
fn zadd_one(
    w: &mut WriteCtx,
    z: &mut ZEdit,
    f: AddFlags,
    member: &[u8],
    score: f64,
    limits: &Limits,
) -> Result<Result<AddOutcome, Reply>, StoreError> {
    // Without conditions the score is written whatever the member held:
    // one write that also returns the old score.
    if !(f.nx || f.xx || f.gt || f.lt || f.incr) {
        let old = z.put_score(w, member, score, limits)?;
        return Ok(Ok((
            old.is_none(),
            old.is_some_and(|o| o != score),
            Some(score),
        )));
    }
    let cur = z.score(w, member)?;
    match cur {
        Some(cur) => {
            if f.nx {
                return Ok(Ok((false, false, None)));
            }
            let new = if f.incr { cur + score } else { score };
            if new.is_nan() {
                return Ok(Err(Reply::err("resulting score is not a number (NaN)")));
            }
            if (f.gt && new <= cur) || (f.lt && new >= cur) {
                return Ok(Ok((false, false, None)));
            }
            let changed = new != cur;
            if changed {
                z.set(w, member, new, limits)?;
            }
            Ok(Ok((false, changed, Some(new))))
        }
        None => {
            if f.xx {
                return Ok(Ok((false, false, None)));
            }
            z.set(w, member, score, limits)?;
            Ok(Ok((true, false, Some(score))))
        }
    }
}

/// ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]
pub fn zadd(s: &mut Session, a: Args) -> Action {
    let mut f = AddFlags::default();
    let mut i = 2;
    while i < a.len() {
        let o = a.get(i);
        if is(o, "nx") {
            f.nx = true;
        } else if is(o, "xx") {
            f.xx = true;
        } else if is(o, "gt") {
            f.gt = true;
        } else if is(o, "lt") {
            f.lt = true;
        } else if is(o, "ch") {
            f.ch = true;
        } else if is(o, "incr") {
            f.incr = true;
        } else {
            break;
        }
        i += 1;
    }
    let rest = a.from(i);
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return error(SYNTAX).into();
    }
    if f.nx && f.xx {
        return Reply::err("XX and NX options at the same time are not compatible").into();
    }
    if (f.gt || f.lt) && (f.nx || (f.gt && f.lt)) {
        return Reply::err("GT, LT, and/or NX options at the same time are not compatible").into();
    }
    if f.incr && rest.len() > 2 {
        return Reply::err("INCR option supports a single increment-element pair").into();
    }
    let mut pairs = Vec::with_capacity(rest.len() / 2);
    for p in rest.chunks(2) {
        match args::float(&p[0]) {
            Ok(sc) => pairs.push((sc, p[1].clone())),
            Err(r) => return r.into(),
        }
    }
    let limits = s.server.encoding_limits();
    s.write(a.get(1), move |w, k| {
        // Only added members and changed scores modify the key (WATCH).
        let (r, _) = w.quietly(
            &k.meta_key(),
            |w| -> Result<_, Fail> {
                let mut z = ZEdit::load_or_create(w, k)?;
                let (mut added, mut changed) = (0, 0);
                let mut last = None;
                for (sc, m) in &pairs {
                    match zadd_one(w, &mut z, f, m, *sc, &limits)? {
                        Ok((a, c, s)) => {
                            added += a as i64;
                            changed += c as i64;
                            last = s;
                        }
                        Err(r) => return Ok((r, 0)),
                    }
                }
                z.save(w, k)?;
                let count = (added + changed) as u64;
                if count > 0 {
                    w.event(notify::ZSET, if f.incr { "zincr" } else { "zadd" }, k);
                }
                if f.incr {
                    return Ok((last.map_or(Reply::Nil, Reply::Double), count));
                }
                Ok((
                    Reply::Int(if f.ch { added + changed } else { added }),
                    count,
                ))
            },
            |(_, count)| *count,
        )?;
        Ok(r)
    })
}

/// ZINCRBY key increment member
pub fn zincrby(s: &mut Session, a: Args) -> Action {
    let by = match args::float(a.get(2)) {
        Ok(b) => b,
        Err(r) => return r.into(),
    };
    let m = a.get(3).clone();
    let limits = s.server.encoding_limits();
    s.write(a.get(1), move |w, k| {
        // An increment that leaves the score as it was does not modify
        // the key (WATCH).
        let (out, _) = w.quietly(
            &k.meta_key(),
            |w| -> Result<_, Fail> {
                let mut z = ZEdit::load_or_create(w, k)?;
                let f = AddFlags {
                    incr: true,
                    ..AddFlags::default()
                };
                let out = match zadd_one(w, &mut z, f, &m, by, &limits)? {
                    Ok((a, c, s)) => (s.map_or(Reply::Nil, Reply::Double), a || c),
                    Err(r) => return Ok((r, false)),
                };
                z.save(w, k)?;
                if out.1 {
                    w.event(notify::ZSET, "zincr", k);
                }
                Ok(out)
            },
            |(_, modified)| u64::from(*modified),
        )?;
        Ok(out)
    })
}

/// ZSCORE key member
pub fn zscore(s: &mut Session, a: Args) -> Action {
    let m = a.get(2).clone();
    s.read(a.get(1), move |r, k| {
        let Some(v) = View::load(r, k, ZSET)? else {
            return Ok(Reply::Nil);
        };
        Ok(v.get(r, &m)?
            .map_or(Reply::Nil, |x| Reply::Double(decode_score(&x))))
    })
}

/// ZMSCORE key member [member ...]
pub fn zmscore(s: &mut Session, a: Args) -> Action {
    let ms = a.from(2).to_vec();
    s.read(a.get(1), move |r, k| {
        let v = View::load(r, k, ZSET)?;
        let mut out = Vec::with_capacity(ms.len());
        for m in &ms {
            out.push(match &v {
                Some(v) => v
                    .get(r, m)?
                    .map_or(Reply::Nil, |x| Reply::Double(decode_score(&x))),
                None => Reply::Nil,
            });
        }
        Ok(Reply::Array(out))
    })
}

/// ZCARD key
pub fn zcard(s: &mut Session, a: Args) -> Action {
    super::collection::card(s, &a, ZSET)
}

fn count_range(s: &mut Session, a: Args, range: Range) -> Action {
    let q = Query::whole(range);
    s.read(a.get(1), move |r, k| {
        let Some(v) = View::load(r, k, ZSET)? else {
            return Ok(Reply::Int(0));
        };
        Ok(Reply::Int(select(r, &v.prefix, v.size, &q)?.len() as i64))
    })
}

/// ZCOUNT key min max
pub fn zcount(s: &mut Session, a: Args) -> Action {
    match score_range(&a) {
        Ok(range) => count_range(s, a, range),
        Err(r) => r.into(),
    }
}

/// ZLEXCOUNT key min max
pub fn zlexcount(s: &mut Session, a: Args) -> Action {
    match lex_range(&a) {
        Ok(range) => count_range(s, a, range),
        Err(r) => r.into(),
    }
}

/// Which ZRANGE-family command is parsing.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RangeCmd {
    /// ZRANGE / ZRANGESTORE: all options.
    Generic,
    /// ZRANGEBYSCORE / ZREVRANGEBYSCORE.
    ByScore { rev: bool },
    /// ZRANGEBYLEX / ZREVRANGEBYLEX.
    ByLex { rev: bool },
    /// ZREVRANGE.
    RevRank,
}

/// Parses `min max [options]` starting at argv[first] with Redis's rules
/// and errors.
fn parse_query(a: &Args, first: usize, cmd: RangeCmd, store: bool) -> Result<Query, Reply> {
    // The legacy commands fix the range type and direction; ZRANGE lets
    // each be chosen once (a repeat is a syntax error, as in Redis).
    let (mut by_score, mut by_lex, mut rev) = match cmd {
        RangeCmd::Generic => (false, false, false),
        RangeCmd::ByScore { rev } => (true, false, rev),
        RangeCmd::ByLex { rev } => (false, true, rev),
        RangeCmd::RevRank => (false, false, true),
    };
    let (mut type_set, mut dir_set) = (cmd != RangeCmd::Generic, cmd != RangeCmd::Generic);
    let (mut offset, mut limit, mut with_scores) = (0i64, -1i64, false);
    let mut j = first + 2;
    while j < a.len() {
        let o = a.get(j);
        let left = a.len() - j - 1;
        if !store && is(o, "withscores") {
            with_scores = true;
        } else if is(o, "limit") && left >= 2 {
            offset = args::int(a.get(j + 1))?;
            limit = args::int(a.get(j + 2))?;
            j += 2;
        } else if !dir_set && is(o, "rev") {
            rev = true;
            dir_set = true;
        } else if !type_set && is(o, "byscore") {
            by_score = true;
            type_set = true;
        } else if !type_set && is(o, "bylex") {
            by_lex = true;
            type_set = true;
        } else {
            return Err(error(SYNTAX));
        }
        j += 1;
    }
    if limit != -1 && !by_score && !by_lex {
        return Err(Reply::err(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if with_scores && by_lex {
        return Err(Reply::err(
            "syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    // With REV the first bound is the maximum.
    let (lo, hi) = if rev && (by_score || by_lex) {
        (a.get(first + 1), a.get(first))
    } else {
        (a.get(first), a.get(first + 1))
    };
    let range = if by_score {
        match (parse_score_bound(lo), parse_score_bound(hi)) {
            (Some(min), Some(max)) => Range::Score(min, max),
            _ => return Err(error(NOT_FLOAT_RANGE)),
        }
    } else if by_lex {
        match (parse_lex_bound(lo), parse_lex_bound(hi)) {
            (Some(min), Some(max)) => Range::Lex(min, max),
            _ => return Err(error(NOT_LEX_RANGE)),
        }
    } else {
        match (args::int(lo), args::int(hi)) {
            (Ok(s), Ok(e)) => Range::Rank(s, e),
            _ => return Err(error(NOT_INTEGER)),
        }
    };
    Ok(Query {
        range,
        rev,
        offset,
        limit,
        with_scores,
    })
}

fn range_cmd(s: &mut Session, a: Args, cmd: RangeCmd) -> Action {
    let q = match parse_query(&a, 2, cmd, false) {
        Ok(q) => q,
        Err(r) => return r.into(),
    };
    let resp3 = s.resp3;
    s.read(a.get(1), move |r, k| {
        let Some(v) = View::load(r, k, ZSET)? else {
            return Ok(Reply::Array(Vec::new()));
        };
        let items = select(r, &v.prefix, v.size, &q)?;
        Ok(entries_reply(items, q.with_scores, resp3, resp3))
    })
}

/// ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]
pub fn zrange(s: &mut Session, a: Args) -> Action {
    range_cmd(s, a, RangeCmd::Generic)
}

/// ZREVRANGE key start stop [WITHSCORES]
pub fn zrevrange(s: &mut Session, a: Args) -> Action {
    range_cmd(s, a, RangeCmd::RevRank)
}

/// ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]
pub fn zrangebyscore(s: &mut Session, a: Args) -> Action {
    range_cmd(s, a, RangeCmd::ByScore { rev: false })
}

/// ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count]
pub fn zrevrangebyscore(s: &mut Session, a: Args) -> Action {
    range_cmd(s, a, RangeCmd::ByScore { rev: true })
}

/// ZRANGEBYLEX key min max [LIMIT offset count]
pub fn zrangebylex(s: &mut Session, a: Args) -> Action {
    range_cmd(s, a, RangeCmd::ByLex { rev: false })
}

/// ZREVRANGEBYLEX key max min [LIMIT offset count]
pub fn zrevrangebylex(s: &mut Session, a: Args) -> Action {
    range_cmd(s, a, RangeCmd::ByLex { rev: true })
}

/// ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]
pub fn zrangestore(s: &mut Session, a: Args) -> Action {
    let q = match parse_query(&a, 3, RangeCmd::Generic, true) {
        Ok(q) => q,
        Err(r) => return r.into(),
    };
    let by_rank = matches!(q.range, Range::Rank(..));
    let limits = s.server.encoding_limits();
    let load = move |r: &dyn KvRead, k: Key| -> Result<Vec<Entry>, Fail> {
        let Some(v) = View::load(r, k, ZSET)? else {
            return Ok(Vec::new());
        };
        Ok(select(r, &v.prefix, v.size, &q)?)
    };
    super::load_then_store(
        s,
        vec![a.get(2).clone()],
        a.get(1).clone(),
        load,
        move |w, kd, mut found| {
            let items = found.pop().unwrap_or_default();
            // Redis sizes the destination for a range of ranks; by score
            // or by lex it starts small.
            let size_hint = if by_rank { items.len() } else { 0 };
            let build = Build::InOrder { size_hint };
            store_entries(w, kd, &items, "zrangestore", build, &limits)?;
            Ok(Reply::Int(items.len() as i64))
        },
    )
}

/// How Redis builds a sorted set a command stores, which decides its
/// encoding, and so whether a score of -0 keeps its sign (see
/// [`ZEdit::put_score`]).
#[derive(Clone, Copy)]
pub(crate) enum Build {
    /// In the big encoding, converted to a listpack at the end if the
    /// result is small enough: ZUNIONSTORE, ZINTERSTORE, ZDIFFSTORE,
    /// GEOSEARCHSTORE.
    Whole,
    /// Member by member, as ZADD adds them, into a sorted set created for
    /// `size_hint` members: ZRANGESTORE.
    InOrder { size_hint: usize },
}

/// Replaces `dest` with a zset of `items` (deleting it when empty), built
/// as `build` says, and reports it as Redis does: `event` (the storing
/// command's), or `del` when an empty result deleted the key.
pub(crate) fn store_entries(
    w: &mut WriteCtx,
    dest: Key,
    items: &[Entry],
    event: &str,
    build: Build,
    limits: &Limits,
) -> Result<(), Fail> {
    let deleted = keyspace::delete_if_live(w, dest)?;
    if items.is_empty() {
        if deleted {
            w.event(notify::GENERIC, "del", dest);
        }
        return Ok(());
    }
    w.replacing(deleted, |w| -> Result<(), Fail> {
        let mut z = ZEdit::load_or_create(w, dest)?;
        let starts_big = match build {
            Build::Whole => {
                items.len() > limits.zset_entries
                    || items.iter().any(|(m, _)| m.len() > limits.zset_value)
            }
            Build::InOrder { size_hint } => size_hint > limits.zset_entries,
        };
        if starts_big {
            z.e.mark_converted();
        }
        for (m, sc) in items {
            z.set(w, m, *sc, limits)?;
        }
        z.save(w, dest)?;
        Ok(())
    })?;
    w.event(notify::ZSET, event, dest);
    Ok(())
}

fn rank(s: &mut Session, a: Args, rev: bool) -> Action {
    let m = a.get(2).clone();
    s.read(a.get(1), move |r, k| {
        let Some(v) = View::load(r, k, ZSET)? else {
            return Ok(Reply::Nil);
        };
        if v.get(r, &m)?.is_none() {
            return Ok(Reply::Nil);
        }
        let mut i = 0i64;
        let mut found = None;
        walk(r, &v.prefix, rev, &mut |x, _| {
            if x == &m[..] {
                found = Some(i);
                return false;
            }
            i += 1;
            true
        })?;
        Ok(found.map_or(Reply::Nil, Reply::Int))
    })
}

/// ZRANK key member
pub fn zrank(s: &mut Session, a: Args) -> Action {
    rank(s, a, false)
}

/// ZREVRANK key member
pub fn zrevrank(s: &mut Session, a: Args) -> Action {
    rank(s, a, true)
}

/// ZREM key member [member ...]
pub fn zrem(s: &mut Session, a: Args) -> Action {
    let ms = a.from(2).to_vec();
    s.write(a.get(1), move |w, k| {
        let Some(mut z) = ZEdit::load(w, k)? else {
            return Ok(Reply::Int(0));
        };
        let mut n = 0;
        for m in &ms {
            n += z.remove(w, m)? as i64;
        }
        let emptied = z.e.size == 0;
        z.save(w, k)?;
        if n > 0 {
            w.event_emptying(notify::ZSET, "zrem", k, emptied);
            w.count_changes(n as u64);
        }
        Ok(Reply::Int(n))
    })
}

fn remove_range(s: &mut Session, a: Args, range: Range, event: &'static str) -> Action {
    let q = Query::whole(range);
    s.write(a.get(1), move |w, k| {
        let Some(mut z) = ZEdit::load(w, k)? else {
            return Ok(Reply::Int(0));
        };
        let items = select(w, &z.e.prefix, z.e.size, &q)?;
        for (m, sc) in &items {
            z.remove_scored(w, m, *sc)?;
        }
        let emptied = z.e.size == 0;
        z.save(w, k)?;
        if !items.is_empty() {
            w.event_emptying(notify::ZSET, event, k, emptied);
            w.count_changes(items.len() as u64);
        }
        Ok(Reply::Int(items.len() as i64))
    })
}

/// ZREMRANGEBYRANK key start stop
pub fn zremrangebyrank(s: &mut Session, a: Args) -> Action {
    match (a.int(2), a.int(3)) {
        (Ok(st), Ok(en)) => remove_range(s, a, Range::Rank(st, en), "zremrangebyrank"),
        (Err(r), _) | (_, Err(r)) => r.into(),
    }
}

/// ZREMRANGEBYSCORE key min max
pub fn zremrangebyscore(s: &mut Session, a: Args) -> Action {
    match score_range(&a) {
        Ok(range) => remove_range(s, a, range, "zremrangebyscore"),
        Err(r) => r.into(),
    }
}

/// ZREMRANGEBYLEX key min max
pub fn zremrangebylex(s: &mut Session, a: Args) -> Action {
    match lex_range(&a) {
        Ok(range) => remove_range(s, a, range, "zremrangebylex"),
        Err(r) => r.into(),
    }
}

/// Pops up to `count` entries from the low (or high) end.
fn pop_entries(
    w: &mut WriteCtx,
    key: Key,
    max: bool,
    count: u64,
) -> Result<Option<Vec<Entry>>, Fail> {
    let Some(mut z) = ZEdit::load(w, key)? else {
        return Ok(None);
    };
    let mut picked = Vec::new();
    if count > 0 {
        // A pop reads as many rows as it takes, not a full chunk a layer.
        let order = Order {
            reverse: max,
            first: usize::try_from(count).unwrap_or(usize::MAX),
            // The next pop begins where this one stops.
            window: true,
        };
        walk_scores(w, &z.e.prefix, None, order, &mut |m, sc| {
            picked.push((m.to_vec(), sc));
            (picked.len() as u64) < count
        })?;
    }
    for (m, sc) in &picked {
        z.remove_scored(w, m, *sc)?;
    }
    let emptied = z.e.size == 0;
    z.save(w, key)?;
    if !picked.is_empty() {
        w.event_emptying(
            notify::ZSET,
            if max { "zpopmax" } else { "zpopmin" },
            key,
            emptied,
        );
        w.count_changes(picked.len() as u64);
    }
    Ok(Some(picked))
}

fn zpop(s: &mut Session, a: Args, max: bool) -> Action {
    let count = match super::parse_pop_count(&a) {
        Ok(c) => c,
        Err(r) => return r.into(),
    };
    let resp3 = s.resp3;
    s.write(a.get(1), move |w, k| {
        let items = pop_entries(w, k, max, count.unwrap_or(1))?.unwrap_or_default();
        if count.is_none() {
            // Without COUNT the reply is one flat member, score pair.
            return Ok(entries_reply(items, true, false, resp3));
        }
        Ok(entries_reply(items, true, resp3, resp3))
    })
}

/// ZPOPMIN key [count]
pub fn zpopmin(s: &mut Session, a: Args) -> Action {
    zpop(s, a, false)
}

/// ZPOPMAX key [count]
pub fn zpopmax(s: &mut Session, a: Args) -> Action {
    zpop(s, a, true)
}

/// ZRANDMEMBER key [count [WITHSCORES]]
pub fn zrandmember(s: &mut Session, a: Args) -> Action {
    if a.len() == 2 {
        return super::collection::random_member(s, &a, ZSET);
    }
    let (count, with_scores) = match super::parse_rand_count(&a, "withscores") {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    let resp3 = s.resp3;
    let overflow = super::collection::PickOverflow::check(s, count);
    s.read(a.get(1), move |r, k| {
        let Some(v) = View::load(r, k, ZSET)? else {
            return Ok(Reply::Array(Vec::new()));
        };
        if let Some(o) = &overflow {
            return Ok(o.close());
        }
        if count > 0 && count as u64 >= v.size {
            // Asked for at least all of it: Redis lists the whole set from
            // its highest score down (its iterator starts at the tail).
            let mut out = crate::protocol::reply::Encoder::array_body();
            let mut len = 0;
            walk(r, &v.prefix, true, &mut |m, score| {
                len += View::put_pick(&mut out, m, with_scores, resp3, |out| {
                    out.double(score, resp3)
                });
                true
            })?;
            return Ok(out.into_array(len));
        }
        Ok(v.pick_reply(r, count, |out, m, sc| {
            View::put_pick(out, m, with_scores, resp3, |out| {
                out.double(decode_score(sc), resp3)
            })
        })?)
    })
}

/// How ZUNION/ZINTER combine scores.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

fn aggregate(agg: Aggregate, a: f64, b: f64) -> f64 {
    // As Redis: comparisons keep `a` on NaN and on -0 vs 0.
    match agg {
        Aggregate::Sum => {
            let s = a + b;
            // inf + -inf (or a NaN weighted score): Redis takes 0.
            if s.is_nan() {
                0.0
            } else {
                s
            }
        }
        Aggregate::Min => {
            if b < a {
                b
            } else {
                a
            }
        }
        Aggregate::Max => {
            if b > a {
                b
            } else {
                a
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

/// Parsed numkeys/keys/WEIGHTS/AGGREGATE/WITHSCORES.
struct Combine {
    keys: Vec<Bytes>,
    weights: Vec<f64>,
    agg: Aggregate,
    with_scores: bool,
}

/// Redis checks numkeys, then the keys' types, then the options: the outer
/// error is numkeys'; an option error is kept for after the keys have been
/// type-checked.
type Parsed = Result<(Combine, Option<Reply>), Reply>;

fn parse_combine(a: &Args, numkeys_at: usize, op: SetOp, store: bool, name: &str) -> Parsed {
    let numkeys = args::int(a.get(numkeys_at))?;
    if numkeys < 1 {
        return Err(Reply::err(format!(
            "at least 1 input key is needed for '{name}' command"
        )));
    }
    let numkeys = numkeys as usize;
    if numkeys > a.len() - numkeys_at - 1 {
        return Err(error(SYNTAX));
    }
    let keys = a.all()[numkeys_at + 1..numkeys_at + 1 + numkeys].to_vec();
    let mut c = Combine {
        keys,
        weights: vec![1.0; numkeys],
        agg: Aggregate::Sum,
        with_scores: false,
    };
    let options = parse_combine_options(a, numkeys_at + 1 + numkeys, op, store, &mut c).err();
    Ok((c, options))
}

fn parse_combine_options(
    a: &Args,
    from: usize,
    op: SetOp,
    store: bool,
    c: &mut Combine,
) -> Result<(), Reply> {
    let numkeys = c.keys.len();
    let mut j = from;
    while j < a.len() {
        let o = a.get(j);
        let left = a.len() - j - 1;
        if op != SetOp::Diff && is(o, "weights") && left >= numkeys {
            for (i, w) in c.weights.iter_mut().enumerate() {
                *w = num::parse_f64(a.get(j + 1 + i))
                    .ok_or_else(|| Reply::err("weight value is not a float"))?;
            }
            j += numkeys;
        } else if op != SetOp::Diff && is(o, "aggregate") && left >= 1 {
            let v = a.get(j + 1);
            c.agg = if is(v, "sum") {
                Aggregate::Sum
            } else if is(v, "min") {
                Aggregate::Min
            } else if is(v, "max") {
                Aggregate::Max
            } else {
                return Err(error(SYNTAX));
            };
            j += 1;
        } else if !store && is(o, "withscores") {
            c.with_scores = true;
        } else {
            return Err(error(SYNTAX));
        }
        j += 1;
    }
    Ok(())
}

/// Combines the inputs in score order (ties by member).
fn combine(
    op: SetOp,
    inputs: Vec<Option<Vec<Entry>>>,
    weights: &[f64],
    agg: Aggregate,
) -> Vec<Entry> {
    let weighted = |s: f64, w: f64| {
        let x = s * w;
        if x.is_nan() {
            0.0
        } else {
            x
        }
    };
    let mut result: HashMap<Vec<u8>, f64> = HashMap::new();
    // Redis combines the inputs smallest first (with their weights): the
    // order sums are taken in shows in the last bits of float scores.
    let mut sized: Vec<(Option<Vec<Entry>>, f64)> =
        inputs.into_iter().zip(weights.iter().copied()).collect();
    if op != SetOp::Diff {
        sized.sort_by_key(|(input, _)| input.as_ref().map_or(0, Vec::len));
    }
    let (inputs, weights): (Vec<_>, Vec<f64>) = sized.into_iter().unzip();
    let weights = &weights[..];
    match op {
        SetOp::Union => {
            for (input, &w) in inputs.into_iter().zip(weights) {
                for (m, s) in input.unwrap_or_default() {
                    let v = weighted(s, w);
                    result
                        .entry(m)
                        .and_modify(|cur| *cur = aggregate(agg, *cur, v))
                        .or_insert(v);
                }
            }
        }
        SetOp::Inter => {
            let mut iter = inputs.into_iter().zip(weights);
            if let Some((first, &w0)) = iter.next() {
                for (m, s) in first.unwrap_or_default() {
                    result.insert(m, weighted(s, w0));
                }
                for (input, &w) in iter {
                    let other: HashMap<Vec<u8>, f64> =
                        input.unwrap_or_default().into_iter().collect();
                    // Redis zeroes a NaN weighted score only for the first
                    // input; later ones go to the aggregate as they are.
                    result.retain(|m, cur| match other.get(m) {
                        Some(&s) => {
                            *cur = aggregate(agg, *cur, s * w);
                            true
                        }
                        None => false,
                    });
                }
            }
        }
        SetOp::Diff => {
            let mut iter = inputs.into_iter();
            if let Some(first) = iter.next() {
                result = first.unwrap_or_default().into_iter().collect();
                for input in iter {
                    for (m, _) in input.unwrap_or_default() {
                        result.remove(&m);
                    }
                }
            }
        }
    }
    let mut out: Vec<Entry> = result.into_iter().collect();
    // -0 and 0 are the same score (ties go by member), as in Redis.
    out.sort_by(|a, b| {
        a.1.partial_cmp(&b.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.0.cmp(&b.0))
    });
    out
}

fn combine_cmd(s: &mut Session, a: Args, op: SetOp, name: &'static str) -> Action {
    let (c, option_error) = match parse_combine(&a, 1, op, false, name) {
        Ok(c) => c,
        Err(r) => return r.into(),
    };
    let resp3 = s.resp3;
    let (weights, agg, with_scores) = (c.weights, c.agg, c.with_scores);
    s.read_many(c.keys, move |readers, keys| {
        let inputs = readers
            .iter()
            .zip(keys)
            .map(|(r, k)| load_scored(*r, *k))
            .collect::<Result<Vec<_>, Fail>>()?;
        if let Some(e) = option_error {
            return Ok(e);
        }
        Ok(entries_reply(
            combine(op, inputs, &weights, agg),
            with_scores,
            resp3,
            resp3,
        ))
    })
}

/// ZUNION numkeys key [key ...] [WEIGHTS ...] [AGGREGATE ...] [WITHSCORES]
pub fn zunion(s: &mut Session, a: Args) -> Action {
    combine_cmd(s, a, SetOp::Union, "zunion")
}

/// ZINTER numkeys key [key ...] [WEIGHTS ...] [AGGREGATE ...] [WITHSCORES]
pub fn zinter(s: &mut Session, a: Args) -> Action {
    combine_cmd(s, a, SetOp::Inter, "zinter")
}

/// ZDIFF numkeys key [key ...] [WITHSCORES]
pub fn zdiff(s: &mut Session, a: Args) -> Action {
    combine_cmd(s, a, SetOp::Diff, "zdiff")
}

fn combine_store(s: &mut Session, a: Args, op: SetOp, name: &'static str) -> Action {
    let (c, option_error) = match parse_combine(&a, 2, op, true, name) {
        Ok(c) => c,
        Err(r) => return r.into(),
    };
    let (weights, agg) = (c.weights, c.agg);
    let limits = s.server.encoding_limits();
    super::load_then_store(
        s,
        c.keys,
        a.get(1).clone(),
        load_scored,
        move |w, kd, inputs| {
            // Option errors come after the keys' type checks, as in Redis.
            if let Some(e) = option_error {
                return Ok(e);
            }
            let result = combine(op, inputs, &weights, agg);
            store_entries(w, kd, &result, name, Build::Whole, &limits)?;
            Ok(Reply::Int(result.len() as i64))
        },
    )
}

/// ZUNIONSTORE destination numkeys key [key ...] [WEIGHTS ...] [AGGREGATE ...]
pub fn zunionstore(s: &mut Session, a: Args) -> Action {
    combine_store(s, a, SetOp::Union, "zunionstore")
}

/// ZINTERSTORE destination numkeys key [key ...] [WEIGHTS ...] [AGGREGATE ...]
pub fn zinterstore(s: &mut Session, a: Args) -> Action {
    combine_store(s, a, SetOp::Inter, "zinterstore")
}

/// ZDIFFSTORE destination numkeys key [key ...]
pub fn zdiffstore(s: &mut Session, a: Args) -> Action {
    combine_store(s, a, SetOp::Diff, "zdiffstore")
}

/// ZINTERCARD numkeys key [key ...] [LIMIT limit]
pub fn zintercard(s: &mut Session, a: Args) -> Action {
    let numkeys = match args::int(a.get(1)) {
        Ok(n) if n > 0 => n as usize,
        Ok(_) => {
            return Reply::err("at least 1 input key is needed for 'zintercard' command").into()
        }
        Err(r) => return r.into(),
    };
    if numkeys > a.len() - 2 {
        return error(SYNTAX).into();
    }
    // Redis checks the keys' types before it parses LIMIT.
    let limit = super::collection::parse_card_limit(&a, 2 + numkeys);
    let keys = a.all()[2..2 + numkeys].to_vec();
    s.read_many(keys, move |readers, keys| {
        let inputs = readers
            .iter()
            .zip(keys)
            .map(|(r, k)| load_scored(*r, *k))
            .collect::<Result<Vec<_>, Fail>>()?;
        let limit = limit?;
        let weights = vec![1.0; inputs.len()];
        let n = combine(SetOp::Inter, inputs, &weights, Aggregate::Sum).len();
        Ok(Reply::Int(if limit > 0 { n.min(limit) } else { n } as i64))
    })
}

/// ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]
pub fn zmpop(s: &mut Session, a: Args) -> Action {
    let (keys, min, count) = match super::parse_mpop(&a, 1, ("min", "max")) {
        Ok(p) => p,
        Err(r) => return r.into(),
    };
    let max = !min;
    zmpop_action(s.server.shards.clone(), s.db, keys, max, count)
}

/// ZMPOP as an action (also the attempt of BZPOPMIN / BZPOPMAX / BZMPOP):
/// `[key, [[member, score]...]]`, or a nil array when every zset is empty.
pub fn zmpop_action(
    shards: std::sync::Arc<crate::shard::ShardSet>,
    db: u8,
    keys: Vec<Bytes>,
    max: bool,
    count: u64,
) -> Action {
    super::first_pop(shards, db, keys, move |w, k| {
        Ok(pop_entries(w, k, max, count)?.map(|items| {
            Reply::Array(vec![
                Reply::bulk_copy(k.name),
                Reply::Array(
                    items
                        .into_iter()
                        .map(|(m, s)| Reply::Array(vec![Reply::bulk(m), Reply::Double(s)]))
                        .collect(),
                ),
            ])
        }))
    })
}

/// ZSCAN key cursor [MATCH pattern] [COUNT count]: every match in one reply
/// with cursor 0, like HSCAN.
pub fn zscan(s: &mut Session, a: Args) -> Action {
    super::collection::scan_members(s, &a, ZSET, |m, sc, out| {
        out.push(Reply::bulk_copy(m));
        out.push(Reply::bulk(num::format_double(decode_score(sc))));
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::collection::tests::with_shard;

    fn query(range: Range, rev: bool) -> Query {
        Query {
            range,
            rev,
            offset: 0,
            limit: -1,
            with_scores: true,
        }
    }

    /// The score index orders -inf < negatives < 0 < positives < +inf with
    /// ties by member; updates move a member; removes drop both rows.
    #[test]
    fn index_order_ranges_and_updates() {
        with_shard(|w| {
            let k = Key::new(0, b"z");
            let mut z = ZEdit::load_or_create(w, k).unwrap();
            for (m, s) in [
                (&b"pinf"[..], f64::INFINITY),
                (b"b", 1.0),
                (b"a", 1.0),
                (b"neg", -2.5),
                (b"ninf", f64::NEG_INFINITY),
                (b"zero", -0.0),
            ] {
                assert!(z.set(w, m, s, &Limits::default()).unwrap());
            }
            let update = z.set(w, b"neg", -3.0, &Limits::default()).unwrap();
            assert!(!update, "update is not an add");
            assert!(z.remove(w, b"pinf").unwrap());
            z.save(w, k).unwrap();
            let v = View::load(w, k, ZSET).unwrap().unwrap();
            let all = select(w, &v.prefix, v.size, &query(Range::Rank(0, -1), false)).unwrap();
            let names: Vec<&[u8]> = all.iter().map(|(m, _)| m.as_slice()).collect();
            assert_eq!(names, [&b"ninf"[..], b"neg", b"zero", b"a", b"b"]);
            assert_eq!(all[1].1, -3.0);
            assert_eq!(all[2].1.to_bits(), 0.0f64.to_bits(), "a listpack's -0 is 0");
            let min = parse_score_bound(b"(-3").unwrap();
            let max = parse_score_bound(b"1").unwrap();
            let mid = select(w, &v.prefix, v.size, &query(Range::Score(min, max), true)).unwrap();
            let names: Vec<&[u8]> = mid.iter().map(|(m, _)| m.as_slice()).collect();
            assert_eq!(names, [&b"b"[..], b"a", b"zero"]);
            let mut rows = 0;
            w.scan(Table::ZScore, &v.prefix, None, false, &mut |k, _| {
                rows += k.starts_with(&v.prefix) as usize;
                true
            })
            .unwrap();
            assert_eq!(rows, 5, "one index row per member");
        });
    }

    /// A sorted set in its big encoding keeps a score of -0 in both rows
    /// (ZSCORE reads one, ZRANGE the other), ties it with 0 by member, and
    /// leaves it as it was when set to 0.
    #[test]
    fn a_big_sorted_set_keeps_negative_zero() {
        with_shard(|w| {
            let k = Key::new(0, b"z");
            let limits = Limits {
                zset_entries: 1,
                ..Limits::default()
            };
            let mut z = ZEdit::load_or_create(w, k).unwrap();
            let is_negative_zero = |s: f64| s.to_bits() == (-0.0f64).to_bits();
            z.set(w, b"b", -0.0, &limits).unwrap();
            assert!(!is_negative_zero(z.score(w, b"b").unwrap().unwrap()));
            z.set(w, b"c", 1.0, &limits).unwrap();
            assert!(z.e.converted(), "the second member converts it");
            z.set(w, b"a", -0.0, &limits).unwrap();
            z.set(w, b"d", 0.0, &limits).unwrap();
            z.set(w, b"d", -0.0, &limits).unwrap();
            z.set(w, b"a", 0.0, &limits).unwrap();
            assert!(is_negative_zero(z.score(w, b"a").unwrap().unwrap()));
            assert!(!is_negative_zero(z.score(w, b"d").unwrap().unwrap()));
            z.save(w, k).unwrap();
            let v = View::load(w, k, ZSET).unwrap().unwrap();
            let all = select(w, &v.prefix, v.size, &query(Range::Rank(0, -1), false)).unwrap();
            let got: Vec<(&[u8], bool)> = all
                .iter()
                .map(|(m, s)| (m.as_slice(), is_negative_zero(*s)))
                .collect();
            let want: [(&[u8], bool); 4] =
                [(b"a", true), (b"b", false), (b"d", false), (b"c", false)];
            assert_eq!(got, want);
        });
    }
}

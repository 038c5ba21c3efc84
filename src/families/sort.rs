//! SORT and SORT_RO: sort (or page through) a list, set or sorted set,
//! optionally weighting elements by other keys (`BY pattern`), fetching
//! other keys per element (`GET pattern`) and storing the result as a list.
//!
//! # Where it runs
//! SORT always writes, if only to convert the sorted set it sorts (Redis
//! converts a listpack to a skiplist for good, see `keep_as_skiplist`).
//! BY and GET patterns name keys that are known only once the source has
//! been read, and they may live on any shard. So:
//! * no pattern that reads keys (no BY with a `*`, GETs only `#` or
//!   constants), and STORE's destination (if any) on the source's shard:
//!   one write op there;
//! * no such pattern, the destination elsewhere: one coordinated command
//!   over the two shards;
//! * patterns: one coordinated command holding every shard. The source is
//!   read on its shard, then each shard is asked in one step for the
//!   values it holds, then the destination (if any) is written: every
//!   read is of the same state, and a write commits with nobody in
//!   between.
//!
//! # Redis's rules kept here
//! * Numeric weights are read as C's `strtod` reads them (leading blanks,
//!   hex floats, `inf`; an empty string is 0; text ends at a NUL byte);
//!   NaN, trailing garbage or a range error (overflow, or a result
//!   below the normal range) fail the whole command with
//!   "One or more scores can't be converted into double", after the
//!   source's type was checked. A missing weight key weighs 0 (or sorts
//!   first with ALPHA). Equal weights are ordered by the elements' bytes.
//! * ALPHA compares bytes (Redis uses `strcoll`, which is byte order in the
//!   C and C.UTF-8 locales); without STORE the comparison stops at a NUL
//!   byte, as `strcoll` on C strings does. The sort is stable, as glibc's
//!   `qsort` (a merge sort) is.
//! * `BY` a pattern without `*` keeps the natural order: list order or
//!   score order (reversed by DESC, LIMIT taken from that end), and a set's
//!   own order; a set with STORE, or inside a script, is sorted ALPHA
//!   instead, as Redis does so that replicas agree.
//! * LIMIT: a negative offset is 0, a negative count means all, an offset
//!   past the end gives nothing.
//! * STORE always writes a list, replacing whatever the key held; an empty
//!   result deletes it. The reply is the number of stored items.

use std::cmp::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::collection::View;
use super::{coordinated, Fail};
use crate::command::args::{error, is, Args, SYNTAX};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::pubsub::notify;
use crate::shard::coordinator::{CoordError, Locked};
use crate::shard::ShardSet;
use crate::storage::encoding;
use crate::storage::keyspace::{self, Key};
use crate::storage::{KeyType, KvRead, MetaBody, StoreError, Table};

const NOT_DOUBLE: &str = "One or more scores can't be converted into double";

/// SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC]
/// [ALPHA] [STORE destination]
pub fn sort(s: &mut Session, a: Args) -> Action {
    sort_command(s, a, false)
}

/// SORT_RO key [BY pattern] [LIMIT offset count] [GET pattern ...]
/// [ASC|DESC] [ALPHA]: SORT without STORE (which is a syntax error here).
pub fn sort_ro(s: &mut Session, a: Args) -> Action {
    sort_command(s, a, true)
}

/// The parsed options.
#[derive(Clone)]
struct Opts {
    /// The last BY pattern.
    by: Option<Bytes>,
    /// Some BY pattern had no `*`: keep the natural order.
    dontsort: bool,
    /// LIMIT offset (0 without LIMIT).
    offset: i64,
    /// LIMIT count (-1, meaning all, without LIMIT).
    count: i64,
    /// GET patterns in order.
    gets: Vec<Bytes>,
    desc: bool,
    alpha: bool,
    /// STORE destination.
    store: Option<Bytes>,
    /// Run by a script (Redis's CLIENT_SCRIPT).
    in_script: bool,
    /// `set-max-intset-entries`: a set kept in its own order lists an
    /// intset's members in numeric order.
    intset_limit: usize,
}

impl Opts {
    /// Whether any pattern will read other keys.
    fn reads_keys(&self) -> bool {
        (!self.dontsort && self.by.is_some())
            || self
                .gets
                .iter()
                .any(|g| matches!(lookup_of(g, b"x"), Lookup::Key { .. }))
    }
}

/// Parses the options after the key with Redis's rules: later options win,
/// GETs add up, and the first bad word ends parsing with an error. In
/// cluster mode (`cluster`) a BY pattern with a `*` and any GET are refused
/// where they stand, as Redis 7.0 refuses them: the keys they name may live
/// on other nodes.
fn parse(a: &Args, readonly: bool, cluster: bool) -> Result<Opts, Reply> {
    let argv = a.all();
    let mut o = Opts {
        by: None,
        dontsort: false,
        offset: 0,
        count: -1,
        gets: Vec::new(),
        desc: false,
        alpha: false,
        store: None,
        in_script: false,
        intset_limit: 0,
    };
    let mut j = 2;
    while j < argv.len() {
        let left = argv.len() - j - 1;
        let w = &argv[j];
        if is(w, "asc") {
            o.desc = false;
        } else if is(w, "desc") {
            o.desc = true;
        } else if is(w, "alpha") {
            o.alpha = true;
        } else if is(w, "limit") && left >= 2 {
            o.offset = a.int(j + 1)?;
            o.count = a.int(j + 2)?;
            j += 2;
        } else if !readonly && is(w, "store") && left >= 1 {
            o.store = Some(argv[j + 1].clone());
            j += 1;
        } else if is(w, "by") && left >= 1 {
            let p = &argv[j + 1];
            // Once set, "don't sort" stays set (Redis never clears it).
            if !c_str(p).contains(&b'*') {
                o.dontsort = true;
            } else if cluster {
                return Err(error("ERR BY option of SORT denied in Cluster mode."));
            }
            o.by = Some(p.clone());
            j += 1;
        } else if is(w, "get") && left >= 1 {
            if cluster {
                return Err(error("ERR GET option of SORT denied in Cluster mode."));
            }
            o.gets.push(argv[j + 1].clone());
            j += 1;
        } else {
            return Err(error(SYNTAX));
        }
        j += 1;
    }
    Ok(o)
}

fn sort_command(s: &mut Session, a: Args, readonly: bool) -> Action {
    let mut opts = match parse(&a, readonly, s.server.cluster.is_some()) {
        Ok(o) => o,
        Err(r) => return r.into(),
    };
    opts.in_script = s.in_script;
    opts.intset_limit = s.server.encoding_limits().set_intset_entries;
    let opts = Arc::new(opts);
    let src = a.get(1).clone();
    let db = s.db;
    let shards = s.server.shards.clone();
    let src_shard = shards.shard_of_key(&src);
    // Every path writes, if only to convert a sorted set it sorts.
    let ids: Vec<usize> = match (opts.reads_keys(), &opts.store) {
        (false, None) => return s.write(&src, move |w, k| sort_here(w, k, &opts, None)),
        (false, Some(dest)) if shards.shard_of_key(dest) == src_shard => {
            let dest = dest.clone();
            return s.write(&src, move |w, k| {
                sort_here(w, k, &opts, Some(Key::new(db, &dest)))
            });
        }
        (false, Some(dest)) => vec![src_shard, shards.shard_of_key(dest)],
        (true, _) => (0..shards.len()).collect(),
    };
    coordinated(ids, move |locked| async move {
        match sort_locked(&locked, &shards, db, src, opts).await? {
            Ok(r) => Ok(Ok(r)),
            // A sorted set converted before the error stays converted.
            Err((Fail::Reply(r), true)) => Ok(Ok(r)),
            Err((Fail::Reply(r), false)) => Ok(Err(r)),
            Err((Fail::Store(e), _)) => Err(e.into()),
        }
    })
}

/// SORT whose source (and STORE destination, if any) is on the shard of
/// the write `w`, with no pattern reading other keys.
fn sort_here(
    w: &mut crate::storage::WriteCtx,
    k: Key,
    opts: &Opts,
    dest: Option<Key>,
) -> Result<Reply, Fail> {
    let mut job = load(w, k, opts)?;
    keep_as_skiplist(w, k, &job)?;
    job.sort(Vec::new())?;
    let gets = job.get_lookups();
    let found = fill(gets, Vec::new());
    let Some(dest) = dest else {
        return Ok(job.reply(found));
    };
    let items = job.items(found);
    store(w, dest, &items)?;
    Ok(Reply::Int(items.len() as i64))
}

/// Redis converts a sorted set it sorts to its big encoding (a skiplist)
/// and keeps it so, even when the sort then fails: OBJECT ENCODING and
/// DUMP say so, and a later score of -0 keeps its sign. Not a change of
/// the key's value: nobody watching it is told, and nothing is counted.
fn keep_as_skiplist(w: &mut crate::storage::WriteCtx, k: Key, job: &Job) -> Result<(), Fail> {
    if !job.compact_zset {
        return Ok(());
    }
    w.quietly(
        &k.meta_key(),
        |w| -> Result<(), Fail> {
            if let Some(mut e) = super::collection::Edit::load(w, k, KeyType::ZSet)? {
                e.mark_converted();
                e.save(w, k)?;
            }
            Ok(())
        },
        |_| 0,
    )
}

/// STORE's write: the sorted list replaces the key (an empty one deletes
/// it), with Redis's `sortstore` or `del` event.
fn store(w: &mut crate::storage::WriteCtx, key: Key, items: &[Vec<u8>]) -> Result<(), Fail> {
    if items.is_empty() {
        w.delete_reported(key)?;
        return Ok(());
    }
    let existed = keyspace::delete_if_live(w, key)?;
    w.replacing(existed, |w| super::list::store_list(w, key, items))?;
    w.event(notify::LIST, "sortstore", key);
    Ok(())
}

/// SORT that is not one shard's write (see the module's notes): the
/// source is read on its shard (and a sorted set converted there), each
/// shard is asked in one step for the values patterns name, and STORE's
/// destination is written, all in one coordinated round. An error says
/// whether a sorted set was converted before it (that write stands).
async fn sort_locked(
    locked: &Arc<Locked>,
    shards: &ShardSet,
    db: u8,
    src: Bytes,
    opts: Arc<Opts>,
) -> Result<Result<Reply, (Fail, bool)>, CoordError> {
    let src_shard = shards.shard_of_key(&src);
    let dest = opts.store.clone();
    let loaded = locked
        .run(src_shard, move |w| {
            let k = Key::new(db, &src);
            Ok(load(w, k, &opts).and_then(|job| {
                keep_as_skiplist(w, k, &job)?;
                Ok(job)
            }))
        })
        .await?;
    let mut job = match loaded {
        Ok(j) => j,
        Err(e) => return Ok(Err((e, false))),
    };
    let converted = job.compact_zset;
    let by = job.by_lookups();
    let found = fetch_locked(locked, shards, db, wants_of(&by)).await?;
    if let Err(e) = job.sort(fill(by, found)) {
        return Ok(Err((e, converted)));
    }
    let gets = job.get_lookups();
    let found = fetch_locked(locked, shards, db, wants_of(&gets)).await?;
    let Some(dest) = dest else {
        return Ok(Ok(job.reply(fill(gets, found))));
    };
    let items = job.items(fill(gets, found));
    let n = items.len() as i64;
    let stored = locked
        .run(shards.shard_of_key(&dest), move |w| {
            Ok(store(w, Key::new(db, &dest), &items))
        })
        .await?;
    Ok(stored.map(|()| Reply::Int(n)).map_err(|e| (e, converted)))
}

/// Looks `wants` up on their shards: one step per shard, all sent before
/// any is awaited.
async fn fetch_locked(
    locked: &Arc<Locked>,
    shards: &ShardSet,
    db: u8,
    wants: Vec<Want>,
) -> Result<Vec<Value>, CoordError> {
    let mut per_shard: Vec<(Vec<usize>, Vec<Want>)> = vec![(Vec::new(), Vec::new()); shards.len()];
    for (i, want) in wants.into_iter().enumerate() {
        let part = &mut per_shard[shards.shard_of_key(&want.0)];
        part.0.push(i);
        part.1.push(want);
    }
    let total: usize = per_shard.iter().map(|p| p.0.len()).sum();
    let mut pending = Vec::new();
    for (shard, (at, wants)) in per_shard.into_iter().enumerate() {
        if wants.is_empty() {
            continue;
        }
        let step = locked.send(shard, move |w| {
            wants
                .iter()
                .map(|(k, f)| fetch(w, db, k, f.as_deref()))
                .collect::<Result<Vec<Value>, StoreError>>()
        });
        pending.push((at, step));
    }
    let mut out = vec![None; total];
    for (at, step) in pending {
        for (i, v) in at.into_iter().zip(step.wait().await?) {
            out[i] = v;
        }
    }
    Ok(out)
}

/// A looked-up value: absent, or the bytes of a string or hash field.
type Value = Option<Vec<u8>>;

/// A key (and hash field) to look up.
type Want = (Vec<u8>, Option<Vec<u8>>);

/// What a pattern yields for one element.
enum Lookup {
    /// Known without a lookup: the element itself (`#`) or nothing (a
    /// pattern without `*`).
    Known(Value),
    /// A string key, or a hash key's field (`key->field`).
    Key {
        key: Vec<u8>,
        field: Option<Vec<u8>>,
    },
}

/// The bytes of `b` up to its first NUL: what C string functions see.
fn c_str(b: &[u8]) -> &[u8] {
    b.split(|&c| c == 0).next().unwrap_or_default()
}

/// Applies a BY/GET pattern to an element as Redis does: `#` is the
/// element, the first `*` is replaced by it, and `->field` after the `*`
/// (with a non-empty field) names a hash field. A pattern's text is read
/// as a C string for finding `#`, `*` and `->`, but the key and field keep
/// every byte.
fn lookup_of(pattern: &[u8], elem: &[u8]) -> Lookup {
    let text = c_str(pattern);
    if text == b"#" {
        return Lookup::Known(Some(elem.to_vec()));
    }
    let Some(star) = text.iter().position(|&c| c == b'*') else {
        return Lookup::Known(None);
    };
    let after = &text[star + 1..];
    let field_at = after
        .windows(2)
        .position(|w| w == b"->")
        .map(|p| star + 1 + p + 2)
        .filter(|&f| f < text.len());
    let (key_end, field) = match field_at {
        Some(f) => (f - 2, Some(pattern[f..].to_vec())),
        None => (pattern.len(), None),
    };
    let mut key = Vec::with_capacity(key_end + elem.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(elem);
    key.extend_from_slice(&pattern[star + 1..key_end]);
    Lookup::Key { key, field }
}

/// The lookups among `lookups` that need a reader, in order.
fn wants_of(lookups: &[Lookup]) -> Vec<Want> {
    lookups
        .iter()
        .filter_map(|l| match l {
            Lookup::Known(_) => None,
            Lookup::Key { key, field } => Some((key.clone(), field.clone())),
        })
        .collect()
}

/// Every lookup's value, `found` holding those of [`wants_of`] in order.
fn fill(lookups: Vec<Lookup>, found: Vec<Value>) -> Vec<Value> {
    let mut found = found.into_iter();
    lookups
        .into_iter()
        .map(|l| match l {
            Lookup::Known(v) => v,
            Lookup::Key { .. } => found.next().flatten(),
        })
        .collect()
}

/// A string key's value or a hash field's; anything else (missing key,
/// other type, missing field) is nothing, never an error.
fn fetch(r: &dyn KvRead, db: u8, name: &[u8], field: Option<&[u8]>) -> Result<Value, StoreError> {
    let k = Key::new(db, name);
    let Some(meta) = keyspace::lookup(r, k)? else {
        return Ok(None);
    };
    match (field, meta.ktype, meta.body) {
        (None, KeyType::String, MetaBody::String(v)) => Ok(Some(v)),
        (Some(f), KeyType::Hash, MetaBody::Collection { version, .. }) => {
            let prefix = encoding::version_prefix(db, k.slot, name, version);
            r.get(Table::Sub, &encoding::sub_key(&prefix, f))
        }
        _ => Ok(None),
    }
}

/// One SORT after its source was read: the elements and what to do.
struct Job {
    /// The elements to sort (or, when not sorting, in output order).
    elems: Vec<Vec<u8>>,
    /// Output window `start..=end` into the sorted elements (empty when
    /// `end < start`).
    start: i64,
    end: i64,
    /// Whether to sort at all.
    sort: bool,
    alpha: bool,
    /// Weights come from this pattern.
    by: Option<Bytes>,
    desc: bool,
    /// STORE given: ALPHA compares every byte.
    store: bool,
    gets: Vec<Bytes>,
    /// The source is a sorted set in its compact encoding (a listpack),
    /// which SORT converts (see [`keep_as_skiplist`]).
    compact_zset: bool,
}

/// Redis's LIMIT arithmetic over `len` elements: the window `start..=end`.
fn window(offset: i64, count: i64, len: i64) -> (i64, i64) {
    let mut start = offset.max(0);
    let mut end = if count < 0 {
        len - 1
    } else {
        start.saturating_add(count) - 1
    };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    if end >= len {
        end = len - 1;
    }
    (start, end)
}

/// Reads the source key (WRONGTYPE unless a list, set or zset; a missing
/// key is an empty list). When the natural order is kept, only the window
/// LIMIT asks for is read, from the end DESC starts at.
fn load(r: &dyn KvRead, k: Key, o: &Opts) -> Result<Job, Fail> {
    let meta = keyspace::lookup(r, k)?;
    let (ktype, view) = match meta {
        None => (KeyType::List, None),
        Some(m) => match (m.ktype, &m.body) {
            (
                t @ (KeyType::List | KeyType::Set | KeyType::ZSet),
                MetaBody::Collection {
                    version,
                    size,
                    extra,
                },
            ) => (
                t,
                Some(View {
                    prefix: encoding::version_prefix(k.db, k.slot, k.name, *version),
                    size: *size,
                    extra: extra.clone(),
                }),
            ),
            _ => return Err(super::wrongtype()),
        },
    };
    // A set kept in "its order" for a STORE or a script is sorted instead.
    let forced = o.dontsort && ktype == KeyType::Set && (o.store.is_some() || o.in_script);
    let mut job = Job {
        elems: Vec::new(),
        start: 0,
        end: -1,
        sort: !o.dontsort || forced,
        alpha: o.alpha || forced,
        by: if forced || o.dontsort {
            None
        } else {
            o.by.clone()
        },
        desc: o.desc,
        store: o.store.is_some(),
        gets: o.gets.clone(),
        compact_zset: ktype == KeyType::ZSet && view.as_ref().is_some_and(|v| !v.converted()),
    };
    let Some(v) = view else {
        return Ok(job);
    };
    let len = v.size as i64;
    let (start, end) = window(o.offset, o.count, len);
    let natural = !job.sort && ktype != KeyType::Set;
    if natural {
        // Only the window, in output order.
        if end >= start {
            let (lo, hi) = if o.desc {
                (len - 1 - end, len - 1 - start)
            } else {
                (start, end)
            };
            job.elems = match ktype {
                KeyType::List => super::list::view_range(r, &v, lo as u64, hi as u64)?,
                _ => {
                    let mut out = Vec::with_capacity((end - start + 1) as usize);
                    let mut skip = start;
                    super::zset::walk(r, &v.prefix, o.desc, &mut |m, _| {
                        if skip > 0 {
                            skip -= 1;
                            return true;
                        }
                        out.push(m.to_vec());
                        (out.len() as i64) < end - start + 1
                    })?;
                    out
                }
            };
            if ktype == KeyType::List && o.desc {
                job.elems.reverse();
            }
            job.end = job.elems.len() as i64 - 1;
        }
        return Ok(job);
    }
    let mut elems = Vec::with_capacity(v.size as usize);
    match ktype {
        KeyType::ZSet => super::zset::walk(r, &v.prefix, false, &mut |m, _| {
            elems.push(m.to_vec());
            true
        })?,
        // A set in its own order, SMEMBERS's (kept so without sorting, as
        // Redis keeps it).
        KeyType::Set => elems = super::set::view_members(r, &v, o.intset_limit)?,
        // A list's rows hold its elements in index order.
        _ => v.scan(r, &mut |_, val| {
            elems.push(val.to_vec());
            true
        })?,
    }
    job.elems = elems;
    job.start = start;
    job.end = end;
    Ok(job)
}

/// A sort key: a number, or bytes (ALPHA; `None` = missing weight).
enum Weight {
    Score(f64),
    Text(Option<Vec<u8>>),
    /// ALPHA without BY: the element itself.
    Elem,
}

impl Job {
    /// The BY pattern's lookups, one per element (none when the element
    /// itself is the weight or nothing is sorted).
    fn by_lookups(&self) -> Vec<Lookup> {
        match (&self.by, self.sort) {
            (Some(p), true) => self.elems.iter().map(|e| lookup_of(p, e)).collect(),
            _ => Vec::new(),
        }
    }

    /// Sorts by the weights `by` (one per element with a BY pattern, else
    /// empty). Fails when a numeric weight is not a double.
    fn sort(&mut self, by: Vec<Value>) -> Result<(), Fail> {
        if !self.sort {
            return Ok(());
        }
        let with_by = self.by.is_some();
        let mut weights = Vec::with_capacity(self.elems.len());
        let mut by = by.into_iter();
        for e in &self.elems {
            let w = if with_by { by.next().flatten() } else { None };
            weights.push(if self.alpha {
                if with_by {
                    Weight::Text(w)
                } else {
                    Weight::Elem
                }
            } else {
                let text = if with_by { w.as_deref() } else { Some(&e[..]) };
                match text {
                    None => Weight::Score(0.0),
                    Some(t) => match strtod_whole(t) {
                        Some(x) => Weight::Score(x),
                        None => return Err(Fail::Reply(Reply::err(NOT_DOUBLE))),
                    },
                }
            });
        }
        let store = self.store;
        let text_cmp = |a: &[u8], b: &[u8]| {
            if store {
                a.cmp(b)
            } else {
                c_str(a).cmp(c_str(b))
            }
        };
        let mut pairs: Vec<(Vec<u8>, Weight)> = std::mem::take(&mut self.elems)
            .into_iter()
            .zip(weights)
            .collect();
        let desc = self.desc;
        pairs.sort_by(|(ea, wa), (eb, wb)| {
            let c = match (wa, wb) {
                (Weight::Score(a), Weight::Score(b)) => a
                    .partial_cmp(b)
                    .filter(|c| c.is_ne())
                    .unwrap_or_else(|| ea.cmp(eb)),
                (Weight::Text(a), Weight::Text(b)) => match (a, b) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Less,
                    (Some(_), None) => Ordering::Greater,
                    (Some(a), Some(b)) => text_cmp(a, b),
                },
                _ => text_cmp(ea, eb),
            };
            if desc {
                c.reverse()
            } else {
                c
            }
        });
        self.elems = pairs.into_iter().map(|(e, _)| e).collect();
        Ok(())
    }

    /// The output window's elements.
    fn output(&self) -> &[Vec<u8>] {
        if self.end < self.start {
            return &[];
        }
        &self.elems[self.start as usize..=self.end as usize]
    }

    /// The GET lookups of the output, element by element.
    fn get_lookups(&self) -> Vec<Lookup> {
        self.output()
            .iter()
            .flat_map(|e| self.gets.iter().map(move |g| lookup_of(g, e)))
            .collect()
    }

    /// The reply without STORE: the elements, or the GET values (nil when
    /// missing).
    fn reply(&self, got: Vec<Value>) -> Reply {
        if self.gets.is_empty() {
            return Reply::Array(
                self.output()
                    .iter()
                    .map(|e| Reply::bulk(e.clone()))
                    .collect(),
            );
        }
        Reply::Array(
            got.into_iter()
                .map(|v| v.map_or(Reply::Nil, Reply::bulk))
                .collect(),
        )
    }

    /// What STORE writes: the elements, or the GET values (empty strings
    /// when missing).
    fn items(&self, got: Vec<Value>) -> Vec<Vec<u8>> {
        if self.gets.is_empty() {
            return self.output().to_vec();
        }
        got.into_iter().map(Option::unwrap_or_default).collect()
    }
}

/// A weight as SORT reads it: C's `strtod` on the text up to its first NUL
/// must consume it all, without a range error or NaN. So leading blanks
/// are skipped, an empty string is 0, and a blank one is an error.
fn strtod_whole(t: &[u8]) -> Option<f64> {
    let t = c_str(t);
    if t.is_empty() {
        return Some(0.0);
    }
    let body = &t[t.iter().take_while(|&&c| is_c_space(c)).count()..];
    // strtod flags a subnormal result as a range error too.
    crate::util::num::parse_f64(body).filter(|x| *x == 0.0 || !x.is_subnormal())
}

fn is_c_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(p: &[u8], e: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
        match lookup_of(p, e) {
            Lookup::Key { key, field } => Some((key, field)),
            Lookup::Known(_) => None,
        }
    }

    /// Patterns substitute the first `*`, split a non-empty `->field`, and
    /// `#` / star-less patterns need no lookup.
    #[test]
    fn patterns() {
        assert_eq!(key_of(b"w_*", b"3"), Some((b"w_3".to_vec(), None)));
        assert_eq!(
            key_of(b"h_*->f", b"a"),
            Some((b"h_a".to_vec(), Some(b"f".to_vec())))
        );
        assert_eq!(key_of(b"x:*->", b"a"), Some((b"x:a->".to_vec(), None)));
        assert_eq!(key_of(b"*_*", b"a"), Some((b"a_*".to_vec(), None)));
        assert_eq!(
            key_of(b"a->b*c->d->e", b"Z"),
            Some((b"a->bZc".to_vec(), Some(b"d->e".to_vec())))
        );
        assert!(matches!(lookup_of(b"#", b"e"), Lookup::Known(Some(v)) if v == b"e"));
        assert!(matches!(lookup_of(b"nokey", b"e"), Lookup::Known(None)));
        assert!(matches!(lookup_of(b"a\0*", b"e"), Lookup::Known(None)));
    }

    /// LIMIT's window follows Redis's clamping.
    #[test]
    fn windows() {
        assert_eq!(window(0, -1, 5), (0, 4));
        assert_eq!(window(-3, 2, 5), (0, 1));
        assert_eq!(window(3, 10, 5), (3, 4));
        assert_eq!(window(5, 1, 5), (4, 3));
        assert_eq!(window(1, 0, 5), (1, 0));
        assert_eq!(window(0, -1, 0), (-1, -2));
        assert_eq!(window(2, i64::MAX, 5), (2, 4));
    }

    /// Weights parse like strtod over the whole text.
    #[test]
    fn weights() {
        assert_eq!(strtod_whole(b""), Some(0.0));
        assert_eq!(strtod_whole(b" 1.5"), Some(1.5));
        assert_eq!(strtod_whole(b"0x10"), Some(16.0));
        assert_eq!(strtod_whole(b"2\0junk"), Some(2.0));
        assert_eq!(strtod_whole(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(strtod_whole(b"1 "), None);
        assert_eq!(strtod_whole(b" "), None);
        assert_eq!(strtod_whole(b"nan"), None);
        assert_eq!(strtod_whole(b"1e400"), None);
        assert_eq!(strtod_whole(b"1e-310"), None);
        assert_eq!(strtod_whole(b"abc"), None);
    }
}

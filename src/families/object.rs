//! OBJECT ENCODING / FREQ / IDLETIME / REFCOUNT / HELP, and the access
//! clock behind IDLETIME and FREQ.
//!
//! ENCODING names the representation Redis 7.0 would use for the same
//! value under the current `*-max-listpack-*` thresholds (cairn stores
//! every value the same way on disk; what matters to clients is what Redis
//! would say). Redis keeps a collection in its big encoding once it has
//! grown past a threshold even if it shrinks again, and so does cairn (a
//! mark in its `meta` row, see `collection::is_converted`), until DEBUG
//! RELOAD encodes every value afresh ([`encode_afresh`]).
//!
//! The access clock is a fixed table in memory, not a field per key: a
//! disk-backed store cannot afford a write for every read, nor memory per
//! key. Each key hashes to a slot holding a tag of its hash, its LFU
//! counter and its last access time; a key whose slot another key took
//! (or that was not touched since the server started) reads as idle since
//! the start, with the initial frequency.
//!
//! Redis keeps either an LRU clock or LFU data in one field of a value,
//! whichever `maxmemory-policy` asks for when the value is touched: an
//! access under an LRU policy leaves no counter behind, and after a switch
//! to an LFU policy the counter reads as what the LRU clock decays to,
//! (nearly always) 0. So an access grows the counter only under an LFU
//! policy and clears it otherwise; the policy, `lfu-log-factor` and
//! `lfu-decay-time` are copied here when they are set
//! ([`AccessClock::configure`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::command::args::Args;
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::rdb::keys;
use crate::rdb::object::{Limits, Value};
use crate::storage::encoding::StringForm;
use crate::storage::keyspace::Key;
use crate::storage::{KeyType, KvRead};
use crate::util::num::parse_i64;

/// log2 of the access table's slots (1M slots, 8 MiB).
const SLOTS_LOG2: u32 = 20;
/// Redis's counter for a new key (LFU_INIT_VAL).
const LFU_INIT: u64 = 5;

/// A key's slot in the [`AccessClock`] and its tag there.
#[derive(Debug, Clone, Copy)]
pub struct Spot(usize, u64);

/// Last access time and LFU counter per key, approximately (see the
/// module comment).
pub struct AccessClock {
    slots: Box<[AtomicU64]>,
    /// Server start, Unix seconds.
    started: u64,
    /// The `maxmemory-policy` is an LFU one.
    lfu: AtomicBool,
    /// `lfu-log-factor`.
    log_factor: AtomicU64,
    /// `lfu-decay-time`: minutes a decrement takes (0: none).
    decay_minutes: AtomicU64,
}

impl Default for AccessClock {
    fn default() -> Self {
        AccessClock {
            slots: (0..1usize << SLOTS_LOG2)
                .map(|_| AtomicU64::new(0))
                .collect(),
            started: now_secs(),
            lfu: AtomicBool::new(false),
            log_factor: AtomicU64::new(10),
            decay_minutes: AtomicU64::new(1),
        }
    }
}

fn now_secs() -> u64 {
    crate::shard::now_ms() / 1000
}

/// A slot's (counter, seconds) if it holds `tag`.
fn unpack(v: u64, tag: u64) -> Option<(u64, u64)> {
    (v >> 40 == tag).then_some(((v >> 32) & 0xFF, v & 0xFFFF_FFFF))
}

/// A slot packs a 24-bit tag, the 8-bit counter and 32-bit seconds.
fn pack(tag: u64, counter: u64, secs: u64) -> u64 {
    (tag << 40) | (counter << 32) | (secs & 0xFFFF_FFFF)
}

impl AccessClock {
    /// Takes the policy and the LFU parameters from the configuration.
    pub fn configure(&self, rt: &crate::server::Runtime) {
        let lfu = rt.get("maxmemory-policy").contains("lfu");
        self.lfu.store(lfu, Ordering::Relaxed);
        let int = |name| rt.int(name).max(0) as u64;
        self.log_factor
            .store(int("lfu-log-factor"), Ordering::Relaxed);
        self.decay_minutes
            .store(int("lfu-decay-time"), Ordering::Relaxed);
    }

    /// Whether the `maxmemory-policy` is an LFU one (FREQ answers then,
    /// IDLETIME does not).
    pub fn lfu(&self) -> bool {
        self.lfu.load(Ordering::Relaxed)
    }

    /// `counter`, last touched at `at`, decayed to `now` (Unix seconds):
    /// one decrement per `lfu-decay-time` minutes, counted, as Redis
    /// counts them, between the minutes the two times fall in.
    fn decay(&self, counter: u64, at: u64, now: u64) -> u64 {
        match self.decay_minutes.load(Ordering::Relaxed) {
            0 => counter,
            per => counter.saturating_sub((now / 60).saturating_sub(at / 60) / per),
        }
    }

    /// Redis's logarithmic increment: likelier the smaller the counter.
    fn grow(&self, counter: u64) -> u64 {
        use rand::Rng;
        if counter >= 255 {
            return 255;
        }
        if counter <= LFU_INIT {
            // Certain (p = 1): no need to draw.
            return counter + 1;
        }
        let base = (counter - LFU_INIT) as f64;
        let p = 1.0 / (base * self.log_factor.load(Ordering::Relaxed) as f64 + 1.0);
        if rand::thread_rng().gen::<f64>() < p {
            counter + 1
        } else {
            counter
        }
    }

    fn locate(db: u8, key: &[u8]) -> Spot {
        // A fixed seed is enough: keys that share a slot only share an
        // approximate access time, as Redis's sampling approximates too.
        use std::hash::BuildHasher;
        let h = foldhash::fast::FixedState::with_seed(0x63_61_69_72_6e).hash_one((db, key));
        Spot((h & ((1 << SLOTS_LOG2) - 1)) as usize, (h >> 40) | 1)
    }

    /// The key's slot's (counter, seconds) if the slot belongs to it.
    fn read(&self, db: u8, key: &[u8]) -> Option<(u64, u64)> {
        let Spot(i, tag) = Self::locate(db, key);
        unpack(self.slots[i].load(Ordering::Relaxed), tag)
    }

    /// Records an access at `now_ms` (the command's clock, so that a read
    /// or write costs no clock read of its own): the time, and under an
    /// LFU policy the counter grown the way Redis grows it
    /// (logarithmically, by `lfu-log-factor`) after its decay (see
    /// [`AccessClock::decay`]); under another policy no counter. A slot that would
    /// not change is not written, so that hot keys read by several threads
    /// do not bounce its cache line between them.
    pub fn touch(&self, db: u8, key: &[u8], now_ms: u64) {
        self.touch_at(Self::locate(db, key), now_ms);
    }

    /// Where a key's access is recorded, with its cache line asked for
    /// now: the table is too large to stay cached, and a command that
    /// runs later (in its shard's batch) then finds the line there
    /// instead of stalling on it (`touch_at`).
    pub fn spot(&self, db: u8, key: &[u8]) -> Spot {
        let spot = Self::locate(db, key);
        crate::util::prefetch(&self.slots[spot.0]);
        spot
    }

    /// [`AccessClock::touch`] of several keys: every slot's line is asked
    /// for first, so that their misses overlap (MSET's ten keys touched
    /// one after the other were 7% of its time at pipeline 16).
    pub fn touch_all(&self, db: u8, keys: &[bytes::Bytes], now_ms: u64) {
        let spots: Vec<Spot> = keys.iter().map(|k| self.spot(db, k)).collect();
        for spot in spots {
            self.touch_at(spot, now_ms);
        }
    }

    /// [`AccessClock::touch`] at a spot found by [`AccessClock::spot`].
    pub fn touch_at(&self, Spot(i, tag): Spot, now_ms: u64) {
        let now = now_ms / 1000;
        let old = self.slots[i].load(Ordering::Relaxed);
        let counter = match unpack(old, tag) {
            _ if !self.lfu() => 0,
            Some((c, at)) => self.grow(self.decay(c, at, now)),
            None => LFU_INIT,
        };
        let new = pack(tag, counter, now);
        if new != old {
            self.slots[i].store(new, Ordering::Relaxed);
        }
    }

    /// Sets a key's idle time or frequency (RESTORE IDLETIME / FREQ); a
    /// frequency counts only under an LFU policy, as in Redis.
    pub fn set(&self, db: u8, key: &[u8], idle_secs: Option<u64>, freq: Option<u64>) {
        let now = now_secs();
        let Spot(i, tag) = Self::locate(db, key);
        let at = now.saturating_sub(idle_secs.unwrap_or(0));
        let counter = match self.lfu() {
            true => freq.unwrap_or(LFU_INIT).min(255),
            false => 0,
        };
        self.slots[i].store(pack(tag, counter, at), Ordering::Relaxed);
    }

    /// Seconds since the key was last read or written.
    pub fn idle_secs(&self, db: u8, key: &[u8]) -> u64 {
        let now = now_secs();
        let at = self.read(db, key).map_or(self.started, |(_, at)| at);
        now.saturating_sub(at)
    }

    /// The key's LFU counter, decayed to now.
    pub fn freq(&self, db: u8, key: &[u8]) -> u64 {
        let now = now_secs();
        let (c, at) = self.read(db, key).unwrap_or((LFU_INIT, self.started));
        self.decay(c, at, now)
    }
}

/// The longest string Redis 7.0 keeps in one allocation with its object
/// (`embstr`).
const EMBSTR_MAX: usize = 44;

/// The encoding Redis 7.0 would keep `v` in.
pub fn encoding_of(v: &Value, l: &Limits) -> &'static str {
    match v {
        Value::String(s) => {
            // PFADD and PFMERGE build their values as raw strings.
            if s.starts_with(b"HYLL") {
                "raw"
            } else if s.len() <= 20 && parse_i64(s).is_some() {
                "int"
            } else if s.len() <= EMBSTR_MAX {
                "embstr"
            } else {
                "raw"
            }
        }
        Value::List(_) => "quicklist",
        Value::Set(m) => {
            let ints = m.len() <= l.set_intset_entries && m.iter().all(|x| parse_i64(x).is_some());
            if ints {
                "intset"
            } else {
                "hashtable"
            }
        }
        Value::ZSet(p) => {
            if p.len() <= l.zset_entries && p.iter().all(|(m, _)| m.len() <= l.zset_value) {
                "listpack"
            } else {
                "skiplist"
            }
        }
        Value::Hash(p) => {
            let small = p.len() <= l.hash_entries
                && p.iter()
                    .all(|(f, v)| f.len() <= l.hash_value && v.len() <= l.hash_value);
            if small {
                "listpack"
            } else {
                "hashtable"
            }
        }
        Value::Stream(_) => "stream",
    }
}

/// DEBUG RELOAD's encodings: Redis's reload saves an RDB file and loads it
/// back, and loading encodes every value afresh from its contents, under
/// `limits`, whatever its history: a set, hash or sorted set that shrank
/// back under its thresholds is an intset or listpack again (a -0 score
/// in a sorted set becoming a listpack reads 0), and a string written in
/// place (APPEND, SETRANGE) or by INCRBYFLOAT is `int`, `embstr` or `raw`
/// by its contents. Runs on one shard's writes; quiet, as the reload is
/// no change of any value: nothing counted, notified or watched.
pub(crate) fn encode_afresh(
    w: &mut crate::storage::WriteCtx,
    limits: &Limits,
) -> Result<(), crate::storage::StoreError> {
    encode_all_afresh(w, limits).map_err(|e| match e {
        super::Fail::Store(e) => e,
        // Only a value the tables hold wrongly gets here: every key it
        // reads is one it found, of the type it found.
        super::Fail::Reply(r) => {
            crate::storage::StoreError::Internal(format!("encoding a value afresh: {r:?}"))
        }
    })
}

/// [`encode_afresh`], with the families' errors.
fn encode_all_afresh(w: &mut crate::storage::WriteCtx, limits: &Limits) -> Result<(), super::Fail> {
    for db in 0..crate::storage::tables::DATABASES as u8 {
        let now = w.expiry_clock();
        let mut stale = Vec::new();
        keys::each_key(&*w, db, |name, meta| {
            if !meta.is_expired(now) && history_decides(&meta, limits) {
                stale.push(name.to_vec());
            }
            Ok::<(), super::Fail>(())
        })?;
        for name in &stale {
            let key = Key::new(db, name);
            w.quietly(
                &key.meta_key(),
                |w| encode_key_afresh(w, key, limits),
                |_| 0,
            )?;
        }
    }
    Ok(())
}

/// Whether the encoding Redis would hold `meta`'s value in may owe
/// something to its history: a string not stored afresh, or a collection
/// marked converted that is small enough to be compact again.
fn history_decides(meta: &crate::storage::Meta, l: &Limits) -> bool {
    use crate::storage::encoding::MetaBody;
    let most = match meta.ktype {
        KeyType::String => return meta.form != StringForm::Fresh || is_hll(meta),
        KeyType::Set => l.set_intset_entries,
        KeyType::Hash => l.hash_entries,
        KeyType::ZSet => l.zset_entries,
        KeyType::List | KeyType::Stream => return false,
    };
    let small = matches!(meta.body, MetaBody::Collection { size, .. } if size <= most as u64);
    small && super::collection::is_converted(meta)
}

/// Whether `meta` is a string holding a HyperLogLog (which PFADD and
/// PFMERGE write as raw strings: see [`encoding_of`]).
fn is_hll(meta: &crate::storage::Meta) -> bool {
    matches!(&meta.body, crate::storage::encoding::MetaBody::String(s) if s.starts_with(b"HYLL"))
}

/// [`encode_afresh`] for one key [`history_decides`] picked.
fn encode_key_afresh(
    w: &mut crate::storage::WriteCtx,
    key: Key,
    limits: &Limits,
) -> Result<(), super::Fail> {
    let Some(mut meta) = crate::storage::keyspace::peek(&*w, key)? else {
        return Ok(());
    };
    let ktype = meta.ktype;
    if ktype == KeyType::String {
        // A HyperLogLog is a string loaded like any other: `embstr` or
        // `raw` by its length, until PFADD writes it again.
        meta.form = match is_hll(&meta) {
            true => StringForm::Text,
            false => StringForm::Fresh,
        };
        crate::storage::keyspace::replace(w, key, &meta)?;
        return Ok(());
    }
    let value = keys::read_meta(&*w, key, meta)?.value;
    if !matches!(encoding_of(&value, limits), "listpack" | "intset") {
        return Ok(());
    }
    let Some(mut e) = super::collection::Edit::load(w, key, ktype)? else {
        return Ok(());
    };
    e.extra.clear();
    match &value {
        Value::ZSet(entries) => super::zset::drop_zero_signs(w, &mut e, entries)?,
        // A listpack again: its fields keep an order from here (Redis's
        // is its hash table's, which no client can count on).
        Value::Hash(pairs) => {
            let fields: Vec<&[u8]> = pairs.iter().map(|(f, _)| f.as_slice()).collect();
            e.order_as(&fields);
        }
        _ => {}
    }
    e.save(w, key)?;
    Ok(())
}

/// The thresholds that decide the encoding of the value whose metadata
/// is `meta`: a collection that has left its compact encoding keeps the
/// big one (see `collection::is_converted`).
pub fn limits_for(limits: Limits, meta: &crate::storage::Meta) -> Limits {
    if super::collection::is_converted(meta) {
        limits.converted(meta.ktype)
    } else {
        limits
    }
}

/// The live key `k` read whole, with the thresholds that decide its
/// encoding (see [`limits_for`]) and the form a string's history gave it
/// (see [`StringForm`]): what OBJECT ENCODING and DUMP need.
pub fn read_encodable(
    r: &dyn crate::storage::KvRead,
    k: crate::storage::keyspace::Key,
    limits: Limits,
) -> Result<Option<(Value, Limits, StringForm)>, super::Fail> {
    let Some(meta) = crate::storage::keyspace::lookup(r, k)? else {
        return Ok(None);
    };
    let (limits, form) = (limits_for(limits, &meta), meta.form);
    Ok(Some((keys::read_meta(r, k, meta)?.value, limits, form)))
}

/// The encoding OBJECT ENCODING names for `v`, read by [`read_encodable`]:
/// a string's history may decide it (see [`StringForm`]).
pub fn encoding_name(v: &Value, limits: &Limits, form: StringForm) -> &'static str {
    match (form, v) {
        (StringForm::Raw, _) => "raw",
        (StringForm::Text, Value::String(s)) if s.len() <= EMBSTR_MAX => "embstr",
        (StringForm::Text, _) => "raw",
        (StringForm::Fresh, _) => encoding_of(v, limits),
    }
}

const HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
];

/// The shared integers Redis hands out for small int strings (0..9999)
/// report this reference count.
const SHARED_REFCOUNT: i64 = i32::MAX as i64;

/// OBJECT ENCODING|FREQ|IDLETIME|REFCOUNT key, OBJECT HELP
pub fn object(s: &mut Session, a: Args) -> Action {
    let sub = String::from_utf8_lossy(a.get(1)).to_ascii_lowercase();
    if sub == "help" {
        return super::help_reply(HELP).into();
    }
    let db = s.db;
    let key = a.get(2).clone();
    let clock = s.server.clone();
    match sub.as_str() {
        "encoding" => {
            let limits = s.server.encoding_limits();
            s.read_unnoticed(&key, move |r, k| {
                Ok(match read_encodable(r, k, limits)? {
                    None => Reply::Nil,
                    Some((value, limits, form)) => {
                        Reply::bulk(encoding_name(&value, &limits, form))
                    }
                })
            })
        }
        "refcount" => s.read_unnoticed(&key, move |r, k| {
            Ok(match keys::read(r, k)? {
                None => Reply::Nil,
                Some(st) => match st.value {
                    Value::String(v) if parse_i64(&v).is_some_and(|i| (0..10_000).contains(&i)) => {
                        Reply::Int(SHARED_REFCOUNT)
                    }
                    _ => Reply::Int(1),
                },
            })
        }),
        "idletime" | "freq" => {
            let lfu = s.server.access.lfu();
            let idle = sub == "idletime";
            s.read_unnoticed(&key, move |r, k| {
                // Redis looks the key up before it checks the policy.
                if crate::storage::keyspace::lookup_header(r, k)?.is_none() {
                    return Ok(Reply::Nil);
                }
                if idle && lfu {
                    return Ok(Reply::err("An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."));
                }
                if !idle && !lfu {
                    return Ok(Reply::err("An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."));
                }
                let c = &clock.access;
                Ok(Reply::Int(if idle {
                    c.idle_secs(db, k.name) as i64
                } else {
                    c.freq(db, k.name) as i64
                }))
            })
        }
        _ => super::server::unknown_subcommand(a.get(1), "OBJECT"),
    }
}

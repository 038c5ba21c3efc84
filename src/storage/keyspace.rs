//! The rules every key obeys, whatever its type:
//! * an expired key is absent to every reader (lazy expiry), and a writer
//!   that meets one removes it first;
//! * a key with an expiry has exactly one `ttl` row, written in the same
//!   transaction as its `meta` row;
//! * deleting a collection is O(1): the `meta` row goes, a `gc` row names
//!   the dead version, and the reaper removes its sub-keys later.

use super::encoding::{self, KeyType, Meta, MetaBody};
use super::tables::{KvRead, StoreError, Table, WriteCtx};
use crate::pubsub::notify;

/// A key's identity within a shard: database, slot and name.
#[derive(Debug, Clone, Copy)]
pub struct Key<'a> {
    /// Logical database (SELECT).
    pub db: u8,
    /// Cluster slot of `name`.
    pub slot: u16,
    /// The user's key.
    pub name: &'a [u8],
}

impl<'a> Key<'a> {
    /// A key in database `db`, its slot computed from the name.
    pub fn new(db: u8, name: &'a [u8]) -> Key<'a> {
        Key {
            db,
            slot: crate::cluster::key_slot(name),
            name,
        }
    }

    /// The `meta` table key.
    pub fn meta_key(&self) -> Vec<u8> {
        encoding::meta_key(self.db, self.slot, self.name)
    }
}

/// The live metadata of a key: `None` if absent or expired. Counts as a
/// read in INFO's keyspace hits / misses.
pub fn lookup(r: &dyn KvRead, key: Key) -> Result<Option<Meta>, StoreError> {
    let meta = peek(r, key)?;
    r.note_lookup(meta.is_some());
    if meta.is_none() {
        r.note_miss(key.db, key.name);
    }
    Ok(meta)
}

/// Like [`lookup`], but not counted: for commands Redis does not count as
/// reads (RENAME, MOVE...).
pub fn peek(r: &dyn KvRead, key: Key) -> Result<Option<Meta>, StoreError> {
    let Some(raw) = r.get(Table::Meta, &key.meta_key())? else {
        return Ok(None);
    };
    let meta = Meta::decode(&raw)?;
    if meta.is_expired(r.expiry_clock()) {
        r.note_expired(key.db, key.name);
        return Ok(None);
    }
    Ok(Some(meta))
}

/// Type and expiry of a live key without decoding its value.
pub fn lookup_header(r: &dyn KvRead, key: Key) -> Result<Option<(KeyType, u64)>, StoreError> {
    let Some(raw) = r.get_head(&key.meta_key())? else {
        r.note_lookup(false);
        r.note_miss(key.db, key.name);
        return Ok(None);
    };
    let (t, expire) = Meta::peek_header(&raw)?;
    let expired = expire != 0 && expire <= r.expiry_clock();
    r.note_lookup(!expired);
    if expired {
        r.note_miss(key.db, key.name);
        r.note_expired(key.db, key.name);
    }
    Ok((!expired).then_some((t, expire)))
}

/// The live metadata of a key about to be written; an expired key found on
/// the way is deleted so the write starts from a clean slate.
pub fn lookup_for_write(w: &mut WriteCtx, key: Key) -> Result<Option<Meta>, StoreError> {
    lookup_for_write_at(w, key, &key.meta_key())
}

/// [`lookup_for_write`] with the key's `meta` row key already built (a
/// collection's edit keeps it to write the row back).
pub fn lookup_for_write_at(
    w: &mut WriteCtx,
    key: Key,
    meta_key: &[u8],
) -> Result<Option<Meta>, StoreError> {
    let Some(raw) = w.get(Table::Meta, meta_key)? else {
        return Ok(None);
    };
    let meta = Meta::decode(&raw)?;
    if meta.is_expired(w.expiry_clock()) {
        delete(w, key, &meta)?;
        lazily_expired(w, key);
        return Ok(None);
    }
    Ok(Some(meta))
}

/// Deletes the keys of `found` (database, name) that are still expired,
/// reporting each as [`lookup_for_write`] does: the write that follows a
/// read which found them expired. Nothing while writes are paused (the
/// shard opened the transaction without [`WriteCtx::found_expired`]), as
/// Redis expires nothing then.
pub fn expire_keys(w: &mut WriteCtx, found: &[(u8, Vec<u8>)]) -> Result<(), StoreError> {
    if w.found_expired.is_none() {
        return Ok(());
    }
    for (db, name) in found {
        lookup_for_write(w, Key::new(*db, name))?;
    }
    Ok(())
}

/// Deletes the keys this transaction's lookups found expired since the
/// last call (see [`WriteCtx::found_expired`]): a command run in the shard's
/// transaction (inside EXEC, a script, a pipeline) expires what it reads
/// as Redis's lazy expiry does, before its reply goes out.
pub fn expire_noted(w: &mut WriteCtx) -> Result<(), StoreError> {
    let found = match &w.found_expired {
        Some(f) if !f.borrow().is_empty() => f.take(),
        _ => return Ok(()),
    };
    expire_keys(w, &found)
}

/// Reports a key an access found expired and deleted, as Redis's lazy
/// expiry does: the `expired` event, and INFO's `expired_keys`.
fn lazily_expired(w: &mut WriteCtx, key: Key) {
    w.notify(notify::EXPIRED, "expired", key.db, key.name);
    w.expired += 1;
}

/// Stores `new` as the key's metadata, replacing `old` (which must be what
/// [`lookup_for_write`] returned). Keeps the `ttl` row and key counts right,
/// and retires the old collection version if `new` does not reuse it.
pub fn store(w: &mut WriteCtx, key: Key, old: Option<&Meta>, new: &Meta) -> Result<(), StoreError> {
    settle_replaced(w, key, old, new)?;
    w.put_meta_unless_same(&key.meta_key(), old, new)
}

/// Stores `new` as the key's metadata whatever it held before (SET, MSET):
/// one tree walk writes the row and yields the old one, which is then
/// settled as [`store`] would. Of an old string whose value the value log
/// holds, only the head is read (see `WriteCtx::swap`): its value is never
/// needed here.
pub fn replace(w: &mut WriteCtx, key: Key, new: &Meta) -> Result<(), StoreError> {
    replace_at(w, key, &key.meta_key(), new)
}

/// [`replace`] with the key's `meta` row key already built (MSET builds
/// each once, to warm its row and then to write it).
pub fn replace_at(
    w: &mut WriteCtx,
    key: Key,
    meta_key: &[u8],
    new: &Meta,
) -> Result<(), StoreError> {
    let old = w
        .swap(Table::Meta, meta_key, &new.encode())?
        .map(|raw| Meta::decode(&raw))
        .transpose()?;
    let expired = old.as_ref().is_some_and(|m| m.is_expired(w.expiry_clock()));
    if expired {
        lazily_expired(w, key);
    }
    settle_replaced(w, key, old.as_ref(), new)?;
    if expired {
        // The expired key counted as present; the new one is still new.
        w.notify(notify::NEW, "new", key.db, key.name);
    }
    Ok(())
}

/// Everything besides the `meta` row itself that replacing `old` by `new`
/// implies: the `ttl` row, the old collection version, the counts.
pub fn settle_replaced(
    w: &mut WriteCtx,
    key: Key,
    old: Option<&Meta>,
    new: &Meta,
) -> Result<(), StoreError> {
    let old_expire = old.map_or(0, |m| m.expire_ms);
    if old_expire != new.expire_ms {
        if old_expire != 0 {
            w.del_seen(
                Table::Ttl,
                &encoding::ttl_key(old_expire, key.db, key.slot, key.name),
            )?;
        }
        if new.expire_ms != 0 {
            w.put(
                Table::Ttl,
                &encoding::ttl_key(new.expire_ms, key.db, key.slot, key.name),
                &[],
            )?;
        }
    }
    if let Some(old) = old {
        if old.version().is_some() && old.version() != new.version() {
            retire_version(w, key, old)?;
        }
    }
    if old.is_none() {
        // Redis reports every key added to a database, before the
        // command's own event.
        w.notify(notify::NEW, "new", key.db, key.name);
    }
    let counts = &mut w.state.counts[key.db as usize];
    if old.is_none() {
        counts.keys += 1;
    }
    counts.expires += (new.expire_ms != 0) as i64 - (old_expire != 0) as i64;
    counts.expire_sum += i128::from(new.expire_ms) - i128::from(old_expire);
    Ok(())
}

/// Deletes a key whose current metadata is `old`.
pub fn delete(w: &mut WriteCtx, key: Key, old: &Meta) -> Result<(), StoreError> {
    w.del_seen(Table::Meta, &key.meta_key())?;
    if old.expire_ms != 0 {
        w.del_seen(
            Table::Ttl,
            &encoding::ttl_key(old.expire_ms, key.db, key.slot, key.name),
        )?;
    }
    retire_version(w, key, old)?;
    let counts = &mut w.state.counts[key.db as usize];
    counts.keys -= 1;
    counts.expires -= (old.expire_ms != 0) as i64;
    counts.expire_sum -= i128::from(old.expire_ms);
    Ok(())
}

/// Queues a dead collection version's sub-keys for background deletion.
fn retire_version(w: &mut WriteCtx, key: Key, old: &Meta) -> Result<(), StoreError> {
    if old.ktype == KeyType::Stream {
        // Group readers blocked on a stream that goes away get an error.
        w.broadcasts.push((key.db, key.name.to_vec()));
    }
    if let MetaBody::Collection { version, .. } = old.body {
        let gc_key = encoding::version_prefix(key.db, key.slot, key.name, version);
        w.put(Table::Gc, &gc_key, &[old.ktype as u8])?;
    }
    Ok(())
}

/// Deletes the key if it exists and is live; true if it did.
pub fn delete_if_live(w: &mut WriteCtx, key: Key) -> Result<bool, StoreError> {
    match lookup_for_write(w, key)? {
        Some(meta) => {
            delete(w, key, &meta)?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// The tables that hold a collection version's rows: `sub` for every
/// type, and `zscore` too for a sorted set.
pub fn version_tables(ktype: KeyType) -> &'static [Table] {
    match ktype {
        KeyType::ZSet => &[Table::Sub, Table::ZScore],
        _ => &[Table::Sub],
    }
}

/// What [`scan_version`] calls per row: table, key after the version
/// prefix, value; false stops the scan.
pub type VersionVisitor<'a> = dyn FnMut(Table, &[u8], &[u8]) -> bool + 'a;

/// Rows [`scan_pages`] reads at a time before it hands them on.
const PAGE: usize = 256;

/// A page of rows, keys and values.
pub type Page = Vec<(Vec<u8>, Vec<u8>)>;

/// Reads `table`'s rows in `[start, end)` a page at a time and hands each
/// page to `each` between reads, never from inside one; `each` returns
/// false to stop. A scan of the write buffers holds a buffer's lock, and
/// a caller that waits (MOVESLOT's reader blocks on its bounded channel
/// to the network) would hold the shard's commits up behind it: one did,
/// for good, when the task draining that channel could not run.
pub fn scan_pages(
    r: &dyn KvRead,
    table: Table,
    (start, end): (&[u8], Option<&[u8]>),
    each: &mut dyn FnMut(Page) -> Result<bool, StoreError>,
) -> Result<(), StoreError> {
    let mut from = start.to_vec();
    loop {
        let mut page: Page = Vec::new();
        r.scan(table, &from, end, false, &mut |k, v| {
            page.push((k.to_vec(), v.to_vec()));
            page.len() < PAGE
        })?;
        // A full page may have rows after it: go on just past its last.
        let next = match page.last() {
            Some((last, _)) if page.len() == PAGE => {
                let mut next = last.clone();
                next.push(0);
                Some(next)
            }
            _ => None,
        };
        if !each(page)? {
            return Ok(());
        }
        match next {
            Some(next) => from = next,
            None => return Ok(()),
        }
    }
}

/// Visits every row of the collection version `meta` names for `key`, in
/// key order per table (see [`version_tables`]): its table, the row key
/// after the version prefix, and its value. `visit` returns false to stop.
/// Nothing for a string. The rows are read by [`scan_pages`]: a visitor
/// may wait.
pub fn scan_version(
    r: &dyn KvRead,
    key: Key,
    meta: &Meta,
    visit: &mut VersionVisitor<'_>,
) -> Result<(), StoreError> {
    let Some(version) = meta.version() else {
        return Ok(());
    };
    let prefix = encoding::version_prefix(key.db, key.slot, key.name, version);
    let end = encoding::prefix_successor(&prefix);
    let mut going = true;
    for &t in version_tables(meta.ktype) {
        scan_pages(r, t, (&prefix, end.as_deref()), &mut |page| {
            going = page.iter().all(|(k, v)| visit(t, &k[prefix.len()..], v));
            Ok(going)
        })?;
        if !going {
            break;
        }
    }
    Ok(())
}

/// The flag of a `gc` row whose version is still being written (a key
/// arriving in pieces, see [`hold_version`]), in its type byte.
const HELD: u8 = 0x80;

/// This process's mark on the `gc` rows it holds: rows held by an earlier
/// run (one that died mid-import) are collected like any other.
fn hold_token() -> [u8; 8] {
    static TOKEN: std::sync::OnceLock<[u8; 8]> = std::sync::OnceLock::new();
    *TOKEN.get_or_init(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        (t ^ u64::from(std::process::id()).rotate_left(32)).to_be_bytes()
    })
}

/// Whether a `gc` row is held by this process.
fn held_here(row: &[u8]) -> bool {
    row.first().is_some_and(|b| b & HELD != 0) && row.get(1..9) == Some(&hold_token()[..])
}

/// Marks a version whose sub-keys are about to be written in several
/// transactions, before any `meta` row points at it: should the writer
/// never finish (an abort, or a crash and restart), the collector finds
/// the rows; until then it leaves them alone. [`settle_version`] ends it.
pub fn hold_version(
    w: &mut WriteCtx,
    key: Key,
    ktype: KeyType,
    version: u64,
) -> Result<(), StoreError> {
    let mut row = vec![ktype as u8 | HELD];
    row.extend_from_slice(&hold_token());
    let gc_key = encoding::version_prefix(key.db, key.slot, key.name, version);
    w.put(Table::Gc, &gc_key, &row)
}

/// Ends a [`hold_version`]: the version is now a live key's (`live`), or
/// garbage to collect.
pub fn settle_version(
    w: &mut WriteCtx,
    key: Key,
    ktype: KeyType,
    version: u64,
    live: bool,
) -> Result<(), StoreError> {
    let gc_key = encoding::version_prefix(key.db, key.slot, key.name, version);
    if live {
        w.del(Table::Gc, &gc_key)?;
        Ok(())
    } else {
        w.put(Table::Gc, &gc_key, &[ktype as u8])
    }
}

/// Counts of work done by one reaper slice.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReapStats {
    /// Keys deleted because their time had come.
    pub expired: u64,
    /// Sub-key rows of dead versions deleted.
    pub gc_rows: u64,
    /// Dead versions fully collected.
    pub gc_versions: u64,
}

/// One bounded slice of active expiry: deletes at most `limit` keys whose
/// expiry is at or before now, oldest first.
pub fn reap_expired(
    w: &mut WriteCtx,
    limit: usize,
    stats: &mut ReapStats,
) -> Result<(), StoreError> {
    let now = w.now_ms();
    let mut due = Vec::new();
    w.scan(
        Table::Ttl,
        &[],
        Some(&(now + 1).to_be_bytes()),
        false,
        &mut |k, _| {
            due.push(k.to_vec());
            due.len() < limit
        },
    )?;
    for ttl_row in due {
        let Some((expire, mkey)) = encoding::decode_ttl_key(&ttl_row) else {
            w.del_seen(Table::Ttl, &ttl_row)?;
            continue;
        };
        let Some((db, slot, name)) = encoding::decode_meta_key(mkey) else {
            w.del_seen(Table::Ttl, &ttl_row)?;
            continue;
        };
        let name = name.to_vec();
        let key = Key {
            db,
            slot,
            name: &name,
        };
        match w
            .get(Table::Meta, mkey)?
            .map(|raw| Meta::decode(&raw))
            .transpose()?
        {
            Some(meta) if meta.expire_ms == expire => {
                delete(w, key, &meta)?;
                // As Redis's active expiry (reads report theirs through
                // `KvRead::note_expired`).
                w.notify(notify::EXPIRED, "expired", db, &name);
                stats.expired += 1;
            }
            // A stale index row (should not happen; repair it quietly).
            _ => {
                w.del_seen(Table::Ttl, &ttl_row)?;
            }
        }
    }
    Ok(())
}

/// One bounded slice of garbage collection: deletes at most `limit` sub-key
/// rows of dead versions.
///
/// A version too large for one slice is taken in several: its `gc` row
/// then also records where the slice stopped (`type, table code, last row
/// deleted`), and the next slice starts there. Deleted rows stay in the
/// write buffer as deletions until it reaches the tables, so starting
/// again from the version's first row would step over all of them each
/// time, and collecting a big collection would take quadratic time.
pub fn collect_garbage(
    w: &mut WriteCtx,
    limit: usize,
    stats: &mut ReapStats,
) -> Result<(), StoreError> {
    let mut budget = limit;
    // Versions before this one were collected by this slice.
    let mut from = Vec::new();
    while budget > 0 {
        let mut next = None;
        w.scan(Table::Gc, &from, None, false, &mut |k, v| {
            next = Some((k.to_vec(), v.to_vec()));
            false
        })?;
        let Some((prefix, row)) = next else { break };
        if held_here(&row) {
            // Rows still being written by an import of this process.
            from = prefix;
            from.push(0);
            continue;
        }
        let ktype = row.first().copied().unwrap_or(0) & !HELD;
        let resume = row
            .get(1)
            .and_then(|&code| Table::from_code(code))
            .map(|t| (t, row[2..].to_vec()));
        let end = encoding::prefix_successor(&prefix);
        // An unknown type code: its rows are in `sub` if anywhere.
        let tables = KeyType::from_code(ktype).map_or(&[Table::Sub][..], version_tables);
        let mut stopped = None;
        for (i, &t) in tables.iter().enumerate() {
            let start = match &resume {
                Some((rt, key)) if *rt == t => key.clone(),
                // An earlier slice finished this table.
                Some((rt, _)) if tables[..i].contains(rt) || !tables.contains(rt) => prefix.clone(),
                Some(_) => continue,
                None => prefix.clone(),
            };
            let mut rows = Vec::new();
            w.scan(t, &start, end.as_deref(), false, &mut |k, _| {
                rows.push(k.to_vec());
                rows.len() < budget
            })?;
            // Dead versions belong to no live key: nobody watching a key
            // is told of their removal.
            w.quiet = true;
            let deleted = rows.iter().try_for_each(|k| w.del_seen(t, k));
            w.quiet = false;
            deleted?;
            budget -= rows.len();
            stats.gc_rows += rows.len() as u64;
            if budget == 0 {
                stopped = rows.pop().map(|last| (t, last));
                break;
            }
        }
        match stopped {
            Some((t, last)) => {
                let mut row = vec![ktype, t as u8];
                row.extend_from_slice(&last);
                w.put(Table::Gc, &prefix, &row)?;
            }
            None => {
                w.del_seen(Table::Gc, &prefix)?;
                stats.gc_versions += 1;
                from = prefix;
                from.push(0);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::tables::{scratch_file, ShardState};
    use redb::Database;

    fn with_txn<T>(
        db: &Database,
        state: &mut ShardState,
        now: u64,
        f: impl FnOnce(&mut WriteCtx) -> T,
    ) -> T {
        crate::storage::tables::commit_direct(db, state, now, f)
    }

    fn count(w: &WriteCtx, t: Table) -> usize {
        let mut n = 0;
        w.scan(t, &[], None, false, &mut |_, _| {
            n += 1;
            true
        })
        .unwrap();
        n
    }

    /// An expiring key has exactly one ttl row; the reaper deletes it once due.
    #[test]
    fn ttl_rows_follow_expiry_and_reaper_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let (db, mut state) = scratch_file(&dir.path().join("s.redb"));
        let k = Key::new(0, b"k");
        with_txn(&db, &mut state, 1000, |w| {
            store(w, k, None, &Meta::string(b"v".to_vec(), 5000)).unwrap();
            let old = lookup_for_write(w, k).unwrap().unwrap();
            store(w, k, Some(&old), &Meta::string(b"v".to_vec(), 6000)).unwrap();
            assert_eq!(count(w, Table::Ttl), 1);
            assert_eq!(w.state.counts[0].keys, 1);
            assert_eq!(w.state.counts[0].expires, 1);
        });
        with_txn(&db, &mut state, 5500, |w| {
            let mut s = ReapStats::default();
            reap_expired(w, 10, &mut s).unwrap();
            assert_eq!(s.expired, 0);
            assert!(lookup(w, k).unwrap().is_some());
        });
        with_txn(&db, &mut state, 6000, |w| {
            assert!(lookup(w, k).unwrap().is_none(), "lazily expired");
            let mut s = ReapStats::default();
            reap_expired(w, 10, &mut s).unwrap();
            assert_eq!(s.expired, 1);
            assert_eq!(count(w, Table::Ttl), 0);
            assert_eq!(count(w, Table::Meta), 0);
            assert_eq!(w.state.counts[0].keys, 0);
        });
    }

    /// Deleting a collection is one meta delete plus a gc row; the collector
    /// later removes exactly that version's rows and nothing of a neighbour
    /// whose name extends it.
    #[test]
    fn delete_is_o1_and_gc_collects_only_the_dead_version() {
        let dir = tempfile::tempdir().unwrap();
        let (db, mut state) = scratch_file(&dir.path().join("s.redb"));
        let (a, ab) = (Key::new(0, b"a"), Key::new(0, b"ab"));
        let a_meta = with_txn(&db, &mut state, 0, |w| {
            let mut metas = Vec::new();
            for k in [a, ab] {
                let version = w.new_version();
                let prefix = encoding::version_prefix(k.db, k.slot, k.name, version);
                for i in 0..100u32 {
                    w.put(
                        Table::Sub,
                        &encoding::sub_key(&prefix, &i.to_be_bytes()),
                        b"x",
                    )
                    .unwrap();
                }
                let m = Meta {
                    form: crate::storage::encoding::StringForm::Fresh,
                    ktype: KeyType::Hash,
                    expire_ms: 0,
                    body: MetaBody::Collection {
                        version,
                        size: 100,
                        extra: Vec::new(),
                    },
                };
                store(w, k, None, &m).unwrap();
                metas.push(m);
            }
            metas.remove(0)
        });
        with_txn(&db, &mut state, 0, |w| {
            delete(w, a, &a_meta).unwrap();
            assert_eq!(count(w, Table::Gc), 1);
            assert_eq!(count(w, Table::Sub), 200, "rows stay until collected");
        });
        with_txn(&db, &mut state, 0, |w| {
            let mut s = ReapStats::default();
            collect_garbage(w, 30, &mut s).unwrap();
            assert_eq!(s.gc_rows, 30, "bounded slice");
            collect_garbage(w, 1000, &mut s).unwrap();
            assert_eq!(s.gc_rows, 100);
            assert_eq!(count(w, Table::Gc), 0);
            assert_eq!(count(w, Table::Sub), 100, "the neighbour's rows are intact");
            assert!(lookup(w, ab).unwrap().is_some());
        });
    }

    /// A held version's rows survive collection until it is settled as
    /// garbage; a row held by another process (one that died) does not.
    #[test]
    fn held_versions_wait_for_their_writer() {
        let dir = tempfile::tempdir().unwrap();
        let (db, mut state) = scratch_file(&dir.path().join("s.redb"));
        let (k, old) = (Key::new(0, b"k"), Key::new(0, b"old"));
        let v = with_txn(&db, &mut state, 0, |w| {
            let mut vs = Vec::new();
            for key in [k, old] {
                let v = w.new_version();
                hold_version(w, key, KeyType::Set, v).unwrap();
                let prefix = encoding::version_prefix(0, key.slot, key.name, v);
                w.put(Table::Sub, &encoding::sub_key(&prefix, b"m"), &[])
                    .unwrap();
                vs.push(v);
            }
            // As a crashed run left it: held under someone else's token.
            let gc = encoding::version_prefix(0, old.slot, old.name, vs[1]);
            let mut row = vec![KeyType::Set as u8 | HELD];
            row.extend_from_slice(&[0xEE; 8]);
            w.put(Table::Gc, &gc, &row).unwrap();
            vs[0]
        });
        with_txn(&db, &mut state, 0, |w| {
            collect_garbage(w, 100, &mut ReapStats::default()).unwrap();
            assert_eq!(count(w, Table::Sub), 1, "only the stale hold is collected");
            assert_eq!(count(w, Table::Gc), 1);
            settle_version(w, k, KeyType::Set, v, false).unwrap();
            collect_garbage(w, 100, &mut ReapStats::default()).unwrap();
            assert_eq!(count(w, Table::Sub), 0);
            assert_eq!(count(w, Table::Gc), 0);
        });
    }
}

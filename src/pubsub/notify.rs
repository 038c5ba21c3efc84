//! Keyspace notifications (`notify-keyspace-events`): the class flags, and
//! the two messages one event becomes.
//!
//! A write that changes a key reports an event (`set`, `lpush`, `del`...)
//! of one class; when that class and at least one of K (keyspace) / E
//! (keyevent) are enabled, the event is published on
//! `__keyspace@<db>__:<key>` with the event as payload, then on
//! `__keyevent@<db>__:<event>` with the key as payload, as Redis does.
//! The flags are read once per transaction (see `WriteCtx::notify_flags`),
//! so a server with notifications off pays one branch per event.
//!
//! # Where events come from, and how cairn differs from Redis
//! * Events are queued with the transaction's other messages and published
//!   after it commits (never, if it does not), so a subscriber hears of a
//!   change only once it can read it. A command's events keep its order;
//!   a command spread over several shards (DEL or MSET of keys in
//!   different slots, a cross-shard RENAME) publishes each shard's events
//!   as that shard commits, so its keys' events may interleave otherwise
//!   than in Redis.
//! * `expired`: cairn's reads never delete an expired key (they only treat
//!   it as absent), so the event comes from the background expiry (the
//!   shard's reaper) or from a write that meets the key, not from a read.
//! * `new` is reported where a key is added to a database
//!   (`keyspace::store` / `replace` of an absent key), before the
//!   command's own event, as Redis's dbAdd does.
//! * `keymiss` (m) is accepted but not published (reads run on snapshots
//!   off the shard); `evicted` (e) and module (d) events never happen.

use bytes::{BufMut, Bytes, BytesMut};

/// K: publish on `__keyspace@<db>__:<key>`.
pub const KEYSPACE: u32 = 1 << 0;
/// E: publish on `__keyevent@<db>__:<event>`.
pub const KEYEVENT: u32 = 1 << 1;
/// g: generic commands (DEL, EXPIRE, RENAME...).
pub const GENERIC: u32 = 1 << 2;
/// $: string commands.
pub const STRING: u32 = 1 << 3;
/// l: list commands.
pub const LIST: u32 = 1 << 4;
/// s: set commands.
pub const SET: u32 = 1 << 5;
/// h: hash commands.
pub const HASH: u32 = 1 << 6;
/// z: sorted set commands.
pub const ZSET: u32 = 1 << 7;
/// x: keys expired.
pub const EXPIRED: u32 = 1 << 8;
/// e: keys evicted (cairn never evicts: accepted, never emitted).
pub const EVICTED: u32 = 1 << 9;
/// t: stream commands.
pub const STREAM: u32 = 1 << 10;
/// m: key misses (accepted, not published: see the module notes).
pub const KEY_MISS: u32 = 1 << 11;
/// d: module events (cairn has no modules: accepted, never emitted).
pub const MODULE: u32 = 1 << 12;
/// n: a key created.
pub const NEW: u32 = 1 << 13;
/// A: alias for g$lshzxetd.
pub const ALL: u32 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The flags a `notify-keyspace-events` value stands for (CONFIG has
/// already checked its letters; unknown ones are ignored here). Without K
/// or E nothing is published, so such a value yields 0 and writes skip
/// notifications entirely.
pub fn parse(value: &str) -> u32 {
    let mut flags = 0;
    for c in value.bytes() {
        flags |= match c {
            b'A' => ALL,
            b'g' => GENERIC,
            b'$' => STRING,
            b'l' => LIST,
            b's' => SET,
            b'h' => HASH,
            b'z' => ZSET,
            b'x' => EXPIRED,
            b'e' => EVICTED,
            b't' => STREAM,
            b'm' => KEY_MISS,
            b'd' => MODULE,
            b'n' => NEW,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            _ => 0,
        };
    }
    if flags & (KEYSPACE | KEYEVENT) == 0 || flags & !(KEYSPACE | KEYEVENT) == 0 {
        return 0;
    }
    flags
}

/// The messages (channel, payload) that event `event` of class `class` on
/// `key` in database `db` becomes under `flags`, in Redis's order: keyspace
/// first, then keyevent. Empty when the class is off.
pub fn messages(flags: u32, class: u32, event: &str, db: u8, key: &[u8]) -> Vec<(Bytes, Bytes)> {
    let mut out = Vec::new();
    if flags & class == 0 {
        return out;
    }
    let event = Bytes::copy_from_slice(event.as_bytes());
    let key = Bytes::copy_from_slice(key);
    if flags & KEYSPACE != 0 {
        out.push((channel("__keyspace@", db, &key), event.clone()));
    }
    if flags & KEYEVENT != 0 {
        out.push((channel("__keyevent@", db, &event), key));
    }
    out
}

impl crate::storage::WriteCtx<'_> {
    /// Reports keyspace event `event` of class `class` on `key` (see
    /// [`WriteCtx::notify`](crate::storage::WriteCtx::notify)).
    #[inline]
    pub fn event(&mut self, class: u32, event: &str, key: crate::storage::keyspace::Key) {
        self.notify(class, event, key.db, key.name);
    }

    /// Reports `event` of `class` on `key`, then `del` when it left the
    /// key empty (and so deleted it): a pop or removal, in Redis's order.
    pub fn event_emptying(
        &mut self,
        class: u32,
        event: &str,
        key: crate::storage::keyspace::Key,
        emptied: bool,
    ) {
        self.event(class, event, key);
        if emptied {
            self.event(GENERIC, "del", key);
        }
    }

    /// Deletes `key` if it is live and reports `del` (DEL, MIGRATE's
    /// source, a *STORE whose result is empty); whether it was there.
    pub fn delete_reported(
        &mut self,
        key: crate::storage::keyspace::Key,
    ) -> Result<bool, crate::storage::StoreError> {
        let deleted = crate::storage::keyspace::delete_if_live(self, key)?;
        if deleted {
            self.event(GENERIC, "del", key);
        }
        Ok(deleted)
    }

    /// A write command's read of `key` (SET ... GET, INCR's operand,
    /// COPY's source): counted in keyspace_hits / keyspace_misses as Redis
    /// counts it, and a miss reported as `keymiss`.
    pub fn looked_up(&mut self, key: crate::storage::keyspace::Key, hit: bool) {
        crate::storage::KvRead::note_lookup(self, hit);
        if !hit {
            self.event(KEY_MISS, "keymiss", key);
        }
    }

    /// Runs `f` without reporting `new` when `replacing`: the *STORE
    /// commands overwrite an existing destination, which Redis does not
    /// report as a new key (cairn deletes it first, then writes afresh).
    pub fn replacing<T>(&mut self, replacing: bool, f: impl FnOnce(&mut Self) -> T) -> T {
        if !replacing {
            return f(self);
        }
        let flags = self.notify_flags;
        self.notify_flags &= !NEW;
        let out = f(self);
        self.notify_flags = flags;
        out
    }
}

/// Publishes `keymiss` for `key` in database `db` now, if the flags ask
/// for it: a read command's miss, reported while the command runs (before
/// its reply), as Redis does.
pub fn key_miss(hub: &super::Hub, db: u8, key: &[u8]) {
    let flags = hub.notify_flags();
    if flags & KEY_MISS == 0 {
        return;
    }
    for (channel, payload) in messages(flags, KEY_MISS, "keymiss", db, key) {
        hub.publish_local(super::Kind::Channel, &channel, &payload, None);
    }
}

/// `<prefix><db>__:<tail>`.
fn channel(prefix: &str, db: u8, tail: &[u8]) -> Bytes {
    let mut c = BytesMut::with_capacity(prefix.len() + 6 + tail.len());
    c.put_slice(prefix.as_bytes());
    c.put_slice(db.to_string().as_bytes());
    c.put_slice(b"__:");
    c.put_slice(tail);
    c.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// K/E and the classes combine as Redis's: nothing without K or E, or
    /// without a class.
    #[test]
    fn parse_needs_a_channel_kind_and_a_class() {
        assert_eq!(parse(""), 0);
        assert_eq!(parse("A"), 0);
        assert_eq!(parse("KE"), 0);
        assert_eq!(parse("KA"), KEYSPACE | ALL);
        assert_eq!(parse("AKE") & NEW, 0, "A does not include n");
        assert_eq!(parse("Ez"), KEYEVENT | ZSET);
    }

    /// Keyspace first, then keyevent; a class that is off yields nothing.
    #[test]
    fn messages_in_redis_order() {
        let flags = parse("KEA");
        let m = messages(flags, STRING, "set", 3, b"k");
        assert_eq!(
            m,
            vec![
                (Bytes::from("__keyspace@3__:k"), Bytes::from("set")),
                (Bytes::from("__keyevent@3__:set"), Bytes::from("k")),
            ]
        );
        assert!(messages(flags, NEW, "new", 0, b"k").is_empty());
        assert_eq!(messages(parse("Kg"), GENERIC, "del", 0, b"k").len(), 1);
    }
}

//! Pub/Sub: who listens to what, and delivery of messages to them.
//!
//! # Design
//! * **Registry.** Channel and shard-channel subscribers live in
//!   [`DashMap`]s keyed by channel: a PUBLISH takes a read lock on one map
//!   shard only, so publishers to different channels (and readers of one)
//!   never wait for each other. Patterns are few in practice and every
//!   PUBLISH must try them all: they sit behind one read-mostly lock, and a
//!   counter lets a PUBLISH skip it entirely while nobody uses a pattern.
//! * **Delivery.** Every client has a [`Mailbox`]: a queue its connection
//!   task drains when woken. A connection's run of PUBLISHes wakes each
//!   subscriber once, when it ends ([`Wakes`]). A message is
//!   encoded once per PUBLISH (per matching pattern for `pmessage`), as a
//!   RESP2 array; its RESP3 form differs only in the first byte (`>` for
//!   `*`), so the same bytes serve every subscriber, cloned by reference
//!   count.
//! * **Bounded memory.** The bytes queued for a client and not yet written
//!   to its socket are counted; past `client-output-buffer-limit` for its
//!   class (pubsub while it has subscriptions, normal otherwise) the client
//!   is disconnected, as Redis does, and everything queued for it is freed.
//! * **Order.** A publisher delivers to each subscriber in the order it
//!   publishes; a connection writes its pushes in the order they arrive.
//! * **Transactions.** PUBLISH inside EXEC or a script is deferred to the
//!   commit of the unit (`WriteCtx::publish`), so a subscriber never hears
//!   of a change it cannot read yet, nor of a transaction WATCH aborted.

pub mod monitor;
pub mod notify;
pub mod subscriptions;
pub mod tracking;

pub use subscriptions::Subscriptions;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use dashmap::DashMap;

use crate::server::ClientEntry;

/// The three kinds of subscription, each with its own registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SUBSCRIBE: exact channel names.
    Channel,
    /// PSUBSCRIBE: glob patterns over channel names.
    Pattern,
    /// SSUBSCRIBE: shard channels (exact names, routed by slot).
    Shard,
}

impl Kind {
    /// The name of the confirmation pushed for a (un)subscription.
    pub fn verb(self, subscribe: bool) -> &'static str {
        match (self, subscribe) {
            (Kind::Channel, true) => "subscribe",
            (Kind::Channel, false) => "unsubscribe",
            (Kind::Pattern, true) => "psubscribe",
            (Kind::Pattern, false) => "punsubscribe",
            (Kind::Shard, true) => "ssubscribe",
            (Kind::Shard, false) => "sunsubscribe",
        }
    }
}

/// Something pushed to a client outside the request/reply flow.
#[derive(Debug, Clone)]
pub enum Push {
    /// A Pub/Sub message, as its RESP2 array (`*...`); RESP3 replaces the
    /// first byte with `>`.
    Frame(Bytes),
    /// A tracking invalidation: these keys, or (`None`) every key.
    Invalidate(Option<Vec<Bytes>>),
    /// The REDIRECT target of this client's tracking went away (its id).
    RedirectBroken(u64),
    /// Bytes sent as they are in either protocol (a MONITOR line).
    Line(Bytes),
}

/// The channel RESP2 clients receive invalidations on.
pub const INVALIDATE_CHANNEL: &[u8] = b"__redis__:invalidate";

impl Push {
    /// Appends the push as a client of protocol `resp3` receives it.
    /// `subscribed`: a RESP2 client in subscribed mode, which alone can be
    /// sent invalidations (as messages); others get nothing, as in Redis.
    pub fn encode(&self, out: &mut BytesMut, resp3: bool, subscribed: bool) {
        use crate::protocol::Reply;
        match self {
            Push::Frame(frame) if resp3 => {
                out.put_u8(b'>');
                out.put_slice(&frame[1..]);
            }
            Push::Frame(frame) => out.put_slice(frame),
            Push::Invalidate(keys) => {
                let keys = match keys {
                    Some(k) => Reply::Array(k.iter().cloned().map(Reply::Bulk).collect()),
                    None => Reply::Nil,
                };
                let head = if resp3 {
                    Reply::Push(vec![Reply::bulk(&b"invalidate"[..]), keys])
                } else if subscribed {
                    Reply::Array(vec![
                        Reply::bulk(&b"message"[..]),
                        Reply::bulk(INVALIDATE_CHANNEL),
                        keys,
                    ])
                } else {
                    return;
                };
                head.encode(out, resp3);
            }
            Push::RedirectBroken(id) if resp3 => Reply::Push(vec![
                Reply::bulk(&b"tracking-redir-broken"[..]),
                Reply::Int(*id as i64),
            ])
            .encode(out, true),
            Push::RedirectBroken(_) => {}
            Push::Line(line) => out.put_slice(line),
        }
    }

    /// The bytes it counts for in the client's output buffer.
    pub fn size(&self) -> usize {
        match self {
            Push::Frame(frame) => frame.len(),
            Push::Invalidate(keys) => {
                32 + keys
                    .as_ref()
                    .map_or(0, |k| k.iter().map(|k| k.len() + 16).sum())
            }
            Push::RedirectBroken(_) => 48,
            Push::Line(line) => line.len(),
        }
    }

    /// Whether it waits for the reply being written: an invalidation must
    /// not overtake the value of a read it invalidates.
    pub fn after_reply(&self) -> bool {
        matches!(self, Push::Invalidate(_) | Push::RedirectBroken(_))
    }
}

/// A client's inbox for pushes, and what CLIENT LIST shows of it.
///
/// Pushes wait in a queue the client's connection drains when `ready`
/// wakes it. A PUBLISH run by a connection does not wake a subscriber per
/// message: it counts itself in `feeding` and wakes the subscriber once,
/// when its batch of commands ends (see [`Wakes`]), and a subscriber woken
/// while other publishers are still feeding it waits for them. So one
/// socket write carries what every publisher ready at the time sent, as
/// one turn of Redis's event loop does.
#[derive(Debug, Default)]
pub struct Mailbox {
    queue: parking_lot::Mutex<Inbox>,
    /// Wakes the connection: pushes are queued, or a feeder finished.
    ready: tokio::sync::Notify,
    /// Batches of PUBLISHes in progress that have queued messages here and
    /// will wake the client when they end.
    feeding: AtomicU32,
    /// The [`Wakes`] that last counted itself in `feeding` (its id): a
    /// batch publishing many messages here counts once.
    last_feeder: AtomicU64,
    /// Bytes queued for the client and not yet written to its socket
    /// (CLIENT LIST's `omem`; checked against the output buffer limits).
    pub pending: AtomicUsize,
    /// Unix seconds since when `pending` has been over the soft limit
    /// (0: it is not).
    soft_since: AtomicU64,
    /// Subscriptions by kind: channels, patterns, shard channels (read
    /// without a lock by CLIENT LIST and on every command).
    pub counts: [AtomicU32; 3],
    /// The subscribed names (see `subscriptions`).
    pub(crate) names: parking_lot::Mutex<subscriptions::AllNames>,
}

/// The queue of a [`Mailbox`].
#[derive(Debug, Default)]
struct Inbox {
    pushes: std::collections::VecDeque<Push>,
    /// The connection has ended: nothing is queued any more.
    closed: bool,
}

impl Mailbox {
    /// Subscriptions of one kind.
    pub fn count(&self, kind: Kind) -> u32 {
        self.counts[kind as usize].load(Ordering::Relaxed)
    }

    /// Whether the client is subscribed to anything (Redis's pubsub class
    /// for output buffer limits, and RESP2's subscribed mode).
    pub fn subscribed(&self) -> bool {
        self.counts.iter().any(|c| c.load(Ordering::Relaxed) > 0)
    }

    /// Queues `push`, counting it, and wakes the client; false when it is
    /// gone.
    pub fn send(&self, push: Push) -> bool {
        let queued = self.queue(push).is_some();
        self.ready.notify_one();
        queued
    }

    /// Queues `push` without waking the client; the bytes now pending for
    /// it, or `None` when it is gone.
    fn queue(&self, push: Push) -> Option<usize> {
        let n = push.size();
        let mut inbox = self.queue.lock();
        if inbox.closed {
            return None;
        }
        inbox.pushes.push_back(push);
        // Under the lock: the connection subtracts it only after taking
        // the push out.
        Some(self.pending.fetch_add(n, Ordering::Relaxed) + n)
    }

    /// Moves every push queued into `into` (empty), oldest first.
    pub fn take_all(&self, into: &mut std::collections::VecDeque<Push>) {
        std::mem::swap(&mut self.queue.lock().pushes, into);
    }

    /// Waits until pushes may be queued (or a feeder finished).
    pub async fn ready(&self) {
        self.ready.notified().await
    }

    /// Whether a batch of PUBLISHes that queued messages here is still
    /// running (and will wake the client when it ends).
    pub fn fed(&self) -> bool {
        self.feeding.load(Ordering::Acquire) > 0
    }

    /// The connection has ended: drops what is queued and refuses more.
    pub fn close(&self) {
        let mut inbox = self.queue.lock();
        inbox.closed = true;
        inbox.pushes.clear();
        self.pending.store(0, Ordering::Relaxed);
    }

    /// Records that `n` bytes of pushes went out on the socket.
    pub fn written(&self, n: usize) {
        self.pending.fetch_sub(n, Ordering::Relaxed);
    }
}

/// The subscribers one connection's current batch of PUBLISHes has queued
/// messages for, woken when the batch ends ([`Wakes::wake`], or when it is
/// dropped), so each gets one wake per batch rather than one per message.
#[derive(Debug)]
pub struct Wakes {
    id: u64,
    fed: Vec<Arc<ClientEntry>>,
}

impl Default for Wakes {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Wakes {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            fed: Vec::new(),
        }
    }
}

impl Wakes {
    /// Counts this batch as feeding `client`, once.
    fn feed(&mut self, client: &Arc<ClientEntry>) {
        let mailbox = &client.mailbox;
        // Another batch may have fed it since: counting again is harmless
        // (each count is undone by one wake), missing one is not.
        if mailbox.last_feeder.swap(self.id, Ordering::AcqRel) != self.id {
            mailbox.feeding.fetch_add(1, Ordering::AcqRel);
            self.fed.push(client.clone());
        }
    }

    /// Ends the batch: wakes every subscriber it fed.
    pub fn wake(&mut self) {
        for client in self.fed.drain(..) {
            let mailbox = &client.mailbox;
            let _ = mailbox.last_feeder.compare_exchange(
                self.id,
                0,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            mailbox.feeding.fetch_sub(1, Ordering::AcqRel);
            mailbox.ready.notify_one();
        }
    }
}

impl Drop for Wakes {
    fn drop(&mut self) {
        self.wake();
    }
}

/// Reply bytes Redis keeps in a client's static buffer, which its output
/// buffer limit does not count.
const REPLY_BUFFER: u64 = 16 * 1024;

/// What replies of `bytes` count toward an output buffer limit. Redis does
/// not count replies that fit its 16 KiB static buffer; past it, it counts
/// whole reply blocks, whose slack is of the order of that buffer: so all
/// of a bigger reply counts here.
fn counted_reply_bytes(bytes: u64) -> u64 {
    if bytes > REPLY_BUFFER {
        bytes
    } else {
        0
    }
}

/// One class's `client-output-buffer-limit`: hard bytes, soft bytes, soft
/// seconds (0 = no limit).
#[derive(Debug, Default)]
struct Limit {
    hard: AtomicU64,
    soft: AtomicU64,
    secs: AtomicU64,
}

/// Where a PUBLISH goes beyond this node: called with channel and message.
pub type Forward = Box<dyn Fn(&[u8], &[u8]) + Send + Sync>;

/// Subscribers of one channel (or pattern), in subscription order.
type Subscribers = Vec<Arc<ClientEntry>>;

/// Channels to their subscribers. Hashed with foldhash (randomly seeded,
/// so clients still cannot choose colliding names) rather than SipHash:
/// every PUBLISH hashes its channel.
type ChannelMap = DashMap<Bytes, Subscribers, foldhash::fast::RandomState>;

/// The server's Pub/Sub registry.
#[derive(Default)]
pub struct Hub {
    channels: ChannelMap,
    shard_channels: ChannelMap,
    patterns: parking_lot::RwLock<HashMap<Bytes, Subscribers>>,
    /// How many patterns have subscribers: PUBLISH skips the pattern lock
    /// while it is 0.
    npatterns: AtomicUsize,
    /// `client-output-buffer-limit` for the normal and pubsub classes.
    limits: [Limit; 2],
    /// `notify-keyspace-events` as [`notify`] flags (0: off).
    notify: std::sync::atomic::AtomicU32,
    /// Client-side caching.
    pub tracking: tracking::Tracker,
    /// MONITOR clients.
    pub monitors: monitor::Monitors,
    /// In cluster mode: sends a PUBLISH made here to the other nodes.
    forward: std::sync::OnceLock<Forward>,
}

impl Hub {
    /// Takes what it needs from the configuration (at start and after
    /// CONFIG SET): `notify-keyspace-events`, `client-output-buffer-limit`,
    /// `tracking-table-max-keys`.
    pub fn configure(&self, rt: &crate::server::Runtime) {
        let flags = notify::parse(rt.get("notify-keyspace-events"));
        self.notify.store(flags, Ordering::Relaxed);
        let nums: Vec<u64> = rt
            .get("client-output-buffer-limit")
            .split(' ')
            .filter_map(|w| w.parse().ok())
            .collect();
        self.tracking
            .set_max_keys(rt.size("tracking-table-max-keys"));
        // Groups of (hard, soft, seconds) for normal, replica, pubsub.
        for (limit, group) in self.limits.iter().zip([0, 2]) {
            if let Some(g) = nums.get(group * 3..group * 3 + 3) {
                limit.hard.store(g[0], Ordering::Relaxed);
                limit.soft.store(g[1], Ordering::Relaxed);
                limit.secs.store(g[2], Ordering::Relaxed);
            }
        }
    }

    /// The keyspace notification flags in force (see [`notify`]): a
    /// shard reads them once per write transaction.
    pub fn notify_flags(&self) -> u32 {
        self.notify.load(Ordering::Relaxed)
    }

    fn map(&self, kind: Kind) -> &ChannelMap {
        match kind {
            Kind::Shard => &self.shard_channels,
            _ => &self.channels,
        }
    }

    /// Adds `client` to `name`'s subscribers (the caller knows it is not
    /// there yet).
    pub(crate) fn add(&self, kind: Kind, name: &Bytes, client: &Arc<ClientEntry>) {
        if kind == Kind::Pattern {
            let mut patterns = self.patterns.write();
            let subs = patterns.entry(name.clone()).or_default();
            subs.push(client.clone());
            self.npatterns.store(patterns.len(), Ordering::Release);
        } else {
            self.map(kind)
                .entry(name.clone())
                .or_default()
                .push(client.clone());
        }
    }

    /// Takes the client with `id` off `name`'s subscribers.
    pub(crate) fn remove(&self, kind: Kind, name: &[u8], id: u64) {
        if kind == Kind::Pattern {
            let mut patterns = self.patterns.write();
            if let Some(subs) = patterns.get_mut(name) {
                subs.retain(|c| c.id != id);
                if subs.is_empty() {
                    patterns.remove(name);
                }
            }
            self.npatterns.store(patterns.len(), Ordering::Release);
        } else {
            let map = self.map(kind);
            if let Some(mut subs) = map.get_mut(name) {
                subs.retain(|c| c.id != id);
            }
            map.remove_if(name, |_, subs| subs.is_empty());
        }
    }

    /// Sets where PUBLISHes go beyond this node (cluster mode, once).
    pub fn set_forward(&self, f: Forward) {
        let _ = self.forward.set(f);
    }

    /// PUBLISH (or SPUBLISH with `kind` Shard): delivers `message` to this
    /// node's subscribers (see [`Hub::publish_local`]) and, for PUBLISH in
    /// cluster mode, sends it on to the other nodes. The count is this
    /// node's, as Redis Cluster's is. With `wakes` (a connection's batch),
    /// subscribers are woken when the batch ends; without, at once.
    pub fn publish(
        &self,
        kind: Kind,
        channel: &[u8],
        message: &[u8],
        wakes: Option<&mut Wakes>,
    ) -> usize {
        let n = self.publish_local(kind, channel, message, wakes);
        if kind == Kind::Channel {
            if let Some(forward) = self.forward.get() {
                forward(channel, message);
            }
        }
        n
    }

    /// Delivers `message` to the channel's subscribers here (and, for a
    /// plain channel, every matching pattern's) and returns how many
    /// deliveries it made: a message from another node, or a keyspace
    /// notification (node-local in Redis Cluster too).
    pub fn publish_local(
        &self,
        kind: Kind,
        channel: &[u8],
        message: &[u8],
        mut wakes: Option<&mut Wakes>,
    ) -> usize {
        let mut receivers = 0;
        self.each_audience(kind, channel, |pattern, subs| {
            let frame = match (kind, pattern) {
                (Kind::Shard, _) => encode(&[b"smessage", channel, message]),
                (_, None) => encode(&[b"message", channel, message]),
                (_, Some(p)) => encode(&[b"pmessage", p, channel, message]),
            };
            // The last receiver takes the frame itself: one receiver, the
            // common case, shares it with nobody.
            if let Some((last, others)) = subs.split_last() {
                for client in others {
                    receivers += self.deliver(client, frame.clone(), wakes.as_deref_mut());
                }
                receivers += self.deliver(last, frame, wakes.as_deref_mut());
            }
        });
        receivers
    }

    /// How many deliveries a PUBLISH would make now (inside a transaction,
    /// whose messages go out when it commits).
    pub fn receivers(&self, kind: Kind, channel: &[u8]) -> usize {
        let mut n = 0;
        self.each_audience(kind, channel, |_, subs| n += subs.len());
        n
    }

    /// Calls `f` with the subscribers a message to `channel` reaches: the
    /// channel's own (pattern `None`), then, for a plain channel, each
    /// matching pattern's.
    fn each_audience(
        &self,
        kind: Kind,
        channel: &[u8],
        mut f: impl FnMut(Option<&Bytes>, &[Arc<ClientEntry>]),
    ) {
        if let Some(subs) = self.map(kind).get(channel) {
            f(None, &subs);
        }
        if kind == Kind::Channel && self.npatterns.load(Ordering::Acquire) > 0 {
            for (pattern, subs) in self.patterns.read().iter() {
                if crate::util::glob::string_match(pattern, channel, false) {
                    f(Some(pattern), subs);
                }
            }
        }
    }

    /// Queues `frame` for `client`; 1 when it was queued, 0 when the
    /// client is gone. Disconnects the client if that takes it past its
    /// output buffer limit.
    fn deliver(&self, client: &Arc<ClientEntry>, frame: Bytes, wakes: Option<&mut Wakes>) -> usize {
        let Some(pending) = client.mailbox.queue(Push::Frame(frame)) else {
            return 0;
        };
        match wakes {
            Some(wakes) => wakes.feed(client),
            None => client.mailbox.ready.notify_one(),
        }
        self.check_limit(client, pending);
        1
    }

    /// Redis's output buffer limit check: over the hard limit, or over the
    /// soft limit for longer than its seconds, closes the client. True if
    /// this call closed it.
    fn check_limit(&self, client: &ClientEntry, pending: usize) -> bool {
        let limit = self.limit_of(client);
        let (hard, soft) = (
            limit.hard.load(Ordering::Relaxed),
            limit.soft.load(Ordering::Relaxed),
        );
        let pending = pending as u64;
        let mut over = hard > 0 && pending >= hard;
        let since = &client.mailbox.soft_since;
        if soft > 0 && pending >= soft {
            let now = crate::shard::now_ms() / 1000;
            match since.load(Ordering::Relaxed) {
                0 => since.store(now, Ordering::Relaxed),
                t => over |= now - t > limit.secs.load(Ordering::Relaxed),
            }
        } else if since.load(Ordering::Relaxed) != 0 {
            // Stored only when it changes: this runs on every delivery.
            since.store(0, Ordering::Relaxed);
        }
        over && self.close_over_limit(client, pending)
    }

    /// The client's class's limit: pubsub while it has subscriptions, else
    /// normal.
    fn limit_of(&self, client: &ClientEntry) -> &Limit {
        &self.limits[usize::from(client.mailbox.subscribed())]
    }

    /// Whether replies of `bytes` alone pass the hard output buffer limit
    /// of the client's class.
    pub fn passes_hard_limit(&self, client: &ClientEntry, bytes: u64) -> bool {
        let hard = self.limit_of(client).hard.load(Ordering::Relaxed);
        hard > 0 && counted_reply_bytes(bytes) >= hard
    }

    /// Checks the replies a batch made, `bytes` of them about to be written,
    /// against the client's limit, with its pending pushes. True if the
    /// client is now closed: nothing is written to it.
    pub fn check_replies(&self, client: &ClientEntry, bytes: usize) -> bool {
        // Checked for every write, so that a client back under its soft
        // limit starts its soft time afresh next time.
        let pending = client.mailbox.pending.load(Ordering::Relaxed) as u64;
        let total = pending + counted_reply_bytes(bytes as u64);
        self.check_limit(client, total as usize)
    }

    /// When to check a client's output again while a write to it waits
    /// (it has stopped reading), so that its soft limit's time runs out
    /// even if nothing more is queued for it, as Redis's cron checks it:
    /// when that time runs out if it is over the soft limit, else after a
    /// cron tick (100 ms, as more may have been queued meanwhile). `None`
    /// when its class has no soft limit.
    pub fn soft_recheck(&self, client: &ClientEntry) -> Option<std::time::Duration> {
        let limit = self.limit_of(client);
        if limit.soft.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let tick = std::time::Duration::from_millis(100);
        let since = client.mailbox.soft_since.load(Ordering::Relaxed);
        if since == 0 {
            return Some(tick);
        }
        // Over the limit once more than `secs` whole seconds have passed.
        let due_ms = (since + limit.secs.load(Ordering::Relaxed) + 1) * 1000;
        let left = due_ms.saturating_sub(crate::shard::now_ms());
        Some(tick.min(std::time::Duration::from_millis(left)))
    }

    /// Closes a client for passing its output buffer limit (`pending`
    /// bytes), as Redis does: nothing more is written to it. True if this
    /// call closed it.
    pub fn close_over_limit(&self, client: &ClientEntry, pending: u64) -> bool {
        if client.killed.swap(true, Ordering::AcqRel) {
            return false;
        }
        client.over_limit.store(true, Ordering::Release);
        tracing::warn!(
            client = client.id,
            addr = %client.addr,
            pending,
            "client closed for overcoming of output buffer limits"
        );
        client.kill.notify_one();
        true
    }

    /// Ends the subscriptions to shard channels whose slot this node no
    /// longer serves (a topology change), telling each subscriber.
    pub fn drop_unserved_shard_channels(&self, serves: impl Fn(u16) -> bool) {
        let mut gone: Vec<(u16, Bytes, Subscribers)> = self
            .shard_channels
            .iter()
            .map(|e| (crate::cluster::key_slot(e.key()), e))
            .filter(|(slot, _)| !serves(*slot))
            .map(|(slot, e)| (slot, e.key().clone(), e.value().clone()))
            .collect();
        // In Redis's order: by slot, then by channel name.
        gone.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        for (_, channel, clients) in gone {
            for client in clients {
                subscriptions::drop_shard_channel(self, &client, &channel);
            }
        }
    }

    /// PUBSUB CHANNELS / SHARDCHANNELS: channels with subscribers whose
    /// name matches `pattern` (all without one).
    pub fn channels(&self, kind: Kind, pattern: Option<&[u8]>) -> Vec<Bytes> {
        self.map(kind)
            .iter()
            .filter(|e| !e.value().is_empty())
            .filter(|e| pattern.is_none_or(|p| crate::util::glob::string_match(p, e.key(), false)))
            .map(|e| e.key().clone())
            .collect()
    }

    /// PUBSUB NUMSUB / SHARDNUMSUB: a channel's subscribers.
    pub fn numsub(&self, kind: Kind, channel: &[u8]) -> usize {
        self.map(kind).get(channel).map_or(0, |s| s.len())
    }

    /// PUBSUB NUMPAT: patterns with subscribers.
    pub fn numpat(&self) -> usize {
        self.npatterns.load(Ordering::Acquire)
    }

    /// Channels with subscribers (INFO `pubsub_channels` and the shard
    /// form).
    pub fn channel_count(&self, kind: Kind) -> usize {
        self.map(kind).len()
    }
}

/// The RESP2 array of bulk strings `parts`.
///
/// Encoded into a buffer of exactly its size, so that it becomes a `Bytes`
/// without a second allocation for the shared count (a message is
/// encoded once per PUBLISH and freed on the subscriber's thread).
pub fn encode(parts: &[&[u8]]) -> Bytes {
    // `<tag><len>\r\n`
    let header = |len: usize| 3 + len.checked_ilog10().map_or(1, |d| d as usize + 1);
    let size = header(parts.len())
        + parts
            .iter()
            .map(|p| header(p.len()) + p.len() + 2)
            .sum::<usize>();
    let mut out = crate::protocol::reply::Encoder::with_capacity(size);
    out.array(parts.len());
    for p in parts {
        out.bulk(p);
    }
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(id: u64) -> Arc<ClientEntry> {
        Arc::new(ClientEntry::new(id, String::new(), String::new()))
    }

    fn frame(text: &str) -> Bytes {
        Bytes::copy_from_slice(text.as_bytes())
    }

    /// Messages are framed as RESP2 arrays of bulk strings, with lengths
    /// of one and more digits and empty parts.
    #[test]
    fn messages_encode_as_arrays_of_bulk_strings() {
        let long = "x".repeat(1234);
        assert_eq!(
            encode(&[b"message", b"ch", b""]),
            frame("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$0\r\n\r\n")
        );
        assert_eq!(
            encode(&[b"pmessage", b"c*", b"chan-nel-10", long.as_bytes()]),
            frame(&format!(
                "*4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$11\r\nchan-nel-10\r\n$1234\r\n{long}\r\n"
            ))
        );
    }

    /// Whether `ready` has a wake stored for the client.
    fn woken(c: &ClientEntry) -> bool {
        use std::future::Future;
        let waiting = std::pin::pin!(c.mailbox.ready());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        waiting.poll(&mut cx).is_ready()
    }

    #[test]
    fn a_batch_wakes_each_subscriber_once_when_it_ends() {
        let hub = Hub::default();
        let (a, b) = (client(1), client(2));
        hub.add(Kind::Channel, &frame("ch"), &a);
        hub.add(Kind::Channel, &frame("ch"), &b);
        let mut batch = Wakes::default();
        for _ in 0..3 {
            assert_eq!(hub.publish(Kind::Channel, b"ch", b"m", Some(&mut batch)), 2);
        }
        // Queued, counted, but nobody woken: the batch is still feeding.
        assert!(!woken(&a) && a.mailbox.fed());
        assert_eq!(batch.fed.len(), 2);
        // A second publisher's batch counts as well.
        let mut other = Wakes::default();
        hub.publish(Kind::Channel, b"ch", b"n", Some(&mut other));
        batch.wake();
        assert!(woken(&a) && woken(&b));
        assert!(a.mailbox.fed(), "the other batch still feeds it");
        drop(other);
        assert!(!a.mailbox.fed() && !b.mailbox.fed());
        let mut got = Default::default();
        a.mailbox.take_all(&mut got);
        assert_eq!(got.len(), 4);
        // The same connection's next batch counts again.
        hub.publish(Kind::Channel, b"ch", b"m", Some(&mut batch));
        assert!(a.mailbox.fed());
        batch.wake();
        assert!(!a.mailbox.fed());
    }

    #[test]
    fn a_closed_mailbox_takes_nothing() {
        let hub = Hub::default();
        let a = client(1);
        hub.add(Kind::Channel, &frame("ch"), &a);
        assert_eq!(hub.publish(Kind::Channel, b"ch", b"m", None), 1);
        assert!(woken(&a));
        assert!(a.mailbox.pending.load(Ordering::Relaxed) > 0);
        a.mailbox.close();
        assert_eq!(a.mailbox.pending.load(Ordering::Relaxed), 0);
        let mut got = Default::default();
        a.mailbox.take_all(&mut got);
        assert!(got.is_empty());
        assert_eq!(hub.publish(Kind::Channel, b"ch", b"m", None), 0);
        assert!(!a.mailbox.send(Push::Line(frame("+x\r\n"))));
    }
}

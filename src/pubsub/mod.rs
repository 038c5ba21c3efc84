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
//!   subscriber once, when it ends ([`Wakes`]). A message is framed
//!   into each receiver's mailbox, in its protocol, behind the messages
//!   queued there already, so the connection writes a run of them with one
//!   copy. A big message to several receivers is framed once instead, as
//!   a RESP2 array whose RESP3 form differs only in the first byte (`>`
//!   for `*`), and shared by reference count.
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
    /// A run of Pub/Sub messages already framed in the client's protocol
    /// (see [`Mailbox::queue_message`]).
    Messages(BytesMut),
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
            Push::Messages(run) => out.put_slice(run),
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
            Push::Messages(run) => run.len(),
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
    /// The connection has ended: nothing is queued any more. Set under
    /// the inbox's lock, so queueing checks it there; a batch holding
    /// messages for the client reads it without.
    closed: std::sync::atomic::AtomicBool,
}

/// The queue of a [`Mailbox`].
#[derive(Debug, Default)]
struct Inbox {
    pushes: std::collections::VecDeque<Push>,
    /// Messages queued after every push in `pushes`, framed in the
    /// client's protocol.
    messages: BytesMut,
    /// The client's protocol is RESP3 (messages are framed as pushes).
    resp3: bool,
}

impl Inbox {
    /// Appends `frames`, RESP2 messages starting at `starts`, to the
    /// messages, in the client's protocol.
    fn append_messages(&mut self, frames: &[u8], starts: &[usize]) {
        let base = self.messages.len();
        self.messages.extend_from_slice(frames);
        if self.resp3 {
            for &at in starts {
                self.messages[base + at] = b'>';
            }
        }
    }
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

    /// Wakes the client's connection waiting for a request without
    /// queueing anything: it is to close (see `ClientEntry::close_soon`).
    pub fn wake(&self) {
        self.ready.notify_one();
    }

    /// Queues `push` without waking the client; the bytes now pending for
    /// it, or `None` when it is gone.
    fn queue(&self, push: Push) -> Option<usize> {
        let n = push.size();
        let mut inbox = self.queue.lock();
        if self.closed.load(Ordering::Relaxed) {
            return None;
        }
        if !inbox.messages.is_empty() {
            let run = inbox.messages.split();
            inbox.pushes.push_back(Push::Messages(run));
        }
        inbox.pushes.push_back(push);
        // Under the lock: the connection subtracts it only after taking
        // the push out.
        Some(self.pending.fetch_add(n, Ordering::Relaxed) + n)
    }

    /// Queues the Pub/Sub message `frame` (a RESP2 array) behind the
    /// messages already queued, in the client's protocol, as Redis appends
    /// a message to each receiver's reply buffer: a message costs no
    /// allocation of its own, and a run of them reaches the socket in one
    /// copy. Returns the bytes now pending for the client, or `None` when
    /// it is gone.
    fn queue_message(&self, frame: &[u8]) -> Option<usize> {
        let mut inbox = self.queue.lock();
        if self.closed.load(Ordering::Relaxed) {
            return None;
        }
        inbox.append_messages(frame, &[0]);
        Some(self.pending.fetch_add(frame.len(), Ordering::Relaxed) + frame.len())
    }

    /// Queues `frames`, RESP2 messages starting at `starts`, behind the
    /// messages queued already (a batch held them: see [`Wakes`]), in
    /// the client's protocol.
    ///
    /// A client that has unsubscribed from everything since gets none of
    /// them: its confirmation may be on its way, and a message after it
    /// would read, in RESP2, as the reply to its next command. (Were it
    /// still subscribed, its confirmation, made after this, would follow
    /// them.)
    fn queue_held(&self, frames: &[u8], starts: &[usize]) {
        let mut inbox = self.queue.lock();
        if self.closed.load(Ordering::Relaxed) || !self.subscribed() {
            return;
        }
        inbox.append_messages(frames, starts);
        self.pending.fetch_add(frames.len(), Ordering::Relaxed);
    }

    /// Waits out any batch that is queueing held messages here because it
    /// saw the client still subscribed ([`Mailbox::queue_held`] checks and
    /// queues under this lock). Called once the client has left its last
    /// subscription and before its confirmation goes out: those messages
    /// are then pending, and the connection writes them first. Without it
    /// the connection, finding nothing pending, could write the
    /// confirmation while such a batch was between its check and its
    /// append, and the messages then read, in RESP2, as the replies to the
    /// client's next commands (seen once in CI: PONG answered by a
    /// message).
    fn fence_held(&self) {
        drop(self.queue.lock());
    }

    /// Frames the messages queued from now on for a client of protocol
    /// `resp3` (HELLO switched it): those queued before went in the old
    /// one, as in Redis, whose reply buffer holds them already.
    pub fn set_resp3(&self, resp3: bool) {
        self.queue.lock().resp3 = resp3;
    }

    /// Moves every push queued into `into` (empty), oldest first, and the
    /// messages queued after them into `messages` (empty), whose buffer
    /// the mailbox keeps for the next messages.
    pub fn take_all(&self, into: &mut std::collections::VecDeque<Push>, messages: &mut BytesMut) {
        let mut inbox = self.queue.lock();
        std::mem::swap(&mut inbox.pushes, into);
        std::mem::swap(&mut inbox.messages, messages);
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
        self.closed.store(true, Ordering::Release);
        inbox.pushes.clear();
        inbox.messages = BytesMut::new();
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
///
/// The batch also holds the messages for its first few subscribers and
/// queues them when it ends: a run of PUBLISHes to one subscriber then
/// takes its mailbox's lock once, not once per message, and the
/// subscriber, not woken before the batch ends, misses nothing it would
/// have written sooner. A connection ends the batch before any command
/// other than PUBLISH, so what it does next comes after its messages.
#[derive(Debug)]
pub struct Wakes {
    id: u64,
    fed: Vec<Arc<ClientEntry>>,
    /// The client whose batch this is (0: a shard's), whose messages to
    /// itself are queued at once: they precede its PUBLISH's reply.
    me: u64,
    /// Messages held, by subscriber; entries past `nheld` are spare
    /// buffers for the next batch.
    held: Vec<Held>,
    nheld: usize,
}

/// Messages a batch holds for one subscriber.
#[derive(Debug, Default)]
struct Held {
    client: Option<Arc<ClientEntry>>,
    /// RESP2 messages, in publish order.
    frames: BytesMut,
    /// Where each message starts in `frames` (its `*`, which RESP3 makes
    /// `>`).
    starts: Vec<usize>,
}

/// Subscribers a batch holds messages for; messages to others are queued
/// at once.
const HELD_CLIENTS: usize = 4;

impl Default for Wakes {
    fn default() -> Self {
        Wakes::of(0)
    }
}

impl Wakes {
    /// The batches of client `me`.
    pub fn of(me: u64) -> Wakes {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Wakes {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            fed: Vec::new(),
            me,
            held: Vec::new(),
            nheld: 0,
        }
    }

    /// Holds the message `frame` (RESP2) for `client` until the batch ends;
    /// the bytes it holds for the client now, or `None` when it holds
    /// nothing for it (the client itself, or too many subscribers).
    fn hold(&mut self, client: &Arc<ClientEntry>, frame: &[u8]) -> Option<usize> {
        if client.id == self.me {
            return None;
        }
        let active = &self.held[..self.nheld];
        let i = match active
            .iter()
            .position(|h| h.client.as_ref().is_some_and(|c| Arc::ptr_eq(c, client)))
        {
            Some(i) => i,
            None if self.nheld < HELD_CLIENTS => {
                if self.nheld == self.held.len() {
                    self.held.push(Held::default());
                }
                self.held[self.nheld].client = Some(client.clone());
                self.nheld += 1;
                self.feed(client);
                self.nheld - 1
            }
            None => return None,
        };
        let held = &mut self.held[i];
        held.starts.push(held.frames.len());
        held.frames.extend_from_slice(frame);
        Some(held.frames.len())
    }

    /// Queues the messages held.
    fn queue_held(&mut self) {
        for held in &mut self.held[..self.nheld] {
            if let Some(client) = held.client.take() {
                client.mailbox.queue_held(&held.frames, &held.starts);
            }
            held.frames.clear();
            held.starts.clear();
            // Every publishing connection keeps these: only small ones.
            if held.frames.capacity() > 16 * 1024 {
                held.frames = BytesMut::new();
            }
        }
        self.nheld = 0;
    }

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

    /// Ends the batch: queues the messages it held and wakes every
    /// subscriber it fed.
    pub fn wake(&mut self) {
        if self.nheld > 0 {
            self.queue_held();
        }
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
            let (all, n): ([&[u8]; 4], usize) = match (kind, pattern) {
                (Kind::Shard, _) => ([b"smessage", channel, message, b""], 3),
                (_, None) => ([b"message", channel, message, b""], 3),
                (_, Some(p)) => ([b"pmessage", p, channel, message], 4),
            };
            let parts = &all[..n];
            if subs.len() == 1 || framed_len(parts) < SHARED_FRAME {
                // Framed once, copied to each receiver.
                SCRATCH.with_borrow_mut(|frame| {
                    frame.clear();
                    crate::protocol::reply::bulk_array(frame, b'*', parts);
                    for client in subs {
                        receivers += self.deliver(client, frame, wakes.as_deref_mut());
                    }
                    if frame.capacity() > 64 * 1024 {
                        *frame = BytesMut::new();
                    }
                });
                return;
            }
            // A big message to several receivers is framed once and
            // shared; the last receiver takes the frame itself.
            let frame = encode(parts);
            if let Some((last, others)) = subs.split_last() {
                for client in others {
                    let pending = client.mailbox.queue(Push::Frame(frame.clone()));
                    receivers += self.delivered(client, pending, wakes.as_deref_mut());
                }
                let pending = last.mailbox.queue(Push::Frame(frame));
                receivers += self.delivered(last, pending, wakes.as_deref_mut());
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

    /// Queues the message `frame` (RESP2) for `client`, or has the batch
    /// hold it; 1 when it was queued, 0 when the client is gone.
    /// Disconnects the client if that takes it past its output buffer
    /// limit.
    fn deliver(
        &self,
        client: &Arc<ClientEntry>,
        frame: &[u8],
        mut wakes: Option<&mut Wakes>,
    ) -> usize {
        if let Some(batch) = wakes.as_deref_mut() {
            if client.mailbox.closed.load(Ordering::Acquire) {
                return 0;
            }
            if let Some(held) = batch.hold(client, frame) {
                let pending = client.mailbox.pending.load(Ordering::Relaxed) + held;
                self.check_limit(client, pending);
                return 1;
            }
        }
        self.delivered(client, client.mailbox.queue_message(frame), wakes)
    }

    /// After a message was queued for `client` (`pending`: the bytes now
    /// pending for it, `None` if it is gone): 1 when it was queued, 0
    /// when not. Disconnects the client if that takes it past its output
    /// buffer limit.
    fn delivered(
        &self,
        client: &Arc<ClientEntry>,
        pending: Option<usize>,
        wakes: Option<&mut Wakes>,
    ) -> usize {
        let Some(pending) = pending else {
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
        client.close_soon();
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
    let mut out = BytesMut::with_capacity(framed_len(parts));
    crate::protocol::reply::bulk_array(&mut out, b'*', parts);
    out.freeze()
}

/// The bytes of [`encode`]'s frame.
fn framed_len(parts: &[&[u8]]) -> usize {
    // `<tag><len>\r\n`
    let header = |len: usize| 3 + len.checked_ilog10().map_or(1, |d| d as usize + 1);
    header(parts.len())
        + parts
            .iter()
            .map(|p| header(p.len()) + p.len() + 2)
            .sum::<usize>()
}

/// Messages to several receivers framed at this size or more are shared
/// by reference; smaller ones are copied into each receiver's mailbox
/// (see [`Mailbox::queue_message`]).
const SHARED_FRAME: usize = 1024;

thread_local! {
    /// Where a message is framed before it is copied to its receivers.
    static SCRATCH: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(id: u64) -> Arc<ClientEntry> {
        Arc::new(ClientEntry::new(id, String::new(), String::new()))
    }

    /// A client counted as subscribed to one channel (the registry is
    /// filled by each test).
    fn subscriber(id: u64) -> Arc<ClientEntry> {
        let c = client(id);
        c.mailbox.counts[Kind::Channel as usize].store(1, Ordering::Relaxed);
        c
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
        let (a, b) = (subscriber(1), subscriber(2));
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
        let (mut got, mut messages) = Default::default();
        a.mailbox.take_all(&mut got, &mut messages);
        assert!(got.is_empty());
        let one = "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n";
        let other = one.replace("$1\r\nm", "$1\r\nn");
        assert_eq!(messages, format!("{one}{one}{one}{other}").as_bytes());
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
        let (mut got, mut messages) = Default::default();
        a.mailbox.take_all(&mut got, &mut messages);
        assert!(got.is_empty() && messages.is_empty());
        assert_eq!(hub.publish(Kind::Channel, b"ch", b"m", None), 0);
        assert!(!a.mailbox.send(Push::Line(frame("+x\r\n"))));
    }

    /// Small messages are framed into the receiver's mailbox in its
    /// protocol at the time; other pushes keep their place among them;
    /// a big message to several receivers is one shared frame.
    #[test]
    fn messages_are_framed_in_the_receivers_protocol_in_order() {
        let hub = Hub::default();
        let (a, b) = (client(1), client(2));
        hub.add(Kind::Channel, &frame("ch"), &a);
        hub.add(Kind::Pattern, &frame("c*"), &a);
        hub.add(Kind::Channel, &frame("ch"), &b);
        assert_eq!(hub.publish(Kind::Channel, b"ch", b"1", None), 3);
        a.mailbox.send(Push::Line(frame("+line\r\n")));
        a.mailbox.set_resp3(true);
        assert_eq!(hub.publish(Kind::Channel, b"ch", b"2", None), 3);
        let big = "x".repeat(SHARED_FRAME);
        assert_eq!(hub.publish(Kind::Channel, b"ch", big.as_bytes(), None), 3);
        let (mut got, mut messages) = Default::default();
        a.mailbox.take_all(&mut got, &mut messages);
        let mut out = BytesMut::new();
        for push in &got {
            push.encode(&mut out, true, true);
        }
        out.extend_from_slice(&messages);
        let m =
            |tag: char, body: &str| format!("{tag}3\r\n$7\r\nmessage\r\n$2\r\nch\r\n{body}\r\n");
        let pm = |tag: char, body: &str| {
            format!("{tag}4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nch\r\n{body}\r\n")
        };
        let big = format!("${}\r\n{big}", big.len());
        let want = [
            m('*', "$1\r\n1"),
            pm('*', "$1\r\n1"),
            "+line\r\n".to_string(),
            m('>', "$1\r\n2"),
            pm('>', "$1\r\n2"),
            m('>', &big),
            pm('>', &big),
        ]
        .concat();
        assert_eq!(out, want.as_bytes());
        let sizes: usize = got.iter().map(Push::size).sum::<usize>() + messages.len();
        assert_eq!(a.mailbox.pending.load(Ordering::Relaxed), sizes);
        // The big message went to `a` once (its pattern's only receiver:
        // framed in place) and to the channel's two receivers as a frame.
        assert!(matches!(got.back(), Some(Push::Frame(_))));
    }

    /// A batch holds its messages until it ends, except those to its own
    /// client (which precede its PUBLISH's reply); a client that has
    /// unsubscribed from everything by then gets none of them.
    #[test]
    fn a_batch_holds_its_messages_until_it_ends() {
        let hub = Hub::default();
        let (me, a, b) = (subscriber(1), subscriber(2), subscriber(3));
        for c in [&me, &a, &b] {
            hub.add(Kind::Channel, &frame("ch"), c);
        }
        let take = |c: &ClientEntry| {
            let (mut got, mut messages): (std::collections::VecDeque<Push>, BytesMut) =
                Default::default();
            c.mailbox.take_all(&mut got, &mut messages);
            assert!(got.is_empty());
            messages
        };
        let mut batch = Wakes::of(me.id);
        b.mailbox.set_resp3(true);
        for m in ["1", "2"] {
            assert_eq!(
                hub.publish(Kind::Channel, b"ch", m.as_bytes(), Some(&mut batch)),
                3
            );
        }
        let m = |tag: char, body: &str| {
            format!("{tag}3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\n{body}\r\n")
        };
        let both = |tag| format!("{}{}", m(tag, "1"), m(tag, "2"));
        assert_eq!(take(&me), both('*').as_bytes());
        assert!(take(&a).is_empty() && take(&b).is_empty());
        assert!(a.mailbox.pending.load(Ordering::Relaxed) == 0 && a.mailbox.fed());
        // `a` leaves every channel before the batch ends.
        a.mailbox.counts[Kind::Channel as usize].store(0, Ordering::Relaxed);
        batch.wake();
        assert!(take(&a).is_empty());
        assert_eq!(a.mailbox.pending.load(Ordering::Relaxed), 0);
        assert_eq!(take(&b), both('>').as_bytes());
        assert_eq!(b.mailbox.pending.load(Ordering::Relaxed), both('>').len());
        assert!(woken(&b) && !b.mailbox.fed());
    }
}

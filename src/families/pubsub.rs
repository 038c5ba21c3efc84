//! Pub/Sub commands: (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PUBLISH, SPUBLISH
//! and PUBSUB. The registry and delivery are in `crate::pubsub`; this
//! file parses and replies.

use bytes::Bytes;

use crate::command::Args;
use crate::net::session::{Action, Session, ANY_SHARD};
use crate::protocol::Reply;
use crate::pubsub::Kind;

/// SUBSCRIBE channel [channel ...]
pub fn subscribe(s: &mut Session, a: Args) -> Action {
    Reply::Frames(s.subs.subscribe(Kind::Channel, a.from(1))).into()
}

/// PSUBSCRIBE pattern [pattern ...]
pub fn psubscribe(s: &mut Session, a: Args) -> Action {
    Reply::Frames(s.subs.subscribe(Kind::Pattern, a.from(1))).into()
}

/// SSUBSCRIBE shardchannel [shardchannel ...]
pub fn ssubscribe(s: &mut Session, a: Args) -> Action {
    Reply::Frames(s.subs.subscribe(Kind::Shard, a.from(1))).into()
}

/// UNSUBSCRIBE [channel ...]
pub fn unsubscribe(s: &mut Session, a: Args) -> Action {
    Reply::Frames(s.subs.unsubscribe(Kind::Channel, a.from(1))).into()
}

/// PUNSUBSCRIBE [pattern ...]
pub fn punsubscribe(s: &mut Session, a: Args) -> Action {
    Reply::Frames(s.subs.unsubscribe(Kind::Pattern, a.from(1))).into()
}

/// SUNSUBSCRIBE [shardchannel ...]
pub fn sunsubscribe(s: &mut Session, a: Args) -> Action {
    Reply::Frames(s.subs.unsubscribe(Kind::Shard, a.from(1))).into()
}

/// PUBLISH channel message
pub fn publish(s: &mut Session, a: Args) -> Action {
    publish_to(s, Kind::Channel, a)
}

/// SPUBLISH shardchannel message
pub fn spublish(s: &mut Session, a: Args) -> Action {
    publish_to(s, Kind::Shard, a)
}

/// Delivers now, once the client's earlier commands have their replies (a
/// subscriber told of a change can read it): at once when they have. Inside EXEC or a script the
/// message waits for the unit to commit, and the reply counts the
/// receivers at the time the command ran, as Redis's does.
fn publish_to(s: &mut Session, kind: Kind, a: Args) -> Action {
    let hub = s.server.pubsub.clone();
    let (channel, message) = (a.get(1).clone(), a.get(2).clone());
    if s.in_exec {
        return Action::Write {
            shard: ANY_SHARD,
            f: Box::new(move |w| {
                let n = hub.receivers(kind, &channel);
                w.publish(kind == Kind::Shard, channel, message);
                Ok(Reply::Int(n as i64))
            }),
        };
    }
    // Subscribers are woken when the client's batch of commands ends.
    let wakes = Some(&mut s.wakes);
    if s.bus_link {
        return Reply::Int(hub.publish_local(kind, &channel, &message, wakes) as i64).into();
    }
    if s.settled {
        return Reply::Int(hub.publish(kind, &channel, &message, wakes) as i64).into();
    }
    // It waits for the client's earlier commands: the subscribers this
    // batch fed before it are not kept waiting too.
    s.wakes.wake();
    Action::Job(Box::pin(async move {
        Reply::Int(hub.publish(kind, &channel, &message, None) as i64)
    }))
}

/// PUBSUB CHANNELS|NUMSUB|NUMPAT|SHARDCHANNELS|SHARDNUMSUB|HELP
pub fn pubsub(s: &mut Session, a: Args) -> Action {
    let hub = &s.server.pubsub;
    let sub = a.get(1).to_ascii_lowercase();
    match &sub[..] {
        b"channels" | b"shardchannels" => {
            let kind = if sub == b"channels" {
                Kind::Channel
            } else {
                Kind::Shard
            };
            // One optional pattern (the row allows more: Redis then
            // answers the subcommand's arity error itself).
            if a.len() > 3 {
                return super::subcommand_syntax(&a).into();
            }
            let pattern = (a.len() == 3).then(|| &a.get(2)[..]);
            Reply::Array(
                hub.channels(kind, pattern)
                    .into_iter()
                    .map(Reply::Bulk)
                    .collect(),
            )
            .into()
        }
        b"numsub" | b"shardnumsub" => {
            let kind = if sub == b"numsub" {
                Kind::Channel
            } else {
                Kind::Shard
            };
            let mut out = Vec::with_capacity((a.len() - 2) * 2);
            for ch in a.from(2) {
                out.push(Reply::Bulk(ch.clone()));
                out.push(Reply::Int(hub.numsub(kind, ch) as i64));
            }
            Reply::Array(out).into()
        }
        b"numpat" => Reply::Int(hub.numpat() as i64).into(),
        _ => super::help_reply(PUBSUB_HELP).into(),
    }
}

/// PUBSUB HELP, as Redis 7.0 words it.
const PUBSUB_HELP: &[&str] = &[
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "SHARDCHANNELS [<pattern>]",
    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
    "SHARDNUMSUB [<shardchannel> ...]",
    "    Return the number of subscribers for the specified shard level channel(s)",
    "HELP",
    "    Prints this help.",
];

/// PING while subscribed in RESP2: the reply is a `pong` message, as
/// Redis sends it there.
pub fn subscribed_pong(message: Option<&Bytes>) -> Reply {
    Reply::Array(vec![
        Reply::Bulk(Bytes::from_static(b"pong")),
        Reply::Bulk(message.cloned().unwrap_or_default()),
    ])
}

/// MONITOR: from now on the client receives a line for every command the
/// server runs. Sent again, it is ignored without a reply, as in Redis.
pub fn monitor(s: &mut Session, _a: Args) -> Action {
    if s.monitor {
        return Action::Silent;
    }
    if s.in_exec {
        return Reply::err("MONITOR isn't allowed for DENY BLOCKING client").into();
    }
    s.server.pubsub.monitors.add(s.entry.clone());
    s.monitor = true;
    Reply::Ok.into()
}

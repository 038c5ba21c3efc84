//! Client-side caching commands: CLIENT TRACKING, CACHING, GETREDIR and
//! TRACKINGINFO, and what a connection does for a tracking client around
//! each command. The table of tracked keys is `crate::pubsub::tracking`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::command::args::{self, error, is, Args, SYNTAX};
use crate::command::flag;
use crate::command::CommandSpec;
use crate::net::session::{Action, Session};
use crate::protocol::Reply;
use crate::pubsub::tracking::{check_prefixes, Tracked};

/// CLIENT TRACKING ON|OFF [REDIRECT id] [BCAST] [PREFIX p ...] [OPTIN]
/// [OPTOUT] [NOLOOP], checked in Redis's order with its error texts.
pub fn tracking(s: &mut Session, a: &Args) -> Action {
    let (mut redirect, mut bcast, mut optin, mut optout, mut noloop) =
        (None, false, false, false, false);
    let mut prefixes: Vec<Bytes> = Vec::new();
    let rest = a.from(3);
    let mut i = 0;
    while i < rest.len() {
        let more = i + 1 < rest.len();
        let opt = &rest[i];
        if is(opt, "redirect") && more {
            i += 1;
            if redirect.is_some() {
                return Reply::err("A client can only redirect to a single other client").into();
            }
            let id = match args::int(&rest[i]) {
                Ok(id) => id,
                Err(e) => return e.into(),
            };
            let target = u64::try_from(id)
                .ok()
                .and_then(|id| s.server.clients.get(&id).map(|e| e.value().clone()));
            match target {
                Some(t) => redirect = Some((t.id, t)),
                None => {
                    return Reply::err("The client ID you want redirect to does not exist").into()
                }
            }
        } else if is(opt, "bcast") {
            bcast = true;
        } else if is(opt, "optin") {
            optin = true;
        } else if is(opt, "optout") {
            optout = true;
        } else if is(opt, "noloop") {
            noloop = true;
        } else if is(opt, "prefix") && more {
            i += 1;
            prefixes.push(rest[i].clone());
        } else {
            return error(SYNTAX).into();
        }
        i += 1;
    }
    let hub = s.server.pubsub.clone();
    let id = s.entry.id;
    if is(a.get(2), "off") {
        hub.tracking.disable(id);
        s.tracking = None;
        return Reply::Ok.into();
    }
    if !is(a.get(2), "on") {
        return error(SYNTAX).into();
    }
    if !bcast && !prefixes.is_empty() {
        return Reply::err("PREFIX option requires BCAST mode to be enabled").into();
    }
    let old = s.tracking.clone();
    if old.as_ref().is_some_and(|t| t.bcast != bcast) {
        return Reply::err("You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.").into();
    }
    if bcast && (optin || optout) {
        return Reply::err("OPTIN and OPTOUT are not compatible with BCAST").into();
    }
    if optin && optout {
        return Reply::err("You can't specify both OPTIN mode and OPTOUT mode").into();
    }
    if old
        .as_ref()
        .is_some_and(|t| (optin && t.optout) || (optout && t.optin))
    {
        return Reply::err("You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.").into();
    }
    let existing = old.as_ref().map(|t| t.prefixes.clone()).unwrap_or_default();
    if bcast {
        if let Err(e) = check_prefixes(&prefixes, &existing) {
            return Reply::err(e).into();
        }
    }
    // Prefixes add up over repeated ONs, as in Redis.
    let mut all = existing;
    all.extend(prefixes);
    all.sort();
    all.dedup();
    // BCAST without prefixes covers every key: the empty prefix, which
    // TRACKINGINFO lists.
    if bcast && all.is_empty() {
        all.push(Bytes::new());
    }
    let t = Arc::new(Tracked {
        entry: s.entry.clone(),
        redirect,
        bcast,
        prefixes: all,
        optin,
        optout,
        noloop,
        broken: AtomicBool::new(false),
    });
    hub.tracking.enable(t.clone());
    s.tracking = Some(t);
    s.caching = false;
    // Writes already running when tracking started do not collect the
    // keys they change: wait until every shard has finished its current
    // transaction, so no change this client may read goes untold. Queued
    // in a transaction, the wait is a coordinated plan over every shard,
    // which EXEC runs inside its own hold of the shards (a job waiting on
    // the shards waited there for the transaction itself, which never
    // finished).
    let shards = s.server.shards.clone();
    if s.in_exec {
        let ids = (0..shards.len()).collect();
        return super::coordinated(ids, |_| async { Ok(Ok(Reply::Ok)) });
    }
    Action::Job(Box::pin(async move {
        let waits: Vec<_> = (0..shards.len())
            .map(|i| shards.submit(i, Box::new(|_| Ok(Reply::Ok))))
            .collect();
        for w in waits {
            let _ = w.await;
        }
        Reply::Ok
    }))
}

/// CLIENT CACHING YES|NO
pub fn caching(s: &mut Session, a: &Args) -> Action {
    let Some(t) = s.tracking.clone() else {
        return Reply::err("CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled").into();
    };
    let v = a.get(2);
    if is(v, "yes") {
        if !t.optin {
            return Reply::err(
                "CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
            )
            .into();
        }
    } else if is(v, "no") {
        if !t.optout {
            return Reply::err(
                "CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
            )
            .into();
        }
    } else {
        return error(SYNTAX).into();
    }
    s.caching = true;
    Reply::Ok.into()
}

/// CLIENT GETREDIR: the REDIRECT target, 0 without one, -1 when not
/// tracking.
pub fn getredir(s: &Session) -> Action {
    let id = match &s.tracking {
        None => -1,
        Some(t) => t.redirect.as_ref().map_or(0, |(id, _)| *id as i64),
    };
    Reply::Int(id).into()
}

/// CLIENT TRACKINGINFO
pub fn trackinginfo(s: &Session) -> Action {
    let status = |w: &'static str| Reply::Bulk(Bytes::from_static(w.as_bytes()));
    let mut flags = Vec::new();
    match &s.tracking {
        None => flags.push(status("off")),
        Some(t) => {
            flags.push(status("on"));
            if t.bcast {
                flags.push(status("bcast"));
            }
            if t.optin {
                flags.push(status("optin"));
                if s.caching {
                    flags.push(status("caching-yes"));
                }
            }
            if t.optout {
                flags.push(status("optout"));
                if s.caching {
                    flags.push(status("caching-no"));
                }
            }
            if t.noloop {
                flags.push(status("noloop"));
            }
            if t.broken.load(Ordering::Acquire) {
                flags.push(status("broken_redirect"));
            }
        }
    }
    let (redirect, prefixes) = match &s.tracking {
        None => (-1, Vec::new()),
        Some(t) => (
            t.redirect.as_ref().map_or(0, |(id, _)| *id as i64),
            t.prefixes.iter().cloned().map(Reply::Bulk).collect(),
        ),
    };
    Reply::Map(vec![
        (status("flags"), Reply::Set(flags)),
        (status("redirect"), Reply::Int(redirect)),
        (status("prefixes"), Reply::Array(prefixes)),
    ])
    .into()
}

/// Before a command runs: a read-only command of a client tracking in the
/// default mode records its keys (unless OPTIN without CACHING YES, or
/// OPTOUT with CACHING NO). Before the read, so that no write can slip
/// between the read and the tracking. Inside EXEC, each queued read-only
/// command does so where it runs in the unit (see `read_in_unit`).
pub fn before_command(s: &Session, spec: &'static CommandSpec, args: &Args) {
    if spec.name == "exec" {
        return;
    }
    let keys = reads(s, spec, args);
    s.server.pubsub.tracking.remember_all(s.entry.id, &keys);
}

/// The keys a command of the client makes it track (see
/// [`before_command`]).
pub fn reads(s: &Session, spec: &'static CommandSpec, args: &Args) -> Vec<Bytes> {
    if !remembers_reads(s) {
        return Vec::new();
    }
    let spec = crate::command::call_spec(spec, args).unwrap_or(spec);
    // A read-only script's keys are tracked only once it reads (see
    // `script_keys`).
    if !spec.has(flag::READONLY) || READ_ONLY_SCRIPTS.contains(&spec.name) {
        return Vec::new();
    }
    spec.key_positions(args.all())
        .into_iter()
        .map(|pos| args.get(pos).clone())
        .collect()
}

/// A read-only command queued in EXEC, which makes the client track `keys`
/// once it has run, at its place in the unit: a change an earlier command
/// of the unit made to one of them is not sent to the client, a change a
/// later one makes is, as in Redis (see `storage::tables::Touch::Read`).
pub fn read_in_unit(s: &Session, keys: Vec<Bytes>, action: Action) -> Action {
    if keys.is_empty() {
        return action;
    }
    let (id, server) = (s.entry.id, s.server.clone());
    // Where the reader cannot note the keys, they are tracked at once.
    let track = move |r: Option<&dyn crate::storage::KvRead>| {
        if !r.is_some_and(|r| r.track_read(id, &keys)) {
            server.pubsub.tracking.remember_all(id, &keys);
        }
    };
    match action {
        Action::Read { shard, f } => Action::Read {
            shard,
            f: Box::new(move |r, s| {
                let out = f(r, s)?;
                track(Some(r));
                Ok(out)
            }),
        },
        Action::ReadMany { ids, f } => Action::ReadMany {
            ids,
            f: Box::new(move |rs| {
                let out = f(rs);
                track(rs.first().copied());
                out
            }),
        },
        // Anything else (a refusal) is tracked from the start of the unit.
        other => {
            track(None);
            other
        }
    }
}

/// The script commands flagged read-only, whose keys the reads inside
/// them track.
const READ_ONLY_SCRIPTS: [&str; 3] = ["eval_ro", "evalsha_ro", "fcall_ro"];

/// Whether the client's read-only commands make it track their keys now:
/// it tracks in the default mode, and not OPTIN without CACHING YES nor
/// OPTOUT with CACHING NO.
fn remembers_reads(s: &Session) -> bool {
    s.tracking
        .as_ref()
        .is_some_and(|t| !(t.bcast || (t.optin && !s.caching) || (t.optout && s.caching)))
}

/// The keys a script declaring `keys` makes its caller track, if any: as
/// in Redis, a script (EVAL, FCALL and their read-only forms) tracks its
/// caller's declared keys once it calls a read-only command, and tracks
/// nothing if it never reads.
pub fn script_keys(s: &Session, keys: &[Bytes]) -> Option<Vec<Bytes>> {
    remembers_reads(s).then(|| keys.to_vec())
}

/// After a command: CLIENT CACHING covers only the next command (or the
/// whole transaction it precedes); a NOLOOP client's writes carry its id,
/// so it is not told of its own changes.
pub fn after_command(s: &mut Session, spec: &'static CommandSpec, action: Action) -> Action {
    if spec.name != "client" && s.multi.is_none() {
        s.caching = false;
    }
    noloop(s, action)
}

/// Marks `action`'s writes as the client's own when its tracking is
/// NOLOOP, so they invalidate nothing for it. EXEC marks each queued
/// command this way: a unit that is not one write on one shard (it spans
/// shards, or holds a command such as DEBUG SLEEP) runs them one by one.
pub fn noloop(s: &Session, action: Action) -> Action {
    let Some(t) = s.tracking.as_ref().filter(|t| t.noloop) else {
        return action;
    };
    let id = t.entry.id;
    let as_writer = move |f: crate::shard::WriteFn| -> crate::shard::WriteFn {
        Box::new(move |w| {
            w.writer = id;
            let out = f(w);
            w.writer = 0;
            out
        })
    };
    match action {
        Action::Write { shard, f } => Action::Write {
            shard,
            f: as_writer(f),
        },
        // A script run in its shard (the usual case) writes as its caller.
        Action::Script {
            shard,
            f,
            fell_back,
            slow,
        } => Action::Script {
            shard,
            f: as_writer(f),
            fell_back,
            slow,
        },
        other => other,
    }
}

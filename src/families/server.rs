//! Connection and server commands: PING, ECHO, QUIT, RESET, AUTH, HELLO,
//! SELECT, CLIENT, COMMAND, CONFIG, INFO, TIME, LASTSAVE, SHUTDOWN.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::command::args::{self, error, is, Args, SYNTAX};
use crate::command::flag;
use crate::command::{
    docs, lookup, lookup_with_subcommands, subcommands_of, CommandSpec, KeySpec, TABLE,
};
use crate::net::session::{Action, ReplyMode, Session};
use crate::net::unblock::Unblock;
use crate::protocol::Reply;
use crate::pubsub::Kind;
use crate::shard::pause::PauseKind;
use crate::storage::tables::DATABASES;

/// The Redis version cairn answers as (what clients check for features).
pub const REDIS_VERSION: &str = "7.0.15";

/// Redis's wrong-arity reply for a command or `container|subcommand`.
pub(crate) fn arity_error(full_name: &str) -> Action {
    Reply::err(format!(
        "wrong number of arguments for '{full_name}' command"
    ))
    .into()
}

/// Redis's reply for an unknown subcommand of a container command.
pub(crate) fn unknown_subcommand(sub: &[u8], container: &str) -> Action {
    unknown_subcommand_reply(sub, container).into()
}

/// The error of [`unknown_subcommand`], for dispatch, which refuses an
/// unknown subcommand before anything else (even NOAUTH), as Redis does.
pub(crate) fn unknown_subcommand_reply(sub: &[u8], container: &str) -> Reply {
    Reply::err(format!(
        "unknown subcommand '{}'. Try {} HELP.",
        String::from_utf8_lossy(sub),
        container
    ))
}

/// PING [message]
pub fn ping(s: &mut Session, a: Args) -> Action {
    if s.subs.any() && !s.resp3 {
        return match a.len() {
            1 | 2 => super::pubsub::subscribed_pong(a.from(1).first()).into(),
            _ => arity_error("ping"),
        };
    }
    match a.len() {
        1 => Reply::Simple("PONG").into(),
        2 => Reply::Bulk(a.get(1).clone()).into(),
        _ => arity_error("ping"),
    }
}

/// ECHO message
pub fn echo(_s: &mut Session, a: Args) -> Action {
    Reply::Bulk(a.get(1).clone()).into()
}

/// QUIT
pub fn quit(_s: &mut Session, _a: Args) -> Action {
    Action::Close(Some(Reply::Ok))
}

/// RESET
pub fn reset(s: &mut Session, _a: Args) -> Action {
    s.multi = None;
    s.subs.clear();
    if std::mem::take(&mut s.monitor) {
        s.server.pubsub.monitors.remove(s.entry.id);
    }
    if s.tracking.take().is_some() {
        s.server.pubsub.tracking.disable(s.entry.id);
    }
    s.caching = false;
    s.watching = Default::default();
    s.db = 0;
    s.resp3 = false;
    s.reply_mode = ReplyMode::On;
    s.authenticated = s.server.acl.default_is_open();
    s.user = s.server.acl.default_user();
    let mut info = s.entry.info.lock();
    info.user = None;
    info.db = 0;
    info.resp = 2;
    info.name.clear();
    info.no_evict = false;
    info.readonly = false;
    Reply::Simple("RESET").into()
}

/// TIME
pub fn time(_s: &mut Session, _a: Args) -> Action {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Reply::Array(vec![
        Reply::bulk(now.as_secs().to_string()),
        Reply::bulk(now.subsec_micros().to_string()),
    ])
    .into()
}

/// LASTSAVE
pub fn lastsave(s: &mut Session, _a: Args) -> Action {
    Reply::Int(s.server.last_save_time() as i64).into()
}

/// Checks a password against an ACL user (`default` when none is
/// named); on success the connection becomes that user. A failure is
/// logged in the ACL LOG under `command` (AUTH or HELLO as typed).
fn check_auth(
    s: &mut Session,
    command: &[u8],
    user: Option<&[u8]>,
    pass: &[u8],
) -> Result<(), Reply> {
    if user.is_none() && s.server.acl.default_user().user().nopass {
        return Err(Reply::err(
            "AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
        ));
    }
    let name = user.unwrap_or(b"default");
    match s.server.acl.authenticate(name, pass) {
        Some(slot) => {
            s.authenticated = true;
            let is_default = Arc::ptr_eq(&slot, &s.server.acl.default_user());
            s.entry.info.lock().user = (!is_default).then(|| slot.clone());
            s.user = slot;
            Ok(())
        }
        None => {
            crate::acl::check::log_auth_failure(s, command, name);
            Err(Reply::Error(
                "WRONGPASS invalid username-password pair or user is disabled.".into(),
            ))
        }
    }
}

/// AUTH [username] password
pub fn auth(s: &mut Session, a: Args) -> Action {
    let r = match a.len() {
        2 => check_auth(s, &a.get(0).clone(), None, a.get(1)),
        3 => check_auth(
            s,
            &a.get(0).clone(),
            Some(&a.get(1).clone()),
            &a.get(2).clone(),
        ),
        _ => Err(error(SYNTAX)),
    };
    r.map_or_else(Action::Reply, |()| Reply::Ok.into())
}

/// HELLO [protover [AUTH username password] [SETNAME clientname]]
pub fn hello(s: &mut Session, a: Args) -> Action {
    let mut proto = None;
    if a.len() >= 2 {
        match args::int(a.get(1)) {
            Ok(v) if v == 2 || v == 3 => proto = Some(v),
            Ok(_) => {
                return Reply::Error("NOPROTO unsupported protocol version".into()).into();
            }
            Err(_) => {
                return Reply::err("Protocol version is not an integer or out of range").into();
            }
        }
    }
    let mut i = 2;
    let mut name = None;
    let mut creds = None;
    while i < a.len() {
        let more = a.len() - i - 1;
        if is(a.get(i), "auth") && more >= 2 {
            creds = Some((a.get(i + 1).clone(), a.get(i + 2).clone()));
            i += 3;
        } else if is(a.get(i), "setname") && more >= 1 {
            name = Some(a.get(i + 1).clone());
            i += 2;
        } else {
            return Reply::err(format!(
                "Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(a.get(i))
            ))
            .into();
        }
    }
    if let Some((u, p)) = creds {
        if let Err(r) = check_auth(s, &a.get(0).clone(), Some(&u), &p) {
            return r.into();
        }
    }
    if !s.authenticated {
        return Reply::Error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into()).into();
    }
    if let Some(n) = name {
        if let Err(r) = valid_name(&n) {
            return r.into();
        }
        s.entry.info.lock().name = String::from_utf8_lossy(&n).into_owned();
    }
    if let Some(p) = proto {
        s.resp3 = p == 3;
        s.entry.info.lock().resp = p as u8;
    }
    let b = |x: &str| Reply::bulk(x.to_string());
    Reply::Map(vec![
        (b("server"), b("redis")),
        (b("version"), b(REDIS_VERSION)),
        (b("proto"), Reply::Int(if s.resp3 { 3 } else { 2 })),
        (b("id"), Reply::Int(s.entry.id as i64)),
        (b("mode"), b("standalone")),
        (
            b("role"),
            b(if s.server.replication.is_replica() {
                "replica"
            } else {
                "master"
            }),
        ),
        (b("modules"), Reply::Array(Vec::new())),
    ])
    .into()
}

/// SELECT index
pub fn select(s: &mut Session, a: Args) -> Action {
    match a.int(1) {
        // Redis reads the index as a C int first.
        Ok(n) if i32::try_from(n).is_err() => {
            Reply::err("value is out of range, value must between -2147483648 and 2147483647")
                .into()
        }
        Ok(n) if n != 0 && s.server.cluster.is_some() => {
            Reply::err("SELECT is not allowed in cluster mode").into()
        }
        Ok(n) if (0..DATABASES as i64).contains(&n) => {
            s.db = n as u8;
            s.entry.info.lock().db = n as u8;
            Reply::Ok.into()
        }
        Ok(_) => Reply::err("DB index is out of range").into(),
        Err(r) => r.into(),
    }
}

fn valid_name(n: &[u8]) -> Result<(), Reply> {
    if n.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(Reply::err(
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

/// A client's class for CLIENT LIST / KILL TYPE: `master` for the link
/// a replica applies its primary's stream through, `pubsub` while it is
/// subscribed, else `normal` (cairn feeds no replicas).
fn client_class(e: &crate::server::ClientEntry) -> &'static str {
    if e.info.lock().primary {
        "master"
    } else if e.mailbox.subscribed() {
        "pubsub"
    } else {
        "normal"
    }
}

/// One CLIENT LIST / CLIENT INFO line (also an ACL LOG entry's
/// client-info).
///
/// `running` names the command the calling client is running (CLIENT LIST
/// or INFO, also inside a transaction or script, where its last command
/// is EXEC or EVAL): Redis shows that as its own `cmd=`.
pub(crate) fn client_line(
    s: &Session,
    e: &crate::server::ClientEntry,
    running: &'static str,
) -> String {
    let info = e.info.lock().clone();
    let idle = e.activity.idle_secs();
    // In Redis's order: O (MONITOR), M (this replica's primary), P
    // (subscribed), x (MULTI), b
    // (blocked, or held by CLIENT PAUSE), t R B
    // (tracking, broken redirect, BCAST), d (a watched key changed), r
    // (READONLY), e (NO-EVICT).
    let mut flags = String::new();
    let mailbox = &e.mailbox;
    if s.server.pubsub.monitors.contains(e.id) {
        flags.push('O');
    }
    if info.primary {
        flags.push('M');
    }
    if mailbox.subscribed() {
        flags.push('P');
    }
    let multi = e.multi.load(std::sync::atomic::Ordering::Relaxed);
    if multi >= 0 {
        flags.push('x');
    }
    if e.blocked.load(std::sync::atomic::Ordering::Relaxed) {
        flags.push('b');
    }
    let tracking = s.server.pubsub.tracking.get(e.id);
    if let Some(t) = &tracking {
        flags.push('t');
        if t.broken.load(std::sync::atomic::Ordering::Acquire) {
            flags.push('R');
        }
        if t.bcast {
            flags.push('B');
        }
    }
    if info
        .watch_dirty
        .as_ref()
        .is_some_and(|d| d.load(std::sync::atomic::Ordering::Acquire))
    {
        flags.push('d');
    }
    if info.readonly {
        flags.push('r');
    }
    if info.no_evict {
        flags.push('e');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let me = e.id == s.entry.id;
    let omem = mailbox.pending.load(std::sync::atomic::Ordering::Relaxed);
    format!(
        "id={} addr={} laddr={} fd=0 name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem={} tot-mem={} events=r cmd={} user={} redir={} resp={}",
        e.id,
        e.addr,
        e.laddr,
        info.name,
        e.created.elapsed().as_secs(),
        if me { 0 } else { idle },
        flags,
        info.db,
        mailbox.count(Kind::Channel),
        mailbox.count(Kind::Pattern),
        mailbox.count(Kind::Shard),
        multi,
        if me { s.qbuf } else { 0 },
        omem,
        omem,
        if me { running } else { e.activity.last_cmd().unwrap_or("NULL") },
        info.user.as_ref().map_or_else(|| "default".into(), |u| u.name_str()),
        tracking.map_or(-1, |t| t.redirect.as_ref().map_or(0, |(id, _)| *id as i64)),
        info.resp,
    )
}

/// CLIENT HELP: Redis 7.0.15's lines (cairn implements every subcommand).
const CLIENT_HELP: &[&str] = &[
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CACHING (YES|NO)",
    "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
    "GETREDIR",
    "    Return the client ID we are redirecting to when tracking is enabled.",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are:",
    "    * ADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Kill connections by type.",
    "    * USER <username>",
    "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)",
    "      Skip killing current connection (default: yes).",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "UNPAUSE",
    "    Stop the current client pause, resuming traffic.",
    "PAUSE <timeout> [WRITE|ALL]",
    "    Suspend all, or just write, clients for <timeout> milliseconds.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client.",
    "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
    "         [OPTIN] [OPTOUT] [NOLOOP]",
    "    Control server assisted client side caching.",
    "TRACKINGINFO",
    "    Report tracking status for the current connection.",
    "NO-EVICT (ON|OFF)",
    "    Protect current client connection from eviction.",
    "HELP",
    "    Prints this help.",
];

/// CLIENT subcommand [args]
pub fn client(s: &mut Session, a: Args) -> Action {
    let sub = a.get(1).to_ascii_lowercase();
    let sub = String::from_utf8_lossy(&sub).into_owned();
    // Dispatch has refused unknown subcommands and wrong argument counts
    // (the arities of `command::SUBCOMMANDS`).
    match sub.as_str() {
        "id" => Reply::Int(s.entry.id as i64).into(),
        "getname" => {
            let name = s.entry.info.lock().name.clone();
            if name.is_empty() {
                Reply::Nil.into()
            } else {
                Reply::bulk(name).into()
            }
        }
        "setname" => match valid_name(a.get(2)) {
            Ok(()) => {
                let name = String::from_utf8_lossy(a.get(2)).into_owned();
                s.bus_link = s.server.cluster.is_some()
                    && name.starts_with(crate::cluster::bus::LINK_NAME_PREFIX);
                s.entry.info.lock().name = name;
                Reply::Ok.into()
            }
            Err(r) => r.into(),
        },
        "info" => Reply::Verbatim(client_line(s, &s.entry, "client|info") + "\n").into(),
        "list" => {
            let mut ids: Option<Vec<u64>> = None;
            let mut class: Option<String> = None;
            let rest = a.from(2);
            if !rest.is_empty() {
                if is(&rest[0], "id") && rest.len() > 1 {
                    let mut v = Vec::new();
                    for x in &rest[1..] {
                        match args::int(x) {
                            Ok(i) if i > 0 => v.push(i as u64),
                            _ => return Reply::err("Invalid client ID").into(),
                        }
                    }
                    ids = Some(v);
                } else if is(&rest[0], "type") && rest.len() == 2 {
                    let t = rest[1].to_ascii_lowercase();
                    if !matches!(&t[..], b"normal" | b"master" | b"replica" | b"pubsub") {
                        return Reply::err(format!(
                            "Unknown client type '{}'",
                            String::from_utf8_lossy(&rest[1])
                        ))
                        .into();
                    }
                    class = Some(String::from_utf8_lossy(&t).into_owned());
                } else {
                    return error(SYNTAX).into();
                }
            }
            let mut entries: Vec<_> = s.server.clients.iter().map(|e| e.value().clone()).collect();
            entries.sort_by_key(|e| e.id);
            let mut out = String::new();
            for e in entries {
                if ids.as_ref().is_none_or(|v| v.contains(&e.id))
                    && class.as_deref().is_none_or(|c| c == client_class(&e))
                {
                    out.push_str(&client_line(s, &e, "client|list"));
                    out.push('\n');
                }
            }
            Reply::Verbatim(out).into()
        }
        "kill" => client_kill(s, &a),
        "pause" => client_pause(s, &a),
        "unpause" => {
            s.server.shards.pause.unpause();
            Reply::Ok.into()
        }
        "unblock" => client_unblock(s, &a),
        "no-evict" => {
            let v = a.get(2);
            if is(v, "on") || is(v, "off") {
                s.entry.info.lock().no_evict = is(v, "on");
                Reply::Ok.into()
            } else {
                error(SYNTAX).into()
            }
        }
        "reply" => {
            let v = a.get(2);
            if is(v, "on") {
                s.reply_mode = ReplyMode::On;
                Reply::Ok.into()
            } else if is(v, "off") {
                s.reply_mode = ReplyMode::Off;
                Action::Silent
            } else if is(v, "skip") {
                s.reply_mode = ReplyMode::Skip;
                Action::Silent
            } else {
                error(SYNTAX).into()
            }
        }
        "tracking" => super::tracking::tracking(s, &a),
        "caching" => super::tracking::caching(s, &a),
        "getredir" => super::tracking::getredir(s),
        "trackinginfo" => super::tracking::trackinginfo(s),
        "help" => super::help_reply(CLIENT_HELP).into(),
        _ => unknown_subcommand(a.get(1), "CLIENT"),
    }
}

/// CLIENT PAUSE timeout [WRITE|ALL]: holds every client's commands (or
/// those that may write) for `timeout` milliseconds; see `shard::pause`.
fn client_pause(s: &Session, a: &Args) -> Action {
    if a.len() > 4 {
        return super::subcommand_syntax(a).into();
    }
    let Some(ms) = crate::util::num::parse_i64(a.get(2)) else {
        return Reply::err("timeout is not an integer or out of range").into();
    };
    if ms < 0 {
        return Reply::err("timeout is negative").into();
    }
    let kind = match a.from(3).first() {
        None => PauseKind::All,
        Some(m) if is(m, "write") => PauseKind::Write,
        Some(m) if is(m, "all") => PauseKind::All,
        Some(_) => return Reply::err("CLIENT PAUSE mode must be WRITE or ALL").into(),
    };
    // Redis adds the timeout to the Unix time in milliseconds: where that
    // overflows, the end lies in the past and nothing is paused.
    let now_ms = crate::shard::now_ms() as i64;
    if now_ms.checked_add(ms).is_none() {
        return Reply::Ok.into();
    }
    let now = std::time::Instant::now();
    // Past what the clock can hold: a century is as good as for ever.
    let until = now
        .checked_add(std::time::Duration::from_millis(ms as u64))
        .unwrap_or(now + std::time::Duration::from_secs(100 * 365 * 86_400));
    s.server.shards.pause.pause(kind, until);
    Reply::Ok.into()
}

/// CLIENT UNBLOCK client-id [TIMEOUT|ERROR]: 1 when that client was
/// blocked in a command and now is not.
fn client_unblock(s: &Session, a: &Args) -> Action {
    if a.len() > 4 {
        return super::subcommand_syntax(a).into();
    }
    let how = match a.from(3).first() {
        None => Unblock::Timeout,
        Some(m) if is(m, "timeout") => Unblock::Timeout,
        Some(m) if is(m, "error") => Unblock::Error,
        Some(_) => return Reply::err("CLIENT UNBLOCK reason should be TIMEOUT or ERROR").into(),
    };
    let id = match args::int(a.get(2)) {
        Ok(id) => id,
        Err(r) => return r.into(),
    };
    let target = u64::try_from(id)
        .ok()
        .and_then(|id| s.server.clients.get(&id).map(|e| e.value().clone()));
    let done = target.is_some_and(|e| crate::net::unblock::unblock(&e, how));
    Reply::Int(done as i64).into()
}

/// CLIENT KILL addr | CLIENT KILL [ID id] [ADDR addr] [LADDR addr] [USER u] [TYPE t] [SKIPME yes|no]
fn client_kill(s: &Session, a: &Args) -> Action {
    let rest = a.from(2);
    let me = s.entry.id;
    let targets: Vec<_> = s.server.clients.iter().map(|e| e.value().clone()).collect();
    if rest.len() == 1 {
        let addr = String::from_utf8_lossy(&rest[0]).into_owned();
        return match targets.iter().find(|e| e.addr == addr) {
            Some(e) => {
                kill(e);
                Reply::Ok.into()
            }
            None => Reply::err("No such client").into(),
        };
    }
    if !rest.len().is_multiple_of(2) {
        return error(SYNTAX).into();
    }
    let (mut id, mut addr, mut laddr, mut user, mut skipme) = (None, None, None, None, true);
    let mut class = None;
    for pair in rest.chunks(2) {
        let v = String::from_utf8_lossy(&pair[1]).into_owned();
        if is(&pair[0], "id") {
            match args::int(&pair[1]) {
                Ok(i) if i > 0 => id = Some(i as u64),
                _ => return Reply::err("client-id should be greater than 0").into(),
            }
        } else if is(&pair[0], "addr") {
            addr = Some(v);
        } else if is(&pair[0], "laddr") {
            laddr = Some(v);
        } else if is(&pair[0], "user") {
            if s.server.acl.get(&pair[1]).is_none() {
                return Reply::err(format!("No such user '{v}'")).into();
            }
            user = Some(v);
        } else if is(&pair[0], "type") {
            if !matches!(
                v.to_lowercase().as_str(),
                "normal" | "master" | "replica" | "slave" | "pubsub"
            ) {
                return Reply::err(format!("Unknown client type '{v}'")).into();
            }
            class = Some(match v.to_lowercase().as_str() {
                "slave" => "replica".to_string(),
                other => other.to_string(),
            });
        } else if is(&pair[0], "skipme") {
            if is(&pair[1], "yes") {
                skipme = true;
            } else if is(&pair[1], "no") {
                skipme = false;
            } else {
                return error(SYNTAX).into();
            }
        } else {
            return error(SYNTAX).into();
        }
    }
    let mut n = 0;
    for e in targets {
        let hit = id.is_none_or(|i| i == e.id)
            && addr.as_ref().is_none_or(|x| *x == e.addr)
            && laddr.as_ref().is_none_or(|x| *x == e.laddr)
            && user.as_ref().is_none_or(|u| {
                let info = e.info.lock();
                let name = info.user.as_ref().map_or(&b"default"[..], |s| &s.name[..]);
                u.as_bytes() == name
            })
            && class.as_deref().is_none_or(|c| c == client_class(&e))
            && !(skipme && e.id == me);
        if hit {
            kill(&e);
            n += 1;
        }
    }
    Reply::Int(n).into()
}

fn kill(e: &crate::server::ClientEntry) {
    e.killed.store(true, Relaxed);
    e.close_soon();
}

/// COMMAND [COUNT | INFO name... | DOCS name... | GETKEYS cmd args... | LIST]
pub fn command(_s: &mut Session, a: Args) -> Action {
    if a.len() == 1 {
        return Reply::Array(TABLE.iter().map(docs::info).collect()).into();
    }
    let sub = String::from_utf8_lossy(&a.get(1).to_ascii_lowercase()).into_owned();
    // Dispatch has refused unknown subcommands and wrong argument counts.
    match sub.as_str() {
        "count" => Reply::Int(TABLE.len() as i64).into(),
        "list" => command_list(&a),
        "info" => {
            if a.len() == 2 {
                return Reply::Array(TABLE.iter().map(docs::info).collect()).into();
            }
            Reply::Array(
                a.from(2)
                    .iter()
                    .map(|n| lookup_with_subcommands(n).map_or(Reply::Nil, docs::info))
                    .collect(),
            )
            .into()
        }
        "docs" => {
            let mut out = Vec::new();
            let wanted: Vec<_> = if a.len() == 2 {
                TABLE.iter().collect()
            } else {
                a.from(2).iter().filter_map(|n| lookup(n)).collect()
            };
            for c in wanted {
                out.push((Reply::bulk(c.name), docs::docs(c)));
            }
            Reply::Map(out).into()
        }
        "getkeys" => command_getkeys(a.from(2), false),
        "getkeysandflags" => command_getkeys(a.from(2), true),
        "help" => super::help_reply(COMMAND_HELP).into(),
        _ => unknown_subcommand(a.get(1), "COMMAND"),
    }
}

/// COMMAND GETKEYS (and, `with_flags`, GETKEYSANDFLAGS): the keys of `argv`
/// as the table (or, for a container, the subcommand's row) places them,
/// with Redis 7.0's errors in its order.
fn command_getkeys(argv: &[bytes::Bytes], with_flags: bool) -> Action {
    let invalid = |what: &str| Reply::err(format!("Invalid {what} specified for command")).into();
    let Some(mut spec) = lookup(&argv[0]) else {
        return Reply::err("Invalid command specified").into();
    };
    if subcommands_of(spec.name).next().is_some() {
        let mut name = spec.name.as_bytes().to_vec();
        name.push(b'|');
        name.extend_from_slice(&argv[1]);
        match lookup_with_subcommands(&name) {
            Some(sub) => spec = sub,
            None => return Reply::err("Invalid command specified").into(),
        }
    }
    // Shard channels sit where keys would (cluster routing uses them) but
    // are not keys.
    if matches!(spec.keys, KeySpec::None) || spec.key_flags.starts_with("NOT_KEY") {
        return Reply::err("The command has no key arguments").into();
    }
    if !spec.arity_ok(argv.len()) {
        return invalid("number of arguments");
    }
    let keys = spec.key_positions(argv);
    if keys.is_empty() {
        // A command whose keys may all be absent (EVAL with numkeys 0)
        // has none, rather than malformed arguments, as in Redis.
        if spec.has(flag::NO_MANDATORY_KEYS) {
            return Reply::Array(Vec::new()).into();
        }
        return invalid("arguments");
    }
    Reply::Array(
        keys.into_iter()
            .map(|i| {
                let key = Reply::Bulk(argv[i].clone());
                if !with_flags {
                    return key;
                }
                let flags = docs::key_flags_text(spec.flags_of_key(argv, i));
                Reply::Array(vec![key, docs::status_set(&flags)])
            })
            .collect(),
    )
    .into()
}

/// COMMAND HELP, as Redis 7.0 words it.
const COMMAND_HELP: &[&str] = &[
    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "(no subcommand)",
    "    Return details about all Redis commands.",
    "COUNT",
    "    Return the total number of commands in this Redis server.",
    "LIST",
    "    Return a list of all commands in this Redis server.",
    "INFO [<command-name> ...]",
    "    Return details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "GETKEYS <full-command>",
    "    Return the keys from a full Redis command.",
    "GETKEYSANDFLAGS <full-command>",
    "    Return the keys and the access flags from a full Redis command.",
    "HELP",
    "    Prints this help.",
];

/// CONFIG HELP, as Redis 7.0 words it.
const CONFIG_HELP: &[&str] = &[
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>",
    "    Set the configuration <directive> to <value>.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "REWRITE",
    "    Rewrite the configuration file.",
    "HELP",
    "    Prints this help.",
];

/// COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]:
/// commands and subcommands (`container|sub`).
fn command_list(a: &Args) -> Action {
    let all = crate::command::all_specs();
    let names: Vec<&str> = match a.len() {
        2 => all.map(|c| c.name).collect(),
        5 if is(a.get(2), "filterby") => {
            let (by, arg) = (a.get(3), a.get(4));
            if is(by, "module") {
                Vec::new()
            } else if is(by, "pattern") {
                all.filter(|c| crate::util::glob::string_match(arg, c.name.as_bytes(), true))
                    .map(|c| c.name)
                    .collect()
            } else if is(by, "aclcat") {
                let in_category = |c: &&CommandSpec| {
                    c.acl.split(' ').any(|cat| {
                        cat.strip_prefix('@')
                            .is_some_and(|cat| cat.as_bytes().eq_ignore_ascii_case(arg))
                    })
                };
                all.filter(in_category).map(|c| c.name).collect()
            } else {
                return error(SYNTAX).into();
            }
        }
        _ => return error(SYNTAX).into(),
    };
    Reply::Array(names.into_iter().map(Reply::bulk).collect()).into()
}

/// CONFIG GET pattern... | SET param value... | RESETSTAT | REWRITE
pub fn config(s: &mut Session, a: Args) -> Action {
    use crate::families::config as cfg;
    let sub = String::from_utf8_lossy(&a.get(1).to_ascii_lowercase()).into_owned();
    // Dispatch has refused unknown subcommands and wrong argument counts.
    match sub.as_str() {
        "get" => cfg::config_get(s, a.from(2)),
        "set" => {
            if !a.len().is_multiple_of(2) {
                return error(SYNTAX).into();
            }
            cfg::config_set(s, a.from(2))
        }
        "resetstat" => {
            cfg::resetstat(&s.server);
            Reply::Ok.into()
        }
        "rewrite" => match cfg::rewrite(&s.server) {
            Ok(()) => Reply::Ok.into(),
            Err(e) => Reply::err(e).into(),
        },
        "help" => super::help_reply(CONFIG_HELP).into(),
        _ => unknown_subcommand(a.get(1), "CONFIG"),
    }
}

/// INFO [section ...]
pub fn info(s: &mut Session, a: Args) -> Action {
    use crate::families::info::{ALL_SECTIONS, DEFAULT_SECTIONS};
    let asked: Vec<String> = a
        .from(1)
        .iter()
        .map(|x| String::from_utf8_lossy(x).to_lowercase())
        .collect();
    let wanted = |section: &str| {
        asked
            .iter()
            .any(|w| w == section || w == "all" || w == "everything")
            || ((asked.is_empty() || asked.iter().any(|w| w == "default"))
                && DEFAULT_SECTIONS.contains(&section))
    };
    let mut text = String::new();
    for section in ALL_SECTIONS {
        if wanted(section) && section != "cairn" {
            if !text.is_empty() {
                text.push_str("\r\n");
            }
            crate::families::info::section(s, section, &mut text);
        }
    }
    if !wanted("cairn") {
        return Reply::Verbatim(text).into();
    }
    // Last in the order, and counted off the connection's thread.
    let server = s.server.clone();
    Action::Job(Box::pin(async move {
        let counted = tokio::task::spawn_blocking(move || {
            if !text.is_empty() {
                text.push_str("\r\n");
            }
            crate::families::info::cairn_section(&server, &mut text);
            text
        })
        .await;
        match counted {
            Ok(text) => Reply::Verbatim(text),
            Err(e) => Reply::err(format!("INFO: {e}")),
        }
    }))
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]
pub fn shutdown(s: &mut Session, a: Args) -> Action {
    for o in a.from(1) {
        if is(o, "abort") {
            return Reply::err("No shutdown in progress.").into();
        }
        if !(is(o, "nosave") || is(o, "save") || is(o, "now") || is(o, "force")) {
            return error(SYNTAX).into();
        }
    }
    let flag = |name| a.from(1).iter().any(|o| is(o, name));
    if flag("save") && flag("nosave") {
        return error(SYNTAX).into();
    }
    let (save, nosave, force) = (flag("save"), flag("nosave"), flag("force"));
    // A script past busy-reply-threshold holds every shard: only NOSAVE may
    // stop the server then, as in Redis (a save would wait for the script).
    if !nosave {
        if let Some(busy) = super::scripting::busy_reply(&s.server) {
            return busy.into();
        }
    }
    tracing::info!("SHUTDOWN requested by client {}", s.entry.id);
    let server = s.server.clone();
    // The save is the last thing this server does: the connection waits
    // for it on this thread (its other connections move to another). A
    // save that fails keeps the server up, unless FORCE, as in Redis.
    let saved = tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current()
            .block_on(super::persistence::save_for_shutdown(&server, save, nosave))
    });
    if !saved && !force {
        return Reply::err("Errors trying to SHUTDOWN. Check logs.").into();
    }
    server.request_shutdown();
    Action::Close(None)
}

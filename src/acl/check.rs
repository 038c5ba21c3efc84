//! The permission check: may this user run this command with these
//! arguments (its keys with their read/write access, its channels)? And
//! the refusals, ACL LOG entries included, for the places Redis checks:
//! dispatch (and MULTI queueing), EXEC, and a script's `redis.call`.

use bytes::Bytes;

use super::log::{Context, Entry, Reason};
use super::rules::{Selector, User, READ, WRITE};
use crate::command::flag;
use crate::command::{Args, CommandSpec};
use crate::net::session::Session;
use crate::protocol::Reply;
use crate::util::glob::string_match;

/// What a user may not do, with the argument index of the key or channel
/// at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// The command or subcommand.
    Command,
    /// The key at this index.
    Key(usize),
    /// The channel at this index.
    Channel(usize),
}

impl Denied {
    /// Redis's ranking when no selector allows a command: the error of the
    /// highest kind (command < key < channel) is reported, and among equal
    /// kinds the one of the latest argument.
    fn rank(self) -> (u8, usize) {
        match self {
            Denied::Command => (1, 0),
            Denied::Key(i) => (2, i),
            Denied::Channel(i) => (4, i),
        }
    }
}

/// Whether `user` may run `spec` (the subcommand's row for containers)
/// with `argv`.
pub fn check(user: &User, spec: &'static CommandSpec, argv: &[Bytes]) -> Result<(), Denied> {
    let mut worst = Denied::Command;
    let mut keys = None;
    for s in &user.selectors {
        match check_selector(s, spec, argv, &mut keys) {
            Ok(()) => return Ok(()),
            Err(d) if d.rank() > worst.rank() => worst = d,
            Err(_) => {}
        }
    }
    Err(worst)
}

fn check_selector(
    s: &Selector,
    spec: &'static CommandSpec,
    argv: &[Bytes],
    keys: &mut Option<Vec<usize>>,
) -> Result<(), Denied> {
    let id = crate::command::index_of(spec);
    if !s.allcommands && !spec.has(flag::NO_AUTH) && !s.bit(id) {
        // An exception for one first argument (`+select|0`)?
        let at = if spec.name.contains('|') { 2 } else { 1 };
        let first = argv.get(at).filter(|_| argv.len() >= 2);
        let allowed = s.firstargs.iter().find(|(c, _)| *c == id);
        match (first, allowed) {
            (Some(a), Some((_, subs)))
                if subs.iter().any(|x| a.eq_ignore_ascii_case(x.as_bytes())) => {}
            _ => return Err(Denied::Command),
        }
    }
    if !s.allkeys {
        let positions = keys.get_or_insert_with(|| spec.key_positions(argv));
        for &pos in positions.iter() {
            let flags = spec.flags_of_key(argv, pos);
            // Shard channels sit where keys do (for routing) but are not
            // keys: Redis leaves NOT_KEY specs out of the key check.
            if flags.split_whitespace().any(|f| f == "NOT_KEY") {
                continue;
            }
            let need = needed(flags);
            let ok = s
                .keys
                .iter()
                .any(|(pat, perm)| perm & need == need && string_match(pat, &argv[pos], false));
            if !ok {
                return Err(Denied::Key(pos));
            }
        }
    }
    if !s.allchannels {
        let (from, literal) = match spec.name {
            "publish" | "spublish" => (1..2.min(argv.len()), false),
            "subscribe" | "ssubscribe" => (1..argv.len(), false),
            "psubscribe" => (1..argv.len(), true),
            _ => (0..0, false),
        };
        for i in from {
            let ok = s.channels.iter().any(|pat| {
                if literal {
                    *pat == argv[i]
                } else {
                    string_match(pat, &argv[i], false)
                }
            });
            if !ok {
                return Err(Denied::Channel(i));
            }
        }
    }
    Ok(())
}

/// The permissions a key needs from its key-spec flags: ACCESS reads;
/// INSERT, DELETE and UPDATE write.
fn needed(flags: &str) -> u8 {
    let flags = flags.split('|').next().unwrap_or("");
    flags.split_whitespace().fold(0, |n, f| match f {
        "ACCESS" => n | READ,
        "INSERT" | "DELETE" | "UPDATE" => n | WRITE,
        _ => n,
    })
}

/// `redis.acl_check_cmd`: whether the session's user may run `argv` (a
/// container without a known subcommand is judged as itself).
pub fn allows(session: &Session, argv: &[Bytes]) -> bool {
    if session.user.unrestricted() {
        return true;
    }
    let Some(spec) = crate::command::lookup(&argv[0]) else {
        return false;
    };
    let spec = if argv.len() >= 2 && crate::command::is_container(spec) {
        match crate::command::subcommand_of(spec, &argv[1].to_ascii_lowercase()) {
            Some(sub) => sub,
            None => return false,
        }
    } else {
        spec
    };
    check(&session.user.user(), spec, argv).is_ok()
}

/// Dispatch's check (also for commands being queued in MULTI): Redis's
/// NOPERM error, after an ACL LOG entry. Free for unrestricted users.
#[inline]
pub fn refusal(session: &Session, spec: &'static CommandSpec, args: &Args) -> Option<Reply> {
    if session.user.unrestricted() {
        return None;
    }
    let denied = check(&session.user.user(), spec, args.all()).err()?;
    let context = if session.multi.is_some() {
        Context::Multi
    } else {
        Context::Toplevel
    };
    log_denied(session, denied, context, spec, args.all());
    Some(Reply::Error(match denied {
        Denied::Command => format!(
            "NOPERM this user has no permissions to run the '{}' command",
            spec.name
        ),
        Denied::Key(_) => {
            "NOPERM this user has no permissions to access one of the keys used as arguments".into()
        }
        Denied::Channel(_) => {
            "NOPERM this user has no permissions to access one of the channels used as arguments"
                .into()
        }
    }))
}

/// EXEC checks each queued command again (the rules may have changed
/// since it was queued): a refused command is not run and answers this.
pub fn exec_refusal(session: &Session, spec: &'static CommandSpec, args: &Args) -> Option<Reply> {
    if session.user.unrestricted() {
        return None;
    }
    let denied = check(&session.user.user(), spec, args.all()).err()?;
    log_denied(session, denied, Context::Multi, spec, args.all());
    let why = match denied {
        Denied::Command => "no permission to execute the command or subcommand",
        Denied::Key(_) => "no permission to touch the specified keys",
        Denied::Channel(_) => "no permission to access one of the channels used as arguments",
    };
    Some(Reply::Error(format!(
        "NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: {why}"
    )))
}

/// A script's `redis.call`: the script runs as its caller's user.
pub fn script_refusal(session: &Session, spec: &'static CommandSpec, args: &Args) -> Option<Reply> {
    if session.user.unrestricted() {
        return None;
    }
    let denied = check(&session.user.user(), spec, args.all()).err()?;
    log_denied(session, denied, Context::Lua, spec, args.all());
    Some(Reply::err(match denied {
        Denied::Command => "The user executing the script can't run this command or subcommand",
        Denied::Key(_) => {
            "The user executing the script can't access at least one of the keys mentioned in the command arguments"
        }
        Denied::Channel(_) => {
            "The user executing the script can't publish to the channel mentioned in the command"
        }
    }))
}

fn log_denied(
    session: &Session,
    denied: Denied,
    context: Context,
    spec: &'static CommandSpec,
    argv: &[Bytes],
) {
    let (reason, object) = match denied {
        Denied::Command => (Reason::Command, spec.name.as_bytes().to_vec()),
        Denied::Key(i) => (Reason::Key, argv[i].to_vec()),
        Denied::Channel(i) => (Reason::Channel, argv[i].to_vec()),
    };
    let user = session.user.name.clone();
    add_entry(session, reason, context, object, user, spec.name);
}

/// Logs a failed AUTH / HELLO AUTH (`command` as the client typed it).
pub fn log_auth_failure(session: &Session, command: &[u8], username: &[u8]) {
    let context = if session.multi.is_some() {
        Context::Multi
    } else {
        Context::Toplevel
    };
    let cmd = if command.eq_ignore_ascii_case(b"hello") {
        "hello"
    } else {
        "auth"
    };
    add_entry(
        session,
        Reason::Auth,
        context,
        command.to_vec(),
        username.to_vec(),
        cmd,
    );
}

fn add_entry(
    session: &Session,
    reason: Reason,
    context: Context,
    object: Vec<u8>,
    username: Vec<u8>,
    cmd: &str,
) {
    let server = &session.server;
    let max = server.runtime.read().int("acllog-max-len").max(0) as usize;
    let entry = Entry {
        count: 1,
        reason,
        context,
        object,
        username,
        ctime_ms: crate::shard::now_ms(),
        client_info: with_cmd(
            crate::families::server::client_line(session, &session.entry, ""),
            cmd,
        ),
    };
    server.acl.log.lock().add(entry, max);
}

/// The client-info line with `cmd=` naming the refused command, as Redis
/// shows it (the client's last command is the one being refused).
fn with_cmd(line: String, cmd: &str) -> String {
    let Some(at) = line.find(" cmd=") else {
        return line;
    };
    let start = at + " cmd=".len();
    let end = line[start..].find(' ').map_or(line.len(), |e| start + e);
    format!("{}{cmd}{}", &line[..start], &line[end..])
}

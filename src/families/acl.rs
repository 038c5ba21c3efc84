//! ACL SETUSER | GETUSER | DELUSER | USERS | LIST | WHOAMI | CAT | GENPASS
//! | LOG | DRYRUN | LOAD | SAVE | HELP, over the users of `crate::acl`.

use std::sync::Arc;

use crate::acl::rules::{self, has_spaces, merge_selectors, User};
use crate::acl::UserSlot;
use crate::command::args::{self, is, Args};
use crate::command::{self};
use crate::net::session::{Action, Session};
use crate::protocol::Reply;

/// ACL <subcommand> ...
pub fn acl(s: &mut Session, a: Args) -> Action {
    let sub = String::from_utf8_lossy(a.get(1)).to_ascii_lowercase();
    let n = a.len();
    match sub.as_str() {
        "setuser" => setuser(s, &a),
        "deluser" => deluser(s, &a),
        "getuser" if n == 3 => getuser(s, a.get(2)),
        "list" | "users" if n == 2 => {
            let users = s.server.acl.users();
            let items = users.iter().map(|u| {
                if sub == "users" {
                    Reply::bulk(u.name.clone())
                } else {
                    Reply::bulk(format!("user {} {}", u.name_str(), u.user().describe()))
                }
            });
            Reply::Array(items.collect()).into()
        }
        "whoami" if n == 2 => Reply::bulk(s.user.name.clone()).into(),
        "load" | "save" if s.server.runtime.read().get("aclfile").is_empty() => Reply::err(
            "This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.",
        )
        .into(),
        "load" if n == 2 => load(s),
        "save" if n == 2 => {
            let path = s.server.runtime.read().get("aclfile").to_string();
            match crate::acl::file::save(&path, &s.server.acl.lines()) {
                Ok(()) => Reply::Ok.into(),
                Err(e) => {
                    tracing::warn!("ACL SAVE {path}: {e}");
                    Reply::err("There was an error trying to save the ACLs. Please check the server logs for more information").into()
                }
            }
        }
        "cat" if n == 2 => {
            let names = rules::CATEGORIES.iter().map(|c| Reply::bulk(*c));
            Reply::Array(names.collect()).into()
        }
        "cat" if n == 3 => {
            let name = String::from_utf8_lossy(a.get(2)).into_owned();
            match rules::category_bit(&name) {
                Some(bit) => {
                    let names = rules::commands_in(bit).into_iter().map(Reply::bulk);
                    Reply::Array(names.collect()).into()
                }
                None => {
                    let shown: String = name.chars().take(128).collect();
                    Reply::err(format!("Unknown category '{shown}'")).into()
                }
            }
        }
        "genpass" if n == 2 || n == 3 => genpass(&a),
        "log" if n == 2 || n == 3 => log(s, &a),
        "dryrun" if n >= 4 => dryrun(s, &a),
        "help" if n == 2 => super::help_reply(HELP).into(),
        _ => super::subcommand_syntax(&a).into(),
    }
}

/// Whether new selectors start with every channel (`acl-pubsub-default`).
fn pubsub_default(s: &Session) -> bool {
    s.server.runtime.read().get("acl-pubsub-default") == "allchannels"
}

/// ACL SETUSER name rule...: every rule is applied to a copy, which
/// replaces the user only if all of them are valid.
fn setuser(s: &mut Session, a: &Args) -> Action {
    let name = a.get(2).clone();
    if has_spaces(&name) {
        return Reply::err("Usernames can't contain spaces or null characters").into();
    }
    let ops: Vec<&[u8]> = a.from(3).iter().map(|b| &b[..]).collect();
    let merged = match merge_selectors(&ops) {
        Ok(m) => m,
        Err(i) => {
            return Reply::err(format!(
                "Unmatched parenthesis in acl selector starting at '{}'.",
                String::from_utf8_lossy(ops[i])
            ))
            .into();
        }
    };
    let allchannels = pubsub_default(s);
    let existing = s.server.acl.get(&name);
    let mut user = match &existing {
        Some(slot) => (*slot.user()).clone(),
        None => User::new(allchannels),
    };
    for op in &merged {
        if let Err(e) = user.apply(op, allchannels) {
            return Reply::err(format!(
                "Error in ACL SETUSER modifier '{}': {e}",
                String::from_utf8_lossy(op)
            ))
            .into();
        }
    }
    if let Some(slot) = existing {
        close_revoked_subscribers(s, &slot, &user);
    }
    s.server.acl.put(&name, user);
    Reply::Ok.into()
}

/// Redis's ACLKillPubsubClientsIfNeeded: when the new rules drop a
/// channel pattern the user had, its subscribed clients that listen to
/// something the new rules deny are disconnected. Patterns must be
/// allowed literally, channels by match.
fn close_revoked_subscribers(s: &Session, slot: &Arc<UserSlot>, new: &User) {
    if new.selectors.iter().any(|sel| sel.allchannels) {
        return;
    }
    let upcoming: Vec<&[u8]> = new
        .selectors
        .iter()
        .flat_map(|sel| sel.channels.iter().map(|c| &c[..]))
        .collect();
    let old = slot.user();
    // Every channel was allowed before and is not now: not a superset.
    let kept = !old.selectors.iter().any(|sel| sel.allchannels)
        && old
            .selectors
            .iter()
            .flat_map(|sel| sel.channels.iter())
            .all(|c| upcoming.contains(&&c[..]));
    if kept {
        return;
    }
    let allowed = |name: &[u8], literal: bool| {
        upcoming.iter().any(|p| {
            if literal {
                *p == name
            } else {
                crate::util::glob::string_match(p, name, false)
            }
        })
    };
    for e in s.server.clients.iter() {
        if e.id == s.entry.id || !e.mailbox.subscribed() {
            continue;
        }
        let mine = e
            .info
            .lock()
            .user
            .as_ref()
            .is_some_and(|u| Arc::ptr_eq(u, slot));
        if !mine {
            continue;
        }
        let denied = {
            let names = e.mailbox.names.lock();
            let [channels, patterns, shard] = &*names;
            patterns.iter().any(|p| !allowed(p, true))
                || channels
                    .iter()
                    .chain(shard.iter())
                    .any(|c| !allowed(c, false))
        };
        if denied {
            e.killed.store(true, std::sync::atomic::Ordering::Relaxed);
            e.close_soon();
        }
    }
}

/// ACL DELUSER name...: the clients of a deleted user are disconnected
/// (this one after its reply).
fn deluser(s: &mut Session, a: &Args) -> Action {
    if a.from(2).iter().any(|n| &n[..] == b"default") {
        return Reply::err("The 'default' user cannot be removed").into();
    }
    let mut deleted = 0;
    let mut close_me = false;
    for name in a.from(2) {
        if let Some(slot) = s.server.acl.remove(name) {
            deleted += 1;
            close_me |= disconnect_clients_of(s, &slot);
        }
    }
    if close_me {
        Action::Close(Some(Reply::Int(deleted)))
    } else {
        Reply::Int(deleted).into()
    }
}

/// Closes the connections authenticated as `slot`; true when this
/// session is one of them (it closes after its reply).
fn disconnect_clients_of(s: &mut Session, slot: &Arc<UserSlot>) -> bool {
    let mut me = false;
    for e in s.server.clients.iter() {
        let same = e
            .info
            .lock()
            .user
            .as_ref()
            .is_some_and(|u| Arc::ptr_eq(u, slot));
        if !same {
            continue;
        }
        if e.id == s.entry.id {
            me = true;
        } else {
            e.killed.store(true, std::sync::atomic::Ordering::Relaxed);
            e.close_soon();
        }
    }
    if me {
        // Until it closes it is nobody: the default user, unauthenticated.
        s.user = s.server.acl.default_user();
        s.authenticated = false;
        s.entry.info.lock().user = None;
    }
    me
}

/// ACL GETUSER name: Redis 7.0's map of flags, passwords, the root
/// selector's commands, keys and channels, then the other selectors.
fn getuser(s: &Session, name: &[u8]) -> Action {
    let Some(slot) = s.server.acl.get(name) else {
        return Reply::Nil.into();
    };
    let u = slot.user();
    let b = |x: &str| Reply::bulk(x.to_string());
    let selector = |sel: &rules::Selector| {
        vec![
            (b("commands"), b(&sel.describe_commands())),
            (b("keys"), b(&sel.describe_keys())),
            (b("channels"), b(&sel.describe_channels())),
        ]
    };
    let mut map = vec![
        (
            b("flags"),
            Reply::Set(u.flags().into_iter().map(b).collect()),
        ),
        (
            b("passwords"),
            Reply::Array(u.passwords.iter().map(|p| b(p)).collect()),
        ),
    ];
    map.extend(selector(u.root()));
    let others = u.selectors[1..]
        .iter()
        .map(|sel| Reply::Map(selector(sel)))
        .collect();
    map.push((b("selectors"), Reply::Array(others)));
    Reply::Map(map).into()
}

/// ACL LOAD: the file replaces every user, or nothing changes. Clients
/// of users other than `default` are disconnected, as Redis frees every
/// old user.
fn load(s: &mut Session) -> Action {
    let path = s.server.runtime.read().get("aclfile").to_string();
    let users = match crate::acl::file::load(&path, pubsub_default(s)) {
        Ok(u) => u,
        Err(e) => return Reply::err(e).into(),
    };
    let mut close_me = false;
    for old in s.server.acl.replace_all(users) {
        close_me |= disconnect_clients_of(s, &old);
    }
    if close_me {
        Action::Close(Some(Reply::Ok))
    } else {
        Reply::Ok.into()
    }
}

/// ACL GENPASS [bits]: random hex, 256 bits unless told.
fn genpass(a: &Args) -> Action {
    const MAX_BITS: i64 = 4096;
    let bits = if a.len() == 3 {
        match args::int(a.get(2)) {
            Ok(b) => b,
            Err(r) => return r.into(),
        }
    } else {
        256
    };
    if bits <= 0 || bits > MAX_BITS {
        return Reply::err(format!(
            "ACL GENPASS argument must be the number of bits for the output password, a positive number up to {MAX_BITS}"
        ))
        .into();
    }
    let chars = (bits as usize).div_ceil(4);
    let hex: String = (0..chars)
        .map(|_| char::from(b"0123456789abcdef"[rand::random::<u8>() as usize % 16]))
        .collect();
    Reply::bulk(hex).into()
}

/// ACL LOG [count | RESET]
fn log(s: &Session, a: &Args) -> Action {
    let mut count = 10;
    if a.len() == 3 {
        if is(a.get(2), "reset") {
            s.server.acl.log.lock().clear();
            return Reply::Ok.into();
        }
        match args::int(a.get(2)) {
            Ok(c) => count = c.max(0) as usize,
            Err(r) => return r.into(),
        }
    }
    let reply = s.server.acl.log.lock().reply(count, crate::shard::now_ms());
    reply.into()
}

/// ACL DRYRUN user command arg...: OK, or (as a bulk string) why not.
fn dryrun(s: &Session, a: &Args) -> Action {
    let Some(slot) = s.server.acl.get(a.get(2)) else {
        return Reply::err(format!(
            "User '{}' not found",
            String::from_utf8_lossy(a.get(2))
        ))
        .into();
    };
    let argv = &a.all()[3..];
    let spec = command::lookup(&argv[0]).and_then(|c| {
        if argv.len() >= 2 && command::is_container(c) {
            command::subcommand_of(c, &argv[1].to_ascii_lowercase())
        } else {
            Some(c)
        }
    });
    let Some(spec) = spec else {
        return Reply::err(format!(
            "Command '{}' not found",
            String::from_utf8_lossy(&argv[0])
        ))
        .into();
    };
    if !spec.arity_ok(argv.len()) {
        return Reply::err(format!(
            "wrong number of arguments for '{}' command",
            spec.name
        ))
        .into();
    }
    use crate::acl::check::{check, Denied};
    match check(&slot.user(), spec, argv) {
        Ok(()) => Reply::Ok.into(),
        Err(d) => Reply::bulk(match d {
            Denied::Command => format!(
                "This user has no permissions to run the '{}' command",
                spec.name
            ),
            Denied::Key(i) => format!(
                "This user has no permissions to access the '{}' key",
                String::from_utf8_lossy(&argv[i])
            ),
            Denied::Channel(i) => format!(
                "This user has no permissions to access the '{}' channel",
                String::from_utf8_lossy(&argv[i])
            ),
        })
        .into(),
    }
}

/// ACL HELP, Redis 7.0's lines.
const HELP: &[&str] = &[
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Prints this help.",
];

//! ACL users as rules build them: flags, password hashes and selectors
//! (command bitmap, key and channel patterns), the rule parser of ACL
//! SETUSER and ACL files, and the description ACL LIST / GETUSER print.
//!
//! Commands are numbered by `command::index_of` (every row of TABLE, then
//! SUBCOMMANDS); one extra bit after them stands for "commands that do
//! not exist yet": only `+@all` sets it, so a description can tell a user
//! built from `+@all` minus some commands from one built up from `-@all`.

use std::sync::LazyLock;

use sha2::{Digest, Sha256};

use crate::command::{self, CommandSpec};

/// The categories, in Redis's order (ACL CAT, and the order descriptions
/// try them in).
pub const CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// The number of command bits: every command and subcommand, plus the
/// "future commands" bit.
fn bit_count() -> usize {
    COMMANDS.len() + 1
}

/// Every command row in index order, with its category mask.
static COMMANDS: LazyLock<Vec<(&'static CommandSpec, u32)>> = LazyLock::new(|| {
    command::all_specs()
        .map(|c| (c, category_mask(c.acl)))
        .collect()
});

/// The category bits of a table row's ACL column (`@write @string @fast`).
fn category_mask(acl: &str) -> u32 {
    acl.split_whitespace()
        .filter_map(|w| w.strip_prefix('@'))
        .filter_map(category_bit)
        .fold(0, |m, b| m | b)
}

/// The bit of a category name (case-insensitive), if it is one.
pub fn category_bit(name: &str) -> Option<u32> {
    CATEGORIES
        .iter()
        .position(|c| c.eq_ignore_ascii_case(name))
        .map(|i| 1 << i)
}

/// The commands (and subcommands) of a category, by full name, in table
/// order (each container followed by its subcommands).
pub fn commands_in(category: u32) -> Vec<&'static str> {
    walk()
        .filter(|&i| COMMANDS[i].1 & category != 0)
        .map(|i| COMMANDS[i].0.name)
        .collect()
}

/// Command indexes in the order Redis walks its table: each command, then
/// (for containers) its subcommands.
fn walk() -> impl Iterator<Item = usize> {
    static ORDER: LazyLock<Vec<usize>> = LazyLock::new(|| {
        let mut order = Vec::new();
        for (i, c) in command::TABLE.iter().enumerate() {
            order.push(i);
            order.extend(command::subcommands_of(c.name).map(command::index_of));
        }
        order
    });
    ORDER.iter().copied()
}

/// The subcommand indexes of a command index (none for plain commands and
/// for subcommands).
fn subs_of(i: usize) -> Vec<usize> {
    let spec = COMMANDS[i].0;
    if spec.name.contains('|') {
        return Vec::new();
    }
    command::subcommands_of(spec.name)
        .map(command::index_of)
        .collect()
}

/// Key permissions of a pattern: read (%R), write (%W), or both (~).
pub const READ: u8 = 1;
/// See [`READ`].
pub const WRITE: u8 = 2;

/// Why a rule was refused (Redis's errno), with Redis's explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    /// EINVAL.
    Syntax,
    /// ENOENT.
    UnknownCommand,
    /// EEXIST.
    KeyAfterAll,
    /// EISDIR.
    ChannelAfterAll,
    /// ENODEV.
    NoSuchPassword,
    /// EBADMSG.
    BadHash,
    /// ECHILD.
    FirstArgOfSubcommand,
}

impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RuleError::Syntax => "Syntax error",
            RuleError::UnknownCommand => "Unknown command or category name in ACL",
            RuleError::KeyAfterAll => "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns",
            RuleError::ChannelAfterAll => "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels",
            RuleError::NoSuchPassword => "The password you are trying to remove from the user does not exist",
            RuleError::BadHash => "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
            RuleError::FirstArgOfSubcommand => "Allowing first-arg of a subcommand is not supported",
        })
    }
}

/// One set of permissions: a user has a root selector and may have more;
/// a command is allowed when any selector allows all of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    /// Every key (`~*`, allkeys).
    pub allkeys: bool,
    /// Every channel (`&*`, allchannels).
    pub allchannels: bool,
    /// Every command, with no exception since `+@all`.
    pub allcommands: bool,
    /// The command bitmap (see the module doc).
    pub allowed: Vec<u64>,
    /// First arguments allowed of otherwise denied commands (`+select|0`),
    /// by command index.
    pub firstargs: Vec<(usize, Vec<String>)>,
    /// Key patterns with their READ/WRITE permissions.
    pub keys: Vec<(Vec<u8>, u8)>,
    /// Channel patterns.
    pub channels: Vec<Vec<u8>>,
}

impl Selector {
    /// An empty selector: no commands, keys or channels, except all
    /// channels when `acl-pubsub-default` is `allchannels`.
    pub fn new(allchannels: bool) -> Selector {
        Selector {
            allkeys: false,
            allchannels,
            allcommands: false,
            allowed: vec![0; bit_count().div_ceil(64)],
            firstargs: Vec::new(),
            keys: Vec::new(),
            channels: Vec::new(),
        }
    }

    /// Whether command `i`'s bit is set.
    pub fn bit(&self, i: usize) -> bool {
        self.allowed[i / 64] & (1 << (i % 64)) != 0
    }

    fn set_bit(&mut self, i: usize, on: bool) {
        if on {
            self.allowed[i / 64] |= 1 << (i % 64);
        } else {
            self.allowed[i / 64] &= !(1 << (i % 64));
            self.allcommands = false;
        }
    }

    /// Whether it was built from `+@all` (commands added later would be
    /// allowed).
    fn future_commands(&self) -> bool {
        self.bit(COMMANDS.len())
    }

    /// Allows or denies a command, and all its subcommands if it has any.
    fn change(&mut self, i: usize, on: bool) {
        self.set_bit(i, on);
        self.firstargs.retain(|(c, _)| *c != i);
        for s in subs_of(i) {
            self.set_bit(s, on);
        }
    }

    fn change_category(&mut self, cat: u32, on: bool) {
        for i in walk() {
            if COMMANDS[i].1 & cat != 0 {
                self.change(i, on);
            }
        }
    }

    fn set_all(&mut self, on: bool) {
        let fill = if on { u64::MAX } else { 0 };
        self.allowed.iter_mut().for_each(|w| *w = fill);
        self.allcommands = on;
        self.firstargs.clear();
    }

    /// Applies one selector rule (keys, channels, commands).
    pub fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("allkeys") || is("~*") {
            self.allkeys = true;
            self.keys.clear();
        } else if is("resetkeys") {
            self.allkeys = false;
            self.keys.clear();
        } else if is("allchannels") || is("&*") {
            self.allchannels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.allchannels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.set_all(true);
        } else if is("nocommands") || is("-@all") {
            self.set_all(false);
        } else if op[0] == b'~' || op[0] == b'%' {
            self.add_key_pattern(op)?;
        } else if op[0] == b'&' {
            if self.allchannels {
                return Err(RuleError::ChannelAfterAll);
            }
            let pat = &op[1..];
            if has_spaces(pat) {
                return Err(RuleError::Syntax);
            }
            if !self.channels.iter().any(|c| c == pat) {
                self.channels.push(pat.to_vec());
            }
        } else if op.len() >= 2 && (op[0] == b'+' || op[0] == b'-') && op[1] == b'@' {
            let name = std::str::from_utf8(&op[2..]).map_err(|_| RuleError::UnknownCommand)?;
            let cat = category_bit(name).ok_or(RuleError::UnknownCommand)?;
            self.change_category(cat, op[0] == b'+');
        } else if op[0] == b'+' {
            self.allow_command(&op[1..])?;
        } else if op[0] == b'-' {
            let i = lookup(&op[1..]).ok_or(RuleError::UnknownCommand)?;
            self.change(i, false);
        } else {
            return Err(RuleError::Syntax);
        }
        Ok(())
    }

    fn add_key_pattern(&mut self, op: &[u8]) -> Result<(), RuleError> {
        if self.allkeys {
            return Err(RuleError::KeyAfterAll);
        }
        let (mut flags, mut at) = (0u8, 1);
        if op[0] == b'%' {
            loop {
                match op.get(at).map(u8::to_ascii_uppercase) {
                    Some(b'R') if flags & READ == 0 => flags |= READ,
                    Some(b'W') if flags & WRITE == 0 => flags |= WRITE,
                    Some(b'~') => {
                        at += 1;
                        break;
                    }
                    // Redis stops at the end of the rule too: `%R` alone
                    // is a pattern of nothing with read permission.
                    None => break,
                    _ => return Err(RuleError::Syntax),
                }
                at += 1;
            }
            if flags == 0 {
                return Err(RuleError::Syntax);
            }
        } else {
            flags = READ | WRITE;
        }
        let pat = &op[at.min(op.len())..];
        if has_spaces(pat) {
            return Err(RuleError::Syntax);
        }
        match self.keys.iter_mut().find(|(p, _)| p == pat) {
            Some((_, f)) => *f |= flags,
            None => self.keys.push((pat.to_vec(), flags)),
        }
        self.allkeys = false;
        Ok(())
    }

    fn allow_command(&mut self, name: &[u8]) -> Result<(), RuleError> {
        let Some(bar) = name.iter().rposition(|&b| b == b'|') else {
            let i = lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.change(i, true);
            return Ok(());
        };
        let (base, sub) = (&name[..bar], &name[bar + 1..]);
        let i = lookup(base).ok_or(RuleError::UnknownCommand)?;
        if COMMANDS[i].0.name.contains('|') {
            return Err(RuleError::FirstArgOfSubcommand);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if command::is_container(COMMANDS[i].0) {
            let s = lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.change(s, true);
        } else {
            // A first argument of a command without subcommands
            // (`+select|0`): Redis keeps it as an exception, deprecated.
            let sub = String::from_utf8_lossy(sub).into_owned();
            match self.firstargs.iter_mut().find(|(c, _)| *c == i) {
                Some((_, subs)) => {
                    if !subs.iter().any(|s| s.eq_ignore_ascii_case(&sub)) {
                        subs.push(sub);
                    }
                }
                None => self.firstargs.push((i, vec![sub])),
            }
        }
        Ok(())
    }

    /// The rules that rebuild this selector's command bitmap, as Redis
    /// describes it: `+@all` or `-@all`, the categories that fit best, then
    /// single commands.
    pub fn describe_commands(&self) -> String {
        let mut rules = String::new();
        let additive = !self.future_commands();
        let mut fake = Selector::new(false);
        if additive {
            rules.push_str("-@all ");
        } else {
            rules.push_str("+@all ");
            fake.set_all(true);
        }
        let mut temp = self.clone();
        temp.firstargs.clear();
        let mut applied = [false; 32];
        loop {
            let mut best = None;
            let (mut mindiff, mut maxsame) = (usize::MAX, 0);
            for (j, _) in CATEGORIES.iter().enumerate() {
                if applied[j] {
                    continue;
                }
                let (mut on, mut off) = (0, 0);
                for i in walk() {
                    if COMMANDS[i].1 & (1 << j) != 0 {
                        if temp.bit(i) {
                            on += 1;
                        } else {
                            off += 1;
                        }
                    }
                }
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < mindiff || (diff == mindiff && same > maxsame)) {
                    best = Some(j);
                    mindiff = diff;
                    maxsame = same;
                }
            }
            let Some(j) = best else { break };
            fake.change_category(1 << j, additive);
            temp.change_category(1 << j, !additive);
            rules.push_str(if additive { "+@" } else { "-@" });
            rules.push_str(CATEGORIES[j]);
            rules.push(' ');
            applied[j] = true;
        }
        for i in walk() {
            let mine = self.bit(i);
            if mine != fake.bit(i) {
                rules.push(if mine { '+' } else { '-' });
                rules.push_str(COMMANDS[i].0.name);
                rules.push(' ');
                fake.change(i, mine);
            }
            if !mine {
                if let Some((_, subs)) = self.firstargs.iter().find(|(c, _)| *c == i) {
                    for s in subs {
                        rules.push_str(&format!("+{}|{} ", COMMANDS[i].0.name, s));
                    }
                }
            }
        }
        rules.pop();
        rules
    }

    /// The key patterns as rules (`~a %R~b`), space separated.
    pub fn describe_keys(&self) -> String {
        if self.allkeys {
            return "~*".into();
        }
        let pats: Vec<String> = self
            .keys
            .iter()
            .map(|(p, f)| {
                let prefix = match *f {
                    READ => "%R~",
                    WRITE => "%W~",
                    _ => "~",
                };
                format!("{prefix}{}", String::from_utf8_lossy(p))
            })
            .collect();
        pats.join(" ")
    }

    /// The channel patterns as rules (`&a &b`), space separated.
    pub fn describe_channels(&self) -> String {
        if self.allchannels {
            return "&*".into();
        }
        let pats: Vec<String> = self
            .channels
            .iter()
            .map(|p| format!("&{}", String::from_utf8_lossy(p)))
            .collect();
        pats.join(" ")
    }

    /// The whole selector as rules, as ACL LIST shows it.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        if self.allkeys {
            out.push_str("~* ");
        } else {
            for k in self.describe_keys().split(' ').filter(|k| !k.is_empty()) {
                out.push_str(k);
                out.push(' ');
            }
        }
        if self.allchannels {
            out.push_str("&* ");
        } else {
            out.push_str("resetchannels ");
            for c in &self.channels {
                out.push('&');
                out.push_str(&String::from_utf8_lossy(c));
                out.push(' ');
            }
        }
        out.push_str(&self.describe_commands());
        out
    }
}

/// A command or `container|sub` subcommand index by name, as rules name
/// them (Redis looks them up in its original table).
fn lookup(name: &[u8]) -> Option<usize> {
    let parts: Vec<&[u8]> = name.split(|&b| b == b'|').collect();
    let spec = match parts.as_slice() {
        [one] => command::lookup(one)?,
        [base, sub] => {
            let container = command::lookup(base)?;
            command::subcommand_of(container, &sub.to_ascii_lowercase())?
        }
        _ => return None,
    };
    Some(command::index_of(spec))
}

/// Whether a name or pattern has whitespace or NUL (not allowed: the
/// rules are space separated).
pub fn has_spaces(s: &[u8]) -> bool {
    s.iter()
        .any(|&b| b == 0 || b == b' ' || (b'\t'..=b'\r').contains(&b))
}

/// SHA-256 of a password, lowercase hex.
pub fn hash_password(pass: &[u8]) -> String {
    Sha256::digest(pass)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn valid_hash(h: &[u8]) -> bool {
    h.len() == 64
        && h.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// A user's definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// `on` (may authenticate) or `off`.
    pub enabled: bool,
    /// Any password works.
    pub nopass: bool,
    /// `skip-sanitize-payload` (Some(true)), `sanitize-payload`
    /// (Some(false)), or neither.
    pub skip_sanitize: Option<bool>,
    /// SHA-256 hex of each password.
    pub passwords: Vec<String>,
    /// The root selector, then the others.
    pub selectors: Vec<Selector>,
}

impl User {
    /// A new user: off, no passwords, no permissions.
    pub fn new(allchannels: bool) -> User {
        User {
            enabled: false,
            nopass: false,
            skip_sanitize: None,
            passwords: Vec::new(),
            selectors: vec![Selector::new(allchannels)],
        }
    }

    /// The `default` user as a server starts with it.
    pub fn default_user() -> User {
        let mut u = User::new(false);
        for op in ["+@all", "~*", "&*", "on", "nopass"] {
            u.apply(op.as_bytes(), false)
                .expect("the default user's rules are valid");
        }
        u
    }

    /// The root selector.
    pub fn root(&self) -> &Selector {
        &self.selectors[0]
    }

    /// Applies one rule. `allchannels` is `acl-pubsub-default`'s meaning
    /// for new selectors and `reset`.
    pub fn apply(&mut self, op: &[u8], allchannels: bool) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("on") {
            self.enabled = true;
        } else if is("off") {
            self.enabled = false;
        } else if is("skip-sanitize-payload") {
            self.skip_sanitize = Some(true);
        } else if is("sanitize-payload") {
            self.skip_sanitize = Some(false);
        } else if is("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if is("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if op[0] == b'>' || op[0] == b'#' {
            let hash = if op[0] == b'>' {
                hash_password(&op[1..])
            } else if valid_hash(&op[1..]) {
                String::from_utf8_lossy(&op[1..]).into_owned()
            } else {
                return Err(RuleError::BadHash);
            };
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.nopass = false;
        } else if op[0] == b'<' || op[0] == b'!' {
            let hash = if op[0] == b'<' {
                hash_password(&op[1..])
            } else if valid_hash(&op[1..]) {
                String::from_utf8_lossy(&op[1..]).into_owned()
            } else {
                return Err(RuleError::BadHash);
            };
            let at = self.passwords.iter().position(|p| *p == hash);
            self.passwords.remove(at.ok_or(RuleError::NoSuchPassword)?);
        } else if op[0] == b'(' && op[op.len() - 1] == b')' {
            let mut s = Selector::new(allchannels);
            let inner = String::from_utf8_lossy(&op[1..op.len() - 1]).into_owned();
            for rule in inner.split_ascii_whitespace() {
                s.apply(rule.as_bytes())?;
            }
            self.selectors.push(s);
        } else if is("clearselectors") {
            self.selectors.truncate(1);
        } else if is("reset") {
            self.nopass = false;
            self.passwords.clear();
            let root = &mut self.selectors[0];
            root.allkeys = false;
            root.keys.clear();
            root.allchannels = allchannels;
            root.channels.clear();
            self.enabled = false;
            self.skip_sanitize = Some(false);
            self.selectors.truncate(1);
            self.selectors[0].set_all(false);
        } else {
            self.selectors[0].apply(op)?;
        }
        Ok(())
    }

    /// The user's rules as ACL LIST shows them (without `user <name>`).
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for flag in self.flags() {
            out.push_str(flag);
            out.push(' ');
        }
        for p in &self.passwords {
            out.push('#');
            out.push_str(p);
            out.push(' ');
        }
        for (i, s) in self.selectors.iter().enumerate() {
            if i == 0 {
                out.push_str(&s.describe());
            } else {
                out.push_str(&format!(" ({})", s.describe()));
            }
        }
        out
    }

    /// The flags, in Redis's order.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        match self.skip_sanitize {
            Some(true) => f.push("skip-sanitize-payload"),
            Some(false) => f.push("sanitize-payload"),
            None => {}
        }
        f
    }

    /// Whether `pass` authenticates this user.
    pub fn password_ok(&self, pass: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        if self.nopass {
            return true;
        }
        let h = hash_password(pass);
        // Every hash is compared, so the time taken does not tell which.
        self.passwords
            .iter()
            .fold(false, |ok, p| ok | constant_eq(p.as_bytes(), h.as_bytes()))
    }
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |d, (x, y)| d | (x ^ y)) == 0
}

/// Joins rules split across arguments into selectors: `(~a`, `+get)`
/// becomes `(~a +get)`. `Err(i)` is the index of an unclosed `(`.
pub fn merge_selectors(args: &[&[u8]]) -> Result<Vec<Vec<u8>>, usize> {
    let mut out = Vec::new();
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (i, a) in args.iter().enumerate() {
        let ends = a.last() == Some(&b')');
        if let Some((_, buf)) = &mut open {
            buf.push(b' ');
            buf.extend_from_slice(a);
            if ends {
                out.push(open.take().expect("open").1);
            }
            continue;
        }
        if a.first() == Some(&b'(') && !ends {
            open = Some((i, a.to_vec()));
            continue;
        }
        out.push(a.to_vec());
    }
    match open {
        Some((i, _)) => Err(i),
        None => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_user_describes_as_redis() {
        assert_eq!(User::default_user().describe(), "on nopass ~* &* +@all");
    }

    #[test]
    fn new_user_and_simple_rules() {
        let mut u = User::new(false);
        assert_eq!(u.describe(), "off resetchannels -@all");
        for op in ["on", ">p", "~k*", "+get", "&ch"] {
            u.apply(op.as_bytes(), false).unwrap();
        }
        assert_eq!(
            u.describe(),
            format!(
                "on #{} ~k* resetchannels &ch -@all +get",
                hash_password(b"p")
            )
        );
        assert!(u.password_ok(b"p"));
        assert!(!u.password_ok(b"q"));
    }

    #[test]
    fn errors() {
        let mut u = User::new(false);
        assert_eq!(u.apply(b"bogus", false), Err(RuleError::Syntax));
        assert_eq!(u.apply(b"+nosuch", false), Err(RuleError::UnknownCommand));
        assert_eq!(u.apply(b"<nope", false), Err(RuleError::NoSuchPassword));
        assert_eq!(u.apply(b"#abc", false), Err(RuleError::BadHash));
        u.apply(b"allkeys", false).unwrap();
        assert_eq!(u.apply(b"~x", false), Err(RuleError::KeyAfterAll));
        assert_eq!(
            u.apply(b"+config|get|x", false),
            Err(RuleError::FirstArgOfSubcommand)
        );
    }

    #[test]
    fn merge() {
        let a: Vec<&[u8]> = vec![b"on", b"(~a", b"+get)", b"(+set)"];
        assert_eq!(
            merge_selectors(&a).unwrap(),
            vec![b"on".to_vec(), b"(~a +get)".to_vec(), b"(+set)".to_vec()]
        );
        assert_eq!(merge_selectors(&[b"(x".as_slice()]), Err(0));
    }
}

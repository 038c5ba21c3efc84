//! The command table. Every command cairn supports has exactly one row here:
//! routing, arity checks, COMMAND INFO/DOCS/GETKEYS and (later) cluster and
//! WATCH checks read it; nothing else re-derives a command's keys.

use super::args::Args;
use crate::families::{
    acl, bits, blocking, cluster, debug, dump, functions, generic, geo, hash, hll, latency, list,
    lolwut, memory, module, object, persistence, pubsub, scripting, server, set, slowlog, sort,
    stream, string, transaction, zset,
};
use crate::net::session::{Action, Session};

/// Where a command's keys are among its arguments.
#[derive(Debug, Clone, Copy)]
pub enum KeySpec {
    /// No keys.
    None,
    /// Keys at `first..=last` (negative `last` counts from the end) every
    /// `step` arguments, as Redis's (first, last, step).
    Range {
        /// Index of the first key.
        first: i32,
        /// Index of the last key; -1 = the last argument.
        last: i32,
        /// Distance between keys.
        step: i32,
    },
    /// The keys follow the STREAMS keyword (searched from `from`) and
    /// fill the first half of what is after it (XREAD, XREADGROUP).
    Streams {
        /// Index the keyword search starts at.
        from: usize,
    },
    /// The argument at `numkeys` says how many keys follow from `first`
    /// (SINTERCARD, ZUNION...), after a destination key at index 1 if
    /// `dest` (ZUNIONSTORE...). Redis calls these keys movable.
    Keynum {
        /// Index of the key count.
        numkeys: usize,
        /// Index of the first counted key.
        first: usize,
        /// Whether argument 1 is a destination key.
        dest: bool,
    },
}

/// A handler: parses the arguments on the connection and returns what to do.
pub type Handler = fn(&mut Session, Args) -> Action;

/// One row of the table.
pub struct CommandSpec {
    /// Lowercase name.
    pub name: &'static str,
    /// Redis arity: N = exactly N arguments (with the name), -N = at least N.
    pub arity: i32,
    /// Command flags as COMMAND INFO lists them.
    pub flags: &'static str,
    /// `flags` as bits (see [`flag`]), for [`CommandSpec::has`].
    pub flag_bits: u32,
    /// Where the keys are.
    pub keys: KeySpec,
    /// Key-spec flags for COMMAND INFO (RO, RW, OW, RM, ACCESS, UPDATE...),
    /// then optionally ` | notes`; `FIRST; REST` when the first key's flags
    /// differ from the other keys'.
    pub key_flags: &'static str,
    /// ACL categories, space separated.
    pub acl: &'static str,
    /// COMMAND DOCS group.
    pub group: &'static str,
    /// Redis version that introduced the command.
    pub since: &'static str,
    /// One-line description for COMMAND DOCS.
    pub summary: &'static str,
    /// Argument synopsis for COMMAND DOCS (see `docs`).
    pub syntax: &'static str,
    /// Command tips (e.g. nondeterministic_output).
    pub tips: &'static str,
    /// The handler.
    pub handler: Handler,
}

impl CommandSpec {
    /// Whether the argument count is acceptable.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let a = self.arity;
        if a >= 0 {
            argc == a as usize
        } else {
            argc >= (-a) as usize
        }
    }

    /// Whether Redis 7.0 flags the command `may_replicate`, a flag COMMAND
    /// INFO does not show: commands that are not writes but propagate
    /// (PUBLISH, SPUBLISH, PFCOUNT's cached cardinality, scripts).
    /// Read-only scripts refuse them like writes, and CLIENT PAUSE WRITE
    /// holds them.
    pub fn may_replicate(&self) -> bool {
        matches!(
            self.name,
            "publish" | "spublish" | "pfcount" | "eval" | "evalsha" | "fcall"
        )
    }

    /// Whether a flag (a [`flag`] constant) is set. Asked several times per
    /// command (and per `redis.call`): a scan of the flag words was ~230
    /// instructions a question.
    pub fn has(&self, flag: u32) -> bool {
        self.flag_bits & flag != 0
    }

    /// The key-spec flags (`RW ACCESS DELETE`...) of the key at index `pos`
    /// of `argv`, as COMMAND GETKEYSANDFLAGS reports them: per spec, and for
    /// SET and BITFIELD decided by their arguments as Redis does.
    pub fn flags_of_key(&self, argv: &[bytes::Bytes], pos: usize) -> &'static str {
        let has = |words: &[&str]| {
            argv.iter()
                .skip(2)
                .any(|a| words.iter().any(|w| a.eq_ignore_ascii_case(w.as_bytes())))
        };
        match (self.name, self.keys) {
            ("set", _) if has(&["get"]) => "RW ACCESS UPDATE",
            ("set", _) => "OW UPDATE",
            ("bitfield", _) if has(&["set", "incrby"]) => "RW ACCESS UPDATE",
            ("bitfield", _) => "RO ACCESS",
            ("sort", _) if pos != 1 => "OW UPDATE",
            ("georadius" | "georadiusbymember", _) if pos != 1 => "OW UPDATE",
            (_, KeySpec::Keynum { dest: true, .. }) if pos != 1 => "RO ACCESS",
            (_, KeySpec::Range { first, .. }) => match self.key_flags.split_once("; ") {
                Some((head, _)) if pos == first as usize => head,
                Some((_, rest)) => rest,
                None => self.key_flags,
            },
            _ => self.key_flags,
        }
    }

    /// The indexes of the keys in `argv`.
    pub fn key_positions(&self, argv: &[bytes::Bytes]) -> Vec<usize> {
        if self.name == "sort" {
            return sort_key_positions(argv);
        }
        let argc = argv.len();
        if let Some(from) = match self.name {
            "georadius" => Some(6),
            "georadiusbymember" => Some(5),
            _ => None,
        } {
            // The source, then the argument after the first STORE and the
            // first STOREDIST (Redis 7.0 finds them by its key specs).
            let mut keys = vec![1];
            for word in [&b"store"[..], b"storedist"] {
                let at = (from..argc).find(|&i| argv[i].eq_ignore_ascii_case(word));
                if let Some(i) = at.filter(|&i| i + 1 < argc) {
                    keys.push(i + 1);
                }
            }
            return keys;
        }
        if self.name == "migrate" {
            // The key at 3, or (when it is empty) those after KEYS.
            let keys = (6..argc).find(|&i| argv[i].eq_ignore_ascii_case(b"keys"));
            return match keys {
                Some(k) if argv.get(3).is_some_and(|a| a.is_empty()) => (k + 1..argc).collect(),
                _ if argc > 3 => vec![3],
                _ => Vec::new(),
            };
        }
        match self.keys {
            KeySpec::None => Vec::new(),
            KeySpec::Streams { from } => match argv
                .iter()
                .skip(from)
                .position(|a| a.eq_ignore_ascii_case(b"streams"))
            {
                Some(p) => {
                    let first = from + p + 1;
                    (first..first + (argc - first) / 2).collect()
                }
                None => Vec::new(),
            },
            KeySpec::Keynum {
                numkeys,
                first,
                dest,
            } => {
                // The key specs read the count strictly (Redis: invalid).
                let n = argv
                    .get(numkeys)
                    .and_then(|a| crate::util::num::parse_i64(a));
                counted_keys(argc, n.unwrap_or(0), first, dest)
            }
            KeySpec::Range { first, last, step } => {
                let last = if last < 0 {
                    argc as i32 + last
                } else {
                    last.min(argc as i32 - 1)
                };
                (first..=last)
                    .step_by(step.max(1) as usize)
                    .filter(|&i| i > 0 && (i as usize) < argc)
                    .map(|i| i as usize)
                    .collect()
            }
        }
    }

    /// The indexes of the keys cluster routing checks (and a script's call
    /// in cluster mode), as Redis's getKeysFromCommand finds them: through
    /// the command's own key finder where Redis has one, which reads a
    /// malformed call differently from the key specs that ACL and COMMAND
    /// GETKEYS go by ([`CommandSpec::key_positions`]). A call whose keys
    /// that finder cannot place routes as keyless, runs, and fails with
    /// its own error (an odd XREAD, `LMPOP 5 a b LEFT`).
    pub fn routing_key_positions(&self, argv: &[bytes::Bytes]) -> Vec<usize> {
        let argc = argv.len();
        match (self.name, self.keys) {
            ("xread" | "xreadgroup", _) => xread_key_positions(argv),
            ("georadius" | "georadiusbymember", _) => {
                // The last STORE or STOREDIST names the destination, as
                // in the command itself; Redis's georadiusGetKeys looks from
                // argument 5 for both commands.
                let mut keys = vec![1];
                let mut i = 5;
                let mut dest = None;
                while i < argc {
                    let word = &argv[i];
                    if (word.eq_ignore_ascii_case(b"store")
                        || word.eq_ignore_ascii_case(b"storedist"))
                        && i + 1 < argc
                    {
                        dest = Some(i + 1);
                        i += 1;
                    }
                    i += 1;
                }
                keys.extend(dest);
                keys
            }
            (
                _,
                KeySpec::Keynum {
                    numkeys,
                    first,
                    dest,
                },
            ) => {
                // Redis's genericGetKeys reads the count with atoi ("2x"
                // is 2).
                let n = argv.get(numkeys).map_or(0, |a| crate::util::num::atoi(a));
                counted_keys(argc, n, first, dest)
            }
            _ => self.key_positions(argv),
        }
    }
}

/// The keys a count `n` places from `first` of `argc` arguments, after a
/// destination at 1 if `dest`: none for a count below 1 or one that runs
/// past the arguments, as Redis treats both.
fn counted_keys(argc: usize, n: i64, first: usize, dest: bool) -> Vec<usize> {
    if n < 1 || n as u64 > argc.saturating_sub(first) as u64 {
        return Vec::new();
    }
    let counted = first..first + n as usize;
    dest.then_some(1).into_iter().chain(counted).collect()
}

/// XREAD's and XREADGROUP's keys as Redis's xreadGetKeys finds them: the
/// options before STREAMS are walked (BLOCK, COUNT and GROUP skip their
/// arguments, NOACK stands alone) and any other word ends the walk with no
/// keys, as does an odd or empty list after STREAMS; the keys are its
/// first half.
fn xread_key_positions(argv: &[bytes::Bytes]) -> Vec<usize> {
    let word = |i: usize, w: &str| argv[i].eq_ignore_ascii_case(w.as_bytes());
    let mut i = 1;
    let mut streams = None;
    while i < argv.len() {
        if word(i, "block") || word(i, "count") {
            i += 1;
        } else if word(i, "group") {
            i += 2;
        } else if word(i, "streams") {
            streams = Some(i);
            break;
        } else if !word(i, "noack") {
            break;
        }
        i += 1;
    }
    let Some(at) = streams else {
        return Vec::new();
    };
    let rest = argv.len() - at - 1;
    if rest == 0 || !rest.is_multiple_of(2) {
        return Vec::new();
    }
    (at + 1..at + 1 + rest / 2).collect()
}

/// SORT's keys as Redis's sortGetKeys finds them: the source, then the
/// destination of the last STORE. LIMIT's two arguments and BY's and GET's
/// one are skipped; any other word is taken alone (so `STORE STORE x`
/// names `x`, unlike SORT itself).
fn sort_key_positions(argv: &[bytes::Bytes]) -> Vec<usize> {
    let word = |i: usize, w: &str| argv[i].eq_ignore_ascii_case(w.as_bytes());
    let mut store = None;
    let mut i = 2;
    while i < argv.len() {
        if word(i, "limit") {
            i += 2;
        } else if word(i, "get") || word(i, "by") {
            i += 1;
        } else if word(i, "store") && i + 1 < argv.len() {
            store = Some(i + 1);
        }
        i += 1;
    }
    std::iter::once(1).chain(store).collect()
}

/// Whether a command's keys also hide in its options, where no key spec
/// can place them (SORT's BY/GET patterns and STORE): Redis gives such
/// commands key specs of unknown shape and reports them movable.
pub fn has_unknown_keys(name: &str) -> bool {
    matches!(name, "sort" | "sort_ro")
}

/// The command flags the table uses, a bit each in
/// [`CommandSpec::flag_bits`], in this order.
const FLAG_NAMES: [&str; 19] = [
    "write",
    "readonly",
    "denyoom",
    "admin",
    "pubsub",
    "noscript",
    "blocking",
    "loading",
    "stale",
    "skip_monitor",
    "skip_slowlog",
    "asking",
    "fast",
    "no_auth",
    "no_async_loading",
    "no_multi",
    "no_mandatory_keys",
    "allow_busy",
    "movablekeys",
];

/// The bits of the command flags, for [`CommandSpec::has`].
pub mod flag {
    /// `write`.
    pub const WRITE: u32 = 1 << 0;
    /// `readonly`.
    pub const READONLY: u32 = 1 << 1;
    /// `admin`.
    pub const ADMIN: u32 = 1 << 3;
    /// `noscript`.
    pub const NOSCRIPT: u32 = 1 << 5;
    /// `loading`.
    pub const LOADING: u32 = 1 << 7;
    /// `stale`.
    pub const STALE: u32 = 1 << 8;
    /// `skip_monitor`.
    pub const SKIP_MONITOR: u32 = 1 << 9;
    /// `skip_slowlog`.
    pub const SKIP_SLOWLOG: u32 = 1 << 10;
    /// `asking`.
    pub const ASKING: u32 = 1 << 11;
    /// `fast`.
    pub const FAST: u32 = 1 << 12;
    /// `no_auth`.
    pub const NO_AUTH: u32 = 1 << 13;
    /// `no_multi`.
    pub const NO_MULTI: u32 = 1 << 15;
    /// `no_mandatory_keys`.
    pub const NO_MANDATORY_KEYS: u32 = 1 << 16;
    /// `allow_busy`.
    pub const ALLOW_BUSY: u32 = 1 << 17;
}

/// Whether two byte strings are equal, at compile time.
const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The bits of a space-separated flag list; a word not in [`FLAG_NAMES`]
/// fails the build.
const fn flag_bits(list: &str) -> u32 {
    let b = list.as_bytes();
    let (mut bits, mut start, mut i) = (0, 0, 0);
    while i <= b.len() {
        if i == b.len() || b[i] == b' ' {
            if i > start {
                let word = b.split_at(i).0.split_at(start).1;
                let mut n = 0;
                while n < FLAG_NAMES.len() && !same(FLAG_NAMES[n].as_bytes(), word) {
                    n += 1;
                }
                assert!(n < FLAG_NAMES.len(), "a command flag without a bit");
                bits |= 1 << n;
            }
            start = i + 1;
        }
        i += 1;
    }
    bits
}

macro_rules! commands {
    ($(#[$doc:meta])* $table:ident;
     $( $name:literal, $arity:expr, $flags:literal, ($f:expr, $l:expr, $s:expr), $kflags:literal,
        $acl:literal, $group:literal, $since:literal, $handler:path, $summary:literal, $syntax:literal, $tips:literal; )*) => {
        $(#[$doc])*
        pub static $table: &[CommandSpec] = &[$(
            CommandSpec {
                name: $name,
                arity: $arity,
                flags: $flags,
                flag_bits: const { flag_bits($flags) },
                // (0, 0, 0): no keys; (-n, 0, 0): keys after STREAMS,
                // searched from n; (n, f, 0): the count is at n and the
                // keys start at f; (n, f, -1): the same after a
                // destination key at 1; otherwise (first, last, step).
                keys: if $f == 0 {
                    KeySpec::None
                } else if $f < 0 {
                    KeySpec::Streams { from: (-($f as i32)) as usize }
                } else if $s <= 0 {
                    KeySpec::Keynum {
                        numkeys: ($f as i32) as usize,
                        first: ($l as i32) as usize,
                        dest: $s < 0,
                    }
                } else {
                    KeySpec::Range { first: $f, last: $l, step: $s }
                },
                key_flags: $kflags,
                acl: $acl,
                group: $group,
                since: $since,
                summary: $summary,
                syntax: $syntax,
                tips: $tips,
                handler: $handler,
            },
        )*];
    };
}

commands! {
    /// Every command, sorted by name.
    TABLE;
    "acl", -2, "", (0, 0, 0), "", "@slow", "server", "6.0.0", acl::acl,
        "A container for Access List Control commands", "subcommand [arg ...]", "";
    "append", 3, "write denyoom fast", (1, 1, 1), "RW INSERT", "@write @string @fast", "string", "2.0.0", string::append,
        "Append a value to a key.", "key value", "";
    "asking", 1, "fast", (0, 0, 0), "", "@fast @connection", "cluster", "3.0.0", cluster::asking,
        "Sent by cluster clients after an -ASK redirect", "", "";
    "auth", -2, "noscript loading stale fast no_auth allow_busy", (0, 0, 0), "", "@fast @connection", "connection", "1.0.0", server::auth,
        "Authenticate to the server.", "[username] password", "";
    "bgrewriteaof", 1, "admin noscript no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "server", "1.0.0", persistence::bgrewriteaof,
        "Asynchronously rewrite the append-only file", "", "";
    "bgsave", -1, "admin noscript no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "server", "1.0.0", persistence::bgsave,
        "Asynchronously save the dataset to disk", "[SCHEDULE]", "";
    "bitcount", -2, "readonly", (1, 1, 1), "RO ACCESS", "@read @bitmap @slow", "bitmap", "2.6.0", bits::bitcount,
        "Count set bits in a string.", "key [start end [BYTE|BIT]]", "";
    "bitfield", -2, "write denyoom", (1, 1, 1), "RW ACCESS UPDATE VARIABLE_FLAGS | This command allows both access and modification of the key", "@write @bitmap @slow", "bitmap", "3.2.0", bits::bitfield,
        "Perform arbitrary bitfield integer operations on strings.", "key [GET encoding offset|[OVERFLOW WRAP|SAT|FAIL] SET encoding offset value|INCRBY encoding offset increment ...]", "";
    "bitfield_ro", -2, "readonly fast", (1, 1, 1), "RO ACCESS", "@read @bitmap @fast", "bitmap", "6.0.0", bits::bitfield_ro,
        "Perform arbitrary bitfield integer operations on strings. Read-only variant of BITFIELD.", "key [GET encoding offset ...]", "";
    "bitop", -4, "write denyoom", (2, -1, 1), "OW UPDATE; RO ACCESS", "@write @bitmap @slow", "bitmap", "2.6.0", bits::bitop,
        "Perform bitwise operations between strings.", "operation destkey key [key ...]", "";
    "bitpos", -3, "readonly", (1, 1, 1), "RO ACCESS", "@read @bitmap @slow", "bitmap", "2.8.7", bits::bitpos,
        "Find first bit set or clear in a string.", "key bit [start [end [BYTE|BIT]]]", "";
    "blmove", 6, "write denyoom noscript blocking", (1, 2, 1), "RW ACCESS DELETE; RW INSERT", "@write @list @slow @blocking", "list", "6.2.0", blocking::blmove,
        "Pop an element from a list, push it to another list and return it; or block until one is available.", "source destination LEFT|RIGHT LEFT|RIGHT timeout", "";
    "blmpop", -5, "write blocking", (2, 3, 0), "RW ACCESS DELETE", "@write @list @slow @blocking", "list", "7.0.0", blocking::blmpop,
        "Pop elements from a list, or block until one is available.", "timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]", "";
    "blpop", -3, "write noscript blocking", (1, -2, 1), "RW ACCESS DELETE", "@write @list @slow @blocking", "list", "2.0.0", blocking::blpop,
        "Remove and get the first element in a list, or block until one is available.", "key [key ...] timeout", "";
    "brpop", -3, "write noscript blocking", (1, -2, 1), "RW ACCESS DELETE", "@write @list @slow @blocking", "list", "2.0.0", blocking::brpop,
        "Remove and get the last element in a list, or block until one is available.", "key [key ...] timeout", "";
    "brpoplpush", 4, "write denyoom noscript blocking", (1, 2, 1), "RW ACCESS DELETE; RW INSERT", "@write @list @slow @blocking", "list", "2.2.0", blocking::brpoplpush,
        "Pop an element from a list, push it to another list and return it; or block until one is available.", "source destination timeout", "";
    "bzmpop", -5, "write blocking", (2, 3, 0), "RW ACCESS DELETE", "@write @sortedset @slow @blocking", "sorted-set", "7.0.0", blocking::bzmpop,
        "Remove and return members with scores in a sorted set or block until one is available.", "timeout numkeys key [key ...] MIN|MAX [COUNT count]", "";
    "bzpopmax", -3, "write noscript blocking fast", (1, -2, 1), "RW ACCESS DELETE", "@write @sortedset @fast @blocking", "sorted-set", "5.0.0", blocking::bzpopmax,
        "Remove and return the member with the highest score from one or more sorted sets, or block until one is available.", "key [key ...] timeout", "";
    "bzpopmin", -3, "write noscript blocking fast", (1, -2, 1), "RW ACCESS DELETE", "@write @sortedset @fast @blocking", "sorted-set", "5.0.0", blocking::bzpopmin,
        "Remove and return the member with the lowest score from one or more sorted sets, or block until one is available.", "key [key ...] timeout", "";
    "client", -2, "", (0, 0, 0), "", "@slow", "connection", "2.4.0", server::client,
        "A container for client connection commands.", "subcommand [arg ...]", "";
    "cluster", -2, "", (0, 0, 0), "", "@slow", "cluster", "3.0.0", cluster::cluster,
        "A container for cluster commands", "", "";
    "command", -1, "loading stale", (0, 0, 0), "", "@slow @connection", "server", "2.8.13", server::command,
        "Get array of Redis command details.", "[subcommand [arg ...]]", "nondeterministic_output_order";
    "config", -2, "", (0, 0, 0), "", "@slow", "server", "2.0.0", server::config,
        "A container for server configuration commands.", "subcommand [arg ...]", "";
    "copy", -3, "write denyoom", (1, 2, 1), "RO ACCESS; OW UPDATE", "@keyspace @write @slow", "generic", "6.2.0", generic::copy,
        "Copy a key.", "source destination [DB destination-db] [REPLACE]", "";
    "dbsize", 1, "readonly fast", (0, 0, 0), "", "@keyspace @read @fast", "server", "1.0.0", generic::dbsize,
        "Return the number of keys in the selected database.", "", "request_policy:all_shards response_policy:agg_sum";
    "debug", -2, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "1.0.0", debug::debug,
        "A container for debugging commands", "", "";
    "decr", 2, "write denyoom fast", (1, 1, 1), "RW ACCESS UPDATE", "@write @string @fast", "string", "1.0.0", string::decr,
        "Decrement the integer value of a key by one.", "key", "";
    "decrby", 3, "write denyoom fast", (1, 1, 1), "RW ACCESS UPDATE", "@write @string @fast", "string", "1.0.0", string::decrby,
        "Decrement the integer value of a key by the given number.", "key decrement", "";
    "del", -2, "write", (1, -1, 1), "RM DELETE", "@keyspace @write @slow", "generic", "1.0.0", generic::del,
        "Delete a key.", "key [key ...]", "request_policy:multi_shard response_policy:agg_sum";
    "discard", 1, "noscript loading stale fast allow_busy", (0, 0, 0), "", "@fast @transaction", "transactions", "2.0.0", transaction::discard,
        "Discard all commands issued after MULTI.", "", "";
    "dump", 2, "readonly", (1, 1, 1), "RO ACCESS", "@keyspace @read @slow", "generic", "2.6.0", dump::dump,
        "Return a serialized version of the value stored at the specified key.", "key", "nondeterministic_output";
    "echo", 2, "loading stale fast", (0, 0, 0), "", "@fast @connection", "connection", "1.0.0", server::echo,
        "Echo the given string.", "message", "";
    "eval", -3, "noscript stale skip_monitor no_mandatory_keys", (2, 3, 0), "RW ACCESS UPDATE | We cannot tell how the keys will be used so we assume the worst, RW and UPDATE", "@slow @scripting", "scripting", "2.6.0", scripting::eval,
        "Execute a Lua script server side.", "script numkeys [key [key ...]] [arg [arg ...]]", "";
    "eval_ro", -3, "readonly noscript stale skip_monitor no_mandatory_keys", (2, 3, 0), "RO ACCESS | We cannot tell how the keys will be used so we assume the worst, RO and ACCESS", "@slow @scripting", "scripting", "7.0.0", scripting::eval_ro,
        "Execute a read-only Lua script server side.", "script numkeys [key [key ...]] [arg [arg ...]]", "";
    "evalsha", -3, "noscript stale skip_monitor no_mandatory_keys", (2, 3, 0), "RW ACCESS UPDATE", "@slow @scripting", "scripting", "2.6.0", scripting::evalsha,
        "Execute a Lua script server side.", "sha1 numkeys [key [key ...]] [arg [arg ...]]", "";
    "evalsha_ro", -3, "readonly noscript stale skip_monitor no_mandatory_keys", (2, 3, 0), "RO ACCESS", "@slow @scripting", "scripting", "7.0.0", scripting::evalsha_ro,
        "Execute a read-only Lua script server side.", "sha1 numkeys [key [key ...]] [arg [arg ...]]", "";
    "exec", 1, "noscript loading stale skip_slowlog", (0, 0, 0), "", "@slow @transaction", "transactions", "1.2.0", transaction::exec,
        "Execute all commands issued after MULTI.", "", "";
    "exists", -2, "readonly fast", (1, -1, 1), "RO", "@keyspace @read @fast", "generic", "1.0.0", generic::exists,
        "Determine if a key exists.", "key [key ...]", "request_policy:multi_shard response_policy:agg_sum";
    "expire", -3, "write fast", (1, 1, 1), "RW UPDATE", "@keyspace @write @fast", "generic", "1.0.0", generic::expire,
        "Set a key's time to live in seconds.", "key seconds [NX|XX|GT|LT]", "";
    "expireat", -3, "write fast", (1, 1, 1), "RW UPDATE", "@keyspace @write @fast", "generic", "1.2.0", generic::expireat,
        "Set the expiration for a key as a UNIX timestamp.", "key unix-time-seconds [NX|XX|GT|LT]", "";
    "expiretime", 2, "readonly fast", (1, 1, 1), "RO ACCESS", "@keyspace @read @fast", "generic", "7.0.0", generic::expiretime,
        "Get the expiration Unix timestamp for a key.", "key", "";
    "fcall", -3, "noscript stale skip_monitor no_mandatory_keys", (2, 3, 0), "RW ACCESS UPDATE | We cannot tell how the keys will be used so we assume the worst, RW and UPDATE", "@slow @scripting", "scripting", "7.0.0", functions::fcall,
        "Invoke a function.", "function numkeys [key [key ...]] [arg [arg ...]]", "";
    "fcall_ro", -3, "readonly noscript stale skip_monitor no_mandatory_keys", (2, 3, 0), "RO ACCESS | We cannot tell how the keys will be used so we assume the worst, RO and ACCESS", "@slow @scripting", "scripting", "7.0.0", functions::fcall_ro,
        "Invoke a read-only function.", "function numkeys [key [key ...]] [arg [arg ...]]", "";
    "flushall", -1, "write", (0, 0, 0), "", "@keyspace @write @slow @dangerous", "server", "1.0.0", generic::flushall,
        "Remove all keys from all databases.", "[ASYNC|SYNC]", "request_policy:all_shards response_policy:all_succeeded";
    "flushdb", -1, "write", (0, 0, 0), "", "@keyspace @write @slow @dangerous", "server", "1.0.0", generic::flushdb,
        "Remove all keys from the current database.", "[ASYNC|SYNC]", "request_policy:all_shards response_policy:all_succeeded";
    "function", -2, "", (0, 0, 0), "", "@slow", "scripting", "7.0.0", functions::function,
        "A container for function commands.", "subcommand [arg ...]", "";
    "geoadd", -5, "write denyoom", (1, 1, 1), "RW UPDATE", "@write @geo @slow", "geo", "3.2.0", geo::geoadd,
        "Add one or more geospatial items in the geospatial index represented using a sorted set", "key [NX|XX] [CH] longitude latitude member [longitude latitude member ...]", "";
    "geodist", -4, "readonly", (1, 1, 1), "RO ACCESS", "@read @geo @slow", "geo", "3.2.0", geo::geodist,
        "Returns the distance between two members of a geospatial index", "key member1 member2 [M|KM|FT|MI]", "";
    "geohash", -2, "readonly", (1, 1, 1), "RO ACCESS", "@read @geo @slow", "geo", "3.2.0", geo::geohash,
        "Returns members of a geospatial index as standard geohash strings", "key [member [member ...]]", "";
    "geopos", -2, "readonly", (1, 1, 1), "RO ACCESS", "@read @geo @slow", "geo", "3.2.0", geo::geopos,
        "Returns longitude and latitude of members of a geospatial index", "key [member [member ...]]", "";
    "georadius", -6, "write denyoom movablekeys", (1, 1, 1), "RO ACCESS", "@write @geo @slow", "geo", "3.2.0", geo::georadius,
        "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a point", "key longitude latitude radius M|KM|FT|MI [WITHCOORD] [WITHDIST] [WITHHASH] [COUNT count [ANY]] [ASC|DESC] [STORE key] [STOREDIST key]", "";
    "georadius_ro", -6, "readonly", (1, 1, 1), "RO ACCESS", "@read @geo @slow", "geo", "3.2.10", geo::georadius_ro,
        "A read-only variant for GEORADIUS", "key longitude latitude radius M|KM|FT|MI [WITHCOORD] [WITHDIST] [WITHHASH] [COUNT count [ANY]] [ASC|DESC]", "";
    "georadiusbymember", -5, "write denyoom movablekeys", (1, 1, 1), "RO ACCESS", "@write @geo @slow", "geo", "3.2.0", geo::georadiusbymember,
        "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a member", "key member radius M|KM|FT|MI [WITHCOORD] [WITHDIST] [WITHHASH] [COUNT count [ANY]] [ASC|DESC] [STORE key] [STOREDIST key]", "";
    "georadiusbymember_ro", -5, "readonly", (1, 1, 1), "RO ACCESS", "@read @geo @slow", "geo", "3.2.10", geo::georadiusbymember_ro,
        "A read-only variant for GEORADIUSBYMEMBER", "key member radius M|KM|FT|MI [WITHCOORD] [WITHDIST] [WITHHASH] [COUNT count [ANY]] [ASC|DESC]", "";
    "geosearch", -7, "readonly", (1, 1, 1), "RO ACCESS", "@read @geo @slow", "geo", "6.2.0", geo::geosearch,
        "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle.", "key FROMMEMBER member|FROMLONLAT longitude latitude BYRADIUS radius M|KM|FT|MI|BYBOX width height M|KM|FT|MI [ASC|DESC] [COUNT count [ANY]] [WITHCOORD] [WITHDIST] [WITHHASH]", "";
    "geosearchstore", -8, "write denyoom", (1, 2, 1), "OW UPDATE; RO ACCESS", "@write @geo @slow", "geo", "6.2.0", geo::geosearchstore,
        "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle, and store the result in another key.", "destination source FROMMEMBER member|FROMLONLAT longitude latitude BYRADIUS radius M|KM|FT|MI|BYBOX width height M|KM|FT|MI [ASC|DESC] [COUNT count [ANY]] [STOREDIST]", "";
    "get", 2, "readonly fast", (1, 1, 1), "RO ACCESS", "@read @string @fast", "string", "1.0.0", string::get,
        "Get the value of a key.", "key", "";
    "getbit", 3, "readonly fast", (1, 1, 1), "RO ACCESS", "@read @bitmap @fast", "bitmap", "2.2.0", bits::getbit,
        "Returns the bit value at offset in the string value stored at key.", "key offset", "";
    "getdel", 2, "write fast", (1, 1, 1), "RW ACCESS DELETE", "@write @string @fast", "string", "6.2.0", string::getdel,
        "Get the value of a key and delete the key.", "key", "";
    "getex", -2, "write fast", (1, 1, 1), "RW ACCESS UPDATE | RW and UPDATE because it changes the TTL", "@write @string @fast", "string", "6.2.0", string::getex,
        "Get the value of a key and optionally set its expiration.", "key [EX seconds|PX milliseconds|EXAT unix-time-seconds|PXAT unix-time-milliseconds|PERSIST]", "";
    "getrange", 4, "readonly", (1, 1, 1), "RO ACCESS", "@read @string @slow", "string", "2.4.0", string::getrange,
        "Get a substring of the string stored at a key.", "key start end", "";
    "getset", 3, "write denyoom fast", (1, 1, 1), "RW ACCESS UPDATE", "@write @string @fast", "string", "1.0.0", string::getset,
        "Set the string value of a key and return its old value.", "key value", "";
    "hdel", -3, "write fast", (1, 1, 1), "RW DELETE", "@write @hash @fast", "hash", "2.0.0", hash::hdel,
        "Delete one or more hash fields.", "key field [field ...]", "";
    "hello", -1, "noscript loading stale fast no_auth allow_busy", (0, 0, 0), "", "@fast @connection", "connection", "6.0.0", server::hello,
        "Handshake with Redis.", "[protover [AUTH username password] [SETNAME clientname]]", "";
    "hexists", 3, "readonly fast", (1, 1, 1), "RO", "@read @hash @fast", "hash", "2.0.0", hash::hexists,
        "Determine if a hash field exists.", "key field", "";
    "hget", 3, "readonly fast", (1, 1, 1), "RO ACCESS", "@read @hash @fast", "hash", "2.0.0", hash::hget,
        "Get the value of a hash field.", "key field", "";
    "hgetall", 2, "readonly", (1, 1, 1), "RO ACCESS", "@read @hash @slow", "hash", "2.0.0", hash::hgetall,
        "Get all the fields and values in a hash.", "key", "nondeterministic_output_order";
    "hincrby", 4, "write denyoom fast", (1, 1, 1), "RW ACCESS UPDATE", "@write @hash @fast", "hash", "2.0.0", hash::hincrby,
        "Increment the integer value of a hash field by the given number.", "key field increment", "";
    "hincrbyfloat", 4, "write denyoom fast", (1, 1, 1), "RW ACCESS UPDATE", "@write @hash @fast", "hash", "2.6.0", hash::hincrbyfloat,
        "Increment the float value of a hash field by the given amount.", "key field increment", "";
    "hkeys", 2, "readonly", (1, 1, 1), "RO ACCESS", "@read @hash @slow", "hash", "2.0.0", hash::hkeys,
        "Get all the fields in a hash.", "key", "nondeterministic_output_order";
    "hlen", 2, "readonly fast", (1, 1, 1), "RO", "@read @hash @fast", "hash", "2.0.0", hash::hlen,
        "Get the number of fields in a hash.", "key", "";
    "hmget", -3, "readonly fast", (1, 1, 1), "RO ACCESS", "@read @hash @fast", "hash", "2.0.0", hash::hmget,
        "Get the values of all the given hash fields.", "key field [field ...]", "";
    "hmset", -4, "write denyoom fast", (1, 1, 1), "RW UPDATE", "@write @hash @fast", "hash", "2.0.0", hash::hmset,
        "Set multiple hash fields to multiple values.", "key field value [field value ...]", "";
    "hrandfield", -2, "readonly", (1, 1, 1), "RO ACCESS", "@read @hash @slow", "hash", "6.2.0", hash::hrandfield,
        "Get one or multiple random fields from a hash.", "key [count [WITHVALUES]]", "nondeterministic_output";
    "hscan", -3, "readonly", (1, 1, 1), "RO ACCESS", "@read @hash @slow", "hash", "2.8.0", hash::hscan,
        "Incrementally iterate hash fields and associated values.", "key cursor [MATCH pattern] [COUNT count]", "nondeterministic_output";
    "hset", -4, "write denyoom fast", (1, 1, 1), "RW UPDATE", "@write @hash @fast", "hash", "2.0.0", hash::hset,
        "Set the string value of a hash field.", "key field value [field value ...]", "";
    "hsetnx", 4, "write denyoom fast", (1, 1, 1), "RW INSERT", "@write @hash @fast", "hash", "2.0.0", hash::hsetnx,
        "Set the value of a hash field, only if the field does not exist.", "key field value", "";
    "hstrlen", 3, "readonly fast", (1, 1, 1), "RO", "@read @hash @fast", "hash", "3.2.0", hash::hstrlen,
        "Get the length of the value of a hash field.", "key field", "";
    "hvals", 2, "readonly", (1, 1, 1), "RO ACCESS", "@read @hash @slow", "hash", "2.0.0", hash::hvals,
        "Get all the values in a hash.", "key", "nondeterministic_output_order";
    "incr", 2, "write denyoom fast", (1, 1, 1), "RW ACCESS UPDATE", "@write @string @fast", "string", "1.0.0", string::incr,
        "Increment the integer value of a key by one.", "key", "";
    "incrby", 3, "write denyoom fast", (1, 1, 1), "RW ACCESS UPDATE", "@write @string @fast", "string", "1.0.0", string::incrby,
        "Increment the integer value of a key by the given amount.", "key increment", "";
    "incrbyfloat", 3, "write denyoom fast", (1, 1, 1), "RW ACCESS UPDATE", "@write @string @fast", "string", "2.6.0", string::incrbyfloat,
        "Increment the float value of a key by the given amount.", "key increment", "";
    "info", -1, "loading stale", (0, 0, 0), "", "@slow @dangerous", "server", "1.0.0", server::info,
        "Get information and statistics about the server.", "[section [section ...]]", "nondeterministic_output request_policy:all_shards response_policy:special";
    "keys", 2, "readonly", (0, 0, 0), "", "@keyspace @read @slow @dangerous", "generic", "1.0.0", generic::keys,
        "Find all keys matching the given pattern.", "pattern", "request_policy:all_shards nondeterministic_output_order";
    "lastsave", 1, "loading stale fast", (0, 0, 0), "", "@admin @fast @dangerous", "server", "1.0.0", server::lastsave,
        "Get the UNIX time stamp of the last successful save to disk.", "", "nondeterministic_output";
    "latency", -2, "", (0, 0, 0), "", "@slow", "server", "2.8.13", latency::latency,
        "A container for latency diagnostics commands", "", "";
    "lcs", -3, "readonly", (1, 2, 1), "RO ACCESS", "@read @string @slow", "string", "7.0.0", string::lcs,
        "Find longest common substring.", "key1 key2 [LEN] [IDX] [MINMATCHLEN min-match-len] [WITHMATCHLEN]", "";
    "lindex", 3, "readonly", (1, 1, 1), "RO ACCESS", "@read @list @slow", "list", "1.0.0", list::lindex,
        "Get an element from a list by its index.", "key index", "";
    "linsert", 5, "write denyoom", (1, 1, 1), "RW INSERT", "@write @list @slow", "list", "2.2.0", list::linsert,
        "Insert an element before or after another element in a list.", "key BEFORE|AFTER pivot element", "";
    "llen", 2, "readonly fast", (1, 1, 1), "RO", "@read @list @fast", "list", "1.0.0", list::llen,
        "Get the length of a list.", "key", "";
    "lmove", 5, "write denyoom", (1, 2, 1), "RW ACCESS DELETE; RW INSERT", "@write @list @slow", "list", "6.2.0", list::lmove,
        "Pop an element from a list, push it to another list and return it.", "source destination LEFT|RIGHT LEFT|RIGHT", "";
    "lmpop", -4, "write", (1, 2, 0), "RW ACCESS DELETE", "@write @list @slow", "list", "7.0.0", list::lmpop,
        "Pop elements from a list.", "numkeys key [key ...] LEFT|RIGHT [COUNT count]", "";
    "lolwut", -1, "readonly fast", (0, 0, 0), "", "@read @fast", "server", "5.0.0", lolwut::lolwut,
        "Display some computer art and the Redis version", "[VERSION version]", "";
    "lpop", -2, "write fast", (1, 1, 1), "RW ACCESS DELETE", "@write @list @fast", "list", "1.0.0", list::lpop,
        "Remove and get the first elements in a list.", "key [count]", "";
    "lpos", -3, "readonly", (1, 1, 1), "RO ACCESS", "@read @list @slow", "list", "6.0.6", list::lpos,
        "Return the index of matching elements on a list.", "key element [RANK rank] [COUNT num-matches] [MAXLEN len]", "";
    "lpush", -3, "write denyoom fast", (1, 1, 1), "RW INSERT", "@write @list @fast", "list", "1.0.0", list::lpush,
        "Prepend one or multiple elements to a list.", "key element [element ...]", "";
    "lpushx", -3, "write denyoom fast", (1, 1, 1), "RW INSERT", "@write @list @fast", "list", "2.2.0", list::lpushx,
        "Prepend an element to a list, only if the list exists.", "key element [element ...]", "";
    "lrange", 4, "readonly", (1, 1, 1), "RO ACCESS", "@read @list @slow", "list", "1.0.0", list::lrange,
        "Get a range of elements from a list.", "key start stop", "";
    "lrem", 4, "write", (1, 1, 1), "RW DELETE", "@write @list @slow", "list", "1.0.0", list::lrem,
        "Remove elements from a list.", "key count element", "";
    "lset", 4, "write denyoom", (1, 1, 1), "RW UPDATE", "@write @list @slow", "list", "1.0.0", list::lset,
        "Set the value of an element in a list by its index.", "key index element", "";
    "ltrim", 4, "write", (1, 1, 1), "RW DELETE", "@write @list @slow", "list", "1.0.0", list::ltrim,
        "Trim a list to the specified range.", "key start stop", "";
    "memory", -2, "", (0, 0, 0), "", "@slow", "server", "4.0.0", memory::memory,
        "A container for memory diagnostics commands", "subcommand [arg ...]", "";
    "mget", -2, "readonly fast", (1, -1, 1), "RO ACCESS", "@read @string @fast", "string", "1.0.0", string::mget,
        "Get the values of all the given keys.", "key [key ...]", "request_policy:multi_shard";
    "migrate", -6, "write movablekeys", (3, 3, 1), "RW ACCESS DELETE", "@keyspace @write @slow @dangerous", "generic", "2.6.0", dump::migrate,
        "Atomically transfer a key from a Redis instance to another one.", "host port key|\"\" destination-db timeout [COPY] [REPLACE] [AUTH password] [AUTH2 username password] [KEYS key [key ...]]", "nondeterministic_output";
    "module", -2, "", (0, 0, 0), "", "@slow", "server", "4.0.0", module::module,
        "A container for module commands", "", "";
    "monitor", 1, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "1.0.0", pubsub::monitor,
        "Listen for all requests received by the server in real time", "", "";
    "move", 3, "write fast", (1, 1, 1), "RW ACCESS UPDATE", "@keyspace @write @fast", "generic", "1.0.0", generic::move_,
        "Move a key to another database.", "key db", "";
    "mset", -3, "write denyoom", (1, -1, 2), "OW UPDATE", "@write @string @slow", "string", "1.0.1", string::mset,
        "Set multiple keys to multiple values.", "key value [key value ...]", "request_policy:multi_shard response_policy:all_succeeded";
    "msetnx", -3, "write denyoom", (1, -1, 2), "OW INSERT", "@write @string @slow", "string", "1.0.1", string::msetnx,
        "Set multiple keys to multiple values, only if none of the keys exist.", "key value [key value ...]", "request_policy:multi_shard response_policy:agg_min";
    "multi", 1, "noscript loading stale fast allow_busy", (0, 0, 0), "", "@fast @transaction", "transactions", "1.2.0", transaction::multi,
        "Mark the start of a transaction block.", "", "";
    "object", -2, "", (0, 0, 0), "", "@slow", "generic", "2.2.3", object::object,
        "A container for object introspection commands", "subcommand [arg ...]", "";
    "persist", 2, "write fast", (1, 1, 1), "RW UPDATE", "@keyspace @write @fast", "generic", "2.2.0", generic::persist,
        "Remove the expiration from a key.", "key", "";
    "pexpire", -3, "write fast", (1, 1, 1), "RW UPDATE", "@keyspace @write @fast", "generic", "2.6.0", generic::pexpire,
        "Set a key's time to live in milliseconds.", "key milliseconds [NX|XX|GT|LT]", "";
    "pexpireat", -3, "write fast", (1, 1, 1), "RW UPDATE", "@keyspace @write @fast", "generic", "2.6.0", generic::pexpireat,
        "Set the expiration for a key as a UNIX timestamp specified in milliseconds.", "key unix-time-milliseconds [NX|XX|GT|LT]", "";
    "pexpiretime", 2, "readonly fast", (1, 1, 1), "RO ACCESS", "@keyspace @read @fast", "generic", "7.0.0", generic::pexpiretime,
        "Get the expiration Unix timestamp for a key in milliseconds.", "key", "";
    "pfadd", -2, "write denyoom fast", (1, 1, 1), "RW INSERT", "@write @hyperloglog @fast", "hyperloglog", "2.8.9", hll::pfadd,
        "Adds the specified elements to the specified HyperLogLog.", "key [element [element ...]]", "";
    "pfcount", -2, "readonly", (1, -1, 1), "RW ACCESS | RW because it may change the internal representation of the key, and propagate to replicas", "@read @hyperloglog @slow", "hyperloglog", "2.8.9", hll::pfcount,
        "Return the approximated cardinality of the set(s) observed by the HyperLogLog at key(s).", "key [key ...]", "";
    "pfdebug", 3, "write denyoom admin", (2, 2, 1), "RW ACCESS", "@write @hyperloglog @admin @slow @dangerous", "hyperloglog", "2.8.9", hll::pfdebug,
        "Internal commands for debugging HyperLogLog values", "subcommand key", "";
    "pfmerge", -2, "write denyoom", (1, -1, 1), "RW ACCESS INSERT; RO ACCESS", "@write @hyperloglog @slow", "hyperloglog", "2.8.9", hll::pfmerge,
        "Merge N different HyperLogLogs into a single one.", "destkey sourcekey [sourcekey ...]", "";
    "pfselftest", 1, "admin", (0, 0, 0), "", "@hyperloglog @admin @slow @dangerous", "hyperloglog", "2.8.9", hll::pfselftest,
        "An internal command for testing HyperLogLog values", "", "";
    "ping", -1, "fast", (0, 0, 0), "", "@fast @connection", "connection", "1.0.0", server::ping,
        "Ping the server.", "[message]", "request_policy:all_shards response_policy:all_succeeded";
    "psetex", 4, "write denyoom", (1, 1, 1), "OW UPDATE", "@write @string @slow", "string", "2.6.0", string::psetex,
        "Set the value and expiration in milliseconds of a key.", "key milliseconds value", "";
    "psubscribe", -2, "pubsub noscript loading stale", (0, 0, 0), "", "@pubsub @slow", "pubsub", "2.0.0", pubsub::psubscribe,
        "Listen for messages published to channels matching the given patterns", "pattern [pattern ...]", "";
    "psync", -3, "admin noscript no_async_loading no_multi", (0, 0, 0), "", "@admin @slow @dangerous", "server", "2.8.0", persistence::sync,
        "Internal command used for replication", "replicationid offset", "";
    "pttl", 2, "readonly fast", (1, 1, 1), "RO ACCESS", "@keyspace @read @fast", "generic", "2.6.0", generic::pttl,
        "Get the time to live for a key in milliseconds.", "key", "nondeterministic_output";
    "publish", 3, "pubsub loading stale fast", (0, 0, 0), "", "@pubsub @fast", "pubsub", "2.0.0", pubsub::publish,
        "Post a message to a channel", "channel message", "";
    "pubsub", -2, "", (0, 0, 0), "", "@slow", "pubsub", "2.8.0", pubsub::pubsub,
        "A container for Pub/Sub commands", "", "";
    "punsubscribe", -1, "pubsub noscript loading stale", (0, 0, 0), "", "@pubsub @slow", "pubsub", "2.0.0", pubsub::punsubscribe,
        "Stop listening for messages posted to channels matching the given patterns", "[pattern [pattern ...]]", "";
    "quit", -1, "noscript loading stale fast no_auth allow_busy", (0, 0, 0), "", "@fast @connection", "connection", "1.0.0", server::quit,
        "Close the connection.", "", "";
    "randomkey", 1, "readonly", (0, 0, 0), "", "@keyspace @read @slow", "generic", "1.0.0", generic::randomkey,
        "Return a random key from the keyspace.", "", "request_policy:all_shards nondeterministic_output";
    "readonly", 1, "loading stale fast", (0, 0, 0), "", "@fast @connection", "cluster", "3.0.0", cluster::read_mode,
        "Enables read queries for a connection to a cluster replica node", "", "";
    "readwrite", 1, "loading stale fast", (0, 0, 0), "", "@fast @connection", "cluster", "3.0.0", cluster::read_mode,
        "Disables read queries for a connection to a cluster replica node", "", "";
    "rename", 3, "write", (1, 2, 1), "RW ACCESS DELETE; OW UPDATE", "@keyspace @write @slow", "generic", "1.0.0", generic::rename,
        "Rename a key.", "key newkey", "";
    "renamenx", 3, "write fast", (1, 2, 1), "RW ACCESS DELETE; OW INSERT", "@keyspace @write @fast", "generic", "1.0.0", generic::renamenx,
        "Rename a key, only if the new key does not exist.", "key newkey", "";
    "replconf", -1, "admin noscript loading stale allow_busy", (0, 0, 0), "", "@admin @slow @dangerous", "server", "3.0.0", persistence::replconf,
        "An internal command for configuring the replication stream", "", "";
    "replicaof", 3, "admin noscript stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "server", "5.0.0", persistence::replicaof,
        "Make the server a replica of another instance, or promote it as master.", "host port|NO ONE", "";
    "reset", 1, "noscript loading stale fast no_auth allow_busy", (0, 0, 0), "", "@fast @connection", "connection", "6.2.0", server::reset,
        "Reset the connection.", "", "";
    "restore", -4, "write denyoom", (1, 1, 1), "OW UPDATE", "@keyspace @write @slow @dangerous", "generic", "2.6.0", dump::restore,
        "Create a key using the provided serialized value, previously obtained using DUMP.", "key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]", "";
    "restore-asking", -4, "write denyoom asking", (1, 1, 1), "OW UPDATE", "@keyspace @write @slow @dangerous", "server", "3.0.0", dump::restore,
        "An internal command for migrating keys in a cluster", "", "";
    "role", 1, "noscript loading stale fast", (0, 0, 0), "", "@admin @fast @dangerous", "server", "2.8.12", persistence::role,
        "Return the role of the instance in the context of replication", "", "";
    "rpop", -2, "write fast", (1, 1, 1), "RW ACCESS DELETE", "@write @list @fast", "list", "1.0.0", list::rpop,
        "Remove and get the last elements in a list.", "key [count]", "";
    "rpoplpush", 3, "write denyoom", (1, 2, 1), "RW ACCESS DELETE; RW INSERT", "@write @list @slow", "list", "1.2.0", list::rpoplpush,
        "Remove the last element in a list, prepend it to another list and return it.", "source destination", "";
    "rpush", -3, "write denyoom fast", (1, 1, 1), "RW INSERT", "@write @list @fast", "list", "1.0.0", list::rpush,
        "Append one or multiple elements to a list.", "key element [element ...]", "";
    "rpushx", -3, "write denyoom fast", (1, 1, 1), "RW INSERT", "@write @list @fast", "list", "2.2.0", list::rpushx,
        "Append an element to a list, only if the list exists.", "key element [element ...]", "";
    "sadd", -3, "write denyoom fast", (1, 1, 1), "RW INSERT", "@write @set @fast", "set", "1.0.0", set::sadd,
        "Add one or more members to a set.", "key member [member ...]", "";
    "save", 1, "admin noscript no_async_loading no_multi", (0, 0, 0), "", "@admin @slow @dangerous", "server", "1.0.0", persistence::save,
        "Synchronously save the dataset to disk", "", "";
    "scan", -2, "readonly", (0, 0, 0), "", "@keyspace @read @slow", "generic", "2.8.0", generic::scan,
        "Incrementally iterate the keys space.", "cursor [MATCH pattern] [COUNT count] [TYPE type]", "nondeterministic_output request_policy:special";
    "scard", 2, "readonly fast", (1, 1, 1), "RO", "@read @set @fast", "set", "1.0.0", set::scard,
        "Get the number of members in a set.", "key", "";
    "script", -2, "", (0, 0, 0), "", "@slow", "scripting", "2.6.0", scripting::script,
        "A container for Lua scripts management commands.", "subcommand [arg ...]", "";
    "sdiff", -2, "readonly", (1, -1, 1), "RO ACCESS", "@read @set @slow", "set", "1.0.0", set::sdiff,
        "Subtract multiple sets.", "key [key ...]", "nondeterministic_output_order";
    "sdiffstore", -3, "write denyoom", (1, -1, 1), "OW UPDATE; RO ACCESS", "@write @set @slow", "set", "1.0.0", set::sdiffstore,
        "Subtract multiple sets and store the resulting set in a key.", "destination key [key ...]", "";
    "select", 2, "loading stale fast", (0, 0, 0), "", "@fast @connection", "connection", "2.0.0", server::select,
        "Change the selected database for the current connection.", "index", "";
    "set", -3, "write denyoom", (1, 1, 1), "RW ACCESS UPDATE VARIABLE_FLAGS | RW and ACCESS due to the optional `GET` argument", "@write @string @slow", "string", "1.0.0", string::set,
        "Set the string value of a key.", "key value [NX|XX] [GET] [EX seconds|PX milliseconds|EXAT unix-time-seconds|PXAT unix-time-milliseconds|KEEPTTL]", "";
    "setbit", 4, "write denyoom", (1, 1, 1), "RW ACCESS UPDATE", "@write @bitmap @slow", "bitmap", "2.2.0", bits::setbit,
        "Sets or clears the bit at offset in the string value stored at key.", "key offset value", "";
    "setex", 4, "write denyoom", (1, 1, 1), "OW UPDATE", "@write @string @slow", "string", "2.0.0", string::setex,
        "Set the value and expiration of a key.", "key seconds value", "";
    "setnx", 3, "write denyoom fast", (1, 1, 1), "OW INSERT", "@write @string @fast", "string", "1.0.0", string::setnx,
        "Set the value of a key, only if the key does not exist.", "key value", "";
    "setrange", 4, "write denyoom", (1, 1, 1), "RW UPDATE", "@write @string @slow", "string", "2.2.0", string::setrange,
        "Overwrite part of a string at key starting at the specified offset.", "key offset value", "";
    "shutdown", -1, "admin noscript loading stale no_multi allow_busy", (0, 0, 0), "", "@admin @slow @dangerous", "server", "1.0.0", server::shutdown,
        "Synchronously save the dataset to disk and then shut down the server.", "[NOSAVE|SAVE] [NOW] [FORCE] [ABORT]", "";
    "sinter", -2, "readonly", (1, -1, 1), "RO ACCESS", "@read @set @slow", "set", "1.0.0", set::sinter,
        "Intersect multiple sets.", "key [key ...]", "nondeterministic_output_order";
    "sintercard", -3, "readonly", (1, 2, 0), "RO ACCESS", "@read @set @slow", "set", "7.0.0", set::sintercard,
        "Intersect multiple sets and return the cardinality of the result.", "numkeys key [key ...] [LIMIT limit]", "";
    "sinterstore", -3, "write denyoom", (1, -1, 1), "RW UPDATE; RO ACCESS", "@write @set @slow", "set", "1.0.0", set::sinterstore,
        "Intersect multiple sets and store the resulting set in a key.", "destination key [key ...]", "";
    "sismember", 3, "readonly fast", (1, 1, 1), "RO", "@read @set @fast", "set", "1.0.0", set::sismember,
        "Determine if a given value is a member of a set.", "key member", "";
    "slaveof", 3, "admin noscript stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "server", "1.0.0", persistence::replicaof,
        "Make the server a replica of another instance, or promote it as master.", "host port|NO ONE", "";
    "slowlog", -2, "", (0, 0, 0), "", "@slow", "server", "2.2.12", slowlog::slowlog,
        "A container for slow log commands", "", "";
    "smembers", 2, "readonly", (1, 1, 1), "RO ACCESS", "@read @set @slow", "set", "1.0.0", set::smembers,
        "Get all the members in a set.", "key", "nondeterministic_output_order";
    "smismember", -3, "readonly fast", (1, 1, 1), "RO ACCESS", "@read @set @fast", "set", "6.2.0", set::smismember,
        "Returns the membership associated with the given elements for a set.", "key member [member ...]", "";
    "smove", 4, "write fast", (1, 2, 1), "RW ACCESS DELETE; RW INSERT", "@write @set @fast", "set", "1.0.0", set::smove,
        "Move a member from one set to another.", "source destination member", "";
    "sort", -2, "write denyoom", (1, 1, 1), "RO ACCESS", "@write @set @sortedset @list @slow @dangerous", "generic", "1.0.0", sort::sort,
        "Sort the elements in a list, set or sorted set", "key [BY pattern] [LIMIT offset count] [GET pattern [GET pattern ...]] [ASC|DESC] [ALPHA] [STORE destination]", "";
    "sort_ro", -2, "readonly", (1, 1, 1), "RO ACCESS", "@read @set @sortedset @list @slow @dangerous", "generic", "7.0.0", sort::sort_ro,
        "Sort the elements in a list, set or sorted set. Read-only variant of SORT.", "key [BY pattern] [LIMIT offset count] [GET pattern [GET pattern ...]] [ASC|DESC] [ALPHA]", "";
    "spop", -2, "write fast", (1, 1, 1), "RW ACCESS DELETE", "@write @set @fast", "set", "1.0.0", set::spop,
        "Remove and return one or multiple random members from a set.", "key [count]", "nondeterministic_output";
    "spublish", 3, "pubsub loading stale fast", (1, 1, 1), "NOT_KEY", "@pubsub @fast", "pubsub", "7.0.0", pubsub::spublish,
        "Post a message to a shard channel", "shardchannel message", "";
    "srandmember", -2, "readonly", (1, 1, 1), "RO ACCESS", "@read @set @slow", "set", "1.0.0", set::srandmember,
        "Get one or multiple random members from a set.", "key [count]", "nondeterministic_output";
    "srem", -3, "write fast", (1, 1, 1), "RW DELETE", "@write @set @fast", "set", "1.0.0", set::srem,
        "Remove one or more members from a set.", "key member [member ...]", "";
    "sscan", -3, "readonly", (1, 1, 1), "RO ACCESS", "@read @set @slow", "set", "2.8.0", set::sscan,
        "Incrementally iterate Set elements.", "key cursor [MATCH pattern] [COUNT count]", "nondeterministic_output";
    "ssubscribe", -2, "pubsub noscript loading stale", (1, -1, 1), "NOT_KEY", "@pubsub @slow", "pubsub", "7.0.0", pubsub::ssubscribe,
        "Listen for messages published to the given shard channels", "shardchannel [shardchannel ...]", "";
    "strlen", 2, "readonly fast", (1, 1, 1), "RO", "@read @string @fast", "string", "2.2.0", string::strlen,
        "Get the length of the value stored in a key.", "key", "";
    "subscribe", -2, "pubsub noscript loading stale", (0, 0, 0), "", "@pubsub @slow", "pubsub", "2.0.0", pubsub::subscribe,
        "Listen for messages published to the given channels", "channel [channel ...]", "";
    "substr", 4, "readonly", (1, 1, 1), "RO ACCESS", "@read @string @slow", "string", "1.0.0", string::getrange,
        "Get a substring of the string stored at a key.", "key start end", "";
    "sunion", -2, "readonly", (1, -1, 1), "RO ACCESS", "@read @set @slow", "set", "1.0.0", set::sunion,
        "Add multiple sets.", "key [key ...]", "nondeterministic_output_order";
    "sunionstore", -3, "write denyoom", (1, -1, 1), "OW UPDATE; RO ACCESS", "@write @set @slow", "set", "1.0.0", set::sunionstore,
        "Add multiple sets and store the resulting set in a key.", "destination key [key ...]", "";
    "sunsubscribe", -1, "pubsub noscript loading stale", (1, -1, 1), "NOT_KEY", "@pubsub @slow", "pubsub", "7.0.0", pubsub::sunsubscribe,
        "Stop listening for messages posted to the given shard channels", "[shardchannel [shardchannel ...]]", "";
    "swapdb", 3, "write fast", (0, 0, 0), "", "@keyspace @write @fast @dangerous", "server", "4.0.0", generic::swapdb,
        "Swaps two Redis databases.", "index1 index2", "";
    "sync", 1, "admin noscript no_async_loading no_multi", (0, 0, 0), "", "@admin @slow @dangerous", "server", "1.0.0", persistence::sync,
        "Internal command used for replication", "", "";
    "time", 1, "loading stale fast", (0, 0, 0), "", "@fast", "server", "2.6.0", server::time,
        "Return the current server time.", "", "nondeterministic_output";
    "touch", -2, "readonly fast", (1, -1, 1), "RO", "@keyspace @read @fast", "generic", "2.3.4", generic::touch,
        "Alters the last access time of a key(s). Returns the number of existing keys specified.", "key [key ...]", "request_policy:multi_shard response_policy:agg_sum";
    "ttl", 2, "readonly fast", (1, 1, 1), "RO ACCESS", "@keyspace @read @fast", "generic", "1.0.0", generic::ttl,
        "Get the time to live for a key in seconds.", "key", "nondeterministic_output";
    "type", 2, "readonly fast", (1, 1, 1), "RO", "@keyspace @read @fast", "generic", "1.0.0", generic::type_,
        "Determine the type stored at key.", "key", "";
    "unlink", -2, "write fast", (1, -1, 1), "RM DELETE", "@keyspace @write @fast", "generic", "4.0.0", generic::unlink,
        "Delete a key asynchronously in another thread. Otherwise it is just as DEL, but non blocking.", "key [key ...]", "request_policy:multi_shard response_policy:agg_sum";
    "unsubscribe", -1, "pubsub noscript loading stale", (0, 0, 0), "", "@pubsub @slow", "pubsub", "2.0.0", pubsub::unsubscribe,
        "Stop listening for messages posted to the given channels", "[channel [channel ...]]", "";
    "unwatch", 1, "noscript loading stale fast allow_busy", (0, 0, 0), "", "@fast @transaction", "transactions", "2.2.0", transaction::unwatch,
        "Forget about all watched keys.", "", "";
    "wait", 3, "noscript", (0, 0, 0), "", "@slow @connection", "generic", "3.0.0", persistence::wait,
        "Wait for the synchronous replication of all the write commands sent in the context of the current connection", "numreplicas timeout", "request_policy:all_shards response_policy:agg_min";
    "watch", -2, "noscript loading stale fast allow_busy", (1, -1, 1), "RO", "@fast @transaction", "transactions", "2.2.0", transaction::watch,
        "Watch the given keys to determine execution of the MULTI/EXEC block.", "key [key ...]", "";
    "xack", -4, "write fast", (1, 1, 1), "RW UPDATE", "@write @stream @fast", "stream", "5.0.0", stream::group::xack,
        "Marks a pending message as correctly processed, effectively removing it from the pending entries list of the consumer group. Return value of the command is the number of messages successfully acknowledged, that is, the IDs we were actually able to resolve in the PEL.", "key group id [id ...]", "";
    "xadd", -5, "write denyoom fast", (1, 1, 1), "RW UPDATE | UPDATE instead of INSERT because of the optional trimming feature", "@write @stream @fast", "stream", "5.0.0", stream::xadd,
        "Appends a new entry to a stream", "key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value [field value ...]", "nondeterministic_output";
    "xautoclaim", -6, "write fast", (1, 1, 1), "RW DELETE", "@write @stream @fast", "stream", "6.2.0", stream::group::xautoclaim,
        "Changes (or acquires) ownership of messages in a consumer group, as if the messages were delivered to the specified consumer.", "key group consumer min-idle-time start [COUNT count] [JUSTID]", "nondeterministic_output";
    "xclaim", -6, "write fast", (1, 1, 1), "RW UPDATE", "@write @stream @fast", "stream", "5.0.0", stream::group::xclaim,
        "Changes (or acquires) ownership of a message in a consumer group, as if the message was delivered to the specified consumer.", "key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-time-milliseconds] [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID id]", "nondeterministic_output";
    "xdel", -3, "write fast", (1, 1, 1), "RW DELETE", "@write @stream @fast", "stream", "5.0.0", stream::xdel,
        "Removes the specified entries from the stream. Returns the number of items actually deleted, that may be different from the number of IDs passed in case certain IDs do not exist.", "key id [id ...]", "";
    "xgroup", -2, "", (0, 0, 0), "", "@slow", "stream", "5.0.0", stream::group::xgroup,
        "A container for consumer groups commands", "subcommand [arg ...]", "";
    "xinfo", -2, "", (0, 0, 0), "", "@slow", "stream", "5.0.0", stream::xinfo,
        "A container for stream introspection commands", "subcommand [arg ...]", "";
    "xlen", 2, "readonly fast", (1, 1, 1), "RO", "@read @stream @fast", "stream", "5.0.0", stream::xlen,
        "Return the number of entries in a stream", "key", "";
    "xpending", -3, "readonly", (1, 1, 1), "RO ACCESS", "@read @stream @slow", "stream", "5.0.0", stream::group::xpending,
        "Return information and entries from a stream consumer group pending entries list, that are messages fetched but never acknowledged.", "key group [[IDLE min-idle-time] start end count [consumer]]", "nondeterministic_output";
    "xrange", -4, "readonly", (1, 1, 1), "RO ACCESS", "@read @stream @slow", "stream", "5.0.0", stream::xrange,
        "Return a range of elements in a stream, with IDs matching the specified IDs interval", "key start end [COUNT count]", "";
    "xread", -4, "readonly blocking", (-1, 0, 0), "RO ACCESS", "@read @stream @slow @blocking", "stream", "5.0.0", stream::read::xread,
        "Return never seen elements in multiple streams, with IDs greater than the ones reported by the caller for each stream. Can block.", "[COUNT count] [BLOCK milliseconds] STREAMS key [key ...] id [id ...]", "";
    "xreadgroup", -7, "write blocking", (-4, 0, 0), "RO ACCESS", "@write @stream @slow @blocking", "stream", "5.0.0", stream::read::xreadgroup,
        "Return new entries from a stream using a consumer group, or access the history of the pending entries for a given consumer. Can block.", "GROUP group consumer [COUNT count] [BLOCK milliseconds] [NOACK] STREAMS key [key ...] id [id ...]", "";
    "xrevrange", -4, "readonly", (1, 1, 1), "RO ACCESS", "@read @stream @slow", "stream", "5.0.0", stream::xrevrange,
        "Return a range of elements in a stream, with IDs matching the specified IDs interval, in reverse order (from greater to smaller IDs) compared to XRANGE", "key end start [COUNT count]", "";
    "xsetid", -3, "write denyoom fast", (1, 1, 1), "RW UPDATE", "@write @stream @fast", "stream", "5.0.0", stream::xsetid,
        "An internal command for replicating stream values", "key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]", "";
    "xtrim", -4, "write", (1, 1, 1), "RW DELETE", "@write @stream @slow", "stream", "5.0.0", stream::xtrim,
        "Trims the stream to (approximately if '~' is passed) a certain size", "key MAXLEN|MINID [=|~] threshold [LIMIT count]", "nondeterministic_output";
    "zadd", -4, "write denyoom fast", (1, 1, 1), "RW UPDATE", "@write @sortedset @fast", "sorted-set", "1.2.0", zset::zadd,
        "Add one or more members to a sorted set, or update its score if it already exists.", "key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]", "";
    "zcard", 2, "readonly fast", (1, 1, 1), "RO", "@read @sortedset @fast", "sorted-set", "1.2.0", zset::zcard,
        "Get the number of members in a sorted set.", "key", "";
    "zcount", 4, "readonly fast", (1, 1, 1), "RO ACCESS", "@read @sortedset @fast", "sorted-set", "2.0.0", zset::zcount,
        "Count the members in a sorted set with scores within the given values.", "key min max", "";
    "zdiff", -3, "readonly", (1, 2, 0), "RO ACCESS", "@read @sortedset @slow", "sorted-set", "6.2.0", zset::zdiff,
        "Subtract multiple sorted sets.", "numkeys key [key ...] [WITHSCORES]", "";
    "zdiffstore", -4, "write denyoom", (2, 3, -1), "OW UPDATE", "@write @sortedset @slow", "sorted-set", "6.2.0", zset::zdiffstore,
        "Subtract multiple sorted sets and store the resulting sorted set in a new key.", "destination numkeys key [key ...]", "";
    "zincrby", 4, "write denyoom fast", (1, 1, 1), "RW ACCESS UPDATE", "@write @sortedset @fast", "sorted-set", "1.2.0", zset::zincrby,
        "Increment the score of a member in a sorted set.", "key increment member", "";
    "zinter", -3, "readonly", (1, 2, 0), "RO ACCESS", "@read @sortedset @slow", "sorted-set", "6.2.0", zset::zinter,
        "Intersect multiple sorted sets.", "numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]", "";
    "zintercard", -3, "readonly", (1, 2, 0), "RO ACCESS", "@read @sortedset @slow", "sorted-set", "7.0.0", zset::zintercard,
        "Intersect multiple sorted sets and return the cardinality of the result.", "numkeys key [key ...] [LIMIT limit]", "";
    "zinterstore", -4, "write denyoom", (2, 3, -1), "OW UPDATE", "@write @sortedset @slow", "sorted-set", "2.0.0", zset::zinterstore,
        "Intersect multiple sorted sets and store the resulting sorted set in a new key.", "destination numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM|MIN|MAX]", "";
    "zlexcount", 4, "readonly fast", (1, 1, 1), "RO ACCESS", "@read @sortedset @fast", "sorted-set", "2.8.9", zset::zlexcount,
        "Count the number of members in a sorted set between a given lexicographical range.", "key min max", "";
    "zmpop", -4, "write", (1, 2, 0), "RW ACCESS DELETE", "@write @sortedset @slow", "sorted-set", "7.0.0", zset::zmpop,
        "Remove and return members with scores in a sorted set.", "numkeys key [key ...] MIN|MAX [COUNT count]", "";
    "zmscore", -3, "readonly fast", (1, 1, 1), "RO ACCESS", "@read @sortedset @fast", "sorted-set", "6.2.0", zset::zmscore,
        "Get the score associated with the given members in a sorted set.", "key member [member ...]", "";
    "zpopmax", -2, "write fast", (1, 1, 1), "RW ACCESS DELETE", "@write @sortedset @fast", "sorted-set", "5.0.0", zset::zpopmax,
        "Remove and return members with the highest scores in a sorted set.", "key [count]", "";
    "zpopmin", -2, "write fast", (1, 1, 1), "RW ACCESS DELETE", "@write @sortedset @fast", "sorted-set", "5.0.0", zset::zpopmin,
        "Remove and return members with the lowest scores in a sorted set.", "key [count]", "";
    "zrandmember", -2, "readonly", (1, 1, 1), "RO ACCESS", "@read @sortedset @slow", "sorted-set", "6.2.0", zset::zrandmember,
        "Get one or multiple random elements from a sorted set.", "key [count [WITHSCORES]]", "nondeterministic_output";
    "zrange", -4, "readonly", (1, 1, 1), "RO ACCESS", "@read @sortedset @slow", "sorted-set", "1.2.0", zset::zrange,
        "Return a range of members in a sorted set.", "key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]", "";
    "zrangebylex", -4, "readonly", (1, 1, 1), "RO ACCESS", "@read @sortedset @slow", "sorted-set", "2.8.9", zset::zrangebylex,
        "Return a range of members in a sorted set, by lexicographical range.", "key min max [LIMIT offset count]", "";
    "zrangebyscore", -4, "readonly", (1, 1, 1), "RO ACCESS", "@read @sortedset @slow", "sorted-set", "1.0.5", zset::zrangebyscore,
        "Return a range of members in a sorted set, by score.", "key min max [WITHSCORES] [LIMIT offset count]", "";
    "zrangestore", -5, "write denyoom", (1, 2, 1), "OW UPDATE; RO ACCESS", "@write @sortedset @slow", "sorted-set", "6.2.0", zset::zrangestore,
        "Store a range of members from sorted set into another key.", "dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]", "";
    "zrank", 3, "readonly fast", (1, 1, 1), "RO ACCESS", "@read @sortedset @fast", "sorted-set", "2.0.0", zset::zrank,
        "Determine the index of a member in a sorted set.", "key member", "";
    "zrem", -3, "write fast", (1, 1, 1), "RW DELETE", "@write @sortedset @fast", "sorted-set", "1.2.0", zset::zrem,
        "Remove one or more members from a sorted set.", "key member [member ...]", "";
    "zremrangebylex", 4, "write", (1, 1, 1), "RW DELETE", "@write @sortedset @slow", "sorted-set", "2.8.9", zset::zremrangebylex,
        "Remove all members in a sorted set between the given lexicographical range.", "key min max", "";
    "zremrangebyrank", 4, "write", (1, 1, 1), "RW DELETE", "@write @sortedset @slow", "sorted-set", "2.0.0", zset::zremrangebyrank,
        "Remove all members in a sorted set within the given indexes.", "key start stop", "";
    "zremrangebyscore", 4, "write", (1, 1, 1), "RW DELETE", "@write @sortedset @slow", "sorted-set", "1.2.0", zset::zremrangebyscore,
        "Remove all members in a sorted set within the given scores.", "key min max", "";
    "zrevrange", -4, "readonly", (1, 1, 1), "RO ACCESS", "@read @sortedset @slow", "sorted-set", "1.2.0", zset::zrevrange,
        "Return a range of members in a sorted set, by index, with scores ordered from high to low.", "key start stop [WITHSCORES]", "";
    "zrevrangebylex", -4, "readonly", (1, 1, 1), "RO ACCESS", "@read @sortedset @slow", "sorted-set", "2.8.9", zset::zrevrangebylex,
        "Return a range of members in a sorted set, by lexicographical range, ordered from higher to lower strings.", "key max min [LIMIT offset count]", "";
    "zrevrangebyscore", -4, "readonly", (1, 1, 1), "RO ACCESS", "@read @sortedset @slow", "sorted-set", "2.2.0", zset::zrevrangebyscore,
        "Return a range of members in a sorted set, by score, with scores ordered from high to low.", "key max min [WITHSCORES] [LIMIT offset count]", "";
    "zrevrank", 3, "readonly fast", (1, 1, 1), "RO ACCESS", "@read @sortedset @fast", "sorted-set", "2.0.0", zset::zrevrank,
        "Determine the index of a member in a sorted set, with scores ordered from high to low.", "key member", "";
    "zscan", -3, "readonly", (1, 1, 1), "RO ACCESS", "@read @sortedset @slow", "sorted-set", "2.8.0", zset::zscan,
        "Incrementally iterate sorted sets elements and associated scores.", "key cursor [MATCH pattern] [COUNT count]", "nondeterministic_output";
    "zscore", 3, "readonly fast", (1, 1, 1), "RO ACCESS", "@read @sortedset @fast", "sorted-set", "1.2.0", zset::zscore,
        "Get the score associated with the given member in a sorted set.", "key member", "";
    "zunion", -3, "readonly", (1, 2, 0), "RO ACCESS", "@read @sortedset @slow", "sorted-set", "6.2.0", zset::zunion,
        "Add multiple sorted sets.", "numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]", "";
    "zunionstore", -4, "write denyoom", (2, 3, -1), "OW UPDATE", "@write @sortedset @slow", "sorted-set", "2.0.0", zset::zunionstore,
        "Add multiple sorted sets and store the resulting sorted set in a new key.", "destination numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM|MIN|MAX]", "";
}

/// The position of a command in [`all_specs`]: [`TABLE`]'s rows, then
/// [`SUBCOMMANDS`]' (for per-command counters kept in an array instead of a
/// map on the hot path).
pub fn index_of(spec: &'static CommandSpec) -> usize {
    let row = |table: &'static [CommandSpec]| {
        let offset = (spec as *const CommandSpec as usize).checked_sub(table.as_ptr() as usize)?;
        let i = offset / std::mem::size_of::<CommandSpec>();
        (i < table.len()).then_some(i)
    };
    row(TABLE)
        .or_else(|| row(SUBCOMMANDS).map(|i| TABLE.len() + i))
        .expect("a row of TABLE or SUBCOMMANDS")
}

/// Every command, then every subcommand: the order of [`index_of`].
pub fn all_specs() -> impl Iterator<Item = &'static CommandSpec> {
    TABLE.iter().chain(SUBCOMMANDS)
}

/// Whether a command is a container of subcommands (CONFIG, CLIENT...).
pub fn is_container(spec: &'static CommandSpec) -> bool {
    // By TABLE row, worked out once: dispatch asks for every command.
    static CONTAINERS: std::sync::LazyLock<Vec<bool>> = std::sync::LazyLock::new(|| {
        TABLE
            .iter()
            .map(|c| subcommands_of(c.name).next().is_some())
            .collect()
    });
    CONTAINERS.get(index_of(spec)).copied().unwrap_or(false)
}

/// The row a call is checked and counted against: for a container with a
/// subcommand argument, the subcommand's row (`None` if it has no such
/// subcommand); otherwise the command's own.
pub fn call_spec(spec: &'static CommandSpec, args: &Args) -> Option<&'static CommandSpec> {
    if args.len() >= 2 && is_container(spec) {
        subcommand_of(spec, args.get(1))
    } else {
        Some(spec)
    }
}

/// The subcommand of `container` named `sub` (`CONFIG GET` is
/// `config|get`), or `None` if cairn does not have it. Redis counts a call,
/// and checks its arity, against the subcommand.
pub fn subcommand_of(container: &'static CommandSpec, sub: &[u8]) -> Option<&'static CommandSpec> {
    let mut name = Vec::with_capacity(container.name.len() + 1 + sub.len());
    name.extend_from_slice(container.name.as_bytes());
    name.push(b'|');
    name.extend_from_slice(sub);
    find(&SUBCOMMAND_INDEX, &name)
}

commands! {
    /// The subcommands of container commands (CONFIG, XINFO...) that cairn
    /// implements, named `container|sub` and sorted by that name, as Redis
    /// 7.0 describes them in COMMAND INFO. The handler is the container's:
    /// the rows feed COMMAND INFO, LIST and GETKEYS, not routing.
    SUBCOMMANDS;
    "acl|cat", -2, "noscript loading stale", (0, 0, 0), "", "@slow", "server", "6.0.0", acl::acl,
        "List the ACL categories or the commands inside a category", "[categoryname]", "";
    "acl|deluser", -3, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "6.0.0", acl::acl,
        "Remove the specified ACL users and the associated rules", "username [username ...]", "";
    "acl|dryrun", -4, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "7.0.0", acl::acl,
        "Returns whether the user can execute the given command without executing the command.", "username command [arg [arg ...]]", "";
    "acl|genpass", -2, "noscript loading stale", (0, 0, 0), "", "@slow", "server", "6.0.0", acl::acl,
        "Generate a pseudorandom secure password to use for ACL users", "[bits]", "";
    "acl|getuser", 3, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "6.0.0", acl::acl,
        "Get the rules for a specific ACL user", "username", "";
    "acl|help", 2, "loading stale", (0, 0, 0), "", "@slow", "server", "6.0.0", acl::acl,
        "Show helpful text about the different subcommands", "", "";
    "acl|list", 2, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "6.0.0", acl::acl,
        "List the current ACL rules in ACL config file format", "", "";
    "acl|load", 2, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "6.0.0", acl::acl,
        "Reload the ACLs from the configured ACL file", "", "";
    "acl|log", -2, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "6.0.0", acl::acl,
        "List latest events denied because of ACLs in place", "[count|RESET]", "";
    "acl|save", 2, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "6.0.0", acl::acl,
        "Save the current ACL rules in the configured ACL file", "", "";
    "acl|setuser", -3, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "6.0.0", acl::acl,
        "Modify or create the rules for a specific ACL user", "username [rule [rule ...]]", "";
    "acl|users", 2, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "6.0.0", acl::acl,
        "List the username of all the configured ACL rules", "", "";
    "acl|whoami", 2, "noscript loading stale", (0, 0, 0), "", "@slow", "server", "6.0.0", acl::acl,
        "Return the name of the user associated to the current connection", "", "";
    "client|caching", 3, "noscript loading stale", (0, 0, 0), "", "@slow @connection", "connection", "6.0.0", server::client,
        "Instruct the server about tracking or not keys in the next request", "", "";
    "client|getname", 2, "noscript loading stale", (0, 0, 0), "", "@slow @connection", "connection", "2.6.9", server::client,
        "Get the current connection name", "", "";
    "client|getredir", 2, "noscript loading stale", (0, 0, 0), "", "@slow @connection", "connection", "6.0.0", server::client,
        "Get tracking notifications redirection client ID if any", "", "";
    "client|help", 2, "loading stale", (0, 0, 0), "", "@slow @connection", "connection", "5.0.0", server::client,
        "Show helpful text about the different subcommands", "", "";
    "client|id", 2, "noscript loading stale", (0, 0, 0), "", "@slow @connection", "connection", "5.0.0", server::client,
        "Returns the client ID for the current connection", "", "";
    "client|info", 2, "noscript loading stale", (0, 0, 0), "", "@slow @connection", "connection", "6.2.0", server::client,
        "Returns information about the current client connection.", "", "nondeterministic_output";
    "client|kill", -3, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous @connection", "connection", "2.4.0", server::client,
        "Kill the connection of a client", "", "";
    "client|list", -2, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous @connection", "connection", "2.4.0", server::client,
        "Get the list of client connections", "", "nondeterministic_output";
    "client|no-evict", 3, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous @connection", "connection", "7.0.0", server::client,
        "Set client eviction mode for the current connection", "", "";
    "client|pause", -3, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous @connection", "connection", "2.9.50", server::client,
        "Stop processing commands from clients for some time", "", "";
    "client|reply", 3, "noscript loading stale", (0, 0, 0), "", "@slow @connection", "connection", "3.2.0", server::client,
        "Instruct the server whether to reply to commands", "", "";
    "client|setname", 3, "noscript loading stale", (0, 0, 0), "", "@slow @connection", "connection", "2.6.9", server::client,
        "Set the current connection name", "", "";
    "client|tracking", -3, "noscript loading stale", (0, 0, 0), "", "@slow @connection", "connection", "6.0.0", server::client,
        "Enable or disable server assisted client side caching support", "", "";
    "client|trackinginfo", 2, "noscript loading stale", (0, 0, 0), "", "@slow @connection", "connection", "6.2.0", server::client,
        "Return information about server assisted client side caching for the current connection", "", "";
    "client|unblock", -3, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous @connection", "connection", "5.0.0", server::client,
        "Unblock a client blocked in a blocking command from a different connection", "", "";
    "client|unpause", 2, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous @connection", "connection", "6.2.0", server::client,
        "Resume processing of clients that were paused", "", "";
    "cluster|addslots", -3, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "3.0.0", cluster::cluster,
        "Assign new hash slots to receiving node", "", "";
    "cluster|addslotsrange", -4, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "7.0.0", cluster::cluster,
        "Assign new hash slots to receiving node", "", "";
    "cluster|bumpepoch", 2, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "3.0.0", cluster::cluster,
        "Advance the cluster config epoch", "", "nondeterministic_output";
    "cluster|count-failure-reports", 3, "admin stale", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "3.0.0", cluster::cluster,
        "Return the number of failure reports active for a given node", "", "nondeterministic_output";
    "cluster|countkeysinslot", 3, "stale", (0, 0, 0), "", "@slow", "cluster", "3.0.0", cluster::cluster,
        "Return the number of local keys in the specified hash slot", "", "";
    "cluster|delslots", -3, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "3.0.0", cluster::cluster,
        "Set hash slots as unbound in receiving node", "", "";
    "cluster|delslotsrange", -4, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "7.0.0", cluster::cluster,
        "Set hash slots as unbound in receiving node", "", "";
    "cluster|failover", -2, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "3.0.0", cluster::cluster,
        "Forces a replica to perform a manual failover of its master.", "", "";
    "cluster|flushslots", 2, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "3.0.0", cluster::cluster,
        "Delete a node's own slots information", "", "";
    "cluster|forget", 3, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "3.0.0", cluster::cluster,
        "Remove a node from the nodes table", "", "";
    "cluster|getkeysinslot", 4, "stale", (0, 0, 0), "", "@slow", "cluster", "3.0.0", cluster::cluster,
        "Return local key names in the specified hash slot", "", "nondeterministic_output";
    "cluster|help", 2, "loading stale", (0, 0, 0), "", "@slow", "cluster", "5.0.0", cluster::cluster,
        "Show helpful text about the different subcommands", "", "";
    "cluster|importrows", -4, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "7.0.0", cluster::cluster,
        "Receive a hash slot's rows from the node moving it here (cairn, sent by CLUSTER MOVESLOT)", "", "";
    "cluster|info", 2, "stale", (0, 0, 0), "", "@slow", "cluster", "3.0.0", cluster::cluster,
        "Provides info about Redis Cluster node state", "", "nondeterministic_output";
    "cluster|keyslot", 3, "stale", (0, 0, 0), "", "@slow", "cluster", "3.0.0", cluster::cluster,
        "Returns the hash slot of the specified key", "", "";
    "cluster|links", 2, "stale", (0, 0, 0), "", "@slow", "cluster", "7.0.0", cluster::cluster,
        "Returns a list of all TCP links to and from peer nodes in cluster", "", "nondeterministic_output";
    "cluster|meet", -4, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "3.0.0", cluster::cluster,
        "Force a node cluster to handshake with another node", "", "";
    "cluster|moveslot", 4, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "7.0.0", cluster::cluster,
        "Move a hash slot and its keys to another node, streaming its rows (cairn)", "", "";
    "cluster|myid", 2, "stale", (0, 0, 0), "", "@slow", "cluster", "3.0.0", cluster::cluster,
        "Return the node id", "", "";
    "cluster|nodes", 2, "stale", (0, 0, 0), "", "@slow", "cluster", "3.0.0", cluster::cluster,
        "Get Cluster config for the node", "", "nondeterministic_output";
    "cluster|replicas", 3, "admin stale", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "5.0.0", cluster::cluster,
        "List replica nodes of the specified master node", "", "nondeterministic_output";
    "cluster|replicate", 3, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "3.0.0", cluster::cluster,
        "Reconfigure a node as a replica of the specified master node", "", "";
    "cluster|reset", -2, "admin noscript stale", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "3.0.0", cluster::cluster,
        "Reset a Redis Cluster node", "", "";
    "cluster|saveconfig", 2, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "3.0.0", cluster::cluster,
        "Forces the node to save cluster state on disk", "", "";
    "cluster|set-config-epoch", 3, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "3.0.0", cluster::cluster,
        "Set the configuration epoch in a new node", "", "";
    "cluster|setslot", -4, "admin stale no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "3.0.0", cluster::cluster,
        "Bind a hash slot to a specific node", "", "";
    "cluster|shards", 2, "stale", (0, 0, 0), "", "@slow", "cluster", "7.0.0", cluster::cluster,
        "Get array of cluster slots to node mappings", "", "nondeterministic_output";
    "cluster|slaves", 3, "admin stale", (0, 0, 0), "", "@admin @slow @dangerous", "cluster", "3.0.0", cluster::cluster,
        "List replica nodes of the specified master node", "", "nondeterministic_output";
    "cluster|slots", 2, "stale", (0, 0, 0), "", "@slow", "cluster", "3.0.0", cluster::cluster,
        "Get array of Cluster slot to node mappings", "", "nondeterministic_output";
    "command|count", 2, "loading stale", (0, 0, 0), "", "@slow @connection", "server", "2.8.13", server::command,
        "Get total number of Redis commands", "", "";
    "command|docs", -2, "loading stale", (0, 0, 0), "", "@slow @connection", "server", "7.0.0", server::command,
        "Get array of specific Redis command documentation", "", "nondeterministic_output_order";
    "command|getkeys", -4, "loading stale", (0, 0, 0), "", "@slow @connection", "server", "2.8.13", server::command,
        "Extract keys given a full Redis command", "", "";
    "command|getkeysandflags", -4, "loading stale", (0, 0, 0), "", "@slow @connection", "server", "7.0.0", server::command,
        "Extract keys and access flags given a full Redis command", "", "";
    "command|help", 2, "loading stale", (0, 0, 0), "", "@slow @connection", "server", "5.0.0", server::command,
        "Show helpful text about the different subcommands", "", "";
    "command|info", -2, "loading stale", (0, 0, 0), "", "@slow @connection", "server", "2.8.13", server::command,
        "Get array of specific Redis command details, or all when no argument is given.", "", "nondeterministic_output_order";
    "command|list", -2, "loading stale", (0, 0, 0), "", "@slow @connection", "server", "7.0.0", server::command,
        "Get an array of Redis command names", "", "nondeterministic_output_order";
    "config|get", -3, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "2.0.0", server::config,
        "Get the values of configuration parameters", "", "";
    "config|help", 2, "loading stale", (0, 0, 0), "", "@slow", "server", "5.0.0", server::config,
        "Show helpful text about the different subcommands", "", "";
    "config|resetstat", 2, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "2.0.0", server::config,
        "Reset the stats returned by INFO", "", "";
    "config|rewrite", 2, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "2.8.0", server::config,
        "Rewrite the configuration file with the in memory configuration", "", "";
    "config|set", -4, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "2.0.0", server::config,
        "Set configuration parameters to the given values", "", "request_policy:all_nodes response_policy:all_succeeded";
    "function|delete", 3, "write noscript", (0, 0, 0), "", "@write @slow @scripting", "scripting", "7.0.0", functions::function,
        "Delete a function by name.", "library-name", "request_policy:all_shards response_policy:all_succeeded";
    "function|dump", 2, "noscript", (0, 0, 0), "", "@slow @scripting", "scripting", "7.0.0", functions::function,
        "Dump all functions into a serialized binary payload.", "", "";
    "function|flush", -2, "write noscript", (0, 0, 0), "", "@write @slow @scripting", "scripting", "7.0.0", functions::function,
        "Deleting all functions.", "[ASYNC|SYNC]", "request_policy:all_shards response_policy:all_succeeded";
    "function|help", 2, "loading stale", (0, 0, 0), "", "@slow @scripting", "scripting", "5.0.0", functions::function,
        "Show helpful text about the different subcommands", "", "";
    "function|kill", 2, "noscript allow_busy", (0, 0, 0), "", "@slow @scripting", "scripting", "7.0.0", functions::function,
        "Kill the function currently in execution.", "", "request_policy:all_shards response_policy:one_succeeded";
    "function|list", -2, "noscript", (0, 0, 0), "", "@slow @scripting", "scripting", "7.0.0", functions::function,
        "List information about all the functions.", "[LIBRARYNAME library-name-pattern] [WITHCODE]", "nondeterministic_output_order";
    "function|load", -3, "write denyoom noscript", (0, 0, 0), "", "@write @slow @scripting", "scripting", "7.0.0", functions::function,
        "Create a function with the given arguments (name, code, description).", "[REPLACE] function-code", "request_policy:all_shards response_policy:all_succeeded";
    "function|restore", -3, "write denyoom noscript", (0, 0, 0), "", "@write @slow @scripting", "scripting", "7.0.0", functions::function,
        "Restore all the functions on the given payload.", "serialized-value [FLUSH|APPEND|REPLACE]", "request_policy:all_shards response_policy:all_succeeded";
    "function|stats", 2, "noscript allow_busy", (0, 0, 0), "", "@slow @scripting", "scripting", "7.0.0", functions::function,
        "Return information about the function currently running (name, description, duration).", "", "nondeterministic_output request_policy:all_shards response_policy:special";
    "latency|doctor", 2, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "2.8.13", latency::latency,
        "Return a human readable latency analysis report.", "", "nondeterministic_output request_policy:all_nodes response_policy:special";
    "latency|graph", 3, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "2.8.13", latency::latency,
        "Return a latency graph for the event.", "event", "nondeterministic_output request_policy:all_nodes response_policy:special";
    "latency|help", 2, "loading stale", (0, 0, 0), "", "@slow", "server", "2.8.13", latency::latency,
        "Show helpful text about the different subcommands.", "", "";
    "latency|histogram", -2, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "7.0.0", latency::latency,
        "Return the cumulative distribution of latencies of a subset of commands or all.", "[command [command ...]]", "nondeterministic_output request_policy:all_nodes response_policy:special";
    "latency|history", 3, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "2.8.13", latency::latency,
        "Return timestamp-latency samples for the event.", "event", "nondeterministic_output request_policy:all_nodes response_policy:special";
    "latency|latest", 2, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "2.8.13", latency::latency,
        "Return the latest latency samples for all events.", "", "nondeterministic_output request_policy:all_nodes response_policy:special";
    "latency|reset", -2, "admin noscript loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "2.8.13", latency::latency,
        "Reset latency data for one or more events.", "[event [event ...]]", "request_policy:all_nodes response_policy:all_succeeded";
    "memory|doctor", 2, "", (0, 0, 0), "", "@slow", "server", "4.0.0", memory::memory,
        "Outputs memory problems report", "", "nondeterministic_output request_policy:all_shards response_policy:special";
    "memory|help", 2, "loading stale", (0, 0, 0), "", "@slow", "server", "4.0.0", memory::memory,
        "Show helpful text about the different subcommands", "", "";
    "memory|malloc-stats", 2, "", (0, 0, 0), "", "@slow", "server", "4.0.0", memory::memory,
        "Show allocator internal stats", "", "nondeterministic_output request_policy:all_shards response_policy:special";
    "memory|purge", 2, "", (0, 0, 0), "", "@slow", "server", "4.0.0", memory::memory,
        "Ask the allocator to release memory", "", "request_policy:all_shards response_policy:all_succeeded";
    "memory|stats", 2, "", (0, 0, 0), "", "@slow", "server", "4.0.0", memory::memory,
        "Show memory usage details", "", "nondeterministic_output request_policy:all_shards response_policy:special";
    "memory|usage", -3, "readonly", (2, 2, 1), "RO", "@read @slow", "server", "4.0.0", memory::memory,
        "Estimate the memory usage of a key", "key [SAMPLES count]", "";
    "module|help", 2, "loading stale", (0, 0, 0), "", "@slow", "server", "5.0.0", module::module,
        "Show helpful text about the different subcommands", "", "";
    "module|list", 2, "admin noscript", (0, 0, 0), "", "@admin @slow @dangerous", "server", "4.0.0", module::module,
        "List all modules loaded by the server", "", "nondeterministic_output_order";
    "module|load", -3, "admin noscript no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "server", "4.0.0", module::module,
        "Load a module", "path [arg [arg ...]]", "";
    "module|loadex", -3, "admin noscript no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "server", "7.0.0", module::module,
        "Load a module with extended parameters", "path [CONFIG name value [CONFIG name value ...]] [ARGS args [args ...]]", "";
    "module|unload", 3, "admin noscript no_async_loading", (0, 0, 0), "", "@admin @slow @dangerous", "server", "4.0.0", module::module,
        "Unload a module", "name", "";
    "object|encoding", 3, "readonly", (2, 2, 1), "RO", "@keyspace @read @slow", "generic", "2.2.3", object::object,
        "Inspect the internal encoding of a Redis object", "key", "nondeterministic_output";
    "object|freq", 3, "readonly", (2, 2, 1), "RO", "@keyspace @read @slow", "generic", "4.0.0", object::object,
        "Get the logarithmic access frequency counter of a Redis object", "key", "nondeterministic_output";
    "object|help", 2, "loading stale", (0, 0, 0), "", "@keyspace @slow", "generic", "6.2.0", object::object,
        "Show helpful text about the different subcommands", "", "";
    "object|idletime", 3, "readonly", (2, 2, 1), "RO", "@keyspace @read @slow", "generic", "2.2.3", object::object,
        "Get the time since a Redis object was last accessed", "key", "nondeterministic_output";
    "object|refcount", 3, "readonly", (2, 2, 1), "RO", "@keyspace @read @slow", "generic", "2.2.3", object::object,
        "Get the number of references to the value of the key", "key", "nondeterministic_output";
    "pubsub|channels", -2, "pubsub loading stale", (0, 0, 0), "", "@pubsub @slow", "pubsub", "2.8.0", pubsub::pubsub,
        "List active channels", "[pattern]", "";
    "pubsub|help", 2, "loading stale", (0, 0, 0), "", "@slow", "pubsub", "6.2.0", pubsub::pubsub,
        "Show helpful text about the different subcommands", "", "";
    "pubsub|numpat", 2, "pubsub loading stale", (0, 0, 0), "", "@pubsub @slow", "pubsub", "2.8.0", pubsub::pubsub,
        "Get the count of unique patterns pattern subscriptions", "", "";
    "pubsub|numsub", -2, "pubsub loading stale", (0, 0, 0), "", "@pubsub @slow", "pubsub", "2.8.0", pubsub::pubsub,
        "Get the count of subscribers for channels", "[channel [channel ...]]", "";
    "pubsub|shardchannels", -2, "pubsub loading stale", (0, 0, 0), "", "@pubsub @slow", "pubsub", "7.0.0", pubsub::pubsub,
        "List active shard channels", "[pattern]", "";
    "pubsub|shardnumsub", -2, "pubsub loading stale", (0, 0, 0), "", "@pubsub @slow", "pubsub", "7.0.0", pubsub::pubsub,
        "Get the count of subscribers for shard channels", "[shardchannel [shardchannel ...]]", "";
    "script|exists", -3, "noscript", (0, 0, 0), "", "@slow @scripting", "scripting", "2.6.0", scripting::script,
        "Check existence of scripts in the script cache.", "sha1 [sha1 ...]", "request_policy:all_shards response_policy:agg_logical_and";
    "script|flush", -2, "noscript", (0, 0, 0), "", "@slow @scripting", "scripting", "2.6.0", scripting::script,
        "Remove all the scripts from the script cache.", "[ASYNC|SYNC]", "request_policy:all_nodes response_policy:all_succeeded";
    "script|help", 2, "loading stale", (0, 0, 0), "", "@slow @scripting", "scripting", "5.0.0", scripting::script,
        "Show helpful text about the different subcommands", "", "";
    "script|kill", 2, "noscript allow_busy", (0, 0, 0), "", "@slow @scripting", "scripting", "2.6.0", scripting::script,
        "Kill the script currently in execution.", "", "request_policy:all_shards response_policy:one_succeeded";
    "script|load", 3, "noscript stale", (0, 0, 0), "", "@slow @scripting", "scripting", "2.6.0", scripting::script,
        "Load the specified Lua script into the script cache.", "script", "request_policy:all_nodes response_policy:all_succeeded";
    "slowlog|get", -2, "admin loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "2.2.12", slowlog::slowlog,
        "Get the slow log's entries", "[count]", "request_policy:all_nodes nondeterministic_output";
    "slowlog|help", 2, "loading stale", (0, 0, 0), "", "@slow", "server", "6.2.0", slowlog::slowlog,
        "Show helpful text about the different subcommands", "", "";
    "slowlog|len", 2, "admin loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "2.2.12", slowlog::slowlog,
        "Get the slow log's length", "", "request_policy:all_nodes response_policy:agg_sum nondeterministic_output";
    "slowlog|reset", 2, "admin loading stale", (0, 0, 0), "", "@admin @slow @dangerous", "server", "2.2.12", slowlog::slowlog,
        "Clear all entries from the slow log", "", "request_policy:all_nodes response_policy:all_succeeded";
    "xgroup|create", -5, "write denyoom", (2, 2, 1), "RW INSERT", "@write @stream @slow", "stream", "5.0.0", stream::group::xgroup,
        "Create a consumer group.", "", "";
    "xgroup|createconsumer", 5, "write denyoom", (2, 2, 1), "RW INSERT", "@write @stream @slow", "stream", "6.2.0", stream::group::xgroup,
        "Create a consumer in a consumer group.", "", "";
    "xgroup|delconsumer", 5, "write", (2, 2, 1), "RW DELETE", "@write @stream @slow", "stream", "5.0.0", stream::group::xgroup,
        "Delete a consumer from a consumer group.", "", "";
    "xgroup|destroy", 4, "write", (2, 2, 1), "RW DELETE", "@write @stream @slow", "stream", "5.0.0", stream::group::xgroup,
        "Destroy a consumer group.", "", "";
    "xgroup|help", 2, "loading stale", (0, 0, 0), "", "@stream @slow", "stream", "5.0.0", stream::group::xgroup,
        "Show helpful text about the different subcommands", "", "";
    "xgroup|setid", -5, "write", (2, 2, 1), "RW UPDATE", "@write @stream @slow", "stream", "5.0.0", stream::group::xgroup,
        "Set a consumer group to an arbitrary last delivered ID value.", "", "";
    "xinfo|consumers", 4, "readonly", (2, 2, 1), "RO ACCESS", "@read @stream @slow", "stream", "5.0.0", stream::xinfo,
        "List the consumers in a consumer group", "", "nondeterministic_output";
    "xinfo|groups", 3, "readonly", (2, 2, 1), "RO ACCESS", "@read @stream @slow", "stream", "5.0.0", stream::xinfo,
        "List the consumer groups of a stream", "", "";
    "xinfo|help", 2, "loading stale", (0, 0, 0), "", "@stream @slow", "stream", "5.0.0", stream::xinfo,
        "Show helpful text about the different subcommands", "", "";
    "xinfo|stream", -3, "readonly", (2, 2, 1), "RO ACCESS", "@read @stream @slow", "stream", "5.0.0", stream::xinfo,
        "Get information about a stream", "", "";
}

/// The commands a connection (or a script) found by name last, as the
/// client spelled them: a pipeline repeating a few commands finds each
/// after its first with a comparison or two instead of a lowercased copy
/// and a hash probe. Four, so that a transaction's cycle (MULTI, SET,
/// INCR, EXEC) stays found: with one, each of its commands pushed out the
/// one before, and the probes were 4% of a transaction at pipeline 16.
#[derive(Default)]
pub struct LastLookup {
    recent: [Recent; 4],
    /// The entry the next new name replaces (oldest first).
    next: usize,
}

/// One name [`LastLookup`] remembers.
#[derive(Default)]
struct Recent {
    name: [u8; 16],
    len: usize,
    spec: Option<&'static CommandSpec>,
}

impl LastLookup {
    /// [`lookup`], remembering what it found.
    pub fn find(&mut self, name: &[u8]) -> Option<&'static CommandSpec> {
        let known = self
            .recent
            .iter()
            .find(|r| r.len == name.len() && r.spec.is_some() && name == &r.name[..r.len]);
        if let Some(r) = known {
            return r.spec;
        }
        let spec = lookup(name);
        if spec.is_some() && name.len() <= 16 {
            let r = &mut self.recent[self.next];
            r.name[..name.len()].copy_from_slice(name);
            r.len = name.len();
            r.spec = spec;
            self.next = (self.next + 1) % self.recent.len();
        }
        spec
    }
}

/// Finds a command by name, case-insensitively.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    find(&COMMANDS, name)
}

/// A table by lowercase name. Every command looks itself up here: a hash
/// probe costs one comparison where a binary search of the ~240 names
/// cost eight (3-4% of a GET at pipeline 16).
type Index =
    std::collections::HashMap<&'static str, &'static CommandSpec, foldhash::fast::RandomState>;

/// [`TABLE`] by name.
static COMMANDS: std::sync::LazyLock<Index> = std::sync::LazyLock::new(|| index(TABLE));

/// [`SUBCOMMANDS`] by `container|sub` name.
static SUBCOMMAND_INDEX: std::sync::LazyLock<Index> =
    std::sync::LazyLock::new(|| index(SUBCOMMANDS));

fn index(table: &'static [CommandSpec]) -> Index {
    table.iter().map(|c| (c.name, c)).collect()
}

/// A command or, named `container|sub`, a subcommand: what COMMAND INFO and
/// GETKEYS accept (a client cannot send `config|get` as a command).
pub fn lookup_with_subcommands(name: &[u8]) -> Option<&'static CommandSpec> {
    if name.contains(&b'|') {
        find(&SUBCOMMAND_INDEX, name)
    } else {
        find(&COMMANDS, name)
    }
}

/// The subcommands of a container command, in name order (empty for other
/// commands).
pub fn subcommands_of(container: &str) -> impl Iterator<Item = &'static CommandSpec> + '_ {
    SUBCOMMANDS.iter().filter(move |c| {
        c.name
            .split_once('|')
            .is_some_and(|(parent, _)| parent == container)
    })
}

/// Case-insensitive lookup in an index of a table.
fn find(index: &Index, name: &[u8]) -> Option<&'static CommandSpec> {
    if name.len() > 32 {
        return None;
    }
    let mut lower = [0u8; 32];
    let lower = &mut lower[..name.len()];
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    let lower = std::str::from_utf8(lower).ok()?;
    index.get(lower).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The remembered command answers only the exact name it was found
    /// by; other spellings, other commands and unknown names go to the
    /// table, and an unknown name does not replace it.
    #[test]
    fn the_last_lookup_answers_its_own_name_only() {
        let mut last = LastLookup::default();
        let name = |s: Option<&CommandSpec>| s.map(|s| s.name);
        assert_eq!(name(last.find(b"PUBLISH")), Some("publish"));
        assert_eq!(name(last.find(b"PUBLISH")), Some("publish"));
        assert_eq!(name(last.find(b"publish")), Some("publish"));
        assert_eq!(name(last.find(b"PUBLISHX")), None);
        assert_eq!(name(last.find(b"publis")), None);
        assert_eq!(name(last.find(b"publish")), Some("publish"));
        assert_eq!(name(last.find(b"get")), Some("get"));
        assert_eq!(name(last.find(b"publish")), Some("publish"));
        let long = b"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
        assert_eq!(name(last.find(long)), None);
        assert_eq!(name(last.find(b"publish")), Some("publish"));
    }

    /// A transaction's four commands all stay remembered; a fifth name
    /// replaces the oldest.
    #[test]
    fn the_last_lookup_keeps_four_names() {
        let mut last = LastLookup::default();
        let held = |last: &LastLookup| -> Vec<String> {
            let mut names: Vec<String> = (last.recent.iter())
                .filter(|r| r.spec.is_some())
                .map(|r| String::from_utf8_lossy(&r.name[..r.len]).into_owned())
                .collect();
            names.sort();
            names
        };
        for _ in 0..3 {
            for cmd in ["MULTI", "SET", "INCR", "EXEC"] {
                assert_eq!(
                    last.find(cmd.as_bytes()).map(|s| s.name),
                    Some(&*cmd.to_lowercase())
                );
            }
        }
        assert_eq!(held(&last), ["EXEC", "INCR", "MULTI", "SET"]);
        assert_eq!(last.find(b"GET").map(|s| s.name), Some("get"));
        assert_eq!(held(&last), ["EXEC", "GET", "INCR", "SET"]);
    }

    #[test]
    fn table_is_sorted_and_unique() {
        for table in [TABLE, SUBCOMMANDS] {
            for w in table.windows(2) {
                assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
            }
        }
    }

    /// Every subcommand belongs to a command of the table whose key spec is
    /// empty (a container), and only `container|sub` names find them.
    #[test]
    fn subcommands_hang_off_containers() {
        for sub in SUBCOMMANDS {
            let (parent, _) = sub.name.split_once('|').expect("container|sub");
            let container = lookup(parent.as_bytes()).expect("container in TABLE");
            assert!(matches!(container.keys, KeySpec::None), "{}", sub.name);
            assert!(lookup(sub.name.as_bytes()).is_none());
        }
        assert_eq!(
            lookup_with_subcommands(b"XINFO|Stream").unwrap().name,
            "xinfo|stream"
        );
        assert_eq!(subcommands_of("xinfo").count(), 4);
        assert_eq!(subcommands_of("get").count(), 0);
    }

    #[test]
    fn index_of_is_the_position_in_all_specs() {
        for (i, c) in all_specs().enumerate() {
            assert_eq!(index_of(c), i);
        }
        assert_eq!(index_of(&SUBCOMMANDS[0]), TABLE.len());
    }

    #[test]
    fn lookup_ignores_case() {
        assert_eq!(lookup(b"GeT").unwrap().name, "get");
        assert!(lookup(b"nosuch").is_none());
    }

    #[test]
    fn key_positions_follow_the_spec() {
        let mset = lookup(b"mset").unwrap();
        let argv = |n: usize| -> Vec<bytes::Bytes> {
            (0..n).map(|i| bytes::Bytes::from(i.to_string())).collect()
        };
        assert_eq!(mset.key_positions(&argv(5)), vec![1, 3]);
        let bitop = lookup(b"bitop").unwrap();
        assert_eq!(bitop.key_positions(&argv(5)), vec![2, 3, 4]);
        let get = lookup(b"get").unwrap();
        assert_eq!(get.key_positions(&argv(2)), vec![1]);
        let sintercard = lookup(b"sintercard").unwrap();
        let args: Vec<bytes::Bytes> = ["sintercard", "2", "a", "b", "LIMIT", "1"]
            .iter()
            .map(|s| bytes::Bytes::from(*s))
            .collect();
        assert_eq!(sintercard.key_positions(&args), vec![2, 3]);
        // A count past the arguments places no keys.
        assert_eq!(sintercard.key_positions(&args[..3]), Vec::<usize>::new());
    }
}

#[cfg(test)]
mod flag_tests {
    use super::*;

    /// Every spec's bits say exactly what its flag words say, and each
    /// named constant is its word's bit.
    #[test]
    fn flag_bits_match_the_flag_words() {
        for spec in TABLE.iter().chain(SUBCOMMANDS.iter()) {
            for (n, name) in FLAG_NAMES.iter().enumerate() {
                let listed = spec.flags.split(' ').any(|w| w == *name);
                assert_eq!(spec.has(1 << n), listed, "{} {name}", spec.name);
            }
        }
        for (bit, name) in [
            (flag::WRITE, "write"),
            (flag::READONLY, "readonly"),
            (flag::ADMIN, "admin"),
            (flag::NOSCRIPT, "noscript"),
            (flag::SKIP_MONITOR, "skip_monitor"),
            (flag::SKIP_SLOWLOG, "skip_slowlog"),
            (flag::ASKING, "asking"),
            (flag::FAST, "fast"),
            (flag::NO_AUTH, "no_auth"),
            (flag::NO_MULTI, "no_multi"),
            (flag::NO_MANDATORY_KEYS, "no_mandatory_keys"),
            (flag::ALLOW_BUSY, "allow_busy"),
        ] {
            assert_eq!(bit, flag_bits(name), "{name}");
        }
    }
}

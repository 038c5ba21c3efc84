//! COMMAND INFO and COMMAND DOCS replies, built from the table.

use super::table::{CommandSpec, KeySpec};
use crate::protocol::Reply;

pub(crate) fn status_set(words: &str) -> Reply {
    Reply::Set(
        words
            .split_whitespace()
            .map(|w| Reply::Status(w.to_string()))
            .collect(),
    )
}

fn bulk_str(s: &str) -> Reply {
    Reply::bulk(s.to_string())
}

/// One command's COMMAND INFO entry, in Redis 7.0's shape.
pub fn info(c: &CommandSpec) -> Reply {
    // Redis reports keys it cannot place by (first, last, step) as movable:
    // (0, 0, 0), or (1, 1, 1) for the destination before them.
    let (first, last, step) = match c.keys {
        KeySpec::None | KeySpec::Streams { .. } | KeySpec::Keynum { dest: false, .. } => (0, 0, 0),
        KeySpec::Keynum { dest: true, .. } => (1, 1, 1),
        KeySpec::Range { first, last, step } => (first, last, step),
    };
    let flags = match c.keys {
        KeySpec::Keynum { .. } | KeySpec::Streams { .. } => format!("{} movablekeys", c.flags),
        _ if super::table::has_unknown_keys(c.name) => format!("{} movablekeys", c.flags),
        _ => c.flags.to_string(),
    };
    let tips = Reply::Set(c.tips.split_whitespace().map(bulk_str).collect());
    let mut key_specs = match c.keys {
        KeySpec::None => Vec::new(),
        KeySpec::Streams { from } => vec![key_spec(
            c.key_flags,
            spec_map(
                "keyword",
                vec![
                    ("keyword", bulk_str("STREAMS")),
                    ("startfrom", Reply::Int(from as i64)),
                ],
            ),
            spec_map(
                "range",
                vec![
                    ("lastkey", Reply::Int(-1)),
                    ("keystep", Reply::Int(1)),
                    ("limit", Reply::Int(2)),
                ],
            ),
        )],
        KeySpec::Keynum {
            numkeys,
            first,
            dest,
        } => {
            let counted = key_spec(
                // The counted keys of a store command are its sources.
                if dest { "RO ACCESS" } else { c.key_flags },
                spec_map("index", vec![("index", Reply::Int(numkeys as i64))]),
                spec_map(
                    "keynum",
                    vec![
                        ("keynumidx", Reply::Int(0)),
                        ("firstkey", Reply::Int((first - numkeys) as i64)),
                        ("keystep", Reply::Int(1)),
                    ],
                ),
            );
            let mut specs = Vec::new();
            if dest {
                specs.push(range_spec(c.key_flags, 1, 0, 1));
            }
            specs.push(counted);
            specs
        }
        // "FIRST; REST": the first key and the others have different
        // flags (RENAME's source and destination, SUNIONSTORE's destination
        // and sources), so Redis gives each part a spec of its own.
        KeySpec::Range { first, last, step } => match c.key_flags.split_once("; ") {
            Some((head, rest)) => {
                let next = first + step;
                let lastkey = if last < 0 { last } else { last - next };
                vec![
                    range_spec(head, first, 0, step),
                    range_spec(rest, next, lastkey, step),
                ]
            }
            None => {
                let lastkey = if last < 0 { last } else { last - first };
                vec![range_spec(c.key_flags, first, lastkey, step)]
            }
        },
    };
    // Keys found after a keyword, besides the ones above (Redis 7.0's
    // specs): GEORADIUS's STORE / STOREDIST destinations, MIGRATE's KEYS.
    let keyword_specs: &[(&str, &str, i64, i64)] = match c.name {
        "georadius" => &[
            ("OW UPDATE", "STORE", 6, 0),
            ("OW UPDATE", "STOREDIST", 6, 0),
        ],
        "georadiusbymember" => &[
            ("OW UPDATE", "STORE", 5, 0),
            ("OW UPDATE", "STOREDIST", 5, 0),
        ],
        "migrate" => &[("RW ACCESS DELETE INCOMPLETE", "KEYS", -2, -1)],
        _ => &[],
    };
    for &(flags, keyword, startfrom, lastkey) in keyword_specs {
        key_specs.push(key_spec(
            flags,
            spec_map(
                "keyword",
                vec![
                    ("keyword", bulk_str(keyword)),
                    ("startfrom", Reply::Int(startfrom)),
                ],
            ),
            spec_map(
                "range",
                vec![
                    ("lastkey", Reply::Int(lastkey)),
                    ("keystep", Reply::Int(1)),
                    ("limit", Reply::Int(0)),
                ],
            ),
        ));
    }
    if super::table::has_unknown_keys(c.name) {
        let unknown = |flags| {
            key_spec(
                flags,
                spec_map("unknown", vec![]),
                spec_map("unknown", vec![]),
            )
        };
        key_specs.push(unknown("RO ACCESS | For the optional BY/GET keyword. It is marked 'unknown' because the key names derive from the content of the key we sort"));
        if c.name == "sort" {
            key_specs.push(unknown("OW UPDATE | For the optional STORE keyword. It is marked 'unknown' because the keyword can appear anywhere in the argument array"));
        }
    }
    Reply::Array(vec![
        bulk_str(c.name),
        Reply::Int(c.arity as i64),
        status_set(&flags),
        Reply::Int(first as i64),
        Reply::Int(last as i64),
        Reply::Int(step as i64),
        status_set(c.acl),
        tips,
        Reply::Set(key_specs),
        Reply::Set(super::subcommands_of(c.name).map(info).collect()),
    ])
}

/// A key spec of keys at `index` up to `lastkey` (relative, or negative
/// from the end) every `step` arguments.
fn range_spec(key_flags: &str, index: i32, lastkey: i32, step: i32) -> Reply {
    key_spec(
        key_flags,
        spec_map("index", vec![("index", Reply::Int(index as i64))]),
        spec_map(
            "range",
            vec![
                ("lastkey", Reply::Int(lastkey as i64)),
                ("keystep", Reply::Int(step as i64)),
                ("limit", Reply::Int(0)),
            ],
        ),
    )
}

/// `{type, spec}` of a begin_search or find_keys part.
fn spec_map(kind: &str, spec: Vec<(&str, Reply)>) -> Reply {
    Reply::Map(vec![
        (bulk_str("type"), bulk_str(kind)),
        (
            bulk_str("spec"),
            Reply::Map(spec.into_iter().map(|(k, v)| (bulk_str(k), v)).collect()),
        ),
    ])
}

/// One key spec. `key_flags` is "FLAGS..." or "FLAGS... | notes".
fn key_spec(key_flags: &str, begin_search: Reply, find_keys: Reply) -> Reply {
    let (flags, notes) = match key_flags.split_once(" | ") {
        Some((f, n)) => (f, Some(n)),
        None => (key_flags, None),
    };
    let mut spec = Vec::new();
    if let Some(n) = notes {
        spec.push((bulk_str("notes"), bulk_str(n)));
    }
    spec.push((bulk_str("flags"), status_set(&key_flags_text(flags))));
    spec.push((bulk_str("begin_search"), begin_search));
    spec.push((bulk_str("find_keys"), find_keys));
    Reply::Map(spec)
}

/// Key-spec flags as Redis prints them: the access type (RO, RW, OW, RM)
/// upper case, the rest lower case.
pub(crate) fn key_flags_text(flags: &str) -> String {
    flags
        .split(" | ")
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(|f| {
            if ["RO", "RW", "OW", "RM"].contains(&f) {
                f.to_string()
            } else {
                f.to_lowercase()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One command's COMMAND DOCS entry: summary, since, group and arguments
/// parsed from the table's synopsis (what redis-cli needs for its hints).
pub fn docs(c: &CommandSpec) -> Reply {
    let mut fields = vec![
        (bulk_str("summary"), bulk_str(c.summary)),
        (bulk_str("since"), bulk_str(c.since)),
        (bulk_str("group"), bulk_str(c.group)),
    ];
    let args = parse_synopsis(c.syntax);
    if !args.is_empty() {
        fields.push((bulk_str("arguments"), Reply::Array(args)));
    }
    Reply::Map(fields)
}

/// Turns a synopsis like `key [NX|XX] [EX seconds]` into COMMAND DOCS
/// argument maps (name, type, flags, token).
fn parse_synopsis(syntax: &str) -> Vec<Reply> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    let mut groups = Vec::new();
    for ch in syntax.chars() {
        match ch {
            '[' => {
                if depth == 0 && !cur.trim().is_empty() {
                    groups.extend(cur.split_whitespace().map(|w| (w.to_string(), false)));
                    cur.clear();
                }
                if depth > 0 {
                    cur.push(ch);
                }
                depth += 1;
            }
            ']' => {
                depth -= 1;
                if depth == 0 {
                    groups.push((cur.trim().to_string(), true));
                    cur.clear();
                } else {
                    cur.push(ch);
                }
            }
            _ => cur.push(ch),
        }
    }
    groups.extend(cur.split_whitespace().map(|w| (w.to_string(), false)));
    for (text, optional) in groups {
        if text == "..." || text.is_empty() {
            continue;
        }
        let multiple = text.ends_with("...");
        let text = text.trim_end_matches("...").trim().to_string();
        let words: Vec<&str> = text.split_whitespace().collect();
        let (token, name) = match words.as_slice() {
            [one]
                if one
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c == '|' || c == '_' || c == '-') =>
            {
                (Some(one.to_string()), one.to_lowercase())
            }
            [first, rest @ ..]
                if first.chars().all(|c| c.is_ascii_uppercase()) && !rest.is_empty() =>
            {
                (Some(first.to_string()), rest.join("_"))
            }
            _ => (None, words.join("_")),
        };
        // A choice like NX|XX is shown as typed (redis-cli prints the name).
        let (token, name) = match token {
            Some(t) if t.contains('|') => (None, t),
            other => (other, name),
        };
        let kind = if name == "key" || name.ends_with("key") {
            "key"
        } else if token.is_some() && words.len() == 1 {
            "pure-token"
        } else {
            "string"
        };
        let mut m = vec![
            (bulk_str("name"), bulk_str(&name)),
            (bulk_str("type"), bulk_str(kind)),
        ];
        if kind == "key" {
            m.push((bulk_str("key_spec_index"), Reply::Int(0)));
        }
        if let Some(t) = token.filter(|t| !t.contains('|')) {
            m.push((bulk_str("token"), bulk_str(&t)));
        }
        let mut flags = Vec::new();
        if optional {
            flags.push(Reply::Status("optional".into()));
        }
        if multiple {
            flags.push(Reply::Status("multiple".into()));
        }
        if !flags.is_empty() {
            m.push((bulk_str("flags"), Reply::Set(flags)));
        }
        out.push(Reply::Map(m));
    }
    out
}

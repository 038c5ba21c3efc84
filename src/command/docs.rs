//! COMMAND INFO and COMMAND DOCS replies, built from the table.

use super::table::{CommandSpec, KeySpec};
use crate::protocol::Reply;

fn status_set(words: &str) -> Reply {
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
    let (first, last, step) = match c.keys {
        KeySpec::None | KeySpec::Streams { .. } => (0, 0, 0),
        KeySpec::Range { first, last, step } => (first, last, step),
        // Redis reports keynum commands as (first, 0?, 1) with a keynum spec.
        KeySpec::Keynum { first, .. } => (first as i32, first as i32, 1),
    };
    let tips = Reply::Set(c.tips.split_whitespace().map(bulk_str).collect());
    let key_specs = match c.keys {
        KeySpec::None => Vec::new(),
        KeySpec::Streams { from } => vec![Reply::Map(vec![
            (bulk_str("flags"), status_set(&key_flags_text(c.key_flags))),
            (
                bulk_str("begin_search"),
                Reply::Map(vec![
                    (bulk_str("type"), bulk_str("keyword")),
                    (
                        bulk_str("spec"),
                        Reply::Map(vec![
                            (bulk_str("keyword"), bulk_str("STREAMS")),
                            (bulk_str("startfrom"), Reply::Int(from as i64)),
                        ]),
                    ),
                ]),
            ),
            (
                bulk_str("find_keys"),
                Reply::Map(vec![
                    (bulk_str("type"), bulk_str("range")),
                    (
                        bulk_str("spec"),
                        Reply::Map(vec![
                            (bulk_str("lastkey"), Reply::Int(-1)),
                            (bulk_str("keystep"), Reply::Int(1)),
                            (bulk_str("limit"), Reply::Int(2)),
                        ]),
                    ),
                ]),
            ),
        ])],
        KeySpec::Keynum { numkeys, first } => vec![Reply::Map(vec![
            (bulk_str("flags"), status_set(&key_flags_text(c.key_flags))),
            (
                bulk_str("begin_search"),
                Reply::Map(vec![
                    (bulk_str("type"), bulk_str("index")),
                    (
                        bulk_str("spec"),
                        Reply::Map(vec![(bulk_str("index"), Reply::Int(numkeys as i64))]),
                    ),
                ]),
            ),
            (
                bulk_str("find_keys"),
                Reply::Map(vec![
                    (bulk_str("type"), bulk_str("keynum")),
                    (
                        bulk_str("spec"),
                        Reply::Map(vec![
                            (bulk_str("keynumidx"), Reply::Int(0)),
                            (bulk_str("firstkey"), Reply::Int((first - numkeys) as i64)),
                            (bulk_str("keystep"), Reply::Int(1)),
                        ]),
                    ),
                ]),
            ),
        ])],
        KeySpec::Range { first, last, step } => {
            let lastkey = if last < 0 { last } else { last - first };
            // `key_flags` is "FLAGS..." or "FLAGS... | notes". Redis prints
            // the access type (RO, RW, OW, RM) upper case, the rest lower.
            let (flags, notes) = match c.key_flags.split_once(" | ") {
                Some((f, n)) => (f, Some(n)),
                None => (c.key_flags, None),
            };
            let flags = key_flags_text(flags);
            let mut spec = Vec::new();
            if let Some(n) = notes {
                spec.push((bulk_str("notes"), bulk_str(n)));
            }
            spec.push((bulk_str("flags"), status_set(&flags)));
            vec![Reply::Map(
                spec.into_iter()
                    .chain(vec![
                        (
                            bulk_str("begin_search"),
                            Reply::Map(vec![
                                (bulk_str("type"), bulk_str("index")),
                                (
                                    bulk_str("spec"),
                                    Reply::Map(vec![(bulk_str("index"), Reply::Int(first as i64))]),
                                ),
                            ]),
                        ),
                        (
                            bulk_str("find_keys"),
                            Reply::Map(vec![
                                (bulk_str("type"), bulk_str("range")),
                                (
                                    bulk_str("spec"),
                                    Reply::Map(vec![
                                        (bulk_str("lastkey"), Reply::Int(lastkey as i64)),
                                        (bulk_str("keystep"), Reply::Int(step as i64)),
                                        (bulk_str("limit"), Reply::Int(0)),
                                    ]),
                                ),
                            ]),
                        ),
                    ])
                    .collect(),
            )]
        }
    };
    Reply::Array(vec![
        bulk_str(c.name),
        Reply::Int(c.arity as i64),
        status_set(c.flags),
        Reply::Int(first as i64),
        Reply::Int(last as i64),
        Reply::Int(step as i64),
        status_set(c.acl),
        tips,
        Reply::Set(key_specs),
        Reply::Set(Vec::new()),
    ])
}

/// Key-spec flags as Redis prints them: the access type (RO, RW, OW, RM)
/// upper case, the rest lower case.
fn key_flags_text(flags: &str) -> String {
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

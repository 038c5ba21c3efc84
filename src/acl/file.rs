//! ACL files (`aclfile`): ACL LOAD reads one whole or changes nothing,
//! ACL SAVE writes every user as `user <name> <rules>` and replaces the
//! file atomically. Errors are Redis's texts.

use std::collections::BTreeMap;

use super::rules::{has_spaces, merge_selectors, User};

/// Reads the users of an ACL file. `Err` is Redis's one-line account of
/// every problem found (then nothing may change).
pub fn load(path: &str, allchannels: bool) -> Result<BTreeMap<Vec<u8>, User>, String> {
    let text = std::fs::read(path).map_err(|e| {
        format!(
            "Error loading ACLs, opening file '{path}': {}",
            strerror(&e)
        )
    })?;
    let mut users = BTreeMap::new();
    let mut errors = String::new();
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let n = i + 1;
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        let argv: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        if argv[0] != b"user" || argv.len() < 2 {
            errors.push_str(&format!(
                "{path}:{n} should start with user keyword followed by the username. "
            ));
            continue;
        }
        let name = argv[1];
        if has_spaces(name) {
            errors.push_str(&format!(
                "'{path}:{n}: username '{}' contains invalid characters. ",
                String::from_utf8_lossy(name)
            ));
            continue;
        }
        if users.contains_key(name) {
            errors.push_str(&format!(
                "WARNING: Duplicate user '{}' found on line {n}. ",
                String::from_utf8_lossy(name)
            ));
            continue;
        }
        let mut user = User::new(allchannels);
        match merge_selectors(&argv[2..]) {
            Err(_) => errors.push_str(&format!(
                "{path}:{n}: Unmatched parenthesis in selector definition."
            )),
            Ok(rules) => {
                for rule in rules {
                    let rule = trim_tabs(&rule);
                    if let Err(e) = user.apply(rule, allchannels) {
                        errors.push_str(&format!("{path}:{n}: {e}. "));
                    }
                }
            }
        }
        users.insert(name.to_vec(), user);
    }
    if errors.is_empty() {
        Ok(users)
    } else {
        errors.push_str(
            "WARNING: ACL errors detected, no change to the previously active ACL rules was performed",
        );
        Err(errors)
    }
}

fn trim_tabs(s: &[u8]) -> &[u8] {
    let keep = |b: &u8| !matches!(b, b'\t' | b'\r' | b'\n');
    let start = s.iter().position(keep).unwrap_or(s.len());
    let end = s.iter().rposition(keep).map_or(start, |e| e + 1);
    &s[start..end]
}

/// Writes `lines` to `path` through a temporary file renamed over it.
pub fn save(path: &str, lines: &[String]) -> std::io::Result<()> {
    let mut text = String::new();
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    let tmp = format!("{path}.tmp-{}", std::process::id());
    let r = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// The C library's text for an I/O error, as Redis quotes it (Rust's
/// Display adds " (os error N)").
fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

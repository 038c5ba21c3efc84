//! The `#!lua ...` first line of scripts and function libraries.

use super::ScriptFlags;
use crate::protocol::reply::Reply;

/// A parsed first line: its options and where the code starts. The code
/// keeps the line's newline so that error line numbers match the body.
pub(crate) struct Shebang {
    /// `flags=...` values, accumulated (`eval_compat` false).
    pub flags: ScriptFlags,
    /// `name=...` (function libraries only).
    pub name: Option<Vec<u8>>,
    /// Byte offset of the code after the first line (at its `\n`).
    pub code_start: usize,
}

/// Parses the shebang of `body` if it has one (`None` = no shebang).
/// `library` accepts `name=` (FUNCTION LOAD); scripts accept only `flags=`.
pub(crate) fn parse(body: &[u8], library: bool) -> Result<Option<Shebang>, Reply> {
    if !body.starts_with(b"#!") {
        return Ok(None);
    }
    let Some(nl) = body.iter().position(|&c| c == b'\n') else {
        return Err(Reply::err("Invalid script shebang"));
    };
    // Split as Redis splits it, like an inline command: quotes group
    // (`name="foo"` names foo), unbalanced ones are invalid.
    let words = crate::protocol::request::split_args(&body[..nl]).ok_or_else(|| {
        Reply::err(if library {
            "Invalid library metadata"
        } else {
            "Invalid engine in script shebang"
        })
    })?;
    let mut parts = words.iter().map(Vec::as_slice);
    let engine = parts.next().unwrap_or(b"#!");
    // A library names its engine in any case (Redis looks engines up
    // case-insensitively); a script's shebang must say `#!lua`.
    let lua = if library {
        engine.eq_ignore_ascii_case(b"#!lua")
    } else {
        engine == b"#!lua"
    };
    if !lua {
        return Err(if library {
            Reply::err(format!("Engine '{}' not found", lossy(&engine[2..])))
        } else {
            Reply::err(format!(
                "Unexpected engine in script shebang: {}",
                lossy(engine)
            ))
        });
    }
    let mut out = Shebang {
        flags: ScriptFlags::default(),
        name: None,
        code_start: nl,
    };
    for part in parts {
        if let (true, Some(value)) = (library, part.strip_prefix(b"name=")) {
            out.name = Some(value.to_vec());
        } else if let (false, Some(value)) = (library, part.strip_prefix(b"flags=")) {
            if value.is_empty() {
                continue;
            }
            for flag in value.split(|&c| c == b',') {
                if !out.flags.set(flag) {
                    return Err(Reply::err(format!(
                        "Unexpected flag in script shebang: {}",
                        lossy(flag)
                    )));
                }
            }
        } else if library {
            return Err(Reply::err(format!(
                "Invalid metadata value given: {}",
                lossy(part)
            )));
        } else {
            return Err(Reply::err(format!(
                "Unknown lua shebang option: {}",
                lossy(part)
            )));
        }
    }
    Ok(Some(out))
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

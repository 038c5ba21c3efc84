//! Glob-style pattern matching with the exact semantics of Redis 7.0's
//! `KEYS`, `SCAN ... MATCH`, `PSUBSCRIBE`, `CONFIG GET` and friends.
//!
//! Redis's matcher has a number of quirks that clients can observe, and a
//! compatible server has to reproduce them rather than use a "clean" glob:
//!
//! * `*` matches any run of bytes, `?` exactly one byte.
//! * `[abc]`, `[^abc]` and `[a-z]` match one byte. Ranges may be reversed
//!   (`[z-a]` is `[a-z]`), and the bounds are compared as *signed* bytes, so
//!   `[a-\xff]` means "from -1 to 97" and matches `\x01`, `a` and `\xff` but
//!   not `b` or `\x80`.
//! * `\x` matches `x` literally, both outside and inside brackets. Inside
//!   brackets an escaped byte is compared case-sensitively even in
//!   case-insensitive mode.
//! * An unterminated `[` class simply ends with the pattern: `[abc` behaves
//!   like `[abc]`, a lone `[` matches nothing and a lone `[^` matches any
//!   byte. A `-` just before the end of the class takes the `]` as the upper
//!   bound: `[a-]` is the range `]`..`a`.
//! * A trailing lone backslash matches a backslash.
//! * In case-insensitive mode a range is swapped *before* both bounds are
//!   lowercased, so `[Z-m]` (90..109 becoming 122..109) matches nothing.
//! * A pattern never matches the empty string unless it is itself empty: the
//!   matcher only enters its loop when both inputs are non-empty. `KEYS *`
//!   and `SCAN MATCH *` still return the key `""` because those commands
//!   special-case the exact pattern `*` as "everything" and skip matching;
//!   callers must do the same (`KEYS **` does not return `""`).
//! * Star handling backtracks, but with two guards against patterns such as
//!   `a*a*a*a*...b` that would otherwise take exponential time: once the rest
//!   of the pattern after a `*` fails at every position of the remaining
//!   string, no earlier `*` can succeed either, so the whole match gives up;
//!   and each `*` that recurses adds one level of nesting, with more than
//!   1000 levels counting as "no match" (so `*a` repeated 1001 times never
//!   matches anything).

/// Deepest `*` nesting Redis 7.0 allows before declaring "no match".
const MAX_NESTING: u32 = 1000;

/// Reports whether `string` matches the glob `pattern`, exactly as Redis's
/// `stringmatchlen` does (see the module documentation for the quirks).
///
/// `nocase` selects ASCII case-insensitive matching, as used by
/// `CONFIG GET`; `KEYS`, `SCAN` and pub/sub patterns are case-sensitive.
pub fn string_match(pattern: &[u8], string: &[u8], nocase: bool) -> bool {
    let mut give_up = false;
    match_from(pattern, string, nocase, &mut give_up, 0)
}

/// Lowercases ASCII letters only, like `tolower` in the C locale that Redis
/// runs its matcher under.
fn fold(c: i32, nocase: bool) -> i32 {
    if nocase && (i32::from(b'A')..=i32::from(b'Z')).contains(&c) {
        c + 32
    } else {
        c
    }
}

/// Compares two single bytes, honouring `nocase`.
fn same_byte(a: u8, b: u8, nocase: bool) -> bool {
    if nocase {
        a.eq_ignore_ascii_case(&b)
    } else {
        a == b
    }
}

/// Widens a byte the way C's (signed on x86/ARM Linux builds) `char` does
/// when Redis stores it in an `int` for range comparisons.
fn signed(b: u8) -> i32 {
    i32::from(b as i8)
}

/// The recursive matcher. `give_up` is shared by the whole match: it is set
/// when the text after some `*` cannot match anywhere, which proves that no
/// longer expansion of an earlier `*` can help either.
fn match_from(mut p: &[u8], mut s: &[u8], nocase: bool, give_up: &mut bool, depth: u32) -> bool {
    if depth > MAX_NESTING {
        return false;
    }
    while !p.is_empty() && !s.is_empty() {
        match p[0] {
            b'*' => {
                // A run of stars behaves like a single one.
                while p.len() > 1 && p[1] == b'*' {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                // Try the rest of the pattern at every remaining position
                // (never at the empty tail: Redis does not try that).
                while !s.is_empty() {
                    if match_from(&p[1..], s, nocase, give_up, depth + 1) {
                        return true;
                    }
                    if *give_up {
                        return false;
                    }
                    s = &s[1..];
                }
                *give_up = true;
                return false;
            }
            b'?' => s = &s[1..],
            b'[' => {
                let (matched, last) = match_class(p, s[0], nocase);
                if !matched {
                    return false;
                }
                s = &s[1..];
                // Leave `p` on the class's last byte; the common step below
                // moves past it.
                p = &p[last..];
            }
            c => {
                let literal = if c == b'\\' && p.len() >= 2 {
                    p = &p[1..];
                    p[0]
                } else {
                    c
                };
                if !same_byte(literal, s[0], nocase) {
                    return false;
                }
                s = &s[1..];
            }
        }
        p = &p[1..];
        if s.is_empty() {
            // Trailing stars can match the empty rest of the string.
            while p.first() == Some(&b'*') {
                p = &p[1..];
            }
            break;
        }
    }
    p.is_empty() && s.is_empty()
}

/// Matches byte `c` against the bracket class starting at `p[0] == b'['`.
///
/// Returns whether the byte is accepted and the index of the last pattern
/// byte belonging to the class (its `]`, or the final byte of the pattern
/// when the class is unterminated).
fn match_class(p: &[u8], c: u8, nocase: bool) -> (bool, usize) {
    let mut i = 1;
    let negate = p.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    loop {
        let rest = p.len() - i;
        if rest >= 2 && p[i] == b'\\' {
            // Escapes inside a class compare exactly, ignoring `nocase`.
            if p[i + 1] == c {
                matched = true;
            }
            i += 2;
        } else if rest > 0 && p[i] == b']' {
            break;
        } else if rest == 0 {
            // Unterminated class: it ends with the pattern.
            i -= 1;
            break;
        } else if rest >= 3 && p[i + 1] == b'-' {
            let (mut lo, mut hi) = (signed(p[i]), signed(p[i + 2]));
            if lo > hi {
                std::mem::swap(&mut lo, &mut hi);
            }
            // Lowercasing happens after the swap, which can leave an empty
            // range (`[Z-m]`); that is what Redis does.
            let (lo, hi, ch) = (fold(lo, nocase), fold(hi, nocase), fold(signed(c), nocase));
            if ch >= lo && ch <= hi {
                matched = true;
            }
            i += 3;
        } else {
            if same_byte(p[i], c, nocase) {
                matched = true;
            }
            i += 1;
        }
    }
    (matched != negate, i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        string_match(p.as_bytes(), s.as_bytes(), false)
    }

    /// The keys used for the `KEYS` experiments against Redis 7.0.15.
    const KEYS: &[&str] = &[
        "a", "b", "c", "ab", "abc", "[", "]", "^", "_", "`", "\\", "-", "A", "Z", "z", "hello",
        "hallo", "hxllo", "hllo", "heeeello", "h*llo", "a\\b", "?", "x",
    ];

    /// Returns the sorted keys of [`KEYS`] matching `p`, like `KEYS p`.
    fn keys(p: &str) -> Vec<&'static str> {
        let mut v: Vec<_> = KEYS.iter().copied().filter(|k| m(p, k)).collect();
        v.sort_unstable();
        v
    }

    fn sorted(mut v: Vec<&'static str>) -> Vec<&'static str> {
        v.sort_unstable();
        v
    }

    const SINGLE: &[&str] = &[
        "-", "?", "A", "Z", "[", "\\", "]", "^", "_", "`", "a", "b", "c", "x", "z",
    ];

    #[test]
    fn star_and_question_mark() {
        assert_eq!(
            keys("h*llo"),
            sorted(vec!["h*llo", "hallo", "heeeello", "hello", "hllo", "hxllo"])
        );
        assert_eq!(keys("a*"), sorted(vec!["a", "a\\b", "ab", "abc"]));
        assert_eq!(keys("*a"), vec!["a"]);
        assert_eq!(keys("?"), SINGLE.to_vec());
        assert_eq!(keys("??"), vec!["ab"]);
        assert!(m("*", "anything"));
        assert!(m("a*b*c", "aXXbYYc"));
        assert!(!m("a*b*c", "aXXbYY"));
        assert!(m("a**", "a"));
        assert!(m("*?", "x"));
        assert!(!m("?", ""));
    }

    #[test]
    fn empty_string_only_matches_empty_pattern() {
        // Redis: `SET "" x; KEYS **` and `SCAN 0 MATCH **` return nothing;
        // `KEYS *` returns "" only through the command's own shortcut.
        assert!(!m("*", ""));
        assert!(!m("**", ""));
        assert!(m("", ""));
        assert!(!m("", "a"));
    }

    #[test]
    fn classes() {
        assert_eq!(keys("h[^e]llo"), sorted(vec!["h*llo", "hallo", "hxllo"]));
        assert_eq!(keys("h[a-b]llo"), vec!["hallo"]);
        assert_eq!(keys("[z-a]"), vec!["a", "b", "c", "x", "z"]);
        assert_eq!(
            keys("[Z-a]"),
            sorted(vec!["Z", "[", "\\", "]", "^", "_", "`", "a"])
        );
        assert_eq!(keys("[-]"), vec!["-"]);
        assert_eq!(keys("[\\-]"), vec!["-"]);
        assert_eq!(keys("[\\]]"), vec!["]"]);
        // An empty class matches nothing, and the `]` after it is literal.
        assert_eq!(keys("[]"), Vec::<&str>::new());
        assert_eq!(keys("[]]"), Vec::<&str>::new());
        assert!(m("[]]", "]") == m("[]", ""));
        // `[^]` is a negated empty class: any single byte.
        assert_eq!(keys("[^]"), SINGLE.to_vec());
    }

    #[test]
    fn unterminated_classes() {
        assert_eq!(keys("["), Vec::<&str>::new());
        assert_eq!(keys("[^"), SINGLE.to_vec());
        assert_eq!(keys("[a"), vec!["a"]);
        assert_eq!(keys("[a-c"), vec!["a", "b", "c"]);
        let not_a: Vec<_> = SINGLE.iter().copied().filter(|k| *k != "a").collect();
        assert_eq!(keys("[^a"), not_a);
        // A lone backslash at the end of a class is a literal backslash.
        assert_eq!(keys("[\\"), vec!["\\"]);
        // `-` as the second-to-last byte swallows the `]` as range end.
        assert_eq!(keys("[a-]"), sorted(vec!["]", "^", "_", "`", "a"]));
    }

    #[test]
    fn escapes() {
        assert_eq!(keys("h\\*llo"), vec!["h*llo"]);
        assert_eq!(keys("\\"), vec!["\\"]);
        assert_eq!(keys("*\\"), vec!["\\"]);
        assert_eq!(keys("a\\"), Vec::<&str>::new());
        assert!(m("a\\", "a\\"));
        assert!(m("\\?", "?"));
        assert!(!m("\\?", "x"));
        assert!(m("\\a", "a"));
    }

    #[test]
    fn signed_byte_ranges() {
        // Observed with KEYS on keys a b B \x01 \x7f \x80 \xfe \xff.
        let keys: &[&[u8]] = &[
            b"a", b"b", b"B", b"\x01", b"\x7f", b"\x80", b"\xfe", b"\xff",
        ];
        let hits = |p: &[u8]| -> Vec<&[u8]> {
            keys.iter()
                .copied()
                .filter(|k| string_match(p, k, false))
                .collect()
        };
        assert_eq!(hits(b"[a-\xff]"), vec![&b"a"[..], b"B", b"\x01", b"\xff"]);
        assert_eq!(hits(b"[\x80-\xfe]"), vec![&b"\x80"[..], b"\xfe"]);
        assert_eq!(hits(b"[\xfe-\x80]"), vec![&b"\x80"[..], b"\xfe"]);
        assert_eq!(
            hits(b"[\x01-\x80]"),
            vec![&b"\x01"[..], b"\x80", b"\xfe", b"\xff"]
        );
        assert_eq!(hits(b"[\x7f-\x80]").len(), keys.len());
        assert_eq!(
            hits(b"[^\x80-\xfe]"),
            vec![&b"a"[..], b"b", b"B", b"\x01", b"\x7f", b"\xff"]
        );
        assert_eq!(hits(b"\xff"), vec![&b"\xff"[..]]);
    }

    #[test]
    fn nocase() {
        // Observed with CONFIG GET, which matches case-insensitively.
        let cfg = |p: &str| string_match(p.as_bytes(), b"maxmemory", true);
        assert!(cfg("MAXMEM*"));
        assert!(cfg("[A-z]axmemory"));
        assert!(cfg("[M]axmemory"));
        assert!(cfg("[L-N]axmemory"));
        assert!(cfg("[l-n]AXMEMORY"));
        assert!(cfg("[\\m]axmemory"));
        // Escapes inside a class stay case-sensitive.
        assert!(!cfg("[\\M]axmemory"));
        // Swap first, lowercase second: 'Z'..'m' becomes 'z'..'m' = empty.
        assert!(!cfg("[Z-m]axmemory"));
        assert!(!string_match(b"MAXMEM*", b"maxmemory", false));
    }

    #[test]
    fn nesting_limit() {
        let s = vec![b'a'; 2000];
        let stars = |n: usize| b"*a".repeat(n);
        assert!(string_match(&stars(999), &s, false));
        assert!(string_match(&stars(1000), &s, false));
        assert!(!string_match(&stars(1001), &s, false));
        assert!(!string_match(&stars(1002), &s, false));
        // Runs of stars count once.
        assert!(string_match(&b"**a".repeat(1000), &s, false));
        // 1500 recursing stars: too deep, even though a trailing star
        // would match anything.
        assert!(!string_match(&b"a*".repeat(1500), &s, false));
        let mut p = stars(1001);
        p.push(b'*');
        assert!(!string_match(&p, &s, false));
    }

    #[test]
    fn pathological_pattern_is_fast() {
        let s = vec![b'a'; 60];
        let mut p = b"a*".repeat(30);
        p.push(b'b');
        let start = std::time::Instant::now();
        assert!(!string_match(&p, &s, false));
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        assert!(string_match(b"a*a*a*a*a*a*b", b"aaaaaaaaaaaaaaab", false));
    }
}

//! Longest common subsequence with the exact output of Redis 7.0's `LCS`
//! command, including the `IDX` match list.
//!
//! Redis fills the classic dynamic-programming table and walks it back
//! from the ends of both strings. The walk decides *which* of several
//! equally long subsequences is reported, and in which order and shape the
//! `IDX` ranges come out, so this module walks it exactly the same way:
//!
//! * when the current bytes are equal, they are part of the result;
//! * otherwise it steps back in `a` only if that keeps a strictly longer
//!   subsequence than stepping back in `b`; on a tie it steps back in `b`;
//! * a run of consecutive matches (diagonal steps) forms one range, emitted
//!   when the run is broken or reaches the start of either string — so
//!   matches are listed from the end of the strings towards the start.
//!
//! The table costs `(a.len() + 1) * (b.len() + 1)` `u32`s, as in Redis,
//! and is refused as Redis refuses it (see [`Refused`]): past
//! `proto-max-bulk-len` bytes, or when it cannot be allocated. Two strings
//! of 100 KB would otherwise ask for 40 GB and end the process.

/// One `IDX` match: a run of bytes common to both strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Match {
    /// Inclusive `(start, end)` byte positions in the first string.
    pub a: (usize, usize),
    /// Inclusive `(start, end)` byte positions in the second string.
    pub b: (usize, usize),
    /// The run's length (what `WITHMATCHLEN` prints).
    pub len: usize,
}

/// The result of [`lcs`]: everything the `LCS` command can reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lcs {
    /// The common subsequence itself (plain `LCS` reply).
    pub string: Vec<u8>,
    /// Its length (`LEN` reply, and the `len` field of `IDX`).
    pub len: usize,
    /// Every match, in Redis's order: from the end of the strings back.
    pub matches: Vec<Match>,
}

impl Lcs {
    /// The matches `IDX MINMATCHLEN min_match_len` reports: runs at least
    /// that long, in the same order. 0 keeps everything (Redis also turns a
    /// negative `MINMATCHLEN` into 0). The `len` field stays the full
    /// subsequence length regardless.
    pub fn matches_min_len(&self, min_match_len: usize) -> Vec<Match> {
        filter_matches(&self.matches, min_match_len)
    }
}

/// Keeps the matches of at least `min_match_len` bytes (all when 0).
pub fn filter_matches(matches: &[Match], min_match_len: usize) -> Vec<Match> {
    matches
        .iter()
        .copied()
        .filter(|m| m.len >= min_match_len)
        .collect()
}

/// Computes the longest common subsequence of `a` and `b` and its match
/// ranges exactly as Redis 7.0's `LCS` does (see the module docs for the
/// tie-breaking that picks among equally long answers).
pub fn lcs(a: &[u8], b: &[u8], max_table_bytes: u64) -> Result<Lcs, Refused> {
    // Lengths that would not fit the table's `u32` cells.
    if a.len() as u64 >= u64::from(u32::MAX) - 1 || b.len() as u64 >= u64::from(u32::MAX) - 1 {
        return Err(Refused::TooLong);
    }
    let width = b.len() + 1;
    let cells = (a.len() as u64 + 1) * width as u64;
    if cells.saturating_mul(4) > max_table_bytes {
        return Err(Refused::OverLimit);
    }
    // table[i * width + j] = LCS length of a[..i] and b[..j].
    let cells = usize::try_from(cells).map_err(|_| Refused::NoMemory)?;
    let mut table = Vec::new();
    table
        .try_reserve_exact(cells)
        .map_err(|_| Refused::NoMemory)?;
    table.resize(cells, 0u32);
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            table[i * width + j] = if a[i - 1] == b[j - 1] {
                table[(i - 1) * width + j - 1] + 1
            } else {
                table[(i - 1) * width + j].max(table[i * width + j - 1])
            };
        }
    }
    let at = |i: usize, j: usize| table[i * width + j];
    let total = at(a.len(), b.len()) as usize;
    let mut string = vec![0u8; total];
    let mut matches = Vec::new();
    // The run being built, as (a_start, a_end, b_start, b_end).
    let mut run: Option<(usize, usize, usize, usize)> = None;
    let mut filled = total;
    let (mut i, mut j) = (a.len(), b.len());
    while i > 0 && j > 0 {
        let emit = if a[i - 1] == b[j - 1] {
            filled -= 1;
            string[filled] = a[i - 1];
            run = Some(match run {
                // Extends the run backwards: each match is one step up the
                // diagonal from the previous one.
                Some((_, ae, _, be)) => (i - 1, ae, j - 1, be),
                None => (i - 1, i - 1, j - 1, j - 1),
            });
            // Reaching the start of either string ends the walk.
            let at_start = i == 1 || j == 1;
            i -= 1;
            j -= 1;
            at_start
        } else {
            if at(i - 1, j) > at(i, j - 1) {
                i -= 1;
            } else {
                j -= 1;
            }
            run.is_some()
        };
        let finished = if emit { run.take() } else { None };
        if let Some((as_, ae, bs, be)) = finished {
            matches.push(Match {
                a: (as_, ae),
                b: (bs, be),
                len: ae - as_ + 1,
            });
        }
    }
    Ok(Lcs {
        string,
        len: total,
        matches,
    })
}

/// Why [`lcs`] refused to build its table: Redis 7.0's errors, in the
/// order it checks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// A string too long for the table's cells.
    TooLong,
    /// A table larger than `proto-max-bulk-len`.
    OverLimit,
    /// A table the allocator could not give.
    NoMemory,
}

impl Refused {
    /// The error reply's text.
    pub fn message(self) -> &'static str {
        match self {
            Refused::TooLong => "String too long for LCS",
            Refused::OverLimit => {
                "Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len"
            }
            Refused::NoMemory => "Insufficient memory, failed allocating transient memory for LCS",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(a: (usize, usize), b: (usize, usize)) -> Match {
        Match {
            a,
            b,
            len: a.1 - a.0 + 1,
        }
    }

    #[test]
    fn a_table_past_the_limit_is_refused_before_it_is_allocated() {
        // (3 + 1) * (2 + 1) cells of 4 bytes: 48 bytes.
        assert!(lcs(b"abc", b"ab", 48).is_ok());
        assert_eq!(lcs(b"abc", b"ab", 47), Err(Refused::OverLimit));
        let big = vec![b'x'; 1 << 20];
        assert_eq!(lcs(&big, &big, 512 << 20), Err(Refused::OverLimit));
    }

    #[test]
    fn redis_docs_example() {
        // LCS k1 k2 IDX WITHMATCHLEN on ohmytext / mynewtext.
        let r = lcs(b"ohmytext", b"mynewtext", u64::MAX).unwrap();
        assert_eq!(r.string, b"mytext");
        assert_eq!(r.len, 6);
        assert_eq!(r.matches, vec![m((4, 7), (5, 8)), m((2, 3), (0, 1))]);
        assert_eq!(r.matches[0].len, 4);
        assert_eq!(r.matches[1].len, 2);
        assert_eq!(r.matches_min_len(4), vec![m((4, 7), (5, 8))]);
        assert_eq!(r.matches_min_len(0), r.matches);
        assert_eq!(r.matches_min_len(5), vec![]);
    }

    #[test]
    fn empty_and_disjoint() {
        for (a, b) in [
            (&b""[..], &b"abc"[..]),
            (b"abc", b""),
            (b"abc", b"xyz"),
            (b"", b""),
        ] {
            let r = lcs(a, b, u64::MAX).unwrap();
            assert_eq!(r.len, 0);
            assert!(r.string.is_empty());
            assert!(r.matches.is_empty());
        }
    }

    #[test]
    fn tie_breaking_matches_redis() {
        // Observed: "aaaa" vs "aa" matches the *last* two bytes of a.
        let r = lcs(b"aaaa", b"aa", u64::MAX).unwrap();
        assert_eq!(r.matches, vec![m((2, 3), (0, 1))]);
        // "abcabc" vs "cba": of the length-2 answers ("cb", "ca", "ba") the
        // walk yields "cb", at a[2], a[4] against b[0], b[1].
        let r = lcs(b"abcabc", b"cba", u64::MAX).unwrap();
        assert_eq!(r.matches, vec![m((4, 4), (1, 1)), m((2, 2), (0, 0))]);
        assert_eq!(r.string, b"cb");
        // "ab" vs "ba": a single one-byte match at the start.
        let r = lcs(b"ab", b"ba", u64::MAX).unwrap();
        assert_eq!(r.matches, vec![m((1, 1), (0, 0))]);
        assert_eq!(r.string, b"b");
    }

    #[test]
    fn string_is_a_common_subsequence() {
        fn is_subseq(needle: &[u8], hay: &[u8]) -> bool {
            let mut it = hay.iter();
            needle.iter().all(|c| it.any(|h| h == c))
        }
        let a = b"the quick brown fox jumps over the lazy dog";
        let b = b"pack my box with five dozen liquor jugs";
        let r = lcs(a, b, u64::MAX).unwrap();
        assert!(is_subseq(&r.string, a) && is_subseq(&r.string, b));
        assert_eq!(r.string.len(), r.len);
        // The ranges cover exactly the subsequence, back to front.
        let covered: usize = r.matches.iter().map(|m| m.len).sum();
        assert_eq!(covered, r.len);
        for w in r.matches.windows(2) {
            assert!(w[1].a.1 < w[0].a.0 && w[1].b.1 < w[0].b.0);
        }
        for mt in &r.matches {
            assert_eq!(&a[mt.a.0..=mt.a.1], &b[mt.b.0..=mt.b.1]);
        }
    }
}

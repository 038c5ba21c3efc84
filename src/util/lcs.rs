//! Longest common subsequence (provisional; replaced by the full module).

/// One matched range pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    /// Range in the first string (inclusive).
    pub a: (usize, usize),
    /// Range in the second string (inclusive).
    pub b: (usize, usize),
    /// Length of the match.
    pub len: usize,
}

/// The LCS result.
#[derive(Debug, Clone)]
pub struct Lcs {
    /// The common subsequence.
    pub string: Vec<u8>,
    /// Its length.
    pub len: usize,
    /// Matches from the end backwards, as Redis lists them.
    pub matches: Vec<Match>,
}

/// Computes the LCS of two byte strings.
pub fn lcs(a: &[u8], b: &[u8]) -> Lcs {
    let (n, m) = (a.len(), b.len());
    let mut t = vec![0u32; (n + 1) * (m + 1)];
    let idx = |i: usize, j: usize| i * (m + 1) + j;
    for i in 1..=n {
        for j in 1..=m {
            t[idx(i, j)] = if a[i - 1] == b[j - 1] {
                t[idx(i - 1, j - 1)] + 1
            } else {
                t[idx(i - 1, j)].max(t[idx(i, j - 1)])
            };
        }
    }
    let len = t[idx(n, m)] as usize;
    let mut out = vec![0u8; len];
    let (mut i, mut j, mut k) = (n, m, len);
    let mut matches = Vec::new();
    let mut cur: Option<Match> = None;
    while i > 0 && j > 0 {
        if a[i - 1] == b[j - 1] {
            k -= 1;
            out[k] = a[i - 1];
            match &mut cur {
                Some(c) if c.a.0 == i && c.b.0 == j => {
                    c.a.0 = i - 1;
                    c.b.0 = j - 1;
                    c.len += 1;
                }
                _ => {
                    if let Some(c) = cur.take() {
                        matches.push(c);
                    }
                    cur = Some(Match {
                        a: (i - 1, i - 1),
                        b: (j - 1, j - 1),
                        len: 1,
                    });
                }
            }
            i -= 1;
            j -= 1;
        } else if t[idx(i - 1, j)] > t[idx(i, j - 1)] {
            i -= 1;
        } else {
            j -= 1;
        }
    }
    if let Some(c) = cur {
        matches.push(c);
    }
    Lcs {
        string: out,
        len,
        matches,
    }
}

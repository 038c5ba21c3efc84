//! Number parsing and formatting with the exact text rules of Redis 7.0.
//!
//! Redis leans on C's `strtoll`-like and `strtod` parsers plus `printf`
//! formats, and clients see every corner of them: which strings are valid
//! integers, which float spellings `ZADD` accepts, and the precise digits of
//! `ZSCORE` and `INCRBYFLOAT` replies. This module reproduces those rules
//! without libc:
//!
//! * [`parse_i64`]: `string2ll`, used for every integer argument and for the
//!   stored value of `INCR`-family commands.
//! * [`parse_f64`]: `string2d`, used for `ZADD`/`ZINCRBY` scores and other
//!   double arguments; [`parse_f64_range`] is the laxer rule of
//!   `ZRANGEBYSCORE`-style bounds.
//! * [`format_double`]: `%.17g`, the text of every double reply.
//! * [`LongDouble`], [`incrbyfloat`] and [`hincrbyfloat`]: an exact software
//!   model of the x87 80-bit `long double` arithmetic and `%.17Lf` printing
//!   behind `INCRBYFLOAT`/`HINCRBYFLOAT`, so results such as
//!   `1000.70000000000000001` come out digit for digit.
//! * [`format_incrbyfloat`]: an `f64`-only approximation of the
//!   `INCRBYFLOAT` text, for callers that only have a double.

use std::cmp::Ordering;

/// Parses a decimal integer with Redis's strict `string2ll` rules.
///
/// Accepted: an optional `-`, then either the single digit `0` or a
/// non-zero digit followed by digits, with the value inside `i64`. Rejected:
/// the empty string, `+1`, leading or trailing spaces, leading zeros (`01`,
/// `00`, `-01`), `-0`, any non-digit, and values out of range — all of which
/// Redis answers with "ERR value is not an integer or out of range" in
/// `INCRBY`, `EXPIRE`, `SETRANGE` and friends.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s == b"0" {
        return Some(0);
    }
    let (neg, digits) = match s.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, s),
    };
    // The first digit must be 1-9: this rejects "", "-", "-0" and "01".
    if !matches!(digits.first(), Some(b'1'..=b'9')) {
        return None;
    }
    // Accumulate the magnitude as u64 so that i64::MIN fits.
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if neg {
        0i64.checked_sub_unsigned(v)
    } else {
        i64::try_from(v).ok()
    }
}

/// Parses a double with the rules of Redis's `string2d` (`ZADD` scores,
/// `ZINCRBY`, `GEOADD` coordinates and other double arguments).
///
/// Accepts everything C's `strtod` accepts when it consumes the whole
/// string: decimal forms (`1e3`, `.5`, `5.`, `+1.5`, `00012`), hexadecimal
/// floats (`0x10`, `0x1p3`, `0x.8`), and `inf`/`infinity` in any case with
/// an optional sign. Rejects the empty string, any whitespace (leading or
/// trailing), trailing garbage (`1e`, `0x`, `1_0`), NaN in every spelling,
/// finite literals that overflow (`1e400` — unlike the literal `inf`), and
/// non-zero literals that underflow to zero (`1e-400`, `2e-324`); literals
/// that underflow to a subnormal (`1e-310`, `3e-324`) are accepted.
pub fn parse_f64(s: &[u8]) -> Option<f64> {
    if let Some(v) = parse_plain_decimal(s) {
        return v;
    }
    match scan(s)? {
        Literal::Inf { neg } => Some(signed_inf(neg)),
        Literal::Zero { neg } => Some(signed_zero(neg)),
        Literal::Finite(r) => match round_ratio(&r, F64) {
            Rounded::Finite { mant, exp } => Some(f64_from_parts(r.neg, mant, exp)),
            // strtod reports ERANGE for these, which string2d turns into
            // an error.
            Rounded::Zero | Rounded::Inf => None,
        },
        Literal::Overflow { .. } | Literal::Underflow { .. } => None,
    }
}

/// Fast path of [`parse_f64`] for the common spelling `[-+]digits[.digits]
/// [e[-+]digits]`: Rust's parser rounds correctly, like strtod, so only
/// strtod's range errors need adding (overflow to infinity, or a non-zero
/// number that rounds to zero). `None` = not this spelling, use the slow
/// path; `Some(None)` = invalid.
fn parse_plain_decimal(s: &[u8]) -> Option<Option<f64>> {
    if s.is_empty() || s.len() > 64 {
        return None;
    }
    let mut i = 0;
    if matches!(s[0], b'-' | b'+') {
        i = 1;
    }
    let mut digits = 0;
    let mut nonzero = false;
    while i < s.len() && s[i].is_ascii_digit() {
        nonzero |= s[i] != b'0';
        digits += 1;
        i += 1;
    }
    if i < s.len() && s[i] == b'.' {
        i += 1;
        while i < s.len() && s[i].is_ascii_digit() {
            nonzero |= s[i] != b'0';
            digits += 1;
            i += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    if i < s.len() && matches!(s[i], b'e' | b'E') {
        i += 1;
        if i < s.len() && matches!(s[i], b'-' | b'+') {
            i += 1;
        }
        let exp_start = i;
        while i < s.len() && s[i].is_ascii_digit() {
            i += 1;
        }
        if i == exp_start {
            return None;
        }
    }
    if i != s.len() {
        return None;
    }
    let v: f64 = std::str::from_utf8(s).ok()?.parse().ok()?;
    if v.is_infinite() || (v == 0.0 && nonzero) {
        return Some(None);
    }
    Some(Some(v))
}

/// Parses one bound of `ZRANGEBYSCORE`/`ZCOUNT`/`ZREMRANGEBYSCORE` (after
/// the caller has removed a leading `(`), which Redis reads with a bare
/// `strtod` and only a NaN / full-consumption check.
///
/// That makes it laxer than [`parse_f64`]: leading whitespace is skipped
/// (`" 1"`, `"\t0"`), overflow gives ±infinity (`1e400`), underflow gives
/// zero, the empty string is 0 (so `(` alone means "greater than 0"), and
/// the text ends at the first NUL byte (`"1\0x"` is 1). Trailing
/// whitespace, a blank string and NaN are still rejected.
pub fn parse_f64_range(s: &[u8]) -> Option<f64> {
    let s = s.split(|&c| c == 0).next().unwrap_or_default();
    if s.is_empty() {
        return Some(0.0);
    }
    let s = &s[s.iter().take_while(|&&c| is_c_space(c)).count()..];
    match scan(s)? {
        Literal::Inf { neg } | Literal::Overflow { neg } => Some(signed_inf(neg)),
        Literal::Zero { neg } | Literal::Underflow { neg } => Some(signed_zero(neg)),
        Literal::Finite(r) => Some(match round_ratio(&r, F64) {
            Rounded::Finite { mant, exp } => f64_from_parts(r.neg, mant, exp),
            Rounded::Zero => signed_zero(r.neg),
            Rounded::Inf => signed_inf(r.neg),
        }),
    }
}

/// Formats a double the way Redis 7.0 replies with one (`ZSCORE`,
/// `ZINCRBY`, `ZRANGE ... WITHSCORES`, RESP3 doubles): C's `%.17g`.
///
/// So `1.1` is `1.1000000000000001`, `0.1` is `0.10000000000000001`, `1e16`
/// is `10000000000000000` but `1e17` is `1e+17`, `1e-5` is
/// `1.0000000000000001e-05`, and infinities are `inf` / `-inf`. Negative
/// zero prints as `-0` (Redis shows that for skiplist-encoded sets; its
/// small listpack encoding happens to store -0 as the integer 0).
pub fn format_double(v: f64) -> String {
    // Whole numbers below 1e17 print as their digits (`%.17g` has room for
    // all of them), and most scores are whole: the general path's
    // scientific formatting and parse was 3.8% of the server's time under
    // ZPOPMIN, whose replies carry a score each.
    if v.trunc() == v && v.abs() < 1e17 {
        if v == 0.0 && v.is_sign_negative() {
            return "-0".to_owned();
        }
        return (v as i64).to_string();
    }
    format_double_digits(v)
}

/// [`format_double`] for any double, through its 17 significant digits.
fn format_double_digits(v: f64) -> String {
    if v.is_nan() {
        return "nan".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    // Rust's `{:.16e}` is exact and rounds ties to even, like glibc's
    // printf, so it yields the same 17 significant digits as `%.17e`.
    let sci = format!("{:.16e}", v.abs());
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` always has an exponent");
    let exp: i32 = exp.parse().expect("`{:e}` exponent is an integer");
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    let mut out = String::new();
    if v.is_sign_negative() {
        out.push('-');
    }
    // %g picks fixed notation when -4 <= exponent < precision (17).
    if (-4..17).contains(&exp) {
        let (int, frac) = if exp >= 0 {
            let split = exp as usize + 1;
            (digits[..split].to_vec(), digits[split..].to_vec())
        } else {
            let mut frac = vec![b'0'; (-exp - 1) as usize];
            frac.extend_from_slice(&digits);
            (b"0".to_vec(), frac)
        };
        push_ascii(&mut out, &int);
        push_fraction(&mut out, &frac);
    } else {
        push_ascii(&mut out, &digits[..1]);
        push_fraction(&mut out, &digits[1..]);
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        // C prints at least two exponent digits.
        out.push_str(&format!("{:02}", exp.unsigned_abs()));
    }
    out
}

/// Formats an `INCRBYFLOAT` result from an `f64`, approximating Redis's
/// `long double` `%.17Lf` text; `None` when the value is NaN or infinite
/// (Redis: "ERR increment would produce NaN or Infinity").
///
/// The rule: take the shortest decimal that round-trips the double, write
/// it in plain notation (no exponent), round it to 17 fractional digits
/// (ties to even), drop trailing zeros and a bare `.`, and print `-0` as
/// `0`. This gives Redis's text for the everyday cases (`10.6`, `3000`,
/// `5200`, `-0.1`, `100000000000000000000`, `0.0000000001`, `0` for
/// `1e-18`, `0.00000000000000002` for `1.5e-17`). It cannot match where
/// Redis's 64-bit-mantissa arithmetic shows through: `1000.7` (Redis:
/// `1000.70000000000000001`), `1e30` (Redis:
/// `1000000000000000000024696061952`), or sums whose `f64` rounding error
/// shows (`1.1 + 2.2` is `3.3000000000000003` here but `3.3` in Redis).
/// On random "everyday" operands (up to 3 decimals, magnitudes up to 1e6)
/// about a third of results differ from Redis, mostly for values of 1000
/// and above where Redis prints noise digits (`-687.96000000000000002`).
/// Use [`incrbyfloat`] / [`LongDouble`] for exact results.
pub fn format_incrbyfloat(v: f64) -> Option<String> {
    if !v.is_finite() {
        return None;
    }
    // `{:e}` gives the shortest round-trip digits, e.g. "1.1e0", "1e30".
    let sci = format!("{:e}", v.abs());
    let (mantissa, exp) = sci.split_once('e')?;
    let exp: i64 = exp.parse().ok()?;
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    // Place the digits: the first one has weight 10^exp.
    let point = exp + 1; // digits before the decimal point
    let (int, frac) = if point <= 0 {
        let mut frac = vec![b'0'; (-point) as usize];
        frac.extend_from_slice(&digits);
        (vec![b'0'], frac)
    } else if point as usize >= digits.len() {
        let mut int = digits.clone();
        int.resize(point as usize, b'0');
        (int, Vec::new())
    } else {
        let p = point as usize;
        (digits[..p].to_vec(), digits[p..].to_vec())
    };
    Some(fixed_17(v.is_sign_negative(), int, frac))
}

/// Rounds `int.frac` (decimal digits) to 17 fractional digits, ties to
/// even, then applies Redis's human-friendly trimming: trailing zeros and a
/// bare point go, and `-0` becomes `0`.
fn fixed_17(neg: bool, mut int: Vec<u8>, mut frac: Vec<u8>) -> String {
    const KEEP: usize = 17;
    if frac.len() > KEEP {
        let dropped = frac.split_off(KEEP);
        let rest_nonzero = dropped[1..].iter().any(|&d| d != b'0');
        let last_odd = frac.last().is_some_and(|d| (d - b'0') % 2 == 1);
        let up = match dropped[0].cmp(&b'5') {
            Ordering::Greater => true,
            Ordering::Equal => rest_nonzero || last_odd,
            Ordering::Less => false,
        };
        if up && increment_decimal(&mut frac) {
            // Carry out of the fraction into the integer part.
            if increment_decimal(&mut int) {
                int.insert(0, b'1');
            }
        }
    }
    while frac.last() == Some(&b'0') {
        frac.pop();
    }
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    push_ascii(&mut out, &int);
    if !frac.is_empty() {
        out.push('.');
        push_ascii(&mut out, &frac);
    }
    if out == "-0" {
        out = "0".to_owned();
    }
    out
}

/// Adds one to a decimal digit string in place; returns the carry out.
fn increment_decimal(digits: &mut [u8]) -> bool {
    for d in digits.iter_mut().rev() {
        if *d == b'9' {
            *d = b'0';
        } else {
            *d += 1;
            return false;
        }
    }
    true
}

/// Appends ASCII digit bytes to a string.
fn push_ascii(out: &mut String, digits: &[u8]) {
    out.extend(digits.iter().map(|&d| char::from(d)));
}

/// Appends `.digits` with trailing zeros removed, or nothing if all zero
/// (what `%g` does without the `#` flag).
fn push_fraction(out: &mut String, frac: &[u8]) {
    let end = frac.iter().rposition(|&d| d != b'0').map_or(0, |i| i + 1);
    if end > 0 {
        out.push('.');
        push_ascii(out, &frac[..end]);
    }
}

/// C's `isspace` in the "C" locale.
fn is_c_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn signed_inf(neg: bool) -> f64 {
    if neg {
        f64::NEG_INFINITY
    } else {
        f64::INFINITY
    }
}

fn signed_zero(neg: bool) -> f64 {
    if neg {
        -0.0
    } else {
        0.0
    }
}

// ---------------------------------------------------------------------------
// INCRBYFLOAT: x87 extended precision in software.
// ---------------------------------------------------------------------------

/// Redis refuses `long double` strings this long or longer
/// (`MAX_LONG_DOUBLE_CHARS`, 5 KiB), even for a value such as `000…01`.
const MAX_LONG_DOUBLE_CHARS: usize = 5 * 1024;

/// A model of the x87 80-bit `long double` that Redis uses for
/// `INCRBYFLOAT` and `HINCRBYFLOAT`: 64-bit mantissa, exponents down to
/// subnormal 2^-16445 and up to 2^16383, correctly rounded (ties to even).
///
/// Modelling it exactly is what makes results such as `1000.7` →
/// `1000.70000000000000001` or `1e30` → `1000000000000000000024696061952`
/// (and `1.1 + 2.2` → `3.3`) identical to Redis's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongDouble {
    neg: bool,
    kind: LdKind,
}

/// The value classes a [`LongDouble`] can be in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LdKind {
    /// `mant * 2^exp`; zero when `mant == 0`.
    Finite {
        mant: u64,
        exp: i32,
    },
    Inf,
    Nan,
}

impl LongDouble {
    /// Zero, the starting value of a missing key or field.
    pub const ZERO: LongDouble = LongDouble {
        neg: false,
        kind: LdKind::Finite { mant: 0, exp: 0 },
    };

    /// Parses text with Redis's `string2ld` rules (the operands of
    /// `INCRBYFLOAT`/`HINCRBYFLOAT`, including the stored value).
    ///
    /// The same as [`parse_f64`] except for range: the wider exponent makes
    /// `1e400` and `1e-4950` valid (only `1e4933` / `1e-4960` over- or
    /// underflow), `inf` is accepted (the caller then reports the NaN /
    /// infinity error), and strings of 5120 bytes or more are rejected.
    pub fn parse(s: &[u8]) -> Option<LongDouble> {
        if s.len() >= MAX_LONG_DOUBLE_CHARS {
            return None;
        }
        match scan(s)? {
            Literal::Inf { neg } => Some(LongDouble {
                neg,
                kind: LdKind::Inf,
            }),
            Literal::Zero { neg } => Some(LongDouble {
                neg,
                kind: LdKind::Finite { mant: 0, exp: 0 },
            }),
            Literal::Finite(r) => match round_ratio(&r, F80) {
                Rounded::Finite { mant, exp } => Some(LongDouble {
                    neg: r.neg,
                    kind: LdKind::Finite {
                        mant: u64::try_from(mant).expect("64-bit mantissa"),
                        exp,
                    },
                }),
                Rounded::Zero | Rounded::Inf => None,
            },
            Literal::Overflow { .. } | Literal::Underflow { .. } => None,
        }
    }

    /// Whether the value is neither infinite nor NaN.
    /// A blocking timeout in milliseconds as Redis derives it from seconds:
    /// `ceil(x * 1000)` converted to a 64-bit integer. `None` where that
    /// conversion overflows (infinities, huge values), which the x87
    /// conversion turns into the most negative integer, so Redis reports
    /// "timeout is negative".
    pub fn timeout_millis(&self) -> Option<i64> {
        let LdKind::Finite { mant, exp } = self.kind else {
            return None;
        };
        if mant == 0 {
            return Some(0);
        }
        let ms = mant as f64 * 2f64.powi(exp) * 1000.0;
        if ms == 0.0 {
            // Too small for f64 but not zero: ceil gives 1 for a positive
            // value, 0 for a negative one.
            return Some(if self.neg { 0 } else { 1 });
        }
        let ms = if self.neg { -ms.floor() } else { ms.ceil() };
        if !ms.is_finite() || ms.abs() >= i64::MAX as f64 {
            return None;
        }
        Some(if ms == 0.0 { 0 } else { ms as i64 })
    }

    pub fn is_finite(&self) -> bool {
        matches!(self.kind, LdKind::Finite { .. })
    }

    /// The sum; see the `Add` impl.
    fn add_impl(self, other: LongDouble) -> LongDouble {
        let nan = LongDouble {
            neg: false,
            kind: LdKind::Nan,
        };
        match (self.kind, other.kind) {
            (LdKind::Nan, _) | (_, LdKind::Nan) => nan,
            (LdKind::Inf, LdKind::Inf) if self.neg != other.neg => nan,
            (LdKind::Inf, _) => self,
            (_, LdKind::Inf) => other,
            (LdKind::Finite { mant: ma, exp: ea }, LdKind::Finite { mant: mb, exp: eb }) => {
                add_finite((self.neg, ma, ea), (other.neg, mb, eb))
            }
        }
    }

    /// The text Redis stores and replies for this value: `%.17Lf` with
    /// trailing zeros and a bare `.` removed, and `-0` shown as `0`.
    /// `None` for infinities and NaN, which Redis never prints here.
    pub fn to_human_string(&self) -> Option<String> {
        let LdKind::Finite { mant, exp } = self.kind else {
            return None;
        };
        let big = Big::from_u128(u128::from(mant));
        let (int, frac) = if exp >= 0 {
            let mut n = big;
            n.shl(exp.unsigned_abs().into());
            (n.to_decimal().into_bytes(), Vec::new())
        } else {
            // mant * 2^-k == mant * 5^k / 10^k: exact decimal digits.
            let k = exp.unsigned_abs() as usize;
            let mut n = big;
            n.mul_pow(5, k as u64);
            let mut digits = n.to_decimal().into_bytes();
            if digits.len() <= k {
                let mut padded = vec![b'0'; k + 1 - digits.len()];
                padded.extend_from_slice(&digits);
                digits = padded;
            }
            let frac = digits.split_off(digits.len() - k);
            (digits, frac)
        };
        Some(fixed_17(self.neg, int, frac))
    }
}

impl std::ops::Add for LongDouble {
    type Output = LongDouble;

    /// The correctly rounded sum, as the x87 `fadd` behind Redis's
    /// `value += incr` computes it (overflow gives infinity, `inf + -inf`
    /// gives NaN, and `x + -x` is `+0`).
    fn add(self, other: LongDouble) -> LongDouble {
        self.add_impl(other)
    }
}

/// Why an `INCRBYFLOAT` or `HINCRBYFLOAT` failed; each maps to one Redis
/// error reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncrFloatError {
    /// The increment (or, for `INCRBYFLOAT`, the stored value) is not a
    /// float: "ERR value is not a valid float".
    NotAFloat,
    /// `HINCRBYFLOAT` only: the stored field is not a float:
    /// "ERR hash value is not a float".
    HashValueNotAFloat,
    /// `HINCRBYFLOAT` only: the increment itself is infinite:
    /// "ERR value is NaN or Infinity".
    IncrementNotFinite,
    /// The sum (or an infinite operand, for `INCRBYFLOAT`) is not finite:
    /// "ERR increment would produce NaN or Infinity".
    NanOrInfinity,
}

/// Computes `INCRBYFLOAT`: the new value's text (to store and to reply)
/// given the current string value (`None` for a missing key) and the
/// increment argument, checking in Redis's order: stored value, then
/// increment, then the sum.
pub fn incrbyfloat(current: Option<&[u8]>, incr: &[u8]) -> Result<String, IncrFloatError> {
    let cur = match current {
        Some(text) => LongDouble::parse(text).ok_or(IncrFloatError::NotAFloat)?,
        None => LongDouble::ZERO,
    };
    let inc = LongDouble::parse(incr).ok_or(IncrFloatError::NotAFloat)?;
    (cur + inc)
        .to_human_string()
        .ok_or(IncrFloatError::NanOrInfinity)
}

/// Computes `HINCRBYFLOAT`, which checks in a different order from
/// `INCRBYFLOAT` and has its own messages: increment parse, then "increment
/// is infinite", then the stored field (`None` when missing), then the sum.
pub fn hincrbyfloat(current: Option<&[u8]>, incr: &[u8]) -> Result<String, IncrFloatError> {
    let inc = LongDouble::parse(incr).ok_or(IncrFloatError::NotAFloat)?;
    if !inc.is_finite() {
        return Err(IncrFloatError::IncrementNotFinite);
    }
    let cur = match current {
        Some(text) => LongDouble::parse(text).ok_or(IncrFloatError::HashValueNotAFloat)?,
        None => LongDouble::ZERO,
    };
    (cur + inc)
        .to_human_string()
        .ok_or(IncrFloatError::NanOrInfinity)
}

/// Adds two finite extended values exactly, then rounds once.
fn add_finite(a: (bool, u64, i32), b: (bool, u64, i32)) -> LongDouble {
    let zero = |neg| LongDouble {
        neg,
        kind: LdKind::Finite { mant: 0, exp: 0 },
    };
    match (a.1, b.1) {
        // IEEE: -0 + -0 is -0, any other sum of zeros is +0.
        (0, 0) => return zero(a.0 && b.0),
        (0, _) => return zero(b.0).with_finite(b.1, b.2),
        (_, 0) => return zero(a.0).with_finite(a.1, a.2),
        _ => {}
    }
    // Align both on the smaller exponent; the bignum holds the exact sum.
    let base = a.2.min(b.2);
    let widen = |m: u64, e: i32| {
        let mut n = Big::from_u128(u128::from(m));
        n.shl(u64::from((e - base).unsigned_abs()));
        n
    };
    let (mut x, y) = (widen(a.1, a.2), widen(b.1, b.2));
    let (neg, sum) = if a.0 == b.0 {
        x.add(&y);
        (a.0, x)
    } else {
        match x.cmp(&y) {
            Ordering::Equal => return zero(false),
            Ordering::Greater => {
                x.sub(&y);
                (a.0, x)
            }
            Ordering::Less => {
                let mut y = y;
                y.sub(&x);
                (b.0, y)
            }
        }
    };
    let ratio = Ratio {
        neg,
        num: sum,
        den: Big::from_u128(1),
        exp2: i64::from(base),
    };
    match round_ratio(&ratio, F80) {
        Rounded::Finite { mant, exp } => LongDouble {
            neg,
            kind: LdKind::Finite {
                mant: u64::try_from(mant).expect("64-bit mantissa"),
                exp,
            },
        },
        // A sum of two non-zero values never underflows to zero: the
        // exact result is a multiple of the smallest subnormal.
        Rounded::Zero => zero(false),
        Rounded::Inf => LongDouble {
            neg,
            kind: LdKind::Inf,
        },
    }
}

impl LongDouble {
    /// Replaces the finite payload, keeping the sign (helper for sums with
    /// a zero operand, which are exact).
    fn with_finite(self, mant: u64, exp: i32) -> LongDouble {
        LongDouble {
            neg: self.neg,
            kind: LdKind::Finite { mant, exp },
        }
    }
}

// ---------------------------------------------------------------------------
// strtod-compatible scanning and correct rounding.
// ---------------------------------------------------------------------------

/// A value `(-1)^neg * num / den * 2^exp2`, with `num > 0`.
struct Ratio {
    neg: bool,
    num: Big,
    den: Big,
    exp2: i64,
}

/// What `strtod` would make of a complete string.
enum Literal {
    /// `inf` / `infinity`: infinite without a range error.
    Inf { neg: bool },
    /// An exact zero such as `0`, `-0.0`, `0e-500`, `0x0p9`.
    Zero { neg: bool },
    /// A non-zero finite literal, to be rounded to a target format.
    Finite(Ratio),
    /// So large that every supported format overflows (range error).
    Overflow { neg: bool },
    /// Non-zero but so small that every supported format gives zero.
    Underflow { neg: bool },
}

/// Scans a whole string as `strtod` would, without skipping whitespace;
/// `None` unless the entire string is one number (NaN counts as invalid).
fn scan(s: &[u8]) -> Option<Literal> {
    let (neg, body) = match s.split_first()? {
        (b'-', rest) => (true, rest),
        (b'+', rest) => (false, rest),
        _ => (false, s),
    };
    if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
        return Some(Literal::Inf { neg });
    }
    if body.len() >= 2 && body[0] == b'0' && (body[1] | 0x20) == b'x' {
        // Without hex digits strtod would stop after the "0", leaving the
        // "x…" as garbage, so a failed hex scan is a failed parse.
        return scan_hex(neg, &body[2..]);
    }
    scan_decimal(neg, body)
}

/// Reads `[+-]digits` as an exponent, saturating far beyond any range.
fn scan_exponent(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.split_first()? {
        (b'-', rest) => (true, rest),
        (b'+', rest) => (false, rest),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = digits.iter().fold(0i64, |acc, &d| {
        (acc * 10 + i64::from(d - b'0')).min(1_000_000_000_000)
    });
    Some(if neg { -v } else { v })
}

/// Splits `digits[.digits]` at the start of `s`; returns the integer and
/// fraction digits and the rest. `None` when there is no digit at all.
fn split_mantissa(s: &[u8], is_digit: fn(&u8) -> bool) -> Option<(&[u8], &[u8], &[u8])> {
    let int_len = s.iter().take_while(|c| is_digit(c)).count();
    let (int, rest) = s.split_at(int_len);
    let (frac, rest) = match rest.split_first() {
        Some((b'.', after)) => {
            let n = after.iter().take_while(|c| is_digit(c)).count();
            after.split_at(n)
        }
        _ => (&rest[..0], rest),
    };
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    Some((int, frac, rest))
}

fn scan_decimal(neg: bool, s: &[u8]) -> Option<Literal> {
    let (int, frac, rest) = split_mantissa(s, u8::is_ascii_digit)?;
    let exp = match rest.split_first() {
        None => 0,
        Some((e, tail)) if (e | 0x20) == b'e' => scan_exponent(tail)?,
        Some(_) => return None,
    };
    let all: Vec<u8> = int.iter().chain(frac).copied().collect();
    let start = all.iter().position(|&d| d != b'0');
    let Some(start) = start else {
        return Some(Literal::Zero { neg });
    };
    let end = all
        .iter()
        .rposition(|&d| d != b'0')
        .expect("has a non-zero digit")
        + 1;
    let digits = &all[start..end];
    // Value = digits * 10^exp10.
    let exp10 = exp - frac.len() as i64 + (all.len() - end) as i64;
    let lead = exp10 + digits.len() as i64 - 1;
    // Far outside even the 80-bit range (about 1e4932 down to 4e-4951):
    // decide without building huge numbers.
    if lead > 5000 {
        return Some(Literal::Overflow { neg });
    }
    if lead < -5000 {
        return Some(Literal::Underflow { neg });
    }
    let mut num = Big::from_u128(0);
    for &d in digits {
        num.mul_small(10);
        num.add_small(u32::from(d - b'0'));
    }
    let mut den = Big::from_u128(1);
    if exp10 >= 0 {
        num.mul_pow(10, exp10 as u64);
    } else {
        den.mul_pow(10, exp10.unsigned_abs());
    }
    Some(Literal::Finite(Ratio {
        neg,
        num,
        den,
        exp2: 0,
    }))
}

fn scan_hex(neg: bool, s: &[u8]) -> Option<Literal> {
    let (int, frac, rest) = split_mantissa(s, u8::is_ascii_hexdigit)?;
    let exp = match rest.split_first() {
        None => 0,
        Some((p, tail)) if (p | 0x20) == b'p' => scan_exponent(tail)?,
        Some(_) => return None,
    };
    let mut num = Big::from_u128(0);
    for &d in int.iter().chain(frac) {
        let v = char::from(d).to_digit(16).expect("checked hex digit");
        num.shl(4);
        num.add_small(v);
    }
    if num.is_zero() {
        return Some(Literal::Zero { neg });
    }
    let exp2 = exp - 4 * frac.len() as i64;
    let top = exp2 + num.bit_len() as i64 - 1;
    if top > 16_400 {
        return Some(Literal::Overflow { neg });
    }
    if top < -16_500 {
        return Some(Literal::Underflow { neg });
    }
    Some(Literal::Finite(Ratio {
        neg,
        num,
        den: Big::from_u128(1),
        exp2,
    }))
}

/// A binary floating-point format: `prec` mantissa bits (including the
/// leading one), normal exponents from `emin` to `emax` (of the leading
/// bit), with gradual underflow below `emin`.
#[derive(Clone, Copy)]
struct Format {
    prec: u32,
    emin: i64,
    emax: i64,
}

/// IEEE binary64.
const F64: Format = Format {
    prec: 53,
    emin: -1022,
    emax: 1023,
};

/// x87 extended precision.
const F80: Format = Format {
    prec: 64,
    emin: -16382,
    emax: 16383,
};

/// The outcome of rounding a positive value to a [`Format`].
enum Rounded {
    /// Underflowed to zero.
    Zero,
    /// `mant * 2^exp` with `mant < 2^prec`.
    Finite { mant: u128, exp: i32 },
    /// Overflowed.
    Inf,
}

/// Rounds `|r|` to the nearest value of `fmt`, ties to even — what glibc's
/// `strtod`/`strtold` and the FPU do in the default rounding mode.
fn round_ratio(r: &Ratio, fmt: Format) -> Rounded {
    let prec = i64::from(fmt.prec);
    // num/den lies in [2^(k-1), 2^(k+1)); scale so the integer quotient has
    // at least prec + 3 bits (guard, round and spare), keeping a sticky bit
    // for whatever the division leaves.
    let k = r.num.bit_len() as i64 - r.den.bit_len() as i64;
    let shift = prec + 3 - k;
    let (mut num, mut den) = (r.num.clone(), r.den.clone());
    if shift >= 0 {
        num.shl(shift as u64);
    } else {
        den.shl(shift.unsigned_abs());
    }
    let (q, sticky) = num.div_small_quotient(&den);
    // Value = (q + fraction) * 2^base.
    let base = r.exp2 - shift;
    let top = 127 - i64::from(q.leading_zeros()) + base;
    let lsb = (top - (prec - 1)).max(fmt.emin - (prec - 1));
    let drop = lsb - base;
    debug_assert!(drop >= 1);
    if drop >= 127 {
        // q < 2^(prec + 5), so the value is below half the smallest step.
        return Rounded::Zero;
    }
    let drop = drop as u32;
    let mut mant = q >> drop;
    let rem = q & ((1u128 << drop) - 1);
    let half = 1u128 << (drop - 1);
    let up = rem > half || (rem == half && (sticky || mant & 1 == 1));
    let mut lsb = lsb;
    if up {
        mant += 1;
        if mant == 1u128 << prec {
            mant >>= 1;
            lsb += 1;
        }
    }
    if mant == 0 {
        return Rounded::Zero;
    }
    let top = 127 - i64::from(mant.leading_zeros()) + lsb;
    if top > fmt.emax {
        return Rounded::Inf;
    }
    Rounded::Finite {
        mant,
        exp: i32::try_from(lsb).expect("exponent within format range"),
    }
}

/// Builds an `f64` from a rounded binary64 mantissa and exponent.
fn f64_from_parts(neg: bool, mant: u128, exp: i32) -> f64 {
    let mant = u64::try_from(mant).expect("53-bit mantissa");
    let bits = if mant >= 1 << 52 {
        let biased = u64::try_from(i64::from(exp) + 52 + 1023).expect("normal exponent");
        (biased << 52) | (mant & ((1 << 52) - 1))
    } else {
        // Subnormal: the exponent is always the minimum, -1074.
        mant
    };
    let v = f64::from_bits(bits);
    if neg {
        -v
    } else {
        v
    }
}

// ---------------------------------------------------------------------------
// A minimal unsigned bignum: just what exact parsing and printing need.
// ---------------------------------------------------------------------------

/// Little-endian base-2^32 unsigned integer without leading zero limbs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn from_u128(mut v: u128) -> Big {
        let mut limbs = Vec::new();
        while v != 0 {
            limbs.push(v as u32);
            v >>= 32;
        }
        Big(limbs)
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn bit_len(&self) -> u64 {
        match self.0.last() {
            None => 0,
            Some(&top) => self.0.len() as u64 * 32 - u64::from(top.leading_zeros()),
        }
    }

    fn mul_small(&mut self, m: u32) {
        let mut carry = 0u64;
        for limb in &mut self.0 {
            let v = u64::from(*limb) * u64::from(m) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
        self.trim();
    }

    fn add_small(&mut self, a: u32) {
        let mut carry = u64::from(a);
        for limb in &mut self.0 {
            if carry == 0 {
                return;
            }
            let v = u64::from(*limb) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
    }

    /// Multiplies by `base^exp` (base 5 or 10) in word-sized chunks.
    fn mul_pow(&mut self, base: u32, mut exp: u64) {
        // Largest power of `base` that fits in a u32.
        let (mut chunk, mut chunk_exp) = (1u32, 0u64);
        while let Some(next) = chunk.checked_mul(base) {
            chunk = next;
            chunk_exp += 1;
        }
        while exp >= chunk_exp {
            self.mul_small(chunk);
            exp -= chunk_exp;
        }
        self.mul_small(base.pow(exp as u32));
    }

    fn shl(&mut self, bits: u64) {
        if self.is_zero() {
            return;
        }
        let words = (bits / 32) as usize;
        let bits = (bits % 32) as u32;
        if bits != 0 {
            let mut carry = 0u32;
            for limb in &mut self.0 {
                let v = (*limb << bits) | carry;
                carry = *limb >> (32 - bits);
                *limb = v;
            }
            if carry != 0 {
                self.0.push(carry);
            }
        }
        self.0.splice(0..0, std::iter::repeat_n(0, words));
    }

    fn shr1(&mut self) {
        let mut carry = 0u32;
        for limb in self.0.iter_mut().rev() {
            let v = (*limb >> 1) | (carry << 31);
            carry = *limb & 1;
            *limb = v;
        }
        self.trim();
    }

    fn add(&mut self, other: &Big) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        let mut carry = 0u64;
        for (i, limb) in self.0.iter_mut().enumerate() {
            let v = u64::from(*limb) + u64::from(other.0.get(i).copied().unwrap_or(0)) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
    }

    /// `self -= other`; requires `self >= other`.
    fn sub(&mut self, other: &Big) {
        let mut borrow = 0i64;
        for (i, limb) in self.0.iter_mut().enumerate() {
            let v = i64::from(*limb) - i64::from(other.0.get(i).copied().unwrap_or(0)) - borrow;
            borrow = i64::from(v < 0);
            *limb = v.rem_euclid(1 << 32) as u32;
        }
        debug_assert_eq!(borrow, 0);
        self.trim();
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    /// `floor(self / den)` for quotients below 2^127, plus whether the
    /// remainder is non-zero; plain binary long division.
    fn div_small_quotient(mut self, den: &Big) -> (u128, bool) {
        let (nb, db) = (self.bit_len(), den.bit_len());
        if nb < db {
            return (0, !self.is_zero());
        }
        let span = nb - db;
        assert!(span < 127, "quotient too wide");
        let mut d = den.clone();
        d.shl(span);
        let mut q = 0u128;
        for i in (0..=span).rev() {
            if self.cmp(&d) != Ordering::Less {
                self.sub(&d);
                q |= 1 << i;
            }
            d.shr1();
        }
        (q, !self.is_zero())
    }

    /// Divides in place by a small divisor, returning the remainder.
    fn divrem_small(&mut self, d: u32) -> u32 {
        let mut rem = 0u64;
        for limb in self.0.iter_mut().rev() {
            let v = (rem << 32) | u64::from(*limb);
            *limb = (v / u64::from(d)) as u32;
            rem = v % u64::from(d);
        }
        self.trim();
        rem as u32
    }

    fn to_decimal(&self) -> String {
        if self.is_zero() {
            return "0".to_owned();
        }
        let mut n = self.clone();
        let mut chunks = Vec::new();
        while !n.is_zero() {
            chunks.push(n.divrem_small(1_000_000_000));
        }
        let mut out = chunks.pop().expect("non-zero").to_string();
        for c in chunks.iter().rev() {
            out.push_str(&format!("{c:09}"));
        }
        out
    }
}

/// C's atoi as glibc has it (`(int) strtol(s, NULL, 10)`): optional blanks
/// and sign, then the digits there are (0 when none); a value past `long`
/// saturates, and the cast to `int` keeps its low 32 bits.
pub fn atoi(s: &[u8]) -> i64 {
    let start = s
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))
        .unwrap_or(s.len());
    let s = &s[start..];
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let magnitude = digits
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .try_fold(0i64, |n, &d| {
            n.checked_mul(10)?.checked_sub(i64::from(d - b'0'))
        });
    // Accumulated as a negative number, so that LONG_MIN fits.
    let long = match (magnitude, neg) {
        (Some(n), true) => n,
        (Some(n), false) => n.checked_neg().unwrap_or(i64::MAX),
        (None, true) => i64::MIN,
        (None, false) => i64::MAX,
    };
    i64::from(long as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_i64_accepts_canonical_integers() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"1"), Some(1));
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"1234567890"), Some(1_234_567_890));
    }

    #[test]
    fn parse_i64_rejects_what_redis_rejects() {
        // Each of these got "ERR value is not an integer or out of range"
        // from INCRBY, from INCR on a stored value, and from EXPIRE.
        for s in [
            &b"-0"[..],
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"00",
            b"-01",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"18446744073709551616",
            b"",
            b"-",
            b"1a",
            b"0x10",
            b"1e3",
            b"1.0",
            b"99999999999999999999",
            b"-99999999999999999999",
            b"00000000000000000001",
            b"1\0",
            b"\xd9\xa1",
        ] {
            assert_eq!(parse_i64(s), None, "{:?}", String::from_utf8_lossy(s));
        }
    }

    fn f(s: &str) -> Option<f64> {
        parse_f64(s.as_bytes())
    }

    #[test]
    fn parse_f64_accepts_strtod_forms() {
        // All accepted by `ZADD z <s> m` on Redis 7.0.15.
        assert_eq!(f("1e3"), Some(1000.0));
        assert_eq!(f(".5"), Some(0.5));
        assert_eq!(f("5."), Some(5.0));
        assert_eq!(f("+1.5"), Some(1.5));
        assert_eq!(f("+.5"), Some(0.5));
        assert_eq!(f("-.5e-2"), Some(-0.005));
        assert_eq!(f("00012"), Some(12.0));
        assert_eq!(f("1E3"), Some(1000.0));
        assert_eq!(f("1e+3"), Some(1000.0));
        assert_eq!(f("1.e3"), Some(1000.0));
        assert_eq!(f("inf"), Some(f64::INFINITY));
        assert_eq!(f("+inf"), Some(f64::INFINITY));
        assert_eq!(f("-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(f("infinity"), Some(f64::INFINITY));
        assert_eq!(f("-Infinity"), Some(f64::NEG_INFINITY));
        assert_eq!(f("iNfInItY"), Some(f64::INFINITY));
        assert_eq!(f("INF"), Some(f64::INFINITY));
        assert_eq!(f("0x10"), Some(16.0));
        assert_eq!(f("0x1p3"), Some(8.0));
        assert_eq!(f("0x.8"), Some(0.5));
        assert_eq!(f("0X1P-1"), Some(0.5));
        assert_eq!(f("0x1P+3"), Some(8.0));
        assert_eq!(f("0x1.8"), Some(1.5));
        assert_eq!(f("0x1.fffffffffffffp1023"), Some(f64::MAX));
        assert_eq!(f("1.7976931348623157e308"), Some(f64::MAX));
        assert_eq!(f("0e-500"), Some(0.0));
        assert!(f("-0").unwrap().is_sign_negative());
        assert!(f("+0").unwrap().is_sign_positive());
        // Subnormal results are fine; only a zero result is a range error.
        assert_eq!(f("1e-310"), Some(1e-310));
        assert_eq!(f("3e-324"), Some(5e-324));
        assert_eq!(f("5e-324"), Some(5e-324));
    }

    #[test]
    fn parse_f64_rejects_what_redis_rejects() {
        for s in [
            "", ".", "infin", "nan", "NaN", "-nan", "nan(123)", "0x", "0x1p", "1e", " 1", "1 ",
            "\t1", "1e400", "-1e400", "1e-400", "2e-324", "1_0", "1,5", "0x1p1024", ".e3", "e3",
            "0x.p1", "  ", "-", "+", "1e-5000", "1\0", "0xg", "--1", "+-1", "1e+-3", "inf ",
        ] {
            assert_eq!(f(s), None, "{s:?}");
        }
    }

    /// A small deterministic generator for the cross-checks below.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 11
        }
    }

    #[test]
    fn parse_f64_rounds_like_std() {
        // Rust's parser is correctly rounded, as glibc's strtod is: both
        // must agree on every decimal we can throw at them.
        let mut rng = Lcg(42);
        for _ in 0..20_000 {
            let ndigits = 1 + rng.next() % 30;
            let digits: String = (0..ndigits)
                .map(|_| char::from(b'0' + (rng.next() % 10) as u8))
                .collect();
            let exp = (rng.next() % 700) as i64 - 350;
            let s = format!("{digits}e{exp}");
            let want: f64 = s.parse().unwrap();
            let got = f(&s);
            if want.is_infinite() || (want == 0.0 && digits.bytes().any(|d| d != b'0')) {
                assert_eq!(got, None, "{s}");
            } else {
                assert_eq!(got.map(f64::to_bits), Some(want.to_bits()), "{s}");
            }
        }
        // Just below half the smallest subnormal: rounds to zero, which
        // is a range error.
        assert_eq!(f("2.4703282292062327e-324"), None);
        // Halfway cases and subnormal boundaries.
        for s in [
            "9007199254740993",
            "9007199254740995",
            "2.4703282292062328e-324",
            "2.2250738585072011e-308",
            "2.2250738585072012e-308",
            "1.7976931348623158e308",
            "0.1",
            "0.3",
            "123456789012345678901234567890",
        ] {
            let want: f64 = s.parse().unwrap();
            assert_eq!(f(s).map(f64::to_bits), Some(want.to_bits()), "{s}");
        }
        assert_eq!(f("1.7976931348623159e308"), None);
        // Random bit patterns survive a round trip through their text.
        for _ in 0..5_000 {
            let v = f64::from_bits(rng.next() << 11 | rng.next() & 0x7ff);
            if v.is_finite() && v != 0.0 {
                assert_eq!(f(&format!("{v:e}")).map(f64::to_bits), Some(v.to_bits()));
            }
        }
    }

    #[test]
    fn parse_f64_hex_rounding() {
        // 2^53 + 1 is a tie between 2^53 and 2^53 + 2: even wins.
        assert_eq!(f("0x20000000000001"), Some(9007199254740992.0));
        assert_eq!(f("0x20000000000003"), Some(9007199254740996.0));
        assert_eq!(f("0x1p-1074"), Some(5e-324));
        assert_eq!(f("0x1p-1075"), None);
        assert_eq!(f("0x1.8p-1075"), Some(5e-324));
        assert_eq!(f("0x0.0000000000001p-1022"), Some(5e-324));
    }

    #[test]
    fn parse_f64_range_is_lax() {
        let r = |s: &[u8]| parse_f64_range(s);
        // Observed with ZRANGEBYSCORE / ZCOUNT on Redis 7.0.15.
        assert_eq!(r(b""), Some(0.0));
        assert_eq!(r(b" "), None);
        assert_eq!(r(b"\t0"), Some(0.0));
        assert_eq!(r(b" 1"), Some(1.0));
        assert_eq!(r(b"1 "), None);
        assert_eq!(r(b"1e400"), Some(f64::INFINITY));
        assert_eq!(r(b"-1e400"), Some(f64::NEG_INFINITY));
        assert_eq!(r(b"1e-400"), Some(0.0));
        assert_eq!(r(b"0x10"), Some(16.0));
        assert_eq!(r(b" inf"), Some(f64::INFINITY));
        assert_eq!(r(b"1\0x"), Some(1.0));
        assert_eq!(r(b" -0x1p0"), Some(-1.0));
        assert_eq!(r(b"nan"), None);
    }

    #[test]
    fn format_double_observed() {
        for (v, want) in [
            (0.0, "0"),
            (-0.0, "-0"),
            (1.1, "1.1000000000000001"),
            (0.1, "0.10000000000000001"),
            (1e17, "1e+17"),
            (1e16, "10000000000000000"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (1e15, "1000000000000000"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (123456.789, "123456.789"),
            (-1.5, "-1.5"),
            (1e21, "1e+21"),
            (4503599627370497.0, "4503599627370497"),
            (9007199254740993.0, "9007199254740992"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "4.9406564584124654e-324"),
            (1e-310, "9.9999999999999694e-311"),
            (-100.0, "-100"),
            (0.30000000000000004, "0.30000000000000004"),
            (1e22, "1e+22"),
            (-0.005, "-0.0050000000000000001"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            // %g keeps 17 significant digits then trims zeros.
            (1e100, "1e+100"),
            (0.5, "0.5"),
            (1e-4, "0.0001"),
            (1.5e-4, "0.00014999999999999999"),
        ] {
            assert_eq!(format_double(v), want, "{v:e}");
        }
    }

    /// The shortcut for whole numbers prints what the general path does.
    #[test]
    fn format_double_whole_numbers_agree_with_the_digits_path() {
        let edges = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            9007199254740992.0,
            9007199254740994.0,
            99999999999999984.0,
            -99999999999999984.0,
            1e16,
            123456789.0,
        ];
        let mut x = 1.0f64;
        let powers = std::iter::from_fn(|| {
            x *= 3.0;
            (x < 1e17).then_some(x)
        });
        for v in edges.into_iter().chain(powers) {
            for v in [v, -v, v + 1.0, v - 1.0] {
                assert_eq!(format_double(v), format_double_digits(v), "{v:e}");
            }
        }
    }

    #[test]
    fn format_incrbyfloat_common_cases() {
        let g = |v: f64| format_incrbyfloat(v).unwrap();
        assert_eq!(g(10.5 + 0.1), "10.6");
        assert_eq!(g(3.0e3), "3000");
        assert_eq!(g(5.0e3 + 2.0e2), "5200");
        assert_eq!(g(-0.1), "-0.1");
        assert_eq!(g(1e17), "100000000000000000");
        assert_eq!(g(1e20), "100000000000000000000");
        assert_eq!(g(1e25), "10000000000000000000000000");
        assert_eq!(g(1e-10), "0.0000000001");
        assert_eq!(g(1e-18), "0");
        assert_eq!(g(-1e-18), "0");
        assert_eq!(g(5e-18), "0");
        assert_eq!(g(1.5e-17), "0.00000000000000002");
        assert_eq!(g(2.5e-17), "0.00000000000000002");
        assert_eq!(g(-0.0), "0");
        assert_eq!(g(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(g(7.0), "7");
        let long: f64 = "0.123456789012345678901234".parse().unwrap();
        assert_eq!(g(long), "0.12345678901234568");
        assert_eq!(g(0.000003814697265625), "0.00000381469726562");
        let mut v = 1.0;
        for _ in 0..9 {
            v += 0.1;
        }
        // Redis (long double) says "1.9": the f64 sum's error shows here.
        assert_eq!(g(v), "1.9000000000000008");
        assert_eq!(format_incrbyfloat(f64::INFINITY), None);
        assert_eq!(format_incrbyfloat(f64::NAN), None);
    }

    fn ld(s: &str) -> LongDouble {
        LongDouble::parse(s.as_bytes()).unwrap()
    }

    fn incr(cur: Option<&str>, by: &str) -> Result<String, IncrFloatError> {
        incrbyfloat(cur.map(str::as_bytes), by.as_bytes())
    }

    #[test]
    fn incrbyfloat_matches_redis() {
        // (stored value, increment, Redis 7.0.15 reply)
        for (cur, by, want) in [
            (Some("10.5"), "0.1", "10.6"),
            (Some("3.0e3"), "0", "3000"),
            (Some("5.0e3"), "2.0e2", "5200"),
            (None, "-0.1", "-0.1"),
            (None, "1e17", "100000000000000000"),
            (None, "1e20", "100000000000000000000"),
            (None, "1e-10", "0.0000000001"),
            (Some("1.1"), "2.2", "3.3"),
            (Some("1000.1"), "0.2", "1000.29999999999999999"),
            (None, "1e-18", "0"),
            (None, "1.5e-17", "0.00000000000000002"),
            (None, "5e-18", "0"),
            (None, "1e30", "1000000000000000000024696061952"),
            (None, "1e25", "10000000000000000000000000"),
            (Some("0.1"), "0.2", "0.3"),
            (Some("1"), "-1", "0"),
            (Some("-1"), "0.5", "-0.5"),
            (Some("1e17"), "1", "100000000000000001"),
            (Some("1e19"), "1", "10000000000000000001"),
            (
                Some("123456789.123456789"),
                "0",
                "123456789.12345678899873747",
            ),
            (None, "0.123456789012345678901234", "0.12345678901234568"),
            (Some("-0"), "0", "0"),
            (Some("1e20"), "0.1", "100000000000000000000"),
            (Some("9007199254740993"), "0", "9007199254740993"),
            (None, "3.3", "3.3"),
            (None, "99.99", "99.99"),
            (Some("0.1"), "0.1", "0.2"),
            (Some("100"), "0.3", "100.3"),
            (None, "2.5e-17", "0.00000000000000002"),
            (None, "0.000003814697265625", "0.00000381469726562"),
            (None, "-1e-18", "0"),
            (None, "-0.000000000000000005", "0"),
            (None, "0.000000000000000015", "0.00000000000000002"),
            (None, "0.000000000000000025", "0.00000000000000002"),
            (Some("5"), "-5", "0"),
            (None, "7.0", "7"),
            (None, "0x1p-18", "0.00000381469726562"),
            (None, "1e3", "1000"),
            (None, ".5", "0.5"),
            (None, "5.", "5"),
            (None, "0x10", "16"),
            (None, "0x.8", "0.5"),
            (None, "+1.5", "1.5"),
            (None, "-.5e-2", "-0.005"),
            (None, "1e-400", "0"),
            (None, "1e-310", "0"),
            (None, "1e-4950", "0"),
            (None, "-0", "0"),
            (Some("1"), "-1e-18", "1"),
            (Some("1000.7"), "0", "1000.70000000000000001"),
        ] {
            assert_eq!(incr(cur, by).as_deref(), Ok(want), "{cur:?} + {by}");
        }
    }

    #[test]
    fn incrbyfloat_huge_values() {
        let r = incr(None, "1e400").unwrap();
        assert_eq!(r.len(), 401);
        assert!(r.starts_with(
            "100000000000000000002818806839475865145864534336290520386259106935396855340"
        ));
        let r = incr(None, "-1e400").unwrap();
        assert!(r.starts_with(
            "-10000000000000000000281880683947586514586453433629052038625910693539685534"
        ));
        let r = incr(None, "1.7976931348623157e308").unwrap();
        assert!(r.starts_with("1797693134862315699959210467741044340483864469443291784853144207651766285231243963547018686083870855"));
        let r = incr(None, "0x1.fffffffffffffp1023").unwrap();
        assert!(r.starts_with(
            "179769313486231570814527423731704356798070567525844996598917476803157260780"
        ));
        let r = incr(None, "0x1p1024").unwrap();
        assert!(r.starts_with(
            "179769313486231590772930519078902473361797697894230657273430081157732675805"
        ));
        let r = incr(None, "1e4932").unwrap();
        assert_eq!(r.len(), 4933);
        assert!(r.starts_with(
            "10000000000000000000060189493879638913238377742545331147737850413525330194"
        ));
    }

    #[test]
    fn incrbyfloat_chains() {
        // Each step stores the text and re-parses it, exactly as Redis.
        let run = |start: Option<&str>, by: &str, n: usize| {
            let mut cur = start.map(str::to_owned);
            let mut out = Vec::new();
            for _ in 0..n {
                let next = incr(cur.as_deref(), by).unwrap();
                out.push(next.clone());
                cur = Some(next);
            }
            out
        };
        let tenths: Vec<String> = (11..=35)
            .map(|i| format_incrbyfloat(f64::from(i) / 10.0).unwrap())
            .collect();
        assert_eq!(run(Some("1"), "0.1", 25), tenths);
        assert_eq!(
            run(None, "1.1", 12),
            ["1.1", "2.2", "3.3", "4.4", "5.5", "6.6", "7.7", "8.8", "9.9", "11", "12.1", "13.2"]
        );
        assert_eq!(
            run(None, "1000.7", 12),
            [
                "1000.70000000000000001",
                "2001.40000000000000002",
                "3002.10000000000000009",
                "4002.80000000000000004",
                "5003.5",
                "6004.20000000000000018",
                "7004.90000000000000036",
                "8005.60000000000000053",
                "9006.30000000000000071",
                "10007.00000000000000089",
                "11007.70000000000000107",
                "12008.40000000000000124",
            ]
        );
        assert_eq!(
            run(None, "3.7e15", 10),
            [
                "3700000000000000",
                "7400000000000000",
                "11100000000000000",
                "14800000000000000",
                "18500000000000000",
                "22200000000000000",
                "25900000000000000",
                "29600000000000000",
                "33300000000000000",
                "37000000000000000",
            ]
        );
    }

    #[test]
    fn incrbyfloat_errors() {
        use IncrFloatError::*;
        assert_eq!(incr(Some("1e4932"), "1e4932"), Err(NanOrInfinity));
        assert_eq!(incr(Some("-1e4932"), "-1e4932"), Err(NanOrInfinity));
        assert_eq!(incr(None, "inf"), Err(NanOrInfinity));
        assert_eq!(incr(None, "-Infinity"), Err(NanOrInfinity));
        assert_eq!(incr(Some("inf"), "1"), Err(NanOrInfinity));
        assert_eq!(incr(Some("inf"), "-inf"), Err(NanOrInfinity));
        // The stored value is checked before the increment.
        assert_eq!(incr(Some("abc"), "inf"), Err(NotAFloat));
        assert_eq!(incr(Some("inf"), "abc"), Err(NotAFloat));
        for bad in [
            "", ".", "nan", "1e4933", "1e-4960", "1e-5000", " 1", "1 ", "0x", "1\0", "\0",
            "1\0abc", "-\0", "infin",
        ] {
            assert_eq!(incr(None, bad), Err(NotAFloat), "{bad:?}");
        }
        // 5120-byte strings are refused even when the value is tiny.
        let long = format!("{}1", "0".repeat(5119));
        assert_eq!(incr(None, &long), Err(NotAFloat));
        assert_eq!(incr(Some(&long), "1"), Err(NotAFloat));
        let ok = format!("{}1", "0".repeat(5118));
        assert_eq!(incr(None, &ok).as_deref(), Ok("1"));
    }

    #[test]
    fn hincrbyfloat_matches_redis() {
        use IncrFloatError::*;
        let h = |cur: Option<&str>, by: &str| hincrbyfloat(cur.map(str::as_bytes), by.as_bytes());
        assert_eq!(h(Some("abc"), "x"), Err(NotAFloat));
        assert_eq!(h(Some("abc"), "inf"), Err(IncrementNotFinite));
        assert_eq!(h(Some("abc"), "1"), Err(HashValueNotAFloat));
        assert_eq!(
            h(Some("1000.7"), "0").as_deref(),
            Ok("1000.70000000000000001")
        );
        let long = format!("{}1", "0".repeat(5119));
        assert_eq!(h(Some(&long), "1"), Err(HashValueNotAFloat));
        assert_eq!(h(None, "0x1p-18").as_deref(), Ok("0.00000381469726562"));
        assert_eq!(h(Some("inf"), "1"), Err(NanOrInfinity));
    }

    #[test]
    fn long_double_arithmetic() {
        // 2^64 + 1 is not representable: ties to even gives 2^64.
        let big = ld("18446744073709551616");
        assert_eq!(big + ld("1"), big);
        assert_eq!(
            (big + ld("3")).to_human_string().unwrap(),
            "18446744073709551620"
        );
        // Signed zeros.
        assert_eq!(ld("-0") + ld("-0"), ld("-0"));
        assert_eq!(ld("-0") + ld("0"), ld("0"));
        assert_eq!(ld("1.5") + ld("-1.5"), ld("0"));
        // Smallest subnormal is 2^-16445; half of it rounds to zero.
        assert!(LongDouble::parse(b"0x1p-16445").is_some());
        assert!(LongDouble::parse(b"0x1p-16446").is_none());
        assert!(LongDouble::parse(b"0x1.8p-16446").is_some());
        assert!(!ld("inf").is_finite());
        assert!(ld("1").is_finite());
        assert_eq!(LongDouble::ZERO.to_human_string().unwrap(), "0");
    }

    #[test]
    fn bignum_basics() {
        let mut n = Big::from_u128(1);
        n.mul_pow(10, 30);
        assert_eq!(n.to_decimal(), format!("1{}", "0".repeat(30)));
        let mut m = n.clone();
        m.shl(70);
        m.add(&Big::from_u128(12345));
        let (q, sticky) = m.div_small_quotient(&n);
        assert_eq!(q, 1u128 << 70);
        assert!(sticky);
        let mut t = Big::from_u128(u128::MAX);
        t.sub(&Big::from_u128(u128::MAX - 7));
        assert_eq!(t, Big::from_u128(7));
        assert_eq!(Big::from_u128(0).to_decimal(), "0");
    }

    /// atoi as glibc's: blanks, sign, digits; past `long` it saturates,
    /// and the cast to `int` keeps the low 32 bits.
    #[test]
    fn atoi_reads_as_c_does() {
        assert_eq!(atoi(b"2x"), 2);
        assert_eq!(atoi(b" \t\x0b-12abc"), -12);
        assert_eq!(atoi(b"+7"), 7);
        assert_eq!(atoi(b"abc"), 0);
        assert_eq!(atoi(b""), 0);
        assert_eq!(atoi(b"4294967297"), 1);
        assert_eq!(atoi(b"99999999999999999999"), -1);
        assert_eq!(atoi(b"-99999999999999999999"), 0);
    }
}
